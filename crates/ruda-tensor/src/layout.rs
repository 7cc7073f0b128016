//! Layout helpers: how a dimension splits over ranks, splitting and
//! narrowing tensors, flattening leading axes, and the latitude halo a
//! localized operator needs.
//!
//! Burn 0.22 has no complex dtype, so the reference's complex-as-real path
//! of `flatten_and_pad_leading_dims` has no counterpart: a complex field is
//! carried as a trailing axis of two reals, which these helpers keep intact
//! like any trailing axis.

use alloc::vec::Vec;

use burn_backend::tensor::FloatTensor;
use burn_backend::{Backend, Shape, Slice, TensorMetadata};
use thiserror::Error;

/// A layout request that cannot be satisfied.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum LayoutError {
    /// Splitting into zero chunks.
    #[error("cannot split {size} elements into 0 chunks")]
    ZeroChunks {
        /// The size to split.
        size: usize,
    },
    /// A chunk would be empty.
    #[error("cannot split {size} elements into {chunks} non-empty chunks")]
    EmptyChunk {
        /// The size to split.
        size: usize,
        /// The number of chunks.
        chunks: usize,
    },
    /// A dimension outside the tensor.
    #[error("dimension {dim} is out of range for a tensor of {ndim} dimensions")]
    Dim {
        /// The dimension given (negative counts from the end).
        dim: isize,
        /// The tensor's number of dimensions.
        ndim: usize,
    },
    /// More trailing dimensions requested than the tensor has.
    #[error("{trailing} trailing dimensions requested of a tensor with {ndim}")]
    TrailingDims {
        /// Trailing dimensions requested.
        trailing: usize,
        /// The tensor's number of dimensions.
        ndim: usize,
    },
    /// Leading sizes that do not match the flattened tensor.
    #[error("cannot restore leading shape {lead_shape:?} ({lead_size} rows) from {rows} rows")]
    Unflatten {
        /// The leading shape to restore.
        lead_shape: Vec<usize>,
        /// The real (unpadded) number of rows.
        lead_size: usize,
        /// The rows the tensor has.
        rows: usize,
    },
    /// Per-rank sizes that do not add up to the axis they split.
    #[error("{what}: per-rank sizes {shapes:?} add up to {sum}, the axis has {len}")]
    Shapes {
        /// Which argument.
        what: &'static str,
        /// The sizes.
        shapes: Vec<usize>,
        /// Their sum.
        sum: usize,
        /// The axis length.
        len: usize,
    },
    /// Latitudes that are not ascending.
    #[error("{what} colatitudes must be ascending")]
    NotAscending {
        /// Which argument.
        what: &'static str,
    },
    /// A halo wider than the smallest chunk: it would have to reach past a
    /// neighbour.
    #[error(
        "a latitude halo of {radius} rows exceeds the smallest local input chunk of {min_chunk} rows (split {shapes:?}); use fewer polar ranks, more latitudes or a smaller cutoff"
    )]
    HaloTooWide {
        /// The radius needed.
        radius: usize,
        /// The smallest chunk.
        min_chunk: usize,
        /// The input split.
        shapes: Vec<usize>,
    },
}

/// Balanced chunk sizes: `size` split into `chunks` pieces, the first
/// `size % chunks` one larger.
///
/// # Errors
/// [`LayoutError::ZeroChunks`] for `chunks == 0`; [`LayoutError::EmptyChunk`]
/// when `size < chunks`.
///
/// # Example
/// ```
/// use ruda_tensor::layout::compute_split_shapes;
/// assert_eq!(compute_split_shapes(10, 3).unwrap(), vec![4, 3, 3]);
/// assert!(compute_split_shapes(2, 3).is_err());
/// ```
pub fn compute_split_shapes(size: usize, chunks: usize) -> Result<Vec<usize>, LayoutError> {
    if chunks == 0 {
        return Err(LayoutError::ZeroChunks { size });
    }
    if size < chunks {
        return Err(LayoutError::EmptyChunk { size, chunks });
    }
    let (base, extra) = (size / chunks, size % chunks);
    Ok((0..chunks).map(|i| base + usize::from(i < extra)).collect())
}

/// Exclusive prefix sums: where each chunk starts.
pub(crate) fn starts(sizes: &[usize]) -> Vec<usize> {
    let mut acc = 0;
    sizes
        .iter()
        .map(|&s| {
            let o = acc;
            acc += s;
            o
        })
        .collect()
}

/// Resolve a possibly negative dimension against `ndim`.
///
/// # Errors
/// [`LayoutError::Dim`] when out of range.
///
/// # Example
/// ```
/// use ruda_tensor::layout::normalize_dim;
/// assert_eq!(normalize_dim(-1, 4).unwrap(), 3);
/// assert!(normalize_dim(4, 4).is_err());
/// ```
pub fn normalize_dim(dim: isize, ndim: usize) -> Result<usize, LayoutError> {
    let d = if dim < 0 { dim + ndim as isize } else { dim };
    if d < 0 || d as usize >= ndim {
        return Err(LayoutError::Dim { dim, ndim });
    }
    Ok(d as usize)
}

/// `len` entries of `x` along `dim` from `start` (no bounds beyond Burn's).
/// A part with no elements is a fresh zero-size tensor rather than a view:
/// Flex's kernels index a view's offset into its storage even when there
/// is nothing to read, and a range of an empty tensor (a swapped `[0, n]`
/// seen as `[n, 0]`) can start past its storage.
pub(crate) fn narrow<B: Backend>(
    x: FloatTensor<B>,
    dim: usize,
    start: usize,
    len: usize,
) -> FloatTensor<B> {
    let shape = x.shape();
    if start == 0 && len == shape[dim] {
        return x;
    }
    let mut dims = shape.to_vec();
    dims[dim] = len;
    if dims.iter().product::<usize>() == 0 {
        let dtype = burn_backend::FloatDType::from(x.dtype());
        return B::float_zeros(Shape::from(dims), &x.device(), dtype);
    }
    let slices: Vec<Slice> = (0..shape.num_dims())
        .map(|d| {
            if d == dim {
                Slice::new(start as isize, Some((start + len) as isize), 1)
            } else {
                Slice::new(0, None, 1)
            }
        })
        .collect();
    B::float_slice(x, &slices)
}

/// Zeros shaped like `like` but `len` long along `dim`.
pub(crate) fn zeros_like_along<B: Backend>(
    like: &FloatTensor<B>,
    dim: usize,
    len: usize,
) -> FloatTensor<B> {
    let mut shape = like.shape();
    shape[dim] = len;
    B::float_zeros(shape, &like.device(), like.dtype().into())
}

/// Split `x` along `dim` into `chunks` balanced pieces
/// ([`compute_split_shapes`]).
///
/// # Errors
/// [`LayoutError::Dim`], [`LayoutError::ZeroChunks`], [`LayoutError::EmptyChunk`].
///
/// # Example
/// ```
/// use burn_backend::{TensorData, TensorMetadata, ops::FloatTensorOps};
/// use burn_flex::{Flex, FlexDevice};
/// use ruda_tensor::layout::split_tensor_along_dim;
/// let x = Flex::float_from_data(TensorData::new(vec![0f32; 10], [1, 10]), &FlexDevice);
/// let parts = split_tensor_along_dim::<Flex>(x, -1, 3).unwrap();
/// let widths: Vec<usize> = parts.iter().map(|p| p.shape()[1]).collect();
/// assert_eq!(widths, vec![4, 3, 3]);
/// ```
pub fn split_tensor_along_dim<B: Backend>(
    x: FloatTensor<B>,
    dim: isize,
    chunks: usize,
) -> Result<Vec<FloatTensor<B>>, LayoutError> {
    let shape = x.shape();
    let d = normalize_dim(dim, shape.num_dims())?;
    let sizes = compute_split_shapes(shape[d], chunks)?;
    Ok(starts(&sizes)
        .into_iter()
        .zip(&sizes)
        .map(|(s, &n)| narrow::<B>(x.clone(), d, s, n))
        .collect())
}

/// What [`flatten_and_pad_leading_dims`] returns: the flattened tensor, the
/// original leading shape, and the real number of rows before padding.
#[derive(Debug)]
pub struct Flattened<T> {
    /// Shape `(max(lead_size, min_leading_size), *trailing)`.
    pub tensor: T,
    /// The leading dimensions that were flattened.
    pub lead_shape: Vec<usize>,
    /// Their product: the rows before padding.
    pub lead_size: usize,
}

/// Collapse all but the last `num_trailing` dimensions into one leading
/// axis, zero-padded to at least `min_leading_size` rows (never to a
/// multiple: uneven splits are fine).
///
/// # Errors
/// [`LayoutError::TrailingDims`] when `num_trailing` exceeds the tensor's
/// dimensions.
///
/// # Example
/// ```
/// use burn_backend::{TensorData, TensorMetadata, ops::FloatTensorOps};
/// use burn_flex::{Flex, FlexDevice};
/// use ruda_tensor::layout::{flatten_and_pad_leading_dims, unpad_and_unflatten_leading_dims};
/// let x = Flex::float_from_data(TensorData::new(vec![1f32; 2 * 5 * 6], [2, 1, 5, 6]), &FlexDevice);
/// let f = flatten_and_pad_leading_dims::<Flex>(x, 4, 2).unwrap();
/// assert_eq!(f.tensor.shape().to_vec(), vec![4, 5, 6]);
/// let back = unpad_and_unflatten_leading_dims::<Flex>(f.tensor, &f.lead_shape, f.lead_size, 2).unwrap();
/// assert_eq!(back.shape().to_vec(), vec![2, 1, 5, 6]);
/// ```
pub fn flatten_and_pad_leading_dims<B: Backend>(
    x: FloatTensor<B>,
    min_leading_size: usize,
    num_trailing: usize,
) -> Result<Flattened<FloatTensor<B>>, LayoutError> {
    let shape = x.shape().to_vec();
    let ndim = shape.len();
    if num_trailing > ndim {
        return Err(LayoutError::TrailingDims {
            trailing: num_trailing,
            ndim,
        });
    }
    let lead_shape = shape[..ndim - num_trailing].to_vec();
    let lead_size: usize = lead_shape.iter().product();
    let mut flat: Vec<usize> = Vec::with_capacity(num_trailing + 1);
    flat.push(lead_size);
    flat.extend_from_slice(&shape[ndim - num_trailing..]);
    let mut t = B::float_reshape(x, Shape::from(flat));
    if lead_size < min_leading_size {
        let pad = zeros_like_along::<B>(&t, 0, min_leading_size - lead_size);
        t = B::float_cat(alloc::vec![t, pad], 0);
    }
    Ok(Flattened {
        tensor: t,
        lead_shape,
        lead_size,
    })
}

/// Inverse of [`flatten_and_pad_leading_dims`]: drop the padding rows and
/// restore the leading dimensions; the trailing ones are taken as they are.
///
/// # Errors
/// [`LayoutError::TrailingDims`] when the tensor lacks the axes;
/// [`LayoutError::Unflatten`] when `lead_shape` does not multiply to
/// `lead_size` or the tensor has fewer rows.
///
/// # Example
/// See [`flatten_and_pad_leading_dims`].
pub fn unpad_and_unflatten_leading_dims<B: Backend>(
    x: FloatTensor<B>,
    lead_shape: &[usize],
    lead_size: usize,
    num_trailing: usize,
) -> Result<FloatTensor<B>, LayoutError> {
    let shape = x.shape().to_vec();
    if shape.len() != num_trailing + 1 {
        return Err(LayoutError::TrailingDims {
            trailing: num_trailing,
            ndim: shape.len().saturating_sub(1),
        });
    }
    if lead_shape.iter().product::<usize>() != lead_size || shape[0] < lead_size {
        return Err(LayoutError::Unflatten {
            lead_shape: lead_shape.to_vec(),
            lead_size,
            rows: shape[0],
        });
    }
    let t = narrow::<B>(x, 0, 0, lead_size);
    let mut out = lead_shape.to_vec();
    out.extend_from_slice(&shape[1..]);
    Ok(B::float_reshape(t, Shape::from(out)))
}

/// The latitude support band: for each output colatitude `θ_o`, the
/// inclusive index range `lo..=hi` of input colatitudes with
/// `|θ_in − θ_o| ≤ θ_c` (`hi < lo` when none is).
///
/// # Errors
/// [`LayoutError::NotAscending`] for unsorted input colatitudes.
///
/// # Example
/// ```
/// use ruda_tensor::layout::latitude_support_band;
/// let (lo, hi) = latitude_support_band(&[0.0, 1.0, 2.0, 3.0], &[1.5], 0.6).unwrap();
/// assert_eq!((lo[0], hi[0]), (1, 2));
/// ```
pub fn latitude_support_band(
    lats_in: &[f64],
    lats_out: &[f64],
    theta_cutoff: f64,
) -> Result<(Vec<usize>, Vec<isize>), LayoutError> {
    if lats_in.windows(2).any(|w| w[1] < w[0]) {
        return Err(LayoutError::NotAscending { what: "input" });
    }
    let lo = lats_out
        .iter()
        .map(|&t| lats_in.partition_point(|&x| x < t - theta_cutoff))
        .collect();
    let hi = lats_out
        .iter()
        .map(|&t| lats_in.partition_point(|&x| x <= t + theta_cutoff) as isize - 1)
        .collect();
    Ok((lo, hi))
}

/// The latitude halo (in rows) a polar shard needs from its neighbours for
/// an operator coupling latitudes within `theta_cutoff`: the largest
/// overhang, over ranks, of the support band of the rank's output range
/// past its own input range. 0 for a single rank.
///
/// # Errors
/// [`LayoutError::Shapes`] when the per-rank shapes do not add up to the
/// latitudes; [`LayoutError::NotAscending`]; [`LayoutError::HaloTooWide`]
/// when the radius exceeds the smallest input chunk (the halo is exchanged
/// with immediate neighbours only).
///
/// # Example
/// ```
/// use ruda_tensor::layout::compute_polar_halo_radius;
/// // 8 equiangular latitudes, cutoff of 1.5 spacings, split [4, 4]: one row.
/// let lats: Vec<f64> = (0..8).map(|i| (i as f64 + 0.5) * std::f64::consts::PI / 8.0).collect();
/// let r = compute_polar_halo_radius(&lats, &lats, 1.5 * std::f64::consts::PI / 8.0, &[4, 4], &[4, 4]).unwrap();
/// assert_eq!(r, 1);
/// ```
pub fn compute_polar_halo_radius(
    lats_in: &[f64],
    lats_out: &[f64],
    theta_cutoff: f64,
    lat_in_shapes: &[usize],
    lat_out_shapes: &[usize],
) -> Result<usize, LayoutError> {
    let check = |what, shapes: &[usize], len| {
        let sum: usize = shapes.iter().sum();
        if sum != len {
            return Err(LayoutError::Shapes {
                what,
                shapes: shapes.to_vec(),
                sum,
                len,
            });
        }
        Ok(())
    };
    check("input", lat_in_shapes, lats_in.len())?;
    check("output", lat_out_shapes, lats_out.len())?;
    if lats_out.windows(2).any(|w| w[1] < w[0]) {
        return Err(LayoutError::NotAscending { what: "output" });
    }
    if lat_out_shapes.len() <= 1 {
        return Ok(0);
    }
    let (lo, hi) = latitude_support_band(lats_in, lats_out, theta_cutoff)?;
    let (in_starts, out_starts) = (starts(lat_in_shapes), starts(lat_out_shapes));
    let mut radius: isize = 0;
    for rank in 0..lat_out_shapes.len() {
        let (out_lo, out_n) = (out_starts[rank], lat_out_shapes[rank]);
        if out_n == 0 {
            continue;
        }
        let (in_lo, in_n) = (in_starts[rank] as isize, lat_in_shapes[rank] as isize);
        let need_lo = lo[out_lo] as isize;
        let need_hi = hi[out_lo + out_n - 1];
        if need_hi < need_lo {
            continue;
        }
        radius = radius
            .max(in_lo - need_lo)
            .max(need_hi - (in_lo + in_n - 1));
    }
    let radius = radius.max(0) as usize;
    let min_chunk = lat_in_shapes.iter().copied().min().unwrap_or(0);
    if radius > min_chunk {
        return Err(LayoutError::HaloTooWide {
            radius,
            min_chunk,
            shapes: lat_in_shapes.to_vec(),
        });
    }
    Ok(radius)
}

#[cfg(all(test, feature = "flex"))]
mod tests {
    use super::*;
    use burn_backend::ops::FloatTensorOps;
    use burn_backend::{DType, TensorData};
    use burn_flex::{Flex, FlexDevice};

    #[test]
    fn an_empty_range_of_a_swapped_empty_tensor_is_usable() {
        // [0, 3] seen as [3, 0]: rows 1..2 of it would be a view past the
        // (empty) storage.
        let x = Flex::float_from_data(TensorData::new(Vec::<f64>::new(), [0, 3]), &FlexDevice);
        let x = Flex::float_swap_dims(x, 0, 1);
        let part = narrow::<Flex>(x, 0, 1, 1);
        assert_eq!(part.shape().to_vec(), [1, 0]);
        assert_eq!(part.dtype(), DType::F64);
        // The next operation on it must not index out of range.
        let sum = Flex::float_add(part.clone(), part);
        assert_eq!(sum.shape().to_vec(), [1, 0]);
    }
}
