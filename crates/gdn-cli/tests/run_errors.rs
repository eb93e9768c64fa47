//! `gdn run` on bad inputs: a non-zero exit, exactly one line `error: ...` on stderr naming the tensor (or
//! file, or definition), never a panic, and no output file.

mod common;

use common::{gdn, scratch, stderr, workload_file};
use gdn_core::workload::WorkloadSpec;
use gdn_core::{io, Data, Heads, Tensor, TensorMap};
use std::path::Path;

const DECODE: &str = "gdn_decode_qk4_v8_d128_k_last";
const PREFILL: &str = "gdn_prefill_qk4_v8_d128_k_last";

fn heads() -> Heads {
    Heads::new(4, 8, 128).unwrap()
}

/// Runs `gdn run` and checks the failure contract; returns the error line.
fn fails(def: &str, inputs: &Path, extra: &[&str], dir: &Path) -> String {
    let out = dir.join("out.safetensors");
    let mut args = vec![
        "run",
        "--definition",
        def,
        "--inputs",
        inputs.to_str().unwrap(),
        "--output",
        out.to_str().unwrap(),
    ];
    args.extend(extra);
    let o = gdn(&args);
    let err = stderr(&o);
    assert!(!o.status.success(), "expected failure: {args:?}");
    assert_eq!(o.status.code(), Some(1), "not a clean error exit: {err}");
    assert_eq!(err.lines().count(), 1, "one line expected: {err:?}");
    assert!(err.starts_with("error: "), "{err}");
    assert!(!out.exists(), "output written despite the error: {err}");
    err
}

fn mutated(dir: &Path, f: impl FnOnce(&mut TensorMap)) -> std::path::PathBuf {
    let mut t = gdn_core::workload::generate(&WorkloadSpec::decode(heads(), 4), 3);
    f(&mut t);
    let p = dir.join("in.safetensors");
    io::write_safetensors(&p, &t).unwrap();
    p
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
    let mut t = gdn_core::workload::generate(&WorkloadSpec::prefill(heads(), &[5, 7]), 1);
    t.insert(
        "cu_seqlens".into(),
        Tensor::new(vec![3], Data::I64(vec![0, 9, 7])),
    );
    let p = d.join("in.safetensors");
    io::write_safetensors(&p, &t).unwrap();
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
