//! The kernel choice a packed solution makes without the planner: what the library's planner picks, tabulated at
//! pack time for the device the tables are computed for (`PACK_CAPS`, an H100 / H200 SXM), and re-sized at call
//! time for the call's own shape.
//!
//! * Decode / MTP: `plan::decode::RECURRENT_TABLE`'s rows of the definition build (f32 state), looked up by the
//!   equivalent batch `ceil(B · HV/8 · 132/SMs)` with the call's SM count, as the library does.
//! * Prefill: `plan::prefill::choose` (no length hint: the blind host plan or the device plan) at the lower edge of
//!   each (N, T) bin. A bin's plan is kept as a `Template` (its kernels, segment length, device-plan thresholds);
//!   a call takes its bin's template and sizes the grids, the persistent launches and the workspace for its own T
//!   and N with the formulas of `plan::grid` and `plan::prefill::workspace` (`instantiate`, mirrored by the
//!   generated C++ `gdn_pack::prefill_instance`). Any template is correct for any lengths (the kernels read
//!   `cu_seqlens` on the device; the device plan's launches decide there); the bin only steers speed. N bins are
//!   split at the kernels' sequence limits (the longest-first tiles rank at most 128 sequences, the device plan
//!   reads at most 256), so a template never meets an N its kernels cannot take.

use gdn_core::Op;
use gdn_cuda::kernels::registry::{self, prefill64, GridOrder, ModuleBuild, Variant};
use gdn_cuda::plan::grid::{cp_grid, grid_of};
use gdn_cuda::plan::prefill::types::{launched_ctas, persistent};
use gdn_cuda::plan::prefill::workspace::{
    device_plan_workspace_bytes, prefill64_cp_workspace_bytes, prefill64_workspace_bytes,
    DP_COUNTER_BYTES,
};
use gdn_cuda::plan::prefill::{self, PrefillPlan, Thresholds};
use gdn_cuda::plan::{DeviceCaps, Launch, Shape};
use gdn_cuda::StateDtype;

/// The device the prefill tables are computed for (the planner's calibration device).
pub const PACK_CAPS: DeviceCaps = DeviceCaps::HOPPER_132;

/// Sequence-count bins: their lower edges (a bin runs to the next edge; the last one has no end).
pub fn n_edges() -> Vec<u64> {
    let mut e: Vec<u64> = (1..=8).collect();
    e.extend((12..=64).map(|k| 2f64.powf(k as f64 / 4.0).round() as u64));
    // the longest-first tiles' and the device plan's limits end a bin
    e.extend([
        prefill::host::LONGEST_FIRST_MAX_N + 1,
        registry::DEVICE_PLAN_MAX_N + 1,
    ]);
    e.sort_unstable();
    e.dedup();
    e
}

/// Token-count bins: lower edges, 0 … 8 and then four per octave up to 2^22.
pub fn t_edges() -> Vec<u64> {
    let mut e: Vec<u64> = (0..=8).collect();
    e.extend((12..=88).map(|k| 2f64.powf(k as f64 / 4.0).round() as u64));
    e.sort_unstable();
    e.dedup();
    e
}

/// The bin of `x` among `edges` (the last edge <= x).
#[cfg_attr(not(test), allow(dead_code))]
pub fn bin_of(edges: &[u64], x: u64) -> usize {
    edges.partition_point(|&e| e <= x).saturating_sub(1)
}

/// Which plan a template launches.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    Fused = 0,
    Chunk64 = 1,
    ContextParallel = 2,
    Device = 3,
}

/// Launch roles, in stream order (an absent role is not launched).
pub const ROLES: [&str; 7] = [
    "fused",
    "fused_skew",
    "prep",
    "walk",
    "pass1",
    "scan",
    "pass3",
];

/// A prefill plan without its sizes: its kernels by role, the cp segment length (the device plan's: the
/// shortest it takes, `cp_l_lo`), the device plan's thresholds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Template {
    pub kind: Kind,
    pub roles: [Option<&'static Variant>; 7],
    pub seg_chunks: u64,
    pub thresholds: Option<Thresholds>,
}

impl Template {
    pub fn of(plan: &PrefillPlan) -> Template {
        let v = |c: &Launch| Some(c.variant);
        let mut roles = [None; 7];
        let (kind, seg_chunks, thresholds) = match plan {
            PrefillPlan::Fused { variant } => {
                roles[0] = v(variant);
                (Kind::Fused, 0, None)
            }
            PrefillPlan::Chunk64 { prep, walk, .. } => {
                roles[2] = v(prep);
                roles[3] = v(walk);
                (Kind::Chunk64, 0, None)
            }
            PrefillPlan::ContextParallel {
                prep,
                pass1,
                scan,
                pass3,
                seg_chunks,
                ..
            } => {
                roles[2] = v(prep);
                roles[4] = v(pass1);
                roles[5] = v(scan);
                roles[6] = v(pass3);
                (Kind::ContextParallel, *seg_chunks, None)
            }
            PrefillPlan::Device(d) => {
                roles[0] = d.fused.as_ref().and_then(v);
                roles[1] = d.fused_skew.as_ref().and_then(v);
                roles[2] = d.prep.as_ref().and_then(v);
                roles[3] = d.walk.as_ref().and_then(v);
                if let Some(cp) = &d.cp {
                    roles[4] = v(&cp[0]);
                    roles[5] = v(&cp[1]);
                    roles[6] = v(&cp[2]);
                }
                let th = d.thresholds;
                (Kind::Device, th.cp_l_lo.max(1), Some(th))
            }
        };
        Template {
            kind,
            roles,
            seg_chunks,
            thresholds,
        }
    }

    /// The module build its kernels come from (the device plan's builds for a device plan).
    pub fn build(&self) -> ModuleBuild {
        ModuleBuild {
            device_plan: self.kind == Kind::Device,
            ..ModuleBuild::default()
        }
    }
}

/// The prefill shape of `t` tokens in `n` sequences with `def`'s heads (f32 state, no length hint).
pub fn prefill_shape(h: usize, hv: usize, t: u64, n: u64) -> Shape {
    Shape {
        op: Op::Prefill,
        num_q_heads: h,
        num_v_heads: hv,
        head_size: registry::HEAD_DIM as usize,
        num_seqs: n as usize,
        seq_len: 0,
        total_tokens: t as usize,
        max_seq_len: 0,
        state: StateDtype::F32,
    }
}

/// Every bin's template: (distinct templates, template index per (n bin, t bin), row-major by n).
pub struct PrefillTable {
    pub n_edges: Vec<u64>,
    pub t_edges: Vec<u64>,
    pub templates: Vec<Template>,
    pub index: Vec<u16>,
}

/// The library's plan for every bin's lower edge, as templates.
pub fn prefill_table(h: usize, hv: usize) -> Result<PrefillTable, String> {
    let (n_edges, t_edges) = (n_edges(), t_edges());
    let mut templates: Vec<Template> = Vec::new();
    let mut index = Vec::with_capacity(n_edges.len() * t_edges.len());
    for &n in &n_edges {
        for &t in &t_edges {
            let s = prefill_shape(h, hv, t, n);
            let plan = prefill::choose(&s, &PACK_CAPS, None)
                .map_err(|e| format!("prefill plan for T = {t}, N = {n}: {e}"))?;
            let tpl = Template::of(&plan);
            let i = match templates.iter().position(|x| *x == tpl) {
                Some(i) => i,
                None => {
                    templates.push(tpl);
                    templates.len() - 1
                }
            };
            index.push(u16::try_from(i).map_err(|_| "too many prefill templates".to_string())?);
        }
    }
    Ok(PrefillTable {
        n_edges,
        t_edges,
        templates,
        index,
    })
}

/// One launch of a call: kernel, the grid it is launched with, and (prefill64 launches of a device plan) the grid
/// it stands for (`Prefill64PlanParams::vgrid`).
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(not(test), allow(dead_code))]
pub struct Sized {
    pub role: usize,
    pub variant: &'static str,
    pub grid: (u64, u64, u64),
    pub vgrid: (u64, u64, u64),
}

/// A template sized for a call: its launches in stream order (empty grids left out) and its workspace bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(not(test), allow(dead_code))]
pub struct Instance {
    pub launches: Vec<Sized>,
    pub workspace_bytes: u64,
}

/// `tpl` sized for `t` tokens in `n` sequences on `sms` SMs (what the generated C++ computes per call).
#[cfg_attr(not(test), allow(dead_code))]
pub fn instantiate(tpl: &Template, h: usize, hv: usize, t: u64, n: u64, sms: u64) -> Instance {
    let s = prefill_shape(h, hv, t, n);
    let l = tpl.seg_chunks.max(1);
    let mut launches = Vec::new();
    for (role, v) in tpl.roles.iter().enumerate() {
        let Some(v) = v else { continue };
        let g = match v.grid {
            GridOrder::SegmentSlots | GridOrder::LongSeqs => cp_grid(v, &s, l),
            _ => grid_of(v, &s),
        };
        if g.0 == 0 || g.1 == 0 || g.2 == 0 {
            continue;
        }
        let device_p64 = tpl.kind == Kind::Device && role >= 2;
        let grid = if device_p64 {
            let c = Launch {
                variant: v,
                grid: (g.0 as u32, g.1 as u32, g.2 as u32),
                block: v.block,
                dyn_smem: v.dyn_smem,
                why: "".into(),
            };
            (launched_ctas(&c, sms), 1, 1)
        } else {
            g
        };
        launches.push(Sized {
            role,
            variant: v.name,
            grid,
            vgrid: if device_p64 { g } else { (0, 0, 0) },
        });
    }
    let hv64 = hv as u64;
    let workspace_bytes = match tpl.kind {
        Kind::Fused => 0,
        Kind::Chunk64 => prefill64_workspace_bytes(t, n, hv64),
        Kind::ContextParallel => prefill64_cp_workspace_bytes(t, n, hv64, l),
        Kind::Device if tpl.roles[2].is_some() => {
            let cp = if tpl.roles[4].is_some() {
                prefill64_cp_workspace_bytes(t, n, hv64, l)
            } else {
                0
            };
            device_plan_workspace_bytes(prefill64_workspace_bytes(t, n, hv64), cp)
        }
        Kind::Device => 0,
    };
    Instance {
        launches,
        workspace_bytes,
    }
}

/// The library's own plan for a shape, in `Instance` form (the launches as `exec::prefill` launches them), to
/// compare templates with at their bins' edges.
#[cfg_attr(not(test), allow(dead_code))]
pub fn library_instance(plan: &PrefillPlan, sms: u64) -> Instance {
    let tpl = Template::of(plan);
    let mut launches = Vec::new();
    let mut k = 0;
    let all = plan.launches();
    for (role, v) in tpl.roles.iter().enumerate() {
        if v.is_none() {
            continue;
        }
        let c = all[k];
        k += 1;
        if c.is_empty() {
            continue;
        }
        let g = (c.grid.0 as u64, c.grid.1 as u64, c.grid.2 as u64);
        let device_p64 = tpl.kind == Kind::Device && role >= 2;
        launches.push(Sized {
            role,
            variant: c.variant.name,
            grid: if device_p64 {
                (launched_ctas(c, sms), 1, 1)
            } else {
                g
            },
            vgrid: if device_p64 { g } else { (0, 0, 0) },
        });
    }
    Instance {
        launches,
        workspace_bytes: plan.workspace_bytes(),
    }
}

/// Whether a launch of `v` is persistent in a device plan (`types::persistent`), and the CTAs one SM holds of it.
pub fn residency(v: &'static Variant) -> (bool, u64) {
    let c = Launch {
        variant: v,
        grid: (u32::MAX, 1, 1),
        block: v.block,
        dyn_smem: v.dyn_smem,
        why: "".into(),
    };
    (persistent(&c), launched_ctas(&c, 1))
}

/// Constants the generated C++ sizes launches with, as (name, value).
pub fn size_constants() -> Vec<(&'static str, u64)> {
    vec![
        ("kChunk64", prefill64::CHUNK),
        ("kWsChunkBytes", prefill64::WS_CHUNK_BYTES),
        ("kCpStateBytes", prefill64::CP_STATE_BYTES),
        ("kWorkspaceAlign", prefill64::WORKSPACE_ALIGN),
        ("kDpCounterBytes", DP_COUNTER_BYTES),
        ("kSplitMaxSeqs", registry::SPLIT_MAX_SEQS),
        ("kLeadRows", registry::prefill::CHUNK as u64),
        ("kTunedNumVHeads", gdn_cuda::plan::decode::TUNED_NUM_V_HEADS),
        ("kTunedSmCount", gdn_cuda::plan::decode::TUNED_SM_COUNT),
    ]
}
