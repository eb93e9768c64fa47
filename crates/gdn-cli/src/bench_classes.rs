//! The workload classes `gdn bench` runs: fixed anchor configurations (the shapes the peers' published
//! figures are measured on) and the contest-like mixes (the statistics of the official decode and prefill
//! sets, see [`gdn_core::workload`]), each with the one workload its correctness is checked on.

use gdn_core::workload::{contest_decode_mix, contest_prefill_mix, WorkloadSpec};
use gdn_core::{Heads, Op};

/// A group of workloads timed and reported together.
pub struct Class {
    pub name: &'static str,
    pub op: Op,
    /// A contest-like mix (reported with a weighted total) rather than anchors.
    pub mix: bool,
    /// Distinct workloads with their multiplicity in the class.
    pub items: Vec<(WorkloadSpec, usize)>,
    /// The workload checked against the float64 reference before timing.
    pub check: WorkloadSpec,
    /// Why the checked workload is a stand-in, when it is not one of the timed ones.
    pub check_note: Option<String>,
    /// Configurations left out, with the reason.
    pub skipped: Vec<String>,
}

/// How much to run.
pub struct Scope {
    pub cpu: bool,
    pub full: bool,
    pub quick: bool,
    pub seed: u64,
}

/// 30 fixed sequence lengths summing to 8120 tokens (the "30 mixed" prefill anchor): short, medium and a
/// few long sequences, like a batch of real prompts.
pub const MIXED_30: [usize; 30] = [
    17, 41, 64, 65, 100, 128, 150, 200, 256, 300, 333, 380, 400, 450, 512, 7, 33, 90, 127, 129,
    255, 257, 480, 511, 513, 600, 700, 384, 254, 384,
];

fn labelled(mut s: WorkloadSpec, label: String, normalised: bool) -> WorkloadSpec {
    s.label = label;
    s.normalize_qk = normalised;
    s
}

/// Distinct workloads of a mix (identical shapes differ only in random data) with their counts.
fn dedup(specs: Vec<WorkloadSpec>) -> Vec<(WorkloadSpec, usize)> {
    let mut out: Vec<(WorkloadSpec, usize)> = Vec::new();
    for s in specs {
        match out
            .iter_mut()
            .find(|(o, _)| o.op == s.op && o.seq_lens == s.seq_lens)
        {
            Some((_, n)) => *n += 1,
            None => out.push((s, 1)),
        }
    }
    out
}

pub fn decode_anchors(h: Heads, sc: &Scope) -> Class {
    let mut bs = vec![1, 4, 16, 64, 256, 1024];
    let mut skipped = vec![];
    if sc.quick {
        bs = vec![1, 64];
    } else if sc.cpu && !sc.full {
        bs.pop();
        skipped.push("B=1024 (cpu: use --full)".into());
    }
    let items = bs
        .iter()
        .map(|&b| {
            (
                labelled(WorkloadSpec::decode(h, b), format!("B={b}"), false),
                1,
            )
        })
        .collect();
    Class {
        name: "decode anchors",
        op: Op::Decode,
        mix: false,
        items,
        check: labelled(WorkloadSpec::decode(h, 64), "B=64".into(), false),
        check_note: None,
        skipped,
    }
}

pub fn decode_mix(h: Heads, _sc: &Scope) -> Class {
    let items = dedup(contest_decode_mix(h));
    let check = items[0].0.clone();
    Class {
        name: "decode contest mix",
        op: Op::Decode,
        mix: true,
        items,
        check,
        check_note: None,
        skipped: vec![],
    }
}

pub fn prefill_anchors(h: Heads, sc: &Scope) -> Class {
    let mut configs: Vec<(String, Vec<usize>)> = vec![
        ("1x128".into(), vec![128]),
        ("1x1024".into(), vec![1024]),
        ("1x8192".into(), vec![8192]),
        ("4x2048".into(), vec![2048; 4]),
        ("32x256".into(), vec![256; 32]),
        ("30 mixed (8120)".into(), MIXED_30.to_vec()),
        ("1x65536".into(), vec![65536]),
        ("64x1024".into(), vec![1024; 64]),
    ];
    let mut skipped = vec![];
    if sc.quick {
        configs.retain(|(n, _)| n == "1x128" || n == "1x1024");
    } else if sc.cpu && !sc.full {
        configs.truncate(6);
        skipped.push("1x65536, 64x1024 (cpu: use --full)".into());
    }
    let items = configs
        .into_iter()
        .map(|(n, lens)| (labelled(WorkloadSpec::prefill(h, &lens), n, true), 1))
        .collect();
    let stand_in = [128, 1, 63, 64, 65, 300, 0, 200];
    Class {
        name: "prefill anchors",
        op: Op::Prefill,
        mix: false,
        items,
        check: labelled(
            WorkloadSpec::prefill(h, &stand_in),
            format!("{stand_in:?}"),
            true,
        ),
        check_note: Some(
            "stand-in: 8 packed sequences (821 tokens, lengths around the 64-token chunk edges)"
                .into(),
        ),
        skipped,
    }
}

/// `--seq-lens`: comma-separated prefill lengths, `NxL` for N sequences of L tokens (e.g. `1048576` or
/// `64x1024,3x77`).
pub fn parse_seq_lens(s: &str) -> Result<Vec<usize>, String> {
    let mut lens = Vec::new();
    for part in s.split(',').map(str::trim) {
        let (n, l) = part.split_once('x').unwrap_or(("1", part));
        let num = |x: &str| {
            x.trim()
                .parse::<usize>()
                .map_err(|e| format!("--seq-lens: '{part}': {e}"))
        };
        let (n, l) = (num(n)?, num(l)?);
        lens.extend(std::iter::repeat_n(l, n));
    }
    if lens.is_empty() {
        return Err("--seq-lens: no sequences".into());
    }
    Ok(lens)
}

/// One prefill configuration of the caller's lengths (`--seq-lens`), checked on the anchors' stand-in (a
/// configuration of millions of tokens is too large for the float64 reference; `gdn check` covers those sizes).
pub fn prefill_custom(h: Heads, lens: &[usize]) -> Class {
    let tokens: usize = lens.iter().sum();
    let name = if lens.iter().all(|&l| l == lens[0]) {
        format!("{}x{}", lens.len(), lens[0])
    } else {
        format!("{} seqs, {tokens} tokens", lens.len())
    };
    let anchors = prefill_anchors(
        h,
        &Scope {
            cpu: false,
            full: true,
            quick: true,
            seed: 0,
        },
    );
    Class {
        name: "prefill custom",
        op: Op::Prefill,
        mix: false,
        items: vec![(labelled(WorkloadSpec::prefill(h, lens), name, true), 1)],
        check: anchors.check,
        check_note: anchors.check_note,
        skipped: vec![],
    }
}

pub fn prefill_mix(h: Heads, sc: &Scope) -> Class {
    let mut specs: Vec<WorkloadSpec> = contest_prefill_mix(h, sc.seed)
        .into_iter()
        .map(|mut s| {
            s.normalize_qk = true;
            s
        })
        .collect();
    let mut skipped = vec![];
    if sc.quick {
        let n = specs.len();
        specs.retain(|s| s.tokens() <= 1024);
        specs.truncate(8);
        skipped.push(format!(
            "{} of {n} workloads (--quick keeps 8 of <= 1024 tokens)",
            n - specs.len()
        ));
    }
    let (check, check_note) = match specs.iter().find(|s| s.tokens() <= 2048) {
        Some(s) => (s.clone(), None),
        None => (
            labelled(
                WorkloadSpec::prefill(h, &[500, 40]),
                "[500, 40]".into(),
                true,
            ),
            Some("stand-in: no mix workload has <= 2048 tokens".into()),
        ),
    };
    Class {
        name: "prefill contest mix",
        op: Op::Prefill,
        mix: true,
        items: dedup(specs),
        check,
        check_note,
        skipped,
    }
}

pub fn mtp_anchors(h: Heads, sc: &Scope) -> Class {
    let mut bs = vec![1, 16, 64, 256];
    let mut ts = vec![2, 4, 8];
    let mut skipped = vec![];
    if sc.quick {
        (bs, ts) = (vec![16], vec![4]);
    } else if sc.cpu && !sc.full {
        bs.pop();
        skipped.push("B=256 (cpu: use --full)".into());
    }
    let mut items = vec![];
    for &b in &bs {
        for &t in &ts {
            let mut s = labelled(WorkloadSpec::mtp(h, b, t), format!("B={b} T={t}"), true);
            s.intermediate = true;
            items.push((s, 1));
        }
    }
    let mut check = labelled(WorkloadSpec::mtp(h, 16, 4), "B=16 T=4".into(), true);
    check.intermediate = true;
    Class {
        name: "mtp anchors (+intermediate states)",
        op: Op::Mtp,
        mix: false,
        items,
        check,
        check_note: None,
        skipped,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn mixed_30_is_30_sequences_of_8120_tokens() {
        assert_eq!(super::MIXED_30.len(), 30);
        assert_eq!(super::MIXED_30.iter().sum::<usize>(), 8120);
    }
}
