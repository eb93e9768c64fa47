//! `gdn check`'s serving cases: every serving mode of [`gdn_core::serving`] (gate modes, in-kernel q/k norm,
//! both state layouts, pools under both padding rules with padding at both ends, `has_initial_state`, int32 and
//! int64 indices and `cu_seqlens`, spec-decode slots, prefill checkpoints, bf16 states) alone and combined, on
//! every operation and head configuration. Each case's pool has more rows than the call touches, so the rows
//! it must leave alone are compared too (guard rows), and every written row starts poisoned.
//!
//! The fp16 cases ([`f16_cases`]): fp16 activations (q, k, v, a, b, output, a 16-bit beta) alone, an fp16 state
//! alone (decode, MTP, prefill: on CUDA once per prefill plan), both together with pools and spec-decode slots,
//! checkpoints in fp16 and in f32, K-first fp16 states, the in-kernel q/k norm rounding to fp16, every head
//! configuration with every mode. Multi-token cases use normalised q/k: with raw randn q/k (|k|² ≈ 128) the
//! state grows ~60x per token and leaves fp16's range (65504) within a few tokens, as it would in a model.
//!
//! The strided cases ([`strided_cases`]) place q, k and v on the device as views of one fused projection
//! buffer (vLLM's `mixed_qkv`: per token `[q heads | k heads | v heads]`) and the output as a view with a
//! padded token stride (one case a wider head stride, one head-major), on decode, MTP and prefill, alone and
//! with a pool, q/k norm and the other modes. Every gap between rows holds a NaN guard: a kernel reading
//! outside its rows gives NaN outputs, one writing outside them fails the read-back (gdn_cuda's `exec::io`).
//! The CPU backend runs the same problems dense (a view is a device layout only); the reference is unchanged.

use crate::heads::all_heads;
use crate::verify::Prepared;
use anyhow::{Context, Result};
use gdn_core::problem::{ActViews, View};
use gdn_core::serving::{GateMode, PadRule, Serving, StateLayout};
use gdn_core::workload::{generate, ServingDraw, WorkloadSpec};
use gdn_core::{DType, Heads};

/// A case: `spec` with the serving draw `sd` and a label.
fn case(mut spec: WorkloadSpec, label: &str, sd: ServingDraw) -> WorkloadSpec {
    spec.serving = sd;
    spec.label = format!("serving {label}");
    spec
}

fn opts(qk_l2norm: bool, layout: StateLayout, pad: PadRule, checkpoint_every: usize) -> Serving {
    Serving {
        qk_l2norm,
        layout,
        pad,
        checkpoint_every,
    }
}

/// Every mode at once: log gates with bf16 beta, q/k norm on raw inputs, K-first, a null-slot pool with int64
/// indices and padding at both ends, `has_initial_state` (and for prefill int32 offsets and checkpoints).
fn combined(every: usize, pool_rows: usize) -> ServingDraw {
    ServingDraw {
        options: opts(true, StateLayout::KFirst, PadRule::NullSlot, every),
        gates: GateMode::Log,
        pool_rows,
        index_i64: true,
        pad_front: 1,
        pad_back: 1,
        has_initial_state: true,
        cu_i32: every > 0,
        ..Default::default()
    }
}

/// The serving cases, in order (decode, MTP, prefill).
pub fn cases(quick: bool) -> Vec<WorkloadSpec> {
    let hd = Heads::new(4, 8, 128).expect("qk4_v8");
    let heads = all_heads();
    let mut v = Vec::new();
    let kl = StateLayout::KLast;
    let kf = StateLayout::KFirst;
    let neg = PadRule::Negative;
    let null = PadRule::NullSlot;

    // Decode.
    let dec = |b: usize| WorkloadSpec::decode(hd, b);
    for (gates, beta_f32, name) in [
        (GateMode::Log, false, "log g, bf16 beta"),
        (GateMode::Log, true, "log g, f32 beta"),
        (GateMode::Linear, true, "linear alpha, f32 beta"),
    ] {
        v.push(case(
            dec(8),
            &format!("decode B=8 {name}"),
            ServingDraw {
                gates,
                beta_f32,
                ..Default::default()
            },
        ));
    }
    v.push(case(
        dec(5),
        "decode B=5 q/k norm in kernel (raw q/k)",
        ServingDraw {
            options: opts(true, kl, neg, 0),
            ..Default::default()
        },
    ));
    v.push(case(
        dec(4),
        "decode B=4 k-first",
        ServingDraw {
            options: opts(false, kf, neg, 0),
            ..Default::default()
        },
    ));
    let pools: &[usize] = if quick { &[9, 64] } else { &[1, 9, 64, 256] };
    for &b in pools {
        v.push(case(
            dec(b),
            &format!("decode B={b} pool -1 padding both ends, int32"),
            ServingDraw {
                pool_rows: 2 * b + 3,
                pad_front: 1,
                pad_back: usize::from(b > 1),
                ..Default::default()
            },
        ));
    }
    v.push(case(
        dec(33),
        "decode B=33 pool null slot, int64, has_initial_state",
        ServingDraw {
            options: opts(false, kl, null, 0),
            pool_rows: 80,
            index_i64: true,
            pad_front: 2,
            pad_back: 2,
            has_initial_state: true,
            ..Default::default()
        },
    ));
    let mut bf = dec(16);
    bf.state_dtype = DType::BF16;
    v.push(case(
        bf,
        "decode B=16 bf16 pool",
        ServingDraw {
            pool_rows: 40,
            pad_back: 1,
            ..Default::default()
        },
    ));
    for (name, h) in &heads {
        v.push(case(
            WorkloadSpec::decode(*h, 7),
            &format!("decode {name} B=7 all modes"),
            combined(0, 20),
        ));
    }

    // MTP: spec-decode slots, serving pools under the null-slot rule, gates, norm and layout.
    let mtp = |b: usize, t: usize, inter: bool| {
        let mut s = WorkloadSpec::mtp(hd, b, t);
        s.intermediate = inter;
        s.normalize_qk = true;
        s
    };
    for (b, t, pad) in [(6, 4, neg), (5, 3, null), (3, 8, neg)] {
        v.push(case(
            mtp(b, t, false),
            &format!("mtp B={b} T={t} spec slots, {pad} padding both ends"),
            ServingDraw {
                options: opts(false, kl, pad, 0),
                spec_slots: true,
                pad_front: 1,
                pad_back: 1,
                has_initial_state: b == 5,
                ..Default::default()
            },
        ));
    }
    let mut serving_mtp = mtp(8, 4, true);
    serving_mtp.mtp_mode = gdn_core::MtpMode::Serving;
    serving_mtp.padding = 2;
    v.push(case(
        serving_mtp,
        "mtp B=8 T=4 pool update, null-slot rule, +intermediate",
        ServingDraw {
            options: opts(false, kl, null, 0),
            ..Default::default()
        },
    ));
    v.push(case(
        mtp(4, 5, true),
        "mtp B=4 T=5 linear alpha, q/k norm, k-first, +intermediate",
        ServingDraw {
            options: opts(true, kf, neg, 0),
            gates: GateMode::Linear,
            beta_f32: true,
            ..Default::default()
        },
    ));
    for (name, h) in &heads {
        let mut s = WorkloadSpec::mtp(*h, 4, 3);
        s.normalize_qk = false;
        v.push(case(
            s,
            &format!("mtp {name} B=4 T=3 spec slots, all modes"),
            ServingDraw {
                options: opts(true, kf, null, 0),
                gates: GateMode::Log,
                spec_slots: true,
                pad_front: 1,
                has_initial_state: true,
                ..Default::default()
            },
        ));
    }

    // Prefill (normalised q/k unless the kernel normalises them).
    let pf = |lens: &[usize]| {
        let mut s = WorkloadSpec::prefill(hd, lens);
        s.normalize_qk = true;
        s
    };
    v.push(case(
        pf(&[100, 37]),
        "prefill [100, 37] log g, bf16 beta",
        ServingDraw {
            gates: GateMode::Log,
            ..Default::default()
        },
    ));
    v.push(case(
        pf(&[64, 1, 65]),
        "prefill [64, 1, 65] linear alpha, f32 beta",
        ServingDraw {
            gates: GateMode::Linear,
            beta_f32: true,
            ..Default::default()
        },
    ));
    let mut raw = pf(&[130, 7]);
    raw.normalize_qk = false;
    v.push(case(
        raw,
        "prefill [130, 7] q/k norm in kernel (raw q/k)",
        ServingDraw {
            options: opts(true, kl, neg, 0),
            ..Default::default()
        },
    ));
    v.push(case(
        pf(&[200, 66]),
        "prefill [200, 66] k-first",
        ServingDraw {
            options: opts(false, kf, neg, 0),
            ..Default::default()
        },
    ));
    v.push(case(
        pf(&[70, 20, 0, 300]),
        "prefill [70, 20, 0, 300] int32 cu_seqlens",
        ServingDraw {
            cu_i32: true,
            ..Default::default()
        },
    ));
    v.push(case(
        pf(&[0, 50, 0, 64, 129, 3]),
        "prefill [0, 50, 0, 64, 129, 3] pool -1 padding both ends, has_initial_state",
        ServingDraw {
            pool_rows: 64,
            pad_front: 1,
            pad_back: 1,
            has_initial_state: true,
            ..Default::default()
        },
    ));
    let many: Vec<usize> = (0..57)
        .map(|i| (i * 37 + 11) % if quick { 90 } else { 300 })
        .collect();
    v.push(case(
        pf(&many),
        "prefill 57 seqs pool null slot, int64",
        ServingDraw {
            options: opts(false, kl, null, 0),
            pool_rows: 100,
            index_i64: true,
            pad_front: 3,
            pad_back: 2,
            ..Default::default()
        },
    ));
    v.push(case(
        pf(&[0, 1, 63, 64, 65, 200, 300]),
        "prefill [0, 1, 63, 64, 65, 200, 300] checkpoints every 64",
        ServingDraw {
            options: opts(false, kl, neg, 64),
            ..Default::default()
        },
    ));
    v.push(case(
        pf(&[128, 500, 127]),
        "prefill [128, 500, 127] pool, checkpoints every 128",
        ServingDraw {
            options: opts(false, kl, neg, 128),
            pool_rows: 7,
            ..Default::default()
        },
    ));
    let mut bfp = pf(&[90, 40]);
    bfp.state_dtype = DType::BF16;
    v.push(case(
        bfp,
        "prefill [90, 40] bf16 pool, checkpoints every 64",
        ServingDraw {
            options: opts(false, kl, neg, 64),
            pool_rows: 5,
            ..Default::default()
        },
    ));
    let long = if quick { 700 } else { 4096 };
    v.push(case(
        pf(&[long]),
        &format!("prefill 1x{long} pool, checkpoints every 256"),
        ServingDraw {
            options: opts(false, kl, neg, 256),
            pool_rows: 3,
            ..Default::default()
        },
    ));
    for (name, h) in &heads {
        let mut s = WorkloadSpec::prefill(*h, &[0, 140, 64, 7, 0, 260]);
        s.normalize_qk = false;
        v.push(case(
            s,
            &format!("prefill {name} [0, 140, 64, 7, 0, 260] all modes"),
            combined(64, 12),
        ));
    }
    v.extend(f16_cases(quick));
    v
}

/// `spec` with fp16 activations (`act`) and / or an fp16 state (`state`).
fn f16(mut spec: WorkloadSpec, act: bool, state: bool) -> WorkloadSpec {
    if act {
        spec.act_dtype = DType::F16;
    }
    if state {
        spec.state_dtype = DType::F16;
    }
    spec
}

/// The fp16 cases, in order (decode, MTP, prefill); see the module doc.
pub fn f16_cases(quick: bool) -> Vec<WorkloadSpec> {
    let hd = Heads::new(4, 8, 128).expect("qk4_v8");
    let heads = all_heads();
    let mut v = Vec::new();
    let (kl, kf) = (StateLayout::KLast, StateLayout::KFirst);
    let (neg, null) = (PadRule::Negative, PadRule::NullSlot);
    let none = ServingDraw::default;

    // Decode (raw randn q/k, as the contest draws them: one token stays in fp16's range).
    let dec = |b: usize| WorkloadSpec::decode(hd, b);
    v.push(case(
        f16(dec(8), true, false),
        "fp16 act: decode B=8",
        none(),
    ));
    v.push(case(
        f16(dec(16), false, true),
        "fp16 state: decode B=16",
        none(),
    ));
    v.push(case(
        f16(dec(5), true, true),
        "fp16 act+state: decode B=5 log g, fp16 beta",
        ServingDraw {
            gates: GateMode::Log,
            ..Default::default()
        },
    ));
    v.push(case(
        f16(dec(6), true, false),
        "fp16 act: decode B=6 q/k norm in kernel (raw q/k)",
        ServingDraw {
            options: opts(true, kl, neg, 0),
            ..Default::default()
        },
    ));
    v.push(case(
        f16(dec(4), false, true),
        "fp16 state: decode B=4 k-first",
        ServingDraw {
            options: opts(false, kf, neg, 0),
            ..Default::default()
        },
    ));
    let pools: &[usize] = if quick { &[9, 64] } else { &[1, 9, 64, 256] };
    for &b in pools {
        v.push(case(
            f16(dec(b), true, true),
            &format!("fp16 act+state: decode B={b} pool -1 padding both ends"),
            ServingDraw {
                pool_rows: 2 * b + 3,
                pad_front: 1,
                pad_back: usize::from(b > 1),
                ..Default::default()
            },
        ));
    }
    v.push(case(
        f16(dec(33), true, true),
        "fp16 act+state: decode B=33 k-first pool null slot, int64, has_initial_state",
        ServingDraw {
            options: opts(false, kf, null, 0),
            pool_rows: 80,
            index_i64: true,
            pad_front: 2,
            pad_back: 2,
            has_initial_state: true,
            ..Default::default()
        },
    ));
    for (name, h) in &heads {
        v.push(case(
            f16(WorkloadSpec::decode(*h, 7), true, true),
            &format!("fp16 act+state: decode {name} B=7 all modes"),
            combined(0, 20),
        ));
    }

    // MTP (normalised q/k, or normalised in the kernel).
    let mtp = |b: usize, t: usize, inter: bool| {
        let mut s = WorkloadSpec::mtp(hd, b, t);
        s.intermediate = inter;
        s.normalize_qk = true;
        s
    };
    v.push(case(
        f16(mtp(4, 4, true), true, false),
        "fp16 act: mtp B=4 T=4 +intermediate",
        none(),
    ));
    v.push(case(
        f16(mtp(3, 8, true), false, true),
        "fp16 state: mtp B=3 T=8 +intermediate (f32)",
        none(),
    ));
    let mut serving_mtp = f16(mtp(8, 4, true), true, true);
    serving_mtp.mtp_mode = gdn_core::MtpMode::Serving;
    serving_mtp.padding = 2;
    v.push(case(
        serving_mtp,
        "fp16 act+state: mtp B=8 T=4 pool update, null-slot rule, +intermediate",
        ServingDraw {
            options: opts(false, kl, null, 0),
            ..Default::default()
        },
    ));
    v.push(case(
        f16(mtp(6, 4, false), true, true),
        "fp16 act+state: mtp B=6 T=4 spec slots, -1 padding both ends",
        ServingDraw {
            spec_slots: true,
            pad_front: 1,
            pad_back: 1,
            ..Default::default()
        },
    ));
    v.push(case(
        f16(mtp(4, 5, true), true, true),
        "fp16 act+state: mtp B=4 T=5 k-first, linear alpha, fp16 beta, +intermediate",
        ServingDraw {
            options: opts(false, kf, neg, 0),
            gates: GateMode::Linear,
            ..Default::default()
        },
    ));
    for (name, h) in &heads {
        let mut s = f16(WorkloadSpec::mtp(*h, 4, 3), true, true);
        s.normalize_qk = false;
        v.push(case(
            s,
            &format!("fp16 act+state: mtp {name} B=4 T=3 spec slots, all modes"),
            ServingDraw {
                options: opts(true, kf, null, 0),
                gates: GateMode::Log,
                spec_slots: true,
                pad_front: 1,
                has_initial_state: true,
                ..Default::default()
            },
        ));
    }

    // Prefill (normalised q/k unless the kernel normalises them); on CUDA each runs once per plan.
    let pf = |lens: &[usize]| {
        let mut s = WorkloadSpec::prefill(hd, lens);
        s.normalize_qk = true;
        s
    };
    v.push(case(
        f16(pf(&[100, 37, 0, 64]), true, false),
        "fp16 act: prefill [100, 37, 0, 64]",
        none(),
    ));
    v.push(case(
        f16(pf(&[130, 7]), false, true),
        "fp16 state: prefill [130, 7]",
        none(),
    ));
    v.push(case(
        f16(pf(&[64, 1, 65]), true, true),
        "fp16 act+state: prefill [64, 1, 65] log g, fp16 beta",
        ServingDraw {
            gates: GateMode::Log,
            ..Default::default()
        },
    ));
    let mut raw = f16(pf(&[130, 7]), true, false);
    raw.normalize_qk = false;
    v.push(case(
        raw,
        "fp16 act: prefill [130, 7] q/k norm in kernel (raw q/k)",
        ServingDraw {
            options: opts(true, kl, neg, 0),
            ..Default::default()
        },
    ));
    v.push(case(
        f16(pf(&[200, 66]), false, true),
        "fp16 state: prefill [200, 66] k-first",
        ServingDraw {
            options: opts(false, kf, neg, 0),
            ..Default::default()
        },
    ));
    v.push(case(
        f16(pf(&[0, 50, 0, 64, 129, 3]), true, true),
        "fp16 act+state: prefill [0, 50, 0, 64, 129, 3] pool -1 padding both ends, has_initial_state",
        ServingDraw {
            pool_rows: 64,
            pad_front: 1,
            pad_back: 1,
            has_initial_state: true,
            ..Default::default()
        },
    ));
    for (f32_ckpt, what) in [(false, "fp16"), (true, "f32")] {
        v.push(case(
            f16(pf(&[0, 1, 63, 64, 65, 200, 300]), false, true),
            &format!(
                "fp16 state: prefill [0, 1, 63, 64, 65, 200, 300] {what} checkpoints every 64"
            ),
            ServingDraw {
                options: opts(false, kl, neg, 64),
                checkpoints_f32: f32_ckpt,
                ..Default::default()
            },
        ));
        v.push(case(
            f16(pf(&[128, 500, 127]), true, true),
            &format!("fp16 act+state: prefill [128, 500, 127] pool, {what} checkpoints every 128"),
            ServingDraw {
                options: opts(false, kl, neg, 128),
                pool_rows: 7,
                checkpoints_f32: f32_ckpt,
                ..Default::default()
            },
        ));
    }
    let long = if quick { 700 } else { 4096 };
    v.push(case(
        f16(pf(&[long]), true, true),
        &format!("fp16 act+state: prefill 1x{long} pool, checkpoints every 256"),
        ServingDraw {
            options: opts(false, kl, neg, 256),
            pool_rows: 3,
            ..Default::default()
        },
    ));
    for (name, h) in &heads {
        let mut s = f16(
            WorkloadSpec::prefill(*h, &[0, 140, 64, 7, 0, 260]),
            true,
            true,
        );
        s.normalize_qk = false;
        v.push(case(
            s,
            &format!("fp16 act+state: prefill {name} [0, 140, 64, 7, 0, 260] all modes"),
            combined(64, 12),
        ));
    }
    v
}

/// The strided-view cases, in order (decode, MTP, prefill): each workload with the device placement of its
/// q, k, v and output.
pub fn strided_cases(quick: bool) -> Vec<(WorkloadSpec, ActViews)> {
    let hd = Heads::new(4, 8, 128).expect("qk4_v8");
    let big = Heads::new(16, 32, 128).expect("qk16_v32");
    let d = 128;
    let mut v = Vec::new();
    let fused = |h: &Heads, offset: usize, pad: usize| ActViews::fused_qkv(h, offset, pad);
    let label = |s: &mut WorkloadSpec, what: &str| s.label = format!("serving strided {what}");

    // Decode: the fused buffer with a padded output; a wider output head stride; a head-major output.
    let mut s = WorkloadSpec::decode(hd, 8);
    label(&mut s, "decode B=8 fused qkv, output token stride +8");
    v.push((s, fused(&hd, 8, 8)));
    let mut s = WorkloadSpec::decode(hd, 5);
    label(
        &mut s,
        "decode B=5 fused qkv, output head stride 136, token stride +24",
    );
    let mut av = fused(&hd, 16, 0);
    av.out = View {
        offset: 16,
        token: 8 * 136 + 24,
        head: 136,
    };
    v.push((s, av));
    let b = if quick { 9 } else { 65 };
    let mut s = case(WorkloadSpec::decode(big, b), "", combined(0, 2 * b + 3));
    label(
        &mut s,
        &format!("decode qk16_v32 B={b} fused qkv, head-major output, all modes"),
    );
    let mut av = fused(&big, 0, 0);
    av.out = View {
        offset: 8,
        token: d,
        head: b * d + 32,
    };
    v.push((s, av));

    // MTP: spec-decode slots with the modes, and the definition mode with an intermediate buffer.
    let mut s = WorkloadSpec::mtp(hd, 4, 3);
    s.normalize_qk = false;
    let mut s = case(
        s,
        "",
        ServingDraw {
            options: opts(true, StateLayout::KLast, PadRule::NullSlot, 0),
            gates: GateMode::Log,
            spec_slots: true,
            pad_front: 1,
            has_initial_state: true,
            ..Default::default()
        },
    );
    label(
        &mut s,
        "mtp B=4 T=3 fused qkv, output token stride +64, spec slots, q/k norm, log g",
    );
    v.push((s, fused(&hd, 0, 64)));
    let mut s = WorkloadSpec::mtp(big, 6, 4);
    s.normalize_qk = true;
    label(
        &mut s,
        "mtp qk16_v32 B=6 T=4 fused qkv, output token stride +8, +intermediate",
    );
    v.push((s, fused(&big, 8, 8)));

    // Prefill: precomputed gates alone, then every mode with a pool and checkpoints.
    let mut s = WorkloadSpec::prefill(hd, &[100, 37, 0, 64]);
    s.normalize_qk = true;
    let mut s = case(
        s,
        "",
        ServingDraw {
            gates: GateMode::Log,
            ..Default::default()
        },
    );
    label(
        &mut s,
        "prefill [100, 37, 0, 64] fused qkv, output token stride +128, log g",
    );
    v.push((s, fused(&hd, 0, 128)));
    let long = if quick { 300 } else { 1100 };
    let lens = [0, 140, 64, 7, 0, long];
    let mut s = WorkloadSpec::prefill(big, &lens);
    s.normalize_qk = false;
    let mut s = case(s, "", combined(64, 12));
    label(
        &mut s,
        &format!("prefill qk16_v32 {lens:?} fused qkv, output token stride +8, all modes"),
    );
    v.push((s, fused(&big, 24, 8)));

    // fp16 activations as views (the NaN guard is a NaN in fp16 too), with an fp16 state.
    let mut s = f16(WorkloadSpec::decode(hd, 8), true, true);
    label(
        &mut s,
        "fp16 act+state: decode B=8 fused qkv, output token stride +8",
    );
    v.push((s, fused(&hd, 8, 8)));
    let mut s = f16(WorkloadSpec::prefill(hd, &[100, 37, 0, 64]), true, true);
    s.normalize_qk = true;
    let mut s = case(s, "", combined(64, 9));
    label(
        &mut s,
        "fp16 act+state: prefill [100, 37, 0, 64] fused qkv, output token stride +128, all modes",
    );
    v.push((s, fused(&hd, 0, 128)));
    v
}

/// A strided case's inputs and float64 reference: `spec` drawn with `seed`, its problem placed at `views`.
pub fn prepare_strided(spec: &WorkloadSpec, views: ActViews, seed: u64) -> Result<Prepared> {
    let mut p = Prepared::from_tensors(spec, generate(spec, seed))
        .with_context(|| format!("strided case {}", spec.label))?;
    p.problem.act_views = Some(views);
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{Choice, Engine};
    use crate::verify::verify_prepared;
    use gdn_cuda::abi::args::{Args, DevicePtrs};

    /// Every strided case is a placement the kernels accept (its strides pass the launch validation; fake
    /// 16-byte-aligned pointers), its views lie inside their buffers without overlapping output rows, and the
    /// CPU backend (which runs it dense) passes the reference.
    #[test]
    fn strided_cases_validate_and_pass_on_the_cpu() {
        let engine = Engine::open(Choice::Cpu).unwrap();
        for (i, (spec, views)) in strided_cases(true).iter().enumerate() {
            let prepared = prepare_strided(spec, *views, 100 + i as u64).unwrap();
            let p = &prepared.problem;
            assert!(p.is_serving(), "{}", spec.label);
            // a distinct aligned address for every tensor the problem has, 0 for the others
            let at = |n: u64, on: bool| if on { n << 20 } else { 0 };
            let raw = p.gates == GateMode::Raw;
            let prefill = p.def.op == gdn_core::Op::Prefill;
            let ptrs = DevicePtrs {
                q: at(1, true),
                k: at(2, true),
                v: at(3, true),
                a: at(4, raw),
                b: at(5, raw),
                a_log: at(6, raw),
                dt_bias: at(7, raw),
                out: at(8, true),
                state: at(9, p.state_dtype.is_some()),
                new_state: at(if p.pool { 9 } else { 10 }, true),
                intermediate: at(11, p.intermediate),
                state_indices: at(12, p.def.op == gdn_core::Op::Mtp),
                cu_seqlens: at(13, prefill),
                gate: at(14, !raw),
                beta: at(15, !raw),
                pool_indices: at(16, p.pool),
                has_initial: at(17, p.has_initial_state),
                num_accepted: at(18, p.spec_slots),
                checkpoints: at(19, p.checkpoint_rows > 0),
                checkpoint_starts: at(20, p.checkpoint_rows > 0),
                ..Default::default()
            };
            let args = Args::for_problem(p, &ptrs);
            let r = match &args {
                Args::Recurrent(a) => a.validate(),
                Args::Prefill(a) => a.validate(),
            };
            r.unwrap_or_else(|e| panic!("{}: {e}", spec.label));
            let v = verify_prepared(&engine, &prepared, None).unwrap();
            assert!(v.passed, "{}: {}", spec.label, v.summary);
        }
    }

    /// Every fp16 case's launch arguments: `act_f16` / `state_f16` from the problem's dtypes (the `SV_ACT_F16` /
    /// `SV_STATE_F16` flags), an fp16 state on the 16-bit-state kernels, a 16-bit beta flagged, a serving
    /// build, and the launch validation passes (fake aligned pointers).
    #[test]
    fn f16_cases_set_the_kernel_flags() {
        use gdn_cuda::abi::params::sv;
        use gdn_cuda::kernels::registry::StateDtype;
        for (i, c) in f16_cases(true).iter().enumerate() {
            let t = generate(c, i as u64);
            let p = c.problem(&t).unwrap();
            let at = |n: u64, on: bool| if on { n << 20 } else { 0 };
            let raw = p.gates == GateMode::Raw;
            let ptrs = DevicePtrs {
                q: at(1, true),
                k: at(2, true),
                v: at(3, true),
                a: at(4, raw),
                b: at(5, raw),
                a_log: at(6, raw),
                dt_bias: at(7, raw),
                out: at(8, true),
                state: at(9, p.state_dtype.is_some()),
                new_state: at(if p.pool { 9 } else { 10 }, true),
                intermediate: at(11, p.intermediate),
                state_indices: at(12, p.def.op == gdn_core::Op::Mtp),
                cu_seqlens: at(13, p.def.op == gdn_core::Op::Prefill),
                gate: at(14, !raw),
                beta: at(15, !raw),
                pool_indices: at(16, p.pool),
                has_initial: at(17, p.has_initial_state),
                num_accepted: at(18, p.spec_slots),
                checkpoints: at(19, p.checkpoint_rows > 0),
                checkpoint_starts: at(20, p.checkpoint_rows > 0),
                ..Default::default()
            };
            let args = Args::for_problem(&p, &ptrs);
            let (sv_args, state, r) = match &args {
                Args::Recurrent(a) => (a.serving, a.state_dtype, a.validate()),
                Args::Prefill(a) => (a.serving, a.state_dtype, a.validate()),
            };
            r.unwrap_or_else(|e| panic!("{}: {e}", c.label));
            assert!(sv_args.is_active(), "{}", c.label);
            let flags = sv_args.params().flags;
            let act = c.act_dtype == DType::F16;
            let st = c.state_dtype == DType::F16;
            assert_eq!(flags & sv::ACT_F16 != 0, act, "{}", c.label);
            assert_eq!(flags & sv::STATE_F16 != 0, st, "{}", c.label);
            if st {
                assert_eq!(state, Some(StateDtype::BF16), "{}", c.label);
            }
            if !raw && !c.serving.beta_f32 {
                assert!(flags & sv::BETA_BF16 != 0, "{}: a 16-bit beta", c.label);
            }
            if let Args::Recurrent(a) = &args {
                assert_ne!(
                    a.build(),
                    gdn_cuda::plan::decode::Build::Definition,
                    "{}",
                    c.label
                );
            }
        }
    }

    /// Every case draws inputs its own problem accepts (the draws and the validation agree).
    #[test]
    fn every_case_validates() {
        for (i, c) in cases(true).iter().enumerate() {
            let t = generate(c, i as u64);
            let p = c.problem(&t).unwrap_or_else(|e| panic!("{}: {e}", c.label));
            assert!(p.is_serving(), "{}", c.label);
        }
    }
}
