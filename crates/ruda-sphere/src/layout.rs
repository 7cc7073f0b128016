//! Who holds what of a field and of its coefficients on a polar × azimuth
//! grid.

use alloc::vec::Vec;
use core::ops::Range;

use ruda_tensor::layout::compute_split_shapes;

use crate::legendre_kernel::pair_work;
use crate::{ShtSpec, SphereError};

/// The split of a transform's field and coefficients over a polar ×
/// azimuth process grid, in ruda's balanced chunks (`compute_split_shapes`:
/// the first `size % ranks` chunks one longer; a mirrored split's
/// latitudes are cut by work instead, see [`LatitudeSplit`]), so uneven
/// sizes are fine:
///
/// | what | split over | this rank's part |
/// |---|---|---|
/// | latitudes (field) | polar ranks | [`SphereLayout::lat_bands`] (one run: [`SphereLayout::lat_range`]) |
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
/// How latitudes go to polar ranks is a [`LatitudeSplit`]: one contiguous
/// run each (torch-harmonics' layout, [`SphereLayout::new`]), or a band of
/// northern latitudes with its southern mirror
/// ([`LatitudeSplit::Mirrored`], [`SphereLayout::with_split`]), which keeps
/// the transforms' north/south pairing on every rank. A rank's patch lists
/// its latitudes in ascending order: [`SphereLayout::lat_bands`].
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
    split: LatitudeSplit,
    /// This rank's latitudes: one run, or two (a band and its mirror)
    /// that do not touch.
    bands: Vec<Range<usize>>,
    lat: Vec<usize>,
    lon: Vec<usize>,
    l: Vec<usize>,
    m: Vec<usize>,
    lat_sub: Vec<usize>,
}

/// How the latitudes of a field are dealt to the polar ranks.
///
/// | split | polar rank `p` of `P` holds | Legendre work per rank |
/// |---|---|---|
/// | `Contiguous` | the `p`-th of `P` balanced runs of latitudes | each latitude walked on its own, unless the run happens to be symmetric about the equator (the whole grid's work over `P`, twice) |
/// | `Mirrored` | the `p`-th of `P` runs of the northern latitudes (the equator counted with them), balanced by work, and their mirrors in the south | each mirrored pair walked once, as the serial transform does (the whole grid's work over `P`) |
///
/// A rank of a mirrored split sums and differences each pair once for all
/// its degrees, so a polar split costs no more Legendre work than the
/// serial transform; the contiguous split is torch-harmonics' layout (what
/// its distributed transforms and makani's models expect).
///
/// Near the poles polar optimisation leaves out most orders (the
/// functions there are below 1e-17), so a pair's Legendre work grows from
/// the pole to the equator (at lmax 720 a band of pairs next to the
/// equator does about twice the work of one next to the pole). The
/// mirrored runs are therefore cut where the work is even, not the count:
/// each pair weighs the degrees its kernels walk over the orders kept
/// there, plus an equal share per latitude for the Fourier transforms
/// (which cost about half the Legendre step in all). Making a
/// mirrored layout runs polar optimisation's check over the whole grid
/// (as making a serial transform does; 50 ms at 1441 × 2880 on 2 cores).
///
/// # Example
/// ```
/// use ruda_sphere::{LatitudeGrid, LatitudeSplit, ShtSpec, SphereLayout};
/// let spec = ShtSpec::new(13, 22, LatitudeGrid::Equiangular)?; // 7 latitudes from pole to equator
/// let north = SphereLayout::with_split(spec, (0, 2), (0, 1), LatitudeSplit::Mirrored)?;
/// assert_eq!(north.lat_bands(), &[0..4, 9..13]); // 4 pairs from the poles
/// let middle = SphereLayout::with_split(spec, (1, 2), (0, 1), LatitudeSplit::Mirrored)?;
/// assert_eq!(middle.lat_bands(), &[4..9]); // 2 pairs and the equator: one run
/// assert_eq!(north.lat_sizes(), &[8, 5]);
/// # Ok::<(), ruda_sphere::SphereError>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum LatitudeSplit {
    /// One run of latitudes per polar rank, in balanced chunks (the first
    /// `nlat % P` one longer): torch-harmonics' layout.
    #[default]
    Contiguous,
    /// Polar rank `p` holds the `p`-th run of the northern latitudes (the
    /// first `ceil(nlat / 2)` from the north pole, the equator included
    /// when `nlat` is odd) and the mirror image of that run in the south;
    /// a band that reaches the equator is one run. The runs are cut where
    /// the estimated work (Legendre and Fourier) is even, each at least one
    /// latitude long.
    Mirrored,
}

impl LatitudeSplit {
    /// `contiguous` or `mirrored`.
    ///
    /// # Example
    /// ```
    /// assert_eq!(ruda_sphere::LatitudeSplit::Mirrored.name(), "mirrored");
    /// ```
    pub fn name(self) -> &'static str {
        match self {
            LatitudeSplit::Contiguous => "contiguous",
            LatitudeSplit::Mirrored => "mirrored",
        }
    }
}

fn range(sizes: &[usize], i: usize) -> Range<usize> {
    let start: usize = sizes[..i].iter().sum();
    start..start + sizes[i]
}

/// The Fourier transforms' cost against the Legendre step's, in all: a
/// rank of a 2×1 mirrored split at 1441 × 2880 f64 (4 fields, one thread
/// a rank, huge-page buffers) spent 105–115 ms in FFTs and 203–225 ms in
/// the Legendre step, both ranks together; 0.64 at 721 × 1440.
const FOURIER_PER_LEGENDRE: f64 = 0.5;

/// The estimated cost of each latitude pair from the north pole to the
/// equator (the last is the equator alone when `nlat` is odd): the
/// Legendre work its kernels walk ([`pair_work`]) plus the Fourier
/// transforms' share, [`FOURIER_PER_LEGENDRE`] of the Legendre total
/// spread evenly over the latitudes (a pair has two, the equator one).
fn pair_costs(spec: &ShtSpec) -> Vec<f64> {
    let nlat = spec.nlat();
    let work = pair_work(spec);
    let fourier = FOURIER_PER_LEGENDRE * work.iter().sum::<f64>() / nlat as f64;
    work.iter()
        .enumerate()
        .map(|(k, w)| {
            w + if 2 * k + 1 == nlat {
                fourier
            } else {
                2.0 * fourier
            }
        })
        .collect()
}

/// Cut `costs` into `ranks` runs of at least one item each whose costs are
/// as even as a cut between items allows: run `j` ends at the item
/// boundary nearest to `j / ranks` of the total (each run's cost is at most
/// the mean plus the largest item). Needs `1 ≤ ranks ≤ costs.len()`.
fn even_runs(costs: &[f64], ranks: usize) -> Vec<usize> {
    let n = costs.len();
    let mut prefix = Vec::with_capacity(n + 1);
    prefix.push(0.0);
    for c in costs {
        prefix.push(prefix.last().copied().unwrap_or(0.0) + c);
    }
    let total = prefix[n];
    let mut sizes = Vec::with_capacity(ranks);
    let mut start = 0;
    for j in 1..ranks {
        let target = total * j as f64 / ranks as f64;
        // Leave at least one item for this run and each later one.
        let (lo, hi) = (start + 1, n - (ranks - j));
        let end = (lo..=hi)
            .min_by(|&a, &b| {
                (prefix[a] - target)
                    .abs()
                    .total_cmp(&(prefix[b] - target).abs())
            })
            .unwrap_or(lo);
        sizes.push(end - start);
        start = end;
    }
    sizes.push(n - start);
    sizes
}

/// A polar rank's latitudes (its bands) and every polar rank's count.
type Dealt = (Vec<Range<usize>>, Vec<usize>);

/// Polar rank `p`'s latitudes (bands) and every polar rank's count of
/// latitudes under `split`, or what could not be split and its count.
fn deal_latitudes(
    spec: &ShtSpec,
    split: LatitudeSplit,
    (p, ranks): (usize, usize),
) -> Result<Dealt, (&'static str, usize)> {
    let nlat = spec.nlat();
    match split {
        LatitudeSplit::Contiguous => {
            let sizes = compute_split_shapes(nlat, ranks).map_err(|_| ("latitudes", nlat))?;
            Ok((vec![range(&sizes, p)], sizes))
        }
        LatitudeSplit::Mirrored => {
            // Walked latitudes: the northern half and the equator.
            let half = nlat.div_ceil(2);
            if ranks == 0 || ranks > half {
                return Err(("latitudes from the pole to the equator", half));
            }
            if ranks == 1 {
                // The whole grid: no cut to make (and no work to weigh).
                let all = 0..nlat;
                return Ok((vec![all], vec![nlat]));
            }
            let pairs = even_runs(&pair_costs(spec), ranks);
            let rows = |i: usize| {
                let north = range(&pairs, i);
                let south = nlat - north.end..nlat - north.start;
                if south.start <= north.end {
                    // The band reaches the equator: one run.
                    let run = north.start..south.end;
                    vec![run]
                } else {
                    vec![north, south]
                }
            };
            let sizes = (0..ranks)
                .map(|i| rows(i).iter().map(|r| r.len()).sum())
                .collect();
            Ok((rows(p), sizes))
        }
    }
}

impl SphereLayout {
    /// The layout of `spec` for the rank at `(polar_rank, polar_size)`,
    /// `(azimuth_rank, azimuth_size)`, latitudes split
    /// [`LatitudeSplit::Contiguous`].
    ///
    /// # Errors
    /// [`SphereError::Split`] when an axis has more ranks than latitudes,
    /// longitudes, degrees or orders, or a polar chunk fewer latitudes
    /// than there are azimuth ranks.
    pub fn new(
        spec: ShtSpec,
        polar: (usize, usize),
        azimuth: (usize, usize),
    ) -> Result<Self, SphereError> {
        Self::with_split(spec, polar, azimuth, LatitudeSplit::Contiguous)
    }

    /// [`SphereLayout::new`] with the latitudes dealt to the polar ranks as
    /// `split` says.
    ///
    /// # Errors
    /// As [`SphereLayout::new`]; with [`LatitudeSplit::Mirrored`], when
    /// there are more polar ranks than latitudes from a pole to the
    /// equator (`ceil(nlat / 2)`).
    ///
    /// # Example
    /// ```
    /// use ruda_sphere::{LatitudeGrid, LatitudeSplit, ShtSpec, SphereLayout};
    /// let spec = ShtSpec::new(12, 22, LatitudeGrid::Equiangular)?; // 6 pairs
    /// let l = SphereLayout::with_split(spec, (1, 3), (0, 2), LatitudeSplit::Mirrored)?;
    /// assert_eq!(l.lat_bands(), &[2..4, 8..10]);
    /// // 7 polar ranks for 6 latitudes from pole to equator.
    /// let e = SphereLayout::with_split(spec, (0, 7), (0, 1), LatitudeSplit::Mirrored).unwrap_err();
    /// assert!(matches!(e, ruda_sphere::SphereError::Split { size: 6, ranks: 7, .. }), "{e}");
    /// # Ok::<(), ruda_sphere::SphereError>(())
    /// ```
    pub fn with_split(
        spec: ShtSpec,
        (polar_rank, polar_size): (usize, usize),
        (azimuth_rank, azimuth_size): (usize, usize),
        lat_split: LatitudeSplit,
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
        let (bands, lat) = deal_latitudes(&spec, lat_split, (polar_rank, polar_size)).map_err(
            |(what, size)| SphereError::Split {
                rank,
                axis: "polar",
                what,
                size,
                ranks: polar_size,
            },
        )?;
        let lon = split("azimuth", "longitudes", spec.nlon(), azimuth_size)?;
        let l = split("polar", "degrees", spec.lmax(), polar_size)?;
        let m = split("azimuth", "orders", spec.mmax(), azimuth_size)?;
        // The smallest polar chunk must still split over the azimuth ranks.
        let smallest = *lat.iter().min().expect("at least one polar rank");
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
            split: lat_split,
            bands,
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

    /// How the latitudes are dealt to the polar ranks.
    ///
    /// # Example
    /// ```
    /// use ruda_sphere::{LatitudeGrid, LatitudeSplit, ShtSpec, SphereLayout};
    /// let spec = ShtSpec::new(13, 22, LatitudeGrid::Equiangular)?;
    /// assert_eq!(SphereLayout::new(spec, (0, 2), (0, 1))?.split(), LatitudeSplit::Contiguous);
    /// # Ok::<(), ruda_sphere::SphereError>(())
    /// ```
    pub fn split(&self) -> LatitudeSplit {
        self.split
    }

    /// This rank's latitudes of the field, ascending, as one run or (a
    /// [`LatitudeSplit::Mirrored`] band away from the equator) two: its
    /// patch holds them in this order.
    ///
    /// # Example
    /// ```
    /// use ruda_sphere::{LatitudeGrid, LatitudeSplit, ShtSpec, SphereLayout};
    /// let spec = ShtSpec::new(13, 22, LatitudeGrid::Equiangular)?;
    /// let contiguous = SphereLayout::new(spec, (0, 2), (0, 1))?;
    /// assert_eq!(contiguous.lat_bands(), &[contiguous.lat_range()]);
    /// let mirrored = SphereLayout::with_split(spec, (0, 2), (0, 1), LatitudeSplit::Mirrored)?;
    /// assert_eq!(mirrored.lat_bands(), &[0..4, 9..13]);
    /// # Ok::<(), ruda_sphere::SphereError>(())
    /// ```
    pub fn lat_bands(&self) -> &[Range<usize>] {
        &self.bands
    }

    /// This rank's latitudes of the field when they are one run: always
    /// with [`LatitudeSplit::Contiguous`], and with
    /// [`LatitudeSplit::Mirrored`] for the band that reaches the equator
    /// (or a single polar rank).
    ///
    /// # Panics
    /// When this rank's latitudes are two runs (a mirrored band away from
    /// the equator): use [`SphereLayout::lat_bands`], which every layout
    /// answers.
    pub fn lat_range(&self) -> Range<usize> {
        match self.bands.as_slice() {
            [one] => one.clone(),
            bands => panic!(
                "SphereLayout::lat_range: polar rank {} of {} holds the latitudes {bands:?} (a {} split), not one run: use lat_bands",
                self.polar.0,
                self.polar.1,
                self.split.name()
            ),
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::LatitudeGrid;

    /// Run costs of `sizes` over `costs`.
    fn run_costs(costs: &[f64], sizes: &[usize]) -> Vec<f64> {
        let mut start = 0;
        sizes
            .iter()
            .map(|&n| {
                let c = costs[start..start + n].iter().sum();
                start += n;
                c
            })
            .collect()
    }

    #[test]
    fn even_runs_are_never_empty_and_at_most_the_mean_plus_one_item() {
        // Flat, rising, spiky and zero costs, 1 to 9 items over every
        // count of runs that fits.
        let mut seed = 7u64;
        let mut next = || {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 11) as f64 / (1u64 << 53) as f64
        };
        for n in 1..=9 {
            let profiles: Vec<Vec<f64>> = vec![
                vec![1.0; n],
                (0..n).map(|k| (k * k) as f64).collect(),
                (0..n).map(|_| next() * 10.0).collect(),
                (0..n)
                    .map(|k| if k == n / 2 { 100.0 } else { 1.0 })
                    .collect(),
                vec![0.0; n],
            ];
            for costs in profiles {
                for ranks in 1..=n {
                    let sizes = even_runs(&costs, ranks);
                    assert_eq!(sizes.len(), ranks);
                    assert_eq!(sizes.iter().sum::<usize>(), n);
                    assert!(
                        sizes.iter().all(|&s| s >= 1),
                        "{costs:?} / {ranks}: {sizes:?}"
                    );
                    let total: f64 = costs.iter().sum();
                    let largest = costs.iter().copied().fold(0.0, f64::max);
                    for c in run_costs(&costs, &sizes) {
                        assert!(
                            c <= total / ranks as f64 + largest + 1e-9,
                            "{costs:?} / {ranks}: {sizes:?}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn mirrored_runs_even_out_the_legendre_work_that_grows_to_the_equator() {
        // At lmax 180 a pair next to the equator does over twice the
        // Legendre work of one next to the pole; runs of equal counts
        // would give the polar rank far less, the mirrored split gives
        // every rank its share within one pair.
        let spec = ShtSpec::new(361, 720, LatitudeGrid::Equiangular).unwrap();
        let work = pair_work(&spec);
        assert_eq!(work.len(), 181);
        assert!(work[180] > 2.0 * work[10], "{} vs {}", work[180], work[10]);
        let pairs = pair_costs(&spec);
        assert_eq!(pairs.len(), 181);
        // The equator's latitude has one Fourier share, every pair two.
        let fourier = FOURIER_PER_LEGENDRE * work.iter().sum::<f64>() / 361.0;
        assert!((pairs[180] - work[180] - fourier).abs() < 1e-9 * pairs[180]);
        assert!((pairs[10] - work[10] - 2.0 * fourier).abs() < 1e-9 * pairs[10]);
        let cost = |k: usize| pairs[k];
        let largest = (0..181).map(cost).fold(0.0, f64::max);
        for ranks in 2..=8 {
            let layouts: Vec<SphereLayout> = (0..ranks)
                .map(|p| {
                    SphereLayout::with_split(spec, (p, ranks), (0, 1), LatitudeSplit::Mirrored)
                        .unwrap()
                })
                .collect();
            let costs: Vec<f64> = layouts
                .iter()
                .map(|l| {
                    let north = l.lat_bands()[0].start;
                    let walked = l.lat_sizes()[l.polar.0].div_ceil(2);
                    (north..north + walked).map(cost).sum()
                })
                .collect();
            let total: f64 = costs.iter().sum();
            for (p, c) in costs.iter().enumerate() {
                assert!(
                    (c - total / ranks as f64).abs() <= largest,
                    "{ranks} ranks, rank {p}: {c} of {total}"
                );
            }
            // Counts are not even: the polar rank holds more latitudes.
            assert!(layouts[0].lat_sizes()[0] > layouts[0].lat_sizes()[ranks - 1]);
        }
    }
}
