//! torch tensors read through DLPack's C exchange API (`torch.Tensor.__dlpack_c_exchange_api__`, a PyCapsule
//! named `dlpack_exchange_api` holding a `DLPackExchangeAPI` function table; torch >= 2.11 has it, DLPack
//! 1.3's layout).
//!
//! Two of its functions serve a call: `dltensor_from_py_object_no_sync` fills a `DLTensor` on our stack with
//! a tensor's address, shape, strides, dtype and device (pointers into the tensor itself, valid while it is
//! alive: the caller holds it for the whole call) without creating a Python object or synchronising, and
//! `current_work_stream` gives torch's current CUDA stream of a device without a Python call. Everything a
//! descriptor needs is read in one C call per tensor, where torch's Python methods take five.
//!
//! The table is used only for objects whose type is exactly `torch.Tensor` or `torch.nn.Parameter`: a
//! subclass may override `data_ptr` and friends through `__torch_function__`, and is described through
//! torch's methods ([`crate::objects`]). Where the attribute is missing, has another layout (major version
//! other than 1, minor below 3) or a conversion fails, the caller falls back to those methods: same
//! descriptor, more host time. The DLPack type definitions below are the C header's (`dlpack.h`).

use crate::desc::{Desc, Dims};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyCapsule;
use std::borrow::Cow;
use std::ffi::{c_int, c_void};

#[repr(C)]
#[derive(Copy, Clone)]
struct DLDevice {
    device_type: i32,
    device_id: i32,
}

#[repr(C)]
#[derive(Copy, Clone)]
struct DLDataType {
    code: u8,
    bits: u8,
    lanes: u16,
}

#[repr(C)]
struct DLTensor {
    data: *mut c_void,
    device: DLDevice,
    ndim: i32,
    dtype: DLDataType,
    shape: *const i64,
    strides: *const i64,
    byte_offset: u64,
}

#[repr(C)]
struct Version {
    major: u32,
    minor: u32,
}

#[repr(C)]
struct Header {
    version: Version,
    prev_api: *mut Header,
}

type Unused = Option<unsafe extern "C" fn()>;
type FromPyNoSync = unsafe extern "C" fn(py_object: *mut c_void, out: *mut DLTensor) -> c_int;
type CurrentStream =
    unsafe extern "C" fn(device_type: i32, device_id: i32, out: *mut *mut c_void) -> c_int;

/// `DLPackExchangeAPI` (DLPack 1.3).
#[repr(C)]
struct ExchangeApi {
    header: Header,
    managed_tensor_allocator: Unused,
    managed_tensor_from_py_object_no_sync: Unused,
    managed_tensor_to_py_object_no_sync: Unused,
    dltensor_from_py_object_no_sync: Option<FromPyNoSync>,
    current_work_stream: Option<CurrentStream>,
}

const KDL_CPU: i32 = 1;
const KDL_CUDA: i32 = 2;

/// torch's exchange table, for the types it is used with.
pub struct Api {
    from_py: FromPyNoSync,
    stream: Option<CurrentStream>,
    /// `torch.Tensor` and `torch.nn.Parameter` (kept alive by the references below).
    types: [*mut ffi::PyTypeObject; 2],
    _keep: [Py<PyAny>; 2],
}

// SAFETY: the table is static in torch (alive for the process), and the type objects are kept alive by
// `_keep`; the function pointers are only called with the GIL held.
unsafe impl Send for Api {}
unsafe impl Sync for Api {}

impl Api {
    /// The table of `tensor_type` (`torch.Tensor`), or None when this torch has none, or one this code
    /// does not know (another major version, a minor version below 3, a missing function).
    pub fn find(tensor_type: &Bound<'_, PyAny>, parameter_type: &Bound<'_, PyAny>) -> Option<Api> {
        let attr = tensor_type.getattr("__dlpack_c_exchange_api__").ok()?;
        let ptr = match attr.cast::<PyCapsule>() {
            Ok(c) => c
                .pointer_checked(Some(c"dlpack_exchange_api"))
                .ok()?
                .as_ptr(),
            Err(_) => return None,
        } as *const ExchangeApi;
        // SAFETY: a capsule of that name holds a `DLPackExchangeAPI*` that lives as long as the process; the
        // header's layout is the same for every version, and the rest is read only for 1.3 and later.
        let api = unsafe { &*ptr };
        let v = &api.header.version;
        if v.major != 1 || v.minor < 3 {
            return None;
        }
        Some(Api {
            from_py: api.dltensor_from_py_object_no_sync?,
            stream: api.current_work_stream,
            types: [tensor_type.as_ptr().cast(), parameter_type.as_ptr().cast()],
            _keep: [
                tensor_type.clone().unbind(),
                parameter_type.clone().unbind(),
            ],
        })
    }

    /// The descriptor of `x` when its type is exactly one of [`Api::types`] and torch can describe it as a
    /// strided CPU or CUDA tensor of a dtype gdn names; None otherwise (the caller uses torch's methods,
    /// which give the same descriptor or the error to raise).
    pub fn describe(&self, x: &Bound<'_, PyAny>) -> Option<Desc> {
        let ty = x.get_type_ptr();
        if !self.types.contains(&ty) {
            return None;
        }
        let mut t = DLTensor {
            data: std::ptr::null_mut(),
            device: DLDevice {
                device_type: 0,
                device_id: 0,
            },
            ndim: 0,
            dtype: DLDataType {
                code: 0,
                bits: 0,
                lanes: 0,
            },
            shape: std::ptr::null(),
            strides: std::ptr::null(),
            byte_offset: 0,
        };
        // SAFETY: `x` is a live torch.Tensor (exact type checked), the GIL is held, and `t` is ours.
        if unsafe { (self.from_py)(x.as_ptr().cast(), &mut t) } != 0 {
            // torch set a Python error (an unsupported tensor): the method path reports it properly
            drop(PyErr::take(x.py()));
            return None;
        }
        let device = match t.device.device_type {
            KDL_CPU => -1,
            KDL_CUDA => i64::from(t.device.device_id),
            _ => return None,
        };
        let dtype = dtype_name(t.dtype)?;
        let n = usize::try_from(t.ndim).ok()?;
        if n > 0 && t.shape.is_null() {
            return None;
        }
        // SAFETY: torch's `shape` / `strides` point at the tensor's own `ndim` sizes and strides, alive while
        // the tensor is (the caller holds it); a null strides pointer means compact row-major.
        let shape = unsafe { slice(t.shape, n) };
        let mut dims = Dims::<usize>::zeros(n);
        for (d, &s) in dims.iter_mut().zip(shape) {
            *d = usize::try_from(s).ok()?;
        }
        let strides = if t.strides.is_null() {
            crate::desc::row_major(&dims)
        } else {
            Dims::from_slice(unsafe { slice(t.strides, n) })
        };
        let ptr = (t.data as u64).checked_add(t.byte_offset)?;
        Some(Desc(ptr, dims, strides, dtype, device))
    }

    /// torch's current stream on CUDA device `dev` (a `CUstream`; 0 is the legacy default stream), or None
    /// when this table cannot say.
    pub fn current_stream(&self, dev: i32) -> Option<u64> {
        let f = self.stream?;
        let mut s: *mut c_void = std::ptr::null_mut();
        // SAFETY: torch's function, called with the GIL held, writes one pointer.
        if unsafe { f(KDL_CUDA, dev, &mut s) } != 0 {
            return None;
        }
        Some(s as u64)
    }
}

/// # Safety
/// `p` points at `n` live values (or `n` is 0).
unsafe fn slice<'a>(p: *const i64, n: usize) -> &'a [i64] {
    if n == 0 {
        &[]
    } else {
        std::slice::from_raw_parts(p, n)
    }
}

/// gdn's name of a DLPack dtype (torch's names), for the dtypes gdn reads or names in its errors.
fn dtype_name(t: DLDataType) -> Option<Cow<'static, str>> {
    if t.lanes != 1 {
        return None;
    }
    let name = match (t.code, t.bits) {
        (4, 16) => "bfloat16",
        (2, 16) => "float16",
        (2, 32) => "float32",
        (2, 64) => "float64",
        (0, 32) => "int32",
        (0, 64) => "int64",
        (1, 8) => "uint8",
        (6, 8) => "bool",
        _ => return None,
    };
    Some(Cow::Borrowed(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_is_dlpack_1_3() {
        // DLTensor 48 bytes; the table: a 16-byte header and five function pointers
        assert_eq!(std::mem::size_of::<DLTensor>(), 48);
        assert_eq!(std::mem::size_of::<ExchangeApi>(), 16 + 5 * 8);
        assert_eq!(
            std::mem::offset_of!(ExchangeApi, dltensor_from_py_object_no_sync),
            40
        );
    }

    #[test]
    fn dtype_names() {
        let dt = |code, bits| {
            dtype_name(DLDataType {
                code,
                bits,
                lanes: 1,
            })
        };
        assert_eq!(dt(4, 16).as_deref(), Some("bfloat16"));
        assert_eq!(dt(2, 16).as_deref(), Some("float16"));
        assert_eq!(dt(0, 64).as_deref(), Some("int64"));
        assert_eq!(dt(5, 64), None); // complex: named by torch's methods
        assert_eq!(
            dtype_name(DLDataType {
                code: 2,
                bits: 32,
                lanes: 4
            }),
            None
        );
    }
}
