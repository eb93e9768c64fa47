//! Kernel choice: a pure, GPU-free function of the problem's shape summary and the device's capabilities,
//! returning a registry variant with its launch configuration, or a typed rejection that says why.
//! This is the only place that decides which kernel runs.
//!
//! Rules:
//! * Architecture: only compute capability 9.0 (Hopper, built as `sm_90a`). Head size 128 only.
//! * Decode / MTP (`recurrent.cu`): `RECURRENT_TABLE`, batch ranges measured on an H200 with qk4_v8
//!   (results/recurrent_kernels.md). Work per launch scales with B·HV and with 1/SMs, so the batch is first
//!   converted to its qk4_v8-on-132-SMs equivalent `ceil(B · HV/8 · 132/SMs)` (the kernel notes' advice for
//!   other head counts; not measured beyond qk4_v8).
//! * Prefill (`prefill.cu`, results/prefill_kernels.md): each CTA owns BV value columns of one (sequence,
//!   value head) and redoes the chunk preparation that all BV-tiles of a head share, so the widest tile
//!   that still fills the GPU wins: `BV = largest of {128, 64, 32, 16} with N·HV·128/BV ≥ 0.9·SMs, else 16`.
//!   HV must be even (the kernel copies gates as aligned bf16 pairs).
//! * An override (`GDN_KERNEL=<name>`, passed in by the caller) picks a variant by name; it must be of the
//!   right family and state dtype, and still passes every limit check.
//! * Grid limits: gridDim.x ≤ 2³¹−1, gridDim.y/z ≤ 65 535; dynamic shared memory ≤ the device's opt-in limit.

use crate::registry::{self, Family, GridOrder, StateDtype, Variant, HEAD_DIM};
use gdn_core::Op;
use std::fmt;

/// Compute capability gdn's kernels are built for (Hopper), and the NVRTC target for it.
pub const SUPPORTED_CC: (i32, i32) = (9, 0);
pub const SUPPORTED_ARCH: &str = "sm_90a";
/// The configuration the recurrent thresholds were measured on: HV = 8 value heads, 132 SMs.
pub const TUNED_NUM_V_HEADS: u64 = 8;
pub const TUNED_SM_COUNT: u64 = 132;
/// Decode / MTP: (family, state, largest equivalent batch (inclusive), kernel), in increasing batch order.
pub const RECURRENT_TABLE: &[(Family, StateDtype, u64, &str)] = &[
    (
        Family::Decode,
        StateDtype::F32,
        2,
        "gdn_recurrent_f32_t1_v4r2w8",
    ),
    (
        Family::Decode,
        StateDtype::F32,
        12,
        "gdn_recurrent_f32_t1_v4r2w4",
    ),
    (
        Family::Decode,
        StateDtype::F32,
        24,
        "gdn_recurrent_f32_t1_v8r4w4",
    ),
    (
        Family::Decode,
        StateDtype::F32,
        u64::MAX,
        "gdn_recurrent_f32_t1_v8r4w1_lin",
    ),
    (
        Family::Decode,
        StateDtype::BF16,
        24,
        "gdn_recurrent_bf16_t1_v8r2w4",
    ),
    (
        Family::Decode,
        StateDtype::BF16,
        96,
        "gdn_recurrent_bf16_t1_v8r4w2",
    ),
    (
        Family::Decode,
        StateDtype::BF16,
        u64::MAX,
        "gdn_recurrent_bf16_t1_v8r4w4_lin",
    ),
    (
        Family::Mtp,
        StateDtype::F32,
        127,
        "gdn_recurrent_f32_tn_v8r4w2",
    ),
    (
        Family::Mtp,
        StateDtype::F32,
        u64::MAX,
        "gdn_recurrent_f32_tn_v8r4w2_lin",
    ),
    (
        Family::Mtp,
        StateDtype::BF16,
        31,
        "gdn_recurrent_bf16_tn_v4r4w2",
    ),
    (
        Family::Mtp,
        StateDtype::BF16,
        u64::MAX,
        "gdn_recurrent_bf16_tn_v4r4w2_lin",
    ),
];
/// Prefill: the widest tile whose grid reaches NUM/DEN of the SM count.
pub const PREFILL_FILL_NUM: u64 = 9;
pub const PREFILL_FILL_DEN: u64 = 10;
/// Hardware grid limits (x, and y/z).
pub const MAX_GRID_X: u64 = (1 << 31) - 1;
pub const MAX_GRID_YZ: u64 = 65_535;

/// What the policy needs to know about a call (no data, no pointers).
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
    pub state: StateDtype,
}

/// What the policy needs to know about the device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceCaps {
    pub cc: (i32, i32),
    pub sm_count: u32,
    /// Largest dynamic shared memory a block can opt in to (bytes).
    pub max_dyn_smem: u32,
}

impl DeviceCaps {
    /// An H100/H200 SXM (132 SMs, 227 KB opt-in shared memory): for tests and GPU-free reports.
    pub const HOPPER_132: DeviceCaps = DeviceCaps {
        cc: (9, 0),
        sm_count: 132,
        max_dyn_smem: 232_448,
    };
}

/// A kernel and how to launch it.
#[derive(Clone, Debug, PartialEq)]
pub struct Choice {
    pub variant: &'static Variant,
    /// (x, y, z); x = 0 means there is nothing to launch (no requests / sequences).
    pub grid: (u32, u32, u32),
    pub block: u32,
    pub dyn_smem: u32,
    /// One line: why this variant.
    pub why: String,
}

impl Choice {
    pub fn is_empty(&self) -> bool {
        self.grid.0 == 0
    }
    pub fn ctas(&self) -> u64 {
        self.grid.0 as u64 * self.grid.1 as u64 * self.grid.2 as u64
    }
}

/// Why no kernel can run a call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Rejection {
    Arch {
        cc: (i32, i32),
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
}

impl fmt::Display for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Rejection::Arch { cc } => write!(
                f,
                "compute capability {}.{}: gdn's CUDA kernels are built for Hopper (9.0, {SUPPORTED_ARCH}) only",
                cc.0, cc.1
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
                "prefill with num_v_heads {v}: the prefill kernels need an even number of value heads"
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
        }
    }
}

impl std::error::Error for Rejection {}

impl From<Rejection> for gdn_core::GdnError {
    fn from(r: Rejection) -> Self {
        gdn_core::GdnError::Unsupported(r.to_string())
    }
}

fn family_of(op: Op) -> Family {
    match op {
        Op::Decode => Family::Decode,
        Op::Mtp => Family::Mtp,
        Op::Prefill => Family::Prefill,
    }
}

/// The grid of a variant for a shape (unchecked; u64 so that overflow is visible to the limit checks).
pub fn grid_of(v: &Variant, s: &Shape) -> (u64, u64, u64) {
    let (n, h, hv) = (
        s.num_seqs as u64,
        s.num_q_heads as u64,
        s.num_v_heads as u64,
    );
    let cph = v.ctas_per_head as u64;
    match v.grid {
        GridOrder::HeadMajor => (n * cph, h, hv / h.max(1)),
        GridOrder::Linear => (n * hv * cph, 1, 1),
    }
}

/// Chooses the kernel for `s` on a device with `caps`; `force` names a variant to use instead.
pub fn choose(s: &Shape, caps: &DeviceCaps, force: Option<&str>) -> Result<Choice, Rejection> {
    if caps.cc != SUPPORTED_CC {
        return Err(Rejection::Arch { cc: caps.cc });
    }
    if s.head_size != HEAD_DIM as usize {
        return Err(Rejection::HeadSize { got: s.head_size });
    }
    if s.num_q_heads == 0 || s.num_v_heads == 0 || !s.num_v_heads.is_multiple_of(s.num_q_heads) {
        return Err(Rejection::HeadRatio {
            q: s.num_q_heads,
            v: s.num_v_heads,
        });
    }
    if s.op == Op::Prefill && !s.num_v_heads.is_multiple_of(2) {
        return Err(Rejection::OddValueHeads { v: s.num_v_heads });
    }
    let seq_ok = match s.op {
        Op::Decode => s.seq_len == 1,
        Op::Mtp => s.seq_len >= 1 && s.seq_len <= i32::MAX as usize,
        Op::Prefill => true,
    };
    if !seq_ok {
        return Err(Rejection::SeqLen {
            op: s.op,
            got: s.seq_len,
        });
    }
    let family = family_of(s.op);
    let (variant, why) = match force {
        Some(name) => (
            forced(name, family, s.state)?,
            format!("forced by override '{name}'"),
        ),
        None => automatic(s, caps, family)?,
    };
    let (gx, gy, gz) = grid_of(variant, s);
    for (dim, got, max) in [
        ("x", gx, MAX_GRID_X),
        ("y", gy, MAX_GRID_YZ),
        ("z", gz, MAX_GRID_YZ),
    ] {
        if got > max {
            return Err(Rejection::Grid { dim, got, max });
        }
    }
    if variant.dyn_smem > caps.max_dyn_smem {
        return Err(Rejection::SharedMemory {
            kernel: variant.name,
            need: variant.dyn_smem,
            max: caps.max_dyn_smem,
        });
    }
    Ok(Choice {
        variant,
        grid: (gx as u32, gy as u32, gz as u32),
        block: variant.block,
        dyn_smem: variant.dyn_smem,
        why,
    })
}

fn forced(name: &str, family: Family, state: StateDtype) -> Result<&'static Variant, Rejection> {
    let bad = |problem: String| Rejection::Override {
        name: name.to_string(),
        problem,
    };
    let v = registry::find(name).ok_or_else(|| bad("no such kernel in the registry".into()))?;
    if v.family != family || v.state != state {
        return Err(bad(format!(
            "it is a {:?} kernel for {} state; this call needs {family:?} with {} state",
            v.family,
            v.state.name(),
            state.name()
        )));
    }
    Ok(v)
}

fn automatic(
    s: &Shape,
    caps: &DeviceCaps,
    family: Family,
) -> Result<(&'static Variant, String), Rejection> {
    let none = Rejection::NoVariant {
        family,
        state: s.state,
    };
    let sms = (caps.sm_count as u64).max(1);
    if family == Family::Prefill {
        let mut tiles: Vec<&'static Variant> = registry::candidates(family, s.state)
            .filter(|v| v.hot)
            .collect();
        tiles.sort_by_key(|v| v.ctas_per_head); // widest tile first
        let ctas = |v: &Variant| {
            let (x, y, z) = grid_of(v, s);
            x * y * z
        };
        let fits = |v: &&&Variant| ctas(v) * PREFILL_FILL_DEN >= PREFILL_FILL_NUM * sms;
        return match tiles.iter().find(fits) {
            Some(v) => Ok((
                v,
                format!("widest tile with {} CTAs >= 0.9 x {sms} SMs", ctas(v)),
            )),
            None => tiles
                .last()
                .map(|v| {
                    (
                        *v,
                        format!("narrowest tile: {} CTAs < 0.9 x {sms} SMs", ctas(v)),
                    )
                })
                .ok_or(none),
        };
    }
    let equiv = equivalent_batch(s.num_seqs as u64, s.num_v_heads as u64, sms);
    let row = RECURRENT_TABLE
        .iter()
        .find(|(f, st, max_b, _)| *f == family && *st == s.state && equiv <= *max_b)
        .ok_or(none)?;
    let v = registry::find(row.3).expect("policy table names registry kernels");
    let range = if row.2 == u64::MAX {
        "the last range".to_string()
    } else {
        format!("<= {}", row.2)
    };
    Ok((v, format!("equivalent batch {equiv}: {range}")))
}

/// The batch of the tuned configuration (HV = 8, 132 SMs) with the same work per SM: ceil(B·HV/8·132/SMs).
pub fn equivalent_batch(batch: u64, num_v_heads: u64, sm_count: u64) -> u64 {
    (batch * num_v_heads * TUNED_SM_COUNT).div_ceil(TUNED_NUM_V_HEADS * sm_count.max(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(op: Op, n: usize, t: usize, state: StateDtype) -> Shape {
        Shape {
            op,
            num_q_heads: 4,
            num_v_heads: 8,
            head_size: 128,
            num_seqs: n,
            seq_len: t,
            total_tokens: n * t.max(1),
            state,
        }
    }

    #[test]
    fn smoke() {
        let c = choose(
            &shape(Op::Decode, 1, 1, StateDtype::F32),
            &DeviceCaps::HOPPER_132,
            None,
        )
        .unwrap();
        assert_eq!(c.variant.name, "gdn_recurrent_f32_t1_v4r2w8");
    }
}
