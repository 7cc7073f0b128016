//! Training data from the shallow-water solver: torch-harmonics'
//! `PdeDataset` for the shallow-water equations.

use core::ops::Range;

use burn_tensor::{DType, Device, Tensor, TensorData};
use ruda_sphere::shallow_water::{
    Jet, Planet, SerialTransforms, ShallowWaterSolver, SphereTransforms,
};
use ruda_sphere::{LatitudeGrid, ShtSpec};

use crate::SfnoError;
use crate::cache::SampleCache;

/// The Mach number of the random initial states (torch-harmonics' 0.2).
const MACH: f64 = 0.2;

/// The version of the data this code makes: raise it whenever a change
/// (here or in ruda-sphere's solver) changes a sample, so that caches of
/// the old samples are not read back.
const DATA_VERSION: u32 = 1;

/// Pairs (state, state after `dt`) of the shallow-water equations on an
/// `nlat × nlon` equiangular grid, made on the fly as torch-harmonics'
/// `PdeDataset` makes them: a random initial state
/// ([`ShallowWaterSolver::random`], Mach 0.2, one seed per sample), stepped
/// `dt / dt_solver` times by the solver at truncation `lmax = ⌈nlat/3⌉`,
/// both on the grid as `[3, nlat, nlon]` (geopotential, vorticity,
/// divergence), normalised per field by the mean and variance of the
/// first sample's input (seed 0). The same seed gives the same sample
/// anywhere, so every rank can make what it needs; a sample is recomputed
/// each time it is asked for, or kept on disk with
/// [`with_cache`](Self::with_cache).
///
/// # Example
/// ```
/// use burn_tensor::Device;
/// use ruda_sfno::ShallowWaterData;
/// let data = ShallowWaterData::new(16, 32, 3600.0, 900.0, &Device::flex())?;
/// let (x, y) = data.sample(3)?;
/// assert_eq!((x.len(), y.len()), (3 * 16 * 32, 3 * 16 * 32));
/// assert_eq!(data.sample(3)?.1, y);
/// # Ok::<(), ruda_sfno::SfnoError>(())
/// ```
#[derive(Debug)]
pub struct ShallowWaterData {
    solver: ShallowWaterSolver<SerialTransforms>,
    nsteps: usize,
    jets: bool,
    mean: [f64; 3],
    std: [f64; 3],
    cache: Option<SampleCache>,
}

impl ShallowWaterData {
    /// Pairs `dt` seconds apart on an `nlat × nlon` grid, the solver
    /// stepping `dt_solver` seconds (`dt` is rounded to a whole number of
    /// solver steps), in f64 on `device`.
    ///
    /// # Errors
    /// [`SfnoError::Setting`] for a `dt` below `dt_solver` or not finite; the solver's
    /// errors (grid too small, time step not positive).
    pub fn new(
        nlat: usize,
        nlon: usize,
        dt: f64,
        dt_solver: f64,
        device: &Device,
    ) -> Result<Self, SfnoError> {
        let solver = pde_solver(nlat, nlon, dt_solver, device)?;
        let nsteps = (dt / dt_solver).round();
        if !nsteps.is_finite() || nsteps < 1.0 {
            return Err(SfnoError::Setting {
                what: "dt",
                value: dt,
                expected: "at least one solver step",
            });
        }
        let mut data = ShallowWaterData {
            solver,
            nsteps: nsteps as usize,
            jets: false,
            mean: [0.0; 3],
            std: [1.0; 3],
            cache: None,
        };
        let first = data.grid(data.solver.random(0, MACH)?)?;
        let n = nlat * nlon;
        for f in 0..3 {
            let v = &first[f * n..(f + 1) * n];
            let mean = v.iter().sum::<f64>() / n as f64;
            let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n.max(2) - 1) as f64;
            data.mean[f] = mean;
            data.std[f] = if var > 0.0 { var.sqrt() } else { 1.0 };
        }
        Ok(data)
    }

    /// The same pairs with every odd seed's initial state a balanced jet
    /// of the Galewsky family ([`Jet::random`]) instead of a random state:
    /// data that cover the slow, balanced dynamics of the Galewsky test as
    /// well as the fast gravity waves of unbalanced states. The
    /// normalisation stays that of the random sample 0.
    ///
    /// # Example
    /// ```
    /// use burn_tensor::Device;
    /// use ruda_sfno::ShallowWaterData;
    /// let plain = ShallowWaterData::new(16, 32, 3600.0, 900.0, &Device::flex())?;
    /// let mixed = ShallowWaterData::new(16, 32, 3600.0, 900.0, &Device::flex())?.with_jets(true);
    /// assert_eq!(plain.sample(2)?, mixed.sample(2)?);
    /// assert_ne!(plain.sample(3)?, mixed.sample(3)?);
    /// # Ok::<(), ruda_sfno::SfnoError>(())
    /// ```
    pub fn with_jets(self, jets: bool) -> Self {
        // The data mix is part of the cache's key: re-key it.
        let root = self.cache.as_ref().map(|c| c.root().to_path_buf());
        let data = ShallowWaterData {
            jets,
            cache: None,
            ..self
        };
        match root {
            Some(root) => data.with_cache(root),
            None => data,
        }
    }

    /// The same pairs, kept under `root` once made and read back from
    /// there afterwards (by this run, a later one, or another process):
    /// see [`SampleCache`] for the layout. A sample read back is the one
    /// made, to the bit; settings that change a sample (grid, time steps,
    /// [`with_jets`](Self::with_jets), normalisation) use another
    /// subfolder.
    ///
    /// # Example
    /// ```
    /// use burn_tensor::Device;
    /// use ruda_sfno::ShallowWaterData;
    /// let root = std::env::temp_dir().join(format!("ruda-cache-doc-{}", std::process::id()));
    /// let data = ShallowWaterData::new(16, 32, 3600.0, 900.0, &Device::flex())?.with_cache(&root);
    /// let made = data.sample(5)?; // made, and written
    /// assert!(data.cache().unwrap().path(5).exists());
    /// assert_eq!(data.sample(5)?, made); // read back
    /// std::fs::remove_dir_all(&root).unwrap();
    /// # Ok::<(), ruda_sfno::SfnoError>(())
    /// ```
    pub fn with_cache(self, root: impl AsRef<std::path::Path>) -> Self {
        let settings = self.settings();
        ShallowWaterData {
            cache: Some(SampleCache::new(root.as_ref(), &settings)),
            ..self
        }
    }

    /// The cache, when [`with_cache`](Self::with_cache) gave one.
    pub fn cache(&self) -> Option<&SampleCache> {
        self.cache.as_ref()
    }

    /// Everything a sample depends on, as text (the cache's key).
    fn settings(&self) -> String {
        let spec = self.solver.calculus().transforms().spec();
        format!(
            "shallow-water data v{DATA_VERSION} (ruda-sfno {}) nlat={} nlon={} lmax={} mmax={} grid={:?} csphase={} dt_solver={:?} nsteps={} random=mach {MACH:?} jets={} mean={:?} std={:?} planet={:?}",
            env!("CARGO_PKG_VERSION"),
            spec.nlat(),
            spec.nlon(),
            spec.lmax(),
            spec.mmax(),
            spec.grid(),
            spec.csphase(),
            self.solver.dt(),
            self.nsteps,
            self.jets,
            self.mean,
            self.std,
            self.solver.planet()
        )
    }

    /// The solver.
    pub fn solver(&self) -> &ShallowWaterSolver<SerialTransforms> {
        &self.solver
    }

    /// Solver steps per pair.
    pub fn nsteps(&self) -> usize {
        self.nsteps
    }

    /// The normalisation: each field's mean and standard deviation.
    pub fn normalisation(&self) -> ([f64; 3], [f64; 3]) {
        (self.mean, self.std)
    }

    /// A state on the grid, normalised, `[3, nlat, nlon]` flattened.
    fn grid(&self, state: Tensor<4>) -> Result<Vec<f64>, SfnoError> {
        let g = self.solver.to_grid(state)?;
        let [_, nlat, nlon] = g.dims();
        let mut v = g
            .into_data()
            .try_to_vec::<f64>()
            .expect("the solver runs in f64");
        let n = nlat * nlon;
        for f in 0..3 {
            for x in &mut v[f * n..(f + 1) * n] {
                *x = (*x - self.mean[f]) / self.std[f];
            }
        }
        Ok(v)
    }

    /// Sample `seed`: the normalised state and the state `dt` later, each
    /// `[3, nlat, nlon]` flattened.
    ///
    /// # Errors
    /// The solver's errors; with a cache, [`SfnoError::Cache`] when a
    /// cached file cannot be read or is not a sample of this grid, or the
    /// sample cannot be written.
    pub fn sample(&self, seed: u64) -> Result<(Vec<f64>, Vec<f64>), SfnoError> {
        let Some(cache) = &self.cache else {
            return self.make(seed);
        };
        let spec = self.solver.calculus().transforms().spec();
        let len = 3 * spec.nlat() * spec.nlon();
        if let Some(pair) = cache.read(seed, len)? {
            return Ok(pair);
        }
        let (x, y) = self.make(seed)?;
        cache.write(seed, &x, &y)?;
        Ok((x, y))
    }

    /// Sample `seed`, made by the solver.
    fn make(&self, seed: u64) -> Result<(Vec<f64>, Vec<f64>), SfnoError> {
        let start = if self.jets && seed % 2 == 1 {
            self.solver.jet(&Jet::random(seed, self.solver.planet()))?
        } else {
            self.solver.random(seed, MACH)?
        };
        let end = self.solver.step(start.clone(), self.nsteps)?;
        Ok((self.grid(start)?, self.grid(end)?))
    }

    /// The Galewsky jet (normalised as the samples) and `steps` states
    /// `dt` apart after it: `steps + 1` states `[3, nlat, nlon]`.
    ///
    /// # Errors
    /// The solver's errors.
    pub fn galewsky(&self, steps: usize) -> Result<Vec<Vec<f64>>, SfnoError> {
        let mut state = self.solver.galewsky()?;
        let mut out = vec![self.grid(state.clone())?];
        for _ in 0..steps {
            state = self.solver.step(state, self.nsteps)?;
            out.push(self.grid(state.clone())?);
        }
        Ok(out)
    }
}

/// The solver `PdeDataset` steps: torch-harmonics' `ShallowWaterSolver` on an
/// `nlat × nlon` equiangular grid truncated at `lmax = mmax = ⌈nlat/3⌉`,
/// without the Condon–Shortley phase (as torch-harmonics' solver makes its
/// transforms), Earth's constants, time step `dt_solver` seconds, in f64 on
/// `device`.
///
/// # Errors
/// The solver's: a grid too small, a time step not finite and positive.
///
/// # Example
/// ```
/// use burn_tensor::Device;
/// let s = ruda_sfno::pde_solver(32, 64, 600.0, &Device::flex())?;
/// assert_eq!(s.calculus().transforms().spec().lmax(), 11);
/// # use ruda_sphere::shallow_water::SphereTransforms;
/// # Ok::<(), ruda_sfno::SfnoError>(())
/// ```
pub fn pde_solver(
    nlat: usize,
    nlon: usize,
    dt_solver: f64,
    device: &Device,
) -> Result<ShallowWaterSolver<SerialTransforms>, SfnoError> {
    let lmax = nlat.div_ceil(3);
    let spec = ShtSpec::with_truncation(
        nlat,
        nlon,
        LatitudeGrid::Equiangular,
        Some(lmax),
        Some(lmax),
    )?
    .with_csphase(false);
    Ok(ShallowWaterSolver::new(
        SerialTransforms::new(spec),
        dt_solver,
        Planet::default(),
        device,
        DType::F64,
    )?)
}

/// The patch `[b, c, rows, cols]` of fields `[b, c, h, w]` (flattened) as a
/// tensor on `device` in `dtype`.
///
/// # Panics
/// When `v` does not hold `b·c·h·w` values or the ranges leave `h × w`
/// (slicing, as indexing a slice does).
///
/// # Example
/// ```
/// use burn_tensor::{DType, Device};
/// let v: Vec<f64> = (0..2 * 3 * 4).map(|i| i as f64).collect();
/// let p = ruda_sfno::patch(&v, [1, 2, 3, 4], 1..3, 2..4, &Device::flex(), DType::F64);
/// assert_eq!(p.into_data().to_vec::<f64>().unwrap(), vec![6.0, 7.0, 10.0, 11.0, 18.0, 19.0, 22.0, 23.0]);
/// ```
pub fn patch(
    v: &[f64],
    [b, c, h, w]: [usize; 4],
    rows: Range<usize>,
    cols: Range<usize>,
    device: &Device,
    dtype: DType,
) -> Tensor<4> {
    assert!(
        v.len() == b * c * h * w && rows.end <= h && cols.end <= w,
        "patch: {} values for [{b}, {c}, {h}, {w}], rows {rows:?}, cols {cols:?}",
        v.len()
    );
    let mut out = Vec::with_capacity(b * c * rows.len() * cols.len());
    for bc in 0..b * c {
        for r in rows.clone() {
            let at = (bc * h + r) * w;
            out.extend_from_slice(&v[at + cols.start..at + cols.end]);
        }
    }
    Tensor::from_data(
        TensorData::new(out, [b, c, rows.len(), cols.len()]),
        (device, dtype),
    )
}
