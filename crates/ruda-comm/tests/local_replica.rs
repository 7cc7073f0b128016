//! Replica groups on the local transport (the conformance check on world
//! sizes 1 to 8 and several layouts is in ruda-testkit's
//! `local_conformance`): the seed's own `[[0, 1]]`, the XLA
//! order `[[3, 1], [0, 2]]`, ranks in no group, and the refusals.

use std::time::Duration;

use ruda_comm::{
    CommError, Communicator, InvalidArgument, LocalWorld, ReduceOp, ReplicaGroups,
    ReplicaGroupsError,
};

fn world(n: usize) -> LocalWorld {
    LocalWorld::new(n).timeout(Duration::from_secs(20))
}

#[test]
fn listed_order_numbers_the_sub_communicator() {
    let groups = ReplicaGroups::new([vec![3, 1], vec![0, 2]]).unwrap();
    let out = world(4)
        .run(|c| {
            let sub = c.replica_group(&groups)?.unwrap();
            let members = sub.all_gather_vec(&[c.rank() as u32])?;
            Ok::<_, CommError>((sub.rank(), sub.size(), members))
        })
        .unwrap();
    assert_eq!(out[3], (0, 2, vec![3, 1]));
    assert_eq!(out[1], (1, 2, vec![3, 1]));
    assert_eq!(out[0], (0, 2, vec![0, 2]));
    assert_eq!(out[2], (1, 2, vec![0, 2]));
}

#[test]
fn the_seeds_group_on_a_larger_world() {
    // replica_group=[[0, 1]] on four ranks: 0 and 1 sum, 2 and 3 are in no group.
    let groups = ReplicaGroups::new([[0, 1]]).unwrap();
    let out = world(4)
        .run(|c| {
            let Some(sub) = c.replica_group(&groups)? else {
                return Ok::<_, CommError>(None);
            };
            let mut x = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0];
            sub.all_reduce(&mut x, ReduceOp::Sum)?;
            Ok(Some(x))
        })
        .unwrap();
    let want = [2.0f32, 4.0, 6.0, 8.0, 10.0, 12.0];
    assert_eq!(out, vec![Some(want), Some(want), None, None]);
}

#[test]
fn single_rank_groups_are_their_own_world() {
    let groups = ReplicaGroups::new([[2], [0], [1]]).unwrap();
    let out = world(3)
        .run(|c| {
            let sub = c.replica_group(&groups)?.unwrap();
            let mut x = [c.rank() as i64];
            sub.all_reduce(&mut x, ReduceOp::Sum)?;
            Ok::<_, CommError>((sub.rank(), sub.size(), x[0]))
        })
        .unwrap();
    assert_eq!(out, vec![(0, 1, 0), (0, 1, 1), (0, 1, 2)]);
}

#[test]
fn invalid_lists_are_refused_before_any_call() {
    assert_eq!(
        ReplicaGroups::new(Vec::<Vec<usize>>::new()),
        Err(ReplicaGroupsError::NoGroups)
    );
    assert_eq!(
        ReplicaGroups::new([vec![0], vec![]]),
        Err(ReplicaGroupsError::EmptyGroup { group: 1 })
    );
    assert_eq!(
        ReplicaGroups::new([vec![0, 2, 0]]),
        Err(ReplicaGroupsError::Repeated {
            rank: 0,
            first_group: 0,
            second_group: 0
        })
    );
    assert_eq!(
        ReplicaGroups::world(0),
        Err(ReplicaGroupsError::EmptyGroup { group: 0 })
    );
    let g = ReplicaGroups::try_from(vec![vec![3, 1], vec![0, 2]]).unwrap();
    assert_eq!(g.to_string(), "[[3, 1], [0, 2]]");
    assert_eq!(g.find(0), Some((1, 0)));
    assert_eq!(g.find(4), None);
    assert_eq!(g.num_groups(), 2);
}

#[test]
fn refusals_are_the_same_error_on_every_rank_and_name_the_cause() {
    // Out of range on a sub-communicator: the size is the sub-group's.
    let results = world(4).run_each(|c| {
        let half = c.split(Some((c.rank() / 2) as u32), 0)?.unwrap();
        let bad = ReplicaGroups::new([[1, 2]]).unwrap();
        half.replica_group(&bad).map(|_| ())
    });
    for (r, res) in results.into_iter().enumerate() {
        match res {
            Err(ruda_comm::RankError::Failed(e @ CommError::InvalidArgument { .. })) => {
                let CommError::InvalidArgument { reason, rank, .. } = &e else {
                    unreachable!()
                };
                assert_eq!(*rank, r % 2);
                assert_eq!(
                    reason,
                    &InvalidArgument::ReplicaGroups(ReplicaGroupsError::OutOfRange {
                        rank: 2,
                        group: 0,
                        size: 2
                    })
                );
                let msg = e.to_string();
                assert!(msg.contains("names rank 2"), "{msg}");
                // The second half's ranks are renumbered: messages show both.
                assert_eq!(msg.contains("(world"), r >= 2, "{msg}");
            }
            other => panic!("rank {r}: {other:?}"),
        }
    }
}
