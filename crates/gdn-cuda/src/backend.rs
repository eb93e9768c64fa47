//! `CudaBackend`: gdn_core's `Backend` (host → device, one launch, device → host) and `Timed`.
//!
//! One call of a problem = the kernel launch(es) of its plan through `launch.rs` on the backend's stream (one
//! kernel; prep + walk for the chunk64 prefill plan). How each operation maps its tensors to kernel pointers:
//! * decode: `state` (or NULL) → `new_state` (a separate buffer; every row written).
//! * prefill: `state` (or NULL) → `new_state`; `cu_seqlens` uploaded as int64. The chunk64 plan's workspace
//!   is one device buffer cached by the backend: grown (never shrunk) when a call needs more, so a warm
//!   backend allocates nothing per call; it is sized before any timed or captured region.
//! * MTP, definition mode: the pool is read, not written (`new_state` NULL); `final_state` is the input
//!   pool, copied on the host; the intermediate buffer is uploaded and the kernel overwrites its rows.
//! * MTP, serving mode: in place — `new_state == state` (the pool), index -1 = padding; `final_state` is
//!   the pool read back.

use crate::bench;
use crate::context::{Gpu, Stream};
use crate::launch::{KernelSet, LaunchInfo, PrefillArgs, RecurrentArgs};
use crate::memory::DeviceBuf;
use crate::policy::ForcedPlan;
use crate::registry::StateDtype;
use gdn_core::{
    Backend, DType, GdnError, Inputs, MtpMode, Op, Outputs, Problem, Result, StateBuf, StateRef,
    TierSamples, Timed, TimingConfig,
};
use half::bf16;
use std::sync::Mutex;

pub(crate) fn be(e: String) -> GdnError {
    GdnError::backend("cuda", e)
}

/// The CUDA backend on device 0.
pub struct CudaBackend {
    /// The chunk64 prefill workspace, grow-only (locked inside `lock`). First field: fields drop in order,
    /// and it must be freed while `gpu` still holds the context (memcheck --leak-check caught the reverse).
    workspace: Mutex<DeviceBuf>,
    pub(crate) gpu: Gpu,
    pub(crate) kernels: KernelSet,
    /// Serialises use of the backend's stream and buffers.
    pub(crate) lock: Mutex<()>,
    /// The copy kernel of the bandwidth floor (`bench.rs`), loaded on first use.
    pub(crate) copy: std::sync::OnceLock<std::result::Result<bench::CopyKernel, String>>,
}

/// A workspace handed to a launch: device address and bytes (0, 0 = none).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Workspace {
    pub ptr: u64,
    pub bytes: usize,
}

impl CudaBackend {
    /// Opens device 0 (driver, device, Hopper check, NVRTC) and prepares its kernels (compiled lazily,
    /// from the disk cache when possible).
    pub fn open() -> Result<CudaBackend> {
        let gpu = Gpu::open(0).map_err(be)?;
        crate::nvrtc::version().map_err(be)?;
        let kernels = KernelSet::new(gpu.info.caps(), gpu.arch)?;
        Ok(CudaBackend {
            gpu,
            kernels,
            lock: Mutex::new(()),
            copy: std::sync::OnceLock::new(),
            workspace: Mutex::new(DeviceBuf { ptr: 0, bytes: 0 }),
        })
    }

    pub fn gpu(&self) -> &Gpu {
        &self.gpu
    }

    pub fn kernels(&self) -> &KernelSet {
        &self.kernels
    }

    /// Which kernel(s) (and launch configurations) this backend would use for `p` (with `GDN_KERNEL`).
    pub fn plan(&self, p: &Problem) -> Result<LaunchInfo> {
        Ok(self.kernels.describe(&crate::shape_of(p))?)
    }

    /// `plan` with an explicit prefill override (`None`: automatic, ignoring `GDN_KERNEL`).
    pub fn plan_with(&self, p: &Problem, force: Option<&str>) -> Result<LaunchInfo> {
        let shape = crate::shape_of(p);
        if p.def.op == Op::Prefill {
            Ok(LaunchInfo::prefill(
                &self.kernels.prefill_plan_with(&shape, force)?,
            ))
        } else {
            self.plan(p)
        }
    }

    /// The workspace for a call of `p` with prefill override `force`: the cached buffer, grown first when
    /// it is too small (after a stream sync, so no queued kernel still uses the old one). Call with `lock`
    /// held, outside any stream capture.
    pub(crate) fn workspace_for(&self, p: &Problem, force: Option<&str>) -> Result<Workspace> {
        let need = self.plan_with(p, force)?.workspace_bytes;
        if need == 0 {
            return Ok(Workspace::default());
        }
        let need = usize::try_from(need)
            .map_err(|_| be(format!("workspace of {need} bytes does not fit this host")))?;
        let mut buf = self.workspace.lock().unwrap_or_else(|e| e.into_inner());
        if buf.bytes < need {
            self.gpu.sync().map_err(be)?;
            *buf = DeviceBuf { ptr: 0, bytes: 0 }; // free the old one first
            *buf = DeviceBuf::alloc(need).map_err(be)?;
        }
        Ok(Workspace {
            ptr: buf.ptr,
            bytes: buf.bytes,
        })
    }

    /// Runs `p` with an explicit prefill override (`None`: automatic, ignoring `GDN_KERNEL`); decode and
    /// MTP ignore `force`. Returns what was launched.
    pub fn run_with(
        &self,
        p: &Problem,
        x: &Inputs,
        out: &mut Outputs,
        force: Option<&str>,
    ) -> Result<LaunchInfo> {
        let _g = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        self.gpu.bind().map_err(be)?;
        let s = self.gpu.stream();
        let ws = self.workspace_for(p, force)?;
        let di = DeviceInputs::upload(p, x, s)?;
        let inter_src = out.intermediate.as_deref().or(x.intermediate);
        let dout = DeviceOutputs::alloc(p, inter_src, s)?;
        // SAFETY: buffers sized for p, our stream and context; the workspace is ours (lock held).
        let launched = unsafe { enqueue(&self.kernels, p, &di, &dout, ws, force, s) };
        let info = match launched {
            Ok(info) => info,
            Err(e) => {
                let _ = self.gpu.sync(); // let the uploads finish before the host buffers can go
                return Err(e);
            }
        };
        dout.out.read(&mut out.output, s).map_err(be)?;
        // the state destination: new_state, or the pool itself (MTP serving, in place)
        let state_src = match (p.def.op, p.mtp_mode) {
            (Op::Mtp, MtpMode::Serving) => di.state.as_ref(),
            (Op::Mtp, MtpMode::Definition) => None,
            _ => dout.new_state.as_ref(),
        };
        match (state_src, &mut out.state) {
            (Some(src), StateBuf::F32(dst)) => src.read(dst, s).map_err(be)?,
            (Some(src), StateBuf::BF16(dst)) => src.read(dst, s).map_err(be)?,
            (None, dst) => copy_pool(x, dst)?,
        }
        if let (Some(src), Some(dst)) = (&dout.intermediate, out.intermediate.as_mut()) {
            src.read(dst, s).map_err(be)?;
        }
        self.gpu.sync().map_err(be)?;
        Ok(info)
    }

    /// Runs the prefill problem `p` with plan `plan` forced (through the override that forces it);
    /// returns what was launched. `gdn check` runs every prefill case once per plan this way.
    pub fn run_prefill_plan(
        &self,
        p: &Problem,
        x: &Inputs,
        out: &mut Outputs,
        plan: ForcedPlan,
    ) -> Result<LaunchInfo> {
        let name = plan.override_for(&crate::shape_of(p), &self.kernels.caps())?;
        self.run_with(p, x, out, Some(name))
    }
}

/// Device copies of one input set.
pub(crate) struct DeviceInputs {
    q: DeviceBuf,
    k: DeviceBuf,
    v: DeviceBuf,
    a: DeviceBuf,
    b: DeviceBuf,
    a_log: DeviceBuf,
    dt_bias: DeviceBuf,
    state: Option<DeviceBuf>,
    cu_seqlens: Option<DeviceBuf>,
    indices: Option<DeviceBuf>,
}

/// Device destinations of a call.
pub(crate) struct DeviceOutputs {
    out: DeviceBuf,
    /// new_state, when it is not written in place.
    new_state: Option<DeviceBuf>,
    intermediate: Option<DeviceBuf>,
}

fn state_dtype(p: &Problem) -> StateDtype {
    match p.state_out_dtype() {
        DType::BF16 => StateDtype::BF16,
        _ => StateDtype::F32,
    }
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
/// `ws` is the workspace from `CudaBackend::workspace_for(p, force)`; `force` is the prefill override.
pub(crate) unsafe fn enqueue(
    kernels: &KernelSet,
    p: &Problem,
    i: &DeviceInputs,
    o: &DeviceOutputs,
    ws: Workspace,
    force: Option<&str>,
    stream: Stream,
) -> Result<LaunchInfo> {
    let h = &p.def.heads;
    let sd = Some(state_dtype(p));
    match p.def.op {
        Op::Prefill => kernels.launch_prefill_with(
            &PrefillArgs {
                q: i.q.ptr,
                k: i.k.ptr,
                v: i.v.ptr,
                a: i.a.ptr,
                b: i.b.ptr,
                a_log: i.a_log.ptr,
                dt_bias: i.dt_bias.ptr,
                cu_seqlens: ptr(&i.cu_seqlens),
                state: ptr(&i.state),
                new_state: ptr(&o.new_state),
                out: o.out.ptr,
                workspace: ws.ptr,
                workspace_bytes: ws.bytes,
                num_seqs: p.dims.num_seqs,
                total_tokens: p.dims.total_tokens,
                max_seq_len: p.dims.max_seq_len.unwrap_or(0),
                num_q_heads: h.num_q_heads,
                num_v_heads: h.num_v_heads,
                head_size: h.head_size,
                scale: p.scale,
                state_dtype: sd,
            },
            stream.0,
            force,
        ),
        Op::Decode | Op::Mtp => {
            let new_state = match (p.def.op, p.mtp_mode) {
                (Op::Decode, _) => ptr(&o.new_state),
                (_, MtpMode::Serving) => ptr(&i.state), // in place
                (_, MtpMode::Definition) => 0,          // pool not updated
            };
            kernels.launch_recurrent(
                &RecurrentArgs {
                    q: i.q.ptr,
                    k: i.k.ptr,
                    v: i.v.ptr,
                    a: i.a.ptr,
                    b: i.b.ptr,
                    a_log: i.a_log.ptr,
                    dt_bias: i.dt_bias.ptr,
                    state: ptr(&i.state),
                    new_state,
                    intermediate: ptr(&o.intermediate),
                    out: o.out.ptr,
                    state_indices: ptr(&i.indices),
                    batch: p.dims.num_seqs,
                    seq_len: p.dims.seq_len,
                    num_state_rows: p.dims.state_rows,
                    num_q_heads: h.num_q_heads,
                    num_v_heads: h.num_v_heads,
                    head_size: h.head_size,
                    scale: p.scale,
                    state_dtype: sd,
                },
                stream.0,
            )
        }
    }
}

impl Backend for CudaBackend {
    fn name(&self) -> String {
        "cuda".into()
    }

    fn run(&self, p: &Problem, x: &Inputs, out: &mut Outputs) -> Result<()> {
        self.run_with(p, x, out, self.kernels.env_override())
            .map(|_| ())
    }
}

/// MTP definition mode: `final_state` is the input pool unchanged.
fn copy_pool(x: &Inputs, dst: &mut StateBuf) -> Result<()> {
    match (x.state, dst) {
        (Some(StateRef::F32(s)), StateBuf::F32(d)) => d.copy_from_slice(s),
        (Some(StateRef::BF16(s)), StateBuf::BF16(d)) => d.copy_from_slice(s),
        _ => {
            return Err(be(
                "MTP final_state: pool missing or of another dtype".into()
            ))
        }
    }
    Ok(())
}

impl Timed for CudaBackend {
    fn time(&self, p: &Problem, inputs: &[Inputs], cfg: &TimingConfig) -> Result<Vec<TierSamples>> {
        bench::time_problem(self, p, inputs, cfg)
    }

    fn time_copy(&self, bytes: u64, cfg: &TimingConfig) -> Result<Vec<TierSamples>> {
        bench::time_copy(self, bytes, cfg)
    }

    fn device(&self) -> String {
        self.gpu.info.describe()
    }
}
