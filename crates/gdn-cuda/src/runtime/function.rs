//! A standalone kernel: compiled by NVRTC from a source string and loaded into the current context for the
//! life of the process. For measuring tools (the timing tiers' copy kernel), not GDN's kernels, which the
//! registry describes and `exec::kernel_set` loads.

use crate::runtime::context::drv;
use crate::runtime::nvrtc;
use cudarc::driver::{result, sys};
use std::ffi::{c_void, CString};

/// A loaded standalone kernel.
pub struct Function {
    pub func: sys::CUfunction,
}

// SAFETY: a function handle is usable from any thread of its context.
unsafe impl Send for Function {}
unsafe impl Sync for Function {}

impl Function {
    /// Compiles `source` (file name `name`, no extra headers) for `arch`, loads it into the current context
    /// (kept for the process) and finds `entry`; `what` names it in errors.
    pub fn load(
        name: &str,
        source: &str,
        arch: &str,
        entry: &str,
        what: &str,
    ) -> Result<Function, String> {
        let c = nvrtc::compile(&nvrtc::Request {
            name,
            source,
            headers: &[],
            arch,
            defines: &[],
        })?;
        // SAFETY: a CUBIN for this device (or NUL-terminated PTX the driver compiles), loaded into the current context
        // (kept for the process).
        unsafe {
            let m = result::module::load_data(c.cubin.as_ptr() as *const c_void)
                .map_err(|e| drv(&format!("cuModuleLoadData({what})"), e))?;
            let func = result::module::get_function(
                m,
                CString::new(entry).map_err(|_| format!("{what}: kernel name with NUL"))?,
            )
            .map_err(|e| drv(&format!("cuModuleGetFunction({what})"), e))?;
            Ok(Function { func })
        }
    }
}
