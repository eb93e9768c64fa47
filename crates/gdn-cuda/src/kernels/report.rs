//! GPU-free compile of every registry variant for an architecture (what `gdn kernels` prints): NVRTC
//! only, no driver, no device. Per kernel: ptxas registers, stack, spills, static shared memory, plus the
//! registry's block size and dynamic shared memory.

use crate::kernels::registry::{self, Module, Variant};
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
    /// The compile (cubin size, cache hit, time) or its error text.
    pub compiled: Result<nvrtc::Compiled, String>,
    pub kernels: Vec<KernelReport>,
}

/// Compiles every module of the registry for `arch` (e.g. `sm_90a`), through the disk cache (entries with
/// ptxas's report only: `nvrtc::compile_with_report`).
pub fn compile_all(arch: &str) -> Result<Vec<ModuleReport>, String> {
    let sources = SourceSet::load()?;
    let headers = sources.headers();
    let mut out = Vec::new();
    for m in registry::modules() {
        let compiled = match sources.get(m.source) {
            None => Err(format!(
                "kernel source {} is not in this build ({})",
                m.source, sources.origin
            )),
            Some(src) => nvrtc::compile_with_report(&nvrtc::Request {
                name: m.source,
                source: &registry::module_source(m, src),
                headers: &headers,
                arch,
                defines: m.defines,
            }),
        };
        let res = compiled
            .as_ref()
            .map(|c| parse_ptxas_log(&c.log))
            .unwrap_or_default();
        let kernels = registry::VARIANTS
            .iter()
            .filter(|v| registry::module_variants(m).any(|x| x.name == v.name))
            .map(|v| KernelReport {
                variant: v,
                resources: res.get(v.name).cloned(),
            })
            .collect();
        out.push(ModuleReport {
            module: m,
            compiled,
            kernels,
        });
    }
    Ok(out)
}
