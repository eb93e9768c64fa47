// recurrent.cu — Gated Delta Net decode (T = 1) and MTP / speculative verify (T = 2..8) for Hopper (sm_90a).
//
// Compiled at run time by NVRTC (`-arch=sm_90a -std=c++17`; headers by their path under kernels/); includes only
// common/serving.cuh (which includes common/gates.cuh and <cuda_bf16.h>). No shared memory, no __syncthreads:
// every warp is independent.
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
// Layouts (all dense unless stated, element strides implied; every base pointer 16-byte aligned):
//   q, k   bf16 [B, T, H, 128]          v    bf16 [B, T, HV, 128]         a, b   bf16 [B, T, HV]
//   A_log, dt_bias  f32 [HV]            out  bf16 [B, T, HV, 128]
//   state / new_state   [rows, HV, 128, 128] fp32 or bf16 (by kernel name); per head [V][K] "k-last" (K
//                       contiguous), or [K][V] "K-first" (V contiguous) in the `_kf` kernels. Consecutive rows
//                       are serving.state_row_stride elements apart (0: HV*128*128, dense); the stride applies
//                       to both pointers.
//   intermediate        f32 [rows, T, HV, 128, 128] dense, per head in the kernel's layout (state after each
//                       token; rows = the state pool's rows; its T extent must equal seq_len)
//   state_indices       i32 [B] pool row per request (row b when NULL); with spec-decode slots i32 [B, T].
// Value head h uses q/k head h / (HV/H) (GVA, repeat_interleave order).
//
// Pointer semantics:
//   state == NULL         zero initial state (nothing read).
//   new_state == NULL     final state not written (gdn_mtp "pool not updated" mode).
//   new_state == state    allowed (in-place): every element is read once, by the thread that later writes it,
//                         before that thread writes anything; no other CTA touches the row (distinct (b, h)
//                         pairs own disjoint rows as long as the pool rows of distinct requests differ — the
//                         caller's contract).
//   intermediate == NULL  per-token states not written.
//   padding               request b is skipped: its out rows (all T tokens, all heads) are written as zeros,
//                         nothing else is read or written for it. A pool index is padding when it is negative
//                         (with SV_PAD_NULL also when it is 0), or >= num_state_rows: a bad index can never
//                         touch memory outside the pool. Without any index tensor request b uses row b.
// All offsets are 64-bit. A pool of >4096 rows (>2^31 elements) is fine.
//
// The serving block (RecurrentParams::serving, common/serving.cuh; all zero = the definitions' semantics), read by
// the serving builds (`_sv`, `_kf`; see "Builds" below):
//   gates        SV_GATE_LOG: g = exp(serving.gate[b, t, h]); SV_GATE_LINEAR: g = serving.gate[b, t, h] (alpha);
//                beta = serving.beta[b, t, h] (f32, or bf16 with SV_BETA_BF16). a, b, A_log, dt_bias are then
//                not read (they may be NULL).
//   SV_QK_NORM   q and k of each (token, q/k head) are L2-normalised before use: the row's lanes together hold
//                all 128 values, reduce the fp32 sum of squares with the same butterfly as the dot products,
//                and use bf16(x * rsqrt(sum + 1e-6)) (the rounding the reference applies).
//   pool_indices decode pools: request b reads and writes row pool_indices[b] (i32, or i64 with SV_INDEX_I64)
//                of state / new_state (in place: both point at the pool). state_indices must then be NULL.
//   has_initial  has_initial[b] == 0: the request starts from zeros (its row is not read) and still writes.
//   num_accepted spec-decode slots (MTP): state_indices is i32 [B, T]; request b is padding when
//                state_indices[b, 0] is; else it reads row state_indices[b, num_accepted[b] - 1] (a count
//                outside 1..T makes it padding) and writes the state after token t to new_state row
//                state_indices[b, t] unless that entry is padding (no final-state write, no intermediate).
//   SV_KFIRST    the `_kf` kernels; the host never pairs a layout with the other layout's kernel.
//   state_row_stride  elements between pool rows of state / new_state (0: dense).
//   Branches on these are uniform (constant-bank values) and outside the per-element work.
//
// Builds (template MODE; the host picks one per call, plan::decode::Build):
//   no suffix    the definitions only: the serving block is never read and every serving branch folds away at
//                compile time, so these kernels hold the definition-mode code alone.
//   _sv          every serving mode, k-last state; the same launch as the kernel without the suffix. It also
//                computes definition-mode calls (an all-zero block).
//   _kf          every serving mode, K-first state.
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
//   NC = VEC / CW chunks of CW elements (CW*SBYTES = 16 bytes: CW = 4 for fp32, 8 for bf16).
//   Lane j of a row holds K = c*CW*LPR + j*CW + e (c < NC, e < CW).
//   k-last: each state access is one chunk (16 bytes along K); one access instruction of a row group reads
//     CW*LPR contiguous elements — fully coalesced 16-byte loads/stores along K.
//   K-first (`_kf`): the same ownership; each state access holds the thread's RPT consecutive V-values of one
//     K (RPT*SBYTES bytes: the `_kf` kernels use RPT = 16/SBYTES, i.e. 16-byte accesses along V), VEC of them
//     per thread; one access instruction of a warp covers GPW*RPT contiguous V-values at each of LPR K-rows.
//     The intermediate states follow the same mapping.
//
// Why:
//   * many CTAs per (request, head) at small batch: B=1 has only 8 heads; the B<=2 kernel uses 8 CTAs per head
//     (64 CTAs of 8 warps; 32 CTAs per head of 4 warps measured 7% slower), the large-B kernel 1-warp CTAs.
//   * all state loads (RPT*NC 16-byte loads per thread, k-last) and all token inputs are issued before the
//     first use: one DRAM round trip per launch, the whole kernel is latency- or bandwidth-bound.
//   * gates computed in-kernel (no extra launch), q/k/v read straight from global (L1/L2 broadcast; staging
//     them in shared memory did not help peers), shuffle-only reductions, no shared memory, no barriers.
//   * grid in state-memory order at large B (`_lin`): consecutive CTAs stream consecutive 4-8 KB of the state
//     (the ORDER 0 grid walks one head of every request first: 512 KB strides, 3.5% slower at B=1024).
//   * the gate chain (~60 dependent instructions: ex2, log1p polynomial, ex2, div) stays after the reductions:
//     it costs ~0.25 us at B=1 (latency probes) but moving it first measured 3-7% slower at B<=16.
//   * runtime-T variants (`tn`) keep the state in registers across tokens and prefetch token t+1's inputs while
//     token t is computed; the state is read once and written once (+ T intermediate states if asked).
//   * K-first keeps the k-last compute mapping (same dot products and reductions) and changes only which
//     elements one state access holds: they run along V, where that layout is contiguous.
//
// ---------------------------------------------------------------------------------------------------------
// Kernel naming:   gdn_recurrent_<st>_<tt>_v<VEC>r<RPT>w<WARPS>[_lin][_cs][_sv|_kf]
//   <st>   f32 | bf16      state dtype (bf16: stored bf16, math fp32; intermediate states are always fp32)
//   <tt>   t1              decode, T must be 1 (seq_len is ignored)
//          tn              any T >= 1 at run time (MTP)
//   VEC    K-values per lane per row (4, 8, 16)  -> LPR = 128/VEC lanes per row, GPW = VEC/4 rows per warp access
//   RPT    rows per thread (1, 2, 4, 8)
//   WARPS  warps per CTA  (block = 32*WARPS)
//   _lin   ORDER 1 grid: (B*HV*CTAS_PER_HEAD, 1, 1), blockIdx.x walks (request, head, tile) in state-memory order
//          (no suffix: ORDER 0 grid (B*CTAS_PER_HEAD, H, HV/H)). In-order streaming is ~3% faster at B >= 64.
//   _cs    evict-first (.cs) hint on state loads/stores (harness sweeps only; never a winner, not exported)
//   _sv    serving build, k-last state (MODE 1)
//   _kf    serving build, K-first state (MODE 2; SV_KFIRST calls only)
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
//   each of the eleven above + `_sv`: its serving build, same launch and policy (calls with serving modes)
//   K-first (not measured; the batch switch of each family's k-last head-major / _lin pair):
//   gdn_recurrent_f32_t1_v8r4w4_kf        128       4        (4B, H, HV/H)             fp32 decode, B <= 24
//   gdn_recurrent_f32_t1_v8r4w1_lin_kf     32      16        (16*B*HV, 1, 1)           fp32 decode, B >= 25
//   gdn_recurrent_bf16_t1_v4r8w4_kf       128       4        (4B, H, HV/H)             bf16 decode, B <= 96
//   gdn_recurrent_bf16_t1_v4r8w4_lin_kf   128       4        (4*B*HV, 1, 1)            bf16 decode, B > 96
//   gdn_recurrent_f32_tn_v8r4w2_kf         64       8        (8B, H, HV/H)             fp32 MTP, B < 128
//   gdn_recurrent_f32_tn_v8r4w2_lin_kf     64       8        (8*B*HV, 1, 1)            fp32 MTP, B >= 128
//   gdn_recurrent_bf16_tn_v4r8w2_kf        64       8        (8B, H, HV/H)             bf16 MTP, B < 32
//   gdn_recurrent_bf16_tn_v4r8w2_lin_kf    64       8        (8*B*HV, 1, 1)            bf16 MTP, B >= 32
// (the tn kernels also run T = 1 correctly, ~3-8% slower than t1 at small B).
#include "common/serving.cuh"

// ---------------------------------------------------------------------------------------------------------
// The parameter block, passed by value (it lives in the constant bank). 8-byte fields first, then 4-byte
// fields, then the serving block; no implicit padding. The Rust side mirrors RecurrentParams byte for byte and
// every launch passes it whole; the definition build (MODE 0) declares only its first 128 bytes
// (RecurrentCore), which is all it reads, so the driver copies no serving block into its constant bank: a
// 200-byte parameter block measured ~0.1 µs slower at B = 1 (2.18 vs 2.08 µs, H200) than the 128-byte one.
struct RecurrentCore {
    const void* q;               // @0    bf16 [B, T, H, 128]
    const void* k;               // @8    bf16 [B, T, H, 128]
    const void* v;               // @16   bf16 [B, T, HV, 128]
    const void* a;               // @24   bf16 [B, T, HV]      decay input (common/gates.cuh); raw gates only
    const void* b;               // @32   bf16 [B, T, HV]      update-gate input; raw gates only
    const float* A_log;          // @40   f32 [HV]             raw gates only
    const float* dt_bias;        // @48   f32 [HV]             raw gates only
    const void* state;           // @56   f32|bf16 [rows, HV, 128, 128] (layout by kernel), or NULL (zeros)
    void* new_state;             // @64   same dtype/layout as state, or NULL (not written); may equal `state`
    float* intermediate;         // @72   f32 [rows, T, HV, 128, 128], or NULL (not written)
    void* out;                   // @80   bf16 [B, T, HV, 128]
    const i32* state_indices;    // @88   i32 [B] pool row per request, or [B, T] spec-decode slots
                                 //       (serving.num_accepted != NULL), or NULL (row = b)
    i64 batch;                   // @96   B (requests in this launch). Not read by the kernels (the grid carries B:
                                 //       it must be exactly the documented grid), kept for validation/debugging
    i64 num_state_rows;          // @104  rows of the state pool (state/new_state/intermediate); indices >= this
                                 //       are treated as padding. Without index tensors it must be >= B.
    float scale;                 // @112  output scale, already resolved (1/sqrt(128) when the caller gave 0/None)
    i32 seq_len;                 // @116  T (tokens per request); `t1` kernels ignore it and assume 1
    i32 num_qk_heads;            // @120  H  (== gridDim.y of the ORDER 0 grids)
    i32 num_v_heads;             // @124  HV (== gridDim.y * gridDim.z of ORDER 0 grids), HV % H == 0
};
struct RecurrentParams : RecurrentCore {
    ServingParams serving;       // @128  serving modes (common/serving.cuh); all zero: the definitions
};
static_assert(sizeof(RecurrentCore) == 128, "RecurrentCore is the first 128 bytes of RecurrentParams");
static_assert(sizeof(RecurrentParams) == 264, "RecurrentParams must stay 264 bytes (Rust mirror)");
// (NVRTC's front end has no constexpr offsetof; the harness checks the offsets it packs against the comments.)

namespace gdn_rec {

constexpr int KD = 128;  // head size (K = V = 128)

// Per-variant constants (one traits table; kernel bodies use only these). KF: K-first state layout.
template <int SBYTES, int VEC, int RPT, int WARPS, int KF = 0>
struct Cfg {
    static constexpr int LPR = KD / VEC;                               // lanes per V-row
    static constexpr int GPW = 32 / LPR;                               // row groups per warp
    static constexpr int CW = (VEC < 16 / SBYTES) ? VEC : 16 / SBYTES; // K-values per chunk
    static constexpr int NC = VEC / CW;                                // chunks per row per lane
    static constexpr int QW = CW / 2;                                  // 32-bit words per q/k access (bf16)
    static constexpr int ROWS_CTA = WARPS * GPW * RPT;                 // V-rows per CTA
    static constexpr int CPH = KD / ROWS_CTA;                          // CTAs per (request, head)
    static constexpr int VW = (RPT + 1) / 2;                           // words holding RPT bf16 v / out values
    // state accesses per thread and their 32-bit words: k-last one chunk (CW K-values of one row) each,
    // K-first the RPT V-values of one K each
    static constexpr int NLD = KF ? VEC : RPT * NC;
    static constexpr int LW = KF ? RPT * SBYTES / 4 : CW * SBYTES / 4;
    static_assert(SBYTES == 4 || SBYTES == 2, "state is fp32 or bf16");
    static_assert(VEC == 4 || VEC == 8 || VEC == 16, "VEC is 4, 8 or 16");
    static_assert(RPT == 1 || RPT == 2 || RPT == 4 || RPT == 8, "RPT is a power of two <= 8");
    static_assert(ROWS_CTA <= KD && KD % ROWS_CTA == 0, "a CTA covers a divisor of the 128 rows");
    static_assert(LW == 1 || LW == 2 || LW == 4, "4-, 8- or 16-byte state accesses");
    static_assert(KF || LW >= 2, "k-last state accesses are 8 or 16 bytes");
};

// ---- small memory helpers (N 32-bit words, naturally aligned) -------------------------------------------
template <int N> __device__ __forceinline__ void ld_words(u32 (&d)[N], const void* p);          // plain ld
template <> __device__ __forceinline__ void ld_words<1>(u32 (&d)[1], const void* p) {
    d[0] = *reinterpret_cast<const unsigned int*>(p);
}
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
    else if constexpr (N == 2)
        asm volatile("ld.global.cs.v2.u32 {%0, %1}, [%2];" : "=r"(d[0]), "=r"(d[1]) : "l"(p) : "memory");
    else
        asm volatile("ld.global.cs.u32 %0, [%1];" : "=r"(d[0]) : "l"(p) : "memory");
}
template <int N, int HINT> __device__ __forceinline__ void st_state(void* p, const u32 (&d)[N]) {
    if constexpr (HINT == 0) st_words<N>(p, d);
    else if constexpr (N == 4)
        asm volatile("st.global.cs.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(d[0]), "r"(d[1]), "r"(d[2]),
                     "r"(d[3]) : "memory");
    else if constexpr (N == 2)
        asm volatile("st.global.cs.v2.b32 [%0], {%1, %2};" ::"l"(p), "r"(d[0]), "r"(d[1]) : "memory");
    else
        asm volatile("st.global.cs.b32 [%0], %1;" ::"l"(p), "r"(d[0]) : "memory");
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

// N contiguous state values stored as OB-byte elements (4: fp32, 2: bf16) in 16-, 8- or 4-byte accesses.
template <int N, int OB, int HINT> __device__ __forceinline__ void st_run(char* p, const float (&x)[N]) {
    if constexpr (OB == 4) {
        static_assert(N == 1 || N == 2 || N % 4 == 0, "fp32 runs of 1, 2 or 4k values");
        if constexpr (N <= 2) {
            u32 w[N];
#pragma unroll
            for (int e = 0; e < N; ++e) w[e] = __float_as_uint(x[e]);
            st_state<N, HINT>(p, w);
        } else {
#pragma unroll
            for (int q = 0; q < N / 4; ++q) {
                const u32 w[4] = {__float_as_uint(x[4 * q]), __float_as_uint(x[4 * q + 1]),
                                  __float_as_uint(x[4 * q + 2]), __float_as_uint(x[4 * q + 3])};
                st_state<4, HINT>(p + 16 * q, w);
            }
        }
    } else {
        static_assert(N == 2 || N == 4 || N % 8 == 0, "bf16 runs of 2, 4 or 8k values");
        if constexpr (N <= 4) {
            u32 w[N / 2];
#pragma unroll
            for (int e = 0; e < N / 2; ++e) w[e] = bf_pack(x[2 * e], x[2 * e + 1]);
            st_state<N / 2, HINT>(p, w);
        } else {
#pragma unroll
            for (int q = 0; q < N / 8; ++q) {
                const u32 w[4] = {bf_pack(x[8 * q], x[8 * q + 1]), bf_pack(x[8 * q + 2], x[8 * q + 3]),
                                  bf_pack(x[8 * q + 4], x[8 * q + 5]), bf_pack(x[8 * q + 6], x[8 * q + 7])};
                st_state<4, HINT>(p + 16 * q, w);
            }
        }
    }
}

// ---- the thread's state tile: RPT rows x VEC K-values, s[i][c*CW+e] = S[row0+i][c*CW*LPR + kofs + e] ------
// Element offset of state access a (< NLD) from the thread's first element, which is (row0, kofs) of the head's
// [V][K] state (k-last) or (kofs, row0) of its [K][V] state (K-first).
template <class C, int KF> __device__ __forceinline__ constexpr int access_ofs(int a) {
    if constexpr (KF) return ((a / C::CW) * C::CW * C::LPR + a % C::CW) * KD;  // a = K slot c*CW+e
    else return (a / C::NC) * KD + (a % C::NC) * C::CW * C::LPR;               // a = i*NC + c
}

template <class C, int KF, int SBYTES, int HINT>
__device__ __forceinline__ void load_tile(u32 (&raw)[C::NLD][C::LW], const char* base) {
#pragma unroll
    for (int a = 0; a < C::NLD; ++a) ld_state<C::LW, HINT>(raw[a], base + (i64)access_ofs<C, KF>(a) * SBYTES);
}

template <class C, int KF, int SBYTES, int RPT, int VEC>
__device__ __forceinline__ void unpack_tile(float (&s)[RPT][VEC], const u32 (&raw)[C::NLD][C::LW]) {
#pragma unroll
    for (int i = 0; i < RPT; ++i)
#pragma unroll
        for (int x = 0; x < VEC; ++x) {
            const int a = KF ? x : i * C::NC + x / C::CW;   // the access holding S value (i, x)
            const int el = KF ? i : x % C::CW;               // its element in that access
            if constexpr (SBYTES == 4) s[i][x] = __uint_as_float(raw[a][el]);
            else s[i][x] = (el & 1) ? bf_hi(raw[a][el >> 1]) : bf_lo(raw[a][el >> 1]);
        }
}

// Stores the tile as OB-byte elements at `base` (the thread's first element; same access pattern as the loads).
template <class C, int KF, int OB, int HINT, int RPT, int VEC>
__device__ __forceinline__ void store_tile(char* base, const float (&s)[RPT][VEC]) {
    if constexpr (KF) {
#pragma unroll
        for (int x = 0; x < VEC; ++x) {
            float r[RPT];
#pragma unroll
            for (int i = 0; i < RPT; ++i) r[i] = s[i][x];
            st_run<RPT, OB, HINT>(base + (i64)access_ofs<C, KF>(x) * OB, r);
        }
    } else {
#pragma unroll
        for (int i = 0; i < RPT; ++i)
#pragma unroll
            for (int c = 0; c < C::NC; ++c) {
                float r[C::CW];
#pragma unroll
                for (int e = 0; e < C::CW; ++e) r[e] = s[i][c * C::CW + e];
                st_run<C::CW, OB, HINT>(base + (i64)access_ofs<C, KF>(i * C::NC + c) * OB, r);
            }
    }
}

// Raw (still-bf16) inputs of one token for one thread: loaded early, converted when used. `a`, `b`: the raw
// gate inputs (bf16 in the low half), or the precomputed g / alpha (f32 bits) and beta (f32 bits, or bf16).
template <class C, int RPT>
struct TokRaw {
    u32 q[C::NC][C::QW];
    u32 k[C::NC][C::QW];
    u32 v[C::VW];
    u32 a, b;
};

template <class C, int RPT, bool SV = false>
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
    const int flags = SV ? p.serving.flags : 0;
    if ((flags & SV_GATE_MASK) == 0) {
        x.a = __ldg(reinterpret_cast<const unsigned short*>(p.a) + bth);
        x.b = __ldg(reinterpret_cast<const unsigned short*>(p.b) + bth);
    } else {
        x.a = __float_as_uint(__ldg(p.serving.gate + bth));
        x.b = (flags & SV_BETA_BF16) ? (u32)__ldg(reinterpret_cast<const unsigned short*>(p.serving.beta) + bth)
                                     : __ldg(reinterpret_cast<const unsigned int*>(p.serving.beta) + bth);
    }
}

// ---------------------------------------------------------------------------------------------------------
// The kernel body. SBYTES = 4 (fp32 state) or 2 (bf16 state); TFIX = 1 (decode, T known) or 0 (run-time T).
// ORDER 0: grid (B*CPH, H, HV/H) — no run-time division.
// ORDER 1: grid (B*HV*CPH, 1, 1), blockIdx.x enumerates (request, value head, tile) in state-memory order
//          (two run-time u32 divisions, by HV and by HV/H).
// HINT  0: default caching; 1: state loads / state + intermediate stores with the .cs (evict-first) hint.
// MODE  0: the definitions (the serving block is not read: every serving branch below folds away at compile
//          time, so these kernels are exactly the definition-mode code); 1: serving modes, k-last state;
//          2: serving modes, K-first state.
template <int SBYTES, int VEC, int RPT, int WARPS, int TFIX, int ORDER, int HINT, int MODE>
__device__ __forceinline__ void recurrent_body(const RecurrentParams& p) {
    constexpr bool SV = MODE != 0;
    constexpr int KF = MODE == 2;
    using C = Cfg<SBYTES, VEC, RPT, WARPS, KF>;
    const ServingParams& sv = p.serving;
    const int flags = SV ? sv.flags : 0;
    // padding under the call's rule (definition mode: negative indices)
    const auto is_pad = [flags](i64 idx) { return (flags & SV_PAD_NULL) ? idx <= 0 : idx < 0; };
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
    const int kofs = j * C::CW;                     // K offset of this lane's first chunk
    const i64 HV = p.num_v_heads;

    // 1. Pool row: the only load that the state loads wait for. Issue it first.
    //    Spec-decode slots: the request's row list is state_indices[b, 0..T); it reads slot num_accepted - 1.
    const i32* sidx = p.state_indices;
    const bool slots = SV && sv.num_accepted != nullptr;
    i64 srow = bq;
    bool pad = false;
    if constexpr (!SV) {
        if (sidx != nullptr) srow = (i64)__ldg(sidx + bq);
        pad = srow < 0;
    } else if (slots) {
        const int acc = __ldg(sv.num_accepted + bq);
        const i64 first = __ldg(sidx + bq * T);
        srow = __ldg(sidx + bq * T + (min(max(acc, 1), T) - 1));   // clamped: never outside the request's slots
        pad = is_pad(first) || acc < 1 || acc > T || is_pad(srow);
    } else if (SV && sv.pool_indices != nullptr) {
        srow = sv_pool_index(sv, bq);
        pad = is_pad(srow);
    } else if (sidx != nullptr) {
        srow = (i64)__ldg(sidx + bq);
        pad = is_pad(srow);
    }
    pad = pad || srow >= p.num_state_rows;
    const bool fresh = SV && !sv_has_initial(sv, bq);   // start from zeros: the row is not read

    // 2. All state loads at once (NLD accesses of up to 16 bytes per thread): they are the long pole.
    //    Predicated (not branched) on `pad`, so that without indices nothing waits.
    //    sofs: the thread's first element in its pool row (rows are serving.state_row_stride apart). The
    //    definition build keeps its own expression of the same offset (its code is the definition-mode code).
    //    Serving offsets are formed where they are used, from sofs, srow and the constant bank, so that no
    //    extra 64-bit value stays live across the loads and the token loop.
    const int tin = KF ? kofs * KD + row0 : row0 * KD + kofs;      // ... within the head's [128][128] state
    const i64 sofs = SV ? srow * sv_row_stride(sv, HV * (KD * KD)) + ((i64)h * (KD * KD) + tin)
                        : ((srow * HV + h) * KD + row0) * KD + kofs;
    u32 sraw[C::NLD][C::LW];
#pragma unroll
    for (int a = 0; a < C::NLD; ++a)
#pragma unroll
        for (int w = 0; w < C::LW; ++w) sraw[a][w] = 0u;
    if (p.state != nullptr && !pad && !fresh)
        load_tile<C, KF, SBYTES, HINT>(sraw, reinterpret_cast<const char*>(p.state) + sofs * SBYTES);

    // 3. Token-0 inputs and head constants (independent of srow).
    TokRaw<C, RPT> cur;
    load_tok<C, RPT, SV>(cur, p, bq, 0, T, h, hq, row0, kofs);
    const int gate_mode = flags & SV_GATE_MASK;
    float a_log = 0.f, dt_b = 0.f;
    if (gate_mode == 0) {
        a_log = __ldg(p.A_log + h);
        dt_b = __ldg(p.dt_bias + h);
    }

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
    unpack_tile<C, KF, SBYTES>(s, sraw);

    // 4. Token loop (state stays in registers).
#pragma unroll 1
    for (int t = 0; t < T; ++t) {
        TokRaw<C, RPT> nxt;
        if (TFIX == 0) {  // prefetch token t+1 (the last token reloads itself: no branch, L1/L2 hit)
            const int tn = t + 1 < T ? t + 1 : t;
            load_tok<C, RPT, SV>(nxt, p, bq, tn, T, h, hq, row0, kofs);
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
        if (flags & SV_QK_NORM) {
            // the row's LPR lanes hold the whole q/k head: fp32 sums of squares over the same butterfly,
            // then x -> bf16(x * rsqrt(sum + eps)), the values the reference uses
            float ssk = 0.f, ssq = 0.f;
#pragma unroll
            for (int e = 0; e < VEC; ++e) { ssk = fmaf(kf[e], kf[e], ssk); ssq = fmaf(qf[e], qf[e], ssq); }
#pragma unroll
            for (int off = C::LPR / 2; off >= 1; off >>= 1) {
                ssk += __shfl_xor_sync(0xffffffffu, ssk, off);
                ssq += __shfl_xor_sync(0xffffffffu, ssq, off);
            }
            const float rk = rsqrtf(ssk + SV_QK_NORM_EPS), rq = rsqrtf(ssq + SV_QK_NORM_EPS);
#pragma unroll
            for (int e = 0; e < VEC; e += 2) {
                const u32 kw = bf_pack(kf[e] * rk, kf[e + 1] * rk), qw = bf_pack(qf[e] * rq, qf[e + 1] * rq);
                kf[e] = bf_lo(kw); kf[e + 1] = bf_hi(kw);
                qf[e] = bf_lo(qw); qf[e + 1] = bf_hi(qw);
            }
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
        float g, beta;
        if (gate_mode == 0) {
            g = __expf(gdn_log_decay(bf_lo(cur.a), dt_b, a_log));
            beta = gdn_beta(bf_lo(cur.b));
        } else {
            const float gv = __uint_as_float(cur.a);
            g = gate_mode == SV_GATE_LINEAR ? gv : __expf(gv);
            beta = (flags & SV_BETA_BF16) ? bf_lo(cur.b) : __uint_as_float(cur.b);
        }
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
        // state after token t: fp32 into the intermediate buffer (dense, 16-byte stores) ...
        if (p.intermediate != nullptr) {
            const i64 iofs = SV ? ((srow * T + t) * HV + h) * (KD * KD) + tin
                                : (((srow * T + t) * HV + h) * KD + row0) * KD + kofs;
            store_tile<C, KF, 4, HINT>(reinterpret_cast<char*>(p.intermediate + iofs), s);
        }
        // ... or, with spec-decode slots, in the state dtype into its pool row (unless that slot is padding).
        // The slot is loaded here, not with the token's inputs: a register held across the token's math
        // costs more than this L1 hit (the request's slots share the line read for the initial row).
        if (slots) {
            const i64 wrow = __ldg(sidx + bq * T + t);
            if (!is_pad(wrow) && wrow < p.num_state_rows) {
                const i64 wofs = sofs + (wrow - srow) * sv_row_stride(sv, HV * (KD * KD));
                store_tile<C, KF, SBYTES, HINT>(reinterpret_cast<char*>(p.new_state) + wofs * SBYTES, s);
            }
        }
        if (TFIX == 0) cur = nxt;
    }

    // 5. Final state, same row it came from (spec-decode slots wrote theirs per token).
    if (p.new_state != nullptr && !slots)
        store_tile<C, KF, SBYTES, HINT>(reinterpret_cast<char*>(p.new_state) + sofs * SBYTES, s);
}

}  // namespace gdn_rec

// ---------------------------------------------------------------------------------------------------------
// Exported kernels. One line per variant; the name encodes every template argument (see the header).
// GDN_REC_EXPORT_MODE: a serving build (MODE 1, 2; the whole RecurrentParams); GDN_REC_EXPORT_EX /
// GDN_REC_EXPORT: the definition build (MODE 0), which takes RecurrentCore and never reads past it (every read
// of the serving block sits in a branch that MODE 0 folds away).
#define GDN_REC_EXPORT_MODE(ST, SBYTES, TT, TFIX, VEC, RPT, WARPS, ORDER, HINT, SUFFIX, MODE)             \
    extern "C" __global__ void __launch_bounds__((WARPS) * 32)                                             \
        gdn_recurrent_##ST##_##TT##_v##VEC##r##RPT##w##WARPS##SUFFIX(const RecurrentParams p) {            \
        static_assert(MODE != 0, "the definition build takes RecurrentCore");                              \
        gdn_rec::recurrent_body<SBYTES, VEC, RPT, WARPS, TFIX, ORDER, HINT, MODE>(p);                      \
    }
#define GDN_REC_EXPORT_EX(ST, SBYTES, TT, TFIX, VEC, RPT, WARPS, ORDER, HINT, SUFFIX)                     \
    extern "C" __global__ void __launch_bounds__((WARPS) * 32)                                             \
        gdn_recurrent_##ST##_##TT##_v##VEC##r##RPT##w##WARPS##SUFFIX(const RecurrentCore p) {              \
        gdn_rec::recurrent_body<SBYTES, VEC, RPT, WARPS, TFIX, ORDER, HINT, 0>(                            \
            reinterpret_cast<const RecurrentParams&>(p));                                                  \
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
// serving builds, k-last state: the same launches as the definition kernels above
GDN_REC_EXPORT_MODE(f32, 4, t1, 1, 4, 2, 8, 0, 0, _sv, 1)
GDN_REC_EXPORT_MODE(f32, 4, t1, 1, 4, 2, 4, 0, 0, _sv, 1)
GDN_REC_EXPORT_MODE(f32, 4, t1, 1, 8, 4, 4, 0, 0, _sv, 1)
GDN_REC_EXPORT_MODE(f32, 4, t1, 1, 8, 4, 1, 1, 0, _lin_sv, 1)
GDN_REC_EXPORT_MODE(bf16, 2, t1, 1, 8, 2, 4, 0, 0, _sv, 1)
GDN_REC_EXPORT_MODE(bf16, 2, t1, 1, 8, 4, 2, 0, 0, _sv, 1)
GDN_REC_EXPORT_MODE(bf16, 2, t1, 1, 8, 4, 4, 1, 0, _lin_sv, 1)
GDN_REC_EXPORT_MODE(f32, 4, tn, 0, 8, 4, 2, 0, 0, _sv, 1)
GDN_REC_EXPORT_MODE(f32, 4, tn, 0, 8, 4, 2, 1, 0, _lin_sv, 1)
GDN_REC_EXPORT_MODE(bf16, 2, tn, 0, 4, 4, 2, 0, 0, _sv, 1)
GDN_REC_EXPORT_MODE(bf16, 2, tn, 0, 4, 4, 2, 1, 0, _lin_sv, 1)
// serving builds, K-first state
GDN_REC_EXPORT_MODE(f32, 4, t1, 1, 8, 4, 4, 0, 0, _kf, 2)
GDN_REC_EXPORT_MODE(f32, 4, t1, 1, 8, 4, 1, 1, 0, _lin_kf, 2)
GDN_REC_EXPORT_MODE(bf16, 2, t1, 1, 4, 8, 4, 0, 0, _kf, 2)
GDN_REC_EXPORT_MODE(bf16, 2, t1, 1, 4, 8, 4, 1, 0, _lin_kf, 2)
GDN_REC_EXPORT_MODE(f32, 4, tn, 0, 8, 4, 2, 0, 0, _kf, 2)
GDN_REC_EXPORT_MODE(f32, 4, tn, 0, 8, 4, 2, 1, 0, _lin_kf, 2)
GDN_REC_EXPORT_MODE(bf16, 2, tn, 0, 4, 8, 2, 0, 0, _kf, 2)
GDN_REC_EXPORT_MODE(bf16, 2, tn, 0, 4, 8, 2, 1, 0, _lin_kf, 2)
