//! Output buffers of a run and the backend interface every implementation (CPU, CUDA) provides.

use crate::definition::Op;
use crate::dtype::DType;
use crate::error::Result;
use crate::problem::{Inputs, Problem, StateRef};
use crate::tensor::{Data, Tensor, TensorMap};
use half::bf16;

/// Typed state output storage.
#[derive(Clone, Debug, PartialEq)]
pub enum StateBuf {
    F32(Vec<f32>),
    BF16(Vec<bf16>),
}

impl StateBuf {
    pub fn len(&self) -> usize {
        match self {
            StateBuf::F32(v) => v.len(),
            StateBuf::BF16(v) => v.len(),
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    pub fn to_f64(&self) -> Vec<f64> {
        match self {
            StateBuf::F32(v) => v.iter().map(|&x| x as f64).collect(),
            StateBuf::BF16(v) => v.iter().map(|x| x.to_f64()).collect(),
        }
    }
}

/// Everything a run writes. Backends must write every element of `output` and `state` (for MTP and pools,
/// rows no request writes are copies of the input pool); for MTP, the intermediate rows of every non-padding
/// request, and for checkpoints the rows the sequences own (other rows keep the caller's values).
#[derive(Clone, Debug, PartialEq)]
pub struct Outputs {
    /// `output`, token-major `[tokens, HV, D]` (decode/MTP `[B, T, HV, D]` is the same memory).
    pub output: Vec<bf16>,
    /// `new_state` (decode, prefill) or `final_state` (MTP), `[rows, HV, D, D]`.
    pub state: StateBuf,
    /// MTP `intermediate_states_buffer` `[pool, T, HV, D, D]`, when given.
    pub intermediate: Option<Vec<f32>>,
    /// Prefill `checkpoints` `[C, HV, D, D]`, when given (rows no sequence writes keep the caller's values).
    pub checkpoints: Option<StateBuf>,
}

impl Outputs {
    /// Buffers filled with NaN, so that any element a backend fails to write is caught by the comparison.
    /// The intermediate buffer starts as the caller's buffer with the rows this run must write poisoned.
    pub fn poisoned(p: &Problem, x: &Inputs) -> Outputs {
        let n_out = p.output_shape().iter().product();
        let n_state = p.state_shape().iter().product();
        let state = match p.state_out_dtype() {
            DType::BF16 => StateBuf::BF16(vec![bf16::NAN; n_state]),
            _ => StateBuf::F32(vec![f32::NAN; n_state]),
        };
        let intermediate = x.intermediate.map(|buf| {
            let mut buf = buf.to_vec();
            let per_row = p.dims.seq_len * p.state_row_len();
            for &i in x.state_indices.unwrap_or(&[]) {
                if !p.serving.pad.is_pad(i as i64) {
                    let r = i as usize;
                    buf[r * per_row..(r + 1) * per_row].fill(f32::NAN);
                }
            }
            buf
        });
        let checkpoints = x.checkpoints.map(|c| {
            let mut buf = match c {
                StateRef::F32(v) => StateBuf::F32(v.to_vec()),
                StateRef::BF16(v) => StateBuf::BF16(v.to_vec()),
            };
            poison_checkpoint_rows(p, x, &mut buf);
            buf
        });
        Outputs {
            output: vec![bf16::NAN; n_out],
            state,
            intermediate,
            checkpoints,
        }
    }

    /// The outputs as named tensors, with the definition's names, shapes and dtypes. For MTP the
    /// intermediate buffer is included under its input name (it is a destination the call writes).
    pub fn into_tensors(self, p: &Problem) -> TensorMap {
        let mut m = TensorMap::new();
        m.insert(
            "output".into(),
            Tensor::new(p.output_shape(), Data::BF16(self.output)),
        );
        let data = match self.state {
            StateBuf::F32(v) => Data::F32(v),
            StateBuf::BF16(v) => Data::BF16(v),
        };
        m.insert(
            p.def.state_output().into(),
            Tensor::new(p.state_shape(), data),
        );
        if let (Op::Mtp, Some(buf)) = (p.def.op, self.intermediate) {
            m.insert(
                "intermediate_states_buffer".into(),
                Tensor::new(p.intermediate_shape(), Data::F32(buf)),
            );
        }
        if let Some(c) = self.checkpoints {
            let data = match c {
                StateBuf::F32(v) => Data::F32(v),
                StateBuf::BF16(v) => Data::BF16(v),
            };
            m.insert(
                crate::serving::names::CHECKPOINTS.into(),
                Tensor::new(p.checkpoint_shape(), data),
            );
        }
        m
    }
}

/// NaN in every checkpoint row a sequence of this call writes.
fn poison_checkpoint_rows(p: &Problem, x: &Inputs, buf: &mut StateBuf) {
    let (Some(starts), every) = (&x.checkpoint_starts, p.serving.checkpoint_every) else {
        return;
    };
    let row = p.state_row_len();
    let pad = p.serving.pad;
    for n in 0..p.dims.num_seqs {
        let padded = x.pool_indices.as_ref().is_some_and(|i| pad.is_pad(i[n]));
        let len = (x.cu_seqlens[n + 1] - x.cu_seqlens[n]) as usize;
        if padded || every == 0 {
            continue;
        }
        let r = starts[n] as usize..starts[n] as usize + len / every;
        match buf {
            StateBuf::F32(v) => v[r.start * row..r.end * row].fill(f32::NAN),
            StateBuf::BF16(v) => v[r.start * row..r.end * row].fill(bf16::NAN),
        }
    }
}

/// An implementation of the three GDN operations.
pub trait Backend: Send + Sync {
    /// Short name for tables (`cpu`, `cuda`, ...).
    fn name(&self) -> String;
    /// Runs a validated problem, writing into `out` (which has the problem's shapes).
    fn run(&self, p: &Problem, x: &Inputs, out: &mut Outputs) -> Result<()>;
}
