//! The host side of the kernels' binary interface: `#[repr(C)]` mirrors of the params structs (`params`)
//! and the validated launch arguments they are built from (`args`).

pub mod args;
pub mod params;
