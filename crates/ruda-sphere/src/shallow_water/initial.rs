//! Initial states of the shallow-water solver: the Galewsky et al. (2004)
//! jet and random band-limited states.

use core::f64::consts::PI;

use burn_tensor::{Tensor, TensorData};
use rand::SeedableRng;
use rand::rngs::Xoshiro256PlusPlus;
use rand_distr::{Distribution, StandardNormal};

use super::{Planet, ShallowWaterSolver, SphereTransforms};
use crate::SphereError;

impl<T: SphereTransforms> ShallowWaterSolver<T> {
    /// The barotropically unstable jet of Galewsky, Scott and Polvani
    /// (2004, Tellus 56A, 429–440), as torch-harmonics'
    /// `galewsky_initial_condition` makes it: a zonal jet of 80 m/s between
    /// latitudes π/7 and π/2 − π/7, the geopotential in balance with it
    /// (from the divergence equation), plus a height bump of
    /// [`Planet::hamp`](super::Planet::hamp) at 45° N that is not, which
    /// sets off the instability within days. Deterministic; collective on a
    /// process grid.
    ///
    /// # Errors
    /// The transforms' errors.
    ///
    /// # Example
    /// ```
    /// use burn_tensor::{DType, Device};
    /// use ruda_sphere::shallow_water::{Planet, SerialTransforms, ShallowWaterSolver};
    /// use ruda_sphere::{LatitudeGrid, ShtSpec};
    ///
    /// let spec = ShtSpec::new(64, 128, LatitudeGrid::Equiangular)?.with_csphase(false);
    /// let s = ShallowWaterSolver::new(
    ///     SerialTransforms::new(spec), 300.0, Planet::default(), &Device::flex(), DType::F64,
    /// )?;
    /// let huv = s.geopotential_and_wind(s.galewsky()?)?;
    /// // The jet's peak, 80 m/s up to the truncation (lmax 32: 79.03), eastward.
    /// let u_max: f64 = huv.clone().narrow(0, 1, 1).max().into_scalar();
    /// assert!((u_max - 80.0).abs() < 1.5);
    /// let v_max: f64 = huv.narrow(0, 2, 1).abs().max().into_scalar();
    /// assert!(v_max < 1e-12);
    /// # Ok::<(), ruda_sphere::SphereError>(())
    /// ```
    pub fn galewsky(&self) -> Result<Tensor<4>, SphereError> {
        self.jet(&Jet::galewsky(self.planet()))
    }

    /// A zonal jet in balance with a bump on its height, as
    /// [`ShallowWaterSolver::galewsky`] makes the Galewsky jet, of any
    /// [`Jet`]'s shape (the Galewsky jet is [`Jet::galewsky`]; a family of
    /// them, for training data, [`Jet::random`]). Collective on a process
    /// grid.
    ///
    /// # Errors
    /// [`SphereError::Setting`] for a jet whose edges are not ordered
    /// within the hemisphere or whose constants are not finite; the
    /// transforms' errors.
    ///
    /// # Example
    /// ```
    /// use burn_tensor::{DType, Device};
    /// use ruda_sphere::shallow_water::{Jet, Planet, SerialTransforms, ShallowWaterSolver};
    /// use ruda_sphere::{LatitudeGrid, ShtSpec};
    ///
    /// let spec = ShtSpec::new(32, 64, LatitudeGrid::Equiangular)?;
    /// let s = ShallowWaterSolver::new(
    ///     SerialTransforms::new(spec), 600.0, Planet::default(), &Device::flex(), DType::F64,
    /// )?;
    /// let g = s.jet(&Jet::galewsky(s.planet()))?;
    /// let err: f64 = (g - s.galewsky()?).abs().max().into_scalar();
    /// assert_eq!(err, 0.0);
    /// let south = Jet { south: true, ..Jet::random(3, s.planet()) };
    /// assert!(s.jet(&south).is_ok());
    /// # Ok::<(), ruda_sphere::SphereError>(())
    /// ```
    pub fn jet(&self, jet: &Jet) -> Result<Tensor<4>, SphereError> {
        jet.check()?;
        let c = self.calculus();
        let planet = *self.planet();
        let (lats, lons) = (c.latitudes().to_vec(), c.longitudes());
        let (nlat, nlon) = (lats.len(), lons.len());
        let Jet {
            umax,
            phi0,
            phi1,
            bump_lat: phi2,
            bump_lon,
            hamp,
            alpha,
            beta,
            south,
        } = *jet;
        let en = (-4.0 / (phi1 - phi0).powi(2)).exp();
        let mut wind = vec![0.0; 2 * nlat * nlon];
        let mut height = vec![0.0; nlat * nlon];
        for (k, &lat) in lats.iter().enumerate() {
            // A southern jet is the northern one mirrored.
            let lat = if south { -lat } else { lat };
            let u = if lat > phi0 && lat < phi1 {
                (umax / en) * (1.0 / ((lat - phi0) * (lat - phi1))).exp()
            } else {
                0.0
            };
            for (j, &lon) in lons.iter().enumerate() {
                wind[k * nlon + j] = u;
                // The distance in longitude, wrapped into [−π, π): a bump
                // near longitude 0 has no seam (for Galewsky's, at π, this
                // is `lon − π` exactly, as torch-harmonics computes it).
                let dlon = (lon - bump_lon + PI).rem_euclid(2.0 * PI) - PI;
                let bump = hamp
                    * lat.cos()
                    * (-(dlon / alpha).powi(2)).exp()
                    * (-(phi2 - lat).powi(2) / beta).exp();
                height[k * nlon + j] = planet.gravity * (planet.havg + bump);
            }
        }
        let (device, dtype) = (c.device(), c.dtype());
        let wind = Tensor::<3>::from_data(TensorData::new(wind, [2, nlat, nlon]), (device, dtype));
        let height =
            Tensor::<3>::from_data(TensorData::new(height, [1, nlat, nlon]), (device, dtype));
        let vrtdiv = c.vrtdiv_from_wind(wind.clone())?;
        let vrtdiv_grid = c.spec2grid(vrtdiv.clone())?;
        let flux = wind.clone() * (vrtdiv_grid + self.coriolis_grid());
        let flux = c.vrtdiv_from_wind(flux)?;
        let kinetic = c.grid2spec(wind.powi_scalar(2).sum_dim(0).mul_scalar(0.5))?;
        let phi = c.inverse_laplacian(flux.narrow(0, 0, 1)) - kinetic + c.grid2spec(height)?;
        Ok(c.triangular(Tensor::cat(vec![phi, vrtdiv], 0)))
    }

    /// A random band-limited state as torch-harmonics'
    /// `random_initial_condition(mach)` draws it (with ruda's generator:
    /// the values differ from torch's, the distribution is the same):
    /// every coefficient of degree and order below 120 complex normal with
    /// variance `4π/(120·121)`, the geopotential's scaled by `g · hamp`
    /// around the mean `g · havg`, vorticity and divergence by `mach ·
    /// √(g havg) / R`; then the coefficients of `m > l` zeroed. The same
    /// `seed` gives the same state on any grid of ranks (every rank draws
    /// the whole state and keeps its part); collective-free.
    ///
    /// # Errors
    /// [`SphereError::Setting`] for a Mach number that is not finite and
    /// non-negative.
    ///
    /// # Example
    /// ```
    /// use burn_tensor::{DType, Device};
    /// use ruda_sphere::shallow_water::{Planet, SerialTransforms, ShallowWaterSolver};
    /// use ruda_sphere::{LatitudeGrid, ShtSpec};
    ///
    /// let spec = ShtSpec::new(16, 32, LatitudeGrid::Equiangular)?;
    /// let s = ShallowWaterSolver::new(
    ///     SerialTransforms::new(spec), 600.0, Planet::default(), &Device::flex(), DType::F64,
    /// )?;
    /// let (a, b) = (s.random(7, 0.2)?, s.random(7, 0.2)?);
    /// assert_eq!(a.into_data(), b.into_data());
    /// # Ok::<(), ruda_sphere::SphereError>(())
    /// ```
    pub fn random(&self, seed: u64, mach: f64) -> Result<Tensor<4>, SphereError> {
        if !(mach.is_finite() && mach >= 0.0) {
            return Err(SphereError::Setting {
                what: "mach",
                value: mach,
                expected: "finite and non-negative",
            });
        }
        let c = self.calculus();
        let t = c.transforms();
        let planet = *self.planet();
        let (lmax, mmax) = (t.spec().lmax(), t.spec().mmax());
        let limit = 120usize;
        let (lk, mk) = (lmax.min(limit), mmax.min(limit));
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
        let scale = (4.0 * PI / limit as f64 / (limit + 1) as f64).sqrt();
        // The whole state [3, lmax, mmax, 2], drawn in one fixed order.
        let mut full = vec![0.0; 3 * lmax * mmax * 2];
        for field in 0..3 {
            for l in 0..lk {
                for m in 0..mk {
                    let at = ((field * lmax + l) * mmax + m) * 2;
                    for part in 0..2 {
                        let z: f64 = StandardNormal.sample(&mut rng);
                        full[at + part] = scale * z * core::f64::consts::FRAC_1_SQRT_2;
                    }
                }
            }
        }
        let wave = (planet.gravity * planet.havg).sqrt() / planet.radius;
        for (i, v) in full.iter_mut().enumerate() {
            let (field, rest) = (i / (lmax * mmax * 2), i % (lmax * mmax * 2));
            let (l, m) = (rest / (mmax * 2), (rest / 2) % mmax);
            *v = if m > l {
                0.0
            } else if field == 0 {
                planet.gravity * planet.hamp * *v
            } else {
                mach * *v * wave
            };
        }
        full[0] += (4.0 * PI).sqrt() * planet.havg * planet.gravity;
        let (ls, orders) = (t.l_range(), t.orders());
        let mut part = Vec::with_capacity(3 * ls.len() * orders.len() * 2);
        for field in 0..3 {
            for l in ls.clone() {
                for &m in &orders {
                    let at = ((field * lmax + l) * mmax + m) * 2;
                    part.extend_from_slice(&full[at..at + 2]);
                }
            }
        }
        Ok(Tensor::from_data(
            TensorData::new(part, [3, ls.len(), orders.len(), 2]),
            (c.device(), c.dtype()),
        ))
    }
}

/// The shape of a balanced zonal jet with a height bump
/// ([`ShallowWaterSolver::jet`]): Galewsky et al.'s profile `u = umax/e_n ·
/// exp(1/((φ − φ0)(φ − φ1)))` between latitudes `φ0` and `φ1` (`e_n =
/// exp(−4/(φ1 − φ0)²)`), and the bump `hamp · cos φ · exp(−((λ −
/// bump_lon)/α)²) · exp(−(bump_lat − φ)²/β)` on the balanced height;
/// mirrored into the southern hemisphere when `south`.
///
/// # Example
/// ```
/// use ruda_sphere::shallow_water::{Jet, Planet};
/// let g = Jet::galewsky(&Planet::default());
/// assert_eq!((g.umax, g.hamp, g.south), (80.0, 120.0, false));
/// let r = Jet::random(7, &Planet::default());
/// assert_eq!(r, Jet::random(7, &Planet::default()));
/// assert!(r.check().is_ok() && r != g);
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Jet {
    /// Peak wind, m/s (80).
    pub umax: f64,
    /// Southern edge, radians (π/7).
    pub phi0: f64,
    /// Northern edge, radians (π/2 − π/7).
    pub phi1: f64,
    /// The bump's latitude, radians (π/4).
    pub bump_lat: f64,
    /// The bump's longitude, radians (π).
    pub bump_lon: f64,
    /// The bump's height, metres ([`Planet::hamp`], 120).
    pub hamp: f64,
    /// The bump's longitudinal width, radians (1/3).
    pub alpha: f64,
    /// The bump's latitudinal width squared, radians² (1/15).
    pub beta: f64,
    /// Mirror the jet into the southern hemisphere.
    pub south: bool,
}

impl Jet {
    /// The Galewsky et al. (2004) jet, with the bump height of `planet`.
    pub fn galewsky(planet: &Planet) -> Self {
        let phi0 = PI / 7.0;
        Jet {
            umax: 80.0,
            phi0,
            phi1: 0.5 * PI - phi0,
            bump_lat: 0.25 * PI,
            bump_lon: PI,
            hamp: planet.hamp,
            alpha: 1.0 / 3.0,
            beta: 1.0 / 15.0,
            south: false,
        }
    }

    /// A jet drawn from a family around Galewsky's (for training data):
    /// peak wind 40–100 m/s, centre 35–55° from the equator, width 0.45–0.8
    /// rad (Galewsky's: 80 m/s, 45°, 0.67 rad), the bump within 5° of the
    /// centre at any longitude, 40–200 m high (either sign), in either
    /// hemisphere. The same seed gives the same jet.
    pub fn random(seed: u64, planet: &Planet) -> Self {
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed ^ 0x6a65_745f_7368_6170);
        let mut u = |lo: f64, hi: f64| {
            let x: f64 = rand::RngExt::random(&mut rng);
            lo + (hi - lo) * x
        };
        let deg = PI / 180.0;
        let (umax, centre, width) = (u(40.0, 100.0), u(35.0, 55.0) * deg, u(0.45, 0.8));
        let bump_lat = centre + u(-5.0, 5.0) * deg;
        let bump_lon = u(0.0, 2.0 * PI);
        let hamp = u(40.0, 200.0) * if u(0.0, 1.0) < 0.5 { -1.0 } else { 1.0 };
        let south = u(0.0, 1.0) < 0.5;
        let g = Jet::galewsky(planet);
        Jet {
            umax,
            phi0: centre - width / 2.0,
            phi1: centre + width / 2.0,
            bump_lat,
            bump_lon,
            hamp,
            south,
            ..g
        }
    }

    /// Check that the constants are finite, the edges ordered within the
    /// northern hemisphere at least 0.1 rad apart, and the widths positive.
    ///
    /// # Errors
    /// [`SphereError::Setting`] naming the first that is not.
    pub fn check(&self) -> Result<(), SphereError> {
        let finite = [
            ("umax", self.umax),
            ("bump_lat", self.bump_lat),
            ("bump_lon", self.bump_lon),
            ("hamp", self.hamp),
        ];
        for (what, value) in finite {
            if !value.is_finite() {
                return Err(SphereError::Setting {
                    what,
                    value,
                    expected: "finite",
                });
            }
        }
        if !(self.phi0 >= 0.0 && self.phi0 < self.phi1 && self.phi1 <= 0.5 * PI) {
            return Err(SphereError::Setting {
                what: "phi0",
                value: self.phi0,
                expected: "0 <= phi0 < phi1 <= π/2",
            });
        }
        // e_n = exp(−4/(φ1 − φ0)²) underflows to 0 below this width, and
        // the profile with it (∞ · 0).
        if self.phi1 - self.phi0 < 0.1 {
            return Err(SphereError::Setting {
                what: "phi1 - phi0",
                value: self.phi1 - self.phi0,
                expected: "at least 0.1 rad (the profile's scale underflows below)",
            });
        }
        for (what, value) in [("alpha", self.alpha), ("beta", self.beta)] {
            if !(value.is_finite() && value > 0.0) {
                return Err(SphereError::Setting {
                    what,
                    value,
                    expected: "finite and positive",
                });
            }
        }
        Ok(())
    }
}
