//! Host path: CPU tensors (NumPy arrays, torch CPU tensors) run gdn-core's `CpuBackend`.
//!
//! Inputs are read in place through the validated descriptors (no copy); the backend writes its own output
//! buffers, which are then copied into the caller's destinations. Because every input view is dropped before
//! the first destination is written, a destination may alias an input (`new_state=state`, serving-mode pool).

use crate::args::{gdn_err, ArgError, Checked};
use crate::desc::Desc;
use gdn_core::cpu::CpuBackend;
use gdn_core::{Backend, Inputs, Op, Outputs, StateBuf, StateRef};
use half::bf16;
use std::borrow::Cow;

/// A host slice over a validated descriptor (dtype, contiguity and alignment were checked).
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

/// Copies `src` into the host array described by `dst` (same element count, checked by the caller).
///
/// # Safety
/// `dst` must describe a live, writable, contiguous host array of `T` with `src.len()` elements.
unsafe fn store<T: Copy>(dst: &Desc, src: &[T]) {
    assert_eq!(dst.numel(), src.len(), "gdn: destination size mismatch");
    if !src.is_empty() {
        std::ptr::copy_nonoverlapping(src.as_ptr(), dst.ptr() as *mut T, src.len());
    }
}

/// Runs a validated host problem, writing `output`, the state output (when given) and, for MTP, the
/// intermediate-state buffer in place. Checks the values of `cu_seqlens` and pool indices first.
pub fn run(c: &Checked, output: &Desc, state_out: Option<&Desc>) -> Result<(), ArgError> {
    let p = &c.problem;
    let op = p.def.op;
    // SAFETY: every descriptor was validated (dtype, host, contiguous, aligned, shape) and the Python caller
    // keeps the arrays alive for the whole call; the views are dropped before any destination is written.
    let out = unsafe {
        let bfv = |n: &str| view::<bf16>(c.get(n).expect("validated"));
        let fv = |n: &str| view::<f32>(c.get(n).expect("validated"));
        let state = c.get(p.def.state_input()).map(|d| match d.dtype() {
            Some(gdn_core::DType::BF16) => StateRef::BF16(view(d)),
            _ => StateRef::F32(view(d)),
        });
        let cu: Cow<[i64]> = match op {
            Op::Prefill => Cow::Borrowed(view(c.get("cu_seqlens").expect("validated"))),
            _ => Cow::Owned(
                (0..=p.dims.num_seqs)
                    .map(|i| (i * p.dims.seq_len) as i64)
                    .collect(),
            ),
        };
        let indices = c.get("initial_state_indices").map(|d| view::<i32>(d));
        let x = Inputs {
            q: bfv("q"),
            k: bfv("k"),
            v: bfv("v"),
            a: bfv("a"),
            b: bfv("b"),
            a_log: fv("A_log"),
            dt_bias: fv("dt_bias"),
            state,
            cu_seqlens: cu,
            state_indices: indices,
            intermediate: c.get("intermediate_states_buffer").map(|d| view::<f32>(d)),
            ..Default::default()
        };
        let cu_check = (op == Op::Prefill).then(|| &x.cu_seqlens[..]);
        p.check_values(cu_check, x.state_indices)
            .map_err(|e| gdn_err(op, e))?;
        let mut out = Outputs::poisoned(p, &x);
        CpuBackend
            .run(p, &x, &mut out)
            .map_err(|e| gdn_err(op, e))?;
        out
    };
    // SAFETY: destinations were validated (host, contiguous, dtype and exact shape) by the caller.
    unsafe {
        store(output, &out.output);
        if let Some(d) = state_out {
            match &out.state {
                StateBuf::F32(s) => store(d, s),
                StateBuf::BF16(s) => store(d, s),
            }
        }
        if let (Some(buf), Some(d)) = (&out.intermediate, c.get("intermediate_states_buffer")) {
            store(d, buf);
        }
    }
    Ok(())
}
