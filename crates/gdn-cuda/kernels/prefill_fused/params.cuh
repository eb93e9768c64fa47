// prefill_fused/params.cuh — the fused prefill's parameters and layouts: PrefillParams (mirrored byte for byte by the
// Rust runtime), PrefillPlanParams (the device plan's build), the chunk and tile constants, one ring slot's
// shared-memory layout, and the launch shape of every tile (walk scheme, walker and producer warps, threads, dynamic
// shared memory), which the Rust registry checks against these constexprs at every compile.
#pragma once

// Parameters of every gdn_prefill_* kernel: the definition's tensors (8-byte fields first, then 4-byte fields), 112
// bytes; the serving build (GDN_SERVING, common/serving.cuh) appends the pool's row count and the serving-mode block,
// 256 bytes. The Rust runtime mirrors the serving build's struct byte for byte (offsets in the comments) and passes
// it to both builds: a definition kernel declares, and the driver copies, only the first 112 bytes. Why two builds:
// a params struct over 128 bytes, and the serving branches, change ptxas's code for the walks.
struct PrefillParams {
    const __nv_bfloat16* q;        //   0: [T, H, 128] bf16
    const __nv_bfloat16* k;        //   8: [T, H, 128] bf16
    const __nv_bfloat16* v;        //  16: [T, HV, 128] bf16
    const __nv_bfloat16* a;        //  24: [T, HV] bf16 (decay input); NULL with precomputed gates
    const __nv_bfloat16* b;        //  32: [T, HV] bf16 (update-gate input, beta = sigmoid(b)); NULL likewise
    const float* A_log;            //  40: [HV] f32; NULL likewise
    const float* dt_bias;          //  48: [HV] f32; NULL likewise
    const void* cu_seqlens;        //  56: [N+1] int64 (int32 with SV_CU_I32), device memory, non-decreasing,
                                   //      cu[0] = 0; read only through cu_at (below)
    const void* state;             //  64: [rows, HV, 128, 128] (k-last, or K-first with SV_KFIRST), f32
                                   //      (gdn_prefill_f32_*) or bf16 (gdn_prefill_bf16_*); NULL means zeros
    void* new_state;               //  72: same dtype and layout: row n written for every sequence n (definition
                                   //      mode), or the pool itself (= state) in pool mode
    __nv_bfloat16* out;            //  80: [T, HV, 128] bf16
    i64 num_seqs;                  //  88: N
    float scale;                   //  96: output scale (resolved by the caller, never 0)
    i32 num_q_heads;               // 100: H (q and k heads)
    i32 num_v_heads;               // 104: HV, a multiple of H, even (gates are copied as aligned bf16 pairs)
    i32 lead_rows;                 // 108: min(T, 16): rows of q/k/v/a/b that exist whatever cu_seqlens says
                                   //      (sequence 0's first chunk is loaded before cu_seqlens; 0 disables)
#ifdef GDN_SERVING
    i64 num_state_rows;            // 112: rows of state (the pool's in pool mode): a pool index >= this is padding
    ServingParams serving;         // 120: the serving modes (common/serving.cuh), 136 bytes
#endif
};
// The device plan's build (module prefill_dp, compiled with GDN_DEVICE_PLAN; common/device_plan.cuh): the same
// kernels under the same names, taking run_below and run_from after the params. A kernel runs the call only when its
// longest sequence X has run_from <= X < run_below tokens; otherwise another launch of the same call runs it (another
// fused tile, or the prefill_chunk64 launches) and every CTA here exits at once. run_below < 0: never (a test route).
// A device plan may launch two tiles: a wide one for near-equal lengths (bv128 keeps one chain per (sequence, head))
// and a narrow one for skewed calls (bv64's chain per chunk is shorter, and the longest sequence's chain is the call's
// time). A build of its own so that host-planned calls run without the guard. The thresholds come first, so one Rust
// struct serves both builds: 128 bytes (definition build), 272 (serving build).
struct PrefillPlanParams {
    i64 run_below;                 //   0
    i64 run_from;                  //   8
    PrefillParams p;               //  16
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
// Per-producer scratch: A (f32 [16][16], 1024 B), then 128 spare bytes (they keep the launch table, mirrored by the
// Rust registry, at its sizes); producer 0's carry the longest-first kernels' (sequence, bos, eos (, half)) from warp 0
// to the CTA across the set-up barrier (schedule.cuh).
constexpr int PS_A_OFF = 0;
constexpr int PS_LF_OFF = 1024;
constexpr int PS_BYTES = 1024 + 128;                         // 1152 B
constexpr int WS_BYTES = TILE16;                             // per-walker output staging bf16 [16][24]

// Dynamic shared memory of gdn_prefill_*_bv<BV> with NP producers and R = 2·NP + 1 ring slots (smem_bytes below):
//   R·(13632 + 32·(BV+8) + (BV/16)·H) + NP·1152 + (BV/16)·(768 + X) + 8·B·R   (bytes; the opt-in limit on sm_90 is
//   232448; the last bytes are the mbarriers, B arrays of R: ring_barriers below), H the hand-off (KSPLIT 5120,
//   MIRROR 1024), X the Z exchange (KSPLIT 4096).
// BV=16 (KSPLIT, NP 5) 225696, BV=32 (MIRROR, NP 4) 159000, BV=64 (NP 4) 151248, BV=128 (NP 4) 172752.
// All > 48 KB: raise CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES.

// Walk schemes (walkers.cuh), by tile width. Warp w issues on SM sub-partition w % 4.
//   SINGLE (bv64, bv128): one walker per 16 value rows.
//   MIRROR (bv32): every 16 value rows get two warps on different sub-partitions. The STATE walker (Z = Sᵀ Kᵀ, U, X,
//     Vn, the update: 42 mma per chunk) hands Vn over through shared memory to the OUTPUT walker, which keeps its own
//     copy of S by applying the same update (bitwise the same operands) and forms Y = Sᵀ Qᵀ and O (38 mma), one chunk
//     behind at most. Why: a lone walker is tensor-pipe bound (64 mma.sync m16n8k16 per chunk, ~16 cycles each on
//     its sub-partition), and the state chain loses Y and O (22 mma). bv64 gains nothing from it and bv128 cannot
//     have it (20 warps would not fit the register file).
//   KSPLIT (bv16): every 16 value rows get three warps: two k-split state walkers (warps 2wv, 2wv + 1; warp 2wv + kh
//     holds Sᵀ[16 v][64 k] of k half kh, 32 registers; 26 mma per chunk each) and one output walker (warp 2NW + wv)
//     that takes bf16 Sᵀ and Vn from them through shared memory (22 mma, no state). The sub-partitions' mma.sync
//     pipes are shared with the producers and the output walker, so the chain gains less than its mma count says.
//     For bv32 the same scheme needs 6 walker warps on 4 sub-partitions and only 3 producers fit shared memory: it
//     loses to MIRROR there.
enum : int { WALK_SINGLE = 0, WALK_MIRROR = 1, WALK_KSPLIT = 2 };
template <int BV> __host__ __device__ constexpr int walk_scheme() {
    return BV == 16 ? WALK_KSPLIT : BV == 32 ? WALK_MIRROR : WALK_SINGLE;
}
template <int BV> __host__ __device__ constexpr bool output_walkers() { return walk_scheme<BV>() != WALK_SINGLE; }
template <int BV> __host__ __device__ constexpr int walker_warps() { return (BV / 16) * (1 + walk_scheme<BV>()); }
// Producer warps per CTA: bv16 5 (8 warps: state walkers 0-1, output walker 2, producers 3-7), bv32 4 (8 warps: state
// walkers 0-1, output walkers 2-3, producers 4-7), bv64 4 (8 warps: one walker and one producer on each sub-partition;
// a ninth warp would double sub-partition 0's load and walker 0 would lag), bv128 4 (12 warps: 384 threads, <= 168
// registers).
template <int BV> __host__ __device__ constexpr int producers() { return BV == 16 ? 5 : 4; }
template <int BV, int NP = producers<BV>()> __host__ __device__ constexpr int block_threads() {
    return 32 * (walker_warps<BV>() + NP);
}
// The compact tiles (`_np2`): bv32 and bv64 with two producers, so a ring of 5 slots: 88760 and 85136 bytes of shared
// memory, under the 101376 (99 KB) a block may take on sm_86, sm_89 and sm_120, where no default tile fits (sm_80
// allows 166912: bv32 and bv64 fit there as they are). Two producers prepare chunks at half the default tiles' rate,
// so the walkers wait on them where the chain is short; only the plans of such GPUs pick them (plan::prefill::host).
constexpr int COMPACT_NP = 2;
template <int NP> __host__ __device__ constexpr int ring_depth() { return 2 * NP + 1; }
// Whether a tile stages its first loads (body.cuh): the producers issue their first chunks' loads before the walkers
// load their states, and each producer issues its second chunk's loads after its first chunk's math. Why: a call of
// these tiles starts a wave of CTAs together, and every walker's first act is to load its state (64 KB per bv128 CTA);
// the producers' cu_seqlens and first-chunk loads would queue behind that burst. Not bv16 (KSPLIT), whose calls start
// few CTAs and whose walkers need the second chunk soon. START_BAR: the named barrier of that hand-off (bv16's Z
// exchanges use 1..NW).
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
// mbarrier arrays of R after the Z exchanges: FULL, EMPTY, (output walkers) VN, (KSPLIT) SREADY.
template <int BV> __host__ __device__ constexpr int ring_barriers() {
    return walk_scheme<BV>() == WALK_KSPLIT ? 4 : output_walkers<BV>() ? 3 : 2;
}
// Dynamic shared memory: R slots, R·(BV/16) hand-offs, NP producer scratch, BV/16 output stagings, BV/16 Z exchanges,
// then the mbarrier arrays.
template <int BV, int NP> __host__ __device__ constexpr int smem_bytes() {
    return ring_depth<NP>() * (Slot<BV>::BYTES + (BV / 16) * handoff_bytes<BV>()) + NP * PS_BYTES + (BV / 16) * WS_BYTES +
           (BV / 16) * zx_bytes<BV>() + 8 * ring_barriers<BV>() * ring_depth<NP>();
}
static_assert(smem_bytes<16, producers<16>()>() == 225696 && smem_bytes<32, producers<32>()>() == 159000 &&
                  smem_bytes<64, producers<64>()>() == 151248 && smem_bytes<128, producers<128>()>() == 172752 &&
                  block_threads<16>() == 256 && block_threads<32>() == 256 && block_threads<64>() == 256 &&
                  block_threads<128>() == 384 && smem_bytes<32, COMPACT_NP>() == 88760 &&
                  smem_bytes<64, COMPACT_NP>() == 85136 && block_threads<32, COMPACT_NP>() == 192 &&
                  block_threads<64, COMPACT_NP>() == 192,
              "launch table (mirrored by the Rust registry, src/kernels/registry.rs)");
// The launch table as data, for the device harness (cuModuleGetGlobal): {BV, threads, dynamic smem} per variant.
extern "C" __device__ const int gdn_prefill_launch[4][3] = {
    {16, block_threads<16>(), smem_bytes<16, producers<16>()>()},
    {32, block_threads<32>(), smem_bytes<32, producers<32>()>()},
    {64, block_threads<64>(), smem_bytes<64, producers<64>()>()},
    {128, block_threads<128>(), smem_bytes<128, producers<128>()>()}};

}  // namespace gdn_prefill
