//! [`AnyCommunicator`]: one communicator type over every transport, so
//! that code written once runs on threads or under `mpirun`.

use crate::{CommError, Communicator, Element, LocalCommunicator, RankHistory, ReduceOp};

/// A communicator of any transport: ranks as threads of this process
/// ([`LocalCommunicator`]) or, with feature `mpi`, MPI processes
/// (`MpiCommunicator`). [`crate::Launch`] hands one to every rank, so the
/// code that uses it (and the groups built on it, such as ruda-tensor's
/// `HostCollective<AnyCommunicator>`) has one type however the program was
/// started. Every call goes to the transport underneath, unchanged.
///
/// # Example
/// ```
/// use ruda_comm::{AnyCommunicator, Communicator, LocalWorld, ReduceOp};
/// let sums = LocalWorld::new(2).run(|c| {
///     let any = AnyCommunicator::from(c);
///     let mut x = [1.0f32];
///     any.all_reduce(&mut x, ReduceOp::Sum)?;
///     Ok::<_, ruda_comm::CommError>(x[0])
/// }).unwrap();
/// assert_eq!(sums, vec![2.0, 2.0]);
/// ```
#[derive(Debug)]
pub enum AnyCommunicator {
    /// Ranks are threads of this process.
    Local(LocalCommunicator),
    /// Ranks are MPI processes (boxed: an MPI communicator is much larger
    /// than a local one).
    #[cfg(feature = "mpi")]
    Mpi(Box<crate::MpiCommunicator>),
}

impl From<LocalCommunicator> for AnyCommunicator {
    fn from(c: LocalCommunicator) -> Self {
        AnyCommunicator::Local(c)
    }
}

#[cfg(feature = "mpi")]
impl From<crate::MpiCommunicator> for AnyCommunicator {
    fn from(c: crate::MpiCommunicator) -> Self {
        AnyCommunicator::Mpi(Box::new(c))
    }
}

impl AnyCommunicator {
    /// The transport's name: `"local"` or `"mpi"`.
    ///
    /// # Example
    /// ```
    /// use ruda_comm::{AnyCommunicator, LocalWorld};
    /// let names = LocalWorld::new(1).run(|c| Ok::<_, ()>(AnyCommunicator::from(c).transport())).unwrap();
    /// assert_eq!(names, vec!["local"]);
    /// ```
    pub fn transport(&self) -> &'static str {
        match self {
            AnyCommunicator::Local(_) => "local",
            #[cfg(feature = "mpi")]
            AnyCommunicator::Mpi(_) => "mpi",
        }
    }
}

/// Call `$call` on the transport underneath, as `$c`.
macro_rules! each {
    ($self:expr, |$c:ident| $call:expr) => {
        match $self {
            AnyCommunicator::Local($c) => $call,
            #[cfg(feature = "mpi")]
            AnyCommunicator::Mpi($c) => $call,
        }
    };
}

impl Communicator for AnyCommunicator {
    fn rank(&self) -> usize {
        each!(self, |c| c.rank())
    }

    fn size(&self) -> usize {
        each!(self, |c| c.size())
    }

    fn world_rank(&self, r: usize) -> usize {
        each!(self, |c| c.world_rank(r))
    }

    fn seq(&self) -> u64 {
        each!(self, |c| c.seq())
    }

    fn flight_record(&self) -> RankHistory {
        each!(self, |c| c.flight_record())
    }

    fn split(&self, color: Option<u32>, key: i32) -> Result<Option<Self>, CommError> {
        each!(self, |c| Ok(c.split(color, key)?.map(Into::into)))
    }

    fn replica_group(&self, groups: &crate::ReplicaGroups) -> Result<Option<Self>, CommError> {
        each!(self, |c| Ok(c.replica_group(groups)?.map(Into::into)))
    }

    fn all_reduce<T: Element>(&self, buf: &mut [T], op: ReduceOp) -> Result<(), CommError> {
        each!(self, |c| c.all_reduce(buf, op))
    }

    fn all_gather<T: Element>(&self, send: &[T], recv: &mut [T]) -> Result<(), CommError> {
        each!(self, |c| c.all_gather(send, recv))
    }

    fn all_gather_v<T: Element>(
        &self,
        send: &[T],
        recv: &mut [T],
        counts: &[usize],
    ) -> Result<(), CommError> {
        each!(self, |c| c.all_gather_v(send, recv, counts))
    }

    fn reduce_scatter<T: Element>(
        &self,
        send: &[T],
        recv: &mut [T],
        op: ReduceOp,
    ) -> Result<(), CommError> {
        each!(self, |c| c.reduce_scatter(send, recv, op))
    }

    fn reduce_scatter_v<T: Element>(
        &self,
        send: &[T],
        recv: &mut [T],
        counts: &[usize],
        op: ReduceOp,
    ) -> Result<(), CommError> {
        each!(self, |c| c.reduce_scatter_v(send, recv, counts, op))
    }

    fn broadcast<T: Element>(&self, buf: &mut [T], root: usize) -> Result<(), CommError> {
        each!(self, |c| c.broadcast(buf, root))
    }

    fn all_to_all<T: Element>(&self, send: &[T], recv: &mut [T]) -> Result<(), CommError> {
        each!(self, |c| c.all_to_all(send, recv))
    }

    fn all_to_all_v<T: Element>(
        &self,
        send: &[T],
        send_counts: &[usize],
        recv: &mut [T],
        recv_counts: &[usize],
    ) -> Result<(), CommError> {
        each!(self, |c| c.all_to_all_v(
            send,
            send_counts,
            recv,
            recv_counts
        ))
    }

    fn all_gather_vec<T: Element>(&self, send: &[T]) -> Result<Vec<T>, CommError> {
        each!(self, |c| c.all_gather_vec(send))
    }

    fn reduce_scatter_vec<T: Element>(
        &self,
        send: &[T],
        op: ReduceOp,
    ) -> Result<Vec<T>, CommError> {
        each!(self, |c| c.reduce_scatter_vec(send, op))
    }

    fn all_to_all_v_vec<T: Element>(
        &self,
        send: &[T],
        send_counts: &[usize],
        recv_counts: &[usize],
    ) -> Result<Vec<T>, CommError> {
        each!(self, |c| c.all_to_all_v_vec(send, send_counts, recv_counts))
    }

    fn send<T: Element>(&self, buf: &[T], dest: usize) -> Result<(), CommError> {
        each!(self, |c| c.send(buf, dest))
    }

    fn recv<T: Element>(&self, buf: &mut [T], source: usize) -> Result<(), CommError> {
        each!(self, |c| c.recv(buf, source))
    }

    fn send_recv<T: Element>(
        &self,
        send: &[T],
        dest: usize,
        recv: &mut [T],
        source: usize,
    ) -> Result<(), CommError> {
        each!(self, |c| c.send_recv(send, dest, recv, source))
    }

    fn barrier(&self) -> Result<(), CommError> {
        each!(self, |c| c.barrier())
    }
}
