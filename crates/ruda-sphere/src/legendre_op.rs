//! The Legendre half of a transform: batched matmuls over the orders
//! against a constant table, and the shape bookkeeping shared by the
//! serial and distributed transforms.

use alloc::vec::Vec;
use std::sync::Mutex;

use burn_tensor::{DType, Device, Tensor, TensorData};

use crate::SphereError;

/// A constant `[m, l, k]` table, made into a tensor once per element type.
#[derive(Debug)]
pub(crate) struct Table {
    values: Vec<f64>,
    shape: [usize; 3],
    made: Mutex<Vec<(DType, Tensor<3>)>>,
}

impl Table {
    pub(crate) fn new(values: Vec<f64>, shape: [usize; 3]) -> Self {
        debug_assert_eq!(values.len(), shape.iter().product::<usize>());
        Table {
            values,
            shape,
            made: Mutex::new(Vec::new()),
        }
    }

    /// The table as a constant tensor (no gradient) of `dtype` on Flex.
    pub(crate) fn tensor(&self, dtype: DType) -> Tensor<3> {
        let mut made = self
            .made
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((_, t)) = made.iter().find(|(d, _)| *d == dtype) {
            return t.clone();
        }
        let t = Tensor::<3>::from_data(
            TensorData::new(self.values.clone(), self.shape),
            (&Device::flex(), dtype),
        );
        made.push((dtype, t.clone()));
        t
    }
}

/// `s [m, k, b, 2]`, `w [m, l, k]` → `[m, l, b, 2]`: `Σ_k w[m,l,k] s[m,k,b,:]`
/// (one matmul per order; no copy of `s` when it is contiguous).
pub(crate) fn analysis(s: Tensor<4>, w: Tensor<3>) -> Tensor<4> {
    let [m, k, b, _] = s.dims();
    let l = w.dims()[1];
    w.matmul(s.reshape([m, k, 2 * b])).reshape([m, l, b, 2])
}

/// `c [m, l, b, 2]`, `p [m, k, l]` → `[m, k, b, 2]`: `Σ_l p[m,k,l] c[m,l,b,:]`.
pub(crate) fn synthesis(c: Tensor<4>, p: Tensor<3>) -> Tensor<4> {
    let [m, l, b, _] = c.dims();
    let k = p.dims()[1];
    p.matmul(c.reshape([m, l, 2 * b])).reshape([m, k, b, 2])
}

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
    Ok((x.reshape([lead, trailing[0], trailing[1]]), lead_dims))
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
    Ok((c.reshape([lead, trailing[0], trailing[1], 2]), lead_dims))
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
    x.reshape(shape)
}
