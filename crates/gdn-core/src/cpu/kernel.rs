//! Inner loops of the CPU backend: per state row, over the contiguous K dimension, in f32.
//!
//! Every loop walks fixed chunks of `LANES` elements with `LANES`-wide accumulator arrays, so LLVM
//! vectorises it for any x86-64 level (SSE2: 4 registers per array; AVX2: 2). The `FMA` parameter selects
//! fused multiply-adds: the whole task is instantiated twice, once inside a `#[target_feature(avx2, fma)]`
//! function (chosen at run time), once for the baseline target, where `mul_add` would be a libm call.
//!
//! On x86-64 with AVX2+FMA (checked at run time) the row operations are hand-written intrinsics instead:
//! there LLVM's SLP vectoriser pairs the two dot-product accumulators into 2-wide vectors (measured 5x
//! slower). Rows are processed in pairs so that k, k', q' are loaded once for two rows.
//!
//! One-pass step: the update of token t and the dot products token t+1 needs are fused,
//! `s ← g·s + δ·k_t; u' = s·k_{t+1}; sq' = s·q_{t+1}`, so each state row is read and written once per token.

use half::slice::HalfFloatSliceExt;
use half::{bf16, f16};

/// Elements per vector chunk (D = 64 and 128 are multiples).
pub const LANES: usize = 16;

#[inline(always)]
pub fn fmadd<const FMA: bool>(a: f32, b: f32, c: f32) -> f32 {
    if FMA {
        a.mul_add(b, c)
    } else {
        a * b + c
    }
}

/// A chunk as a fixed-size array (lets LLVM's SLP vectoriser see whole vectors).
#[inline(always)]
fn arr(c: &[f32]) -> &[f32; LANES] {
    c.try_into().expect("chunk of LANES")
}

#[inline(always)]
fn arr_mut(c: &mut [f32]) -> &mut [f32; LANES] {
    c.try_into().expect("chunk of LANES")
}

#[inline(always)]
fn hsum(acc: [f32; LANES]) -> f32 {
    // Pairwise, so the reduction order does not depend on the target.
    let mut w = acc;
    let mut n = LANES;
    while n > 1 {
        n /= 2;
        for i in 0..n {
            w[i] += w[i + n];
        }
    }
    w[0]
}

/// `a · b`.
#[inline(always)]
pub fn dot<const FMA: bool>(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; LANES];
    for (ac, bc) in a.chunks_exact(LANES).zip(b.chunks_exact(LANES)) {
        let (ac, bc) = (arr(ac), arr(bc));
        for j in 0..LANES {
            acc[j] = fmadd::<FMA>(ac[j], bc[j], acc[j]);
        }
    }
    hsum(acc)
}

/// Copies `src` into `dst` and returns `(src·k, src·q)`.
#[inline(always)]
pub fn load_dots_f32<const FMA: bool>(
    src: &[f32],
    dst: &mut [f32],
    k: &[f32],
    q: &[f32],
) -> (f32, f32) {
    let (mut au, mut aq) = ([0f32; LANES], [0f32; LANES]);
    let n = src.len() / LANES;
    for c in 0..n {
        let r = c * LANES..(c + 1) * LANES;
        let (sc, dc) = (arr(&src[r.clone()]), arr_mut(&mut dst[r.clone()]));
        let (kc, qc) = (arr(&k[r.clone()]), arr(&q[r]));
        *dc = *sc;
        for j in 0..LANES {
            au[j] = fmadd::<FMA>(sc[j], kc[j], au[j]);
            aq[j] = fmadd::<FMA>(sc[j], qc[j], aq[j]);
        }
    }
    (hsum(au), hsum(aq))
}

/// Converts bf16 `src` into `dst` and returns `(src·k, src·q)`.
#[inline(always)]
pub fn load_dots_bf16<const FMA: bool>(
    src: &[bf16],
    dst: &mut [f32],
    k: &[f32],
    q: &[f32],
) -> (f32, f32) {
    widen(src, dst);
    dots2::<FMA>(dst, k, q)
}

/// `(s·k, s·q)`.
#[inline(always)]
pub fn dots2<const FMA: bool>(s: &[f32], k: &[f32], q: &[f32]) -> (f32, f32) {
    let (mut au, mut aq) = ([0f32; LANES], [0f32; LANES]);
    let n = s.len() / LANES;
    for c in 0..n {
        let r = c * LANES..(c + 1) * LANES;
        let (sc, kc, qc) = (arr(&s[r.clone()]), arr(&k[r.clone()]), arr(&q[r]));
        for j in 0..LANES {
            au[j] = fmadd::<FMA>(sc[j], kc[j], au[j]);
            aq[j] = fmadd::<FMA>(sc[j], qc[j], aq[j]);
        }
    }
    (hsum(au), hsum(aq))
}

/// `s ← g·s + δ·k`, then returns `(s·k_next, s·q_next)` of the updated row.
#[inline(always)]
pub fn update_dots<const FMA: bool>(
    s: &mut [f32],
    g: f32,
    delta: f32,
    k: &[f32],
    k_next: &[f32],
    q_next: &[f32],
) -> (f32, f32) {
    let (mut au, mut aq) = ([0f32; LANES], [0f32; LANES]);
    let n = s.len() / LANES;
    for c in 0..n {
        let r = c * LANES..(c + 1) * LANES;
        let sc = arr_mut(&mut s[r.clone()]);
        let (kc, knc, qnc) = (arr(&k[r.clone()]), arr(&k_next[r.clone()]), arr(&q_next[r]));
        let mut x = [0f32; LANES];
        for j in 0..LANES {
            x[j] = fmadd::<FMA>(delta, kc[j], g * sc[j]);
        }
        *sc = x;
        for j in 0..LANES {
            au[j] = fmadd::<FMA>(x[j], knc[j], au[j]);
            aq[j] = fmadd::<FMA>(x[j], qnc[j], aq[j]);
        }
    }
    (hsum(au), hsum(aq))
}

/// `s ← g·s + δ·k` (the last token of a sequence: no next dot products).
#[inline(always)]
pub fn update<const FMA: bool>(s: &mut [f32], g: f32, delta: f32, k: &[f32]) {
    for (sc, kc) in s.chunks_exact_mut(LANES).zip(k.chunks_exact(LANES)) {
        let (sc, kc) = (arr_mut(sc), arr(kc));
        for j in 0..LANES {
            sc[j] = fmadd::<FMA>(delta, kc[j], g * sc[j]);
        }
    }
}

/// Exact bf16 → f32 (a shift; NaN payloads pass through).
#[inline(always)]
pub fn bf16_to_f32(x: bf16) -> f32 {
    f32::from_bits((x.to_bits() as u32) << 16)
}

/// f32 → bf16, round to nearest even (NaN stays NaN), branch-light so that it vectorises.
#[inline(always)]
pub fn f32_to_bf16(x: f32) -> bf16 {
    let b = x.to_bits();
    if x.is_nan() {
        return bf16::from_bits(((b >> 16) | 0x40) as u16);
    }
    let rounded = b.wrapping_add(0x7fff + ((b >> 16) & 1));
    bf16::from_bits((rounded >> 16) as u16)
}

/// Converts a bf16 slice into `dst` (same length).
#[inline(always)]
pub fn widen(src: &[bf16], dst: &mut [f32]) {
    for (d, &s) in dst.iter_mut().zip(src) {
        *d = bf16_to_f32(s);
    }
}

/// Rounds an f32 slice into bf16 `dst` (same length).
#[inline(always)]
pub fn narrow(src: &[f32], dst: &mut [bf16]) {
    for (d, &s) in dst.iter_mut().zip(src) {
        *d = f32_to_bf16(s);
    }
}

/// Converts an fp16 slice into `dst` (same length; F16C where the CPU has it).
#[inline]
pub fn widen_f16(src: &[f16], dst: &mut [f32]) {
    src.convert_to_f32_slice(dst);
}

/// Rounds an f32 slice into fp16 `dst` (same length, round to nearest even).
#[inline]
pub fn narrow_f16(src: &[f32], dst: &mut [f16]) {
    dst.convert_from_f32_slice(src);
}

/// The row operations a task needs, compiled for one instruction-set level. Each is a separate
/// (non-inlined) function: inlined into the large task body, LLVM's SLP vectoriser gives up.
/// "Two rows" arguments are `2·D` contiguous elements.
pub trait RowOps: Copy + Send + Sync {
    fn dot(self, a: &[f32], b: &[f32]) -> f32;
    /// `(s·k, s·q)`.
    fn dots2(self, s: &[f32], k: &[f32], q: &[f32]) -> (f32, f32);
    fn load_dots_f32(self, src: &[f32], dst: &mut [f32], k: &[f32], q: &[f32]) -> (f32, f32);
    fn load_dots_bf16(self, src: &[bf16], dst: &mut [f32], k: &[f32], q: &[f32]) -> (f32, f32);
    /// A block of rows (`delta.len()` rows of `k.len()`): `s_r ← g·s_r + δ_r·k`, then
    /// `u_r = s_r·kn`, `sq_r = s_r·qn`.
    #[allow(clippy::too_many_arguments)]
    fn update_dots_block(
        self,
        s: &mut [f32],
        g: f32,
        delta: &[f32],
        k: &[f32],
        kn: &[f32],
        qn: &[f32],
        u: &mut [f32],
        sq: &mut [f32],
    );
    /// A block of rows: `s_r ← g·s_r + δ_r·k` (the last token: no dot products).
    fn update_block(self, s: &mut [f32], g: f32, delta: &[f32], k: &[f32]);
    /// bf16 → f32 (same length, a multiple of 8).
    fn widen(self, src: &[bf16], dst: &mut [f32]);
    /// `dst ← g·src + δ·k`, with non-temporal stores where possible (call [`RowOps::fence`] after).
    fn update_stream(self, src: &[f32], dst: &mut [f32], g: f32, delta: f32, k: &[f32]);
    /// `dst ← src` with non-temporal stores where possible (call [`RowOps::fence`] after).
    fn copy_stream(self, src: &[f32], dst: &mut [f32]);
    /// Orders non-temporal stores before anything that follows.
    fn fence(self);
    /// The scalar multiply-add used in epilogues.
    fn fma(self, a: f32, b: f32, c: f32) -> f32;
}

/// The baseline target (SSE2 on x86-64, NEON + FMA on aarch64), auto-vectorised.
#[derive(Copy, Clone, Debug)]
pub struct Portable;

pub const PORTABLE_FMA: bool = cfg!(target_arch = "aarch64");

impl RowOps for Portable {
    #[inline(never)]
    fn dot(self, a: &[f32], b: &[f32]) -> f32 {
        dot::<PORTABLE_FMA>(a, b)
    }
    #[inline(never)]
    fn dots2(self, s: &[f32], k: &[f32], q: &[f32]) -> (f32, f32) {
        dots2::<PORTABLE_FMA>(s, k, q)
    }
    #[inline(never)]
    fn load_dots_f32(self, src: &[f32], dst: &mut [f32], k: &[f32], q: &[f32]) -> (f32, f32) {
        load_dots_f32::<PORTABLE_FMA>(src, dst, k, q)
    }
    #[inline(never)]
    fn load_dots_bf16(self, src: &[bf16], dst: &mut [f32], k: &[f32], q: &[f32]) -> (f32, f32) {
        load_dots_bf16::<PORTABLE_FMA>(src, dst, k, q)
    }
    #[inline(never)]
    fn update_dots_block(
        self,
        s: &mut [f32],
        g: f32,
        delta: &[f32],
        k: &[f32],
        kn: &[f32],
        qn: &[f32],
        u: &mut [f32],
        sq: &mut [f32],
    ) {
        for (r, row) in s.chunks_exact_mut(k.len()).enumerate().take(delta.len()) {
            (u[r], sq[r]) = update_dots::<PORTABLE_FMA>(row, g, delta[r], k, kn, qn);
        }
    }
    #[inline(never)]
    fn update_block(self, s: &mut [f32], g: f32, delta: &[f32], k: &[f32]) {
        for (row, &dr) in s.chunks_exact_mut(k.len()).zip(delta) {
            update::<PORTABLE_FMA>(row, g, dr, k);
        }
    }
    #[inline(never)]
    fn widen(self, src: &[bf16], dst: &mut [f32]) {
        widen(src, dst)
    }
    #[inline(never)]
    fn update_stream(self, src: &[f32], dst: &mut [f32], g: f32, delta: f32, k: &[f32]) {
        dst.copy_from_slice(src);
        update::<PORTABLE_FMA>(dst, g, delta, k);
    }
    fn copy_stream(self, src: &[f32], dst: &mut [f32]) {
        dst.copy_from_slice(src);
    }
    fn fence(self) {}
    #[inline(always)]
    fn fma(self, a: f32, b: f32, c: f32) -> f32 {
        fmadd::<PORTABLE_FMA>(a, b, c)
    }
}

/// x86-64 with AVX2 and FMA; only constructible where the CPU has them.
#[cfg(target_arch = "x86_64")]
#[derive(Copy, Clone, Debug)]
pub struct Avx2Fma(());

#[cfg(target_arch = "x86_64")]
impl Avx2Fma {
    pub fn detect() -> Option<Self> {
        let ok = std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma");
        ok.then_some(Avx2Fma(()))
    }
}

/// Hand-written AVX2/FMA row operations. Every function checks its slice lengths (multiples of 16,
/// operands at least as long) before touching memory.
#[cfg(target_arch = "x86_64")]
mod avx2 {
    use half::bf16;
    use std::arch::x86_64::*;

    #[inline(always)]
    fn check(n: usize, others: &[usize]) {
        assert!(
            n.is_multiple_of(16) && others.iter().all(|&m| m >= n),
            "row slices must match, len % 16 == 0"
        );
    }

    #[inline(always)]
    unsafe fn hsum(v: __m256) -> f32 {
        let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        _mm_cvtss_f32(_mm_add_ss(s, _mm_shuffle_ps(s, s, 1)))
    }

    /// `[Σa, Σb, Σc, Σd]` of four vectors.
    #[inline(always)]
    unsafe fn hsum4(a: __m256, b: __m256, c: __m256, d: __m256) -> [f32; 4] {
        let h = _mm256_hadd_ps(_mm256_hadd_ps(a, b), _mm256_hadd_ps(c, d));
        let s = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
        let mut out = [0f32; 4];
        _mm_storeu_ps(out.as_mut_ptr(), s);
        out
    }

    /// Eight bf16 at `p` widened to f32.
    #[inline(always)]
    unsafe fn load_bf16(p: *const bf16) -> __m256 {
        let h = _mm_loadu_si128(p as *const __m128i);
        _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16))
    }

    #[inline(always)]
    unsafe fn ld(p: *const f32, i: usize) -> __m256 {
        _mm256_loadu_ps(p.add(i))
    }

    /// `g·s + δ·k` for 8 elements.
    #[inline(always)]
    unsafe fn step(gv: __m256, dv: __m256, s: __m256, k: __m256) -> __m256 {
        _mm256_fmadd_ps(dv, k, _mm256_mul_ps(gv, s))
    }

    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn dot(a: &[f32], b: &[f32]) -> f32 {
        let n = a.len();
        check(n, &[b.len()]);
        let (pa, pb) = (a.as_ptr(), b.as_ptr());
        let (mut s0, mut s1) = (_mm256_setzero_ps(), _mm256_setzero_ps());
        for i in (0..n).step_by(16) {
            s0 = _mm256_fmadd_ps(ld(pa, i), ld(pb, i), s0);
            s1 = _mm256_fmadd_ps(ld(pa, i + 8), ld(pb, i + 8), s1);
        }
        hsum(_mm256_add_ps(s0, s1))
    }

    /// `(s·k, s·q)` where `load(i)` gives 8 elements of s; `store(i, x)` sees each loaded chunk.
    #[inline(always)]
    unsafe fn dots_with(
        n: usize,
        k: *const f32,
        q: *const f32,
        load: impl Fn(usize) -> __m256,
        mut store: impl FnMut(usize, __m256),
    ) -> (f32, f32) {
        let z = _mm256_setzero_ps();
        let (mut u0, mut u1, mut q0, mut q1) = (z, z, z, z);
        for i in (0..n).step_by(16) {
            let (x0, x1) = (load(i), load(i + 8));
            store(i, x0);
            store(i + 8, x1);
            u0 = _mm256_fmadd_ps(x0, ld(k, i), u0);
            u1 = _mm256_fmadd_ps(x1, ld(k, i + 8), u1);
            q0 = _mm256_fmadd_ps(x0, ld(q, i), q0);
            q1 = _mm256_fmadd_ps(x1, ld(q, i + 8), q1);
        }
        let r = hsum4(u0, u1, q0, q1);
        (r[0] + r[1], r[2] + r[3])
    }

    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn dots2(s: &[f32], k: &[f32], q: &[f32]) -> (f32, f32) {
        check(s.len(), &[k.len(), q.len()]);
        let ps = s.as_ptr();
        dots_with(s.len(), k.as_ptr(), q.as_ptr(), |i| ld(ps, i), |_, _| {})
    }

    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn load_dots_f32(src: &[f32], dst: &mut [f32], k: &[f32], q: &[f32]) -> (f32, f32) {
        check(src.len(), &[dst.len(), k.len(), q.len()]);
        let (ps, pd) = (src.as_ptr(), dst.as_mut_ptr());
        dots_with(
            src.len(),
            k.as_ptr(),
            q.as_ptr(),
            |i| ld(ps, i),
            |i, x| _mm256_storeu_ps(pd.add(i), x),
        )
    }

    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn load_dots_bf16(
        src: &[bf16],
        dst: &mut [f32],
        k: &[f32],
        q: &[f32],
    ) -> (f32, f32) {
        check(src.len(), &[dst.len(), k.len(), q.len()]);
        let (ps, pd) = (src.as_ptr(), dst.as_mut_ptr());
        dots_with(
            src.len(),
            k.as_ptr(),
            q.as_ptr(),
            |i| load_bf16(ps.add(i)),
            |i, x| _mm256_storeu_ps(pd.add(i), x),
        )
    }

    /// Checks a block: `rows = delta.len()` rows of `n = k.len()` in `s`, outputs of `rows` entries.
    #[inline(always)]
    fn check_block(s: usize, n: usize, rows: usize, others: &[usize]) {
        check(n, others);
        assert!(
            s >= rows * n && rows.is_multiple_of(2),
            "block of an even number of rows"
        );
    }

    #[target_feature(enable = "avx2,fma")]
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn update_dots_block(
        s: &mut [f32],
        g: f32,
        delta: &[f32],
        k: &[f32],
        kn: &[f32],
        qn: &[f32],
        u: &mut [f32],
        sq: &mut [f32],
    ) {
        let (n, rows) = (k.len(), delta.len());
        check_block(s.len(), n, rows, &[kn.len(), qn.len()]);
        assert!(u.len() >= rows && sq.len() >= rows);
        let gv = _mm256_set1_ps(g);
        let (pk, pkn, pqn) = (k.as_ptr(), kn.as_ptr(), qn.as_ptr());
        for r in (0..rows).step_by(2) {
            let (p0, p1) = (s.as_mut_ptr().add(r * n), s.as_mut_ptr().add((r + 1) * n));
            let (d0, d1) = (_mm256_set1_ps(delta[r]), _mm256_set1_ps(delta[r + 1]));
            let z = _mm256_setzero_ps();
            let (mut u0, mut u1, mut q0, mut q1) = (z, z, z, z);
            for i in (0..n).step_by(8) {
                let (kv, knv, qnv) = (ld(pk, i), ld(pkn, i), ld(pqn, i));
                let x0 = step(gv, d0, ld(p0, i), kv);
                let x1 = step(gv, d1, ld(p1, i), kv);
                _mm256_storeu_ps(p0.add(i), x0);
                _mm256_storeu_ps(p1.add(i), x1);
                u0 = _mm256_fmadd_ps(x0, knv, u0);
                u1 = _mm256_fmadd_ps(x1, knv, u1);
                q0 = _mm256_fmadd_ps(x0, qnv, q0);
                q1 = _mm256_fmadd_ps(x1, qnv, q1);
            }
            let h = hsum4(u0, u1, q0, q1);
            (u[r], u[r + 1], sq[r], sq[r + 1]) = (h[0], h[1], h[2], h[3]);
        }
    }

    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn update_block(s: &mut [f32], g: f32, delta: &[f32], k: &[f32]) {
        let (n, rows) = (k.len(), delta.len());
        check_block(s.len(), n, rows, &[]);
        let gv = _mm256_set1_ps(g);
        for (r, &dr) in delta.iter().enumerate() {
            let p = s.as_mut_ptr().add(r * n);
            let dv = _mm256_set1_ps(dr);
            for i in (0..n).step_by(8) {
                _mm256_storeu_ps(p.add(i), step(gv, dv, ld(p, i), ld(k.as_ptr(), i)));
            }
        }
    }

    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn widen(src: &[bf16], dst: &mut [f32]) {
        let n = src.len();
        assert!(n.is_multiple_of(8) && dst.len() >= n);
        for i in (0..n).step_by(8) {
            _mm256_storeu_ps(dst.as_mut_ptr().add(i), load_bf16(src.as_ptr().add(i)));
        }
    }

    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn update_stream(src: &[f32], dst: &mut [f32], g: f32, delta: f32, k: &[f32]) {
        let n = src.len();
        check(n, &[dst.len(), k.len()]);
        let (gv, dv) = (_mm256_set1_ps(g), _mm256_set1_ps(delta));
        let (ps, pd, pk) = (src.as_ptr(), dst.as_mut_ptr(), k.as_ptr());
        let aligned = (pd as usize).is_multiple_of(16);
        for i in (0..n).step_by(8) {
            let x = step(gv, dv, ld(ps, i), ld(pk, i));
            if aligned {
                _mm_stream_ps(pd.add(i), _mm256_castps256_ps128(x));
                _mm_stream_ps(pd.add(i + 4), _mm256_extractf128_ps(x, 1));
            } else {
                _mm256_storeu_ps(pd.add(i), x);
            }
        }
    }

    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn copy_stream(src: &[f32], dst: &mut [f32]) {
        let n = src.len();
        check(n, &[dst.len()]);
        let (ps, pd) = (src.as_ptr(), dst.as_mut_ptr());
        if !(pd as usize).is_multiple_of(16) {
            dst[..n].copy_from_slice(src);
            return;
        }
        for i in (0..n).step_by(8) {
            _mm_stream_ps(pd.add(i), _mm_loadu_ps(ps.add(i)));
            _mm_stream_ps(pd.add(i + 4), _mm_loadu_ps(ps.add(i + 4)));
        }
    }

    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn fence() {
        _mm_sfence();
    }
}

// SAFETY (all methods): an `Avx2Fma` value exists only after `detect` saw AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
impl RowOps for Avx2Fma {
    #[inline(always)]
    fn dot(self, a: &[f32], b: &[f32]) -> f32 {
        unsafe { avx2::dot(a, b) }
    }
    #[inline(always)]
    fn dots2(self, s: &[f32], k: &[f32], q: &[f32]) -> (f32, f32) {
        unsafe { avx2::dots2(s, k, q) }
    }
    #[inline(always)]
    fn load_dots_f32(self, src: &[f32], dst: &mut [f32], k: &[f32], q: &[f32]) -> (f32, f32) {
        unsafe { avx2::load_dots_f32(src, dst, k, q) }
    }
    #[inline(always)]
    fn load_dots_bf16(self, src: &[bf16], dst: &mut [f32], k: &[f32], q: &[f32]) -> (f32, f32) {
        unsafe { avx2::load_dots_bf16(src, dst, k, q) }
    }
    #[inline(always)]
    fn update_dots_block(
        self,
        s: &mut [f32],
        g: f32,
        delta: &[f32],
        k: &[f32],
        kn: &[f32],
        qn: &[f32],
        u: &mut [f32],
        sq: &mut [f32],
    ) {
        unsafe { avx2::update_dots_block(s, g, delta, k, kn, qn, u, sq) }
    }
    #[inline(always)]
    fn update_block(self, s: &mut [f32], g: f32, delta: &[f32], k: &[f32]) {
        unsafe { avx2::update_block(s, g, delta, k) }
    }
    #[inline(always)]
    fn widen(self, src: &[bf16], dst: &mut [f32]) {
        unsafe { avx2::widen(src, dst) }
    }
    #[inline(always)]
    fn update_stream(self, src: &[f32], dst: &mut [f32], g: f32, delta: f32, k: &[f32]) {
        unsafe { avx2::update_stream(src, dst, g, delta, k) }
    }
    #[inline(always)]
    fn copy_stream(self, src: &[f32], dst: &mut [f32]) {
        unsafe { avx2::copy_stream(src, dst) }
    }
    #[inline(always)]
    fn fence(self) {
        unsafe { avx2::fence() }
    }
    #[inline(always)]
    fn fma(self, a: f32, b: f32, c: f32) -> f32 {
        // Outside a target-feature function `mul_add` would be a libm call: plain multiply-add.
        a * b + c
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bf16_rounding_matches_half() {
        let mut x = 0x0001_2345u32;
        for _ in 0..200_000 {
            x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            let f = f32::from_bits(x);
            let ours = f32_to_bf16(f);
            let theirs = bf16::from_f32(f);
            if f.is_nan() {
                assert!(ours.is_nan());
            } else {
                assert_eq!(ours.to_bits(), theirs.to_bits(), "{f:e}");
            }
            assert_eq!(bf16_to_f32(theirs).to_bits(), theirs.to_f32().to_bits());
        }
        for f in [
            0.0f32,
            -0.0,
            1.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::MAX,
            1.0 + 1.0 / 256.0,
        ] {
            assert_eq!(f32_to_bf16(f).to_bits(), bf16::from_f32(f).to_bits(), "{f}");
        }
    }

    #[test]
    fn fused_step_equals_separate_steps() {
        let d = 128;
        let k: Vec<f32> = (0..d).map(|i| (i as f32 * 0.37).sin()).collect();
        let kn: Vec<f32> = (0..d).map(|i| (i as f32 * 0.11).cos()).collect();
        let qn: Vec<f32> = (0..d).map(|i| (i as f32 * 0.23).sin()).collect();
        let mut s: Vec<f32> = (0..d).map(|i| (i as f32 * 0.05).cos()).collect();
        let mut s2 = s.clone();
        let (u, sq) = update_dots::<false>(&mut s, 0.9, 0.3, &k, &kn, &qn);
        update::<false>(&mut s2, 0.9, 0.3, &k);
        assert_eq!(s, s2);
        assert!((u - dot::<false>(&s2, &kn)).abs() < 1e-5);
        assert!((sq - dot::<false>(&s2, &qn)).abs() < 1e-5);
    }
}
