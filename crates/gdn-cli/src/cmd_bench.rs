//! `gdn bench`: for every workload class, correctness first (backend vs the float64 reference, contest
//! tolerance; a failing class is not timed), then latency per timing tier over rotating input sets, then the
//! copy floor for the same byte count. Prints one table per class and optionally writes everything as JSON
//! (schema `gdn-bench/1`, documented in docs/benchmarks.md). On CUDA every row says what ran (the kernel, or the
//! prefill plan and its kernels: `fused gdn_prefill_*` / `chunk64 gdn_prefill64_prep+gdn_prefill64_walk_*`).
//! With `--dataset DIR` the classes are the definitions of a flashinfer-trace dataset and their workloads:
//! every workload is checked (contest rule) before any of its class is timed.

use crate::backend::Engine;
use crate::bench_classes::{self as classes, Class, Scope};
use crate::cmd_check::Target;
use crate::dataset::{self, DatasetArgs};
use crate::table::{new_table, num, progress, quantile, sci, si};
use crate::verify::{merge_verdicts, verify, verify_tensors, Verdict};
use anyhow::{bail, Context, Result};
use gdn_core::dataset::{Dataset, Workload};
use gdn_core::workload::{generate, GateRegime, WorkloadSpec};
use gdn_core::{Backend, Heads, Outputs, Problem, RunOptions, TensorMap};
use gdn_core::{TierSamples, Timed, TimingConfig};
use serde::Serialize;
use std::path::PathBuf;
use std::time::Instant;

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    target: Target,
    #[command(flatten)]
    data: DatasetArgs,
    /// Head configuration `qk{H}_v{HV}` (head size 128).
    #[arg(long, default_value = "qk4_v8")]
    heads: String,
    /// Timed calls per workload (at most; on cpu also capped by a per-workload time budget).
    #[arg(long)]
    iters: Option<usize>,
    /// Input sets cycled between calls (>= 2, so nothing can be served from a cache).
    #[arg(long, default_value_t = 2)]
    input_sets: usize,
    /// Seed of the generated inputs and of the contest-like prefill mix.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Write all results as JSON.
    #[arg(long)]
    json: Option<PathBuf>,
    /// A smoke run: a few small workloads per class, few iterations.
    #[arg(long)]
    quick: bool,
    /// Also run the configurations too large for a default cpu run.
    #[arg(long)]
    full: bool,
    /// Plan prefill calls without the longest sequence's length. By default the planner gets it, as a
    /// caller with host-side lengths gives it (`max_seqlen` in Python); this measures the sync-free
    /// path of a caller that knows only T and N.
    #[arg(long)]
    no_length_hint: bool,
    /// Prefill: bench this one configuration instead of the anchors and the mix; comma-separated lengths, `NxL`
    /// for N sequences of L tokens (e.g. `1048576`, `64x1024,3x77`). Correctness is checked on the anchors'
    /// stand-in.
    #[arg(long, conflicts_with = "dataset")]
    seq_lens: Option<String>,
    /// Run the serving classes instead (bench_serving.rs): pool-indexed decode, spec-decode verify and the
    /// prefill mix through a pool with precomputed gates and checkpoints, each beside the definition mode.
    #[arg(long, conflicts_with_all = ["dataset", "seq_lens"])]
    serving: bool,
    /// How fast the generated heads decay: `anchor` (A_log = log U(1,16), flashinfer-bench's draw), `model`
    /// (log U(0,16), as HF initialises Qwen3-Next: a few slow heads) or `slow` (every head keeps its state, decay
    /// per token >= 0.999). Long prefill's cp cuts depend on it. A non-default regime is appended to each label.
    #[arg(long, default_value = "anchor", conflicts_with = "dataset")]
    gates: GateRegime,
}

/// Statistics of one tier of one workload, with its roofline numbers.
#[derive(Serialize)]
struct TierStat {
    tier: String,
    n: usize,
    median_us: f64,
    p10_us: f64,
    p90_us: f64,
    mean_us: f64,
    min_us: f64,
    tokens_per_s: f64,
    gb_per_s: f64,
    /// Median of the copy floor in the same tier (or the first copy tier) for `min_bytes`.
    copy_median_us: f64,
    copy_gb_per_s: f64,
    /// copy_median_us / median_us × 100: the fraction of the measured copy bandwidth reached.
    pct_of_copy: f64,
    /// Each launch's median, in launch order, for a call of several launches (`cupti` tier only).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    launch_median_us: Vec<f64>,
    samples_us: Vec<f64>,
}

#[derive(Serialize)]
struct CopyStat {
    tier: String,
    n: usize,
    median_us: f64,
    p10_us: f64,
    p90_us: f64,
}

#[derive(Serialize)]
struct WorkloadResult {
    label: String,
    /// What ran (CUDA: `LaunchInfo::label`, the plan and its kernels); None on the CPU.
    kernel: Option<String>,
    /// Workloads of this shape in the class (mixes).
    count: usize,
    batch: usize,
    seq_len: usize,
    tokens: usize,
    min_bytes: u64,
    iters: usize,
    tiers: Vec<TierStat>,
    copy: Vec<CopyStat>,
}

/// Count-weighted sums over workloads, per tier (the score of a mix).
#[derive(Clone, Serialize)]
struct TotalStat {
    tier: String,
    workloads: usize,
    tokens: usize,
    sum_median_us: f64,
    tokens_per_s: f64,
    gb_per_s: f64,
    sum_copy_median_us: f64,
    pct_of_copy: f64,
}

#[derive(Serialize)]
struct CheckResult {
    workload: String,
    stand_in: Option<String>,
    #[serde(flatten)]
    verdict: Verdict,
}

#[derive(Serialize)]
struct ClassResult {
    name: String,
    op: String,
    mix: bool,
    check: CheckResult,
    skipped: Vec<String>,
    workloads: Vec<WorkloadResult>,
    total: Option<Vec<TotalStat>>,
}

/// Per-call budget and iteration counts for the backend kind.
struct Plan {
    cfg: TimingConfig,
    /// cpu: stop adding iterations past this many seconds per workload.
    budget_s: Option<f64>,
    /// Tell the planner each prefill call's longest sequence (host-side lengths).
    length_hint: bool,
}

/// Parses `qk{H}_v{HV}` (optionally `_d128`) into a head configuration.
pub fn parse_heads(s: &str) -> Result<Heads> {
    let bad = || anyhow::anyhow!("--heads '{s}': expected qk{{H}}_v{{HV}}, e.g. qk4_v8");
    let (h, hv) = s
        .strip_prefix("qk")
        .and_then(|r| r.split_once("_v"))
        .ok_or_else(bad)?;
    let hv = hv.strip_suffix("_d128").unwrap_or(hv);
    Ok(Heads::new(
        h.parse().map_err(|_| bad())?,
        hv.parse().map_err(|_| bad())?,
        128,
    )?)
}

pub fn main(a: Args) -> Result<()> {
    if a.input_sets < 2 {
        bail!("--input-sets must be at least 2 (so no result can be served from a cache)");
    }
    let heads = parse_heads(&a.heads)?;
    let engine = Engine::open(a.target.backend)?;
    let cpu = engine.is_cpu();
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let plan = Plan {
        cfg: TimingConfig {
            warmup: if cpu { 1 } else { 10 },
            iters: a.iters.unwrap_or(match (cpu, a.quick) {
                (true, true) => 3,
                (true, false) => 30,
                (false, true) => 20,
                (false, false) => 100,
            }),
            input_sets: a.input_sets,
        },
        budget_s: cpu.then_some(if a.quick { 0.1 } else { 0.6 }),
        length_hint: !a.no_length_hint,
    };
    let scope = Scope {
        cpu,
        full: a.full,
        quick: a.quick,
        seed: a.seed,
    };
    let mut all = match &a.seq_lens {
        _ if a.serving => crate::bench_serving::all(heads, &scope),
        Some(lens) => vec![classes::prefill_custom(
            heads,
            &classes::parse_seq_lens(lens).map_err(anyhow::Error::msg)?,
        )],
        None => vec![
            classes::decode_anchors(heads, &scope),
            classes::decode_mix(heads, &scope),
            classes::prefill_anchors(heads, &scope),
            classes::prefill_mix(heads, &scope),
            classes::mtp_anchors(heads, &scope),
        ],
    };
    if a.gates != GateRegime::Anchor {
        for c in all.iter_mut() {
            for spec in c.items.iter_mut().map(|(s, _)| s).chain([&mut c.check]) {
                spec.gate_regime = a.gates;
                spec.label = format!("{} gates={}", spec.label, a.gates.name());
            }
        }
    }
    let todo: Vec<&Class> = all.iter().filter(|c| a.target.op.includes(c.op)).collect();
    let ds = match &a.data.dataset {
        Some(dir) => Some(dataset::open(dir, a.data.definition.as_deref(), |op| {
            a.target.op.includes(op)
        })?),
        None => None,
    };
    let todo = if ds.is_some() { vec![] } else { todo };
    let device = engine.device();
    eprintln!(
        "gdn bench: {} on {device}; {} threads; heads {}; iters <= {}, {} input sets{}",
        engine.name(),
        threads,
        a.heads,
        plan.cfg.iters,
        plan.cfg.input_sets,
        plan.budget_s
            .map_or(String::new(), |b| format!(", <= {b} s per workload"))
    );
    let n_items: usize = match &ds {
        Some(ds) => 2 * ds.workloads.len(),
        None => todo.iter().map(|c| c.items.len() + 1).sum(),
    };
    let pb = progress(n_items as u64, "bench");
    let mut results = vec![];
    let mut methods = serde_json::Map::new();
    let mut failures = vec![];
    for class in todo {
        let r = bench_class(&engine, class, &plan, &a, &pb, &mut methods)?;
        pb.suspend(|| print_class(&r, cpu, threads));
        if !r.check.verdict.passed {
            failures.push(r.name.clone());
        }
        results.push(r);
    }
    for ws in ds.as_ref().map(by_definition).unwrap_or_default() {
        let ds = ds.as_ref().expect("dataset");
        let r = bench_dataset_class(&engine, ds, &ws, &plan, &a, &pb, &mut methods)?;
        pb.suspend(|| print_class(&r, cpu, threads));
        if !r.check.verdict.passed {
            failures.push(r.name.clone());
        }
        results.push(r);
    }
    pb.finish_and_clear();
    if let Some(path) = &a.json {
        let doc = serde_json::json!({
            "schema": "gdn-bench/1",
            "gdn_version": env!("CARGO_PKG_VERSION"),
            "backend": engine.name(),
            "device": device,
            "config": {
                "op": format!("{:?}", a.target.op).to_lowercase(),
                "heads": a.heads,
                "dataset": a.data.dataset,
                "definition": a.data.definition,
                "seed": a.seed,
                "quick": a.quick,
                "full": a.full,
                "prefill_length_hint": plan.length_hint,
                "warmup": plan.cfg.warmup,
                "iters": plan.cfg.iters,
                "input_sets": plan.cfg.input_sets,
                "budget_s_per_workload": plan.budget_s,
                "threads": threads,
            },
            "methods": methods,
            "classes": results,
        });
        std::fs::write(path, serde_json::to_string_pretty(&doc)? + "\n")
            .with_context(|| format!("writing {}", path.display()))?;
        eprintln!("wrote {}", path.display());
    }
    if !failures.is_empty() {
        bail!("correctness failed (not timed): {}", failures.join(", "));
    }
    Ok(())
}

fn bench_class(
    engine: &Engine,
    class: &Class,
    plan: &Plan,
    a: &Args,
    pb: &indicatif::ProgressBar,
    methods: &mut serde_json::Map<String, serde_json::Value>,
) -> Result<ClassResult> {
    pb.set_message(format!("{}: checking {}", class.name, class.check.label));
    let verdict = verify(engine, &class.check, a.seed ^ 0x5eed)?;
    pb.inc(1);
    let mut r = ClassResult {
        name: class.name.into(),
        op: class.op.name().into(),
        mix: class.mix,
        check: CheckResult {
            workload: class.check.label.clone(),
            stand_in: class.check_note.clone(),
            verdict,
        },
        skipped: class.skipped.clone(),
        workloads: vec![],
        total: None,
    };
    if !r.check.verdict.passed {
        pb.inc(class.items.len() as u64);
        return Ok(r);
    }
    for (i, (spec, count)) in class.items.iter().enumerate() {
        pb.set_message(format!("{}: {}", class.name, spec.label));
        let seed = a.seed.wrapping_add(1000 * i as u64);
        let w = bench_workload(engine, spec, *count, seed, plan, methods)
            .with_context(|| format!("{} {}", class.name, spec.label));
        match w {
            Ok(w) => r.workloads.push(w),
            // a serving mode a backend refuses is listed, not timed (the check sweep holds it to account)
            Err(e) if a.serving => r.skipped.push(format!("{}: {e:#}", spec.label)),
            Err(e) => return Err(e),
        }
        pb.inc(1);
    }
    if class.mix {
        r.total = Some(aggregate(r.workloads.iter()));
    }
    Ok(r)
}

/// A dataset's workloads grouped by definition, in the order the definitions first appear.
fn by_definition(ds: &Dataset) -> Vec<Vec<&Workload>> {
    let mut groups: Vec<Vec<&Workload>> = Vec::new();
    for w in &ds.workloads {
        match groups.iter_mut().find(|g| g[0].def.name == w.def.name) {
            Some(g) => g.push(w),
            None => groups.push(vec![w]),
        }
    }
    groups
}

/// One definition's workloads of a dataset: each checked against the float64 reference (contest rule), and
/// only when every one passed, each timed with its tensors copied into `--input-sets` sets.
fn bench_dataset_class(
    engine: &Engine,
    ds: &Dataset,
    ws: &[&Workload],
    plan: &Plan,
    a: &Args,
    pb: &indicatif::ProgressBar,
    methods: &mut serde_json::Map<String, serde_json::Value>,
) -> Result<ClassResult> {
    let def = &ws[0].def;
    let mut verdicts = Vec::new();
    for w in ws {
        let case = w.label();
        pb.set_message(format!("{}: checking {case}", def.name));
        let (tensors, p) = w.load(&ds.root, a.seed)?;
        verdicts.push(verify_tensors(engine, &case, &p, &tensors).with_context(|| w.place())?);
        pb.inc(1);
    }
    let verdict = merge_verdicts(&format!("every workload ({})", ws.len()), &verdicts);
    let mut r = ClassResult {
        name: def.name.clone(),
        op: def.op.name().into(),
        mix: true,
        check: CheckResult {
            workload: verdict.case.clone(),
            stand_in: None,
            verdict,
        },
        skipped: vec![],
        workloads: vec![],
        total: None,
    };
    if !r.check.verdict.passed {
        pb.inc(ws.len() as u64);
        return Ok(r);
    }
    for w in ws {
        pb.set_message(format!("{}: {}", def.name, w.label()));
        let (tensors, p) = w.load(&ds.root, a.seed)?;
        let sets = vec![tensors; plan.cfg.input_sets];
        let res = bench_sets(engine, &w.label(), p, &sets, 1, plan, methods)
            .with_context(|| w.place())?;
        r.workloads.push(res);
        pb.inc(1);
    }
    r.total = Some(aggregate(r.workloads.iter()));
    Ok(r)
}

fn bench_workload(
    engine: &Engine,
    spec: &WorkloadSpec,
    count: usize,
    seed: u64,
    plan: &Plan,
    methods: &mut serde_json::Map<String, serde_json::Value>,
) -> Result<WorkloadResult> {
    let sets: Vec<_> = (0..plan.cfg.input_sets as u64)
        .map(|k| generate(spec, seed.wrapping_add(k)))
        .collect();
    let p = spec.problem(&sets[0])?;
    bench_sets(engine, &spec.label, p, &sets, count, plan, methods)
}

/// Times `p` over the input sets `sets` (each valid for `p`'s definition and options), then the copy floor.
fn bench_sets(
    engine: &Engine,
    label: &str,
    mut p: Problem,
    sets: &[TensorMap],
    count: usize,
    plan: &Plan,
    methods: &mut serde_json::Map<String, serde_json::Value>,
) -> Result<WorkloadResult> {
    let opts = RunOptions {
        scale: None,
        mtp_mode: p.mtp_mode,
        serving: p.serving,
    };
    if !plan.length_hint && p.def.op == gdn_core::Op::Prefill {
        p.dims.max_seq_len = None;
    }
    let inputs = sets
        .iter()
        .map(|t| Problem::from_tensors(&p.def, t, &opts).map(|_| p.inputs(t)))
        .collect::<gdn_core::Result<Vec<_>>>()?;
    let mut cfg = plan.cfg.clone();
    if let Some(budget) = plan.budget_s {
        // One untimed call sizes the run and serves as the warm-up (thread pool, page faults).
        let mut out = Outputs::poisoned(&p, &inputs[0]);
        let t0 = Instant::now();
        engine.run(&p, &inputs[0], &mut out)?;
        let once = t0.elapsed().as_secs_f64();
        cfg.iters = ((budget / once) as usize).clamp(3, cfg.iters.max(3));
        cfg.warmup = 0; // the sizing call was the warm-up
    }
    let kernel = engine.plan_label(&p)?;
    let tiers = engine.time(&p, &inputs, &cfg)?;
    let copy = engine.time_copy(p.min_bytes(), &cfg)?;
    for t in tiers.iter() {
        methods.insert(t.tier.clone(), t.method.clone().into());
    }
    for t in copy.iter() {
        methods.insert(format!("copy/{}", t.tier), t.method.clone().into());
    }
    let tokens = p.dims.total_tokens;
    let bytes = p.min_bytes();
    let stats = tiers
        .iter()
        .map(|t| {
            let c = copy.iter().find(|c| c.tier == t.tier).or(copy.first());
            tier_stat(t, c, tokens, bytes)
        })
        .collect();
    Ok(WorkloadResult {
        label: label.to_string(),
        kernel,
        count,
        batch: p.dims.num_seqs,
        seq_len: p.dims.seq_len,
        tokens,
        min_bytes: bytes,
        iters: cfg.iters,
        tiers: stats,
        copy: copy
            .iter()
            .map(|c| CopyStat {
                tier: c.tier.clone(),
                n: c.samples_us.len(),
                median_us: quantile(&c.samples_us, 0.5),
                p10_us: quantile(&c.samples_us, 0.1),
                p90_us: quantile(&c.samples_us, 0.9),
            })
            .collect(),
    })
}

fn tier_stat(t: &TierSamples, copy: Option<&TierSamples>, tokens: usize, bytes: u64) -> TierStat {
    let s = &t.samples_us;
    let med = quantile(s, 0.5);
    let copy_med = copy.map_or(f64::NAN, |c| quantile(&c.samples_us, 0.5));
    TierStat {
        tier: t.tier.clone(),
        n: s.len(),
        median_us: med,
        p10_us: quantile(s, 0.1),
        p90_us: quantile(s, 0.9),
        mean_us: s.iter().sum::<f64>() / s.len().max(1) as f64,
        min_us: s.iter().copied().fold(f64::INFINITY, f64::min),
        tokens_per_s: tokens as f64 / med * 1e6,
        gb_per_s: bytes as f64 / med / 1e3,
        copy_median_us: copy_med,
        copy_gb_per_s: bytes as f64 / copy_med / 1e3,
        pct_of_copy: copy_med / med * 100.0,
        launch_median_us: t.launch_median_us.clone(),
        samples_us: s.clone(),
    }
}

/// Count-weighted totals per tier over `ws`.
fn aggregate<'a>(ws: impl Iterator<Item = &'a WorkloadResult> + Clone) -> Vec<TotalStat> {
    let Some(first) = ws.clone().next() else {
        return vec![];
    };
    first
        .tiers
        .iter()
        .map(|t0| {
            let mut tot = TotalStat {
                tier: t0.tier.clone(),
                workloads: 0,
                tokens: 0,
                sum_median_us: 0.0,
                tokens_per_s: 0.0,
                gb_per_s: 0.0,
                sum_copy_median_us: 0.0,
                pct_of_copy: 0.0,
            };
            let mut bytes = 0.0;
            for w in ws.clone() {
                if let Some(t) = w.tiers.iter().find(|t| t.tier == t0.tier) {
                    let c = w.count as f64;
                    tot.workloads += w.count;
                    tot.tokens += w.count * w.tokens;
                    tot.sum_median_us += c * t.median_us;
                    tot.sum_copy_median_us += c * t.copy_median_us;
                    bytes += c * w.min_bytes as f64;
                }
            }
            tot.tokens_per_s = tot.tokens as f64 / tot.sum_median_us * 1e6;
            tot.gb_per_s = bytes / tot.sum_median_us / 1e3;
            tot.pct_of_copy = tot.sum_copy_median_us / tot.sum_median_us * 100.0;
            tot
        })
        .collect()
}

/// Rows of a mix with many shapes are grouped by total tokens.
const BUCKETS: [(usize, usize, &str); 4] = [
    (0, 256, "< 256 tokens"),
    (256, 2048, "256..2047 tokens"),
    (2048, 8192, "2048..8191 tokens"),
    (8192, usize::MAX, ">= 8192 tokens"),
];

/// Count-weighted plans of a group of workloads: `fused x93, chunk64 x7` (the first word of each label).
fn plan_counts<'a>(ws: impl Iterator<Item = &'a WorkloadResult>) -> String {
    let mut counts: Vec<(&str, usize)> = vec![];
    for w in ws {
        let k = w
            .kernel
            .as_deref()
            .and_then(|k| k.split(' ').next())
            .unwrap_or("-");
        match counts.iter_mut().find(|(n, _)| *n == k) {
            Some((_, c)) => *c += w.count,
            None => counts.push((k, w.count)),
        }
    }
    let parts: Vec<String> = counts.iter().map(|(k, c)| format!("{k} x{c}")).collect();
    parts.join(", ")
}

/// The throughput figures of one table row (a workload's tier or a group's total).
struct Rate {
    tokens_per_s: f64,
    gb_per_s: f64,
    copy_us: f64,
    pct_of_copy: f64,
}

fn print_class(r: &ClassResult, cpu: bool, threads: usize) {
    let c = &r.check;
    let note = c
        .stand_in
        .as_deref()
        .map_or(String::new(), |n| format!(" ({n})"));
    println!();
    println!("== {} ==", r.name);
    println!(
        "correctness vs float64 reference on {}{note}: {} (max abs {}, rel-L2 out {}, state {})",
        c.workload,
        if c.verdict.passed { "pass" } else { "FAIL" },
        sci(c.verdict.max_abs),
        sci(c.verdict.rel_l2_output),
        sci(c.verdict.rel_l2_state),
    );
    if !c.verdict.passed {
        println!("FAIL: {}; class not timed", c.verdict.summary);
        return;
    }
    for s in &r.skipped {
        println!("skipped: {s}");
    }
    let mut header = vec![
        "workload",
        "n",
        "tokens",
        "tier",
        "median µs",
        "p10 µs",
        "p90 µs",
        "tokens/s",
    ];
    if cpu {
        header.push("tok/s/core");
    }
    header.extend(["GB/s", "copy µs", "% of copy"]);
    if !cpu {
        header.push("kernel");
    }
    let mut t = new_table(&header);
    // One row: the first seven cells, then throughput, bytes and copy-floor figures; on cpu the per-core
    // throughput, elsewhere the kernel (or plan) column, filled on a workload's first tier only.
    let mut add_row = |lead: [String; 7], rate: Rate, what: &str, first_tier: bool| {
        let mut row = lead.to_vec();
        row.push(si(rate.tokens_per_s));
        if cpu {
            row.push(si(rate.tokens_per_s / threads as f64));
        }
        row.extend([
            num(rate.gb_per_s),
            num(rate.copy_us),
            format!("{:.0}%", rate.pct_of_copy),
        ]);
        if !cpu {
            row.push(if first_tier {
                what.into()
            } else {
                String::new()
            });
        }
        t.add_row(row);
    };
    let grouped = r.workloads.len() > 16;
    if !grouped {
        for w in &r.workloads {
            for (ti, s) in w.tiers.iter().enumerate() {
                let lead = [
                    w.label.clone(),
                    w.count.to_string(),
                    w.tokens.to_string(),
                    s.tier.clone(),
                    num(s.median_us),
                    num(s.p10_us),
                    num(s.p90_us),
                ];
                let rate = Rate {
                    tokens_per_s: s.tokens_per_s,
                    gb_per_s: s.gb_per_s,
                    copy_us: s.copy_median_us,
                    pct_of_copy: s.pct_of_copy,
                };
                add_row(lead, rate, w.kernel.as_deref().unwrap_or("-"), ti == 0);
            }
        }
    }
    let mut totals: Vec<(String, Vec<TotalStat>, String)> = vec![];
    if grouped {
        for (lo, hi, name) in BUCKETS {
            let ws = r
                .workloads
                .iter()
                .filter(|w| w.tokens >= lo && w.tokens < hi);
            if ws.clone().next().is_some() {
                totals.push((name.to_string(), aggregate(ws.clone()), plan_counts(ws)));
            }
        }
    }
    if let Some(tot) = &r.total {
        totals.push((
            "all (sum of medians)".into(),
            tot.clone(),
            plan_counts(r.workloads.iter()),
        ));
    }
    for (name, tot, plans) in totals {
        for (ti, s) in tot.into_iter().enumerate() {
            let lead = [
                name.clone(),
                s.workloads.to_string(),
                s.tokens.to_string(),
                s.tier.clone(),
                num(s.sum_median_us),
                "-".into(),
                "-".into(),
            ];
            let rate = Rate {
                tokens_per_s: s.tokens_per_s,
                gb_per_s: s.gb_per_s,
                copy_us: s.sum_copy_median_us,
                pct_of_copy: s.pct_of_copy,
            };
            add_row(lead, rate, &plans, ti == 0);
        }
    }
    println!("{t}");
    if r.op == "decode" && !r.mix {
        for w in r.workloads.iter().filter(|w| w.batch >= 64) {
            if let Some(s) = w.tiers.first() {
                println!(
                    "decode {}: {:.2}x the copy of the same bytes ({} tier; target <= 1.5x)",
                    w.label,
                    s.median_us / s.copy_median_us,
                    s.tier
                );
            }
        }
    }
}
