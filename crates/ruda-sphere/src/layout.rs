//! Who holds what of a field and of its coefficients on a polar × azimuth
//! grid.

use alloc::vec::Vec;
use core::ops::Range;

use ruda_tensor::layout::compute_split_shapes;

use crate::{ShtSpec, SphereError};

/// The split of a transform's field and coefficients over a polar ×
/// azimuth process grid, in ruda's balanced chunks (`compute_split_shapes`:
/// the first `size % ranks` chunks one longer), so uneven sizes are fine:
///
/// | what | split over | this rank's part |
/// |---|---|---|
/// | latitudes (field) | polar ranks | [`SphereLayout::lat_range`] |
/// | longitudes (field) | azimuth ranks | [`SphereLayout::lon_range`] |
/// | degrees `l` (coefficients) | polar ranks | [`SphereLayout::l_range`] |
/// | orders `m` (coefficients) | azimuth ranks, dealt round-robin | [`SphereLayout::orders`] |
///
/// Orders are dealt like cards — azimuth rank `a` of `A` holds `a, a + A,
/// a + 2A, …` — because order `m` has only `lmax − m` non-zero degrees: in
/// contiguous chunks the rank with the low orders would do about three
/// times the Legendre work of the one with the high orders (two ranks);
/// dealt, every rank does about the same. A rank's block of coefficients
/// lists its orders in that (ascending) sequence.
///
/// Inside the transforms a rank's latitudes are split once more over the
/// azimuth ranks (while longitudes are whole for the Fourier transform),
/// so each polar chunk needs at least as many latitudes as there are
/// azimuth ranks.
///
/// # Example
/// ```
/// use ruda_sphere::{LatitudeGrid, ShtSpec, SphereLayout};
/// let spec = ShtSpec::new(13, 22, LatitudeGrid::Equiangular)?; // lmax = mmax = 7
/// let l = SphereLayout::new(spec, (1, 2), (2, 4))?;           // polar rank 1 of 2, azimuth 2 of 4
/// assert_eq!((l.lat_range(), l.lon_range()), (7..13, 12..17));
/// assert_eq!((l.l_range(), l.orders()), (4..7, vec![2, 6]));
/// # Ok::<(), ruda_sphere::SphereError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SphereLayout {
    spec: ShtSpec,
    polar: (usize, usize),
    azimuth: (usize, usize),
    lat: Vec<usize>,
    lon: Vec<usize>,
    l: Vec<usize>,
    m: Vec<usize>,
    lat_sub: Vec<usize>,
}

fn range(sizes: &[usize], i: usize) -> Range<usize> {
    let start: usize = sizes[..i].iter().sum();
    start..start + sizes[i]
}

impl SphereLayout {
    /// The layout of `spec` for the rank at `(polar_rank, polar_size)`,
    /// `(azimuth_rank, azimuth_size)`.
    ///
    /// # Errors
    /// [`SphereError::Split`] when an axis has more ranks than latitudes,
    /// longitudes, degrees or orders, or a polar chunk fewer latitudes
    /// than there are azimuth ranks.
    pub fn new(
        spec: ShtSpec,
        (polar_rank, polar_size): (usize, usize),
        (azimuth_rank, azimuth_size): (usize, usize),
    ) -> Result<Self, SphereError> {
        let rank = polar_rank * azimuth_size + azimuth_rank;
        let split = |axis, what, size, ranks| {
            compute_split_shapes(size, ranks).map_err(|_| SphereError::Split {
                rank,
                axis,
                what,
                size,
                ranks,
            })
        };
        let lat = split("polar", "latitudes", spec.nlat(), polar_size)?;
        let lon = split("azimuth", "longitudes", spec.nlon(), azimuth_size)?;
        let l = split("polar", "degrees", spec.lmax(), polar_size)?;
        let m = split("azimuth", "orders", spec.mmax(), azimuth_size)?;
        // The smallest polar chunk must still split over the azimuth ranks.
        let smallest = *lat.last().expect("at least one polar rank");
        split(
            "azimuth",
            "the latitudes of a polar chunk",
            smallest,
            azimuth_size,
        )?;
        let lat_sub = split(
            "azimuth",
            "the latitudes of a polar chunk",
            lat[polar_rank],
            azimuth_size,
        )?;
        Ok(SphereLayout {
            spec,
            polar: (polar_rank, polar_size),
            azimuth: (azimuth_rank, azimuth_size),
            lat,
            lon,
            l,
            m,
            lat_sub,
        })
    }

    /// The grid and truncation.
    pub fn spec(&self) -> &ShtSpec {
        &self.spec
    }

    /// This rank's latitudes of the field.
    pub fn lat_range(&self) -> Range<usize> {
        range(&self.lat, self.polar.0)
    }

    /// This rank's longitudes of the field.
    pub fn lon_range(&self) -> Range<usize> {
        range(&self.lon, self.azimuth.0)
    }

    /// This rank's degrees of the coefficients.
    pub fn l_range(&self) -> Range<usize> {
        range(&self.l, self.polar.0)
    }

    /// This rank's orders of the coefficients, ascending: `a, a + A, …`
    /// for azimuth rank `a` of `A`.
    pub fn orders(&self) -> Vec<usize> {
        (self.azimuth.0..self.spec.mmax())
            .step_by(self.azimuth.1)
            .collect()
    }

    /// Latitudes held by each polar rank.
    pub fn lat_sizes(&self) -> &[usize] {
        &self.lat
    }

    /// Longitudes held by each azimuth rank.
    pub fn lon_sizes(&self) -> &[usize] {
        &self.lon
    }

    /// Degrees held by each polar rank.
    pub fn l_sizes(&self) -> &[usize] {
        &self.l
    }

    /// How many orders each azimuth rank holds.
    pub fn m_sizes(&self) -> &[usize] {
        &self.m
    }

    /// This rank's latitudes split over the azimuth ranks (the layout while
    /// longitudes are whole).
    pub(crate) fn lat_sub_sizes(&self) -> &[usize] {
        &self.lat_sub
    }

    /// This rank in the world: `polar_rank × azimuth_size + azimuth_rank`.
    pub fn world_rank(&self) -> usize {
        self.polar.0 * self.azimuth.1 + self.azimuth.0
    }
}
