// prefill64.cu — Gated Delta Net chunked varlen prefill on Hopper (sm_90a), the "chunk64" plan: chunks of 64
// tokens, a fully parallel preparation kernel (wgmma + mma.sync) and a state walker on warpgroup MMA (wgmma; bf16
// operands, fp32 accumulation, fp32 state).
//
// Compiled at run time by NVRTC (options: -arch=sm_90a -std=c++17 -I<cuda include> -I<this folder>); no system
// headers. Companion of prefill.cu (the one-launch fused kernel).
//
// STATUS (H200, results/prefill64.md): correct (every harness and `gdn check` row, numerics better than prefill.cu
// v5). The plain walk is slower than prefill.cu v5 in every ANCHORS configuration, so the runtime picks it only
// where the fused kernels cannot run (an odd number of value heads) or when forced; the context-parallel kernels
// (end of file) are the automatic plan for few long sequences (1x65536 894 us vs v5 2622; session 11: 838, 1x8192
// 158.5 — results/prefill64_s11.md; v6, session 12: 787 / 148 — results/prefill64_s12.md; session 13, two
// warpgroups per walk CTA: 694; v7, session 14, f16 operands: 582 / 128 — results/prefill64_s14.md). v7 runs 20
// wgmma per chunk for 64 value rows (v6: 44, hi + lo bf16 pairs): ~2.2 us per chunk for one warpgroup, ~2.8 for two
// (128 rows). Since v7 the chunk64 plan is also the automatic pick on many medium sequences (policy.rs). The prep
// (wgmma products, tensor-core inverse) costs ~3.2 us of SM time per (chunk, head); halving its record (v7) bought
// only 9%, so the record's bytes are not its bound. v8 (session 18, results/prefill_s18.md): the prep was bound by
// instruction issue, and 31% of its instructions were cvt.rna.tf32 emulation: a truncating split, ftz exponentials,
// Q Kᵀ and K Kᵀ one after the other (78 registers: 6 CTAs per SM instead of 5) and no exponentials above the
// diagonal blocks: prep 187 -> 153 us at 1x65536, the cp scan 29 -> 21 us (the same split).
// v9 (session 19, results/prefill_s19.md): the walks issue the next chunk's K/Q/V copies while B1 runs on the tensor
// cores (v8: before B1, on the chain), and every K/Q/V copy loop (walks and prep) advances one pointer per thread
// instead of forming a 64-bit offset per piece (pass 3 -20% SASS). Bitwise the same results; H200: the plain walk
// 1x8192 270 -> 208 us, 64x1024 410 -> 378; cp 1x65536 (L 114) 631 -> 586, 1x8192 (L 15) 118 -> 113.
// v10 (session 20, results/prefill_s20.md): the cp scan reads M and X in the order of its mma fragments (pass 1
// writes M that way, through shared memory) and takes M in one bulk copy per step: half its instructions, scan -20%
// (16-row CTAs) to -33% (8-row CTAs); H200, same process: 1x65536 (L 64, scan8) 692 -> 681 us, 1x8192 (L 16) 108.5
// -> 105.1. v11 (session 21, results/prefill_s21.md): the scan's grid covers only the sequences that can need it
// (scan_find_seq); the prep forms its record addresses from per-thread bases and zeroes T's upper blocks by a closed
// form (3384 -> 2920 SASS instructions): prep 146 -> 136.5 us at 1x65536, 26.1 -> 25.6 at 1x8192.
// v12 (session 22, results/prefill_s22.md): the prep and the cp passes find their sequence by a 128-point warp search
// (warp_last_true: one dependent load for up to 128 sequences, no 64-bit division; bisection took log2 N of each), and
// the values the walks derive their addresses from pass through redux.sync (uni64), so that they stay on the uniform
// datapath. A cp pass on many short sequences launches thousands of CTAs that only search and exit: H200, same
// process, 40x205 cp (L 2) 177.3 -> 141.9 us, cp2 137.1 -> 116.6; 57x144 cp 212.8 -> 163.1; single sequences even.
// v13 (session 22): the chunk64 walk runs the sequences longest first (the prep ranks them: walk_order). H200, same
// process, contest-mix chunk64 workloads: prefill_70 100.7 -> 80.8 us, prefill_91 100.8 -> 77.4, prefill_06 101.5 ->
// 83.3, prefill_97 88.6 -> 75.1, prefill_00 93.3 -> 82.0; equal lengths within 1.5% (40x205 81.2 -> 82.4).
// v14 (session 23, results/prefill_s23.md): the device plan's build (GDN_DEVICE_PLAN, Prefill64PlanParams; the default
// build is unchanged, SASS identical): for calls without a length hint, each kernel reads the longest sequence from
// cu_seqlens and runs the call as chunk64 or cp (its segment length chosen on the device) or exits. H200, gdn bench
// without the hint: contest-like mix 3730 -> 3003 us (hinted 2778).
// v15 (session 27, results/prefill_s27.md): the device plan's walks, cp passes and scan are persistent (dp_items): one
// wave of CTAs that claim the grid's items from a counter, so that a launch that is not the call's costs one wave of
// exits. The default build is unchanged (SASS identical). H200, without the hint: 64x1024 318.4 -> 307.9 us, prefill_15
// 174.6 -> 144.0 (the cp launches now pay their exits), the mix even (2978 -> 2976).
// v16 (session 30, results/prefill_s30.md): programmatic dependent launch (sm90.cuh, pdl_*). Every launch of a call
// after its first may be dispatched while its predecessor runs: the cp passes and the scan find their segment, and a
// device-plan launch decides it is not the call's, before griddepcontrol.wait; a launch that exits has only block 0
// wait (so the call still completes in order). Each body waits before it reads the workspace or writes anything; the
// device plan's prep never waits (it runs only when the launches before it, the fused tiles, exit). Where a launch
// lets its successor be dispatched (griddepcontrol.launch_dependents) was measured per route (H200, blind prefill
// workloads, results/prefill_s30.md): at the top of every kernel, except the device plan's prep when it runs the
// chunk64 route: there its walk dispatched as the prep's CTAs exit ran the call 4-9 us faster (4x2048 87.4 -> 82.6,
// prefill_14 91.3 -> 82.6) while the cp route lost 5-6 us the same way; and a fused tile that exits lets the
// prefill64 launches wait for its exit (prefill.cu v14.2).
//
// ---------------------------------------------------------------------------------------------------------
// Math (GDN.md §2), per (sequence, value head h), chunks of C = 64 tokens, chunk-local cumulative log-decay γ:
//   A = strict_lower(diag(β) K Kᵀ ⊙ exp(γ_i − γ_j)),  T = (I + A)⁻¹,  Tb = T diag(β),  Tg = T diag(β e^γ)
//   P = scale · (Q Kᵀ ⊙ exp(γ_i − γ_j) ⊙ [i ≥ j])
//   Vn = Tb V − Tg K Sᵀ-part,  i.e. in Sᵀ[v][k] form:  Z = Sᵀ Kᵀ,  Vnᵀ = Vᵀ Tbᵀ − Z Tgᵀ
//   Oᵀ = scale e^γ ⊙ (Sᵀ Qᵀ) + Vnᵀ Pᵀ,   Sᵀ ← e^{γ_C} Sᵀ + (Vnᵀ ⊙ e^{γ_C − γ}) K
// Only differences γ_i − γ_j (i ≥ j) and γ_C − γ_i are exponentiated (≤ 0): extreme gates stay finite. The last,
// partial chunk is padded with k = q = v = 0, β = 0, log g = 0 (exact: padded rows of Tb, Tg, P, Vn are 0).
//
// Two kernels, launched in this order on one stream (no host sync, nothing read on the host):
// 1. gdn_prefill64_prep — grid (num_slots·HV), block 128. One CTA per (chunk, value head): everything that
//    does not depend on the state (gates, γ scan, K Kᵀ and Q Kᵀ on wgmma, T by a blocked fp32 inverse: 16x16
//    diagonal blocks by forward substitution, then W_ik = T_ii A_ik and T_ij = −Σ_k W_ik T_kj on mma.sync in
//    3xTF32), written to a workspace record. Fully parallel: uses the whole GPU however few the sequences are.
//    Chunk j of sequence i lives in workspace slot f(i) + j with f(i) = cu_seqlens[i] / 64 + i, which is strictly
//    increasing in i and leaves room for every chunk; num_slots = T / 64 + N + 1. A CTA finds its (i, j) by a
//    search over cu_seqlens (v12: warp_last_true); slots that hold no chunk (at most N + 1 per head) exit at once.
//    For the chunk64 plan (v13) the head-0 CTA of each sequence's first slot also ranks the sequence by length and
//    writes the walk's order after the records (walk_order).
// 2. gdn_prefill64_walk_{f32,bf16} — grid N·HV·2, block 128 (one warpgroup). One CTA per (sequence, value head,
//    64-row value half), sequences longest first (v13): the sequential chain, on wgmma (see "wgmma walk" below for
//    the per-chunk batches and the shared-memory layouts). Double-buffered: the record by one bulk copy on an mbarrier, K/Q/V by cp.async.
//    History: a first walker split a 16-row value tile over 4 warps by k on mma.sync (~450 mma per warp per chunk,
//    2.5 us per chunk for 16 value rows); this one holds 64 value rows per SM at ~2.4 us per chunk: 4x the work
//    per SM, 2.6x faster on many sequences (results/prefill64.md).
//
// Layouts: q, k [T, H, 128] bf16; v [T, HV, 128] bf16; a, b [T, HV] bf16; state / new_state [N, HV, V, K] (k-last,
// fp32 or bf16 by walk variant); out [T, HV, 128] bf16; cu_seqlens int64 [N+1] in device memory. Value head h
// reads q/k head h / (HV / H). All offsets are 64-bit. HV need not be even here.
//
// Numerics: products with S use S rounded to bf16 (as FLA/FlashInfer); T is computed in fp32 (3xTF32 block products;
// v8: truncating splits, ~2^-20 relative). v7: Tb and P are one f16 tile each with power-of-two scales (Tb: one per
// tile; P, v8: one per 16 rows), V − Z e^γ and Vn are f16 A operands with a per-row power-of-two scale (the range of
// fp32, an 11-bit mantissa; v5/v6 carried hi + lo bf16 pairs, with the same errors in session 11's fp64 emulation
// and in the session-14 device checks); the update operand Vn e^{γC−γ} is one bf16.
// ---------------------------------------------------------------------------------------------------------
#include "gates.cuh"
#include "sm90.cuh"
#include "device_plan.cuh"

// Parameters of every gdn_prefill64_* kernel. 8-byte fields first; 128 bytes. Mirrored by the Rust runtime.
struct Prefill64Params {
    const __nv_bfloat16* q;        //   0: [T, H, 128] bf16
    const __nv_bfloat16* k;        //   8: [T, H, 128] bf16
    const __nv_bfloat16* v;        //  16: [T, HV, 128] bf16
    const __nv_bfloat16* a;        //  24: [T, HV] bf16
    const __nv_bfloat16* b;        //  32: [T, HV] bf16
    const float* A_log;            //  40: [HV] f32
    const float* dt_bias;          //  48: [HV] f32
    const i64* cu_seqlens;         //  56: [N+1] int64, device memory
    const void* state;             //  64: [N, HV, 128, 128] f32 (walk_f32) or bf16 (walk_bf16); NULL = zeros
    void* new_state;               //  72: same shape / dtype; every row written (zeros for empty sequences)
    __nv_bfloat16* out;            //  80: [T, HV, 128] bf16
    void* workspace;               //  88: num_slots · HV · WS_CHUNK_BYTES bytes of records, then the walk's order
                                   //      (chunk64) or the cp states; 256-byte aligned (registry.rs)
    i64 num_seqs;                  //  96: N
    i64 total_tokens;              // 104: T
    float scale;                   // 112: resolved, never 0
    i32 num_q_heads;               // 116: H
    i32 num_v_heads;               // 120: HV (multiple of H)
    i32 seg_chunks;                // 124: context-parallel kernels: chunks per segment L >= 1 (others: ignored; the
                                   //      device plan: 0)
};
// v14 (session 23), the device plan's build of this file (module prefill64_dp / prefill64_wide_dp, compiled with
// GDN_DEVICE_PLAN; device_plan.cuh): the same kernels under the same names, each taking these thresholds after the
// params. Every CTA reads the longest sequence's length X from cu_seqlens: X < plan_from, the fused launch of the same
// call runs it and these exit; plan_from <= X < plan_cp_from, the chunk64 plan (prep, walk); X >= plan_cp_from, the cp
// plan (prep, passes, scan) with L = plan_cp_l_lo + (plan_cp_l_hi − plan_cp_l_lo)·(X − plan_cp_from)/(T −
// plan_cp_from). A build of its own because a params struct of more than 128 bytes changed ptxas's code for the walks
// even where no guard ran (1x8192 plain walk 209 -> 220 us, 4x2048 76.0 -> 79.1; H200, same process): host-planned
// calls keep these kernels exactly as they were.
// v15 (session 27): the device plan's launches are persistent. A launch that is not the call's costs one wave of CTAs
// that read X and exit (~0.8 us per wave on the H200), and the grids sized for the call (prep (T/64 + N + 1)·HV CTAs,
// six per SM; the walk N·HV·2, one per SM) took 2-11 waves each: blind 64x1024 paid ~29 us of exits. So each launch
// now has at most one wave of CTAs (device_plan.rs `launched_ctas`), and they loop over the grid the host sized
// (`vgrid`, the default build's grid of the same kernel; dp_items below): the prep by a fixed stride (its items cost
// the same), the walks and the scan by claiming the next item from a counter (their items differ: a CTA that is done
// takes the next, as the block scheduler would hand it a new CTA). The prep zeroes the counters; it runs whenever a
// launch that claims does, before it in the stream.
constexpr int DP_LAUNCHES = 5;     // prep, walk, cp pass 1, cp scan, cp pass 3 (the vgrid / counter index)
struct Prefill64PlanParams {
    Prefill64Params p;             //   0
    i64 plan_from;                 // 128: tokens (0: always; i64 max: never)
    i64 plan_cp_from;              // 136: tokens (i64 max: never cp)
    i32 plan_cp_l_lo;              // 144: >= 1: the L the host sized the cp grids and workspace for
    i32 plan_cp_l_hi;              // 148: >= plan_cp_l_lo
    u32* claimed;                  // 152: DP_LAUNCHES counters in device memory (after the workspace; the prep zeroes
                                   //      them)
    u32 vgrid[DP_LAUNCHES][3];     // 160: each launch's grid as the default build would launch it (x, y, z)
    u32 pad;                       // 220
};

namespace gdn_prefill64 {

constexpr int C = 64;              // chunk length (tokens)
constexpr int D = 128;             // head dim (K = V = 128)
constexpr int LDF = C + 4;         // padded f32 row stride of 64-column f32 tiles (272 B)

// ---- workspace record per (chunk, value head), written by prep, read by walk (v7): two fp16 tiles [64 rows t][64
// columns t'] — Tb' = Tb / sT and P' = P / sP, sT and sP powers of two that bring the largest magnitude of the
// tile (Tb') or of each 16-row block (P', v8) to [0.5, 1) — each a [64][128 B] panel in the 128-byte-swizzled
// layout wgmma reads (the 16-byte piece j of row r lives at piece j ^ (r & 7)), then the e-vectors. The walk moves the record with one bulk copy into a
// 1024-byte-aligned slot, so the swizzle phase (address bits 7-9) matches the row.
// (v5: no Tg = T diag(β e^γ) tiles; the walk applies e^γ to Z in registers. v7: one fp16 tile each where v5/v6 kept
// Tb and P as hi + lo bf16 pairs: fp16's 11-bit mantissa with a per-tile power-of-two scale (the range of bf16, no
// overflow) gives the errors of the pairs in session 11's fp64 emulation, and the record is half its size: 17,408
// bytes, written once by prep and read by both walk passes.)
constexpr int WG_TILE = C * 128;                   // 8192
constexpr int WG_NTILE = 2;
// e-vectors, f32 [64] each: scale·e^{γ_i} (EGQ), e^{γ_C − γ_i} (EC), [e^{γ_C}, sT, 0, 0, sP_0..sP_3, then 56
// zeros] (EGC), e^{γ_i} (EG). v8: P' rows 16w..16w+15 carry their own scale sP_w (v7: one sP per tile).
constexpr int WG_E = WG_NTILE * WG_TILE;
constexpr int EGC_SP = 4;  // index of sP_0 in EGC (16-byte aligned: the walk reads the four as one float4)
constexpr int WS_CHUNK_BYTES = WG_E + 4 * 4 * C;   // 17408
static_assert(WS_CHUNK_BYTES == 17408 && WS_CHUNK_BYTES % 256 == 0, "workspace record (mirrored by the Rust runtime)");

// Byte offset of the f16 pair (r, c..c+1) of record tile `tile` (0 Tb', 1 P').
__device__ __forceinline__ int rec_pair(int tile, int r, int c) {
    return tile * WG_TILE + r * 128 + ((((c >> 3) ^ (r & 7))) << 4) + ((c & 7) << 1);
}

// wgmma shared-memory matrix descriptor, 128-byte swizzle: start address, leading / stride byte offsets (>> 4).
__device__ __forceinline__ u64 wg_desc(u32 addr, u32 lbo, u32 sbo) {
    return (u64)((addr & 0x3FFFFu) >> 4) | ((u64)((lbo & 0x3FFFFu) >> 4) << 16) | ((u64)((sbo & 0x3FFFFu) >> 4) << 32) |
           ((u64)1 << 62);
}
__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_wait0() { asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }
// Keep the compiler from moving reads/writes of accumulator registers across the asynchronous wgmma window.
template <int N>
__device__ __forceinline__ void wg_pin(float* r) {
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}
// Store four 8x8 bf16 matrices transposed (fragment (row g, cols 2t, 2t+1) of matrix i lands in rows 2t, 2t+1,
// column g of the stored matrix whose row addresses lanes 8i..8i+7 give).
__device__ __forceinline__ void stsm_x4_t(u32 addr, u32 r0, u32 r1, u32 r2, u32 r3) {
    asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1,%2,%3,%4};\n" ::"r"(addr), "r"(r0), "r"(r1),
                 "r"(r2), "r"(r3) : "memory");
}
// Named barrier `id` (1..15) over the 128 threads of one warpgroup.
__device__ __forceinline__ void wg_bar(int id) { asm volatile("bar.sync %0, 128;\n" ::"r"(id) : "memory"); }
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// D[64 x 128] (+)= A[64 x 16] (registers, bf16) . B[16 x 128] (shared memory descriptor, bf16); fp32 D.
template <int TNSP_B>
__device__ __forceinline__ void wgmma_m64n128(float* d, const u32* a, u64 desc, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
        "{" 
        "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
        "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,"
        "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,"
        "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63"
        "}, {%64,%65,%66,%67}, %68, p, 1, 1, %70;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
          "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(accumulate), "n"(TNSP_B));
}

// D[64 x 64] (+)= A[64 x 16] (registers) . B[16 x 64] (shared memory descriptor); fp32 D. Operand type TY: bf16
// (wgmma_m64n64: the state's products) or f16 (wgmma_m64n64_f16, v7: the products with the record's scaled tiles).
#define GDN_WGMMA_M64N64_RS(NAME, TY)                                                                                  \
    template <int TNSP_B>                                                                                              \
    __device__ __forceinline__ void NAME(float* d, const u32* a, u64 desc, int accumulate) {                           \
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"                                                    \
                     "wgmma.mma_async.sync.aligned.m64n64k16.f32." TY "." TY " "                                      \
                     "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"                                         \
                     "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31"                                 \
                     "}, {%32,%33,%34,%35}, %36, p, 1, 1, %38;\n}\n"                                                  \
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),            \
                       "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),        \
                       "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),     \
                       "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),     \
                       "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])                                              \
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(accumulate), "n"(TNSP_B));           \
    }
GDN_WGMMA_M64N64_RS(wgmma_m64n64, "bf16")
GDN_WGMMA_M64N64_RS(wgmma_m64n64_f16, "f16")
#undef GDN_WGMMA_M64N64_RS

// Two floats as an f16 pair (lo in the low 16 bits), round to nearest even.
__device__ __forceinline__ u32 pack_f16(float lo, float hi) {
    u32 r;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));  // hi to the upper 16 bits
    return r;
}
// v7: the power of two that brings a block whose largest magnitude is m (>= 0) to [0.5, 1): inv = 2^-(e+1) for
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
// tensor, advanced by a constant, and a shared-memory address that is the first one plus an immediate (v9; the loop formed
// ((start + r) H + hq) D + 8c afresh for every piece: ~3x the instructions, on the walk's chain).
template <int THREADS, bool LOADQ>
__device__ __forceinline__ void load_kq_rows(const Prefill64Params& p, u32 kq, i64 start, int nvalid, int hq,
                                             int tid) {
    static_assert(THREADS % 128 == 0, "whole warpgroups");
    constexpr int RS = THREADS / 16;
    const int r0 = tid >> 4, c = tid & 15;
    const i64 row = (i64)p.num_q_heads * D;  // elements between token rows
    const i64 off = (start + r0) * row + (i64)hq * D + c * 8;
    const __nv_bfloat16 *kp = p.k + off, *qp = p.q + off;
    const u32 dst = kq + (u32)(c >> 3) * (128 * 128) + swz(r0, c & 7);
#pragma unroll
    for (int it = 0; it < C / RS; ++it) {
        const bool ok = r0 + it * RS < nvalid;  // (a row past the end copies nothing from the tensor's base)
        cp_async16(dst + (u32)(it * RS * 128), ok ? kp : p.k, ok);
        if (LOADQ) cp_async16(dst + (u32)((C + it * RS) * 128), ok ? qp : p.q, ok);
        kp += RS * row;
        qp += RS * row;
    }
}

// D[64 x 64] (+)= A[64 x 16] . B[16 x 64], both from shared memory descriptors (K-major), bf16; fp32 D.
__device__ __forceinline__ void wgmma_m64n64_ss(float* d, u64 da, u64 db, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
        "{"
        "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
        "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31"
        "}, %32, %33, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "l"(da), "l"(db), "r"(accumulate));
}

// D = A·B + D, m16n8k8, tf32 inputs (as u32), f32 accumulators. Fragments (g = lane/4, t = lane%4): A a0 (g, t),
// a1 (g+8, t), a2 (g, t+4), a3 (g+8, t+4); B b0 (k t, n g), b1 (k t+4, n g); C as m16n8k16.
__device__ __forceinline__ void mma_tf32(float* c, const u32* a, u32 b0, u32 b1) {
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
// x = hi + lo, both tf32 by truncation (the low 13 bits cleared: two LOP3 and an FADD; cvt.rna.tf32.f32 is ~8
// instructions on sm_90, and was 31% of the prep's instructions in v7). hi·hi + hi·lo + lo·hi carry ~2^-20 relative
// error, far below the f16 the record stores T in.
__device__ __forceinline__ void split_tf32(float x, u32& hi, u32& lo) {
    hi = __float_as_uint(x) & 0xffffe000u;
    lo = __float_as_uint(x - __uint_as_float(hi)) & 0xffffe000u;
}

// ---- prep shared memory (v6). K and Q rows by cp.async into the walk's 128-byte-swizzled K-major layout: two
// 64-column panels [K rows 0..63 | Q rows 64..127] of 16 KB, which K Kᵀ and Q Kᵀ read as wgmma descriptors. A and T
// (f32, padded rows) replace them once those products are done (a barrier separates them): 35.5 KB per CTA + 1 KB to
// align the base, so 6 CTAs fit an SM.
constexpr int PKQ_OFF = 0;                         // 2 panels x [128 rows][128 B] bf16, swizzled (32768)
constexpr int PT_OFF = 0;                          // T f32 [64][68] over the K/Q panels
constexpr int PA_OFF = C * LDF * 4;                // A f32 [64][68] (17408), over the rest of them
constexpr int PG_OFF = PA_OFF + C * LDF * 4;       // γ f32 [64]
constexpr int PB_OFF = PG_OFF + 4 * C;             // β f32 [64]
constexpr int PR_OFF = PB_OFF + 4 * C;             // per-warp maxima f32 [2][4] (v8: only [1][·], Tb's scale)
constexpr int PREP_SMEM = PR_OFF + 32 + 1024;      // + slack to align the base to 1024 B
static_assert(PG_OFF >= PKQ_OFF + 2 * 128 * 128, "γ / β do not alias the K / Q panels");
static_assert(PREP_SMEM == 36384, "prep smem (mirrored by the Rust runtime)");

// First workspace slot of sequence i.
__device__ __forceinline__ i64 seq_slot(const i64* cu, i64 i) { return cu[i] / C + i; }

// A warp-uniform 64-bit value through redux.sync, whose result lands in a uniform register: ptxas then knows it is
// uniform. (A value it cannot prove uniform — a ballot's count, a 64-bit division done on the vector path — would take
// everything derived from it off the uniform datapath: in the cp walks, the wgmma descriptors and the bulk-copy
// addresses of the chunk loop, each wgmma then waiting on an R2UR; +10% per chunk.)
__device__ __forceinline__ i64 uni64(i64 v) {
    const u32 hi = __reduce_max_sync(0xffffffffu, (u32)((u64)v >> 32)), lo = __reduce_max_sync(0xffffffffu, (u32)v);
    return (i64)(((u64)hi << 32) | lo);
}

// The largest i in [0, n) with le(i) true, for a predicate that holds on a prefix of [0, n) including 0 (le(i): "key(i)
// <= x" for an increasing key); whole warps call it, and the result is uniform. v12 (session 22): each round the warp
// tests 128 evenly spaced points of the remaining range at once (4 independent loads per lane, 4 ballots), so n <= 128
// takes one dependent load where bisection took log2 n, each a load from L2 and, in find_segment, a 64-bit division
// (the predicates here divide by nothing). It matters where most CTAs only search and exit: a cp pass on many short
// sequences launches (T/64 + N + 1)/L + N + 1 segment slots times HV times 2-4 roles, one CTA per SM at a time.
template <class Le>
__device__ __forceinline__ i64 warp_last_true(i64 n, Le le) {
    constexpr int E = 4, PTS = 32 * E;  // points per lane, per round
    const int lane = threadIdx.x & 31;
    i64 lo = 0;  // the answer lies in [lo, lo + n)
    while (n > 1) {
        const i64 step = (n + PTS - 1) / PTS;
        // the points 1.. where le holds are a prefix; point 0 is lo itself. le is evaluated at every point (those out
        // of the range at lo, which is valid) so that the four loads issue together, not one branch after another
        bool in[E], t[E];
#pragma unroll
        for (int e = 0; e < E; ++e) {
            const int k = E * lane + e;
            const i64 y = lo + (i64)k * step;
            in[e] = k > 0 && y < lo + n;
            t[e] = le(in[e] ? y : lo);
        }
        int c = 0;
#pragma unroll
        for (int e = 0; e < E; ++e) c += __popc(__ballot_sync(0xffffffffu, in[e] && t[e]));
        const i64 nlo = lo + (i64)c * step;
        n = min(step, lo + n - nlo);
        lo = nlo;
    }
    return uni64(lo);
}

// ---- v13 (session 22): the chunk64 walk runs the sequences longest first. Its grid is N·HV·2 CTAs, one per SM at a
// time, in blockIdx order; in sequence order a long sequence that comes late starts its chain after most of the short
// ones have run (contest-like mix: the longest is at index 19-38 of 38-46 sequences in five of its chunk64 workloads,
// whose walks measured 12-25 us over their chain and work bounds). The prep writes the order (a permutation of the
// sequences, i64 [N], after the records) when the call is the chunk64 plan (seg_chunks == 0) and 2 <= N <=
// WALK_ORDER_MAX_N: ranking costs O(N) loads per sequence; wider calls keep sequence order.
constexpr i64 WALK_ORDER_MAX_N = 1024;
__device__ __forceinline__ bool chunk64_ordered(const Prefill64Params& p) {
    return p.seg_chunks == 0 && p.num_seqs >= 2 && p.num_seqs <= WALK_ORDER_MAX_N;
}
// Bytes of the prep's records at the start of the workspace (registry.rs prefill64_record_bytes); the walk's order
// (chunk64) or the cp states follow them.
__device__ __forceinline__ i64 record_bytes(const Prefill64Params& p) {
    return (p.total_tokens / C + p.num_seqs + 1) * (i64)p.num_v_heads * WS_CHUNK_BYTES;
}
__device__ __forceinline__ i64* walk_order(const Prefill64Params& p) {
    return reinterpret_cast<i64*>(reinterpret_cast<unsigned char*>(p.workspace) + record_bytes(p));
}
// Rank of sequence i among all: the sequences longer than it, or as long and before it (a strict total order, so the
// ranks are a permutation). All 128 threads of the CTA call it; wcount: 4 ints of shared memory (the prep's, no static
// array: that would cost the prep its sixth CTA per SM).
__device__ __forceinline__ void write_walk_order(const Prefill64Params& p, i64 i, int* wcount) {
    const i64* cu = p.cu_seqlens;
    const i64 li = cu[i + 1] - cu[i];
    int c = 0;
    for (i64 j = threadIdx.x; j < p.num_seqs; j += 128) {
        const i64 lj = cu[j + 1] - cu[j];
        c += lj > li || (lj == li && j < i);
    }
    c = __reduce_add_sync(0xffffffffu, c);
    if ((threadIdx.x & 31) == 0) wcount[threadIdx.x >> 5] = c;
    __syncthreads();
    if (threadIdx.x == 0) walk_order(p)[wcount[0] + wcount[1] + wcount[2] + wcount[3]] = i;
}

// ---- v14 (session 23): the device plan (Prefill64PlanParams). Each launch's part in it:
enum PlanPart { PART_PREP, PART_WALK, PART_CP };
// Whether this launch runs the call under the device plan, and its segment length: L for the cp plan (device_plan.rs
// Thresholds::seg_chunks_at), 0 for chunk64. Whole warps call it; every warp of the grid gets the same answer.
__device__ __forceinline__ bool device_plan_runs(const Prefill64PlanParams& pp, PlanPart part, int& seg_chunks) {
    const Prefill64Params& p = pp.p;
    const i64 x = longest_seq(p.cu_seqlens, p.num_seqs);
    if (x < pp.plan_from) return false;  // the fused launch's call
    const bool cp = x >= pp.plan_cp_from;
    if ((part == PART_WALK && cp) || (part == PART_CP && !cp)) return false;
    seg_chunks = 0;
    if (cp) {
        const i64 lo = pp.plan_cp_l_lo, hi = pp.plan_cp_l_hi > lo ? pp.plan_cp_l_hi : lo;
        const i64 span = p.total_tokens - pp.plan_cp_from, over = x - pp.plan_cp_from;
        const i64 l = span > 0 ? lo + (hi - lo) * (over < span ? over : span) / span : lo;
        seg_chunks = (int)uni64(l);  // (uniform: the walks' addresses derive from it)
    }
    return true;
}

// The block index a body runs: the CTA's own (GridIdx, read where the body reads it, so the default build's code is what
// it was before v15) or an item of a persistent device-plan launch (ItemIdx, dp_items).
struct GridIdx {
    __device__ __forceinline__ u32 x() const { return blockIdx.x; }
    __device__ __forceinline__ u32 y() const { return blockIdx.y; }
    __device__ __forceinline__ u32 z() const { return blockIdx.z; }
};
struct ItemIdx {
    u32 ix, iy, iz;
    __device__ __forceinline__ u32 x() const { return ix; }
    __device__ __forceinline__ u32 y() const { return iy; }
    __device__ __forceinline__ u32 z() const { return iz; }
};

// ================================================================== prep: one (chunk, value head) per CTA
template <class Bid>
__device__ __forceinline__ void prep_body(const Prefill64Params& p, const Bid bid) {
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    unsigned char* smem = smem_raw + ((1024u - (smem_addr(smem_raw) & 1023u)) & 1023u);
    const i64 N = p.num_seqs;
    const int HV = p.num_v_heads, H = p.num_q_heads;
    // grid (slots·HV): the value heads of one chunk are launched together, so the ones sharing a q/k head read its
    // K and Q from L2 (v5; H200: 1x65536 prep 284 -> 272 us against a (slots, HV) grid)
    const int h = (int)(bid.x() % (unsigned)HV);
    const i64 slot = bid.x() / (unsigned)HV;
    if (N <= 0) return;
    // the sequence: the largest i with f(i) <= slot (f strictly increasing, f(0) = 0)
    const i64 seq = warp_last_true(N, [&](i64 i) { return seq_slot(p.cu_seqlens, i) <= slot; });
    const i64 start = p.cu_seqlens[seq] + (slot - seq_slot(p.cu_seqlens, seq)) * C;
    const i64 eos = p.cu_seqlens[seq + 1];
    // v13: the chunk64 walk's order, longest sequence first. The CTA of sequence seq's first slot and head 0 (an
    // empty sequence has one too: it returns just below) ranks it and writes order[rank] = seq.
    if (chunk64_ordered(p) && h == 0 && start == p.cu_seqlens[seq])
        write_walk_order(p, seq, reinterpret_cast<int*>(smem + PR_OFF));  // (the maxima's words, free until the end)
    if (start >= eos) return;  // a slot that holds no chunk
    const int nvalid = eos - start < C ? (int)(eos - start) : C;
    const int hq = h / (HV / H);
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;

    float* Af = reinterpret_cast<float*>(smem + PA_OFF);
    float* Tf = reinterpret_cast<float*>(smem + PT_OFF);
    float* gam_s = reinterpret_cast<float*>(smem + PG_OFF);
    float* beta_s = reinterpret_cast<float*>(smem + PB_OFF);
    float* wmax = reinterpret_cast<float*>(smem + PR_OFF);
    unsigned char* rec = reinterpret_cast<unsigned char*>(p.workspace) + (slot * HV + h) * (i64)WS_CHUNK_BYTES;

    // ---- K, Q rows (cp.async, zero-filled past the end) into the swizzled panels. (Per-row bulk copies issued by one
    // warp were slower: the TMA unit takes small copies one after another.)
    load_kq_rows<128, true>(p, smem_addr(smem + PKQ_OFF), start, nvalid, hq, tid);
    cp_async_commit();
    // ---- gates: log-decay and β for token tid (< 64), inclusive scan of the log-decays per warp
    if (tid < C) {
        const bool ok = tid < nvalid;
        float lg = 0.f, be = 0.f;
        if (ok) {
            const i64 gi = (start + tid) * HV + h;
            lg = gdn_log_decay(__bfloat162float(p.a[gi]), p.dt_bias[h], p.A_log[h]);
            be = gdn_beta(__bfloat162float(p.b[gi]));
        }
#pragma unroll
        for (int off = 1; off < 32; off <<= 1) {
            const float y = __shfl_up_sync(0xffffffffu, lg, off);
            if (lane >= off) lg += y;
        }
        gam_s[tid] = lg;
        beta_s[tid] = be;
    }
    cp_async_wait<0>();
    fence_proxy_async();  // this thread's cp.async writes → visible to the async proxy (wgmma)
    __syncthreads();
    if (tid >= 32 && tid < C) gam_s[tid] += gam_s[31];
    // ---- Q Kᵀ, then K Kᵀ: 8 wgmma m64n64k16 each, A and B from the panels (v6; the mma.sync form gave warp w the
    // 16w+16 columns its rows need: four times warp 0's work on warp 3). Warp w gets rows 16w..16w+15 in the
    // mma.sync C layout: acc[n][r] = (row 16w + g + 8(r/2), column 8n + 2t + r%2).
    // v8 (session 18): the two products run one after the other, each consumed before the next is issued, so at
    // most 32 accumulators are live (v7 held K Kᵀ and Q Kᵀ together: 85 live registers, 96 allocated, 5 CTAs per
    // SM). P goes straight to the record with one power-of-two scale per warp (its 16 rows): no barrier, nothing
    // held. A cannot be written before K Kᵀ is done: it lies over the panels.
    const u64 dk = wg_desc(smem_addr(smem + PKQ_OFF), 16, 1024);
    auto kq_step = [](int s) { return (u64)(((s >> 2) * (128 * 128) + (s & 3) * 32) >> 4); };
    constexpr u64 QROWS = (C * 128) >> 4;  // the Q rows (64..127) of the panels
    float acc[8][4];
    wg_fence();
#pragma unroll
    for (int s = 0; s < 8; ++s) wgmma_m64n64_ss(&acc[0][0], dk + kq_step(s) + QROWS, dk + kq_step(s), s > 0);
    wg_commit();
    __syncthreads();  // γ complete (overlaps the products)
    wg_wait0();
    wg_pin<32>(&acc[0][0]);
    // ---- P' = P / sP_w as f16 pairs, straight to the record; sP_w = the power of two of warp w's rows
    {
        float pm = 0.f;
#pragma unroll
        for (int nt = 0; nt < 8; ++nt) {
            if (nt > 2 * warp + 1) {  // columns past the warp's rows (warp-uniform): zeros, no exponentials
#pragma unroll
                for (int r = 0; r < 4; ++r) acc[nt][r] = 0.f;
                continue;
            }
#pragma unroll
            for (int hr = 0; hr < 2; ++hr) {
                const int i = 16 * warp + g + 8 * hr;
                const float gi = gam_s[i];
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const int j = 8 * nt + 2 * t + e;
                    const float dec = exp_ftz(fminf(gi - gam_s[j], 0.f));
                    acc[nt][2 * hr + e] = i >= j ? acc[nt][2 * hr + e] * dec : 0.f;  // (scale: below)
                    pm = fmaxf(pm, fabsf(acc[nt][2 * hr + e]));
                }
            }
        }
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) pm = fmaxf(pm, __shfl_xor_sync(0xffffffffu, pm, off));
        // v11: the scale is applied with the power of two (inv exact, so P' = (Q Kᵀ ⊙ decay) · (scale · inv) differs
        // from v10's (scale · Q Kᵀ ⊙ decay) · inv by fp32 rounding only), and the 16 stores go through one base: row
        // 16w + g + 8hr has swizzle phase g, so pair (row, 8nt + 2t) sits at 1024·hr + 16·(nt ^ g) from row 16w + g's
        // piece 0 + 4t (v10 formed every address: ~90 SASS instructions for 16 stores)
        float inv, sP;
        pow2_scale(fabsf(p.scale) * pm, inv, sP);
        const float sinv = p.scale * inv;
        unsigned char* const prow = rec + WG_TILE + (16 * warp + g) * 128 + 4 * t;
#pragma unroll
        for (int nt = 0; nt < 8; ++nt) {
            unsigned char* const pc = prow + ((nt ^ g) << 4);
#pragma unroll
            for (int hr = 0; hr < 2; ++hr)
                *reinterpret_cast<u32*>(pc + 1024 * hr) = pack_f16(acc[nt][2 * hr] * sinv, acc[nt][2 * hr + 1] * sinv);
        }
        if (lane == 0) reinterpret_cast<float*>(rec + WG_E)[2 * C + EGC_SP + warp] = sP;
    }
    // ---- K Kᵀ
    wg_fence();
#pragma unroll
    for (int s = 0; s < 8; ++s) wgmma_m64n64_ss(&acc[0][0], dk + kq_step(s), dk + kq_step(s), s > 0);
    wg_commit();
    wg_wait0();
    wg_pin<32>(&acc[0][0]);
    __syncthreads();  // every warp is done with the K and Q panels: T and A take their place
    // zero the strictly-upper off-diagonal blocks of T (the record is written whole): row r of block row rb = r / 16
    // has (3 − rb)·4 float4 right of its diagonal block, 384 float4 in all (v7 tested all 4,096 entries). v11
    // (session 21): rows r and 63 − r (r < 32) have 12 between them, so thread tid writes pieces 3q .. 3q + 2 (q =
    // tid % 4) of pair tid / 4: piece e < n = 12 − 4·rb is row r's, the rest row 63 − r's (v8-v10: a loop per block
    // row with divisions by 12, 8 and 4, ~280 SASS instructions)
    {
        const int r = tid >> 2, rb = r >> 4, n = 12 - 4 * rb;
#pragma unroll
        for (int m = 0; m < 3; ++m) {
            const int e = 3 * (tid & 3) + m;
            const bool mine = e < n;  // row r, or row 63 − r (block row 3 − rb)
            const int row = mine ? r : 63 - r, c = mine ? 16 * (rb + 1) + 4 * e : 16 * (4 - rb) + 4 * (e - n);
            *reinterpret_cast<float4*>(Tf + row * LDF + c) = make_float4(0.f, 0.f, 0.f, 0.f);
        }
    }
    // ---- A (f32, smem, row-major, zero on and above the diagonal; the blocks above the diagonal block are never
    // read, so they are not written)
#pragma unroll
    for (int nt = 0; nt < 8; ++nt)
#pragma unroll
        for (int hr = 0; hr < 2; ++hr) {
            if (nt > 2 * warp + 1) continue;  // warp-uniform
            const int i = 16 * warp + g + 8 * hr;
            const int j0 = 8 * nt + 2 * t;
            const float gi = gam_s[i], bi = beta_s[i];
            float av[2];
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const int j = j0 + e;
                const float dec = exp_ftz(fminf(gi - gam_s[j], 0.f));  // (outside the select: no branch)
                av[e] = i > j ? bi * acc[nt][2 * hr + e] * dec : 0.f;
            }
            *reinterpret_cast<float2*>(Af + i * LDF + j0) = make_float2(av[0], av[1]);
        }
    __syncwarp();  // the diagonal block a warp inverts is made of its own rows of A
    // ---- diagonal blocks: warp w inverts I + A_ww by forward substitution (lane c < 16 owns column c).
    {
        const int c = lane & 15, b0 = 16 * warp;
        float col[16], acc[16];
#pragma unroll
        for (int i = 0; i < 16; ++i) acc[i] = 0.f;
#pragma unroll
        for (int j = 0; j < 16; ++j) {
            col[j] = j < c ? 0.f : (j == c ? 1.f : -acc[j]);
#pragma unroll
            for (int i = j + 1; i < 16; ++i) acc[i] = fmaf(Af[(b0 + i) * LDF + b0 + j], col[j], acc[i]);
        }
        if (lane < 16) {
#pragma unroll
            for (int i = 0; i < 16; ++i) Tf[(b0 + i) * LDF + b0 + c] = col[i];
        }
    }
    __syncthreads();
    // ---- off-diagonal blocks on tensor cores (v6; the scalar form read ~1,000 f32 from shared memory per thread).
    // With W_ik = T_ii A_ik (i > k), T = (I + A)⁻¹ has T_ij = −Σ_{k=j}^{i−1} W_ik T_kj for i > j: first W for the
    // six lower blocks (in place over A, each unit reading only the columns it writes), then T by block diagonal
    // d = 1, 2, 3 (each needs only blocks of smaller d). A unit = one 16 x 8 output tile (two per block) on
    // mma.sync m16n8k8 in 3xTF32 (hi·hi + hi·lo + lo·hi: ~fp32 accuracy), operands straight from the f32 tiles.
    {
        // c += X[r0 .. r0+16)[kx .. kx+8) · Y[ky .. ky+8)[n0 .. n0+8)
        auto step = [&](float* c, const float* X, int r0, int kx, const float* Y, int ky, int n0) {
            const float a[4] = {X[(r0 + g) * LDF + kx + t], X[(r0 + g + 8) * LDF + kx + t],
                                X[(r0 + g) * LDF + kx + t + 4], X[(r0 + g + 8) * LDF + kx + t + 4]};
            const float b0 = Y[(ky + t) * LDF + n0 + g], b1 = Y[(ky + t + 4) * LDF + n0 + g];
            u32 ah[4], al[4], bh0, bl0, bh1, bl1;
#pragma unroll
            for (int i = 0; i < 4; ++i) split_tf32(a[i], ah[i], al[i]);
            split_tf32(b0, bh0, bl0);
            split_tf32(b1, bh1, bl1);
            mma_tf32(c, al, bh0, bh1);
            mma_tf32(c, ah, bl0, bl1);
            mma_tf32(c, ah, bh0, bh1);
        };
        auto put = [&](float* M, int r0, int n0, const float* c, float sign) {
            *reinterpret_cast<float2*>(M + (r0 + g) * LDF + n0 + 2 * t) = make_float2(sign * c[0], sign * c[1]);
            *reinterpret_cast<float2*>(M + (r0 + g + 8) * LDF + n0 + 2 * t) = make_float2(sign * c[2], sign * c[3]);
        };
        // W: units u = 0..11 (block (i, k) = (1,0) (2,0) (2,1) (3,0) (3,1) (3,2), tile u & 1), warp w takes w, w+4, w+8
#pragma unroll
        for (int m = 0; m < 3; ++m) {
            const int u = warp + 4 * m, pr = u >> 1;
            const int i = pr == 0 ? 1 : (pr < 3 ? 2 : 3), k = pr == 0 ? 0 : (pr < 3 ? pr - 1 : pr - 3);
            const int n0 = 16 * k + 8 * (u & 1);
            float c[4] = {0.f, 0.f, 0.f, 0.f};
            step(c, Tf, 16 * i, 16 * i, Af, 16 * i, n0);
            step(c, Tf, 16 * i, 16 * i + 8, Af, 16 * i + 8, n0);
            __syncwarp();  // every lane has read this tile of A before any lane overwrites it with W
            put(Af, 16 * i, n0, c, 1.f);
        }
        __syncthreads();
        // T by block diagonal d: units (j, tile) for j < 4 − d, warp w takes w (and w + 4 when d = 1)
#pragma unroll
        for (int d = 1; d < 4; ++d) {
#pragma unroll
            for (int m = 0; m < 2; ++m) {
                const int u = warp + 4 * m;
                if (u < 2 * (4 - d)) {
                    const int j = u >> 1, i = j + d, n0 = 16 * j + 8 * (u & 1);
                    float c[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
                    for (int k = j; k < i; ++k) {
                        step(c, Af, 16 * i, 16 * k, Tf, 16 * k, n0);
                        step(c, Af, 16 * i, 16 * k + 8, Tf, 16 * k + 8, n0);
                    }
                    put(Tf, 16 * i, n0, c, -1.f);
                }
            }
            __syncthreads();
        }
    }
    // ---- Tb' = T diag(β) / sT as f16 pairs (v7; coalesced 4-byte stores), e-vectors
    {
        const float gC = gam_s[C - 1];
        // thread: rows 4m + warp (m < 16), columns 2·lane, + 1 (v11: one 8-byte load per pair from a per-thread base,
        // the record offsets from two bases by immediates; v7-v10 formed every address, ~110 SASS instructions)
        float tb[16][2], tm = 0.f;
        const float2 bc = *reinterpret_cast<const float2*>(beta_s + 2 * lane);
        const float* trow = Tf + warp * LDF + 2 * lane;
#pragma unroll
        for (int m = 0; m < 16; ++m) {
            const float2 x = *reinterpret_cast<const float2*>(trow + 4 * m * LDF);
            tb[m][0] = x.x * bc.x;
            tb[m][1] = x.y * bc.y;
            tm = fmaxf(tm, fmaxf(fabsf(tb[m][0]), fabsf(tb[m][1])));
        }
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) tm = fmaxf(tm, __shfl_xor_sync(0xffffffffu, tm, off));
        if (lane == 0) wmax[4 + warp] = tm;
        __syncthreads();
        float inv, sT;
        pow2_scale(fmaxf(fmaxf(wmax[4], wmax[5]), fmaxf(wmax[6], wmax[7])), inv, sT);
        // rec_pair(0, 4m + warp, 2·lane) = 512·m + rec_pair(0, warp, ·) for even m, 512·(m − 1) + rec_pair(0, warp + 4, ·)
        // for odd m (the swizzle phase (4m + warp) & 7 is warp or warp + 4)
        unsigned char* const rec0 = rec + rec_pair(0, warp, 2 * lane);
        unsigned char* const rec1 = rec + rec_pair(0, warp + 4, 2 * lane);
#pragma unroll
        for (int m = 0; m < 16; ++m)
            *reinterpret_cast<u32*>((m & 1 ? rec1 : rec0) + 512 * (m & ~1)) = pack_f16(tb[m][0] * inv, tb[m][1] * inv);
        float* ev = reinterpret_cast<float*>(rec + WG_E);
        if (tid < C) {
            const float eg = __expf(gam_s[tid]);
            ev[tid] = p.scale * eg;
            ev[C + tid] = __expf(gC - gam_s[tid]);
            ev[3 * C + tid] = eg;
        } else {
            const int i = tid - C;
            if (i < EGC_SP || i >= EGC_SP + 4) ev[2 * C + i] = i == 0 ? __expf(gC) : (i == 1 ? sT : 0.f);
        }
    }
}

// ================================================================== walk: the sequential chain on wgmma
// One CTA = one warpgroup (4 warps, 128 threads) per (sequence, value head, 64-row value half): grid N·HV·2.
// The warpgroup holds Sᵀ[64 v][128 k] as the fp32 accumulator of m64n128 wgmma (64 registers per thread: warp w
// owns rows 16w..16w+15, lane (g = lane/4, t = lane%4) rows g and g+8, columns 8j + 2t, +1 for j = 0..15 — the
// mma.sync C layout repeated), and runs each 64-token chunk as three batches of asynchronous wgmma:
//   B1  [Z | Y] = Sᵀ [Kᵀ | Qᵀ]        8 x m64n128k16, A = bf16(Sᵀ) from registers, B = [K rows | Q rows] panels
//   B2  Vn = (Vᵀ − Z diag(e^γ)) Tbᵀ   4 x m64n64k16 f16, A = Vᵀ (ldmatrix.trans) − Z e^γ (B1 accumulator), each
//       row scaled by a power of two, B = the Tb' tile (= U − Z Tgᵀ with Tg = Tb diag(e^γ): the record holds no Tg)
//   B3  Sᵀ = e^{γC} Sᵀ + (Vn ⊙ e^{γC−γ}) K   4 x m64n128k16, B = the same K panels read MN-major (transposed),
//       O = e^γ ⊙ Y + Vn P'ᵀ sP       4 x m64n64k16 f16, A = B2's unscaled result, B = the P' tile (two commit groups)
// i.e. 20 tensor-core instructions per chunk for 64 value rows (v6: 44 with hi + lo pairs; the mma.sync walker
// issued ~450 per warp for 16).
// Every A fragment of a batch is formed before the batch's wgmma.fence, and O has registers of its own: otherwise
// ptxas serialises every wgmma (C7511 "insufficient register resources"; checked in the SASS: one wait per batch).
// Every B operand sits in shared memory in the 128-byte-swizzled K-major layout (rows of 64 bf16 = 128 B, 8-row
// atoms of 1024 B, piece j of row r at j ^ (r & 7)): K and Q rows by cp.async into two 64-column panels
// [K rows 0..63 | Q rows 64..127], V by cp.async, the record (prep wrote it pre-swizzled) by one bulk copy.
// Two slots: chunk c+1 loads while chunk c computes. Outputs leave through a [token][v] staging tile (transposing
// stmatrix) as 16-byte stores. Numerics as the header says (S as one bf16, Tb/P/X/Vn as scaled f16, the update
// operand as one bf16). The layouts and both descriptor forms are checked by the harness `selftest`.
#ifndef WG_UPD_LBO
#define WG_UPD_LBO 16384  // MN-major B: stride between the two 64-column k panels
#define WG_UPD_SBO 1024   // MN-major B: stride between 8-token row groups
#endif
// Warpgroups per walk CTA, WGS (a template parameter of the walk): 1 — one CTA per 64-row value half (grid ·2);
// 2 (v6, session 12) — one CTA per head, a warpgroup per value half, sharing the slot's K, Q, V and record: each
// chunk's bytes move once for all 128 rows, and two warpgroups on an SM overlap one's tensor batches with the
// other's register work. Bitwise the same results. H200: a 2-warpgroup CTA walks a chunk in 3.2 us where a
// 1-warpgroup CTA takes 2.3 us for half the rows — it wins where the grid is throughput-bound (1x65536 cp at G = 17:
// 695 vs 780 us at the 1-warpgroup best G = 9; 2x16384: 362 vs 385) and loses where it is latency-bound (1x8192,
// 4x2048). The cost model (cost.rs) knows both forms; the policy picks the cheaper (results/prefill64_s13.md).
// Shared memory per CTA: two slots [K/Q panels | WGS V panels | record], WGS output staging tiles, two mbarriers.
constexpr int W2_LDO = 72;  // output staging row stride (bf16)
template <int WGS>
struct WalkLayout {
    static_assert(WGS == 1 || WGS == 2, "one or two warpgroups per walk CTA");
    static constexpr int THREADS = 128 * WGS;
    static constexpr int CTAS_PER_HEAD = 2 / WGS;  // CTAs per (sequence or segment, value head, role)
    static constexpr int KQ = 0;                   // 2 panels x [128 rows][128 B]
    static constexpr int V = 2 * 128 * 128;        // WGS x [64 t][64 v] bf16, swizzled (32768)
    static constexpr int REC = V + WGS * C * 128;  // record image (40960 / 49152)
    static constexpr int SLOT = ((REC + WS_CHUNK_BYTES + 1023) / 1024) * 1024;  // 74752 / 82944
    static constexpr int OS = 2 * SLOT;            // WGS staging tiles bf16 [64 t][72]
    static constexpr int BAR = OS + WGS * C * W2_LDO * 2;  // two FULL mbarriers
    static constexpr int SMEM = BAR + 16 + 1024;   // + slack to align the base to 1024 B
    static_assert(REC % 1024 == 0 && SLOT % 1024 == 0, "swizzled panels need 1024-byte alignment");
};
constexpr int WALK_SMEM = WalkLayout<1>::SMEM;
constexpr int WALK2_SMEM = WalkLayout<2>::SMEM;
static_assert(WALK_SMEM == 126992 && WALK2_SMEM == 152592, "wg walk smem (mirrored by the Rust runtime)");

// A fragment (k-step s, 16 columns) of an m64nN fp32 accumulator, as one bf16.
__device__ __forceinline__ void acc_to_a(const float* acc, int s, u32* a) {
    a[0] = pack_bf16(acc[8 * s + 0], acc[8 * s + 1]);
    a[1] = pack_bf16(acc[8 * s + 2], acc[8 * s + 3]);
    a[2] = pack_bf16(acc[8 * s + 4], acc[8 * s + 5]);
    a[3] = pack_bf16(acc[8 * s + 6], acc[8 * s + 7]);
}
template <int WGS, bool LOADQ>
__device__ __forceinline__ void walk_wg_issue(const Prefill64Params& p, unsigned char* slot, u32 bar,
                                              const unsigned char* rec, i64 start, int nvalid, int hq, int h, int v0,
                                              int tid, bool loadv) {
    using Lay = WalkLayout<WGS>;
    const int HV = p.num_v_heads;
    // (GDN_WG_NOREC / GDN_WG_NOKQV: timing ablations for the harness only — they skip loads, results are wrong)
#ifndef GDN_WG_NOREC
    if (tid == 0) {
        if (LOADQ) {
            mbar_arrive_expect_tx(bar, WS_CHUNK_BYTES);
            bulk_g2s(smem_addr(slot + Lay::REC), rec, WS_CHUNK_BYTES, bar);
        } else {  // a summary walk reads no P': the Tb' tile and the e-vectors only
            mbar_arrive_expect_tx(bar, WG_TILE + 4 * 4 * C);
            bulk_g2s(smem_addr(slot + Lay::REC), rec, WG_TILE, bar);
            bulk_g2s(smem_addr(slot + Lay::REC + WG_E), rec + WG_E, 4 * 4 * C, bar);
        }
    }
#else
    if (tid == 0) mbar_arrive_expect_tx(bar, 0);
#endif
#ifndef GDN_WG_NOKQV
    load_kq_rows<Lay::THREADS, LOADQ>(p, smem_addr(slot + Lay::KQ), start, nvalid, hq, tid);
    if (loadv) {  // V: the CTA's WGS halves, 512 pieces each, 4 per thread: piece pc of rows rv0, rv0 + 16, ...
        const int rv0 = tid / (8 * WGS), pc = tid % (8 * WGS);
        const i64 row = (i64)HV * D;
        const __nv_bfloat16* vp = p.v + (start + rv0) * row + (i64)h * D + v0 + pc * 8;
        const u32 dst = smem_addr(slot + Lay::V) + (u32)(pc >> 3) * (C * 128) + swz(rv0, pc & 7);
#pragma unroll
        for (int it = 0; it < 4; ++it) {
            const bool ok = rv0 + 16 * it < nvalid;
            cp_async16(dst + (u32)(16 * it * 128), ok ? vp : p.v, ok);
            vp += 16 * row;
        }
    }
#endif
    cp_async_commit();
}

// What one walk CTA runs: chunks [c0, c1) of sequence `seq` for value head h and value half vh, from an initial
// state to an end state. The plain walk runs whole sequences (state → new_state); the context-parallel kernels
// below run segments of L chunks (see "context parallelism").
// v10: M[k][n] (= Mᵀ[n][k]) in the cp scan's fragment order, which pass 1 writes (END_WS_T) and the scan copies as
// is: 16-byte pieces [warp n / 16][k / 16][step (k / 2) & 1][lane 4(n & 7) + (k / 4) & 3], each holding one lane's A
// fragment of one m16n8k8 step, word (n / 8) & 1 + 2(k & 1) of it (cp_scan). `kblocks` = the 16-row blocks of k
// per 16 columns n: 8 for all of M (the workspace), 4·WGS for one pass-1 CTA's rows (its staging).
__device__ __forceinline__ int scan_a_piece(int n, int k, int kblocks) {
    return (((n >> 4) * kblocks + (k >> 4)) * 2 + ((k >> 1) & 1)) * 32 + 4 * (n & 7) + ((k >> 2) & 3);
}
__device__ __forceinline__ int scan_a_word(int n, int k) { return ((n >> 3) & 1) + 2 * (k & 1); }
enum : int { INIT_ZERO = 0, INIT_STATE = 1, INIT_WS = 2, INIT_IDENTITY = 3 };
enum : int { END_NONE = 0, END_STATE = 1, END_WS = 2, END_WS_T = 3 };
// v15: the device plan's persistent CTAs (dp_items) run several walks (or scan items) on one pair of mbarriers, set up
// once and their phases carried on from item to item (re-initialising them made compute-sanitizer's racecheck lose
// the order between two items' bulk copies into the same slot). dp_bars: bit b = the parity barrier b has reached
// (its uses so far, mod 2), DP_BARS_READY = set up. dp_items zeroes it; the body that ends an item updates it.
constexpr u32 DP_BARS_READY = 4;
#ifdef GDN_DEVICE_PLAN
__shared__ u32 dp_bars;
#endif
struct WalkJob {
    i64 seq, bos, eos;        // sequence and its token range
    int h, vh, c0, c1;        // value head, value half, chunk range (chunk indices within the sequence)
    int init, end;            // INIT_* / END_*
    const float* init_ws;     // INIT_WS: f32 [128 v][128 k] of this (segment, head)
    float* end_ws;            // END_WS: likewise; END_WS_T (v10, pass 1's M): in the scan's order (scan_a_piece)
};

// SUMMARY = a context-parallel summary walk: only the state is carried (Z instead of [Z | Y], no Q, no output).
// ZEROV = V taken as 0 (the transition walk: V not loaded, U = 0). Both compile-time: a branch inside a wgmma
// window makes ptxas inject warpgroup.arrive.
template <int WGS, bool BF16STATE, bool SUMMARY, bool ZEROV = false>
__device__ __forceinline__ void walk_wg_body(const Prefill64Params& p, const WalkJob& job) {
    using Lay = WalkLayout<WGS>;
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    unsigned char* smem = smem_raw + ((1024u - (smem_addr(smem_raw) & 1023u)) & 1023u);
    const int HV = p.num_v_heads;
    const int h = job.h;
    const i64 seq = job.seq;
    const int hq = h / (HV / p.num_q_heads);
    const i64 bos = job.bos, eos = job.eos;
    const i64 len = eos > bos ? eos - bos : 0;
    const int c0 = job.c0, c1 = job.c1;
    // tid: the CTA's thread (loads); wg: this thread's warpgroup = its value half when WGS = 2; w: warp within it
    const int tid = threadIdx.x, wg = tid >> 7, w = (tid >> 5) & 3, lane = tid & 31, g = lane >> 2, t = lane & 3;
    const int vload = WGS == 2 ? 0 : 64 * job.vh;  // first value column the CTA loads
    const int v0 = WGS == 2 ? 64 * wg : 64 * job.vh;  // first value row of this warpgroup
    constexpr bool loadv = !ZEROV;
    const unsigned char* rec0 =
        reinterpret_cast<const unsigned char*>(p.workspace) + (seq_slot(p.cu_seqlens, seq) * HV + h) * (i64)WS_CHUNK_BYTES;
    const i64 rec_stride = (i64)HV * WS_CHUNK_BYTES;

    // Sᵀ rows v0 + 16w + g (+8), columns 8j + 2t (+1).
    float S[64];
    const i64 sbase = ((seq * HV + h) * D + v0 + 16 * w) * (i64)D;  // typed state / new_state
    const i64 wbase = (i64)(v0 + 16 * w) * D;                        // f32 [128][128] workspace states
    if (job.init == INIT_STATE && p.state != nullptr && len > 0) {
#pragma unroll
        for (int j = 0; j < 16; ++j) {
            const float2 x0 = StateIO<BF16STATE>::load(p.state, sbase + (i64)g * D + 8 * j + 2 * t);
            const float2 x1 = StateIO<BF16STATE>::load(p.state, sbase + (i64)(g + 8) * D + 8 * j + 2 * t);
            S[4 * j] = x0.x; S[4 * j + 1] = x0.y; S[4 * j + 2] = x1.x; S[4 * j + 3] = x1.y;
        }
    } else if (job.init == INIT_WS) {
#pragma unroll
        for (int j = 0; j < 16; ++j) {
            const float2 x0 = StateIO<false>::load(job.init_ws, wbase + (i64)g * D + 8 * j + 2 * t);
            const float2 x1 = StateIO<false>::load(job.init_ws, wbase + (i64)(g + 8) * D + 8 * j + 2 * t);
            S[4 * j] = x0.x; S[4 * j + 1] = x0.y; S[4 * j + 2] = x1.x; S[4 * j + 3] = x1.y;
        }
    } else {
        const int r0 = v0 + 16 * w + g;
        const bool eye = job.init == INIT_IDENTITY;
#pragma unroll
        for (int j = 0; j < 16; ++j) {
            const int k0 = 8 * j + 2 * t;
            S[4 * j] = eye && r0 == k0 ? 1.f : 0.f;
            S[4 * j + 1] = eye && r0 == k0 + 1 ? 1.f : 0.f;
            S[4 * j + 2] = eye && r0 + 8 == k0 ? 1.f : 0.f;
            S[4 * j + 3] = eye && r0 + 8 == k0 + 1 ? 1.f : 0.f;
        }
    }
    __nv_bfloat16* os = reinterpret_cast<__nv_bfloat16*>(smem + Lay::OS) + wg * (C * W2_LDO);
    const u32 bar0 = smem_addr(smem + Lay::BAR);
#ifdef GDN_DEVICE_PLAN
    const u32 bars = dp_bars;  // (a persistent CTA's later items: the barriers exist; their phases go on)
#else
    constexpr u32 bars = 0;
#endif
    if (tid == 0 && !(bars & DP_BARS_READY)) {
        mbar_init(bar0, 1);
        mbar_init(bar0 + 8, 1);
        mbar_init_fence();
    }
    __syncthreads();
    if (c1 > c0) {
        const i64 s0 = bos + (i64)c0 * C;
        walk_wg_issue<WGS, !SUMMARY>(p, smem, bar0, rec0 + (i64)c0 * rec_stride, s0,
                                     eos - s0 < C ? (int)(eos - s0) : C, hq, h, vload, tid, loadv);
    }
    // Vᵀ A fragments by ldmatrix.trans: lanes 8i..8i+7 address matrix i = (value rows +8·(i&1), tokens +8·(i>>1)).
    const int vt_row = (lane & 7) + 8 * (lane >> 4), vt_piece = 2 * w + ((lane >> 3) & 1);
    // Output staging: lanes 8m..8m+7 address rows (tokens) 8(m >> 1) + i, value columns 16w + 8(m & 1) of a 16-token pair.
    const u32 os_lane = smem_addr(os) + (u32)(((8 * (lane >> 4) + (lane & 7)) * W2_LDO + 16 * w + 8 * ((lane >> 3) & 1)) * 2);
    for (int c = c0; c < c1; ++c) {
        const int lc = c - c0;  // local chunk: slot lc & 1, mbarrier phase (lc >> 1) & 1
        unsigned char* slot = smem + (lc & 1) * Lay::SLOT;
        const i64 cstart = bos + (i64)c * C;
        cp_async_wait<0>();
        fence_proxy_async();  // this thread's cp.async writes → visible to the async proxy (wgmma)
        mbar_wait(bar0 + 8 * (lc & 1), ((u32)(lc >> 1) + (bars >> (lc & 1))) & 1u);
        __syncthreads();  // chunk c visible to all; everyone is done with chunk c-1 (its slot, the staging tile)
        const u32 kq = smem_addr(slot + Lay::KQ), vs = smem_addr(slot + Lay::V) + (u32)(wg * C * 128),
                  rs = smem_addr(slot + Lay::REC);
        const float* egq = reinterpret_cast<const float*>(slot + Lay::REC + WG_E);
        const float* ec = egq + C;
        const float egc = ec[C];
        const float* eg = egq + 3 * C;
        // Descriptors of this slot's operands; every step below adds a constant (address >> 4) to the start field.
        const u64 dkq = wg_desc(kq, 16, 1024), drec = wg_desc(rs, 16, 1024), dupd = wg_desc(kq, WG_UPD_LBO, WG_UPD_SBO);

        // ---- B1: [Z | Y] = Sᵀ [Kᵀ | Qᵀ] (summary: Z = Sᵀ Kᵀ)
        // (every A fragment of a batch is formed before its wgmma.fence: registers written after the fence
        // would make ptxas serialise the batch)
        constexpr int NZY = SUMMARY ? 32 : 64;
        float ZY[NZY];
        u32 aS[8][4], aV[4][4];
#pragma unroll
        for (int s = 0; s < 8; ++s) acc_to_a(S, s, aS[s]);
        if constexpr (loadv) {
#pragma unroll
            for (int s = 0; s < 4; ++s) ldsm_x4_t(vs + swz(16 * s + vt_row, vt_piece), aV[s]);
        }
        wg_fence();
#pragma unroll
        for (int s = 0; s < 8; ++s) {
            const u64 dk = dkq + (u64)(((s >> 2) * (128 * 128) + (s & 3) * 32) >> 4);
            if constexpr (SUMMARY) wgmma_m64n64<0>(ZY, aS[s], dk, s > 0);  // rows 0..63 of the panels: K
            else wgmma_m64n128<0>(ZY, aS[s], dk, s > 0);
        }
        wg_commit();
        // v9: chunk c+1's loads are issued while B1 runs on the tensor cores (v8 issued them before B1, on the chain)
        if (c + 1 < c1) {
            const i64 ns = cstart + C;
            walk_wg_issue<WGS, !SUMMARY>(p, smem + ((lc + 1) & 1) * Lay::SLOT, bar0 + 8 * ((lc + 1) & 1),
                                         rec0 + (i64)(c + 1) * rec_stride, ns, eos - ns < C ? (int)(eos - ns) : C, hq,
                                         h, vload, tid, loadv);
        }
        wg_wait0();
        wg_pin<NZY>(ZY);
        // ---- B2 (v7): Vn = (Vᵀ − Z diag(e^γ)) Tbᵀ as one f16 product. X = Vᵀ − Z e^γ (the transition walk: −Z e^γ)
        // is formed in fp32 in the accumulator layout (fragment i of k-step s: row g + 8(i & 1), token columns
        // 16s + 8(i >> 1) + 2t, +1), each value row scaled by a power of two (its largest magnitude over the quad's
        // 64 columns to [0.5, 1)), rounded to f16 once. Vn = Vs · (rowmul · sT) with Vs the f16 product's result
        // (|Vs| < 64). (v5/v6: U = Vᵀ Tbᵀ and Z e^γ Tbᵀ as hi + lo bf16 pairs, 20 wgmma instead of 4.)
        const float sT = ec[C + 1];
        float X[4][8];
        float rm0 = 0.f, rm1 = 0.f;  // row maxima: rows g (fragments 0, 2) and g + 8 (fragments 1, 3)
#pragma unroll
        for (int s = 0; s < 4; ++s) {
            const float2 e0 = *reinterpret_cast<const float2*>(eg + 16 * s + 2 * t);
            const float2 e1 = *reinterpret_cast<const float2*>(eg + 16 * s + 8 + 2 * t);
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const float2 e = i < 2 ? e0 : e1;
                float v0 = 0.f, v1 = 0.f;
                if constexpr (loadv) {
                    v0 = __uint_as_float(aV[s][i] << 16);
                    v1 = __uint_as_float(aV[s][i] & 0xffff0000u);
                }
                X[s][2 * i] = fmaf(-ZY[8 * s + 2 * i], e.x, v0);
                X[s][2 * i + 1] = fmaf(-ZY[8 * s + 2 * i + 1], e.y, v1);
                const float m = fmaxf(fabsf(X[s][2 * i]), fabsf(X[s][2 * i + 1]));
                if (i & 1) rm1 = fmaxf(rm1, m); else rm0 = fmaxf(rm0, m);
            }
        }
        rm0 = fmaxf(rm0, __shfl_xor_sync(0xffffffffu, rm0, 1));
        rm1 = fmaxf(rm1, __shfl_xor_sync(0xffffffffu, rm1, 1));
        rm0 = fmaxf(rm0, __shfl_xor_sync(0xffffffffu, rm0, 2));
        rm1 = fmaxf(rm1, __shfl_xor_sync(0xffffffffu, rm1, 2));
        float inv0, inv1, mul0, mul1;
        pow2_scale(rm0, inv0, mul0);
        pow2_scale(rm1, inv1, mul1);
        u32 ax[4][4];
#pragma unroll
        for (int s = 0; s < 4; ++s)
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const float iv = (i & 1) ? inv1 : inv0;
                ax[s][i] = pack_f16(X[s][2 * i] * iv, X[s][2 * i + 1] * iv);
            }
        float Vs[32];
        wg_fence();
#pragma unroll
        for (int s = 0; s < 4; ++s) wgmma_m64n64_f16<0>(Vs, ax[s], drec + (u64)((32 * s) >> 4), s > 0);
        wg_commit();
        wg_wait0();
        wg_pin<32>(Vs);
        mul0 *= sT;  // Vn rows g, g + 8 = Vs · mul
        mul1 *= sT;
        // ---- B3: Sᵀ = e^{γC} Sᵀ + (Vn ⊙ e^{γC−γ}) K;  O = e^γ ⊙ Y + Vn P'ᵀ sP (A = Vs as f16, |Vs| < 64; sP per
        // 16 output columns)
        float O[32];  // its own registers (accumulating onto ZY's upper half made ptxas serialise every wgmma)
#pragma unroll
        for (int i = 0; i < 64; ++i) S[i] *= egc;
        u32 vnu[4][4];
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            const float e0 = ec[8 * j + 2 * t], e1 = ec[8 * j + 2 * t + 1];
            vnu[j >> 1][2 * (j & 1)] = pack_bf16(Vs[4 * j] * mul0 * e0, Vs[4 * j + 1] * mul0 * e1);
            vnu[j >> 1][2 * (j & 1) + 1] = pack_bf16(Vs[4 * j + 2] * mul1 * e0, Vs[4 * j + 3] * mul1 * e1);
        }
        u32 vnh[4][4];
        if constexpr (!SUMMARY) {
#pragma unroll
            for (int s = 0; s < 4; ++s)
#pragma unroll
                for (int i = 0; i < 4; ++i) vnh[s][i] = pack_f16(Vs[8 * s + 2 * i], Vs[8 * s + 2 * i + 1]);
        }
        wg_fence();
#pragma unroll
        for (int s = 0; s < 4; ++s)  // B = K[16s .. 16s+16][0..128): MN-major, the two k panels LBO apart
            wgmma_m64n128<1>(S, vnu[s], dupd + (u64)((s * 2048) >> 4), 1);
        wg_commit();  // (the state update first, in its own group: with both in one group ptxas serialises)
        if constexpr (!SUMMARY) {
#pragma unroll
            for (int s = 0; s < 4; ++s) wgmma_m64n64_f16<0>(O, vnh[s], drec + (u64)((WG_TILE + 32 * s) >> 4), s > 0);
            wg_commit();
        }
        wg_wait0();
        wg_pin<64>(S);
        if constexpr (!SUMMARY) {
            wg_pin<32>(O);
            // P' rows = O columns 16b..16b+15 carry the scale sP_b (v8)
            const float4 sP4 = *reinterpret_cast<const float4*>(ec + C + EGC_SP);
            const float sP[4] = {sP4.x, sP4.y, sP4.z, sP4.w};
#pragma unroll
            for (int j = 0; j < 8; ++j) {
                const float e0 = egq[8 * j + 2 * t], e1 = egq[8 * j + 2 * t + 1];
                const float o0 = mul0 * sP[j >> 1], o1 = mul1 * sP[j >> 1];
                O[4 * j] = fmaf(O[4 * j], o0, ZY[32 + 4 * j] * e0);
                O[4 * j + 1] = fmaf(O[4 * j + 1], o0, ZY[33 + 4 * j] * e1);
                O[4 * j + 2] = fmaf(O[4 * j + 2], o1, ZY[34 + 4 * j] * e0);
                O[4 * j + 3] = fmaf(O[4 * j + 3], o1, ZY[35 + 4 * j] * e1);
            }
            // ---- outputs: stage [token][v] in shared memory (transposing stmatrix), then 16-byte stores
#pragma unroll
            for (int q = 0; q < 4; ++q)
                stsm_x4_t(os_lane + (u32)(16 * q * W2_LDO * 2), pack_bf16(O[8 * q], O[8 * q + 1]),
                          pack_bf16(O[8 * q + 2], O[8 * q + 3]), pack_bf16(O[8 * q + 4], O[8 * q + 5]),
                          pack_bf16(O[8 * q + 6], O[8 * q + 7]));
            wg_bar(1 + wg);  // this warpgroup's staging tile is complete (the other warpgroup runs on)
#pragma unroll
            for (int it = 0; it < 4; ++it) {
                const int idx = it * 128 + (tid & 127), r = idx >> 3, pc = idx & 7;
                const i64 tok = cstart + r;
                if (tok < eos)
                    *reinterpret_cast<uint4*>(p.out + (tok * HV + h) * (i64)D + v0 + 8 * pc) =
                        *reinterpret_cast<const uint4*>(os + r * W2_LDO + 8 * pc);
            }
        }
    }
    if (job.end == END_STATE) {
#pragma unroll
        for (int j = 0; j < 16; ++j) {
            StateIO<BF16STATE>::store(p.new_state, sbase + (i64)g * D + 8 * j + 2 * t, S[4 * j], S[4 * j + 1]);
            StateIO<BF16STATE>::store(p.new_state, sbase + (i64)(g + 8) * D + 8 * j + 2 * t, S[4 * j + 2], S[4 * j + 3]);
        }
    } else if (job.end == END_WS) {
#pragma unroll
        for (int j = 0; j < 16; ++j) {
            StateIO<false>::store(job.end_ws, wbase + (i64)g * D + 8 * j + 2 * t, S[4 * j], S[4 * j + 1]);
            StateIO<false>::store(job.end_ws, wbase + (i64)(g + 8) * D + 8 * j + 2 * t, S[4 * j + 2], S[4 * j + 3]);
        }
    } else if (job.end == END_WS_T) {
        // M in the scan's fragment order (scan_a_piece; row = k, column = n). The CTA's 64·WGS rows k are, for each
        // of the 8 column blocks n / 16, one contiguous run of it: staged in shared memory (the slots are free now)
        // in that order, then written as 16-byte pieces (v10: 4-byte scattered stores cost pass 1 2-5 us).
        constexpr int KB = 4 * WGS;                     // k-blocks of 16 rows in the CTA
        const int kl = (WGS == 2 ? v0 : 0) + 16 * w + g;  // row within the CTA
        const int kb0 = WGS == 2 ? 0 : v0 / 16;          // the CTA's first k-block
        // the staged pieces f lie at f ^ ((f >> 3) & 7): a store of a warp touches 16 banks, not 4 (the pieces of one
        // lane-row of fragments lie 8 apart); the read below undoes it
        auto lidx = [](int n, int k) {
            const int f = scan_a_piece(n, k, KB);
            return 4 * (f ^ ((f >> 3) & 7)) + scan_a_word(n, k);
        };
        float* st = reinterpret_cast<float*>(smem);
        __syncthreads();  // every warp is done with the slots
#pragma unroll
        for (int j = 0; j < 16; ++j) {
            const int n = 8 * j + 2 * t;
            st[lidx(n, kl)] = S[4 * j];
            st[lidx(n + 1, kl)] = S[4 * j + 1];
            st[lidx(n, kl + 8)] = S[4 * j + 2];
            st[lidx(n + 1, kl + 8)] = S[4 * j + 3];
        }
        __syncthreads();
        // run b (column block b, KB·256 floats) starts at piece scan_a_piece(16b, 16·kb0, 8) = (8b + kb0)·64
#pragma unroll 4
        for (int e = tid; e < KB * 64 * 8; e += Lay::THREADS) {
            const int rb = e / (KB * 64), i = e % (KB * 64);
            reinterpret_cast<float4*>(job.end_ws)[(rb * 8 + kb0) * 64 + i] =
                reinterpret_cast<const float4*>(st)[e ^ ((e >> 3) & 7)];
        }
    }
#ifdef GDN_DEVICE_PLAN
    // the next item of this persistent CTA continues both barriers' phases: barrier 0 completed ceil(n / 2) phases here,
    // barrier 1 floor(n / 2) (every thread read dp_bars before the set-up barrier above)
    if (tid == 0) {
        const u32 n = c1 > c0 ? (u32)(c1 - c0) : 0u;
        dp_bars = DP_BARS_READY | ((bars ^ ((n + 1) >> 1)) & 1u) | ((((bars >> 1) ^ (n >> 1)) & 1u) << 1);
    }
#endif
}

// The plain walk: one CTA per (sequence, value head, value half), grid N·HV·2, the whole sequence.
template <bool BF16STATE, class Bid>
__device__ __forceinline__ void walk_plain(const Prefill64Params& p, const Bid bid) {
    const int HV = p.num_v_heads;
    WalkJob j;
    j.vh = bid.x() & 1;
    j.h = (bid.x() >> 1) % HV;
    const i64 r = (i64)(bid.x() >> 1) / HV;  // v13: the r-th longest sequence (prep's order), else sequence r
    pdl_wait();  // (the order is the prep's)
    j.seq = chunk64_ordered(p) ? uni64(walk_order(p)[r]) : r;
    j.bos = p.cu_seqlens[j.seq];
    j.eos = p.cu_seqlens[j.seq + 1];
    const i64 len = j.eos > j.bos ? j.eos - j.bos : 0;
    j.c0 = 0;
    j.c1 = (int)((len + C - 1) / C);
    j.init = INIT_STATE;
    j.end = END_STATE;
    j.init_ws = nullptr;
    j.end_ws = nullptr;
    walk_wg_body<1, BF16STATE, false>(p, j);
}

// ================================================================== context parallelism (long sequences, few heads)
// The state walk is affine in its initial state: walking chunks [a, b) from Sᵀ₀ gives Sᵀ₀ M + B, with M (k x k) the
// product of the chunks' transitions and B the walk from zero. A sequence of nch chunks is cut into segments of
// L = p.seg_chunks chunks (nseg = max(1, ceil(nch / L))); three launches then run it on nseg times the CTAs:
//   pass 1  gdn_prefill64_cp_pass1_*  grid (seg slots, HV, 4): per (segment s, head, value half, role)
//           s = 0:            role 0 walks the segment for real (state → outputs; end state → S[s+1], or new_state
//                             when nseg = 1); role 1 exits
//           0 < s < nseg − 1: summary walks (no outputs): role 0 from zero with V → B[s]; role 1 from the identity
//                             with V = 0 → M[s] (the rows of the identity walk as value rows, so M is a walk state;
//                             v10: stored in the scan's fragment order, scan_a_piece)
//           s = nseg − 1:     nothing (its end state is never needed)
//   scan    gdn_prefill64_cp_scan{,8} grid K·HV·8 (·16), K = min(N, T / (128·L + 1)) (v11: the sequences that can
//           have nseg ≥ 3; scan_find_seq), block 256: S[s] = S[s−1] M[s−1] + B[s−1] for s = 2 .. nseg−1
//           (fp32, 16 (8) value rows per CTA; M double-buffered in shared memory by cp.async, the next step's M
//           loading while this step computes)
//   pass 3  gdn_prefill64_cp_pass3_*  grid (seg slots, HV, 2): segments s ≥ 1 walk for real from S[s] (outputs;
//           the last one writes new_state)
// Work: ~2 walks per segment instead of one, spread over nseg times as many CTAs; the summary walks skip Q, Y, O and
// the output staging. Segment s of sequence i lives in segment slot g(i) + s, g(i) = f(i) / L + i with f the
// chunk-slot map above: g(i+1) − g(i) ≥ floor(nch_i / L) + 1 ≥ nseg_i, and every slot is < (T/64 + N + 1)/L + N + 1.
// Workspace after the chunk records: three f32 arrays [seg slots][HV][128][128] — S (segment start states, [v][k]),
// M (v10: in the scan's fragment order), B ([v][k]). Numerics: the summary walks round their states to bf16 in products exactly like the real walk; the scan is fp32
// (v6: 3xTF32 products, fp32 accumulation).
constexpr int SCAN_ROWS = 16;                                      // value rows per scan CTA (at most)
constexpr int SCAN_X_OFF = 2 * D * D * 4;                          // X hi, lo u32 [16][128] after the two M buffers
constexpr int SCAN_BAR_OFF = SCAN_X_OFF + 2 * SCAN_ROWS * D * 4;  // one mbarrier per M buffer
constexpr int SCAN_SMEM = SCAN_BAR_OFF + 16;                       // 2 x M f32 [128][128] + X + 2 mbarriers
static_assert(SCAN_SMEM == 147472, "cp scan smem (mirrored by the Rust runtime)");

__device__ __forceinline__ i64 seg_first(const i64* cu, i64 i, int L) { return seq_slot(cu, i) / L + i; }
__device__ __forceinline__ i64 cp_seg_slots(const Prefill64Params& p) {
    return (p.total_tokens / C + p.num_seqs + 1) / p.seg_chunks + p.num_seqs + 1;
}
// f32 [128][128] workspace state `which` (0 S, 1 M, 2 B) of segment slot `slot`, value head h.
__device__ __forceinline__ float* cp_ws(const Prefill64Params& p, int which, i64 slot, int h) {
    unsigned char* base = reinterpret_cast<unsigned char*>(p.workspace) + record_bytes(p);
    return reinterpret_cast<float*>(base) + (((i64)which * cp_seg_slots(p) + slot) * p.num_v_heads + h) * (i64)(D * D);
}

struct SegPos {
    i64 seq, bos, eos, first;  // sequence, its tokens, its first segment slot
    int s, nseg, nch;          // this segment, segments and chunks of the sequence
};
// The (sequence, segment) of segment slot `slot`; false for a slot that holds no segment. Whole warps call it (the
// result is uniform).
__device__ __forceinline__ bool find_segment(const Prefill64Params& p, i64 slot, SegPos& sp) {
    const i64 N = p.num_seqs;
    const int L = p.seg_chunks;
    if (N <= 0 || L <= 0) return false;
    // the largest i with g(i) = f(i) / L + i <= slot (g strictly increasing, g(0) = 0); with f(i) >= 0 and
    // m = slot − i, f(i) / L <= m  <=>  m >= 0 and f(i) < (m + 1)·L: no division
    const i64 lo = warp_last_true(N, [&](i64 i) {
        return (i <= slot) & (seq_slot(p.cu_seqlens, i) < (slot - i + 1) * L);
    });
    // (uni64: the division and the loads below may be compiled on the vector path; the walk's addresses derive from
    // them)
    sp.seq = lo;
    const i64 f = seq_slot(p.cu_seqlens, lo);
    sp.first = uni64((f >> 32 ? f / L : (i64)((u32)f / (u32)L)) + lo);  // (a 32-bit division where it fits)
    sp.bos = uni64(p.cu_seqlens[lo]);
    sp.eos = uni64(p.cu_seqlens[lo + 1]);
    const i64 len = sp.eos > sp.bos ? sp.eos - sp.bos : 0;
    sp.nch = (int)((len + C - 1) / C);
    sp.nseg = sp.nch > L ? (sp.nch + L - 1) / L : 1;
    const i64 s = slot - sp.first;
    if (s >= sp.nseg) return false;
    sp.s = (int)s;
    return true;
}

__device__ __forceinline__ WalkJob segment_job(const SegPos& sp, int h, int vh, int L) {
    WalkJob j;
    j.seq = sp.seq; j.bos = sp.bos; j.eos = sp.eos;
    j.h = h; j.vh = vh;
    j.c0 = sp.s * L;
    j.c1 = min(sp.nch, (sp.s + 1) * L);
    j.init = INIT_ZERO; j.end = END_NONE;
    j.init_ws = nullptr; j.end_ws = nullptr;
    return j;
}

template <int WGS, bool BF16STATE, class Bid>
__device__ __forceinline__ void cp_pass1(const Prefill64Params& p, const Bid bid) {
    constexpr int CPH = WalkLayout<WGS>::CTAS_PER_HEAD;
    SegPos sp;
    if (!find_segment(p, bid.x(), sp)) return;
    const int h = bid.y(), vh = bid.z() % CPH, role = bid.z() / CPH;
    WalkJob j = segment_job(sp, h, vh, p.seg_chunks);
    if (sp.s == 0 && role != 0) return;
    if (sp.s >= sp.nseg - 1 && sp.s > 0) return;  // (the last segment's end state is never needed)
    pdl_wait();  // v16: the search above ran while the prep finished
    if (sp.s == 0) {
        j.init = INIT_STATE;
        if (sp.nseg == 1) {
            j.end = END_STATE;
        } else {
            j.end = END_WS;
            j.end_ws = cp_ws(p, 0, sp.first + 1, h);
        }
        walk_wg_body<WGS, BF16STATE, false>(p, j);
    } else if (sp.s < sp.nseg - 1) {
        j.end = END_WS;
        if (role == 0) {
            j.end_ws = cp_ws(p, 2, bid.x(), h);
            walk_wg_body<WGS, BF16STATE, true>(p, j);
        } else {
            j.init = INIT_IDENTITY;
            j.end = END_WS_T;
            j.end_ws = cp_ws(p, 1, bid.x(), h);
            walk_wg_body<WGS, BF16STATE, true, true>(p, j);
        }
    }
}

template <int WGS, bool BF16STATE, class Bid>
__device__ __forceinline__ void cp_pass3(const Prefill64Params& p, const Bid bid) {
    SegPos sp;
    if (!find_segment(p, bid.x(), sp) || sp.s == 0) return;
    pdl_wait();  // v16: the search above ran while the scan (or pass 1) finished
    const int h = bid.y();
    WalkJob j = segment_job(sp, h, bid.z() % WalkLayout<WGS>::CTAS_PER_HEAD, p.seg_chunks);
    j.init = INIT_WS;
    j.init_ws = cp_ws(p, 0, bid.x(), h);
    j.end = sp.s == sp.nseg - 1 ? END_STATE : END_NONE;
    walk_wg_body<WGS, BF16STATE, false>(p, j);
}

// One CTA per (sequence with nseg ≥ 3, value head, ROWS value rows): X = S[s−1] rows; S[s] rows = X M[s−1] + B[s−1]
// rows. ROWS = 16 (grid K·HV·8) or 8 (grid K·HV·16: twice the SMs per step, for few chains — policy.rs picks by the
// wave count).
// v6: on tensor cores, transposed so the value rows are the N dimension: S[s]ᵀ = M[s−1]ᵀ Xᵀ + B[s−1]ᵀ, warp w (of 8)
// owns output columns 16w..16w+15 (one m16 tile of Mᵀ) for all ROWS rows (ROWS / 8 n8 tiles), 16 k8 steps of
// mma.sync m16n8k8 in 3xTF32 (hi·hi + hi·lo + lo·hi, ~fp32 accuracy). (v5 and before: one FMA per element, ~1,400
// instructions per thread per step, ~3.4 us per step; the scan was issue-bound.)
// v10 (session 20): fragment-native layouts. A k8 step's k order is free (A and B only have to agree), so steps 2j
// and 2j + 1 take, in lane slot t / t + 4, k = 16j + 4t / 16j + 4t + 1 and 16j + 4t + 2 / 16j + 4t + 3. Pass 1
// writes M in the order of the A fragments (scan_a_piece: a lane's a0..a3 of one step are one 16-byte piece, lanes
// contiguous), and X is kept as its tf32 hi and lo parts (split once, when written; v6 had all 8 warps split all of
// X every step) in the order of the B fragments (scan_b_idx: b0, b1 of steps 2j and 2j + 1 = X[r][16j + 4t ..
// + 3], one 16-byte piece). Per 16 k a warp issues 2 + 2·ROWS/8 conflict-free LDS.128 and 8 splits, and no register
// moves (v6: 8 + 4·ROWS/8 LDS.32 and 8 + 4·ROWS/8 splits; the operand registers had to be gathered into quads).
// M of step s sits in buffer s & 1 and comes in one 64 KB bulk copy (v10; v6: 4,096 16-byte cp.async by 256 threads),
// issued a step ahead, so each step's load overlaps the previous step's arithmetic; B of step s+1 is read into
// registers during step s. (Measured in session 20 and not kept: three buffers, i.e. a copy two steps ahead, -2% scan
// time for 64 KB more shared memory; six accumulator chains of 8 mma instead of two of 24, +3%.)
__device__ __forceinline__ int scan_b_idx(int r, int k) {
    return (((r >> 3) * 8 + (k >> 4)) * 32 + 4 * (r & 7) + ((k >> 2) & 3)) * 4 + (k & 3);
}
// Copy M (64 KB, already in fragment order) into `buf`: one bulk copy by thread 0 on mbarrier `bar`.
__device__ __forceinline__ void cp_scan_stage(const float* M, float* buf, u32 bar, int tid) {
    if (tid == 0) {
        mbar_arrive_expect_tx(bar, D * D * 4);
        bulk_g2s(smem_addr(buf), M, D * D * 4, bar);
    }
}
// v11 (session 21): the scan's grid covers only the sequences that can have three segments or more. Sequence i needs
// the scan when nch > 2L chunks, i.e. more than 128·L tokens, so at most K = min(N, floor(T / (128·L + 1))) of them
// do (their lengths sum to at most T); the grid is K·HV·(128 / ROWS) CTAs (`policy::cp_scan_seqs`, from T, N and L
// alone: no lengths on the host), and CTA rank k finds the k-th such sequence here. (Until v10 the grid was N·HV·8 or
// ·16 CTAs of 147 KB, one per SM, and on many-sequence workloads nearly all of them exited at once: ~0.65 us per
// wave of them, 5-16 us per call on the contest mix's cp workloads.)
// The search: passes of 1024 sequences, each thread flags 4 consecutive ones, a block exclusive scan of the flag
// counts locates the owner of rank k. All 256 threads call it; the result is uniform. -1: fewer than k + 1 such
// sequences (the bound K is not tight). Lengths are read as in find_segment (a negative one counts as 0).
__device__ __forceinline__ i64 scan_find_seq(const Prefill64Params& p, i64 k, int tid) {
    constexpr int E = 4;  // sequences per thread per pass
    __shared__ int wsum[8];
    __shared__ i64 hit;
    const int warp = tid >> 5, lane = tid & 31;
    const i64 N = p.num_seqs, lim = (i64)C * 2 * p.seg_chunks;
    if (N <= 0) return -1;
    if (tid == 0) hit = -1;
    i64 before = 0;  // such sequences in earlier passes
    for (i64 base = 0; base < N; base += 256 * E) {
        const i64 i0 = base + (i64)E * tid;
        unsigned bits = 0;
        if (i0 < N) {
            i64 c[E + 1];
#pragma unroll
            for (int e = 0; e <= E; ++e) c[e] = i0 + e <= N ? p.cu_seqlens[i0 + e] : 0;
#pragma unroll
            for (int e = 0; e < E; ++e)
                if (i0 + e < N && c[e + 1] - c[e] > lim) bits |= 1u << e;
        }
        const int cnt = __popc(bits);
        int incl = cnt;
#pragma unroll
        for (int off = 1; off < 32; off <<= 1) {
            const int y = __shfl_up_sync(0xffffffffu, incl, off);
            if (lane >= off) incl += y;
        }
        if (lane == 31) wsum[warp] = incl;
        __syncthreads();  // (also publishes hit = -1)
        int excl = incl - cnt, total = 0;
#pragma unroll
        for (int w = 0; w < 8; ++w) {
            excl += w < warp ? wsum[w] : 0;
            total += wsum[w];
        }
        const i64 r = k - before - excl;  // rank k among this thread's flags
        if (r >= 0 && r < cnt) {
            unsigned b = bits;
            for (int j = 0; j < (int)r; ++j) b &= b - 1;  // drop the r lowest flags
            hit = i0 + __ffs((int)b) - 1;
        }
        before += total;
        __syncthreads();  // hit written; wsum free for the next pass
        if (hit >= 0 || before > k) break;
    }
    return hit;
}
template <int ROWS, class Bid>
__device__ __forceinline__ void cp_scan(const Prefill64Params& p, const Bid bid) {
    constexpr int NT = ROWS / 8;  // n8 tiles (value rows)
    extern __shared__ __align__(16) unsigned char smem[];
    float* Mbuf = reinterpret_cast<float*>(smem);
    u32* Xh = reinterpret_cast<u32*>(smem + SCAN_X_OFF);  // X = S[s−1] rows, tf32 hi parts [ROWS·128] (scan_b_idx)
    u32* Xl = Xh + ROWS * D;                              // ... and lo parts
    const u32 bar0 = smem_addr(smem + SCAN_BAR_OFF);
    const int HV = p.num_v_heads, L = p.seg_chunks;
    const int rb = bid.x() % (D / ROWS);
    const int h = (bid.x() / (D / ROWS)) % HV;
    if (L <= 0) return;
    // v11: the (k = bid.x() / (128 / ROWS) / HV)-th sequence with three segments or more
    const i64 seq = scan_find_seq(p, (i64)bid.x() / (D / ROWS) / HV, threadIdx.x);
    if (seq < 0) return;
    const i64 bos = p.cu_seqlens[seq], eos = p.cu_seqlens[seq + 1];
    const i64 len = eos > bos ? eos - bos : 0;
    const int nch = (int)((len + C - 1) / C);
    const int nseg = nch > L ? (nch + L - 1) / L : 1;
    if (nseg < 3) return;
    pdl_wait();  // v16: the search above ran while pass 1 finished
    const i64 first = seg_first(p.cu_seqlens, seq, L);
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
    const int m0 = 16 * warp;
    // S, M, B of segment slot first + i are these + i·sstride (v10: formed once; cp_ws divides by L in 64 bits, and
    // v6 called it three times per step)
    const i64 sstride = (i64)HV * D * D;
    float* const Sw = cp_ws(p, 0, first, h) + ROWS * rb * D;  // (the CTA's rows)
    const float* const Mw = cp_ws(p, 1, first, h);
    const float* const Bw = cp_ws(p, 2, first, h) + ROWS * rb * D;
    // this thread's outputs: tile nt, element e: row 8nt + 2t + (e & 1), column m0 + g + 8(e >> 1)
    auto out_off = [&](int nt, int e) { return (8 * nt + 2 * t + (e & 1)) * D + m0 + g + 8 * (e >> 1); };
#ifdef GDN_DEVICE_PLAN
    const u32 bars = dp_bars;  // (as in walk_wg_body)
#else
    constexpr u32 bars = 0;
#endif
    if (tid == 0 && !(bars & DP_BARS_READY)) {
        mbar_init(bar0, 1);
        mbar_init(bar0 + 8, 1);
        mbar_init_fence();
    }
    __syncthreads();
    cp_scan_stage(Mw + sstride, Mbuf, bar0, tid);  // M of step 2 (segment slot first + 1) → buffer 0
    float bn[NT][4];  // B of the next step
    {
        const float* X0 = Sw + sstride;
        const float* B0 = Bw + sstride;
        for (int e = tid; e < ROWS * D; e += 256) {
            const int i = scan_b_idx(e >> 7, e & (D - 1));
            split_tf32(X0[e], Xh[i], Xl[i]);
        }
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) bn[nt][e] = B0[out_off(nt, e)];
    }
    // this lane's fragments: A pieces [warp][j][step][lane], B pieces [nt][j][lane]
    const uint4* xh4 = reinterpret_cast<const uint4*>(Xh) + lane;
    const uint4* xl4 = reinterpret_cast<const uint4*>(Xl) + lane;
    for (int s = 2; s < nseg; ++s) {
        // step s: M of segment slot first + s − 1 in buffer s & 1, its mbarrier's phase (s − 2) / 2; step s + 1's M
        // goes into the other buffer, which step s − 1 used (everyone is done with it: the barrier after its products)
        const float* Ms = Mbuf + (s & 1) * D * D;
        if (s + 1 < nseg) cp_scan_stage(Mw + s * sstride, Mbuf + ((s + 1) & 1) * D * D, bar0 + 8 * ((s + 1) & 1), tid);
        float acc[2][NT][4];  // steps 2j and 2j + 1 (two k halves of every 16), summed at the end
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) { acc[0][nt][e] = bn[nt][e]; acc[1][nt][e] = 0.f; }
        if (s + 1 < nseg) {
            const float* Bn = Bw + s * sstride;
#pragma unroll
            for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                for (int e = 0; e < 4; ++e) bn[nt][e] = Bn[out_off(nt, e)];
        }
        mbar_wait(bar0 + 8 * (s & 1), ((u32)((s - 2) >> 1) + (bars >> (s & 1))) & 1u);  // this step's M has landed
        __syncthreads();  // X of the previous step written
        const float4* a4 = reinterpret_cast<const float4*>(Ms) + warp * (8 * 2 * 32) + lane;
#pragma unroll 2
        for (int j = 0; j < D / 16; ++j) {
            const float4 f0 = a4[(2 * j) * 32], f1 = a4[(2 * j + 1) * 32];  // a0..a3 of steps 2j, 2j + 1
            u32 ah[2][4], al[2][4];
            split_tf32(f0.x, ah[0][0], al[0][0]);
            split_tf32(f0.y, ah[0][1], al[0][1]);
            split_tf32(f0.z, ah[0][2], al[0][2]);
            split_tf32(f0.w, ah[0][3], al[0][3]);
            split_tf32(f1.x, ah[1][0], al[1][0]);
            split_tf32(f1.y, ah[1][1], al[1][1]);
            split_tf32(f1.z, ah[1][2], al[1][2]);
            split_tf32(f1.w, ah[1][3], al[1][3]);
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) {
                const uint4 bh = xh4[(nt * 8 + j) * 32], bl = xl4[(nt * 8 + j) * 32];  // b0, b1 of 2j; of 2j + 1
                mma_tf32(acc[0][nt], al[0], bh.x, bh.y);
                mma_tf32(acc[0][nt], ah[0], bl.x, bl.y);
                mma_tf32(acc[0][nt], ah[0], bh.x, bh.y);
                mma_tf32(acc[1][nt], al[1], bh.z, bh.w);
                mma_tf32(acc[1][nt], ah[1], bl.z, bl.w);
                mma_tf32(acc[1][nt], ah[1], bh.z, bh.w);
            }
        }
        __syncthreads();  // everyone is done reading X and this M (its buffer is refilled at the next step)
        float* Xn = Sw + s * sstride;
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const float x = acc[0][nt][e] + acc[1][nt][e];
                Xn[out_off(nt, e)] = x;
                const int i = scan_b_idx(8 * nt + 2 * t + (e & 1), m0 + g + 8 * (e >> 1));
                split_tf32(x, Xh[i], Xl[i]);
            }
    }
#ifdef GDN_DEVICE_PLAN
    // as the walk's: barrier 0 completed a phase at every even step in [2, nseg), barrier 1 at every odd one
    if (tid == 0) {
        const u32 n = (u32)(nseg - 2);
        dp_bars = DP_BARS_READY | ((bars ^ ((n + 1) >> 1)) & 1u) | ((((bars >> 1) ^ (n >> 1)) & 1u) << 1);
    }
#endif
}

#ifdef GDN_WGMMA_SELFTEST
// Layout self-test (harness only; the harness appends the extern "C" kernel `gdn_wgmma_selftest` around it): A [64][128] bf16 row-major, B [128][128] bf16 row-major (rows n, columns k).
// D1 = A Bᵀ (K-major, N = 128, two panels); D2 = A[:, :64] B[:64, :] (MN-major, the update's form, LBO/SBO as
// compiled); D3 = A[:, :64] B[:64, :64]ᵀ (K-major, N = 64). D* are [64][128] f32 (D3 uses columns 0..63).
__device__ void wg_selftest(const __nv_bfloat16* A, const __nv_bfloat16* B, float* D1, float* D2, float* D3) {
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    unsigned char* smem = smem_raw + ((1024u - (smem_addr(smem_raw) & 1023u)) & 1023u);
    const int tid = threadIdx.x, w = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
    for (int idx = tid; idx < 128 * 16; idx += 128) {
        const int r = idx >> 4, c = idx & 15;
        *reinterpret_cast<uint4*>(smem + (c >> 3) * 16384 + swz(r, c & 7)) = *reinterpret_cast<const uint4*>(B + r * 128 + 8 * c);
    }
    fence_proxy_async();
    __syncthreads();
    const u32 kq = smem_addr(smem);
    auto afrag = [&](int s, u32* a) {
        const __nv_bfloat16* r0 = A + (16 * w + g) * 128 + 16 * s + 2 * t;
        const __nv_bfloat16* r1 = r0 + 8 * 128;
        a[0] = *reinterpret_cast<const u32*>(r0); a[1] = *reinterpret_cast<const u32*>(r1);
        a[2] = *reinterpret_cast<const u32*>(r0 + 8); a[3] = *reinterpret_cast<const u32*>(r1 + 8);
    };
    auto store = [&](const float* d, int n, float* D) {
        for (int j = 0; j < n / 8; ++j) {
            D[(16 * w + g) * 128 + 8 * j + 2 * t] = d[4 * j]; D[(16 * w + g) * 128 + 8 * j + 2 * t + 1] = d[4 * j + 1];
            D[(16 * w + g + 8) * 128 + 8 * j + 2 * t] = d[4 * j + 2]; D[(16 * w + g + 8) * 128 + 8 * j + 2 * t + 1] = d[4 * j + 3];
        }
    };
    float d[64], e[64], f[32];
    wg_fence();
    for (int s = 0; s < 8; ++s) { u32 a[4]; afrag(s, a); wgmma_m64n128<0>(d, a, wg_desc(kq + (s >> 2) * 16384 + (s & 3) * 32, 16, 1024), s > 0); }
    for (int s = 0; s < 4; ++s) { u32 a[4]; afrag(s, a); wgmma_m64n128<1>(e, a, wg_desc(kq + s * 2048, WG_UPD_LBO, WG_UPD_SBO), s > 0); }
    for (int s = 0; s < 4; ++s) { u32 a[4]; afrag(s, a); wgmma_m64n64<0>(f, a, wg_desc(kq + s * 32, 16, 1024), s > 0); }
    wg_commit();
    wg_wait0();
    wg_pin<64>(d); wg_pin<64>(e); wg_pin<32>(f);
    store(d, 128, D1); store(e, 128, D2); store(f, 64, D3);
}
#endif

}  // namespace gdn_prefill64

// ---------------------------------------------------------------------------------------------------------
// Exported kernels (launch in this order on one stream):
//   gdn_prefill64_prep        grid ((T/64 + N + 1)·HV, 1, 1), block 128, dynamic smem gdn_prefill64::PREP_SMEM (36384)
//   gdn_prefill64_walk_f32    grid (N·HV·2, 1, 1), block 128, dynamic smem gdn_prefill64::WALK_SMEM (126992)
//   gdn_prefill64_walk_bf16   same, bf16 state / new_state
// workspace: (T/64 + N + 1) · HV · gdn_prefill64::WS_CHUNK_BYTES (17408) bytes, 256-byte aligned.
// Context-parallel plan (p.seg_chunks = L >= 1; seg slots G = (T/64 + N + 1)/L + N + 1), in this order:
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
// capped the loop form at 64 registers and spilled.
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
// v15: the items (block indices of vgrid[LAUNCH], x fastest, as the block scheduler starts CTAs) this CTA runs: its own
// index first, then gridDim.x + the counter's old value, claimed when the current item is done: a CTA that is done
// takes the next item, as the block scheduler would start a new CTA. (Claimed as the item started, under its work, the
// next item waited for the current one: a CTA that drew the longest sequence kept one more, and the blind chunk64 / cp
// calls of the contest-like mix took 30-37 us longer, H200.) Items >= the vgrid's size end the loop. Whole CTAs call
// it; the bodies' returns are CTA-uniform.
// The prep (LAUNCH 0) keeps its grid, one item per CTA (GDN_P64_RUN_PREP): in a loop ptxas kept its addresses live
// across items, 70 -> 140 registers (80 with two spills under a six-CTA bound), where six CTAs per SM need <= 80. Its
// block 0 zeroes the other launches' counters: they run after it in the stream, and only when it runs.
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
    if (q.seg_chunks > 0) pdl_launch_dependents(); /* (chunk64: the walk dispatched at exit, see v16) */ \
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
