//! The CPU backend against the float64 reference: property tests over shapes, head configurations, state
//! options and MTP modes, with the contest rule on every element plus rel-L2 bounds; every output element is
//! written (outputs start poisoned with NaN) and intermediate rows no request owns keep the caller's values.

use gdn_core::compare::{compare, Tolerance, CONTEST};
use gdn_core::cpu::CpuBackend;
use gdn_core::reference;
use gdn_core::workload::{generate, WorkloadSpec};
use gdn_core::{Backend, DType, Heads, MtpMode, Outputs};
use proptest::prelude::*;

/// Output rel-L2: dominated by the bf16 rounding of the output; measured ≤ 1.8e-3 over these cases.
const OUT_REL_L2: f64 = 4e-3;
/// fp32 state rel-L2 (f32 math vs f64): measured ≤ 6e-8 (state and intermediates).
const STATE_REL_L2_F32: f64 = 1e-6;
/// bf16 state (stored rounded, compared with the f64 state): the bf16 rounding, measured ≤ 1.7e-3.
const STATE_REL_L2_BF16: f64 = 4e-3;

fn tol(max_rel_l2: f64) -> Tolerance {
    Tolerance {
        max_rel_l2,
        ..CONTEST
    }
}

/// Runs the CPU backend and the reference on `spec` and checks everything; returns the report summary.
fn check(spec: &WorkloadSpec, seed: u64) -> Result<String, TestCaseError> {
    check_path(spec, seed, false)
}

/// As [`check`]; `portable` forces the baseline row operations (the path of CPUs without AVX2/FMA).
fn check_path(spec: &WorkloadSpec, seed: u64, portable: bool) -> Result<String, TestCaseError> {
    let t = generate(spec, seed);
    let p = spec
        .problem(&t)
        .map_err(|e| TestCaseError::fail(format!("{}: {e}", spec.label)))?;
    let x = p.inputs(&t);
    let want = reference::run(&p, &x);
    let mut out = Outputs::poisoned(&p, &x);
    if portable {
        gdn_core::cpu::run_portable(&p, &x, &mut out).unwrap();
    } else {
        CpuBackend.run(&p, &x, &mut out).unwrap();
    }
    let state_l2 = if spec.state_dtype == DType::BF16 {
        STATE_REL_L2_BF16
    } else {
        STATE_REL_L2_F32
    };
    let report = compare(&p, &out, &want, &tol(OUT_REL_L2), &tol(state_l2));
    prop_assert!(
        report.passed(),
        "{} seed {seed}: {}",
        spec.label,
        report.summary()
    );
    if let (Some(buf), Some(given)) = (&out.intermediate, x.intermediate) {
        let per_row = p.dims.seq_len * p.state_row_len();
        let owned: Vec<usize> = x
            .state_indices
            .unwrap()
            .iter()
            .filter(|&&i| i >= 0)
            .map(|&i| i as usize)
            .collect();
        for r in (0..p.dims.state_rows).filter(|r| !owned.contains(r)) {
            let range = r * per_row..(r + 1) * per_row;
            prop_assert!(
                buf[range.clone()] == given[range],
                "intermediate row {r} changed"
            );
        }
    }
    Ok(report.summary())
}

fn all_heads() -> Vec<Heads> {
    [
        (16, 32, 128),
        (8, 16, 128),
        (4, 8, 128),
        (2, 8, 128),
        (2, 4, 64),
        (1, 4, 64),
    ]
    .iter()
    .map(|&(h, hv, d)| Heads::new(h, hv, d).unwrap())
    .collect()
}

fn heads() -> impl Strategy<Value = Heads> {
    prop::sample::select(all_heads())
}

fn scale() -> impl Strategy<Value = f32> {
    prop_oneof![Just(0.0f32), Just(0.3f32), Just(-0.05f32)]
}

fn state_dtype() -> impl Strategy<Value = DType> {
    prop_oneof![3 => Just(DType::F32), 1 => Just(DType::BF16)]
}

/// Reference work budget per case, in (token × value head × D²/128²) units: keeps the f64 reference fast.
const BUDGET: usize = 1200;

fn cost(h: &Heads, tokens: usize) -> usize {
    tokens * h.num_v_heads * h.head_size * h.head_size / (128 * 128)
}

fn seq_len() -> impl Strategy<Value = usize> {
    prop_oneof![
        Just(0usize),
        Just(1),
        Just(63),
        Just(64),
        Just(65),
        1usize..8,
        8usize..40
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn decode_matches_reference(
        h in heads(), batch in 1usize..24, with_state in any::<bool>(), dt in state_dtype(),
        sc in scale(), seed in any::<u64>(),
    ) {
        let mut spec = WorkloadSpec::decode(h, batch.min(BUDGET / cost(&h, 1)).max(1));
        spec.with_state = with_state;
        spec.state_dtype = dt;
        spec.scale = sc;
        check(&spec, seed)?;
    }

    #[test]
    fn prefill_matches_reference(
        h in heads(), lens in prop::collection::vec(seq_len(), 1..64), with_state in any::<bool>(),
        dt in state_dtype(), sc in scale(), extreme in any::<bool>(), seed in any::<u64>(),
    ) {
        let mut lens = lens;
        while lens.len() > 1 && cost(&h, lens.iter().sum()) > BUDGET {
            lens.pop();
        }
        if cost(&h, lens[0]) > BUDGET {
            lens[0] = 1;
        }
        let mut spec = WorkloadSpec::prefill(h, &lens);
        spec.with_state = with_state;
        spec.state_dtype = dt;
        spec.scale = sc;
        spec.extreme_gates = extreme;
        check(&spec, seed)?;
    }

    #[test]
    fn mtp_matches_reference(
        h in heads(), batch in 1usize..6, t in 2usize..=8, extra_pool in 0usize..4,
        intermediate in any::<bool>(), serving in any::<bool>(), padding in 0usize..3,
        dt in state_dtype(), sc in scale(), seed in any::<u64>(),
    ) {
        let batch = batch.min((BUDGET / cost(&h, t)).max(1));
        let mut spec = WorkloadSpec::mtp(h, batch, t);
        spec.pool_size = batch + extra_pool;
        spec.intermediate = intermediate;
        spec.state_dtype = dt;
        spec.scale = sc;
        if serving {
            spec.mtp_mode = MtpMode::Serving;
            spec.padding = padding.min(batch);
        }
        check(&spec, seed)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, failure_persistence: None, ..ProptestConfig::default() })]

    /// The baseline (non-AVX2) row operations, every op.
    #[test]
    fn portable_path_matches_reference(
        h in heads(), op in 0usize..3, n in 1usize..5, t in 2usize..6, dt in state_dtype(),
        seed in any::<u64>(),
    ) {
        let mut spec = match op {
            0 => WorkloadSpec::decode(h, n),
            1 => WorkloadSpec::prefill(h, &[t * 3, 0, n]),
            _ => WorkloadSpec::mtp(h, n, t),
        };
        spec.state_dtype = dt;
        if cost(&h, spec.tokens()) <= 4 * BUDGET {
            check_path(&spec, seed, true)?;
        }
    }
}

/// Unnormalised randn q/k (flashinfer-bench's decode workloads, |k|² ≈ 128) at the contest's shape.
#[test]
fn contest_decode_shape_unnormalised() {
    let h = Heads::new(4, 8, 128).unwrap();
    let spec = WorkloadSpec::decode(h, 64);
    assert!(!spec.normalize_qk);
    check(&spec, 7).unwrap();
}

/// A single long sequence is split into V-row blocks: many tasks, same answer.
#[test]
fn long_prefill_split_along_v() {
    let h = Heads::new(1, 2, 128).unwrap();
    let spec = WorkloadSpec::prefill(h, &[300, 0, 5]);
    check(&spec, 8).unwrap();
}

/// Buffers of the wrong size are rejected, not written out of bounds.
#[test]
fn wrong_output_buffers_are_rejected() {
    let h = Heads::new(2, 4, 64).unwrap();
    let spec = WorkloadSpec::decode(h, 2);
    let t = generate(&spec, 1);
    let p = spec.problem(&t).unwrap();
    let x = p.inputs(&t);
    let mut out = Outputs::poisoned(&p, &x);
    out.output = out.output.slice(0..out.output.len() - 1);
    assert!(CpuBackend.run(&p, &x, &mut out).is_err());
}

/// The timing interface: one `wall` tier with one sample per iteration, for the run and the copy floor.
#[test]
fn timing_reports_wall_samples() {
    use gdn_core::{Timed, TimingConfig};
    let h = Heads::new(2, 4, 64).unwrap();
    let spec = WorkloadSpec::decode(h, 4);
    let maps: Vec<_> = (0..2).map(|s| generate(&spec, s)).collect();
    let p = spec.problem(&maps[0]).unwrap();
    let xs: Vec<_> = maps.iter().map(|m| p.inputs(m)).collect();
    let cfg = TimingConfig {
        warmup: 1,
        iters: 5,
        input_sets: 2,
    };
    for tiers in [
        CpuBackend.time(&p, &xs, &cfg).unwrap(),
        CpuBackend.time_copy(p.min_bytes(), &cfg).unwrap(),
    ] {
        assert_eq!(tiers.len(), 1);
        assert_eq!(tiers[0].tier, "wall");
        assert_eq!(tiers[0].samples_us.len(), 5);
        assert!(tiers[0].samples_us.iter().all(|&t| t > 0.0));
    }
    assert!(CpuBackend.time(&p, &[], &cfg).is_err());
    assert!(CpuBackend.device().starts_with("cpu"));
}
