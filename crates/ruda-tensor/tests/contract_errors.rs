//! Bad input to the tensor contract ends in the same typed error on every
//! rank, before any data moves; nothing panics, hangs or truncates.

mod common;

use std::time::{Duration, Instant};

use burn_backend::DType;
use burn_backend::ops::FloatTensorOps;
use burn_flex::Flex;
use common::*;
use ruda_comm::{CommError, Communicator, LocalWorld, RankError};
use ruda_tensor::{
    BroadcastTensorCollective, CountProblem, HostCollective, NeighbourTensorExchange, ShapeProblem,
    TensorCollective, TensorCollectiveError, TensorOp, VariableTensorCollective,
};

#[test]
fn unequal_shards_are_a_shape_mismatch_everywhere() {
    for n in [2, 3, 5] {
        let errs = errors(world(n).run_each(|c| {
            let rows = if c.rank() == n - 1 { 3 } else { 2 };
            let coll = HostCollective::new(c);
            TensorCollective::<Flex>::all_gather_float(
                &coll,
                float(vec![1f32; rows * 4], &[rows, 4]),
            )
            .map(|_| ())
        }));
        for (r, e) in errs.into_iter().enumerate() {
            assert_eq!(
                e,
                TensorCollectiveError::ShapeMismatch {
                    op: TensorOp::AllGatherFloat,
                    rank: r,
                    offender: n - 1,
                    reference: 0,
                    expected: vec![Some(2), Some(4)],
                    got: vec![Some(3), Some(4)],
                    free_axis: None,
                }
            );
        }
    }
}

#[test]
fn same_element_count_other_shape_is_caught() {
    // [2, 6] and [3, 4] hold 12 elements each; a byte-level gather would
    // silently interleave them.
    let errs = errors(world(2).run_each(|c| {
        let shape = if c.rank() == 0 { [2, 6] } else { [3, 4] };
        let coll = HostCollective::new(c);
        ruda_tensor::ReplicatedTensorCollective::<Flex>::all_reduce_sum(
            &coll,
            float(vec![1f64; 12], &shape),
        )
        .map(|_| ())
    }));
    assert!(
        errs.iter()
            .all(|e| matches!(e, TensorCollectiveError::ShapeMismatch { offender: 1, .. }))
    );
}

#[test]
fn counts_that_do_not_fit_are_errors_everywhere() {
    let errs = errors(world(3).run_each(|c| {
        let me = c.rank();
        let coll = HostCollective::new(c);
        // Rank 1's counts add up to 3 rows, its tensor has 4.
        let counts = if me == 1 {
            vec![1, 1, 1]
        } else {
            vec![1, 1, 2]
        };
        VariableTensorCollective::<Flex>::all_to_all_v_float(
            &coll,
            float(vec![0f32; 8], &[4, 2]),
            &counts,
        )
        .map(|_| ())
    }));
    for e in errs {
        assert!(
            matches!(
                e,
                TensorCollectiveError::Counts {
                    offender: 1,
                    problem: CountProblem::Sum { sum: 3, rows: 4 },
                    ..
                }
            ),
            "{e}"
        );
    }
    let errs = errors(world(2).run_each(|c| {
        let coll = HostCollective::new(c);
        VariableTensorCollective::<Flex>::all_to_all_v_int(
            &coll,
            int(vec![0i32; 4], &[2, 2]),
            &[1, 1, 0],
        )
        .map(|_| ())
    }));
    for e in errs {
        assert!(matches!(
            e,
            TensorCollectiveError::Counts {
                offender: 0,
                problem: CountProblem::Length { got: 3, ranks: 2 },
                ..
            }
        ));
    }
}

#[test]
fn bad_shapes_are_errors_everywhere() {
    // A zero trailing axis on rank 0.
    let errs = errors(world(2).run_each(|c| {
        let shape = if c.rank() == 0 { [2, 0] } else { [2, 3] };
        let n: usize = shape.iter().product();
        let coll = HostCollective::new(c);
        VariableTensorCollective::<Flex>::all_to_all_v_float(
            &coll,
            float(vec![0f32; n], &shape),
            &[1, 1],
        )
        .map(|_| ())
    }));
    for e in errs {
        assert!(
            matches!(
                e,
                TensorCollectiveError::BadShape {
                    offender: 0,
                    problem: ShapeProblem::ZeroTrailingAxis,
                    ..
                }
            ),
            "{e}"
        );
    }
    // A scalar has no leading axis to gather along.
    let errs = errors(world(2).run_each(|c| {
        let coll = HostCollective::new(c);
        TensorCollective::<Flex>::all_gather_float(&coll, float(vec![1f32], &[])).map(|_| ())
    }));
    for e in errs {
        assert!(
            matches!(
                e,
                TensorCollectiveError::BadShape {
                    offender: 0,
                    problem: ShapeProblem::NoLeadingAxis,
                    ..
                }
            ),
            "{e}"
        );
    }
    // Five rows do not reduce-scatter over two ranks.
    let errs = errors(world(2).run_each(|c| {
        let coll = HostCollective::new(c);
        TensorCollective::<Flex>::reduce_scatter_sum(&coll, float(vec![1f32; 10], &[5, 2]))
            .map(|_| ())
    }));
    for e in errs {
        assert!(
            matches!(
                e,
                TensorCollectiveError::BadShape {
                    problem: ShapeProblem::NotDivisible { ranks: 2 },
                    ..
                }
            ),
            "{e}"
        );
    }
}

#[test]
fn trailing_axes_must_agree_in_variable_exchange() {
    let errs = errors(world(2).run_each(|c| {
        let cols = 2 + c.rank();
        let coll = HostCollective::new(c);
        VariableTensorCollective::<Flex>::all_to_all_v_float(
            &coll,
            float(vec![0f32; 2 * cols], &[2, cols]),
            &[1, 1],
        )
        .map(|_| ())
    }));
    for e in errs {
        assert!(
            matches!(
                e,
                TensorCollectiveError::ShapeMismatch {
                    offender: 1,
                    free_axis: Some(0),
                    ..
                }
            ),
            "{e}"
        );
    }
}

#[test]
fn dtypes_and_roots_must_agree() {
    let errs = errors(world(2).run_each(|c| {
        let me = c.rank();
        let coll = HostCollective::new(c);
        let t = if me == 0 {
            float(vec![0f32; 2], &[2])
        } else {
            float(vec![0f64; 2], &[2])
        };
        TensorCollective::<Flex>::all_gather_float(&coll, t).map(|_| ())
    }));
    for e in errs {
        assert!(
            matches!(
                e,
                TensorCollectiveError::DTypeMismatch {
                    offender: 1,
                    expected: DType::F32,
                    got: DType::F64,
                    ..
                }
            ),
            "{e}"
        );
    }
    let errs = errors(world(2).run_each(|c| {
        let coll = HostCollective::new(c);
        BroadcastTensorCollective::<Flex>::broadcast_float(&coll, float(vec![0f32; 2], &[2]), 2)
            .map(|_| ())
    }));
    for e in errs {
        assert!(
            matches!(
                e,
                TensorCollectiveError::InvalidRoot {
                    root: 2,
                    size: 2,
                    ..
                }
            ),
            "{e}"
        );
    }
}

#[test]
fn unmatched_neighbour_plans_are_errors_everywhere() {
    // Rank 0 sends to rank 1, which does not list rank 0 as a source.
    let errs = errors(world(3).run_each(|c| {
        let me = c.rank();
        let coll = HostCollective::new(c);
        let (t, sends): (_, Vec<(u32, usize)>) = if me == 0 {
            (float(vec![1f32; 2], &[1, 2]), vec![(1, 1)])
        } else {
            (float(vec![0f32; 0], &[0, 2]), vec![])
        };
        NeighbourTensorExchange::<Flex>::exchange_rows_float(&coll, t, &sends, &[]).map(|_| ())
    }));
    for e in errs {
        assert!(
            matches!(
                e,
                TensorCollectiveError::Counts {
                    offender: 0,
                    problem: CountProblem::Unmatched {
                        source: 0,
                        dest: 1,
                        sent: true
                    },
                    ..
                }
            ),
            "{e}"
        );
    }
    // A repeated destination.
    let errs = errors(world(2).run_each(|c| {
        let coll = HostCollective::new(c);
        NeighbourTensorExchange::<Flex>::exchange_rows_float(
            &coll,
            float(vec![1f32; 4], &[2, 2]),
            &[(1, 1), (1, 1)],
            &[1],
        )
        .map(|_| ())
    }));
    for e in errs {
        assert!(
            matches!(
                e,
                TensorCollectiveError::Counts {
                    problem: CountProblem::BadPeer { peer: 1, ranks: 2 },
                    ..
                }
            ),
            "{e}"
        );
    }
}

#[test]
fn transport_errors_pass_through_typed() {
    // A rank that never calls the collective: the others time out, typed.
    let errs = LocalWorld::new(2)
        .timeout(Duration::from_millis(200))
        .run_each(|c| {
            if c.rank() == 1 {
                std::thread::sleep(Duration::from_millis(500));
                return Ok(());
            }
            let coll = HostCollective::new(c);
            TensorCollective::<Flex>::all_gather_float(&coll, float(vec![1f32; 2], &[2]))
                .map(|_| ())
        });
    assert!(
        matches!(&errs[0], Err(RankError::Failed(TensorCollectiveError::Comm(CommError::Timeout { missing, .. }))) if missing == &vec![1])
    );
}

#[test]
fn a_rank_that_skips_a_backward_fails_its_peers_not_hangs() {
    let start = Instant::now();
    let results = LocalWorld::new(2)
        .timeout(Duration::from_millis(300))
        .run_each(|c| {
            let me = c.rank();
            let coll = HostCollective::new(c);
            let x = leaf(vec![1.0, 2.0], &[2, 1]);
            let y = TensorCollective::<Ad>::all_gather_float(&coll, x.clone()).unwrap();
            if me == 1 {
                // This rank's loss does not use the collective: no backward here.
                return Ok::<_, ()>(());
            }
            let _ = grad_of(Ad::float_sum(y), &x);
            Ok(())
        });
    assert!(start.elapsed() < Duration::from_secs(10));
    assert!(results[1].is_ok());
    match &results[0] {
        Err(RankError::Panicked(m)) => {
            // The panic names the call and what happened to the peer.
            assert!(
                m.contains("the backward pass of all_gather_float on rank 0: rank 1"),
                "{m}"
            );
        }
        other => panic!("{other:?}"),
    }
}
