//! `gdn run`: one flashinfer-bench workload through a backend, or every workload of a flashinfer-trace dataset.
//!
//! Inputs are the definition's input tensors by name in a safetensors file (`scale` as a scalar f32 tensor,
//! or `--scale`; absent optional state = zeros). Everything is validated before any work, and the output
//! file is written (atomically) only after the run succeeded, so a bad input never leaves an output file.
//! With `--dataset DIR` the whole dataset is checked first (dataset.rs), then each workload runs in turn;
//! `--output` is then a folder receiving `<definition>_<uuid>.safetensors` per workload.

use crate::backend::{Choice, Engine};
use crate::dataset;
use anyhow::{bail, Context, Result};
use gdn_core::compare::{compare, CheckReport, CONTEST};
use gdn_core::{io, reference, Backend, Definition, MtpMode, Op, Outputs, Problem, RunOptions};
use gdn_core::{Inputs, TensorMap};
use std::path::{Path, PathBuf};

#[derive(clap::Args)]
pub struct Args {
    /// Definition name (e.g. gdn_decode_qk4_v8_d128_k_last) or path to a definition JSON; with --dataset,
    /// only the workloads of this definition (its name).
    #[arg(long, required_unless_present = "dataset")]
    definition: Option<String>,
    /// Input tensors (safetensors), named as the definition's inputs.
    #[arg(long, required_unless_present = "dataset", conflicts_with = "dataset")]
    inputs: Option<PathBuf>,
    /// Where to write the outputs (safetensors), named as the definition's outputs; with --dataset a folder
    /// (optional) receiving `<definition>_<uuid>.safetensors` per workload.
    #[arg(long, required_unless_present = "dataset")]
    output: Option<PathBuf>,
    /// A flashinfer-trace dataset folder: run every GDN workload of it.
    #[arg(long)]
    dataset: Option<PathBuf>,
    /// With --dataset: the seed of its random inputs.
    #[arg(long, default_value_t = 0, requires = "dataset")]
    seed: u64,
    #[arg(long, value_enum, default_value = "auto")]
    backend: Choice,
    /// Overrides the `scale` tensor (0 = 1/sqrt(head_size)).
    #[arg(long, conflicts_with = "dataset")]
    scale: Option<f32>,
    /// MTP serving mode: final states written back to their pool rows, index -1 = padding.
    #[arg(long, conflicts_with = "dataset")]
    mtp_serving: bool,
    /// Also compare against the float64 reference (contest tolerance) and print the report.
    #[arg(long)]
    check: bool,
}

pub fn main(a: Args) -> Result<()> {
    if let Some(dir) = &a.dataset {
        return run_dataset(&a, dir);
    }
    let (Some(definition), Some(inputs), Some(output)) = (&a.definition, &a.inputs, &a.output)
    else {
        bail!("--definition, --inputs and --output are required without --dataset");
    };
    let def = Definition::resolve(definition)?;
    if a.mtp_serving && def.op != Op::Mtp {
        bail!(
            "--mtp-serving applies only to gdn_mtp_* definitions, not '{}'",
            def.name
        );
    }
    let tensors = io::read_safetensors(inputs)?;
    let opts = RunOptions {
        scale: a.scale,
        mtp_mode: if a.mtp_serving {
            MtpMode::Serving
        } else {
            MtpMode::Definition
        },
        ..Default::default()
    };
    let p = Problem::from_tensors(&def, &tensors, &opts)?;
    let engine = Engine::open(a.backend)?;
    let (out, report) = run_one(&engine, &p, &p.inputs(&tensors), a.check)?;
    if let Some(r) = &report {
        println!("{}", r.summary());
    }
    io::write_safetensors(output, &out.into_tensors(&p))?;
    eprintln!(
        "{}: {} on {} -> {}",
        def.name,
        engine.name(),
        inputs.display(),
        output.display()
    );
    if report.is_some_and(|r| !r.passed()) {
        bail!("--check: the outputs differ from the float64 reference beyond the contest tolerance (outputs written anyway)");
    }
    Ok(())
}

/// Runs `p` on poisoned outputs; with `check`, compares them with the float64 reference (contest rule).
fn run_one(
    engine: &Engine,
    p: &Problem,
    x: &Inputs,
    check: bool,
) -> Result<(Outputs, Option<CheckReport>)> {
    let mut out = Outputs::poisoned(p, x);
    engine.run(p, x, &mut out)?;
    let report = check.then(|| compare(p, &out, &reference::run(p, x), &CONTEST, &CONTEST));
    Ok((out, report))
}

/// `--dataset`: every workload (of `--definition`), one line each; the outputs into the `--output` folder.
fn run_dataset(a: &Args, dir: &Path) -> Result<()> {
    let ds = dataset::open(dir, a.definition.as_deref(), |_| true)?;
    let engine = Engine::open(a.backend)?;
    if let Some(out_dir) = &a.output {
        std::fs::create_dir_all(out_dir)
            .with_context(|| format!("creating {}", out_dir.display()))?;
    }
    let mut failed = 0;
    for w in &ds.workloads {
        let (tensors, p): (TensorMap, Problem) = w.load(&ds.root, a.seed)?;
        let (out, report) =
            run_one(&engine, &p, &p.inputs(&tensors), a.check).with_context(|| w.place())?;
        let verdict = report
            .as_ref()
            .map_or(String::new(), |r| format!(": {}", r.summary()));
        println!("{} {}{verdict}", w.place(), dataset::case_label(w));
        failed += report.is_some_and(|r| !r.passed()) as usize;
        if let Some(out_dir) = &a.output {
            let uuid: String = w
                .uuid
                .chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() || c == '-' {
                        c
                    } else {
                        '_'
                    }
                })
                .collect();
            let file = out_dir.join(format!("{}_{uuid}.safetensors", w.def.name));
            io::write_safetensors(&file, &out.into_tensors(&p))?;
        }
    }
    eprintln!(
        "{} workloads of {} on {}{}",
        ds.workloads.len(),
        dir.display(),
        engine.name(),
        a.output
            .as_ref()
            .map_or(String::new(), |o| format!(" -> {}", o.display()))
    );
    if failed > 0 {
        bail!(
            "--check: {failed} of {} workloads differ from the float64 reference beyond the contest tolerance",
            ds.workloads.len()
        );
    }
    Ok(())
}
