//! The float64 reference: the chunked WY form equals the token recurrence to ~1e-10 (every op, chunk sizes,
//! awkward lengths, saturated gates), hand-computed tiny cases, and the semantics the definitions fix
//! (zero-length prefill rows, absent state, MTP definition vs serving mode, decode == prefill of 1-token seqs).

use gdn_core::reference::{self, RefOutputs};
use gdn_core::workload::{generate, WorkloadSpec};
use gdn_core::{Data, Definition, Heads, MtpMode, Op, Problem, RunOptions, Tensor, TensorMap};
use half::bf16;

fn problem(spec: &WorkloadSpec, t: &TensorMap) -> Problem {
    spec.problem(t).expect("valid workload")
}

fn run_ref(spec: &WorkloadSpec, seed: u64) -> (Problem, TensorMap, RefOutputs) {
    let t = generate(spec, seed);
    let p = problem(spec, &t);
    let r = reference::run(&p, &p.inputs(&t));
    (p, t, r)
}

/// max |a−b| / max |b|, the relative error of a whole tensor.
fn rel_err(a: &[f64], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len());
    let scale = b.iter().fold(0.0f64, |m, x| m.max(x.abs())).max(1e-300);
    a.iter()
        .zip(b)
        .fold(0.0f64, |m, (x, y)| m.max((x - y).abs()))
        / scale
}

fn assert_chunked_matches(spec: &WorkloadSpec, seed: u64, chunks: &[usize]) {
    let t = generate(spec, seed);
    let p = problem(spec, &t);
    let x = p.inputs(&t);
    let r = reference::run(&p, &x);
    for &c in chunks {
        let w = reference::run_chunked(&p, &x, c);
        let (eo, es) = (rel_err(&w.output, &r.output), rel_err(&w.state, &r.state));
        assert!(
            eo < 1e-10 && es < 1e-10,
            "{} chunk {c}: output {eo:e}, state {es:e}",
            spec.label
        );
        if let (Some(wi), Some(ri)) = (&w.intermediate, &r.intermediate) {
            let ei = rel_err(wi, ri);
            assert!(ei < 1e-10, "{} chunk {c}: intermediate {ei:e}", spec.label);
        }
    }
}

const LENGTHS: [usize; 9] = [0, 1, 15, 16, 17, 63, 64, 65, 200];

#[test]
fn chunked_equals_recurrence_prefill() {
    let heads = Heads::new(1, 2, 64).unwrap();
    for extreme in [false, true] {
        for with_state in [true, false] {
            let mut spec = WorkloadSpec::prefill(heads, &LENGTHS);
            spec.extreme_gates = extreme;
            spec.with_state = with_state;
            spec.label = format!("prefill extreme={extreme} state={with_state}");
            assert_chunked_matches(&spec, 11, &[16, 32, 64]);
        }
    }
}

#[test]
fn chunked_equals_recurrence_d128_gva() {
    let heads = Heads::new(1, 2, 128).unwrap();
    let mut spec = WorkloadSpec::prefill(heads, &[17, 70]);
    spec.extreme_gates = true;
    assert_chunked_matches(&spec, 12, &[16, 64]);
}

#[test]
fn chunked_equals_recurrence_decode_and_mtp() {
    let heads = Heads::new(2, 4, 64).unwrap();
    assert_chunked_matches(&WorkloadSpec::decode(heads, 3), 13, &[16]);
    let mut mtp = WorkloadSpec::mtp(heads, 3, 7);
    mtp.pool_size = 5;
    mtp.extreme_gates = true;
    assert_chunked_matches(&mtp, 14, &[2, 3, 16]);
    mtp.mtp_mode = MtpMode::Serving;
    mtp.padding = 1;
    assert_chunked_matches(&mtp, 15, &[4]);
}

/// Tensors of a one-token decode with D = 64, one head: hand-chosen values.
fn one_token_tensors(state: Option<f32>) -> TensorMap {
    let d = 64;
    let bf = |v: Vec<f32>| Data::BF16(v.into_iter().map(bf16::from_f32).collect());
    let e0 = |n: usize| {
        (0..n)
            .map(|i| if i == 0 { 1.0 } else { 0.0 })
            .collect::<Vec<f32>>()
    };
    let mut t = TensorMap::new();
    t.insert("q".into(), Tensor::new(vec![1, 1, 1, d], bf(e0(d))));
    t.insert("k".into(), Tensor::new(vec![1, 1, 1, d], bf(e0(d))));
    t.insert("v".into(), Tensor::new(vec![1, 1, 1, d], bf(vec![1.0; d])));
    t.insert("a".into(), Tensor::new(vec![1, 1, 1], bf(vec![0.0])));
    t.insert("b".into(), Tensor::new(vec![1, 1, 1], bf(vec![0.0])));
    t.insert("A_log".into(), Tensor::new(vec![1], Data::F32(vec![0.0])));
    t.insert("dt_bias".into(), Tensor::new(vec![1], Data::F32(vec![0.0])));
    t.insert("scale".into(), Tensor::scalar_f32(0.0));
    if let Some(fill) = state {
        t.insert(
            "state".into(),
            Tensor::new(vec![1, 1, d, d], Data::F32(vec![fill; d * d])),
        );
    }
    t
}

/// a = dt_bias = A_log = 0 ⇒ g = exp(−softplus(0)) = 1/2; b = 0 ⇒ β = 1/2; q = k = e0, v = 1, S0 = 0.1:
/// g·S0 = 0.05, u = 0.05, δ = 0.5·(1 − 0.05) = 0.475, S[v][0] = 0.525 (other columns 0.05),
/// out = (1/8)·0.525 = 0.065625.
#[test]
fn one_token_decode_by_hand() {
    let def = Definition::builtin("gdn_decode_qk1_v1_d64_k_last").unwrap();
    let t = one_token_tensors(Some(0.1));
    let p = Problem::from_tensors(&def, &t, &RunOptions::default()).unwrap();
    let x = p.inputs(&t);
    let (log_g, beta) = reference::gates_f64(&p, &x, 0, 0);
    assert!((log_g.exp() - 0.5).abs() < 1e-15 && (beta - 0.5).abs() < 1e-15);
    let r = reference::run(&p, &x);
    let close = |a: f64, b: f64| (a - b).abs() < 1e-8 * b.abs().max(1.0);
    assert!(
        r.output.iter().all(|&o| close(o, 0.065625)),
        "{:?}",
        &r.output[..4]
    );
    for (i, &s) in r.state.iter().enumerate() {
        let want = if i % 64 == 0 { 0.525 } else { 0.05 };
        assert!(close(s, want), "state[{i}] = {s}, want {want}");
    }
    // Absent state: S = β v ⊗ k, out = scale·β = 0.0625.
    let t = one_token_tensors(None);
    let p = Problem::from_tensors(&def, &t, &RunOptions::default()).unwrap();
    let r = reference::run(&p, &p.inputs(&t));
    assert!(r.output.iter().all(|&o| close(o, 0.0625)));
    assert!(r
        .state
        .iter()
        .enumerate()
        .all(|(i, &s)| close(s, if i % 64 == 0 { 0.5 } else { 0.0 })));
}

#[test]
fn softplus_follows_torch_threshold() {
    assert_eq!(reference::softplus(25.0), 25.0);
    assert!((reference::softplus(0.0) - 2f64.ln()).abs() < 1e-15);
    assert!((reference::softplus(20.0) - (20f64.exp()).ln_1p()).abs() < 1e-15);
    assert!(reference::softplus(-800.0) == 0.0);
}

#[test]
fn zero_length_prefill_row_stays_zero() {
    let heads = Heads::new(1, 2, 64).unwrap();
    let spec = WorkloadSpec::prefill(heads, &[3, 0, 2]);
    let (p, _, r) = run_ref(&spec, 21);
    let row = p.state_row_len();
    assert!(r.state[row..2 * row].iter().all(|&s| s == 0.0));
    assert!(r.state[..row].iter().any(|&s| s != 0.0));
    assert!(r.state[2 * row..].iter().any(|&s| s != 0.0));
}

#[test]
fn absent_state_equals_zero_state() {
    let heads = Heads::new(1, 2, 64).unwrap();
    let mut spec = WorkloadSpec::prefill(heads, &[5, 9]);
    spec.with_state = false;
    let (p, mut t, r0) = run_ref(&spec, 22);
    t.insert(
        "state".into(),
        Tensor::zeros(gdn_core::DType::F32, p.state_shape()),
    );
    let p1 = problem(&spec, &t);
    let r1 = reference::run(&p1, &p1.inputs(&t));
    assert_eq!(r0.output, r1.output);
    assert_eq!(r0.state, r1.state);
}

#[test]
fn decode_equals_prefill_of_single_tokens() {
    let heads = Heads::new(2, 4, 64).unwrap();
    let spec = WorkloadSpec::decode(heads, 3);
    let (_, t, rd) = run_ref(&spec, 23);
    let mut tp = TensorMap::new();
    for (name, ten) in &t {
        let mut ten = ten.clone();
        if matches!(name.as_str(), "q" | "k" | "v" | "a" | "b") {
            ten.shape.remove(1); // [B, 1, ...] -> [T, ...]
        }
        tp.insert(name.clone(), ten);
    }
    tp.insert(
        "cu_seqlens".into(),
        Tensor::new(vec![4], Data::I64(vec![0, 1, 2, 3])),
    );
    let def = Definition::new(Op::Prefill, heads);
    let p = Problem::from_tensors(&def, &tp, &RunOptions::default()).unwrap();
    let rp = reference::run(&p, &p.inputs(&tp));
    assert_eq!(rd.output, rp.output);
    assert_eq!(rd.state, rp.state);
}

#[test]
fn mtp_definition_and_serving_semantics() {
    let heads = Heads::new(1, 2, 64).unwrap();
    let mut spec = WorkloadSpec::mtp(heads, 3, 4);
    spec.pool_size = 6;
    spec.mtp_mode = MtpMode::Serving;
    spec.padding = 1;
    let t = generate(&spec, 31);
    let p = problem(&spec, &t);
    let x = p.inputs(&t);
    let idx = x.state_indices.unwrap().to_vec();
    let pool = t["initial_state"].to_f64();
    let inter_in = t["intermediate_states_buffer"].to_f64();
    let serving = reference::run(&p, &x);
    let row = p.state_row_len();
    let per_req = 4 * 2 * 64;
    let pad = idx.iter().position(|&i| i == -1).unwrap();
    // Padding: output zero; untouched pool rows and intermediate rows unchanged.
    assert!(serving.output[pad * per_req..(pad + 1) * per_req]
        .iter()
        .all(|&o| o == 0.0));
    let inter = serving.intermediate.as_ref().unwrap();
    for r in 0..6 {
        let state_row = &serving.state[r * row..(r + 1) * row];
        let inter_rows = &inter[r * 4 * row..(r + 1) * 4 * row];
        if idx.contains(&(r as i32)) {
            // Final state written back = the state after the last token.
            assert_eq!(state_row, &inter_rows[3 * row..]);
            assert_ne!(state_row, &pool[r * row..(r + 1) * row]);
        } else {
            assert_eq!(state_row, &pool[r * row..(r + 1) * row]);
            assert_eq!(inter_rows, &inter_in[r * 4 * row..(r + 1) * 4 * row]);
        }
    }
    // Definition mode (padding replaced by an unused row): same outputs for real requests, pool unchanged.
    let mut t2 = t.clone();
    let unused = (0..6).find(|r| !idx.contains(r)).unwrap();
    let idx2: Vec<i32> = idx
        .iter()
        .map(|&i| if i < 0 { unused } else { i })
        .collect();
    t2.insert(
        "initial_state_indices".into(),
        Tensor::new(vec![3], Data::I32(idx2)),
    );
    let def = spec.definition();
    let p2 = Problem::from_tensors(&def, &t2, &RunOptions::default()).unwrap();
    let definition = reference::run(&p2, &p2.inputs(&t2));
    assert_eq!(definition.state, pool);
    for b in (0..3).filter(|&b| b != pad) {
        let range = b * per_req..(b + 1) * per_req;
        assert_eq!(definition.output[range.clone()], serving.output[range]);
    }
}
