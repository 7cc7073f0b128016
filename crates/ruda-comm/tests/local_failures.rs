//! The failure suite on the local transport: every failure ends in the
//! documented error on every rank, well within the deadline, without a hang.

use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use ruda_comm::{
    BufferRole, CommError, Communicator, InvalidArgument, LocalWorld, OpKind, PeerFailureCause,
    RankError, ReduceOp, WorldError,
};

const DEADLINE: Duration = Duration::from_secs(20);

fn world(n: usize) -> LocalWorld {
    LocalWorld::new(n).timeout(DEADLINE)
}

/// Every rank's error, asserting that none succeeded or panicked.
fn errors<R: std::fmt::Debug>(results: Vec<Result<R, RankError<CommError>>>) -> Vec<CommError> {
    results
        .into_iter()
        .enumerate()
        .map(|(r, x)| match x {
            Err(RankError::Failed(e)) => {
                assert_eq!(e.rank(), r, "an error names its reporting rank");
                e
            }
            other => panic!("rank {r}: expected an error, got {other:?}"),
        })
        .collect()
}

/// The same error on every rank but for the reporting rank.
fn same_everywhere(errs: &[CommError]) -> CommError {
    let first = errs[0].clone().reported_by(0);
    for e in errs {
        assert_eq!(e.clone().reported_by(0), first);
    }
    first
}

#[test]
fn a_panicking_rank_fails_its_peers_promptly() {
    for n in [2, 4, 8] {
        let start = Instant::now();
        let results = world(n).run_each(|c| {
            let mut v = [1.0f64; 8];
            c.all_reduce(&mut v, ReduceOp::Sum)?;
            if c.rank() == n / 2 {
                // Let the others go to sleep in the next collective first.
                thread::sleep(Duration::from_millis(50));
                panic!("rank {} fails on purpose", c.rank());
            }
            c.all_reduce(&mut v, ReduceOp::Sum)
        });
        assert!(start.elapsed() < Duration::from_secs(5), "failed fast");
        for (r, res) in results.into_iter().enumerate() {
            if r == n / 2 {
                assert!(matches!(res, Err(RankError::Panicked(m)) if m.contains("on purpose")));
            } else {
                match res {
                    Err(RankError::Failed(CommError::PeerFailure {
                        op, peer, cause, ..
                    })) => {
                        assert_eq!(
                            (op, peer, cause),
                            (OpKind::AllReduce, n / 2, PeerFailureCause::Panicked)
                        );
                    }
                    other => panic!("rank {r}: {other:?}"),
                }
            }
        }
    }
}

#[test]
fn a_panic_poisons_sub_groups_too() {
    let results = world(4).run_each(|c| {
        let sub = c.split(Some((c.rank() % 2) as u32), 0)?.unwrap();
        if c.rank() == 1 {
            panic!("boom");
        }
        sub.barrier()
    });
    // Rank 3 shares a sub-group with rank 1 (sub-rank 0 there: errors name
    // ranks of the communicator the call was made on) and must see its panic.
    assert!(
        matches!(
            &results[3],
            Err(RankError::Failed(CommError::PeerFailure {
                peer: 0,
                cause: PeerFailureCause::Panicked,
                ..
            }))
        ),
        "{:?}",
        results[3]
    );
    // Ranks 0 and 2 form their own sub-group and finish.
    assert!(results[0].is_ok() && results[2].is_ok());
}

#[test]
fn run_reports_the_panicking_rank_first() {
    let err = world(3)
        .run(|c| {
            if c.rank() == 2 {
                panic!("root cause");
            }
            c.barrier()
        })
        .unwrap_err();
    match err {
        WorldError::Rank {
            rank: 2,
            error: RankError::Panicked(m),
        } => assert!(m.contains("root cause")),
        other => panic!("{other:?}"),
    }
}

#[test]
fn different_collectives_are_a_desync_on_every_rank() {
    let results = world(3).run_each(|c| {
        let mut buf = [0f32; 6];
        if c.rank() == 1 {
            c.all_gather(&[1.0, 2.0], &mut buf)
        } else {
            c.all_reduce(&mut buf, ReduceOp::Sum)
        }
    });
    let errs = errors(results);
    for (r, e) in errs.iter().enumerate() {
        // Each rank names its own operation; the rest is the same everywhere.
        let own = if r == 1 {
            OpKind::AllGather
        } else {
            OpKind::AllReduce
        };
        assert_eq!(e.op(), own);
    }
    let e = errs[0].clone();
    match e {
        CommError::Desync {
            first_rank,
            first,
            other_rank,
            other,
            ..
        } => {
            assert_eq!(
                (first_rank, first.op, other_rank, other.op),
                (0, OpKind::AllReduce, 1, OpKind::AllGather)
            );
            let msg = e.to_string();
            assert!(
                msg.contains("all_reduce<f32>") && msg.contains("all_gather<f32>"),
                "{msg}"
            );
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn different_dtypes_or_roots_are_a_desync() {
    let results = world(2).run_each(|c| {
        if c.rank() == 0 {
            c.broadcast(&mut [0f32; 2], 0)
        } else {
            c.broadcast(&mut [0f64; 2], 0)
        }
    });
    assert!(matches!(
        same_everywhere(&errors(results)),
        CommError::Desync { .. }
    ));
    let results = world(2).run_each(|c| c.broadcast(&mut [0u8; 2], c.rank()));
    assert!(matches!(
        same_everywhere(&errors(results)),
        CommError::Desync { .. }
    ));
}

#[test]
fn mismatched_lengths_error_everywhere_and_move_nothing() {
    for n in [2, 3, 5] {
        let results = world(n).run_each(|c| {
            let mut v = vec![7i32; if c.rank() == n - 1 { 3 } else { 4 }];
            let r = c.all_reduce(&mut v, ReduceOp::Sum);
            assert!(v.iter().all(|&x| x == 7), "no data moved");
            r
        });
        match same_everywhere(&errors(results)) {
            CommError::CountMismatch {
                op: OpKind::AllReduce,
                offender,
                expected: 3,
                got: 4,
                ..
            } => assert_eq!(offender, n - 1),
            other => panic!("{other:?}"),
        }
    }
    // A receive buffer too short for an all-gather: no truncation.
    let results = world(3).run_each(|c| {
        let mut out = vec![0u8; if c.rank() == 2 { 5 } else { 6 }];
        let r = c.all_gather(&[1, 2], &mut out);
        assert!(out.iter().all(|&x| x == 0));
        r
    });
    assert_eq!(
        same_everywhere(&errors(results)),
        CommError::LengthMismatch {
            op: OpKind::AllGather,
            rank: 0,
            offender: 2,
            buffer: BufferRole::Receive,
            expected: 6,
            got: 5
        }
    );
}

#[test]
fn variable_counts_are_checked_against_what_peers_send() {
    let results = world(3).run_each(|c| {
        let n = c.size();
        let send = vec![1u32; n];
        let sc = vec![1; n];
        // Rank 1 expects two elements from rank 2, which sends one.
        let mut rc = vec![1; n];
        if c.rank() == 1 {
            rc[2] = 2;
        }
        let mut out = vec![0u32; rc.iter().sum()];
        c.all_to_all_v(&send, &sc, &mut out, &rc)
    });
    assert_eq!(
        same_everywhere(&errors(results)),
        CommError::CountMismatch {
            op: OpKind::AllToAllV,
            rank: 0,
            offender: 1,
            peer: 2,
            expected: 2,
            got: 1
        }
    );
    // Count lists of the wrong length.
    let results = world(2).run_each(|c| {
        let mut out = [0f32; 2];
        c.all_gather_v(&[1.0], &mut out, &[1, 1, 0])
    });
    assert!(matches!(
        same_everywhere(&errors(results)),
        CommError::LengthMismatch {
            buffer: BufferRole::ReceiveCounts,
            expected: 2,
            got: 3,
            ..
        }
    ));
    // Disagreeing gather counts.
    let results = world(2).run_each(|c| {
        let counts = if c.rank() == 0 { [1, 1] } else { [1, 2] };
        let mut out = vec![0f32; counts.iter().sum()];
        c.all_gather_v(&[1.0], &mut out, &counts)
    });
    assert!(matches!(
        same_everywhere(&errors(results)),
        CommError::CountMismatch {
            offender: 1,
            peer: 1,
            expected: 2,
            got: 1,
            ..
        }
    ));
    // Reduce-scatter counts that disagree with what a rank receives: rank 1
    // declares a block of 2 for rank 0, whose receive buffer holds 1.
    let results = world(2).run_each(|c| {
        let counts = if c.rank() == 0 { [1, 1] } else { [2, 1] };
        let mut out = vec![0f32; 1];
        c.reduce_scatter_v(
            &vec![1f32; counts.iter().sum()],
            &mut out,
            &counts,
            ReduceOp::Sum,
        )
    });
    assert!(matches!(
        same_everywhere(&errors(results)),
        CommError::CountMismatch {
            op: OpKind::ReduceScatterV,
            offender: 1,
            peer: 0,
            expected: 2,
            got: 1,
            ..
        }
    ));
    // An all-to-all whose buffer does not split into equal blocks.
    let results = world(2).run_each(|c| c.all_to_all(&[1u8; 3], &mut [0u8; 3]));
    assert!(matches!(
        same_everywhere(&errors(results)),
        CommError::InvalidArgument {
            reason: InvalidArgument::NotDivisible {
                rank: 0,
                len: 3,
                parts: 2
            },
            ..
        }
    ));
    // A reduce-scatter send buffer that is not size × block.
    let results =
        world(2).run_each(|c| c.reduce_scatter(&[1f32; 3], &mut [0f32; 2], ReduceOp::Sum));
    assert!(matches!(
        same_everywhere(&errors(results)),
        CommError::LengthMismatch {
            buffer: BufferRole::Send,
            expected: 4,
            got: 3,
            ..
        }
    ));
}

#[test]
fn a_rank_that_never_arrives_times_out_everywhere() {
    let deadline = Duration::from_millis(300);
    let start = Instant::now();
    let results = LocalWorld::new(4).timeout(deadline).run_each(|c| {
        if c.rank() == 3 {
            thread::sleep(Duration::from_millis(900));
        }
        c.barrier()
    });
    let elapsed = start.elapsed();
    assert!(elapsed < Duration::from_secs(5), "{elapsed:?}");
    for (r, e) in errors(results).into_iter().enumerate() {
        match e {
            CommError::Timeout {
                op: OpKind::Barrier,
                missing,
                waited,
                ..
            } => {
                assert_eq!(missing, vec![3], "rank {r}");
                assert_eq!(waited, deadline);
            }
            other => panic!("rank {r}: {other:?}"),
        }
    }
}

#[test]
fn a_timed_out_group_stays_failed() {
    let results = LocalWorld::new(2)
        .timeout(Duration::from_millis(100))
        .run_each(|c| {
            if c.rank() == 0 {
                assert!(matches!(c.barrier(), Err(CommError::Timeout { .. })));
            } else {
                thread::sleep(Duration::from_millis(300));
            }
            // Every later call fails at once instead of waiting again.
            let t = Instant::now();
            let r = c.all_reduce(&mut [1f32], ReduceOp::Sum);
            assert!(t.elapsed() < Duration::from_millis(90));
            r
        });
    for e in errors(results) {
        assert!(matches!(e, CommError::Timeout { missing, .. } if missing == vec![1]));
    }
}

#[test]
fn a_rank_that_leaves_fails_the_waits_that_need_it() {
    let start = Instant::now();
    let results = world(3).run_each(|c| {
        if c.rank() == 0 {
            return Ok(()); // drops its communicator
        }
        c.barrier()
    });
    assert!(start.elapsed() < Duration::from_secs(5));
    assert!(results[0].is_ok());
    for r in &results[1..] {
        assert!(matches!(
            r,
            Err(RankError::Failed(CommError::PeerFailure {
                peer: 0,
                cause: PeerFailureCause::LeftGroup,
                ..
            }))
        ));
    }
}

#[test]
fn point_to_point_between_others_survives_a_departure() {
    let results = world(3).run_each(|c| match c.rank() {
        0 => Ok(0),
        1 => {
            thread::sleep(Duration::from_millis(30));
            c.send(&[5i64], 2).map(|_| 0)
        }
        _ => {
            let mut v = [0i64];
            c.recv(&mut v, 1).map(|_| v[0])
        }
    });
    assert_eq!(results[2], Ok(5));
}

#[test]
fn bad_roots_and_peers_are_invalid_arguments() {
    let results = world(3).run_each(|c| c.broadcast(&mut [0f32; 4], 3));
    assert!(matches!(
        same_everywhere(&errors(results)),
        CommError::InvalidArgument {
            op: OpKind::Broadcast,
            reason: InvalidArgument::Root { root: 3, size: 3 },
            ..
        }
    ));
    let results = world(2).run_each(|c| c.send(&[1u8], 2));
    for e in errors(results) {
        assert!(matches!(
            e,
            CommError::InvalidArgument {
                reason: InvalidArgument::Peer { peer: 2, size: 2 },
                ..
            }
        ));
    }
    let results = world(2).run_each(|c| c.recv(&mut [1u8], c.rank()));
    for e in errors(results) {
        assert!(matches!(
            e,
            CommError::InvalidArgument {
                reason: InvalidArgument::SelfMessage { op: OpKind::Recv },
                ..
            }
        ));
    }
    assert_eq!(
        LocalWorld::new(0).run(|c| c.barrier()),
        Err(WorldError::Empty)
    );
}

#[test]
fn point_to_point_mismatches_fail_on_both_sides() {
    let results = world(2).run_each(|c| {
        if c.rank() == 0 {
            c.send(&[1f32; 4], 1)
        } else {
            c.recv(&mut [0f32; 3], 0)
        }
    });
    for e in errors(results) {
        assert!(matches!(
            e,
            CommError::LengthMismatch {
                offender: 1,
                buffer: BufferRole::Receive,
                expected: 4,
                got: 3,
                ..
            }
        ));
    }
    let results = world(2).run_each(|c| {
        if c.rank() == 0 {
            c.send(&[1f32; 4], 1)
        } else {
            c.recv(&mut [0i32; 4], 0)
        }
    });
    for e in errors(results) {
        assert!(matches!(
            e,
            CommError::Desync {
                first_rank: 0,
                other_rank: 1,
                ..
            }
        ));
    }
}

#[test]
fn a_receive_nobody_answers_times_out_naming_the_peer() {
    let results = LocalWorld::new(2)
        .timeout(Duration::from_millis(150))
        .run_each(|c| {
            if c.rank() == 1 {
                c.recv(&mut [0u8; 1], 0)
            } else {
                thread::sleep(Duration::from_millis(400));
                Ok(())
            }
        });
    assert!(results[0].is_ok());
    assert!(matches!(
        &results[1],
        Err(RankError::Failed(CommError::Timeout { op: OpKind::Recv, missing, .. })) if missing == &vec![0]
    ));
}

#[test]
fn concurrent_use_of_one_rank_is_refused() {
    let mut comms = LocalWorld::new(2).timeout(DEADLINE).communicators();
    let c1 = comms.pop().unwrap();
    let c0 = Arc::new(comms.pop().unwrap());
    let a = {
        let c0 = c0.clone();
        thread::spawn(move || c0.barrier())
    };
    thread::sleep(Duration::from_millis(100));
    let second = c0.barrier();
    assert!(matches!(
        second,
        Err(CommError::InvalidArgument {
            reason: InvalidArgument::ConcurrentUse,
            ..
        })
    ));
    c1.barrier().unwrap();
    a.join().unwrap().unwrap();
}

#[test]
fn a_rank_that_skips_a_split_times_out() {
    let results = LocalWorld::new(3)
        .timeout(Duration::from_millis(200))
        .run_each(|c| {
            if c.rank() == 1 {
                thread::sleep(Duration::from_millis(500));
                return c.barrier().map(|_| false);
            }
            c.split(Some(0), 0).map(|s| s.is_some())
        });
    for e in errors(results) {
        assert!(
            matches!(e, CommError::Timeout { ref missing, .. } if missing == &vec![1]),
            "{e}"
        );
    }
}
