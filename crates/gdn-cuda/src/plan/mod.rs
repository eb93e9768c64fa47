//! Kernel choice: pure, GPU-free planning from a shape summary (`Shape`) and the device's capabilities
//! (`DeviceCaps`), returning launches (`Launch`) or a typed rejection that says why (`Rejection`). This is the
//! only place that decides which kernel runs.
//!
//! The modules, each depending only on those listed after it:
//! * `select`  — `choose`: the one kernel of a decode / MTP call, or the fused kernel of a prefill call.
//! * `prefill` — `prefill::choose`: a prefill call's plan (fused, chunk64, cp / cp2, or the device plan), with its
//!   cost model, workspace formulas and the `GDN_KERNEL` override grammar.
//! * `decode`  — the decode / MTP table.
//! * `grid`    — every variant's grid for a shape (with the slot counts of the prefill64 launches), and the
//!   checks every launch passes (architecture, head size, head ratio, grid limits, shared memory).
//! * this file — the types they share, and the hardware limits.
//!
//! Architecture: the target the kernels are compiled for (`DeviceCaps::arch`, `kernels::target`). Every plan checks that
//! its kernels' modules build for it: Hopper (`sm_90a`) gets every plan; another GPU from Ampere on gets the portable
//! ones (decode, MTP, the fused prefill). Head size 128 only.

use crate::kernels::registry::{Arch, Family, Module, StateDtype, Variant, HEAD_DIM, SM90A};
use gdn_core::Op;
use std::fmt;
use std::sync::Arc;

pub mod decode;
pub mod grid;
pub mod prefill;
pub mod select;

/// Hopper's compute capability and target (the one target with every plan, and the one `gdn pack` ships).
pub use crate::kernels::target::{HOPPER_ARCH, HOPPER_CC, MIN_CC};
/// Hardware grid limits (x, and y/z).
pub const MAX_GRID_X: u64 = (1 << 31) - 1;
pub const MAX_GRID_YZ: u64 = 65_535;

/// What the planner needs to know about a call (no data, no pointers).
#[derive(Clone, Debug, PartialEq)]
pub struct Shape {
    pub op: Op,
    pub num_q_heads: usize,
    pub num_v_heads: usize,
    pub head_size: usize,
    /// Requests (decode, MTP) or sequences (prefill).
    pub num_seqs: usize,
    /// Tokens per request (decode: 1, MTP: T); prefill: 0.
    pub seq_len: usize,
    /// Total tokens.
    pub total_tokens: usize,
    /// Prefill: tokens of the longest sequence when the caller knows it (a host-side hint; never read from
    /// the device), 0 = unknown (the cost model then takes the lengths as equal). Only speed depends on it.
    pub max_seq_len: usize,
    pub state: StateDtype,
}

impl Shape {
    /// The contest's heads (qk4_v8, head size 128): `n` requests of `t` tokens (decode: t = 1, MTP: T), or for
    /// prefill (t = 0) `n` sequences of one token each; no length hint. Tools and tests start from it.
    pub fn qk4_v8(op: Op, n: usize, t: usize, state: StateDtype) -> Shape {
        Shape {
            op,
            num_q_heads: 4,
            num_v_heads: 8,
            head_size: 128,
            num_seqs: n,
            seq_len: t,
            total_tokens: n * t.max(1),
            max_seq_len: 0,
            state,
        }
    }
}

/// What the planner needs to know about the device.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DeviceCaps {
    pub cc: (i32, i32),
    /// The architecture the kernels are compiled for (`kernels::target::target_for`; PTX or CUBIN alike): a plan runs
    /// only kernels whose module builds for it.
    pub arch: Arch,
    pub sm_count: u32,
    /// Largest dynamic shared memory a block can opt in to (bytes).
    pub max_dyn_smem: u32,
    /// Device memory (bytes): bounds the chunk64 / cp workspace (`prefill::workspace::workspace_cap`).
    pub mem_bytes: u64,
}

impl DeviceCaps {
    /// An H100/H200 SXM (132 SMs, 227 KB opt-in shared memory; the H100's 80 GB): for tests and GPU-free reports.
    pub const HOPPER_132: DeviceCaps = DeviceCaps {
        cc: (9, 0),
        arch: SM90A,
        sm_count: 132,
        max_dyn_smem: 232_448,
        mem_bytes: 80 << 30,
    };

    /// An A100 SXM (108 SMs, 163 KB opt-in shared memory, 80 GB), compiled for sm_80: for tests.
    pub const AMPERE_108: DeviceCaps = DeviceCaps {
        cc: (8, 0),
        arch: Arch::portable(80),
        sm_count: 108,
        max_dyn_smem: 166_912,
        mem_bytes: 80 << 30,
    };

    /// An L40S (142 SMs, 99 KB opt-in shared memory, 48 GB), compiled for sm_89: for tests.
    pub const ADA_142: DeviceCaps = DeviceCaps {
        cc: (8, 9),
        arch: Arch::portable(89),
        sm_count: 142,
        max_dyn_smem: 101_376,
        mem_bytes: 48 << 30,
    };

    /// Whether the kernels of module `m` are compiled for this device's target.
    pub fn builds(&self, m: &Module) -> bool {
        m.builds_for(self.arch)
    }

    /// Whether the device runs programmatic dependent launch (sm_90 and later; the kernels' `griddepcontrol` exists
    /// only there, kernels/common/sm90.cuh).
    pub fn has_pdl(&self) -> bool {
        self.arch.cc >= 90
    }
}

/// A kernel and how to launch it.
#[derive(Clone, Debug, PartialEq)]
pub struct Launch {
    pub variant: &'static Variant,
    /// (x, y, z); x = 0 means there is nothing to launch (no requests / sequences).
    pub grid: (u32, u32, u32),
    pub block: u32,
    pub dyn_smem: u32,
    /// One line: why this variant (shared by a plan's launches; cloning a launch copies no text).
    pub why: Arc<str>,
}

impl Launch {
    pub fn is_empty(&self) -> bool {
        self.grid.0 == 0
    }
    pub fn ctas(&self) -> u64 {
        self.grid.0 as u64 * self.grid.1 as u64 * self.grid.2 as u64
    }
}

/// What one call launches: the recurrent kernel (decode / MTP) or one of the prefill plans.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum PlanKind {
    /// Decode / MTP: one `recurrent.cu` kernel.
    Recurrent,
    /// Prefill in one fused kernel (`kernels/prefill_fused/`).
    Fused,
    /// Prefill in two chunk64 kernels (`kernels/prefill_chunk64/`: prep, walk) with a device workspace.
    Chunk64,
    /// Context-parallel prefill in four chunk64 kernels (prep, pass 1, scan, pass 3), one warpgroup
    /// per walk CTA.
    ContextParallel,
    /// The same with two warpgroups per walk CTA (`…_cp_pass{1,3}w_*`): "cp2".
    ContextParallelWide,
    /// Prefill without a length hint, planned on the device (`prefill::device`): the fused launch, the prep, the
    /// chunk64 walk and the cp passes one after another, each running the call or exiting by its longest length.
    Device,
}

impl PlanKind {
    pub fn name(self) -> &'static str {
        match self {
            PlanKind::Recurrent => "recurrent",
            PlanKind::Fused => "fused",
            PlanKind::Chunk64 => "chunk64",
            PlanKind::ContextParallel => "cp",
            PlanKind::ContextParallelWide => "cp2",
            PlanKind::Device => "device",
        }
    }
}

/// Why no kernel can run a call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Rejection {
    Arch {
        cc: (i32, i32),
    },
    /// The kernel's module is not compiled for the device's target (a Hopper-only plan elsewhere).
    NotBuilt {
        kernel: &'static str,
        arch: Arch,
        builds_for: String,
    },
    HeadSize {
        got: usize,
    },
    HeadRatio {
        q: usize,
        v: usize,
    },
    OddValueHeads {
        v: usize,
    },
    SeqLen {
        op: Op,
        got: usize,
    },
    Grid {
        dim: &'static str,
        got: u64,
        max: u64,
    },
    SharedMemory {
        kernel: &'static str,
        need: u32,
        max: u32,
    },
    Override {
        name: String,
        problem: String,
    },
    NoVariant {
        family: Family,
        state: StateDtype,
    },
    /// A forced chunk64 / cp plan whose workspace exceeds `prefill::workspace::workspace_cap`.
    Workspace {
        need: u64,
        max: u64,
    },
}

impl fmt::Display for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Rejection::Arch { cc } => write!(
                f,
                "compute capability {}.{}: gdn's CUDA kernels need compute capability 8.0 (Ampere) or later",
                cc.0, cc.1
            ),
            Rejection::NotBuilt {
                kernel,
                arch,
                builds_for,
            } => write!(
                f,
                "{kernel} is not compiled for {arch} (its module builds for {builds_for}); this GPU runs the \
                 portable plans"
            ),
            Rejection::HeadSize { got } => {
                write!(f, "head_size {got}: the CUDA kernels support {HEAD_DIM} only")
            }
            Rejection::HeadRatio { q, v } => write!(
                f,
                "num_v_heads {v} is not a positive multiple of num_q_heads {q}"
            ),
            Rejection::OddValueHeads { v } => write!(
                f,
                "prefill with num_v_heads {v}: the fused prefill kernels need an even number of value \
                 heads (the chunk64 plan, which does not, cannot run this call)"
            ),
            Rejection::SeqLen { op, got } => write!(
                f,
                "{} with seq_len {got}: decode needs 1, MTP needs >= 1",
                op.name()
            ),
            Rejection::Grid { dim, got, max } => write!(
                f,
                "grid {dim} = {got} exceeds the hardware limit {max} (too many requests/heads for one launch)"
            ),
            Rejection::SharedMemory { kernel, need, max } => write!(
                f,
                "{kernel} needs {need} bytes of dynamic shared memory, the device allows {max}"
            ),
            Rejection::Override { name, problem } => {
                write!(f, "kernel override '{name}': {problem}")
            }
            Rejection::NoVariant { family, state } => write!(
                f,
                "no {family:?} kernel for {} state in this build",
                state.name()
            ),
            Rejection::Workspace { need, max } => write!(
                f,
                "the chunk64 prefill plan needs a {need}-byte workspace, more than its cap of {max} bytes"
            ),
        }
    }
}

impl std::error::Error for Rejection {}

impl From<Rejection> for gdn_core::GdnError {
    fn from(r: Rejection) -> Self {
        gdn_core::GdnError::Unsupported(r.to_string())
    }
}
