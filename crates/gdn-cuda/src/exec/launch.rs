//! One kernel launch on the caller's stream, and what a call launched. A call's first launch is
//! stream-ordered; every later one of the same call uses programmatic dependent launch (`cuLaunchKernelEx`
//! with programmatic stream serialization) unless `GDN_PDL=0`. Each launch's own error is checked and names
//! the kernel, its grid, block and shared memory.

use crate::exec::backend_err;
use crate::exec::kernel_set::KernelSet;
use crate::kernels::registry::ModuleBuild;
use crate::plan::prefill::PrefillPlan;
use crate::plan::{Launch, PlanKind, Rejection, Shape};
use crate::runtime::context::drv;
use cudarc::driver::{result, sys};
use gdn_core::{Op, Result};
use std::ffi::c_void;

/// What a call launched (or, from `CudaBackend::plan`, would launch): the plan's own launch descriptions.
#[derive(Clone, Debug, PartialEq)]
pub struct LaunchInfo {
    pub plan: PlanKind,
    /// The plan's name in labels: its kind's, or a forced device-plan route's override (`device-cp`).
    pub plan_name: &'static str,
    /// The kernels in stream order (nothing is launched when the first grid is empty).
    pub launches: Vec<Launch>,
    /// Workspace the launches use (bytes; the multi-kernel prefill plans: chunk64, cp, the device plan).
    pub workspace_bytes: u64,
}

impl LaunchInfo {
    pub fn recurrent(c: Launch) -> LaunchInfo {
        LaunchInfo {
            plan: PlanKind::Recurrent,
            plan_name: PlanKind::Recurrent.name(),
            launches: vec![c],
            workspace_bytes: 0,
        }
    }

    pub fn prefill(p: &PrefillPlan) -> LaunchInfo {
        LaunchInfo {
            plan: p.kind(),
            plan_name: match p {
                PrefillPlan::Device(d) => d.route.override_name(),
                _ => p.kind().name(),
            },
            launches: p.launches().into_iter().cloned().collect(),
            workspace_bytes: p.workspace_bytes(),
        }
    }

    /// The last (main) kernel: the recurrent or fused kernel, or the chunk64 walk.
    pub fn kernel(&self) -> &'static str {
        self.launches.last().map_or("", |l| l.variant.name)
    }

    /// `gdn_recurrent_...` for decode / MTP; `fused gdn_prefill_...` or
    /// `chunk64 gdn_prefill64_prep+gdn_prefill64_walk_...` for prefill.
    pub fn label(&self) -> String {
        let names: Vec<&str> = self.launches.iter().map(|l| l.variant.name).collect();
        match self.plan {
            PlanKind::Recurrent => names.join("+"),
            _ => format!("{} {}", self.plan_name, names.join("+")),
        }
    }
}

impl KernelSet {
    /// What a call of `shape` launches (with the `GDN_KERNEL` override, if set).
    pub fn describe(&self, shape: &Shape) -> std::result::Result<LaunchInfo, Rejection> {
        if shape.op == Op::Prefill {
            self.prefill_plan(shape).map(|p| LaunchInfo::prefill(&p))
        } else {
            self.choose(shape).map(LaunchInfo::recurrent)
        }
    }

    /// One launch of a chosen variant with a params struct passed by value, from build `build` of its module.
    pub(super) unsafe fn launch(
        &self,
        choice: &Launch,
        build: ModuleBuild,
        params: *mut c_void,
        stream: sys::CUstream,
    ) -> Result<()> {
        self.launch_grid(choice, choice.grid, params, stream, build, &mut true)
    }

    /// `launch` as the next launch of a call, with another grid than the choice's (the device plan's persistent
    /// launches), from build `build` of the variant's module (`registry::build_module`; the device plan's build takes
    /// the `…PlanParams` of `abi::params`). The call's first launch (`*first`, cleared once a kernel is launched) is
    /// stream-ordered: it follows the caller's work, which gives no signal to wait for. Every later one uses
    /// programmatic dependent launch (unless `GDN_PDL=0`): its CTAs may start while the previous kernel runs, and wait
    /// for it in the kernel (sm90.cuh, pdl_*).
    pub(super) unsafe fn launch_grid(
        &self,
        choice: &Launch,
        grid: (u32, u32, u32),
        params: *mut c_void,
        stream: sys::CUstream,
        build: ModuleBuild,
        first: &mut bool,
    ) -> Result<()> {
        if choice.is_empty() {
            return Ok(());
        }
        let pdl = self.pdl && !*first;
        let k = self.kernel_in(choice.variant, build)?;
        let mut args = [params];
        let launched = if pdl {
            launch_programmatic(
                k.func,
                grid,
                choice.block,
                choice.dyn_smem,
                stream,
                &mut args,
            )
        } else {
            result::launch_kernel(
                k.func,
                grid,
                (choice.block, 1, 1),
                choice.dyn_smem,
                stream,
                &mut args,
            )
        };
        *first = false;
        launched.map_err(|e| {
            backend_err(drv(
                &format!(
                    "launching {} grid {:?} block {} smem {}{}",
                    k.variant.name,
                    grid,
                    choice.block,
                    choice.dyn_smem,
                    if pdl {
                        " (programmatic dependent launch; GDN_PDL=0 turns it off)"
                    } else {
                        ""
                    }
                ),
                e,
            ))
        })
    }
}

/// `cuLaunchKernelEx` with `CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION` (cudarc's safe launchers do not take
/// launch attributes).
///
/// # Safety
/// As `result::launch_kernel`; the kernel must run `griddepcontrol.wait` before it reads what earlier work on the
/// stream wrote or writes anything (sm90.cuh, pdl_*).
unsafe fn launch_programmatic(
    func: sys::CUfunction,
    grid: (u32, u32, u32),
    block: u32,
    dyn_smem: u32,
    stream: sys::CUstream,
    args: &mut [*mut c_void],
) -> std::result::Result<(), cudarc::driver::DriverError> {
    // SAFETY: plain C structs; all-zero is a valid value of each (the union's padding included)
    let mut attr: sys::CUlaunchAttribute = std::mem::zeroed();
    attr.id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attr.value.programmaticStreamSerializationAllowed = 1;
    let config = sys::CUlaunchConfig {
        gridDimX: grid.0,
        gridDimY: grid.1,
        gridDimZ: grid.2,
        blockDimX: block,
        blockDimY: 1,
        blockDimZ: 1,
        sharedMemBytes: dyn_smem,
        hStream: stream,
        attrs: &mut attr,
        numAttrs: 1,
    };
    sys::cuLaunchKernelEx(&config, func, args.as_mut_ptr(), std::ptr::null_mut()).result()
}
