//! The serial vector transforms from first principles: round trips of
//! band-limited fields, vector harmonics of degree 1 written out by hand,
//! gradients as adjoints, f32, empty batches (serial and distributed) and
//! argument errors.

mod common;

use core::f64::consts::PI;

use burn_tensor::{DType, Device, Tensor};
use common::{band_limited, dot, random, rel_err, tensor, values};
use ruda_comm::LocalWorld;
use ruda_sphere::{
    DistributedInverseRealVectorSht, DistributedRealVectorSht, InverseRealVectorSht, LatitudeGrid,
    Latitudes, RealVectorSht, ShtSpec, SphereError,
};
use ruda_tensor::ProcessGrid;

/// Grids with even and odd latitudes and longitudes, poles and none, with
/// and without the Nyquist order.
fn specs() -> Vec<ShtSpec> {
    vec![
        ShtSpec::new(17, 32, LatitudeGrid::Equiangular).unwrap(), // l = m = 9
        ShtSpec::new(12, 21, LatitudeGrid::Equiangular).unwrap(), // l = m = 6, odd nlon
        ShtSpec::new(12, 24, LatitudeGrid::LegendreGauss).unwrap(), // l = m = 12
        ShtSpec::new(10, 18, LatitudeGrid::LegendreGauss).unwrap(), // l = m = 10 ∋ Nyquist 9
    ]
}

/// Band-limited spheroidal and toroidal coefficients of `fields` vector
/// fields, `[fields, 2, lmax, mmax, 2]`: as for a scalar field, zero at
/// degree 0 (no vector harmonic there) and at the Nyquist order `nlon/2`
/// (where a real spheroidal coefficient makes an imaginary longitude
/// spectrum `i D1 s`, which a real field cannot carry: torch-harmonics'
/// inverse drops it too).
fn vector_band_limited(fields: usize, spec: ShtSpec, seed: u64) -> Vec<f64> {
    let (l, m) = (spec.lmax(), spec.mmax());
    let mut c = band_limited(2 * fields, l, m, spec.nlon(), seed);
    for field in c.chunks_exact_mut(l * m * 2) {
        field[..m * 2].fill(0.0);
        if spec.nlon().is_multiple_of(2) && spec.nlon() / 2 < m {
            let nyquist = spec.nlon() / 2;
            for row in field.chunks_exact_mut(m * 2) {
                row[nyquist * 2..nyquist * 2 + 2].fill(0.0);
            }
        }
    }
    c
}

#[test]
fn round_trip_is_exact_for_band_limited_fields() {
    let device = Device::flex();
    for spec in specs() {
        let (vsht, ivsht) = (RealVectorSht::new(spec), InverseRealVectorSht::new(spec));
        let (l, m) = (spec.lmax(), spec.mmax());
        let c0 = vector_band_limited(3, spec, 7);
        let c = tensor(c0.clone(), [3, 2, l, m, 2], &device);
        let x: Tensor<4> = ivsht.forward(c).unwrap();
        assert_eq!(x.dims(), [3, 2, spec.nlat(), spec.nlon()]);
        let x0 = values(x.clone());
        let c1: Tensor<5> = vsht.forward(x).unwrap();
        let c1v = values(c1.clone());
        let err = rel_err(&c1v, &c0);
        assert!(err <= 1e-12, "{spec:?}: vsht(ivsht(c)) off by {err:e}");
        let x1: Tensor<4> = ivsht.forward(c1).unwrap();
        let err = rel_err(&values(x1), &x0);
        assert!(err <= 1e-12, "{spec:?}: ivsht(vsht(x)) off by {err:e}");
        // Leading dimensions are independent fields.
        let one: Tensor<3> = ivsht
            .forward(tensor(c0[..2 * l * m * 2].to_vec(), [2, l, m, 2], &device))
            .unwrap();
        assert_eq!(
            values(one),
            x0[..2 * spec.nlat() * spec.nlon()].to_vec(),
            "the first field alone"
        );
    }
}

/// The degree-1 vector harmonics, by hand: with `Y_1^0 = sqrt(3/4π) cos θ`
/// and `Y_1^1 = −sqrt(3/8π) sin θ e^{iφ}`, a unit spheroidal coefficient is
/// the field `(∂_θ Y, (1/sin θ) ∂_φ Y)` (the gradient) and a toroidal one
/// `((1/sin θ) ∂_φ Y, −∂_θ Y)` (torch-harmonics' sign), real parts of
/// `c_0 + 2 Σ_{m>0} c_m e^{imφ}`.
#[test]
fn degree_one_vector_harmonics_are_the_gradients_and_curls_of_y1m() {
    let device = Device::flex();
    for spec in [
        ShtSpec::new(9, 16, LatitudeGrid::Equiangular).unwrap(),
        ShtSpec::new(6, 12, LatitudeGrid::LegendreGauss).unwrap(),
    ] {
        let (nlat, nlon, l, m) = (spec.nlat(), spec.nlon(), spec.lmax(), spec.mmax());
        let q = Latitudes::new(nlat, spec.grid()).unwrap();
        let (a0, a1) = ((3.0 / (4.0 * PI)).sqrt(), (3.0 / (8.0 * PI)).sqrt());
        // (component, order): the expected (v_θ, v_φ) at (θ, φ).
        type Field = fn(f64, f64, f64, f64) -> (f64, f64);
        let cases: [(usize, usize, Field); 4] = [
            (0, 0, |t, _, a0, _| (-a0 * t.sin(), 0.0)),
            (1, 0, |t, _, a0, _| (0.0, a0 * t.sin())),
            (0, 1, |t, p, _, a1| {
                (-2.0 * a1 * t.cos() * p.cos(), 2.0 * a1 * p.sin())
            }),
            (1, 1, |t, p, _, a1| {
                (2.0 * a1 * p.sin(), 2.0 * a1 * t.cos() * p.cos())
            }),
        ];
        for (comp, order, want) in cases {
            let mut c = vec![0.0; 2 * l * m * 2];
            c[((comp * l + 1) * m + order) * 2] = 1.0;
            let f: Tensor<3> = InverseRealVectorSht::new(spec)
                .forward(tensor(c.clone(), [2, l, m, 2], &device))
                .unwrap();
            let f = values(f);
            for k in 0..nlat {
                for j in 0..nlon {
                    let phi = 2.0 * PI * j as f64 / nlon as f64;
                    let (vt, vp) = want(q.colatitudes[k], phi, a0, a1);
                    let (gt, gp) = (f[k * nlon + j], f[(nlat + k) * nlon + j]);
                    assert!(
                        (gt - vt).abs() < 1e-13 && (gp - vp).abs() < 1e-13,
                        "{spec:?} comp {comp} m {order} at ({k}, {j}): ({gt}, {gp}) vs ({vt}, {vp})"
                    );
                }
            }
            // And back to the unit coefficient.
            let back: Tensor<4> = RealVectorSht::new(spec)
                .forward(tensor(f, [2, nlat, nlon], &device))
                .unwrap();
            let err = rel_err(&values(back), &c);
            assert!(err < 1e-13, "{spec:?} comp {comp} m {order}: {err:e}");
        }
    }
}

#[test]
fn gradients_are_the_adjoint_transforms() {
    let device = Device::flex().autodiff();
    for spec in specs() {
        let (nlat, nlon, l, m) = (spec.nlat(), spec.nlon(), spec.lmax(), spec.mmax());
        let xv = random(3 * 2 * nlat * nlon, 1);
        let yv = random(3 * 2 * l * m * 2, 2);
        // <vsht(x), y> = <x, vsht^T y>, vsht^T y by autodiff.
        let x = tensor(xv.clone(), [3, 2, nlat, nlon], &device).require_grad();
        let y = tensor(yv.clone(), [3, 2, l, m, 2], &device);
        let c: Tensor<5> = RealVectorSht::new(spec).forward(x.clone()).unwrap();
        let lhs = dot(&values(c.clone()), &yv);
        let grads = (c * y).sum().backward();
        let rhs = dot(&xv, &values(x.grad(&grads).unwrap()));
        assert!(
            (lhs - rhs).abs() <= 1e-12 * lhs.abs(),
            "{spec:?}: {lhs} vs {rhs}"
        );
        // <ivsht(c), z> = <c, ivsht^T z>.
        let c = tensor(yv.clone(), [3, 2, l, m, 2], &device).require_grad();
        let z = tensor(xv.clone(), [3, 2, nlat, nlon], &device);
        let f: Tensor<4> = InverseRealVectorSht::new(spec).forward(c.clone()).unwrap();
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
    let c0 = vector_band_limited(2, spec, 9);
    let c = tensor(c0.clone(), [2, 2, l, m, 2], &device).cast(DType::F32);
    let x: Tensor<4> = InverseRealVectorSht::new(spec).forward(c).unwrap();
    assert_eq!(x.dtype(), DType::F32);
    let c1: Tensor<5> = RealVectorSht::new(spec).forward(x).unwrap();
    assert_eq!(c1.dtype(), DType::F32);
    let err = rel_err(&values(c1), &c0);
    assert!(err < 1e-5, "f32 round trip off by {err:e}");
}

/// f32 through the fused operations' backward and the distributed vector
/// transforms: gradients and values equal the f64 ones to single
/// precision.
#[test]
fn f32_gradients_and_distributed_values_match_f64() {
    let spec = ShtSpec::new(13, 22, LatitudeGrid::Equiangular).unwrap();
    let (nlat, nlon, l, m) = (spec.nlat(), spec.nlon(), spec.lmax(), spec.mmax());
    let xv = random(2 * nlat * nlon, 3);
    let yv = random(2 * l * m * 2, 4);
    let device = Device::flex().autodiff();
    let grad = |dtype: DType| -> (Vec<f64>, Vec<f64>) {
        let x = tensor(xv.clone(), [2, nlat, nlon], &device)
            .cast(dtype)
            .require_grad();
        let y = tensor(yv.clone(), [2, l, m, 2], &device).cast(dtype);
        let c: Tensor<4> = RealVectorSht::new(spec).forward(x.clone()).unwrap();
        let gx = values(x.grad(&(c * y.clone()).sum().backward()).unwrap());
        let c = tensor(yv.clone(), [2, l, m, 2], &device)
            .cast(dtype)
            .require_grad();
        let f: Tensor<3> = InverseRealVectorSht::new(spec).forward(c.clone()).unwrap();
        let z = tensor(xv.clone(), [2, nlat, nlon], &device).cast(dtype);
        let gc = values(c.grad(&(f * z).sum().backward()).unwrap());
        (gx, gc)
    };
    let (gx64, gc64) = grad(DType::F64);
    let (gx32, gc32) = grad(DType::F32);
    assert!(rel_err(&gx32, &gx64) < 1e-5, "{:e}", rel_err(&gx32, &gx64));
    assert!(rel_err(&gc32, &gc64) < 1e-5, "{:e}", rel_err(&gc32, &gc64));

    let want: Tensor<4> = RealVectorSht::new(spec)
        .forward(tensor(xv.clone(), [2, nlat, nlon], &Device::flex()))
        .unwrap();
    let want = values(want);
    let errs = LocalWorld::new(4)
        .run(|comm| {
            let grid = ProcessGrid::new(comm, 2, 2)?;
            let vsht = DistributedRealVectorSht::new(&grid, spec)?;
            let lay = vsht.layout().clone();
            let (lat, lon) = (lay.lat_range(), lay.lon_range());
            let mut patch = Vec::new();
            for comp in 0..2 {
                for k in lat.clone() {
                    let row = (comp * nlat + k) * nlon;
                    patch.extend_from_slice(&xv[row + lon.start..row + lon.end]);
                }
            }
            let x = tensor(patch, [2, lat.len(), lon.len()], &Device::flex()).cast(DType::F32);
            let c: Tensor<4> = vsht.forward(x)?;
            assert_eq!(c.dtype(), DType::F32);
            let got = values(c);
            let mut block = Vec::new();
            for part in 0..2 {
                for li in lay.l_range() {
                    for &mi in &lay.orders() {
                        let at = ((part * l + li) * m + mi) * 2;
                        block.extend_from_slice(&want[at..at + 2]);
                    }
                }
            }
            Ok::<_, SphereError>(rel_err(&got, &block))
        })
        .unwrap();
    for (rank, e) in errs.into_iter().enumerate() {
        assert!(e < 1e-5, "rank {rank}: f32 distributed vs f64 serial {e:e}");
    }
}

/// The smallest grids (one degree: no vector harmonic at all, so every
/// coefficient and field is zero), an odd single-longitude grid and a
/// truncation below the grid's default: values as expected, the adjoint
/// identity through autodiff, and the round trip where a field is
/// band-limited.
#[test]
fn tiny_grids_and_truncations() {
    let device = Device::flex().autodiff();
    for spec in [
        ShtSpec::new(2, 1, LatitudeGrid::Equiangular).unwrap(), // lmax = 1
        ShtSpec::new(1, 4, LatitudeGrid::LegendreGauss).unwrap(), // lmax = 1
        ShtSpec::new(3, 2, LatitudeGrid::LegendreGauss).unwrap(), // lmax = mmax = 2
        ShtSpec::with_truncation(33, 64, LatitudeGrid::Equiangular, Some(10), None).unwrap(),
    ] {
        let (nlat, nlon, l, m) = (spec.nlat(), spec.nlon(), spec.lmax(), spec.mmax());
        let xv = random(2 * nlat * nlon, 8);
        let x = tensor(xv.clone(), [2, nlat, nlon], &device).require_grad();
        let c: Tensor<4> = RealVectorSht::new(spec).forward(x.clone()).unwrap();
        assert_eq!(c.dims(), [2, l, m, 2]);
        let cv = values(c.clone());
        if l == 1 {
            assert!(cv.iter().all(|&v| v == 0.0), "{spec:?}: {cv:?}");
        }
        let yv = random(cv.len(), 9);
        let lhs = dot(&cv, &yv);
        let grads = (c * tensor(yv.clone(), [2, l, m, 2], &device))
            .sum()
            .backward();
        let rhs = dot(&xv, &values(x.grad(&grads).unwrap()));
        assert!(
            (lhs - rhs).abs() <= 1e-12 * lhs.abs().max(1e-300),
            "{spec:?}: {lhs} vs {rhs}"
        );
        let c0 = vector_band_limited(1, spec, 10);
        let f: Tensor<3> = InverseRealVectorSht::new(spec)
            .forward(tensor(c0.clone(), [2, l, m, 2], &device))
            .unwrap();
        assert_eq!(f.dims(), [2, nlat, nlon]);
        if spec.nlat() == 33 {
            let back: Tensor<4> = RealVectorSht::new(spec).forward(f).unwrap();
            let err = rel_err(&values(back), &c0);
            assert!(err < 1e-12, "{spec:?}: round trip off by {err:e}");
        }
    }
}

#[test]
fn a_missing_component_axis_and_wrong_dtypes_are_errors() {
    let spec = ShtSpec::new(9, 16, LatitudeGrid::Equiangular).unwrap();
    let (vsht, ivsht) = (RealVectorSht::new(spec), InverseRealVectorSht::new(spec));
    let device = Device::flex();
    // Three components.
    let x = Tensor::<4>::zeros([4, 3, 9, 16], (&device, DType::F64));
    let e = vsht.forward::<4, 5>(x).unwrap_err();
    assert!(
        matches!(&e, SphereError::Shape { expected, got, .. } if expected == &[2, 9, 16] && got == &[4, 3, 9, 16]),
        "{e}"
    );
    // No component axis at all.
    let x = Tensor::<2>::zeros([9, 16], (&device, DType::F64));
    let e = vsht.forward::<2, 3>(x).unwrap_err();
    assert!(
        matches!(&e, SphereError::Shape { expected, got, .. } if expected == &[2, 9, 16] && got == &[9, 16]),
        "{e}"
    );
    let c = Tensor::<4>::zeros([1, 5, 5, 2], (&device, DType::F64));
    let e = ivsht.forward::<4, 3>(c).unwrap_err();
    assert!(
        matches!(&e, SphereError::Shape { expected, got, .. } if expected == &[2, 5, 5, 2] && got == &[1, 5, 5, 2]),
        "{e}"
    );
    let x = Tensor::<3>::zeros([2, 9, 16], (&device, DType::F16));
    assert!(matches!(
        vsht.forward::<3, 4>(x),
        Err(SphereError::DType {
            dtype: DType::F16,
            ..
        })
    ));
    let c = Tensor::<4>::zeros([2, 5, 5, 2], (&device, DType::F16));
    assert!(matches!(
        ivsht.forward::<4, 3>(c),
        Err(SphereError::DType {
            dtype: DType::F16,
            ..
        })
    ));
}

#[test]
fn empty_batches_are_empty_and_tracked_serially_and_distributed() {
    let s = ShtSpec::new(17, 32, LatitudeGrid::Equiangular).unwrap();
    let (h, w, l, m) = (s.nlat(), s.nlon(), s.lmax(), s.mmax());
    let device = Device::flex().autodiff();
    let x = tensor(Vec::new(), [0, 2, h, w], &device).require_grad();
    let c: Tensor<5> = RealVectorSht::new(s).forward(x.clone()).unwrap();
    assert_eq!(c.dims(), [0, 2, l, m, 2]);
    let grads = c.sum().backward();
    assert_eq!(
        x.grad(&grads).expect("x has a gradient").dims(),
        [0, 2, h, w]
    );
    let c = tensor(Vec::new(), [0, 2, l, m, 2], &device).require_grad();
    let y: Tensor<4> = InverseRealVectorSht::new(s).forward(c.clone()).unwrap();
    assert_eq!(y.dims(), [0, 2, h, w]);
    let grads = y.sum().backward();
    assert_eq!(
        c.grad(&grads).expect("c has a gradient").dims(),
        [0, 2, l, m, 2]
    );

    for (p, a) in [(1, 1), (2, 1), (1, 2), (2, 2)] {
        LocalWorld::new(p * a)
            .run(|comm| {
                let grid = ProcessGrid::new(comm, p, a)?;
                let vsht = DistributedRealVectorSht::new(&grid, s)?;
                let ivsht = DistributedInverseRealVectorSht::new(&grid, s)?;
                let lay = vsht.layout().clone();
                let (lat, lon) = (lay.lat_range().len(), lay.lon_range().len());
                let (ls, ms) = (lay.l_range().len(), lay.orders().len());
                let device = Device::flex().autodiff();
                let x = tensor(Vec::new(), [0, 2, lat, lon], &device).require_grad();
                let c: Tensor<5> = vsht.forward(x.clone())?;
                assert_eq!(c.dims(), [0, 2, ls, ms, 2], "{p}x{a}");
                let grads = c.sum().backward();
                assert_eq!(
                    x.grad(&grads).expect("x has a gradient").dims(),
                    [0, 2, lat, lon]
                );
                let c = tensor(Vec::new(), [0, 2, ls, ms, 2], &device).require_grad();
                let y: Tensor<4> = ivsht.forward(c.clone())?;
                assert_eq!(y.dims(), [0, 2, lat, lon], "{p}x{a}");
                let grads = y.sum().backward();
                assert_eq!(
                    c.grad(&grads).expect("c has a gradient").dims(),
                    [0, 2, ls, ms, 2]
                );
                Ok::<_, SphereError>(())
            })
            .unwrap_or_else(|e| panic!("{p}x{a}: {e}"));
    }
}
