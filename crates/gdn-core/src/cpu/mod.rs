//! Fast multithreaded CPU backend: f32 math, bf16/fp16/f32 I/O, all three operations and every serving mode.
//!
//! Work mapping: one rayon task per (sequence, value head, block of V rows). Rows of the state evolve
//! independently given k, q and the gates (`S[v,:]` needs only `v[v]`), so a long sequence with few heads
//! still splits into many tasks; blocks are sized from the total work so that there are a few tasks per
//! thread. Inside a task, tokens are walked in order and each row of the block gets one fused pass per
//! token (see `kernel`): the block (≤ 128 rows × 512 B) stays in L1/L2 across the sequence. Files: this one
//! plans the call and its tasks, `ctx` holds what tasks share, `walk` is the per-task token walk, `state`
//! loads and stores state blocks in either layout and dtype, `kernel` has the row operations.
//!
//! Per call, before any task: the gates per (token, head) (raw, or the precomputed `g` / `alpha` and `beta`,
//! through the reference's `gates_f64`), and with the in-kernel q/k norm the normalised copies of q and k (in
//! their own dtype, bf16 or fp16), so the token loop is the same for every mode. Which rows each sequence reads and writes comes from the
//! reference's `plan` (pools, padding, `has_initial_state`, spec-decode slots, checkpoints).
//!
//! Per task: q/k of the current and next token are widened to f32 into a small scratch (reused across
//! tasks of a thread); each token's output rows are rounded to the activation dtype once computed. The state
//! block is worked on in place in the f32 state output when the task owns that destination row and the layout
//! is k-last; otherwise (16-bit state, K-first layout, MTP definition mode,
//! spec-decode slots) in scratch, stored at the end (see `state`). Sequences that store states mid-walk
//! (MTP intermediate rows, spec-decode slots, checkpoints) run a separate instantiation of the walk; the
//! others' token loop has no store at all. Every output element is written: rows no task writes are filled
//! first (zeros, or the input pool's row where the state is updated in place), padded sequences' outputs
//! are zeroed; the intermediate and checkpoint buffers keep the caller's values outside the rows written.

mod ctx;
mod kernel;
mod state;
mod timing;
mod walk;

use crate::error::{GdnError, Result};
use crate::outputs::{ActBuf, Backend, Outputs, StateBuf};
use crate::problem::{ActRef, Inputs, Problem};
use crate::reference::{gates_f64, plan, SeqPlan};
use crate::serving::QK_NORM_EPS;
use crate::DType;
use ctx::{Ctx, Scratch, Shared, SharedAct, SharedState, Task};
use half::{bf16, f16};
use kernel::*;
use rayon::prelude::*;
use state::{fill_untouched_state, zero_padding_outputs};
use walk::run_task_dispatch;

/// The CPU backend (uses rayon's global thread pool).
pub struct CpuBackend;

impl Backend for CpuBackend {
    fn name(&self) -> String {
        "cpu".into()
    }

    fn run(&self, p: &Problem, x: &Inputs, out: &mut Outputs) -> Result<()> {
        run_impl(p, x, out, fma_available())
    }
}

/// Runs with the baseline (auto-vectorised) row operations even where AVX2/FMA exist, so that tests cover
/// the path non-AVX2 machines take.
#[doc(hidden)]
pub fn run_portable(p: &Problem, x: &Inputs, out: &mut Outputs) -> Result<()> {
    run_impl(p, x, out, false)
}

fn run_impl(p: &Problem, x: &Inputs, out: &mut Outputs, simd: bool) -> Result<()> {
    check_outputs(p, out)?;
    let seqs = plan(p, x);
    let (g, beta) = gates(p, x);
    let h = &p.def.heads;
    let normalised = p.serving.qk_l2norm.then(|| {
        (
            l2_normalised(x.q, h.head_size),
            l2_normalised(x.k, h.head_size),
        )
    });
    let (q, k) = match &normalised {
        Some((q, k)) => (q.as_act(), k.as_act()),
        None => (x.q, x.k),
    };
    fill_untouched_state(p, x, &seqs, &mut out.state);
    zero_padding_outputs(p, &seqs, &mut out.output);
    let tasks = build_tasks(&seqs, h.num_v_heads, h.head_size);
    let ctx = Ctx {
        x,
        q,
        k,
        plan: &seqs,
        g: &g,
        beta: &beta,
        d: h.head_size,
        hq: h.num_q_heads,
        hv: h.num_v_heads,
        ratio: h.ratio(),
        t_len: p.dims.seq_len,
        scale: p.scale,
        layout: p.serving.layout,
        every: p.serving.checkpoint_every,
        simd,
        out: SharedAct::new(&mut out.output),
        state: SharedState::new(&mut out.state),
        inter: match (p.intermediate, out.intermediate.as_mut()) {
            (true, Some(v)) => Some(SharedState::F32(Shared::new(v))),
            _ => None,
        },
        checkpoints: match (p.serving.checkpoint_every > 0, out.checkpoints.as_mut()) {
            (true, Some(b)) => Some(SharedState::new(b)),
            _ => None,
        },
    };
    tasks
        .par_iter()
        .for_each_init(Scratch::default, |scr, t| run_task_dispatch(&ctx, scr, t));
    Ok(())
}

fn check_outputs(p: &Problem, out: &Outputs) -> Result<()> {
    let want: usize = p.output_shape().iter().product();
    if out.output.len() != want || out.output.dtype() != p.act_dtype {
        return Err(GdnError::shape(
            "output",
            format!(
                "buffer has {} elements of {}, expected {want} of {}",
                out.output.len(),
                out.output.dtype(),
                p.act_dtype
            ),
        ));
    }
    let name = p.def.state_output();
    let want: usize = p.state_shape().iter().product();
    check_state_buf(name, Some(&out.state), want, p.state_out_dtype())?;
    if p.intermediate {
        let want: usize = p.intermediate_shape().iter().product();
        let got = out.intermediate.as_ref().map_or(0, Vec::len);
        if got != want {
            return Err(GdnError::shape(
                "intermediate_states_buffer",
                format!("output buffer has {got} elements, expected {want}"),
            ));
        }
    }
    if p.serving.checkpoint_every > 0 {
        let want: usize = p.checkpoint_shape().iter().product();
        let name = crate::serving::names::CHECKPOINTS;
        check_state_buf(name, out.checkpoints.as_ref(), want, p.checkpoint_dtype)?;
    }
    Ok(())
}

/// A state-like output buffer must be present with `want` elements of `dtype`.
fn check_state_buf(name: &str, buf: Option<&StateBuf>, want: usize, dtype: DType) -> Result<()> {
    let dtype_ok = buf.is_some_and(|b| b.dtype() == dtype);
    let got = buf.map_or(0, StateBuf::len);
    if got != want || !dtype_ok {
        return Err(GdnError::shape(
            name,
            format!("output buffer has {got} elements (dtype ok: {dtype_ok}), expected {want} of {dtype}"),
        ));
    }
    Ok(())
}

/// Decay and update gates per (token, value head), computed once per call by the reference's `gates_f64`
/// (raw gates, or the precomputed `g` / `alpha` and f32 or bf16 `beta`) in f64, stored f32.
fn gates(p: &Problem, x: &Inputs) -> (Vec<f32>, Vec<f32>) {
    let hv = p.def.heads.num_v_heads;
    let n = p.dims.total_tokens * hv;
    let (mut g, mut beta) = (vec![0f32; n], vec![0f32; n]);
    g.par_chunks_mut(hv)
        .zip(beta.par_chunks_mut(hv))
        .enumerate()
        .for_each(|(t, (gt, bt))| {
            for h in 0..hv {
                let (log_g, b) = gates_f64(p, x, t, h);
                gt[h] = log_g.exp() as f32;
                bt[h] = b as f32;
            }
        });
    (g, beta)
}

/// q or k L2-normalised per (token, head) row, as the in-kernel norm does: `x / sqrt(Σx² + eps)` with the
/// sum in f32, rounded to the input's dtype (the value every later step uses).
fn l2_normalised(x: ActRef, d: usize) -> ActBuf {
    match x {
        ActRef::BF16(x) => ActBuf::BF16(normalise_rows(x, d, bf16_to_f32, f32_to_bf16, bf16::ZERO)),
        ActRef::F16(x) => ActBuf::F16(normalise_rows(x, d, f16::to_f32, f16::from_f32, f16::ZERO)),
    }
}

fn normalise_rows<T: Copy + Send + Sync>(
    x: &[T],
    d: usize,
    wide: impl Fn(T) -> f32 + Sync,
    round: impl Fn(f32) -> T + Sync,
    zero: T,
) -> Vec<T> {
    let mut out = vec![zero; x.len()];
    out.par_chunks_mut(d)
        .zip(x.par_chunks(d))
        .with_min_len(256)
        .for_each(|(o, row)| {
            let sum: f32 = row.iter().map(|&e| wide(e) * wide(e)).sum();
            let r = 1.0 / (sum + QK_NORM_EPS).sqrt();
            for (o, &e) in o.iter_mut().zip(row) {
                *o = round(wide(e) * r);
            }
        });
    out
}

/// Smallest block of V rows a task takes.
const MIN_ROWS: usize = 16;
/// Largest block for sequences of more than a few tokens: 32 rows × 128 × 4 B = 16 KiB stays in L1
/// across the token walk (a whole 64 KiB head state does not: measured 1.4x slower).
const L1_ROWS: usize = 32;
/// Sequences at least this long are cut into L1-sized blocks.
const L1_MIN_TOKENS: usize = 8;
/// Tasks aimed for per thread (load balance against task overhead).
const TASKS_PER_THREAD: usize = 4;

/// Tasks for every active (sequence, head), long sequences split into V-row blocks, longest first.
fn build_tasks(seqs: &[SeqPlan], hv: usize, d: usize) -> Vec<Task> {
    let active = |s: &&SeqPlan| !s.padding && !s.tokens.is_empty();
    let total_work: usize = seqs
        .iter()
        .filter(active)
        .map(|s| s.tokens.len() * hv)
        .sum();
    let target = TASKS_PER_THREAD * rayon::current_num_threads();
    let per_task = (total_work / target.max(1)).max(1);
    let mut tasks = Vec::new();
    for (n, s) in seqs.iter().enumerate().filter(|(_, s)| active(s)) {
        let splits = s
            .tokens
            .len()
            .div_ceil(per_task)
            .clamp(1, (d / MIN_ROWS).max(1));
        let mut rows = d.div_ceil(splits).next_multiple_of(8).min(d);
        if s.tokens.len() >= L1_MIN_TOKENS {
            rows = rows.min(L1_ROWS);
        }
        for head in 0..hv {
            for v0 in (0..d).step_by(rows) {
                tasks.push(Task {
                    seq: n,
                    head,
                    v0,
                    v1: (v0 + rows).min(d),
                });
            }
        }
    }
    let work = |t: &Task| seqs[t.seq].tokens.len() * (t.v1 - t.v0);
    tasks.sort_by_key(|t| std::cmp::Reverse(work(t)));
    tasks
}

fn fma_available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        Avx2Fma::detect().is_some()
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        PORTABLE_FMA
    }
}
