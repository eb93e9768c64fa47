//! Seeded random workloads: a [`WorkloadSpec`] says what to draw (operation, heads, sequence lengths, state
//! options), [`generate`] draws the tensors the way flashinfer-bench and the peers' script do, and the contest
//! mixes reproduce the statistics of the official decode and prefill workload sets (as participants published them).
//!
//! Draws: q, k `randn` (optionally L2-normalised per head), v `randn`, state `0.1·randn`, `A_log = log(U(1,16))`,
//! `dt_bias`, `a`, `b` `randn`; drawn in f32 and rounded once to the spec's activation dtype (bf16 or fp16:
//! q, k, v, a, b) and state dtype. With `extreme_gates`, `A_log` reaches 5 and `a` reaches +40 (decay → 0).
//! MTP pool indices are a seeded subset of the pool rows (serving mode: `padding` of them set to -1); the
//! intermediate buffer is filled with `randn` so rows a run must not touch are detectable.

use crate::definition::{Definition, Heads, Op};
use crate::dtype::DType;
use crate::error::Result;
use crate::problem::{MtpMode, Problem, RunOptions};
pub use crate::serving_draw::ServingDraw;
pub use crate::tensor::to_dtype;
use crate::tensor::{Data, Tensor, TensorMap};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_distr::StandardNormal;

/// The distribution of `A_log`, which sets how fast each head's state decays (per token by
/// `exp(-exp(A_log) · softplus(a + dt_bias))`, with `a`, `dt_bias` drawn `randn` in every regime).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum GateRegime {
    /// `A_log = log U(1, 16)` (flashinfer-bench and the anchors): every head decays fast.
    #[default]
    Anchor,
    /// `A_log = log U(0, 16)`, as HF transformers initialises Qwen3-Next: most heads decay fast, a few slowly.
    Model,
    /// `A_log = log U(1e-5, 1e-4)`: every head keeps its state (decay per token ≥ 0.999 while
    /// `a + dt_bias` ≤ 10).
    Slow,
}

impl GateRegime {
    pub const ALL: [GateRegime; 3] = [GateRegime::Anchor, GateRegime::Model, GateRegime::Slow];

    pub fn name(self) -> &'static str {
        match self {
            GateRegime::Anchor => "anchor",
            GateRegime::Model => "model",
            GateRegime::Slow => "slow",
        }
    }

    /// The range `exp(A_log)` is drawn from, uniformly.
    fn range(self) -> (f32, f32) {
        match self {
            GateRegime::Anchor => (1.0, 16f32.ln().exp()), // (the draw flashinfer-bench's `log U(1, 16)` gives)
            GateRegime::Model => (1e-6, 16.0),
            GateRegime::Slow => (1e-5, 1e-4),
        }
    }
}

impl std::str::FromStr for GateRegime {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        GateRegime::ALL
            .into_iter()
            .find(|g| g.name() == s)
            .ok_or_else(|| format!("unknown gate regime '{s}' (anchor, model, slow)"))
    }
}

/// What to draw for one workload.
#[derive(Clone, Debug, PartialEq)]
pub struct WorkloadSpec {
    pub op: Op,
    pub heads: Heads,
    /// prefill: per-sequence lengths; decode: B entries of 1; mtp: B entries of T.
    pub seq_lens: Vec<usize>,
    /// MTP pool rows (>= B); ignored otherwise.
    pub pool_size: usize,
    /// Draw a state input (else it is absent: zeros). MTP always has a pool.
    pub with_state: bool,
    /// F32 (the definitions), or BF16 / F16 (gdn's 16-bit-state extensions: state, pool and the state
    /// output in that dtype).
    pub state_dtype: DType,
    /// BF16 (the definitions) or F16 (gdn's fp16 extension): q, k, v, a, b (and so the output) in that dtype.
    pub act_dtype: DType,
    /// L2-normalise q and k per head (what callers do in models; flashinfer-bench's randn does not).
    pub normalize_qk: bool,
    /// MTP: pass an intermediate-states buffer.
    pub intermediate: bool,
    pub mtp_mode: MtpMode,
    /// Serving-mode MTP: how many requests are padding (index -1).
    pub padding: usize,
    /// The `scale` scalar; 0 means the default 1/sqrt(head_size).
    pub scale: f32,
    /// Gates in the saturated regime: `a` up to +40, and under the anchor regime `A_log` up to 5 (other regimes
    /// keep their own `A_log` range).
    pub extreme_gates: bool,
    /// How fast the heads' states decay ([`GateRegime`]); the anchors' regime by default.
    pub gate_regime: GateRegime,
    /// Serving tensors drawn on top of the definition's (default: none).
    pub serving: ServingDraw,
    pub label: String,
}

impl WorkloadSpec {
    fn base(op: Op, heads: Heads, seq_lens: Vec<usize>, label: String) -> Self {
        WorkloadSpec {
            op,
            heads,
            pool_size: seq_lens.len(),
            seq_lens,
            with_state: true,
            state_dtype: DType::F32,
            act_dtype: DType::BF16,
            normalize_qk: op != Op::Decode,
            intermediate: op == Op::Mtp,
            mtp_mode: MtpMode::Definition,
            padding: 0,
            scale: 0.0,
            extreme_gates: false,
            gate_regime: GateRegime::Anchor,
            serving: ServingDraw::default(),
            label,
        }
    }

    /// Decode at batch `batch`, raw randn q/k (as flashinfer-bench draws them).
    pub fn decode(heads: Heads, batch: usize) -> Self {
        Self::base(
            Op::Decode,
            heads,
            vec![1; batch],
            format!("decode_b{batch}"),
        )
    }

    /// Prefill of the given sequence lengths, normalised q/k.
    pub fn prefill(heads: Heads, seq_lens: &[usize]) -> Self {
        let total: usize = seq_lens.iter().sum();
        let label = format!("prefill_n{}_t{total}", seq_lens.len());
        Self::base(Op::Prefill, heads, seq_lens.to_vec(), label)
    }

    /// MTP with `batch` requests of `t` tokens, pool of `batch` rows, intermediate states, definition mode.
    pub fn mtp(heads: Heads, batch: usize, t: usize) -> Self {
        Self::base(Op::Mtp, heads, vec![t; batch], format!("mtp_b{batch}_t{t}"))
    }

    pub fn definition(&self) -> Definition {
        Definition::new(self.op, self.heads)
    }

    /// Total tokens.
    pub fn tokens(&self) -> usize {
        self.seq_lens.iter().sum()
    }

    pub fn options(&self) -> RunOptions {
        RunOptions {
            scale: None,
            mtp_mode: self.mtp_mode,
            serving: self.serving.options,
        }
    }

    /// Validates `tensors` (drawn from this spec, or altered) against this spec's definition and options.
    pub fn problem(&self, tensors: &TensorMap) -> Result<Problem> {
        Problem::from_tensors(&self.definition(), tensors, &self.options())
    }

    fn batch(&self) -> usize {
        self.seq_lens.len()
    }

    /// Tokens per request for decode/MTP (the first entry; all are equal).
    fn seq_len(&self) -> usize {
        self.seq_lens.first().copied().unwrap_or(1)
    }

    /// Token-major shape prefix plus `heads` (and `last`, when given).
    fn token_shape(&self, heads: usize, last: Option<usize>) -> Vec<usize> {
        let mut s = match self.op {
            Op::Prefill => vec![self.tokens()],
            _ => vec![self.batch(), self.seq_len()],
        };
        s.push(heads);
        s.extend(last);
        s
    }
}

/// Draws the workload's tensors, named as the definition's inputs (scale as a scalar f32 tensor).
pub fn generate(spec: &WorkloadSpec, seed: u64) -> TensorMap {
    let mut rng = StdRng::seed_from_u64(seed);
    let h = &spec.heads;
    let (d, hq, hv) = (h.head_size, h.num_q_heads, h.num_v_heads);
    let n_tok = spec.tokens();
    let mut m = TensorMap::new();
    let mut put = |name: &str, shape: Vec<usize>, data: Data| {
        m.insert(name.to_string(), Tensor::new(shape, data));
    };
    let act = |x: Vec<f32>| to_dtype(spec.act_dtype, x);
    let q = qk(&mut rng, n_tok * hq, d, spec.normalize_qk);
    put("q", spec.token_shape(hq, Some(d)), act(q));
    let k = qk(&mut rng, n_tok * hq, d, spec.normalize_qk);
    put("k", spec.token_shape(hq, Some(d)), act(k));
    let v = randn(&mut rng, n_tok * hv * d, 1.0);
    put("v", spec.token_shape(hv, Some(d)), act(v));
    let state_rows = match spec.op {
        Op::Mtp => spec.pool_size.max(spec.batch()),
        _ => spec.batch(),
    };
    if spec.with_state || spec.op == Op::Mtp {
        let st = randn(&mut rng, state_rows * hv * d * d, 0.1);
        let data = to_dtype(spec.state_dtype, st);
        put(
            spec.definition().state_input(),
            vec![state_rows, hv, d, d],
            data,
        );
    }
    let (lo, hi) = match spec.gate_regime {
        GateRegime::Anchor if spec.extreme_gates => (1.0, 5f32.exp()),
        g => g.range(),
    };
    let a_log: Vec<f32> = (0..hv).map(|_| rng.random_range(lo..hi).ln()).collect();
    put("A_log", vec![hv], Data::F32(a_log));
    put("dt_bias", vec![hv], Data::F32(randn(&mut rng, hv, 1.0)));
    let mut a = randn(&mut rng, n_tok * hv, 1.0);
    if spec.extreme_gates {
        // A quarter of the gates pushed into saturation (softplus ≈ a, decay ≈ exp(-148·40) = 0).
        for e in a.iter_mut() {
            if rng.random_range(0..4) == 0 {
                *e = rng.random_range(10.0..40.0);
            }
        }
    }
    put("a", spec.token_shape(hv, None), act(a));
    let b = randn(&mut rng, n_tok * hv, 1.0);
    put("b", spec.token_shape(hv, None), act(b));
    if spec.op == Op::Prefill {
        let mut cu = vec![0i64];
        for &l in &spec.seq_lens {
            cu.push(cu.last().unwrap() + l as i64);
        }
        put("cu_seqlens", vec![cu.len()], Data::I64(cu));
    }
    if spec.op == Op::Mtp {
        let idx = pool_indices(&mut rng, spec, state_rows);
        put("initial_state_indices", vec![spec.batch()], Data::I32(idx));
        if spec.intermediate {
            let t = spec.seq_len();
            let buf = randn(&mut rng, state_rows * t * hv * d * d, 1.0);
            put(
                "intermediate_states_buffer",
                vec![state_rows, t, hv, d, d],
                Data::F32(buf),
            );
        }
    }
    put("scale", vec![], Data::F32(vec![spec.scale]));
    let target = crate::serving_draw::Target {
        op: spec.op,
        heads: spec.heads,
        seq_lens: &spec.seq_lens,
        pool_size: spec.pool_size,
        state_dtype: spec.state_dtype,
        serving: &spec.serving,
    };
    crate::serving_draw::apply(&target, &mut m, seed);
    m
}

fn randn(rng: &mut StdRng, n: usize, sigma: f32) -> Vec<f32> {
    (0..n)
        .map(|_| sigma * rng.sample::<f32, _>(StandardNormal))
        .collect()
}

/// `rows` vectors of length `d`, randn, optionally L2-normalised (in f32; the caller rounds them).
fn qk(rng: &mut StdRng, rows: usize, d: usize, normalize: bool) -> Vec<f32> {
    let mut x = randn(rng, rows * d, 1.0);
    if normalize {
        for row in x.chunks_exact_mut(d) {
            let norm = row.iter().map(|e| e * e).sum::<f32>().sqrt().max(1e-6);
            row.iter_mut().for_each(|e| *e /= norm);
        }
    }
    x
}

/// A seeded subset of the pool rows, one per request; in serving mode `padding` entries become -1.
fn pool_indices(rng: &mut StdRng, spec: &WorkloadSpec, pool: usize) -> Vec<i32> {
    let mut rows: Vec<i32> = (0..pool as i32).collect();
    rows.shuffle(rng);
    rows.truncate(spec.batch());
    if spec.mtp_mode == MtpMode::Serving {
        let mut slots: Vec<usize> = (0..rows.len()).collect();
        slots.shuffle(rng);
        for &s in slots.iter().take(spec.padding) {
            rows[s] = -1;
        }
    }
    rows
}

/// The contest-like decode mix: 54 workloads, B = 1 (×10), 4 (×8), 8, 16, 32, 48 (×7 each), 64 (×8), raw randn q/k.
pub fn contest_decode_mix(heads: Heads) -> Vec<WorkloadSpec> {
    let counts = [(1, 10), (4, 8), (8, 7), (16, 7), (32, 7), (48, 7), (64, 8)];
    counts
        .iter()
        .flat_map(|&(b, n)| {
            (0..n).map(move |i| {
                let mut s = WorkloadSpec::decode(heads, b);
                s.label = format!("decode_b{b}_{i}");
                s
            })
        })
        .collect()
}

/// The longest prefill sequence of the contest set.
const MAX_SEQ: usize = 5637;
/// The largest prefill workload (16 of the 100 are exactly this).
const MAX_TOTAL: usize = 8192;
/// Sum of the 100 totals (mean 1831).
const MIX_TOKENS: usize = 183_100;

/// 100 prefill workloads reproducing the official prefill set's statistics (totals: min 6, median ~139, mean ~1831, max 8192
/// with 16 at 8192 and 56 under 256; 1..57 sequences, median 2, p90 ~35; per-sequence p50 ~41, p90 ~662,
/// p99 ~2822, max 5637), drawn from `seed`. q/k normalised.
pub fn contest_prefill_mix(heads: Heads, seed: u64) -> Vec<WorkloadSpec> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut plans = small_workloads(&mut rng);
    let small_sum: usize = plans.iter().map(|p| p.0).sum();
    plans.extend(medium_workloads(
        &mut rng,
        MIX_TOKENS - 16 * MAX_TOTAL - small_sum,
    ));
    // 16 workloads of exactly 8192 tokens: most split into many sequences (the p90 of 35 sequences).
    for i in 0..16 {
        let n = match i {
            0 => 35,
            1..=10 => rng.random_range(36..=57),
            _ => rng.random_range(2..=12),
        };
        plans.push((MAX_TOTAL, n));
    }
    plans.shuffle(&mut rng);
    let mut longest_placed = false;
    plans
        .iter()
        .enumerate()
        .map(|(i, &(total, n))| {
            let mut lens = split_total(&mut rng, total, n);
            if !longest_placed && total == MAX_TOTAL && n <= 12 {
                force_longest(&mut rng, &mut lens);
                longest_placed = true;
            }
            let mut s = WorkloadSpec::prefill(heads, &lens);
            s.label = format!("prefill_{i:02}_n{}_t{total}", lens.len());
            s
        })
        .collect()
}

/// 56 (total, sequences) plans under 256 tokens, log-spaced so that the overall median lands near 139.
fn small_workloads(rng: &mut StdRng) -> Vec<(usize, usize)> {
    (0..56)
        .map(|i| {
            let u = (i as f64 + rng.random_range(0.0..0.8)) / 55.0;
            let total = if i == 0 {
                6.0
            } else if u <= 0.9 {
                6.0 * (125.0f64 / 6.0).powf(u / 0.9)
            } else {
                125.0 * (250.0f64 / 125.0).powf((u - 0.9) / 0.1)
            } as usize;
            let n = match i % 8 {
                0..=4 => 1,
                5 | 6 => 2,
                _ => rng.random_range(3..=6),
            };
            (total.clamp(6, 255), n.min(total))
        })
        .collect()
}

/// 28 plans in [256, 8000) tokens summing to about `target` (so that the overall mean is ~1831).
fn medium_workloads(rng: &mut StdRng, target: usize) -> Vec<(usize, usize)> {
    let us: Vec<f64> = (0..28).map(|_| rng.random_range(0.0..1.0)).collect();
    fit_log_totals(&us, 256.0, 8000.0, target)
        .into_iter()
        .enumerate()
        .map(|(i, total)| {
            let n = match i % 4 {
                0 => 1,
                1 => 2,
                2 => rng.random_range(3..=12),
                _ => rng.random_range(12..=34),
            };
            (total, n)
        })
        .collect()
}

/// Totals `lo·(hi/lo)^(u^p)` with the exponent `p` chosen (bisection) so that they sum to ~`target`.
fn fit_log_totals(us: &[f64], lo: f64, hi: f64, target: usize) -> Vec<usize> {
    let totals = |p: f64| -> Vec<usize> {
        us.iter()
            .map(|&u| (lo * (hi / lo).powf(u.powf(p))) as usize)
            .collect()
    };
    let (mut a, mut b) = (0.05f64, 20.0f64);
    for _ in 0..60 {
        let mid = (a * b).sqrt();
        let sum: usize = totals(mid).iter().sum();
        // A larger exponent pushes values towards lo, lowering the sum.
        if sum > target {
            a = mid;
        } else {
            b = mid;
        }
    }
    totals((a * b).sqrt())
}

/// Splits `total` tokens into `n` sequences (≥ 1 each, ≤ MAX_SEQ) with heavy-tailed lognormal weights; `n`
/// is raised to the fewest sequences of at most MAX_SEQ tokens that hold `total` (a single 8000-token sequence
/// cannot be one of the set's).
fn split_total(rng: &mut StdRng, total: usize, n: usize) -> Vec<usize> {
    let n = n.clamp(total.div_ceil(MAX_SEQ).max(1), total.max(1));
    let w: Vec<f64> = (0..n)
        .map(|_| (1.6 * rng.sample::<f64, _>(StandardNormal)).exp())
        .collect();
    let wsum: f64 = w.iter().sum();
    let spare = total - n;
    let mut lens: Vec<usize> = w
        .iter()
        .map(|&x| 1 + (spare as f64 * x / wsum) as usize)
        .collect();
    // Clip at MAX_SEQ; the clipped excess and the rounding remainder go round-robin to the others.
    let mut rest = total - lens.iter().sum::<usize>();
    for l in lens.iter_mut() {
        if *l > MAX_SEQ {
            rest += *l - MAX_SEQ;
            *l = MAX_SEQ;
        }
    }
    let mut i = 0;
    while rest > 0 {
        let j = i % n;
        let add = rest.min(MAX_SEQ - lens[j]).min(rest.div_ceil(n).max(1));
        lens[j] += add;
        rest -= add;
        i += 1;
    }
    lens
}

/// Makes the first sequence exactly MAX_SEQ tokens long and re-splits the rest (total kept).
fn force_longest(rng: &mut StdRng, lens: &mut Vec<usize>) {
    let total: usize = lens.iter().sum();
    let n = lens.len();
    if n < 2 || total < MAX_SEQ + n - 1 {
        return;
    }
    let mut tail = split_total(rng, total - MAX_SEQ, n - 1);
    lens.clear();
    lens.push(MAX_SEQ);
    lens.append(&mut tail);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Percentile of a sorted slice.
    fn pct(v: &[usize], p: f64) -> usize {
        v[((v.len() - 1) as f64 * p).round() as usize]
    }

    #[test]
    fn prefill_mix_statistics() {
        let heads = Heads::new(4, 8, 128).unwrap();
        for seed in [0u64, 1, 2, 42] {
            let mix = contest_prefill_mix(heads, seed);
            let mut totals: Vec<usize> = mix.iter().map(WorkloadSpec::tokens).collect();
            let mut nseq: Vec<usize> = mix.iter().map(|s| s.seq_lens.len()).collect();
            let mut lens: Vec<usize> = mix.iter().flat_map(|s| s.seq_lens.clone()).collect();
            totals.sort_unstable();
            nseq.sort_unstable();
            lens.sort_unstable();
            let mean = totals.iter().sum::<usize>() as f64 / 100.0;
            let line = format!(
                "seed {seed}: totals min {} med {} mean {mean:.0} max {} at8192 {} under256 {} | \
                 seqs min {} med {} p90 {} max {} | lens p50 {} p90 {} p99 {} max {}",
                totals[0],
                pct(&totals, 0.5),
                totals[99],
                totals.iter().filter(|&&t| t == 8192).count(),
                totals.iter().filter(|&&t| t < 256).count(),
                nseq[0],
                pct(&nseq, 0.5),
                pct(&nseq, 0.9),
                nseq[99],
                pct(&lens, 0.5),
                pct(&lens, 0.9),
                pct(&lens, 0.99),
                lens[lens.len() - 1],
            );
            eprintln!("{line}");
            assert_eq!(mix.len(), 100);
            assert_eq!((totals[0], totals[99]), (6, 8192), "{line}");
            assert_eq!(totals.iter().filter(|&&t| t == 8192).count(), 16, "{line}");
            assert_eq!(totals.iter().filter(|&&t| t < 256).count(), 56, "{line}");
            assert!((100..=180).contains(&pct(&totals, 0.5)), "{line}");
            assert!((1650.0..=2000.0).contains(&mean), "{line}");
            assert!(nseq[0] == 1 && nseq[99] <= 57, "{line}");
            assert_eq!(pct(&nseq, 0.5), 2, "{line}");
            assert!((25..=45).contains(&pct(&nseq, 0.9)), "{line}");
            assert_eq!(lens[lens.len() - 1], MAX_SEQ, "{line}");
            assert!((20..=80).contains(&pct(&lens, 0.5)), "{line}");
            assert!((350..=1100).contains(&pct(&lens, 0.9)), "{line}");
            assert!((1500..=4500).contains(&pct(&lens, 0.99)), "{line}");
            assert!(mix.iter().all(|s| s.normalize_qk && s.op == Op::Prefill));
        }
    }

    #[test]
    fn every_seed_draws_a_mix_within_the_longest_sequence() {
        let heads = Heads::new(4, 8, 128).unwrap();
        for seed in 0..24u64 {
            let mix = contest_prefill_mix(heads, seed);
            assert_eq!(mix.len(), 100, "seed {seed}");
            for s in &mix {
                assert!(
                    s.seq_lens.iter().all(|&l| (1..=MAX_SEQ).contains(&l)),
                    "seed {seed}: {}",
                    s.label
                );
            }
        }
    }

    #[test]
    fn decode_mix_counts() {
        let mix = contest_decode_mix(Heads::new(4, 8, 128).unwrap());
        assert_eq!(mix.len(), 54);
        let count = |b: usize| mix.iter().filter(|s| s.seq_lens.len() == b).count();
        assert_eq!([1, 4, 8, 16, 32, 48, 64].map(count), [10, 8, 7, 7, 7, 7, 8]);
        assert!(mix.iter().all(|s| !s.normalize_qk && s.op == Op::Decode));
    }

    #[test]
    fn generation_is_seeded_and_valid() {
        let heads = Heads::new(2, 4, 64).unwrap();
        let mut spec = WorkloadSpec::mtp(heads, 4, 3);
        spec.pool_size = 7;
        spec.mtp_mode = MtpMode::Serving;
        spec.padding = 2;
        let (a, b) = (generate(&spec, 5), generate(&spec, 5));
        assert_eq!(a, b);
        assert_ne!(a, generate(&spec, 6));
        let idx = a["initial_state_indices"].as_i32().unwrap();
        assert_eq!(idx.iter().filter(|&&i| i == -1).count(), 2);
        let p = spec.problem(&a).unwrap();
        assert_eq!((p.dims.state_rows, p.dims.seq_len), (7, 3));
    }
}
