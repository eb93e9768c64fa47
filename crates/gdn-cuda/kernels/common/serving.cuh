// common/serving.cuh — the serving-mode parameters every kernel family takes (one struct, embedded as the
// last member of RecurrentParams, PrefillParams and Prefill64Params) and the small device helpers that read
// them. Semantics: crates/gdn-core/src/serving.rs (the float64 reference implements the same).
//
// A definition-mode call passes a zeroed ServingParams (flags 0, every pointer NULL): raw gates from a, b,
// A_log, dt_bias; q/k used as given; k-last dense state rows; state row n for sequence n; no checkpoints.
// Kernels branch on `flags` uniformly (every thread sees the same value), so the definition path costs a few
// predicated instructions and no memory traffic.
//
// Layout (72 bytes, 8-byte fields first; the Rust mirror abi::params::ServingParams checks every offset):
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
#pragma once
#include "common/gates.cuh"

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

// log(g) of element gi = token * HV + h: from the raw inputs, or the precomputed g / alpha. A linear alpha of 0
// gives a large finite negative log (exp of it is 0 in fp32), so that differences of logs stay finite.
__device__ __forceinline__ float sv_log_decay(const ServingParams& s, const __nv_bfloat16* a, i64 gi, float dt_bias,
                                              float a_log) {
    const int mode = s.flags & SV_GATE_MASK;
    if (mode == SV_GATE_LOG) return s.gate[gi];
    if (mode == SV_GATE_LINEAR) return fmaxf(__logf(s.gate[gi]), -1.0e4f);
    return gdn_log_decay(__bfloat162float(a[gi]), dt_bias, a_log);
}

// beta of element gi: sigmoid(b) for raw gates, else the precomputed value.
__device__ __forceinline__ float sv_beta(const ServingParams& s, const __nv_bfloat16* b, i64 gi) {
    if ((s.flags & SV_GATE_MASK) == 0) return gdn_beta(__bfloat162float(b[gi]));
    if (s.flags & SV_BETA_BF16) return __bfloat162float(reinterpret_cast<const __nv_bfloat16*>(s.beta)[gi]);
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

// Prefill cu_seqlens entry i (int64 or int32 per the flags).
__device__ __forceinline__ i64 sv_cu(const ServingParams& s, const void* cu, i64 i) {
    return (s.flags & SV_CU_I32) ? (i64) reinterpret_cast<const i32*>(cu)[i] : reinterpret_cast<const i64*>(cu)[i];
}
