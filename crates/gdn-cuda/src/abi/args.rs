//! The raw launch API's arguments: device pointers (u64, 0 = absent) and sizes, their validation (required
//! pointers present, alignment, resolved scale, 32-bit fields, workspace), the params structs built from
//! them, and the one builder from a validated gdn_core `Problem` plus device pointers ([`Args::for_problem`]),
//! which the CUDA backend and the Python binding both use.

pub(crate) use crate::abi::checks::bad;
use crate::abi::checks::{check_scale, need, opt, to_i32, VEC_ALIGN};
use crate::abi::params::{Prefill64Params, PrefillParams, RecurrentParams};
pub use crate::abi::serving_args::{check_act_view, ServingArgs};
use crate::kernels::registry::{self, StateDtype};
use crate::plan::prefill::PrefillPlan;
use crate::plan::Shape;
use gdn_core::{DType, GateMode, MtpMode, Op, PadRule, Problem, Result, StateLayout};

impl ServingArgs {
    /// The serving arguments of a validated problem whose tensors are at `d`.
    pub fn for_problem(p: &Problem, d: &DevicePtrs) -> ServingArgs {
        ServingArgs {
            gates: p.gates,
            gate: d.gate,
            beta: d.beta,
            // a 16-bit beta: bf16, or fp16 with fp16 activations (its dtype is theirs: validated)
            beta_bf16: p.gates != GateMode::Raw && p.beta_dtype.is_half(),
            qk_l2norm: p.serving.qk_l2norm,
            layout: p.serving.layout,
            pad: p.serving.pad,
            pool_indices: if p.pool { d.pool_indices } else { 0 },
            index_i64: p.index_dtype == DType::I64,
            has_initial: d.has_initial,
            num_accepted: d.num_accepted,
            checkpoints: d.checkpoints,
            checkpoints_f32: p.checkpoint_rows > 0
                && p.checkpoint_dtype == DType::F32
                && p.state_out_dtype() != DType::F32,
            checkpoint_starts: d.checkpoint_starts,
            checkpoint_starts_i32: d.checkpoint_starts_i32,
            checkpoint_every: if p.checkpoint_rows > 0 {
                p.serving.checkpoint_every
            } else {
                0
            },
            state_row_stride: d.state_row_stride,
            cu_i32: p.cu_dtype == DType::I32,
            act_strides: p
                .act_views
                .map(|v| v.strides().map(|r| r.map(|x| x as i64))),
            act_f16: p.act_dtype == DType::F16,
            // every 16-bit state tensor of a call has the state's dtype (validated)
            state_f16: p.state_out_dtype() == DType::F16,
        }
    }
}

/// Decode (T = 1) and MTP (T >= 1) arguments: `RecurrentParams` plus what the policy needs.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RecurrentArgs {
    pub q: u64,
    pub k: u64,
    pub v: u64,
    pub a: u64,
    pub b: u64,
    pub a_log: u64,
    pub dt_bias: u64,
    /// 0 = zero initial state.
    pub state: u64,
    /// 0 = final state not written; may equal `state` (in place).
    pub new_state: u64,
    /// 0 = per-token states not written.
    pub intermediate: u64,
    pub out: u64,
    /// 0 = request b uses state row b.
    pub state_indices: u64,
    pub batch: usize,
    pub seq_len: usize,
    pub num_state_rows: usize,
    pub num_q_heads: usize,
    pub num_v_heads: usize,
    pub head_size: usize,
    /// Resolved (never 0).
    pub scale: f32,
    pub state_dtype: Option<StateDtype>,
    pub serving: ServingArgs,
}

/// Prefill arguments: `PrefillParams` plus what the policy needs.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PrefillArgs {
    pub q: u64,
    pub k: u64,
    pub v: u64,
    pub a: u64,
    pub b: u64,
    pub a_log: u64,
    pub dt_bias: u64,
    /// i64 [N+1] in device memory (i32 with `serving.cu_i32`).
    pub cu_seqlens: u64,
    /// 0 = zero initial state; the pool with `serving.pool_indices`.
    pub state: u64,
    /// Row n per sequence; the pool itself (= `state`) with `serving.pool_indices`.
    pub new_state: u64,
    pub out: u64,
    /// Rows of `state` (the pool's with `serving.pool_indices`: an index >= this is padding).
    pub num_state_rows: usize,
    /// Device scratch for the chunk64 plan (`KernelSet::prefill_workspace_bytes`; 256-byte aligned), or 0
    /// when the plan needs none. Not read by the fused plan.
    pub workspace: u64,
    /// Bytes at `workspace`.
    pub workspace_bytes: usize,
    pub num_seqs: usize,
    pub total_tokens: usize,
    /// Tokens of the longest sequence when the caller knows it on the host, 0 = unknown. Steers the plan
    /// choice only (`plan::Shape::max_seq_len`): a wrong value costs speed, never correctness.
    pub max_seq_len: usize,
    pub num_q_heads: usize,
    pub num_v_heads: usize,
    pub head_size: usize,
    pub scale: f32,
    pub state_dtype: Option<StateDtype>,
    pub serving: ServingArgs,
}

impl RecurrentArgs {
    pub fn shape(&self) -> Shape {
        Shape {
            // T = 1 runs the decode kernels (which also honour indices and intermediate states)
            op: if self.seq_len == 1 {
                Op::Decode
            } else {
                Op::Mtp
            },
            num_q_heads: self.num_q_heads,
            num_v_heads: self.num_v_heads,
            head_size: self.head_size,
            num_seqs: self.batch,
            seq_len: self.seq_len,
            total_tokens: self.batch * self.seq_len,
            max_seq_len: self.seq_len,
            state: self.state_dtype.unwrap_or(StateDtype::F32),
        }
    }

    /// Every argument the kernels rely on: required pointers present and aligned, optional ones aligned,
    /// the scale resolved, enough state rows, the 32-bit fields in range, and serving options the kernels
    /// implement (refused by name otherwise).
    pub fn validate(&self) -> Result<()> {
        for (n, p) in [
            ("q", self.q),
            ("k", self.k),
            ("v", self.v),
            ("output", self.out),
        ] {
            need(n, p, VEC_ALIGN)?;
        }
        // precomputed gates replace a, b, A_log and dt_bias: the kernels then never read them
        if self.serving.gates == GateMode::Raw {
            need("a", self.a, 2)?;
            need("b", self.b, 2)?;
            need("A_log", self.a_log, 4)?;
            need("dt_bias", self.dt_bias, 4)?;
        }
        opt("state", self.state, VEC_ALIGN)?;
        opt("new_state", self.new_state, VEC_ALIGN)?;
        opt("intermediate_states_buffer", self.intermediate, VEC_ALIGN)?;
        opt("initial_state_indices", self.state_indices, 4)?;
        check_scale(self.scale)?;
        if (self.state != 0 || self.new_state != 0) && self.state_dtype.is_none() {
            return Err(bad("state", "state pointers given without a state dtype"));
        }
        let sv = &self.serving;
        self.validate_serving()?;
        sv.check_state_f16(self.state_dtype)?;
        sv.validate(self.num_v_heads * self.head_size * self.head_size)?;
        sv.validate_act(
            self.batch.saturating_mul(self.seq_len),
            self.num_q_heads,
            self.num_v_heads,
            self.head_size,
        )?;
        if self.state_indices == 0 && sv.pool_indices == 0 && self.num_state_rows < self.batch {
            return Err(bad(
                "state",
                format!(
                    "{} rows for {} requests (without indices request b uses row b)",
                    self.num_state_rows, self.batch
                ),
            ));
        }
        to_i32("seq_len", self.seq_len)?;
        to_i32("num_q_heads", self.num_q_heads)?;
        to_i32("num_v_heads", self.num_v_heads)?;
        Ok(())
    }

    /// The build of recurrent.cu's kernels this call needs: the definition kernels read no serving field, so
    /// any serving mode that changes what the kernels compute selects a serving build (K-first state tensors:
    /// the `_kf` kernels). Flags that only describe an absent tensor (int64 indices without a pool, bf16
    /// beta with raw gates) do not count.
    pub fn build(&self) -> crate::plan::decode::Build {
        use crate::plan::decode::Build;
        let sv = &self.serving;
        if sv.layout == StateLayout::KFirst {
            Build::KFirst
        } else if sv.is_active() || sv.pad != PadRule::Negative {
            // (the pad rule also applies to MTP's definition-mode state_indices; checkpoints and int32 offsets,
            // the prefill-only modes in is_active, are refused for decode / MTP by validate_serving)
            Build::Serving
        } else {
            Build::Definition
        }
    }

    /// The serving options decode / MTP cannot take, and the combinations that would be ambiguous.
    fn validate_serving(&self) -> Result<()> {
        let sv = &self.serving;
        if sv.checkpoint_every > 0 || sv.checkpoints != 0 || sv.checkpoint_starts != 0 {
            return Err(bad(
                "checkpoint_every",
                "checkpoints are written by prefill only; decode and MTP take none",
            ));
        }
        if sv.cu_i32 {
            return Err(bad(
                "cu_seqlens",
                "decode and MTP take no cu_seqlens (int32 offsets are a prefill option)",
            ));
        }
        if sv.pool_indices != 0 && self.state_indices != 0 {
            return Err(bad(
                "state_indices",
                "pool rows given twice: the serving pool indices and initial_state_indices",
            ));
        }
        if sv.num_accepted != 0 {
            if self.state_indices == 0 {
                return Err(bad(
                    "initial_state_indices",
                    "spec-decode slots (num_accepted_tokens) need the [B, T] slot indices",
                ));
            }
            if self.intermediate != 0 {
                return Err(bad(
                    "intermediate_states_buffer",
                    "spec-decode slots write each token's state to the pool: give slots or an intermediate buffer, not both",
                ));
            }
            if self.new_state == 0 {
                return Err(bad(
                    "new_state",
                    "spec-decode slots write each token's state into the pool: new_state (the pool) is required",
                ));
            }
        }
        Ok(())
    }

    pub fn params(&self) -> RecurrentParams {
        RecurrentParams {
            q: self.q,
            k: self.k,
            v: self.v,
            a: self.a,
            b: self.b,
            a_log: self.a_log,
            dt_bias: self.dt_bias,
            state: self.state,
            new_state: self.new_state,
            intermediate: self.intermediate,
            out: self.out,
            state_indices: self.state_indices,
            batch: self.batch as i64,
            num_state_rows: self.num_state_rows as i64,
            scale: self.scale,
            seq_len: self.seq_len as i32,
            num_qk_heads: self.num_q_heads as i32,
            num_v_heads: self.num_v_heads as i32,
            serving: self.serving.params(),
        }
    }
}

impl PrefillArgs {
    pub fn shape(&self) -> Shape {
        Shape {
            op: Op::Prefill,
            num_q_heads: self.num_q_heads,
            num_v_heads: self.num_v_heads,
            head_size: self.head_size,
            num_seqs: self.num_seqs,
            seq_len: 0,
            total_tokens: self.total_tokens,
            max_seq_len: self.max_seq_len,
            state: self.state_dtype.unwrap_or(StateDtype::F32),
        }
    }

    /// As `RecurrentArgs::validate`; the token tensors are required only when there are tokens, the raw gate
    /// tensors only for raw gates, and `cu_seqlens`, `new_state` and the state dtype always. Serving: the
    /// serving tensors' pointers and options (`ServingArgs::validate`); a pool (`state_indices`) needs the
    /// pool as `state` and is updated in place (`new_state` = `state`); a row stride applies to a pool only;
    /// spec-decode slots are MTP's.
    pub fn validate(&self) -> Result<()> {
        let sv = &self.serving;
        let raw = sv.gates == GateMode::Raw;
        if self.total_tokens > 0 {
            for (n, p) in [
                ("q", self.q),
                ("k", self.k),
                ("v", self.v),
                ("output", self.out),
            ] {
                need(n, p, VEC_ALIGN)?;
            }
            if raw {
                need("a", self.a, 2)?;
                need("b", self.b, 2)?;
            }
        }
        if raw {
            need("A_log", self.a_log, 4)?;
            need("dt_bias", self.dt_bias, 4)?;
        }
        need("cu_seqlens", self.cu_seqlens, if sv.cu_i32 { 4 } else { 8 })?;
        // the kernels read an int64 offset's low 32-bit word (`cu_at` in the prefill kernels' params.cuh)
        to_i32("total_tokens (cu_seqlens offsets)", self.total_tokens)?;
        need("new_state", self.new_state, VEC_ALIGN)?;
        opt("state", self.state, VEC_ALIGN)?;
        check_scale(self.scale)?;
        if self.state_dtype.is_none() {
            return Err(bad("new_state", "prefill writes new_state: give its dtype"));
        }
        to_i32("num_q_heads", self.num_q_heads)?;
        to_i32("num_v_heads", self.num_v_heads)?;
        sv.check_state_f16(self.state_dtype)?;
        sv.validate(self.num_v_heads * self.head_size * self.head_size)?;
        sv.validate_act(
            self.total_tokens,
            self.num_q_heads,
            self.num_v_heads,
            self.head_size,
        )?;
        if sv.num_accepted != 0 {
            return Err(bad(
                "num_accepted_tokens",
                "spec-decode slots are MTP's; prefill takes state_indices",
            ));
        }
        if sv.pool_indices != 0 {
            if self.state == 0 {
                return Err(bad(
                    "state",
                    "state_indices index a state pool: give the pool as state",
                ));
            }
            if self.new_state != self.state {
                return Err(bad(
                    "new_state",
                    "a state pool is updated in place: new_state must be the pool (state)",
                ));
            }
            i64::try_from(self.num_state_rows)
                .map_err(|_| bad("state", "pool rows do not fit the kernel's 64-bit field"))?;
        } else if sv.state_row_stride != 0 {
            return Err(bad(
                "state",
                "a row stride applies to a state pool (state_indices)",
            ));
        }
        Ok(())
    }

    /// What a plan adds to `validate`: the fused kernels copy 16-bit gate inputs as aligned 4-byte pairs (so a
    /// 16-bit `beta`, bf16 or fp16, must be 4-byte aligned where a fused tile may run).
    pub fn validate_plan(&self, plan: &PrefillPlan) -> Result<()> {
        let sv = &self.serving;
        let fused = match plan {
            PrefillPlan::Fused { .. } => true,
            PrefillPlan::Device(d) => d.fused.is_some() || d.fused_skew.is_some(),
            _ => false,
        };
        if fused && sv.gates != GateMode::Raw && sv.beta_bf16 {
            need("beta", sv.beta, 4)?;
        }
        Ok(())
    }

    pub fn params(&self) -> PrefillParams {
        PrefillParams {
            q: self.q,
            k: self.k,
            v: self.v,
            a: self.a,
            b: self.b,
            a_log: self.a_log,
            dt_bias: self.dt_bias,
            cu_seqlens: self.cu_seqlens,
            state: self.state,
            new_state: self.new_state,
            out: self.out,
            num_seqs: self.num_seqs as i64,
            scale: self.scale,
            num_q_heads: self.num_q_heads as i32,
            num_v_heads: self.num_v_heads as i32,
            lead_rows: self.total_tokens.min(registry::prefill::CHUNK) as i32,
            num_state_rows: self.num_state_rows as i64,
            serving: self.serving.params(),
        }
    }

    pub fn params64(&self) -> Prefill64Params {
        Prefill64Params {
            q: self.q,
            k: self.k,
            v: self.v,
            a: self.a,
            b: self.b,
            a_log: self.a_log,
            dt_bias: self.dt_bias,
            cu_seqlens: self.cu_seqlens,
            state: self.state,
            new_state: self.new_state,
            out: self.out,
            workspace: self.workspace,
            num_seqs: self.num_seqs as i64,
            total_tokens: self.total_tokens as i64,
            scale: self.scale,
            num_q_heads: self.num_q_heads as i32,
            num_v_heads: self.num_v_heads as i32,
            seg_chunks: 0,
            num_state_rows: self.num_state_rows as i64,
            serving: self.serving.params(),
        }
    }

    /// The workspace a plan needs is present, aligned and large enough.
    pub fn validate_workspace(&self, plan: &PrefillPlan) -> Result<()> {
        let bytes = plan.workspace_bytes();
        if bytes == 0 {
            return Ok(());
        }
        need(
            "workspace",
            self.workspace,
            registry::prefill64::WORKSPACE_ALIGN,
        )?;
        if (self.workspace_bytes as u64) < bytes {
            return Err(bad(
                "workspace",
                format!(
                    "{} bytes given; the {} plan needs {bytes} bytes",
                    self.workspace_bytes,
                    plan.kind().name()
                ),
            ));
        }
        Ok(())
    }
}

/// The device pointers of one call, by the definition's tensor roles (0 = absent).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct DevicePtrs {
    pub q: u64,
    pub k: u64,
    pub v: u64,
    pub a: u64,
    pub b: u64,
    pub a_log: u64,
    pub dt_bias: u64,
    /// The initial state (decode, prefill) or the state pool (MTP), or 0.
    pub state: u64,
    /// Where decode and prefill write the final state. Not read for MTP: serving mode updates the pool
    /// in place (`new_state` = `state`), definition mode leaves it unwritten.
    pub new_state: u64,
    /// MTP / decode per-token states, or 0.
    pub intermediate: u64,
    pub out: u64,
    /// Decode / MTP pool rows per request, or 0.
    pub state_indices: u64,
    /// Prefill: i64 [N+1].
    pub cu_seqlens: u64,
    /// Prefill: the plan's workspace and its bytes (0, 0 = none).
    pub workspace: u64,
    pub workspace_bytes: usize,
    /// Serving tensors (0 = absent): precomputed gates, decode/prefill pool rows, has_initial_state, MTP
    /// accepted tokens, prefill checkpoints and their row starts.
    pub gate: u64,
    pub beta: u64,
    pub pool_indices: u64,
    pub has_initial: u64,
    pub num_accepted: u64,
    pub checkpoints: u64,
    pub checkpoint_starts: u64,
    pub checkpoint_starts_i32: bool,
    /// Elements between state pool rows (0 = dense).
    pub state_row_stride: usize,
}

/// One call's launch arguments.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Args {
    Recurrent(RecurrentArgs),
    Prefill(PrefillArgs),
}

impl Args {
    /// The call's serving arguments.
    pub fn serving_mut(&mut self) -> &mut ServingArgs {
        match self {
            Args::Recurrent(a) => &mut a.serving,
            Args::Prefill(a) => &mut a.serving,
        }
    }

    /// The arguments of a validated problem whose tensors are at `d`: sizes, heads, scale and state dtype
    /// from `p`; the state destination by operation and MTP mode (see `DevicePtrs::new_state`).
    pub fn for_problem(p: &Problem, d: &DevicePtrs) -> Args {
        let h = &p.def.heads;
        let state_dtype = Some(state_dtype(p));
        match p.def.op {
            Op::Prefill => Args::Prefill(PrefillArgs {
                q: d.q,
                k: d.k,
                v: d.v,
                a: d.a,
                b: d.b,
                a_log: d.a_log,
                dt_bias: d.dt_bias,
                cu_seqlens: d.cu_seqlens,
                state: d.state,
                new_state: d.new_state,
                out: d.out,
                num_state_rows: p.dims.state_rows,
                workspace: d.workspace,
                workspace_bytes: d.workspace_bytes,
                num_seqs: p.dims.num_seqs,
                total_tokens: p.dims.total_tokens,
                max_seq_len: p.dims.max_seq_len.unwrap_or(0),
                num_q_heads: h.num_q_heads,
                num_v_heads: h.num_v_heads,
                head_size: h.head_size,
                scale: p.scale,
                state_dtype,
                serving: ServingArgs::for_problem(p, d),
            }),
            Op::Decode | Op::Mtp => Args::Recurrent(RecurrentArgs {
                q: d.q,
                k: d.k,
                v: d.v,
                a: d.a,
                b: d.b,
                a_log: d.a_log,
                dt_bias: d.dt_bias,
                state: d.state,
                new_state: match (p.def.op, p.mtp_mode) {
                    (Op::Decode, _) => d.new_state,
                    (_, MtpMode::Serving) => d.state, // in place
                    (_, MtpMode::Definition) => 0,    // pool not updated
                },
                intermediate: d.intermediate,
                out: d.out,
                state_indices: d.state_indices,
                batch: p.dims.num_seqs,
                seq_len: p.dims.seq_len,
                num_state_rows: p.dims.state_rows,
                num_q_heads: h.num_q_heads,
                num_v_heads: h.num_v_heads,
                head_size: h.head_size,
                scale: p.scale,
                state_dtype,
                serving: ServingArgs::for_problem(p, d),
            }),
        }
    }
}

/// The kernels' storage dtype of a problem's state: the 16-bit-state kernels (`StateDtype::BF16`) run both
/// 16-bit state dtypes, an fp16 state with `ServingArgs::state_f16` set (they convert at load and store).
pub fn state_dtype(p: &Problem) -> StateDtype {
    match p.state_out_dtype() {
        DType::BF16 | DType::F16 => StateDtype::BF16,
        _ => StateDtype::F32,
    }
}

/// The planner's view of a validated problem.
pub fn shape_of(p: &Problem) -> Shape {
    let h = &p.def.heads;
    Shape {
        op: p.def.op,
        num_q_heads: h.num_q_heads,
        num_v_heads: h.num_v_heads,
        head_size: h.head_size,
        num_seqs: p.dims.num_seqs,
        seq_len: p.dims.seq_len,
        total_tokens: p.dims.total_tokens,
        max_seq_len: p.dims.max_seq_len.unwrap_or(0),
        state: state_dtype(p),
    }
}
