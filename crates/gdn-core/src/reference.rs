//! Float64 reference (OWNER: helper-core-numerics). Stub signatures; to be implemented.
use crate::problem::{Inputs, Problem};

/// Reference outputs in float64, same layouts as [`crate::Outputs`].
#[derive(Clone, Debug)]
pub struct RefOutputs {
    pub output: Vec<f64>,
    pub state: Vec<f64>,
    pub intermediate: Option<Vec<f64>>,
}

/// Token-by-token recurrence in float64, exactly the definitions' semantics.
pub fn run(_p: &Problem, _x: &Inputs) -> RefOutputs {
    todo!()
}
