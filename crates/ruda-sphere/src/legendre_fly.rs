//! The Legendre step without tables ([`crate::legendre_kernel`]) as a
//! differentiable backend operation on Flex, for a rank of the distributed
//! transforms (the serial ones run fused, [`crate::fused`]):
//! `[m, nlat, b, 2] ↔ [m, lmax, b, 2]` (the orders-first spectral layout of
//! [`crate::fourier::SpectralLayout::OrdersFirst`]), each direction's
//! adjoint the other with the same weighting (recorded on `Autodiff`).
//!
//! The kernels run in f64 on the host values of the tensor; an f32 input
//! is widened and its result rounded once.

use alloc::sync::Arc;
use alloc::vec::Vec;

use crate::linear_op::linear;
use burn_autodiff::Autodiff;
use burn_autodiff::checkpoint::strategy::CheckpointStrategy;
use burn_backend::ops::FloatTensorOps;
use burn_backend::tensor::FloatTensor;
use burn_backend::{Backend, DType, TensorData, TensorMetadata, read_sync};
use burn_flex::{Flex, FlexDevice};

use crate::legendre_kernel::Recurrence;
use crate::profile::{Stage, timed};

/// One Legendre step: the recurrence of a transform's orders and grid, and
/// whether the quadrature weights are applied (analysis of a field, and
/// the adjoint of that).
#[derive(Clone, Debug)]
pub(crate) struct Step {
    pub(crate) rec: Arc<Recurrence>,
    pub(crate) weighted: bool,
    /// The step's table on the devices other than Flex it has run on
    /// ([`crate::on_device`]).
    pub(crate) tables: Arc<crate::on_device::DeviceConstants>,
    /// The host blocks the fused transforms of this step keep between
    /// calls ([`crate::block_pool`]).
    pub(crate) blocks: Arc<crate::block_pool::BlockPool>,
}

impl Step {
    /// The step of `rec`, weighted or not.
    pub(crate) fn new(rec: Recurrence, weighted: bool) -> Self {
        Step {
            rec: Arc::new(rec),
            weighted,
            tables: Arc::default(),
            blocks: Arc::default(),
        }
    }
}

/// The Legendre kernels as backend operations.
pub(crate) trait LegendreOnTheFly: Backend {
    /// `[m, nlat, b, 2] → [m, lmax, b, 2]` by [`Recurrence::analysis`].
    fn leg_analysis(s: FloatTensor<Self>, step: Step) -> FloatTensor<Self>;
    /// `[m, lmax, b, 2] → [m, nlat, b, 2]` by [`Recurrence::synthesis`].
    fn leg_synthesis(c: FloatTensor<Self>, step: Step) -> FloatTensor<Self>;
}

/// The host values of a Flex tensor of f32 or f64, in f64, and its dtype.
fn to_host(x: FloatTensor<Flex>) -> (Vec<f64>, DType) {
    timed(Stage::HostCopies, || to_host_untimed(x))
}

fn to_host_untimed(x: FloatTensor<Flex>) -> (Vec<f64>, DType) {
    let data = read_sync(Flex::float_into_data(x)).expect("a Flex tensor reads back");
    match data.dtype() {
        DType::F64 => (data.try_into_vec::<f64>().expect("f64 values"), DType::F64),
        DType::F32 => (
            data.as_slice::<f32>()
                .expect("f32 values")
                .iter()
                .map(|&v| f64::from(v))
                .collect(),
            DType::F32,
        ),
        other => panic!("ruda-sphere: Legendre step of {other:?} (checked before routing)"),
    }
}

/// `values` as a Flex tensor of `shape` in `dtype` (f32 rounded once).
fn from_host(values: Vec<f64>, shape: [usize; 4], dtype: DType) -> FloatTensor<Flex> {
    timed(Stage::HostCopies, || {
        from_host_untimed(values, shape, dtype)
    })
}

fn from_host_untimed(values: Vec<f64>, shape: [usize; 4], dtype: DType) -> FloatTensor<Flex> {
    let data = if dtype == DType::F32 {
        TensorData::new(
            values.into_iter().map(|v| v as f32).collect::<Vec<f32>>(),
            shape,
        )
    } else {
        TensorData::new(values, shape)
    };
    Flex::float_from_data(data, &FlexDevice)
}

impl LegendreOnTheFly for Flex {
    fn leg_analysis(s: FloatTensor<Self>, step: Step) -> FloatTensor<Self> {
        let shape = s.shape().to_vec();
        let rec = &step.rec;
        assert!(
            shape.len() == 4
                && shape[0] == rec.orders().len()
                && shape[1] == rec.nlat()
                && shape[3] == 2,
            "an [m, nlat, b, 2] spectrum (checked before routing)"
        );
        let b = shape[2];
        let (values, dtype) = to_host(s);
        let out = timed(Stage::Legendre, || {
            rec.analysis(&values, 2 * b, step.weighted)
        });
        from_host(out, [shape[0], rec.lmax(), b, 2], dtype)
    }

    fn leg_synthesis(c: FloatTensor<Self>, step: Step) -> FloatTensor<Self> {
        let shape = c.shape().to_vec();
        let rec = &step.rec;
        assert!(
            shape.len() == 4
                && shape[0] == rec.orders().len()
                && shape[1] == rec.lmax()
                && shape[3] == 2,
            "an [m, lmax, b, 2] spectrum (checked before routing)"
        );
        let b = shape[2];
        let (values, dtype) = to_host(c);
        let out = timed(Stage::Legendre, || {
            rec.synthesis(&values, 2 * b, step.weighted)
        });
        from_host(out, [shape[0], rec.nlat(), b, 2], dtype)
    }
}

impl<B: LegendreOnTheFly, C: CheckpointStrategy> LegendreOnTheFly for Autodiff<B, C> {
    fn leg_analysis(s: FloatTensor<Self>, step: Step) -> FloatTensor<Self> {
        linear::<B, C, _>(s, step, B::leg_analysis, B::leg_synthesis)
    }

    fn leg_synthesis(c: FloatTensor<Self>, step: Step) -> FloatTensor<Self> {
        linear::<B, C, _>(c, step, B::leg_synthesis, B::leg_analysis)
    }
}
