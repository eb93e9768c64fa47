//! The correctness rule every backend is checked with: a result against the float64 reference, tensor by
//! tensor (output, state, intermediate states), flashinfer-bench's element rule plus an optional rel-L2 bound.
//!
//! An element fails only if `|x−y| > atol` AND `|x−y|/(|y|+1e-8) > rtol`; any NaN/inf in the result fails
//! (and is counted separately). A tensor passes when no element fails, its length matches, and its
//! relative L2 error `‖x−y‖/‖y‖` is within `max_rel_l2`.

use crate::outputs::Outputs;
use crate::problem::Problem;
use crate::reference::RefOutputs;
use serde::Serialize;

/// Tolerances of one tensor class.
#[derive(Copy, Clone, Debug, PartialEq, Serialize)]
pub struct Tolerance {
    pub atol: f64,
    pub rtol: f64,
    pub max_rel_l2: f64,
}

/// flashinfer-bench's rule: atol = rtol = 1e-2, no L2 bound.
pub const CONTEST: Tolerance = Tolerance {
    atol: 1e-2,
    rtol: 1e-2,
    max_rel_l2: f64::INFINITY,
};

/// The verdict on one tensor.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TensorCheck {
    pub name: String,
    pub numel: usize,
    pub max_abs: f64,
    pub rel_l2: f64,
    /// Elements failing the element rule (non-finite ones included).
    pub failed: usize,
    pub non_finite: usize,
    /// The worst element: (index, got, want), the one furthest beyond its tolerance.
    pub worst: Option<(usize, f64, f64)>,
    pub passed: bool,
}

/// Verdicts on every tensor of a run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CheckReport {
    pub tensors: Vec<TensorCheck>,
}

impl CheckReport {
    pub fn passed(&self) -> bool {
        self.tensors.iter().all(|t| t.passed)
    }

    /// One line: verdict, then per tensor max |err|, rel-L2, failures and the worst element.
    pub fn summary(&self) -> String {
        let verdict = if self.passed() { "PASS" } else { "FAIL" };
        let parts: Vec<String> = self.tensors.iter().map(TensorCheck::summary).collect();
        format!("{verdict} {}", parts.join(" | "))
    }
}

impl TensorCheck {
    fn summary(&self) -> String {
        let mut s = format!(
            "{}: max_abs={:.3e} rel_l2={:.3e}",
            self.name, self.max_abs, self.rel_l2
        );
        if self.failed > 0 || self.non_finite > 0 {
            s += &format!(
                " failed={}/{} non_finite={}",
                self.failed, self.numel, self.non_finite
            );
        }
        if let (false, Some((i, got, want))) = (self.passed, self.worst) {
            s += &format!(" worst[{i}]: got {got:.6e} want {want:.6e}");
        }
        s
    }
}

/// Compares a run's outputs with the reference: `output` with `out_tol`; the state output and the
/// intermediate and checkpoint buffers (whole buffers, so untouched rows are checked too) with `state_tol`.
pub fn compare(
    p: &Problem,
    out: &Outputs,
    r: &RefOutputs,
    out_tol: &Tolerance,
    state_tol: &Tolerance,
) -> CheckReport {
    let got_out = out.output.to_f64();
    let mut tensors = vec![
        check_tensor("output", &got_out, &r.output, out_tol),
        check_tensor(
            p.def.state_output(),
            &out.state.to_f64(),
            &r.state,
            state_tol,
        ),
    ];
    let name = "intermediate_states_buffer";
    match (&out.intermediate, &r.intermediate) {
        (Some(got), Some(want)) => {
            let got: Vec<f64> = got.iter().map(|&x| x as f64).collect();
            tensors.push(check_tensor(name, &got, want, state_tol));
        }
        (None, None) => {}
        (got, want) => tensors.push(missing(name, got.is_none(), want.is_none())),
    }
    let name = crate::serving::names::CHECKPOINTS;
    match (&out.checkpoints, &r.checkpoints) {
        (Some(got), Some(want)) => tensors.push(check_tensor(name, &got.to_f64(), want, state_tol)),
        (None, None) => {}
        (got, want) => tensors.push(missing(name, got.is_none(), want.is_none())),
    }
    CheckReport { tensors }
}

fn missing(name: &str, got_missing: bool, want_missing: bool) -> TensorCheck {
    let which = if got_missing { "result" } else { "reference" };
    debug_assert!(got_missing != want_missing);
    TensorCheck {
        name: format!("{name} (absent from the {which})"),
        numel: 0,
        max_abs: f64::INFINITY,
        rel_l2: f64::INFINITY,
        failed: 1,
        non_finite: 0,
        worst: None,
        passed: false,
    }
}

/// Applies the element rule and the rel-L2 bound to one tensor.
pub fn check_tensor(name: &str, got: &[f64], want: &[f64], tol: &Tolerance) -> TensorCheck {
    let mut c = TensorCheck {
        name: name.to_string(),
        numel: want.len(),
        max_abs: 0.0,
        rel_l2: 0.0,
        failed: 0,
        non_finite: 0,
        worst: None,
        passed: false,
    };
    if got.len() != want.len() {
        c.name = format!("{name} (length {} but expected {})", got.len(), want.len());
        c.failed = got.len().max(want.len());
        c.max_abs = f64::INFINITY;
        c.rel_l2 = f64::INFINITY;
        return c;
    }
    let (mut err2, mut ref2) = (0.0f64, 0.0f64);
    let mut worst_score = f64::NEG_INFINITY;
    for (i, (&x, &y)) in got.iter().zip(want).enumerate() {
        let diff = (x - y).abs();
        let score = if x.is_finite() {
            diff / (tol.atol + tol.rtol * y.abs())
        } else {
            c.non_finite += 1;
            f64::INFINITY
        };
        let fails = !x.is_finite() || (diff > tol.atol && diff / (y.abs() + 1e-8) > tol.rtol);
        if fails {
            c.failed += 1;
        }
        if score > worst_score {
            worst_score = score;
            c.worst = Some((i, x, y));
        }
        if x.is_finite() {
            c.max_abs = c.max_abs.max(diff);
            err2 += diff * diff;
        }
        ref2 += y * y;
    }
    c.rel_l2 = if c.non_finite > 0 {
        f64::INFINITY
    } else if ref2 > 0.0 {
        (err2 / ref2).sqrt()
    } else if err2 > 0.0 {
        f64::INFINITY
    } else {
        0.0
    };
    c.passed = c.failed == 0 && c.rel_l2 <= tol.max_rel_l2;
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn element_rule_needs_both_bounds_exceeded() {
        let tol = CONTEST;
        // Large value, small relative error: passes despite |diff| > atol.
        let c = check_tensor("t", &[100.5], &[100.0], &tol);
        assert!(c.passed, "{c:?}");
        // Small value, large relative error but |diff| < atol: passes.
        let c = check_tensor("t", &[0.005], &[0.0], &tol);
        assert!(c.passed);
        // Both exceeded: fails, worst element reported.
        let c = check_tensor("t", &[1.0, 0.5], &[1.0, 0.0], &tol);
        assert!(!c.passed);
        assert_eq!((c.failed, c.worst), (1, Some((1, 0.5, 0.0))));
    }

    #[test]
    fn non_finite_always_fails() {
        let loose = Tolerance {
            atol: 1e9,
            rtol: 1e9,
            max_rel_l2: f64::INFINITY,
        };
        let c = check_tensor(
            "t",
            &[f64::NAN, 1.0, f64::INFINITY],
            &[0.0, 1.0, 0.0],
            &loose,
        );
        assert_eq!((c.failed, c.non_finite, c.passed), (2, 2, false));
        assert!(matches!(c.worst, Some((0, _, _))));
    }

    #[test]
    fn rel_l2_bound_applies() {
        let tol = Tolerance {
            atol: 1.0,
            rtol: 1.0,
            max_rel_l2: 1e-3,
        };
        let c = check_tensor("t", &[1.01, 1.0], &[1.0, 1.0], &tol);
        assert!(!c.passed && c.failed == 0 && c.rel_l2 > 1e-3);
        let c = check_tensor("t", &[1.0], &[1.0, 2.0], &tol);
        assert!(!c.passed);
    }
}
