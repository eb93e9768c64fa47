//! Typed errors. Every message names the tensor (or file, or definition) and the problem, on one line.

use thiserror::Error;

/// Result alias used throughout gdn.
pub type Result<T, E = GdnError> = std::result::Result<T, E>;

#[derive(Debug, Error, Clone, PartialEq)]
pub enum GdnError {
    /// A required input tensor is not there.
    #[error("missing tensor '{tensor}': the definition requires it")]
    Missing { tensor: String },
    /// A tensor has the wrong dtype.
    #[error("tensor '{tensor}': dtype {got} but expected {expected}")]
    DType {
        tensor: String,
        expected: String,
        got: String,
    },
    /// A tensor has the wrong shape (rank or a dimension).
    #[error("tensor '{tensor}': {problem}")]
    Shape { tensor: String, problem: String },
    /// A tensor's values break the contract (cu_seqlens order, pool indices, scale...).
    #[error("tensor '{tensor}': {problem}")]
    Value { tensor: String, problem: String },
    /// A definition name or file that gdn cannot use.
    #[error("definition '{name}': {problem}")]
    Definition { name: String, problem: String },
    /// Reading or writing a file failed.
    #[error("{path}: {problem}")]
    Io { path: String, problem: String },
    /// A configuration this backend does not support (with the reason).
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// A backend (GPU runtime, driver, compiler) failed.
    #[error("{backend} backend: {problem}")]
    Backend { backend: String, problem: String },
}

impl GdnError {
    pub fn shape(tensor: impl Into<String>, problem: impl Into<String>) -> Self {
        GdnError::Shape {
            tensor: tensor.into(),
            problem: problem.into(),
        }
    }
    pub fn value(tensor: impl Into<String>, problem: impl Into<String>) -> Self {
        GdnError::Value {
            tensor: tensor.into(),
            problem: problem.into(),
        }
    }
    pub fn definition(name: impl Into<String>, problem: impl Into<String>) -> Self {
        GdnError::Definition {
            name: name.into(),
            problem: problem.into(),
        }
    }
    pub fn io(path: impl Into<String>, problem: impl std::fmt::Display) -> Self {
        GdnError::Io {
            path: path.into(),
            problem: problem.to_string(),
        }
    }
    pub fn backend(backend: impl Into<String>, problem: impl std::fmt::Display) -> Self {
        GdnError::Backend {
            backend: backend.into(),
            problem: problem.to_string(),
        }
    }
}
