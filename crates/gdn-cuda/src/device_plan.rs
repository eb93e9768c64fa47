//! The device plan: for a prefill call whose lengths the host does not know (no `Shape::max_seq_len` hint), the
//! plan is chosen on the device. Pure and GPU-free, like the rest of the policy.
//!
//! Why: the host sees T and N only, and the best plan for N equal sequences and for one long sequence among short
//! ones differ by up to 2.7× (contest-like mix, H200, session 22: prefill_15 fused bv128 372 µs, cp2 134 µs; blind
//! picks 3038 µs against 2103 hinted over its 25 workloads of ≥ 2048 tokens). Assuming either shape costs the
//! other (assuming skew: 4×2048 +13%, 64×1024 +27%).
//!
//! How: the cost model is asked which plan it would pick if the longest sequence had X tokens, for X from the
//! equal-length ceil(T/N) up to T (geometric samples, then bisection at each change of plan kind). Its answers are
//! fused below `run_from`, chunk64 below `cp_from`, cp (or cp2) above; the device plan launches the candidates one
//! after another — the fused kernel (`PrefillPlanParams::run_below = run_from`; session 24: two fused tiles where the
//! model's tile changes below `run_from`, the second from `tile_from`), then the prefill64 prep, the chunk64
//! walk and the cp passes (`Prefill64PlanParams::plan_*`), each from its file's device-plan build
//! (`registry::device_plan_module`: the default builds keep ≤ 128-byte params and their code) — and every CTA reads X
//! from `cu_seqlens`
//! (`kernels/device_plan.cuh`, one warp, N ≤ `DEVICE_PLAN_MAX_N`) and exits unless the call is its launch's. The cp
//! launches are sized for the shortest cp segment length the device can choose (`cp_l_lo`, the model's L at X =
//! cp_from); the device interpolates L linearly in X up to the model's L at X = T (`cp_l_hi`), so the grids and
//! workspace always suffice. No host read, no sync: CUDA-graph capture stays possible.
//!
//! When: only where it pays in expectation. A launch that is not the call's still dispatches its CTAs, each waiting
//! for one load before it exits (`exit_us`: ~1.1 µs per launch and ~0.4 per wave of them on the H200; since prefill64
//! v15 the launches after the prep are persistent, one wave of CTAs that loop over their items), so the device plan (with or
//! without its cp launches) is compared with the host's equal-length plan under a prior over the longest length:
//! half on equal lengths, half spread over ceil(T/N)..T (`prior`). Since session 30 the launches after the call's first
//! use programmatic dependent launch (launch.rs): an exiting launch's CTAs are dispatched while the running one works
//! and only its block 0 waits, ~1 µs per launch of span after a fused tile (results/prefill_s30.md). `exit_us` still
//! holds the stream-ordered costs it was fitted on (conservative for the device plan; not refitted). Tests force one
//! route (`DeviceRoute`) to run every launch's exit path and every mode.

use crate::cost;
use crate::policy::{self, Choice, DeviceCaps, PlanKind, PrefillPlan, Rejection, Shape};
use crate::registry::{self, Family, StateDtype, HEAD_DIM};
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

/// Most sequences the device reads lengths of (`DEVICE_PLAN_MAX_N` in kernels/device_plan.cuh: 8 per lane).
pub const DEVICE_PLAN_MAX_N: u64 = 256;
/// Geometric samples of the longest length between ceil(T/N) and T.
pub const DEVICE_PLAN_SAMPLES: u32 = 16;

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

/// The thresholds the kernels compare the longest sequence's length X (tokens) with.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Thresholds {
    /// The fused launches run the call when X < run_from, the prefill64 launches when X >= run_from (0: the fused
    /// launches never run; u64::MAX: only they run).
    pub run_from: u64,
    /// Below run_from: the first fused tile when X < tile_from, the second (`PrefillPlan::Device::fused_skew`, a
    /// narrower tile for skewed lengths) from tile_from (u64::MAX: one tile).
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
    /// `device_plan_runs` in prefill64.cu): cp_l_lo + (cp_l_hi − cp_l_lo)·(x − cp_from)/(T − cp_from), rounded down.
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

/// The estimate and kind of the plan the cost model picks when the longest sequence has `x` tokens.
fn pick_at(s: &Shape, caps: &DeviceCaps, x: u64) -> Result<PrefillPlan, Rejection> {
    let hinted = Shape {
        max_seq_len: x as usize,
        ..s.clone()
    };
    policy::choose_prefill(&hinted, caps, None)
}

/// The fused tile (CTAs per value head) of a fused plan.
fn fused_tile(p: &PrefillPlan) -> Option<u32> {
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

/// The model's thresholds for `s` (lengths unknown), or None when its plan (kind, and fused tile) is the same for
/// every longest length (nothing to decide on the device).
pub fn model_thresholds(s: &Shape, caps: &DeviceCaps) -> Option<Thresholds> {
    let (t, n) = (s.total_tokens as u64, s.num_seqs as u64);
    if t == 0 || n == 0 {
        return None;
    }
    let xs = samples(t, n);
    let picks: Vec<PrefillPlan> = xs
        .iter()
        .map(|&x| pick_at(s, caps, x))
        .collect::<Result<_, _>>()
        .ok()?;
    let kinds: Vec<PlanKind> = picks.iter().map(|p| p.kind()).collect();
    let tiles: Vec<Option<u32>> = picks.iter().map(fused_tile).collect();
    if kinds.iter().all(|k| *k == kinds[0]) && tiles.iter().all(|v| *v == tiles[0]) {
        return None;
    }
    let kind_at = |x: u64| pick_at(s, caps, x).map_or(PlanKind::Fused, |p| p.kind());
    // the second fused tile: from the first length whose fused pick has another tile than the equal lengths' one
    let tile_from = match tiles[0] {
        None => u64::MAX,
        Some(t0) => {
            let other = |v: Option<u32>| v.is_some_and(|v| v != t0);
            match tiles.iter().position(|v| other(*v)) {
                None => u64::MAX,
                Some(i) => first_true(xs[i - 1], xs[i], |x| {
                    other(pick_at(s, caps, x).ok().as_ref().and_then(fused_tile))
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
        if let Ok(PrefillPlan::ContextParallel { warpgroups: wg, .. }) = pick_at(s, caps, mid) {
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

/// What a launch that exits at once costs: `EXIT_LAUNCH_US`, plus `EXIT_WAVE_US` per wave of its CTAs (each waits for
/// one cu_seqlens load before it exits; the CTAs resident per SM from its shared memory). Session 23 fitted 0.8 µs per
/// wave and nothing per launch (H200, blind calls on the fused route: 64×1024 +29.5 µs over ~38 waves, 32×256 +11.6
/// over ~15). Session 27 (H200, the persistent launches of prefill64 v15 against v14's full grids, same process):
/// 64×1024, the same five exiting launches in 41 waves and then 15, −10.8 µs: 0.42 per wave; the fused-route calls
/// that gained three one-wave cp launches and lost the walk's other waves (32×256 3 of 4, prefill_05 6 of 7): +3.3 and
/// +2.2 µs, 1.1 per launch.
pub const EXIT_WAVE_US: f64 = 0.42;
pub const EXIT_LAUNCH_US: f64 = 1.1;
/// Shared memory of an SM that CTAs can use (H100 / H200: 228 KB), and what each CTA reserves besides its own.
const SM_SMEM_BYTES: u64 = 233_472;
const CTA_SMEM_RESERVED: u64 = 1024;

/// The CTAs of launch `c` an SM holds at once, by shared memory and threads.
fn resident_per_sm(c: &Choice) -> u64 {
    (SM_SMEM_BYTES / (c.dyn_smem as u64 + CTA_SMEM_RESERVED))
        .min(2048 / c.block.max(1) as u64)
        .clamp(1, 32)
}

/// Whether the device plan launches `c` persistently (prefill64 v15): the walks, the cp passes and the scan. Their
/// CTAs loop over the grid the host sized (`Choice::grid`, passed as `Prefill64PlanParams::vgrid`), claiming items from
/// a counter, so that a launch that is not the call's costs one wave of exits, not one per wave of its grid (H200,
/// session 26: blind 64×1024 paid ~29 µs for ~38 such waves). The prep keeps its grid (one item per CTA: its loop form
/// needed twice the registers, prefill64.cu `dp_items`); the fused kernels too (their pipelines run one chain per CTA).
pub fn persistent(c: &Choice) -> bool {
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
pub fn launched_ctas(c: &Choice, sms: u64) -> u64 {
    if persistent(c) {
        c.ctas().min(sms.max(1) * resident_per_sm(c))
    } else {
        c.ctas()
    }
}

/// Device memory after a device plan's workspace for the persistent launches' item counters (`Prefill64PlanParams::
/// claimed`): one u32 per launch, rounded to the workspace's alignment.
pub const DP_COUNTER_BYTES: u64 = 256;

/// The µs launch `c` costs when every CTA exits at once: `EXIT_LAUNCH_US`, and its waves (the CTAs it launches,
/// `launched_ctas`, over `sms` times the CTAs an SM holds) times `EXIT_WAVE_US`; nothing when it has no CTAs.
pub fn exit_us(c: &Choice, sms: u64) -> f64 {
    let waves = launched_ctas(c, sms).div_ceil(sms.max(1) * resident_per_sm(c));
    if waves == 0 {
        return 0.0;
    }
    EXIT_LAUNCH_US + EXIT_WAVE_US * waves as f64
}

/// The estimate of `plan` when the longest sequence has the length `s` hints: the host plans' own (`estimate`); a
/// device plan's is the route's estimate plus every other launch's exit.
fn cost_at(s: &Shape, plan: &PrefillPlan, sms: u64) -> f64 {
    let PrefillPlan::Device {
        fused,
        fused_skew,
        prep,
        walk,
        cp,
        thresholds: th,
        ..
    } = plan
    else {
        return estimate(s, plan, sms);
    };
    let x = cost::Lengths::of(s).longest;
    let exits = |launches: &mut dyn Iterator<Item = &Choice>| {
        launches.map(|c| exit_us(c, sms)).sum::<f64>()
    };
    let cps = cp.iter().flatten();
    let fuseds = fused.iter().chain(fused_skew);
    if x < th.run_from {
        let (runs, other) = if x < th.tile_from {
            (fused, fused_skew)
        } else {
            (fused_skew, fused)
        };
        let bv = runs
            .as_ref()
            .map_or(16, |f| HEAD_DIM / f.variant.ctas_per_head);
        cost::fused_us(s, bv, sms) + exits(&mut other.iter().chain(prep).chain(walk).chain(cps))
    } else if x < th.cp_from {
        cost::cp_us(s, 1, &cost::WALK_FORMS[0], sms).us + exits(&mut fuseds.chain(cps))
    } else {
        let l = th.seg_chunks_at(x, s.total_tokens as u64);
        let g = x.div_ceil(registry::prefill64::CHUNK).div_ceil(l).max(1);
        let us =
            cost::walk_form(th.warpgroups).map_or(f64::INFINITY, |f| cost::cp_us(s, g, f, sms).us);
        us + exits(&mut fuseds.chain(walk))
    }
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
        PrefillPlan::Device { .. } => f64::INFINITY,
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

/// The automatic device plan for a call without a length hint, when it can pay (see the module comment; the
/// thresholds are those of T's bucket, `token_bucket`; the launches are sized for the call's own T).
pub fn automatic(s: &Shape, caps: &DeviceCaps) -> Option<PrefillPlan> {
    let n = s.num_seqs as u64;
    if s.max_seq_len != 0 || !(2..=DEVICE_PLAN_MAX_N).contains(&n) || s.total_tokens == 0 {
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
            let th = policy::choose_prefill(&rep, caps, Some(policy::HOST_PLAN_OVERRIDE))
                .ok()
                .and_then(|blind| choose_thresholds(&rep, caps, &blind));
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
fn choose_thresholds(s: &Shape, caps: &DeviceCaps, blind: &PrefillPlan) -> Option<Thresholds> {
    let sms = (caps.sm_count as u64).max(1);
    let th = model_thresholds(s, caps)?;
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
    // One fused tile only, for now. Session 24 (H200): a second tile never paid where it was measured — on the
    // contest-like mix's skewed 8192-token calls its exit waves (bv64: 2·N·HV CTAs, one per SM) cost about what the
    // narrower tile gains, and on two short calls the model picked it and they measured +2–3 µs. The launches, the
    // route and their checks stay (`DeviceRoute::FusedSkew`), for when exits are cheaper.
    for t in [one_tile(th), one_tile(no_cp)] {
        if let Ok(plan) = build(s, caps, t, DeviceRoute::Model) {
            // one fused launch and nothing else: the host's fused plan without the length read (session 24: such
            // plans, on another tile, measured +2–3 µs on prefill_36 / prefill_75)
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
/// chunk64 and cp plans' the call belongs to them. Session 27 (H200): with bv64's chain constant refitted, the hinted
/// picks stayed fused up to ~1800 tokens on the mix's 40-sequence calls, and blind prefill_70 / 91 / 97 would have run
/// bv128 (116–133 µs) rather than chunk64 (81–88).
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
pub fn forced(s: &Shape, caps: &DeviceCaps, route: DeviceRoute) -> Result<PrefillPlan, Rejection> {
    let n = s.num_seqs as u64;
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
        let l = policy::cp_seg_chunks(s, policy::cp_forced_segments(s, sms, wg));
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
        DeviceRoute::Model => model_thresholds(s, caps).unwrap_or(Thresholds {
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
        let mut c = policy::choose(s, caps, None)?;
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
    } = policy::chunk64_plan(s, caps, why.clone())?
    else {
        unreachable!("chunk64_plan builds chunk64 plans")
    };
    let walk = (th.cp_from > th.run_from || forced).then_some(walk);
    let (cp, cp_bytes) = if th.cp_from != u64::MAX || forced {
        let nch = (s.total_tokens as u64).div_ceil(registry::prefill64::CHUNK);
        let segments = nch.div_ceil(th.cp_l_lo).max(1);
        let plan = policy::cp_plan(s, caps, (segments, th.cp_l_lo, th.warpgroups), why.clone())?;
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
    // the persistent launches' counters after the workspace (`DP_COUNTER_BYTES`; prefill64 v15)
    let workspace_bytes = match prep {
        Some(_) => c64_bytes.max(cp_bytes).next_multiple_of(DP_COUNTER_BYTES) + DP_COUNTER_BYTES,
        None => 0,
    };
    Ok(PrefillPlan::Device {
        fused,
        fused_skew,
        prep,
        walk,
        cp,
        thresholds: th,
        route,
        workspace_bytes,
    })
}

/// The fused tile for the calls a fused launch keeps (longest sequence of `from` up to `below` tokens): the smallest
/// expected estimate under the prior restricted to those lengths (None: the prior puts no weight there).
fn fused_for(
    s: &Shape,
    caps: &DeviceCaps,
    from: u64,
    below: u64,
) -> Result<Option<Choice>, Rejection> {
    let sms = (caps.sm_count as u64).max(1);
    let kept: Vec<(Shape, f64)> = prior(s)
        .into_iter()
        .filter(|(sx, _)| (from..below).contains(&cost::Lengths::of(sx).longest))
        .collect();
    if kept.is_empty() {
        return Ok(None);
    }
    let expected = |v: &registry::Variant| {
        kept.iter()
            .map(|(sx, w)| w * policy::fused_tile_us(sx, v, sms))
            .sum::<f64>()
    };
    let best = registry::candidates(Family::Prefill, s.state)
        .filter(|v| v.hot)
        .min_by(|a, b| expected(a).total_cmp(&expected(b)));
    let Some(v) = best else { return Ok(None) };
    let why = format!(
        "device plan's fused launch: the best expected tile from {from} to {} tokens",
        show(below)
    );
    let (v, why) = policy::fused_order(v, s, sms, why);
    let mut c = policy::choose(s, caps, Some(v.name))?;
    c.why = why;
    Ok(Some(c))
}

/// A forced route's second fused tile: bv64 beside bv128, else bv128 (so both tiles' exits and runs are tested).
fn other_tile(s: &Shape, caps: &DeviceCaps, wide: &Choice) -> Result<Choice, Rejection> {
    let want = if wide.variant.ctas_per_head == 1 {
        2
    } else {
        1
    };
    let v = registry::candidates(Family::Prefill, s.state)
        .find(|v| v.ctas_per_head == want)
        .expect("the registry has bv64 and bv128 prefill tiles");
    policy::choose(s, caps, Some(v.name))
}

fn show(x: u64) -> String {
    if x == u64::MAX {
        "never".into()
    } else {
        x.to_string()
    }
}
