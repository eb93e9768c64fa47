//! The problem model's types: a validated problem's sizes and flags, the caller's options, and typed views of
//! its input tensors.

use crate::definition::{Definition, Heads};
use crate::dtype::DType;
use crate::serving::{GateMode, Serving};
use half::{bf16, f16};
use std::borrow::Cow;

/// How MTP treats its state pool.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub enum MtpMode {
    /// The `gdn_mtp_*` definition: the pool is read, `final_state` is a copy of it (not updated), every
    /// index must be a valid pool row.
    #[default]
    Definition,
    /// Serving: each request's final state is written back to its pool row (in place), and index -1 marks a
    /// padding request (skipped: no state read or written, its output rows are zero).
    Serving,
}

/// Caller options that are not tensors.
#[derive(Copy, Clone, Debug, Default, PartialEq)]
pub struct RunOptions {
    /// Overrides the `scale` tensor when set (0 still means the default 1/sqrt(head_size)).
    pub scale: Option<f32>,
    pub mtp_mode: MtpMode,
    /// Serving options (q/k norm, state layout, padding rule, checkpoints); default: the definitions.
    pub serving: Serving,
}

/// Sizes bound from the inputs.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Dims {
    /// Requests (decode, MTP) or sequences (prefill).
    pub num_seqs: usize,
    /// Tokens per request for decode (1) and MTP (T); 0 for prefill (variable).
    pub seq_len: usize,
    /// Total tokens (rows of q/k/v).
    pub total_tokens: usize,
    /// Rows of the state tensor (`num_seqs`, or `pool_size` for MTP).
    pub state_rows: usize,
    /// Tokens of the longest sequence when known on the host: from host `cu_seqlens` values (prefill), or
    /// `seq_len` (decode, MTP). `None` when `cu_seqlens` lives on a device (bindings may set a caller's hint).
    /// Backends may use it to plan; it never changes results.
    pub max_seq_len: Option<usize>,
}

/// A validated problem (sizes and flags; no data).
#[derive(Clone, Debug, PartialEq)]
pub struct Problem {
    pub def: Definition,
    pub dims: Dims,
    /// dtype of the state input, or `None` when absent (zeros). BF16 and F16 are gdn's 16-bit-state
    /// extensions: the state is stored in that dtype (and so are the state output and the pool), the math
    /// stays fp32.
    pub state_dtype: Option<DType>,
    /// dtype of q, k, v, the output and the raw gates `a`, `b`: BF16 (the definitions) or F16.
    pub act_dtype: DType,
    /// MTP: an `intermediate_states_buffer` was given and is written.
    pub intermediate: bool,
    /// Resolved scale (never 0).
    pub scale: f32,
    /// MTP pool treatment (spec-decode slots imply [`MtpMode::Serving`]).
    pub mtp_mode: MtpMode,
    /// The caller's serving options.
    pub serving: Serving,
    /// Where the gates come from (selected by the tensors given: `g`, `alpha`, or `a, b, A_log, dt_bias`).
    pub gates: GateMode,
    /// dtype of `beta` (precomputed gates: F32 or the activation dtype; for raw gates the activation dtype,
    /// that of `b`).
    pub beta_dtype: DType,
    /// Decode / prefill read and write rows `state_indices[n]` of a state pool (`state` has `state_rows`
    /// rows), in place.
    pub pool: bool,
    /// dtype of the pool index tensor (`state_indices`, or MTP's `initial_state_indices`): I32 or I64.
    pub index_dtype: DType,
    /// `has_initial_state` was given.
    pub has_initial_state: bool,
    /// MTP spec-decode slots: `initial_state_indices` is `[B, T]`, with `num_accepted_tokens`.
    pub spec_slots: bool,
    /// dtype of prefill's `cu_seqlens` (I64 per the definitions, or I32).
    pub cu_dtype: DType,
    /// Rows of the `checkpoints` buffer (0: no checkpoints). It is destination-passing, like MTP's
    /// intermediate buffer: rows no sequence writes keep the caller's values.
    pub checkpoint_rows: usize,
    /// dtype of the `checkpoints` buffer (the state's, or F32).
    pub checkpoint_dtype: DType,
    /// Device placement of q, k, v and the output as strided views (None: dense tensors). A memory layout
    /// only: the host tensors, the math and the reference are the same; the CPU backend ignores it.
    pub act_views: Option<ActViews>,
}

/// One activation tensor's place in a device buffer: rows of `head_size` contiguous elements, row (token t,
/// head h) at element `offset + t·token + h·head`. Token t counts over the whole call (`b·T + t` for
/// decode and MTP).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct View {
    pub offset: usize,
    pub token: usize,
    pub head: usize,
}

impl View {
    /// Elements from the buffer's start to the end of the last row of `tokens` tokens of `heads` heads.
    pub fn span(&self, tokens: usize, heads: usize, head_size: usize) -> usize {
        if tokens == 0 || heads == 0 {
            return self.offset;
        }
        self.offset + (tokens - 1) * self.token + (heads - 1) * self.head + head_size
    }

    /// Element offset of row (token t, head h).
    #[inline]
    pub fn row(&self, t: usize, h: usize) -> usize {
        self.offset + t * self.token + h * self.head
    }
}

/// q, k and v as views into one shared device buffer, and the output as a view into a buffer of its own: the
/// layout of engines that split one fused input projection (vLLM's `mixed_qkv`, per token
/// `[q heads | k heads | v heads]`) and write into a padded output.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct ActViews {
    pub q: View,
    pub k: View,
    pub v: View,
    pub out: View,
}

impl ActViews {
    /// vLLM's fused projection: per token `[q heads | k heads | v heads]` (token stride `(2H + HV)·D`, head
    /// stride `D`), and the output `[tokens, HV, D]` with `out_pad` extra elements after each token's rows and
    /// `out_offset` elements before the first.
    pub fn fused_qkv(h: &Heads, out_offset: usize, out_pad: usize) -> ActViews {
        let d = h.head_size;
        let token = (2 * h.num_q_heads + h.num_v_heads) * d;
        let at = |offset| View {
            offset,
            token,
            head: d,
        };
        ActViews {
            q: at(0),
            k: at(h.num_q_heads * d),
            v: at(2 * h.num_q_heads * d),
            out: View {
                offset: out_offset,
                token: h.num_v_heads * d + out_pad,
                head: d,
            },
        }
    }

    /// (token, head) strides of q, k, v, output, in that order.
    pub fn strides(&self) -> [[usize; 2]; 4] {
        [self.q, self.k, self.v, self.out].map(|v| [v.token, v.head])
    }
}

/// Typed state storage (fp32 per the definitions, or bf16 / fp16).
#[derive(Copy, Clone, Debug)]
pub enum StateRef<'a> {
    F32(&'a [f32]),
    BF16(&'a [bf16]),
    F16(&'a [f16]),
}

impl StateRef<'_> {
    pub fn len(&self) -> usize {
        match self {
            StateRef::F32(v) => v.len(),
            StateRef::BF16(v) => v.len(),
            StateRef::F16(v) => v.len(),
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    pub fn dtype(&self) -> DType {
        match self {
            StateRef::F32(_) => DType::F32,
            StateRef::BF16(_) => DType::BF16,
            StateRef::F16(_) => DType::F16,
        }
    }
}

/// Typed 16-bit activation storage (q, k, v, raw a / b): bf16 per the definitions, or fp16.
#[derive(Copy, Clone, Debug)]
pub enum ActRef<'a> {
    BF16(&'a [bf16]),
    F16(&'a [f16]),
}

impl Default for ActRef<'_> {
    fn default() -> Self {
        ActRef::BF16(&[])
    }
}

impl<'a> ActRef<'a> {
    pub fn len(&self) -> usize {
        match self {
            ActRef::BF16(v) => v.len(),
            ActRef::F16(v) => v.len(),
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    pub fn dtype(&self) -> DType {
        match self {
            ActRef::BF16(_) => DType::BF16,
            ActRef::F16(_) => DType::F16,
        }
    }
    /// Element `i`, exactly, as f32.
    #[inline]
    pub fn get(&self, i: usize) -> f32 {
        match self {
            ActRef::BF16(v) => v[i].to_f32(),
            ActRef::F16(v) => v[i].to_f32(),
        }
    }
    /// Elements `range`, same dtype.
    pub fn slice(&self, range: std::ops::Range<usize>) -> ActRef<'a> {
        match *self {
            ActRef::BF16(v) => ActRef::BF16(&v[range]),
            ActRef::F16(v) => ActRef::F16(&v[range]),
        }
    }
}

/// Typed views of a validated problem's inputs.
#[derive(Clone, Debug, Default)]
pub struct Inputs<'a> {
    /// q, k, v and the raw gates `a`, `b`, in the activation dtype ([`Problem::act_dtype`]).
    pub q: ActRef<'a>,
    pub k: ActRef<'a>,
    pub v: ActRef<'a>,
    pub a: ActRef<'a>,
    pub b: ActRef<'a>,
    pub a_log: &'a [f32],
    pub dt_bias: &'a [f32],
    pub state: Option<StateRef<'a>>,
    /// Sequence boundaries in tokens, `num_seqs + 1` entries (synthesised for decode and MTP).
    pub cu_seqlens: Cow<'a, [i64]>,
    /// MTP pool rows, one per request.
    pub state_indices: Option<&'a [i32]>,
    /// MTP intermediate-state buffer as given (destination-passing: rows not written keep these values).
    pub intermediate: Option<&'a [f32]>,
    /// Precomputed gates: log decay `g` or linear decay `alpha` (by [`Problem::gates`]), token-major `[tokens, HV]`.
    pub gate: Option<&'a [f32]>,
    /// Precomputed update gate, `[tokens, HV]`.
    pub beta: Option<BetaRef<'a>>,
    /// Decode / prefill pool rows (`state_indices`), or MTP spec-decode slots `[B, T]` flattened; as i64.
    pub pool_indices: Option<Cow<'a, [i64]>>,
    /// `has_initial_state` per sequence.
    pub has_initial_state: Option<Vec<bool>>,
    /// MTP spec-decode slots: accepted tokens per request.
    pub num_accepted: Option<&'a [i32]>,
    /// Prefill checkpoints: first row of each sequence in `checkpoints`, `N + 1` entries.
    pub checkpoint_starts: Option<Cow<'a, [i64]>>,
    /// The `checkpoints` buffer as given (rows not written keep these values).
    pub checkpoints: Option<StateRef<'a>>,
}

/// Typed precomputed `beta` (f32, or 16-bit in the activation dtype).
#[derive(Copy, Clone, Debug)]
pub enum BetaRef<'a> {
    F32(&'a [f32]),
    BF16(&'a [bf16]),
    F16(&'a [f16]),
}

impl BetaRef<'_> {
    #[inline]
    pub fn get(&self, i: usize) -> f32 {
        match self {
            BetaRef::F32(v) => v[i],
            BetaRef::BF16(v) => v[i].to_f32(),
            BetaRef::F16(v) => v[i].to_f32(),
        }
    }
}
