//! The prefill cost model's own rules (GPU-free): what the host takes from a length hint, how the cp estimates count
//! the other sequences, and that the pruned search over segment counts finds what the full sweep finds.

mod common;

use common::hinted;
use gdn_cuda::plan::prefill::cost;
use gdn_cuda::plan::Shape;

#[test]
fn lengths_clamp_the_hint() {
    let l = cost::Lengths::of(&hinted(32, 8192, 0));
    assert_eq!((l.longest, l.long_seqs), (256, 32));
    let l = cost::Lengths::of(&hinted(32, 8192, 5000));
    assert_eq!((l.longest, l.long_seqs), (5000, 1));
    assert_eq!(cost::Lengths::of(&hinted(32, 8192, 100)).longest, 256); // below the average: no information
    assert_eq!(cost::Lengths::of(&hinted(1, 100, 500)).longest, 100); // above T: T
    assert_eq!(cost::Lengths::of(&hinted(3, 0, 0)).longest, 0);
    // a second sequence nearly as long as the hinted longest (2637 and 3780 tokens) is cut too: its segments
    // count against pass 3's one wave (measured, prefill_72: L = 15 119.9 us, L = 10 — 144 pass-3 CTAs,
    // two waves — 144.9)
    let e = cost::best_cp(&hinted(2, 6417, 3780), 132).unwrap();
    assert_eq!(
        e.rest_ctas,
        2637u64.div_ceil(64) / e.seg_chunks * 16,
        "{e:?}"
    );
    assert!(e.seg_chunks > 10, "{e:?}");
    assert!(e.chains * (e.segments - 1) + e.rest_ctas <= 132, "{e:?}");
    // one segment is the chunk64 plan: no scan, no pass 3
    let e = cost::cp_us(&hinted(1, 8192, 0), 1, &cost::WALK_FORMS[0], 132);
    assert_eq!(
        (e.segments, e.seg_chunks, e.parts[2], e.parts[3]),
        (1, 128, 0.0, 0.0)
    );
}

#[test]
fn cp_candidates_match_the_full_sweep() {
    // the pruned sweep of cp_candidates gives what estimating every segment count gives
    let naive = |s: &Shape| -> Vec<cost::CpEstimate> {
        let mut out: Vec<cost::CpEstimate> = cost::WALK_FORMS
            .iter()
            .filter_map(|form| {
                (cost::MIN_SEGMENTS..=cost::MAX_SEGMENTS)
                    .map(|g| cost::cp_us(s, g, form, 132))
                    .filter(|e| {
                        e.segments >= cost::MIN_SEGMENTS
                            && e.seg_chunks >= cost::MIN_SEG_CHUNKS
                            && e.chains * (e.segments - 1) + e.rest_ctas <= 132
                            && e.chains * (2 * e.segments - 3) + 2 * e.rest_ctas <= 2 * 132
                    })
                    .min_by(|a, b| a.us.total_cmp(&b.us))
            })
            .collect();
        out.sort_by(|a, b| a.us.total_cmp(&b.us));
        out
    };
    let mut n_checked = 0;
    for n in [1usize, 2, 3, 5, 12, 40, 64] {
        for t in [
            64usize, 700, 767, 768, 1024, 2413, 4380, 8192, 16_384, 65_536, 200_000,
        ] {
            for hint in [0, t / 2, t] {
                let mut s = hinted(n, t, hint);
                for hv in [8usize, 2, 32] {
                    s.num_v_heads = hv;
                    assert_eq!(cost::cp_candidates(&s, 132), naive(&s), "{s:?}");
                    n_checked += 1;
                }
            }
        }
    }
    assert_eq!(n_checked, 7 * 11 * 3 * 3);
}
