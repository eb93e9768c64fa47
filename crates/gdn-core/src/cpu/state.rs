//! State tensors of the CPU backend: loading a task's block of V rows from the state input, storing it into
//! any state tensor (state output or pool, MTP intermediate buffer, prefill checkpoints), and the rows no task
//! writes.
//!
//! A task works on `rows` V rows of one head state as an f32 block `[rows, K]`, K contiguous (the row
//! operations need K contiguous). In the k-last layout `[V, K]` that block is one contiguous range of the
//! stored head; in the K-first layout `[K, V]` it is `K` strided pieces of `rows` elements (columns
//! `v0..v1` of every K row), gathered on load and scattered on store. The layout and the destination dtype
//! are resolved once per block, outside the token loop.

use super::ctx::{Ctx, SharedState};
use super::kernel::{bf16_to_f32, f32_to_bf16, narrow, narrow_f16, widen, widen_f16, RowOps};
use crate::outputs::{ActBuf, StateBuf};
use crate::problem::{Inputs, Problem, StateRef};
use crate::reference::SeqPlan;
use crate::serving::StateLayout;
use half::{bf16, f16};
use rayon::prelude::*;

/// Fills the working block with the initial state (f32 copy, bf16 / fp16 widened, or zeros; either layout) and
/// returns the first token's dot products `u = S·k`, `sq = S·q` per row.
#[allow(clippy::too_many_arguments)]
pub(super) fn load_state<K: RowOps>(
    ops: K,
    c: &Ctx,
    s: &SeqPlan,
    h: usize,
    v0: usize,
    work: &mut [f32],
    k: &[f32],
    q: &[f32],
    u: &mut [f32],
    sq: &mut [f32],
) {
    let d = c.d;
    let (Some(r), Some(src)) = (s.read_row, c.x.state) else {
        work.fill(0.0);
        u.fill(0.0);
        sq.fill(0.0);
        return;
    };
    match (c.layout, src) {
        (StateLayout::KLast, StateRef::F32(src)) => {
            let src = &src[c.block_at(r, h, v0)..][..work.len()];
            for (i, (sr, wr)) in src
                .chunks_exact(d)
                .zip(work.chunks_exact_mut(d))
                .enumerate()
            {
                (u[i], sq[i]) = ops.load_dots_f32(sr, wr, k, q);
            }
        }
        (StateLayout::KLast, StateRef::BF16(src)) => {
            let src = &src[c.block_at(r, h, v0)..][..work.len()];
            for (i, (sr, wr)) in src
                .chunks_exact(d)
                .zip(work.chunks_exact_mut(d))
                .enumerate()
            {
                (u[i], sq[i]) = ops.load_dots_bf16(sr, wr, k, q);
            }
        }
        (StateLayout::KLast, StateRef::F16(src)) => {
            widen_f16(&src[c.block_at(r, h, v0)..][..work.len()], work);
            for (i, wr) in work.chunks_exact(d).enumerate() {
                (u[i], sq[i]) = ops.dots2(wr, k, q);
            }
        }
        (StateLayout::KFirst, src) => {
            let head = c.head_at(r, h);
            let rows = work.len() / d;
            match src {
                StateRef::F32(v) => gather(&v[head..head + d * d], work, d, v0, rows, |&e| e),
                StateRef::BF16(v) => gather(&v[head..head + d * d], work, d, v0, rows, |&e| {
                    bf16_to_f32(e)
                }),
                StateRef::F16(v) => {
                    gather(&v[head..head + d * d], work, d, v0, rows, |e| e.to_f32())
                }
            }
            for (i, wr) in work.chunks_exact(d).enumerate() {
                (u[i], sq[i]) = ops.dots2(wr, k, q);
            }
        }
    }
}

/// `work[r, k] = f(head[k, v0 + r])`: columns `v0..v0 + rows` of a `[K, V]` head as `[rows, K]`.
#[inline(always)]
fn gather<T>(
    head: &[T],
    work: &mut [f32],
    d: usize,
    v0: usize,
    rows: usize,
    f: impl Fn(&T) -> f32,
) {
    for (kk, krow) in head.chunks_exact(d).enumerate() {
        for (r, e) in krow[v0..v0 + rows].iter().enumerate() {
            work[r * d + kk] = f(e);
        }
    }
}

/// Stores the working block (V rows `v0..`, `[rows, K]` f32) into the head state starting at `head` of
/// `dst`, in the call's layout and `dst`'s dtype. k-last f32 uses streaming stores (call `ops.fence()`
/// before the task ends).
///
/// # Safety
/// The task must own V rows `v0..v0 + rows` of that head of `dst` (no other live slice overlaps them).
pub(super) unsafe fn store_block<K: RowOps>(
    ops: K,
    c: &Ctx,
    dst: &SharedState,
    head: usize,
    v0: usize,
    work: &[f32],
) {
    let d = c.d;
    let rows = work.len() / d;
    match (c.layout, dst) {
        (StateLayout::KLast, SharedState::F32(b)) => {
            ops.copy_stream(work, b.slice(head + v0 * d, rows * d))
        }
        (StateLayout::KLast, SharedState::BF16(b)) => {
            narrow(work, b.slice(head + v0 * d, rows * d))
        }
        (StateLayout::KLast, SharedState::F16(b)) => {
            narrow_f16(work, b.slice(head + v0 * d, rows * d))
        }
        (StateLayout::KFirst, SharedState::F32(b)) => {
            for kk in 0..d {
                let col = b.slice(head + kk * d + v0, rows);
                for (r, e) in col.iter_mut().enumerate() {
                    *e = work[r * d + kk];
                }
            }
        }
        (StateLayout::KFirst, SharedState::BF16(b)) => {
            for kk in 0..d {
                let col = b.slice(head + kk * d + v0, rows);
                for (r, e) in col.iter_mut().enumerate() {
                    *e = f32_to_bf16(work[r * d + kk]);
                }
            }
        }
        (StateLayout::KFirst, SharedState::F16(b)) => {
            for kk in 0..d {
                let col = b.slice(head + kk * d + v0, rows);
                for (r, e) in col.iter_mut().enumerate() {
                    *e = f16::from_f32(work[r * d + kk]);
                }
            }
        }
    }
}

/// Whether a sequence stores states in the middle of its token walk (MTP intermediate rows, spec-decode
/// slots, prefill checkpoints).
pub(super) fn stores_token_states(s: &SeqPlan) -> bool {
    s.inter_row.is_some() || !s.token_rows.is_empty() || s.checkpoint_row.is_some()
}

/// Stores the block after token `i` (0-based within the sequence) wherever the plan sends it: the MTP
/// intermediate buffer (row `inter_row`, token i), the spec-decode slot of token i in the state output, and
/// the checkpoint row when `i + 1` is a multiple of `checkpoint_every`.
pub(super) fn store_token_state<K: RowOps>(
    ops: K,
    c: &Ctx,
    s: &SeqPlan,
    h: usize,
    v0: usize,
    i: usize,
    work: &[f32],
) {
    // SAFETY (all three): each destination head state belongs to this (sequence, token), whose head-h rows
    // v0.. belong to this task: intermediate rows are per request, spec-decode slots and checkpoint rows are
    // distinct across the call (validated).
    if let (Some(ir), Some(inter)) = (s.inter_row, &c.inter) {
        let head = c.head_at(ir * c.t_len + i, h);
        unsafe { store_block(ops, c, inter, head, v0, work) };
    }
    if let Some(&Some(w)) = s.token_rows.get(i) {
        unsafe { store_block(ops, c, &c.state, c.head_at(w, h), v0, work) };
    }
    if let (Some(c0), Some(buf)) = (s.checkpoint_row, &c.checkpoints) {
        if (i + 1).is_multiple_of(c.every) {
            let row = c0 + (i + 1) / c.every - 1;
            unsafe { store_block(ops, c, buf, c.head_at(row, h), v0, work) };
        }
    }
}

/// State output rows that no sequence writes: zeros (decode, prefill), or the input's row where the state
/// is updated in place (MTP, pools).
pub(super) fn fill_untouched_state(
    p: &Problem,
    x: &Inputs,
    seqs: &[SeqPlan],
    state: &mut StateBuf,
) {
    let mut written = vec![false; p.dims.state_rows];
    for s in seqs {
        for &w in s.write_row.iter().chain(s.token_rows.iter().flatten()) {
            written[w] = true;
        }
    }
    let row = p.state_row_len();
    let pool = if p.state_in_place() { x.state } else { None };
    // the state output has the state input's dtype (validated), so a pool row is copied as it is
    match state {
        StateBuf::F32(buf) => fill_rows(buf, row, &written, |r, dst| match pool {
            Some(StateRef::F32(src)) => dst.copy_from_slice(&src[r]),
            Some(StateRef::BF16(src)) => widen(&src[r], dst),
            Some(StateRef::F16(src)) => widen_f16(&src[r], dst),
            None => dst.fill(0.0),
        }),
        StateBuf::BF16(buf) => fill_rows(buf, row, &written, |r, dst| match pool {
            Some(StateRef::BF16(src)) => dst.copy_from_slice(&src[r]),
            Some(StateRef::F32(src)) => narrow(&src[r], dst),
            _ => dst.fill(bf16::ZERO),
        }),
        StateBuf::F16(buf) => fill_rows(buf, row, &written, |r, dst| match pool {
            Some(StateRef::F16(src)) => dst.copy_from_slice(&src[r]),
            Some(StateRef::F32(src)) => narrow_f16(&src[r], dst),
            _ => dst.fill(f16::ZERO),
        }),
    }
}

/// Rows (of `row` elements) of `buf` not marked in `written`: `copy(element range, row)` fills each.
fn fill_rows<T: Send>(
    buf: &mut [T],
    row: usize,
    written: &[bool],
    copy: impl Fn(std::ops::Range<usize>, &mut [T]) + Sync,
) {
    buf.par_chunks_mut(row)
        .enumerate()
        .filter(|(r, _)| !written[*r])
        .for_each(|(r, dst)| copy(r * row..(r + 1) * row, dst));
}

/// Output rows of padded sequences are zero.
pub(super) fn zero_padding_outputs(p: &Problem, seqs: &[SeqPlan], output: &mut ActBuf) {
    let per_token = p.def.heads.num_v_heads * p.def.heads.head_size;
    for s in seqs.iter().filter(|s| s.padding) {
        let r = s.tokens.start * per_token..s.tokens.end * per_token;
        match output {
            ActBuf::BF16(v) => v[r].fill(bf16::ZERO),
            ActBuf::F16(v) => v[r].fill(f16::ZERO),
        }
    }
}

/// Whether the state output row a sequence writes is updated in place in f32 by its tasks (else the
/// block works in scratch and is stored at the end).
pub(super) fn works_in_output(c: &Ctx, s: &SeqPlan) -> bool {
    c.layout == StateLayout::KLast
        && matches!(c.state, SharedState::F32(_))
        && s.write_row.is_some()
}
