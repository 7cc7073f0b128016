//! The distributed transforms, scalar and vector, equal the serial ones,
//! values and gradients, on grids 1×1 to 2×4 with uneven splits of
//! latitudes, longitudes, degrees and orders; the adjoint identity summed
//! over ranks; layouts that do not fit, and ranks that disagree, are
//! errors. Each check runs where the steps are the host kernels (Flex, with
//! or without gradient checkpointing) and where they are the tensor
//! operations of every other backend (on Flex through
//! `ruda_sphere::testing::with_tensor_ops`, and with feature `wgpu` on a
//! wgpu device, device-resident, in f64 and f32), against the serial host
//! kernels in f64.

mod common;

use burn_tensor::{DType, Device, Tensor, TensorData};
use common::{dot, random, tensor, values};
use ruda_comm::{Communicator, LocalWorld};
use ruda_sphere::{
    DistributedInverseRealSht, DistributedInverseRealVectorSht, DistributedRealSht,
    DistributedRealVectorSht, InverseRealSht, InverseRealVectorSht, LatitudeGrid, LatitudeSplit,
    RealSht, RealVectorSht, ShtSpec, SphereError, SphereLayout,
};
use ruda_tensor::{DeviceWorld, Group, HostCollective, ProcessGrid};

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
    fn new(
        kind: Kind,
        grid: &ProcessGrid<G>,
        spec: ShtSpec,
        split: LatitudeSplit,
    ) -> Result<Self, SphereError> {
        Ok(match kind {
            Kind::Scalar => Pair::Scalar(
                DistributedRealSht::with_split(grid, spec, split)?,
                DistributedInverseRealSht::with_split(grid, spec, split)?,
            ),
            Kind::Vector => Pair::Vector(
                DistributedRealVectorSht::with_split(grid, spec, split)?,
                DistributedInverseRealVectorSht::with_split(grid, spec, split)?,
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
fn block(v: &[f64], dims: [usize; 4], rows: &[usize], cols: &[usize]) -> Vec<f64> {
    let [b, h, w, inner] = dims;
    let mut out = Vec::new();
    for bi in 0..b {
        for &r in rows {
            for &c in cols {
                let start = ((bi * h + r) * w + c) * inner;
                out.extend_from_slice(&v[start..start + inner]);
            }
        }
    }
    out
}

/// Where a check runs its transforms.
#[derive(Clone, Debug)]
struct Setup {
    /// The device (autodiff on) the ranks' tensors live on.
    device: Device,
    dtype: DType,
    /// On Flex, the tensor operations of every other backend rather than
    /// the host kernels.
    tensor_ops: bool,
    /// Ranks over a device-resident world (tensors handed over on the
    /// device) rather than host-staged.
    resident: bool,
    /// Largest difference from the f64 host kernels, relative to the
    /// largest value.
    tol: f64,
    /// How the latitudes are dealt to the polar ranks.
    split: LatitudeSplit,
}

impl Setup {
    /// The host kernels on Flex in f64 (what the others are checked against).
    fn host() -> Setup {
        Setup {
            device: Device::flex().autodiff(),
            dtype: DType::F64,
            tensor_ops: false,
            resident: false,
            tol: 1e-13,
            split: LatitudeSplit::Contiguous,
        }
    }

    /// This setup with the latitudes dealt in mirrored polar bands.
    fn mirrored(self) -> Setup {
        Setup {
            split: LatitudeSplit::Mirrored,
            ..self
        }
    }

    /// The tensor operations of every backend other than Flex (DFT and
    /// table matmuls), here on Flex.
    fn tensor_ops(resident: bool, dtype: DType) -> Setup {
        Setup {
            device: Device::flex().autodiff(),
            dtype,
            tensor_ops: true,
            resident,
            tol: if dtype == DType::F64 { 1e-12 } else { 2e-6 },
            split: LatitudeSplit::Contiguous,
        }
    }

    /// Whether this is [`Setup::host`].
    fn is_host(&self) -> bool {
        format!("{self:?}") == format!("{:?}", Setup::host())
    }

    /// `f` on this thread with the transforms on the path `self` says.
    fn within<R>(&self, f: impl FnOnce() -> R) -> R {
        if self.tensor_ops {
            ruda_sphere::testing::with_tensor_ops(f)
        } else {
            f()
        }
    }

    /// That `t` is on this device, autodiff and checkpointing as asked
    /// (`Device`'s `==` does not compare those).
    fn holds<const D: usize>(&self, t: &Tensor<D>, what: &str) {
        assert_eq!(
            format!("{:?}", t.device()),
            format!("{:?}", self.device),
            "{what} stay on the device"
        );
    }
}

/// An f64 `values` as a tensor of `shape` on `setup`'s device and dtype.
fn on<const D: usize>(setup: &Setup, values: Vec<f64>, shape: [usize; D]) -> Tensor<D> {
    Tensor::from_data(TensorData::new(values, shape), (&setup.device, setup.dtype))
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

/// The serial transforms' values and gradients on `setup`'s device.
fn serial(kind: Kind, spec: ShtSpec, setup: &Setup) -> Serial {
    setup.within(|| serial_here(kind, spec, setup))
}

fn serial_here(kind: Kind, spec: ShtSpec, setup: &Setup) -> Serial {
    let (h, w, l, m) = (spec.nlat(), spec.nlon(), spec.lmax(), spec.mmax());
    let ld = lead(kind);
    let xv = random(B * h * w, 1);
    let g = random(B * l * m * 2, 2);
    let cv = random(B * l * m * 2, 3);
    let z = random(B * h * w, 4);
    let x = on(setup, xv.clone(), [ld[0], ld[1], h, w]).require_grad();
    let y = serial_forward(kind, spec, x.clone());
    setup.holds(&y, "the coefficients");
    let sht_x = values(y.clone());
    let grads = (y * on(setup, g.clone(), [ld[0], ld[1], l, m, 2]))
        .sum()
        .backward();
    let grad_x = values(x.grad(&grads).unwrap());
    let c = on(setup, cv.clone(), [ld[0], ld[1], l, m, 2]).require_grad();
    let f = serial_inverse(kind, spec, c.clone());
    setup.holds(&f, "the field");
    let isht_c = values(f.clone());
    let grads = (f * on(setup, z.clone(), [ld[0], ld[1], h, w]))
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

/// One rank's check; the caller runs it inside `setup.within`.
fn run_rank<G: Group>(
    world: G,
    setup: &Setup,
    kind: Kind,
    grid_shape: (usize, usize),
    spec: ShtSpec,
    s: &Serial,
) -> Result<RankReport, SphereError> {
    let grid = ProcessGrid::from_group(world, grid_shape.0, grid_shape.1)?;
    let pair = Pair::new(kind, &grid, spec, setup.split)?;
    let (lay, inverse_layout) = pair.layouts();
    let lay = lay.clone();
    assert_eq!(&lay, inverse_layout);
    let ld = lead(kind);
    let (lat, lon, ls, ms) = (
        lay.lat_bands()
            .iter()
            .cloned()
            .flatten()
            .collect::<Vec<_>>(),
        lay.lon_range().collect::<Vec<_>>(),
        lay.l_range().collect::<Vec<_>>(),
        lay.orders(),
    );
    assert_eq!(lat.len(), lay.lat_sizes()[grid.polar_rank()]);
    let (h, w, l, m) = (spec.nlat(), spec.nlon(), spec.lmax(), spec.mmax());
    let field = |v: &[f64]| block(v, [B, h, w, 1], &lat, &lon);
    let coeffs = |v: &[f64]| block(v, [B, l, m, 2], &ls, &ms);
    let (fs, cs) = (
        [ld[0], ld[1], lat.len(), lon.len()],
        [ld[0], ld[1], ls.len(), ms.len(), 2],
    );
    let mut report = RankReport::default();

    // Forward: values, gradient, adjoint identity.
    let x_local = field(&s.x);
    let x = on(setup, x_local.clone(), fs).require_grad();
    let y = pair.forward(x.clone())?;
    setup.holds(&y, "the coefficients");
    let y_local = values(y.clone());
    report.diffs[0] = max_diff(&y_local, &coeffs(&s.sht_x));
    let g_local = coeffs(&s.g);
    let grads = (y * on(setup, g_local.clone(), cs)).sum().backward();
    let gx = values(x.grad(&grads).expect("x reaches the loss"));
    report.diffs[1] = max_diff(&gx, &field(&s.grad_x));
    report.forward_inner = (dot(&y_local, &g_local), dot(&x_local, &gx));

    // Inverse.
    let c_local = coeffs(&s.c);
    let c = on(setup, c_local.clone(), cs).require_grad();
    let f = pair.inverse(c.clone())?;
    setup.holds(&f, "the field");
    let f_local = values(f.clone());
    report.diffs[2] = max_diff(&f_local, &field(&s.isht_c));
    let z_local = field(&s.z);
    let grads = (f * on(setup, z_local.clone(), fs)).sum().backward();
    let gc = values(c.grad(&grads).expect("c reaches the loss"));
    report.diffs[3] = max_diff(&gc, &coeffs(&s.grad_c));
    report.inverse_inner = (dot(&f_local, &z_local), dot(&c_local, &gc));
    Ok(report)
}

fn scale(v: &[f64]) -> f64 {
    v.iter().fold(0.0f64, |m, x| m.max(x.abs()))
}

/// The serial transforms on `setup` against the host kernels' `want`.
fn check_serial(kind: Kind, spec: ShtSpec, setup: &Setup, want: &Serial) {
    let got = serial(kind, spec, setup);
    for (what, (a, b)) in [
        ("sht", (&got.sht_x, &want.sht_x)),
        ("sht gradient", (&got.grad_x, &want.grad_x)),
        ("isht", (&got.isht_c, &want.isht_c)),
        ("isht gradient", (&got.grad_c, &want.grad_c)),
    ] {
        let d = max_diff(a, b) / scale(b);
        assert!(
            d <= setup.tol,
            "{kind:?} serial {spec:?} on {setup:?}: {what} differs by {d:e}"
        );
    }
}

/// The distributed transforms of `kind` on each of `grids`, run as `setup`
/// says, against the serial host kernels (and the serial transforms on
/// `setup` against them too).
fn check_on(kind: Kind, spec: ShtSpec, grids: &[(usize, usize)], setup: &Setup) {
    let s = serial(kind, spec, &Setup::host());
    if !setup.is_host() {
        check_serial(kind, spec, setup, &s);
    }
    let scales = [
        scale(&s.sht_x),
        scale(&s.grad_x),
        scale(&s.isht_c),
        scale(&s.grad_c),
    ];
    for &(p, a) in grids {
        let n = p * a;
        let reports = if setup.resident {
            DeviceWorld::shared(n, setup.device.clone())
                .run(|g, _| setup.within(|| run_rank(g, setup, kind, (p, a), spec, &s)))
        } else {
            LocalWorld::new(n).run(|comm| {
                setup.within(|| run_rank(HostCollective::new(comm), setup, kind, (p, a), spec, &s))
            })
        }
        .unwrap_or_else(|e| panic!("{kind:?} {p}x{a} {spec:?} on {setup:?}: {e}"));
        for (rank, r) in reports.iter().enumerate() {
            for (what, (d, sc)) in ["sht", "sht gradient", "isht", "isht gradient"]
                .iter()
                .zip(r.diffs.iter().zip(scales))
            {
                assert!(
                    d / sc <= setup.tol,
                    "{kind:?} {p}x{a} {spec:?} on {setup:?}, rank {rank}: {what} differs by {:e}",
                    d / sc
                );
            }
        }
        // The adjoint identities, summed over the ranks.
        let sum = |f: fn(&RankReport) -> f64| reports.iter().map(f).sum::<f64>();
        let tol = if setup.dtype == DType::F64 {
            1e-12
        } else {
            1e-4
        };
        for (lhs, rhs) in [
            (sum(|r| r.forward_inner.0), sum(|r| r.forward_inner.1)),
            (sum(|r| r.inverse_inner.0), sum(|r| r.inverse_inner.1)),
        ] {
            assert!(
                (lhs - rhs).abs() <= tol * lhs.abs(),
                "{kind:?} {p}x{a} on {setup:?}: adjoint identity {lhs} vs {rhs}"
            );
        }
    }
}

fn check(kind: Kind, spec: ShtSpec, grids: &[(usize, usize)]) {
    check_on(kind, spec, grids, &Setup::host());
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
fn tensor_operations_equal_the_host_kernels_serial_and_distributed() {
    // The path of every backend other than Flex (batched matmuls against
    // tables, DFT matmuls), here on Flex: host-staged and device-resident
    // ranks, both grids, uneven splits, the Nyquist order, f64 and f32.
    let ea = ShtSpec::new(13, 22, LatitudeGrid::Equiangular).unwrap();
    let lg = ShtSpec::new(10, 18, LatitudeGrid::LegendreGauss).unwrap();
    for kind in [Kind::Scalar, Kind::Vector] {
        let grids = [(1, 1), (2, 2), (3, 1), (2, 4)];
        check_on(kind, ea, &grids, &Setup::tensor_ops(false, DType::F64));
        check_on(
            kind,
            lg,
            &[(1, 3), (2, 2)],
            &Setup::tensor_ops(true, DType::F64),
        );
        check_on(kind, ea, &[(2, 2)], &Setup::tensor_ops(true, DType::F32));
    }
}

#[test]
fn gradient_checkpointing_on_flex_runs_the_host_kernels() {
    // The same kernels as without checkpointing: the same bits, serially;
    // and distributed within the usual tolerance.
    let spec = ShtSpec::new(13, 22, LatitudeGrid::Equiangular).unwrap();
    let setup = Setup {
        device: Device::flex().autodiff().gradient_checkpointing(),
        ..Setup::host()
    };
    for kind in [Kind::Scalar, Kind::Vector] {
        let (got, want) = (
            serial(kind, spec, &setup),
            serial(kind, spec, &Setup::host()),
        );
        assert_eq!(got.sht_x, want.sht_x, "{kind:?}");
        assert_eq!(got.grad_x, want.grad_x, "{kind:?}");
        assert_eq!(got.isht_c, want.isht_c, "{kind:?}");
        assert_eq!(got.grad_c, want.grad_c, "{kind:?}");
        check_on(kind, spec, &[(2, 2), (2, 1)], &setup);
        check_on(kind, spec, &[(2, 1)], &setup.clone().mirrored());
    }
}

/// On wgpu (Mesa's lavapipe in CI): the transforms stay on the device,
/// serial and over a device-resident world, against the f64 host kernels:
/// in f64 where the device has it (to 1e-12), and in f32 (to 2e-6).
#[cfg(feature = "wgpu")]
#[test]
fn on_wgpu_serial_and_device_resident_equal_the_host_kernels() {
    // (`.ci/run` exports `XDG_RUNTIME_DIR`, which wgpu's Vulkan wants.)
    let device = Device::wgpu(burn_tensor::DeviceKind::Cpu).autodiff();
    let ea = ShtSpec::new(13, 22, LatitudeGrid::Equiangular).unwrap();
    let mut runs = vec![(DType::F32, 2e-6, vec![(2, 2)])];
    if device.supports_dtype(DType::F64) {
        runs.push((DType::F64, 1e-12, vec![(1, 1), (2, 2)]));
    }
    for (dtype, tol, grids) in runs {
        let setup = Setup {
            device: device.clone(),
            dtype,
            tensor_ops: false,
            resident: true,
            tol,
            split: LatitudeSplit::Contiguous,
        };
        for kind in [Kind::Scalar, Kind::Vector] {
            check_on(kind, ea, &grids, &setup);
        }
    }
}

#[test]
fn mirrored_polar_bands_equal_serial_on_every_grid() {
    // An odd count of latitudes (the equator on the last polar rank) and
    // an even one; one pair per rank (5x1 of 10 latitudes); polar splits
    // alone (the fused path) and with azimuth ranks (the transposes); the
    // host kernels and the tensor operations, f64 and f32.
    let ea = ShtSpec::new(13, 22, LatitudeGrid::Equiangular).unwrap();
    let lg = ShtSpec::new(10, 18, LatitudeGrid::LegendreGauss).unwrap();
    for kind in [Kind::Scalar, Kind::Vector] {
        let grids = [(1, 1), (2, 1), (3, 1), (4, 1), (2, 2), (2, 4), (3, 2)];
        check_on(kind, ea, &grids, &Setup::host().mirrored());
        check_on(
            kind,
            lg,
            &[(2, 1), (3, 1), (5, 1), (2, 4)],
            &Setup::host().mirrored(),
        );
        check_on(
            kind,
            ea,
            &[(2, 1), (3, 2)],
            &Setup::tensor_ops(false, DType::F64).mirrored(),
        );
        check_on(
            kind,
            lg,
            &[(2, 2)],
            &Setup::tensor_ops(true, DType::F32).mirrored(),
        );
        // The host kernels in f32 (a polar split: the fused path).
        let f32_host = Setup {
            dtype: DType::F32,
            tol: 2e-6,
            ..Setup::host().mirrored()
        };
        check_on(kind, ea, &[(2, 1), (3, 1), (2, 2)], &f32_host);
        // Three latitudes: a pole pair on one rank, the equator alone on
        // the other.
        let tiny = ShtSpec::new(3, 8, LatitudeGrid::Equiangular).unwrap();
        check_on(kind, tiny, &[(2, 1)], &Setup::host().mirrored());
    }
}

#[test]
fn mirrored_bands_deal_every_latitude_once_in_pairs() {
    // Every grid from 2 to 40 latitudes over 1 to 8 polar ranks: the ranks'
    // bands cover the latitudes once, each rank's are ascending runs that
    // do not touch and mirror themselves, each rank holds at least one
    // pair (or the equator), and too many ranks is an error naming the
    // walked count. (That the cuts even out the work is a unit test of
    // `layout.rs`.)
    for nlat in 2..=40 {
        // Longitudes enough for lmax = ceil(nlat / 2): the latitudes are
        // what runs out first.
        let spec = ShtSpec::new(nlat, 2 * nlat, LatitudeGrid::Equiangular).unwrap();
        let half = nlat.div_ceil(2);
        assert_eq!(spec.lmax(), half);
        for p in 1..=8 {
            let layouts: Result<Vec<SphereLayout>, _> = (0..p)
                .map(|r| SphereLayout::with_split(spec, (r, p), (0, 1), LatitudeSplit::Mirrored))
                .collect();
            if p > half {
                let e = layouts.unwrap_err();
                assert!(
                    matches!(
                        e,
                        SphereError::Split { axis: "polar", size, ranks, .. } if size == half && ranks == p
                    ),
                    "{nlat} latitudes over {p}: {e}"
                );
                continue;
            }
            let layouts = layouts.unwrap();
            let mut seen = vec![0usize; nlat];
            let mut walked = Vec::new();
            for (r, l) in layouts.iter().enumerate() {
                assert_eq!(l.split(), LatitudeSplit::Mirrored);
                let bands = l.lat_bands();
                assert!(
                    !bands.is_empty() && bands.len() <= 2,
                    "{nlat}/{p} rank {r}: {bands:?}"
                );
                if let [a, b] = bands {
                    assert!(
                        a.end < b.start,
                        "{nlat}/{p} rank {r}: bands touch {bands:?}"
                    );
                }
                let rows: Vec<usize> = bands.iter().cloned().flatten().collect();
                assert_eq!(rows.len(), l.lat_sizes()[r]);
                let n = rows.len();
                for i in 0..n {
                    assert_eq!(
                        rows[i] + rows[n - 1 - i],
                        nlat - 1,
                        "{nlat}/{p} rank {r}: {rows:?}"
                    );
                    seen[rows[i]] += 1;
                }
                walked.push(n.div_ceil(2));
                assert_eq!(l.lat_sizes(), layouts[0].lat_sizes());
            }
            assert!(seen.iter().all(|&c| c == 1), "{nlat}/{p}: {seen:?}");
            assert!(walked.iter().all(|&w| w >= 1), "{nlat}/{p}: {walked:?}");
            assert_eq!(walked.iter().sum::<usize>(), half);
        }
    }
}

#[test]
fn ranks_on_different_paths_agree_and_different_layouts_fail_together() {
    // Rank 0 on the tensor operations (as a rank on another backend),
    // rank 1 on the host kernels: both take the transposes' path (the
    // fused one sends its partial sums in another layout) and the result
    // is the serial one.
    let spec = ShtSpec::new(13, 22, LatitudeGrid::Equiangular).unwrap();
    let dev = Device::flex();
    let xv = random(2 * 13 * 22, 11);
    let want = values(
        RealSht::new(spec)
            .forward::<3, 4>(tensor(xv.clone(), [2, 13, 22], &dev))
            .unwrap(),
    );
    for split in [LatitudeSplit::Contiguous, LatitudeSplit::Mirrored] {
        let got = LocalWorld::new(2)
            .run(|comm| {
                let rank = comm.rank();
                let grid = ProcessGrid::new(comm, 2, 1)?;
                let sht = DistributedRealSht::with_split(&grid, spec, split)?;
                let rows: Vec<usize> = sht.layout().lat_bands().iter().cloned().flatten().collect();
                let all: Vec<usize> = (0..22).collect();
                let x = tensor(
                    block(&xv, [2, 13, 22, 1], &rows, &all),
                    [2, rows.len(), 22],
                    &dev,
                );
                let run = || sht.forward::<3, 4>(x);
                let c = if rank == 0 {
                    ruda_sphere::testing::with_tensor_ops(run)
                } else {
                    run()
                }?;
                let l = sht.layout();
                Ok::<_, SphereError>((values(c), l.l_range().collect::<Vec<_>>(), l.orders()))
            })
            .unwrap();
        for (c, ls, ms) in got {
            let d = max_diff(&c, &block(&want, [2, 7, 7, 2], &ls, &ms));
            assert!(d <= 1e-13 * scale(&want), "{split:?}: {d:e}");
        }
    }
    // Rank 0 contiguous, rank 1 mirrored: 7 + 6 latitudes against 8 + 5,
    // refused on both ranks before any data moves.
    let errs = LocalWorld::new(2)
        .run(|comm| {
            let rank = comm.rank();
            let grid = ProcessGrid::new(comm, 2, 1)?;
            let split = [LatitudeSplit::Contiguous, LatitudeSplit::Mirrored][rank];
            let sht = DistributedRealSht::with_split(&grid, spec, split)?;
            let rows = sht.layout().lat_sizes()[rank];
            let x = tensor(vec![1.0; 2 * rows * 22], [2, rows, 22], &dev);
            Ok::<_, SphereError>(sht.forward::<3, 4>(x).unwrap_err())
        })
        .unwrap();
    for (rank, e) in errs.iter().enumerate() {
        match e {
            SphereError::Layouts {
                rank: r,
                fingerprints,
                ..
            } => {
                assert_eq!(*r, rank);
                assert_eq!(fingerprints.len(), 2);
                assert_ne!(fingerprints[0], fingerprints[1]);
            }
            other => panic!("rank {rank}: {other}"),
        }
    }
}

#[test]
#[should_panic(expected = "use lat_bands")]
fn a_mirrored_band_of_two_runs_has_no_single_lat_range() {
    let spec = ShtSpec::new(13, 22, LatitudeGrid::Equiangular).unwrap();
    let l = SphereLayout::with_split(spec, (0, 2), (0, 1), LatitudeSplit::Mirrored).unwrap();
    assert_eq!(l.lat_bands(), &[0..4, 9..13]);
    let _ = l.lat_range();
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
            let lead = if grid.world().rank() == 3 { 3 } else { 2 };
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

/// One rank's patch or block has the wrong shape, or a dtype the transform
/// refuses: that rank gets its own typed error and every other rank gets
/// `PeerInput` naming it, promptly (the ranks agree on their inputs before
/// the first collective; before, the peers waited in it until the rank's
/// exit was seen as a failure), forward and inverse, on 2×1, 1×2 and 2×2
/// grids.
#[test]
fn a_rank_with_a_bad_input_is_named_by_every_other_rank() {
    let spec = ShtSpec::new(9, 16, LatitudeGrid::Equiangular).unwrap();
    for (polar, azimuth) in [(2, 1), (1, 2), (2, 2)] {
        for bad_dtype in [false, true] {
            let n = polar * azimuth;
            let bad = n - 1;
            let started = std::time::Instant::now();
            let results = LocalWorld::new(n)
                .timeout(std::time::Duration::from_secs(30))
                .run(|comm| {
                    let grid = ProcessGrid::new(comm, polar, azimuth)?;
                    let me = grid.world().rank();
                    let sht = DistributedRealSht::new(&grid, spec)?;
                    let isht = DistributedInverseRealSht::new(&grid, spec)?;
                    let (lat, lon) = (
                        sht.layout().lat_range().len(),
                        sht.layout().lon_range().len(),
                    );
                    let (l, m) = (sht.layout().l_range().len(), sht.layout().orders().len());
                    let wrong = usize::from(me == bad && !bad_dtype);
                    let dtype = if me == bad && bad_dtype {
                        DType::F16
                    } else {
                        DType::F64
                    };
                    let x = Tensor::<3>::zeros([2, lat + wrong, lon], (&Device::flex(), dtype));
                    let forward = sht.forward::<3, 4>(x).map(|_| ()).unwrap_err();
                    let c = Tensor::<4>::zeros([2, l, m + wrong, 2], (&Device::flex(), dtype));
                    let inverse = isht.forward::<4, 3>(c).map(|_| ()).unwrap_err();
                    Ok::<_, SphereError>((forward, inverse))
                })
                .unwrap();
            assert!(
                started.elapsed() < std::time::Duration::from_secs(20),
                "{polar}x{azimuth}: the ranks waited"
            );
            for (rank, (f, i)) in results.iter().enumerate() {
                for e in [f, i] {
                    let ok = if rank == bad && bad_dtype {
                        matches!(e, SphereError::DType { .. })
                    } else if rank == bad {
                        matches!(e, SphereError::Shape { .. })
                    } else {
                        matches!(e, SphereError::PeerInput { rank: r, offenders, .. } if *r == rank && offenders == &[bad])
                    };
                    assert!(
                        ok,
                        "{polar}x{azimuth} rank {rank} (bad dtype {bad_dtype}): {e}"
                    );
                }
            }
        }
    }
}
