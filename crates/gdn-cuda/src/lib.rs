//! gdn-cuda: the CUDA backend. Hopper (sm_90a) kernels from `kernels/*.cu`, compiled at run time by NVRTC
//! (disk-cached CUBINs) and launched through cudarc's driver layer. Nothing CUDA is linked: the binary
//! starts anywhere, and `open()` says precisely what is missing (driver, GPU, architecture, NVRTC, headers).
//!
//! Modules, one role each:
//! * `loader`    — finding libcuda / libnvrtc / the CUDA headers (env, loader path, PyPI wheels)
//! * `nvrtc`     — NVRTC calls, CUBIN compile, disk cache;  `resources` — the ptxas report parser
//! * `sources`   — the kernel sources (embedded by build.rs, or `$GDN_KERNEL_DIR`)
//! * `registry`  — the one table of kernel variants;  `policy` — the pure kernel choice
//! * `params`    — `#[repr(C)]` mirrors of the kernels' params structs
//! * `context`   — device, arch check, context, stream;  `memory` — device buffers
//! * `launch`    — the raw-pointer launch API on a caller's stream (for framework bindings)
//! * `backend`   — `CudaBackend`: gdn_core `Backend` + `Timed`;  `bench` — the timing tiers
//! * `report`    — GPU-free compile of every kernel (`gdn kernels`)

pub mod backend;
pub mod bench;
pub mod context;
pub mod launch;
pub mod loader;
pub mod memory;
pub mod nvrtc;
pub mod params;
pub mod policy;
pub mod registry;
pub mod report;
pub mod resources;
pub mod sources;

pub use backend::CudaBackend;
pub use launch::{KernelSet, LaunchInfo, PrefillArgs, RecurrentArgs};
pub use policy::{Choice, DeviceCaps, Rejection, Shape};
pub use registry::StateDtype;

use gdn_core::{Backend, DType, Problem, Result, Timed};

/// What the CLI needs from the CUDA backend: run + time.
pub trait CudaLike: Backend + Timed {}

impl CudaLike for CudaBackend {}

/// Opens the CUDA backend on device 0, or says precisely why it cannot (no driver, no GPU, a GPU that is
/// not Hopper — named with its compute capability —, no NVRTC or headers, with the places searched).
pub fn open() -> Result<Box<dyn CudaLike>> {
    Ok(Box::new(CudaBackend::open()?))
}

/// The policy's view of a validated problem.
pub fn shape_of(p: &Problem) -> Shape {
    let h = &p.def.heads;
    Shape {
        op: p.def.op,
        num_q_heads: h.num_q_heads,
        num_v_heads: h.num_v_heads,
        head_size: h.head_size,
        num_seqs: p.dims.num_seqs,
        seq_len: p.dims.seq_len,
        total_tokens: p.dims.total_tokens,
        state: match p.state_out_dtype() {
            DType::BF16 => StateDtype::BF16,
            _ => StateDtype::F32,
        },
    }
}
