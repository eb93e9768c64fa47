// prefill_fused/walkers.cuh — the walk schemes (params.cuh walk_scheme): the warps that carry a fused CTA's sequential
// state chain, one chunk after another from the producers' ring, and write the outputs and the final state.
//   single_walker                                SINGLE (bv64, bv128): one warp per 16 value rows
//   mirror_walker<1>, mirror_walker<2>           MIRROR (bv32): a state walker and an output walker per 16 rows
//   ksplit_state_walker, ksplit_output_walker    KSPLIT (bv16): two k-half state walkers and an output walker
#pragma once

namespace gdn_prefill {

// ---- SINGLE walker (bv64, bv128): value rows [vw, vw + 16), the whole chunk.
// Its state slice Sᵀ[16 v][128 k] lives in fp32 mma accumulator fragments (64 registers) for the whole sequence.
template <int NW, int NP, bool BF16STATE>
__device__ __forceinline__ void single_walker(const PrefillParams& p, unsigned char* smem, unsigned char* wstage,
                                              u32 full0, u32 empty0, const SvStateRow& sr, const i64* lfv, int h,
                                              int v0, int lane, int warp, i64 bos, i64 eos, int nch,
                                              int start_threads) {
    constexpr int BV = 16 * NW;
    constexpr int R = ring_depth<NP>();
    using SL = Slot<BV>;
    const int t = lane & 3;
    const int vw = v0 + 16 * warp;
    const WalkerLanes l = walker_lanes<BV>(lane, warp);
    float S[16][4];  // Sᵀ[v][k]: tile nt = k 8nt..8nt+7
    if (staged_start<BV>()) named_bar_sync(START_BAR, start_threads);  // after the producers' first loads
    load_state<16, BF16STATE>(p, S, sr.base, vw, 0, lane, sr.read);
    for (int c = 0; c < nch; ++c) {
        unsigned char* slot = smem + (c % R) * SL::BYTES;
        mbar_wait(full0 + 8 * (c % R), (u32)(c / R) & 1u);
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
        u32 u[4], kf[8][4];
        update_operand(e, Vn, u);
        scale_state<16>(S, e.egc);
        load_update_k<16>(ks, l.lo_row, kf);
        state_update<16>(S, kf, u);
        form_output<BV>(slot, l, t, Y, Vn, O);
        mbar_arrive(empty0 + 8 * (c % R));  // this lane is done with the slot (it may take chunk c + R)
        store_output(p, wstage + warp * WS_BYTES, O, bos + (i64)c * C, eos, h, vw, lane);
        if (sv_of(p).checkpoint_every > 0) checkpoint<16, BF16STATE, D / BV>(p, S, lfv, c + 1, h, vw, 0, lane);
    }
    store_state<16, BF16STATE>(p, S, sr, vw, 0, lane);  // (zeros for an empty sequence in definition mode)
}

// ---- MIRROR walkers (bv32): ROLE 1, the state walker of rows [vw, vw + 16) (warp wv), runs Z = Sᵀ Kᵀ, U, X, Vn
// and the update (42 mma) and hands Vn (exact f32) to ROLE 2, the output walker (warp NW + wv), which mirrors S by
// applying the same update to the same operands (so the same bits) and forms Y = Sᵀ Qᵀ and O (38 mma), at most a
// ring behind. One instantiation per role: a role branch inside the unrolled loops makes them 50% slower.
template <int ROLE, int NW, int NP, bool BF16STATE>
__device__ __forceinline__ void mirror_walker(const PrefillParams& p, unsigned char* smem, unsigned char* hring,
                                              unsigned char* wstage, u32 full0, u32 empty0, u32 vn0,
                                              const SvStateRow& sr, const i64* lfv, int h, int v0, int lane, int warp,
                                              i64 bos, i64 eos, int nch, int start_threads) {
    constexpr int BV = 16 * NW;
    constexpr int R = ring_depth<NP>();
    using SL = Slot<BV>;
    const int t = lane & 3;
    const int wv = ROLE == 2 ? warp - NW : warp;
    const int vw = v0 + 16 * wv;
    const WalkerLanes l = walker_lanes<BV>(lane, wv);
    float S[16][4];
    if (staged_start<BV>()) named_bar_sync(START_BAR, start_threads);  // after the producers' first loads
    load_state<16, BF16STATE>(p, S, sr.base, vw, 0, lane, sr.read);
    for (int c = 0; c < nch; ++c) {
        unsigned char* slot = smem + (c % R) * SL::BYTES;
        float4* vnx = reinterpret_cast<float4*>(hring + ((c % R) * NW + wv) * handoff_bytes<BV>()) + 2 * lane;
        mbar_wait(full0 + 8 * (c % R), (u32)(c / R) & 1u);
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
        u32 u[4], kf[8][4];
        update_operand(e, Vn, u);
        scale_state<16>(S, e.egc);
        load_update_k<16>(ks, l.lo_row, kf);
        state_update<16>(S, kf, u);
        mbar_arrive(empty0 + 8 * (c % R));  // this lane is done with the slot (it may take chunk c + R)
        if constexpr (ROLE == 2) {
            store_output(p, wstage + wv * WS_BYTES, O, bos + (i64)c * C, eos, h, vw, lane);
        } else {  // (the state walker writes the checkpoints)
            if (sv_of(p).checkpoint_every > 0) checkpoint<16, BF16STATE, D / BV>(p, S, lfv, c + 1, h, vw, 0, lane);
        }
    }
    if constexpr (ROLE == 1) {
        store_state<16, BF16STATE>(p, S, sr, vw, 0, lane);  // (zeros for an empty sequence in definition mode)
    }
}

// ---- KSPLIT state walker: warp 2wv + kh carries k half kh of Sᵀ rows [vw, vw + 16) — Sᵀ[16 v][64 k], 32 registers.
// Per chunk: the partial Z_kh = Sᵀ_kh K_khᵀ (8 mma) — while packing Sᵀ_kh to bf16 it also hands those A fragments to
// the output walker — then the two halves swap partials through shared memory (one named barrier per pair and
// chunk) and both form Z = Z_0 + Z_1 (the same bits: fp32 addition commutes), U, X, Vn (10 mma, identical in both)
// and update their own half of S (8 mma). 26 mma on the chain per warp (a MIRROR state walker runs 42), the two
// halves on different sub-partitions. Vn goes to the output walker with the S fragments (n-tile kh from half kh).
template <int NW, int NP, bool BF16STATE>
__device__ __forceinline__ void ksplit_state_walker(const PrefillParams& p, unsigned char* smem, unsigned char* hring,
                                             unsigned char* zx, u32 full0, u32 empty0, u32 vn0, u32 sready0,
                                             const SvStateRow& sr, const i64* lfv, int h, int v0, int lane, int warp,
                                             int nch) {
    constexpr int BV = 16 * NW;
    constexpr int R = ring_depth<NP>();
    using SL = Slot<BV>;
    const int t = lane & 3;
    const int wv = warp >> 1, kh = warp & 1;
    const int vw = v0 + 16 * wv;
    const WalkerLanes l = walker_lanes<BV>(lane, wv);
    float S[8][4];  // Sᵀ[v][64 kh + k]: tile nt = k 8nt..8nt+7 of this half
    load_state<8, BF16STATE>(p, S, sr.base, vw, 64 * kh, lane, sr.read);
    float4* const zmine = reinterpret_cast<float4*>(zx + wv * ZX_BYTES) + (kh * 32 + lane) * 2;  // + parity · 128
    const float4* const zother = reinterpret_cast<const float4*>(zx + wv * ZX_BYTES) + ((1 - kh) * 32 + lane) * 2;
    for (int c = 0; c < nch; ++c) {
        unsigned char* slot = smem + (c % R) * SL::BYTES;
        unsigned char* hand = hring + ((c % R) * NW + wv) * handoff_bytes<BV>();
        mbar_wait(full0 + 8 * (c % R), (u32)(c / R) & 1u);
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
        // The bf16 Sᵀ fragments are out: the output walker's Y = Sᵀ Qᵀ need not wait for Vn (release: the stores
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
            asm volatile("bar.sync %0, 64;" ::"r"(1 + wv) : "memory");
            const float4 o0 = zother[par], o1 = zother[par + 1];
            Zs[0][0] = m0.x + o0.x; Zs[0][1] = m0.y + o0.y; Zs[0][2] = m0.z + o0.z; Zs[0][3] = m0.w + o0.w;
            Zs[1][0] = m1.x + o1.x; Zs[1][1] = m1.y + o1.y; Zs[1][2] = m1.z + o1.z; Zs[1][3] = m1.w + o1.w;
        }
        float Vn[2][4];
        vn_finish(vo, Zs, Vn);
        u32 u[4];
        update_operand(e, Vn, u);
        state_update<8>(S, kf, u);
        {  // n-tile kh of Vn (exact f32) to the output walker, then release it (the S fragments went out with SREADY)
            float4* vnx = reinterpret_cast<float4*>(hand) + 2 * lane;
            vnx[kh] = kh ? make_float4(Vn[1][0], Vn[1][1], Vn[1][2], Vn[1][3])
                         : make_float4(Vn[0][0], Vn[0][1], Vn[0][2], Vn[0][3]);
            mbar_arrive(vn0 + 8 * (c % R));  // release: the stores above happen-before the output walker's reads
        }
        mbar_arrive(empty0 + 8 * (c % R));  // this lane is done with the slot (it may take chunk c + R)
        if (sv_of(p).checkpoint_every > 0) checkpoint<8, BF16STATE, D / BV>(p, S, lfv, c + 1, h, vw, 64 * kh, lane);
    }
    store_state<8, BF16STATE>(p, S, sr, vw, 64 * kh, lane);  // (zeros for an empty sequence in definition mode)
}

// ---- KSPLIT output walker: warp 2NW + wv forms the outputs of rows [vw, vw + 16): Y = Sᵀ Qᵀ from the state
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
    for (int c = 0; c < nch; ++c) {
        unsigned char* slot = smem + (c % R) * SL::BYTES;
        const unsigned char* hand = hring + ((c % R) * NW + wv) * handoff_bytes<BV>();
        mbar_wait(full0 + 8 * (c % R), (u32)(c / R) & 1u);
        mbar_wait(sready0 + 8 * (c % R), (u32)(c / R) & 1u);  // bf16 Sᵀ (Vn is waited for after Y)
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
        mbar_wait(vn0 + 8 * (c % R), (u32)(c / R) & 1u);
        {
            const float4 x0 = reinterpret_cast<const float4*>(hand)[2 * lane];
            const float4 x1 = reinterpret_cast<const float4*>(hand)[2 * lane + 1];
            Vn[0][0] = x0.x; Vn[0][1] = x0.y; Vn[0][2] = x0.z; Vn[0][3] = x0.w;
            Vn[1][0] = x1.x; Vn[1][1] = x1.y; Vn[1][2] = x1.z; Vn[1][3] = x1.w;
        }
        form_output<BV>(slot, l, t, Y, Vn, O);
        mbar_arrive(empty0 + 8 * (c % R));  // done with the slot and the hand-off
        store_output(p, wstage + wv * WS_BYTES, O, bos + (i64)c * C, eos, h, vw, lane);
    }
}

}  // namespace gdn_prefill
