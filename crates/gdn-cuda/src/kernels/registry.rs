//! The one table of kernel variants: every exported kernel gdn can launch, with the compilation unit it
//! comes from and its launch constants. `plan/` chooses among these; `exec/` launches them;
//! `gdn kernels` compiles and reports all of them. A kernel that is not in this table is never launched.
//!
//! Launch constants are copied from the kernel files' headers (each names its exported kernels with
//! block size, CTAs per head and dynamic shared memory); `tests/registry.rs` checks that every name here is
//! exported by its source and that every `extern "C" __global__` in a source is listed here, and every
//! constant that the table also states as a C++ expression is checked by the compiler (`checks_appendix`).

pub use super::modules::*;

/// Which params struct a variant takes (and which operation it serves).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Family {
    /// `recurrent.cu` `*_t1_*`: one token per request (T = 1), `RecurrentParams`.
    Decode,
    /// `recurrent.cu` `*_tn_*`: T tokens per request (run-time T >= 1), `RecurrentParams`.
    Mtp,
    /// `prefill_fused.cu`: packed varlen chunked prefill in one fused kernel (the "fused" prefill plan),
    /// `PrefillParams`.
    Prefill,
    /// `prefill_chunk64.cu` `gdn_prefill64_prep`: first launch of the "chunk64" prefill plan. Per 64-token chunk
    /// slot and value head it prepares the chunk's operands into the workspace; it reads no state, so its
    /// registry `state` is a convention (F32) and is never matched. `Prefill64Params`.
    Prefill64Prep,
    /// `prefill_chunk64.cu` `gdn_prefill64_walk_*`: second launch of the "chunk64" plan: walks each sequence's
    /// chunks from the workspace, carrying the state (f32 or bf16 storage). `Prefill64Params`.
    Prefill64Walk,
    /// `prefill_chunk64.cu` `gdn_prefill64_cp_pass1_*`: second launch of the context-parallel ("cp") plan: per
    /// segment of L chunks, walks segment 0 for real and summarises the middle segments (transition and
    /// zero-state walk) into the workspace, or, for a head whose gates allow exact cuts, runs the segments'
    /// warm-up walks and copies the initial state. `Prefill64Params` with `seg_chunks = L` (| `CP_EXACT`: no
    /// cuts). Two forms: one
    /// warpgroup per walk CTA (a 64-row value half), or two (`…_cp_pass1w_*`, one CTA per head; see
    /// `walk_warpgroups`).
    Prefill64CpPass1,
    /// `prefill_chunk64.cu` `gdn_prefill64_cp_scan{,8}`: third launch of the cp plan: each segment's start state
    /// from the summaries, in fp32 (no state storage: `state` is a convention, F32, never matched); 16 or 8
    /// value rows per CTA (`plan::prefill::host::cp_scan_kernel`).
    Prefill64CpScan,
    /// `prefill_chunk64.cu` `gdn_prefill64_cp_pass3_*`: last launch of the cp plan: walks segments 1.. (every
    /// segment, for a head that cuts) for real from their start states; the last writes new_state. Two forms, as
    /// pass 1 (`…_cp_pass3w_*`).
    Prefill64CpPass3,
}

/// Grid layout of a variant (N = requests or sequences, `cph` = `ctas_per_head`).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum GridOrder {
    /// `(N * cph, H, HV / H)`: recurrent.cu ORDER 0.
    HeadMajor,
    /// `(N * HV * cph, 1, 1)`: recurrent.cu ORDER 1 (`_lin`, state-memory order), prefill_fused.cu and the
    /// prefill64 walk.
    Linear,
    /// `((T / 64 + N + 1) · HV, 1, 1)`: one CTA per (64-token chunk slot, value head), heads fastest; the
    /// prefill64 prep.
    /// `T / 64 + N + 1` bounds the number of chunks of any split of T tokens into N sequences (each
    /// sequence's partial last chunk adds at most one) plus one spare slot (`prefill64_slots`).
    ChunkSlots,
    /// `(G, HV, cph)` with G = `prefill64_seg_slots(T, N, L)`: one CTA per (segment slot, value head, `cph`
    /// roles); the context-parallel passes. G depends on the plan's segment length L (`plan::grid::cp_grid`);
    /// without one (`plan::grid::grid_of`) it is the largest, L = 1.
    SegmentSlots,
    /// `(K · HV · cph, 1, 1)` with K = `prefill64_scan_seqs(T, N, L)`: one CTA per (sequence that can have
    /// three segments or more, value head, `cph` row blocks); the context-parallel scan. Like
    /// `SegmentSlots`, plan-dependent (`plan::grid::cp_grid`; L = 1 without a plan).
    LongSeqs,
    /// `((N + split_groups(N)) · HV, 1, 1)`: the split fused tiles (`gdn_prefill_*_bv128_sp`): one
    /// CTA per (sequence, value head), and room for the longest `split_groups(N)` sequences to run on two.
    SplitLongest,
}

/// Most sequences a split fused tile runs on two CTAs (`SplitLongest`; the kernel reads it back as its grid's spare
/// groups). It splits a sequence longer than (T + 64·N)·HV / SMs tokens (`plan::prefill::cost::split_threshold`),
/// and fewer than SMs / HV of those fit in T: 16 covers HV ≥ 8 on 132 SMs; with fewer value heads it is a cap.
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
    /// A fused prefill tile that runs the sequences longest first (`gdn_prefill_*_lf`): the same
    /// launch as the plain tile of its width, another CTA-to-sequence map. `candidates` leaves these out; the policy
    /// swaps a plain tile for its build (`longest_first_of`) where `plan::prefill::host::fused_longest_first` says so.
    pub longest_first: bool,
}

/// The kernels module `m` exports: the variants registered in it, or, for a build of another module, those of the
/// module it is built from.
pub fn module_variants(m: &Module) -> impl Iterator<Item = &'static Variant> + '_ {
    let base = build_base(m).map_or(m.id, |b| b.id);
    let f16 = m.id == RECURRENT_F16.id;
    VARIANTS
        .iter()
        .filter(move |v| v.module.id == base && (!f16 || in_recurrent_f16(v.name)))
}

/// Head size every kernel assumes (K = V = 128).
pub const HEAD_DIM: u32 = 128;
const WARP: u32 = 32;

/// Facts of `prefill_fused.cu` (the fused kernels) the runtime relies on besides the launch table
/// (checked against the kernel file like every registry constant).
pub mod prefill {
    /// Tokens per chunk (`gdn_prefill::C`): also the most leading token rows the kernels load before
    /// reading `cu_seqlens` (`PrefillParams::lead_rows`).
    pub const CHUNK: usize = 16;
    /// `CHUNK` as the C++ expression the registry check compares it with.
    pub const CHUNK_EXPR: &str = "gdn_prefill::C";
}

/// The launch constants of `prefill_chunk64.cu`, in one place. Each is also the C++ constant named beside it,
/// and the compile of `prefill_chunk64.cu` fails (`gdn_registry_check`, with both numbers) if they disagree:
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
    /// `Prefill64Params::seg_chunks`: the bit that keeps the cp plan off its cuts (every head on the affine path)
    /// = `gdn_prefill64::CP_EXACT`; the segment length L takes the bits below it.
    pub const CP_EXACT: u64 = 1 << 30;
    pub const CP_EXACT_EXPR: &str = "gdn_prefill64::CP_EXACT";
    /// The longest segment (chunks) `seg_chunks` holds.
    pub const MAX_SEG_CHUNKS: u64 = CP_EXACT - 1;

    pub const CP_SCAN_SMEM_EXPR: &str = "gdn_prefill64::SCAN_SMEM";

    pub const PREP_SMEM_EXPR: &str = "gdn_prefill64::PREP_SMEM";
    pub const WALK_SMEM_EXPR: &str = "gdn_prefill64::WALK_SMEM";
    pub const WALK2_SMEM_EXPR: &str = "gdn_prefill64::WALK2_SMEM";
    pub const WS_CHUNK_BYTES_EXPR: &str = "gdn_prefill64::WS_CHUNK_BYTES";
}

/// Most sequences the device plan's builds read lengths of (`DEVICE_PLAN_MAX_N` in kernels/common/device_plan.cuh:
/// 8 per lane).
pub const DEVICE_PLAN_MAX_N: u64 = 256;

/// The device plan's prefill64 launches (prep, walk, cp pass 1, cp scan, cp pass 3): `DP_LAUNCHES` in
/// prefill_chunk64.cu, the length of `abi::params::Prefill64PlanParams::vgrid`.
pub const DP_LAUNCHES: usize = 5;

/// Bytes of each params struct (`sizeof` on the CUDA side, checked by every compile; `abi::params` asserts
/// its `#[repr(C)]` mirrors have the same sizes).
pub mod params_size {
    pub const RECURRENT: u64 = 264;
    /// `PrefillParams`, definition build (no serving block).
    pub const PREFILL: u64 = 112;
    /// `PrefillParams`, serving build (`GDN_SERVING`: the pool's row count and the serving block appended).
    pub const PREFILL_SV: u64 = 256;
    pub const PREFILL64: u64 = 128;
    pub const PREFILL64_SV: u64 = 272;
    /// `PrefillPlanParams` (the device plan's fused builds): the thresholds, then `PrefillParams`.
    pub const PREFILL_PLAN: u64 = 128;
    pub const PREFILL_PLAN_SV: u64 = 272;
    /// `Prefill64PlanParams` (the device plan's prefill64 builds): the thresholds, then `Prefill64Params`.
    pub const PREFILL64_PLAN: u64 = 224;
    pub const PREFILL64_PLAN_SV: u64 = 368;
}

/// Module-wide constants (not tied to one kernel) that the table states as C++ expressions:
/// (module id, what, expression, value). Checked like the per-variant ones; the params structs' sizes are
/// checked here too (their offsets are checked against the .cu comments by `tests/registry.rs`).
pub static MODULE_CONSTANTS: &[(&str, &str, &str, u64)] = &[
    (
        "recurrent",
        "params size (abi::params)",
        "sizeof(RecurrentParams)",
        params_size::RECURRENT,
    ),
    (
        "prefill",
        PSIZE,
        "sizeof(PrefillParams)",
        params_size::PREFILL,
    ),
    (
        "prefill_sv",
        PSIZE,
        "sizeof(PrefillParams)",
        params_size::PREFILL_SV,
    ),
    (
        "prefill_dp",
        PSIZE,
        "sizeof(PrefillPlanParams)",
        params_size::PREFILL_PLAN,
    ),
    (
        "prefill_sv_dp",
        PSIZE,
        "sizeof(PrefillPlanParams)",
        params_size::PREFILL_PLAN_SV,
    ),
    (
        "prefill",
        "tokens per chunk = most rows loaded before cu_seqlens (lead_rows)",
        prefill::CHUNK_EXPR,
        prefill::CHUNK as u64,
    ),
    (
        "prefill64",
        PSIZE,
        "sizeof(Prefill64Params)",
        params_size::PREFILL64,
    ),
    (
        "prefill64_sv",
        PSIZE,
        "sizeof(Prefill64Params)",
        params_size::PREFILL64_SV,
    ),
    (
        "prefill64_dp",
        PSIZE,
        "sizeof(Prefill64PlanParams)",
        params_size::PREFILL64_PLAN,
    ),
    (
        "prefill64_sv_dp",
        PSIZE,
        "sizeof(Prefill64PlanParams)",
        params_size::PREFILL64_PLAN_SV,
    ),
    (
        "prefill64_wide",
        PSIZE,
        "sizeof(Prefill64Params)",
        params_size::PREFILL64,
    ),
    (
        "prefill64_wide_sv",
        PSIZE,
        "sizeof(Prefill64Params)",
        params_size::PREFILL64_SV,
    ),
    (
        "prefill64_wide_dp",
        PSIZE,
        "sizeof(Prefill64PlanParams)",
        params_size::PREFILL64_PLAN,
    ),
    (
        "prefill64_wide_sv_dp",
        PSIZE,
        "sizeof(Prefill64PlanParams)",
        params_size::PREFILL64_PLAN_SV,
    ),
    (
        "prefill64_dp",
        "device plan launches (abi::params)",
        "DP_LAUNCHES",
        DP_LAUNCHES as u64,
    ),
    (
        "prefill64_dp",
        "most sequences the device plan reads",
        "DEVICE_PLAN_MAX_N",
        DEVICE_PLAN_MAX_N,
    ),
    (
        "prefill64",
        "workspace bytes per chunk slot and value head",
        prefill64::WS_CHUNK_BYTES_EXPR,
        prefill64::WS_CHUNK_BYTES,
    ),
    (
        "prefill64",
        "the cp plan's no-cut bit in seg_chunks",
        prefill64::CP_EXACT_EXPR,
        prefill64::CP_EXACT,
    ),
];
const PSIZE: &str = "params size (abi::params)";

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

/// A one-warpgroup prefill64 kernel; `smem`: its dynamic shared memory and the C++ constant that equals it.
const fn prefill64_kernel(
    name: &'static str,
    family: Family,
    state: StateDtype,
    grid: GridOrder,
    smem: (u32, &'static str),
) -> Variant {
    let (dyn_smem, smem_expr) = smem;
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

/// The longest-first build of a fused prefill tile (`Variant::longest_first`): the plain tile's launch
/// under another name.
const fn longest_first_build(name: &'static str, plain: Variant) -> Variant {
    Variant {
        name,
        longest_first: true,
        ..plain
    }
}

/// The split build of the bv128 fused tile (`GridOrder::SplitLongest`): longest first, and the
/// longest sequences on two CTAs of 64 value rows; the plain tile's block and shared memory.
const fn split_build(name: &'static str, plain: Variant) -> Variant {
    Variant {
        name,
        grid: GridOrder::SplitLongest,
        ..plain
    }
}

/// Whether `v` is a compact fused tile (`compact_tile!`, named `…_np2`).
pub fn is_compact(v: &Variant) -> bool {
    v.family == Family::Prefill && v.name.ends_with("_np2")
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

use Family::*;
use GridOrder::{ChunkSlots, HeadMajor, Linear, SegmentSlots};
use StateDtype::{BF16, F32};

/// A fused prefill tile of width `bv` (`prefill`), with the C++ expressions of its shared memory and block
/// size that the compile checks against `dyn_smem` and the block.
macro_rules! prefill_tile {
    ($name:literal, $state:expr, $bv:literal, $other_warps:literal, $smem:literal) => {
        prefill(
            $name,
            $state,
            $bv,
            $other_warps,
            $smem,
            concat!(
                "gdn_prefill::smem_bytes<",
                $bv,
                ", gdn_prefill::producers<",
                $bv,
                ">()>()"
            ),
            concat!("gdn_prefill::block_threads<", $bv, ">()"),
        )
    };
}

/// A compact fused tile (`_np2`, `gdn_prefill::COMPACT_NP` producers): the tile of width `bv` with a smaller ring, for GPUs
/// whose blocks cannot take the default tiles' shared memory (99 KB on sm_86, sm_89, sm_120). `walkers_over`: its walker
/// warps beyond one per 16 value rows (the output walkers of bv32's mirror scheme).
macro_rules! compact_tile {
    ($name:literal, $state:expr, $bv:literal, $walkers_over:literal, $smem:literal) => {
        prefill(
            $name,
            $state,
            $bv,
            $walkers_over + 2,
            $smem,
            concat!(
                "gdn_prefill::smem_bytes<",
                $bv,
                ", gdn_prefill::COMPACT_NP>()"
            ),
            concat!(
                "gdn_prefill::block_threads<",
                $bv,
                ", gdn_prefill::COMPACT_NP>()"
            ),
        )
    };
}

/// prefill_chunk64.cu's shared-memory sizes with the C++ constant each is checked against.
const PREP: (u32, &str) = (prefill64::PREP_SMEM, prefill64::PREP_SMEM_EXPR);
const WALK: (u32, &str) = (prefill64::WALK_SMEM, prefill64::WALK_SMEM_EXPR);

// The wide fused tiles: each is in the table as itself, as its longest-first build (`longest_first_build`)
// and, for bv128, as its split build (`split_build`).
const PREFILL_F32_BV64: Variant = prefill_tile!("gdn_prefill_f32_bv64", F32, 64, 4, 151_248);
const PREFILL_F32_BV128: Variant = prefill_tile!("gdn_prefill_f32_bv128", F32, 128, 4, 172_752);
const PREFILL_BF16_BV64: Variant = prefill_tile!("gdn_prefill_bf16_bv64", BF16, 64, 4, 151_248);
const PREFILL_BF16_BV128: Variant = prefill_tile!("gdn_prefill_bf16_bv128", BF16, 128, 4, 172_752);

/// Every variant gdn knows. recurrent.cu's header lists block / CTAS_PER_HEAD / grid of each export;
/// prefill_fused.cu's dynamic shared memory is `gdn_prefill::smem_bytes<BV, producers>()`; prefill_chunk64.cu's
/// constants are the `prefill64` module above.
#[rustfmt::skip]
pub static VARIANTS: &[Variant] = &[
    //        name                                family  state  grid       warps  CTAs/head  hot
    recurrent("gdn_recurrent_f32_t1_v4r2w8",      Decode, F32,   HeadMajor, 8,     8,         true),
    recurrent("gdn_recurrent_f32_t1_v4r2w4",      Decode, F32,   HeadMajor, 4,     16,        true),
    recurrent("gdn_recurrent_f32_t1_v8r4w4",      Decode, F32,   HeadMajor, 4,     4,         true),
    recurrent("gdn_recurrent_f32_t1_v8r4w1_lin",  Decode, F32,   Linear,    1,     16,        true),
    recurrent("gdn_recurrent_bf16_t1_v8r2w4",     Decode, BF16,  HeadMajor, 4,     8,         true),
    recurrent("gdn_recurrent_bf16_t1_v8r4w2",     Decode, BF16,  HeadMajor, 2,     8,         true),
    recurrent("gdn_recurrent_bf16_t1_v8r4w4_lin", Decode, BF16,  Linear,    4,     4,         true),
    recurrent("gdn_recurrent_f32_tn_v8r4w2",      Mtp,    F32,   HeadMajor, 2,     8,         true),
    recurrent("gdn_recurrent_f32_tn_v8r4w2_lin",  Mtp,    F32,   Linear,    2,     8,         true),
    recurrent("gdn_recurrent_bf16_tn_v4r4w2",     Mtp,    BF16,  HeadMajor, 2,     16,        true),
    recurrent("gdn_recurrent_bf16_tn_v4r4w2_lin", Mtp,    BF16,  Linear,    2,     16,        true),
    // serving builds, k-last state (`_sv`: the definition kernel's launch; calls with any serving mode)
    recurrent("gdn_recurrent_f32_t1_v4r2w8_sv",      Decode, F32,   HeadMajor, 8,     8,         true),
    recurrent("gdn_recurrent_f32_t1_v4r2w4_sv",      Decode, F32,   HeadMajor, 4,     16,        true),
    recurrent("gdn_recurrent_f32_t1_v8r4w4_sv",      Decode, F32,   HeadMajor, 4,     4,         true),
    recurrent("gdn_recurrent_f32_t1_v8r4w1_lin_sv",  Decode, F32,   Linear,    1,     16,        true),
    recurrent("gdn_recurrent_bf16_t1_v8r2w4_sv",     Decode, BF16,  HeadMajor, 4,     8,         true),
    recurrent("gdn_recurrent_bf16_t1_v8r4w2_sv",     Decode, BF16,  HeadMajor, 2,     8,         true),
    recurrent("gdn_recurrent_bf16_t1_v8r4w4_lin_sv", Decode, BF16,  Linear,    4,     4,         true),
    recurrent("gdn_recurrent_f32_tn_v8r4w2_sv",      Mtp,    F32,   HeadMajor, 2,     8,         true),
    recurrent("gdn_recurrent_f32_tn_v8r4w2_lin_sv",  Mtp,    F32,   Linear,    2,     8,         true),
    recurrent("gdn_recurrent_bf16_tn_v4r4w2_sv",     Mtp,    BF16,  HeadMajor, 2,     16,        true),
    recurrent("gdn_recurrent_bf16_tn_v4r4w2_lin_sv", Mtp,    BF16,  Linear,    2,     16,        true),
    // serving builds, K-first state (`_kf`: calls with K-first state tensors, `plan::decode::RECURRENT_KFIRST_TABLE`)
    recurrent("gdn_recurrent_f32_t1_v8r4w4_kf",      Decode, F32,   HeadMajor, 4,     4,         true),
    recurrent("gdn_recurrent_f32_t1_v8r4w4_lin_kf",  Decode, F32,   Linear,    4,     4,         true),
    recurrent("gdn_recurrent_bf16_t1_v8r8w4_kf",     Decode, BF16,  HeadMajor, 4,     2,         true),
    recurrent("gdn_recurrent_bf16_t1_v8r8w4_lin_kf", Decode, BF16,  Linear,    4,     2,         true),
    recurrent("gdn_recurrent_f32_tn_v8r4w4_kf",      Mtp,    F32,   HeadMajor, 4,     4,         true),
    recurrent("gdn_recurrent_f32_tn_v8r4w4_lin_kf",  Mtp,    F32,   Linear,    4,     4,         true),
    recurrent("gdn_recurrent_bf16_tn_v8r8w4_kf",     Mtp,    BF16,  HeadMajor, 4,     2,         true),
    recurrent("gdn_recurrent_bf16_tn_v8r8w4_lin_kf", Mtp,    BF16,  Linear,    4,     2,         true),
    //            name                     state BV  other warps  dynamic smem
    prefill_tile!("gdn_prefill_f32_bv16",  F32,  16, 7,           225_696),
    prefill_tile!("gdn_prefill_f32_bv32",  F32,  32, 6,           159_000),
    PREFILL_F32_BV64,
    PREFILL_F32_BV128,
    prefill_tile!("gdn_prefill_bf16_bv16", BF16, 16, 7,           225_696),
    prefill_tile!("gdn_prefill_bf16_bv32", BF16, 32, 6,           159_000),
    PREFILL_BF16_BV64,
    PREFILL_BF16_BV128,
    longest_first_build("gdn_prefill_f32_bv64_lf",   PREFILL_F32_BV64),
    longest_first_build("gdn_prefill_f32_bv128_lf",  PREFILL_F32_BV128),
    longest_first_build("gdn_prefill_bf16_bv64_lf",  PREFILL_BF16_BV64),
    longest_first_build("gdn_prefill_bf16_bv128_lf", PREFILL_BF16_BV128),
    split_build("gdn_prefill_f32_bv128_sp",  PREFILL_F32_BV128),
    split_build("gdn_prefill_bf16_bv128_sp", PREFILL_BF16_BV128),
    //            name                        state BV  extra walkers  dynamic smem
    compact_tile!("gdn_prefill_f32_bv32_np2",  F32,  32, 2,             88_760),
    compact_tile!("gdn_prefill_f32_bv64_np2",  F32,  64, 0,             85_136),
    compact_tile!("gdn_prefill_bf16_bv32_np2", BF16, 32, 2,             88_760),
    compact_tile!("gdn_prefill_bf16_bv64_np2", BF16, 64, 0,             85_136),
    //               name                           family            state grid          smem
    prefill64_kernel("gdn_prefill64_prep",          Prefill64Prep,    F32,  ChunkSlots,   PREP), // reads no state (not matched)
    prefill64_kernel("gdn_prefill64_walk_f32",      Prefill64Walk,    F32,  Linear,       WALK),
    prefill64_kernel("gdn_prefill64_walk_bf16",     Prefill64Walk,    BF16, Linear,       WALK),
    prefill64_kernel("gdn_prefill64_cp_pass1_f32",  Prefill64CpPass1, F32,  SegmentSlots, WALK),
    prefill64_kernel("gdn_prefill64_cp_pass1_bf16", Prefill64CpPass1, BF16, SegmentSlots, WALK),
    cp_scan_kernel("gdn_prefill64_cp_scan",  prefill64::CP_SCAN_CTAS),
    cp_scan_kernel("gdn_prefill64_cp_scan8", prefill64::CP_SCAN8_CTAS),
    prefill64_kernel("gdn_prefill64_cp_pass3_f32",  Prefill64CpPass3, F32,  SegmentSlots, WALK),
    prefill64_kernel("gdn_prefill64_cp_pass3_bf16", Prefill64CpPass3, BF16, SegmentSlots, WALK),
    cp_wide_pass("gdn_prefill64_cp_pass1w_f32",  Prefill64CpPass1, F32),
    cp_wide_pass("gdn_prefill64_cp_pass1w_bf16", Prefill64CpPass1, BF16),
    cp_wide_pass("gdn_prefill64_cp_pass3w_f32",  Prefill64CpPass3, F32),
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
    let builds: Vec<&'static Module> = out.iter().flat_map(|m| builds_of(m)).collect();
    out.extend(builds);
    out
}

/// The modules that compile for `arch`, in `modules()` order.
pub fn modules_for(arch: Arch) -> Vec<&'static Module> {
    modules()
        .into_iter()
        .filter(|m| m.builds_for(arch))
        .collect()
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
            && w.dyn_smem == v.dyn_smem
    })
}

/// The longest-first build of fused prefill tile `v` (the same state, width and launch; `v` itself when it is one), or
/// None (a tile without one: bv16, bv32, whose calls are short and latency-bound, and the compact tiles).
pub fn longest_first_of(v: &Variant) -> Option<&'static Variant> {
    VARIANTS.iter().find(|w| {
        w.longest_first
            && w.family == v.family
            && w.state == v.state
            && w.ctas_per_head == v.ctas_per_head
            && w.dyn_smem == v.dyn_smem
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
    // (a build checks its own constants and those of the module it is built from, except that module's params size:
    // each build states its own)
    let base = build_base(m).map_or(m.id, |b| b.id);
    for (_, what, expr, value) in MODULE_CONSTANTS
        .iter()
        .filter(|c| c.0 == m.id || (c.0 == base && !c.2.starts_with("sizeof(")))
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
