"""Launch and memory-latency floor of a fused-prefill-shaped launch (a probe; writes nothing).

Run on the GPU machine from the repository root:
    PYTHONUNBUFFERED=1 python3 tools/launch_probe.py
What it answers: how much of a short prefill call's CUPTI kernel time (about 4 us for 1x16 on the H200) is the launch of
64 CTAs x 256 threads with ~225 KB of dynamic shared memory, and how much one or two dependent cold DRAM round trips
cost, under the same method as prefill_harness.py `time` (CUPTI kernel time, 256 MB memset L2 flush before every
call, median of 25). Kernels (64 CTAs x 256 threads unless noted), each at dynamic shared memory 0 / 48 KB / 100 KB /
225,608 B (bv16's):
  empty   returns at once
  load1   thread 0 of each CTA reads one int64 (cold) and writes it back: one DRAM round trip
  load2   as load1, then reads the address the first value names: two dependent round trips (cu_seqlens -> data)
  state   every thread of each CTA reads and writes 32 B (8 KB per CTA: a bv16 CTA's state slice)
The names start with gdn_prefill so that harness_common.kernel_times picks them up.
"""
import ctypes
import statistics

import torch

import harness_common as hc

SRC = r"""
typedef long long i64;
extern "C" __global__ void gdn_prefill_probe_empty(const i64* x, i64* y) {}
extern "C" __global__ void gdn_prefill_probe_load1(const i64* x, i64* y) {
    if (threadIdx.x == 0) y[blockIdx.x] = x[blockIdx.x * 64];
}
extern "C" __global__ void gdn_prefill_probe_load2(const i64* x, i64* y) {
    if (threadIdx.x == 0) {
        const i64 a = x[blockIdx.x * 64];
        y[blockIdx.x] = x[a + 32768 + blockIdx.x * 64];  // another line and DRAM page
    }
}
extern "C" __global__ void gdn_prefill_probe_state(const i64* x, i64* y) {
    const i64 i = ((i64)blockIdx.x * blockDim.x + threadIdx.x) * 4;
    const i64 a = x[i], b = x[i + 1], c = x[i + 2], d = x[i + 3];
    y[i] = a; y[i + 1] = b; y[i + 2] = c; y[i + 3] = d;
}
"""


def main():
    mod = hc.load_module(hc.compile_cubin(SRC, "probe.cu"))
    x = torch.zeros(64 * 256 * 4 + 4096, dtype=torch.int64, device=hc.dev)
    y = torch.zeros_like(x)
    args = [ctypes.c_void_p(x.data_ptr()), ctypes.c_void_p(y.data_ptr())]
    for name in ("empty", "load1", "load2", "state"):
        for smem in (0, 48 * 1024, 100 * 1024, 225608):
            fn = hc.function(mod, f"gdn_prefill_probe_{name}", smem)[0]
            ts = hc.kernel_times(lambda: hc.launch(fn, 64, 256, smem, args), iters=25)
            med = statistics.median(ts)
            print(f"probe {name:<6} smem {smem:>7} B  median {med:6.2f} us  (p10 {sorted(ts)[len(ts) // 10]:.2f})",
                  flush=True)


if __name__ == "__main__":
    main()
