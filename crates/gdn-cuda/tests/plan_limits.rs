//! Limits and rejections (GPU-free): grids follow the kernels' mappings and stay within the hardware's limits, every
//! launch fits the device's shared memory or the call is rejected naming why, and the calls no kernel can run are
//! rejected with the reason.

mod common;

use common::{plan, pre, shape, H100};
use gdn_core::Op;
use gdn_cuda::kernels::registry::{self, prefill64, Family, StateDtype, VARIANTS};
use gdn_cuda::plan::prefill::{self, DeviceRoute, PrefillPlan};
use gdn_cuda::plan::{select, DeviceCaps, PlanKind, Rejection, Shape, MAX_GRID_X, MAX_GRID_YZ};

#[test]
fn grids_match_the_kernel_mappings() {
    let c = select::choose(&shape(Op::Decode, 3, 1, StateDtype::F32), &H100, None).unwrap();
    assert_eq!(c.grid, (3 * 16, 4, 2)); // v4r2w4: (16B, H, HV/H)
    assert_eq!(c.block, 128);
    let c = select::choose(&shape(Op::Decode, 64, 1, StateDtype::F32), &H100, None).unwrap();
    assert_eq!(c.grid, (16 * 64 * 8, 1, 1)); // v8r4w1_lin: (16*B*HV, 1, 1)
    assert_eq!(c.block, 32);
    let c = select::choose(&shape(Op::Prefill, 5, 0, StateDtype::F32), &H100, None).unwrap();
    assert_eq!(c.grid, (5 * 8 * c.variant.ctas_per_head, 1, 1));
    assert_eq!(c.dyn_smem, c.variant.dyn_smem);
    // nothing to launch
    let c = select::choose(&shape(Op::Decode, 0, 1, StateDtype::F32), &H100, None).unwrap();
    assert!(c.is_empty());
}

#[test]
fn every_prefill_launch_fits_the_grid_limits_and_the_shared_memory() {
    // whatever plan is chosen or forced: within gridDim.x ≤ 2³¹−1, y/z ≤ 65 535, and the opt-in shared memory
    let mut checked = 0;
    for n in [0usize, 1, 2, 5, 40, 257] {
        for t in [0usize, 1, 100, 8192, 65_536] {
            for hv in [2usize, 3, 8, 32] {
                for hint in [0, t] {
                    let s = Shape {
                        max_seq_len: hint,
                        ..pre(n, t, hv, StateDtype::F32)
                    };
                    let forces = [None, Some("host"), Some("gdn_prefill64_cp_pass3w_f32")]
                        .into_iter()
                        .chain(DeviceRoute::FORCED.map(|r| Some(r.override_name())));
                    for force in forces {
                        let Ok(p) = prefill::choose(&s, &H100, force) else {
                            continue;
                        };
                        for c in p.launches() {
                            assert!(
                                c.grid.0 as u64 <= MAX_GRID_X
                                    && c.grid.1 as u64 <= MAX_GRID_YZ
                                    && c.grid.2 as u64 <= MAX_GRID_YZ,
                                "{s:?} {force:?}: {} {:?}",
                                c.variant.name,
                                c.grid
                            );
                            assert!(c.dyn_smem <= H100.max_dyn_smem, "{}", c.variant.name);
                            assert_eq!(c.dyn_smem, c.variant.dyn_smem);
                        }
                        checked += 1;
                    }
                }
            }
        }
    }
    assert!(checked > 500, "{checked}");
}

#[test]
fn rejections_name_the_reason() {
    let s = shape(Op::Decode, 1, 1, StateDtype::F32);
    let t4 = DeviceCaps {
        cc: (7, 5),
        arch: gdn_cuda::kernels::registry::Arch::portable(75),
        ..H100
    };
    let e = select::choose(&s, &t4, None).unwrap_err();
    assert_eq!(e, Rejection::Arch { cc: (7, 5) });
    assert!(e.to_string().contains("7.5") && e.to_string().contains("8.0"));
    assert!(matches!(
        select::choose(
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
        select::choose(
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
        select::choose(
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
        select::choose(&huge, &H100, None),
        Err(Rejection::Grid { dim: "x", .. })
    ));
    // grid.y = H > 65535 for a head-major variant (the automatic choice goes linear there)
    let many_heads = Shape {
        num_q_heads: 70_000,
        num_v_heads: 70_000,
        ..s.clone()
    };
    assert!(matches!(
        select::choose(&many_heads, &H100, Some("gdn_recurrent_f32_t1_v4r2w8")),
        Err(Rejection::Grid { dim: "y", .. })
    ));
    assert!(select::choose(&many_heads, &H100, None).is_ok());
    // too little shared memory for the prefill kernels
    let tiny = DeviceCaps {
        max_dyn_smem: 48 * 1024,
        ..H100
    };
    assert!(matches!(
        select::choose(&shape(Op::Prefill, 1, 0, StateDtype::F32), &tiny, None),
        Err(Rejection::SharedMemory { .. })
    ));
}

#[test]
fn every_family_and_dtype_has_a_hot_variant() {
    for f in [
        Family::Decode,
        Family::Mtp,
        Family::Prefill,
        Family::Prefill64Walk,
    ] {
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

#[test]
fn prefill64_prep_is_registered_once() {
    let preps: Vec<_> = VARIANTS
        .iter()
        .filter(|v| v.family == Family::Prefill64Prep)
        .collect();
    assert_eq!(preps.len(), 1);
    assert!(preps[0].hot);
}

#[test]
fn empty_prefill_launches_nothing_and_needs_no_workspace() {
    use StateDtype::F32;
    // N = 0 (T = 0): fused, empty
    let p = plan(&pre(0, 0, 8, F32));
    assert_eq!(p.kind(), PlanKind::Fused);
    assert!(p.is_empty());
    // forced chunk64 with N = 0: nothing to launch, no workspace
    let p = prefill::choose(&pre(0, 0, 8, F32), &H100, Some("gdn_prefill64_walk_f32")).unwrap();
    assert_eq!(p.kind(), PlanKind::Chunk64);
    assert!(p.is_empty());
    assert_eq!(p.workspace_bytes(), 0);
    // T = 0 with sequences: the fused kernel still writes their (zero) states
    let p = plan(&pre(3, 0, 8, F32));
    assert_eq!(p.kind(), PlanKind::Fused);
    assert!(!p.is_empty());
    // an empty launch (no sequences) still has a variant, with nothing to launch
    assert!(
        select::choose(&shape(Op::Prefill, 0, 0, StateDtype::F32), &H100, None)
            .unwrap()
            .is_empty()
    );
}

#[test]
fn odd_value_heads_run_only_on_chunk64() {
    use StateDtype::F32;
    // qk1_v3: even a short call goes to chunk64 (the fused kernels need an even HV)
    let s = pre(2, 20, 3, F32);
    let p = plan(&s);
    assert_eq!(p.kind(), PlanKind::Chunk64);
    assert!(p.why().contains("odd"), "{}", p.why());
    let (t, n) = (20, 2);
    assert_eq!(p.launches()[0].grid, ((t / 64 + n + 1) * 3, 1, 1));
    // forcing the fused plan, or a chunk64 that does not fit, is refused with the reason
    assert!(matches!(
        prefill::choose(&s, &H100, Some("gdn_prefill_f32_bv16")),
        Err(Rejection::OddValueHeads { v: 3 })
    ));
    assert!(matches!(
        select::choose(&s, &H100, None),
        Err(Rejection::OddValueHeads { v: 3 })
    ));
    // past the workspace cap (10 GiB on the test H100): 2^25 tokens x 3 heads need ~27 GB
    let huge = pre(1, 1 << 25, 3, F32);
    assert!(matches!(
        prefill::choose(&huge, &H100, None),
        Err(Rejection::OddValueHeads { v: 3 })
    ));
}

#[test]
fn chunk64_and_cp_need_their_shared_memory() {
    use StateDtype::F32;
    // a device with room for the prep (36384 bytes) but not the chunk64 walk (126992)
    let small = DeviceCaps {
        max_dyn_smem: 120_000,
        ..H100
    };
    assert!(prefill64::WALK_SMEM > small.max_dyn_smem && prefill64::PREP_SMEM < small.max_dyn_smem);
    let long = pre(1, 65_536, 8, F32);
    assert!(matches!(
        prefill::choose(&long, &small, Some("gdn_prefill64_prep")),
        Err(Rejection::SharedMemory {
            kernel: "gdn_prefill64_walk_f32",
            ..
        })
    ));
    // the automatic rule would run this shape context parallel (walk-sized kernels too): it falls back to
    // the fused plan on the tiles that fit, the compact ones (85136 and 88760 bytes)
    assert_eq!(plan(&long).kind(), PlanKind::ContextParallelWide);
    let fallback = prefill::choose(&long, &small, None).unwrap();
    let PrefillPlan::Fused { variant } = &fallback else {
        panic!("{:?}", fallback.kind())
    };
    assert!(
        registry::is_compact(variant.variant),
        "{}",
        variant.variant.name
    );
    // with room for no tile at all, the rejection names the smallest
    let tiny = DeviceCaps {
        max_dyn_smem: 80_000,
        ..H100
    };
    assert!(matches!(
        prefill::choose(&long, &tiny, None),
        Err(Rejection::SharedMemory {
            kernel: "gdn_prefill_f32_bv64_np2",
            need: 85_136,
            ..
        })
    ));
    // room for the one-warpgroup walks (126992) and the scan (147472) but not the two-warpgroup passes
    // (152592): the automatic rule runs the one-warpgroup cp instead
    let mid = DeviceCaps {
        max_dyn_smem: 150_000,
        ..H100
    };
    let p = prefill::choose(&long, &mid, None).unwrap();
    assert_eq!(p.kind(), PlanKind::ContextParallel, "{}", p.why());
    assert!(matches!(
        prefill::choose(&long, &mid, Some("gdn_prefill64_cp_pass3w_f32")),
        Err(Rejection::SharedMemory {
            kernel: "gdn_prefill64_cp_pass1w_f32",
            ..
        })
    ));
    // the registry's numbers fit a 132-SM Hopper
    const { assert!(prefill64::WALK2_SMEM <= H100.max_dyn_smem) };
    const { assert!(prefill64::WALK_SMEM <= H100.max_dyn_smem) };
    const { assert!(prefill64::PREP_SMEM <= H100.max_dyn_smem) };
}
