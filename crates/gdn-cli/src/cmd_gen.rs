//! `gdn gen`: writes a seeded random workload (the definition's inputs) as safetensors, to feed `gdn run`.

use anyhow::Result;
use gdn_core::workload::{generate, WorkloadSpec};
use gdn_core::{io, Definition};
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    #[arg(long, value_enum, default_value = "decode")]
    op: crate::cmd_check::OpFilter,
    /// Head configuration `qk{H}_v{HV}`.
    #[arg(long, default_value = "qk4_v8")]
    heads: String,
    /// Requests (decode, mtp).
    #[arg(long, default_value_t = 4)]
    batch: usize,
    /// Tokens per request (mtp).
    #[arg(long, default_value_t = 4)]
    t: usize,
    /// Prefill sequence lengths, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "100,37")]
    seq_lens: Vec<usize>,
    /// Raw randn q/k (the flashinfer-bench draw) instead of L2-normalised (default for prefill and mtp).
    #[arg(long)]
    raw: bool,
    #[arg(long, default_value_t = 0)]
    seed: u64,
    #[arg(long)]
    output: PathBuf,
}

pub fn main(a: Args) -> Result<()> {
    use crate::cmd_check::OpFilter;
    let heads = crate::cmd_bench::parse_heads(&a.heads)?;
    let mut spec = match a.op {
        OpFilter::Decode => WorkloadSpec::decode(heads, a.batch),
        OpFilter::Prefill => WorkloadSpec::prefill(heads, &a.seq_lens),
        OpFilter::Mtp => WorkloadSpec::mtp(heads, a.batch, a.t),
        OpFilter::All => anyhow::bail!("--op must be decode, prefill or mtp"),
    };
    if a.raw {
        spec.normalize_qk = false;
    }
    io::write_safetensors(&a.output, &generate(&spec, a.seed))?;
    let name = Definition::new(spec.op, heads).name;
    eprintln!("wrote {} (inputs of {name})", a.output.display());
    Ok(())
}
