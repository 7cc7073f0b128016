//! The seed's grid-bound names (seed 000) on Burn's user-facing
//! [`Tensor`], grid first: thin wrappers over the primitives of
//! [`crate::primitives`] on the grid's polar or azimuth group. New code can
//! call the methods of [`crate::TensorExt`] on `grid.polar()` or
//! `grid.azimuth()` directly.
//!
//! ```
//! use burn_tensor::{Device, Tensor};
//! use ruda_comm::LocalWorld;
//! use ruda_tensor::{ProcessGrid, tensor_api as ta};
//!
//! let grads = LocalWorld::new(2).run(|comm| {
//!     let grid = ProcessGrid::new(comm, 2, 1)?;
//!     let device = Device::flex().autodiff();
//!     let w = Tensor::<1>::from_floats([1.0, 2.0], &device).require_grad();
//!     let local = ta::copy_to_polar_region(&grid, w.clone())?;
//!     let loss = ta::reduce_from_polar_region(&grid, local.sum())?;
//!     let g = loss.backward();
//!     Ok::<_, ruda_tensor::Error>(w.grad(&g).unwrap().into_data().try_to_vec::<f32>().unwrap())
//! }).unwrap();
//! assert_eq!(grads[0], vec![2.0, 2.0]);
//! ```

use burn_tensor::Tensor;

use crate::error::Error;
use crate::grid::ProcessGrid;
use crate::group::Group;
use crate::primitives;
use crate::route::routed;

macro_rules! tensor_entry {
    ($(#[$doc:meta])* $name:ident ( $($arg:ident : $ty:ty),* )) => {
        $(#[$doc])*
        ///
        /// # Errors
        /// As the primitive-level function of the same name, and
        /// [`Error::UnsupportedTensor`] for a tensor on a backend ruda does
        /// not run on.
        pub fn $name<const D: usize, G: Group>(
            grid: &ProcessGrid<G>,
            x: Tensor<D>,
            $($arg: $ty),*
        ) -> Result<Tensor<D>, Error> {
            routed!(x, D, burn_tensor::Float, |B, t| primitives::$name::<B, G>(grid, t, $($arg),*))
        }
    };
}

tensor_entry!(
    /// [`primitives::distributed_transpose_azimuth`] on a [`Tensor`].
    distributed_transpose_azimuth(dims: (isize, isize), shapes: &[usize]));
tensor_entry!(
    /// [`primitives::distributed_transpose_polar`] on a [`Tensor`].
    distributed_transpose_polar(dims: (isize, isize), shapes: &[usize]));
tensor_entry!(
    /// [`primitives::copy_to_polar_region`] on a [`Tensor`].
    copy_to_polar_region());
tensor_entry!(
    /// [`primitives::copy_to_azimuth_region`] on a [`Tensor`].
    copy_to_azimuth_region());
tensor_entry!(
    /// [`primitives::reduce_from_polar_region`] on a [`Tensor`].
    reduce_from_polar_region());
tensor_entry!(
    /// [`primitives::reduce_from_azimuth_region`] on a [`Tensor`].
    reduce_from_azimuth_region());
tensor_entry!(
    /// [`primitives::scatter_to_polar_region`] on a [`Tensor`].
    scatter_to_polar_region(dim: isize));
tensor_entry!(
    /// [`primitives::gather_from_polar_region`] on a [`Tensor`].
    gather_from_polar_region(dim: isize, shapes: &[usize]));
tensor_entry!(
    /// [`primitives::gather_from_copy_to_polar_region`] on a [`Tensor`].
    gather_from_copy_to_polar_region(dim: isize, shapes: &[usize]));
tensor_entry!(
    /// [`primitives::reduce_from_scatter_to_polar_region`] on a [`Tensor`].
    reduce_from_scatter_to_polar_region(dim: isize));
tensor_entry!(
    /// [`primitives::reduce_from_scatter_to_azimuth_region`] on a [`Tensor`].
    reduce_from_scatter_to_azimuth_region(dim: isize));
tensor_entry!(
    /// [`primitives::polar_halo_exchange`] on a [`Tensor`].
    polar_halo_exchange(radius: usize));
tensor_entry!(
    /// [`primitives::polar_halo_reduce`] on a [`Tensor`].
    polar_halo_reduce(radius: usize, nlat_local: usize));
