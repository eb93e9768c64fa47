// prefill_fused/body.cuh — the fused kernel's body, prefill_body: the CTA's (sequence, head, value tile), the
// shared-memory carve-up and the mbarrier set-up, the producer loop over its chunks, and the dispatch to the tile's
// walkers.
#pragma once

namespace gdn_prefill {

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
    if (spec) load_chunk<BV>(p, smem, 0, p.lead_rows, hq, h, v0, lane);  // slot 0, not committed yet
    // cu_seqlens and the head's gate parameters are requested before the barrier set-up below (cold DRAM round trips:
    // every CTA of a sequence > 0 waits for its offsets before it can load anything).
    i64 bos = LF ? 0 : p.cu_seqlens[seq], eos = LF ? 0 : p.cu_seqlens[seq + 1];
    float dtb = p.dt_bias[h], alog = p.A_log[h];
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
    }
    if constexpr (LF) {
        seq = lfv[0];
        bos = lfv[1];
        eos = lfv[2];
    }
    int wv = warp;  // the walker's 16-row group in the tile (SPLIT half CTAs: 4·half + warp)
    if constexpr (SPLIT) {
        if (seq < 0) return;  // a spare group (CTA-uniform)
        const int half = (int)lfv[3];
        if (half >= 0) {
            if (warp >= NW / 2 && warp < NWK) return;  // walkers 4..7 of a half CTA
            if (warp < NWK) wv = (NW / 2) * half + warp;
        }
    }

    const i64 len = eos > bos ? eos - bos : 0;
    const int nch = (int)((len + C - 1) / C);
    // staged_start: the threads of the start barrier — every producer, and every walker that holds a state
    // (SINGLE: the walking walkers, 4 in a split half CTA; MIRROR: both roles)
    int start_threads = 32 * (NP + (SCHEME == WALK_MIRROR ? 2 * NW : NW));
    if constexpr (SPLIT) start_threads = 32 * (NP + (lfv[3] >= 0 ? NW / 2 : NW));

    if (warp >= NWK) {
        // =============================== producer
        const int pw = warp - NWK;
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
        if (pw < nch && !spec_ok) load_chunk<BV>(p, smem + (pw % R) * SL::BYTES, bos + (i64)pw * C, eos, hq, h, v0, lane);
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
                load_chunk<BV>(p, smem + (jn % R) * SL::BYTES, bos + (i64)jn * C, eos, hq, h, v0, lane);
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
            compute_chunk<BV>(p, smem + (j % R) * SL::BYTES, scr, h, nvalid, dtb, nea, lane);
            mbar_arrive(full0 + 8 * (j % R));  // every lane: its copies and stores happen-before the walkers' reads
            if (late && jn < nch) {  // (jn < R: its slot has not been used yet)
                load_chunk<BV>(p, smem + (jn % R) * SL::BYTES, bos + (i64)jn * C, eos, hq, h, v0, lane);
                cp_async_commit();  // (the next iteration's wait<1> leaves only its own chunk's group in flight)
            }
        }
        cp_async_wait<0>();
        return;
    }

    // =============================== walkers: value rows [vw, vw + 16) per 16-row group (see the walker functions)
    if constexpr (SCHEME == WALK_SINGLE)
        single_walker<NW, NP, BF16STATE>(p, smem, wstage, full0, empty0, seq, h, v0, lane, wv, bos, eos, len, nch,
                                         start_threads);
    else if constexpr (SCHEME == WALK_MIRROR) {
        if (warp >= NW)
            mirror_walker<2, NW, NP, BF16STATE>(p, smem, hring, wstage, full0, empty0, vn0, seq, h, v0, lane, warp, bos, eos,
                                                len, nch, start_threads);
        else
            mirror_walker<1, NW, NP, BF16STATE>(p, smem, hring, wstage, full0, empty0, vn0, seq, h, v0, lane, warp, bos, eos,
                                                len, nch, start_threads);
    } else if (warp >= 2 * NW)
        ksplit_output_walker<NW, NP>(p, smem, hring, wstage, full0, empty0, vn0, sready0, h, v0, lane, warp, bos, eos, nch);
    else
        ksplit_state_walker<NW, NP, BF16STATE>(p, smem, hring, zx, full0, empty0, vn0, sready0, seq, h, v0, lane, warp, len, nch);
}

}  // namespace gdn_prefill
