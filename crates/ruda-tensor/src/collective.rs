//! Explicit rank communicators for floating tensor collectives.
//!
//! The trait hierarchy of ruda's tensor contract, as the seed spells it,
//! plus [`NeighbourTensorExchange`], the row exchange with chosen peers that
//! halo exchanges need. It is the facade of the one implementation: every
//! [`crate::Group`] ([`crate::HostCollective`] over any `ruda-comm`
//! communicator) implements all of it for every [`crate::DistBackend`],
//! through the operations of [`crate::ops`] (on `Autodiff`, with their
//! adjoints).
//!
//! The backend cannot be inferred from a primitive tensor, so calls name
//! it: `TensorCollective::<Autodiff<Flex>>::all_gather_float(&group, x)`.
//! The tensor methods ([`crate::TensorExt`]) need no such annotation.
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

use crate::backend::DistBackend;
use crate::error::{CountProblem, Error, TensorOp};
use crate::group::Group;
use crate::ops::{
    AllReduce, AllToAllV, Broadcast, Expect, Gather, ReduceScatter, apply, apply_planned,
};

impl<B: DistBackend, G: Group> TensorCollective<B> for G {
    type Error = Error;

    fn world_size(&self) -> u32 {
        self.size() as u32
    }

    fn all_gather_float(&self, value: FloatTensor<B>) -> Result<FloatTensor<B>, Error> {
        apply::<B, _, _>(self, Gather::contract(), value)
    }

    fn reduce_scatter_sum(&self, value: FloatTensor<B>) -> Result<FloatTensor<B>, Error> {
        apply::<B, _, _>(self, ReduceScatter::contract(), value)
    }
}

impl<B: DistBackend, G: Group> ReplicatedTensorCollective<B> for G {
    fn all_reduce_sum(&self, value: FloatTensor<B>) -> Result<FloatTensor<B>, Error> {
        apply::<B, _, _>(self, AllReduce::contract(), value)
    }
}

impl<B: DistBackend, G: Group> BroadcastTensorCollective<B> for G {
    fn rank(&self) -> u32 {
        Group::rank(self) as u32
    }

    fn broadcast_float(&self, value: FloatTensor<B>, root: u32) -> Result<FloatTensor<B>, Error> {
        apply::<B, _, _>(self, Broadcast::contract(root as usize), value)
    }
}

impl<B: DistBackend, G: Group> IntegerTensorCollective<B> for G {
    fn all_gather_int(&self, value: IntTensor<B>) -> Result<IntTensor<B>, Error> {
        crate::ints::all_gather_int::<B, G>(self, TensorOp::AllGatherInt, value, 0, true)
    }
}

impl<B: DistBackend, G: Group> VariableTensorCollective<B> for G {
    fn all_to_all_v_float(
        &self,
        value: FloatTensor<B>,
        send_counts: &[usize],
    ) -> Result<VariableTensorExchange<FloatTensor<B>>, Error> {
        let op = AllToAllV::new(TensorOp::AllToAllVFloat, send_counts);
        let (value, plan) = apply_planned::<B, _, _>(self, op, value)?;
        Ok(VariableTensorExchange {
            value,
            receive_counts: plan.recv,
        })
    }

    fn all_to_all_v_int(
        &self,
        value: IntTensor<B>,
        send_counts: &[usize],
    ) -> Result<VariableTensorExchange<IntTensor<B>>, Error> {
        let (value, receive_counts) = crate::ints::all_to_all_int::<B, G>(
            self,
            TensorOp::AllToAllVInt,
            value,
            0,
            send_counts,
        )?;
        Ok(VariableTensorExchange {
            value,
            receive_counts,
        })
    }
}

impl<B: DistBackend, G: Group> NeighbourTensorExchange<B> for G {
    /// Checks the plan on every rank in the one exchange of the call, packs
    /// the blocks in destination order, exchanges them (the adjoint sends
    /// the gradients home) and slices out the requested blocks.
    fn exchange_rows_float(
        &self,
        value: FloatTensor<B>,
        sends: &[(u32, usize)],
        receive_from: &[u32],
    ) -> Result<Vec<FloatTensor<B>>, Error> {
        use burn_backend::TensorMetadata;
        let n = self.size();
        let mut send: Vec<Option<usize>> = alloc::vec![None; n];
        let mut expect = alloc::vec![Expect::Nothing; n];
        let mut problem = None;
        let bad = |peer: usize| {
            Some(crate::agreement::Problem::Counts(CountProblem::BadPeer {
                peer,
                ranks: n,
            }))
        };
        for &(d, rows) in sends {
            match send.get_mut(d as usize) {
                Some(slot @ None) => *slot = Some(rows),
                _ => problem = problem.or(bad(d as usize)),
            }
        }
        for &s in receive_from {
            match expect.get_mut(s as usize) {
                Some(e @ Expect::Nothing) => *e = Expect::Block,
                _ => problem = problem.or(bad(s as usize)),
            }
        }
        let rows = value.shape().first().copied().unwrap_or(0);
        let sum = sends.iter().try_fold(0usize, |a, s| a.checked_add(s.1));
        if sum != Some(rows) {
            problem = problem.or(Some(crate::agreement::Problem::Counts(CountProblem::Sum {
                sum: sum.unwrap_or(usize::MAX),
                rows,
            })));
        }
        // Pack the blocks in destination order.
        let in_order = sends.windows(2).all(|w| w[0].0 < w[1].0);
        let packed = if in_order || problem.is_some() {
            value
        } else {
            let mut blocks: Vec<(u32, usize, usize)> = Vec::with_capacity(sends.len());
            let mut off = 0;
            for &(d, r) in sends {
                blocks.push((d, off, r));
                off += r;
            }
            blocks.sort_by_key(|b| b.0);
            let parts = blocks
                .iter()
                .map(|&(_, s, r)| crate::layout::narrow::<B>(value.clone(), 0, s, r))
                .collect();
            B::float_cat(parts, 0)
        };
        let op =
            AllToAllV::neighbours(TensorOp::ExchangeRowsFloat, send, expect).with_problem(problem);
        let (received, plan) = apply_planned::<B, _, _>(self, op, packed)?;
        let starts = crate::layout::starts(&plan.recv);
        Ok(receive_from
            .iter()
            .map(|&s| {
                let s = s as usize;
                crate::layout::narrow::<B>(received.clone(), 0, starts[s], plan.recv[s])
            })
            .collect())
    }
}
