//! Tensor descriptors from Python and their validation against a GDN definition.
//!
//! The Python layer turns every torch tensor / NumPy array into a [`Desc`]: raw address, shape, element
//! strides, dtype name and device. Validation here never reads tensor data, so it is the same for host and
//! device tensors: dtype (-> `TypeError`), device, contiguity, alignment (-> `ValueError`), then gdn-core's
//! `Problem::from_tensors` on shape-only stand-ins (empty data; `cu_seqlens` and pool indices get placeholder
//! values that always pass). The caller checks the real values afterwards where they are on the host
//! ([`crate::host`]); for CUDA tensors they are not checked (that would need a device-to-host copy and a sync).

use crate::desc::Desc;
use gdn_core::definition::TensorSpec;
use gdn_core::{
    DType, Data, Definition, GdnError, Heads, MtpMode, Op, Problem, RunOptions, Tensor, TensorMap,
};
use pyo3::exceptions::{PyNotImplementedError, PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;

/// Where a call runs: on the host (CPU backend) or on one CUDA device.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Device {
    Host,
    Cuda(i32),
}

impl Device {
    fn name(self) -> String {
        match self {
            Device::Host => "cpu".into(),
            Device::Cuda(i) => format!("cuda:{i}"),
        }
    }
}

/// An error for one argument of one call, mapped onto the Python exception class it must raise.
pub enum ArgError {
    Type(String),
    Value(String),
    Runtime(String),
    /// A configuration the backend does not support: `NotImplementedError` (a `RuntimeError`).
    Unsupported(String),
}

impl From<ArgError> for PyErr {
    fn from(e: ArgError) -> PyErr {
        match e {
            ArgError::Type(m) => PyTypeError::new_err(m),
            ArgError::Value(m) => PyValueError::new_err(m),
            ArgError::Runtime(m) => PyRuntimeError::new_err(m),
            ArgError::Unsupported(m) => PyNotImplementedError::new_err(m),
        }
    }
}

/// Maps a gdn-core error onto Python's classes, prefixed with the function and naming the argument.
pub fn gdn_err(op: Op, e: GdnError) -> ArgError {
    let f = format!("gdn.{}", op.name());
    match e {
        GdnError::DType {
            tensor,
            expected,
            got,
        } => ArgError::Type(format!(
            "{f}: argument '{tensor}': expected dtype {expected}, got {got}"
        )),
        GdnError::Shape { tensor, problem } | GdnError::Value { tensor, problem } => {
            ArgError::Value(format!("{f}: argument '{tensor}': {problem}"))
        }
        GdnError::Missing { tensor } => {
            ArgError::Value(format!("{f}: argument '{tensor}' is required"))
        }
        GdnError::Definition { problem, .. } => ArgError::Value(format!("{f}: {problem}")),
        GdnError::Unsupported(why) => ArgError::Unsupported(format!("{f}: not supported: {why}")),
        other => ArgError::Runtime(format!("{f}: {other}")),
    }
}

fn value(op: Op, arg: &str, problem: impl std::fmt::Display) -> ArgError {
    ArgError::Value(format!("gdn.{}: argument '{arg}': {problem}", op.name()))
}

/// Rank of q and v for each op (the definitions' layouts).
fn qv_rank(op: Op) -> usize {
    if op == Op::Prefill {
        3
    } else {
        4
    }
}

/// Head configuration read from q (`H`, `D`) and v (`HV`).
fn heads_of(op: Op, q: &Desc, v: &Desc) -> Result<Heads, ArgError> {
    let r = qv_rank(op);
    for (name, d) in [("q", q), ("v", v)] {
        if d.shape().len() != r {
            return Err(value(
                op,
                name,
                format!("expected rank {r}, got shape {:?}", d.shape()),
            ));
        }
    }
    let (h, dim, hv) = (q.1[r - 2], q.1[r - 1], v.1[r - 2]);
    Heads::new(h, hv, dim).map_err(|e| match e {
        GdnError::Definition { problem, .. } => value(
            op,
            "v",
            format!("head configuration qk{h}_v{hv}_d{dim} from q and v: {problem}"),
        ),
        e => gdn_err(op, e),
    })
}

/// Contiguous row-major (strides of size-1 dimensions are ignored, as torch does).
fn is_contiguous(shape: &[usize], strides: &[i64]) -> bool {
    if shape.len() != strides.len() {
        return false;
    }
    let mut want: i64 = 1;
    for (&n, &s) in shape.iter().zip(strides).rev() {
        if n != 1 && s != want {
            return false;
        }
        want *= n as i64;
    }
    true
}

/// Dtype, device, contiguity and alignment of one tensor argument; returns its device.
pub fn check_tensor(op: Op, name: &str, d: &Desc, want: &[DType]) -> Result<Device, ArgError> {
    let Some(dt) = d.dtype().filter(|t| want.contains(t)) else {
        let names: Vec<&str> = want.iter().map(|t| t.name()).collect();
        return Err(ArgError::Type(format!(
            "gdn.{}: argument '{name}': expected dtype {}, got {}",
            op.name(),
            names.join(" or "),
            d.3
        )));
    };
    let dev = match d.device() {
        -1 => Device::Host,
        i if i >= 0 => Device::Cuda(i as i32),
        _ => {
            return Err(value(
                op,
                name,
                "tensors must be on the CPU or a CUDA device",
            ))
        }
    };
    if d.numel() > 0 {
        if !is_contiguous(d.shape(), &d.2) {
            return Err(value(
                op,
                name,
                format!(
                    "must be contiguous (row-major), got shape {:?} with strides {:?}",
                    d.shape(),
                    d.2
                ),
            ));
        }
        // Device kernels use 16-byte vector accesses; host slices need element alignment.
        let align = if dev == Device::Host { dt.size() } else { 16 };
        if !d.ptr().is_multiple_of(align as u64) {
            return Err(value(
                op,
                name,
                format!("data address must be {align}-byte aligned"),
            ));
        }
    }
    Ok(dev)
}

/// A validated call: the problem, the input descriptors by definition name, and the device.
pub struct Checked {
    pub problem: Problem,
    pub inputs: Vec<(&'static str, Desc)>,
    pub device: Device,
}

impl Checked {
    pub fn get(&self, name: &str) -> Option<&Desc> {
        self.inputs.iter().find(|(n, _)| *n == name).map(|(_, d)| d)
    }
}

/// Validates the inputs of `op` and builds the problem. `given` holds the tensor inputs in the
/// definition's order without `scale` (`None` = absent); q is first and v third for every op.
pub fn check_inputs(
    op: Op,
    given: Vec<Option<Desc>>,
    scale: Option<f32>,
    serving: bool,
) -> Result<Checked, ArgError> {
    let (q, v) = match (given.first(), given.get(2)) {
        (Some(Some(q)), Some(Some(v))) => (q, v),
        _ => return Err(value(op, "q", "q, k and v are required")),
    };
    let def = Definition::new(op, heads_of(op, q, v)?);
    let q_rows = q.1[0];
    let specs: Vec<TensorSpec> = def
        .inputs()
        .into_iter()
        .filter(|s| s.name != "scale")
        .collect();
    if given.len() != specs.len() {
        return Err(ArgError::Value(format!(
            "gdn.{}: expected {} tensor arguments, got {}",
            op.name(),
            specs.len(),
            given.len()
        )));
    }
    let distinct = specs
        .iter()
        .zip(&given)
        .any(|(s, d)| s.name == "intermediate_states_buffer" && d.is_some());
    let mut device: Option<(Device, &str)> = None;
    let mut inputs = Vec::with_capacity(specs.len());
    let mut stand_ins = TensorMap::new();
    for (s, d) in specs.iter().zip(given) {
        let Some(d) = d else {
            if !s.optional {
                return Err(value(op, s.name, "is required (got None)"));
            }
            continue;
        };
        let dev = check_tensor(op, s.name, &d, &allowed(&def, s))?;
        match device {
            None => device = Some((dev, s.name)),
            Some((first, from)) if first != dev => {
                return Err(value(
                    op,
                    s.name,
                    format!(
                        "is on {} but '{from}' is on {}: all tensors must be on one device",
                        dev.name(),
                        first.name()
                    ),
                ))
            }
            _ => {}
        }
        stand_ins.insert(
            s.name.to_string(),
            stand_in(s.name, &d, serving, distinct, q_rows),
        );
        inputs.push((s.name, d));
    }
    let opts = RunOptions {
        scale,
        mtp_mode: if serving {
            MtpMode::Serving
        } else {
            MtpMode::Definition
        },
        ..Default::default()
    };
    let problem = Problem::from_tensors(&def, &stand_ins, &opts).map_err(|e| gdn_err(op, e))?;
    Ok(Checked {
        problem,
        inputs,
        device: device.map(|d| d.0).unwrap_or(Device::Host),
    })
}

/// Sets a prefill call's host-side length hint (`Dims::max_seq_len`): the stand-in `cu_seqlens` values say
/// nothing about the real lengths, so without a hint the planner is told nothing. A hint above the token
/// count cannot be right and is refused; one below the true longest length cannot be detected without
/// reading `cu_seqlens` (a sync), and only costs speed.
pub fn set_length_hint(c: &mut Checked, hint: Option<usize>) -> Result<(), ArgError> {
    let p = &mut c.problem;
    if p.def.op != Op::Prefill {
        if hint.is_some() {
            return Err(value(p.def.op, "max_seqlen", "is a prefill argument"));
        }
        return Ok(());
    }
    if let Some(h) = hint.filter(|&h| h > p.dims.total_tokens) {
        return Err(value(
            Op::Prefill,
            "max_seqlen",
            format!("{h} exceeds the {} tokens of the call", p.dims.total_tokens),
        ));
    }
    p.dims.max_seq_len = hint;
    Ok(())
}

/// The dtypes accepted for an input: the definition's, plus bf16 for the state (bf16-state extension).
fn allowed(def: &Definition, s: &TensorSpec) -> Vec<DType> {
    if s.name == def.state_input() {
        vec![DType::F32, DType::BF16]
    } else {
        vec![s.dtype]
    }
}

/// A data-less tensor with the descriptor's shape and dtype. `cu_seqlens` and pool indices carry placeholder
/// values that always pass gdn-core's value checks (their real values are checked separately).
fn stand_in(name: &str, d: &Desc, serving: bool, distinct: bool, total_tokens: usize) -> Tensor {
    let shape = d.shape().to_vec();
    let n = d.numel();
    let data = match (name, d.dtype().expect("checked")) {
        ("cu_seqlens", _) => {
            // [0, T, T, ..., T]: starts at 0, non-decreasing, ends at the token count bound from q.
            let t = total_tokens as i64;
            Data::I64((0..n).map(|i| if i == 0 { 0 } else { t }).collect())
        }
        ("initial_state_indices", _) => {
            // -1 (padding) is always valid in serving mode; otherwise row 0, or rows 0..B where each request
            // writes its own row (intermediate states), which needs B <= pool_size anyway.
            let idx = |i: i32| match (serving, distinct) {
                (true, _) => -1,
                (false, true) => i,
                (false, false) => 0,
            };
            Data::I32((0..n as i32).map(idx).collect())
        }
        (_, DType::BF16) => Data::BF16(Vec::new()),
        (_, DType::F32) => Data::F32(Vec::new()),
        (_, DType::I32) => Data::I32(Vec::new()),
        (_, DType::I64) => Data::I64(Vec::new()),
    };
    Tensor { shape, data }
}

/// Checks a destination tensor: dtype, device, contiguity, alignment, exact shape.
pub fn check_dest(
    c: &Checked,
    name: &str,
    d: &Desc,
    dtype: DType,
    shape: &[usize],
) -> Result<(), ArgError> {
    let op = c.problem.def.op;
    let dev = check_tensor(op, name, d, &[dtype])?;
    if dev != c.device {
        return Err(value(
            op,
            name,
            format!(
                "is on {} but the inputs are on {}",
                dev.name(),
                c.device.name()
            ),
        ));
    }
    if d.shape() != shape {
        return Err(value(
            op,
            name,
            format!("expected shape {shape:?}, got {:?}", d.shape()),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contiguity_ignores_unit_dims() {
        assert!(is_contiguous(&[4, 1, 8, 128], &[1024, 7, 128, 1]));
        assert!(!is_contiguous(&[4, 2, 8], &[16, 1, 2]));
        assert!(is_contiguous(&[], &[]));
    }
}
