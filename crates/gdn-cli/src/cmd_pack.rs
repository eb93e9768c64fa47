//! `gdn pack`: writes flashinfer-bench solutions made from gdn's kernels (`pack/`): for each definition named,
//! `OUT/<definition>/<solution>.json` and `OUT/<definition>/config.toml`. Needs NVRTC (the kernels are compiled
//! for sm_90a), no GPU.

use crate::pack;
use anyhow::{bail, Result};
use gdn_core::dataset::read_definitions;
use gdn_core::Definition;
use std::path::{Path, PathBuf};

#[derive(clap::Args)]
pub struct Args {
    /// A definition to pack (repeatable), or `all`: every GDN definition of the definitions folder.
    #[arg(long = "definition", required = true)]
    definitions: Vec<String>,
    /// The folder to write (`OUT/<definition>/…`; files of the same names are replaced).
    #[arg(long)]
    out: PathBuf,
    /// The solution kind: `cuda` (host code for tvm-ffi, the kernels as sm_90a CUBINs).
    #[arg(long, value_enum, default_value = "cuda")]
    language: Language,
    /// The flashinfer-bench GDN definition JSONs the names must come from (default:
    /// ../shared/flashinfer-trace/definitions/gdn beside the repository, when it is there).
    #[arg(long = "definitions")]
    definitions_dir: Option<PathBuf>,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Language {
    Cuda,
}

fn definitions_dir(given: &Option<PathBuf>) -> Option<PathBuf> {
    if let Some(d) = given {
        return Some(d.clone());
    }
    let rel = "../shared/flashinfer-trace/definitions/gdn";
    let built = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(rel);
    [PathBuf::from(rel), built].into_iter().find(|p| p.is_dir())
}

/// The definitions the names ask for: from the definitions folder when there is one (the published names only),
/// else gdn's own.
fn resolve(a: &Args) -> Result<Vec<Definition>> {
    let dir = definitions_dir(&a.definitions_dir);
    let published = match &dir {
        Some(d) => Some(read_definitions(d)?),
        None => None,
    };
    let mut out: Vec<Definition> = Vec::new();
    for name in &a.definitions {
        let defs: Vec<Definition> = match (name.as_str(), &published) {
            ("all", Some(p)) => p.gdn.values().map(|f| f.def.clone()).collect(),
            ("all", None) => bail!("--definition all needs a definitions folder (--definitions)"),
            (n, Some(p)) => match p.gdn.get(n) {
                Some(f) => vec![f.def.clone()],
                None => bail!(
                    "--definition {n}: not in {} (it has {:?})",
                    dir.as_ref().unwrap().display(),
                    p.gdn.keys().collect::<Vec<_>>()
                ),
            },
            (n, None) => vec![Definition::builtin(n)?],
        };
        for d in defs {
            if !out.iter().any(|x| x.name == d.name) {
                out.push(d);
            }
        }
    }
    Ok(out)
}

pub fn main(a: Args) -> Result<()> {
    let Language::Cuda = a.language;
    for def in resolve(&a)? {
        let p = pack::pack(&def).map_err(|e| anyhow::anyhow!("{}: {e}", def.name))?;
        let path = pack::write(&def, &p, &a.out).map_err(anyhow::Error::msg)?;
        let bytes: usize = p.modules.iter().map(|m| m.1).sum();
        println!(
            "{}: {} ({} modules, {:.1} MB of CUBIN)",
            def.name,
            path.display(),
            p.modules.len(),
            bytes as f64 / 1e6
        );
    }
    Ok(())
}
