//! [`Desc`]: what gdn knows of a tensor passed from Python (address, shape, strides, dtype, device), built by
//! the Python layer (`gdn._desc`) or, for torch CUDA tensors, by [`crate::objects`]; validated by
//! [`crate::args`].

use gdn_core::DType;
use pyo3::prelude::*;
use pyo3::types::PyTuple;

/// `(address, shape, element strides, dtype name, device)` as built by `gdn._desc` (or, for torch CUDA tensors,
/// by [`crate::objects`]); device -1 = host, n >= 0 = CUDA device n. A stride of -1 means "not a whole number of elements" (never contiguous).
#[derive(Clone, Debug)]
pub struct Desc(pub u64, pub Vec<usize>, pub Vec<i64>, pub String, pub i64);

impl<'a, 'py> FromPyObject<'a, 'py> for Desc {
    type Error = PyErr;

    fn extract(ob: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        let t = ob.cast::<PyTuple>()?;
        Ok(Desc(
            t.get_item(0)?.extract()?,
            ints(&t.get_item(1)?)?,
            ints(&t.get_item(2)?)?,
            t.get_item(3)?.extract()?,
            t.get_item(4)?.extract()?,
        ))
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
pub fn ints<T: for<'a, 'py> FromPyObject<'a, 'py>>(t: &Bound<'_, PyAny>) -> PyResult<Vec<T>> {
    let t = t.cast::<PyTuple>()?;
    let mut v = Vec::with_capacity(t.len());
    for i in 0..t.len() {
        v.push(t.get_item(i)?.extract().map_err(Into::into)?);
    }
    Ok(v)
}

/// Element strides of a contiguous row-major tensor of `shape`.
pub(crate) fn row_major(shape: &[usize]) -> Vec<i64> {
    let mut strides = vec![0i64; shape.len()];
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
        assert_eq!(row_major(&[2, 1, 8, 128]), vec![1024, 1024, 128, 1]);
        assert_eq!(row_major(&[5]), vec![1]);
        assert!(row_major(&[]).is_empty());
    }
}
