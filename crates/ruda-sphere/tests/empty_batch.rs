//! Empty batches: the transforms of zero fields give zero coefficients
//! (and back), on the autodiff graph (the backward pass, through a binary
//! operation on the result, reaches the input with an empty gradient),
//! scalar and vector, serially and distributed (host-staged and
//! device-resident), on the host kernels and the tensor operations; never
//! a panic.

mod common;

use burn_tensor::{DType, Device, Tensor};
use common::tensor;
use ruda_comm::LocalWorld;
use ruda_sphere::{
    DistributedInverseRealSht, DistributedInverseRealVectorSht, DistributedRealSht,
    DistributedRealVectorSht, InverseRealSht, InverseRealVectorSht, LatitudeGrid, LatitudeSplit,
    RealSht, RealVectorSht, ShtSpec, SphereError,
};
use ruda_tensor::{DeviceWorld, Group, ProcessGrid};

/// The paths to check, as (autodiff device, tensor operations): the host
/// kernels on Flex with and without gradient checkpointing, and the tensor
/// operations of every other backend (here on Flex).
fn paths() -> [(Device, bool); 3] {
    [
        (Device::flex().autodiff(), false),
        (Device::flex().autodiff().gradient_checkpointing(), false),
        (Device::flex().autodiff(), true),
    ]
}

/// `f` on the path `ops` says.
fn on_path<R>(ops: bool, f: impl FnOnce() -> R) -> R {
    if ops {
        ruda_sphere::testing::with_tensor_ops(f)
    } else {
        f()
    }
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

/// `y·y` summed and differentiated: a binary operation on the result (an
/// empty tensor a collective handed out must survive one), then the
/// gradient of `x`, which must exist and have `x`'s shape.
fn backward_through<const D: usize, const E: usize>(x: &Tensor<D>, y: Tensor<E>, what: &str) {
    let grads = (y.clone() * y).sum().backward();
    let g = x
        .grad(&grads)
        .unwrap_or_else(|| panic!("{what}: no gradient"));
    assert_eq!(g.dims(), x.dims(), "{what}: gradient shape");
}

#[test]
fn the_serial_transforms_of_an_empty_batch_are_tracked_with_an_empty_gradient() {
    let s = spec();
    let (h, w, l, m) = (s.nlat(), s.nlon(), s.lmax(), s.mmax());
    for (device, ops) in paths() {
        let what = format!("{device:?}, tensor operations {ops}");
        on_path(ops, || {
            let x = tensor(Vec::new(), [0, h, w], &device).require_grad();
            let c: Tensor<4> = RealSht::new(s).forward(x.clone()).unwrap();
            assert_eq!(c.dims(), [0, l, m, 2], "{what}");
            backward_through(&x, c, &what);
            let c = tensor(Vec::new(), [0, l, m, 2], &device).require_grad();
            let y: Tensor<3> = InverseRealSht::new(s).forward(c.clone()).unwrap();
            assert_eq!(y.dims(), [0, h, w], "{what}");
            backward_through(&c, y, &what);

            let x = tensor(Vec::new(), [0, 2, h, w], &device).require_grad();
            let c: Tensor<5> = RealVectorSht::new(s).forward(x.clone()).unwrap();
            assert_eq!(c.dims(), [0, 2, l, m, 2], "vector, {what}");
            backward_through(&x, c, &what);
            let c = tensor(Vec::new(), [0, 2, l, m, 2], &device).require_grad();
            let y: Tensor<4> = InverseRealVectorSht::new(s).forward(c.clone()).unwrap();
            assert_eq!(y.dims(), [0, 2, h, w], "vector, {what}");
            backward_through(&c, y, &what);
        });
    }
}

/// One rank's empty batches through the four distributed transforms.
fn rank_part<G: Group>(
    grid: &ProcessGrid<G>,
    split: LatitudeSplit,
    device: &Device,
    what: &str,
) -> Result<(), SphereError> {
    let s = spec();
    let sht = DistributedRealSht::with_split(grid, s, split)?;
    let isht = DistributedInverseRealSht::with_split(grid, s, split)?;
    let vsht = DistributedRealVectorSht::with_split(grid, s, split)?;
    let ivsht = DistributedInverseRealVectorSht::with_split(grid, s, split)?;
    let lay = sht.layout().clone();
    let (lat, lon) = (lay.lat_sizes()[grid.polar_rank()], lay.lon_range().len());
    let (ls, ms) = (lay.l_range().len(), lay.orders().len());

    let x = tensor(Vec::new(), [0, lat, lon], device).require_grad();
    let c: Tensor<4> = sht.forward(x.clone())?;
    assert_eq!(c.dims(), [0, ls, ms, 2], "{what}");
    backward_through(&x, c, what);
    let c = tensor(Vec::new(), [0, ls, ms, 2], device).require_grad();
    let y: Tensor<3> = isht.forward(c.clone())?;
    assert_eq!(y.dims(), [0, lat, lon], "{what}");
    backward_through(&c, y, what);

    let x = tensor(Vec::new(), [0, 2, lat, lon], device).require_grad();
    let c: Tensor<5> = vsht.forward(x.clone())?;
    assert_eq!(c.dims(), [0, 2, ls, ms, 2], "vector, {what}");
    backward_through(&x, c, what);
    let c = tensor(Vec::new(), [0, 2, ls, ms, 2], device).require_grad();
    let y: Tensor<4> = ivsht.forward(c.clone())?;
    assert_eq!(y.dims(), [0, 2, lat, lon], "vector, {what}");
    backward_through(&c, y, what);
    Ok(())
}

#[test]
fn the_distributed_transforms_of_an_empty_batch_are_empty_and_tracked() {
    // Host-staged and device-resident ranks, on every path, latitudes
    // contiguous and in mirrored bands.
    let grids = [(1, 1), (2, 1), (1, 2), (2, 2), (1, 3)];
    let runs = grids
        .iter()
        .map(|&g| (g, LatitudeSplit::Contiguous))
        .chain([(2, 1), (3, 1), (2, 2)].map(|g| (g, LatitudeSplit::Mirrored)));
    for ((p, a), split) in runs {
        for (device, ops) in paths() {
            let what = format!("{p}x{a} {split:?} on {device:?}, tensor operations {ops}");
            LocalWorld::new(p * a)
                .run(|comm| {
                    on_path(ops, || {
                        let grid = ProcessGrid::new(comm, p, a)?;
                        rank_part(&grid, split, &device, &format!("host-staged {what}"))
                    })
                })
                .unwrap_or_else(|e| panic!("host-staged {what}: {e}"));
            DeviceWorld::shared(p * a, Device::flex())
                .run(|group, _| {
                    on_path(ops, || {
                        let grid = ProcessGrid::from_group(group, p, a)?;
                        rank_part(&grid, split, &device, &format!("device-resident {what}"))
                    })
                })
                .unwrap_or_else(|e| panic!("device-resident {what}: {e}"));
        }
    }
}
