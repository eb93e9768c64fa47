//! `gdn._gdn`: the Rust half of the Python module `gdn` (python/gdn/__init__.py is the public API).
//!
//! A call is two steps, so that Python can allocate missing outputs between them:
//!   `plan(op, inputs, scale, serving)` validates every input (no data is read) and returns a [`Plan`]
//!   that knows the output shapes and the device workspace the call needs (`workspace_bytes`: non-zero only
//!   for the chunk64 and cp prefill plans); `Plan.run(output, state_out, stream, workspace)` validates the
//!   destinations and runs on the host (CPU backend) or launches on the CUDA stream given (no allocation,
//!   no sync).

mod args;
mod device;
mod host;

use args::{check_dest, check_inputs, ArgError, Checked, Desc, Device};
use gdn_core::Op;
use pyo3::prelude::*;

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
    /// dtype name of the state output (`float32`, or `bfloat16` for a bf16 state).
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
    /// for every plan but the chunk64 and cp prefill plans. Opens the device on first use.
    #[getter]
    fn workspace_bytes(&self, py: Python<'_>) -> PyResult<u64> {
        match self.c.device {
            Device::Host => Ok(0),
            Device::Cuda(dev) => py
                .detach(|| device::workspace_bytes(&self.c, dev))
                .map_err(Into::into),
        }
    }

    /// Checks the destinations and runs. `state_out` is None only for MTP in definition mode (pool not
    /// updated); in serving mode it is the pool itself. `stream` is the CUDA stream handle (ignored on host).
    /// `workspace`: a uint8 tensor of at least `workspace_bytes` bytes on the inputs' CUDA device, or None
    /// when that is 0 (the launch checks its size and 256-byte alignment).
    #[pyo3(signature = (output, state_out, stream=0, workspace=None))]
    fn run(
        &self,
        py: Python<'_>,
        output: Desc,
        state_out: Option<Desc>,
        stream: u64,
        workspace: Option<Desc>,
    ) -> PyResult<()> {
        let c = &self.c;
        let p = &c.problem;
        check_dest(
            c,
            "output",
            &output,
            gdn_core::DType::BF16,
            &p.output_shape(),
        )?;
        let state_name = p.def.state_output();
        match (&state_out, p.def.op) {
            (Some(d), _) => check_dest(c, state_name, d, p.state_out_dtype(), &p.state_shape())?,
            (None, Op::Mtp) => {}
            (None, _) => {
                return Err(
                    ArgError::Value(format!("gdn: '{state_name}' destination missing")).into(),
                )
            }
        }
        if let Some(w) = &workspace {
            check_workspace(c, w)?;
        }
        let r = match c.device {
            Device::Host => py.detach(|| host::run(c, &output, state_out.as_ref())),
            Device::Cuda(dev) => py.detach(|| {
                device::run(
                    c,
                    dev,
                    &output,
                    state_out.as_ref(),
                    workspace.as_ref(),
                    stream,
                )
            }),
        };
        r.map_err(Into::into)
    }
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

/// Validates the inputs of one call. `inputs`: descriptors (or None) in the definition's input order
/// without `scale`; `scale`: None or 0 = 1/sqrt(head_size); `serving`: MTP writes the final state back to
/// the pool; `max_seq_len` (prefill): the caller's host-side length of the longest sequence (plan choice
/// only), checked against the token count.
#[pyfunction]
#[pyo3(signature = (op, inputs, scale=None, serving=false, max_seq_len=None))]
fn plan(
    op: &str,
    inputs: Vec<Option<Desc>>,
    scale: Option<f32>,
    serving: bool,
    max_seq_len: Option<usize>,
) -> PyResult<Plan> {
    let op = parse_op(op)?;
    let mut c = check_inputs(op, inputs, scale, serving)?;
    args::set_length_hint(&mut c, max_seq_len)?;
    Ok(Plan { c })
}

/// Why the CUDA backend cannot run here, or None when it can (loads the driver and NVRTC on first use).
#[pyfunction]
fn cuda_unavailable_reason(py: Python<'_>) -> Option<String> {
    py.detach(device::unavailable_reason)
}

#[pymodule]
fn _gdn(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_function(wrap_pyfunction!(plan, m)?)?;
    m.add_function(wrap_pyfunction!(cuda_unavailable_reason, m)?)?;
    m.add_class::<Plan>()?;
    Ok(())
}
