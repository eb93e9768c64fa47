//! `gdn bench --serving`: the serving classes, each serving row next to the definition-mode row of the same
//! shape so that the cost of a mode reads directly off the table:
//! - pool-indexed decode: B = 1…256, fp32 and bf16 pools of 4,096 slots with scattered indices, the vLLM call
//!   (null-slot padding, in-kernel q/k norm) and the FLA call (K-first);
//! - verify: T = 2, 4, 8 with vLLM's spec-decode slots against the intermediate-buffer definition;
//! - prefill: the contest mix through a pool with precomputed gates and checkpoints every 64 tokens, against the
//!   same mix in the definition mode.

use crate::bench_classes::{Class, Scope};
use gdn_core::serving::{GateMode, PadRule, Serving, StateLayout};
use gdn_core::workload::{contest_prefill_mix, ServingDraw, WorkloadSpec};
use gdn_core::{DType, Heads, Op};

/// Slots of the decode pools (the 4,096+; 2 GiB of fp32 state).
pub const POOL_SLOTS: usize = 4096;

fn named(mut s: WorkloadSpec, label: String, sd: ServingDraw) -> WorkloadSpec {
    s.label = label;
    s.serving = sd;
    s
}

fn pool(rows: usize) -> ServingDraw {
    ServingDraw {
        pool_rows: rows,
        ..Default::default()
    }
}

pub fn decode(h: Heads, sc: &Scope) -> Class {
    let bs: &[usize] = if sc.quick {
        &[1, 64]
    } else {
        &[1, 4, 16, 64, 256]
    };
    let mut items = vec![];
    for &b in bs {
        let dec = |dtype: DType| {
            let mut s = WorkloadSpec::decode(h, b);
            s.state_dtype = dtype;
            s
        };
        let rows = if sc.cpu { 2 * b + 8 } else { POOL_SLOTS };
        for (dtype, dn) in [(DType::F32, "f32"), (DType::BF16, "bf16")] {
            items.push(named(
                dec(dtype),
                format!("B={b} {dn} definition"),
                ServingDraw::default(),
            ));
            items.push(named(
                dec(dtype),
                format!("B={b} {dn} pool {rows} slots"),
                pool(rows),
            ));
        }
        items.push(named(
            dec(DType::F32),
            format!("B={b} f32 vLLM: pool, null slot, q/k norm"),
            ServingDraw {
                options: Serving {
                    qk_l2norm: true,
                    pad: PadRule::NullSlot,
                    ..Default::default()
                },
                pad_back: usize::from(b > 1),
                ..pool(rows)
            },
        ));
        items.push(named(
            dec(DType::F32),
            format!("B={b} f32 FLA: K-first, log g"),
            ServingDraw {
                options: Serving {
                    layout: StateLayout::KFirst,
                    ..Default::default()
                },
                gates: GateMode::Log,
                ..Default::default()
            },
        ));
    }
    let check = named(
        WorkloadSpec::decode(h, 16),
        "B=16 pool, null slot, q/k norm".into(),
        ServingDraw {
            options: Serving {
                qk_l2norm: true,
                pad: PadRule::NullSlot,
                ..Default::default()
            },
            pad_front: 1,
            ..pool(64)
        },
    );
    Class {
        name: "serving decode",
        op: Op::Decode,
        mix: false,
        items: items.into_iter().map(|s| (s, 1)).collect(),
        check,
        check_note: None,
        skipped: vec![],
    }
}

pub fn verify(h: Heads, sc: &Scope) -> Class {
    let bs: &[usize] = if sc.quick { &[16] } else { &[16, 64] };
    let mut items = vec![];
    for &b in bs {
        for t in [2, 4, 8] {
            let mut def = WorkloadSpec::mtp(h, b, t);
            def.normalize_qk = true;
            def.intermediate = true;
            def.pool_size = b * t + 2;
            items.push(named(
                def.clone(),
                format!("B={b} T={t} definition +intermediate"),
                ServingDraw::default(),
            ));
            def.intermediate = false;
            items.push(named(
                def,
                format!("B={b} T={t} vLLM spec slots"),
                ServingDraw {
                    spec_slots: true,
                    ..Default::default()
                },
            ));
        }
    }
    let mut check = WorkloadSpec::mtp(h, 8, 4);
    check.normalize_qk = true;
    let check = named(
        check,
        "B=8 T=4 spec slots".into(),
        ServingDraw {
            spec_slots: true,
            pad_front: 1,
            ..Default::default()
        },
    );
    Class {
        name: "serving verify",
        op: Op::Mtp,
        mix: false,
        items: items.into_iter().map(|s| (s, 1)).collect(),
        check,
        check_note: None,
        skipped: vec![],
    }
}

/// The contest prefill mix, in the definition mode (`serving` false) or through a pool with log gates and
/// checkpoints every 64 tokens.
pub fn prefill_mix(h: Heads, sc: &Scope, serving: bool) -> Class {
    let sd = |n: usize| ServingDraw {
        options: Serving {
            checkpoint_every: 64,
            ..Default::default()
        },
        gates: GateMode::Log,
        pool_rows: 2 * n + 8,
        ..Default::default()
    };
    let mut specs: Vec<WorkloadSpec> = contest_prefill_mix(h, sc.seed)
        .into_iter()
        .map(|mut s| {
            s.normalize_qk = true;
            if serving {
                s.serving = sd(s.seq_lens.len());
            }
            s
        })
        .collect();
    if sc.quick {
        specs.retain(|s| s.tokens() <= 1024);
        specs.truncate(8);
    }
    let mut items: Vec<(WorkloadSpec, usize)> = vec![];
    for s in specs {
        match items.iter_mut().find(|(o, _)| o.seq_lens == s.seq_lens) {
            Some((_, n)) => *n += 1,
            None => items.push((s, 1)),
        }
    }
    let mut check = WorkloadSpec::prefill(h, &[0, 130, 64, 500, 3]);
    check.normalize_qk = true;
    check.label = "[0, 130, 64, 500, 3]".into();
    if serving {
        check.serving = sd(5);
    }
    Class {
        name: if serving {
            "serving prefill mix: pool, log g, checkpoints/64"
        } else {
            "serving prefill mix: definition"
        },
        op: Op::Prefill,
        mix: true,
        items,
        check,
        check_note: Some("stand-in: 5 sequences around the chunk edges".into()),
        skipped: vec![],
    }
}

/// Every serving class, in order.
pub fn all(h: Heads, sc: &Scope) -> Vec<Class> {
    vec![
        decode(h, sc),
        verify(h, sc),
        prefill_mix(h, sc, false),
        prefill_mix(h, sc, true),
    ]
}
