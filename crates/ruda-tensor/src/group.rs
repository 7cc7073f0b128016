//! [`Group`]: the ranks a tensor operation runs over, and how tensors move
//! between them. Every operation of the tensor layer (the seed's contract,
//! the primitives, the tensor methods) is written against this trait, so it
//! runs unchanged on any implementation: [`crate::HostCollective`] stages
//! tensors through host memory over any `ruda-comm` communicator;
//! [`crate::DeviceGroup`] keeps them on their Burn devices and moves them
//! with the backend's own tensor operations.
//!
//! The movement methods do no cross-rank checking of their own: the
//! operations that call them first reach agreement (one small exchange of
//! every rank's call, shapes and counts), so every rank passes consistent
//! arguments by the time data moves.

use alloc::vec::Vec;
use core::fmt::Debug;

use burn_backend::tensor::{Device, FloatTensor, IntTensor};
use burn_backend::{Backend, DType};
use ruda_comm::{ReduceOp, ReplicaGroups};

use crate::error::{Error, TensorOp};

/// A group of ranks that tensors move between (a communicator, the world or
/// any sub-group of it), seen from one rank.
///
/// Cheap to clone; every rank holds its own. Implemented by
/// [`crate::HostCollective`] (host-staged) and [`crate::DeviceGroup`]
/// (device-resident); the operations of this crate take `&impl Group`, so
/// they run on any implementation.
///
/// # Example
/// ```
/// use ruda_comm::LocalWorld;
/// use ruda_tensor::{Group, HostCollective};
/// let sizes = LocalWorld::new(4).run(|c| {
///     let world = HostCollective::new(c);
///     let pair = world.split(Some((world.rank() / 2) as u32), 0)?.unwrap();
///     Ok::<_, ruda_tensor::Error>((pair.rank(), pair.size()))
/// }).unwrap();
/// assert_eq!(sizes, vec![(0, 2), (1, 2), (0, 2), (1, 2)]);
/// ```
pub trait Group: plumbing::Words + Clone + Debug + Send + Sync + 'static {
    /// A handle that does not keep the group alive, held by backward steps
    /// (Burn's autodiff graph may outlive the rank that built it).
    type Weak: Clone + Debug + Send + Sync + 'static;

    /// This rank's index in the group.
    fn rank(&self) -> usize;

    /// Ranks in the group, at least 1.
    fn size(&self) -> usize;

    /// Collective calls this rank has made on the group so far (the same on
    /// every rank between the same two calls).
    fn seq(&self) -> u64;

    /// A non-owning handle.
    fn downgrade(&self) -> Self::Weak;

    /// The group again, if some handle still owns it.
    fn upgrade(weak: &Self::Weak) -> Option<Self>;

    /// Split into sub-groups (collective): ranks passing the same
    /// `Some(color)` form one, ordered by `key` then rank; `None` leaves the
    /// rank out.
    ///
    /// # Errors
    /// The communicator's errors, as [`Error::Comm`].
    fn split(&self, color: Option<u32>, key: i32) -> Result<Option<Self>, Error>;

    /// This rank's sub-group of `groups` (collective; the XLA/NKI
    /// convention of seed 004): a rank's position in its listed group is
    /// its rank in the sub-group, and a rank no group lists gets `None`.
    /// See `ruda_comm::Communicator::replica_group`.
    ///
    /// # Errors
    /// The communicator's errors, as [`Error::Comm`]: groups that differ
    /// between ranks or name a rank outside the group are
    /// `CommError::InvalidArgument` (reason
    /// `InvalidArgument::ReplicaGroups`) on every rank.
    ///
    /// # Example
    /// ```
    /// use ruda_comm::{LocalWorld, ReplicaGroups};
    /// use ruda_tensor::{Group, HostCollective};
    /// let groups = ReplicaGroups::new([[3, 1], [0, 2]]).unwrap();
    /// let ranks = LocalWorld::new(4).run(|c| {
    ///     let sub = HostCollective::new(c).replica_group(&groups)?.unwrap();
    ///     Ok::<_, ruda_tensor::Error>(sub.rank())
    /// }).unwrap();
    /// assert_eq!(ranks, vec![0, 1, 1, 0]);
    /// ```
    fn replica_group(&self, groups: &ReplicaGroups) -> Result<Option<Self>, Error>;

    /// Gather every rank's `words` (the same count on every rank), in rank
    /// order: the exchange by which operations agree before data moves,
    /// for agreements of your own (a seed, a configuration's hash).
    ///
    /// # Errors
    /// The communicator's errors.
    ///
    /// # Example
    /// ```
    /// use ruda_comm::LocalWorld;
    /// use ruda_tensor::{Group, HostCollective};
    /// let all = LocalWorld::new(3).run(|c| {
    ///     let g = HostCollective::new(c);
    ///     g.exchange_words(&[g.rank() as i64 * 10])
    /// }).unwrap();
    /// assert_eq!(all[2], vec![0, 10, 20]);
    /// ```
    fn exchange_words(&self, words: &[i64]) -> Result<Vec<i64>, Error> {
        plumbing::Words::gather_words(self, words)
    }

    /// Concatenate every rank's rows along the leading axis; rank `r` holds
    /// `rows[r]` (agreed beforehand, like the trailing axes and dtype).
    ///
    /// # Errors
    /// The communicator's or the backend's errors.
    fn gather_rows<B: Backend>(
        &self,
        op: TensorOp,
        x: FloatTensor<B>,
        rows: &[usize],
    ) -> Result<FloatTensor<B>, Error>;

    /// Sum every rank's tensor (of `rows.iter().sum()` rows) and keep this
    /// rank's block of `rows[rank]` rows. Halves accumulate in `f32`.
    ///
    /// # Errors
    /// As [`Group::gather_rows`].
    fn reduce_scatter_rows<B: Backend>(
        &self,
        op: TensorOp,
        x: FloatTensor<B>,
        rows: &[usize],
    ) -> Result<FloatTensor<B>, Error>;

    /// Sum every rank's tensor (same shape everywhere).
    ///
    /// # Errors
    /// As [`Group::gather_rows`].
    fn sum<B: Backend>(&self, op: TensorOp, x: FloatTensor<B>) -> Result<FloatTensor<B>, Error>;

    /// Reduce every rank's tensor (same shape everywhere) elementwise with
    /// `reduce`, every rank getting the result. Ranks are combined in rank
    /// order, `f16`/`bf16` in `f32` and rounded once; `Min`/`Max` follow the
    /// communicator (on the local transport IEEE `minNum`/`maxNum`: a NaN
    /// loses to a number).
    ///
    /// # Errors
    /// As [`Group::gather_rows`].
    ///
    /// # Example
    /// ```
    /// use burn_backend::{TensorData, ops::FloatTensorOps, read_sync};
    /// use burn_flex::{Flex, FlexDevice};
    /// use ruda_comm::{LocalWorld, ReduceOp};
    /// use ruda_tensor::{Group, HostCollective, TensorOp};
    /// let out = LocalWorld::new(2).run(|c| {
    ///     let g = HostCollective::new(c);
    ///     let x = Flex::float_from_data(TensorData::new(vec![g.rank() as f32, 3.0], [2]), &FlexDevice);
    ///     let y = g.reduce::<Flex>(TensorOp::AllReduceWith, x, ReduceOp::Max)?;
    ///     Ok::<_, ruda_tensor::Error>(read_sync(Flex::float_into_data(y)).unwrap().try_to_vec::<f32>().unwrap())
    /// }).unwrap();
    /// assert_eq!(out[0], vec![1.0, 3.0]);
    /// ```
    fn reduce<B: Backend>(
        &self,
        op: TensorOp,
        x: FloatTensor<B>,
        reduce: ReduceOp,
    ) -> Result<FloatTensor<B>, Error>;

    /// Wait until every rank of the group has called `barrier`.
    ///
    /// # Errors
    /// The communicator's errors, as [`Error::Comm`] (a rank that stopped or
    /// entered another call, the deadline).
    ///
    /// # Example
    /// ```
    /// use ruda_comm::LocalWorld;
    /// use ruda_tensor::{Group, HostCollective};
    /// LocalWorld::new(3).run(|c| HostCollective::new(c).barrier()).unwrap();
    /// ```
    fn barrier(&self) -> Result<(), Error>;

    /// Send a float tensor to rank `dest` (its shape and dtype agreed
    /// beforehand).
    ///
    /// # Errors
    /// As [`Group::gather_rows`].
    ///
    /// # Example
    /// ```
    /// use burn_backend::{DType, TensorData, ops::FloatTensorOps, read_sync};
    /// use burn_flex::{Flex, FlexDevice};
    /// use ruda_comm::LocalWorld;
    /// use ruda_tensor::{Group, HostCollective, TensorOp};
    /// let got = LocalWorld::new(2).run(|c| {
    ///     let g = HostCollective::new(c);
    ///     if g.rank() == 0 {
    ///         let x = Flex::float_from_data(TensorData::new(vec![1.0f32, 2.0], [2]), &FlexDevice);
    ///         g.send_float::<Flex>(TensorOp::Send, x, 1)?;
    ///         return Ok(Vec::new());
    ///     }
    ///     let y = g.recv_float::<Flex>(TensorOp::Recv, &[2], DType::F32, &FlexDevice, 0)?;
    ///     Ok::<_, ruda_tensor::Error>(read_sync(Flex::float_into_data(y)).unwrap().try_to_vec::<f32>().unwrap())
    /// }).unwrap();
    /// assert_eq!(got[1], vec![1.0, 2.0]);
    /// ```
    fn send_float<B: Backend>(
        &self,
        op: TensorOp,
        x: FloatTensor<B>,
        dest: usize,
    ) -> Result<(), Error>;

    /// Receive a float tensor of `shape` and `dtype` from rank `source`,
    /// onto `device`.
    ///
    /// # Errors
    /// As [`Group::gather_rows`].
    ///
    /// # Example
    /// See [`Group::send_float`].
    fn recv_float<B: Backend>(
        &self,
        op: TensorOp,
        shape: &[usize],
        dtype: DType,
        device: &Device<B>,
        source: usize,
    ) -> Result<FloatTensor<B>, Error>;

    /// Every rank gets `root`'s tensor (same shape everywhere).
    ///
    /// # Errors
    /// As [`Group::gather_rows`].
    fn broadcast<B: Backend>(
        &self,
        op: TensorOp,
        x: FloatTensor<B>,
        root: usize,
    ) -> Result<FloatTensor<B>, Error>;

    /// Send `send_rows[p]` leading rows (blocks in rank order) to each rank
    /// `p` and receive `recv_rows[p]` rows from each, in rank order.
    ///
    /// # Errors
    /// As [`Group::gather_rows`].
    fn exchange_rows<B: Backend>(
        &self,
        op: TensorOp,
        x: FloatTensor<B>,
        send_rows: &[usize],
        recv_rows: &[usize],
    ) -> Result<FloatTensor<B>, Error>;

    /// [`Group::gather_rows`] for integer tensors, bit for bit.
    ///
    /// # Errors
    /// As [`Group::gather_rows`].
    fn gather_rows_int<B: Backend>(
        &self,
        op: TensorOp,
        x: IntTensor<B>,
        rows: &[usize],
    ) -> Result<IntTensor<B>, Error>;

    /// [`Group::exchange_rows`] for integer tensors, bit for bit.
    ///
    /// # Errors
    /// As [`Group::gather_rows`].
    fn exchange_rows_int<B: Backend>(
        &self,
        op: TensorOp,
        x: IntTensor<B>,
        send_rows: &[usize],
        recv_rows: &[usize],
    ) -> Result<IntTensor<B>, Error>;
}

/// The word messages behind every agreement and handshake: transport
/// plumbing that [`Group`] implementations provide and ruda's operations
/// use. Hidden and outside the stable API: it may change in any release.
/// A [`Group`] of your own (a wrapper that times or logs calls, as
/// `ruda bench`'s does) implements it by forwarding to the group it wraps,
/// and must follow such changes.
#[doc(hidden)]
pub mod plumbing {
    use alloc::vec::Vec;

    use crate::error::Error;

    /// Word messages over a group.
    pub trait Words {
        /// Every rank's `words` (the same count everywhere), in rank order.
        ///
        /// # Errors
        /// The communicator's errors.
        fn gather_words(&self, words: &[i64]) -> Result<Vec<i64>, Error>;

        /// Send `words` to rank `dest`; returns once `dest` received them.
        ///
        /// # Errors
        /// The communicator's errors (a receiver expecting another length
        /// fails on both ranks).
        fn send_words(&self, words: &[i64], dest: usize) -> Result<(), Error>;

        /// Receive exactly `words.len()` words from rank `source`.
        ///
        /// # Errors
        /// As [`Words::send_words`].
        fn recv_words(&self, words: &mut [i64], source: usize) -> Result<(), Error>;
    }
}
