//! [`HostCollective`]: the host-staged [`Group`] over any `ruda-comm`
//! communicator. Tensors are read into host [`TensorData`] (zero-copy on
//! Flex for a unique contiguous tensor), moved by the communicator, and
//! rebuilt on the input's device.
//!
//! Copies per call beyond the backend's own `into_data`/`from_data`:
//! sums and broadcasts work in place on the staged bytes; gathers,
//! reduce-scatters and exchanges write the communicator's output straight
//! into the new tensor's storage. Non-reducing operations move any dtype
//! bit for bit as words of its size; sums run in the element type, with
//! `f16`/`bf16` accumulated in `f32`.

use alloc::borrow::Cow;
use alloc::sync::{Arc, Weak};
use alloc::vec::Vec;
use core::fmt::Debug;

use burn_backend::tensor::{FloatTensor, IntTensor};
use burn_backend::{Backend, Bytes, DType, TensorData, TensorMetadata, read_sync};
use bytemuck::{Pod, Zeroable};
use half::{bf16, f16};
use ruda_comm::{Communicator, ReduceOp, ReplicaGroups};

use crate::error::{Error, TensorOp};
use crate::group::Group;

/// The host-staged [`Group`] over a `ruda-comm` communicator `C` (the local
/// transport's threads, or MPI processes): every operation of the tensor
/// layer runs on it, for every Burn backend ruda supports.
///
/// Cheap to clone (the communicator is shared); every rank holds its own.
///
/// # Example
/// ```
/// use burn_tensor::{Device, Tensor};
/// use ruda_comm::LocalWorld;
/// use ruda_tensor::{HostCollective, TensorExt};
///
/// let out = LocalWorld::new(2).run(|comm| {
///     let group = HostCollective::new(comm);
///     let x = Tensor::<1>::from_floats([1.0, 2.0], &Device::flex());
///     let all = x.all_gather(&group, 0)?; // [1, 2, 1, 2]
///     Ok::<_, ruda_tensor::Error>(all.into_data().try_to_vec::<f32>().unwrap())
/// }).unwrap();
/// assert_eq!(out[1], vec![1.0, 2.0, 1.0, 2.0]);
/// ```
#[derive(Debug)]
pub struct HostCollective<C> {
    comm: Arc<C>,
}

impl<C> Clone for HostCollective<C> {
    fn clone(&self) -> Self {
        HostCollective {
            comm: self.comm.clone(),
        }
    }
}

impl<C: Communicator> HostCollective<C> {
    /// Wrap a communicator.
    pub fn new(comm: C) -> Self {
        HostCollective {
            comm: Arc::new(comm),
        }
    }

    /// Wrap a shared communicator.
    pub fn from_arc(comm: Arc<C>) -> Self {
        HostCollective { comm }
    }

    /// The communicator.
    pub fn comm(&self) -> &C {
        &self.comm
    }
}

/// Run `$body` with `$W` the word type of `$size` bytes.
macro_rules! with_word {
    ($size:expr, $W:ident, $body:block) => {
        match $size {
            1 => {
                type $W = u8;
                $body
            }
            2 => {
                type $W = f16;
                $body
            }
            4 => {
                type $W = u32;
                $body
            }
            _ => {
                type $W = i64;
                $body
            }
        }
    };
}

/// Run `$body` with `$T` the float element type of `$dtype`.
macro_rules! with_float {
    ($dtype:expr, $T:ident, $body:block) => {
        match $dtype {
            DType::F64 => {
                type $T = f64;
                $body
            }
            DType::F16 => {
                type $T = f16;
                $body
            }
            DType::BF16 => {
                type $T = bf16;
                $body
            }
            _ => {
                type $T = f32;
                $body
            }
        }
    };
}

/// A typed view of staged bytes, copied only if they are misaligned.
fn view<W: Pod>(bytes: &[u8]) -> Cow<'_, [W]> {
    match bytemuck::try_cast_slice(bytes) {
        Ok(s) => Cow::Borrowed(s),
        Err(_) => Cow::Owned(bytemuck::pod_collect_to_vec(bytes)),
    }
}

/// Run `f` on a typed mutable view of `bytes`, copying only if misaligned.
fn in_place<W: Pod, R>(bytes: &mut [u8], f: impl FnOnce(&mut [W]) -> R) -> R {
    match bytemuck::try_cast_slice_mut(bytes) {
        Ok(s) => f(s),
        Err(_) => {
            let mut v: Vec<W> = bytemuck::pod_collect_to_vec(bytes);
            let r = f(&mut v);
            bytes.copy_from_slice(bytemuck::cast_slice(&v));
            r
        }
    }
}

fn rebuild<W: Pod + Send + Sync>(words: Vec<W>, shape: Vec<usize>, dtype: DType) -> TensorData {
    TensorData::from_bytes(Bytes::from_elems(words), shape, dtype)
}

fn with_leading(shape: &[usize], rows: usize) -> Vec<usize> {
    let mut s = shape.to_vec();
    s[0] = rows;
    s
}

fn row_len(shape: &[usize]) -> usize {
    shape[1..].iter().product()
}

fn read_float<B: Backend>(
    op: TensorOp,
    rank: usize,
    t: FloatTensor<B>,
) -> Result<TensorData, Error> {
    read_sync(B::float_into_data(t)).map_err(|e| Error::Backend {
        op,
        rank,
        message: alloc::format!("{e:?}"),
    })
}

fn read_int<B: Backend>(op: TensorOp, rank: usize, t: IntTensor<B>) -> Result<TensorData, Error> {
    read_sync(B::int_into_data(t)).map_err(|e| Error::Backend {
        op,
        rank,
        message: alloc::format!("{e:?}"),
    })
}

/// Send a float tensor to `dest` through host memory, as words of its
/// dtype's size (shared by both groups: a point-to-point message has no
/// device-resident path on the local transport).
pub(crate) fn send_staged<C: Communicator, B: Backend>(
    comm: &C,
    op: TensorOp,
    x: FloatTensor<B>,
    dest: usize,
) -> Result<(), Error> {
    let data = read_float::<B>(op, comm.rank(), x)?;
    with_word!(data.dtype().size(), W, {
        comm.send(&view::<W>(data.as_bytes()), dest)?
    });
    Ok(())
}

/// Receive a float tensor of `shape` and `dtype` from `source` onto
/// `device` (the counterpart of [`send_staged`]).
pub(crate) fn recv_staged<C: Communicator, B: Backend>(
    comm: &C,
    op: TensorOp,
    shape: &[usize],
    dtype: DType,
    device: &burn_backend::tensor::Device<B>,
    source: usize,
) -> Result<FloatTensor<B>, Error> {
    let len = shape
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .ok_or_else(|| Error::Backend {
            op,
            rank: comm.rank(),
            message: alloc::format!(
                "a tensor of shape {shape:?} has more elements than fit in memory"
            ),
        })?;
    let data = with_word!(dtype.size(), W, {
        let mut words = alloc::vec![W::zeroed(); len];
        comm.recv(&mut words, source)?;
        rebuild(words, shape.to_vec(), dtype)
    });
    Ok(B::float_from_data(data, device))
}

impl<C: Communicator> HostCollective<C> {
    /// Gather staged rows (any dtype, as words).
    fn gather_data(&self, data: TensorData, rows: &[usize]) -> Result<TensorData, Error> {
        let (dtype, shape) = (data.dtype(), data.shape().to_vec());
        let row = row_len(&shape);
        let out_shape = with_leading(&shape, rows.iter().sum());
        with_word!(dtype.size(), W, {
            let src = view::<W>(data.as_bytes());
            let out = if rows.iter().all(|&r| r == rows[0]) {
                self.comm.all_gather_vec(&src)?
            } else {
                let counts: Vec<usize> = rows.iter().map(|r| r * row).collect();
                let mut out = alloc::vec![W::zeroed(); counts.iter().sum()];
                self.comm.all_gather_v(&src, &mut out, &counts)?;
                out
            };
            Ok(rebuild(out, out_shape, dtype))
        })
    }

    /// Exchange staged rows (any dtype, as words).
    fn exchange_data(
        &self,
        data: TensorData,
        send_rows: &[usize],
        recv_rows: &[usize],
    ) -> Result<TensorData, Error> {
        let (dtype, shape) = (data.dtype(), data.shape().to_vec());
        let row = row_len(&shape);
        let out_shape = with_leading(&shape, recv_rows.iter().sum());
        let send: Vec<usize> = send_rows.iter().map(|r| r * row).collect();
        let recv: Vec<usize> = recv_rows.iter().map(|r| r * row).collect();
        with_word!(dtype.size(), W, {
            let src = view::<W>(data.as_bytes());
            let out = self.comm.all_to_all_v_vec(&src, &send, &recv)?;
            Ok(rebuild(out, out_shape, dtype))
        })
    }
}

impl<C: Communicator + Debug + 'static> crate::group::plumbing::Words for HostCollective<C> {
    fn gather_words(&self, words: &[i64]) -> Result<Vec<i64>, Error> {
        Ok(self.comm.all_gather_vec(words)?)
    }

    fn send_words(&self, words: &[i64], dest: usize) -> Result<(), Error> {
        Ok(self.comm.send(words, dest)?)
    }

    fn recv_words(&self, words: &mut [i64], source: usize) -> Result<(), Error> {
        Ok(self.comm.recv(words, source)?)
    }
}

impl<C: Communicator + Debug + 'static> Group for HostCollective<C> {
    type Weak = Weak<C>;

    fn rank(&self) -> usize {
        self.comm.rank()
    }

    fn size(&self) -> usize {
        self.comm.size()
    }

    fn seq(&self) -> u64 {
        self.comm.seq()
    }

    fn downgrade(&self) -> Weak<C> {
        Arc::downgrade(&self.comm)
    }

    fn upgrade(weak: &Weak<C>) -> Option<Self> {
        weak.upgrade().map(|comm| HostCollective { comm })
    }

    fn split(&self, color: Option<u32>, key: i32) -> Result<Option<Self>, Error> {
        Ok(self.comm.split(color, key)?.map(HostCollective::new))
    }

    fn replica_group(&self, groups: &ReplicaGroups) -> Result<Option<Self>, Error> {
        Ok(self.comm.replica_group(groups)?.map(HostCollective::new))
    }

    fn gather_rows<B: Backend>(
        &self,
        op: TensorOp,
        x: FloatTensor<B>,
        rows: &[usize],
    ) -> Result<FloatTensor<B>, Error> {
        let device = x.device();
        let data = read_float::<B>(op, self.rank(), x)?;
        Ok(B::float_from_data(self.gather_data(data, rows)?, &device))
    }

    fn reduce_scatter_rows<B: Backend>(
        &self,
        op: TensorOp,
        x: FloatTensor<B>,
        rows: &[usize],
    ) -> Result<FloatTensor<B>, Error> {
        let device = x.device();
        let data = read_float::<B>(op, self.rank(), x)?;
        let (dtype, shape) = (data.dtype(), data.shape().to_vec());
        let row = row_len(&shape);
        let me = self.rank();
        let out_shape = with_leading(&shape, rows[me]);
        let out = with_float!(dtype, T, {
            let src = view::<T>(data.as_bytes());
            let out = if rows.iter().all(|&r| r == rows[0]) {
                self.comm.reduce_scatter_vec(&src, ReduceOp::Sum)?
            } else {
                let counts: Vec<usize> = rows.iter().map(|r| r * row).collect();
                let mut out = alloc::vec![T::default(); counts[me]];
                self.comm
                    .reduce_scatter_v(&src, &mut out, &counts, ReduceOp::Sum)?;
                out
            };
            rebuild(out, out_shape, dtype)
        });
        Ok(B::float_from_data(out, &device))
    }

    fn sum<B: Backend>(&self, op: TensorOp, x: FloatTensor<B>) -> Result<FloatTensor<B>, Error> {
        let device = x.device();
        let data = read_float::<B>(op, self.rank(), x)?;
        let (mut bytes, shape, dtype) = data.into_parts();
        with_float!(dtype, T, {
            in_place::<T, _>(&mut bytes, |s| self.comm.all_reduce(s, ReduceOp::Sum))?
        });
        Ok(B::float_from_data(
            TensorData::from_bytes(bytes, shape, dtype),
            &device,
        ))
    }

    fn reduce<B: Backend>(
        &self,
        op: TensorOp,
        x: FloatTensor<B>,
        reduce: ReduceOp,
    ) -> Result<FloatTensor<B>, Error> {
        let device = x.device();
        let data = read_float::<B>(op, self.rank(), x)?;
        let (mut bytes, shape, dtype) = data.into_parts();
        with_float!(dtype, T, {
            in_place::<T, _>(&mut bytes, |s| self.comm.all_reduce(s, reduce))?
        });
        Ok(B::float_from_data(
            TensorData::from_bytes(bytes, shape, dtype),
            &device,
        ))
    }

    fn barrier(&self) -> Result<(), Error> {
        Ok(self.comm.barrier()?)
    }

    fn send_float<B: Backend>(
        &self,
        op: TensorOp,
        x: FloatTensor<B>,
        dest: usize,
    ) -> Result<(), Error> {
        send_staged::<C, B>(&self.comm, op, x, dest)
    }

    fn recv_float<B: Backend>(
        &self,
        op: TensorOp,
        shape: &[usize],
        dtype: DType,
        device: &burn_backend::tensor::Device<B>,
        source: usize,
    ) -> Result<FloatTensor<B>, Error> {
        recv_staged::<C, B>(&self.comm, op, shape, dtype, device, source)
    }

    fn broadcast<B: Backend>(
        &self,
        op: TensorOp,
        x: FloatTensor<B>,
        root: usize,
    ) -> Result<FloatTensor<B>, Error> {
        let device = x.device();
        let data = read_float::<B>(op, self.rank(), x)?;
        let (mut bytes, shape, dtype) = data.into_parts();
        with_word!(dtype.size(), W, {
            in_place::<W, _>(&mut bytes, |s| self.comm.broadcast(s, root))?
        });
        Ok(B::float_from_data(
            TensorData::from_bytes(bytes, shape, dtype),
            &device,
        ))
    }

    fn exchange_rows<B: Backend>(
        &self,
        op: TensorOp,
        x: FloatTensor<B>,
        send_rows: &[usize],
        recv_rows: &[usize],
    ) -> Result<FloatTensor<B>, Error> {
        let device = x.device();
        let data = read_float::<B>(op, self.rank(), x)?;
        Ok(B::float_from_data(
            self.exchange_data(data, send_rows, recv_rows)?,
            &device,
        ))
    }

    fn gather_rows_int<B: Backend>(
        &self,
        op: TensorOp,
        x: IntTensor<B>,
        rows: &[usize],
    ) -> Result<IntTensor<B>, Error> {
        let device = x.device();
        let data = read_int::<B>(op, self.rank(), x)?;
        Ok(B::int_from_data(self.gather_data(data, rows)?, &device))
    }

    fn exchange_rows_int<B: Backend>(
        &self,
        op: TensorOp,
        x: IntTensor<B>,
        send_rows: &[usize],
        recv_rows: &[usize],
    ) -> Result<IntTensor<B>, Error> {
        let device = x.device();
        let data = read_int::<B>(op, self.rank(), x)?;
        Ok(B::int_from_data(
            self.exchange_data(data, send_rows, recv_rows)?,
            &device,
        ))
    }
}
