//! The device side of one problem: its inputs uploaded, its destinations allocated, and one call enqueued on
//! a stream. The backend (`run`) and the timing tiers (`bench`) share these.

use crate::abi::args::{Args, DevicePtrs};
use crate::exec::backend_err as be;
use crate::exec::kernel_set::KernelSet;
use crate::exec::launch::LaunchInfo;
use crate::runtime::context::Stream;
use crate::runtime::memory::DeviceBuf;
use gdn_core::{BetaRef, Inputs, Op, Problem, Result, StateRef};
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
    /// Serving tensors, as given (dtypes per the problem).
    pub gate: Option<DeviceBuf>,
    pub beta: Option<DeviceBuf>,
    pub pool_indices: Option<DeviceBuf>,
    pub has_initial: Option<DeviceBuf>,
    pub num_accepted: Option<DeviceBuf>,
    /// i64 [N+1].
    pub checkpoint_starts: Option<DeviceBuf>,
}

/// Device destinations of a call.
pub(crate) struct DeviceOutputs {
    pub out: DeviceBuf,
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
        let up = |d: &[bf16]| DeviceBuf::upload(d, stream).map_err(be);
        let upf = |d: &[f32]| DeviceBuf::upload(d, stream).map_err(be);
        let upi = |d: &[i64]| DeviceBuf::upload(d, stream).map_err(be);
        let upi32 = |d: &[i32]| DeviceBuf::upload(d, stream).map_err(be);
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
                Some(BetaRef::BF16(v)) => Some(up(v)?),
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
            checkpoints: match checkpoints {
                Some(StateRef::F32(v)) => Some(DeviceBuf::upload(v, stream).map_err(be)?),
                Some(StateRef::BF16(v)) => Some(DeviceBuf::upload(v, stream).map_err(be)?),
                None => None,
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
        // pools (decode/prefill) are updated in place; MTP picks its destination in Args::for_problem
        new_state: if p.pool {
            ptr(&i.state)
        } else {
            ptr(&o.new_state)
        },
        intermediate: ptr(&o.intermediate),
        out: o.out.ptr,
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
