//! Decode / MTP kernel choice (GPU-free): the recurrent table at its boundaries, its scaling to other head and SM
//! counts, and its kernels' presence in the registry.

mod common;

use common::{pick, shape, H100};
use gdn_core::Op;
use gdn_cuda::kernels::registry::{self, Family, StateDtype, VARIANTS};
use gdn_cuda::plan::decode::{equivalent_batch, RECURRENT_TABLE};
use gdn_cuda::plan::{select, DeviceCaps, Shape};

/// Every row of the recurrent table at its boundary (qk4_v8, 132 SMs: equivalent batch = B).
#[test]
fn every_table_row_holds_up_to_its_boundary_and_not_past_it() {
    for (family, st, max_b, kernel) in RECURRENT_TABLE {
        let (op, t) = match family {
            Family::Decode => (Op::Decode, 1),
            Family::Mtp => (Op::Mtp, 4),
            _ => unreachable!("prefill families are not in the recurrent table"),
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
    for (family, st, _, k) in RECURRENT_TABLE {
        let v = registry::find(k).unwrap_or_else(|| panic!("{k} not registered"));
        assert!(v.hot && v.family == *family && v.state == *st, "{k}");
    }
    for v in VARIANTS
        .iter()
        .filter(|v| v.hot && matches!(v.family, Family::Decode | Family::Mtp))
    {
        assert!(
            RECURRENT_TABLE.iter().any(|r| r.3 == v.name),
            "hot {} unreachable",
            v.name
        );
    }
}
