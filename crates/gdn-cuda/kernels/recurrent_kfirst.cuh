// recurrent_kfirst.cuh — the K-first decode / MTP body of recurrent.cu (the `_kf` kernels): state tensors [.., K, V]
// with V contiguous. Included by recurrent.cu after its shared helpers (namespace gdn_rec: Cfg-independent memory
// helpers, 16-bit conversions, gate and pool-row helpers); recurrent.cu's header describes the mapping and why.
#pragma once

namespace gdn_rec {

// ---------------------------------------------------------------------------------------------------------
// The K-first body (`_kf`, serving modes; header "K-first mapping"). Per head the state is S[K][V], V contiguous.
// KR = K rows per thread (the name's VEC), CW = V columns per thread (the name's RPT: 16 bytes of one K row),
// NW = warps per CTA (the name's WARPS); every warp of a CTA covers the CTA's VC columns over its own 128/NW
// K rows.
template <int SBYTES, int KR, int NW>
struct KfCfg {
    static constexpr int CW = 16 / SBYTES;       // V columns per thread: one 16-byte access per K row
    static constexpr int KG = KD / (KR * NW);    // K groups per warp
    static constexpr int LV = 32 / KG;           // lanes along V in a K group
    static constexpr int VC = LV * CW;           // V columns per CTA
    static constexpr int CPH = KD / VC;          // CTAs per (request, head)
    static constexpr int QW = KR / 2;            // 32-bit words of the thread's KR bf16 q (or k) values
    static constexpr int VW = CW / 2;            // 32-bit words of its CW bf16 v (or out) values
    // one reduction buffer (floats): per warp [S·k of the VC columns | S·q of them], then k·q of every warp
    static constexpr int RED = 2 * VC;           // per warp
    static constexpr int KQ = NW * RED;          // k·q of warp w at KQ + w
    static constexpr int BUF = KQ + NW;
    // position of the value of column lv*CW + c in a VC-float section: float4 c/4 of the K group's 8 lanes are
    // 128 contiguous bytes (conflict-free 16-byte shared accesses)
    __device__ static constexpr int ridx(int lv, int c) { return (c / 4) * (LV * 4) + lv * 4 + c % 4; }
    static_assert(SBYTES == 4 || SBYTES == 2, "state is fp32 or bf16");
    static_assert(KR == 4 || KR == 8, "8- or 16-byte q/k accesses");
    static_assert(KG * KR * NW == KD && KG * LV == 32, "the warps of a CTA cover K once");
    static_assert(LV * CW * SBYTES == 128, "a K group's access is one whole 128-byte line of one K row");
    static_assert(KD % VC == 0, "a CTA covers a divisor of the 128 columns");
    static_assert(NW % 4 == 0, "k·q of the warps is read 16 bytes at a time");
};

// One token's raw inputs for one thread of the K-first mapping (converted when used).
template <class C>
struct KfTok {
    u32 q[C::QW], k[C::QW];  // q, k at the thread's KR K rows
    u32 v[C::VW];            // v at its CW V columns
    u32 nq[2], nk[2];        // SV_QK_NORM only: the lane's 4 values of the whole q / k row (lane*4 ..)
    u32 a, b;                // gate inputs (load_gates)
};

template <class C>
__device__ __forceinline__ void load_tok_kf(KfTok<C>& x, const RecurrentParams& p, i64 bq, int t, int T, int h,
                                            int hq, int krow0, int col0, int lane, int flags) {
    const ServingParams& sv = p.serving;
    const i64 bt = bq * T + t;
    const __nv_bfloat16* qp =
        reinterpret_cast<const __nv_bfloat16*>(p.q) + sv_act_off(sv, SV_Q, bt, hq, p.num_qk_heads);
    const __nv_bfloat16* kp =
        reinterpret_cast<const __nv_bfloat16*>(p.k) + sv_act_off(sv, SV_K, bt, hq, p.num_qk_heads);
    const __nv_bfloat16* vp =
        reinterpret_cast<const __nv_bfloat16*>(p.v) + sv_act_off(sv, SV_V, bt, h, p.num_v_heads);
    ldg_words<C::QW>(x.q, qp + krow0);
    ldg_words<C::QW>(x.k, kp + krow0);
    ldg_words<C::VW>(x.v, vp + col0);
    x.nq[0] = x.nq[1] = x.nk[0] = x.nk[1] = 0u;
    if (flags & SV_QK_NORM) {
        ldg_words<2>(x.nq, qp + lane * 4);
        ldg_words<2>(x.nk, kp + lane * 4);
    }
    load_gates(x.a, x.b, p, bt * p.num_v_heads + h, flags);
}

template <int SBYTES, int KR, int CW_, int NW, int TFIX, int ORDER, bool AF16>
__device__ __forceinline__ void kfirst_body(const RecurrentParams& p) {
    using C = KfCfg<SBYTES, KR, NW>;
    constexpr int CW = C::CW;
    static_assert(CW_ == CW, "a K-first kernel's RPT is its 16-byte column run: 4 (fp32) or 8 (bf16)");
    // reduction buffers, one per token parity (KfCfg::BUF)
    __shared__ __align__(16) float red_s[2][C::BUF];
    const ServingParams& sv = p.serving;
    const int flags = sv.flags;
    constexpr bool af16 = AF16;                       // fp16 activations: the fp16 build (GDN_REC_ACT_F16)
    const bool sf16 = (flags & SV_STATE_F16) != 0;    // fp16 states: a select at the state loads and stores
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    const int kg = lane / C::LV;                    // K group inside the warp
    const int lv = lane % C::LV;                    // lane along V inside the K group
    i64 bq;
    int h, hq;
    const int tile = cta_coords<C::CPH, ORDER>(p, bq, h, hq);
    const int T = TFIX > 0 ? TFIX : p.seq_len;
    const int col0 = tile * C::VC + lv * CW;        // first V column of this thread
    const int krow0 = (warp * C::KG + kg) * KR;     // first K row of this thread
    const bool writer = warp == 0 && kg == 0;       // writes out (CW values of each token)
    const i64 HV = p.num_v_heads;

    // 1. Pool row (the only load the state loads wait for).
    bool pad;
    const i64 srow = serving_row(p, bq, T, pad);
    const bool slots = sv.num_accepted != nullptr;
    pad = pad || srow >= p.num_state_rows;
    const bool fresh = !sv_has_initial(sv, bq);    // start from zeros: the row is not read

    // 2. All state loads at once: KR 16-byte accesses, K rows krow0.., columns col0 .. col0+CW-1.
    //    row_ofs(row): the thread's first element (krow0, col0) in pool row `row`, formed where it is used.
    const int tin = krow0 * KD + col0;
    const auto row_ofs = [&](i64 row) {
        return row * sv_row_stride(sv, HV * (KD * KD)) + ((i64)h * (KD * KD) + tin);
    };
    u32 sraw[KR][4];
#pragma unroll
    for (int r = 0; r < KR; ++r)
#pragma unroll
        for (int w = 0; w < 4; ++w) sraw[r][w] = 0u;
    if (p.state != nullptr && !pad && !fresh) {
        const char* base = reinterpret_cast<const char*>(p.state) + row_ofs(srow) * SBYTES;
#pragma unroll
        for (int r = 0; r < KR; ++r) ld_words<4>(sraw[r], base + (i64)r * (KD * SBYTES));
    }

    // 3. Token-0 inputs and head constants.
    KfTok<C> cur;
    load_tok_kf<C>(cur, p, bq, 0, T, h, hq, krow0, col0, lane, flags);
    const int gate_mode = flags & SV_GATE_MASK;
    float a_log = 0.f, dt_b = 0.f;
    if (gate_mode == 0) {
        a_log = __ldg(p.A_log + h);
        dt_b = __ldg(p.dt_bias + h);
    }
    __nv_bfloat16* outp = reinterpret_cast<__nv_bfloat16*>(p.out) + sv_act_off(sv, SV_OUT, bq * T, h, HV) + col0;
    const i64 out_tstride = sv_tok_stride(sv, SV_OUT, HV);

    if (pad) {  // padding (the whole CTA: one request): zero output rows, touch nothing else
        if (writer) {
            u32 z[C::VW];
#pragma unroll
            for (int i = 0; i < C::VW; ++i) z[i] = 0u;
            for (int t = 0; t < T; ++t) st_words<C::VW>(outp + t * out_tstride, z);
        }
        return;
    }

    float s[KR][CW];  // s[r][c] = S[krow0 + r][col0 + c]
#pragma unroll
    for (int r = 0; r < KR; ++r)
#pragma unroll
        for (int c = 0; c < CW; ++c) {
            if constexpr (SBYTES == 4) s[r][c] = __uint_as_float(sraw[r][c]);
            else s[r][c] = (c & 1) ? h_hi(sraw[r][c >> 1], sf16) : h_lo(sraw[r][c >> 1], sf16);
        }

    // 4. Token loop (state stays in registers).
#pragma unroll 1
    for (int t = 0; t < T; ++t) {
        KfTok<C> nxt;
        if (TFIX == 0) {  // prefetch token t+1 (the last token reloads itself: no branch, L1/L2 hit)
            const int tn = t + 1 < T ? t + 1 : t;
            load_tok_kf<C>(nxt, p, bq, tn, T, h, hq, krow0, col0, lane, flags);
        }
        float kf[KR], qf[KR];
#pragma unroll
        for (int r = 0; r < KR; ++r) {
            kf[r] = (r & 1) ? h_hi(cur.k[r >> 1], af16) : h_lo(cur.k[r >> 1], af16);
            qf[r] = (r & 1) ? h_hi(cur.q[r >> 1], af16) : h_lo(cur.q[r >> 1], af16);
        }
        if (flags & SV_QK_NORM) {
            // the warp's 32 lanes hold the whole q/k row 4 values each: fp32 sums of squares over the warp,
            // then x -> x * rsqrt(sum + eps) rounded to the activation dtype on the thread's own KR values (the
            // reference's rounding)
            float ssk = 0.f, ssq = 0.f;
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const float xk = (e & 1) ? h_hi(cur.nk[e >> 1], af16) : h_lo(cur.nk[e >> 1], af16);
                const float xq = (e & 1) ? h_hi(cur.nq[e >> 1], af16) : h_lo(cur.nq[e >> 1], af16);
                ssk = fmaf(xk, xk, ssk);
                ssq = fmaf(xq, xq, ssq);
            }
#pragma unroll
            for (int off = 16; off >= 1; off >>= 1) {
                ssk += __shfl_xor_sync(0xffffffffu, ssk, off);
                ssq += __shfl_xor_sync(0xffffffffu, ssq, off);
            }
            const float rk = rsqrtf(ssk + SV_QK_NORM_EPS), rq = rsqrtf(ssq + SV_QK_NORM_EPS);
#pragma unroll
            for (int r = 0; r < KR; r += 2) {
                const u32 kw = h_pack(kf[r] * rk, kf[r + 1] * rk, af16);
                const u32 qw = h_pack(qf[r] * rq, qf[r + 1] * rq, af16);
                kf[r] = h_lo(kw, af16); kf[r + 1] = h_hi(kw, af16);
                qf[r] = h_lo(qw, af16); qf[r + 1] = h_hi(qw, af16);
            }
        }
        // partial sums over the thread's KR rows: red[c] = S·k, red[CW+c] = S·q of column col0+c, red[2CW] = k·q
        float red[2 * CW + 1];
        {
            float kq = 0.f;
#pragma unroll
            for (int r = 0; r < KR; ++r) kq = fmaf(kf[r], qf[r], kq);
            red[2 * CW] = kq;
        }
#pragma unroll
        for (int c = 0; c < CW; ++c) {
            float sk = 0.f, sq = 0.f;
#pragma unroll
            for (int r = 0; r < KR; ++r) {
                sk = fmaf(s[r][c], kf[r], sk);
                sq = fmaf(s[r][c], qf[r], sq);
            }
            red[c] = sk;
            red[CW + c] = sq;
        }
        // over the warp's K groups (lanes LV, 2LV, .. apart share the columns); every lane ends with the warp's sums
#pragma unroll
        for (int off = C::LV; off < 32; off <<= 1)
#pragma unroll
            for (int i = 0; i < 2 * CW + 1; ++i) red[i] += __shfl_xor_sync(0xffffffffu, red[i], off);
        // over the CTA's warps: K group 0 stores S·k, group 1 S·q, group 2 k·q; one barrier per token (the buffer
        // alternates with the token's parity, so a warp storing token t+1 never meets a reader of token t-1)
        float* rb = red_s[t & 1];
        if (kg == 0)
#pragma unroll
            for (int c = 0; c < CW; c += 4)
                *reinterpret_cast<float4*>(rb + warp * C::RED + C::ridx(lv, c)) =
                    make_float4(red[c], red[c + 1], red[c + 2], red[c + 3]);
        if (kg == 1 % C::KG)
#pragma unroll
            for (int c = 0; c < CW; c += 4)
                *reinterpret_cast<float4*>(rb + warp * C::RED + C::VC + C::ridx(lv, c)) =
                    make_float4(red[CW + c], red[CW + c + 1], red[CW + c + 2], red[CW + c + 3]);
        if (kg == 2 % C::KG && lv == 0) rb[C::KQ + warp] = red[2 * CW];

        // gates (every thread computes its head's), while the other warps reach the barrier
        float g, beta;
        if (gate_mode == 0) {
            g = __expf(gdn_log_decay(h_lo(cur.a, af16), dt_b, a_log));
            beta = gdn_beta(h_lo(cur.b, af16));
        } else {
            const float gv = __uint_as_float(cur.a);
            g = gate_mode == SV_GATE_LINEAR ? gv : __expf(gv);
            beta = (flags & SV_BETA_BF16) ? h_lo(cur.b, af16) : __uint_as_float(cur.b);
        }
        __syncthreads();
        float u[CW], kq = 0.f;
#pragma unroll
        for (int c = 0; c < CW; ++c) u[c] = 0.f;
#pragma unroll
        for (int w = 0; w < NW; ++w)
#pragma unroll
            for (int c = 0; c < CW; c += 4) {
                const float4 x = *reinterpret_cast<const float4*>(rb + w * C::RED + C::ridx(lv, c));
                u[c] += x.x; u[c + 1] += x.y; u[c + 2] += x.z; u[c + 3] += x.w;
            }
#pragma unroll
        for (int w = 0; w < NW; w += 4) {
            const float4 x = *reinterpret_cast<const float4*>(rb + C::KQ + w);
            kq += (x.x + x.y) + (x.z + x.w);
        }
        float delta[CW];
#pragma unroll
        for (int c = 0; c < CW; ++c) {
            const float vv = (c & 1) ? h_hi(cur.v[c >> 1], af16) : h_lo(cur.v[c >> 1], af16);
            delta[c] = beta * (vv - g * u[c]);
        }
#pragma unroll
        for (int r = 0; r < KR; ++r)
#pragma unroll
            for (int c = 0; c < CW; ++c) s[r][c] = fmaf(delta[c], kf[r], g * s[r][c]);
        // output: warp 0's K group 0 holds each column once; CW consecutive values per lane, one store
        if (writer) {
            float o[CW];
#pragma unroll
            for (int c = 0; c < CW; ++c) o[c] = 0.f;
#pragma unroll
            for (int w = 0; w < NW; ++w)
#pragma unroll
                for (int c = 0; c < CW; c += 4) {
                    const float4 x = *reinterpret_cast<const float4*>(rb + w * C::RED + C::VC + C::ridx(lv, c));
                    o[c] += x.x; o[c + 1] += x.y; o[c + 2] += x.z; o[c + 3] += x.w;
                }
            u32 ow[C::VW];
#pragma unroll
            for (int i = 0; i < C::VW; ++i)
                ow[i] = h_pack(p.scale * fmaf(delta[2 * i], kq, g * o[2 * i]),
                               p.scale * fmaf(delta[2 * i + 1], kq, g * o[2 * i + 1]), af16);
            st_words<C::VW>(outp + t * out_tstride, ow);
        }
        // state after token t: fp32 into the intermediate buffer (K-first, dense) ...
        if (p.intermediate != nullptr) {
            float* ip = p.intermediate + ((((srow * T + t) * HV + h) * (KD * KD)) + tin);
#pragma unroll
            for (int r = 0; r < KR; ++r) st_run<CW, 4, 0>(reinterpret_cast<char*>(ip + r * KD), s[r]);
        }
        // ... or, with spec-decode slots, in the state dtype into its pool row (unless that slot is padding)
        if (slots) {
            const i64 wrow = __ldg(p.state_indices + bq * T + t);
            if (!sv_is_pad(sv, wrow) && wrow < p.num_state_rows) {
                char* wp = reinterpret_cast<char*>(p.new_state) + row_ofs(wrow) * SBYTES;
#pragma unroll
                for (int r = 0; r < KR; ++r) st_run<CW, SBYTES, 0>(wp + (i64)r * (KD * SBYTES), s[r], sf16);
            }
        }
        if (TFIX == 0) cur = nxt;
    }

    // 5. Final state, same row it came from (spec-decode slots wrote theirs per token).
    if (p.new_state != nullptr && !slots) {
        char* wp = reinterpret_cast<char*>(p.new_state) + row_ofs(srow) * SBYTES;
#pragma unroll
        for (int r = 0; r < KR; ++r) st_run<CW, SBYTES, 0>(wp + (i64)r * (KD * SBYTES), s[r], sf16);
    }
}

}  // namespace gdn_rec
