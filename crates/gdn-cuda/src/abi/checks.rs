//! The small argument checks both launch families share: required and optional device pointers with their
//! alignment, the resolved scale, 32-bit kernel fields, and the error that names the argument.

use gdn_core::{GdnError, Result};

/// Alignment every vector-loaded tensor must have (16-byte loads).
pub const VEC_ALIGN: u64 = 16;

pub(crate) fn bad(tensor: &str, problem: impl Into<String>) -> GdnError {
    GdnError::value(tensor, problem)
}

/// Required pointer, aligned.
pub(crate) fn need(name: &str, ptr: u64, align: u64) -> Result<()> {
    if ptr == 0 {
        return Err(bad(name, "device pointer is NULL"));
    }
    opt(name, ptr, align)
}

/// Optional pointer (0 = absent), aligned when present (`align` is a power of two).
pub(crate) fn opt(name: &str, ptr: u64, align: u64) -> Result<()> {
    if ptr & (align - 1) != 0 {
        return Err(bad(
            name,
            format!("device pointer {ptr:#x} is not {align}-byte aligned"),
        ));
    }
    Ok(())
}

pub(crate) fn check_scale(scale: f32) -> Result<()> {
    if !scale.is_finite() || scale == 0.0 {
        return Err(bad(
            "scale",
            format!("must be resolved (finite, non-zero), got {scale}"),
        ));
    }
    Ok(())
}

pub(crate) fn to_i32(name: &str, x: usize) -> Result<i32> {
    i32::try_from(x).map_err(|_| bad(name, format!("{x} does not fit the kernel's 32-bit field")))
}
