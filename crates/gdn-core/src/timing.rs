//! What a backend reports when it is benchmarked. The CLI's `bench` drives any [`Timed`] backend the same
//! way: correctness first (against the float64 reference), then these timings, then the copy floor.

use crate::error::Result;
use crate::problem::{Inputs, Problem};
use serde::{Deserialize, Serialize};

/// One timing method (tier) and its per-call samples in microseconds.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TierSamples {
    /// e.g. `kernel` (GPU kernel time, L2 flushed), `events` (CUDA events per call, L2 flushed),
    /// `graph` (per call inside a replayed CUDA graph), `wall` (CPU wall clock per call).
    pub tier: String,
    /// A sentence saying exactly how the samples were taken.
    pub method: String,
    pub samples_us: Vec<f64>,
    /// For a call of several launches, where the tier sees each: the median duration of each launch over the calls,
    /// in launch order (empty otherwise).
    #[serde(default)]
    pub launch_median_us: Vec<f64>,
}

impl TierSamples {
    /// A tier of whole-call samples (no per-launch breakdown).
    pub fn new(tier: &str, method: String, samples_us: Vec<f64>) -> TierSamples {
        TierSamples {
            tier: tier.into(),
            method,
            samples_us,
            launch_median_us: Vec::new(),
        }
    }
}

/// Benchmark settings shared by all backends.
#[derive(Clone, Debug)]
pub struct TimingConfig {
    pub warmup: usize,
    pub iters: usize,
    /// Different input sets cycled between calls (so nothing can be served from a cache); >= 1.
    pub input_sets: usize,
}

/// A backend that can time itself on a problem.
pub trait Timed {
    /// Times `p` on the given input sets (all valid for `p`), one [`TierSamples`] per tier.
    fn time(&self, p: &Problem, inputs: &[Inputs], cfg: &TimingConfig) -> Result<Vec<TierSamples>>;
    /// Times copying `bytes` bytes (read `bytes/2` + write `bytes/2`) the same way: the bandwidth floor.
    fn time_copy(&self, bytes: u64, cfg: &TimingConfig) -> Result<Vec<TierSamples>>;
    /// A description of the device (for tables and JSON).
    fn device(&self) -> String;
}
