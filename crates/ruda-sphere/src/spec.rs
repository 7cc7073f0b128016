//! What a transform maps between: the grid and the truncation.

use crate::{LatitudeGrid, SphereError};

/// A spherical harmonic transform's grid (`nlat × nlon` on a
/// [`LatitudeGrid`]) and truncation (degrees `0..lmax`, orders `0..mmax`),
/// chosen as torch-harmonics 0.9's `truncate_sht` chooses them: by default
/// `lmax` is the grid's [`LatitudeGrid::default_lmax`] and `mmax = nlon/2 +
/// 1`, and both are then cut to the smaller of the two (a triangular
/// truncation).
///
/// # Example
/// ```
/// use ruda_sphere::{LatitudeGrid, ShtSpec};
/// let s = ShtSpec::new(181, 360, LatitudeGrid::Equiangular)?;
/// assert_eq!((s.lmax(), s.mmax()), (91, 91));
/// let g = ShtSpec::new(180, 360, LatitudeGrid::LegendreGauss)?;
/// assert_eq!((g.lmax(), g.mmax()), (180, 180));
/// # Ok::<(), ruda_sphere::SphereError>(())
/// ```
///
/// The harmonics carry the Condon–Shortley phase `(−1)^m` by default, as
/// torch-harmonics' transforms do unless told `csphase=False`;
/// [`ShtSpec::with_csphase`] leaves it out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ShtSpec {
    nlat: usize,
    nlon: usize,
    lmax: usize,
    mmax: usize,
    grid: LatitudeGrid,
    csphase: bool,
}

impl ShtSpec {
    /// The default truncation of an `nlat × nlon` grid.
    ///
    /// # Errors
    /// [`SphereError::GridTooSmall`] for too few latitudes (below
    /// [`LatitudeGrid::min_nlat`]) or no longitude.
    pub fn new(nlat: usize, nlon: usize, grid: LatitudeGrid) -> Result<Self, SphereError> {
        Self::with_truncation(nlat, nlon, grid, None, None)
    }

    /// A chosen truncation: `lmax` and `mmax` (exclusive) replace the
    /// defaults where given, then both become the smaller of the two.
    ///
    /// # Errors
    /// As [`ShtSpec::new`], and [`SphereError::Truncation`] for a zero
    /// cut-off or orders beyond `nlon/2 + 1`.
    ///
    /// # Example
    /// ```
    /// use ruda_sphere::{LatitudeGrid, ShtSpec};
    /// let s = ShtSpec::with_truncation(33, 64, LatitudeGrid::Equiangular, Some(10), None)?;
    /// assert_eq!((s.lmax(), s.mmax()), (10, 10));
    /// assert!(ShtSpec::with_truncation(33, 64, LatitudeGrid::Equiangular, None, Some(40)).is_err());
    /// # Ok::<(), ruda_sphere::SphereError>(())
    /// ```
    pub fn with_truncation(
        nlat: usize,
        nlon: usize,
        grid: LatitudeGrid,
        lmax: Option<usize>,
        mmax: Option<usize>,
    ) -> Result<Self, SphereError> {
        if nlat < grid.min_nlat() || nlon == 0 {
            return Err(SphereError::GridTooSmall {
                grid,
                nlat,
                nlon,
                min_nlat: grid.min_nlat(),
            });
        }
        let nyquist = nlon / 2 + 1;
        let (l, m) = (
            lmax.unwrap_or(grid.default_lmax(nlat)),
            mmax.unwrap_or(nyquist),
        );
        if l == 0 || m == 0 || m > nyquist {
            return Err(SphereError::Truncation {
                lmax: l,
                mmax: m,
                nlon,
            });
        }
        let cut = l.min(m);
        Ok(ShtSpec {
            nlat,
            nlon,
            lmax: cut,
            mmax: cut,
            grid,
            csphase: true,
        })
    }

    /// Latitudes of the grid.
    pub fn nlat(&self) -> usize {
        self.nlat
    }

    /// Longitudes of the grid.
    pub fn nlon(&self) -> usize {
        self.nlon
    }

    /// Degrees kept: `0..lmax`.
    pub fn lmax(&self) -> usize {
        self.lmax
    }

    /// Orders kept: `0..mmax`.
    pub fn mmax(&self) -> usize {
        self.mmax
    }

    /// The latitude grid.
    pub fn grid(&self) -> LatitudeGrid {
        self.grid
    }

    /// Whether the harmonics carry the Condon–Shortley phase `(−1)^m`
    /// (torch-harmonics' `csphase`; `true` unless
    /// [`ShtSpec::with_csphase`] said otherwise).
    pub fn csphase(&self) -> bool {
        self.csphase
    }

    /// The same grid and truncation with the Condon–Shortley phase on or
    /// off. Without it (`csphase = false`, what torch-harmonics'
    /// `ShallowWaterSolver` uses) every coefficient of odd order changes
    /// sign, for the scalar and the vector transforms alike; fields are
    /// the same.
    ///
    /// # Example
    /// ```
    /// use burn_tensor::{DType, Device, Tensor};
    /// use ruda_sphere::{LatitudeGrid, RealSht, ShtSpec};
    ///
    /// let with = ShtSpec::new(9, 16, LatitudeGrid::Equiangular)?;
    /// let without = with.with_csphase(false);
    /// assert!(with.csphase() && !without.csphase());
    /// let x = Tensor::<2>::random([9, 16], burn_tensor::Distribution::Default, (&Device::flex(), DType::F64));
    /// let a: Tensor<3> = RealSht::new(with).forward(x.clone())?;
    /// let b: Tensor<3> = RealSht::new(without).forward(x)?;
    /// // Order 1 flips sign, order 2 does not.
    /// let diff = |m: usize, sign: f64| -> f64 {
    ///     let (a, b) = (a.clone().narrow(1, m, 1), b.clone().narrow(1, m, 1));
    ///     (a - b.mul_scalar(sign)).abs().max().into_scalar()
    /// };
    /// assert!(diff(1, -1.0) < 1e-15 && diff(2, 1.0) < 1e-15);
    /// # Ok::<(), ruda_sphere::SphereError>(())
    /// ```
    pub fn with_csphase(self, csphase: bool) -> Self {
        ShtSpec { csphase, ..self }
    }
}
