//! The shallow-water equations on the rotating sphere, stepped in spectral
//! space.

use burn_tensor::{DType, Device, Tensor, TensorData};

use super::{Planet, SphereCalculus, SphereTransforms};
use crate::SphereError;

/// A spectral solver of the shallow-water equations on a rotating sphere in
/// vorticity–divergence form, as torch-harmonics' `ShallowWaterSolver`
/// (0.9.3) computes it, serial or distributed over a process grid through
/// its [`SphereTransforms`].
///
/// The state is the spectral coefficients `[3, l, m, 2]` of the
/// geopotential `φ = g h`, the vorticity `ζ` and the divergence `δ` (this
/// rank's degrees and orders). Each step computes the tendencies
///
/// - `∂φ/∂t = −∇·(φ u)`,
/// - `∂ζ/∂t = −∇·((ζ + f) u)`,
/// - `∂δ/∂t = k·∇×((ζ + f) u) − ∇²(φ + |u|²/2)`,
///
/// with the wind `u` from `ζ` and `δ` by the inverse vector transform,
/// the products on the grid and `f = 2Ω sin φ` the Coriolis parameter;
/// advances them with third-order Adams–Bashforth; and damps `ζ` and `δ` by
/// the implicit hyperdiffusion `exp(−Δt/2h · (l(l+1)/(L(L+1)))⁴)` (`L` the
/// highest degree kept). [`ShallowWaterSolver::step`] starts, as
/// torch-harmonics' `timestep` does, with a forward Euler step and then
/// one step of weights `(23 + 5)/12` and `−16/12` on the two tendencies it
/// has (not the textbook second-order Adams–Bashforth; kept so that the
/// results replay torch-harmonics'); each call starts afresh.
///
/// Harmonics without the Condon–Shortley phase are what torch-harmonics'
/// solver uses; pass a spec [`with_csphase(false)`](crate::ShtSpec::with_csphase)
/// to compare coefficients with it (fields are the same either way).
///
/// # Example
/// ```
/// use burn_tensor::{DType, Device};
/// use ruda_sphere::shallow_water::{Planet, SerialTransforms, ShallowWaterSolver};
/// use ruda_sphere::{LatitudeGrid, ShtSpec};
///
/// let spec = ShtSpec::with_truncation(24, 48, LatitudeGrid::Equiangular, Some(8), None)?
///     .with_csphase(false);
/// let solver = ShallowWaterSolver::new(
///     SerialTransforms::new(spec), 900.0, Planet::default(), &Device::flex(), DType::F64,
/// )?;
/// let start = solver.galewsky()?;
/// let later = solver.step(start.clone(), 8)?; // two hours
/// let (m0, m1) = (solver.mass(start)?, solver.mass(later)?);
/// assert!(((m1 - m0) / m0).abs() < 1e-13);
/// # Ok::<(), ruda_sphere::SphereError>(())
/// ```
#[derive(Debug)]
pub struct ShallowWaterSolver<T> {
    calculus: SphereCalculus<T>,
    planet: Planet,
    dt: f64,
    /// `2Ω sin φ` on this rank's latitudes, `[1, lat, 1]`.
    coriolis: Tensor<3>,
    /// The hyperdiffusion factor per degree, `[1, l, 1, 1]`.
    hyperdiff: Tensor<4>,
}

impl<T: SphereTransforms> ShallowWaterSolver<T> {
    /// A solver on `transforms` with time step `dt` seconds, its state and
    /// constants on `device` in `dtype`.
    ///
    /// # Errors
    /// [`SphereError::Setting`] for a time step that is not finite and
    /// positive or a constant [`Planet::check`] refuses, and a spec of a
    /// single degree (the hyperdiffusion is scaled by the highest);
    /// [`SphereError::DType`] for a dtype other than f32 or f64.
    pub fn new(
        transforms: T,
        dt: f64,
        planet: Planet,
        device: &Device,
        dtype: DType,
    ) -> Result<Self, SphereError> {
        planet.check()?;
        if !(dt.is_finite() && dt > 0.0) {
            return Err(SphereError::Setting {
                what: "dt",
                value: dt,
                expected: "finite and positive (seconds)",
            });
        }
        let lmax = transforms.spec().lmax();
        if lmax < 2 {
            return Err(SphereError::Setting {
                what: "lmax",
                value: lmax as f64,
                expected: "at least 2 for the shallow-water solver",
            });
        }
        let calculus = SphereCalculus::new(transforms, planet.radius, device, dtype)?;
        let r = planet.radius;
        let lap = |l: f64| -l * (l + 1.0) / (r * r);
        let top = lap((lmax - 1) as f64);
        let ls = calculus.transforms().l_range();
        let hyper: Vec<f64> = ls
            .clone()
            .map(|l| ((-dt / 2.0 / 3600.0) * (lap(l as f64) / top).powi(4)).exp())
            .collect();
        let hyperdiff =
            Tensor::from_data(TensorData::new(hyper, [1, ls.len(), 1, 1]), (device, dtype));
        let lats = calculus.latitudes();
        let f: Vec<f64> = lats.iter().map(|p| 2.0 * planet.omega * p.sin()).collect();
        let coriolis = Tensor::from_data(TensorData::new(f, [1, lats.len(), 1]), (device, dtype));
        Ok(ShallowWaterSolver {
            calculus,
            planet,
            dt,
            coriolis,
            hyperdiff,
        })
    }

    /// The spectral operators and the transforms.
    pub fn calculus(&self) -> &SphereCalculus<T> {
        &self.calculus
    }

    /// The planet's constants.
    pub fn planet(&self) -> &Planet {
        &self.planet
    }

    /// The time step in seconds.
    pub fn dt(&self) -> f64 {
        self.dt
    }

    /// `2Ω sin φ` on this rank's latitudes, `[1, lat, 1]`.
    pub(super) fn coriolis_grid(&self) -> Tensor<3> {
        self.coriolis.clone()
    }

    /// The time derivative of a state `[3, l, m, 2]` (torch-harmonics'
    /// `dudtspec`).
    ///
    /// # Errors
    /// [`SphereError::Shape`] for a state that is not `[3, l, m, 2]` of
    /// this rank's degrees and orders, and [`SphereError::PeerInput`] on the
    /// other ranks of a grid (at once, before any data moves); the
    /// transforms' errors.
    pub fn tendency(&self, state: Tensor<4>) -> Result<Tensor<4>, SphereError> {
        self.check_state("ShallowWaterSolver::tendency", &state)?;
        self.tendency_of_checked(state)
    }

    /// [`ShallowWaterSolver::tendency`] of a state already checked on every
    /// rank (no agreement of its own: one per step is enough).
    fn tendency_of_checked(&self, state: Tensor<4>) -> Result<Tensor<4>, SphereError> {
        let c = &self.calculus;
        let grid = c.spec2grid(state.clone())?;
        let wind = c.wind_of_checked(state.narrow(0, 1, 2))?;
        let phi = grid.clone().narrow(0, 0, 1);
        let vrt = grid.narrow(0, 1, 1);
        let [_, lat, lon] = wind.dims();
        let fluxes = Tensor::cat(
            vec![
                wind.clone() * (vrt + self.coriolis.clone()),
                wind.clone() * phi.clone(),
            ],
            0,
        )
        .reshape([2, 2, lat, lon]);
        let s = c.vrtdiv_from_winds(fluxes)?;
        let [_, _, l, m, two] = s.dims();
        let s = s.reshape([4, l, m, two]);
        // (curl, divergence) of (ζ + f) u, then of φ u.
        let (curl_q, div_q, div_phi) = (
            s.clone().narrow(0, 0, 1),
            s.clone().narrow(0, 1, 1),
            s.narrow(0, 3, 1),
        );
        let u = wind.clone().narrow(0, 0, 1);
        let v = wind.narrow(0, 1, 1);
        let bernoulli = phi + (u.powi_scalar(2) + v.powi_scalar(2)).mul_scalar(0.5);
        let bernoulli = c.grid2spec(bernoulli)?;
        Ok(Tensor::cat(
            vec![div_phi.neg(), div_q.neg(), curl_q - c.laplacian(bernoulli)],
            0,
        ))
    }

    /// Advance `state` by `nsteps` steps of [`ShallowWaterSolver::dt`]
    /// (torch-harmonics' `timestep`: third-order Adams–Bashforth after its
    /// start, then the hyperdiffusion of vorticity and divergence). Zero
    /// steps return the state.
    ///
    /// # Errors
    /// As [`ShallowWaterSolver::tendency`].
    pub fn step(&self, state: Tensor<4>, nsteps: usize) -> Result<Tensor<4>, SphereError> {
        self.check_state("ShallowWaterSolver::step", &state)?;
        let mut u = state;
        let mut history: Option<(Tensor<4>, Tensor<4>)> = None;
        for iter in 0..nsteps {
            let new = self.tendency_of_checked(u.clone())?;
            let (now, old) = match (iter, history.take()) {
                (0, _) | (_, None) => (new.clone(), new.clone()),
                (1, Some((now, _))) => (now, new.clone()),
                (_, Some((now, old))) => (now, old),
            };
            let increment = new
                .clone()
                .mul_scalar(23.0 / 12.0)
                .sub(now.clone().mul_scalar(16.0 / 12.0))
                .add(old.mul_scalar(5.0 / 12.0))
                .mul_scalar(self.dt);
            let next = u + increment;
            u = Tensor::cat(
                vec![
                    next.clone().narrow(0, 0, 1),
                    self.hyperdiff.clone() * next.narrow(0, 1, 2),
                ],
                0,
            );
            history = Some((new, now));
        }
        Ok(u)
    }

    /// The state's fields on the grid: `[3, lat, lon]`, geopotential
    /// (m²/s²), vorticity and divergence (1/s).
    ///
    /// # Errors
    /// As [`ShallowWaterSolver::tendency`].
    pub fn to_grid(&self, state: Tensor<4>) -> Result<Tensor<3>, SphereError> {
        self.check_state("ShallowWaterSolver::to_grid", &state)?;
        self.calculus.spec2grid(state)
    }

    /// The geopotential and the wind on the grid, `[3, lat, lon]`: `φ`,
    /// `u` (eastward), `v` (northward) (torch-harmonics' `gethuv`).
    ///
    /// # Errors
    /// As [`ShallowWaterSolver::tendency`].
    pub fn geopotential_and_wind(&self, state: Tensor<4>) -> Result<Tensor<3>, SphereError> {
        self.check_state("ShallowWaterSolver::geopotential_and_wind", &state)?;
        let phi = self.calculus.spec2grid(state.clone().narrow(0, 0, 1))?;
        let wind = self.calculus.wind_of_checked(state.narrow(0, 1, 2))?;
        Ok(Tensor::cat(vec![phi, wind], 0))
    }

    /// The fluid's mass per unit density, `∫ h dA = ∫ φ/g dA` in m³,
    /// summed over the ranks (collective on a process grid). Exactly
    /// conserved by the equations and, to round-off, by the solver (the
    /// tendency of the mean geopotential is a divergence, zero at `l = 0`).
    ///
    /// # Errors
    /// As [`ShallowWaterSolver::tendency`].
    pub fn mass(&self, state: Tensor<4>) -> Result<f64, SphereError> {
        let phi = self.to_grid(state)?.narrow(0, 0, 1);
        let m = self
            .calculus
            .integrate(phi.div_scalar(self.planet.gravity))?;
        Ok(scalar(m))
    }

    /// The total energy per unit density, `∫ (h |u|²/2 + g h²/2) dA` in
    /// m⁵/s², summed over the ranks (collective on a process grid).
    /// Conserved by the equations; the solver loses what the
    /// hyperdiffusion removes, and its time stepping's error.
    ///
    /// # Errors
    /// As [`ShallowWaterSolver::tendency`].
    pub fn energy(&self, state: Tensor<4>) -> Result<f64, SphereError> {
        let huv = self.geopotential_and_wind(state)?;
        let g = self.planet.gravity;
        let phi = huv.clone().narrow(0, 0, 1);
        let speed2 =
            huv.clone().narrow(0, 1, 1).powi_scalar(2) + huv.narrow(0, 2, 1).powi_scalar(2);
        let density =
            (phi.clone() * speed2).mul_scalar(0.5 / g) + phi.powi_scalar(2).mul_scalar(0.5 / g);
        Ok(scalar(self.calculus.integrate(density)?))
    }

    /// Check `state`'s shape on every rank and agree on the verdicts
    /// ([`SphereTransforms::agree`]): a rank with a wrong state gets
    /// [`SphereError::Shape`], its peers [`SphereError::PeerInput`], before
    /// any collective.
    fn check_state(&self, op: &'static str, state: &Tensor<4>) -> Result<(), SphereError> {
        let t = self.calculus.transforms();
        let expected = [3, t.l_range().len(), t.orders().len(), 2];
        self.calculus.agree_shape(op, &expected, &state.dims())
    }
}

/// The single value of a one-element tensor, in f64.
fn scalar(x: Tensor<1>) -> f64 {
    let x = x.cast(DType::F64).into_data();
    x.try_to_vec::<f64>().expect("an f64 tensor")[0]
}
