//! The demo's data: a band-limited random field on the sphere and its
//! image under one and two steps of a linear map — solid-body rotation
//! about the polar axis, diffusion, and a linear coupling of the channels —
//! and a band-limited random wind (a tangential vector field) and its image
//! under one and two steps of the same rotation (advection by a solid-body
//! wind) and diffusion, which acts on its spheroidal and toroidal parts
//! alike.

use burn_tensor::{DType, Device, Tensor, TensorData};
use ruda_sphere::{
    InverseRealSht, InverseRealVectorSht, LatitudeGrid, Latitudes, RealSht, RealVectorSht, ShtSpec,
    SphereError,
};

/// Rotation per step about the polar axis, in radians.
pub const ROTATION: f64 = 0.1;
/// Strength of the channel coupling.
pub const COUPLING: f64 = 0.1;

/// The field, its targets and the grid, full size, the same on every rank.
#[derive(Clone, Debug)]
pub struct Problem {
    /// Grid and truncation.
    pub spec: ShtSpec,
    /// Channels.
    pub channels: usize,
    /// The input field `[channels, nlat, nlon]`.
    pub field: Vec<f64>,
    /// One step of the map applied to it.
    pub one_step: Vec<f64>,
    /// Two steps.
    pub two_steps: Vec<f64>,
    /// The input wind `[2, nlat, nlon]` (colatitude and longitude
    /// components).
    pub wind: Vec<f64>,
    /// One step of the wind's map applied to it.
    pub wind_one_step: Vec<f64>,
    /// Two steps.
    pub wind_two_steps: Vec<f64>,
    /// Quadrature weights of the latitudes (`∫ f dx` on `[-1, 1]`).
    pub lat_weights: Vec<f64>,
}

/// A deterministic generator (xorshift64*), values in [-1, 1).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let v = self.0.wrapping_mul(0x2545_F491_4F6C_DD1D);
        (v >> 11) as f64 / (1u64 << 52) as f64 - 1.0
    }
}

fn tensor<const D: usize>(v: Vec<f64>, shape: [usize; D]) -> Tensor<D> {
    Tensor::from_data(TensorData::new(v, shape), (&Device::flex(), DType::F64))
}

fn values<const D: usize>(t: Tensor<D>) -> Vec<f64> {
    t.into_data().try_to_vec::<f64>().expect("f64 values")
}

/// The map's spectral multiplier of degree `l`, order `m`:
/// `e^{−i m α} e^{−κ l(l+1)}` with `κ` damping the highest degree by `e^{−1}`.
pub fn multiplier(spec: &ShtSpec, l: usize, m: usize) -> (f64, f64) {
    let top = (spec.lmax() - 1) as f64;
    let kappa = 1.0 / (top * (top + 1.0)).max(1.0);
    let damp = (-kappa * (l * (l + 1)) as f64).exp();
    let phase = -(m as f64) * ROTATION;
    (damp * phase.cos(), damp * phase.sin())
}

/// The fixed channel coupling `A` (`[c, c]`, entries in [-1, 1)).
pub fn coupling(channels: usize) -> Vec<f64> {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    (0..channels * channels).map(|_| rng.next()).collect()
}

/// `c [.., lmax, mmax, 2]` (flattened, `fields` fields) times the map's
/// multiplier of each mode, in place.
fn multiply(spec: &ShtSpec, fields: usize, c: &mut [f64]) {
    let (l, m) = (spec.lmax(), spec.mmax());
    for f in 0..fields {
        for li in 0..l {
            for mi in 0..m {
                let i = ((f * l + li) * m + mi) * 2;
                let (a, b) = multiplier(spec, li, mi);
                let (re, im) = (c[i], c[i + 1]);
                c[i] = re * a - im * b;
                c[i + 1] = re * b + im * a;
            }
        }
    }
}

/// One step of the wind's map on `[2, nlat, nlon]` values.
fn wind_step(
    spec: &ShtSpec,
    vsht: &RealVectorSht,
    ivsht: &InverseRealVectorSht,
    v: &[f64],
) -> Result<Vec<f64>, SphereError> {
    let (h, w, l, m) = (spec.nlat(), spec.nlon(), spec.lmax(), spec.mmax());
    let c: Tensor<4> = vsht.forward(tensor(v.to_vec(), [2, h, w]))?;
    let mut c = values(c);
    multiply(spec, 2, &mut c);
    Ok(values(ivsht.forward::<4, 3>(tensor(c, [2, l, m, 2]))?))
}

/// One step of the map on `[c, nlat, nlon]` values.
fn step(
    spec: &ShtSpec,
    sht: &RealSht,
    isht: &InverseRealSht,
    channels: usize,
    v: &[f64],
) -> Result<Vec<f64>, SphereError> {
    let (h, w, l, m) = (spec.nlat(), spec.nlon(), spec.lmax(), spec.mmax());
    let c: Tensor<4> = sht.forward(tensor(v.to_vec(), [channels, h, w]))?;
    let mut c = values(c);
    multiply(spec, channels, &mut c);
    let s: Tensor<3> = isht.forward(tensor(c, [channels, l, m, 2]))?;
    let mut out = values(s);
    let a = coupling(channels);
    let n = h * w;
    for co in 0..channels {
        for ci in 0..channels {
            let k = COUPLING * a[co * channels + ci];
            for p in 0..n {
                out[co * n + p] += k * v[ci * n + p];
            }
        }
    }
    Ok(out)
}

impl Problem {
    /// The demo's problem on an `nlat × nlon` equiangular grid.
    ///
    /// # Errors
    /// [`SphereError::GridTooSmall`] for a grid with too few points.
    pub fn new(nlat: usize, nlon: usize, channels: usize) -> Result<Self, SphereError> {
        let spec = ShtSpec::new(nlat, nlon, LatitudeGrid::Equiangular)?;
        let (l, m) = (spec.lmax(), spec.mmax());
        let (sht, isht) = (RealSht::new(spec), InverseRealSht::new(spec));
        // Random coefficients with a spectrum falling as 1/(1 + l).
        let mut rng = Rng(0x2545_F491_4F6C_DD1D);
        let mut c = vec![0.0; channels * l * m * 2];
        for ch in 0..channels {
            for li in 0..l {
                for mi in 0..=li.min(m - 1) {
                    let i = ((ch * l + li) * m + mi) * 2;
                    let a = 1.0 / (1.0 + li as f64);
                    c[i] = a * rng.next();
                    if mi > 0 && 2 * mi != nlon {
                        c[i + 1] = a * rng.next();
                    }
                }
            }
        }
        let field: Tensor<3> = isht.forward(tensor(c, [channels, l, m, 2]))?;
        let field = values(field);
        let one_step = step(&spec, &sht, &isht, channels, &field)?;
        let two_steps = step(&spec, &sht, &isht, channels, &one_step)?;
        // A random wind: spheroidal and toroidal coefficients falling as
        // 1/(1 + l), none at degree 0 (no vector harmonic there) or at the
        // Nyquist order (which a real field cannot carry).
        let (vsht, ivsht) = (RealVectorSht::new(spec), InverseRealVectorSht::new(spec));
        let mut c = vec![0.0; 2 * l * m * 2];
        for part in 0..2 {
            for li in 1..l {
                for mi in 0..=li.min(m - 1) {
                    if 2 * mi == nlon {
                        continue;
                    }
                    let i = ((part * l + li) * m + mi) * 2;
                    let a = 1.0 / (1.0 + li as f64);
                    c[i] = a * rng.next();
                    if mi > 0 {
                        c[i + 1] = a * rng.next();
                    }
                }
            }
        }
        let wind = values(ivsht.forward::<4, 3>(tensor(c, [2, l, m, 2]))?);
        let wind_one_step = wind_step(&spec, &vsht, &ivsht, &wind)?;
        let wind_two_steps = wind_step(&spec, &vsht, &ivsht, &wind_one_step)?;
        let lat_weights = Latitudes::new(nlat, LatitudeGrid::Equiangular)?.weights;
        Ok(Problem {
            spec,
            channels,
            field,
            one_step,
            two_steps,
            wind,
            wind_one_step,
            wind_two_steps,
            lat_weights,
        })
    }
}
