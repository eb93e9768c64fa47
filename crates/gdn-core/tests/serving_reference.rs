//! The float64 reference's serving modes, checked against the definition mode through identities that hold
//! exactly (or to f32 rounding of the inputs): a pool indexed by a permutation is the definition on gathered
//! rows; K-first is the transpose; precomputed gates equal the raw ones they were computed from; a checkpoint
//! is the final state of the prefix; a spec-decode slot holds the intermediate state of that token; and the
//! token-by-token and chunked forms agree in every mode.

use gdn_core::reference::{self, RefOutputs};
use gdn_core::serving::{names, GateMode, PadRule, Serving, StateLayout};
use gdn_core::workload::{generate, ServingDraw, WorkloadSpec};
use gdn_core::{DType, Data, Heads, MtpMode, Problem, RunOptions, Tensor, TensorMap};

fn heads() -> Heads {
    Heads::new(2, 4, 64).unwrap()
}

fn run(spec: &WorkloadSpec, t: &TensorMap) -> (Problem, RefOutputs) {
    let p = spec
        .problem(t)
        .unwrap_or_else(|e| panic!("{}: {e}", spec.label));
    let r = reference::run(&p, &p.inputs(t));
    (p, r)
}

fn run_opts(spec: &WorkloadSpec, t: &TensorMap, serving: Serving) -> (Problem, RefOutputs) {
    let opts = RunOptions {
        serving,
        ..spec.options()
    };
    let p = Problem::from_tensors(&spec.definition(), t, &opts).unwrap();
    let r = reference::run(&p, &p.inputs(t));
    (p, r)
}

fn max_diff(a: &[f64], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f64::max)
}

fn f32s(t: &Tensor) -> Vec<f32> {
    t.as_f32().unwrap().to_vec()
}

const D: usize = 64;
const DD: usize = D * D;

#[test]
fn chunked_form_agrees_in_every_mode() {
    let h = heads();
    let mut specs = Vec::new();
    for (layout, pad, every) in [
        (StateLayout::KLast, PadRule::Negative, 64),
        (StateLayout::KFirst, PadRule::NullSlot, 128),
    ] {
        let mut s = WorkloadSpec::prefill(h, &[0, 140, 64, 7, 0, 260]);
        s.serving = ServingDraw {
            options: Serving {
                qk_l2norm: true,
                layout,
                pad,
                checkpoint_every: every,
            },
            gates: GateMode::Log,
            pool_rows: 12,
            pad_front: 1,
            pad_back: 1,
            has_initial_state: true,
            cu_i32: true,
            ..Default::default()
        };
        specs.push(s);
    }
    for (i, s) in specs.iter().enumerate() {
        let t = generate(s, i as u64);
        let (p, a) = run(s, &t);
        let x = p.inputs(&t);
        for chunk in [16, 64] {
            let b = reference::run_chunked(&p, &x, chunk);
            assert!(max_diff(&a.output, &b.output) < 1e-9);
            assert!(max_diff(&a.state, &b.state) < 1e-9);
            let (ca, cb) = (
                a.checkpoints.as_ref().unwrap(),
                b.checkpoints.as_ref().unwrap(),
            );
            assert!(max_diff(ca, cb) < 1e-9);
        }
    }
}

/// Prefill through a pool (a permutation of rows, two padded sequences, spare rows) equals the definition
/// on the gathered rows; padded sequences output zeros; rows no sequence owns keep their values.
#[test]
fn pool_is_the_definition_on_gathered_rows() {
    let h = heads();
    let lens = [30, 0, 70, 5, 12];
    let mut def = WorkloadSpec::prefill(h, &lens);
    def.normalize_qk = true;
    let t = generate(&def, 3);
    let (_, want) = run(&def, &t);
    let state = f32s(&t["state"]);
    // pool rows: sequence n at row idx[n]; sequences 0 and 4 padded
    let idx: [i32; 5] = [-1, 6, 2, 4, -1];
    let rows = 8;
    let mut pool: Vec<f32> = (0..rows * 4 * DD).map(|i| (i % 97) as f32 * 0.01).collect();
    for (n, &r) in idx.iter().enumerate() {
        if r >= 0 {
            let (src, dst) = (n * 4 * DD, r as usize * 4 * DD);
            pool[dst..dst + 4 * DD].copy_from_slice(&state[src..src + 4 * DD]);
        }
    }
    let mut tp = t.clone();
    tp.insert(
        "state".into(),
        Tensor::new(vec![rows, 4, D, D], Data::F32(pool.clone())),
    );
    tp.insert(
        names::STATE_INDICES.into(),
        Tensor::new(vec![5], Data::I32(idx.to_vec())),
    );
    let (p, got) = run(&def, &tp);
    assert!(p.pool && p.dims.state_rows == rows);
    let row = 4 * D;
    let cu: Vec<usize> = std::iter::once(0)
        .chain(lens.iter().scan(0, |a, &l| {
            *a += l;
            Some(*a)
        }))
        .collect();
    for (n, &r) in idx.iter().enumerate() {
        let out = cu[n] * row..cu[n + 1] * row;
        if r < 0 {
            assert!(got.output[out].iter().all(|&e| e == 0.0), "padded output");
        } else {
            assert!(max_diff(&got.output[out.clone()], &want.output[out]) < 1e-12);
        }
    }
    for r in 0..rows {
        let owner = idx.iter().position(|&i| i == r as i32);
        let g = &got.state[r * 4 * DD..(r + 1) * 4 * DD];
        match owner {
            // sequence 1 has no tokens: its row keeps its value
            Some(n) if lens[n] > 0 => {
                assert!(max_diff(g, &want.state[n * 4 * DD..(n + 1) * 4 * DD]) < 1e-12)
            }
            _ => {
                let orig: Vec<f64> = pool[r * 4 * DD..(r + 1) * 4 * DD]
                    .iter()
                    .map(|&e| e as f64)
                    .collect();
                assert_eq!(g, &orig[..], "row {r} must be untouched");
            }
        }
    }
    // null-slot rule: index 0 is padding too
    let mut t0 = tp.clone();
    t0.insert(
        names::STATE_INDICES.into(),
        Tensor::new(vec![5], Data::I64(vec![0, 6, 2, 4, -1])),
    );
    let (_, g0) = run_opts(
        &def,
        &t0,
        Serving {
            pad: PadRule::NullSlot,
            ..Default::default()
        },
    );
    assert_eq!(g0.output, got.output);
    assert_eq!(g0.state, got.state);
}

#[test]
fn k_first_is_the_transpose() {
    let h = heads();
    for spec in [
        WorkloadSpec::decode(h, 3),
        WorkloadSpec::prefill(h, &[40, 9]),
        WorkloadSpec::mtp(h, 2, 3),
    ] {
        let t = generate(&spec, 5);
        let (_, want) = run(&spec, &t);
        let transpose = |v: &[f32]| -> Vec<f32> {
            let mut o = v.to_vec();
            for (hd, blk) in o.chunks_exact_mut(DD).enumerate() {
                for i in 0..D {
                    for j in 0..D {
                        blk[j * D + i] = v[hd * DD + i * D + j];
                    }
                }
            }
            o
        };
        let mut tk = t.clone();
        let name = spec.definition().state_input();
        let st = &t[name];
        tk.insert(
            name.into(),
            Tensor::new(st.shape.clone(), Data::F32(transpose(st.as_f32().unwrap()))),
        );
        if let Some(b) = t.get("intermediate_states_buffer") {
            tk.insert(
                "intermediate_states_buffer".into(),
                Tensor::new(b.shape.clone(), Data::F32(transpose(b.as_f32().unwrap()))),
            );
        }
        let (_, got) = run_opts(
            &spec,
            &tk,
            Serving {
                layout: StateLayout::KFirst,
                ..Default::default()
            },
        );
        assert_eq!(got.output, want.output, "{}", spec.label);
        let back = |v: &[f64]| -> Vec<f64> {
            let f: Vec<f32> = v.iter().map(|&e| e as f32).collect();
            transpose(&f).iter().map(|&e| e as f64).collect()
        };
        assert!(
            max_diff(&back(&got.state), &want.state) < 1e-6,
            "{}",
            spec.label
        );
        if let (Some(a), Some(b)) = (&got.intermediate, &want.intermediate) {
            assert!(max_diff(&back(a), b) < 1e-6);
        }
    }
}

#[test]
fn precomputed_gates_equal_raw_gates() {
    let h = heads();
    for gates in [GateMode::Log, GateMode::Linear] {
        for spec in [
            WorkloadSpec::decode(h, 4),
            WorkloadSpec::prefill(h, &[33, 70]),
        ] {
            let mut spec = spec;
            spec.normalize_qk = true;
            let t = generate(&spec, 9);
            let (_, want) = run(&spec, &t);
            let mut s2 = spec.clone();
            s2.serving = ServingDraw {
                gates,
                beta_f32: true,
                ..Default::default()
            };
            let t2 = generate(&s2, 9);
            assert!(!t2.contains_key("a") && t2.contains_key(names::BETA));
            let (p2, got) = run(&s2, &t2);
            assert_eq!(p2.gates, gates);
            // the gates were computed in f32 from the same raw draws: f32 rounding apart, the same call
            assert!(
                max_diff(&got.output, &want.output) < 1e-4,
                "{gates:?} {}",
                spec.label
            );
            assert!(max_diff(&got.state, &want.state) < 1e-4);
        }
    }
}

#[test]
fn qk_norm_of_normalised_inputs_changes_little_and_of_raw_inputs_matches_normalising_first() {
    let h = heads();
    let mut spec = WorkloadSpec::prefill(h, &[50]);
    spec.normalize_qk = false;
    let t = generate(&spec, 2);
    let (_, raw) = run(&spec, &t);
    let (_, normed) = run_opts(
        &spec,
        &t,
        Serving {
            qk_l2norm: true,
            ..Default::default()
        },
    );
    // normalising by hand (f64, then bf16) gives the same inputs the in-kernel norm uses
    let mut tn = t.clone();
    for name in ["q", "k"] {
        let x = t[name].as_bf16().unwrap();
        let mut y = x.to_vec();
        for (row, out) in x.chunks_exact(D).zip(y.chunks_exact_mut(D)) {
            let s: f64 = row.iter().map(|e| e.to_f64() * e.to_f64()).sum();
            let r = 1.0 / (s + 1e-6).sqrt();
            for (o, e) in out.iter_mut().zip(row) {
                *o = half::bf16::from_f64(e.to_f64() * r);
            }
        }
        tn.insert(
            name.into(),
            Tensor::new(t[name].shape.clone(), Data::BF16(y)),
        );
    }
    let (_, by_hand) = run(&spec, &tn);
    assert_eq!(normed.output, by_hand.output);
    assert!(
        max_diff(&normed.output, &raw.output) > 1e-3,
        "the norm must change raw inputs"
    );
}

/// Checkpoint j of a sequence is the final state after its first (j+1)·n tokens.
#[test]
fn checkpoints_are_prefix_states() {
    let h = heads();
    let lens = [200, 64, 63];
    let mut spec = WorkloadSpec::prefill(h, &lens);
    spec.normalize_qk = true;
    spec.serving.options.checkpoint_every = 64;
    let t = generate(&spec, 4);
    let (p, r) = run(&spec, &t);
    let starts = t[names::CHECKPOINT_STARTS].as_i64().unwrap().to_vec();
    let ck = r.checkpoints.as_ref().unwrap();
    let given = f32s(&t[names::CHECKPOINTS]);
    assert_eq!(p.checkpoint_rows, *starts.last().unwrap() as usize);
    for (n, &len) in lens.iter().enumerate() {
        let mut written = 0;
        for j in 0..len / 64 {
            // the prefix as its own call, from the same initial state
            let prefix = (j + 1) * 64;
            let mut ps = WorkloadSpec::prefill(h, &[prefix]);
            ps.normalize_qk = true;
            let mut tp = TensorMap::new();
            let off: usize = lens[..n].iter().sum();
            for name in ["q", "k", "v", "a", "b"] {
                let src = &t[name];
                let per: usize = src.shape[1..].iter().product();
                let Data::BF16(v) = &src.data else {
                    unreachable!()
                };
                let mut shape = src.shape.clone();
                shape[0] = prefix;
                tp.insert(
                    name.into(),
                    Tensor::new(
                        shape,
                        Data::BF16(v[off * per..(off + prefix) * per].to_vec()),
                    ),
                );
            }
            for name in ["A_log", "dt_bias", "scale"] {
                tp.insert(name.into(), t[name].clone());
            }
            let st = f32s(&t["state"]);
            tp.insert(
                "state".into(),
                Tensor::new(
                    vec![1, 4, D, D],
                    Data::F32(st[n * 4 * DD..(n + 1) * 4 * DD].to_vec()),
                ),
            );
            tp.insert(
                "cu_seqlens".into(),
                Tensor::new(vec![2], Data::I64(vec![0, prefix as i64])),
            );
            let (_, pr) = run(&ps, &tp);
            let row = starts[n] as usize + j;
            assert!(max_diff(&ck[row * 4 * DD..(row + 1) * 4 * DD], &pr.state) < 1e-12);
            written += 1;
        }
        // the spare row after a sequence's checkpoints keeps the caller's values
        let spare = starts[n] as usize + written;
        let want: Vec<f64> = given[spare * 4 * DD..(spare + 1) * 4 * DD]
            .iter()
            .map(|&e| e as f64)
            .collect();
        assert_eq!(&ck[spare * 4 * DD..(spare + 1) * 4 * DD], &want[..]);
    }
}

/// Spec-decode slots: the state after token t lands in row idx[b, t], and equals the intermediate state of the
/// same request run in the definition mode from row idx[b, acc-1].
#[test]
fn spec_slots_hold_intermediate_states() {
    let h = heads();
    let (b, tt) = (4, 3);
    let mut spec = WorkloadSpec::mtp(h, b, tt);
    spec.serving = ServingDraw {
        spec_slots: true,
        pad_front: 1,
        ..Default::default()
    };
    let t = generate(&spec, 8);
    let (p, got) = run(&spec, &t);
    assert!(p.spec_slots && p.mtp_mode == MtpMode::Serving);
    let slots = t["initial_state_indices"].as_i32().unwrap().to_vec();
    let acc = t[names::NUM_ACCEPTED].as_i32().unwrap().to_vec();
    let pool = f32s(&t["initial_state"]);
    let rows = t["initial_state"].shape[0];
    // the definition call: request r reads row idx[r, acc-1] of the pool, with an intermediate buffer
    let mut def = WorkloadSpec::mtp(h, b, tt);
    def.pool_size = rows;
    let mut td = t.clone();
    td.remove(names::NUM_ACCEPTED);
    let read: Vec<i32> = (0..b)
        .map(|r| {
            if slots[r * tt] < 0 {
                0
            } else {
                slots[r * tt + acc[r] as usize - 1]
            }
        })
        .collect();
    td.insert(
        "initial_state_indices".into(),
        Tensor::new(vec![b], Data::I32(read.clone())),
    );
    td.insert(
        "intermediate_states_buffer".into(),
        Tensor::new(
            vec![rows, tt, 4, D, D],
            Data::F32(vec![0.0; rows * tt * 4 * DD]),
        ),
    );
    let (_, want) = run(&def, &td);
    let inter = want.intermediate.as_ref().unwrap();
    let mut written = vec![false; rows];
    for r in 0..b {
        let out = r * tt * 4 * D..(r + 1) * tt * 4 * D;
        if slots[r * tt] < 0 {
            assert!(got.output[out].iter().all(|&e| e == 0.0));
            continue;
        }
        assert!(max_diff(&got.output[out.clone()], &want.output[out]) < 1e-12);
        for j in 0..tt {
            let dst = slots[r * tt + j];
            if dst < 0 {
                continue;
            }
            let dst = dst as usize;
            written[dst] = true;
            let src = (read[r] as usize * tt + j) * 4 * DD;
            assert!(
                max_diff(
                    &got.state[dst * 4 * DD..(dst + 1) * 4 * DD],
                    &inter[src..src + 4 * DD]
                ) < 1e-12
            );
        }
    }
    for (r, w) in written.iter().enumerate() {
        if !w {
            let orig: Vec<f64> = pool[r * 4 * DD..(r + 1) * 4 * DD]
                .iter()
                .map(|&e| e as f64)
                .collect();
            assert_eq!(
                &got.state[r * 4 * DD..(r + 1) * 4 * DD],
                &orig[..],
                "row {r}"
            );
        }
    }
}

/// `has_initial_state = 0` is the same as a zero row.
#[test]
fn has_initial_state_zero_starts_from_zeros() {
    let h = heads();
    let mut spec = WorkloadSpec::decode(h, 3);
    spec.serving = ServingDraw {
        pool_rows: 6,
        ..Default::default()
    };
    let t = generate(&spec, 6);
    let idx = t[names::STATE_INDICES].as_i32().unwrap().to_vec();
    let mut th = t.clone();
    th.insert(
        names::HAS_INITIAL_STATE.into(),
        Tensor::new(vec![3], Data::I32(vec![1, 0, 1])),
    );
    let (_, got) = run(&spec, &th);
    let mut tz = t.clone();
    let mut pool = f32s(&t["state"]);
    let r1 = idx[1] as usize;
    pool[r1 * 4 * DD..(r1 + 1) * 4 * DD].fill(0.0);
    tz.insert(
        "state".into(),
        Tensor::new(t["state"].shape.clone(), Data::F32(pool)),
    );
    let (_, want) = run(&spec, &tz);
    assert_eq!(got.output, want.output);
    assert_eq!(got.state, want.state);
    let _ = DType::F32;
}
