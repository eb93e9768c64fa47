//! The kernels of one context: `KernelSet` compiles (NVRTC, disk cache) and loads each module on first use,
//! one per compilation unit, so a broken or missing source only disables its own kernels. Loading raises each
//! kernel's dynamic shared-memory limit and records its registers and local memory (a hot kernel with local
//! memory is reported by `spilling_hot_kernels`). The set also carries the call-wide switches read once from
//! the environment: `GDN_KERNEL` (the plan override, checked by the policy) and `GDN_PDL`.

use crate::exec::backend_err;
use crate::kernels::registry::{self, Module, Variant};
use crate::kernels::sources::SourceSet;
use crate::kernels::target::{self, Target, ARCH_ENV};
use crate::plan::prefill::{self, PrefillPlan};
use crate::plan::{select, DeviceCaps, Launch, Rejection, Shape};
use crate::runtime::context::{drv, DeviceInfo, Gpu};
use crate::runtime::nvrtc;
use cudarc::driver::{result, sys};
use gdn_core::Result;
use std::collections::HashMap;
use std::ffi::{c_void, CString};
use std::sync::OnceLock;

/// Dynamic shared memory above this needs the per-function opt-in attribute.
const DEFAULT_DYN_SMEM_LIMIT: u32 = 48 * 1024;
/// Environment override naming the variant to launch (experiments; checked by the policy).
pub const KERNEL_OVERRIDE_ENV: &str = "GDN_KERNEL";
/// `GDN_PDL=0` launches every kernel of a multi-launch prefill call stream-ordered, without programmatic dependent
/// launch (A/B runs and a way out; the kernels' griddepcontrol instructions are then no-ops).
pub const PDL_ENV: &str = "GDN_PDL";

/// A loaded kernel.
#[derive(Clone, Copy, Debug)]
pub struct LoadedKernel {
    pub func: sys::CUfunction,
    pub variant: &'static Variant,
    pub registers: i32,
    pub local_bytes: i32,
}

struct LoadedModule {
    // Kept for the life of the KernelSet (functions point into it).
    _module: sys::CUmodule,
    kernels: HashMap<&'static str, LoadedKernel>,
    compiled: nvrtc::Compiled,
}

/// The kernels of one context (the one current when `KernelSet::new` was called).
pub struct KernelSet {
    pub(super) caps: DeviceCaps,
    target: Target,
    /// `target` as NVRTC takes it (`sm_90a`, `compute_80`).
    arch: String,
    sources: SourceSet,
    /// `GDN_KERNEL`, read once.
    force: Option<String>,
    /// Whether a multi-launch call's launches after its first use programmatic dependent launch (`GDN_PDL`, read once).
    pub(super) pdl: bool,
    modules: Vec<(
        &'static Module,
        OnceLock<std::result::Result<LoadedModule, String>>,
    )>,
}

// SAFETY: module and function handles are context-wide and usable from any thread with the context current.
unsafe impl Send for KernelSet {}
unsafe impl Sync for KernelSet {}

/// `GDN_MAX_DYN_SMEM=<bytes>` plans as if a block could take at most that much dynamic shared memory (never more
/// than the device allows): with `GDN_ARCH=compute_80`, 166912 gives an H100/H200 an A100's fused tiles and 101376
/// those of an L40S or RTX GPU (the compact `_np2` tiles).
pub const MAX_DYN_SMEM_ENV: &str = "GDN_MAX_DYN_SMEM";

/// What the planner needs to know about a device whose kernels are compiled for `target` (`GDN_MAX_DYN_SMEM` read
/// here).
pub fn device_caps(info: &DeviceInfo, target: Target) -> std::result::Result<DeviceCaps, String> {
    let cap = match std::env::var(MAX_DYN_SMEM_ENV)
        .ok()
        .filter(|s| !s.is_empty())
    {
        None => info.max_dyn_smem,
        Some(v) => v
            .trim()
            .parse::<u32>()
            .map_err(|_| format!("{MAX_DYN_SMEM_ENV}={v}: expected a byte count"))?
            .min(info.max_dyn_smem),
    };
    Ok(DeviceCaps {
        cc: info.cc,
        arch: target.arch,
        sm_count: info.sm_count,
        max_dyn_smem: cap,
        mem_bytes: info.total_mem,
    })
}

impl KernelSet {
    /// A kernel set for the context current on this thread (nothing is compiled yet), compiling for `target`;
    /// `caps.arch` is `target.arch`.
    pub fn new(caps: DeviceCaps, target: Target) -> Result<KernelSet> {
        debug_assert_eq!(caps.arch, target.arch);
        let sources = SourceSet::load().map_err(backend_err)?;
        Ok(KernelSet {
            caps,
            target,
            arch: target.nvrtc_arch(),
            sources,
            force: std::env::var(KERNEL_OVERRIDE_ENV)
                .ok()
                .filter(|s| !s.is_empty()),
            // (no PDL below sm_90: the kernels compiled for such a target have no griddepcontrol to wait with)
            pdl: caps.has_pdl() && std::env::var(PDL_ENV).map_or(true, |v| v != "0"),
            // the modules the target builds; the device plan's builds only where the device plan runs (wgmma)
            modules: registry::modules_for(target.arch)
                .into_iter()
                .filter(|m| {
                    caps.builds(&registry::PREFILL64_DP)
                        || !m.defines.contains(&"GDN_DEVICE_PLAN=1")
                })
                .map(|m| (m, OnceLock::new()))
                .collect(),
        })
    }

    /// A kernel set for `gpu`'s context (current on this thread), compiled for the device's target
    /// (`kernels::target::target_for`, with `GDN_ARCH`); a GPU before Ampere is refused here. The target's notice,
    /// if any, goes to stderr once per process.
    pub fn for_gpu(gpu: &Gpu) -> Result<KernelSet> {
        let force = std::env::var(ARCH_ENV).ok().filter(|s| !s.is_empty());
        let choice = target::target_for(&gpu.info.name, gpu.info.cc, force.as_deref())
            .map_err(backend_err)?;
        if let Some(n) = &choice.notice {
            static NOTICE: std::sync::Once = std::sync::Once::new();
            NOTICE.call_once(|| eprintln!("{n}"));
        }
        let caps = device_caps(&gpu.info, choice.target).map_err(backend_err)?;
        KernelSet::new(caps, choice.target)
    }

    /// The target the kernels are compiled for.
    pub fn target(&self) -> Target {
        self.target
    }

    pub fn caps(&self) -> DeviceCaps {
        self.caps
    }

    /// The policy's choice for a decode / MTP shape (with the `GDN_KERNEL` override, if set).
    pub fn choose(&self, shape: &Shape) -> std::result::Result<Launch, Rejection> {
        select::choose(shape, &self.caps, self.force.as_deref())
    }

    /// The `GDN_KERNEL` override, if set.
    pub fn env_override(&self) -> Option<&str> {
        self.force.as_deref()
    }

    /// The prefill plan for a shape (with the `GDN_KERNEL` override, if set).
    pub fn prefill_plan(&self, shape: &Shape) -> std::result::Result<PrefillPlan, Rejection> {
        self.prefill_plan_with(shape, self.env_override())
    }

    /// The prefill plan for a shape with an explicit override (`None`: automatic, ignoring `GDN_KERNEL`).
    pub fn prefill_plan_with(
        &self,
        shape: &Shape,
        force: Option<&str>,
    ) -> std::result::Result<PrefillPlan, Rejection> {
        prefill::choose(shape, &self.caps, force)
    }

    /// Device workspace (bytes) a prefill call of `shape` needs: 0 for the fused plan and for empty calls.
    /// The caller allocates it (torch's allocator, the backend's cached buffer) and passes it in
    /// `PrefillArgs::workspace`.
    pub fn prefill_workspace_bytes(&self, shape: &Shape) -> Result<u64> {
        Ok(self.prefill_plan(shape)?.workspace_bytes())
    }

    fn module(&self, m: &'static Module) -> Result<&LoadedModule> {
        let Some((_, slot)) = self.modules.iter().find(|(x, _)| x.id == m.id) else {
            return Err(backend_err(format!(
                "{} ({}) is not compiled for {} (its module builds for {})",
                m.source, m.id, self.target, m.arches
            )));
        };
        slot.get_or_init(|| self.load_module(m))
            .as_ref()
            .map_err(|e| backend_err(e.clone()))
    }

    fn load_module(&self, m: &'static Module) -> std::result::Result<LoadedModule, String> {
        let source = self.sources.get(m.source).ok_or_else(|| {
            format!(
                "kernel source {} is not in this build ({})",
                m.source, self.sources.origin
            )
        })?;
        let headers = self.sources.headers();
        let text = registry::module_source(m, source);
        let compiled = nvrtc::compile(&nvrtc::Request {
            name: m.source,
            source: &text,
            headers: &headers,
            arch: &self.arch,
            defines: m.defines,
        })?;
        // SAFETY: a CUBIN image for this device's architecture, or PTX (NUL-terminated) the driver compiles for it; the
        // context is current.
        let module = unsafe { result::module::load_data(compiled.cubin.as_ptr() as *const c_void) }
            .map_err(|e| drv(&format!("cuModuleLoadData({})", m.source), e))?;
        let mut kernels = HashMap::new();
        for v in registry::module_variants(m) {
            let name = CString::new(v.name).expect("kernel names have no NUL");
            // SAFETY: a loaded module; a NUL-terminated name.
            let func = unsafe { result::module::get_function(module, name) }
                .map_err(|e| drv(&format!("{} not exported by {}", v.name, m.source), e))?;
            use sys::CUfunction_attribute::*;
            let get = |a| {
                // SAFETY: a valid function handle.
                unsafe { result::function::get_function_attribute(func, a) }
                    .map_err(|e| drv("cuFuncGetAttribute", e))
            };
            if v.dyn_smem > DEFAULT_DYN_SMEM_LIMIT {
                // SAFETY: a valid function handle; the policy checked the device's opt-in limit.
                unsafe {
                    result::function::set_function_attribute(
                        func,
                        CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                        v.dyn_smem as i32,
                    )
                }
                .map_err(|e| drv(&format!("{}: raising dynamic shared memory", v.name), e))?;
            }
            let max_threads = get(CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK)?;
            if v.block as i32 > max_threads {
                return Err(format!(
                    "{}: registry block {} exceeds the kernel's limit of {max_threads} threads \
                     (launch bounds or registers)",
                    v.name, v.block
                ));
            }
            kernels.insert(
                v.name,
                LoadedKernel {
                    func,
                    variant: v,
                    registers: get(CU_FUNC_ATTRIBUTE_NUM_REGS)?,
                    local_bytes: get(CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES)?,
                },
            );
        }
        Ok(LoadedModule {
            _module: module,
            kernels,
            compiled,
        })
    }

    /// A loaded kernel by variant (compiles / loads its module on first use).
    pub fn kernel(&self, v: &'static Variant) -> Result<LoadedKernel> {
        Ok(self.module(v.module)?.kernels[v.name])
    }

    /// A variant from build `b` of its module (`registry::build_module`; each build compiled on first use).
    pub fn kernel_in(&self, v: &'static Variant, b: registry::ModuleBuild) -> Result<LoadedKernel> {
        if b == registry::ModuleBuild::default() {
            return self.kernel(v);
        }
        let m = registry::build_module(v.module, b)
            .ok_or_else(|| backend_err(format!("{} has no build {b:?}", v.name)))?;
        Ok(self.module(m)?.kernels[v.name])
    }

    /// Loads every module now (so that no compile happens inside a timed or captured region); returns
    /// the modules that failed, with why.
    pub fn load_all(&self) -> Vec<String> {
        self.modules
            .iter()
            .filter_map(|(m, _)| self.module(m).err().map(|e| format!("{}: {e}", m.source)))
            .collect()
    }

    /// Whether each loaded module came from the disk cache (for reports).
    pub fn cache_report(&self) -> Vec<(&'static str, bool, f64)> {
        self.modules
            .iter()
            .filter_map(|(m, slot)| {
                slot.get()
                    .and_then(|r| r.as_ref().ok())
                    .map(|l| (m.source, l.compiled.from_cache, l.compiled.seconds))
            })
            .collect()
    }

    /// Hot kernels that use local memory (spills or stack) on the device, with the byte counts.
    pub fn spilling_hot_kernels(&self) -> Vec<(&'static str, i32)> {
        let mut out = Vec::new();
        for (_, slot) in &self.modules {
            if let Some(Ok(m)) = slot.get() {
                for k in m.kernels.values() {
                    if k.variant.hot && k.local_bytes > 0 {
                        out.push((k.variant.name, k.local_bytes));
                    }
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod portable_modules {
    use super::*;

    #[test]
    fn a_portable_target_holds_only_the_modules_it_builds() {
        let t = Target::parse("compute_80").unwrap();
        let ks = KernelSet::new(DeviceCaps::AMPERE_108, t).unwrap();
        assert!(!ks.modules.is_empty());
        assert!(ks.modules.iter().all(|(m, _)| m.builds_for(t.arch)));
        // no device-plan build: the device plan needs the wgmma modules
        let ids: Vec<&str> = ks.modules.iter().map(|(m, _)| m.id).collect();
        assert_eq!(ids, ["recurrent", "prefill", "recurrent_f16", "prefill_sv"]);
        let e = ks
            .kernel(registry::find("gdn_prefill64_walk_f32").unwrap())
            .expect_err("not built for compute_80");
        assert!(e.to_string().contains("compute_80"), "{e}");
    }
}
