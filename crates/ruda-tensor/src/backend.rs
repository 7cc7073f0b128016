//! The backend extension through which every Burn backend gets the
//! collectives: host staging for concrete backends, and recorded adjoints
//! for `Autodiff<B, C>` (see `autodiff.rs`).
//!
//! `Autodiff<B, C>` is itself a `Backend`, so a blanket implementation over
//! all backends could not be joined by a differentiable one; instead,
//! concrete backends opt in through [`HostStaged`] and `Autodiff` wraps
//! whatever its inner backend does.

use alloc::vec::Vec;
use core::fmt::Debug;

use burn_backend::tensor::{FloatTensor, IntTensor};
use burn_backend::{Backend, TensorData, TensorMetadata, read_sync};
use ruda_comm::Communicator;

use crate::HostCollective;
use crate::error::{TensorCollectiveError, TensorOp};
use crate::staging;

/// A backend on which ruda's tensor collectives run.
///
/// Implemented for every [`HostStaged`] backend (tensors staged through
/// host memory) and for `burn_autodiff::Autodiff<B, C>` of any such backend,
/// where every collective records its adjoint. Model code calls these
/// through [`HostCollective`] and the traits of [`crate::collective`].
pub trait CollectiveBackend: Backend {
    /// See [`crate::TensorCollective::all_gather_float`].
    fn all_gather_float<C: Communicator + Debug + 'static>(
        comm: &HostCollective<C>,
        value: FloatTensor<Self>,
    ) -> Result<FloatTensor<Self>, TensorCollectiveError>;
    /// See [`crate::TensorCollective::reduce_scatter_sum`].
    fn reduce_scatter_sum<C: Communicator + Debug + 'static>(
        comm: &HostCollective<C>,
        value: FloatTensor<Self>,
    ) -> Result<FloatTensor<Self>, TensorCollectiveError>;
    /// See [`crate::ReplicatedTensorCollective::all_reduce_sum`].
    fn all_reduce_sum<C: Communicator + Debug + 'static>(
        comm: &HostCollective<C>,
        value: FloatTensor<Self>,
    ) -> Result<FloatTensor<Self>, TensorCollectiveError>;
    /// See [`crate::BroadcastTensorCollective::broadcast_float`].
    fn broadcast_float<C: Communicator + Debug + 'static>(
        comm: &HostCollective<C>,
        value: FloatTensor<Self>,
        root: u32,
    ) -> Result<FloatTensor<Self>, TensorCollectiveError>;
    /// See [`crate::IntegerTensorCollective::all_gather_int`].
    fn all_gather_int<C: Communicator + Debug + 'static>(
        comm: &HostCollective<C>,
        value: IntTensor<Self>,
    ) -> Result<IntTensor<Self>, TensorCollectiveError>;
    /// See [`crate::VariableTensorCollective::all_to_all_v_float`]; returns
    /// the received rows and the row count from each source.
    fn all_to_all_v_float<C: Communicator + Debug + 'static>(
        comm: &HostCollective<C>,
        value: FloatTensor<Self>,
        send_counts: &[usize],
    ) -> Result<(FloatTensor<Self>, Vec<usize>), TensorCollectiveError>;
    /// See [`crate::VariableTensorCollective::all_to_all_v_int`].
    fn all_to_all_v_int<C: Communicator + Debug + 'static>(
        comm: &HostCollective<C>,
        value: IntTensor<Self>,
        send_counts: &[usize],
    ) -> Result<(IntTensor<Self>, Vec<usize>), TensorCollectiveError>;
}

/// Marks a concrete (non-autodiff) backend whose collectives stage tensors
/// through host [`TensorData`]: `float_into_data`, the communicator, then
/// `float_from_data` on the input's device.
///
/// Implemented for `burn_flex::Flex` (feature `flex`). To use another
/// backend whose type is local to your crate, implement this marker.
pub trait HostStaged: Backend {}

#[cfg(feature = "flex")]
impl HostStaged for burn_flex::Flex {}

fn read_float<B: Backend>(
    op: TensorOp,
    rank: usize,
    t: FloatTensor<B>,
) -> Result<TensorData, TensorCollectiveError> {
    read_sync(B::float_into_data(t)).map_err(|e| TensorCollectiveError::Backend {
        op,
        rank,
        message: alloc::format!("{e:?}"),
    })
}

fn read_int<B: Backend>(
    op: TensorOp,
    rank: usize,
    t: IntTensor<B>,
) -> Result<TensorData, TensorCollectiveError> {
    read_sync(B::int_into_data(t)).map_err(|e| TensorCollectiveError::Backend {
        op,
        rank,
        message: alloc::format!("{e:?}"),
    })
}

impl<B: HostStaged> CollectiveBackend for B {
    fn all_gather_float<C: Communicator + Debug + 'static>(
        comm: &HostCollective<C>,
        value: FloatTensor<Self>,
    ) -> Result<FloatTensor<Self>, TensorCollectiveError> {
        let op = TensorOp::AllGatherFloat;
        let device = value.device();
        let data = read_float::<B>(op, comm.comm().rank(), value)?;
        Ok(B::float_from_data(
            staging::all_gather(comm.comm(), op, data)?,
            &device,
        ))
    }

    fn reduce_scatter_sum<C: Communicator + Debug + 'static>(
        comm: &HostCollective<C>,
        value: FloatTensor<Self>,
    ) -> Result<FloatTensor<Self>, TensorCollectiveError> {
        let device = value.device();
        let data = read_float::<B>(TensorOp::ReduceScatterSum, comm.comm().rank(), value)?;
        Ok(B::float_from_data(
            staging::reduce_scatter_sum(comm.comm(), data)?,
            &device,
        ))
    }

    fn all_reduce_sum<C: Communicator + Debug + 'static>(
        comm: &HostCollective<C>,
        value: FloatTensor<Self>,
    ) -> Result<FloatTensor<Self>, TensorCollectiveError> {
        let device = value.device();
        let data = read_float::<B>(TensorOp::AllReduceSum, comm.comm().rank(), value)?;
        Ok(B::float_from_data(
            staging::all_reduce_sum(comm.comm(), data)?,
            &device,
        ))
    }

    fn broadcast_float<C: Communicator + Debug + 'static>(
        comm: &HostCollective<C>,
        value: FloatTensor<Self>,
        root: u32,
    ) -> Result<FloatTensor<Self>, TensorCollectiveError> {
        let device = value.device();
        let data = read_float::<B>(TensorOp::BroadcastFloat, comm.comm().rank(), value)?;
        Ok(B::float_from_data(
            staging::broadcast(comm.comm(), data, root)?,
            &device,
        ))
    }

    fn all_gather_int<C: Communicator + Debug + 'static>(
        comm: &HostCollective<C>,
        value: IntTensor<Self>,
    ) -> Result<IntTensor<Self>, TensorCollectiveError> {
        let op = TensorOp::AllGatherInt;
        let device = value.device();
        let data = read_int::<B>(op, comm.comm().rank(), value)?;
        Ok(B::int_from_data(
            staging::all_gather(comm.comm(), op, data)?,
            &device,
        ))
    }

    fn all_to_all_v_float<C: Communicator + Debug + 'static>(
        comm: &HostCollective<C>,
        value: FloatTensor<Self>,
        send_counts: &[usize],
    ) -> Result<(FloatTensor<Self>, Vec<usize>), TensorCollectiveError> {
        let op = TensorOp::AllToAllVFloat;
        let device = value.device();
        let data = read_float::<B>(op, comm.comm().rank(), value)?;
        let (out, counts) = staging::all_to_all_v(comm.comm(), op, data, send_counts)?;
        Ok((B::float_from_data(out, &device), counts))
    }

    fn all_to_all_v_int<C: Communicator + Debug + 'static>(
        comm: &HostCollective<C>,
        value: IntTensor<Self>,
        send_counts: &[usize],
    ) -> Result<(IntTensor<Self>, Vec<usize>), TensorCollectiveError> {
        let op = TensorOp::AllToAllVInt;
        let device = value.device();
        let data = read_int::<B>(op, comm.comm().rank(), value)?;
        let (out, counts) = staging::all_to_all_v(comm.comm(), op, data, send_counts)?;
        Ok((B::int_from_data(out, &device), counts))
    }
}
