//! Device buffers owned by the backend (RAII over cuMemAlloc / cuMemFree) and typed host ↔ device copies on
//! a stream. The raw launch API (`exec`) never allocates; only the backend and the benchmarks do.

use crate::runtime::context::{drv, Stream};
use cudarc::driver::{result, sys};

/// Bytes of device memory; `ptr == 0` for an empty buffer. Freed on drop.
pub struct DeviceBuf {
    pub ptr: sys::CUdeviceptr,
    pub bytes: usize,
}

// SAFETY: a device address is plain data; the owning backend serialises its use.
unsafe impl Send for DeviceBuf {}
unsafe impl Sync for DeviceBuf {}

impl DeviceBuf {
    /// Uninitialised device memory (the context must be current).
    pub fn alloc(bytes: usize) -> Result<DeviceBuf, String> {
        if bytes == 0 {
            return Ok(DeviceBuf { ptr: 0, bytes: 0 });
        }
        // SAFETY: plain allocation; freed in Drop.
        let ptr = unsafe { result::malloc_sync(bytes) }
            .map_err(|e| drv(&format!("cuMemAlloc({bytes} bytes)"), e))?;
        Ok(DeviceBuf { ptr, bytes })
    }

    /// A device copy of `data`, enqueued on `stream` (the host slice must outlive the copy: callers
    /// synchronise before returning).
    pub fn upload<T: Copy>(data: &[T], stream: Stream) -> Result<DeviceBuf, String> {
        let buf = DeviceBuf::alloc(std::mem::size_of_val(data))?;
        buf.write(data, stream)?;
        Ok(buf)
    }

    /// Copies `data` into the start of the buffer on `stream`.
    pub fn write<T: Copy>(&self, data: &[T], stream: Stream) -> Result<(), String> {
        let n = std::mem::size_of_val(data);
        assert!(
            n <= self.bytes,
            "DeviceBuf::write: {n} > {} bytes",
            self.bytes
        );
        if n == 0 {
            return Ok(());
        }
        // SAFETY: destination holds n bytes; the source lives until the caller synchronises.
        unsafe { result::memcpy_htod_async(self.ptr, data, stream.0) }
            .map_err(|e| drv("cuMemcpyHtoDAsync", e))
    }

    /// Copies the start of the buffer into `out` on `stream` (the caller synchronises before reading).
    pub fn read<T: Copy>(&self, out: &mut [T], stream: Stream) -> Result<(), String> {
        let n = std::mem::size_of_val(out);
        assert!(
            n <= self.bytes,
            "DeviceBuf::read: {n} > {} bytes",
            self.bytes
        );
        if n == 0 {
            return Ok(());
        }
        // SAFETY: source holds n bytes; the destination lives until the caller synchronises.
        unsafe { result::memcpy_dtoh_async(out, self.ptr, stream.0) }
            .map_err(|e| drv("cuMemcpyDtoHAsync", e))
    }

    /// Fills the buffer with a 32-bit pattern (bytes must be a multiple of 4).
    pub fn fill_u32(&self, word: u32, stream: Stream) -> Result<(), String> {
        if self.bytes == 0 {
            return Ok(());
        }
        // SAFETY: the buffer holds bytes/4 words.
        unsafe { sys::cuMemsetD32Async(self.ptr, word, self.bytes / 4, stream.0) }
            .result()
            .map_err(|e| drv("cuMemsetD32Async", e))
    }
}

impl Drop for DeviceBuf {
    fn drop(&mut self) {
        if self.ptr != 0 {
            // SAFETY: allocated by cuMemAlloc; the owner synchronised before dropping.
            unsafe {
                let _ = result::free_sync(self.ptr);
            }
        }
    }
}
