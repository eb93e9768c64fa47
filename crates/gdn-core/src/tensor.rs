//! A minimal owned host tensor (contiguous, row-major) and a name → tensor map, the unit of workload I/O.

use crate::dtype::DType;
use half::{bf16, f16};
use std::collections::BTreeMap;

/// Typed contiguous storage.
#[derive(Clone, Debug, PartialEq)]
pub enum Data {
    BF16(Vec<bf16>),
    F16(Vec<f16>),
    F32(Vec<f32>),
    I32(Vec<i32>),
    I64(Vec<i64>),
}

/// An owned, contiguous, row-major host tensor. A scalar has an empty shape and one element.
#[derive(Clone, Debug, PartialEq)]
pub struct Tensor {
    pub shape: Vec<usize>,
    pub data: Data,
}

/// Tensors by name, as in a flashinfer-bench safetensors workload.
pub type TensorMap = BTreeMap<String, Tensor>;

impl Data {
    pub fn len(&self) -> usize {
        match self {
            Data::BF16(v) => v.len(),
            Data::F16(v) => v.len(),
            Data::F32(v) => v.len(),
            Data::I32(v) => v.len(),
            Data::I64(v) => v.len(),
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    pub fn dtype(&self) -> DType {
        match self {
            Data::BF16(_) => DType::BF16,
            Data::F16(_) => DType::F16,
            Data::F32(_) => DType::F32,
            Data::I32(_) => DType::I32,
            Data::I64(_) => DType::I64,
        }
    }
}

impl Tensor {
    /// Builds a tensor; panics only on a programming error (shape/length mismatch in gdn's own code).
    pub fn new(shape: Vec<usize>, data: Data) -> Tensor {
        assert_eq!(
            shape.iter().product::<usize>(),
            data.len(),
            "Tensor::new: shape {shape:?} vs {} elements",
            data.len()
        );
        Tensor { shape, data }
    }
    pub fn zeros(dtype: DType, shape: Vec<usize>) -> Tensor {
        let n = shape.iter().product();
        let data = match dtype {
            DType::BF16 => Data::BF16(vec![bf16::ZERO; n]),
            DType::F16 => Data::F16(vec![f16::ZERO; n]),
            DType::F32 => Data::F32(vec![0.0; n]),
            DType::I32 => Data::I32(vec![0; n]),
            DType::I64 => Data::I64(vec![0; n]),
        };
        Tensor { shape, data }
    }
    pub fn scalar_f32(x: f32) -> Tensor {
        Tensor {
            shape: vec![],
            data: Data::F32(vec![x]),
        }
    }
    pub fn dtype(&self) -> DType {
        self.data.dtype()
    }
    pub fn numel(&self) -> usize {
        self.data.len()
    }
    pub fn as_bf16(&self) -> Option<&[bf16]> {
        match &self.data {
            Data::BF16(v) => Some(v),
            _ => None,
        }
    }
    pub fn as_f16(&self) -> Option<&[f16]> {
        match &self.data {
            Data::F16(v) => Some(v),
            _ => None,
        }
    }
    pub fn as_f32(&self) -> Option<&[f32]> {
        match &self.data {
            Data::F32(v) => Some(v),
            _ => None,
        }
    }
    pub fn as_i32(&self) -> Option<&[i32]> {
        match &self.data {
            Data::I32(v) => Some(v),
            _ => None,
        }
    }
    pub fn as_i64(&self) -> Option<&[i64]> {
        match &self.data {
            Data::I64(v) => Some(v),
            _ => None,
        }
    }
    /// Little-endian bytes of the elements (the safetensors layout).
    pub fn to_le_bytes(&self) -> Vec<u8> {
        match &self.data {
            Data::BF16(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            Data::F16(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            Data::F32(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            Data::I32(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            Data::I64(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        }
    }
    /// Elements as f64 (for comparisons and references).
    pub fn to_f64(&self) -> Vec<f64> {
        match &self.data {
            Data::BF16(v) => v.iter().map(|x| x.to_f64()).collect(),
            Data::F16(v) => v.iter().map(|x| x.to_f64()).collect(),
            Data::F32(v) => v.iter().map(|&x| x as f64).collect(),
            Data::I32(v) => v.iter().map(|&x| x as f64).collect(),
            Data::I64(v) => v.iter().map(|&x| x as f64).collect(),
        }
    }
}

/// `v` rounded to `dtype` (BF16, F16; anything else stays F32).
pub fn to_dtype(dtype: crate::dtype::DType, v: Vec<f32>) -> Data {
    use crate::dtype::DType;
    match dtype {
        DType::BF16 => Data::BF16(v.into_iter().map(half::bf16::from_f32).collect()),
        DType::F16 => Data::F16(v.into_iter().map(half::f16::from_f32).collect()),
        _ => Data::F32(v),
    }
}
