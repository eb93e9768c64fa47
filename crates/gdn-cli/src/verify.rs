//! One correctness case: generate a workload, run the backend on poisoned outputs, compare with the float64
//! reference at the contest tolerance. Shared by `gdn check` (many cases) and `gdn bench` (one per class).

use crate::backend::Engine;
use anyhow::{Context, Result};
use gdn_core::compare::{compare, CheckReport, CONTEST};
use gdn_core::workload::{generate, WorkloadSpec};
use gdn_core::{reference, Op, Outputs, Problem};
use gdn_cuda::{DeviceRoute, ForcedPlan};
use serde::Serialize;

/// The errors worth a table row, from a [`CheckReport`].
#[derive(Clone, Debug, Serialize)]
pub struct Verdict {
    /// The case's label; for prefill on CUDA followed by the plan that ran, e.g. `[chunk64]`.
    pub case: String,
    /// What ran on CUDA (`LaunchInfo::label`: plan and kernels); null on the CPU.
    pub plan: Option<String>,
    pub passed: bool,
    /// Worst absolute error over all tensors.
    pub max_abs: f64,
    pub rel_l2_output: f64,
    /// Worst relative L2 error over the state tensors (state, intermediate states); NaN when none.
    pub rel_l2_state: f64,
    /// Elements failing the tolerance, all tensors together.
    pub failed: usize,
    /// The report's own summary (worst element, NaN counts) for failures.
    pub summary: String,
}

/// Runs `spec` (seeded) on `engine` and compares it with the float64 reference.
pub fn verify(engine: &Engine, spec: &WorkloadSpec, seed: u64) -> Result<Verdict> {
    verify_plan(engine, spec, seed, None)
}

/// `verify` with prefill plan `plan` forced on CUDA (None: the backend's own choice).
pub fn verify_plan(
    engine: &Engine,
    spec: &WorkloadSpec,
    seed: u64,
    plan: Option<ForcedPlan>,
) -> Result<Verdict> {
    use gdn_core::Backend;
    let tensors = generate(spec, seed);
    let mut p = Problem::from_tensors(&spec.definition(), &tensors, &spec.options())
        .with_context(|| format!("generated workload {}", spec.label))?;
    if plan == Some(ForcedPlan::Device(DeviceRoute::Model)) {
        // the device plan serves the callers that give no length hint: plan it as they get it (its tiles differ
        // from a hinted call's, e.g. the split kernel for equal lengths, whose ranking has a path of its own there)
        p.dims.max_seq_len = None;
    }
    let x = p.inputs(&tensors);
    let mut out = Outputs::poisoned(&p, &x);
    let ran = engine
        .run_plan(&p, &x, &mut out, plan)
        .with_context(|| match plan {
            Some(k) => format!("{} on {} ({} plan)", engine.name(), spec.label, k.name()),
            None => format!("{} on {}", engine.name(), spec.label),
        })?;
    let r = reference::run(&p, &x);
    let report = compare(&p, &out, &r, &CONTEST, &CONTEST);
    let case = match (&ran, p.def.op) {
        (Some(label), Op::Prefill) => format!(
            "{} [{}]",
            spec.label,
            label.split(' ').next().unwrap_or(label)
        ),
        _ => spec.label.clone(),
    };
    let mut v = verdict(&case, &report);
    v.plan = ran;
    Ok(v)
}

fn verdict(case: &str, report: &CheckReport) -> Verdict {
    let mut v = Verdict {
        case: case.to_string(),
        plan: None,
        passed: report.passed(),
        max_abs: 0.0,
        rel_l2_output: f64::NAN,
        rel_l2_state: f64::NAN,
        failed: 0,
        summary: report.summary(),
    };
    for t in &report.tensors {
        v.max_abs = nan_max(v.max_abs, t.max_abs);
        v.failed += t.failed;
        if t.name == "output" {
            v.rel_l2_output = t.rel_l2;
        } else {
            v.rel_l2_state = if v.rel_l2_state.is_nan() {
                t.rel_l2
            } else {
                nan_max(v.rel_l2_state, t.rel_l2)
            };
        }
    }
    v
}

/// max that propagates NaN (a NaN error must show).
fn nan_max(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else {
        a.max(b)
    }
}
