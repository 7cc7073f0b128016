//! The data movement of [`super::DeviceGroup`], as the backend's own tensor
//! operations on handles of the peers' tensors: take rows (`slice`),
//! concatenate (`cat`), add in rank order (`add`, with `f16`/`bf16`
//! accumulated in `f32` and rounded once), and bring a peer's tensor to
//! this rank's device (`to_device`, a no-op when it is already there).
//! Nothing is read back to the host.

use alloc::vec::Vec;

use burn_backend::tensor::{Device, FloatTensor, IntTensor};
use burn_backend::{Backend, DType, FloatDType, IntDType, Shape, Slice, TensorMetadata};

/// The backend operations the device group needs, for float and integer
/// tensors alike ([`Floats`], [`Ints`]): one implementation of every move.
pub(crate) trait Kind<B: Backend> {
    /// The tensor primitive.
    type T: TensorMetadata<Device = Device<B>> + Clone + Send + Sync + 'static;
    /// Move to another device.
    fn to_device(x: Self::T, device: &Device<B>) -> Self::T;
    /// Slice.
    fn slice(x: Self::T, slices: &[Slice]) -> Self::T;
    /// Concatenate along `dim`.
    fn cat(parts: Vec<Self::T>, dim: usize) -> Self::T;
    /// Zeros of `like`'s dtype.
    fn zeros(shape: Shape, device: &Device<B>, like: &Self::T) -> Self::T;
}

/// Float tensors.
pub(crate) struct Floats;

/// Integer tensors.
pub(crate) struct Ints;

impl<B: Backend> Kind<B> for Floats {
    type T = FloatTensor<B>;
    fn to_device(x: Self::T, device: &Device<B>) -> Self::T {
        B::float_to_device(x, device)
    }
    fn slice(x: Self::T, slices: &[Slice]) -> Self::T {
        B::float_slice(x, slices)
    }
    fn cat(parts: Vec<Self::T>, dim: usize) -> Self::T {
        B::float_cat(parts, dim)
    }
    fn zeros(shape: Shape, device: &Device<B>, like: &Self::T) -> Self::T {
        B::float_zeros(shape, device, FloatDType::from(like.dtype()))
    }
}

impl<B: Backend> Kind<B> for Ints {
    type T = IntTensor<B>;
    fn to_device(x: Self::T, device: &Device<B>) -> Self::T {
        B::int_to_device(x, device)
    }
    fn slice(x: Self::T, slices: &[Slice]) -> Self::T {
        B::int_slice(x, slices)
    }
    fn cat(parts: Vec<Self::T>, dim: usize) -> Self::T {
        B::int_cat(parts, dim)
    }
    fn zeros(shape: Shape, device: &Device<B>, like: &Self::T) -> Self::T {
        B::int_zeros(shape, device, IntDType::from(like.dtype()))
    }
}

/// `x` on `device` (unchanged when already there).
pub(crate) fn to<B: Backend, K: Kind<B>>(x: K::T, device: &Device<B>) -> K::T {
    if &x.device() == device {
        x
    } else {
        K::to_device(x, device)
    }
}

/// The slices that keep `len` rows from `start` of a tensor of `ndim` axes.
fn row_slices(ndim: usize, start: usize, len: usize) -> Vec<Slice> {
    (0..ndim)
        .map(|d| {
            if d == 0 {
                Slice::new(start as isize, Some((start + len) as isize), 1)
            } else {
                Slice::new(0, None, 1)
            }
        })
        .collect()
}

/// `len` leading-axis rows of `x` from `start` (`x` itself when that is all
/// of it). A part with no elements is a fresh zero-size tensor rather than
/// a view: Flex's binary kernels index a view's offset into its storage
/// even when there is nothing to read, so an empty view at a non-zero
/// offset (a row range of a swapped empty tensor) panics in the user's
/// next operation.
pub(crate) fn take_rows<B: Backend, K: Kind<B>>(x: K::T, start: usize, len: usize) -> K::T {
    let shape = x.shape();
    if start == 0 && len == shape[0] {
        return x;
    }
    let mut dims = shape.to_vec();
    dims[0] = len;
    if dims.iter().product::<usize>() == 0 {
        let device = x.device();
        return K::zeros(Shape::from(dims), &device, &x);
    }
    K::slice(x, &row_slices(shape.num_dims(), start, len))
}

/// Concatenate `parts` in order along the leading axis; a tensor shaped
/// like `like` with zero rows when there are none. A single part is
/// returned as it is (no copy).
pub(crate) fn cat<B: Backend, K: Kind<B>>(
    parts: Vec<K::T>,
    like: &K::T,
    device: &Device<B>,
) -> K::T {
    match parts.len() {
        0 => {
            let mut dims = like.shape().to_vec();
            dims[0] = 0;
            K::zeros(Shape::from(dims), device, like)
        }
        1 => parts.into_iter().next().expect("one part"),
        _ => K::cat(parts, 0),
    }
}

/// The sum of `parts` (at least one, same shape and dtype, on one device)
/// in the order given, so that every rank adding the same parts in the
/// same order gets the same bits: `((p0 + p1) + p2) + …`. `f16`/`bf16`
/// parts are accumulated in `f32` and rounded once at the end, as the
/// host-staged path does.
pub(crate) fn sum_in_order<B: Backend>(parts: Vec<FloatTensor<B>>) -> FloatTensor<B> {
    let dtype = parts[0].dtype();
    let promote = matches!(dtype, DType::F16 | DType::BF16);
    let widen = |t: FloatTensor<B>| {
        if promote {
            B::float_cast(t, FloatDType::F32)
        } else {
            t
        }
    };
    let mut it = parts.into_iter();
    let first = it.next().expect("at least one part");
    if first.shape().num_elements() == 0 {
        // Nothing to add (and Flex's binary kernels index out of range on
        // empty tensors with strides of a swapped view): a fresh empty
        // tensor, never a view of a part, so the caller's next operation
        // on the result does not meet that either.
        let device = first.device();
        return B::float_zeros(first.shape(), &device, FloatDType::from(dtype));
    }
    let Some(second) = it.next() else {
        return first;
    };
    let mut acc = B::float_add(widen(first), widen(second));
    for p in it {
        acc = B::float_add(acc, widen(p));
    }
    if promote {
        B::float_cast(acc, FloatDType::from(dtype))
    } else {
        acc
    }
}

/// `parts` (at least one, same shape and dtype, on one device) reduced
/// elementwise with `reduce` in the order given, as [`sum_in_order`] sums
/// them: `f16`/`bf16` are combined in `f32` and rounded once; `Max`/`Min`
/// are IEEE `maxNum`/`minNum` (a NaN loses to a number), as the local
/// transport's host kernels; `Mean` is the sum divided by the part count.
pub(crate) fn reduce_in_order<B: Backend>(
    parts: Vec<FloatTensor<B>>,
    reduce: ruda_comm::ReduceOp,
) -> FloatTensor<B> {
    use ruda_comm::ReduceOp;
    let n = parts.len();
    let dtype = parts[0].dtype();
    if reduce == ReduceOp::Sum || parts[0].shape().num_elements() == 0 {
        return sum_in_order::<B>(parts);
    }
    let promote = matches!(dtype, DType::F16 | DType::BF16);
    let widen = |t: FloatTensor<B>| {
        if promote {
            B::float_cast(t, FloatDType::F32)
        } else {
            t
        }
    };
    let device = parts[0].device();
    let bools = burn_backend::get_device_settings::<B>(&device).bool_dtype;
    let mut it = parts.into_iter().map(widen);
    let mut acc = it.next().expect("at least one part");
    for p in it {
        acc = match reduce {
            ReduceOp::Sum | ReduceOp::Mean => B::float_add(acc, p),
            ReduceOp::Prod => B::float_mul(acc, p),
            ReduceOp::Max | ReduceOp::Min => {
                // Take the part where it wins or where the running value is
                // NaN; a NaN part never wins a comparison.
                let wins = if reduce == ReduceOp::Max {
                    B::float_greater(p.clone(), acc.clone(), bools)
                } else {
                    B::float_lower(p.clone(), acc.clone(), bools)
                };
                let nan = B::float_not_equal(acc.clone(), acc.clone(), bools);
                B::float_mask_where(acc, B::bool_or(wins, nan), p)
            }
        };
    }
    if reduce == ReduceOp::Mean {
        acc = B::float_div_scalar(acc, burn_backend::Scalar::Float(n as f64));
    }
    if promote {
        B::float_cast(acc, FloatDType::from(dtype))
    } else {
        acc
    }
}
