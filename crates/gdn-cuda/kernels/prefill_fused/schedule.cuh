// prefill_fused/schedule.cuh — which sequence a fused CTA runs. The plain kernels run CTA group r (blockIdx.x / (HV ·
// 128 / BV)) on sequence r, in batch order; the longest-first kernels (gdn_prefill_*_lf) on the sequence of rank r by
// length, and the split kernels (gdn_prefill_*_bv128_sp) also give the longest sequences two CTAs of 64 value rows.
// lf_rank (warp 0, before the set-up barrier) leaves the CTA's (sequence, bos, eos (, half)) in shared memory. And the
// device plan's longest sequence, whatever the offsets' width (call_longest_seq).
#pragma once

namespace gdn_prefill {

// Longest first. The block scheduler starts CTAs in blockIdx order, one per SM at a time for bv64 / bv128; in batch
// order a long sequence that comes late starts its chain only after the short ones before it have run, and the call's
// time becomes (its start) + (its chain) instead of max(chain, work). CTA group r runs the sequence of rank r: the
// sequences longer than it, or as long and before it in the batch — a strict total order, so the ranks are a
// permutation and every (sequence, head, tile) still has exactly one CTA. Warp 0 ranks (lane l holds sequences l,
// l + 32, l + 64, l + 96; 32-bit keys (length clamped to 2^25 − 1, 127 − index): one round of cu_seqlens loads, then
// N/4 broadcast loads of the keys from shared memory).
// With N < 2 or N > LF_MAX_N the order is the batch's (correct for any call; the policy sends only 2..LF_MAX_N).
constexpr int LF_MAX_N = 128;
// Split: longest first, and the sequences whose chain would outlast the call's work run on two CTAs of 64 value rows
// each. Why: a bv128 CTA runs two 16-row walkers per SM sub-partition (~1.14 us per 16-token chunk on the H200), a
// bv64 CTA one (~0.68): the narrow tile shortens the longest chain and the wide one does the rest of the work with
// half the producers. Group g of the grid ((N + kmax)·HV CTAs, kmax = min(N, 16): SPLIT_MAX_SEQS in registry.rs):
// g < 2k runs half g & 1 of the sequence of rank g / 2, then the sequence of rank g − k; groups past the last sequence
// exit. A half CTA keeps the bv128 launch (its registers and shared memory) and runs walkers 0..3 on rows
// 64·half + 16w; walkers 4..7 exit and EMPTY counts only the walkers that run.
// The threshold: tau = max(SPLIT_MIN_TOKENS, (T + SPLIT_SEQ_TOKENS·N)·HV / SMs) tokens (plan/prefill/cost.rs split_threshold
// mirrors it). SPLIT_SEQ_TOKENS counts each sequence's fixed cost (its CTAs' state in and out, its partial last chunk)
// as that many tokens of work, so that fewer medium sequences are split (their half chains only cost SM time).
constexpr i64 SPLIT_MIN_TOKENS = 128;
constexpr i64 SPLIT_SEQ_TOKENS = 64;
template <bool SPLIT>
__device__ __forceinline__ void lf_rank(const PrefillParams& p, i64 r, int lane, u32* keys, i64* out, i64 kmax) {
    const i64 n = p.num_seqs;
    i64 seq = r, bos = 0, eos = 0, half = -1;
    if (n < 2 || n > LF_MAX_N) {
        if (SPLIT && r >= n) {
            seq = -1;  // a spare group (no sequence is split in batch order)
        } else {
            bos = cu_at(p, r);
            eos = cu_at(p, r + 1);
        }
    } else {
        i64 b[4], e[4];
        u32 key[4];
        int rank[4];
#pragma unroll
        for (int q = 0; q < 4; ++q) {
            const int i = lane + 32 * q;
            const bool ok = i < n;
            b[q] = ok ? cu_at(p, i) : 0;
            e[q] = ok ? cu_at(p, i + 1) : 0;
        }
        const int nn = (int)n;
        int split = 0;  // (SPLIT) how many of the longest sequences run on two CTAs
        if constexpr (SPLIT) {
            // a sequence is split when its chain alone would outlast the call's even share of work: longer than
            // (T + SPLIT_SEQ_TOKENS·N)·HV / SMs tokens (at least SPLIT_MIN_TOKENS); at most kmax (the spare groups)
            u32 nsm;
            asm("mov.u32 %0, %%nsmid;" : "=r"(nsm));
            // T = cu_seqlens[n] = the largest end the lanes loaded (cu_seqlens is non-decreasing: no load of its own).
            // A warp max (common/device_plan.cuh): a select of e[(n - 1) / 32] by a runtime index would put e[] in
            // local memory (32 bytes of stack).
            const i64 t_all = warp_bound<true>(max(max(e[0], e[1]), max(e[2], e[3])));
            const i64 share = (t_all + SPLIT_SEQ_TOKENS * n) * (i64)p.num_v_heads / (i64)max(nsm, 1u);
            const i64 tau = max(SPLIT_MIN_TOKENS, share);
#pragma unroll
            for (int q = 0; q < 4; ++q) split += __popc(__ballot_sync(0xffffffffu, lane + 32 * q < nn && e[q] - b[q] > tau));
            split = (int)min((i64)split, kmax);
            if (r < 2 * split) {
                half = r & 1;
                r >>= 1;
            } else {
                r -= split;
            }
        }
#pragma unroll
        for (int q = 0; q < 4; ++q) {
            // (a slot past the last sequence gets key 0, which is greater than no key: it never counts)
            const i64 len = e[q] > b[q] ? e[q] - b[q] : 0;
            const u32 k = ((u32)min(len, (i64)((1 << 25) - 1)) << 7) | (u32)(127 - (lane + 32 * q));
            key[q] = lane + 32 * q < nn ? k : 0u;
            rank[q] = 0;
        }
        // Counting from shared memory: the keys go to `keys`, and every lane compares its four against all of them,
        // four keys per 16-byte broadcast load (taking each key from a shuffle would be N dependent-latency steps:
        // ~2.5 us per wave of CTAs at N = 64).
#ifdef GDN_DEVICE_PLAN
        // The device plan's build: when every length is equal the keys differ only by the index, so the rank is the
        // index and the counting is skipped (the host plan sends equal lengths to the plain kernels)
        bool equal;
        {
            i64 lo = (i64)0x7fffffffffffffffLL, hi = 0;
#pragma unroll
            for (int q = 0; q < 4; ++q) {
                if (lane + 32 * q < nn) {
                    lo = min(lo, e[q] - b[q]);
                    hi = max(hi, e[q] - b[q]);
                }
            }
            equal = warp_bound<false>(lo) == warp_bound<true>(hi);
        }
        if (equal) {
#pragma unroll
            for (int q = 0; q < 4; ++q) rank[q] = lane + 32 * q;
        } else
#endif
        {
#pragma unroll
            for (int q = 0; q < 4; ++q) keys[lane + 32 * q] = key[q];
            __syncwarp();
            const uint4* k4 = reinterpret_cast<const uint4*>(keys);
#pragma unroll 4
            for (int j = 0; j < (nn + 3) >> 2; ++j) {
                const uint4 kk = k4[j];
#pragma unroll
                for (int q = 0; q < 4; ++q)
                    rank[q] += (int)(kk.x > key[q]) + (int)(kk.y > key[q]) + (int)(kk.z > key[q]) + (int)(kk.w > key[q]);
            }
        }
        // the lane and slot q holding rank r (exactly one: the ranks of the n sequences are a permutation of 0..n-1)
        int src = 0, qh = 0;
#pragma unroll
        for (int q = 3; q >= 0; --q) {
            const u32 hit = __ballot_sync(0xffffffffu, lane + 32 * q < nn && rank[q] == (int)r);
            if (hit) {
                src = __ffs((int)hit) - 1;
                qh = q;
            }
        }
        i64 sb = b[0], se = e[0];
#pragma unroll
        for (int q = 1; q < 4; ++q) {
            if (q == qh) {
                sb = b[q];
                se = e[q];
            }
        }
        seq = 32 * qh + src;
        bos = __shfl_sync(0xffffffffu, sb, src);
        eos = __shfl_sync(0xffffffffu, se, src);
        if (SPLIT && r >= n) seq = -1;  // a spare group: fewer sequences were split than the grid has room for
    }
    if (lane == 0) {
        out[0] = seq;
        out[1] = bos;
        out[2] = eos;
        if (SPLIT) out[3] = half;
    }
}

}  // namespace gdn_prefill
