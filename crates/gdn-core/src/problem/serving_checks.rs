//! Validation of the serving tensors (crate::serving): presence, dtypes and shapes against the bound sizes,
//! then the values (pool indices and their padding rule, `has_initial_state`, spec-decode slots and accepted
//! counts, checkpoint rows). Part of [`Problem::from_tensors`].

use super::types::Problem;
use crate::definition::Op;
use crate::dtype::DType;
use crate::error::{GdnError, Result};
use crate::serving::{names, GateMode, PadRule, CHECKPOINT_GRANULE};
use crate::tensor::{Data, Tensor, TensorMap};
use std::borrow::Cow;

impl Problem {
    /// Presence, dtypes and shapes of the serving tensors, and the options' ranges.
    pub(super) fn check_serving_tensors(&self, tensors: &TensorMap) -> Result<()> {
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
                // a 16-bit beta has the activations' dtype (as FLA passes it)
                if t.dtype().is_half() && t.dtype() != self.act_dtype {
                    return Err(GdnError::DType {
                        tensor: names::BETA.into(),
                        expected: format!(
                            "float32 or {} (a 16-bit beta has the dtype of q, k and v)",
                            self.act_dtype
                        ),
                        got: t.dtype().name().into(),
                    });
                }
                dtype_in(names::BETA, t, &[DType::F32, self.act_dtype])?;
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
        if !every.is_multiple_of(CHECKPOINT_GRANULE) {
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
                // the state's dtype or f32: a 16-bit checkpoint buffer of the other 16-bit dtype mixes states
                let state = self.state_out_dtype();
                if c.dtype() != state && c.dtype() != DType::F32 {
                    return Err(GdnError::DType {
                        tensor: names::CHECKPOINTS.into(),
                        expected: if state == DType::F32 {
                            "float32 (the state's dtype)".into()
                        } else {
                            format!("{state} (the state's dtype) or float32")
                        },
                        got: c.dtype().name().into(),
                    });
                }
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
    pub(super) fn check_serving_values(
        &mut self,
        tensors: &TensorMap,
        cu: Option<&[i64]>,
    ) -> Result<()> {
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
        // a decay factor lies in [0, 1]: log g <= 0 (or -inf), alpha in [0, 1] (the kernels' chunked forms
        // rely on it: a ratio of decays exp(γi − γj), i >= j, is at most 1)
        for (name, ok) in [
            (names::G, (|x: f32| x <= 0.0) as fn(f32) -> bool),
            (names::ALPHA, |x: f32| (0.0..=1.0).contains(&x)),
        ] {
            if let Some(v) = tensors.get(name).and_then(Tensor::as_f32) {
                if let Some(i) = v.iter().position(|&x| !ok(x)) {
                    let want = if name == names::G {
                        "<= 0 (a log decay)"
                    } else {
                        "in [0, 1] (a decay factor)"
                    };
                    return Err(GdnError::value(
                        name,
                        format!("element {i} is {}, must be {want}", v[i]),
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
}

/// The gate mode the given tensors select.
pub(super) fn gate_mode(tensors: &TensorMap) -> Result<GateMode> {
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

pub(super) fn gate_name(g: GateMode) -> &'static str {
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
