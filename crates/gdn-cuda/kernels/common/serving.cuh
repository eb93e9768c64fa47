// common/serving.cuh — the serving-mode parameters every kernel family takes (one struct, embedded as the
// last member of RecurrentParams, PrefillParams and Prefill64Params) and the small device helpers that read
// them. Semantics: crates/gdn-core/src/serving.rs (the float64 reference implements the same).
//
// A definition-mode call passes a zeroed ServingParams (flags 0, every pointer NULL): raw gates from a, b,
// A_log, dt_bias; q/k used as given; k-last dense state rows; state row n for sequence n; no checkpoints.
// Kernels branch on `flags` uniformly (every thread sees the same value), so the definition path costs a few
// predicated instructions and no memory traffic.
//
// Layout (136 bytes, 8-byte fields first; the Rust mirror abi::params::ServingParams checks every offset):
//   @0   gate               f32 [tokens, HV]: log decay g (GATE_LOG) or linear decay alpha (GATE_LINEAR)
//   @8   beta               f32 or bf16 (SV_BETA_BF16) [tokens, HV], post-sigmoid
//   @16  pool_indices       i32 or i64 (SV_INDEX_I64) [N]: decode/prefill pool row per sequence, or NULL
//   @24  has_initial        i32 [N]: 0 = start from zeros (row not read), or NULL (all read)
//   @32  num_accepted       i32 [B]: MTP spec-decode slots (state_indices is then [B, T]), or NULL
//   @40  checkpoints        [C, HV, 128, 128] in the state dtype, or f32 (SV_CKPT_F32), or NULL
//   @48  checkpoint_starts  i64 or i32 (SV_CKPT_START_I32) [N+1]: first checkpoint row per sequence
//   @56  state_row_stride   i64 elements between consecutive state pool rows (>= HV*128*128; a pool view of a
//                           larger per-layer buffer has a larger stride). The kernels read this field only
//                           through sv_row_stride(), which maps 0 to the dense stride.
//   @64  flags              i32, bits below
//   @68  checkpoint_every   i32 tokens between checkpoints (a multiple of 64), 0 = none
//   @72  act_stride         i64 [4][2]: (token, head) strides in elements of q, k, v, out (SV_STRIDED; else dense
//                           [tokens, heads, 128]). The last dimension is contiguous; every stride is a multiple of 8
//                           (16-byte rows) and non-negative; read only through sv_act_off().
#pragma once
#include "common/gates.cuh"
#include <cuda_fp16.h>

#define SV_GATE_MASK 3        // bits 0-1: 0 raw, 1 log g, 2 linear alpha
#define SV_GATE_LOG 1
#define SV_GATE_LINEAR 2
#define SV_BETA_BF16 (1 << 2) // beta is bf16 (else f32)
#define SV_QK_NORM (1 << 3)   // L2-normalise q and k per (token, head) before use
#define SV_KFIRST (1 << 4)    // every state tensor is [.., K, V] (V contiguous), else [.., V, K]
#define SV_PAD_NULL (1 << 5)  // index 0 is padding too (vLLM's NULL_BLOCK_ID), else only negative indices
#define SV_INDEX_I64 (1 << 6) // pool_indices are i64 (else i32)
#define SV_CU_I32 (1 << 7)    // prefill cu_seqlens are i32 (else i64)
#define SV_CKPT_F32 (1 << 8)  // checkpoints are f32 (else the state dtype)
#define SV_CKPT_START_I32 (1 << 9) // checkpoint_starts are i32 (else i64)
#define SV_STRIDED (1 << 10)  // q, k, v, out rows are at act_stride (views into larger tensors), else dense
#define SV_ACT_F16 (1 << 11)  // q, k, v, out, raw a / b and a 16-bit beta are fp16 (else bf16)
#define SV_STATE_F16 (1 << 12) // the 16-bit state tensors (state, new_state, pool, checkpoints in the state dtype) are
                               // fp16 (else bf16): the bf16-state kernels run them, converting at load and store

// Which activation tensor an act_stride row describes.
enum : int { SV_Q = 0, SV_K = 1, SV_V = 2, SV_OUT = 3 };

struct ServingParams {
    const float* gate;
    const void* beta;
    const void* pool_indices;
    const i32* has_initial;
    const i32* num_accepted;
    void* checkpoints;
    const void* checkpoint_starts;
    i64 state_row_stride;
    i32 flags;
    i32 checkpoint_every;
    i64 act_stride[4][2];
};

// The in-kernel q/k norm's epsilon (FLA's and FlashInfer's): x / sqrt(sum(x^2) + eps).
#define SV_QK_NORM_EPS 1e-6f

// Whether pool index `idx` marks padding under the call's rule.
__device__ __forceinline__ bool sv_is_pad(const ServingParams& s, i64 idx) {
    return (s.flags & SV_PAD_NULL) ? idx <= 0 : idx < 0;
}

// Pool row of sequence n (pool_indices != NULL).
__device__ __forceinline__ i64 sv_pool_index(const ServingParams& s, i64 n) {
    return (s.flags & SV_INDEX_I64) ? reinterpret_cast<const i64*>(s.pool_indices)[n]
                                    : (i64) reinterpret_cast<const i32*>(s.pool_indices)[n];
}

// Whether sequence n starts from its stored state (has_initial_state).
__device__ __forceinline__ bool sv_has_initial(const ServingParams& s, i64 n) {
    return s.has_initial == nullptr || s.has_initial[n] != 0;
}

// ---- 16-bit values: bf16, or fp16 with SV_ACT_F16 (activations) / SV_STATE_F16 (16-bit states).
// An activation's 16-bit value (its bits) as f32.
__device__ __forceinline__ float sv_act_f32(const ServingParams& s, unsigned short bits) {
    return (s.flags & SV_ACT_F16) ? __half2float(__ushort_as_half(bits)) : __uint_as_float((u32)bits << 16);
}
// f32 rounded to the activation dtype, as its bits.
__device__ __forceinline__ unsigned short sv_act16(const ServingParams& s, float x) {
    return (s.flags & SV_ACT_F16) ? __half_as_ushort(__float2half_rn(x)) : __bfloat16_as_ushort(__float2bfloat16_rn(x));
}
// Two f32 rounded to the activation dtype, packed (lo in the low half).
__device__ __forceinline__ u32 sv_act16x2(const ServingParams& s, float lo, float hi) {
    return (u32)sv_act16(s, lo) | ((u32)sv_act16(s, hi) << 16);
}
// A pair of fp16 values rewritten as bf16 (the SV_ACT_F16 inputs become the bf16 operands of every product: fp16 fits
// bf16's range, and the mantissa rounds from 11 to 8 bits).
__device__ __forceinline__ u32 sv_f16x2_to_bf16x2(u32 w) {
    const float lo = __half2float(__ushort_as_half((unsigned short)(w & 0xffffu)));
    const float hi = __half2float(__ushort_as_half((unsigned short)(w >> 16)));
    return (u32)__bfloat16_as_ushort(__float2bfloat16_rn(lo)) | ((u32)__bfloat16_as_ushort(__float2bfloat16_rn(hi)) << 16);
}
// A 16-byte piece of 8 fp16 values rewritten in place as bf16.
__device__ __forceinline__ void sv_f16_to_bf16_piece(void* piece) {
    uint4* d = reinterpret_cast<uint4*>(piece);
    const uint4 x = *d;
    *d = make_uint4(sv_f16x2_to_bf16x2(x.x), sv_f16x2_to_bf16x2(x.y), sv_f16x2_to_bf16x2(x.z), sv_f16x2_to_bf16x2(x.w));
}

// log(g) of element gi = token * HV + h: from the raw inputs, or the precomputed g / alpha. A linear alpha of 0
// gives a large finite negative log (exp of it is 0 in fp32), so that differences of logs stay finite.
__device__ __forceinline__ float sv_log_decay(const ServingParams& s, const __nv_bfloat16* a, i64 gi, float dt_bias,
                                              float a_log) {
    const int mode = s.flags & SV_GATE_MASK;
    if (mode == SV_GATE_LOG) return s.gate[gi];
    if (mode == SV_GATE_LINEAR) return fmaxf(__logf(s.gate[gi]), -1.0e4f);
    return gdn_log_decay(sv_act_f32(s, __bfloat16_as_ushort(a[gi])), dt_bias, a_log);
}

// beta of element gi: sigmoid(b) for raw gates, else the precomputed value (a 16-bit beta in the activation dtype).
__device__ __forceinline__ float sv_beta(const ServingParams& s, const __nv_bfloat16* b, i64 gi) {
    if ((s.flags & SV_GATE_MASK) == 0) return gdn_beta(sv_act_f32(s, __bfloat16_as_ushort(b[gi])));
    if (s.flags & SV_BETA_BF16)
        return sv_act_f32(s, reinterpret_cast<const unsigned short*>(s.beta)[gi]);
    return reinterpret_cast<const float*>(s.beta)[gi];
}

// Elements between pool rows; `dense` (HV*128*128) when the caller gave 0.
__device__ __forceinline__ i64 sv_row_stride(const ServingParams& s, i64 dense) {
    return s.state_row_stride != 0 ? s.state_row_stride : dense;
}

// First checkpoint row of sequence n.
__device__ __forceinline__ i64 sv_checkpoint_start(const ServingParams& s, i64 n) {
    return (s.flags & SV_CKPT_START_I32) ? (i64) reinterpret_cast<const i32*>(s.checkpoint_starts)[n]
                                         : reinterpret_cast<const i64*>(s.checkpoint_starts)[n];
}

// ---- The prefill builds. prefill_fused.cu and prefill_chunk64.cu compile twice: with GDN_SERVING (the serving build:
// the params end with the pool's row count and this block) and without (the definition build: the params end before
// them, and sv_of() is an all-zero block known at compile time, so every serving branch folds away and the definition
// kernels keep the definition's code and their 112/128-byte params). The kernels reach the block only through these.
#ifdef GDN_SERVING
template <class P> __device__ __forceinline__ const ServingParams& sv_of(const P& p) { return p.serving; }
template <class P> __device__ __forceinline__ i64 sv_state_rows(const P& p) { return p.num_state_rows; }
#else
template <class P> __device__ __forceinline__ ServingParams sv_of(const P&) { return ServingParams{}; }
template <class P> __device__ __forceinline__ i64 sv_state_rows(const P& p) { return p.num_seqs; }
#endif

// cu_seqlens[i] of a prefill call (P has `cu_seqlens`). The serving build reads int64 or int32 (SV_CU_I32) offsets as
// one 32-bit load: offsets are below 2^31 (PrefillArgs::validate: T fits 31 bits), so an int64 offset's low word is its
// value, at byte offset i << 3 or i << 2 (a select between two loads would cost the searches over cu_seqlens ~25
// instructions per round). The definition build reads int64.
template <class P> __device__ __forceinline__ i64 cu_at(const P& p, i64 i) {
#ifdef GDN_SERVING
    const int sh = (p.serving.flags & SV_CU_I32) ? 2 : 3;
    return (i64)*reinterpret_cast<const i32*>(reinterpret_cast<const unsigned char*>(p.cu_seqlens) + (i << sh));
#else
    return reinterpret_cast<const i64*>(p.cu_seqlens)[i];
#endif
}

// Where a prefill sequence reads and writes its state: `base`, the element offset of its (row, value head h) in
// state / new_state (64-bit), and whether it reads it (else zeros), writes it, or is padding (output rows zero,
// nothing read or written). Definition mode: row seq of state (read when present, the sequence is not empty and
// has_initial_state allows) and of new_state (always written: zeros for an empty sequence). Pool mode
// (pool_indices): row idx = pool_indices[seq] of the pool (state = new_state, rows sv_row_stride apart); an index
// that is padding under the call's rule, or >= the pool's rows, makes the sequence padding; an empty sequence reads
// and writes nothing.
struct SvStateRow {
    i64 base;
    bool read, write, pad;
};
// Whether pool index `idx` of a pool with `rows` rows makes a sequence padding (pool mode).
__device__ __forceinline__ bool sv_pool_pad(const ServingParams& s, i64 idx, i64 rows) {
    return sv_is_pad(s, idx) || idx >= rows;
}
// `idx`: pool_indices[seq] (loaded by the caller, ahead of its use), ignored outside pool mode; `has_state`: the call
// passed an initial state; `heads`: HV; `rows`: the pool's rows.
__device__ __forceinline__ SvStateRow sv_state_row(const ServingParams& s, bool has_state, i64 seq, i64 idx, i64 len,
                                                   int h, int heads, i64 rows) {
    const i64 dense = (i64)heads * (128 * 128), head = (i64)h * (128 * 128);
    SvStateRow r;
    if (s.pool_indices != nullptr) {
        r.pad = sv_pool_pad(s, idx, rows);
        r.write = !r.pad && len > 0;
        r.read = r.write && has_state && sv_has_initial(s, seq);
        r.base = (r.pad ? 0 : idx) * sv_row_stride(s, dense) + head;
    } else {
        r.pad = false;
        r.write = true;
        r.read = has_state && len > 0 && sv_has_initial(s, seq);
        r.base = seq * dense + head;
    }
    return r;
}

// One state element, f32 or 16-bit (BF16: bf16, or fp16 with SV_STATE_F16); the K-first paths' single-element
// accesses. (Without SV_STATE_F16 the same code as plain bf16 / f32 accesses.)
template <bool BF16> __device__ __forceinline__ float state_ld1(const ServingParams& s, const void* base, i64 off) {
    if constexpr (BF16) {
        if (s.flags & SV_STATE_F16) return __half2float(reinterpret_cast<const __half*>(base)[off]);
        return __bfloat162float(reinterpret_cast<const __nv_bfloat16*>(base)[off]);
    } else {
        return reinterpret_cast<const float*>(base)[off];
    }
}
template <bool BF16> __device__ __forceinline__ void state_st1(const ServingParams& s, void* base, i64 off, float x) {
    if constexpr (BF16) {
        if (s.flags & SV_STATE_F16) reinterpret_cast<__half*>(base)[off] = __float2half_rn(x);
        else reinterpret_cast<__nv_bfloat16*>(base)[off] = __float2bfloat16_rn(x);
    } else {
        reinterpret_cast<float*>(base)[off] = x;
    }
}
// Two adjacent state elements (k-last pairs; `off` even), f32 or 16-bit as above.
template <bool BF16> __device__ __forceinline__ float2 state_ld2(const ServingParams& s, const void* base, i64 off) {
    if constexpr (BF16) {
        if (s.flags & SV_STATE_F16)
            return __half22float2(*reinterpret_cast<const __half2*>(reinterpret_cast<const __half*>(base) + off));
        return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(reinterpret_cast<const __nv_bfloat16*>(base) + off));
    } else {
        return *reinterpret_cast<const float2*>(reinterpret_cast<const float*>(base) + off);
    }
}
template <bool BF16>
__device__ __forceinline__ void state_st2(const ServingParams& s, void* base, i64 off, float x0, float x1) {
    if constexpr (BF16) {
        if (s.flags & SV_STATE_F16)
            *reinterpret_cast<__half2*>(reinterpret_cast<__half*>(base) + off) = __floats2half2_rn(x0, x1);
        else
            *reinterpret_cast<__nv_bfloat162*>(reinterpret_cast<__nv_bfloat16*>(base) + off) = __floats2bfloat162_rn(x0, x1);
    } else {
        *reinterpret_cast<float2*>(reinterpret_cast<float*>(base) + off) = make_float2(x0, x1);
    }
}

// Element offset of (token t, head h) in activation tensor `which` (SV_Q, SV_K, SV_V, SV_OUT) whose dense layout is
// [tokens, heads, 128]: the caller's view strides with SV_STRIDED, else the dense offset.
__device__ __forceinline__ i64 sv_act_off(const ServingParams& s, int which, i64 t, i64 h, i64 heads) {
    if (s.flags & SV_STRIDED) return t * s.act_stride[which][0] + h * s.act_stride[which][1];
    return (t * heads + h) * 128;
}

// Token and head strides (elements) of activation `which` (SV_Q … SV_OUT) whose dense layout is [tokens, heads, 128]:
// the caller's view strides with SV_STRIDED, else the dense ones. The prefill kernels form their row pointers from
// these (one pointer per lane and tensor, advanced by the token stride).
__device__ __forceinline__ i64 sv_tok_stride(const ServingParams& s, int which, i64 heads) {
    return (s.flags & SV_STRIDED) ? s.act_stride[which][0] : heads * 128;
}
__device__ __forceinline__ i64 sv_head_stride(const ServingParams& s, int which) {
    return (s.flags & SV_STRIDED) ? s.act_stride[which][1] : 128;
}
