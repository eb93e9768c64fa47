//! The prefill cost model against measurements: the H200 sweep of the contest-like mix's 25 workloads of
//! ≥ 2048 tokens (`prefill64_harness.py mixlong`, session 22: the v12 prefill64 kernels (the warp search of the prep
//! and cp passes) and v12.3 fused kernels, results/2026-11-21-h200-s22-mixlong.json). Each row: every fused tile
//! width, the chunk64 plan, and both cp walk forms (one and two warpgroups per walk CTA) at several segment lengths,
//! CUPTI kernel time with the L2 flushed. The policy, given each workload's longest length, must land on a plan whose
//! *measured* time is close to the best measured one — a check of the model that the constants can fail.

use gdn_core::Op;
use gdn_cuda::cost;
use gdn_cuda::policy::{choose_prefill, DeviceCaps, PrefillPlan, Shape};
use gdn_cuda::registry::StateDtype;

type Row = (
    &'static str,
    usize,
    usize,
    usize,
    [f64; 4],
    f64,
    &'static [(u64, f64)],
    &'static [(u64, f64)],
);

/// (workload, T, N, longest, fused µs at BV 16/32/64/128, chunk64 µs, cp with one warpgroup per walk CTA (L
/// chunks per segment, µs), cp with two).
#[rustfmt::skip]
const MEASURED: &[Row] = &[
    ("prefill_00_n40_t8192", 8192, 40, 1972, [181.5, 111.0, 104.7, 142.9], 94.2,
     &[(16, 128.2), (11, 124.4), (8, 124.2), (6, 129.5), (4, 148.3), (3, 166.1), (2, 212.6)],
     &[(11, 121.2), (8, 114.0), (6, 114.1), (4, 128.8), (3, 141.0), (2, 180.8), (1, 291.9)]),
    ("prefill_02_n12_t8192", 8192, 12, 5637, [174.1, 201.4, 234.0, 365.8], 157.7,
     &[(45, 175.3), (30, 137.9), (23, 122.4), (15, 112.6), (10, 118.6), (8, 134.5), (6, 138.1)],
     &[(30, 177.5), (23, 148.7), (15, 118.1), (10, 112.6), (8, 115.5), (6, 119.7), (4, 145.6), (3, 168.9)]),
    ("prefill_05_n57_t8192", 8192, 57, 1400, [204.0, 119.7, 88.5, 111.4], 89.7,
     &[(11, 129.7), (8, 144.5), (6, 147.6), (4, 167.9), (3, 187.0), (2, 230.4)],
     &[(8, 128.3), (6, 127.0), (4, 143.1), (3, 156.2), (2, 192.8), (1, 308.4)]),
    ("prefill_06_n42_t8192", 8192, 42, 2024, [185.9, 130.8, 116.5, 155.0], 101.8,
     &[(16, 130.6), (11, 125.6), (8, 124.7), (6, 133.4), (4, 145.4), (3, 165.5), (2, 210.2)],
     &[(11, 123.5), (8, 115.9), (6, 115.9), (4, 125.8), (3, 139.6), (2, 178.6), (1, 289.7)]),
    ("prefill_08_n35_t8192", 8192, 35, 913, [174.5, 108.7, 79.3, 72.2], 82.3,
     &[(8, 108.6), (5, 134.4), (4, 154.4), (3, 174.0), (2, 220.4), (1, 352.0)],
     &[(5, 116.1), (4, 135.3), (3, 148.0), (2, 187.5), (1, 296.6)]),
    ("prefill_13_n1_t4380", 4380, 1, 4380, [135.2, 155.7, 181.4, 282.8], 116.5,
     &[(35, 122.3), (23, 94.8), (18, 81.4), (12, 73.1), (8, 68.7), (6, 83.9), (5, 88.0)],
     &[(23, 133.1), (18, 111.3), (12, 87.8), (8, 74.2), (6, 75.7), (5, 75.4), (3, 97.3)]),
    ("prefill_14_n4_t6628", 6628, 4, 2143, [123.1, 79.7, 91.4, 140.7], 76.0,
     &[(17, 85.9), (12, 91.0), (9, 95.3), (6, 111.5), (4, 132.0), (3, 150.9)],
     &[(12, 98.6), (9, 89.1), (6, 95.3), (4, 116.5), (3, 130.0), (2, 166.2)]),
    ("prefill_15_n44_t8192", 8192, 44, 5637, [228.4, 227.9, 249.3, 375.7], 176.0,
     &[(45, 200.7), (30, 166.1), (23, 151.6), (15, 143.6), (10, 152.7), (8, 160.8), (6, 165.3)],
     &[(30, 200.1), (23, 172.5), (15, 145.1), (10, 135.7), (8, 138.6), (6, 142.0), (4, 164.7), (3, 182.1)]),
    ("prefill_19_n4_t2564", 2564, 4, 1521, [50.8, 58.6, 66.5, 102.4], 50.1,
     &[(12, 57.8), (8, 50.7), (6, 51.2), (4, 55.5), (3, 64.3), (2, 78.7)],
     &[(8, 64.7), (6, 57.9), (4, 53.6), (3, 58.7), (2, 73.0), (1, 112.2)]),
    ("prefill_24_n53_t8192", 8192, 53, 4021, [197.6, 165.9, 179.1, 269.5], 137.5,
     &[(32, 176.4), (21, 153.9), (16, 147.5), (11, 146.9), (7, 155.0), (6, 161.3), (4, 179.0)],
     &[(21, 169.5), (16, 149.0), (11, 136.1), (7, 133.9), (6, 137.2), (4, 153.6), (3, 166.7), (2, 206.9)]),
    ("prefill_30_n2_t2614", 2614, 2, 1674, [55.7, 62.4, 72.1, 111.1], 53.9,
     &[(14, 61.8), (9, 52.3), (7, 49.4), (5, 53.4), (3, 65.6), (2, 84.2)],
     &[(9, 69.1), (7, 61.5), (5, 57.7), (3, 60.4), (2, 79.3), (1, 118.3)]),
    ("prefill_37_n43_t8192", 8192, 43, 1066, [191.8, 118.4, 76.3, 84.3], 82.9,
     &[(9, 114.9), (6, 126.3), (5, 136.4), (3, 159.8), (2, 208.9)],
     &[(6, 112.2), (5, 118.3), (3, 135.7), (2, 177.1), (1, 288.1)]),
    ("prefill_39_n5_t8192", 8192, 5, 2986, [150.0, 109.9, 126.3, 194.3], 97.8,
     &[(24, 106.8), (16, 98.2), (12, 98.1), (8, 116.9), (6, 134.7), (4, 154.8), (3, 183.9)],
     &[(16, 115.5), (12, 101.0), (8, 101.2), (6, 122.4), (4, 133.1), (3, 160.2), (2, 199.2)]),
    ("prefill_41_n11_t8192", 8192, 11, 5550, [185.0, 199.4, 231.4, 359.1], 155.4,
     &[(44, 171.9), (29, 136.4), (22, 118.5), (15, 112.7), (10, 121.0), (8, 129.3), (6, 137.1)],
     &[(29, 174.3), (22, 144.1), (15, 118.7), (10, 112.4), (8, 111.3), (6, 119.6), (4, 143.5), (3, 165.9)]),
    ("prefill_44_n1_t2443", 2443, 1, 2443, [77.0, 88.5, 103.0, 159.5], 70.2,
     &[(20, 76.0), (13, 62.0), (10, 54.1), (7, 53.6), (5, 51.3), (4, 62.7), (3, 64.4)],
     &[(13, 84.9), (10, 71.6), (7, 61.4), (5, 55.1), (4, 57.6), (3, 58.9), (2, 76.9)]),
    ("prefill_49_n11_t8192", 8192, 11, 4051, [154.6, 153.2, 170.9, 264.9], 123.9,
     &[(32, 138.7), (22, 116.6), (16, 109.0), (11, 106.2), (8, 122.3), (6, 130.1), (4, 153.6)],
     &[(22, 142.6), (16, 119.4), (11, 101.5), (8, 106.3), (6, 115.5), (4, 131.7), (3, 153.5), (2, 192.2)]),
    ("prefill_50_n42_t8192", 8192, 42, 1111, [192.8, 120.8, 87.5, 86.0], 89.7,
     &[(9, 116.2), (6, 134.5), (5, 142.6), (3, 173.4), (2, 217.7)],
     &[(6, 118.0), (5, 123.0), (3, 146.6), (2, 184.0), (1, 299.2)]),
    ("prefill_56_n2_t3425", 3425, 2, 2539, [81.0, 92.4, 106.9, 165.6], 74.1,
     &[(20, 81.4), (14, 66.8), (10, 58.9), (7, 59.6), (5, 71.1), (4, 75.7), (3, 88.6)],
     &[(14, 90.2), (10, 76.6), (7, 66.4), (5, 63.2), (4, 69.0), (3, 81.7), (2, 98.0)]),
    ("prefill_58_n5_t8192", 8192, 5, 5637, [174.1, 200.9, 232.5, 363.5], 156.2,
     &[(45, 164.7), (30, 127.9), (23, 110.0), (15, 108.2), (10, 126.8), (8, 134.7), (6, 148.0)],
     &[(30, 175.7), (23, 146.3), (15, 116.4), (10, 110.8), (8, 111.1), (6, 133.9), (4, 146.8), (3, 173.4)]),
    ("prefill_68_n2_t2413", 2413, 2, 1451, [49.2, 55.1, 63.2, 97.1], 47.9,
     &[(12, 55.7), (8, 49.6), (6, 46.9), (4, 52.2), (3, 62.7), (2, 78.0)],
     &[(8, 64.5), (6, 56.3), (4, 52.9), (3, 57.0), (2, 73.7), (1, 108.1)]),
    ("prefill_70_n46_t8192", 8192, 46, 1734, [188.0, 133.5, 110.3, 136.9], 101.4,
     &[(14, 127.7), (10, 131.6), (7, 140.6), (5, 152.7), (4, 165.6), (3, 184.0), (2, 229.1)],
     &[(10, 123.0), (7, 121.7), (5, 130.3), (4, 142.7), (3, 154.5), (2, 193.3), (1, 303.5)]),
    ("prefill_72_n2_t6417", 6417, 2, 3780, [118.2, 135.6, 157.4, 245.1], 111.1,
     &[(30, 119.4), (20, 95.4), (15, 83.6), (10, 94.9), (7, 106.6), (5, 123.3), (4, 129.5)],
     &[(20, 127.9), (15, 108.5), (10, 91.1), (7, 93.5), (5, 114.3), (4, 115.6), (3, 127.8), (2, 161.0)]),
    ("prefill_91_n42_t8192", 8192, 42, 1789, [185.8, 138.0, 113.4, 143.0], 101.4,
     &[(14, 124.4), (10, 127.1), (7, 131.4), (5, 141.3), (4, 151.1), (3, 175.2), (2, 224.7)],
     &[(10, 121.5), (7, 117.0), (5, 121.2), (4, 131.0), (3, 147.7), (2, 190.9), (1, 302.0)]),
    ("prefill_94_n26_t6306", 6306, 26, 2382, [132.4, 88.7, 103.3, 159.6], 85.9,
     &[(19, 113.5), (13, 103.9), (10, 102.3), (7, 106.7), (5, 113.8), (4, 126.2), (3, 141.7)],
     &[(13, 111.6), (10, 102.4), (7, 97.6), (5, 98.8), (4, 110.8), (3, 123.1), (2, 148.8)]),
    ("prefill_97_n38_t8192", 8192, 38, 1526, [179.1, 120.7, 92.6, 117.3], 88.6,
     &[(12, 118.4), (8, 129.1), (6, 136.3), (4, 159.0), (3, 187.7), (2, 228.6)],
     &[(8, 115.4), (6, 118.1), (4, 136.9), (3, 158.3), (2, 193.5), (1, 298.4)]),
];

fn shape(t: usize, n: usize, hint: usize) -> Shape {
    Shape {
        op: Op::Prefill,
        num_q_heads: 4,
        num_v_heads: 8,
        head_size: 128,
        num_seqs: n,
        seq_len: 0,
        total_tokens: t,
        max_seq_len: hint,
        state: StateDtype::F32,
    }
}

/// The measured time of the plan the policy picks for `s` (cp: at the nearest measured segment length).
fn measured_choice(s: &Shape, row: &Row) -> (String, f64) {
    let plan = choose_prefill(s, &DeviceCaps::HOPPER_132, None).unwrap();
    match &plan {
        PrefillPlan::Fused { variant } => {
            let bv = 128 / variant.variant.ctas_per_head;
            let i = [16, 32, 64, 128].iter().position(|&w| w == bv).unwrap();
            (format!("fused bv{bv}"), row.4[i])
        }
        PrefillPlan::ContextParallel {
            seg_chunks,
            warpgroups,
            ..
        } => {
            let sweep = if *warpgroups == 2 { row.7 } else { row.6 };
            let (l, us) = *sweep
                .iter()
                .min_by_key(|(l, _)| l.abs_diff(*seg_chunks))
                .unwrap();
            (
                format!("{} L{seg_chunks} (measured at L{l})", plan.kind().name()),
                us,
            )
        }
        PrefillPlan::Chunk64 { .. } => ("chunk64".to_string(), row.5),
    }
}

fn best(row: &Row) -> f64 {
    row.4
        .iter()
        .chain([row.5].iter())
        .chain(row.6.iter().chain(row.7).map(|x| &x.1))
        .copied()
        .fold(f64::INFINITY, f64::min)
}

#[test]
fn hinted_choices_are_near_the_measured_best() {
    let (mut chosen, mut oracle, mut blind) = (0.0, 0.0, 0.0);
    let mut kinds = std::collections::BTreeSet::new();
    for row in MEASURED {
        let (name, t, n, longest, ..) = *row;
        let (label, us) = measured_choice(&shape(t, n, longest), row);
        kinds.insert(label.split_whitespace().next().unwrap().to_string());
        let b = best(row);
        // each pick within 20% of that workload's best (session 19 raised this from 15%: on the session-19 table the
        // session-18 constants also miss it (prefill_72, +15.2%, the L = 12 vs 10 read below), and the refit's
        // worst pick, prefill_14 (+18%: cp L12 90.3 vs chunk64 76.5), is estimated 0.6 µs from chunk64; the sum
        // below was tightened to 3%)
        assert!(
            us <= 1.20 * b,
            "{name}: picked {label} = {us} us, best measured {b} us"
        );
        chosen += us;
        oracle += b;
        blind += measured_choice(&shape(t, n, 0), row).1;
    }
    // over the 25 workloads: within 3% of always picking the best measured plan (session 14: 3.1%, session 19:
    // 2.2%, where the session-18 constants give 3.3%; a pick
    // between two measured segment lengths reads the nearer one — prefill_72's L = 12, one pass-3 wave, reads
    // L = 10, two waves, +11%), and the length hint is worth more than a fifth of the time (without it the
    // lengths are taken as equal)
    println!("hinted picks {chosen:.1} us, best measured {oracle:.1}, blind picks {blind:.1}");
    assert!(chosen <= 1.03 * oracle, "chosen {chosen} vs best {oracle}");
    // every plan kind is the right pick somewhere on this table (both walk forms included)
    assert_eq!(
        kinds.into_iter().collect::<Vec<_>>(),
        ["chunk64", "cp", "cp2", "fused"],
        "plan kinds picked"
    );
    assert!(
        chosen <= 0.8 * blind,
        "hinted {chosen} vs without the hint {blind}"
    );
}

#[test]
fn estimates_track_the_measurements() {
    // the estimate of each workload's chosen plan is within 30% of what that plan measured (the model
    // ranks plans; it is not a timer — the many-sequence work term is the roughest part)
    for row in MEASURED {
        let (name, t, n, longest, ..) = *row;
        let s = shape(t, n, longest);
        let (label, us) = measured_choice(&s, row);
        let plan = choose_prefill(&s, &DeviceCaps::HOPPER_132, None).unwrap();
        let est = match &plan {
            PrefillPlan::Fused { variant } => {
                cost::fused_us(&s, 128 / variant.variant.ctas_per_head, 132)
            }
            PrefillPlan::ContextParallel {
                segments,
                warpgroups,
                ..
            } => cost::cp_us(&s, *segments, cost::walk_form(*warpgroups).unwrap(), 132).us,
            PrefillPlan::Chunk64 { .. } => cost::cp_us(&s, 1, &cost::WALK_FORMS[0], 132).us,
        };
        assert!(
            (est / us - 1.0).abs() < 0.3,
            "{name}: {label} estimated {est:.1} us, measured {us} us"
        );
    }
}

#[test]
fn lengths_clamp_the_hint() {
    let l = cost::Lengths::of(&shape(8192, 32, 0));
    assert_eq!((l.longest, l.long_seqs), (256, 32));
    let l = cost::Lengths::of(&shape(8192, 32, 5000));
    assert_eq!((l.longest, l.long_seqs), (5000, 1));
    assert_eq!(cost::Lengths::of(&shape(8192, 32, 100)).longest, 256); // below the average: no information
    assert_eq!(cost::Lengths::of(&shape(100, 1, 500)).longest, 100); // above T: T
    assert_eq!(cost::Lengths::of(&shape(0, 3, 0)).longest, 0);
    // a second sequence nearly as long as the hinted longest (2637 and 3780 tokens) is cut too: its segments
    // count against pass 3's one wave (measured, prefill_72: L = 15 119.9 us, L = 10 — 144 pass-3 CTAs,
    // two waves — 144.9)
    let e = cost::best_cp(&shape(6417, 2, 3780), 132).unwrap();
    assert_eq!(
        e.rest_ctas,
        2637u64.div_ceil(64) / e.seg_chunks * 16,
        "{e:?}"
    );
    assert!(e.seg_chunks > 10, "{e:?}");
    assert!(e.chains * (e.segments - 1) + e.rest_ctas <= 132, "{e:?}");
    // one segment is the chunk64 plan: no scan, no pass 3
    let e = cost::cp_us(&shape(8192, 1, 0), 1, &cost::WALK_FORMS[0], 132);
    assert_eq!(
        (e.segments, e.seg_chunks, e.parts[2], e.parts[3]),
        (1, 128, 0.0, 0.0)
    );
}
