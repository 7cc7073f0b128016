//! From Burn's backend-free [`Tensor`] to where the transforms' steps run:
//! the host kernels for a tensor on Flex (with or without autodiff, with or
//! without gradient checkpointing), the tensor operations of
//! [`crate::on_device`] for a tensor anywhere else.

use alloc::format;

use burn_autodiff::Autodiff;
use burn_autodiff::checkpoint::strategy::BalancedCheckpointing;
use burn_backend::tensor::FloatTensor;
use burn_dispatch::{DispatchAutodiffContext, GradientCheckpointingStrategy};
use burn_flex::Flex;
use burn_tensor::{DType, Tensor};

use crate::SphereError;
use crate::fourier::{LongitudeFourier, Modes};
use crate::fused::{Fused, FusedSht};
use crate::fused_vector::{FusedVector, FusedVectorSht};
use crate::legendre_fly::{LegendreOnTheFly, Step};
use crate::on_device::{self, DeviceConstants};

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

std::thread_local! {
    /// Whether this thread's transforms take the tensor-operation path on
    /// Flex too ([`crate::testing::with_tensor_ops`]).
    static TENSOR_OPS: core::cell::Cell<bool> = const { core::cell::Cell::new(false) };
}

/// Run `f` with this thread's transforms on Flex taking the tensor
/// operations of [`crate::on_device`], as on any other backend; the
/// thread's previous choice is restored afterwards, panic or not.
pub(crate) fn with_tensor_ops<R>(f: impl FnOnce() -> R) -> R {
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            TENSOR_OPS.with(|t| t.set(self.0));
        }
    }
    let _restore = Restore(TENSOR_OPS.with(|t| t.replace(true)));
    f()
}

/// Whether a tensor on `device` runs the host kernels (Flex, with or
/// without autodiff and gradient checkpointing) rather than the tensor
/// operations of [`crate::on_device`] (every other backend).
pub(crate) fn host_kernels(device: &burn_tensor::Device) -> bool {
    !TENSOR_OPS.with(|t| t.get())
        && matches!(
            device.clone().inner().as_dispatch(),
            burn_dispatch::DispatchDevice::Flex(_)
        )
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
        message: format!("a tensor the host kernels cannot read: {e:?}"),
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
        DispatchAutodiffContext::Enabled(GradientCheckpointingStrategy::Balanced) => {
            type B = Autodiff<Flex, BalancedCheckpointing>;
            let t = Tensor::<D>::from_dispatch(dispatch)
                .try_into_primitive::<B>()
                .map_err(unsupported)?;
            Ok(Tensor::from_primitive::<B>(f.apply::<B>(t)))
        }
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
    dft: &DeviceConstants,
) -> Result<Tensor<4>, SphereError> {
    if host_kernels(&x.device()) {
        return route(op, x, Forward(modes));
    }
    check_dtype(op, x.dtype())?;
    Ok(on_device::lon_forward(x, modes, dft))
}

/// `[b, k, mmax, 2] → [b, k, nlon]` by [`Modes::inverse`]; the caller has
/// checked the last two dimensions.
pub(crate) fn lon_inverse(
    op: &'static str,
    c: Tensor<4>,
    modes: Modes,
    dft: &DeviceConstants,
) -> Result<Tensor<3>, SphereError> {
    if host_kernels(&c.device()) {
        return route(op, c, Inverse(modes));
    }
    check_dtype(op, c.dtype())?;
    Ok(on_device::lon_inverse(c, modes, dft))
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
    if host_kernels(&s.device()) {
        return route(op, s, Analysis(step));
    }
    check_dtype(op, s.dtype())?;
    Ok(on_device::leg_analysis(s, &step))
}

/// `[m, lmax, b, 2] → [m, nlat, b, 2]` by the on-the-fly Legendre
/// synthesis; the caller has checked the shape.
pub(crate) fn leg_synthesis(
    op: &'static str,
    c: Tensor<4>,
    step: Step,
) -> Result<Tensor<4>, SphereError> {
    if host_kernels(&c.device()) {
        return route(op, c, Synthesis(step));
    }
    check_dtype(op, c.dtype())?;
    Ok(on_device::leg_synthesis(c, &step))
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

/// `[b, nlat, nlon] → [b, lmax, mmax, 2]` (`[lmax, mmax, b, 2]` when
/// `f.degrees_first`) by the fused analysis; the caller has checked the
/// shape.
pub(crate) fn sht_analysis(
    op: &'static str,
    x: Tensor<3>,
    f: Fused,
) -> Result<Tensor<4>, SphereError> {
    route(op, x, FusedAnalysis(f))
}

/// `[b, lmax, mmax, 2]` (`[lmax, mmax, b, 2]` when `f.degrees_first`) →
/// `[b, nlat, nlon]` by the fused synthesis; the caller has checked the
/// shape.
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tensor_operation_choice_is_this_threads_and_is_restored() {
        let flex = burn_tensor::Device::flex();
        assert!(host_kernels(&flex));
        assert!(host_kernels(
            &flex.clone().autodiff().gradient_checkpointing()
        ));
        with_tensor_ops(|| {
            assert!(!host_kernels(&flex));
            // Nested: still on, and still on once the inner call returns.
            with_tensor_ops(|| assert!(!host_kernels(&flex)));
            assert!(!host_kernels(&flex));
            // Another thread keeps the host kernels.
            std::thread::scope(|s| {
                s.spawn(|| assert!(host_kernels(&flex))).join().unwrap();
            });
        });
        assert!(host_kernels(&flex));
        // Restored after a panic too.
        let caught = std::panic::catch_unwind(|| with_tensor_ops(|| panic!("inside")));
        assert!(caught.is_err());
        assert!(host_kernels(&flex));
    }
}
