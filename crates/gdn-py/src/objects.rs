//! Python objects → [`Desc`]: the per-call fast path for torch tensors, and the CUDA stream to launch on.
//!
//! A call's host time is mostly spent describing its tensors. A plain torch tensor (type `torch.Tensor` or
//! `torch.nn.Parameter`, CPU or CUDA) is read through DLPack's C exchange API ([`crate::dlpack`]): one C call
//! per tensor, no Python object created. Where this torch has no such table (or for a tensor subclass, which
//! may override torch's methods), a torch CUDA tensor is described through torch's methods, called from here
//! with no Python frame: `is_cuda`, `get_device()`, `data_ptr()`, `size()`, `is_contiguous()` and `dtype`
//! (matched by identity against torch's dtype objects). Everything else — NumPy arrays, torch CPU tensors
//! without the table, other devices, and the error for an object that is neither — goes through the Python
//! layer's own `_desc` / `_out_desc` (registered once at import, [`set_describers`]), as does a ready-made
//! descriptor tuple (tests).
//!
//! torch's current stream comes from the same table (`current_work_stream`, a C call), else from
//! `torch._C._cuda_getCurrentRawStream`, else `torch.cuda.current_stream`.
//!
//! torch is never imported from here: its objects are looked up in `sys.modules` once the caller has imported
//! it, so a NumPy-only caller never loads it.

use crate::desc::{dtype_name, ints, row_major, Desc};
use crate::dlpack::Api;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyTuple};
use pyo3::{intern, PyTypeInfo};

/// torch's objects the fast path compares against, found once torch is in `sys.modules`.
struct Torch {
    tensor: Py<PyAny>,
    /// torch.Tensor's methods get_device, data_ptr, size, is_contiguous and stride, called with the tensor as
    /// their argument: `x.size()` from Rust would first build a bound method object (measured: about a third
    /// of the call).
    methods: [Py<PyAny>; 5],
    /// (dtype object, definition name) for the dtypes gdn's tensors can have.
    dtypes: Vec<(Py<PyAny>, &'static str)>,
    /// `torch._C._cuda_getCurrentRawStream(device)`, when this torch has it.
    raw_stream: Option<Py<PyAny>>,
    /// `torch.cuda.current_stream`, the public fallback.
    current_stream: Py<PyAny>,
    /// DLPack's C exchange table of `torch.Tensor`, when this torch has one gdn can use.
    api: Option<Api>,
}

static TORCH: PyOnceLock<Torch> = PyOnceLock::new();

/// (`gdn._desc`, `gdn._out_desc`), registered by the Python layer at import.
static DESCRIBERS: PyOnceLock<(Py<PyAny>, Py<PyAny>)> = PyOnceLock::new();

/// Registers the Python describers used for everything but torch CUDA tensors.
#[pyfunction]
pub fn set_describers(py: Python<'_>, desc: Py<PyAny>, out_desc: Py<PyAny>) {
    let _ = DESCRIBERS.set(py, (desc, out_desc));
}

/// torch's objects, or None while torch is not imported (a NumPy-only caller).
fn torch(py: Python<'_>) -> PyResult<Option<&'static Torch>> {
    if let Some(t) = TORCH.get(py) {
        return Ok(Some(t));
    }
    let modules = py
        .import(intern!(py, "sys"))?
        .getattr(intern!(py, "modules"))?;
    let Some(torch) = modules.cast::<PyDict>()?.get_item(intern!(py, "torch"))? else {
        return Ok(None);
    };
    // A module still being imported (gdn imported from inside torch's own import) has no Tensor yet.
    if !torch.hasattr(intern!(py, "Tensor"))? {
        return Ok(None);
    }
    let mut dtypes = Vec::new();
    for (attr, name) in [
        ("bfloat16", "bfloat16"),
        ("float16", "float16"),
        ("float32", "float32"),
        ("int32", "int32"),
        ("int64", "int64"),
        ("uint8", "uint8"),
    ] {
        dtypes.push((torch.getattr(attr)?.unbind(), name));
    }
    let raw_stream = torch
        .getattr(intern!(py, "_C"))?
        .getattr("_cuda_getCurrentRawStream")
        .ok()
        .map(Bound::unbind);
    let tensor = torch.getattr(intern!(py, "Tensor"))?;
    let api = match torch.getattr("nn").and_then(|nn| nn.getattr("Parameter")) {
        Ok(parameter) => Api::find(&tensor, &parameter),
        Err(_) => None,
    };
    let method = |m: &str| tensor.getattr(m).map(Bound::unbind);
    let t = Torch {
        methods: [
            method("get_device")?,
            method("data_ptr")?,
            method("size")?,
            method("is_contiguous")?,
            method("stride")?,
        ],
        tensor: tensor.unbind(),
        dtypes,
        raw_stream,
        current_stream: torch
            .getattr(intern!(py, "cuda"))?
            .getattr("current_stream")?
            .unbind(),
        api,
    };
    Ok(Some(TORCH.get_or_init(py, || t)))
}

/// A torch CUDA tensor's descriptor, or None when `x` is anything else.
fn cuda_tensor(py: Python<'_>, t: &Torch, x: &Bound<'_, PyAny>) -> PyResult<Option<Desc>> {
    if !x.is_instance(t.tensor.bind(py))? || !x.getattr(intern!(py, "is_cuda"))?.is_truthy()? {
        return Ok(None);
    }
    let args = PyTuple::new(py, [x])?;
    let [get_device, data_ptr, size, is_contiguous, stride] = &t.methods;
    let call = |m: &Py<PyAny>| m.bind(py).call1(&args);
    let device: i64 = call(get_device)?.extract()?;
    let ptr: u64 = call(data_ptr)?.extract()?;
    // size() and is_contiguous() cost about half of `shape` and stride() (measured: no torch.Size property
    // getter, no strides tuple); the real strides are read only for a tensor torch calls non-contiguous.
    let shape = ints::<usize>(&call(size)?)?;
    let strides = if call(is_contiguous)?.is_truthy()? {
        row_major(&shape)
    } else {
        ints(&call(stride)?)?
    };
    let dt = x.getattr(intern!(py, "dtype"))?;
    let name = match t.dtypes.iter().find(|(d, _)| dt.is(d.bind(py))) {
        Some((_, n)) => std::borrow::Cow::Borrowed(*n),
        None => dtype_name(&dt.str()?.to_string().replace("torch.", "")),
    };
    Ok(Some(Desc(ptr, shape, strides, name, device)))
}

/// The descriptor of argument `name` of `gdn.<op>`: a torch CUDA tensor directly, a descriptor tuple as
/// given, anything else through the Python layer (`out`: the destination form, which refuses read-only arrays).
/// `name` is only formed when the Python layer needs it.
pub fn describe(
    py: Python<'_>,
    x: &Bound<'_, PyAny>,
    name: impl FnOnce() -> PyResult<String>,
    op: &str,
    out: bool,
) -> PyResult<Desc> {
    if PyTuple::is_type_of(x) {
        return x.extract();
    }
    let t = torch(py)?;
    if let Some(d) = t.and_then(|t| t.api.as_ref()).and_then(|a| a.describe(x)) {
        return Ok(d);
    }
    if let Some(d) = t.map_or(Ok(None), |t| cuda_tensor(py, t, x))? {
        return Ok(d);
    }
    let Some((desc, out_desc)) = DESCRIBERS.get(py) else {
        return Err(pyo3::exceptions::PyRuntimeError::new_err(
            "gdn._gdn: the describers are not registered (import gdn, not gdn._gdn)",
        ));
    };
    let f = if out { out_desc } else { desc };
    f.bind(py).call1((x, name()?, op))?.extract()
}

/// The `CUstream` handle of torch's current stream on CUDA device `dev` (0, the legacy default stream, when
/// torch is not imported: then no caller-visible stream exists).
pub fn current_stream(py: Python<'_>, dev: i32) -> PyResult<u64> {
    let Some(t) = torch(py)? else {
        return Ok(0);
    };
    if let Some(s) = t.api.as_ref().and_then(|a| a.current_stream(dev)) {
        return Ok(s);
    }
    match &t.raw_stream {
        Some(f) => f.bind(py).call1((dev,))?.extract(),
        None => t
            .current_stream
            .bind(py)
            .call1((dev,))?
            .getattr(intern!(py, "cuda_stream"))?
            .extract(),
    }
}
