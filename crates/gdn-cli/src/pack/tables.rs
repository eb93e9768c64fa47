//! `gdn_tables.h` of a packed solution: everything the host wrapper knows about the library, written from the
//! library's own tables at pack time — the kernels it may launch (registry name, module, block, dynamic shared
//! memory, grid order, CTAs per head, residency), the modules (index into `gdn_cubin.h`), the decode / MTP table,
//! the prefill plan templates and their bins (`plan_table`), the params structs' byte offsets (from the
//! `#[repr(C)]` mirrors of `gdn_cuda::abi::params`, which the registry checks against the CUDA structs) and the
//! sizes the definition builds read (`registry::params_size`). Plain C++17, no CUDA: the plan code that reads it
//! (`gdn_plan.h`) also compiles with a host compiler alone (the packer's tests).

use super::plan_table::{self, Kind, PrefillTable, ROLES};
use gdn_core::{Definition, Op};
use gdn_cuda::abi::params::{
    Prefill64Params, Prefill64PlanParams, PrefillParams, PrefillPlanParams, RecurrentParams,
};
use gdn_cuda::kernels::registry::{self, params_size, Family, GridOrder, Module, ModuleBuild};
use gdn_cuda::plan::decode::RECURRENT_TABLE;
use gdn_cuda::StateDtype;
use std::fmt::Write;
use std::mem::offset_of;

/// One kernel row: a registry variant from one build of its module.
#[derive(Clone, Debug, PartialEq)]
pub struct KernelRow {
    pub variant: &'static registry::Variant,
    pub module: &'static Module,
}

/// What a definition's solution launches: its kernels, their modules (in `gdn_cubin.h` order), the decode / MTP
/// rows (max equivalent batch, kernel row) or the prefill table.
pub struct Tables {
    pub kernels: Vec<KernelRow>,
    pub modules: Vec<&'static Module>,
    pub recurrent: Vec<(u64, usize)>,
    pub prefill: Option<PrefillTable>,
}

fn module_of(v: &'static registry::Variant, b: ModuleBuild) -> &'static Module {
    if b == ModuleBuild::default() {
        v.module
    } else {
        registry::build_module(v.module, b).expect("prefill kernels have device-plan builds")
    }
}

impl Tables {
    fn row(&mut self, v: &'static registry::Variant, b: ModuleBuild) -> usize {
        let module = module_of(v, b);
        if !self.modules.iter().any(|m| m.id == module.id) {
            self.modules.push(module);
        }
        let row = KernelRow { variant: v, module };
        match self.kernels.iter().position(|k| *k == row) {
            Some(i) => i,
            None => {
                self.kernels.push(row);
                self.kernels.len() - 1
            }
        }
    }

    /// The tables of definition `def` (the library's planner, run for every bin of a prefill definition).
    pub fn for_definition(def: &Definition) -> Result<Tables, String> {
        let mut t = Tables {
            kernels: Vec::new(),
            modules: Vec::new(),
            recurrent: Vec::new(),
            prefill: None,
        };
        match def.op {
            Op::Decode | Op::Mtp => {
                let family = if def.op == Op::Decode {
                    Family::Decode
                } else {
                    Family::Mtp
                };
                for (f, st, max_b, name) in RECURRENT_TABLE {
                    if *f == family && *st == StateDtype::F32 {
                        let v = registry::find(name).ok_or(format!("{name}: not registered"))?;
                        let i = t.row(v, ModuleBuild::default());
                        t.recurrent.push((*max_b, i));
                    }
                }
            }
            Op::Prefill => {
                let h = &def.heads;
                let table = plan_table::prefill_table(h.num_q_heads, h.num_v_heads)?;
                for tpl in &table.templates {
                    for v in tpl.roles.iter().flatten() {
                        t.row(v, tpl.build());
                    }
                }
                t.prefill = Some(table);
            }
        }
        Ok(t)
    }

    fn kernel_index(&self, v: &'static registry::Variant, b: ModuleBuild) -> usize {
        let m = module_of(v, b);
        self.kernels
            .iter()
            .position(|k| k.variant.name == v.name && k.module.id == m.id)
            .expect("every template kernel has a row")
    }

    /// `gdn_tables.h`.
    pub fn header(&self, def: &Definition) -> String {
        let mut o = String::new();
        let _ = writeln!(
            o,
            "// gdn_tables.h: written by `gdn pack` for {} from gdn's kernel registry and planner; do not edit.\n\
             #pragma once\n#include <cstddef>\n#include <cstdint>\nnamespace gdn_pack {{",
            def.name
        );
        let h = &def.heads;
        let _ = writeln!(
            o,
            "constexpr int kOp = {};  // 0 decode, 1 prefill, 2 MTP\n\
             constexpr int64_t kNumQHeads = {};\nconstexpr int64_t kNumKHeads = {};\n\
             constexpr int64_t kNumVHeads = {};\nconstexpr int64_t kHeadSize = {};\n\
             constexpr int kCcMajor = {};\nconstexpr int kCcMinor = {};\nconstexpr const char* kArch = \"{}\";",
            match def.op {
                Op::Decode => 0,
                Op::Prefill => 1,
                Op::Mtp => 2,
            },
            h.num_q_heads,
            h.num_k_heads,
            h.num_v_heads,
            h.head_size,
            gdn_cuda::plan::HOPPER_CC.0,
            gdn_cuda::plan::HOPPER_CC.1,
            gdn_cuda::plan::HOPPER_ARCH
        );
        for (name, value) in plan_table::size_constants() {
            let _ = writeln!(o, "constexpr uint64_t {name} = {value}ull;");
        }
        // modules and kernels
        let _ = writeln!(o, "constexpr int kNumModules = {};", self.modules.len());
        let _ = writeln!(o, "constexpr const char* kModuleNames[kNumModules] = {{");
        for m in &self.modules {
            let _ = writeln!(o, "  \"{}\",", m.id);
        }
        let _ = writeln!(
            o,
            "}};\nenum GridOrder : int {{ kHeadMajor = 0, kLinear = 1, kChunkSlots = 2, kSegmentSlots = 3, \
             kLongSeqs = 4, kSplitLongest = 5 }};\n\
             struct Kernel {{ const char* name; int module; uint32_t block; uint32_t dyn_smem; int grid; \
             uint32_t ctas_per_head; int persistent; uint32_t resident_per_sm; }};\n\
             constexpr int kNumKernels = {};\nconstexpr Kernel kKernels[kNumKernels] = {{",
            self.kernels.len()
        );
        for k in &self.kernels {
            let v = k.variant;
            let grid = match v.grid {
                GridOrder::HeadMajor => 0,
                GridOrder::Linear => 1,
                GridOrder::ChunkSlots => 2,
                GridOrder::SegmentSlots => 3,
                GridOrder::LongSeqs => 4,
                GridOrder::SplitLongest => 5,
            };
            let (persistent, resident) = plan_table::residency(v);
            let resident = if persistent { resident } else { 0 };
            let module = self
                .modules
                .iter()
                .position(|m| m.id == k.module.id)
                .unwrap();
            let _ = writeln!(
                o,
                "  {{\"{}\", {module}, {}u, {}u, {grid}, {}u, {}, {resident}u}},  // {}",
                v.name, v.block, v.dyn_smem, v.ctas_per_head, persistent as i32, k.module.id
            );
        }
        let _ = writeln!(o, "}};");
        // decode / MTP
        let _ = writeln!(
            o,
            "struct RecurrentRow {{ uint64_t max_equivalent_batch; int kernel; }};\n\
             constexpr int kNumRecurrentRows = {};\nconstexpr RecurrentRow kRecurrentRows[{}] = {{",
            self.recurrent.len(),
            self.recurrent.len().max(1)
        );
        for (max_b, i) in &self.recurrent {
            let _ = writeln!(o, "  {{{max_b}ull, {i}}},");
        }
        if self.recurrent.is_empty() {
            let _ = writeln!(o, "  {{0ull, -1}},");
        }
        let _ = writeln!(o, "}};");
        self.prefill_tables(&mut o);
        o.push_str(&params_offsets());
        let _ = writeln!(o, "}}  // namespace gdn_pack");
        o
    }

    fn prefill_tables(&self, o: &mut String) {
        let _ = writeln!(
            o,
            "struct PrefillTemplate {{ int kind; int roles[7]; uint64_t seg_chunks; uint64_t run_from; \
             uint64_t tile_from; uint64_t cp_from; uint64_t cp_l_lo; uint64_t cp_l_hi; }};\n\
             // kind: {}; roles: {}",
            [Kind::Fused, Kind::Chunk64, Kind::ContextParallel, Kind::Device]
                .iter()
                .map(|k| format!("{} {k:?}", *k as i32))
                .collect::<Vec<_>>()
                .join(", "),
            ROLES.join(", ")
        );
        let Some(t) = &self.prefill else {
            let _ = writeln!(
                o,
                "constexpr int kNumNBins = 0;\nconstexpr int kNumTBins = 0;\n\
                 constexpr uint64_t kNEdges[1] = {{0}};\nconstexpr uint64_t kTEdges[1] = {{0}};\n\
                 constexpr PrefillTemplate kTemplates[1] = {{}};\nconstexpr uint16_t kTemplateIndex[1] = {{0}};"
            );
            return;
        };
        let list = |v: &[u64]| {
            v.iter()
                .map(|x| format!("{x}ull"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let _ = writeln!(
            o,
            "constexpr int kNumNBins = {};\nconstexpr int kNumTBins = {};\n\
             constexpr uint64_t kNEdges[kNumNBins] = {{{}}};\nconstexpr uint64_t kTEdges[kNumTBins] = {{{}}};\n\
             constexpr PrefillTemplate kTemplates[{}] = {{",
            t.n_edges.len(),
            t.t_edges.len(),
            list(&t.n_edges),
            list(&t.t_edges),
            t.templates.len()
        );
        for tpl in &t.templates {
            let roles: Vec<String> = tpl
                .roles
                .iter()
                .map(|r| {
                    r.map_or("-1".to_string(), |v| {
                        self.kernel_index(v, tpl.build()).to_string()
                    })
                })
                .collect();
            let th = tpl
                .thresholds
                .unwrap_or(gdn_cuda::plan::prefill::Thresholds {
                    run_from: 0,
                    tile_from: 0,
                    cp_from: 0,
                    cp_l_lo: 0,
                    cp_l_hi: 0,
                    warpgroups: 0,
                });
            let _ = writeln!(
                o,
                "  {{{}, {{{}}}, {}ull, {}ull, {}ull, {}ull, {}ull, {}ull}},",
                tpl.kind as i32,
                roles.join(", "),
                tpl.seg_chunks,
                th.run_from,
                th.tile_from,
                th.cp_from,
                th.cp_l_lo,
                th.cp_l_hi
            );
        }
        let _ = writeln!(
            o,
            "}};\n// template per (N bin, T bin), row-major by N\nconstexpr uint16_t kTemplateIndex[{}] = {{",
            t.index.len()
        );
        for row in t.index.chunks(t.t_edges.len()) {
            let _ = writeln!(
                o,
                "  {},",
                row.iter()
                    .map(|x| x.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        let _ = writeln!(o, "}};");
    }
}

/// (field, byte offset) of a `#[repr(C)]` params mirror.
macro_rules! offsets {
    ($t:ty: $($f:ident),* $(,)?) => {
        vec![$((stringify!($f), offset_of!($t, $f))),*]
    };
}

/// (struct, its full size, the bytes its definition build reads, (field, offset) of each field).
type ParamsLayout = (&'static str, usize, u64, Vec<(&'static str, usize)>);

/// The params structs as byte offsets (`namespace off`), their full sizes (`k*Bytes`, the serving builds') and the
/// bytes the definition builds read (`k*DefBytes`).
fn params_offsets() -> String {
    let structs: Vec<ParamsLayout> = vec![
        (
            "Recurrent",
            std::mem::size_of::<RecurrentParams>(),
            params_size::RECURRENT,
            offsets!(RecurrentParams: q, k, v, a, b, a_log, dt_bias, state, new_state, intermediate, out,
                state_indices, batch, num_state_rows, scale, seq_len, num_qk_heads, num_v_heads),
        ),
        (
            "Prefill",
            std::mem::size_of::<PrefillParams>(),
            params_size::PREFILL,
            offsets!(PrefillParams: q, k, v, a, b, a_log, dt_bias, cu_seqlens, state, new_state, out,
                num_seqs, scale, num_q_heads, num_v_heads, lead_rows, num_state_rows),
        ),
        (
            "Prefill64",
            std::mem::size_of::<Prefill64Params>(),
            params_size::PREFILL64,
            offsets!(Prefill64Params: q, k, v, a, b, a_log, dt_bias, cu_seqlens, state, new_state, out,
                workspace, num_seqs, total_tokens, scale, num_q_heads, num_v_heads, seg_chunks, num_state_rows),
        ),
        (
            "PrefillPlan",
            std::mem::size_of::<PrefillPlanParams>(),
            params_size::PREFILL_PLAN,
            offsets!(PrefillPlanParams: run_below, run_from, p),
        ),
        (
            "Prefill64Plan",
            std::mem::size_of::<Prefill64PlanParams>(),
            params_size::PREFILL64_PLAN,
            offsets!(Prefill64PlanParams: plan_from, plan_cp_from, plan_cp_l_lo, plan_cp_l_hi, claimed, vgrid, p),
        ),
    ];
    let mut o = String::from(
        "// params structs (gdn_cuda::abi::params, byte for byte): offsets, full sizes, bytes the definition builds read\n\
         namespace off {\n",
    );
    for (name, _, _, fields) in &structs {
        for (f, at) in fields {
            let _ = writeln!(o, "constexpr size_t {name}_{f} = {at};");
        }
    }
    o.push_str("}  // namespace off\n");
    for (name, size, def_bytes, _) in &structs {
        let _ = writeln!(
            o,
            "constexpr size_t k{name}Bytes = {size};\nconstexpr size_t k{name}DefBytes = {def_bytes};"
        );
    }
    let _ = writeln!(
        o,
        "constexpr int kDpLaunches = {};",
        gdn_cuda::abi::params::DP_LAUNCHES
    );
    o
}
