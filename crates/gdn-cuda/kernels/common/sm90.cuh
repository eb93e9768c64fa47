// common/sm90.cuh — PTX helpers shared by the prefill kernels (prefill_fused/, prefill_chunk64/; Hopper, sm_90a):
// shared-memory addresses, programmatic dependent launch, the ftz MUFU approximations, named barriers, ldmatrix,
// mma.sync m16n8k16 (bf16 in, fp32 accumulate), cp.async, mbarriers and bulk (TMA, non-tensor) copies, bf16 packing
// and hi + lo splitting, the fp32 / bf16 state load/store pair, and warpgroup MMA (wgmma: descriptors, fences, the
// m64n128 / m64n64 shapes) with mma.sync m16n8k8 in tf32. One definition of each, so the prefill kernels cannot drift
// apart. Needs common/gates.cuh first (u32, u64, i64, the bf16 types).
#pragma once

__device__ __forceinline__ u32 smem_addr(const void* p) { return (u32)__cvta_generic_to_shared(p); }

// Programmatic dependent launch (PDL). A multi-launch prefill call (chunk64, cp, the device plan) launches
// every kernel after its first with CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION (src/exec/launch.rs), so a launch's
// CTAs may be dispatched while its predecessor in the stream still runs: they read cu_seqlens and the call's other
// inputs (nothing of the call writes them), set up shared memory, decide whether the call is theirs, and then
//   pdl_wait(): griddepcontrol.wait, until the predecessor grid has completed and its writes are visible. Every CTA
//               runs it before it reads what an earlier launch wrote or writes anything (a launch that runs only when
//               every earlier launch of the call exits needs none: the call's first launch, stream-ordered, already
//               followed the caller's work);
//   pdl_exit(): a CTA that leaves without touching such memory (a device-plan launch that is not the call's): only
//               block 0 waits, so that the launch still completes after its predecessor, and so (by induction) after
//               every earlier launch of the call: the next launch's pdl_wait, and whatever the caller enqueues next,
//               may rely on all of them;
//   pdl_launch_dependents(): griddepcontrol.launch_dependents, near the top of a kernel: the successor may be
//               dispatched once every CTA of this grid has run it (or exited); it orders nothing. Where each kernel
//               runs it was measured per device-plan route (prefill_chunk64.cu's header).
// Without the attribute (a first launch, GDN_PDL=0) the launch is stream-ordered and the three are no-ops.
// Why: a launch boundary costs ~1.2-1.6 us of the call's span and a device-plan launch that exits ~1.5-2.5 us of kernel
// time; under PDL both overlap the predecessor's run.
// Before sm_90 there is no PDL: the host never sets the attribute for a target below sm_90 (exec/kernel_set.rs), every
// launch is stream-ordered, and the two are empty.
#if __CUDA_ARCH__ >= 900
__device__ __forceinline__ void pdl_launch_dependents() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }
__device__ __forceinline__ void pdl_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
#else
__device__ __forceinline__ void pdl_launch_dependents() {}
__device__ __forceinline__ void pdl_wait() {}
#endif
__device__ __forceinline__ void pdl_exit() {
    if ((blockIdx.x | blockIdx.y | blockIdx.z) == 0) pdl_wait();
}

// MUFU approximations with flush-to-zero: results under 2^-126 are 0 (decays may underflow to 0 by design); no
// subnormal fix-up sequence around each instruction (the non-ftz ex2 costs a compare and two predicated multiplies).
__device__ __forceinline__ float ex2_ftz(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}
__device__ __forceinline__ float lg2_ftz(float x) {
    float y;
    asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}
__device__ __forceinline__ float rcp_ftz(float x) {
    float y;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}
__device__ __forceinline__ float exp_ftz(float x) { return ex2_ftz(x * 1.4426950408889634f); }

// Named barrier `id` (1..15; 0 is __syncthreads) over `count` threads (a multiple of 32): arrive without waiting, or
// arrive and wait. Whole warps call them.
__device__ __forceinline__ void named_bar_arrive(int id, int count) {
    asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(count) : "memory");
}
__device__ __forceinline__ void named_bar_sync(int id, int count) {
    asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(count) : "memory");
}

// ldmatrix x4 (and transposed), into four registers or an array of four.
__device__ __forceinline__ void ldsm_x4(u32 addr, u32& r0, u32& r1, u32& r2, u32& r3) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(addr) : "memory");
}
__device__ __forceinline__ void ldsm_x4_t(u32 addr, u32& r0, u32& r1, u32& r2, u32& r3) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(addr) : "memory");
}
__device__ __forceinline__ void ldsm_x4(u32 addr, u32* r) { ldsm_x4(addr, r[0], r[1], r[2], r[3]); }
__device__ __forceinline__ void ldsm_x4_t(u32 addr, u32* r) { ldsm_x4_t(addr, r[0], r[1], r[2], r[3]); }
// D = A·B + D, m16n8k16, bf16 inputs, f32 accumulators; A as four registers or an array of four.
__device__ __forceinline__ void mma(float* c, u32 a0, u32 a1, u32 a2, u32 a3, u32 b0, u32 b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
__device__ __forceinline__ void mma(float* c, const u32* a, u32 b0, u32 b1) { mma(c, a[0], a[1], a[2], a[3], b0, b1); }

__device__ __forceinline__ void cp_async16(u32 dst, const void* src, bool valid) {
    int n = valid ? 16 : 0;  // src-size 0: the 16 bytes are zero-filled, nothing is read
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(n) : "memory");
}
__device__ __forceinline__ void cp_async4(u32 dst, const void* src, bool valid) {
    int n = valid ? 4 : 0;
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(n) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// mbarrier (shared::cta, 64-bit): init, arrive (release, CTA scope), arrive with an expected transaction byte count,
// wait on a phase parity (acquire).
__device__ __forceinline__ void mbar_init(u32 addr, u32 count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(addr), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_init_fence() {
    asm volatile("fence.mbarrier_init.release.cluster;\nfence.proxy.async.shared::cta;\n" ::: "memory");
}
__device__ __forceinline__ void mbar_arrive(u32 addr) {
    asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.shared::cta.b64 st, [%0];\n}\n" ::"r"(addr) : "memory");
}
__device__ __forceinline__ void mbar_arrive_expect_tx(u32 addr, u32 bytes) {
    asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %1;\n}\n" ::"r"(addr), "r"(bytes)
                 : "memory");
}
// sm_90 and later: try_wait, which suspends the thread in hardware for a while before it reports; sm_80/86/89:
// test_wait, a plain poll (the mbarrier itself, init and arrive are Ampere's).
__device__ __forceinline__ void mbar_wait(u32 addr, u32 parity) {
    u32 done;
    do {
#if __CUDA_ARCH__ >= 900
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done) : "r"(addr), "r"(parity) : "memory");
#else
        asm volatile("{\n.reg .pred p;\nmbarrier.test_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done) : "r"(addr), "r"(parity) : "memory");
#endif
    } while (!done);
}
// Copy `bytes` (multiple of 16, both addresses 16-byte aligned) from global to this CTA's shared memory; completion
// is counted on the mbarrier at `bar` in bytes. Few large copies: the TMA unit takes small ones one after another.
__device__ __forceinline__ void bulk_g2s(u32 dst, const void* src, u32 bytes, u32 bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
                 ::"r"(dst), "l"(src), "r"(bytes), "r"(bar) : "memory");
}

__device__ __forceinline__ u32 pack_bf16(float lo, float hi) {
    __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);  // .x (low 16 bits) = lo
    return *reinterpret_cast<u32*>(&h);
}
// hi = bf16(x), lo = bf16(x - hi), packed pairwise; round to nearest even, bitwise as __floats2bfloat162_rn. One cvt
// per pair and the hi halves back to f32 by a shift and a mask (the bfloat162 -> float2 route compiles to two PRMT more
// on every split, and the walkers split on their dependent chain).
__device__ __forceinline__ u32 cvt_bf16x2(float lo, float hi) {
    u32 r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));  // hi to the upper 16 bits
    return r;
}
__device__ __forceinline__ void split_bf16(float x0, float x1, u32& hi, u32& lo) {
    hi = cvt_bf16x2(x0, x1);
    lo = cvt_bf16x2(x0 - __uint_as_float(hi << 16), x1 - __uint_as_float(hi & 0xffff0000u));
}

// State storage: fp32, or bf16 with fp32 math. Two adjacent elements per call.
template <bool BF16> struct StateIO;
template <> struct StateIO<false> {
    static __device__ __forceinline__ float2 load(const void* base, i64 off) {
        return *reinterpret_cast<const float2*>(reinterpret_cast<const float*>(base) + off);
    }
    static __device__ __forceinline__ void store(void* base, i64 off, float x0, float x1) {
        *reinterpret_cast<float2*>(reinterpret_cast<float*>(base) + off) = make_float2(x0, x1);
    }
};
template <> struct StateIO<true> {
    static __device__ __forceinline__ float2 load(const void* base, i64 off) {
        return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(reinterpret_cast<const __nv_bfloat16*>(base) + off));
    }
    static __device__ __forceinline__ void store(void* base, i64 off, float x0, float x1) {
        *reinterpret_cast<__nv_bfloat162*>(reinterpret_cast<__nv_bfloat16*>(base) + off) = __floats2bfloat162_rn(x0, x1);
    }
};

// ---- warpgroup MMA (wgmma, sm_90a) and mma.sync in tf32 (the chunk64 kernels)
// wgmma shared-memory matrix descriptor, 128-byte swizzle: start address, leading / stride byte offsets (>> 4).
__device__ __forceinline__ u64 wg_desc(u32 addr, u32 lbo, u32 sbo) {
    return (u64)((addr & 0x3FFFFu) >> 4) | ((u64)((lbo & 0x3FFFFu) >> 4) << 16) | ((u64)((sbo & 0x3FFFFu) >> 4) << 32) |
           ((u64)1 << 62);
}
__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_wait0() { asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }
// Keep the compiler from moving reads/writes of accumulator registers across the asynchronous wgmma window.
template <int N>
__device__ __forceinline__ void wg_pin(float* r) {
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}
// Store four 8x8 bf16 matrices transposed (fragment (row g, cols 2t, 2t+1) of matrix i lands in rows 2t, 2t+1,
// column g of the stored matrix whose row addresses lanes 8i..8i+7 give).
__device__ __forceinline__ void stsm_x4_t(u32 addr, u32 r0, u32 r1, u32 r2, u32 r3) {
    asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1,%2,%3,%4};\n" ::"r"(addr), "r"(r0), "r"(r1),
                 "r"(r2), "r"(r3) : "memory");
}
// Named barrier `id` (1..15) over the 128 threads of one warpgroup.
__device__ __forceinline__ void wg_bar(int id) { asm volatile("bar.sync %0, 128;\n" ::"r"(id) : "memory"); }
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// D[64 x 128] (+)= A[64 x 16] (registers, bf16) . B[16 x 128] (shared memory descriptor, bf16); fp32 D.
template <int TNSP_B>
__device__ __forceinline__ void wgmma_m64n128(float* d, const u32* a, u64 desc, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
        "{"
        "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
        "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,"
        "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,"
        "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63"
        "}, {%64,%65,%66,%67}, %68, p, 1, 1, %70;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
          "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(accumulate), "n"(TNSP_B));
}

// D[64 x 64] (+)= A[64 x 16] (registers) . B[16 x 64] (shared memory descriptor); fp32 D. Operand type TY: bf16
// (wgmma_m64n64: the state's products) or f16 (wgmma_m64n64_f16: the products with the record's scaled tiles).
#define GDN_WGMMA_M64N64_RS(NAME, TY)                                                                                  \
    template <int TNSP_B>                                                                                              \
    __device__ __forceinline__ void NAME(float* d, const u32* a, u64 desc, int accumulate) {                           \
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"                                                    \
                     "wgmma.mma_async.sync.aligned.m64n64k16.f32." TY "." TY " "                                      \
                     "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"                                         \
                     "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31"                                 \
                     "}, {%32,%33,%34,%35}, %36, p, 1, 1, %38;\n}\n"                                                  \
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),            \
                       "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),        \
                       "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),     \
                       "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),     \
                       "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])                                              \
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(accumulate), "n"(TNSP_B));           \
    }
GDN_WGMMA_M64N64_RS(wgmma_m64n64, "bf16")
GDN_WGMMA_M64N64_RS(wgmma_m64n64_f16, "f16")
#undef GDN_WGMMA_M64N64_RS

// D[64 x 64] (+)= A[64 x 16] . B[16 x 64], both from shared memory descriptors (K-major), bf16; fp32 D.
__device__ __forceinline__ void wgmma_m64n64_ss(float* d, u64 da, u64 db, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
        "{"
        "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
        "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31"
        "}, %32, %33, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "l"(da), "l"(db), "r"(accumulate));
}

// D = A·B + D, m16n8k8, tf32 inputs (as u32), f32 accumulators. Fragments (g = lane/4, t = lane%4): A a0 (g, t),
// a1 (g+8, t), a2 (g, t+4), a3 (g+8, t+4); B b0 (k t, n g), b1 (k t+4, n g); C as m16n8k16.
__device__ __forceinline__ void mma_tf32(float* c, const u32* a, u32 b0, u32 b1) {
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
