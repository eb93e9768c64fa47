//! `gdn check`: a correctness sweep of a backend against the float64 reference (contest tolerance).
//!
//! Cases cover every operation × head configuration, batch sizes around warp/block boundaries, raw randn and
//! normalised q/k, absent/fp32/bf16 state, MTP with and without intermediate states, serving mode with -1
//! padding, prefill edge lengths (0, 1, 63, 64, 65), many mixed sequences, a long sequence and extreme gates, and
//! every serving mode alone and combined, and on CUDA q, k, v and the output as views of larger buffers
//! (check_serving.rs);
//! without `--quick` also a 65,536-token sequence checked per 8,192-token window (stability), 2,048 sequences,
//! and on CUDA a call past 2^31 elements per tensor (check_offsets.rs: 64-bit offsets).
//! Every case draws fresh inputs (its own seed) and runs on NaN-poisoned outputs; the float64 reference runs once
//! per case. Prefill on normalised q/k with an fp32 state is also held to the numerics targets (verify.rs).
//! Any failure → exit 1. On CUDA every prefill case runs once per prefill plan (the host plans, the device plan
//! and its routes, forced; same inputs), and the row says which plan ran; with `GDN_KERNEL` set, once, as it
//! decides.
//!
//! With `--dataset DIR` the cases are the workloads of a flashinfer-trace dataset instead (dataset.rs), each
//! run once with the backend's own plan and held to the contest rule.

use crate::backend::{Choice, Engine};
use crate::check_cuts;
use crate::check_offsets;
use crate::check_pool;
use crate::check_serving;
use crate::dataset::{self, DatasetArgs};
use crate::heads::all_heads;
use crate::table::{new_table, progress, sci};
use crate::verify::{verify_prepared, Prepared, Verdict, WINDOW};
use anyhow::{bail, Context, Result};
use gdn_core::problem::ActViews;
use gdn_core::workload::WorkloadSpec;
use gdn_core::{Backend, DType, Heads, MtpMode, Op, Timed};
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    target: Target,
    #[command(flatten)]
    data: DatasetArgs,
    /// A trimmed sweep (CI smoke): fewer batch sizes and shorter sequences.
    #[arg(long, conflicts_with = "dataset")]
    quick: bool,
    /// Base seed; case i uses seed + i (with --dataset: the seed of its random inputs).
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Write the per-case results as JSON.
    #[arg(long)]
    json: Option<PathBuf>,
}

/// `--backend` and `--op`, shared by check and bench.
#[derive(clap::Args)]
pub struct Target {
    #[arg(long, value_enum, default_value = "auto")]
    pub backend: Choice,
    #[arg(long, value_enum, default_value = "all")]
    pub op: OpFilter,
}

/// `--op` for check and bench.
#[derive(Copy, Clone, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum OpFilter {
    Decode,
    Prefill,
    Mtp,
    All,
}

impl OpFilter {
    pub fn includes(self, op: Op) -> bool {
        match self {
            OpFilter::All => true,
            OpFilter::Decode => op == Op::Decode,
            OpFilter::Prefill => op == Op::Prefill,
            OpFilter::Mtp => op == Op::Mtp,
        }
    }
}

fn with(mut s: WorkloadSpec, label: String, f: impl FnOnce(&mut WorkloadSpec)) -> WorkloadSpec {
    f(&mut s);
    s.label = label;
    s
}

/// An MTP case on normalised q/k, with or without the intermediate-states buffer.
fn mtp_normalised(h: Heads, batch: usize, t: usize, intermediate: bool) -> WorkloadSpec {
    let mut s = WorkloadSpec::mtp(h, batch, t);
    s.normalize_qk = true;
    s.intermediate = intermediate;
    s
}

/// The sweep's cases, in order.
pub fn cases(quick: bool) -> Vec<WorkloadSpec> {
    let hd = Heads::new(4, 8, 128).expect("qk4_v8");
    let heads = all_heads();
    let mut v = Vec::new();

    // Decode: batch sizes (raw randn, as the contest draws them), then each feature.
    let batches: &[usize] = if quick {
        &[1, 3, 8, 33, 64]
    } else {
        &[1, 2, 3, 4, 7, 8, 16, 33, 64, 128, 256, 1024]
    };
    for &b in batches {
        v.push(with(
            WorkloadSpec::decode(hd, b),
            format!("decode qk4_v8 B={b} raw"),
            |_| {},
        ));
    }
    for (name, h) in &heads {
        v.push(with(
            WorkloadSpec::decode(*h, 5),
            format!("decode {name} B=5 raw"),
            |_| {},
        ));
        v.push(with(
            WorkloadSpec::decode(*h, 9),
            format!("decode {name} B=9 normalised"),
            |s| s.normalize_qk = true,
        ));
    }
    v.push(with(
        WorkloadSpec::decode(hd, 6),
        "decode B=6 no state (zeros)".into(),
        |s| s.with_state = false,
    ));
    v.push(with(
        WorkloadSpec::decode(hd, 16),
        "decode B=16 bf16 state".into(),
        |s| s.state_dtype = DType::BF16,
    ));
    v.push(with(
        WorkloadSpec::decode(hd, 8),
        "decode B=8 extreme gates".into(),
        |s| s.extreme_gates = true,
    ));
    v.push(with(
        WorkloadSpec::decode(hd, 4),
        "decode B=4 scale=0.3".into(),
        |s| s.scale = 0.3,
    ));

    // MTP: T = 2..8, with/without intermediate states, serving mode with padding, bf16 state, head configs.
    let ts: Vec<usize> = if quick {
        vec![2, 5, 8]
    } else {
        (2..=8).collect()
    };
    for &t in &ts {
        v.push(with(
            mtp_normalised(hd, 4, t, true),
            format!("mtp B=4 T={t} +intermediate"),
            |_| {},
        ));
        v.push(with(
            mtp_normalised(hd, 3, t, false),
            format!("mtp B=3 T={t}"),
            |_| {},
        ));
    }
    v.push(with(
        WorkloadSpec::mtp(hd, 2, 2),
        "mtp B=2 T=2 raw".into(),
        |s| s.normalize_qk = false,
    ));
    v.push(with(
        mtp_normalised(hd, 8, 4, true),
        "mtp serving B=8 T=4 padding".into(),
        |s| {
            s.mtp_mode = MtpMode::Serving;
            s.padding = 3;
        },
    ));
    v.push(with(
        mtp_normalised(hd, 6, 3, false),
        "mtp serving B=6 T=3 no intermediate".into(),
        |s| {
            s.mtp_mode = MtpMode::Serving;
            s.padding = 1;
        },
    ));
    v.push(with(
        mtp_normalised(hd, 4, 4, true),
        "mtp B=4 T=4 bf16 state".into(),
        |s| s.state_dtype = DType::BF16,
    ));
    for (name, h) in &heads {
        v.push(with(
            mtp_normalised(*h, 3, 4, true),
            format!("mtp {name} B=3 T=4"),
            |_| {},
        ));
    }

    // Prefill (normalised q/k, as real callers pass them).
    let norm = |lens: &[usize], label: String| {
        with(WorkloadSpec::prefill(hd, lens), label, |s| {
            s.normalize_qk = true
        })
    };
    for lens in [
        vec![0],
        vec![1],
        vec![63],
        vec![64],
        vec![65],
        vec![0, 5, 0, 64, 1],
    ] {
        v.push(norm(&lens, format!("prefill lens {lens:?}")));
    }
    let many: Vec<usize> = (0..57)
        .map(|i| (i * 37 + 11) % if quick { 90 } else { 300 })
        .collect();
    v.push(norm(
        &many,
        format!("prefill 57 seqs, {} tokens", many.iter().sum::<usize>()),
    ));
    // equal lengths: the device plan for 32x256 runs its split kernel, whose ranking skips its counting when every
    // length is equal (the rank is then the index)
    let (n_eq, len_eq) = if quick { (12, 48) } else { (32, 256) };
    v.push(norm(
        &vec![len_eq; n_eq],
        format!("prefill {n_eq}x{len_eq} (equal lengths)"),
    ));
    let long = if quick { 700 } else { 4096 };
    v.push(norm(&[long], format!("prefill 1x{long}")));
    if !quick {
        // stability: verify.rs holds every 8192-token window of the output to the numerics target
        v.push(norm(
            &[65536],
            format!("prefill 1x65536 (stability, {WINDOW}-token windows)"),
        ));
        // thousands of sequences, zero lengths among them
        let thousands: Vec<usize> = (0..2048).map(|i| (i * 53 + 7) % 97).collect();
        v.push(norm(
            &thousands,
            format!(
                "prefill 2048 seqs, {} tokens",
                thousands.iter().sum::<usize>()
            ),
        ));
    }
    for (name, h) in &heads {
        v.push(with(
            WorkloadSpec::prefill(*h, &[100, 37]),
            format!("prefill {name} [100, 37]"),
            |s| s.normalize_qk = true,
        ));
    }
    // No raw-randn prefill case: with |k|^2 ~ 128 the delta rule amplifies the state ~60x per token, and a
    // chunked kernel with bf16 tensor-core operands (ours, FLA's, FlashInfer's) then misses the elementwise
    // rule on a seed-dependent handful of small state entries (deterministically; rel-L2 stays ~2e-3). The
    // prefill contract is stated on normalised q/k.
    v.push(with(
        WorkloadSpec::prefill(hd, &[70, 20]),
        "prefill [70, 20] no state".into(),
        |s| {
            s.normalize_qk = true;
            s.with_state = false;
        },
    ));
    v.push(with(
        WorkloadSpec::prefill(hd, &[130, 7]),
        "prefill [130, 7] bf16 state".into(),
        |s| {
            s.normalize_qk = true;
            s.state_dtype = DType::BF16;
        },
    ));
    v.push(with(
        WorkloadSpec::prefill(hd, &[200, 66]),
        "prefill [200, 66] extreme gates".into(),
        |s| {
            s.normalize_qk = true;
            s.extreme_gates = true;
        },
    ));
    v.extend(check_serving::cases(quick));
    v
}

pub fn main(a: Args) -> Result<()> {
    let engine = Engine::open(a.target.backend)?;
    let results = match &a.data.dataset {
        Some(dir) => dataset::check(
            &engine,
            dir,
            a.data.definition.as_deref(),
            |op| a.target.op.includes(op),
            a.seed,
        )?,
        None => sweep(&engine, &a)?,
    };
    report(&engine, &a, &results)
}

/// The generated cases, each once per prefill plan on CUDA, then the 64-bit offset case (full sweep on CUDA).
fn sweep(engine: &Engine, a: &Args) -> Result<Vec<Verdict>> {
    // (case, device views, seed): case i (after --op) uses seed + i, with every plan; the strided cases last
    let plans = engine.prefill_plans();
    let cases: Vec<(WorkloadSpec, Option<ActViews>, u64)> = cases(a.quick)
        .into_iter()
        .map(|c| (c, None))
        .chain(
            check_serving::strided_cases(a.quick)
                .into_iter()
                .map(|(c, v)| (c, Some(v))),
        )
        .filter(|(c, _)| a.target.op.includes(c.op))
        .enumerate()
        .map(|(i, (c, v))| (c, v, a.seed + i as u64))
        .collect();
    // serving prefill cases also run the automatic plan: a mode no plan supports must fail, not be refused
    let plans_of = |c: &WorkloadSpec| {
        let mut v = if c.op == Op::Prefill {
            plans.clone()
        } else {
            vec![None]
        };
        if c.serving.is_active() && !v.contains(&None) {
            v.push(None);
        }
        v
    };
    // the 64-bit offset case: CUDA only (35 GB of GPU memory), full sweep only
    let offsets = !a.quick && !engine.is_cpu() && a.target.op.includes(Op::Prefill);
    // the large-pool cases: CUDA only (4.3 GB pools), full sweep only
    let big_pools: Vec<WorkloadSpec> = if !a.quick && !engine.is_cpu() {
        check_pool::specs()
            .into_iter()
            .filter(|s| a.target.op.includes(s.op))
            .collect()
    } else {
        vec![]
    };
    // the cp-cut cases: CUDA with the cp plans, full sweep only
    let cut_specs: Vec<WorkloadSpec> = if !a.quick
        && !engine.is_cpu()
        && a.target.op.includes(Op::Prefill)
        && plans.contains(&Some(gdn_cuda::ForcedPlan::CpExact(false)))
    {
        check_cuts::specs(Heads::new(4, 8, 128).expect("qk4_v8"))
    } else {
        vec![]
    };
    let runs: usize = cases
        .iter()
        .map(|(c, _, _)| plans_of(c).len())
        .sum::<usize>()
        + if offsets { plans.len() } else { 0 }
        + big_pools.len()
        + check_cuts::runs(cut_specs.len());
    let plan_names: Vec<&str> = plans.iter().flatten().map(|p| p.name()).collect();
    eprintln!(
        "gdn check: {} runs on {} ({}){}",
        runs,
        engine.name(),
        engine.device(),
        if plans.len() > 1 {
            format!("; prefill cases once per plan ({})", plan_names.join(", "))
        } else {
            String::new()
        }
    );
    let pb = progress(runs as u64, "check");
    let mut results: Vec<Verdict> = Vec::new();
    for (spec, views, seed) in &cases {
        pb.set_message(spec.label.clone());
        let prepared = match views {
            None => Prepared::new(spec, *seed)?,
            Some(v) => check_serving::prepare_strided(spec, *v, *seed)?,
        };
        for plan in plans_of(spec) {
            // a backend error is a failed row (with its message), not the end of the sweep
            results.push(
                verify_prepared(engine, &prepared, plan)
                    .unwrap_or_else(|e| failed_row(&spec.label, plan, &e)),
            );
            pb.inc(1);
        }
    }
    if offsets {
        pb.set_message(check_offsets::label());
        results.extend(check_offsets::run(
            engine,
            a.seed + cases.len() as u64,
            &plans,
        )?);
        pb.inc(plans.len() as u64);
    }
    for (i, spec) in big_pools.iter().enumerate() {
        pb.set_message(check_pool::label(spec));
        let seed = a.seed + cases.len() as u64 + 1 + i as u64;
        results.push(
            check_pool::run(engine, spec, seed)
                .unwrap_or_else(|e| failed_row(&check_pool::label(spec), None, &e)),
        );
        pb.inc(1);
    }
    for (i, spec) in cut_specs.iter().enumerate() {
        pb.set_message(spec.label.clone());
        let seed = a.seed + cases.len() as u64 + 1 + big_pools.len() as u64 + i as u64;
        results.extend(
            check_cuts::run(engine, spec, seed)
                .unwrap_or_else(|e| vec![failed_row(&spec.label, None, &e)]),
        );
        pb.inc(check_cuts::runs(1) as u64);
    }
    pb.finish_and_clear();
    Ok(results)
}

/// The row of a run that returned an error.
fn failed_row(case: &str, plan: Option<gdn_cuda::ForcedPlan>, e: &anyhow::Error) -> Verdict {
    let k = plan.map_or("auto", gdn_cuda::ForcedPlan::name);
    let mut v = crate::verify::refused(&format!("{case} [{k}]"), String::new());
    v.refused = None;
    v.passed = false;
    v.summary = format!("error: {e:#}");
    v
}

/// The table, the stability lines, the failures, the JSON; an error when a case failed.
fn report(engine: &Engine, a: &Args, results: &[Verdict]) -> Result<()> {
    let mut t = new_table(&[
        "case",
        "max abs err",
        "rel-L2 output",
        "rel-L2 state",
        "failed elements",
        "result",
    ]);
    for r in results {
        t.add_row(vec![
            r.case.clone(),
            sci(r.max_abs),
            sci(r.rel_l2_output),
            sci(r.rel_l2_state),
            r.failed.to_string(),
            match (&r.refused, r.passed) {
                (Some(_), _) => "refused",
                (None, true) => "pass",
                (None, false) => "FAIL",
            }
            .into(),
        ]);
    }
    println!("{t}");
    for r in results.iter().filter(|r| !r.rel_l2_windows.is_empty()) {
        let w = &r.rel_l2_windows;
        let max = w
            .iter()
            .cloned()
            .fold(0.0f64, |m, e| if e.is_nan() { e } else { m.max(e) });
        println!(
            "stability {}: output rel-L2 per {WINDOW}-token window ({}): first {}, last {}, max {}",
            r.case,
            w.len(),
            sci(w[0]),
            sci(w[w.len() - 1]),
            sci(max)
        );
    }
    let failed: Vec<_> = results.iter().filter(|r| !r.passed).collect();
    for r in &failed {
        println!("FAIL {}: {}", r.case, r.summary);
    }
    if let Some(path) = &a.json {
        let doc = serde_json::json!({
            "backend": engine.name(),
            "device": engine.device(),
            "seed": a.seed,
            "quick": a.quick,
            "dataset": a.data.dataset,
            "definition": a.data.definition,
            "cases": results,
        });
        std::fs::write(path, serde_json::to_string_pretty(&doc)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    if !failed.is_empty() {
        bail!("{} of {} cases failed", failed.len(), results.len());
    }
    let refused: Vec<_> = results.iter().filter(|r| r.refused.is_some()).collect();
    for r in &refused {
        println!("refused {}: {}", r.case, r.summary);
    }
    println!(
        "all {} cases passed{}",
        results.len() - refused.len(),
        if refused.is_empty() {
            String::new()
        } else {
            format!(
                " ({} forced plan runs refused their shape, listed above)",
                refused.len()
            )
        }
    );
    Ok(())
}
