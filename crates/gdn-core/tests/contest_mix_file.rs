//! The device scripts and tools read the contest-like prefill mix's lengths from `data/contest_mix.json` (no
//! Rust on the GPU machine): it must be exactly what `contest_prefill_mix(qk4_v8, seed 0)` — the mix
//! `gdn bench` runs — draws.

use gdn_core::definition::Heads;
use gdn_core::workload::contest_prefill_mix;

#[test]
fn json_matches_the_generator() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../data/contest_mix.json");
    let text = std::fs::read_to_string(path).expect("contest_mix.json");
    let file: serde_json::Map<String, serde_json::Value> = serde_json::from_str(&text).unwrap();
    let mix = contest_prefill_mix(Heads::new(4, 8, 128).unwrap(), 0);
    assert_eq!(file.len(), mix.len());
    for spec in &mix {
        let lens: Vec<usize> = serde_json::from_value(file[&spec.label].clone()).unwrap();
        assert_eq!(lens, spec.seq_lens, "{}", spec.label);
    }
}
