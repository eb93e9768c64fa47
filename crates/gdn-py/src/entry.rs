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

use crate::args::{is_dense, Checked};
use crate::desc::{row_major, Desc, Dims};
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

/// Launches a validated call at once and returns `(output, returned)`; None when the call needs the Python layer's
/// general path after all (a plan with a device workspace).
fn launch<'py>(
    py: Python<'py>,
    c: Checked,
    output: &Bound<'py, PyAny>,
    dest: Option<&Bound<'py, PyAny>>,
    returned: &Bound<'py, PyAny>,
) -> PyResult<Option<Bound<'py, PyTuple>>> {
    match run_now(py, c, Some(output), dest)? {
        None => Ok(Some(PyTuple::new(py, [output, returned])?)),
        Some(_) => Ok(None),
    }
}

/// The state destination and the returned state of a decode / prefill call: with `state_indices` the pool (`state`)
/// is written in place and returned (a given `new_state` must be the pool: the binding checks); otherwise
/// `new_state`.
fn pool_dest<'a, 'py>(
    state: &'a Bound<'py, PyAny>,
    new_state: &'a Bound<'py, PyAny>,
    state_indices: &Bound<'py, PyAny>,
) -> (&'a Bound<'py, PyAny>, &'a Bound<'py, PyAny>) {
    if state_indices.is_none() {
        (new_state, new_state)
    } else if new_state.is_none() {
        (state, state)
    } else {
        (new_state, state)
    }
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
    let (dest, returned) = pool_dest(state, new_state, state_indices);
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
    launch(py, c, output, Some(dest), returned)
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
    let (dest, returned) = pool_dest(state, new_state, state_indices);
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
    launch(py, c, output, Some(dest), returned)
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
    launch(py, c, output, dest, initial_state)
}

/// The packed decode of the engine adapters (`gdn.vllm`'s `fused_recurrent_gated_delta_rule_packed_decode`,
/// `gdn.sglang`'s `GDNKernel.packed_decode`): q, k and v are read out of the fused projection `mixed_qkv
/// [B, 2·H·K + HV·V]` (last dimension contiguous, rows any distance apart) and a, b `[B, HV]` are read as
/// `[B, 1, HV]`, all by descriptor arithmetic (no view objects), then validated and launched as `gdn.decode`
/// with the pool `state` updated in place at `state_indices`.
///
/// An adapter's own argument checks are done here too, but their errors stay in Python: whenever an input is
/// outside what this path takes (a wrong rank, shape, dtype or layout, a zero or non-float `scale`, a gate
/// that needs a copy), it returns None and the adapter's general path runs the checks that raise, or makes the
/// copies. Errors raised here come from gdn's validation of the derived q / k / v / a / b descriptors, exactly
/// as `gdn.decode` on the equivalent views raises them.
///
/// `widen(name, x)` is called for an `A_log` / `dt_bias` that is not float32 and dense (the adapter's cached
/// widening, which also raises for a dtype gdn does not take); `heads`: the `(HV, V)` the caller expects;
/// `default_scale`: a None `scale` becomes `K ** -0.5` here (vLLM's default) instead of gdn's own.
/// Returns `(output, state)`.
#[pyfunction]
#[pyo3(signature = (mixed_qkv, a, b, state, a_log, dt_bias, scale, output, state_indices, norm, pad, widen,
                    heads=None, default_scale=true))]
#[allow(clippy::too_many_arguments)]
pub fn packed_decode<'py>(
    py: Python<'py>,
    mixed_qkv: &Bound<'py, PyAny>,
    a: &Bound<'py, PyAny>,
    b: &Bound<'py, PyAny>,
    state: &Bound<'py, PyAny>,
    a_log: &Bound<'py, PyAny>,
    dt_bias: &Bound<'py, PyAny>,
    scale: &Bound<'py, PyAny>,
    output: &Bound<'py, PyAny>,
    state_indices: &Bound<'py, PyAny>,
    norm: &Bound<'py, PyAny>,
    pad: &Bound<'py, PyAny>,
    widen: &Bound<'py, PyAny>,
    heads: Option<(usize, usize)>,
    default_scale: bool,
) -> PyResult<Option<Bound<'py, PyTuple>>> {
    let op = Op::Decode;
    let desc = |x: &Bound<'py, PyAny>, name: &'static str| {
        objects::describe(py, x, || Ok(name.into()), op.name(), false).ok()
    };
    let (Some(m), Some(da), Some(db), Some(st)) = (
        desc(mixed_qkv, "mixed_qkv"),
        desc(a, "a"),
        desc(b, "b"),
        desc(state, "state"),
    ) else {
        return Ok(None);
    };
    let (Some(out), Some(idx)) = (desc(output, "output"), desc(state_indices, "state_indices"))
    else {
        return Ok(None);
    };
    let Some(g) = packed_geometry(&m, &da, &db, &st, &out, &idx, heads) else {
        return Ok(None);
    };
    let scale = match scale_of(scale) {
        Some(Some(0.0)) => return Ok(None),
        Some(None) if default_scale => Some((g.k as f64).powf(-0.5) as f32),
        Some(s) => s,
        None => return Ok(None),
    };
    if !norm.is_exact_instance_of::<PyBool>() {
        return Ok(None);
    }
    if g.batch == 0 {
        return Ok(Some(PyTuple::new(py, [output, state])?));
    }
    // A_log / dt_bias as gdn takes them: float32, dense (the adapter widens a 16-bit parameter, cached)
    let param = |x: &Bound<'py, PyAny>, name: &'static str| -> PyResult<Option<Desc>> {
        match desc(x, name) {
            Some(d) if d.3 == "float32" && is_dense(&d) => Ok(Some(d)),
            _ => {
                let w = widen.call1((name, x))?;
                Ok(desc(&w, name).filter(|d| d.3 == "float32" && is_dense(d)))
            }
        }
    };
    let Some(a_log) = param(a_log, "A_log")? else {
        return Ok(None);
    };
    let Some(dt_bias) = param(dt_bias, "dt_bias")? else {
        return Ok(None);
    };
    // gates and indices are read dense; a strided one takes the adapter's path (a copy)
    if !is_dense(&da) || !is_dense(&db) || !is_dense(&idx) {
        return Ok(None);
    }
    let sv = options(op, norm, intern!(py, "k-last"), pad, None)?;
    let (h, k, hv, v) = (g.heads, g.k, g.hv, g.v);
    let [q, kk, vv] = [(0, h, k), (h * k, h, k), (2 * h * k, hv, v)]
        .map(|(at, n, d)| row_view(&m, g.batch, at, n, d));
    let [a, b] = [da, db].map(|x| {
        let shape = [g.batch, 1, hv];
        let strides = row_major(&shape);
        Desc(x.0, Dims::from_slice(&shape), strides, x.3, x.4)
    });
    let mut descs: Vec<Option<Desc>> = vec![
        Some(q),
        Some(kk),
        Some(vv),
        Some(st),
        Some(a_log),
        Some(a),
        Some(dt_bias),
        Some(b),
    ];
    // serving tensors (serving::INPUTS order): g, alpha, beta, state_indices, has_initial_state, ...
    descs.extend([None, None, None, Some(idx), None, None, None, None]);
    let c = checked(op, descs, scale, false, None, sv)?;
    launch(py, c, output, Some(state), state)
}

/// Sizes of a packed decode: B, H, K, HV, V.
struct Packed {
    batch: usize,
    heads: usize,
    k: usize,
    hv: usize,
    v: usize,
}

/// The packed decode's sizes when every tensor has the shape, rank and dtype the adapters take (their own
/// checks, which raise in Python), else None.
fn packed_geometry(
    m: &Desc,
    a: &Desc,
    b: &Desc,
    st: &Desc,
    out: &Desc,
    idx: &Desc,
    heads: Option<(usize, usize)>,
) -> Option<Packed> {
    let act16 = |d: &Desc| d.3 == "bfloat16" || d.3 == "float16";
    if m.1.len() != 2 || m.2[1] != 1 || st.1.len() != 4 || idx.1.len() != 1 || !is_dense(out) {
        return None;
    }
    let state16 = act16(st) || st.3 == "float32";
    if !(act16(m) && act16(a) && act16(b) && act16(out) && state16) {
        return None;
    }
    let (batch, width) = (m.1[0], m.1[1]);
    let (hv, v, k) = (st.1[1], st.1[2], st.1[3]);
    if heads.is_some_and(|h| h != (hv, v)) {
        return None;
    }
    if *a.1 != [batch, hv]
        || *b.1 != [batch, hv]
        || idx.1[0] != batch
        || *out.1 != [batch, 1, hv, v]
    {
        return None;
    }
    let qk = width.checked_sub(hv * v).filter(|&n| n > 0 && n % 2 == 0)?;
    if k == 0 || (qk / 2) % k != 0 {
        return None;
    }
    let heads = qk / 2 / k;
    if heads == 0 || hv % heads != 0 {
        return None;
    }
    Some(Packed {
        batch,
        heads,
        k,
        hv,
        v,
    })
}

/// The `[B, 1, n, d]` view of `n · d` elements at element `at` of each row of `m` (the strides torch gives the
/// same view: a length-1 axis gets its dense stride).
fn row_view(m: &Desc, batch: usize, at: usize, n: usize, d: usize) -> Desc {
    let inner = (n * d) as i64;
    let row = if batch == 1 { inner } else { m.2[0] };
    let bytes = m.dtype().map_or(2, |t| t.size()) as u64;
    Desc(
        m.0 + at as u64 * bytes,
        Dims::from_slice(&[batch, 1, n, d]),
        Dims::from_slice(&[row, inner, d as i64, 1]),
        m.3.clone(),
        m.4,
    )
}
