//! Rust mirrors of the kernels' parameter structs, byte for byte. Each kernel takes its struct by value
//! (`const XParams p`), so the launch passes a pointer to one of these as the only kernel argument.
//!
//! The layouts below are checked at compile time (size and every offset). Each size is the registry's
//! (`registry::params_size`), which every compile checks against `sizeof` on the CUDA side
//! (`registry::MODULE_CONSTANTS`; recurrent.cu also has its own `static_assert`); the CUDA offsets are
//! written in the field comments of the .cu files (NVRTC's front end has no constexpr `offsetof`),
//! `tests/registry.rs` compares them with these, and a change there must change these asserts too.
//!
//! The two prefill structs repeat the same eleven leading pointers (q … out) rather than share a
//! `#[repr(C)]` sub-struct, because the CUDA structs are flat: each mirror lists its struct's fields one to
//! one, in the .cu file's order (the recurrent struct differs after `dt_bias` anyway).
//! Device pointers are `u64` (a `CUdeviceptr`); 0 is NULL.

use crate::kernels::registry::params_size;
pub use crate::kernels::registry::DP_LAUNCHES;
use std::mem::{offset_of, size_of};

/// `struct ServingParams` of `kernels/common/serving.cuh`, 136 bytes: the serving-mode block every params
/// struct ends with. All zero is the definition mode.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ServingParams {
    /// f32 [tokens, HV] log decay g or linear alpha, or 0 (raw gates)
    pub gate: u64,
    /// f32|bf16 [tokens, HV] beta, or 0 (raw gates)
    pub beta: u64,
    /// i32|i64 [N] decode/prefill pool rows, or 0
    pub pool_indices: u64,
    /// i32 [N] has_initial_state, or 0
    pub has_initial: u64,
    /// i32 [B] MTP spec-decode accepted tokens, or 0
    pub num_accepted: u64,
    /// [C, HV, 128, 128] checkpoint buffer, or 0
    pub checkpoints: u64,
    /// i64|i32 [N+1] first checkpoint row per sequence, or 0
    pub checkpoint_starts: u64,
    /// elements between state pool rows, 0 = dense
    pub state_row_stride: i64,
    /// `sv::*` bits
    pub flags: i32,
    /// tokens between checkpoints, 0 = none
    pub checkpoint_every: i32,
    /// (token, head) strides in elements of q, k, v, out (`sv::STRIDED`; [`ACT_Q`] … [`ACT_OUT`] index it)
    pub act_stride: [[i64; 2]; 4],
}

/// Rows of `ServingParams::act_stride` (`SV_Q` … `SV_OUT` of serving.cuh).
pub const ACT_Q: usize = 0;
pub const ACT_K: usize = 1;
pub const ACT_V: usize = 2;
pub const ACT_OUT: usize = 3;

/// The `SV_*` flag bits of `kernels/common/serving.cuh`.
pub mod sv {
    pub const GATE_LOG: i32 = 1;
    pub const GATE_LINEAR: i32 = 2;
    pub const BETA_BF16: i32 = 1 << 2;
    pub const QK_NORM: i32 = 1 << 3;
    pub const KFIRST: i32 = 1 << 4;
    pub const PAD_NULL: i32 = 1 << 5;
    pub const INDEX_I64: i32 = 1 << 6;
    pub const CU_I32: i32 = 1 << 7;
    pub const CKPT_F32: i32 = 1 << 8;
    pub const CKPT_START_I32: i32 = 1 << 9;
    pub const STRIDED: i32 = 1 << 10;
    pub const ACT_F16: i32 = 1 << 11;
    pub const STATE_F16: i32 = 1 << 12;
}

const _: () = {
    assert!(size_of::<ServingParams>() == 136);
    assert!(offset_of!(ServingParams, gate) == 0);
    assert!(offset_of!(ServingParams, beta) == 8);
    assert!(offset_of!(ServingParams, pool_indices) == 16);
    assert!(offset_of!(ServingParams, has_initial) == 24);
    assert!(offset_of!(ServingParams, num_accepted) == 32);
    assert!(offset_of!(ServingParams, checkpoints) == 40);
    assert!(offset_of!(ServingParams, checkpoint_starts) == 48);
    assert!(offset_of!(ServingParams, state_row_stride) == 56);
    assert!(offset_of!(ServingParams, flags) == 64);
    assert!(offset_of!(ServingParams, checkpoint_every) == 68);
    assert!(offset_of!(ServingParams, act_stride) == 72);
};

/// `struct RecurrentParams` of `kernels/recurrent.cu` (decode and MTP), 264 bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RecurrentParams {
    /// bf16 [B, T, H, 128]
    pub q: u64,
    /// bf16 [B, T, H, 128]
    pub k: u64,
    /// bf16 [B, T, HV, 128]
    pub v: u64,
    /// bf16 [B, T, HV] (raw gates only)
    pub a: u64,
    /// bf16 [B, T, HV] (raw gates only)
    pub b: u64,
    /// f32 [HV] (raw gates only)
    pub a_log: u64,
    /// f32 [HV] (raw gates only)
    pub dt_bias: u64,
    /// f32|bf16 [rows, HV, 128, 128] in the kernel's layout (k-last, or K-first for `_kf`), or 0 (zeros)
    pub state: u64,
    /// same dtype/layout as state, or 0 (not written); may equal `state`
    pub new_state: u64,
    /// f32 [rows, T, HV, 128, 128], or 0
    pub intermediate: u64,
    /// bf16 [B, T, HV, 128]
    pub out: u64,
    /// i32 [B] pool row per request, or [B, T] spec-decode slots (`serving.num_accepted` set), or 0 (row = b)
    pub state_indices: u64,
    /// B
    pub batch: i64,
    /// rows of the state pool; indices >= this are padding
    pub num_state_rows: i64,
    /// resolved output scale
    pub scale: f32,
    /// T
    pub seq_len: i32,
    /// H
    pub num_qk_heads: i32,
    /// HV
    pub num_v_heads: i32,
    /// serving modes; all zero = the definitions
    pub serving: ServingParams,
}

const _: () = {
    assert!(size_of::<RecurrentParams>() as u64 == params_size::RECURRENT);
    assert!(offset_of!(RecurrentParams, q) == 0);
    assert!(offset_of!(RecurrentParams, k) == 8);
    assert!(offset_of!(RecurrentParams, v) == 16);
    assert!(offset_of!(RecurrentParams, a) == 24);
    assert!(offset_of!(RecurrentParams, b) == 32);
    assert!(offset_of!(RecurrentParams, a_log) == 40);
    assert!(offset_of!(RecurrentParams, dt_bias) == 48);
    assert!(offset_of!(RecurrentParams, state) == 56);
    assert!(offset_of!(RecurrentParams, new_state) == 64);
    assert!(offset_of!(RecurrentParams, intermediate) == 72);
    assert!(offset_of!(RecurrentParams, out) == 80);
    assert!(offset_of!(RecurrentParams, state_indices) == 88);
    assert!(offset_of!(RecurrentParams, batch) == 96);
    assert!(offset_of!(RecurrentParams, num_state_rows) == 104);
    assert!(offset_of!(RecurrentParams, scale) == 112);
    assert!(offset_of!(RecurrentParams, seq_len) == 116);
    assert!(offset_of!(RecurrentParams, num_qk_heads) == 120);
    assert!(offset_of!(RecurrentParams, num_v_heads) == 124);
    assert!(offset_of!(RecurrentParams, serving) == 128);
};

/// `struct PrefillParams` of `kernels/prefill_fused/params.cuh` in its serving build (`GDN_SERVING`), 256 bytes.
/// The definition build's struct is the first 112 bytes (up to `lead_rows`): its kernels declare only those, so the
/// driver copies only those from this struct.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PrefillParams {
    /// bf16 [T, H, 128]
    pub q: u64,
    /// bf16 [T, H, 128]
    pub k: u64,
    /// bf16 [T, HV, 128]
    pub v: u64,
    /// bf16 [T, HV], or 0 (precomputed gates)
    pub a: u64,
    /// bf16 [T, HV], or 0 (precomputed gates)
    pub b: u64,
    /// f32 [HV], or 0 (precomputed gates)
    pub a_log: u64,
    /// f32 [HV], or 0 (precomputed gates)
    pub dt_bias: u64,
    /// i64 (i32 with `sv::CU_I32`) [N+1], device memory
    pub cu_seqlens: u64,
    /// f32|bf16 [rows, HV, 128, 128] in the call's layout, or 0 (zeros)
    pub state: u64,
    /// same dtype and layout as state: row n per sequence, or the pool itself (pool mode)
    pub new_state: u64,
    /// bf16 [T, HV, 128]
    pub out: u64,
    /// N
    pub num_seqs: i64,
    /// resolved output scale
    pub scale: f32,
    /// H
    pub num_q_heads: i32,
    /// HV
    pub num_v_heads: i32,
    /// min(T, 16): token rows that exist in q/k/v/a/b whatever `cu_seqlens` says, so that sequence 0's first
    /// chunk can be loaded before `cu_seqlens` arrives (0 disables that)
    pub lead_rows: i32,
    /// rows of `state` (the pool's in pool mode): a pool index >= this is padding
    pub num_state_rows: i64,
    /// the serving modes (zero: the definition mode)
    pub serving: ServingParams,
}

const _: () = {
    assert!(size_of::<PrefillParams>() as u64 == params_size::PREFILL_SV);
    assert!(offset_of!(PrefillParams, num_state_rows) as u64 == params_size::PREFILL);
    assert!(offset_of!(PrefillParams, q) == 0);
    assert!(offset_of!(PrefillParams, k) == 8);
    assert!(offset_of!(PrefillParams, v) == 16);
    assert!(offset_of!(PrefillParams, a) == 24);
    assert!(offset_of!(PrefillParams, b) == 32);
    assert!(offset_of!(PrefillParams, a_log) == 40);
    assert!(offset_of!(PrefillParams, dt_bias) == 48);
    assert!(offset_of!(PrefillParams, cu_seqlens) == 56);
    assert!(offset_of!(PrefillParams, state) == 64);
    assert!(offset_of!(PrefillParams, new_state) == 72);
    assert!(offset_of!(PrefillParams, out) == 80);
    assert!(offset_of!(PrefillParams, num_seqs) == 88);
    assert!(offset_of!(PrefillParams, scale) == 96);
    assert!(offset_of!(PrefillParams, num_q_heads) == 100);
    assert!(offset_of!(PrefillParams, num_v_heads) == 104);
    assert!(offset_of!(PrefillParams, lead_rows) == 108);
    assert!(offset_of!(PrefillParams, num_state_rows) == 112);
    assert!(offset_of!(PrefillParams, serving) == 120);
};

/// `struct Prefill64Params` of `kernels/prefill_chunk64/params.cuh` (every kernel of the chunk64 and cp prefill plans)
/// in its serving build, 272 bytes; the definition build's is the first 128 bytes (up to `seg_chunks`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Prefill64Params {
    /// bf16 [T, H, 128]
    pub q: u64,
    /// bf16 [T, H, 128]
    pub k: u64,
    /// bf16 [T, HV, 128]
    pub v: u64,
    /// bf16 [T, HV], or 0 (precomputed gates)
    pub a: u64,
    /// bf16 [T, HV], or 0 (precomputed gates)
    pub b: u64,
    /// f32 [HV], or 0 (precomputed gates)
    pub a_log: u64,
    /// f32 [HV], or 0 (precomputed gates)
    pub dt_bias: u64,
    /// i64 (i32 with `sv::CU_I32`) [N+1], device memory
    pub cu_seqlens: u64,
    /// f32|bf16 [rows, HV, 128, 128] in the call's layout (dtype by walk variant), or 0 (zeros)
    pub state: u64,
    /// same dtype and layout as state: row n per sequence, or the pool itself (pool mode)
    pub new_state: u64,
    /// bf16 [T, HV, 128]
    pub out: u64,
    /// device scratch of at least the plan's bytes (`plan::prefill::workspace::prefill64_workspace_bytes` for chunk64,
    /// `prefill64_cp_workspace_bytes` for cp), 256-byte aligned
    pub workspace: u64,
    /// N
    pub num_seqs: i64,
    /// T (q.shape[0], known on the host: no device read)
    pub total_tokens: i64,
    /// resolved output scale (never 0)
    pub scale: f32,
    /// H
    pub num_q_heads: i32,
    /// HV (a multiple of H; need not be even)
    pub num_v_heads: i32,
    /// context-parallel kernels: chunks per segment L >= 1 (the prep and the plain walk ignore it; 0)
    pub seg_chunks: i32,
    /// rows of `state` (the pool's in pool mode): a pool index >= this is padding
    pub num_state_rows: i64,
    /// the serving modes (zero: the definition mode)
    pub serving: ServingParams,
}

const _: () = {
    assert!(size_of::<Prefill64Params>() as u64 == params_size::PREFILL64_SV);
    assert!(offset_of!(Prefill64Params, num_state_rows) as u64 == params_size::PREFILL64);
    assert!(std::mem::align_of::<Prefill64Params>() == 8);
    assert!(offset_of!(Prefill64Params, q) == 0);
    assert!(offset_of!(Prefill64Params, k) == 8);
    assert!(offset_of!(Prefill64Params, v) == 16);
    assert!(offset_of!(Prefill64Params, a) == 24);
    assert!(offset_of!(Prefill64Params, b) == 32);
    assert!(offset_of!(Prefill64Params, a_log) == 40);
    assert!(offset_of!(Prefill64Params, dt_bias) == 48);
    assert!(offset_of!(Prefill64Params, cu_seqlens) == 56);
    assert!(offset_of!(Prefill64Params, state) == 64);
    assert!(offset_of!(Prefill64Params, new_state) == 72);
    assert!(offset_of!(Prefill64Params, out) == 80);
    assert!(offset_of!(Prefill64Params, workspace) == 88);
    assert!(offset_of!(Prefill64Params, num_seqs) == 96);
    assert!(offset_of!(Prefill64Params, total_tokens) == 104);
    assert!(offset_of!(Prefill64Params, scale) == 112);
    assert!(offset_of!(Prefill64Params, num_q_heads) == 116);
    assert!(offset_of!(Prefill64Params, num_v_heads) == 120);
    assert!(offset_of!(Prefill64Params, seg_chunks) == 124);
    assert!(offset_of!(Prefill64Params, num_state_rows) == 128);
    assert!(offset_of!(Prefill64Params, serving) == 136);
};

/// `struct PrefillPlanParams` of `kernels/prefill_fused`'s device-plan builds (`GDN_DEVICE_PLAN`): `run_below` and
/// `run_from`, then the params (the fused kernel runs the call only when its longest sequence X has
/// run_from <= X < run_below tokens; `run_below` < 0: never). The thresholds come first so that one struct serves both
/// builds: the definition build reads 128 bytes (the thresholds and the 112-byte params), the serving build 272.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PrefillPlanParams {
    pub run_below: i64,
    pub run_from: i64,
    pub p: PrefillParams,
}

const _: () = {
    assert!(size_of::<PrefillPlanParams>() as u64 == params_size::PREFILL_PLAN_SV);
    assert!(offset_of!(PrefillPlanParams, run_below) == 0);
    assert!(offset_of!(PrefillPlanParams, run_from) == 8);
    assert!(offset_of!(PrefillPlanParams, p) == 16);
    assert!(16 + params_size::PREFILL == params_size::PREFILL_PLAN);
};

/// `struct Prefill64PlanParams` of `kernels/prefill_chunk64`'s device-plan builds: the thresholds the longest
/// sequence's length X is compared with (tokens; i64::MAX: never): X < `plan_from`, these launches exit;
/// < `plan_cp_from`, chunk64; else cp with L from `plan_cp_l_lo` at X = plan_cp_from, linearly in X, to
/// `plan_cp_l_hi` at X = T (`plan::prefill::Thresholds::seg_chunks_at`), then the params (with `seg_chunks` = 0).
/// The launches after the prep are persistent (`plan::prefill::device::launched_ctas`): `claimed` points
/// at their item counters (`plan::prefill::workspace::DP_COUNTER_BYTES` at the workspace's end; the prep zeroes them) and
/// `vgrid[i]` is launch i's grid as the host-planned kernels would launch it, in the order of `DP_LAUNCHES`.
/// 368 bytes; the definition build reads the first 224 (96 + its 128-byte params).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Prefill64PlanParams {
    pub plan_from: i64,
    pub plan_cp_from: i64,
    pub plan_cp_l_lo: i32,
    pub plan_cp_l_hi: i32,
    pub claimed: u64,
    pub vgrid: [[u32; 3]; DP_LAUNCHES],
    pub pad: u32,
    pub p: Prefill64Params,
}

const _: () = {
    assert!(size_of::<Prefill64PlanParams>() as u64 == params_size::PREFILL64_PLAN_SV);
    assert!(offset_of!(Prefill64PlanParams, plan_from) == 0);
    assert!(offset_of!(Prefill64PlanParams, plan_cp_from) == 8);
    assert!(offset_of!(Prefill64PlanParams, plan_cp_l_lo) == 16);
    assert!(offset_of!(Prefill64PlanParams, plan_cp_l_hi) == 20);
    assert!(offset_of!(Prefill64PlanParams, claimed) == 24);
    assert!(offset_of!(Prefill64PlanParams, vgrid) == 32);
    assert!(offset_of!(Prefill64PlanParams, p) == 96);
    assert!(96 + params_size::PREFILL64 == params_size::PREFILL64_PLAN);
};

/// The `static_assert(sizeof(...))` each .cu file must carry, checked against the embedded sources by the
/// tests: (source file, the exact assertion text's start).
pub const CUDA_SIZE_ASSERTS: &[(&str, &str)] = &[
    (
        "recurrent.cu",
        "static_assert(sizeof(RecurrentParams) == 264",
    ),
    // the kernels' params.cuh files state their sizes in comments; the registry appends a size check of every
    // params struct to each compile (`registry::MODULE_CONSTANTS`), so a mismatch fails the compile anyway.
];
