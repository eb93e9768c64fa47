//! GPU-free compile of every registry variant for an architecture (what `gdn kernels` prints): NVRTC
//! only, no driver, no device; a module that does not declare the architecture is left out. Per kernel: ptxas registers, stack, spills, static shared memory, plus the
//! registry's block size and dynamic shared memory.

use crate::kernels::registry::{self, Arch, Module, Variant};
use crate::kernels::resources::{parse_ptxas_log, KernelResources};
use crate::kernels::sources::SourceSet;
use crate::runtime::nvrtc;

/// One kernel's line.
#[derive(Clone, Debug)]
pub struct KernelReport {
    pub variant: &'static Variant,
    /// `None` when ptxas did not mention the kernel (not exported by its source).
    pub resources: Option<KernelResources>,
}

/// One compilation unit's outcome.
#[derive(Clone, Debug)]
pub struct ModuleReport {
    pub module: &'static Module,
    /// The compile (cubin size, cache hit, time) or its error text; `None` when the module does not declare the
    /// architecture (`Module::arches`) and was not compiled.
    pub compiled: Option<Result<nvrtc::Compiled, String>>,
    pub kernels: Vec<KernelReport>,
}

impl ModuleReport {
    /// The compile's error text, if it was compiled and failed.
    pub fn error(&self) -> Option<&str> {
        match &self.compiled {
            Some(Err(e)) => Some(e),
            _ => None,
        }
    }
}

/// Compiles module `m` for `arch` whether or not it declares it, through the disk cache (entries with ptxas's
/// report only: `nvrtc::compile_with_report`).
pub fn compile_module(sources: &SourceSet, m: &'static Module, arch: Arch) -> ModuleReport {
    let arch = arch.to_string();
    let compiled = match sources.get(m.source) {
        None => Err(format!(
            "kernel source {} is not in this build ({})",
            m.source, sources.origin
        )),
        Some(src) => nvrtc::compile_with_report(&nvrtc::Request {
            name: m.source,
            source: &registry::module_source(m, src),
            headers: &sources.headers(),
            arch: &arch,
            defines: m.defines,
        }),
    };
    let res = compiled
        .as_ref()
        .map(|c| parse_ptxas_log(&c.log))
        .unwrap_or_default();
    ModuleReport {
        module: m,
        compiled: Some(compiled),
        kernels: kernels_of(m, |name| res.get(name).cloned()),
    }
}

fn kernels_of(
    m: &Module,
    resources: impl Fn(&str) -> Option<KernelResources>,
) -> Vec<KernelReport> {
    registry::VARIANTS
        .iter()
        .filter(|v| registry::module_variants(m).any(|x| x.name == v.name))
        .map(|v| KernelReport {
            variant: v,
            resources: resources(v.name),
        })
        .collect()
}

/// Compiles every module of the registry that declares `arch` (e.g. `sm_90a`); the others are in the result
/// uncompiled (`compiled: None`).
pub fn compile_all(arch: Arch) -> Result<Vec<ModuleReport>, String> {
    let sources = SourceSet::load()?;
    Ok(registry::modules()
        .into_iter()
        .map(|m| {
            if m.builds_for(arch) {
                compile_module(&sources, m, arch)
            } else {
                ModuleReport {
                    module: m,
                    compiled: None,
                    kernels: kernels_of(m, |_| None),
                }
            }
        })
        .collect())
}
