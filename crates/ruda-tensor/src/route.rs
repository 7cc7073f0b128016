//! Routing a user-facing `burn_tensor::Tensor` (which carries no backend
//! type) to the primitive-level operation of the backend it lives on.

use alloc::format;

use burn_dispatch::{DispatchAutodiffContext, DispatchTensorKind, GradientCheckpointingStrategy};

use crate::error::Error;

/// The backend a dispatch tensor lives on, as far as ruda cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Which {
    Flex,
    #[cfg(feature = "cube")]
    Cube,
    Other,
}

/// Which backend `kind` (inside any autodiff wrapper) is.
pub(crate) fn which(kind: &DispatchTensorKind) -> Which {
    match kind {
        DispatchTensorKind::Flex(_) => Which::Flex,
        #[cfg(feature = "cube")]
        DispatchTensorKind::Cube(_) => Which::Cube,
        DispatchTensorKind::Autodiff(inner) => which(inner),
        #[allow(unreachable_patterns)]
        _ => Which::Other,
    }
}

/// The autodiff mode of a dispatch tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    Plain,
    Autodiff,
    Balanced,
}

pub(crate) fn mode(ctx: &DispatchAutodiffContext) -> Mode {
    match ctx {
        DispatchAutodiffContext::Disabled => Mode::Plain,
        DispatchAutodiffContext::Enabled(GradientCheckpointingStrategy::Disabled) => Mode::Autodiff,
        DispatchAutodiffContext::Enabled(GradientCheckpointingStrategy::Balanced) => Mode::Balanced,
    }
}

pub(crate) fn unsupported(e: burn_tensor::PrimitiveConversionError) -> Error {
    Error::UnsupportedTensor {
        message: format!("{e:?}"),
    }
}

pub(crate) fn unsupported_backend(kind: &DispatchTensorKind) -> Error {
    let name = format!("{kind:?}");
    Error::UnsupportedTensor {
        message: format!(
            "ruda runs on Flex{} tensors; this one is {}",
            if cfg!(feature = "cube") {
                " and CubeCL (wgpu, CUDA, ROCm)"
            } else {
                " (enable feature `cube` for wgpu, CUDA and ROCm)"
            },
            name.split('(').next().unwrap_or("another backend")
        ),
    }
}

/// One arm of [`routed`]: convert, call, wrap.
macro_rules! route_arm {
    ($dispatch:ident, $D:ty, $K:ty, $Back:ty, |$B:ident, $t:ident| $call:expr) => {{
        type $B = $Back;
        let $t = burn_tensor::Tensor::<$D, $K>::from_dispatch($dispatch)
            .try_into_primitive::<$B>()
            .map_err($crate::route::unsupported)?;
        let out = $call?;
        Ok(burn_tensor::Tensor::<$D, $K>::from_primitive::<$B>(out))
    }};
}

/// Run `$call` with `$B` the backend `$x` (a `Tensor<$D, $K>`) lives on and
/// `$t` its primitive, and wrap the primitive it returns back into a tensor.
macro_rules! routed {
    ($x:expr, $D:ty, $K:ty, |$B:ident, $t:ident| $call:expr) => {{
        use $crate::route::{Mode, Which, mode, unsupported_backend, which};
        let dispatch = $x.into_dispatch();
        match (which(&dispatch.kind), mode(&dispatch.autodiff)) {
            (Which::Flex, Mode::Plain) => {
                $crate::route::route_arm!(dispatch, $D, $K, burn_flex::Flex, |$B, $t| $call)
            }
            (Which::Flex, Mode::Autodiff) => $crate::route::route_arm!(
                dispatch, $D, $K, burn_autodiff::Autodiff<burn_flex::Flex>, |$B, $t| $call
            ),
            (Which::Flex, Mode::Balanced) => $crate::route::route_arm!(
                dispatch,
                $D,
                $K,
                burn_autodiff::Autodiff<
                    burn_flex::Flex,
                    burn_autodiff::checkpoint::strategy::BalancedCheckpointing,
                >,
                |$B, $t| $call
            ),
            #[cfg(feature = "cube")]
            (Which::Cube, Mode::Plain) => {
                $crate::route::route_arm!(dispatch, $D, $K, burn_cubecl::Cube, |$B, $t| $call)
            }
            #[cfg(feature = "cube")]
            (Which::Cube, Mode::Autodiff) => $crate::route::route_arm!(
                dispatch, $D, $K, burn_autodiff::Autodiff<burn_cubecl::Cube>, |$B, $t| $call
            ),
            #[cfg(feature = "cube")]
            (Which::Cube, Mode::Balanced) => $crate::route::route_arm!(
                dispatch,
                $D,
                $K,
                burn_autodiff::Autodiff<
                    burn_cubecl::Cube,
                    burn_autodiff::checkpoint::strategy::BalancedCheckpointing,
                >,
                |$B, $t| $call
            ),
            (Which::Other, _) => Err(unsupported_backend(&dispatch.kind)),
        }
    }};
}

pub(crate) use {route_arm, routed};
