//! [`DeviceGroup`]: the device-resident [`Group`] over the local
//! transport's rank threads. Ranks exchange handles of their tensors
//! (`LocalCommunicator::all_gather_objects`, under the transport's own
//! fingerprints, deadlines and poison) and compute every collective with
//! the backend's tensor operations on the peers' tensors, as seed 004's HBM
//! kernels do: tensors never leave their devices.

use alloc::sync::{Arc, Weak};
use alloc::vec::Vec;

use burn_backend::tensor::{FloatTensor, IntTensor};
use burn_backend::{Backend, DType, TensorMetadata};
use ruda_comm::{Communicator, LocalCommunicator, ReduceOp, ReplicaGroups};

use super::moves::{Floats, Ints, Kind, cat, reduce_in_order, sum_in_order, take_rows, to};
use crate::error::{Error, TensorOp};
use crate::group::Group;
use crate::layout::starts;

/// The device-resident [`Group`]: ranks are threads of this process (a
/// [`ruda_comm::LocalCommunicator`] each) whose tensors live on Burn
/// devices of one backend — one device shared by every rank, or one per
/// rank. Collectives move tensor handles between the threads and run as
/// the backend's own operations (slice, cat, add in rank order,
/// `to_device` where a peer's tensor lives on another device): no
/// `into_data`, no host staging.
///
/// Every operation of the tensor layer runs on it unchanged (the same
/// agreement, shape rules and adjoints as [`crate::HostCollective`]), with
/// results equal bit for bit to the host-staged path's: sums add the
/// ranks' tensors in rank order on every rank, `f16`/`bf16` accumulated in
/// `f32` and rounded once. The local transport's guarantees hold: a rank
/// that calls another operation, passes another shape or dtype, or keeps
/// its tensors on another backend gets a typed error on every rank; every
/// wait has the world's deadline; a rank that panics or returns fails its
/// peers promptly.
///
/// Start one with [`super::DeviceWorld`], or wrap a communicator of a
/// [`ruda_comm::LocalWorld`] yourself.
///
/// # Example
/// ```
/// use burn_tensor::{Device, Tensor};
/// use ruda_tensor::{DeviceWorld, TensorExt};
///
/// let out = DeviceWorld::shared(2, Device::flex()).run(|group, device| {
///     let x = Tensor::<1>::from_floats([1.0, 2.0], device);
///     let all = x.all_gather(&group, 0)?; // [1, 2, 1, 2], never left the device
///     Ok::<_, ruda_tensor::Error>(all.into_data().try_to_vec::<f32>().unwrap())
/// }).unwrap();
/// assert_eq!(out[1], vec![1.0, 2.0, 1.0, 2.0]);
/// ```
#[derive(Debug, Clone)]
pub struct DeviceGroup {
    comm: Arc<LocalCommunicator>,
}

impl DeviceGroup {
    /// Wrap one rank's local communicator.
    pub fn new(comm: LocalCommunicator) -> Self {
        DeviceGroup {
            comm: Arc::new(comm),
        }
    }

    /// The communicator.
    pub fn comm(&self) -> &LocalCommunicator {
        &self.comm
    }

    /// Every rank's `x`, in rank order, each on `x`'s device.
    fn peers<B: Backend, K: Kind<B>>(&self, x: K::T) -> Result<Vec<K::T>, Error> {
        let device = x.device();
        let all = self.comm.all_gather_objects(&x)?;
        drop(x);
        Ok(all.into_iter().map(|t| to::<B, K>(t, &device)).collect())
    }

    /// Every rank's `x` (`rows[r]` leading rows on rank `r`) concatenated
    /// in rank order on `x`'s device; ranks with no rows are not moved.
    fn gather<B: Backend, K: Kind<B>>(&self, x: K::T, rows: &[usize]) -> Result<K::T, Error> {
        let device = x.device();
        let like = x.clone();
        let all = self.comm.all_gather_objects(&x)?;
        drop(x);
        let parts: Vec<K::T> = all
            .into_iter()
            .zip(rows)
            .filter(|(_, r)| **r > 0)
            .map(|(t, _)| to::<B, K>(t, &device))
            .collect();
        Ok(cat::<B, K>(parts, &like, &device))
    }

    /// Send `send_rows[p]` leading-axis rows (in order) to each rank `p`
    /// and concatenate the `recv_rows[p]` rows from each rank `p`.
    fn exchange<B: Backend, K: Kind<B>>(
        &self,
        x: K::T,
        send_rows: &[usize],
        recv_rows: &[usize],
    ) -> Result<K::T, Error> {
        let me = self.rank();
        let device = x.device();
        let like = x.clone();
        // This rank's block for each peer (none where it sends nothing).
        let blocks: Vec<Option<K::T>> = starts(send_rows)
            .into_iter()
            .zip(send_rows)
            .map(|(s, &len)| (len > 0).then(|| take_rows::<B, K>(x.clone(), s, len)))
            .collect();
        drop(x);
        let all = self.comm.all_gather_objects(&blocks)?;
        drop(blocks);
        let parts: Vec<K::T> = all
            .into_iter()
            .zip(recv_rows)
            .filter(|(_, r)| **r > 0)
            .filter_map(|(mut theirs, _)| theirs.swap_remove(me))
            .map(|t| to::<B, K>(t, &device))
            .collect();
        Ok(cat::<B, K>(parts, &like, &device))
    }
}

impl Group for DeviceGroup {
    type Weak = Weak<LocalCommunicator>;

    fn rank(&self) -> usize {
        self.comm.rank()
    }

    fn size(&self) -> usize {
        self.comm.size()
    }

    fn seq(&self) -> u64 {
        self.comm.seq()
    }

    fn downgrade(&self) -> Self::Weak {
        Arc::downgrade(&self.comm)
    }

    fn upgrade(weak: &Self::Weak) -> Option<Self> {
        weak.upgrade().map(|comm| DeviceGroup { comm })
    }

    fn split(&self, color: Option<u32>, key: i32) -> Result<Option<Self>, Error> {
        Ok(self.comm.split(color, key)?.map(DeviceGroup::new))
    }

    fn replica_group(&self, groups: &ReplicaGroups) -> Result<Option<Self>, Error> {
        Ok(self.comm.replica_group(groups)?.map(DeviceGroup::new))
    }

    fn exchange_words(&self, words: &[i64]) -> Result<Vec<i64>, Error> {
        // The agreement's few words per rank (shapes, counts): metadata,
        // not tensor data.
        Ok(self.comm.all_gather_vec(words)?)
    }

    fn gather_rows<B: Backend>(
        &self,
        _op: TensorOp,
        x: FloatTensor<B>,
        rows: &[usize],
    ) -> Result<FloatTensor<B>, Error> {
        self.gather::<B, Floats>(x, rows)
    }

    fn reduce_scatter_rows<B: Backend>(
        &self,
        _op: TensorOp,
        x: FloatTensor<B>,
        rows: &[usize],
    ) -> Result<FloatTensor<B>, Error> {
        let me = self.rank();
        let device = x.device();
        let like = x.clone();
        let start = starts(rows)[me];
        // Each peer's rows for this rank, taken before they are moved.
        let all = self.comm.all_gather_objects(&x)?;
        drop(x);
        let mine: Vec<FloatTensor<B>> = all
            .into_iter()
            .map(|t| to::<B, Floats>(take_rows::<B, Floats>(t, start, rows[me]), &device))
            .collect();
        if rows[me] == 0 {
            return Ok(cat::<B, Floats>(Vec::new(), &like, &device));
        }
        Ok(sum_in_order::<B>(mine))
    }

    fn sum<B: Backend>(&self, _op: TensorOp, x: FloatTensor<B>) -> Result<FloatTensor<B>, Error> {
        // Every rank adds every rank's whole tensor in rank order: one new
        // tensor per call (the later adds accumulate into it), nothing
        // written into a tensor a peer may still be reading. Splitting the
        // adds over the ranks (reduce-scatter, then all-gather) does less
        // arithmetic but needs a concatenation or an in-place write into
        // a shared tensor; on Flex its extra allocation (page faults on
        // fresh memory) made it slower at 2 ranks — measured with
        // `ruda bench --transport device`.
        Ok(sum_in_order::<B>(self.peers::<B, Floats>(x)?))
    }

    fn reduce<B: Backend>(
        &self,
        _op: TensorOp,
        x: FloatTensor<B>,
        reduce: ReduceOp,
    ) -> Result<FloatTensor<B>, Error> {
        Ok(reduce_in_order::<B>(self.peers::<B, Floats>(x)?, reduce))
    }

    fn barrier(&self) -> Result<(), Error> {
        Ok(self.comm.barrier()?)
    }

    fn send_words(&self, words: &[i64], dest: usize) -> Result<(), Error> {
        Ok(self.comm.send(words, dest)?)
    }

    fn recv_words(&self, words: &mut [i64], source: usize) -> Result<(), Error> {
        Ok(self.comm.recv(words, source)?)
    }

    /// Point-to-point messages stage through host memory: the local
    /// transport moves tensor handles only in collectives.
    fn send_float<B: Backend>(
        &self,
        op: TensorOp,
        x: FloatTensor<B>,
        dest: usize,
    ) -> Result<(), Error> {
        crate::host::send_staged::<LocalCommunicator, B>(&self.comm, op, x, dest)
    }

    fn recv_float<B: Backend>(
        &self,
        op: TensorOp,
        shape: &[usize],
        dtype: DType,
        device: &burn_backend::tensor::Device<B>,
        source: usize,
    ) -> Result<FloatTensor<B>, Error> {
        crate::host::recv_staged::<LocalCommunicator, B>(
            &self.comm, op, shape, dtype, device, source,
        )
    }

    fn broadcast<B: Backend>(
        &self,
        _op: TensorOp,
        x: FloatTensor<B>,
        root: usize,
    ) -> Result<FloatTensor<B>, Error> {
        let device = x.device();
        let all = self.comm.all_gather_objects(&x)?;
        drop(x);
        let theirs = all.into_iter().nth(root).expect("root agreed in range");
        Ok(to::<B, Floats>(theirs, &device))
    }

    fn exchange_rows<B: Backend>(
        &self,
        _op: TensorOp,
        x: FloatTensor<B>,
        send_rows: &[usize],
        recv_rows: &[usize],
    ) -> Result<FloatTensor<B>, Error> {
        self.exchange::<B, Floats>(x, send_rows, recv_rows)
    }

    fn gather_rows_int<B: Backend>(
        &self,
        _op: TensorOp,
        x: IntTensor<B>,
        rows: &[usize],
    ) -> Result<IntTensor<B>, Error> {
        self.gather::<B, Ints>(x, rows)
    }

    fn exchange_rows_int<B: Backend>(
        &self,
        _op: TensorOp,
        x: IntTensor<B>,
        send_rows: &[usize],
        recv_rows: &[usize],
    ) -> Result<IntTensor<B>, Error> {
        self.exchange::<B, Ints>(x, send_rows, recv_rows)
    }
}
