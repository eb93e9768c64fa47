//! [`Desc`]: what gdn knows of a tensor passed from Python (address, shape, strides, dtype, device), built by
//! [`crate::objects`] (torch tensors through DLPack's C exchange API or torch's methods) or by the Python
//! layer (`gdn._desc`: NumPy arrays, and torch where the C API is missing); validated by [`crate::args`].
//!
//! A call describes ten or more tensors, so a descriptor allocates nothing: shape and strides live inline up
//! to [`INLINE`] dimensions (every gdn tensor has at most 5), and the dtype name is a static string for the
//! dtypes gdn knows.

use gdn_core::DType;
use pyo3::prelude::*;
use pyo3::types::PyTuple;
use std::borrow::Cow;
use std::fmt;
use std::ops::{Deref, DerefMut};

/// Dimensions held inline (beyond that, on the heap: only a tensor gdn refuses has more).
pub const INLINE: usize = 6;

/// Shape or strides of one tensor: a slice that allocates only past [`INLINE`] dimensions.
#[derive(Clone)]
pub enum Dims<T: Copy + Default> {
    Inline(u8, [T; INLINE]),
    Heap(Vec<T>),
}

impl<T: Copy + Default> Dims<T> {
    pub fn from_slice(s: &[T]) -> Self {
        if s.len() <= INLINE {
            let mut v = [T::default(); INLINE];
            v[..s.len()].copy_from_slice(s);
            Dims::Inline(s.len() as u8, v)
        } else {
            Dims::Heap(s.to_vec())
        }
    }

    /// `n` default values (zeros).
    pub fn zeros(n: usize) -> Self {
        if n <= INLINE {
            Dims::Inline(n as u8, [T::default(); INLINE])
        } else {
            Dims::Heap(vec![T::default(); n])
        }
    }
}

impl<T: Copy + Default> Deref for Dims<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        match self {
            Dims::Inline(n, v) => &v[..*n as usize],
            Dims::Heap(v) => v,
        }
    }
}

impl<T: Copy + Default> DerefMut for Dims<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        match self {
            Dims::Inline(n, v) => &mut v[..*n as usize],
            Dims::Heap(v) => v,
        }
    }
}

impl<T: Copy + Default + PartialEq> PartialEq for Dims<T> {
    fn eq(&self, o: &Self) -> bool {
        **self == **o
    }
}

impl<T: Copy + Default + fmt::Debug> fmt::Debug for Dims<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        (**self).fmt(f)
    }
}

impl<T: Copy + Default> From<Vec<T>> for Dims<T> {
    fn from(v: Vec<T>) -> Self {
        Dims::from_slice(&v)
    }
}

impl<T: Copy + Default> From<&[T]> for Dims<T> {
    fn from(v: &[T]) -> Self {
        Dims::from_slice(v)
    }
}

/// `(address, shape, element strides, dtype name, device)`; device -1 = host, n >= 0 = CUDA device n. A stride
/// of -1 means "not a whole number of elements" (never contiguous).
#[derive(Clone, Debug)]
pub struct Desc(
    pub u64,
    pub Dims<usize>,
    pub Dims<i64>,
    pub Cow<'static, str>,
    pub i64,
);

impl<'a, 'py> FromPyObject<'a, 'py> for Desc {
    type Error = PyErr;

    /// A descriptor tuple, as `gdn._desc` builds it.
    fn extract(ob: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        let t = ob.cast::<PyTuple>()?;
        let dtype: String = t.get_item(3)?.extract()?;
        Ok(Desc(
            t.get_item(0)?.extract()?,
            ints(&t.get_item(1)?)?,
            ints(&t.get_item(2)?)?,
            dtype_name(&dtype),
            t.get_item(4)?.extract()?,
        ))
    }
}

/// The static name of a dtype gdn knows (no allocation), else the name as given.
pub fn dtype_name(name: &str) -> Cow<'static, str> {
    const KNOWN: [&str; 8] = [
        "bfloat16", "float16", "float32", "int32", "int64", "uint8", "bool", "float64",
    ];
    match KNOWN.iter().find(|k| **k == name) {
        Some(k) => Cow::Borrowed(k),
        None => Cow::Owned(name.to_string()),
    }
}

impl Desc {
    pub fn ptr(&self) -> u64 {
        self.0
    }
    pub fn shape(&self) -> &[usize] {
        &self.1
    }
    pub fn numel(&self) -> usize {
        self.1.iter().product()
    }
    pub fn device(&self) -> i64 {
        self.4
    }
    pub fn dtype(&self) -> Option<DType> {
        DType::from_name(&self.3)
    }
}

/// Integers of a tuple (torch.Size and NumPy shapes are tuples), read item by item: much cheaper than the
/// generic sequence extraction under the stable ABI.
pub fn ints<T>(t: &Bound<'_, PyAny>) -> PyResult<Dims<T>>
where
    T: Copy + Default + for<'a, 'py> FromPyObject<'a, 'py>,
{
    let t = t.cast::<PyTuple>()?;
    let mut v = Vec::with_capacity(t.len());
    for i in 0..t.len() {
        v.push(t.get_item(i)?.extract().map_err(Into::into)?);
    }
    Ok(v.into())
}

/// Element strides of a contiguous row-major tensor of `shape`.
pub(crate) fn row_major(shape: &[usize]) -> Dims<i64> {
    let mut strides = Dims::zeros(shape.len());
    let mut s = 1i64;
    for (d, &n) in strides.iter_mut().zip(shape).rev() {
        *d = s;
        s *= n as i64;
    }
    strides
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn row_major_strides() {
        assert_eq!(*row_major(&[2, 1, 8, 128]), [1024, 1024, 128, 1]);
        assert_eq!(*row_major(&[5]), [1]);
        assert!(row_major(&[]).is_empty());
    }

    #[test]
    fn dims_inline_and_heap() {
        let d = Dims::from_slice(&[1usize, 2, 3]);
        assert!(matches!(d, Dims::Inline(3, _)));
        assert_eq!(&*d, &[1, 2, 3]);
        let long: Vec<usize> = (0..9).collect();
        let h = Dims::from(long.clone());
        assert!(matches!(h, Dims::Heap(_)));
        assert_eq!(&*h, &long[..]);
        assert_eq!(format!("{:?}", Dims::from_slice(&[4i64, -1])), "[4, -1]");
        assert_eq!(Dims::from_slice(&[2usize]), Dims::from(vec![2usize]));
    }

    #[test]
    fn known_dtype_names_are_static() {
        assert!(matches!(dtype_name("bfloat16"), Cow::Borrowed("bfloat16")));
        assert!(matches!(dtype_name("complex64"), Cow::Owned(_)));
    }
}
