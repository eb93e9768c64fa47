//! The one table of kernel variants: every exported kernel gdn can launch, with the compilation unit it
//! comes from and its launch constants. `policy.rs` chooses among these; `launch.rs` launches them;
//! `gdn kernels` compiles and reports all of them. A kernel that is not in this table is never launched.
//!
//! Launch constants are copied from the kernel files' headers (each names its exported kernels with
//! block size, CTAs per head and dynamic shared memory); `tests/registry.rs` checks that every name here is
//! exported by its source and that every `extern "C" __global__` in a source is listed here.

/// Which params struct a variant takes (and which operation it serves).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Family {
    /// `recurrent.cu` `*_t1_*`: one token per request (T = 1), `RecurrentParams`.
    Decode,
    /// `recurrent.cu` `*_tn_*`: T tokens per request (run-time T >= 1), `RecurrentParams`.
    Mtp,
    /// `prefill.cu`: packed varlen chunked prefill, `PrefillParams`.
    Prefill,
}

/// Grid layout of a variant (N = requests or sequences, `cph` = `ctas_per_head`).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum GridOrder {
    /// `(N * cph, H, HV / H)`: recurrent.cu ORDER 0.
    HeadMajor,
    /// `(N * HV * cph, 1, 1)`: recurrent.cu ORDER 1 (`_lin`, state-memory order) and prefill.cu.
    Linear,
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

/// Head size every kernel assumes (K = V = 128).
pub const HEAD_DIM: u32 = 128;
const WARP: u32 = 32;

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
    }
}

const fn prefill(
    name: &'static str,
    state: StateDtype,
    bv: u32,
    producers: u32,
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
        block: WARP * (bv / 16 + producers),
        dyn_smem,
        ctas_per_head: HEAD_DIM / bv,
        smem_expr: Some(smem_expr),
        block_expr: Some(block_expr),
        hot: true,
    }
}

use Family::*;
use GridOrder::{HeadMajor, Linear};
use StateDtype::{BF16, F32};

/// Every variant gdn knows (recurrent.cu's header lists block / CTAS_PER_HEAD / grid of each export;
/// prefill.cu's dynamic shared memory is `gdn_prefill::smem_bytes<BV, GDN_NP>()`).
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
        5,
        165_104,
        "gdn_prefill::smem_bytes<16, gdn_prefill::producers<16>()>()",
        "32 * (1 + gdn_prefill::producers<16>())",
    ),
    prefill(
        "gdn_prefill_f32_bv32",
        F32,
        32,
        5,
        171_504,
        "gdn_prefill::smem_bytes<32, gdn_prefill::producers<32>()>()",
        "32 * (2 + gdn_prefill::producers<32>())",
    ),
    prefill(
        "gdn_prefill_f32_bv64",
        F32,
        64,
        5,
        184_304,
        "gdn_prefill::smem_bytes<64, gdn_prefill::producers<64>()>()",
        "32 * (4 + gdn_prefill::producers<64>())",
    ),
    prefill(
        "gdn_prefill_f32_bv128",
        F32,
        128,
        4,
        172_752,
        "gdn_prefill::smem_bytes<128, gdn_prefill::producers<128>()>()",
        "32 * (8 + gdn_prefill::producers<128>())",
    ),
    prefill(
        "gdn_prefill_bf16_bv16",
        BF16,
        16,
        5,
        165_104,
        "gdn_prefill::smem_bytes<16, gdn_prefill::producers<16>()>()",
        "32 * (1 + gdn_prefill::producers<16>())",
    ),
    prefill(
        "gdn_prefill_bf16_bv32",
        BF16,
        32,
        5,
        171_504,
        "gdn_prefill::smem_bytes<32, gdn_prefill::producers<32>()>()",
        "32 * (2 + gdn_prefill::producers<32>())",
    ),
    prefill(
        "gdn_prefill_bf16_bv64",
        BF16,
        64,
        5,
        184_304,
        "gdn_prefill::smem_bytes<64, gdn_prefill::producers<64>()>()",
        "32 * (4 + gdn_prefill::producers<64>())",
    ),
    prefill(
        "gdn_prefill_bf16_bv128",
        BF16,
        128,
        4,
        172_752,
        "gdn_prefill::smem_bytes<128, gdn_prefill::producers<128>()>()",
        "32 * (8 + gdn_prefill::producers<128>())",
    ),
];

/// The distinct compilation units, in table order.
pub fn modules() -> Vec<&'static Module> {
    let mut out: Vec<&'static Module> = Vec::new();
    for v in VARIANTS {
        if !out.iter().any(|m| m.id == v.module.id) {
            out.push(v.module);
        }
    }
    out
}

/// A variant by kernel name.
pub fn find(name: &str) -> Option<&'static Variant> {
    VARIANTS.iter().find(|v| v.name == name)
}

/// The variants of one family and state dtype, in table order.
pub fn candidates(family: Family, state: StateDtype) -> impl Iterator<Item = &'static Variant> {
    VARIANTS
        .iter()
        .filter(move |v| v.family == family && v.state == state)
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
    for v in VARIANTS.iter().filter(|v| v.module.id == m.id) {
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
    out
}

/// A module's full compile text: its source plus the registry checks.
pub fn module_source(m: &Module, source: &str) -> String {
    format!("{source}{}", checks_appendix(m))
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
