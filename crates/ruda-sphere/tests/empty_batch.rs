//! Empty batches: the transforms of zero fields give zero coefficients
//! (and back), on the autodiff graph (the backward pass reaches the input
//! with an empty gradient), serially and distributed; never a panic.

mod common;

use burn_tensor::{DType, Device, Tensor};
use common::tensor;
use ruda_comm::LocalWorld;
use ruda_sphere::{
    DistributedInverseRealSht, DistributedRealSht, InverseRealSht, LatitudeGrid, RealSht, ShtSpec,
    SphereError,
};
use ruda_tensor::ProcessGrid;

/// Autodiff devices where the transforms' steps are the host kernels
/// (Flex) and where they are tensor operations (Flex under gradient
/// checkpointing, the path of every other backend).
fn tracked_devices() -> [Device; 2] {
    [
        Device::flex().autodiff(),
        Device::flex().autodiff().gradient_checkpointing(),
    ]
}

fn spec() -> ShtSpec {
    ShtSpec::new(17, 32, LatitudeGrid::Equiangular).unwrap()
}

#[test]
fn the_serial_transforms_of_an_empty_batch_are_empty() {
    let s = spec();
    let (h, w, l, m) = (s.nlat(), s.nlon(), s.lmax(), s.mmax());
    for dtype in [DType::F64, DType::F32] {
        let device = Device::flex();
        let x = Tensor::<3>::zeros([0, h, w], (&device, dtype));
        let c: Tensor<4> = RealSht::new(s).forward(x).unwrap();
        assert_eq!(c.dims(), [0, l, m, 2]);
        assert_eq!(c.dtype(), dtype);
        let y: Tensor<3> = InverseRealSht::new(s).forward(c).unwrap();
        assert_eq!(y.dims(), [0, h, w]);
        assert_eq!(y.dtype(), dtype);
        // An empty axis before others.
        let x = Tensor::<4>::zeros([3, 0, h, w], (&device, dtype));
        let c: Tensor<5> = RealSht::new(s).forward(x).unwrap();
        assert_eq!(c.dims(), [3, 0, l, m, 2]);
    }
}

#[test]
fn the_serial_transforms_of_an_empty_batch_are_tracked_with_an_empty_gradient() {
    let s = spec();
    let (h, w, l, m) = (s.nlat(), s.nlon(), s.lmax(), s.mmax());
    for device in tracked_devices() {
        let x = tensor(Vec::new(), [0, h, w], &device).require_grad();
        let c: Tensor<4> = RealSht::new(s).forward(x.clone()).unwrap();
        assert_eq!(c.dims(), [0, l, m, 2], "{device:?}");
        let grads = c.sum().backward();
        let g = x.grad(&grads).expect("x has a gradient");
        assert_eq!(g.dims(), [0, h, w], "{device:?}");

        let c = tensor(Vec::new(), [0, l, m, 2], &device).require_grad();
        let y: Tensor<3> = InverseRealSht::new(s).forward(c.clone()).unwrap();
        assert_eq!(y.dims(), [0, h, w], "{device:?}");
        let grads = y.sum().backward();
        let g = c.grad(&grads).expect("c has a gradient");
        assert_eq!(g.dims(), [0, l, m, 2], "{device:?}");
    }
}

#[test]
fn the_distributed_transforms_of_an_empty_batch_are_empty_and_tracked() {
    let s = spec();
    for ((p, a), device) in [(1, 1), (2, 1), (1, 2), (2, 2), (1, 3)]
        .into_iter()
        .flat_map(|g| tracked_devices().map(|d| (g, d)))
    {
        LocalWorld::new(p * a)
            .run(|comm| {
                let grid = ProcessGrid::new(comm, p, a)?;
                let sht = DistributedRealSht::new(&grid, s)?;
                let isht = DistributedInverseRealSht::new(&grid, s)?;
                let lay = sht.layout().clone();
                let (lat, lon) = (lay.lat_range().len(), lay.lon_range().len());
                let (ls, ms) = (lay.l_range().len(), lay.orders().len());
                let x = tensor(Vec::new(), [0, lat, lon], &device).require_grad();
                let c: Tensor<4> = sht.forward(x.clone())?;
                assert_eq!(c.dims(), [0, ls, ms, 2], "{p}x{a}");
                let grads = c.sum().backward();
                assert_eq!(
                    x.grad(&grads).expect("x has a gradient").dims(),
                    [0, lat, lon]
                );

                let c = tensor(Vec::new(), [0, ls, ms, 2], &device).require_grad();
                let y: Tensor<3> = isht.forward(c.clone())?;
                assert_eq!(y.dims(), [0, lat, lon], "{p}x{a}");
                let grads = y.sum().backward();
                assert_eq!(
                    c.grad(&grads).expect("c has a gradient").dims(),
                    [0, ls, ms, 2]
                );
                Ok::<_, SphereError>(())
            })
            .unwrap_or_else(|e| panic!("{p}x{a} on {device:?}: {e}"));
    }
}
