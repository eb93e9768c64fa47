// prefill_fused.cu — Gated Delta Net chunked varlen prefill in one fused launch, on tensor cores via mma.sync, for
// every GPU from Ampere (sm_80) on (tuned on Hopper; kernels/common/sm90.cuh compiles its Hopper-only waits and PDL
// away below sm_90). The module's entry: it includes the role headers of this folder in order and exports the kernels.
//
// Compiled at run time by NVRTC (-arch=<the device's target> -std=c++17; every .cuh is an in-memory header named by its path under
// kernels/, so the tools compile it with -I crates/gdn-cuda/kernels). The default build defines nothing: the
// definition mode, 112-byte params and no serving code (common/serving.cuh sv_of folds every serving branch away);
// GDN_SERVING builds the serving kernels (module prefill_sv: params with the serving block); GDN_DEVICE_PLAN builds
// the device plan's kernels of either (modules prefill_dp, prefill_sv_dp; PrefillPlanParams).
//
// Files, in include order:
//   params.cuh       PrefillParams and PrefillPlanParams, the chunk and tile constants, a ring slot's
//                    shared-memory layout, and every tile's launch shape (walk scheme, warps, threads, dynamic shared
//                    memory)
//   producer.cuh     the producer warps' work on one chunk: its loads (and q/k norm), and its state-independent
//                    preparation
//   schedule.cuh     which sequence a CTA runs: longest first, and the split of the longest sequences
//   walker_ops.cuh   the walkers' per-chunk tensor-core steps (Vn, the outputs, the state update), the state's rows
//                    (pool, padding, layout), its load and store, and the checkpoints
//   walkers.cuh      the walk schemes: single, mirror (a state and an output walker), k-split
//   body.cuh         the kernel body: the state row, shared-memory carve-up, mbarriers, the producer loop, the
//                    walkers' dispatch
//
// ---------------------------------------------------------------------------------------------------------
// Math, per (sequence, value head h), chunks of C = 16 tokens, S in [K, V] orientation:
//   γ_i = Σ_{j<=i} log g_j (reset per chunk), A = strict_lower(diag(β) K Kᵀ ⊙ exp(γ_i − γ_j)), T = (I + A)⁻¹
//   W = T diag(β e^γ) K,  U = T diag(β) V,  P = scale · (Q Kᵀ ⊙ exp(γ_i − γ_j) ⊙ [i ≥ j])
//   Vn = U − W S;  O = scale e^γ ⊙ (Q S) + P Vn;  S ← e^{γ_C} S + Kᵀ (e^{γ_C − γ} ⊙ Vn)
// Only differences γ_i − γ_j (i ≥ j) and γ_C − γ_i are exponentiated (all ≤ 0): no 0·inf (FlashInfer #3720).
// The last, partial chunk is padded with k = q = v = 0, β = 0, log g = 0, which leaves S and every valid
// output unchanged (padded rows of W, U, Vn are exactly 0).
//
// Grid / block mapping (one launch, no host sync, plans from cu_seqlens on the device):
//   grid.x = N · HV · (128 / BV), flattened (no y/z limits): blockIdx.x = (seq · HV + h) · NVG + vg.
//   Each CTA owns value columns [vg·BV, vg·BV + BV) of one (sequence, value head): an independent chain.
//   block = 32 · (walker warps + NP producer warps) threads (params.cuh block_threads):
//     walkers: the warps that carry the state. Each 16 value rows of the tile get one to three of them, by the tile's
//       walk scheme (params.cuh, walkers.cuh). SINGLE (bv64, bv128): warp w owns 16 value rows; its state slice
//       Sᵀ[16 v][128 k] lives in fp32 mma accumulator fragments (64 registers) for the whole sequence; per chunk it
//       runs Z = Sᵀ·Kᵀ, Sᵀ·Qᵀ, X = Z·Tgᵀ (= Sᵀ·Wᵀ), Vᵀ·Tbᵀ (U), Vn·Pᵀ and the rank-16 update Vnᵀ·K on tensor cores.
//       MIRROR (bv32): a state walker keeps only the state chain (Z, U, X, Vn, the update) and hands Vn to an output
//       walker, which mirrors S with the same update and forms Sᵀ·Qᵀ, Vn·Pᵀ and the outputs. KSPLIT (bv16): two
//       state walkers hold one k half of Sᵀ each (Z partials swapped through shared memory) and hand Vn and bf16 Sᵀ to
//       an output walker that holds no state; Sᵀ is announced on its own (SREADY), so the output walker forms
//       Y = Sᵀ Qᵀ while the state walkers finish X, Vn and the update, and only O waits for Vn.
//     producers (the warps after the walkers): producer p prepares chunks p, p + NP, ... (cp.async loads of K, Q, V
//       and the gates; K Kᵀ and Q Kᵀ on tensor cores; T by fp32 forward substitution, stored transposed as 16-byte
//       stores) into a ring of R = 2·NP + 1 shared-memory slots. Per iteration (chunk j) a producer first claims the
//       slot of its next chunk j + NP (freed when the walkers finished chunk j − NP − 1) and starts its copies, then
//       waits for chunk j's copies, computes it and signals FULL: loads overlap one whole computation.
//   Producer 0 of every sequence-0 CTA issues the loads of chunk 0 before cu_seqlens has arrived (sequence 0 starts
//   at token 0; PrefillParams::lead_rows = min(T, 16) rows exist), then zeroes the rows past the sequence's end: one
//   DRAM round trip off short calls.
//   Hand-offs are mbarriers in shared memory, waited on by phase parity (chunk c uses slot c % R, phase c / R):
//   FULL[s] (arrival count 32: all lanes of the producer warp, release), EMPTY[s] (count: every walker lane), and for
//   the output walkers VN[s] (Vn ready) and, KSPLIT, SREADY[s] (bf16 Sᵀ ready).
// Why: the state walk is the only sequential part and its per-chunk latency bounds long sequences; moving all
// state-independent work to other warps keeps the walkers' chain to three tensor-core stages per chunk.
//
// Layouts: q, k [T, H, 128] bf16; v [T, HV, 128] bf16; a, b [T, HV] bf16; state / new_state [N, HV, V, K]
// (k-last; fp32 or bf16 by variant); out [T, HV, 128] bf16; cu_seqlens int64 [N+1] in device memory.
// Value head h reads q/k head h / (HV / H). All offsets are 64-bit.
//
// Serving modes (the GDN_SERVING build's PrefillParams::serving, common/serving.cuh; gdn_core's float64 reference
// defines them). Each is a uniform branch on the params, outside the walkers' per-chunk chain where it can be:
//   fp16            SV_ACT_F16: the producer rewrites each slot's fp16 K, Q and V tiles as bf16 in place
//                   (producer.cuh f16_tiles_to_bf16) and reads raw a / b and a 16-bit beta as fp16; outputs are
//                   rounded to fp16 (walker_ops.cuh store_output). SV_STATE_F16: the bf16-state kernels load and store
//                   fp16 states (common/serving.cuh state_ld2 / state_st2 / state_ld1 / state_st1)
//   views           q, k, v and out rows at the caller's token / head strides (producer.cuh load_chunk,
//                   walker_ops.cuh store_output, body.cuh zero_output; sv_tok_stride / sv_head_stride)
//   state pool      walker_ops.cuh state_row (common/serving.cuh sv_state_row): sequence n reads and writes pool row pool_indices[n] (rows
//                   sv_row_stride apart, in place); padding (by the call's rule, or an index >= num_state_rows) writes
//                   zero outputs and touches no state (body.cuh); has_initial_state = 0 starts from zeros; an empty
//                   sequence reads and writes nothing
//   K-first state   walker_ops.cuh load_state / store_slice: [.., K, V] rows for the state, new_state, checkpoints
//   gates           precomputed g / alpha and beta (f32, or bf16 beta) in place of a, b, A_log, dt_bias; the
//                   producers' serving build (body.cuh producer_loop<SV>) loads and converts them
//   q/k norm        producer.cuh normalize_qk: the slot's K and Q rows, in place, before anything reads them
//   offsets         int32 or int64 cu_seqlens (common/serving.cuh cu_at)
//   checkpoints     walker_ops.cuh checkpoint: the state after every checkpoint_every tokens (a multiple of 64, so
//                   a chunk end), written by the walkers that hold it
//
// Numerics: products with S use S rounded to bf16 (as FLA/FlashInfer); T, P, Vn (in the output product) and
// Z = Sᵀ Kᵀ are carried as hi + lo bf16 pairs, and W is never formed nor rounded to bf16 (X = Z Tgᵀ takes three
// products instead of one): an fp64 emulation showed these to be the dominant bf16 error terms (with them: output
// rel-L2 2.2e-3, state 1.7e-3 on slow-decay inputs). The state update's operand Vn·e^{γC−γ} is one bf16.
// ---------------------------------------------------------------------------------------------------------
#include "common/gates.cuh"
#include "common/sm90.cuh"
#include "common/serving.cuh"
#include "common/device_plan.cuh"
#include "prefill_fused/params.cuh"
#include "prefill_fused/producer.cuh"
#include "prefill_fused/schedule.cuh"
#include "prefill_fused/walker_ops.cuh"
#include "prefill_fused/walkers.cuh"
#include "prefill_fused/body.cuh"

// ---------------------------------------------------------------------------------------------------------
// Exported kernels. gdn_prefill_<state dtype>_bv<BV>: BV value columns per CTA, sequences in batch order.
// gdn_prefill_<state>_bv{64,128}_lf: the same tiles, sequences longest first (schedule.cuh; launch constants identical
// to the plain tile's). gdn_prefill_<state>_bv128_sp: longest first, the longest sequences on two CTAs each
// (schedule.cuh; the bv128 tile's block and shared memory).
//   grid  = (N · HV · (128 / BV), 1, 1); the split kernels ((N + min(N, 16)) · HV, 1, 1)
//   block = block_threads<BV>(): bv16 256 (2 k-split state walkers, 1 output walker, 5 producers), bv32 256 (2 + 2
//           walkers, 4 producers), bv64 256 (4 walkers, 4 producers), bv128 384 (8 walkers, 4 producers)
//   dynamic shared memory = smem_bytes<BV, producers<BV>()>(): bv16 225696, bv32 159000, bv64 151248, bv128 172752
//           (all > 48 KB: CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES must be raised). Both are also in the
//           module as data (gdn_prefill_launch) and in the Rust registry, checked against these constexprs.
// gdn_prefill_<state>_bv{32,64}_np2: the compact tiles, two producers (params.cuh COMPACT_NP): block 192, dynamic shared
// memory 88760 (bv32) and 85136 (bv64), for GPUs with 99 KB per block.
// ---------------------------------------------------------------------------------------------------------
#ifndef GDN_DEVICE_PLAN
#define GDN_PREFILL_KERNEL_NP(NAME, NW, NP, BF16, LF)                                                    \
    extern "C" __global__ void __launch_bounds__(gdn_prefill::block_threads<16 * NW, NP>(), 1)           \
        NAME(const PrefillParams p) {                                                                    \
        gdn_prefill::prefill_body<NW, NP, BF16, LF>(p);                                                  \
    }
#else  // the device plan's build: exit unless run_from <= the longest sequence < run_below (nothing written yet)
namespace gdn_prefill {
// Whether this launch runs the call (common/device_plan.cuh); one that does not leaves here (pdl_exit). A launch
// that runs it lets its successor be dispatched once its longest sequence is known, and needs no wait (the launches
// before it exit).
__device__ __forceinline__ bool device_plan_runs(const PrefillPlanParams& pp) {
    const i64 longest = pp.run_below < 0 ? 0 : call_longest_seq(pp.p);
    if (pp.run_below < 0 || longest >= pp.run_below || longest < pp.run_from) {
        pdl_exit();
        return false;
    }
    pdl_launch_dependents();
    return true;
}
}  // namespace gdn_prefill
#define GDN_PREFILL_KERNEL_NP(NAME, NW, NP, BF16, LF)                                                    \
    extern "C" __global__ void __launch_bounds__(gdn_prefill::block_threads<16 * NW, NP>(), 1)           \
        NAME(const PrefillPlanParams pp) {                                                               \
        if (gdn_prefill::device_plan_runs(pp))                                                           \
            gdn_prefill::prefill_body<NW, NP, BF16, LF>(pp.p);                                           \
    }
#endif
// A tile with its default producer count.
#define GDN_PREFILL_KERNEL(NAME, NW, BF16, LF) GDN_PREFILL_KERNEL_NP(NAME, NW, gdn_prefill::producers<16 * NW>(), BF16, LF)
// The split kernels (bv128, longest first; schedule.cuh).
#ifndef GDN_DEVICE_PLAN
#define GDN_PREFILL_SPLIT_KERNEL(NAME, BF16)                                                             \
    extern "C" __global__ void __launch_bounds__(gdn_prefill::block_threads<128>(), 1)                   \
        NAME(const PrefillParams p) {                                                                    \
        gdn_prefill::prefill_body<8, gdn_prefill::producers<128>(), BF16, true, true>(p);                \
    }
#else
#define GDN_PREFILL_SPLIT_KERNEL(NAME, BF16)                                                             \
    extern "C" __global__ void __launch_bounds__(gdn_prefill::block_threads<128>(), 1)                   \
        NAME(const PrefillPlanParams pp) {                                                               \
        if (gdn_prefill::device_plan_runs(pp))                                                           \
            gdn_prefill::prefill_body<8, gdn_prefill::producers<128>(), BF16, true, true>(pp.p);         \
    }
#endif
GDN_PREFILL_KERNEL(gdn_prefill_f32_bv16, 1, false, false)
GDN_PREFILL_KERNEL(gdn_prefill_f32_bv32, 2, false, false)
GDN_PREFILL_KERNEL(gdn_prefill_f32_bv64, 4, false, false)
GDN_PREFILL_KERNEL(gdn_prefill_f32_bv128, 8, false, false)
GDN_PREFILL_KERNEL(gdn_prefill_bf16_bv16, 1, true, false)
GDN_PREFILL_KERNEL(gdn_prefill_bf16_bv32, 2, true, false)
GDN_PREFILL_KERNEL(gdn_prefill_bf16_bv64, 4, true, false)
GDN_PREFILL_KERNEL(gdn_prefill_bf16_bv128, 8, true, false)
GDN_PREFILL_KERNEL(gdn_prefill_f32_bv64_lf, 4, false, true)
GDN_PREFILL_KERNEL(gdn_prefill_f32_bv128_lf, 8, false, true)
GDN_PREFILL_KERNEL(gdn_prefill_bf16_bv64_lf, 4, true, true)
GDN_PREFILL_KERNEL(gdn_prefill_bf16_bv128_lf, 8, true, true)
GDN_PREFILL_SPLIT_KERNEL(gdn_prefill_f32_bv128_sp, false)
GDN_PREFILL_SPLIT_KERNEL(gdn_prefill_bf16_bv128_sp, true)
// The compact tiles (params.cuh COMPACT_NP): for GPUs whose blocks may not take the default tiles' shared memory.
GDN_PREFILL_KERNEL_NP(gdn_prefill_f32_bv32_np2, 2, gdn_prefill::COMPACT_NP, false, false)
GDN_PREFILL_KERNEL_NP(gdn_prefill_f32_bv64_np2, 4, gdn_prefill::COMPACT_NP, false, false)
GDN_PREFILL_KERNEL_NP(gdn_prefill_bf16_bv32_np2, 2, gdn_prefill::COMPACT_NP, true, false)
GDN_PREFILL_KERNEL_NP(gdn_prefill_bf16_bv64_np2, 4, gdn_prefill::COMPACT_NP, true, false)
