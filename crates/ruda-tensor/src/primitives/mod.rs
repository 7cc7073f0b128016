//! The differentiable distributed primitives of a polar × azimuth grid
//! (seed 000), generic over the group they run on, plus the seed's names
//! as thin entry points on a [`ProcessGrid`].
//!
//! Forward and backward follow DESIGN.md §2:
//!
//! | primitive | forward | backward | maps |
//! |---|---|---|---|
//! | [`copy_to`] | identity | all-reduce(sum) | replicated → varying |
//! | [`reduce_from`] | all-reduce(sum) | identity | varying → replicated |
//! | [`scatter_to`] | keep this rank's chunk | all-gather along dim | replicated → varying |
//! | [`gather_from`] | all-gather along dim | keep this rank's chunk | varying → replicated |
//! | [`gather_from_copy_to`] | all-gather along dim | reduce-scatter(sum) along dim | varying → varying |
//! | [`reduce_from_scatter_to`] | reduce-scatter(sum) along dim | all-gather along dim | varying → varying |
//! | [`transpose`] | all-to-all: input split along `dims.1`, output along `dims.0` | the inverse all-to-all | varying → varying |
//! | [`halo_exchange`] | borrow `r` rows from each neighbour (zeros at the poles) | send halo gradients home and add | varying → varying |
//! | [`halo_reduce`] | send halo rows home and add | borrow `r` rows from each neighbour | varying → varying |
//!
//! The first four record their own backward ([`RegionBackend`]); the rest
//! are compositions of the contract's collectives and Burn's layout
//! operations, so their adjoints follow from those. Unlike the reference:
//! per-rank sizes travel from forward to backward (any consistent uneven
//! layout works both ways); declared sizes are checked against the real
//! ones on every call, by a small exchange, with the same error on every
//! rank; a halo radius of 0 is a no-op; a radius wider than a neighbour's
//! chunk is an error on every rank; dimensions may be negative; any tensor
//! of 2 to 5 (or more) dimensions works. A group of one rank behaves as no
//! distribution, except that the halo primitives still pad (and drop) the
//! polar boundary rows, so shapes never depend on the grid.

mod error;
mod region;
mod staged;

use alloc::vec::Vec;
use core::fmt::Debug;

use burn_backend::tensor::FloatTensor;
use burn_backend::{Shape, TensorMetadata};
use ruda_comm::Communicator;

pub use error::{PrimitiveError, PrimitiveOp};
pub use region::RegionBackend;

use crate::HostCollective;
use crate::collective::NeighbourTensorExchange;
use crate::grid::{Axis, ProcessGrid};
use crate::layout::{narrow, starts, zeros_like_along};
use staged::{check_sizes, dim_of, front, gather_dim, reduce_scatter_dim, split_sizes};

/// Identity forward; all-reduce(sum) of the gradient over `group` backward.
/// Use it where a replicated value enters per-rank computation.
///
/// # Errors
/// None in the forward pass (the signature matches the others').
///
/// # Example
/// ```
/// # use ruda_tensor::primitives::*;
/// # use ruda_tensor::HostCollective;
/// # use burn_backend::{TensorData, ops::FloatTensorOps};
/// # use burn_flex::{Flex, FlexDevice};
/// ruda_comm::LocalWorld::new(2).run(|c| {
///     let g = HostCollective::new(c);
///     let x = Flex::float_from_data(TensorData::new(vec![1f32, 2.0], [2]), &FlexDevice);
///     copy_to::<Flex, _>(&g, x).map(|_| ())
/// }).unwrap();
/// ```
pub fn copy_to<B: RegionBackend, C: Communicator + Debug + 'static>(
    group: &HostCollective<C>,
    x: FloatTensor<B>,
) -> Result<FloatTensor<B>, PrimitiveError> {
    B::copy_to_region(group, x)
}

/// All-reduce(sum) over `group` forward; identity backward. Use it where
/// per-rank partial results become one replicated value.
///
/// # Errors
/// The contract's errors (shapes or dtypes that differ across ranks…).
pub fn reduce_from<B: RegionBackend, C: Communicator + Debug + 'static>(
    group: &HostCollective<C>,
    x: FloatTensor<B>,
) -> Result<FloatTensor<B>, PrimitiveError> {
    B::reduce_from_region(group, x)
}

/// Keep this rank's balanced chunk of a replicated tensor along `dim`;
/// backward all-gathers the gradient.
///
/// # Errors
/// [`PrimitiveError::Layout`] for a bad dimension or one too short to
/// give every rank a chunk.
pub fn scatter_to<B: RegionBackend, C: Communicator + Debug + 'static>(
    group: &HostCollective<C>,
    x: FloatTensor<B>,
    dim: isize,
) -> Result<FloatTensor<B>, PrimitiveError> {
    let op = PrimitiveOp::ScatterTo;
    let d = dim_of::<B, C>(group, op, &x, dim)?;
    let sizes = split_sizes(group, op, x.shape()[d])?;
    B::scatter_to_region(group, x, d, sizes)
}

/// All-gather along `dim`, rank `r` holding `sizes[r]` entries (checked on
/// every call); backward keeps this rank's chunk of the gradient.
///
/// # Errors
/// [`PrimitiveError::DeclaredSizes`] on every rank when any rank's `sizes`
/// differ from what the ranks hold; [`PrimitiveError::Layout`] for a bad
/// dimension; the contract's errors.
pub fn gather_from<B: RegionBackend, C: Communicator + Debug + 'static>(
    group: &HostCollective<C>,
    x: FloatTensor<B>,
    dim: isize,
    sizes: &[usize],
) -> Result<FloatTensor<B>, PrimitiveError> {
    let d = dim_of::<B, C>(group, PrimitiveOp::GatherFrom, &x, dim)?;
    B::gather_from_region(group, x, d, sizes.to_vec())
}

/// All-gather along `dim` (sizes as in [`gather_from`]); backward
/// reduce-scatters the gradient with the same sizes.
///
/// # Errors
/// As [`gather_from`].
pub fn gather_from_copy_to<B: RegionBackend, C: Communicator + Debug + 'static>(
    group: &HostCollective<C>,
    x: FloatTensor<B>,
    dim: isize,
    sizes: &[usize],
) -> Result<FloatTensor<B>, PrimitiveError> {
    let op = PrimitiveOp::GatherFromCopyTo;
    let d = dim_of::<B, C>(group, op, &x, dim)?;
    gather_dim::<B, C>(group, op, x, d, sizes)
}

/// Sum over `group` and keep this rank's balanced chunk along `dim`;
/// backward all-gathers the gradient.
///
/// # Errors
/// [`PrimitiveError::Layout`] for a bad dimension or one too short to give
/// every rank a chunk; the contract's errors.
pub fn reduce_from_scatter_to<B: RegionBackend, C: Communicator + Debug + 'static>(
    group: &HostCollective<C>,
    x: FloatTensor<B>,
    dim: isize,
) -> Result<FloatTensor<B>, PrimitiveError> {
    let op = PrimitiveOp::ReduceFromScatterTo;
    let d = dim_of::<B, C>(group, op, &x, dim)?;
    reduce_scatter_dim::<B, C>(group, op, x, d)
}

/// Distributed transpose over `group`: the input is split over the ranks
/// along `dims.1` (rank `r` holds `dim1_sizes[r]` entries, checked on every
/// call) and whole along `dims.0`; the output is split along `dims.0` in
/// balanced chunks and whole along `dims.1`. Backward is the inverse
/// transpose with the actual sizes of the forward.
///
/// # Errors
/// [`PrimitiveError::DeclaredSizes`] on every rank for wrong sizes;
/// [`PrimitiveError::Layout`] for bad dimensions, equal dimensions, or a
/// `dims.0` too short to give every rank a chunk; the contract's errors.
pub fn transpose<B: RegionBackend, C: Communicator + Debug + 'static>(
    group: &HostCollective<C>,
    x: FloatTensor<B>,
    dims: (isize, isize),
    dim1_sizes: &[usize],
) -> Result<FloatTensor<B>, PrimitiveError> {
    let op = PrimitiveOp::Transpose;
    let (d0, d1) = (
        dim_of::<B, C>(group, op, &x, dims.0)?,
        dim_of::<B, C>(group, op, &x, dims.1)?,
    );
    if d0 == d1 {
        return Err(staged::layout_error(
            group,
            op,
            crate::layout::LayoutError::Dim {
                dim: dims.1,
                ndim: x.shape().num_dims(),
            },
        ));
    }
    let shape = x.shape().to_vec();
    check_sizes(group, op, shape[d1], dim1_sizes)?;
    let c0 = split_sizes(group, op, shape[d0])?;
    let (me, n) = (group.comm().rank(), group.comm().size());
    if n == 1 {
        return Ok(x);
    }
    // Order the axes [d0, d1, rest…] so each destination's chunk of d0 is
    // contiguous, and exchange elements as rows of one.
    let rest: Vec<usize> = (0..shape.len()).filter(|&d| d != d0 && d != d1).collect();
    let mut perm = alloc::vec![d0, d1];
    perm.extend_from_slice(&rest);
    let rest_len: usize = rest.iter().map(|&d| shape[d]).product();
    let numel: usize = shape.iter().product();
    let flat = B::float_reshape(
        B::float_permute(x, &perm),
        Shape::from(alloc::vec![numel, 1]),
    );
    let send: Vec<usize> = c0.iter().map(|&c| c * shape[d1] * rest_len).collect();
    let (recv, got) = B::all_to_all_v_float(group, flat, &send)?;
    let mut blocks = Vec::with_capacity(n);
    for (p, (s, &len)) in starts(&got).into_iter().zip(&got).enumerate() {
        let mut block_shape = alloc::vec![c0[me], dim1_sizes[p]];
        block_shape.extend(rest.iter().map(|&d| shape[d]));
        debug_assert_eq!(len, block_shape.iter().product::<usize>());
        blocks.push(B::float_reshape(
            narrow::<B>(recv.clone(), 0, s, len),
            Shape::from(block_shape),
        ));
    }
    let joined = B::float_cat(blocks, 1);
    let mut inverse = alloc::vec![0; perm.len()];
    for (i, &p) in perm.iter().enumerate() {
        inverse[p] = i;
    }
    Ok(B::float_permute(joined, &inverse))
}

/// Every rank's rows along `dim` and the radius it passed, checked on every
/// rank: with more than one rank, each must hold at least `radius` rows
/// and all must pass the same radius.
fn check_halo<C: Communicator>(
    group: &HostCollective<C>,
    op: PrimitiveOp,
    rows: usize,
    radius: usize,
) -> Result<(), PrimitiveError> {
    let c = group.comm();
    let (me, n) = (c.rank(), c.size());
    let mut all = alloc::vec![0i64; 2 * n];
    c.all_gather(&[rows as i64, radius as i64], &mut all)?;
    for (r, w) in all.chunks(2).enumerate() {
        let (rows, rad) = (w[0] as usize, w[1] as usize);
        if rad != all[1] as usize || (n > 1 && rows < rad) {
            return Err(PrimitiveError::Halo {
                op,
                rank: me,
                offender: r,
                rows,
                radius: rad,
            });
        }
    }
    Ok(())
}

/// The neighbours along the group (no wrap-around): `(prev, next)`.
fn polar_neighbours(me: usize, n: usize) -> (Option<usize>, Option<usize>) {
    (me.checked_sub(1), (me + 1 < n).then_some(me + 1))
}

/// Borrow `radius` rows along `lat_dim` from each neighbour in `group`
/// (the previous rank's last rows above, the next rank's first rows below;
/// zeros beyond the first and last rank), giving `rows + 2 × radius` rows.
/// Backward sends the halo gradients home and adds them. Radius 0 returns
/// `x` unchanged without communicating.
///
/// # Errors
/// [`PrimitiveError::Halo`] on every rank when a rank holds fewer rows than
/// the radius or the radii differ; [`PrimitiveError::Layout`] for a bad
/// dimension; the contract's errors.
pub fn halo_exchange<B: RegionBackend, C: Communicator + Debug + 'static>(
    group: &HostCollective<C>,
    x: FloatTensor<B>,
    radius: usize,
    lat_dim: isize,
) -> Result<FloatTensor<B>, PrimitiveError> {
    let op = PrimitiveOp::HaloExchange;
    let d = dim_of::<B, C>(group, op, &x, lat_dim)?;
    if radius == 0 {
        return Ok(x);
    }
    let rows = x.shape()[d];
    check_halo(group, op, rows, radius)?;
    let (me, n) = (group.comm().rank(), group.comm().size());
    let (prev, next) = polar_neighbours(me, n);
    let xt = front::<B>(x, d);
    let mut parts = Vec::new();
    let mut sends = Vec::new();
    if let Some(p) = prev {
        parts.push(narrow::<B>(xt.clone(), 0, 0, radius));
        sends.push((p as u32, radius));
    }
    if let Some(q) = next {
        parts.push(narrow::<B>(xt.clone(), 0, rows - radius, radius));
        sends.push((q as u32, radius));
    }
    let from: Vec<u32> = prev.into_iter().chain(next).map(|r| r as u32).collect();
    let packed = if parts.is_empty() {
        narrow::<B>(xt.clone(), 0, 0, 0)
    } else {
        B::float_cat(parts, 0)
    };
    let mut got = NeighbourTensorExchange::<B>::exchange_rows_float(group, packed, &sends, &from)?
        .into_iter();
    let top = match prev {
        Some(_) => got.next().expect("one block per source"),
        None => zeros_like_along::<B>(&xt, 0, radius),
    };
    let bottom = match next {
        Some(_) => got.next().expect("one block per source"),
        None => zeros_like_along::<B>(&xt, 0, radius),
    };
    Ok(front::<B>(B::float_cat(alloc::vec![top, xt, bottom], 0), d))
}

/// The adjoint of [`halo_exchange`]: `y` holds `local_rows + 2 × radius`
/// rows along `lat_dim`; its halo rows are sent to the neighbours that own
/// them and added onto their rows (dropped beyond the first and last rank),
/// giving `local_rows` rows. Backward borrows rows like [`halo_exchange`].
///
/// # Errors
/// [`PrimitiveError::HaloShape`] when `y` has the wrong number of rows;
/// otherwise as [`halo_exchange`].
pub fn halo_reduce<B: RegionBackend, C: Communicator + Debug + 'static>(
    group: &HostCollective<C>,
    y: FloatTensor<B>,
    radius: usize,
    local_rows: usize,
    lat_dim: isize,
) -> Result<FloatTensor<B>, PrimitiveError> {
    let op = PrimitiveOp::HaloReduce;
    let d = dim_of::<B, C>(group, op, &y, lat_dim)?;
    let rows = y.shape()[d];
    let expected = local_rows + 2 * radius;
    if rows != expected {
        return Err(PrimitiveError::HaloShape {
            rank: group.comm().rank(),
            rows,
            expected,
        });
    }
    if radius == 0 {
        return Ok(y);
    }
    check_halo(group, op, local_rows, radius)?;
    let (me, n) = (group.comm().rank(), group.comm().size());
    let (prev, next) = polar_neighbours(me, n);
    let yt = front::<B>(y, d);
    let mut out = narrow::<B>(yt.clone(), 0, radius, local_rows);
    let mut parts = Vec::new();
    let mut sends = Vec::new();
    if let Some(p) = prev {
        parts.push(narrow::<B>(yt.clone(), 0, 0, radius));
        sends.push((p as u32, radius));
    }
    if let Some(q) = next {
        parts.push(narrow::<B>(yt.clone(), 0, radius + local_rows, radius));
        sends.push((q as u32, radius));
    }
    let from: Vec<u32> = prev.into_iter().chain(next).map(|r| r as u32).collect();
    let packed = if parts.is_empty() {
        narrow::<B>(yt.clone(), 0, 0, 0)
    } else {
        B::float_cat(parts, 0)
    };
    let mut got = NeighbourTensorExchange::<B>::exchange_rows_float(group, packed, &sends, &from)?
        .into_iter();
    let rest = local_rows - radius;
    if prev.is_some() {
        let add = got.next().expect("one block per source");
        let pad = zeros_like_along::<B>(&add, 0, rest);
        out = B::float_add(out, B::float_cat(alloc::vec![add, pad], 0));
    }
    if next.is_some() {
        let add = got.next().expect("one block per source");
        let pad = zeros_like_along::<B>(&add, 0, rest);
        out = B::float_add(out, B::float_cat(alloc::vec![pad, add], 0));
    }
    Ok(front::<B>(out, d))
}

/// `(prev, next)` world ranks of this rank's neighbours in the group along
/// `axis`, wrapping around.
///
/// # Example
/// See [`ProcessGrid::neighbors`].
pub fn get_group_neighbors<C: Communicator + Debug + 'static>(
    grid: &ProcessGrid<C>,
    axis: Axis,
) -> (usize, usize) {
    grid.neighbors(axis)
}

macro_rules! on_axis {
    ($(#[$doc:meta])* $name:ident => $generic:ident on $axis:ident ( $($arg:ident : $ty:ty),* )) => {
        $(#[$doc])*
        ///
        /// # Errors
        /// As the generic primitive it calls.
        pub fn $name<B: RegionBackend, C: Communicator + Debug + 'static>(
            grid: &ProcessGrid<C>,
            x: FloatTensor<B>,
            $($arg: $ty),*
        ) -> Result<FloatTensor<B>, PrimitiveError> {
            $generic::<B, C>(grid.group(Axis::$axis), x, $($arg),*)
        }
    };
}

on_axis!(
    /// [`transpose`] over the azimuth group.
    distributed_transpose_azimuth => transpose on Azimuth (dims: (isize, isize), shapes: &[usize]));
on_axis!(
    /// [`transpose`] over the polar group.
    distributed_transpose_polar => transpose on Polar (dims: (isize, isize), shapes: &[usize]));
on_axis!(
    /// [`copy_to`] over the polar group.
    copy_to_polar_region => copy_to on Polar ());
on_axis!(
    /// [`copy_to`] over the azimuth group.
    copy_to_azimuth_region => copy_to on Azimuth ());
on_axis!(
    /// [`reduce_from`] over the polar group.
    reduce_from_polar_region => reduce_from on Polar ());
on_axis!(
    /// [`reduce_from`] over the azimuth group.
    reduce_from_azimuth_region => reduce_from on Azimuth ());
on_axis!(
    /// [`scatter_to`] over the polar group.
    scatter_to_polar_region => scatter_to on Polar (dim: isize));
on_axis!(
    /// [`gather_from`] over the polar group.
    gather_from_polar_region => gather_from on Polar (dim: isize, shapes: &[usize]));
on_axis!(
    /// [`gather_from_copy_to`] over the polar group.
    gather_from_copy_to_polar_region => gather_from_copy_to on Polar (dim: isize, shapes: &[usize]));
on_axis!(
    /// [`reduce_from_scatter_to`] over the polar group.
    reduce_from_scatter_to_polar_region => reduce_from_scatter_to on Polar (dim: isize));
on_axis!(
    /// [`reduce_from_scatter_to`] over the azimuth group.
    reduce_from_scatter_to_azimuth_region => reduce_from_scatter_to on Azimuth (dim: isize));

/// [`halo_exchange`] over the polar group, latitudes being the
/// second-to-last dimension (`[.., lat, lon]`).
///
/// # Errors
/// As [`halo_exchange`].
pub fn polar_halo_exchange<B: RegionBackend, C: Communicator + Debug + 'static>(
    grid: &ProcessGrid<C>,
    x: FloatTensor<B>,
    radius: usize,
) -> Result<FloatTensor<B>, PrimitiveError> {
    halo_exchange::<B, C>(grid.polar(), x, radius, -2)
}

/// [`halo_reduce`] over the polar group, latitudes being the second-to-last
/// dimension.
///
/// # Errors
/// As [`halo_reduce`].
pub fn polar_halo_reduce<B: RegionBackend, C: Communicator + Debug + 'static>(
    grid: &ProcessGrid<C>,
    y: FloatTensor<B>,
    radius: usize,
    nlat_local: usize,
) -> Result<FloatTensor<B>, PrimitiveError> {
    halo_reduce::<B, C>(grid.polar(), y, radius, nlat_local, -2)
}
