//! From Burn's backend-free [`Tensor`] to the backend the transforms' kernels
//! are implemented for (Flex, with or without autodiff) and back.

use alloc::format;

use burn_autodiff::Autodiff;
use burn_backend::tensor::FloatTensor;
use burn_dispatch::{DispatchAutodiffContext, GradientCheckpointingStrategy};
use burn_flex::Flex;
use burn_tensor::{DType, Tensor};

use crate::SphereError;
use crate::fourier::{LongitudeFourier, Modes};
use crate::fused::{Fused, FusedSht};
use crate::fused_vector::{FusedVector, FusedVectorSht};
use crate::legendre_fly::{LegendreOnTheFly, Step};

/// The backends the transforms' kernels are implemented for.
trait Kernels: LongitudeFourier + LegendreOnTheFly + FusedSht + FusedVectorSht {}
impl<B: LongitudeFourier + LegendreOnTheFly + FusedSht + FusedVectorSht> Kernels for B {}

/// The element types the transforms accept.
pub(crate) fn check_dtype(op: &'static str, dtype: DType) -> Result<(), SphereError> {
    match dtype {
        DType::F32 | DType::F64 => Ok(()),
        dtype => Err(SphereError::DType { op, dtype }),
    }
}

/// An operation on a backend primitive, generic over the backend.
trait PrimOp {
    fn apply<B: Kernels>(self, x: FloatTensor<B>) -> FloatTensor<B>;
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
    fn apply<B: Kernels>(self, x: FloatTensor<B>) -> FloatTensor<B> {
        B::lon_forward(x, self.0)
    }
}

struct Inverse(Modes);
impl PrimOp for Inverse {
    fn apply<B: Kernels>(self, x: FloatTensor<B>) -> FloatTensor<B> {
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

struct Analysis(Step);
impl PrimOp for Analysis {
    fn apply<B: Kernels>(self, x: FloatTensor<B>) -> FloatTensor<B> {
        B::leg_analysis(x, self.0)
    }
}

struct Synthesis(Step);
impl PrimOp for Synthesis {
    fn apply<B: Kernels>(self, x: FloatTensor<B>) -> FloatTensor<B> {
        B::leg_synthesis(x, self.0)
    }
}

/// `[m, nlat, b, 2] → [m, lmax, b, 2]` by the on-the-fly Legendre analysis;
/// the caller has checked the shape.
pub(crate) fn leg_analysis(
    op: &'static str,
    s: Tensor<4>,
    step: Step,
) -> Result<Tensor<4>, SphereError> {
    route(op, s, Analysis(step))
}

/// `[m, lmax, b, 2] → [m, nlat, b, 2]` by the on-the-fly Legendre
/// synthesis; the caller has checked the shape.
pub(crate) fn leg_synthesis(
    op: &'static str,
    c: Tensor<4>,
    step: Step,
) -> Result<Tensor<4>, SphereError> {
    route(op, c, Synthesis(step))
}

struct FusedAnalysis(Fused);
impl PrimOp for FusedAnalysis {
    fn apply<B: Kernels>(self, x: FloatTensor<B>) -> FloatTensor<B> {
        B::sht_analysis(x, self.0)
    }
}

struct FusedSynthesis(Fused);
impl PrimOp for FusedSynthesis {
    fn apply<B: Kernels>(self, x: FloatTensor<B>) -> FloatTensor<B> {
        B::sht_synthesis(x, self.0)
    }
}

/// `[b, nlat, nlon] → [b, lmax, mmax, 2]` by the fused serial analysis;
/// the caller has checked the shape.
pub(crate) fn sht_analysis(
    op: &'static str,
    x: Tensor<3>,
    f: Fused,
) -> Result<Tensor<4>, SphereError> {
    route(op, x, FusedAnalysis(f))
}

/// `[b, lmax, mmax, 2] → [b, nlat, nlon]` by the fused serial synthesis;
/// the caller has checked the shape.
pub(crate) fn sht_synthesis(
    op: &'static str,
    c: Tensor<4>,
    f: Fused,
) -> Result<Tensor<3>, SphereError> {
    route(op, c, FusedSynthesis(f))
}

struct FusedVectorAnalysis(FusedVector);
impl PrimOp for FusedVectorAnalysis {
    fn apply<B: Kernels>(self, x: FloatTensor<B>) -> FloatTensor<B> {
        B::vsht_analysis(x, self.0)
    }
}

struct FusedVectorSynthesis(FusedVector);
impl PrimOp for FusedVectorSynthesis {
    fn apply<B: Kernels>(self, x: FloatTensor<B>) -> FloatTensor<B> {
        B::vsht_synthesis(x, self.0)
    }
}

/// `[2b, nlat, nlon] → [2b, lmax, mmax, 2]` by the fused serial vector
/// analysis; the caller has checked the shape.
pub(crate) fn vsht_analysis(
    op: &'static str,
    x: Tensor<3>,
    f: FusedVector,
) -> Result<Tensor<4>, SphereError> {
    route(op, x, FusedVectorAnalysis(f))
}

/// `[2b, lmax, mmax, 2] → [2b, nlat, nlon]` by the fused serial vector
/// synthesis; the caller has checked the shape.
pub(crate) fn vsht_synthesis(
    op: &'static str,
    c: Tensor<4>,
    f: FusedVector,
) -> Result<Tensor<3>, SphereError> {
    route(op, c, FusedVectorSynthesis(f))
}
