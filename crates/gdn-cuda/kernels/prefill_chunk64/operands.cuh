// prefill_chunk64/operands.cuh — operand formats of the chunk64 kernels: f16 pairs with power-of-two scales (the
// record's tiles, the walk's X and Vn), tf32 hi + lo splits (the prep's inverse, the cp scan), and the 128-byte-swizzled
// K-major panels that wgmma reads, with the K / Q row loads into them and the in-kernel q/k norm of those rows. (The
// wgmma and mma.sync wrappers themselves are in common/sm90.cuh.)
#pragma once

namespace gdn_prefill64 {

// Two floats as an f16 pair (lo in the low 16 bits), round to nearest even.
__device__ __forceinline__ u32 pack_f16(float lo, float hi) {
    u32 r;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));  // hi to the upper 16 bits
    return r;
}
// The power of two that brings a block whose largest magnitude is m (>= 0) to [0.5, 1): inv = 2^-(e+1) for
// m in [2^e, 2^(e+1)), and mul = 1 / inv; both exact and normal (the biased exponent is clamped to 252: m >= 2^126
// lands in [0.5, 4), zero or a subnormal m gets inv = 2^126). fmaxf drops NaN, so a NaN input leaves the scale
// finite and propagates through its own products.
__device__ __forceinline__ void pow2_scale(float m, float& inv, float& mul) {
    const int eb = min((int)(__float_as_uint(m) >> 23) & 0xff, 252);
    inv = __uint_as_float((u32)(253 - eb) << 23);
    mul = __uint_as_float((u32)(eb + 1) << 23);
}

// Byte offset of the 16-byte piece j of row r in a swizzled [rows][128 B] panel.
__device__ __forceinline__ u32 swz(int r, int j) { return (u32)(r * 128 + ((j ^ (r & 7)) << 4)); }

// K and Q rows [start, start + C) of query head hq (Q only when LOADQ) into the two swizzled 64-column panels at
// `kq` (K rows 0..63, Q rows 64..127), by cp.async, zero-filled from row nvalid on; THREADS threads (a multiple of
// 128), thread tid. Thread tid always copies piece c = tid & 15 of rows r0 = tid >> 4, r0 + RS, ... (RS = THREADS / 16
// is a multiple of 8, so the row's swizzle phase r & 7 is the same for all of them): one pointer per thread and
// tensor, advanced by a constant, and a shared-memory address that is the first one plus an immediate (forming
// ((start + r) H + hq) D + 8c afresh for every piece takes ~3x the instructions, on the walk's chain).
template <int THREADS, bool LOADQ>
__device__ __forceinline__ void load_kq_rows(const Prefill64Params& p, u32 kq, i64 start, int nvalid, int hq,
                                             int tid) {
    static_assert(THREADS % 128 == 0, "whole warpgroups");
    constexpr int RS = THREADS / 16;
    const int r0 = tid >> 4, c = tid & 15;
    // elements between token rows (dense: H·D; a view's with SV_STRIDED, common/serving.cuh)
    const i64 rowk = sv_tok_stride(sv_of(p), SV_K, p.num_q_heads), rowq = sv_tok_stride(sv_of(p), SV_Q, p.num_q_heads);
    const __nv_bfloat16* kp = p.k + (start + r0) * rowk + hq * sv_head_stride(sv_of(p), SV_K) + c * 8;
    const __nv_bfloat16* qp = p.q + (start + r0) * rowq + hq * sv_head_stride(sv_of(p), SV_Q) + c * 8;
    const u32 dst = kq + (u32)(c >> 3) * (128 * 128) + swz(r0, c & 7);
#pragma unroll
    for (int it = 0; it < C / RS; ++it) {
        const bool ok = r0 + it * RS < nvalid;  // (a row past the end copies nothing from the tensor's base)
        cp_async16(dst + (u32)(it * RS * 128), ok ? kp : p.k, ok);
        if (LOADQ) cp_async16(dst + (u32)((C + it * RS) * 128), ok ? qp : p.q, ok);
        kp += RS * rowk;
        qp += RS * rowq;
    }
}

// In-kernel q/k L2 norm (SV_QK_NORM) of the rows load_kq_rows wrote: each of the ROWS rows at `kq` (64: K only; 128: K
// and Q) becomes bf16(x / sqrt(Σx² + 1e-6)), the sum in fp32 (as gdn_core's reference); zero rows stay zero. THREADS
// threads, THREADS / ROWS adjacent ones per row, each summing its share of the row's 16 pieces (both panels), the
// shares meeting by shuffles; a second pass reloads, scales and stores. Every thread's copies must have landed and be
// visible (cp_async_wait and a barrier before); the caller fences the generic-proxy writes for wgmma
// (fence_proxy_async) and synchronises before any product reads them.
__device__ __forceinline__ float bf16_sq2(u32 w) {
    const float lo = __uint_as_float(w << 16), hi = __uint_as_float(w & 0xffff0000u);
    return fmaf(lo, lo, hi * hi);
}
template <int THREADS, int ROWS>
__device__ __forceinline__ void normalize_kq_rows(unsigned char* kq, int tid) {
    static_assert(THREADS % ROWS == 0 && THREADS / ROWS <= 16, "whole rows per thread group");
    constexpr int PARTS = THREADS / ROWS, PIECES = 16 / PARTS;
    const int r = tid / PARTS, q0 = (tid % PARTS) * PIECES;
    auto piece = [&](int q) { return reinterpret_cast<uint4*>(kq + (q >> 3) * (128 * 128) + swz(r, q & 7)); };
    float ss = 0.f;
#pragma unroll 4
    for (int q = q0; q < q0 + PIECES; ++q) {
        const uint4 x = *piece(q);
        ss += (bf16_sq2(x.x) + bf16_sq2(x.y)) + (bf16_sq2(x.z) + bf16_sq2(x.w));
    }
#pragma unroll
    for (int m = 1; m < PARTS; m <<= 1) ss += __shfl_xor_sync(0xffffffffu, ss, m);
    const float rs = rsqrtf(ss + SV_QK_NORM_EPS);
#pragma unroll 4
    for (int q = q0; q < q0 + PIECES; ++q) {
        uint4* d = piece(q);
        const uint4 x = *d;
        const u32 w[4] = {x.x, x.y, x.z, x.w};
        u32 y[4];
#pragma unroll
        for (int e = 0; e < 4; ++e)
            y[e] = cvt_bf16x2(__uint_as_float(w[e] << 16) * rs, __uint_as_float(w[e] & 0xffff0000u) * rs);
        *d = make_uint4(y[0], y[1], y[2], y[3]);
    }
}

// (SV_ACT_F16) ROWS K / Q rows of a panel pair in the layout normalize_kq_rows reads, fp16 rewritten in place as bf16
// (common/serving.cuh sv_f16x2_to_bf16x2); THREADS threads, the same row split.
template <int THREADS, int ROWS>
__device__ __forceinline__ void f16_rows_to_bf16(unsigned char* kq, int tid) {
    static_assert(THREADS % ROWS == 0 && THREADS / ROWS <= 16, "whole rows per thread group");
    constexpr int PARTS = THREADS / ROWS, PIECES = 16 / PARTS;
    const int r = tid / PARTS, q0 = (tid % PARTS) * PIECES;
#pragma unroll 4
    for (int q = q0; q < q0 + PIECES; ++q) sv_f16_to_bf16_piece(kq + (q >> 3) * (128 * 128) + swz(r, q & 7));
}

// x = hi + lo, both tf32 by truncation (the low 13 bits cleared: two LOP3 and an FADD; cvt.rna.tf32.f32 is ~8
// instructions on sm_90, a third of the prep's instructions if used here). hi·hi + hi·lo + lo·hi carry ~2^-20 relative
// error, far below the f16 the record stores T in.
__device__ __forceinline__ void split_tf32(float x, u32& hi, u32& lo) {
    hi = __float_as_uint(x) & 0xffffe000u;
    lo = __float_as_uint(x - __uint_as_float(hi)) & 0xffffe000u;
}

}  // namespace gdn_prefill64
