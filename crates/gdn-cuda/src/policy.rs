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
//! * Prefill has three plans (`choose_prefill`), chosen by the cost model of `cost.rs` (estimated µs from
//!   T, N, HV, the SM count and — when the caller gives it — the longest sequence's length; calibrated on the
//!   H200, results/prefill_plans.md; refit in sessions 13 and 14, results/prefill64_s14.md):
//!   - **fused** (`prefill.cu`, results/prefill_kernels.md): one kernel; each CTA owns BV value columns of
//!     one (sequence, value head) and redoes the chunk preparation that all BV-tiles of a head share. With
//!     the longest length known, BV = the tile width with the smallest estimate: wide tiles do less work in
//!     all, narrow ones have a shorter chain per chunk, so a long sequence among short ones wants narrow
//!     tiles. Without it, BV = the largest of {128, 64, 32, 16} with N·HV·128/BV ≥ 0.9·SMs, else 16 (a hedge
//!     against skew the host cannot see; see `fused_tile`). HV must be even (the kernel copies gates as
//!     aligned bf16 pairs).
//!   - **chunk64** (`prefill64.cu`): two launches on the stream: `gdn_prefill64_prep` prepares every
//!     64-token chunk of every (sequence, value head) into a device workspace in parallel over chunks, then
//!     `gdn_prefill64_walk_{f32,bf16}` walks each sequence's chunks on wgmma (N·HV·2 CTAs, one warpgroup per
//!     64-row value half). Picked when its estimate (`cost::cp_us` with one segment) is the smallest: since
//!     the v7 walk (session 14) that happens on many medium sequences (6 of the mix's 25 long workloads,
//!     3–11% under the best fused tile, results/prefill64_s14.md); and where the fused kernels cannot run:
//!     an odd HV, when cp is not estimated faster (if its workspace `(T/64 + N + 1)·HV·WS_CHUNK_BYTES ≤
//!     workspace_cap` and its launches fit; otherwise the call is rejected as `OddValueHeads`).
//!   - **cp** (context parallel, `prefill64.cu`): the chunk64 prep, then three launches that cut each
//!     sequence into segments of L chunks and walk them in parallel (pass 1: segment 0 for real plus a
//!     transition and a zero-state summary of each middle segment; scan: the segments' start states, 8 value
//!     rows per CTA when the CTAs of the sequences that can have three segments fit one wave
//!     (`cp_scan_kernel`, `cost::scan_work_seqs`; the grid covers `prefill64_scan_seqs` of them), else 16;
//!     pass 3: segments 1.. for real). The passes' walk CTAs
//!     hold one warpgroup (a 64-row value half: `…_cp_pass{1,3}_*`) or two (a whole head:
//!     `…_cp_pass{1,3}w_*`, plan kind **cp2**; more rows per SM, half the CTAs, so about twice the segments
//!     for the same fill). Picked when its best estimate (`cost::cp_candidates`: either walk form, G
//!     segments of the longest sequence, 3 ≤ G ≤ 64, segments ≥ 4 chunks, pass 3 in one wave of CTAs and
//!     pass 1 in at most two) beats the fused one: few long sequences, or one long sequence among short ones
//!     when the caller gives its length. Nothing is read on the host: without a hint the lengths are taken
//!     as equal; any L is correct for any lengths (the hint only steers speed).
//! * Prefill without a length hint: the device plan (`device_plan.rs`) when the model's pick changes with the
//!   longest length and the equal-length pick would cost much at the skewed end; `GDN_KERNEL=host` keeps the
//!   host's equal-length plan; `device`, `device-fused`, `device-chunk64`, `device-cp` force the device plan
//!   (the model's thresholds, or every call to one route).
//! * An override (`GDN_KERNEL=<name>`, passed in by the caller) picks a variant by name; it must be of the
//!   right family and state dtype, and still passes every limit check. For prefill, naming a `gdn_prefill_*`
//!   kernel forces the fused plan with that kernel; naming `gdn_prefill64_prep` or the walk of the call's
//!   state dtype forces the chunk64 plan; naming a `gdn_prefill64_cp_*` kernel forces cp (segments by
//!   `cp_forced_segments`), with two-warpgroup walks when the name is a `…_cp_pass{1,3}w_*` pass.
//! * Grid limits: gridDim.x ≤ 2³¹−1, gridDim.y/z ≤ 65 535; dynamic shared memory ≤ the device's opt-in limit.

use crate::cost;
use crate::device_plan;
use crate::registry::{self, Family, GridOrder, StateDtype, Variant, HEAD_DIM};
use crate::registry::{
    prefill64_cp_workspace_bytes, prefill64_scan_seqs, prefill64_seg_slots, prefill64_slots,
    prefill64_workspace_bytes,
};
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
/// Prefill without a length hint: the widest tile whose grid reaches NUM/DEN of the SM count.
pub const PREFILL_FILL_NUM: u64 = 9;
pub const PREFILL_FILL_DEN: u64 = 10;
/// Bounds of the largest chunk64 / cp workspace (bytes; `workspace_cap`): a call that would need more than the cap is
/// refused (forced), runs fused (automatic) or, with an odd HV, is rejected.
pub const WORKSPACE_CAP_MIN: u64 = 1 << 30;
pub const WORKSPACE_CAP_MAX: u64 = 16 << 30;

/// The largest chunk64 / cp workspace on a device: an eighth of its memory, between `WORKSPACE_CAP_MIN` and
/// `WORKSPACE_CAP_MAX` (H100 80 GB: 10 GiB, H200: 16 GiB). The workspace is ~272 bytes per token and value head
/// (`prefill64_workspace_bytes`), so the fixed 1 GiB cap of sessions 7-32 sent every call over ~3.9M token-heads
/// to the fused kernels (qk4_v8: ~490K tokens; qk16_v32: ~123K), ~5x slower there than cp (1x65536: fused 2.6 ms,
/// cp2 0.49 ms); with this cap cp runs up to ~37M token-heads on an H100 (qk4_v8: 4.6M tokens). Session 33.
pub fn workspace_cap(caps: &DeviceCaps) -> u64 {
    (caps.mem_bytes / 8).clamp(WORKSPACE_CAP_MIN, WORKSPACE_CAP_MAX)
}
/// Forced cp plans (`gdn check`, overrides): at most this many segments per (average) sequence.
pub const CP_MAX_SEGMENTS: u64 = 64;
/// The prefill override (`GDN_KERNEL=host`) that keeps the automatic plan on the host: calls without a length hint
/// take the equal-length plan instead of the device plan (`device_plan.rs`; A/B measurements, opting out).
pub const HOST_PLAN_OVERRIDE: &str = "host";
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
    /// Prefill: tokens of the longest sequence when the caller knows it (a host-side hint; never read from
    /// the device), 0 = unknown (the cost model then takes the lengths as equal). Only speed depends on it.
    pub max_seq_len: usize,
    pub state: StateDtype,
}

/// What the policy needs to know about the device.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DeviceCaps {
    pub cc: (i32, i32),
    pub sm_count: u32,
    /// Largest dynamic shared memory a block can opt in to (bytes).
    pub max_dyn_smem: u32,
    /// Device memory (bytes): bounds the chunk64 / cp workspace (`workspace_cap`).
    pub mem_bytes: u64,
}

impl DeviceCaps {
    /// An H100/H200 SXM (132 SMs, 227 KB opt-in shared memory; the H100's 80 GB): for tests and GPU-free reports.
    pub const HOPPER_132: DeviceCaps = DeviceCaps {
        cc: (9, 0),
        sm_count: 132,
        max_dyn_smem: 232_448,
        mem_bytes: 80 << 30,
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
    /// A forced chunk64 / cp plan whose workspace exceeds `workspace_cap`.
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
        GridOrder::ChunkSlots => (prefill64_slots(s.total_tokens as u64, n) * hv, 1, 1),
        GridOrder::SegmentSlots | GridOrder::LongSeqs => cp_grid(v, s, 1),
        GridOrder::SplitLongest => ((n + registry::split_groups(n)) * hv * cph, 1, 1),
    }
}

/// The grid of a context-parallel launch (`GridOrder::SegmentSlots`: a pass; `GridOrder::LongSeqs`: the scan)
/// with segments of `seg_chunks` chunks. (Other grid orders do not depend on it: `grid_of`.)
pub fn cp_grid(v: &Variant, s: &Shape, seg_chunks: u64) -> (u64, u64, u64) {
    let (t, n, hv, cph) = (
        s.total_tokens as u64,
        s.num_seqs as u64,
        s.num_v_heads as u64,
        v.ctas_per_head as u64,
    );
    match v.grid {
        GridOrder::SegmentSlots => (prefill64_seg_slots(t, n, seg_chunks), hv, cph),
        GridOrder::LongSeqs => (prefill64_scan_seqs(t, n, seg_chunks) * hv * cph, 1, 1),
        _ => grid_of(v, s),
    }
}

/// Average 64-token chunks per sequence (≥ 1), from T and N only.
fn avg_seq_chunks(s: &Shape) -> u64 {
    (s.total_tokens as u64 / (s.num_seqs as u64).max(1))
        .div_ceil(registry::prefill64::CHUNK)
        .max(1)
}

/// Segments per sequence of a *forced* cp plan with `warpgroups` warpgroups per walk CTA: the largest
/// G ≤ `CP_MAX_SEGMENTS` whose pass 3 (`chains·(G−1)` CTAs, chains = N·HV·2/warpgroups) fits one wave and
/// pass 1 (`chains·(2G−3)`) two, one CTA per SM, at least 3 (so that every pass has work) however short the
/// sequences: `gdn check` uses it to run many segments.
pub fn cp_forced_segments(s: &Shape, sms: u64, warpgroups: u64) -> u64 {
    let chains = (s.num_seqs as u64 * s.num_v_heads as u64 * 2 / warpgroups.clamp(1, 2)).max(1);
    let mut g = 3;
    while g < CP_MAX_SEGMENTS && chains * g <= sms && chains * (2 * (g + 1) - 3) <= 2 * sms {
        g += 1;
    }
    g
}

/// Chunks per segment for G segments of the average sequence (≥ 1).
pub fn cp_seg_chunks(s: &Shape, segments: u64) -> u64 {
    avg_seq_chunks(s).div_ceil(segments.max(1)).max(1)
}

/// Chooses the kernel for `s` on a device with `caps`; `force` names a variant to use instead.
/// For prefill this is the kernel of the *fused* plan only: prefill calls go through [`choose_prefill`],
/// which decides between the fused, chunk64 and cp plans.
pub fn choose(s: &Shape, caps: &DeviceCaps, force: Option<&str>) -> Result<Choice, Rejection> {
    check_call(s, caps)?;
    if s.op == Op::Prefill && !s.num_v_heads.is_multiple_of(2) {
        return Err(Rejection::OddValueHeads { v: s.num_v_heads });
    }
    let family = family_of(s.op);
    let (variant, why) = match force.filter(|f| *f != HOST_PLAN_OVERRIDE) {
        Some(name) => (
            forced(name, family, s.state)?,
            format!("forced by override '{name}'"),
        ),
        None => automatic(s, caps, family)?,
    };
    configure(variant, s, caps, why)
}

/// Checks that hold for every kernel: architecture, head size, head ratio, sequence length.
fn check_call(s: &Shape, caps: &DeviceCaps) -> Result<(), Rejection> {
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
    Ok(())
}

/// The launch of `variant` for `s`, checked against the grid limits and the device's shared memory.
fn configure(
    variant: &'static Variant,
    s: &Shape,
    caps: &DeviceCaps,
    why: String,
) -> Result<Choice, Rejection> {
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

/// The fused tile for `s` and its estimate (`cost::fused_us`), with why. With the longest sequence's length
/// (`Shape::max_seq_len`): the tile with the smallest estimate (ties: the widest). Without it, the tile
/// with the smallest estimate when that is the same for equal lengths and for one sequence holding all but
/// N−1 tokens (the two extremes the host cannot tell apart; tiny calls); else the widest tile whose grid
/// reaches 0.9 × the SMs (else the narrowest) — a hedge against unseen skew: the equal-length estimate
/// alone picks wide tiles for 5–15 sequences that are 35–80% slower when one of them is long (contest-like
/// mix: 5579 µs in all vs 5316 for the fill rule; results/prefill_plans.md).
fn fused_tile(s: &Shape, sms: u64) -> Option<(&'static Variant, f64, String)> {
    let mut tiles: Vec<&'static Variant> = registry::candidates(Family::Prefill, s.state)
        .filter(|v| v.hot)
        .collect();
    tiles.sort_by_key(|v| v.ctas_per_head); // widest tile first
    let est = |s: &Shape, v: &Variant| fused_tile_us(s, v, sms);
    let best = |s: &Shape| {
        tiles
            .iter()
            .map(|v| (*v, est(s, v)))
            .min_by(|a, b| a.1.total_cmp(&b.1))
    };
    let (v, us) = best(s)?;
    if s.max_seq_len > 0 {
        let why = format!(
            "tile with the smallest estimate, {us:.0} us (longest sequence {} tokens, hinted)",
            cost::Lengths::of(s).longest
        );
        return Some((v, us, why));
    }
    let skewed = Shape {
        max_seq_len: s
            .total_tokens
            .saturating_sub(s.num_seqs.saturating_sub(1))
            .max(1),
        ..s.clone()
    };
    if best(&skewed).is_some_and(|(w, _)| w.name == v.name) {
        let why = format!(
            "tile with the smallest estimate, {us:.0} us, for equal and for skewed lengths"
        );
        return Some((v, us, why));
    }
    let ctas = |v: &Variant| {
        let (x, y, z) = grid_of(v, s);
        x * y * z
    };
    let fits = |v: &&&Variant| ctas(v) * PREFILL_FILL_DEN >= PREFILL_FILL_NUM * sms;
    match tiles.iter().find(fits) {
        Some(v) => Some((
            v,
            est(s, v),
            format!(
                "widest tile with {} CTAs >= 0.9 x {sms} SMs (no length hint)",
                ctas(v)
            ),
        )),
        None => tiles.last().map(|v| {
            (
                *v,
                est(s, v),
                format!(
                    "narrowest tile: {} CTAs < 0.9 x {sms} SMs (no length hint)",
                    ctas(v)
                ),
            )
        }),
    }
}

/// Most sequences a longest-first fused kernel ranks (prefill.cu `LF_MAX_N`: four per lane of one warp).
pub const LONGEST_FIRST_MAX_N: u64 = 128;
/// Shortest longest sequence (tokens; the hinted one, or T without a hint) for which the fused kernels run the
/// sequences longest first. Reordering gains at most about the longest chain's wait for a free SM, short when every
/// sequence is; the ranking costs each CTA ~0.3–0.4 µs (H200 harness, session 26: 64×1024 bv128 294.2 → 295.8 µs over 4
/// waves, 32×256 51.4 → 52.6). With a first, slower ranking (~1.5 µs per wave) the contest-like mix gained from a
/// longest sequence of ~190 tokens on (22 sequences, longest 192: −3.5 µs) and lost below (longest 89: +1.4), and the
/// "30 mixed" anchor (longest 700) went 71.6 → 56.5 µs. 128 tokens: 8 chunks of chain.
pub const LONGEST_FIRST_MIN_TOKENS: u64 = 128;

/// Whether a fused launch of `ctas` CTAs for `s` should run the sequences longest first (prefill.cu v13): 2..=128
/// sequences; a grid wider than the GPU (only then can a late long sequence wait for a second wave); a longest sequence
/// that can reach `LONGEST_FIRST_MIN_TOKENS`; and lengths not known to be equal (a hint of ceil(T/N): the order changes
/// nothing there and the ranking costs every CTA). Without a hint the lengths may be skewed, so only T bounds it.
pub fn fused_longest_first(s: &Shape, ctas: u64, sms: u64) -> bool {
    let l = cost::Lengths::of(s);
    let hinted = s.max_seq_len > 0;
    let equal = hinted && l.longest <= l.tokens.div_ceil(l.seqs);
    let longest = if hinted { l.longest } else { l.tokens };
    (2..=LONGEST_FIRST_MAX_N).contains(&(s.num_seqs as u64))
        && ctas > sms
        && longest >= LONGEST_FIRST_MIN_TOKENS
        && !equal
}

/// Whether plain fused tile `v` runs as its split build (prefill.cu v14, `registry::split_of`) for `s`: where it
/// would run longest first and the longest sequence (the hint, or T without one) can be split
/// (`cost::split_threshold`).
pub fn fused_split(v: &Variant, s: &Shape, sms: u64) -> bool {
    let (x, y, z) = grid_of(v, s);
    let l = cost::Lengths::of(s);
    let longest = if s.max_seq_len > 0 {
        l.longest
    } else {
        l.tokens
    };
    !v.longest_first
        && !registry::is_split(v)
        && registry::split_of(v).is_some()
        && fused_longest_first(s, x * y * z, sms)
        && longest > cost::split_threshold(s, sms)
}

/// The estimate of fused tile `v` (plain, or any build of it) for `s`: `cost::fused_split_us` where it runs split
/// (a split build, or a plain tile that `fused_order` will swap for one), else `cost::fused_us`.
pub fn fused_tile_us(s: &Shape, v: &Variant, sms: u64) -> f64 {
    if registry::is_split(v) || fused_split(v, s, sms) {
        cost::fused_split_us(s, sms)
    } else {
        cost::fused_us(s, HEAD_DIM / v.ctas_per_head, sms)
    }
}

/// Fused tile `v` for `s`: its split build where `fused_split` says so, else its longest-first build where
/// `fused_longest_first` says so, else itself (with why appended).
pub(crate) fn fused_order(
    v: &'static Variant,
    s: &Shape,
    sms: u64,
    why: String,
) -> (&'static Variant, String) {
    let (x, y, z) = grid_of(v, s);
    if let Some(sp) = registry::split_of(v).filter(|_| fused_split(v, s, sms)) {
        return (
            sp,
            format!(
                "{why}; longest first, sequences over {} tokens on two CTAs",
                cost::split_threshold(s, sms)
            ),
        );
    }
    match registry::longest_first_of(v) {
        Some(lf) if fused_longest_first(s, x * y * z, sms) => (
            lf,
            format!(
                "{why}; sequences longest first ({} CTAs > {sms} SMs)",
                x * y * z
            ),
        ),
        _ => (v, why),
    }
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
        let (v, _, why) = fused_tile(s, sms).ok_or(none)?;
        return Ok(fused_order(v, s, sms, why));
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

/// What one call launches: the recurrent kernel (decode / MTP) or one of the two prefill plans.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum PlanKind {
    /// Decode / MTP: one `recurrent.cu` kernel.
    Recurrent,
    /// Prefill in one `prefill.cu` kernel.
    Fused,
    /// Prefill in two `prefill64.cu` kernels (prep, walk) with a device workspace.
    Chunk64,
    /// Context-parallel prefill in four `prefill64.cu` kernels (prep, pass 1, scan, pass 3), one warpgroup
    /// per walk CTA.
    ContextParallel,
    /// The same with two warpgroups per walk CTA (`…_cp_pass{1,3}w_*`): "cp2".
    ContextParallelWide,
    /// Prefill without a length hint, planned on the device (`device_plan.rs`): the fused launch, the prep, the
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

/// How a prefill call runs: the launches, in stream order, and the workspace they need.
#[derive(Clone, Debug, PartialEq)]
pub enum PrefillPlan {
    /// One `gdn_prefill_*` launch; no workspace.
    Fused { variant: Choice },
    /// `gdn_prefill64_prep` then `gdn_prefill64_walk_*`, sharing a workspace of `workspace_bytes`
    /// (0 when there is nothing to launch).
    Chunk64 {
        prep: Choice,
        walk: Choice,
        workspace_bytes: u64,
    },
    /// `gdn_prefill64_prep`, `gdn_prefill64_cp_pass1_*`, `gdn_prefill64_cp_scan{,8}`, `gdn_prefill64_cp_pass3_*`
    /// with `Prefill64Params::seg_chunks = seg_chunks`, sharing a workspace of `workspace_bytes`.
    ContextParallel {
        prep: Choice,
        pass1: Choice,
        scan: Choice,
        pass3: Choice,
        /// Segments of the longest sequence (forced plans: of the average one), and chunks per segment (L).
        segments: u64,
        seg_chunks: u64,
        /// Warpgroups per walk CTA of the passes (1 or 2: plan kind cp / cp2).
        warpgroups: u64,
        workspace_bytes: u64,
    },
    /// The device plan (`device_plan.rs`), in stream order: the fused kernel (absent when it never runs the call),
    /// a second fused tile for skewed lengths (present when `thresholds.tile_from` < `run_from`), the prep (absent
    /// when only the fused launches can), the chunk64 walk (absent when cp takes every call the prep does), cp pass
    /// 1, scan, pass 3 (absent when cp never runs); `thresholds` go to the kernels' params.
    Device {
        fused: Option<Choice>,
        fused_skew: Option<Choice>,
        prep: Option<Choice>,
        walk: Option<Choice>,
        cp: Option<[Choice; 3]>,
        thresholds: crate::device_plan::Thresholds,
        route: crate::device_plan::DeviceRoute,
        workspace_bytes: u64,
    },
}

impl PrefillPlan {
    pub fn kind(&self) -> PlanKind {
        match self {
            PrefillPlan::Fused { .. } => PlanKind::Fused,
            PrefillPlan::Chunk64 { .. } => PlanKind::Chunk64,
            PrefillPlan::ContextParallel { warpgroups: 2, .. } => PlanKind::ContextParallelWide,
            PrefillPlan::ContextParallel { .. } => PlanKind::ContextParallel,
            PrefillPlan::Device { .. } => PlanKind::Device,
        }
    }

    /// Nothing to launch (no sequences).
    pub fn is_empty(&self) -> bool {
        match self {
            PrefillPlan::Fused { variant } => variant.is_empty(),
            PrefillPlan::Chunk64 { walk, .. } => walk.is_empty(),
            PrefillPlan::ContextParallel { pass3, .. } => pass3.is_empty(),
            PrefillPlan::Device { .. } => self.launches().iter().all(|c| c.is_empty()),
        }
    }

    /// Device scratch the plan needs (bytes, 256-byte aligned): 0 for the fused plan.
    pub fn workspace_bytes(&self) -> u64 {
        match self {
            PrefillPlan::Fused { .. } => 0,
            PrefillPlan::Chunk64 {
                workspace_bytes, ..
            }
            | PrefillPlan::ContextParallel {
                workspace_bytes, ..
            }
            | PrefillPlan::Device {
                workspace_bytes, ..
            } => *workspace_bytes,
        }
    }

    /// The launches, in stream order.
    pub fn launches(&self) -> Vec<&Choice> {
        match self {
            PrefillPlan::Fused { variant } => vec![variant],
            PrefillPlan::Chunk64 { prep, walk, .. } => vec![prep, walk],
            PrefillPlan::ContextParallel {
                prep,
                pass1,
                scan,
                pass3,
                ..
            } => vec![prep, pass1, scan, pass3],
            PrefillPlan::Device {
                fused,
                fused_skew,
                prep,
                walk,
                cp,
                ..
            } => fused
                .iter()
                .chain(fused_skew)
                .chain(prep)
                .chain(walk)
                .chain(cp.iter().flatten())
                .collect(),
        }
    }

    /// `fused gdn_prefill_f32_bv16` / `chunk64 gdn_prefill64_prep+gdn_prefill64_walk_f32`; a device plan with a
    /// forced route is labelled by its override (`device-cp …`).
    pub fn label(&self) -> String {
        let names: Vec<&str> = self.launches().iter().map(|c| c.variant.name).collect();
        let kind = match self {
            PrefillPlan::Device { route, .. } => route.override_name(),
            _ => self.kind().name(),
        };
        format!("{kind} {}", names.join("+"))
    }

    /// Why this plan (and kernel).
    pub fn why(&self) -> &str {
        match self {
            PrefillPlan::Fused { variant } => &variant.why,
            PrefillPlan::Chunk64 { walk, .. } => &walk.why,
            PrefillPlan::ContextParallel { pass3, .. } => &pass3.why,
            PrefillPlan::Device { .. } => self.launches().last().map_or("", |c| &c.why),
        }
    }
}

/// Chooses the prefill plan for `s` (a prefill shape) on a device with `caps`; `force` names a kernel
/// (`GDN_KERNEL`): a `gdn_prefill_*` kernel forces the fused plan with it, `gdn_prefill64_prep` or the
/// walk of the call's state dtype forces chunk64. See the module comment for the automatic rule.
pub fn choose_prefill(
    s: &Shape,
    caps: &DeviceCaps,
    force: Option<&str>,
) -> Result<PrefillPlan, Rejection> {
    debug_assert_eq!(s.op, Op::Prefill, "choose_prefill takes prefill shapes");
    check_call(s, caps)?;
    let Some(name) = force else {
        // (the device plan first: a remembered decision needs no host plan)
        return match device_plan::automatic(s, caps) {
            Some(plan) => Ok(plan),
            None => automatic_prefill(s, caps),
        };
    };
    if name == HOST_PLAN_OVERRIDE {
        return automatic_prefill(s, caps);
    }
    if let Some(route) = device_plan::DeviceRoute::from_override(name) {
        return device_plan::forced(s, caps, route);
    }
    let bad = |problem: String| Rejection::Override {
        name: name.to_string(),
        problem,
    };
    let v = registry::find(name).ok_or_else(|| bad("no such kernel in the registry".into()))?;
    let forced_why = format!("forced by override '{name}'");
    match v.family {
        Family::Prefill => Ok(PrefillPlan::Fused {
            variant: choose(s, caps, Some(name))?,
        }),
        Family::Prefill64Walk if v.state != s.state => Err(bad(format!(
            "it is the chunk64 walk for {} state; this call has {} state",
            v.state.name(),
            s.state.name()
        ))),
        Family::Prefill64CpPass1 | Family::Prefill64CpPass3 if v.state != s.state => {
            Err(bad(format!(
                "it is a context-parallel pass for {} state; this call has {} state",
                v.state.name(),
                s.state.name()
            )))
        }
        Family::Prefill64Prep | Family::Prefill64Walk => chunk64_plan(s, caps, forced_why),
        Family::Prefill64CpPass1 | Family::Prefill64CpScan | Family::Prefill64CpPass3 => {
            // a pass names its walk form; a scan names none: one warpgroup
            let wg = match v.family {
                Family::Prefill64CpScan => 1,
                _ => registry::walk_warpgroups(v) as u64,
            };
            let g = cp_forced_segments(s, caps.sm_count as u64, wg);
            cp_plan(s, caps, (g, cp_seg_chunks(s, g), wg), forced_why)
        }
        other => Err(bad(format!(
            "it is a {other:?} kernel; a prefill call takes gdn_prefill_* (fused plan), \
             gdn_prefill64_prep / _walk_* (chunk64 plan) or gdn_prefill64_cp_* (cp plan)"
        ))),
    }
}

/// The hot kernel of `family` with `warpgroups` warpgroups per CTA for a chunk64 / cp launch of `s`: of the
/// call's state dtype, except for the launches that touch no state storage (the prep, the cp scan;
/// registered as F32 by convention).
fn plan_kernel(family: Family, s: &Shape, warpgroups: u64) -> Result<&'static Variant, Rejection> {
    let stateless = family == Family::Prefill64Prep; // (the cp scan is chosen by `cp_scan_kernel`)
    registry::VARIANTS
        .iter()
        .find(|v| {
            v.family == family
                && v.hot
                && (stateless || v.state == s.state)
                && registry::walk_warpgroups(v) as u64 == warpgroups
        })
        .ok_or(Rejection::NoVariant {
            family,
            state: s.state,
        })
}

/// The chunk64 plan for `s`, or why it cannot run (workspace cap, grid, shared memory, no variant).
pub(crate) fn chunk64_plan(
    s: &Shape,
    caps: &DeviceCaps,
    why: String,
) -> Result<PrefillPlan, Rejection> {
    let (prep_v, walk_v) = (
        plan_kernel(Family::Prefill64Prep, s, 1)?,
        plan_kernel(Family::Prefill64Walk, s, 1)?,
    );
    let (t, n, hv) = (
        s.total_tokens as u64,
        s.num_seqs as u64,
        s.num_v_heads as u64,
    );
    let need = prefill64_workspace_bytes(t, n, hv);
    let max = workspace_cap(caps);
    if need > max {
        return Err(Rejection::Workspace { need, max });
    }
    let prep = configure(prep_v, s, caps, why.clone())?;
    let walk = configure(walk_v, s, caps, why)?;
    let workspace_bytes = if walk.is_empty() { 0 } else { need };
    Ok(PrefillPlan::Chunk64 {
        prep,
        walk,
        workspace_bytes,
    })
}

/// The context-parallel plan for `s` with segments of `seg_chunks` chunks (`segments`: how many the
/// longest sequence gets, for the report) and `warpgroups` warpgroups per walk CTA.
pub(crate) fn cp_plan(
    s: &Shape,
    caps: &DeviceCaps,
    (segments, seg_chunks, warpgroups): (u64, u64, u64),
    why: String,
) -> Result<PrefillPlan, Rejection> {
    let of = |family| {
        plan_kernel(
            family,
            s,
            if family == Family::Prefill64Prep {
                1
            } else {
                warpgroups
            },
        )
    };
    let (t, n, hv) = (
        s.total_tokens as u64,
        s.num_seqs as u64,
        s.num_v_heads as u64,
    );
    let need = prefill64_cp_workspace_bytes(t, n, hv, seg_chunks);
    let max = workspace_cap(caps);
    if need > max {
        return Err(Rejection::Workspace { need, max });
    }
    if seg_chunks > i32::MAX as u64 {
        return Err(Rejection::Grid {
            dim: "segment length",
            got: seg_chunks,
            max: i32::MAX as u64,
        });
    }
    let why = format!(
        "{why}; {segments} segments of {seg_chunks} chunks, {warpgroups} warpgroup(s) per walk CTA"
    );
    let prep = configure(of(Family::Prefill64Prep)?, s, caps, why.clone())?;
    let pass1 = configure_grid(
        of(Family::Prefill64CpPass1)?,
        s,
        caps,
        why.clone(),
        seg_chunks,
    )?;
    let scan = configure_grid(
        cp_scan_kernel(s, caps.sm_count as u64, seg_chunks)?,
        s,
        caps,
        why.clone(),
        seg_chunks,
    )?;
    let pass3 = configure_grid(of(Family::Prefill64CpPass3)?, s, caps, why, seg_chunks)?;
    let workspace_bytes = if pass3.is_empty() || n == 0 { 0 } else { need };
    Ok(PrefillPlan::ContextParallel {
        prep,
        pass1,
        scan,
        pass3,
        segments,
        seg_chunks,
        warpgroups,
        workspace_bytes,
    })
}

/// The cp scan kernel with segments of `seg_chunks` chunks: `gdn_prefill64_cp_scan8` (8 value rows per CTA,
/// 16 CTAs per (sequence, head)) when the CTAs that do work fit one wave (one per SM), else
/// `gdn_prefill64_cp_scan` (16 rows, 8 CTAs). A scan step is latency-bound, so twice the SMs per step pays only
/// while no second wave is needed (H200, results/prefill64_s11.md: 1x8192 scan 27.4 → 23.7 µs; 2x16384 28.2 →
/// 46.6 µs with two waves). The working sequences (`cost::scan_work_seqs`): K = `prefill64_scan_seqs`
/// without a length hint, fewer with one when the other sequences are too short to need the scan (session 21:
/// prefill_56 of the mix, K = 2 and one long sequence; either kernel is correct for any lengths, the hint only
/// steers speed).
pub fn cp_scan_kernel(s: &Shape, sms: u64, seg_chunks: u64) -> Result<&'static Variant, Rejection> {
    let seqs = cost::scan_work_seqs(s, seg_chunks);
    let ctas8 = seqs * s.num_v_heads as u64 * registry::prefill64::CP_SCAN8_CTAS as u64;
    let name = if ctas8 <= sms {
        "gdn_prefill64_cp_scan8"
    } else {
        "gdn_prefill64_cp_scan"
    };
    registry::find(name).ok_or(Rejection::NoVariant {
        family: Family::Prefill64CpScan,
        state: StateDtype::F32,
    })
}

/// `configure` for a context-parallel pass: its grid with segments of `seg_chunks` chunks.
fn configure_grid(
    variant: &'static Variant,
    s: &Shape,
    caps: &DeviceCaps,
    why: String,
    seg_chunks: u64,
) -> Result<Choice, Rejection> {
    let mut c = configure(variant, s, caps, why)?;
    let (gx, gy, gz) = cp_grid(variant, s, seg_chunks);
    if gx > MAX_GRID_X {
        return Err(Rejection::Grid {
            dim: "x",
            got: gx,
            max: MAX_GRID_X,
        });
    }
    c.grid = if s.num_seqs == 0 {
        (0, gy as u32, gz as u32)
    } else {
        (gx as u32, gy as u32, gz as u32)
    };
    Ok(c)
}

/// The automatic prefill plan: the cheapest estimate of `cost.rs` among the fused tiles (even HV) or the
/// chunk64 plan (odd HV) and the best cp plan of each walk form; a cp plan that cannot run (workspace cap,
/// grid, shared memory) falls back to the other form, then to the base plan.
fn automatic_prefill(s: &Shape, caps: &DeviceCaps) -> Result<PrefillPlan, Rejection> {
    let sms = (caps.sm_count as u64).max(1);
    let odd = !s.num_v_heads.is_multiple_of(2);
    let chunk64_us = cost::cp_us(s, 1, &cost::WALK_FORMS[0], sms).us;
    let fused_us = if odd {
        f64::INFINITY
    } else {
        fused_tile(s, sms).map_or(f64::INFINITY, |x| x.1)
    };
    let chunk64_first = chunk64_us < fused_us;
    let (base_us, base) = if chunk64_first {
        (chunk64_us, "chunk64")
    } else {
        (fused_us, "fused")
    };
    // the cheaper walk form first; one that cannot run here (shared memory, workspace, grid) yields to the other
    for e in cost::cp_candidates(s, sms)
        .into_iter()
        .filter(|e| e.us < base_us)
    {
        let l = cost::Lengths::of(s);
        let why = format!(
            "{}: estimate {:.0} us < {base} {base_us:.0} us ({} walk chains, longest sequence {} tokens{})",
            if e.warpgroups == 2 { "cp2" } else { "cp" },
            e.us,
            e.chains,
            l.longest,
            if s.max_seq_len > 0 { ", hinted" } else { ", lengths taken as equal" }
        );
        if let Ok(plan) = cp_plan(s, caps, (e.segments, e.seg_chunks, e.warpgroups), why) {
            return Ok(plan);
        }
    }
    if odd {
        let reason = format!("odd num_v_heads {}: only chunk64 runs it", s.num_v_heads);
        return chunk64_plan(s, caps, reason)
            .map_err(|_| Rejection::OddValueHeads { v: s.num_v_heads });
    }
    if chunk64_first {
        let why = format!("chunk64: estimate {chunk64_us:.0} us < fused {fused_us:.0} us");
        if let Ok(plan) = chunk64_plan(s, caps, why) {
            return Ok(plan);
        }
    }
    let mut variant = choose(s, caps, None)?;
    variant.why = format!("fused: {}", variant.why);
    Ok(PrefillPlan::Fused { variant })
}

/// The override name that forces prefill plan `kind` for `s`: fused → the kernel the automatic fused rule
/// picks; chunk64 → the walk of the state dtype; cp / cp2 → the pass 3 of the state dtype with one / two
/// warpgroups. `gdn check` runs each prefill case once per plan this way.
pub fn prefill_override_for(
    kind: PlanKind,
    s: &Shape,
    caps: &DeviceCaps,
) -> Result<&'static str, Rejection> {
    match kind {
        PlanKind::Fused => choose(s, caps, None).map(|c| c.variant.name),
        PlanKind::Chunk64 => registry::candidates(Family::Prefill64Walk, s.state)
            .find(|v| v.hot)
            .map(|v| v.name)
            .ok_or(Rejection::NoVariant {
                family: Family::Prefill64Walk,
                state: s.state,
            }),
        PlanKind::ContextParallel | PlanKind::ContextParallelWide => {
            let wg = if kind == PlanKind::ContextParallel {
                1
            } else {
                2
            };
            registry::candidates(Family::Prefill64CpPass3, s.state)
                .find(|v| v.hot && registry::walk_warpgroups(v) == wg)
                .map(|v| v.name)
                .ok_or(Rejection::NoVariant {
                    family: Family::Prefill64CpPass3,
                    state: s.state,
                })
        }
        PlanKind::Device => Ok(device_plan::DeviceRoute::Model.override_name()),
        PlanKind::Recurrent => Err(Rejection::Override {
            name: "recurrent".into(),
            problem: "not a prefill plan".into(),
        }),
    }
}

/// A prefill plan forced by name (`gdn check` runs every case once per `ForcedPlan::CHECKED`): a plan kind, by the
/// override that forces it for the shape (`prefill_override_for`), or a route of the device plan.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum ForcedPlan {
    Kind(PlanKind),
    /// The fused plan's tile with its sequences longest first (prefill.cu v13): the automatic tile's longest-first
    /// build, or bv64's where that tile has none; whatever the shape, so that every check case runs the ranking.
    FusedLongestFirst,
    /// The split bv128 tile (prefill.cu v14) of the call's state dtype, whatever the shape: every check case runs its
    /// spare groups, and the cases with a sequence over `cost::split_threshold` its half CTAs.
    FusedSplit,
    Device(device_plan::DeviceRoute),
}

impl ForcedPlan {
    /// Every host plan, the device plan with the model's thresholds, and each of its forced routes.
    pub const CHECKED: [ForcedPlan; 11] = [
        ForcedPlan::Kind(PlanKind::Fused),
        ForcedPlan::FusedLongestFirst,
        ForcedPlan::FusedSplit,
        ForcedPlan::Kind(PlanKind::Chunk64),
        ForcedPlan::Kind(PlanKind::ContextParallel),
        ForcedPlan::Kind(PlanKind::ContextParallelWide),
        ForcedPlan::Device(device_plan::DeviceRoute::Model),
        ForcedPlan::Device(device_plan::DeviceRoute::Fused),
        ForcedPlan::Device(device_plan::DeviceRoute::FusedSkew),
        ForcedPlan::Device(device_plan::DeviceRoute::Chunk64),
        ForcedPlan::Device(device_plan::DeviceRoute::Cp),
    ];

    pub fn name(self) -> &'static str {
        match self {
            ForcedPlan::Kind(k) => k.name(),
            ForcedPlan::FusedLongestFirst => "fused-lf",
            ForcedPlan::FusedSplit => "fused-split",
            ForcedPlan::Device(r) => r.override_name(),
        }
    }

    /// The override that forces this plan for `s`.
    pub fn override_for(self, s: &Shape, caps: &DeviceCaps) -> Result<&'static str, Rejection> {
        match self {
            ForcedPlan::Kind(k) => prefill_override_for(k, s, caps),
            ForcedPlan::FusedLongestFirst => {
                let tile = choose(s, caps, None)?.variant;
                registry::longest_first_of(tile)
                    .or_else(|| {
                        registry::VARIANTS
                            .iter()
                            .find(|v| v.longest_first && v.state == s.state && v.ctas_per_head == 2)
                    })
                    .map(|v| v.name)
                    .ok_or(Rejection::NoVariant {
                        family: Family::Prefill,
                        state: s.state,
                    })
            }
            ForcedPlan::FusedSplit => registry::VARIANTS
                .iter()
                .find(|v| registry::is_split(v) && v.state == s.state)
                .map(|v| v.name)
                .ok_or(Rejection::NoVariant {
                    family: Family::Prefill,
                    state: s.state,
                }),
            ForcedPlan::Device(r) => Ok(r.override_name()),
        }
    }
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
            max_seq_len: 0,
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
