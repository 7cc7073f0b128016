//! # ruda-sfno
//!
//! Spherical Fourier neural operators (SFNO; Bonev et al. 2023, the model
//! of torch-harmonics' `SphericalFourierNeuralOperator` and NVIDIA's
//! makani) as Burn modules on ruda-sphere's transforms: serial, or with
//! the sphere split over a polar × azimuth process grid, from the same
//! code and with the same results to round-off; and the training data
//! torch-harmonics' example learns from, shallow-water states made on the
//! fly by ruda-sphere's solver.
//!
//! | item | what it holds |
//! |---|---|
//! | [`SfnoConfig`], [`Sfno`] | the model: encoder, blocks, decoder |
//! | [`SfnoBlock`], [`SpectralConv`], [`Pointwise`] | its layers |
//! | [`SphereMse`] | the loss: squared error integrated over the sphere |
//! | [`ShallowWaterData`] | (state, state after Δt) pairs, normalised |
//! | [`SampleCache`] | those pairs kept on disk between runs |

#![warn(missing_docs)]

extern crate alloc;

mod block;
mod cache;
mod data;
mod error;
mod init;
mod loss;
mod model;
mod pointwise;
mod spectral_conv;

pub use block::SfnoBlock;
pub use cache::SampleCache;

/// The transforms a model holds, whatever its domain: any
/// [`SphereTransforms`](ruda_sphere::shallow_water::SphereTransforms) that
/// can be shared between threads (serial, or a process grid's).
pub trait DynTransforms:
    ruda_sphere::shallow_water::SphereTransforms + core::fmt::Debug + Send + Sync
{
}

impl<T: ruda_sphere::shallow_water::SphereTransforms + core::fmt::Debug + Send + Sync> DynTransforms
    for T
{
}
pub use data::{ShallowWaterData, patch, pde_solver};
pub use error::SfnoError;
pub use loss::SphereMse;
pub use model::{Sfno, SfnoConfig};
pub use pointwise::Pointwise;
pub use spectral_conv::SpectralConv;
