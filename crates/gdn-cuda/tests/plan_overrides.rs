//! The `GDN_KERNEL` override (GPU-free): a named kernel must be of the call's family and state dtype and still
//! passes every limit check; for prefill it forces the plan its kernel belongs to (fused, chunk64, cp with the
//! named walk form), and `gdn check` finds the name that forces each plan kind.

mod common;

use common::{kind, pre, shape, H100};
use gdn_core::Op;
use gdn_cuda::kernels::registry::StateDtype;
use gdn_cuda::plan::prefill::overrides::prefill_override_for;
use gdn_cuda::plan::prefill::{self, PrefillPlan};
use gdn_cuda::plan::{select, PlanKind, Rejection, Shape};

#[test]
fn override_is_checked() {
    let s = shape(Op::Decode, 64, 1, StateDtype::F32);
    let c = select::choose(&s, &H100, Some("gdn_recurrent_f32_t1_v4r2w8")).unwrap();
    assert_eq!(c.variant.name, "gdn_recurrent_f32_t1_v4r2w8");
    assert_eq!(c.grid, (64 * 8, 4, 2));
    assert!(matches!(
        select::choose(&s, &H100, Some("nope")),
        Err(Rejection::Override { .. })
    ));
    assert!(matches!(
        select::choose(&s, &H100, Some("gdn_recurrent_bf16_t1_v8r2w4")),
        Err(Rejection::Override { .. })
    ));
    assert!(matches!(
        select::choose(&s, &H100, Some("gdn_prefill_f32_bv16")),
        Err(Rejection::Override { .. })
    ));
}

#[test]
fn override_forces_either_prefill_plan() {
    use StateDtype::{BF16, F32};
    let short = pre(8, 800, 8, F32); // fused by the rule
    let long = pre(16, 16 * 2048, 8, F32); // fused by the rule too (256 walk chains: no cp)
    assert_eq!(kind(&short), PlanKind::Fused);
    assert_eq!(kind(&long), PlanKind::Fused);
    let forced = |s: &Shape, name| prefill::choose(s, &H100, Some(name));
    // naming the walk (of the state dtype) or the prep forces chunk64
    let p = forced(&short, "gdn_prefill64_walk_f32").unwrap();
    assert_eq!(p.kind(), PlanKind::Chunk64);
    assert!(p.why().contains("forced"));
    assert_eq!(
        forced(&short, "gdn_prefill64_prep").unwrap().kind(),
        PlanKind::Chunk64
    );
    assert!(matches!(
        forced(&short, "gdn_prefill64_walk_bf16"),
        Err(Rejection::Override { .. })
    ));
    assert_eq!(
        forced(&pre(1, 100, 8, BF16), "gdn_prefill64_walk_bf16")
            .unwrap()
            .launches()[1]
            .variant
            .name,
        "gdn_prefill64_walk_bf16"
    );
    // naming a fused kernel forces the fused plan with that kernel
    let p = forced(&long, "gdn_prefill_f32_bv32").unwrap();
    assert_eq!(p.kind(), PlanKind::Fused);
    assert_eq!(p.launches()[0].variant.name, "gdn_prefill_f32_bv32");
    assert!(matches!(
        forced(&long, "gdn_prefill_bf16_bv32"),
        Err(Rejection::Override { .. })
    ));
    // a recurrent kernel or an unknown name is refused
    for name in ["gdn_recurrent_f32_t1_v4r2w8", "nope"] {
        assert!(matches!(
            forced(&long, name),
            Err(Rejection::Override { .. })
        ));
    }
    // and a prefill64 kernel cannot run decode
    assert!(matches!(
        select::choose(
            &shape(Op::Decode, 4, 1, StateDtype::F32),
            &H100,
            Some("gdn_prefill64_walk_f32")
        ),
        Err(Rejection::Override { .. })
    ));
    // the names `gdn check` uses to run each plan
    assert_eq!(
        prefill_override_for(PlanKind::Chunk64, &short, &H100).unwrap(),
        "gdn_prefill64_walk_f32"
    );
    assert_eq!(
        prefill_override_for(PlanKind::Fused, &long, &H100).unwrap(),
        select::choose(&long, &H100, None).unwrap().variant.name
    );
    for k in [
        PlanKind::Fused,
        PlanKind::Chunk64,
        PlanKind::ContextParallel,
        PlanKind::ContextParallelWide,
    ] {
        let name = prefill_override_for(k, &long, &H100).unwrap();
        assert_eq!(forced(&long, name).unwrap().kind(), k);
        let name = prefill_override_for(k, &short, &H100).unwrap();
        assert_eq!(forced(&short, name).unwrap().kind(), k);
    }
}

#[test]
fn a_forced_cp_plan_fills_the_gpu_with_its_named_walk_form() {
    use StateDtype::F32;
    // forced on short, many sequences: at least 3 segments (every pass has work), L >= 1
    let forced = prefill::choose(
        &pre(57, 57 * 150, 8, F32),
        &H100,
        Some("gdn_prefill64_cp_scan"),
    )
    .unwrap();
    let PrefillPlan::ContextParallel {
        segments,
        seg_chunks,
        ..
    } = forced
    else {
        panic!("expected cp");
    };
    assert_eq!((segments, seg_chunks), (3, 1));
    // naming a two-warpgroup pass forces that form, with segments for its chains (N·HV: one CTA per head)
    let long = pre(1, 65_536, 8, F32);
    for (name, wg, g) in [
        ("gdn_prefill64_cp_pass1w_f32", 2, 17),
        ("gdn_prefill64_cp_pass3w_f32", 2, 17),
        ("gdn_prefill64_cp_pass3_f32", 1, 9),
        ("gdn_prefill64_cp_scan8", 1, 9),
    ] {
        let p = prefill::choose(&long, &H100, Some(name)).unwrap();
        let PrefillPlan::ContextParallel {
            segments,
            warpgroups,
            ..
        } = p
        else {
            panic!("expected cp");
        };
        assert_eq!((warpgroups, segments), (wg, g), "{name}");
    }
    assert!(matches!(
        prefill::choose(
            &pre(1, 65_536, 8, F32),
            &H100,
            Some("gdn_prefill64_cp_pass1_bf16")
        ),
        Err(Rejection::Override { .. })
    ));
    // no sequences: nothing to launch, no workspace
    let p = prefill::choose(
        &pre(0, 0, 8, F32),
        &H100,
        Some("gdn_prefill64_cp_pass3_f32"),
    )
    .unwrap();
    assert!(p.is_empty());
    assert_eq!(p.workspace_bytes(), 0);
}

#[test]
fn cp_exact_overrides_force_the_affine_path_and_the_cp_plans_cut() {
    use gdn_cuda::plan::prefill::overrides::{ForcedPlan, CP_EXACT_OVERRIDES};
    use StateDtype::F32;
    let long = pre(1, 65_536, 8, F32);
    let cuts_of = |p: &PrefillPlan| match p {
        PrefillPlan::ContextParallel {
            cuts, warpgroups, ..
        } => (*cuts, *warpgroups),
        other => panic!("expected cp, got {}", other.label()),
    };
    for (name, wg) in CP_EXACT_OVERRIDES {
        let exact = prefill::choose(&long, &H100, Some(name)).unwrap();
        assert_eq!(cuts_of(&exact), (false, wg), "{name}");
        // the same segments as the pass that names the walk form, with cuts
        let pass3 = if wg == 1 {
            "gdn_prefill64_cp_pass3_f32"
        } else {
            "gdn_prefill64_cp_pass3w_f32"
        };
        let cut = prefill::choose(&long, &H100, Some(pass3)).unwrap();
        assert_eq!(cuts_of(&cut), (true, wg), "{pass3}");
        assert_eq!(exact.launches().len(), cut.launches().len());
        for (a, b) in exact.launches().iter().zip(cut.launches()) {
            assert_eq!((a.variant.name, a.grid), (b.variant.name, b.grid), "{name}");
        }
    }
    // the automatic plan cuts
    assert!(cuts_of(&prefill::choose(&long, &H100, None).unwrap()).0);
    // gdn check runs both exact overrides, by these names
    for (wide, (name, _)) in [
        (false, CP_EXACT_OVERRIDES[0]),
        (true, CP_EXACT_OVERRIDES[1]),
    ] {
        let f = ForcedPlan::CpExact(wide);
        assert!(ForcedPlan::CHECKED.contains(&f));
        assert_eq!(f.name(), name);
        assert_eq!(f.override_for(&long, &H100).unwrap(), name);
        assert!(f.available(&H100));
    }
}
