//! A validated GDN problem: the definition, the bound sizes, and typed views of the input tensors.
//!
//! Validation happens here, once, before any backend does work: every input's presence, dtype and shape
//! (axes bound on first sight and checked everywhere else), `cu_seqlens` (starts at 0, non-decreasing, ends at
//! the token count), pool indices (in range; padding only where the mode allows it; no two requests writing the
//! same pool slot), the serving tensors ([`crate::serving`]) and `scale`. Errors name the tensor and the problem.
//!
//! All three operations share one flat model: `num_seqs` sequences whose tokens are rows of token-major q/k/v
//! (`seq_start(n)..seq_start(n+1)`), each reading one state row and (optionally) writing one.

use crate::definition::{Definition, Op, TensorSpec};
use crate::dtype::DType;
use crate::error::{GdnError, Result};
use crate::serving::{names, GateMode, PadRule, Serving, CHECKPOINT_GRANULE};
use crate::tensor::{Data, Tensor, TensorMap};
use half::bf16;
use std::borrow::Cow;
use std::collections::BTreeMap;

/// How MTP treats its state pool.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub enum MtpMode {
    /// The `gdn_mtp_*` definition: the pool is read, `final_state` is a copy of it (not updated), every
    /// index must be a valid pool row.
    #[default]
    Definition,
    /// Serving: each request's final state is written back to its pool row (in place), and index -1 marks a
    /// padding request (skipped: no state read or written, its output rows are zero).
    Serving,
}

/// Caller options that are not tensors.
#[derive(Copy, Clone, Debug, Default, PartialEq)]
pub struct RunOptions {
    /// Overrides the `scale` tensor when set (0 still means the default 1/sqrt(head_size)).
    pub scale: Option<f32>,
    pub mtp_mode: MtpMode,
    /// Serving options (q/k norm, state layout, padding rule, checkpoints); default: the definitions.
    pub serving: Serving,
}

/// Sizes bound from the inputs.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Dims {
    /// Requests (decode, MTP) or sequences (prefill).
    pub num_seqs: usize,
    /// Tokens per request for decode (1) and MTP (T); 0 for prefill (variable).
    pub seq_len: usize,
    /// Total tokens (rows of q/k/v).
    pub total_tokens: usize,
    /// Rows of the state tensor (`num_seqs`, or `pool_size` for MTP).
    pub state_rows: usize,
    /// Tokens of the longest sequence when known on the host: from host `cu_seqlens` values (prefill), or
    /// `seq_len` (decode, MTP). `None` when `cu_seqlens` lives on a device (bindings may set a caller's hint).
    /// Backends may use it to plan; it never changes results.
    pub max_seq_len: Option<usize>,
}

/// A validated problem (sizes and flags; no data).
#[derive(Clone, Debug, PartialEq)]
pub struct Problem {
    pub def: Definition,
    pub dims: Dims,
    /// dtype of the state input, or `None` when absent (zeros). BF16 is gdn's bf16-state extension:
    /// the state is stored in bf16 (and so is the state output), the math stays fp32.
    pub state_dtype: Option<DType>,
    /// MTP: an `intermediate_states_buffer` was given and is written.
    pub intermediate: bool,
    /// Resolved scale (never 0).
    pub scale: f32,
    /// MTP pool treatment (spec-decode slots imply [`MtpMode::Serving`]).
    pub mtp_mode: MtpMode,
    /// The caller's serving options.
    pub serving: Serving,
    /// Where the gates come from (selected by the tensors given: `g`, `alpha`, or `a, b, A_log, dt_bias`).
    pub gates: GateMode,
    /// dtype of `beta` (precomputed gates: F32 or BF16; BF16 for raw gates, where `b` is bf16).
    pub beta_dtype: DType,
    /// Decode / prefill read and write rows `state_indices[n]` of a state pool (`state` has `state_rows`
    /// rows), in place.
    pub pool: bool,
    /// dtype of the pool index tensor (`state_indices`, or MTP's `initial_state_indices`): I32 or I64.
    pub index_dtype: DType,
    /// `has_initial_state` was given.
    pub has_initial_state: bool,
    /// MTP spec-decode slots: `initial_state_indices` is `[B, T]`, with `num_accepted_tokens`.
    pub spec_slots: bool,
    /// dtype of prefill's `cu_seqlens` (I64 per the definitions, or I32).
    pub cu_dtype: DType,
    /// Rows of the `checkpoints` buffer (0: no checkpoints). It is destination-passing, like MTP's
    /// intermediate buffer: rows no sequence writes keep the caller's values.
    pub checkpoint_rows: usize,
    /// dtype of the `checkpoints` buffer (the state's, or F32).
    pub checkpoint_dtype: DType,
}

/// Typed state storage (fp32 per the definitions, or bf16).
#[derive(Copy, Clone, Debug)]
pub enum StateRef<'a> {
    F32(&'a [f32]),
    BF16(&'a [bf16]),
}

/// Typed views of a validated problem's inputs.
#[derive(Clone, Debug, Default)]
pub struct Inputs<'a> {
    pub q: &'a [bf16],
    pub k: &'a [bf16],
    pub v: &'a [bf16],
    pub a: &'a [bf16],
    pub b: &'a [bf16],
    pub a_log: &'a [f32],
    pub dt_bias: &'a [f32],
    pub state: Option<StateRef<'a>>,
    /// Sequence boundaries in tokens, `num_seqs + 1` entries (synthesised for decode and MTP).
    pub cu_seqlens: Cow<'a, [i64]>,
    /// MTP pool rows, one per request.
    pub state_indices: Option<&'a [i32]>,
    /// MTP intermediate-state buffer as given (destination-passing: rows not written keep these values).
    pub intermediate: Option<&'a [f32]>,
    /// Precomputed gates: log decay `g` or linear decay `alpha` (by [`Problem::gates`]), token-major `[tokens, HV]`.
    pub gate: Option<&'a [f32]>,
    /// Precomputed update gate, `[tokens, HV]`.
    pub beta: Option<BetaRef<'a>>,
    /// Decode / prefill pool rows (`state_indices`), or MTP spec-decode slots `[B, T]` flattened; as i64.
    pub pool_indices: Option<Cow<'a, [i64]>>,
    /// `has_initial_state` per sequence.
    pub has_initial_state: Option<Vec<bool>>,
    /// MTP spec-decode slots: accepted tokens per request.
    pub num_accepted: Option<&'a [i32]>,
    /// Prefill checkpoints: first row of each sequence in `checkpoints`, `N + 1` entries.
    pub checkpoint_starts: Option<Cow<'a, [i64]>>,
    /// The `checkpoints` buffer as given (rows not written keep these values).
    pub checkpoints: Option<StateRef<'a>>,
}

/// Typed precomputed `beta`.
#[derive(Copy, Clone, Debug)]
pub enum BetaRef<'a> {
    F32(&'a [f32]),
    BF16(&'a [bf16]),
}

impl BetaRef<'_> {
    #[inline]
    pub fn get(&self, i: usize) -> f32 {
        match self {
            BetaRef::F32(v) => v[i],
            BetaRef::BF16(v) => v[i].to_f32(),
        }
    }
}

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
            intermediate,
            scale,
            mtp_mode,
            serving: sv,
            gates,
            beta_dtype: tensors.get(names::BETA).map_or(DType::BF16, Tensor::dtype),
            pool,
            index_dtype,
            has_initial_state: tensors.contains_key(names::HAS_INITIAL_STATE),
            spec_slots,
            cu_dtype: tensors.get("cu_seqlens").map_or(DType::I64, Tensor::dtype),
            checkpoint_rows: 0,
            checkpoint_dtype: DType::F32,
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

    /// Presence, dtypes and shapes of the serving tensors, and the options' ranges.
    fn check_serving_tensors(&self, tensors: &TensorMap) -> Result<()> {
        let op = self.def.op;
        let n = self.dims.num_seqs;
        let shape_is = |name: &str, t: &Tensor, want: &[usize]| -> Result<()> {
            if t.shape != want {
                return Err(GdnError::shape(
                    name,
                    format!("shape {:?} but expected {:?}", t.shape, want),
                ));
            }
            Ok(())
        };
        let dtype_in = |name: &str, t: &Tensor, ok: &[DType]| -> Result<()> {
            if !ok.contains(&t.dtype()) {
                let exp: Vec<&str> = ok.iter().map(|d| d.name()).collect();
                return Err(GdnError::DType {
                    tensor: name.into(),
                    expected: exp.join(" or "),
                    got: t.dtype().name().into(),
                });
            }
            Ok(())
        };
        let gs = self.gate_shape();
        for name in [names::G, names::ALPHA] {
            if let Some(t) = tensors.get(name) {
                dtype_in(name, t, &[DType::F32])?;
                shape_is(name, t, &gs)?;
            }
        }
        match (self.gates, tensors.get(names::BETA)) {
            (GateMode::Raw, Some(_)) => {
                return Err(GdnError::value(
                    names::BETA,
                    "precomputed beta needs precomputed decay ('g' or 'alpha'); raw gates use 'b'",
                ))
            }
            (GateMode::Raw, None) => {}
            (_, None) => {
                return Err(GdnError::Missing {
                    tensor: format!("{} (precomputed gates need it)", names::BETA),
                })
            }
            (_, Some(t)) => {
                dtype_in(names::BETA, t, &[DType::F32, DType::BF16])?;
                shape_is(names::BETA, t, &gs)?;
            }
        }
        if let Some(t) = tensors.get(names::STATE_INDICES) {
            dtype_in(names::STATE_INDICES, t, &[DType::I32, DType::I64])?;
            shape_is(names::STATE_INDICES, t, &[n])?;
        }
        if let Some(t) = tensors.get("initial_state_indices") {
            dtype_in("initial_state_indices", t, &[DType::I32])?;
        }
        if let Some(t) = tensors.get(names::HAS_INITIAL_STATE) {
            if !self.pool && !(op == Op::Mtp) {
                return Err(GdnError::value(
                    names::HAS_INITIAL_STATE,
                    "applies to a state pool: give state_indices",
                ));
            }
            dtype_in(names::HAS_INITIAL_STATE, t, &[DType::I32])?;
            shape_is(names::HAS_INITIAL_STATE, t, &[n])?;
        }
        match (self.spec_slots, tensors.get(names::NUM_ACCEPTED)) {
            (true, Some(t)) => {
                dtype_in(names::NUM_ACCEPTED, t, &[DType::I32])?;
                shape_is(names::NUM_ACCEPTED, t, &[n])?;
            }
            (true, None) => {
                return Err(GdnError::Missing {
                    tensor: format!(
                        "{} (initial_state_indices [B, T] selects spec-decode slots)",
                        names::NUM_ACCEPTED
                    ),
                })
            }
            (false, Some(_)) => {
                return Err(GdnError::value(
                    names::NUM_ACCEPTED,
                    "needs spec-decode slots: initial_state_indices of shape [B, T] (MTP)",
                ))
            }
            (false, None) => {}
        }
        if let Some(t) = tensors.get("cu_seqlens") {
            dtype_in("cu_seqlens", t, &[DType::I64, DType::I32])?;
        }
        let every = self.serving.checkpoint_every;
        let starts = tensors.get(names::CHECKPOINT_STARTS);
        if every % CHECKPOINT_GRANULE != 0 {
            return Err(GdnError::value(
                "checkpoint_every",
                format!("must be a multiple of {CHECKPOINT_GRANULE} tokens, got {every}"),
            ));
        }
        match (every > 0, starts) {
            (true, _) if op != Op::Prefill => {
                return Err(GdnError::value(
                    "checkpoint_every",
                    "checkpoints are written by prefill only",
                ))
            }
            (true, None) => {
                return Err(GdnError::Missing {
                    tensor: format!("{} (checkpoint_every is set)", names::CHECKPOINT_STARTS),
                })
            }
            (false, Some(_)) => {
                return Err(GdnError::value(
                    names::CHECKPOINT_STARTS,
                    "given without checkpoint_every",
                ))
            }
            (true, Some(t)) => {
                dtype_in(names::CHECKPOINT_STARTS, t, &[DType::I32, DType::I64])?;
                shape_is(names::CHECKPOINT_STARTS, t, &[n + 1])?;
                let Some(c) = tensors.get(names::CHECKPOINTS) else {
                    return Err(GdnError::Missing {
                        tensor: format!(
                            "{} (the buffer checkpoint_every writes into)",
                            names::CHECKPOINTS
                        ),
                    });
                };
                dtype_in(names::CHECKPOINTS, c, &[self.state_out_dtype(), DType::F32])?;
                let h = &self.def.heads;
                let (hv, d) = (h.num_v_heads, h.head_size);
                if c.shape.len() != 4 || c.shape[1..] != [hv, d, d] {
                    return Err(GdnError::shape(
                        names::CHECKPOINTS,
                        format!("shape {:?} but expected [rows, {hv}, {d}, {d}]", c.shape),
                    ));
                }
            }
            (false, None) => {
                if tensors.contains_key(names::CHECKPOINTS) {
                    return Err(GdnError::value(
                        names::CHECKPOINTS,
                        "given without checkpoint_every",
                    ));
                }
            }
        }
        Ok(())
    }

    /// Values of the serving tensors: pool indices, `has_initial_state`, accepted counts, checkpoint rows.
    fn check_serving_values(&mut self, tensors: &TensorMap, cu: Option<&[i64]>) -> Result<()> {
        let pad = self.serving.pad;
        let rows = self.dims.state_rows;
        if let Some(t) = tensors.get(names::STATE_INDICES) {
            let idx = int_values(t);
            let mut seen = vec![false; rows];
            for (i, &x) in idx.iter().enumerate() {
                if pad.is_pad(x) {
                    continue;
                }
                if x < 0 || x as usize >= rows {
                    return Err(GdnError::value(
                        names::STATE_INDICES,
                        format!("entry {i} is {x}, outside the pool of {rows} rows (padding under the '{pad}' rule is {})",
                            if pad == PadRule::NullSlot { "<= 0" } else { "< 0" }),
                    ));
                }
                if std::mem::replace(&mut seen[x as usize], true) {
                    return Err(GdnError::value(
                        names::STATE_INDICES,
                        format!("pool row {x} appears twice (entry {i}); two sequences would write the same state row"),
                    ));
                }
            }
        }
        if let Some(t) = tensors.get(names::HAS_INITIAL_STATE) {
            if let Some(i) = int_values(t).iter().position(|&x| x != 0 && x != 1) {
                return Err(GdnError::value(
                    names::HAS_INITIAL_STATE,
                    format!("entry {i} is not 0 or 1"),
                ));
            }
        }
        if self.spec_slots {
            let idx = tensors["initial_state_indices"].as_i32().expect("checked");
            let acc = tensors[names::NUM_ACCEPTED].as_i32().expect("checked");
            let t_len = self.dims.seq_len;
            let mut seen = vec![false; rows];
            for (b, &a) in acc.iter().enumerate() {
                let slots = &idx[b * t_len..(b + 1) * t_len];
                if pad.is_pad(slots[0] as i64) {
                    continue; // a padded request
                }
                if a < 1 || a as usize > t_len {
                    return Err(GdnError::value(
                        names::NUM_ACCEPTED,
                        format!("entry {b} is {a}; accepted tokens are 1..={t_len}"),
                    ));
                }
                let src = slots[a as usize - 1] as i64;
                if pad.is_pad(src) {
                    return Err(GdnError::value(
                        "initial_state_indices",
                        format!(
                            "request {b} reads slot [{b}, {}] = {src}, which is padding",
                            a - 1
                        ),
                    ));
                }
                for (t, &x) in slots.iter().enumerate() {
                    let x = x as i64;
                    if pad.is_pad(x) {
                        continue;
                    }
                    if x as usize >= rows {
                        return Err(GdnError::value(
                            "initial_state_indices",
                            format!("entry [{b}, {t}] is {x}, outside the pool of {rows} rows"),
                        ));
                    }
                    if std::mem::replace(&mut seen[x as usize], true) {
                        return Err(GdnError::value(
                            "initial_state_indices",
                            format!("pool row {x} appears twice (entry [{b}, {t}]); two tokens would write the same state row"),
                        ));
                    }
                }
            }
        }
        if let (Some(t), Some(cu)) = (tensors.get(names::CHECKPOINT_STARTS), cu) {
            let st = int_values(t);
            let every = self.serving.checkpoint_every as i64;
            if st[0] != 0 {
                return Err(GdnError::value(
                    names::CHECKPOINT_STARTS,
                    format!("must start at 0, starts at {}", st[0]),
                ));
            }
            for s in 0..self.dims.num_seqs {
                let need = (cu[s + 1] - cu[s]) / every;
                if st[s + 1] - st[s] < need {
                    return Err(GdnError::value(
                        names::CHECKPOINT_STARTS,
                        format!(
                            "sequence {s} has {} tokens and so {need} checkpoints, but rows {}..{} hold {}",
                            cu[s + 1] - cu[s],
                            st[s],
                            st[s + 1],
                            st[s + 1] - st[s]
                        ),
                    ));
                }
            }
            let rows = tensors[names::CHECKPOINTS].shape[0] as i64;
            if let Some(i) = st.windows(2).position(|w| w[1] < w[0]) {
                return Err(GdnError::value(
                    names::CHECKPOINT_STARTS,
                    format!("decreases at index {}", i + 1),
                ));
            }
            if st[self.dims.num_seqs] > rows {
                return Err(GdnError::value(
                    names::CHECKPOINT_STARTS,
                    format!(
                        "ends at row {} but 'checkpoints' has {rows} rows",
                        st[self.dims.num_seqs]
                    ),
                ));
            }
            self.checkpoint_rows = rows as usize;
            self.checkpoint_dtype = tensors[names::CHECKPOINTS].dtype();
        }
        Ok(())
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
                self.mtp_mode,
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
    }

    /// Typed views of the (already validated) tensors.
    pub fn inputs<'a>(&self, tensors: &'a TensorMap) -> Inputs<'a> {
        let get = |n: &str| tensors.get(n).expect("validated");
        let bf = |n: &str| tensors.get(n).and_then(Tensor::as_bf16).unwrap_or(&[]);
        let f = |n: &str| tensors.get(n).and_then(Tensor::as_f32).unwrap_or(&[]);
        let state = tensors
            .get(self.def.state_input())
            .map(|t| match t.dtype() {
                DType::BF16 => StateRef::BF16(t.as_bf16().expect("validated")),
                _ => StateRef::F32(t.as_f32().expect("validated")),
            });
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
            q: bf("q"),
            k: bf("k"),
            v: bf("v"),
            a: bf("a"),
            b: bf("b"),
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
                Data::F32(v) => BetaRef::F32(v),
                _ => unreachable!("validated"),
            }),
            pool_indices,
            has_initial_state: tensors
                .get(names::HAS_INITIAL_STATE)
                .map(|t| int_values(t).iter().map(|&x| x != 0).collect()),
            num_accepted: tensors.get(names::NUM_ACCEPTED).and_then(Tensor::as_i32),
            checkpoint_starts: tensors.get(names::CHECKPOINT_STARTS).map(int_values),
            checkpoints: tensors.get(names::CHECKPOINTS).map(|t| match &t.data {
                Data::BF16(v) => StateRef::BF16(v),
                Data::F32(v) => StateRef::F32(v),
                _ => unreachable!("validated"),
            }),
        }
    }

    /// Elements of one state row (`HV * D * D`).
    pub fn state_row_len(&self) -> usize {
        let h = &self.def.heads;
        h.num_v_heads * h.head_size * h.head_size
    }

    /// dtype of the state output: bf16 when the state came in bf16 (the bf16-state extension), else fp32.
    pub fn state_out_dtype(&self) -> DType {
        if self.state_dtype == Some(DType::BF16) {
            DType::BF16
        } else {
            DType::F32
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

/// The gate mode the given tensors select.
fn gate_mode(tensors: &TensorMap) -> Result<GateMode> {
    match (
        tensors.contains_key(names::G),
        tensors.contains_key(names::ALPHA),
    ) {
        (true, true) => Err(GdnError::value(
            names::ALPHA,
            "give the decay once: log-space 'g' or linear 'alpha', not both",
        )),
        (true, false) => Ok(GateMode::Log),
        (false, true) => Ok(GateMode::Linear),
        (false, false) => Ok(GateMode::Raw),
    }
}

fn gate_name(g: GateMode) -> &'static str {
    match g {
        GateMode::Linear => names::ALPHA,
        _ => names::G,
    }
}

/// The values of an int32 or int64 tensor, as i64.
pub fn int_values(t: &Tensor) -> Cow<'_, [i64]> {
    match &t.data {
        Data::I64(v) => Cow::Borrowed(v),
        Data::I32(v) => Cow::Owned(v.iter().map(|&x| x as i64).collect()),
        _ => Cow::Owned(Vec::new()),
    }
}

fn check_dtype(s: &TensorSpec, t: &Tensor, def: &Definition) -> Result<()> {
    let ok = t.dtype() == s.dtype
        || (s.name == def.state_input() && t.dtype() == DType::BF16)
        || (s.name == "cu_seqlens" && t.dtype() == DType::I32);
    if ok {
        Ok(())
    } else {
        Err(GdnError::DType {
            tensor: s.name.to_string(),
            expected: s.dtype.name().into(),
            got: t.dtype().name().into(),
        })
    }
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

/// Pool indices must be valid rows (or padding under `pad` in serving mode); with per-row writes, unique.
pub fn check_indices(
    idx: &[i32],
    pool: usize,
    writes_rows: bool,
    mode: MtpMode,
    pad: PadRule,
) -> Result<()> {
    let name = "initial_state_indices";
    let mut seen = vec![false; pool];
    for (b, &i) in idx.iter().enumerate() {
        if mode == MtpMode::Serving && pad.is_pad(i as i64) {
            continue;
        }
        if i < 0 || i as usize >= pool {
            let hint = if i < 0 {
                " (negative padding is allowed only in serving mode)"
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
