//! The failure suite on the local transport: every failure ends in the
//! documented error on every rank, well within the deadline, without a hang.

use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use ruda_comm::{
    BufferRole, CommError, Communicator, ErrorContext, InvalidArgument, LocalWorld, OpKind,
    Outcome, PeerFailureCause, RankError, ReduceOp, WorldError,
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
    match &e {
        CommError::Desync {
            first_rank,
            first,
            other_rank,
            other,
            ..
        } => {
            assert_eq!(
                (*first_rank, first.op, *other_rank, other.op),
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
            got: 5,
            context: ErrorContext::none(),
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
            got: 1,
            context: ErrorContext::none(),
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
    // The refused call took no sequence number: the ranks still agree.
    let b = {
        let c0 = c0.clone();
        thread::spawn(move || c0.all_reduce(&mut [1.0f64], ReduceOp::Sum))
    };
    c1.all_reduce(&mut [2.0f64], ReduceOp::Sum).unwrap();
    b.join().unwrap().unwrap();
    assert_eq!((c0.seq(), c1.seq()), (2, 2));
}

#[test]
fn a_split_holds_its_rank_until_its_last_episode() {
    // While one thread of rank 0 splits, another thread of rank 0 keeps
    // trying a barrier: every attempt inside the split is refused, and the
    // split and the barriers after it succeed on both ranks.
    for _ in 0..20 {
        let mut comms = LocalWorld::new(2).timeout(DEADLINE).communicators();
        let c1 = comms.pop().unwrap();
        let c0 = Arc::new(comms.pop().unwrap());
        let splitter = {
            let c0 = c0.clone();
            thread::spawn(move || c0.split(Some(0), 0).map(|s| s.is_some()))
        };
        thread::sleep(Duration::from_millis(20)); // the splitter is inside split
        let intruder = {
            let c0 = c0.clone();
            thread::spawn(move || {
                loop {
                    match c0.barrier() {
                        Err(CommError::InvalidArgument {
                            reason: InvalidArgument::ConcurrentUse,
                            ..
                        }) => thread::yield_now(),
                        other => return other,
                    }
                }
            })
        };
        let other = thread::spawn(move || {
            thread::sleep(Duration::from_millis(30));
            let s = c1.split(Some(0), 0)?.is_some();
            c1.barrier()?;
            Ok::<_, CommError>(s)
        });
        assert!(splitter.join().unwrap().unwrap());
        assert!(other.join().unwrap().unwrap());
        intruder.join().unwrap().unwrap();
    }
}

#[test]
fn count_sums_that_overflow_are_too_large_on_every_rank() {
    // Reproduction of issue 9 (1): these counts used to wrap in release
    // builds, pass every check and crash.
    let big = usize::MAX;
    let results = world(2).run_each(|c| {
        let x = [7.0f32];
        let mut y = [0.0f32];
        if c.rank() == 0 {
            c.all_to_all_v::<f32>(&[], &[big, 1], &mut [], &[big, 1])
        } else {
            c.all_to_all_v(&x, &[1, 0], &mut y, &[1, 0])
        }
    });
    let e = same_everywhere(&errors(results));
    assert!(
        matches!(
            e,
            CommError::InvalidArgument {
                op: OpKind::AllToAllV,
                reason: InvalidArgument::TooLarge { .. },
                ..
            }
        ),
        "{e}"
    );
    // The allocating variant and the other count-list collectives too.
    let results = world(2).run_each(|c| {
        let counts = [big, 2];
        c.all_to_all_v_vec(&[1u8; 2], &[1, 1], &counts).map(|_| ())
    });
    let e = same_everywhere(&errors(results));
    assert!(
        matches!(
            e,
            CommError::InvalidArgument {
                reason: InvalidArgument::TooLarge { .. },
                ..
            }
        ),
        "{e}"
    );
    // Where each count must equal a real buffer's length, a huge count is a
    // mismatch before any sum is taken.
    let results = world(2).run_each(|c| {
        let counts = [big - 1, 2];
        let mut out = [0u32; 3];
        c.all_gather_v(&[1u32; 2][..c.rank() * 2], &mut out, &counts)
    });
    let e = same_everywhere(&errors(results));
    assert!(
        matches!(
            e,
            CommError::CountMismatch {
                offender: 0,
                peer: 0,
                ..
            }
        ),
        "{e}"
    );
    let results = world(2).run_each(|c| {
        let mut out = [0i64; 1];
        c.reduce_scatter_v(&[1i64; 3], &mut out, &[big, 3], ReduceOp::Sum)
    });
    let e = same_everywhere(&errors(results));
    assert!(
        matches!(
            e,
            CommError::CountMismatch {
                offender: 0,
                peer: 0,
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn a_rank_that_returns_while_its_communicator_lives_on_fails_its_peers_promptly() {
    // An autodiff graph (or anything else) may keep a rank's communicator
    // alive after the rank's work ended: the world marks the rank anyway.
    let keep: std::sync::Mutex<Vec<ruda_comm::LocalCommunicator>> = Default::default();
    let start = Instant::now();
    let results = world(3).run_each(|c| {
        if c.rank() == 2 {
            keep.lock().unwrap().push(c); // alive beyond the closure
            return Ok(());
        }
        c.split(Some(0), 0).map(|_| ())
    });
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );
    assert!(results[2].is_ok());
    for r in &results[..2] {
        assert!(
            matches!(
                r,
                Err(RankError::Failed(CommError::PeerFailure {
                    peer: 2,
                    cause: PeerFailureCause::Finished,
                    ..
                }))
            ),
            "{r:?}"
        );
    }
    // The same for a rank that panics with its communicator kept alive.
    let start = Instant::now();
    let results = world(2).run_each(|c| {
        if c.rank() == 1 {
            keep.lock().unwrap().push(c);
            panic!("rank 1 fails after handing its communicator away");
        }
        c.barrier()
    });
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );
    assert!(matches!(
        &results[0],
        Err(RankError::Failed(CommError::PeerFailure {
            peer: 1,
            cause: PeerFailureCause::Panicked,
            ..
        }))
    ));
}

#[test]
fn errors_name_world_ranks_and_carry_every_ranks_history() {
    // World ranks 1 and 3 form sub-group ranks 0 and 1; world rank 3 never
    // reaches the sub-group's second barrier.
    let results = LocalWorld::new(4)
        .timeout(Duration::from_millis(300))
        .run_each(|c| {
            let sub = c.split(Some((c.rank() % 2) as u32), 0)?.unwrap();
            sub.barrier()?;
            if c.rank() == 3 {
                thread::sleep(Duration::from_millis(900));
                return Ok(None);
            }
            if c.rank() % 2 == 0 {
                return Ok(None);
            }
            Ok::<_, CommError>(sub.barrier().err())
        });
    let e = results[1]
        .as_ref()
        .unwrap()
        .clone()
        .expect("world rank 1 fails");
    assert!(
        matches!(&e, CommError::Timeout { rank: 0, missing, .. } if missing == &vec![1]),
        "{e}"
    );
    assert_eq!(e.context().world_rank(0), Some(1));
    assert_eq!(e.context().world_rank(1), Some(3));
    let text = e.to_string();
    assert!(
        text.contains("rank 0 (world 1)") && text.contains("[1 (world 3)]"),
        "{text}"
    );
    let h = e.context().histories();
    assert_eq!(h.len(), 2);
    assert_eq!((h[0].world_rank, h[1].world_rank), (1, 3));
    // Rank 0 timed out in its second barrier; rank 1 finished only one.
    let ops = |k: usize| -> Vec<(OpKind, Outcome)> {
        h[k].calls.iter().map(|c| (c.fp.op, c.outcome)).collect()
    };
    assert_eq!(
        ops(0),
        vec![
            (OpKind::Barrier, Outcome::Completed),
            (
                OpKind::Barrier,
                Outcome::Failed(ruda_comm::ErrorKind::Timeout)
            )
        ]
    );
    assert_eq!(ops(1), vec![(OpKind::Barrier, Outcome::Completed)]);
    // A plain argument error names the world ranks but carries no history.
    let results = LocalWorld::new(2).run_each(|c| {
        let sub = c.split(Some(0), (2 - c.rank()) as i32)?.unwrap(); // reversed order
        sub.broadcast(&mut [0u8], 5)
    });
    let Err(RankError::Failed(e)) = &results[0] else {
        panic!("{:?}", results[0])
    };
    assert_eq!(e.rank(), 1); // world rank 0 is rank 1 of the reversed group
    assert_eq!(e.context().world_rank(0), Some(1));
    assert!(e.context().histories().is_empty());
}

#[test]
fn send_recv_with_one_end_at_oneself_is_refused() {
    let results = world(2).run_each(|c| {
        let me = c.rank();
        let mut r = [0u8];
        c.send_recv(&[1u8], me, &mut r, 1 - me)
    });
    for e in errors(results) {
        assert!(
            matches!(
                e,
                CommError::InvalidArgument {
                    reason: InvalidArgument::SelfMessage { .. },
                    ..
                }
            ),
            "{e}"
        );
        // Issue 17 (9): the advice fits the call (it used to say "use
        // send_recv" to a send_recv).
        let msg = e.to_string();
        assert!(msg.contains("exactly one of dest and source"), "{msg}");
        assert!(!msg.contains("use send_recv"), "{msg}");
    }
    // A blocking send to oneself is pointed at a copy.
    let results = world(1).run_each(|c| c.send(&[1u8], 0));
    for e in errors(results) {
        let msg = e.to_string();
        assert!(
            msg.starts_with("send on rank 0: invalid argument: a blocking send to oneself"),
            "{msg}"
        );
        assert!(msg.contains("copy the buffer"), "{msg}");
    }
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
