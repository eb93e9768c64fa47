//! A validated GDN problem: the definition, the bound sizes, and typed views of the input tensors.
//!
//! Validation happens here, once, before any backend does work: every input's presence, dtype and shape
//! (axes bound on first sight and checked everywhere else), `cu_seqlens` (starts at 0, non-decreasing, ends at
//! the token count), pool indices (in range; -1 only as serving-mode padding; no two requests writing the same
//! pool slot), and `scale`. Errors name the tensor and the problem.
//!
//! All three operations share one flat model: `num_seqs` sequences whose tokens are rows of token-major q/k/v
//! (`seq_start(n)..seq_start(n+1)`), each reading one state row and (optionally) writing one.

use crate::definition::{Definition, Op, TensorSpec};
use crate::dtype::DType;
use crate::error::{GdnError, Result};
use crate::tensor::{Tensor, TensorMap};
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
    pub mtp_mode: MtpMode,
}

/// Typed state storage (fp32 per the definitions, or bf16).
#[derive(Copy, Clone, Debug)]
pub enum StateRef<'a> {
    F32(&'a [f32]),
    BF16(&'a [bf16]),
}

/// Typed views of a validated problem's inputs.
#[derive(Clone, Debug)]
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
}

impl Problem {
    /// Validates `tensors` against `def` and binds every axis. No backend work happens before this passes.
    pub fn from_tensors(
        def: &Definition,
        tensors: &TensorMap,
        opts: &RunOptions,
    ) -> Result<Problem> {
        let mut axes: BTreeMap<&'static str, (usize, &'static str)> = BTreeMap::new();
        let mut state_dtype = None;
        let mut intermediate = false;
        let mut scale_in = None;
        for s in def.inputs() {
            let Some(t) = tensors.get(s.name) else {
                if s.optional || s.name == "scale" {
                    continue;
                }
                return Err(GdnError::Missing {
                    tensor: s.name.to_string(),
                });
            };
            check_dtype(&s, t, def)?;
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
                Some(shape) => bind_shape(def, &s, shape, t, &mut axes)?,
            }
            if s.name == def.state_input() {
                state_dtype = Some(t.dtype());
            }
            if s.name == "intermediate_states_buffer" {
                intermediate = true;
            }
        }
        let ax = |a: &str| axes.get(a).map(|x| x.0);
        let dims = match def.op {
            Op::Decode => {
                let b = ax("batch_size").unwrap_or(0);
                Dims {
                    num_seqs: b,
                    seq_len: 1,
                    total_tokens: b,
                    state_rows: b,
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
                    state_rows: n,
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
        let mut p = Problem {
            def: def.clone(),
            dims,
            state_dtype,
            intermediate,
            scale,
            mtp_mode: opts.mtp_mode,
        };
        let cu = tensors.get("cu_seqlens").and_then(Tensor::as_i64);
        p.check_values(
            cu,
            tensors
                .get("initial_state_indices")
                .and_then(Tensor::as_i32),
        )?;
        if let Some(cu) = cu.filter(|_| def.op == Op::Prefill) {
            p.dims.max_seq_len = cu
                .windows(2)
                .map(|w| (w[1] - w[0]) as usize)
                .max()
                .or(Some(0));
        }
        Ok(p)
    }

    /// Checks the values that shapes cannot: `cu_seqlens` and pool indices.
    pub fn check_values(&self, cu_seqlens: Option<&[i64]>, indices: Option<&[i32]>) -> Result<()> {
        if let Some(cu) = cu_seqlens {
            check_cu_seqlens(cu, self.dims.total_tokens)?;
        }
        if let Some(idx) = indices {
            check_indices(
                idx,
                self.dims.state_rows,
                self.writes_pool_rows(),
                self.mtp_mode,
            )?;
        }
        Ok(())
    }

    /// Whether requests write to per-pool-row destinations (so two requests must not share a row).
    pub fn writes_pool_rows(&self) -> bool {
        self.def.op == Op::Mtp && (self.intermediate || self.mtp_mode == MtpMode::Serving)
    }

    /// Typed views of the (already validated) tensors.
    pub fn inputs<'a>(&self, tensors: &'a TensorMap) -> Inputs<'a> {
        let get = |n: &str| tensors.get(n).expect("validated");
        let bf = |n: &str| get(n).as_bf16().expect("validated");
        let f = |n: &str| get(n).as_f32().expect("validated");
        let state = tensors
            .get(self.def.state_input())
            .map(|t| match t.dtype() {
                DType::BF16 => StateRef::BF16(t.as_bf16().expect("validated")),
                _ => StateRef::F32(t.as_f32().expect("validated")),
            });
        let cu_seqlens = match self.def.op {
            Op::Prefill => Cow::Borrowed(get("cu_seqlens").as_i64().expect("validated")),
            _ => Cow::Owned(
                (0..=self.dims.num_seqs)
                    .map(|i| (i * self.dims.seq_len) as i64)
                    .collect(),
            ),
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

    /// Bytes a kernel must move at least: inputs read once, outputs written once.
    pub fn min_bytes(&self) -> u64 {
        let h = &self.def.heads;
        let (t, d) = (self.dims.total_tokens as u64, h.head_size as u64);
        let (nq, nv) = (h.num_q_heads as u64, h.num_v_heads as u64);
        let per_token = 2 * (2 * nq * d + nv * d + 2 * nv) + 2 * nv * d;
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
                let fin = if self.mtp_mode == MtpMode::Serving {
                    rows_touched * row
                } else {
                    0
                };
                inter + fin
            }
            _ => rows_touched * row,
        };
        t * per_token + read + write
    }
}

fn check_dtype(s: &TensorSpec, t: &Tensor, def: &Definition) -> Result<()> {
    let ok = t.dtype() == s.dtype || (s.name == def.state_input() && t.dtype() == DType::BF16);
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

/// Pool indices must be valid rows (or -1 padding in serving mode); with per-row writes, unique.
pub fn check_indices(idx: &[i32], pool: usize, writes_rows: bool, mode: MtpMode) -> Result<()> {
    let name = "initial_state_indices";
    let mut seen = vec![false; pool];
    for (b, &i) in idx.iter().enumerate() {
        if i == -1 && mode == MtpMode::Serving {
            continue;
        }
        if i < 0 || i as usize >= pool {
            let hint = if i == -1 {
                " (-1 padding is allowed only in serving mode)"
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
