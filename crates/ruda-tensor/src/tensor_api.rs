//! The primitives on Burn's user-facing [`Tensor<D>`], which carries no
//! backend type: each call looks at the tensor's device (Flex, or Flex with
//! autodiff) and routes to the primitive-level implementation for
//! `burn_flex::Flex` or `burn_autodiff::Autodiff<Flex>`, so gradients flow
//! through `Tensor::backward` as through any Burn operation.
//!
//! Only Flex devices are supported for now (GPU backends come with device
//! transports); another backend, or an autodiff device with gradient
//! checkpointing, is a [`PrimitiveError::UnsupportedTensor`].
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
//!     // Replicated weight into per-rank work, per-rank sums back to one loss.
//!     let local = ta::copy_to_polar_region(&grid, w.clone())?;
//!     let loss = ta::reduce_from_polar_region(&grid, local.sum())?;
//!     let g = loss.backward();
//!     Ok::<_, ruda_tensor::primitives::PrimitiveError>(w.grad(&g).unwrap().into_data().try_to_vec::<f32>().unwrap())
//! }).unwrap();
//! assert_eq!(grads[0], vec![2.0, 2.0]); // the weight is used on both ranks
//! ```

use alloc::format;
use core::fmt::Debug;

use burn_autodiff::Autodiff;
use burn_dispatch::{DispatchAutodiffContext, GradientCheckpointingStrategy};
use burn_flex::Flex;
use burn_tensor::Tensor;
use ruda_comm::Communicator;

use crate::grid::ProcessGrid;
use crate::primitives::{self, PrimitiveError};

/// Run `$call` with `$B` the backend `$x` lives on and `$t` its primitive.
macro_rules! routed {
    ($x:expr, |$B:ident, $t:ident| $call:expr) => {{
        let dispatch = $x.into_dispatch();
        match dispatch.autodiff {
            DispatchAutodiffContext::Disabled => {
                type $B = Flex;
                let $t = Tensor::<D>::from_dispatch(dispatch)
                    .try_into_primitive::<$B>()
                    .map_err(unsupported)?;
                Ok(Tensor::from_primitive::<$B>($call?))
            }
            DispatchAutodiffContext::Enabled(GradientCheckpointingStrategy::Disabled) => {
                type $B = Autodiff<Flex>;
                let $t = Tensor::<D>::from_dispatch(dispatch)
                    .try_into_primitive::<$B>()
                    .map_err(unsupported)?;
                Ok(Tensor::from_primitive::<$B>($call?))
            }
            DispatchAutodiffContext::Enabled(strategy) => Err(PrimitiveError::UnsupportedTensor {
                message: format!(
                    "autodiff with gradient checkpointing {strategy:?} is not supported"
                ),
            }),
        }
    }};
}

fn unsupported(e: burn_tensor::PrimitiveConversionError) -> PrimitiveError {
    PrimitiveError::UnsupportedTensor {
        message: format!("{e:?}"),
    }
}

macro_rules! tensor_entry {
    ($(#[$doc:meta])* $name:ident ( $($arg:ident : $ty:ty),* )) => {
        $(#[$doc])*
        ///
        /// # Errors
        /// As the primitive-level function of the same name, and
        /// [`PrimitiveError::UnsupportedTensor`] for a tensor not on a Flex device.
        pub fn $name<const D: usize, C: Communicator + Debug + 'static>(
            grid: &ProcessGrid<C>,
            x: Tensor<D>,
            $($arg: $ty),*
        ) -> Result<Tensor<D>, PrimitiveError> {
            routed!(x, |B, t| primitives::$name::<B, C>(grid, t, $($arg),*))
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
