//! Driver plumbing, below everything that knows about GDN's kernels or plans (it imports nothing else of the
//! crate): finding the CUDA libraries, NVRTC, the stored form of a compile (`entry`), the CUBINs shipped with a
//! package, the device context and stream, device memory, standalone kernels for measuring tools, CUPTI activity
//! records.

pub mod context;
pub mod cupti;
pub mod entry;
pub mod function;
pub mod loader;
pub mod memory;
pub mod nvrtc;
pub mod shipped;
