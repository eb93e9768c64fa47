//! `gdn workloads` writes a flashinfer-trace dataset that `gdn check`, `gdn run` and `gdn bench` read back
//! (`--dataset`) and pass on the cpu backend; its lines are exactly the format's fields; a bad dataset is one
//! error line naming the file, the line and the field. The definitions come from gdn's own description of
//! them (`Definition::to_json`), so no shared folder is needed.

mod common;

use common::{gdn, scratch, stderr};
use gdn_core::{Definition, Heads, Op};
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// A definitions folder with the three qk4_v8 definitions.
fn definitions(dir: &Path) -> PathBuf {
    let defs = dir.join("defs");
    std::fs::create_dir_all(&defs).unwrap();
    for op in [Op::Decode, Op::Prefill, Op::Mtp] {
        let d = Definition::new(op, Heads::new(4, 8, 128).unwrap());
        let text = serde_json::to_string_pretty(&d.to_json()).unwrap();
        std::fs::write(defs.join(format!("{}.json", d.name)), text).unwrap();
    }
    defs
}

/// `gdn workloads --quick` into `dir/name`.
fn write_dataset(dir: &Path, name: &str, extra: &[&str]) -> PathBuf {
    let out = dir.join(name);
    let defs = definitions(dir);
    let mut args = vec![
        "workloads",
        "--definitions",
        defs.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--quick",
    ];
    args.extend(extra);
    let o = gdn(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    out
}

fn keys(v: &Value) -> BTreeSet<&str> {
    v.as_object().unwrap().keys().map(String::as_str).collect()
}

#[test]
fn workloads_then_check_passes_on_cpu() {
    let d = scratch("ds-check");
    let ds = write_dataset(&d, "ds", &[]);
    let o = gdn(&[
        "check",
        "--dataset",
        ds.to_str().unwrap(),
        "--backend",
        "cpu",
    ]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}\n{out}", stderr(&o));
    assert!(out.contains("all 10 cases passed"), "{out}");
    for def in ["decode", "prefill", "mtp"] {
        assert!(
            out.contains(&format!("gdn_{def}_qk4_v8_d128_k_last")),
            "{out}"
        );
    }
    std::fs::remove_dir_all(d).unwrap();
}

#[test]
fn the_same_seed_writes_the_same_dataset() {
    let d = scratch("ds-seed");
    let a = write_dataset(&d, "a", &["--op", "decode", "--seed", "5"]);
    let b = write_dataset(&d, "b", &["--op", "decode", "--seed", "5"]);
    let c = write_dataset(&d, "c", &["--op", "decode", "--seed", "6"]);
    let jsonl = "workloads/gdn/gdn_decode_qk4_v8_d128_k_last.jsonl";
    let read = |root: &Path| std::fs::read_to_string(root.join(jsonl)).unwrap();
    assert_eq!(read(&a), read(&b));
    assert_ne!(read(&a), read(&c));
    let line: Value = serde_json::from_str(read(&a).lines().next().unwrap()).unwrap();
    let blob = line["workload"]["inputs"]["q"]["path"].as_str().unwrap();
    assert_eq!(
        std::fs::read(a.join(blob)).unwrap(),
        std::fs::read(b.join(blob)).unwrap()
    );
    // the definitions are copied byte for byte
    let def = "gdn_decode_qk4_v8_d128_k_last.json";
    assert_eq!(
        std::fs::read(a.join("definitions/gdn").join(def)).unwrap(),
        std::fs::read(d.join("defs").join(def)).unwrap()
    );
    std::fs::remove_dir_all(d).unwrap();
}

#[test]
fn written_lines_have_exactly_the_format_fields() {
    let d = scratch("ds-golden");
    let ds = write_dataset(&d, "ds", &[]);
    for (op, axes) in [
        ("decode", vec!["batch_size"]),
        (
            "prefill",
            vec!["len_cu_seqlens", "num_seqs", "total_seq_len"],
        ),
        ("mtp", vec!["batch_size", "pool_size", "seq_len"]),
    ] {
        let name = format!("gdn_{op}_qk4_v8_d128_k_last");
        let text = std::fs::read_to_string(ds.join(format!("workloads/gdn/{name}.jsonl"))).unwrap();
        let def = Definition::builtin(&name).unwrap();
        for l in text.lines() {
            let v: Value = serde_json::from_str(l).unwrap();
            assert_eq!(
                keys(&v),
                BTreeSet::from(["definition", "evaluation", "solution", "workload"])
            );
            assert_eq!(v["definition"], name.as_str());
            assert!(v["solution"].is_null() && v["evaluation"].is_null());
            let w = &v["workload"];
            assert_eq!(keys(w), BTreeSet::from(["axes", "inputs", "uuid"]));
            assert_eq!(w["uuid"].as_str().unwrap().len(), 36);
            assert_eq!(keys(&w["axes"]), axes.iter().copied().collect());
            assert!(w["axes"].as_object().unwrap().values().all(Value::is_u64));
            // every input given: tensors as safetensors (cu_seqlens and indices too), scale as a scalar
            let names: BTreeSet<&str> = def.inputs().iter().map(|s| s.name).collect();
            assert_eq!(keys(&w["inputs"]), names);
            for (input, src) in w["inputs"].as_object().unwrap() {
                if input == "scale" {
                    assert_eq!(keys(src), BTreeSet::from(["type", "value"]));
                    assert_eq!(src["type"], "scalar");
                    assert!((src["value"].as_f64().unwrap() - 128f64.powf(-0.5)).abs() < 1e-8);
                } else {
                    assert_eq!(keys(src), BTreeSet::from(["path", "tensor_key", "type"]));
                    assert_eq!(src["type"], "safetensors");
                    assert_eq!(src["tensor_key"], input.as_str());
                    let path = src["path"].as_str().unwrap();
                    assert!(path.starts_with(&format!("./blob/workloads/gdn/{name}/")));
                    assert!(ds.join(path).is_file(), "{path}");
                }
            }
        }
    }
    std::fs::remove_dir_all(d).unwrap();
}

#[test]
fn run_and_bench_read_a_dataset() {
    let d = scratch("ds-run");
    let ds = write_dataset(&d, "ds", &["--op", "mtp"]);
    let outs = d.join("outs");
    let o = gdn(&[
        "run",
        "--dataset",
        ds.to_str().unwrap(),
        "--backend",
        "cpu",
        "--check",
        "--output",
        outs.to_str().unwrap(),
    ]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        out.lines().filter(|l| l.contains(": PASS")).count(),
        3,
        "{out}"
    );
    assert_eq!(std::fs::read_dir(&outs).unwrap().count(), 3);
    let json = d.join("bench.json");
    let o = gdn(&[
        "bench",
        "--dataset",
        ds.to_str().unwrap(),
        "--definition",
        "gdn_mtp_qk4_v8_d128_k_last",
        "--backend",
        "cpu",
        "--quick",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let classes = doc["classes"].as_array().unwrap();
    assert_eq!(classes.len(), 1);
    assert_eq!(classes[0]["name"], "gdn_mtp_qk4_v8_d128_k_last");
    assert_eq!(classes[0]["check"]["passed"], true);
    assert_eq!(classes[0]["workloads"].as_array().unwrap().len(), 3);
    std::fs::remove_dir_all(d).unwrap();
}

#[test]
fn a_bad_dataset_is_one_error_line() {
    let d = scratch("ds-bad");
    let ds = write_dataset(&d, "ds", &["--op", "decode"]);
    let jsonl = ds.join("workloads/gdn/gdn_decode_qk4_v8_d128_k_last.jsonl");
    let text = std::fs::read_to_string(&jsonl).unwrap();
    let bad = text.replacen("\"batch_size\":1", "\"batch_size\":1,\"tokens\":2", 1);
    assert_ne!(bad, text);
    std::fs::write(&jsonl, bad).unwrap();
    for cmd in ["check", "run", "bench"] {
        let o = gdn(&[cmd, "--dataset", ds.to_str().unwrap(), "--backend", "cpu"]);
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{cmd}: {e}");
        assert!(
            e.contains("gdn_decode_qk4_v8_d128_k_last.jsonl:1: workload.axes.tokens: not an axis"),
            "{cmd}: {e}"
        );
        assert!(!e.contains("internal error"), "{cmd}: {e}");
    }
    let o = gdn(&[
        "check",
        "--dataset",
        ds.to_str().unwrap(),
        "--definition",
        "gdn_prefill_qk4_v8_d128_k_last",
    ]);
    assert!(
        stderr(&o).contains("not a GDN definition of the dataset"),
        "{}",
        stderr(&o)
    );
    // a definitions folder without the definitions asked for
    let o = gdn(&[
        "workloads",
        "--definitions",
        d.join("defs").to_str().unwrap(),
        "--heads",
        "qk8_v16",
        "--out",
        d.join("x").to_str().unwrap(),
    ]);
    assert!(
        stderr(&o).contains("no definition gdn_decode_qk8_v16_d128_k_last"),
        "{}",
        stderr(&o)
    );
    std::fs::remove_dir_all(d).unwrap();
}
