//! Float64 reference of the three GDN operations, written from the definitions' math (per value head and
//! token: decay the state by `g`, correct it along `k` by `beta·(v − S·k)`, read it out along `q`), and the
//! chunked WY/UT form of the same recurrence — the algorithm the GPU prefill uses — in float64.
//!
//! Both share [`plan`]: which tokens each sequence owns and which state rows it reads and writes. Gates are
//! computed in f64 from the 16-bit / f32 inputs (softplus with torch's threshold 20); the state and the output
//! stay f64 (the output is not rounded to bf16 or fp16 here: the comparison sees the exact value).
//!
//! Semantics (the definitions' reference code, plus the serving modes of [`crate::serving`]):
//! - decode / prefill: sequence n reads state row n (zeros when the state is absent) and writes
//!   `new_state` row n; a zero-length prefill sequence is skipped, so its `new_state` row stays zero.
//!   With a pool (`state_indices`) it reads and writes row `idx[n]` of the pool in place; padding and
//!   zero-length sequences touch nothing, `has_initial_state[n] = 0` starts from zeros.
//! - MTP: request b reads pool row `initial_state_indices[b]`; `final_state` starts as a copy of the pool.
//!   In [`MtpMode::Serving`] the request's final state is written back to its row and padding indices
//!   (by the call's rule) skip the request (output rows zero, nothing read or written); in
//!   [`MtpMode::Definition`] the pool copy is left as is. The intermediate buffer starts as the caller's
//!   buffer; row `idx[b]`, token t gets the state after t. Spec-decode slots read row `idx[b, acc-1]` and
//!   write the state after token t to row `idx[b, t]` (skipped where that entry is padding).
//! - gates from `g`/`alpha`/`beta` when given; q and k L2-normalised (then rounded to their own dtype, bf16
//!   or fp16) when asked; every
//!   state tensor in the call's layout; prefill checkpoints every `n` tokens into the caller's buffer.

use crate::definition::Op;
use crate::problem::{ActRef, Inputs, MtpMode, Problem, StateRef};
use crate::serving::{GateMode, StateLayout, QK_NORM_EPS};
use half::{bf16, f16};
use rayon::prelude::*;
use std::ops::Range;

/// Reference outputs in float64, same layouts as [`crate::Outputs`].
#[derive(Clone, Debug)]
pub struct RefOutputs {
    pub output: Vec<f64>,
    pub state: Vec<f64>,
    pub intermediate: Option<Vec<f64>>,
    /// The prefill `checkpoints` buffer, when given.
    pub checkpoints: Option<Vec<f64>>,
}

/// One sequence's work: its tokens and the state rows it reads and writes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SeqPlan {
    /// Rows of q/k/v (and of `output`) this sequence owns.
    pub tokens: Range<usize>,
    /// State input row read as the initial state (`None`: zeros).
    pub read_row: Option<usize>,
    /// State output row that receives the final state (`None`: not written).
    pub write_row: Option<usize>,
    /// MTP: row of the intermediate buffer that receives the state after each token.
    pub inter_row: Option<usize>,
    /// Serving-mode padding: output rows zero, nothing read or written.
    pub padding: bool,
    /// Spec-decode slots: the state output row that receives the state after each token (`None`: not written).
    pub token_rows: Vec<Option<usize>>,
    /// Prefill checkpoints: the `checkpoints` row of this sequence's first checkpoint.
    pub checkpoint_row: Option<usize>,
}

/// The per-sequence work of a validated problem, in sequence order.
pub fn plan(p: &Problem, x: &Inputs) -> Vec<SeqPlan> {
    let cu = &x.cu_seqlens;
    let has_state = x.state.is_some();
    let pad = p.serving.pad;
    let fresh = |n: usize| x.has_initial_state.as_ref().is_some_and(|f| !f[n]);
    let every = p.serving.checkpoint_every;
    (0..p.dims.num_seqs)
        .map(|n| {
            let tokens = cu[n] as usize..cu[n + 1] as usize;
            let checkpoint_row = x
                .checkpoint_starts
                .as_ref()
                .filter(|_| every > 0 && tokens.len() >= every)
                .map(|st| st[n] as usize);
            let base = SeqPlan {
                read_row: None,
                write_row: None,
                inter_row: None,
                padding: false,
                token_rows: Vec::new(),
                checkpoint_row: None,
                tokens: tokens.clone(),
            };
            match p.def.op {
                Op::Decode | Op::Prefill if p.pool => {
                    let idx = x.pool_indices.as_ref().expect("validated pool")[n];
                    if pad.is_pad(idx) {
                        return SeqPlan {
                            padding: true,
                            ..base
                        };
                    }
                    let row = idx as usize;
                    SeqPlan {
                        read_row: (!fresh(n) && !tokens.is_empty()).then_some(row),
                        write_row: (!tokens.is_empty()).then_some(row),
                        checkpoint_row,
                        ..base
                    }
                }
                Op::Decode | Op::Prefill => SeqPlan {
                    read_row: (has_state && !fresh(n)).then_some(n),
                    write_row: (!tokens.is_empty()).then_some(n),
                    checkpoint_row,
                    ..base
                },
                Op::Mtp if p.spec_slots => {
                    let t_len = p.dims.seq_len;
                    let slots = &x.pool_indices.as_ref().expect("validated slots")
                        [n * t_len..(n + 1) * t_len];
                    if pad.is_pad(slots[0]) {
                        return SeqPlan {
                            padding: true,
                            ..base
                        };
                    }
                    let acc = x.num_accepted.expect("validated slots")[n] as usize;
                    SeqPlan {
                        read_row: (!fresh(n)).then_some(slots[acc - 1] as usize),
                        token_rows: slots
                            .iter()
                            .map(|&r| (!pad.is_pad(r)).then_some(r as usize))
                            .collect(),
                        ..base
                    }
                }
                Op::Mtp => {
                    let idx = x.state_indices.expect("validated MTP has indices")[n];
                    let serving = p.mtp_mode == MtpMode::Serving;
                    // padding by the call's rule in both modes (the definition mode's pool is not written)
                    let row = (!pad.is_pad(idx as i64)).then_some(idx as usize);
                    SeqPlan {
                        read_row: row.filter(|_| !fresh(n)),
                        write_row: row.filter(|_| serving),
                        inter_row: row.filter(|_| p.intermediate),
                        padding: row.is_none(),
                        ..base
                    }
                }
            }
        })
        .collect()
}

/// Log of the decay gate and the update gate of token `t`, value head `h`, in f64: from the raw inputs
/// (`-exp(A_log) * softplus(a + dt_bias)`, `sigmoid(b)`) or the precomputed `g` / `alpha` and `beta`.
pub fn gates_f64(p: &Problem, x: &Inputs, t: usize, h: usize) -> (f64, f64) {
    let hv = p.def.heads.num_v_heads;
    let i = t * hv + h;
    match p.gates {
        GateMode::Raw => {
            let arg = x.a.get(i) as f64 + x.dt_bias[h] as f64;
            let log_g = -(x.a_log[h] as f64).exp() * softplus(arg);
            let beta = 1.0 / (1.0 + (-(x.b.get(i) as f64)).exp());
            (log_g, beta)
        }
        GateMode::Log => (x.gate.expect("validated")[i] as f64, beta_f64(x, i)),
        GateMode::Linear => ((x.gate.expect("validated")[i] as f64).ln(), beta_f64(x, i)),
    }
}

fn beta_f64(x: &Inputs, i: usize) -> f64 {
    x.beta.expect("validated").get(i) as f64
}

/// torch's softplus (beta 1, threshold 20): `x` above the threshold, `log1p(exp(x))` otherwise.
pub fn softplus(x: f64) -> f64 {
    if x > 20.0 {
        x
    } else {
        x.exp().ln_1p()
    }
}

/// Token-by-token recurrence in float64, exactly the definitions' semantics.
pub fn run(p: &Problem, x: &Inputs) -> RefOutputs {
    run_with(p, x, recurrent_head)
}

/// The chunked WY/UT form in float64, chunks of `chunk` tokens; equals [`run`] to rounding.
pub fn run_chunked(p: &Problem, x: &Inputs, chunk: usize) -> RefOutputs {
    assert!(chunk > 0, "chunk size must be positive");
    run_with(p, x, |c, s, h| chunked_head(c, s, h, chunk))
}

/// What one (sequence, value head) produces.
struct HeadResult {
    /// `[len, D]` outputs.
    out: Vec<f64>,
    /// `[V, K]` final state.
    state: Vec<f64>,
    /// `[len, V, K]` state after each token (only when the sequence needs them: intermediate row or slots).
    inter: Vec<f64>,
    /// `[len / every, V, K]` checkpoint states (prefill checkpoints only).
    checkpoints: Vec<f64>,
}

/// Shared read-only context of a reference run.
struct Ctx<'a> {
    x: &'a Inputs<'a>,
    d: usize,
    hq: usize,
    hv: usize,
    ratio: usize,
    scale: f64,
    p: &'a Problem,
    layout: StateLayout,
    qk_norm: bool,
}

impl Ctx<'_> {
    /// Row `head` of token `t` in a `[T, heads, D]` 16-bit tensor, widened to f64.
    fn row(&self, x: ActRef, t: usize, heads: usize, head: usize) -> Vec<f64> {
        let off = (t * heads + head) * self.d;
        (off..off + self.d).map(|i| x.get(i) as f64).collect()
    }
    /// q of token `t` for value head `h` (its q/k head is `h / ratio`), L2-normalised when asked.
    fn q(&self, t: usize, h: usize) -> Vec<f64> {
        self.qk(self.row(self.x.q, t, self.hq, h / self.ratio))
    }
    fn k(&self, t: usize, h: usize) -> Vec<f64> {
        self.qk(self.row(self.x.k, t, self.hq, h / self.ratio))
    }
    /// The in-kernel norm: `x / sqrt(Σx² + eps)`, rounded to the input's dtype (bf16 or fp16) through f32 as
    /// the kernels do (they use the rounded value).
    fn qk(&self, x: Vec<f64>) -> Vec<f64> {
        if !self.qk_norm {
            return x;
        }
        let r = 1.0 / (x.iter().map(|e| e * e).sum::<f64>() + QK_NORM_EPS as f64).sqrt();
        let f16_in = matches!(self.x.q, ActRef::F16(_));
        x.iter()
            .map(|&e| {
                let y = (e * r) as f32;
                if f16_in {
                    f16::from_f32(y).to_f64()
                } else {
                    bf16::from_f32(y).to_f64()
                }
            })
            .collect()
    }
    fn gates(&self, t: usize, h: usize) -> (f64, f64) {
        gates_f64(self.p, self.x, t, h)
    }
    fn v(&self, t: usize, h: usize) -> Vec<f64> {
        self.row(self.x.v, t, self.hv, h)
    }
    /// The `[V, K]` initial state of head `h` for a sequence.
    fn initial_state(&self, s: &SeqPlan, h: usize) -> Vec<f64> {
        let dd = self.d * self.d;
        match (s.read_row, self.x.state) {
            (Some(r), Some(st)) => {
                let off = (r * self.hv + h) * dd;
                let stored = state_slice_f64(st, off..off + dd);
                from_layout(&stored, self.layout, self.d)
            }
            _ => vec![0.0; dd],
        }
    }
}

/// A stored `[D, D]` head state in `layout`, as `[V, K]`.
fn from_layout(stored: &[f64], layout: StateLayout, d: usize) -> Vec<f64> {
    match layout {
        StateLayout::KLast => stored.to_vec(),
        StateLayout::KFirst => (0..d * d)
            .map(|i| stored[layout.offset(d, i / d, i % d)])
            .collect(),
    }
}

/// Stores a `[V, K]` head state into `dst` (one `[D, D]` head) in `layout`.
fn store_layout(dst: &mut [f64], vk: &[f64], layout: StateLayout, d: usize) {
    for (i, &e) in vk.iter().enumerate() {
        dst[layout.offset(d, i / d, i % d)] = e;
    }
}

fn state_slice_f64(st: StateRef, range: Range<usize>) -> Vec<f64> {
    match st {
        StateRef::F32(v) => v[range].iter().map(|&e| e as f64).collect(),
        StateRef::BF16(v) => v[range].iter().map(|e| e.to_f64()).collect(),
        StateRef::F16(v) => v[range].iter().map(|e| e.to_f64()).collect(),
    }
}

/// Runs `head` for every (sequence, value head) in parallel and assembles the outputs.
fn run_with<F>(p: &Problem, x: &Inputs, head: F) -> RefOutputs
where
    F: Fn(&Ctx, &SeqPlan, usize) -> HeadResult + Sync,
{
    let h = &p.def.heads;
    let c = Ctx {
        x,
        d: h.head_size,
        hq: h.num_q_heads,
        hv: h.num_v_heads,
        ratio: h.ratio(),
        scale: p.scale as f64,
        p,
        layout: p.serving.layout,
        qk_norm: p.serving.qk_l2norm,
    };
    let seqs = plan(p, x);
    let jobs: Vec<(usize, usize)> = (0..seqs.len())
        .filter(|&n| !seqs[n].padding && !seqs[n].tokens.is_empty())
        .flat_map(|n| (0..c.hv).map(move |hh| (n, hh)))
        .collect();
    let results: Vec<HeadResult> = jobs
        .par_iter()
        .map(|&(n, hh)| head(&c, &seqs[n], hh))
        .collect();

    let mut r = empty_outputs(p, x);
    let (d, dd, hv) = (c.d, c.d * c.d, c.hv);
    for (&(n, hh), res) in jobs.iter().zip(&results) {
        let s = &seqs[n];
        for (i, t) in s.tokens.clone().enumerate() {
            let off = (t * hv + hh) * d;
            r.output[off..off + d].copy_from_slice(&res.out[i * d..(i + 1) * d]);
        }
        let layout = c.layout;
        if let Some(w) = s.write_row {
            let off = (w * hv + hh) * dd;
            store_layout(&mut r.state[off..off + dd], &res.state, layout, d);
        }
        if let (Some(ir), Some(buf)) = (s.inter_row, r.intermediate.as_mut()) {
            let t_len = p.dims.seq_len;
            for i in 0..s.tokens.len() {
                let off = ((ir * t_len + i) * hv + hh) * dd;
                store_layout(
                    &mut buf[off..off + dd],
                    &res.inter[i * dd..(i + 1) * dd],
                    layout,
                    d,
                );
            }
        }
        for (i, row) in s.token_rows.iter().enumerate() {
            if let Some(w) = row {
                let off = (w * hv + hh) * dd;
                store_layout(
                    &mut r.state[off..off + dd],
                    &res.inter[i * dd..(i + 1) * dd],
                    layout,
                    d,
                );
            }
        }
        if let (Some(c0), Some(buf)) = (s.checkpoint_row, r.checkpoints.as_mut()) {
            for (j, st) in res.checkpoints.chunks_exact(dd).enumerate() {
                let off = ((c0 + j) * hv + hh) * dd;
                store_layout(&mut buf[off..off + dd], st, layout, d);
            }
        }
    }
    r
}

impl SeqPlan {
    /// Whether the state after every token is needed (intermediate buffer or spec-decode slots).
    fn needs_token_states(&self) -> bool {
        self.inter_row.is_some() || !self.token_rows.is_empty()
    }
    /// Whether the state after token `i` (0-based within the sequence) is a checkpoint.
    fn is_checkpoint(&self, every: usize, i: usize) -> bool {
        self.checkpoint_row.is_some() && (i + 1).is_multiple_of(every)
    }
}

/// Outputs before any sequence runs: output zeros; state zeros (definition decode, prefill) or the pool
/// (MTP, pools); the intermediate and checkpoint buffers as the caller gave them.
fn empty_outputs(p: &Problem, x: &Inputs) -> RefOutputs {
    let n_state: usize = p.state_shape().iter().product();
    let state = match x.state {
        Some(st) if p.state_in_place() => state_slice_f64(st, 0..n_state),
        _ => vec![0.0; n_state],
    };
    RefOutputs {
        output: vec![0.0; p.output_shape().iter().product()],
        state,
        intermediate: x
            .intermediate
            .map(|b| b.iter().map(|&e| e as f64).collect()),
        checkpoints: x.checkpoints.map(|c| state_slice_f64(c, 0..c.len())),
    }
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// The definitions' recurrence, token by token, for one (sequence, value head).
fn recurrent_head(c: &Ctx, s: &SeqPlan, h: usize) -> HeadResult {
    let d = c.d;
    let mut st = c.initial_state(s, h);
    let mut out = Vec::with_capacity(s.tokens.len() * d);
    let mut inter = Vec::new();
    let mut checkpoints = Vec::new();
    let every = c.p.serving.checkpoint_every;
    for (i, t) in s.tokens.clone().enumerate() {
        let (log_g, beta) = c.gates(t, h);
        let g = log_g.exp();
        let (q, k, v) = (c.q(t, h), c.k(t, h), c.v(t, h));
        for (row, &v_row) in st.chunks_exact_mut(d).zip(&v) {
            row.iter_mut().for_each(|e| *e *= g);
            let delta = beta * (v_row - dot(row, &k));
            row.iter_mut().zip(&k).for_each(|(e, &kk)| *e += delta * kk);
            out.push(c.scale * dot(row, &q));
        }
        if s.needs_token_states() {
            inter.extend_from_slice(&st);
        }
        if s.is_checkpoint(every, i) {
            checkpoints.extend_from_slice(&st);
        }
    }
    HeadResult {
        out,
        state: st,
        inter,
        checkpoints,
    }
}

/// One chunk's token data, gathered in f64.
struct Chunk {
    q: Vec<Vec<f64>>,
    k: Vec<Vec<f64>>,
    v: Vec<Vec<f64>>,
    beta: Vec<f64>,
    /// Cumulative log decay within the chunk, `γ_i = Σ_{j≤i} log g_j` (non-positive, non-increasing).
    gamma: Vec<f64>,
}

fn gather_chunk(c: &Ctx, h: usize, tokens: Range<usize>) -> Chunk {
    let mut ch = Chunk {
        q: Vec::new(),
        k: Vec::new(),
        v: Vec::new(),
        beta: Vec::new(),
        gamma: Vec::new(),
    };
    let mut acc = 0.0;
    for t in tokens {
        let (log_g, beta) = c.gates(t, h);
        acc += log_g;
        ch.q.push(c.q(t, h));
        ch.k.push(c.k(t, h));
        ch.v.push(c.v(t, h));
        ch.beta.push(beta);
        ch.gamma.push(acc);
    }
    ch
}

/// Solves `(I + A) Y = X` row by row (forward substitution); `A` strictly lower triangular, rows of X.
#[allow(clippy::needless_range_loop)] // indices mirror the formulas
fn forward_substitute(a: &[Vec<f64>], mut x: Vec<Vec<f64>>) -> Vec<Vec<f64>> {
    for i in 0..x.len() {
        for j in 0..i {
            let aij = a[i][j];
            if aij != 0.0 {
                let (done, rest) = x.split_at_mut(i);
                rest[0]
                    .iter_mut()
                    .zip(&done[j])
                    .for_each(|(e, &y)| *e -= aij * y);
            }
        }
    }
    x
}

/// The chunked WY/UT form for one (sequence, value head), state kept `[V, K]`: per chunk, the UT transform
/// `T = (I + A)⁻¹` of the decayed `K Kᵀ` turns the chunk's tokens into corrected values against the state.
fn chunked_head(c: &Ctx, s: &SeqPlan, h: usize, chunk: usize) -> HeadResult {
    let d = c.d;
    let mut st = c.initial_state(s, h);
    let mut out = Vec::with_capacity(s.tokens.len() * d);
    let mut inter = Vec::new();
    let mut checkpoints = Vec::new();
    let every = c.p.serving.checkpoint_every;
    let mut start = s.tokens.start;
    while start < s.tokens.end {
        let end = (start + chunk).min(s.tokens.end);
        let ch = gather_chunk(c, h, start..end);
        let vn = corrected_values(&ch, &st, d);
        chunk_outputs(c, &ch, &st, &vn, &mut out);
        for i in 0..ch.k.len() {
            let pos = start - s.tokens.start + i;
            if s.needs_token_states() {
                inter.extend_from_slice(&state_at(&ch, &st, &vn, i, d));
            }
            if s.is_checkpoint(every, pos) {
                checkpoints.extend_from_slice(&state_at(&ch, &st, &vn, i, d));
            }
        }
        st = state_at(&ch, &st, &vn, ch.k.len() - 1, d);
        start = end;
    }
    HeadResult {
        out,
        state: st,
        inter,
        checkpoints,
    }
}

/// `Vn = U − W·S` with `W = T·diag(β e^γ)·K`, `U = T·diag(β)·V`, `T = (I + A)⁻¹`,
/// `A_ij = β_i (k_i·k_j) e^{γ_i−γ_j}` for j < i.
fn corrected_values(ch: &Chunk, st: &[f64], d: usize) -> Vec<Vec<f64>> {
    let n = ch.k.len();
    let a: Vec<Vec<f64>> = (0..n)
        .map(|i| {
            (0..i)
                .map(|j| ch.beta[i] * dot(&ch.k[i], &ch.k[j]) * (ch.gamma[i] - ch.gamma[j]).exp())
                .collect()
        })
        .collect();
    let scaled = |rows: &[Vec<f64>], f: &dyn Fn(usize) -> f64| -> Vec<Vec<f64>> {
        rows.iter()
            .enumerate()
            .map(|(i, r)| r.iter().map(|&e| f(i) * e).collect())
            .collect()
    };
    let w = forward_substitute(&a, scaled(&ch.k, &|i| ch.beta[i] * ch.gamma[i].exp()));
    let u = forward_substitute(&a, scaled(&ch.v, &|i| ch.beta[i]));
    u.into_iter()
        .zip(&w)
        .map(|(mut ui, wi)| {
            for (e, srow) in ui.iter_mut().zip(st.chunks_exact(d)) {
                *e -= dot(wi, srow);
            }
            ui
        })
        .collect()
}

/// `O_i = scale·(e^{γ_i} q_i·S + Σ_{j≤i} (q_i·k_j) e^{γ_i−γ_j} Vn_j)`, appended to `out`.
#[allow(clippy::needless_range_loop)] // indices mirror the formulas
fn chunk_outputs(c: &Ctx, ch: &Chunk, st: &[f64], vn: &[Vec<f64>], out: &mut Vec<f64>) {
    for i in 0..ch.q.len() {
        let decay = ch.gamma[i].exp();
        let mut o: Vec<f64> = st
            .chunks_exact(c.d)
            .map(|srow| decay * dot(&ch.q[i], srow))
            .collect();
        for j in 0..=i {
            let w = dot(&ch.q[i], &ch.k[j]) * (ch.gamma[i] - ch.gamma[j]).exp();
            o.iter_mut().zip(&vn[j]).for_each(|(e, &x)| *e += w * x);
        }
        out.extend(o.iter().map(|e| c.scale * e));
    }
}

/// The `[V, K]` state after chunk token `i`: `e^{γ_i} S + Σ_{j≤i} e^{γ_i−γ_j} Vn_j ⊗ k_j`.
#[allow(clippy::needless_range_loop)] // indices mirror the formulas
fn state_at(ch: &Chunk, st: &[f64], vn: &[Vec<f64>], i: usize, d: usize) -> Vec<f64> {
    let decay = ch.gamma[i].exp();
    let mut next: Vec<f64> = st.iter().map(|&e| decay * e).collect();
    for j in 0..=i {
        let w = (ch.gamma[i] - ch.gamma[j]).exp();
        for (row, &vj) in next.chunks_exact_mut(d).zip(&vn[j]) {
            let coef = w * vj;
            row.iter_mut()
                .zip(&ch.k[j])
                .for_each(|(e, &kk)| *e += coef * kk);
        }
    }
    next
}
