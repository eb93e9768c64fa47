//! The serving modes as the Python layer passes them: the options tuple (`use_qk_l2norm_in_kernel`,
//! `state_layout`, `pad`, `checkpoint_every`) parsed into gdn-core's [`Serving`], the serving tensors' names and
//! dtypes, and the one state tensor that may be a strided view (a pool row stride).
//!
//! Semantics live in gdn-core (`gdn_core::serving`); this module only maps Python arguments onto them, with
//! errors that name the Python argument.

use crate::desc::Desc;
use gdn_core::serving::names;
use gdn_core::{DType, Op, PadRule, Serving, StateLayout};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyString};

/// The serving tensors, in the order the Python layer passes them (`extra` of `_gdn.call` / `_gdn.plan`).
pub const INPUTS: [&str; 8] = [
    names::G,
    names::ALPHA,
    names::BETA,
    names::STATE_INDICES,
    names::HAS_INITIAL_STATE,
    names::NUM_ACCEPTED,
    names::CHECKPOINT_STARTS,
    names::CHECKPOINTS,
];

/// The serving tensors the kernels read one element at a time (`sv_*` in kernels/common/serving.cuh): on a
/// device they need element alignment only.
pub const SCALAR_READ: [&str; 4] = [
    names::STATE_INDICES,
    names::HAS_INITIAL_STATE,
    names::NUM_ACCEPTED,
    names::CHECKPOINT_STARTS,
];

/// dtypes accepted for serving tensor `name` (gdn-core checks them again, with the same names).
pub fn allowed(name: &str) -> &'static [DType] {
    match name {
        names::G | names::ALPHA => &[DType::F32],
        names::BETA | names::CHECKPOINTS => &[DType::F32, DType::BF16, DType::F16],
        names::STATE_INDICES | names::CHECKPOINT_STARTS => &[DType::I32, DType::I64],
        _ => &[DType::I32], // has_initial_state, num_accepted_tokens
    }
}

fn type_err(op: Op, arg: &str, want: &str, got: &Bound<'_, PyAny>) -> PyErr {
    let ty = got
        .get_type()
        .name()
        .map_or_else(|_| "?".into(), |n| n.to_string());
    PyTypeError::new_err(format!(
        "gdn.{}: argument '{arg}': expected {want}, got {ty}",
        op.name()
    ))
}

fn value_err(op: Op, arg: &str, problem: impl std::fmt::Display) -> PyErr {
    PyValueError::new_err(format!("gdn.{}: argument '{arg}': {problem}", op.name()))
}

/// Parses `(use_qk_l2norm_in_kernel, state_layout, pad, checkpoint_every)`; None = the definitions' defaults.
pub fn options(op: Op, o: Option<&Bound<'_, PyAny>>) -> PyResult<Serving> {
    let Some(o) = o.filter(|o| !o.is_none()) else {
        return Ok(Serving::default());
    };
    let item = |i: usize| {
        o.get_item(i).map_err(|_| {
            PyTypeError::new_err(format!(
                "gdn.{}: serving options must be a 4-tuple (use_qk_l2norm_in_kernel, state_layout, pad, checkpoint_every)",
                op.name()
            ))
        })
    };
    options_of(op, &item(0)?, &item(1)?, &item(2)?, &item(3)?)
}

/// Parses the four serving options as the Python keywords give them.
pub fn options_of(
    op: Op,
    norm: &Bound<'_, PyAny>,
    layout: &Bound<'_, PyAny>,
    pad: &Bound<'_, PyAny>,
    every: &Bound<'_, PyAny>,
) -> PyResult<Serving> {
    if !norm.is_instance_of::<PyBool>() {
        return Err(type_err(op, "use_qk_l2norm_in_kernel", "a bool", norm));
    }
    let layout = match str_of(layout).as_deref() {
        Some("k-last") => StateLayout::KLast,
        Some("k-first") => StateLayout::KFirst,
        Some(s) => {
            return Err(value_err(
                op,
                "state_layout",
                format!("expected 'k-last' ([.., V, K]) or 'k-first' ([.., K, V]), got '{s}'"),
            ))
        }
        None => return Err(type_err(op, "state_layout", "a str", layout)),
    };
    let pad = match str_of(pad).as_deref() {
        Some("negative") => PadRule::Negative,
        Some("null-slot") => PadRule::NullSlot,
        Some(s) => {
            return Err(value_err(
                op,
                "pad",
                format!(
                "expected 'negative' (index < 0 is padding) or 'null-slot' (index <= 0), got '{s}'"
            ),
            ))
        }
        None => return Err(type_err(op, "pad", "a str", pad)),
    };
    if every.is_instance_of::<PyBool>() {
        return Err(type_err(op, "checkpoint_every", "an int", every));
    }
    let n: i64 = every
        .extract()
        .map_err(|_| type_err(op, "checkpoint_every", "an int", every))?;
    let checkpoint_every = usize::try_from(n)
        .map_err(|_| value_err(op, "checkpoint_every", format!("must be >= 0, got {n}")))?;
    Ok(Serving {
        qk_l2norm: norm.is_truthy().unwrap_or(false),
        layout,
        pad,
        checkpoint_every,
    })
}

fn str_of(x: &Bound<'_, PyAny>) -> Option<String> {
    x.cast::<PyString>()
        .ok()
        .and_then(|s| s.to_cow().ok().map(|c| c.into_owned()))
}

/// Element stride between the rows (dim 0) of a state tensor, or 0 when it is dense. Only meaningful for a
/// descriptor that passed [`crate::args::check_tensor`] with rows allowed to be strided.
pub fn row_stride(d: &Desc) -> usize {
    let dense: usize = d.shape().iter().skip(1).product();
    match (d.shape().first(), d.2.first()) {
        (Some(&rows), Some(&s)) if rows > 1 && s as usize != dense => s as usize,
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn row_stride_of_views() {
        let dense = Desc(
            0,
            vec![4, 8, 128, 128].into(),
            vec![131072, 16384, 128, 1].into(),
            "float32".into(),
            0,
        );
        assert_eq!(row_stride(&dense), 0);
        let view = Desc(
            0,
            vec![4, 8, 128, 128].into(),
            vec![3 * 131072, 16384, 128, 1].into(),
            "float32".into(),
            0,
        );
        assert_eq!(row_stride(&view), 3 * 131072);
        let one = Desc(
            0,
            vec![1, 8, 128, 128].into(),
            vec![7, 16384, 128, 1].into(),
            "float32".into(),
            0,
        );
        assert_eq!(row_stride(&one), 0);
    }
}
