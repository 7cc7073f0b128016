//! The shape bookkeeping shared by the serial and distributed transforms:
//! leading dimensions flattened and restored, the orders-first layout.

use alloc::vec::Vec;

use burn_tensor::Tensor;
use ruda_tensor::reshape;

use crate::SphereError;

/// `[b, l, m, 2] ↔ [m, l, b, 2]` (its own inverse).
pub(crate) fn swap_orders(c: Tensor<4>) -> Tensor<4> {
    c.permute([2, 1, 0, 3])
}

/// A field `[.., a, b]` seen as `[lead, a, b]`, and its leading dimensions.
pub(crate) fn flatten_field<const D: usize>(
    op: &'static str,
    rank: usize,
    x: Tensor<D>,
    trailing: [usize; 2],
) -> Result<(Tensor<3>, Vec<usize>), SphereError> {
    let dims = x.dims();
    if D < 2 || dims[D - 2..] != trailing {
        return Err(SphereError::Shape {
            op,
            rank,
            expected: trailing.to_vec(),
            got: dims.to_vec(),
        });
    }
    let lead_dims = dims[..D - 2].to_vec();
    let lead = lead_dims.iter().product();
    Ok((reshape(x, [lead, trailing[0], trailing[1]]), lead_dims))
}

/// Coefficients `[.., l, m, 2]` seen as `[lead, l, m, 2]`.
pub(crate) fn flatten_coefficients<const D: usize>(
    op: &'static str,
    rank: usize,
    c: Tensor<D>,
    trailing: [usize; 2],
) -> Result<(Tensor<4>, Vec<usize>), SphereError> {
    let dims = c.dims();
    let want = [trailing[0], trailing[1], 2];
    if D < 3 || dims[D - 3..] != want {
        return Err(SphereError::Shape {
            op,
            rank,
            expected: want.to_vec(),
            got: dims.to_vec(),
        });
    }
    let lead_dims = dims[..D - 3].to_vec();
    let lead = lead_dims.iter().product();
    Ok((reshape(c, [lead, trailing[0], trailing[1], 2]), lead_dims))
}

/// Check that an output of `E` dimensions follows from an input of `D`
/// (`E = D + delta`).
pub(crate) fn check_rank<const D: usize, const E: usize>(
    op: &'static str,
    delta: isize,
) -> Result<(), SphereError> {
    let expected = D as isize + delta;
    if E as isize != expected {
        return Err(SphereError::Rank {
            op,
            input: D,
            expected: expected.max(0) as usize,
            requested: E,
        });
    }
    Ok(())
}

/// `x` reshaped to `lead ++ trailing` (`E` dimensions, checked before).
pub(crate) fn unflatten<const N: usize, const E: usize>(
    x: Tensor<N>,
    lead: &[usize],
    trailing: &[usize],
) -> Tensor<E> {
    let shape: Vec<usize> = lead.iter().chain(trailing).copied().collect();
    let shape: [usize; E] = shape
        .try_into()
        .expect("the output rank was checked against the input's");
    reshape(x, shape)
}
