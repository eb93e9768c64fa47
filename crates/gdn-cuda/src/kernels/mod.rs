//! The kernels as data: the registry (one row per kernel variant and its module), the embedded sources,
//! the ptxas resource parser, the GPU-free compile report (`gdn kernels`) and the compile target of a device.

pub mod modules;
pub mod registry;
pub mod report;
pub mod resources;
pub mod sources;
pub mod target;
