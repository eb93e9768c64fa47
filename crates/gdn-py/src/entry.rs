//! The entry points `gdn.decode`, `gdn.prefill` and `gdn.mtp` call first, with their arguments as the caller
//! gave them (positionally, in the Python signature's order; `norm` is `use_qk_l2norm_in_kernel`, `layout`
//! `state_layout`).
//!
//! A call whose destinations are all given — the common call of a serving engine, in any serving mode — is
//! described, validated and launched here in one step, and the result tuple is returned: no Python helper
//! frame, no tuple of inputs, no options tuple. Anything else returns None and the Python layer takes the
//! general path (`_serving` / `_run`), which handles it and raises its errors: outputs to allocate, a prefill
//! plan with a workspace, a `scale` that is not a float, a `max_seqlen` or `update_pool` of another type, a
//! bool `has_initial_state` on the host (converted there).

use crate::desc::Desc;
use crate::{checked, objects, run_now, serving};
use gdn_core::{Op, Serving};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyFloat, PyInt, PyTuple};

const DECODE: [&str; 8] = ["q", "k", "v", "state", "A_log", "a", "dt_bias", "b"];
const PREFILL: [&str; 9] = [
    "q",
    "k",
    "v",
    "state",
    "A_log",
    "a",
    "dt_bias",
    "b",
    "cu_seqlens",
];
const MTP: [&str; 10] = [
    "q",
    "k",
    "v",
    "initial_state",
    "initial_state_indices",
    "A_log",
    "a",
    "dt_bias",
    "b",
    "intermediate_states_buffer",
];

/// `scale` as the binding takes it: Some(None) for None, Some(value) for a float, None for anything else
/// (the Python layer converts or refuses it).
fn scale_of(x: &Bound<'_, PyAny>) -> Option<Option<f32>> {
    if x.is_none() {
        return Some(None);
    }
    x.cast_exact::<PyFloat>()
        .ok()
        .map(|f| Some(f.value() as f32))
}

/// Describes the definition inputs and the serving tensors (in [`serving::INPUTS`] order) of one call; None
/// when the Python layer must convert one first (a bool `has_initial_state` on the host).
fn describe_all(
    py: Python<'_>,
    op: Op,
    inputs: &[&Bound<'_, PyAny>],
    names: &[&'static str],
    extra: [Option<&Bound<'_, PyAny>>; 8],
) -> PyResult<Option<Vec<Option<Desc>>>> {
    let mut descs = Vec::with_capacity(inputs.len() + extra.len());
    let one = |x: &Bound<'_, PyAny>, name: &'static str| -> PyResult<Option<Desc>> {
        if x.is_none() {
            return Ok(None);
        }
        objects::describe(py, x, || Ok(name.into()), op.name(), false).map(Some)
    };
    for (x, &name) in inputs.iter().zip(names) {
        descs.push(one(x, name)?);
    }
    for (x, &name) in extra.iter().zip(serving::INPUTS.iter()) {
        descs.push(match x {
            Some(x) => one(x, name)?,
            None => None,
        });
    }
    let flags = descs[inputs.len() + 4].as_ref();
    if flags.is_some_and(|d| d.3 == "bool" && d.device() < 0) {
        return Ok(None);
    }
    Ok(Some(descs))
}

/// The serving options; the definitions' defaults without parsing when the keywords kept theirs.
fn options(
    op: Op,
    norm: &Bound<'_, PyAny>,
    layout: &Bound<'_, PyAny>,
    pad: &Bound<'_, PyAny>,
    every: Option<&Bound<'_, PyAny>>,
) -> PyResult<Serving> {
    let py = norm.py();
    let every_default = every.is_none_or(|e| {
        e.cast_exact::<PyInt>()
            .is_ok_and(|n| n.extract::<i64>().is_ok_and(|n| n == 0))
    });
    if norm.is(PyBool::new(py, false))
        && layout.eq(intern!(py, "k-last"))?
        && pad.eq(intern!(py, "negative"))?
        && every_default
    {
        return Ok(Serving::default());
    }
    let zero = 0i64.into_pyobject(py)?.into_any();
    serving::options_of(op, norm, layout, pad, every.unwrap_or(&zero))
}

/// `gdn.decode`'s one-step path (module doc). Returns `(output, new_state)` (the pool with `state_indices`),
/// or None for the Python layer's general path.
#[pyfunction]
#[pyo3(signature = (q, k, v, state, a_log, a, dt_bias, b, scale, output, new_state, g, alpha, beta, norm,
                    layout, state_indices, pad, has_initial_state))]
#[allow(clippy::too_many_arguments)]
pub fn decode<'py>(
    py: Python<'py>,
    q: &Bound<'py, PyAny>,
    k: &Bound<'py, PyAny>,
    v: &Bound<'py, PyAny>,
    state: &Bound<'py, PyAny>,
    a_log: &Bound<'py, PyAny>,
    a: &Bound<'py, PyAny>,
    dt_bias: &Bound<'py, PyAny>,
    b: &Bound<'py, PyAny>,
    scale: &Bound<'py, PyAny>,
    output: &Bound<'py, PyAny>,
    new_state: &Bound<'py, PyAny>,
    g: &Bound<'py, PyAny>,
    alpha: &Bound<'py, PyAny>,
    beta: &Bound<'py, PyAny>,
    norm: &Bound<'py, PyAny>,
    layout: &Bound<'py, PyAny>,
    state_indices: &Bound<'py, PyAny>,
    pad: &Bound<'py, PyAny>,
    has_initial_state: &Bound<'py, PyAny>,
) -> PyResult<Option<Bound<'py, PyTuple>>> {
    let op = Op::Decode;
    let pool = !state_indices.is_none();
    // a pool call writes the pool (new_state, if given, must be the pool: the binding checks)
    let dest = if pool && new_state.is_none() {
        state
    } else {
        new_state
    };
    let Some(scale) = scale_of(scale) else {
        return Ok(None);
    };
    if output.is_none() || dest.is_none() {
        return Ok(None);
    }
    let sv = options(op, norm, layout, pad, None)?;
    let extra = [
        Some(g),
        Some(alpha),
        Some(beta),
        Some(state_indices),
        Some(has_initial_state),
        None,
        None,
        None,
    ];
    let inputs = [q, k, v, state, a_log, a, dt_bias, b];
    let Some(descs) = describe_all(py, op, &inputs, &DECODE, extra)? else {
        return Ok(None);
    };
    let c = checked(op, descs, scale, false, None, sv)?;
    let returned = if pool { state } else { new_state };
    match run_now(py, c, Some(output), Some(dest))? {
        None => Ok(Some(PyTuple::new(py, [output, returned])?)),
        Some(_) => Ok(None),
    }
}

/// `gdn.prefill`'s one-step path (module doc). Returns `(output, new_state)` (the pool with `state_indices`),
/// or None for the Python layer's general path (also for a plan that needs a workspace).
#[pyfunction]
#[pyo3(signature = (q, k, v, state, a_log, a, dt_bias, b, cu_seqlens, scale, output, new_state, max_seqlen, g,
                    alpha, beta, norm, layout, state_indices, pad, has_initial_state, checkpoint_every,
                    checkpoint_cu_starts, checkpoints))]
#[allow(clippy::too_many_arguments)]
pub fn prefill<'py>(
    py: Python<'py>,
    q: &Bound<'py, PyAny>,
    k: &Bound<'py, PyAny>,
    v: &Bound<'py, PyAny>,
    state: &Bound<'py, PyAny>,
    a_log: &Bound<'py, PyAny>,
    a: &Bound<'py, PyAny>,
    dt_bias: &Bound<'py, PyAny>,
    b: &Bound<'py, PyAny>,
    cu_seqlens: &Bound<'py, PyAny>,
    scale: &Bound<'py, PyAny>,
    output: &Bound<'py, PyAny>,
    new_state: &Bound<'py, PyAny>,
    max_seqlen: &Bound<'py, PyAny>,
    g: &Bound<'py, PyAny>,
    alpha: &Bound<'py, PyAny>,
    beta: &Bound<'py, PyAny>,
    norm: &Bound<'py, PyAny>,
    layout: &Bound<'py, PyAny>,
    state_indices: &Bound<'py, PyAny>,
    pad: &Bound<'py, PyAny>,
    has_initial_state: &Bound<'py, PyAny>,
    checkpoint_every: &Bound<'py, PyAny>,
    checkpoint_cu_starts: &Bound<'py, PyAny>,
    checkpoints: &Bound<'py, PyAny>,
) -> PyResult<Option<Bound<'py, PyTuple>>> {
    let op = Op::Prefill;
    let pool = !state_indices.is_none();
    let dest = if pool && new_state.is_none() {
        state
    } else {
        new_state
    };
    let Some(scale) = scale_of(scale) else {
        return Ok(None);
    };
    let max_seq_len = if max_seqlen.is_none() {
        None
    } else {
        match max_seqlen
            .cast_exact::<PyInt>()
            .map(|n| n.extract::<usize>())
        {
            Ok(Ok(n)) => Some(n),
            _ => return Ok(None),
        }
    };
    if output.is_none() || dest.is_none() {
        return Ok(None);
    }
    let sv = options(op, norm, layout, pad, Some(checkpoint_every))?;
    let extra = [
        Some(g),
        Some(alpha),
        Some(beta),
        Some(state_indices),
        Some(has_initial_state),
        None,
        Some(checkpoint_cu_starts),
        Some(checkpoints),
    ];
    let inputs = [q, k, v, state, a_log, a, dt_bias, b, cu_seqlens];
    let Some(descs) = describe_all(py, op, &inputs, &PREFILL, extra)? else {
        return Ok(None);
    };
    let c = checked(op, descs, scale, false, max_seq_len, sv)?;
    let returned = if pool { state } else { new_state };
    match run_now(py, c, Some(output), Some(dest))? {
        None => Ok(Some(PyTuple::new(py, [output, returned])?)),
        Some(_) => Ok(None),
    }
}

/// `gdn.mtp`'s one-step path (module doc). Returns `(output, initial_state)`, or None for the Python layer's
/// general path.
#[pyfunction]
#[pyo3(signature = (q, k, v, initial_state, initial_state_indices, a_log, a, dt_bias, b, scale,
                    intermediate_states_buffer, output, update_pool, g, alpha, beta, norm, layout, pad,
                    has_initial_state, num_accepted_tokens))]
#[allow(clippy::too_many_arguments)]
pub fn mtp<'py>(
    py: Python<'py>,
    q: &Bound<'py, PyAny>,
    k: &Bound<'py, PyAny>,
    v: &Bound<'py, PyAny>,
    initial_state: &Bound<'py, PyAny>,
    initial_state_indices: &Bound<'py, PyAny>,
    a_log: &Bound<'py, PyAny>,
    a: &Bound<'py, PyAny>,
    dt_bias: &Bound<'py, PyAny>,
    b: &Bound<'py, PyAny>,
    scale: &Bound<'py, PyAny>,
    intermediate_states_buffer: &Bound<'py, PyAny>,
    output: &Bound<'py, PyAny>,
    update_pool: &Bound<'py, PyAny>,
    g: &Bound<'py, PyAny>,
    alpha: &Bound<'py, PyAny>,
    beta: &Bound<'py, PyAny>,
    norm: &Bound<'py, PyAny>,
    layout: &Bound<'py, PyAny>,
    pad: &Bound<'py, PyAny>,
    has_initial_state: &Bound<'py, PyAny>,
    num_accepted_tokens: &Bound<'py, PyAny>,
) -> PyResult<Option<Bound<'py, PyTuple>>> {
    let op = Op::Mtp;
    let Some(scale) = scale_of(scale) else {
        return Ok(None);
    };
    let Ok(update_pool) = update_pool.cast_exact::<PyBool>().map(|b| b.is_true()) else {
        return Ok(None);
    };
    if output.is_none() {
        return Ok(None);
    }
    // spec-decode slots imply the serving mode: the pool is updated in place
    let serving = update_pool || !num_accepted_tokens.is_none();
    let sv = options(op, norm, layout, pad, None)?;
    let extra = [
        Some(g),
        Some(alpha),
        Some(beta),
        None,
        Some(has_initial_state),
        Some(num_accepted_tokens),
        None,
        None,
    ];
    let inputs = [
        q,
        k,
        v,
        initial_state,
        initial_state_indices,
        a_log,
        a,
        dt_bias,
        b,
        intermediate_states_buffer,
    ];
    let Some(descs) = describe_all(py, op, &inputs, &MTP, extra)? else {
        return Ok(None);
    };
    let c = checked(op, descs, scale, serving, None, sv)?;
    let dest = Some(initial_state).filter(|_| serving);
    match run_now(py, c, Some(output), dest)? {
        None => Ok(Some(PyTuple::new(py, [output, initial_state])?)),
        Some(_) => Ok(None),
    }
}
