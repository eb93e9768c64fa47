//! Backend selection for every subcommand: `cpu`, `cuda`, or `auto` (cuda when `gdn_cuda::open()` succeeds,
//! else cpu). The chosen engine is one value that both runs ([`Backend`]) and times itself ([`Timed`]).

use clap::ValueEnum;
use gdn_core::cpu::CpuBackend;
use gdn_core::Op;
use gdn_core::{Backend, Inputs, Outputs, Problem, Result, TierSamples, Timed, TimingConfig};
use gdn_cuda::ForcedPlan;

/// What `--backend` asks for.
#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum Choice {
    Cpu,
    Cuda,
    Auto,
}

/// An opened backend.
pub enum Engine {
    Cpu(CpuBackend),
    Cuda(Box<dyn gdn_cuda::CudaLike>),
}

impl Engine {
    /// Opens the requested backend; `cuda` without a usable GPU is an error saying why.
    pub fn open(choice: Choice) -> Result<Engine> {
        match choice {
            Choice::Cpu => Ok(Engine::Cpu(CpuBackend)),
            Choice::Cuda => gdn_cuda::open().map(Engine::Cuda),
            Choice::Auto => Ok(gdn_cuda::open()
                .map(Engine::Cuda)
                .unwrap_or_else(|_| Engine::Cpu(CpuBackend))),
        }
    }

    pub fn is_cpu(&self) -> bool {
        matches!(self, Engine::Cpu(_))
    }

    /// What a call of `p` launches (CUDA: `recurrent`/`fused`/`chunk64` and the kernels), or None on the CPU.
    pub fn plan_label(&self, p: &Problem) -> Result<Option<String>> {
        match self {
            Engine::Cpu(_) => Ok(None),
            Engine::Cuda(b) => b.plan_label(p).map(Some),
        }
    }

    /// The prefill plans `check` runs each prefill case with: every plan the device's target has on CUDA (forced
    /// one after the other: the host plans, the device plan and its forced routes; on a GPU other than Hopper the
    /// fused ones), unless `GDN_KERNEL` decides; `[None]` (the backend's own choice) otherwise.
    pub fn prefill_plans(&self) -> Vec<Option<ForcedPlan>> {
        match self {
            Engine::Cuda(b) if b.kernel_override().is_none() => {
                let caps = b.caps();
                ForcedPlan::CHECKED
                    .iter()
                    .copied()
                    .filter(|p| p.available(&caps))
                    .map(Some)
                    .collect()
            }
            _ => vec![None],
        }
    }

    /// Runs `p`, with prefill plan `plan` forced when given (CUDA prefill only); returns the label of what
    /// ran on CUDA (None on the CPU).
    pub fn run_plan(
        &self,
        p: &Problem,
        x: &Inputs,
        out: &mut Outputs,
        plan: Option<ForcedPlan>,
    ) -> Result<Option<String>> {
        match (self, plan) {
            (Engine::Cuda(b), Some(kind)) if p.def.op == Op::Prefill => {
                b.run_prefill_plan(p, x, out, kind).map(Some)
            }
            _ => {
                let label = self.plan_label(p)?;
                self.run(p, x, out)?;
                Ok(label)
            }
        }
    }
}

impl Backend for Engine {
    fn name(&self) -> String {
        match self {
            Engine::Cpu(b) => b.name(),
            Engine::Cuda(b) => b.name(),
        }
    }
    fn run(&self, p: &Problem, x: &Inputs, out: &mut Outputs) -> Result<()> {
        match self {
            Engine::Cpu(b) => b.run(p, x, out),
            Engine::Cuda(b) => b.run(p, x, out),
        }
    }
}

impl Timed for Engine {
    fn time(&self, p: &Problem, inputs: &[Inputs], cfg: &TimingConfig) -> Result<Vec<TierSamples>> {
        match self {
            Engine::Cpu(b) => b.time(p, inputs, cfg),
            Engine::Cuda(b) => b.time(p, inputs, cfg),
        }
    }
    fn time_copy(&self, bytes: u64, cfg: &TimingConfig) -> Result<Vec<TierSamples>> {
        match self {
            Engine::Cpu(b) => b.time_copy(bytes, cfg),
            Engine::Cuda(b) => b.time_copy(bytes, cfg),
        }
    }
    fn device(&self) -> String {
        match self {
            Engine::Cpu(b) => b.device(),
            Engine::Cuda(b) => b.device(),
        }
    }
}
