//! A validated GDN problem: the definition, the bound sizes, and typed views of the input tensors.
//!
//! Validation happens here, once, before any backend does work: every input's presence, dtype (q, k, v, a, b
//! share one 16-bit dtype, bf16 or fp16; the state is f32, bf16 or fp16) and shape
//! (axes bound on first sight and checked everywhere else), `cu_seqlens` (starts at 0, non-decreasing, ends at
//! the token count), pool indices (in range; padding only where the mode allows it; no two requests writing the
//! same pool slot), the serving tensors ([`crate::serving`]) and `scale`. Errors name the tensor and the problem.
//!
//! All three operations share one flat model: `num_seqs` sequences whose tokens are rows of token-major q/k/v
//! (`seq_start(n)..seq_start(n+1)`), each reading one state row and (optionally) writing one.

use crate::definition::{Definition, Op, TensorSpec};
use crate::dtype::DType;
use crate::error::{GdnError, Result};
use crate::serving::{names, GateMode, PadRule, Serving};
use crate::tensor::{Data, Tensor, TensorMap};
use std::borrow::Cow;
use std::collections::BTreeMap;

mod serving_checks;
mod types;
pub use serving_checks::int_values;
use serving_checks::{gate_mode, gate_name};
pub use types::{
    ActRef, ActViews, BetaRef, Dims, Inputs, MtpMode, Problem, RunOptions, StateRef, View,
};

impl Problem {
    /// Validates `tensors` against `def` and binds every axis. No backend work happens before this passes.
    pub fn from_tensors(
        def: &Definition,
        tensors: &TensorMap,
        opts: &RunOptions,
    ) -> Result<Problem> {
        let sv = opts.serving;
        let gates = gate_mode(tensors)?;
        let pool = tensors.contains_key(names::STATE_INDICES);
        if pool && def.op == Op::Mtp {
            return Err(GdnError::value(
                names::STATE_INDICES,
                "MTP takes its pool rows as initial_state_indices",
            ));
        }
        let spec_slots = def.op == Op::Mtp
            && tensors
                .get("initial_state_indices")
                .is_some_and(|t| t.shape.len() == 2);
        let mut axes: BTreeMap<&'static str, (usize, &'static str)> = BTreeMap::new();
        let mut state_dtype = None;
        let mut pool_rows = None;
        let mut intermediate = false;
        let mut scale_in = None;
        // q, k, v and the raw gates share one 16-bit dtype: q's (bf16 per the definitions, or fp16)
        let act_dtype = tensors
            .get("q")
            .map(Tensor::dtype)
            .filter(|d| d.is_half())
            .unwrap_or(DType::BF16);
        for s in def.inputs() {
            let raw_gate = matches!(s.name, "a" | "b" | "A_log" | "dt_bias");
            if raw_gate && gates != GateMode::Raw {
                if tensors.contains_key(s.name) {
                    return Err(GdnError::value(
                        s.name,
                        format!("precomputed gates ('{}') replace a, b, A_log and dt_bias: give one set", gate_name(gates)),
                    ));
                }
                continue;
            }
            let Some(t) = tensors.get(s.name) else {
                if s.optional || s.name == "scale" {
                    continue;
                }
                return Err(GdnError::Missing {
                    tensor: s.name.to_string(),
                });
            };
            check_dtype(&s, t, def)?;
            if s.dtype == DType::BF16 && t.dtype() != act_dtype {
                return Err(GdnError::DType {
                    tensor: s.name.to_string(),
                    expected: format!(
                        "{act_dtype} (the dtype of q: q, k, v, a and b share one dtype)"
                    ),
                    got: t.dtype().name().into(),
                });
            }
            if s.name == def.state_input() {
                state_dtype = Some(t.dtype());
            }
            if s.name == "intermediate_states_buffer" {
                intermediate = true;
            }
            match &s.shape {
                None => {
                    if t.numel() != 1 || t.shape.len() > 1 {
                        return Err(GdnError::shape(
                            s.name,
                            format!("must be a scalar, got shape {:?}", t.shape),
                        ));
                    }
                    scale_in = t.as_f32().map(|x| x[0]);
                }
                // a pool: its rows are not the batch
                Some(shape) if pool && s.name == def.state_input() => {
                    bind_shape(
                        def,
                        &s,
                        &["pool_size", shape[1], shape[2], shape[3]],
                        t,
                        &mut axes,
                    )?;
                    pool_rows = Some(t.shape[0]);
                }
                Some(_) if spec_slots && s.name == "initial_state_indices" => {
                    bind_shape(def, &s, &["batch_size", "seq_len"], t, &mut axes)?
                }
                Some(shape) => bind_shape(def, &s, shape, t, &mut axes)?,
            }
        }
        if pool && state_dtype.is_none() {
            return Err(GdnError::Missing {
                tensor: format!("{} (state_indices index a state pool)", def.state_input()),
            });
        }
        let ax = |a: &str| axes.get(a).map(|x| x.0);
        let dims = match def.op {
            Op::Decode => {
                let b = ax("batch_size").unwrap_or(0);
                Dims {
                    num_seqs: b,
                    seq_len: 1,
                    total_tokens: b,
                    state_rows: pool_rows.unwrap_or(b),
                    max_seq_len: Some(1),
                }
            }
            Op::Mtp => {
                let (b, t) = (ax("batch_size").unwrap_or(0), ax("seq_len").unwrap_or(0));
                if t < 2 {
                    return Err(GdnError::shape(
                        "q",
                        format!("MTP needs seq_len > 1, got {t}"),
                    ));
                }
                Dims {
                    num_seqs: b,
                    seq_len: t,
                    total_tokens: b * t,
                    state_rows: ax("pool_size").unwrap_or(0),
                    max_seq_len: Some(t),
                }
            }
            Op::Prefill => {
                let len_cu = ax("len_cu_seqlens").unwrap_or(0);
                if len_cu == 0 {
                    return Err(GdnError::shape(
                        "cu_seqlens",
                        "must have at least one entry (num_seqs + 1)",
                    ));
                }
                let n = len_cu - 1;
                if let Some(sn) = ax("num_seqs") {
                    if sn != n {
                        return Err(GdnError::shape(
                            "state",
                            format!("has {sn} rows but cu_seqlens describes {n} sequences"),
                        ));
                    }
                }
                Dims {
                    num_seqs: n,
                    seq_len: 0,
                    total_tokens: ax("total_seq_len").unwrap_or(0),
                    state_rows: pool_rows.unwrap_or(n),
                    max_seq_len: None, // from the values, once they are checked (below)
                }
            }
        };
        let d = def.heads.head_size;
        let raw_scale = opts.scale.or(scale_in).unwrap_or(0.0);
        if !raw_scale.is_finite() {
            return Err(GdnError::value(
                "scale",
                format!("must be finite, got {raw_scale}"),
            ));
        }
        let scale = if raw_scale == 0.0 {
            1.0 / (d as f32).sqrt()
        } else {
            raw_scale
        };
        let mut mtp_mode = opts.mtp_mode;
        if spec_slots {
            if intermediate {
                return Err(GdnError::value(
                    "intermediate_states_buffer",
                    "spec-decode slots write each token's state to the pool: give slots or an intermediate buffer, not both",
                ));
            }
            mtp_mode = MtpMode::Serving;
        }
        let index_dtype = tensors
            .get(names::STATE_INDICES)
            .or_else(|| tensors.get("initial_state_indices"))
            .map_or(DType::I32, Tensor::dtype);
        let mut p = Problem {
            def: def.clone(),
            dims,
            state_dtype,
            act_dtype,
            intermediate,
            scale,
            mtp_mode,
            serving: sv,
            gates,
            beta_dtype: tensors.get(names::BETA).map_or(act_dtype, Tensor::dtype),
            pool,
            index_dtype,
            has_initial_state: tensors.contains_key(names::HAS_INITIAL_STATE),
            spec_slots,
            cu_dtype: tensors.get("cu_seqlens").map_or(DType::I64, Tensor::dtype),
            checkpoint_rows: 0,
            checkpoint_dtype: DType::F32,
            act_views: None,
        };
        p.check_serving_tensors(tensors)?;
        let cu = tensors.get("cu_seqlens").map(int_values);
        p.check_values(
            cu.as_deref(),
            tensors
                .get("initial_state_indices")
                .and_then(Tensor::as_i32),
        )?;
        p.check_serving_values(tensors, cu.as_deref())?;
        if let Some(cu) = cu.as_deref().filter(|_| def.op == Op::Prefill) {
            p.dims.max_seq_len = cu
                .windows(2)
                .map(|w| (w[1] - w[0]) as usize)
                .max()
                .or(Some(0));
        }
        Ok(p)
    }

    /// Shape of the per-token gate tensors (`a`, `b`, `g`, `alpha`, `beta`).
    pub fn gate_shape(&self) -> Vec<usize> {
        let hv = self.def.heads.num_v_heads;
        match self.def.op {
            Op::Prefill => vec![self.dims.total_tokens, hv],
            _ => vec![self.dims.num_seqs, self.dims.seq_len, hv],
        }
    }

    /// Checks the values that shapes cannot: `cu_seqlens` and pool indices.
    pub fn check_values(&self, cu_seqlens: Option<&[i64]>, indices: Option<&[i32]>) -> Result<()> {
        if let Some(cu) = cu_seqlens {
            check_cu_seqlens(cu, self.dims.total_tokens)?;
        }
        if let Some(idx) = indices.filter(|_| !self.spec_slots) {
            check_indices(
                idx,
                self.dims.state_rows,
                self.writes_pool_rows(),
                self.serving.pad,
            )?;
        }
        Ok(())
    }

    /// Whether requests write to per-pool-row destinations (so two requests must not share a row).
    pub fn writes_pool_rows(&self) -> bool {
        self.pool
            || (self.def.op == Op::Mtp && (self.intermediate || self.mtp_mode == MtpMode::Serving))
    }

    /// Whether the state output starts as a copy of the state input (pools: rows not written keep their
    /// values) rather than being written whole.
    pub fn state_in_place(&self) -> bool {
        self.pool || self.def.op == Op::Mtp
    }

    /// Whether this call uses any serving capability (a definition-mode call does not).
    pub fn is_serving(&self) -> bool {
        self.serving != Serving::default()
            || self.gates != GateMode::Raw
            || self.pool
            || self.spec_slots
            || self.cu_dtype == DType::I32
            || self.mtp_mode == MtpMode::Serving
            || self.act_views.is_some()
            || self.act_dtype == DType::F16
            || self.state_dtype == Some(DType::F16)
    }

    /// Typed views of the (already validated) tensors.
    pub fn inputs<'a>(&self, tensors: &'a TensorMap) -> Inputs<'a> {
        let get = |n: &str| tensors.get(n).expect("validated");
        let act = |n: &str| match tensors.get(n).map(|t| &t.data) {
            Some(Data::F16(v)) => ActRef::F16(v),
            Some(Data::BF16(v)) => ActRef::BF16(v),
            _ => ActRef::default(),
        };
        let f = |n: &str| tensors.get(n).and_then(Tensor::as_f32).unwrap_or(&[]);
        let state = tensors.get(self.def.state_input()).map(state_ref);
        let cu_seqlens = match self.def.op {
            Op::Prefill => int_values(get("cu_seqlens")),
            _ => Cow::Owned(
                (0..=self.dims.num_seqs)
                    .map(|i| (i * self.dims.seq_len) as i64)
                    .collect(),
            ),
        };
        let pool_indices = if self.pool {
            Some(int_values(get(names::STATE_INDICES)))
        } else if self.spec_slots {
            Some(int_values(get("initial_state_indices")))
        } else {
            None
        };
        Inputs {
            q: act("q"),
            k: act("k"),
            v: act("v"),
            a: act("a"),
            b: act("b"),
            a_log: f("A_log"),
            dt_bias: f("dt_bias"),
            state,
            cu_seqlens,
            state_indices: tensors
                .get("initial_state_indices")
                .and_then(Tensor::as_i32),
            intermediate: tensors
                .get("intermediate_states_buffer")
                .and_then(Tensor::as_f32),
            gate: tensors
                .get(names::G)
                .or_else(|| tensors.get(names::ALPHA))
                .and_then(Tensor::as_f32),
            beta: tensors.get(names::BETA).map(|t| match &t.data {
                Data::BF16(v) => BetaRef::BF16(v),
                Data::F16(v) => BetaRef::F16(v),
                Data::F32(v) => BetaRef::F32(v),
                _ => unreachable!("validated"),
            }),
            pool_indices,
            has_initial_state: tensors
                .get(names::HAS_INITIAL_STATE)
                .map(|t| int_values(t).iter().map(|&x| x != 0).collect()),
            num_accepted: tensors.get(names::NUM_ACCEPTED).and_then(Tensor::as_i32),
            checkpoint_starts: tensors.get(names::CHECKPOINT_STARTS).map(int_values),
            checkpoints: tensors.get(names::CHECKPOINTS).map(state_ref),
        }
    }

    /// Elements of one state row (`HV * D * D`).
    pub fn state_row_len(&self) -> usize {
        let h = &self.def.heads;
        h.num_v_heads * h.head_size * h.head_size
    }

    /// dtype of the state output: the state's when it came in bf16 or fp16 (the 16-bit-state extensions),
    /// else fp32.
    pub fn state_out_dtype(&self) -> DType {
        match self.state_dtype {
            Some(d) if d.is_half() => d,
            _ => DType::F32,
        }
    }

    /// Shape of the `output` tensor.
    pub fn output_shape(&self) -> Vec<usize> {
        let h = &self.def.heads;
        match self.def.op {
            Op::Prefill => vec![self.dims.total_tokens, h.num_v_heads, h.head_size],
            _ => vec![
                self.dims.num_seqs,
                self.dims.seq_len,
                h.num_v_heads,
                h.head_size,
            ],
        }
    }

    /// Shape of the state output (`new_state` / `final_state`).
    pub fn state_shape(&self) -> Vec<usize> {
        let h = &self.def.heads;
        vec![
            self.dims.state_rows,
            h.num_v_heads,
            h.head_size,
            h.head_size,
        ]
    }

    /// Shape of the intermediate-state buffer (MTP).
    pub fn intermediate_shape(&self) -> Vec<usize> {
        let h = &self.def.heads;
        vec![
            self.dims.state_rows,
            self.dims.seq_len,
            h.num_v_heads,
            h.head_size,
            h.head_size,
        ]
    }

    /// Shape of the `checkpoints` output (prefill with `checkpoint_every`).
    pub fn checkpoint_shape(&self) -> Vec<usize> {
        let h = &self.def.heads;
        vec![
            self.checkpoint_rows,
            h.num_v_heads,
            h.head_size,
            h.head_size,
        ]
    }

    /// Bytes a kernel must move at least: inputs read once, outputs written once.
    pub fn min_bytes(&self) -> u64 {
        let h = &self.def.heads;
        let (t, d) = (self.dims.total_tokens as u64, h.head_size as u64);
        let (nq, nv) = (h.num_q_heads as u64, h.num_v_heads as u64);
        let gate_bytes = match self.gates {
            GateMode::Raw => 4,
            _ => 4 + self.beta_dtype.size() as u64,
        };
        let per_token = 2 * (2 * nq * d + nv * d) + gate_bytes * nv + 2 * nv * d;
        let state_elt = self.state_out_dtype().size() as u64;
        let row = self.state_row_len() as u64 * state_elt;
        let rows_touched = match self.def.op {
            Op::Mtp => self.dims.num_seqs.min(self.dims.state_rows) as u64,
            _ => self.dims.num_seqs as u64,
        };
        let read = if self.state_dtype.is_some() {
            rows_touched * row
        } else {
            0
        };
        let write = match self.def.op {
            Op::Mtp => {
                let inter = if self.intermediate {
                    rows_touched * self.dims.seq_len as u64 * self.state_row_len() as u64 * 4
                } else {
                    0
                };
                let fin = if self.spec_slots {
                    rows_touched * self.dims.seq_len as u64 * row
                } else if self.mtp_mode == MtpMode::Serving {
                    rows_touched * row
                } else {
                    0
                };
                inter + fin
            }
            _ => rows_touched * row,
        };
        let ckpt = self.checkpoint_rows as u64 * row;
        t * per_token + read + write + ckpt
    }
}

/// A state-like tensor's typed view (validated f32, bf16 or fp16).
fn state_ref(t: &Tensor) -> StateRef<'_> {
    match &t.data {
        Data::BF16(v) => StateRef::BF16(v),
        Data::F16(v) => StateRef::F16(v),
        Data::F32(v) => StateRef::F32(v),
        _ => unreachable!("validated"),
    }
}

/// A definition input's dtype: the definition's, or one of gdn's extensions: fp16 for the bf16 activation
/// tensors (q, k, v, a, b), bf16 or fp16 for the state, int32 for `cu_seqlens`.
fn check_dtype(s: &TensorSpec, t: &Tensor, def: &Definition) -> Result<()> {
    let (got, is_state) = (t.dtype(), s.name == def.state_input());
    let ok = got == s.dtype
        || (s.dtype == DType::BF16 && got == DType::F16)
        || (is_state && got.is_half())
        || (s.name == "cu_seqlens" && got == DType::I32);
    if ok {
        return Ok(());
    }
    let expected = match s.dtype {
        DType::BF16 => "bfloat16 or float16".into(),
        _ if is_state => "float32, bfloat16 or float16".into(),
        d => d.name().into(),
    };
    Err(GdnError::DType {
        tensor: s.name.to_string(),
        expected,
        got: got.name().into(),
    })
}

fn bind_shape(
    def: &Definition,
    s: &TensorSpec,
    shape: &[&'static str],
    t: &Tensor,
    axes: &mut BTreeMap<&'static str, (usize, &'static str)>,
) -> Result<()> {
    if t.shape.len() != shape.len() {
        return Err(GdnError::shape(
            s.name,
            format!(
                "rank {} (shape {:?}) but expected rank {} [{}]",
                t.shape.len(),
                t.shape,
                shape.len(),
                shape.join(", ")
            ),
        ));
    }
    for (i, (&axis, &got)) in shape.iter().zip(&t.shape).enumerate() {
        if let Some(want) = def.const_axis(axis) {
            if got != want {
                return Err(GdnError::shape(
                    s.name,
                    format!("dim {i} ({axis}) is {got} but the definition fixes it at {want}"),
                ));
            }
        } else if let Some(&(want, from)) = axes.get(axis) {
            if got != want {
                return Err(GdnError::shape(
                    s.name,
                    format!("dim {i} ({axis}) is {got} but '{from}' gives {axis} = {want}"),
                ));
            }
        } else {
            axes.insert(axis, (got, s.name));
        }
    }
    Ok(())
}

/// `cu_seqlens` must start at 0, never decrease, and end at the number of tokens.
pub fn check_cu_seqlens(cu: &[i64], total_tokens: usize) -> Result<()> {
    let bad = |p: String| Err(GdnError::value("cu_seqlens", p));
    match cu.first() {
        None => return bad("is empty (needs num_seqs + 1 entries)".into()),
        Some(&x) if x != 0 => return bad(format!("must start at 0, starts at {x}")),
        _ => {}
    }
    if let Some(i) = cu.windows(2).position(|w| w[1] < w[0]) {
        return bad(format!(
            "decreases at index {}: {} then {}",
            i + 1,
            cu[i],
            cu[i + 1]
        ));
    }
    let last = *cu.last().unwrap();
    if last != total_tokens as i64 {
        return bad(format!(
            "ends at {last} but q/k/v hold {total_tokens} tokens"
        ));
    }
    Ok(())
}

/// MTP pool indices must be valid rows or padding under `pad` (in both modes: a padded request reads and
/// writes nothing); with per-row writes, unique.
pub fn check_indices(idx: &[i32], pool: usize, writes_rows: bool, pad: PadRule) -> Result<()> {
    let name = "initial_state_indices";
    let mut seen = vec![false; pool];
    for (b, &i) in idx.iter().enumerate() {
        if pad.is_pad(i as i64) {
            continue;
        }
        if i < 0 || i as usize >= pool {
            let hint = if i < 0 {
                " (padding is a negative index, or 0 under the null-slot rule)"
            } else {
                ""
            };
            return Err(GdnError::value(
                name,
                format!("entry {b} is {i}, outside the pool of {pool} rows{hint}"),
            ));
        }
        if writes_rows {
            if seen[i as usize] {
                return Err(GdnError::value(
                    name,
                    format!("pool row {i} appears twice (entry {b}); two requests would write the same state row"),
                ));
            }
            seen[i as usize] = true;
        }
    }
    Ok(())
}
