//! The Legendre half of the distributed transforms: batched matmuls over
//! the orders against a constant table of the rank's orders and
//! latitudes; and the shape bookkeeping shared by the serial and
//! distributed transforms.

use alloc::vec::Vec;
use core::ops::Range;
use std::sync::Mutex;

use burn_tensor::{DType, Device, Tensor, TensorData};
use ruda_tensor::reshape;

use crate::SphereError;

/// A constant table, made into a tensor once per element type.
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

/// Blocks of orders a table is cut into (at most).
const BLOCKS: usize = 8;

/// One block of orders and the degrees that are not zero for any of them.
#[derive(Debug)]
struct Block {
    /// The block's orders, as indices into the table's orders.
    m: Range<usize>,
    /// The first degree kept: the block's first order (`P̄_l^m = 0` for
    /// `l < m`).
    l0: usize,
    /// `[m, l − l0, k]` (forward) or `[m, k, l − l0]` (inverse).
    table: Table,
}

/// A Legendre table for a range of orders, all degrees and some latitudes,
/// cut into blocks of orders that each keep only their non-zero degrees:
/// since `P̄_l^m = 0` for `l < m`, a triangular truncation needs a little
/// over half of the full `[m, l, k]` table's multiplications and memory
/// traffic.
#[derive(Debug)]
pub(crate) struct Legendre {
    lmax: usize,
    blocks: Vec<Block>,
}

impl Legendre {
    /// Cut `values` (`[orders.len(), lmax, nk]`, row `i` for order
    /// `orders[i]`, orders ascending) into blocks: for the forward
    /// transform each kept as `[m, l, k]`, for the inverse transposed to
    /// `[m, k, l]`.
    pub(crate) fn new(
        values: &[f64],
        orders: &[usize],
        lmax: usize,
        nk: usize,
        forward: bool,
    ) -> Self {
        let nm = orders.len();
        debug_assert_eq!(values.len(), nm * lmax * nk);
        debug_assert!(orders.windows(2).all(|w| w[0] < w[1]));
        let count = nm.clamp(1, BLOCKS);
        let mut blocks = Vec::with_capacity(count);
        let mut start = 0;
        for i in 0..count {
            let len = nm / count + usize::from(i < nm % count);
            let m = start..start + len;
            start += len;
            let l0 = orders.get(m.start).map_or(lmax, |&o| o.min(lmax));
            let nl = lmax - l0;
            let mut t = Vec::with_capacity(len * nl * nk);
            for mi in m.clone() {
                if forward {
                    let row = &values[(mi * lmax + l0) * nk..(mi + 1) * lmax * nk];
                    t.extend_from_slice(row);
                } else {
                    for k in 0..nk {
                        t.extend((l0..lmax).map(|l| values[(mi * lmax + l) * nk + k]));
                    }
                }
            }
            let shape = if forward {
                [len, nl, nk]
            } else {
                [len, nk, nl]
            };
            blocks.push(Block {
                m,
                l0,
                table: Table::new(t, shape),
            });
        }
        Legendre { lmax, blocks }
    }

    /// `s [m, k, b, 2]` → `[m, l, b, 2]`: `Σ_k w[m,l,k] s[m,k,b,:]`, one
    /// batched matmul per block (no copy of `s` when it is contiguous).
    pub(crate) fn analysis(&self, s: Tensor<4>) -> Tensor<4> {
        let [m, k, b, _] = s.dims();
        if b == 0 {
            // An empty batch. Burn's slices of an empty tensor are new
            // tensors off the autodiff graph, so the blocks below would
            // cut the gradient's path: reshape instead (nothing to add).
            return reshape(s, [m, self.lmax, 0, 2]);
        }
        let (dtype, device) = (s.dtype(), s.device());
        let s = reshape(s, [m, k, 2 * b]);
        let parts = self
            .blocks
            .iter()
            .filter(|bl| !bl.m.is_empty())
            .map(|bl| {
                let out =
                    bl.table
                        .tensor(dtype)
                        .matmul(s.clone().narrow(0, bl.m.start, bl.m.len()));
                if bl.l0 == 0 {
                    out
                } else {
                    let zeros = Tensor::zeros([bl.m.len(), bl.l0, 2 * b], (&device, dtype));
                    Tensor::cat(vec![zeros, out], 1)
                }
            })
            .collect();
        reshape(Tensor::cat(parts, 0), [m, self.lmax, b, 2])
    }

    /// `c [m, l, b, 2]` → `[m, k, b, 2]`: `Σ_l p[m,k,l] c[m,l,b,:]`, one
    /// batched matmul per block.
    pub(crate) fn synthesis(&self, c: Tensor<4>) -> Tensor<4> {
        let [m, l, b, _] = c.dims();
        if b == 0 {
            // An empty batch (see `analysis`).
            return reshape(c, [m, self.blocks[0].table.shape[1], 0, 2]);
        }
        let dtype = c.dtype();
        let c = reshape(c, [m, l, 2 * b]);
        let parts: Vec<Tensor<3>> = self
            .blocks
            .iter()
            .filter(|bl| !bl.m.is_empty())
            .map(|bl| {
                let part = c
                    .clone()
                    .narrow(0, bl.m.start, bl.m.len())
                    .narrow(1, bl.l0, l - bl.l0);
                bl.table.tensor(dtype).matmul(part)
            })
            .collect();
        let k = parts[0].dims()[1];
        reshape(Tensor::cat(parts, 0), [m, k, b, 2])
    }
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
