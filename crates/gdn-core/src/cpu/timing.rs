//! The CPU backend's timing: host wall clock around each call, and a parallel memcpy as the copy floor.

use super::{fma_available, CpuBackend};
use crate::error::{GdnError, Result};
use crate::outputs::{Backend, Outputs};
use crate::problem::{Inputs, Problem};
use crate::timing::{TierSamples, Timed, TimingConfig};
use rayon::prelude::*;
use std::time::Instant;

impl Timed for CpuBackend {
    fn time(&self, p: &Problem, inputs: &[Inputs], cfg: &TimingConfig) -> Result<Vec<TierSamples>> {
        if inputs.is_empty() {
            return Err(GdnError::backend(
                "cpu",
                "timing needs at least one input set",
            ));
        }
        let mut outs: Vec<Outputs> = inputs.iter().map(|x| Outputs::poisoned(p, x)).collect();
        let n = inputs.len();
        for i in 0..cfg.warmup {
            self.run(p, &inputs[i % n], &mut outs[i % n])?;
        }
        let mut samples = Vec::with_capacity(cfg.iters);
        for i in 0..cfg.iters {
            let t0 = Instant::now();
            self.run(p, &inputs[i % n], &mut outs[i % n])?;
            samples.push(t0.elapsed().as_secs_f64() * 1e6);
        }
        Ok(vec![TierSamples::new(
            "wall",
            format!(
                "host wall clock around each call ({} rayon threads), {n} input sets cycled, {} warm-up calls",
                rayon::current_num_threads(),
                cfg.warmup
            ),
            samples,
        )])
    }

    fn time_copy(&self, bytes: u64, cfg: &TimingConfig) -> Result<Vec<TierSamples>> {
        let half = (bytes / 2) as usize;
        let sets = cfg.input_sets.max(1);
        let srcs: Vec<Vec<u8>> = (0..sets)
            .map(|s| (0..half).map(|i| (i * 31 + s * 7) as u8).collect())
            .collect();
        let mut dst = vec![0u8; half];
        let copy = |src: &[u8], dst: &mut [u8]| {
            const CHUNK: usize = 1 << 18;
            dst.par_chunks_mut(CHUNK)
                .zip(src.par_chunks(CHUNK))
                .for_each(|(d, s)| d.copy_from_slice(s));
        };
        for i in 0..cfg.warmup {
            copy(&srcs[i % sets], &mut dst);
        }
        let mut samples = Vec::with_capacity(cfg.iters);
        for i in 0..cfg.iters {
            let t0 = Instant::now();
            copy(&srcs[i % sets], &mut dst);
            samples.push(t0.elapsed().as_secs_f64() * 1e6);
        }
        std::hint::black_box(&dst);
        Ok(vec![TierSamples::new(
            "wall",
            format!(
                "host wall clock around a parallel memcpy of {half} bytes ({} rayon threads, 256 KiB chunks), {sets} sources cycled",
                rayon::current_num_threads()
            ),
            samples,
        )])
    }

    fn device(&self) -> String {
        let model = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with("model name"))
                    .and_then(|l| l.split(':').nth(1))
                    .map(|m| m.trim().to_string())
            })
            .unwrap_or_else(|| std::env::consts::ARCH.to_string());
        let simd = if fma_available() {
            "avx2+fma"
        } else {
            "baseline simd"
        };
        format!(
            "cpu: {model}, {} threads, {simd}",
            rayon::current_num_threads()
        )
    }
}
