//! A communicator that measures how long its rank spends in collectives.
//!
//! [`TimedComm`] wraps any [`Communicator`] and adds the wall time of every
//! call (waiting for slower peers included) to a counter shared with the
//! sub-groups it splits into, so one counter per rank covers the whole
//! process grid — forward and backward passes alike. The demo and `ruda
//! bench sht` use it to split a step into computation and communication.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use ruda_comm::{CommError, Communicator, Element, RankHistory, ReduceOp};

/// `inner`, timing every call into a counter shared with its sub-groups.
///
/// # Example
/// ```
/// use ruda_cli::timed_comm::TimedComm;
/// use ruda_comm::{Communicator, LocalWorld, ReduceOp};
/// let spent = LocalWorld::new(2).run(|c| {
///     let c = TimedComm::new(c);
///     let mut x = [1.0f64];
///     c.all_reduce(&mut x, ReduceOp::Sum)?;
///     Ok::<_, ruda_comm::CommError>(c.spent())
/// }).unwrap();
/// assert!(spent.iter().all(|d| !d.is_zero()));
/// ```
#[derive(Debug)]
pub struct TimedComm<C> {
    inner: C,
    nanos: Arc<AtomicU64>,
}

impl<C> TimedComm<C> {
    /// Wrap `inner` with a new counter.
    pub fn new(inner: C) -> Self {
        TimedComm {
            inner,
            nanos: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Time spent in this communicator and the groups split from it.
    pub fn spent(&self) -> Duration {
        Duration::from_nanos(self.nanos.load(Ordering::Relaxed))
    }

    /// A handle that reads the same counter after `self` has moved into a
    /// process grid.
    pub fn clock(&self) -> CommClock {
        CommClock(self.nanos.clone())
    }

    fn timed<R>(&self, f: impl FnOnce(&C) -> R) -> R {
        let t = Instant::now();
        let r = f(&self.inner);
        let ns = u64::try_from(t.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.nanos.fetch_add(ns, Ordering::Relaxed);
        r
    }
}

/// Reads the counter of a [`TimedComm`] (see [`TimedComm::clock`]).
#[derive(Clone, Debug)]
pub struct CommClock(Arc<AtomicU64>);

impl CommClock {
    /// A clock on `counter` (nanoseconds), shared with the timer that
    /// fills it (see [`crate::timed_group::TimedGroup`]).
    pub(crate) fn from_counter(counter: Arc<AtomicU64>) -> Self {
        CommClock(counter)
    }

    /// Time spent in collectives so far.
    pub fn spent(&self) -> Duration {
        Duration::from_nanos(self.0.load(Ordering::Relaxed))
    }
}

impl<C: Communicator> Communicator for TimedComm<C> {
    fn rank(&self) -> usize {
        self.inner.rank()
    }

    fn size(&self) -> usize {
        self.inner.size()
    }

    fn world_rank(&self, r: usize) -> usize {
        self.inner.world_rank(r)
    }

    fn seq(&self) -> u64 {
        self.inner.seq()
    }

    fn flight_record(&self) -> RankHistory {
        self.inner.flight_record()
    }

    fn split(&self, color: Option<u32>, key: i32) -> Result<Option<Self>, CommError> {
        let sub = self.timed(|c| c.split(color, key))?;
        Ok(sub.map(|inner| TimedComm {
            inner,
            nanos: self.nanos.clone(),
        }))
    }

    fn all_reduce<T: Element>(&self, buf: &mut [T], op: ReduceOp) -> Result<(), CommError> {
        self.timed(|c| c.all_reduce(buf, op))
    }

    fn all_gather<T: Element>(&self, send: &[T], recv: &mut [T]) -> Result<(), CommError> {
        self.timed(|c| c.all_gather(send, recv))
    }

    fn all_gather_v<T: Element>(
        &self,
        send: &[T],
        recv: &mut [T],
        counts: &[usize],
    ) -> Result<(), CommError> {
        self.timed(|c| c.all_gather_v(send, recv, counts))
    }

    fn reduce_scatter<T: Element>(
        &self,
        send: &[T],
        recv: &mut [T],
        op: ReduceOp,
    ) -> Result<(), CommError> {
        self.timed(|c| c.reduce_scatter(send, recv, op))
    }

    fn reduce_scatter_v<T: Element>(
        &self,
        send: &[T],
        recv: &mut [T],
        counts: &[usize],
        op: ReduceOp,
    ) -> Result<(), CommError> {
        self.timed(|c| c.reduce_scatter_v(send, recv, counts, op))
    }

    fn broadcast<T: Element>(&self, buf: &mut [T], root: usize) -> Result<(), CommError> {
        self.timed(|c| c.broadcast(buf, root))
    }

    fn all_to_all<T: Element>(&self, send: &[T], recv: &mut [T]) -> Result<(), CommError> {
        self.timed(|c| c.all_to_all(send, recv))
    }

    fn all_to_all_v<T: Element>(
        &self,
        send: &[T],
        send_counts: &[usize],
        recv: &mut [T],
        recv_counts: &[usize],
    ) -> Result<(), CommError> {
        self.timed(|c| c.all_to_all_v(send, send_counts, recv, recv_counts))
    }

    fn all_gather_vec<T: Element>(&self, send: &[T]) -> Result<Vec<T>, CommError> {
        self.timed(|c| c.all_gather_vec(send))
    }

    fn reduce_scatter_vec<T: Element>(
        &self,
        send: &[T],
        op: ReduceOp,
    ) -> Result<Vec<T>, CommError> {
        self.timed(|c| c.reduce_scatter_vec(send, op))
    }

    fn all_to_all_v_vec<T: Element>(
        &self,
        send: &[T],
        send_counts: &[usize],
        recv_counts: &[usize],
    ) -> Result<Vec<T>, CommError> {
        self.timed(|c| c.all_to_all_v_vec(send, send_counts, recv_counts))
    }

    fn send<T: Element>(&self, buf: &[T], dest: usize) -> Result<(), CommError> {
        self.timed(|c| c.send(buf, dest))
    }

    fn recv<T: Element>(&self, buf: &mut [T], source: usize) -> Result<(), CommError> {
        self.timed(|c| c.recv(buf, source))
    }

    fn send_recv<T: Element>(
        &self,
        send: &[T],
        dest: usize,
        recv: &mut [T],
        source: usize,
    ) -> Result<(), CommError> {
        self.timed(|c| c.send_recv(send, dest, recv, source))
    }

    fn barrier(&self) -> Result<(), CommError> {
        self.timed(|c| c.barrier())
    }
}
