//! safetensors I/O of a [`TensorMap`] (the flashinfer-bench workload format).
//!
//! Only the dtypes GDN uses are accepted (BF16, F16, F32, I32, I64); anything else, and any corrupt or truncated
//! file, is a one-line [`GdnError::Io`] naming the file (and the tensor). Writes are atomic: the bytes go to a
//! temporary file in the destination's directory which is then renamed, so a failure never leaves a partial
//! output file behind.

use crate::error::{GdnError, Result};
use crate::tensor::{Data, Tensor, TensorMap};
use half::{bf16, f16};
use safetensors::tensor::{Dtype, SafeTensors, TensorView};
use std::io::Write;
use std::path::{Path, PathBuf};

/// Reads every tensor of a safetensors file.
pub fn read_safetensors(path: &Path) -> Result<TensorMap> {
    let file = path.display().to_string();
    let bytes = std::fs::read(path).map_err(|e| GdnError::io(&file, e))?;
    let st = SafeTensors::deserialize(&bytes).map_err(|e| {
        GdnError::io(
            &file,
            one_line(format!("not a valid safetensors file ({e})")),
        )
    })?;
    let mut map = TensorMap::new();
    for (name, view) in st.tensors() {
        let raw = view.data();
        let data = match view.dtype() {
            Dtype::BF16 => Data::BF16(le_elems(raw, |b: [u8; 2]| bf16::from_le_bytes(b))),
            Dtype::F16 => Data::F16(le_elems(raw, |b: [u8; 2]| f16::from_le_bytes(b))),
            Dtype::F32 => Data::F32(le_elems(raw, f32::from_le_bytes)),
            Dtype::I32 => Data::I32(le_elems(raw, i32::from_le_bytes)),
            Dtype::I64 => Data::I64(le_elems(raw, i64::from_le_bytes)),
            other => {
                return Err(GdnError::io(
                    &file,
                    format!(
                    "tensor '{name}': unsupported dtype {other:?} (gdn reads BF16, F16, F32, I32, I64)"
                ),
                ))
            }
        };
        let shape = view.shape().to_vec();
        if shape.iter().product::<usize>() != data.len() {
            return Err(GdnError::io(
                &file,
                format!("tensor '{name}': shape {shape:?} does not match its data"),
            ));
        }
        map.insert(name, Tensor { shape, data });
    }
    Ok(map)
}

/// Writes `tensors` to `path` atomically (temporary file in the same directory, then rename).
pub fn write_safetensors(path: &Path, tensors: &TensorMap) -> Result<()> {
    let file = path.display().to_string();
    let bytes: Vec<(String, Vec<u8>, Dtype, &[usize])> = tensors
        .iter()
        .map(|(n, t)| (n.clone(), t.to_le_bytes(), st_dtype(&t.data), &t.shape[..]))
        .collect();
    let views = bytes
        .iter()
        .map(|(n, b, d, s)| {
            TensorView::new(*d, s.to_vec(), b)
                .map(|v| (n.as_str(), v))
                .map_err(|e| GdnError::io(&file, format!("tensor '{n}': {e}")))
        })
        .collect::<Result<Vec<_>>>()?;
    let buf = safetensors::serialize(views, None).map_err(|e| GdnError::io(&file, e))?;
    let tmp = temp_path(path);
    let written = std::fs::File::create(&tmp).and_then(|mut f| {
        f.write_all(&buf)?;
        f.sync_all()
    });
    let renamed = written.and_then(|_| std::fs::rename(&tmp, path));
    if let Err(e) = renamed {
        let _ = std::fs::remove_file(&tmp);
        return Err(GdnError::io(&file, e));
    }
    Ok(())
}

fn st_dtype(d: &Data) -> Dtype {
    match d {
        Data::BF16(_) => Dtype::BF16,
        Data::F16(_) => Dtype::F16,
        Data::F32(_) => Dtype::F32,
        Data::I32(_) => Dtype::I32,
        Data::I64(_) => Dtype::I64,
    }
}

/// Decodes little-endian elements of `N` bytes each (safetensors guarantees the byte count).
fn le_elems<T, const N: usize>(raw: &[u8], f: impl Fn([u8; N]) -> T) -> Vec<T> {
    raw.chunks_exact(N)
        .map(|c| f(c.try_into().expect("chunk of N bytes")))
        .collect()
}

/// `dir/.name.tmp-<pid>` beside the destination, so the final rename stays on one filesystem.
fn temp_path(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "out".into());
    path.with_file_name(format!(".{name}.tmp-{}", std::process::id()))
}

fn one_line(s: String) -> String {
    s.replace(['\n', '\r'], " ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmpdir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("gdn-io-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn sample() -> TensorMap {
        let mut m = TensorMap::new();
        let bf: Vec<bf16> = (0..6).map(|i| bf16::from_f32(i as f32 - 2.5)).collect();
        m.insert("q".into(), Tensor::new(vec![2, 3], Data::BF16(bf)));
        let h: Vec<f16> = (0..4)
            .map(|i| f16::from_f32(i as f32 * 0.3 - 1.0))
            .collect();
        m.insert("k".into(), Tensor::new(vec![4], Data::F16(h)));
        m.insert("scale".into(), Tensor::scalar_f32(0.125));
        m.insert(
            "idx".into(),
            Tensor::new(vec![3], Data::I32(vec![-1, 0, 7])),
        );
        m.insert(
            "cu_seqlens".into(),
            Tensor::new(vec![3], Data::I64(vec![0, 5, 1 << 40])),
        );
        m.insert("empty".into(), Tensor::new(vec![0, 4], Data::F32(vec![])));
        m
    }

    #[test]
    fn round_trip() {
        let d = tmpdir("rt");
        let p = d.join("x.safetensors");
        let m = sample();
        write_safetensors(&p, &m).unwrap();
        assert_eq!(read_safetensors(&p).unwrap(), m);
        // No temporary file is left behind.
        assert_eq!(std::fs::read_dir(&d).unwrap().count(), 1);
        std::fs::remove_dir_all(d).unwrap();
    }

    #[test]
    fn truncated_and_garbage_files_are_one_line_errors() {
        let d = tmpdir("trunc");
        let p = d.join("x.safetensors");
        write_safetensors(&p, &sample()).unwrap();
        let bytes = std::fs::read(&p).unwrap();
        for cut in [0, 4, 12, bytes.len() - 3] {
            std::fs::write(&p, &bytes[..cut]).unwrap();
            let e = read_safetensors(&p).unwrap_err().to_string();
            assert!(e.contains("x.safetensors") && !e.contains('\n'), "{e}");
        }
        std::fs::write(&p, b"this is not a safetensors file at all").unwrap();
        assert!(matches!(read_safetensors(&p), Err(GdnError::Io { .. })));
        std::fs::remove_dir_all(d).unwrap();
    }

    #[test]
    fn unsupported_dtype_names_tensor_and_dtype() {
        let d = tmpdir("dtype");
        let p = d.join("f64.safetensors");
        let raw = [0u8; 32];
        let v = TensorView::new(Dtype::F64, vec![4], &raw).unwrap();
        std::fs::write(&p, safetensors::serialize([("weird", v)], None).unwrap()).unwrap();
        let e = read_safetensors(&p).unwrap_err().to_string();
        assert!(e.contains("'weird'") && e.contains("F64"), "{e}");
        std::fs::remove_dir_all(d).unwrap();
    }

    #[test]
    fn failed_write_leaves_nothing() {
        let d = tmpdir("fail");
        let p = d.join("missing-dir").join("out.safetensors");
        assert!(write_safetensors(&p, &sample()).is_err());
        assert!(!p.exists());
        std::fs::remove_dir_all(d).unwrap();
    }
}
