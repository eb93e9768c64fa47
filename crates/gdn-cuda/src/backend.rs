//! `CudaBackend`: gdn_core's `Backend` (host → device, one launch, device → host); its `Timed` is in `bench`.
//!
//! One call of a problem = the kernel launch(es) of its plan through the raw launch API (`exec`) on the
//! backend's stream; the device copies and the call's arguments come from `exec::io` and
//! `abi::args::Args::for_problem`. How each operation maps its tensors to kernel pointers:
//! * decode: `state` (or NULL) → `new_state` (a separate buffer; every row written).
//! * prefill: `state` (or NULL) → `new_state`; `cu_seqlens` uploaded as int64. The multi-kernel prefill plans'
//!   workspace is one device buffer cached by the backend: grown (never shrunk) when a call needs more, so a warm
//!   backend allocates nothing per call; it is sized before any timed or captured region.
//! * MTP, definition mode: the pool is read, not written (`new_state` NULL); `final_state` is the input
//!   pool, copied on the host; the intermediate buffer is uploaded and the kernel overwrites its rows.
//! * MTP, serving mode: in place — `new_state == state` (the pool), index -1 = padding; `final_state` is
//!   the pool read back.

use crate::abi::args::{shape_of, Args, DevicePtrs};
use crate::exec::backend_err as be;
use crate::exec::io::{enqueue, read_state, DeviceInputs, DeviceOutputs, Workspace};
use crate::exec::kernel_set::KernelSet;
use crate::exec::launch::LaunchInfo;
use crate::plan::prefill::overrides::ForcedPlan;
use crate::runtime::context::Gpu;
use crate::runtime::function::Function;
use crate::runtime::memory::DeviceBuf;
use gdn_core::{Backend, Inputs, MtpMode, Op, Outputs, Problem, Result, StateBuf, StateRef};
use std::sync::Mutex;

/// The CUDA backend on device 0.
pub struct CudaBackend {
    /// The chunk64 prefill workspace, grow-only (locked inside `lock`). First field: fields drop in order,
    /// and it must be freed while `gpu` still holds the context (memcheck --leak-check caught the reverse).
    workspace: Mutex<DeviceBuf>,
    pub(crate) gpu: Gpu,
    pub(crate) kernels: KernelSet,
    /// Serialises use of the backend's stream and buffers.
    pub(crate) lock: Mutex<()>,
    /// The copy kernel of the bandwidth floor (`bench.rs`), loaded on first use.
    pub(crate) copy: std::sync::OnceLock<std::result::Result<Function, String>>,
}

impl CudaBackend {
    /// Opens device 0 (driver, device, its compile target, NVRTC) and prepares its kernels (compiled lazily,
    /// from the disk cache when possible).
    pub fn open() -> Result<CudaBackend> {
        let gpu = Gpu::open(0).map_err(be)?;
        crate::runtime::nvrtc::version().map_err(be)?;
        let kernels = KernelSet::for_gpu(&gpu)?;
        Ok(CudaBackend {
            gpu,
            kernels,
            lock: Mutex::new(()),
            copy: std::sync::OnceLock::new(),
            workspace: Mutex::new(DeviceBuf { ptr: 0, bytes: 0 }),
        })
    }

    pub fn gpu(&self) -> &Gpu {
        &self.gpu
    }

    pub fn kernels(&self) -> &KernelSet {
        &self.kernels
    }

    /// Which kernel(s) (and launch configurations) this backend would use for `p` (with `GDN_KERNEL`).
    /// Decode / MTP: the build `p`'s serving modes select, as a launch picks it.
    pub fn plan(&self, p: &Problem) -> Result<LaunchInfo> {
        if p.def.op == Op::Prefill {
            return Ok(self.kernels.describe(&shape_of(p))?);
        }
        let Args::Recurrent(a) = Args::for_problem(p, &present_tensors(p)) else {
            unreachable!("decode and MTP take recurrent arguments")
        };
        let choice = crate::plan::select::choose_recurrent(
            &a.shape(),
            &self.kernels.caps(),
            self.kernels.env_override(),
            a.build(),
        )?;
        Ok(LaunchInfo::recurrent(choice))
    }

    /// `plan` with an explicit prefill override (`None`: automatic, ignoring `GDN_KERNEL`).
    pub fn plan_with(&self, p: &Problem, force: Option<&str>) -> Result<LaunchInfo> {
        let shape = shape_of(p);
        if p.def.op == Op::Prefill {
            Ok(LaunchInfo::prefill(
                &self.kernels.prefill_plan_with(&shape, force)?,
            ))
        } else {
            self.plan(p)
        }
    }

    /// The workspace for a call of `p` with prefill override `force`: the cached buffer, grown first when
    /// it is too small (after a stream sync, so no queued kernel still uses the old one). Call with `lock`
    /// held, outside any stream capture.
    pub(crate) fn workspace_for(&self, p: &Problem, force: Option<&str>) -> Result<Workspace> {
        let need = self.plan_with(p, force)?.workspace_bytes;
        if need == 0 {
            return Ok(Workspace::default());
        }
        let need = usize::try_from(need)
            .map_err(|_| be(format!("workspace of {need} bytes does not fit this host")))?;
        let mut buf = self.workspace.lock().unwrap_or_else(|e| e.into_inner());
        if buf.bytes < need {
            self.gpu.sync().map_err(be)?;
            *buf = DeviceBuf { ptr: 0, bytes: 0 }; // free the old one first
            *buf = DeviceBuf::alloc(need).map_err(be)?;
        }
        Ok(Workspace {
            ptr: buf.ptr,
            bytes: buf.bytes,
        })
    }

    /// Runs `p` with an explicit prefill override (`None`: automatic, ignoring `GDN_KERNEL`); decode and
    /// MTP ignore `force`. Returns what was launched.
    pub fn run_with(
        &self,
        p: &Problem,
        x: &Inputs,
        out: &mut Outputs,
        force: Option<&str>,
    ) -> Result<LaunchInfo> {
        let _g = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        self.gpu.bind().map_err(be)?;
        let s = self.gpu.stream();
        let ws = self.workspace_for(p, force)?;
        let di = DeviceInputs::upload(p, x, s)?;
        let inter_src = out.intermediate.as_deref().or(x.intermediate);
        let dout = DeviceOutputs::alloc(p, inter_src, x.checkpoints, s)?;
        // SAFETY: buffers sized for p, our stream and context; the workspace is ours (lock held).
        let launched = unsafe { enqueue(&self.kernels, p, &di, &dout, ws, force, s) };
        let info = match launched {
            Ok(info) => info,
            Err(e) => {
                let _ = self.gpu.sync(); // let the uploads finish before the host buffers can go
                return Err(e);
            }
        };
        dout.out.read(&mut out.output, s).map_err(be)?;
        // the state destination: new_state, or the pool itself (pools and MTP serving, in place)
        let state_src = match (p.def.op, p.mtp_mode) {
            _ if p.pool => di.state.as_ref(),
            (Op::Mtp, MtpMode::Serving) => di.state.as_ref(),
            (Op::Mtp, MtpMode::Definition) => None,
            _ => dout.new_state.as_ref(),
        };
        match state_src {
            Some(src) => read_state(src, &mut out.state, s).map_err(be)?,
            None => copy_pool(x, &mut out.state)?,
        }
        if let (Some(src), Some(dst)) = (&dout.intermediate, out.intermediate.as_mut()) {
            src.read(dst, s).map_err(be)?;
        }
        if let (Some(src), Some(dst)) = (&dout.checkpoints, out.checkpoints.as_mut()) {
            read_state(src, dst, s).map_err(be)?;
        }
        self.gpu.sync().map_err(be)?;
        Ok(info)
    }

    /// Runs the prefill problem `p` with plan `plan` forced (through the override that forces it);
    /// returns what was launched. `gdn check` runs every prefill case once per plan this way.
    pub fn run_prefill_plan(
        &self,
        p: &Problem,
        x: &Inputs,
        out: &mut Outputs,
        plan: ForcedPlan,
    ) -> Result<LaunchInfo> {
        let name = plan.override_for(&shape_of(p), &self.kernels.caps())?;
        self.run_with(p, x, out, Some(name))
    }
}

impl Backend for CudaBackend {
    fn name(&self) -> String {
        "cuda".into()
    }

    fn run(&self, p: &Problem, x: &Inputs, out: &mut Outputs) -> Result<()> {
        self.run_with(p, x, out, self.kernels.env_override())
            .map(|_| ())
    }
}

/// MTP definition mode: `final_state` is the input pool unchanged.
fn copy_pool(x: &Inputs, dst: &mut StateBuf) -> Result<()> {
    match (x.state, dst) {
        (Some(StateRef::F32(s)), StateBuf::F32(d)) => d.copy_from_slice(s),
        (Some(StateRef::BF16(s)), StateBuf::BF16(d)) => d.copy_from_slice(s),
        (Some(StateRef::F16(s)), StateBuf::F16(d)) => d.copy_from_slice(s),
        _ => {
            return Err(be(
                "MTP final_state: pool missing or of another dtype".into()
            ))
        }
    }
    Ok(())
}

/// Stand-in device pointers for planning: 1 for every tensor `p` has, 0 for the absent ones (the build choice
/// reads which serving tensors are present, never their addresses).
fn present_tensors(p: &Problem) -> DevicePtrs {
    let on = |b: bool| u64::from(b);
    DevicePtrs {
        gate: on(p.gates != gdn_core::GateMode::Raw),
        beta: on(p.gates != gdn_core::GateMode::Raw),
        pool_indices: on(p.pool),
        has_initial: on(p.has_initial_state),
        num_accepted: on(p.spec_slots),
        ..Default::default()
    }
}
