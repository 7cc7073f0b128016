//! The communicator contract every transport implements.

use crate::{CommError, Element, RankHistory, ReduceOp, ReplicaGroups};

/// A group of ranks that perform blocking, typed collectives together.
///
/// Every rank of the group must call the same collectives in the same order
/// with matching arguments. Before any data moves, a transport checks every
/// buffer length against the counts of the call; a mismatch is an error on
/// every rank of the call (never a truncation). Counts are in elements.
///
/// Point-to-point calls (`send`, `recv`, `send_recv`) involve only the two
/// ranks named; messages between one pair arrive in the order sent.
///
/// # Example
/// ```
/// use ruda_comm::{Communicator, LocalWorld, ReduceOp};
/// let sums = LocalWorld::new(3).run(|comm| {
///     let mut x = vec![comm.rank() as f64; 2];
///     comm.all_reduce(&mut x, ReduceOp::Sum)?;
///     Ok::<_, ruda_comm::CommError>(x)
/// }).unwrap();
/// assert!(sums.iter().all(|x| x == &vec![3.0, 3.0]));
/// ```
pub trait Communicator: Send + Sync + Sized {
    /// This rank's index in the group, in `0..size()`.
    fn rank(&self) -> usize;

    /// Number of ranks in the group, at least 1.
    fn size(&self) -> usize;

    /// The world rank of this communicator's rank `r` (for a world
    /// communicator, `r` itself; for a sub-communicator from
    /// [`Communicator::split`], the rank it has in the world it was split
    /// from).
    ///
    /// # Example
    /// ```
    /// use ruda_comm::{Communicator, LocalWorld};
    /// let w = LocalWorld::new(4).run(|c| {
    ///     let odd = c.split(Some((c.rank() % 2) as u32), 0)?.unwrap();
    ///     Ok::<_, ruda_comm::CommError>(odd.world_rank(1))
    /// }).unwrap();
    /// assert_eq!(w, vec![2, 3, 2, 3]);
    /// ```
    fn world_rank(&self, r: usize) -> usize;

    /// How many collective calls (every operation but `send`, `recv` and
    /// `send_recv`) this rank has made on this communicator: the sequence
    /// number its next collective takes. A call refused before it starts
    /// (e.g. concurrent use) takes none. Every rank of a group sees the
    /// same value between the same two collectives, so layers above use it
    /// to check that every rank is at the same call.
    ///
    /// # Example
    /// ```
    /// use ruda_comm::{Communicator, LocalWorld};
    /// let s = LocalWorld::new(2).run(|c| { c.barrier()?; Ok::<_, ruda_comm::CommError>(c.seq()) }).unwrap();
    /// assert_eq!(s, vec![1, 1]);
    /// ```
    fn seq(&self) -> u64;

    /// This rank's recent calls on this communicator, oldest first (the
    /// flight recorder; see [`crate::RankHistory`]).
    ///
    /// # Example
    /// ```
    /// use ruda_comm::{Communicator, LocalWorld};
    /// let h = LocalWorld::new(1).run(|c| Ok::<_, ruda_comm::CommError>(c.flight_record())).unwrap();
    /// assert!(h[0].calls.is_empty());
    /// ```
    fn flight_record(&self) -> RankHistory;

    /// Split the group into sub-groups (collective over this group).
    ///
    /// Ranks that pass the same `Some(color)` form one sub-communicator,
    /// ordered by `key`, then by rank in this group. `None` leaves the rank
    /// out: it gets `Ok(None)`.
    ///
    /// # Errors
    /// The collective errors ([`CommError::Desync`], [`CommError::Timeout`],
    /// [`CommError::PeerFailure`]); [`CommError::InvalidArgument`] for a color
    /// the transport cannot represent.
    ///
    /// # Example
    /// ```
    /// use ruda_comm::{Communicator, LocalWorld};
    /// let sizes = LocalWorld::new(4).run(|comm| {
    ///     let sub = comm.split(Some((comm.rank() % 2) as u32), 0)?.unwrap();
    ///     Ok::<_, ruda_comm::CommError>((sub.rank(), sub.size()))
    /// }).unwrap();
    /// assert_eq!(sizes, vec![(0, 2), (0, 2), (1, 2), (1, 2)]);
    /// ```
    fn split(&self, color: Option<u32>, key: i32) -> Result<Option<Self>, CommError>;

    /// This rank's sub-communicator of `groups` (collective over this
    /// group; the XLA/NKI convention of replica groups): a rank's position
    /// in its listed group is its rank in the sub-communicator, and a rank
    /// no group lists gets `Ok(None)`. Every rank must pass the same
    /// groups; that is checked before the split (two small exchanges).
    ///
    /// # Errors
    /// [`CommError::InvalidArgument`] with reason
    /// [`crate::InvalidArgument::ReplicaGroups`] on every rank when ranks
    /// pass different groups ([`crate::ReplicaGroupsError::Differ`]) or a
    /// group names a rank the communicator does not have
    /// ([`crate::ReplicaGroupsError::OutOfRange`]); the errors of
    /// [`Communicator::split`] and of [`Communicator::all_gather`]. A list
    /// that [`ReplicaGroups::new`](crate::ReplicaGroups::new) rejects
    /// (overlapping or empty groups) is refused on the rank that builds it,
    /// before any exchange: build the same list on every rank, or a rank
    /// that returns early leaves its peers waiting in this call until it
    /// is noticed as gone (or the deadline).
    ///
    /// # Example
    /// ```
    /// use ruda_comm::{Communicator, LocalWorld, ReduceOp, ReplicaGroups};
    /// let groups = ReplicaGroups::new([vec![2, 0]]).unwrap(); // rank 1 in no group
    /// let out = LocalWorld::new(3).run(|comm| {
    ///     let Some(sub) = comm.replica_group(&groups)? else { return Ok(None) };
    ///     let mut x = [comm.rank() as f32 + 1.0];
    ///     sub.all_reduce(&mut x, ReduceOp::Sum)?;
    ///     Ok::<_, ruda_comm::CommError>(Some((sub.rank(), x[0])))
    /// }).unwrap();
    /// assert_eq!(out, vec![Some((1, 4.0)), None, Some((0, 4.0))]);
    /// ```
    fn replica_group(&self, groups: &ReplicaGroups) -> Result<Option<Self>, CommError> {
        crate::replica::split_by(self, groups)
    }

    /// Combine `buf` element-wise across ranks with `op`; every rank ends with
    /// the result, bit-identical on every rank.
    ///
    /// # Errors
    /// [`CommError::CountMismatch`] when the ranks' lengths differ;
    /// [`crate::InvalidArgument::AverageOfIntegers`] for `Mean` on integers;
    /// the collective errors.
    ///
    /// # Example
    /// ```
    /// use ruda_comm::{Communicator, LocalWorld, ReduceOp};
    /// let r = LocalWorld::new(2).run(|c| {
    ///     let mut v = [c.rank() as i32 + 1, 10];
    ///     c.all_reduce(&mut v, ReduceOp::Prod).map(|_| v)
    /// }).unwrap();
    /// assert_eq!(r[0], [2, 100]);
    /// ```
    fn all_reduce<T: Element>(&self, buf: &mut [T], op: ReduceOp) -> Result<(), CommError>;

    /// Concatenate every rank's `send` in rank order into `recv`, whose
    /// length must be `size() * send.len()`.
    ///
    /// # Errors
    /// [`CommError::CountMismatch`] when send lengths differ across ranks,
    /// [`CommError::LengthMismatch`] when `recv` has the wrong length; the
    /// collective errors.
    ///
    /// # Example
    /// ```
    /// use ruda_comm::{Communicator, LocalWorld};
    /// let r = LocalWorld::new(2).run(|c| {
    ///     let mut out = [0u8; 2];
    ///     c.all_gather(&[c.rank() as u8], &mut out).map(|_| out)
    /// }).unwrap();
    /// assert_eq!(r[1], [0, 1]);
    /// ```
    fn all_gather<T: Element>(&self, send: &[T], recv: &mut [T]) -> Result<(), CommError>;

    /// Concatenate rank `r`'s `send` (of `counts[r]` elements) in rank order
    /// into `recv` (of `counts.iter().sum()` elements). Zero counts are fine.
    ///
    /// # Errors
    /// [`CommError::LengthMismatch`] when `send` or `recv` do not fit
    /// `counts` or `counts.len() != size()`; [`CommError::CountMismatch`]
    /// when ranks pass different counts; the collective errors.
    ///
    /// # Example
    /// ```
    /// use ruda_comm::{Communicator, LocalWorld};
    /// let r = LocalWorld::new(2).run(|c| {
    ///     let send = vec![c.rank() as u32; c.rank() + 1];
    ///     let mut out = [9u32; 3];
    ///     c.all_gather_v(&send, &mut out, &[1, 2]).map(|_| out)
    /// }).unwrap();
    /// assert_eq!(r[0], [0, 1, 1]);
    /// ```
    fn all_gather_v<T: Element>(
        &self,
        send: &[T],
        recv: &mut [T],
        counts: &[usize],
    ) -> Result<(), CommError>;

    /// Reduce every rank's `send` element-wise and give rank `r` block `r`
    /// (`recv.len()` elements); `send.len()` must be `size() * recv.len()`.
    ///
    /// # Errors
    /// As [`Communicator::all_reduce`], plus [`CommError::LengthMismatch`]
    /// when `send` is not `size()` blocks of `recv.len()`.
    ///
    /// # Example
    /// ```
    /// use ruda_comm::{Communicator, LocalWorld, ReduceOp};
    /// let r = LocalWorld::new(2).run(|c| {
    ///     let mut out = [0f32; 1];
    ///     c.reduce_scatter(&[1.0, 2.0], &mut out, ReduceOp::Sum).map(|_| out[0])
    /// }).unwrap();
    /// assert_eq!(r, vec![2.0, 4.0]);
    /// ```
    fn reduce_scatter<T: Element>(
        &self,
        send: &[T],
        recv: &mut [T],
        op: ReduceOp,
    ) -> Result<(), CommError>;

    /// Reduce every rank's `send` (of `counts.iter().sum()` elements) and give
    /// rank `r` the block of `counts[r]` elements starting at
    /// `counts[..r].iter().sum()`.
    ///
    /// # Errors
    /// As [`Communicator::all_gather_v`] for the counts, plus the reduction
    /// errors of [`Communicator::all_reduce`].
    ///
    /// # Example
    /// ```
    /// use ruda_comm::{Communicator, LocalWorld, ReduceOp};
    /// let r = LocalWorld::new(2).run(|c| {
    ///     let mut out = vec![0i64; 1 + c.rank()];
    ///     c.reduce_scatter_v(&[1, 2, 3], &mut out, &[1, 2], ReduceOp::Sum).map(|_| out)
    /// }).unwrap();
    /// assert_eq!(r, vec![vec![2], vec![4, 6]]);
    /// ```
    fn reduce_scatter_v<T: Element>(
        &self,
        send: &[T],
        recv: &mut [T],
        counts: &[usize],
        op: ReduceOp,
    ) -> Result<(), CommError>;

    /// Copy `root`'s `buf` into every other rank's `buf`.
    ///
    /// # Errors
    /// [`crate::InvalidArgument::Root`] for a root outside the group,
    /// [`CommError::CountMismatch`] when lengths differ; the collective errors.
    ///
    /// # Example
    /// ```
    /// use ruda_comm::{Communicator, LocalWorld};
    /// let r = LocalWorld::new(3).run(|c| {
    ///     let mut v = [c.rank() as f64];
    ///     c.broadcast(&mut v, 2).map(|_| v[0])
    /// }).unwrap();
    /// assert_eq!(r, vec![2.0; 3]);
    /// ```
    fn broadcast<T: Element>(&self, buf: &mut [T], root: usize) -> Result<(), CommError>;

    /// Send block `j` of `send` to rank `j` and receive rank `i`'s block for
    /// this rank into block `i` of `recv`; both buffers hold `size()` equal
    /// blocks.
    ///
    /// # Errors
    /// [`CommError::LengthMismatch`] for lengths not a multiple of `size()`
    /// or `recv.len() != send.len()`, [`CommError::CountMismatch`] when the
    /// block size differs across ranks; the collective errors.
    ///
    /// # Example
    /// ```
    /// use ruda_comm::{Communicator, LocalWorld};
    /// let r = LocalWorld::new(2).run(|c| {
    ///     let me = c.rank() as u8 * 10;
    ///     let mut out = [0u8; 2];
    ///     c.all_to_all(&[me, me + 1], &mut out).map(|_| out)
    /// }).unwrap();
    /// assert_eq!(r, vec![[0, 10], [1, 11]]);
    /// ```
    fn all_to_all<T: Element>(&self, send: &[T], recv: &mut [T]) -> Result<(), CommError>;

    /// Variable all-to-all: block `j` of `send` (of `send_counts[j]`
    /// elements, blocks in rank order) goes to rank `j`; rank `i`'s block
    /// for this rank lands in block `i` of `recv` (of `recv_counts[i]`
    /// elements). `recv_counts[i]` must equal what rank `i` actually sends.
    ///
    /// # Errors
    /// [`CommError::LengthMismatch`] when a buffer does not fit its counts
    /// or a count list is not `size()` long; [`CommError::CountMismatch`]
    /// when a receive count differs from the peer's send count; the
    /// collective errors.
    ///
    /// # Example
    /// ```
    /// use ruda_comm::{Communicator, LocalWorld};
    /// let r = LocalWorld::new(2).run(|c| {
    ///     // rank 0 sends nothing to itself and two values to rank 1;
    ///     // rank 1 sends one value to each.
    ///     let (send, sc, rc): (Vec<i32>, [usize; 2], [usize; 2]) = if c.rank() == 0 {
    ///         (vec![5, 6], [0, 2], [0, 1])
    ///     } else {
    ///         (vec![7, 8], [1, 1], [2, 1])
    ///     };
    ///     let mut out = vec![0; rc.iter().sum()];
    ///     c.all_to_all_v(&send, &sc, &mut out, &rc).map(|_| out)
    /// }).unwrap();
    /// assert_eq!(r, vec![vec![7], vec![5, 6, 8]]);
    /// ```
    fn all_to_all_v<T: Element>(
        &self,
        send: &[T],
        send_counts: &[usize],
        recv: &mut [T],
        recv_counts: &[usize],
    ) -> Result<(), CommError>;

    /// [`Communicator::all_gather`] into a new vector of `size() * send.len()`
    /// elements. Transports override it to skip initialising the output.
    ///
    /// # Errors
    /// As [`Communicator::all_gather`].
    ///
    /// # Example
    /// ```
    /// use ruda_comm::{Communicator, LocalWorld};
    /// let r = LocalWorld::new(2).run(|c| c.all_gather_vec(&[c.rank() as u32])).unwrap();
    /// assert_eq!(r[0], vec![0, 1]);
    /// ```
    fn all_gather_vec<T: Element>(&self, send: &[T]) -> Result<Vec<T>, CommError> {
        let len = send.len().checked_mul(self.size()).unwrap_or(0);
        let mut out = vec![T::zeroed(); len];
        self.all_gather(send, &mut out)?;
        Ok(out)
    }

    /// [`Communicator::reduce_scatter`] into a new vector of
    /// `send.len() / size()` elements.
    ///
    /// # Errors
    /// As [`Communicator::reduce_scatter`] (a `send` that does not split into
    /// `size()` blocks is a [`CommError::LengthMismatch`]).
    ///
    /// # Example
    /// ```
    /// use ruda_comm::{Communicator, LocalWorld, ReduceOp};
    /// let r = LocalWorld::new(2).run(|c| c.reduce_scatter_vec(&[1i64, 2], ReduceOp::Sum)).unwrap();
    /// assert_eq!(r, vec![vec![2], vec![4]]);
    /// ```
    fn reduce_scatter_vec<T: Element>(
        &self,
        send: &[T],
        op: ReduceOp,
    ) -> Result<Vec<T>, CommError> {
        let mut out = vec![T::zeroed(); send.len() / self.size()];
        self.reduce_scatter(send, &mut out, op)?;
        Ok(out)
    }

    /// [`Communicator::all_to_all_v`] into a new vector of
    /// `recv_counts.iter().sum()` elements.
    ///
    /// # Errors
    /// As [`Communicator::all_to_all_v`].
    ///
    /// # Example
    /// ```
    /// use ruda_comm::{Communicator, LocalWorld};
    /// let r = LocalWorld::new(2).run(|c| {
    ///     let me = c.rank() as u8;
    ///     c.all_to_all_v_vec(&[me, me], &[1, 1], &[1, 1])
    /// }).unwrap();
    /// assert_eq!(r[1], vec![0, 1]);
    /// ```
    fn all_to_all_v_vec<T: Element>(
        &self,
        send: &[T],
        send_counts: &[usize],
        recv_counts: &[usize],
    ) -> Result<Vec<T>, CommError> {
        // An overflowing sum cannot be a buffer's length: pass an empty one
        // and let the call refuse the counts on every rank.
        let len = recv_counts
            .iter()
            .try_fold(0usize, |a, &c| a.checked_add(c))
            .unwrap_or(0);
        let mut out = vec![T::zeroed(); len];
        self.all_to_all_v(send, send_counts, &mut out, recv_counts)?;
        Ok(out)
    }

    /// Send `buf` to rank `dest`; returns once `dest` has received it.
    ///
    /// # Errors
    /// [`crate::InvalidArgument::Peer`] / [`crate::InvalidArgument::SelfMessage`];
    /// [`CommError::LengthMismatch`] when the receiver's buffer has another
    /// length (reported on both sides); timeout and peer failure.
    ///
    /// # Example
    /// ```
    /// use ruda_comm::{Communicator, LocalWorld};
    /// let r = LocalWorld::new(2).run(|c| {
    ///     let mut v = [0u32; 2];
    ///     if c.rank() == 0 { c.send(&[4u32, 2], 1)?; } else { c.recv(&mut v, 0)?; }
    ///     Ok::<_, ruda_comm::CommError>(v)
    /// }).unwrap();
    /// assert_eq!(r[1], [4, 2]);
    /// ```
    fn send<T: Element>(&self, buf: &[T], dest: usize) -> Result<(), CommError>;

    /// Receive exactly `buf.len()` elements from rank `source`.
    ///
    /// # Errors
    /// As [`Communicator::send`].
    ///
    /// # Example
    /// See [`Communicator::send`].
    fn recv<T: Element>(&self, buf: &mut [T], source: usize) -> Result<(), CommError>;

    /// Send `send` to `dest` and receive `recv` from `source` at once, so
    /// that rings and exchanges cannot deadlock. `dest` and `source` may
    /// both be this rank (a local copy), but not only one of them.
    ///
    /// # Errors
    /// As [`Communicator::send`]; [`crate::InvalidArgument::SelfMessage`]
    /// when exactly one of `dest` and `source` is this rank (the message to
    /// or from oneself could never be matched).
    ///
    /// # Example
    /// ```
    /// use ruda_comm::{Communicator, LocalWorld};
    /// let r = LocalWorld::new(3).run(|c| {
    ///     let n = c.size();
    ///     let mut got = [0usize as u32];
    ///     c.send_recv(&[c.rank() as u32], (c.rank() + 1) % n, &mut got, (c.rank() + n - 1) % n)
    ///         .map(|_| got[0])
    /// }).unwrap();
    /// assert_eq!(r, vec![2, 0, 1]);
    /// ```
    fn send_recv<T: Element>(
        &self,
        send: &[T],
        dest: usize,
        recv: &mut [T],
        source: usize,
    ) -> Result<(), CommError>;

    /// Wait until every rank of the group has called `barrier`.
    ///
    /// # Errors
    /// The collective errors.
    ///
    /// # Example
    /// ```
    /// use ruda_comm::{Communicator, LocalWorld};
    /// LocalWorld::new(2).run(|c| c.barrier()).unwrap();
    /// ```
    fn barrier(&self) -> Result<(), CommError>;
}
