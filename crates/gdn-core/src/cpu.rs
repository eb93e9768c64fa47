//! Fast CPU backend (OWNER: helper-core-numerics). Stub; to be implemented.
use crate::error::Result;
use crate::outputs::{Backend, Outputs};
use crate::problem::{Inputs, Problem};

pub struct CpuBackend;

impl Backend for CpuBackend {
    fn name(&self) -> String {
        "cpu".into()
    }
    fn run(&self, _p: &Problem, _x: &Inputs, _out: &mut Outputs) -> Result<()> {
        todo!()
    }
}
