// recurrent.cu — Gated Delta Net decode (T = 1) and MTP / speculative verify (T = 2..8) for Hopper (sm_90a).
//
// Compiled at run time by NVRTC (`-arch=sm_90a -std=c++17`; headers by their path under kernels/); includes only
// common/gates.cuh (which includes <cuda_bf16.h>). No shared memory, no __syncthreads: every warp is independent.
//
// ---------------------------------------------------------------------------------------------------------
// Math (per request b, value head h, token t; fp32 throughout):
//   g = exp(-exp(A_log[h]) * softplus(a + dt_bias[h]))      beta = sigmoid(b)          (common/gates.cuh)
//   S = g*S;  u = S·k;  delta = beta*(v - u);  S += delta ⊗ k;  out = scale * S·q     (S is [V=128][K=128])
// One pass over S per token, using   S_new·q = g·(S_old·q) + delta·(k·q):
//   every lane forms partial dot products of its state slice with k and q (and k·q), the row's lanes reduce
//   them with warp shuffles, then each lane updates its slice  S = fma(delta, k, g*S)  and stores it.
//
// ---------------------------------------------------------------------------------------------------------
// Layouts (all dense, element strides implied; every base pointer 16-byte aligned):
//   q, k   bf16 [B, T, H, 128]          v    bf16 [B, T, HV, 128]         a, b   bf16 [B, T, HV]
//   A_log, dt_bias  f32 [HV]            out  bf16 [B, T, HV, 128]
//   state / new_state   [rows, HV, 128(V), 128(K)]  "k-last" (K contiguous), fp32 or bf16 (by kernel name)
//   intermediate        f32 [rows, T, HV, 128, 128] (state after each token; rows = the state pool's rows;
//                       its T extent must equal seq_len)
//   state_indices       i32 [B]; request b uses pool row state_indices[b] (row b when the pointer is NULL).
// Value head h uses q/k head h / (HV/H) (GVA, repeat_interleave order).
//
// Pointer semantics:
//   state == NULL         zero initial state (nothing read).
//   new_state == NULL     final state not written (gdn_mtp "pool not updated" mode).
//   new_state == state    allowed (in-place): every element is read once, by the thread that later writes it,
//                         before that thread writes anything; no other CTA touches the row (distinct (b, h)
//                         pairs own disjoint rows as long as state_indices has no duplicate non-negative
//                         entries — the caller's contract).
//   intermediate == NULL  per-token states not written.
//   state_indices[b] < 0  padding: request b is skipped, its out rows (all T tokens, all heads) are written as
//   (or >= num_state_rows) zeros, nothing else is read or written for it. Out-of-range indices are treated like
//                         padding so that a bad index can never touch memory outside the pool.
// All offsets are 64-bit. A pool of >4096 rows (>2^31 elements) is fine.
//
// ---------------------------------------------------------------------------------------------------------
// Grid / block mapping (every kernel in this file):
//   grid  = ( B * CTAS_PER_HEAD,  H,  HV / H )      block = WARPS * 32 threads      dynamic smem = 0
//   blockIdx.x = b * CTAS_PER_HEAD + tile,  blockIdx.y = q/k head hq,  blockIdx.z = value head within the group,
//   so h = hq * (HV/H) + blockIdx.z and no run-time integer division is needed. B only multiplies gridDim.x
//   (limit 2^31-1), gridDim.y = H and gridDim.z = HV/H are tiny: any B is valid.
//   A CTA owns ROWS_PER_CTA = WARPS * GPW * RPT consecutive V-rows of one (request, head):
//     CTAS_PER_HEAD = 128 / ROWS_PER_CTA.
//   Inside a warp, LPR = 128 / VEC lanes share one V-row; GPW = 32 / LPR rows are touched per warp instruction
//   ("row groups"); each thread owns RPT consecutive rows (row0 .. row0+RPT-1) and, in each, VEC K-values:
//   NC = VEC / CW vector accesses of CW elements (16 bytes: CW = 4 for fp32, 8 for bf16).
//   Lane j of a row holds K = c*CW*LPR + j*CW + e (c < NC, e < CW): each access instruction of a row group reads
//   CW*LPR contiguous elements — fully coalesced 16-byte loads/stores along K (k-last layout).
//
// Why:
//   * many CTAs per (request, head) at small batch: B=1 has only 8 heads; the B<=2 kernel uses 8 CTAs per head
//     (64 CTAs of 8 warps; 32 CTAs per head of 4 warps measured 7% slower), the large-B kernel 1-warp CTAs.
//   * all state loads (RPT*NC 16-byte loads per thread) and all token inputs are issued before the first use:
//     one DRAM round trip per launch, the whole kernel is latency- or bandwidth-bound.
//   * gates computed in-kernel (no extra launch), q/k/v read straight from global (L1/L2 broadcast; staging
//     them in shared memory did not help peers), shuffle-only reductions, no shared memory, no barriers.
//   * grid in state-memory order at large B (`_lin`): consecutive CTAs stream consecutive 4-8 KB of the state
//     (the ORDER 0 grid walks one head of every request first: 512 KB strides, 3.5% slower at B=1024).
//   * the gate chain (~60 dependent instructions: ex2, log1p polynomial, ex2, div) stays after the reductions:
//     it costs ~0.25 us at B=1 (latency probes) but moving it first measured 3-7% slower at B<=16.
//   * runtime-T variants (`tn`) keep the state in registers across tokens and prefetch token t+1's inputs while
//     token t is computed; the state is read once and written once (+ T intermediate states if asked).
//
// ---------------------------------------------------------------------------------------------------------
// Kernel naming:   gdn_recurrent_<st>_<tt>_v<VEC>r<RPT>w<WARPS>[_lin][_cs]
//   <st>   f32 | bf16      state dtype (bf16: stored bf16, math fp32; intermediate states are always fp32)
//   <tt>   t1              decode, T must be 1 (seq_len is ignored)
//          tn              any T >= 1 at run time (MTP)
//   VEC    K-values per lane per row (4, 8, 16)  -> LPR = 128/VEC lanes per row, GPW = VEC/4 rows per warp access
//   RPT    rows per thread (1, 2, 4, 8)
//   WARPS  warps per CTA  (block = 32*WARPS)
//   _lin   ORDER 1 grid: (B*HV*CTAS_PER_HEAD, 1, 1), blockIdx.x walks (request, head, tile) in state-memory order
//          (no suffix: ORDER 0 grid (B*CTAS_PER_HEAD, H, HV/H)). In-order streaming is ~3% faster at B >= 64.
//   _cs    evict-first (.cs) hint on state loads/stores (harness sweeps only; never a winner, not exported)
//   derived: ROWS_PER_CTA = WARPS * RPT * VEC/4,  CTAS_PER_HEAD = 128 / ROWS_PER_CTA.
// Exported kernels (the Rust side reads this list; keep it in sync with the GDN_REC_EXPORT lines at the end).
// All: dynamic smem 0, no attribute changes needed, grid exactly as below (the kernels do not bound-check B).
//   name                                block CTAS_PER_HEAD grid                      policy (H200, qk4_v8)
//   gdn_recurrent_f32_t1_v4r2w8           256       8        (8B, H, HV/H)             fp32 decode, B <= 2
//   gdn_recurrent_f32_t1_v4r2w4           128      16        (16B, H, HV/H)            fp32 decode, 3..12
//   gdn_recurrent_f32_t1_v8r4w4           128       4        (4B, H, HV/H)             fp32 decode, 13..24
//   gdn_recurrent_f32_t1_v8r4w1_lin        32      16        (16*B*HV, 1, 1)           fp32 decode, B >= 25
//   gdn_recurrent_bf16_t1_v8r2w4          128       8        (8B, H, HV/H)             bf16 decode, B <= 24
//   gdn_recurrent_bf16_t1_v8r4w2           64       8        (8B, H, HV/H)             bf16 decode, 25..96
//   gdn_recurrent_bf16_t1_v8r4w4_lin      128       4        (4*B*HV, 1, 1)            bf16 decode, B > 96
//   gdn_recurrent_f32_tn_v8r4w2            64       8        (8B, H, HV/H)             fp32 MTP, B < 128
//   gdn_recurrent_f32_tn_v8r4w2_lin        64       8        (8*B*HV, 1, 1)            fp32 MTP, B >= 128
//   gdn_recurrent_bf16_tn_v4r4w2           64      16        (16B, H, HV/H)            bf16 MTP, B < 32
//   gdn_recurrent_bf16_tn_v4r4w2_lin       64      16        (16*B*HV, 1, 1)           bf16 MTP, B >= 32
// (the tn kernels also run T = 1 correctly, ~3-8% slower than t1 at small B).
#include "common/gates.cuh"

// ---------------------------------------------------------------------------------------------------------
// The one parameter block of every kernel in this file, passed by value (128 bytes, lives in the constant
// bank). 8-byte fields first, then 4-byte fields; no implicit padding. The Rust side mirrors it byte for byte.
struct RecurrentParams {
    const void* q;               // @0    bf16 [B, T, H, 128]
    const void* k;               // @8    bf16 [B, T, H, 128]
    const void* v;               // @16   bf16 [B, T, HV, 128]
    const void* a;               // @24   bf16 [B, T, HV]      decay input (common/gates.cuh)
    const void* b;               // @32   bf16 [B, T, HV]      update-gate input
    const float* A_log;          // @40   f32 [HV]
    const float* dt_bias;        // @48   f32 [HV]
    const void* state;           // @56   f32|bf16 [rows, HV, 128, 128] k-last, or NULL (zero initial state)
    void* new_state;             // @64   same dtype/layout as state, or NULL (not written); may equal `state`
    float* intermediate;         // @72   f32 [rows, T, HV, 128, 128], or NULL (not written)
    void* out;                   // @80   bf16 [B, T, HV, 128]
    const i32* state_indices;    // @88   i32 [B] pool row per request (negative = padding), or NULL (row = b)
    i64 batch;                   // @96   B (requests in this launch). Not read by the kernels (the grid carries B:
                                 //       it must be exactly the documented grid), kept for validation/debugging
    i64 num_state_rows;          // @104  rows of the state pool (state/new_state/intermediate); indices >= this
                                 //       are treated as padding. With state_indices == NULL it must be >= B.
    float scale;                 // @112  output scale, already resolved (1/sqrt(128) when the caller gave 0/None)
    i32 seq_len;                 // @116  T (tokens per request); `t1` kernels ignore it and assume 1
    i32 num_qk_heads;            // @120  H  (== gridDim.y of the ORDER 0 grids)
    i32 num_v_heads;             // @124  HV (== gridDim.y * gridDim.z of ORDER 0 grids), HV % H == 0
};
static_assert(sizeof(RecurrentParams) == 128, "RecurrentParams must stay 128 bytes (Rust mirror)");
// (NVRTC's front end has no constexpr offsetof; the harness checks the offsets it packs against the comments.)

namespace gdn_rec {

constexpr int KD = 128;  // head size (K = V = 128)

// Per-variant constants (one traits table; kernel bodies use only these).
template <int SBYTES, int VEC, int RPT, int WARPS>
struct Cfg {
    static constexpr int LPR = KD / VEC;                               // lanes per V-row
    static constexpr int GPW = 32 / LPR;                               // row groups per warp
    static constexpr int CW = (VEC < 16 / SBYTES) ? VEC : 16 / SBYTES; // state elements per vector access
    static constexpr int NC = VEC / CW;                                // vector accesses per row per lane
    static constexpr int SW = CW * SBYTES / 4;                         // 32-bit words per state access (2|4)
    static constexpr int QW = CW / 2;                                  // 32-bit words per q/k access (bf16)
    static constexpr int ROWS_CTA = WARPS * GPW * RPT;                 // V-rows per CTA
    static constexpr int CPH = KD / ROWS_CTA;                          // CTAs per (request, head)
    static constexpr int VW = (RPT + 1) / 2;                           // words holding RPT bf16 v / out values
    static_assert(SBYTES == 4 || SBYTES == 2, "state is fp32 or bf16");
    static_assert(VEC == 4 || VEC == 8 || VEC == 16, "VEC is 4, 8 or 16");
    static_assert(RPT == 1 || RPT == 2 || RPT == 4 || RPT == 8, "RPT is a power of two <= 8");
    static_assert(ROWS_CTA <= KD && KD % ROWS_CTA == 0, "a CTA covers a divisor of the 128 rows");
    static_assert(SW == 2 || SW == 4, "8- or 16-byte state accesses");
};

// ---- small memory helpers (N 32-bit words, naturally aligned) -------------------------------------------
template <int N> __device__ __forceinline__ void ld_words(u32 (&d)[N], const void* p);          // plain ld
template <> __device__ __forceinline__ void ld_words<2>(u32 (&d)[2], const void* p) {
    const uint2 x = *reinterpret_cast<const uint2*>(p); d[0] = x.x; d[1] = x.y;
}
template <> __device__ __forceinline__ void ld_words<4>(u32 (&d)[4], const void* p) {
    const uint4 x = *reinterpret_cast<const uint4*>(p); d[0] = x.x; d[1] = x.y; d[2] = x.z; d[3] = x.w;
}
// read-only path (token inputs: never written by this kernel)
template <int N> __device__ __forceinline__ void ldg_words(u32 (&d)[N], const void* p);
template <> __device__ __forceinline__ void ldg_words<1>(u32 (&d)[1], const void* p) {
    d[0] = __ldg(reinterpret_cast<const unsigned int*>(p));
}
template <> __device__ __forceinline__ void ldg_words<2>(u32 (&d)[2], const void* p) {
    const uint2 x = __ldg(reinterpret_cast<const uint2*>(p)); d[0] = x.x; d[1] = x.y;
}
template <> __device__ __forceinline__ void ldg_words<4>(u32 (&d)[4], const void* p) {
    const uint4 x = __ldg(reinterpret_cast<const uint4*>(p)); d[0] = x.x; d[1] = x.y; d[2] = x.z; d[3] = x.w;
}
template <int N> __device__ __forceinline__ void st_words(void* p, const u32 (&d)[N]);
template <> __device__ __forceinline__ void st_words<1>(void* p, const u32 (&d)[1]) {
    *reinterpret_cast<unsigned int*>(p) = d[0];
}
template <> __device__ __forceinline__ void st_words<2>(void* p, const u32 (&d)[2]) {
    *reinterpret_cast<uint2*>(p) = make_uint2(d[0], d[1]);
}
template <> __device__ __forceinline__ void st_words<4>(void* p, const u32 (&d)[4]) {
    // inline PTX: NVVM split a plain uint4/float4 store of the intermediate state into 4 scalar stores
    asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(d[0]), "r"(d[1]), "r"(d[2]), "r"(d[3])
                 : "memory");
}

// State traffic: HINT 0 = plain accesses, HINT 1 = .cs (streaming, evict-first in L1/L2).
template <int N, int HINT> __device__ __forceinline__ void ld_state(u32 (&d)[N], const void* p) {
    if constexpr (HINT == 0) ld_words<N>(d, p);
    else if constexpr (N == 4)
        asm volatile("ld.global.cs.v4.u32 {%0, %1, %2, %3}, [%4];"
                     : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3]) : "l"(p) : "memory");
    else
        asm volatile("ld.global.cs.v2.u32 {%0, %1}, [%2];" : "=r"(d[0]), "=r"(d[1]) : "l"(p) : "memory");
}
template <int N, int HINT> __device__ __forceinline__ void st_state(void* p, const u32 (&d)[N]) {
    if constexpr (HINT == 0) st_words<N>(p, d);
    else if constexpr (N == 4)
        asm volatile("st.global.cs.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(d[0]), "r"(d[1]), "r"(d[2]),
                     "r"(d[3]) : "memory");
    else
        asm volatile("st.global.cs.v2.b32 [%0], {%1, %2};" ::"l"(p), "r"(d[0]), "r"(d[1]) : "memory");
}

__device__ __forceinline__ float bf_lo(u32 w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float bf_hi(u32 w) { return __uint_as_float(w & 0xffff0000u); }
// round-to-nearest-even pack: `lo` -> bits 0..15, `hi` -> bits 16..31 (one F2FP instruction)
__device__ __forceinline__ u32 bf_pack(float lo, float hi) {
    u32 r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

// RPT consecutive bf16 values (v of this thread's rows, or its out values): words + a 16-bit case for RPT = 1.
template <int RPT> __device__ __forceinline__ void ldg_bf16_run(u32 (&d)[(RPT + 1) / 2], const void* p) {
    if constexpr (RPT == 1) d[0] = __ldg(reinterpret_cast<const unsigned short*>(p));
    else ldg_words<(RPT + 1) / 2>(d, p);
}
template <int RPT> __device__ __forceinline__ void st_bf16_run(void* p, const u32 (&d)[(RPT + 1) / 2]) {
    if constexpr (RPT == 1) *reinterpret_cast<unsigned short*>(p) = (unsigned short)d[0];
    else st_words<(RPT + 1) / 2>(p, d);
}

// Raw (still-bf16) inputs of one token for one thread: loaded early, converted when used.
template <class C, int RPT>
struct TokRaw {
    u32 q[C::NC][C::QW];
    u32 k[C::NC][C::QW];
    u32 v[C::VW];
    u32 a, b;
};

template <class C, int RPT>
__device__ __forceinline__ void load_tok(TokRaw<C, RPT>& x, const RecurrentParams& p, i64 bq, int t, int T,
                                         int h, int hq, int row0, int kofs) {
    const i64 bt = bq * T + t;
    const __nv_bfloat16* qp = reinterpret_cast<const __nv_bfloat16*>(p.q) + (bt * p.num_qk_heads + hq) * KD + kofs;
    const __nv_bfloat16* kp = reinterpret_cast<const __nv_bfloat16*>(p.k) + (bt * p.num_qk_heads + hq) * KD + kofs;
#pragma unroll
    for (int c = 0; c < C::NC; ++c) {
        ldg_words<C::QW>(x.q[c], qp + c * C::CW * C::LPR);
        ldg_words<C::QW>(x.k[c], kp + c * C::CW * C::LPR);
    }
    const i64 bth = bt * p.num_v_heads + h;
    ldg_bf16_run<RPT>(x.v, reinterpret_cast<const __nv_bfloat16*>(p.v) + bth * KD + row0);
    x.a = __ldg(reinterpret_cast<const unsigned short*>(p.a) + bth);
    x.b = __ldg(reinterpret_cast<const unsigned short*>(p.b) + bth);
}

// ---------------------------------------------------------------------------------------------------------
// The kernel body. SBYTES = 4 (fp32 state) or 2 (bf16 state); TFIX = 1 (decode, T known) or 0 (run-time T).
// ORDER 0: grid (B*CPH, H, HV/H) — no run-time division.
// ORDER 1: grid (B*HV*CPH, 1, 1), blockIdx.x enumerates (request, value head, tile) in state-memory order
//          (two run-time u32 divisions, by HV and by HV/H).
// HINT  0: default caching; 1: state loads / state + intermediate stores with the .cs (evict-first) hint.
template <int SBYTES, int VEC, int RPT, int WARPS, int TFIX, int ORDER, int HINT>
__device__ __forceinline__ void recurrent_body(const RecurrentParams& p) {
    using C = Cfg<SBYTES, VEC, RPT, WARPS>;
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    const int grp = lane / C::LPR;                  // row group inside the warp
    const int j = lane % C::LPR;                    // lane inside the row
    const u32 bx = blockIdx.x;
    const int tile = (int)(bx % C::CPH);            // compile-time divisor
    i64 bq;
    int h, hq;
    if constexpr (ORDER == 0) {
        bq = bx / C::CPH;                           // request
        hq = blockIdx.y;                            // q/k head
        h = hq * (int)gridDim.z + blockIdx.z;       // value head (HV/H == gridDim.z)
    } else {
        const u32 bh = bx / C::CPH;
        const u32 nhv = (u32)p.num_v_heads;
        bq = bh / nhv;
        h = (int)(bh - (u32)bq * nhv);
        hq = h / (int)(nhv / (u32)p.num_qk_heads);
    }
    // (no `bq < batch` test: the grid is exactly B*CTAS_PER_HEAD wide by contract, and the test would put a
    //  constant-bank read and a branch in front of the first state load)
    const int T = TFIX > 0 ? TFIX : p.seq_len;
    const int row0 = tile * C::ROWS_CTA + (warp * C::GPW + grp) * RPT;  // first V-row of this thread
    const int kofs = j * C::CW;                     // K offset of this lane's first access
    const i64 HV = p.num_v_heads;

    // 1. Pool row: the only load that the state loads wait for. Issue it first.
    i64 srow = bq;
    if (p.state_indices != nullptr) srow = (i64)__ldg(p.state_indices + bq);
    const bool pad = srow < 0 || srow >= p.num_state_rows;

    // 2. All state loads at once (RPT*NC accesses of 16 bytes per thread): they are the long pole.
    //    Predicated (not branched) on `pad`, so that without state_indices nothing waits.
    const i64 sofs = ((srow * HV + h) * KD + row0) * KD + kofs;   // element offset of (row0, kofs)
    u32 sraw[RPT][C::NC][C::SW];
#pragma unroll
    for (int i = 0; i < RPT; ++i)
#pragma unroll
        for (int c = 0; c < C::NC; ++c)
#pragma unroll
            for (int w = 0; w < C::SW; ++w) sraw[i][c][w] = 0u;
    if (p.state != nullptr && !pad) {
        const char* sp = reinterpret_cast<const char*>(p.state) + sofs * SBYTES;
#pragma unroll
        for (int i = 0; i < RPT; ++i)
#pragma unroll
            for (int c = 0; c < C::NC; ++c)
                ld_state<C::SW, HINT>(sraw[i][c], sp + (i64)(i * KD + c * C::CW * C::LPR) * SBYTES);
    }

    // 3. Token-0 inputs and head constants (independent of srow).
    TokRaw<C, RPT> cur;
    load_tok<C, RPT>(cur, p, bq, 0, T, h, hq, row0, kofs);
    const float a_log = __ldg(p.A_log + h);
    const float dt_b = __ldg(p.dt_bias + h);

    __nv_bfloat16* outp = reinterpret_cast<__nv_bfloat16*>(p.out) + (bq * T * HV + h) * KD + row0;  // token 0
    const i64 out_tstride = HV * KD;

    if (pad) {                                      // padding: zero output rows, touch nothing else
        if (j == 0) {
            u32 z[C::VW];
#pragma unroll
            for (int i = 0; i < C::VW; ++i) z[i] = 0u;
            for (int t = 0; t < T; ++t) st_bf16_run<RPT>(outp + t * out_tstride, z);
        }
        return;
    }

    float s[RPT][VEC];  // s[i][c*CW+e] = S[row0+i][c*CW*LPR + kofs + e]
#pragma unroll
    for (int i = 0; i < RPT; ++i)
#pragma unroll
        for (int c = 0; c < C::NC; ++c)
#pragma unroll
            for (int e = 0; e < C::CW; ++e) {
                if constexpr (SBYTES == 4) s[i][c * C::CW + e] = __uint_as_float(sraw[i][c][e]);
                else s[i][c * C::CW + e] = (e & 1) ? bf_hi(sraw[i][c][e >> 1]) : bf_lo(sraw[i][c][e >> 1]);
            }

    // 4. Token loop (state stays in registers).
#pragma unroll 1
    for (int t = 0; t < T; ++t) {
        TokRaw<C, RPT> nxt;
        if (TFIX == 0) {  // prefetch token t+1 (the last token reloads itself: no branch, L1/L2 hit)
            const int tn = t + 1 < T ? t + 1 : t;
            load_tok<C, RPT>(nxt, p, bq, tn, T, h, hq, row0, kofs);
        }
        float kf[VEC], qf[VEC];
#pragma unroll
        for (int c = 0; c < C::NC; ++c)
#pragma unroll
            for (int e = 0; e < C::CW; ++e) {
                const u32 kw = cur.k[c][e >> 1], qw = cur.q[c][e >> 1];
                kf[c * C::CW + e] = (e & 1) ? bf_hi(kw) : bf_lo(kw);
                qf[c * C::CW + e] = (e & 1) ? bf_hi(qw) : bf_lo(qw);
            }
        // partial dot products: red[2i] = S_i·k, red[2i+1] = S_i·q, red[2*RPT] = k·q
        // (two interleaved accumulators per sum: halves the dependent FMA chain for VEC >= 8)
        float red[2 * RPT + 1];
        {
            float kq0 = 0.f, kq1 = 0.f;
#pragma unroll
            for (int e = 0; e < VEC; e += 2) { kq0 = fmaf(kf[e], qf[e], kq0); kq1 = fmaf(kf[e + 1], qf[e + 1], kq1); }
            red[2 * RPT] = kq0 + kq1;
        }
#pragma unroll
        for (int i = 0; i < RPT; ++i) {
            float sk0 = 0.f, sq0 = 0.f, sk1 = 0.f, sq1 = 0.f;
#pragma unroll
            for (int e = 0; e < VEC; e += 2) {
                sk0 = fmaf(s[i][e], kf[e], sk0);
                sq0 = fmaf(s[i][e], qf[e], sq0);
                sk1 = fmaf(s[i][e + 1], kf[e + 1], sk1);
                sq1 = fmaf(s[i][e + 1], qf[e + 1], sq1);
            }
            red[2 * i] = sk0 + sk1;
            red[2 * i + 1] = sq0 + sq1;
        }
        // butterfly over the LPR lanes of the row (xor offsets < LPR stay inside the aligned row group);
        // all 2*RPT+1 values per level are independent, so the shuffles pipeline.
#pragma unroll
        for (int off = C::LPR / 2; off >= 1; off >>= 1)
#pragma unroll
            for (int r = 0; r < 2 * RPT + 1; ++r) red[r] += __shfl_xor_sync(0xffffffffu, red[r], off);

        // gates (every thread computes its head's). Kept after the reductions: moving them (and their loads)
        // first made the chain serial with the reductions and B <= 16 3-7% slower.
        const float g = __expf(gdn_log_decay(bf_lo(cur.a), dt_b, a_log));
        const float beta = gdn_beta(bf_lo(cur.b));
        const float kq = red[2 * RPT];
        float o[RPT];
#pragma unroll
        for (int i = 0; i < RPT; ++i) {
            const float vv = (i & 1) ? bf_hi(cur.v[i >> 1]) : bf_lo(cur.v[i >> 1]);
            const float delta = beta * (vv - g * red[2 * i]);
            o[i] = p.scale * fmaf(delta, kq, g * red[2 * i + 1]);
#pragma unroll
            for (int e = 0; e < VEC; ++e) s[i][e] = fmaf(delta, kf[e], g * s[i][e]);
        }
        // output: the row group's lane 0 writes its RPT consecutive values in one store
        if (j == 0) {
            u32 ow[C::VW];
            if constexpr (RPT == 1) ow[0] = bf_pack(o[0], 0.f) & 0xffffu;
            else {
#pragma unroll
                for (int i = 0; i < C::VW; ++i) ow[i] = bf_pack(o[2 * i], o[2 * i + 1]);
            }
            st_bf16_run<RPT>(outp + t * out_tstride, ow);
        }
        // state after token t (fp32, 16-byte stores, coalesced along K)
        if (p.intermediate != nullptr) {
            float* ip = p.intermediate + (((srow * T + t) * HV + h) * KD + row0) * KD + kofs;
#pragma unroll
            for (int i = 0; i < RPT; ++i)
#pragma unroll
                for (int c = 0; c < C::NC; ++c)
#pragma unroll
                    for (int e4 = 0; e4 < C::CW / 4; ++e4) {
                        const int e = c * C::CW + e4 * 4;
                        const u32 w[4] = {__float_as_uint(s[i][e]), __float_as_uint(s[i][e + 1]),
                                          __float_as_uint(s[i][e + 2]), __float_as_uint(s[i][e + 3])};
                        st_state<4, HINT>(ip + i * KD + c * C::CW * C::LPR + e4 * 4, w);
                    }
        }
        if (TFIX == 0) cur = nxt;
    }

    // 5. Final state, same row it came from.
    if (p.new_state != nullptr) {
        char* np = reinterpret_cast<char*>(p.new_state) + sofs * SBYTES;
#pragma unroll
        for (int i = 0; i < RPT; ++i)
#pragma unroll
            for (int c = 0; c < C::NC; ++c) {
                u32 w[C::SW];
#pragma unroll
                for (int x = 0; x < C::SW; ++x) {
                    if constexpr (SBYTES == 4) w[x] = __float_as_uint(s[i][c * C::CW + x]);
                    else w[x] = bf_pack(s[i][c * C::CW + 2 * x], s[i][c * C::CW + 2 * x + 1]);
                }
                st_state<C::SW, HINT>(np + (i64)(i * KD + c * C::CW * C::LPR) * SBYTES, w);
            }
    }
}

}  // namespace gdn_rec

// ---------------------------------------------------------------------------------------------------------
// Exported kernels. One line per variant; the name encodes every template argument (see the header).
#define GDN_REC_EXPORT_EX(ST, SBYTES, TT, TFIX, VEC, RPT, WARPS, ORDER, HINT, SUFFIX)                     \
    extern "C" __global__ void __launch_bounds__((WARPS) * 32)                                             \
        gdn_recurrent_##ST##_##TT##_v##VEC##r##RPT##w##WARPS##SUFFIX(const RecurrentParams p) {            \
        gdn_rec::recurrent_body<SBYTES, VEC, RPT, WARPS, TFIX, ORDER, HINT>(p);                            \
    }
#define GDN_REC_EXPORT(ST, SBYTES, TT, TFIX, VEC, RPT, WARPS) \
    GDN_REC_EXPORT_EX(ST, SBYTES, TT, TFIX, VEC, RPT, WARPS, 0, 0, )

GDN_REC_EXPORT(f32, 4, t1, 1, 4, 2, 8)
GDN_REC_EXPORT(f32, 4, t1, 1, 4, 2, 4)
GDN_REC_EXPORT(f32, 4, t1, 1, 8, 4, 4)
GDN_REC_EXPORT_EX(f32, 4, t1, 1, 8, 4, 1, 1, 0, _lin)
GDN_REC_EXPORT(bf16, 2, t1, 1, 8, 2, 4)
GDN_REC_EXPORT(bf16, 2, t1, 1, 8, 4, 2)
GDN_REC_EXPORT_EX(bf16, 2, t1, 1, 8, 4, 4, 1, 0, _lin)
GDN_REC_EXPORT(f32, 4, tn, 0, 8, 4, 2)
GDN_REC_EXPORT_EX(f32, 4, tn, 0, 8, 4, 2, 1, 0, _lin)
GDN_REC_EXPORT(bf16, 2, tn, 0, 4, 4, 2)
GDN_REC_EXPORT_EX(bf16, 2, tn, 0, 4, 4, 2, 1, 0, _lin)
