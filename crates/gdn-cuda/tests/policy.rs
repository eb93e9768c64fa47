//! Kernel choice (GPU-free): every threshold of `policy::choose` and `policy::choose_prefill`, every
//! rejection, the override.

use gdn_core::Op;
use gdn_cuda::policy::{
    choose, choose_prefill, equivalent_batch, prefill_override_for, workspace_cap, Choice,
    DeviceCaps, PlanKind, PrefillPlan, Rejection, Shape, MAX_GRID_X, RECURRENT_TABLE,
};
use gdn_cuda::registry::{self, prefill64, Family, StateDtype, VARIANTS};

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
        max_seq_len: 0,
        state,
    }
}

fn pick(s: &Shape) -> &'static str {
    choose(s, &H100, None).unwrap().variant.name
}

/// The fused tile `choose` picks for `s`, by the name of its plain build (the longest-first and split swaps aside; they
/// have their own test, `fused_tiles_run_longest_first_where_a_second_wave_can_wait`).
fn tile(s: &Shape) -> &'static str {
    let v = choose(s, &H100, None).unwrap().variant;
    match v.longest_first || registry::is_split(v) {
        true => {
            registry::candidates(v.family, v.state)
                .find(|w| w.ctas_per_head == v.ctas_per_head)
                .expect("a longest-first tile has a plain build")
                .name
        }
        false => v.name,
    }
}

/// Every row of the recurrent table at its boundary (qk4_v8, 132 SMs: equivalent batch = B).
#[test]
fn recurrent_table_boundaries() {
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
fn fused_tile_without_a_length_hint() {
    // N sequences of 1024 tokens on average: BV = largest with N * 8 * 128/BV >= 0.9 * 132 = 118.8 (a
    // hedge against skew the host cannot see)
    let p = |n: usize, st| {
        tile(&Shape {
            total_tokens: n * 1024,
            ..shape(Op::Prefill, n, 0, st)
        })
    };
    use StateDtype::{BF16, F32};
    assert_eq!(p(1, F32), "gdn_prefill_f32_bv16"); // 64 CTAs
    assert_eq!(p(2, F32), "gdn_prefill_f32_bv16"); // bv16 128 >= 118.8, bv32 64
    assert_eq!(p(3, F32), "gdn_prefill_f32_bv16"); // bv32 96
    assert_eq!(p(4, F32), "gdn_prefill_f32_bv32"); // bv32 128
    assert_eq!(p(7, F32), "gdn_prefill_f32_bv32"); // bv64 112
    assert_eq!(p(8, F32), "gdn_prefill_f32_bv64"); // bv64 128
    assert_eq!(p(14, F32), "gdn_prefill_f32_bv64"); // bv128 112
    assert_eq!(p(15, F32), "gdn_prefill_f32_bv128"); // bv128 120
    assert_eq!(p(57, BF16), "gdn_prefill_bf16_bv128");
    // tiny calls, where no split of the tokens changes the best tile: that tile (one wave of CTAs; measured
    // 5 sequences of 9 tokens: bv64 6.8 us, the fill rule's bv32 10.0)
    let tiny = |n, t| {
        tile(&Shape {
            total_tokens: t,
            ..shape(Op::Prefill, n, 0, F32)
        })
    };
    assert_eq!(tiny(5, 9), "gdn_prefill_f32_bv64");
    assert_eq!(tiny(14, 14), "gdn_prefill_f32_bv128");
}

#[test]
fn fused_tile_follows_the_cost_model() {
    // with a hint: the tile with the smallest cost::fused_us: wide tiles when there is work for every SM,
    // narrow ones when a long chain dominates (each row is the measured-best tile on the H200,
    // results/prefill_plans.md); without one the anchors get the same tiles
    let p = |n, t, hint, st| {
        tile(&Shape {
            total_tokens: t,
            max_seq_len: hint,
            ..shape(Op::Prefill, n, 0, st)
        })
    };
    use StateDtype::{BF16, F32};
    for (n, t, bv) in [
        (1, 128, 16),
        (1, 1024, 16),
        (4, 8192, 32),
        (8, 65_536, 64),
        (32, 8192, 128),
        (30, 8120, 128),
        (64, 65_536, 128),
    ] {
        let want = format!("gdn_prefill_f32_bv{bv}");
        assert_eq!(p(n, t, t.div_ceil(n), F32), want, "{n}x{t} hinted");
        assert_eq!(p(n, t, 0, F32), want, "{n}x{t}");
    }
    assert_eq!(p(57, 57 * 150, 150, BF16), "gdn_prefill_bf16_bv128");
    // the same totals with one long sequence (the caller's hint): narrower tiles
    // (session 28: bv128 runs its long sequences split; session 29: the split chain at its own constant, 4% slower
    // than bv64's, as measured: prefill_00 bv64 longest first 86.7 us, split bv128 92.4)
    assert_eq!(p(40, 8192, 1972, F32), "gdn_prefill_f32_bv64");
    assert_eq!(p(53, 8192, 4021, F32), "gdn_prefill_f32_bv32"); // 205 vs 312
                                                                // a hint below the average length is no information; above T it is clamped
    assert_eq!(p(32, 8192, 1, F32), p(32, 8192, 256, F32));
    assert_eq!(p(1, 1024, 1 << 20, F32), p(1, 1024, 1024, F32));
    // an empty launch (no sequences) still has a variant, with nothing to launch
    assert!(
        choose(&shape(Op::Prefill, 0, 0, StateDtype::F32), &H100, None)
            .unwrap()
            .is_empty()
    );
}

#[test]
fn fused_tiles_run_longest_first_where_a_second_wave_can_wait() {
    use gdn_cuda::policy::{fused_longest_first, LONGEST_FIRST_MAX_N, LONGEST_FIRST_MIN_TOKENS};
    let p = |n: usize, t: usize, hint: usize| {
        pick(&Shape {
            total_tokens: t,
            max_seq_len: hint,
            ..shape(Op::Prefill, n, 0, StateDtype::F32)
        })
    };
    // the "30 mixed" anchor (longest 700 tokens, hinted): bv128, 240 CTAs on 132 SMs; 700 > T·HV/SMs = 492 tokens, so
    // the split build (session 28: prefill.cu v14)
    assert_eq!(p(30, 8120, 700), "gdn_prefill_f32_bv128_sp");
    // ... and with a longest sequence it would not split, the longest-first build
    assert_eq!(p(30, 8120, 480), "gdn_prefill_f32_bv128_lf");
    // no hint: the lengths may be skewed (the kernel splits only what is longer than the threshold)
    assert_eq!(p(30, 8120, 0), "gdn_prefill_f32_bv128_sp");
    // hinted equal lengths (64x1024, 32x256): nothing to reorder, the plain kernel
    assert_eq!(p(64, 65_536, 1024), "gdn_prefill_f32_bv128");
    assert_eq!(p(32, 8192, 256), "gdn_prefill_f32_bv128");
    // narrow tiles (bv16, bv32) have no longest-first build
    assert_eq!(p(53, 8192, 4021), "gdn_prefill_f32_bv32");
    let bf16 = Shape {
        total_tokens: 57 * 150,
        ..shape(Op::Prefill, 57, 0, StateDtype::BF16)
    };
    assert_eq!(pick(&bf16), "gdn_prefill_bf16_bv128_sp");
    // short sequences only (28 sequences, 369 tokens, longest 100): the ranking's cost, no gain
    assert_eq!(p(28, 369, 100), "gdn_prefill_f32_bv128");
    // (189 > the split threshold, 128: prefill_78 measured 21.2 us longest first, 19.9 split; H200, session 28)
    assert_eq!(p(28, 369, 189), "gdn_prefill_f32_bv128_sp");
    // the rule itself: 2..=128 sequences, a grid wider than the GPU, a longest sequence that can reach 128 tokens,
    // lengths not known to be equal
    let s = |n: usize, hint: usize| Shape {
        total_tokens: n * 100,
        max_seq_len: hint,
        ..shape(Op::Prefill, n, 0, StateDtype::F32)
    };
    let min = LONGEST_FIRST_MIN_TOKENS as usize;
    assert!(fused_longest_first(&s(2, min), 133, 132));
    assert!(!fused_longest_first(&s(2, min), 132, 132)); // one wave: nothing waits
    assert!(!fused_longest_first(&s(2, min - 1), 133, 132)); // every chain short
    assert!(!fused_longest_first(&s(1, 0), 1000, 132));
    let max = LONGEST_FIRST_MAX_N as usize;
    assert!(fused_longest_first(&s(max, 0), 1000, 132));
    assert!(!fused_longest_first(&s(max + 1, 0), 1000, 132));
    // no hint: T bounds the longest sequence
    assert!(fused_longest_first(&s(2, 0), 1000, 132)); // T = 200
    assert!(!fused_longest_first(
        &Shape {
            total_tokens: min - 1,
            ..s(2, 0)
        },
        1000,
        132
    ));
    // hinted equal lengths: every sequence ceil(T/N) long
    let long = |n: usize, hint: usize| Shape {
        total_tokens: n * 1000,
        ..s(n, hint)
    };
    assert!(!fused_longest_first(&long(40, 1000), 1000, 132));
    assert!(fused_longest_first(&long(40, 1001), 1000, 132));
    // every longest-first build is a plain tile's: same launch, same module
    for v in VARIANTS.iter().filter(|v| v.longest_first) {
        let plain = registry::candidates(v.family, v.state)
            .find(|w| w.ctas_per_head == v.ctas_per_head)
            .unwrap();
        assert_eq!(
            registry::longest_first_of(plain).map(|w| w.name),
            Some(v.name)
        );
        assert_eq!(
            (v.block, v.dyn_smem, v.grid, v.module.id, v.family),
            (
                plain.block,
                plain.dyn_smem,
                plain.grid,
                plain.module.id,
                plain.family
            )
        );
        assert_eq!(v.name, format!("{}_lf", plain.name));
    }
}

#[test]
fn policy_kernels_are_registered_and_hot_and_every_hot_kernel_is_reachable() {
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

// ---- prefill plans (fused vs chunk64) ----

/// A prefill shape: `n` sequences, `t` tokens in all, `hv` value heads (H = 1 unless hv is a multiple of 4).
fn pre(n: usize, t: usize, hv: usize, state: StateDtype) -> Shape {
    Shape {
        op: Op::Prefill,
        num_q_heads: if hv.is_multiple_of(4) { hv / 2 } else { 1 },
        num_v_heads: hv,
        head_size: 128,
        num_seqs: n,
        seq_len: 0,
        total_tokens: t,
        max_seq_len: 0,
        state,
    }
}

/// The host's own plan (`GDN_KERNEL=host`: without a length hint, the equal-length rule these tests pin; the device
/// plan that replaces it for some blind calls is tested in tests/device_plan.rs).
fn plan(s: &Shape) -> PrefillPlan {
    choose_prefill(s, &H100, Some("host")).unwrap()
}

fn kind(s: &Shape) -> PlanKind {
    plan(s).kind()
}

/// Force the chunk64 plan (the automatic rule only picks it for an odd HV).
fn plan64(s: &Shape) -> Result<PrefillPlan, Rejection> {
    let walk = match s.state {
        StateDtype::F32 => "gdn_prefill64_walk_f32",
        StateDtype::BF16 => "gdn_prefill64_walk_bf16",
    };
    choose_prefill(s, &H100, Some(walk))
}

#[test]
fn automatic_prefill_is_fused_for_even_value_heads() {
    use StateDtype::{BF16, F32};
    // chunk64 measured slower on these (results/prefill64.md): even HV is fused unless few long
    // sequences make it context parallel (next test). (4x2048 left this list in session 19: the v9 plain walk ties
    // fused bv32 there, 77.1 vs 77.2 us on the H200, and the model picks chunk64; checked below.)
    for s in [
        pre(1, 128, 8, F32),
        pre(30, 8120, 8, F32),
        pre(64, 64 * 1024, 8, BF16),
    ] {
        let p = plan(&s);
        assert_eq!(p.kind(), PlanKind::Fused, "{s:?}");
        assert_eq!(p.workspace_bytes(), 0);
        assert!(p.why().contains("fused"), "{}", p.why());
    }
    assert_eq!(plan(&pre(4, 4 * 2048, 8, BF16)).kind(), PlanKind::Chunk64);
    // 1x1024 (16 chunks) left the list in session 20: with the v10 scan the model puts cp (4 segments of 4 chunks)
    // 2% under fused bv16, a measured tie on the H200 (cp 34.7 us in the harness,
    // results/2026-11-21-h200-s20-short-cp-cpab.log; fused bv16 34.1 in session 19's bench); at 1x1536 and 1x2048
    // cp measures 41.2 and 47.6 us, the one-segment chunk64 plan 47.1 and 59.2
    let p = plan(&pre(1, 1024, 8, F32));
    assert_eq!(p.kind(), PlanKind::ContextParallel, "{}", p.why());
}

#[test]
fn chunk64_workspace_cap_and_formula() {
    use StateDtype::F32;
    let per_slot = 8 * prefill64::WS_CHUNK_BYTES; // HV = 8
    let order = prefill64::WORKSPACE_ALIGN; // the walk's order: one sequence's 8 bytes, rounded up to 256
    let cap = workspace_cap(&H100);
    assert_eq!(cap, 10 << 30); // an eighth of 80 GB
    let max_slots = (cap - order) / per_slot;
    // slots = T/64 + N + 1 with N = 1: the largest T whose workspace fits
    let t_max = ((max_slots - 2) * 64 + 63) as usize;
    let p = plan64(&pre(1, t_max, 8, F32)).unwrap();
    assert_eq!(p.kind(), PlanKind::Chunk64);
    assert_eq!(p.workspace_bytes(), max_slots * per_slot + order);
    assert!(p.workspace_bytes() <= cap);
    let p = plan(&pre(1, t_max + 1, 8, F32));
    assert_eq!(p.kind(), PlanKind::Fused, "{}", p.why());
    assert_eq!(p.workspace_bytes(), 0);
    // forced past the cap: a rejection naming the bytes
    let e = choose_prefill(
        &pre(1, t_max + 1, 8, F32),
        &H100,
        Some("gdn_prefill64_walk_f32"),
    )
    .unwrap_err();
    assert_eq!(
        e,
        Rejection::Workspace {
            need: (max_slots + 1) * per_slot + order,
            max: cap
        }
    );
    assert!(e.to_string().contains("workspace"));
    // 64-bit all the way: millions of tokens, thousands of sequences, many heads
    let big = pre(4096, 4 << 20, 64, F32);
    assert_eq!(
        registry::prefill64_workspace_bytes(4 << 20, 4096, 64),
        (65_536 + 4096 + 1) * 64 * prefill64::WS_CHUNK_BYTES + 4096 * 8
    );
    assert_eq!(kind(&big), PlanKind::Fused);
    assert!(matches!(
        choose_prefill(&big, &H100, Some("gdn_prefill64_prep")),
        Err(Rejection::Workspace { need, .. }) if need > u32::MAX as u64
    ));
}

#[test]
fn chunk64_grids_and_launches() {
    use StateDtype::{BF16, F32};
    let (n, t, hv) = (3usize, 3 * 1000 + 7, 8usize);
    // 3 sequences of ~1000 tokens, forced
    let p = plan64(&pre(n, t, hv, BF16)).unwrap();
    let PrefillPlan::Chunk64 {
        prep,
        walk,
        workspace_bytes,
    } = &p
    else {
        panic!("expected chunk64: {p:?}");
    };
    let slots = (t / 64 + n + 1) as u32;
    assert_eq!(prep.variant.name, "gdn_prefill64_prep");
    assert_eq!(prep.grid, (slots * hv as u32, 1, 1)); // heads fastest: K/Q shared in L2
    assert_eq!((prep.block, prep.dyn_smem), (128, prefill64::PREP_SMEM));
    assert_eq!(walk.variant.name, "gdn_prefill64_walk_bf16");
    assert_eq!(
        walk.grid,
        ((n * hv) as u32 * prefill64::WALK_CTAS_PER_HEAD, 1, 1)
    );
    assert_eq!(prefill64::WALK_CTAS_PER_HEAD, 2); // one warpgroup per 64-row value half
    assert_eq!((walk.block, walk.dyn_smem), (128, prefill64::WALK_SMEM));
    assert_eq!(
        *workspace_bytes,
        slots as u64 * hv as u64 * prefill64::WS_CHUNK_BYTES + (n as u64 * 8).div_ceil(256) * 256
    );
    let names: Vec<_> = p.launches().iter().map(|c| c.variant.name).collect();
    assert_eq!(names, ["gdn_prefill64_prep", "gdn_prefill64_walk_bf16"]);
    assert_eq!(
        p.label(),
        "chunk64 gdn_prefill64_prep+gdn_prefill64_walk_bf16"
    );
    assert_eq!(
        plan64(&pre(1, 4096, 8, F32)).unwrap().launches()[1]
            .variant
            .name,
        "gdn_prefill64_walk_f32"
    );
    // the fused plan is today's single kernel, with no workspace
    let f = plan(&pre(5, 100, 8, F32));
    assert_eq!(f.launches().len(), 1);
    assert_eq!(f.workspace_bytes(), 0);
    assert!(f.label().starts_with("fused gdn_prefill_f32_bv"));
    assert_eq!(
        f,
        PrefillPlan::Fused {
            variant: Choice {
                why: f.why().to_string(),
                ..choose(&pre(5, 100, 8, F32), &H100, None).unwrap()
            }
        }
    );
}

#[test]
fn empty_prefill_launches_nothing_and_needs_no_workspace() {
    use StateDtype::F32;
    // N = 0 (T = 0): fused, empty, as before
    let p = plan(&pre(0, 0, 8, F32));
    assert_eq!(p.kind(), PlanKind::Fused);
    assert!(p.is_empty());
    // forced chunk64 with N = 0: nothing to launch, no workspace
    let p = choose_prefill(&pre(0, 0, 8, F32), &H100, Some("gdn_prefill64_walk_f32")).unwrap();
    assert_eq!(p.kind(), PlanKind::Chunk64);
    assert!(p.is_empty());
    assert_eq!(p.workspace_bytes(), 0);
    // T = 0 with sequences: the fused kernel still writes their (zero) states
    let p = plan(&pre(3, 0, 8, F32));
    assert_eq!(p.kind(), PlanKind::Fused);
    assert!(!p.is_empty());
}

#[test]
fn context_parallel_for_few_long_sequences() {
    use StateDtype::{BF16, F32};
    // (N, T, HV) -> (segments, chunks per segment, warpgroups per walk CTA): the cheapest cost::cp_us over
    // both walk forms and the G with chains·(G−1) <= 132 and chains·(2G−3) <= 264, chains = N·HV·2/warpgroups
    // (H200, v7 kernels, results/prefill64_s14.md: the measured best G of each form where measured)
    for (n, t, hv, g, l, wg) in [
        (1usize, 65_536usize, 8usize, 17u64, 61u64, 2u64), // 8 chains: measured 604 us (1 WG, G = 9: 679)
        (1, 8192, 8, 8, 16, 1),                            // measured 129 us (2 WG: 146)
        (1, 2048, 8, 7, 5, 1),    // 32 chunks: measured 61.9 (L 6) - 64.3 (L 4)
        (2, 32_768, 8, 8, 32, 2), // measured 316 us (L 16: 362; 1 WG, L 32: 406)
        (1, 65_536, 32, 5, 205, 2), // 32 chains (the f16 record fits the workspace cap); estimate only
        (1, 65_536, 3, 22, 47, 1), // odd HV: 3 chains (cp beats chunk64 5x); estimate only (s18: 2 WG, G 38)
        (1, 8192, 32, 3, 43, 1), // 32 heads: cp by the s19 estimates (s18: 2 WG, G 5); estimate only
        (1, 1 << 19, 2, 64, 128, 2), // 2 chains: the segment cap
        (1, 12_000, 4, 14, 14, 1), // few heads, 12K tokens: one warpgroup (s20 estimate; s18: G 15, L 13)
    ] {
        let s = pre(n, t, hv, F32);
        let p = plan(&s);
        let PrefillPlan::ContextParallel {
            prep,
            pass1,
            scan,
            pass3,
            segments,
            seg_chunks,
            warpgroups,
            workspace_bytes,
        } = &p
        else {
            panic!("expected cp for {s:?}: {}", p.why());
        };
        assert_eq!(
            (*segments, *seg_chunks, *warpgroups),
            (g, l, wg),
            "{s:?}: {}",
            p.why()
        );
        let wide = wg == 2;
        assert_eq!(
            p.kind(),
            if wide {
                PlanKind::ContextParallelWide
            } else {
                PlanKind::ContextParallel
            }
        );
        let slots = registry::prefill64_seg_slots(t as u64, n as u64, l) as u32;
        assert_eq!(prep.grid, (((t / 64 + n + 1) * hv) as u32, 1, 1));
        assert_eq!(pass1.grid, (slots, hv as u32, 4 / wg as u32));
        assert_eq!(pass3.grid, (slots, hv as u32, 2 / wg as u32));
        // the scan: one CTA per (sequence of more than 2L chunks, head, row block), K = min(N, T / (128L + 1))
        // such sequences at most; 8 value rows per CTA while K·HV·16 CTAs fit one wave, else 16
        let k = n.min(t / (128 * l as usize + 1));
        assert_eq!(
            registry::prefill64_scan_seqs(t as u64, n as u64, l),
            k as u64
        );
        let (scan_name, scan_ctas) = if k * hv * 16 <= 132 {
            ("gdn_prefill64_cp_scan8", 16)
        } else {
            ("gdn_prefill64_cp_scan", 8)
        };
        assert_eq!(scan.variant.name, scan_name, "{s:?}");
        assert_eq!(scan.grid, ((k * hv * scan_ctas) as u32, 1, 1));
        assert_eq!((scan.block, scan.dyn_smem), (256, prefill64::CP_SCAN_SMEM));
        let walk_smem = if wide {
            prefill64::WALK2_SMEM
        } else {
            prefill64::WALK_SMEM
        };
        for pass in [pass1, pass3] {
            assert_eq!(
                (pass.block, pass.dyn_smem),
                (128 * wg as u32, walk_smem),
                "{s:?}"
            );
            assert_eq!(
                pass.variant.name.contains("w_"),
                wide,
                "{}",
                pass.variant.name
            );
        }
        assert_eq!(
            *workspace_bytes,
            registry::prefill64_cp_workspace_bytes(t as u64, n as u64, hv as u64, l)
        );
        // pass 3 (segments 1..G-1 of every chain) fits one wave; pass 1 two
        let chains = (n * hv * 2) as u64 / wg;
        assert!(chains * (g - 1) <= 132 && chains * (2 * g - 3) <= 264);
    }
    let p = plan(&pre(1, 65_536, 8, BF16));
    assert_eq!(
        p.label(),
        "cp2 gdn_prefill64_prep+gdn_prefill64_cp_pass1w_bf16+gdn_prefill64_cp_scan8+gdn_prefill64_cp_pass3w_bf16"
    );
    assert!(p.why().starts_with("cp2: estimate"), "{}", p.why());
    assert!(p.why().contains("8 walk chains"), "{}", p.why());
    let p = plan(&pre(1, 8192, 8, BF16));
    assert_eq!(
        p.label(),
        "cp gdn_prefill64_prep+gdn_prefill64_cp_pass1_bf16+gdn_prefill64_cp_scan8+gdn_prefill64_cp_pass3_bf16"
    );
    assert!(p.why().starts_with("cp: estimate"), "{}", p.why());
    // without a hint nothing but T and N is known: a skewed split of the same totals gets the same plan
    assert_eq!(
        plan(&pre(2, 16_384, 8, F32)).kind(),
        // (a near tie: session 21's constants estimate cp2 G8 L16 162.8 µs, cp G5 L26 164.2; measured on the
        // H200, results/2026-11-21-h200-s21-2x8192-forms-cpab.log: cp2 L16 160.2, cp L26 163.1. Session 18's
        // constants picked two warpgroups, sessions 19-20 one)
        PlanKind::ContextParallelWide
    );
    // with one: a long sequence among short ones is cut into segments of ITS length (measured: 44
    // sequences, the longest 5,637 tokens: fused 235-396 us, cp 235-335, cp2 195-270)
    let mixed = Shape {
        max_seq_len: 5637,
        ..pre(44, 8192, 8, F32)
    };
    assert_eq!(kind(&pre(44, 8192, 8, F32)), PlanKind::Fused);
    let p = plan(&mixed);
    let PrefillPlan::ContextParallel {
        segments,
        seg_chunks,
        scan,
        ..
    } = &p
    else {
        panic!("expected cp for {mixed:?}: {}", p.why());
    };
    assert_eq!(5637u64.div_ceil(64).div_ceil(*seg_chunks), *segments);
    assert!((4..=9).contains(segments), "{}", p.why());
    assert!(p.why().contains("hinted"), "{}", p.why());
    // the scan's grid: only as many sequences as 8192 tokens can hold with more than 2L chunks each (the hint
    // is not trusted for it), not all 44
    let k = 8192 / (128 * *seg_chunks as u32 + 1);
    assert!((1..44).contains(&k), "{k}");
    assert_eq!(scan.grid.0, k * 8 * scan.variant.ctas_per_head);
    // forced on short, many sequences: at least 3 segments (every pass has work), L >= 1
    let forced = choose_prefill(
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
        let p = choose_prefill(&long, &H100, Some(name)).unwrap();
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
        choose_prefill(
            &pre(1, 65_536, 8, F32),
            &H100,
            Some("gdn_prefill64_cp_pass1_bf16")
        ),
        Err(Rejection::Override { .. })
    ));
    // no sequences: nothing to launch, no workspace
    let p = choose_prefill(
        &pre(0, 0, 8, F32),
        &H100,
        Some("gdn_prefill64_cp_pass3_f32"),
    )
    .unwrap();
    assert!(p.is_empty());
    assert_eq!(p.workspace_bytes(), 0);
    // past the workspace cap the rule falls back to the fused plan; forced, it is refused
    let huge = pre(1, 1 << 30, 8, F32);
    assert_eq!(kind(&huge), PlanKind::Fused);
    assert!(matches!(
        choose_prefill(&huge, &H100, Some("gdn_prefill64_cp_pass3_f32")),
        Err(Rejection::Workspace { .. })
    ));
}

#[test]
fn override_forces_either_prefill_plan() {
    use StateDtype::{BF16, F32};
    let short = pre(8, 800, 8, F32); // fused by the rule
    let long = pre(16, 16 * 2048, 8, F32); // fused by the rule too (256 walk chains: no cp)
    assert_eq!(kind(&short), PlanKind::Fused);
    assert_eq!(kind(&long), PlanKind::Fused);
    let forced = |s: &Shape, name| choose_prefill(s, &H100, Some(name));
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
        choose(
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
        choose(&long, &H100, None).unwrap().variant.name
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
        choose_prefill(&s, &H100, Some("gdn_prefill_f32_bv16")),
        Err(Rejection::OddValueHeads { v: 3 })
    ));
    assert!(matches!(
        choose(&s, &H100, None),
        Err(Rejection::OddValueHeads { v: 3 })
    ));
    // past the workspace cap (10 GiB on the test H100): 2^25 tokens x 3 heads need ~27 GB
    let huge = pre(1, 1 << 25, 3, F32);
    assert!(matches!(
        choose_prefill(&huge, &H100, None),
        Err(Rejection::OddValueHeads { v: 3 })
    ));
}

#[test]
fn chunk64_needs_its_shared_memory() {
    use StateDtype::F32;
    // a device with room for the prep (36384 bytes) but not the chunk64 walk (126992)
    let small = DeviceCaps {
        max_dyn_smem: 120_000,
        ..H100
    };
    assert!(prefill64::WALK_SMEM > small.max_dyn_smem && prefill64::PREP_SMEM < small.max_dyn_smem);
    let long = pre(1, 65_536, 8, F32);
    assert!(matches!(
        choose_prefill(&long, &small, Some("gdn_prefill64_prep")),
        Err(Rejection::SharedMemory {
            kernel: "gdn_prefill64_walk_f32",
            ..
        })
    ));
    // the automatic rule would run this shape context parallel (walk-sized kernels too): it falls back to
    // the fused plan, whose bv16 kernel (225696 bytes) does not fit either — the rejection names it
    assert_eq!(plan(&long).kind(), PlanKind::ContextParallelWide);
    assert!(matches!(
        choose_prefill(&long, &small, None),
        Err(Rejection::SharedMemory {
            kernel: "gdn_prefill_f32_bv16",
            ..
        })
    ));
    // room for the one-warpgroup walks (126992) and the scan (147472) but not the two-warpgroup passes
    // (152592): the automatic rule runs the one-warpgroup cp instead
    let mid = DeviceCaps {
        max_dyn_smem: 150_000,
        ..H100
    };
    let p = choose_prefill(&long, &mid, None).unwrap();
    assert_eq!(p.kind(), PlanKind::ContextParallel, "{}", p.why());
    assert!(matches!(
        choose_prefill(&long, &mid, Some("gdn_prefill64_cp_pass3w_f32")),
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

#[test]
fn scan_kernel_by_the_sequences_that_need_it() {
    use gdn_cuda::cost::scan_work_seqs;
    use gdn_cuda::policy::cp_scan_kernel;
    let hinted = |n, t, longest| Shape {
        max_seq_len: longest,
        ..pre(n, t, 8, StateDtype::F32)
    };
    // (shape, L) -> sequences of more than 2L chunks the scan is taken to work on, and its kernel: 8-row CTAs
    // (16 per head) while those fit one wave of 132. Two sequences, the other too short to need the scan at L 7
    // (886 tokens ≤ 896): one; at L 6 the mix's prefill_68 (1451 + 962 tokens, 962 > 768): both, and 2·8·16 > 132
    // (session 21: the 8-row scan there ran two waves, scan 7.5 -> 9.8 us)
    for (s, l, work, name) in [
        (hinted(2, 3425, 2539), 7, 1, "gdn_prefill64_cp_scan8"),
        (hinted(2, 2413, 1451), 6, 2, "gdn_prefill64_cp_scan"),
        (
            pre(2, 2413, 8, StateDtype::F32),
            6,
            2,
            "gdn_prefill64_cp_scan",
        ), // no hint: K
        (
            pre(1, 8192, 8, StateDtype::F32),
            16,
            1,
            "gdn_prefill64_cp_scan8",
        ),
        // K = 6; one long sequence, and the other 2555 tokens could hold one more of > 1280
        (hinted(44, 8192, 5637), 10, 2, "gdn_prefill64_cp_scan"),
        (
            pre(44, 8192, 8, StateDtype::F32),
            10,
            6,
            "gdn_prefill64_cp_scan",
        ), // no hint: K
    ] {
        assert_eq!(scan_work_seqs(&s, l), work, "{s:?} L {l}");
        assert_eq!(
            cp_scan_kernel(&s, 132, l).unwrap().name,
            name,
            "{s:?} L {l}"
        );
    }
}

#[test]
fn workspace_cap_follows_device_memory() {
    use StateDtype::F32;
    let h200 = DeviceCaps {
        mem_bytes: 141 << 30,
        ..H100
    };
    assert_eq!(workspace_cap(&h200), 16 << 30);
    let small = DeviceCaps {
        mem_bytes: 4 << 30,
        ..H100
    };
    assert_eq!(workspace_cap(&small), 1 << 30);
    // a million tokens of one sequence (qk4_v8: ~2.3 GB of workspace) runs context parallel on an H100, and fused
    // where the cap is 1 GiB
    let long = pre(1, 1 << 20, 8, F32);
    let p = plan(&long);
    assert!(
        matches!(
            p.kind(),
            PlanKind::ContextParallel | PlanKind::ContextParallelWide
        ),
        "{}",
        p.why()
    );
    assert!(p.workspace_bytes() > 1 << 30);
    assert_eq!(
        choose_prefill(&long, &small, None).unwrap().kind(),
        PlanKind::Fused
    );
}
