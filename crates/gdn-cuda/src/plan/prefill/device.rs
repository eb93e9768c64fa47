//! The device plan: for a prefill call whose lengths the host does not know (no `Shape::max_seq_len` hint), the
//! plan is chosen on the device. Pure and GPU-free, like the rest of the planner. The host's planner, which it asks
//! for the plan at a given longest length and compares with, comes in as a function argument (`HostPlanner`); its
//! launches come from `host`'s builders, its estimates from `cost`.
//!
//! Why: the host sees T and N only, and the best plan for N equal sequences and for one long sequence among short
//! ones differ by up to 2.7× (contest-like mix, H200: prefill_15 fused bv128 372 µs, cp2 134 µs; the equal-length
//! picks take 3038 µs over its 25 workloads of ≥ 2048 tokens, the hinted ones 2103). Assuming either shape costs the
//! other (assuming skew: 4×2048 +13%, 64×1024 +27%).
//!
//! How: the cost model is asked which plan it would pick if the longest sequence had X tokens, for X from the
//! equal-length ceil(T/N) up to T (geometric samples, then bisection at each change of plan kind). Its answers are
//! fused below `run_from`, chunk64 below `cp_from`, cp (or cp2) above; the device plan launches the candidates one
//! after another — the fused kernel (`PrefillPlanParams::run_below = run_from`; two fused tiles where the model's
//! tile changes below `run_from`, the second from `tile_from`), then the prefill64 prep, the chunk64 walk and the cp
//! passes (`Prefill64PlanParams::plan_*`), each from its file's device-plan build (`registry::device_plan_module`:
//! the default builds run without the guard) — and every CTA reads X from `cu_seqlens` (one warp, the kernels'
//! `call_longest_seq`, int32 or int64 offsets, N ≤ `DEVICE_PLAN_MAX_N`) and exits unless the call is its launch's.
//! The cp launches are sized for the shortest cp segment length the device can choose (`cp_l_lo`, the model's L at
//! X = cp_from); the device interpolates L linearly in X up to the model's L at X = T (`cp_l_hi`), so the grids and
//! workspace always suffice. No host read, no sync: CUDA-graph capture stays possible.
//!
//! When: only where it pays in expectation. A launch that is not the call's still dispatches its CTAs, each waiting
//! for one load before it exits (`exit_us`; the launches after the prep are persistent, one wave of CTAs that loop
//! over their items), so the device plan (with or without its cp launches) is compared with the host's equal-length
//! plan under a prior over the longest length: half on equal lengths, half spread over ceil(T/N)..T (`prior`). The
//! launches after the call's first use programmatic dependent launch: an exiting launch's CTAs are dispatched while
//! the running one works and only its block 0 waits. Tests force one route (`DeviceRoute`) to run every launch's exit
//! path and every mode.

use crate::kernels::registry::{self, Family, StateDtype, HEAD_DIM};
use crate::plan::prefill::cost::{self, Lengths};
use crate::plan::prefill::host;
use crate::plan::prefill::types::{
    launched_ctas, resident_per_sm, DevicePlan, DeviceRoute, DeviceRun, PrefillPlan, Thresholds,
};
use crate::plan::prefill::workspace::device_plan_workspace_bytes;
use crate::plan::{DeviceCaps, Launch, PlanKind, Rejection, Shape};
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

pub use crate::kernels::registry::DEVICE_PLAN_MAX_N;
/// Geometric samples of the longest length between ceil(T/N) and T.
pub const DEVICE_PLAN_SAMPLES: u32 = 16;

/// The host's automatic planner for a prefill call whose checks passed (`host::plan`, from `prefill::choose`): the
/// plan the device plan asks for at each longest length (as a hint), and compares itself with.
pub type HostPlanner<'a> = &'a dyn Fn(&Shape, &DeviceCaps) -> Result<PrefillPlan, Rejection>;

/// The plan the host picks when the longest sequence has `x` (≥ 1) tokens.
fn pick_at(
    s: &Shape,
    caps: &DeviceCaps,
    host_plan: HostPlanner,
    x: u64,
) -> Result<PrefillPlan, Rejection> {
    let hinted = Shape {
        max_seq_len: x as usize,
        ..s.clone()
    };
    host_plan(&hinted, caps)
}

/// The fused tile (CTAs per value head) of a fused plan.
fn tile_of(p: &PrefillPlan) -> Option<u32> {
    match p {
        PrefillPlan::Fused { variant } => Some(variant.variant.ctas_per_head),
        _ => None,
    }
}

fn is_cp(k: PlanKind) -> bool {
    matches!(k, PlanKind::ContextParallel | PlanKind::ContextParallelWide)
}

/// An x in (lo, hi] with `pred(x)` and within one 64-token chunk or 1/16 of the smallest, given !pred(lo) and
/// pred(hi) (bisection; pred taken as monotonic).
fn first_true(mut lo: u64, mut hi: u64, pred: impl Fn(u64) -> bool) -> u64 {
    while hi - lo > registry::prefill64::CHUNK.max(lo / 16) {
        let mid = lo + (hi - lo) / 2;
        if pred(mid) {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    hi
}

/// The longest lengths the model is asked about: `DEVICE_PLAN_SAMPLES` geometric steps from ceil(T/N) to T.
fn samples(t: u64, n: u64) -> Vec<u64> {
    let even = t.div_ceil(n.max(1)).max(1);
    let t = t.max(even); // (an empty call: one sample)
    let ratio = t as f64 / even as f64;
    let mut xs: Vec<u64> = (0..DEVICE_PLAN_SAMPLES)
        .map(|k| {
            let f = k as f64 / (DEVICE_PLAN_SAMPLES - 1) as f64;
            ((even as f64 * ratio.powf(f)).round() as u64).clamp(even, t)
        })
        .collect();
    xs.dedup();
    xs
}

/// The model's thresholds for `s` (lengths unknown), from the plans `host_plan` picks with each longest length
/// hinted, or None when that plan (kind, and fused tile) is the same for every longest length (nothing to decide
/// on the device).
pub fn model_thresholds(
    s: &Shape,
    caps: &DeviceCaps,
    host_plan: HostPlanner,
) -> Option<Thresholds> {
    let (t, n) = (s.total_tokens as u64, s.num_seqs as u64);
    if t == 0 || n == 0 {
        return None;
    }
    let xs = samples(t, n);
    let picks: Vec<PrefillPlan> = xs
        .iter()
        .map(|&x| pick_at(s, caps, host_plan, x))
        .collect::<Result<_, _>>()
        .ok()?;
    let kinds: Vec<PlanKind> = picks.iter().map(|p| p.kind()).collect();
    let tiles: Vec<Option<u32>> = picks.iter().map(tile_of).collect();
    if kinds.iter().all(|k| *k == kinds[0]) && tiles.iter().all(|v| *v == tiles[0]) {
        return None;
    }
    let kind_at = |x: u64| pick_at(s, caps, host_plan, x).map_or(PlanKind::Fused, |p| p.kind());
    // the second fused tile: from the first length whose fused pick has another tile than the equal lengths' one
    let tile_from = match tiles[0] {
        None => u64::MAX,
        Some(t0) => {
            let other = |v: Option<u32>| v.is_some_and(|v| v != t0);
            match tiles.iter().position(|v| other(*v)) {
                None => u64::MAX,
                Some(i) => first_true(xs[i - 1], xs[i], |x| {
                    other(
                        pick_at(s, caps, host_plan, x)
                            .ok()
                            .as_ref()
                            .and_then(tile_of),
                    )
                }),
            }
        }
    };
    // the first sample of each change; bisection between it and the sample before
    let boundary = |want: &dyn Fn(PlanKind) -> bool| -> u64 {
        match kinds.iter().position(|k| want(*k)) {
            None => u64::MAX,
            Some(0) => 0,
            Some(i) => first_true(xs[i - 1], xs[i], |x| want(kind_at(x))),
        }
    };
    let run_from = boundary(&|k| k != PlanKind::Fused);
    let tile_from = if tile_from < run_from {
        tile_from
    } else {
        u64::MAX
    };
    let cp_from = boundary(&|k| is_cp(k)).max(run_from);
    let (mut cp_l_lo, mut cp_l_hi, mut warpgroups) = (1, 1, 1);
    if cp_from != u64::MAX {
        // the walk form the model picks at the geometric middle of the cp range, and its L at both ends
        let mid = ((cp_from.max(1) as f64 * t as f64).sqrt() as u64).clamp(cp_from, t);
        if let Ok(PrefillPlan::ContextParallel { warpgroups: wg, .. }) =
            pick_at(s, caps, host_plan, mid)
        {
            warpgroups = wg;
        }
        let sms = (caps.sm_count as u64).max(1);
        let l_at = |x: u64| {
            let hinted = Shape {
                max_seq_len: x as usize,
                ..s.clone()
            };
            cost::cp_candidates(&hinted, sms)
                .into_iter()
                .find(|e| e.warpgroups == warpgroups)
                .map(|e| e.seg_chunks)
        };
        let (lo, hi) = (l_at(cp_from), l_at(t));
        cp_l_lo = lo.or(hi).unwrap_or(cost::MIN_SEG_CHUNKS).max(1);
        cp_l_hi = hi.unwrap_or(cp_l_lo).max(cp_l_lo);
    }
    Some(Thresholds {
        run_from,
        tile_from,
        cp_from,
        cp_l_lo,
        cp_l_hi,
        warpgroups,
    })
}

/// The prior over the longest length that decides whether a device plan pays, and with which launches: half the
/// weight on equal lengths (ceil(T/N): benchmarks, batched equal prompts), half spread evenly over the geometric
/// samples up to T (skew of any degree, as in the contest-like mix). (Shape with the length as a hint, weight.)
fn prior(s: &Shape) -> Vec<(Shape, f64)> {
    let (t, n) = (s.total_tokens as u64, s.num_seqs as u64);
    let xs = samples(t, n);
    let w = 0.5 / xs.len() as f64;
    let at = |x: u64| Shape {
        max_seq_len: x as usize,
        ..s.clone()
    };
    std::iter::once((at(t.div_ceil(n.max(1)).max(1)), 0.5))
        .chain(xs.into_iter().map(|x| (at(x), w)))
        .collect()
}

/// The µs launch `c` costs when every CTA exits at once (`cost::exit_us`): its waves are the CTAs it launches
/// (`launched_ctas`) over `sms` times the CTAs an SM holds.
pub fn exit_us(c: &Launch, sms: u64) -> f64 {
    cost::exit_us(launched_ctas(c, sms).div_ceil(sms.max(1) * resident_per_sm(c)))
}

/// The estimate of `plan` when the longest sequence has the length `s` hints: the host plans' own (`estimate`); a
/// device plan's is the route's estimate plus every other launch's exit.
fn cost_at(s: &Shape, plan: &PrefillPlan, sms: u64) -> f64 {
    let Some(d) = plan.device() else {
        return estimate(s, plan, sms);
    };
    let x = Lengths::of(s).longest;
    let (runs, exiting) = d.route_at(x, s.total_tokens as u64);
    let exits = exiting.iter().map(|c| exit_us(c, sms)).sum::<f64>();
    let us = match runs {
        DeviceRun::Fused(f) => {
            let bv = f.map_or(16, |f| HEAD_DIM / f.variant.ctas_per_head);
            cost::fused_us(s, bv, sms)
        }
        DeviceRun::Chunk64 => cost::cp_us(s, 1, &cost::WALK_FORMS[0], sms).us,
        DeviceRun::Cp { seg_chunks: l } => {
            let g = x.div_ceil(registry::prefill64::CHUNK).div_ceil(l).max(1);
            cost::walk_form(d.thresholds.warpgroups)
                .map_or(f64::INFINITY, |f| cost::cp_us(s, g, f, sms).us)
        }
    };
    us + exits
}

/// The expected µs of `plan` for `s` under the prior.
pub fn expected_us(s: &Shape, plan: &PrefillPlan, sms: u64) -> f64 {
    prior(s)
        .iter()
        .map(|(sx, w)| w * cost_at(sx, plan, sms))
        .sum()
}

/// The cost model's estimate of `plan`'s launches for the lengths `s` describes.
pub fn estimate(s: &Shape, plan: &PrefillPlan, sms: u64) -> f64 {
    match plan {
        PrefillPlan::Fused { variant } => {
            cost::fused_us(s, HEAD_DIM / variant.variant.ctas_per_head, sms)
        }
        PrefillPlan::Chunk64 { .. } => cost::cp_us(s, 1, &cost::WALK_FORMS[0], sms).us,
        PrefillPlan::ContextParallel {
            segments,
            warpgroups,
            ..
        } => cost::walk_form(*warpgroups)
            .map_or(f64::INFINITY, |f| cost::cp_us(s, *segments, f, sms).us),
        PrefillPlan::Device(_) => f64::INFINITY,
    }
}

/// Calls without a hint whose device-plan decision is remembered (a pure function of the shape and device: 30–100 µs
/// of cost-model queries on the host; the table is cleared when full), with T rounded down to 5 significant bits
/// (`token_bucket`: steps of 1/32 to 1/16, within the thresholds' own precision), so that a serving engine whose T
/// changes every call still mostly hits it.
const MEMO_ENTRIES: usize = 4096;

fn token_bucket(t: usize) -> usize {
    if t < 32 {
        return t;
    }
    let shift = usize::BITS - t.leading_zeros() - 5;
    (t >> shift) << shift
}
type MemoKey = (usize, usize, usize, usize, StateDtype, DeviceCaps);
static MEMO: OnceLock<Mutex<HashMap<MemoKey, Option<Thresholds>>>> = OnceLock::new();

/// The automatic device plan for a call without a length hint (its checks passed), when it can pay against the plan
/// `host_plan` gives for equal lengths (see the module comment; the thresholds are those of T's bucket,
/// `token_bucket`; the launches are sized for the call's own T).
pub fn automatic(s: &Shape, caps: &DeviceCaps, host_plan: HostPlanner) -> Option<PrefillPlan> {
    let n = s.num_seqs as u64;
    if s.max_seq_len != 0
        || !(2..=DEVICE_PLAN_MAX_N).contains(&n)
        || s.total_tokens == 0
        || !caps.builds(&registry::PREFILL64_DP)
    {
        return None;
    }
    let key = (
        token_bucket(s.total_tokens),
        s.num_seqs,
        s.num_q_heads,
        s.num_v_heads,
        s.state,
        *caps,
    );
    let memo = MEMO.get_or_init(|| Mutex::new(HashMap::new()));
    let known = memo
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(&key)
        .copied();
    let th = match known {
        Some(th) => th,
        None => {
            let rep = Shape {
                total_tokens: key.0,
                ..s.clone()
            };
            let th = host_plan(&rep, caps)
                .ok()
                .and_then(|blind| choose_thresholds(&rep, caps, host_plan, &blind));
            let mut m = memo.lock().unwrap_or_else(|e| e.into_inner());
            if m.len() >= MEMO_ENTRIES {
                m.clear();
            }
            m.insert(key, th);
            th
        }
    };
    build(s, caps, th?, DeviceRoute::Model).ok()
}

/// The model's thresholds, with or without the cp launches and the second fused tile, when one of those device plans
/// has a smaller expected cost than `blind` under the prior; None: keep the host's plan.
fn choose_thresholds(
    s: &Shape,
    caps: &DeviceCaps,
    host_plan: HostPlanner,
    blind: &PrefillPlan,
) -> Option<Thresholds> {
    let sms = (caps.sm_count as u64).max(1);
    let th = model_thresholds(s, caps, host_plan)?;
    let no_cp = Thresholds {
        cp_from: u64::MAX,
        ..th
    };
    let one_tile = |t: Thresholds| {
        let t = Thresholds {
            tile_from: u64::MAX,
            ..t
        };
        one_tile_run_from(s, caps, t)
    };
    let mut best: (Option<Thresholds>, f64) = (None, expected_us(s, blind, sms));
    // One fused tile only: a second tile does not pay where it was measured (H200) — on the contest-like mix's skewed
    // 8192-token calls its exit waves (bv64: 2·N·HV CTAs, one per SM) cost about what the narrower tile gains, and on
    // two short calls the model picks it and they measure +2–3 µs. The launches, the route and their checks stay
    // (`DeviceRoute::FusedSkew`), for when exits are cheaper.
    for t in [one_tile(th), one_tile(no_cp)] {
        if let Ok(plan) = build(s, caps, t, DeviceRoute::Model) {
            // one fused launch and nothing else: the host's fused plan without the length read (such plans, on another
            // tile, measure +2–3 µs on prefill_36 / prefill_75)
            if plan.launches().len() < 2 {
                continue;
            }
            let us = expected_us(s, &plan, sms);
            if us < best.1 {
                best = (Some(t), us);
            }
        }
    }
    best.0
}

/// `t` (one fused tile) with `run_from` where that tile stops being the model's pick. `model_thresholds` takes run_from
/// from the hinted picks, which have the best tile at every length; the device plan launches one tile (`fused_for`:
/// chosen for the calls below run_from, mostly equal lengths), and past the length where its estimate exceeds the
/// chunk64 and cp plans' the call belongs to them. On the mix's 40-sequence calls (H200) the hinted picks stay fused
/// up to ~1800 tokens; a run_from taken from them would run blind prefill_70 / 91 / 97 on bv128 (116–133 µs) rather
/// than chunk64 (81–88).
fn one_tile_run_from(s: &Shape, caps: &DeviceCaps, t: Thresholds) -> Thresholds {
    let sms = (caps.sm_count as u64).max(1);
    let Ok(Some(tile)) = fused_for(s, caps, 0, t.run_from) else {
        return t;
    };
    let bv = HEAD_DIM / tile.variant.ctas_per_head;
    let fused_loses = |x: u64| {
        let sx = Shape {
            max_seq_len: x as usize,
            ..s.clone()
        };
        let us = if registry::is_split(tile.variant) {
            cost::fused_split_us(&sx, sms)
        } else {
            cost::fused_us(&sx, bv, sms)
        };
        us > cost::prefill64_best_us(&sx, sms)
    };
    let xs: Vec<u64> = samples(s.total_tokens as u64, s.num_seqs as u64)
        .into_iter()
        .filter(|&x| x < t.run_from)
        .collect();
    let run_from = match xs.iter().position(|&x| fused_loses(x)) {
        None => t.run_from,
        Some(0) => xs[0],
        Some(i) => first_true(xs[i - 1], xs[i], fused_loses),
    };
    Thresholds { run_from, ..t }
}

/// A device plan with a forced route (`gdn check`, overrides) or the model's thresholds (`DeviceRoute::Model`;
/// when the model sees nothing to decide, its blind plan's kind for every length).
pub fn forced(
    s: &Shape,
    caps: &DeviceCaps,
    route: DeviceRoute,
    host_plan: HostPlanner,
) -> Result<PrefillPlan, Rejection> {
    let n = s.num_seqs as u64;
    if !caps.builds(&registry::PREFILL64_DP) {
        return Err(Rejection::NotBuilt {
            kernel: "the device plan's gdn_prefill64_* launches",
            arch: caps.arch,
            builds_for: registry::PREFILL64_DP.arches.to_string(),
        });
    }
    if n > DEVICE_PLAN_MAX_N {
        return Err(Rejection::Override {
            name: route.override_name().into(),
            problem: format!(
                "the device plan reads at most {DEVICE_PLAN_MAX_N} sequence lengths; this call has {n}"
            ),
        });
    }
    let sms = caps.sm_count as u64;
    // forced cp: the forced plans' segments of the average sequence at X = 0, twice that L at X = T
    let cp_route = |wg: u64| {
        let l = host::cp_seg_chunks(s, host::cp_forced_segments(s, sms, wg));
        Thresholds {
            run_from: 0,
            tile_from: u64::MAX,
            cp_from: 0,
            cp_l_lo: l,
            cp_l_hi: 2 * l,
            warpgroups: wg,
        }
    };
    let th = match route {
        DeviceRoute::Model => model_thresholds(s, caps, host_plan).unwrap_or(Thresholds {
            run_from: u64::MAX,
            tile_from: u64::MAX,
            cp_from: u64::MAX,
            cp_l_lo: 1,
            cp_l_hi: 1,
            warpgroups: 1,
        }),
        DeviceRoute::Fused => Thresholds {
            run_from: u64::MAX,
            ..cp_route(1)
        },
        DeviceRoute::FusedSkew => Thresholds {
            run_from: u64::MAX,
            tile_from: 0,
            ..cp_route(1)
        },
        DeviceRoute::Chunk64 => Thresholds {
            cp_from: u64::MAX,
            ..cp_route(1)
        },
        DeviceRoute::Cp => cp_route(2),
    };
    build(s, caps, th, route)
}

/// The launches of a device plan with thresholds `th`: the fused kernel unless it never runs (or HV is odd: then
/// the prefill64 launches take every call), the second fused tile where `tile_from` < `run_from`, the prep and the
/// chunk64 walk unless cp takes every call, the cp passes unless they never run. A forced route keeps every launch
/// (their exits are what it tests).
fn build(
    s: &Shape,
    caps: &DeviceCaps,
    mut th: Thresholds,
    route: DeviceRoute,
) -> Result<PrefillPlan, Rejection> {
    let forced = route != DeviceRoute::Model;
    let odd = !s.num_v_heads.is_multiple_of(2);
    if odd {
        th.run_from = 0;
    }
    let fused = if (th.run_from > 0 || forced) && !odd {
        let mut c = host::fused_launch(s, caps, None)?;
        if !forced {
            c = fused_for(s, caps, 0, th.tile_from.min(th.run_from))?.unwrap_or(c);
        }
        Some(c)
    } else {
        None
    };
    let fused_skew = match &fused {
        Some(wide) if forced => Some(other_tile(s, caps, wide)?),
        Some(wide) if th.tile_from < th.run_from => fused_for(s, caps, th.tile_from, th.run_from)?
            .filter(|c| c.variant.name != wide.variant.name),
        _ => None,
    };
    if fused_skew.is_none() {
        th.tile_from = u64::MAX;
    }
    let why = match route {
        DeviceRoute::Model => format!(
            "device plan: the longest sequence decides (fused below {} (a second tile from {}), cp from {} tokens; \
             lengths not hinted)",
            show(th.run_from),
            show(th.tile_from),
            show(th.cp_from)
        ),
        r => format!("device plan forced to its {} route", r.override_name()),
    };
    let PrefillPlan::Chunk64 {
        prep,
        walk,
        workspace_bytes: c64_bytes,
    } = host::chunk64_plan(s, caps, why.clone())?
    else {
        unreachable!("chunk64_plan builds chunk64 plans")
    };
    let walk = (th.cp_from > th.run_from || forced).then_some(walk);
    let (cp, cp_bytes) = if th.cp_from != u64::MAX || forced {
        let nch = (s.total_tokens as u64).div_ceil(registry::prefill64::CHUNK);
        let segments = nch.div_ceil(th.cp_l_lo).max(1);
        let plan = host::cp_plan(s, caps, (segments, th.cp_l_lo, th.warpgroups), why.clone())?;
        let PrefillPlan::ContextParallel {
            pass1,
            scan,
            pass3,
            workspace_bytes,
            ..
        } = plan
        else {
            unreachable!("cp_plan builds cp plans")
        };
        (Some([pass1, scan, pass3]), workspace_bytes)
    } else {
        (None, 0)
    };
    if walk.is_none() && cp.is_none() {
        th.run_from = u64::MAX;
    }
    let prep = (th.run_from != u64::MAX || forced).then_some(prep);
    // the persistent launches' counters after the workspace (`workspace::DP_COUNTER_BYTES`)
    let workspace_bytes = match prep {
        Some(_) => device_plan_workspace_bytes(c64_bytes, cp_bytes),
        None => 0,
    };
    Ok(PrefillPlan::Device(DevicePlan {
        fused,
        fused_skew,
        prep,
        walk,
        cp,
        thresholds: th,
        route,
        workspace_bytes,
    }))
}

/// The fused tile for the calls a fused launch keeps (longest sequence of `from` up to `below` tokens): the smallest
/// expected estimate under the prior restricted to those lengths (None: the prior puts no weight there).
fn fused_for(
    s: &Shape,
    caps: &DeviceCaps,
    from: u64,
    below: u64,
) -> Result<Option<Launch>, Rejection> {
    let sms = (caps.sm_count as u64).max(1);
    let kept: Vec<(Shape, f64)> = prior(s)
        .into_iter()
        .filter(|(sx, _)| (from..below).contains(&Lengths::of(sx).longest))
        .collect();
    if kept.is_empty() {
        return Ok(None);
    }
    let expected = |v: &registry::Variant| {
        kept.iter()
            .map(|(sx, w)| w * host::fused_tile_us(sx, v, sms))
            .sum::<f64>()
    };
    let best = host::fused_tiles(s.state, caps)
        .into_iter()
        .min_by(|a, b| expected(a).total_cmp(&expected(b)));
    let Some(v) = best else { return Ok(None) };
    let why = format!(
        "device plan's fused launch: the best expected tile from {from} to {} tokens",
        show(below)
    );
    let (v, why) = host::fused_order(v, s, sms, why);
    let mut c = host::fused_launch(s, caps, Some(v.name))?;
    c.why = why.into();
    Ok(Some(c))
}

/// A forced route's second fused tile: bv64 beside bv128, else bv128 (so both tiles' exits and runs are tested).
fn other_tile(s: &Shape, caps: &DeviceCaps, wide: &Launch) -> Result<Launch, Rejection> {
    let want = if wide.variant.ctas_per_head == 1 {
        2
    } else {
        1
    };
    let v = registry::candidates(Family::Prefill, s.state)
        .find(|v| v.ctas_per_head == want)
        .expect("the registry has bv64 and bv128 prefill tiles");
    host::fused_launch(s, caps, Some(v.name))
}

fn show(x: u64) -> String {
    if x == u64::MAX {
        "never".into()
    } else {
        x.to_string()
    }
}
