//! Input validation: every class of bad input is rejected before any backend work, with the error variant
//! that fits and the name of the offending tensor.

use gdn_core::workload::{generate, WorkloadSpec};
use gdn_core::{Data, Definition, GdnError, Heads, MtpMode, Problem, Tensor, TensorMap};

fn heads() -> Heads {
    Heads::new(2, 4, 64).unwrap()
}

/// The tensor an error names.
fn tensor(e: &GdnError) -> &str {
    match e {
        GdnError::Missing { tensor }
        | GdnError::DType { tensor, .. }
        | GdnError::Shape { tensor, .. }
        | GdnError::Value { tensor, .. } => tensor,
        other => panic!("not a tensor error: {other}"),
    }
}

/// Asserts that `result` is the error `variant` naming `tensor`.
macro_rules! assert_rejects {
    ($result:expr, $variant:ident, $tensor:expr) => {{
        let e = $result.unwrap_err();
        assert!(
            matches!(e, GdnError::$variant { .. }) && tensor(&e) == $tensor,
            "{e}"
        );
    }};
}

fn replace(t: &mut TensorMap, name: &str, new: Tensor) {
    t.insert(name.into(), new);
}

fn zeros_like(t: &TensorMap, name: &str, shape: Vec<usize>) -> Tensor {
    Tensor::zeros(t[name].dtype(), shape)
}

#[test]
fn valid_workloads_pass() {
    for spec in [
        WorkloadSpec::decode(heads(), 3),
        WorkloadSpec::prefill(heads(), &[2, 0, 5]),
        WorkloadSpec::mtp(heads(), 3, 4),
    ] {
        spec.problem(&generate(&spec, 1)).unwrap();
    }
}

#[test]
fn missing_tensor_is_rejected_unless_optional() {
    let spec = WorkloadSpec::decode(heads(), 2);
    let mut t = generate(&spec, 1);
    t.remove("k");
    assert_rejects!(spec.problem(&t), Missing, "k");
    // The optional state may be absent; scale too (default).
    let mut t = generate(&spec, 1);
    t.remove("state");
    t.remove("scale");
    spec.problem(&t).unwrap();
}

#[test]
fn wrong_dtype_is_rejected() {
    let spec = WorkloadSpec::decode(heads(), 2);
    let mut t = generate(&spec, 1);
    let a_log = Tensor::zeros(gdn_core::DType::BF16, t["A_log"].shape.clone());
    replace(&mut t, "A_log", a_log);
    assert_rejects!(spec.problem(&t), DType, "A_log");
}

#[test]
fn wrong_rank_or_dim_is_rejected() {
    let spec = WorkloadSpec::decode(heads(), 2);
    let mut t = generate(&spec, 1);
    let q = zeros_like(&t, "q", vec![2, 2, 64]);
    replace(&mut t, "q", q);
    assert_rejects!(spec.problem(&t), Shape, "q");

    let mut t = generate(&spec, 1);
    let v = zeros_like(&t, "v", vec![2, 1, 4, 128]);
    replace(&mut t, "v", v);
    assert_rejects!(spec.problem(&t), Shape, "v");
}

#[test]
fn batch_disagreement_is_rejected() {
    let spec = WorkloadSpec::decode(heads(), 2);
    let mut t = generate(&spec, 1);
    let b = zeros_like(&t, "b", vec![3, 1, 4]);
    replace(&mut t, "b", b);
    assert_rejects!(spec.problem(&t), Shape, "b");
}

fn with_cu(cu: Vec<i64>) -> Result<Problem, GdnError> {
    let spec = WorkloadSpec::prefill(heads(), &[2, 3]);
    let mut t = generate(&spec, 1);
    if cu.len() != 3 {
        t.remove("state"); // the state's row count would disagree first
    }
    t.insert(
        "cu_seqlens".into(),
        Tensor::new(vec![cu.len()], Data::I64(cu)),
    );
    spec.problem(&t)
}

#[test]
fn bad_cu_seqlens_are_rejected() {
    for cu in [
        vec![1, 2, 5],
        vec![0, 4, 3],
        vec![0, 2, 4],
        vec![0, 2, 6],
        vec![],
    ] {
        let e = with_cu(cu.clone()).unwrap_err();
        assert_eq!(tensor(&e), "cu_seqlens", "{cu:?}: {e}");
    }
    with_cu(vec![0, 2, 5]).unwrap();
    with_cu(vec![0, 0, 5, 5]).unwrap();
}

#[test]
fn host_lengths_give_the_longest_sequence() {
    // host cu_seqlens values are known: the planner's length hint is the longest sequence
    assert_eq!(with_cu(vec![0, 2, 5]).unwrap().dims.max_seq_len, Some(3));
    assert_eq!(with_cu(vec![0, 0, 5, 5]).unwrap().dims.max_seq_len, Some(5));
    assert_eq!(with_cu(vec![0, 5, 5]).unwrap().dims.max_seq_len, Some(5));
}

fn mtp_with(idx: Vec<i32>, mode: MtpMode, intermediate: bool) -> Result<Problem, GdnError> {
    let mut spec = WorkloadSpec::mtp(heads(), 3, 2);
    spec.pool_size = 4;
    spec.mtp_mode = mode;
    spec.intermediate = intermediate;
    let mut t = generate(&spec, 1);
    t.insert(
        "initial_state_indices".into(),
        Tensor::new(vec![3], Data::I32(idx)),
    );
    spec.problem(&t)
}

#[test]
fn bad_pool_indices_are_rejected_per_mtp_mode() {
    use MtpMode::*;
    let name = "initial_state_indices";
    assert_rejects!(mtp_with(vec![0, 4, 1], Definition, false), Value, name);
    let e = mtp_with(vec![0, 9, 1], Serving, false).unwrap_err();
    assert_eq!(tensor(&e), name);
    assert_rejects!(mtp_with(vec![1, 1, 2], Definition, true), Value, name);
    let e = mtp_with(vec![1, 1, 2], Serving, false).unwrap_err();
    assert_eq!(tensor(&e), name);
    // Allowed: negative padding (in both modes), duplicates when nothing is written per row.
    mtp_with(vec![0, -1, 3], Serving, true).unwrap();
    mtp_with(vec![0, -1, 1], Definition, false).unwrap();
    mtp_with(vec![-2, -1, 3], Serving, true).unwrap();
    mtp_with(vec![1, 1, 2], Definition, false).unwrap();
}

#[test]
fn non_finite_scale_is_rejected() {
    let spec = WorkloadSpec::decode(heads(), 2);
    for s in [f32::NAN, f32::INFINITY] {
        let mut t = generate(&spec, 1);
        t.insert("scale".into(), Tensor::scalar_f32(s));
        assert_rejects!(spec.problem(&t), Value, "scale");
    }
}

#[test]
fn unknown_definition_name_is_rejected() {
    for name in [
        "gdn_decode_qk4_v6_d128_k_last",
        "gdn_verify_qk4_v8_d128_k_last",
        "mamba",
    ] {
        let e = Definition::builtin(name).unwrap_err();
        assert!(matches!(e, GdnError::Definition { .. }), "{name}: {e}");
        assert!(e.to_string().contains(name));
    }
}
