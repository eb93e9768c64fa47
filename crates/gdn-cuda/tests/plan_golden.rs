//! GOLDEN SNAPSHOTS of the prefill cost model: the exact picks — fused tiles and their builds, plan kinds, cp
//! segment counts and walk forms — at calibrated points. They pin today's constants of `plan::prefill::cost`
//! (fitted by tools/fit_cost.py on H200 sweeps). A refit of the cost model rewrites this file: regenerate each
//! expectation from the new constants and check the new picks against the measurements
//! (tests/cost_vs_measurements.rs). The rules that must hold whatever the constants are tested elsewhere
//! (tests/prefill_host.rs, plan_limits.rs, plan_workspace.rs, device_plan.rs). The measured figures quoted are H200
//! kernel times.

mod common;

use common::{hinted, kind, pick, plan, pre, tile};
use gdn_cuda::kernels::registry::StateDtype;
use gdn_cuda::plan::prefill::PrefillPlan;
use gdn_cuda::plan::{PlanKind, Shape};

#[test]
fn fused_tile_without_a_length_hint() {
    // N sequences of 1024 tokens on average: BV = largest with N * 8 * 128/BV >= 0.9 * 132 = 118.8 (a
    // hedge against skew the host cannot see)
    let p = |n: usize, st| tile(&pre(n, n * 1024, 8, st));
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
    let tiny = |n, t| tile(&pre(n, t, 8, F32));
    assert_eq!(tiny(5, 9), "gdn_prefill_f32_bv64");
    assert_eq!(tiny(14, 14), "gdn_prefill_f32_bv128");
}

#[test]
fn fused_tile_follows_the_cost_model() {
    // with a hint: the tile with the smallest cost::fused_us: wide tiles when there is work for every SM,
    // narrow ones when a long chain dominates (each row is the measured-best tile); without one the anchors get the
    // same tiles
    let p = |n, t, hint, st| {
        tile(&Shape {
            max_seq_len: hint,
            ..pre(n, t, 8, st)
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
    // the same totals with one long sequence (the caller's hint): narrower tiles (bv128 would run its long sequences
    // split, and a split chain is ~4% slower than bv64's: prefill_00 bv64 longest first 86.7 us, split bv128 92.4)
    assert_eq!(p(40, 8192, 1972, F32), "gdn_prefill_f32_bv64");
    assert_eq!(p(53, 8192, 4021, F32), "gdn_prefill_f32_bv32"); // 205 vs 312
}

#[test]
fn fused_tile_builds_at_calibrated_points() {
    // the "30 mixed" anchor (longest 700 tokens, hinted): bv128, 240 CTAs on 132 SMs; 700 > T·HV/SMs = 492 tokens, so
    // the split build
    assert_eq!(pick(&hinted(30, 8120, 700)), "gdn_prefill_f32_bv128_sp");
    // ... and with a longest sequence it would not split, the longest-first build
    assert_eq!(pick(&hinted(30, 8120, 480)), "gdn_prefill_f32_bv128_lf");
    // no hint: the lengths may be skewed (the kernel splits only what is longer than the threshold)
    assert_eq!(pick(&hinted(30, 8120, 0)), "gdn_prefill_f32_bv128_sp");
    // hinted equal lengths (64x1024, 32x256): nothing to reorder, the plain kernel
    assert_eq!(pick(&hinted(64, 65_536, 1024)), "gdn_prefill_f32_bv128");
    assert_eq!(pick(&hinted(32, 8192, 256)), "gdn_prefill_f32_bv128");
    // narrow tiles (bv16, bv32) have no longest-first build
    assert_eq!(pick(&hinted(53, 8192, 4021)), "gdn_prefill_f32_bv32");
    assert_eq!(
        pick(&pre(57, 57 * 150, 8, StateDtype::BF16)),
        "gdn_prefill_bf16_bv128_sp"
    );
    // short sequences only (28 sequences, 369 tokens, longest 100): the ranking's cost, no gain
    assert_eq!(pick(&hinted(28, 369, 100)), "gdn_prefill_f32_bv128");
    // (189 > the split threshold, 128: prefill_78 measures 21.2 us longest first, 19.9 split)
    assert_eq!(pick(&hinted(28, 369, 189)), "gdn_prefill_f32_bv128_sp");
}

#[test]
fn automatic_prefill_plan_kinds_at_calibrated_points() {
    use StateDtype::{BF16, F32};
    // chunk64 measures slower on these: even HV is fused unless few long sequences make it context parallel
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
    // 4x2048: the plain walk ties fused bv32 (77.1 vs 77.2 us) and the model picks chunk64
    assert_eq!(plan(&pre(4, 4 * 2048, 8, BF16)).kind(), PlanKind::Chunk64);
    // 1x1024 (16 chunks): cp (4 segments of 4 chunks) 2% under fused bv16, a measured tie (cp 34.7 us, fused bv16
    // 34.1); at 1x1536 and 1x2048 cp measures 41.2 and 47.6 us, the one-segment chunk64 plan 47.1 and 59.2
    let p = plan(&pre(1, 1024, 8, F32));
    assert_eq!(p.kind(), PlanKind::ContextParallel, "{}", p.why());
}

#[test]
fn cp_segments_and_walk_forms_at_calibrated_points() {
    use StateDtype::{BF16, F32};
    // (N, T, HV) -> (segments, chunks per segment, warpgroups per walk CTA): the cheapest cost::cp_us over
    // both walk forms and the G with chains·(G−1) <= 132 and chains·(2G−3) <= 264, chains = N·HV·2/warpgroups
    // (the measured best G of each form where measured)
    for (n, t, hv, g, l, wg) in [
        (1usize, 65_536usize, 8usize, 17u64, 61u64, 2u64), // 8 chains: measured 604 us (1 WG, G = 9: 679)
        (1, 8192, 8, 8, 16, 1),                            // measured 129 us (2 WG: 146)
        (1, 2048, 8, 7, 5, 1),    // 32 chunks: measured 61.9 (L 6) - 64.3 (L 4)
        (2, 32_768, 8, 8, 32, 2), // measured 316 us (L 16: 362; 1 WG, L 32: 406)
        (1, 65_536, 32, 5, 205, 2), // 32 chains (the f16 record fits the workspace cap); estimate only
        (1, 65_536, 3, 22, 47, 1),  // odd HV: 3 chains (cp beats chunk64 5x); estimate only
        (1, 8192, 32, 3, 43, 1),    // 32 heads: estimate only
        (1, 1 << 19, 2, 64, 128, 2), // 2 chains: the segment cap
        (1, 12_000, 4, 14, 14, 1),  // few heads, 12K tokens: one warpgroup (estimate only)
    ] {
        let s = pre(n, t, hv, F32);
        let p = plan(&s);
        let PrefillPlan::ContextParallel {
            segments,
            seg_chunks,
            warpgroups,
            ..
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
        // (a near tie: the estimates are cp2 G8 L16 162.8 µs, cp G5 L26 164.2; measured cp2 L16 160.2, cp L26 163.1)
        PlanKind::ContextParallelWide
    );
}

#[test]
fn a_hinted_long_sequence_among_short_ones_runs_cp_cut_by_its_own_length() {
    // with a hint: a long sequence among short ones is cut into segments of ITS length (measured: 44
    // sequences, the longest 5,637 tokens: fused 235-396 us, cp 235-335, cp2 195-270)
    let mixed = hinted(44, 8192, 5637);
    assert_eq!(kind(&pre(44, 8192, 8, StateDtype::F32)), PlanKind::Fused);
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
}
