// mma.sync m16n8k16 bf16 -> f32 throughput probe (experiment, not part of gdn).
#include <cstdio>
#include <cuda_runtime.h>
template <int CH>
__global__ void k(float* out, int iters) {
    unsigned a0 = threadIdx.x, a1 = a0 * 3, a2 = a0 * 5, a3 = a0 * 7, b0 = a0 ^ 9, b1 = a0 ^ 13;
    float acc[CH][4];
#pragma unroll
    for (int c = 0; c < CH; ++c) acc[c][0] = acc[c][1] = acc[c][2] = acc[c][3] = 0.f;
    for (int i = 0; i < iters; ++i) {
#pragma unroll
        for (int c = 0; c < CH; ++c)
            asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                         : "+f"(acc[c][0]), "+f"(acc[c][1]), "+f"(acc[c][2]), "+f"(acc[c][3])
                         : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
    }
    float s = 0;
#pragma unroll
    for (int c = 0; c < CH; ++c) s += acc[c][0] + acc[c][1] + acc[c][2] + acc[c][3];
    if (s == 123.f) out[0] = s;
}
template <int CH> void run(int warps, int blocks_per_sm) {
    float* o; cudaMalloc(&o, 4);
    int iters = 4096, grid = 132 * blocks_per_sm;
    cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
    k<CH><<<grid, 32 * warps>>>(o, iters);
    cudaEventRecord(e0);
    k<CH><<<grid, 32 * warps>>>(o, iters);
    cudaEventRecord(e1); cudaEventSynchronize(e1);
    float ms; cudaEventElapsedTime(&ms, e0, e1);
    double mma = (double)grid * warps * iters * CH;
    double cyc = ms * 1e-3 * 1.98e9;  // at max clock
    printf("CH %2d warps/SM %3d: %.1f TFLOP/s, %.2f cycles per mma per sub-partition (at 1.98 GHz)\n", CH,
           warps * blocks_per_sm, mma * 4096 / (ms * 1e-3) / 1e12, cyc / (mma / (132.0 * 4)));
    cudaFree(o);
}
int main() {
    run<1>(4, 1); run<2>(4, 1); run<4>(4, 1); run<8>(4, 1);
    run<1>(8, 1); run<2>(8, 1); run<4>(8, 1); run<8>(8, 1);
    run<2>(16, 1); run<4>(16, 1); run<8>(16, 1); run<4>(32, 1);
    return 0;
}
