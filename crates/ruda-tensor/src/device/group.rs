//! [`DeviceGroup`]: the device-resident [`Group`] over the local
//! transport's rank threads. Ranks exchange handles of their tensors
//! (`LocalCommunicator::all_gather_objects`, under the transport's own
//! fingerprints, deadlines and poison) and compute every collective with
//! the backend's tensor operations on the peers' tensors, as seed 004's HBM
//! kernels do: tensors never leave their devices.

use alloc::sync::{Arc, Weak};
use alloc::vec::Vec;

use burn_backend::tensor::{Device, FloatTensor, IntTensor};
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
/// Each collective is a fence on the rank's device: the rank's queued work
/// runs to completion before its tensors go to the peers, and again once
/// it has read theirs. Backends that queue kernels lazily per thread
/// (wgpu, CUDA through fusion and CubeCL) would otherwise let a peer read a
/// buffer before it is written, or reuse one still being read.
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

    /// Run this rank's queued work on `device` to completion. Burn's
    /// fusion and CubeCL record each thread's operations lazily on that
    /// thread's stream, and buffers pass between the ranks' streams here:
    /// a tensor handed to a peer must be written before the peer's kernels
    /// read it, and a peer's buffer must be read before its owner can drop
    /// it and the memory can be reused. On wgpu without these two fences a
    /// maximum's gradient came back with a stale buffer's values in 49 of
    /// 160 runs (a two- and three-rank loop), and in 1 of 3 runs of the
    /// same loop once the first fence alone was in place and other tests
    /// used the device at the same time.
    ///
    /// # Errors
    /// [`Error::Backend`] when the device fails to run the queued work.
    fn settle<B: Backend>(&self, op: TensorOp, device: &Device<B>) -> Result<(), Error> {
        B::sync(device).map_err(|e| Error::Backend {
            op,
            rank: self.rank(),
            message: format!("the device failed to run the queued work: {e}"),
        })
    }

    /// Every rank's `mine`, once this rank's queued work has run (see
    /// [`DeviceGroup::settle`]).
    fn share<B: Backend, T: Clone + Send + Sync + 'static>(
        &self,
        op: TensorOp,
        device: &Device<B>,
        mine: &T,
    ) -> Result<Vec<T>, Error> {
        self.settle::<B>(op, device)?;
        Ok(self.comm.all_gather_objects(mine)?)
    }

    /// `out`, computed: this rank's queued work, which reads the peers'
    /// tensors, runs to completion while `keep` (this rank's handles of
    /// them) still holds their buffers; only then are they let go (see
    /// [`DeviceGroup::settle`]).
    fn done<B: Backend, T, K>(
        &self,
        op: TensorOp,
        device: &Device<B>,
        out: T,
        keep: K,
    ) -> Result<T, Error> {
        self.settle::<B>(op, device)?;
        drop(keep);
        Ok(out)
    }

    /// Every rank's `x`, in rank order, each on `x`'s device; and the
    /// handles to hold until the work reading them has run.
    #[allow(clippy::type_complexity)]
    fn peers<B: Backend, K: Kind<B>>(
        &self,
        op: TensorOp,
        x: K::T,
    ) -> Result<(Vec<K::T>, Vec<K::T>), Error> {
        let device = x.device();
        let all = self.share::<B, _>(op, &device, &x)?;
        drop(x);
        let keep = all.clone();
        Ok((
            all.into_iter().map(|t| to::<B, K>(t, &device)).collect(),
            keep,
        ))
    }

    /// Every rank's `x` (`rows[r]` leading rows on rank `r`) concatenated
    /// in rank order on `x`'s device; ranks with no rows are not moved.
    fn gather<B: Backend, K: Kind<B>>(
        &self,
        op: TensorOp,
        x: K::T,
        rows: &[usize],
    ) -> Result<K::T, Error> {
        let device = x.device();
        let like = x.clone();
        let all = self.share::<B, _>(op, &device, &x)?;
        let keep = all.clone();
        drop(x);
        let parts: Vec<K::T> = all
            .into_iter()
            .zip(rows)
            .filter(|(_, r)| **r > 0)
            .map(|(t, _)| to::<B, K>(t, &device))
            .collect();
        self.done::<B, _, _>(op, &device, cat::<B, K>(parts, &like, &device), keep)
    }

    /// Send `send_rows[p]` leading-axis rows (in order) to each rank `p`
    /// and concatenate the `recv_rows[p]` rows from each rank `p`.
    fn exchange<B: Backend, K: Kind<B>>(
        &self,
        op: TensorOp,
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
        let all = self.share::<B, _>(op, &device, &blocks)?;
        let keep = all.clone();
        drop(blocks);
        let parts: Vec<K::T> = all
            .into_iter()
            .zip(recv_rows)
            .filter(|(_, r)| **r > 0)
            .filter_map(|(mut theirs, _)| theirs.swap_remove(me))
            .map(|t| to::<B, K>(t, &device))
            .collect();
        self.done::<B, _, _>(op, &device, cat::<B, K>(parts, &like, &device), keep)
    }
}

impl crate::group::plumbing::Words for DeviceGroup {
    fn gather_words(&self, words: &[i64]) -> Result<Vec<i64>, Error> {
        // The agreement's few words per rank (shapes, counts): metadata,
        // not tensor data.
        Ok(self.comm.all_gather_vec(words)?)
    }

    fn send_words(&self, words: &[i64], dest: usize) -> Result<(), Error> {
        Ok(self.comm.send(words, dest)?)
    }

    fn recv_words(&self, words: &mut [i64], source: usize) -> Result<(), Error> {
        Ok(self.comm.recv(words, source)?)
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

    fn gather_rows<B: Backend>(
        &self,
        op: TensorOp,
        x: FloatTensor<B>,
        rows: &[usize],
    ) -> Result<FloatTensor<B>, Error> {
        self.gather::<B, Floats>(op, x, rows)
    }

    fn reduce_scatter_rows<B: Backend>(
        &self,
        op: TensorOp,
        x: FloatTensor<B>,
        rows: &[usize],
    ) -> Result<FloatTensor<B>, Error> {
        let me = self.rank();
        let device = x.device();
        let like = x.clone();
        let start = starts(rows)[me];
        // Each peer's rows for this rank, taken before they are moved.
        let all = self.share::<B, _>(op, &device, &x)?;
        let keep = all.clone();
        drop(x);
        let mine: Vec<FloatTensor<B>> = all
            .into_iter()
            .map(|t| to::<B, Floats>(take_rows::<B, Floats>(t, start, rows[me]), &device))
            .collect();
        if rows[me] == 0 {
            return self.done::<B, _, _>(
                op,
                &device,
                cat::<B, Floats>(Vec::new(), &like, &device),
                keep,
            );
        }
        self.done::<B, _, _>(op, &device, sum_in_order::<B>(mine), keep)
    }

    fn sum<B: Backend>(&self, op: TensorOp, x: FloatTensor<B>) -> Result<FloatTensor<B>, Error> {
        // Every rank adds every rank's whole tensor in rank order: one new
        // tensor per call (the later adds accumulate into it), nothing
        // written into a tensor a peer may still be reading. Splitting the
        // adds over the ranks (reduce-scatter, then all-gather) does less
        // arithmetic but needs a concatenation or an in-place write into
        // a shared tensor; on Flex its extra allocation (page faults on
        // fresh memory) made it slower at 2 ranks — measured with
        // `ruda bench --transport device`.
        let device = x.device();
        let (parts, keep) = self.peers::<B, Floats>(op, x)?;
        let out = sum_in_order::<B>(parts);
        self.done::<B, _, _>(op, &device, out, keep)
    }

    fn reduce<B: Backend>(
        &self,
        op: TensorOp,
        x: FloatTensor<B>,
        reduce: ReduceOp,
    ) -> Result<FloatTensor<B>, Error> {
        let device = x.device();
        let (parts, keep) = self.peers::<B, Floats>(op, x)?;
        let out = reduce_in_order::<B>(parts, reduce);
        self.done::<B, _, _>(op, &device, out, keep)
    }

    fn barrier(&self) -> Result<(), Error> {
        Ok(self.comm.barrier()?)
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
        op: TensorOp,
        x: FloatTensor<B>,
        root: usize,
    ) -> Result<FloatTensor<B>, Error> {
        let device = x.device();
        let all = self.share::<B, _>(op, &device, &x)?;
        drop(x);
        let theirs = all.into_iter().nth(root).expect("root agreed in range");
        let keep = theirs.clone();
        let out = to::<B, Floats>(theirs, &device);
        self.done::<B, _, _>(op, &device, out, keep)
    }

    fn exchange_rows<B: Backend>(
        &self,
        op: TensorOp,
        x: FloatTensor<B>,
        send_rows: &[usize],
        recv_rows: &[usize],
    ) -> Result<FloatTensor<B>, Error> {
        self.exchange::<B, Floats>(op, x, send_rows, recv_rows)
    }

    fn gather_rows_int<B: Backend>(
        &self,
        op: TensorOp,
        x: IntTensor<B>,
        rows: &[usize],
    ) -> Result<IntTensor<B>, Error> {
        self.gather::<B, Ints>(op, x, rows)
    }

    fn exchange_rows_int<B: Backend>(
        &self,
        op: TensorOp,
        x: IntTensor<B>,
        send_rows: &[usize],
        recv_rows: &[usize],
    ) -> Result<IntTensor<B>, Error> {
        self.exchange::<B, Ints>(op, x, send_rows, recv_rows)
    }
}
