//! Serving inputs are validated before any backend work: every bad serving tensor or option is rejected with
//! the error that names it.

use gdn_core::serving::{names, GateMode, PadRule, Serving};
use gdn_core::workload::{generate, ServingDraw, WorkloadSpec};
use gdn_core::{DType, Data, GdnError, Heads, Problem, RunOptions, Tensor, TensorMap};

fn heads() -> Heads {
    Heads::new(2, 4, 64).unwrap()
}

fn named(e: &GdnError) -> String {
    match e {
        GdnError::Missing { tensor }
        | GdnError::DType { tensor, .. }
        | GdnError::Shape { tensor, .. }
        | GdnError::Value { tensor, .. } => tensor.clone(),
        other => panic!("not a tensor error: {other}"),
    }
}

/// The error of validating `t` for `spec` with `serving`; panics when it validates.
fn rejected(spec: &WorkloadSpec, t: &TensorMap, serving: Serving) -> GdnError {
    let opts = RunOptions {
        serving,
        ..spec.options()
    };
    Problem::from_tensors(&spec.definition(), t, &opts).expect_err("must be rejected")
}

fn expect(spec: &WorkloadSpec, t: &TensorMap, serving: Serving, name: &str) {
    let e = rejected(spec, t, serving);
    assert!(named(&e).starts_with(name), "{name}: got {e}");
}

fn pool_prefill() -> WorkloadSpec {
    let mut s = WorkloadSpec::prefill(heads(), &[5, 70, 0, 9]);
    s.serving = ServingDraw {
        pool_rows: 8,
        ..Default::default()
    };
    s
}

#[test]
fn gate_tensors() {
    let mut s = WorkloadSpec::prefill(heads(), &[5, 9]);
    s.serving.gates = GateMode::Log;
    let t = generate(&s, 1);
    s.problem(&t).unwrap();
    let sv = s.serving.options;
    // raw and precomputed together
    let raw = generate(&WorkloadSpec::prefill(heads(), &[5, 9]), 1);
    let mut both = t.clone();
    both.insert("a".into(), raw["a"].clone());
    expect(&s, &both, sv, "a");
    // g and alpha together
    let mut ga = t.clone();
    ga.insert(names::ALPHA.into(), t[names::G].clone());
    expect(&s, &ga, sv, names::ALPHA);
    // beta missing, beta in the wrong dtype or shape
    let mut nb = t.clone();
    nb.remove(names::BETA);
    expect(&s, &nb, sv, names::BETA);
    let mut bd = t.clone();
    bd.insert(
        names::BETA.into(),
        Tensor::zeros(DType::I32, t[names::BETA].shape.clone()),
    );
    expect(&s, &bd, sv, names::BETA);
    let mut bs = t.clone();
    bs.insert(names::BETA.into(), Tensor::zeros(DType::F32, vec![14, 3]));
    expect(&s, &bs, sv, names::BETA);
    // g in bf16
    let mut gb = t.clone();
    gb.insert(
        names::G.into(),
        Tensor::zeros(DType::BF16, t[names::G].shape.clone()),
    );
    expect(&s, &gb, sv, names::G);
    // a log decay above 0, an alpha above 1, a NaN
    for (name, bad) in [(names::G, 0.5f32), (names::G, f32::NAN)] {
        let mut v = t[name].as_f32().unwrap().to_vec();
        v[3] = bad;
        let mut tb = t.clone();
        tb.insert(
            name.into(),
            Tensor::new(t[name].shape.clone(), Data::F32(v)),
        );
        expect(&s, &tb, sv, name);
    }
    let mut sl = WorkloadSpec::prefill(heads(), &[5, 9]);
    sl.serving.gates = GateMode::Linear;
    let tl = generate(&sl, 1);
    let mut v = tl[names::ALPHA].as_f32().unwrap().to_vec();
    v[0] = 1.5;
    let mut tb = tl.clone();
    tb.insert(
        names::ALPHA.into(),
        Tensor::new(tl[names::ALPHA].shape.clone(), Data::F32(v)),
    );
    expect(&sl, &tb, sv, names::ALPHA);
    // beta with raw gates
    let mut rb = raw.clone();
    rb.insert(names::BETA.into(), t[names::BETA].clone());
    expect(
        &WorkloadSpec::prefill(heads(), &[5, 9]),
        &rb,
        Serving::default(),
        names::BETA,
    );
}

#[test]
fn pool_indices() {
    let s = pool_prefill();
    let t = generate(&s, 2);
    let sv = Serving::default();
    s.problem(&t).unwrap();
    let with = |v: Data| {
        let mut t2 = t.clone();
        t2.insert(names::STATE_INDICES.into(), Tensor::new(vec![4], v));
        t2
    };
    // out of the pool, duplicated, wrong dtype, wrong length
    expect(
        &s,
        &with(Data::I32(vec![1, 8, 2, 3])),
        sv,
        names::STATE_INDICES,
    );
    expect(
        &s,
        &with(Data::I64(vec![1, 2, 2, 3])),
        sv,
        names::STATE_INDICES,
    );
    expect(
        &s,
        &with(Data::F32(vec![1.0, 2.0, 3.0, 4.0])),
        sv,
        names::STATE_INDICES,
    );
    let mut short = t.clone();
    short.insert(
        names::STATE_INDICES.into(),
        Tensor::new(vec![3], Data::I32(vec![1, 2, 3])),
    );
    expect(&s, &short, sv, names::STATE_INDICES);
    // padding: any negative index under the default rule, 0 under the null-slot rule only; two padded
    // sequences may share an index
    let ok = with(Data::I32(vec![-1, 0, -7, 3]));
    s.problem(&ok).unwrap();
    let null = Serving {
        pad: PadRule::NullSlot,
        ..sv
    };
    let ok0 = with(Data::I32(vec![0, 0, -1, 3]));
    Problem::from_tensors(
        &s.definition(),
        &ok0,
        &RunOptions {
            serving: null,
            ..s.options()
        },
    )
    .unwrap();
    expect(&s, &ok0, sv, names::STATE_INDICES); // 0 twice is a duplicate when 0 is a real row
                                                // a pool without a state, indices for MTP
    let mut ns = t.clone();
    ns.remove("state");
    expect(&s, &ns, sv, "state");
    let m = WorkloadSpec::mtp(heads(), 2, 2);
    let mut tm = generate(&m, 1);
    tm.insert(
        names::STATE_INDICES.into(),
        Tensor::new(vec![2], Data::I32(vec![0, 1])),
    );
    expect(&m, &tm, sv, names::STATE_INDICES);
}

#[test]
fn has_initial_state_values() {
    let s = pool_prefill();
    let mut t = generate(&s, 3);
    t.insert(
        names::HAS_INITIAL_STATE.into(),
        Tensor::new(vec![4], Data::I32(vec![1, 0, 2, 1])),
    );
    expect(&s, &t, Serving::default(), names::HAS_INITIAL_STATE);
    // without a pool (definition prefill) it has no meaning
    let d = WorkloadSpec::prefill(heads(), &[5, 70, 0, 9]);
    let mut td = generate(&d, 3);
    td.insert(
        names::HAS_INITIAL_STATE.into(),
        Tensor::new(vec![4], Data::I32(vec![1, 0, 1, 1])),
    );
    expect(&d, &td, Serving::default(), names::HAS_INITIAL_STATE);
}

#[test]
fn checkpoints() {
    let mut s = WorkloadSpec::prefill(heads(), &[130, 64]);
    s.serving.options.checkpoint_every = 64;
    let t = generate(&s, 4);
    let sv = s.serving.options;
    s.problem(&t).unwrap();
    // not a multiple of 64
    expect(
        &s,
        &t,
        Serving {
            checkpoint_every: 96,
            ..sv
        },
        "checkpoint_every",
    );
    // starts without the interval; the interval without starts
    expect(&s, &t, Serving::default(), names::CHECKPOINT_STARTS);
    let mut ns = t.clone();
    ns.remove(names::CHECKPOINT_STARTS);
    expect(&s, &ns, sv, names::CHECKPOINT_STARTS);
    // too few rows for a sequence's checkpoints (130 tokens: 2), starts past the buffer
    let mut few = t.clone();
    few.insert(
        names::CHECKPOINT_STARTS.into(),
        Tensor::new(vec![3], Data::I64(vec![0, 1, 3])),
    );
    expect(&s, &few, sv, names::CHECKPOINT_STARTS);
    let mut past = t.clone();
    past.insert(
        names::CHECKPOINT_STARTS.into(),
        Tensor::new(vec![3], Data::I32(vec![0, 3, 99])),
    );
    expect(&s, &past, sv, names::CHECKPOINT_STARTS);
    // buffer dtype and shape
    let mut bd = t.clone();
    bd.insert(
        names::CHECKPOINTS.into(),
        Tensor::zeros(DType::BF16, t[names::CHECKPOINTS].shape.clone()),
    );
    expect(&s, &bd, sv, names::CHECKPOINTS);
    let mut bs = t.clone();
    bs.insert(
        names::CHECKPOINTS.into(),
        Tensor::zeros(DType::F32, vec![5, 4, 64]),
    );
    expect(&s, &bs, sv, names::CHECKPOINTS);
    // decode has no checkpoints
    let d = WorkloadSpec::decode(heads(), 2);
    expect(&d, &generate(&d, 1), sv, "checkpoint_every");
}

#[test]
fn spec_slots() {
    let mut s = WorkloadSpec::mtp(heads(), 3, 4);
    s.serving = ServingDraw {
        spec_slots: true,
        ..Default::default()
    };
    let t = generate(&s, 5);
    let sv = Serving::default();
    s.problem(&t).unwrap();
    // accepted count out of 1..=T; missing; slots duplicated; a padded read slot
    let acc = |v: Vec<i32>| {
        let mut t2 = t.clone();
        t2.insert(
            names::NUM_ACCEPTED.into(),
            Tensor::new(vec![3], Data::I32(v)),
        );
        t2
    };
    expect(&s, &acc(vec![1, 5, 2]), sv, names::NUM_ACCEPTED);
    expect(&s, &acc(vec![0, 1, 2]), sv, names::NUM_ACCEPTED);
    let mut na = t.clone();
    na.remove(names::NUM_ACCEPTED);
    expect(&s, &na, sv, names::NUM_ACCEPTED);
    let mut slots = t["initial_state_indices"].as_i32().unwrap().to_vec();
    slots[5] = slots[0];
    let mut dup = t.clone();
    dup.insert(
        "initial_state_indices".into(),
        Tensor::new(vec![3, 4], Data::I32(slots)),
    );
    expect(&s, &dup, sv, "initial_state_indices");
    let mut slots = t["initial_state_indices"].as_i32().unwrap().to_vec();
    slots[4 + 1] = -1;
    let mut pr = acc(vec![1, 2, 1]);
    pr.insert(
        "initial_state_indices".into(),
        Tensor::new(vec![3, 4], Data::I32(slots)),
    );
    expect(&s, &pr, sv, "initial_state_indices");
    // num_accepted without slots
    let d = WorkloadSpec::mtp(heads(), 3, 4);
    let mut td = generate(&d, 5);
    td.insert(
        names::NUM_ACCEPTED.into(),
        Tensor::new(vec![3], Data::I32(vec![1, 1, 1])),
    );
    expect(&d, &td, sv, names::NUM_ACCEPTED);
}

#[test]
fn int32_offsets_are_checked_like_int64() {
    let mut s = WorkloadSpec::prefill(heads(), &[5, 9]);
    s.serving.cu_i32 = true;
    let t = generate(&s, 6);
    assert_eq!(s.problem(&t).unwrap().cu_dtype, DType::I32);
    let mut bad = t.clone();
    bad.insert(
        "cu_seqlens".into(),
        Tensor::new(vec![3], Data::I32(vec![0, 9, 5])),
    );
    expect(&s, &bad, Serving::default(), "cu_seqlens");
}
