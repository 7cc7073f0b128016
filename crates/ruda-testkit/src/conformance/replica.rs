//! The replica-group check: membership, numbering and collectives on the
//! sub-communicators of [`ruda_comm::Communicator::replica_group`], and its
//! refusals on every rank.

use super::checks::{compare, wrong};
use super::{ConformanceError, mix};
use ruda_comm::{
    CommError, Communicator, InvalidArgument, OpKind, ReduceOp, ReplicaGroups, ReplicaGroupsError,
};

/// The groups of [`check_replica_groups`] for `n` ranks and `seed`: the
/// ranks shuffled by `seed`, one left out when `n > 2` and `seed` is odd,
/// cut into groups of sizes 1, 2, 3, … (the last one shorter), so that
/// positions are never sorted world order and groups are uneven.
///
/// # Example
/// ```
/// use ruda_testkit::conformance::replica_layout;
/// let g = replica_layout(6, 1);
/// assert_eq!(g.iter().map(Vec::len).sum::<usize>(), 5); // one rank left out
/// ```
pub fn replica_layout(n: usize, seed: u64) -> Vec<Vec<usize>> {
    let mut ranks: Vec<usize> = (0..n).collect();
    ranks.sort_by_key(|&r| mix(&[seed, r as u64]));
    if n > 2 && seed % 2 == 1 {
        ranks.pop();
    }
    let mut groups = Vec::new();
    let mut rest = &ranks[..];
    let mut len = 1;
    while !rest.is_empty() {
        let take = len.min(rest.len());
        groups.push(rest[..take].to_vec());
        rest = &rest[take..];
        len += 1;
    }
    groups
}

/// Split the group by [`replica_layout`]`(size, seed)` and check that each
/// rank's sub-communicator numbers it by its position in its listed group
/// (`None` for the rank left out), maps back to the right world ranks, and
/// gathers and sums over exactly its group; then that ranks passing
/// different groups, and a group naming a rank the group does not have,
/// are refused with the same [`ReplicaGroupsError`] on every rank, after
/// which the group still works.
///
/// # Errors
/// The first disagreement with the reference, or an unexpected transport error.
///
/// # Example
/// ```
/// use ruda_comm::LocalWorld;
/// use ruda_testkit::conformance;
/// LocalWorld::new(5).run(|c| conformance::check_replica_groups(&c, 3)).unwrap();
/// ```
pub fn check_replica_groups<C: Communicator>(comm: &C, seed: u64) -> Result<(), ConformanceError> {
    let (me, n) = (comm.rank(), comm.size());
    let op = OpKind::Split;
    let layout = replica_layout(n, seed);
    let groups = ReplicaGroups::new(layout.clone())
        .map_err(|e| wrong(op, me, "valid replica groups", &e.to_string()))?;
    let listed = layout
        .iter()
        .find_map(|g| g.iter().position(|&r| r == me).map(|p| (g, p)));
    let sub = comm.replica_group(&groups)?;
    match (&sub, listed) {
        (None, None) => {}
        (Some(_), None) => return Err(wrong(op, me, "no sub-communicator", "one")),
        (None, Some(_)) => return Err(wrong(op, me, "a sub-communicator", "none")),
        (Some(sub), Some((group, pos))) => {
            if sub.rank() != pos || sub.size() != group.len() {
                return Err(wrong(
                    op,
                    me,
                    &format!("rank {pos} of {}", group.len()),
                    &format!("rank {} of {}", sub.rank(), sub.size()),
                ));
            }
            for (i, &r) in group.iter().enumerate() {
                if sub.world_rank(i) != comm.world_rank(r) {
                    return Err(wrong(
                        op,
                        me,
                        &format!("world rank {} at position {i}", comm.world_rank(r)),
                        &format!("world rank {}", sub.world_rank(i)),
                    ));
                }
            }
            let mut got = vec![0u32; group.len()];
            sub.all_gather(&[me as u32], &mut got)?;
            let expected: Vec<u32> = group.iter().map(|&r| r as u32).collect();
            compare(
                OpKind::AllGather,
                me,
                sub.size(),
                "replica group order",
                &got,
                &expected,
            )?;
            let mut sum = [me as i64 + 1];
            sub.all_reduce(&mut sum, ReduceOp::Sum)?;
            let want = group.iter().map(|&r| r as i64 + 1).sum::<i64>();
            compare(
                OpKind::AllReduce,
                me,
                sub.size(),
                "replica group sum",
                &sum,
                &[want],
            )?;
        }
    }
    // A group naming a rank past the end: refused on every rank.
    let too_far = ReplicaGroups::new([vec![0, n]])
        .map_err(|e| wrong(op, me, "valid replica groups", &e.to_string()))?;
    expect_refusal(
        comm,
        comm.replica_group(&too_far),
        ReplicaGroupsError::OutOfRange {
            rank: n,
            group: 0,
            size: n,
        },
    )?;
    if n > 1 {
        // Rank n-1 lists the world in reverse, the others in order (same
        // length, different words); then rank 0 alone passes a longer list.
        let order: Vec<usize> = if me == n - 1 {
            (0..n).rev().collect()
        } else {
            (0..n).collect()
        };
        let differ = ReplicaGroups::new([order])
            .map_err(|e| wrong(op, me, "valid replica groups", &e.to_string()))?;
        expect_refusal(
            comm,
            comm.replica_group(&differ),
            ReplicaGroupsError::Differ {
                reference: 0,
                offender: n - 1,
            },
        )?;
        let longer = if me == 0 {
            ReplicaGroups::new([vec![0], vec![1]])
        } else {
            ReplicaGroups::new([vec![0]])
        }
        .map_err(|e| wrong(op, me, "valid replica groups", &e.to_string()))?;
        expect_refusal(
            comm,
            comm.replica_group(&longer),
            ReplicaGroupsError::Differ {
                reference: 0,
                offender: 1,
            },
        )?;
    }
    comm.barrier()?;
    Ok(())
}

fn expect_refusal<C: Communicator>(
    comm: &C,
    got: Result<Option<C>, CommError>,
    reason: ReplicaGroupsError,
) -> Result<(), ConformanceError> {
    let me = comm.rank();
    match got {
        Err(CommError::InvalidArgument {
            op: OpKind::Split,
            rank,
            reason: InvalidArgument::ReplicaGroups(r),
            ..
        }) if rank == me && r == reason => Ok(()),
        Err(e) => Err(wrong(
            OpKind::Split,
            me,
            &reason.to_string(),
            &e.to_string(),
        )),
        Ok(_) => Err(wrong(
            OpKind::Split,
            me,
            &reason.to_string(),
            "a sub-communicator",
        )),
    }
}
