//! Grids and the checks every launch passes: the grid of each variant for a shape (by its `GridOrder`, with the
//! slot counts of the prefill64 launches, which also size their workspace), the call checks that hold for every
//! kernel (architecture, head size, head ratio, sequence length), and `configure`, which turns a variant into a
//! `Launch` within the hardware's grid and shared-memory limits.

use crate::kernels::registry::{self, prefill64, Family, GridOrder, StateDtype, Variant, HEAD_DIM};
use crate::plan::{DeviceCaps, Launch, Rejection, Shape, MAX_GRID_X, MAX_GRID_YZ, MIN_CC};
use gdn_core::Op;
use std::sync::Arc;

/// Chunk slots of the prefill64 plans for T tokens in N sequences: `T / 64 + N + 1` (64-bit). The prep runs
/// one CTA per (slot, value head); the workspace holds one chunk record per (slot, value head).
pub fn prefill64_slots(total_tokens: u64, num_seqs: u64) -> u64 {
    (total_tokens / prefill64::CHUNK)
        .saturating_add(num_seqs)
        .saturating_add(1)
}

/// Segment slots of the context-parallel plan with segments of `seg_chunks` (L >= 1) chunks:
/// `(T / 64 + N + 1) / L + N + 1` — sequence i's segments start at `(cu[i] / 64 + i) / L + i`
/// (`kernels/prefill_chunk64/`, "context parallelism").
pub fn prefill64_seg_slots(total_tokens: u64, num_seqs: u64, seg_chunks: u64) -> u64 {
    prefill64_slots(total_tokens, num_seqs) / seg_chunks.max(1) + num_seqs + 1
}

/// Tokens of the shortest sequence that needs the context-parallel scan with segments of `seg_chunks` (L >= 1)
/// chunks: one with three segments or more has more than 2L chunks, i.e. at least 128·L + 1 tokens.
pub fn prefill64_scan_min_tokens(seg_chunks: u64) -> u64 {
    2 * prefill64::CHUNK * seg_chunks.max(1) + 1
}

/// Sequences that can need the context-parallel scan with segments of `seg_chunks` chunks: their lengths sum
/// to at most T, so `min(N, T / prefill64_scan_min_tokens(L))`. From T, N and L alone (the lengths stay on the
/// device).
pub fn prefill64_scan_seqs(total_tokens: u64, num_seqs: u64, seg_chunks: u64) -> u64 {
    num_seqs.min(total_tokens / prefill64_scan_min_tokens(seg_chunks))
}

/// The grid of a variant for a shape (unchecked; u64 so that overflow is visible to the limit checks).
pub fn grid_of(v: &Variant, s: &Shape) -> (u64, u64, u64) {
    let (n, h, hv) = (
        s.num_seqs as u64,
        s.num_q_heads as u64,
        s.num_v_heads as u64,
    );
    let cph = v.ctas_per_head as u64;
    match v.grid {
        GridOrder::HeadMajor => (n * cph, h, hv / h.max(1)),
        GridOrder::Linear => (n * hv * cph, 1, 1),
        GridOrder::ChunkSlots => (prefill64_slots(s.total_tokens as u64, n) * hv, 1, 1),
        GridOrder::SegmentSlots | GridOrder::LongSeqs => cp_grid(v, s, 1),
        GridOrder::SplitLongest => ((n + registry::split_groups(n)) * hv * cph, 1, 1),
    }
}

/// The grid of a context-parallel launch (`GridOrder::SegmentSlots`: a pass; `GridOrder::LongSeqs`: the scan)
/// with segments of `seg_chunks` chunks. (Other grid orders do not depend on it: `grid_of`.)
pub fn cp_grid(v: &Variant, s: &Shape, seg_chunks: u64) -> (u64, u64, u64) {
    let (t, n, hv, cph) = (
        s.total_tokens as u64,
        s.num_seqs as u64,
        s.num_v_heads as u64,
        v.ctas_per_head as u64,
    );
    match v.grid {
        GridOrder::SegmentSlots => (prefill64_seg_slots(t, n, seg_chunks), hv, cph),
        GridOrder::LongSeqs => (prefill64_scan_seqs(t, n, seg_chunks) * hv * cph, 1, 1),
        _ => grid_of(v, s),
    }
}

/// The kernel family of an op (prefill: the fused kernels).
pub(crate) fn family_of(op: Op) -> Family {
    match op {
        Op::Decode => Family::Decode,
        Op::Mtp => Family::Mtp,
        Op::Prefill => Family::Prefill,
    }
}

/// Checks that hold for every kernel: architecture, head size, head ratio, sequence length.
pub(crate) fn check_call(s: &Shape, caps: &DeviceCaps) -> Result<(), Rejection> {
    if caps.arch.cc < MIN_CC {
        return Err(Rejection::Arch { cc: caps.cc });
    }
    if s.head_size != HEAD_DIM as usize {
        return Err(Rejection::HeadSize { got: s.head_size });
    }
    if s.num_q_heads == 0 || s.num_v_heads == 0 || !s.num_v_heads.is_multiple_of(s.num_q_heads) {
        return Err(Rejection::HeadRatio {
            q: s.num_q_heads,
            v: s.num_v_heads,
        });
    }
    let seq_ok = match s.op {
        Op::Decode => s.seq_len == 1,
        Op::Mtp => s.seq_len >= 1 && s.seq_len <= i32::MAX as usize,
        Op::Prefill => true,
    };
    if !seq_ok {
        return Err(Rejection::SeqLen {
            op: s.op,
            got: s.seq_len,
        });
    }
    Ok(())
}

/// The variant an override names, if it is of `family` and `state`.
pub(crate) fn named(
    name: &str,
    family: Family,
    state: StateDtype,
) -> Result<&'static Variant, Rejection> {
    let bad = |problem: String| Rejection::Override {
        name: name.to_string(),
        problem,
    };
    let v = registry::find(name).ok_or_else(|| bad("no such kernel in the registry".into()))?;
    if v.family != family || v.state != state {
        return Err(bad(format!(
            "it is a {:?} kernel for {} state; this call needs {family:?} with {} state",
            v.family,
            v.state.name(),
            state.name()
        )));
    }
    Ok(v)
}

/// The launch of `variant` for `s`, checked against the grid limits and the device's shared memory.
pub(crate) fn configure(
    variant: &'static Variant,
    s: &Shape,
    caps: &DeviceCaps,
    why: impl Into<Arc<str>>,
) -> Result<Launch, Rejection> {
    if !caps.builds(variant.module) {
        return Err(Rejection::NotBuilt {
            kernel: variant.name,
            arch: caps.arch,
            builds_for: variant.module.arches.to_string(),
        });
    }
    let (gx, gy, gz) = grid_of(variant, s);
    for (dim, got, max) in [
        ("x", gx, MAX_GRID_X),
        ("y", gy, MAX_GRID_YZ),
        ("z", gz, MAX_GRID_YZ),
    ] {
        if got > max {
            return Err(Rejection::Grid { dim, got, max });
        }
    }
    if variant.dyn_smem > caps.max_dyn_smem {
        return Err(Rejection::SharedMemory {
            kernel: variant.name,
            need: variant.dyn_smem,
            max: caps.max_dyn_smem,
        });
    }
    Ok(Launch {
        variant,
        grid: (gx as u32, gy as u32, gz as u32),
        block: variant.block,
        dyn_smem: variant.dyn_smem,
        why: why.into(),
    })
}

/// `configure` for a context-parallel launch: its grid with segments of `seg_chunks` chunks.
pub(crate) fn configure_cp(
    variant: &'static Variant,
    s: &Shape,
    caps: &DeviceCaps,
    why: impl Into<Arc<str>>,
    seg_chunks: u64,
) -> Result<Launch, Rejection> {
    let mut c = configure(variant, s, caps, why)?;
    let (gx, gy, gz) = cp_grid(variant, s, seg_chunks);
    if gx > MAX_GRID_X {
        return Err(Rejection::Grid {
            dim: "x",
            got: gx,
            max: MAX_GRID_X,
        });
    }
    c.grid = if s.num_seqs == 0 {
        (0, gy as u32, gz as u32)
    } else {
        (gx as u32, gy as u32, gz as u32)
    };
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scan_seqs_bound_every_split() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut rnd = |m: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % m
        };
        for _ in 0..2000 {
            let (n, l) = (1 + rnd(40), 1 + rnd(6));
            let t = rnd(20_000);
            // random split: N − 1 cut points in [0, T]
            let mut cuts: Vec<u64> = (0..n - 1).map(|_| rnd(t + 1)).collect();
            cuts.push(0);
            cuts.push(t);
            cuts.sort_unstable();
            let long = cuts.windows(2).filter(|w| w[1] - w[0] > 128 * l).count() as u64;
            let k = prefill64_scan_seqs(t, n, l);
            assert!(long <= k, "T {t} N {n} L {l}: {long} > {k}");
            // reached: k sequences of 128L + 1 tokens, the rest of T in one more (or in the last of them)
            let mut lens = vec![128 * l + 1; k as usize];
            let rest = t - k * (128 * l + 1);
            match lens.last_mut() {
                Some(last) if k == n => *last += rest,
                _ => lens.push(rest),
            }
            assert!(lens.len() as u64 <= n && lens.iter().sum::<u64>() == t);
            assert_eq!(lens.iter().filter(|&&x| x > 128 * l).count() as u64, k);
        }
        assert_eq!(prefill64_scan_seqs(8192, 44, 10), 6);
        assert_eq!(prefill64_scan_seqs(65_536, 1, 64), 1);
        assert_eq!(prefill64_scan_seqs(256, 8, 2), 0); // no sequence can have three segments: no launch
    }

    #[test]
    fn cp_segment_slots_cover_every_split() {
        // g(i) = f(i) / L + i with f(i) = cu[i] / 64 + i must leave nseg_i = max(1, ceil(nch_i / L)) slots per
        // sequence below prefill64_seg_slots: checked over every split of small T into N sequences.
        for t in [0u64, 1, 63, 64, 65, 130, 300, 700] {
            for n in 1u64..=4 {
                for l in [1u64, 2, 3, 7] {
                    let mut splits = vec![vec![0u64]];
                    for _ in 1..n {
                        splits = splits
                            .into_iter()
                            .flat_map(|s| {
                                let last = *s.last().unwrap();
                                (last..=t).step_by(((t / 6).max(1)) as usize).map(move |x| {
                                    let mut s2 = s.clone();
                                    s2.push(x);
                                    s2
                                })
                            })
                            .collect();
                    }
                    for mut cu in splits {
                        cu.push(t);
                        let g = |i: usize| (cu[i] / 64 + i as u64) / l + i as u64;
                        for i in 0..n as usize {
                            let nch = (cu[i + 1] - cu[i]).div_ceil(64);
                            let nseg = nch.div_ceil(l).max(1);
                            let next = if i + 1 < n as usize {
                                g(i + 1)
                            } else {
                                u64::MAX
                            };
                            assert!(g(i) + nseg <= next, "overlap {cu:?} L={l} i={i}");
                            assert!(g(i) + nseg <= prefill64_seg_slots(t, n, l), "{cu:?} L={l}");
                        }
                    }
                }
            }
        }
    }
}
