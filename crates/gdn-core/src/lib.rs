//! gdn-core: the Gated Delta Net problem model (the flashinfer-bench GDN definitions), input validation,
//! safetensors I/O, a float64 reference (token-by-token and chunked WY forms), a fast multithreaded CPU
//! backend, random workload generation, flashinfer-trace datasets and the correctness comparison every backend
//! is checked with.

pub mod compare;
pub mod cpu;
pub mod dataset;
pub mod definition;
pub mod dtype;
pub mod error;
pub mod io;
pub mod outputs;
pub mod problem;
pub mod reference;
pub mod serving;
pub mod serving_draw;
pub mod tensor;
pub mod timing;
pub mod workload;

#[cfg(test)]
mod half_tests;

pub use definition::{Definition, Heads, Op};
pub use dtype::DType;
pub use error::{GdnError, Result};
pub use outputs::{ActBuf, Backend, Outputs, StateBuf};
pub use problem::{ActRef, BetaRef, Dims, Inputs, MtpMode, Problem, RunOptions, StateRef};
pub use serving::{GateMode, PadRule, Serving, StateLayout};
pub use tensor::{Data, Tensor, TensorMap};
pub use timing::{TierSamples, Timed, TimingConfig};
