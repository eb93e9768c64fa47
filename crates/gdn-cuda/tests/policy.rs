//! Kernel choice (GPU-free): every threshold of `policy::choose`, every rejection, the override.

use gdn_core::Op;
use gdn_cuda::policy::{
    choose, equivalent_batch, DeviceCaps, Rejection, Shape, MAX_GRID_X, RECURRENT_TABLE,
};
use gdn_cuda::registry::{self, Family, StateDtype, VARIANTS};

const H100: DeviceCaps = DeviceCaps::HOPPER_132;

fn shape(op: Op, n: usize, t: usize, state: StateDtype) -> Shape {
    Shape {
        op,
        num_q_heads: 4,
        num_v_heads: 8,
        head_size: 128,
        num_seqs: n,
        seq_len: t,
        total_tokens: n * t.max(1),
        state,
    }
}

fn pick(s: &Shape) -> &'static str {
    choose(s, &H100, None).unwrap().variant.name
}

/// Every row of the recurrent table at its boundary (qk4_v8, 132 SMs: equivalent batch = B).
#[test]
fn recurrent_table_boundaries() {
    for (family, st, max_b, kernel) in RECURRENT_TABLE {
        let (op, t) = match family {
            Family::Decode => (Op::Decode, 1),
            Family::Mtp => (Op::Mtp, 4),
            Family::Prefill => unreachable!(),
        };
        if *max_b == u64::MAX {
            assert_eq!(pick(&shape(op, 100_000, t, *st)), *kernel);
            continue;
        }
        let b = *max_b as usize;
        assert_eq!(
            pick(&shape(op, b, t, *st)),
            *kernel,
            "{family:?} {st:?} B={b}"
        );
        assert_ne!(
            pick(&shape(op, b + 1, t, *st)),
            *kernel,
            "{family:?} {st:?} B={}",
            b + 1
        );
    }
}

#[test]
fn documented_batch_ranges() {
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
        choose(&s, &half, None).unwrap().variant.name,
        "gdn_recurrent_f32_t1_v8r4w4"
    );
}

#[test]
fn prefill_thresholds() {
    // BV = largest with N * 8 * 128/BV >= 0.9 * 132 = 118.8
    let p = |n| pick(&shape(Op::Prefill, n, 0, StateDtype::F32));
    assert_eq!(p(1), "gdn_prefill_f32_bv16"); // 64 CTAs
    assert_eq!(p(2), "gdn_prefill_f32_bv16"); // bv16 128 >= 118.8, bv32 64
    assert_eq!(p(3), "gdn_prefill_f32_bv16"); // bv32 96
    assert_eq!(p(4), "gdn_prefill_f32_bv32"); // bv32 128
    assert_eq!(p(7), "gdn_prefill_f32_bv32"); // bv64 112
    assert_eq!(p(8), "gdn_prefill_f32_bv64"); // bv64 128
    assert_eq!(p(14), "gdn_prefill_f32_bv64"); // bv128 112
    assert_eq!(p(15), "gdn_prefill_f32_bv128"); // bv128 120
    assert_eq!(
        pick(&shape(Op::Prefill, 57, 0, StateDtype::BF16)),
        "gdn_prefill_bf16_bv128"
    );
    // an empty launch (no sequences) still has a variant, with nothing to launch
    assert!(
        choose(&shape(Op::Prefill, 0, 0, StateDtype::F32), &H100, None)
            .unwrap()
            .is_empty()
    );
}

#[test]
fn policy_kernels_are_registered_and_hot_and_every_hot_kernel_is_reachable() {
    for (family, st, _, k) in RECURRENT_TABLE {
        let v = registry::find(k).unwrap_or_else(|| panic!("{k} not registered"));
        assert!(v.hot && v.family == *family && v.state == *st, "{k}");
    }
    for v in VARIANTS
        .iter()
        .filter(|v| v.hot && v.family != Family::Prefill)
    {
        assert!(
            RECURRENT_TABLE.iter().any(|r| r.3 == v.name),
            "hot {} unreachable",
            v.name
        );
    }
}

#[test]
fn grids_match_the_kernel_mappings() {
    let c = choose(&shape(Op::Decode, 3, 1, StateDtype::F32), &H100, None).unwrap();
    assert_eq!(c.grid, (3 * 16, 4, 2)); // v4r2w4: (16B, H, HV/H)
    assert_eq!(c.block, 128);
    let c = choose(&shape(Op::Decode, 64, 1, StateDtype::F32), &H100, None).unwrap();
    assert_eq!(c.grid, (16 * 64 * 8, 1, 1)); // v8r4w1_lin: (16*B*HV, 1, 1)
    assert_eq!(c.block, 32);
    let c = choose(&shape(Op::Prefill, 5, 0, StateDtype::F32), &H100, None).unwrap();
    assert_eq!(c.grid, (5 * 8 * c.variant.ctas_per_head, 1, 1));
    assert_eq!(c.dyn_smem, c.variant.dyn_smem);
    // nothing to launch
    let c = choose(&shape(Op::Decode, 0, 1, StateDtype::F32), &H100, None).unwrap();
    assert!(c.is_empty());
}

#[test]
fn rejections_name_the_reason() {
    let s = shape(Op::Decode, 1, 1, StateDtype::F32);
    let a100 = DeviceCaps { cc: (8, 0), ..H100 };
    let e = choose(&s, &a100, None).unwrap_err();
    assert_eq!(e, Rejection::Arch { cc: (8, 0) });
    assert!(e.to_string().contains("8.0"));
    assert!(matches!(
        choose(
            &Shape {
                head_size: 64,
                ..s.clone()
            },
            &H100,
            None
        ),
        Err(Rejection::HeadSize { got: 64 })
    ));
    assert!(matches!(
        choose(
            &Shape {
                num_v_heads: 6,
                ..s.clone()
            },
            &H100,
            None
        ),
        Err(Rejection::HeadRatio { .. })
    ));
    assert!(matches!(
        choose(
            &Shape {
                seq_len: 2,
                ..s.clone()
            },
            &H100,
            None
        ),
        Err(Rejection::SeqLen { .. })
    ));
    // grid.x = B * 8 > 2^31 - 1
    let huge = shape(
        Op::Decode,
        (MAX_GRID_X / 8 + 1) as usize,
        1,
        StateDtype::F32,
    );
    assert!(matches!(
        choose(&huge, &H100, None),
        Err(Rejection::Grid { dim: "x", .. })
    ));
    // grid.y = H > 65535 for a head-major variant (the automatic choice goes linear there)
    let many_heads = Shape {
        num_q_heads: 70_000,
        num_v_heads: 70_000,
        ..s.clone()
    };
    assert!(matches!(
        choose(&many_heads, &H100, Some("gdn_recurrent_f32_t1_v4r2w8")),
        Err(Rejection::Grid { dim: "y", .. })
    ));
    assert!(choose(&many_heads, &H100, None).is_ok());
    // too little shared memory for the prefill kernels
    let tiny = DeviceCaps {
        max_dyn_smem: 48 * 1024,
        ..H100
    };
    assert!(matches!(
        choose(&shape(Op::Prefill, 1, 0, StateDtype::F32), &tiny, None),
        Err(Rejection::SharedMemory { .. })
    ));
}

#[test]
fn override_is_checked() {
    let s = shape(Op::Decode, 64, 1, StateDtype::F32);
    let c = choose(&s, &H100, Some("gdn_recurrent_f32_t1_v4r2w8")).unwrap();
    assert_eq!(c.variant.name, "gdn_recurrent_f32_t1_v4r2w8");
    assert_eq!(c.grid, (64 * 8, 4, 2));
    assert!(matches!(
        choose(&s, &H100, Some("nope")),
        Err(Rejection::Override { .. })
    ));
    assert!(matches!(
        choose(&s, &H100, Some("gdn_recurrent_bf16_t1_v8r2w4")),
        Err(Rejection::Override { .. })
    ));
    assert!(matches!(
        choose(&s, &H100, Some("gdn_prefill_f32_bv16")),
        Err(Rejection::Override { .. })
    ));
}

#[test]
fn every_family_and_dtype_has_a_hot_variant() {
    for f in [Family::Decode, Family::Mtp, Family::Prefill] {
        for st in [StateDtype::F32, StateDtype::BF16] {
            assert!(
                VARIANTS
                    .iter()
                    .any(|v| v.family == f && v.state == st && v.hot),
                "{f:?} {st:?}"
            );
        }
    }
}
