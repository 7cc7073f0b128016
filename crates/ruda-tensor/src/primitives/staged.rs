//! The building blocks the primitives share, generic over any
//! [`CollectiveBackend`]: on `Autodiff` they compose differentiable
//! operations, so their adjoints come from the contract's.

use alloc::vec::Vec;
use core::fmt::Debug;

use burn_backend::TensorMetadata;
use burn_backend::tensor::FloatTensor;
use ruda_comm::Communicator;

use super::{PrimitiveError, PrimitiveOp};
use crate::HostCollective;
use crate::backend::CollectiveBackend;
use crate::layout::{self, LayoutError, compute_split_shapes, narrow, starts, zeros_like_along};

pub(crate) fn layout_error<C: Communicator>(
    comm: &HostCollective<C>,
    op: PrimitiveOp,
    error: LayoutError,
) -> PrimitiveError {
    PrimitiveError::Layout {
        op,
        rank: comm.comm().rank(),
        error,
    }
}

/// Resolve `dim` for `x`, as a primitive error.
pub(crate) fn dim_of<B: CollectiveBackend, C: Communicator>(
    comm: &HostCollective<C>,
    op: PrimitiveOp,
    x: &FloatTensor<B>,
    dim: isize,
) -> Result<usize, PrimitiveError> {
    layout::normalize_dim(dim, x.shape().num_dims()).map_err(|e| layout_error(comm, op, e))
}

/// Balanced split sizes of `size` over the group, as a primitive error.
pub(crate) fn split_sizes<C: Communicator>(
    comm: &HostCollective<C>,
    op: PrimitiveOp,
    size: usize,
) -> Result<Vec<usize>, PrimitiveError> {
    compute_split_shapes(size, comm.comm().size()).map_err(|e| layout_error(comm, op, e))
}

/// Check, on every rank at once, that every rank declares the per-rank
/// sizes the ranks actually hold (`actual` is this rank's).
pub(crate) fn check_sizes<C: Communicator>(
    comm: &HostCollective<C>,
    op: PrimitiveOp,
    actual: usize,
    declared: &[usize],
) -> Result<(), PrimitiveError> {
    let c = comm.comm();
    let (me, n) = (c.rank(), c.size());
    let hash = |v: &[usize]| {
        ruda_comm::conformance::mix(&v.iter().map(|&x| x as u64).collect::<Vec<_>>()) as i64
    };
    let mine = [actual as i64, declared.len() as i64, hash(declared)];
    let mut all = alloc::vec![0i64; 3 * n];
    c.all_gather(&mine, &mut all)?;
    let actual_all: Vec<usize> = all.chunks(3).map(|w| w[0] as usize).collect();
    let want = hash(&actual_all);
    for (r, w) in all.chunks(3).enumerate() {
        if w[1] != n as i64 || w[2] != want {
            return Err(PrimitiveError::DeclaredSizes {
                op,
                rank: me,
                offender: r,
                declared: (r == me).then(|| declared.to_vec()),
                actual: actual_all,
            });
        }
    }
    Ok(())
}

/// Swap `dim` to the front (or back); a no-op for dimension 0.
pub(crate) fn front<B: CollectiveBackend>(x: FloatTensor<B>, dim: usize) -> FloatTensor<B> {
    if dim == 0 {
        x
    } else {
        B::float_swap_dims(x, 0, dim)
    }
}

/// All-gather along `dim` with per-rank sizes `sizes` (checked against
/// what the ranks hold): shards are zero-padded to the largest, gathered
/// along the leading axis, and trimmed. On `Autodiff` its adjoint is the
/// matching reduce-scatter.
pub(crate) fn gather_dim<B: CollectiveBackend, C: Communicator + Debug + 'static>(
    comm: &HostCollective<C>,
    op: PrimitiveOp,
    x: FloatTensor<B>,
    dim: usize,
    sizes: &[usize],
) -> Result<FloatTensor<B>, PrimitiveError> {
    let mine = x.shape()[dim];
    check_sizes(comm, op, mine, sizes)?;
    if sizes.len() == 1 {
        return Ok(x);
    }
    let max = sizes.iter().copied().max().unwrap_or(0);
    let x = if mine < max {
        let pad = zeros_like_along::<B>(&x, dim, max - mine);
        B::float_cat(alloc::vec![x, pad], dim)
    } else {
        x
    };
    let all = B::all_gather_float(comm, front::<B>(x, dim))?;
    let parts = sizes
        .iter()
        .enumerate()
        .map(|(r, &s)| narrow::<B>(all.clone(), 0, r * max, s))
        .collect();
    Ok(front::<B>(B::float_cat(parts, 0), dim))
}

/// Reduce-scatter along `dim` into balanced chunks: each rank's chunk of
/// every rank's input, summed. Chunks are zero-padded to the largest. On
/// `Autodiff` its adjoint is the matching all-gather.
pub(crate) fn reduce_scatter_dim<B: CollectiveBackend, C: Communicator + Debug + 'static>(
    comm: &HostCollective<C>,
    op: PrimitiveOp,
    x: FloatTensor<B>,
    dim: usize,
) -> Result<FloatTensor<B>, PrimitiveError> {
    let sizes = split_sizes(comm, op, x.shape()[dim])?;
    if sizes.len() == 1 {
        return Ok(x);
    }
    let me = comm.comm().rank();
    let max = sizes[0];
    let xt = front::<B>(x, dim);
    let mut parts = Vec::with_capacity(2 * sizes.len());
    for (s, &len) in starts(&sizes).into_iter().zip(&sizes) {
        let chunk = narrow::<B>(xt.clone(), 0, s, len);
        let pad = (len < max).then(|| zeros_like_along::<B>(&chunk, 0, max - len));
        parts.push(chunk);
        parts.extend(pad);
    }
    let summed = B::reduce_scatter_sum(comm, B::float_cat(parts, 0))?;
    Ok(front::<B>(narrow::<B>(summed, 0, 0, sizes[me]), dim))
}
