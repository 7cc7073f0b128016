//! The collectives on `Autodiff<B, C>`: each forward calls the inner
//! backend's collective and records its adjoint, declared right beside it
//! (DESIGN.md §2, last row):
//!
//! | forward | backward |
//! |---|---|
//! | `all_gather_float` | `reduce_scatter_sum` |
//! | `reduce_scatter_sum` | `all_gather_float` |
//! | `all_reduce_sum` | `all_reduce_sum` |
//! | `broadcast_float(root)` | sum to the root, zeros elsewhere |
//! | `all_to_all_v_float(counts)` | the reverse exchange with the received counts |
//! | integer operations | none (integers carry no gradient) |
//!
//! Every rank must run its backward through the same collectives in the
//! same order. A backward cannot return an error in Burn, so a failed
//! collective there panics with the full [`TensorCollectiveError`]; the
//! contract checks run on every rank, so every rank fails the same way.

use alloc::vec::Vec;
use core::fmt::Debug;
use core::marker::PhantomData;

use burn_autodiff::Autodiff;
use burn_autodiff::checkpoint::base::Checkpointer;
use burn_autodiff::checkpoint::strategy::CheckpointStrategy;
use burn_autodiff::grads::Gradients;
use burn_autodiff::ops::{Backward, NodeGuard, Ops, OpsKind, unary};
use burn_backend::TensorMetadata;
use burn_backend::tensor::{FloatTensor, IntTensor};
use ruda_comm::Communicator;

use crate::HostCollective;
use crate::backend::CollectiveBackend;
use crate::error::TensorCollectiveError;

/// The adjoint's result, or a panic naming the forward it belongs to.
pub(crate) fn adjoint<T>(of: &str, r: Result<T, TensorCollectiveError>) -> T {
    r.unwrap_or_else(|e| panic!("ruda: the backward pass of {of} failed: {e}"))
}

/// Register `out` as the result of a one-input collective with backward `bw`.
pub(crate) fn record<B, CK, BO>(
    bw: BO,
    guard: NodeGuard,
    state: BO::State,
    out: FloatTensor<B>,
) -> FloatTensor<Autodiff<B, CK>>
where
    B: CollectiveBackend,
    CK: CheckpointStrategy,
    BO: Backward<B, 1>,
{
    match bw.prepare::<CK>([guard]).compute_bound().stateful() {
        OpsKind::Tracked(prep) => prep.finish(state, out),
        OpsKind::UnTracked(prep) => prep.finish(out),
    }
}

/// Backward of `all_gather_float`: reduce-scatter the gradient.
#[derive(Debug)]
struct AllGatherBackward<C>(PhantomData<fn() -> C>);

impl<B: CollectiveBackend, C: Communicator + Debug + 'static> Backward<B, 1>
    for AllGatherBackward<C>
{
    type State = HostCollective<C>;
    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        let Ops {
            parents,
            node,
            state,
        } = ops;
        unary::<B, _>(parents, node, grads, |g| {
            adjoint("all_gather_float", B::reduce_scatter_sum(&state, g))
        });
    }
}

/// Backward of `reduce_scatter_sum`: all-gather the gradient.
#[derive(Debug)]
struct ReduceScatterBackward<C>(PhantomData<fn() -> C>);

impl<B: CollectiveBackend, C: Communicator + Debug + 'static> Backward<B, 1>
    for ReduceScatterBackward<C>
{
    type State = HostCollective<C>;
    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        let Ops {
            parents,
            node,
            state,
        } = ops;
        unary::<B, _>(parents, node, grads, |g| {
            adjoint("reduce_scatter_sum", B::all_gather_float(&state, g))
        });
    }
}

/// Backward of `all_reduce_sum`: all-reduce the gradient.
#[derive(Debug)]
struct AllReduceBackward<C>(PhantomData<fn() -> C>);

impl<B: CollectiveBackend, C: Communicator + Debug + 'static> Backward<B, 1>
    for AllReduceBackward<C>
{
    type State = HostCollective<C>;
    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        let Ops {
            parents,
            node,
            state,
        } = ops;
        unary::<B, _>(parents, node, grads, |g| {
            adjoint("all_reduce_sum", B::all_reduce_sum(&state, g))
        });
    }
}

/// Backward of `broadcast_float(root)`: the root gets the sum of every
/// rank's gradient, the others zeros (their input did not reach the output).
#[derive(Debug)]
struct BroadcastBackward<C>(PhantomData<fn() -> C>);

impl<B: CollectiveBackend, C: Communicator + Debug + 'static> Backward<B, 1>
    for BroadcastBackward<C>
{
    type State = (HostCollective<C>, u32);
    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        let Ops {
            parents,
            node,
            state: (comm, root),
        } = ops;
        unary::<B, _>(parents, node, grads, |g| {
            let summed = adjoint("broadcast_float", B::all_reduce_sum(&comm, g));
            if comm.comm().rank() == root as usize {
                summed
            } else {
                B::float_zeros(summed.shape(), &summed.device(), summed.dtype().into())
            }
        });
    }
}

/// Backward of `all_to_all_v_float`: send every gradient row back where it
/// came from, with the received counts as send counts.
#[derive(Debug)]
struct AllToAllVBackward<C>(PhantomData<fn() -> C>);

impl<B: CollectiveBackend, C: Communicator + Debug + 'static> Backward<B, 1>
    for AllToAllVBackward<C>
{
    type State = (HostCollective<C>, Vec<usize>, Vec<usize>);
    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        let Ops {
            parents,
            node,
            state: (comm, sent, received),
        } = ops;
        unary::<B, _>(parents, node, grads, |g| {
            let (back, counts) = adjoint(
                "all_to_all_v_float",
                B::all_to_all_v_float(&comm, g, &received),
            );
            assert_eq!(
                counts, sent,
                "ruda: the backward pass of all_to_all_v_float received {counts:?} rows per rank where the forward sent {sent:?}"
            );
            back
        });
    }
}

impl<B: CollectiveBackend, CK: CheckpointStrategy> CollectiveBackend for Autodiff<B, CK> {
    fn all_gather_float<C: Communicator + Debug + 'static>(
        comm: &HostCollective<C>,
        value: FloatTensor<Self>,
    ) -> Result<FloatTensor<Self>, TensorCollectiveError> {
        let (x, guard) = value.into_parts();
        let out = B::all_gather_float(comm, x)?;
        Ok(record::<B, CK, _>(
            AllGatherBackward(PhantomData),
            guard,
            comm.clone(),
            out,
        ))
    }

    fn reduce_scatter_sum<C: Communicator + Debug + 'static>(
        comm: &HostCollective<C>,
        value: FloatTensor<Self>,
    ) -> Result<FloatTensor<Self>, TensorCollectiveError> {
        let (x, guard) = value.into_parts();
        let out = B::reduce_scatter_sum(comm, x)?;
        Ok(record::<B, CK, _>(
            ReduceScatterBackward(PhantomData),
            guard,
            comm.clone(),
            out,
        ))
    }

    fn all_reduce_sum<C: Communicator + Debug + 'static>(
        comm: &HostCollective<C>,
        value: FloatTensor<Self>,
    ) -> Result<FloatTensor<Self>, TensorCollectiveError> {
        let (x, guard) = value.into_parts();
        let out = B::all_reduce_sum(comm, x)?;
        Ok(record::<B, CK, _>(
            AllReduceBackward(PhantomData),
            guard,
            comm.clone(),
            out,
        ))
    }

    fn broadcast_float<C: Communicator + Debug + 'static>(
        comm: &HostCollective<C>,
        value: FloatTensor<Self>,
        root: u32,
    ) -> Result<FloatTensor<Self>, TensorCollectiveError> {
        let (x, guard) = value.into_parts();
        let out = B::broadcast_float(comm, x, root)?;
        Ok(record::<B, CK, _>(
            BroadcastBackward(PhantomData),
            guard,
            (comm.clone(), root),
            out,
        ))
    }

    fn all_gather_int<C: Communicator + Debug + 'static>(
        comm: &HostCollective<C>,
        value: IntTensor<Self>,
    ) -> Result<IntTensor<Self>, TensorCollectiveError> {
        B::all_gather_int(comm, value)
    }

    fn all_to_all_v_float<C: Communicator + Debug + 'static>(
        comm: &HostCollective<C>,
        value: FloatTensor<Self>,
        send_counts: &[usize],
    ) -> Result<(FloatTensor<Self>, Vec<usize>), TensorCollectiveError> {
        let (x, guard) = value.into_parts();
        let (out, received) = B::all_to_all_v_float(comm, x, send_counts)?;
        let state = (comm.clone(), send_counts.to_vec(), received.clone());
        Ok((
            record::<B, CK, _>(AllToAllVBackward(PhantomData), guard, state, out),
            received,
        ))
    }

    fn all_to_all_v_int<C: Communicator + Debug + 'static>(
        comm: &HostCollective<C>,
        value: IntTensor<Self>,
        send_counts: &[usize],
    ) -> Result<(IntTensor<Self>, Vec<usize>), TensorCollectiveError> {
        B::all_to_all_v_int(comm, value, send_counts)
    }
}
