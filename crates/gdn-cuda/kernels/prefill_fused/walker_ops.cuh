// prefill_fused/walker_ops.cuh — the walkers' per-chunk steps on tensor cores (mma.sync m16n8k16), shared by the walk
// schemes of walkers.cuh: ldmatrix lane addresses, Vn = U − X, the outputs and their stores, the state update, and the
// state slice's rows in memory (the pool row, padding), its load and store in either layout, and the checkpoints.
#pragma once

namespace gdn_prefill {

// Fragment conventions (mma.sync m16n8k16): an accumulator [nt][r] of a 16 x 16 product holds
// (row g, cols 8nt + 2t, +1) in r = 0, 1 and (row g + 8, same cols) in r = 2, 3.
struct WalkerLanes {
    u32 lo_row, lo_kb, lo_16, lo_vt, lo_tt;
};
template <int BV>
__device__ __forceinline__ WalkerLanes walker_lanes(int lane, int wv) {
    WalkerLanes l;
    // ldmatrix x4 lane addresses: lanes 8i..8i+7 address the rows of matrix i. "A order" (lo_row, lo_vt): matrices
    // (rows 0-7, cols 0-7), (rows 8-15, cols 0-7), (rows 0-7, cols 8-15), (rows 8-15, cols 8-15) = a0..a3. The tiles
    // read only as B operands (lo_kb, lo_16, lo_tt) load in "B order", so that the two registers of n-tile nt are
    // r[2nt], r[2nt + 1], a register pair as the mma wants it (with r[nt], r[nt + 2] ptxas copies them into pairs,
    // ~2 moves per mma).
    l.lo_row = (u32)((lane & 15) * LDK + 8 * (lane >> 4)) * 2;                        // K (update: .trans, A order)
    l.lo_kb = (u32)(((lane & 7) + 8 * (lane >> 4)) * LDK + 8 * ((lane >> 3) & 1)) * 2;  // K/Q as B (n = rows)
    l.lo_16 = (u32)(((lane & 7) + 8 * (lane >> 4)) * LDS16 + 8 * ((lane >> 3) & 1)) * 2;  // P as B (n = rows)
    l.lo_vt = (u32)(((lane & 7) + 8 * (lane >> 4)) * Slot<BV>::LDV + 16 * wv + 8 * ((lane >> 3) & 1)) * 2;  // Vᵀ
    l.lo_tt = (u32)((lane & 15) * LDS16 + 8 * (lane >> 4)) * 2;  // transposed 16x16 as B (n = columns)
    return l;
}

// Vn = U − X with U = Vᵀ Tbᵀ (hi + lo) and X = Sᵀ Wᵀ = Z Tgᵀ (Z and Tg as hi + lo: 3 products), [16 v][16 tokens].
// (W = Tg K is never formed nor rounded to bf16.) In two parts so that a walker can issue the Z-independent half (the
// tile loads and U's 4 mma) before Z is known, off the state chain.
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
        mma(o.U[nt], va, th[2 * nt], th[2 * nt + 1]);
        mma(o.U[nt], va, tl[2 * nt], tl[2 * nt + 1]);
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
        mma(xa, zh, o.gh[2 * nt], o.gh[2 * nt + 1]);
        mma(xb, zl, o.gh[2 * nt], o.gh[2 * nt + 1]);
        mma(xc, zh, o.gl[2 * nt], o.gl[2 * nt + 1]);
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
        mma(O[nt], vh, ph[2 * nt], ph[2 * nt + 1]);
        mma(O[nt], vl, ph[2 * nt], ph[2 * nt + 1]);
        mma(O[nt], vh, pl[2 * nt], pl[2 * nt + 1]);
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
        for (int r = 0; r < 4; ++r) {
            __nv_bfloat16* o = os + (8 * nt + 2 * t + (r & 1)) * LDS16 + g + 8 * (r >> 1);
            if (sv_of(p).flags & SV_ACT_F16) *reinterpret_cast<unsigned short*>(o) = sv_act16(sv_of(p), O[nt][r]);
            else *o = __float2bfloat16_rn(O[nt][r]);
        }
    __syncwarp();
    const int i = lane >> 1, half = lane & 1;
    const i64 tok = tok0 + i;
    if (tok < eos) {
        const uint4 val = *reinterpret_cast<const uint4*>(os + i * LDS16 + 8 * half);
        *reinterpret_cast<uint4*>(p.out + tok * sv_tok_stride(sv_of(p), SV_OUT, p.num_v_heads) +
                                  h * sv_head_stride(sv_of(p), SV_OUT) + vw + 8 * half) = val;
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
// The update operand Vn·e^{γC−γ} as the A fragment of one bf16. Its 2^-9 relative rounding goes straight into S and,
// with unnormalised k, is the dominant new_state error; a hi + lo pair would cost the walker 16 more mma per chunk.
__device__ __forceinline__ void update_operand(const UpdScale& e, const float (&Vn)[2][4], u32 (&u)[4]) {
    u[0] = cvt_bf16x2(Vn[0][0] * e.e0.x, Vn[0][1] * e.e0.y);
    u[1] = cvt_bf16x2(Vn[0][2] * e.e0.x, Vn[0][3] * e.e0.y);
    u[2] = cvt_bf16x2(Vn[1][0] * e.e1.x, Vn[1][1] * e.e1.y);
    u[3] = cvt_bf16x2(Vn[1][2] * e.e1.x, Vn[1][3] * e.e1.y);
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
__device__ __forceinline__ void state_update(float (&S)[NT][4], const u32 (&kf)[NT / 2][4], const u32 (&u)[4]) {
#pragma unroll
    for (int pp = 0; pp < NT / 2; ++pp) {
        mma(S[2 * pp], u[0], u[1], u[2], u[3], kf[pp][0], kf[pp][1]);
        mma(S[2 * pp + 1], u[0], u[1], u[2], u[3], kf[pp][2], kf[pp][3]);
    }
}

// ---- the state's rows in memory (the sequence's row and padding: common/serving.cuh sv_state_row)
// `idx`: pool_indices[seq] (loaded by the caller, ahead of its use), ignored outside pool mode.
__device__ __forceinline__ SvStateRow state_row(const PrefillParams& p, i64 seq, i64 idx, i64 len, int h) {
    return sv_state_row(sv_of(p), p.state != nullptr, seq, idx, len, h, p.num_v_heads, sv_state_rows(p));
}

// Load / store NT k-tiles of 8 of Sᵀ rows vw + g (+8), k columns kb + 8nt + 2t (+1) at element offset `base` (one
// (row, head) of a [.., HV, 128, 128] tensor) in the call's layout: k-last ([v][k], adjacent pairs) or K-first
// (SV_KFIRST, [k][v]: single elements; at sequence start and end only). Zeros when `have` is false.
template <int NT, bool BF16>
__device__ __forceinline__ void load_state(const PrefillParams& p, float (&S)[NT][4], i64 base, int vw, int kb, int lane,
                                           bool have) {
    const int g = lane >> 2, t = lane & 3;
    const bool kfirst = (sv_of(p).flags & SV_KFIRST) != 0;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
        const int k = kb + 8 * nt + 2 * t;
        if (!have) {
            S[nt][0] = S[nt][1] = S[nt][2] = S[nt][3] = 0.f;
        } else if (kfirst) {
            const i64 o = base + (i64)k * D + vw + g;
            S[nt][0] = state_ld1<BF16>(sv_of(p), p.state, o);
            S[nt][1] = state_ld1<BF16>(sv_of(p), p.state, o + D);
            S[nt][2] = state_ld1<BF16>(sv_of(p), p.state, o + 8);
            S[nt][3] = state_ld1<BF16>(sv_of(p), p.state, o + D + 8);
        } else {
            const float2 x0 = state_ld2<BF16>(sv_of(p), p.state, base + (i64)(vw + g) * D + k);
            const float2 x1 = state_ld2<BF16>(sv_of(p), p.state, base + (i64)(vw + g + 8) * D + k);
            S[nt][0] = x0.x; S[nt][1] = x0.y; S[nt][2] = x1.x; S[nt][3] = x1.y;
        }
    }
}
template <int NT, bool BF16>
__device__ __forceinline__ void store_slice(const ServingParams& sv, void* dst, const float (&S)[NT][4], i64 base, int vw, int kb, int lane,
                                            bool kfirst) {
    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
        const int k = kb + 8 * nt + 2 * t;
        if (kfirst) {
            const i64 o = base + (i64)k * D + vw + g;
            state_st1<BF16>(sv, dst, o, S[nt][0]);
            state_st1<BF16>(sv, dst, o + D, S[nt][1]);
            state_st1<BF16>(sv, dst, o + 8, S[nt][2]);
            state_st1<BF16>(sv, dst, o + D + 8, S[nt][3]);
        } else {
            state_st2<BF16>(sv, dst, base + (i64)(vw + g) * D + k, S[nt][0], S[nt][1]);
            state_st2<BF16>(sv, dst, base + (i64)(vw + g + 8) * D + k, S[nt][2], S[nt][3]);
        }
    }
}
// The final state to new_state (when the sequence writes it).
template <int NT, bool BF16STATE>
__device__ __forceinline__ void store_state(const PrefillParams& p, const float (&S)[NT][4], const SvStateRow& sr, int vw,
                                            int kb, int lane) {
    if (sr.write) store_slice<NT, BF16STATE>(sv_of(p), p.new_state, S, sr.base, vw, kb, lane, (sv_of(p).flags & SV_KFIRST) != 0);
}
// Prefix-cache checkpoints (serving.checkpoint_every > 0, a multiple of 64 tokens = 4 chunks): a walker calls this
// after each chunk behind one uniform branch on the params (the definition mode's chunk loop runs the same
// instructions plus that branch; a loop nest of checkpoint runs would cost it ~30 instructions). After `done` chunks,
// when done·C tokens are a multiple of the interval and the sequence has that many, the state (the walker's slice)
// goes to row checkpoint_starts[seq] + done·C / every − 1 of the checkpoints [rows, HV, 128, 128] (the state's layout;
// f32 with SV_CKPT_F32, else the state dtype). A walker holds the whole state at every chunk end.
// The sequence and its tokens are re-read here rather than held in registers across the chunk loop (bv128 has none
// to spare): the longest-first kernels keep them in shared memory (`lfv`, warp 0's record), the others take the
// sequence from blockIdx (NVG CTAs per (sequence, head)) and read cu_seqlens again.
__device__ __forceinline__ int ckpt_chunks(const PrefillParams& p) { return sv_of(p).checkpoint_every / C; }
template <int NT, bool BF16STATE, int NVG>
__device__ __forceinline__ void checkpoint(const PrefillParams& p, const float (&S)[NT][4], const i64* lfv, int done,
                                           int h, int vw, int kb, int lane) {
    const ServingParams& sv = sv_of(p);
    const int every = ckpt_chunks(p);
    if (every <= 0 || done % every != 0) return;
    i64 seq, bos, eos;
    if (lfv != nullptr) {
        seq = lfv[0];
        bos = lfv[1];
        eos = lfv[2];
    } else {
        seq = (i64)(blockIdx.x / (unsigned)(NVG * p.num_v_heads));
        bos = cu_at(p, seq);
        eos = cu_at(p, seq + 1);
    }
    if ((i64)done * C > eos - bos) return;  // (the last, partial chunk)
    const i64 row = sv_checkpoint_start(sv, seq) + done / every - 1;
    const i64 base = (row * p.num_v_heads + h) * (i64)(D * D);
    const bool kfirst = (sv.flags & SV_KFIRST) != 0;
    if (sv.flags & SV_CKPT_F32) store_slice<NT, false>(sv_of(p), sv.checkpoints, S, base, vw, kb, lane, kfirst);
    else store_slice<NT, BF16STATE>(sv_of(p), sv.checkpoints, S, base, vw, kb, lane, kfirst);
}

}  // namespace gdn_prefill
