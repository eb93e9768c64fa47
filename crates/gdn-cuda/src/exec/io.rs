//! The device side of one problem: its inputs uploaded, its destinations allocated, and one call enqueued on
//! a stream. The backend (`run`) and the timing tiers (`bench`) share these.

use crate::abi::args::{Args, DevicePtrs};
use crate::exec::backend_err as be;
use crate::exec::kernel_set::KernelSet;
use crate::exec::launch::LaunchInfo;
use crate::runtime::context::Stream;
use crate::runtime::memory::DeviceBuf;
use gdn_core::{Inputs, Op, Problem, Result, StateRef};
use half::bf16;

/// A workspace handed to a launch: device address and bytes (0, 0 = none).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Workspace {
    pub ptr: u64,
    pub bytes: usize,
}

/// Device copies of one input set.
pub(crate) struct DeviceInputs {
    pub q: DeviceBuf,
    pub k: DeviceBuf,
    pub v: DeviceBuf,
    pub a: DeviceBuf,
    pub b: DeviceBuf,
    pub a_log: DeviceBuf,
    pub dt_bias: DeviceBuf,
    pub state: Option<DeviceBuf>,
    pub cu_seqlens: Option<DeviceBuf>,
    pub indices: Option<DeviceBuf>,
}

/// Device destinations of a call.
pub(crate) struct DeviceOutputs {
    pub out: DeviceBuf,
    /// new_state, when it is not written in place.
    pub new_state: Option<DeviceBuf>,
    pub intermediate: Option<DeviceBuf>,
}

fn state_bytes(p: &Problem) -> usize {
    p.state_shape().iter().product::<usize>() * p.state_out_dtype().size()
}

impl DeviceInputs {
    pub(crate) fn upload(p: &Problem, x: &Inputs, stream: Stream) -> Result<Self> {
        let up = |d: &[bf16]| DeviceBuf::upload(d, stream).map_err(be);
        let upf = |d: &[f32]| DeviceBuf::upload(d, stream).map_err(be);
        let state = match x.state {
            Some(StateRef::F32(s)) => Some(upf(s)?),
            Some(StateRef::BF16(s)) => Some(up(s)?),
            None => None,
        };
        Ok(DeviceInputs {
            q: up(x.q)?,
            k: up(x.k)?,
            v: up(x.v)?,
            a: up(x.a)?,
            b: up(x.b)?,
            a_log: upf(x.a_log)?,
            dt_bias: upf(x.dt_bias)?,
            state,
            cu_seqlens: if p.def.op == Op::Prefill {
                Some(DeviceBuf::upload(&x.cu_seqlens, stream).map_err(be)?)
            } else {
                None
            },
            indices: match x.state_indices {
                Some(i) => Some(DeviceBuf::upload(i, stream).map_err(be)?),
                None => None,
            },
        })
    }
}

impl DeviceOutputs {
    /// Destinations for `p`; `intermediate` is the caller's buffer (rows not written keep its values).
    pub(crate) fn alloc(p: &Problem, intermediate: Option<&[f32]>, stream: Stream) -> Result<Self> {
        let n_out = p.output_shape().iter().product::<usize>();
        let in_place = p.def.op == Op::Mtp;
        Ok(DeviceOutputs {
            out: DeviceBuf::alloc(n_out * 2).map_err(be)?,
            new_state: if in_place {
                None
            } else {
                Some(DeviceBuf::alloc(state_bytes(p)).map_err(be)?)
            },
            intermediate: match intermediate {
                Some(buf) if p.intermediate => Some(DeviceBuf::upload(buf, stream).map_err(be)?),
                _ => None,
            },
        })
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
    let ptrs = DevicePtrs {
        q: i.q.ptr,
        k: i.k.ptr,
        v: i.v.ptr,
        a: i.a.ptr,
        b: i.b.ptr,
        a_log: i.a_log.ptr,
        dt_bias: i.dt_bias.ptr,
        state: ptr(&i.state),
        new_state: ptr(&o.new_state),
        intermediate: ptr(&o.intermediate),
        out: o.out.ptr,
        state_indices: ptr(&i.indices),
        cu_seqlens: ptr(&i.cu_seqlens),
        workspace: ws.ptr,
        workspace_bytes: ws.bytes,
    };
    match Args::for_problem(p, &ptrs) {
        Args::Prefill(a) => kernels.launch_prefill_with(&a, stream.0, force),
        Args::Recurrent(a) => kernels.launch_recurrent(&a, stream.0),
    }
}
