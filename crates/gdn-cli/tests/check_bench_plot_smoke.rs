//! `gdn check`, `gdn bench` and `gdn plot` smoke runs on the cpu backend.

mod common;

use common::{gdn, scratch, stderr};
use serde_json::Value;

#[test]
fn check_quick_cpu_passes() {
    let o = gdn(&["check", "--quick", "--backend", "cpu"]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}\n{out}", stderr(&o));
    assert!(out.contains("cases passed"), "{out}");
}

#[test]
fn bench_quick_json_and_plot() {
    let d = scratch("bench");
    let json = d.join("bench.json");
    let o = gdn(&[
        "bench",
        "--quick",
        "--backend",
        "cpu",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(doc["schema"], "gdn-bench/1");
    for k in ["backend", "device", "config", "methods", "classes"] {
        assert!(doc.get(k).is_some(), "missing key {k}");
    }
    let classes = doc["classes"].as_array().unwrap();
    let names: Vec<&str> = classes
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    for want in [
        "decode anchors",
        "decode contest mix",
        "prefill anchors",
        "prefill contest mix",
    ] {
        assert!(names.iter().any(|n| n == &want), "{names:?}");
    }
    for c in classes {
        assert_eq!(c["check"]["passed"], true, "{}", c["name"]);
        let ws = c["workloads"].as_array().unwrap();
        assert!(!ws.is_empty(), "{}", c["name"]);
        for w in ws {
            for k in ["label", "batch", "tokens", "min_bytes", "tiers", "copy"] {
                assert!(w.get(k).is_some(), "workload key {k}");
            }
            let t = &w["tiers"][0];
            for k in [
                "tier",
                "median_us",
                "p10_us",
                "p90_us",
                "gb_per_s",
                "pct_of_copy",
                "samples_us",
            ] {
                assert!(t.get(k).is_some(), "tier key {k}");
            }
            assert!(t["median_us"].as_f64().unwrap() > 0.0);
        }
    }
    let svg = d.join("bench.svg");
    let o = gdn(&[
        "plot",
        "--input",
        json.to_str().unwrap(),
        "--output",
        svg.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(std::fs::read_to_string(&svg).unwrap().starts_with("<svg"));
    std::fs::remove_dir_all(d).unwrap();
}
