//! Explicit rank communicators for floating tensor collectives.
//!
//! The trait hierarchy of ruda's tensor contract, as the seed spells it,
//! plus [`NeighbourTensorExchange`], the row exchange with chosen peers that
//! halo exchanges need. [`crate::HostCollective`] implements all of them for
//! every [`crate::CollectiveBackend`] over any `ruda-comm` communicator.
use crate::{
    Backend,
    tensor::{FloatTensor, IntTensor},
};
use alloc::vec::Vec;
use core::fmt::Debug;

/// Matching rank-ordered collectives used by differentiable sharded tensors.
/// All participating ranks must enter forward and backward in the same order.
pub trait TensorCollective<B: Backend>: Clone + Debug + Send + 'static {
    /// Transport or tensor-contract failure.
    type Error: Debug;
    /// Number of participating ranks, greater than zero.
    fn world_size(&self) -> u32;
    /// Optional typed AD execution context carried by an explicit communicator wrapper.
    /// Native transports and ordinary AD calls retain no context by default.
    fn autodiff_context(&self) -> Option<&(dyn core::any::Any + Send + Sync)> {
        None
    }
    /// Gather equal leading-axis shards in rank order, retaining the input dtype.
    fn all_gather_float(&self, value: FloatTensor<B>) -> Result<FloatTensor<B>, Self::Error>;
    /// Sum tensors across ranks and return this rank's equal leading-axis shard.
    fn reduce_scatter_sum(&self, value: FloatTensor<B>) -> Result<FloatTensor<B>, Self::Error>;
}

/// Replicated reductions in addition to leading-axis shard collectives.
pub trait ReplicatedTensorCollective<B: Backend>: TensorCollective<B> {
    /// Sum corresponding tensor elements across ranks, retaining shape and dtype.
    fn all_reduce_sum(&self, value: FloatTensor<B>) -> Result<FloatTensor<B>, Self::Error>;
}

/// Root-owned broadcasts with replicated reductions for their backward pass.
pub trait BroadcastTensorCollective<B: Backend>: ReplicatedTensorCollective<B> {
    /// This communicator's rank.
    fn rank(&self) -> u32;
    /// Broadcast root's tensor while retaining each rank's input snapshot.
    fn broadcast_float(
        &self,
        value: FloatTensor<B>,
        root: u32,
    ) -> Result<FloatTensor<B>, Self::Error>;
}

/// Exact packed-integer storage transport in addition to floating rank collectives.
/// Immutable packed parameters do not acquire a floating surrogate or derivative.
pub trait IntegerTensorCollective<B: Backend>: BroadcastTensorCollective<B> {
    /// Rank-ordered leading-axis gather retaining the original integer dtype and
    /// bit patterns. Implementations must not cast packed words through floating point.
    fn all_gather_int(&self, value: IntTensor<B>) -> Result<IntTensor<B>, Self::Error>;
}

/// Actual variable leading-axis exchange output in source-rank order.
#[derive(Debug)]
pub struct VariableTensorExchange<T> {
    /// Original storage tensor with unchanged trailing axes and dtype.
    pub value: T,
    /// Actual received ROW counts from each source rank, not byte or scalar-element counts.
    pub receive_counts: Vec<usize>,
}
/// Variable row exchange for routed/sharded graphs through an explicit original communicator.
/// Every rank enters even with zero rows. Input blocks are in destination-rank
/// order; received blocks are in source-rank order. Trailing axes must be nonzero
/// and match across peers; no implicit expert-to-rank assignment is defined here.
pub trait VariableTensorCollective<B: Backend>: IntegerTensorCollective<B> {
    /// Exchange actual floating row blocks, retaining original floating storage.
    fn all_to_all_v_float(
        &self,
        value: FloatTensor<B>,
        send_counts: &[usize],
    ) -> Result<VariableTensorExchange<FloatTensor<B>>, Self::Error>;
    /// Exchange original U8/U32/I32/I64 row blocks without a floating surrogate.
    fn all_to_all_v_int(
        &self,
        value: IntTensor<B>,
        send_counts: &[usize],
    ) -> Result<VariableTensorExchange<IntTensor<B>>, Self::Error>;
}

/// Row exchange with chosen peers (halo exchange and its adjoint), entered
/// by every rank of the group like any collective, even a rank that sends
/// and receives nothing (it passes a tensor of zero rows).
///
/// `value` holds the rows to send, block after block in the order of
/// `sends`, whose entries pair a destination rank with a number of rows;
/// `receive_from` lists the source ranks whose blocks this rank takes, and
/// the result holds them in that order. Every block sent must be listed by
/// its receiver and every listed source must send a block (of any number of
/// rows, zero included), else every rank gets a contract error. Trailing
/// axes must agree across the group. On an autodiff backend the backward
/// pass sends every gradient block back to where its rows came from.
pub trait NeighbourTensorExchange<B: Backend>: VariableTensorCollective<B> {
    /// Send the blocks of `value` as `sends` says and receive one block from
    /// each rank of `receive_from`, in that order.
    fn exchange_rows_float(
        &self,
        value: FloatTensor<B>,
        sends: &[(u32, usize)],
        receive_from: &[u32],
    ) -> Result<Vec<FloatTensor<B>>, Self::Error>;
}
