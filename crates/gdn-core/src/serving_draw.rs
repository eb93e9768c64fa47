//! Seeded serving tensors drawn on top of a definition-mode workload ([`crate::workload::generate`]): the
//! definition's tensors are drawn first and unchanged (so a definition workload is the same with or without
//! this module), then this module converts or adds what a [`ServingDraw`] asks for, from its own seeded stream.
//!
//! - precomputed gates: `g` (or `alpha = e^g`) and `beta = sigmoid(b)` computed in f32 from the drawn raw
//!   gates, which are removed; a 16-bit `beta` has the activations' dtype (that of `b`);
//! - a state pool of `pool_rows` rows with `state_indices` a seeded subset of the usable rows (slot 0
//!   excluded under the null-slot rule); the first `pad_front` and last `pad_back` sequences padded (-1, or
//!   alternately 0 and -1 under the null-slot rule). Rows a sequence reads are `0.1·randn`; the others (guard
//!   rows, which must come back unchanged) hold a cheap distinct pattern, so pools of thousands of rows draw fast;
//! - `has_initial_state` with about a third of the entries 0;
//! - spec-decode slots: `initial_state_indices [B, T]` of distinct rows, `num_accepted_tokens` in 1..=T, some
//!   unused draft slots padded;
//! - `cu_seqlens` as int32;
//! - checkpoints: `checkpoint_cu_starts` with one spare row after every sequence, and a `randn` buffer (so rows
//!   a run must not touch are detectable) in the state's dtype or f32.

use crate::definition::Op;
use crate::definition::{Definition, Heads};
use crate::dtype::DType;
use crate::serving::{names, GateMode, PadRule, Serving};
use crate::tensor::to_dtype;
use crate::tensor::{Data, Tensor, TensorMap};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_distr::StandardNormal;

/// The serving tensors to draw (all off by default).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ServingDraw {
    /// The run options (q/k norm, layout, padding rule, checkpoint interval) the workload is meant for.
    pub options: Serving,
    pub gates: GateMode,
    /// Precomputed `beta` in f32 (else 16-bit, in the activation dtype).
    pub beta_f32: bool,
    /// Decode / prefill: a pool of this many rows indexed by `state_indices` (0: no pool). Must exceed the
    /// number of sequences (plus one under the null-slot rule).
    pub pool_rows: usize,
    /// `state_indices` as int64 (else int32).
    pub index_i64: bool,
    /// Padded sequences at the front and the back of the batch (pool and spec-slot modes).
    pub pad_front: usize,
    pub pad_back: usize,
    pub has_initial_state: bool,
    /// MTP: spec-decode slots (`[B, T]` indices into a pool of `max(pool_size, B·T + 2)` rows).
    pub spec_slots: bool,
    pub cu_i32: bool,
    /// Prefill checkpoints: the buffer in f32 (else in the state's dtype).
    pub checkpoints_f32: bool,
}

impl ServingDraw {
    /// Whether anything is drawn beyond the definition.
    pub fn is_active(&self) -> bool {
        *self != ServingDraw::default()
    }
}

/// What a draw needs to know of its workload (the fields of `workload::WorkloadSpec` of the same names).
pub struct Target<'a> {
    pub op: Op,
    pub heads: Heads,
    pub seq_lens: &'a [usize],
    pub pool_size: usize,
    pub state_dtype: DType,
    pub serving: &'a ServingDraw,
}

impl Target<'_> {
    fn state_input(&self) -> &'static str {
        Definition::new(self.op, self.heads).state_input()
    }
}

/// Applies `spec.serving` to the definition tensors in `m` (no-op when inactive).
pub fn apply(spec: &Target, m: &mut TensorMap, seed: u64) {
    let sd = &spec.serving;
    if !sd.is_active() {
        return;
    }
    let mut rng = StdRng::seed_from_u64(seed ^ 0x5e71_11c6_0000_0001);
    let h = &spec.heads;
    let (d, hv) = (h.head_size, h.num_v_heads);
    let n = spec.seq_lens.len();
    let pad = sd.options.pad;
    if sd.gates != GateMode::Raw {
        precomputed_gates(m, sd, hv);
    }
    let state_name = spec.state_input();
    let state_dtype = m.get(state_name).map_or(spec.state_dtype, Tensor::dtype);
    if sd.pool_rows > 0 && spec.op != Op::Mtp {
        let first = usize::from(pad == PadRule::NullSlot);
        assert!(
            sd.pool_rows >= n + first,
            "ServingDraw: a pool of {} rows is too small for {n} sequences",
            sd.pool_rows
        );
        let mut rows: Vec<i64> = (first as i64..sd.pool_rows as i64).collect();
        rows.shuffle(&mut rng);
        rows.truncate(n);
        pad_ends(&mut rows, sd, pad);
        let owned: Vec<usize> = rows
            .iter()
            .filter(|&&r| r >= 0)
            .map(|&r| r as usize)
            .collect();
        m.insert(
            state_name.into(),
            pool_tensor(
                &mut rng,
                state_dtype,
                sd.pool_rows,
                hv * d * d,
                &owned,
                vec![hv, d, d],
            ),
        );
        let data = if sd.index_i64 {
            Data::I64(rows)
        } else {
            Data::I32(rows.iter().map(|&x| x as i32).collect())
        };
        m.insert(names::STATE_INDICES.into(), Tensor::new(vec![n], data));
    }
    if sd.has_initial_state {
        let flags: Vec<i32> = (0..n)
            .map(|_| i32::from(rng.random_range(0..3) != 0))
            .collect();
        m.insert(
            names::HAS_INITIAL_STATE.into(),
            Tensor::new(vec![n], Data::I32(flags)),
        );
    }
    if sd.spec_slots && spec.op == Op::Mtp {
        spec_slots(m, spec, &mut rng, state_dtype);
    }
    if sd.cu_i32 {
        if let Some(cu) = m.get("cu_seqlens").and_then(Tensor::as_i64) {
            let v: Vec<i32> = cu.iter().map(|&x| x as i32).collect();
            m.insert(
                "cu_seqlens".into(),
                Tensor::new(vec![v.len()], Data::I32(v)),
            );
        }
    }
    let every = sd.options.checkpoint_every;
    if every > 0 && spec.op == Op::Prefill {
        let mut starts = vec![0i64];
        for &l in spec.seq_lens {
            starts.push(starts.last().unwrap() + (l / every) as i64 + 1);
        }
        let rows = *starts.last().unwrap() as usize;
        m.insert(
            names::CHECKPOINT_STARTS.into(),
            Tensor::new(vec![n + 1], Data::I64(starts)),
        );
        let dtype = if sd.checkpoints_f32 {
            DType::F32
        } else {
            state_dtype
        };
        m.insert(
            names::CHECKPOINTS.into(),
            state_tensor(&mut rng, dtype, vec![rows, hv, d, d], 1.0),
        );
    }
}

/// `g` / `alpha` and `beta` from the drawn raw gates (f32 math, as the engines' gating kernels do).
fn precomputed_gates(m: &mut TensorMap, sd: &ServingDraw, hv: usize) {
    let a = m.remove("a").expect("drawn");
    let b = m.remove("b").expect("drawn");
    let a_log = m.remove("A_log").expect("drawn");
    let dt_bias = m.remove("dt_bias").expect("drawn");
    let (a_log, dt_bias) = (a_log.as_f32().unwrap(), dt_bias.as_f32().unwrap());
    let g: Vec<f32> = a
        .to_f64()
        .iter()
        .enumerate()
        .map(|(i, &x)| {
            let h = i % hv;
            let arg = x as f32 + dt_bias[h];
            let sp = if arg > 20.0 { arg } else { arg.exp().ln_1p() };
            let lg = -a_log[h].exp() * sp;
            if sd.gates == GateMode::Linear {
                lg.exp()
            } else {
                lg
            }
        })
        .collect();
    let beta: Vec<f32> = b
        .to_f64()
        .iter()
        .map(|&x| 1.0 / (1.0 + (-x as f32).exp()))
        .collect();
    let name = if sd.gates == GateMode::Linear {
        names::ALPHA
    } else {
        names::G
    };
    m.insert(name.into(), Tensor::new(a.shape.clone(), Data::F32(g)));
    let beta = if sd.beta_f32 {
        Data::F32(beta)
    } else {
        to_dtype(b.dtype(), beta)
    };
    m.insert(names::BETA.into(), Tensor::new(b.shape, beta));
}

/// The padding index of the `i`-th padded entry under `pad`.
fn pad_value(pad: PadRule, i: usize) -> i64 {
    match pad {
        PadRule::NullSlot if i.is_multiple_of(2) => 0,
        _ => -1,
    }
}

fn pad_ends(rows: &mut [i64], sd: &ServingDraw, pad: PadRule) {
    let n = rows.len();
    let front = sd.pad_front.min(n);
    let back = sd.pad_back.min(n - front);
    for (i, r) in rows[..front].iter_mut().enumerate() {
        *r = pad_value(pad, i);
    }
    for (i, r) in rows[n - back..].iter_mut().enumerate() {
        *r = pad_value(pad, i + 1);
    }
}

/// `[B, T]` distinct slots, accepted counts, and a pool large enough for them.
fn spec_slots(m: &mut TensorMap, spec: &Target, rng: &mut StdRng, dtype: DType) {
    let sd = &spec.serving;
    let pad = sd.options.pad;
    let h = &spec.heads;
    let (d, hv) = (h.head_size, h.num_v_heads);
    let b = spec.seq_lens.len();
    let t = spec.seq_lens.first().copied().unwrap_or(1);
    let pool = spec.pool_size.max(b * t + 2);
    m.remove("intermediate_states_buffer");
    let mut rows: Vec<i64> = (1..pool as i64).collect();
    rows.shuffle(rng);
    let owned: Vec<usize> = rows[rows.len().saturating_sub(b * t)..]
        .iter()
        .map(|&r| r as usize)
        .collect();
    m.insert(
        spec.state_input().into(),
        pool_tensor(rng, dtype, pool, hv * d * d, &owned, vec![hv, d, d]),
    );
    let mut idx = vec![0i32; b * t];
    let mut acc = vec![0i32; b];
    let padded = |r: usize| r < sd.pad_front || r + sd.pad_back >= b;
    for r in 0..b {
        let slots = &mut idx[r * t..(r + 1) * t];
        if padded(r) {
            slots.fill(pad_value(pad, r) as i32);
            acc[r] = rng.random_range(0..=t as i32); // ignored: the request is padding
            continue;
        }
        let a = rng.random_range(1..=t);
        acc[r] = a as i32;
        for (j, s) in slots.iter_mut().enumerate() {
            // an unused draft slot (after the accepted ones) is sometimes padding
            *s = if j >= a && rng.random_range(0..3) == 0 {
                pad_value(pad, j) as i32
            } else {
                rows.pop().expect("pool holds B*T rows") as i32
            };
        }
    }
    m.insert(
        "initial_state_indices".into(),
        Tensor::new(vec![b, t], Data::I32(idx)),
    );
    m.insert(
        names::NUM_ACCEPTED.into(),
        Tensor::new(vec![b], Data::I32(acc)),
    );
}

/// A pool of `rows` rows of `row` elements: `0.1·randn` in the rows listed in `drawn`, a cheap distinct
/// pattern elsewhere.
fn pool_tensor(
    rng: &mut StdRng,
    dtype: DType,
    rows: usize,
    row: usize,
    drawn: &[usize],
    inner: Vec<usize>,
) -> Tensor {
    let mut v: Vec<f32> = (0..rows * row)
        .map(|i| ((i as u64).wrapping_mul(2_654_435_761) % 2001) as f32 * 1e-4 - 0.1)
        .collect();
    for &r in drawn {
        for e in &mut v[r * row..(r + 1) * row] {
            *e = 0.1 * rng.sample::<f32, _>(StandardNormal);
        }
    }
    let mut shape = vec![rows];
    shape.extend(inner);
    Tensor::new(shape, to_dtype(dtype, v))
}

fn state_tensor(rng: &mut StdRng, dtype: DType, shape: Vec<usize>, sigma: f32) -> Tensor {
    let n = shape.iter().product();
    let v: Vec<f32> = (0..n)
        .map(|_| sigma * rng.sample::<f32, _>(StandardNormal))
        .collect();
    Tensor::new(shape, to_dtype(dtype, v))
}
