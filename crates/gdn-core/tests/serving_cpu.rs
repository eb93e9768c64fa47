//! The CPU backend against the float64 reference in every serving mode of `gdn_core::serving`: precomputed
//! gates, in-kernel q/k norm, both state layouts, pools with both padding rules, `has_initial_state`,
//! zero-length pooled sequences, spec-decode slots, prefill checkpoints, int32 offsets, bf16 states, alone and
//! combined. Outputs start poisoned (NaN in everything the call must write); rows the call must leave alone
//! (pool guard rows, spare checkpoint rows) are checked bit for bit against the caller's values.

use gdn_core::compare::{compare, CheckReport, Tolerance, CONTEST};
use gdn_core::cpu::{run_portable, CpuBackend};
use gdn_core::reference::{self, plan};
use gdn_core::serving::{names, GateMode, PadRule, Serving, StateLayout};
use gdn_core::workload::{generate, ServingDraw, WorkloadSpec};
use gdn_core::{
    Backend, DType, Data, Heads, Inputs, MtpMode, Outputs, Problem, StateBuf, StateRef,
};
use gdn_core::{Tensor, TensorMap};

/// Output rel-L2: the bf16 rounding of the output (as in tests/cpu_backend.rs).
const OUT_REL_L2: f64 = 4e-3;
/// fp32 state rel-L2 (f32 math vs f64), as in tests/cpu_backend.rs.
const STATE_REL_L2_F32: f64 = 1e-6;
/// fp32 state with the in-kernel q/k norm: the f32 sum of squares against the reference's f64 sum moves
/// about 2e-5 of the normalised elements across a bf16 rounding boundary (one bf16 ulp of that q or k
/// element); by estimate one such k element moves a small call's state by 1e-4 rel-L2 or less. Measured
/// here ≤ 6e-8.
const STATE_REL_L2_QK_NORM: f64 = 1e-3;
/// bf16 state (stored rounded, compared with the f64 state): the bf16 rounding.
const STATE_REL_L2_BF16: f64 = 4e-3;

fn tol(max_rel_l2: f64) -> Tolerance {
    Tolerance {
        max_rel_l2,
        ..CONTEST
    }
}

fn h(hq: usize, hv: usize, d: usize) -> Heads {
    Heads::new(hq, hv, d).unwrap()
}

fn opts(qk_l2norm: bool, layout: StateLayout, pad: PadRule, checkpoint_every: usize) -> Serving {
    Serving {
        qk_l2norm,
        layout,
        pad,
        checkpoint_every,
    }
}

/// `spec` with the serving draw `sd`.
fn with(mut spec: WorkloadSpec, sd: ServingDraw) -> WorkloadSpec {
    spec.serving = sd;
    spec
}

/// A validated problem and the CPU backend's outputs for `tensors`.
fn run(spec: &WorkloadSpec, t: &TensorMap, portable: bool) -> (Problem, Outputs) {
    let p = spec
        .problem(t)
        .unwrap_or_else(|e| panic!("{}: {e}", spec.label));
    let x = p.inputs(t);
    let mut out = poisoned(&p, &x);
    if portable {
        run_portable(&p, &x, &mut out).unwrap();
    } else {
        CpuBackend.run(&p, &x, &mut out).unwrap();
    }
    (p, out)
}

/// NaN in everything the call must write ([`Outputs::poisoned`]); the MTP intermediate buffer is the
/// caller's with NaN in exactly the rows the reference's plan writes (a request that is padding under the
/// call's rule, such as slot 0 under the null-slot rule, writes none and its rows keep the caller's values).
fn poisoned(p: &Problem, x: &Inputs) -> Outputs {
    let mut out = Outputs::poisoned(p, x);
    if let (Some(given), Some(buf)) = (x.intermediate, out.intermediate.as_mut()) {
        buf.copy_from_slice(given);
        let per_row = p.dims.seq_len * p.state_row_len();
        for r in plan(p, x).iter().filter_map(|s| s.inter_row) {
            buf[r * per_row..(r + 1) * per_row].fill(f32::NAN);
        }
    }
    out
}

/// The comparison with the reference, at the tolerances of this problem.
fn report(p: &Problem, x: &Inputs, out: &Outputs) -> CheckReport {
    let want = reference::run(p, x);
    let state_l2 = if p.state_out_dtype() == DType::BF16 {
        STATE_REL_L2_BF16
    } else if p.serving.qk_l2norm {
        STATE_REL_L2_QK_NORM
    } else {
        STATE_REL_L2_F32
    };
    compare(p, out, &want, &tol(OUT_REL_L2), &tol(state_l2))
}

/// Rows the call must not write, bit for bit: state rows no sequence writes (pools and MTP: the input's row),
/// checkpoint rows no sequence owns (the caller's values). Returns the first difference.
fn guard_rows_differ(p: &Problem, x: &Inputs, out: &Outputs) -> Option<String> {
    let seqs = plan(p, x);
    let row = p.state_row_len();
    if p.state_in_place() {
        let mut written = vec![false; p.dims.state_rows];
        for s in &seqs {
            for &w in s.write_row.iter().chain(s.token_rows.iter().flatten()) {
                written[w] = true;
            }
        }
        for r in (0..p.dims.state_rows).filter(|&r| !written[r]) {
            if !same_rows(x.state.unwrap(), &out.state, r * row..(r + 1) * row) {
                return Some(format!("state row {r} (no sequence writes it) changed"));
            }
        }
    }
    if let (Some(given), Some(got)) = (x.checkpoints, &out.checkpoints) {
        let mut owned = vec![false; p.checkpoint_rows];
        for s in &seqs {
            if let Some(c0) = s.checkpoint_row {
                let n = s.tokens.len() / p.serving.checkpoint_every;
                owned[c0..c0 + n].iter_mut().for_each(|o| *o = true);
            }
        }
        for r in (0..p.checkpoint_rows).filter(|&r| !owned[r]) {
            if !same_rows(given, got, r * row..(r + 1) * row) {
                return Some(format!("checkpoint row {r} (no sequence owns it) changed"));
            }
        }
    }
    None
}

fn same_rows(given: StateRef, got: &StateBuf, r: std::ops::Range<usize>) -> bool {
    match (given, got) {
        (StateRef::F32(a), StateBuf::F32(b)) => a[r.clone()]
            .iter()
            .zip(&b[r])
            .all(|(x, y)| x.to_bits() == y.to_bits()),
        (StateRef::BF16(a), StateBuf::BF16(b)) => a[r.clone()] == b[r],
        _ => false,
    }
}

/// Runs `spec` (seed `seed`) on the CPU backend and checks it against the reference and the guard rows.
fn check_tensors(spec: &WorkloadSpec, t: &TensorMap, portable: bool) -> String {
    let (p, out) = run(spec, t, portable);
    let x = p.inputs(t);
    let r = report(&p, &x, &out);
    assert!(r.passed(), "{}: {}", spec.label, r.summary());
    if let Some(why) = guard_rows_differ(&p, &x, &out) {
        panic!("{}: {why}", spec.label);
    }
    r.summary()
}

fn check(spec: &WorkloadSpec, seed: u64) -> String {
    check_tensors(spec, &generate(spec, seed), false)
}

fn check_both_paths(spec: &WorkloadSpec, seed: u64) {
    let t = generate(spec, seed);
    check_tensors(spec, &t, false);
    check_tensors(spec, &t, true);
}

#[test]
fn precomputed_gates_every_mode_and_beta_dtype() {
    for (i, gates) in [GateMode::Log, GateMode::Linear].into_iter().enumerate() {
        for beta_f32 in [false, true] {
            let sd = ServingDraw {
                gates,
                beta_f32,
                ..Default::default()
            };
            let mut dec = with(WorkloadSpec::decode(h(4, 8, 64), 5), sd.clone());
            dec.label = format!("decode {gates} beta_f32={beta_f32}");
            check(&dec, 1 + i as u64);
            let mut pf = with(WorkloadSpec::prefill(h(2, 4, 64), &[40, 0, 9]), sd.clone());
            pf.extreme_gates = true;
            pf.label = format!("prefill {gates} beta_f32={beta_f32}");
            check(&pf, 2);
            let mut mtp = with(WorkloadSpec::mtp(h(1, 2, 64), 3, 4), sd);
            mtp.label = format!("mtp {gates} beta_f32={beta_f32}");
            check(&mtp, 3);
        }
    }
}

#[test]
fn qk_norm_in_kernel_on_raw_inputs() {
    let sd = ServingDraw {
        options: opts(true, StateLayout::KLast, PadRule::Negative, 0),
        ..Default::default()
    };
    let mut specs = [
        WorkloadSpec::decode(h(4, 8, 128), 6),
        WorkloadSpec::prefill(h(2, 4, 64), &[70, 3]),
        WorkloadSpec::mtp(h(2, 4, 64), 3, 5),
    ];
    for (i, s) in specs.iter_mut().enumerate() {
        s.normalize_qk = false;
        s.serving = sd.clone();
        s.label = format!("q/k norm {}", s.label);
        check_both_paths(s, 10 + i as u64);
    }
    // The norm changes the answer on raw inputs: without it the same tensors give a different output.
    let spec = &specs[1];
    let t = generate(spec, 11);
    let (p, mut out) = run(spec, &t, false);
    let x = p.inputs(&t);
    let mut plain = p.clone();
    plain.serving.qk_l2norm = false;
    CpuBackend.run(&plain, &x, &mut out).unwrap();
    assert!(!report(&p, &x, &out).passed());
}

#[test]
fn k_first_layout_decode_mtp_prefill() {
    let kf = |pool_rows: usize| ServingDraw {
        options: opts(false, StateLayout::KFirst, PadRule::Negative, 0),
        pool_rows,
        ..Default::default()
    };
    for dt in [DType::F32, DType::BF16] {
        let mut dec = with(WorkloadSpec::decode(h(4, 8, 64), 4), kf(0));
        dec.state_dtype = dt;
        dec.label = format!("decode k-first {dt}");
        check_both_paths(&dec, 20);
        let mut dec_pool = with(WorkloadSpec::decode(h(2, 4, 128), 3), kf(7));
        dec_pool.state_dtype = dt;
        dec_pool.label = format!("decode k-first pool {dt}");
        check(&dec_pool, 21);
        let mut mtp = with(WorkloadSpec::mtp(h(2, 4, 64), 3, 4), kf(0));
        mtp.pool_size = 6;
        mtp.state_dtype = dt;
        mtp.label = format!("mtp k-first +intermediate {dt}");
        check_both_paths(&mtp, 22);
        mtp.mtp_mode = MtpMode::Serving;
        mtp.padding = 1;
        mtp.label = format!("mtp serving k-first +intermediate {dt}");
        check(&mtp, 23);
        let mut pf = with(WorkloadSpec::prefill(h(1, 2, 64), &[90, 1, 0, 17]), kf(0));
        pf.state_dtype = dt;
        pf.label = format!("prefill k-first {dt}");
        check_both_paths(&pf, 24);
        let mut pf_pool = with(WorkloadSpec::prefill(h(1, 2, 64), &[33, 0, 5]), kf(9));
        pf_pool.state_dtype = dt;
        pf_pool.label = format!("prefill k-first pool {dt}");
        check(&pf_pool, 25);
    }
}

#[test]
fn pools_padding_rules_indices_and_fresh_slots() {
    let mut seed = 30;
    for pad in [PadRule::Negative, PadRule::NullSlot] {
        for index_i64 in [false, true] {
            for (front, back, fresh) in [(1, 0, false), (0, 2, true), (2, 1, true)] {
                let sd = ServingDraw {
                    options: opts(false, StateLayout::KLast, pad, 0),
                    pool_rows: 16,
                    index_i64,
                    pad_front: front,
                    pad_back: back,
                    has_initial_state: fresh,
                    ..Default::default()
                };
                let what = format!("{pad} i64={index_i64} pad {front}/{back} fresh={fresh}");
                let mut dec = with(WorkloadSpec::decode(h(4, 8, 64), 6), sd.clone());
                dec.label = format!("decode pool {what}");
                check(&dec, seed);
                let mut pf = with(WorkloadSpec::prefill(h(2, 4, 64), &[12, 1, 30, 0, 7]), sd);
                pf.label = format!("prefill pool {what}");
                check(&pf, seed + 1);
                seed += 2;
            }
        }
    }
}

#[test]
fn pooled_prefill_zero_length_sequences_write_nothing() {
    for (pad, dt) in [
        (PadRule::Negative, DType::F32),
        (PadRule::NullSlot, DType::BF16),
    ] {
        let mut spec = with(
            WorkloadSpec::prefill(h(2, 4, 64), &[0, 9, 0, 0, 21, 1, 0]),
            ServingDraw {
                options: opts(false, StateLayout::KLast, pad, 0),
                pool_rows: 12,
                pad_back: 1,
                has_initial_state: true,
                cu_i32: true,
                ..Default::default()
            },
        );
        spec.state_dtype = dt;
        spec.label = format!("prefill pool zero-length {pad} {dt}");
        check_both_paths(&spec, 40);
    }
}

#[test]
fn spec_decode_slots() {
    for (i, (pad, layout, dt)) in [
        (PadRule::Negative, StateLayout::KLast, DType::F32),
        (PadRule::NullSlot, StateLayout::KLast, DType::BF16),
        (PadRule::Negative, StateLayout::KFirst, DType::F32),
        (PadRule::NullSlot, StateLayout::KFirst, DType::BF16),
    ]
    .into_iter()
    .enumerate()
    {
        let mut spec = with(
            WorkloadSpec::mtp(h(2, 4, 64), 5, 4),
            ServingDraw {
                options: opts(false, layout, pad, 0),
                spec_slots: true,
                pad_front: 1,
                pad_back: 1,
                has_initial_state: i % 2 == 1,
                ..Default::default()
            },
        );
        spec.state_dtype = dt;
        spec.label = format!("mtp spec slots {pad} {layout} {dt}");
        check_both_paths(&spec, 50 + i as u64);
    }
}

/// MTP serving pools (final state written back, intermediate rows) with fresh slots and both padding rules.
#[test]
fn mtp_serving_pool_with_fresh_slots() {
    for (i, (pad, layout)) in [
        (PadRule::Negative, StateLayout::KLast),
        (PadRule::NullSlot, StateLayout::KFirst),
    ]
    .into_iter()
    .enumerate()
    {
        let mut spec = with(
            WorkloadSpec::mtp(h(4, 8, 64), 6, 3),
            ServingDraw {
                options: opts(false, layout, pad, 0),
                has_initial_state: true,
                gates: GateMode::Log,
                ..Default::default()
            },
        );
        spec.pool_size = 9;
        spec.mtp_mode = MtpMode::Serving;
        spec.padding = 2;
        spec.label = format!("mtp serving pool fresh slots {pad} {layout}");
        check_both_paths(&spec, 55 + i as u64);
    }
}

/// Lengths around the checkpoint interval: none, partial, exactly one, one and a bit, several.
const CKPT_LENS: [usize; 7] = [0, 1, 63, 64, 65, 200, 300];

#[test]
fn prefill_checkpoints() {
    for (every, layout) in [(64, StateLayout::KLast), (128, StateLayout::KFirst)] {
        let mut spec = with(
            WorkloadSpec::prefill(h(1, 2, 64), &CKPT_LENS),
            ServingDraw {
                options: opts(false, layout, PadRule::Negative, every),
                ..Default::default()
            },
        );
        spec.label = format!("prefill checkpoints every {every} {layout}");
        check_both_paths(&spec, 60);
    }
    // d = 128: the long sequences split into several V-row blocks, each storing its part of a checkpoint.
    let mut spec = with(
        WorkloadSpec::prefill(h(1, 1, 128), &[130, 64]),
        ServingDraw {
            options: opts(false, StateLayout::KLast, PadRule::Negative, 64),
            ..Default::default()
        },
    );
    spec.label = "prefill checkpoints d128".into();
    check(&spec, 61);
}

#[test]
fn bf16_state_with_pool_and_checkpoints() {
    for (pad, layout, every) in [
        (PadRule::Negative, StateLayout::KLast, 64),
        (PadRule::NullSlot, StateLayout::KFirst, 128),
    ] {
        let mut spec = with(
            WorkloadSpec::prefill(h(2, 4, 64), &CKPT_LENS),
            ServingDraw {
                options: opts(false, layout, pad, every),
                pool_rows: 12,
                pad_front: 1,
                has_initial_state: true,
                index_i64: true,
                ..Default::default()
            },
        );
        spec.state_dtype = DType::BF16;
        spec.label = format!("prefill bf16 pool checkpoints {every} {pad} {layout}");
        let t = generate(&spec, 70);
        check_tensors(&spec, &t, false);
        // f32 checkpoints of a bf16 state.
        let mut t32 = t.clone();
        let c = &t[names::CHECKPOINTS];
        let wide: Vec<f32> = c.as_bf16().unwrap().iter().map(|e| e.to_f32()).collect();
        t32.insert(
            names::CHECKPOINTS.into(),
            Tensor::new(c.shape.clone(), Data::F32(wide)),
        );
        spec.label += " (f32 checkpoints)";
        let p = spec.problem(&t32).unwrap();
        assert_eq!(p.checkpoint_dtype, DType::F32);
        check_tensors(&spec, &t32, false);
        check_tensors(&spec, &t32, true);
    }
}

/// Every mode at once, on each head ratio (qk4_v8, qk2_v4, qk1_v1 styles) and both head sizes.
#[test]
fn all_modes_combined_per_head_ratio() {
    for (i, heads) in [h(4, 8, 64), h(2, 4, 64), h(1, 1, 64), h(1, 2, 128)]
        .into_iter()
        .enumerate()
    {
        let seed = 80 + i as u64;
        let all = |every: usize| ServingDraw {
            options: opts(true, StateLayout::KFirst, PadRule::NullSlot, every),
            gates: GateMode::Log,
            pool_rows: 12,
            index_i64: true,
            pad_front: 1,
            pad_back: 1,
            has_initial_state: true,
            cu_i32: every > 0,
            ..Default::default()
        };
        let mut dec = with(WorkloadSpec::decode(heads, 6), all(0));
        dec.label = format!("decode all modes {heads:?}");
        check_both_paths(&dec, seed);
        let lens: &[usize] = if heads.head_size == 128 {
            &[1, 65, 0, 3, 1]
        } else {
            &[1, 130, 0, 64, 5, 1]
        };
        let mut pf = with(WorkloadSpec::prefill(heads, lens), all(64));
        pf.normalize_qk = false;
        pf.label = format!("prefill all modes {heads:?}");
        check_both_paths(&pf, seed);
        let mut mtp = with(
            WorkloadSpec::mtp(heads, 4, 3),
            ServingDraw {
                options: opts(true, StateLayout::KFirst, PadRule::NullSlot, 0),
                gates: GateMode::Linear,
                beta_f32: true,
                spec_slots: true,
                pad_front: 1,
                has_initial_state: true,
                ..Default::default()
            },
        );
        mtp.normalize_qk = false;
        mtp.state_dtype = if i % 2 == 0 { DType::F32 } else { DType::BF16 };
        mtp.label = format!("mtp spec slots all modes {heads:?}");
        check_both_paths(&mtp, seed);
    }
}

/// The checks can fail: a run whose guard row, written row or spare checkpoint row is off is caught.
#[test]
fn corrupted_results_are_caught() {
    let spec = with(
        WorkloadSpec::prefill(h(1, 2, 64), &[70, 0, 5]),
        ServingDraw {
            options: opts(false, StateLayout::KFirst, PadRule::Negative, 64),
            pool_rows: 8,
            pad_back: 1,
            ..Default::default()
        },
    );
    let t = generate(&spec, 90);
    let (p, good) = run(&spec, &t, false);
    let x = p.inputs(&t);
    assert!(report(&p, &x, &good).passed());
    assert!(guard_rows_differ(&p, &x, &good).is_none());
    let seqs = plan(&p, &x);
    let row = p.state_row_len();
    let written: Vec<usize> = seqs.iter().filter_map(|s| s.write_row).collect();
    let guard = (0..p.dims.state_rows)
        .find(|r| !written.contains(r))
        .unwrap();
    let bump = |buf: &mut StateBuf, i: usize| match buf {
        StateBuf::F32(v) => v[i] += 0.5,
        StateBuf::BF16(v) => v[i] = half::bf16::from_f32(v[i].to_f32() + 0.5),
        StateBuf::F16(v) => v[i] = half::f16::from_f32(v[i].to_f32() + 0.5),
    };
    // A guard row of the pool (no sequence writes it) changed.
    let mut bad = good.clone();
    bump(&mut bad.state, guard * row + 3);
    assert!(!report(&p, &x, &bad).passed());
    assert!(guard_rows_differ(&p, &x, &bad).is_some());
    // A written pool row off.
    let mut bad = good.clone();
    bump(&mut bad.state, written[0] * row + 5);
    assert!(!report(&p, &x, &bad).passed());
    // A spare checkpoint row (sequence 0 owns row 0 only; row 1 is its spare) changed.
    let mut bad = good.clone();
    bump(bad.checkpoints.as_mut().unwrap(), row + 7);
    assert!(!report(&p, &x, &bad).passed());
    assert!(guard_rows_differ(&p, &x, &bad).is_some());
    // A checkpoint left unwritten (still NaN-poisoned).
    let mut bad = good.clone();
    if let Some(StateBuf::F32(v)) = bad.checkpoints.as_mut() {
        v[11] = f32::NAN;
    }
    assert!(!report(&p, &x, &bad).passed());
    // A padded sequence's output not zero.
    let mut bad = good;
    let last = bad.output.len() - 1;
    bad.output.set(last, 1.0);
    assert!(!report(&p, &x, &bad).passed());
}

/// Output buffers that do not match the problem are rejected before anything is written.
#[test]
fn wrong_checkpoint_buffer_is_rejected() {
    let spec = with(
        WorkloadSpec::prefill(h(1, 2, 64), &[64]),
        ServingDraw {
            options: opts(false, StateLayout::KLast, PadRule::Negative, 64),
            ..Default::default()
        },
    );
    let t = generate(&spec, 91);
    let p = spec.problem(&t).unwrap();
    let x = p.inputs(&t);
    let mut out = poisoned(&p, &x);
    out.checkpoints = None;
    assert!(CpuBackend.run(&p, &x, &mut out).is_err());
    let mut out = poisoned(&p, &x);
    if let Some(StateBuf::F32(v)) = out.checkpoints.as_mut() {
        v.pop();
    }
    assert!(CpuBackend.run(&p, &x, &mut out).is_err());
}
