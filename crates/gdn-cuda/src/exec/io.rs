//! The device side of one problem: its inputs uploaded, its destinations allocated, and one call enqueued on
//! a stream. The backend (`run`) and the timing tiers (`bench`) share these.
//!
//! With `Problem::act_views` q, k and v are placed as views into one shared buffer and the output is a view
//! into a buffer of its own (the layout of an engine's fused projection): every element outside the rows
//! holds [`GUARD`]. A kernel that reads outside its rows reads NaN; one that writes outside them is caught when
//! the output is read back ([`OutBuf::read`]).
//!
//! Activations (q, k, v, a, b, output) are bf16 or fp16 (`Problem::act_dtype`) and states f32, bf16 or fp16:
//! the device buffers hold the host elements as they are; views are built and read as raw 16-bit words.

use crate::abi::args::{Args, DevicePtrs};
use crate::exec::backend_err as be;
use crate::exec::kernel_set::KernelSet;
use crate::exec::launch::LaunchInfo;
use crate::runtime::context::Stream;
use crate::runtime::memory::DeviceBuf;
use gdn_core::problem::View;
use gdn_core::{ActBuf, ActRef, BetaRef, Inputs, Op, Problem, Result, StateRef};
use half::slice::HalfFloatSliceExt;

/// The 16-bit pattern in the gaps of activation views: a NaN in bf16 and in fp16, whose payload no kernel
/// produces.
pub(crate) const GUARD: u16 = 0x7fa1;

/// The raw 16-bit words of an activation tensor.
fn words<'a>(x: ActRef<'a>) -> &'a [u16] {
    match x {
        ActRef::BF16(v) => v.reinterpret_cast(),
        ActRef::F16(v) => v.reinterpret_cast(),
    }
}

/// Uploads a state-like tensor as it is.
fn upload_state(s: StateRef, stream: Stream) -> Result<DeviceBuf> {
    match s {
        StateRef::F32(v) => DeviceBuf::upload(v, stream),
        StateRef::BF16(v) => DeviceBuf::upload(v, stream),
        StateRef::F16(v) => DeviceBuf::upload(v, stream),
    }
    .map_err(be)
}

/// Reads a device buffer into a state-like host buffer of its dtype.
pub(crate) fn read_state(
    src: &DeviceBuf,
    dst: &mut gdn_core::StateBuf,
    stream: Stream,
) -> std::result::Result<(), String> {
    match dst {
        gdn_core::StateBuf::F32(d) => src.read(d, stream),
        gdn_core::StateBuf::BF16(d) => src.read(d, stream),
        gdn_core::StateBuf::F16(d) => src.read(d, stream),
    }
}

/// A workspace handed to a launch: device address and bytes (0, 0 = none).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Workspace {
    pub ptr: u64,
    pub bytes: usize,
}

/// Device copies of one input set.
pub(crate) struct DeviceInputs {
    /// The memory of q, k, v (held, not read): three dense buffers, or one holding the three views
    /// (`Problem::act_views`).
    _qkv: Vec<DeviceBuf>,
    /// Device addresses of q, k, v.
    pub qkv_ptrs: [u64; 3],
    pub a: DeviceBuf,
    pub b: DeviceBuf,
    pub a_log: DeviceBuf,
    pub dt_bias: DeviceBuf,
    pub state: Option<DeviceBuf>,
    pub cu_seqlens: Option<DeviceBuf>,
    pub indices: Option<DeviceBuf>,
    /// Serving tensors, as given (dtypes per the problem).
    pub gate: Option<DeviceBuf>,
    pub beta: Option<DeviceBuf>,
    pub pool_indices: Option<DeviceBuf>,
    pub has_initial: Option<DeviceBuf>,
    pub num_accepted: Option<DeviceBuf>,
    /// i64 [N+1].
    pub checkpoint_starts: Option<DeviceBuf>,
}

/// The output's device buffer: dense `[tokens, HV, D]`, or a view into a larger buffer whose gaps hold
/// [`GUARD`].
pub(crate) struct OutBuf {
    buf: DeviceBuf,
    /// The view and its (tokens, heads, head size), or None: dense.
    view: Option<(View, [usize; 3])>,
}

impl OutBuf {
    /// The output's device address (the view's first row).
    pub fn ptr(&self) -> u64 {
        match self.view {
            Some((v, _)) if self.buf.ptr != 0 => self.buf.ptr + 2 * v.offset as u64,
            _ => self.buf.ptr,
        }
    }

    /// Copies the output into `out` (dense `[tokens, HV, D]`, the activation dtype) on `stream`. A view is
    /// gathered row by row, after waiting for the stream, and its gaps must still hold [`GUARD`]: an element
    /// written there is an error naming the first one.
    pub fn read(&self, out: &mut ActBuf, stream: Stream) -> std::result::Result<(), String> {
        let out: &mut [u16] = match out {
            ActBuf::BF16(v) => v.reinterpret_cast_mut(),
            ActBuf::F16(v) => v.reinterpret_cast_mut(),
        };
        let Some((v, [tokens, heads, d])) = self.view else {
            return self.buf.read(out, stream);
        };
        let mut host = vec![0u16; self.buf.bytes / 2];
        self.buf.read(&mut host, stream)?;
        // SAFETY: our stream; the copy into `host` must finish before it is read.
        unsafe { cudarc::driver::result::stream::synchronize(stream.0) }.map_err(|e| {
            crate::runtime::context::drv("cuStreamSynchronize (a kernel failed)", e)
        })?;
        gather(&mut host, out, v, [tokens, heads, d])
    }
}

/// Copies the rows of output view `v` in `buf` (a host copy of its buffer) into dense `out`, then checks that
/// every other element of `buf` still holds [`GUARD`] (the rows are disjoint: validated).
fn gather(
    buf: &mut [u16],
    out: &mut [u16],
    v: View,
    [tokens, heads, d]: [usize; 3],
) -> std::result::Result<(), String> {
    for t in 0..tokens {
        for h in 0..heads {
            let (src, dst) = (v.row(t, h), (t * heads + h) * d);
            out[dst..dst + d].copy_from_slice(&buf[src..src + d]);
            buf[src..src + d].fill(GUARD);
        }
    }
    let touched = |x: &u16| *x != GUARD;
    if let Some(first) = buf.iter().position(touched) {
        let written = buf.iter().filter(|x| touched(x)).count();
        return Err(format!(
            "output: {written} elements outside the rows of the output view were written (the first at element \
             {first} of its buffer)"
        ));
    }
    Ok(())
}

/// Device destinations of a call.
pub(crate) struct DeviceOutputs {
    pub out: OutBuf,
    /// new_state, when it is not written in place.
    pub new_state: Option<DeviceBuf>,
    pub intermediate: Option<DeviceBuf>,
    /// The caller's checkpoint buffer (rows not written keep its values).
    pub checkpoints: Option<DeviceBuf>,
}

fn state_bytes(p: &Problem) -> usize {
    p.state_shape().iter().product::<usize>() * p.state_out_dtype().size()
}

impl DeviceInputs {
    pub(crate) fn upload(p: &Problem, x: &Inputs, stream: Stream) -> Result<Self> {
        let up = |d: ActRef| DeviceBuf::upload(words(d), stream).map_err(be);
        let upw = |d: &[u16]| DeviceBuf::upload(d, stream).map_err(be);
        let upf = |d: &[f32]| DeviceBuf::upload(d, stream).map_err(be);
        let upi = |d: &[i64]| DeviceBuf::upload(d, stream).map_err(be);
        let upi32 = |d: &[i32]| DeviceBuf::upload(d, stream).map_err(be);
        let state = x.state.map(|s| upload_state(s, stream)).transpose()?;
        let (qkv, qkv_ptrs) = match p.act_views {
            None => {
                let bufs = vec![up(x.q)?, up(x.k)?, up(x.v)?];
                let ptrs = [bufs[0].ptr, bufs[1].ptr, bufs[2].ptr];
                (bufs, ptrs)
            }
            Some(av) => {
                let h = &p.def.heads;
                let (t, d) = (p.dims.total_tokens, h.head_size);
                let parts = [
                    (av.q, words(x.q), h.num_q_heads),
                    (av.k, words(x.k), h.num_q_heads),
                    (av.v, words(x.v), h.num_v_heads),
                ];
                let span = parts.iter().map(|(v, _, n)| v.span(t, *n, d)).max();
                let mut host = vec![GUARD; span.unwrap_or(0)];
                for (view, dense, n) in parts {
                    scatter(&mut host, dense, view, t, n, d);
                }
                let buf = upw(&host)?;
                let at = |v: View| {
                    if buf.ptr == 0 {
                        0
                    } else {
                        buf.ptr + 2 * v.offset as u64
                    }
                };
                let ptrs = [at(av.q), at(av.k), at(av.v)];
                (vec![buf], ptrs)
            }
        };
        Ok(DeviceInputs {
            _qkv: qkv,
            qkv_ptrs,
            a: up(x.a)?,
            b: up(x.b)?,
            a_log: upf(x.a_log)?,
            dt_bias: upf(x.dt_bias)?,
            state,
            // int64 on the device whatever the caller's dtype (the int32 path is the bindings')
            cu_seqlens: if p.def.op == Op::Prefill {
                Some(upi(&x.cu_seqlens)?)
            } else {
                None
            },
            indices: x.state_indices.map(upi32).transpose()?,
            gate: x.gate.map(upf).transpose()?,
            beta: match x.beta {
                Some(BetaRef::F32(v)) => Some(upf(v)?),
                Some(BetaRef::BF16(v)) => Some(up(ActRef::BF16(v))?),
                Some(BetaRef::F16(v)) => Some(up(ActRef::F16(v))?),
                None => None,
            },
            // int64 on the device (index_dtype is reset to I64 by `enqueue`)
            pool_indices: match &x.pool_indices {
                Some(i) if p.pool => Some(upi(i)?),
                _ => None,
            },
            has_initial: match &x.has_initial_state {
                Some(f) => Some(upi32(&f.iter().map(|&b| i32::from(b)).collect::<Vec<_>>())?),
                None => None,
            },
            num_accepted: x.num_accepted.map(upi32).transpose()?,
            checkpoint_starts: x.checkpoint_starts.as_deref().map(upi).transpose()?,
        })
    }
}

impl DeviceOutputs {
    /// Destinations for `p`; `intermediate` is the caller's buffer (rows not written keep its values).
    pub(crate) fn alloc(
        p: &Problem,
        intermediate: Option<&[f32]>,
        checkpoints: Option<StateRef>,
        stream: Stream,
    ) -> Result<Self> {
        let n_out = p.output_shape().iter().product::<usize>();
        let in_place = p.state_in_place();
        let out = match p.act_views {
            None => OutBuf {
                buf: DeviceBuf::alloc(n_out * 2).map_err(be)?,
                view: None,
            },
            Some(av) => {
                let h = &p.def.heads;
                let dims = [p.dims.total_tokens, h.num_v_heads, h.head_size];
                let span = av.out.span(dims[0], dims[1], dims[2]);
                let buf = DeviceBuf::upload(&vec![GUARD; span], stream).map_err(be)?;
                OutBuf {
                    buf,
                    view: Some((av.out, dims)),
                }
            }
        };
        Ok(DeviceOutputs {
            out,
            new_state: if in_place {
                None
            } else {
                Some(DeviceBuf::alloc(state_bytes(p)).map_err(be)?)
            },
            intermediate: match intermediate {
                Some(buf) if p.intermediate => Some(DeviceBuf::upload(buf, stream).map_err(be)?),
                _ => None,
            },
            checkpoints: checkpoints.map(|c| upload_state(c, stream)).transpose()?,
        })
    }
}

/// Writes dense `[tokens, heads, d]` rows into `buf` at the places `view` gives them.
fn scatter(buf: &mut [u16], dense: &[u16], view: View, tokens: usize, heads: usize, d: usize) {
    for t in 0..tokens {
        for h in 0..heads {
            let (src, dst) = ((t * heads + h) * d, view.row(t, h));
            buf[dst..dst + d].copy_from_slice(&dense[src..src + d]);
        }
    }
}

fn ptr(b: &Option<DeviceBuf>) -> u64 {
    b.as_ref().map_or(0, |b| b.ptr)
}

/// Enqueues one call of `p` with device inputs `i` into destinations `o` on `stream`.
///
/// # Safety
/// The buffers were sized for `p`; `stream` belongs to `kernels`' context.
/// `ws` is the workspace the call's plan needs (`CudaBackend::workspace_for(p, force)`); `force` is the
/// prefill override.
pub(crate) unsafe fn enqueue(
    kernels: &KernelSet,
    p: &Problem,
    i: &DeviceInputs,
    o: &DeviceOutputs,
    ws: Workspace,
    force: Option<&str>,
    stream: Stream,
) -> Result<LaunchInfo> {
    let [q, k, v] = i.qkv_ptrs;
    let ptrs = DevicePtrs {
        q,
        k,
        v,
        a: i.a.ptr,
        b: i.b.ptr,
        a_log: i.a_log.ptr,
        dt_bias: i.dt_bias.ptr,
        state: ptr(&i.state),
        // pools (decode/prefill) are updated in place; MTP picks its destination in Args::for_problem
        new_state: if p.pool {
            ptr(&i.state)
        } else {
            ptr(&o.new_state)
        },
        intermediate: ptr(&o.intermediate),
        out: o.out.ptr(),
        state_indices: ptr(&i.indices),
        cu_seqlens: ptr(&i.cu_seqlens),
        workspace: ws.ptr,
        workspace_bytes: ws.bytes,
        gate: ptr(&i.gate),
        beta: ptr(&i.beta),
        pool_indices: ptr(&i.pool_indices),
        has_initial: ptr(&i.has_initial),
        num_accepted: ptr(&i.num_accepted),
        checkpoints: ptr(&o.checkpoints),
        checkpoint_starts: ptr(&i.checkpoint_starts),
        checkpoint_starts_i32: false,
        state_row_stride: 0,
    };
    // q, k, v and the output at their views' places (`act_views`: `ServingArgs::act_strides`)
    let mut args = Args::for_problem(p, &ptrs);
    // the uploads above are int64 whatever the caller's dtypes
    let sv = args.serving_mut();
    sv.index_i64 = true;
    sv.cu_i32 = false;
    match args {
        Args::Prefill(a) => kernels.launch_prefill_with(&a, stream.0, force),
        Args::Recurrent(a) => kernels.launch_recurrent(&a, stream.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Scattered inputs and a gathered output round-trip through a view; a write into a gap is reported.
    #[test]
    fn views_scatter_and_gather() {
        let (tokens, heads, d) = (3, 2, 4);
        let dense: Vec<u16> = (0..tokens * heads * d)
            .map(|i| half::bf16::from_f32(i as f32).to_bits())
            .collect();
        let v = View {
            offset: 8,
            token: 16,
            head: 5,
        };
        let mut buf = vec![GUARD; v.span(tokens, heads, d) + 3];
        scatter(&mut buf, &dense, v, tokens, heads, d);
        assert_eq!(buf[8..12], dense[0..4]);
        assert_eq!(buf[8 + 16 + 5..8 + 16 + 9], dense[12..16]);
        let mut out = vec![0u16; dense.len()];
        gather(&mut buf.clone(), &mut out, v, [tokens, heads, d]).unwrap();
        assert_eq!(out, dense);
        buf[12] = 0; // between head 0 and head 1 of token 0
        let e = gather(&mut buf, &mut out, v, [tokens, heads, d]).unwrap_err();
        assert!(e.contains("1 elements") && e.contains("element 12"), "{e}");
    }
}
