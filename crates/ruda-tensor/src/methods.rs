//! The operations as methods of Burn's user-facing tensors, over any
//! [`Group`]: the world, a sub-group from [`Group::split`], or a
//! [`crate::ProcessGrid`]'s polar or azimuth group. Each call looks at the
//! device the tensor lives on (Flex, or CubeCL's wgpu/CUDA/ROCm with
//! feature `cube`; with or without autodiff) and runs the primitive-level
//! operation of [`crate::primitives`] there, so gradients flow through
//! `Tensor::backward` as through any Burn operation.
//!
//! ```
//! use burn_tensor::{Device, Tensor};
//! use ruda_comm::LocalWorld;
//! use ruda_tensor::{HostCollective, TensorExt};
//!
//! let grads = LocalWorld::new(2).run(|comm| {
//!     let world = HostCollective::new(comm);
//!     let w = Tensor::<1>::from_floats([1.0, 2.0], &Device::flex().autodiff()).require_grad();
//!     // A replicated weight used by every rank, per-rank sums back to one loss.
//!     let loss = w.clone().copy_to(&world)?.sum().reduce_from(&world)?;
//!     let g = loss.backward();
//!     Ok::<_, ruda_tensor::Error>(w.grad(&g).unwrap().into_data().try_to_vec::<f32>().unwrap())
//! }).unwrap();
//! assert_eq!(grads[0], vec![2.0, 2.0]); // the weight is used on both ranks
//! ```

use alloc::vec::Vec;

use burn_tensor::{Int, Tensor};
use ruda_comm::ReduceOp;

use crate::error::{Error, TensorOp};
use crate::group::Group;
use crate::ops::TransposeAxes;
use crate::primitives as p;
use crate::route::routed;

/// ruda's operations as methods of a float [`Tensor`]; see the module
/// documentation, and [`crate::primitives`] for what each does (forward,
/// backward, errors). None needs a type annotation.
pub trait TensorExt: Sized {
    /// Sum over the group; every rank gets the result. Its own adjoint.
    ///
    /// # Errors
    /// As [`p::all_reduce`], and [`Error::UnsupportedTensor`] for a tensor
    /// on a backend ruda does not run on.
    fn all_reduce<G: Group>(self, group: &G) -> Result<Self, Error>;

    /// Reduce over the group with `op` (sum, average, maximum, minimum,
    /// product); every rank gets the result. Gradients (see the table in
    /// the crate's README): `Mean` is its own adjoint divided by the group
    /// size; `Max`/`Min` send the summed output gradient to the rank(s)
    /// holding the extremum, a tie shared equally among them; `Prod` is
    /// refused on a tracked input.
    ///
    /// # Errors
    /// As [`TensorExt::all_reduce`]; ranks passing different operators get
    /// [`Error::ReduceOpMismatch`] (or [`Error::Desync`] when some pass
    /// `Sum`, which is [`TensorExt::all_reduce`] itself), a tracked input to
    /// `Prod` [`Error::NotDifferentiable`], on every rank.
    ///
    /// # Example
    /// ```
    /// use burn_tensor::{Device, Tensor};
    /// use ruda_tensor::prelude::*;
    ///
    /// let grads = LocalWorld::new(3).run(|c| {
    ///     let world = HostCollective::new(c);
    ///     let v = [1.0, 5.0, 5.0][world.rank()]; // ranks 1 and 2 tie for the maximum
    ///     let x = Tensor::<1>::from_floats([v], &Device::flex().autodiff()).require_grad();
    ///     let m = x.clone().all_reduce_with(&world, ReduceOp::Max)?;
    ///     assert_eq!(m.clone().into_scalar::<f32>() as f64, 5.0);
    ///     let g = m.sum().backward();
    ///     Ok::<_, Error>(x.grad(&g).unwrap().into_scalar::<f32>() as f64)
    /// }).unwrap();
    /// assert_eq!(grads, vec![0.0, 1.5, 1.5]); // three output gradients of 1, shared by the tie
    /// ```
    fn all_reduce_with<G: Group>(self, group: &G, op: ReduceOp) -> Result<Self, Error>;

    /// Reduce over the group with `op` and keep this rank's balanced chunk
    /// along `dim` (the first `len % n` ranks get one more). `Sum` is
    /// [`TensorExt::reduce_scatter`]; the other operators reduce the whole
    /// tensor (an all-reduce's traffic) and keep the chunk, with the
    /// gradients of [`TensorExt::all_reduce_with`].
    ///
    /// # Errors
    /// As [`TensorExt::all_reduce_with`], plus [`Error::Layout`] when `dim`
    /// is out of range or shorter than the group, on every rank.
    ///
    /// # Example
    /// ```
    /// use burn_tensor::{Device, Tensor};
    /// use ruda_tensor::prelude::*;
    ///
    /// let out = LocalWorld::new(2).run(|c| {
    ///     let world = HostCollective::new(c);
    ///     let r = world.rank() as f32;
    ///     let x = Tensor::<1>::from_floats([r, 1.0 - r, 3.0], &Device::flex());
    ///     let y = x.reduce_scatter_with(&world, 0, ReduceOp::Min)?; // min is [0, 0, 3]
    ///     Ok::<_, Error>(y.into_data().try_to_vec::<f32>().unwrap())
    /// }).unwrap();
    /// assert_eq!(out, vec![vec![0.0, 0.0], vec![3.0]]);
    /// ```
    fn reduce_scatter_with<G: Group>(
        self,
        group: &G,
        dim: isize,
        op: ReduceOp,
    ) -> Result<Self, Error>;

    /// Send this tensor to rank `dest` of the group, which calls
    /// [`crate::recv`]; returns once `dest` has it. Returns an empty
    /// *receipt* (leading axis 0): add `receipt.sum()` to the loss, and the
    /// backward pass receives the gradient `dest`'s backward pass sends
    /// back (the adjoint of a send is a receive). Without autodiff the
    /// receipt can be dropped.
    ///
    /// # Errors
    /// [`Error::PointToPoint`] on both ranks when the pair disagrees (the
    /// receiver asked for another number of dimensions, a tracked tensor
    /// sent to a device without autodiff, the peer in another call); the
    /// communicator's errors (a bad or own rank, the deadline: a peer that
    /// never receives ends in a timeout, not a hang).
    ///
    /// # Example
    /// ```
    /// use burn_tensor::{Device, Tensor};
    /// use ruda_tensor::prelude::*;
    ///
    /// let grads = LocalWorld::new(2).run(|c| {
    ///     let world = HostCollective::new(c);
    ///     let device = Device::flex().autodiff();
    ///     if world.rank() == 0 {
    ///         let x = Tensor::<1>::from_floats([1.0, 2.0], &device).require_grad();
    ///         let receipt = x.clone().send(&world, 1)?;
    ///         let g = receipt.sum().backward(); // receives rank 1's gradient
    ///         Ok::<_, Error>(x.grad(&g).unwrap().into_data().try_to_vec::<f32>().unwrap())
    ///     } else {
    ///         let y: Tensor<1> = recv(&world, 0, &device)?;
    ///         let g = (y.clone() * y).sum().backward(); // d(y·y)/dy = 2y, sent back to rank 0
    ///         let _ = g;
    ///         Ok(Vec::new())
    ///     }
    /// }).unwrap();
    /// assert_eq!(grads[0], vec![2.0, 4.0]);
    /// ```
    fn send<G: Group>(self, group: &G, dest: usize) -> Result<Self, Error>;

    /// Concatenate every rank's tensor along `dim` in rank order (sizes
    /// discovered); the adjoint reduce-scatters.
    ///
    /// # Errors
    /// As [`p::all_gather`].
    fn all_gather<G: Group>(self, group: &G, dim: isize) -> Result<Self, Error>;

    /// Sum over the group and keep this rank's balanced chunk along `dim`;
    /// the adjoint all-gathers.
    ///
    /// # Errors
    /// As [`p::reduce_scatter`].
    fn reduce_scatter<G: Group>(self, group: &G, dim: isize) -> Result<Self, Error>;

    /// Every rank gets `root`'s tensor; the adjoint sums at the root.
    ///
    /// # Errors
    /// As [`p::broadcast`].
    fn broadcast<G: Group>(self, group: &G, root: usize) -> Result<Self, Error>;

    /// The sum over the group at `root`, zeros on every other rank; the
    /// adjoint broadcasts the root's gradient.
    ///
    /// # Errors
    /// As [`p::reduce`].
    ///
    /// # Example
    /// ```
    /// use burn_tensor::{Device, Tensor};
    /// use ruda_comm::LocalWorld;
    /// use ruda_tensor::{Group, HostCollective, TensorExt};
    ///
    /// let out = LocalWorld::new(3).run(|comm| {
    ///     let world = HostCollective::new(comm);
    ///     let x = Tensor::<1>::ones([2], &Device::flex()).mul_scalar(world.rank() as f64 + 1.0);
    ///     let y = x.reduce(&world, 1)?;
    ///     Ok::<_, ruda_tensor::Error>(y.into_data().try_to_vec::<f32>().unwrap())
    /// }).unwrap();
    /// assert_eq!(out, vec![vec![0.0; 2], vec![6.0; 2], vec![0.0; 2]]);
    /// ```
    fn reduce<G: Group>(self, group: &G, root: usize) -> Result<Self, Error>;

    /// Every rank's tensor concatenated along `dim` at `root` (sizes along
    /// `dim` may differ); the other ranks get an empty tensor (`dim` of
    /// size 0). The adjoint scatters the root's gradient back, so every
    /// rank runs the backward pass through its (possibly empty) output.
    ///
    /// # Errors
    /// As [`p::gather_to_root`].
    ///
    /// # Example
    /// ```
    /// use burn_tensor::{Device, Tensor};
    /// use ruda_comm::LocalWorld;
    /// use ruda_tensor::{Group, HostCollective, TensorExt};
    ///
    /// let out = LocalWorld::new(3).run(|comm| {
    ///     let world = HostCollective::new(comm);
    ///     let rows = world.rank() + 1; // 1, 2 and 3 rows
    ///     let x = Tensor::<2>::ones([rows, 2], &Device::flex()).mul_scalar(world.rank() as f64);
    ///     let y = x.gather_to_root(&world, 0, 0)?;
    ///     Ok::<_, ruda_tensor::Error>(y.dims())
    /// }).unwrap();
    /// assert_eq!(out, vec![[6, 2], [0, 2], [0, 2]]);
    /// ```
    fn gather_to_root<G: Group>(self, group: &G, root: usize, dim: isize) -> Result<Self, Error>;

    /// `root`'s tensor split along `dim` in balanced chunks, chunk `r` to
    /// rank `r`; the other ranks' inputs give only the other axes (pass an
    /// empty tensor, tracked exactly when the root's is). The adjoint
    /// gathers the gradients to the root, so every rank runs the backward
    /// pass through its chunk.
    ///
    /// # Errors
    /// As [`p::scatter_from_root`].
    ///
    /// # Example
    /// ```
    /// use burn_tensor::{Device, Tensor};
    /// use ruda_comm::LocalWorld;
    /// use ruda_tensor::{Group, HostCollective, TensorExt};
    ///
    /// let out = LocalWorld::new(2).run(|comm| {
    ///     let world = HostCollective::new(comm);
    ///     let rows = if world.rank() == 1 { 5 } else { 0 }; // rank 1 is the root
    ///     let x = Tensor::<2>::ones([rows, 3], &Device::flex());
    ///     let y = x.scatter_from_root(&world, 1, 0)?;
    ///     Ok::<_, ruda_tensor::Error>(y.dims())
    /// }).unwrap();
    /// assert_eq!(out, vec![[3, 3], [2, 3]]);
    /// ```
    fn scatter_from_root<G: Group>(self, group: &G, root: usize, dim: isize)
    -> Result<Self, Error>;

    /// Send `counts[p]` slices along `dim` to rank `p`; receive every
    /// rank's slices for this rank in source order.
    ///
    /// # Errors
    /// As [`p::all_to_all`].
    fn all_to_all<G: Group>(self, group: &G, dim: isize, counts: &[usize]) -> Result<Self, Error>;

    /// Identity forward, gradient summed over the group (replicated → varying).
    ///
    /// # Errors
    /// As [`p::copy_to`].
    fn copy_to<G: Group>(self, group: &G) -> Result<Self, Error>;

    /// Sum over the group forward, identity backward (varying → replicated).
    ///
    /// # Errors
    /// As [`p::reduce_from`].
    fn reduce_from<G: Group>(self, group: &G) -> Result<Self, Error>;

    /// Keep this rank's balanced chunk along `dim` of a replicated tensor;
    /// the gradient is all-gathered.
    ///
    /// # Errors
    /// As [`p::scatter_to`].
    fn scatter_to<G: Group>(self, group: &G, dim: isize) -> Result<Self, Error>;

    /// All-gather along `dim` into a replicated tensor (sizes discovered);
    /// backward keeps this rank's chunk.
    ///
    /// # Errors
    /// As [`p::gather_from`].
    fn gather_from<G: Group>(self, group: &G, dim: isize) -> Result<Self, Error>;

    /// [`TensorExt::gather_from`] with the per-rank sizes declared (checked).
    ///
    /// # Errors
    /// As [`p::gather_from_sizes`].
    fn gather_from_sizes<G: Group>(
        self,
        group: &G,
        dim: isize,
        sizes: &[usize],
    ) -> Result<Self, Error>;

    /// All-gather along `dim`, reduce-scatter backward (varying → varying).
    ///
    /// # Errors
    /// As [`p::gather_from_copy_to`].
    fn gather_from_copy_to<G: Group>(self, group: &G, dim: isize) -> Result<Self, Error>;

    /// Reduce-scatter along `dim`, all-gather backward (varying → varying).
    ///
    /// # Errors
    /// As [`p::reduce_from_scatter_to`].
    fn reduce_from_scatter_to<G: Group>(self, group: &G, dim: isize) -> Result<Self, Error>;

    /// Distributed transpose: the tensor is split over the group along
    /// `axes.split_in`; the result is split along `axes.split_out`
    /// (balanced) and whole along `axes.split_in` (see [`TransposeAxes`]).
    ///
    /// # Errors
    /// As [`p::transpose`].
    fn transpose_over<G: Group>(self, group: &G, axes: TransposeAxes) -> Result<Self, Error>;

    /// Borrow `radius` rows along `dim` from each neighbour (zeros at the
    /// ends); the adjoint is [`TensorExt::halo_reduce`].
    ///
    /// # Errors
    /// As [`p::halo_exchange`].
    fn halo_exchange<G: Group>(self, group: &G, dim: isize, radius: usize) -> Result<Self, Error>;

    /// Send the halo rows along `dim` home and add them, leaving
    /// `local_rows`; the adjoint is [`TensorExt::halo_exchange`].
    ///
    /// # Errors
    /// As [`p::halo_reduce`].
    fn halo_reduce<G: Group>(
        self,
        group: &G,
        dim: isize,
        radius: usize,
        local_rows: usize,
    ) -> Result<Self, Error>;
}

impl<const D: usize> TensorExt for Tensor<D> {
    fn all_reduce_with<G: Group>(self, group: &G, op: ReduceOp) -> Result<Self, Error> {
        crate::reduce_with::reduce_with(self, group, op, None)
    }

    fn reduce_scatter_with<G: Group>(
        self,
        group: &G,
        dim: isize,
        op: ReduceOp,
    ) -> Result<Self, Error> {
        crate::reduce_with::reduce_with(self, group, op, Some(dim))
    }

    fn send<G: Group>(self, group: &G, dest: usize) -> Result<Self, Error> {
        crate::p2p::send(self, group, dest)
    }

    fn all_reduce<G: Group>(self, group: &G) -> Result<Self, Error> {
        routed!(self, D, burn_tensor::Float, |B, t| p::all_reduce::<B>(
            group, t
        ))
    }

    fn all_gather<G: Group>(self, group: &G, dim: isize) -> Result<Self, Error> {
        routed!(self, D, burn_tensor::Float, |B, t| p::all_gather::<B>(
            group, t, dim
        ))
    }

    fn reduce_scatter<G: Group>(self, group: &G, dim: isize) -> Result<Self, Error> {
        routed!(self, D, burn_tensor::Float, |B, t| p::reduce_scatter::<B>(
            group, t, dim
        ))
    }

    fn broadcast<G: Group>(self, group: &G, root: usize) -> Result<Self, Error> {
        routed!(self, D, burn_tensor::Float, |B, t| p::broadcast::<B>(
            group, t, root
        ))
    }

    fn reduce<G: Group>(self, group: &G, root: usize) -> Result<Self, Error> {
        routed!(self, D, burn_tensor::Float, |B, t| p::reduce::<B>(
            group, t, root
        ))
    }

    fn gather_to_root<G: Group>(self, group: &G, root: usize, dim: isize) -> Result<Self, Error> {
        routed!(self, D, burn_tensor::Float, |B, t| p::gather_to_root::<B>(
            group, t, root, dim
        ))
    }

    fn scatter_from_root<G: Group>(
        self,
        group: &G,
        root: usize,
        dim: isize,
    ) -> Result<Self, Error> {
        routed!(
            self,
            D,
            burn_tensor::Float,
            |B, t| p::scatter_from_root::<B>(group, t, root, dim)
        )
    }

    fn all_to_all<G: Group>(self, group: &G, dim: isize, counts: &[usize]) -> Result<Self, Error> {
        routed!(self, D, burn_tensor::Float, |B, t| p::all_to_all::<B>(
            group, t, dim, counts
        ))
    }

    fn copy_to<G: Group>(self, group: &G) -> Result<Self, Error> {
        routed!(self, D, burn_tensor::Float, |B, t| p::copy_to::<B>(
            group, t
        ))
    }

    fn reduce_from<G: Group>(self, group: &G) -> Result<Self, Error> {
        routed!(self, D, burn_tensor::Float, |B, t| p::reduce_from::<B>(
            group, t
        ))
    }

    fn scatter_to<G: Group>(self, group: &G, dim: isize) -> Result<Self, Error> {
        routed!(self, D, burn_tensor::Float, |B, t| p::scatter_to::<B>(
            group, t, dim
        ))
    }

    fn gather_from<G: Group>(self, group: &G, dim: isize) -> Result<Self, Error> {
        routed!(self, D, burn_tensor::Float, |B, t| p::gather_from::<B>(
            group, t, dim
        ))
    }

    fn gather_from_sizes<G: Group>(
        self,
        group: &G,
        dim: isize,
        sizes: &[usize],
    ) -> Result<Self, Error> {
        routed!(
            self,
            D,
            burn_tensor::Float,
            |B, t| p::gather_from_sizes::<B>(group, t, dim, sizes)
        )
    }

    fn gather_from_copy_to<G: Group>(self, group: &G, dim: isize) -> Result<Self, Error> {
        routed!(
            self,
            D,
            burn_tensor::Float,
            |B, t| p::gather_from_copy_to::<B>(group, t, dim, None)
        )
    }

    fn reduce_from_scatter_to<G: Group>(self, group: &G, dim: isize) -> Result<Self, Error> {
        routed!(self, D, burn_tensor::Float, |B, t| {
            p::reduce_from_scatter_to::<B>(group, t, dim)
        })
    }

    fn transpose_over<G: Group>(self, group: &G, axes: TransposeAxes) -> Result<Self, Error> {
        routed!(self, D, burn_tensor::Float, |B, t| p::transpose::<B>(
            group, t, axes, None
        ))
    }

    fn halo_exchange<G: Group>(self, group: &G, dim: isize, radius: usize) -> Result<Self, Error> {
        routed!(self, D, burn_tensor::Float, |B, t| p::halo_exchange::<B>(
            group, t, dim, radius
        ))
    }

    fn halo_reduce<G: Group>(
        self,
        group: &G,
        dim: isize,
        radius: usize,
        local_rows: usize,
    ) -> Result<Self, Error> {
        routed!(self, D, burn_tensor::Float, |B, t| {
            p::halo_reduce::<B>(group, t, dim, radius, local_rows)
        })
    }
}

/// ruda's integer operations as methods of an integer [`Tensor`]: moved
/// bit for bit, never through floats; integers carry no gradient.
///
/// # Example
/// ```
/// use burn_tensor::{Device, Int, Tensor};
/// use ruda_comm::LocalWorld;
/// use ruda_tensor::{HostCollective, IntTensorExt};
/// let out = LocalWorld::new(2).run(|c| {
///     let me = ruda_comm::Communicator::rank(&c) as i32;
///     let ids = Tensor::<1, Int>::from_ints([me, me + 10], &Device::flex()); // i32
///     let all = ids.all_gather(&HostCollective::new(c), 0)?;
///     Ok::<_, ruda_tensor::Error>(all.into_data().try_to_vec::<i32>().unwrap())
/// }).unwrap();
/// assert_eq!(out[0], vec![0, 10, 1, 11]);
/// ```
pub trait IntTensorExt: Sized {
    /// Concatenate every rank's tensor along `dim` in rank order (sizes
    /// along `dim` discovered; every other axis must agree).
    ///
    /// # Errors
    /// As [`TensorExt::all_gather`].
    fn all_gather<G: Group>(self, group: &G, dim: isize) -> Result<Self, Error>;

    /// Send `counts[p]` slices along `dim` to rank `p`; returns what every
    /// rank sent here, in source order, and the count from each source.
    ///
    /// # Errors
    /// As [`TensorExt::all_to_all`].
    fn all_to_all<G: Group>(
        self,
        group: &G,
        dim: isize,
        counts: &[usize],
    ) -> Result<(Self, Vec<usize>), Error>;
}

impl<const D: usize> IntTensorExt for Tensor<D, Int> {
    fn all_gather<G: Group>(self, group: &G, dim: isize) -> Result<Self, Error> {
        routed!(self, D, Int, |B, t| crate::ints::all_gather_int::<B, G>(
            group,
            TensorOp::AllGatherInt,
            t,
            dim,
            false
        ))
    }

    fn all_to_all<G: Group>(
        self,
        group: &G,
        dim: isize,
        counts: &[usize],
    ) -> Result<(Self, Vec<usize>), Error> {
        let mut received = Vec::new();
        let out = routed!(self, D, Int, |B, t| crate::ints::all_to_all_int::<B, G>(
            group,
            TensorOp::AllToAllInt,
            t,
            dim,
            counts
        )
        .map(|(x, r)| {
            received = r;
            x
        }));
        out.map(|x| (x, received))
    }
}
