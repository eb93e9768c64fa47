//! Device path: CUDA tensors launch gdn-cuda's kernels through its raw-pointer API (`gdn_cuda::exec`) on the
//! caller's stream — the tensors' own device pointers, no allocation, no copy, no host synchronisation.
//! The chunk64 prefill plan's workspace is allocated by the Python layer through torch (its caching
//! allocator, on the tensors' device: graph-capturable) between `workspace_bytes` and `run`.
//!
//! Serving tensors go to the kernels as they are, like the definition tensors: index tensors and `cu_seqlens`
//! in int32 or int64 (the kernels read both; the problem records which), a pool view's row stride as
//! `state_row_stride`, and q, k, v and output views as `act_strides` (only when one of the four is not dense:
//! a dense call stays on the kernels of its mode). Their values are not read on the host.
//!
//! Per CUDA device, on first use: the driver is loaded, the device's primary context (the one torch uses)
//! is retained, NVRTC is checked and every kernel module is compiled and loaded up front (disk-cached), so
//! that nothing is compiled inside a CUDA-graph capture. A failure is remembered and re-raised as a
//! `RuntimeError` naming what is missing (driver, GPU, architecture, NVRTC, headers).

use crate::args::{act_strides, gdn_err, is_dense, ArgError, Checked};
use crate::desc::Desc;
use crate::serving::row_stride;
use gdn_core::serving::names;
use gdn_core::{DType, Op};
use gdn_cuda::runtime::context::Gpu;
use gdn_cuda::{Args, DevicePtrs, KernelSet, PrefillPlan};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

/// One CUDA device's context and loaded kernels.
struct DeviceKernels {
    gpu: Gpu,
    kernels: KernelSet,
    /// The device's primary context as `cuCtxGetCurrent` reports it once bound: a launch binds it only when
    /// another context is current (torch's current context is this one in the common case). Its address.
    ctx: Option<usize>,
}

type Registry = Mutex<HashMap<i32, Result<Arc<DeviceKernels>, String>>>;

fn registry() -> &'static Registry {
    static R: OnceLock<Registry> = OnceLock::new();
    R.get_or_init(|| Mutex::new(HashMap::new()))
}

/// Restores the calling thread's current CUDA context when dropped: gdn binds the tensors' device's primary
/// context to launch, and must not change which device torch's runtime sees as current (multi-GPU).
struct RestoreCtx(Option<cudarc::driver::sys::CUcontext>);

impl RestoreCtx {
    fn save() -> RestoreCtx {
        RestoreCtx(cudarc::driver::result::ctx::get_current().ok().flatten())
    }
}

impl Drop for RestoreCtx {
    fn drop(&mut self) {
        if let Some(c) = self.0 {
            // SAFETY: the context was current on this thread a moment ago (torch keeps it alive).
            let _ = unsafe { cudarc::driver::result::ctx::set_current(c) };
        }
    }
}

fn open(dev: i32) -> Result<DeviceKernels, String> {
    gdn_cuda::runtime::loader::driver()?;
    let _restore = RestoreCtx::save();
    let gpu = Gpu::open(dev)?;
    gdn_cuda::runtime::nvrtc::version()?;
    let kernels = KernelSet::for_gpu(&gpu).map_err(|e| e.to_string())?;
    // Compile and load every module now; a module that fails only disables its own kernels (the launch
    // that needs one reports why), so the failures are not fatal here.
    let _ = kernels.load_all();
    gpu.bind()?;
    let ctx = cudarc::driver::result::ctx::get_current()
        .ok()
        .flatten()
        .map(|c| c as usize);
    Ok(DeviceKernels { gpu, kernels, ctx })
}

/// The device's kernels, opened on first use (the GIL is not held while compiling).
fn device(dev: i32) -> Result<Arc<DeviceKernels>, String> {
    let mut reg = registry().lock().unwrap_or_else(|e| e.into_inner());
    reg.entry(dev)
        .or_insert_with(|| open(dev).map(Arc::new))
        .clone()
}

/// Whether device `dev` is open (its kernels compiled and loaded): a call on it then cannot compile, and
/// launches without releasing the GIL (as torch's own ops do).
pub fn is_open(dev: i32) -> bool {
    let reg = registry().lock().unwrap_or_else(|e| e.into_inner());
    reg.get(&dev).is_some_and(Result::is_ok)
}

/// Why the CUDA backend cannot be used on device 0, or None.
pub fn unavailable_reason() -> Option<String> {
    device(0).err()
}

/// The prefill plan of a validated call on device `dev` (None for decode, MTP and calls without sequences),
/// whose `workspace_bytes()` is the device workspace the call needs (0 for everything but the chunk64 and cp
/// plans). Opens the device on first use.
pub fn prefill_plan(c: &Checked, dev: i32) -> Result<Option<PrefillPlan>, ArgError> {
    let p = &c.problem;
    let op = p.def.op;
    if op != Op::Prefill || p.dims.num_seqs == 0 {
        return Ok(None);
    }
    let fail = |e: String| ArgError::Runtime(format!("gdn.{}: CUDA backend: {e}", op.name()));
    let shape = gdn_cuda::shape_of(p);
    let last = LAST_PLAN.with_borrow(|l| {
        l.as_ref()
            .filter(|(d, s, _)| *d == dev && *s == shape)
            .map(|(_, _, plan)| plan.clone())
    });
    if last.is_some() {
        return Ok(last);
    }
    let d = device(dev).map_err(fail)?;
    let plan = d
        .kernels
        .prefill_plan(&shape)
        .map_err(|e| gdn_err(op, e.into()))?;
    LAST_PLAN.with_borrow_mut(|l| *l = Some((dev, shape, plan.clone())));
    Ok(Some(plan))
}

thread_local! {
    /// The last prefill plan chosen on this thread, with its device and shape: the plan depends on nothing
    /// else (the device's capabilities and `GDN_KERNEL` are fixed once it is open), and an engine calls one
    /// shape once per layer.
    static LAST_PLAN: std::cell::RefCell<Option<(i32, gdn_cuda::Shape, PrefillPlan)>> =
        const { std::cell::RefCell::new(None) };
}

/// Launches a validated device problem on `stream` (a `CUstream` handle) of device `dev`. `workspace` is
/// the scratch of `workspace_bytes` bytes (a CUDA uint8 tensor of the same device), when that is not 0.
/// `plan`: the call's prefill plan when the caller already has it ([`prefill_plan`]; planned here otherwise).
pub fn run(
    c: &Checked,
    dev: i32,
    output: &Desc,
    state_out: Option<&Desc>,
    workspace: Option<&Desc>,
    stream: u64,
    plan: Option<&PrefillPlan>,
) -> Result<(), ArgError> {
    let p = &c.problem;
    let op = p.def.op;
    let fail = |e: String| ArgError::Runtime(format!("gdn.{}: CUDA backend: {e}", op.name()));
    let d = device(dev).map_err(fail)?;
    if p.dims.total_tokens == 0 && (op != Op::Prefill || p.dims.num_seqs == 0) {
        return Ok(()); // nothing to compute or write
    }
    // bind the device's context only when another one is current, and restore that one afterwards
    let current = cudarc::driver::result::ctx::get_current().ok().flatten();
    let _restore = match current {
        Some(c) if Some(c as usize) == d.ctx => None,
        _ => {
            let r = RestoreCtx(current);
            d.gpu.bind().map_err(fail)?;
            Some(r)
        }
    };
    let ptr = |n: &str| c.get(n).map_or(0, Desc::ptr);
    // MTP's state is the pool (`initial_state`); decode and prefill name it `state`
    let state = c.get(p.def.state_input());
    let ptrs = DevicePtrs {
        q: ptr("q"),
        k: ptr("k"),
        v: ptr("v"),
        a: ptr("a"),
        b: ptr("b"),
        a_log: ptr("A_log"),
        dt_bias: ptr("dt_bias"),
        state: state.map_or(0, Desc::ptr),
        new_state: state_out.map_or(0, Desc::ptr),
        intermediate: ptr("intermediate_states_buffer"),
        out: output.ptr(),
        // MTP pool rows: [B] per request, or [B, T] spec-decode slots
        state_indices: ptr("initial_state_indices"),
        // int64 or int32, passed as they are (the kernels read both; `Problem::cu_dtype` says which)
        cu_seqlens: ptr("cu_seqlens"),
        workspace: workspace.map_or(0, Desc::ptr),
        workspace_bytes: workspace.map_or(0, Desc::numel),
        gate: ptr(names::G) | ptr(names::ALPHA), // at most one is given (validated)
        beta: ptr(names::BETA),
        // decode / prefill pool rows, int32 or int64 (`Problem::index_dtype`)
        pool_indices: ptr(names::STATE_INDICES),
        has_initial: ptr(names::HAS_INITIAL_STATE),
        num_accepted: ptr(names::NUM_ACCEPTED),
        checkpoints: ptr(names::CHECKPOINTS),
        checkpoint_starts: ptr(names::CHECKPOINT_STARTS),
        checkpoint_starts_i32: c
            .get(names::CHECKPOINT_STARTS)
            .is_some_and(|d| d.dtype() == Some(DType::I32)),
        // a pool view's row stride (elements), 0 when dense; the state output of a pool call is the pool
        state_row_stride: state.map_or(0, row_stride),
    };
    let mut args = Args::for_problem(p, &ptrs);
    args.serving_mut().act_strides = views(c, output)?;
    let cu_stream = stream as usize as cudarc::driver::sys::CUstream;
    // SAFETY: every pointer comes from a validated descriptor: a live CUDA tensor of device `dev` with the
    // dtype and exact shape the kernels expect (contiguous, or a pool whose row stride is passed; 16-byte
    // aligned), kept alive by the Python caller until the call returns and by the caller's stream order
    // afterwards (as for any torch op); q, k, v and output views lie inside their tensors' storage (torch's
    // views do) at the strides passed. Index values are the caller's contract (see gdn/__init__.py).
    let r = unsafe {
        match (args, plan) {
            (Args::Prefill(args), Some(plan)) => {
                d.kernels.launch_prefill_plan(&args, plan, cu_stream)
            }
            (Args::Prefill(args), None) => d.kernels.launch_prefill(&args, cu_stream),
            (Args::Recurrent(args), _) => d.kernels.launch_recurrent(&args, cu_stream),
        }
    };
    r.map(|_| ()).map_err(|e| match e {
        gdn_core::GdnError::Backend { .. } => fail(e.to_string()),
        e => gdn_err(op, e),
    })
}

/// The (token, head) strides of q, k, v and the output (`ServingArgs::act_strides`), or None when all four are
/// dense. The descriptors were validated ([`crate::args::check_tensor`]); no allocation.
fn views(c: &Checked, output: &Desc) -> Result<Option<[[i64; 2]; 4]>, ArgError> {
    let op = c.problem.def.op;
    let act = [c.get("q"), c.get("k"), c.get("v"), Some(output)];
    if act.iter().flatten().all(|d| is_dense(d)) {
        return Ok(None);
    }
    let mut strides = [[0i64; 2]; 4];
    for (row, (d, name)) in strides.iter_mut().zip(act.iter().zip(crate::args::ACT)) {
        if let Some(d) = d {
            *row = act_strides(op, name, d)?;
        }
    }
    Ok(Some(strides))
}
