// prefill_chunk64/params.cuh — the chunk64 kernels' parameters and workspace record: Prefill64Params (mirrored byte
// for byte by the Rust runtime), Prefill64PlanParams (the device plan's build), the chunk constants, and the layout of
// the record the prep writes per (chunk, value head) and the walks read.
#pragma once

// Parameters of every gdn_prefill64_* kernel: the definition's tensors (8-byte fields first), 128 bytes; the serving
// build (GDN_SERVING, common/serving.cuh) appends the pool's row count and the serving-mode block, 272 bytes. The Rust
// runtime mirrors the serving build's struct (offsets in the comments) and passes it to both builds: a definition
// kernel declares, and the driver copies, only the first 128 bytes. Why two builds: a params struct over 128 bytes
// changes ptxas's code for the walks even where no serving branch runs (the 1x8192 plain walk 5% slower).
struct Prefill64Params {
    const __nv_bfloat16* q;        //   0: [T, H, 128] bf16
    const __nv_bfloat16* k;        //   8: [T, H, 128] bf16
    const __nv_bfloat16* v;        //  16: [T, HV, 128] bf16
    const __nv_bfloat16* a;        //  24: [T, HV] bf16; NULL with precomputed gates
    const __nv_bfloat16* b;        //  32: [T, HV] bf16; NULL likewise
    const float* A_log;            //  40: [HV] f32; NULL likewise
    const float* dt_bias;          //  48: [HV] f32; NULL likewise
    const void* cu_seqlens;        //  56: [N+1] int64 (int32 with SV_CU_I32), device memory; read only through
                                   //      cu_at (below)
    const void* state;             //  64: [rows, HV, 128, 128] (k-last, or K-first with SV_KFIRST) f32 (walk_f32)
                                   //      or bf16 (walk_bf16); NULL = zeros
    void* new_state;               //  72: same dtype / layout; row n for every sequence n (zeros for empty ones),
                                   //      or the pool itself (= state) in pool mode
    __nv_bfloat16* out;            //  80: [T, HV, 128] bf16
    void* workspace;               //  88: num_slots · HV · WS_CHUNK_BYTES bytes of records, then the walk's order
                                   //      (chunk64) or the cp states; 256-byte aligned (registry.rs)
    i64 num_seqs;                  //  96: N
    i64 total_tokens;              // 104: T
    float scale;                   // 112: resolved, never 0
    i32 num_q_heads;               // 116: H
    i32 num_v_heads;               // 120: HV (multiple of H)
    i32 seg_chunks;                // 124: context-parallel kernels: chunks per segment L >= 1 in bits 0-29, and
                                   //      CP_EXACT (bit 30): no cuts (others: ignored; the device plan: 0)
#ifdef GDN_SERVING
    i64 num_state_rows;            // 128: rows of state (the pool's in pool mode): a pool index >= this is padding
    ServingParams serving;         // 136: the serving modes (common/serving.cuh), 136 bytes
#endif
};
// The device plan's build (modules prefill64_dp / prefill64_wide_dp, compiled with GDN_DEVICE_PLAN;
// common/device_plan.cuh): the same kernels under the same names, each taking these thresholds after the params.
// Every CTA reads the longest sequence's length X from cu_seqlens: X < plan_from, the fused launch of the same call
// runs it and these exit; plan_from <= X < plan_cp_from, the chunk64 plan (prep, walk); X >= plan_cp_from, the cp plan
// (prep, passes, scan) with L = plan_cp_l_lo + (plan_cp_l_hi − plan_cp_l_lo)·(X − plan_cp_from)/(T − plan_cp_from).
// A build of its own so that host-planned calls run without the guard.
// The device plan's walk, cp passes and scan are persistent: a launch that is not the call's costs one wave of CTAs
// that read X and exit (~0.8 us per wave on the H200), where grids sized for the call (the walk N·HV·2, one per SM)
// take 2-11 waves. So each of them has at most one wave of CTAs (plan/prefill/types.rs `launched_ctas`), which
// loop over the grid the host sized (`vgrid`, the default build's grid of the same kernel; dp_items in
// prefill_chunk64.cu) by claiming the next item from a counter (their items differ: a CTA that is done takes the
// next, as the block scheduler would hand it a new CTA). The prep keeps its grid ((T/64 + N + 1)·HV CTAs, one item
// each: a loop would need twice its registers); it zeroes the counters, and runs whenever a launch that claims
// does, before it in the stream.
constexpr int DP_LAUNCHES = 5;     // prep, walk, cp pass 1, cp scan, cp pass 3 (the vgrid / counter index)
struct Prefill64PlanParams {
    i64 plan_from;                 //   0: tokens (0: always; i64 max: never)
    i64 plan_cp_from;              //   8: tokens (i64 max: never cp)
    i32 plan_cp_l_lo;              //  16: >= 1: the L the host sized the cp grids and workspace for
    i32 plan_cp_l_hi;              //  20: >= plan_cp_l_lo
    u32* claimed;                  //  24: DP_LAUNCHES counters in device memory (after the workspace; the prep zeroes
                                   //      them)
    u32 vgrid[DP_LAUNCHES][3];     //  32: each launch's grid as the default build would launch it (x, y, z)
    u32 pad;                       //  92
    Prefill64Params p;             //  96 (thresholds first: one Rust struct for both builds; 224 / 368 bytes)
};

namespace gdn_prefill64 {

constexpr int C = 64;              // chunk length (tokens)
constexpr int CP_EXACT = 1 << 30;  // Prefill64Params::seg_chunks: the cp plan never cuts (cp_passes.cuh)
// The context-parallel segment length L (chunks).
__device__ __forceinline__ int seg_len(const Prefill64Params& p) { return p.seg_chunks & (CP_EXACT - 1); }
constexpr int D = 128;             // head dim (K = V = 128)
constexpr int LDF = C + 4;         // padded f32 row stride of 64-column f32 tiles (272 B)

// ---- workspace record per (chunk, value head), written by the prep, read by the walks: two fp16 tiles [64 rows t][64
// columns t'] — Tb' = Tb / sT and P' = P / sP, sT and sP powers of two that bring the largest magnitude of the tile
// (Tb') or of each 16-row block (P') to [0.5, 1) — each a [64][128 B] panel in the 128-byte-swizzled layout wgmma reads
// (the 16-byte piece j of row r lives at piece j ^ (r & 7)), then the e-vectors. The walk moves the record with one bulk
// copy into a 1024-byte-aligned slot, so the swizzle phase (address bits 7-9) matches the row.
// The record holds no Tg = T diag(β e^γ) tile (the walk applies e^γ to Z in registers), and Tb and P are one fp16 tile
// each: fp16's 11-bit mantissa with a power-of-two scale (the range of bf16, no overflow) gives the errors of hi + lo
// bf16 pairs in an fp64 emulation at half the bytes: 17,408 per record, written once by the prep and read by both walk
// passes.
constexpr int WG_TILE = C * 128;                   // 8192
constexpr int WG_NTILE = 2;
// e-vectors, f32 [64] each: scale·e^{γ_i} (EGQ), e^{γ_C − γ_i} (EC), [e^{γ_C}, sT, λ, 0, sP_0..sP_3, then 56
// zeros] (EGC), e^{γ_i} (EG). P' rows 16w..16w+15 carry their own scale sP_w. λ = γ_C + Σ_t log max(1, |1 − β_t‖k_t‖²|)
// bounds the chunk's transitions: ‖S e^{γ_C} Π(I − β_t k_t k_tᵀ)‖ ≤ e^λ ‖S‖ (the cp cuts, cp_passes.cuh).
constexpr int WG_E = WG_NTILE * WG_TILE;
constexpr int EGC_SP = 4;  // index of sP_0 in EGC (16-byte aligned: the walk reads the four as one float4)
constexpr int EGC_LB = 2;  // index of λ in EGC
constexpr int WS_CHUNK_BYTES = WG_E + 4 * 4 * C;   // 17408
static_assert(WS_CHUNK_BYTES == 17408 && WS_CHUNK_BYTES % 256 == 0, "workspace record (mirrored by the Rust runtime)");

// Byte offset of the f16 pair (r, c..c+1) of record tile `tile` (0 Tb', 1 P').
__device__ __forceinline__ int rec_pair(int tile, int r, int c) {
    return tile * WG_TILE + r * 128 + ((((c >> 3) ^ (r & 7))) << 4) + ((c & 7) << 1);
}

}  // namespace gdn_prefill64
