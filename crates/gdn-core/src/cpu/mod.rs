//! Fast multithreaded CPU backend: f32 math, bf16/f32 I/O, all three operations.
//!
//! Work mapping: one rayon task per (sequence, value head, block of V rows). Rows of the state evolve
//! independently given k, q and the gates (`S[v,:]` needs only `v[v]`), so a long sequence with few heads
//! still splits into many tasks; blocks are sized from the total work so that there are a few tasks per
//! thread. Inside a task, tokens are walked in order and each row of the block gets one fused pass per
//! token (see `kernel`): the block (≤ 128 rows × 512 B) stays in L1/L2 across the sequence.
//!
//! Per task: q/k of the current and next token are widened to f32 into a small scratch (reused across
//! tasks of a thread), the gates come precomputed per (token, head). The state block is worked on in place
//! in the f32 state output when the task owns that destination row; otherwise (bf16 state, MTP definition
//! mode) in scratch, rounded to bf16 at the end. Every output element is written: rows no task writes are
//! filled first (zeros, or the pool copy for MTP), padding requests' outputs are zeroed.

mod kernel;

use crate::definition::Op;
use crate::error::{GdnError, Result};
use crate::outputs::{Backend, Outputs, StateBuf};
use crate::problem::{Inputs, Problem, StateRef};
use crate::reference::{gates_f64, plan, SeqPlan};
use crate::timing::{TierSamples, Timed, TimingConfig};
use half::bf16;
use kernel::*;
use rayon::prelude::*;
use std::marker::PhantomData;
use std::time::Instant;

/// The CPU backend (uses rayon's global thread pool).
pub struct CpuBackend;

impl Backend for CpuBackend {
    fn name(&self) -> String {
        "cpu".into()
    }

    fn run(&self, p: &Problem, x: &Inputs, out: &mut Outputs) -> Result<()> {
        run_impl(p, x, out, fma_available())
    }
}

/// Runs with the baseline (auto-vectorised) row operations even where AVX2/FMA exist, so that tests cover
/// the path non-AVX2 machines take.
#[doc(hidden)]
pub fn run_portable(p: &Problem, x: &Inputs, out: &mut Outputs) -> Result<()> {
    run_impl(p, x, out, false)
}

fn run_impl(p: &Problem, x: &Inputs, out: &mut Outputs, simd: bool) -> Result<()> {
    check_outputs(p, out)?;
    let seqs = plan(p, x);
    let (g, beta) = gates(p, x);
    fill_untouched_state(p, x, &seqs, &mut out.state);
    zero_padding_outputs(p, &seqs, &mut out.output);
    let tasks = build_tasks(&seqs, p.def.heads.num_v_heads, p.def.heads.head_size);
    let h = &p.def.heads;
    let ctx = Ctx {
        x,
        plan: &seqs,
        g: &g,
        beta: &beta,
        d: h.head_size,
        hq: h.num_q_heads,
        hv: h.num_v_heads,
        ratio: h.ratio(),
        t_len: p.dims.seq_len,
        scale: p.scale,
        simd,
        out: Shared::new(&mut out.output),
        state: match &mut out.state {
            StateBuf::F32(v) => SharedState::F32(Shared::new(v)),
            StateBuf::BF16(v) => SharedState::BF16(Shared::new(v)),
        },
        inter: match (p.intermediate, out.intermediate.as_mut()) {
            (true, Some(v)) => Some(Shared::new(v)),
            _ => None,
        },
    };
    tasks
        .par_iter()
        .for_each_init(Scratch::default, |scr, t| run_task_dispatch(&ctx, scr, t));
    Ok(())
}

fn check_outputs(p: &Problem, out: &Outputs) -> Result<()> {
    let want: usize = p.output_shape().iter().product();
    if out.output.len() != want {
        return Err(GdnError::shape(
            "output",
            format!("buffer has {} elements, expected {want}", out.output.len()),
        ));
    }
    let name = p.def.state_output();
    let want: usize = p.state_shape().iter().product();
    let dtype_ok = matches!(
        (&out.state, p.state_out_dtype()),
        (StateBuf::F32(_), crate::DType::F32) | (StateBuf::BF16(_), crate::DType::BF16)
    );
    if out.state.len() != want || !dtype_ok {
        return Err(GdnError::shape(
            name,
            format!(
                "buffer has {} elements (dtype ok: {dtype_ok}), expected {want} of {}",
                out.state.len(),
                p.state_out_dtype()
            ),
        ));
    }
    if p.intermediate {
        let want: usize = p.intermediate_shape().iter().product();
        let got = out.intermediate.as_ref().map_or(0, Vec::len);
        if got != want {
            return Err(GdnError::shape(
                "intermediate_states_buffer",
                format!("output buffer has {got} elements, expected {want}"),
            ));
        }
    }
    Ok(())
}

/// Decay and update gates per (token, value head), computed once per call (in f64, stored f32).
fn gates(p: &Problem, x: &Inputs) -> (Vec<f32>, Vec<f32>) {
    let hv = p.def.heads.num_v_heads;
    let n = p.dims.total_tokens * hv;
    let (mut g, mut beta) = (vec![0f32; n], vec![0f32; n]);
    g.par_chunks_mut(hv)
        .zip(beta.par_chunks_mut(hv))
        .enumerate()
        .for_each(|(t, (gt, bt))| {
            for h in 0..hv {
                let (log_g, b) = gates_f64(p, x, t, h);
                gt[h] = log_g.exp() as f32;
                bt[h] = b as f32;
            }
        });
    (g, beta)
}

/// State output rows that no sequence writes: zeros (decode, prefill) or the pool row (MTP).
fn fill_untouched_state(p: &Problem, x: &Inputs, seqs: &[SeqPlan], state: &mut StateBuf) {
    let mut written = vec![false; p.dims.state_rows];
    for w in seqs.iter().filter_map(|s| s.write_row) {
        written[w] = true;
    }
    let row = p.state_row_len();
    let pool = if p.def.op == Op::Mtp { x.state } else { None };
    match state {
        StateBuf::F32(buf) => buf
            .par_chunks_mut(row)
            .enumerate()
            .filter(|(r, _)| !written[*r])
            .for_each(|(r, dst)| match pool {
                Some(StateRef::F32(src)) => dst.copy_from_slice(&src[r * row..(r + 1) * row]),
                Some(StateRef::BF16(src)) => widen(&src[r * row..(r + 1) * row], dst),
                None => dst.fill(0.0),
            }),
        StateBuf::BF16(buf) => buf
            .par_chunks_mut(row)
            .enumerate()
            .filter(|(r, _)| !written[*r])
            .for_each(|(r, dst)| match pool {
                Some(StateRef::BF16(src)) => dst.copy_from_slice(&src[r * row..(r + 1) * row]),
                Some(StateRef::F32(src)) => narrow(&src[r * row..(r + 1) * row], dst),
                None => dst.fill(bf16::ZERO),
            }),
    }
}

fn zero_padding_outputs(p: &Problem, seqs: &[SeqPlan], output: &mut [bf16]) {
    let per_token = p.def.heads.num_v_heads * p.def.heads.head_size;
    for s in seqs.iter().filter(|s| s.padding) {
        output[s.tokens.start * per_token..s.tokens.end * per_token].fill(bf16::ZERO);
    }
}

/// One unit of parallel work: V rows `v0..v1` of value head `head` of sequence `seq`.
#[derive(Clone, Debug)]
struct Task {
    seq: usize,
    head: usize,
    v0: usize,
    v1: usize,
}

/// Smallest block of V rows a task takes.
const MIN_ROWS: usize = 16;
/// Largest block for sequences of more than a few tokens: 32 rows × 128 × 4 B = 16 KiB stays in L1
/// across the token walk (a whole 64 KiB head state does not: measured 1.4x slower).
const L1_ROWS: usize = 32;
/// Sequences at least this long are cut into L1-sized blocks.
const L1_MIN_TOKENS: usize = 8;
/// Tasks aimed for per thread (load balance against task overhead).
const TASKS_PER_THREAD: usize = 4;

/// Tasks for every active (sequence, head), long sequences split into V-row blocks, longest first.
fn build_tasks(seqs: &[SeqPlan], hv: usize, d: usize) -> Vec<Task> {
    let active = |s: &&SeqPlan| !s.padding && !s.tokens.is_empty();
    let total_work: usize = seqs
        .iter()
        .filter(active)
        .map(|s| s.tokens.len() * hv)
        .sum();
    let target = TASKS_PER_THREAD * rayon::current_num_threads();
    let per_task = (total_work / target.max(1)).max(1);
    let mut tasks = Vec::new();
    for (n, s) in seqs.iter().enumerate().filter(|(_, s)| active(s)) {
        let splits = s
            .tokens
            .len()
            .div_ceil(per_task)
            .clamp(1, (d / MIN_ROWS).max(1));
        let mut rows = d.div_ceil(splits).next_multiple_of(8).min(d);
        if s.tokens.len() >= L1_MIN_TOKENS {
            rows = rows.min(L1_ROWS);
        }
        for head in 0..hv {
            for v0 in (0..d).step_by(rows) {
                tasks.push(Task {
                    seq: n,
                    head,
                    v0,
                    v1: (v0 + rows).min(d),
                });
            }
        }
    }
    let work = |t: &Task| seqs[t.seq].tokens.len() * (t.v1 - t.v0);
    tasks.sort_by_key(|t| std::cmp::Reverse(work(t)));
    tasks
}

/// A mutable buffer shared by tasks that write disjoint ranges of it.
struct Shared<'a, T> {
    ptr: *mut T,
    len: usize,
    _borrow: PhantomData<&'a mut [T]>,
}

// SAFETY: tasks only touch disjoint ranges (see `Shared::slice`); T is plain data.
unsafe impl<T: Send> Send for Shared<'_, T> {}
unsafe impl<T: Send> Sync for Shared<'_, T> {}

impl<'a, T> Shared<'a, T> {
    fn new(v: &'a mut [T]) -> Self {
        Shared {
            ptr: v.as_mut_ptr(),
            len: v.len(),
            _borrow: PhantomData,
        }
    }

    /// `len` elements from `start`.
    ///
    /// # Safety
    /// No two slices alive at the same time may overlap. Tasks guarantee this by construction: each
    /// (sequence, head, row block) owns its output rows, its state-row block and its intermediate blocks,
    /// and validation guarantees that no two sequences share a destination row.
    #[allow(clippy::mut_from_ref)]
    unsafe fn slice(&self, start: usize, len: usize) -> &mut [T] {
        assert!(start + len <= self.len, "task range out of bounds");
        std::slice::from_raw_parts_mut(self.ptr.add(start), len)
    }
}

enum SharedState<'a> {
    F32(Shared<'a, f32>),
    BF16(Shared<'a, bf16>),
}

/// Read-only context of one run, shared by all tasks.
struct Ctx<'a> {
    x: &'a Inputs<'a>,
    plan: &'a [SeqPlan],
    g: &'a [f32],
    beta: &'a [f32],
    d: usize,
    hq: usize,
    hv: usize,
    ratio: usize,
    /// MTP tokens per request (intermediate buffer indexing).
    t_len: usize,
    scale: f32,
    /// Use the AVX2/FMA row operations (detected on this CPU).
    simd: bool,
    out: Shared<'a, bf16>,
    state: SharedState<'a>,
    inter: Option<Shared<'a, f32>>,
}

impl Ctx<'_> {
    /// Widens q and k of token `t` for value head `h` into `q`, `k`.
    #[inline(always)]
    fn load_qk<K: RowOps>(&self, ops: K, t: usize, h: usize, k: &mut [f32], q: &mut [f32]) {
        let off = (t * self.hq + h / self.ratio) * self.d;
        ops.widen(&self.x.k[off..off + self.d], k);
        ops.widen(&self.x.q[off..off + self.d], q);
    }
}

/// Per-thread scratch, grown on demand and reused across tasks.
#[derive(Default)]
struct Scratch {
    k: Vec<f32>,
    q: Vec<f32>,
    k_next: Vec<f32>,
    q_next: Vec<f32>,
    u: Vec<f32>,
    sq: Vec<f32>,
    v: Vec<f32>,
    delta: Vec<f32>,
    work: Vec<f32>,
}

impl Scratch {
    fn prepare(&mut self, d: usize, rows: usize) {
        for b in [&mut self.k, &mut self.q, &mut self.k_next, &mut self.q_next] {
            b.resize(d, 0.0);
        }
        for b in [&mut self.u, &mut self.sq, &mut self.v, &mut self.delta] {
            b.resize(rows, 0.0);
        }
        self.work.resize(rows * d, 0.0);
    }
}

fn fma_available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        Avx2Fma::detect().is_some()
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        PORTABLE_FMA
    }
}

fn run_task_dispatch(c: &Ctx, scr: &mut Scratch, t: &Task) {
    #[cfg(target_arch = "x86_64")]
    if let Some(ops) = c.simd.then(Avx2Fma::detect).flatten() {
        return run_task(ops, c, scr, t);
    }
    run_task(Portable, c, scr, t)
}

/// One task: the decode fast path (one token, f32 state in and out), or the general sequence walk.
fn run_task<K: RowOps>(ops: K, c: &Ctx, scr: &mut Scratch, task: &Task) {
    let s = &c.plan[task.seq];
    scr.prepare(c.d, task.v1 - task.v0);
    let f32_in = matches!(c.x.state, Some(StateRef::F32(_))) && s.read_row.is_some();
    let f32_out = matches!(c.state, SharedState::F32(_)) && s.write_row.is_some();
    if s.tokens.len() == 1 && f32_in && f32_out && s.inter_row.is_none() {
        decode_block(ops, c, scr, task);
    } else {
        sequence_block(ops, c, scr, task);
    }
    ops.fence();
}

/// Offset of rows `v0..` of value head `h` in state row `row` (`[rows, HV, D, D]`).
fn block_at(c: &Ctx, row: usize, h: usize, v0: usize) -> usize {
    (row * c.hv + h) * c.d * c.d + v0 * c.d
}

/// One token from an f32 state row to an f32 state row: per row, the dot products from the input, then
/// `g·S + δ·k` written straight to the destination (non-temporal: each byte crosses memory once).
fn decode_block<K: RowOps>(ops: K, c: &Ctx, scr: &mut Scratch, task: &Task) {
    let s = &c.plan[task.seq];
    let (d, h, v0, rows) = (c.d, task.head, task.v0, task.v1 - task.v0);
    let (Some(StateRef::F32(src)), Some(r), Some(w), SharedState::F32(dst)) =
        (c.x.state, s.read_row, s.write_row, &c.state)
    else {
        unreachable!("decode_block needs f32 state rows in and out")
    };
    let src = &src[block_at(c, r, h, v0)..block_at(c, r, h, v0) + rows * d];
    // SAFETY: this task alone owns rows v0..v1 of head h of destination row w.
    let dst = unsafe { dst.slice(block_at(c, w, h, v0), rows * d) };
    let t = s.tokens.start;
    let (k, q, vrow) = (&mut scr.k, &mut scr.q, &mut scr.v);
    c.load_qk(ops, t, h, k, q);
    let gi = t * c.hv + h;
    let (g, beta) = (c.g[gi], c.beta[gi]);
    let kq = ops.dot(k, q);
    ops.widen(&c.x.v[gi * d + v0..gi * d + v0 + rows], vrow);
    // SAFETY: output rows v0..v1 of (token, head h) belong to this task.
    let out = unsafe { c.out.slice(gi * d + v0, rows) };
    for (i, (srow, drow)) in src.chunks_exact(d).zip(dst.chunks_exact_mut(d)).enumerate() {
        let (u, sq) = ops.dots2(srow, k, q);
        let delta = beta * (vrow[i] - g * u);
        out[i] = f32_to_bf16(c.scale * ops.fma(delta, kq, g * sq));
        ops.update_stream(srow, drow, g, delta, k);
    }
}

/// Load the state block, walk the sequence's tokens (rows in pairs), store the block.
fn sequence_block<K: RowOps>(ops: K, c: &Ctx, scr: &mut Scratch, task: &Task) {
    let s = &c.plan[task.seq];
    let (d, h, v0, rows) = (c.d, task.head, task.v0, task.v1 - task.v0);
    let dd = d * d;
    let work: &mut [f32] = match (&c.state, s.write_row) {
        // SAFETY: this task alone owns rows v0..v1 of head h of destination row w.
        (SharedState::F32(buf), Some(w)) => unsafe { buf.slice(block_at(c, w, h, v0), rows * d) },
        _ => &mut scr.work[..rows * d],
    };
    let (k, q) = (&mut scr.k, &mut scr.q);
    let (k_next, q_next) = (&mut scr.k_next, &mut scr.q_next);
    let (u, sq, vrow, delta) = (&mut scr.u, &mut scr.sq, &mut scr.v, &mut scr.delta);
    c.load_qk(ops, s.tokens.start, h, k, q);
    load_state(ops, c, s, h, v0, work, k, q, u, sq);
    let len = s.tokens.len();
    for i in 0..len {
        let gi = (s.tokens.start + i) * c.hv + h;
        let (g, beta) = (c.g[gi], c.beta[gi]);
        let kq = ops.dot(k, q);
        let has_next = i + 1 < len;
        if has_next {
            c.load_qk(ops, s.tokens.start + i + 1, h, k_next, q_next);
        }
        ops.widen(&c.x.v[gi * d + v0..gi * d + v0 + rows], vrow);
        // SAFETY: output rows v0..v1 of (token, head h) belong to this task.
        let out = unsafe { c.out.slice(gi * d + v0, rows) };
        for r in 0..rows {
            delta[r] = beta * (vrow[r] - g * u[r]);
            out[r] = f32_to_bf16(c.scale * ops.fma(delta[r], kq, g * sq[r]));
        }
        if has_next {
            ops.update_dots_block(work, g, delta, k, k_next, q_next, u, sq);
        } else {
            ops.update_block(work, g, delta, k);
        }
        if let (Some(ir), Some(inter)) = (s.inter_row, &c.inter) {
            let off = ((ir * c.t_len + i) * c.hv + h) * dd + v0 * d;
            // SAFETY: intermediate block (row ir, token i, head h, rows v0..v1) belongs to this task.
            ops.copy_stream(work, unsafe { inter.slice(off, rows * d) });
        }
        std::mem::swap(k, k_next);
        std::mem::swap(q, q_next);
    }
    if let (SharedState::BF16(buf), Some(w)) = (&c.state, s.write_row) {
        // SAFETY: as for `work` above.
        narrow(work, unsafe { buf.slice(block_at(c, w, h, v0), rows * d) });
    }
}

/// Fills the working block with the initial state (f32 copy, bf16 widened, or zeros) and returns the
/// first token's dot products `u = S·k`, `sq = S·q` per row.
#[allow(clippy::too_many_arguments)]
fn load_state<K: RowOps>(
    ops: K,
    c: &Ctx,
    s: &SeqPlan,
    h: usize,
    v0: usize,
    work: &mut [f32],
    k: &[f32],
    q: &[f32],
    u: &mut [f32],
    sq: &mut [f32],
) {
    let d = c.d;
    let src_at = |row: usize| (row * c.hv + h) * d * d + v0 * d;
    match (s.read_row, c.x.state) {
        (Some(r), Some(StateRef::F32(src))) => {
            let src = &src[src_at(r)..src_at(r) + work.len()];
            for (i, (sr, wr)) in src
                .chunks_exact(d)
                .zip(work.chunks_exact_mut(d))
                .enumerate()
            {
                (u[i], sq[i]) = ops.load_dots_f32(sr, wr, k, q);
            }
        }
        (Some(r), Some(StateRef::BF16(src))) => {
            let src = &src[src_at(r)..src_at(r) + work.len()];
            for (i, (sr, wr)) in src
                .chunks_exact(d)
                .zip(work.chunks_exact_mut(d))
                .enumerate()
            {
                (u[i], sq[i]) = ops.load_dots_bf16(sr, wr, k, q);
            }
        }
        _ => {
            work.fill(0.0);
            u.fill(0.0);
            sq.fill(0.0);
        }
    }
}

impl Timed for CpuBackend {
    fn time(&self, p: &Problem, inputs: &[Inputs], cfg: &TimingConfig) -> Result<Vec<TierSamples>> {
        if inputs.is_empty() {
            return Err(GdnError::backend(
                "cpu",
                "timing needs at least one input set",
            ));
        }
        let mut outs: Vec<Outputs> = inputs.iter().map(|x| Outputs::poisoned(p, x)).collect();
        let n = inputs.len();
        for i in 0..cfg.warmup {
            self.run(p, &inputs[i % n], &mut outs[i % n])?;
        }
        let mut samples = Vec::with_capacity(cfg.iters);
        for i in 0..cfg.iters {
            let t0 = Instant::now();
            self.run(p, &inputs[i % n], &mut outs[i % n])?;
            samples.push(t0.elapsed().as_secs_f64() * 1e6);
        }
        Ok(vec![TierSamples::new(
            "wall",
            format!(
                "host wall clock around each call ({} rayon threads), {n} input sets cycled, {} warm-up calls",
                rayon::current_num_threads(),
                cfg.warmup
            ),
            samples,
        )])
    }

    fn time_copy(&self, bytes: u64, cfg: &TimingConfig) -> Result<Vec<TierSamples>> {
        let half = (bytes / 2) as usize;
        let sets = cfg.input_sets.max(1);
        let srcs: Vec<Vec<u8>> = (0..sets)
            .map(|s| (0..half).map(|i| (i * 31 + s * 7) as u8).collect())
            .collect();
        let mut dst = vec![0u8; half];
        let copy = |src: &[u8], dst: &mut [u8]| {
            const CHUNK: usize = 1 << 18;
            dst.par_chunks_mut(CHUNK)
                .zip(src.par_chunks(CHUNK))
                .for_each(|(d, s)| d.copy_from_slice(s));
        };
        for i in 0..cfg.warmup {
            copy(&srcs[i % sets], &mut dst);
        }
        let mut samples = Vec::with_capacity(cfg.iters);
        for i in 0..cfg.iters {
            let t0 = Instant::now();
            copy(&srcs[i % sets], &mut dst);
            samples.push(t0.elapsed().as_secs_f64() * 1e6);
        }
        std::hint::black_box(&dst);
        Ok(vec![TierSamples::new(
            "wall",
            format!(
                "host wall clock around a parallel memcpy of {half} bytes ({} rayon threads, 256 KiB chunks), {sets} sources cycled",
                rayon::current_num_threads()
            ),
            samples,
        )])
    }

    fn device(&self) -> String {
        let model = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with("model name"))
                    .and_then(|l| l.split(':').nth(1))
                    .map(|m| m.trim().to_string())
            })
            .unwrap_or_else(|| std::env::consts::ARCH.to_string());
        let simd = if fma_available() {
            "avx2+fma"
        } else {
            "baseline simd"
        };
        format!(
            "cpu: {model}, {} threads, {simd}",
            rayon::current_num_threads()
        )
    }
}
