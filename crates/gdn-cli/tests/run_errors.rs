//! `gdn run` on bad inputs: a non-zero exit, exactly one line `error: ...` on stderr naming the tensor (or
//! file, or definition), never a panic, and no output file.

mod common;

use common::{altered_workload_file, gdn_run, scratch, stderr, workload_file};
use gdn_core::workload::WorkloadSpec;
use gdn_core::{Data, Heads, Tensor, TensorMap};
use std::path::{Path, PathBuf};

const DECODE: &str = "gdn_decode_qk4_v8_d128_k_last";
const PREFILL: &str = "gdn_prefill_qk4_v8_d128_k_last";

fn heads() -> Heads {
    Heads::new(4, 8, 128).unwrap()
}

/// Runs `gdn run` and checks the failure contract; returns the error line.
fn fails(def: &str, inputs: &Path, extra: &[&str], dir: &Path) -> String {
    let out = dir.join("out.safetensors");
    let o = gdn_run(def, inputs, &out, extra);
    let err = stderr(&o);
    assert!(
        !o.status.success(),
        "expected failure: {def} {} {extra:?}",
        inputs.display()
    );
    assert_eq!(o.status.code(), Some(1), "not a clean error exit: {err}");
    assert_eq!(err.lines().count(), 1, "one line expected: {err:?}");
    assert!(err.starts_with("error: "), "{err}");
    assert!(!out.exists(), "output written despite the error: {err}");
    err
}

/// A decode workload file (batch 4) with its tensors altered by `f`.
fn mutated(dir: &Path, f: impl FnOnce(&mut TensorMap)) -> PathBuf {
    let spec = WorkloadSpec::decode(heads(), 4);
    altered_workload_file(dir, "in.safetensors", &spec, 3, f).0
}

#[test]
fn wrong_shape() {
    let d = scratch("shape");
    let p = mutated(&d, |t| {
        t.insert(
            "q".into(),
            Tensor::zeros(gdn_core::DType::BF16, vec![4, 1, 3, 128]),
        );
    });
    let e = fails(DECODE, &p, &["--backend", "cpu"], &d);
    assert!(e.contains("'q'"), "{e}");
}

#[test]
fn wrong_dtype() {
    let d = scratch("dtype");
    let p = mutated(&d, |t| {
        t.insert(
            "k".into(),
            Tensor::zeros(gdn_core::DType::F32, vec![4, 1, 4, 128]),
        );
    });
    let e = fails(DECODE, &p, &["--backend", "cpu"], &d);
    assert!(e.contains("'k'") && e.contains("float32"), "{e}");
}

#[test]
fn missing_tensor() {
    let d = scratch("missing");
    let p = mutated(&d, |t| {
        t.remove("v");
    });
    let e = fails(DECODE, &p, &["--backend", "cpu"], &d);
    assert!(e.contains("'v'"), "{e}");
}

#[test]
fn bad_cu_seqlens() {
    let d = scratch("cu");
    let spec = WorkloadSpec::prefill(heads(), &[5, 7]);
    let (p, _) = altered_workload_file(&d, "in.safetensors", &spec, 1, |t| {
        t.insert(
            "cu_seqlens".into(),
            Tensor::new(vec![3], Data::I64(vec![0, 9, 7])),
        );
    });
    let e = fails(PREFILL, &p, &["--backend", "cpu"], &d);
    assert!(e.contains("cu_seqlens"), "{e}");
}

#[test]
fn truncated_file() {
    let d = scratch("trunc");
    let (p, _) = workload_file(&d, "in.safetensors", &WorkloadSpec::decode(heads(), 2), 0);
    let bytes = std::fs::read(&p).unwrap();
    std::fs::write(&p, &bytes[..bytes.len() / 2]).unwrap();
    let e = fails(DECODE, &p, &["--backend", "cpu"], &d);
    assert!(e.contains("in.safetensors"), "{e}");
}

#[test]
fn not_a_safetensors_file() {
    let d = scratch("garbage");
    let p = d.join("in.safetensors");
    std::fs::write(&p, "q,k,v\n1,2,3\n").unwrap();
    let e = fails(DECODE, &p, &["--backend", "cpu"], &d);
    assert!(e.contains("in.safetensors"), "{e}");
}

#[test]
fn missing_input_file() {
    let d = scratch("nofile");
    let e = fails(DECODE, &d.join("nope.safetensors"), &[], &d);
    assert!(e.contains("nope.safetensors"), "{e}");
}

#[test]
fn unknown_definition() {
    let d = scratch("def");
    let (p, _) = workload_file(&d, "in.safetensors", &WorkloadSpec::decode(heads(), 2), 0);
    let e = fails("gdn_decode_qk3_v7_d128_k_last", &p, &[], &d);
    assert!(e.contains("gdn_decode_qk3_v7_d128_k_last"), "{e}");
    let e = fails("gdn_attention_please", &p, &[], &d);
    assert!(e.contains("unknown definition"), "{e}");
}

#[test]
fn mtp_serving_flag_needs_an_mtp_definition() {
    let d = scratch("serving");
    let (p, _) = workload_file(&d, "in.safetensors", &WorkloadSpec::decode(heads(), 2), 0);
    let e = fails(DECODE, &p, &["--mtp-serving"], &d);
    assert!(e.contains("--mtp-serving"), "{e}");
}

#[test]
fn cuda_backend_without_gpu_says_why() {
    if gdn_cuda::open().is_ok() {
        return; // A GPU is present: nothing to check here.
    }
    let d = scratch("nocuda");
    let (p, _) = workload_file(&d, "in.safetensors", &WorkloadSpec::decode(heads(), 2), 0);
    let e = fails(DECODE, &p, &["--backend", "cuda"], &d);
    let why = ["GPU", "gpu", "driver", "NVIDIA"];
    assert!(
        e.contains("cuda") && why.iter().any(|w| e.contains(w)),
        "{e}"
    );
}
