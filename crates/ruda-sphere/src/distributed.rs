//! The transforms on a polar × azimuth [`ProcessGrid`], built only from
//! ruda's differentiable primitives (torch-harmonics'
//! `DistributedRealSHT` recipe):
//!
//! forward: azimuth transpose (longitudes whole, latitudes split) → real
//! Fourier transform → azimuth transpose back (orders split) → Legendre
//! sums over this rank's latitudes → `reduce_from_scatter_to` over the
//! polar ranks (degrees split);
//!
//! inverse, the mirror image: `gather_from_copy_to` over the polar ranks
//! (degrees whole) → Legendre synthesis of this rank's latitudes → azimuth
//! transpose (orders whole) → inverse Fourier transform → azimuth transpose
//! back (longitudes split).
//!
//! Each primitive carries its adjoint, so gradients flow through both
//! directions exactly as through the serial transforms.
//!
//! With one azimuth rank (a polar split only) on the host kernels, the
//! transposes are the identity and a rank's steps from its latitudes to
//! every coefficient are the serial transforms' fused operation on its
//! latitudes, between the same polar collectives; the scalar transforms'
//! partial sums are degrees first (`[l, m, b, 2]`, each order's rows as
//! the kernel writes them, [`crate::fused::Fused::degrees_first`]), so that
//! the polar reduce-scatter and gather along the degrees move contiguous
//! rows and only this rank's share of the degrees is permuted; the vector
//! transforms' are `[b, l, m, 2]` ([`crate::sht::fused_analysis`]).

use burn_tensor::Tensor;
use ruda_tensor::tensor_api as ta;
use ruda_tensor::{Group, ProcessGrid};

use crate::fourier::Modes;
use crate::fourier::SpectralLayout::{OrdersFirst, RowsFirst};
use crate::fused::Fused;
use crate::legendre_stage::{Kind, LegendreStage, check_components};
use crate::on_device::DeviceConstants;
use crate::route::{
    check_dtype, host_kernels, lon_forward, lon_inverse, sht_analysis, sht_synthesis,
};
use crate::shapes::{check_rank, flatten_coefficients, flatten_field, swap_orders, unflatten};
use crate::sht::{fused_analysis, fused_synthesis};
use crate::{LatitudeSplit, ShtSpec, SphereError, SphereLayout};

/// Every rank's word after each checked its own input (one small
/// all-gather): `word` is this rank's (not negative), or `None` when its
/// input was refused. [`SphereError::PeerInput`] naming the ranks that
/// refused, when any did (a rank that refused returns its own error before
/// looking at this result).
pub(crate) fn agree_words<G: Group>(
    grid: &ProcessGrid<G>,
    op: &'static str,
    word: Option<i64>,
) -> Result<Vec<i64>, SphereError> {
    let world = grid.world();
    // No rank has a negative word: the refusal's mark.
    let all = world.exchange_words(&[word.unwrap_or(-1)])?;
    let offenders: Vec<usize> = (0..all.len()).filter(|&r| all[r] < 0).collect();
    if !offenders.is_empty() {
        return Err(SphereError::PeerInput {
            op,
            rank: world.rank(),
            offenders,
        });
    }
    Ok(all)
}

/// Bits of an agreement word below the count of fields: a layout
/// fingerprint (16) and whether the rank can run the fused kernels (1).
const WORD_TAIL: u32 = 17;

/// A 16-bit fingerprint of `layout`'s latitude split: its kind and every
/// polar rank's count of latitudes (FNV-1a, folded).
fn fingerprint(layout: &SphereLayout) -> u16 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let kind = match layout.split() {
        LatitudeSplit::Contiguous => 1,
        LatitudeSplit::Mirrored => 2,
    };
    for v in core::iter::once(kind).chain(layout.lat_sizes().iter().map(|&n| n as u64)) {
        for byte in v.to_le_bytes() {
            h = (h ^ u64::from(byte)).wrapping_mul(0x100_0000_01b3);
        }
    }
    (h ^ (h >> 16) ^ (h >> 32) ^ (h >> 48)) as u16
}

/// Agree on the inputs before any data moves ([`agree_words`]): `local`
/// is this rank's own verdict on its input (its flattened tensor and
/// leading dimensions, or the typed error its shape or dtype gave). A rank
/// whose input was refused returns its own error; its peers return
/// [`SphereError::PeerInput`] naming it, instead of waiting for it in a
/// collective; ranks that pass different numbers of fields all get
/// [`SphereError::LeadingDims`], ranks whose layouts differ
/// [`SphereError::Layouts`]. The last value says whether every rank can
/// run the fused kernels (one azimuth rank, a tensor on the host kernels),
/// so that all ranks take the same path (the two send their partial sums
/// in different layouts).
fn agree_inputs<G: Group, const D: usize>(
    grid: &ProcessGrid<G>,
    op: &'static str,
    local: Result<(Tensor<D>, Vec<usize>), SphereError>,
    layout: &SphereLayout,
) -> Result<(Tensor<D>, Vec<usize>, bool), SphereError> {
    let fused = match &local {
        Ok((t, _)) => grid.azimuth_size() == 1 && host_kernels(&t.device()),
        Err(_) => false,
    };
    let print = fingerprint(layout);
    let tail = (i64::from(print) << 1) | i64::from(fused);
    let fields = local.as_ref().ok().map(|(_, lead)| {
        i64::try_from(lead.iter().product::<usize>())
            .unwrap_or(i64::MAX)
            .min(i64::MAX >> WORD_TAIL)
    });
    let all = agree_words(grid, op, fields.map(|n| (n << WORD_TAIL) | tail));
    // A refused input is this rank's error even when the exchange fails.
    let (x, lead) = local?;
    let all = all?;
    let rank = grid.world().rank();
    if all.iter().any(|&w| Some(w >> WORD_TAIL) != fields) {
        return Err(SphereError::LeadingDims {
            op,
            rank,
            sizes: all
                .iter()
                .map(|&w| (w >> WORD_TAIL).max(0) as usize)
                .collect(),
        });
    }
    let prints: Vec<u16> = all.iter().map(|&w| (w >> 1) as u16).collect();
    if prints.iter().any(|&p| p != print) {
        return Err(SphereError::Layouts {
            op,
            rank,
            fingerprints: prints,
        });
    }
    Ok((x, lead, all.iter().all(|&w| w & 1 == 1)))
}

fn layout_of<G: Group>(
    grid: &ProcessGrid<G>,
    spec: ShtSpec,
    split: LatitudeSplit,
) -> Result<SphereLayout, SphereError> {
    SphereLayout::with_split(
        spec,
        (grid.polar_rank(), grid.polar_size()),
        (grid.azimuth_rank(), grid.azimuth_size()),
        split,
    )
}

/// One rank's part of a distributed transform, scalar or vector: its grid,
/// its layout and the Legendre stage of its orders and latitudes.
#[derive(Debug)]
pub(crate) struct Part<G> {
    grid: ProcessGrid<G>,
    layout: SphereLayout,
    stage: LegendreStage,
    /// The DFT matrix on the devices other than Flex it has run on.
    dft: DeviceConstants,
}

impl<G: Group> Part<G> {
    /// The part of `spec`'s transform (`forward`: analysis) on `grid`, its
    /// latitudes dealt as `split` says.
    pub(crate) fn new(
        grid: &ProcessGrid<G>,
        spec: ShtSpec,
        kind: Kind,
        forward: bool,
        split: LatitudeSplit,
    ) -> Result<Self, SphereError> {
        let layout = layout_of(grid, spec, split)?;
        let stage = LegendreStage::new(&spec, kind, &layout.orders(), layout.lat_bands(), forward);
        Ok(Part {
            grid: grid.clone(),
            layout,
            stage,
            dft: DeviceConstants::default(),
        })
    }

    /// Who holds which latitudes, longitudes, degrees and orders.
    pub(crate) fn layout(&self) -> &SphereLayout {
        &self.layout
    }

    /// This rank's patch `x` (`[.., lat, lon_range]`; vector:
    /// `[.., 2, lat, lon_range]`) → its block of coefficients.
    pub(crate) fn analyse<const D: usize, const E: usize>(
        &self,
        op: &'static str,
        x: Tensor<D>,
    ) -> Result<Tensor<E>, SphereError> {
        let (l, s) = (&self.layout, self.layout.spec());
        let patch = [l.lat_sizes()[self.grid.polar_rank()], l.lon_range().len()];
        let local = check_rank::<D, E>(op, 1)
            .and_then(|()| flatten_field(op, l.world_rank(), x, patch))
            .and_then(|(x, lead)| {
                check_components(op, l.world_rank(), self.stage.kind(), &lead, &patch)?;
                check_dtype(op, x.dtype())?;
                Ok((x, lead))
            });
        let g = &self.grid;
        let (x, lead, fused) = agree_inputs(g, op, local, l)?;
        let block = [l.l_range().len(), l.m_sizes()[g.azimuth_rank()], 2];
        if fused {
            // This rank's latitudes' part of every coefficient, then the
            // polar sum keeping this rank's degrees.
            let c = match &self.stage {
                LegendreStage::Scalar(step) => {
                    // [l, m, b, 2] as the kernel writes it: the sum cuts
                    // contiguous rows, and only this rank's share of the
                    // degrees is permuted to [b, l, m, 2].
                    let f = Fused {
                        step: step.clone(),
                        modes: Modes::analysis(s.nlon(), s.mmax(), RowsFirst),
                        degrees_first: true,
                    };
                    let partial = sht_analysis(op, x, f)?;
                    ta::reduce_from_scatter_to_polar_region(g, partial, 0)?.permute([2, 0, 1, 3])
                }
                // [b, l, m, 2].
                LegendreStage::Vector(_) => {
                    let partial = fused_analysis(op, s, &self.stage, x)?;
                    ta::reduce_from_scatter_to_polar_region(g, partial, 1)?
                }
            };
            return Ok(unflatten(c, &lead, &block));
        }
        // [b, lat, lon]: longitudes whole, this rank's latitudes split
        // over the azimuth ranks.
        let x = ta::distributed_transpose_azimuth(g, x, (1, 2), l.lon_sizes())?;
        // [m, lat, b, 2]: all orders.
        let modes = Modes::analysis(s.nlon(), s.mmax(), OrdersFirst).dealt(g.azimuth_size());
        let f = lon_forward(op, x, modes, &self.dft)?;
        // Orders split over the azimuth ranks, latitudes whole again.
        let f = ta::distributed_transpose_azimuth(g, f, (0, 1), l.lat_sub_sizes())?;
        // [m, l, b, 2]: this rank's latitudes' part of every degree.
        let partial = self.stage.analysis(op, f)?;
        // Sum the latitudes' contributions, keep this rank's degrees.
        let c = ta::reduce_from_scatter_to_polar_region(g, partial, 1)?;
        Ok(unflatten(swap_orders(c), &lead, &block))
    }

    /// This rank's block of coefficients `c` (`[.., l_range, orders, 2]`;
    /// vector: `[.., 2, l_range, orders, 2]`) → its patch of the field.
    pub(crate) fn synthesise<const D: usize, const E: usize>(
        &self,
        op: &'static str,
        c: Tensor<D>,
    ) -> Result<Tensor<E>, SphereError> {
        let (l, s) = (&self.layout, self.layout.spec());
        let g = &self.grid;
        let block = [l.l_range().len(), l.m_sizes()[g.azimuth_rank()]];
        let local = check_rank::<D, E>(op, -1)
            .and_then(|()| flatten_coefficients(op, l.world_rank(), c, block))
            .and_then(|(c, lead)| {
                check_components(
                    op,
                    l.world_rank(),
                    self.stage.kind(),
                    &lead,
                    &[block[0], block[1], 2],
                )?;
                check_dtype(op, c.dtype())?;
                Ok((c, lead))
            });
        let (c, lead, fused) = agree_inputs(g, op, local, l)?;
        let patch = [l.lat_sizes()[g.polar_rank()], l.lon_range().len()];
        if fused {
            // All degrees (backward: reduce-scatter), then this rank's
            // latitudes from them.
            let x = match &self.stage {
                LegendreStage::Scalar(step) => {
                    // [l, m, b, 2]: each order's rows as the kernel reads
                    // them, gathered as contiguous rows.
                    let c = ta::gather_from_copy_to_polar_region(
                        g,
                        c.permute([1, 2, 0, 3]),
                        0,
                        l.l_sizes(),
                    )?;
                    let f = Fused {
                        step: step.clone(),
                        modes: Modes::synthesis(s.nlon(), s.mmax(), RowsFirst),
                        degrees_first: true,
                    };
                    sht_synthesis(op, c, f)?
                }
                // [b, l, m, 2].
                LegendreStage::Vector(_) => {
                    let c = ta::gather_from_copy_to_polar_region(g, c, 1, l.l_sizes())?;
                    fused_synthesis(op, s, &self.stage, c)?
                }
            };
            return Ok(unflatten(x, &lead, &patch));
        }
        // [m, l, b, 2] with all degrees of this rank's orders (backward:
        // reduce-scatter).
        let c = ta::gather_from_copy_to_polar_region(g, swap_orders(c), 1, l.l_sizes())?;
        // [m, lat, b, 2]: this rank's latitudes.
        let f = self.stage.synthesis(op, c)?;
        // Orders whole, this rank's latitudes split over the azimuth ranks.
        let f = ta::distributed_transpose_azimuth(g, f, (1, 0), l.m_sizes())?;
        // [b, lat, lon] with all longitudes.
        let modes = Modes::synthesis(s.nlon(), s.mmax(), OrdersFirst).dealt(g.azimuth_size());
        let x = lon_inverse(op, f, modes, &self.dft)?;
        // Longitudes split again, latitudes whole.
        let x = ta::distributed_transpose_azimuth(g, x, (2, 1), l.lat_sub_sizes())?;
        Ok(unflatten(x, &lead, &patch))
    }
}

/// [`RealSht`](crate::RealSht) on a process grid: each rank passes its
/// patch `[.., lat, lon_range]` of the field (`lat`: its latitudes,
/// [`SphereLayout::lat_bands`], one run unless the split is
/// [`LatitudeSplit::Mirrored`]) and gets its block
/// `[.., l_range, orders, 2]` of the coefficients (see [`SphereLayout`]: its
/// degrees `l_range()` and its orders `orders()`).
/// Collective: every rank of the grid calls it with the same leading
/// dimensions.
///
/// # Example
/// ```
/// use burn_tensor::{DType, Device, Tensor, TensorData};
/// use ruda_comm::LocalWorld;
/// use ruda_sphere::{DistributedRealSht, LatitudeGrid, ShtSpec};
/// use ruda_tensor::{Group, ProcessGrid};
///
/// let spec = ShtSpec::new(9, 16, LatitudeGrid::Equiangular)?;
/// let shapes = LocalWorld::new(4).run(|comm| {
///     let grid = ProcessGrid::new(comm, 2, 2)?;
///     let sht = DistributedRealSht::new(&grid, spec)?;
///     let (lat, lon) = (sht.layout().lat_range(), sht.layout().lon_range());
///     let x = Tensor::<3>::from_data(
///         TensorData::new(vec![1.0f64; 3 * lat.len() * lon.len()], [3, lat.len(), lon.len()]),
///         (&Device::flex(), DType::F64),
///     );
///     let c: Tensor<4> = sht.forward(x)?;
///     Ok::<_, ruda_sphere::SphereError>(c.dims())
/// }).unwrap();
/// assert_eq!(shapes[0], [3, 3, 3, 2]); // lmax = mmax = 5 split [3, 2] both ways
/// assert_eq!(shapes[3], [3, 2, 2, 2]);
/// # Ok::<(), ruda_sphere::SphereError>(())
/// ```
#[derive(Debug)]
pub struct DistributedRealSht<G> {
    part: Part<G>,
}

impl<G: Group> DistributedRealSht<G> {
    /// The transform of `spec` on `grid`, latitudes split
    /// [`LatitudeSplit::Contiguous`] (computes the recurrence coefficients
    /// of this rank's orders and latitudes; no communication).
    ///
    /// # Errors
    /// [`SphereError::Split`] when the grid does not fit the field (see
    /// [`SphereLayout::new`]).
    pub fn new(grid: &ProcessGrid<G>, spec: ShtSpec) -> Result<Self, SphereError> {
        Ok(DistributedRealSht {
            part: Part::new(grid, spec, Kind::Scalar, true, LatitudeSplit::Contiguous)?,
        })
    }

    /// [`DistributedRealSht::new`] with the latitudes dealt to the polar ranks as
    /// `split` says ([`LatitudeSplit::Mirrored`] keeps each rank's
    /// latitudes in mirrored pairs: see [`SphereLayout::lat_bands`] for
    /// the rows of its patch).
    ///
    /// # Errors
    /// As [`SphereLayout::with_split`].
    ///
    /// # Example
    /// ```
    /// use burn_tensor::{DType, Device, Tensor};
    /// use ruda_comm::LocalWorld;
    /// use ruda_sphere::{DistributedRealSht, LatitudeGrid, LatitudeSplit, ShtSpec};
    /// use ruda_tensor::ProcessGrid;
    ///
    /// let spec = ShtSpec::new(9, 16, LatitudeGrid::Equiangular)?; // 5 latitudes pole to equator
    /// let shapes = LocalWorld::new(2).run(|comm| {
    ///     let grid = ProcessGrid::new(comm, 2, 1)?;
    ///     let sht = DistributedRealSht::with_split(&grid, spec, LatitudeSplit::Mirrored)?;
    ///     let rows = sht.layout().lat_sizes()[grid.polar_rank()];
    ///     let x = Tensor::<3>::ones([3, rows, 16], (&Device::flex(), DType::F64));
    ///     let c: Tensor<4> = sht.forward(x)?;
    ///     Ok::<_, ruda_sphere::SphereError>((sht.layout().lat_bands().to_vec(), c.dims()))
    /// }).unwrap();
    /// assert_eq!(shapes[0].0, vec![0..3, 6..9]); // 3 pairs from the poles
    /// assert_eq!(shapes[1], (vec![3..6], [3, 2, 5, 2])); // 1 pair and the equator; degrees 3..5
    /// # Ok::<(), ruda_sphere::SphereError>(())
    /// ```
    pub fn with_split(
        grid: &ProcessGrid<G>,
        spec: ShtSpec,
        split: LatitudeSplit,
    ) -> Result<Self, SphereError> {
        Ok(DistributedRealSht {
            part: Part::new(grid, spec, Kind::Scalar, true, split)?,
        })
    }

    /// Who holds which latitudes, longitudes, degrees and orders.
    pub fn layout(&self) -> &SphereLayout {
        self.part.layout()
    }

    /// Transform this rank's patch `x` (`[.., lat, lon_range]`, `D ≥
    /// 2`) into its block of coefficients (`E = D + 1` dimensions).
    ///
    /// # Errors
    /// As [`RealSht::forward`](crate::RealSht::forward) (naming this rank),
    /// on the ranks whose input is refused, and [`SphereError::PeerInput`]
    /// naming them on the others (the ranks agree on their inputs before
    /// any data moves); [`SphereError::LeadingDims`] on every rank when the
    /// ranks pass different numbers of fields, and
    /// [`SphereError::Primitive`] when a primitive fails.
    pub fn forward<const D: usize, const E: usize>(
        &self,
        x: Tensor<D>,
    ) -> Result<Tensor<E>, SphereError> {
        self.part.analyse("DistributedRealSht::forward", x)
    }
}

/// [`InverseRealSht`](crate::InverseRealSht) on a process grid: each rank
/// passes its block `[.., l_range, orders, 2]` of the coefficients and
/// gets its patch `[.., lat, lon_range]` of the field. Collective.
///
/// # Example
/// ```
/// use burn_tensor::{DType, Device, Tensor, TensorData};
/// use ruda_comm::LocalWorld;
/// use ruda_sphere::{DistributedInverseRealSht, LatitudeGrid, ShtSpec};
/// use ruda_tensor::{Group, ProcessGrid};
///
/// let spec = ShtSpec::new(9, 16, LatitudeGrid::Equiangular)?;
/// let shapes = LocalWorld::new(2).run(|comm| {
///     let grid = ProcessGrid::new(comm, 2, 1)?;
///     let isht = DistributedInverseRealSht::new(&grid, spec)?;
///     let (l, m) = (isht.layout().l_range(), isht.layout().orders());
///     let c = Tensor::<3>::zeros([l.len(), m.len(), 2], (&Device::flex(), DType::F64));
///     let f: Tensor<2> = isht.forward(c)?;
///     Ok::<_, ruda_sphere::SphereError>(f.dims())
/// }).unwrap();
/// assert_eq!(shapes, vec![[5, 16], [4, 16]]);
/// # Ok::<(), ruda_sphere::SphereError>(())
/// ```
#[derive(Debug)]
pub struct DistributedInverseRealSht<G> {
    part: Part<G>,
}

impl<G: Group> DistributedInverseRealSht<G> {
    /// The inverse transform of `spec` on `grid` (computes the recurrence
    /// coefficients of this rank's orders and latitudes; no communication).
    ///
    /// # Errors
    /// As [`DistributedRealSht::new`].
    pub fn new(grid: &ProcessGrid<G>, spec: ShtSpec) -> Result<Self, SphereError> {
        Ok(DistributedInverseRealSht {
            part: Part::new(grid, spec, Kind::Scalar, false, LatitudeSplit::Contiguous)?,
        })
    }

    /// [`DistributedInverseRealSht::new`] with the latitudes dealt to the polar ranks as
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
        Ok(DistributedInverseRealSht {
            part: Part::new(grid, spec, Kind::Scalar, false, split)?,
        })
    }

    /// Who holds which latitudes, longitudes, degrees and orders.
    pub fn layout(&self) -> &SphereLayout {
        self.part.layout()
    }

    /// Synthesise this rank's patch (`E = D − 1` dimensions) from its block
    /// of coefficients `c` (`[.., l_range, orders, 2]`, `D ≥ 3`).
    ///
    /// # Errors
    /// As [`DistributedRealSht::forward`].
    pub fn forward<const D: usize, const E: usize>(
        &self,
        c: Tensor<D>,
    ) -> Result<Tensor<E>, SphereError> {
        self.part
            .synthesise("DistributedInverseRealSht::forward", c)
    }
}
