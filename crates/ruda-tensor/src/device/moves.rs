//! The data movement of [`super::DeviceGroup`], as the backend's own tensor
//! operations on handles of the peers' tensors: take rows (`slice`),
//! concatenate (`cat`), add in rank order (`add`, with `f16`/`bf16`
//! accumulated in `f32` and rounded once), and bring a peer's tensor to
//! this rank's device (`to_device`, a no-op when it is already there).
//! Nothing is read back to the host.

use alloc::vec::Vec;

use burn_backend::tensor::{Device, FloatTensor, IntTensor};
use burn_backend::{Backend, DType, FloatDType, IntDType, Shape, Slice, TensorMetadata};

/// `x` on `device` (unchanged when already there).
pub(crate) fn float_to<B: Backend>(x: FloatTensor<B>, device: &Device<B>) -> FloatTensor<B> {
    if &x.device() == device {
        x
    } else {
        B::float_to_device(x, device)
    }
}

/// `x` on `device` (unchanged when already there).
pub(crate) fn int_to<B: Backend>(x: IntTensor<B>, device: &Device<B>) -> IntTensor<B> {
    if &x.device() == device {
        x
    } else {
        B::int_to_device(x, device)
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
/// of it).
pub(crate) fn float_rows<B: Backend>(
    x: FloatTensor<B>,
    start: usize,
    len: usize,
) -> FloatTensor<B> {
    let shape = x.shape();
    if start == 0 && len == shape[0] {
        return x;
    }
    B::float_slice(x, &row_slices(shape.num_dims(), start, len))
}

/// `len` leading-axis rows of `x` from `start`.
pub(crate) fn int_rows<B: Backend>(x: IntTensor<B>, start: usize, len: usize) -> IntTensor<B> {
    let shape = x.shape();
    if start == 0 && len == shape[0] {
        return x;
    }
    B::int_slice(x, &row_slices(shape.num_dims(), start, len))
}

/// `shape` with `rows` leading rows.
fn with_rows(shape: &Shape, rows: usize) -> Shape {
    let mut dims = shape.to_vec();
    dims[0] = rows;
    Shape::from(dims)
}

/// Concatenate `parts` (the `Some`s, in order) along the leading axis; an
/// empty tensor shaped like `like` with zero rows when there are none.
/// A single part is returned as it is (no copy).
pub(crate) fn float_cat<B: Backend>(
    parts: Vec<FloatTensor<B>>,
    like: &FloatTensor<B>,
    device: &Device<B>,
) -> FloatTensor<B> {
    match parts.len() {
        0 => B::float_zeros(
            with_rows(&like.shape(), 0),
            device,
            FloatDType::from(like.dtype()),
        ),
        1 => parts.into_iter().next().expect("one part"),
        _ => B::float_cat(parts, 0),
    }
}

/// [`float_cat`] for integer tensors.
pub(crate) fn int_cat<B: Backend>(
    parts: Vec<IntTensor<B>>,
    like: &IntTensor<B>,
    device: &Device<B>,
) -> IntTensor<B> {
    match parts.len() {
        0 => B::int_zeros(
            with_rows(&like.shape(), 0),
            device,
            IntDType::from(like.dtype()),
        ),
        1 => parts.into_iter().next().expect("one part"),
        _ => B::int_cat(parts, 0),
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
