//! The four primitives whose backward is not the adjoint of a contract
//! operation, because they map between replicated and varying values
//! (DESIGN.md §2): each backward is declared beside its forward.
//!
//! | primitive | forward | backward |
//! |---|---|---|
//! | `copy_to` | identity | all-reduce(sum) |
//! | `reduce_from` | all-reduce(sum) | identity |
//! | `scatter_to(dim)` | keep this rank's chunk | all-gather along dim |
//! | `gather_from(dim)` | all-gather along dim | keep this rank's chunk |

use alloc::vec::Vec;
use core::fmt::Debug;
use core::marker::PhantomData;

use burn_autodiff::Autodiff;
use burn_autodiff::checkpoint::base::Checkpointer;
use burn_autodiff::checkpoint::strategy::CheckpointStrategy;
use burn_autodiff::grads::Gradients;
use burn_autodiff::ops::{Backward, Ops, unary};
use burn_backend::tensor::FloatTensor;
use ruda_comm::Communicator;

use super::staged::gather_dim;
use super::{PrimitiveError, PrimitiveOp};
use crate::HostCollective;
use crate::autodiff::{adjoint, record};
use crate::backend::{CollectiveBackend, HostStaged};
use crate::layout::{narrow, starts};

/// The region primitives on a backend; see the module table. Implemented
/// for every [`HostStaged`] backend and for `Autodiff` of any such backend.
pub trait RegionBackend: CollectiveBackend {
    /// Identity; on `Autodiff` the backward all-reduces.
    fn copy_to_region<C: Communicator + Debug + 'static>(
        comm: &HostCollective<C>,
        x: FloatTensor<Self>,
    ) -> Result<FloatTensor<Self>, PrimitiveError>;
    /// All-reduce(sum); on `Autodiff` the backward is the identity.
    fn reduce_from_region<C: Communicator + Debug + 'static>(
        comm: &HostCollective<C>,
        x: FloatTensor<Self>,
    ) -> Result<FloatTensor<Self>, PrimitiveError>;
    /// Keep this rank's chunk (`sizes` per rank) along `dim`; on `Autodiff`
    /// the backward all-gathers with the same sizes.
    fn scatter_to_region<C: Communicator + Debug + 'static>(
        comm: &HostCollective<C>,
        x: FloatTensor<Self>,
        dim: usize,
        sizes: Vec<usize>,
    ) -> Result<FloatTensor<Self>, PrimitiveError>;
    /// All-gather along `dim` with per-rank `sizes` (checked); on
    /// `Autodiff` the backward keeps this rank's chunk.
    fn gather_from_region<C: Communicator + Debug + 'static>(
        comm: &HostCollective<C>,
        x: FloatTensor<Self>,
        dim: usize,
        sizes: Vec<usize>,
    ) -> Result<FloatTensor<Self>, PrimitiveError>;
}

impl<B: HostStaged> RegionBackend for B {
    fn copy_to_region<C: Communicator + Debug + 'static>(
        _comm: &HostCollective<C>,
        x: FloatTensor<Self>,
    ) -> Result<FloatTensor<Self>, PrimitiveError> {
        Ok(x)
    }

    fn reduce_from_region<C: Communicator + Debug + 'static>(
        comm: &HostCollective<C>,
        x: FloatTensor<Self>,
    ) -> Result<FloatTensor<Self>, PrimitiveError> {
        Ok(B::all_reduce_sum(comm, x)?)
    }

    fn scatter_to_region<C: Communicator + Debug + 'static>(
        comm: &HostCollective<C>,
        x: FloatTensor<Self>,
        dim: usize,
        sizes: Vec<usize>,
    ) -> Result<FloatTensor<Self>, PrimitiveError> {
        let me = comm.comm().rank();
        Ok(narrow::<B>(x, dim, starts(&sizes)[me], sizes[me]))
    }

    fn gather_from_region<C: Communicator + Debug + 'static>(
        comm: &HostCollective<C>,
        x: FloatTensor<Self>,
        dim: usize,
        sizes: Vec<usize>,
    ) -> Result<FloatTensor<Self>, PrimitiveError> {
        gather_dim::<B, C>(comm, PrimitiveOp::GatherFrom, x, dim, &sizes)
    }
}

/// Backward of `copy_to`: all-reduce the gradient.
#[derive(Debug)]
struct CopyToBackward<C>(PhantomData<fn() -> C>);

impl<B: RegionBackend, C: Communicator + Debug + 'static> Backward<B, 1> for CopyToBackward<C> {
    type State = HostCollective<C>;
    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        let Ops {
            parents,
            node,
            state,
        } = ops;
        unary::<B, _>(parents, node, grads, |g| {
            adjoint("copy_to", B::all_reduce_sum(&state, g))
        });
    }
}

/// Backward of `reduce_from`: the identity.
#[derive(Debug)]
struct ReduceFromBackward;

impl<B: RegionBackend> Backward<B, 1> for ReduceFromBackward {
    type State = ();
    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        unary::<B, _>(ops.parents, ops.node, grads, |g| g);
    }
}

/// Backward of `scatter_to`: all-gather the gradient with the forward's sizes.
#[derive(Debug)]
struct ScatterToBackward<C>(PhantomData<fn() -> C>);

impl<B: RegionBackend, C: Communicator + Debug + 'static> Backward<B, 1> for ScatterToBackward<C> {
    type State = (HostCollective<C>, usize, Vec<usize>);
    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        let Ops {
            parents,
            node,
            state: (comm, dim, sizes),
        } = ops;
        unary::<B, _>(parents, node, grads, |g| {
            gather_dim::<B, C>(&comm, PrimitiveOp::ScatterTo, g, dim, &sizes)
                .unwrap_or_else(|e| panic!("ruda: the backward pass of scatter_to failed: {e}"))
        });
    }
}

/// Backward of `gather_from`: keep this rank's chunk of the gradient.
#[derive(Debug)]
struct GatherFromBackward;

impl<B: RegionBackend> Backward<B, 1> for GatherFromBackward {
    type State = (usize, usize, Vec<usize>);
    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        let Ops {
            parents,
            node,
            state: (me, dim, sizes),
        } = ops;
        unary::<B, _>(parents, node, grads, |g| {
            narrow::<B>(g, dim, starts(&sizes)[me], sizes[me])
        });
    }
}

impl<B: RegionBackend, CK: CheckpointStrategy> RegionBackend for Autodiff<B, CK> {
    fn copy_to_region<C: Communicator + Debug + 'static>(
        comm: &HostCollective<C>,
        x: FloatTensor<Self>,
    ) -> Result<FloatTensor<Self>, PrimitiveError> {
        let (x, guard) = x.into_parts();
        Ok(record::<B, CK, _>(
            CopyToBackward(PhantomData),
            guard,
            comm.clone(),
            x,
        ))
    }

    fn reduce_from_region<C: Communicator + Debug + 'static>(
        comm: &HostCollective<C>,
        x: FloatTensor<Self>,
    ) -> Result<FloatTensor<Self>, PrimitiveError> {
        let (x, guard) = x.into_parts();
        let out = B::all_reduce_sum(comm, x)?;
        Ok(record::<B, CK, _>(ReduceFromBackward, guard, (), out))
    }

    fn scatter_to_region<C: Communicator + Debug + 'static>(
        comm: &HostCollective<C>,
        x: FloatTensor<Self>,
        dim: usize,
        sizes: Vec<usize>,
    ) -> Result<FloatTensor<Self>, PrimitiveError> {
        let (x, guard) = x.into_parts();
        let me = comm.comm().rank();
        let out = narrow::<B>(x, dim, starts(&sizes)[me], sizes[me]);
        Ok(record::<B, CK, _>(
            ScatterToBackward(PhantomData),
            guard,
            (comm.clone(), dim, sizes),
            out,
        ))
    }

    fn gather_from_region<C: Communicator + Debug + 'static>(
        comm: &HostCollective<C>,
        x: FloatTensor<Self>,
        dim: usize,
        sizes: Vec<usize>,
    ) -> Result<FloatTensor<Self>, PrimitiveError> {
        let (x, guard) = x.into_parts();
        let out = gather_dim::<B, C>(comm, PrimitiveOp::GatherFrom, x, dim, &sizes)?;
        let me = comm.comm().rank();
        Ok(record::<B, CK, _>(
            GatherFromBackward,
            guard,
            (me, dim, sizes),
            out,
        ))
    }
}
