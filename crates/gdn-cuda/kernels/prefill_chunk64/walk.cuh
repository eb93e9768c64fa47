// prefill_chunk64/walk.cuh — the sequential chain on warpgroup MMA: walk_wg_body walks chunks [c0, c1) of one
// sequence for one value head from an initial state (the state, zero, a workspace state or the identity) to an end
// state (new_state, a workspace state, or M in the cp scan's fragment order), with or without outputs; walk_plain is
// the chunk64 plan's walk (whole sequences, longest first). The cp passes (cp_passes.cuh) run it on segments. Also
// the state's rows in memory (pool rows, padding, either layout: state_row, state_rows_load / store) and the
// checkpoints the real walks write (walk_checkpoint).
#pragma once

namespace gdn_prefill64 {

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
// i.e. 20 tensor-core instructions per chunk for 64 value rows (an mma.sync walker issues ~450 per warp for 16).
// Every A fragment of a batch is formed before the batch's wgmma.fence, and O has registers of its own: otherwise
// ptxas serialises every wgmma (C7511 "insufficient register resources"; checked in the SASS: one wait per batch).
// Every B operand sits in shared memory in the 128-byte-swizzled K-major layout (rows of 64 bf16 = 128 B, 8-row
// atoms of 1024 B, piece j of row r at j ^ (r & 7)): K and Q rows by cp.async into two 64-column panels
// [K rows 0..63 | Q rows 64..127], V by cp.async, the record (prep wrote it pre-swizzled) by one bulk copy.
// Two slots: chunk c+1 loads while chunk c computes. Outputs leave through a [token][v] staging tile (transposing
// stmatrix) as 16-byte stores. Numerics as prefill_chunk64.cu's header says (S as one bf16, Tb/P/X/Vn as scaled f16, the update
// operand as one bf16).
constexpr int WG_UPD_LBO = 16384;  // MN-major B: stride between the two 64-column k panels
constexpr int WG_UPD_SBO = 1024;   // MN-major B: stride between 8-token row groups
// Warpgroups per walk CTA, WGS (a template parameter of the walk): 1 — one CTA per 64-row value half (grid ·2);
// 2 — one CTA per head, a warpgroup per value half, sharing the slot's K, Q, V and record: each chunk's bytes move
// once for all 128 rows, and two warpgroups on an SM overlap one's tensor batches with the other's register work.
// Bitwise the same results. H200: a 2-warpgroup CTA walks a chunk in 3.2 us where a 1-warpgroup CTA takes 2.3 us for
// half the rows — it wins where the grid is throughput-bound (1x65536 cp, 2x16384) and loses where it is
// latency-bound (1x8192, 4x2048). The cost model (plan/prefill/cost.rs) knows both forms; the planner picks the cheaper.
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
    load_kq_rows<Lay::THREADS, LOADQ>(p, smem_addr(slot + Lay::KQ), start, nvalid, hq, tid);
    if (loadv) {  // V: the CTA's WGS halves, 512 pieces each, 4 per thread: piece pc of rows rv0, rv0 + 16, ...
        const int rv0 = tid / (8 * WGS), pc = tid % (8 * WGS);
        const i64 row = sv_tok_stride(sv_of(p), SV_V, HV);
        const __nv_bfloat16* vp = p.v + (start + rv0) * row + h * sv_head_stride(sv_of(p), SV_V) + v0 + pc * 8;
        const u32 dst = smem_addr(slot + Lay::V) + (u32)(pc >> 3) * (C * 128) + swz(rv0, pc & 7);
#pragma unroll
        for (int it = 0; it < 4; ++it) {
            const bool ok = rv0 + 16 * it < nvalid;
            cp_async16(dst + (u32)(16 * it * 128), ok ? vp : p.v, ok);
            vp += 16 * row;
        }
    }
    cp_async_commit();
}

// What one walk CTA runs: chunks [c0, c1) of sequence `seq` for value head h and value half vh, from an initial
// state to an end state. The plain walk runs whole sequences (state → new_state); the context-parallel passes
// (cp_passes.cuh) run segments of L chunks.
// M[k][n] (= Mᵀ[n][k]) in the cp scan's fragment order, which pass 1 writes (END_WS_T) and the scan copies as
// is: 16-byte pieces [warp n / 16][k / 16][step (k / 2) & 1][lane 4(n & 7) + (k / 4) & 3], each holding one lane's A
// fragment of one m16n8k8 step, word (n / 8) & 1 + 2(k & 1) of it (cp_scan). `kblocks` = the 16-row blocks of k
// per 16 columns n: 8 for all of M (the workspace), 4·WGS for one pass-1 CTA's rows (its staging).
__device__ __forceinline__ int scan_a_piece(int n, int k, int kblocks) {
    return (((n >> 4) * kblocks + (k >> 4)) * 2 + ((k >> 1) & 1)) * 32 + 4 * (n & 7) + ((k >> 2) & 3);
}
__device__ __forceinline__ int scan_a_word(int n, int k) { return ((n >> 3) & 1) + 2 * (k & 1); }
enum : int { INIT_ZERO = 0, INIT_STATE = 1, INIT_WS = 2, INIT_IDENTITY = 3 };
enum : int { END_NONE = 0, END_STATE = 1, END_WS = 2, END_WS_T = 3 };
// The device plan's persistent CTAs (dp_items) run several walks (or scan items) on one pair of mbarriers, set up
// once and their phases carried on from item to item (re-initialising them makes compute-sanitizer's racecheck lose
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
    float* end_ws;            // END_WS: likewise; END_WS_T (pass 1's M): in the scan's order (scan_a_piece)
};

// The sequence's state row and padding (common/serving.cuh sv_state_row).
__device__ __forceinline__ bool pool_pad(const Prefill64Params& p, i64 idx) {
    return sv_pool_pad(sv_of(p), idx, sv_state_rows(p));
}
__device__ __forceinline__ SvStateRow state_row(const Prefill64Params& p, i64 seq, i64 len, int h) {
    const i64 idx = sv_of(p).pool_indices != nullptr ? sv_pool_index(sv_of(p), seq) : 0;
    return sv_state_row(sv_of(p), p.state != nullptr, seq, idx, len, h, p.num_v_heads, sv_state_rows(p));
}
// Two outputs in the activation dtype, packed (bf16; fp16 with SV_ACT_F16).
__device__ __forceinline__ u32 pack_out(const ServingParams& sv, float lo, float hi) {
    return (sv.flags & SV_ACT_F16) ? sv_act16x2(sv, lo, hi) : pack_bf16(lo, hi);
}
// Sᵀ rows `row`, row + 8 (value rows), columns 8j + 2t, +1 (the accumulator layout) from / to one (row, head) of a
// [.., HV, 128, 128] tensor at element offset `base`, in the call's layout: k-last ([v][k]: adjacent pairs) or
// K-first (SV_KFIRST, [k][v]: single elements; at a walk's start and end only).
template <bool BF16>
__device__ __forceinline__ void state_rows_load(const ServingParams& sv, const void* src, float* S, i64 base, int row, int t,
                                                bool kfirst) {
#pragma unroll
    for (int j = 0; j < 16; ++j) {
        const int k = 8 * j + 2 * t;
        if (kfirst) {
            const i64 o = base + (i64)k * D + row;
            S[4 * j] = state_ld1<BF16>(sv, src, o);
            S[4 * j + 1] = state_ld1<BF16>(sv, src, o + D);
            S[4 * j + 2] = state_ld1<BF16>(sv, src, o + 8);
            S[4 * j + 3] = state_ld1<BF16>(sv, src, o + D + 8);
        } else {
            const float2 x0 = state_ld2<BF16>(sv, src, base + (i64)row * D + k);
            const float2 x1 = state_ld2<BF16>(sv, src, base + (i64)(row + 8) * D + k);
            S[4 * j] = x0.x; S[4 * j + 1] = x0.y; S[4 * j + 2] = x1.x; S[4 * j + 3] = x1.y;
        }
    }
}
template <bool BF16>
__device__ __forceinline__ void state_rows_store(const ServingParams& sv, void* dst, const float* S, i64 base, int row, int t,
                                                 bool kfirst) {
#pragma unroll
    for (int j = 0; j < 16; ++j) {
        const int k = 8 * j + 2 * t;
        if (kfirst) {
            const i64 o = base + (i64)k * D + row;
            state_st1<BF16>(sv, dst, o, S[4 * j]);
            state_st1<BF16>(sv, dst, o + D, S[4 * j + 1]);
            state_st1<BF16>(sv, dst, o + 8, S[4 * j + 2]);
            state_st1<BF16>(sv, dst, o + D + 8, S[4 * j + 3]);
        } else {
            state_st2<BF16>(sv, dst, base + (i64)row * D + k, S[4 * j], S[4 * j + 1]);
            state_st2<BF16>(sv, dst, base + (i64)(row + 8) * D + k, S[4 * j + 2], S[4 * j + 3]);
        }
    }
}
// Prefix-cache checkpoints (serving.checkpoint_every > 0, a multiple of C = 64): a real walk calls this after each
// chunk behind one uniform branch on the params. After `done` chunks of the sequence, when done·C tokens are a
// multiple of the interval and the sequence has that many, the state goes to row checkpoint_starts[seq] + done·C /
// every − 1 of the checkpoints [rows, HV, 128, 128] (the state's layout; f32 with SV_CKPT_F32, else the state dtype).
// The cp plan's real walks (pass 1 segment 0, pass 3 segments 1..) together walk every chunk from its true start state,
// so they write every checkpoint too.
template <bool BF16STATE>
__device__ __forceinline__ void walk_checkpoint(const Prefill64Params& p, const float* S, i64 seq, int done, i64 bos,
                                                i64 eos, int h, int row, int t) {
    const ServingParams& sv = sv_of(p);
    const int every = sv.checkpoint_every / C;  // chunks
    if (every <= 0 || done % every != 0 || (i64)done * C > eos - bos) return;
    const i64 base = ((sv_checkpoint_start(sv, seq) + done / every - 1) * p.num_v_heads + h) * (i64)(D * D);
    const bool kfirst = (sv.flags & SV_KFIRST) != 0;
    if (sv.flags & SV_CKPT_F32) state_rows_store<false>(sv_of(p), sv.checkpoints, S, base, row, t, kfirst);
    else state_rows_store<BF16STATE>(sv_of(p), sv.checkpoints, S, base, row, t, kfirst);
}

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
        reinterpret_cast<const unsigned char*>(p.workspace) + (uni64(seq_slot(p, seq)) * HV + h) * (i64)WS_CHUNK_BYTES;
    const i64 rec_stride = (i64)HV * WS_CHUNK_BYTES;

    // The state row (a real walk: pool, padding, has_initial_state). A padded sequence's real walk writes zero outputs
    // for its chunks and leaves (CTA-uniform: nothing of the walk's set-up has happened; a persistent CTA's barriers
    // keep their phases); summary walks (from zero or the identity, into the workspace) need no row. (Setting c1 = c0
    // instead would take the chunk range, and every address derived from it, off the uniform datapath.)
    SvStateRow sr{0, false, false, false};
    if constexpr (!SUMMARY) {
        sr = state_row(p, seq, len, h);
        if (sr.pad) {
            const i64 t0 = bos + (i64)c0 * C, t1 = min(eos, bos + (i64)c1 * C);
            constexpr int PIECES = 8 * WGS;  // 16-byte pieces of the CTA's value columns in a token row
            for (i64 e = tid; e < (t1 - t0) * PIECES; e += Lay::THREADS)
                *reinterpret_cast<uint4*>(p.out + (t0 + e / PIECES) * sv_tok_stride(sv_of(p), SV_OUT, HV) +
                                          h * sv_head_stride(sv_of(p), SV_OUT) + vload + 8 * (int)(e % PIECES)) =
                    make_uint4(0u, 0u, 0u, 0u);
            return;
        }
    }
    // Sᵀ rows v0 + 16w + g (+8), columns 8j + 2t (+1).
    float S[64];
    const int srow = v0 + 16 * w + g;                                // value row of S[4j], S[4j + 1]
    const i64 wbase = (i64)(v0 + 16 * w) * D;                        // f32 [128][128] workspace states
    if (job.init == INIT_STATE && sr.read) {
        state_rows_load<BF16STATE>(sv_of(p), p.state, S, sr.base, srow, t, (sv_of(p).flags & SV_KFIRST) != 0);
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
        if (sv_of(p).flags & SV_ACT_F16) {  // (serving) fp16 K (and Q) rows and V rewritten in place as bf16
            f16_rows_to_bf16<Lay::THREADS, SUMMARY ? C : 2 * C>(slot + Lay::KQ, tid);
            if constexpr (loadv) {
                for (int i = tid; i < WGS * C * 8; i += Lay::THREADS) sv_f16_to_bf16_piece(slot + Lay::V + 16 * i);
            }
            fence_proxy_async();
            __syncthreads();
        }
        if (sv_of(p).flags & SV_QK_NORM) {  // (serving) the in-kernel q/k norm of the slot's K (and Q) rows, in place
            normalize_kq_rows<Lay::THREADS, SUMMARY ? C : 2 * C>(slot + Lay::KQ, tid);
            fence_proxy_async();
            __syncthreads();
        }
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
        // chunk c+1's loads are issued while B1 runs on the tensor cores (not before B1: on the chain)
        if (c + 1 < c1) {
            const i64 ns = cstart + C;
            walk_wg_issue<WGS, !SUMMARY>(p, smem + ((lc + 1) & 1) * Lay::SLOT, bar0 + 8 * ((lc + 1) & 1),
                                         rec0 + (i64)(c + 1) * rec_stride, ns, eos - ns < C ? (int)(eos - ns) : C, hq,
                                         h, vload, tid, loadv);
        }
        wg_wait0();
        wg_pin<NZY>(ZY);
        // ---- B2: Vn = (Vᵀ − Z diag(e^γ)) Tbᵀ as one f16 product. X = Vᵀ − Z e^γ (the transition walk: −Z e^γ)
        // is formed in fp32 in the accumulator layout (fragment i of k-step s: row g + 8(i & 1), token columns
        // 16s + 8(i >> 1) + 2t, +1), each value row scaled by a power of two (its largest magnitude over the quad's
        // 64 columns to [0.5, 1)), rounded to f16 once. Vn = Vs · (rowmul · sT) with Vs the f16 product's result
        // (|Vs| < 64). (U = Vᵀ Tbᵀ and Z e^γ Tbᵀ as hi + lo bf16 pairs would take 20 wgmma instead of 4.)
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
            // P' rows = O columns 16b..16b+15 carry the scale sP_b
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
                stsm_x4_t(os_lane + (u32)(16 * q * W2_LDO * 2), pack_out(sv_of(p), O[8 * q], O[8 * q + 1]),
                          pack_out(sv_of(p), O[8 * q + 2], O[8 * q + 3]), pack_out(sv_of(p), O[8 * q + 4], O[8 * q + 5]),
                          pack_out(sv_of(p), O[8 * q + 6], O[8 * q + 7]));
            wg_bar(1 + wg);  // this warpgroup's staging tile is complete (the other warpgroup runs on)
#pragma unroll
            for (int it = 0; it < 4; ++it) {
                const int idx = it * 128 + (tid & 127), r = idx >> 3, pc = idx & 7;
                const i64 tok = cstart + r;
                if (tok < eos)
                    *reinterpret_cast<uint4*>(p.out + tok * sv_tok_stride(sv_of(p), SV_OUT, HV) +
                                              h * sv_head_stride(sv_of(p), SV_OUT) + v0 + 8 * pc) =
                        *reinterpret_cast<const uint4*>(os + r * W2_LDO + 8 * pc);
            }
            if (sv_of(p).checkpoint_every > 0) walk_checkpoint<BF16STATE>(p, S, seq, c + 1, bos, eos, h, srow, t);
        }
    }
    if (job.end == END_STATE) {
        // (sr.write, re-derived rather than held across the chunk loop: a padded walk has left already)
        if (sv_of(p).pool_indices == nullptr || len > 0) state_rows_store<BF16STATE>(sv_of(p), p.new_state, S, sr.base, srow, t, (sv_of(p).flags & SV_KFIRST) != 0);
    } else if (job.end == END_WS) {
#pragma unroll
        for (int j = 0; j < 16; ++j) {
            StateIO<false>::store(job.end_ws, wbase + (i64)g * D + 8 * j + 2 * t, S[4 * j], S[4 * j + 1]);
            StateIO<false>::store(job.end_ws, wbase + (i64)(g + 8) * D + 8 * j + 2 * t, S[4 * j + 2], S[4 * j + 3]);
        }
    } else if (job.end == END_WS_T) {
        // M in the scan's fragment order (scan_a_piece; row = k, column = n). The CTA's 64·WGS rows k are, for each
        // of the 8 column blocks n / 16, one contiguous run of it: staged in shared memory (the slots are free now)
        // in that order, then written as 16-byte pieces (4-byte scattered stores would cost pass 1 2-5 us).
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
    const i64 r = (i64)(bid.x() >> 1) / HV;  // the r-th longest sequence (prep's order), else sequence r
    pdl_wait();  // (the order is the prep's)
    j.seq = chunk64_ordered(p) ? uni64(walk_order(p)[r]) : r;
    j.bos = uni64(cu_at(p, j.seq));  // (uni64: the walk's addresses derive from them)
    j.eos = uni64(cu_at(p, j.seq + 1));
    const i64 len = j.eos > j.bos ? j.eos - j.bos : 0;
    j.c0 = 0;
    j.c1 = (int)((len + C - 1) / C);
    j.init = INIT_STATE;
    j.end = END_STATE;
    j.init_ws = nullptr;
    j.end_ws = nullptr;
    walk_wg_body<1, BF16STATE, false>(p, j);
}

}  // namespace gdn_prefill64
