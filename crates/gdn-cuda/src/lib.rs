//! gdn-cuda: the CUDA backend. Hopper (sm_90a) kernels from `kernels/*.cu`, compiled at run time by NVRTC
//! (disk-cached CUBINs) and launched through cudarc's driver layer. Nothing CUDA is linked: the binary
//! starts anywhere, and `open()` says precisely what is missing (driver, GPU, architecture, NVRTC, headers).
//!
//! Modules, one role each:
//! * `loader`    — finding libcuda / libnvrtc / the CUDA headers (env, loader path, PyPI wheels)
//! * `nvrtc`     — NVRTC calls, CUBIN compile, disk cache;  `resources` — the ptxas report parser
//! * `sources`   — the kernel sources (embedded by build.rs, or `$GDN_KERNEL_DIR`)
//! * `registry`  — the one table of kernel variants;  `policy` — the pure kernel choice;  `cost` — the
//!   prefill plan cost model it uses
//! * `params`    — `#[repr(C)]` mirrors of the kernels' params structs
//! * `context`   — device, arch check, context, stream;  `memory` — device buffers
//! * `launch`    — the raw-pointer launch API on a caller's stream (for framework bindings)
//! * `backend`   — `CudaBackend`: gdn_core `Backend` + `Timed`;  `bench` — the timing tiers
//! * `report`    — GPU-free compile of every kernel (`gdn kernels`)

pub mod backend;
pub mod bench;
pub mod context;
pub mod cost;
pub mod cupti;
pub mod device_plan;
pub mod launch;
pub mod loader;
pub mod memory;
pub mod nvrtc;
pub mod params;
pub mod policy;
pub mod registry;
pub mod report;
pub mod resources;
pub mod sources;

pub use backend::CudaBackend;
pub use device_plan::DeviceRoute;
pub use launch::{KernelLaunch, KernelSet, LaunchInfo, PrefillArgs, RecurrentArgs};
pub use policy::{Choice, DeviceCaps, ForcedPlan, PlanKind, PrefillPlan, Rejection, Shape};
pub use registry::StateDtype;

use gdn_core::{Backend, DType, Inputs, Outputs, Problem, Result, Timed};

/// What the CLI needs from the CUDA backend: run + time, and which plan runs.
pub trait CudaLike: Backend + Timed {
    /// What a call of `p` launches, as one label (`LaunchInfo::label`; with `GDN_KERNEL`).
    fn plan_label(&self, p: &Problem) -> Result<String>;
    /// The `GDN_KERNEL` override, when set (it then decides every call's plan).
    fn kernel_override(&self) -> Option<String>;
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

/// Opens the CUDA backend on device 0, or says precisely why it cannot (no driver, no GPU, a GPU that is
/// not Hopper — named with its compute capability —, no NVRTC or headers, with the places searched).
pub fn open() -> Result<Box<dyn CudaLike>> {
    Ok(Box::new(CudaBackend::open()?))
}

/// The policy's view of a validated problem.
pub fn shape_of(p: &Problem) -> Shape {
    let h = &p.def.heads;
    Shape {
        op: p.def.op,
        num_q_heads: h.num_q_heads,
        num_v_heads: h.num_v_heads,
        head_size: h.head_size,
        num_seqs: p.dims.num_seqs,
        seq_len: p.dims.seq_len,
        total_tokens: p.dims.total_tokens,
        max_seq_len: p.dims.max_seq_len.unwrap_or(0),
        state: match p.state_out_dtype() {
            DType::BF16 => StateDtype::BF16,
            _ => StateDtype::F32,
        },
    }
}
