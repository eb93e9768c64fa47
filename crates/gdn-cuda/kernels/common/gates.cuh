// common/gates.cuh — the GDN gates and the small scalar types every gdn kernel shares.
//
// Compiled by NVRTC at run time (by gdn, and by the tools under tools/), so it includes nothing but
// <cuda_bf16.h>: NVRTC sees no system headers. All kernels index memory with 64-bit integers (`i64`).
//
// Gate math, exactly as the flashinfer-bench definitions (fp32):
//   x    = a + dt_bias
//   g    = exp(-exp(A_log) * softplus(x))      softplus(x) = x for x > 20 (torch's threshold), else log1p(exp(x))
//   beta = sigmoid(b)
// `gdn_log_decay` returns log(g) (always <= 0, possibly -inf-free large negative): kernels that form ratios of
// decays must subtract logs and exponentiate once (exp(γi − γj) with i ≥ j is ≤ 1), never multiply an
// underflowed exp(γ) by an overflowed exp(−γ) (the `0·inf` NaN of FlashInfer #3720).
#pragma once
#include <cuda_bf16.h>

typedef long long i64;
typedef unsigned long long u64;
typedef int i32;
typedef unsigned int u32;

__device__ __forceinline__ float gdn_softplus(float x) {
    return x > 20.0f ? x : log1pf(__expf(x));
}

// log(g) for one (token, value head): -exp(A_log) * softplus(a + dt_bias). Finite and <= 0 for finite inputs.
__device__ __forceinline__ float gdn_log_decay(float a, float dt_bias, float a_log) {
    return -__expf(a_log) * gdn_softplus(a + dt_bias);
}

__device__ __forceinline__ float gdn_beta(float b) {
    return 1.0f / (1.0f + __expf(-b));
}
