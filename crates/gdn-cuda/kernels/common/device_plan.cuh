// common/device_plan.cuh — the longest sequence of a prefill call, read from cu_seqlens on the device, for the device plan.
//
// Why: a caller that gives no length hint (flashinfer-bench, a serving engine that does not copy cu_seqlens back)
// leaves the host unable to tell N equal sequences from one long sequence among short ones, and the best plan differs
// by up to 2.7x between the two (on the contest-like mix, fused bv128 against the cp plan). The
// device plan (`PrefillPlan::Device`, plan/prefill/types.rs) launches the candidate plans one after another on the stream — the
// fused kernel, then the chunk64 prep, the chunk64 walk and the cp passes, each from its module's device-plan build
// (GDN_DEVICE_PLAN: PrefillPlanParams, Prefill64PlanParams) — and every CTA of every launch reads the longest length
// here, compares it with the thresholds the host derived from its cost model, and exits at once unless the call is
// its launch's. Nothing is read on the host and nothing synchronises; a launch that is not the call's costs the
// dispatch of CTAs that exit after one load round (~0.8 us per wave of them on the H200).
//
// Needs common/serving.cuh first (cu_at). Included by prefill_fused.cu and prefill_chunk64.cu.
#pragma once

// Most sequences a device-planned call may have (the registry's DEVICE_PLAN_MAX_N): each lane reads at most 8 lengths,
// all in one round of independent loads.
constexpr int DEVICE_PLAN_MAX_N = 256;

// The warp's max (MAX) or min of a non-negative 64-bit value: redux.sync on its two halves. Whole warps call it; the
// result is warp-uniform, so ptxas keeps what derives from it on the uniform datapath.
template <bool MAX>
__device__ __forceinline__ i64 warp_bound(i64 m) {
    u32 hi, lo;
    if (MAX) {
        hi = __reduce_max_sync(0xffffffffu, (u32)((u64)m >> 32));
        lo = __reduce_max_sync(0xffffffffu, (u32)((u64)m >> 32) == hi ? (u32)m : 0u);
    } else {
        hi = __reduce_min_sync(0xffffffffu, (u32)((u64)m >> 32));
        lo = __reduce_min_sync(0xffffffffu, (u32)((u64)m >> 32) == hi ? (u32)m : 0xffffffffu);
    }
    return (i64)(((u64)hi << 32) | lo);
}

// The device plan's longest sequence of prefill call p: max over i < num_seqs of cu[i + 1] − cu[i] (num_seqs <=
// DEVICE_PLAN_MAX_N; 0 when there are none), cu read through cu_at (common/serving.cuh: int64, or int32 in the serving
// build). Whole warps call it; the result is warp-uniform and comes from redux.sync, so ptxas keeps what derives from
// it on the uniform datapath. (The fused longest-first kernels need no shortest length: their ranking notices equal
// lengths itself, prefill_fused/schedule.cuh.)
template <class P> __device__ __forceinline__ i64 call_longest_seq(const P& p) {
    const int lane = threadIdx.x & 31;
    i64 m = 0;
#pragma unroll
    for (int r = 0; r < DEVICE_PLAN_MAX_N / 32; ++r) {
        const i64 i = (i64)r * 32 + lane;
        if (i < p.num_seqs) m = max(m, cu_at(p, i + 1) - cu_at(p, i));
    }
    return warp_bound<true>(m);
}
