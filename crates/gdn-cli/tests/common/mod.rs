//! Helpers shared by the CLI integration tests: the built binary, scratch directories, workload files.
#![allow(dead_code)]

use gdn_core::workload::{generate, WorkloadSpec};
use gdn_core::{io, TensorMap};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A fresh scratch directory for one test.
pub fn scratch(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("gdn-cli-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Runs the `gdn` binary with `args`.
pub fn gdn(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_gdn"))
        .args(args)
        .output()
        .expect("spawn gdn")
}

/// Runs `gdn run --definition def --inputs inputs --output output` followed by `extra`.
pub fn gdn_run(def: &str, inputs: &Path, output: &Path, extra: &[&str]) -> Output {
    let mut args = vec![
        "run",
        "--definition",
        def,
        "--inputs",
        inputs.to_str().unwrap(),
        "--output",
        output.to_str().unwrap(),
    ];
    args.extend(extra);
    gdn(&args)
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Writes the workload `spec` (seeded) to `dir/name` and returns the path and the tensors.
pub fn workload_file(
    dir: &Path,
    name: &str,
    spec: &WorkloadSpec,
    seed: u64,
) -> (PathBuf, TensorMap) {
    altered_workload_file(dir, name, spec, seed, |_| {})
}

/// As [`workload_file`], with the tensors altered by `alter` before they are written.
pub fn altered_workload_file(
    dir: &Path,
    name: &str,
    spec: &WorkloadSpec,
    seed: u64,
    alter: impl FnOnce(&mut TensorMap),
) -> (PathBuf, TensorMap) {
    let mut t = generate(spec, seed);
    alter(&mut t);
    let p = dir.join(name);
    io::write_safetensors(&p, &t).unwrap();
    (p, t)
}
