//! Decode / MTP kernel choice (GPU-free): the recurrent tables at their boundaries, their scaling to other head and
//! SM counts, the build a call's serving modes select, and the tables' kernels in the registry.

mod common;

use common::{pick, shape, H100};
use gdn_core::{GateMode, Op, PadRule, StateLayout};
use gdn_cuda::kernels::registry::{self, Family, StateDtype, Variant, VARIANTS};
use gdn_cuda::plan::decode::{
    equivalent_batch, Build, RECURRENT_KFIRST_TABLE, RECURRENT_TABLE, SERVING_SUFFIX,
};
use gdn_cuda::plan::{select, DeviceCaps, Rejection, Shape};
use gdn_cuda::RecurrentArgs;

/// The kernel `select::choose_recurrent` picks for `s` and `build` on the test device.
fn pick_build(s: &Shape, build: Build) -> &'static str {
    select::choose_recurrent(s, &H100, None, build)
        .unwrap()
        .variant
        .name
}

/// The `_sv` build of a table kernel.
fn serving_build(name: &str) -> &'static Variant {
    registry::find(&format!("{name}{SERVING_SUFFIX}"))
        .unwrap_or_else(|| panic!("{name} has no serving build"))
}

/// Every row of each recurrent table at its boundary (qk4_v8, 132 SMs: equivalent batch = B), in each build that
/// uses the table (the serving build runs the `_sv` build of the definition table's kernel).
#[test]
fn every_table_row_holds_up_to_its_boundary_and_not_past_it() {
    for (table, build) in [
        (RECURRENT_TABLE, Build::Definition),
        (RECURRENT_TABLE, Build::Serving),
        (RECURRENT_KFIRST_TABLE, Build::KFirst),
    ] {
        for (family, st, max_b, kernel) in table {
            let (op, t) = match family {
                Family::Decode => (Op::Decode, 1),
                Family::Mtp => (Op::Mtp, 4),
                _ => unreachable!("prefill families are not in the recurrent tables"),
            };
            let want = match build {
                Build::Serving => serving_build(kernel).name,
                _ => *kernel,
            };
            if *max_b == u64::MAX {
                assert_eq!(pick_build(&shape(op, 100_000, t, *st), build), want);
                continue;
            }
            let b = *max_b as usize;
            assert_eq!(
                pick_build(&shape(op, b, t, *st), build),
                want,
                "{build:?} {family:?} {st:?} B={b}"
            );
            assert_ne!(
                pick_build(&shape(op, b + 1, t, *st), build),
                want,
                "{build:?} {family:?} {st:?} B={}",
                b + 1
            );
        }
    }
}

/// A serving build is the definition kernel's launch under another name: same family, state, grid, block and CTAs
/// per head. K-first kernels cover every (family, state) the definition table covers.
#[test]
fn serving_builds_launch_like_their_definition_kernels() {
    for (_, _, _, k) in RECURRENT_TABLE {
        let (d, s) = (registry::find(k).unwrap(), serving_build(k));
        assert_eq!(
            (
                d.family,
                d.state,
                d.grid,
                d.block,
                d.ctas_per_head,
                d.dyn_smem
            ),
            (
                s.family,
                s.state,
                s.grid,
                s.block,
                s.ctas_per_head,
                s.dyn_smem
            ),
            "{k}"
        );
        assert_eq!(
            (Build::of(d), Build::of(s)),
            (Build::Definition, Build::Serving)
        );
    }
    for (family, st, _, _) in RECURRENT_TABLE {
        assert!(
            RECURRENT_KFIRST_TABLE
                .iter()
                .any(|r| r.0 == *family && r.1 == *st && r.2 == u64::MAX),
            "{family:?} {st:?} has no K-first kernel for every batch"
        );
    }
    for (_, _, _, k) in RECURRENT_KFIRST_TABLE {
        assert_eq!(Build::of(registry::find(k).unwrap()), Build::KFirst, "{k}");
    }
}

/// Overrides name a kernel of a build that runs the call: the serving build also runs definition calls; nothing
/// else crosses builds (a definition kernel ignores the serving block, a k-last kernel cannot read K-first state).
#[test]
fn overrides_must_name_a_kernel_of_a_build_that_runs_the_call() {
    let s = shape(Op::Decode, 3, 1, StateDtype::F32);
    let force = |name: &str, build| select::choose_recurrent(&s, &H100, Some(name), build);
    let ok = |name: &str, build| force(name, build).unwrap().variant.name;
    assert_eq!(
        ok("gdn_recurrent_f32_t1_v4r2w8_sv", Build::Definition),
        "gdn_recurrent_f32_t1_v4r2w8_sv"
    );
    assert_eq!(
        ok("gdn_recurrent_f32_t1_v8r4w4_kf", Build::KFirst),
        "gdn_recurrent_f32_t1_v8r4w4_kf"
    );
    for (name, build) in [
        ("gdn_recurrent_f32_t1_v4r2w8", Build::Serving),
        ("gdn_recurrent_f32_t1_v4r2w8", Build::KFirst),
        ("gdn_recurrent_f32_t1_v4r2w8_sv", Build::KFirst),
        ("gdn_recurrent_f32_t1_v8r4w4_kf", Build::Definition),
        ("gdn_recurrent_f32_t1_v8r4w4_kf", Build::Serving),
    ] {
        assert!(
            matches!(force(name, build), Err(Rejection::Override { .. })),
            "{name} for {build:?}"
        );
    }
}

/// The build a call needs follows from the serving modes that change what the kernels compute; flags that only
/// describe an absent tensor select nothing.
#[test]
fn serving_modes_select_the_build() {
    let base = RecurrentArgs::default();
    assert_eq!(base.build(), Build::Definition);
    let with = |f: &dyn Fn(&mut RecurrentArgs)| {
        let mut a = base;
        f(&mut a);
        a.build()
    };
    assert_eq!(with(&|a| a.serving.index_i64 = true), Build::Definition);
    assert_eq!(with(&|a| a.serving.beta_bf16 = true), Build::Definition);
    for f in [
        &(|a: &mut RecurrentArgs| a.serving.gates = GateMode::Log) as &dyn Fn(&mut RecurrentArgs),
        &|a| a.serving.gates = GateMode::Linear,
        &|a| a.serving.qk_l2norm = true,
        &|a| a.serving.pad = PadRule::NullSlot,
        &|a| a.serving.pool_indices = 0x1000,
        &|a| a.serving.has_initial = 0x1000,
        &|a| a.serving.num_accepted = 0x1000,
        &|a| a.serving.state_row_stride = 1 << 20,
    ] {
        assert_eq!(with(f), Build::Serving);
    }
    assert_eq!(
        with(&|a| a.serving.layout = StateLayout::KFirst),
        Build::KFirst
    );
    assert_eq!(
        with(&|a| {
            a.serving.layout = StateLayout::KFirst;
            a.serving.qk_l2norm = true;
        }),
        Build::KFirst
    );
}

#[test]
fn batch_ranges_pick_the_documented_kernels() {
    let d = |b, st| pick(&shape(Op::Decode, b, 1, st));
    use StateDtype::{BF16, F32};
    assert_eq!(d(1, F32), "gdn_recurrent_f32_t1_v4r2w8");
    assert_eq!(d(3, F32), "gdn_recurrent_f32_t1_v4r2w4");
    assert_eq!(d(12, F32), "gdn_recurrent_f32_t1_v4r2w4");
    assert_eq!(d(13, F32), "gdn_recurrent_f32_t1_v8r4w4");
    assert_eq!(d(25, F32), "gdn_recurrent_f32_t1_v8r4w1_lin");
    assert_eq!(d(24, BF16), "gdn_recurrent_bf16_t1_v8r2w4");
    assert_eq!(d(96, BF16), "gdn_recurrent_bf16_t1_v8r4w2");
    assert_eq!(d(97, BF16), "gdn_recurrent_bf16_t1_v8r4w4_lin");
    let m = |b, st| pick(&shape(Op::Mtp, b, 8, st));
    assert_eq!(m(127, F32), "gdn_recurrent_f32_tn_v8r4w2");
    assert_eq!(m(128, F32), "gdn_recurrent_f32_tn_v8r4w2_lin");
    assert_eq!(m(31, BF16), "gdn_recurrent_bf16_tn_v4r4w2");
    assert_eq!(m(32, BF16), "gdn_recurrent_bf16_tn_v4r4w2_lin");
}

#[test]
fn equivalent_batch_scales_with_heads_and_sms() {
    assert_eq!(equivalent_batch(3, 8, 132), 3);
    assert_eq!(equivalent_batch(3, 16, 132), 6);
    assert_eq!(equivalent_batch(1, 4, 132), 1); // rounds up
    assert_eq!(equivalent_batch(3, 8, 66), 6);
    // qk8_v16 at B = 7 is B = 14 of qk4_v8: past the 3..12 range
    let s = Shape {
        num_q_heads: 8,
        num_v_heads: 16,
        ..shape(Op::Decode, 7, 1, StateDtype::F32)
    };
    assert_eq!(pick(&s), "gdn_recurrent_f32_t1_v8r4w4");
    let half = DeviceCaps {
        sm_count: 66,
        ..H100
    };
    let s = shape(Op::Decode, 7, 1, StateDtype::F32);
    assert_eq!(
        select::choose(&s, &half, None).unwrap().variant.name,
        "gdn_recurrent_f32_t1_v8r4w4"
    );
}

#[test]
fn table_kernels_are_registered_and_hot_and_every_hot_recurrent_kernel_is_reachable() {
    for (family, st, _, k) in RECURRENT_TABLE.iter().chain(RECURRENT_KFIRST_TABLE) {
        let v = registry::find(k).unwrap_or_else(|| panic!("{k} not registered"));
        assert!(v.hot && v.family == *family && v.state == *st, "{k}");
    }
    for (_, _, _, k) in RECURRENT_TABLE {
        assert!(serving_build(k).hot, "{k}");
    }
    for v in VARIANTS
        .iter()
        .filter(|v| v.hot && matches!(v.family, Family::Decode | Family::Mtp))
    {
        let reachable = RECURRENT_TABLE
            .iter()
            .chain(RECURRENT_KFIRST_TABLE)
            .any(|r| r.3 == v.name || format!("{}{SERVING_SUFFIX}", r.3) == v.name);
        assert!(reachable, "hot {} unreachable", v.name);
    }
}
