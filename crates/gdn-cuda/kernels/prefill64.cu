// prefill64.cu — Gated Delta Net chunked varlen prefill for LONG sequences on Hopper (sm_90a): chunks of 64
// tokens, a fully parallel preparation kernel and a split-K state walker. mma.sync (bf16 operands, fp32
// accumulation, fp32 state).
//
// Compiled at run time by NVRTC (options: -arch=sm_90a -std=c++17 -I<cuda include> -I<this folder>); no system
// headers. Companion of prefill.cu (the one-launch fused kernel).
//
// STATUS: experiment, correct (every check row of its harness passes, numerics better than prefill.cu v5) but
// SLOWER than prefill.cu v5 in every ANCHORS configuration on the H200 (1x1024 57.7 vs 49.0 us, 1x8192 388 vs 352,
// 1x65536 3003 vs 2779; results/prefill64.md). The runtime does not pick it by default. What bounds it: one warp
// per scheduler (4 warps, 220 KB smem, 1 CTA/SM) issuing ~1,250 instructions per chunk at ~5 cycles each, and a
// prep kernel that costs ~8 us of SM time per (chunk, head). Kept as the base for a wgmma rewrite and for context
// parallelism (the prep kernel and the workspace record are what both need).
//
// ---------------------------------------------------------------------------------------------------------
// Math (GDN.md §2), per (sequence, value head h), chunks of C = 64 tokens, chunk-local cumulative log-decay γ:
//   A = strict_lower(diag(β) K Kᵀ ⊙ exp(γ_i − γ_j)),  T = (I + A)⁻¹,  Tb = T diag(β),  Tg = T diag(β e^γ)
//   P = scale · (Q Kᵀ ⊙ exp(γ_i − γ_j) ⊙ [i ≥ j])
//   Vn = Tb V − Tg K Sᵀ-part,  i.e. in Sᵀ[v][k] form:  Z = Sᵀ Kᵀ,  Vnᵀ = Vᵀ Tbᵀ − Z Tgᵀ
//   Oᵀ = scale e^γ ⊙ (Sᵀ Qᵀ) + Vnᵀ Pᵀ,   Sᵀ ← e^{γ_C} Sᵀ + (Vnᵀ ⊙ e^{γ_C − γ}) K
// Only differences γ_i − γ_j (i ≥ j) and γ_C − γ_i are exponentiated (≤ 0): extreme gates stay finite. The last,
// partial chunk is padded with k = q = v = 0, β = 0, log g = 0 (exact: padded rows of Tb, Tg, P, Vn are 0).
//
// Two kernels, launched in this order on one stream (no host sync, nothing read on the host):
// 1. gdn_prefill64_prep — grid (num_slots, HV), block 128. One CTA per (chunk, value head): everything that
//    does not depend on the state (gates, γ scan, K Kᵀ and Q Kᵀ on tensor cores, T by a blocked fp32 inverse:
//    16x16 diagonal blocks by forward substitution, then block diagonals T_ij = −T_ii Σ_k A_ik T_kj), written to
//    a workspace record. Fully parallel: uses the whole GPU however few the sequences are.
//    Chunk j of sequence i lives in workspace slot f(i) + j with f(i) = cu_seqlens[i] / 64 + i, which is strictly
//    increasing in i and leaves room for every chunk; num_slots = T / 64 + N + 1. A CTA finds its (i, j) by a
//    binary search over cu_seqlens; slots that hold no chunk (at most N + 1 per head) exit at once.
// 2. gdn_prefill64_walk_{f32,bf16} — grid N·HV·8, block 128 (4 warps). One CTA per (sequence, value head,
//    16-row value tile): the sequential chain. The state tile Sᵀ[16 v][128 k] is split over the 4 warps by k
//    (warp w holds k in [32w, 32w+32): 16 fp32 accumulator registers per lane), so every product with S is a
//    quarter as long; the k-partial sums of Z = Sᵀ Kᵀ and Y = Sᵀ Qᵀ meet in shared memory. Per chunk:
//      S0  loads of chunk c visible (double-buffered: chunk c+1 is issued right after; the workspace record by one
//          bulk copy on an mbarrier, K/Q/V rows by cp.async)
//          partial Z, Y (16 mma each per warp); U = Vᵀ Tbᵀ for the warp's two token tiles (no S: off the chain)
//      S1  partial Z in smem → warp w reduces token columns [16w, 16w+16), stores Z as hi+lo bf16
//      S2  partial Y in smem; X = Z Tgᵀ (hi/lo, 3 products), Vn = U − X for the warp's tokens [16w, 16w+16)
//          (all four k-steps: the stored upper triangles are exact zeros), Vn published (hi, lo, ⊙ e^{γC−γ})
//      S3  Y reduced for the warp's tiles, O = e^γ Y + Vn Pᵀ (hi/lo), state update on the warp's k slice,
//          output tokens stored (16 bytes per lane).
//    Why (the plan): one (sequence, head) chain of prefill.cu v5 costs ~0.69 µs per 16 tokens; here a 64-token
//    chunk costs ~112 mma per warp with 4 warps on the 4 SM sub-partitions, and the preparation runs beside, not
//    inside, the chain. Measured: ~2.5 µs per 64-token chunk (latency-bound, see STATUS above).
//
// Layouts: q, k [T, H, 128] bf16; v [T, HV, 128] bf16; a, b [T, HV] bf16; state / new_state [N, HV, V, K] (k-last,
// fp32 or bf16 by walk variant); out [T, HV, 128] bf16; cu_seqlens int64 [N+1] in device memory. Value head h
// reads q/k head h / (HV / H). All offsets are 64-bit. HV need not be even here.
//
// Numerics: as prefill.cu v5 — products with S use S rounded to bf16 (as FLA/FlashInfer); T (as Tb, Tg), P, Z
// and Vn in the output product are hi+lo bf16 pairs; the update operand Vn e^{γC−γ} is one bf16; T is computed
// in fp32.
// ---------------------------------------------------------------------------------------------------------
#include "gates.cuh"

// Parameters of every gdn_prefill64_* kernel. 8-byte fields first; 128 bytes. Mirrored by the Rust runtime.
struct Prefill64Params {
    const __nv_bfloat16* q;        //   0: [T, H, 128] bf16
    const __nv_bfloat16* k;        //   8: [T, H, 128] bf16
    const __nv_bfloat16* v;        //  16: [T, HV, 128] bf16
    const __nv_bfloat16* a;        //  24: [T, HV] bf16
    const __nv_bfloat16* b;        //  32: [T, HV] bf16
    const float* A_log;            //  40: [HV] f32
    const float* dt_bias;          //  48: [HV] f32
    const i64* cu_seqlens;         //  56: [N+1] int64, device memory
    const void* state;             //  64: [N, HV, 128, 128] f32 (walk_f32) or bf16 (walk_bf16); NULL = zeros
    void* new_state;               //  72: same shape / dtype; every row written (zeros for empty sequences)
    __nv_bfloat16* out;            //  80: [T, HV, 128] bf16
    void* workspace;               //  88: num_slots · HV · WS_CHUNK_BYTES bytes, 256-byte aligned
    i64 num_seqs;                  //  96: N
    i64 total_tokens;              // 104: T
    float scale;                   // 112: resolved, never 0
    i32 num_q_heads;               // 116: H
    i32 num_v_heads;               // 120: HV (multiple of H)
    i32 pad0;                      // 124: 0
};

namespace gdn_prefill64 {

constexpr int C = 64;              // chunk length (tokens)
constexpr int D = 128;             // head dim (K = V = 128)
constexpr int BV = 16;             // value rows per walk CTA
constexpr int NVG = D / BV;        // walk CTAs per (sequence, value head)
constexpr int LDK = D + 8;         // padded bf16 row stride of K / Q tiles (272 B): ldmatrix conflict-free
constexpr int LDC = C + 8;         // padded bf16 row stride of 64-column tiles (144 B)
constexpr int LDF = C + 4;         // padded f32 row stride of 64-column f32 tiles (272 B)

// ---- workspace record per (chunk, value head), written by prep, read by walk. Its layout is exactly the walk
// slot's [Tb hi | Tb lo | Tg hi | Tg lo | P hi | P lo | e-vectors] region (padded 144-byte rows), so the walk moves
// it with ONE bulk (TMA) copy.
constexpr int WS_TILE = C * LDC * 2;               // one [64][72] bf16 tile (64 used columns), 9216 B
constexpr int WS_TBH = 0;                          // Tb hi   [c'][c] row-major
constexpr int WS_TBL = WS_TBH + WS_TILE;           // Tb lo
constexpr int WS_TGH = WS_TBL + WS_TILE;           // Tg hi
constexpr int WS_TGL = WS_TGH + WS_TILE;           // Tg lo
constexpr int WS_PH = WS_TGL + WS_TILE;            // P hi    [c'][c]
constexpr int WS_PL = WS_PH + WS_TILE;             // P lo
constexpr int WS_EGQ = WS_PL + WS_TILE;            // scale·e^{γ_i}   f32 [64]
constexpr int WS_EC = WS_EGQ + 4 * C;              // e^{γ_C − γ_i}   f32 [64]
constexpr int WS_EGC = WS_EC + 4 * C;              // e^{γ_C}         f32 [1], padded to 256 B
constexpr int WS_CHUNK_BYTES = WS_EGC + 256;       // 56064
static_assert(WS_CHUNK_BYTES == 56064 && WS_CHUNK_BYTES % 16 == 0, "workspace record (mirrored by the Rust runtime)");

// ---- prep shared memory
constexpr int PK_OFF = 0;                          // K bf16 [64][136]
constexpr int PQ_OFF = PK_OFF + C * LDK * 2;       // Q bf16 [64][136]
constexpr int PA_OFF = PQ_OFF + C * LDK * 2;       // A f32 [64][68] (upper blocks reused as scratch M)
constexpr int PT_OFF = PA_OFF + C * LDF * 4;       // T f32 [64][68]
constexpr int PG_OFF = PT_OFF + C * LDF * 4;       // γ f32 [64]
constexpr int PB_OFF = PG_OFF + 4 * C;             // β f32 [64]
constexpr int PREP_SMEM = PB_OFF + 4 * C;          // 70144
static_assert(PREP_SMEM == 70144, "prep smem (mirrored by the Rust runtime)");

// ---- walk shared memory: two chunk slots, then the cross-warp exchange buffers
constexpr int SK_OFF = 0;                          // K bf16 [64][136]
constexpr int SQ_OFF = SK_OFF + C * LDK * 2;       // Q bf16 [64][136]
constexpr int SV_OFF = SQ_OFF + C * LDK * 2;       // V tile bf16 [64][24] (16 value columns + pad)
constexpr int LDV = BV + 8;
constexpr int ST_OFF = SV_OFF + C * LDV * 2;       // 6 tiles bf16 [64][72]: Tb hi/lo, Tg hi/lo, P hi/lo
constexpr int ST_TILE = C * LDC * 2;               // 9216
constexpr int SE_OFF = ST_OFF + 6 * ST_TILE;       // EGQ [64], EC [64], EGC f32 (768 B, as in the workspace)
constexpr int SLOT_BYTES = SE_OFF + 768;           // 93952
static_assert(SE_OFF + 768 - ST_OFF == WS_CHUNK_BYTES && ST_OFF % 16 == 0, "record = slot image");
constexpr int RED_OFF = 2 * SLOT_BYTES;            // partial Z / Y: f32 [4 warps][16][68]
constexpr int RED_WARP = BV * LDF * 4;             // 4352
constexpr int ZR_OFF = RED_OFF + 4 * RED_WARP;     // Z hi, Z lo: bf16 [16][72] each
constexpr int ROW16 = BV * LDC * 2;                // 2304
constexpr int VN_OFF = ZR_OFF + 2 * ROW16;         // Vn hi, Vn lo, Vn·e^{γC−γ}: bf16 [16][72] each
constexpr int OS_OFF = VN_OFF + 3 * ROW16;         // per-warp output staging bf16 [16 tokens][24]
constexpr int OS_WARP = 16 * LDV * 2;              // 768
constexpr int BAR_OFF = OS_OFF + 4 * OS_WARP;      // FULL mbarriers of the two slots (8 B each)
constexpr int WALK_SMEM = BAR_OFF + 16;            // 219920
static_assert(WALK_SMEM == 219920, "walk smem (mirrored by the Rust runtime)");
static_assert(WALK_SMEM <= 232448, "sm_90 opt-in shared memory limit");

// ------------------------------------------------------------------ PTX helpers
__device__ __forceinline__ u32 smem_addr(const void* p) { return (u32)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void ldsm_x4(u32 addr, u32* r) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr) : "memory");
}
__device__ __forceinline__ void ldsm_x4_t(u32 addr, u32* r) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr) : "memory");
}
__device__ __forceinline__ void ldsm_x2(u32 addr, u32* r) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n"
                 : "=r"(r[0]), "=r"(r[1]) : "r"(addr) : "memory");
}
// D = A·B + D, m16n8k16, bf16 inputs, f32 accumulators.
__device__ __forceinline__ void mma(float* c, const u32* a, u32 b0, u32 b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ void cp_async16(u32 dst, const void* src, bool valid) {
    int n = valid ? 16 : 0;  // src-size 0: the 16 bytes are zero-filled, nothing is read
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(n) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;\n" ::: "memory"); }
// mbarrier + bulk (TMA, non-tensor) copies: a few large copies per chunk instead of thousands of 16-byte
// cp.async requests (those capped the first version at ~13 B/cycle per SM: 3.7 us per chunk).
__device__ __forceinline__ void mbar_init(u32 addr, u32 count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(addr), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_init_fence() {
    asm volatile("fence.mbarrier_init.release.cluster;\nfence.proxy.async.shared::cta;\n" ::: "memory");
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
// is counted on the mbarrier at `bar` in bytes.
__device__ __forceinline__ void bulk_g2s(u32 dst, const void* src, u32 bytes, u32 bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
                 ::"r"(dst), "l"(src), "r"(bytes), "r"(bar) : "memory");
}
__device__ __forceinline__ void zero_bytes(unsigned char* dst, int n16) {  // n16 x 16 bytes of shared memory
    for (int i = 0; i < n16; ++i) reinterpret_cast<uint4*>(dst)[i] = make_uint4(0u, 0u, 0u, 0u);
}

__device__ __forceinline__ u32 pack_bf16(float lo, float hi) {
    __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);  // .x (low 16 bits) = lo
    return *reinterpret_cast<u32*>(&h);
}
// hi = bf16(x), lo = bf16(x - hi), packed pairwise.
__device__ __forceinline__ void split_bf16(float x0, float x1, u32& hi, u32& lo) {
    __nv_bfloat162 h = __floats2bfloat162_rn(x0, x1);
    float2 hf = __bfloat1622float2(h);
    hi = *reinterpret_cast<u32*>(&h);
    lo = pack_bf16(x0 - hf.x, x1 - hf.y);
}

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

// First workspace slot of sequence i.
__device__ __forceinline__ i64 seq_slot(const i64* cu, i64 i) { return cu[i] / C + i; }

// ================================================================== prep: one (chunk, value head) per CTA
__device__ __forceinline__ void prep_body(const Prefill64Params& p) {
    extern __shared__ __align__(128) unsigned char smem[];
    const i64 N = p.num_seqs;
    const int HV = p.num_v_heads, H = p.num_q_heads;
    const int h = blockIdx.y;
    const i64 slot = blockIdx.x;
    if (N <= 0) return;
    // Largest i with f(i) <= slot (f strictly increasing, f(0) = 0).
    i64 lo = 0, hi = N - 1;
    while (lo < hi) {
        const i64 mid = (lo + hi + 1) >> 1;
        if (seq_slot(p.cu_seqlens, mid) <= slot) lo = mid; else hi = mid - 1;
    }
    const i64 seq = lo;
    const i64 start = p.cu_seqlens[seq] + (slot - seq_slot(p.cu_seqlens, seq)) * C;
    const i64 eos = p.cu_seqlens[seq + 1];
    if (start >= eos) return;  // a slot that holds no chunk
    const int nvalid = eos - start < C ? (int)(eos - start) : C;
    const int hq = h / (HV / H);
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;

    float* Af = reinterpret_cast<float*>(smem + PA_OFF);
    float* Tf = reinterpret_cast<float*>(smem + PT_OFF);
    float* gam_s = reinterpret_cast<float*>(smem + PG_OFF);
    float* beta_s = reinterpret_cast<float*>(smem + PB_OFF);
    unsigned char* rec = reinterpret_cast<unsigned char*>(p.workspace) + (slot * HV + h) * (i64)WS_CHUNK_BYTES;

    // ---- K, Q rows (cp.async, zero-filled past the end). (Per-row bulk copies issued by one warp were slower:
    // the TMA unit takes small copies one after another.)
    {
        const u32 ks = smem_addr(smem + PK_OFF), qs = smem_addr(smem + PQ_OFF);
#pragma unroll
        for (int it = 0; it < (C * D / 8) / 128; ++it) {  // 1024 pieces of 16 B per tile, 8 per thread
            const int idx = it * 128 + tid, r = idx >> 4, c = idx & 15;
            const bool ok = r < nvalid;
            const i64 off = ok ? ((start + r) * H + hq) * (i64)D + c * 8 : 0;
            const u32 d = (u32)(r * LDK + c * 8) * 2;
            cp_async16(ks + d, p.k + off, ok);
            cp_async16(qs + d, p.q + off, ok);
        }
        cp_async_commit();
    }
    // ---- gates: log-decay and β for token tid (< 64), inclusive scan of the log-decays per warp
    if (tid < C) {
        const bool ok = tid < nvalid;
        float lg = 0.f, be = 0.f;
        if (ok) {
            const i64 gi = (start + tid) * HV + h;
            lg = gdn_log_decay(__bfloat162float(p.a[gi]), p.dt_bias[h], p.A_log[h]);
            be = gdn_beta(__bfloat162float(p.b[gi]));
        }
#pragma unroll
        for (int off = 1; off < 32; off <<= 1) {
            const float y = __shfl_up_sync(0xffffffffu, lg, off);
            if (lane >= off) lg += y;
        }
        gam_s[tid] = lg;
        beta_s[tid] = be;
    }
    // zero the strictly-upper off-diagonal blocks of T (the record is written whole)
    for (int e = tid; e < C * C; e += 128) {
        const int r = e >> 6, c = e & 63;
        if ((c >> 4) > (r >> 4)) Tf[r * LDF + c] = 0.f;
    }
    cp_async_wait_all();
    __syncthreads();
    if (tid >= 32 && tid < C) gam_s[tid] += gam_s[31];
    __syncthreads();

    // ---- K Kᵀ and Q Kᵀ, row block `warp` (rows 16w..16w+15) against token tiles 0..2w+1 (lower part only)
    float kk[8][4], qk[8][4];
#pragma unroll
    for (int n = 0; n < 8; ++n)
#pragma unroll
        for (int r = 0; r < 4; ++r) kk[n][r] = qk[n][r] = 0.f;
    {
        const u32 ks = smem_addr(smem + PK_OFF), qs = smem_addr(smem + PQ_OFF);
        const u32 lrow = (u32)((lane & 15) * LDK + 8 * (lane >> 4)) * 2;
#pragma unroll
        for (int s = 0; s < 8; ++s) {
            u32 ak[4], aq[4];
            ldsm_x4(ks + lrow + (u32)(16 * warp * LDK) * 2 + s * 32, ak);
            ldsm_x4(qs + lrow + (u32)(16 * warp * LDK) * 2 + s * 32, aq);
#pragma unroll
            for (int jj = 0; jj < 4; ++jj) {
                if (jj <= warp) {
                    u32 bk[4];
                    ldsm_x4(ks + lrow + (u32)(16 * jj * LDK) * 2 + s * 32, bk);
                    mma(kk[2 * jj], ak, bk[0], bk[2]);
                    mma(kk[2 * jj + 1], ak, bk[1], bk[3]);
                    mma(qk[2 * jj], aq, bk[0], bk[2]);
                    mma(qk[2 * jj + 1], aq, bk[1], bk[3]);
                }
            }
        }
    }
    // ---- A (f32, smem, row-major, zero on and above the diagonal) and P (hi/lo bf16, straight to the record)
    {
        __nv_bfloat16* ph = reinterpret_cast<__nv_bfloat16*>(rec + WS_PH);
        __nv_bfloat16* pl = reinterpret_cast<__nv_bfloat16*>(rec + WS_PL);
#pragma unroll
        for (int nt = 0; nt < 8; ++nt)
#pragma unroll
            for (int hr = 0; hr < 2; ++hr) {
                const int i = 16 * warp + g + 8 * hr;
                const int j0 = 8 * nt + 2 * t;
                const float gi = gam_s[i], bi = beta_s[i];
                float av[2], pv[2];
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const int j = j0 + e;
                    const float dec = __expf(fminf(gi - gam_s[j], 0.f));
                    av[e] = i > j ? bi * kk[nt][2 * hr + e] * dec : 0.f;
                    pv[e] = i >= j ? p.scale * qk[nt][2 * hr + e] * dec : 0.f;
                }
                *reinterpret_cast<float2*>(Af + i * LDF + j0) = make_float2(av[0], av[1]);
                u32 h2, l2;
                split_bf16(pv[0], pv[1], h2, l2);
                *reinterpret_cast<u32*>(ph + i * LDC + j0) = h2;
                *reinterpret_cast<u32*>(pl + i * LDC + j0) = l2;
            }
    }
    __syncthreads();
    // ---- diagonal blocks: warp w inverts I + A_ww by forward substitution (lane c < 16 owns column c).
    {
        const int c = lane & 15, b0 = 16 * warp;
        float col[16], acc[16];
#pragma unroll
        for (int i = 0; i < 16; ++i) acc[i] = 0.f;
#pragma unroll
        for (int j = 0; j < 16; ++j) {
            col[j] = j < c ? 0.f : (j == c ? 1.f : -acc[j]);
#pragma unroll
            for (int i = j + 1; i < 16; ++i) acc[i] = fmaf(Af[(b0 + i) * LDF + b0 + j], col[j], acc[i]);
        }
        if (lane < 16) {
#pragma unroll
            for (int i = 0; i < 16; ++i) Tf[(b0 + i) * LDF + b0 + c] = col[i];
        }
    }
    __syncthreads();
    // ---- off-diagonal blocks, by block diagonal d: M = Σ_{k=bj}^{bi-1} A_{bi,k} T_{k,bj} (into the unused
    // upper block (bj, bi) of A), then T_{bi,bj} = −T_{bi,bi} M. Thread tid owns elements e = tid + 128m of the
    // (4−d) pairs: pair m/2, row (e/16)%16, column e%16 — every loop bound is a compile-time constant, so the
    // 2(4−d) independent dot products of a thread interleave.
#pragma unroll
    for (int d = 1; d < 4; ++d) {
        float acc[6];
#pragma unroll
        for (int m = 0; m < 2 * (4 - d); ++m) {
            const int e = tid + 128 * m, bj = m >> 1, bi = bj + d, r = (e >> 4) & 15, c = e & 15;
            const float* arow = Af + (16 * bi + r) * LDF;
            float x = 0.f;
#pragma unroll
            for (int kx = 16 * bj; kx < 16 * bi; ++kx) x = fmaf(arow[kx], Tf[kx * LDF + 16 * bj + c], x);
            acc[m] = x;
        }
#pragma unroll
        for (int m = 0; m < 2 * (4 - d); ++m) {
            const int e = tid + 128 * m, bj = m >> 1, bi = bj + d, r = (e >> 4) & 15, c = e & 15;
            Af[(16 * bj + r) * LDF + 16 * bi + c] = acc[m];
        }
        __syncthreads();
#pragma unroll
        for (int m = 0; m < 2 * (4 - d); ++m) {
            const int e = tid + 128 * m, bj = m >> 1, bi = bj + d, r = (e >> 4) & 15, c = e & 15;
            const float* trow = Tf + (16 * bi + r) * LDF + 16 * bi;
            float x = 0.f;
#pragma unroll
            for (int kx = 0; kx < 16; ++kx) x = fmaf(trow[kx], Af[(16 * bj + kx) * LDF + 16 * bi + c], x);
            acc[m] = -x;
        }
#pragma unroll
        for (int m = 0; m < 2 * (4 - d); ++m) {
            const int e = tid + 128 * m, bj = m >> 1, bi = bj + d, r = (e >> 4) & 15, c = e & 15;
            Tf[(16 * bi + r) * LDF + 16 * bj + c] = acc[m];
        }
        __syncthreads();
    }
    // ---- Tb = T diag(β), Tg = T diag(β e^γ) as hi/lo bf16 (coalesced 4-byte stores), e-vectors
    {
        u32* tbh = reinterpret_cast<u32*>(rec + WS_TBH);
        u32* tbl = reinterpret_cast<u32*>(rec + WS_TBL);
        u32* tgh = reinterpret_cast<u32*>(rec + WS_TGH);
        u32* tgl = reinterpret_cast<u32*>(rec + WS_TGL);
        const float gC = gam_s[C - 1];
#pragma unroll 4
        for (int m = 0; m < (C * C / 2) / 128; ++m) {
            const int e = m * 128 + tid, r = e >> 5, c = 2 * (e & 31);
            const float t0 = Tf[r * LDF + c], t1 = Tf[r * LDF + c + 1];
            const float b0 = beta_s[c], b1 = beta_s[c + 1];
            u32 h2, l2;
            split_bf16(t0 * b0, t1 * b1, h2, l2);
            const int o = r * (LDC / 2) + (e & 31);  // u32 index in the padded [64][72] tile
            tbh[o] = h2;
            tbl[o] = l2;
            split_bf16(t0 * b0 * __expf(gam_s[c]), t1 * b1 * __expf(gam_s[c + 1]), h2, l2);
            tgh[o] = h2;
            tgl[o] = l2;
        }
        if (tid < C) {
            reinterpret_cast<float*>(rec + WS_EGQ)[tid] = p.scale * __expf(gam_s[tid]);
            reinterpret_cast<float*>(rec + WS_EC)[tid] = __expf(gC - gam_s[tid]);
        } else if (tid < C + 64) {
            reinterpret_cast<float*>(rec + WS_EGC)[tid - C] = tid == C ? __expf(gC) : 0.f;
        }
    }
}

// ================================================================== walk: the sequential chain
// Fill one slot with chunk data: the workspace record by ONE bulk (TMA) copy (issued by thread 0, counted on the
// slot's FULL barrier `bar`), K, Q and the V tile by cp.async from every thread (zero-filled past the end; one
// commit group per chunk). Per-row bulk copies for K/Q/V were tried and were 2x slower (the TMA unit serialises
// small copies).
__device__ __forceinline__ void walk_issue(const Prefill64Params& p, unsigned char* slot, u32 bar,
                                           const unsigned char* rec, i64 start, int nvalid, int hq, int h, int v0,
                                           int tid) {
    const int H = p.num_q_heads, HV = p.num_v_heads;
    if (tid == 0) {
        mbar_arrive_expect_tx(bar, WS_CHUNK_BYTES);
        bulk_g2s(smem_addr(slot + ST_OFF), rec, WS_CHUNK_BYTES, bar);
    }
    const u32 ks = smem_addr(slot + SK_OFF), qs = smem_addr(slot + SQ_OFF);
#pragma unroll
    for (int it = 0; it < (C * D / 8) / 128; ++it) {
        const int idx = it * 128 + tid, r = idx >> 4, c = idx & 15;
        const bool ok = r < nvalid;
        const i64 off = ok ? ((start + r) * H + hq) * (i64)D + c * 8 : 0;
        const u32 d = (u32)(r * LDK + c * 8) * 2;
        cp_async16(ks + d, p.k + off, ok);
        cp_async16(qs + d, p.q + off, ok);
    }
    {   // V tile: 64 rows x 2 pieces
        const int r = tid >> 1, c = tid & 1;
        const bool ok = r < nvalid;
        const i64 off = ok ? ((start + r) * HV + h) * (i64)D + v0 + c * 8 : 0;
        cp_async16(smem_addr(slot + SV_OFF) + (u32)(r * LDV + c * 8) * 2, p.v + off, ok);
    }
    cp_async_commit();
}

template <bool BF16STATE>
__device__ __forceinline__ void walk_body(const Prefill64Params& p) {
    extern __shared__ __align__(128) unsigned char smem[];
    const int HV = p.num_v_heads;
    const int tile = blockIdx.x;
    const int vg = tile % NVG;
    const int h = (tile / NVG) % HV;
    const i64 seq = (i64)(tile / NVG) / HV;
    const int hq = h / (HV / p.num_q_heads);
    const i64 bos = p.cu_seqlens[seq], eos = p.cu_seqlens[seq + 1];
    const i64 len = eos > bos ? eos - bos : 0;
    const int nch = (int)((len + C - 1) / C);
    const int tid = threadIdx.x, w = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
    const int v0 = vg * BV;
    const unsigned char* rec0 =
        reinterpret_cast<const unsigned char*>(p.workspace) + (seq_slot(p.cu_seqlens, seq) * HV + h) * (i64)WS_CHUNK_BYTES;
    const i64 rec_stride = (i64)HV * WS_CHUNK_BYTES;  // next chunk of this (sequence, head)

    // Sᵀ[v0 + (g | g+8)][32w + 8nt + 2t (+1)]: n-tile nt of this warp's k slice.
    float S[4][4];
    const i64 sbase = ((seq * HV + h) * D + v0) * (i64)D + 32 * w;
    if (p.state != nullptr && len > 0) {
#pragma unroll
        for (int nt = 0; nt < 4; ++nt) {
            const float2 x0 = StateIO<BF16STATE>::load(p.state, sbase + (i64)g * D + 8 * nt + 2 * t);
            const float2 x1 = StateIO<BF16STATE>::load(p.state, sbase + (i64)(g + 8) * D + 8 * nt + 2 * t);
            S[nt][0] = x0.x; S[nt][1] = x0.y; S[nt][2] = x1.x; S[nt][3] = x1.y;
        }
    } else {
#pragma unroll
        for (int nt = 0; nt < 4; ++nt) S[nt][0] = S[nt][1] = S[nt][2] = S[nt][3] = 0.f;
    }

    float* red = reinterpret_cast<float*>(smem + RED_OFF);
    __nv_bfloat16* zh_s = reinterpret_cast<__nv_bfloat16*>(smem + ZR_OFF);
    __nv_bfloat16* zl_s = reinterpret_cast<__nv_bfloat16*>(smem + ZR_OFF + ROW16);
    __nv_bfloat16* vnh_s = reinterpret_cast<__nv_bfloat16*>(smem + VN_OFF);
    __nv_bfloat16* vnl_s = reinterpret_cast<__nv_bfloat16*>(smem + VN_OFF + ROW16);
    __nv_bfloat16* vnu_s = reinterpret_cast<__nv_bfloat16*>(smem + VN_OFF + 2 * ROW16);
    __nv_bfloat16* os = reinterpret_cast<__nv_bfloat16*>(smem + OS_OFF + w * OS_WARP);

    // ldmatrix lane offsets (bytes)
    const u32 lo_k = (u32)((lane & 15) * LDK + 8 * (lane >> 4)) * 2;               // 16x16 block of a [.][136] tile
    const u32 lo_a16 = (u32)((lane & 15) * LDC + 8 * (lane >> 4)) * 2;             // A 16x16 of a [16][72] tile
    // B fragments of the warp's two 8-token tiles (rows 16w..16w+15 of a [64][72] tile, 16 columns): r0/r2 tile 2w,
    // r1/r3 tile 2w+1
    const u32 lo_b16 = (u32)((16 * w + (lane & 15)) * LDC + 8 * (lane >> 4)) * 2;
    const u32 lo_vt = (u32)(((lane & 7) + 8 * (lane >> 4)) * LDV + 8 * ((lane >> 3) & 1)) * 2;  // Vᵀ (trans)
    // Warp w owns output tokens [16w, 16w+16) of each chunk (n-tiles 2w, 2w+1). Its triangular products run over
    // all four 16-token k-steps: the upper triangles of Tb, Tg and P are stored as exact zeros, so the extra steps
    // add 0, and full unrolling with independent accumulators keeps the tensor pipe busy (the first version looped
    // over the needed k-steps only: dependent mma chains, 5 cycles per instruction with one warp per scheduler).

    const u32 bar0 = smem_addr(smem + BAR_OFF);
    if (tid == 0) {
        mbar_init(bar0, 1);
        mbar_init(bar0 + 8, 1);
        mbar_init_fence();
    }
    __syncthreads();
    if (nch > 0) walk_issue(p, smem, bar0, rec0, bos, len < C ? (int)len : C, hq, h, v0, tid);
    for (int c = 0; c < nch; ++c) {
        unsigned char* slot = smem + (c & 1) * SLOT_BYTES;
        const i64 cstart = bos + (i64)c * C;
        cp_async_wait_all();
        mbar_wait(bar0 + 8 * (c & 1), (u32)(c >> 1) & 1u);
        __syncthreads();  // S0: chunk c visible to all; every warp is done with chunk c-1 (and its slot)
        if (c + 1 < nch) {
            const i64 ns = cstart + C;
            walk_issue(p, smem + ((c + 1) & 1) * SLOT_BYTES, bar0 + 8 * ((c + 1) & 1), rec0 + (i64)(c + 1) * rec_stride,
                       ns, eos - ns < C ? (int)(eos - ns) : C, hq, h, v0, tid);
        }
        const u32 ks = smem_addr(slot + SK_OFF), qs = smem_addr(slot + SQ_OFF);
        const u32 tbh = smem_addr(slot + ST_OFF), tbl = tbh + ST_TILE, tgh = tbl + ST_TILE, tgl = tgh + ST_TILE;
        const u32 pph = tgl + ST_TILE, ppl = pph + ST_TILE;
        const float* egq = reinterpret_cast<const float*>(slot + SE_OFF);
        const float* ec = egq + C;
        const float egc = ec[C];

        // ---- partial Z = Sᵀ Kᵀ, Y = Sᵀ Qᵀ over this warp's k slice: [16 v][64 tokens]
        float zp[8][4], yp[8][4];
#pragma unroll
        for (int n = 0; n < 8; ++n)
#pragma unroll
            for (int r = 0; r < 4; ++r) zp[n][r] = yp[n][r] = 0.f;
#pragma unroll
        for (int s = 0; s < 2; ++s) {
            const u32 a[4] = {pack_bf16(S[2 * s][0], S[2 * s][1]), pack_bf16(S[2 * s][2], S[2 * s][3]),
                              pack_bf16(S[2 * s + 1][0], S[2 * s + 1][1]), pack_bf16(S[2 * s + 1][2], S[2 * s + 1][3])};
#pragma unroll
            for (int jj = 0; jj < 4; ++jj) {
                u32 bk[4], bq[4];
                const u32 off = lo_k + (u32)(16 * jj * LDK) * 2 + (u32)(32 * w + 16 * s) * 2;
                ldsm_x4(ks + off, bk);
                ldsm_x4(qs + off, bq);
                mma(zp[2 * jj], a, bk[0], bk[2]);
                mma(zp[2 * jj + 1], a, bk[1], bk[3]);
                mma(yp[2 * jj], a, bq[0], bq[2]);
                mma(yp[2 * jj + 1], a, bq[1], bq[3]);
            }
        }
        // ---- U = Vᵀ Tbᵀ for the warp's 16 tokens (independent of S): [n-tile][Tb hi | Tb lo] accumulators
        float U[2][2][4];
#pragma unroll
        for (int q = 0; q < 2; ++q)
#pragma unroll
            for (int x = 0; x < 2; ++x) U[q][x][0] = U[q][x][1] = U[q][x][2] = U[q][x][3] = 0.f;
#pragma unroll
        for (int s = 0; s < 4; ++s) {
            u32 va[4], bh[4], bl[4];
            ldsm_x4_t(smem_addr(slot + SV_OFF) + lo_vt + (u32)(16 * s * LDV) * 2, va);
            ldsm_x4(tbh + lo_b16 + 32 * s, bh);
            ldsm_x4(tbl + lo_b16 + 32 * s, bl);
#pragma unroll
            for (int q = 0; q < 2; ++q) {
                mma(U[q][0], va, bh[q], bh[q + 2]);
                mma(U[q][1], va, bl[q], bl[q + 2]);
            }
        }
        // ---- publish partial Z
        {
            float* rw = red + w * (BV * LDF);
#pragma unroll
            for (int n = 0; n < 8; ++n) {
                *reinterpret_cast<float2*>(rw + g * LDF + 8 * n + 2 * t) = make_float2(zp[n][0], zp[n][1]);
                *reinterpret_cast<float2*>(rw + (g + 8) * LDF + 8 * n + 2 * t) = make_float2(zp[n][2], zp[n][3]);
            }
        }
        __syncthreads();  // S1
        // ---- reduce Z columns [16w, 16w+16): lane -> row lane>>1, 8 columns; store hi/lo bf16
        {
            const int r = lane >> 1, c0 = 16 * w + 8 * (lane & 1);
            float z[8];
#pragma unroll
            for (int e = 0; e < 8; ++e) z[e] = 0.f;
#pragma unroll
            for (int ww = 0; ww < 4; ++ww) {
                const float4 x0 = *reinterpret_cast<const float4*>(red + ww * (BV * LDF) + r * LDF + c0);
                const float4 x1 = *reinterpret_cast<const float4*>(red + ww * (BV * LDF) + r * LDF + c0 + 4);
                z[0] += x0.x; z[1] += x0.y; z[2] += x0.z; z[3] += x0.w;
                z[4] += x1.x; z[5] += x1.y; z[6] += x1.z; z[7] += x1.w;
            }
            u32 hh[4], ll[4];
#pragma unroll
            for (int e = 0; e < 4; ++e) split_bf16(z[2 * e], z[2 * e + 1], hh[e], ll[e]);
            *reinterpret_cast<uint4*>(zh_s + r * LDC + c0) = make_uint4(hh[0], hh[1], hh[2], hh[3]);
            *reinterpret_cast<uint4*>(zl_s + r * LDC + c0) = make_uint4(ll[0], ll[1], ll[2], ll[3]);
        }
        __syncthreads();  // S2
        // ---- publish partial Y (the Z partials are consumed)
        {
            float* rw = red + w * (BV * LDF);
#pragma unroll
            for (int n = 0; n < 8; ++n) {
                *reinterpret_cast<float2*>(rw + g * LDF + 8 * n + 2 * t) = make_float2(yp[n][0], yp[n][1]);
                *reinterpret_cast<float2*>(rw + (g + 8) * LDF + 8 * n + 2 * t) = make_float2(yp[n][2], yp[n][3]);
            }
        }
        // ---- X = Z Tgᵀ (Z, Tg hi+lo: 3 products in separate accumulators), Vn = U − X; publish Vn
        {
            float X[2][3][4];
#pragma unroll
            for (int q = 0; q < 2; ++q)
#pragma unroll
                for (int x = 0; x < 3; ++x) X[q][x][0] = X[q][x][1] = X[q][x][2] = X[q][x][3] = 0.f;
#pragma unroll
            for (int s = 0; s < 4; ++s) {
                u32 zh[4], zl[4], gh[4], gl[4];
                ldsm_x4(smem_addr(zh_s) + lo_a16 + 32 * s, zh);
                ldsm_x4(smem_addr(zl_s) + lo_a16 + 32 * s, zl);
                ldsm_x4(tgh + lo_b16 + 32 * s, gh);
                ldsm_x4(tgl + lo_b16 + 32 * s, gl);
#pragma unroll
                for (int q = 0; q < 2; ++q) {
                    mma(X[q][0], zh, gh[q], gh[q + 2]);
                    mma(X[q][1], zl, gh[q], gh[q + 2]);
                    mma(X[q][2], zh, gl[q], gl[q + 2]);
                }
            }
#pragma unroll
            for (int q = 0; q < 2; ++q) {
                float Vn[4];
#pragma unroll
                for (int r = 0; r < 4; ++r) Vn[r] = (U[q][0][r] + U[q][1][r]) - (X[q][0][r] + X[q][1][r] + X[q][2][r]);
                const int c0 = 16 * w + 8 * q + 2 * t;
                const float e0 = ec[c0], e1 = ec[c0 + 1];
                u32 hh, ll;
                split_bf16(Vn[0], Vn[1], hh, ll);
                *reinterpret_cast<u32*>(vnh_s + g * LDC + c0) = hh;
                *reinterpret_cast<u32*>(vnl_s + g * LDC + c0) = ll;
                split_bf16(Vn[2], Vn[3], hh, ll);
                *reinterpret_cast<u32*>(vnh_s + (g + 8) * LDC + c0) = hh;
                *reinterpret_cast<u32*>(vnl_s + (g + 8) * LDC + c0) = ll;
                *reinterpret_cast<u32*>(vnu_s + g * LDC + c0) = pack_bf16(Vn[0] * e0, Vn[1] * e1);
                *reinterpret_cast<u32*>(vnu_s + (g + 8) * LDC + c0) = pack_bf16(Vn[2] * e0, Vn[3] * e1);
            }
        }
        __syncthreads();  // S3
        // ---- O = scale e^γ ⊙ Y + Vn Pᵀ (Vn, P hi+lo) for the warp's 16 tokens, staged as [token][v]
        {
            float O[2][3][4];
#pragma unroll
            for (int q = 0; q < 2; ++q) {
                const int c0 = 16 * w + 8 * q + 2 * t;
                float y[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
                for (int ww = 0; ww < 4; ++ww) {
                    const float2 a0 = *reinterpret_cast<const float2*>(red + ww * (BV * LDF) + g * LDF + c0);
                    const float2 a1 = *reinterpret_cast<const float2*>(red + ww * (BV * LDF) + (g + 8) * LDF + c0);
                    y[0] += a0.x; y[1] += a0.y; y[2] += a1.x; y[3] += a1.y;
                }
                O[q][0][0] = egq[c0] * y[0];
                O[q][0][1] = egq[c0 + 1] * y[1];
                O[q][0][2] = egq[c0] * y[2];
                O[q][0][3] = egq[c0 + 1] * y[3];
#pragma unroll
                for (int x = 1; x < 3; ++x) O[q][x][0] = O[q][x][1] = O[q][x][2] = O[q][x][3] = 0.f;
            }
#pragma unroll
            for (int s = 0; s < 4; ++s) {
                u32 vh[4], vl[4], bh[4], bl[4];
                ldsm_x4(smem_addr(vnh_s) + lo_a16 + 32 * s, vh);
                ldsm_x4(smem_addr(vnl_s) + lo_a16 + 32 * s, vl);
                ldsm_x4(pph + lo_b16 + 32 * s, bh);
                ldsm_x4(ppl + lo_b16 + 32 * s, bl);
#pragma unroll
                for (int q = 0; q < 2; ++q) {
                    mma(O[q][0], vh, bh[q], bh[q + 2]);
                    mma(O[q][1], vl, bh[q], bh[q + 2]);
                    mma(O[q][2], vh, bl[q], bl[q + 2]);
                }
            }
#pragma unroll
            for (int q = 0; q < 2; ++q) {
                float o[4];
#pragma unroll
                for (int r = 0; r < 4; ++r) o[r] = O[q][0][r] + O[q][1][r] + O[q][2][r];
                const int lt = 8 * q + 2 * t;  // local token row of the staging tile
                os[lt * LDV + g] = __float2bfloat16_rn(o[0]);
                os[(lt + 1) * LDV + g] = __float2bfloat16_rn(o[1]);
                os[lt * LDV + g + 8] = __float2bfloat16_rn(o[2]);
                os[(lt + 1) * LDV + g + 8] = __float2bfloat16_rn(o[3]);
            }
        }
        // ---- state update on this warp's k slice: Sᵀ ← e^{γC} Sᵀ + (Vn ⊙ e^{γC−γ}) K[:, 32w .. 32w+32)
#pragma unroll
        for (int nt = 0; nt < 4; ++nt)
#pragma unroll
            for (int r = 0; r < 4; ++r) S[nt][r] *= egc;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            u32 a[4];
            ldsm_x4(smem_addr(vnu_s) + lo_a16 + 32 * j, a);
#pragma unroll
            for (int pp = 0; pp < 2; ++pp) {
                u32 b[4];
                ldsm_x4_t(ks + lo_k + (u32)(16 * j * LDK) * 2 + (u32)(32 * w + 16 * pp) * 2, b);
                mma(S[2 * pp], a, b[0], b[1]);
                mma(S[2 * pp + 1], a, b[2], b[3]);
            }
        }
        // ---- store the warp's 16 tokens x 16 value columns (16 bytes per lane)
        __syncwarp();
        {
            const int lt = lane >> 1, half = lane & 1;
            const i64 tok = cstart + 16 * w + lt;
            if (tok < eos) {
                const uint4 val = *reinterpret_cast<const uint4*>(os + lt * LDV + 8 * half);
                *reinterpret_cast<uint4*>(p.out + (tok * HV + h) * (i64)D + v0 + 8 * half) = val;
            }
        }
        __syncwarp();
    }
    // ---- final state (zeros for an empty sequence)
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) {
        StateIO<BF16STATE>::store(p.new_state, sbase + (i64)g * D + 8 * nt + 2 * t, S[nt][0], S[nt][1]);
        StateIO<BF16STATE>::store(p.new_state, sbase + (i64)(g + 8) * D + 8 * nt + 2 * t, S[nt][2], S[nt][3]);
    }
}

}  // namespace gdn_prefill64

// ---------------------------------------------------------------------------------------------------------
// Exported kernels (launch in this order on one stream):
//   gdn_prefill64_prep        grid (T/64 + N + 1, HV, 1), block 128, dynamic smem gdn_prefill64::PREP_SMEM (70144)
//   gdn_prefill64_walk_f32    grid (N·HV·8, 1, 1), block 128, dynamic smem gdn_prefill64::WALK_SMEM (219920)
//   gdn_prefill64_walk_bf16   same, bf16 state / new_state
// workspace: (T/64 + N + 1) · HV · gdn_prefill64::WS_CHUNK_BYTES (56064) bytes, 256-byte aligned.
// Both smem sizes exceed 48 KB: raise CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES.
// ---------------------------------------------------------------------------------------------------------
extern "C" __global__ void __launch_bounds__(128) gdn_prefill64_prep(const Prefill64Params p) {
    gdn_prefill64::prep_body(p);
}
extern "C" __global__ void __launch_bounds__(128, 1) gdn_prefill64_walk_f32(const Prefill64Params p) {
    gdn_prefill64::walk_body<false>(p);
}
extern "C" __global__ void __launch_bounds__(128, 1) gdn_prefill64_walk_bf16(const Prefill64Params p) {
    gdn_prefill64::walk_body<true>(p);
}
