//! The device plan (`plan::prefill::device`): which blind prefill calls get it, what it launches, and the thresholds
//! and segment lengths the kernels will read. GPU-free; the routes' correctness is `gdn check`'s (every case runs
//! each forced route on the device).

mod common;

use common::{blind, H100};
use gdn_cuda::kernels::registry::StateDtype;
use gdn_cuda::plan::grid;
use gdn_cuda::plan::prefill::cost::{self, EXIT_LAUNCH_US, EXIT_WAVE_US};
use gdn_cuda::plan::prefill::device::{self, DEVICE_PLAN_MAX_N};
use gdn_cuda::plan::prefill::workspace::{
    prefill64_cp_workspace_bytes, prefill64_workspace_bytes, DP_COUNTER_BYTES,
};
use gdn_cuda::plan::prefill::{self, host, types, DeviceRoute, PrefillPlan, Thresholds};
use gdn_cuda::plan::{PlanKind, Rejection, Shape};

fn thresholds(p: &PrefillPlan) -> Thresholds {
    match p.device() {
        Some(d) => d.thresholds,
        None => panic!("not a device plan: {}", p.label()),
    }
}

#[test]
fn blind_calls_that_can_be_skewed_are_planned_on_the_device() {
    // 40 sequences of 8192 tokens (the contest-like mix has eleven such calls; their longest sequence runs from 913
    // to 5637 tokens): the fused launch for near-equal lengths, the chunk64 plan above run_from
    let s = blind(40, 8192, 8);
    let p = prefill::choose(&s, &H100, None).unwrap();
    assert_eq!(p.kind(), PlanKind::Device, "{}", p.label());
    let th = thresholds(&p);
    assert!(th.run_from > 8192 / 40 && th.run_from < 8192, "{th:?}");
    assert!(th.cp_from >= th.run_from, "{th:?}");
    assert!(
        p.label().starts_with("device gdn_prefill_f32_bv"),
        "{}",
        p.label()
    );
    assert!(
        p.label()
            .contains("gdn_prefill64_prep+gdn_prefill64_walk_f32"),
        "{}",
        p.label()
    );
    // its workspace serves both prefill64 plans
    let (t, n, hv) = (8192, 40, 8);
    assert!(p.workspace_bytes() >= prefill64_workspace_bytes(t, n, hv));
    if th.cp_from != u64::MAX {
        assert!(p.workspace_bytes() >= prefill64_cp_workspace_bytes(t, n, hv, th.cp_l_lo));
    }
    // the same call with its longest length hinted is planned on the host
    let hinted = Shape {
        max_seq_len: 1972,
        ..s.clone()
    };
    assert_ne!(
        prefill::choose(&hinted, &H100, None).unwrap().kind(),
        PlanKind::Device
    );
    // GDN_KERNEL=host keeps the host's equal-length plan
    assert_ne!(
        prefill::choose(&s, &H100, Some("host")).unwrap().kind(),
        PlanKind::Device
    );
}

#[test]
fn calls_the_device_plan_cannot_help_stay_on_the_host() {
    for s in [
        blind(1, 8192, 8),                                 // one sequence: its length is T
        blind(4, 100, 8),                                  // tiny: every length gets the same plan
        blind(DEVICE_PLAN_MAX_N as usize + 1, 1 << 16, 8), // more lengths than a warp reads
        blind(3, 0, 8),                                    // nothing to do
    ] {
        let p = prefill::choose(&s, &H100, None).unwrap();
        assert_ne!(p.kind(), PlanKind::Device, "{s:?}: {}", p.label());
    }
}

#[test]
fn odd_value_heads_get_no_fused_launch() {
    let p = prefill::choose(&blind(40, 8192, 3), &H100, None).unwrap();
    if let Some(d) = p.device() {
        assert!(d.fused.is_none(), "{}", p.label());
        assert_eq!(thresholds(&p).run_from, 0);
    }
    assert!(!p.label().contains("gdn_prefill_f32"), "{}", p.label());
}

#[test]
fn segment_lengths_interpolate_from_the_sized_one() {
    let th = Thresholds {
        run_from: 500,
        tile_from: u64::MAX,
        cp_from: 3000,
        cp_l_lo: 9,
        cp_l_hi: 13,
        warpgroups: 2,
    };
    let t = 8192;
    assert_eq!(th.seg_chunks_at(3000, t), 9);
    assert_eq!(th.seg_chunks_at(t, t), 13);
    assert_eq!(th.seg_chunks_at(t + 5, t), 13);
    let mut last = 0;
    for x in (3000..=t).step_by(97) {
        let l = th.seg_chunks_at(x, t);
        assert!((9..=13).contains(&l) && l >= last, "x {x}: L {l}");
        last = l;
    }
    // hi below lo, or no span: lo (the grids are sized for it)
    let flat = Thresholds { cp_l_hi: 4, ..th };
    assert_eq!(flat.seg_chunks_at(t, t), 9);
    assert_eq!(th.seg_chunks_at(9000, 3000), 9);
}

#[test]
fn model_thresholds_follow_the_hinted_picks() {
    // the kinds the host picks with each longest length hinted: fused below run_from, cp at or above cp_from
    for (n, t) in [(40usize, 8192usize), (12, 8192), (4, 2564), (2, 2413)] {
        let s = blind(n, t, 8);
        let Some(th) = device::model_thresholds(&s, &H100, &host::plan) else {
            continue;
        };
        let kind_at = |x: u64| {
            let h = Shape {
                max_seq_len: x as usize,
                ..s.clone()
            };
            prefill::choose(&h, &H100, None).unwrap().kind()
        };
        if th.run_from > 64 && th.run_from != u64::MAX {
            assert_eq!(
                kind_at(th.run_from - 64),
                PlanKind::Fused,
                "{n}x{t}: {th:?}"
            );
            assert_ne!(kind_at(th.run_from), PlanKind::Fused, "{n}x{t}: {th:?}");
        }
        if th.cp_from != u64::MAX {
            assert!(
                matches!(
                    kind_at(th.cp_from),
                    PlanKind::ContextParallel | PlanKind::ContextParallelWide
                ),
                "{n}x{t}: {th:?}"
            );
            assert!(th.cp_l_lo >= 1 && th.cp_l_hi >= th.cp_l_lo, "{th:?}");
        }
    }
}

#[test]
fn forced_routes_launch_every_candidate() {
    let s = blind(57, 8000, 8);
    for route in DeviceRoute::FORCED {
        let p = prefill::choose(&s, &H100, Some(route.override_name())).unwrap();
        let Some(d) = p.device() else {
            panic!("{route:?}: {}", p.label())
        };
        let th = &d.thresholds;
        assert!(
            d.fused.is_some()
                && d.fused_skew.is_some()
                && d.prep.is_some()
                && d.walk.is_some()
                && d.cp.is_some(),
            "{route:?}"
        );
        // two different tiles
        assert_ne!(
            d.fused.as_ref().unwrap().variant.name,
            d.fused_skew.as_ref().unwrap().variant.name
        );
        assert!(
            p.label().starts_with(route.override_name()),
            "{}",
            p.label()
        );
        // every call goes to the route's launch
        for x in [0u64, 1, 140, 8000] {
            let (fused_runs, cp_runs) = (x < th.run_from, x >= th.cp_from && x >= th.run_from);
            let skew_runs = fused_runs && x >= th.tile_from;
            match route {
                DeviceRoute::Fused => assert!(fused_runs && !skew_runs),
                DeviceRoute::FusedSkew => assert!(skew_runs),
                DeviceRoute::Chunk64 => assert!(!fused_runs && !cp_runs),
                DeviceRoute::Cp => assert!(!fused_runs && cp_runs),
                DeviceRoute::Model => unreachable!(),
            }
        }
        // the cp launches are sized for the smallest L the device takes
        let [pass1, ..] = d.cp.as_ref().unwrap();
        let g = grid::prefill64_seg_slots(8000, 57, th.cp_l_lo);
        assert_eq!(pass1.grid.0 as u64, g, "{route:?}");
    }
    // the device reads at most DEVICE_PLAN_MAX_N lengths: a forced route past that is refused, naming why
    let wide = blind(DEVICE_PLAN_MAX_N as usize + 1, 1 << 16, 8);
    match prefill::choose(&wide, &H100, Some("device-cp")) {
        Err(Rejection::Override { problem, .. }) => {
            assert!(problem.contains("at most"), "{problem}")
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn the_launches_after_the_prep_are_persistent_and_exit_in_one_wave() {
    // the walk, the cp passes and the scan launch at most one wave of CTAs, which loop over the grid the host sized
    // (the launch's grid, passed as vgrid); the prep and the fused tiles keep their grids
    let s = blind(57, 8000, 8);
    let p = prefill::choose(&s, &H100, Some(DeviceRoute::Cp.override_name())).unwrap();
    let Some(d) = p.device() else {
        panic!("{}", p.label())
    };
    let (fused, prep, walk) = (
        d.fused.as_ref().unwrap(),
        d.prep.as_ref().unwrap(),
        d.walk.as_ref().unwrap(),
    );
    let sms = H100.sm_count as u64;
    assert!(!types::persistent(fused) && !types::persistent(prep));
    assert_eq!(types::launched_ctas(prep, sms), prep.ctas());
    assert_eq!(types::launched_ctas(fused, sms), fused.ctas());
    // the walk: 57·8·2 CTAs of 127 KB of shared memory, one per SM → one wave of 132
    assert_eq!(walk.ctas(), 57 * 8 * 2);
    assert!(types::persistent(walk));
    assert_eq!(types::launched_ctas(walk, sms), sms);
    for c in d.cp.as_ref().unwrap().iter().filter(|c| !c.is_empty()) {
        assert!(types::persistent(c), "{}", c.variant.name);
        assert!(
            types::launched_ctas(c, sms) <= sms.min(c.ctas()),
            "{}",
            c.variant.name
        );
    }
    // an exiting launch costs a launch plus its waves: one wave for the persistent walk, several for the prep
    let one = EXIT_LAUNCH_US + EXIT_WAVE_US;
    assert!((device::exit_us(walk, sms) - one).abs() < 1e-9);
    assert!(device::exit_us(prep, sms) > one);
    // the item counters follow the workspace, which keeps its alignment
    assert_eq!(p.workspace_bytes() % 256, 0);
    assert!(
        p.workspace_bytes()
            >= prefill64_cp_workspace_bytes(8000, 57, 8, thresholds(&p).cp_l_lo)
                .max(prefill64_workspace_bytes(8000, 57, 8))
                + DP_COUNTER_BYTES
    );
}

#[test]
fn one_fused_tile_hands_over_where_its_own_estimate_loses() {
    // run_from is where the launched tile's estimate exceeds the prefill64 plans', not where the hinted pick (with the
    // best tile at each length) stops being fused: the mix's 40-sequence calls would otherwise run bv128 up to ~1800
    // tokens, where bv64 is the hinted pick and chunk64 beats bv128 by ~40 us
    let sms = H100.sm_count as u64;
    for (n, t) in [(42, 8192), (57, 8192), (31, 1527)] {
        let s = blind(n, t, 8);
        let p = prefill::choose(&s, &H100, None).unwrap();
        let Some(d) = p.device() else {
            panic!("{n}x{t}: {}", p.label())
        };
        let (Some(f), None, th) = (&d.fused, &d.fused_skew, &d.thresholds) else {
            panic!("{n}x{t}: {}", p.label())
        };
        assert!(th.run_from < u64::MAX && th.run_from > 0, "{n}x{t}: {th:?}");
        let at = |x: u64| {
            let sx = Shape {
                max_seq_len: x as usize,
                ..s.clone()
            };
            (
                // (the tile's own estimate: the split bv128 build's where the launch is one)
                host::fused_tile_us(&sx, f.variant, sms),
                cost::prefill64_best_us(&sx, sms),
            )
        };
        let (fused_in, others_in) = at(th.run_from - 64); // (bisection to within a 64-token chunk)
        let (fused_out, others_out) = at(th.run_from);
        assert!(
            fused_in <= others_in * 1.05,
            "{n}x{t}: {fused_in} vs {others_in} below {th:?}"
        );
        assert!(
            fused_out > others_out,
            "{n}x{t}: {fused_out} vs {others_out} at {th:?}"
        );
    }
}

#[test]
fn the_device_plan_is_chosen_by_expected_cost() {
    // where it is chosen, its expected µs under the prior beats the host's equal-length plan
    for (n, t) in [
        (40usize, 8192usize),
        (12, 8192),
        (4, 2564),
        (32, 8192),
        (64, 65_536),
    ] {
        let s = blind(n, t, 8);
        let p = prefill::choose(&s, &H100, None).unwrap();
        let host = prefill::choose(&s, &H100, Some("host")).unwrap();
        if p.kind() == PlanKind::Device {
            let (dev, h) = (
                device::expected_us(&s, &p, 132),
                device::expected_us(&s, &host, 132),
            );
            assert!(dev < h, "{n}x{t}: device {dev:.1} vs host {h:.1}");
        }
        // and it is remembered: the same call gets the same plan
        assert_eq!(prefill::choose(&s, &H100, None).unwrap(), p);
    }
}

#[test]
fn every_route_plans_edge_shapes() {
    // what `gdn check` forces on its prefill cases: empty calls, one sequence, zero-length sequences, odd heads
    let shapes = [1usize, 2, 5, 57].into_iter().flat_map(|n| {
        [0usize, 1, 63, 64, 65, 137, 4096, 8490]
            .into_iter()
            .flat_map(move |t| {
                [1usize, 2, 3, 6, 8, 16, 64]
                    .into_iter()
                    .map(move |hv| (n, t, hv))
            })
    });
    for (n, t, hv) in shapes {
        let mut s = blind(n, t, hv);
        if n == 2 {
            s.state = StateDtype::BF16;
        }
        for route in std::iter::once(DeviceRoute::Model).chain(DeviceRoute::FORCED) {
            match prefill::choose(&s, &H100, Some(route.override_name())) {
                Ok(p) => assert_eq!(p.kind(), PlanKind::Device),
                // (a forced cp route's workspace can pass the cap, as a forced cp plan's does: refused, saying so)
                Err(Rejection::Workspace { .. }) => assert!(route != DeviceRoute::Model),
                Err(e) => panic!("{n}x{t} hv {hv} {route:?}: {e}"),
            }
        }
    }
}

#[test]
fn nearby_token_counts_share_thresholds() {
    // T in one bucket (5 significant bits) gets the bucket's thresholds, with launches sized for its own T
    let a = prefill::choose(&blind(40, 8192, 8), &H100, None).unwrap();
    let b = prefill::choose(&blind(40, 8192 + 200, 8), &H100, None).unwrap();
    assert_eq!(thresholds(&a), thresholds(&b));
    let (Some(pa), Some(pb)) = (
        a.device().and_then(|d| d.prep.as_ref()),
        b.device().and_then(|d| d.prep.as_ref()),
    ) else {
        panic!("{} / {}", a.label(), b.label())
    };
    assert_eq!(pa.grid.0 as u64, grid::prefill64_slots(8192, 40) * 8);
    assert_eq!(pb.grid.0 as u64, grid::prefill64_slots(8392, 40) * 8);
}
