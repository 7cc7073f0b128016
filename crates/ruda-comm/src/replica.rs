//! Replica groups (the XLA/NKI convention of seed 004): a list of groups of
//! ranks, each group listed in the order that numbers its members. A
//! rank's position in its listed group is its rank in the sub-communicator
//! that [`crate::Communicator::replica_group`] returns, so `[[3, 1], [0, 2]]`
//! makes rank 3 rank 0 of the first group (never sorted); a rank in no group
//! gets `None`.

use core::fmt;

use thiserror::Error;

use crate::{CommError, Communicator, ErrorContext, InvalidArgument, OpKind};

/// Why a list of replica groups is refused.
///
/// The first three are found by [`ReplicaGroups::new`] on its own; the last
/// two by [`crate::Communicator::replica_group`], the same on every rank
/// (inside [`CommError::InvalidArgument`], reason
/// [`InvalidArgument::ReplicaGroups`]).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Error)]
pub enum ReplicaGroupsError {
    /// No group at all. (XLA reads an empty list as one group of every
    /// rank; ruda asks for that group explicitly: [`ReplicaGroups::world`].)
    #[error(
        "no replica groups given (for one group of every rank, list it: ReplicaGroups::world(n))"
    )]
    NoGroups,
    /// A group without ranks.
    #[error("replica group {group} is empty")]
    EmptyGroup {
        /// Its index in the list.
        group: usize,
    },
    /// A rank listed twice (in one group or in two).
    #[error(
        "rank {rank} is listed in replica group {first_group} and again in group {second_group}"
    )]
    Repeated {
        /// The rank.
        rank: usize,
        /// The group that lists it first.
        first_group: usize,
        /// The group that lists it again (may be the same group).
        second_group: usize,
    },
    /// A rank that the communicator does not have.
    #[error("replica group {group} names rank {rank}, but the communicator has {size} ranks")]
    OutOfRange {
        /// The rank named.
        rank: usize,
        /// The group naming it.
        group: usize,
        /// The communicator's size.
        size: usize,
    },
    /// Ranks of one communicator passed different replica groups.
    #[error("rank {offender} passed other replica groups than rank {reference}")]
    Differ {
        /// The rank compared with (the lowest).
        reference: usize,
        /// The first rank whose groups differ from it.
        offender: usize,
    },
}

/// A validated list of replica groups: disjoint, non-empty groups of ranks,
/// each in the order that numbers its members. Whether every rank is within
/// a communicator is checked when the groups are used
/// ([`crate::Communicator::replica_group`]).
///
/// # Example
/// ```
/// use ruda_comm::{Communicator, LocalWorld, ReplicaGroups};
/// let groups = ReplicaGroups::new([vec![3, 1], vec![0, 2]]).unwrap();
/// assert_eq!(groups.find(1), Some((0, 1))); // group 0, position 1
/// let out = LocalWorld::new(4).run(|comm| {
///     let sub = comm.replica_group(&groups)?.expect("every rank is listed");
///     Ok::<_, ruda_comm::CommError>((sub.rank(), sub.world_rank(0)))
/// }).unwrap();
/// // rank 3 is rank 0 of the first group, rank 1 its rank 1
/// assert_eq!(out, vec![(0, 0), (1, 3), (1, 0), (0, 3)]);
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ReplicaGroups {
    groups: Vec<Vec<usize>>,
}

impl ReplicaGroups {
    /// Validate `groups`: at least one group, none empty, no rank listed
    /// twice.
    ///
    /// # Errors
    /// [`ReplicaGroupsError::NoGroups`], [`ReplicaGroupsError::EmptyGroup`],
    /// [`ReplicaGroupsError::Repeated`] (for the first offending entry in
    /// list order).
    ///
    /// # Example
    /// ```
    /// use ruda_comm::{ReplicaGroups, ReplicaGroupsError};
    /// assert!(ReplicaGroups::new([[0, 1], [2, 3]]).is_ok());
    /// assert_eq!(
    ///     ReplicaGroups::new([vec![0, 1], vec![1]]),
    ///     Err(ReplicaGroupsError::Repeated { rank: 1, first_group: 0, second_group: 1 })
    /// );
    /// assert_eq!(ReplicaGroups::new(Vec::<Vec<usize>>::new()), Err(ReplicaGroupsError::NoGroups));
    /// ```
    pub fn new<I, G>(groups: I) -> Result<Self, ReplicaGroupsError>
    where
        I: IntoIterator<Item = G>,
        G: IntoIterator<Item = usize>,
    {
        let groups: Vec<Vec<usize>> = groups
            .into_iter()
            .map(|g| g.into_iter().collect())
            .collect();
        if groups.is_empty() {
            return Err(ReplicaGroupsError::NoGroups);
        }
        let mut seen: std::collections::HashMap<usize, usize> = std::collections::HashMap::new();
        for (gi, g) in groups.iter().enumerate() {
            if g.is_empty() {
                return Err(ReplicaGroupsError::EmptyGroup { group: gi });
            }
            for &r in g {
                if let Some(&first_group) = seen.get(&r) {
                    return Err(ReplicaGroupsError::Repeated {
                        rank: r,
                        first_group,
                        second_group: gi,
                    });
                }
                seen.insert(r, gi);
            }
        }
        Ok(ReplicaGroups { groups })
    }

    /// One group of ranks `0..size` in order (`size` ≥ 1).
    ///
    /// # Errors
    /// [`ReplicaGroupsError::EmptyGroup`] for `size == 0`.
    ///
    /// # Example
    /// ```
    /// use ruda_comm::ReplicaGroups;
    /// assert_eq!(ReplicaGroups::world(3).unwrap().groups(), &[vec![0, 1, 2]]);
    /// ```
    pub fn world(size: usize) -> Result<Self, ReplicaGroupsError> {
        Self::new([(0..size).collect::<Vec<_>>()])
    }

    /// The groups, as listed.
    pub fn groups(&self) -> &[Vec<usize>] {
        &self.groups
    }

    /// How many groups there are (at least one).
    pub fn num_groups(&self) -> usize {
        self.groups.len()
    }

    /// The group listing `rank` and `rank`'s position in it (its rank in
    /// that group's sub-communicator), or `None` when no group lists it.
    pub fn find(&self, rank: usize) -> Option<(usize, usize)> {
        self.groups
            .iter()
            .enumerate()
            .find_map(|(gi, g)| g.iter().position(|&r| r == rank).map(|p| (gi, p)))
    }

    /// Check that every rank listed is below `size`.
    ///
    /// # Errors
    /// [`ReplicaGroupsError::OutOfRange`] for the first rank (in list order)
    /// that is not.
    ///
    /// # Example
    /// ```
    /// use ruda_comm::ReplicaGroups;
    /// let g = ReplicaGroups::new([[0, 4]]).unwrap();
    /// assert!(g.check_size(5).is_ok());
    /// assert!(g.check_size(4).is_err());
    /// ```
    pub fn check_size(&self, size: usize) -> Result<(), ReplicaGroupsError> {
        for (gi, g) in self.groups.iter().enumerate() {
            if let Some(&rank) = g.iter().find(|&&r| r >= size) {
                return Err(ReplicaGroupsError::OutOfRange {
                    rank,
                    group: gi,
                    size,
                });
            }
        }
        Ok(())
    }

    /// The groups as words (group count, then each group's length and
    /// ranks), for ranks to compare what they passed.
    fn words(&self) -> Vec<i64> {
        let mut w = vec![self.groups.len() as i64];
        for g in &self.groups {
            w.push(g.len() as i64);
            // A rank is a usize; its bits travel unchanged (only equality matters).
            w.extend(g.iter().map(|&r| r as u64 as i64));
        }
        w
    }
}

impl TryFrom<Vec<Vec<usize>>> for ReplicaGroups {
    type Error = ReplicaGroupsError;

    fn try_from(groups: Vec<Vec<usize>>) -> Result<Self, Self::Error> {
        ReplicaGroups::new(groups)
    }
}

impl fmt::Display for ReplicaGroups {
    /// As the list is written: `[[3, 1], [0, 2]]`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[")?;
        for (i, g) in self.groups.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{g:?}")?;
        }
        f.write_str("]")
    }
}

/// The refusal of `reason`, as every rank of `comm` reports it.
fn refuse<C: Communicator>(comm: &C, reason: ReplicaGroupsError) -> CommError {
    let world_ranks = (0..comm.size()).map(|r| comm.world_rank(r)).collect();
    CommError::InvalidArgument {
        op: OpKind::Split,
        rank: comm.rank(),
        reason: InvalidArgument::ReplicaGroups(reason),
        context: ErrorContext::new(world_ranks, Vec::new()),
    }
}

/// [`crate::Communicator::replica_group`]: check that every rank passed the
/// same groups, all within the communicator, then split by them.
pub(crate) fn split_by<C: Communicator>(
    comm: &C,
    groups: &ReplicaGroups,
) -> Result<Option<C>, CommError> {
    let me = comm.rank();
    let mine = groups.words();
    // Two exchanges: every rank's length, then (all lengths equal) every
    // rank's words; both the same on every rank, so is the verdict.
    let lens = comm.all_gather_vec(&[mine.len() as i64])?;
    if let Some(offender) = lens.iter().position(|&l| l != lens[0]) {
        return Err(refuse(
            comm,
            ReplicaGroupsError::Differ {
                reference: 0,
                offender,
            },
        ));
    }
    let all = comm.all_gather_vec(&mine)?;
    let first = &all[..mine.len()];
    if let Some(offender) = all
        .chunks(mine.len().max(1))
        .position(|words| words != first)
    {
        return Err(refuse(
            comm,
            ReplicaGroupsError::Differ {
                reference: 0,
                offender,
            },
        ));
    }
    groups
        .check_size(comm.size())
        .map_err(|reason| refuse(comm, reason))?;
    // Group indices and positions are below the communicator's size (the
    // groups are disjoint and within it), so they fit a colour and a key
    // on every transport with a size that fits an `i32`.
    let place = groups.find(me).map(|(gi, pos)| {
        (
            u32::try_from(gi).unwrap_or(u32::MAX),
            i32::try_from(pos).unwrap_or(i32::MAX),
        )
    });
    comm.split(place.map(|(c, _)| c), place.map_or(0, |(_, k)| k))
}
