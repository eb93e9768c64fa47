//! `gdn._gdn`: the Rust half of the Python module `gdn` (python/gdn/__init__.py is the public API).
//!
//! `gdn.decode`, `gdn.prefill` and `gdn.mtp` first call their entry point here ([`entry`]) with their
//! arguments as given: a call with its destinations given runs in one step from there, serving modes included.
//! The rest goes through the Python layer's general path, which calls `call` / `plan` below.
//!
//! A call is one step when the caller passed every destination and it needs no workspace (decode, MTP, and
//! prefill on its one-launch plans): `call(op, inputs, names, scale, serving, max_seq_len, output, state_out,
//! extra, options)` validates, launches on torch's current stream (or runs on the host) and returns None.
//! Otherwise it is two steps, so that Python can allocate between them: `call` (or `plan`) returns a [`Plan`]
//! that knows the output shapes and the device workspace the call needs (`workspace_bytes`: non-zero only for
//! the multi-kernel prefill plans: chunk64, cp, the device plan), and `Plan.run(output, state_out, stream,
//! workspace)` validates the destinations and runs.
//! `serving` (a bool) is MTP's `update_pool`; `extra` carries the serving tensors ([`serving::INPUTS`], None
//! when the call uses none) and `options` the serving options ([`serving::options`]).
//! No allocation and no sync here in either form. Tensors are described by [`objects`]: torch CUDA tensors
//! directly, everything else through the Python layer.

mod args;
mod desc;
mod device;
mod dlpack;
mod entry;
mod host;
mod memo;
mod objects;
mod serving;

use args::{check_dest, ArgError, Checked, Device};
use desc::Desc;
use gdn_core::Op;
use gdn_cuda::PrefillPlan;
use pyo3::prelude::*;
use pyo3::types::PyTuple;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

fn parse_op(op: &str) -> PyResult<Op> {
    match op {
        "decode" => Ok(Op::Decode),
        "prefill" => Ok(Op::Prefill),
        "mtp" => Ok(Op::Mtp),
        _ => Err(pyo3::exceptions::PyValueError::new_err(format!(
            "gdn: unknown operation '{op}'"
        ))),
    }
}

/// A validated call, waiting for its destinations.
#[pyclass(frozen, module = "gdn._gdn")]
struct Plan {
    c: Checked,
    /// The prefill plan on the device, once asked for (`workspace_bytes`, or `call` before it returned this).
    prefill: OnceLock<Option<PrefillPlan>>,
}

impl Plan {
    fn new(c: Checked, prefill: Option<Option<PrefillPlan>>) -> Plan {
        let cell = OnceLock::new();
        if let Some(p) = prefill {
            let _ = cell.set(p);
        }
        Plan { c, prefill: cell }
    }
}

#[pymethods]
impl Plan {
    /// Shape of `output`.
    #[getter]
    fn output_shape(&self) -> Vec<usize> {
        self.c.problem.output_shape()
    }
    /// Shape of the state output (`new_state` / `final_state`).
    #[getter]
    fn state_shape(&self) -> Vec<usize> {
        self.c.problem.state_shape()
    }
    /// dtype name of the state output (`float32`, or the state's: `bfloat16` / `float16`).
    #[getter]
    fn state_dtype(&self) -> &'static str {
        self.c.problem.state_out_dtype().name()
    }
    /// -1 for the host, else the CUDA device index.
    #[getter]
    fn device(&self) -> i64 {
        match self.c.device {
            Device::Host => -1,
            Device::Cuda(i) => i as i64,
        }
    }
    /// The resolved scale (never 0).
    #[getter]
    fn scale(&self) -> f32 {
        self.c.problem.scale
    }

    /// Bytes of device workspace `run` needs (a CUDA uint8 tensor of the inputs' device): 0 on the host and
    /// for every plan but the multi-kernel prefill plans (chunk64, cp, the device plan). Opens the device on first use.
    #[getter]
    fn workspace_bytes(&self, py: Python<'_>) -> PyResult<u64> {
        match self.c.device {
            Device::Host => Ok(0),
            Device::Cuda(dev) => {
                if self.prefill.get().is_none() {
                    let plan = py.detach(|| device::prefill_plan(&self.c, dev))?;
                    let _ = self.prefill.set(plan);
                }
                Ok(self
                    .prefill
                    .get()
                    .and_then(Option::as_ref)
                    .map_or(0, PrefillPlan::workspace_bytes))
            }
        }
    }

    /// Checks the destinations and runs. `output`, `state_out`, `workspace`: tensors, arrays or descriptor
    /// tuples. `state_out` is None only for MTP in definition mode (pool not updated); a call that updates a
    /// pool in place (MTP serving mode, decode / prefill with `state_indices`) takes the pool itself. `stream`: the CUDA stream handle, None for torch's current stream (ignored on the
    /// host). `workspace`: a uint8 tensor of at least `workspace_bytes` bytes on the inputs' CUDA device, or
    /// None when that is 0 (the launch checks its size and 256-byte alignment).
    #[pyo3(signature = (output, state_out, stream=None, workspace=None))]
    fn run(
        &self,
        py: Python<'_>,
        output: &Bound<'_, PyAny>,
        state_out: Option<&Bound<'_, PyAny>>,
        stream: Option<u64>,
        workspace: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let c = &self.c;
        let (output, state_out) = destinations(py, c, output, state_out)?;
        let workspace = match workspace {
            Some(w) => {
                let w = objects::describe(
                    py,
                    w,
                    || Ok("workspace".into()),
                    c.problem.def.op.name(),
                    true,
                )?;
                check_workspace(c, &w)?;
                Some(w)
            }
            None => None,
        };
        let stream = match (stream, c.device) {
            (Some(s), _) => s,
            (None, Device::Host) => 0,
            (None, Device::Cuda(dev)) => objects::current_stream(py, dev)?,
        };
        let plan = self.prefill.get().and_then(Option::as_ref);
        execute(
            py,
            c,
            &output,
            state_out.as_ref(),
            workspace.as_ref(),
            stream,
            plan,
        )
    }
}

/// Describes and checks a call's destinations: `output` and the state output (`state_out` None only for MTP
/// in definition mode). A call that updates a pool in place (`state_indices`, MTP's `update_pool` or spec-decode
/// slots) takes the pool itself as its state output, strided rows included.
fn destinations(
    py: Python<'_>,
    c: &Checked,
    output: &Bound<'_, PyAny>,
    state_out: Option<&Bound<'_, PyAny>>,
) -> PyResult<(Desc, Option<Desc>)> {
    let p = &c.problem;
    let op = p.def.op;
    let output = objects::describe(py, output, || Ok("output".into()), op.name(), true)?;
    // the output has the dtype of q, k and v (bf16 or fp16)
    check_dest(c, "output", &output, p.act_dtype, &p.output_shape())?;
    let in_place = p.pool || (op == Op::Mtp && p.mtp_mode == gdn_core::MtpMode::Serving);
    let state_name = if p.pool {
        "new_state"
    } else {
        p.def.state_output()
    };
    let state_out = match (state_out, op) {
        (Some(d), _) if in_place => {
            let d = objects::describe(py, d, || Ok(state_name.into()), op.name(), true)?;
            let pool = c.get(p.def.state_input());
            let same = pool.is_some_and(|s| {
                s.0 == d.0 && s.1 == d.1 && s.2 == d.2 && s.3 == d.3 && s.4 == d.4
            });
            if !same {
                return Err(ArgError::Value(format!(
                    "gdn.{}: argument '{state_name}': the pool is updated in place; pass the pool itself \
                     ('{}') or None",
                    op.name(),
                    p.def.state_input()
                ))
                .into());
            }
            Some(d)
        }
        (Some(d), _) => {
            let d = objects::describe(py, d, || Ok(state_name.into()), op.name(), true)?;
            check_dest(c, state_name, &d, p.state_out_dtype(), &p.state_shape())?;
            Some(d)
        }
        (None, Op::Mtp) if !in_place => None,
        (None, _) => {
            return Err(ArgError::Value(format!("gdn: '{state_name}' destination missing")).into())
        }
    };
    Ok((output, state_out))
}

/// Runs a validated call on the host, or launches it on `stream` of its CUDA device (the GIL released;
/// `plan`: its prefill plan, when already chosen).
fn execute(
    py: Python<'_>,
    c: &Checked,
    output: &Desc,
    state_out: Option<&Desc>,
    workspace: Option<&Desc>,
    stream: u64,
    plan: Option<&PrefillPlan>,
) -> PyResult<()> {
    if SKIP_RUN.load(Ordering::Relaxed) {
        return Ok(());
    }
    let r = match c.device {
        Device::Host => py.detach(|| host::run(c, output, state_out)),
        Device::Cuda(dev) => {
            let launch = || device::run(c, dev, output, state_out, workspace, stream, plan);
            gil_free_until_open(py, dev, launch)
        }
    };
    r.map_err(Into::into)
}

/// Runs `f` with the GIL released while device `dev` is not open yet (opening compiles for seconds); on an
/// open device it only launches, which takes a microsecond or two: it keeps the GIL, as torch's ops do.
fn gil_free_until_open<T: Send>(py: Python<'_>, dev: i32, f: impl FnOnce() -> T + Send) -> T {
    if device::is_open(dev) {
        f()
    } else {
        py.detach(f)
    }
}

/// Set by `_gdn._skip_run`: calls stop before the launch (or the host computation).
static SKIP_RUN: AtomicBool = AtomicBool::new(false);

/// A measurement hook: with `skip` True every call does everything but the launch (or the host computation)
/// and writes nothing, so that the host cost of the binding can be measured without a GPU (torch CPU tensors
/// take the same describing and validation path as CUDA ones). Never set by gdn itself.
#[pyfunction]
fn _skip_run(skip: bool) {
    SKIP_RUN.store(skip, Ordering::Relaxed);
}

/// A workspace tensor: uint8, contiguous, on the inputs' CUDA device (size and alignment are checked by
/// the launch, against the plan).
fn check_workspace(c: &Checked, w: &Desc) -> Result<(), ArgError> {
    let f = format!("gdn.{}", c.problem.def.op.name());
    if w.3 != "uint8" {
        return Err(ArgError::Type(format!(
            "{f}: argument 'workspace': expected dtype uint8, got {}",
            w.3
        )));
    }
    if c.device == Device::Host || w.device() != i64::from(device_index(c.device)) {
        return Err(ArgError::Value(format!(
            "{f}: argument 'workspace': must be on the inputs' CUDA device"
        )));
    }
    if w.shape().len() != 1 || w.2.first().is_some_and(|&s| s != 1 && w.numel() > 1) {
        return Err(ArgError::Value(format!(
            "{f}: argument 'workspace': must be a contiguous 1-D tensor, got shape {:?}",
            w.shape()
        )));
    }
    Ok(())
}

fn device_index(d: Device) -> i32 {
    match d {
        Device::Host => -1,
        Device::Cuda(i) => i,
    }
}

/// Describes and validates the inputs of one call. `inputs`: tensors, arrays or descriptor tuples (or None)
/// in the definition's input order without `scale`, named by `names`; `scale`: None or 0 = 1/sqrt(head_size);
/// `update_pool`: MTP writes the final state back to the pool; `max_seq_len` (prefill): the caller's host-side
/// length of the longest sequence (plan choice only), checked against the token count; `extra`: None, or the
/// serving tensors in [`serving::INPUTS`] order (each None when absent); `options`: None, or the serving
/// options tuple.
#[allow(clippy::too_many_arguments)]
fn validate(
    py: Python<'_>,
    op: Op,
    inputs: &Bound<'_, PyAny>,
    names: Option<&Bound<'_, PyAny>>,
    scale: Option<f32>,
    update_pool: bool,
    max_seq_len: Option<usize>,
    extra: Option<&Bound<'_, PyAny>>,
    options: Option<&Bound<'_, PyAny>>,
) -> PyResult<Checked> {
    let sv = serving::options(op, options)?;
    let mut descs = Vec::with_capacity(10 + serving::INPUTS.len());
    let inputs: Vec<Bound<'_, PyAny>> = match inputs.cast::<PyTuple>() {
        Ok(t) => t.iter().collect(),
        Err(_) => inputs.try_iter()?.collect::<PyResult<_>>()?,
    };
    for (i, x) in inputs.iter().enumerate() {
        if x.is_none() {
            descs.push(None);
            continue;
        }
        let name = || match names {
            Some(n) => n.get_item(i)?.extract::<String>(),
            None => Ok(format!("input {i}")),
        };
        descs.push(Some(objects::describe(py, x, name, op.name(), false)?));
    }
    match extra.filter(|e| !e.is_none()) {
        None => descs.extend(std::iter::repeat_n(None, serving::INPUTS.len())),
        Some(e) => {
            let mut n = 0;
            for (i, x) in e.try_iter()?.enumerate() {
                let x = x?;
                n += 1;
                let Some(&name) = serving::INPUTS.get(i) else {
                    break;
                };
                if x.is_none() {
                    descs.push(None);
                } else {
                    descs.push(Some(objects::describe(
                        py,
                        &x,
                        || Ok(name.into()),
                        op.name(),
                        false,
                    )?));
                }
            }
            if n != serving::INPUTS.len() {
                return Err(ArgError::Value(format!(
                    "gdn.{}: expected {} serving tensors ({}), got {n}",
                    op.name(),
                    serving::INPUTS.len(),
                    serving::INPUTS.join(", ")
                ))
                .into());
            }
        }
    }
    checked(op, descs, scale, update_pool, max_seq_len, sv)
}

/// Validates described inputs (the definition's, then the serving tensors in [`serving::INPUTS`] order),
/// reusing the last validation of `op` when the metadata match ([`memo`]), and sets the length hint.
fn checked(
    op: Op,
    descs: Vec<Option<Desc>>,
    scale: Option<f32>,
    update_pool: bool,
    max_seq_len: Option<usize>,
    sv: gdn_core::Serving,
) -> PyResult<Checked> {
    let mut c = memo::checked(op, descs, scale, update_pool, sv)?;
    args::set_length_hint(&mut c, max_seq_len)?;
    Ok(c)
}

/// Validates the inputs of one call and returns its [`Plan`] (see [`validate`] for the arguments).
#[pyfunction]
#[pyo3(signature = (op, inputs, scale=None, serving=false, max_seq_len=None, names=None, extra=None, options=None))]
#[allow(clippy::too_many_arguments)]
fn plan(
    py: Python<'_>,
    op: &str,
    inputs: &Bound<'_, PyAny>,
    scale: Option<f32>,
    serving: bool,
    max_seq_len: Option<usize>,
    names: Option<&Bound<'_, PyAny>>,
    extra: Option<&Bound<'_, PyAny>>,
    options: Option<&Bound<'_, PyAny>>,
) -> PyResult<Plan> {
    let op = parse_op(op)?;
    let c = validate(
        py,
        op,
        inputs,
        names,
        scale,
        serving,
        max_seq_len,
        extra,
        options,
    )?;
    Ok(Plan::new(c, None))
}

/// One call: validates the inputs and, when every destination is given (`state_out` None is complete only
/// for MTP in definition mode) and no device workspace is needed, runs it at once (on torch's current stream
/// for CUDA tensors) and returns None. Otherwise returns the [`Plan`], for the Python layer to allocate what
/// is missing and call `Plan.run`. `extra`, `options`: the serving tensors and options (see [`validate`]).
#[pyfunction]
#[pyo3(signature = (op, inputs, names, scale, serving, max_seq_len, output, state_out, extra=None, options=None))]
#[allow(clippy::too_many_arguments)]
fn call(
    py: Python<'_>,
    op: &str,
    inputs: &Bound<'_, PyAny>,
    names: &Bound<'_, PyAny>,
    scale: Option<f32>,
    serving: bool,
    max_seq_len: Option<usize>,
    output: Option<&Bound<'_, PyAny>>,
    state_out: Option<&Bound<'_, PyAny>>,
    extra: Option<&Bound<'_, PyAny>>,
    options: Option<&Bound<'_, PyAny>>,
) -> PyResult<Option<Plan>> {
    let op = parse_op(op)?;
    let c = validate(
        py,
        op,
        inputs,
        Some(names),
        scale,
        serving,
        max_seq_len,
        extra,
        options,
    )?;
    run_now(py, c, output, state_out)
}

/// The step after validation: runs a validated call at once when every destination is given (`state_out` None
/// is complete only for MTP in definition mode) and no device workspace is needed, and returns None; otherwise
/// returns its [`Plan`].
fn run_now(
    py: Python<'_>,
    c: Checked,
    output: Option<&Bound<'_, PyAny>>,
    state_out: Option<&Bound<'_, PyAny>>,
) -> PyResult<Option<Plan>> {
    let p = &c.problem;
    let op = p.def.op;
    let in_place = p.pool || p.mtp_mode == gdn_core::MtpMode::Serving;
    let complete = state_out.is_some() || (op == Op::Mtp && !in_place);
    let Some(output) = output.filter(|_| complete) else {
        return Ok(Some(Plan::new(c, None)));
    };
    let (stream, prefill) = match c.device {
        Device::Host => (0, None),
        Device::Cuda(dev) => {
            // Only prefill has plans with a workspace; planning may open the device (compiles: GIL released).
            let prefill = match op {
                Op::Prefill => gil_free_until_open(py, dev, || device::prefill_plan(&c, dev))?,
                _ => None,
            };
            if prefill.as_ref().is_some_and(|p| p.workspace_bytes() > 0) {
                return Ok(Some(Plan::new(c, Some(prefill))));
            }
            (objects::current_stream(py, dev)?, prefill)
        }
    };
    let (output, state_out) = destinations(py, &c, output, state_out)?;
    execute(
        py,
        &c,
        &output,
        state_out.as_ref(),
        None,
        stream,
        prefill.as_ref(),
    )?;
    Ok(None)
}

/// Why the CUDA backend cannot run here, or None when it can (loads the driver and NVRTC on first use).
#[pyfunction]
fn cuda_unavailable_reason(py: Python<'_>) -> Option<String> {
    py.detach(device::unavailable_reason)
}

/// Registers a folder of shipped CUBINs (the package's `gdn/cubin/`, written by `gdn kernels --ship`); returns what
/// it holds.
#[pyfunction]
fn use_shipped_kernels(dir: std::path::PathBuf) -> PyResult<String> {
    gdn_cuda::use_shipped_kernels(&dir).map_err(pyo3::exceptions::PyValueError::new_err)
}

#[pymodule]
fn _gdn(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_function(wrap_pyfunction!(plan, m)?)?;
    m.add_function(wrap_pyfunction!(call, m)?)?;
    m.add_function(wrap_pyfunction!(objects::set_describers, m)?)?;
    m.add_function(wrap_pyfunction!(cuda_unavailable_reason, m)?)?;
    m.add_function(wrap_pyfunction!(use_shipped_kernels, m)?)?;
    m.add_function(wrap_pyfunction!(_skip_run, m)?)?;
    m.add_function(wrap_pyfunction!(entry::decode, m)?)?;
    m.add_function(wrap_pyfunction!(entry::prefill, m)?)?;
    m.add_function(wrap_pyfunction!(entry::mtp, m)?)?;
    m.add_function(wrap_pyfunction!(entry::packed_decode, m)?)?;
    m.add_class::<Plan>()?;
    Ok(())
}
