//! The replicas × polar × azimuth grid: data parallelism over copies of a
//! model whose layers are split over the sphere.

use ruda_comm::Communicator;

use crate::error::Error;
use crate::grid::ProcessGrid;
use crate::group::Group;
use crate::host::HostCollective;

/// A three-axis grid of ranks, `replicas × polar × azimuth`, built from a
/// world [`Group`]: `rank = replica · (polar · azimuth) + polar_rank ·
/// azimuth + azimuth_rank`. Each replica is a [`ProcessGrid`] of
/// consecutive ranks holding one copy of a domain-decomposed model (its
/// [`domain`](HybridGrid::domain)); the [`replicas`](HybridGrid::replicas)
/// group joins the ranks that hold the same patch of the sphere in every
/// replica, one per replica, ordered by replica.
///
/// Training on it (as makani and FourCastNet do): each replica takes its
/// own share of the batch; a parameter replicated over the domain has its
/// gradient summed over the domain's world (each rank holds the part of
/// the loss on its patch) and then averaged over the replicas group
/// ([`ddp::hybrid_step`](crate::ddp::hybrid_step) does both).
///
/// # Errors
/// See [`HybridGrid::from_group`].
///
/// # Example
/// ```
/// use ruda_comm::LocalWorld;
/// use ruda_tensor::{Group, HybridGrid};
/// let coords = LocalWorld::new(8).run(|c| {
///     let g = HybridGrid::new(c, 2, 2, 2)?;
///     Ok::<_, ruda_tensor::Error>((
///         g.replica_rank(),
///         g.domain().polar_rank(),
///         g.domain().azimuth_rank(),
///         g.replicas().size(),
///     ))
/// }).unwrap();
/// assert_eq!(coords[5], (1, 0, 1, 2)); // 5 = 1·4 + 0·2 + 1
/// ```
#[derive(Debug)]
pub struct HybridGrid<G> {
    world: G,
    replicas: G,
    domain: ProcessGrid<G>,
}

impl<G: Clone> Clone for HybridGrid<G> {
    fn clone(&self) -> Self {
        HybridGrid {
            world: self.world.clone(),
            replicas: self.replicas.clone(),
            domain: self.domain.clone(),
        }
    }
}

impl<C: Communicator + core::fmt::Debug + 'static> HybridGrid<HostCollective<C>> {
    /// Build the grid over a communicator's ranks (collective over `world`:
    /// every rank must call it), host-staged; see [`HybridGrid::from_group`].
    ///
    /// # Errors
    /// As [`HybridGrid::from_group`].
    pub fn new(world: C, replicas: usize, polar: usize, azimuth: usize) -> Result<Self, Error> {
        Self::from_group(HostCollective::new(world), replicas, polar, azimuth)
    }
}

impl<G: Group> HybridGrid<G> {
    /// Build the grid over any group (collective over `world`: every rank
    /// must call it with the same sizes).
    ///
    /// # Errors
    /// [`Error::HybridGridSize`] when `replicas · polar · azimuth` is not
    /// the world size or a size is zero (the same verdict on every rank,
    /// before any communication); [`Error::Comm`] when splitting fails.
    ///
    /// # Example
    /// ```
    /// use ruda_comm::LocalWorld;
    /// use ruda_tensor::{Error, HostCollective, HybridGrid};
    /// use ruda_comm::{RankError, WorldError};
    /// let r = LocalWorld::new(4).run(|c| HybridGrid::from_group(HostCollective::new(c), 3, 1, 1).map(|_| ()));
    /// assert!(matches!(
    ///     r,
    ///     Err(WorldError::Rank {
    ///         error: RankError::Failed(Error::HybridGridSize { replicas: 3, world: 4, .. }),
    ///         ..
    ///     })
    /// ));
    /// ```
    pub fn from_group(
        world: G,
        replicas: usize,
        polar: usize,
        azimuth: usize,
    ) -> Result<Self, Error> {
        let n = world.size();
        let fits = replicas
            .checked_mul(polar)
            .and_then(|x| x.checked_mul(azimuth))
            .is_some_and(|x| x == n && x > 0);
        // Split colours are u32 and keys i32: a world that fits i32 fits both.
        if !fits || i32::try_from(n).is_err() {
            return Err(Error::HybridGridSize {
                replicas,
                polar,
                azimuth,
                world: n,
            });
        }
        let per_replica = polar * azimuth;
        let me = world.rank();
        let (replica, position) = (me / per_replica, me % per_replica);
        // Both below n ≤ i32::MAX (checked above): the casts are exact.
        let domain = world
            .split(Some(replica as u32), position as i32)?
            .expect("every rank has a colour");
        let across = world
            .split(Some(position as u32), replica as i32)?
            .expect("every rank has a colour");
        Ok(HybridGrid {
            domain: ProcessGrid::from_group(domain, polar, azimuth)?,
            replicas: across,
            world,
        })
    }

    /// The whole world (every rank of every replica).
    pub fn world(&self) -> &G {
        &self.world
    }

    /// The ranks holding this rank's patch in every replica, by replica
    /// (the data-parallel group).
    pub fn replicas(&self) -> &G {
        &self.replicas
    }

    /// This rank's replica: a polar × azimuth grid of its own.
    pub fn domain(&self) -> &ProcessGrid<G> {
        &self.domain
    }

    /// Replicas in the grid.
    pub fn num_replicas(&self) -> usize {
        self.replicas.size()
    }

    /// This rank's replica index.
    pub fn replica_rank(&self) -> usize {
        self.replicas.rank()
    }
}
