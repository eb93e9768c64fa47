//! Embeds the kernel sources (`kernels/*.cu`, `kernels/*.cuh`; not `kernels/harness/`) into the library, so
//! that the binary compiles its kernels with NVRTC without the source tree. Generates `$OUT_DIR/sources.rs`:
//! `pub static EMBEDDED: &[(&str, &str)]` = (file name, text), sorted by name.

use std::path::PathBuf;

fn main() {
    let dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap()).join("kernels");
    println!("cargo:rerun-if-changed={}", dir.display());
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map(|rd| rd.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    files.retain(|p| {
        p.is_file()
            && matches!(
                p.extension().and_then(|e| e.to_str()),
                Some("cu") | Some("cuh")
            )
    });
    files.sort();
    let mut out = String::from("pub static EMBEDDED: &[(&str, &str)] = &[\n");
    for f in &files {
        println!("cargo:rerun-if-changed={}", f.display());
        let name = f.file_name().unwrap().to_string_lossy();
        out.push_str(&format!(
            "    ({name:?}, include_str!({:?})),\n",
            f.display().to_string()
        ));
    }
    out.push_str("];\n");
    let dst = PathBuf::from(std::env::var("OUT_DIR").unwrap()).join("sources.rs");
    std::fs::write(dst, out).unwrap();
}
