//! The differentiable operations on Burn primitives (`FloatTensor<B>` of
//! any [`DistBackend`]), over any [`Group`]: the world, a sub-group from
//! [`Group::split`], or a [`ProcessGrid`]'s polar or azimuth group; plus
//! the seed's grid-bound names (seed 000) as thin entry points. On
//! `burn_autodiff::Autodiff` each records its adjoint (DESIGN.md §2):
//!
//! | primitive | forward | backward | maps |
//! |---|---|---|---|
//! | [`copy_to`] | identity | all-reduce(sum) | replicated → varying |
//! | [`reduce_from`] | all-reduce(sum) | identity | varying → replicated |
//! | [`scatter_to`] | keep this rank's chunk | all-gather along dim | replicated → varying |
//! | [`gather_from`] | all-gather along dim | keep this rank's chunk | varying → replicated |
//! | [`gather_from_copy_to`] / [`all_gather`] | all-gather along dim | reduce-scatter(sum) along dim | varying → varying |
//! | [`reduce_from_scatter_to`] / [`reduce_scatter`] | reduce-scatter(sum) along dim | all-gather along dim | varying → varying |
//! | [`all_reduce`] | all-reduce(sum) | all-reduce(sum) | varying → varying |
//! | [`broadcast`] | the root's value | sum to the root, zeros elsewhere | varying → varying |
//! | [`reduce`] | sum to the root, zeros elsewhere | the root's value | varying → varying |
//! | [`gather_to_root`] | every rank's tensor concatenated at the root | the root's gradient scattered back | varying → varying |
//! | [`scatter_from_root`] | the root's tensor split over the ranks | every gradient gathered to the root | varying → varying |
//! | [`all_to_all`] | rows to chosen ranks | the reverse exchange | varying → varying |
//! | [`transpose`] | all-to-all: split along `dims.1` → along `dims.0` | the inverse all-to-all | varying → varying |
//! | [`halo_exchange`] | borrow `r` rows from each neighbour (zeros at the ends) | send halo gradients home and add | varying → varying |
//! | [`halo_reduce`] | send halo rows home and add | borrow `r` rows from each neighbour | varying → varying |
//!
//! Every call reaches agreement in one small exchange before data moves
//! (its operation and position in the group's sequence of calls, shapes,
//! dtypes, counts, whether inputs are tracked), so a violation anywhere is
//! the same [`Error`] on every rank. Per-rank sizes are discovered (a
//! declared list is checked) and travel from forward to backward, so any
//! consistent uneven layout works both ways; a halo radius of 0 moves no
//! data; dimensions may be negative. `copy_to` and `scatter_to` move no data
//! and make no exchange in the forward pass.
//!
//! The backend cannot be inferred from a primitive tensor: name it once,
//! `all_gather::<Autodiff<Flex>>(&group, x, 0)`. The methods of
//! [`crate::TensorExt`] on `burn_tensor::Tensor` need no annotation.

use burn_backend::tensor::FloatTensor;

use crate::backend::DistBackend;
use crate::error::{Error, TensorOp};
use crate::grid::{Axis, ProcessGrid};
use crate::group::Group;
use crate::ops::{
    AllReduce, AllToAllV, Broadcast, CopyTo, Gather, GatherToRoot, HaloExchange, HaloReduce,
    KeepChunk, ReduceFrom, ReduceScatter, ScatterFromRoot, SumToRoot, Transpose, TransposeAxes,
    apply, front,
};

/// Sum over the group; every rank gets the result. The adjoint is itself.
///
/// # Errors
/// [`Error::ShapeMismatch`], [`Error::DTypeMismatch`],
/// [`Error::TrackingMismatch`], [`Error::Desync`] on every rank; the
/// group's errors.
///
/// # Example
/// ```
/// use burn_flex::{Flex, FlexDevice};
/// use burn_backend::{TensorData, ops::FloatTensorOps, read_sync};
/// use ruda_comm::LocalWorld;
/// use ruda_tensor::{HostCollective, primitives::all_reduce};
/// let out = LocalWorld::new(2).run(|c| {
///     let x = Flex::float_from_data(TensorData::new(vec![1.0f32, 2.0], [2]), &FlexDevice);
///     let y = all_reduce::<Flex>(&HostCollective::new(c), x)?;
///     Ok::<_, ruda_tensor::Error>(read_sync(Flex::float_into_data(y)).unwrap().try_to_vec::<f32>().unwrap())
/// }).unwrap();
/// assert_eq!(out[1], vec![2.0, 4.0]);
/// ```
pub fn all_reduce<B: DistBackend>(
    g: &impl Group,
    x: FloatTensor<B>,
) -> Result<FloatTensor<B>, Error> {
    apply::<B, _, _>(g, AllReduce::new(), x)
}

/// Concatenate every rank's tensor along `dim` in rank order (sizes along
/// `dim` may differ; every other axis must agree). The adjoint
/// reduce-scatters with the same sizes.
///
/// # Errors
/// As [`all_reduce`], plus [`Error::Layout`] for a bad dimension.
pub fn all_gather<B: DistBackend>(
    g: &impl Group,
    x: FloatTensor<B>,
    dim: isize,
) -> Result<FloatTensor<B>, Error> {
    apply::<B, _, _>(g, Gather::all_gather(dim), x)
}

/// Sum over the group and keep this rank's balanced chunk along `dim`
/// (the first `len % n` ranks get one more). The adjoint all-gathers.
///
/// # Errors
/// As [`all_gather`], plus [`Error::Layout`] when `dim` is shorter than
/// the group.
pub fn reduce_scatter<B: DistBackend>(
    g: &impl Group,
    x: FloatTensor<B>,
    dim: isize,
) -> Result<FloatTensor<B>, Error> {
    apply::<B, _, _>(g, ReduceScatter::new(dim), x)
}

/// Every rank gets `root`'s tensor; the adjoint sums the gradient at the
/// root (zeros elsewhere).
///
/// # Errors
/// [`Error::InvalidRoot`] for a root outside the group or roots that differ;
/// as [`all_reduce`].
pub fn broadcast<B: DistBackend>(
    g: &impl Group,
    x: FloatTensor<B>,
    root: usize,
) -> Result<FloatTensor<B>, Error> {
    apply::<B, _, _>(g, Broadcast::new(root), x)
}

/// The sum over the group at `root`; every other rank gets zeros of the
/// same shape (PyTorch's `reduce` leaves them undefined). The adjoint is
/// the broadcast from `root`. It moves an all-reduce's bytes (the group
/// has no rooted sum yet).
///
/// # Errors
/// [`Error::InvalidRoot`] for a root outside the group or roots that differ;
/// as [`all_reduce`].
pub fn reduce<B: DistBackend>(
    g: &impl Group,
    x: FloatTensor<B>,
    root: usize,
) -> Result<FloatTensor<B>, Error> {
    apply::<B, _, _>(g, SumToRoot::new(root), x)
}

/// Every rank's tensor concatenated along `dim` in rank order at `root`
/// (sizes along `dim` may differ, every other axis must agree); every other
/// rank gets zeros of its input's shape with `dim` of size 0. Only the
/// root receives (point to point from each rank). The adjoint scatters the
/// root's gradient back, each rank its slice: every rank must run the
/// backward pass through its output (include the empty output in its
/// loss), or the root's backward pass waits for it until the deadline.
///
/// # Errors
/// [`Error::InvalidRoot`] for a root outside the group or roots that
/// differ; [`Error::Desync`] and the agreement's errors for other axes,
/// dtypes or tracking that differ; the communicator's.
pub fn gather_to_root<B: DistBackend>(
    g: &impl Group,
    x: FloatTensor<B>,
    root: usize,
    dim: isize,
) -> Result<FloatTensor<B>, Error> {
    apply::<B, _, _>(g, GatherToRoot::new(root, dim), x)
}

/// `root`'s tensor split along `dim` in balanced chunks (the first
/// `len % ranks` ranks one row longer), chunk `r` to rank `r`. The other
/// ranks' inputs only give every other axis (their size along `dim` is
/// free; pass an empty tensor), and must be tracked by autodiff exactly
/// when the root's is, since every rank's gradient goes back to the root in
/// the backward pass (a gather to the root, in which every rank takes
/// part: run each rank's backward pass through its chunk; the other ranks'
/// inputs get zero gradients).
///
/// # Errors
/// As [`gather_to_root`].
pub fn scatter_from_root<B: DistBackend>(
    g: &impl Group,
    x: FloatTensor<B>,
    root: usize,
    dim: isize,
) -> Result<FloatTensor<B>, Error> {
    apply::<B, _, _>(g, ScatterFromRoot::new(root, dim), x)
}

/// Send `counts[p]` consecutive slices along `dim` (blocks in rank order)
/// to rank `p`; the result holds what every rank sent here, in source
/// order. The adjoint sends every gradient slice back.
///
/// # Errors
/// [`Error::Counts`] for counts that do not fit the tensor or the group; as
/// [`all_gather`].
pub fn all_to_all<B: DistBackend>(
    g: &impl Group,
    x: FloatTensor<B>,
    dim: isize,
    counts: &[usize],
) -> Result<FloatTensor<B>, Error> {
    let d = burn_backend::TensorMetadata::shape(&x).num_dims();
    let dd = crate::layout::normalize_dim(dim, d).map_err(|error| Error::Layout {
        op: TensorOp::AllToAll,
        rank: g.rank(),
        error,
    })?;
    let out = apply::<B, _, _>(
        g,
        AllToAllV::new(TensorOp::AllToAll, counts),
        front::<B>(x, dd),
    )?;
    Ok(front::<B>(out, dd))
}

/// Identity forward; all-reduce(sum) of the gradient backward. Use it where
/// a replicated value enters per-rank computation. Moves and exchanges
/// nothing in the forward pass.
///
/// # Errors
/// None in the forward pass (the signature matches the others').
pub fn copy_to<B: DistBackend>(g: &impl Group, x: FloatTensor<B>) -> Result<FloatTensor<B>, Error> {
    apply::<B, _, _>(g, CopyTo, x)
}

/// All-reduce(sum) forward; identity backward. Use it where per-rank
/// partial results become one replicated value.
///
/// # Errors
/// As [`all_reduce`].
pub fn reduce_from<B: DistBackend>(
    g: &impl Group,
    x: FloatTensor<B>,
) -> Result<FloatTensor<B>, Error> {
    apply::<B, _, _>(g, ReduceFrom, x)
}

/// Keep this rank's balanced chunk of a replicated tensor along `dim`;
/// backward all-gathers the gradient. Moves and exchanges nothing in the
/// forward pass.
///
/// # Errors
/// [`Error::Layout`] for a bad dimension or one too short to give every
/// rank a chunk.
pub fn scatter_to<B: DistBackend>(
    g: &impl Group,
    x: FloatTensor<B>,
    dim: isize,
) -> Result<FloatTensor<B>, Error> {
    apply::<B, _, _>(g, KeepChunk::scatter_to(dim), x)
}

/// All-gather along `dim` into a replicated value (each rank's size along
/// `dim` discovered); backward keeps this rank's chunk of the gradient.
///
/// # Errors
/// As [`all_gather`].
pub fn gather_from<B: DistBackend>(
    g: &impl Group,
    x: FloatTensor<B>,
    dim: isize,
) -> Result<FloatTensor<B>, Error> {
    apply::<B, _, _>(g, Gather::gather_from(dim, None), x)
}

/// [`gather_from`] with the per-rank sizes declared: checked on every rank
/// against what the ranks hold.
///
/// # Errors
/// [`Error::DeclaredSizes`] on every rank when a declaration is wrong; as
/// [`gather_from`].
pub fn gather_from_sizes<B: DistBackend>(
    g: &impl Group,
    x: FloatTensor<B>,
    dim: isize,
    sizes: &[usize],
) -> Result<FloatTensor<B>, Error> {
    apply::<B, _, _>(g, Gather::gather_from(dim, Some(sizes.to_vec())), x)
}

/// All-gather along `dim` (sizes discovered; `sizes`, when given, checked);
/// backward reduce-scatters the gradient with the same sizes.
///
/// # Errors
/// As [`gather_from_sizes`].
pub fn gather_from_copy_to<B: DistBackend>(
    g: &impl Group,
    x: FloatTensor<B>,
    dim: isize,
    sizes: Option<&[usize]>,
) -> Result<FloatTensor<B>, Error> {
    apply::<B, _, _>(
        g,
        Gather::gather_from_copy_to(dim, sizes.map(<[usize]>::to_vec)),
        x,
    )
}

/// Sum over the group and keep this rank's balanced chunk along `dim`;
/// backward all-gathers the gradient.
///
/// # Errors
/// As [`reduce_scatter`].
pub fn reduce_from_scatter_to<B: DistBackend>(
    g: &impl Group,
    x: FloatTensor<B>,
    dim: isize,
) -> Result<FloatTensor<B>, Error> {
    apply::<B, _, _>(g, ReduceScatter::reduce_from_scatter_to(dim), x)
}

/// Distributed transpose over the group: the input is split over the ranks
/// along `axes.split_in` (sizes discovered; `split_in_sizes`, when given,
/// checked) and whole along `axes.split_out`; the output is split along
/// `axes.split_out` in balanced chunks and whole along `axes.split_in`.
/// Every other axis must agree. Backward is the inverse transpose with the
/// forward's actual sizes. See [`TransposeAxes`].
///
/// # Errors
/// [`Error::ShapeMismatch`] when any axis but `split_in` differs;
/// [`Error::DeclaredSizes`]; [`Error::Layout`] for bad or equal dimensions
/// or a `split_out` axis too short to give every rank a chunk; as
/// [`all_reduce`].
pub fn transpose<B: DistBackend>(
    g: &impl Group,
    x: FloatTensor<B>,
    axes: TransposeAxes,
    split_in_sizes: Option<&[usize]>,
) -> Result<FloatTensor<B>, Error> {
    apply::<B, _, _>(
        g,
        Transpose::new(axes, split_in_sizes.map(<[usize]>::to_vec)),
        x,
    )
}

/// Borrow `radius` rows along `dim` from each neighbour in the group (the
/// previous rank's last rows above, the next rank's first rows below;
/// zeros beyond the first and last rank), giving `rows + 2 × radius` rows.
/// Backward sends the halo gradients home and adds them (exactly
/// [`halo_reduce`]). A radius of 0 moves no data.
///
/// # Errors
/// [`Error::Halo`] on every rank when a rank of a group of more than one
/// holds fewer rows than the radius, or the radii differ; as [`all_gather`].
pub fn halo_exchange<B: DistBackend>(
    g: &impl Group,
    x: FloatTensor<B>,
    dim: isize,
    radius: usize,
) -> Result<FloatTensor<B>, Error> {
    apply::<B, _, _>(g, HaloExchange::new(dim, radius), x)
}

/// The adjoint of [`halo_exchange`]: `y` holds `local_rows + 2 × radius`
/// rows along `dim`; its halo rows are sent to the neighbours that own them
/// and added onto their rows (dropped beyond the first and last rank),
/// giving `local_rows` rows. Backward borrows rows like [`halo_exchange`].
///
/// # Errors
/// [`Error::HaloShape`] on every rank when a rank's `y` has the wrong
/// number of rows; as [`halo_exchange`].
pub fn halo_reduce<B: DistBackend>(
    g: &impl Group,
    y: FloatTensor<B>,
    dim: isize,
    radius: usize,
    local_rows: usize,
) -> Result<FloatTensor<B>, Error> {
    apply::<B, _, _>(g, HaloReduce::new(dim, radius, local_rows), y)
}

/// `(prev, next)` world ranks of this rank's neighbours in the group along
/// `axis`, wrapping around.
///
/// # Example
/// See [`ProcessGrid::neighbors`].
pub fn get_group_neighbors<G: Group>(grid: &ProcessGrid<G>, axis: Axis) -> (usize, usize) {
    grid.neighbors(axis)
}

macro_rules! on_axis {
    ($(#[$doc:meta])* $name:ident => $axis:ident, |$g:ident, $x:ident $(, $arg:ident : $ty:ty)*| $call:expr) => {
        $(#[$doc])*
        ///
        /// # Errors
        /// As the generic primitive it calls.
        pub fn $name<B: DistBackend, G: Group>(
            grid: &ProcessGrid<G>,
            $x: FloatTensor<B>,
            $($arg: $ty),*
        ) -> Result<FloatTensor<B>, Error> {
            let $g = grid.group(Axis::$axis);
            $call
        }
    };
}

on_axis!(
    /// [`transpose`] over the azimuth group, checking the declared sizes;
    /// `dims` in torch-harmonics' order, `(split_out, split_in)` (see
    /// [`TransposeAxes::from_torch_harmonics`]).
    distributed_transpose_azimuth => Azimuth, |g, x, dims: (isize, isize), shapes: &[usize]|
        transpose::<B>(g, x, TransposeAxes::from_torch_harmonics(dims), Some(shapes)));
on_axis!(
    /// [`transpose`] over the polar group, checking the declared sizes;
    /// `dims` in torch-harmonics' order, `(split_out, split_in)` (see
    /// [`TransposeAxes::from_torch_harmonics`]).
    distributed_transpose_polar => Polar, |g, x, dims: (isize, isize), shapes: &[usize]|
        transpose::<B>(g, x, TransposeAxes::from_torch_harmonics(dims), Some(shapes)));
on_axis!(
    /// [`copy_to`] over the polar group.
    copy_to_polar_region => Polar, |g, x| copy_to::<B>(g, x));
on_axis!(
    /// [`copy_to`] over the azimuth group.
    copy_to_azimuth_region => Azimuth, |g, x| copy_to::<B>(g, x));
on_axis!(
    /// [`reduce_from`] over the polar group.
    reduce_from_polar_region => Polar, |g, x| reduce_from::<B>(g, x));
on_axis!(
    /// [`reduce_from`] over the azimuth group.
    reduce_from_azimuth_region => Azimuth, |g, x| reduce_from::<B>(g, x));
on_axis!(
    /// [`scatter_to`] over the polar group.
    scatter_to_polar_region => Polar, |g, x, dim: isize| scatter_to::<B>(g, x, dim));
on_axis!(
    /// [`gather_from_sizes`] over the polar group.
    gather_from_polar_region => Polar, |g, x, dim: isize, shapes: &[usize]|
        gather_from_sizes::<B>(g, x, dim, shapes));
on_axis!(
    /// [`gather_from_copy_to`] over the polar group, checking the declared sizes.
    gather_from_copy_to_polar_region => Polar, |g, x, dim: isize, shapes: &[usize]|
        gather_from_copy_to::<B>(g, x, dim, Some(shapes)));
on_axis!(
    /// [`reduce_from_scatter_to`] over the polar group.
    reduce_from_scatter_to_polar_region => Polar, |g, x, dim: isize|
        reduce_from_scatter_to::<B>(g, x, dim));
on_axis!(
    /// [`reduce_from_scatter_to`] over the azimuth group.
    reduce_from_scatter_to_azimuth_region => Azimuth, |g, x, dim: isize|
        reduce_from_scatter_to::<B>(g, x, dim));
on_axis!(
    /// [`halo_exchange`] over the polar group, latitudes being the
    /// second-to-last dimension (`[.., lat, lon]`).
    polar_halo_exchange => Polar, |g, x, radius: usize| halo_exchange::<B>(g, x, -2, radius));
on_axis!(
    /// [`halo_reduce`] over the polar group, latitudes being the
    /// second-to-last dimension.
    polar_halo_reduce => Polar, |g, x, radius: usize, nlat_local: usize|
        halo_reduce::<B>(g, x, -2, radius, nlat_local));
