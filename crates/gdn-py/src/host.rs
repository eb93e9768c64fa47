//! Host path: CPU tensors (NumPy arrays, torch CPU tensors) run gdn-core's multithreaded `CpuBackend`, which
//! implements the definitions and every serving mode.
//!
//! First the values the shape-only validation could not see are checked: the problem is built again by
//! `Problem::from_tensors` with the real values of the integer tensors (`cu_seqlens`, pool indices,
//! `has_initial_state`, accepted counts, checkpoint row starts), which also gives the true checkpoint rows and
//! sequence lengths.
//!
//! Inputs are read in place through the validated descriptors; a row-strided pool view and q, k, v views
//! are gathered into dense copies. The backend writes its own buffers, which are then copied into the
//! caller's destinations (a strided pool row by row, an output view head row by head row). Because every
//! input view is dropped before the first destination is written, a destination may alias an input
//! (`new_state=state`, the pool of a pool call).

use crate::args::{act_strides, gdn_err, is_dense, ArgError, Checked};
use crate::desc::Desc;
use crate::serving::row_stride;
use gdn_core::cpu::CpuBackend;
use gdn_core::serving::names;
use gdn_core::{
    ActBuf, ActRef, Backend, BetaRef, DType, Data, Inputs, Op, Outputs, Problem, StateBuf,
    StateRef, Tensor, TensorMap,
};
use half::{bf16, f16};
use std::borrow::Cow;

/// A host slice over a validated, contiguous descriptor (dtype, contiguity and alignment were checked).
///
/// # Safety
/// `d` must describe a live, contiguous host array of `T` that nobody writes while the slice is alive.
unsafe fn view<'a, T>(d: &Desc) -> &'a [T] {
    if d.numel() == 0 {
        &[]
    } else {
        std::slice::from_raw_parts(d.ptr() as *const T, d.numel())
    }
}

/// The elements of a state tensor in dense row order: borrowed when dense, gathered when its rows are strided.
///
/// # Safety
/// As [`view`], for a tensor that may have a row stride (`row_stride`) and dense rows.
unsafe fn rows<'a, T: Copy>(d: &Desc) -> Cow<'a, [T]> {
    let stride = row_stride(d);
    if stride == 0 {
        return Cow::Borrowed(view(d));
    }
    let row: usize = d.shape()[1..].iter().product();
    let base = d.ptr() as *const T;
    let mut dense = Vec::with_capacity(d.numel());
    for r in 0..d.shape()[0] {
        dense.extend_from_slice(std::slice::from_raw_parts(base.add(r * stride), row));
    }
    Cow::Owned(dense)
}

/// Element offsets of the `[tokens · heads]` head rows of an activation view (q, k, v or output), in dense
/// row order. Only for descriptors that passed validation ([`crate::args::check_tensor`]).
fn act_rows(op: Op, name: &str, d: &Desc) -> Result<impl Iterator<Item = usize>, ArgError> {
    let [token, head] = act_strides(op, name, d)?;
    let shape = d.shape();
    let r = shape.len();
    let (tokens, heads): (usize, usize) = (shape[..r - 2].iter().product(), shape[r - 2]);
    Ok((0..tokens)
        .flat_map(move |t| (0..heads).map(move |h| t * token as usize + h * head as usize)))
}

/// q, k or v in dense order: borrowed when dense, gathered when a view.
///
/// # Safety
/// As [`view`], for a validated activation descriptor of `T` (dense, or a view whose rows lie in its array).
unsafe fn act<'a, T: Copy>(op: Op, name: &str, d: &Desc) -> Result<Cow<'a, [T]>, ArgError> {
    if is_dense(d) {
        return Ok(Cow::Borrowed(view(d)));
    }
    let dim = *d.shape().last().expect("rank checked");
    let base = d.ptr() as *const T;
    let mut dense = Vec::with_capacity(d.numel());
    for at in act_rows(op, name, d)? {
        dense.extend_from_slice(std::slice::from_raw_parts(base.add(at), dim));
    }
    Ok(Cow::Owned(dense))
}

/// Copies the dense output `src` into `dst`: at once when dense, head row by head row into a view.
///
/// # Safety
/// `dst` must describe a live, writable host array (dense, or a validated view whose rows lie in it and do
/// not overlap) of `src.len()` elements.
unsafe fn store_act<T: Copy>(op: Op, dst: &Desc, src: &[T]) -> Result<(), ArgError> {
    if is_dense(dst) {
        store(dst, src);
        return Ok(());
    }
    let dim = *dst.shape().last().expect("rank checked");
    let base = dst.ptr() as *mut T;
    for (at, row) in act_rows(op, "output", dst)?.zip(src.chunks_exact(dim)) {
        std::ptr::copy_nonoverlapping(row.as_ptr(), base.add(at), dim);
    }
    Ok(())
}

/// Values of an int32 or int64 tensor, as i64.
///
/// # Safety
/// As [`view`].
unsafe fn ints<'a>(d: &Desc) -> Cow<'a, [i64]> {
    match d.dtype() {
        Some(DType::I64) => Cow::Borrowed(view(d)),
        _ => Cow::Owned(view::<i32>(d).iter().map(|&x| x as i64).collect()),
    }
}

/// Copies `src` into the host array described by `dst` (same element count, checked by the caller; rows at
/// the row stride when `dst` is a strided pool view).
///
/// # Safety
/// `dst` must describe a live, writable host array of `T` with `src.len()` elements and dense rows.
unsafe fn store<T: Copy>(dst: &Desc, src: &[T]) {
    assert_eq!(dst.numel(), src.len(), "gdn: destination size mismatch");
    if src.is_empty() {
        return;
    }
    let base = dst.ptr() as *mut T;
    match row_stride(dst) {
        0 => std::ptr::copy_nonoverlapping(src.as_ptr(), base, src.len()),
        stride => {
            let row: usize = dst.shape()[1..].iter().product();
            for (r, chunk) in src.chunks_exact(row).enumerate() {
                std::ptr::copy_nonoverlapping(chunk.as_ptr(), base.add(r * stride), row);
            }
        }
    }
}

/// Typed state-like storage (state, pool, checkpoints), borrowed or gathered.
enum Rows<'a> {
    F32(Cow<'a, [f32]>),
    BF16(Cow<'a, [bf16]>),
    F16(Cow<'a, [f16]>),
}

impl Rows<'_> {
    /// # Safety
    /// As [`rows`].
    unsafe fn of(d: &Desc) -> Rows<'_> {
        match d.dtype() {
            Some(DType::BF16) => Rows::BF16(rows(d)),
            Some(DType::F16) => Rows::F16(rows(d)),
            _ => Rows::F32(rows(d)),
        }
    }

    fn as_ref(&self) -> StateRef<'_> {
        match self {
            Rows::F32(v) => StateRef::F32(v),
            Rows::BF16(v) => StateRef::BF16(v),
            Rows::F16(v) => StateRef::F16(v),
        }
    }
}

/// A 16-bit activation tensor (q, k, v, a, b) in dense order, borrowed or gathered.
enum Act<'a> {
    BF16(Cow<'a, [bf16]>),
    F16(Cow<'a, [f16]>),
}

impl Act<'_> {
    /// # Safety
    /// As [`act`], for a validated bf16 or fp16 descriptor.
    unsafe fn of<'a>(op: Op, name: &str, d: &Desc) -> Result<Act<'a>, ArgError> {
        Ok(match d.dtype() {
            Some(DType::F16) => Act::F16(act(op, name, d)?),
            _ => Act::BF16(act(op, name, d)?),
        })
    }

    fn as_ref(&self) -> ActRef<'_> {
        match self {
            Act::BF16(v) => ActRef::BF16(v),
            Act::F16(v) => ActRef::F16(v),
        }
    }
}

/// The typed view of an optional activation (empty when absent).
fn act_ref<'a>(x: &'a Option<Act<'_>>) -> ActRef<'a> {
    x.as_ref().map(Act::as_ref).unwrap_or_default()
}

/// Copies a state-like buffer into the host array described by `dst`.
///
/// # Safety
/// As [`store`].
unsafe fn store_state(dst: &Desc, src: &StateBuf) {
    match src {
        StateBuf::F32(s) => store(dst, s),
        StateBuf::BF16(s) => store(dst, s),
        StateBuf::F16(s) => store(dst, s),
    }
}

/// The problem validated again with the real values of the integer tensors (the memoised validation saw
/// placeholders); the floating-point tensors are shape-only stand-ins, as in the first validation.
fn with_values(c: &Checked) -> Result<Problem, ArgError> {
    let mut tensors = TensorMap::new();
    for (name, d) in &c.inputs {
        // SAFETY: validated host descriptors of these dtypes, alive for the call.
        let data = unsafe {
            match d.dtype() {
                Some(DType::I32) => Data::I32(view::<i32>(d).to_vec()),
                Some(DType::I64) => Data::I64(view::<i64>(d).to_vec()),
                Some(DType::BF16) => Data::BF16(Vec::new()),
                Some(DType::F16) => Data::F16(Vec::new()),
                _ => Data::F32(Vec::new()),
            }
        };
        let shape = d.shape().to_vec();
        tensors.insert((*name).to_string(), Tensor { shape, data });
    }
    let op = c.problem.def.op;
    Problem::from_tensors(&c.problem.def, &tensors, &c.opts).map_err(|e| gdn_err(op, e))
}

/// Runs a validated host problem, writing `output`, the state output (when given) and the buffers the call
/// fills in place (MTP's intermediate states, prefill checkpoints). Checks the integer tensors' values first.
pub fn run(c: &Checked, output: &Desc, state_out: Option<&Desc>) -> Result<(), ArgError> {
    let p = with_values(c)?;
    let op = p.def.op;
    // SAFETY: every descriptor was validated (dtype, host, contiguous or a row-strided pool, aligned, shape)
    // and the Python caller keeps the arrays alive for the whole call; the views are dropped before any
    // destination is written.
    let out = unsafe {
        let fv = |n: &str| c.get(n).map_or(&[][..], |d| view::<f32>(d));
        // q, k, v gathered when views; a, b dense (validated)
        let act_of = |n: &str| c.get(n).map(|d| Act::of(op, n, d)).transpose();
        let (q, k, v) = (act_of("q")?, act_of("k")?, act_of("v")?);
        let (a, b) = (act_of("a")?, act_of("b")?);
        let state = c.get(p.def.state_input()).map(|d| Rows::of(d));
        let checkpoints = c.get(names::CHECKPOINTS).map(|d| Rows::of(d));
        let pool_indices = if p.pool {
            c.get(names::STATE_INDICES).map(|d| ints(d))
        } else if p.spec_slots {
            c.get("initial_state_indices").map(|d| ints(d))
        } else {
            None
        };
        let x = Inputs {
            q: act_ref(&q),
            k: act_ref(&k),
            v: act_ref(&v),
            a: act_ref(&a),
            b: act_ref(&b),
            a_log: fv("A_log"),
            dt_bias: fv("dt_bias"),
            state: state.as_ref().map(Rows::as_ref),
            cu_seqlens: match op {
                Op::Prefill => ints(c.get("cu_seqlens").expect("validated")),
                _ => Cow::Owned(
                    (0..=p.dims.num_seqs)
                        .map(|i| (i * p.dims.seq_len) as i64)
                        .collect(),
                ),
            },
            state_indices: c.get("initial_state_indices").map(|d| view::<i32>(d)),
            intermediate: c.get("intermediate_states_buffer").map(|d| view::<f32>(d)),
            gate: c
                .get(names::G)
                .or_else(|| c.get(names::ALPHA))
                .map(|d| view::<f32>(d)),
            beta: c.get(names::BETA).map(|d| match d.dtype() {
                Some(DType::BF16) => BetaRef::BF16(view(d)),
                Some(DType::F16) => BetaRef::F16(view(d)),
                _ => BetaRef::F32(view(d)),
            }),
            pool_indices,
            has_initial_state: c
                .get(names::HAS_INITIAL_STATE)
                .map(|d| view::<i32>(d).iter().map(|&f| f != 0).collect()),
            num_accepted: c.get(names::NUM_ACCEPTED).map(|d| view::<i32>(d)),
            checkpoint_starts: c.get(names::CHECKPOINT_STARTS).map(|d| ints(d)),
            checkpoints: checkpoints.as_ref().map(Rows::as_ref),
        };
        // The backend writes every element of output and state; the intermediate and checkpoint buffers start
        // as the caller's, so that rows the call does not write keep their values.
        let n_state: usize = p.state_shape().iter().product();
        let mut out = Outputs {
            output: ActBuf::filled(p.act_dtype, p.output_shape().iter().product(), 0.0),
            state: StateBuf::filled(p.state_out_dtype(), n_state, 0.0),
            intermediate: x.intermediate.map(<[f32]>::to_vec),
            checkpoints: x.checkpoints.map(StateBuf::copy_of),
        };
        CpuBackend
            .run(&p, &x, &mut out)
            .map_err(|e| gdn_err(op, e))?;
        out
    };
    // SAFETY: destinations were validated (host, dtype and exact shape; contiguous, or the pool itself).
    unsafe {
        match &out.output {
            ActBuf::BF16(o) => store_act(op, output, o)?,
            ActBuf::F16(o) => store_act(op, output, o)?,
        }
        if let Some(d) = state_out {
            store_state(d, &out.state);
        }
        if let (Some(buf), Some(d)) = (&out.intermediate, c.get("intermediate_states_buffer")) {
            store(d, buf);
        }
        if let (Some(buf), Some(d)) = (&out.checkpoints, c.get(names::CHECKPOINTS)) {
            store_state(d, buf);
        }
    }
    Ok(())
}
