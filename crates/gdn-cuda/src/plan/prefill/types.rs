//! What a prefill call launches: `PrefillPlan` (a host plan, or a `DevicePlan` with its `Thresholds` and
//! `DeviceRoute`), and how many CTAs each launch of a device plan dispatches (`launched_ctas`). Types and their
//! accessors only; the planners that build them are `host` and `device`.

use crate::kernels::registry::Family;
use crate::plan::{Launch, PlanKind};

/// How a prefill call runs: the launches, in stream order, and the workspace they need.
#[derive(Clone, Debug, PartialEq)]
pub enum PrefillPlan {
    /// One `gdn_prefill_*` launch; no workspace.
    Fused { variant: Launch },
    /// `gdn_prefill64_prep` then `gdn_prefill64_walk_*`, sharing a workspace of `workspace_bytes`
    /// (0 when there is nothing to launch).
    Chunk64 {
        prep: Launch,
        walk: Launch,
        workspace_bytes: u64,
    },
    /// `gdn_prefill64_prep`, `gdn_prefill64_cp_pass1_*`, `gdn_prefill64_cp_scan{,8}`, `gdn_prefill64_cp_pass3_*`
    /// with `Prefill64Params::seg_chunks = seg_chunks`, sharing a workspace of `workspace_bytes`.
    ContextParallel {
        prep: Launch,
        pass1: Launch,
        scan: Launch,
        pass3: Launch,
        /// Segments of the longest sequence (forced plans: of the average one), and chunks per segment (L).
        segments: u64,
        seg_chunks: u64,
        /// Warpgroups per walk CTA of the passes (1 or 2: plan kind cp / cp2).
        warpgroups: u64,
        /// Exact cuts where the gates allow them (decided per head on the device; `kernels/prefill_chunk64/cp_passes.cuh`),
        /// or the affine path for every head (`cp-exact`, `cp2-exact`: `Prefill64Params::seg_chunks` carries
        /// `CP_EXACT`).
        cuts: bool,
        workspace_bytes: u64,
    },
    /// The device plan (`device`): every candidate launch, each running the call or exiting by its longest length.
    Device(DevicePlan),
}

impl PrefillPlan {
    pub fn kind(&self) -> PlanKind {
        match self {
            PrefillPlan::Fused { .. } => PlanKind::Fused,
            PrefillPlan::Chunk64 { .. } => PlanKind::Chunk64,
            PrefillPlan::ContextParallel { warpgroups: 2, .. } => PlanKind::ContextParallelWide,
            PrefillPlan::ContextParallel { .. } => PlanKind::ContextParallel,
            PrefillPlan::Device(_) => PlanKind::Device,
        }
    }

    /// The device plan, when this is one.
    pub fn device(&self) -> Option<&DevicePlan> {
        match self {
            PrefillPlan::Device(d) => Some(d),
            _ => None,
        }
    }

    /// Nothing to launch (no sequences).
    pub fn is_empty(&self) -> bool {
        match self {
            PrefillPlan::Fused { variant } => variant.is_empty(),
            PrefillPlan::Chunk64 { walk, .. } => walk.is_empty(),
            PrefillPlan::ContextParallel { pass3, .. } => pass3.is_empty(),
            PrefillPlan::Device(d) => d.launches().iter().all(|c| c.is_empty()),
        }
    }

    /// Device scratch the plan needs (bytes, 256-byte aligned): 0 for the fused plan.
    pub fn workspace_bytes(&self) -> u64 {
        match self {
            PrefillPlan::Fused { .. } => 0,
            PrefillPlan::Chunk64 {
                workspace_bytes, ..
            }
            | PrefillPlan::ContextParallel {
                workspace_bytes, ..
            } => *workspace_bytes,
            PrefillPlan::Device(d) => d.workspace_bytes,
        }
    }

    /// The launches, in stream order.
    pub fn launches(&self) -> Vec<&Launch> {
        match self {
            PrefillPlan::Fused { variant } => vec![variant],
            PrefillPlan::Chunk64 { prep, walk, .. } => vec![prep, walk],
            PrefillPlan::ContextParallel {
                prep,
                pass1,
                scan,
                pass3,
                ..
            } => vec![prep, pass1, scan, pass3],
            PrefillPlan::Device(d) => d.launches(),
        }
    }

    /// `fused gdn_prefill_f32_bv16` / `chunk64 gdn_prefill64_prep+gdn_prefill64_walk_f32`; a device plan with a
    /// forced route is labelled by its override (`device-cp …`).
    pub fn label(&self) -> String {
        let names: Vec<&str> = self.launches().iter().map(|c| c.variant.name).collect();
        let kind = match self {
            PrefillPlan::Device(d) => d.route.override_name(),
            _ => self.kind().name(),
        };
        format!("{kind} {}", names.join("+"))
    }

    /// Why this plan (and kernel).
    pub fn why(&self) -> &str {
        match self {
            PrefillPlan::Fused { variant } => &variant.why,
            PrefillPlan::Chunk64 { walk, .. } => &walk.why,
            PrefillPlan::ContextParallel { pass3, .. } => &pass3.why,
            PrefillPlan::Device(_) => self.launches().last().map_or("", |c| &*c.why),
        }
    }
}

/// The device plan's launches, in stream order: the fused kernel (absent when it never runs the call), a second fused
/// tile for skewed lengths (present when `thresholds.tile_from` < `run_from`), the prep (absent when only the fused
/// launches can), the chunk64 walk (absent when cp takes every call the prep does), cp pass 1, scan, pass 3 (absent
/// when cp never runs); `thresholds` go to the kernels' params.
#[derive(Clone, Debug, PartialEq)]
pub struct DevicePlan {
    pub fused: Option<Launch>,
    pub fused_skew: Option<Launch>,
    pub prep: Option<Launch>,
    pub walk: Option<Launch>,
    /// cp pass 1, scan, pass 3.
    pub cp: Option<[Launch; 3]>,
    pub thresholds: Thresholds,
    pub route: DeviceRoute,
    pub workspace_bytes: u64,
}

/// What runs a device-planned call (`DevicePlan::route_at`).
#[derive(Copy, Clone, Debug, PartialEq)]
pub enum DeviceRun<'a> {
    /// A fused launch (the first tile or the skewed one; None: the plan has no such launch).
    Fused(Option<&'a Launch>),
    Chunk64,
    /// The cp passes with segments of `seg_chunks` chunks.
    Cp {
        seg_chunks: u64,
    },
}

impl DevicePlan {
    /// The launches, in stream order.
    pub fn launches(&self) -> Vec<&Launch> {
        self.fused
            .iter()
            .chain(&self.fused_skew)
            .chain(&self.prep)
            .chain(&self.walk)
            .chain(self.cp.iter().flatten())
            .collect()
    }

    /// The prefill64 launches in `Prefill64PlanParams::vgrid` order: prep, chunk64 walk, cp pass 1, scan, pass 3.
    pub fn prefill64_launches(&self) -> [Option<&Launch>; 5] {
        let cp = self.cp.as_ref();
        [
            self.prep.as_ref(),
            self.walk.as_ref(),
            cp.map(|c| &c[0]),
            cp.map(|c| &c[1]),
            cp.map(|c| &c[2]),
        ]
    }

    /// What runs a call of `total_tokens` tokens whose longest sequence has `x` (as the kernels decide from the
    /// thresholds), and the other launches, which exit: below `run_from` a fused tile (the skewed one from
    /// `tile_from`), below `cp_from` the chunk64 walk, else the cp passes (the prep runs for both).
    pub fn route_at(&self, x: u64, total_tokens: u64) -> (DeviceRun<'_>, Vec<&Launch>) {
        let th = &self.thresholds;
        let cps = self.cp.iter().flatten();
        if x < th.run_from {
            let (runs, other) = if x < th.tile_from {
                (&self.fused, &self.fused_skew)
            } else {
                (&self.fused_skew, &self.fused)
            };
            let exits = other
                .iter()
                .chain(&self.prep)
                .chain(&self.walk)
                .chain(cps)
                .collect();
            (DeviceRun::Fused(runs.as_ref()), exits)
        } else if x < th.cp_from {
            let exits = self
                .fused
                .iter()
                .chain(&self.fused_skew)
                .chain(cps)
                .collect();
            (DeviceRun::Chunk64, exits)
        } else {
            let seg_chunks = th.seg_chunks_at(x, total_tokens);
            let exits = self
                .fused
                .iter()
                .chain(&self.fused_skew)
                .chain(&self.walk)
                .collect();
            (DeviceRun::Cp { seg_chunks }, exits)
        }
    }
}

/// The thresholds the kernels compare the longest sequence's length X (tokens) with.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Thresholds {
    /// The fused launches run the call when X < run_from, the prefill64 launches when X >= run_from (0: the fused
    /// launches never run; u64::MAX: only they run).
    pub run_from: u64,
    /// Below run_from: the first fused tile when X < tile_from, the second (`DevicePlan::fused_skew`, a narrower
    /// tile for skewed lengths) from tile_from (u64::MAX: one tile).
    pub tile_from: u64,
    /// The cp plan when X >= cp_from, else chunk64 (u64::MAX: never cp).
    pub cp_from: u64,
    /// cp: chunks per segment L at X = cp_from (the smallest the device takes: the cp launches are sized for it)
    /// and at X = T; between, the device interpolates linearly in X (the model's L grows with X, more slowly).
    pub cp_l_lo: u64,
    pub cp_l_hi: u64,
    /// cp: warpgroups per walk CTA (1: cp, 2: cp2).
    pub warpgroups: u64,
}

impl Thresholds {
    /// The cp segment length the device takes when the longest of `total_tokens` has `x` >= cp_from tokens (as
    /// `device_plan_runs` in the chunk64 kernels): cp_l_lo + (cp_l_hi − cp_l_lo)·(x − cp_from)/(T − cp_from),
    /// rounded down.
    pub fn seg_chunks_at(&self, x: u64, total_tokens: u64) -> u64 {
        let (lo, hi) = (self.cp_l_lo.max(1), self.cp_l_hi.max(self.cp_l_lo).max(1));
        let span = total_tokens.saturating_sub(self.cp_from);
        if span == 0 {
            return lo;
        }
        let over = x.saturating_sub(self.cp_from).min(span);
        lo + ((hi - lo) as u128 * over as u128 / span as u128) as u64
    }
}

/// Which launch a device-planned call runs on: the cost model's thresholds, or (tests, `gdn check`) one launch for
/// every call, with the others still launched and exiting.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum DeviceRoute {
    Model,
    Fused,
    /// The second fused tile (the one for skewed calls, from `Thresholds::tile_from`).
    FusedSkew,
    Chunk64,
    Cp,
}

impl DeviceRoute {
    /// The routes `gdn check` forces, one run each.
    pub const FORCED: [DeviceRoute; 4] = [
        DeviceRoute::Fused,
        DeviceRoute::FusedSkew,
        DeviceRoute::Chunk64,
        DeviceRoute::Cp,
    ];

    /// The override (`GDN_KERNEL`) that forces this route.
    pub fn override_name(self) -> &'static str {
        match self {
            DeviceRoute::Model => "device",
            DeviceRoute::Fused => "device-fused",
            DeviceRoute::FusedSkew => "device-fused-skew",
            DeviceRoute::Chunk64 => "device-chunk64",
            DeviceRoute::Cp => "device-cp",
        }
    }

    pub fn from_override(name: &str) -> Option<DeviceRoute> {
        std::iter::once(DeviceRoute::Model)
            .chain(DeviceRoute::FORCED)
            .find(|r| r.override_name() == name)
    }
}

/// Shared memory of an SM that CTAs can use (H100 / H200: 228 KB), and what each CTA reserves besides its own.
const SM_SMEM_BYTES: u64 = 233_472;
const CTA_SMEM_RESERVED: u64 = 1024;

/// The CTAs of launch `c` an SM holds at once, by shared memory and threads.
pub(crate) fn resident_per_sm(c: &Launch) -> u64 {
    (SM_SMEM_BYTES / (c.dyn_smem as u64 + CTA_SMEM_RESERVED))
        .min(2048 / c.block.max(1) as u64)
        .clamp(1, 32)
}

/// Whether the device plan launches `c` persistently: the walks, the cp passes and the scan. Their CTAs loop over the
/// grid the host sized (`Launch::grid`, passed as `Prefill64PlanParams::vgrid`), claiming items from a counter, so
/// that a launch that is not the call's costs one wave of exits, not one per wave of its grid (blind 64×1024 would
/// otherwise pay ~29 µs for ~38 such waves on the H200). The prep keeps its grid (one item per CTA: its loop form
/// needs twice the registers, `dp_items` in the chunk64 kernels); the fused kernels too (their pipelines run one
/// chain per CTA).
pub fn persistent(c: &Launch) -> bool {
    matches!(
        c.variant.family,
        Family::Prefill64Walk
            | Family::Prefill64CpPass1
            | Family::Prefill64CpScan
            | Family::Prefill64CpPass3
    )
}

/// The CTAs the device plan launches for `c`: a persistent launch's at most one wave (the CTAs `sms` SMs hold at once),
/// every other launch's whole grid.
pub fn launched_ctas(c: &Launch, sms: u64) -> u64 {
    if persistent(c) {
        c.ctas().min(sms.max(1) * resident_per_sm(c))
    } else {
        c.ctas()
    }
}
