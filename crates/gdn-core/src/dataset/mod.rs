//! flashinfer-trace datasets: the folder layout flashinfer-bench reads and writes. A dataset holds
//! `definitions/**/*.json` (one definition each), `workloads/**/*.jsonl` (one workload per line, see [`line`]),
//! `blob/…` (the workloads' safetensors), and `solutions/`, `traces/` (not read here).
//!
//! [`Dataset::open`] reads the GDN definitions (a definition of another `op_type` is left alone, and so are
//! its workloads) and checks every workload line against its definition ([`entry`]) before anything runs;
//! a bad dataset is an error naming the file, the line and the field. [`write`] stores workloads.

pub mod entry;
pub mod line;
pub mod write;

pub use entry::Workload;
pub use line::{FieldError, InputSource, Record};
pub use write::{seeded_uuid, write_workload, BLOB_DIR};

use crate::definition::Definition;
use crate::error::{GdnError, Result};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A definition and the JSON file it was read from.
#[derive(Clone, Debug, PartialEq)]
pub struct DefinitionFile {
    pub def: Definition,
    pub path: PathBuf,
}

/// The definitions of a folder: the GDN ones by name, and the names of the others (other operations).
#[derive(Clone, Debug, Default)]
pub struct Definitions {
    pub gdn: BTreeMap<String, DefinitionFile>,
    pub other: BTreeSet<String>,
}

/// Reads every `*.json` under `dir` (recursively). A definition whose `op_type` is `gdn` must be one gdn
/// implements (else the error names the file); the others are only named.
pub fn read_definitions(dir: &Path) -> Result<Definitions> {
    let mut defs = Definitions::default();
    for path in files_under(dir, "json")? {
        let text = std::fs::read_to_string(&path)
            .map_err(|e| GdnError::io(path.display().to_string(), e))?;
        let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| {
            GdnError::io(
                path.display().to_string(),
                format!("not a definition JSON: {e}"),
            )
        })?;
        let name = v.get("name").and_then(|n| n.as_str()).unwrap_or_default();
        if v.get("op_type").and_then(|t| t.as_str()) != Some("gdn") {
            defs.other.insert(name.to_string());
            continue;
        }
        let def =
            Definition::from_json(&v).map_err(|e| GdnError::io(path.display().to_string(), e))?;
        if let Some(first) = defs.gdn.get(&def.name) {
            return Err(GdnError::io(
                path.display().to_string(),
                format!(
                    "definition '{}' is also in {}",
                    def.name,
                    first.path.display()
                ),
            ));
        }
        defs.gdn
            .insert(def.name.clone(), DefinitionFile { def, path });
    }
    Ok(defs)
}

/// An opened dataset: its GDN definitions and the workloads selected, each checked.
#[derive(Clone, Debug)]
pub struct Dataset {
    pub root: PathBuf,
    pub definitions: Definitions,
    /// In file order (files sorted by path), then line order.
    pub workloads: Vec<Workload>,
    /// Workload lines left out: of another operation's definition, or of a definition not asked for.
    pub skipped: usize,
}

impl Dataset {
    /// Opens the dataset at `root`, keeping the workloads of `only` (a definition name) when given.
    pub fn open(root: &Path, only: Option<&str>) -> Result<Dataset> {
        if !root.is_dir() {
            return Err(GdnError::io(
                root.display().to_string(),
                "no such dataset folder",
            ));
        }
        let definitions = read_definitions(&root.join("definitions"))?;
        if let Some(name) = only {
            if !definitions.gdn.contains_key(name) {
                let have: Vec<&String> = definitions.gdn.keys().collect();
                return Err(GdnError::definition(
                    name,
                    format!(
                        "not a GDN definition of the dataset {} (it has {have:?})",
                        root.display()
                    ),
                ));
            }
        }
        let mut ds = Dataset {
            root: root.to_path_buf(),
            definitions,
            workloads: Vec::new(),
            skipped: 0,
        };
        for file in files_under(&root.join("workloads"), "jsonl")? {
            ds.read_workloads(&file, only)?;
        }
        Ok(ds)
    }

    fn read_workloads(&mut self, file: &Path, only: Option<&str>) -> Result<()> {
        let text = std::fs::read_to_string(file)
            .map_err(|e| GdnError::io(file.display().to_string(), e))?;
        let stem = file
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        for (i, text) in text.lines().enumerate() {
            if text.trim().is_empty() {
                continue;
            }
            let at = |e: FieldError| {
                GdnError::io(
                    format!("{}:{}", file.display(), i + 1),
                    format!("{}: {}", e.field, e.problem),
                )
            };
            let record = Record::parse(text).map_err(at)?;
            let name = record.definition.clone().unwrap_or_else(|| stem.clone());
            let Some(d) = self.definitions.gdn.get(&name) else {
                if self.definitions.other.contains(&name) {
                    self.skipped += 1;
                    continue;
                }
                let field = if record.definition.is_some() {
                    "definition"
                } else {
                    "definition (from the file name)"
                };
                return Err(at(FieldError::new(
                    field,
                    format!("unknown definition '{name}': no definitions/**/*.json of that name"),
                )));
            };
            if only.is_some_and(|o| o != name) {
                self.skipped += 1;
                continue;
            }
            let w = Workload::new(record, &d.def, &self.root, file, i + 1)?;
            self.workloads.push(w);
        }
        Ok(())
    }
}

/// Every file under `dir` (recursively) whose extension is `ext`, sorted; `dir` must exist.
fn files_under(dir: &Path, ext: &str) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        let entries =
            std::fs::read_dir(&d).map_err(|e| GdnError::io(d.display().to_string(), e))?;
        for entry in entries {
            let path = entry
                .map_err(|e| GdnError::io(d.display().to_string(), e))?
                .path();
            if path.is_dir() {
                todo.push(path);
            } else if path.extension().is_some_and(|e| e == ext) {
                out.push(path);
            }
        }
    }
    out.sort();
    Ok(out)
}
