// recurrent.cu — Gated Delta Net decode (T = 1) and MTP / speculative verify (T = 2..8), for every GPU from Ampere
// (sm_80) on; the tiles are tuned on Hopper.
//
// Compiled at run time by NVRTC (`-arch=<the device's target> -std=c++17`; headers by their path under kernels/); includes only
// common/serving.cuh (which includes common/gates.cuh and <cuda_bf16.h>). The k-last kernels use no shared memory
// and no __syncthreads (every warp is independent); the K-first `_kf` kernels reduce across the warps of a CTA
// through 2-4 KB of static shared memory, one barrier per token.
//
// ---------------------------------------------------------------------------------------------------------
// Math (per request b, value head h, token t; fp32 throughout):
//   g = exp(-exp(A_log[h]) * softplus(a + dt_bias[h]))      beta = sigmoid(b)          (common/gates.cuh)
//   S = g*S;  u = S·k;  delta = beta*(v - u);  S += delta ⊗ k;  out = scale * S·q     (S is [V=128][K=128])
// One pass over S per token, using   S_new·q = g·(S_old·q) + delta·(k·q):
//   every lane forms partial dot products of its state slice with k and q (and k·q), the lanes that share its
//   V-rows reduce them (k-last: warp shuffles; K-first: shuffles, then across the CTA's warps in shared
//   memory), then each lane updates its slice  S = fma(delta, k, g*S)  and stores it.
//
// ---------------------------------------------------------------------------------------------------------
// Layouts (all dense unless stated, element strides implied; every base pointer 16-byte aligned):
//   q, k   bf16 [B, T, H, 128]          v    bf16 [B, T, HV, 128]         a, b   bf16 [B, T, HV]
//   A_log, dt_bias  f32 [HV]            out  bf16 [B, T, HV, 128]
//   (the serving builds address q, k, v, out rows through sv_act_off: with SV_STRIDED each is a view of token
//    index b*T + t and head, serving.act_stride elements apart, 128 contiguous elements per row)
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
//   SV_QK_NORM   q and k of each (token, q/k head) are L2-normalised before use: the fp32 sum of squares of
//                all 128 values is reduced over lanes that together hold the row (k-last: the row's lanes with
//                the dot products' butterfly; K-first: each warp, 4 values a lane, loaded for it), and every
//                value is used as x * rsqrt(sum + 1e-6) rounded to the activation dtype (the reference's rounding).
//   SV_ACT_F16   q, k, v, out, raw a / b and a 16-bit beta are fp16: the serving kernels of the fp16 build
//                (GDN_REC_ACT_F16, module `recurrent_f16`, same names) convert each value exactly to fp32.
//   SV_STATE_F16 16-bit states are fp16 (a select per state value at the loads and stores).
//   pool_indices decode pools: request b reads and writes row pool_indices[b] (i32, or i64 with SV_INDEX_I64)
//                of state / new_state (in place: both point at the pool). state_indices must then be NULL.
//   has_initial  has_initial[b] == 0: the request starts from zeros (its row is not read) and still writes.
//   num_accepted spec-decode slots (MTP): state_indices is i32 [B, T]; request b is padding when
//                state_indices[b, 0] is; else it reads row state_indices[b, num_accepted[b] - 1] (a count
//                outside 1..T makes it padding) and writes the state after token t to new_state row
//                state_indices[b, t] unless that entry is padding (no final-state write, no intermediate).
//   SV_KFIRST    the `_kf` kernels; the host never pairs a layout with the other layout's kernel.
//   SV_STRIDED   q, k, v and out rows at serving.act_stride (views into larger tensors; sv_act_off). The host
//                guarantees a batch stride of T token strides, so token index b*T + t addresses every row.
//   state_row_stride  elements between pool rows of state / new_state (0: dense).
//   Branches on these are uniform (constant-bank values) and outside the per-element work.
//
// Builds (template MODE; the host picks one per call, plan::decode::Build):
//   no suffix    the definitions only: the serving block is never read and every serving branch folds away at
//                compile time, so these kernels hold the definition-mode code alone.
//   _sv          every serving mode, k-last state; the same launch as the kernel without the suffix. It also
//                computes definition-mode calls (an all-zero block).
//   _kf          every serving mode, K-first state.
//   The `_sv` and `_kf` kernels are compiled twice: bf16 activations (module `recurrent`, with the definition
//   kernels) and fp16 activations (GDN_REC_ACT_F16: module `recurrent_f16`, these kernels only, same names).
//
// ---------------------------------------------------------------------------------------------------------
// Grid / block mapping (every kernel in this file; the K-first thread mapping is below):
//   grid  = ( B * CTAS_PER_HEAD,  H,  HV / H )      block = WARPS * 32 threads      dynamic smem = 0
//   blockIdx.x = b * CTAS_PER_HEAD + tile,  blockIdx.y = q/k head hq,  blockIdx.z = value head within the group,
//   so h = hq * (HV/H) + blockIdx.z and no run-time integer division is needed. B only multiplies gridDim.x
//   (limit 2^31-1), gridDim.y = H and gridDim.z = HV/H are tiny: any B is valid.
// k-last mapping (no suffix, `_sv`; state [V][K] per head):
//   A CTA owns ROWS_PER_CTA = WARPS * GPW * RPT consecutive V-rows of one (request, head):
//     CTAS_PER_HEAD = 128 / ROWS_PER_CTA.
//   Inside a warp, LPR = 128 / VEC lanes share one V-row; GPW = 32 / LPR rows are touched per warp instruction
//   ("row groups"); each thread owns RPT consecutive rows (row0 .. row0+RPT-1) and, in each, VEC K-values:
//   NC = VEC / CW chunks of CW elements (CW*SBYTES = 16 bytes: CW = 4 for fp32, 8 for bf16).
//   Lane j of a row holds K = c*CW*LPR + j*CW + e (c < NC, e < CW).
//   Each state access is one chunk (16 bytes along K); one access instruction of a row group reads CW*LPR
//   contiguous elements — fully coalesced 16-byte loads/stores along K. The row's LPR lanes reduce with shuffles.
//
// K-first mapping (`_kf`; state [K][V] per head, V contiguous; kfirst_body):
//   A thread owns CW = 16/SBYTES consecutive V-columns (4 fp32, 8 bf16: one 16-byte access per K row) of KR = 8
//   consecutive K rows: s[r][c] = S[krow0 + r][col0 + c], KR 16-byte loads. Lanes run along V: a warp is
//   KG = 4 K groups of LV = 8 lanes; the 8 lanes of a K group cover VC = 8*CW columns of one K row, 128
//   contiguous bytes — every warp access instruction touches 4 whole 128-byte lines (one per K group), as the
//   k-last kernels do. The NW = 4 warps of a CTA cover the same VC columns at K rows warp*32 .. warp*32+31
//   (krow0 = (warp*4 + group)*8); CTAS_PER_HEAD = 128 / VC (4 fp32, 2 bf16), block 128.
//   Reduction of S·k, S·q (per column) and k·q: each thread sums its KR rows; shuffles (xor 8, 16) sum the warp's
//   4 K groups; K group 0 of each warp stores its S·k, group 1 its S·q, group 2 one k·q to shared memory
//   (2 KB fp32 / 4 KB bf16: two buffers, by token parity); one __syncthreads; every thread sums the 4 warps'
//   S·k of its columns (delta needs them) and k·q, and warp 0's K group 0 also their S·q and writes out.
//   Every state element is loaded and stored by the same thread (in-place pools as above); the intermediate
//   states (K-first, fp32) are stored KR rows x CW columns per thread, CW/4 16-byte stores per row.
//   Why shared memory: a shuffle-only reduction needs one warp to span all 128 K rows of its columns, i.e. at 32
//   state values per thread 8 columns: 32-byte (fp32) or 16-byte (bf16) runs along V, a fraction of a line
//   per access; a K-first mapping with those runs measured 1.34-1.38x the state-copy floor at B >= 64 (H200).
//   The shared-memory step costs per CTA and token ~1 KB (fp32) / 2 KB (bf16) of stores and 5 / 9 conflict-free
//   16-byte loads per warp (9 / 17 for warp 0), on the shared-memory pipe, against 16 KB of state read and
//   16 KB written per CTA through DRAM.
//   Floor: every thread issues its KR = 8 state loads (128 bytes) before any use; one CTA holds 16 KB of state
//   (32 fp32 or 64 bf16 columns x 128 K rows). Registers bound the CTAs per SM (ptxas, sm_90a): fp32 t1 72
//   regs -> 7 CTAs, 112 KB of state loads in flight per SM; bf16 t1 111-127 -> 4 CTAs, 64 KB; fp32 tn 96-126
//   -> 4-5 CTAs, 64-80 KB; bf16 tn 168 -> 3 CTAs, 48 KB. By Little's law 4.8 TB/s (H200) at ~1 us loaded DRAM
//   latency (an estimate) needs ~36 KB in flight per SM of 132, which every `_kf` kernel exceeds at large B.
//
// Why:
//   * many CTAs per (request, head) at small batch: B=1 has only 8 heads; the B<=2 kernel uses 8 CTAs per head
//     (64 CTAs of 8 warps; 32 CTAs per head of 4 warps measured 7% slower), the large-B kernel 1-warp CTAs.
//   * all state loads (RPT*NC 16-byte loads per thread, k-last) and all token inputs are issued before the
//     first use: one DRAM round trip per launch, the whole kernel is latency- or bandwidth-bound.
//   * gates computed in-kernel (no extra launch), q/k/v read straight from global (L1/L2 broadcast; staging
//     them in shared memory did not help peers); k-last: shuffle-only reductions, no shared memory, no barriers.
//   * grid in state-memory order at large B (`_lin`): consecutive CTAs stream consecutive 4-8 KB of the state
//     (the ORDER 0 grid walks one head of every request first: 512 KB strides, 3.5% slower at B=1024).
//   * the gate chain (~60 dependent instructions: ex2, log1p polynomial, ex2, div) stays after the reductions:
//     it costs ~0.25 us at B=1 (latency probes) but moving it first measured 3-7% slower at B<=16.
//   * runtime-T variants (`tn`) keep the state in registers across tokens and prefetch token t+1's inputs while
//     token t is computed; the state is read once and written once (+ T intermediate states if asked).
//   * K-first has its own mapping (above): accesses must run along V in whole lines, so the lanes that share
//     a V column span K, across warps.
//
// ---------------------------------------------------------------------------------------------------------
// Kernel naming:   gdn_recurrent_<st>_<tt>_v<VEC>r<RPT>w<WARPS>[_lin][_cs][_sv|_kf]
//   <st>   f32 | bf16      state dtype (bf16: stored bf16, math fp32; intermediate states are always fp32)
//   <tt>   t1              decode, T must be 1 (seq_len is ignored)
//          tn              any T >= 1 at run time (MTP)
//   VEC    K-values per lane per V-row (4, 8, 16)  -> LPR = 128/VEC lanes per row, GPW = VEC/4 rows per warp
//          access; `_kf`: K rows per thread (KR = 8)
//   RPT    V-rows per thread (1, 2, 4, 8); `_kf`: V columns per thread, CW = 16/SBYTES (4 fp32, 8 bf16)
//   WARPS  warps per CTA  (block = 32*WARPS)
//   _lin   ORDER 1 grid: (B*HV*CTAS_PER_HEAD, 1, 1), blockIdx.x walks (request, head, tile) in state-memory order
//          (no suffix: ORDER 0 grid (B*CTAS_PER_HEAD, H, HV/H)). In-order streaming is ~3% faster at B >= 64.
//   _cs    evict-first (.cs) hint on state loads/stores (harness sweeps only; never a winner, not exported)
//   _sv    serving build, k-last state (MODE 1)
//   _kf    serving build, K-first state (MODE 2; SV_KFIRST calls only)
//   derived: ROWS_PER_CTA = WARPS * RPT * VEC/4,  CTAS_PER_HEAD = 128 / ROWS_PER_CTA;
//            `_kf`: K groups per warp KG = 128/(VEC*WARPS), lanes per K group LV = 32/KG (8),
//            columns per CTA VC = LV * RPT, CTAS_PER_HEAD = 128 / VC.
// Exported kernels (the Rust side reads this list; keep it in sync with the GDN_REC_EXPORT lines at the end).
// All: dynamic smem 0 (`_kf`: 2080 / 4128 bytes of static shared memory, fp32 / bf16), no attribute changes
// needed, grid exactly as below (the kernels do not bound-check B).
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
//   gdn_recurrent_f32_t1_v8r4w4_lin_kf    128       4        (4*B*HV, 1, 1)            fp32 decode, B >= 25
//   gdn_recurrent_bf16_t1_v8r8w4_kf       128       2        (2B, H, HV/H)             bf16 decode, B <= 96
//   gdn_recurrent_bf16_t1_v8r8w4_lin_kf   128       2        (2*B*HV, 1, 1)            bf16 decode, B > 96
//   gdn_recurrent_f32_tn_v8r4w4_kf        128       4        (4B, H, HV/H)             fp32 MTP, B < 128
//   gdn_recurrent_f32_tn_v8r4w4_lin_kf    128       4        (4*B*HV, 1, 1)            fp32 MTP, B >= 128
//   gdn_recurrent_bf16_tn_v8r8w4_kf       128       2        (2B, H, HV/H)             bf16 MTP, B < 32
//   gdn_recurrent_bf16_tn_v8r8w4_lin_kf   128       2        (2*B*HV, 1, 1)            bf16 MTP, B >= 32
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

// Per-variant constants of the k-last mapping (one traits table; recurrent_body uses only these).
template <int SBYTES, int VEC, int RPT, int WARPS>
struct Cfg {
    static constexpr int LPR = KD / VEC;                               // lanes per V-row
    static constexpr int GPW = 32 / LPR;                               // row groups per warp
    static constexpr int CW = (VEC < 16 / SBYTES) ? VEC : 16 / SBYTES; // K-values per chunk
    static constexpr int NC = VEC / CW;                                // chunks per row per lane
    static constexpr int QW = CW / 2;                                  // 32-bit words per q/k access (bf16)
    static constexpr int ROWS_CTA = WARPS * GPW * RPT;                 // V-rows per CTA
    static constexpr int CPH = KD / ROWS_CTA;                          // CTAs per (request, head)
    static constexpr int VW = (RPT + 1) / 2;                           // words holding RPT bf16 v / out values
    // state accesses per thread (one chunk: CW K-values of one row) and their 32-bit words
    static constexpr int NLD = RPT * NC;
    static constexpr int LW = CW * SBYTES / 4;
    static_assert(SBYTES == 4 || SBYTES == 2, "state is fp32 or bf16");
    static_assert(VEC == 4 || VEC == 8 || VEC == 16, "VEC is 4, 8 or 16");
    static_assert(RPT == 1 || RPT == 2 || RPT == 4 || RPT == 8, "RPT is a power of two <= 8");
    static_assert(ROWS_CTA <= KD && KD % ROWS_CTA == 0, "a CTA covers a divisor of the 128 rows");
    static_assert(LW == 2 || LW == 4, "8- or 16-byte state accesses");
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

// 16-bit values by flag: fp16 (the serving builds with SV_ACT_F16 for q, k, v, a, b, beta and out, SV_STATE_F16 for the
// state) or bf16. `f16` is a compile-time false in the definition build, where these are bf_lo / bf_hi / bf_pack.
__device__ __forceinline__ float h_lo(u32 w, bool f16) {
    return f16 ? __half2float(__ushort_as_half((unsigned short)(w & 0xffffu))) : bf_lo(w);
}
__device__ __forceinline__ float h_hi(u32 w, bool f16) {
    return f16 ? __half2float(__ushort_as_half((unsigned short)(w >> 16))) : bf_hi(w);
}
__device__ __forceinline__ u32 h_pack(float lo, float hi, bool f16) {
    if (f16) {
        u32 r;
        asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
        return r;
    }
    return bf_pack(lo, hi);
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
template <int N, int OB, int HINT> __device__ __forceinline__ void st_run(char* p, const float (&x)[N], bool f16 = false) {
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
            for (int e = 0; e < N / 2; ++e) w[e] = h_pack(x[2 * e], x[2 * e + 1], f16);
            st_state<N / 2, HINT>(p, w);
        } else {
#pragma unroll
            for (int q = 0; q < N / 8; ++q) {
                const u32 w[4] = {h_pack(x[8 * q], x[8 * q + 1], f16), h_pack(x[8 * q + 2], x[8 * q + 3], f16),
                                  h_pack(x[8 * q + 4], x[8 * q + 5], f16), h_pack(x[8 * q + 6], x[8 * q + 7], f16)};
                st_state<4, HINT>(p + 16 * q, w);
            }
        }
    }
}

// ---- the thread's state tile: RPT rows x VEC K-values, s[i][c*CW+e] = S[row0+i][c*CW*LPR + kofs + e] ------
// Element offset of state access a = i*NC + c (< NLD) from the thread's first element (row0, kofs) of the
// head's [V][K] state.
template <class C> __device__ __forceinline__ constexpr int access_ofs(int a) {
    return (a / C::NC) * KD + (a % C::NC) * C::CW * C::LPR;
}

template <class C, int SBYTES, int HINT>
__device__ __forceinline__ void load_tile(u32 (&raw)[C::NLD][C::LW], const char* base) {
#pragma unroll
    for (int a = 0; a < C::NLD; ++a) ld_state<C::LW, HINT>(raw[a], base + (i64)access_ofs<C>(a) * SBYTES);
}

template <class C, int SBYTES, int RPT, int VEC>
__device__ __forceinline__ void unpack_tile(float (&s)[RPT][VEC], const u32 (&raw)[C::NLD][C::LW], bool f16 = false) {
#pragma unroll
    for (int i = 0; i < RPT; ++i)
#pragma unroll
        for (int x = 0; x < VEC; ++x) {
            const int a = i * C::NC + x / C::CW;   // the access holding S value (i, x)
            const int el = x % C::CW;              // its element in that access
            if constexpr (SBYTES == 4) s[i][x] = __uint_as_float(raw[a][el]);
            else s[i][x] = (el & 1) ? h_hi(raw[a][el >> 1], f16) : h_lo(raw[a][el >> 1], f16);
        }
}

// Stores the tile as OB-byte elements at `base` (the thread's first element; same access pattern as the loads).
template <class C, int OB, int HINT, int RPT, int VEC>
__device__ __forceinline__ void store_tile(char* base, const float (&s)[RPT][VEC], bool f16 = false) {
#pragma unroll
    for (int i = 0; i < RPT; ++i)
#pragma unroll
        for (int c = 0; c < C::NC; ++c) {
            float r[C::CW];
#pragma unroll
            for (int e = 0; e < C::CW; ++e) r[e] = s[i][c * C::CW + e];
            st_run<C::CW, OB, HINT>(base + (i64)access_ofs<C>(i * C::NC + c) * OB, r, f16);
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

// The token's gate inputs (raw a / b, or the serving block's gate and beta) at bth = (b*T + t)*HV + h.
__device__ __forceinline__ void load_gates(u32& a, u32& b, const RecurrentParams& p, i64 bth, int flags) {
    if ((flags & SV_GATE_MASK) == 0) {
        a = __ldg(reinterpret_cast<const unsigned short*>(p.a) + bth);
        b = __ldg(reinterpret_cast<const unsigned short*>(p.b) + bth);
    } else {
        a = __float_as_uint(__ldg(p.serving.gate + bth));
        b = (flags & SV_BETA_BF16) ? (u32)__ldg(reinterpret_cast<const unsigned short*>(p.serving.beta) + bth)
                                   : __ldg(reinterpret_cast<const unsigned int*>(p.serving.beta) + bth);
    }
}

// SV: the serving builds address q, k, v through sv_act_off (strided views); the definition build keeps its
// dense offsets.
template <class C, int RPT, bool SV = false>
__device__ __forceinline__ void load_tok(TokRaw<C, RPT>& x, const RecurrentParams& p, i64 bq, int t, int T,
                                         int h, int hq, int row0, int kofs) {
    const i64 bt = bq * T + t;
    const __nv_bfloat16* qp;
    const __nv_bfloat16* kp;
    const __nv_bfloat16* vp;
    if constexpr (SV) {
        qp = reinterpret_cast<const __nv_bfloat16*>(p.q) + sv_act_off(p.serving, SV_Q, bt, hq, p.num_qk_heads) + kofs;
        kp = reinterpret_cast<const __nv_bfloat16*>(p.k) + sv_act_off(p.serving, SV_K, bt, hq, p.num_qk_heads) + kofs;
        vp = reinterpret_cast<const __nv_bfloat16*>(p.v) + sv_act_off(p.serving, SV_V, bt, h, p.num_v_heads) + row0;
    } else {
        qp = reinterpret_cast<const __nv_bfloat16*>(p.q) + (bt * p.num_qk_heads + hq) * KD + kofs;
        kp = reinterpret_cast<const __nv_bfloat16*>(p.k) + (bt * p.num_qk_heads + hq) * KD + kofs;
    }
#pragma unroll
    for (int c = 0; c < C::NC; ++c) {
        ldg_words<C::QW>(x.q[c], qp + c * C::CW * C::LPR);
        ldg_words<C::QW>(x.k[c], kp + c * C::CW * C::LPR);
    }
    const i64 bth = bt * p.num_v_heads + h;
    if constexpr (!SV) vp = reinterpret_cast<const __nv_bfloat16*>(p.v) + bth * KD + row0;
    ldg_bf16_run<RPT>(x.v, vp);
    load_gates(x.a, x.b, p, bth, SV ? p.serving.flags : 0);

}

// ---------------------------------------------------------------------------------------------------------
// Shared by both bodies.

// (request, value head, q/k head, tile) of this CTA: ORDER 0 grid (B*CPH, H, HV/H), ORDER 1 grid (B*HV*CPH, 1, 1).
template <int CPH, int ORDER>
__device__ __forceinline__ int cta_coords(const RecurrentParams& p, i64& bq, int& h, int& hq) {
    const u32 bx = blockIdx.x;
    const int tile = (int)(bx % CPH);               // compile-time divisor
    if constexpr (ORDER == 0) {
        bq = bx / CPH;                              // request
        hq = blockIdx.y;                            // q/k head
        h = hq * (int)gridDim.z + blockIdx.z;       // value head (HV/H == gridDim.z)
    } else {
        const u32 bh = bx / CPH;
        const u32 nhv = (u32)p.num_v_heads;
        bq = bh / nhv;
        h = (int)(bh - (u32)bq * nhv);
        hq = h / (int)(nhv / (u32)p.num_qk_heads);
    }
    return tile;
}

// The serving builds' pool row of request bq (before the `>= num_state_rows` test) and whether it is padding.
// Spec-decode slots: the request's row list is state_indices[b, 0..T); it reads slot num_accepted - 1.
__device__ __forceinline__ i64 serving_row(const RecurrentParams& p, i64 bq, int T, bool& pad) {
    const ServingParams& sv = p.serving;
    const i32* sidx = p.state_indices;
    i64 srow = bq;
    pad = false;
    if (sv.num_accepted != nullptr) {
        const int acc = __ldg(sv.num_accepted + bq);
        const i64 first = __ldg(sidx + bq * T);
        srow = __ldg(sidx + bq * T + (min(max(acc, 1), T) - 1));   // clamped: never outside the request's slots
        pad = sv_is_pad(sv, first) || acc < 1 || acc > T || sv_is_pad(sv, srow);
    } else if (sv.pool_indices != nullptr) {
        srow = sv_pool_index(sv, bq);
        pad = sv_is_pad(sv, srow);
    } else if (sidx != nullptr) {
        srow = (i64)__ldg(sidx + bq);
        pad = sv_is_pad(sv, srow);
    }
    return srow;
}

// ---------------------------------------------------------------------------------------------------------
// The k-last body. SBYTES = 4 (fp32 state) or 2 (bf16 state); TFIX = 1 (decode, T known) or 0 (run-time T).
// ORDER 0: grid (B*CPH, H, HV/H) — no run-time division.
// ORDER 1: grid (B*HV*CPH, 1, 1), blockIdx.x enumerates (request, value head, tile) in state-memory order
//          (two run-time u32 divisions, by HV and by HV/H).
// HINT  0: default caching; 1: state loads / state + intermediate stores with the .cs (evict-first) hint.
// MODE  0: the definitions (the serving block is not read: every serving branch below folds away at compile
//          time, so these kernels are exactly the definition-mode code); 1: serving modes, k-last state.
template <int SBYTES, int VEC, int RPT, int WARPS, int TFIX, int ORDER, int HINT, int MODE, bool AF16 = false>
__device__ __forceinline__ void recurrent_body(const RecurrentParams& p) {
    static_assert(MODE == 0 || MODE == 1, "K-first calls run kfirst_body");
    constexpr bool SV = MODE != 0;
    using C = Cfg<SBYTES, VEC, RPT, WARPS>;
    const ServingParams& sv = p.serving;
    const int flags = SV ? sv.flags : 0;
    // fp16 activations: the fp16 build's kernels (GDN_REC_ACT_F16), so each 16-bit value takes exactly one
    // conversion; fp16 states: a run-time flag (one select per state value, at the loads and stores only)
    constexpr bool af16 = AF16;
    const bool sf16 = (flags & SV_STATE_F16) != 0;
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    const int grp = lane / C::LPR;                  // row group inside the warp
    const int j = lane % C::LPR;                    // lane inside the row
    i64 bq;
    int h, hq;
    const int tile = cta_coords<C::CPH, ORDER>(p, bq, h, hq);
    // (no `bq < batch` test: the grid is exactly B*CTAS_PER_HEAD wide by contract, and the test would put a
    //  constant-bank read and a branch in front of the first state load)
    const int T = TFIX > 0 ? TFIX : p.seq_len;
    const int row0 = tile * C::ROWS_CTA + (warp * C::GPW + grp) * RPT;  // first V-row of this thread
    const int kofs = j * C::CW;                     // K offset of this lane's first chunk
    const i64 HV = p.num_v_heads;

    // 1. Pool row: the only load that the state loads wait for. Issue it first.
    const i32* sidx = p.state_indices;
    const bool slots = SV && sv.num_accepted != nullptr;
    i64 srow = bq;
    bool pad = false;
    if constexpr (!SV) {
        if (sidx != nullptr) srow = (i64)__ldg(sidx + bq);
        pad = srow < 0;
    } else {
        srow = serving_row(p, bq, T, pad);
    }
    pad = pad || srow >= p.num_state_rows;
    const bool fresh = SV && !sv_has_initial(sv, bq);   // start from zeros: the row is not read

    // 2. All state loads at once (NLD accesses of up to 16 bytes per thread): they are the long pole.
    //    Predicated (not branched) on `pad`, so that without indices nothing waits.
    //    sofs: the thread's first element in its pool row (rows are serving.state_row_stride apart). The
    //    definition build keeps its own expression of the same offset (its code is the definition-mode code).
    //    Serving offsets are formed where they are used (sv_ofs: from the row, h, tin and the constant bank), so
    //    that no extra 64-bit value stays live across the loads and the token loop.
    const int tin = row0 * KD + kofs;                               // ... within the head's [128][128] state
    const auto sv_ofs = [&](i64 row) {
        return row * sv_row_stride(sv, HV * (KD * KD)) + ((i64)h * (KD * KD) + tin);
    };
    const i64 sofs = SV ? sv_ofs(srow) : ((srow * HV + h) * KD + row0) * KD + kofs;
    u32 sraw[C::NLD][C::LW];
#pragma unroll
    for (int a = 0; a < C::NLD; ++a)
#pragma unroll
        for (int w = 0; w < C::LW; ++w) sraw[a][w] = 0u;
    if (p.state != nullptr && !pad && !fresh)
        load_tile<C, SBYTES, HINT>(sraw, reinterpret_cast<const char*>(p.state) + sofs * SBYTES);

    // 3. Token-0 inputs and head constants (independent of srow).
    TokRaw<C, RPT> cur;
    load_tok<C, RPT, SV>(cur, p, bq, 0, T, h, hq, row0, kofs);
    const int gate_mode = flags & SV_GATE_MASK;
    float a_log = 0.f, dt_b = 0.f;
    if (gate_mode == 0) {
        a_log = __ldg(p.A_log + h);
        dt_b = __ldg(p.dt_bias + h);
    }

    // out rows: the definition build keeps token 0's pointer and steps by the dense token stride; the serving
    // builds form token t's address (the call's view, sv_act_off) where they store it, which holds no 64-bit
    // pointer across the math
    __nv_bfloat16* outp = nullptr;
    i64 out_tstride = 0;
    if constexpr (!SV) {
        outp = reinterpret_cast<__nv_bfloat16*>(p.out) + (bq * T * HV + h) * KD + row0;
        out_tstride = HV * KD;
    }
    const auto out_at = [&](int t) {
        if constexpr (SV)
            return reinterpret_cast<__nv_bfloat16*>(p.out) + sv_act_off(sv, SV_OUT, bq * T + t, h, HV) + row0;
        else return outp + t * out_tstride;
    };

    if (pad) {                                      // padding: zero output rows, touch nothing else
        if (j == 0) {
            u32 z[C::VW];
#pragma unroll
            for (int i = 0; i < C::VW; ++i) z[i] = 0u;
            for (int t = 0; t < T; ++t) st_bf16_run<RPT>(out_at(t), z);
        }
        return;
    }

    float s[RPT][VEC];  // s[i][c*CW+e] = S[row0+i][c*CW*LPR + kofs + e]
    unpack_tile<C, SBYTES>(s, sraw, sf16);

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
                kf[c * C::CW + e] = (e & 1) ? h_hi(kw, af16) : h_lo(kw, af16);
                qf[c * C::CW + e] = (e & 1) ? h_hi(qw, af16) : h_lo(qw, af16);
            }
        if (flags & SV_QK_NORM) {
            // the row's LPR lanes hold the whole q/k head: fp32 sums of squares over the same butterfly,
            // then x -> x * rsqrt(sum + eps) rounded to the activation dtype, the values the reference uses
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
                const u32 kw = h_pack(kf[e] * rk, kf[e + 1] * rk, af16);
                const u32 qw = h_pack(qf[e] * rq, qf[e + 1] * rq, af16);
                kf[e] = h_lo(kw, af16); kf[e + 1] = h_hi(kw, af16);
                qf[e] = h_lo(qw, af16); qf[e + 1] = h_hi(qw, af16);
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
            g = __expf(gdn_log_decay(h_lo(cur.a, af16), dt_b, a_log));
            beta = gdn_beta(h_lo(cur.b, af16));
        } else {
            const float gv = __uint_as_float(cur.a);
            g = gate_mode == SV_GATE_LINEAR ? gv : __expf(gv);
            beta = (flags & SV_BETA_BF16) ? h_lo(cur.b, af16) : __uint_as_float(cur.b);
        }
        const float kq = red[2 * RPT];
        float o[RPT];
#pragma unroll
        for (int i = 0; i < RPT; ++i) {
            const float vv = (i & 1) ? h_hi(cur.v[i >> 1], af16) : h_lo(cur.v[i >> 1], af16);
            const float delta = beta * (vv - g * red[2 * i]);
            o[i] = p.scale * fmaf(delta, kq, g * red[2 * i + 1]);
#pragma unroll
            for (int e = 0; e < VEC; ++e) s[i][e] = fmaf(delta, kf[e], g * s[i][e]);
        }
        // output: the row group's lane 0 writes its RPT consecutive values in one store
        if (j == 0) {
            u32 ow[C::VW];
            if constexpr (RPT == 1) ow[0] = h_pack(o[0], 0.f, af16) & 0xffffu;
            else {
#pragma unroll
                for (int i = 0; i < C::VW; ++i) ow[i] = h_pack(o[2 * i], o[2 * i + 1], af16);
            }
            st_bf16_run<RPT>(out_at(t), ow);
        }
        // state after token t: fp32 into the intermediate buffer (dense, 16-byte stores) ...
        if (p.intermediate != nullptr) {
            const i64 iofs = SV ? ((srow * T + t) * HV + h) * (KD * KD) + tin
                                : (((srow * T + t) * HV + h) * KD + row0) * KD + kofs;
            store_tile<C, 4, HINT>(reinterpret_cast<char*>(p.intermediate + iofs), s);
        }
        // ... or, with spec-decode slots, in the state dtype into its pool row (unless that slot is padding).
        // The slot is loaded here, not with the token's inputs: a register held across the token's math
        // costs more than this L1 hit (the request's slots share the line read for the initial row).
        if (slots) {
            const i64 wrow = __ldg(sidx + bq * T + t);
            if (!sv_is_pad(sv, wrow) && wrow < p.num_state_rows) {
                const i64 wofs = sv_ofs(wrow);
                store_tile<C, SBYTES, HINT>(reinterpret_cast<char*>(p.new_state) + wofs * SBYTES, s, sf16);
            }
        }
        if (TFIX == 0) cur = nxt;
    }

    // 5. Final state, same row it came from (spec-decode slots wrote theirs per token).
    if (p.new_state != nullptr && !slots)
        store_tile<C, SBYTES, HINT>(reinterpret_cast<char*>(p.new_state) + (SV ? sv_ofs(srow) : sofs) * SBYTES, s, sf16);
}

}  // namespace gdn_rec

// The K-first body (the `_kf` kernels), in its own file.
#include "recurrent_kfirst.cuh"

namespace gdn_rec {

// The serving builds: MODE 1 k-last (recurrent_body), MODE 2 K-first (kfirst_body).
// The fp16-activation build (GDN_REC_ACT_F16, module `recurrent_f16`) compiles the serving kernels with every 16-bit
// input converted exactly to fp32 as fp16 (SV_ACT_F16 calls run it); the default build converts them as bf16. A
// module of its own: the bf16 kernels keep their code and registers, and only fp16 callers compile it.
#ifdef GDN_REC_ACT_F16
#define GDN_REC_AF16 true
#else
#define GDN_REC_AF16 false
#endif
template <int SBYTES, int VEC, int RPT, int WARPS, int TFIX, int ORDER, int HINT, int MODE>
__device__ __forceinline__ void serving_body(const RecurrentParams& p) {
    if constexpr (MODE == 2) kfirst_body<SBYTES, VEC, RPT, WARPS, TFIX, ORDER, GDN_REC_AF16>(p);
    else recurrent_body<SBYTES, VEC, RPT, WARPS, TFIX, ORDER, HINT, MODE, GDN_REC_AF16>(p);
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
        static_assert(MODE != 2 || HINT == 0, "the K-first kernels have no cache-hint build");              \
        gdn_rec::serving_body<SBYTES, VEC, RPT, WARPS, TFIX, ORDER, HINT, MODE>(p);                        \
    }
#define GDN_REC_EXPORT_EX(ST, SBYTES, TT, TFIX, VEC, RPT, WARPS, ORDER, HINT, SUFFIX)                     \
    extern "C" __global__ void __launch_bounds__((WARPS) * 32)                                             \
        gdn_recurrent_##ST##_##TT##_v##VEC##r##RPT##w##WARPS##SUFFIX(const RecurrentCore p) {              \
        gdn_rec::recurrent_body<SBYTES, VEC, RPT, WARPS, TFIX, ORDER, HINT, 0>(                            \
            reinterpret_cast<const RecurrentParams&>(p));                                                  \
    }
#define GDN_REC_EXPORT(ST, SBYTES, TT, TFIX, VEC, RPT, WARPS) \
    GDN_REC_EXPORT_EX(ST, SBYTES, TT, TFIX, VEC, RPT, WARPS, 0, 0, )

#ifndef GDN_REC_ACT_F16
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
#endif  // the definition build: not in the fp16-activation module
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
GDN_REC_EXPORT_MODE(f32, 4, t1, 1, 8, 4, 4, 1, 0, _lin_kf, 2)
GDN_REC_EXPORT_MODE(bf16, 2, t1, 1, 8, 8, 4, 0, 0, _kf, 2)
GDN_REC_EXPORT_MODE(bf16, 2, t1, 1, 8, 8, 4, 1, 0, _lin_kf, 2)
GDN_REC_EXPORT_MODE(f32, 4, tn, 0, 8, 4, 4, 0, 0, _kf, 2)
GDN_REC_EXPORT_MODE(f32, 4, tn, 0, 8, 4, 4, 1, 0, _lin_kf, 2)
GDN_REC_EXPORT_MODE(bf16, 2, tn, 0, 8, 8, 4, 0, 0, _kf, 2)
GDN_REC_EXPORT_MODE(bf16, 2, tn, 0, 8, 8, 4, 1, 0, _lin_kf, 2)
