//! Nonblocking point-to-point: [`Exchange`], with `isend` / `irecv`
//! posted and carried out together at a wait, so rings, halos and
//! pipeline schedules ("everyone sends, then everyone receives") cannot
//! deadlock; each operation differentiable (the adjoint of an isend is a
//! receive of the gradient, that of an irecv a send of it).
//!
//! The rules are on [`Exchange`].

mod ops;
mod posted;
mod progress;

use alloc::sync::Arc;
use core::marker::PhantomData;
use std::sync::Mutex;

use burn_tensor::{Device, Tensor};

use crate::backend::DistBackend;
use crate::error::Error;
use crate::group::Group;
use crate::ops::apply;
use crate::p2p::{PairPlan, receipt_shape};
use crate::route::routed;

use ops::{Delivered, PostRecv, PostSend, check_peer};
use posted::{Queue, Slot, Want, lock};
use progress::drive;

/// The dimensions of the empty tensor an irecv is posted with.
const ONE: usize = 1;

/// Posted point-to-point operations over a group, carried out together
/// when one is waited for. Cloning is cheap and shares the posted
/// operations. An exchange with several posts and one wait is the batched
/// form (PyTorch's `batch_isend_irecv`).
///
/// # Semantics
/// - [`Exchange::isend`] and [`Exchange::irecv`] only *post*: nothing
///   moves until a wait ([`Incoming::wait`], [`Exchange::wait`],
///   [`Exchange::send_recv`], or the backward pass of an isend's receipt,
///   which needs its gradient).
/// - Every wait is a wait-all pass, repeated until what it waits for is
///   done: it visits every peer it has posted operations for, in ascending
///   rank order, and at each blocks until that peer's own wait visits this
///   rank. There the two ranks pair up their posted operations in posting
///   order (this rank's k-th forward send to the peer is the peer's k-th
///   forward receive from this rank; gradients, sent and received by
///   backward passes, pair among themselves); what does not pair up yet
///   stays posted for a later wait.
/// - So a rank must not wait while a peer it posted for cannot reach a
///   wait of its own. When every rank posts everything it sends and
///   receives in a step before waiting (rings, halos, exchanges with
///   neighbours, pipeline stages), the pairs are served in one global
///   order and no cycle of waits can form. A rank that waits for a peer
///   which is itself blocked on a third rank waiting for the first is a
///   cycle (it would be none with MPI's eager sends): the communicator's
///   timeout ends it.
/// - Before any data moves, each pair checks the messages that pair up
///   (number of dimensions, a dtype the tensor layer moves, autodiff
///   tracking, and in a backward pass which forward message a gradient
///   answers); the received tensor takes the sender's shape and dtype. A
///   disagreement is the same [`Error::PointToPoint`] on both ranks (the
///   lower rank's finding first). A pair where nothing pairs up (both only
///   send, both only receive, or forward messages meet only backward
///   ones) is [`PairProblem::Stuck`](crate::PairProblem::Stuck) on both
///   ranks (also when each is in fact waiting for another peer: a wait
///   meets every peer it posted for); two exchanges with different tags
///   meeting is
///   [`PairProblem::Tag`](crate::PairProblem::Tag). A peer that never
///   waits ends in the communicator's timeout.
/// - The gradient sends of a backward pass (the adjoints of irecvs) are
///   posted, not carried out: the next wait on the exchange moves them
///   (pipelines pair "send the gradient back" with "receive the next
///   activation" this way). Call [`Exchange::wait`] after the last
///   backward pass so none is left posted.
/// - Within one backward pass, an isend's receipt waits for its gradient
///   where Burn's backward pass reaches it. When the ranks' gradients go
///   round a cycle (a ring), post the gradients this rank sends first
///   (the backward pass of the received tensors, then that of the
///   receipts, as two `backward` calls); otherwise each rank waits for
///   the other's gradient first (`Stuck` on two ranks, the timeout on
///   more).
/// - After an error, every operation posted on the exchange is dropped and
///   every pending [`Incoming`] returns the error; peers that were waiting
///   for the dropped operations run into their timeout.
/// - A dropped [`Incoming`] does not cancel its receive: the tensor still
///   arrives (and, if tracked, its gradient never goes back, which the
///   sender's backward pass finds as a timeout).
/// - Several exchanges between the same ranks need their own tags
///   ([`Exchange::tagged`]) and their waits in the same order on both
///   ranks; an exchange is used from one thread at a time. Do not mix an
///   exchange with blocking [`crate::TensorExt::send`] / [`crate::recv`]
///   between the same two ranks while operations are posted: their
///   messages would meet (a typed error on both, not a wrong tensor).
///
/// # Example
/// Every rank sends to the next and receives from the previous (a ring
/// shift), which blocking sends could not do without an order:
/// ```
/// use burn_tensor::{Device, Tensor};
/// use ruda_tensor::prelude::*;
/// use ruda_tensor::Exchange;
///
/// let got = LocalWorld::new(3).run(|c| {
///     let world = HostCollective::new(c);
///     let (me, n) = (world.rank(), world.size());
///     let ex = Exchange::new(&world);
///     ex.isend(Tensor::<1>::from_floats([me as f32], &Device::flex()), (me + 1) % n)?;
///     let incoming = ex.irecv::<1>((me + n - 1) % n, &Device::flex())?;
///     let x = incoming.wait()?;
///     ex.wait()?; // nothing left posted
///     Ok::<_, Error>(x.into_data().try_to_vec::<f32>().unwrap()[0])
/// }).unwrap();
/// assert_eq!(got, vec![2.0, 0.0, 1.0]);
/// ```
#[derive(Clone, Debug)]
pub struct Exchange<G: Group> {
    group: G,
    queue: Arc<Queue<G>>,
}

impl<G: Group> Exchange<G> {
    /// An exchange over `group`, with nothing posted.
    ///
    /// # Example
    /// See [`Exchange`].
    pub fn new(group: &G) -> Self {
        Self::tagged(group, 0)
    }

    /// An exchange over `group` with its own `tag`, for several exchanges
    /// that run at once between the same ranks (pairs whose tags differ
    /// are [`PairProblem::Tag`](crate::PairProblem::Tag) errors on both
    /// ranks, never each other's tensors). [`Exchange::new`] is tag 0.
    ///
    /// # Example
    /// ```
    /// use burn_tensor::{Device, Tensor};
    /// use ruda_tensor::prelude::*;
    /// use ruda_tensor::Exchange;
    /// LocalWorld::new(2).run(|c| {
    ///     let world = HostCollective::new(c);
    ///     let peer = 1 - world.rank();
    ///     let (a, b) = (Exchange::tagged(&world, 1), Exchange::tagged(&world, 2));
    ///     a.isend(Tensor::<1>::ones([1], &Device::flex()), peer)?;
    ///     let from_a = a.irecv::<1>(peer, &Device::flex())?.wait()?;
    ///     b.isend(Tensor::<1>::zeros([1], &Device::flex()), peer)?;
    ///     let from_b = b.irecv::<1>(peer, &Device::flex())?.wait()?;
    ///     assert_eq!(from_a.into_data().try_to_vec::<f32>().unwrap(), vec![1.0]);
    ///     assert_eq!(from_b.into_data().try_to_vec::<f32>().unwrap(), vec![0.0]);
    ///     Ok::<_, Error>(())
    /// }).unwrap();
    /// ```
    pub fn tagged(group: &G, tag: u32) -> Self {
        Exchange {
            group: group.clone(),
            queue: Arc::new(Queue::new(tag)),
        }
    }

    /// The group it runs over.
    ///
    /// # Example
    /// ```
    /// use ruda_tensor::prelude::*;
    /// use ruda_tensor::Exchange;
    /// LocalWorld::new(2).run(|c| {
    ///     let ex = Exchange::new(&HostCollective::new(c));
    ///     assert_eq!(ex.group().size(), 2);
    ///     Ok::<_, Error>(())
    /// }).unwrap();
    /// ```
    pub fn group(&self) -> &G {
        &self.group
    }

    /// How many operations are posted and not yet carried out.
    ///
    /// # Example
    /// ```
    /// use burn_tensor::{Device, Tensor};
    /// use ruda_tensor::prelude::*;
    /// use ruda_tensor::Exchange;
    /// LocalWorld::new(2).run(|c| {
    ///     let ex = Exchange::new(&HostCollective::new(c));
    ///     let peer = 1 - ex.group().rank();
    ///     ex.isend(Tensor::<1>::zeros([4], &Device::flex()), peer)?;
    ///     let r = ex.irecv::<1>(peer, &Device::flex())?;
    ///     assert_eq!(ex.posted(), 2);
    ///     r.wait()?;
    ///     assert_eq!(ex.posted(), 0);
    ///     Ok::<_, Error>(())
    /// }).unwrap();
    /// ```
    pub fn posted(&self) -> usize {
        self.queue.len()
    }

    /// Post a send of `x` to rank `dest`. The result is an empty receipt
    /// (`x`'s shape with its first axis 0); when `x` is tracked by
    /// autodiff, the receipt's backward pass receives `x`'s gradient from
    /// `dest` (posting that receive and waiting for it). The tensor moves
    /// at a later wait; `x` is kept until then.
    ///
    /// # Errors
    /// [`Error::InvalidPeer`] when `dest` is this rank or outside the
    /// group; a tensor on a backend ruda does not run on.
    ///
    /// # Example
    /// See [`Exchange`].
    pub fn isend<const D: usize>(&self, x: Tensor<D>, dest: usize) -> Result<Tensor<D>, Error> {
        check_peer(&self.group, dest)?;
        let op = PostSend {
            queue: self.queue.clone(),
            role: crate::linear_op::Role::forward(crate::TensorOp::Exchange),
            dest,
            tag: None,
        };
        let g = &self.group;
        routed!(x, D, burn_tensor::Float, |B, t| apply::<B, _, _>(g, op, t))
    }

    /// Post a receive of a tensor of `D` dimensions from rank `source`
    /// onto `device` (its shape and dtype are the sender's). When the
    /// sender's tensor is tracked, so is the result, and its backward
    /// pass posts the gradient's send back to `source` (so `device` must
    /// have autodiff).
    ///
    /// # Errors
    /// [`Error::InvalidPeer`] when `source` is this rank or outside the
    /// group.
    ///
    /// # Example
    /// See [`Exchange`].
    pub fn irecv<const D: usize>(
        &self,
        source: usize,
        device: &Device,
    ) -> Result<Incoming<D, G>, Error> {
        check_peer(&self.group, source)?;
        let slot: Arc<Slot> = Arc::new(Mutex::new(None));
        let op = PostRecv {
            queue: self.queue.clone(),
            source,
            want: Want {
                backward: false,
                ndim: D,
                autodiff: device.is_autodiff(),
                expect: None,
            },
            slot: slot.clone(),
        };
        let g = &self.group;
        let dummy = Tensor::<ONE>::zeros([0], device);
        let _: Tensor<ONE> = routed!(dummy, ONE, burn_tensor::Float, |B, t| B::run(g, op, (), t))?;
        Ok(Incoming {
            exchange: self.clone(),
            slot,
            source,
            device: device.clone(),
            dims: PhantomData,
        })
    }

    /// Carry out every posted operation (this rank's sends delivered, its
    /// receives arrived, ready for their [`Incoming::wait`]).
    ///
    /// # Errors
    /// [`Error::PointToPoint`] on both ranks of a pair that disagrees or
    /// is stuck; the communicator's errors (a peer that never waits ends
    /// in a timeout).
    ///
    /// # Example
    /// See [`Exchange`].
    pub fn wait(&self) -> Result<(), Error> {
        let queue = &self.queue;
        drive(&self.group, queue, &|| queue.len() == 0)
    }

    /// Send `x` to `dest` and receive a tensor from `source` onto
    /// `device` at once (isend, irecv, wait): the receipt of the send and
    /// the received tensor. Other posted operations may be carried out
    /// too.
    ///
    /// # Errors
    /// As [`Exchange::isend`], [`Exchange::irecv`] and [`Incoming::wait`].
    ///
    /// # Example
    /// ```
    /// use burn_tensor::{Device, Tensor};
    /// use ruda_tensor::prelude::*;
    /// use ruda_tensor::Exchange;
    /// let got = LocalWorld::new(2).run(|c| {
    ///     let world = HostCollective::new(c);
    ///     let peer = 1 - world.rank();
    ///     let mine = Tensor::<1>::from_floats([world.rank() as f32; 3], &Device::flex());
    ///     let (_, theirs) = Exchange::new(&world).send_recv(mine, peer, peer, &Device::flex())?;
    ///     Ok::<_, Error>(theirs.into_data().try_to_vec::<f32>().unwrap())
    /// }).unwrap();
    /// assert_eq!(got, vec![vec![1.0; 3], vec![0.0; 3]]);
    /// ```
    pub fn send_recv<const D: usize>(
        &self,
        x: Tensor<D>,
        dest: usize,
        source: usize,
        device: &Device,
    ) -> Result<(Tensor<D>, Tensor<D>), Error> {
        check_peer(&self.group, source)?;
        let receipt = self.isend(x, dest)?;
        let incoming = self.irecv::<D>(source, device)?;
        Ok((receipt, incoming.wait()?))
    }
}

/// A posted receive ([`Exchange::irecv`]): [`Incoming::wait`] returns its
/// tensor.
///
/// # Example
/// See [`Exchange`].
#[must_use = "a posted receive's tensor is only returned by `wait`"]
pub struct Incoming<const D: usize, G: Group> {
    exchange: Exchange<G>,
    slot: Arc<Slot>,
    source: usize,
    device: Device,
    dims: PhantomData<[(); D]>,
}

impl<const D: usize, G: Group> core::fmt::Debug for Incoming<D, G> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Incoming")
            .field("source", &self.source)
            .field("dims", &D)
            .field("ready", &self.is_ready())
            .finish()
    }
}

impl<const D: usize, G: Group> Incoming<D, G> {
    /// Whether the tensor has arrived (or the exchange failed), so that
    /// [`Incoming::wait`] returns without communicating.
    ///
    /// # Example
    /// ```
    /// use burn_tensor::{Device, Tensor};
    /// use ruda_tensor::prelude::*;
    /// use ruda_tensor::Exchange;
    /// LocalWorld::new(2).run(|c| {
    ///     let ex = Exchange::new(&HostCollective::new(c));
    ///     let peer = 1 - ex.group().rank();
    ///     ex.isend(Tensor::<1>::zeros([2], &Device::flex()), peer)?;
    ///     let r = ex.irecv::<1>(peer, &Device::flex())?;
    ///     assert!(!r.is_ready());
    ///     ex.wait()?;
    ///     assert!(r.is_ready());
    ///     r.wait().map(|_| ())
    /// }).unwrap();
    /// ```
    pub fn is_ready(&self) -> bool {
        lock(&self.slot).is_some()
    }

    /// The received tensor, carrying out the exchange's posted operations
    /// until it has arrived.
    ///
    /// # Errors
    /// As [`Exchange::wait`]; the error of an earlier wait that failed
    /// while this receive was posted.
    ///
    /// # Example
    /// See [`Exchange`].
    pub fn wait(self) -> Result<Tensor<D>, Error> {
        let slot = &self.slot;
        let g = &self.exchange.group;
        drive(g, &self.exchange.queue, &|| lock(slot).is_some())?;
        let lost = Error::ExchangeLost {
            op: crate::TensorOp::Exchange,
            rank: g.rank(),
            peer: self.source,
        };
        let arrived = lock(slot).take().ok_or(lost.clone())??;
        // A message's dtype is checked before it is received.
        let dtype = arrived.desc.dtype.ok_or(lost)?;
        let plan = PairPlan {
            shape: arrived.desc.shape.clone(),
            dtype,
            tracked: arrived.desc.tracked,
            tag: arrived.desc.tag,
        };
        let mut placeholder = Tensor::<D>::zeros(receipt_shape(&plan.shape), (&self.device, dtype));
        if plan.tracked {
            placeholder = placeholder.require_grad();
        }
        let op = Delivered {
            queue: self.exchange.queue.clone(),
            source: self.source,
            tensor: Arc::new(Mutex::new(Some(arrived.tensor))),
        };
        routed!(placeholder, D, burn_tensor::Float, |B, t| B::run(
            g,
            op,
            plan.clone(),
            t
        ))
    }
}
