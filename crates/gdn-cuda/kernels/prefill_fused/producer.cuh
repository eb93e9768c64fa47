// prefill_fused/producer.cuh — the producer warps' work on one chunk of 16 tokens: its loads into a ring slot
// (load_chunk, by cp.async; zero_rows clears the rows a speculative first load must not keep; normalize_qk, the
// in-kernel q/k norm) and its state-independent preparation (compute_chunk: the gates, K Kᵀ and Q Kᵀ on tensor
// cores, A and P, T = (I + A)⁻¹ by forward substitution), which the walkers read from the slot.
#pragma once

namespace gdn_prefill {

// ------------------------------------------------------------------ producer: one chunk's loads
// Where a producer lane's gate word comes from (load_chunk): byte address base + ((i & ~odd) << shift) for element
// i = token·HV + h. Raw gates: lane l < 16 the bf16 pair of a holding it, lane l >= 16 that of b (odd 1, shift 1);
// precomputed gates (serving): lane l < 16 the f32 g or alpha, lane l >= 16 the f32 beta, or the bf16 pair holding
// it. Selects, not branches: the chunk loads stay one block.
struct GateSrc {
    const unsigned char* base;
    int odd, shift;
};
__device__ __forceinline__ GateSrc gate_src(const PrefillParams& p, int lane) {
    const ServingParams& sv = sv_of(p);
    // raw gates: both a and b are bf16 pairs; precomputed: g / alpha f32, beta f32 or a bf16 pair
    const bool raw = (sv.flags & SV_GATE_MASK) == 0,
               half = raw || (lane >= 16 && (sv.flags & SV_BETA_BF16) != 0);
    const void* base = raw ? (const void*)(lane < 16 ? p.a : p.b) : (lane < 16 ? (const void*)sv.gate : sv.beta);
    return GateSrc{reinterpret_cast<const unsigned char*>(base), half ? 1 : 0, half ? 1 : 2};
}
// SV: the serving build of the producer (body.cuh producer_loop), which also takes precomputed gates.
template <int BV, bool SV>
__device__ __forceinline__ void load_chunk(const PrefillParams& p, unsigned char* slot, i64 t0, i64 eos, int hq, int h,
                                           int v0, int lane) {
    // Every lane copies the same 16-byte piece of rows r0, r0 + step, ...: one pointer per lane and tensor, advanced by
    // a constant, and shared-memory addresses that differ by immediates (forming ((t0 + r) H + hq) D + 8c afresh for
    // every piece costs ~240 instructions per chunk, a quarter of the producer's stream).
    const int nrows = eos - t0 < C ? (int)(eos - t0) : C;  // rows [0, nrows) exist
    const u32 ks = smem_addr(slot + Slot<BV>::K_OFF), qs = smem_addr(slot + Slot<BV>::Q_OFF);
    {
        const int r0 = lane >> 4, c = lane & 15;  // 256 pieces of 16 B per tile: piece c of rows r0, r0 + 2, ...
        // token strides (dense: H·D; a view's with SV_STRIDED, common/serving.cuh)
        const i64 rowk = sv_tok_stride(sv_of(p), SV_K, p.num_q_heads), rowq = sv_tok_stride(sv_of(p), SV_Q, p.num_q_heads);
        const __nv_bfloat16* kp = p.k + (t0 + r0) * rowk + hq * sv_head_stride(sv_of(p), SV_K) + c * 8;
        const __nv_bfloat16* qp = p.q + (t0 + r0) * rowq + hq * sv_head_stride(sv_of(p), SV_Q) + c * 8;
        const u32 d = (u32)(r0 * LDK + c * 8) * 2;
#pragma unroll
        for (int it = 0; it < C / 2; ++it) {
            const bool ok = r0 + 2 * it < nrows;  // (a row past the end copies nothing from the tensor's base)
            cp_async16(ks + d + (u32)(2 * it * LDK * 2), ok ? kp : p.k, ok);
            cp_async16(qs + d + (u32)(2 * it * LDK * 2), ok ? qp : p.q, ok);
            kp += 2 * rowk;
            qp += 2 * rowq;
        }
    }
    {
        constexpr int PPR = BV / 8;      // 16-byte pieces per V row (2..16: divides 32)
        constexpr int RSTEP = 32 / PPR;  // rows per step
        const int r0 = lane / PPR, c = lane % PPR;
        const i64 row = sv_tok_stride(sv_of(p), SV_V, p.num_v_heads);
        const __nv_bfloat16* vp = p.v + (t0 + r0) * row + h * sv_head_stride(sv_of(p), SV_V) + v0 + c * 8;
        const u32 vs = smem_addr(slot + Slot<BV>::V_OFF) + (u32)(r0 * Slot<BV>::LDV + c * 8) * 2;
#pragma unroll
        for (int it = 0; it < C / RSTEP; ++it) {
            const bool ok = r0 + RSTEP * it < nrows;
            cp_async16(vs + (u32)(RSTEP * it * Slot<BV>::LDV * 2), ok ? vp : p.v, ok);
            vp += RSTEP * row;
        }
    }
    // Gate inputs (gate_src): raw gates, lane l < 16 copies the aligned bf16 pair holding a[t0+l, h], lane l >= 16
    // the pair holding b[t0+l-16, h] (HV is even, so the pair lies in the same token row and never past the end);
    // precomputed gates, lane l < 16 the f32 g or alpha[t0+l, h], lane l >= 16 the f32 beta[t0+l-16, h] or the bf16
    // pair holding it. Staging them through shared memory keeps the producer free of a register that waits on DRAM.
    {
        const int HV = p.num_v_heads;
        const i64 tt = t0 + (lane & 15);
        const bool ok = tt < eos;
        if constexpr (SV) {
            const GateSrc gs = gate_src(p, lane);
            const i64 gi = ok ? tt * HV + h : 0;
            cp_async4(smem_addr(slot + Slot<BV>::GATE_OFF) + 4 * lane, gs.base + ((gi & ~(i64)gs.odd) << gs.shift), ok);
        } else {
            const i64 idx = ok ? ((tt * HV + h) & ~1LL) : 0;
            cp_async4(smem_addr(slot + Slot<BV>::GATE_OFF) + 4 * lane, (lane < 16 ? p.a : p.b) + idx, ok);
        }
    }
}

// In-kernel q/k L2 norm (SV_QK_NORM): every row of the slot's K and Q tiles becomes bf16(x / sqrt(Σx² + 1e-6)), the
// sum in fp32 (gdn_core's reference rounds the same way), before anything reads them; zero rows (past the end) stay
// zero. Lane l takes half l >> 4 of row l & 15 of each tile (8 conflict-free 16-byte loads), the halves' sums meet by
// one shuffle, and a second pass reloads, scales and stores the half (holding the row in registers would raise every
// fused kernel's register count: the producer loop's values are live around it). Then __syncwarp: the producer's own
// products read the rows next.
__device__ __forceinline__ float bf16_sq2(u32 w) {
    const float lo = __uint_as_float(w << 16), hi = __uint_as_float(w & 0xffff0000u);
    return fmaf(lo, lo, hi * hi);
}
template <int BV>
__device__ __forceinline__ void normalize_qk(unsigned char* slot, int lane) {
    const int r = lane & 15, half = lane >> 4;
#pragma unroll 1
    for (int m = 0; m < 2; ++m) {
        uint4* row = reinterpret_cast<uint4*>(slot + (m ? Slot<BV>::Q_OFF : Slot<BV>::K_OFF) + (r * LDK + 64 * half) * 2);
        float ss = 0.f;
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            const uint4 x = row[i];
            ss += (bf16_sq2(x.x) + bf16_sq2(x.y)) + (bf16_sq2(x.z) + bf16_sq2(x.w));
        }
        ss += __shfl_xor_sync(0xffffffffu, ss, 16);
        const float rs = rsqrtf(ss + SV_QK_NORM_EPS);
#pragma unroll 2
        for (int i = 0; i < 8; ++i) {
            const uint4 x = row[i];
            const u32 w[4] = {x.x, x.y, x.z, x.w};
            u32 y[4];
#pragma unroll
            for (int e = 0; e < 4; ++e)
                y[e] = cvt_bf16x2(__uint_as_float(w[e] << 16) * rs, __uint_as_float(w[e] & 0xffff0000u) * rs);
            row[i] = make_uint4(y[0], y[1], y[2], y[3]);
        }
    }
    __syncwarp();
}

// (SV_ACT_F16) The slot's K, Q and V tiles arrived as fp16: rewrite them in place as bf16, the operand type of every
// product (common/serving.cuh sv_f16x2_to_bf16x2), before anything reads them. Rows past the sequence's end are zeros
// (or garbage rows zero_rows clears afterwards) and convert harmlessly.
template <int BV>
__device__ __forceinline__ void f16_tiles_to_bf16(unsigned char* slot, int lane) {
    for (int idx = lane; idx < C * (D / 8); idx += 32) {
        const int r = idx >> 4, c = idx & 15;
        sv_f16_to_bf16_piece(slot + Slot<BV>::K_OFF + (r * LDK + c * 8) * 2);
        sv_f16_to_bf16_piece(slot + Slot<BV>::Q_OFF + (r * LDK + c * 8) * 2);
    }
    constexpr int PPR = BV / 8;
    for (int idx = lane; idx < C * PPR; idx += 32) {
        const int r = idx / PPR, c = idx % PPR;
        sv_f16_to_bf16_piece(slot + Slot<BV>::V_OFF + (r * Slot<BV>::LDV + c * 8) * 2);
    }
    __syncwarp();
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

// ------------------------------------------------------------------ producer: one chunk's preparation
// The first chunk's preparation is on the critical path of every short call, so:
//  * the K Kᵀ / Q Kᵀ tensor-core chain is issued first and the gate math sits after it in the same basic block, so
//    that ptxas interleaves the two;
//  * the gates are branch-free and evaluated by every lane, on the .approx.ftz MUFU instructions (ex2_ftz, lg2_ftz,
//    rcp_ftz, exp_ftz: common/sm90.cuh): a log-decay's absolute error is ≤ e^{A_log}·2^-21 per token, far below the
//    bf16 operands' 2^-9; exponentials under 2^-126 flush to 0 (decays may underflow to 0 by design);
//  * T's forward substitution carries r = e_c − (running sums), so that no step needs a lane-dependent select.

// K Kᵀ and Q Kᵀ (16 x 16, k-dim 128) on tensor cores; [k-step parity][n-tile]: dependent chains of 4, not 8.
template <int BV>
__device__ __forceinline__ void prep_products(const unsigned char* slot, int lane, float (&kk)[2][2][4], float (&qk)[2][2][4]) {
    const u32 ks = smem_addr(slot + Slot<BV>::K_OFF), qs = smem_addr(slot + Slot<BV>::Q_OFF);
    const u32 lo = (u32)((lane & 15) * LDK + 8 * (lane >> 4)) * 2;                         // A order
    const u32 lob = (u32)(((lane & 7) + 8 * (lane >> 4)) * LDK + 8 * ((lane >> 3) & 1)) * 2;  // B order
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
// max(x, 0) + ln(1 + e^{−|x|}); β = 1 / (1 + e^{−b}). Precomputed gates (the serving build, SV): lane l < 16 holds
// g (log g as given) or alpha (log g = max(ln alpha, −1e4): alpha = 0 stays finite), lane l >= 16 β (f32, or bf16
// in the pair); selected, not branched on, so the block stays one. γ (the inclusive prefix of the log-decays) and β
// stay in registers, returned as lane l's γ and β of token l & 15 (A and P take theirs by shuffles: no shared-memory
// round trip, no __syncwarp); the walkers' decay scalars go to the slot.
struct ChunkGates {
    float gam, be;  // γ and β of token lane & 15
};
template <int BV, bool SV>
__device__ __forceinline__ ChunkGates prep_gates(const PrefillParams& p, unsigned char* slot, int h, int nvalid,
                                                 float dtb, float nea, int lane) {
    const bool valid = (lane & 15) < nvalid;
    const u32 gpair = reinterpret_cast<const u32*>(slot + Slot<BV>::GATE_OFF)[lane];
    float graw = __uint_as_float((h & 1) ? (gpair & 0xffff0000u) : (gpair << 16));  // bf16 -> f32
    if constexpr (SV) {  // (SV_ACT_F16) raw a / b and a 16-bit beta are fp16
        if (sv_of(p).flags & SV_ACT_F16) graw = __half2float(__ushort_as_half((unsigned short)((h & 1) ? gpair >> 16 : gpair)));
    }
    const float x = graw + dtb;
    const float sp = fmaxf(x, 0.f) + 0.6931471805599453f * lg2_ftz(1.f + ex2_ftz(-1.4426950408889634f * fabsf(x)));
    const float sg = rcp_ftz(1.f + ex2_ftz(-1.4426950408889634f * graw));
    float lg, be;
    if constexpr (SV) {
        const int sflags = sv_of(p).flags;
        const float gf = __uint_as_float(gpair);  // (precomputed gates) the f32 word
        const float lgp = (sflags & SV_GATE_LINEAR) ? fmaxf(0.6931471805599453f * lg2_ftz(gf), -1.0e4f) : gf;
        const float bep = (sflags & SV_BETA_BF16) ? graw : gf;
        const bool raw = (sflags & SV_GATE_MASK) == 0;
        lg = (lane < 16 && valid) ? (raw ? nea * sp : lgp) : 0.f;
        be = (lane >= 16 && valid) ? (raw ? sg : bep) : 0.f;
    } else {
        lg = (lane < 16 && valid) ? nea * sp : 0.f;
        be = (lane >= 16 && valid) ? sg : 0.f;
    }
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
    const float sc = lane < 16 ? cg.be : cg.be * exp_ftz(cg.gam);  // (I + A) x = sc·e_c: x comes out scaled
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

// One chunk's preparation: the tensor-core products first, the gate math after them in the same basic block (see
// above).
template <int BV, bool SV>
__device__ __forceinline__ void compute_chunk(const PrefillParams& p, unsigned char* slot, unsigned char* scr,
                                              int h, int nvalid, float dtb, float nea, int lane) {
    float kk[2][2][4] = {}, qk[2][2][4] = {};
    prep_products<BV>(slot, lane, kk, qk);
    const ChunkGates cg = prep_gates<BV, SV>(p, slot, h, nvalid, dtb, nea, lane);
    prep_ap<BV>(p, slot, scr, lane, kk, qk, cg);
    __syncwarp();
    prep_t<BV>(slot, scr, lane, cg);
    __syncwarp();
}

}  // namespace gdn_prefill
