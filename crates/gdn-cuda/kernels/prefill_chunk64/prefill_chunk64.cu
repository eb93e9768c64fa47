// prefill_chunk64.cu — Gated Delta Net chunked varlen prefill on Hopper (sm_90a), the "chunk64" plans: chunks of 64
// tokens, a fully parallel preparation kernel (wgmma + mma.sync) and a state walk on warpgroup MMA (wgmma; bf16 / f16
// operands, fp32 accumulation, fp32 state). The module's entry: it includes the role headers of this folder in order
// and exports the kernels. Companion of prefill_fused/ (the one-launch fused kernels).
//
// Compiled at run time by NVRTC (-arch=sm_90a -std=c++17; every .cuh is an in-memory header named by its path under
// kernels/, so the tools compile it with -I crates/gdn-cuda/kernels). Two compilation units come from this file: the
// default one (module prefill64) and, with GDN_PREFILL64_WIDE, the two-warpgroup cp passes only (module
// prefill64_wide). GDN_SERVING builds the serving kernels of either (modules prefill64_sv, prefill64_wide_sv: params
// with the serving block; without it sv_of is an all-zero block known at compile time and the definition kernels
// keep their 128-byte params and no serving code). GDN_DEVICE_PLAN builds the device plan's kernels of any of them
// (modules prefill64_dp, prefill64_wide_dp, prefill64_sv_dp, prefill64_wide_sv_dp; Prefill64PlanParams).
//
// Files, in include order:
//   params.cuh       Prefill64Params and Prefill64PlanParams, the chunk constants, the workspace
//                    record's layout
//   operands.cuh     operand formats: f16 with power-of-two scales, tf32 splits, swizzled panels, K / Q row loads and
//                    their in-kernel q/k norm
//   schedule.cuh     how a CTA finds its work: the slot map, warp searches, the walk's order, the device plan
//   prep.cuh         gdn_prefill64_prep: the state-independent work of one (chunk, value head), to a workspace record
//   walk.cuh         the wgmma walk of a chunk range (walk_wg_body), the state's rows and checkpoints, and the chunk64
//                    plan's walk (walk_plain)
//   cp_passes.cuh    context parallelism: the segment map, passes 1 and 3
//   scan.cuh         context parallelism: the scan of the segments' start states
//
// Where the plans run (the planner, plan/prefill, picks by the cost model): the plain chunk64 walk on many medium sequences, where the
// fused kernels cannot run (an odd number of value heads) or when forced; the context-parallel plan (cp) on few long
// sequences. A walk runs 20 wgmma per 64-token chunk for 64 value rows: ~2.2 us per chunk for one warpgroup, ~2.8 for
// two (128 rows). The prep costs ~3.2 us of SM time per (chunk, head) and is bound by instruction issue, not by its
// record's bytes: hence truncating tf32 splits, ftz exponentials, Q Kᵀ and K Kᵀ one after the other (so that six CTAs
// fit an SM) and no exponentials above the diagonal blocks. Every K/Q/V copy loop (walks and prep) advances one pointer
// per thread, and the values the walks derive their addresses from pass through redux.sync (uni64), so that they stay
// on the uniform datapath.
// Programmatic dependent launch (common/sm90.cuh, pdl_*): every launch of a call after its first may be dispatched
// while its predecessor runs. The cp passes and the scan find their segment, and a device-plan launch decides it is
// not the call's, before griddepcontrol.wait; a launch that exits has only block 0 wait (so the call still completes
// in order). Each body waits before it reads the workspace or writes anything; the device plan's prep never waits (it
// runs only when the launches before it, the fused tiles, exit). Every kernel lets its successor be dispatched at its
// top (griddepcontrol.launch_dependents), except the device plan's prep when it runs the chunk64 route: there the walk
// dispatched as the prep's CTAs exit runs the call 4-9 us faster (the cp route would lose 5-6 us the same way); and a
// fused tile that exits lets the chunk64 launches wait for its exit.
//
// ---------------------------------------------------------------------------------------------------------
// Math, per (sequence, value head h), chunks of C = 64 tokens, chunk-local cumulative log-decay γ:
//   A = strict_lower(diag(β) K Kᵀ ⊙ exp(γ_i − γ_j)),  T = (I + A)⁻¹,  Tb = T diag(β),  Tg = T diag(β e^γ)
//   P = scale · (Q Kᵀ ⊙ exp(γ_i − γ_j) ⊙ [i ≥ j])
//   Vn = Tb V − Tg K Sᵀ-part,  i.e. in Sᵀ[v][k] form:  Z = Sᵀ Kᵀ,  Vnᵀ = Vᵀ Tbᵀ − Z Tgᵀ
//   Oᵀ = scale e^γ ⊙ (Sᵀ Qᵀ) + Vnᵀ Pᵀ,   Sᵀ ← e^{γ_C} Sᵀ + (Vnᵀ ⊙ e^{γ_C − γ}) K
// Only differences γ_i − γ_j (i ≥ j) and γ_C − γ_i are exponentiated (≤ 0): extreme gates stay finite. The last,
// partial chunk is padded with k = q = v = 0, β = 0, log g = 0 (exact: padded rows of Tb, Tg, P, Vn are 0).
//
// The chunk64 plan: two kernels, launched in this order on one stream (no host sync, nothing read on the host):
// 1. gdn_prefill64_prep — grid (num_slots·HV), block 128. One CTA per (chunk, value head): everything that
//    does not depend on the state (gates, γ scan, K Kᵀ and Q Kᵀ on wgmma, T by a blocked fp32 inverse: 16x16
//    diagonal blocks by forward substitution, then W_ik = T_ii A_ik and T_ij = −Σ_k W_ik T_kj on mma.sync in
//    3xTF32), written to a workspace record. Fully parallel: uses the whole GPU however few the sequences are.
//    Chunk j of sequence i lives in workspace slot f(i) + j with f(i) = cu_seqlens[i] / 64 + i, which is strictly
//    increasing in i and leaves room for every chunk; num_slots = T / 64 + N + 1. A CTA finds its (i, j) by a
//    warp search over cu_seqlens (warp_last_true); slots that hold no chunk (at most N + 1 per head) exit at once.
//    The head-0 CTA of each sequence's first slot also ranks the sequence by length and writes the walk's order
//    after the records (walk_order).
// 2. gdn_prefill64_walk_{f32,bf16} — grid N·HV·2, block 128 (one warpgroup). One CTA per (sequence, value head,
//    64-row value half), sequences longest first: the sequential chain, on wgmma (walk.cuh: the per-chunk batches
//    and the shared-memory layouts). Double-buffered: the record by one bulk copy on an mbarrier, K/Q/V by cp.async.
//    It holds 64 value rows per SM at ~2.4 us per chunk, where a walker on mma.sync that splits a 16-row value tile
//    over 4 warps by k (~450 mma per warp per chunk) takes ~2.5 us per chunk for 16 rows.
// The cp plan: the prep, then passes 1 and 3 around a scan (cp_passes.cuh).
//
// Layouts: q, k [T, H, 128] bf16; v [T, HV, 128] bf16; a, b [T, HV] bf16; state / new_state [N, HV, V, K] (k-last,
// fp32 or bf16 by walk variant); out [T, HV, 128] bf16; cu_seqlens int64 [N+1] in device memory. Value head h
// reads q/k head h / (HV / H). All offsets are 64-bit. HV need not be even here.
//
// Serving modes (the GDN_SERVING build's Prefill64Params::serving, common/serving.cuh; gdn_core's float64 reference
// defines them), each a uniform branch on the params outside the walks' wgmma windows:
//   fp16            SV_ACT_F16: the prep and every walk rewrite their fp16 K / Q rows (and the walk its V rows) as
//                   bf16 in shared memory before any product (operands.cuh f16_rows_to_bf16); raw a / b and a 16-bit
//                   beta read as fp16; outputs packed as fp16 (walk.cuh pack_out). SV_STATE_F16: the bf16-state walks
//                   load and store fp16 states (common/serving.cuh state_ld1 / state_st1 / state_ld2 / state_st2)
//   views           q, k, v and out rows at the caller's token / head strides (operands.cuh load_kq_rows, walk.cuh V
//                   loads and output stores; sv_tok_stride / sv_head_stride)
//   state pool      walk.cuh state_row (common/serving.cuh sv_state_row): a real walk (the plain walk, cp pass 1 segment 0, cp pass 3) of sequence n
//                   reads / writes pool row pool_indices[n] (rows sv_row_stride apart, in place); padding (by the
//                   call's rule, or an index >= num_state_rows) writes zero outputs and leaves the walk;
//                   has_initial_state = 0 starts from zeros; an empty sequence reads and writes nothing. The prep and
//                   the summary walks need no row.
//   K-first state   walk.cuh state_rows_load / state_rows_store: [.., K, V] rows (state, new_state, checkpoints)
//   gates           prep.cuh: precomputed g / alpha and beta in place of a, b, A_log, dt_bias
//   q/k norm        operands.cuh normalize_kq_rows: the prep and every walk normalise their own K (and Q) rows in
//                   shared memory, bit for bit the same
//   offsets         int32 or int64 cu_seqlens (common/serving.cuh cu_at)
//   checkpoints     walk.cuh walk_checkpoint: a chunk end every checkpoint_every tokens; the cp plan's real walks
//                   cover every chunk from its true start state, so they write every checkpoint
//
// Numerics: products with S use S rounded to bf16 (as FLA/FlashInfer); T is computed in fp32 (3xTF32 block products
// with truncating splits, ~2^-20 relative). Tb and P are one f16 tile each with power-of-two scales (Tb: one per tile;
// P: one per 16 rows); V − Z e^γ and Vn are f16 A operands with a per-row power-of-two scale (the range of fp32, an
// 11-bit mantissa: the errors of hi + lo bf16 pairs, in an fp64 emulation and in the device checks); the update
// operand Vn e^{γC−γ} is one bf16.
// ---------------------------------------------------------------------------------------------------------
#include "common/gates.cuh"
#include "common/sm90.cuh"
#include "common/serving.cuh"
#include "common/device_plan.cuh"
#include "prefill_chunk64/params.cuh"
#include "prefill_chunk64/operands.cuh"
#include "prefill_chunk64/schedule.cuh"
#include "prefill_chunk64/prep.cuh"
#include "prefill_chunk64/walk.cuh"
#include "prefill_chunk64/cp_passes.cuh"
#include "prefill_chunk64/scan.cuh"

// ---------------------------------------------------------------------------------------------------------
// Exported kernels (launch in this order on one stream):
//   gdn_prefill64_prep        grid ((T/64 + N + 1)·HV, 1, 1), block 128, dynamic smem gdn_prefill64::PREP_SMEM (36384)
//   gdn_prefill64_walk_f32    grid (N·HV·2, 1, 1), block 128, dynamic smem gdn_prefill64::WALK_SMEM (126992)
//   gdn_prefill64_walk_bf16   same, bf16 state / new_state
// workspace: (T/64 + N + 1) · HV · gdn_prefill64::WS_CHUNK_BYTES (17408) bytes, 256-byte aligned.
// Context-parallel plan (p.seg_chunks = L >= 1, | CP_EXACT for no cuts; seg slots G = (T/64 + N + 1)/L + N + 1),
// in this order:
//   gdn_prefill64_prep                grid ((T/64 + N + 1)·HV, 1, 1), block 128, smem PREP_SMEM
//   gdn_prefill64_cp_pass1_{f32,bf16} grid (G, HV, 4), block 128, smem WALK_SMEM
//   gdn_prefill64_cp_scan             grid (K·HV·8, 1, 1), block 256, smem SCAN_SMEM (147472); or
//   gdn_prefill64_cp_scan8            grid (K·HV·16, 1, 1), block 256, smem SCAN_SMEM (8 value rows per CTA);
//                                     K = min(N, floor(T / (128·L + 1))), no launch when K = 0
//   gdn_prefill64_cp_pass3_{f32,bf16} grid (G, HV, 2), block 128, smem WALK_SMEM
// or, with two warpgroups per walk CTA (one CTA per head; compiled only with -DGDN_PREFILL64_WIDE, see below):
//   gdn_prefill64_cp_pass1w_{f32,bf16} grid (G, HV, 2), block 256, smem WALK2_SMEM (152592)
//   gdn_prefill64_cp_pass3w_{f32,bf16} grid (G, HV, 1), block 256, smem WALK2_SMEM
// workspace: the records above + 3 · G · HV · 65536 bytes.
// Every smem size exceeds 48 KB: raise CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES.
// Two compilation units come from this file: without GDN_PREFILL64_WIDE the prep, walks, one-warpgroup cp passes
// and scans; with it only the four two-warpgroup cp passes (they take as long to compile as the rest together, so
// the runtime builds them — module "prefill64_wide" — only when a plan first needs them).
// ---------------------------------------------------------------------------------------------------------
// The entry of every kernel: its params (and, in the device plan's build, the thresholds), then q, the params the
// body runs with — the kernel's own; under the device plan a copy with the segment length the plan sets, after a
// return when the call is not this launch's — and the body, once per block index: the CTA's own, or under the device
// plan every item dp_items hands this CTA (LAUNCH: the launch's vgrid / counter index). SCAN_BOUNDS: the scan's launch
// bounds; under the device plan one CTA per SM (it holds 147 KB of shared memory anyway): with a 256-thread bound ptxas
// caps the loop form at 64 registers and spills.
#ifndef GDN_DEVICE_PLAN
#define GDN_P64_ARGS const Prefill64Params p
#define GDN_P64_SCAN_BOUNDS __launch_bounds__(256)
#define GDN_P64_RUN(PART, LAUNCH, ...)                                                          \
    const Prefill64Params& q = p;                                                                      \
    pdl_launch_dependents();                                                                           \
    __VA_ARGS__(q, gdn_prefill64::GridIdx{});                                                          \
    pdl_exit();
#define GDN_P64_RUN_PREP(...) GDN_P64_RUN(PART_PREP, 0, __VA_ARGS__)
#else
namespace gdn_prefill64 {
// The items (block indices of vgrid[LAUNCH], x fastest, as the block scheduler starts CTAs) this CTA runs: its own
// index first, then gridDim.x + the counter's old value, claimed when the current item is done: a CTA that is done
// takes the next item, as the block scheduler would start a new CTA. (Claiming as the item starts, under its work,
// makes the next item wait for the current one: a CTA that drew the longest sequence would keep one more, 30-37 us on
// the blind chunk64 / cp calls of the contest-like mix.) Items >= the vgrid's size end the loop. Whole CTAs call it;
// the bodies' returns are CTA-uniform.
// The prep (LAUNCH 0) keeps its grid, one item per CTA (GDN_P64_RUN_PREP): in a loop ptxas keeps its addresses live
// across items (140 registers, where six CTAs per SM need <= 80). Its block 0 zeroes the other launches' counters:
// they run after it in the stream, and only when it runs.
__device__ __forceinline__ void dp_zero_counters(const Prefill64PlanParams& pp) {
    if (blockIdx.x == 0 && threadIdx.x > 0 && threadIdx.x < DP_LAUNCHES) pp.claimed[threadIdx.x] = 0;
}
template <int LAUNCH, class Body>
__device__ __forceinline__ void dp_items(const Prefill64PlanParams& pp, Body&& body) {
    static_assert(LAUNCH > 0 && LAUNCH < DP_LAUNCHES, "the prep keeps its grid");
    __shared__ u32 next;  // thread 0's claim, for every thread
    const u32 vx = pp.vgrid[LAUNCH][0], vxy = vx * pp.vgrid[LAUNCH][1], n = vxy * pp.vgrid[LAUNCH][2];
    if (threadIdx.x == 0) dp_bars = 0;  // the barriers are set up by the first item that walks
    __syncthreads();
    for (u32 i = blockIdx.x; i < n;) {
        body(ItemIdx{i % vx, (i % vxy) / vx, i / vxy});
        pdl_wait();  // (the counters are the prep's: a body that returned at once has not waited)
        if (threadIdx.x == 0) next = gridDim.x + atomicAdd(pp.claimed + LAUNCH, 1u);
        __syncthreads();  // the claim is in; the item's shared memory and barriers are free
        i = next;
        __syncthreads();  // every thread has read it
    }
}
}  // namespace gdn_prefill64
#define GDN_P64_ARGS const Prefill64PlanParams pp
#define GDN_P64_SCAN_BOUNDS __launch_bounds__(256, 1)
#define GDN_P64_RUN(PART, LAUNCH, ...)                                                          \
    Prefill64Params q = pp.p;                                                                          \
    pdl_launch_dependents();                                                                           \
    if (!gdn_prefill64::device_plan_runs(pp, gdn_prefill64::PART, q.seg_chunks)) {                    \
        pdl_exit();                                                                                    \
        return;                                                                                        \
    }                                                                                                  \
    gdn_prefill64::dp_items<LAUNCH>(pp, [&](const gdn_prefill64::ItemIdx b) { __VA_ARGS__(q, b); });
#define GDN_P64_RUN_PREP(...)                                                                          \
    Prefill64Params q = pp.p;                                                                          \
    if (!gdn_prefill64::device_plan_runs(pp, gdn_prefill64::PART_PREP, q.seg_chunks)) {               \
        pdl_launch_dependents();                                                                       \
        pdl_exit();                                                                                    \
        return;                                                                                        \
    }                                                                                                  \
    if (q.seg_chunks > 0) pdl_launch_dependents(); /* (chunk64: the walk is dispatched at exit) */      \
    gdn_prefill64::dp_zero_counters(pp);                                                               \
    __VA_ARGS__(q, gdn_prefill64::GridIdx{});
#endif
#ifndef GDN_PREFILL64_WIDE
extern "C" __global__ void __launch_bounds__(128) gdn_prefill64_prep(GDN_P64_ARGS) {
    GDN_P64_RUN_PREP(gdn_prefill64::prep_body)
}
extern "C" __global__ void __launch_bounds__(128, 1) gdn_prefill64_walk_f32(GDN_P64_ARGS) {
    GDN_P64_RUN(PART_WALK, 1, gdn_prefill64::walk_plain<false>)
}
extern "C" __global__ void __launch_bounds__(128, 1) gdn_prefill64_walk_bf16(GDN_P64_ARGS) {
    GDN_P64_RUN(PART_WALK, 1, gdn_prefill64::walk_plain<true>)
}
extern "C" __global__ void __launch_bounds__(128, 1) gdn_prefill64_cp_pass1_f32(GDN_P64_ARGS) {
    GDN_P64_RUN(PART_CP, 2, gdn_prefill64::cp_pass1<1, false>)
}
extern "C" __global__ void __launch_bounds__(128, 1) gdn_prefill64_cp_pass1_bf16(GDN_P64_ARGS) {
    GDN_P64_RUN(PART_CP, 2, gdn_prefill64::cp_pass1<1, true>)
}
extern "C" __global__ void GDN_P64_SCAN_BOUNDS gdn_prefill64_cp_scan(GDN_P64_ARGS) {
    GDN_P64_RUN(PART_CP, 3, gdn_prefill64::cp_scan<16>)
}
extern "C" __global__ void GDN_P64_SCAN_BOUNDS gdn_prefill64_cp_scan8(GDN_P64_ARGS) {
    GDN_P64_RUN(PART_CP, 3, gdn_prefill64::cp_scan<8>)
}
extern "C" __global__ void __launch_bounds__(128, 1) gdn_prefill64_cp_pass3_f32(GDN_P64_ARGS) {
    GDN_P64_RUN(PART_CP, 4, gdn_prefill64::cp_pass3<1, false>)
}
extern "C" __global__ void __launch_bounds__(128, 1) gdn_prefill64_cp_pass3_bf16(GDN_P64_ARGS) {
    GDN_P64_RUN(PART_CP, 4, gdn_prefill64::cp_pass3<1, true>)
}
#else  // GDN_PREFILL64_WIDE: the two-warpgroup cp passes
extern "C" __global__ void __launch_bounds__(256, 1) gdn_prefill64_cp_pass1w_f32(GDN_P64_ARGS) {
    GDN_P64_RUN(PART_CP, 2, gdn_prefill64::cp_pass1<2, false>)
}
extern "C" __global__ void __launch_bounds__(256, 1) gdn_prefill64_cp_pass1w_bf16(GDN_P64_ARGS) {
    GDN_P64_RUN(PART_CP, 2, gdn_prefill64::cp_pass1<2, true>)
}
extern "C" __global__ void __launch_bounds__(256, 1) gdn_prefill64_cp_pass3w_f32(GDN_P64_ARGS) {
    GDN_P64_RUN(PART_CP, 4, gdn_prefill64::cp_pass3<2, false>)
}
extern "C" __global__ void __launch_bounds__(256, 1) gdn_prefill64_cp_pass3w_bf16(GDN_P64_ARGS) {
    GDN_P64_RUN(PART_CP, 4, gdn_prefill64::cp_pass3<2, true>)
}
#endif

