//! The transforms a spectral model runs on: the whole sphere on one rank
//! ([`SerialTransforms`]) or one rank's patch of it on a process grid
//! ([`DistributedTransforms`]).

use core::ops::Range;

use burn_tensor::Tensor;
use ruda_tensor::{Group, ProcessGrid, TensorExt};

use crate::{
    DistributedInverseRealSht, DistributedInverseRealVectorSht, DistributedRealSht,
    DistributedRealVectorSht, InverseRealSht, InverseRealVectorSht, RealSht, RealVectorSht,
    ShtSpec, SphereError,
};

/// The scalar and vector transforms of one [`ShtSpec`] and the part of the
/// sphere this rank holds: what [`SphereCalculus`](super::SphereCalculus)
/// and [`ShallowWaterSolver`](super::ShallowWaterSolver) are written
/// against, so that one model runs serially and on a polar × azimuth grid.
///
/// Fields are `[.., lat_range, lon_range]` and coefficients `[..,
/// l_range, orders, 2]` (real and imaginary parts last); serially the
/// ranges are the whole grid and truncation. On a process grid every
/// method is collective over the grid's world.
pub trait SphereTransforms {
    /// The grid and truncation.
    fn spec(&self) -> &ShtSpec;
    /// This rank in the world (0 serially), for errors.
    fn rank(&self) -> usize;
    /// This rank's latitudes (indices into the grid's, north first).
    fn lat_range(&self) -> Range<usize>;
    /// This rank's longitudes.
    fn lon_range(&self) -> Range<usize>;
    /// This rank's degrees.
    fn l_range(&self) -> Range<usize>;
    /// This rank's orders, ascending.
    fn orders(&self) -> Vec<usize>;
    /// Scalar analysis: fields `[b, lat, lon]` to coefficients `[b, l, m, 2]`.
    ///
    /// # Errors
    /// As [`RealSht::forward`] (and [`DistributedRealSht::forward`]).
    fn sht(&self, x: Tensor<3>) -> Result<Tensor<4>, SphereError>;
    /// Scalar synthesis: `[b, l, m, 2]` to `[b, lat, lon]`.
    ///
    /// # Errors
    /// As [`InverseRealSht::forward`] (and
    /// [`crate::DistributedInverseRealSht::forward`]).
    fn isht(&self, c: Tensor<4>) -> Result<Tensor<3>, SphereError>;
    /// Vector analysis: tangential fields `[b, 2, lat, lon]` to spheroidal
    /// and toroidal coefficients `[b, 2, l, m, 2]`.
    ///
    /// # Errors
    /// As [`RealVectorSht::forward`] (and
    /// [`crate::DistributedRealVectorSht::forward`]).
    fn vsht(&self, x: Tensor<4>) -> Result<Tensor<5>, SphereError>;
    /// Vector synthesis: `[b, 2, l, m, 2]` to `[b, 2, lat, lon]`.
    ///
    /// # Errors
    /// As [`InverseRealVectorSht::forward`] (and
    /// [`crate::DistributedInverseRealVectorSht::forward`]).
    fn ivsht(&self, c: Tensor<5>) -> Result<Tensor<4>, SphereError>;
    /// The sum over every rank of `x` (itself serially); differentiable.
    ///
    /// # Errors
    /// [`SphereError::Primitive`] when the all-reduce fails.
    fn sum_over_ranks(&self, x: Tensor<1>) -> Result<Tensor<1>, SphereError>;

    /// Agree on the ranks' checks of their inputs before a collective
    /// operation `op`: `local` is this rank's verdict. A rank whose input
    /// was refused gets its own error back; every other rank gets
    /// [`SphereError::PeerInput`] naming the ranks refused, at once,
    /// instead of waiting for them in the operation's first collective.
    /// Serially (and by default) `local` itself: an implementation over
    /// several ranks must override it with an exchange, as
    /// [`DistributedTransforms`] does.
    ///
    /// # Errors
    /// `local`'s error; [`SphereError::PeerInput`] when another rank's
    /// input was refused; [`SphereError::Primitive`] when the exchange
    /// fails.
    ///
    /// # Example
    /// ```
    /// use ruda_sphere::shallow_water::{SerialTransforms, SphereTransforms};
    /// use ruda_sphere::{LatitudeGrid, ShtSpec};
    /// let t = SerialTransforms::new(ShtSpec::new(9, 16, LatitudeGrid::Equiangular)?);
    /// assert!(t.agree("example", Ok(())).is_ok());
    /// # Ok::<(), ruda_sphere::SphereError>(())
    /// ```
    fn agree(&self, op: &'static str, local: Result<(), SphereError>) -> Result<(), SphereError> {
        let _ = op;
        local
    }
}

/// The transforms of the whole sphere on one rank.
///
/// # Example
/// ```
/// use ruda_sphere::shallow_water::{SerialTransforms, SphereTransforms};
/// use ruda_sphere::{LatitudeGrid, ShtSpec};
/// let t = SerialTransforms::new(ShtSpec::new(9, 16, LatitudeGrid::Equiangular)?);
/// assert_eq!((t.lat_range(), t.l_range(), t.orders().len()), (0..9, 0..5, 5));
/// # Ok::<(), ruda_sphere::SphereError>(())
/// ```
#[derive(Debug)]
pub struct SerialTransforms {
    sht: RealSht,
    isht: InverseRealSht,
    vsht: RealVectorSht,
    ivsht: InverseRealVectorSht,
}

impl SerialTransforms {
    /// The four transforms of `spec`.
    pub fn new(spec: ShtSpec) -> Self {
        SerialTransforms {
            sht: RealSht::new(spec),
            isht: InverseRealSht::new(spec),
            vsht: RealVectorSht::new(spec),
            ivsht: InverseRealVectorSht::new(spec),
        }
    }
}

impl SphereTransforms for SerialTransforms {
    fn spec(&self) -> &ShtSpec {
        self.sht.spec()
    }
    fn rank(&self) -> usize {
        0
    }
    fn lat_range(&self) -> Range<usize> {
        0..self.spec().nlat()
    }
    fn lon_range(&self) -> Range<usize> {
        0..self.spec().nlon()
    }
    fn l_range(&self) -> Range<usize> {
        0..self.spec().lmax()
    }
    fn orders(&self) -> Vec<usize> {
        (0..self.spec().mmax()).collect()
    }
    fn sht(&self, x: Tensor<3>) -> Result<Tensor<4>, SphereError> {
        self.sht.forward(x)
    }
    fn isht(&self, c: Tensor<4>) -> Result<Tensor<3>, SphereError> {
        self.isht.forward(c)
    }
    fn vsht(&self, x: Tensor<4>) -> Result<Tensor<5>, SphereError> {
        self.vsht.forward(x)
    }
    fn ivsht(&self, c: Tensor<5>) -> Result<Tensor<4>, SphereError> {
        self.ivsht.forward(c)
    }
    fn sum_over_ranks(&self, x: Tensor<1>) -> Result<Tensor<1>, SphereError> {
        Ok(x)
    }
}

/// The transforms of one rank's patch of the sphere on a polar × azimuth
/// [`ProcessGrid`], laid out as [`SphereLayout`](crate::SphereLayout)
/// says. Every method is collective over the grid's world.
///
/// # Example
/// ```
/// use ruda_comm::LocalWorld;
/// use ruda_sphere::shallow_water::{DistributedTransforms, SphereTransforms};
/// use ruda_sphere::{LatitudeGrid, ShtSpec};
/// use ruda_tensor::ProcessGrid;
///
/// let spec = ShtSpec::new(9, 16, LatitudeGrid::Equiangular)?;
/// let parts = LocalWorld::new(4).run(|comm| {
///     let t = DistributedTransforms::new(&ProcessGrid::new(comm, 2, 2)?, spec)?;
///     Ok::<_, ruda_sphere::SphereError>((t.lat_range(), t.orders()))
/// }).unwrap();
/// assert_eq!(parts[3], (5..9, vec![1, 3]));
/// # Ok::<(), ruda_sphere::SphereError>(())
/// ```
#[derive(Debug)]
pub struct DistributedTransforms<G> {
    grid: ProcessGrid<G>,
    sht: DistributedRealSht<G>,
    isht: DistributedInverseRealSht<G>,
    vsht: DistributedRealVectorSht<G>,
    ivsht: DistributedInverseRealVectorSht<G>,
}

impl<G: Group> DistributedTransforms<G> {
    /// The four transforms of `spec` on `grid` (no communication).
    ///
    /// # Errors
    /// [`SphereError::Split`] when the grid does not fit the field (see
    /// [`SphereLayout::new`](crate::SphereLayout::new)).
    pub fn new(grid: &ProcessGrid<G>, spec: ShtSpec) -> Result<Self, SphereError> {
        Ok(DistributedTransforms {
            grid: grid.clone(),
            sht: DistributedRealSht::new(grid, spec)?,
            isht: DistributedInverseRealSht::new(grid, spec)?,
            vsht: DistributedRealVectorSht::new(grid, spec)?,
            ivsht: DistributedInverseRealVectorSht::new(grid, spec)?,
        })
    }

    /// The process grid.
    pub fn grid(&self) -> &ProcessGrid<G> {
        &self.grid
    }
}

impl<G: Group> SphereTransforms for DistributedTransforms<G> {
    fn spec(&self) -> &ShtSpec {
        self.sht.layout().spec()
    }
    fn rank(&self) -> usize {
        self.sht.layout().world_rank()
    }
    fn lat_range(&self) -> Range<usize> {
        self.sht.layout().lat_range()
    }
    fn lon_range(&self) -> Range<usize> {
        self.sht.layout().lon_range()
    }
    fn l_range(&self) -> Range<usize> {
        self.sht.layout().l_range()
    }
    fn orders(&self) -> Vec<usize> {
        self.sht.layout().orders()
    }
    fn sht(&self, x: Tensor<3>) -> Result<Tensor<4>, SphereError> {
        self.sht.forward(x)
    }
    fn isht(&self, c: Tensor<4>) -> Result<Tensor<3>, SphereError> {
        self.isht.forward(c)
    }
    fn vsht(&self, x: Tensor<4>) -> Result<Tensor<5>, SphereError> {
        self.vsht.forward(x)
    }
    fn ivsht(&self, c: Tensor<5>) -> Result<Tensor<4>, SphereError> {
        self.ivsht.forward(c)
    }
    fn agree(&self, op: &'static str, local: Result<(), SphereError>) -> Result<(), SphereError> {
        let all = crate::distributed::agree_words(&self.grid, op, local.is_ok().then_some(0));
        // A refused input is this rank's error even when the exchange fails.
        local?;
        all.map(|_| ())
    }

    fn sum_over_ranks(&self, x: Tensor<1>) -> Result<Tensor<1>, SphereError> {
        Ok(x.all_reduce(self.grid.world())?)
    }
}

/// Where transforms run: the whole sphere on one rank ([`SerialDomain`])
/// or a polar × azimuth [`ProcessGrid`]. A model that needs transforms of
/// several grids (a spherical neural operator's blocks) asks its domain for
/// each.
///
/// # Example
/// ```
/// use ruda_sphere::shallow_water::{SerialDomain, SphereDomain, SphereTransforms};
/// use ruda_sphere::{LatitudeGrid, ShtSpec};
/// let t = SerialDomain.transforms(ShtSpec::new(9, 16, LatitudeGrid::Equiangular)?)?;
/// assert_eq!(t.lat_range(), 0..9);
/// # Ok::<(), ruda_sphere::SphereError>(())
/// ```
pub trait SphereDomain: Clone + core::fmt::Debug + Send + Sync + 'static {
    /// The transforms this domain makes.
    type Transforms: SphereTransforms + core::fmt::Debug + Send + Sync + 'static;

    /// The transforms of `spec` on this domain.
    ///
    /// # Errors
    /// [`SphereError::Split`] when a process grid does not fit the field.
    fn transforms(&self, spec: ShtSpec) -> Result<Self::Transforms, SphereError>;

    /// The number of ranks the sphere is split over (1 serially).
    fn ranks(&self) -> usize;
}

/// The whole sphere on one rank: [`SerialTransforms`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SerialDomain;

impl SphereDomain for SerialDomain {
    type Transforms = SerialTransforms;

    fn transforms(&self, spec: ShtSpec) -> Result<SerialTransforms, SphereError> {
        Ok(SerialTransforms::new(spec))
    }

    fn ranks(&self) -> usize {
        1
    }
}

impl<G: Group> SphereDomain for ProcessGrid<G> {
    type Transforms = DistributedTransforms<G>;

    fn transforms(&self, spec: ShtSpec) -> Result<DistributedTransforms<G>, SphereError> {
        DistributedTransforms::new(self, spec)
    }

    fn ranks(&self) -> usize {
        self.polar_size() * self.azimuth_size()
    }
}
