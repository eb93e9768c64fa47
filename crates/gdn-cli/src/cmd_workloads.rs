//! `gdn workloads`: writes a flashinfer-trace dataset of the workloads `gdn bench` measures, for
//! flashinfer-bench (or `gdn check --dataset`) to run.
//!
//! The dataset: `definitions/gdn/<definition>.json` copied byte for byte from the definitions folder,
//! `workloads/gdn/<definition>.jsonl` (one workload per line), and one safetensors file per workload under
//! `blob/workloads/gdn/` holding every tensor input (`cu_seqlens` and the pool indices included; `scale` is a
//! scalar in the line). The mixes:
//! - `contest`: the contest-like decode mix (54 workloads, raw randn q/k), the 100-workload prefill mix
//!   (normalised q/k), and MTP at T = 2..8 for B = 1, 16, 64 (normalised q/k, intermediate states);
//! - `anchors`: `gdn bench`'s anchor configurations of the three operations (the full set, as on a GPU).
//!
//! Workload i of a definition draws its tensors from seed + i, and its uuid from the seed, the definition and
//! i: the same arguments write the same dataset.

use crate::bench_classes::{self, Scope};
use crate::cmd_bench::parse_heads;
use crate::cmd_check::OpFilter;
use crate::table::progress;
use anyhow::{bail, Context, Result};
use gdn_core::dataset::{read_definitions, seeded_uuid, write_workload, DefinitionFile};
use gdn_core::workload::{contest_decode_mix, contest_prefill_mix, generate, WorkloadSpec};
use gdn_core::{Definition, Heads, Op};
use std::path::{Path, PathBuf};

#[derive(clap::Args)]
pub struct Args {
    /// The folder of flashinfer-bench GDN definition JSONs to copy (default:
    /// ../shared/flashinfer-trace/definitions/gdn beside the repository).
    #[arg(long)]
    definitions: Option<PathBuf>,
    /// The dataset folder to write (created; files of the same names are replaced).
    #[arg(long)]
    out: PathBuf,
    /// `contest`: the contest-like decode and prefill mixes and MTP at T = 2..8; `anchors`: `gdn bench`'s
    /// anchor configurations.
    #[arg(long, value_enum, default_value = "contest")]
    mix: Mix,
    /// Head configurations `qk{H}_v{HV}`, comma-separated, or `all` (every one the definitions folder has).
    #[arg(long, default_value = "qk4_v8")]
    heads: String,
    /// Only these operations' definitions.
    #[arg(long, value_enum, default_value = "all")]
    op: OpFilter,
    /// Workload i of a definition draws its tensors from seed + i (and its uuid from the seed).
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// A few small workloads per definition (a smoke dataset).
    #[arg(long)]
    quick: bool,
}

/// Which workloads `--mix` writes.
#[derive(Copy, Clone, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Mix {
    Contest,
    Anchors,
}

/// The MTP draft lengths of the contest mix, and its batch sizes (those of the MTP anchors).
const MTP_TS: std::ops::RangeInclusive<usize> = 2..=8;
const MTP_BATCHES: [usize; 3] = [1, 16, 64];

pub fn main(a: Args) -> Result<()> {
    let dir = match &a.definitions {
        Some(d) => d.clone(),
        None => default_definitions_dir()?,
    };
    let defs = read_definitions(&dir)?;
    let heads = select_heads(&a.heads, defs.gdn.values().map(|d| d.def.heads))?;
    let mut todo: Vec<(&DefinitionFile, Vec<WorkloadSpec>)> = Vec::new();
    for h in &heads {
        for op in [Op::Decode, Op::Prefill, Op::Mtp] {
            if !a.op.includes(op) {
                continue;
            }
            let name = Definition::new(op, *h).name;
            let Some(file) = defs.gdn.get(&name) else {
                let have: Vec<&String> = defs.gdn.keys().collect();
                bail!(
                    "{}: no definition {name} (the folder has {have:?})",
                    dir.display()
                );
            };
            todo.push((file, specs(a.mix, op, *h, a.seed, a.quick)));
        }
    }
    let total: usize = todo.iter().map(|(_, s)| s.len()).sum();
    let pb = progress(total as u64, "workloads");
    for sub in ["definitions/gdn", "workloads/gdn"] {
        let d = a.out.join(sub);
        std::fs::create_dir_all(&d).with_context(|| format!("creating {}", d.display()))?;
    }
    let mut bytes = 0u64;
    for (file, specs) in &todo {
        let def = &file.def;
        let copy = a.out.join(format!("definitions/gdn/{}.json", def.name));
        std::fs::copy(&file.path, &copy)
            .with_context(|| format!("copying {} to {}", file.path.display(), copy.display()))?;
        let mut lines = String::new();
        for (i, spec) in specs.iter().enumerate() {
            pb.set_message(format!("{} {}", def.name, spec.label));
            let tensors = generate(spec, a.seed.wrapping_add(i as u64));
            let uuid = seeded_uuid(a.seed, &def.name, i);
            let record = write_workload(&a.out, def, &uuid, &tensors)
                .with_context(|| format!("{} {}", def.name, spec.label))?;
            bytes += tensors
                .values()
                .map(|t| (t.numel() * t.dtype().size()) as u64)
                .sum::<u64>();
            lines += &record.to_line();
            lines.push('\n');
            pb.inc(1);
        }
        let jsonl = a.out.join(format!("workloads/gdn/{}.jsonl", def.name));
        std::fs::write(&jsonl, lines).with_context(|| format!("writing {}", jsonl.display()))?;
    }
    pb.finish_and_clear();
    for (file, specs) in &todo {
        println!("{}: {} workloads", file.def.name, specs.len());
    }
    println!(
        "wrote {} ({total} workloads, {:.1} MB of tensors)",
        a.out.display(),
        bytes as f64 / 1e6
    );
    Ok(())
}

/// `../shared/flashinfer-trace/definitions/gdn` beside the repository: from the working directory (the
/// repository's root), else from where this binary was built.
fn default_definitions_dir() -> Result<PathBuf> {
    let rel = "../shared/flashinfer-trace/definitions/gdn";
    let built = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(rel);
    let tried = [PathBuf::from(rel), built];
    match tried.iter().find(|p| p.is_dir()) {
        Some(p) => Ok(p.clone()),
        None => bail!(
            "no definitions folder found (tried {}); give one with --definitions",
            tried
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// `--heads`: `all` (every configuration in the folder, sorted) or a comma-separated list.
fn select_heads(arg: &str, have: impl Iterator<Item = Heads>) -> Result<Vec<Heads>> {
    let mut heads: Vec<Heads> = if arg == "all" {
        have.collect()
    } else {
        arg.split(',')
            .map(|s| parse_heads(s.trim()))
            .collect::<Result<_>>()?
    };
    heads.sort_by_key(|h| (h.num_q_heads, h.num_v_heads, h.head_size));
    heads.dedup();
    if heads.is_empty() {
        bail!("--heads {arg}: no head configuration");
    }
    Ok(heads)
}

/// The workloads of one definition in `mix`; `quick` keeps a few small ones.
pub fn specs(mix: Mix, op: Op, h: Heads, seed: u64, quick: bool) -> Vec<WorkloadSpec> {
    if mix == Mix::Anchors {
        let scope = Scope {
            cpu: false,
            full: true,
            quick,
            seed,
        };
        let class = match op {
            Op::Decode => bench_classes::decode_anchors(h, &scope),
            Op::Prefill => bench_classes::prefill_anchors(h, &scope),
            Op::Mtp => bench_classes::mtp_anchors(h, &scope),
        };
        return class.items.into_iter().map(|(s, _)| s).collect();
    }
    match op {
        Op::Decode => {
            let mut mix = contest_decode_mix(h);
            if quick {
                let mut seen = vec![];
                mix.retain(|s| {
                    let b = s.seq_lens.len();
                    let keep = [1, 4, 16].contains(&b) && !seen.contains(&b);
                    seen.push(b);
                    keep
                });
            }
            mix
        }
        Op::Prefill => {
            let mut mix = contest_prefill_mix(h, seed);
            for s in mix.iter_mut() {
                s.normalize_qk = true;
            }
            if quick {
                mix.retain(|s| s.tokens() <= 512);
                mix.truncate(4);
            }
            mix
        }
        Op::Mtp => {
            let (ts, bs): (Vec<usize>, Vec<usize>) = if quick {
                (vec![2, 5, 8], vec![2])
            } else {
                (MTP_TS.collect(), MTP_BATCHES.to_vec())
            };
            let mut v = vec![];
            for &t in &ts {
                for &b in &bs {
                    let mut s = WorkloadSpec::mtp(h, b, t);
                    s.normalize_qk = true;
                    s.intermediate = true;
                    v.push(s);
                }
            }
            v
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mixes_have_the_bench_sizes() {
        let h = Heads::new(4, 8, 128).unwrap();
        assert_eq!(specs(Mix::Contest, Op::Decode, h, 0, false).len(), 54);
        assert_eq!(specs(Mix::Contest, Op::Prefill, h, 0, false).len(), 100);
        assert_eq!(specs(Mix::Contest, Op::Mtp, h, 0, false).len(), 21);
        let quick = specs(Mix::Contest, Op::Decode, h, 0, true);
        let bs: Vec<usize> = quick.iter().map(|s| s.seq_lens.len()).collect();
        assert_eq!(bs, [1, 4, 16]);
        assert!(specs(Mix::Contest, Op::Prefill, h, 0, true)
            .iter()
            .all(|s| s.tokens() <= 512));
        assert_eq!(specs(Mix::Anchors, Op::Decode, h, 0, false).len(), 6);
        assert_eq!(specs(Mix::Anchors, Op::Prefill, h, 0, false).len(), 8);
        assert_eq!(specs(Mix::Anchors, Op::Mtp, h, 0, false).len(), 12);
    }
}
