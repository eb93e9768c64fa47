//! One correctness case: generate a workload, run the backend on poisoned outputs, compare with the float64
//! reference. Shared by `gdn check` (many cases, each once per prefill plan) and `gdn bench` (one per class);
//! a dataset's workloads (`--dataset`) come with their tensors and are held to the contest rule alone.
//!
//! The rule is the contest's element rule everywhere. Prefill on normalised q/k with an fp32 (or no) state must
//! also meet the numerics targets of the prefill issue: relative L2 ≤ [`PREFILL_OUT_REL_L2`] on the output and
//! ≤ [`PREFILL_STATE_REL_L2`] on the state, and on every window of [`WINDOW`] tokens of a sequence at least two
//! windows long (the error must not grow along a long sequence: each window's output depends on the state carried
//! into it). bf16 states carry their own rounding (2^-9 relative per element) and keep the contest rule alone.

use crate::backend::Engine;
use anyhow::{Context, Result};
use gdn_core::compare::{compare, CheckReport, Tolerance, CONTEST};
use gdn_core::reference::RefOutputs;
use gdn_core::tensor::TensorMap;
use gdn_core::workload::{generate, WorkloadSpec};
use gdn_core::{reference, Backend, DType, GdnError, Inputs, Op, Outputs, Problem};
use gdn_cuda::{DeviceRoute, ForcedPlan};
use serde::Serialize;

/// Prefill output relative-L2 bound vs float64 (normalised q/k, fp32 state; FLA 3.4e-3, FlashInfer 3.7e-3).
pub const PREFILL_OUT_REL_L2: f64 = 3e-3;
/// Prefill state relative-L2 bound vs float64 (normalised q/k, fp32 state).
pub const PREFILL_STATE_REL_L2: f64 = 2e-3;
/// Stability window: tokens per window of a long sequence, each held to [`PREFILL_OUT_REL_L2`].
pub const WINDOW: usize = 8192;

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
    /// Output relative L2 of each [`WINDOW`]-token window of the sequences at least two windows long, in order
    /// (empty when there are none).
    pub rel_l2_windows: Vec<f64>,
    /// Elements failing the tolerance, all tensors together.
    pub failed: usize,
    /// The report's own summary (worst element, NaN counts) for failures.
    pub summary: String,
    /// A forced plan that refused the shape (the backend's reason, e.g. its workspace cap): nothing ran, nothing
    /// was compared ([`run_forced`]). The automatic plans may not refuse.
    pub refused: Option<String>,
}

/// A case's inputs and float64 reference, computed once and checked against every plan.
pub struct Prepared {
    pub spec: WorkloadSpec,
    pub(crate) tensors: TensorMap,
    pub(crate) problem: Problem,
    pub(crate) reference: RefOutputs,
}

impl Prepared {
    /// Draws `spec`'s inputs (seeded) and runs the float64 reference on them.
    pub fn new(spec: &WorkloadSpec, seed: u64) -> Result<Prepared> {
        Self::from_tensors(spec, generate(spec, seed))
    }

    /// `spec`'s call on the given tensors, with its float64 reference.
    pub fn from_tensors(spec: &WorkloadSpec, tensors: TensorMap) -> Result<Prepared> {
        let problem = spec
            .problem(&tensors)
            .with_context(|| format!("generated workload {}", spec.label))?;
        let reference = reference::run(&problem, &problem.inputs(&tensors));
        Ok(Prepared {
            spec: spec.clone(),
            tensors,
            problem,
            reference,
        })
    }

    pub fn reference(&self) -> &RefOutputs {
        &self.reference
    }
}

/// Runs `spec` (seeded) on `engine` and compares it with the float64 reference.
pub fn verify(engine: &Engine, spec: &WorkloadSpec, seed: u64) -> Result<Verdict> {
    verify_prepared(engine, &Prepared::new(spec, seed)?, None)
}

/// A dataset workload: `tensors` (validated as `p`) run on `engine` with the backend's own plan and compared
/// with the float64 reference by the contest rule alone (a dataset says nothing of how q/k were drawn).
pub fn verify_tensors(
    engine: &Engine,
    case: &str,
    p: &Problem,
    tensors: &TensorMap,
) -> Result<Verdict> {
    let x = p.inputs(tensors);
    let reference = reference::run(p, &x);
    let mut out = Outputs::poisoned(p, &x);
    let plan = engine
        .plan_label(p)
        .with_context(|| format!("{} on {case}", engine.name()))?;
    engine
        .run(p, &x, &mut out)
        .with_context(|| format!("{} on {case}", engine.name()))?;
    let report = compare(p, &out, &reference, &CONTEST, &CONTEST);
    let mut v = verdict(case, &report);
    v.plan = plan;
    Ok(v)
}

/// One verdict for many (a dataset class): passed when all passed, the worst errors, the failures summed, the
/// first failure's summary.
pub fn merge_verdicts(case: &str, all: &[Verdict]) -> Verdict {
    let mut m = Verdict {
        case: case.to_string(),
        plan: None,
        passed: all.iter().all(|v| v.passed),
        max_abs: 0.0,
        rel_l2_output: 0.0,
        rel_l2_state: 0.0,
        rel_l2_windows: Vec::new(),
        failed: 0,
        summary: format!("PASS all {} workloads", all.len()),
        refused: None,
    };
    for v in all {
        m.max_abs = nan_max(m.max_abs, v.max_abs);
        m.rel_l2_output = nan_max(m.rel_l2_output, v.rel_l2_output);
        if !v.rel_l2_state.is_nan() {
            m.rel_l2_state = m.rel_l2_state.max(v.rel_l2_state);
        }
        m.failed += v.failed;
    }
    if let Some(f) = all.iter().find(|v| !v.passed) {
        m.summary = format!("{}: {}", f.case, f.summary);
    }
    m
}

/// The tolerances of (output, state) for a problem: the contest rule, plus the prefill numerics targets on
/// normalised q/k with an fp32 or absent state.
pub fn tolerances(p: &Problem, normalised: bool) -> (Tolerance, Tolerance) {
    // gdn's own prefill targets are for bf16 activations and an fp32 state; 16-bit states (bf16, fp16) and fp16
    // activations (whose products run on bf16 operands) are held to the contest's rule
    let fp32_state = p.state_out_dtype() == DType::F32;
    if p.def.op == Op::Prefill && normalised && fp32_state && p.act_dtype == DType::BF16 {
        (
            Tolerance {
                max_rel_l2: PREFILL_OUT_REL_L2,
                ..CONTEST
            },
            Tolerance {
                max_rel_l2: PREFILL_STATE_REL_L2,
                ..CONTEST
            },
        )
    } else {
        (CONTEST, CONTEST)
    }
}

/// `prepared` with prefill plan `plan` forced on CUDA (None: the backend's own choice).
pub fn verify_prepared(
    engine: &Engine,
    prepared: &Prepared,
    plan: Option<ForcedPlan>,
) -> Result<Verdict> {
    Ok(judge_prepared(engine, prepared, plan, None)?.0)
}

/// `verify_prepared` with the output's and the state's relative-L2 bounds replaced by `rel_l2` when given (a
/// regime whose documented numerics differ: `check_cuts`' slow gates), returning the outputs too (none when the
/// forced plan refused the shape).
pub fn judge_prepared(
    engine: &Engine,
    prepared: &Prepared,
    plan: Option<ForcedPlan>,
    rel_l2: Option<(f64, f64)>,
) -> Result<(Verdict, Option<Outputs>)> {
    let spec = &prepared.spec;
    let p = for_plan(&prepared.problem, plan);
    let x = p.inputs(&prepared.tensors);
    let mut out = Outputs::poisoned(&p, &x);
    let ran = match run_forced(engine, &p, &x, &mut out, plan).with_context(|| match plan {
        Some(k) => format!("{} on {} ({} plan)", engine.name(), spec.label, k.name()),
        None => format!("{} on {}", engine.name(), spec.label),
    })? {
        Ran::Ran(label) => label,
        Ran::Refused(why) => {
            let k = plan.map_or("auto", ForcedPlan::name);
            return Ok((refused(&format!("{} [{k}]", spec.label), why), None));
        }
    };
    let r = &prepared.reference;
    // q/k normalised by the caller or by the kernel
    let (mut out_tol, mut state_tol) = tolerances(&p, spec.normalize_qk || p.serving.qk_l2norm);
    if let Some((out, state)) = rel_l2 {
        out_tol.max_rel_l2 = out;
        state_tol.max_rel_l2 = state;
    }
    let report = compare(&p, &out, r, &out_tol, &state_tol);
    let case = match p.def.op {
        Op::Prefill => row_label(&spec.label, &ran),
        _ => spec.label.clone(),
    };
    let mut v = verdict(&case, &report);
    v.plan = ran;
    if p.def.op == Op::Prefill {
        v.rel_l2_windows = window_errors(&p, &x, &out, r);
        let bound = out_tol.max_rel_l2;
        if let Some(w) = v
            .rel_l2_windows
            .iter()
            .position(|&e| e.is_nan() || e > bound)
        {
            v.passed = false;
            v.summary += &format!(
                " | output window {w} ({WINDOW} tokens): rel_l2={:.3e} > {bound:.1e}",
                v.rel_l2_windows[w]
            );
        }
    }
    Ok((v, Some(out)))
}

/// `p` as `plan` gets it: the device plan serves the callers that give no length hint, so its own route plans
/// without it (its tiles differ from a hinted call's, e.g. the split kernel for equal lengths, whose ranking has a
/// path of its own there).
pub fn for_plan(p: &Problem, plan: Option<ForcedPlan>) -> Problem {
    let mut p = p.clone();
    if plan == Some(ForcedPlan::Device(DeviceRoute::Model)) {
        p.dims.max_seq_len = None;
    }
    p
}

/// A prefill row's label: the case's, then the plan that ran (the first word of CUDA's launch label), e.g.
/// `… [chunk64]`.
pub fn row_label(case: &str, ran: &Option<String>) -> String {
    match ran {
        Some(l) => format!("{case} [{}]", l.split(' ').next().unwrap_or(l)),
        None => case.to_string(),
    }
}

/// What [`run_forced`] did.
pub enum Ran {
    /// The call ran (what ran on CUDA).
    Ran(Option<String>),
    /// A forced plan refused the shape (the backend's reason).
    Refused(String),
}

/// Runs `p` with prefill plan `plan` forced. A forced plan may refuse a shape it was not built for (its workspace
/// cap, the device plan's sequence limit): that is a [`Ran::Refused`], not an error. The device plan's own route
/// (`DeviceRoute::Model`) stands for what a caller without a length hint gets: where the device plan refuses the
/// shape, that caller gets the automatic plan, so that is what runs. Any other failure is an error.
pub fn run_forced(
    engine: &Engine,
    p: &Problem,
    x: &Inputs,
    out: &mut Outputs,
    plan: Option<ForcedPlan>,
) -> gdn_core::Result<Ran> {
    match (engine.run_plan(p, x, out, plan), plan) {
        (Ok(label), _) => Ok(Ran::Ran(label)),
        (Err(GdnError::Unsupported(_)), Some(ForcedPlan::Device(DeviceRoute::Model))) => {
            engine.run_plan(p, x, out, None).map(Ran::Ran)
        }
        (Err(GdnError::Unsupported(why)), Some(_)) => Ok(Ran::Refused(why)),
        (Err(e), _) => Err(e),
    }
}

/// Output relative L2 per [`WINDOW`]-token window of every sequence at least two windows long (a last, partial
/// window counts when it has at least half a window). Layout `[tokens, HV, D]`.
pub fn window_errors(p: &Problem, x: &Inputs, out: &Outputs, r: &RefOutputs) -> Vec<f64> {
    let row = p.def.heads.num_v_heads * p.def.heads.head_size;
    let cu = &x.cu_seqlens;
    let mut errs = Vec::new();
    for n in 0..p.dims.num_seqs {
        let (bos, eos) = (cu[n] as usize, cu[n + 1] as usize);
        if eos - bos < 2 * WINDOW {
            continue;
        }
        let mut a = bos;
        while eos - a >= WINDOW / 2 {
            let b = (a + WINDOW).min(eos);
            let got = out.output.range_f64(a * row..b * row);
            let want = &r.output[a * row..b * row];
            errs.push(rel_l2(got.into_iter(), want));
            a = b;
        }
    }
    errs
}

/// ‖got − want‖ / ‖want‖; infinite when `got` holds a NaN or an infinity, or `want` is zero and `got` is not.
pub fn rel_l2(got: impl Iterator<Item = f64>, want: &[f64]) -> f64 {
    let (mut e2, mut r2) = (0.0f64, 0.0f64);
    for (g, &w) in got.zip(want) {
        if !g.is_finite() {
            return f64::INFINITY;
        }
        e2 += (g - w) * (g - w);
        r2 += w * w;
    }
    match (r2 > 0.0, e2 > 0.0) {
        (true, _) => (e2 / r2).sqrt(),
        (false, true) => f64::INFINITY,
        (false, false) => 0.0,
    }
}

/// The row of a forced plan that refused the shape.
pub fn refused(case: &str, why: String) -> Verdict {
    Verdict {
        case: case.to_string(),
        plan: None,
        passed: true,
        max_abs: f64::NAN,
        rel_l2_output: f64::NAN,
        rel_l2_state: f64::NAN,
        rel_l2_windows: Vec::new(),
        failed: 0,
        summary: format!("refused: {why}"),
        refused: Some(why),
    }
}

/// A table row from a report (no windows).
pub fn verdict(case: &str, report: &CheckReport) -> Verdict {
    let mut v = Verdict {
        case: case.to_string(),
        plan: None,
        passed: report.passed(),
        max_abs: 0.0,
        rel_l2_output: f64::NAN,
        rel_l2_state: f64::NAN,
        rel_l2_windows: Vec::new(),
        failed: 0,
        summary: report.summary(),
        refused: None,
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

#[cfg(test)]
mod tests {
    use super::*;
    use gdn_core::Heads;

    #[test]
    fn windows_cover_long_sequences_and_see_a_late_error() {
        let heads = Heads::new(1, 1, 128).unwrap();
        // 8192 + 8192 + 4101 tokens (a last window of at least half counts), then a sequence too short for windows
        let mut spec = WorkloadSpec::prefill(heads, &[2 * WINDOW + WINDOW / 2 + 5, 100]);
        spec.normalize_qk = true;
        let prep = Prepared::new(&spec, 1).unwrap();
        let x = prep.problem.inputs(&prep.tensors);
        let mut out = Outputs::poisoned(&prep.problem, &x);
        for (i, &r) in prep.reference.output.iter().enumerate() {
            out.output.set(i, r);
        }
        let w = window_errors(&prep.problem, &x, &out, &prep.reference);
        assert_eq!(w.len(), 3);
        assert!(w.iter().all(|&e| e > 0.0 && e < 1e-2), "{w:?}");
        let at = (2 * WINDOW + 7) * 128 + 5;
        out.output.set(at, out.output.get(at) + 100.0);
        let bad = window_errors(&prep.problem, &x, &out, &prep.reference);
        assert_eq!(bad[..2], w[..2]);
        assert!(bad[2] > PREFILL_OUT_REL_L2, "{bad:?}");
        out.output.set(7, f64::NAN);
        assert!(window_errors(&prep.problem, &x, &out, &prep.reference)[0].is_infinite());
    }

    #[test]
    fn prefill_targets_apply_to_normalised_fp32_states_only() {
        let heads = Heads::new(1, 1, 128).unwrap();
        let mut spec = WorkloadSpec::prefill(heads, &[3]);
        let p = Prepared::new(&spec, 1).unwrap().problem;
        assert_eq!(tolerances(&p, true).0.max_rel_l2, PREFILL_OUT_REL_L2);
        assert_eq!(tolerances(&p, true).1.max_rel_l2, PREFILL_STATE_REL_L2);
        assert_eq!(tolerances(&p, false).0, CONTEST);
        spec.state_dtype = DType::BF16;
        let p = Prepared::new(&spec, 1).unwrap().problem;
        assert_eq!(tolerances(&p, true).1, CONTEST);
        let p = Prepared::new(&WorkloadSpec::decode(heads, 2), 1)
            .unwrap()
            .problem;
        assert_eq!(tolerances(&p, true).0, CONTEST);
    }
}
