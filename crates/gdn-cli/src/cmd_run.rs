//! `gdn run`: one flashinfer-bench workload through a backend.
//!
//! Inputs are the definition's input tensors by name in a safetensors file (`scale` as a scalar f32 tensor,
//! or `--scale`; absent optional state = zeros). Everything is validated before any work, and the output
//! file is written (atomically) only after the run succeeded, so a bad input never leaves an output file.

use crate::backend::{Choice, Engine};
use anyhow::{bail, Result};
use gdn_core::compare::{compare, CONTEST};
use gdn_core::{io, reference, Backend, Definition, MtpMode, Op, Outputs, Problem, RunOptions};
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// Definition name (e.g. gdn_decode_qk4_v8_d128_k_last) or path to a definition JSON.
    #[arg(long)]
    definition: String,
    /// Input tensors (safetensors), named as the definition's inputs.
    #[arg(long)]
    inputs: PathBuf,
    /// Where to write the outputs (safetensors), named as the definition's outputs.
    #[arg(long)]
    output: PathBuf,
    #[arg(long, value_enum, default_value = "auto")]
    backend: Choice,
    /// Overrides the `scale` tensor (0 = 1/sqrt(head_size)).
    #[arg(long)]
    scale: Option<f32>,
    /// MTP serving mode: final states written back to their pool rows, index -1 = padding.
    #[arg(long)]
    mtp_serving: bool,
    /// Also compare against the float64 reference (contest tolerance) and print the report.
    #[arg(long)]
    check: bool,
}

pub fn main(a: Args) -> Result<()> {
    let def = Definition::resolve(&a.definition)?;
    if a.mtp_serving && def.op != Op::Mtp {
        bail!(
            "--mtp-serving applies only to gdn_mtp_* definitions, not '{}'",
            def.name
        );
    }
    let tensors = io::read_safetensors(&a.inputs)?;
    let opts = RunOptions {
        scale: a.scale,
        mtp_mode: if a.mtp_serving {
            MtpMode::Serving
        } else {
            MtpMode::Definition
        },
    };
    let p = Problem::from_tensors(&def, &tensors, &opts)?;
    let x = p.inputs(&tensors);
    let engine = Engine::open(a.backend)?;
    let mut out = Outputs::poisoned(&p, &x);
    engine.run(&p, &x, &mut out)?;
    let mut check_failed = None;
    if a.check {
        let r = reference::run(&p, &x);
        let report = compare(&p, &out, &r, &CONTEST, &CONTEST);
        println!("{}", report.summary());
        if !report.passed() {
            check_failed = Some(report);
        }
    }
    io::write_safetensors(&a.output, &out.into_tensors(&p))?;
    eprintln!(
        "{}: {} on {} -> {}",
        def.name,
        engine.name(),
        a.inputs.display(),
        a.output.display()
    );
    if check_failed.is_some() {
        bail!("--check: the outputs differ from the float64 reference beyond the contest tolerance (outputs written anyway)");
    }
    Ok(())
}
