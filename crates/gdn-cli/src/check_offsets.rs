//! `gdn check`'s 64-bit offset case (CUDA only): one prefill call whose q, k, v and output tensors each hold more
//! than 2^31 elements, with the sequences that are checked placed past that mark.
//!
//! Sequence 0 is a filler of [`FILLER`] tokens with q = k = v = 0 and a = b = 0. Its outputs must be exactly 0, and
//! its final state is S0 · g^FILLER per value head (g: the head's decay at a = 0), in closed form: with k = 0 the
//! update adds nothing. Sequences 1.. are an ordinary normalised workload ([`TAIL`], a zero length among them)
//! whose rows start past 2^31 elements of q and k and past 2^32 of v and the output. They are checked against the
//! float64 reference run on them alone (sequences are independent) with the prefill numerics targets. A kernel
//! that forms any of these offsets, or a workspace offset, in 32 bits reads or writes other rows: the tail then
//! fails, or the filler's zeros do, or the call faults.
//!
//! Sizes (qk4_v8): q and k 4.3 GB each, v and the output 8.6 GB each, the chunk64 / cp workspace ~9 GB; about
//! 35 GB of GPU memory and 27 GB of host memory.

use crate::backend::Engine;
use crate::verify::{
    for_plan, refused, row_label, run_forced, tolerances, verdict, Prepared, Ran, Verdict,
};
use anyhow::{bail, Context, Result};
use gdn_core::compare::{check_tensor, compare};
use gdn_core::reference::gates_f64;
use gdn_core::workload::WorkloadSpec;
use gdn_core::{Backend, Data, Heads, Outputs, StateBuf, Tensor, TensorMap};
use gdn_cuda::ForcedPlan;
use half::bf16;
use rayon::prelude::*;

/// Filler tokens: sequence 1 starts 197 tokens past the first token whose q/k offset (t · H · 128, H = 4) is 2^31.
pub const FILLER: usize = (1 << 31) / (4 * 128) + 197;
// the first tail row of q and k (H = 4) lies past 2^31 elements, of v and the output (HV = 8) past 2^32
const _: () = assert!(FILLER * 4 * 128 > 1 << 31 && FILLER * 8 * 128 > 1 << 32);
/// The checked sequences after the filler.
pub const TAIL: [usize; 4] = [300, 0, 1, 77];

/// The case's label.
pub fn label() -> String {
    format!(
        "prefill 64-bit offsets ({FILLER} filler + {} tokens, >2^31 elements)",
        TAIL.iter().sum::<usize>()
    )
}

/// Runs the case once per plan in `plans`; one verdict each.
pub fn run(engine: &Engine, seed: u64, plans: &[Option<ForcedPlan>]) -> Result<Vec<Verdict>> {
    let case = Case::new(seed, FILLER)?;
    let p = case
        .spec
        .problem(&case.tensors)
        .context("the 64-bit offset workload")?;
    let x = p.inputs(&case.tensors);
    let mut verdicts = Vec::new();
    for &plan in plans {
        let p = for_plan(&p, plan);
        let mut out = Outputs::poisoned(&p, &x);
        let ran = match run_forced(engine, &p, &x, &mut out, plan)
            .with_context(|| format!("{} on {}", engine.name(), case.spec.label))?
        {
            Ran::Ran(label) => label,
            Ran::Refused(why) => {
                let k = plan.map_or("auto", ForcedPlan::name);
                verdicts.push(refused(&format!("{} [{k}]", case.spec.label), why));
                continue;
            }
        };
        verdicts.push(case.judge(ran, &out)?);
    }
    Ok(verdicts)
}

/// The workload (a filler of `filler` tokens, then [`TAIL`]) and what its outputs must be.
struct Case {
    spec: WorkloadSpec,
    filler: usize,
    /// The whole call's tensors.
    tensors: TensorMap,
    /// The tail alone, with its float64 reference.
    tail: Prepared,
    /// The filler's final state, f64 `[HV, D, D]`.
    filler_state: Vec<f64>,
}

impl Case {
    fn new(seed: u64, filler: usize) -> Result<Case> {
        let heads = Heads::new(4, 8, 128).context("qk4_v8")?;
        let mut spec = WorkloadSpec::prefill(heads, &TAIL);
        spec.normalize_qk = true;
        spec.label = label();
        let tail = Prepared::new(&spec, seed)?;
        let state_name = spec.definition().state_input();
        let tensors = with_filler(&tail.tensors, state_name, filler)?;
        let p = spec
            .problem(&tensors)
            .context("the 64-bit offset workload")?;
        let x = p.inputs(&tensors);
        // S0 · exp(filler · log g) per head (k = 0: the update adds nothing)
        let (hv, dd) = (heads.num_v_heads, heads.head_size * heads.head_size);
        let Data::F32(s) = &tensors[state_name].data else {
            bail!("the offset case's state must be f32")
        };
        let filler_state = (0..hv * dd)
            .map(|i| {
                let (log_g, _) = gates_f64(&p, &x, 0, i / dd);
                s[i] as f64 * (filler as f64 * log_g).exp()
            })
            .collect();
        Ok(Case {
            spec,
            filler,
            tensors,
            tail,
            filler_state,
        })
    }

    /// The verdict on one run's outputs `out` (`ran`: what ran on CUDA).
    fn judge(&self, ran: Option<String>, out: &Outputs) -> Result<Verdict> {
        let h = &self.spec.heads;
        let (row, hd2) = (
            h.num_v_heads * h.head_size,
            h.num_v_heads * h.head_size * h.head_size,
        );
        let StateBuf::F32(state) = &out.state else {
            bail!("the offset case's new_state must be f32")
        };
        let (out_tol, state_tol) = tolerances(&self.tail.problem, true);
        // the tail against its own reference
        let tail_out = Outputs {
            output: out.output.slice(self.filler * row..out.output.len()),
            state: StateBuf::F32(state[hd2..].to_vec()),
            intermediate: None,
            checkpoints: None,
        };
        let mut report = compare(
            &self.tail.problem,
            &tail_out,
            &self.tail.reference,
            &out_tol,
            &state_tol,
        );
        let got: Vec<f64> = state[..hd2].iter().map(|&e| e as f64).collect();
        report.tensors.push(check_tensor(
            "new_state (filler)",
            &got,
            &self.filler_state,
            &state_tol,
        ));
        let mut v = verdict(&row_label(&self.spec.label, &ran), &report);
        v.plan = ran;
        // the filler's outputs: exactly zero (a NaN is the poison of an unwritten element)
        let Some(output) = out.output.as_bf16() else {
            bail!("the offset case's output must be bf16")
        };
        let nonzero: usize = output[..self.filler * row]
            .par_chunks(1 << 20)
            .map(|c| c.iter().filter(|e| e.to_bits() & 0x7fff != 0).count())
            .sum();
        if nonzero > 0 {
            v.passed = false;
            v.failed += nonzero;
            v.summary += &format!(" | filler output: {nonzero} elements not exactly 0");
        }
        Ok(v)
    }
}

/// `tail`'s tensors with the filler sequence prepended: zero q/k/v/a/b rows, the state's row 0 copied first.
fn with_filler(tail: &TensorMap, state_name: &str, filler: usize) -> Result<TensorMap> {
    let mut m = TensorMap::new();
    for (name, t) in tail {
        let grown = match name.as_str() {
            "q" | "k" | "v" | "a" | "b" => {
                let Data::BF16(v) = &t.data else {
                    bail!("{name} is not bf16")
                };
                let per_token: usize = t.shape[1..].iter().product();
                let mut data = vec![bf16::ZERO; filler * per_token];
                data.extend_from_slice(v);
                let mut shape = t.shape.clone();
                shape[0] += filler;
                Tensor::new(shape, Data::BF16(data))
            }
            "cu_seqlens" => {
                let Data::I64(cu) = &t.data else {
                    bail!("cu_seqlens is not int64")
                };
                let mut data = vec![0i64];
                data.extend(cu.iter().map(|&c| c + filler as i64));
                Tensor::new(vec![data.len()], Data::I64(data))
            }
            n if n == state_name => {
                let Data::F32(s) = &t.data else {
                    bail!("{name} is not f32")
                };
                let per_row: usize = t.shape[1..].iter().product();
                let mut data = s[..per_row].to_vec();
                data.extend_from_slice(s);
                let mut shape = t.shape.clone();
                shape[0] += 1;
                Tensor::new(shape, Data::F32(data))
            }
            _ => t.clone(),
        };
        m.insert(name.clone(), grown);
    }
    Ok(m)
}

#[cfg(test)]
mod tests {
    use super::*;
    use gdn_core::cpu::CpuBackend;

    /// The case's construction and judgement at a small filler, on the CPU backend.
    fn small() -> (Case, Outputs) {
        let case = Case::new(3, 197).unwrap();
        let p = case.spec.problem(&case.tensors).unwrap();
        let x = p.inputs(&case.tensors);
        let mut out = Outputs::poisoned(&p, &x);
        Engine::Cpu(CpuBackend).run(&p, &x, &mut out).unwrap();
        (case, out)
    }

    #[test]
    fn filler_and_tail_pass_on_the_cpu() {
        let (case, out) = small();
        let v = case.judge(None, &out).unwrap();
        assert!(v.passed, "{}", v.summary);
        assert!(v.rel_l2_output > 0.0 && v.rel_l2_output < 3e-3);
    }

    #[test]
    fn a_wrong_filler_or_tail_element_fails() {
        let (case, out) = small();
        let row = 8 * 128;
        for (at, value) in [
            (5 * row + 3, 1e-3f32),
            (7, f32::NAN),
            (197 * row + 11, 50.0),
        ] {
            let mut bad = out.clone();
            bad.output.set(at, value as f64);
            let v = case.judge(None, &bad).unwrap();
            assert!(!v.passed, "element {at} = {value} passed");
        }
        let mut bad = out.clone();
        if let StateBuf::F32(s) = &mut bad.state {
            s[17] += 1.0; // the filler's state
        }
        assert!(!case.judge(None, &bad).unwrap().passed);
    }
}
