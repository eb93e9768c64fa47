//! One workload of a dataset, checked against its definition, and its tensors.
//!
//! Checked when the dataset is opened (before anything runs): every variable axis given (a non-negative
//! integer; a constant axis only with the definition's value; the definition's constraints between axes),
//! every input a definition input, the kind fits the input (`scale` is a scalar; a tensor is random or
//! safetensors; `cu_seqlens` and `initial_state_indices` only from safetensors, since random integers are not
//! valid boundaries or pool rows), and every safetensors path inside the dataset's root and naming a file.
//! An input the line does not give is random, as flashinfer-bench's `gen_inputs` draws it (so a line without
//! `cu_seqlens` or `scale` is refused). Checked when loaded: the tensor key is in its file, dtype and shape
//! are exactly the definition's with the axes (as the harness's `load_safetensors` requires), then everything
//! [`Problem::from_tensors`] checks (e.g. the `cu_seqlens` values).
//!
//! Random inputs are drawn as gdn's generator draws them: `randn` (q, k, v, a, b, dt_bias, the intermediate
//! states), `0.1·randn` for a state, `log(U(1, 16))` for `A_log`, seeded by the caller's seed, the workload's
//! uuid and the input's name.

use crate::dataset::line::{FieldError, InputSource, Record};
use crate::definition::{Definition, Op, TensorSpec};
use crate::dtype::DType;
use crate::error::{GdnError, Result};
use crate::io;
use crate::problem::{Problem, RunOptions};
use crate::tensor::{Data, Tensor, TensorMap};
use half::bf16;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rand_distr::StandardNormal;
use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

/// A workload checked against its definition.
#[derive(Clone, Debug, PartialEq)]
pub struct Workload {
    pub def: Definition,
    /// The workloads file (the path the dataset was opened with, joined) and the 1-based line.
    pub file: PathBuf,
    pub line: usize,
    pub uuid: String,
    /// Every variable axis of the definition.
    pub axes: BTreeMap<String, usize>,
    pub inputs: BTreeMap<String, InputSource>,
}

impl Workload {
    /// Checks `record` (line `line` of `file`) against `def`; safetensors paths resolve under `root`.
    pub fn new(
        record: Record,
        def: &Definition,
        root: &Path,
        file: &Path,
        line: usize,
    ) -> Result<Workload> {
        let w = Workload {
            def: def.clone(),
            file: file.to_path_buf(),
            line,
            uuid: record.uuid,
            axes: BTreeMap::new(),
            inputs: record.inputs,
        };
        let axes = check_axes(def, &record.axes).map_err(|e| w.error(e))?;
        let w = Workload { axes, ..w };
        w.check_inputs(root).map_err(|e| w.error(e))?;
        Ok(w)
    }

    /// `file:line`, for messages.
    pub fn place(&self) -> String {
        format!("{}:{}", self.file.display(), self.line)
    }

    /// A short label: the shape (`B=8`, `n3 t812`, `B=4 T=3`) and the uuid's first 8 characters.
    pub fn label(&self) -> String {
        let ax = |a: &str| self.axes.get(a).copied().unwrap_or(0);
        let shape = match self.def.op {
            Op::Decode => format!("B={}", ax("batch_size")),
            Op::Prefill => format!("n{} t{}", ax("num_seqs"), ax("total_seq_len")),
            Op::Mtp => format!("B={} T={}", ax("batch_size"), ax("seq_len")),
        };
        let id: String = self.uuid.chars().take(8).collect();
        format!("{shape} {id}")
    }

    /// The error `e` at this workload's line.
    pub fn error(&self, e: FieldError) -> GdnError {
        GdnError::io(self.place(), format!("{}: {}", e.field, e.problem))
    }

    /// The workload's tensors (random inputs drawn from `seed`), validated as a [`Problem`] of the definition.
    pub fn load(&self, root: &Path, seed: u64) -> Result<(TensorMap, Problem)> {
        let mut files: BTreeMap<PathBuf, TensorMap> = BTreeMap::new();
        let mut tensors = TensorMap::new();
        for spec in self.def.inputs() {
            let t = match self.source(spec.name) {
                InputSource::Scalar(x) => Tensor::scalar_f32(*x as f32),
                InputSource::Random => self.random(&spec, seed),
                InputSource::Safetensors { path, tensor_key } => {
                    let field = format!("workload.inputs.{}", spec.name);
                    let file = blob_path(root, path)
                        .map_err(|p| self.error(FieldError::new(format!("{field}.path"), p)))?;
                    if !files.contains_key(&file) {
                        files.insert(file.clone(), io::read_safetensors(&file)?);
                    }
                    let t = files[&file].get(tensor_key).ok_or_else(|| {
                        let held: Vec<&String> = files[&file].keys().collect();
                        self.error(FieldError::new(
                            format!("{field}.tensor_key"),
                            format!("no tensor '{tensor_key}' in {path} (it holds {held:?})"),
                        ))
                    })?;
                    self.check_tensor(&spec, t, path)
                        .map_err(|p| self.error(FieldError::new(&field, p)))?;
                    t.clone()
                }
            };
            tensors.insert(spec.name.to_string(), t);
        }
        let p = Problem::from_tensors(&self.def, &tensors, &RunOptions::default())
            .map_err(|e| self.problem_error(e))?;
        Ok((tensors, p))
    }

    /// Where an input comes from: as given, else random (flashinfer-bench draws an input the line omits).
    pub fn source(&self, name: &str) -> &InputSource {
        self.inputs.get(name).unwrap_or(&InputSource::Random)
    }

    /// A [`Problem::from_tensors`] error as a line error naming the input.
    fn problem_error(&self, e: GdnError) -> GdnError {
        let field = match &e {
            GdnError::Missing { tensor }
            | GdnError::DType { tensor, .. }
            | GdnError::Shape { tensor, .. }
            | GdnError::Value { tensor, .. } => format!("workload.inputs.{tensor}"),
            _ => "workload".into(),
        };
        self.error(FieldError::new(field, e.to_string()))
    }

    /// The shape the definition and the axes give an input (`None` for a scalar).
    fn shape_of(&self, spec: &TensorSpec) -> Option<Vec<usize>> {
        spec.shape.as_ref().map(|s| {
            s.iter()
                .map(|a| self.def.const_axis(a).unwrap_or_else(|| self.axes[*a]))
                .collect()
        })
    }

    fn check_tensor(
        &self,
        spec: &TensorSpec,
        t: &Tensor,
        path: &str,
    ) -> std::result::Result<(), String> {
        if t.dtype() != spec.dtype {
            return Err(format!(
                "the tensor in {path} is {}, the definition says {}",
                t.dtype(),
                spec.dtype
            ));
        }
        let want = self.shape_of(spec).unwrap_or_default();
        if t.shape != want {
            let symbols = spec
                .shape
                .as_ref()
                .map(|s| s.join(", "))
                .unwrap_or_default();
            return Err(format!(
                "the tensor in {path} has shape {:?}, but [{symbols}] with workload.axes is {want:?}",
                t.shape
            ));
        }
        Ok(())
    }

    /// Seeded random values of the input's dtype and shape.
    fn random(&self, spec: &TensorSpec, seed: u64) -> Tensor {
        let shape = self.shape_of(spec).unwrap_or_default();
        let n: usize = shape.iter().product();
        let mut rng =
            StdRng::seed_from_u64(seed ^ fnv1a(&self.uuid) ^ fnv1a(spec.name).rotate_left(17));
        let sigma = if spec.name == self.def.state_input() {
            0.1
        } else {
            1.0
        };
        let vals: Vec<f32> = if spec.name == "A_log" {
            (0..n)
                .map(|_| rng.random_range(1.0f32..16.0).ln())
                .collect()
        } else {
            (0..n)
                .map(|_| sigma * rng.sample::<f32, _>(StandardNormal))
                .collect()
        };
        let data = match spec.dtype {
            DType::BF16 => Data::BF16(vals.into_iter().map(bf16::from_f32).collect()),
            DType::F16 => Data::F16(vals.into_iter().map(half::f16::from_f32).collect()),
            _ => Data::F32(vals),
        };
        Tensor::new(shape, data)
    }

    /// Every input is a definition input, every required one is given, and its kind fits it.
    fn check_inputs(&self, root: &Path) -> std::result::Result<(), FieldError> {
        let specs = self.def.inputs();
        for name in self.inputs.keys() {
            if !specs.iter().any(|s| s.name == name) {
                let names: Vec<&str> = specs.iter().map(|s| s.name).collect();
                return Err(FieldError::new(
                    format!("workload.inputs.{name}"),
                    format!(
                        "not an input of {} (its inputs: {})",
                        self.def.name,
                        names.join(", ")
                    ),
                ));
            }
        }
        for spec in &specs {
            let field = format!("workload.inputs.{}", spec.name);
            let given = if self.inputs.contains_key(spec.name) {
                ""
            } else {
                "not given, so random (as flashinfer-bench draws it), but "
            };
            match (self.source(spec.name), &spec.shape) {
                (InputSource::Random, None) => {
                    return Err(FieldError::new(
                        field,
                        format!(
                            "{given}a scalar cannot be random: give {{\"type\": \"scalar\", \"value\": x}}"
                        ),
                    ))
                }
                (InputSource::Random, Some(_)) if matches!(spec.dtype, DType::I32 | DType::I64) => {
                    return Err(FieldError::new(
                        field,
                        format!(
                            "{given}random {} values are not valid {}; give them as safetensors",
                            spec.dtype,
                            if spec.dtype == DType::I64 {
                                "sequence boundaries"
                            } else {
                                "pool rows"
                            }
                        ),
                    ))
                }
                (InputSource::Scalar(_), Some(shape)) => {
                    return Err(FieldError::new(
                        field,
                        format!(
                            "a scalar value for a tensor of shape [{}]; give it as safetensors or random",
                            shape.join(", ")
                        ),
                    ))
                }
                (InputSource::Scalar(x), None) if !x.is_finite() => {
                    return Err(FieldError::new(format!("{field}.value"), "must be finite"))
                }
                (InputSource::Safetensors { .. }, None) => {
                    return Err(FieldError::new(
                        field,
                        "a scalar input: give {\"type\": \"scalar\", \"value\": x}",
                    ))
                }
                (InputSource::Safetensors { path, .. }, _) => {
                    let file = blob_path(root, path)
                        .map_err(|p| FieldError::new(format!("{field}.path"), p))?;
                    if !file.is_file() {
                        return Err(FieldError::new(
                            format!("{field}.path"),
                            format!("{path}: no such file ({})", file.display()),
                        ));
                    }
                }
                _ => {}
            }
        }
        Ok(())
    }
}

/// Every variable axis given, nothing unknown, constants equal to the definition's, and the definition's
/// constraints between axes.
fn check_axes(
    def: &Definition,
    given: &BTreeMap<String, u64>,
) -> std::result::Result<BTreeMap<String, usize>, FieldError> {
    let var = def.var_axes();
    let mut axes = BTreeMap::new();
    for (name, &v) in given {
        let field = format!("workload.axes.{name}");
        match def.const_axis(name) {
            Some(c) if c as u64 == v => {}
            Some(c) => {
                return Err(FieldError::new(
                    field,
                    format!("{v}, but the definition fixes it at {c}"),
                ))
            }
            None if var.contains(&name.as_str()) => {
                axes.insert(name.clone(), v as usize);
            }
            None => {
                return Err(FieldError::new(
                    field,
                    format!(
                        "not an axis of {} (its variable axes: {})",
                        def.name,
                        var.join(", ")
                    ),
                ))
            }
        }
    }
    if let Some(a) = var.iter().find(|a| !axes.contains_key(**a)) {
        return Err(FieldError::new(
            format!("workload.axes.{a}"),
            format!(
                "missing (every variable axis of {} is given: {})",
                def.name,
                var.join(", ")
            ),
        ));
    }
    match def.op {
        Op::Prefill if axes["len_cu_seqlens"] != axes["num_seqs"] + 1 => Err(FieldError::new(
            "workload.axes.len_cu_seqlens",
            format!(
                "{}, but the definition requires num_seqs + 1 = {}",
                axes["len_cu_seqlens"],
                axes["num_seqs"] + 1
            ),
        )),
        Op::Mtp if axes["seq_len"] < 2 => Err(FieldError::new(
            "workload.axes.seq_len",
            format!(
                "{}, but the definition requires seq_len > 1",
                axes["seq_len"]
            ),
        )),
        _ => Ok(axes),
    }
}

/// `root/rel`, refused when `rel` is absolute or climbs out of `root` with `..` (symbolic links are followed:
/// a downloaded dataset's blobs are often links into a cache folder).
pub fn blob_path(root: &Path, rel: &str) -> std::result::Result<PathBuf, String> {
    let p = Path::new(rel);
    let mut depth = 0usize;
    for c in p.components() {
        match c {
            Component::CurDir => {}
            Component::Normal(_) => depth += 1,
            Component::ParentDir if depth > 0 => depth -= 1,
            Component::ParentDir => {
                return Err(format!(
                    "{rel}: leaves the dataset folder (paths are relative to its root)"
                ))
            }
            Component::RootDir | Component::Prefix(_) => {
                return Err(format!(
                    "{rel}: an absolute path; safetensors paths are relative to the dataset's root"
                ))
            }
        }
    }
    Ok(root.join(p))
}

/// FNV-1a of a string (a stable seed component: std's hasher may change between releases).
fn fnv1a(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ b as u64).wrapping_mul(0x0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blob_paths_stay_inside_the_root() {
        let root = Path::new("/data/ds");
        assert_eq!(
            blob_path(root, "./blob/a/../b.safetensors").unwrap(),
            root.join("./blob/a/../b.safetensors")
        );
        for bad in [
            "../x.safetensors",
            "blob/../../x",
            "/etc/passwd",
            "./a/../../b",
        ] {
            assert!(blob_path(root, bad).is_err(), "{bad}");
        }
    }
}
