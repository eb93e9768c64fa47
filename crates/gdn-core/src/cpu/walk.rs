//! The per-task token walk: one (sequence, value head, block of V rows) from its initial state through its
//! tokens, writing the outputs and the states the plan asks for.

use super::ctx::{Ctx, Scratch, SharedState, Task};
#[cfg(target_arch = "x86_64")]
use super::kernel::Avx2Fma;
use super::kernel::{Portable, RowOps};
use super::state::{
    load_state, store_block, store_token_state, stores_token_states, works_in_output,
};
use crate::problem::StateRef;

/// Runs one task with the AVX2/FMA row operations where the run asked for them and the CPU has them, else
/// with the baseline ones.
pub(super) fn run_task_dispatch(c: &Ctx, scr: &mut Scratch, t: &Task) {
    #[cfg(target_arch = "x86_64")]
    if let Some(ops) = c.simd.then(Avx2Fma::detect).flatten() {
        return run_task(ops, c, scr, t);
    }
    run_task(Portable, c, scr, t)
}

/// One task: the decode fast path (one token, f32 k-last state in and out, nothing stored mid-walk), or the
/// general sequence walk, instantiated with and without mid-walk stores.
fn run_task<K: RowOps>(ops: K, c: &Ctx, scr: &mut Scratch, task: &Task) {
    let s = &c.plan[task.seq];
    scr.prepare(c.d, task.v1 - task.v0);
    let f32_in = matches!(c.x.state, Some(StateRef::F32(_))) && s.read_row.is_some();
    let stores = stores_token_states(s);
    if s.tokens.len() == 1 && f32_in && works_in_output(c, s) && !stores {
        decode_block(ops, c, scr, task);
    } else if stores {
        sequence_block::<K, true>(ops, c, scr, task);
    } else {
        sequence_block::<K, false>(ops, c, scr, task);
    }
    ops.fence();
}

/// One token from an f32 state row to an f32 state row: per row, the dot products from the input, then
/// `g·S + δ·k` written straight to the destination (non-temporal: each byte crosses memory once).
fn decode_block<K: RowOps>(ops: K, c: &Ctx, scr: &mut Scratch, task: &Task) {
    let s = &c.plan[task.seq];
    let (d, h, v0, rows) = (c.d, task.head, task.v0, task.v1 - task.v0);
    let (Some(StateRef::F32(src)), Some(r), Some(w), SharedState::F32(dst)) =
        (c.x.state, s.read_row, s.write_row, &c.state)
    else {
        unreachable!("decode_block needs f32 state rows in and out")
    };
    let src = &src[c.block_at(r, h, v0)..][..rows * d];
    // SAFETY: this task alone owns rows v0..v1 of head h of destination row w.
    let dst = unsafe { dst.slice(c.block_at(w, h, v0), rows * d) };
    let t = s.tokens.start;
    let (k, q, vrow, out) = (&mut scr.k, &mut scr.q, &mut scr.v, &mut scr.o);
    c.load_qk(ops, t, h, k, q);
    let gi = t * c.hv + h;
    let (g, beta) = (c.g[gi], c.beta[gi]);
    let kq = ops.dot(k, q);
    c.load_v(ops, gi, v0, vrow);
    for (i, (srow, drow)) in src.chunks_exact(d).zip(dst.chunks_exact_mut(d)).enumerate() {
        let (u, sq) = ops.dots2(srow, k, q);
        let delta = beta * (vrow[i] - g * u);
        out[i] = c.scale * ops.fma(delta, kq, g * sq);
        ops.update_stream(srow, drow, g, delta, k);
    }
    // SAFETY: output rows v0..v1 of (token, head h) belong to this task.
    unsafe { c.out.store(gi * d + v0, out) };
}

/// Load the state block, walk the sequence's tokens (rows in pairs), store the block. `STORES`: the
/// sequence stores states mid-walk (intermediate rows, spec-decode slots, checkpoints) after each token.
fn sequence_block<K: RowOps, const STORES: bool>(ops: K, c: &Ctx, scr: &mut Scratch, task: &Task) {
    let s = &c.plan[task.seq];
    let (d, h, v0, rows) = (c.d, task.head, task.v0, task.v1 - task.v0);
    let in_output = works_in_output(c, s);
    let work: &mut [f32] = match (&c.state, s.write_row) {
        // SAFETY: this task alone owns rows v0..v1 of head h of destination row w.
        (SharedState::F32(buf), Some(w)) if in_output => unsafe {
            buf.slice(c.block_at(w, h, v0), rows * d)
        },
        _ => &mut scr.work[..rows * d],
    };
    let (k, q) = (&mut scr.k, &mut scr.q);
    let (k_next, q_next) = (&mut scr.k_next, &mut scr.q_next);
    let (u, sq, vrow, delta) = (&mut scr.u, &mut scr.sq, &mut scr.v, &mut scr.delta);
    let out = &mut scr.o;
    c.load_qk(ops, s.tokens.start, h, k, q);
    load_state(ops, c, s, h, v0, work, k, q, u, sq);
    let len = s.tokens.len();
    for i in 0..len {
        let gi = (s.tokens.start + i) * c.hv + h;
        let (g, beta) = (c.g[gi], c.beta[gi]);
        let kq = ops.dot(k, q);
        let has_next = i + 1 < len;
        if has_next {
            c.load_qk(ops, s.tokens.start + i + 1, h, k_next, q_next);
        }
        c.load_v(ops, gi, v0, vrow);
        for r in 0..rows {
            delta[r] = beta * (vrow[r] - g * u[r]);
            out[r] = c.scale * ops.fma(delta[r], kq, g * sq[r]);
        }
        // SAFETY: output rows v0..v1 of (token, head h) belong to this task.
        unsafe { c.out.store(gi * d + v0, out) };
        if has_next {
            ops.update_dots_block(work, g, delta, k, k_next, q_next, u, sq);
        } else {
            ops.update_block(work, g, delta, k);
        }
        if STORES {
            store_token_state(ops, c, s, h, v0, i, work);
        }
        std::mem::swap(k, k_next);
        std::mem::swap(q, q_next);
    }
    if let (Some(w), false) = (s.write_row, in_output) {
        // SAFETY: as for `work` above.
        unsafe { store_block(ops, c, &c.state, c.head_at(w, h), v0, work) };
    }
}
