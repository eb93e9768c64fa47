//! `gdn run` end to end: a generated workload file through the binary (cpu backend) matches the float64
//! reference within the contest tolerance, with the definition's output names, shapes and dtypes.

mod common;

use common::{gdn_run, scratch, stderr, workload_file};
use gdn_core::compare::{compare, CONTEST};
use gdn_core::workload::WorkloadSpec;
use gdn_core::{io, reference, ActBuf, Data, Heads, MtpMode, Outputs, Problem, StateBuf};

fn heads(h: usize, hv: usize) -> Heads {
    Heads::new(h, hv, 128).unwrap()
}

fn round_trip(spec: WorkloadSpec, tag: &str) {
    let dir = scratch(tag);
    let (inp, tensors) = workload_file(&dir, "in.safetensors", &spec, 11);
    let outp = dir.join("out.safetensors");
    let def = spec.definition();
    let mut extra = vec!["--backend", "cpu"];
    if spec.mtp_mode == MtpMode::Serving {
        extra.push("--mtp-serving");
    }
    let o = gdn_run(&def.name, &inp, &outp, &extra);
    assert!(o.status.success(), "{tag}: {}", stderr(&o));

    let p = Problem::from_tensors(&def, &tensors, &spec.options()).unwrap();
    let x = p.inputs(&tensors);
    let got = io::read_safetensors(&outp).unwrap();
    for s in def.outputs() {
        let t = got
            .get(s.name)
            .unwrap_or_else(|| panic!("{tag}: no '{}'", s.name));
        assert_eq!(t.dtype(), s.dtype, "{tag}: dtype of {}", s.name);
    }
    let state = &got[def.state_output()];
    assert_eq!(got["output"].shape, p.output_shape(), "{tag}");
    assert_eq!(state.shape, p.state_shape(), "{tag}");
    let out = Outputs {
        output: ActBuf::from_data(&got["output"].data).unwrap(),
        state: match &state.data {
            Data::F32(v) => StateBuf::F32(v.clone()),
            Data::BF16(v) => StateBuf::BF16(v.clone()),
            d => panic!("{tag}: state dtype {:?}", d.dtype()),
        },
        intermediate: got
            .get("intermediate_states_buffer")
            .map(|t| t.as_f32().unwrap().to_vec()),
        checkpoints: None,
    };
    let report = compare(&p, &out, &reference::run(&p, &x), &CONTEST, &CONTEST);
    assert!(report.passed(), "{tag}: {}", report.summary());
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn decode_round_trips() {
    round_trip(WorkloadSpec::decode(heads(4, 8), 5), "decode-qk4v8");
    round_trip(WorkloadSpec::decode(heads(8, 16), 3), "decode-qk8v16");
}

#[test]
fn prefill_round_trips() {
    round_trip(
        WorkloadSpec::prefill(heads(4, 8), &[0, 17, 64, 65]),
        "prefill-qk4v8",
    );
    round_trip(WorkloadSpec::prefill(heads(2, 8), &[33]), "prefill-qk2v8");
}

#[test]
fn mtp_round_trips() {
    round_trip(WorkloadSpec::mtp(heads(4, 8), 3, 4), "mtp-qk4v8");
    let mut s = WorkloadSpec::mtp(heads(16, 32), 4, 2);
    s.mtp_mode = MtpMode::Serving;
    s.padding = 1;
    round_trip(s, "mtp-serving-qk16v32");
}

/// `--definition` given as a path to the flashinfer-bench JSON (../shared beside the repository; required
/// under CI=true).
#[test]
fn definition_given_as_a_json_path() {
    let json = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(
        "../../../shared/flashinfer-trace/definitions/gdn/gdn_decode_qk4_v8_d128_k_last.json",
    );
    if !json.is_file() {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "{} is missing (CI needs ../shared)",
            json.display()
        );
        eprintln!("skipped: {} not found", json.display());
        return;
    }
    let dir = scratch("defjson");
    let spec = WorkloadSpec::decode(heads(4, 8), 3);
    let (inp, _) = workload_file(&dir, "in.safetensors", &spec, 5);
    let outp = dir.join("out.safetensors");
    let o = gdn_run(
        json.to_str().unwrap(),
        &inp,
        &outp,
        &["--backend", "cpu", "--check"],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(String::from_utf8_lossy(&o.stdout).starts_with("PASS"));
    std::fs::remove_dir_all(dir).unwrap();
}
