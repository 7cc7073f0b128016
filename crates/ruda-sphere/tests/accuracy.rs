//! The serial transforms from first principles: round trips of
//! band-limited fields, single spherical harmonics written out by hand,
//! Parseval's identity, gradients as adjoints, f32, and argument errors.

mod common;

use core::f64::consts::PI;

use burn_tensor::{DType, Device, Tensor};
use common::{band_limited, dot, random, rel_err, tensor, values};
use ruda_sphere::{InverseRealSht, LatitudeGrid, Latitudes, RealSht, ShtSpec, SphereError};

/// Grids with even and odd longitudes, with and without the Nyquist order.
fn specs() -> Vec<ShtSpec> {
    vec![
        ShtSpec::new(17, 32, LatitudeGrid::Equiangular).unwrap(), // l = m = 9
        ShtSpec::new(12, 21, LatitudeGrid::Equiangular).unwrap(), // l = m = 6, odd nlon
        ShtSpec::new(12, 24, LatitudeGrid::LegendreGauss).unwrap(), // l = m = 12
        ShtSpec::new(10, 18, LatitudeGrid::LegendreGauss).unwrap(), // l = m = 10 ∋ Nyquist 9
    ]
}

#[test]
fn round_trip_is_exact_for_band_limited_fields() {
    let device = Device::flex();
    for spec in specs() {
        let (sht, isht) = (RealSht::new(spec), InverseRealSht::new(spec));
        let (l, m) = (spec.lmax(), spec.mmax());
        let c0 = band_limited(6, l, m, spec.nlon(), 7);
        let c = tensor(c0.clone(), [2, 3, l, m, 2], &device);
        let x: Tensor<4> = isht.forward(c).unwrap();
        assert_eq!(x.dims(), [2, 3, spec.nlat(), spec.nlon()]);
        let x0 = values(x.clone());
        let c1: Tensor<5> = sht.forward(x).unwrap();
        let c1v = values(c1.clone());
        let err = rel_err(&c1v, &c0);
        assert!(err <= 1e-12, "{spec:?}: sht(isht(c)) off by {err:e}");
        let x1: Tensor<4> = isht.forward(c1).unwrap();
        let err = rel_err(&values(x1), &x0);
        assert!(err <= 1e-12, "{spec:?}: isht(sht(x)) off by {err:e}");
        // Leading dimensions are independent fields.
        let one: Tensor<2> = isht
            .forward(tensor(c0[..l * m * 2].to_vec(), [l, m, 2], &device))
            .unwrap();
        assert_eq!(
            values(one),
            x0[..spec.nlat() * spec.nlon()].to_vec(),
            "the first field alone"
        );
    }
}

/// `sqrt((2l+1)/4π · (l−m)!/(l+m)!) P_l^m(cos θ)` with the Condon–Shortley
/// phase, written out for low degrees (independent of `legendre_table`).
fn ylm_theta(l: usize, m: usize, theta: f64) -> f64 {
    let (x, s) = (theta.cos(), theta.sin());
    let fact = |n: usize| (1..=n).map(|k| k as f64).product::<f64>();
    let norm = ((2 * l + 1) as f64 / (4.0 * PI) * fact(l - m) / fact(l + m)).sqrt();
    let p = match (l, m) {
        (0, 0) => 1.0,
        (1, 0) => x,
        (1, 1) => -s,
        (2, 0) => 0.5 * (3.0 * x * x - 1.0),
        (2, 1) => -3.0 * x * s,
        (2, 2) => 3.0 * s * s,
        (3, 0) => 0.5 * (5.0 * x * x * x - 3.0 * x),
        (3, 1) => -1.5 * (5.0 * x * x - 1.0) * s,
        (3, 2) => 15.0 * x * s * s,
        (3, 3) => -15.0 * s * s * s,
        (4, 4) => 105.0 * s.powi(4),
        (4, 3) => -105.0 * x * s.powi(3),
        _ => unreachable!("no closed form for ({l}, {m})"),
    };
    norm * p
}

#[test]
fn single_harmonics_map_to_unit_coefficients_and_back() {
    let device = Device::flex();
    let cases = [
        (0, 0),
        (1, 0),
        (1, 1),
        (2, 1),
        (2, 2),
        (3, 0),
        (3, 1),
        (3, 3),
        (4, 3),
        (4, 4),
    ];
    for spec in [
        ShtSpec::new(9, 16, LatitudeGrid::Equiangular).unwrap(), // l = m = 5
        ShtSpec::new(6, 11, LatitudeGrid::LegendreGauss).unwrap(), // l = m = 6
    ] {
        let (sht, isht) = (RealSht::new(spec), InverseRealSht::new(spec));
        let (nlat, nlon, lm, mm) = (spec.nlat(), spec.nlon(), spec.lmax(), spec.mmax());
        let q = Latitudes::new(nlat, spec.grid()).unwrap();
        for (l, m) in cases {
            // 2 Re Y_l^m ↦ c_lm = 1; −2 Im Y_l^m ↦ c_lm = i (m > 0);
            // Y_l^0 ↦ c_l0 = 1.
            for imaginary in [false, true] {
                if imaginary && m == 0 {
                    continue;
                }
                let mut field = Vec::with_capacity(nlat * nlon);
                for &theta in &q.colatitudes {
                    for j in 0..nlon {
                        let phi = 2.0 * PI * j as f64 / nlon as f64;
                        let y = ylm_theta(l, m, theta);
                        field.push(match (m, imaginary) {
                            (0, _) => y,
                            (_, false) => 2.0 * y * (m as f64 * phi).cos(),
                            (_, true) => -2.0 * y * (m as f64 * phi).sin(),
                        });
                    }
                }
                let mut want = vec![0.0; lm * mm * 2];
                want[(l * mm + m) * 2 + usize::from(imaginary)] = 1.0;
                let c: Tensor<3> = sht
                    .forward(tensor(field.clone(), [nlat, nlon], &device))
                    .unwrap();
                let got = values(c);
                let err = got
                    .iter()
                    .zip(&want)
                    .fold(0.0f64, |e, (a, b)| e.max((a - b).abs()));
                assert!(
                    err < 1e-13,
                    "{spec:?} Y_{l}^{m} im={imaginary}: off by {err:e}"
                );
                let f: Tensor<2> = isht.forward(tensor(want, [lm, mm, 2], &device)).unwrap();
                let err = rel_err(&values(f), &field);
                assert!(err < 1e-13, "{spec:?} inverse of Y_{l}^{m}: off by {err:e}");
            }
        }
    }
}

#[test]
fn parseval_energy_of_the_field_equals_that_of_its_coefficients() {
    let device = Device::flex();
    for spec in [
        ShtSpec::new(17, 32, LatitudeGrid::Equiangular).unwrap(),
        ShtSpec::new(12, 21, LatitudeGrid::Equiangular).unwrap(),
        ShtSpec::new(12, 25, LatitudeGrid::LegendreGauss).unwrap(),
    ] {
        let (nlat, nlon, l, m) = (spec.nlat(), spec.nlon(), spec.lmax(), spec.mmax());
        assert!(2 * (m - 1) < nlon, "no Nyquist order in this test");
        let q = Latitudes::new(nlat, spec.grid()).unwrap();
        let c = band_limited(1, l, m, nlon, 3);
        let x: Tensor<2> = InverseRealSht::new(spec)
            .forward(tensor(c, [l, m, 2], &device))
            .unwrap();
        let xv = values(x.clone());
        // ∫ f² dΩ by the grid's quadrature.
        let mut field_energy = 0.0;
        for k in 0..nlat {
            let row: f64 = xv[k * nlon..(k + 1) * nlon].iter().map(|v| v * v).sum();
            field_energy += q.weights[k] * row * 2.0 * PI / nlon as f64;
        }
        // Σ |c_l0|² + 2 Σ_{m>0} |c_lm|² from the forward transform.
        let c: Tensor<3> = RealSht::new(spec).forward(x).unwrap();
        let cv = values(c);
        let mut coeff_energy = 0.0;
        for li in 0..l {
            for mi in 0..m {
                let i = (li * m + mi) * 2;
                let e = cv[i] * cv[i] + cv[i + 1] * cv[i + 1];
                coeff_energy += if mi == 0 { e } else { 2.0 * e };
            }
        }
        let err = (field_energy - coeff_energy).abs() / field_energy;
        assert!(err < 1e-12, "{spec:?}: {field_energy} vs {coeff_energy}");
    }
}

#[test]
fn gradients_are_the_adjoint_transforms() {
    let device = Device::flex().autodiff();
    for spec in specs() {
        let (nlat, nlon, l, m) = (spec.nlat(), spec.nlon(), spec.lmax(), spec.mmax());
        let xv = random(2 * nlat * nlon, 1);
        let yv = random(2 * l * m * 2, 2);
        // <sht(x), y> = <x, sht^T y>, sht^T y by autodiff.
        let x = tensor(xv.clone(), [2, nlat, nlon], &device).require_grad();
        let y = tensor(yv.clone(), [2, l, m, 2], &device);
        let c: Tensor<4> = RealSht::new(spec).forward(x.clone()).unwrap();
        let lhs = dot(&values(c.clone()), &yv);
        let grads = (c * y).sum().backward();
        let rhs = dot(&xv, &values(x.grad(&grads).unwrap()));
        assert!(
            (lhs - rhs).abs() <= 1e-12 * lhs.abs(),
            "{spec:?}: {lhs} vs {rhs}"
        );
        // <isht(c), z> = <c, isht^T z>.
        let c = tensor(yv.clone(), [2, l, m, 2], &device).require_grad();
        let z = tensor(xv.clone(), [2, nlat, nlon], &device);
        let f: Tensor<3> = InverseRealSht::new(spec).forward(c.clone()).unwrap();
        let lhs = dot(&values(f.clone()), &xv);
        let grads = (f * z).sum().backward();
        let rhs = dot(&yv, &values(c.grad(&grads).unwrap()));
        assert!(
            (lhs - rhs).abs() <= 1e-12 * lhs.abs(),
            "{spec:?}: {lhs} vs {rhs}"
        );
    }
}

#[test]
fn f32_fields_stay_f32_and_round_trip_to_single_precision() {
    let spec = ShtSpec::new(17, 32, LatitudeGrid::Equiangular).unwrap();
    let (l, m) = (spec.lmax(), spec.mmax());
    let device = Device::flex();
    let c0 = band_limited(2, l, m, spec.nlon(), 9);
    let c = tensor(c0.clone(), [2, l, m, 2], &device).cast(DType::F32);
    let x: Tensor<3> = InverseRealSht::new(spec).forward(c).unwrap();
    assert_eq!(x.dtype(), DType::F32);
    let c1: Tensor<4> = RealSht::new(spec).forward(x).unwrap();
    assert_eq!(c1.dtype(), DType::F32);
    let err = rel_err(&values(c1), &c0);
    assert!(err < 1e-5, "f32 round trip off by {err:e}");
}

#[test]
fn wrong_shapes_ranks_and_dtypes_are_errors() {
    let spec = ShtSpec::new(9, 16, LatitudeGrid::Equiangular).unwrap();
    let (sht, isht) = (RealSht::new(spec), InverseRealSht::new(spec));
    let device = Device::flex();
    let x = Tensor::<3>::zeros([2, 9, 15], (&device, DType::F64));
    let e = sht.forward::<3, 4>(x).unwrap_err();
    assert!(
        matches!(&e, SphereError::Shape { expected, got, .. } if expected == &[9, 16] && got == &[2, 9, 15]),
        "{e}"
    );
    let x = Tensor::<3>::zeros([2, 9, 16], (&device, DType::F64));
    let e = sht.forward::<3, 3>(x).unwrap_err();
    assert!(
        matches!(
            e,
            SphereError::Rank {
                input: 3,
                expected: 4,
                requested: 3,
                ..
            }
        ),
        "{e}"
    );
    let x = Tensor::<2>::zeros([9, 16], (&device, DType::F16));
    assert!(matches!(
        sht.forward::<2, 3>(x),
        Err(SphereError::DType {
            dtype: DType::F16,
            ..
        })
    ));
    let c = Tensor::<3>::zeros([5, 5, 3], (&device, DType::F64));
    assert!(matches!(
        isht.forward::<3, 2>(c),
        Err(SphereError::Shape { .. })
    ));
    let c = Tensor::<3>::zeros([5, 5, 2], (&device, DType::F32));
    assert!(matches!(
        isht.forward::<3, 3>(c),
        Err(SphereError::Rank { .. })
    ));
    assert!(matches!(
        ShtSpec::new(1, 16, LatitudeGrid::Equiangular),
        Err(SphereError::GridTooSmall { .. })
    ));
    assert!(matches!(
        ShtSpec::with_truncation(9, 16, LatitudeGrid::Equiangular, Some(0), None),
        Err(SphereError::Truncation { .. })
    ));
}
