//! A [`Group`] that measures how long its rank spends moving tensors.
//!
//! [`TimedGroup`] wraps any tensor-layer group — in particular the
//! device-resident [`ruda_tensor::DeviceGroup`], which has no communicator
//! to wrap with [`crate::timed_comm::TimedComm`] — and adds the wall time of
//! every exchange and data movement (waiting for slower peers included) to
//! a counter shared with the sub-groups it splits into.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use burn_backend::tensor::{Device, FloatTensor, IntTensor};
use burn_backend::{Backend, DType};
use ruda_comm::{ReduceOp, ReplicaGroups};
use ruda_tensor::{Error, Group, TensorOp};

use crate::timed_comm::CommClock;

/// `inner`, timing every call into a counter shared with its sub-groups.
///
/// # Example
/// ```
/// use burn_tensor::{Device, Tensor};
/// use ruda_cli::timed_group::TimedGroup;
/// use ruda_tensor::{DeviceWorld, TensorExt};
/// let spent = DeviceWorld::shared(2, Device::flex()).run(|g, d| {
///     let g = TimedGroup::new(g);
///     Tensor::<1>::from_floats([1.0, 2.0], d).all_reduce(&g)?;
///     Ok::<_, ruda_tensor::Error>(g.clock().spent())
/// }).unwrap();
/// assert!(spent.iter().all(|d| !d.is_zero()));
/// ```
#[derive(Debug, Clone)]
pub struct TimedGroup<G> {
    inner: G,
    nanos: Arc<AtomicU64>,
}

impl<G> TimedGroup<G> {
    /// Wrap `inner` with a new counter.
    pub fn new(inner: G) -> Self {
        TimedGroup {
            inner,
            nanos: Arc::new(AtomicU64::new(0)),
        }
    }

    /// A handle on the counter that outlives moving `self` into a grid.
    pub fn clock(&self) -> CommClock {
        CommClock::from_counter(self.nanos.clone())
    }

    fn timed<R>(&self, f: impl FnOnce(&G) -> R) -> R {
        let t = Instant::now();
        let r = f(&self.inner);
        let ns = u64::try_from(t.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.nanos.fetch_add(ns, Ordering::Relaxed);
        r
    }

    fn wrap(&self, inner: G) -> Self {
        TimedGroup {
            inner,
            nanos: self.nanos.clone(),
        }
    }
}

impl<G: Group> ruda_tensor::plumbing::Words for TimedGroup<G> {
    fn gather_words(&self, words: &[i64]) -> Result<Vec<i64>, Error> {
        self.timed(|g| g.exchange_words(words))
    }

    fn send_words(&self, words: &[i64], dest: usize) -> Result<(), Error> {
        self.timed(|g| g.send_words(words, dest))
    }

    fn recv_words(&self, words: &mut [i64], source: usize) -> Result<(), Error> {
        self.timed(|g| g.recv_words(words, source))
    }
}

impl<G: Group> Group for TimedGroup<G> {
    type Weak = (G::Weak, Arc<AtomicU64>);

    fn rank(&self) -> usize {
        self.inner.rank()
    }

    fn size(&self) -> usize {
        self.inner.size()
    }

    fn seq(&self) -> u64 {
        self.inner.seq()
    }

    fn downgrade(&self) -> Self::Weak {
        (self.inner.downgrade(), self.nanos.clone())
    }

    fn upgrade(weak: &Self::Weak) -> Option<Self> {
        G::upgrade(&weak.0).map(|inner| TimedGroup {
            inner,
            nanos: weak.1.clone(),
        })
    }

    fn split(&self, color: Option<u32>, key: i32) -> Result<Option<Self>, Error> {
        Ok(self.timed(|g| g.split(color, key))?.map(|g| self.wrap(g)))
    }

    fn replica_group(&self, groups: &ReplicaGroups) -> Result<Option<Self>, Error> {
        Ok(self
            .timed(|g| g.replica_group(groups))?
            .map(|g| self.wrap(g)))
    }

    fn gather_rows<B: Backend>(
        &self,
        op: TensorOp,
        x: FloatTensor<B>,
        rows: &[usize],
    ) -> Result<FloatTensor<B>, Error> {
        self.timed(|g| g.gather_rows::<B>(op, x, rows))
    }

    fn reduce_scatter_rows<B: Backend>(
        &self,
        op: TensorOp,
        x: FloatTensor<B>,
        rows: &[usize],
    ) -> Result<FloatTensor<B>, Error> {
        self.timed(|g| g.reduce_scatter_rows::<B>(op, x, rows))
    }

    fn sum<B: Backend>(&self, op: TensorOp, x: FloatTensor<B>) -> Result<FloatTensor<B>, Error> {
        self.timed(|g| g.sum::<B>(op, x))
    }

    fn reduce<B: Backend>(
        &self,
        op: TensorOp,
        x: FloatTensor<B>,
        reduce: ReduceOp,
    ) -> Result<FloatTensor<B>, Error> {
        self.timed(|g| g.reduce::<B>(op, x, reduce))
    }

    fn barrier(&self) -> Result<(), Error> {
        self.timed(|g| g.barrier())
    }

    fn send_float<B: Backend>(
        &self,
        op: TensorOp,
        x: FloatTensor<B>,
        dest: usize,
    ) -> Result<(), Error> {
        self.timed(|g| g.send_float::<B>(op, x, dest))
    }

    fn recv_float<B: Backend>(
        &self,
        op: TensorOp,
        shape: &[usize],
        dtype: DType,
        device: &Device<B>,
        source: usize,
    ) -> Result<FloatTensor<B>, Error> {
        self.timed(|g| g.recv_float::<B>(op, shape, dtype, device, source))
    }

    fn broadcast<B: Backend>(
        &self,
        op: TensorOp,
        x: FloatTensor<B>,
        root: usize,
    ) -> Result<FloatTensor<B>, Error> {
        self.timed(|g| g.broadcast::<B>(op, x, root))
    }

    fn exchange_rows<B: Backend>(
        &self,
        op: TensorOp,
        x: FloatTensor<B>,
        send_rows: &[usize],
        recv_rows: &[usize],
    ) -> Result<FloatTensor<B>, Error> {
        self.timed(|g| g.exchange_rows::<B>(op, x, send_rows, recv_rows))
    }

    fn gather_rows_int<B: Backend>(
        &self,
        op: TensorOp,
        x: IntTensor<B>,
        rows: &[usize],
    ) -> Result<IntTensor<B>, Error> {
        self.timed(|g| g.gather_rows_int::<B>(op, x, rows))
    }

    fn exchange_rows_int<B: Backend>(
        &self,
        op: TensorOp,
        x: IntTensor<B>,
        send_rows: &[usize],
        recv_rows: &[usize],
    ) -> Result<IntTensor<B>, Error> {
        self.timed(|g| g.exchange_rows_int::<B>(op, x, send_rows, recv_rows))
    }
}
