//! Seed 004's operations on Burn's user-facing tensors.

use core::ops::Range;

use burn_tensor::{Int, Tensor};

use super::{ReplicaAllGather, ReplicaAllToAll, ReplicaReduceScatter, all_reduce_op};
use crate::error::{Error, LookupProblem, ShapeProblem, TensorOp};
use crate::group::Group;
use crate::ops::apply;
use crate::route::routed;

/// Seed 004's `all_reduce_hbm_kernel`: the sum of every rank's `x` (one
/// shape everywhere) over the replica group, in rank order, the same bits
/// on every rank. Its own adjoint.
///
/// # Errors
/// [`Error::ShapeMismatch`], [`Error::DTypeMismatch`],
/// [`Error::TrackingMismatch`], [`Error::UnsupportedDType`] (integers), the
/// same on every rank; [`Error::Comm`]; [`Error::UnsupportedTensor`] for a
/// tensor on a backend ruda does not run on.
///
/// # Example
/// See the [module documentation](crate::replica).
pub fn all_reduce<const D: usize, G: Group>(x: Tensor<D>, group: &G) -> Result<Tensor<D>, Error> {
    routed!(x, D, burn_tensor::Float, |B, t| apply::<B, G, _>(
        group,
        all_reduce_op(),
        t
    ))
}

/// Seed 004's `all_gather_hbm_kernel`: every rank's `[d0, …]` (one shape
/// everywhere) stacked along dimension 0 in rank order: `[num_ranks·d0, …]`.
/// `num_ranks` must be the replica group's size. The adjoint reduce-scatters.
///
/// # Errors
/// [`Error::NumRanks`] when a rank's `num_ranks` is not the group's size;
/// [`Error::BadShape`] for a tensor without axes; otherwise as
/// [`all_reduce`] (any float dtype moves).
///
/// # Example
/// ```
/// use burn_tensor::{Device, Tensor};
/// use ruda_tensor::{DeviceWorld, Group, replica};
/// let out = DeviceWorld::shared(2, Device::flex()).run(|g, device| {
///     let x = Tensor::<2>::from_floats([[g.rank() as f32, 1.0]], device);
///     let y = replica::all_gather(x, &g, 2)?; // [2, 2]
///     Ok::<_, ruda_tensor::Error>(y.into_data().try_to_vec::<f32>().unwrap())
/// }).unwrap();
/// assert_eq!(out[1], vec![0.0, 1.0, 1.0, 1.0]);
/// ```
pub fn all_gather<const D: usize, G: Group>(
    x: Tensor<D>,
    group: &G,
    num_ranks: usize,
) -> Result<Tensor<D>, Error> {
    routed!(x, D, burn_tensor::Float, |B, t| apply::<B, G, _>(
        group,
        ReplicaAllGather::new(num_ranks),
        t
    ))
}

/// Seed 004's `reduce_scatter_hbm_kernel`: the sum over the replica group
/// of every rank's `[num_ranks·c, …]`, dimension 0 split into `num_ranks`
/// chunks; rank `r` keeps chunk `r` (`[c, …]`). The adjoint all-gathers.
///
/// # Errors
/// [`Error::NumRanks`]; [`Error::BadShape`] with
/// [`ShapeProblem::NotDivisible`] when dimension 0 does not split into
/// `num_ranks` chunks; otherwise as [`all_reduce`].
///
/// # Example
/// ```
/// use burn_tensor::{Device, Tensor};
/// use ruda_tensor::{DeviceWorld, Group, replica};
/// let out = DeviceWorld::shared(2, Device::flex()).run(|g, device| {
///     let x = Tensor::<1>::from_floats([1.0, 2.0, 3.0, 4.0], device);
///     let y = replica::reduce_scatter(x, &g, 2)?; // rank 0: [2, 4], rank 1: [6, 8]
///     Ok::<_, ruda_tensor::Error>(y.into_data().try_to_vec::<f32>().unwrap())
/// }).unwrap();
/// assert_eq!(out, vec![vec![2.0, 4.0], vec![6.0, 8.0]]);
/// ```
pub fn reduce_scatter<const D: usize, G: Group>(
    x: Tensor<D>,
    group: &G,
    num_ranks: usize,
) -> Result<Tensor<D>, Error> {
    routed!(x, D, burn_tensor::Float, |B, t| apply::<B, G, _>(
        group,
        ReplicaReduceScatter::new(num_ranks),
        t
    ))
}

/// Seed 004's `all_to_all_hbm_kernel`: dimension 0 of every rank's
/// `[n·c, …]` split into `n` blocks (`n` the group's size); block `i` goes
/// to the group's rank `i`, which stacks the blocks it receives in source
/// order. Its own adjoint.
///
/// # Errors
/// [`Error::BadShape`] with [`ShapeProblem::NotDivisible`] when dimension 0
/// does not split into `n` blocks; otherwise as [`all_gather`].
///
/// # Example
/// ```
/// use burn_tensor::{Device, Tensor};
/// use ruda_tensor::{DeviceWorld, Group, replica};
/// let out = DeviceWorld::shared(2, Device::flex()).run(|g, device| {
///     let me = g.rank() as f32 * 10.0;
///     let x = Tensor::<1>::from_floats([me, me + 1.0], device);
///     let y = replica::all_to_all(x, &g)?;
///     Ok::<_, ruda_tensor::Error>(y.into_data().try_to_vec::<f32>().unwrap())
/// }).unwrap();
/// assert_eq!(out, vec![vec![0.0, 10.0], vec![1.0, 11.0]]);
/// ```
pub fn all_to_all<const D: usize, G: Group>(x: Tensor<D>, group: &G) -> Result<Tensor<D>, Error> {
    routed!(x, D, burn_tensor::Float, |B, t| apply::<B, G, _>(
        group,
        ReplicaAllToAll::new(),
        t
    ))
}

/// Chunk `index` of `n` along dimension 0 (a slice: differentiable, no copy
/// on backends with views).
fn chunk<const D: usize>(
    x: Tensor<D>,
    op: TensorOp,
    rank: usize,
    n: usize,
    index: usize,
) -> Result<Tensor<D>, Error> {
    let dims = x.dims();
    let Some(&rows) = dims.first() else {
        return Err(Error::BadShape {
            op,
            rank,
            offender: rank,
            shape: dims.to_vec(),
            problem: ShapeProblem::NoLeadingAxis,
        });
    };
    if !rows.is_multiple_of(n) {
        return Err(Error::BadShape {
            op,
            rank,
            offender: rank,
            shape: dims.iter().copied().take(8).collect(),
            problem: ShapeProblem::NotDivisible { ranks: n },
        });
    }
    let c = rows / n;
    if c == 0 || dims.contains(&0) {
        // An empty slice: `x` itself holds no elements. Burn's slices of
        // empty results are new tensors off the autodiff graph, so reshape
        // `x` instead (nothing to copy, and the gradient stays connected).
        let mut out = dims;
        out[0] = c;
        return Ok(crate::reshape(x, out));
    }
    let ranges: [Range<usize>; D] = core::array::from_fn(|d| {
        if d == 0 {
            index * c..(index + 1) * c
        } else {
            0..dims[d]
        }
    });
    Ok(x.slice(ranges))
}

/// Seed 004's `rank_id_kernel`: this rank's slice of `x`, its rank id in
/// the replica group as the offset — dimension 0 split into the group's
/// size `n` chunks, chunk `rank` kept. Communicates nothing; differentiable
/// (the gradient lands in this rank's chunk, zeros elsewhere).
///
/// # Errors
/// [`Error::BadShape`] (on the calling rank) when dimension 0 does not
/// split into `n` chunks.
///
/// # Example
/// ```
/// use burn_tensor::{Device, Tensor};
/// use ruda_tensor::{DeviceWorld, replica};
/// let out = DeviceWorld::shared(2, Device::flex()).run(|g, device| {
///     let x = Tensor::<1>::from_floats([1.0, 2.0, 3.0, 4.0], device);
///     let mine = replica::rank_slice(x, &g)?;
///     Ok::<_, ruda_tensor::Error>(mine.into_data().try_to_vec::<f32>().unwrap())
/// }).unwrap();
/// assert_eq!(out, vec![vec![1.0, 2.0], vec![3.0, 4.0]]);
/// ```
pub fn rank_slice<const D: usize, G: Group>(x: Tensor<D>, group: &G) -> Result<Tensor<D>, Error> {
    let me = group.rank();
    chunk(x, TensorOp::RankSlice, me, group.size(), me)
}

/// Seed 004's `dma_copy_rank_id_kernel`: as [`rank_slice`], with the
/// offset looked up: chunk `lookup[rank]` of `n`, where `lookup` holds one
/// slice index per rank of the group. This rank's entry is read from the
/// table (one element); the slice itself stays on the device.
///
/// # Errors
/// [`Error::RankLookup`] when `lookup` is not `[n]`
/// ([`LookupProblem::Shape`]) or this rank's entry is not below `n`
/// ([`LookupProblem::Index`]); [`Error::BadShape`] as [`rank_slice`]. All
/// on the calling rank.
///
/// # Example
/// ```
/// use burn_tensor::{Device, Int, Tensor};
/// use ruda_tensor::{DeviceWorld, replica};
/// let out = DeviceWorld::shared(2, Device::flex()).run(|g, device| {
///     let x = Tensor::<1>::from_floats([1.0, 2.0, 3.0, 4.0], device);
///     let lookup = Tensor::<1, Int>::from_ints([1, 0], device); // ranks swap slices
///     let mine = replica::rank_slice_by(x, &lookup, &g)?;
///     Ok::<_, ruda_tensor::Error>(mine.into_data().try_to_vec::<f32>().unwrap())
/// }).unwrap();
/// assert_eq!(out, vec![vec![3.0, 4.0], vec![1.0, 2.0]]);
/// ```
pub fn rank_slice_by<const D: usize, G: Group>(
    x: Tensor<D>,
    lookup: &Tensor<1, Int>,
    group: &G,
) -> Result<Tensor<D>, Error> {
    let (me, n) = (group.rank(), group.size());
    let len = lookup.dims()[0];
    if len != n {
        return Err(Error::RankLookup {
            rank: me,
            problem: LookupProblem::Shape {
                ndim: 1,
                len,
                size: n,
            },
        });
    }
    let entry = lookup
        .clone()
        .narrow(0, me, 1)
        .into_data()
        .convert::<i64>()
        .try_to_vec::<i64>()
        .map_err(|e| Error::Backend {
            op: TensorOp::RankSliceBy,
            rank: me,
            message: alloc::format!("{e:?}"),
        })?;
    let index = entry[0];
    let slot = usize::try_from(index).ok().filter(|&i| i < n);
    let Some(slot) = slot else {
        return Err(Error::RankLookup {
            rank: me,
            problem: LookupProblem::Index { index, size: n },
        });
    };
    chunk(x, TensorOp::RankSliceBy, me, n, slot)
}
