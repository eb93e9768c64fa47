//! The raw launch API: device pointers (u64) and sizes in, the call's kernel launches on the caller's stream
//! out (one for decode / MTP and the fused prefill plan; prep then walk for the chunk64 prefill plan).
//! No allocation, no host synchronisation, no copies: this is what a framework binding calls (it owns the
//! tensors, the stream and, for chunk64, the workspace: `KernelSet::prefill_workspace_bytes` says how much).
//! Every argument is validated before the first launch (required pointers present, alignment, head ratio,
//! sizes, workspace, grid limits via the policy), each launch's own error is checked, and the kernel choice
//! is `policy::choose` / `policy::choose_prefill` (with the `GDN_KERNEL=<name>` override read here).
//!
//! `KernelSet` holds the loaded modules of the current context. Modules are compiled (NVRTC, disk cache)
//! and loaded on first use, one per compilation unit, so a broken or missing source only disables its own
//! kernels. Loading raises each kernel's dynamic shared-memory limit and records its registers and local
//! memory (a hot kernel with local memory is reported by `spilling_hot_kernels`).

use crate::context::drv;
use crate::device_plan;
use crate::nvrtc;
use crate::params::{
    Prefill64Params, Prefill64PlanParams, PrefillParams, PrefillPlanParams, RecurrentParams,
    DP_LAUNCHES,
};
use crate::policy::{self, Choice, DeviceCaps, PlanKind, PrefillPlan, Rejection, Shape};
use crate::registry::{self, Module, StateDtype, Variant};
use crate::sources::SourceSet;
use cudarc::driver::{result, sys};
use gdn_core::{GdnError, Op, Result};
use std::collections::HashMap;
use std::ffi::{c_void, CString};
use std::sync::OnceLock;

/// Alignment every vector-loaded tensor must have (16-byte loads).
pub const VEC_ALIGN: u64 = 16;
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
    caps: DeviceCaps,
    arch: String,
    sources: SourceSet,
    /// `GDN_KERNEL`, read once.
    force: Option<String>,
    /// Whether a multi-launch call's launches after its first use programmatic dependent launch (`GDN_PDL`, read once).
    pdl: bool,
    modules: Vec<(
        &'static Module,
        OnceLock<std::result::Result<LoadedModule, String>>,
    )>,
}

// SAFETY: module and function handles are context-wide and usable from any thread with the context current.
unsafe impl Send for KernelSet {}
unsafe impl Sync for KernelSet {}

/// One kernel launch of a call.
#[derive(Clone, Debug, PartialEq)]
pub struct KernelLaunch {
    pub kernel: &'static str,
    pub grid: (u32, u32, u32),
    pub block: u32,
    pub dyn_smem: u32,
}

impl From<&Choice> for KernelLaunch {
    fn from(c: &Choice) -> Self {
        KernelLaunch {
            kernel: c.variant.name,
            grid: c.grid,
            block: c.block,
            dyn_smem: c.dyn_smem,
        }
    }
}

/// What a call launched (or, from `CudaBackend::plan`, would launch).
#[derive(Clone, Debug, PartialEq)]
pub struct LaunchInfo {
    pub plan: PlanKind,
    /// The plan's name in labels: its kind's, or a forced device-plan route's override (`device-cp`).
    pub plan_name: &'static str,
    /// The kernels in stream order (nothing is launched when the first grid is empty).
    pub launches: Vec<KernelLaunch>,
    /// Workspace the launches use (bytes; chunk64 only).
    pub workspace_bytes: u64,
}

impl LaunchInfo {
    fn recurrent(c: &Choice) -> LaunchInfo {
        LaunchInfo {
            plan: PlanKind::Recurrent,
            plan_name: PlanKind::Recurrent.name(),
            launches: vec![c.into()],
            workspace_bytes: 0,
        }
    }

    pub fn prefill(p: &PrefillPlan) -> LaunchInfo {
        LaunchInfo {
            plan: p.kind(),
            plan_name: match p {
                PrefillPlan::Device { route, .. } => route.override_name(),
                _ => p.kind().name(),
            },
            launches: p.launches().into_iter().map(KernelLaunch::from).collect(),
            workspace_bytes: p.workspace_bytes(),
        }
    }

    /// The last (main) kernel: the recurrent or fused kernel, or the chunk64 walk.
    pub fn kernel(&self) -> &'static str {
        self.launches.last().map_or("", |l| l.kernel)
    }

    /// `gdn_recurrent_...` for decode / MTP; `fused gdn_prefill_...` or
    /// `chunk64 gdn_prefill64_prep+gdn_prefill64_walk_...` for prefill.
    pub fn label(&self) -> String {
        let names: Vec<&str> = self.launches.iter().map(|l| l.kernel).collect();
        match self.plan {
            PlanKind::Recurrent => names.join("+"),
            _ => format!("{} {}", self.plan_name, names.join("+")),
        }
    }
}

fn bad(tensor: &str, problem: impl Into<String>) -> GdnError {
    GdnError::value(tensor, problem)
}

fn backend_err(e: String) -> GdnError {
    GdnError::backend("cuda", e)
}

/// Required pointer, aligned.
fn need(name: &str, ptr: u64, align: u64) -> Result<()> {
    if ptr == 0 {
        return Err(bad(name, "device pointer is NULL"));
    }
    opt(name, ptr, align)
}

/// Optional pointer (0 = absent), aligned when present (`align` is a power of two).
fn opt(name: &str, ptr: u64, align: u64) -> Result<()> {
    if ptr & (align - 1) != 0 {
        return Err(bad(
            name,
            format!("device pointer {ptr:#x} is not {align}-byte aligned"),
        ));
    }
    Ok(())
}

fn check_scale(scale: f32) -> Result<()> {
    if !scale.is_finite() || scale == 0.0 {
        return Err(bad(
            "scale",
            format!("must be resolved (finite, non-zero), got {scale}"),
        ));
    }
    Ok(())
}

fn to_i32(name: &str, x: usize) -> Result<i32> {
    i32::try_from(x).map_err(|_| bad(name, format!("{x} does not fit the kernel's 32-bit field")))
}

/// Decode (T = 1) and MTP (T >= 1) arguments: `RecurrentParams` plus what the policy needs.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RecurrentArgs {
    pub q: u64,
    pub k: u64,
    pub v: u64,
    pub a: u64,
    pub b: u64,
    pub a_log: u64,
    pub dt_bias: u64,
    /// 0 = zero initial state.
    pub state: u64,
    /// 0 = final state not written; may equal `state` (in place).
    pub new_state: u64,
    /// 0 = per-token states not written.
    pub intermediate: u64,
    pub out: u64,
    /// 0 = request b uses state row b.
    pub state_indices: u64,
    pub batch: usize,
    pub seq_len: usize,
    pub num_state_rows: usize,
    pub num_q_heads: usize,
    pub num_v_heads: usize,
    pub head_size: usize,
    /// Resolved (never 0).
    pub scale: f32,
    pub state_dtype: Option<StateDtype>,
}

/// Prefill arguments: `PrefillParams` plus what the policy needs.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PrefillArgs {
    pub q: u64,
    pub k: u64,
    pub v: u64,
    pub a: u64,
    pub b: u64,
    pub a_log: u64,
    pub dt_bias: u64,
    /// i64 [N+1] in device memory.
    pub cu_seqlens: u64,
    /// 0 = zero initial state.
    pub state: u64,
    pub new_state: u64,
    pub out: u64,
    /// Device scratch for the chunk64 plan (`KernelSet::prefill_workspace_bytes`; 256-byte aligned), or 0
    /// when the plan needs none. Not read by the fused plan.
    pub workspace: u64,
    /// Bytes at `workspace`.
    pub workspace_bytes: usize,
    pub num_seqs: usize,
    pub total_tokens: usize,
    /// Tokens of the longest sequence when the caller knows it on the host, 0 = unknown. Steers the plan
    /// choice only (`policy::Shape::max_seq_len`): a wrong value costs speed, never correctness.
    pub max_seq_len: usize,
    pub num_q_heads: usize,
    pub num_v_heads: usize,
    pub head_size: usize,
    pub scale: f32,
    pub state_dtype: Option<StateDtype>,
}

impl RecurrentArgs {
    pub fn shape(&self) -> Shape {
        Shape {
            // T = 1 runs the decode kernels (which also honour indices and intermediate states)
            op: if self.seq_len == 1 {
                Op::Decode
            } else {
                Op::Mtp
            },
            num_q_heads: self.num_q_heads,
            num_v_heads: self.num_v_heads,
            head_size: self.head_size,
            num_seqs: self.batch,
            seq_len: self.seq_len,
            total_tokens: self.batch * self.seq_len,
            max_seq_len: self.seq_len,
            state: self.state_dtype.unwrap_or(StateDtype::F32),
        }
    }

    fn validate(&self) -> Result<()> {
        for (n, p) in [
            ("q", self.q),
            ("k", self.k),
            ("v", self.v),
            ("output", self.out),
        ] {
            need(n, p, VEC_ALIGN)?;
        }
        need("a", self.a, 2)?;
        need("b", self.b, 2)?;
        need("A_log", self.a_log, 4)?;
        need("dt_bias", self.dt_bias, 4)?;
        opt("state", self.state, VEC_ALIGN)?;
        opt("new_state", self.new_state, VEC_ALIGN)?;
        opt("intermediate_states_buffer", self.intermediate, VEC_ALIGN)?;
        opt("initial_state_indices", self.state_indices, 4)?;
        check_scale(self.scale)?;
        if (self.state != 0 || self.new_state != 0) && self.state_dtype.is_none() {
            return Err(bad("state", "state pointers given without a state dtype"));
        }
        if self.state_indices == 0 && self.num_state_rows < self.batch {
            return Err(bad(
                "state",
                format!(
                    "{} rows for {} requests (without indices request b uses row b)",
                    self.num_state_rows, self.batch
                ),
            ));
        }
        to_i32("seq_len", self.seq_len)?;
        to_i32("num_q_heads", self.num_q_heads)?;
        to_i32("num_v_heads", self.num_v_heads)?;
        Ok(())
    }

    pub fn params(&self) -> RecurrentParams {
        RecurrentParams {
            q: self.q,
            k: self.k,
            v: self.v,
            a: self.a,
            b: self.b,
            a_log: self.a_log,
            dt_bias: self.dt_bias,
            state: self.state,
            new_state: self.new_state,
            intermediate: self.intermediate,
            out: self.out,
            state_indices: self.state_indices,
            batch: self.batch as i64,
            num_state_rows: self.num_state_rows as i64,
            scale: self.scale,
            seq_len: self.seq_len as i32,
            num_qk_heads: self.num_q_heads as i32,
            num_v_heads: self.num_v_heads as i32,
        }
    }
}

impl PrefillArgs {
    pub fn shape(&self) -> Shape {
        Shape {
            op: Op::Prefill,
            num_q_heads: self.num_q_heads,
            num_v_heads: self.num_v_heads,
            head_size: self.head_size,
            num_seqs: self.num_seqs,
            seq_len: 0,
            total_tokens: self.total_tokens,
            max_seq_len: self.max_seq_len,
            state: self.state_dtype.unwrap_or(StateDtype::F32),
        }
    }

    fn validate(&self) -> Result<()> {
        if self.total_tokens > 0 {
            for (n, p) in [
                ("q", self.q),
                ("k", self.k),
                ("v", self.v),
                ("output", self.out),
            ] {
                need(n, p, VEC_ALIGN)?;
            }
            need("a", self.a, 2)?;
            need("b", self.b, 2)?;
        }
        need("A_log", self.a_log, 4)?;
        need("dt_bias", self.dt_bias, 4)?;
        need("cu_seqlens", self.cu_seqlens, 8)?;
        need("new_state", self.new_state, VEC_ALIGN)?;
        opt("state", self.state, VEC_ALIGN)?;
        check_scale(self.scale)?;
        if self.state_dtype.is_none() {
            return Err(bad("new_state", "prefill writes new_state: give its dtype"));
        }
        to_i32("num_q_heads", self.num_q_heads)?;
        to_i32("num_v_heads", self.num_v_heads)?;
        Ok(())
    }

    pub fn params(&self) -> PrefillParams {
        PrefillParams {
            q: self.q,
            k: self.k,
            v: self.v,
            a: self.a,
            b: self.b,
            a_log: self.a_log,
            dt_bias: self.dt_bias,
            cu_seqlens: self.cu_seqlens,
            state: self.state,
            new_state: self.new_state,
            out: self.out,
            num_seqs: self.num_seqs as i64,
            scale: self.scale,
            num_q_heads: self.num_q_heads as i32,
            num_v_heads: self.num_v_heads as i32,
            lead_rows: self.total_tokens.min(crate::registry::prefill::CHUNK) as i32,
        }
    }

    pub fn params64(&self) -> Prefill64Params {
        Prefill64Params {
            q: self.q,
            k: self.k,
            v: self.v,
            a: self.a,
            b: self.b,
            a_log: self.a_log,
            dt_bias: self.dt_bias,
            cu_seqlens: self.cu_seqlens,
            state: self.state,
            new_state: self.new_state,
            out: self.out,
            workspace: self.workspace,
            num_seqs: self.num_seqs as i64,
            total_tokens: self.total_tokens as i64,
            scale: self.scale,
            num_q_heads: self.num_q_heads as i32,
            num_v_heads: self.num_v_heads as i32,
            seg_chunks: 0,
        }
    }

    /// The workspace a plan needs is present, aligned and large enough.
    fn validate_workspace(&self, plan: &PrefillPlan) -> Result<()> {
        let bytes = plan.workspace_bytes();
        if bytes == 0 {
            return Ok(());
        }
        need(
            "workspace",
            self.workspace,
            registry::prefill64::WORKSPACE_ALIGN,
        )?;
        if (self.workspace_bytes as u64) < bytes {
            return Err(bad(
                "workspace",
                format!(
                    "{} bytes given; the {} plan needs {bytes} bytes",
                    self.workspace_bytes,
                    plan.kind().name()
                ),
            ));
        }
        Ok(())
    }
}

impl KernelSet {
    /// A kernel set for the context current on this thread (nothing is compiled yet).
    pub fn new(caps: DeviceCaps, arch: &str) -> Result<KernelSet> {
        let sources = SourceSet::load().map_err(backend_err)?;
        Ok(KernelSet {
            caps,
            arch: arch.to_string(),
            sources,
            force: std::env::var(KERNEL_OVERRIDE_ENV)
                .ok()
                .filter(|s| !s.is_empty()),
            pdl: std::env::var(PDL_ENV).map_or(true, |v| v != "0"),
            modules: registry::modules()
                .into_iter()
                .map(|m| (m, OnceLock::new()))
                .collect(),
        })
    }

    pub fn caps(&self) -> DeviceCaps {
        self.caps
    }

    /// The policy's choice for a decode / MTP shape (with the `GDN_KERNEL` override, if set).
    pub fn choose(&self, shape: &Shape) -> std::result::Result<Choice, Rejection> {
        policy::choose(shape, &self.caps, self.force.as_deref())
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
        policy::choose_prefill(shape, &self.caps, force)
    }

    /// Device workspace (bytes) a prefill call of `shape` needs: 0 for the fused plan and for empty calls.
    /// The caller allocates it (torch's allocator, the backend's cached buffer) and passes it in
    /// `PrefillArgs::workspace`.
    pub fn prefill_workspace_bytes(&self, shape: &Shape) -> Result<u64> {
        Ok(self.prefill_plan(shape)?.workspace_bytes())
    }

    /// What a call of `shape` launches (with the `GDN_KERNEL` override, if set).
    pub fn describe(&self, shape: &Shape) -> std::result::Result<LaunchInfo, Rejection> {
        if shape.op == Op::Prefill {
            self.prefill_plan(shape).map(|p| LaunchInfo::prefill(&p))
        } else {
            self.choose(shape).map(|c| LaunchInfo::recurrent(&c))
        }
    }

    fn module(&self, m: &'static Module) -> Result<&LoadedModule> {
        let slot = &self
            .modules
            .iter()
            .find(|(x, _)| x.id == m.id)
            .expect("every registry module has a slot")
            .1;
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
        // SAFETY: a CUBIN image for this device's architecture; the context is current.
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

    /// The device plan's build of a variant (`registry::device_plan_module`; compiled on first use).
    pub fn device_plan_kernel(&self, v: &'static Variant) -> Result<LoadedKernel> {
        let m = registry::device_plan_module(v.module)
            .ok_or_else(|| backend_err(format!("{} has no device-plan build", v.name)))?;
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

    /// Launches decode / MTP on `stream`.
    ///
    /// # Safety
    /// Every non-zero pointer must address device memory of this context large enough for the sizes
    /// given (see `RecurrentParams`), and stay valid until the kernel has run.
    pub unsafe fn launch_recurrent(
        &self,
        args: &RecurrentArgs,
        stream: sys::CUstream,
    ) -> Result<LaunchInfo> {
        args.validate()?;
        let choice = self.choose(&args.shape())?;
        let params = args.params();
        self.launch(
            &choice,
            &params as *const RecurrentParams as *mut c_void,
            stream,
        )?;
        Ok(LaunchInfo::recurrent(&choice))
    }

    /// Launches prefill on `stream`: the plan's kernels, in order (with the `GDN_KERNEL` override, if set).
    ///
    /// # Safety
    /// As `launch_recurrent`; `cu_seqlens` must hold `num_seqs + 1` valid, non-decreasing offsets ending at
    /// `total_tokens` (the kernel reads them on the device; they are not checked here); `workspace` must
    /// address `workspace_bytes` bytes of device memory that nothing else uses until the kernels have run.
    pub unsafe fn launch_prefill(
        &self,
        args: &PrefillArgs,
        stream: sys::CUstream,
    ) -> Result<LaunchInfo> {
        self.launch_prefill_with(args, stream, self.env_override())
    }

    /// `launch_prefill` with an explicit override (`None`: automatic, ignoring `GDN_KERNEL`).
    ///
    /// # Safety
    /// As `launch_prefill`.
    pub unsafe fn launch_prefill_with(
        &self,
        args: &PrefillArgs,
        stream: sys::CUstream,
        force: Option<&str>,
    ) -> Result<LaunchInfo> {
        let plan = self.prefill_plan_with(&args.shape(), force)?;
        self.launch_prefill_plan(args, &plan, stream)
    }

    /// Launches a prefill plan already chosen for `args.shape()` (by `prefill_plan`), so that a caller that
    /// sized the workspace from the plan does not plan the call twice.
    ///
    /// # Safety
    /// As `launch_prefill`; `plan` must be the plan of `args.shape()` (its grids and workspace are sized for
    /// it: the workspace size is checked, the rest is not).
    pub unsafe fn launch_prefill_plan(
        &self,
        args: &PrefillArgs,
        plan: &PrefillPlan,
        stream: sys::CUstream,
    ) -> Result<LaunchInfo> {
        args.validate()?;
        let info = LaunchInfo::prefill(plan);
        if plan.is_empty() {
            return Ok(info);
        }
        args.validate_workspace(plan)?;
        match plan {
            PrefillPlan::Fused { variant } => {
                let params = args.params();
                self.launch(
                    variant,
                    &params as *const PrefillParams as *mut c_void,
                    stream,
                )?;
            }
            PrefillPlan::Chunk64 { prep, walk, .. } => {
                // both kernels read the same params; the walk consumes what the prep wrote (stream order, or the
                // walk's griddepcontrol.wait under programmatic dependent launch)
                let params = args.params64();
                let p = &params as *const Prefill64Params as *mut c_void;
                let mut first = true;
                for c in [prep, walk] {
                    self.launch_grid(c, c.grid, p, stream, false, &mut first)?;
                }
            }
            PrefillPlan::ContextParallel {
                prep,
                pass1,
                scan,
                pass3,
                seg_chunks,
                ..
            } => {
                // one params struct for all four (stream order carries the workspace from one to the next)
                let mut params = args.params64();
                params.seg_chunks = i32::try_from(*seg_chunks)
                    .map_err(|_| bad("cu_seqlens", "segment length does not fit i32"))?;
                let p = &params as *const Prefill64Params as *mut c_void;
                let mut first = true;
                for c in [prep, pass1, scan, pass3] {
                    self.launch_grid(c, c.grid, p, stream, false, &mut first)?;
                }
            }
            PrefillPlan::Device {
                fused,
                fused_skew,
                prep,
                walk,
                cp,
                thresholds: th,
                ..
            } => {
                // every launch reads the longest length from cu_seqlens and runs the call or exits (device_plan.rs)
                let tokens = |x: u64| i64::try_from(x).unwrap_or(i64::MAX);
                let small = |name: &str, x: u64| {
                    i32::try_from(x).map_err(|_| {
                        bad(
                            "cu_seqlens",
                            format!("device plan: {name} {x} does not fit i32"),
                        )
                    })
                };
                // (the device plan's builds of the kernels: registry::device_plan_module)
                // the fused tiles: [0, tile_from) and [tile_from, run_from) (an empty range: never, run_below -1)
                let tile_from = th.tile_from.min(th.run_from);
                let mut first = true;
                for (f, from, below) in
                    [(fused, 0, tile_from), (fused_skew, tile_from, th.run_from)]
                {
                    if let Some(f) = f {
                        let params = PrefillPlanParams {
                            p: args.params(),
                            run_below: if below <= from { -1 } else { tokens(below) },
                            run_from: tokens(from),
                        };
                        let p = &params as *const PrefillPlanParams as *mut c_void;
                        self.launch_grid(f, f.grid, p, stream, true, &mut first)?;
                    }
                }
                // the prefill64 launches in `Prefill64PlanParams::vgrid` order; those after the prep are persistent
                // (at most a wave of CTAs, `device_plan::launched_ctas`) and loop over the grid given as vgrid
                let cps = cp.as_ref();
                let launches: [Option<&Choice>; DP_LAUNCHES] = [
                    prep.as_ref(),
                    walk.as_ref(),
                    cps.map(|c| &c[0]),
                    cps.map(|c| &c[1]),
                    cps.map(|c| &c[2]),
                ];
                let mut vgrid = [[0u32; 3]; DP_LAUNCHES];
                for (g, c) in vgrid.iter_mut().zip(&launches) {
                    if let Some(c) = c {
                        *g = [c.grid.0, c.grid.1, c.grid.2];
                        small("grid", c.ctas())?;
                    }
                }
                if launches.iter().all(|c| c.is_none()) {
                    return Ok(info); // (the fused launches take every call)
                }
                let counters = plan
                    .workspace_bytes()
                    .checked_sub(device_plan::DP_COUNTER_BYTES)
                    .ok_or_else(|| bad("workspace", "device plan without its counters"))?;
                let params = Prefill64PlanParams {
                    p: args.params64(),
                    plan_from: tokens(th.run_from),
                    plan_cp_from: tokens(th.cp_from),
                    plan_cp_l_lo: small("segment length", th.cp_l_lo.max(1))?,
                    plan_cp_l_hi: small("segment length", th.cp_l_hi.max(th.cp_l_lo).max(1))?,
                    claimed: args.workspace + counters,
                    vgrid,
                    pad: 0,
                };
                let p = &params as *const Prefill64PlanParams as *mut c_void;
                let sms = self.caps.sm_count as u64;
                for c in launches.into_iter().flatten() {
                    let ctas = device_plan::launched_ctas(c, sms) as u32; // (<= the grid: it fits)
                    self.launch_grid(c, (ctas, 1, 1), p, stream, true, &mut first)?;
                }
            }
        }
        Ok(info)
    }

    /// One launch of a chosen variant with a params struct passed by value.
    unsafe fn launch(
        &self,
        choice: &Choice,
        params: *mut c_void,
        stream: sys::CUstream,
    ) -> Result<()> {
        self.launch_grid(choice, choice.grid, params, stream, false, &mut true)
    }

    /// `launch` as the next launch of a call, with another grid than the choice's (the device plan's persistent
    /// launches), from the device plan's build of the variant's module when `device_plan` (its params struct: the
    /// `…PlanParams` of params.rs). The call's first launch (`*first`, cleared once a kernel is launched) is
    /// stream-ordered: it follows the caller's work, which gives no signal to wait for. Every later one uses
    /// programmatic dependent launch (unless `GDN_PDL=0`): its CTAs may start while the previous kernel runs, and wait
    /// for it in the kernel (sm90.cuh, pdl_*).
    unsafe fn launch_grid(
        &self,
        choice: &Choice,
        grid: (u32, u32, u32),
        params: *mut c_void,
        stream: sys::CUstream,
        device_plan: bool,
        first: &mut bool,
    ) -> Result<()> {
        if choice.is_empty() {
            return Ok(());
        }
        let pdl = self.pdl && !*first;
        let k = if device_plan {
            self.device_plan_kernel(choice.variant)?
        } else {
            self.kernel(choice.variant)?
        };
        let mut args = [params];
        let launched = if pdl {
            launch_programmatic(
                k.func,
                grid,
                choice.block,
                choice.dyn_smem,
                stream,
                &mut args,
            )
        } else {
            result::launch_kernel(
                k.func,
                grid,
                (choice.block, 1, 1),
                choice.dyn_smem,
                stream,
                &mut args,
            )
        };
        *first = false;
        launched.map_err(|e| {
            backend_err(drv(
                &format!(
                    "launching {} grid {:?} block {} smem {}{}",
                    k.variant.name,
                    grid,
                    choice.block,
                    choice.dyn_smem,
                    if pdl {
                        " (programmatic dependent launch; GDN_PDL=0 turns it off)"
                    } else {
                        ""
                    }
                ),
                e,
            ))
        })
    }
}

/// `cuLaunchKernelEx` with `CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION` (cudarc's safe launchers do not take
/// launch attributes).
///
/// # Safety
/// As `result::launch_kernel`; the kernel must run `griddepcontrol.wait` before it reads what earlier work on the
/// stream wrote or writes anything (sm90.cuh, pdl_*).
unsafe fn launch_programmatic(
    func: sys::CUfunction,
    grid: (u32, u32, u32),
    block: u32,
    dyn_smem: u32,
    stream: sys::CUstream,
    args: &mut [*mut c_void],
) -> std::result::Result<(), cudarc::driver::DriverError> {
    // SAFETY: plain C structs; all-zero is a valid value of each (the union's padding included)
    let mut attr: sys::CUlaunchAttribute = std::mem::zeroed();
    attr.id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attr.value.programmaticStreamSerializationAllowed = 1;
    let config = sys::CUlaunchConfig {
        gridDimX: grid.0,
        gridDimY: grid.1,
        gridDimZ: grid.2,
        blockDimX: block,
        blockDimY: 1,
        blockDimZ: 1,
        sharedMemBytes: dyn_smem,
        hStream: stream,
        attrs: &mut attr,
        numAttrs: 1,
    };
    sys::cuLaunchKernelEx(&config, func, args.as_mut_ptr(), std::ptr::null_mut()).result()
}
