//! Execution: the kernel set of a context, one launch and what a call launched, the prefill and recurrent
//! calls on the caller's stream, and the device copies of a problem's tensors (`io`, for the backend and
//! the timing tiers).
//!
//! The raw launch API (`KernelSet::launch_recurrent`, `launch_prefill*`) takes device pointers and sizes
//! (`abi::args`) and enqueues the call's kernel launches on the caller's stream: no allocation, no host
//! synchronisation, no copies. That is what a framework binding calls (it owns the tensors, the stream and,
//! for the chunk64 and cp plans, the workspace: `KernelSet::prefill_workspace_bytes` says how much). Every
//! argument is validated before the first launch; the kernel choice is the policy's.

pub mod io;
pub mod kernel_set;
pub mod launch;
pub mod prefill;
pub mod recurrent;

/// A CUDA backend failure.
pub(crate) fn backend_err(e: String) -> gdn_core::GdnError {
    gdn_core::GdnError::backend("cuda", e)
}
