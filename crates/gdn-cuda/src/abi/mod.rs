//! The host side of the kernels' binary interface: `#[repr(C)]` mirrors of the params structs (`params`)
//! and the validated launch arguments they are built from (`args`; the serving modes' in `serving_args`, the
//! shared checks in `checks`).

pub mod args;
mod checks;
pub mod params;
pub mod serving_args;
