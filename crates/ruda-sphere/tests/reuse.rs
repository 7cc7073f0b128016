//! A transform used again gives what a fresh one gives, bit for bit: the
//! blocks a call leaves in the transform's pool (longer than the next
//! call needs, holding its values) never leak into a later result, in
//! either direction, scalar and vector, f64 and f32, forward and through
//! the gradient, from two threads at once, and on the ranks of a polar
//! split (contiguous and mirrored bands, the fused degrees-first path).

mod common;

use burn_tensor::{DType, Device, Tensor, TensorData};
use common::{random, values};
use ruda_comm::LocalWorld;
use ruda_sphere::{
    DistributedInverseRealSht, DistributedInverseRealVectorSht, DistributedRealSht,
    DistributedRealVectorSht, InverseRealSht, InverseRealVectorSht, LatitudeGrid, LatitudeSplit,
    RealSht, RealVectorSht, ShtSpec, SphereError,
};
use ruda_tensor::ProcessGrid;

/// Batches in the order one transform object sees them: large, smaller,
/// empty, in between.
const BATCHES: [usize; 4] = [3, 1, 0, 2];

fn field(batch: usize, parts: usize, spec: ShtSpec, dtype: DType, seed: u64) -> Tensor<4> {
    let shape = [batch, parts, spec.nlat(), spec.nlon()];
    let v = random(shape.iter().product(), seed);
    Tensor::from_data(TensorData::new(v, shape), (&Device::flex(), dtype))
}

fn coefficients(batch: usize, parts: usize, spec: ShtSpec, dtype: DType, seed: u64) -> Tensor<5> {
    let shape = [batch, parts, spec.lmax(), spec.mmax(), 2];
    let v = random(shape.iter().product(), seed);
    Tensor::from_data(TensorData::new(v, shape), (&Device::flex(), dtype))
}

fn bits(v: Vec<f64>) -> Vec<u64> {
    v.into_iter().map(f64::to_bits).collect()
}

#[test]
fn a_transform_used_again_equals_a_fresh_one_bit_for_bit() {
    for grid in [LatitudeGrid::Equiangular, LatitudeGrid::LegendreGauss] {
        let spec = ShtSpec::new(17, 32, grid).unwrap();
        for dtype in [DType::F64, DType::F32] {
            let (sht, isht) = (RealSht::new(spec), InverseRealSht::new(spec));
            let (vsht, ivsht) = (RealVectorSht::new(spec), InverseRealVectorSht::new(spec));
            for (i, &b) in BATCHES.iter().enumerate() {
                let seed = 10 * i as u64;
                let at = format!("{grid:?} {dtype:?} batch {b} (call {i})");
                // Scalar: the fields have one part; the transforms see
                // [b, nlat, nlon] after the part axis is dropped.
                let x = field(b, 1, spec, dtype, seed).squeeze_dim::<3>(1);
                let c = coefficients(b, 1, spec, dtype, seed + 1).squeeze_dim::<4>(1);
                let fresh_c: Tensor<4> = RealSht::new(spec).forward(x.clone()).unwrap();
                let fresh_x: Tensor<3> = InverseRealSht::new(spec).forward(c.clone()).unwrap();
                let used_c: Tensor<4> = sht.forward(x).unwrap();
                let used_x: Tensor<3> = isht.forward(c).unwrap();
                assert_eq!(bits(values(used_c)), bits(values(fresh_c)), "sht {at}");
                assert_eq!(bits(values(used_x)), bits(values(fresh_x)), "isht {at}");
                // Vector: two components.
                let x = field(b, 2, spec, dtype, seed + 2);
                let c = coefficients(b, 2, spec, dtype, seed + 3);
                let fresh_c: Tensor<5> = RealVectorSht::new(spec).forward(x.clone()).unwrap();
                let fresh_x: Tensor<4> =
                    InverseRealVectorSht::new(spec).forward(c.clone()).unwrap();
                let used_c: Tensor<5> = vsht.forward(x).unwrap();
                let used_x: Tensor<4> = ivsht.forward(c).unwrap();
                assert_eq!(bits(values(used_c)), bits(values(fresh_c)), "vsht {at}");
                assert_eq!(bits(values(used_x)), bits(values(fresh_x)), "ivsht {at}");
            }
        }
    }
}

/// The gradient of `sum(w · inverse(forward(x)))` with respect to `x` for
/// fields of `parts` components (1: scalar, 2: vector): each backward runs
/// the other direction on the same transforms' pools.
fn round_trip_gradient(
    forward: &dyn Fn(Tensor<4>) -> Tensor<5>,
    inverse: &dyn Fn(Tensor<5>) -> Tensor<4>,
    shape: [usize; 4],
    seed: u64,
) -> Vec<u64> {
    let device = Device::flex().autodiff();
    let n = shape.iter().product();
    let x: Tensor<4> = Tensor::from_data(
        TensorData::new(random(n, seed), shape),
        (&device, DType::F64),
    )
    .require_grad();
    let w: Tensor<4> = Tensor::from_data(
        TensorData::new(random(n, seed + 1), shape),
        (&device, DType::F64),
    );
    let y = inverse(forward(x.clone()));
    let grads = (y * w).sum().backward();
    bits(values(x.grad(&grads).expect("a gradient")))
}

#[test]
fn gradients_through_a_transform_used_again_equal_a_fresh_ones() {
    let spec = ShtSpec::new(13, 24, LatitudeGrid::Equiangular).unwrap();
    let (sht, isht) = (RealSht::new(spec), InverseRealSht::new(spec));
    let (vsht, ivsht) = (RealVectorSht::new(spec), InverseRealVectorSht::new(spec));
    for (i, &b) in BATCHES.iter().enumerate() {
        let seed = i as u64;
        // Scalar: [b, 1, nlat, nlon] fields.
        let shape = [b, 1, spec.nlat(), spec.nlon()];
        let fresh = round_trip_gradient(
            &|x| RealSht::new(spec).forward(x).unwrap(),
            &|c| InverseRealSht::new(spec).forward(c).unwrap(),
            shape,
            seed,
        );
        let used = round_trip_gradient(
            &|x| sht.forward(x).unwrap(),
            &|c| isht.forward(c).unwrap(),
            shape,
            seed,
        );
        assert_eq!(used, fresh, "scalar batch {b} (call {i})");
        // Vector: [b, 2, nlat, nlon] fields.
        let shape = [b, 2, spec.nlat(), spec.nlon()];
        let fresh = round_trip_gradient(
            &|x| RealVectorSht::new(spec).forward(x).unwrap(),
            &|c| InverseRealVectorSht::new(spec).forward(c).unwrap(),
            shape,
            seed,
        );
        let used = round_trip_gradient(
            &|x| vsht.forward(x).unwrap(),
            &|c| ivsht.forward(c).unwrap(),
            shape,
            seed,
        );
        assert_eq!(used, fresh, "vector batch {b} (call {i})");
    }
}

#[test]
fn two_threads_calling_one_transform_at_once_get_what_a_fresh_one_gives() {
    let spec = ShtSpec::new(33, 64, LatitudeGrid::Equiangular).unwrap();
    let (vsht, ivsht) = (RealVectorSht::new(spec), InverseRealVectorSht::new(spec));
    let want = |b: usize, seed: u64| {
        let x = field(b, 2, spec, DType::F64, seed);
        let c: Tensor<5> = RealVectorSht::new(spec).forward(x).unwrap();
        let y: Tensor<4> = InverseRealVectorSht::new(spec).forward(c.clone()).unwrap();
        (bits(values(c)), bits(values(y)))
    };
    std::thread::scope(|scope| {
        let runs: Vec<_> = [(3usize, 1u64), (1, 2)]
            .into_iter()
            .map(|(b, seed)| {
                let (vsht, ivsht) = (&vsht, &ivsht);
                let want = want(b, seed);
                scope.spawn(move || {
                    for call in 0..20 {
                        let x = field(b, 2, spec, DType::F64, seed);
                        let c: Tensor<5> = vsht.forward(x).unwrap();
                        let y: Tensor<4> = ivsht.forward(c.clone()).unwrap();
                        assert_eq!(
                            (bits(values(c)), bits(values(y))),
                            want,
                            "batch {b} call {call}"
                        );
                    }
                })
            })
            .collect();
        for run in runs {
            run.join()
                .expect("a thread's calls equal a fresh transform's");
        }
    });
}

/// A rank's forward and inverse transforms of a polar split, reused over
/// batches 3, 1, 2, equal a fresh pair's results on that rank bit for bit:
/// 2 polar ranks (the fused path, its blocks from the step's pool),
/// contiguous bands (unpaired latitudes) and mirrored ones (paired),
/// scalar and vector, f64.
#[test]
fn a_rank_of_a_polar_split_used_again_equals_a_fresh_one() {
    let spec = ShtSpec::new(25, 48, LatitudeGrid::Equiangular).unwrap();
    LocalWorld::new(2)
        .run(|comm| {
            let grid = ProcessGrid::new(comm, 2, 1)?;
            let rank = grid.polar_rank();
            for split in [LatitudeSplit::Contiguous, LatitudeSplit::Mirrored] {
                let (sht, isht) = (
                    DistributedRealSht::with_split(&grid, spec, split)?,
                    DistributedInverseRealSht::with_split(&grid, spec, split)?,
                );
                let (vsht, ivsht) = (
                    DistributedRealVectorSht::with_split(&grid, spec, split)?,
                    DistributedInverseRealVectorSht::with_split(&grid, spec, split)?,
                );
                let rows = sht.layout().lat_sizes()[rank];
                for (call, b) in [3usize, 1, 2].into_iter().enumerate() {
                    let at = format!("{split:?} rank {rank} batch {b} (call {call})");
                    let seed = (100 * rank + 10 * call) as u64;
                    for parts in [1usize, 2] {
                        let shape = [b, parts, rows, spec.nlon()];
                        let v = random(shape.iter().product(), seed + parts as u64);
                        let x = Tensor::<4>::from_data(
                            TensorData::new(v, shape),
                            (&Device::flex(), DType::F64),
                        );
                        // Fresh transforms, made by both ranks alike.
                        let (fresh_c, fresh_y, used_c, used_y): (
                            Tensor<5>,
                            Tensor<4>,
                            Tensor<5>,
                            Tensor<4>,
                        ) = if parts == 1 {
                            let f = DistributedRealSht::with_split(&grid, spec, split)?;
                            let fi = DistributedInverseRealSht::with_split(&grid, spec, split)?;
                            let fresh_c: Tensor<5> = f.forward(x.clone())?;
                            let fresh_y: Tensor<4> = fi.forward(fresh_c.clone())?;
                            let used_c: Tensor<5> = sht.forward(x)?;
                            let used_y: Tensor<4> = isht.forward(fresh_c.clone())?;
                            (fresh_c, fresh_y, used_c, used_y)
                        } else {
                            let f = DistributedRealVectorSht::with_split(&grid, spec, split)?;
                            let fi =
                                DistributedInverseRealVectorSht::with_split(&grid, spec, split)?;
                            let fresh_c: Tensor<5> = f.forward(x.clone())?;
                            let fresh_y: Tensor<4> = fi.forward(fresh_c.clone())?;
                            let used_c: Tensor<5> = vsht.forward(x)?;
                            let used_y: Tensor<4> = ivsht.forward(fresh_c.clone())?;
                            (fresh_c, fresh_y, used_c, used_y)
                        };
                        assert_eq!(
                            bits(values(used_c)),
                            bits(values(fresh_c)),
                            "forward {parts} {at}"
                        );
                        assert_eq!(
                            bits(values(used_y)),
                            bits(values(fresh_y)),
                            "inverse {parts} {at}"
                        );
                    }
                }
            }
            Ok::<_, SphereError>(())
        })
        .expect("every rank's reused transforms equal fresh ones");
}
