//! What can go wrong building, running or training a model.

use thiserror::Error;

/// Errors of ruda-sfno.
#[derive(Debug, Error)]
pub enum SfnoError {
    /// A setting is out of its range.
    #[error("{what} = {value}: must be {expected}")]
    Setting {
        /// The setting.
        what: &'static str,
        /// Its value.
        value: f64,
        /// What it must be.
        expected: &'static str,
    },
    /// An input is not the shape the model takes on this rank.
    #[error("{op} on rank {rank}: expected shape {expected:?}, got {got:?}")]
    Shape {
        /// The call.
        op: &'static str,
        /// This rank in the domain.
        rank: usize,
        /// The shape expected.
        expected: Vec<usize>,
        /// The shape given.
        got: Vec<usize>,
    },
    /// A cached sample that cannot be read or written.
    #[error("sample cache {}: {reason}", path.display())]
    Cache {
        /// The file or folder.
        path: std::path::PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A transform or the solver failed.
    #[error(transparent)]
    Sphere(Box<ruda_sphere::SphereError>),
    /// A collective failed.
    #[error(transparent)]
    Tensor(Box<ruda_tensor::Error>),
}

impl From<ruda_sphere::SphereError> for SfnoError {
    fn from(e: ruda_sphere::SphereError) -> Self {
        SfnoError::Sphere(Box::new(e))
    }
}

impl From<ruda_tensor::Error> for SfnoError {
    fn from(e: ruda_tensor::Error) -> Self {
        SfnoError::Tensor(Box::new(e))
    }
}
