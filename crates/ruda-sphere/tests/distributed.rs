//! The distributed transforms, scalar and vector, equal the serial ones,
//! values and gradients, on grids 1×1 to 2×4 with uneven splits of
//! latitudes, longitudes, degrees and orders; the adjoint identity summed
//! over ranks; layouts that do not fit, and ranks that disagree, are
//! errors.

mod common;

use std::ops::Range;

use burn_tensor::{Device, Tensor};
use common::{dot, random, tensor, values};
use ruda_comm::{Communicator, LocalWorld, ReduceOp};
use ruda_sphere::{
    DistributedInverseRealSht, DistributedInverseRealVectorSht, DistributedRealSht,
    DistributedRealVectorSht, InverseRealSht, InverseRealVectorSht, LatitudeGrid, RealSht,
    RealVectorSht, ShtSpec, SphereError, SphereLayout,
};
use ruda_tensor::{Group, ProcessGrid};

/// Which transforms a check runs.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    Scalar,
    Vector,
}

/// Six fields in all, as `[2, 3]` scalar fields or `[3, 2]`: three vector
/// fields of two components (the same values either way).
const B: usize = 6;

/// The leading dimensions of the test fields of `kind`.
fn lead(kind: Kind) -> [usize; 2] {
    match kind {
        Kind::Scalar => [2, 3],
        Kind::Vector => [3, 2],
    }
}

/// `x [.., nlat, nlon] → [.., lmax, mmax, 2]` serially.
fn serial_forward(kind: Kind, spec: ShtSpec, x: Tensor<4>) -> Tensor<5> {
    match kind {
        Kind::Scalar => RealSht::new(spec).forward(x),
        Kind::Vector => RealVectorSht::new(spec).forward(x),
    }
    .unwrap()
}

/// `c [.., lmax, mmax, 2] → [.., nlat, nlon]` serially.
fn serial_inverse(kind: Kind, spec: ShtSpec, c: Tensor<5>) -> Tensor<4> {
    match kind {
        Kind::Scalar => InverseRealSht::new(spec).forward(c),
        Kind::Vector => InverseRealVectorSht::new(spec).forward(c),
    }
    .unwrap()
}

/// One rank's pair of distributed transforms of either kind.
enum Pair<G> {
    Scalar(DistributedRealSht<G>, DistributedInverseRealSht<G>),
    Vector(
        DistributedRealVectorSht<G>,
        DistributedInverseRealVectorSht<G>,
    ),
}

impl<G: Group> Pair<G> {
    fn new(kind: Kind, grid: &ProcessGrid<G>, spec: ShtSpec) -> Result<Self, SphereError> {
        Ok(match kind {
            Kind::Scalar => Pair::Scalar(
                DistributedRealSht::new(grid, spec)?,
                DistributedInverseRealSht::new(grid, spec)?,
            ),
            Kind::Vector => Pair::Vector(
                DistributedRealVectorSht::new(grid, spec)?,
                DistributedInverseRealVectorSht::new(grid, spec)?,
            ),
        })
    }

    fn layouts(&self) -> (&SphereLayout, &SphereLayout) {
        match self {
            Pair::Scalar(f, i) => (f.layout(), i.layout()),
            Pair::Vector(f, i) => (f.layout(), i.layout()),
        }
    }

    fn forward(&self, x: Tensor<4>) -> Result<Tensor<5>, SphereError> {
        match self {
            Pair::Scalar(f, _) => f.forward(x),
            Pair::Vector(f, _) => f.forward(x),
        }
    }

    fn inverse(&self, c: Tensor<5>) -> Result<Tensor<4>, SphereError> {
        match self {
            Pair::Scalar(_, i) => i.forward(c),
            Pair::Vector(_, i) => i.forward(c),
        }
    }
}

/// `[B, rows, cols, inner]` row-major values restricted to the given rows
/// and columns (in the order given).
fn block(v: &[f64], dims: [usize; 4], rows: Range<usize>, cols: &[usize]) -> Vec<f64> {
    let [b, h, w, inner] = dims;
    let mut out = Vec::new();
    for bi in 0..b {
        for r in rows.clone() {
            for &c in cols {
                let start = ((bi * h + r) * w + c) * inner;
                out.extend_from_slice(&v[start..start + inner]);
            }
        }
    }
    out
}

/// Everything the serial transforms give, as plain values.
struct Serial {
    x: Vec<f64>,
    /// Weights of the forward's loss `Σ sht(x)·g`.
    g: Vec<f64>,
    sht_x: Vec<f64>,
    /// `sht^T g`, the gradient of that loss.
    grad_x: Vec<f64>,
    c: Vec<f64>,
    /// Weights of the inverse's loss `Σ isht(c)·z`.
    z: Vec<f64>,
    isht_c: Vec<f64>,
    grad_c: Vec<f64>,
}

fn serial(kind: Kind, spec: ShtSpec) -> Serial {
    let (h, w, l, m) = (spec.nlat(), spec.nlon(), spec.lmax(), spec.mmax());
    let device = Device::flex().autodiff();
    let ld = lead(kind);
    let xv = random(B * h * w, 1);
    let g = random(B * l * m * 2, 2);
    let cv = random(B * l * m * 2, 3);
    let z = random(B * h * w, 4);
    let x = tensor(xv.clone(), [ld[0], ld[1], h, w], &device).require_grad();
    let y = serial_forward(kind, spec, x.clone());
    let sht_x = values(y.clone());
    let grads = (y * tensor(g.clone(), [ld[0], ld[1], l, m, 2], &device))
        .sum()
        .backward();
    let grad_x = values(x.grad(&grads).unwrap());
    let c = tensor(cv.clone(), [ld[0], ld[1], l, m, 2], &device).require_grad();
    let f = serial_inverse(kind, spec, c.clone());
    let isht_c = values(f.clone());
    let grads = (f * tensor(z.clone(), [ld[0], ld[1], h, w], &device))
        .sum()
        .backward();
    let grad_c = values(c.grad(&grads).unwrap());
    Serial {
        x: xv,
        g,
        sht_x,
        grad_x,
        c: cv,
        z,
        isht_c,
        grad_c,
    }
}

/// One rank's findings: the largest absolute differences from the serial
/// blocks (forward value, forward gradient, inverse value, inverse
/// gradient) and its parts of the two adjoint identities.
#[derive(Debug, Default)]
struct RankReport {
    diffs: [f64; 4],
    forward_inner: (f64, f64),
    inverse_inner: (f64, f64),
}

fn max_diff(a: &[f64], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .fold(0.0f64, |m, (x, y)| m.max((x - y).abs()))
}

fn run_rank<C: Communicator + std::fmt::Debug + 'static>(
    comm: C,
    kind: Kind,
    grid_shape: (usize, usize),
    spec: ShtSpec,
    s: &Serial,
) -> Result<RankReport, SphereError> {
    let grid = ProcessGrid::new(comm, grid_shape.0, grid_shape.1)?;
    let pair = Pair::new(kind, &grid, spec)?;
    let (lay, inverse_layout) = pair.layouts();
    let lay = lay.clone();
    assert_eq!(&lay, inverse_layout);
    let ld = lead(kind);
    let (lat, lon, ls, ms) = (
        lay.lat_range(),
        lay.lon_range().collect::<Vec<_>>(),
        lay.l_range(),
        lay.orders(),
    );
    let (h, w, l, m) = (spec.nlat(), spec.nlon(), spec.lmax(), spec.mmax());
    let field = |v: &[f64]| block(v, [B, h, w, 1], lat.clone(), &lon);
    let coeffs = |v: &[f64]| block(v, [B, l, m, 2], ls.clone(), &ms);
    let device = Device::flex().autodiff();
    let (fs, cs) = (
        [ld[0], ld[1], lat.len(), lon.len()],
        [ld[0], ld[1], ls.len(), ms.len(), 2],
    );
    let mut report = RankReport::default();

    // Forward: values, gradient, adjoint identity.
    let x_local = field(&s.x);
    let x = tensor(x_local.clone(), fs, &device).require_grad();
    let y = pair.forward(x.clone())?;
    let y_local = values(y.clone());
    report.diffs[0] = max_diff(&y_local, &coeffs(&s.sht_x));
    let g_local = coeffs(&s.g);
    let grads = (y * tensor(g_local.clone(), cs, &device)).sum().backward();
    let gx = values(x.grad(&grads).expect("x reaches the loss"));
    report.diffs[1] = max_diff(&gx, &field(&s.grad_x));
    report.forward_inner = (dot(&y_local, &g_local), dot(&x_local, &gx));

    // Inverse.
    let c_local = coeffs(&s.c);
    let c = tensor(c_local.clone(), cs, &device).require_grad();
    let f = pair.inverse(c.clone())?;
    let f_local = values(f.clone());
    report.diffs[2] = max_diff(&f_local, &field(&s.isht_c));
    let z_local = field(&s.z);
    let grads = (f * tensor(z_local.clone(), fs, &device)).sum().backward();
    let gc = values(c.grad(&grads).expect("c reaches the loss"));
    report.diffs[3] = max_diff(&gc, &coeffs(&s.grad_c));
    report.inverse_inner = (dot(&f_local, &z_local), dot(&c_local, &gc));

    // The adjoint identities are sums over all ranks.
    let mut sums = [
        report.forward_inner.0,
        report.forward_inner.1,
        report.inverse_inner.0,
        report.inverse_inner.1,
    ];
    grid.world()
        .comm()
        .all_reduce(&mut sums, ReduceOp::Sum)
        .map_err(ruda_tensor::Error::from)?;
    report.forward_inner = (sums[0], sums[1]);
    report.inverse_inner = (sums[2], sums[3]);
    Ok(report)
}

fn scale(v: &[f64]) -> f64 {
    v.iter().fold(0.0f64, |m, x| m.max(x.abs()))
}

fn check(kind: Kind, spec: ShtSpec, grids: &[(usize, usize)]) {
    let s = serial(kind, spec);
    let scales = [
        scale(&s.sht_x),
        scale(&s.grad_x),
        scale(&s.isht_c),
        scale(&s.grad_c),
    ];
    for &(p, a) in grids {
        let reports = LocalWorld::new(p * a)
            .run(|comm| run_rank(comm, kind, (p, a), spec, &s))
            .unwrap_or_else(|e| panic!("{kind:?} {p}x{a} {spec:?}: {e}"));
        for (rank, r) in reports.iter().enumerate() {
            for (what, (d, sc)) in ["sht", "sht gradient", "isht", "isht gradient"]
                .iter()
                .zip(r.diffs.iter().zip(scales))
            {
                assert!(
                    d / sc <= 1e-13,
                    "{kind:?} {p}x{a} {spec:?} rank {rank}: {what} differs by {:e}",
                    d / sc
                );
            }
            let (lhs, rhs) = r.forward_inner;
            assert!(
                (lhs - rhs).abs() <= 1e-12 * lhs.abs(),
                "{kind:?} {p}x{a}: {lhs} {rhs}"
            );
            let (lhs, rhs) = r.inverse_inner;
            assert!(
                (lhs - rhs).abs() <= 1e-12 * lhs.abs(),
                "{kind:?} {p}x{a}: {lhs} {rhs}"
            );
        }
    }
}

#[test]
fn equiangular_distributed_equals_serial_on_every_grid() {
    // 13 latitudes, 22 longitudes, l = m = 7: uneven over 2, 3, 4 ranks.
    let spec = ShtSpec::new(13, 22, LatitudeGrid::Equiangular).unwrap();
    check(
        Kind::Scalar,
        spec,
        &[(1, 1), (2, 1), (1, 2), (2, 2), (3, 1), (4, 1), (2, 4)],
    );
}

#[test]
fn equiangular_distributed_vector_transforms_equal_serial_on_every_grid() {
    let spec = ShtSpec::new(13, 22, LatitudeGrid::Equiangular).unwrap();
    check(
        Kind::Vector,
        spec,
        &[(1, 1), (2, 1), (1, 2), (2, 2), (3, 1), (4, 1), (2, 4)],
    );
}

#[test]
fn legendre_gauss_distributed_equals_serial_with_the_nyquist_order() {
    // 10 latitudes, 18 longitudes, l = m = 10 (m = 9 is the Nyquist order).
    let spec = ShtSpec::new(10, 18, LatitudeGrid::LegendreGauss).unwrap();
    check(Kind::Scalar, spec, &[(1, 3), (3, 1), (2, 4)]);
    check(Kind::Vector, spec, &[(1, 3), (3, 1), (2, 4)]);
}

#[test]
fn layouts_that_do_not_fit_are_errors() {
    let spec = ShtSpec::new(7, 12, LatitudeGrid::Equiangular).unwrap(); // l = m = 4
    // More polar ranks than degrees.
    let e = SphereLayout::new(spec, (0, 5), (0, 1)).unwrap_err();
    assert!(
        matches!(
            e,
            SphereError::Split {
                axis: "polar",
                what: "degrees",
                size: 4,
                ranks: 5,
                ..
            }
        ),
        "{e}"
    );
    // A polar chunk of 3 latitudes cannot split over 4 azimuth ranks.
    let e = SphereLayout::new(spec, (1, 2), (0, 4)).unwrap_err();
    assert!(
        matches!(
            e,
            SphereError::Split {
                axis: "azimuth",
                size: 3,
                ranks: 4,
                ..
            }
        ),
        "{e}"
    );
    // On a grid, every rank reports it before communicating.
    let errs = LocalWorld::new(5)
        .run(|comm| {
            let grid = ProcessGrid::new(comm, 5, 1)?;
            match DistributedRealSht::new(&grid, spec) {
                Err(e) => Ok::<_, SphereError>(e.to_string()),
                Ok(_) => Ok(String::new()),
            }
        })
        .unwrap();
    assert!(
        errs.iter()
            .all(|e| e.contains("5 polar ranks cannot split degrees of size 4"))
    );
}

#[test]
fn ranks_passing_different_leading_dimensions_fail_on_every_rank() {
    let spec = ShtSpec::new(9, 16, LatitudeGrid::Equiangular).unwrap();
    let results = LocalWorld::new(4)
        .run(|comm| {
            let grid = ProcessGrid::new(comm, 2, 2)?;
            let sht = DistributedRealSht::new(&grid, spec)?;
            let isht = DistributedInverseRealSht::new(&grid, spec)?;
            let lead = if grid.world().comm().rank() == 3 {
                3
            } else {
                2
            };
            let (lat, lon) = (
                sht.layout().lat_range().len(),
                sht.layout().lon_range().len(),
            );
            let x = tensor(
                random(lead * lat * lon, 5),
                [lead, lat, lon],
                &Device::flex(),
            );
            let forward = sht.forward::<3, 4>(x).map(|_| ()).unwrap_err();
            let (l, m) = (sht.layout().l_range().len(), sht.layout().orders().len());
            let c = tensor(
                vec![0.0; lead * l * m * 2],
                [lead, l, m, 2],
                &Device::flex(),
            );
            let inverse = isht.forward::<4, 3>(c).map(|_| ()).unwrap_err();
            Ok::<_, SphereError>((forward, inverse))
        })
        .unwrap();
    for (rank, (f, i)) in results.iter().enumerate() {
        for e in [f, i] {
            assert!(
                matches!(e, SphereError::LeadingDims { rank: r, sizes, .. } if *r == rank && sizes == &[2, 2, 2, 3]),
                "rank {rank}: {e}"
            );
        }
    }
}
