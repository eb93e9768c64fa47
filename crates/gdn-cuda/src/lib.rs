//! gdn-cuda: the CUDA backend (OWNER: helper-cuda-runtime). Placeholder until the runtime lands.
use gdn_core::{Backend, GdnError, Result, Timed};

/// Opens the CUDA backend on device 0, or says precisely why it cannot.
pub fn open() -> Result<Box<dyn CudaLike>> {
    Err(GdnError::backend(
        "cuda",
        "no GPU backend is available in this build yet",
    ))
}

/// What the CLI needs from the CUDA backend: run + time.
pub trait CudaLike: Backend + Timed {}
