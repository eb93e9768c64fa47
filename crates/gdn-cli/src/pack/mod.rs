//! `gdn pack`: flashinfer-bench solutions made from gdn's kernels. One solution per definition, `language: cuda`,
//! tvm-ffi binding, destination-passing style. Its sources:
//! - `gdn_<op>.cu`: the entry point `run` (`entry`): argument checks, then the call;
//! - `gdn_ops.h`, `gdn_host.h`, `gdn_plan.h`: the host code, the same text in every solution (no device code, so the
//!   harness's default nvcc flags, `-gencode=arch=compute_90,code=sm_90`, build it; it links only what the harness
//!   links: the CUDA runtime and tvm-ffi);
//! - `gdn_tables.h`: the library's kernel table, planner tables and params layouts for this definition (`tables`);
//! - `gdn_cubin.cpp`: the kernels, gdn's CUBINs for sm_90a (`cubin`).
//!
//! `DIR/<definition>/<solution name>.json` is the flashinfer-bench `Solution`; `DIR/<definition>/config.toml` says the
//! same in the contest starter kit's form.

pub mod cubin;
pub mod entry;
pub mod plan_table;
pub mod tables;
#[cfg(test)]
mod tests;

use gdn_core::Definition;
use serde_json::json;
use std::path::Path;

/// The host code shared by every solution, as (file name, text).
pub const STATIC_SOURCES: [(&str, &str); 3] = [
    ("gdn_plan.h", include_str!("gdn_plan.h")),
    ("gdn_host.h", include_str!("gdn_host.h")),
    ("gdn_ops.h", include_str!("gdn_ops.h")),
];

/// The author field of packed solutions.
pub const AUTHOR: &str = "gdn";

/// The solution's name for `def`.
pub fn solution_name(def: &Definition) -> String {
    format!("gdn_cuda_sm90a_{}", def.name)
}

/// A packed solution: its sources (path, text) and the module hashes.
pub struct Packed {
    pub name: String,
    pub sources: Vec<(String, String)>,
    pub modules: Vec<(String, usize, String)>,
}

/// Packs `def` (compiles its kernel modules; runs the planner over the prefill bins).
pub fn pack(def: &Definition) -> Result<Packed, String> {
    let t = tables::Tables::for_definition(def)?;
    let cubins = cubin::compile(&t.modules)?;
    let mut sources = vec![(entry::file_name(def), entry::source(def))];
    sources.extend(
        STATIC_SOURCES
            .iter()
            .map(|(n, s)| (n.to_string(), s.to_string())),
    );
    sources.push(("gdn_tables.h".into(), t.header(def)));
    sources.push(("gdn_cubin.cpp".into(), cubin::source(&def.name, &cubins)));
    Ok(Packed {
        name: solution_name(def),
        sources,
        modules: cubins
            .iter()
            .map(|c| (c.module.id.to_string(), c.bytes.len(), c.sha256()))
            .collect(),
    })
}

/// The flashinfer-bench `Solution` JSON of a packed solution.
pub fn solution_json(def: &Definition, p: &Packed) -> serde_json::Value {
    let modules: Vec<String> = p
        .modules
        .iter()
        .map(|(id, n, sha)| format!("{id} ({n} bytes, sha256 {sha})"))
        .collect();
    json!({
        "name": p.name,
        "definition": def.name,
        "author": AUTHOR,
        "spec": {
            "language": "cuda",
            "target_hardware": ["H100", "H200"],
            "entry_point": format!("{}::{}", entry::file_name(def), entry::SYMBOL),
            "dependencies": [],
            "destination_passing_style": true,
            "binding": "tvm-ffi",
        },
        "sources": p.sources.iter().map(|(path, content)| json!({"path": path, "content": content})).collect::<Vec<_>>(),
        "description": format!(
            "gdn's Gated Delta Net kernels for Hopper (compute capability 9.0 only; other GPUs are refused with an \
             error), {} of the definition: host code for the CUDA runtime and tvm-ffi, the kernels as CUBINs for sm_90a \
             compiled by NVRTC from gdn's sources and loaded at the first call. Modules: {}.",
            def.op.name(),
            modules.join("; ")
        ),
    })
}

/// `config.toml` in the contest starter kit's form.
pub fn config_toml(def: &Definition, p: &Packed) -> String {
    format!(
        "# flashinfer-bench solution written by `gdn pack` (the JSON beside this file carries the sources).\n\
         [solution]\nname = \"{}\"\ndefinition = \"{}\"\nauthor = \"{AUTHOR}\"\n\n\
         [build]\nlanguage = \"cuda\"\nentry_point = \"{}::{}\"\nbinding = \"tvm-ffi\"\ndestination_passing_style = true\n",
        p.name,
        def.name,
        entry::file_name(def),
        entry::SYMBOL
    )
}

/// Writes `out/<definition>/<solution>.json` and `config.toml`; returns the JSON's path.
pub fn write(def: &Definition, p: &Packed, out: &Path) -> Result<std::path::PathBuf, String> {
    let dir = out.join(&def.name);
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let path = dir.join(format!("{}.json", p.name));
    let text = serde_json::to_string_pretty(&solution_json(def, p)).map_err(|e| e.to_string())?;
    std::fs::write(&path, text + "\n").map_err(|e| format!("{}: {e}", path.display()))?;
    let cfg = dir.join("config.toml");
    std::fs::write(&cfg, config_toml(def, p)).map_err(|e| format!("{}: {e}", cfg.display()))?;
    Ok(path)
}
