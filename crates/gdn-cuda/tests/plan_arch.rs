//! The plans of GPUs other than Hopper: a target without wgmma (`DeviceCaps::arch`) gets decode, MTP and the fused
//! prefill only, with the tiles its shared memory takes (the compact `_np2` tiles on 99 KB GPUs), for every shape
//! (long sequences included); Hopper's plans are unchanged; a forced Hopper-only plan is refused by name.

mod common;

use common::*;
use gdn_core::Op;
use gdn_cuda::kernels::registry::{self, StateDtype};
use gdn_cuda::plan::prefill::overrides::ForcedPlan;
use gdn_cuda::plan::prefill::{self, PrefillPlan};
use gdn_cuda::plan::{select, DeviceCaps, PlanKind, Rejection, Shape};

const A100: DeviceCaps = DeviceCaps::AMPERE_108;
const L40S: DeviceCaps = DeviceCaps::ADA_142;
/// A B200-like device compiled for plain sm_100: the portable kernels with 232 KB per block (every fused tile).
const B200: DeviceCaps = DeviceCaps {
    cc: (10, 0),
    arch: gdn_cuda::kernels::registry::Arch::portable(100),
    sm_count: 148,
    max_dyn_smem: 232_448,
    mem_bytes: 180 << 30,
};
/// Hopper's chip compiled for plain sm_90 (`GDN_ARCH=sm_90`): the portable kernels with Hopper's resources.
const H100_SM90: DeviceCaps = DeviceCaps {
    arch: gdn_cuda::kernels::registry::Arch::portable(90),
    ..H100
};

/// Prefill shapes from one token to 64K, few and many sequences, hinted and blind, both state dtypes.
fn prefill_shapes() -> Vec<Shape> {
    let mut out = Vec::new();
    for state in [StateDtype::F32, StateDtype::BF16] {
        for (n, t) in [
            (1, 1),
            (1, 128),
            (1, 1024),
            (1, 8192),
            (1, 65_536),
            (4, 8192),
            (30, 6000),
            (64, 65_536),
            (256, 4096),
            (2048, 2048),
        ] {
            let blind = pre(n, t, 8, state);
            out.push(Shape {
                max_seq_len: t.div_ceil(n),
                ..blind.clone()
            });
            out.push(Shape {
                max_seq_len: t - (n - 1),
                ..blind.clone()
            });
            out.push(blind);
        }
    }
    out
}

#[test]
fn portable_targets_plan_every_prefill_shape_on_fused_tiles_that_fit() {
    for caps in [A100, L40S, H100_SM90, B200] {
        for s in prefill_shapes() {
            let plan =
                prefill::choose(&s, &caps, None).unwrap_or_else(|e| panic!("{caps:?} {s:?}: {e}"));
            let PrefillPlan::Fused { variant } = &plan else {
                panic!("{:?} on {}: {:?}, not fused", s, caps.arch, plan.kind());
            };
            let v = variant.variant;
            assert!(
                caps.builds(v.module),
                "{} not built for {}",
                v.name,
                caps.arch
            );
            assert!(
                v.dyn_smem <= caps.max_dyn_smem,
                "{} needs {} > {}",
                v.name,
                v.dyn_smem,
                caps.max_dyn_smem
            );
            if caps == L40S {
                assert!(
                    registry::is_compact(v),
                    "{}: a 99 KB GPU runs the compact tiles",
                    v.name
                );
            } else {
                assert!(
                    !registry::is_compact(v),
                    "{}: the default tile fits {}",
                    v.name,
                    caps.arch
                );
            }
        }
    }
}

#[test]
fn the_tiles_each_target_gets() {
    let widths = |caps: &DeviceCaps| -> Vec<&str> {
        prefill::host::fused_tiles(StateDtype::BF16, caps)
            .iter()
            .map(|v| v.name)
            .collect()
    };
    assert_eq!(
        widths(&H100),
        [
            "gdn_prefill_bf16_bv128",
            "gdn_prefill_bf16_bv64",
            "gdn_prefill_bf16_bv32",
            "gdn_prefill_bf16_bv16"
        ]
    );
    assert_eq!(
        widths(&A100),
        ["gdn_prefill_bf16_bv64", "gdn_prefill_bf16_bv32"]
    );
    assert_eq!(
        widths(&L40S),
        ["gdn_prefill_bf16_bv64_np2", "gdn_prefill_bf16_bv32_np2"]
    );
}

#[test]
fn decode_and_mtp_run_the_same_kernels_everywhere() {
    for caps in [A100, L40S, H100_SM90] {
        for (op, n, t) in [(Op::Decode, 1, 1), (Op::Decode, 256, 1), (Op::Mtp, 16, 4)] {
            for state in [StateDtype::F32, StateDtype::BF16] {
                let s = shape(op, n, t, state);
                let here = select::choose(&s, &caps, None).unwrap();
                assert!(caps.builds(here.variant.module));
                // the decode table depends on the SM count only; with Hopper's, the same kernel as Hopper's
                if caps == H100_SM90 {
                    assert_eq!(here.variant.name, pick(&s));
                }
            }
        }
    }
}

#[test]
fn hopper_plans_are_refused_elsewhere_by_name() {
    let s = hinted(1, 65_536, 65_536);
    for force in [
        "gdn_prefill64_walk_f32",
        "gdn_prefill64_cp_pass3_f32",
        "device",
        "device-cp",
    ] {
        let e = prefill::choose(&s, &A100, Some(force)).unwrap_err();
        assert!(matches!(e, Rejection::NotBuilt { .. }), "{force}: {e:?}");
        let text = e.to_string();
        assert!(
            text.contains("sm_80") && text.contains("sm_90a"),
            "{force}: {text}"
        );
    }
    // an odd number of value heads needs chunk64, which only Hopper has
    let odd = pre(2, 512, 7, StateDtype::F32);
    assert_eq!(
        prefill::choose(&odd, &A100, None).unwrap_err(),
        Rejection::OddValueHeads { v: 7 }
    );
    assert!(prefill::choose(&odd, &H100, None).is_ok());
}

#[test]
fn check_runs_the_plans_each_target_has() {
    let names = |caps: &DeviceCaps| -> Vec<&str> {
        ForcedPlan::CHECKED
            .iter()
            .filter(|p| p.available(caps))
            .map(|p| p.name())
            .collect()
    };
    assert_eq!(names(&A100), ["fused", "fused-lf", "fused-np2"]);
    assert_eq!(names(&L40S), ["fused", "fused-np2"]);
    assert_eq!(names(&H100).len(), ForcedPlan::CHECKED.len());
    assert_eq!(
        names(&B200),
        ["fused", "fused-lf", "fused-split", "fused-np2"]
    );
    // every forced fused plan a target has resolves to a kernel that runs there, for every shape (the fused plans:
    // Hopper's device plan refuses calls of more than 256 sequences by design)
    let fused = |p: &&ForcedPlan| {
        matches!(
            p,
            ForcedPlan::Kind(PlanKind::Fused)
                | ForcedPlan::FusedLongestFirst
                | ForcedPlan::FusedSplit
                | ForcedPlan::FusedCompact
        )
    };
    for caps in [A100, L40S, B200, H100_SM90, H100] {
        for s in prefill_shapes() {
            for p in ForcedPlan::CHECKED
                .iter()
                .filter(fused)
                .filter(|p| p.available(&caps))
            {
                let name = p.override_for(&s, &caps).unwrap();
                let plan = prefill::choose(&s, &caps, Some(name));
                assert!(
                    plan.is_ok(),
                    "{} on {} for {s:?}: {plan:?}",
                    p.name(),
                    caps.arch
                );
            }
        }
    }
}

#[test]
fn the_compact_plan_forces_the_nearest_compact_tile() {
    for (n, t, want) in [
        (1, 64, "gdn_prefill_f32_bv32_np2"),
        (64, 65_536, "gdn_prefill_f32_bv64_np2"),
    ] {
        let s = pre(n, t, 8, StateDtype::F32);
        assert_eq!(
            ForcedPlan::FusedCompact.override_for(&s, &H100).unwrap(),
            want
        );
        let plan = prefill::choose(&s, &H100, Some(want)).unwrap();
        assert_eq!(plan.kind(), PlanKind::Fused);
    }
}
