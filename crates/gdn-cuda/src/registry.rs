//! The one table of kernel variants: every exported kernel gdn can launch, with the compilation unit it
//! comes from and its launch constants. `policy.rs` chooses among these; `launch.rs` launches them;
//! `gdn kernels` compiles and reports all of them. A kernel that is not in this table is never launched.
//!
//! Launch constants are copied from the kernel files' headers (each names its exported kernels with
//! block size, CTAs per head and dynamic shared memory); `tests/registry.rs` checks that every name here is
//! exported by its source and that every `extern "C" __global__` in a source is listed here, and every
//! constant that the table also states as a C++ expression is checked by the compiler (`checks_appendix`).

/// Which params struct a variant takes (and which operation it serves).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Family {
    /// `recurrent.cu` `*_t1_*`: one token per request (T = 1), `RecurrentParams`.
    Decode,
    /// `recurrent.cu` `*_tn_*`: T tokens per request (run-time T >= 1), `RecurrentParams`.
    Mtp,
    /// `prefill.cu`: packed varlen chunked prefill in one fused kernel (the "fused" prefill plan),
    /// `PrefillParams`.
    Prefill,
    /// `prefill64.cu` `gdn_prefill64_prep`: first launch of the "chunk64" prefill plan. Per 64-token chunk
    /// slot and value head it prepares the chunk's operands into the workspace; it reads no state, so its
    /// registry `state` is a convention (F32) and is never matched. `Prefill64Params`.
    Prefill64Prep,
    /// `prefill64.cu` `gdn_prefill64_walk_*`: second launch of the "chunk64" plan: walks each sequence's
    /// chunks from the workspace, carrying the state (f32 or bf16 storage). `Prefill64Params`.
    Prefill64Walk,
    /// `prefill64.cu` `gdn_prefill64_cp_pass1_*`: second launch of the context-parallel ("cp") plan: per
    /// segment of L chunks, walks segment 0 for real and summarises the middle segments (transition and
    /// zero-state walk) into the workspace. `Prefill64Params` with `seg_chunks = L`. Two forms: one
    /// warpgroup per walk CTA (a 64-row value half), or two (`…_cp_pass1w_*`, one CTA per head; see
    /// `walk_warpgroups`).
    Prefill64CpPass1,
    /// `prefill64.cu` `gdn_prefill64_cp_scan{,8}`: third launch of the cp plan: each segment's start state
    /// from the summaries, in fp32 (no state storage: `state` is a convention, F32, never matched); 16 or 8
    /// value rows per CTA (`policy::cp_scan_kernel`).
    Prefill64CpScan,
    /// `prefill64.cu` `gdn_prefill64_cp_pass3_*`: last launch of the cp plan: walks segments 1.. for real
    /// from their start states; the last writes new_state. Two forms, as pass 1 (`…_cp_pass3w_*`).
    Prefill64CpPass3,
}

/// Grid layout of a variant (N = requests or sequences, `cph` = `ctas_per_head`).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum GridOrder {
    /// `(N * cph, H, HV / H)`: recurrent.cu ORDER 0.
    HeadMajor,
    /// `(N * HV * cph, 1, 1)`: recurrent.cu ORDER 1 (`_lin`, state-memory order), prefill.cu and the
    /// prefill64 walk.
    Linear,
    /// `((T / 64 + N + 1) · HV, 1, 1)`: one CTA per (64-token chunk slot, value head), heads fastest; the
    /// prefill64 prep.
    /// `T / 64 + N + 1` bounds the number of chunks of any split of T tokens into N sequences (each
    /// sequence's partial last chunk adds at most one) plus one spare slot (`prefill64_slots`).
    ChunkSlots,
    /// `(G, HV, cph)` with G = `prefill64_seg_slots(T, N, L)`: one CTA per (segment slot, value head, `cph`
    /// roles); the context-parallel passes. G depends on the plan's segment length L (`policy::cp_grid`);
    /// without one (`policy::grid_of`) it is the largest, L = 1.
    SegmentSlots,
    /// `(K · HV · cph, 1, 1)` with K = `prefill64_scan_seqs(T, N, L)`: one CTA per (sequence that can have
    /// three segments or more, value head, `cph` row blocks); the context-parallel scan (prefill64.cu v11). Like
    /// `SegmentSlots`, plan-dependent (`policy::cp_grid`; L = 1 without a plan).
    LongSeqs,
    /// `((N + split_groups(N)) · HV, 1, 1)`: the split fused tiles (`gdn_prefill_*_bv128_sp`, prefill.cu v14): one
    /// CTA per (sequence, value head), and room for the longest `split_groups(N)` sequences to run on two.
    SplitLongest,
}

/// Most sequences a split fused tile runs on two CTAs (`SplitLongest`; the kernel reads it back as its grid's spare
/// groups). It splits a sequence longer than (T + 64·N)·HV / SMs tokens (`cost::split_threshold`), and fewer than SMs / HV of those fit in T: 16 covers
/// HV ≥ 8 on 132 SMs; with fewer value heads it is a cap.
pub const SPLIT_MAX_SEQS: u64 = 16;

/// The spare sequence groups of a split tile's grid for N sequences.
pub fn split_groups(n: u64) -> u64 {
    n.min(SPLIT_MAX_SEQS)
}

/// Storage dtype of the recurrent state (the math is fp32 either way).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum StateDtype {
    F32,
    BF16,
}

impl StateDtype {
    pub fn bytes(self) -> u64 {
        match self {
            StateDtype::F32 => 4,
            StateDtype::BF16 => 2,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            StateDtype::F32 => "f32",
            StateDtype::BF16 => "bf16",
        }
    }
}

/// One NVRTC compilation unit: a source file plus defines. All its exported kernels live in one module.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct Module {
    pub id: &'static str,
    pub source: &'static str,
    /// `NAME=VALUE` passed as `-D`.
    pub defines: &'static [&'static str],
}

/// One exported kernel and its launch constants.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct Variant {
    /// The `extern "C"` kernel name.
    pub name: &'static str,
    pub module: &'static Module,
    pub family: Family,
    pub state: StateDtype,
    pub grid: GridOrder,
    /// Threads per block (1-D blocks). Checked on the device against the kernel's `__launch_bounds__`.
    pub block: u32,
    /// Dynamic shared memory bytes per block.
    pub dyn_smem: u32,
    /// Recurrent: CTAs per (request, value head) (`CTAS_PER_HEAD`). Prefill: value-column tiles per
    /// (sequence, value head) (`128 / BV`).
    pub ctas_per_head: u32,
    /// A C++ constant expression of the source that must equal `dyn_smem`; appended to the compile as a
    /// `static_assert`, so a kernel-side change can never silently disagree with this table.
    pub smem_expr: Option<&'static str>,
    /// Likewise for `block`.
    pub block_expr: Option<&'static str>,
    /// On a path the policy takes: `gdn kernels` fails when a hot kernel spills.
    pub hot: bool,
    /// A fused prefill tile that runs the sequences longest first (`gdn_prefill_*_lf`, prefill.cu v13): the same
    /// launch as the plain tile of its width, another CTA-to-sequence map. `candidates` leaves these out; the policy
    /// swaps a plain tile for its build (`longest_first_of`) where `policy::fused_longest_first` says so.
    pub longest_first: bool,
}

pub const RECURRENT: Module = Module {
    id: "recurrent",
    source: "recurrent.cu",
    defines: &[],
};

/// prefill.cu with its default producer warps per variant (`GDN_NP` is for experiments only).
pub const PREFILL: Module = Module {
    id: "prefill",
    source: "prefill.cu",
    defines: &[],
};

/// prefill64.cu: the "chunk64" prefill plan (prep + walk, with a device workspace) and the cp plan's prep,
/// scans and one-warpgroup passes.
pub const PREFILL64: Module = Module {
    id: "prefill64",
    source: "prefill64.cu",
    defines: &[],
};

/// prefill64.cu with `GDN_PREFILL64_WIDE`: only the cp plan's two-warpgroup passes. A module of its own so that
/// a process compiles them (as long as the rest of the file together) only when a plan first needs them.
pub const PREFILL64_WIDE: Module = Module {
    id: "prefill64_wide",
    source: "prefill64.cu",
    defines: &["GDN_PREFILL64_WIDE=1"],
};

/// The device plan's builds (`device_plan.rs`, `GDN_DEVICE_PLAN`): the same kernels under the same names, each taking
/// the plan's thresholds after its params (`params::PrefillPlanParams`, `Prefill64PlanParams`) and exiting when the
/// call is not its launch's. Modules of their own, compiled when a device plan first runs: host-planned calls keep
/// the default builds' code exactly (a longer params struct alone changed the walks' code, +5%, session 23).
pub const PREFILL_DP: Module = Module {
    id: "prefill_dp",
    source: "prefill.cu",
    defines: &["GDN_DEVICE_PLAN=1"],
};
pub const PREFILL64_DP: Module = Module {
    id: "prefill64_dp",
    source: "prefill64.cu",
    defines: &["GDN_DEVICE_PLAN=1"],
};
pub const PREFILL64_WIDE_DP: Module = Module {
    id: "prefill64_wide_dp",
    source: "prefill64.cu",
    defines: &["GDN_PREFILL64_WIDE=1", "GDN_DEVICE_PLAN=1"],
};

const DEVICE_PLAN_BUILDS: [(&Module, &Module); 3] = [
    (&PREFILL, &PREFILL_DP),
    (&PREFILL64, &PREFILL64_DP),
    (&PREFILL64_WIDE, &PREFILL64_WIDE_DP),
];

/// The device plan's build of module `m` (None: `m` has none: decode / MTP).
pub fn device_plan_module(m: &Module) -> Option<&'static Module> {
    DEVICE_PLAN_BUILDS
        .into_iter()
        .find(|(base, _)| base.id == m.id)
        .map(|(_, dp)| dp)
}

/// The module a device plan's build `m` is built from (None: `m` is not one).
fn device_plan_base(m: &Module) -> Option<&'static Module> {
    DEVICE_PLAN_BUILDS
        .into_iter()
        .find(|(_, dp)| dp.id == m.id)
        .map(|(base, _)| base)
}

/// The kernels module `m` exports: the variants registered in it, or, for a device plan's build, those of the
/// module it is built from.
pub fn module_variants(m: &Module) -> impl Iterator<Item = &'static Variant> + '_ {
    VARIANTS.iter().filter(move |v| {
        v.module.id == m.id || device_plan_module(v.module).is_some_and(|dp| dp.id == m.id)
    })
}

/// Head size every kernel assumes (K = V = 128).
pub const HEAD_DIM: u32 = 128;
const WARP: u32 = 32;

/// Facts of `prefill.cu` (the fused kernels) the runtime relies on besides the launch table
/// (checked against the kernel file like every registry constant).
pub mod prefill {
    /// Tokens per chunk (`gdn_prefill::C`): also the most leading token rows the kernels load before
    /// reading `cu_seqlens` (`PrefillParams::lead_rows`).
    pub const CHUNK: usize = 16;
    /// `CHUNK` as the C++ expression the registry check compares it with.
    pub(super) const CHUNK_EXPR: &str = "gdn_prefill::C";
}

/// The launch constants of `prefill64.cu`, in one place. Each is also the C++ constant named beside it,
/// and the compile of `prefill64.cu` fails (`gdn_registry_check`, with both numbers) if they disagree:
/// after changing the kernel, change the number here.
pub mod prefill64 {
    /// Dynamic shared memory of `gdn_prefill64_prep` (bytes) = `gdn_prefill64::PREP_SMEM`.
    pub const PREP_SMEM: u32 = 36_384;
    /// Dynamic shared memory of `gdn_prefill64_walk_*` (bytes) = `gdn_prefill64::WALK_SMEM` (includes
    /// 1 KB of slack: the kernel aligns its swizzled operand panels to 1024 B).
    pub const WALK_SMEM: u32 = 126_992;
    /// Workspace bytes per (chunk slot, value head) = `gdn_prefill64::WS_CHUNK_BYTES`.
    pub const WS_CHUNK_BYTES: u64 = 17_408;
    /// Threads per block of the prep, the walks and the one-warpgroup cp passes (one warpgroup).
    pub const BLOCK: u32 = 128;
    /// Dynamic shared memory (bytes) of the two-warpgroup cp passes `gdn_prefill64_cp_pass{1,3}w_*`
    /// = `gdn_prefill64::WALK2_SMEM`; their block is two warpgroups, `2 · BLOCK`.
    pub const WALK2_SMEM: u32 = 152_592;
    /// Walk CTAs per (sequence, value head): grid.x = N · HV · WALK_CTAS_PER_HEAD (one warpgroup per
    /// 64-row value half).
    pub const WALK_CTAS_PER_HEAD: u32 = 2;
    /// Tokens per chunk (the prep grid has `T / CHUNK + N + 1` slots).
    pub const CHUNK: u64 = 64;
    /// Alignment the workspace pointer must have (bytes).
    pub const WORKSPACE_ALIGN: u64 = 256;
    /// Context-parallel pass 1: CTAs per (segment slot, value head) = 2 value halves x 2 roles.
    pub const CP_PASS1_CTAS: u32 = 4;
    /// Context-parallel pass 3: CTAs per (segment slot, value head) = 2 value halves.
    pub const CP_PASS3_CTAS: u32 = 2;
    /// The two-warpgroup passes: one CTA per head, so pass 1 has 2 (roles) and pass 3 one per (slot, head).
    pub const CP_PASS1W_CTAS: u32 = 2;
    pub const CP_PASS3W_CTAS: u32 = 1;
    /// Context-parallel scan: CTAs per (sequence, value head) (16 value rows each; `gdn_prefill64_cp_scan8`:
    /// 16 CTAs of 8 rows), block, dynamic smem (= `gdn_prefill64::SCAN_SMEM`, both).
    pub const CP_SCAN_CTAS: u32 = 8;
    pub const CP_SCAN8_CTAS: u32 = 16;
    pub const CP_SCAN_BLOCK: u32 = 256;
    pub const CP_SCAN_SMEM: u32 = 147_472;
    /// Workspace bytes per (segment slot, value head) for each of the three f32 [128][128] arrays
    /// (start states, transitions, zero-state walks).
    pub const CP_STATE_BYTES: u64 = 128 * 128 * 4;

    pub(super) const CP_SCAN_SMEM_EXPR: &str = "gdn_prefill64::SCAN_SMEM";

    pub(super) const PREP_SMEM_EXPR: &str = "gdn_prefill64::PREP_SMEM";
    pub(super) const WALK_SMEM_EXPR: &str = "gdn_prefill64::WALK_SMEM";
    pub(super) const WALK2_SMEM_EXPR: &str = "gdn_prefill64::WALK2_SMEM";
    pub(super) const WS_CHUNK_BYTES_EXPR: &str = "gdn_prefill64::WS_CHUNK_BYTES";
}

/// Chunk slots of the prefill64 plan for T tokens in N sequences: `T / 64 + N + 1` (64-bit).
pub fn prefill64_slots(total_tokens: u64, num_seqs: u64) -> u64 {
    (total_tokens / prefill64::CHUNK)
        .saturating_add(num_seqs)
        .saturating_add(1)
}

/// Segment slots of the context-parallel plan with segments of `seg_chunks` (L >= 1) chunks:
/// `(T / 64 + N + 1) / L + N + 1` — sequence i's segments start at `(cu[i] / 64 + i) / L + i`
/// (prefill64.cu, "context parallelism").
pub fn prefill64_seg_slots(total_tokens: u64, num_seqs: u64, seg_chunks: u64) -> u64 {
    prefill64_slots(total_tokens, num_seqs) / seg_chunks.max(1) + num_seqs + 1
}

/// Tokens of the shortest sequence that needs the context-parallel scan with segments of `seg_chunks` (L >= 1)
/// chunks: one with three segments or more has more than 2L chunks, i.e. at least 128·L + 1 tokens.
pub fn prefill64_scan_min_tokens(seg_chunks: u64) -> u64 {
    2 * prefill64::CHUNK * seg_chunks.max(1) + 1
}

/// Sequences that can need the context-parallel scan with segments of `seg_chunks` chunks: their lengths sum
/// to at most T, so `min(N, T / prefill64_scan_min_tokens(L))`. From T, N and L alone (the lengths stay on the
/// device).
pub fn prefill64_scan_seqs(total_tokens: u64, num_seqs: u64, seg_chunks: u64) -> u64 {
    num_seqs.min(total_tokens / prefill64_scan_min_tokens(seg_chunks))
}

/// Workspace bytes of the context-parallel plan: the chunk records plus three f32 states per
/// (segment slot, value head) (64-bit, saturating).
pub fn prefill64_cp_workspace_bytes(
    total_tokens: u64,
    num_seqs: u64,
    num_v_heads: u64,
    seg_chunks: u64,
) -> u64 {
    prefill64_seg_slots(total_tokens, num_seqs, seg_chunks)
        .saturating_mul(num_v_heads)
        .saturating_mul(3 * prefill64::CP_STATE_BYTES)
        .saturating_add(prefill64_record_bytes(total_tokens, num_seqs, num_v_heads))
}

/// Bytes of the prep's chunk records, at the start of every prefill64 workspace: `slots · HV · WS_CHUNK_BYTES`
/// (64-bit; saturates instead of wrapping, so an absurd shape is rejected by the workspace cap rather than
/// under-allocated).
pub fn prefill64_record_bytes(total_tokens: u64, num_seqs: u64, num_v_heads: u64) -> u64 {
    prefill64_slots(total_tokens, num_seqs)
        .saturating_mul(num_v_heads)
        .saturating_mul(prefill64::WS_CHUNK_BYTES)
}

/// Workspace bytes of the chunk64 plan: the records, then the walk's order (`walk_order` in prefill64.cu: the
/// sequences longest first, i64 [N], written by the prep; v13), rounded up to the workspace alignment.
pub fn prefill64_workspace_bytes(total_tokens: u64, num_seqs: u64, num_v_heads: u64) -> u64 {
    let order = num_seqs
        .saturating_mul(8)
        .div_ceil(prefill64::WORKSPACE_ALIGN)
        .saturating_mul(prefill64::WORKSPACE_ALIGN);
    prefill64_record_bytes(total_tokens, num_seqs, num_v_heads).saturating_add(order)
}

/// Module-wide constants (not tied to one kernel) that the table states as C++ expressions:
/// (module id, what, expression, value). Checked like the per-variant ones; the params structs' sizes are
/// checked here too (their offsets are checked against the .cu comments by `tests/registry.rs`).
pub static MODULE_CONSTANTS: &[(&str, &str, &str, u64)] = &[
    (
        "recurrent",
        "params size (params.rs)",
        "sizeof(RecurrentParams)",
        size_of::<crate::params::RecurrentParams>() as u64,
    ),
    (
        "prefill",
        "params size (params.rs)",
        "sizeof(PrefillParams)",
        size_of::<crate::params::PrefillParams>() as u64,
    ),
    (
        "prefill",
        "tokens per chunk = most rows loaded before cu_seqlens (lead_rows)",
        prefill::CHUNK_EXPR,
        prefill::CHUNK as u64,
    ),
    (
        "prefill64",
        "params size (params.rs)",
        "sizeof(Prefill64Params)",
        size_of::<crate::params::Prefill64Params>() as u64,
    ),
    (
        "prefill_dp",
        "device plan params size (params.rs)",
        "sizeof(PrefillPlanParams)",
        size_of::<crate::params::PrefillPlanParams>() as u64,
    ),
    (
        "prefill64_dp",
        "device plan params size (params.rs)",
        "sizeof(Prefill64PlanParams)",
        size_of::<crate::params::Prefill64PlanParams>() as u64,
    ),
    (
        "prefill64_wide_dp",
        "device plan params size (params.rs)",
        "sizeof(Prefill64PlanParams)",
        size_of::<crate::params::Prefill64PlanParams>() as u64,
    ),
    (
        "prefill64_dp",
        "device plan launches (params.rs)",
        "DP_LAUNCHES",
        crate::params::DP_LAUNCHES as u64,
    ),
    (
        "prefill64_dp",
        "most sequences the device plan reads (device_plan.rs; kernels/device_plan.cuh)",
        "DEVICE_PLAN_MAX_N",
        crate::device_plan::DEVICE_PLAN_MAX_N,
    ),
    (
        "prefill64_wide",
        "params size (params.rs)",
        "sizeof(Prefill64Params)",
        size_of::<crate::params::Prefill64Params>() as u64,
    ),
    (
        "prefill64",
        "workspace bytes per chunk slot and value head",
        prefill64::WS_CHUNK_BYTES_EXPR,
        prefill64::WS_CHUNK_BYTES,
    ),
];

const fn recurrent(
    name: &'static str,
    family: Family,
    state: StateDtype,
    grid: GridOrder,
    warps: u32,
    ctas_per_head: u32,
    hot: bool,
) -> Variant {
    Variant {
        name,
        module: &RECURRENT,
        family,
        state,
        grid,
        block: warps * WARP,
        dyn_smem: 0,
        ctas_per_head,
        smem_expr: None,
        block_expr: None,
        hot,
        longest_first: false,
    }
}

const fn prefill(
    name: &'static str,
    state: StateDtype,
    bv: u32,
    other_warps: u32,
    dyn_smem: u32,
    smem_expr: &'static str,
    block_expr: &'static str,
) -> Variant {
    Variant {
        name,
        module: &PREFILL,
        family: Family::Prefill,
        state,
        grid: GridOrder::Linear,
        block: WARP * (bv / 16 + other_warps),
        dyn_smem,
        ctas_per_head: HEAD_DIM / bv,
        smem_expr: Some(smem_expr),
        block_expr: Some(block_expr),
        hot: true,
        longest_first: false,
    }
}

const fn prefill64_kernel(
    name: &'static str,
    family: Family,
    state: StateDtype,
    grid: GridOrder,
    dyn_smem: u32,
    smem_expr: &'static str,
) -> Variant {
    Variant {
        name,
        module: &PREFILL64,
        family,
        state,
        grid,
        block: prefill64::BLOCK,
        dyn_smem,
        ctas_per_head: match (grid, family) {
            (GridOrder::Linear, _) => prefill64::WALK_CTAS_PER_HEAD,
            (GridOrder::SegmentSlots, Family::Prefill64CpPass1) => prefill64::CP_PASS1_CTAS,
            (GridOrder::SegmentSlots, _) => prefill64::CP_PASS3_CTAS,
            _ => 1,
        },
        smem_expr: Some(smem_expr),
        block_expr: None,
        hot: true,
        longest_first: false,
    }
}

/// The longest-first build of a fused prefill tile (`Variant::longest_first`, prefill.cu v13): the plain tile's launch
/// under another name.
const fn longest_first_build(name: &'static str, plain: Variant) -> Variant {
    Variant {
        name,
        longest_first: true,
        ..plain
    }
}

/// The split build of the bv128 fused tile (`GridOrder::SplitLongest`, prefill.cu v14): longest first, and the
/// longest sequences on two CTAs of 64 value rows; the plain tile's block and shared memory.
const fn split_build(name: &'static str, plain: Variant) -> Variant {
    Variant {
        name,
        grid: GridOrder::SplitLongest,
        ..plain
    }
}

/// Whether `v` is a split fused tile (`split_build`).
pub fn is_split(v: &Variant) -> bool {
    v.grid == GridOrder::SplitLongest
}

/// A two-warpgroup context-parallel pass (module `prefill64_wide`): one CTA of 256 threads per head.
const fn cp_wide_pass(name: &'static str, family: Family, state: StateDtype) -> Variant {
    Variant {
        name,
        module: &PREFILL64_WIDE,
        family,
        state,
        grid: GridOrder::SegmentSlots,
        block: 2 * prefill64::BLOCK,
        dyn_smem: prefill64::WALK2_SMEM,
        ctas_per_head: match family {
            Family::Prefill64CpPass1 => prefill64::CP_PASS1W_CTAS,
            _ => prefill64::CP_PASS3W_CTAS,
        },
        smem_expr: Some(prefill64::WALK2_SMEM_EXPR),
        block_expr: None,
        hot: true,
        longest_first: false,
    }
}

/// Warpgroups per walk CTA of a prefill64 walk or cp pass: 1, or 2 for `…_cp_pass{1,3}w_*`.
pub fn walk_warpgroups(v: &Variant) -> u32 {
    v.block / prefill64::BLOCK
}

/// A context-parallel scan kernel (`ctas_per_head` CTAs of 128 / `ctas_per_head` value rows per (sequence, head)).
const fn cp_scan_kernel(name: &'static str, ctas_per_head: u32) -> Variant {
    Variant {
        name,
        module: &PREFILL64,
        family: Family::Prefill64CpScan,
        state: StateDtype::F32, // touches only the fp32 workspace (not matched)
        grid: GridOrder::LongSeqs,
        block: prefill64::CP_SCAN_BLOCK,
        dyn_smem: prefill64::CP_SCAN_SMEM,
        ctas_per_head,
        smem_expr: Some(prefill64::CP_SCAN_SMEM_EXPR),
        block_expr: None,
        hot: true,
        longest_first: false,
    }
}

use std::mem::size_of;
use Family::*;
use GridOrder::{ChunkSlots, HeadMajor, Linear, SegmentSlots};
use StateDtype::{BF16, F32};

/// Every variant gdn knows (recurrent.cu's header lists block / CTAS_PER_HEAD / grid of each export;
/// prefill.cu's dynamic shared memory is `gdn_prefill::smem_bytes<BV, GDN_NP>()`; prefill64.cu's
/// constants are the `prefill64` module above).
/// The wide fused tiles, each in the table twice: plain and longest first (`longest_first_build`).
const PREFILL_F32_BV64: Variant = prefill(
    "gdn_prefill_f32_bv64",
    F32,
    64,
    4,
    151_248,
    "gdn_prefill::smem_bytes<64, gdn_prefill::producers<64>()>()",
    "gdn_prefill::block_threads<64>()",
);
const PREFILL_F32_BV128: Variant = prefill(
    "gdn_prefill_f32_bv128",
    F32,
    128,
    4,
    172_752,
    "gdn_prefill::smem_bytes<128, gdn_prefill::producers<128>()>()",
    "gdn_prefill::block_threads<128>()",
);
const PREFILL_BF16_BV64: Variant = prefill(
    "gdn_prefill_bf16_bv64",
    BF16,
    64,
    4,
    151_248,
    "gdn_prefill::smem_bytes<64, gdn_prefill::producers<64>()>()",
    "gdn_prefill::block_threads<64>()",
);
const PREFILL_BF16_BV128: Variant = prefill(
    "gdn_prefill_bf16_bv128",
    BF16,
    128,
    4,
    172_752,
    "gdn_prefill::smem_bytes<128, gdn_prefill::producers<128>()>()",
    "gdn_prefill::block_threads<128>()",
);

pub static VARIANTS: &[Variant] = &[
    recurrent(
        "gdn_recurrent_f32_t1_v4r2w8",
        Decode,
        F32,
        HeadMajor,
        8,
        8,
        true,
    ),
    recurrent(
        "gdn_recurrent_f32_t1_v4r2w4",
        Decode,
        F32,
        HeadMajor,
        4,
        16,
        true,
    ),
    recurrent(
        "gdn_recurrent_f32_t1_v8r4w4",
        Decode,
        F32,
        HeadMajor,
        4,
        4,
        true,
    ),
    recurrent(
        "gdn_recurrent_f32_t1_v8r4w1_lin",
        Decode,
        F32,
        Linear,
        1,
        16,
        true,
    ),
    recurrent(
        "gdn_recurrent_bf16_t1_v8r2w4",
        Decode,
        BF16,
        HeadMajor,
        4,
        8,
        true,
    ),
    recurrent(
        "gdn_recurrent_bf16_t1_v8r4w2",
        Decode,
        BF16,
        HeadMajor,
        2,
        8,
        true,
    ),
    recurrent(
        "gdn_recurrent_bf16_t1_v8r4w4_lin",
        Decode,
        BF16,
        Linear,
        4,
        4,
        true,
    ),
    recurrent(
        "gdn_recurrent_f32_tn_v8r4w2",
        Mtp,
        F32,
        HeadMajor,
        2,
        8,
        true,
    ),
    recurrent(
        "gdn_recurrent_f32_tn_v8r4w2_lin",
        Mtp,
        F32,
        Linear,
        2,
        8,
        true,
    ),
    recurrent(
        "gdn_recurrent_bf16_tn_v4r4w2",
        Mtp,
        BF16,
        HeadMajor,
        2,
        16,
        true,
    ),
    recurrent(
        "gdn_recurrent_bf16_tn_v4r4w2_lin",
        Mtp,
        BF16,
        Linear,
        2,
        16,
        true,
    ),
    prefill(
        "gdn_prefill_f32_bv16",
        F32,
        16,
        7,
        225_696,
        "gdn_prefill::smem_bytes<16, gdn_prefill::producers<16>()>()",
        "gdn_prefill::block_threads<16>()",
    ),
    prefill(
        "gdn_prefill_f32_bv32",
        F32,
        32,
        6,
        159_000,
        "gdn_prefill::smem_bytes<32, gdn_prefill::producers<32>()>()",
        "gdn_prefill::block_threads<32>()",
    ),
    PREFILL_F32_BV64,
    PREFILL_F32_BV128,
    prefill(
        "gdn_prefill_bf16_bv16",
        BF16,
        16,
        7,
        225_696,
        "gdn_prefill::smem_bytes<16, gdn_prefill::producers<16>()>()",
        "gdn_prefill::block_threads<16>()",
    ),
    prefill(
        "gdn_prefill_bf16_bv32",
        BF16,
        32,
        6,
        159_000,
        "gdn_prefill::smem_bytes<32, gdn_prefill::producers<32>()>()",
        "gdn_prefill::block_threads<32>()",
    ),
    PREFILL_BF16_BV64,
    PREFILL_BF16_BV128,
    longest_first_build("gdn_prefill_f32_bv64_lf", PREFILL_F32_BV64),
    longest_first_build("gdn_prefill_f32_bv128_lf", PREFILL_F32_BV128),
    longest_first_build("gdn_prefill_bf16_bv64_lf", PREFILL_BF16_BV64),
    longest_first_build("gdn_prefill_bf16_bv128_lf", PREFILL_BF16_BV128),
    split_build("gdn_prefill_f32_bv128_sp", PREFILL_F32_BV128),
    split_build("gdn_prefill_bf16_bv128_sp", PREFILL_BF16_BV128),
    prefill64_kernel(
        "gdn_prefill64_prep",
        Prefill64Prep,
        F32, // reads no state (not matched)
        ChunkSlots,
        prefill64::PREP_SMEM,
        prefill64::PREP_SMEM_EXPR,
    ),
    prefill64_kernel(
        "gdn_prefill64_walk_f32",
        Prefill64Walk,
        F32,
        Linear,
        prefill64::WALK_SMEM,
        prefill64::WALK_SMEM_EXPR,
    ),
    prefill64_kernel(
        "gdn_prefill64_walk_bf16",
        Prefill64Walk,
        BF16,
        Linear,
        prefill64::WALK_SMEM,
        prefill64::WALK_SMEM_EXPR,
    ),
    prefill64_kernel(
        "gdn_prefill64_cp_pass1_f32",
        Prefill64CpPass1,
        F32,
        SegmentSlots,
        prefill64::WALK_SMEM,
        prefill64::WALK_SMEM_EXPR,
    ),
    prefill64_kernel(
        "gdn_prefill64_cp_pass1_bf16",
        Prefill64CpPass1,
        BF16,
        SegmentSlots,
        prefill64::WALK_SMEM,
        prefill64::WALK_SMEM_EXPR,
    ),
    cp_scan_kernel("gdn_prefill64_cp_scan", prefill64::CP_SCAN_CTAS),
    cp_scan_kernel("gdn_prefill64_cp_scan8", prefill64::CP_SCAN8_CTAS),
    prefill64_kernel(
        "gdn_prefill64_cp_pass3_f32",
        Prefill64CpPass3,
        F32,
        SegmentSlots,
        prefill64::WALK_SMEM,
        prefill64::WALK_SMEM_EXPR,
    ),
    prefill64_kernel(
        "gdn_prefill64_cp_pass3_bf16",
        Prefill64CpPass3,
        BF16,
        SegmentSlots,
        prefill64::WALK_SMEM,
        prefill64::WALK_SMEM_EXPR,
    ),
    cp_wide_pass("gdn_prefill64_cp_pass1w_f32", Prefill64CpPass1, F32),
    cp_wide_pass("gdn_prefill64_cp_pass1w_bf16", Prefill64CpPass1, BF16),
    cp_wide_pass("gdn_prefill64_cp_pass3w_f32", Prefill64CpPass3, F32),
    cp_wide_pass("gdn_prefill64_cp_pass3w_bf16", Prefill64CpPass3, BF16),
];

/// The distinct compilation units, in table order.
pub fn modules() -> Vec<&'static Module> {
    let mut out: Vec<&'static Module> = Vec::new();
    for v in VARIANTS {
        if !out.iter().any(|m| m.id == v.module.id) {
            out.push(v.module);
        }
    }
    let dp: Vec<&'static Module> = out.iter().filter_map(|m| device_plan_module(m)).collect();
    out.extend(dp);
    out
}

/// A variant by kernel name.
pub fn find(name: &str) -> Option<&'static Variant> {
    VARIANTS.iter().find(|v| v.name == name)
}

/// The variants of one family and state dtype, in table order.
/// The kernels of `family` for `state` (for the fused prefill, the plain tiles: not the longest-first or split builds).
pub fn candidates(family: Family, state: StateDtype) -> impl Iterator<Item = &'static Variant> {
    VARIANTS
        .iter()
        .filter(move |v| v.family == family && v.state == state && !v.longest_first && !is_split(v))
}

/// The split build of fused prefill tile `v` (the same state and width; `v` itself when it is one), or None.
pub fn split_of(v: &Variant) -> Option<&'static Variant> {
    VARIANTS.iter().find(|w| {
        is_split(w)
            && w.family == v.family
            && w.state == v.state
            && w.ctas_per_head == v.ctas_per_head
    })
}

/// The longest-first build of fused prefill tile `v` (the same state and width; `v` itself when it is one), or None
/// (a tile without one: bv16, bv32, whose calls are short and latency-bound).
pub fn longest_first_of(v: &Variant) -> Option<&'static Variant> {
    VARIANTS.iter().find(|w| {
        w.longest_first
            && w.family == v.family
            && w.state == v.state
            && w.ctas_per_head == v.ctas_per_head
    })
}

/// The text appended to a module's source before compiling: one check per launch constant that the
/// table states as a C++ expression, so the registry and the kernel file cannot drift apart. A mismatch
/// fails the compile with both numbers (`[with Got=..., Want=...]` in NVRTC's log).
pub fn checks_appendix(m: &Module) -> String {
    let mut out = String::from(
        "\n// ---- appended by gdn-cuda registry.rs: the registry's launch constants must match\n\
         template <int Id, long long Got, long long Want> struct gdn_registry_check {\n\
         \x20   static_assert(Got == Want, \"gdn-cuda registry.rs disagrees with this kernel file: \
         update the registry to Got\");\n};\n",
    );
    let mut id = 0;
    for v in module_variants(m) {
        for (what, expr, value) in [
            ("dynamic smem", v.smem_expr, v.dyn_smem),
            ("block", v.block_expr, v.block),
        ] {
            if let Some(e) = expr {
                id += 1;
                out.push_str(&format!(
                    "template struct gdn_registry_check<{id}, ({e}), {value}>;  // {} {what}\n",
                    v.name
                ));
            }
        }
    }
    // (a device plan's build checks its own constants and those of the module it is built from)
    let base = device_plan_base(m).map_or(m.id, |b| b.id);
    for (_, what, expr, value) in MODULE_CONSTANTS
        .iter()
        .filter(|c| c.0 == m.id || c.0 == base)
    {
        id += 1;
        out.push_str(&format!(
            "template struct gdn_registry_check<{id}, ({expr}), {value}>;  // {what}\n"
        ));
    }
    out
}

/// A module's full compile text: its source plus the registry checks.
pub fn module_source(m: &Module, source: &str) -> String {
    format!("{source}{}", checks_appendix(m))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `prefill64_scan_seqs` bounds the sequences with more than 2L chunks for every split of T tokens into
    /// N sequences (the scan kernel trusts it: its grid stops there), and the bound is reached.
    #[test]
    fn scan_seqs_bound_every_split() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut rnd = |m: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % m
        };
        for _ in 0..2000 {
            let (n, l) = (1 + rnd(40), 1 + rnd(6));
            let t = rnd(20_000);
            // random split: N − 1 cut points in [0, T]
            let mut cuts: Vec<u64> = (0..n - 1).map(|_| rnd(t + 1)).collect();
            cuts.push(0);
            cuts.push(t);
            cuts.sort_unstable();
            let long = cuts.windows(2).filter(|w| w[1] - w[0] > 128 * l).count() as u64;
            let k = prefill64_scan_seqs(t, n, l);
            assert!(long <= k, "T {t} N {n} L {l}: {long} > {k}");
            // reached: k sequences of 128L + 1 tokens, the rest of T in one more (or in the last of them)
            let mut lens = vec![128 * l + 1; k as usize];
            let rest = t - k * (128 * l + 1);
            match lens.last_mut() {
                Some(last) if k == n => *last += rest,
                _ => lens.push(rest),
            }
            assert!(lens.len() as u64 <= n && lens.iter().sum::<u64>() == t);
            assert_eq!(lens.iter().filter(|&&x| x > 128 * l).count() as u64, k);
        }
        assert_eq!(prefill64_scan_seqs(8192, 44, 10), 6);
        assert_eq!(prefill64_scan_seqs(65_536, 1, 64), 1);
        assert_eq!(prefill64_scan_seqs(256, 8, 2), 0); // no sequence can have three segments: no launch
    }

    #[test]
    fn names_are_unique() {
        for (i, a) in VARIANTS.iter().enumerate() {
            assert!(
                VARIANTS[i + 1..].iter().all(|b| b.name != a.name),
                "{}",
                a.name
            );
        }
    }

    #[test]
    fn prefill64_constants_are_checked_against_the_source() {
        let text = checks_appendix(&PREFILL64);
        for (expr, value) in [
            (prefill64::PREP_SMEM_EXPR, prefill64::PREP_SMEM as u64),
            (prefill64::WALK_SMEM_EXPR, prefill64::WALK_SMEM as u64),
            (prefill64::WS_CHUNK_BYTES_EXPR, prefill64::WS_CHUNK_BYTES),
        ] {
            assert!(
                text.contains(&format!("({expr}), {value}>")),
                "{expr} not checked:\n{text}"
            );
        }
        // prep + two walks + two pass-1 + two scans + two pass-3 (dynamic smem each) + params size + the
        // workspace constant
        assert_eq!(text.matches("gdn_registry_check<").count(), 9 + 2);
        assert!(text.contains("(gdn_prefill64::SCAN_SMEM), 147472>"));
        assert!(text.contains("(sizeof(Prefill64Params)), 128>"));
        assert!(!checks_appendix(&PREFILL).contains("gdn_prefill64"));
        // the wide module: its four passes' smem and the params size, nothing of the other module
        let wide = checks_appendix(&PREFILL64_WIDE);
        assert_eq!(wide.matches("gdn_registry_check<").count(), 4 + 1);
        assert_eq!(
            wide.matches("(gdn_prefill64::WALK2_SMEM), 152592>").count(),
            4
        );
        assert!(!wide.contains("WALK_SMEM)") && !wide.contains("PREP_SMEM"));
        // the device plan's builds: the same kernels' checks, the base params and workspace constants, their own
        // params size and (prefill64_dp) the sequence limit and the persistent launches' count (vgrid)
        let dp = checks_appendix(&PREFILL64_DP);
        assert_eq!(dp.matches("gdn_registry_check<").count(), 9 + 2 + 3);
        assert!(dp.contains("(sizeof(Prefill64Params)), 128>"));
        assert!(dp.contains("(sizeof(Prefill64PlanParams)), 224>"));
        assert!(dp.contains("(DEVICE_PLAN_MAX_N), 256>"));
        assert!(dp.contains("(DP_LAUNCHES), 5>"));
        let wide_dp = checks_appendix(&PREFILL64_WIDE_DP);
        assert_eq!(wide_dp.matches("gdn_registry_check<").count(), 4 + 1 + 1);
        assert!(checks_appendix(&PREFILL_DP).contains("(sizeof(PrefillPlanParams)), 128>"));
        assert_eq!(
            modules()
                .iter()
                .filter(|m| m.source == "prefill64.cu")
                .count(),
            4
        );
        assert_eq!(
            device_plan_module(&PREFILL64_WIDE),
            Some(&PREFILL64_WIDE_DP)
        );
        assert_eq!(device_plan_module(&RECURRENT), None);
        assert_eq!(
            module_variants(&PREFILL64_DP).count(),
            module_variants(&PREFILL64).count()
        );
        assert!(checks_appendix(&PREFILL).contains("(gdn_prefill::C), 16>"));
    }

    #[test]
    fn prefill64_workspace_formula_is_64_bit() {
        assert_eq!(prefill64_slots(0, 0), 1);
        assert_eq!(prefill64_slots(63, 1), 2);
        assert_eq!(prefill64_slots(64, 1), 3);
        assert_eq!(prefill64_slots(65_536, 1), 1026);
        // 4M tokens in 4096 sequences, 64 value heads: 69633 slots, ~222 GB (past u32 and i32)
        let t = 4 << 20;
        assert_eq!(prefill64_slots(t, 4096), 65_536 + 4096 + 1);
        assert_eq!(
            prefill64_record_bytes(t, 4096, 64),
            69_633 * 64 * prefill64::WS_CHUNK_BYTES
        );
        // the chunk64 plan adds the walk's order: 8 bytes per sequence, rounded up to 256
        assert_eq!(
            prefill64_workspace_bytes(t, 4096, 64),
            69_633 * 64 * prefill64::WS_CHUNK_BYTES + 4096 * 8
        );
        assert_eq!(
            prefill64_workspace_bytes(64, 3, 8) - prefill64_record_bytes(64, 3, 8),
            256
        );
        assert!(prefill64_workspace_bytes(t, 4096, 64) > u32::MAX as u64);
        assert_eq!(prefill64_workspace_bytes(u64::MAX, 1, 8), u64::MAX);
        assert_eq!(prefill64_workspace_bytes(64, u64::MAX, 8), u64::MAX);
    }

    #[test]
    fn cp_segment_slots_cover_every_split() {
        // g(i) = f(i) / L + i with f(i) = cu[i] / 64 + i must leave nseg_i = max(1, ceil(nch_i / L)) slots per
        // sequence below prefill64_seg_slots: checked over every split of small T into N sequences.
        for t in [0u64, 1, 63, 64, 65, 130, 300, 700] {
            for n in 1u64..=4 {
                for l in [1u64, 2, 3, 7] {
                    let mut splits = vec![vec![0u64]];
                    for _ in 1..n {
                        splits = splits
                            .into_iter()
                            .flat_map(|s| {
                                let last = *s.last().unwrap();
                                (last..=t).step_by(((t / 6).max(1)) as usize).map(move |x| {
                                    let mut s2 = s.clone();
                                    s2.push(x);
                                    s2
                                })
                            })
                            .collect();
                    }
                    for mut cu in splits {
                        cu.push(t);
                        let g = |i: usize| (cu[i] / 64 + i as u64) / l + i as u64;
                        for i in 0..n as usize {
                            let nch = (cu[i + 1] - cu[i]).div_ceil(64);
                            let nseg = nch.div_ceil(l).max(1);
                            let next = if i + 1 < n as usize {
                                g(i + 1)
                            } else {
                                u64::MAX
                            };
                            assert!(g(i) + nseg <= next, "overlap {cu:?} L={l} i={i}");
                            assert!(g(i) + nseg <= prefill64_seg_slots(t, n, l), "{cu:?} L={l}");
                        }
                    }
                }
            }
        }
        assert_eq!(
            prefill64_cp_workspace_bytes(65_536, 1, 8, 128),
            prefill64_record_bytes(65_536, 1, 8) + (1026 / 128 + 2) * 8 * 3 * 65_536
        );
    }
}
