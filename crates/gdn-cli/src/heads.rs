//! The head configurations the sweeps cover.

use gdn_core::Heads;

/// The head configurations gdn is checked on: TP=1, 2, 4 of Qwen3-Next and a Qwen3.5-style 1:4 ratio.
pub fn all_heads() -> Vec<(&'static str, Heads)> {
    [
        ("qk16_v32", 16, 32),
        ("qk8_v16", 8, 16),
        ("qk4_v8", 4, 8),
        ("qk2_v8", 2, 8),
    ]
    .into_iter()
    .map(|(n, h, hv)| (n, Heads::new(h, hv, 128).expect("valid heads")))
    .collect()
}
