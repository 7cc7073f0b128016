//! The polar × azimuth process grid.

use ruda_comm::Communicator;

use crate::error::Error;
use crate::group::Group;
use crate::host::HostCollective;

/// An axis of the process grid.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Axis {
    /// Latitude: ranks that share an azimuth index.
    Polar,
    /// Longitude: ranks that share a polar index.
    Azimuth,
}

/// A polar × azimuth grid of ranks built from a world [`Group`]:
/// `rank = polar_rank * azimuth_size + azimuth_rank`. The polar group holds
/// the ranks with this rank's azimuth index, the azimuth group those with
/// its polar index. A dimension of size 1 is a group of one rank, on which
/// every primitive behaves as with no distribution.
///
/// # Example
/// ```
/// use ruda_comm::{Communicator, LocalWorld};
/// use ruda_tensor::{Group, ProcessGrid};
/// let coords = LocalWorld::new(6).run(|c| {
///     let g = ProcessGrid::new(c, 2, 3)?;
///     Ok::<_, ruda_tensor::Error>((g.polar_rank(), g.azimuth_rank(), g.polar().size()))
/// }).unwrap();
/// assert_eq!(coords[4], (1, 1, 2));
/// ```
#[derive(Debug)]
pub struct ProcessGrid<G> {
    world: G,
    polar: G,
    azimuth: G,
    polar_size: usize,
    azimuth_size: usize,
}

impl<G: Clone> Clone for ProcessGrid<G> {
    fn clone(&self) -> Self {
        ProcessGrid {
            world: self.world.clone(),
            polar: self.polar.clone(),
            azimuth: self.azimuth.clone(),
            polar_size: self.polar_size,
            azimuth_size: self.azimuth_size,
        }
    }
}

impl<C: Communicator + core::fmt::Debug + 'static> ProcessGrid<HostCollective<C>> {
    /// Build the grid over a communicator's ranks (collective over `world`:
    /// every rank must call it), host-staged; see [`ProcessGrid::from_group`].
    ///
    /// # Errors
    /// As [`ProcessGrid::from_group`].
    pub fn new(world: C, polar_size: usize, azimuth_size: usize) -> Result<Self, Error> {
        Self::from_group(HostCollective::new(world), polar_size, azimuth_size)
    }
}

impl<G: Group> ProcessGrid<G> {
    /// Build the grid over any group (collective over `world`: every rank
    /// must call it).
    ///
    /// # Errors
    /// [`Error::GridSize`] when `polar_size * azimuth_size` is not the world
    /// size (the same verdict on every rank); [`Error::Comm`] when
    /// splitting fails.
    pub fn from_group(world: G, polar_size: usize, azimuth_size: usize) -> Result<Self, Error> {
        let n = world.size();
        if polar_size == 0 || azimuth_size == 0 || polar_size.checked_mul(azimuth_size) != Some(n) {
            return Err(Error::GridSize {
                polar: polar_size,
                azimuth: azimuth_size,
                world: n,
            });
        }
        let me = world.rank();
        let (p, a) = (me / azimuth_size, me % azimuth_size);
        let polar = world
            .split(Some(a as u32), p as i32)?
            .expect("every rank has a colour");
        let azimuth = world
            .split(Some(p as u32), a as i32)?
            .expect("every rank has a colour");
        Ok(ProcessGrid {
            world,
            polar,
            azimuth,
            polar_size,
            azimuth_size,
        })
    }

    /// The whole world.
    pub fn world(&self) -> &G {
        &self.world
    }

    /// The polar group (ranks with this rank's azimuth index, by polar rank).
    pub fn polar(&self) -> &G {
        &self.polar
    }

    /// The azimuth group (ranks with this rank's polar index, by azimuth rank).
    pub fn azimuth(&self) -> &G {
        &self.azimuth
    }

    /// The group along `axis`.
    pub fn group(&self, axis: Axis) -> &G {
        match axis {
            Axis::Polar => &self.polar,
            Axis::Azimuth => &self.azimuth,
        }
    }

    /// Ranks along the polar axis.
    pub fn polar_size(&self) -> usize {
        self.polar_size
    }

    /// Ranks along the azimuth axis.
    pub fn azimuth_size(&self) -> usize {
        self.azimuth_size
    }

    /// This rank's polar coordinate.
    pub fn polar_rank(&self) -> usize {
        self.polar.rank()
    }

    /// This rank's azimuth coordinate.
    pub fn azimuth_rank(&self) -> usize {
        self.azimuth.rank()
    }

    /// The world rank at grid coordinates `(polar, azimuth)`.
    pub fn world_rank(&self, polar: usize, azimuth: usize) -> usize {
        polar * self.azimuth_size + azimuth
    }

    /// `(prev, next)` world ranks of this rank's immediate neighbours along
    /// `axis`, wrapping around (rank 0's predecessor is the last rank).
    ///
    /// # Example
    /// ```
    /// use ruda_comm::LocalWorld;
    /// use ruda_tensor::{Axis, ProcessGrid};
    /// let n = LocalWorld::new(4).run(|c| {
    ///     ProcessGrid::new(c, 2, 2).map(|g| g.neighbors(Axis::Polar))
    /// }).unwrap();
    /// assert_eq!(n[1], (3, 3)); // world rank 1 is (0, 1); its polar peer is (1, 1) = 3
    /// ```
    pub fn neighbors(&self, axis: Axis) -> (usize, usize) {
        let (p, a) = (self.polar_rank(), self.azimuth_rank());
        match axis {
            Axis::Polar => {
                let n = self.polar_size;
                (
                    self.world_rank((p + n - 1) % n, a),
                    self.world_rank((p + 1) % n, a),
                )
            }
            Axis::Azimuth => {
                let n = self.azimuth_size;
                (
                    self.world_rank(p, (a + n - 1) % n),
                    self.world_rank(p, (a + 1) % n),
                )
            }
        }
    }
}
