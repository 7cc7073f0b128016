//! `HostCollective`: the tensor contract over any `ruda-comm` communicator.

use alloc::sync::Arc;
use alloc::vec::Vec;
use core::fmt::Debug;

use burn_backend::tensor::{FloatTensor, IntTensor};
use burn_backend::{Slice, TensorMetadata};
use ruda_comm::Communicator;

use crate::backend::CollectiveBackend;
use crate::collective::{
    BroadcastTensorCollective, IntegerTensorCollective, NeighbourTensorExchange,
    ReplicatedTensorCollective, TensorCollective, VariableTensorCollective, VariableTensorExchange,
};
use crate::error::TensorCollectiveError;
use crate::staging;

/// The tensor collectives of [`crate::collective`] over a communicator `C`,
/// for every [`CollectiveBackend`] (Flex, and `Autodiff` of it, where every
/// operation records its adjoint).
///
/// Cheap to clone (the communicator is shared); every rank holds its own.
///
/// # Example
/// ```
/// use burn_flex::{Flex, FlexDevice};
/// use burn_backend::{TensorData, ops::FloatTensorOps, read_sync};
/// use ruda_comm::{Communicator, LocalWorld};
/// use ruda_tensor::{HostCollective, TensorCollective};
///
/// let out = LocalWorld::new(2).run(|comm| {
///     let r = comm.rank() as f32;
///     let coll = HostCollective::new(comm);
///     let x = Flex::float_from_data(TensorData::new(vec![r, r], [1, 2]), &FlexDevice);
///     let all = TensorCollective::<Flex>::all_gather_float(&coll, x)?;
///     Ok::<_, ruda_tensor::TensorCollectiveError>(read_sync(Flex::float_into_data(all)).unwrap().try_to_vec::<f32>().unwrap())
/// }).unwrap();
/// assert_eq!(out[1], vec![0.0, 0.0, 1.0, 1.0]);
/// ```
#[derive(Debug)]
pub struct HostCollective<C> {
    comm: Arc<C>,
}

impl<C> Clone for HostCollective<C> {
    fn clone(&self) -> Self {
        HostCollective {
            comm: self.comm.clone(),
        }
    }
}

impl<C: Communicator> HostCollective<C> {
    /// Wrap a communicator.
    pub fn new(comm: C) -> Self {
        HostCollective {
            comm: Arc::new(comm),
        }
    }

    /// Wrap a shared communicator.
    pub fn from_arc(comm: Arc<C>) -> Self {
        HostCollective { comm }
    }

    /// The communicator.
    pub fn comm(&self) -> &C {
        &self.comm
    }
}

impl<B: CollectiveBackend, C: Communicator + Debug + 'static> TensorCollective<B>
    for HostCollective<C>
{
    type Error = TensorCollectiveError;

    fn world_size(&self) -> u32 {
        self.comm.size() as u32
    }

    fn all_gather_float(&self, value: FloatTensor<B>) -> Result<FloatTensor<B>, Self::Error> {
        B::all_gather_float(self, value)
    }

    fn reduce_scatter_sum(&self, value: FloatTensor<B>) -> Result<FloatTensor<B>, Self::Error> {
        B::reduce_scatter_sum(self, value)
    }
}

impl<B: CollectiveBackend, C: Communicator + Debug + 'static> ReplicatedTensorCollective<B>
    for HostCollective<C>
{
    fn all_reduce_sum(&self, value: FloatTensor<B>) -> Result<FloatTensor<B>, Self::Error> {
        B::all_reduce_sum(self, value)
    }
}

impl<B: CollectiveBackend, C: Communicator + Debug + 'static> BroadcastTensorCollective<B>
    for HostCollective<C>
{
    fn rank(&self) -> u32 {
        self.comm.rank() as u32
    }

    fn broadcast_float(
        &self,
        value: FloatTensor<B>,
        root: u32,
    ) -> Result<FloatTensor<B>, Self::Error> {
        B::broadcast_float(self, value, root)
    }
}

impl<B: CollectiveBackend, C: Communicator + Debug + 'static> IntegerTensorCollective<B>
    for HostCollective<C>
{
    fn all_gather_int(&self, value: IntTensor<B>) -> Result<IntTensor<B>, Self::Error> {
        B::all_gather_int(self, value)
    }
}

impl<B: CollectiveBackend, C: Communicator + Debug + 'static> VariableTensorCollective<B>
    for HostCollective<C>
{
    fn all_to_all_v_float(
        &self,
        value: FloatTensor<B>,
        send_counts: &[usize],
    ) -> Result<VariableTensorExchange<FloatTensor<B>>, Self::Error> {
        let (value, receive_counts) = B::all_to_all_v_float(self, value, send_counts)?;
        Ok(VariableTensorExchange {
            value,
            receive_counts,
        })
    }

    fn all_to_all_v_int(
        &self,
        value: IntTensor<B>,
        send_counts: &[usize],
    ) -> Result<VariableTensorExchange<IntTensor<B>>, Self::Error> {
        let (value, receive_counts) = B::all_to_all_v_int(self, value, send_counts)?;
        Ok(VariableTensorExchange {
            value,
            receive_counts,
        })
    }
}

/// Rows `start..end` of `t` (leading axis).
pub(crate) fn rows<B: CollectiveBackend>(
    t: FloatTensor<B>,
    start: usize,
    end: usize,
) -> FloatTensor<B> {
    if start == 0 && end == t.shape()[0] {
        return t;
    }
    B::float_slice(t, &[Slice::new(start as isize, Some(end as isize), 1)])
}

impl<B: CollectiveBackend, C: Communicator + Debug + 'static> NeighbourTensorExchange<B>
    for HostCollective<C>
{
    /// Checks the plan on every rank, packs the blocks in destination order,
    /// exchanges them with `all_to_all_v_float` (whose adjoint sends the
    /// gradients home) and slices out the requested blocks.
    fn exchange_rows_float(
        &self,
        value: FloatTensor<B>,
        sends: &[(u32, usize)],
        receive_from: &[u32],
    ) -> Result<Vec<FloatTensor<B>>, Self::Error> {
        let n = self.comm.size();
        let shape = value.shape().to_vec();
        staging::agree_exchange(self.comm(), value.dtype(), &shape, sends, receive_from)?;
        let mut counts = alloc::vec![0usize; n];
        for &(d, r) in sends {
            counts[d as usize] = r;
        }
        let in_order = sends.windows(2).all(|w| w[0].0 < w[1].0);
        let packed = if in_order {
            value
        } else {
            let mut blocks: Vec<(u32, usize, usize)> = Vec::with_capacity(sends.len());
            let mut off = 0;
            for &(d, r) in sends {
                blocks.push((d, off, off + r));
                off += r;
            }
            blocks.sort_by_key(|b| b.0);
            let parts = blocks
                .iter()
                .map(|&(_, s, e)| rows::<B>(value.clone(), s, e))
                .collect();
            B::float_cat(parts, 0)
        };
        let (received, got) = B::all_to_all_v_float(self, packed, &counts)?;
        let mut starts = alloc::vec![0usize; n + 1];
        for s in 0..n {
            starts[s + 1] = starts[s] + got[s];
        }
        Ok(receive_from
            .iter()
            .map(|&s| rows::<B>(received.clone(), starts[s as usize], starts[s as usize + 1]))
            .collect())
    }
}
