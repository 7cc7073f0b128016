//! A transform used again gives what a fresh one gives, bit for bit: the
//! blocks a call leaves in the transform's pool (longer than the next
//! call needs, holding its values) never leak into a later result, in
//! either direction, scalar and vector, f64 and f32, forward and through
//! the gradient.

mod common;

use burn_tensor::{DType, Device, Tensor, TensorData};
use common::{random, values};
use ruda_sphere::{
    InverseRealSht, InverseRealVectorSht, LatitudeGrid, RealSht, RealVectorSht, ShtSpec,
};

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

#[test]
fn gradients_through_a_transform_used_again_equal_a_fresh_ones() {
    let spec = ShtSpec::new(13, 24, LatitudeGrid::Equiangular).unwrap();
    let device = Device::flex().autodiff();
    let (vsht, ivsht) = (RealVectorSht::new(spec), InverseRealVectorSht::new(spec));
    // The gradient of sum(w · ivsht(vsht(x))) with respect to x: each
    // backward runs the other direction on the same transforms' pools.
    let grad = |vsht: &RealVectorSht, ivsht: &InverseRealVectorSht, b: usize, seed: u64| {
        let shape = [b, 2, spec.nlat(), spec.nlon()];
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
        let c: Tensor<5> = vsht.forward(x.clone()).unwrap();
        let y: Tensor<4> = ivsht.forward(c).unwrap();
        let grads = (y * w).sum().backward();
        bits(values(x.grad(&grads).expect("a gradient")))
    };
    for (i, &b) in BATCHES.iter().enumerate() {
        let fresh = grad(
            &RealVectorSht::new(spec),
            &InverseRealVectorSht::new(spec),
            b,
            i as u64,
        );
        assert_eq!(
            grad(&vsht, &ivsht, b, i as u64),
            fresh,
            "batch {b} (call {i})"
        );
    }
}
