//! `gdn check`'s large-pool case (CUDA, full sweep): decode and prefill through a bf16 state pool of
//! [`POOL_ROWS`] rows, more than 2^31 elements (4.3 GB at qk4_v8), with the sequences' rows placed past the
//! 2^31-element mark, at row 0 and in between, and padding among them.
//!
//! The reference is the same call on a pool of just the touched rows (sequence i at row i; the kernels compute
//! each sequence alone, so gathering changes nothing). The big pool's touched rows must match that reference's
//! rows (contest rule, poisoned outputs), and every other row — 16,000 of them — must come back bit for bit. A
//! kernel that forms a pool offset in 32 bits reads or writes the wrong row and fails one of the two.

use crate::backend::Engine;
use crate::verify::{row_label, tolerances, verdict, Prepared, Verdict};
use anyhow::{Context, Result};
use gdn_core::compare::compare;
use gdn_core::serving::names;
use gdn_core::workload::WorkloadSpec;
use gdn_core::{Backend, DType, Data, Heads, Outputs, StateBuf, Tensor, TensorMap};
use half::bf16;
use rayon::prelude::*;

/// Rows of the big pool: 40 rows past the first row whose offset (row · HV · 128 · 128, HV = 8) is 2^31.
pub const POOL_ROWS: usize = (1 << 31) / (8 * 128 * 128) + 40;
/// Pool rows of the eight sequences (-1: padding).
const ROWS: [i64; 8] = [16423, 0, 16384, -1, 9000, 16400, 1, 16390];
// every listed row lies in the pool, and rows 16384.. start past 2^31 elements
const _: () = assert!((ROWS[0] as usize) < POOL_ROWS && POOL_ROWS * 8 * 128 * 128 > 1 << 31);

/// The case's label for `op`.
pub fn label(spec: &WorkloadSpec) -> String {
    format!(
        "serving {} pool of {POOL_ROWS} bf16 rows (>2^31 elements)",
        spec.label
    )
}

/// The two workloads: decode B = 8 and prefill of 8 sequences (one empty).
pub fn specs() -> Vec<WorkloadSpec> {
    let h = Heads::new(4, 8, 128).expect("qk4_v8");
    let mut d = WorkloadSpec::decode(h, ROWS.len());
    d.label = "decode B=8".into();
    let mut p = WorkloadSpec::prefill(h, &[100, 0, 37, 64, 5, 1, 70, 2]);
    p.label = "prefill 8 seqs".into();
    p.normalize_qk = true;
    let mut v = vec![d, p];
    for s in &mut v {
        s.state_dtype = DType::BF16;
        s.serving.pool_rows = ROWS.len(); // the small pool: sequence i at row i
    }
    v
}

/// Runs `spec` through the big pool on `engine`; one verdict.
pub fn run(engine: &Engine, spec: &WorkloadSpec, seed: u64) -> Result<Verdict> {
    run_in(engine, spec, seed, POOL_ROWS, &ROWS)
}

/// Runs `spec` through a pool of `pool_rows` rows, sequence i at row `rows[i]` (-1: padding).
fn run_in(
    engine: &Engine,
    spec: &WorkloadSpec,
    seed: u64,
    pool_rows: usize,
    rows: &[i64],
) -> Result<Verdict> {
    let small = small_case(spec, seed, rows)?;
    let (big, dst) = big_tensors(&small.tensors, pool_rows, rows)?;
    let p = spec.problem(&big).context("the large-pool workload")?;
    let x = p.inputs(&big);
    let mut out = Outputs::poisoned(&p, &x);
    engine
        .run(&p, &x, &mut out)
        .with_context(|| format!("{} on {}", engine.name(), label(spec)))?;
    let plan = engine.plan_label(&p)?;
    // the touched rows, gathered back to the small pool's order (padded sequences: the small input row)
    let StateBuf::BF16(pool) = &out.state else {
        anyhow::bail!("the pool came back in another dtype")
    };
    let row = p.state_row_len();
    let small_in = small.tensors["state"].as_bf16().expect("bf16");
    let mut gathered = small_in.to_vec();
    for (i, r) in dst.iter().enumerate() {
        if let Some(r) = r {
            gathered[i * row..(i + 1) * row].copy_from_slice(&pool[r * row..(r + 1) * row]);
        }
    }
    let small_out = Outputs {
        output: out.output.clone(),
        state: StateBuf::BF16(gathered),
        intermediate: None,
        checkpoints: None,
    };
    let (ot, st) = tolerances(&small.problem, spec.normalize_qk);
    let report = compare(&small.problem, &small_out, small.reference(), &ot, &st);
    let mut v = verdict(&row_label(&label(spec), &plan), &report);
    v.plan = plan;
    // every other row: bit for bit the input
    let input = big["state"].as_bf16().expect("bf16");
    let touched: Vec<bool> = (0..pool_rows).map(|r| dst.contains(&Some(r))).collect();
    let changed: usize = (0..pool_rows)
        .into_par_iter()
        .filter(|&r| !touched[r])
        .map(|r| {
            let (a, b) = (
                &pool[r * row..(r + 1) * row],
                &input[r * row..(r + 1) * row],
            );
            a.iter()
                .zip(b)
                .filter(|(x, y)| x.to_bits() != y.to_bits())
                .count()
        })
        .sum();
    if changed > 0 {
        v.passed = false;
        v.failed += changed;
        v.summary += &format!(" | {changed} elements of untouched pool rows changed");
    }
    Ok(v)
}

/// The small call: the workload with sequence i at row i of an 8-row pool, padding where [`ROWS`] has it.
fn small_case(spec: &WorkloadSpec, seed: u64, rows: &[i64]) -> Result<Prepared> {
    let mut t = gdn_core::workload::generate(spec, seed);
    let idx: Vec<i64> = rows
        .iter()
        .enumerate()
        .map(|(i, &r)| if r < 0 { -1 } else { i as i64 })
        .collect();
    t.insert(
        names::STATE_INDICES.into(),
        Tensor::new(vec![idx.len()], Data::I64(idx)),
    );
    Prepared::from_tensors(spec, t)
}

/// The small call's tensors moved into the big pool (rows per [`ROWS`]; a cheap distinct pattern elsewhere),
/// and each sequence's big-pool row.
fn big_tensors(
    small: &TensorMap,
    pool_rows: usize,
    rows: &[i64],
) -> Result<(TensorMap, Vec<Option<usize>>)> {
    let st = &small["state"];
    let row: usize = st.shape[1..].iter().product();
    let src = st.as_bf16().context("the small pool is bf16")?;
    let mut pool = vec![bf16::ZERO; pool_rows * row];
    pool.par_chunks_mut(row).enumerate().for_each(|(r, c)| {
        for (j, e) in c.iter_mut().enumerate() {
            let h = ((r * row + j) as u64).wrapping_mul(2_654_435_761) % 2001;
            *e = bf16::from_f32(h as f32 * 1e-4 - 0.1);
        }
    });
    let dst: Vec<Option<usize>> = rows
        .iter()
        .map(|&r| (r >= 0).then_some(r as usize))
        .collect();
    for (i, r) in dst.iter().enumerate() {
        if let Some(r) = r {
            pool[r * row..(r + 1) * row].copy_from_slice(&src[i * row..(i + 1) * row]);
        }
    }
    let mut big = small.clone();
    let mut shape = st.shape.clone();
    shape[0] = pool_rows;
    big.insert("state".into(), Tensor::new(shape, Data::BF16(pool)));
    big.insert(
        names::STATE_INDICES.into(),
        Tensor::new(vec![rows.len()], Data::I64(rows.to_vec())),
    );
    Ok((big, dst))
}

#[cfg(test)]
mod tests {
    use super::*;
    use gdn_core::cpu::CpuBackend;

    /// The case's construction and judgement in a 24-row pool, on the CPU backend.
    #[test]
    fn small_pool_passes_on_the_cpu() {
        for spec in specs() {
            let v = run_in(
                &Engine::Cpu(CpuBackend),
                &spec,
                1,
                24,
                &[23, 0, 16, -1, 9, 20, 1, 18],
            )
            .unwrap();
            assert!(v.passed, "{}: {}", spec.label, v.summary);
        }
    }
}
