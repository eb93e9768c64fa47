"""Launch and memory-latency floor of a fused-prefill-shaped launch (experiment; writes nothing to the repo).

Run on the GPU machine from the repository root:
    PYTHONUNBUFFERED=1 python3 crates/gdn-cuda/kernels/harness/launch_probe.py
What it answers: how much of a short prefill call's CUPTI kernel time (4.2 us for 1x16 on the H200) is the launch of
64 CTAs x 256 threads with ~225 KB of dynamic shared memory, and how much one or two dependent cold DRAM round trips
cost, under the same method as prefill_harness.py `time` (CUPTI kernel time, 256 MB memset L2 flush before every
call, median of 25). Kernels (64 CTAs x 256 threads unless noted), each at dynamic shared memory 0 / 48 KB / 100 KB /
225,608 B (bv16's):
  empty   returns at once
  load1   thread 0 of each CTA reads one int64 (cold) and writes it back: one DRAM round trip
  load2   as load1, then reads the address the first value names: two dependent round trips (cu_seqlens -> data)
  state   every thread of each CTA reads and writes 32 B (8 KB per CTA: a bv16 CTA's state slice)
The names start with gdn_prefill so that prefill_harness.kernel_times picks them up.
"""
import ctypes
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch  # noqa: E402
import prefill_harness as ph  # noqa: E402
from cuda.bindings import driver as cu  # noqa: E402
from cuda.bindings import nvrtc  # noqa: E402

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


def compile_module():
    opts = [b"-arch=sm_90a", b"-std=c++17"]
    prog = ph._ok(nvrtc.nvrtcCreateProgram(SRC.encode(), b"probe.cu", 0, [], []), "create")
    rc = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)[0]
    if int(rc) != 0:
        raise RuntimeError("NVRTC failed")
    n = ph._ok(nvrtc.nvrtcGetCUBINSize(prog), "size")
    cubin = b" " * n
    nvrtc.nvrtcGetCUBIN(prog, cubin)
    return ph._ok(cu.cuModuleLoadData(cubin), "load")


def main():
    mod = compile_module()
    x = torch.zeros(64 * 256 * 4 + 4096, dtype=torch.int64, device=ph.dev)
    y = torch.zeros_like(x)
    for name in ("empty", "load1", "load2", "state"):
        fn = ph._ok(cu.cuModuleGetFunction(mod, f"gdn_prefill_probe_{name}".encode()), "fn")
        for smem in (0, 48 * 1024, 100 * 1024, 225608):
            ph._ok((cu.cuFuncSetAttribute(
                fn, cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem)[0], None), "attr")
            args = (x.data_ptr(), y.data_ptr())
            a0, a1 = ctypes.c_void_p(args[0]), ctypes.c_void_p(args[1])
            params = (ctypes.c_void_p * 2)(ctypes.addressof(a0), ctypes.addressof(a1))
            stream = torch.cuda.current_stream().cuda_stream

            def launch():
                err, = cu.cuLaunchKernel(fn, 64, 1, 1, 256, 1, 1, smem, cu.CUstream(stream), ctypes.addressof(params), 0)
                if err != cu.CUresult.CUDA_SUCCESS:
                    raise RuntimeError(f"cuLaunchKernel: {err}")

            ts = ph.kernel_times(launch, iters=25)
            med = statistics.median(ts)
            print(f"probe {name:<6} smem {smem:>7} B  median {med:6.2f} us  (p10 {sorted(ts)[len(ts) // 10]:.2f})",
                  flush=True)


if __name__ == "__main__":
    main()
