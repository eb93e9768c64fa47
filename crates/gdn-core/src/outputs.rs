//! Output buffers of a run and the backend interface every implementation (CPU, CUDA) provides.

use crate::definition::Op;
use crate::dtype::DType;
use crate::error::Result;
use crate::problem::{ActRef, Inputs, Problem, StateRef};
use crate::tensor::{Data, Tensor, TensorMap};
use half::{bf16, f16};

/// Typed state output storage.
#[derive(Clone, Debug, PartialEq)]
pub enum StateBuf {
    F32(Vec<f32>),
    BF16(Vec<bf16>),
    F16(Vec<f16>),
}

impl StateBuf {
    /// `n` elements of `dtype` (F32, BF16 or F16), all `value`.
    pub fn filled(dtype: DType, n: usize, value: f32) -> StateBuf {
        match dtype {
            DType::BF16 => StateBuf::BF16(vec![bf16::from_f32(value); n]),
            DType::F16 => StateBuf::F16(vec![f16::from_f32(value); n]),
            _ => StateBuf::F32(vec![value; n]),
        }
    }
    /// A copy of a state-like input.
    pub fn copy_of(s: StateRef) -> StateBuf {
        match s {
            StateRef::F32(v) => StateBuf::F32(v.to_vec()),
            StateRef::BF16(v) => StateBuf::BF16(v.to_vec()),
            StateRef::F16(v) => StateBuf::F16(v.to_vec()),
        }
    }
    pub fn len(&self) -> usize {
        match self {
            StateBuf::F32(v) => v.len(),
            StateBuf::BF16(v) => v.len(),
            StateBuf::F16(v) => v.len(),
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    pub fn dtype(&self) -> DType {
        match self {
            StateBuf::F32(_) => DType::F32,
            StateBuf::BF16(_) => DType::BF16,
            StateBuf::F16(_) => DType::F16,
        }
    }
    pub fn to_f64(&self) -> Vec<f64> {
        match self {
            StateBuf::F32(v) => v.iter().map(|&x| x as f64).collect(),
            StateBuf::BF16(v) => v.iter().map(|x| x.to_f64()).collect(),
            StateBuf::F16(v) => v.iter().map(|x| x.to_f64()).collect(),
        }
    }
    /// The buffer as a tensor of `shape`.
    pub fn into_tensor(self, shape: Vec<usize>) -> Tensor {
        let data = match self {
            StateBuf::F32(v) => Data::F32(v),
            StateBuf::BF16(v) => Data::BF16(v),
            StateBuf::F16(v) => Data::F16(v),
        };
        Tensor::new(shape, data)
    }
}

/// Typed 16-bit activation output storage (`output`): bf16 per the definitions, or fp16 (the dtype of q).
#[derive(Clone, Debug, PartialEq)]
pub enum ActBuf {
    BF16(Vec<bf16>),
    F16(Vec<f16>),
}

impl ActBuf {
    /// `n` elements of `dtype` (BF16 or F16), all `value`.
    pub fn filled(dtype: DType, n: usize, value: f32) -> ActBuf {
        match dtype {
            DType::F16 => ActBuf::F16(vec![f16::from_f32(value); n]),
            _ => ActBuf::BF16(vec![bf16::from_f32(value); n]),
        }
    }
    pub fn len(&self) -> usize {
        match self {
            ActBuf::BF16(v) => v.len(),
            ActBuf::F16(v) => v.len(),
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    pub fn dtype(&self) -> DType {
        match self {
            ActBuf::BF16(_) => DType::BF16,
            ActBuf::F16(_) => DType::F16,
        }
    }
    /// Element `i` as f64.
    pub fn get(&self, i: usize) -> f64 {
        match self {
            ActBuf::BF16(v) => v[i].to_f64(),
            ActBuf::F16(v) => v[i].to_f64(),
        }
    }
    /// Sets element `i` to `x`, rounded to the buffer's dtype.
    pub fn set(&mut self, i: usize, x: f64) {
        match self {
            ActBuf::BF16(v) => v[i] = bf16::from_f64(x),
            ActBuf::F16(v) => v[i] = f16::from_f64(x),
        }
    }
    /// Raw bits of element `i`.
    pub fn bits(&self, i: usize) -> u16 {
        match self {
            ActBuf::BF16(v) => v[i].to_bits(),
            ActBuf::F16(v) => v[i].to_bits(),
        }
    }
    /// Elements `range` as f64.
    pub fn range_f64(&self, range: std::ops::Range<usize>) -> Vec<f64> {
        match self {
            ActBuf::BF16(v) => v[range].iter().map(|x| x.to_f64()).collect(),
            ActBuf::F16(v) => v[range].iter().map(|x| x.to_f64()).collect(),
        }
    }
    pub fn to_f64(&self) -> Vec<f64> {
        self.range_f64(0..self.len())
    }
    /// Elements `range`, same dtype.
    pub fn slice(&self, range: std::ops::Range<usize>) -> ActBuf {
        match self {
            ActBuf::BF16(v) => ActBuf::BF16(v[range].to_vec()),
            ActBuf::F16(v) => ActBuf::F16(v[range].to_vec()),
        }
    }
    /// A typed view of the elements.
    pub fn as_act(&self) -> ActRef<'_> {
        match self {
            ActBuf::BF16(v) => ActRef::BF16(v),
            ActBuf::F16(v) => ActRef::F16(v),
        }
    }
    /// The bf16 elements (None for an fp16 buffer).
    pub fn as_bf16(&self) -> Option<&[bf16]> {
        match self {
            ActBuf::BF16(v) => Some(v),
            ActBuf::F16(_) => None,
        }
    }
    /// The fp16 elements (None for a bf16 buffer).
    pub fn as_f16(&self) -> Option<&[f16]> {
        match self {
            ActBuf::F16(v) => Some(v),
            ActBuf::BF16(_) => None,
        }
    }
    /// A copy of a 16-bit tensor's data (None for other dtypes).
    pub fn from_data(d: &Data) -> Option<ActBuf> {
        match d {
            Data::BF16(v) => Some(ActBuf::BF16(v.clone())),
            Data::F16(v) => Some(ActBuf::F16(v.clone())),
            _ => None,
        }
    }
}

/// Everything a run writes. Backends must write every element of `output` and `state` (for MTP and pools,
/// rows no request writes are copies of the input pool); for MTP, the intermediate rows of every non-padding
/// request, and for checkpoints the rows the sequences own (other rows keep the caller's values).
#[derive(Clone, Debug, PartialEq)]
pub struct Outputs {
    /// `output`, token-major `[tokens, HV, D]` (decode/MTP `[B, T, HV, D]` is the same memory), in the
    /// activation dtype ([`Problem::act_dtype`]).
    pub output: ActBuf,
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
        let state = StateBuf::filled(p.state_out_dtype(), n_state, f32::NAN);
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
            let mut buf = StateBuf::copy_of(c);
            poison_checkpoint_rows(p, x, &mut buf);
            buf
        });
        Outputs {
            output: ActBuf::filled(p.act_dtype, n_out, f32::NAN),
            state,
            intermediate,
            checkpoints,
        }
    }

    /// The outputs as named tensors, with the definition's names, shapes and dtypes. For MTP the
    /// intermediate buffer is included under its input name (it is a destination the call writes).
    pub fn into_tensors(self, p: &Problem) -> TensorMap {
        let mut m = TensorMap::new();
        let output = match self.output {
            ActBuf::BF16(v) => Data::BF16(v),
            ActBuf::F16(v) => Data::F16(v),
        };
        m.insert("output".into(), Tensor::new(p.output_shape(), output));
        m.insert(
            p.def.state_output().into(),
            self.state.into_tensor(p.state_shape()),
        );
        if let (Op::Mtp, Some(buf)) = (p.def.op, self.intermediate) {
            m.insert(
                "intermediate_states_buffer".into(),
                Tensor::new(p.intermediate_shape(), Data::F32(buf)),
            );
        }
        if let Some(c) = self.checkpoints {
            m.insert(
                crate::serving::names::CHECKPOINTS.into(),
                c.into_tensor(p.checkpoint_shape()),
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
        let r = r.start * row..r.end * row;
        match buf {
            StateBuf::F32(v) => v[r].fill(f32::NAN),
            StateBuf::BF16(v) => v[r].fill(bf16::NAN),
            StateBuf::F16(v) => v[r].fill(f16::NAN),
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
