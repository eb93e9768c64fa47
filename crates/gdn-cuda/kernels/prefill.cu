// prefill.cu — Gated Delta Net chunked varlen prefill for Hopper (sm_90a), tensor cores via mma.sync.
//
// Compiled at run time by NVRTC (options: -arch=sm_90a -std=c++17 -I<cuda include> -I<this folder>);
// no system headers. Optional defines, experiments only (the production build passes none): GDN_NP (forces the
// producer warps per CTA of every variant; 1..6), GDN_UPD_HILO (below), and the timing ablations GDN_ABLATE_PREP
// (producers skip the chunk math) / GDN_ABLATE_WALK (walkers skip it) whose results are wrong by design; v11's
// GDN_EARLY_SEQ=0 and (sm90.cuh) GDN_SPLIT_PTX=0 restore v10's behaviour for A/B runs.
//
// ---------------------------------------------------------------------------------------------------------
// Math (GDN.md §2), per (sequence, value head h), chunks of C = 16 tokens, S in [K, V] orientation:
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
//   block = 32 · (walkers + NP (+ 1 idle)) threads (block_threads below):
//     warps 0..NW-1   "walkers": warp w owns 16 value rows; its state slice Sᵀ[16 v][128 k] lives in fp32
//                     mma accumulator fragments (64 registers) for the whole sequence; per chunk it runs
//                     Z = Sᵀ·Kᵀ, Sᵀ·Qᵀ, X = Z·Tgᵀ (= Sᵀ·Wᵀ, v5), Vᵀ·Tbᵀ (U), Vn·Pᵀ and the rank-16 update
//                     Vnᵀ·K on tensor cores.
//     v8 (bv16, bv32): warps NW..2NW-1 are "output walkers": the walker w keeps only Z, U, X, Vn and the update
//                     (the state chain) and hands Vn (f32) to output walker NW + w through shared memory (VN[s]
//                     mbarriers); that one mirrors S with the same update and forms Sᵀ·Qᵀ, Vn·Pᵀ and the outputs.
//     v9 (bv16): two k-split state walkers per 16 rows (each half of Sᵀ's k columns; Z partials swapped through
//                     shared memory) hand Vn and bf16 Sᵀ to one output walker that holds no state (walk_scheme below;
//                     bv32 keeps v8's mirror, bv64/bv128 one walker per 16 rows).
//     v10 (bv16): the bf16 Sᵀ hand-off is announced on its own (SREADY[s], right after the state walkers' Z loop), so
//                     the output walker forms Y = Sᵀ Qᵀ while they finish X, Vn and the update, and only O waits for
//                     Vn (H200, same process as v9: 1x8192 270.6 -> 263.6 us, 1x1024 37.4 -> 36.6, 1x259 13.2 -> 12.7).
//     v12 (every tile): the chunk preparation keeps γ and β in registers (A and P take them by shuffles, no
//                     shared-memory round trip and __syncwarp) and T's substitution solves (I + A) x = s·e_c, so its
//                     columns come out scaled (no scaling pass). H200, same process as v11: mix (best tile) 6.04 ->
//                     6.16x FlashInfer, 1x8192 bv32 307.1 -> 298.5 us, bv16 257.9 -> 254.7; numerics unchanged.
//     v12.1 (bv64): 4 producers, not 5 — 8 warps put one walker and one producer on each sub-partition, where the
//                     ninth warp doubled sub-partition 0's load and walker 0 lagged. H200, same process (NP sweep,
//                     session 16): 1x1024 53.6 -> 49.2 us, 1x8192 404.6 -> 365.5, 4x2048 104.8 -> 95.3, 32x256
//                     72.5 -> 67.1, 64x1024 433.9 -> 398.4, 8x128 12.8 -> 12.5 (bv16 and bv32 are best at their
//                     defaults: NP 3 / 4 / 6 slower).
//     v11 (every tile): cu_seqlens and the gate parameters are requested before the mbarrier set-up and read through
//                     the barrier's return value (GDN_EARLY_SEQ), and hi/lo bf16 splits take one cvt per pair
//                     (sm90.cuh, bitwise the same values). H200, same process as v10: contest-like mix (best tile per
//                     workload) 5.74 -> 6.00x FlashInfer, 1x128 8.2 -> 7.9 us, 1x8192 bv16 264.4 -> 258.7, 4x2048 bv32
//                     82.4 -> 80.7. (Measured and dropped: the first chunk prepared by two producer warps, and a
//                     producer order with Q Kᵀ after A — results/prefill_s10.md.)
//     v12.2 (every tile): load_chunk advances one pointer per lane (v12.1 formed a 64-bit offset for every 16-byte
//                     piece: 240-300 SASS instructions per chunk, now 117-140, on the producers' stream). Bitwise the
//                     same; H200, same process: 1x128 bv16 7.7 -> 7.4 us, 1x1024 35.2 -> 34.1, 4x2048 bv32 79.1 ->
//                     78.2, mix30 bv128 72.1 -> 71.2, 64x1024 bv128 307.5 -> 300.2 (results/prefill_s19.md).
//     v12.3 (every tile): B operands load by ldmatrix in "B order" (walker_lanes), so each mma's two B registers are
//                     an adjacent pair; the producers' K Kᵀ / Q Kᵀ read K a second time in that order. v12.2 made ptxas
//                     copy them into pairs: ~150 register moves per kernel, now ~20. Bitwise the same; H200, same
//                     process: 32x256 bv128 52.9 -> 50.7 us, mix30 71.2 -> 68.8, 64x1024 300.8 -> 291.2, 4x2048 bv32
//                     78.5 -> 77.2, 1x1024 bv32 40.2 -> 39.2; bv16 even (1x1024 34.2 -> 34.3, 1x8192 246 -> 248).
//     v12.4 (every tile): the device plan's build (GDN_DEVICE_PLAN, session 23; PrefillPlanParams): every warp first
//                     reads the longest sequence's length from cu_seqlens and the CTA exits when it is >= run_below
//                     (v12.5, session 24: or < run_from, so that two tiles can share the fused lengths)
//                     (the prefill64 launches of the same call run it). The default build is unchanged.
//     v13 (bv64, bv128; session 26): the longest-first kernels gdn_prefill_*_bv{64,128}_lf (template LF). CTA group r
//                     runs the sequence of rank r (longest first; lf_rank below), so that on a grid wider than the GPU
//                     a long sequence's chain starts in the first wave instead of after the short sequences before it
//                     in the batch. The plain kernels are unchanged (the policy picks _lf: policy.rs fused_order).
//                     H200: "30 mixed" 71.8 -> 55.6 us, contest-like mix (hinted) 2792 -> 2740 us (results/prefill_s26.md).
//                     v13.1: the ranking counts from shared memory (shuffles cost ~2.5 us per CTA wave at N = 64).
//     v14 (bv128; session 28): the split kernels gdn_prefill_*_bv128_sp: longest first, and every sequence longer than
//                     T·HV / SMs tokens runs on two CTAs of 64 value rows (4 walkers each, one per SM sub-partition: the
//                     chain runs at bv64's ~0.68 us per chunk instead of ~1.14) while the rest keep bv128's shared
//                     producers (SPLIT_MIN_TOKENS below). The other kernels are unchanged (SASS identical). H200, every
//                     prefill workload forced onto it against bv128_lf: prefill_37 79.6 -> 62.4 us, prefill_05 101.1 ->
//                     73.2, unsplit calls +0.1..0.4; with the policy: mix hinted 2709 -> 2680, blind 2923 -> 2881
//                     (results/prefill_s28.md).
//     v14.1 (session 29): the split threshold counts 64 tokens per sequence (GDN_SPLIT_SEQ_TOKENS), and T comes from the
//                     ends already loaded (one load fewer): H200, forced, "30 mixed" 57.5 -> 52.1 us (results/prefill_s29.md).
//     v14.2 (session 30): the device plan's build takes part in programmatic dependent launch (sm90.cuh, pdl_*). A
//                     tile that runs the call lets its successor be dispatched once its longest sequence is known, and
//                     needs no wait (the launches before it exit); a tile that exits does not (its successor is
//                     dispatched as its CTAs leave: H200, blind, the calls the prefill64 launches run 4-10 us faster,
//                     prefill_15 151.2 -> 141.2, prefill_06 100.4 -> 91.1) and waits only in block 0. The default
//                     build is unchanged (a host plan's fused call is one launch).
//     v14.3 (session 31): the device plan's build compiles one body per kernel. Its longest-first and split kernels used
//                     to read the shortest length too and run the plain body when it equalled the longest; now lf_rank
//                     skips its counting on equal lengths (the rank is then the index) and the body stays longest-first.
//                     H200, blind, three runs each: prefill sums 3954 -> 3941 us (mix 2812 -> 2799), 32x256 60.8 ->
//                     60.3 us, 64x1024 296.7 -> 299.4 (results/prefill_s31.md). The default build is unchanged.
//     v14.4 (session 32; bv32, bv64, bv128): the first loads are staged (staged_start below). A call of these tiles
//                     starts a wave of CTAs together, and every walker's first act was to load its state (64 KB per bv128
//                     CTA, 8.4 MB per wave): the producers' cu_seqlens and first-chunk loads queued behind that burst
//                     (trace, 32x256 bv128, L2 flushed: cu_seqlens consumed 3.1 us after CTA entry, walker 0's first
//                     chunk ready at 6.4). Now the walkers load the state once every producer has issued its first
//                     chunk's loads (named barrier START_BAR), and each producer issues its second chunk's loads after
//                     its first chunk's math instead of before: cu_seqlens 1.1 us, first-wave fill 8.5 -> 5.3 us.
//                     H200, one machine, base -> this, two interleaved rounds: prefill sums 3741 -> 3716 us hinted,
//                     3925 -> 3892 blind; 32x256 50.8 -> 48.6 (blind 59.9 -> 57.9), 30 mixed 51.8 -> 49.9, 64x1024
//                     287 -> 285; bv32 mix calls -0.5 (another machine). bv16 is unchanged, SASS identical: its calls
//                     start few CTAs, and staging it cost 1x128 +0.1-0.2 us (results/prefill_s32.md).
//     warps after the walkers: "producers": producer p prepares chunks p, p+NP, ... (cp.async loads of K, Q, V,
//                     gates, K Kᵀ and Q Kᵀ on tensor cores, T by fp32 forward substitution; v5: no W, the
//                     T tiles go out transposed as 16-byte stores) into a ring of R = 2·NP + 1 shared-memory slots. Per iteration (chunk j) a
//                     producer first claims the slot of its next chunk j + NP (freed when the walkers finished
//                     chunk j − NP − 1) and starts its copies, then waits for chunk j's copies, computes it and
//                     signals FULL: loads overlap one whole computation.
//   v6: producer 0 of every sequence-0 CTA issues the loads of chunk 0 before cu_seqlens has arrived (sequence 0
//   starts at token 0; PrefillParams::lead_rows = min(T, 16) rows exist), then zeroes the rows past the sequence's
//   end: one DRAM round trip off short calls (H200, 1x16 bv32 5.5 -> 5.1 us, 1x128 bv16 11.0 -> 10.2).
//   Producer → walkers hand-off (v4): mbarriers in shared memory, FULL[s] (arrival count 32: all lanes of
//   the producer warp, release) and EMPTY[s] (count: every walker lane, state and output walkers; v8 adds VN[s]
//   for the Vn hand-off), waited on by phase parity
//   (chunk c uses slot c % R, phase c / R). NP is no longer limited by the 16 named barriers (v1–v3: NP ≤ 2).
// Why: the state walk is the only sequential part and its per-chunk latency bounds long sequences; moving
// all state-independent work to other warps keeps the walkers' chain to three tensor-core stages per chunk.
//
// Layouts: q, k [T, H, 128] bf16; v [T, HV, 128] bf16; a, b [T, HV] bf16; state / new_state [N, HV, V, K]
// (k-last; fp32 or bf16 by variant); out [T, HV, 128] bf16; cu_seqlens int64 [N+1] in device memory.
// Value head h reads q/k head h / (HV / H). All offsets are 64-bit.
//
// Numerics: products with S use S rounded to bf16 (as FLA/FlashInfer); T, P, Vn (in the output product) and
// (v5) Z = Sᵀ Kᵀ are carried as hi+lo bf16 pairs; W is never rounded to bf16 (v5) (3 mma instead of 1), which an fp64 emulation showed to be the dominant
// bf16 error terms (output rel-L2 3.3e-3 -> 2.2e-3, state 2.5e-3 -> 1.7e-3 on slow-decay inputs).
// ---------------------------------------------------------------------------------------------------------
#include "gates.cuh"
#include "sm90.cuh"
#include "device_plan.cuh"

// Producer warps per CTA, per variant (v4 default): BV=16, 32, 64 -> 5; BV=128 -> 4 (384 threads, <= 168 regs).
// -DGDN_NP=n forces n (1..6; NP=6 fits bv16/32/64 since v5) for every variant (experiments only; the runtime uses the defaults).

// Parameters of every gdn_prefill_* kernel. 8-byte fields first, then 4-byte fields; 112 bytes.
// The Rust runtime mirrors this struct byte for byte (offsets in the comments).
struct PrefillParams {
    const __nv_bfloat16* q;        //   0: [T, H, 128] bf16
    const __nv_bfloat16* k;        //   8: [T, H, 128] bf16
    const __nv_bfloat16* v;        //  16: [T, HV, 128] bf16
    const __nv_bfloat16* a;        //  24: [T, HV] bf16 (decay input)
    const __nv_bfloat16* b;        //  32: [T, HV] bf16 (update-gate input, beta = sigmoid(b))
    const float* A_log;            //  40: [HV] f32
    const float* dt_bias;          //  48: [HV] f32
    const i64* cu_seqlens;         //  56: [N+1] int64, device memory, non-decreasing, cu[0] = 0
    const void* state;             //  64: [N, HV, 128, 128] k-last, f32 (gdn_prefill_f32_*) or bf16
                                   //      (gdn_prefill_bf16_*); NULL means zeros
    void* new_state;               //  72: [N, HV, 128, 128] k-last, same dtype as state; every row written
    __nv_bfloat16* out;            //  80: [T, HV, 128] bf16
    i64 num_seqs;                  //  88: N
    float scale;                   //  96: output scale (resolved by the caller, never 0)
    i32 num_q_heads;               // 100: H (q and k heads)
    i32 num_v_heads;               // 104: HV, a multiple of H, even (gates are copied as aligned bf16 pairs)
    i32 lead_rows;                 // 108: min(T, 16): rows of q/k/v/a/b that exist whatever cu_seqlens says
                                   //      (sequence 0's first chunk is loaded before cu_seqlens; 0 disables)
};
// v12.4 (session 23), the device plan's build of this file (module prefill_dp, compiled with GDN_DEVICE_PLAN;
// device_plan.cuh): the same kernels under the same names, taking run_below after the params. > 0: a kernel runs the
// call only when its longest sequence has fewer tokens (else the prefill64 launches of the same call run it and every
// CTA here exits at once); < 0: never (a test route). A build of its own so that host-planned calls keep the 112-byte
// params and the code they had (a longer struct changed ptxas's code for prefill64's walks, +5%).
// v12.5 (session 24): and run_from: the kernel also exits when the longest sequence has fewer tokens than that. A
// device plan may launch two tiles, a wide one for near-equal lengths (X < tile_from: bv128 keeps one chain per
// (sequence, head)) and a narrow one for skewed calls (tile_from <= X < run_from: bv64's chain per chunk is shorter,
// and the longest sequence's chain is the call's time). 128 bytes: the size the hot kernels' params keep to.
struct PrefillPlanParams {
    PrefillParams p;               //   0
    i64 run_below;                 // 112
    i64 run_from;                  // 120
};

namespace gdn_prefill {

constexpr int C = 16;              // chunk length (tokens); every mma shape below assumes 16
constexpr int D = 128;             // head dim (K = V = 128)
constexpr int LDK = D + 8;         // padded bf16 row stride of K/Q/W tiles: 272 B, ldmatrix conflict-free
constexpr int LDS16 = 24;          // padded bf16 row stride of 16x16 tiles (48 B), conflict-free
constexpr int TILE_KQ = C * LDK * 2;          // 16 x 136 x 2 = 4352 B
constexpr int TILE16 = C * LDS16 * 2;         // 16 x 24 x 2 = 768 B

// Shared-memory slot (one chunk's state-independent data) for a CTA with BV value columns.
template <int BV> struct Slot {
    static constexpr int LDV = BV + 8;                       // padded row stride of the V tile
    static constexpr int K_OFF = 0;                          // K  bf16 [16][136]      4352 B
    static constexpr int Q_OFF = K_OFF + TILE_KQ;            // Q  bf16 [16][136]      4352 B
    static constexpr int V_OFF = Q_OFF + TILE_KQ;            // V  bf16 [16][BV+8]     32(BV+8) B
    // T tiles are stored TRANSPOSED (row c holds column c of the matrix: one producer lane's 16 values as
    // two 16-byte stores) and read back with ldmatrix.trans, which yields the fragments of the untransposed tile.
    static constexpr int TBH_OFF = V_OFF + C * LDV * 2;      // (T diag(β))ᵀ hi  bf16 [16][24]  768 B
    static constexpr int TBL_OFF = TBH_OFF + TILE16;         // (T diag(β))ᵀ lo                 768 B
    static constexpr int TGH_OFF = TBL_OFF + TILE16;         // (T diag(β e^γ))ᵀ hi             768 B
    static constexpr int TGL_OFF = TGH_OFF + TILE16;         // (T diag(β e^γ))ᵀ lo             768 B
    static constexpr int PH_OFF = TGL_OFF + TILE16;          // P hi  bf16 [16][24] (row-major) 768 B
    static constexpr int PL_OFF = PH_OFF + TILE16;           // P lo                            768 B
    static constexpr int EGQ_OFF = PL_OFF + TILE16;          // scale·e^{γ_i}  f32 [16]
    static constexpr int EC_OFF = EGQ_OFF + 64;              // e^{γ_C − γ_i}  f32 [16]
    static constexpr int EGC_OFF = EC_OFF + 64;              // e^{γ_C}        f32 [1] (+ pad to 64 B)
    static constexpr int GATE_OFF = EGC_OFF + 64;            // raw a (lanes 0..15) / b (16..31) bf16 pairs, u32 [32]
    static constexpr int BYTES = GATE_OFF + 128;             // 13632 + 32(BV+8): BV=16 14400, 32 14912, 64 15936, 128 17984
};
static_assert(Slot<16>::BYTES == 14400 && Slot<128>::BYTES == 17984, "slot layout");
// Per-producer scratch: A (f32 [16][16], 1024 B), then 128 B that held γ and β until v11 (v12 keeps them in
// registers; the bytes stay so that the launch table, mirrored by the Rust registry, is unchanged). v13: producer 0's
// 128 spare bytes carry the longest-first kernels' (sequence, bos, eos) from warp 0 to the CTA across the set-up barrier.
constexpr int PS_A_OFF = 0;
constexpr int PS_LF_OFF = 1024;
constexpr int PS_BYTES = 1024 + 128;                         // 1152 B
constexpr int WS_BYTES = TILE16;                             // per-walker output staging bf16 [16][24]

// Dynamic shared memory of gdn_prefill_*_bv<BV> with NP producers and R = 2·NP + 1 ring slots (smem_bytes below):
//   R·(13632 + 32·(BV+8) + (BV/16)·H) + NP·1152 + (BV/16)·(768 + X) + 8·B·R   (bytes; the opt-in limit on sm_90 is
//   232448; the last bytes are the mbarriers, B arrays of R: ring_barriers below), H the hand-off (KSPLIT 5120,
//   MIRROR 1024), X the Z exchange (KSPLIT 4096).
// Defaults (v12.1): BV=16 (KSPLIT, NP 5) 225696, BV=32 (MIRROR, NP 4) 159000, BV=64 (NP 4) 151248,
// BV=128 (NP 4) 172752.
// (v4-v12: BV=64 (NP 5) 184304.)
// (v9: BV=16 225608, without SREADY.)
// (v8: BV=16 (MIRROR, NP 5) 176456.)
// (v5.1-v7: BV=16 (NP 6) 195088, BV=32 (NP 5) 171504.)
// (v4: R·(16448 + 32·(BV+8)) + NP·2688 + (BV/16)·768 + 16·R = 203760 / 210160 / 222960 / 204240.)
// All > 48 KB: raise CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES.
// GDN_UPD_HILO (default 0 = v5): 1 carries the state-update operand Vn·e^{γC−γ} as hi + lo bf16 (+16 mma per
// chunk on the walker; state rel-L2 1.6e-3 -> 1.2e-5 on normalised inputs, but 1x1024 49.3 -> 54.2 us and 1x128
// 10.75 -> 11.36 us on H200, and raw-q/k failures only drop, they do not vanish). Experiments only; smem/launch unchanged.
#ifndef GDN_UPD_HILO
#define GDN_UPD_HILO 0
#endif
// v5.1: bv16 runs 8 warps — walker 0, producers on warps 1-3 and 5-7 (NP = 6), warp 4 idle — so that the walker is
// the only warp on its scheduler (warp w issues on sub-partition w % 4). H200, same process: 1x1024 48.6 -> 46.3 us,
// 1x8192 348.7 -> 330.2, 1x65536 2758 -> 2601 (-5%); plain NP = 6 (walker sharing) gives only -2.5%.
// Under -DGDN_NP (experiments) every variant gets exactly GDN_NP producers and no idle warp.
// GDN_MINB (experiments; default 1): minimum resident CTAs per SM asked of ptxas (__launch_bounds__), i.e. a
// register cap of 65536 / (threads · GDN_MINB).
#ifndef GDN_MINB
#define GDN_MINB 1
#endif
// v8 (output walkers): the walker was tensor-pipe bound — its 64 mma.sync m16n8k16 per chunk are ~16 cycles each
// on its sub-partition (1024 cycles; a -DGDN_TRACE timeline measured 590 ns per chunk at 1.8 GHz). With OW, every
// 16 value rows get two warps on different sub-partitions: the STATE walker (Z = Sᵀ Kᵀ, U, X, Vn, the update: 42
// mma) hands Vn over through shared memory to the OUTPUT walker, which keeps its own copy of S by applying the same
// update (bitwise the same operands) and forms Y = Sᵀ Qᵀ and O (38 mma), one chunk behind at most. The state chain
// loses Y and O (22 mma). H200, CUPTI, same process as -DGDN_OW=0 (v8.1): 1x1024 bv16 42.9 -> 39.8 us, bv32 48.5 ->
// 42.8, 1x8192 bv16 307.7 -> 288.1, 4x2048 bv32 93 -> 83.3, 1x128 bv16 9.4 -> 8.7; less than the mma count promised
// (the state walker's chain is latency-, not only issue-bound). bv64 gained nothing (55.6 -> 56.7) and bv128 cannot
// (20 warps would not fit the register file): both keep one walker per 16 rows.
// -DGDN_OW=0 (experiments) turns output walkers off for every variant.
#ifndef GDN_OW
#define GDN_OW 1
#endif
// v9 (bv16): every 16 value rows get THREE warps: two k-split state walkers (warps 2wv, 2wv + 1; warp 2wv + kh holds
// Sᵀ[16 v][64 k] of k half kh, 32 registers; 26 mma per chunk each) and one output walker (warp 2NW + wv) that takes
// bf16 Sᵀ and Vn from them through shared memory (22 mma, no state). H200, same process as v8: 1x1024 bv16 39.8 ->
// 37.1 us, 1x8192 286.9 -> 267.2, 1x128 8.7 -> 8.3 — less than the 42 -> 26 mma on the chain promised: the
// sub-partitions' mma.sync pipes (~16 cycles per m16n8k16 each) are shared with the producers and the output walker,
// and a -DGDN_TRACE accounting (`prefill_harness.py stalls`) puts ~250 ns of each ~580 ns chunk in the Z phase and
// ~180 in X..update. For bv32 the same scheme needs 6 walker warps on 4 sub-partitions (two of them run a state and
// an output walker) and only 3 producers fit shared memory: 1x1024 42.8 -> 47.1, 4x2048 83 -> 93, so bv32 keeps v8.
// Walk schemes: SINGLE one walker per 16 rows (bv64, bv128, -DGDN_OW=0); MIRROR v8 (state walker + an output walker
// that mirrors S from Vn); KSPLIT v9. -DGDN_SCHEME16=n / -DGDN_SCHEME32=n (experiments) override bv16 / bv32.
enum : int { WALK_SINGLE = 0, WALK_MIRROR = 1, WALK_KSPLIT = 2 };
#ifndef GDN_SCHEME16
#define GDN_SCHEME16 2
#endif
#ifndef GDN_SCHEME32
#define GDN_SCHEME32 1
#endif
template <int BV> __host__ __device__ constexpr int walk_scheme() {
    return GDN_OW == 0 ? WALK_SINGLE : BV == 16 ? GDN_SCHEME16 : BV == 32 ? GDN_SCHEME32 : WALK_SINGLE;
}
template <int BV> __host__ __device__ constexpr bool output_walkers() { return walk_scheme<BV>() != WALK_SINGLE; }
template <int BV> __host__ __device__ constexpr int walker_warps() { return (BV / 16) * (1 + walk_scheme<BV>()); }
// Producer warps per CTA (v9 defaults): bv16 KSPLIT 5 (8 warps: state 0-1, output 2, producers 3-7), bv32 MIRROR 4
// (8 warps: state 0-1, output 2-3, producers 4-7), bv64 4 (v12.1; was 5), bv128 4; schemes under experiment:
// KSPLIT bv32 3 (4 does not fit shared memory), MIRROR bv16 5 (+ an idle warp), SINGLE bv16 6 (+ an idle warp),
// bv32 5.
template <int BV> __host__ __device__ constexpr int producers() {
#ifdef GDN_NP
    return GDN_NP;
#else
    return walk_scheme<BV>() == WALK_KSPLIT ? (BV == 16 ? 5 : 3)
           : walk_scheme<BV>() == WALK_MIRROR ? (BV == 16 ? 5 : 4)
                                              : (BV == 16 ? 6 : (BV == 32 ? 5 : 4));
#endif
}
// v5.1: bv16 without KSPLIT keeps its first walker alone on sub-partition 0 (warp 4 idles: warp w issues on
// sub-partition w % 4).
template <int BV> __host__ __device__ constexpr int idle_warps() {
#ifdef GDN_NP
    return 0;
#else
    return BV == 16 && walk_scheme<BV>() != WALK_KSPLIT ? 1 : 0;
#endif
}
template <int BV> __host__ __device__ constexpr int block_threads() {
    return 32 * (walker_warps<BV>() + producers<BV>() + idle_warps<BV>());
}
template <int NP> __host__ __device__ constexpr int ring_depth() { return 2 * NP + 1; }
// v14.4: whether a tile stages its first loads (the producers' first chunks before the walkers' states; each
// producer's second chunk after its first chunk's math): the tiles whose calls start a wave of CTAs at once, where
// those loads compete for DRAM. Not bv16 (KSPLIT), whose calls start few CTAs and whose walkers need the second chunk
// soon. START_BAR: the named barrier of the hand-off (bv16's Z exchanges use 1..NW).
template <int BV> __host__ __device__ constexpr bool staged_start() { return BV >= 32 && walk_scheme<BV>() != WALK_KSPLIT; }
constexpr int START_BAR = 15;
// Hand-off from the state walker(s) of a row group to its output walker, per ring slot: Vn (f32, 8 per lane in mma
// C-fragment order; KSPLIT: n-tile kh written by state walker kh) then (KSPLIT) bf16(Sᵀ) as the A fragments of the 8
// k-steps (16 B per lane and step; steps 4kh..4kh+3 written by state walker kh), exactly the operands Z used.
constexpr int VN_BYTES = 32 * 32;
constexpr int SH_BYTES = 8 * 32 * 16;
template <int BV> __host__ __device__ constexpr int handoff_bytes() {
    return walk_scheme<BV>() == WALK_KSPLIT ? VN_BYTES + SH_BYTES : walk_scheme<BV>() == WALK_MIRROR ? VN_BYTES : 0;
}
// (KSPLIT) Z-partial exchange of a k-split pair: [chunk parity][k half][lane] 8 f32 (double-buffered by chunk parity,
// so one named barrier per chunk suffices).
constexpr int ZX_BYTES = 2 * 2 * 32 * 32;  // 4096 per row group
template <int BV> __host__ __device__ constexpr int zx_bytes() { return walk_scheme<BV>() == WALK_KSPLIT ? ZX_BYTES : 0; }
// mbarrier arrays of R after the Z exchanges: FULL, EMPTY, (output walkers) VN, (KSPLIT, v10) SREADY.
template <int BV> __host__ __device__ constexpr int ring_barriers() {
    return walk_scheme<BV>() == WALK_KSPLIT ? 4 : output_walkers<BV>() ? 3 : 2;
}
// Dynamic shared memory: R slots, R·(BV/16) hand-offs, NP producer scratch, BV/16 output stagings, BV/16 Z exchanges,
// then the mbarrier arrays.
template <int BV, int NP> __host__ __device__ constexpr int smem_bytes() {
    return ring_depth<NP>() * (Slot<BV>::BYTES + (BV / 16) * handoff_bytes<BV>()) + NP * PS_BYTES + (BV / 16) * WS_BYTES +
           (BV / 16) * zx_bytes<BV>() + 8 * ring_barriers<BV>() * ring_depth<NP>();
}
#if GDN_OW && GDN_SCHEME16 == 2 && GDN_SCHEME32 == 1 && !defined(GDN_NP)
static_assert(smem_bytes<16, producers<16>()>() == 225696 && smem_bytes<32, producers<32>()>() == 159000 &&
                  smem_bytes<64, producers<64>()>() == 151248 && smem_bytes<128, producers<128>()>() == 172752 &&
                  block_threads<16>() == 256 && block_threads<32>() == 256 && block_threads<64>() == 256 &&
                  block_threads<128>() == 384,
              "v12.1 launch table (mirrored by the Rust runtime, src/registry.rs)");
#endif
// The launch table as data, for the device harness (cuModuleGetGlobal): {BV, threads, dynamic smem} per variant.
extern "C" __device__ const int gdn_prefill_launch[4][3] = {
    {16, block_threads<16>(), smem_bytes<16, producers<16>()>()},
    {32, block_threads<32>(), smem_bytes<32, producers<32>()>()},
    {64, block_threads<64>(), smem_bytes<64, producers<64>()>()},
    {128, block_threads<128>(), smem_bytes<128, producers<128>()>()}};

// ------------------------------------------------------------------ helpers (the shared ones are in sm90.cuh)
__device__ __forceinline__ void mma4(float* c, const u32* a, u32 b0, u32 b1) { mma(c, a[0], a[1], a[2], a[3], b0, b1); }
__device__ __forceinline__ float bf2f(__nv_bfloat16 x) { return __bfloat162float(x); }

// ------------------------------------------------------------------ timeline trace (experiments only)
// -DGDN_TRACE: lane 0 of warp 0 (walker 0) and of the first producer warp record SM clock64 values (and
// %globaltimer at entry/exit) into gdn_trace[CTA][event] for the first 256 CTAs; prefill_harness.py `trace`
// reads them back. Every point sits after an instruction that consumes the awaited value (warps issue in order).
// Events: 0 globaltimer entry, 1 clock entry, 2 after __syncthreads, 3 producer: cu_seqlens consumed, 4/6 its first
// and second chunk landed, 5/7 their preparation done (FULL), 8/10 walker: FULL of chunk 0/1 seen, 9/11 chunk 0/1
// walked, 12 last chunk walked, 13 final state stores issued, 14 clock at exit, 15 globaltimer at exit.
#ifdef GDN_TRACE
extern "C" __device__ long long gdn_trace[256][16];  // C linkage: cuModuleGetGlobal finds it by this name
__device__ __forceinline__ long long gtimer() {
    long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
// gdn_trace2: phases inside one chunk. Producer 0's first / second chunk: 0/4 landed, 1/5 gates stored, 2/6 A and P
// stored, 3/7 T stored; walker 0 at chunks 0, 1, 5: 8/10/12 Vn formed (update operand split), 9/11/13 O staged.
extern "C" __device__ long long gdn_trace2[256][16];
#define GDN_TR(cond, ev, val)                                                                            \
    do {                                                                                                 \
        if ((cond) && lane == 0 && blockIdx.x < 256) gdn_trace[blockIdx.x][ev] = (val);                    \
    } while (0)
// gdn_trace3: steady-state accumulators (cycles summed over all chunks of the CTA): 0 state walker 0's FULL waits,
// 1 its Z-exchange barrier waits, 2 its whole loop, 3 output walker 0's FULL + VN waits, 4 its whole loop, 5 producer
// 0's EMPTY waits, 6 its waits for landed copies, 7 its whole loop, 8 its chunk math, 9 chunks (count), 10 state
// walker 1's barrier waits; state walker 0's phases: 11 FULL wait start .. Z partial stored, 12 exchange done .. Vn
// stored (X, update issued), 13 the VN arrive.
extern "C" __device__ long long gdn_trace3[256][16];
#define GDN_CLK(v) const long long v = clock64()
#define GDN_ACC(acc, v) acc += clock64() - (v)
#define GDN_TR3(cond, ev, val)                                                                           \
    do {                                                                                                 \
        if ((cond) && lane == 0 && blockIdx.x < 256) gdn_trace3[blockIdx.x][ev] = (val);                   \
    } while (0)
#define GDN_TR2(cond, ev)                                                                                \
    do {                                                                                                 \
        if ((cond) && lane == 0 && blockIdx.x < 256) gdn_trace2[blockIdx.x][ev] = clock64();               \
    } while (0)
#else
#define GDN_NOTRACE \
    do {            \
    } while (0)
#define GDN_CLK(v) GDN_NOTRACE
#define GDN_ACC(acc, v) GDN_NOTRACE
#define GDN_TR3(cond, ev, val) GDN_NOTRACE
#define GDN_TR2(cond, ev) GDN_NOTRACE
#define GDN_TR(cond, ev, val) GDN_NOTRACE
#endif

// ------------------------------------------------------------------ producer: one chunk's loads
template <int BV>
__device__ __forceinline__ void load_chunk(const PrefillParams& p, unsigned char* slot, i64 t0, i64 eos, int hq, int h,
                                           int v0, int lane) {
    // v12.2: every lane copies the same 16-byte piece of rows r0, r0 + step, ...: one pointer per lane and tensor,
    // advanced by a constant, and shared-memory addresses that differ by immediates (v12.1 formed ((t0 + r) H + hq) D + 8c
    // afresh for every piece: ~240 instructions per chunk, a quarter of the producer's stream).
    const int nrows = eos - t0 < C ? (int)(eos - t0) : C;  // rows [0, nrows) exist
    const u32 ks = smem_addr(slot + Slot<BV>::K_OFF), qs = smem_addr(slot + Slot<BV>::Q_OFF);
    {
        const int r0 = lane >> 4, c = lane & 15;  // 256 pieces of 16 B per tile: piece c of rows r0, r0 + 2, ...
        const i64 row = (i64)p.num_q_heads * D;
        const i64 off = (t0 + r0) * row + (i64)hq * D + c * 8;
        const __nv_bfloat16 *kp = p.k + off, *qp = p.q + off;
        const u32 d = (u32)(r0 * LDK + c * 8) * 2;
#pragma unroll
        for (int it = 0; it < C / 2; ++it) {
            const bool ok = r0 + 2 * it < nrows;  // (a row past the end copies nothing from the tensor's base)
            cp_async16(ks + d + (u32)(2 * it * LDK * 2), ok ? kp : p.k, ok);
            cp_async16(qs + d + (u32)(2 * it * LDK * 2), ok ? qp : p.q, ok);
            kp += 2 * row;
            qp += 2 * row;
        }
    }
    {
        constexpr int PPR = BV / 8;      // 16-byte pieces per V row (2..16: divides 32)
        constexpr int RSTEP = 32 / PPR;  // rows per step
        const int r0 = lane / PPR, c = lane % PPR;
        const i64 row = (i64)p.num_v_heads * D;
        const __nv_bfloat16* vp = p.v + (t0 + r0) * row + (i64)h * D + v0 + c * 8;
        const u32 vs = smem_addr(slot + Slot<BV>::V_OFF) + (u32)(r0 * Slot<BV>::LDV + c * 8) * 2;
#pragma unroll
        for (int it = 0; it < C / RSTEP; ++it) {
            const bool ok = r0 + RSTEP * it < nrows;
            cp_async16(vs + (u32)(RSTEP * it * Slot<BV>::LDV * 2), ok ? vp : p.v, ok);
            vp += RSTEP * row;
        }
    }
    // Gate inputs: lane l < 16 copies the aligned bf16 pair holding a[t0+l, h], lane l >= 16 the pair holding
    // b[t0+l-16, h] (HV is even, so the pair lies in the same token row and never past the end). Staging them
    // through shared memory keeps the producer free of a register that waits on DRAM.
    {
        const int HV = p.num_v_heads;
        const i64 tt = t0 + (lane & 15);
        const bool ok = tt < eos;
        const i64 idx = ok ? ((tt * HV + h) & ~1LL) : 0;
        cp_async4(smem_addr(slot + Slot<BV>::GATE_OFF) + 4 * lane, (lane < 16 ? p.a : p.b) + idx, ok);
    }
}

// Zero rows [from, 16) of a slot's K, Q and V tiles (the gate words need not be: compute_chunk masks them).
template <int BV>
__device__ __forceinline__ void zero_rows(unsigned char* slot, int from, int lane) {
    const uint4 z = make_uint4(0u, 0u, 0u, 0u);
    for (int idx = lane; idx < C * (D / 8); idx += 32) {
        const int r = idx >> 4, c = idx & 15;
        if (r >= from) {
            *reinterpret_cast<uint4*>(slot + Slot<BV>::K_OFF + (r * LDK + c * 8) * 2) = z;
            *reinterpret_cast<uint4*>(slot + Slot<BV>::Q_OFF + (r * LDK + c * 8) * 2) = z;
        }
    }
    constexpr int PPR = BV / 8;
    for (int idx = lane; idx < C * PPR; idx += 32) {
        const int r = idx / PPR, c = idx % PPR;
        if (r >= from) *reinterpret_cast<uint4*>(slot + Slot<BV>::V_OFF + (r * Slot<BV>::LDV + c * 8) * 2) = z;
    }
}

// ------------------------------------------------------------------ producer: one chunk's precompute
// v7 ("prep diet"; the first chunk's preparation is on the critical path of every short call, and a -DGDN_TRACE
// timeline put it at ~1.3-1.6 us of a 1x16 call's ~3.8 us in-kernel span on the H200: gates 450 ns, K Kᵀ/Q Kᵀ + A
// + P 400 ns, T 330 ns):
//  * the K Kᵀ / Q Kᵀ tensor-core chain is issued first and the gate math sits after it in the same basic block, so
//    ptxas interleaves the two (v6: gates, then a __syncwarp, then the mma);
//  * the gates are branch-free and evaluated by every lane (v6: lanes 0-15 took the log-decay path and lanes 16-31
//    the sigmoid path one after the other, with log1pf's and the IEEE division's slow-path branches), on the
//    .approx.ftz MUFU instructions: a log-decay's absolute error is ≤ e^{A_log}·2^-21 per token, far below the bf16
//    operands' 2^-9; exponentials under 2^-126 flush to 0 (decays may underflow to 0 by design);
//  * T's forward substitution carries r = e_c − (running sums) so that no step needs a lane-dependent select
//    (v6 spent ~60 instructions per chunk packing `j < c` / `j == c` predicates, then a select per step).
// (ex2_ftz, lg2_ftz, rcp_ftz, exp_ftz: sm90.cuh)

// GDN_EARLY_SEQ (default 1; v11): cu_seqlens and the gate parameters are loaded before the mbarrier set-up.
#ifndef GDN_EARLY_SEQ
#define GDN_EARLY_SEQ 1
#endif

// v13 (session 26): the longest-first kernels (LF). The block scheduler starts CTAs in blockIdx order, one per SM at a
// time for bv64 / bv128; in batch order a long sequence that comes late starts its chain only after the short ones
// before it have run, and the call's time becomes (its start) + (its chain) instead of max(chain, work) (prefill64.cu's
// chunk64 walk measured the same effect: 12-25 us on the contest-like mix's skewed calls, session 22). CTA group r runs
// the sequence of rank r: the sequences longer than it, or as long and before it in the batch — a strict total order,
// so the ranks are a permutation and every (sequence, head, tile) still has exactly one CTA. Warp 0 ranks (lane l holds
// sequences l, l + 32, l + 64, l + 96; 32-bit keys (length clamped to 2^25 − 1, 127 − index): one round of cu_seqlens
// loads, then N/4 broadcast loads of the keys from shared memory) and leaves (sequence, bos, eos) in shared memory for
// the CTA, read after the set-up barrier.
// With N < 2 or N > LF_MAX_N the order is the batch's (correct for any call; the policy sends only 2..LF_MAX_N).
// Experiments only (the production build passes none): GDN_LF_ALL=1 builds the plain bv64 / bv128 names with the LF
// body (the harness times them beside the production build); GDN_LF_ABLATE=1 skips the ranking (warp 0 broadcasts the
// batch order's offsets), =2 ranks and then keeps the batch order anyway: what the ranking's steps cost, apart.
#ifndef GDN_LF_ALL
#define GDN_LF_ALL 0
#endif
#ifndef GDN_LF_ABLATE
#define GDN_LF_ABLATE 0
#endif
constexpr int LF_MAX_N = 128;
// v14 (session 28), the split kernels gdn_prefill_*_bv128_sp: longest first, and the sequences whose chain would outlast
// the call's work (v14.1: longer than (T + 64·N)·HV / SMs tokens, at least SPLIT_MIN_TOKENS) run on two CTAs of 64 value rows each.
// Why: a bv128 CTA runs two 16-row walkers per SM sub-partition (~1.14 us per 16-token chunk on the H200), a bv64 CTA
// one (~0.68): the narrow tile shortens the longest chain and the wide one does the rest of the work with half the
// producers. Group g of the grid ((N + kmax)·HV CTAs, kmax = min(N, 16): SPLIT_MAX_SEQS in registry.rs): g < 2k runs
// half g & 1 of the sequence of rank g / 2, then the sequence of rank g − k; groups past the last sequence exit. A
// half CTA keeps the bv128 launch (its registers and shared memory) and runs walkers 0..3 on rows 64·half + 16w; walkers
// 4..7 exit and EMPTY counts only the walkers that run.
constexpr i64 SPLIT_MIN_TOKENS = 128;
// v14.1 (session 29), the threshold: tau = max(SPLIT_MIN_TOKENS, (T + GDN_SPLIT_SEQ_TOKENS·N)·HV / SMs ·
// GDN_SPLIT_TAU_X16 / 16) (cost.rs split_threshold mirrors it). GDN_SPLIT_SEQ_TOKENS counts each sequence's fixed cost
// (its CTAs' state in and out, its partial last chunk) as that many tokens of work, so that fewer medium sequences are
// split (their half chains only cost SM time); GDN_SPLIT_TAU_X16 scales the share (experiments only). H200, the kernel
// forced onto every prefill call, 64 against v14's 0: "30 mixed" 57.5 -> 52.1 us, prefill_05 73.9 -> 69.5, prefill_37
// 63.3 -> 61.4; a share scaled by 1.25 or 1.5 lost on the skewed calls (results/prefill_s29.md).
#ifndef GDN_SPLIT_SEQ_TOKENS
#define GDN_SPLIT_SEQ_TOKENS 64
#endif
#ifndef GDN_SPLIT_TAU_X16
#define GDN_SPLIT_TAU_X16 16
#endif
// Whether kernel (NW walkers' tile, LF) builds the longest-first body (GDN_LF_ALL: every bv64 / bv128 name does).
__host__ __device__ constexpr bool lf_body(int nw, bool lf) { return lf || (GDN_LF_ALL && nw >= 4); }
template <bool SPLIT>
__device__ __forceinline__ void lf_rank(const PrefillParams& p, i64 r, int lane, u32* keys, i64* out, i64 kmax) {
    const i64 n = p.num_seqs;
    i64 seq = r, bos = 0, eos = 0, half = -1;
    if (GDN_LF_ABLATE == 1 || n < 2 || n > LF_MAX_N) {
        if (SPLIT && r >= n) {
            seq = -1;  // a spare group (no sequence is split in batch order)
        } else {
            bos = p.cu_seqlens[r];
            eos = p.cu_seqlens[r + 1];
        }
    } else {
        i64 b[4], e[4];
        u32 key[4];
        int rank[4];
#pragma unroll
        for (int q = 0; q < 4; ++q) {
            const int i = lane + 32 * q;
            const bool ok = i < n;
            b[q] = ok ? p.cu_seqlens[i] : 0;
            e[q] = ok ? p.cu_seqlens[i + 1] : 0;
        }
        const int nn = (int)n;
        int split = 0;  // (SPLIT) how many of the longest sequences run on two CTAs
        if constexpr (SPLIT) {
            // v14: a sequence is split when its chain alone would outlast the call's even share of work: longer than
            // (T + GDN_SPLIT_SEQ_TOKENS·N)·HV / SMs tokens (v14.1; at least SPLIT_MIN_TOKENS); at most kmax (the spare groups)
            u32 nsm;
            asm("mov.u32 %0, %%nsmid;" : "=r"(nsm));
            // T = cu_seqlens[n] = the largest end the lanes loaded (cu_seqlens is non-decreasing; v14.1: no load of its
            // own). A warp max (device_plan.cuh): a select of e[(n - 1) / 32] by a runtime index put e[] in local memory
            // (32 bytes of stack).
            const i64 t_all = warp_bound<true>(max(max(e[0], e[1]), max(e[2], e[3])));
            const i64 share = (t_all + (i64)GDN_SPLIT_SEQ_TOKENS * n) * (i64)p.num_v_heads / (i64)max(nsm, 1u);
            const i64 tau = max((i64)SPLIT_MIN_TOKENS, share * GDN_SPLIT_TAU_X16 / 16);
#pragma unroll
            for (int q = 0; q < 4; ++q) split += __popc(__ballot_sync(0xffffffffu, lane + 32 * q < nn && e[q] - b[q] > tau));
            split = (int)min((i64)split, kmax);
            if (r < 2 * split) {
                half = r & 1;
                r >>= 1;
            } else {
                r -= split;
            }
        }
#pragma unroll
        for (int q = 0; q < 4; ++q) {
            // (a slot past the last sequence gets key 0, which is greater than no key: it never counts)
            const i64 len = e[q] > b[q] ? e[q] - b[q] : 0;
            const u32 k = ((u32)min(len, (i64)((1 << 25) - 1)) << 7) | (u32)(127 - (lane + 32 * q));
            key[q] = lane + 32 * q < nn ? k : 0u;
            rank[q] = 0;
        }
        // Counting from shared memory (v13.1): the keys go to `keys`, and every lane compares its four against all of
        // them, four keys per 16-byte broadcast load. A first form took each key from a shuffle, N dependent-latency
        // steps: ~2.5 us per wave of CTAs at N = 64 (H200 harness, 64x1024 bv128: 289.1 us plain, 299.5 ranked,
        // 297.9 ranked but run in batch order, 289.3 with the offsets broadcast and no ranking).
#ifdef GDN_DEVICE_PLAN
        // v14.3 (session 31), the device plan's build: when every length is equal the keys differ only by the index, so
        // the rank is the index and the counting is skipped (the host plan sends equal lengths to the plain kernels)
        bool equal;
        {
            i64 lo = (i64)0x7fffffffffffffffLL, hi = 0;
#pragma unroll
            for (int q = 0; q < 4; ++q) {
                if (lane + 32 * q < nn) {
                    lo = min(lo, e[q] - b[q]);
                    hi = max(hi, e[q] - b[q]);
                }
            }
            equal = warp_bound<false>(lo) == warp_bound<true>(hi);
        }
        if (equal) {
#pragma unroll
            for (int q = 0; q < 4; ++q) rank[q] = lane + 32 * q;
        } else
#endif
        {
#pragma unroll
            for (int q = 0; q < 4; ++q) keys[lane + 32 * q] = key[q];
            __syncwarp();
            const uint4* k4 = reinterpret_cast<const uint4*>(keys);
#pragma unroll 4
            for (int j = 0; j < (nn + 3) >> 2; ++j) {
                const uint4 kk = k4[j];
#pragma unroll
                for (int q = 0; q < 4; ++q)
                    rank[q] += (int)(kk.x > key[q]) + (int)(kk.y > key[q]) + (int)(kk.z > key[q]) + (int)(kk.w > key[q]);
            }
        }
        // the lane and slot q holding rank r (exactly one: the ranks of the n sequences are a permutation of 0..n-1)
        int src = 0, qh = 0;
#pragma unroll
        for (int q = 3; q >= 0; --q) {
            const u32 hit = __ballot_sync(0xffffffffu, lane + 32 * q < nn && rank[q] == (int)r);
            if (hit) {
                src = __ffs((int)hit) - 1;
                qh = q;
            }
        }
#if GDN_LF_ABLATE == 2
        src = (int)(r & 31) ^ (rank[0] + rank[1] + rank[2] + rank[3] == -1);  // (never true: keeps the ranking live)
        qh = (int)(r >> 5);
#endif
        i64 sb = b[0], se = e[0];
#pragma unroll
        for (int q = 1; q < 4; ++q) {
            if (q == qh) {
                sb = b[q];
                se = e[q];
            }
        }
        seq = 32 * qh + src;
        bos = __shfl_sync(0xffffffffu, sb, src);
        eos = __shfl_sync(0xffffffffu, se, src);
        if (SPLIT && r >= n) seq = -1;  // a spare group: fewer sequences were split than the grid has room for
    }
    if (lane == 0) {
        out[0] = seq;
        out[1] = bos;
        out[2] = eos;
        if (SPLIT) out[3] = half;
    }
}

// K Kᵀ and Q Kᵀ (16 x 16, k-dim 128) on tensor cores; [k-step parity][n-tile]: dependent chains of 4, not 8.
template <int BV>
__device__ __forceinline__ void prep_products(const unsigned char* slot, int lane, float (&kk)[2][2][4], float (&qk)[2][2][4]) {
    const u32 ks = smem_addr(slot + Slot<BV>::K_OFF), qs = smem_addr(slot + Slot<BV>::Q_OFF);
    const u32 lo = (u32)((lane & 15) * LDK + 8 * (lane >> 4)) * 2;                         // A order
    const u32 lob = (u32)(((lane & 7) + 8 * (lane >> 4)) * LDK + 8 * ((lane >> 3) & 1)) * 2;  // B order (v12.3)
#pragma unroll
    for (int s = 0; s < 8; ++s) {
        u32 k0, k1, k2, k3, q0, q1, q2, q3, b0, b1, b2, b3;
        ldsm_x4(ks + lo + s * 32, k0, k1, k2, k3);
        ldsm_x4(qs + lo + s * 32, q0, q1, q2, q3);
        ldsm_x4(ks + lob + s * 32, b0, b1, b2, b3);  // K again as B pairs: one ldmatrix instead of ~4 register moves
        mma(kk[s & 1][0], k0, k1, k2, k3, b0, b1);
        mma(kk[s & 1][1], k0, k1, k2, k3, b2, b3);
        mma(qk[s & 1][0], q0, q1, q2, q3, b0, b1);
        mma(qk[s & 1][1], q0, q1, q2, q3, b2, b3);
    }
}

// The gates: lane l < 16 holds a[token l], lane l >= 16 holds b[token l-16]; every lane evaluates both formulas on its
// value and keeps the one it owns. log g = −e^{A_log}·softplus(a + dt_bias) (nea = −e^{A_log}), softplus(x) =
// max(x, 0) + ln(1 + e^{−|x|}); β = 1 / (1 + e^{−b}). γ (the inclusive prefix of the log-decays) and β stay in
// registers, returned as lane l's γ and β of token l & 15 (v12: A and P take theirs by shuffles, no shared-memory
// round trip and __syncwarp); the walkers' decay scalars go to the slot.
struct ChunkGates {
    float gam, be;  // γ and β of token lane & 15
};
template <int BV>
__device__ __forceinline__ ChunkGates prep_gates(const PrefillParams& p, unsigned char* slot, int h, int nvalid,
                                                 float dtb, float nea, int lane) {
    const bool valid = (lane & 15) < nvalid;
    const u32 gpair = reinterpret_cast<const u32*>(slot + Slot<BV>::GATE_OFF)[lane];
    const float graw = __uint_as_float((h & 1) ? (gpair & 0xffff0000u) : (gpair << 16));  // bf16 -> f32
    const float x = graw + dtb;
    const float sp = fmaxf(x, 0.f) + 0.6931471805599453f * lg2_ftz(1.f + ex2_ftz(-1.4426950408889634f * fabsf(x)));
    const float sg = rcp_ftz(1.f + ex2_ftz(-1.4426950408889634f * graw));
    float lg = (lane < 16 && valid) ? nea * sp : 0.f;
    float be = (lane >= 16 && valid) ? sg : 0.f;
    float gam = lg;
#pragma unroll
    for (int off = 1; off < 16; off <<= 1) {
        float y = __shfl_up_sync(0xffffffffu, gam, off, 16);
        if ((lane & 15) >= off) gam += y;
    }
    const float gC = __shfl_sync(0xffffffffu, gam, 15);
    be = __shfl_sync(0xffffffffu, be, (lane & 15) + 16);
    if (lane < 16) {
        reinterpret_cast<float*>(slot + Slot<BV>::EGQ_OFF)[lane] = p.scale * exp_ftz(gam);
        reinterpret_cast<float*>(slot + Slot<BV>::EC_OFF)[lane] = exp_ftz(gC - gam);
        if (lane == 0) reinterpret_cast<float*>(slot + Slot<BV>::EGC_OFF)[0] = exp_ftz(gC);
    }
    return ChunkGates{__shfl_sync(0xffffffffu, gam, lane & 15), be};
}

// Aᵀ (f32, to scratch, column-major: At[j][i] = A_ij) and P = scale·QKᵀ ⊙ decay ⊙ [i>=j] (hi/lo bf16, to the slot);
// one exponential per element serves both.
template <int BV>
__device__ __forceinline__ void prep_ap(const PrefillParams& p, unsigned char* slot, unsigned char* scr, int lane,
                                        const float (&kk)[2][2][4], const float (&qk)[2][2][4], const ChunkGates& cg) {
    const int g = lane >> 2, t = lane & 3;
    const float gr[2] = {__shfl_sync(0xffffffffu, cg.gam, g), __shfl_sync(0xffffffffu, cg.gam, g + 8)};
    const float br[2] = {__shfl_sync(0xffffffffu, cg.be, g), __shfl_sync(0xffffffffu, cg.be, g + 8)};
    const float gc[4] = {__shfl_sync(0xffffffffu, cg.gam, 2 * t), __shfl_sync(0xffffffffu, cg.gam, 2 * t + 1),
                         __shfl_sync(0xffffffffu, cg.gam, 2 * t + 8), __shfl_sync(0xffffffffu, cg.gam, 2 * t + 9)};
    float* Af = reinterpret_cast<float*>(scr + PS_A_OFF);
    __nv_bfloat16* ph = reinterpret_cast<__nv_bfloat16*>(slot + Slot<BV>::PH_OFF);
    __nv_bfloat16* pl = reinterpret_cast<__nv_bfloat16*>(slot + Slot<BV>::PL_OFF);
#pragma unroll
    for (int nt = 0; nt < 2; ++nt)
#pragma unroll
        for (int hr = 0; hr < 2; ++hr) {
            const int i = g + 8 * hr;
            const float gi = gr[hr], bi = br[hr];
            float av[2], pv[2];
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const int j = 8 * nt + 2 * t + e;
                const float dec = exp_ftz(fminf(gi - gc[2 * nt + e], 0.f));
                const int r = 2 * hr + e;
                av[e] = i > j ? bi * (kk[0][nt][r] + kk[1][nt][r]) * dec : 0.f;
                pv[e] = i >= j ? p.scale * (qk[0][nt][r] + qk[1][nt][r]) * dec : 0.f;
            }
            const int j0 = 8 * nt + 2 * t;
            Af[j0 * 16 + i] = av[0];
            Af[(j0 + 1) * 16 + i] = av[1];
            u32 hi, lo;
            split_bf16(pv[0], pv[1], hi, lo);
            *reinterpret_cast<u32*>(ph + i * LDS16 + j0) = hi;
            *reinterpret_cast<u32*>(pl + i * LDS16 + j0) = lo;
        }
}

// T = (I + A)⁻¹ by forward substitution in f32: lane owns column c = lane & 15 and solves (I + A) x = e_c.
// Right-looking: r starts as e_c; once x_j = r_j is final it is folded into every later row at once
// (r_i −= A_ij x_j), so the dependent chain is one FMA per row. Rows above c stay exactly 0 (0 − A·0).
// Then Tb = T diag(β) (for U, lanes 0..15) and Tg = T diag(β e^γ) (for X = Sᵀ Kᵀ Tgᵀ, lanes 16..31), hi/lo bf16,
// column c stored as row c of the transposed tile: two 16-byte stores per array and lane.
template <int BV>
__device__ __forceinline__ void prep_t(unsigned char* slot, const unsigned char* scr, int lane, const ChunkGates& cg) {
    const float* Af = reinterpret_cast<const float*>(scr + PS_A_OFF);
    const int c = lane & 15;
    const float sc = lane < 16 ? cg.be : cg.be * exp_ftz(cg.gam);  // v12: (I + A) x = sc·e_c, x comes out scaled
    float col[16];
#pragma unroll
    for (int i = 0; i < 16; ++i) col[i] = i == c ? sc : 0.f;
#pragma unroll
    for (int j = 0; j < 15; ++j) {
        const float4* arow = reinterpret_cast<const float4*>(Af + j * 16);  // A_ij, i = 0..15 (0 for i <= j)
#pragma unroll
        for (int i4 = ((j + 1) / 4) * 4; i4 < 16; i4 += 4) {
            const float4 a4 = arow[i4 >> 2];
            if (i4 + 0 > j) col[i4 + 0] = fmaf(-a4.x, col[j], col[i4 + 0]);
            if (i4 + 1 > j) col[i4 + 1] = fmaf(-a4.y, col[j], col[i4 + 1]);
            if (i4 + 2 > j) col[i4 + 2] = fmaf(-a4.z, col[j], col[i4 + 2]);
            if (i4 + 3 > j) col[i4 + 3] = fmaf(-a4.w, col[j], col[i4 + 3]);
        }
    }
    u32 hi[8], lo[8];
#pragma unroll
    for (int m = 0; m < 8; ++m) split_bf16(col[2 * m], col[2 * m + 1], hi[m], lo[m]);
    unsigned char* th = slot + (lane < 16 ? Slot<BV>::TBH_OFF : Slot<BV>::TGH_OFF) + c * (LDS16 * 2);
    unsigned char* tl = slot + (lane < 16 ? Slot<BV>::TBL_OFF : Slot<BV>::TGL_OFF) + c * (LDS16 * 2);
    reinterpret_cast<uint4*>(th)[0] = make_uint4(hi[0], hi[1], hi[2], hi[3]);
    reinterpret_cast<uint4*>(th)[1] = make_uint4(hi[4], hi[5], hi[6], hi[7]);
    reinterpret_cast<uint4*>(tl)[0] = make_uint4(lo[0], lo[1], lo[2], lo[3]);
    reinterpret_cast<uint4*>(tl)[1] = make_uint4(lo[4], lo[5], lo[6], lo[7]);
}

// One chunk's preparation (v7 "prep diet": the first chunk's is on the critical path of every short call). The
// tensor-core products are issued first and the gate math sits after them in the same basic block, so ptxas
// interleaves the two.
template <int BV>
__device__ __forceinline__ void compute_chunk(const PrefillParams& p, unsigned char* slot, unsigned char* scr,
                                              int h, int nvalid, float dtb, float nea, int lane, int tr = -1) {
    float kk[2][2][4] = {}, qk[2][2][4] = {};
    prep_products<BV>(slot, lane, kk, qk);
    const ChunkGates cg = prep_gates<BV>(p, slot, h, nvalid, dtb, nea, lane);
    GDN_TR2(tr >= 0, tr + 1);
    prep_ap<BV>(p, slot, scr, lane, kk, qk, cg);
    GDN_TR2(tr >= 0, tr + 2);
    __syncwarp();
    prep_t<BV>(slot, scr, lane, cg);
    GDN_TR2(tr >= 0, tr + 3);
    __syncwarp();
}

// ------------------------------------------------------------------ walkers
// Shared pieces. Fragment conventions (mma.sync m16n8k16): an accumulator [nt][r] of a 16 x 16 product holds
// (row g, cols 8nt + 2t, +1) in r = 0, 1 and (row g + 8, same cols) in r = 2, 3.
struct WalkerLanes {
    u32 lo_row, lo_kb, lo_16, lo_vt, lo_tt;
};
template <int BV>
__device__ __forceinline__ WalkerLanes walker_lanes(int lane, int wv) {
    WalkerLanes l;
    // ldmatrix x4 lane addresses: lanes 8i..8i+7 address the rows of matrix i. "A order" (lo_row, lo_vt): matrices
    // (rows 0-7, cols 0-7), (rows 8-15, cols 0-7), (rows 0-7, cols 8-15), (rows 8-15, cols 8-15) = a0..a3. v12.3: the
    // tiles read only as B operands (lo_kb, lo_16, lo_tt) load in "B order", so that the two registers of n-tile nt
    // are r[2nt], r[2nt + 1], a register pair as the mma wants it (v12.1 took r[nt], r[nt + 2]: ptxas copied them
    // into pairs, ~2 moves per mma).
    l.lo_row = (u32)((lane & 15) * LDK + 8 * (lane >> 4)) * 2;                        // K (update: .trans, A order)
    l.lo_kb = (u32)(((lane & 7) + 8 * (lane >> 4)) * LDK + 8 * ((lane >> 3) & 1)) * 2;  // K/Q as B (n = rows)
    l.lo_16 = (u32)(((lane & 7) + 8 * (lane >> 4)) * LDS16 + 8 * ((lane >> 3) & 1)) * 2;  // P as B (n = rows)
    l.lo_vt = (u32)(((lane & 7) + 8 * (lane >> 4)) * Slot<BV>::LDV + 16 * wv + 8 * ((lane >> 3) & 1)) * 2;  // Vᵀ
    l.lo_tt = (u32)((lane & 15) * LDS16 + 8 * (lane >> 4)) * 2;  // transposed 16x16 as B (n = columns)
    return l;
}

// Vn = U − X with U = Vᵀ Tbᵀ (hi + lo) and X = Sᵀ Wᵀ = Z Tgᵀ (Z and Tg as hi + lo: 3 products), [16 v][16 tokens].
// (v5: W = Tg K is never formed by the producers nor rounded to bf16.) In two parts so that a walker can issue the
// Z-independent half (the tile loads and U's 4 mma) before Z is known (v9: off the state chain).
struct VnOperands {
    float U[2][4];
    u32 gh[4], gl[4];
};
template <int BV>
__device__ __forceinline__ void vn_prepare(const unsigned char* slot, const WalkerLanes& l, VnOperands& o) {
    using SL = Slot<BV>;
    u32 va[4], th[4], tl[4];
    ldsm_x4_t(smem_addr(slot + SL::V_OFF) + l.lo_vt, va[0], va[1], va[2], va[3]);
    ldsm_x4_t(smem_addr(slot + SL::TBH_OFF) + l.lo_tt, th[0], th[1], th[2], th[3]);
    ldsm_x4_t(smem_addr(slot + SL::TBL_OFF) + l.lo_tt, tl[0], tl[1], tl[2], tl[3]);
    ldsm_x4_t(smem_addr(slot + SL::TGH_OFF) + l.lo_tt, o.gh[0], o.gh[1], o.gh[2], o.gh[3]);
    ldsm_x4_t(smem_addr(slot + SL::TGL_OFF) + l.lo_tt, o.gl[0], o.gl[1], o.gl[2], o.gl[3]);
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
        for (int r = 0; r < 4; ++r) o.U[nt][r] = 0.f;
        mma4(o.U[nt], va, th[2 * nt], th[2 * nt + 1]);
        mma4(o.U[nt], va, tl[2 * nt], tl[2 * nt + 1]);
    }
}
// X's three products go to three accumulators (one mma deep each: the X step is on the state chain), summed as
// zh·gh + (zl·gh + zh·gl).
__device__ __forceinline__ void vn_finish(const VnOperands& o, const float (&Z)[2][4], float (&Vn)[2][4]) {
    u32 zh[4], zl[4];
    // Z accumulator [nt][r] -> A fragment (k = tokens): a0 (g, 2t..) a1 (g+8, 2t..) a2 (g, 2t+8..) a3 (g+8, 2t+8..)
    split_bf16(Z[0][0], Z[0][1], zh[0], zl[0]);
    split_bf16(Z[0][2], Z[0][3], zh[1], zl[1]);
    split_bf16(Z[1][0], Z[1][1], zh[2], zl[2]);
    split_bf16(Z[1][2], Z[1][3], zh[3], zl[3]);
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
        float xa[4] = {}, xb[4] = {}, xc[4] = {};
        mma4(xa, zh, o.gh[2 * nt], o.gh[2 * nt + 1]);
        mma4(xb, zl, o.gh[2 * nt], o.gh[2 * nt + 1]);
        mma4(xc, zh, o.gl[2 * nt], o.gl[2 * nt + 1]);
#pragma unroll
        for (int r = 0; r < 4; ++r) Vn[nt][r] = o.U[nt][r] - (xa[r] + (xb[r] + xc[r]));
    }
}

// O = scale e^γ ⊙ Y + Vn Pᵀ, Vn and P as hi + lo (3 products); Y given as two k-parity partial sums.
template <int BV>
__device__ __forceinline__ void form_output(const unsigned char* slot, const WalkerLanes& l, int t,
                                            const float (&Y)[2][2][4], const float (&Vn)[2][4], float (&O)[2][4]) {
    using SL = Slot<BV>;
    const float* egq = reinterpret_cast<const float*>(slot + SL::EGQ_OFF);
    const float2 q0 = *reinterpret_cast<const float2*>(egq + 2 * t);
    const float2 q1 = *reinterpret_cast<const float2*>(egq + 8 + 2 * t);
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
        O[0][2 * hr] = q0.x * (Y[0][0][2 * hr] + Y[1][0][2 * hr]);
        O[0][2 * hr + 1] = q0.y * (Y[0][0][2 * hr + 1] + Y[1][0][2 * hr + 1]);
        O[1][2 * hr] = q1.x * (Y[0][1][2 * hr] + Y[1][1][2 * hr]);
        O[1][2 * hr + 1] = q1.y * (Y[0][1][2 * hr + 1] + Y[1][1][2 * hr + 1]);
    }
    u32 vh[4], vl[4], ph[4], pl[4];
    split_bf16(Vn[0][0], Vn[0][1], vh[0], vl[0]);
    split_bf16(Vn[0][2], Vn[0][3], vh[1], vl[1]);
    split_bf16(Vn[1][0], Vn[1][1], vh[2], vl[2]);
    split_bf16(Vn[1][2], Vn[1][3], vh[3], vl[3]);
    ldsm_x4(smem_addr(slot + SL::PH_OFF) + l.lo_16, ph[0], ph[1], ph[2], ph[3]);
    ldsm_x4(smem_addr(slot + SL::PL_OFF) + l.lo_16, pl[0], pl[1], pl[2], pl[3]);
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
        mma4(O[nt], vh, ph[2 * nt], ph[2 * nt + 1]);
        mma4(O[nt], vl, ph[2 * nt], ph[2 * nt + 1]);
        mma4(O[nt], vh, pl[2 * nt], pl[2 * nt + 1]);
    }
}

// Stage Oᵀ as [token][v] bf16 in the warp's staging tile, then one 16-byte store per lane (tokens < eos only).
__device__ __forceinline__ void store_output(const PrefillParams& p, unsigned char* ostage, const float (&O)[2][4],
                                             i64 tok0, i64 eos, int h, int vw, int lane) {
    const int g = lane >> 2, t = lane & 3;
    __nv_bfloat16* os = reinterpret_cast<__nv_bfloat16*>(ostage);
#pragma unroll
    for (int nt = 0; nt < 2; ++nt)
#pragma unroll
        for (int r = 0; r < 4; ++r) os[(8 * nt + 2 * t + (r & 1)) * LDS16 + g + 8 * (r >> 1)] = __float2bfloat16_rn(O[nt][r]);
    __syncwarp();
    const int i = lane >> 1, half = lane & 1;
    const i64 tok = tok0 + i;
    if (tok < eos) {
        const uint4 val = *reinterpret_cast<const uint4*>(os + i * LDS16 + 8 * half);
        *reinterpret_cast<uint4*>(p.out + (tok * p.num_v_heads + h) * (i64)D + vw + 8 * half) = val;
    }
    __syncwarp();
}

// The state update's chunk scalars: e^{γ_C − γ_j} of this lane's token columns (2t, 2t+1, 2t+8, 2t+9) and e^{γ_C}.
struct UpdScale {
    float2 e0, e1;
    float egc;
};
template <int BV>
__device__ __forceinline__ UpdScale load_upd_scale(const unsigned char* slot, int t) {
    using SL = Slot<BV>;
    const float* ec = reinterpret_cast<const float*>(slot + SL::EC_OFF);
    return UpdScale{*reinterpret_cast<const float2*>(ec + 2 * t), *reinterpret_cast<const float2*>(ec + 8 + 2 * t),
                    reinterpret_cast<const float*>(slot + SL::EGC_OFF)[0]};
}
// The update operand Vn·e^{γC−γ} as the A fragment of one bf16 (v5 default; its 2^-9 relative rounding goes straight
// into S and, with unnormalised k, is the dominant new_state error: results/prefill_kernels.md, "Raw q/k new_state
// failures"); GDN_UPD_HILO=1 also gives the lo half (+16 mma per 16 rows).
__device__ __forceinline__ void update_operand(const UpdScale& e, const float (&Vn)[2][4], u32 (&u)[4], u32 (&l)[4]) {
    split_bf16(Vn[0][0] * e.e0.x, Vn[0][1] * e.e0.y, u[0], l[0]);
    split_bf16(Vn[0][2] * e.e0.x, Vn[0][3] * e.e0.y, u[1], l[1]);
    split_bf16(Vn[1][0] * e.e1.x, Vn[1][1] * e.e1.y, u[2], l[2]);
    split_bf16(Vn[1][2] * e.e1.x, Vn[1][3] * e.e1.y, u[3], l[3]);
}

// The update's B operands: K[16 tokens][16 k] pairs as ldmatrix.trans fragments, NT / 2 of them from ks (already
// offset to the first k column).
template <int NT>
__device__ __forceinline__ void load_update_k(u32 ks, u32 lo_row, u32 (&kf)[NT / 2][4]) {
#pragma unroll
    for (int pp = 0; pp < NT / 2; ++pp) ldsm_x4_t(ks + lo_row + pp * 32, kf[pp]);
}
// S ← e^{γ_C} S + (Vn ⊙ e^{γ_C − γ}) K over NT k-tiles of 8 (S already scaled by e^{γ_C}: see scale_state).
template <int NT>
__device__ __forceinline__ void scale_state(float (&S)[NT][4], float egc) {
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int r = 0; r < 4; ++r) S[nt][r] *= egc;
}
template <int NT>
__device__ __forceinline__ void state_update(float (&S)[NT][4], const u32 (&kf)[NT / 2][4], const u32 (&u)[4],
                                             const u32 (&l)[4]) {
#pragma unroll
    for (int pp = 0; pp < NT / 2; ++pp) {
#if GDN_UPD_HILO
        mma(S[2 * pp], l[0], l[1], l[2], l[3], kf[pp][0], kf[pp][1]);
        mma(S[2 * pp + 1], l[0], l[1], l[2], l[3], kf[pp][2], kf[pp][3]);
#endif
        mma(S[2 * pp], u[0], u[1], u[2], u[3], kf[pp][0], kf[pp][1]);
        mma(S[2 * pp + 1], u[0], u[1], u[2], u[3], kf[pp][2], kf[pp][3]);
    }
}

// Load / store NT k-tiles of 8 of Sᵀ rows vw + g (+8), k columns kb + 8nt + 2t (+1); zeros when there is no state.
template <int NT, bool BF16STATE>
__device__ __forceinline__ void load_state(const PrefillParams& p, float (&S)[NT][4], i64 sbase, int kb, int lane,
                                           bool have) {
    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
        if (have) {
            const float2 x0 = StateIO<BF16STATE>::load(p.state, sbase + (i64)g * D + kb + 8 * nt + 2 * t);
            const float2 x1 = StateIO<BF16STATE>::load(p.state, sbase + (i64)(g + 8) * D + kb + 8 * nt + 2 * t);
            S[nt][0] = x0.x; S[nt][1] = x0.y; S[nt][2] = x1.x; S[nt][3] = x1.y;
        } else {
            S[nt][0] = S[nt][1] = S[nt][2] = S[nt][3] = 0.f;
        }
    }
}
template <int NT, bool BF16STATE>
__device__ __forceinline__ void store_state(const PrefillParams& p, const float (&S)[NT][4], i64 sbase, int kb, int lane) {
    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
        StateIO<BF16STATE>::store(p.new_state, sbase + (i64)g * D + kb + 8 * nt + 2 * t, S[nt][0], S[nt][1]);
        StateIO<BF16STATE>::store(p.new_state, sbase + (i64)(g + 8) * D + kb + 8 * nt + 2 * t, S[nt][2], S[nt][3]);
    }
}

// ---- single walker (no output walkers: bv64, bv128, -DGDN_OW=0): value rows [vw, vw + 16), the whole chunk.
// Its state slice Sᵀ[16 v][128 k] lives in fp32 mma accumulator fragments (64 registers) for the whole sequence.
template <int NW, int NP, bool BF16STATE>
__device__ __forceinline__ void single_walker(const PrefillParams& p, unsigned char* smem, unsigned char* wstage,
                                              u32 full0, u32 empty0, i64 seq, int h, int v0, int lane, int warp,
                                              i64 bos, i64 eos, i64 len, int nch, int start_threads) {
    constexpr int BV = 16 * NW;
    constexpr int R = ring_depth<NP>();
    using SL = Slot<BV>;
    const int HV = p.num_v_heads;
    const int t = lane & 3;
    const int vw = v0 + 16 * warp;
    const WalkerLanes l = walker_lanes<BV>(lane, warp);
    float S[16][4];  // Sᵀ[v][k]: tile nt = k 8nt..8nt+7
    const i64 sbase = ((seq * HV + h) * D + vw) * (i64)D;
    if (staged_start<BV>()) named_bar_sync(START_BAR, start_threads);  // v14.4: after the producers' first loads
    load_state<16, BF16STATE>(p, S, sbase, 0, lane, p.state != nullptr && len > 0);
    for (int c = 0; c < nch; ++c) {
        unsigned char* slot = smem + (c % R) * SL::BYTES;
        mbar_wait(full0 + 8 * (c % R), (u32)(c / R) & 1u);
        GDN_TR(warp == 0 && c < 2, 8 + 2 * c, clock64());
#ifdef GDN_ABLATE_WALK  // timing ablation (harness only; results wrong): no chunk math
        mbar_arrive(empty0 + 8 * (c % R));
        continue;
#endif
        const u32 ks = smem_addr(slot + SL::K_OFF), qs = smem_addr(slot + SL::Q_OFF);
        // ---- Z = Sᵀ Kᵀ and Y = Sᵀ Qᵀ, [16 v][16 tokens], k-dim 128; two accumulator sets for short chains
        float Z[2][2][4] = {}, Y[2][2][4] = {};
#pragma unroll
        for (int s = 0; s < 8; ++s) {
            const u32 a0 = pack_bf16(S[2 * s][0], S[2 * s][1]), a1 = pack_bf16(S[2 * s][2], S[2 * s][3]);
            const u32 a2 = pack_bf16(S[2 * s + 1][0], S[2 * s + 1][1]), a3 = pack_bf16(S[2 * s + 1][2], S[2 * s + 1][3]);
            u32 w0, w1, w2, w3, q0, q1, q2, q3;
            ldsm_x4(ks + l.lo_kb + s * 32, w0, w1, w2, w3);
            mma(Z[s & 1][0], a0, a1, a2, a3, w0, w1);
            mma(Z[s & 1][1], a0, a1, a2, a3, w2, w3);
            ldsm_x4(qs + l.lo_kb + s * 32, q0, q1, q2, q3);
            mma(Y[s & 1][0], a0, a1, a2, a3, q0, q1);
            mma(Y[s & 1][1], a0, a1, a2, a3, q2, q3);
        }
        float Zs[2][4], Vn[2][4], O[2][4];
#pragma unroll
        for (int nt = 0; nt < 2; ++nt)
#pragma unroll
            for (int r = 0; r < 4; ++r) Zs[nt][r] = Z[0][nt][r] + Z[1][nt][r];
        VnOperands vo;
        vn_prepare<BV>(slot, l, vo);
        vn_finish(vo, Zs, Vn);
        const UpdScale e = load_upd_scale<BV>(slot, t);
        u32 u[4], ul[4], kf[8][4];
        update_operand(e, Vn, u, ul);
        GDN_TR2(warp == 0 && (c < 2 || c == 5), 8 + 2 * (c < 2 ? c : 2));
        scale_state<16>(S, e.egc);
        load_update_k<16>(ks, l.lo_row, kf);
        state_update<16>(S, kf, u, ul);
        form_output<BV>(slot, l, t, Y, Vn, O);
        mbar_arrive(empty0 + 8 * (c % R));  // this lane is done with the slot (it may take chunk c + R)
        store_output(p, wstage + warp * WS_BYTES, O, bos + (i64)c * C, eos, h, vw, lane);
        GDN_TR2(warp == 0 && (c < 2 || c == 5), 9 + 2 * (c < 2 ? c : 2));
        GDN_TR(warp == 0 && c < 2, 9 + 2 * c, clock64());
    }
    GDN_TR(warp == 0, 12, clock64());
    store_state<16, BF16STATE>(p, S, sbase, 0, lane);  // (zeros for an empty sequence)
    GDN_TR(warp == 0, 13, clock64());
#ifdef GDN_TRACE
    GDN_TR(warp == 0, 14, clock64());
    GDN_TR(warp == 0, 15, gtimer());
#endif
}

// ---- v8 MIRROR walkers (bv32): ROLE 1, the state walker of rows [vw, vw + 16) (warp wv), runs Z = Sᵀ Kᵀ, U, X, Vn
// and the update (42 mma) and hands Vn (exact f32) to ROLE 2, the output walker (warp NW + wv), which mirrors S by
// applying the same update to the same operands (so the same bits) and forms Y = Sᵀ Qᵀ and O (38 mma), at most a
// ring behind. One instantiation per role: a role branch inside the unrolled loops cost v8's first build 50%.
template <int ROLE, int NW, int NP, bool BF16STATE>
__device__ __forceinline__ void mirror_walker(const PrefillParams& p, unsigned char* smem, unsigned char* hring,
                                              unsigned char* wstage, u32 full0, u32 empty0, u32 vn0, i64 seq, int h,
                                              int v0, int lane, int warp, i64 bos, i64 eos, i64 len, int nch,
                                              int start_threads) {
    constexpr int BV = 16 * NW;
    constexpr int R = ring_depth<NP>();
    using SL = Slot<BV>;
    const int HV = p.num_v_heads;
    const int t = lane & 3;
    const int wv = ROLE == 2 ? warp - NW : warp;
    const int vw = v0 + 16 * wv;
    const WalkerLanes l = walker_lanes<BV>(lane, wv);
    float S[16][4];
    const i64 sbase = ((seq * HV + h) * D + vw) * (i64)D;
    if (staged_start<BV>()) named_bar_sync(START_BAR, start_threads);  // v14.4: after the producers' first loads
    load_state<16, BF16STATE>(p, S, sbase, 0, lane, p.state != nullptr && len > 0);
    for (int c = 0; c < nch; ++c) {
        unsigned char* slot = smem + (c % R) * SL::BYTES;
        float4* vnx = reinterpret_cast<float4*>(hring + ((c % R) * NW + wv) * handoff_bytes<BV>()) + 2 * lane;
        mbar_wait(full0 + 8 * (c % R), (u32)(c / R) & 1u);
        GDN_TR(warp == 0 && c < 2, 8 + 2 * c, clock64());
#ifdef GDN_ABLATE_WALK
        if (ROLE == 1) mbar_arrive(vn0 + 8 * (c % R));
        mbar_arrive(empty0 + 8 * (c % R));
        continue;
#endif
        const u32 ks = smem_addr(slot + SL::K_OFF), qs = smem_addr(slot + SL::Q_OFF);
        // ---- ROLE 1: Z = Sᵀ Kᵀ; ROLE 2: Y = Sᵀ Qᵀ ([16 v][16 tokens], k-dim 128, two accumulator sets)
        float ZY[2][2][4] = {};
#pragma unroll
        for (int s = 0; s < 8; ++s) {
            const u32 a0 = pack_bf16(S[2 * s][0], S[2 * s][1]), a1 = pack_bf16(S[2 * s][2], S[2 * s][3]);
            const u32 a2 = pack_bf16(S[2 * s + 1][0], S[2 * s + 1][1]), a3 = pack_bf16(S[2 * s + 1][2], S[2 * s + 1][3]);
            u32 w0, w1, w2, w3;
            ldsm_x4((ROLE == 1 ? ks : qs) + l.lo_kb + s * 32, w0, w1, w2, w3);
            mma(ZY[s & 1][0], a0, a1, a2, a3, w0, w1);
            mma(ZY[s & 1][1], a0, a1, a2, a3, w2, w3);
        }
        float Vn[2][4], O[2][4];
        if constexpr (ROLE == 1) {
            float Zs[2][4];
#pragma unroll
            for (int nt = 0; nt < 2; ++nt)
#pragma unroll
                for (int r = 0; r < 4; ++r) Zs[nt][r] = ZY[0][nt][r] + ZY[1][nt][r];
            VnOperands vo;
            vn_prepare<BV>(slot, l, vo);
            vn_finish(vo, Zs, Vn);
            vnx[0] = make_float4(Vn[0][0], Vn[0][1], Vn[0][2], Vn[0][3]);
            vnx[1] = make_float4(Vn[1][0], Vn[1][1], Vn[1][2], Vn[1][3]);
            mbar_arrive(vn0 + 8 * (c % R));  // release: the stores above happen-before the output walker's reads
        } else {
            mbar_wait(vn0 + 8 * (c % R), (u32)(c / R) & 1u);
            const float4 x0 = vnx[0], x1 = vnx[1];
            Vn[0][0] = x0.x; Vn[0][1] = x0.y; Vn[0][2] = x0.z; Vn[0][3] = x0.w;
            Vn[1][0] = x1.x; Vn[1][1] = x1.y; Vn[1][2] = x1.z; Vn[1][3] = x1.w;
            form_output<BV>(slot, l, t, ZY, Vn, O);  // before its copy of the update: the output is its critical path
        }
        // ---- the update, identical in both roles
        const UpdScale e = load_upd_scale<BV>(slot, t);
        u32 u[4], ul[4], kf[8][4];
        update_operand(e, Vn, u, ul);
        GDN_TR2(warp == 0 && (c < 2 || c == 5), 8 + 2 * (c < 2 ? c : 2));
        scale_state<16>(S, e.egc);
        load_update_k<16>(ks, l.lo_row, kf);
        state_update<16>(S, kf, u, ul);
        mbar_arrive(empty0 + 8 * (c % R));  // this lane is done with the slot (it may take chunk c + R)
        if constexpr (ROLE == 2) {
            store_output(p, wstage + wv * WS_BYTES, O, bos + (i64)c * C, eos, h, vw, lane);
            GDN_TR2(warp == NW && (c < 2 || c == 5), 9 + 2 * (c < 2 ? c : 2));
            GDN_TR(warp == NW && c < 2, 9 + 2 * c, clock64());
        }
    }
    if constexpr (ROLE == 1) {
        GDN_TR(warp == 0, 12, clock64());
        store_state<16, BF16STATE>(p, S, sbase, 0, lane);  // (zeros for an empty sequence)
        GDN_TR(warp == 0, 13, clock64());
#ifdef GDN_TRACE
        GDN_TR(warp == 0, 14, clock64());
        GDN_TR(warp == 0, 15, gtimer());
#endif
    }
}

// ---- v9 KSPLIT state walker: warp 2wv + kh carries k half kh of Sᵀ rows [vw, vw + 16) — Sᵀ[16 v][64 k], 32 registers.
// Per chunk: the partial Z_kh = Sᵀ_kh K_khᵀ (8 mma) — while packing Sᵀ_kh to bf16 it also hands those A fragments to
// the output walker — then the two halves swap partials through shared memory (one named barrier per pair and
// chunk) and both form Z = Z_0 + Z_1 (the same bits: fp32 addition commutes), U, X, Vn (10 mma, identical in both)
// and update their own half of S (8 mma). 26 mma on the chain per warp instead of the v8 state walker's 42 — the two
// halves issue on different sub-partitions. Vn goes to the output walker with the S fragments (n-tile kh from half kh).
template <int NW, int NP, bool BF16STATE>
__device__ __forceinline__ void ksplit_state_walker(const PrefillParams& p, unsigned char* smem, unsigned char* hring,
                                             unsigned char* zx, u32 full0, u32 empty0, u32 vn0, u32 sready0, i64 seq,
                                             int h, int v0, int lane, int warp, i64 len, int nch) {
    constexpr int BV = 16 * NW;
    constexpr int R = ring_depth<NP>();
    using SL = Slot<BV>;
    const int HV = p.num_v_heads;
    const int t = lane & 3;
    const int wv = warp >> 1, kh = warp & 1;
    const int vw = v0 + 16 * wv;
    const WalkerLanes l = walker_lanes<BV>(lane, wv);
    float S[8][4];  // Sᵀ[v][64 kh + k]: tile nt = k 8nt..8nt+7 of this half
    const i64 sbase = ((seq * HV + h) * D + vw) * (i64)D;
    load_state<8, BF16STATE>(p, S, sbase, 64 * kh, lane, p.state != nullptr && len > 0);
    float4* const zmine = reinterpret_cast<float4*>(zx + wv * ZX_BYTES) + (kh * 32 + lane) * 2;  // + parity · 128
    const float4* const zother = reinterpret_cast<const float4*>(zx + wv * ZX_BYTES) + ((1 - kh) * 32 + lane) * 2;
    long long acc_full = 0, acc_bar = 0, acc_z = 0, acc_x = 0, acc_u = 0;
    (void)acc_full; (void)acc_bar; (void)acc_z; (void)acc_x; (void)acc_u;
    GDN_CLK(loop0);
    for (int c = 0; c < nch; ++c) {
        unsigned char* slot = smem + (c % R) * SL::BYTES;
        unsigned char* hand = hring + ((c % R) * NW + wv) * handoff_bytes<BV>();
        GDN_CLK(w0);
        mbar_wait(full0 + 8 * (c % R), (u32)(c / R) & 1u);
        GDN_ACC(acc_full, w0);
        GDN_TR(warp == 0 && c < 2, 8 + 2 * c, clock64());
#ifdef GDN_ABLATE_WALK  // timing ablation (harness only; results wrong): no chunk math, only the hand-offs
        mbar_arrive(sready0 + 8 * (c % R));
        mbar_arrive(vn0 + 8 * (c % R));
        mbar_arrive(empty0 + 8 * (c % R));
        continue;
#endif
        const u32 ks = smem_addr(slot + SL::K_OFF) + 128 * kh;  // this half's 64 k columns
        uint4* const sh = reinterpret_cast<uint4*>(hand + VN_BYTES) + 4 * kh * 32 + lane;  // k-steps 4kh.., stride 32
        // ---- everything that does not depend on S first (off the chain): U and the Tg fragments, the update's K
        // fragments and scalars (the exchange's barrier below would keep these loads behind it)
        VnOperands vo;
        vn_prepare<BV>(slot, l, vo);
        u32 kf[4][4];
        load_update_k<8>(ks, l.lo_row, kf);
        const UpdScale e = load_upd_scale<BV>(slot, t);
        // ---- partial Z = Sᵀ_kh K_khᵀ, [16 v][16 tokens], 4 k-steps, two accumulator sets
        float Z[2][2][4] = {};
#pragma unroll
        for (int s = 0; s < 4; ++s) {
            const u32 a0 = pack_bf16(S[2 * s][0], S[2 * s][1]), a1 = pack_bf16(S[2 * s][2], S[2 * s][3]);
            const u32 a2 = pack_bf16(S[2 * s + 1][0], S[2 * s + 1][1]), a3 = pack_bf16(S[2 * s + 1][2], S[2 * s + 1][3]);
            u32 w0, w1, w2, w3;
            ldsm_x4(ks + l.lo_kb + s * 32, w0, w1, w2, w3);
            mma(Z[s & 1][0], a0, a1, a2, a3, w0, w1);
            mma(Z[s & 1][1], a0, a1, a2, a3, w2, w3);
            sh[32 * s] = make_uint4(a0, a1, a2, a3);
        }
        // v10: the bf16 Sᵀ fragments are out: the output walker's Y = Sᵀ Qᵀ need not wait for Vn (release: the stores
        // above happen-before its reads)
        mbar_arrive(sready0 + 8 * (c % R));
        scale_state<8>(S, e.egc);
        // ---- swap partials with the other half (double-buffered by chunk parity: the partner read the buffer of
        // chunk c − 2 before arriving at chunk c − 1's barrier, which this warp has passed)
        float Zs[2][4];
        {
            const int par = (c & 1) * 64;  // float4 index offset of this parity's [half][lane][2] block
            float4 m0, m1;
            m0 = make_float4(Z[0][0][0] + Z[1][0][0], Z[0][0][1] + Z[1][0][1], Z[0][0][2] + Z[1][0][2], Z[0][0][3] + Z[1][0][3]);
            m1 = make_float4(Z[0][1][0] + Z[1][1][0], Z[0][1][1] + Z[1][1][1], Z[0][1][2] + Z[1][1][2], Z[0][1][3] + Z[1][1][3]);
            zmine[par] = m0;
            zmine[par + 1] = m1;
            GDN_CLK(b0);
            GDN_ACC(acc_z, w0);  // FULL wait start .. Z partial stored (the stores consume the Z chain)
            asm volatile("bar.sync %0, 64;" ::"r"(1 + wv) : "memory");
            GDN_ACC(acc_bar, b0);
            const float4 o0 = zother[par], o1 = zother[par + 1];
            Zs[0][0] = m0.x + o0.x; Zs[0][1] = m0.y + o0.y; Zs[0][2] = m0.z + o0.z; Zs[0][3] = m0.w + o0.w;
            Zs[1][0] = m1.x + o1.x; Zs[1][1] = m1.y + o1.y; Zs[1][2] = m1.z + o1.z; Zs[1][3] = m1.w + o1.w;
        }
        GDN_CLK(x0);
        float Vn[2][4];
        vn_finish(vo, Zs, Vn);
        u32 u[4], ul[4];
        update_operand(e, Vn, u, ul);
        GDN_TR2(warp == 0 && (c < 2 || c == 5), 8 + 2 * (c < 2 ? c : 2));
        state_update<8>(S, kf, u, ul);
        {  // n-tile kh of Vn (exact f32) to the output walker, then release it (the S fragments went out with SREADY)
            float4* vnx = reinterpret_cast<float4*>(hand) + 2 * lane;
            vnx[kh] = kh ? make_float4(Vn[1][0], Vn[1][1], Vn[1][2], Vn[1][3])
                         : make_float4(Vn[0][0], Vn[0][1], Vn[0][2], Vn[0][3]);
            GDN_ACC(acc_x, x0);  // exchange done .. Vn stored (X chain, update issued)
            GDN_CLK(u0);
            mbar_arrive(vn0 + 8 * (c % R));  // release: the stores above happen-before the output walker's reads
            GDN_ACC(acc_u, u0);
        }
        mbar_arrive(empty0 + 8 * (c % R));  // this lane is done with the slot (it may take chunk c + R)
    }
    GDN_TR(warp == 0, 12, clock64());
    GDN_TR3(warp == 0, 0, acc_full);
    GDN_TR3(warp == 0, 1, acc_bar);
    GDN_TR3(warp == 0, 2, clock64() - loop0);
    GDN_TR3(warp == 0, 9, (long long)nch);
    GDN_TR3(warp == 1, 10, acc_bar);
    GDN_TR3(warp == 0, 11, acc_z);
    GDN_TR3(warp == 0, 12, acc_x);
    GDN_TR3(warp == 0, 13, acc_u);
    store_state<8, BF16STATE>(p, S, sbase, 64 * kh, lane);  // (zeros for an empty sequence)
    GDN_TR(warp == 0, 13, clock64());
#ifdef GDN_TRACE
    GDN_TR(warp == 0, 14, clock64());
    GDN_TR(warp == 0, 15, gtimer());
#endif
}

// ---- v9 KSPLIT output walker: warp 2NW + wv forms the outputs of rows [vw, vw + 16): Y = Sᵀ Qᵀ from the state
// walkers' bf16 S fragments (the very operands of their Z) and O = e^γ ⊙ Y + Vn Pᵀ (22 mma); it holds no state.
template <int NW, int NP>
__device__ __forceinline__ void ksplit_output_walker(const PrefillParams& p, unsigned char* smem, unsigned char* hring,
                                              unsigned char* wstage, u32 full0, u32 empty0, u32 vn0, u32 sready0, int h,
                                              int v0, int lane, int warp, i64 bos, i64 eos, int nch) {
    constexpr int BV = 16 * NW;
    constexpr int R = ring_depth<NP>();
    using SL = Slot<BV>;
    const int t = lane & 3;
    const int wv = warp - 2 * NW;
    const int vw = v0 + 16 * wv;
    const WalkerLanes l = walker_lanes<BV>(lane, wv);
    long long acc_wait = 0;
    (void)acc_wait;
    GDN_CLK(loop0);
    for (int c = 0; c < nch; ++c) {
        unsigned char* slot = smem + (c % R) * SL::BYTES;
        const unsigned char* hand = hring + ((c % R) * NW + wv) * handoff_bytes<BV>();
        GDN_CLK(w0);
        mbar_wait(full0 + 8 * (c % R), (u32)(c / R) & 1u);
        mbar_wait(sready0 + 8 * (c % R), (u32)(c / R) & 1u);  // v10: bf16 Sᵀ (Vn is waited for after Y)
        GDN_ACC(acc_wait, w0);
#ifdef GDN_ABLATE_WALK
        mbar_wait(vn0 + 8 * (c % R), (u32)(c / R) & 1u);
        mbar_arrive(empty0 + 8 * (c % R));
        continue;
#endif
        const u32 qs = smem_addr(slot + SL::Q_OFF);
        const uint4* sh = reinterpret_cast<const uint4*>(hand + VN_BYTES) + lane;
        float Y[2][2][4] = {};
#pragma unroll
        for (int s = 0; s < 8; ++s) {
            const uint4 a = sh[32 * s];
            u32 q0, q1, q2, q3;
            ldsm_x4(qs + l.lo_kb + s * 32, q0, q1, q2, q3);
            mma(Y[s & 1][0], a.x, a.y, a.z, a.w, q0, q1);
            mma(Y[s & 1][1], a.x, a.y, a.z, a.w, q2, q3);
        }
        float Vn[2][4], O[2][4];
        GDN_CLK(w1);
        mbar_wait(vn0 + 8 * (c % R), (u32)(c / R) & 1u);
        GDN_ACC(acc_wait, w1);
        {
            const float4 x0 = reinterpret_cast<const float4*>(hand)[2 * lane];
            const float4 x1 = reinterpret_cast<const float4*>(hand)[2 * lane + 1];
            Vn[0][0] = x0.x; Vn[0][1] = x0.y; Vn[0][2] = x0.z; Vn[0][3] = x0.w;
            Vn[1][0] = x1.x; Vn[1][1] = x1.y; Vn[1][2] = x1.z; Vn[1][3] = x1.w;
        }
        form_output<BV>(slot, l, t, Y, Vn, O);
        mbar_arrive(empty0 + 8 * (c % R));  // done with the slot and the hand-off
        store_output(p, wstage + wv * WS_BYTES, O, bos + (i64)c * C, eos, h, vw, lane);
        GDN_TR2(warp == 2 * NW && (c < 2 || c == 5), 9 + 2 * (c < 2 ? c : 2));
        GDN_TR(warp == 2 * NW && c < 2, 9 + 2 * c, clock64());
    }
    GDN_TR(warp == 2 * NW, 12, clock64());
    GDN_TR3(warp == 2 * NW, 3, acc_wait);
    GDN_TR3(warp == 2 * NW, 4, clock64() - loop0);
}

// ------------------------------------------------------------------ the kernel body
template <int NW, int NP, bool BF16STATE, bool LF, bool SPLIT = false>
__device__ __forceinline__ void prefill_body(const PrefillParams& p) {
    static_assert(!SPLIT || (LF && NW == 8), "the split kernels are bv128, longest first");
    constexpr int BV = 16 * NW;
    constexpr int NVG = D / BV;
    constexpr int R = ring_depth<NP>();  // 2·NP + 1 slots: NP being computed, NP loading ahead, one of slack
    static_assert(NP >= 1 && NP <= 6, "1..6 producer warps");
    using SL = Slot<BV>;
    constexpr int SCHEME = walk_scheme<BV>();
    constexpr bool OW = SCHEME != WALK_SINGLE;
    // walkers: KSPLIT state walkers 0..2NW-1, output walkers 2NW..3NW-1; MIRROR state walkers 0..NW-1, output walkers
    // NW..2NW-1; SINGLE walkers 0..NW-1; then the producers
    constexpr int NWK = walker_warps<BV>();
    extern __shared__ __align__(128) unsigned char smem[];
    // Layout: R slots | R·NW hand-offs | NP producer scratch | NW output stagings | NW Z exchanges | mbarriers: FULL[s]
    // (count 32: the producer warp's lanes), EMPTY[s] (count 32·NWK: every walker lane), (OW) VN[s] (count: every
    // state walker lane), (KSPLIT) SREADY[s] (count: every state walker lane).
    unsigned char* const hring = smem + R * SL::BYTES;
    unsigned char* const pscr = hring + R * NW * handoff_bytes<BV>();
    unsigned char* const wstage = pscr + NP * PS_BYTES;
    unsigned char* const zx = wstage + NW * WS_BYTES;
    const u32 bars = smem_addr(zx + NW * zx_bytes<BV>());
    const u32 full0 = bars, empty0 = bars + 8 * R, vn0 = bars + 16 * R, sready0 = bars + 24 * R;
    const int HV = p.num_v_heads;
    const int tile = blockIdx.x;
    const int vg = tile % NVG;
    const int h = (tile / NVG) % HV;
    const i64 grp = (i64)(tile / NVG) / HV;  // the sequence, or (LF) the rank of the sequence this CTA runs
    i64 seq = grp;                           // (LF: set after the set-up barrier)
    const int hq = h / (HV / p.num_q_heads);
    const int lane = threadIdx.x & 31;
    int warp = threadIdx.x >> 5;
    if (idle_warps<BV>() > 0 && warp > 4) warp -= 1;  // bv16 (v5.1): warp 4 idles (returns below), warps 5.. act as 4..
    const int v0 = vg * BV;
    // v6: sequence 0 starts at token 0 (cu_seqlens[0] = 0), so producer 0 loads its first chunk before cu_seqlens has
    // arrived — one DRAM round trip off the critical path of short calls. Rows < lead_rows exist in the tensors; the
    // rows past the sequence's end are zeroed once its length is known (below), and a cu_seqlens[0] != 0 reloads.
    const bool spec = !LF && seq == 0 && p.lead_rows > 0 && warp == NWK;  // producer 0 (the bv16 idle warp is warp 4 > NWK)
#ifdef GDN_TRACE
    GDN_TR(warp == 0, 0, gtimer());
    GDN_TR(warp == 0, 1, clock64());
#endif
    if (spec) load_chunk<BV>(p, smem, 0, p.lead_rows, hq, h, v0, lane);  // slot 0, not committed yet
#if GDN_EARLY_SEQ
    // v11: cu_seqlens and the head's gate parameters are requested before the barrier set-up below (cold DRAM round
    // trips: every CTA of a sequence > 0 waits for its offsets before it can load anything).
    i64 bos = LF ? 0 : p.cu_seqlens[seq], eos = LF ? 0 : p.cu_seqlens[seq + 1];
    float dtb = p.dt_bias[h], alog = p.A_log[h];
#endif
    // (SPLIT: after the ranking, which decides how many walkers a CTA runs)
    if (!SPLIT && threadIdx.x == 0) {
        for (int s = 0; s < R; ++s) {
            mbar_init(full0 + 8 * s, 32);
            mbar_init(empty0 + 8 * s, 32 * NWK);
            if (OW) mbar_init(vn0 + 8 * s, 32 * NW * (SCHEME == WALK_KSPLIT ? 2 : 1));
            if (SCHEME == WALK_KSPLIT) mbar_init(sready0 + 8 * s, 32 * NW * 2);
        }
    }
    i64* const lfv = reinterpret_cast<i64*>(pscr + PS_LF_OFF);  // (LF) warp 0's (sequence, bos, eos (, SPLIT: half))
    // (the keys' 512 bytes: ring slot 0, which nothing touches before the set-up barrier here: LF has no speculative load)
    if (LF && threadIdx.x < 32)
        lf_rank<SPLIT>(p, grp, lane, reinterpret_cast<u32*>(smem), lfv, (i64)(gridDim.x / (NVG * HV)) - p.num_seqs);
    if (SPLIT && threadIdx.x == 0) {  // (lane 0 wrote lfv)
        const int walking = lfv[3] >= 0 ? 32 * (NW / 2) : 32 * NWK;
        for (int s = 0; s < R; ++s) {
            mbar_init(full0 + 8 * s, 32);
            mbar_init(empty0 + 8 * s, walking);
        }
    }
#if GDN_EARLY_SEQ
    // The offsets are used only through a value the barrier returns (the thread count, so + 0): otherwise ptxas computes
    // the sequence length before the barrier and every warp waits there for the DRAM round trip (a plain bar.sync
    // with the loads' values moved through one asm did not stop it).
    {
        const i64 zero = (i64)__syncthreads_count(1) - (i64)blockDim.x;
        bos += zero;
        eos += zero;
    }
#else
    __syncthreads();
#endif
    if constexpr (LF) {
        seq = lfv[0];
#if GDN_EARLY_SEQ
        bos = lfv[1];
        eos = lfv[2];
#endif
    }
    int wv = warp;  // the walker's 16-row group in the tile (SPLIT half CTAs: 4·half + warp)
    if constexpr (SPLIT) {
        if (seq < 0) return;  // a spare group (CTA-uniform)
        const int half = (int)lfv[3];
        if (half >= 0) {
            if (warp >= NW / 2 && warp < NWK) return;  // walkers 4..7 of a half CTA
            if (warp < NWK) wv = (NW / 2) * half + warp;
        }
    }
    GDN_TR(warp == 0, 2, clock64());
    if (idle_warps<BV>() > 0 && threadIdx.x >> 5 == 4) return;

#if !GDN_EARLY_SEQ
    const i64 bos = LF ? lfv[1] : p.cu_seqlens[seq], eos = LF ? lfv[2] : p.cu_seqlens[seq + 1];
    const float dtb = p.dt_bias[h], alog = p.A_log[h];
#endif
    const i64 len = eos > bos ? eos - bos : 0;
    const int nch = (int)((len + C - 1) / C);
    // v14.4 (staged_start): the threads of the start barrier — every producer, and every walker that holds a state
    // (SINGLE: the walking walkers, 4 in a split half CTA; MIRROR: both roles)
    int start_threads = 32 * (NP + (SCHEME == WALK_MIRROR ? 2 * NW : NW));
    if constexpr (SPLIT) start_threads = 32 * (NP + (lfv[3] >= 0 ? NW / 2 : NW));

    if (warp >= NWK) {
        // =============================== producer
        const int pw = warp - NWK;
        unsigned char* scr = pscr + pw * PS_BYTES;
        const float nea = -__expf(alog);  // −e^{A_log}: the log-decay's factor
        // Prologue: this producer's first chunk pw (< R: its slot is free) starts loading; one group per chunk.
        // spec: chunk 0 is in flight already (spec_ok), unless sequence 0 does not start at token 0: then those
        // copies are drained and the chunk loads as usual.
        const bool spec_ok = spec && bos == 0;
        if (spec && !spec_ok) {
            cp_async_commit();
            cp_async_wait<0>();
            __syncwarp();
        }
        if (pw < nch && !spec_ok) load_chunk<BV>(p, smem + (pw % R) * SL::BYTES, bos + (i64)pw * C, eos, hq, h, v0, lane);
        GDN_TR(pw == 0, 3, clock64());
        cp_async_commit();
        if (staged_start<BV>()) named_bar_arrive(START_BAR, start_threads);  // v14.4: the walkers may load their states
        long long acc_empty = 0, acc_land = 0, acc_math = 0;
        (void)acc_empty; (void)acc_land; (void)acc_math;
        GDN_CLK(loop0);
        for (int j = pw; j < nch; j += NP) {
            // Start the loads of this producer's next chunk jn = j + NP before computing chunk j, so that they
            // overlap a whole computation. Its slot held chunk jn − R = j − NP − 1: wait until the walkers
            // released it (phase (jn / R) − 1 of EMPTY[jn % R]).
            const int jn = j + NP;
            const bool late = staged_start<BV>() && j == pw;  // v14.4: the first iteration loads jn after chunk j's math
            if (jn < nch && !late) {
                GDN_CLK(e0);
                if (jn >= R) mbar_wait(empty0 + 8 * (jn % R), (u32)((jn / R) - 1) & 1u);
                GDN_ACC(acc_empty, e0);
                load_chunk<BV>(p, smem + (jn % R) * SL::BYTES, bos + (i64)jn * C, eos, hq, h, v0, lane);
            }
            cp_async_commit();
            GDN_CLK(l0);
            cp_async_wait<1>();  // chunk j has landed (this lane's copies); chunk jn may still be in flight
            __syncwarp();
            GDN_ACC(acc_land, l0);
            GDN_TR(pw == 0 && j < 2 * NP, 4 + 2 * (j / NP), clock64());
            const i64 rem = len - (i64)j * C;
            if (spec_ok && j == 0 && rem < C) {  // the speculative rows [len, 16) are not sequence 0's: zero them
                zero_rows<BV>(smem, (int)rem, lane);
                __syncwarp();
            }
            const int nvalid = rem < C ? (int)rem : C;
            const int tr = pw == 0 && j < 2 * NP ? 4 * (j / NP) : -1;
            GDN_TR2(tr >= 0, tr);
            GDN_CLK(m0);
#ifndef GDN_ABLATE_PREP  // timing ablation (harness only; results wrong): the walkers get uncomputed slots
            compute_chunk<BV>(p, smem + (j % R) * SL::BYTES, scr, h, nvalid, dtb, nea, lane, tr);
#endif
            GDN_ACC(acc_math, m0);
            mbar_arrive(full0 + 8 * (j % R));  // every lane: its copies and stores happen-before the walkers' reads
            if (late && jn < nch) {  // (jn < R: its slot has not been used yet)
                load_chunk<BV>(p, smem + (jn % R) * SL::BYTES, bos + (i64)jn * C, eos, hq, h, v0, lane);
                cp_async_commit();  // (the next iteration's wait<1> leaves only its own chunk's group in flight)
            }
            GDN_TR(pw == 0 && j < 2 * NP, 5 + 2 * (j / NP), clock64());
        }
        GDN_TR3(pw == 0, 5, acc_empty);
        GDN_TR3(pw == 0, 6, acc_land);
        GDN_TR3(pw == 0, 7, clock64() - loop0);
        GDN_TR3(pw == 0, 8, acc_math);
        cp_async_wait<0>();
        return;
    }

    // =============================== walkers: value rows [vw, vw + 16) per 16-row group (see the walker functions)
    if constexpr (SCHEME == WALK_SINGLE)
        single_walker<NW, NP, BF16STATE>(p, smem, wstage, full0, empty0, seq, h, v0, lane, wv, bos, eos, len, nch,
                                         start_threads);
    else if constexpr (SCHEME == WALK_MIRROR) {
        if (warp >= NW)
            mirror_walker<2, NW, NP, BF16STATE>(p, smem, hring, wstage, full0, empty0, vn0, seq, h, v0, lane, warp, bos, eos,
                                                len, nch, start_threads);
        else
            mirror_walker<1, NW, NP, BF16STATE>(p, smem, hring, wstage, full0, empty0, vn0, seq, h, v0, lane, warp, bos, eos,
                                                len, nch, start_threads);
    } else if (warp >= 2 * NW)
        ksplit_output_walker<NW, NP>(p, smem, hring, wstage, full0, empty0, vn0, sready0, h, v0, lane, warp, bos, eos, nch);
    else
        ksplit_state_walker<NW, NP, BF16STATE>(p, smem, hring, zx, full0, empty0, vn0, sready0, seq, h, v0, lane, warp, len, nch);
}

}  // namespace gdn_prefill

// ---------------------------------------------------------------------------------------------------------
// Exported kernels. gdn_prefill_<state dtype>_bv<BV>: BV value columns per CTA. gdn_prefill_<state>_bv{64,128}_lf (v13):
// the same tiles, sequences longest first (LF; launch constants identical to the plain tile's).
//   grid  = (N · HV · (128 / BV), 1, 1)
//   block = block_threads<BV>(): bv16 256 (v9: 2 k-split state walkers, 1 output walker, 5 producers), bv32 256 (2 + 2
//           walkers, 4 producers), bv64 256 (4 walkers, 4 producers), bv128 384 (8 walkers, 4 producers)
//   dynamic shared memory = smem_bytes<BV, producers<BV>()>(): bv16 225696, bv32 159000, bv64 151248, bv128 172752
//           (all > 48 KB: CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES must be raised). Both are also in the
//           module as data (gdn_prefill_launch) and in the Rust registry, checked against these constexprs.
// ---------------------------------------------------------------------------------------------------------
#ifndef GDN_DEVICE_PLAN
#define GDN_PREFILL_KERNEL(NAME, NW, BF16, LF)                                                           \
    extern "C" __global__ void __launch_bounds__(gdn_prefill::block_threads<16 * NW>(), GDN_MINB)        \
        NAME(const PrefillParams p) {                                                                    \
        gdn_prefill::prefill_body<NW, gdn_prefill::producers<16 * NW>(), BF16, gdn_prefill::lf_body(NW, LF)>(p); \
    }
#else  // the device plan's build: exit unless run_from <= the longest sequence < run_below (nothing written yet)
// (v14.3, session 31: one body per kernel. Sessions 26-30 ran the plain body in a longest-first kernel when the call's
// lengths were equal, which cost every call of those kernels more than the ranking it skipped; lf_rank now skips the
// ranking on equal lengths instead)
namespace gdn_prefill {
// Whether this launch runs the call (device_plan.cuh); one that does not leaves here (pdl_exit).
__device__ __forceinline__ bool device_plan_runs(const PrefillPlanParams& pp) {
    const i64 longest = pp.run_below < 0 ? 0 : longest_seq(pp.p.cu_seqlens, pp.p.num_seqs);
    if (pp.run_below < 0 || longest >= pp.run_below || longest < pp.run_from) {
        pdl_exit();
        return false;
    }
    pdl_launch_dependents();
    return true;
}
}  // namespace gdn_prefill
#define GDN_PREFILL_KERNEL(NAME, NW, BF16, LF)                                                           \
    extern "C" __global__ void __launch_bounds__(gdn_prefill::block_threads<16 * NW>(), GDN_MINB)        \
        NAME(const PrefillPlanParams pp) {                                                               \
        if (gdn_prefill::device_plan_runs(pp))                                                           \
            gdn_prefill::prefill_body<NW, gdn_prefill::producers<16 * NW>(), BF16, gdn_prefill::lf_body(NW, LF)>(pp.p); \
    }
#endif
// v14 (session 28): the split kernels (bv128, longest first; grid (N + min(N, 16))·HV; see SPLIT_MIN_TOKENS).
#ifndef GDN_DEVICE_PLAN
#define GDN_PREFILL_SPLIT_KERNEL(NAME, BF16)                                                             \
    extern "C" __global__ void __launch_bounds__(gdn_prefill::block_threads<128>(), GDN_MINB)            \
        NAME(const PrefillParams p) {                                                                    \
        gdn_prefill::prefill_body<8, gdn_prefill::producers<128>(), BF16, true, true>(p);                \
    }
#else
#define GDN_PREFILL_SPLIT_KERNEL(NAME, BF16)                                                             \
    extern "C" __global__ void __launch_bounds__(gdn_prefill::block_threads<128>(), GDN_MINB)            \
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
