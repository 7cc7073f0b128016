//! [`reshape`]: Burn's `Tensor::reshape` that also reaches shapes with a
//! zero-size axis. Burn reads a `0` in a reshape's target as "keep this
//! axis of the input" (ONNX's convention), so `x.reshape([0, 17, 32])` on a
//! `[3, 0, 17, 32]` tensor asks for `[3, 17, 32]` and panics, and on other
//! shapes silently yields another shape than the one written. Empty
//! batches and ranks without rows meet this everywhere.

use burn_tensor::{Shape, Tensor};

/// `x` reshaped to exactly `dims` (same number of elements), also when
/// `dims` has zero-size axes; the result stays on `x`'s autodiff graph
/// (a zero-size tensor's gradient is empty).
///
/// # Panics
/// As `Tensor::reshape`, when `dims` holds another number of elements than
/// `x` (a programming error, as in Burn).
///
/// # Example
/// ```
/// use burn_tensor::{Device, Tensor};
/// let x = Tensor::<4>::zeros([3, 0, 17, 32], &Device::flex());
/// assert_eq!(ruda_tensor::reshape(x.clone(), [0, 17, 32]).dims(), [0, 17, 32]);
/// assert_eq!(ruda_tensor::reshape(x, [0, 0, 5]).dims(), [0, 0, 5]);
/// ```
pub fn reshape<const D: usize, const D2: usize>(x: Tensor<D>, dims: [usize; D2]) -> Tensor<D2> {
    let zeros = dims.iter().filter(|&&d| d == 0).count();
    match zeros {
        0 => x.reshape(dims),
        1 => {
            // The one zero-size axis inferred (`-1`): the other axes are
            // positive, so it comes out as 0.
            let args: [i64; D2] = core::array::from_fn(|i| {
                if dims[i] == 0 {
                    -1
                } else {
                    i64::try_from(dims[i]).expect("an axis fits in i64")
                }
            });
            x.reshape(args)
        }
        _ => {
            // Several zero-size axes cannot be written as reshape
            // arguments: expand a sum of the (empty) input, which keeps the
            // result on the input's graph.
            assert_eq!(
                x.dims().iter().product::<usize>(),
                0,
                "reshape of {:?} into {dims:?}: another number of elements",
                x.dims()
            );
            x.reshape([-1])
                .sum()
                .reshape([1; D2])
                .expand(Shape::from(dims))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::reshape;
    use burn_tensor::{DType, Device, Tensor, TensorData};

    #[test]
    fn zero_size_targets_keep_their_shape_and_the_graph() {
        let device = Device::flex().autodiff();
        let x = Tensor::<4>::zeros([3, 0, 17, 32], (&device, DType::F64)).require_grad();
        for y in [
            reshape(x.clone(), [0, 17, 32]).reshape([-1]),
            reshape(x.clone(), [17, 0, 32]).reshape([-1]),
            reshape(x.clone(), [0, 0, 32, 17, 3]).reshape([-1]),
        ] {
            assert_eq!(y.dims(), [0]);
            let g = x.grad(&y.sum().backward()).expect("x is on the graph");
            assert_eq!(g.dims(), [3, 0, 17, 32]);
        }
        // Non-empty shapes are a plain reshape.
        let v: Vec<f64> = (0..6).map(f64::from).collect();
        let x = Tensor::<2>::from_data(TensorData::new(v.clone(), [2, 3]), (&device, DType::F64));
        let y = reshape(x, [3, 2]);
        assert_eq!(y.dims(), [3, 2]);
        assert_eq!(y.into_data().try_to_vec::<f64>().unwrap(), v);
    }
}
