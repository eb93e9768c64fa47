//! Tensor descriptors from Python and their validation against a GDN definition.
//!
//! The Python layer turns every torch tensor / NumPy array into a [`Desc`]: raw address, shape, element
//! strides, dtype name and device. Validation here never reads tensor data, so it is the same for host and
//! device tensors: dtype (-> `TypeError`), device, contiguity, alignment (-> `ValueError`), then gdn-core's
//! `Problem::from_tensors` on shape-only stand-ins (empty data; `cu_seqlens`, pool indices and the other
//! integer serving tensors get placeholder values that always pass). The caller checks the real values
//! afterwards where they are on the host ([`crate::host`]); for CUDA tensors they are not checked (that would
//! need a device-to-host copy and a sync).
//!
//! Every tensor must be dense row-major, with two exceptions. A state pool (MTP's `initial_state`, or `state`
//! with `state_indices`) may be a view whose rows (dim 0) are further apart than one state, as a per-layer
//! view of an engine's `[layers, slots, HV, D, D]` or `[slots, layers, HV, D, D]` buffer is; its inner
//! `[HV, D, D]` must be dense. q, k, v and `output` may be views with any token and head strides whose last
//! dimension is contiguous, as slices of an engine's fused projection are ([`act_strides`]; decode and MTP
//! index tokens as one run `b·T + t`, so the batch stride must be T token strides); the kernels take the
//! strides, and the view rules are gdn-cuda's (`check_act_view`) on the host too. Nothing is copied to make a
//! tensor dense: any other layout is refused and the error asks for `.contiguous()`.

use crate::desc::Desc;
use crate::serving;
use gdn_core::definition::TensorSpec;
use gdn_core::serving::names;
use gdn_core::{
    DType, Data, Definition, GdnError, Heads, MtpMode, Op, PadRule, Problem, RunOptions, Serving,
    Tensor, TensorMap,
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
            // gdn-core may say why after the name: "name (reason)"
            let (name, why) = tensor
                .split_once(" (")
                .map_or((&tensor[..], ""), |(n, w)| (n, w));
            let why = why
                .strip_suffix(')')
                .map(|w| format!(" ({w})"))
                .unwrap_or_default();
            ArgError::Value(format!("{f}: argument '{name}' is required{why}"))
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

/// The activation tensors that may be strided views (q, k, v and the output).
pub const ACT: [&str; 4] = ["q", "k", "v", "output"];

/// Whether a descriptor is dense row-major (strides of size-1 dimensions ignored; an empty tensor is).
pub fn is_dense(d: &Desc) -> bool {
    d.numel() == 0 || is_contiguous(d.shape(), &d.2)
}

/// The (token, head) element strides of activation tensor `name` (`[T, H, D]` for prefill, `[B, T, H, D]`
/// for decode and MTP, token `b·T + t`), for a descriptor of the op's rank. The last dimension must be
/// contiguous and the strides non-negative; a 4-D tensor's batch stride must be T token strides. An axis of
/// length 1 gets its dense stride (the kernels never use it).
pub fn act_strides(op: Op, name: &str, d: &Desc) -> Result<[i64; 2], ArgError> {
    let (shape, st) = (d.shape(), &d.2);
    let r = shape.len();
    if st.len() != r || r != qv_rank(op) {
        return Err(value(
            op,
            name,
            format!(
                "must be contiguous (row-major), or a view whose last dimension is contiguous; got shape \
                 {shape:?} with strides {st:?}. Pass {name}.contiguous() (torch) or np.ascontiguousarray({name})"
            ),
        ));
    }
    if shape[r - 1] > 1 && st[r - 1] != 1 {
        return Err(value(
            op,
            name,
            format!(
                "the last dimension (head size) must be contiguous (stride 1), got strides {st:?}; q, k, v and \
                 output may have any token and head strides. Pass {name}.contiguous() (torch) or \
                 np.ascontiguousarray({name})"
            ),
        ));
    }
    if let Some(&s) = st[..r - 1].iter().find(|&&s| s < 0) {
        return Err(value(
            op,
            name,
            format!(
                "strides must be non-negative whole elements, got {st:?} (stride {s}). Pass {name}.contiguous() \
                 (torch) or np.ascontiguousarray({name})"
            ),
        ));
    }
    let (heads, dim) = (shape[r - 2], shape[r - 1] as i64);
    let head = if heads > 1 { st[r - 2] } else { dim };
    let dense_token = heads as i64 * head.max(dim);
    let token = match *shape {
        [t, _, _] => {
            if t > 1 {
                st[0]
            } else {
                dense_token
            }
        }
        [b, t, _, _] => match (b > 1, t > 1) {
            (true, true) => {
                if st[0] != t as i64 * st[1] {
                    return Err(value(
                        op,
                        name,
                        format!(
                            "batch stride {} must be seq_len x token stride ({t} x {} = {}): gdn reads token t of \
                             request b at row b·T + t; got strides {st:?}",
                            st[0],
                            st[1],
                            t as i64 * st[1]
                        ),
                    ));
                }
                st[1]
            }
            (true, false) => st[0],
            (false, true) => st[1],
            (false, false) => dense_token,
        },
        _ => unreachable!("rank checked"),
    };
    Ok([token, head])
}

/// A strided activation view: its (token, head) strides, checked against the kernels' view rules (gdn-cuda's
/// `check_act_view`: multiples of 8 elements, an output whose rows do not overlap).
fn check_act_view(op: Op, name: &str, d: &Desc) -> Result<(), ArgError> {
    let strides = act_strides(op, name, d)?;
    let shape = d.shape();
    let r = shape.len();
    let tokens = shape[..r - 2].iter().product();
    gdn_cuda::abi::args::check_act_view(
        name,
        strides,
        tokens,
        shape[r - 2],
        shape[r - 1],
        name == "output",
    )
    .map_err(|e| gdn_err(op, e))
}

/// Dtype, device, contiguity and alignment of one tensor argument; returns its device. `pool`: the tensor is
/// a state pool, whose rows (dim 0) may be further apart than one dense row; q, k, v and `output` may be
/// strided views (see the module doc).
pub fn check_tensor(
    op: Op,
    name: &str,
    d: &Desc,
    want: &[DType],
    pool: bool,
) -> Result<Device, ArgError> {
    let Some(dt) = d.dtype().filter(|t| want.contains(t)) else {
        let names: Vec<&str> = want.iter().map(|t| t.name()).collect();
        let hint = if name == names::HAS_INITIAL_STATE && d.3 == "bool" {
            // The host path converts bool itself (gdn/__init__.py); on CUDA that would need a launch.
            " (on CUDA gdn reads it in place as int32 [N] and does not convert: pass has_initial_state.int())"
        } else {
            ""
        };
        return Err(ArgError::Type(format!(
            "gdn.{}: argument '{name}': expected dtype {}, got {}{hint}",
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
        // Device kernels use 16-byte vector accesses, except on the serving index tensors, which they read one
        // element at a time (engines pass slices of larger index buffers); host slices need element alignment.
        let align = if dev == Device::Host || serving::SCALAR_READ.contains(&name) {
            dt.size()
        } else {
            16
        };
        if !is_contiguous(d.shape(), &d.2) && ACT.contains(&name) {
            check_act_view(op, name, d)?;
        } else if !is_contiguous(d.shape(), &d.2) {
            let rows_ok = pool && d.shape().len() > 1 && is_contiguous(&d.1[1..], &d.2[1..]) && {
                let (stride, dense) = (d.2[0], d.1[1..].iter().product::<usize>() as i64);
                stride >= dense && (stride as u64 * dt.size() as u64).is_multiple_of(align as u64)
            };
            if !rows_ok {
                let what = match (pool, name) {
                    (true, _) => "must be contiguous (row-major) apart from its row stride (dim 0), which must \
                                  be at least one state row and keep every row aligned",
                    (false, "state") => "must be contiguous (row-major; a state pool view with a larger row \
                                         stride is accepted with state_indices)",
                    _ => "must be contiguous (row-major)",
                };
                return Err(value(
                    op,
                    name,
                    format!(
                        "{what}; got shape {:?} with strides {:?}. gdn reads tensors in place and never copies: \
                         pass {name}.contiguous() (torch) or np.ascontiguousarray({name})",
                        d.shape(),
                        d.2
                    ),
                ));
            }
        }
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
    /// The options the problem was validated with (the host path validates the real index values with them).
    pub opts: RunOptions,
}

impl Checked {
    pub fn get(&self, name: &str) -> Option<&Desc> {
        self.inputs.iter().find(|(n, _)| *n == name).map(|(_, d)| d)
    }
}

/// The raw gate inputs, which precomputed gates (`g` or `alpha`, with `beta`) replace.
const RAW_GATES: [&str; 4] = ["A_log", "a", "dt_bias", "b"];

/// Validates the inputs of `op` and builds the problem. `given` holds the tensor inputs in the
/// definition's order without `scale`, then the serving tensors in [`serving::INPUTS`] order (`None` =
/// absent); q is first and v third for every op. `update_pool`: MTP writes the final states back to the pool;
/// `sv`: the serving options.
pub fn check_inputs(
    op: Op,
    given: Vec<Option<Desc>>,
    scale: Option<f32>,
    update_pool: bool,
    sv: Serving,
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
    let n_def = specs.len();
    if given.len() != n_def + serving::INPUTS.len() {
        return Err(ArgError::Value(format!(
            "gdn.{}: expected {} tensor arguments ({n_def} of the definition, {} serving tensors), got {}",
            op.name(),
            n_def + serving::INPUTS.len(),
            serving::INPUTS.len(),
            given.len()
        )));
    }
    let given_named = |name: &str| {
        let i = serving::INPUTS
            .iter()
            .position(|n| *n == name)
            .expect("a serving input");
        given[n_def + i].is_some()
    };
    let precomputed = given_named(names::G) || given_named(names::ALPHA);
    let pool_given = given_named(names::STATE_INDICES);
    let ctx = StandIn {
        update_pool,
        distinct: specs
            .iter()
            .zip(&given)
            .any(|(s, d)| s.name == "intermediate_states_buffer" && d.is_some()),
        total_tokens: q_rows,
        checkpoint_rows: q_rows.checked_div(sv.checkpoint_every).unwrap_or(0),
    };
    // (name, optional, accepted dtypes, may be a row-strided pool) of every tensor, in `given` order
    let roles = specs
        .iter()
        .map(|s| {
            let pool = s.name == def.state_input() && (op == Op::Mtp || pool_given);
            (s.name, s.optional, allowed(&def, s), pool)
        })
        .chain(
            serving::INPUTS
                .iter()
                .map(|&n| (n, true, serving::allowed(n).to_vec(), false)),
        );
    let mut device: Option<(Device, &str)> = None;
    let mut inputs = Vec::with_capacity(n_def);
    let mut stand_ins = TensorMap::new();
    let mut checkpoint_rows = None;
    for ((name, optional, want, pool), d) in roles.zip(given) {
        let Some(d) = d else {
            let replaced = precomputed && RAW_GATES.contains(&name);
            if !(optional || replaced) {
                return Err(value(op, name, "is required (got None)"));
            }
            continue;
        };
        let dev = check_tensor(op, name, &d, &want, pool)?;
        match device {
            None => device = Some((dev, name)),
            Some((first, from)) if first != dev => {
                return Err(value(
                    op,
                    name,
                    format!(
                        "is on {} but '{from}' is on {}: all tensors must be on one device",
                        dev.name(),
                        first.name()
                    ),
                ))
            }
            _ => {}
        }
        if name == names::CHECKPOINTS {
            checkpoint_rows = d.shape().first().copied();
        }
        stand_ins.insert(name.to_string(), stand_in(name, &d, &ctx));
        inputs.push((name, d));
    }
    let opts = RunOptions {
        scale,
        mtp_mode: if update_pool {
            MtpMode::Serving
        } else {
            MtpMode::Definition
        },
        serving: sv,
    };
    let mut problem = Problem::from_tensors(&def, &stand_ins, &opts).map_err(|e| gdn_err(op, e))?;
    if let Some(rows) = checkpoint_rows.filter(|_| problem.checkpoint_rows > 0) {
        problem.checkpoint_rows = rows; // the stand-in had at least the rows its stand-in lengths need
    }
    let indexed = problem.pool || problem.def.op == Op::Mtp;
    if sv.pad != PadRule::Negative && !indexed {
        return Err(value(
            op,
            "pad",
            "a padding rule applies to pool indices: state_indices (decode, prefill) or MTP's initial_state_indices",
        ));
    }
    Ok(Checked {
        problem,
        inputs,
        device: device.map(|d| d.0).unwrap_or(Device::Host),
        opts,
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

/// The dtypes accepted for an input: the definition's, plus fp16 for the bf16 activation tensors (q, k, v, a,
/// b), bf16 and fp16 for the state (16-bit-state extensions) and int32 for `cu_seqlens`. That q, k, v, a, b
/// share one dtype, and the other consistency rules, are gdn-core's (errors name the tensor).
fn allowed(def: &Definition, s: &TensorSpec) -> Vec<DType> {
    if s.name == def.state_input() {
        vec![DType::F32, DType::BF16, DType::F16]
    } else if s.name == "cu_seqlens" {
        vec![DType::I64, DType::I32]
    } else if s.dtype == DType::BF16 {
        vec![DType::BF16, DType::F16]
    } else {
        vec![s.dtype]
    }
}

/// What the stand-in values depend on.
struct StandIn {
    /// MTP writes the pool (padding is valid).
    update_pool: bool,
    /// MTP requests write their own intermediate rows (indices must be distinct).
    distinct: bool,
    total_tokens: usize,
    /// Checkpoint rows the stand-in lengths need (`total_tokens / checkpoint_every`).
    checkpoint_rows: usize,
}

/// Integer data of `dtype` (I32 or I64).
fn int_data(dtype: DType, values: impl Iterator<Item = i64>) -> Data {
    match dtype {
        DType::I32 => Data::I32(values.map(|x| x as i32).collect()),
        _ => Data::I64(values.collect()),
    }
}

/// A data-less tensor with the descriptor's shape and dtype. The integer tensors carry placeholder values
/// that always pass gdn-core's value checks (their real values are checked separately, on the host): one
/// sequence holding every token, pool indices that are all padding, checkpoint rows for that one sequence.
fn stand_in(name: &str, d: &Desc, c: &StandIn) -> Tensor {
    let mut shape = d.shape().to_vec();
    let n = d.numel();
    let dtype = d.dtype().expect("checked");
    let data = match (name, dtype) {
        ("cu_seqlens", _) => {
            // [0, T, T, ..., T]: starts at 0, non-decreasing, ends at the token count bound from q.
            let t = c.total_tokens as i64;
            int_data(dtype, (0..n).map(|i| if i == 0 { 0 } else { t }))
        }
        ("initial_state_indices", _) if shape.len() == 2 => {
            Data::I32(vec![-1; n]) // spec-decode slots: every request padded
        }
        ("initial_state_indices", _) => {
            // -1 (padding) is always valid in serving mode; otherwise row 0, or rows 0..B where each request
            // writes its own row (intermediate states), which needs B <= pool_size anyway.
            let idx = |i: i32| match (c.update_pool, c.distinct) {
                (true, _) => -1,
                (false, true) => i,
                (false, false) => 0,
            };
            Data::I32((0..n as i32).map(idx).collect())
        }
        (names::STATE_INDICES, _) => int_data(dtype, (0..n).map(|_| -1)),
        (names::HAS_INITIAL_STATE | names::NUM_ACCEPTED, _) => Data::I32(vec![1; n]),
        (names::CHECKPOINT_STARTS, _) => {
            let m = c.checkpoint_rows as i64;
            int_data(dtype, (0..n).map(|i| if i == 0 { 0 } else { m }))
        }
        (_, DType::BF16) => Data::BF16(Vec::new()),
        (_, DType::F16) => Data::F16(Vec::new()),
        (_, DType::F32) => Data::F32(Vec::new()),
        (_, DType::I32) => Data::I32(Vec::new()),
        (_, DType::I64) => Data::I64(Vec::new()),
    };
    if name == names::CHECKPOINTS && !shape.is_empty() {
        shape[0] = shape[0].max(c.checkpoint_rows);
    }
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
    let dev = check_tensor(op, name, d, &[dtype], false)?;
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

    fn desc(shape: &[usize], strides: &[i64]) -> Desc {
        Desc(0, shape.into(), strides.into(), "bfloat16".into(), 0)
    }

    #[test]
    fn activation_view_strides() {
        let s = |op, shape: &[usize], st: &[i64]| act_strides(op, "q", &desc(shape, st)).ok();
        // dense, a fused-projection view, a broadcast head
        assert_eq!(
            s(Op::Prefill, &[5, 4, 128], &[512, 128, 1]),
            Some([512, 128])
        );
        assert_eq!(
            s(Op::Prefill, &[5, 4, 128], &[2048, 128, 1]),
            Some([2048, 128])
        );
        assert_eq!(s(Op::Prefill, &[5, 4, 128], &[2048, 0, 1]), Some([2048, 0]));
        // decode: T = 1, the batch stride is the token stride; a length-1 axis's stride is never used
        assert_eq!(
            s(Op::Decode, &[3, 1, 4, 128], &[2048, 7, 128, 1]),
            Some([2048, 128])
        );
        assert_eq!(
            s(Op::Decode, &[1, 1, 4, 128], &[3, 5, 128, 1]),
            Some([512, 128])
        );
        // MTP: the batch stride must be T token strides
        assert_eq!(
            s(Op::Mtp, &[3, 2, 4, 128], &[4096, 2048, 128, 1]),
            Some([2048, 128])
        );
        assert_eq!(
            s(Op::Mtp, &[1, 2, 4, 128], &[9, 2048, 128, 1]),
            Some([2048, 128])
        );
        assert!(s(Op::Mtp, &[3, 2, 4, 128], &[6144, 2048, 128, 1]).is_none());
        // a strided last dimension, negative strides, the wrong rank
        assert!(s(Op::Prefill, &[5, 4, 128], &[1024, 256, 2]).is_none());
        assert!(s(Op::Prefill, &[5, 4, 128], &[-512, 128, 1]).is_none());
        assert!(s(Op::Prefill, &[5, 4, 1, 128], &[512, 128, 128, 1]).is_none());
    }

    #[test]
    fn activation_view_rules() {
        let ok = |name: &str, shape: &[usize], st: &[i64]| {
            check_act_view(Op::Prefill, name, &desc(shape, st)).is_ok()
        };
        assert!(ok("q", &[5, 4, 128], &[2048, 128, 1]));
        assert!(!ok("q", &[5, 4, 128], &[2052, 128, 1])); // not 16-byte rows
        assert!(ok("q", &[5, 4, 128], &[64, 0, 1])); // inputs may overlap

        // the output: token-major, head-major, overlapping
        assert!(ok("output", &[5, 4, 128], &[520, 128, 1]));
        assert!(ok("output", &[5, 4, 128], &[128, 640, 1]));
        assert!(ok("output", &[5, 4, 128], &[136, 1024, 1]));
        assert!(!ok("output", &[5, 4, 128], &[504, 128, 1]));
        assert!(!ok("output", &[5, 4, 128], &[128, 632, 1]));
        assert!(!ok("output", &[5, 4, 128], &[1024, 64, 1]));
        assert!(ok("output", &[1, 4, 128], &[0, 128, 1])); // one token: its stride is never used
    }

    #[test]
    fn contiguity_ignores_unit_dims() {
        assert!(is_contiguous(&[4, 1, 8, 128], &[1024, 7, 128, 1]));
        assert!(!is_contiguous(&[4, 2, 8], &[16, 1, 2]));
        assert!(is_contiguous(&[], &[]));
    }
}
