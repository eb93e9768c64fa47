//! `gdn`: the command line of the Gated Delta Net project.
//!
//! Subcommands, one file each: `run` (one workload file through a backend), `check` (correctness sweep vs
//! the float64 reference), `bench` (correctness, then timing against the copy floor), `plot` (SVG from a
//! bench JSON), `gen` (a random workload file), `workloads` (a flashinfer-trace dataset), `kernels` (NVRTC
//! compile report), `pack` (flashinfer-bench solutions, pack/). `run`, `check` and `bench` also read a
//! flashinfer-trace dataset (`--dataset`, dataset.rs).
//! Every failure ends as one line `error: ...` on stderr and a non-zero exit code.

mod backend;
mod bench_classes;
mod bench_serving;
mod check_cuts;
mod check_offsets;
mod check_pool;
mod check_serving;
mod cmd_bench;
mod cmd_check;
mod cmd_gen;
mod cmd_kernels;
mod cmd_pack;
mod cmd_plot;
mod cmd_run;
mod cmd_workloads;
mod dataset;
mod heads;
mod pack;
mod table;
mod verify;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "gdn",
    version,
    about = "Gated Delta Net: run, check and benchmark the GDN operations"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run one flashinfer-bench workload (safetensors in, safetensors out), or every workload of a dataset.
    Run(cmd_run::Args),
    /// Correctness sweep of a backend against the float64 reference.
    Check(cmd_check::Args),
    /// Benchmark: correctness first, then latency per timing tier against the copy floor.
    Bench(cmd_bench::Args),
    /// Plot a bench JSON as SVG.
    Plot(cmd_plot::Args),
    /// Write a seeded random workload (a definition's inputs) as safetensors.
    Gen(cmd_gen::Args),
    /// Write a flashinfer-trace dataset (definitions, workloads JSONL, safetensors) of the benched workloads.
    Workloads(cmd_workloads::Args),
    /// Compile every CUDA kernel with NVRTC (no GPU needed) and print registers, shared memory, spills.
    Kernels(cmd_kernels::Args),
    /// Write flashinfer-bench solutions (CUDA, tvm-ffi) made from gdn's kernels, one per definition.
    Pack(cmd_pack::Args),
}

fn main() {
    // A bug must still end as one line, not a multi-line backtrace dump.
    std::panic::set_hook(Box::new(|info| {
        let msg = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_default();
        let at = info
            .location()
            .map(|l| format!(" at {l}"))
            .unwrap_or_default();
        eprintln!("error: internal error: {}{at}", msg.replace('\n', " "));
    }));
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Run(a) => cmd_run::main(a),
        Command::Check(a) => cmd_check::main(a),
        Command::Bench(a) => cmd_bench::main(a),
        Command::Plot(a) => cmd_plot::main(a),
        Command::Gen(a) => cmd_gen::main(a),
        Command::Workloads(a) => cmd_workloads::main(a),
        Command::Kernels(a) => cmd_kernels::main(a),
        Command::Pack(a) => cmd_pack::main(a),
    };
    if let Err(e) = result {
        eprintln!("error: {}", format!("{e:#}").replace('\n', " "));
        std::process::exit(1);
    }
}
