//! The shared pieces of a CPU run: the read-only context every task sees, the output buffers tasks write
//! disjoint parts of, the unit of parallel work and the per-thread scratch.

use super::kernel::{narrow, narrow_f16, widen_f16, RowOps};
use crate::outputs::{ActBuf, StateBuf};
use crate::problem::{ActRef, Inputs};
use crate::reference::SeqPlan;
use crate::serving::StateLayout;
use half::{bf16, f16};
use std::marker::PhantomData;

/// One unit of parallel work: V rows `v0..v1` of value head `head` of sequence `seq`.
#[derive(Clone, Debug)]
pub(super) struct Task {
    pub(super) seq: usize,
    pub(super) head: usize,
    pub(super) v0: usize,
    pub(super) v1: usize,
}

/// A mutable buffer shared by tasks that write disjoint ranges of it.
pub(super) struct Shared<'a, T> {
    ptr: *mut T,
    len: usize,
    _borrow: PhantomData<&'a mut [T]>,
}

// SAFETY: tasks only touch disjoint ranges (see `Shared::slice`); T is plain data.
unsafe impl<T: Send> Send for Shared<'_, T> {}
unsafe impl<T: Send> Sync for Shared<'_, T> {}

impl<'a, T> Shared<'a, T> {
    pub(super) fn new(v: &'a mut [T]) -> Self {
        Shared {
            ptr: v.as_mut_ptr(),
            len: v.len(),
            _borrow: PhantomData,
        }
    }

    /// `len` elements from `start`.
    ///
    /// # Safety
    /// No two slices alive at the same time may overlap. Tasks guarantee this by construction: each
    /// (sequence, head, V-row block) owns its output rows and, in every state tensor it writes, V rows
    /// `v0..v1` of head `head` (one range k-last, `D` ranges K-first) of its destination rows: its state
    /// row, intermediate rows, spec-decode slots and checkpoint rows. Validation guarantees that no two
    /// sequences share a destination row (pool rows and slots unique, checkpoint row ranges disjoint).
    #[allow(clippy::mut_from_ref)]
    pub(super) unsafe fn slice(&self, start: usize, len: usize) -> &mut [T] {
        assert!(start + len <= self.len, "task range out of bounds");
        std::slice::from_raw_parts_mut(self.ptr.add(start), len)
    }
}

/// A state-like output buffer (state output or pool, intermediate buffer, checkpoints) in its dtype.
pub(super) enum SharedState<'a> {
    F32(Shared<'a, f32>),
    BF16(Shared<'a, bf16>),
    F16(Shared<'a, f16>),
}

impl<'a> SharedState<'a> {
    pub(super) fn new(buf: &'a mut StateBuf) -> Self {
        match buf {
            StateBuf::F32(v) => SharedState::F32(Shared::new(v)),
            StateBuf::BF16(v) => SharedState::BF16(Shared::new(v)),
            StateBuf::F16(v) => SharedState::F16(Shared::new(v)),
        }
    }
}

/// The output buffer in the activation dtype.
pub(super) enum SharedAct<'a> {
    BF16(Shared<'a, bf16>),
    F16(Shared<'a, f16>),
}

impl<'a> SharedAct<'a> {
    pub(super) fn new(buf: &'a mut ActBuf) -> Self {
        match buf {
            ActBuf::BF16(v) => SharedAct::BF16(Shared::new(v)),
            ActBuf::F16(v) => SharedAct::F16(Shared::new(v)),
        }
    }

    /// Rounds `vals` into elements `at..at + vals.len()`.
    ///
    /// # Safety
    /// As [`Shared::slice`]: the task owns those elements.
    pub(super) unsafe fn store(&self, at: usize, vals: &[f32]) {
        match self {
            SharedAct::BF16(b) => narrow(vals, b.slice(at, vals.len())),
            SharedAct::F16(b) => narrow_f16(vals, b.slice(at, vals.len())),
        }
    }
}

/// Widens elements `at..at + dst.len()` of a 16-bit activation tensor into `dst`.
#[inline(always)]
pub(super) fn widen_act<K: RowOps>(ops: K, x: ActRef, at: usize, dst: &mut [f32]) {
    let r = at..at + dst.len();
    match x {
        ActRef::BF16(v) => ops.widen(&v[r], dst),
        ActRef::F16(v) => widen_f16(&v[r], dst),
    }
}

/// Read-only context of one run, shared by all tasks.
pub(super) struct Ctx<'a> {
    pub(super) x: &'a Inputs<'a>,
    /// q and k as the recurrence uses them: the inputs, or their normalised copies (in-kernel q/k norm).
    pub(super) q: ActRef<'a>,
    pub(super) k: ActRef<'a>,
    pub(super) plan: &'a [SeqPlan],
    pub(super) g: &'a [f32],
    pub(super) beta: &'a [f32],
    pub(super) d: usize,
    pub(super) hq: usize,
    pub(super) hv: usize,
    pub(super) ratio: usize,
    /// MTP tokens per request (intermediate buffer indexing).
    pub(super) t_len: usize,
    pub(super) scale: f32,
    /// Storage order of every state tensor.
    pub(super) layout: StateLayout,
    /// Prefill checkpoint interval in tokens (0: none).
    pub(super) every: usize,
    /// Use the AVX2/FMA row operations (detected on this CPU).
    pub(super) simd: bool,
    pub(super) out: SharedAct<'a>,
    pub(super) state: SharedState<'a>,
    /// MTP intermediate buffer (always f32).
    pub(super) inter: Option<SharedState<'a>>,
    pub(super) checkpoints: Option<SharedState<'a>>,
}

impl Ctx<'_> {
    /// Widens q and k of token `t` for value head `h` into `q`, `k`.
    #[inline(always)]
    pub(super) fn load_qk<K: RowOps>(
        &self,
        ops: K,
        t: usize,
        h: usize,
        k: &mut [f32],
        q: &mut [f32],
    ) {
        let off = (t * self.hq + h / self.ratio) * self.d;
        widen_act(ops, self.k, off, k);
        widen_act(ops, self.q, off, q);
    }

    /// Widens v rows `v0..v0 + dst.len()` of (token, value head) `gi = t·HV + h` into `dst`.
    #[inline(always)]
    pub(super) fn load_v<K: RowOps>(&self, ops: K, gi: usize, v0: usize, dst: &mut [f32]) {
        widen_act(ops, self.x.v, gi * self.d + v0, dst);
    }

    /// Offset of the first element of head `h` of row `row` in a `[rows, HV, D, D]` state tensor.
    #[inline]
    pub(super) fn head_at(&self, row: usize, h: usize) -> usize {
        (row * self.hv + h) * self.d * self.d
    }

    /// Offset of V row `v0` of head `h` of state row `row` (k-last layout: the block is contiguous from here).
    #[inline]
    pub(super) fn block_at(&self, row: usize, h: usize, v0: usize) -> usize {
        self.head_at(row, h) + v0 * self.d
    }
}

/// Per-thread scratch, grown on demand and reused across tasks.
#[derive(Default)]
pub(super) struct Scratch {
    pub(super) k: Vec<f32>,
    pub(super) q: Vec<f32>,
    pub(super) k_next: Vec<f32>,
    pub(super) q_next: Vec<f32>,
    pub(super) u: Vec<f32>,
    pub(super) sq: Vec<f32>,
    pub(super) v: Vec<f32>,
    pub(super) delta: Vec<f32>,
    /// One token's output rows before rounding.
    pub(super) o: Vec<f32>,
    pub(super) work: Vec<f32>,
}

impl Scratch {
    pub(super) fn prepare(&mut self, d: usize, rows: usize) {
        for b in [&mut self.k, &mut self.q, &mut self.k_next, &mut self.q_next] {
            b.resize(d, 0.0);
        }
        for b in [
            &mut self.u,
            &mut self.sq,
            &mut self.v,
            &mut self.delta,
            &mut self.o,
        ] {
            b.resize(rows, 0.0);
        }
        self.work.resize(rows * d, 0.0);
    }
}
