// sm90.cuh — PTX helpers shared by prefill.cu and prefill64.cu (Hopper, sm_90a): shared-memory addresses,
// ldmatrix, mma.sync m16n8k16 (bf16 in, fp32 accumulate), cp.async, mbarriers and bulk (TMA, non-tensor) copies,
// bf16 packing and hi + lo splitting, the fp32 / bf16 state load/store pair, and the ftz MUFU approximations.
// One definition of each, so the two prefill kernels cannot drift apart. Needs gates.cuh first (u32, i64, the
// bf16 types).
#pragma once

__device__ __forceinline__ u32 smem_addr(const void* p) { return (u32)__cvta_generic_to_shared(p); }

// Programmatic dependent launch (PDL; session 30). A multi-launch prefill call (chunk64, cp, the device plan) launches
// every kernel after its first with CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION (launch.rs), so a launch's
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
//               runs it was measured per device-plan route (prefill64.cu v16).
// Without the attribute (a first launch, GDN_PDL=0) the launch is stream-ordered and the three are no-ops.
// Why: a launch boundary costs ~1.2-1.6 us of the call's span and a device-plan launch that exits ~1.5-2.5 us of kernel
// time (results/prefill_s29.md); under PDL both overlap the predecessor's run.
__device__ __forceinline__ void pdl_launch_dependents() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }
__device__ __forceinline__ void pdl_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
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
__device__ __forceinline__ void mbar_wait(u32 addr, u32 parity) {
    u32 done;
    do {
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done) : "r"(addr), "r"(parity) : "memory");
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
// hi = bf16(x), lo = bf16(x - hi), packed pairwise; round to nearest even, bitwise as __floats2bfloat162_rn. v11: one
// cvt per pair and the hi halves back to f32 by a shift and a mask (the bfloat162 -> float2 route compiled to two
// PRMT more on every split, and the walkers split on their dependent chain). GDN_SPLIT_PTX=0: the intrinsics.
#ifndef GDN_SPLIT_PTX
#define GDN_SPLIT_PTX 1
#endif
__device__ __forceinline__ u32 cvt_bf16x2(float lo, float hi) {
    u32 r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));  // hi to the upper 16 bits
    return r;
}
__device__ __forceinline__ void split_bf16(float x0, float x1, u32& hi, u32& lo) {
#if GDN_SPLIT_PTX
    hi = cvt_bf16x2(x0, x1);
    lo = cvt_bf16x2(x0 - __uint_as_float(hi << 16), x1 - __uint_as_float(hi & 0xffff0000u));
#else
    __nv_bfloat162 h = __floats2bfloat162_rn(x0, x1);
    float2 hf = __bfloat1622float2(h);
    hi = *reinterpret_cast<u32*>(&h);
    lo = pack_bf16(x0 - hf.x, x1 - hf.y);
#endif
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
