//! `LocalCommunicator::all_gather_objects`: Rust values shared between the
//! rank threads of the local transport, under the transport's own checks
//! (fingerprints with the value's type, deadlines, poison on panic).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use ruda_comm::{
    CommError, Communicator, LocalWorld, ObjectType, OpKind, PeerFailureCause, RankError,
};

fn world(n: usize) -> LocalWorld {
    LocalWorld::new(n).timeout(Duration::from_secs(20))
}

#[test]
fn every_rank_gets_every_value_in_rank_order() {
    for n in 1..=8 {
        let out = world(n)
            .run(|c| {
                let mine: Vec<u64> = (0..=c.rank() as u64).map(|i| i * 10 + 1).collect();
                c.all_gather_objects(&mine)
            })
            .unwrap();
        let want: Vec<Vec<u64>> = (0..n)
            .map(|r| (0..=r as u64).map(|i| i * 10 + 1).collect())
            .collect();
        for (r, got) in out.iter().enumerate() {
            assert_eq!(got, &want, "{n} ranks, rank {r}");
        }
    }
}

#[test]
fn values_are_cloned_once_per_rank_and_shared_handles_stay_shared() {
    // An `Arc` handle cloned by every rank: the peers hold the same
    // allocation (no copy of the value itself), one clone per rank each.
    let n = 4;
    let clones = Arc::new(AtomicUsize::new(0));
    #[derive(Debug)]
    struct Counted(Arc<AtomicUsize>, Arc<[u8]>);
    impl Clone for Counted {
        fn clone(&self) -> Self {
            self.0.fetch_add(1, Ordering::Relaxed);
            Counted(self.0.clone(), self.1.clone())
        }
    }
    let out = world(n)
        .run(|c| {
            let mine = Counted(clones.clone(), vec![c.rank() as u8; 3].into());
            let all = c.all_gather_objects(&mine)?;
            let ptrs: Vec<usize> = all.iter().map(|v| v.1.as_ptr() as usize).collect();
            let own = Arc::as_ptr(&mine.1) as *const u8 as usize;
            Ok::<_, CommError>((ptrs, own, all.iter().map(|v| v.1[0]).collect::<Vec<_>>()))
        })
        .unwrap();
    assert_eq!(clones.load(Ordering::Relaxed), n * n);
    for (r, (ptrs, own, vals)) in out.iter().enumerate() {
        assert_eq!(ptrs[r], *own, "rank {r} got its own allocation back");
        assert_eq!(vals, &[0, 1, 2, 3]);
        for (p, o) in out.iter().enumerate() {
            assert_eq!(ptrs[p], o.1, "rank {r} sees rank {p}'s allocation");
        }
    }
}

#[test]
fn different_types_are_a_desync_on_every_rank() {
    for n in [2, 3] {
        let results = world(n).run_each(|c| {
            if c.rank() == n - 1 {
                c.all_gather_objects(&7u32).map(|_| ())
            } else {
                c.all_gather_objects(&7u64).map(|_| ())
            }
        });
        for (r, res) in results.into_iter().enumerate() {
            match res {
                Err(RankError::Failed(CommError::Desync {
                    rank,
                    first,
                    other,
                    other_rank,
                    ..
                })) => {
                    assert_eq!(rank, r);
                    assert_eq!(other_rank, n - 1);
                    assert_eq!(first.op, OpKind::AllGatherObjects);
                    assert_eq!(first.object, Some(ObjectType::of::<u64>()));
                    assert_eq!(other.object, Some(ObjectType::of::<u32>()));
                    let msg = format!("{first} / {other}");
                    assert!(msg.contains("u64") && msg.contains("u32"), "{msg}");
                }
                other => panic!("rank {r}: {other:?}"),
            }
        }
    }
}

#[test]
fn objects_against_another_collective_are_a_desync() {
    let results = world(2).run_each(|c| {
        if c.rank() == 0 {
            c.all_gather_objects(&String::from("x")).map(|_| ())
        } else {
            c.all_gather_vec(&[1u8]).map(|_| ())
        }
    });
    for res in results {
        assert!(
            matches!(res, Err(RankError::Failed(CommError::Desync { .. }))),
            "{res:?}"
        );
    }
}

#[test]
fn a_rank_that_never_arrives_times_out_naming_it() {
    let start = Instant::now();
    let results = LocalWorld::new(3)
        .timeout(Duration::from_millis(300))
        .run_each(|c| {
            if c.rank() == 2 {
                thread::sleep(Duration::from_millis(900));
                return Ok(());
            }
            c.all_gather_objects(&c.rank()).map(|_| ())
        });
    assert!(start.elapsed() < Duration::from_secs(5));
    for res in &results[..2] {
        match res {
            Err(RankError::Failed(CommError::Timeout { missing, .. })) => {
                assert_eq!(missing, &vec![2])
            }
            // The late rank returned: its peers may see it leave instead.
            Err(RankError::Failed(CommError::PeerFailure { peer: 2, .. })) => {}
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn a_panicking_rank_poisons_the_call() {
    let start = Instant::now();
    let results = world(4).run_each(|c| {
        c.barrier()?;
        if c.rank() == 1 {
            thread::sleep(Duration::from_millis(50));
            panic!("rank 1 fails on purpose");
        }
        c.all_gather_objects(&vec![c.rank(); 2]).map(|_| ())
    });
    assert!(start.elapsed() < Duration::from_secs(5));
    for (r, res) in results.into_iter().enumerate() {
        match res {
            Err(RankError::Panicked(m)) if r == 1 => assert!(m.contains("on purpose")),
            Err(RankError::Failed(CommError::PeerFailure {
                peer: 1,
                cause: PeerFailureCause::Panicked,
                op: OpKind::AllGatherObjects,
                ..
            })) => {}
            other => panic!("rank {r}: {other:?}"),
        }
    }
}

#[test]
fn a_panicking_clone_does_not_strand_the_peers() {
    // Rank 0's value panics when cloned: every rank that clones it panics
    // inside the call (after passing its completion episode), and the next
    // collective fails promptly on the ranks that survive.
    #[derive(Debug)]
    struct Bomb(bool);
    impl Clone for Bomb {
        fn clone(&self) -> Self {
            assert!(!self.0, "this value refuses to be cloned");
            Bomb(false)
        }
    }
    let start = Instant::now();
    let results = world(3).run_each(|c| {
        let all = c.all_gather_objects(&Bomb(c.rank() == 0))?;
        c.barrier()?;
        Ok::<_, CommError>(all.len())
    });
    assert!(start.elapsed() < Duration::from_secs(5));
    for (r, res) in results.into_iter().enumerate() {
        assert!(
            matches!(&res, Err(RankError::Panicked(m)) if m.contains("refuses")),
            "rank {r}: {res:?}"
        );
    }
}

/// Which ranks' shared values have been dropped (outside the values, so a
/// clone can check its source is still alive without reading it).
static DROPPED: [std::sync::atomic::AtomicBool; 3] =
    [const { std::sync::atomic::AtomicBool::new(false) }; 3];

#[test]
fn one_ranks_panicking_clone_releases_no_value_while_peers_read_it() {
    // Rank 1 panics on its first clone; ranks 0 and 2 clone slowly. Rank
    // 1 must not release its own value before the others have cloned it
    // (its unwinding passes the call's completion episode first), and the
    // survivors' call itself fails naming rank 1: a rank that unwinds from
    // a call's work fails that call everywhere (in a data collective its
    // pieces of its peers' outputs would be missing).
    #[derive(Debug)]
    struct Canary {
        owner: usize,
        copy: bool,
    }
    thread_local!(static RANK: std::cell::Cell<usize> = const { std::cell::Cell::new(usize::MAX) });
    impl Clone for Canary {
        fn clone(&self) -> Self {
            let me = RANK.with(|r| r.get());
            assert!(me != 1, "rank 1 refuses to clone");
            thread::sleep(Duration::from_millis(30));
            assert!(
                !DROPPED[self.owner].load(Ordering::SeqCst),
                "rank {me} read rank {}'s value after it was released",
                self.owner
            );
            Canary {
                owner: self.owner,
                copy: true,
            }
        }
    }
    impl Drop for Canary {
        fn drop(&mut self) {
            if !self.copy {
                DROPPED[self.owner].store(true, Ordering::SeqCst);
            }
        }
    }
    let start = Instant::now();
    let results = world(3).run_each(|c| {
        RANK.with(|r| r.set(c.rank()));
        let mine = Canary {
            owner: c.rank(),
            copy: false,
        };
        let call = c.all_gather_objects(&mine).map(|all| all.len());
        // The group stays poisoned: the next call fails at once too.
        let next = c.barrier();
        Ok::<_, CommError>((call, next))
    });
    assert!(start.elapsed() < Duration::from_secs(5));
    for (r, res) in results.into_iter().enumerate() {
        match (r, res) {
            (1, Err(RankError::Panicked(m))) => assert!(m.contains("refuses"), "{m}"),
            (0 | 2, Ok((call, next))) => {
                assert!(
                    matches!(
                        call,
                        Err(CommError::PeerFailure {
                            op: OpKind::AllGatherObjects,
                            rank,
                            peer: 1,
                            cause: PeerFailureCause::Panicked,
                            ..
                        }) if rank == r
                    ),
                    "rank {r}: {call:?}"
                );
                assert!(
                    matches!(
                        next,
                        Err(CommError::PeerFailure {
                            op: OpKind::Barrier,
                            peer: 1,
                            ..
                        })
                    ),
                    "rank {r}: {next:?}"
                );
            }
            (r, other) => panic!("rank {r}: {other:?}"),
        }
    }
}

#[test]
fn objects_work_on_sub_groups_and_keep_the_sequence() {
    let out = world(4)
        .run(|c| {
            let sub = c.split(Some((c.rank() % 2) as u32), 0)?.unwrap();
            let all = sub.all_gather_objects(&(c.rank(), "tag"))?;
            Ok::<_, CommError>((all, sub.seq(), sub.flight_record().calls.len()))
        })
        .unwrap();
    assert_eq!(out[0].0, vec![(0, "tag"), (2, "tag")]);
    assert_eq!(out[3].0, vec![(1, "tag"), (3, "tag")]);
    for (_, seq, calls) in &out {
        assert_eq!(*seq, 1);
        assert_eq!(*calls, 1);
    }
}
