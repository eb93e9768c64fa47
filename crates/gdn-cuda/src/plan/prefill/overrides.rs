//! The prefill overrides (`GDN_KERNEL=<name>`, passed in by the caller) and the forced plans of `gdn check`.
//!
//! The grammar: `host` keeps the host's plan (without a length hint, the equal-length plan rather than the device
//! plan); `cp-exact`, `cp2-exact` force cp / cp2 without cuts; `device`, `device-fused`, `device-fused-skew`,
//! `device-chunk64`, `device-cp` force the device plan (the model's thresholds, or every call to one route: `DeviceRoute`); any other name picks a registry variant, which
//! must be of the right family and state dtype and still passes every limit check: a `gdn_prefill_*` kernel forces
//! the fused plan with that kernel; `gdn_prefill64_prep` or the walk of the call's state dtype forces the chunk64
//! plan; a `gdn_prefill64_cp_*` kernel forces cp (segments by `host::cp_forced_segments`), with two-warpgroup walks
//! when the name is a `…_cp_pass{1,3}w_*` pass.

use crate::kernels::registry::{self, Family};
use crate::plan::prefill::device;
use crate::plan::prefill::host;
use crate::plan::prefill::types::{DeviceRoute, PrefillPlan};
use crate::plan::{DeviceCaps, PlanKind, Rejection, Shape};

/// The override (`GDN_KERNEL=host`) that keeps the automatic plan on the host: calls without a length hint take the
/// equal-length plan instead of the device plan (A/B measurements, opting out). It names no kernel.
pub const HOST_PLAN_OVERRIDE: &str = "host";

/// The overrides that force the cp plan with one / two warpgroups per walk CTA and no cuts: every head walks the
/// affine path (summaries, transitions, scan), whatever its gates. `gdn check` runs them beside cp and cp2, whose
/// cuts must agree with them.
pub const CP_EXACT_OVERRIDES: [(&str, u64); 2] = [("cp-exact", 1), ("cp2-exact", 2)];

/// The plan override `name` forces for the prefill call `s` (its checks passed).
pub fn forced(s: &Shape, caps: &DeviceCaps, name: &str) -> Result<PrefillPlan, Rejection> {
    if name == HOST_PLAN_OVERRIDE {
        return host::plan(s, caps);
    }
    if let Some(&(_, wg)) = CP_EXACT_OVERRIDES.iter().find(|(n, _)| *n == name) {
        let mut plan = forced_cp(s, caps, wg, name)?;
        if let PrefillPlan::ContextParallel { cuts, .. } = &mut plan {
            *cuts = false;
        }
        return Ok(plan);
    }
    if let Some(route) = DeviceRoute::from_override(name) {
        return device::forced(s, caps, route, &host::plan);
    }
    let bad = |problem: String| Rejection::Override {
        name: name.to_string(),
        problem,
    };
    let v = registry::find(name).ok_or_else(|| bad("no such kernel in the registry".into()))?;
    match v.family {
        Family::Prefill => Ok(PrefillPlan::Fused {
            variant: host::fused_launch(s, caps, Some(name))?,
        }),
        Family::Prefill64Walk if v.state != s.state => Err(bad(format!(
            "it is the chunk64 walk for {} state; this call has {} state",
            v.state.name(),
            s.state.name()
        ))),
        Family::Prefill64CpPass1 | Family::Prefill64CpPass3 if v.state != s.state => {
            Err(bad(format!(
                "it is a context-parallel pass for {} state; this call has {} state",
                v.state.name(),
                s.state.name()
            )))
        }
        Family::Prefill64Prep | Family::Prefill64Walk => {
            host::chunk64_plan(s, caps, format!("forced by override '{name}'"))
        }
        Family::Prefill64CpPass1 | Family::Prefill64CpScan | Family::Prefill64CpPass3 => {
            // a pass names its walk form; a scan names none: one warpgroup
            let wg = match v.family {
                Family::Prefill64CpScan => 1,
                _ => registry::walk_warpgroups(v) as u64,
            };
            forced_cp(s, caps, wg, name)
        }
        other => Err(bad(format!(
            "it is a {other:?} kernel; a prefill call takes gdn_prefill_* (fused plan), \
             gdn_prefill64_prep / _walk_* (chunk64 plan) or gdn_prefill64_cp_* (cp plan)"
        ))),
    }
}

/// The cp plan with `wg` warpgroups per walk CTA that override `name` forces: the default segment count.
fn forced_cp(s: &Shape, caps: &DeviceCaps, wg: u64, name: &str) -> Result<PrefillPlan, Rejection> {
    let g = host::cp_forced_segments(s, caps.sm_count as u64, wg);
    let why = format!("forced by override '{name}'");
    host::cp_plan(s, caps, (g, host::cp_seg_chunks(s, g), wg), why)
}

/// The override name that forces prefill plan `kind` for `s`: fused → the kernel the automatic fused rule
/// picks; chunk64 → the walk of the state dtype; cp / cp2 → the pass 3 of the state dtype with one / two
/// warpgroups. `gdn check` runs each prefill case once per plan this way.
pub fn prefill_override_for(
    kind: PlanKind,
    s: &Shape,
    caps: &DeviceCaps,
) -> Result<&'static str, Rejection> {
    match kind {
        PlanKind::Fused => host::fused_launch(s, caps, None).map(|c| c.variant.name),
        PlanKind::Chunk64 => registry::candidates(Family::Prefill64Walk, s.state)
            .find(|v| v.hot)
            .map(|v| v.name)
            .ok_or(Rejection::NoVariant {
                family: Family::Prefill64Walk,
                state: s.state,
            }),
        PlanKind::ContextParallel | PlanKind::ContextParallelWide => {
            let wg = if kind == PlanKind::ContextParallel {
                1
            } else {
                2
            };
            registry::candidates(Family::Prefill64CpPass3, s.state)
                .find(|v| v.hot && registry::walk_warpgroups(v) == wg)
                .map(|v| v.name)
                .ok_or(Rejection::NoVariant {
                    family: Family::Prefill64CpPass3,
                    state: s.state,
                })
        }
        PlanKind::Device => Ok(DeviceRoute::Model.override_name()),
        PlanKind::Recurrent => Err(Rejection::Override {
            name: "recurrent".into(),
            problem: "not a prefill plan".into(),
        }),
    }
}

/// A prefill plan forced by name (`gdn check` runs every case once per `ForcedPlan::CHECKED`): a plan kind, by the
/// override that forces it for the shape (`prefill_override_for`), or a route of the device plan.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum ForcedPlan {
    Kind(PlanKind),
    /// The fused plan's tile with its sequences longest first: the automatic tile's longest-first build, or bv64's
    /// where that tile has none; whatever the shape, so that every check case runs the ranking.
    FusedLongestFirst,
    /// The split bv128 tile of the call's state dtype, whatever the shape: every check case runs its spare groups,
    /// and the cases with a sequence over `cost::split_threshold` its half CTAs.
    FusedSplit,
    /// The compact tile (`_np2`, what 99 KB GPUs run) nearest the automatic tile's width: bv32 for bv16 and bv32,
    /// bv64 for bv64 and bv128; on any GPU, so that every check case runs them.
    FusedCompact,
    /// cp (false) or cp2 (true) without cuts (`CP_EXACT_OVERRIDES`).
    CpExact(bool),
    Device(DeviceRoute),
}

impl ForcedPlan {
    /// Every host plan, the device plan with the model's thresholds, and each of its forced routes.
    pub const CHECKED: [ForcedPlan; 14] = [
        ForcedPlan::Kind(PlanKind::Fused),
        ForcedPlan::FusedLongestFirst,
        ForcedPlan::FusedSplit,
        ForcedPlan::FusedCompact,
        ForcedPlan::Kind(PlanKind::Chunk64),
        ForcedPlan::Kind(PlanKind::ContextParallel),
        ForcedPlan::Kind(PlanKind::ContextParallelWide),
        ForcedPlan::CpExact(false),
        ForcedPlan::CpExact(true),
        ForcedPlan::Device(DeviceRoute::Model),
        ForcedPlan::Device(DeviceRoute::Fused),
        ForcedPlan::Device(DeviceRoute::FusedSkew),
        ForcedPlan::Device(DeviceRoute::Chunk64),
        ForcedPlan::Device(DeviceRoute::Cp),
    ];

    pub fn name(self) -> &'static str {
        match self {
            ForcedPlan::Kind(k) => k.name(),
            ForcedPlan::FusedLongestFirst => "fused-lf",
            ForcedPlan::FusedSplit => "fused-split",
            ForcedPlan::FusedCompact => "fused-np2",
            ForcedPlan::CpExact(wide) => CP_EXACT_OVERRIDES[wide as usize].0,
            ForcedPlan::Device(r) => r.override_name(),
        }
    }

    /// Whether a device with `caps` has this plan's kernels: the fused plans where their tiles fit its shared memory
    /// (every target has the fused module), the rest (wgmma) on Hopper.
    pub fn available(self, caps: &DeviceCaps) -> bool {
        let fits = |build: fn(&registry::Variant) -> bool| {
            registry::VARIANTS
                .iter()
                .any(|v| build(v) && v.dyn_smem <= caps.max_dyn_smem)
        };
        match self {
            ForcedPlan::Kind(PlanKind::Fused) | ForcedPlan::FusedCompact => true,
            ForcedPlan::FusedLongestFirst => fits(|v| v.longest_first),
            ForcedPlan::FusedSplit => fits(registry::is_split),
            ForcedPlan::Kind(_) | ForcedPlan::CpExact(_) | ForcedPlan::Device(_) => {
                caps.builds(&registry::PREFILL64)
            }
        }
    }

    /// The override that forces this plan for `s`.
    pub fn override_for(self, s: &Shape, caps: &DeviceCaps) -> Result<&'static str, Rejection> {
        match self {
            ForcedPlan::Kind(k) => prefill_override_for(k, s, caps),
            ForcedPlan::FusedLongestFirst => {
                let tile = host::fused_launch(s, caps, None)?.variant;
                registry::longest_first_of(tile)
                    .or_else(|| {
                        registry::VARIANTS
                            .iter()
                            .find(|v| v.longest_first && v.state == s.state && v.ctas_per_head == 2)
                    })
                    .map(|v| v.name)
                    .ok_or(Rejection::NoVariant {
                        family: Family::Prefill,
                        state: s.state,
                    })
            }
            ForcedPlan::FusedSplit => registry::VARIANTS
                .iter()
                .find(|v| registry::is_split(v) && v.state == s.state)
                .map(|v| v.name)
                .ok_or(Rejection::NoVariant {
                    family: Family::Prefill,
                    state: s.state,
                }),
            ForcedPlan::FusedCompact => {
                let tile = host::fused_launch(s, caps, None)?.variant;
                let width = (tile.ctas_per_head).clamp(2, 4); // bv128 -> bv64, bv16 -> bv32
                registry::VARIANTS
                    .iter()
                    .find(|v| {
                        registry::is_compact(v) && v.state == s.state && v.ctas_per_head == width
                    })
                    .map(|v| v.name)
                    .ok_or(Rejection::NoVariant {
                        family: Family::Prefill,
                        state: s.state,
                    })
            }
            ForcedPlan::CpExact(wide) => Ok(CP_EXACT_OVERRIDES[wide as usize].0),
            ForcedPlan::Device(r) => Ok(r.override_name()),
        }
    }
}
