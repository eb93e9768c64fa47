//! flashinfer-trace datasets: what `write_workload` stores reads back as the same tensors, a line may give each
//! input kind (random, scalar, safetensors), a written line is exactly the format's fields, and every bad
//! dataset is an error naming the file, the line and the field.

use gdn_core::dataset::{seeded_uuid, write_workload, Dataset, Record};
use gdn_core::workload::{generate, WorkloadSpec};
use gdn_core::{io, Data, Definition, Heads, Tensor};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

fn scratch(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("gdn-dataset-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(d.join("definitions/gdn")).unwrap();
    std::fs::create_dir_all(d.join("workloads/gdn")).unwrap();
    d
}

fn heads() -> Heads {
    Heads::new(1, 2, 64).unwrap()
}

/// `spec`'s definition JSON into the dataset, and workloads drawn from seeds 1..=n as its JSONL lines.
fn dataset_of(root: &Path, spec: &WorkloadSpec, n: u64) -> Vec<Value> {
    let def = spec.definition();
    let json = root.join(format!("definitions/gdn/{}.json", def.name));
    std::fs::write(&json, def.to_json().to_string()).unwrap();
    let lines: Vec<Value> = (1..=n)
        .map(|seed| {
            let uuid = seeded_uuid(seed, &def.name, 0);
            write_workload(root, &def, &uuid, &generate(spec, seed))
                .unwrap()
                .to_json()
        })
        .collect();
    write_lines(root, &def, &lines);
    lines
}

fn write_lines(root: &Path, def: &Definition, lines: &[Value]) {
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    std::fs::write(root.join(format!("workloads/gdn/{}.jsonl", def.name)), text).unwrap();
}

/// Opens the dataset and loads every workload.
fn open_and_load(root: &Path) -> gdn_core::Result<Dataset> {
    let ds = Dataset::open(root, None)?;
    for w in &ds.workloads {
        w.load(root, 0)?;
    }
    Ok(ds)
}

#[test]
fn written_workloads_read_back_as_drawn() {
    let root = scratch("roundtrip");
    let specs = [
        WorkloadSpec::decode(heads(), 3),
        WorkloadSpec::prefill(heads(), &[5, 0, 9]),
        WorkloadSpec::mtp(heads(), 2, 3),
    ];
    for spec in &specs {
        dataset_of(&root, spec, 2);
    }
    let ds = open_and_load(&root).unwrap();
    assert_eq!(ds.workloads.len(), 6);
    assert_eq!(ds.definitions.gdn.len(), 3);
    for w in &ds.workloads {
        let spec = specs.iter().find(|s| s.op == w.def.op).unwrap();
        let seed = w.line as u64;
        let (got, p) = w.load(&root, 0).unwrap();
        let mut want = generate(spec, seed);
        want.insert("scale".into(), Tensor::scalar_f32(p.scale));
        assert_eq!(got, want, "{}", w.place());
        assert_eq!(p.scale, 1.0 / 8.0);
    }
    std::fs::remove_dir_all(root).unwrap();
}

#[test]
fn a_written_line_is_exactly_the_format() {
    let root = scratch("golden");
    let lines = dataset_of(&root, &WorkloadSpec::decode(heads(), 2), 1);
    let uuid = "9825f597-e6d3-4a4a-a6bd-0869994d0fd1";
    assert_eq!(seeded_uuid(1, "gdn_decode_qk1_v2_d64_k_last", 0), uuid);
    let blob = format!(
        "./blob/workloads/gdn/gdn_decode_qk1_v2_d64_k_last/gdn_decode_qk1_v2_d64_k_last_{uuid}.safetensors"
    );
    let st = |key: &str| json!({"type": "safetensors", "path": blob, "tensor_key": key});
    let golden = json!({
        "definition": "gdn_decode_qk1_v2_d64_k_last",
        "solution": null,
        "evaluation": null,
        "workload": {
            "uuid": uuid,
            "axes": {"batch_size": 2},
            "inputs": {
                "q": st("q"), "k": st("k"), "v": st("v"), "state": st("state"), "A_log": st("A_log"),
                "a": st("a"), "dt_bias": st("dt_bias"), "b": st("b"),
                "scale": {"type": "scalar", "value": 0.125},
            },
        },
    });
    assert_eq!(lines[0], golden);
    let on_disk =
        std::fs::read_to_string(root.join("workloads/gdn/gdn_decode_qk1_v2_d64_k_last.jsonl"))
            .unwrap();
    assert_eq!(on_disk.lines().count(), 1);
    assert_eq!(
        serde_json::from_str::<Value>(on_disk.trim()).unwrap(),
        golden
    );
    std::fs::remove_dir_all(root).unwrap();
}

#[test]
fn a_line_may_give_each_input_kind() {
    let root = scratch("kinds");
    let spec = WorkloadSpec::prefill(heads(), &[4, 7]);
    let def = spec.definition();
    let mut lines = dataset_of(&root, &spec, 1);
    let inputs = &mut lines[0]["workload"]["inputs"];
    inputs["q"] = json!({"type": "random"});
    inputs["scale"] = json!({"type": "scalar", "value": 0.25});
    inputs.as_object_mut().unwrap().remove("state"); // not given: random, as the harness draws it
    write_lines(&root, &def, &lines);
    let ds = open_and_load(&root).unwrap();
    let w = &ds.workloads[0];
    let (t, p) = w.load(&root, 7).unwrap();
    let drawn = generate(&spec, 1);
    assert_eq!(t["k"], drawn["k"], "safetensors");
    assert_eq!(t["cu_seqlens"], drawn["cu_seqlens"]);
    assert_eq!(p.scale, 0.25, "scalar");
    assert_eq!(t["q"].shape, [11, 1, 64]);
    assert!(matches!(t["q"].data, Data::BF16(_)));
    assert_ne!(t["q"], drawn["q"], "random");
    assert_eq!(t["state"].shape, [2, 2, 64, 64]);
    assert_eq!(w.load(&root, 7).unwrap().0, t, "random is seeded");
    assert_ne!(w.load(&root, 8).unwrap().0["q"], t["q"]);
    std::fs::remove_dir_all(root).unwrap();
}

/// One bad line (the second of its file, after a good one): the error names the file, line 2 and the field.
fn expect_bad(
    tag: &str,
    spec: &WorkloadSpec,
    field: &str,
    hint: &str,
    alter: impl FnOnce(&Path, &mut Value),
) {
    let root = scratch(tag);
    let def = spec.definition();
    let mut lines = dataset_of(&root, spec, 2);
    alter(&root, &mut lines[1]);
    write_lines(&root, &def, &lines);
    let e = open_and_load(&root).unwrap_err().to_string();
    let file = format!("{}.jsonl:2: ", def.name);
    assert!(e.contains(&file), "{tag}: no '{file}' in: {e}");
    assert!(
        e.contains(&format!(": {field}: ")),
        "{tag}: no field '{field}' in: {e}"
    );
    assert!(e.contains(hint), "{tag}: no '{hint}' in: {e}");
    assert!(!e.contains('\n'), "{tag}: {e}");
    std::fs::remove_dir_all(root).unwrap();
}

/// The blob file a line's input `name` points at.
fn blob_of(root: &Path, line: &Value, name: &str) -> PathBuf {
    let p = line["workload"]["inputs"][name]["path"].as_str().unwrap();
    root.join(p)
}

#[test]
fn bad_lines_name_file_line_and_field() {
    let decode = WorkloadSpec::decode(heads(), 3);
    let prefill = WorkloadSpec::prefill(heads(), &[4, 7]);
    let mtp = WorkloadSpec::mtp(heads(), 2, 3);
    expect_bad("json", &decode, "line", "not a JSON object", |_, l| {
        *l = json!([1])
    });
    expect_bad(
        "unknown-def",
        &decode,
        "definition",
        "unknown definition",
        |_, l| l["definition"] = json!("gdn_decode_qk9_v9_d64_k_last"),
    );
    expect_bad(
        "axis-missing",
        &decode,
        "workload.axes.batch_size",
        "missing",
        |_, l| l["workload"]["axes"] = json!({}),
    );
    expect_bad(
        "axis-unknown",
        &decode,
        "workload.axes.tokens",
        "not an axis",
        |_, l| l["workload"]["axes"]["tokens"] = json!(3),
    );
    expect_bad(
        "axis-const",
        &decode,
        "workload.axes.num_v_heads",
        "fixes it at 2",
        |_, l| l["workload"]["axes"]["num_v_heads"] = json!(4),
    );
    expect_bad(
        "axis-shape",
        &decode,
        "workload.inputs.q",
        "with workload.axes is [4, 1, 1, 64]",
        |_, l| l["workload"]["axes"]["batch_size"] = json!(4),
    );
    expect_bad(
        "axis-cu",
        &prefill,
        "workload.axes.len_cu_seqlens",
        "num_seqs + 1",
        |_, l| l["workload"]["axes"]["len_cu_seqlens"] = json!(2),
    );
    expect_bad(
        "mtp-t1",
        &mtp,
        "workload.axes.seq_len",
        "seq_len > 1",
        |_, l| l["workload"]["axes"]["seq_len"] = json!(1),
    );
    expect_bad(
        "missing-file",
        &decode,
        "workload.inputs.q.path",
        "no such file",
        |_, l| l["workload"]["inputs"]["q"]["path"] = json!("./blob/nowhere.safetensors"),
    );
    expect_bad(
        "traversal",
        &decode,
        "workload.inputs.q.path",
        "leaves the dataset folder",
        |_, l| l["workload"]["inputs"]["q"]["path"] = json!("./blob/../../outside.safetensors"),
    );
    expect_bad(
        "absolute",
        &decode,
        "workload.inputs.q.path",
        "absolute path",
        |_, l| l["workload"]["inputs"]["q"]["path"] = json!("/etc/hostname"),
    );
    expect_bad(
        "key",
        &decode,
        "workload.inputs.q.tensor_key",
        "no tensor 'query'",
        |_, l| l["workload"]["inputs"]["q"]["tensor_key"] = json!("query"),
    );
    expect_bad(
        "dtype",
        &decode,
        "workload.inputs.A_log",
        "is bfloat16, the definition says float32",
        |root, l| {
            let f = blob_of(root, l, "A_log");
            let mut t = io::read_safetensors(&f).unwrap();
            t.insert(
                "A_log".into(),
                Tensor::zeros(gdn_core::DType::BF16, vec![2]),
            );
            io::write_safetensors(&f, &t).unwrap();
        },
    );
    expect_bad(
        "random-cu",
        &prefill,
        "workload.inputs.cu_seqlens",
        "not valid sequence boundaries",
        |_, l| l["workload"]["inputs"]["cu_seqlens"] = json!({"type": "random"}),
    );
    expect_bad(
        "absent-cu",
        &prefill,
        "workload.inputs.cu_seqlens",
        "not given, so random",
        |_, l| {
            l["workload"]["inputs"]
                .as_object_mut()
                .unwrap()
                .remove("cu_seqlens");
        },
    );
    expect_bad(
        "random-idx",
        &mtp,
        "workload.inputs.initial_state_indices",
        "not valid pool rows",
        |_, l| l["workload"]["inputs"]["initial_state_indices"] = json!({"type": "random"}),
    );
    expect_bad(
        "random-scale",
        &decode,
        "workload.inputs.scale",
        "cannot be random",
        |_, l| l["workload"]["inputs"]["scale"] = json!({"type": "random"}),
    );
    expect_bad(
        "scalar-tensor",
        &decode,
        "workload.inputs.v",
        "a scalar value for a tensor",
        |_, l| l["workload"]["inputs"]["v"] = json!({"type": "scalar", "value": 1.0}),
    );
    expect_bad(
        "unknown-input",
        &decode,
        "workload.inputs.mask",
        "not an input of",
        |_, l| l["workload"]["inputs"]["mask"] = json!({"type": "random"}),
    );
    expect_bad(
        "cu-values",
        &prefill,
        "workload.inputs.cu_seqlens",
        "decreases",
        |root, l| {
            let f = blob_of(root, l, "cu_seqlens");
            let mut t = io::read_safetensors(&f).unwrap();
            t.insert(
                "cu_seqlens".into(),
                Tensor::new(vec![3], Data::I64(vec![0, 12, 11])),
            );
            io::write_safetensors(&f, &t).unwrap();
        },
    );
    expect_bad("uuid", &decode, "workload.uuid", "missing", |_, l| {
        l["workload"].as_object_mut().unwrap().remove("uuid");
    });
}

#[test]
fn bad_folders_are_named() {
    let root = scratch("folders");
    std::fs::remove_dir_all(root.join("definitions")).unwrap();
    let e = Dataset::open(&root, None).unwrap_err().to_string();
    assert!(e.contains("definitions"), "{e}");
    let e = Dataset::open(&root.join("nope"), None)
        .unwrap_err()
        .to_string();
    assert!(e.contains("no such dataset folder"), "{e}");
    // a definition JSON of op_type gdn that gdn does not implement names its file
    std::fs::create_dir_all(root.join("definitions/gdn")).unwrap();
    let mut v = Definition::new(gdn_core::Op::Decode, heads()).to_json();
    v["inputs"]["q"]["dtype"] = json!("float16");
    std::fs::write(root.join("definitions/gdn/bad.json"), v.to_string()).unwrap();
    let e = Dataset::open(&root, None).unwrap_err().to_string();
    assert!(e.contains("bad.json") && e.contains("'q'"), "{e}");
    // another operation's definitions and workloads are left alone
    std::fs::remove_file(root.join("definitions/gdn/bad.json")).unwrap();
    let other = json!({"name": "rmsnorm_h128", "op_type": "rmsnorm", "axes": {}, "inputs": {}, "outputs": {}});
    std::fs::write(root.join("definitions/gdn/other.json"), other.to_string()).unwrap();
    let line =
        json!({"definition": "rmsnorm_h128", "workload": {"uuid": "x", "axes": {}, "inputs": {}}});
    std::fs::write(
        root.join("workloads/gdn/rmsnorm_h128.jsonl"),
        format!("{line}\n"),
    )
    .unwrap();
    let ds = Dataset::open(&root, None).unwrap();
    assert_eq!((ds.workloads.len(), ds.skipped), (0, 1));
    let e = Dataset::open(&root, Some("gdn_decode_qk1_v2_d64_k_last"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("not a GDN definition of the dataset"), "{e}");
    std::fs::remove_dir_all(root).unwrap();
}

#[test]
fn the_definition_filter_keeps_one_definition() {
    let root = scratch("filter");
    dataset_of(&root, &WorkloadSpec::decode(heads(), 2), 2);
    dataset_of(&root, &WorkloadSpec::mtp(heads(), 2, 2), 3);
    let ds = Dataset::open(&root, Some("gdn_mtp_qk1_v2_d64_k_last")).unwrap();
    assert_eq!((ds.workloads.len(), ds.skipped), (3, 2));
    // a line without "definition" takes its file's name
    let def = WorkloadSpec::decode(heads(), 2).definition();
    let mut lines: Vec<Value> =
        std::fs::read_to_string(root.join(format!("workloads/gdn/{}.jsonl", def.name)))
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
    lines[0].as_object_mut().unwrap().remove("definition");
    write_lines(&root, &def, &lines);
    let ds = open_and_load(&root).unwrap();
    assert_eq!(ds.workloads.len(), 5);
    assert_eq!(
        Record::parse(&lines[0].to_string()).unwrap().definition,
        None
    );
    std::fs::remove_dir_all(root).unwrap();
}
