//! gdn-cuda: the CUDA backend for GPUs from Ampere (sm_80) on: the kernels of `kernels/`, compiled at run time by
//! NVRTC for the device's target (disk-cached CUBINs; every plan on Hopper, sm_90a; the portable plans elsewhere) and
//! launched through cudarc's driver layer. Nothing CUDA is linked: the binary
//! starts anywhere, and `open()` says precisely what is missing (driver, GPU, architecture, NVRTC, headers).
//!
//! The crate by folder, lowest first (each imports only from those above it in this list):
//! * `runtime/` — driver plumbing: libraries (`loader`), `nvrtc` (compile, disk cache), `context` (device,
//!   facts, stream), `memory`, standalone `function`s, `cupti`
//! * `kernels/` — the kernels as data: `registry` (the table of variants and modules), `sources`,
//!   `resources` (ptxas report), `report` (GPU-free compile of every kernel, `gdn kernels`), `target` (a
//!   device's compile target)
//! * `plan/` — pure, GPU-free kernel choice: the shared types (`Shape`, `DeviceCaps`, `Launch`, `Rejection`),
//!   grids, the decode / MTP table and `select`, `prefill/` (host plans, cost model, device plan, overrides)
//! * `abi/` — the kernels' binary interface: `params` (`#[repr(C)]` mirrors), `args` (validated launch
//!   arguments, `Args::for_problem`)
//! * `exec/` — the loaded `kernel_set`, one `launch`, the `prefill` and `recurrent` calls on the caller's
//!   stream, `io` (a problem's device buffers and one enqueued call)
//! * `backend` — `CudaBackend`: gdn_core `Backend`;  `bench` — the timing tiers and `Timed`

pub mod abi;
pub mod backend;
pub mod bench;
pub mod exec;
pub mod kernels;
pub mod plan;
pub mod runtime;

pub use abi::args::{shape_of, Args, DevicePtrs, PrefillArgs, RecurrentArgs};
pub use backend::CudaBackend;
pub use exec::kernel_set::KernelSet;
pub use exec::launch::LaunchInfo;
pub use kernels::registry::StateDtype;
pub use plan::prefill::overrides::ForcedPlan;
pub use plan::prefill::{DeviceRoute, PrefillPlan};
pub use plan::{DeviceCaps, Launch, PlanKind, Rejection, Shape};
pub use runtime::shipped::use_shipped_kernels;

use gdn_core::{Backend, Inputs, Outputs, Problem, Result, Timed};

/// What the CLI needs from the CUDA backend: run + time, and which plan runs.
pub trait CudaLike: Backend + Timed {
    /// What a call of `p` launches, as one label (`LaunchInfo::label`; with `GDN_KERNEL`).
    fn plan_label(&self, p: &Problem) -> Result<String>;
    /// The `GDN_KERNEL` override, when set (it then decides every call's plan).
    fn kernel_override(&self) -> Option<String>;
    /// What the planner knows of the device (its target architecture among it).
    fn caps(&self) -> DeviceCaps;
    /// Runs the prefill problem `p` with plan `plan` forced; returns the label of what ran.
    fn run_prefill_plan(
        &self,
        p: &Problem,
        x: &Inputs,
        out: &mut Outputs,
        plan: ForcedPlan,
    ) -> Result<String>;
}

impl CudaLike for CudaBackend {
    fn plan_label(&self, p: &Problem) -> Result<String> {
        Ok(self.plan(p)?.label())
    }
    fn caps(&self) -> DeviceCaps {
        self.kernels().caps()
    }
    fn kernel_override(&self) -> Option<String> {
        self.kernels().env_override().map(str::to_string)
    }
    fn run_prefill_plan(
        &self,
        p: &Problem,
        x: &Inputs,
        out: &mut Outputs,
        plan: ForcedPlan,
    ) -> Result<String> {
        CudaBackend::run_prefill_plan(self, p, x, out, plan).map(|i| i.label())
    }
}

/// Opens the CUDA backend on device 0, or says precisely why it cannot (no driver, no GPU, a GPU older than Ampere
/// — named with its compute capability —, no NVRTC or headers, with the places searched).
pub fn open() -> Result<Box<dyn CudaLike>> {
    Ok(Box::new(CudaBackend::open()?))
}
