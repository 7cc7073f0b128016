//! The shallow-water solver against torch-harmonics 0.9.3's
//! `ShallowWaterSolver` (CPU torch 2.14.1, float64), recorded by
//! `reference/shallow_water_reference.py`: the Galewsky initial state, its
//! tendency and states after 1, 2 and 24–36 steps (4 and 6 hours) on an
//! equiangular and a Legendre–Gauss grid, and the same for a random
//! state; then the distributed solver against the serial one on grids of
//! 1 to 8 ranks, the budgets, the wind conventions and the errors.
//!
//! torch-harmonics 0.9.3 makes `RealVectorSHT`'s degree factor in float32
//! (see the script): the comparison at round-off is with its `f64` runs
//! (that factor in float64), and with the module as shipped at the size of
//! that factor's error.

mod common;

use burn_tensor::{DType, Device, Tensor};
use common::{flat, rel_err, tensor, values};
use ruda_comm::LocalWorld;
use ruda_sphere::shallow_water::{
    DistributedTransforms, Planet, SerialTransforms, ShallowWaterSolver, SphereCalculus,
    SphereTransforms,
};
use ruda_sphere::{LatitudeGrid, RealSht, ShtSpec, SphereError};
use ruda_tensor::ProcessGrid;
use serde_json::Value;

fn reference() -> Value {
    let text = include_str!("../reference/shallow_water_0.9.3.json");
    serde_json::from_str(text).expect("valid reference JSON")
}

fn usize_of(v: &Value) -> usize {
    v.as_u64().unwrap() as usize
}

fn spec_of(case: &Value) -> ShtSpec {
    let grid = match case["grid"].as_str().unwrap() {
        "equiangular" => LatitudeGrid::Equiangular,
        "legendre-gauss" => LatitudeGrid::LegendreGauss,
        other => panic!("unknown grid {other}"),
    };
    let l = usize_of(&case["lmax"]);
    ShtSpec::with_truncation(
        usize_of(&case["nlat"]),
        usize_of(&case["nlon"]),
        grid,
        Some(l),
        Some(l),
    )
    .unwrap()
    .with_csphase(false)
}

fn serial(spec: ShtSpec, dt: f64) -> ShallowWaterSolver<SerialTransforms> {
    ShallowWaterSolver::new(
        SerialTransforms::new(spec),
        dt,
        Planet::default(),
        &Device::flex(),
        DType::F64,
    )
    .unwrap()
}

/// The largest error of each of the three fields of `got` against `want`
/// (states `[3, l, m, 2]`): the geopotential's relative to its largest
/// value, the vorticity's and divergence's relative to the largest of
/// either (same units; the Galewsky state's divergence is zero).
fn field_errors(got: &[f64], want: &[f64]) -> [f64; 3] {
    assert_eq!(got.len(), want.len(), "lengths differ");
    let n = want.len() / 3;
    let max = |v: &[f64]| v.iter().fold(0.0f64, |m, x| m.max(x.abs()));
    let wind_scale = max(&want[n..]).max(f64::MIN_POSITIVE);
    core::array::from_fn(|f| {
        let (g, w) = (&got[f * n..(f + 1) * n], &want[f * n..(f + 1) * n]);
        let scale = if f == 0 {
            max(w).max(f64::MIN_POSITIVE)
        } else {
            wind_scale
        };
        g.iter()
            .zip(w)
            .fold(0.0f64, |m, (a, b)| m.max((a - b).abs()))
            / scale
    })
}

fn assert_close(what: &str, got: &[f64], want: &[f64], tol: f64) -> [f64; 3] {
    let e = field_errors(got, want);
    assert!(
        e.iter().all(|&x| x <= tol),
        "{what}: errors {e:?} (geopotential, vorticity, divergence) above {tol}"
    );
    e
}

/// The divergence tendency is a small difference of large terms (the
/// Galewsky state is built so that they balance; and `∇²φ` carries the
/// round-off of the mean geopotential `g·havg`, ~100× its variations), so
/// its error relative to its own size is ~1e-11 in either code; the
/// states, where `Δt` times it is added to the state, agree to ~1e-14.
const TENDENCY_TOL: f64 = 1e-10;

#[test]
fn the_reference_is_torch_harmonics_0_9_3() {
    let r = reference();
    assert!(r["torch_harmonics"].as_str().unwrap().starts_with("0.9.3"));
    assert_eq!(r["cases"].as_array().unwrap().len(), 2);
}

/// A transform without the Condon–Shortley phase equals torch-harmonics'
/// `RealSHT(csphase=False)`.
#[test]
fn scalar_transform_without_the_condon_shortley_phase() {
    let r = &reference()["csphase"];
    let spec = ShtSpec::new(9, 16, LatitudeGrid::Equiangular)
        .unwrap()
        .with_csphase(false);
    let x = tensor(flat(&r["x"]), [2, 9, 16], &Device::flex());
    let c: Tensor<4> = RealSht::new(spec).forward(x).unwrap();
    let err = rel_err(&values(c), &flat(&r["sht_x"]));
    assert!(err < 1e-13, "{err}");
}

/// The Galewsky state, its tendency and the states after 1, 2 and N steps
/// equal torch-harmonics' (with the float64 degree factor) at round-off.
#[test]
fn galewsky_replays_torch_harmonics() {
    for case in reference()["cases"].as_array().unwrap() {
        let spec = spec_of(case);
        let solver = serial(spec, case["dt"].as_f64().unwrap());
        let want = &case["f64"];
        let g = solver.galewsky().unwrap();
        let e0 = assert_close(
            "Galewsky state",
            &values(g.clone()),
            &flat(&want["galewsky"]),
            1e-13,
        );
        let run = &want["galewsky_run"];
        let d = solver.tendency(g.clone()).unwrap();
        assert_close(
            "Galewsky tendency",
            &values(d),
            &flat(&run["dudt"]),
            TENDENCY_TOL,
        );
        for (n, state) in run["steps"].as_object().unwrap() {
            let n: usize = n.parse().unwrap();
            let got = solver.step(g.clone(), n).unwrap();
            let e = assert_close(
                &format!("{} after {n} steps", case["grid"]),
                &values(got),
                &flat(state),
                1e-12,
            );
            eprintln!("{} {n} steps: {e:?} (initial {e0:?})", case["grid"]);
        }
    }
}

/// Against torch-harmonics as shipped, the float32 degree factor of its
/// vector transform is the whole difference (~3e-8 relative).
#[test]
fn galewsky_against_torch_harmonics_as_shipped() {
    for case in reference()["cases"].as_array().unwrap() {
        let solver = serial(spec_of(case), case["dt"].as_f64().unwrap());
        let shipped = &case["as_shipped"];
        let g = solver.galewsky().unwrap();
        let e = assert_close(
            "Galewsky state, as shipped",
            &values(g.clone()),
            &flat(&shipped["galewsky"]),
            1e-6,
        );
        // The float32 factor is visible: ruda is not torch-harmonics as
        // shipped to round-off (the comparison above is not vacuous).
        assert!(e[1] > 1e-12, "{e:?}");
        for (n, state) in shipped["galewsky_run"]["steps"].as_object().unwrap() {
            let got = solver.step(g.clone(), n.parse().unwrap()).unwrap();
            assert_close(
                "Galewsky steps, as shipped",
                &values(got),
                &flat(state),
                1e-6,
            );
        }
    }
}

/// A random state (drawn by the script as `random_initial_condition`
/// draws it): its tendency and steps equal torch-harmonics'.
#[test]
fn random_state_replays_torch_harmonics() {
    for case in reference()["cases"].as_array().unwrap() {
        let spec = spec_of(case);
        let solver = serial(spec, case["dt"].as_f64().unwrap());
        let (l, m) = (spec.lmax(), spec.mmax());
        let start = tensor(flat(&case["random"]), [3, l, m, 2], &Device::flex());
        let run = &case["f64"]["random_run"];
        let d = solver.tendency(start.clone()).unwrap();
        assert_close(
            "random tendency",
            &values(d),
            &flat(&run["dudt"]),
            TENDENCY_TOL,
        );
        for (n, state) in run["steps"].as_object().unwrap() {
            let got = solver.step(start.clone(), n.parse().unwrap()).unwrap();
            let e = assert_close("random steps", &values(got), &flat(state), 1e-11);
            eprintln!("random {n} steps: {e:?}");
        }
    }
}

/// This rank's part `[3, l_range, orders, 2]` of a whole state.
fn part_of(whole: &[f64], spec: &ShtSpec, t: &impl SphereTransforms) -> Vec<f64> {
    let (lmax, mmax) = (spec.lmax(), spec.mmax());
    let mut out = Vec::new();
    for f in 0..3 {
        for l in t.l_range() {
            for &m in &t.orders() {
                let at = ((f * lmax + l) * mmax + m) * 2;
                out.extend_from_slice(&whole[at..at + 2]);
            }
        }
    }
    out
}

/// On grids of 1 to 8 ranks (uneven splits of degrees, orders, latitudes
/// and longitudes) the distributed solver's Galewsky and random states,
/// their steps and budgets equal the serial solver's.
#[test]
fn distributed_solver_equals_serial() {
    // lmax 9 over 2 or 3 polar ranks and 2 or 4 azimuth ranks: uneven.
    let spec = ShtSpec::with_truncation(26, 50, LatitudeGrid::Equiangular, Some(9), None).unwrap();
    let (dt, steps) = (900.0, 3);
    let s = serial(spec, dt);
    let g0 = s.galewsky().unwrap();
    let g = values(s.step(g0.clone(), steps).unwrap());
    let r = values(s.step(s.random(11, 0.2).unwrap(), steps).unwrap());
    let (mass, energy) = (s.mass(g0.clone()).unwrap(), s.energy(g0).unwrap());
    for (p, a) in [(1, 1), (2, 1), (1, 3), (2, 2), (1, 5), (3, 2), (2, 4)] {
        let out = LocalWorld::new(p * a)
            .run(|comm| {
                let grid = ProcessGrid::new(comm, p, a)?;
                let t = DistributedTransforms::new(&grid, spec)?;
                let (want_g, want_r) = (part_of(&g, &spec, &t), part_of(&r, &spec, &t));
                let d =
                    ShallowWaterSolver::new(t, dt, Planet::default(), &Device::flex(), DType::F64)?;
                let g0 = d.galewsky()?;
                let budget = (d.mass(g0.clone())?, d.energy(g0.clone())?);
                let got_g = values(d.step(g0, steps)?);
                let got_r = values(d.step(d.random(11, 0.2)?, steps)?);
                Ok::<_, SphereError>((
                    field_errors(&got_g, &want_g),
                    field_errors(&got_r, &want_r),
                    budget,
                ))
            })
            .unwrap();
        for (rank, (eg, er, (m, e))) in out.into_iter().enumerate() {
            assert!(
                eg.iter().chain(&er).all(|&x| x < 1e-11),
                "{p}x{a} rank {rank}: Galewsky {eg:?}, random {er:?}"
            );
            assert!(
                ((m - mass) / mass).abs() < 1e-14 && ((e - energy) / energy).abs() < 1e-13,
                "{p}x{a} rank {rank}: mass {m} vs {mass}, energy {e} vs {energy}"
            );
        }
    }
}

/// Mass is conserved to round-off. The energy available above a resting
/// ocean of the same mass falls only through the hyperdiffusion (which
/// removes the truncated jet's ringing at the highest degrees): steadily,
/// by a few per cent a day at this resolution (0.03 % at lmax 64), and the
/// same with half the time step.
#[test]
fn mass_and_energy_budgets() {
    // ω Δt = (√(g h) + 80 m/s) · lmax / R · Δt ≈ 0.47: inside AB3's stable range.
    let spec =
        ShtSpec::with_truncation(48, 96, LatitudeGrid::LegendreGauss, Some(32), None).unwrap();
    let p = Planet::default();
    let area = 4.0 * core::f64::consts::PI * p.radius * p.radius;
    let mut losses = Vec::new();
    for dt in [240.0, 120.0] {
        let s = serial(spec, dt);
        let mut state = s.galewsky().unwrap();
        let m0 = s.mass(state.clone()).unwrap();
        // The quadrature integral equals the spectral one: ∫ φ dA = R² √(4π) c₀₀.
        let c00 = values(state.clone())[0];
        let spectral = p.radius * p.radius * (4.0 * core::f64::consts::PI).sqrt() * c00 / p.gravity;
        assert!(
            ((m0 - spectral) / spectral).abs() < 1e-14,
            "{m0} vs {spectral}"
        );
        let depth = m0 / area;
        let rest = 0.5 * p.gravity * depth * depth * area;
        let e0 = s.energy(state.clone()).unwrap() - rest;
        let mut last = e0;
        let per_quarter = (21600.0 / dt) as usize;
        for quarter in 1..=4 {
            state = s.step(state, per_quarter).unwrap();
            let m = s.mass(state.clone()).unwrap();
            assert!(
                ((m - m0) / m0).abs() < 1e-13,
                "{quarter}/4 day: mass {m} vs {m0}"
            );
            let e = s.energy(state.clone()).unwrap() - rest;
            eprintln!(
                "dt {dt}, {quarter}/4 day: available energy {:.6} of the initial",
                e / e0
            );
            assert!(
                e < last && e > 0.98 * last,
                "dt {dt}, {quarter}/4 day: {e} after {last}"
            );
            last = e;
        }
        losses.push(1.0 - last / e0);
    }
    let change = (losses[0] - losses[1]).abs() / losses[1];
    assert!(
        change < 0.01,
        "a day's loss {losses:?} depends on the time step"
    );
}

/// The wind conventions: solid-body rotation `u = U cos φ` has vorticity
/// `2 U sin φ / R`; a northward `v = V cos φ` has divergence
/// `−2 V sin φ / R`; and the wind of that vorticity and divergence is the
/// wind (round trip).
#[test]
fn vorticity_and_divergence_of_simple_winds() {
    let spec = ShtSpec::new(24, 48, LatitudeGrid::LegendreGauss).unwrap();
    let r = 6.37122e6;
    let device = Device::flex();
    let calc = SphereCalculus::new(SerialTransforms::new(spec), r, &device, DType::F64).unwrap();
    let lats = calc.latitudes().to_vec();
    let row = |f: &dyn Fn(f64) -> f64| -> Vec<f64> {
        lats.iter().flat_map(|&p| vec![f(p); 48]).collect()
    };
    let (u0, v0) = (10.0, 3.0);
    let mut wind = row(&|p| u0 * p.cos());
    wind.extend(row(&|p| v0 * p.cos()));
    let wind_t = tensor(wind.clone(), [2, 24, 48], &device);
    let vd = calc.vrtdiv_from_wind(wind_t).unwrap();
    let grid = values(calc.spec2grid(vd.clone()).unwrap());
    let n = 24 * 48;
    let want_vrt = row(&|p| 2.0 * u0 * p.sin() / r);
    let want_div = row(&|p| -2.0 * v0 * p.sin() / r);
    assert!(rel_err(&grid[..n], &want_vrt) < 1e-12, "vorticity");
    assert!(rel_err(&grid[n..], &want_div) < 1e-12, "divergence");
    let back = values(calc.wind_from_vrtdiv(vd).unwrap());
    assert!(rel_err(&back, &wind) < 1e-12, "round trip");
    // The Laplacian and its inverse undo each other away from l = 0.
    let c = calc
        .grid2spec(tensor(wind[..n].to_vec(), [1, 24, 48], &device))
        .unwrap();
    let c = calc.triangular(c);
    let mut want = values(c.clone());
    want[0] = 0.0; // the mean (l = 0) has no inverse
    want[1] = 0.0;
    let got = values(calc.laplacian(calc.inverse_laplacian(c)));
    assert!(rel_err(&got, &want) < 1e-13);
}

/// Bad settings and states are typed errors naming what is wrong.
#[test]
fn settings_and_states_are_checked() {
    let spec = ShtSpec::new(12, 24, LatitudeGrid::Equiangular).unwrap();
    let make = |dt, planet| {
        ShallowWaterSolver::new(
            SerialTransforms::new(spec),
            dt,
            planet,
            &Device::flex(),
            DType::F64,
        )
    };
    for dt in [0.0, -1.0, f64::NAN, f64::INFINITY] {
        assert!(matches!(
            make(dt, Planet::default()),
            Err(SphereError::Setting { what: "dt", .. })
        ));
    }
    let bad = Planet {
        havg: 0.0,
        ..Planet::default()
    };
    assert!(matches!(
        make(60.0, bad),
        Err(SphereError::Setting { what: "havg", .. })
    ));
    let s = make(60.0, Planet::default()).unwrap();
    assert!(matches!(
        s.random(1, -0.5),
        Err(SphereError::Setting { what: "mach", .. })
    ));
    let wrong = Tensor::<4>::zeros([3, 5, 6, 2], (&Device::flex(), DType::F64));
    match s.step(wrong, 1) {
        Err(SphereError::Shape { expected, got, .. }) => {
            assert_eq!((expected, got), (vec![3, 6, 6, 2], vec![3, 5, 6, 2]));
        }
        other => panic!("{other:?}"),
    }
    let one = ShtSpec::with_truncation(12, 24, LatitudeGrid::Equiangular, Some(1), None).unwrap();
    assert!(matches!(
        ShallowWaterSolver::new(
            SerialTransforms::new(one),
            60.0,
            Planet::default(),
            &Device::flex(),
            DType::F64
        ),
        Err(SphereError::Setting { what: "lmax", .. })
    ));
    assert!(matches!(
        make(60.0, Planet::default()).map(|_| ()).and_then(|_| {
            ShallowWaterSolver::new(
                SerialTransforms::new(spec),
                60.0,
                Planet::default(),
                &Device::flex(),
                DType::I32,
            )
            .map(|_| ())
        }),
        Err(SphereError::DType { .. })
    ));
    // Zero steps return the state.
    let g = s.galewsky().unwrap();
    assert_eq!(values(s.step(g.clone(), 0).unwrap()), values(g));
}

/// The solver in f32 follows the f64 one to f32's precision over a few
/// steps (as torch-harmonics' `PdeDataset` runs it, in float32).
#[test]
fn single_precision_follows_double() {
    let spec = ShtSpec::new(24, 48, LatitudeGrid::Equiangular).unwrap();
    let make = |dtype| {
        ShallowWaterSolver::new(
            SerialTransforms::new(spec),
            600.0,
            Planet::default(),
            &Device::flex(),
            dtype,
        )
        .unwrap()
    };
    let (s64, s32) = (make(DType::F64), make(DType::F32));
    let a = values(s64.step(s64.random(3, 0.2).unwrap(), 6).unwrap());
    let b32 = s32.step(s32.random(3, 0.2).unwrap(), 6).unwrap();
    assert_eq!(b32.dtype(), DType::F32);
    let e = field_errors(&values(b32), &a);
    assert!(e.iter().all(|&x| x < 1e-4), "{e:?}");
}

/// A rank that passes a state, coefficients or a field of the wrong shape
/// gets its own `Shape` error and every other rank `PeerInput` naming it,
/// at once (the ranks agree on their inputs before the first collective;
/// before, the peers waited in it until the deadline): the solver's step,
/// the calculus's wind from vorticity and divergence, and its integral,
/// on 2×1, 1×2 and 2×2 grids.
#[test]
fn a_rank_with_a_bad_state_is_named_by_every_other_rank() {
    let spec = ShtSpec::with_truncation(12, 24, LatitudeGrid::Equiangular, Some(5), None).unwrap();
    for (p, a) in [(2, 1), (1, 2), (2, 2)] {
        let n = p * a;
        let bad = n - 1;
        let started = std::time::Instant::now();
        let out = LocalWorld::new(n)
            .timeout(std::time::Duration::from_secs(30))
            .run(|comm| {
                let grid = ProcessGrid::new(comm, p, a)?;
                let t = DistributedTransforms::new(&grid, spec)?;
                let me = t.rank();
                let (l, m) = (t.l_range().len(), t.orders().len());
                let (lat, lon) = (t.lat_range().len(), t.lon_range().len());
                let s = ShallowWaterSolver::new(
                    t,
                    600.0,
                    Planet::default(),
                    &Device::flex(),
                    DType::F64,
                )?;
                let wrong = usize::from(me == bad);
                let dev = (&Device::flex(), DType::F64);
                let step = s
                    .step(Tensor::<4>::zeros([3, l, m + wrong, 2], dev), 1)
                    .map(|_| ())
                    .unwrap_err();
                let calc = s.calculus();
                let wind = calc
                    .wind_from_vrtdiv(Tensor::<4>::zeros([2, l + wrong, m, 2], dev))
                    .map(|_| ())
                    .unwrap_err();
                let integral = calc
                    .integrate(Tensor::<3>::zeros([1, lat, lon + wrong], dev))
                    .map(|_| ())
                    .unwrap_err();
                // Right inputs still work afterwards on every rank: a step
                // (transforms and all) and an integral.
                let g = s.galewsky()?;
                let stepped = s.step(g.clone(), 1)?;
                assert_eq!(stepped.dims(), g.dims());
                let calc = s.calculus();
                let ok = calc.integrate(Tensor::<3>::ones([1, lat, lon], dev))?;
                Ok::<_, SphereError>((step, wind, integral, values(ok)))
            })
            .unwrap();
        assert!(
            started.elapsed() < std::time::Duration::from_secs(20),
            "{p}x{a}: the ranks waited"
        );
        for (rank, (step, wind, integral, area)) in out.iter().enumerate() {
            for (e, want) in [
                (step, "ShallowWaterSolver::step"),
                (wind, "SphereCalculus::wind_from_vrtdiv"),
                (integral, "SphereCalculus::integrate"),
            ] {
                let ok = if rank == bad {
                    matches!(e, SphereError::Shape { rank: r, op, .. } if *r == rank && *op == want)
                } else {
                    matches!(e, SphereError::PeerInput { rank: r, offenders, op } if *r == rank && offenders == &[bad] && *op == want)
                };
                assert!(ok, "{p}x{a} rank {rank}: {e}");
            }
            // ∫ 1 dA = 4π R².
            let r = Planet::default().radius;
            let want = 4.0 * std::f64::consts::PI * r * r;
            assert!(
                ((area[0] - want) / want).abs() < 1e-12,
                "{p}x{a} rank {rank}: area {}",
                area[0]
            );
        }
    }
}
