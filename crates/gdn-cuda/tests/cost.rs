//! The prefill cost model against measurements: the H200 sweep of the contest-like mix's 25 workloads of
//! ≥ 2048 tokens (`prefill64_harness.py mixlong`, session 21: the v11 prefill64 kernels (scan and prep) and v12.3 fused
//! kernels, results/2026-11-21-h200-s21-mixlong.json). Each row: every fused tile width, the chunk64 plan, and both cp
//! walk forms (one and two warpgroups per walk CTA) at several segment lengths, CUPTI kernel time with the L2
//! flushed. The policy, given each workload's longest length, must land
//! on a plan whose *measured* time is close to the best measured one — a check of the model that the
//! constants can fail.

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
    ("prefill_00_n40_t8192", 8192, 40, 1972, [181.5, 111.6, 104.8, 142.2], 94.9,
     &[(16, 138.5), (11, 142.1), (8, 143.7), (6, 150.5), (4, 174.0), (3, 194.7), (2, 248.7)],
     &[(11, 130.8), (8, 125.7), (6, 127.4), (4, 143.2), (3, 158.0), (2, 199.6), (1, 322.4)]),
    ("prefill_02_n12_t8192", 8192, 12, 5637, [172.9, 200.3, 233.1, 364.4], 157.6,
     &[(45, 174.8), (30, 139.7), (23, 124.2), (15, 117.5), (10, 124.6), (8, 138.4), (6, 143.8)],
     &[(30, 177.6), (23, 149.5), (15, 120.9), (10, 114.7), (8, 117.0), (6, 123.3), (4, 148.2), (3, 171.9)]),
    ("prefill_05_n57_t8192", 8192, 57, 1400, [203.7, 118.8, 87.9, 110.5], 90.0,
     &[(11, 150.7), (8, 173.8), (6, 178.8), (4, 203.8), (3, 227.0), (2, 280.9)],
     &[(8, 145.6), (6, 144.7), (4, 162.5), (3, 178.8), (2, 218.6), (1, 349.2)]),
    ("prefill_06_n42_t8192", 8192, 42, 2024, [185.2, 130.3, 116.0, 155.4], 102.6,
     &[(16, 141.2), (11, 144.0), (8, 145.9), (6, 155.3), (4, 171.4), (3, 195.1), (2, 246.8)],
     &[(11, 131.0), (8, 127.7), (6, 129.4), (4, 140.3), (3, 156.8), (2, 198.0), (1, 321.5)]),
    ("prefill_08_n35_t8192", 8192, 35, 913, [174.8, 108.5, 79.0, 72.0], 83.1,
     &[(8, 120.9), (5, 154.3), (4, 175.8), (3, 198.4), (2, 250.2), (1, 404.0)],
     &[(5, 128.7), (4, 146.0), (3, 162.7), (2, 203.0), (1, 323.8)]),
    ("prefill_13_n1_t4380", 4380, 1, 4380, [134.6, 155.1, 180.6, 282.4], 116.3,
     &[(35, 121.3), (23, 93.9), (18, 80.5), (12, 72.8), (8, 68.3), (6, 83.6), (5, 87.5)],
     &[(23, 132.3), (18, 110.3), (12, 87.3), (8, 74.4), (6, 75.9), (5, 75.4), (3, 96.9)]),
    ("prefill_14_n4_t6628", 6628, 4, 2143, [122.8, 79.7, 91.0, 140.4], 76.0,
     &[(17, 85.1), (12, 91.2), (9, 95.2), (6, 111.7), (4, 132.5), (3, 151.9)],
     &[(12, 97.9), (9, 88.3), (6, 94.6), (4, 116.6), (3, 130.0), (2, 167.3)]),
    ("prefill_15_n44_t8192", 8192, 44, 5637, [228.5, 228.2, 249.4, 375.2], 176.5,
     &[(45, 210.5), (30, 176.9), (23, 168.5), (15, 164.2), (10, 171.5), (8, 179.9), (6, 187.7)],
     &[(30, 204.8), (23, 179.1), (15, 153.1), (10, 147.0), (8, 150.7), (6, 156.0), (4, 177.4), (3, 197.8)]),
    ("prefill_19_n4_t2564", 2564, 4, 1521, [50.5, 58.2, 66.2, 101.8], 49.8,
     &[(12, 57.2), (8, 51.0), (6, 51.5), (4, 56.6), (3, 65.0), (2, 79.4)],
     &[(8, 64.4), (6, 57.6), (4, 53.4), (3, 59.0), (2, 73.2), (1, 112.1)]),
    ("prefill_24_n53_t8192", 8192, 53, 4021, [198.1, 167.0, 180.1, 268.8], 139.5,
     &[(32, 189.8), (21, 176.9), (16, 171.8), (11, 173.9), (7, 181.1), (6, 189.4), (4, 210.7)],
     &[(21, 176.7), (16, 159.0), (11, 150.2), (7, 149.5), (6, 154.8), (4, 171.4), (3, 187.0), (2, 235.5)]),
    ("prefill_30_n2_t2614", 2614, 2, 1674, [55.7, 62.5, 72.1, 110.8], 53.5,
     &[(14, 60.8), (9, 52.0), (7, 48.5), (5, 52.9), (3, 64.8), (2, 82.8)],
     &[(9, 68.3), (7, 60.4), (5, 57.0), (3, 59.8), (2, 78.1), (1, 115.6)]),
    ("prefill_37_n43_t8192", 8192, 43, 1066, [191.9, 118.0, 75.9, 84.2], 84.4,
     &[(9, 131.0), (6, 149.0), (5, 161.8), (3, 191.7), (2, 247.8)],
     &[(6, 125.4), (5, 133.7), (3, 154.3), (2, 198.4), (1, 322.7)]),
    ("prefill_39_n5_t8192", 8192, 5, 2986, [149.0, 109.7, 126.2, 194.0], 97.8,
     &[(24, 105.7), (16, 99.1), (12, 99.2), (8, 117.7), (6, 136.1), (4, 156.5), (3, 185.1)],
     &[(16, 114.4), (12, 101.1), (8, 101.0), (6, 123.5), (4, 133.6), (3, 161.0), (2, 199.6)]),
    ("prefill_41_n11_t8192", 8192, 11, 5550, [184.7, 198.9, 230.9, 357.9], 154.8,
     &[(44, 172.0), (29, 136.2), (22, 120.8), (15, 116.8), (10, 126.3), (8, 134.2), (6, 143.0)],
     &[(29, 175.0), (22, 144.8), (15, 119.8), (10, 115.1), (8, 113.6), (6, 123.8), (4, 147.6), (3, 170.1)]),
    ("prefill_44_n1_t2443", 2443, 1, 2443, [76.6, 88.2, 102.9, 159.3], 70.1,
     &[(20, 75.0), (13, 61.4), (10, 53.7), (7, 52.9), (5, 50.8), (4, 62.3), (3, 63.5)],
     &[(13, 84.1), (10, 71.5), (7, 61.1), (5, 55.2), (4, 57.7), (3, 59.1), (2, 75.9)]),
    ("prefill_49_n11_t8192", 8192, 11, 4051, [154.1, 152.8, 169.9, 264.0], 123.2,
     &[(32, 138.9), (22, 118.4), (16, 112.4), (11, 110.2), (8, 126.4), (6, 134.6), (4, 158.9)],
     &[(22, 142.9), (16, 120.1), (11, 105.3), (8, 108.7), (6, 117.6), (4, 134.1), (3, 155.6), (2, 196.0)]),
    ("prefill_50_n42_t8192", 8192, 42, 1111, [192.7, 120.5, 87.2, 85.4], 90.3,
     &[(9, 131.1), (6, 156.3), (5, 167.5), (3, 203.2), (2, 254.9)],
     &[(6, 131.8), (5, 138.1), (3, 164.7), (2, 204.4), (1, 332.8)]),
    ("prefill_56_n2_t3425", 3425, 2, 2539, [80.4, 92.0, 106.8, 165.0], 73.7,
     &[(20, 81.1), (14, 66.4), (10, 58.1), (7, 59.7), (5, 70.4), (4, 74.8), (3, 87.6)],
     &[(14, 89.7), (10, 75.8), (7, 65.4), (5, 62.8), (4, 68.3), (3, 80.6), (2, 95.9)]),
    ("prefill_58_n5_t8192", 8192, 5, 5637, [173.2, 199.9, 231.8, 362.7], 155.5,
     &[(45, 163.0), (30, 127.0), (23, 109.4), (15, 109.5), (10, 127.4), (8, 135.5), (6, 149.2)],
     &[(30, 173.9), (23, 145.2), (15, 115.5), (10, 110.4), (8, 111.0), (6, 133.2), (4, 146.7), (3, 172.7)]),
    ("prefill_68_n2_t2413", 2413, 2, 1451, [49.2, 54.9, 63.1, 97.1], 47.7,
     &[(12, 55.2), (8, 49.0), (6, 46.1), (4, 51.6), (3, 62.1), (2, 77.2)],
     &[(8, 63.8), (6, 55.8), (4, 52.3), (3, 56.6), (2, 72.2), (1, 106.4)]),
    ("prefill_70_n46_t8192", 8192, 46, 1734, [187.8, 133.2, 110.3, 137.0], 103.0,
     &[(14, 142.2), (10, 155.3), (7, 164.3), (5, 179.6), (4, 194.6), (3, 217.0), (2, 270.0)],
     &[(10, 136.3), (7, 137.4), (5, 147.4), (4, 158.0), (3, 174.0), (2, 215.1), (1, 338.5)]),
    ("prefill_72_n2_t6417", 6417, 2, 3780, [118.6, 135.1, 157.3, 244.5], 110.4,
     &[(30, 117.8), (20, 94.1), (15, 82.8), (10, 93.2), (7, 105.6), (5, 121.4), (4, 128.1)],
     &[(20, 127.3), (15, 107.3), (10, 90.5), (7, 92.6), (5, 112.8), (4, 113.8), (3, 126.5), (2, 158.7)]),
    ("prefill_91_n42_t8192", 8192, 42, 1789, [185.4, 136.8, 112.7, 142.4], 101.5,
     &[(14, 136.6), (10, 147.4), (7, 151.9), (5, 164.3), (4, 176.5), (3, 204.2), (2, 261.3)],
     &[(10, 131.4), (7, 129.9), (5, 136.0), (4, 144.7), (3, 165.0), (2, 210.5), (1, 334.2)]),
    ("prefill_94_n26_t6306", 6306, 26, 2382, [132.0, 88.2, 103.0, 159.5], 86.7,
     &[(19, 120.3), (13, 115.1), (10, 115.0), (7, 119.2), (5, 127.9), (4, 141.4), (3, 158.9)],
     &[(13, 115.9), (10, 108.8), (7, 105.2), (5, 108.1), (4, 120.4), (3, 133.0), (2, 160.0)]),
    ("prefill_97_n38_t8192", 8192, 38, 1526, [178.8, 119.7, 91.7, 117.1], 89.5,
     &[(12, 130.8), (8, 148.1), (6, 156.9), (4, 183.9), (3, 214.6), (2, 263.1)],
     &[(8, 127.7), (6, 131.0), (4, 150.3), (3, 174.8), (2, 211.9), (1, 328.9)]),
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
