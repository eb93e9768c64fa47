//! Prefill calls: the chosen plan's launches, in stream order. The fused plan is one launch; chunk64 is prep
//! then walk; context-parallel is prep, pass 1, scan, pass 3 (all on one `Prefill64Params`); the device plan
//! launches the fused tiles and the prefill64 kernels from their device-plan builds, each reading the
//! longest sequence's length from `cu_seqlens` and running the call or exiting.

use crate::abi::args::{bad, PrefillArgs};
use crate::abi::params::{
    Prefill64Params, Prefill64PlanParams, PrefillParams, PrefillPlanParams, DP_LAUNCHES,
};
use crate::exec::kernel_set::KernelSet;
use crate::exec::launch::LaunchInfo;
use crate::kernels::registry::{prefill64, ModuleBuild};
use crate::plan::prefill::{types, workspace, DevicePlan, PrefillPlan};
use crate::plan::Launch;
use cudarc::driver::sys;
use gdn_core::Result;
use std::ffi::c_void;

impl KernelSet {
    /// Launches prefill on `stream`: the plan's kernels, in order (with the `GDN_KERNEL` override, if set).
    ///
    /// # Safety
    /// As `launch_recurrent`; `cu_seqlens` (int64, or int32 with `serving.cu_i32`) must hold `num_seqs + 1`
    /// valid, non-decreasing offsets ending at `total_tokens` (the kernel reads them on the device; they are not
    /// checked here), and the serving tensors' values (pool rows, checkpoint row starts) must be in range (pool
    /// indices past `num_state_rows` are taken as padding); `workspace` must address `workspace_bytes` bytes of
    /// device memory that nothing else uses until the kernels have run.
    pub unsafe fn launch_prefill(
        &self,
        args: &PrefillArgs,
        stream: sys::CUstream,
    ) -> Result<LaunchInfo> {
        self.launch_prefill_with(args, stream, self.env_override())
    }

    /// `launch_prefill` with an explicit override (`None`: automatic, ignoring `GDN_KERNEL`).
    ///
    /// # Safety
    /// As `launch_prefill`.
    pub unsafe fn launch_prefill_with(
        &self,
        args: &PrefillArgs,
        stream: sys::CUstream,
        force: Option<&str>,
    ) -> Result<LaunchInfo> {
        let plan = self.prefill_plan_with(&args.shape(), force)?;
        self.launch_prefill_plan(args, &plan, stream)
    }

    /// Launches a prefill plan already chosen for `args.shape()` (by `prefill_plan`), so that a caller that
    /// sized the workspace from the plan does not plan the call twice.
    ///
    /// # Safety
    /// As `launch_prefill`; `plan` must be the plan of `args.shape()` (its grids and workspace are sized for
    /// it: the workspace size is checked, the rest is not).
    pub unsafe fn launch_prefill_plan(
        &self,
        args: &PrefillArgs,
        plan: &PrefillPlan,
        stream: sys::CUstream,
    ) -> Result<LaunchInfo> {
        args.validate()?;
        let info = LaunchInfo::prefill(plan);
        if plan.is_empty() {
            return Ok(info);
        }
        args.validate_workspace(plan)?;
        args.validate_plan(plan)?;
        // a call in any serving mode runs the serving builds (registry::PREFILL_SV …); definition calls the default
        let build = ModuleBuild {
            serving: args.serving.is_active(),
            ..ModuleBuild::default()
        };
        match plan {
            PrefillPlan::Fused { variant } => {
                let params = args.params();
                self.launch(
                    variant,
                    build,
                    &params as *const PrefillParams as *mut c_void,
                    stream,
                )?;
            }
            PrefillPlan::Chunk64 { prep, walk, .. } => {
                // both kernels read the same params; the walk consumes what the prep wrote (stream order, or the
                // walk's griddepcontrol.wait under programmatic dependent launch)
                let params = args.params64();
                let p = &params as *const Prefill64Params as *mut c_void;
                let mut first = true;
                for c in [prep, walk] {
                    self.launch_grid(c, c.grid, p, stream, build, &mut first)?;
                }
            }
            PrefillPlan::ContextParallel {
                prep,
                pass1,
                scan,
                pass3,
                seg_chunks,
                cuts,
                ..
            } => {
                // one params struct for all four (stream order carries the workspace from one to the next)
                let mut params = args.params64();
                if *seg_chunks > prefill64::MAX_SEG_CHUNKS {
                    return Err(bad("cu_seqlens", "segment length does not fit 30 bits"));
                }
                let exact = if *cuts { 0 } else { prefill64::CP_EXACT };
                params.seg_chunks = (*seg_chunks | exact) as i32;
                let p = &params as *const Prefill64Params as *mut c_void;
                let mut first = true;
                for c in [prep, pass1, scan, pass3] {
                    self.launch_grid(c, c.grid, p, stream, build, &mut first)?;
                }
            }
            PrefillPlan::Device(d) => {
                self.launch_device_plan(args, d, plan.workspace_bytes(), build, stream)?
            }
        }
        Ok(info)
    }

    /// The device plan's launches: every launch reads the longest sequence's length from `cu_seqlens` and runs
    /// the call or exits (`plan::prefill::device`), from the device plan's builds of the kernels
    /// (`registry::device_plan_module`).
    ///
    /// # Safety
    /// As `launch_prefill_plan`; the arguments are validated and the workspace (`workspace_bytes`, the plan's)
    /// checked.
    unsafe fn launch_device_plan(
        &self,
        args: &PrefillArgs,
        d: &DevicePlan,
        workspace_bytes: u64,
        build: ModuleBuild,
        stream: sys::CUstream,
    ) -> Result<()> {
        let build = ModuleBuild {
            device_plan: true,
            ..build
        };
        let th = &d.thresholds;
        let tokens = |x: u64| i64::try_from(x).unwrap_or(i64::MAX);
        let small = |name: &str, x: u64| {
            i32::try_from(x).map_err(|_| {
                bad(
                    "cu_seqlens",
                    format!("device plan: {name} {x} does not fit i32"),
                )
            })
        };
        // the fused tiles: [0, tile_from) and [tile_from, run_from) (an empty range: never, run_below -1)
        let tile_from = th.tile_from.min(th.run_from);
        let mut first = true;
        for (f, from, below) in [
            (&d.fused, 0, tile_from),
            (&d.fused_skew, tile_from, th.run_from),
        ] {
            if let Some(f) = f {
                let params = PrefillPlanParams {
                    p: args.params(),
                    run_below: if below <= from { -1 } else { tokens(below) },
                    run_from: tokens(from),
                };
                let p = &params as *const PrefillPlanParams as *mut c_void;
                self.launch_grid(f, f.grid, p, stream, build, &mut first)?;
            }
        }
        // the prefill64 launches in `Prefill64PlanParams::vgrid` order; those after the prep are persistent
        // (at most a wave of CTAs, `types::launched_ctas`) and loop over the grid given as vgrid
        let launches: [Option<&Launch>; DP_LAUNCHES] = d.prefill64_launches();
        let mut vgrid = [[0u32; 3]; DP_LAUNCHES];
        for (g, c) in vgrid.iter_mut().zip(&launches) {
            if let Some(c) = c {
                *g = [c.grid.0, c.grid.1, c.grid.2];
                small("grid", c.ctas())?;
            }
        }
        if launches.iter().all(|c| c.is_none()) {
            return Ok(()); // (the fused launches take every call)
        }
        let counters = workspace_bytes
            .checked_sub(workspace::DP_COUNTER_BYTES)
            .ok_or_else(|| bad("workspace", "device plan without its counters"))?;
        let params = Prefill64PlanParams {
            p: args.params64(),
            plan_from: tokens(th.run_from),
            plan_cp_from: tokens(th.cp_from),
            plan_cp_l_lo: small("segment length", th.cp_l_lo.max(1))?,
            plan_cp_l_hi: small("segment length", th.cp_l_hi.max(th.cp_l_lo).max(1))?,
            claimed: args.workspace + counters,
            vgrid,
            pad: 0,
        };
        let p = &params as *const Prefill64PlanParams as *mut c_void;
        let sms = self.caps.sm_count as u64;
        for c in launches.into_iter().flatten() {
            let ctas = types::launched_ctas(c, sms) as u32; // (<= the grid: it fits)
            self.launch_grid(c, (ctas, 1, 1), p, stream, build, &mut first)?;
        }
        Ok(())
    }
}
