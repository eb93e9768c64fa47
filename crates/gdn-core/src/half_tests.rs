//! fp16 activations and states: validation (one activation dtype per call, a 16-bit beta in it, no mixing of
//! the two 16-bit state dtypes, errors naming the tensor), the dtypes of what a run writes, and the CPU backend
//! (both row-operation paths) against the float64 reference in every mode that stores a state.

use crate::compare::{compare, Tolerance, CONTEST};
use crate::cpu::{run_portable, CpuBackend};
use crate::reference;
use crate::serving::{names, GateMode, PadRule, Serving, StateLayout};
use crate::workload::{generate, to_dtype, ServingDraw, WorkloadSpec};
use crate::{ActBuf, Backend, DType, GdnError, Heads, MtpMode, Outputs, StateBuf, TensorMap};
use half::f16;

fn heads() -> Heads {
    Heads::new(2, 4, 64).unwrap()
}

fn f16_spec(mut s: WorkloadSpec, act: bool, state: bool) -> WorkloadSpec {
    if act {
        s.act_dtype = DType::F16;
    }
    if state {
        s.state_dtype = DType::F16;
    }
    s
}

/// The dtype error of `spec`'s problem on `t`, as (tensor, expected).
fn dtype_error(spec: &WorkloadSpec, t: &TensorMap) -> (String, String) {
    match spec.problem(t) {
        Err(GdnError::DType {
            tensor, expected, ..
        }) => (tensor, expected),
        other => panic!("expected a dtype error, got {other:?}"),
    }
}

/// Replaces tensor `name` by its values in `dtype`.
fn recast(t: &mut TensorMap, name: &str, dtype: DType) {
    let x = t.remove(name).unwrap();
    let v: Vec<f32> = x.to_f64().iter().map(|&e| e as f32).collect();
    t.insert(name.into(), crate::Tensor::new(x.shape, to_dtype(dtype, v)));
}

#[test]
fn fp16_problems_validate_and_are_serving_calls() {
    for (act, state) in [(true, false), (false, true), (true, true)] {
        for spec in [
            WorkloadSpec::decode(heads(), 3),
            WorkloadSpec::prefill(heads(), &[5, 0, 9]),
            WorkloadSpec::mtp(heads(), 2, 3),
        ] {
            let spec = f16_spec(spec, act, state);
            let p = spec.problem(&generate(&spec, 1)).unwrap();
            let want_act = if act { DType::F16 } else { DType::BF16 };
            let want_state = if state { DType::F16 } else { DType::F32 };
            assert_eq!((p.act_dtype, p.state_out_dtype()), (want_act, want_state));
            assert!(p.is_serving());
            let out = Outputs::poisoned(&p, &p.inputs(&generate(&spec, 1)));
            assert_eq!(out.output.dtype(), want_act);
            assert_eq!(out.state.dtype(), want_state);
        }
    }
    let bf = WorkloadSpec::decode(heads(), 3);
    assert!(!bf.problem(&generate(&bf, 1)).unwrap().is_serving());
}

#[test]
fn one_activation_dtype_per_call() {
    let spec = f16_spec(WorkloadSpec::prefill(heads(), &[4, 6]), true, false);
    for name in ["k", "v", "a", "b"] {
        let mut t = generate(&spec, 2);
        recast(&mut t, name, DType::BF16);
        let (tensor, expected) = dtype_error(&spec, &t);
        assert_eq!(tensor, name);
        assert!(
            expected.contains("float16") && expected.contains("q"),
            "{expected}"
        );
    }
    // bf16 q with an fp16 k: k is named
    let bf = WorkloadSpec::decode(heads(), 2);
    let mut t = generate(&bf, 3);
    recast(&mut t, "k", DType::F16);
    assert_eq!(dtype_error(&bf, &t).0, "k");
    // an f32 q is no activation dtype
    recast(&mut t, "q", DType::F32);
    let (tensor, expected) = dtype_error(&bf, &t);
    assert_eq!(
        (tensor.as_str(), expected.as_str()),
        ("q", "bfloat16 or float16")
    );
}

#[test]
fn a_16_bit_beta_has_the_activation_dtype() {
    let mut spec = f16_spec(WorkloadSpec::decode(heads(), 3), true, false);
    spec.serving = ServingDraw {
        gates: GateMode::Log,
        ..Default::default()
    };
    let t = generate(&spec, 4);
    assert_eq!(t[names::BETA].dtype(), DType::F16);
    let p = spec.problem(&t).unwrap();
    assert_eq!(p.beta_dtype, DType::F16);
    let mut bad = t.clone();
    recast(&mut bad, names::BETA, DType::BF16);
    let (tensor, expected) = dtype_error(&spec, &bad);
    assert_eq!(tensor, names::BETA);
    assert!(expected.contains("float32 or float16"), "{expected}");
    let mut f32_beta = t;
    recast(&mut f32_beta, names::BETA, DType::F32);
    assert!(spec.problem(&f32_beta).is_ok());
}

#[test]
fn the_two_16_bit_state_dtypes_do_not_mix() {
    let mut spec = f16_spec(WorkloadSpec::prefill(heads(), &[64, 70]), false, true);
    spec.serving = ServingDraw {
        options: Serving {
            checkpoint_every: 64,
            ..Default::default()
        },
        ..Default::default()
    };
    let t = generate(&spec, 5);
    assert_eq!(t[names::CHECKPOINTS].dtype(), DType::F16);
    assert!(spec.problem(&t).is_ok());
    let mut bad = t.clone();
    recast(&mut bad, names::CHECKPOINTS, DType::BF16);
    let (tensor, expected) = dtype_error(&spec, &bad);
    assert_eq!(tensor, names::CHECKPOINTS);
    assert!(
        expected.contains("float16") && expected.contains("float32"),
        "{expected}"
    );
    let mut f32_ckpt = t;
    recast(&mut f32_ckpt, names::CHECKPOINTS, DType::F32);
    assert_eq!(
        spec.problem(&f32_ckpt).unwrap().checkpoint_dtype,
        DType::F32
    );
    // a state of another dtype altogether
    let mut t = generate(&spec, 6);
    t.remove(names::CHECKPOINTS);
    t.remove(names::CHECKPOINT_STARTS);
    spec.serving = ServingDraw::default();
    let shape = t["state"].shape.clone();
    let n = t["state"].numel();
    t.insert(
        "state".into(),
        crate::Tensor::new(shape, crate::Data::I32(vec![0; n])),
    );
    let (tensor, expected) = dtype_error(&spec, &t);
    assert_eq!(
        (tensor.as_str(), expected.as_str()),
        ("state", "float32, bfloat16 or float16")
    );
}

/// CPU backend (AVX2 where present, and the portable path) against the float64 reference; outputs and states
/// come back in their fp16 dtypes.
fn check(spec: &WorkloadSpec, seed: u64, out_l2: f64, state_l2: f64) {
    let t = generate(spec, seed);
    let p = spec
        .problem(&t)
        .unwrap_or_else(|e| panic!("{}: {e}", spec.label));
    let x = p.inputs(&t);
    let r = reference::run(&p, &x);
    for portable in [false, true] {
        let mut out = Outputs::poisoned(&p, &x);
        if portable {
            run_portable(&p, &x, &mut out).unwrap();
        } else {
            CpuBackend.run(&p, &x, &mut out).unwrap();
        }
        let tol = |l2| Tolerance {
            max_rel_l2: l2,
            ..CONTEST
        };
        let rep = compare(&p, &out, &r, &tol(out_l2), &tol(state_l2));
        assert!(
            rep.passed(),
            "{} (portable {portable}): {}",
            spec.label,
            rep.summary()
        );
        assert_eq!(out.output.dtype(), p.act_dtype, "{}", spec.label);
        if spec.state_dtype == DType::F16 {
            assert!(matches!(out.state, StateBuf::F16(_)), "{}", spec.label);
        }
    }
}

/// fp16 output rounding (2^-11 relative) plus f32 math; an fp16 state's rounding.
const OUT_L2_F16: f64 = 6e-4;
const OUT_L2_BF16: f64 = 4e-3;
const STATE_L2_F16: f64 = 6e-4;
const STATE_L2_F32: f64 = 1e-5;

#[test]
fn cpu_matches_the_reference_with_fp16_activations_and_states() {
    let kf = Serving {
        layout: StateLayout::KFirst,
        ..Default::default()
    };
    let mut cases = Vec::new();
    for (act, state) in [(true, false), (false, true), (true, true)] {
        let mut dec = f16_spec(WorkloadSpec::decode(heads(), 5), act, state);
        dec.label = format!("decode act {act} state {state}");
        cases.push(dec.clone());
        dec.serving.options = kf;
        dec.label += " k-first";
        cases.push(dec);
        let mut mtp = f16_spec(WorkloadSpec::mtp(heads(), 3, 4), act, state);
        mtp.normalize_qk = true;
        mtp.label = format!("mtp act {act} state {state}");
        cases.push(mtp.clone());
        mtp.mtp_mode = MtpMode::Serving;
        mtp.padding = 1;
        mtp.serving.options = kf;
        mtp.label += " serving k-first";
        cases.push(mtp);
        let mut pf = f16_spec(WorkloadSpec::prefill(heads(), &[40, 0, 130, 1]), act, state);
        pf.label = format!("prefill act {act} state {state}");
        cases.push(pf.clone());
        pf.serving = ServingDraw {
            options: Serving {
                qk_l2norm: true,
                layout: StateLayout::KFirst,
                pad: PadRule::NullSlot,
                checkpoint_every: 64,
            },
            gates: GateMode::Linear,
            pool_rows: 9,
            pad_front: 1,
            has_initial_state: true,
            checkpoints_f32: !act,
            ..Default::default()
        };
        pf.normalize_qk = false;
        pf.label += " all modes";
        cases.push(pf);
    }
    for (i, spec) in cases.iter().enumerate() {
        let out_l2 = if spec.act_dtype == DType::F16 {
            OUT_L2_F16
        } else {
            OUT_L2_BF16
        };
        let state_l2 = if spec.state_dtype == DType::F16 {
            STATE_L2_F16
        } else {
            // the in-kernel norm rounds q/k; one rounding step moves an f32 state by ~1e-4 at most
            if spec.serving.options.qk_l2norm {
                1e-3
            } else {
                STATE_L2_F32
            }
        };
        check(spec, 10 + i as u64, out_l2, state_l2);
    }
}

#[test]
fn in_kernel_norm_rounds_to_fp16() {
    let mut spec = f16_spec(WorkloadSpec::decode(heads(), 2), true, false);
    spec.serving.options.qk_l2norm = true;
    let t = generate(&spec, 7);
    let p = spec.problem(&t).unwrap();
    let x = p.inputs(&t);
    let r = reference::run(&p, &x);
    // by hand: q and k normalised in f32 and rounded to fp16, then the definition's recurrence
    let mut manual = t.clone();
    for name in ["q", "k"] {
        let v = t[name].as_f16().unwrap();
        let y: Vec<f16> = v
            .chunks_exact(64)
            .flat_map(|row| {
                let n = row.iter().map(|e| e.to_f32() * e.to_f32()).sum::<f32>();
                let s = 1.0 / (n + 1e-6).sqrt();
                row.iter().map(move |e| f16::from_f32(e.to_f32() * s))
            })
            .collect();
        manual.insert(
            name.into(),
            crate::Tensor::new(t[name].shape.clone(), crate::Data::F16(y)),
        );
    }
    let mut plain = spec.clone();
    plain.serving.options.qk_l2norm = false;
    let pm = plain.problem(&manual).unwrap();
    let rm = reference::run(&pm, &pm.inputs(&manual));
    let diff = r
        .output
        .iter()
        .zip(&rm.output)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f64::max);
    assert!(diff < 1e-6, "{diff}");
}

#[test]
fn act_buffers_round_and_slice() {
    let mut b = ActBuf::filled(DType::F16, 4, 0.0);
    b.set(1, 1.0 / 3.0);
    assert_eq!(b.get(1), f16::from_f64(1.0 / 3.0).to_f64());
    assert_eq!(b.slice(1..3).len(), 2);
    assert!(b.as_bf16().is_none() && b.as_f16().is_some());
    let s = StateBuf::filled(DType::F16, 3, f32::NAN);
    assert!(s.to_f64().iter().all(|e| e.is_nan()));
}
