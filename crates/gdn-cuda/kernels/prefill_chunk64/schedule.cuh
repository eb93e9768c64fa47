// prefill_chunk64/schedule.cuh — how a chunk64 CTA finds its work: the workspace slot map (seq_slot), the warp-wide
// searches over cu_seqlens (warp_last_true, uni64 for uniform results), the walk's longest-first order that the prep
// writes, the device plan's decision per launch, and the block index a body runs (the CTA's own, or a persistent
// launch's item).
#pragma once

namespace gdn_prefill64 {

// First workspace slot of sequence i.
__device__ __forceinline__ i64 seq_slot(const Prefill64Params& p, i64 i) { return cu_at(p, i) / C + i; }

// A warp-uniform 64-bit value through redux.sync, whose result lands in a uniform register: ptxas then knows it is
// uniform. (A value it cannot prove uniform — a ballot's count, a 64-bit division done on the vector path — would take
// everything derived from it off the uniform datapath: in the cp walks, the wgmma descriptors and the bulk-copy
// addresses of the chunk loop, each wgmma then waiting on an R2UR; +10% per chunk.)
__device__ __forceinline__ i64 uni64(i64 v) {
    const u32 hi = __reduce_max_sync(0xffffffffu, (u32)((u64)v >> 32)), lo = __reduce_max_sync(0xffffffffu, (u32)v);
    return (i64)(((u64)hi << 32) | lo);
}

// The largest i in [0, n) with le(i) true, for a predicate that holds on a prefix of [0, n) including 0 (le(i): "key(i)
// <= x" for an increasing key); whole warps call it, and the result is uniform. Each round the warp tests 128 evenly
// spaced points of the remaining range at once (4 independent loads per lane, 4 ballots), so n <= 128 takes one
// dependent load where bisection takes log2 n, each a load from L2 and, in find_segment, a 64-bit division (the
// predicates here divide by nothing). It matters where most CTAs only search and exit: a cp pass on many short
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

// ---- The chunk64 walk runs the sequences longest first. Its grid is N·HV·2 CTAs, one per SM at a time, in blockIdx
// order; in sequence order a long sequence that comes late starts its chain after most of the short ones have run
// (12-25 us over the chain and work bounds on skewed calls of the contest-like mix). The prep writes the order (a
// permutation of the sequences, i64 [N], after the records) when the call is the chunk64 plan (seg_chunks == 0) and
// 2 <= N <= WALK_ORDER_MAX_N: ranking costs O(N) loads per sequence; wider calls keep sequence order.
constexpr i64 WALK_ORDER_MAX_N = 1024;
__device__ __forceinline__ bool chunk64_ordered(const Prefill64Params& p) {
    return p.seg_chunks == 0 && p.num_seqs >= 2 && p.num_seqs <= WALK_ORDER_MAX_N;
}
// Bytes of the prep's records at the start of the workspace (plan/prefill/workspace.rs prefill64_record_bytes); the walk's order
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
    const i64 li = cu_at(p, i + 1) - cu_at(p, i);
    int c = 0;
    for (i64 j = threadIdx.x; j < p.num_seqs; j += 128) {
        const i64 lj = cu_at(p, j + 1) - cu_at(p, j);
        c += lj > li || (lj == li && j < i);
    }
    c = __reduce_add_sync(0xffffffffu, c);
    if ((threadIdx.x & 31) == 0) wcount[threadIdx.x >> 5] = c;
    __syncthreads();
    if (threadIdx.x == 0) walk_order(p)[wcount[0] + wcount[1] + wcount[2] + wcount[3]] = i;
}

// ---- The device plan (Prefill64PlanParams; its longest sequence: common/device_plan.cuh call_longest_seq).
// Each launch's part in it:
enum PlanPart { PART_PREP, PART_WALK, PART_CP };
// Whether this launch runs the call under the device plan, and its segment length: L for the cp plan (plan/prefill/device.rs
// Thresholds::seg_chunks_at), 0 for chunk64. Whole warps call it; every warp of the grid gets the same answer.
__device__ __forceinline__ bool device_plan_runs(const Prefill64PlanParams& pp, PlanPart part, int& seg_chunks) {
    const Prefill64Params& p = pp.p;
    const i64 x = call_longest_seq(p);
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

// The block index a body runs: the CTA's own (GridIdx, read where the body reads it, so that the default build's code
// does not change with the device plan's) or an item of a persistent device-plan launch (ItemIdx, dp_items).
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

}  // namespace gdn_prefill64
