//! The serving-mode arguments of a launch ([`ServingArgs`]): which modes are on, their tensors' device pointers,
//! their validation (alignment, option ranges, the activation views) and the kernels' serving block built from
//! them ([`ServingArgs::params`]).

use crate::abi::checks::{bad, need, opt, to_i32, VEC_ALIGN};
use crate::abi::params::{sv, ServingParams, ACT_K, ACT_OUT, ACT_Q, ACT_V};
use crate::kernels::registry::StateDtype;
use gdn_core::{GateMode, PadRule, Result, StateLayout};

/// The serving-mode arguments of one call (all zero / false: definition mode). Shared by both families.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ServingArgs {
    pub gates: GateMode,
    /// f32 `g` or `alpha` (by `gates`), 0 for raw gates.
    pub gate: u64,
    /// `beta`, 0 for raw gates.
    pub beta: u64,
    /// `beta` is 16-bit: bf16, or fp16 with `act_f16` (else f32).
    pub beta_bf16: bool,
    pub qk_l2norm: bool,
    pub layout: StateLayout,
    pub pad: PadRule,
    /// Decode / prefill pool rows (`state_indices`), or 0. (MTP's pool rows are `RecurrentArgs::state_indices`.)
    pub pool_indices: u64,
    pub index_i64: bool,
    /// i32 [N], or 0.
    pub has_initial: u64,
    /// MTP spec-decode slots: i32 [B] accepted tokens (then `state_indices` is i32 [B, T]), or 0.
    pub num_accepted: u64,
    /// Prefill checkpoints buffer, its row starts and the interval (0 = none).
    pub checkpoints: u64,
    pub checkpoints_f32: bool,
    pub checkpoint_starts: u64,
    pub checkpoint_starts_i32: bool,
    pub checkpoint_every: usize,
    /// Elements between state pool rows, 0 = dense (`HV·D·D`).
    pub state_row_stride: usize,
    /// Prefill `cu_seqlens` are i32.
    pub cu_i32: bool,
    /// (token, head) element strides of q, k, v, out (rows `abi::params::ACT_Q` … `ACT_OUT`), or None: dense
    /// `[tokens, heads, 128]`. The last dimension is contiguous.
    pub act_strides: Option<[[i64; 2]; 4]>,
    /// q, k, v, out, raw a / b and a 16-bit beta are fp16 (else bf16).
    pub act_f16: bool,
    /// The 16-bit state tensors are fp16 (else bf16); the bf16-state kernels run them.
    pub state_f16: bool,
}

impl ServingArgs {
    /// Whether any serving capability is on (false: the definition mode, which runs the definition builds). The
    /// dtype and padding options of absent tensors (pool indices, checkpoints) change nothing a kernel does.
    pub fn is_active(&self) -> bool {
        self.gates != GateMode::Raw
            || self.qk_l2norm
            || self.layout != StateLayout::default()
            || self.pool_indices != 0
            || self.has_initial != 0
            || self.num_accepted != 0
            || self.checkpoint_every > 0
            || self.state_row_stride != 0
            || self.cu_i32
            || self.act_strides.is_some()
            || self.act_f16
            || self.state_f16
    }

    /// Pointer alignment and option ranges.
    pub fn validate(&self, dense_row: usize) -> Result<()> {
        if self.gates != GateMode::Raw {
            need(gate_tensor(self.gates), self.gate, 4)?;
            need("beta", self.beta, if self.beta_bf16 { 2 } else { 4 })?;
        }
        opt(
            "state_indices",
            self.pool_indices,
            if self.index_i64 { 8 } else { 4 },
        )?;
        opt("has_initial_state", self.has_initial, 4)?;
        opt("num_accepted_tokens", self.num_accepted, 4)?;
        if self.checkpoint_every > 0 {
            if !self
                .checkpoint_every
                .is_multiple_of(gdn_core::serving::CHECKPOINT_GRANULE)
            {
                return Err(bad(
                    "checkpoint_every",
                    format!(
                        "must be a multiple of 64 tokens, got {}",
                        self.checkpoint_every
                    ),
                ));
            }
            to_i32("checkpoint_every", self.checkpoint_every)?;
            need("checkpoints", self.checkpoints, VEC_ALIGN)?;
            need(
                "checkpoint_cu_starts",
                self.checkpoint_starts,
                if self.checkpoint_starts_i32 { 4 } else { 8 },
            )?;
        }
        if self.state_row_stride != 0 {
            if self.state_row_stride < dense_row {
                return Err(bad(
                    "state",
                    format!(
                        "row stride {} elements is smaller than one state row ({dense_row})",
                        self.state_row_stride
                    ),
                ));
            }
            if !self.state_row_stride.is_multiple_of(8) {
                return Err(bad(
                    "state",
                    format!(
                        "row stride {} elements breaks 16-byte alignment of the rows",
                        self.state_row_stride
                    ),
                ));
            }
        }
        Ok(())
    }

    pub fn params(&self) -> ServingParams {
        let mut flags = match self.gates {
            GateMode::Raw => 0,
            GateMode::Log => sv::GATE_LOG,
            GateMode::Linear => sv::GATE_LINEAR,
        };
        for (on, bit) in [
            (self.beta_bf16 && self.gates != GateMode::Raw, sv::BETA_BF16),
            (self.qk_l2norm, sv::QK_NORM),
            (self.layout == StateLayout::KFirst, sv::KFIRST),
            (self.pad == PadRule::NullSlot, sv::PAD_NULL),
            (self.index_i64, sv::INDEX_I64),
            (self.cu_i32, sv::CU_I32),
            (self.checkpoints_f32, sv::CKPT_F32),
            (self.checkpoint_starts_i32, sv::CKPT_START_I32),
            (self.act_strides.is_some(), sv::STRIDED),
            (self.act_f16, sv::ACT_F16),
            (self.state_f16, sv::STATE_F16),
        ] {
            if on {
                flags |= bit;
            }
        }
        ServingParams {
            gate: self.gate,
            beta: self.beta,
            pool_indices: self.pool_indices,
            has_initial: self.has_initial,
            num_accepted: self.num_accepted,
            checkpoints: self.checkpoints,
            checkpoint_starts: self.checkpoint_starts,
            state_row_stride: self.state_row_stride as i64,
            flags,
            checkpoint_every: self.checkpoint_every as i32,
            act_stride: self.act_strides.unwrap_or_default(),
        }
    }

    /// fp16 state tensors run the 16-bit-state kernels (`state_dtype` BF16), which convert at load and store.
    pub(crate) fn check_state_f16(&self, state_dtype: Option<StateDtype>) -> Result<()> {
        if self.state_f16 && state_dtype != Some(StateDtype::BF16) {
            return Err(bad(
                "state",
                "fp16 state tensors (state_f16) run the 16-bit-state kernels: the state dtype must be the \
                 16-bit one (StateDtype::BF16)",
            ));
        }
        Ok(())
    }

    /// The activation views (`act_strides`), when given, for a call of `tokens` tokens with `q_heads` q/k
    /// heads and `v_heads` value heads of `head_size` elements ([`check_act_view`] on each).
    pub fn validate_act(
        &self,
        tokens: usize,
        q_heads: usize,
        v_heads: usize,
        head_size: usize,
    ) -> Result<()> {
        let Some(s) = self.act_strides else {
            return Ok(());
        };
        for (name, row, heads) in [
            ("q", ACT_Q, q_heads),
            ("k", ACT_K, q_heads),
            ("v", ACT_V, v_heads),
            ("output", ACT_OUT, v_heads),
        ] {
            check_act_view(name, s[row], tokens, heads, head_size, row == ACT_OUT)?;
        }
        Ok(())
    }
}

/// One activation view (q, k, v or the output) the kernels can take: `[token, head]` element strides, rows of
/// `head_size` contiguous elements. Each stride is non-negative and a multiple of 8 elements (16-byte rows,
/// like the base pointer), and the farthest element's offset fits 64 bits (the kernels form every offset in
/// 64 bits). Inputs may overlap (a head stride of 0 reads one head for all). A view the kernels write
/// (`written`: the output) must not overlap itself: token-major (head stride >= `head_size`, token stride >=
/// `heads` x head stride) or head-major (token stride >= `head_size`, head stride >= `tokens` x token stride);
/// a stride of an axis of length 1 is never used.
pub fn check_act_view(
    tensor: &str,
    [token, head]: [i64; 2],
    tokens: usize,
    heads: usize,
    head_size: usize,
    written: bool,
) -> Result<()> {
    for (what, s) in [("token", token), ("head", head)] {
        if s < 0 {
            return Err(bad(
                tensor,
                format!("{what} stride {s} elements is negative"),
            ));
        }
        if s % 8 != 0 {
            return Err(bad(
                tensor,
                format!("{what} stride {s} elements breaks 16-byte alignment (a multiple of 8 elements)"),
            ));
        }
    }
    let (t, h, d) = (tokens as i128, heads as i128, head_size as i128);
    if t == 0 || h == 0 {
        return Ok(());
    }
    let last = (t - 1) * token as i128 + (h - 1) * head as i128 + d;
    if last > i64::MAX as i128 {
        return Err(bad(
            tensor,
            format!("the view spans {last} elements, past the kernels' 64-bit offsets"),
        ));
    }
    if written {
        // `n_inner` rows `inner` apart, repeated `n_outer` times `outer` apart, never overlap
        let nested = |inner: i128, n_inner: i128, outer: i128, n_outer: i128| {
            let block = if n_inner == 1 { d } else { n_inner * inner };
            (n_inner == 1 || inner >= d) && (n_outer == 1 || outer >= block)
        };
        let (ts, hs) = (token as i128, head as i128);
        if !(nested(hs, h, ts, t) || nested(ts, t, hs, h)) {
            return Err(bad(
                tensor,
                format!(
                    "rows overlap: token stride {token}, head stride {head} elements for {tokens} tokens of \
                     {heads} heads of {head_size}; a written view needs head stride >= {head_size} and token \
                     stride >= heads x head stride (or token stride >= {head_size} and head stride >= tokens \
                     x token stride)"
                ),
            ));
        }
    }
    Ok(())
}

fn gate_tensor(g: GateMode) -> &'static str {
    match g {
        GateMode::Linear => "alpha",
        _ => "g",
    }
}
