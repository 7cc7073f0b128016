//! [`Zeros`]: a module mapper that zeroes every float parameter.

use burn_core::module::{ModuleMapper, Param};
use burn_tensor::Tensor;

/// A [`ModuleMapper`] that sets every float parameter to zeros (keeping its
/// id, shape, dtype and gradient requirement), e.g. to start replicas equal
/// in examples, on any backend. To make real
/// replicas equal, broadcast one rank's module with
/// [`super::broadcast_module`].
///
/// # Example
/// ```
/// use burn_core::module::Module;
/// use burn_nn::{Linear, LinearConfig};
/// use burn_tensor::Device;
/// let model: Linear = LinearConfig::new(3, 2).init(&Device::flex()).map(&mut ruda_tensor::ddp::Zeros);
/// assert_eq!(model.weight.val().sum().into_scalar::<f32>(), 0.0);
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct Zeros;

impl ModuleMapper for Zeros {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
        // Keeps the parameter's gradient requirement (none on a backend
        // without autodiff, where asking for one would panic).
        param.map(|t| {
            let zeros = Tensor::<D>::zeros(t.dims(), (&t.device(), t.dtype()));
            zeros.set_require_grad(t.is_require_grad())
        })
    }
}
