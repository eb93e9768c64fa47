//! Embeds the kernel sources (every `.cu` and `.cuh` under `kernels/`, in subfolders too)
//! into the library, so that the binary compiles its kernels with NVRTC without the source tree. Generates
//! `$OUT_DIR/sources.rs`: `pub static EMBEDDED: &[(&str, &str)]` = (name, text), sorted by name, the name being
//! the path relative to `kernels/` with `/` separators (`recurrent.cu`, `prefill_fused/walkers.cuh`): the name an
//! `#include "..."` uses.

use std::path::{Path, PathBuf};

/// Every kernel file under `dir` (recursively), as (name relative to `root`, path).
fn collect(root: &Path, dir: &Path, out: &mut Vec<(String, PathBuf)>) {
    println!("cargo:rerun-if-changed={}", dir.display());
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() {
            collect(root, &p, out);
        } else if p.is_file()
            && matches!(
                p.extension().and_then(|e| e.to_str()),
                Some("cu") | Some("cuh")
            )
        {
            let rel = p.strip_prefix(root).unwrap();
            let name: Vec<String> = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            out.push((name.join("/"), p));
        }
    }
}

fn main() {
    let dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap()).join("kernels");
    let mut files = Vec::new();
    collect(&dir, &dir, &mut files);
    files.sort();
    let mut out = String::from("pub static EMBEDDED: &[(&str, &str)] = &[\n");
    for (name, path) in &files {
        println!("cargo:rerun-if-changed={}", path.display());
        out.push_str(&format!(
            "    ({name:?}, include_str!({:?})),\n",
            path.display().to_string()
        ));
    }
    out.push_str("];\n");
    let dst = PathBuf::from(std::env::var("OUT_DIR").unwrap()).join("sources.rs");
    std::fs::write(dst, out).unwrap();
}
