// prefill_chunk64/prep.cuh — gdn_prefill64_prep's body: one CTA (one warpgroup) per (chunk, value head) computes
// everything that does not depend on the state — the gates and their cumulative log-decays, Q Kᵀ and K Kᵀ on wgmma,
// T = (I + A)⁻¹ by a blocked fp32 inverse (16x16 diagonal blocks by forward substitution, the off-diagonal blocks on
// mma.sync in 3xTF32) — and writes the chunk's workspace record (params.cuh). For the chunk64 plan the head-0 CTA of
// each sequence's first slot also writes the sequence's rank in the walk's order (schedule.cuh). Serving: precomputed
// gates, and the in-kernel q/k norm of the K and Q rows before the products (the walks normalise their own copies the
// same way, bit for bit).
#pragma once

namespace gdn_prefill64 {

// ---- prep shared memory. K and Q rows by cp.async into the walk's 128-byte-swizzled K-major layout: two
// 64-column panels [K rows 0..63 | Q rows 64..127] of 16 KB, which K Kᵀ and Q Kᵀ read as wgmma descriptors. A and T
// (f32, padded rows) replace them once those products are done (a barrier separates them): 35.5 KB per CTA + 1 KB to
// align the base, so 6 CTAs fit an SM.
constexpr int PKQ_OFF = 0;                         // 2 panels x [128 rows][128 B] bf16, swizzled (32768)
constexpr int PT_OFF = 0;                          // T f32 [64][68] over the K/Q panels
constexpr int PA_OFF = C * LDF * 4;                // A f32 [64][68] (17408), over the rest of them
constexpr int PG_OFF = PA_OFF + C * LDF * 4;       // γ f32 [64]
constexpr int PB_OFF = PG_OFF + 4 * C;             // β f32 [64]
constexpr int PR_OFF = PB_OFF + 4 * C;             // per-warp f32 [2][4]: [0][·] the contraction sums, [1][·] Tb's maxima
constexpr int PREP_SMEM = PR_OFF + 32 + 1024;      // + slack to align the base to 1024 B
static_assert(PG_OFF >= PKQ_OFF + 2 * 128 * 128, "γ / β do not alias the K / Q panels");
static_assert(PREP_SMEM == 36384, "prep smem (mirrored by the Rust runtime)");


// ================================================================== prep: one (chunk, value head) per CTA
template <class Bid>
__device__ __forceinline__ void prep_body(const Prefill64Params& p, const Bid bid) {
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    unsigned char* smem = smem_raw + ((1024u - (smem_addr(smem_raw) & 1023u)) & 1023u);
    const i64 N = p.num_seqs;
    const int HV = p.num_v_heads, H = p.num_q_heads;
    // grid (slots·HV): the value heads of one chunk are launched together, so the ones sharing a q/k head read its
    // K and Q from L2
    const int h = (int)(bid.x() % (unsigned)HV);
    const i64 slot = bid.x() / (unsigned)HV;
    if (N <= 0) return;
    // the sequence: the largest i with f(i) <= slot (f strictly increasing, f(0) = 0)
    const i64 seq = warp_last_true(N, [&](i64 i) { return seq_slot(p, i) <= slot; });
    const i64 start = cu_at(p, seq) + (slot - seq_slot(p, seq)) * C;
    const i64 eos = cu_at(p, seq + 1);
    // The chunk64 walk's order, longest sequence first. The CTA of sequence seq's first slot and head 0 (an
    // empty sequence has one too: it returns just below) ranks it and writes order[rank] = seq.
    if (chunk64_ordered(p) && h == 0 && start == cu_at(p, seq))
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
    // warp are slower: the TMA unit takes small copies one after another.)
    load_kq_rows<128, true>(p, smem_addr(smem + PKQ_OFF), start, nvalid, hq, tid);
    cp_async_commit();
    // ---- gates: log-decay and β for token tid (< 64) (raw, or precomputed: common/serving.cuh sv_log_decay,
    // sv_beta), inclusive scan of the log-decays per warp
    if (tid < C) {
        const bool ok = tid < nvalid;
        float lg = 0.f, be = 0.f;
        if (ok) {
            const i64 gi = (start + tid) * HV + h;
            if ((sv_of(p).flags & (SV_GATE_MASK | SV_ACT_F16)) == 0) {
                lg = gdn_log_decay(__bfloat162float(p.a[gi]), p.dt_bias[h], p.A_log[h]);
                be = gdn_beta(__bfloat162float(p.b[gi]));
            } else {  // precomputed gates, or raw fp16 ones
                const bool raw = (sv_of(p).flags & SV_GATE_MASK) == 0;
                lg = sv_log_decay(sv_of(p), p.a, gi, raw ? p.dt_bias[h] : 0.f, raw ? p.A_log[h] : 0.f);
                be = sv_beta(sv_of(p), p.b, gi);
            }
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
    if (sv_of(p).flags & SV_ACT_F16) {  // (serving) fp16 K and Q rows rewritten in place as bf16
        f16_rows_to_bf16<128, 128>(smem + PKQ_OFF, tid);
        fence_proxy_async();
        __syncthreads();
    }
    if (sv_of(p).flags & SV_QK_NORM) {  // (serving) the in-kernel q/k norm of the 128 rows, in place
        normalize_kq_rows<128, 128>(smem + PKQ_OFF, tid);
        fence_proxy_async();
        __syncthreads();
    }
    if (tid >= 32 && tid < C) gam_s[tid] += gam_s[31];
    // ---- Q Kᵀ, then K Kᵀ: 8 wgmma m64n64k16 each, A and B from the panels (an mma.sync form would give warp w the
    // 16w+16 columns its rows need: four times warp 0's work on warp 3). Warp w gets rows 16w..16w+15 in the
    // mma.sync C layout: acc[n][r] = (row 16w + g + 8(r/2), column 8n + 2t + r%2).
    // The two products run one after the other, each consumed before the next is issued, so at most 32 accumulators
    // are live (both at once would hold 85 live registers: 5 CTAs per SM instead of 6). P goes straight to the record
    // with one power-of-two scale per warp (its 16 rows): no barrier, nothing held. A cannot be written before K Kᵀ is
    // done: it lies over the panels.
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
        // The scale is applied with the power of two (inv exact, so P' = (Q Kᵀ ⊙ decay) · (scale · inv) differs from
        // (scale · Q Kᵀ ⊙ decay) · inv by fp32 rounding only), and the 16 stores go through one base: row 16w + g + 8hr
        // has swizzle phase g, so pair (row, 8nt + 2t) sits at 1024·hr + 16·(nt ^ g) from row 16w + g's piece 0 + 4t
        // (forming every address costs ~90 SASS instructions for 16 stores)
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
    // has (3 − rb)·4 float4 right of its diagonal block, 384 float4 in all. Rows r and 63 − r (r < 32) have 12 between
    // them, so thread tid writes pieces 3q .. 3q + 2 (q = tid % 4) of pair tid / 4: piece e < n = 12 − 4·rb is row r's,
    // the rest row 63 − r's (a closed form: a loop per block row with divisions takes ~280 SASS instructions)
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
    // read, so they are not written); the diagonal ‖k_i‖² kept by the lane that holds it (t = g / 2, for rows
    // 16w + g and 16w + g + 8)
    float kk[2] = {0.f, 0.f};
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
                kk[hr] = i == j ? acc[nt][2 * hr + e] : kk[hr];
            }
            *reinterpret_cast<float2*>(Af + i * LDF + j0) = make_float2(av[0], av[1]);
        }
    // ---- the chunk's contraction bound for the cp cuts (cp_passes.cuh): Σ_t log max(1, |1 − β_t‖k_t‖²|), the log of
    // the largest factor by which the chunk's transitions, e^{g_t}(I − β_t k_t k_tᵀ) without their decays, can stretch
    // a state; one sum per warp (its 16 rows) in wmax[warp]. A NaN stays NaN.
    {
        float lf = 0.f;
#pragma unroll
        for (int hr = 0; hr < 2; ++hr) {
            const float st = fabsf(1.f - beta_s[16 * warp + g + 8 * hr] * kk[hr]);
            const float l = st > 1.f ? logf(st) : (st <= 1.f ? 0.f : st);
            lf += t == (g >> 1) ? l : 0.f;
        }
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) lf += __shfl_xor_sync(0xffffffffu, lf, off);
        if (lane == 0) wmax[warp] = lf;
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
    // ---- off-diagonal blocks on tensor cores (a scalar form reads ~1,000 f32 from shared memory per thread).
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
    // ---- Tb' = T diag(β) / sT as f16 pairs (coalesced 4-byte stores), e-vectors
    {
        const float gC = gam_s[C - 1];
        // thread: rows 4m + warp (m < 16), columns 2·lane, + 1 (one 8-byte load per pair from a per-thread base, the
        // record offsets from two bases by immediates: forming every address costs ~110 SASS instructions)
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
            if (i < EGC_SP || i >= EGC_SP + 4)
                ev[2 * C + i] = i == 0 ? __expf(gC)
                              : i == 1 ? sT
                              : i == EGC_LB ? gC + ((wmax[0] + wmax[1]) + (wmax[2] + wmax[3]))
                                            : 0.f;
        }
    }
}

}  // namespace gdn_prefill64
