//! The prefill cost model against measurements: an H200 sweep of the contest-like mix's 25 workloads of ≥ 2048
//! tokens (`tools/prefill64_harness.py mixlong`, CUPTI kernel time with the L2 flushed). Each row: every fused tile
//! width, the chunk64 plan, and both cp walk forms (one and two warpgroups per walk CTA) at several segment lengths.
//! The fused bv64 / bv128 columns are the builds the planner runs there: the longest-first kernels forced onto each
//! call where it runs those tiles longest first (2–128 sequences, a grid wider than the GPU:
//! `host::fused_longest_first`), and the split bv128 kernel on the 12 rows where it runs bv128 split
//! (`host::fused_split`). The planner, given each workload's longest length, must land on a plan whose *measured*
//! time is close to the best measured one — a check of the model that the constants can fail. A change of the
//! kernels that moves these times calls for a new sweep here and a refit (tools/fit_cost.py).

mod common;

use common::{hinted, H100};
use gdn_cuda::plan::prefill::device::exit_us;
use gdn_cuda::plan::prefill::{self, cost, host, DeviceRun, PrefillPlan};
use gdn_cuda::plan::Shape;

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
    ("prefill_00_n40_t8192", 8192, 40, 1972, [179.4, 110.4, 86.6, 92.4], 81.5,
     &[(16, 126.8), (11, 123.6), (8, 123.2), (6, 128.0), (4, 147.2), (3, 163.7), (2, 210.4)],
     &[(11, 119.4), (8, 112.7), (6, 111.9), (4, 126.9), (3, 138.7), (2, 177.5), (1, 287.9)]),
    ("prefill_02_n12_t8192", 8192, 12, 5637, [171.7, 199.0, 230.6, 362.5], 157.2,
     &[(45, 173.4), (30, 137.1), (23, 121.1), (15, 111.6), (10, 117.8), (8, 133.1), (6, 137.1)],
     &[(30, 175.4), (23, 147.2), (15, 117.3), (10, 110.6), (8, 113.9), (6, 118.7), (4, 143.7), (3, 167.2)]),
    ("prefill_05_n57_t8192", 8192, 57, 1400, [201.7, 118.1, 80.1, 69.5], 87.8,
     &[(11, 128.1), (8, 143.0), (6, 146.2), (4, 166.2), (3, 185.1), (2, 228.1)],
     &[(8, 126.8), (6, 125.3), (4, 140.7), (3, 154.1), (2, 189.9), (1, 304.5)]),
    ("prefill_06_n42_t8192", 8192, 42, 2024, [184.1, 129.2, 88.4, 94.0], 82.7,
     &[(16, 129.7), (11, 124.4), (8, 123.5), (6, 131.2), (4, 144.2), (3, 163.5), (2, 207.9)],
     &[(11, 122.1), (8, 114.1), (6, 114.4), (4, 123.9), (3, 137.9), (2, 175.6), (1, 286.1)]),
    ("prefill_08_n35_t8192", 8192, 35, 913, [172.8, 107.5, 64.2, 61.1], 73.2,
     &[(8, 107.4), (5, 133.0), (4, 152.3), (3, 171.7), (2, 218.2), (1, 348.5)],
     &[(5, 114.6), (4, 132.8), (3, 145.9), (2, 185.3), (1, 293.1)]),
    ("prefill_13_n1_t4380", 4380, 1, 4380, [133.5, 153.9, 179.3, 280.0], 115.4,
     &[(35, 121.3), (23, 93.7), (18, 80.4), (12, 72.5), (8, 67.8), (6, 83.4), (5, 87.0)],
     &[(23, 131.4), (18, 109.8), (12, 86.6), (8, 73.7), (6, 75.0), (5, 74.7), (3, 96.3)]),
    ("prefill_14_n4_t6628", 6628, 4, 2143, [122.7, 79.3, 90.9, 140.0], 75.3,
     &[(17, 84.5), (12, 89.9), (9, 93.8), (6, 110.9), (4, 130.4), (3, 149.0)],
     &[(12, 97.2), (9, 87.7), (6, 93.6), (4, 114.6), (3, 128.1), (2, 164.3)]),
    ("prefill_15_n44_t8192", 8192, 44, 5637, [226.3, 226.2, 231.9, 242.8], 161.9,
     &[(45, 198.9), (30, 165.3), (23, 150.4), (15, 142.3), (10, 151.7), (8, 158.8), (6, 164.3)],
     &[(30, 198.1), (23, 171.5), (15, 143.9), (10, 133.8), (8, 136.6), (6, 140.4), (4, 161.6), (3, 179.9)]),
    ("prefill_19_n4_t2564", 2564, 4, 1521, [50.2, 57.9, 65.9, 101.1], 50.0,
     &[(12, 56.9), (8, 50.4), (6, 50.8), (4, 54.5), (3, 63.9), (2, 78.1)],
     &[(8, 64.1), (6, 57.6), (4, 53.0), (3, 57.9), (2, 72.2), (1, 110.8)]),
    ("prefill_24_n53_t8192", 8192, 53, 4021, [196.1, 164.7, 167.8, 177.0], 127.9,
     &[(32, 174.8), (21, 152.4), (16, 145.5), (11, 145.4), (7, 152.8), (6, 158.9), (4, 176.4)],
     &[(21, 167.7), (16, 147.6), (11, 134.1), (7, 132.2), (6, 135.5), (4, 151.7), (3, 163.7), (2, 204.6)]),
    ("prefill_30_n2_t2614", 2614, 2, 1674, [55.3, 61.8, 71.5, 110.1], 53.7,
     &[(14, 60.9), (9, 52.2), (7, 48.7), (5, 53.0), (3, 64.9), (2, 83.0)],
     &[(9, 67.8), (7, 59.9), (5, 56.5), (3, 59.2), (2, 78.3), (1, 116.9)]),
    ("prefill_37_n43_t8192", 8192, 43, 1066, [190.2, 116.8, 70.5, 61.4], 78.1,
     &[(9, 113.6), (6, 124.9), (5, 135.3), (3, 158.8), (2, 207.1)],
     &[(6, 110.7), (5, 116.6), (3, 135.1), (2, 174.9), (1, 284.6)]),
    ("prefill_39_n5_t8192", 8192, 5, 2986, [147.7, 108.6, 125.1, 192.7], 97.0,
     &[(24, 105.6), (16, 96.8), (12, 96.6), (8, 115.3), (6, 132.9), (4, 152.6), (3, 181.2)],
     &[(16, 113.6), (12, 99.6), (8, 100.4), (6, 120.9), (4, 131.0), (3, 158.7), (2, 197.4)]),
    ("prefill_41_n11_t8192", 8192, 11, 5550, [183.1, 196.8, 226.8, 355.5], 154.0,
     &[(44, 169.4), (29, 134.8), (22, 117.0), (15, 110.8), (10, 118.8), (8, 127.7), (6, 135.4)],
     &[(29, 172.0), (22, 142.3), (15, 116.7), (10, 111.0), (8, 110.4), (6, 118.1), (4, 142.0), (3, 163.9)]),
    ("prefill_44_n1_t2443", 2443, 1, 2443, [76.2, 87.6, 102.2, 158.1], 69.7,
     &[(20, 75.2), (13, 61.8), (10, 53.4), (7, 52.6), (5, 50.5), (4, 61.8), (3, 63.5)],
     &[(13, 83.6), (10, 70.7), (7, 60.3), (5, 54.4), (4, 56.8), (3, 58.4), (2, 75.7)]),
    ("prefill_49_n11_t8192", 8192, 11, 4051, [153.4, 152.1, 168.3, 262.2], 122.9,
     &[(32, 136.2), (22, 115.1), (16, 107.7), (11, 104.5), (8, 120.5), (6, 128.4), (4, 151.6)],
     &[(22, 140.3), (16, 117.7), (11, 100.2), (8, 104.4), (6, 113.5), (4, 130.1), (3, 152.0), (2, 191.0)]),
    ("prefill_50_n42_t8192", 8192, 42, 1111, [191.2, 119.6, 69.1, 63.3], 77.1,
     &[(9, 114.7), (6, 133.2), (5, 141.2), (3, 170.7), (2, 214.9)],
     &[(6, 115.8), (5, 120.9), (3, 144.7), (2, 181.7), (1, 295.0)]),
    ("prefill_56_n2_t3425", 3425, 2, 2539, [80.0, 91.3, 106.2, 164.4], 73.8,
     &[(20, 80.9), (14, 66.1), (10, 58.6), (7, 59.2), (5, 70.8), (4, 74.6), (3, 87.7)],
     &[(14, 89.3), (10, 75.4), (7, 65.3), (5, 62.5), (4, 67.9), (3, 80.4), (2, 96.3)]),
    ("prefill_58_n5_t8192", 8192, 5, 5637, [172.2, 199.2, 230.0, 359.8], 154.8,
     &[(45, 162.9), (30, 126.1), (23, 108.3), (15, 107.1), (10, 125.5), (8, 132.9), (6, 146.5)],
     &[(30, 173.7), (23, 144.3), (15, 114.8), (10, 109.5), (8, 109.6), (6, 131.9), (4, 145.1), (3, 171.0)]),
    ("prefill_68_n2_t2413", 2413, 2, 1451, [48.6, 54.3, 62.4, 96.8], 47.7,
     &[(12, 54.9), (8, 48.9), (6, 46.3), (4, 51.3), (3, 62.0), (2, 77.2)],
     &[(8, 63.5), (6, 55.5), (4, 52.1), (3, 56.2), (2, 72.4), (1, 106.7)]),
    ("prefill_70_n46_t8192", 8192, 46, 1734, [186.0, 131.7, 77.0, 81.9], 80.9,
     &[(14, 126.6), (10, 130.5), (7, 139.3), (5, 151.5), (4, 164.1), (3, 182.6), (2, 226.5)],
     &[(10, 122.3), (7, 120.4), (5, 128.6), (4, 140.5), (3, 152.8), (2, 190.0), (1, 299.8)]),
    ("prefill_72_n2_t6417", 6417, 2, 3780, [116.5, 133.9, 155.6, 242.3], 110.2,
     &[(30, 118.4), (20, 94.6), (15, 83.2), (10, 93.7), (7, 104.7), (5, 122.3), (4, 128.3)],
     &[(20, 127.3), (15, 107.3), (10, 91.0), (7, 92.5), (5, 113.2), (4, 114.0), (3, 126.0), (2, 159.1)]),
    ("prefill_91_n42_t8192", 8192, 42, 1789, [183.8, 135.8, 79.0, 84.1], 77.6,
     &[(14, 123.6), (10, 125.7), (7, 130.6), (5, 140.1), (4, 149.6), (3, 174.0), (2, 222.6)],
     &[(10, 119.2), (7, 116.3), (5, 120.1), (4, 129.5), (3, 145.8), (2, 188.7), (1, 298.3)]),
    ("prefill_94_n26_t6306", 6306, 26, 2382, [130.7, 88.3, 102.4, 107.8], 86.1,
     &[(19, 112.5), (13, 103.3), (10, 101.1), (7, 105.5), (5, 112.9), (4, 124.9), (3, 140.0)],
     &[(13, 110.0), (10, 101.1), (7, 96.5), (5, 97.8), (4, 109.2), (3, 121.9), (2, 147.4)]),
    ("prefill_97_n38_t8192", 8192, 38, 1526, [177.4, 119.2, 68.8, 73.2], 74.3,
     &[(12, 117.1), (8, 127.3), (6, 134.7), (4, 157.3), (3, 185.4), (2, 226.4)],
     &[(8, 114.1), (6, 116.8), (4, 135.6), (3, 156.1), (2, 191.2), (1, 294.9)]),
];

/// The measured time of the plan the planner picks for `s` (cp: at the nearest measured segment length). A device
/// plan (no hint) is read as the launch its thresholds give the row's longest sequence, plus the other launches'
/// exits (`cost::exit_us`, measured on two anchors; the table has no exits).
fn measured_choice(s: &Shape, row: &Row) -> (String, f64) {
    let plan = prefill::choose(s, &H100, None).unwrap();
    let cp = |seg_chunks: u64, warpgroups: u64, kind: &str| {
        let sweep = if warpgroups == 2 { row.7 } else { row.6 };
        let (l, us) = *sweep
            .iter()
            .min_by_key(|(l, _)| l.abs_diff(seg_chunks))
            .unwrap();
        (format!("{kind} L{seg_chunks} (measured at L{l})"), us)
    };
    let fused = |bv: u32| {
        let i = [16, 32, 64, 128].iter().position(|&w| w == bv).unwrap();
        (format!("fused bv{bv}"), row.4[i])
    };
    match &plan {
        PrefillPlan::Fused { variant } => fused(128 / variant.variant.ctas_per_head),
        PrefillPlan::ContextParallel {
            seg_chunks,
            warpgroups,
            ..
        } => cp(*seg_chunks, *warpgroups, plan.kind().name()),
        PrefillPlan::Chunk64 { .. } => ("chunk64".to_string(), row.5),
        PrefillPlan::Device(d) => {
            let (runs, exiting) = d.route_at(row.3 as u64, row.1 as u64);
            let exit = exiting.iter().map(|c| exit_us(c, 132)).sum::<f64>();
            let (label, us) = match runs {
                DeviceRun::Fused(f) => fused(128 / f.unwrap().variant.ctas_per_head),
                DeviceRun::Chunk64 => ("chunk64".to_string(), row.5),
                DeviceRun::Cp { seg_chunks } => {
                    let wg = d.thresholds.warpgroups;
                    cp(seg_chunks, wg, if wg == 2 { "cp2" } else { "cp" })
                }
            };
            (format!("device: {label} + exits {exit:.1}"), us + exit)
        }
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
        let (label, us) = measured_choice(&hinted(n, t, longest), row);
        kinds.insert(label.split_whitespace().next().unwrap().to_string());
        let b = best(row);
        // each pick within 20% of that workload's best (a near tie of the estimates can pick a plan up to ~18%
        // slower, as prefill_14's cp L12 against chunk64, estimated 0.6 µs apart; the sum below is the tight check)
        assert!(
            us <= 1.20 * b,
            "{name}: picked {label} = {us} us, best measured {b} us"
        );
        chosen += us;
        oracle += b;
        blind += measured_choice(&hinted(n, t, 0), row).1;
    }
    // over the 25 workloads: within 3% of always picking the best measured plan (a pick between two measured
    // segment lengths reads the nearer one — prefill_72's L = 12, one pass-3 wave, reads L = 10, two waves, +11%),
    // and the length hint is worth more than a fifth of the time (without it the lengths are taken as equal)
    println!("hinted picks {chosen:.1} us, best measured {oracle:.1}, blind picks {blind:.1}");
    assert!(chosen <= 1.03 * oracle, "chosen {chosen} vs best {oracle}");
    // every plan kind is the right pick somewhere on this table (both walk forms included)
    assert_eq!(
        kinds.into_iter().collect::<Vec<_>>(),
        ["chunk64", "cp", "cp2", "fused"],
        "plan kinds picked"
    );
    // without the hint the device plan routes each call by its longest length (the launches that exit cost
    // device::exit_us): within 12% of the hinted picks (the host's equal-length plans alone: +44%)
    assert!(
        blind <= 1.12 * chosen,
        "hinted {chosen} vs without the hint {blind}"
    );
}

#[test]
fn estimates_track_the_measurements() {
    // the estimate of each workload's chosen plan is within 30% of what that plan measured (the model
    // ranks plans; it is not a timer — the many-sequence work term is the roughest part)
    for row in MEASURED {
        let (name, t, n, longest, ..) = *row;
        let s = hinted(n, t, longest);
        let (label, us) = measured_choice(&s, row);
        let plan = prefill::choose(&s, &H100, None).unwrap();
        let est = match &plan {
            PrefillPlan::Fused { variant } => host::fused_tile_us(&s, variant.variant, 132),
            PrefillPlan::ContextParallel {
                segments,
                warpgroups,
                ..
            } => cost::cp_us(&s, *segments, cost::walk_form(*warpgroups).unwrap(), 132).us,
            PrefillPlan::Chunk64 { .. } => cost::cp_us(&s, 1, &cost::WALK_FORMS[0], 132).us,
            PrefillPlan::Device(_) => unreachable!("hinted calls are planned on the host"),
        };
        assert!(
            (est / us - 1.0).abs() < 0.3,
            "{name}: {label} estimated {est:.1} us, measured {us} us"
        );
    }
}
