//! The host's prefill planner: plans from the shape alone (+ the longest sequence's length when the caller hints
//! it), by the estimates of `cost`. `plan` is the automatic choice; the builders below it (`fused_launch`,
//! `chunk64_plan`, `cp_plan`) also serve the device plan and the overrides.
//!
//! * Fused tile: with the longest length, the tile with the smallest estimate; without it, the estimate's tile when
//!   equal and skewed lengths agree, else the fill rule (`fused_tile`). A tile then runs its longest-first build or
//!   its split build where a second wave of CTAs could wait on a long sequence (`fused_order`).
//! * chunk64: where its estimate is the smallest, and for an odd HV (the fused kernels need an even one).
//! * cp / cp2: the best estimate of either walk form over the segment counts `cost::cp_candidates` allows, when it
//!   beats the base plan; a cp plan that cannot run (workspace cap, grid, shared memory) yields to the other form,
//!   then to the base plan.

use crate::kernels::registry::{self, prefill64, Family, StateDtype, Variant, HEAD_DIM};
use crate::plan::grid::{check_call, configure, configure_cp, grid_of, named};
use crate::plan::prefill::cost::{self, Lengths};
use crate::plan::prefill::types::PrefillPlan;
use crate::plan::prefill::workspace::{
    prefill64_cp_workspace_bytes, prefill64_workspace_bytes, workspace_cap,
};
use crate::plan::{DeviceCaps, Launch, Rejection, Shape};
use std::sync::Arc;

/// Most sequences a longest-first fused kernel ranks (`prefill_fused/` `LF_MAX_N`: four per lane of one warp).
pub const LONGEST_FIRST_MAX_N: u64 = 128;

/// The automatic prefill plan (the call's checks passed): the cheapest estimate of `cost` among the fused tiles
/// (even HV) or the chunk64 plan (odd HV) and the best cp plan of each walk form; a cp plan that cannot run
/// (workspace cap, grid, shared memory) falls back to the other form, then to the base plan.
pub fn plan(s: &Shape, caps: &DeviceCaps) -> Result<PrefillPlan, Rejection> {
    let sms = (caps.sm_count as u64).max(1);
    let odd = !s.num_v_heads.is_multiple_of(2);
    // chunk64 and cp walk on wgmma: offered where their module is compiled (Hopper)
    let wgmma = caps.builds(&registry::PREFILL64);
    let chunk64_us = if wgmma {
        cost::cp_us(s, 1, &cost::WALK_FORMS[0], sms).us
    } else {
        f64::INFINITY
    };
    let fused_us = if odd {
        f64::INFINITY
    } else {
        fused_tile(s, caps).map_or(f64::INFINITY, |x| x.1)
    };
    let chunk64_first = chunk64_us < fused_us;
    let (base_us, base) = if chunk64_first {
        (chunk64_us, "chunk64")
    } else {
        (fused_us, "fused")
    };
    // the cheaper walk form first; one that cannot run here (shared memory, workspace, grid) yields to the other
    for e in cost::cp_candidates(s, sms)
        .into_iter()
        .filter(|e| wgmma && e.us < base_us)
    {
        let l = Lengths::of(s);
        let why = format!(
            "{}: estimate {:.0} us < {base} {base_us:.0} us ({} walk chains, longest sequence {} tokens{})",
            if e.warpgroups == 2 { "cp2" } else { "cp" },
            e.us,
            e.chains,
            l.longest,
            if s.max_seq_len > 0 { ", hinted" } else { ", lengths taken as equal" }
        );
        if let Ok(plan) = cp_plan(s, caps, (e.segments, e.seg_chunks, e.warpgroups), why) {
            return Ok(plan);
        }
    }
    if odd {
        let reason = format!("odd num_v_heads {}: only chunk64 runs it", s.num_v_heads);
        return chunk64_plan(s, caps, reason)
            .map_err(|_| Rejection::OddValueHeads { v: s.num_v_heads });
    }
    if chunk64_first {
        let why = format!("chunk64: estimate {chunk64_us:.0} us < fused {fused_us:.0} us");
        if let Ok(plan) = chunk64_plan(s, caps, why) {
            return Ok(plan);
        }
    }
    let mut variant = fused_launch(s, caps, None)?;
    variant.why = format!("fused: {}", variant.why).into();
    Ok(PrefillPlan::Fused { variant })
}

/// The fused kernel for the prefill shape `s`: the one `force` names (a `gdn_prefill_*` kernel of the call's state
/// dtype), else the automatic tile (`fused_tile`) in its build for the call (`fused_order`); rejected for an odd HV.
pub fn fused_launch(
    s: &Shape,
    caps: &DeviceCaps,
    force: Option<&str>,
) -> Result<Launch, Rejection> {
    check_call(s, caps)?;
    if !s.num_v_heads.is_multiple_of(2) {
        return Err(Rejection::OddValueHeads { v: s.num_v_heads });
    }
    let (variant, why) = match force {
        Some(name) => (
            named(name, Family::Prefill, s.state)?,
            format!("forced by override '{name}'"),
        ),
        None => {
            let sms = (caps.sm_count as u64).max(1);
            let (v, _, why) = fused_tile(s, caps).ok_or_else(|| no_fused_tile(s, caps))?;
            fused_order(v, s, sms, why)
        }
    };
    configure(variant, s, caps, why)
}

/// The fused tile for `s` and its estimate (`fused_tile_us`), with why. With the longest sequence's length
/// (`Shape::max_seq_len`): the tile with the smallest estimate (ties: the widest). Without it, the tile with the
/// smallest estimate when that is the same for equal lengths and for one sequence holding all but N−1 tokens (the
/// two extremes the host cannot tell apart; tiny calls); else the widest tile whose grid reaches
/// `cost::PREFILL_FILL_NUM / PREFILL_FILL_DEN` of the SMs (else the narrowest): a hedge against unseen skew.
fn fused_tile(s: &Shape, caps: &DeviceCaps) -> Option<(&'static Variant, f64, String)> {
    let sms = (caps.sm_count as u64).max(1);
    let tiles = fused_tiles(s.state, caps);
    let est = |s: &Shape, v: &Variant| fused_tile_us(s, v, sms);
    let best = |s: &Shape| {
        tiles
            .iter()
            .map(|v| (*v, est(s, v)))
            .min_by(|a, b| a.1.total_cmp(&b.1))
    };
    let (v, us) = best(s)?;
    if s.max_seq_len > 0 {
        let why = format!(
            "tile with the smallest estimate, {us:.0} us (longest sequence {} tokens, hinted)",
            Lengths::of(s).longest
        );
        return Some((v, us, why));
    }
    let skewed = Shape {
        max_seq_len: s
            .total_tokens
            .saturating_sub(s.num_seqs.saturating_sub(1))
            .max(1),
        ..s.clone()
    };
    if best(&skewed).is_some_and(|(w, _)| w.name == v.name) {
        let why = format!(
            "tile with the smallest estimate, {us:.0} us, for equal and for skewed lengths"
        );
        return Some((v, us, why));
    }
    let ctas = |v: &Variant| {
        let (x, y, z) = grid_of(v, s);
        x * y * z
    };
    let fits = |v: &&&Variant| ctas(v) * cost::PREFILL_FILL_DEN >= cost::PREFILL_FILL_NUM * sms;
    match tiles.iter().find(fits) {
        Some(v) => Some((
            v,
            est(s, v),
            format!(
                "widest tile with {} CTAs >= 0.9 x {sms} SMs (no length hint)",
                ctas(v)
            ),
        )),
        None => tiles.last().map(|v| {
            (
                *v,
                est(s, v),
                format!(
                    "narrowest tile: {} CTAs < 0.9 x {sms} SMs (no length hint)",
                    ctas(v)
                ),
            )
        }),
    }
}

/// Why no fused tile runs on `caps`: the smallest tile built for its target does not fit its shared memory.
fn no_fused_tile(s: &Shape, caps: &DeviceCaps) -> Rejection {
    registry::candidates(Family::Prefill, s.state)
        .filter(|v| caps.builds(v.module))
        .min_by_key(|v| v.dyn_smem)
        .map_or(
            Rejection::NoVariant {
                family: Family::Prefill,
                state: s.state,
            },
            |v| Rejection::SharedMemory {
                kernel: v.name,
                need: v.dyn_smem,
                max: caps.max_dyn_smem,
            },
        )
}

/// The fused tiles a device can launch for `state`, widest first, one per width: the default tile, or where the
/// device's blocks cannot take its shared memory, the compact tile of that width (`_np2`, 99 KB GPUs); a width with
/// neither is left out (bv128 and bv16 on sm_86 / sm_89 / sm_120, bv16 and bv128 on sm_80).
pub fn fused_tiles(state: StateDtype, caps: &DeviceCaps) -> Vec<&'static Variant> {
    let mut tiles: Vec<&'static Variant> = Vec::new();
    for v in registry::candidates(Family::Prefill, state)
        .filter(|v| v.hot && caps.builds(v.module) && v.dyn_smem <= caps.max_dyn_smem)
    {
        if !tiles.iter().any(|t| t.ctas_per_head == v.ctas_per_head) {
            tiles.push(v); // (the table lists each default tile before its compact one)
        }
    }
    tiles.sort_by_key(|v| v.ctas_per_head);
    tiles
}

/// Whether a fused launch of `ctas` CTAs for `s` should run the sequences longest first: 2..=128 sequences; a grid
/// wider than the GPU (only then can a late long sequence wait for a second wave); a longest sequence that can reach
/// `cost::LONGEST_FIRST_MIN_TOKENS`; and lengths not known to be equal (a hint of ceil(T/N): the order changes
/// nothing there and the ranking costs every CTA). Without a hint the lengths may be skewed, so only T bounds it.
pub fn fused_longest_first(s: &Shape, ctas: u64, sms: u64) -> bool {
    let l = Lengths::of(s);
    let hinted = s.max_seq_len > 0;
    let equal = hinted && l.longest <= l.tokens.div_ceil(l.seqs);
    let longest = if hinted { l.longest } else { l.tokens };
    (2..=LONGEST_FIRST_MAX_N).contains(&(s.num_seqs as u64))
        && ctas > sms
        && longest >= cost::LONGEST_FIRST_MIN_TOKENS
        && !equal
}

/// Whether plain fused tile `v` runs as its split build (`registry::split_of`) for `s`: where it would run longest
/// first and the longest sequence (the hint, or T without one) can be split (`cost::split_threshold`).
pub fn fused_split(v: &Variant, s: &Shape, sms: u64) -> bool {
    let (x, y, z) = grid_of(v, s);
    let l = Lengths::of(s);
    let longest = if s.max_seq_len > 0 {
        l.longest
    } else {
        l.tokens
    };
    !v.longest_first
        && !registry::is_split(v)
        && registry::split_of(v).is_some()
        && fused_longest_first(s, x * y * z, sms)
        && longest > cost::split_threshold(s, sms)
}

/// The estimate of fused tile `v` (plain, or any build of it) for `s`: `cost::fused_split_us` where it runs split
/// (a split build, or a plain tile that `fused_order` will swap for one), else `cost::fused_us`.
pub fn fused_tile_us(s: &Shape, v: &Variant, sms: u64) -> f64 {
    if registry::is_split(v) || fused_split(v, s, sms) {
        cost::fused_split_us(s, sms)
    } else {
        cost::fused_us(s, HEAD_DIM / v.ctas_per_head, sms)
    }
}

/// Fused tile `v` for `s`: its split build where `fused_split` says so, else its longest-first build where
/// `fused_longest_first` says so, else itself (with why appended).
pub(crate) fn fused_order(
    v: &'static Variant,
    s: &Shape,
    sms: u64,
    why: String,
) -> (&'static Variant, String) {
    let (x, y, z) = grid_of(v, s);
    if let Some(sp) = registry::split_of(v).filter(|_| fused_split(v, s, sms)) {
        return (
            sp,
            format!(
                "{why}; longest first, sequences over {} tokens on two CTAs",
                cost::split_threshold(s, sms)
            ),
        );
    }
    match registry::longest_first_of(v) {
        Some(lf) if fused_longest_first(s, x * y * z, sms) => (
            lf,
            format!(
                "{why}; sequences longest first ({} CTAs > {sms} SMs)",
                x * y * z
            ),
        ),
        _ => (v, why),
    }
}

/// The hot kernel of `family` with `warpgroups` warpgroups per CTA for a chunk64 / cp launch of `s`: of the
/// call's state dtype, except for the launches that touch no state storage (the prep, the cp scan;
/// registered as F32 by convention).
fn plan_kernel(family: Family, s: &Shape, warpgroups: u64) -> Result<&'static Variant, Rejection> {
    let stateless = family == Family::Prefill64Prep; // (the cp scan is chosen by `cp_scan_kernel`)
    registry::VARIANTS
        .iter()
        .find(|v| {
            v.family == family
                && v.hot
                && (stateless || v.state == s.state)
                && registry::walk_warpgroups(v) as u64 == warpgroups
        })
        .ok_or(Rejection::NoVariant {
            family,
            state: s.state,
        })
}

/// The chunk64 plan for `s`, or why it cannot run (workspace cap, grid, shared memory, no variant).
pub(crate) fn chunk64_plan(
    s: &Shape,
    caps: &DeviceCaps,
    why: impl Into<Arc<str>>,
) -> Result<PrefillPlan, Rejection> {
    let why: Arc<str> = why.into();
    let (prep_v, walk_v) = (
        plan_kernel(Family::Prefill64Prep, s, 1)?,
        plan_kernel(Family::Prefill64Walk, s, 1)?,
    );
    let (t, n, hv) = (
        s.total_tokens as u64,
        s.num_seqs as u64,
        s.num_v_heads as u64,
    );
    let need = prefill64_workspace_bytes(t, n, hv);
    let max = workspace_cap(caps);
    if need > max {
        return Err(Rejection::Workspace { need, max });
    }
    let prep = configure(prep_v, s, caps, why.clone())?;
    let walk = configure(walk_v, s, caps, why)?;
    let workspace_bytes = if walk.is_empty() { 0 } else { need };
    Ok(PrefillPlan::Chunk64 {
        prep,
        walk,
        workspace_bytes,
    })
}

/// The context-parallel plan for `s` with segments of `seg_chunks` chunks (`segments`: how many the
/// longest sequence gets, for the report) and `warpgroups` warpgroups per walk CTA.
pub(crate) fn cp_plan(
    s: &Shape,
    caps: &DeviceCaps,
    (segments, seg_chunks, warpgroups): (u64, u64, u64),
    why: impl std::fmt::Display,
) -> Result<PrefillPlan, Rejection> {
    let of = |family| {
        plan_kernel(
            family,
            s,
            if family == Family::Prefill64Prep {
                1
            } else {
                warpgroups
            },
        )
    };
    let (t, n, hv) = (
        s.total_tokens as u64,
        s.num_seqs as u64,
        s.num_v_heads as u64,
    );
    let need = prefill64_cp_workspace_bytes(t, n, hv, seg_chunks);
    let max = workspace_cap(caps);
    if need > max {
        return Err(Rejection::Workspace { need, max });
    }
    if seg_chunks > prefill64::MAX_SEG_CHUNKS {
        return Err(Rejection::Grid {
            dim: "segment length",
            got: seg_chunks,
            max: prefill64::MAX_SEG_CHUNKS,
        });
    }
    let why: Arc<str> = format!(
        "{why}; {segments} segments of {seg_chunks} chunks, {warpgroups} warpgroup(s) per walk CTA"
    )
    .into();
    let prep = configure(of(Family::Prefill64Prep)?, s, caps, why.clone())?;
    let pass1 = configure_cp(
        of(Family::Prefill64CpPass1)?,
        s,
        caps,
        why.clone(),
        seg_chunks,
    )?;
    let scan = configure_cp(
        cp_scan_kernel(s, caps.sm_count as u64, seg_chunks)?,
        s,
        caps,
        why.clone(),
        seg_chunks,
    )?;
    let pass3 = configure_cp(of(Family::Prefill64CpPass3)?, s, caps, why, seg_chunks)?;
    let workspace_bytes = if pass3.is_empty() || n == 0 { 0 } else { need };
    Ok(PrefillPlan::ContextParallel {
        prep,
        pass1,
        scan,
        pass3,
        segments,
        seg_chunks,
        warpgroups,
        cuts: true,
        workspace_bytes,
    })
}

/// The cp scan kernel with segments of `seg_chunks` chunks (`cost::scan_ctas_per_head`): `gdn_prefill64_cp_scan8`
/// (8 value rows per CTA, 16 CTAs per (sequence, head)) when the CTAs that do work fit one wave, else
/// `gdn_prefill64_cp_scan` (16 rows, 8 CTAs).
pub fn cp_scan_kernel(s: &Shape, sms: u64, seg_chunks: u64) -> Result<&'static Variant, Rejection> {
    let name = if cost::scan_ctas_per_head(s, sms, seg_chunks) == prefill64::CP_SCAN8_CTAS {
        "gdn_prefill64_cp_scan8"
    } else {
        "gdn_prefill64_cp_scan"
    };
    registry::find(name).ok_or(Rejection::NoVariant {
        family: Family::Prefill64CpScan,
        state: StateDtype::F32,
    })
}

/// Segments per sequence of a *forced* cp plan with `warpgroups` warpgroups per walk CTA: the largest
/// G ≤ `cost::MAX_SEGMENTS` whose pass 3 (`chains·(G−1)` CTAs, chains = N·HV·2/warpgroups) fits one wave and
/// pass 1 (`chains·(2G−3)`) two, one CTA per SM, at least 3 (so that every pass has work) however short the
/// sequences: `gdn check` uses it to run many segments.
pub fn cp_forced_segments(s: &Shape, sms: u64, warpgroups: u64) -> u64 {
    let chains = (s.num_seqs as u64 * s.num_v_heads as u64 * 2 / warpgroups.clamp(1, 2)).max(1);
    let mut g = 3;
    while g < cost::MAX_SEGMENTS && chains * g <= sms && chains * (2 * (g + 1) - 3) <= 2 * sms {
        g += 1;
    }
    g
}

/// Chunks per segment for G segments of the average sequence (≥ 1).
pub fn cp_seg_chunks(s: &Shape, segments: u64) -> u64 {
    avg_seq_chunks(s).div_ceil(segments.max(1)).max(1)
}

/// Average 64-token chunks per sequence (≥ 1), from T and N only.
fn avg_seq_chunks(s: &Shape) -> u64 {
    (s.total_tokens as u64 / (s.num_seqs as u64).max(1))
        .div_ceil(prefill64::CHUNK)
        .max(1)
}
