//! `--dataset DIR [--definition NAME]` of `gdn check` and `gdn bench` (and `gdn run`'s own flags of the same
//! names): the workloads of a flashinfer-trace dataset instead of generated ones, each run on the backend and
//! compared with the float64 reference by the contest rule. The format: [`gdn_core::dataset`].

use crate::backend::Engine;
use crate::table::progress;
use crate::verify::{verify_tensors, Verdict};
use anyhow::{bail, Context, Result};
use gdn_core::dataset::Dataset;
use gdn_core::{Backend, Op, Timed};
use std::path::{Path, PathBuf};

/// `--dataset` and `--definition`.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct DatasetArgs {
    /// A flashinfer-trace dataset folder (definitions/, workloads/, blob/): run its GDN workloads instead of
    /// generated ones.
    #[arg(long)]
    pub dataset: Option<PathBuf>,
    /// With --dataset: only the workloads of this definition (its name).
    #[arg(long, requires = "dataset")]
    pub definition: Option<String>,
}

/// Opens the dataset at `dir` with the workloads of `definition` (when given) whose operation `keep` keeps;
/// none left is an error.
pub fn open(dir: &Path, definition: Option<&str>, keep: impl Fn(Op) -> bool) -> Result<Dataset> {
    let mut ds = Dataset::open(dir, definition)?;
    let before = ds.workloads.len();
    ds.workloads.retain(|w| keep(w.def.op));
    ds.skipped += before - ds.workloads.len();
    if ds.workloads.is_empty() {
        bail!(
            "{}: no GDN workload to run ({} lines of other definitions or operations left out)",
            dir.display(),
            ds.skipped
        );
    }
    Ok(ds)
}

/// The case label of a workload: its definition and [`gdn_core::dataset::Workload::label`].
pub fn case_label(w: &gdn_core::dataset::Workload) -> String {
    format!("{} {}", w.def.name, w.label())
}

/// `gdn check --dataset`: every workload of the dataset on `engine`, contest rule; random inputs from `seed`.
pub fn check(
    engine: &Engine,
    dir: &Path,
    definition: Option<&str>,
    keep: impl Fn(Op) -> bool,
    seed: u64,
) -> Result<Vec<Verdict>> {
    let ds = open(dir, definition, keep)?;
    eprintln!(
        "gdn check: {} workloads of {} on {} ({}){}",
        ds.workloads.len(),
        dir.display(),
        engine.name(),
        engine.device(),
        if ds.skipped > 0 {
            format!("; {} lines left out", ds.skipped)
        } else {
            String::new()
        }
    );
    let pb = progress(ds.workloads.len() as u64, "check");
    let mut results = Vec::new();
    for w in &ds.workloads {
        let case = case_label(w);
        pb.set_message(case.clone());
        let (tensors, p) = w.load(&ds.root, seed)?;
        let v = verify_tensors(engine, &case, &p, &tensors).with_context(|| w.place())?;
        results.push(v);
        pb.inc(1);
    }
    pb.finish_and_clear();
    Ok(results)
}
