//! From Burn's backend-free [`Tensor`] to the backend the longitude kernels
//! are implemented for (Flex, with or without autodiff) and back.

use alloc::format;

use burn_autodiff::Autodiff;
use burn_backend::tensor::FloatTensor;
use burn_dispatch::{DispatchAutodiffContext, GradientCheckpointingStrategy};
use burn_flex::Flex;
use burn_tensor::{DType, Tensor};

use crate::SphereError;
use crate::fourier::{LongitudeFourier, Modes};

/// The element types the transforms accept.
pub(crate) fn check_dtype(op: &'static str, dtype: DType) -> Result<(), SphereError> {
    match dtype {
        DType::F32 | DType::F64 => Ok(()),
        dtype => Err(SphereError::DType { op, dtype }),
    }
}

/// An operation on a backend primitive, generic over the backend.
trait PrimOp {
    fn apply<B: LongitudeFourier>(self, x: FloatTensor<B>) -> FloatTensor<B>;
}

/// Apply `f` to `x` on the backend it lives on.
fn route<const D: usize, const E: usize>(
    op: &'static str,
    x: Tensor<D>,
    f: impl PrimOp,
) -> Result<Tensor<E>, SphereError> {
    check_dtype(op, x.dtype())?;
    let unsupported = |e: burn_tensor::PrimitiveConversionError| SphereError::Device {
        op,
        message: format!("only tensors on Flex devices are supported: {e:?}"),
    };
    let dispatch = x.into_dispatch();
    match dispatch.autodiff {
        DispatchAutodiffContext::Disabled => {
            let t = Tensor::<D>::from_dispatch(dispatch)
                .try_into_primitive::<Flex>()
                .map_err(unsupported)?;
            Ok(Tensor::from_primitive::<Flex>(f.apply::<Flex>(t)))
        }
        DispatchAutodiffContext::Enabled(GradientCheckpointingStrategy::Disabled) => {
            let t = Tensor::<D>::from_dispatch(dispatch)
                .try_into_primitive::<Autodiff<Flex>>()
                .map_err(unsupported)?;
            Ok(Tensor::from_primitive::<Autodiff<Flex>>(
                f.apply::<Autodiff<Flex>>(t),
            ))
        }
        DispatchAutodiffContext::Enabled(strategy) => Err(SphereError::Device {
            op,
            message: format!("autodiff with gradient checkpointing {strategy:?} is not supported"),
        }),
    }
}

struct Forward(Modes);
impl PrimOp for Forward {
    fn apply<B: LongitudeFourier>(self, x: FloatTensor<B>) -> FloatTensor<B> {
        B::lon_forward(x, self.0)
    }
}

struct Inverse(Modes);
impl PrimOp for Inverse {
    fn apply<B: LongitudeFourier>(self, x: FloatTensor<B>) -> FloatTensor<B> {
        B::lon_inverse(x, self.0)
    }
}

/// `[b, k, nlon] → [b, k, mmax, 2]` by [`Modes::forward`]; the caller has
/// checked the last dimension.
pub(crate) fn lon_forward(
    op: &'static str,
    x: Tensor<3>,
    modes: Modes,
) -> Result<Tensor<4>, SphereError> {
    route(op, x, Forward(modes))
}

/// `[b, k, mmax, 2] → [b, k, nlon]` by [`Modes::inverse`]; the caller has
/// checked the last two dimensions.
pub(crate) fn lon_inverse(
    op: &'static str,
    c: Tensor<4>,
    modes: Modes,
) -> Result<Tensor<3>, SphereError> {
    route(op, c, Inverse(modes))
}
