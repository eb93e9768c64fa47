//! The host's prefill planner (GPU-free), its rules rather than its calibrated picks (those are
//! tests/plan_golden.rs): when a fused tile runs longest first, what a length hint can change, and the launches,
//! grids and workspace of the chunk64 and cp plans.

mod common;

use common::{hinted, plan, plan64, pre, tile, H100};
use gdn_cuda::kernels::registry::{self, prefill64, StateDtype, VARIANTS};
use gdn_cuda::plan::grid;
use gdn_cuda::plan::prefill::cost::{self, LONGEST_FIRST_MIN_TOKENS};
use gdn_cuda::plan::prefill::host::{self, fused_longest_first, LONGEST_FIRST_MAX_N};
use gdn_cuda::plan::prefill::workspace;
use gdn_cuda::plan::prefill::{self, PrefillPlan};
use gdn_cuda::plan::{select, Launch, PlanKind, Shape};

#[test]
fn fused_tiles_run_longest_first_only_where_a_second_wave_can_wait() {
    // 2..=128 sequences, a grid wider than the GPU, a longest sequence that can reach 128 tokens, lengths not known
    // to be equal
    let s = |n: usize, hint: usize| Shape {
        total_tokens: n * 100,
        max_seq_len: hint,
        ..pre(n, 0, 8, StateDtype::F32)
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
    // hinted equal lengths (64x1024, 32x256): nothing to reorder, a plain build
    for s in [hinted(64, 65_536, 1024), hinted(32, 8192, 256)] {
        let v = select::choose(&s, &H100, None).unwrap().variant;
        assert!(!v.longest_first && !registry::is_split(v), "{}", v.name);
    }
}

#[test]
fn every_longest_first_build_is_a_plain_tiles_launch_and_module() {
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
fn a_hint_below_the_average_length_or_above_t_changes_nothing() {
    let p = |n, t, hint| tile(&hinted(n, t, hint));
    // below the average length it is no information; above T it is clamped
    assert_eq!(p(32, 8192, 1), p(32, 8192, 256));
    assert_eq!(p(1, 1024, 1 << 20), p(1, 1024, 1024));
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
    // the fused plan is one kernel, with no workspace
    let f = plan(&pre(5, 100, 8, F32));
    assert_eq!(f.launches().len(), 1);
    assert_eq!(f.workspace_bytes(), 0);
    assert!(f.label().starts_with("fused gdn_prefill_f32_bv"));
    assert_eq!(
        f,
        PrefillPlan::Fused {
            variant: Launch {
                why: f.why().into(),
                ..select::choose(&pre(5, 100, 8, F32), &H100, None).unwrap()
            }
        }
    );
}

#[test]
fn one_long_sequence_runs_context_parallel() {
    // 65,536 tokens of one sequence at 8 value heads: 16 walk chains cannot fill 132 SMs without segments
    for st in [StateDtype::F32, StateDtype::BF16] {
        let p = plan(&pre(1, 65_536, 8, st));
        assert!(
            matches!(
                p.kind(),
                PlanKind::ContextParallel | PlanKind::ContextParallelWide
            ),
            "{}",
            p.label()
        );
    }
}

/// The launches of cp plan `p` for `s`, from its segments (G, L) and walk form: the prep over chunk slots, the passes
/// over segment slots, the scan over the sequences that can have three segments, and the workspace of L.
fn check_cp_launches(s: &Shape, p: &PrefillPlan) {
    let (n, t, hv) = (s.num_seqs, s.total_tokens, s.num_v_heads);
    let PrefillPlan::ContextParallel {
        prep,
        pass1,
        scan,
        pass3,
        seg_chunks,
        warpgroups,
        workspace_bytes,
        ..
    } = p
    else {
        panic!("expected cp for {s:?}: {}", p.why());
    };
    let (l, wg) = (*seg_chunks, *warpgroups);
    let wide = wg == 2;
    assert_eq!(
        p.kind(),
        if wide {
            PlanKind::ContextParallelWide
        } else {
            PlanKind::ContextParallel
        }
    );
    let slots = grid::prefill64_seg_slots(t as u64, n as u64, l) as u32;
    assert_eq!(prep.grid, (((t / 64 + n + 1) * hv) as u32, 1, 1));
    assert_eq!(pass1.grid, (slots, hv as u32, 4 / wg as u32));
    assert_eq!(pass3.grid, (slots, hv as u32, 2 / wg as u32));
    // the scan: one CTA per (sequence of more than 2L chunks, head, row block), K = min(N, T / (128L + 1))
    // such sequences at most; 8 value rows per CTA while K·HV·16 CTAs fit one wave, else 16
    let k = n.min(t / (128 * l as usize + 1));
    assert_eq!(grid::prefill64_scan_seqs(t as u64, n as u64, l), k as u64);
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
        workspace::prefill64_cp_workspace_bytes(t as u64, n as u64, hv as u64, l)
    );
}

#[test]
fn cp_plans_have_the_grids_and_workspace_of_their_segments() {
    use StateDtype::F32;
    // few long sequences (the shapes of the calibrated cp picks in tests/plan_golden.rs): whatever G, L and walk
    // form the model picks, the launches follow from them; and so do those of the forced plans of either form
    for (n, t, hv) in [
        (1usize, 65_536usize, 8usize),
        (1, 8192, 8),
        (1, 2048, 8),
        (2, 32_768, 8),
        (1, 65_536, 32),
        (1, 65_536, 3),
        (1, 8192, 32),
        (1, 1 << 19, 2),
        (1, 12_000, 4),
    ] {
        let s = pre(n, t, hv, F32);
        let p = plan(&s);
        if let PrefillPlan::ContextParallel {
            segments: g,
            warpgroups: wg,
            ..
        } = p
        {
            check_cp_launches(&s, &p);
            // pass 3 (segments 1..G-1 of every chain) fits one wave; pass 1 two
            let chains = (n * hv * 2) as u64 / wg;
            assert!(chains * (g - 1) <= 132 && chains * (2 * g - 3) <= 264);
        }
        for pass3 in ["gdn_prefill64_cp_pass3_f32", "gdn_prefill64_cp_pass3w_f32"] {
            check_cp_launches(&s, &prefill::choose(&s, &H100, Some(pass3)).unwrap());
        }
    }
}

#[test]
fn scan_kernel_by_the_sequences_that_need_it() {
    let blind = |n, t| pre(n, t, 8, StateDtype::F32);
    // (shape, L) -> sequences of more than 2L chunks the scan is taken to work on, and its kernel: 8-row CTAs
    // (16 per head) while those fit one wave of 132. Two sequences, the other too short to need the scan at L 7
    // (886 tokens ≤ 896): one; at L 6 the mix's prefill_68 (1451 + 962 tokens, 962 > 768): both, and 2·8·16 > 132
    // (the 8-row scan would run two waves)
    for (s, l, work, name) in [
        (hinted(2, 3425, 2539), 7, 1, "gdn_prefill64_cp_scan8"),
        (hinted(2, 2413, 1451), 6, 2, "gdn_prefill64_cp_scan"),
        (blind(2, 2413), 6, 2, "gdn_prefill64_cp_scan"), // no hint: K
        (blind(1, 8192), 16, 1, "gdn_prefill64_cp_scan8"),
        // K = 6; one long sequence, and the other 2555 tokens could hold one more of > 1280
        (hinted(44, 8192, 5637), 10, 2, "gdn_prefill64_cp_scan"),
        (blind(44, 8192), 10, 6, "gdn_prefill64_cp_scan"), // no hint: K
    ] {
        assert_eq!(cost::scan_work_seqs(&s, l), work, "{s:?} L {l}");
        assert_eq!(
            host::cp_scan_kernel(&s, 132, l).unwrap().name,
            name,
            "{s:?} L {l}"
        );
    }
}
