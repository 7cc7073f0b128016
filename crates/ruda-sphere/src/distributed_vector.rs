//! The vector transforms on a polar × azimuth [`ProcessGrid`]: the same
//! recipe as the scalar ones ([`crate::DistributedRealSht`]), with the
//! vector Legendre stage; its degree shift and the degree factors act on
//! the whole column of degrees, before the polar reduce-scatter (forward)
//! and after the polar gather (inverse).

use burn_tensor::Tensor;
use ruda_tensor::{Group, ProcessGrid};

use crate::distributed::Part;
use crate::legendre_stage::Kind;
use crate::{LatitudeSplit, ShtSpec, SphereError, SphereLayout};

/// [`RealVectorSht`](crate::RealVectorSht) on a process grid: each rank
/// passes its patch `[.., 2, lat, lon_range]` of the tangential field
/// and gets its block `[.., 2, l_range, orders, 2]` of the spheroidal and
/// toroidal coefficients (see [`SphereLayout`]). Collective: every rank of
/// the grid calls it with the same leading dimensions.
///
/// # Example
/// ```
/// use burn_tensor::{DType, Device, Tensor, TensorData};
/// use ruda_comm::LocalWorld;
/// use ruda_sphere::{DistributedRealVectorSht, LatitudeGrid, ShtSpec};
/// use ruda_tensor::ProcessGrid;
///
/// let spec = ShtSpec::new(9, 16, LatitudeGrid::Equiangular)?;
/// let shapes = LocalWorld::new(4).run(|comm| {
///     let grid = ProcessGrid::new(comm, 2, 2)?;
///     let vsht = DistributedRealVectorSht::new(&grid, spec)?;
///     let (lat, lon) = (vsht.layout().lat_range(), vsht.layout().lon_range());
///     let wind = Tensor::<3>::from_data(
///         TensorData::new(vec![1.0f64; 2 * lat.len() * lon.len()], [2, lat.len(), lon.len()]),
///         (&Device::flex(), DType::F64),
///     );
///     let c: Tensor<4> = vsht.forward(wind)?;
///     Ok::<_, ruda_sphere::SphereError>(c.dims())
/// }).unwrap();
/// assert_eq!(shapes[0], [2, 3, 3, 2]); // lmax = mmax = 5 split [3, 2] both ways
/// assert_eq!(shapes[3], [2, 2, 2, 2]);
/// # Ok::<(), ruda_sphere::SphereError>(())
/// ```
#[derive(Debug)]
pub struct DistributedRealVectorSht<G> {
    part: Part<G>,
}

impl<G: Group> DistributedRealVectorSht<G> {
    /// The transform of `spec` on `grid` (computes the recurrence
    /// coefficients of this rank's orders and latitudes; no communication).
    ///
    /// # Errors
    /// [`SphereError::Split`] when the grid does not fit the field (see
    /// [`SphereLayout::new`]).
    pub fn new(grid: &ProcessGrid<G>, spec: ShtSpec) -> Result<Self, SphereError> {
        Ok(DistributedRealVectorSht {
            part: Part::new(grid, spec, Kind::Vector, true, LatitudeSplit::Contiguous)?,
        })
    }

    /// [`DistributedRealVectorSht::new`] with the latitudes dealt to the polar ranks as
    /// `split` says ([`LatitudeSplit::Mirrored`] keeps each rank's
    /// latitudes in mirrored pairs: see [`SphereLayout::lat_bands`] for
    /// the rows of its patch).
    ///
    /// # Errors
    /// As [`SphereLayout::with_split`].
    pub fn with_split(
        grid: &ProcessGrid<G>,
        spec: ShtSpec,
        split: LatitudeSplit,
    ) -> Result<Self, SphereError> {
        Ok(DistributedRealVectorSht {
            part: Part::new(grid, spec, Kind::Vector, true, split)?,
        })
    }

    /// Who holds which latitudes, longitudes, degrees and orders.
    pub fn layout(&self) -> &SphereLayout {
        self.part.layout()
    }

    /// Transform this rank's patch `x` (`[.., 2, lat, lon_range]`,
    /// `D ≥ 3`) into its block of coefficients (`E = D + 1` dimensions).
    ///
    /// # Errors
    /// As [`RealVectorSht::forward`](crate::RealVectorSht::forward) (naming
    /// this rank) on the ranks whose input is refused, and
    /// [`SphereError::PeerInput`] naming them on the others (the ranks
    /// agree on their inputs before any data moves);
    /// [`SphereError::LeadingDims`] on every rank when the ranks pass
    /// different numbers of fields, and [`SphereError::Primitive`] when a
    /// primitive fails.
    pub fn forward<const D: usize, const E: usize>(
        &self,
        x: Tensor<D>,
    ) -> Result<Tensor<E>, SphereError> {
        self.part.analyse("DistributedRealVectorSht::forward", x)
    }
}

/// [`InverseRealVectorSht`](crate::InverseRealVectorSht) on a process grid:
/// each rank passes its block `[.., 2, l_range, orders, 2]` of the
/// coefficients and gets its patch `[.., 2, lat, lon_range]` of the
/// tangential field. Collective.
///
/// # Example
/// ```
/// use burn_tensor::{DType, Device, Tensor};
/// use ruda_comm::LocalWorld;
/// use ruda_sphere::{DistributedInverseRealVectorSht, LatitudeGrid, ShtSpec};
/// use ruda_tensor::ProcessGrid;
///
/// let spec = ShtSpec::new(9, 16, LatitudeGrid::Equiangular)?;
/// let shapes = LocalWorld::new(2).run(|comm| {
///     let grid = ProcessGrid::new(comm, 2, 1)?;
///     let ivsht = DistributedInverseRealVectorSht::new(&grid, spec)?;
///     let (l, m) = (ivsht.layout().l_range(), ivsht.layout().orders());
///     let c = Tensor::<4>::zeros([2, l.len(), m.len(), 2], (&Device::flex(), DType::F64));
///     let wind: Tensor<3> = ivsht.forward(c)?;
///     Ok::<_, ruda_sphere::SphereError>(wind.dims())
/// }).unwrap();
/// assert_eq!(shapes, vec![[2, 5, 16], [2, 4, 16]]);
/// # Ok::<(), ruda_sphere::SphereError>(())
/// ```
#[derive(Debug)]
pub struct DistributedInverseRealVectorSht<G> {
    part: Part<G>,
}

impl<G: Group> DistributedInverseRealVectorSht<G> {
    /// The inverse transform of `spec` on `grid` (computes the recurrence
    /// coefficients of this rank's orders and latitudes; no communication).
    ///
    /// # Errors
    /// As [`DistributedRealVectorSht::new`].
    pub fn new(grid: &ProcessGrid<G>, spec: ShtSpec) -> Result<Self, SphereError> {
        Ok(DistributedInverseRealVectorSht {
            part: Part::new(grid, spec, Kind::Vector, false, LatitudeSplit::Contiguous)?,
        })
    }

    /// [`DistributedInverseRealVectorSht::new`] with the latitudes dealt to the polar ranks as
    /// `split` says ([`LatitudeSplit::Mirrored`] keeps each rank's
    /// latitudes in mirrored pairs: see [`SphereLayout::lat_bands`] for
    /// the rows of its patch).
    ///
    /// # Errors
    /// As [`SphereLayout::with_split`].
    pub fn with_split(
        grid: &ProcessGrid<G>,
        spec: ShtSpec,
        split: LatitudeSplit,
    ) -> Result<Self, SphereError> {
        Ok(DistributedInverseRealVectorSht {
            part: Part::new(grid, spec, Kind::Vector, false, split)?,
        })
    }

    /// Who holds which latitudes, longitudes, degrees and orders.
    pub fn layout(&self) -> &SphereLayout {
        self.part.layout()
    }

    /// Synthesise this rank's patch (`E = D − 1` dimensions, the last three
    /// `[2, lat, lon_range]`) from its block of coefficients `c`
    /// (`[.., 2, l_range, orders, 2]`, `D ≥ 4`).
    ///
    /// # Errors
    /// As [`DistributedRealVectorSht::forward`].
    pub fn forward<const D: usize, const E: usize>(
        &self,
        c: Tensor<D>,
    ) -> Result<Tensor<E>, SphereError> {
        self.part
            .synthesise("DistributedInverseRealVectorSht::forward", c)
    }
}
