//! Writing workloads: every tensor input in one safetensors file per workload, each input's `tensor_key` its
//! name, at `blob/workloads/gdn/<definition>/<definition>_<uuid>.safetensors` (where flashinfer-bench's own
//! `TraceSet.add_workload_blob_tensor` puts a workload's tensors; the line's path starts with `./` as in the
//! published GDN workloads); `scale` as a scalar; the variable axes bound from the tensors.

use crate::dataset::line::{InputSource, Record};
use crate::definition::Definition;
use crate::error::{GdnError, Result};
use crate::io;
use crate::problem::{Problem, RunOptions};
use crate::tensor::{Tensor, TensorMap};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;
use std::path::Path;

/// The blob folder of GDN workloads, relative to a dataset's root.
pub const BLOB_DIR: &str = "blob/workloads/gdn";

/// Writes the tensors of one workload of `def` under `root` and returns its line. `tensors` are the
/// definition's inputs (as [`crate::workload::generate`] draws them); they are validated first, and `scale`
/// is written resolved (0 becomes `1/sqrt(head_size)`). An optional input that `tensors` lacks is written as
/// zeros (what gdn reads for an absent state; a line that omitted it would make it random).
pub fn write_workload(
    root: &Path,
    def: &Definition,
    uuid: &str,
    tensors: &TensorMap,
) -> Result<Record> {
    let p = Problem::from_tensors(def, tensors, &RunOptions::default())?;
    let mut axes: BTreeMap<String, u64> = BTreeMap::new();
    for spec in def.inputs() {
        let (Some(shape), Some(t)) = (&spec.shape, tensors.get(spec.name)) else {
            continue;
        };
        if t.dtype() != spec.dtype {
            return Err(GdnError::Unsupported(format!(
                "tensor '{}' is {}: a flashinfer-trace workload has the definition's {}",
                spec.name,
                t.dtype(),
                spec.dtype
            )));
        }
        for (a, &n) in shape.iter().zip(&t.shape) {
            if def.const_axis(a).is_none() {
                axes.insert(a.to_string(), n as u64);
            }
        }
    }
    // An axis that only an absent input or the outputs name (num_seqs of a prefill without a state).
    for a in def.var_axes() {
        axes.entry(a.to_string()).or_insert(match a {
            "num_seqs" => p.dims.num_seqs,
            "pool_size" => p.dims.state_rows,
            _ => p.dims.seq_len,
        } as u64);
    }
    let rel = format!("{BLOB_DIR}/{0}/{0}_{uuid}.safetensors", def.name);
    let mut blob = TensorMap::new();
    let mut inputs = BTreeMap::new();
    for spec in def.inputs() {
        let Some(shape) = &spec.shape else {
            let scale = InputSource::Scalar(short_f64(p.scale));
            inputs.insert(spec.name.to_string(), scale);
            continue;
        };
        let t = tensors.get(spec.name).cloned().unwrap_or_else(|| {
            let dims = shape
                .iter()
                .map(|a| def.const_axis(a).unwrap_or_else(|| axes[*a] as usize));
            Tensor::zeros(spec.dtype, dims.collect())
        });
        blob.insert(spec.name.to_string(), t);
        inputs.insert(
            spec.name.to_string(),
            InputSource::Safetensors {
                path: format!("./{rel}"),
                tensor_key: spec.name.to_string(),
            },
        );
    }
    let dir = root.join(BLOB_DIR).join(&def.name);
    std::fs::create_dir_all(&dir).map_err(|e| GdnError::io(dir.display().to_string(), e))?;
    io::write_safetensors(&root.join(&rel), &blob)?;
    Ok(Record {
        definition: Some(def.name.clone()),
        uuid: uuid.to_string(),
        axes,
        inputs,
    })
}

/// A version-4-style UUID drawn from `seed`, `key` and `index`: the same arguments give the same UUID.
pub fn seeded_uuid(seed: u64, key: &str, index: usize) -> String {
    let h = key.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x0100_0000_01b3)
    });
    let mut rng =
        StdRng::seed_from_u64(seed ^ h ^ (index as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let mut b: [u8; 16] = rng.random();
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}

/// `x` as the shortest decimal that reads back as the same f32 (0.088388346, not 0.08838834613561630).
fn short_f64(x: f32) -> f64 {
    x.to_string().parse().unwrap_or(x as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuids_are_seeded_and_well_formed() {
        let u = seeded_uuid(3, "gdn_decode_qk4_v8_d128_k_last", 7);
        assert_eq!(u, seeded_uuid(3, "gdn_decode_qk4_v8_d128_k_last", 7));
        assert_ne!(u, seeded_uuid(3, "gdn_decode_qk4_v8_d128_k_last", 8));
        assert_ne!(u, seeded_uuid(4, "gdn_decode_qk4_v8_d128_k_last", 7));
        let parts: Vec<usize> = u.split('-').map(str::len).collect();
        assert_eq!(parts, [8, 4, 4, 4, 12]);
        assert_eq!(&u[14..15], "4");
    }

    #[test]
    fn scale_is_written_short() {
        assert_eq!(short_f64(1.0 / 128f32.sqrt()), 0.088388346);
        assert_eq!(short_f64(0.3) as f32, 0.3f32);
    }
}
