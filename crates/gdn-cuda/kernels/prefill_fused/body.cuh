// prefill_fused/body.cuh — the fused kernel's body, prefill_body: the CTA's (sequence, head, value tile) and its state
// row (pool row, padding: walker_ops.cuh state_row), the shared-memory carve-up and the mbarrier set-up, the producer
// loop over its chunks, and the dispatch to the tile's walkers.
#pragma once

namespace gdn_prefill {

// A padded sequence's outputs: value columns [c0, c0 + width) of its `len` token rows from `bos`, zero, as 16-byte
// stores by every thread of the CTA.
__device__ __forceinline__ void zero_output(const PrefillParams& p, i64 bos, i64 len, int h, int c0, int width) {
    const int pieces = width / 8;
    const i64 n = len * pieces;
    const i64 ts = sv_tok_stride(sv_of(p), SV_OUT, p.num_v_heads), hs = sv_head_stride(sv_of(p), SV_OUT);
    for (i64 e = threadIdx.x; e < n; e += blockDim.x) {
        const i64 tok = bos + e / pieces;
        *reinterpret_cast<uint4*>(p.out + tok * ts + h * hs + c0 + 8 * (int)(e % pieces)) =
            make_uint4(0u, 0u, 0u, 0u);
    }
}

// =============================== producer pw: chunks pw, pw + NP, ... of the CTA's sequence into the ring.
// SV: the serving build (precomputed gates, in-kernel q/k norm), chosen once per CTA from the flags, so that the
// definition mode runs a loop with none of it.
template <int BV, int NP, bool SV>
__device__ __forceinline__ void producer_loop(const PrefillParams& p, unsigned char* smem, unsigned char* pscr,
                                              u32 full0, u32 empty0, int pw, int h, int hq, int v0, int lane, i64 bos,
                                              i64 eos, i64 len, int nch, bool spec, float dtb, float alog,
                                              int start_threads) {
    constexpr int R = ring_depth<NP>();
    using SL = Slot<BV>;
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
    if (pw < nch && !spec_ok)
        load_chunk<BV, SV>(p, smem + (pw % R) * SL::BYTES, bos + (i64)pw * C, eos, hq, h, v0, lane);
    cp_async_commit();
    if (staged_start<BV>()) named_bar_arrive(START_BAR, start_threads);  // staged_start: the walkers may load their states
    for (int j = pw; j < nch; j += NP) {
        // Start the loads of this producer's next chunk jn = j + NP before computing chunk j, so that they
        // overlap a whole computation. Its slot held chunk jn − R = j − NP − 1: wait until the walkers
        // released it (phase (jn / R) − 1 of EMPTY[jn % R]).
        const int jn = j + NP;
        const bool late = staged_start<BV>() && j == pw;  // staged_start: the first iteration loads jn after chunk j's math
        if (jn < nch && !late) {
            if (jn >= R) mbar_wait(empty0 + 8 * (jn % R), (u32)((jn / R) - 1) & 1u);
            load_chunk<BV, SV>(p, smem + (jn % R) * SL::BYTES, bos + (i64)jn * C, eos, hq, h, v0, lane);
        }
        cp_async_commit();
        cp_async_wait<1>();  // chunk j has landed (this lane's copies); chunk jn may still be in flight
        __syncwarp();
        const i64 rem = len - (i64)j * C;
        if (spec_ok && j == 0 && rem < C) {  // the speculative rows [len, 16) are not sequence 0's: zero them
            zero_rows<BV>(smem, (int)rem, lane);
            __syncwarp();
        }
        const int nvalid = rem < C ? (int)rem : C;
        if (SV && (sv_of(p).flags & SV_ACT_F16)) f16_tiles_to_bf16<BV>(smem + (j % R) * SL::BYTES, lane);
        if (SV && (sv_of(p).flags & SV_QK_NORM)) normalize_qk<BV>(smem + (j % R) * SL::BYTES, lane);
        compute_chunk<BV, SV>(p, smem + (j % R) * SL::BYTES, scr, h, nvalid, dtb, nea, lane);
        mbar_arrive(full0 + 8 * (j % R));  // every lane: its copies and stores happen-before the walkers' reads
        if (late && jn < nch) {  // (jn < R: its slot has not been used yet)
            load_chunk<BV, SV>(p, smem + (jn % R) * SL::BYTES, bos + (i64)jn * C, eos, hq, h, v0, lane);
            cp_async_commit();  // (the next iteration's wait<1> leaves only its own chunk's group in flight)
        }
    }
    cp_async_wait<0>();
}

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
    const int warp = threadIdx.x >> 5;
    const int v0 = vg * BV;
    // Sequence 0 starts at token 0 (cu_seqlens[0] = 0), so producer 0 loads its first chunk before cu_seqlens has
    // arrived — one DRAM round trip off the critical path of short calls. Rows < lead_rows exist in the tensors; the
    // rows past the sequence's end are zeroed once its length is known (below), and a cu_seqlens[0] != 0 reloads.
    const bool spec = !LF && seq == 0 && p.lead_rows > 0 && warp == NWK;  // producer 0
    const bool svprod = (sv_of(p).flags & (SV_GATE_MASK | SV_QK_NORM | SV_ACT_F16)) != 0;  // the producers' serving build
    if (spec) {  // slot 0, not committed yet
        if (svprod) load_chunk<BV, true>(p, smem, 0, p.lead_rows, hq, h, v0, lane);
        else load_chunk<BV, false>(p, smem, 0, p.lead_rows, hq, h, v0, lane);
    }
    // cu_seqlens, the head's gate parameters (raw gates) and the sequence's pool row (pool mode) are requested before
    // the barrier set-up below (cold DRAM round trips: every CTA of a sequence > 0 waits for its offsets before it can
    // load anything).
    i64 bos = LF ? 0 : cu_at(p, seq), eos = LF ? 0 : cu_at(p, seq + 1);
    const bool pool = sv_of(p).pool_indices != nullptr;
    i64 pidx = !LF && pool ? sv_pool_index(sv_of(p), seq) : 0;
    const bool raw_gates = (sv_of(p).flags & SV_GATE_MASK) == 0;
    float dtb = raw_gates ? p.dt_bias[h] : 0.f, alog = raw_gates ? p.A_log[h] : 0.f;
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
    // The offsets are used only through a value the barrier returns (the thread count, so + 0): otherwise ptxas computes
    // the sequence length before the barrier and every warp waits there for the DRAM round trip (a plain bar.sync
    // with the loads' values moved through one asm does not stop it).
    {
        const i64 zero = (i64)__syncthreads_count(1) - (i64)blockDim.x;
        bos += zero;
        eos += zero;
        pidx += zero;
    }
    if constexpr (LF) {
        seq = lfv[0];
        bos = lfv[1];
        eos = lfv[2];
        if (pool && seq >= 0) pidx = sv_pool_index(sv_of(p), seq);
    }
    if constexpr (SPLIT) {
        if (seq < 0) return;  // a spare group (CTA-uniform)
    }
    const i64 len = eos > bos ? eos - bos : 0;
    const SvStateRow sr = state_row(p, seq, pidx, len, h);
    if (sr.pad) {  // (CTA-uniform) a padded sequence: its output rows are zero, no state is read or written
        cp_async_commit();
        cp_async_wait<0>();  // (sequence 0's speculative copies, if any, land before the CTA leaves)
        const bool half_cta = SPLIT && lfv[3] >= 0;
        zero_output(p, bos, len, h, half_cta ? 64 * (int)lfv[3] : v0, half_cta ? 64 : BV);
        return;
    }
    int wv = warp;  // the walker's 16-row group in the tile (SPLIT half CTAs: 4·half + warp)
    if constexpr (SPLIT) {
        const int half = (int)lfv[3];
        if (half >= 0) {
            if (warp >= NW / 2 && warp < NWK) return;  // walkers 4..7 of a half CTA
            if (warp < NWK) wv = (NW / 2) * half + warp;
        }
    }

    const int nch = (int)((len + C - 1) / C);
    // staged_start: the threads of the start barrier — every producer, and every walker that holds a state
    // (SINGLE: the walking walkers, 4 in a split half CTA; MIRROR: both roles)
    int start_threads = 32 * (NP + (SCHEME == WALK_MIRROR ? 2 * NW : NW));
    if constexpr (SPLIT) start_threads = 32 * (NP + (lfv[3] >= 0 ? NW / 2 : NW));

    if (warp >= NWK) {  // the producers
        if (svprod)
            producer_loop<BV, NP, true>(p, smem, pscr, full0, empty0, warp - NWK, h, hq, v0, lane, bos, eos, len, nch,
                                        spec, dtb, alog, start_threads);
        else
            producer_loop<BV, NP, false>(p, smem, pscr, full0, empty0, warp - NWK, h, hq, v0, lane, bos, eos, len, nch,
                                         spec, dtb, alog, start_threads);
        return;
    }

    // =============================== walkers: value rows [vw, vw + 16) per 16-row group (see the walker functions)
    if constexpr (SCHEME == WALK_SINGLE)
        single_walker<NW, NP, BF16STATE>(p, smem, wstage, full0, empty0, sr, LF ? lfv : nullptr, h, v0, lane, wv, bos, eos,
                                         nch, start_threads);
    else if constexpr (SCHEME == WALK_MIRROR) {
        if (warp >= NW)
            mirror_walker<2, NW, NP, BF16STATE>(p, smem, hring, wstage, full0, empty0, vn0, sr, LF ? lfv : nullptr, h, v0,
                                                lane, warp, bos, eos, nch, start_threads);
        else
            mirror_walker<1, NW, NP, BF16STATE>(p, smem, hring, wstage, full0, empty0, vn0, sr, LF ? lfv : nullptr, h, v0,
                                                lane, warp, bos, eos, nch, start_threads);
    } else if (warp >= 2 * NW)
        ksplit_output_walker<NW, NP>(p, smem, hring, wstage, full0, empty0, vn0, sready0, h, v0, lane, warp, bos, eos, nch);
    else
        ksplit_state_walker<NW, NP, BF16STATE>(p, smem, hring, zx, full0, empty0, vn0, sready0, sr, LF ? lfv : nullptr, h,
                                               v0, lane, warp, nch);
}

}  // namespace gdn_prefill
