//! Serving modes: the ways inference engines call GDN beyond the flashinfer-bench definitions.
//!
//! A definition-mode call (no serving tensor, [`Serving::default`]) keeps the definitions' exact semantics.
//! Serving calls add tensors to the same name → tensor map and options to [`crate::RunOptions::serving`]:
//!
//! | capability | tensors / options | semantics |
//! |---|---|---|
//! | precomputed gates | `g` f32 (log decay) or `alpha` f32 (linear decay = e^g), and `beta` f32 or 16-bit in the activation dtype | replace `a, b, A_log, dt_bias` (which must then be absent); same shape as `a` |
//! | in-kernel q/k norm | `qk_l2norm` | `q ← round(q / sqrt(Σq² + 1e-6))` per token and head (sums in fp32, rounded to q's dtype), same for `k`, before use |
//! | state layout | `layout` | every state tensor (pool, new state, intermediate, checkpoints) is `[.., HV, V, K]` (k-last) or `[.., HV, K, V]` (K-first) |
//! | state pool (decode, prefill) | `state_indices` i32 or i64 `[N]` | sequence n reads and writes pool row `idx[n]` of `state`, in place: the state output is the pool, rows not written keep their values |
//! | padding | `pad` | `idx < 0` is padding; with [`PadRule::NullSlot`] `idx == 0` too (vLLM's `NULL_BLOCK_ID`). A padded sequence reads and writes no state and its output rows are zero |
//! | fresh slots | `has_initial_state` i32 `[N]` (0/1) | 0: the sequence starts from zeros (its row is not read) and still writes its final state |
//! | spec-decode slots (MTP) | `initial_state_indices` i32 `[B, T]` + `num_accepted_tokens` i32 `[B]` | read row `idx[b, acc-1]`, write the state after token t to row `idx[b, t]` (skipped when that entry is padding) |
//! | prefix-cache checkpoints (prefill) | `checkpoint_every` n (a multiple of 64) + `checkpoint_cu_starts` i32/i64 `[N+1]` + buffer `checkpoints` `[C, HV, 128, 128]` (state dtype or f32) | the state after `(j+1)·n` tokens of sequence s goes to row `starts[s] + j`, `j < len_s / n`; other rows keep their values |
//! | offsets | `cu_seqlens` int32 or int64 | same values |
//! | fp16 activations | q, k, v, a, b fp16 (all the same: `Problem::act_dtype`) | the output and a 16-bit `beta` are fp16 too; math in fp32 |
//! | fp16 state | `state` (pool, MTP `initial_state`) fp16 | the state output and 16-bit checkpoints are fp16 (a bf16 and an fp16 state tensor never mix); math in fp32 |
//!
//! In pool mode a zero-length (non-padded) prefill sequence reads and writes nothing: its pool row keeps its
//! value (in definition mode its `new_state` row is zeros, as the definitions say).

use std::fmt;

/// Where the decay and update gates come from.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub enum GateMode {
    /// The definitions' raw inputs: `g = -exp(A_log)·softplus(a + dt_bias)`, `beta = sigmoid(b)`.
    #[default]
    Raw,
    /// Precomputed log-space decay `g` (fp32) and `beta` (post-sigmoid): vLLM, sglang, HF, FLA.
    Log,
    /// Precomputed linear decay `alpha = exp(g)` (fp32) and `beta`: FlashInfer.
    Linear,
}

/// Storage order of every state tensor's last two axes.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub enum StateLayout {
    /// `[.., V, K]`, K contiguous: the definitions, vLLM, sglang, FlashInfer.
    #[default]
    KLast,
    /// `[.., K, V]`, V contiguous: FLA and HF transformers.
    KFirst,
}

/// Which pool indices mark a padded request or sequence.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub enum PadRule {
    /// Negative indices (sglang, FlashInfer: -1).
    #[default]
    Negative,
    /// Negative indices and slot 0, the null slot (vLLM: `NULL_BLOCK_ID`, kernels skip `idx <= 0`).
    NullSlot,
}

impl PadRule {
    /// Whether `idx` marks padding under this rule.
    pub fn is_pad(self, idx: i64) -> bool {
        match self {
            PadRule::Negative => idx < 0,
            PadRule::NullSlot => idx <= 0,
        }
    }
}

/// The serving options that are not tensors. The tensors' presence selects the rest (pool mode, spec slots,
/// gate mode); [`crate::Problem`] records what was selected.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Serving {
    /// L2-normalise q and k inside the kernel (eps 1e-6, fp32 sums, rounded to q's dtype before use).
    pub qk_l2norm: bool,
    pub layout: StateLayout,
    pub pad: PadRule,
    /// Prefill: write a checkpoint every this many tokens (0 = none; else a positive multiple of 64).
    pub checkpoint_every: usize,
}

/// Granularity of prefix-cache checkpoints (the prefill chunk size).
pub const CHECKPOINT_GRANULE: usize = 64;

/// The epsilon of the in-kernel q/k L2 norm (FLA's and FlashInfer's).
pub const QK_NORM_EPS: f32 = 1e-6;

/// Names of the serving tensors (inputs beyond the definitions').
pub mod names {
    pub const G: &str = "g";
    pub const ALPHA: &str = "alpha";
    pub const BETA: &str = "beta";
    pub const STATE_INDICES: &str = "state_indices";
    pub const HAS_INITIAL_STATE: &str = "has_initial_state";
    pub const NUM_ACCEPTED: &str = "num_accepted_tokens";
    pub const CHECKPOINT_STARTS: &str = "checkpoint_cu_starts";
    /// The checkpoint output.
    pub const CHECKPOINTS: &str = "checkpoints";
}

impl fmt::Display for GateMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            GateMode::Raw => "raw",
            GateMode::Log => "log",
            GateMode::Linear => "linear",
        })
    }
}

impl fmt::Display for StateLayout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            StateLayout::KLast => "k-last",
            StateLayout::KFirst => "k-first",
        })
    }
}

impl fmt::Display for PadRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PadRule::Negative => "negative",
            PadRule::NullSlot => "null-slot",
        })
    }
}

impl StateLayout {
    /// Offset within one `[D, D]` head state of element (v, k).
    #[inline]
    pub fn offset(self, d: usize, v: usize, k: usize) -> usize {
        match self {
            StateLayout::KLast => v * d + k,
            StateLayout::KFirst => k * d + v,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pad_rules() {
        assert!(PadRule::Negative.is_pad(-1));
        assert!(!PadRule::Negative.is_pad(0));
        assert!(PadRule::NullSlot.is_pad(0));
        assert!(PadRule::NullSlot.is_pad(-7));
        assert!(!PadRule::NullSlot.is_pad(1));
    }

    #[test]
    fn layouts_transpose() {
        assert_eq!(StateLayout::KLast.offset(4, 1, 2), 6);
        assert_eq!(StateLayout::KFirst.offset(4, 1, 2), 9);
    }
}
