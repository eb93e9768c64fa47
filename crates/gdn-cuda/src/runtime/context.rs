//! The device: driver initialisation, device 0's primary context, device facts (the compile target is chosen from
//! them by `kernels::target`), and the backend's own stream. Everything else borrows a `Gpu`.
//!
//! The primary context is retained once and made current on whichever thread calls in (`bind`), so a
//! `Gpu` can be used from any thread (the backend serialises calls). gdn never uses the legacy default
//! stream: its own work goes on a non-blocking stream created here; the raw launch API takes the caller's.

use crate::runtime::loader;
use cudarc::driver::{result, sys};

/// Facts about the device, read once.
#[derive(Clone, Debug, PartialEq)]
pub struct DeviceInfo {
    pub ordinal: i32,
    pub name: String,
    pub cc: (i32, i32),
    pub sm_count: u32,
    pub l2_bytes: u64,
    pub total_mem: u64,
    pub max_dyn_smem: u32,
    /// e.g. 13000 for 13.0
    pub driver_version: i32,
}

impl DeviceInfo {
    /// One line for tables and JSON.
    pub fn describe(&self) -> String {
        format!(
            "{} (sm_{}{}, {} SMs, {} MiB L2, {} GiB, driver {}.{})",
            self.name,
            self.cc.0,
            self.cc.1,
            self.sm_count,
            self.l2_bytes >> 20,
            self.total_mem >> 30,
            self.driver_version / 1000,
            (self.driver_version % 1000) / 10
        )
    }
}

/// A driver error as text, with the call that failed.
pub fn drv(what: &str, e: result::DriverError) -> String {
    let name = e
        .error_name()
        .map(|c| c.to_string_lossy().into_owned())
        .unwrap_or_default();
    let text = e
        .error_string()
        .map(|c| c.to_string_lossy().into_owned())
        .unwrap_or_default();
    format!("{what}: {name} ({text})")
}

/// A CUDA stream handle (borrowed; the owner destroys it).
#[derive(Clone, Copy, Debug)]
pub struct Stream(pub sys::CUstream);

// SAFETY: a stream handle may be used from any thread of its context.
unsafe impl Send for Stream {}
unsafe impl Sync for Stream {}

/// Device 0 with its primary context and the backend's stream.
pub struct Gpu {
    pub info: DeviceInfo,
    dev: sys::CUdevice,
    ctx: sys::CUcontext,
    stream: sys::CUstream,
}

// SAFETY: CUDA contexts and streams may be used from any thread once the context is made current there
// (`bind`); the backend serialises its own use of the stream.
unsafe impl Send for Gpu {}
unsafe impl Sync for Gpu {}

impl Gpu {
    /// Opens device `ordinal`: driver present, a device there, primary context, one stream.
    pub fn open(ordinal: i32) -> Result<Gpu, String> {
        loader::driver()?;
        result::init().map_err(|e| drv("cuInit (is a GPU visible to this process?)", e))?;
        let count = result::device::get_count().map_err(|e| drv("cuDeviceGetCount", e))?;
        if count <= ordinal {
            return Err(format!(
                "no CUDA device {ordinal}: the driver sees {count} device(s)"
            ));
        }
        let dev = result::device::get(ordinal).map_err(|e| drv("cuDeviceGet", e))?;
        let name = result::device::get_name(dev).map_err(|e| drv("cuDeviceGetName", e))?;
        let attr = |a: sys::CUdevice_attribute| -> Result<i32, String> {
            // SAFETY: a valid device handle and attribute enum.
            unsafe { result::device::get_attribute(dev, a) }
                .map_err(|e| drv("cuDeviceGetAttribute", e))
        };
        use sys::CUdevice_attribute::*;
        let cc = (
            attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?,
            attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?,
        );
        let mut driver_version = 0;
        // SAFETY: out-pointer to a live integer.
        unsafe { sys::cuDriverGetVersion(&mut driver_version) }
            .result()
            .map_err(|e| drv("cuDriverGetVersion", e))?;
        let info = DeviceInfo {
            ordinal,
            name,
            cc,
            sm_count: attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)? as u32,
            l2_bytes: attr(CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)? as u64,
            // SAFETY: valid device.
            total_mem: unsafe { result::device::total_mem(dev) }
                .map_err(|e| drv("cuDeviceTotalMem", e))? as u64,
            max_dyn_smem: attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)? as u32,
            driver_version,
        };
        // SAFETY: valid device; released in Drop.
        let ctx = unsafe { result::primary_ctx::retain(dev) }
            .map_err(|e| drv("cuDevicePrimaryCtxRetain", e))?;
        // SAFETY: the context was just retained.
        unsafe { result::ctx::set_current(ctx) }.map_err(|e| drv("cuCtxSetCurrent", e))?;
        let stream = result::stream::create(result::stream::StreamKind::NonBlocking)
            .map_err(|e| drv("cuStreamCreate", e))?;
        Ok(Gpu {
            info,
            dev,
            ctx,
            stream,
        })
    }

    /// Makes the context current on the calling thread (cheap; call at every entry point).
    pub fn bind(&self) -> Result<(), String> {
        // SAFETY: the context is retained for the life of `self`.
        unsafe { result::ctx::set_current(self.ctx) }.map_err(|e| drv("cuCtxSetCurrent", e))
    }

    /// The backend's own (non-blocking) stream.
    pub fn stream(&self) -> Stream {
        Stream(self.stream)
    }

    /// Waits for the backend's stream and reports any asynchronous error.
    pub fn sync(&self) -> Result<(), String> {
        // SAFETY: our stream.
        unsafe { result::stream::synchronize(self.stream) }
            .map_err(|e| drv("cuStreamSynchronize (a kernel failed)", e))
    }
}

impl Drop for Gpu {
    fn drop(&mut self) {
        // SAFETY: our stream and our retained primary context; errors at teardown are ignored.
        unsafe {
            let _ = result::ctx::set_current(self.ctx);
            let _ = result::stream::destroy(self.stream);
            let _ = result::primary_ctx::release(self.dev);
        }
    }
}
