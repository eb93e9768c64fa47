//! Element types that appear in GDN definitions, with the names flashinfer-bench uses.

use serde::{Deserialize, Serialize};
use std::fmt;

#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum DType {
    #[serde(rename = "bfloat16")]
    BF16,
    /// IEEE half precision: gdn's fp16 extension (activations and states, math in fp32).
    #[serde(rename = "float16")]
    F16,
    #[serde(rename = "float32")]
    F32,
    #[serde(rename = "int32")]
    I32,
    #[serde(rename = "int64")]
    I64,
}

impl DType {
    /// The flashinfer-bench name (`bfloat16`, `float16`, `float32`, `int32`, `int64`).
    pub fn name(self) -> &'static str {
        match self {
            DType::BF16 => "bfloat16",
            DType::F16 => "float16",
            DType::F32 => "float32",
            DType::I32 => "int32",
            DType::I64 => "int64",
        }
    }

    /// Parses a flashinfer-bench dtype name.
    pub fn from_name(s: &str) -> Option<DType> {
        Some(match s {
            "bfloat16" => DType::BF16,
            "float16" => DType::F16,
            "float32" => DType::F32,
            "int32" => DType::I32,
            "int64" => DType::I64,
            _ => return None,
        })
    }

    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            DType::BF16 | DType::F16 => 2,
            DType::F32 | DType::I32 => 4,
            DType::I64 => 8,
        }
    }
}

impl DType {
    /// A 16-bit float (bf16 or fp16): the activation dtypes, and the 16-bit state dtypes.
    pub fn is_half(self) -> bool {
        matches!(self, DType::BF16 | DType::F16)
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
