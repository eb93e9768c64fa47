"""Tensor-pipe rate probe on sm_90a: warpgroup MMA (wgmma) bf16 throughput by shape, A source, and warpgroups per SM.

Run on the GPU machine:  PYTHONUNBUFFERED=1 python3 tools/wgmma_probe.py
Each warpgroup issues ITERS batches of 16 wgmma.m64nNk16 (one accumulator, one commit group, then a wait), A from
registers (RS) or shared memory (SS), B from shared memory (contents irrelevant). Grid = 132 x CTAS CTAs of WGS
warpgroups. Reports MAC per clock per SM (clock from the SM clock counter inside the kernel) and per ns, so the walk
kernels' batches (m64n64 / m64n128, A from registers, 4-16 per batch) can be compared with the dense peak
(2048 MAC/clk/SM on H100/H200). Writes $OUT/wgmma_probe.json.
"""
import ctypes
import json
import os

import torch

import harness_common as hc


def wgmma_fn(n, rs):
    nd = n // 2
    dl = ",".join(f"%{i}" for i in range(nd))
    outs = ", ".join(f'"+f"(d[{i}])' for i in range(nd))
    if rs:
        a = f"{{%{nd},%{nd+1},%{nd+2},%{nd+3}}}"
        ins = '"r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db)'
        tail = f"%{nd+4}, 1, 1, 1, 0;"
        sig = "float* d, const unsigned* a, unsigned long long da, unsigned long long db"
    else:
        a = f"%{nd}"
        ins = '"l"(da), "l"(db)'
        tail = f"%{nd+1}, 1, 1, 1, 0, 0;"
        sig = "float* d, const unsigned* a, unsigned long long da, unsigned long long db"
    return (f"__device__ __forceinline__ void mma_n{n}_{'rs' if rs else 'ss'}({sig}) {{\n"
            f'  asm volatile("wgmma.mma_async.sync.aligned.m64n{n}k16.f32.bf16.bf16 {{{dl}}}, {a}, {tail}\\n"\n'
            f"   : {outs} : {ins});\n}}\n")


SRC_HEAD = r"""
typedef unsigned long long u64;
__device__ __forceinline__ unsigned smem_addr(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }
__device__ __forceinline__ u64 desc(unsigned addr) {
    return (u64)((addr & 0x3FFFFu) >> 4) | ((u64)(16 >> 4) << 16) | ((u64)(1024 >> 4) << 32) | ((u64)1 << 62);
}
"""


def kernel_src(n, rs, batch):
    body = wgmma_fn(n, rs)
    nd = n // 2
    return SRC_HEAD + body + f"""
extern "C" __global__ void probe(int iters, float* sink, long long* clocks) {{
    extern __shared__ __align__(1024) unsigned char smem[];
    for (int i = threadIdx.x; i < 65536 / 4; i += blockDim.x) reinterpret_cast<unsigned*>(smem)[i] = 0x3c003c00u;
    __syncthreads();
    float d[{nd}];
    for (int i = 0; i < {nd}; ++i) d[i] = 0.f;
    unsigned a[4] = {{0x3f803f80u, 0x3f803f80u, 0x3f803f80u, 0x3f803f80u}};
    const unsigned base = smem_addr(smem);
    const u64 db = desc(base), da = desc(base + 32768);
    long long t0 = clock64();
    for (int it = 0; it < iters; ++it) {{
        asm volatile("wgmma.fence.sync.aligned;\\n" ::: "memory");
#pragma unroll
        for (int s = 0; s < {batch}; ++s) mma_n{n}_{'rs' if rs else 'ss'}(d, a, da + (u64)((s & 3) * 2), db + (u64)((s & 3) * 2));
        asm volatile("wgmma.commit_group.sync.aligned;\\n" ::: "memory");
        asm volatile("wgmma.wait_group.sync.aligned 0;\\n" ::: "memory");
    }}
    long long t1 = clock64();
    float x = 0.f;
    for (int i = 0; i < {nd}; ++i) x += d[i];
    sink[blockIdx.x * blockDim.x + threadIdx.x] = x;
    if (threadIdx.x == 0) clocks[blockIdx.x] = t1 - t0;
}}
"""


def build(src):
    return hc.function(hc.load_module(hc.compile_cubin(src, "probe.cu")), "probe", 65536)[0]


def run(f, wgs, ctas, iters):
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    grid = sms * ctas
    sink = torch.empty(grid * 128 * wgs, device="cuda")
    clocks = torch.zeros(grid, dtype=torch.int64, device="cuda")
    args = [ctypes.c_int(iters), ctypes.c_void_p(sink.data_ptr()), ctypes.c_void_p(clocks.data_ptr())]
    launch = lambda: hc.launch(f, grid, 128 * wgs, 65536, args)  # noqa: E731
    launch()
    torch.cuda.synchronize()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    launch()
    e1.record()
    torch.cuda.synchronize()
    ms = e0.elapsed_time(e1)
    return sms, grid, ms, clocks.float().median().item()


def main():
    rows = []
    for n in (64, 128, 256):
        for rs in (True, False):
            for batch in (4, 16):
                f = build(kernel_src(n, rs, batch))
                for wgs, ctas in ((1, 1), (2, 1), (1, 2), (4, 1)):
                    iters = 4000 // batch
                    try:
                        sms, grid, ms, clk = run(f, wgs, ctas, iters)
                    except RuntimeError as e:  # e.g. 4 warpgroups x the n256 accumulator: too many registers
                        print(f"m64n{n}k16 {'rs' if rs else 'ss'} batch {batch:2d}  {wgs} WG/CTA x {ctas} CTA/SM: {e}")
                        continue
                    macs = 64 * n * 16 * batch * iters  # per warpgroup
                    total = macs * wgs * grid
                    row = {"n": n, "a": "rs" if rs else "ss", "batch": batch, "wg_per_cta": wgs, "ctas_per_sm": ctas,
                           "ms": ms, "mac_per_clk_per_sm_in_kernel": macs * wgs * ctas / clk,
                           "tflops": 2 * total / ms / 1e9, "clk_per_wgmma_per_wg": clk / (batch * iters)}
                    rows.append(row)
                    print(f"m64n{n}k16 {row['a']} batch {batch:2d}  {wgs} WG/CTA x {ctas} CTA/SM: "
                          f"{row['mac_per_clk_per_sm_in_kernel']:7.0f} MAC/clk/SM  {row['tflops']:6.0f} TFLOP/s  "
                          f"{row['clk_per_wgmma_per_wg']:6.1f} clk per wgmma per WG", flush=True)
    with open(os.path.join(hc.OUT, "wgmma_probe.json"), "w") as fh:
        json.dump({"device": torch.cuda.get_device_name(), "rows": rows}, fh, indent=1)


if __name__ == "__main__":
    main()
