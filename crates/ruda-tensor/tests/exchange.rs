//! Issue 27 (5): nonblocking point-to-point (`Exchange`: isend / irecv /
//! wait / send_recv). "Everyone sends, then everyone receives" patterns
//! (ring shifts, halos, many messages per pair) complete on 2 to 8 ranks,
//! host-staged and device-resident, with the values and gradients of an
//! f64 reference (adjoint identity summed over ranks); zero-size tensors
//! and halves arrive as sent and in order; operations that do not pair up
//! yet stay posted for a later wait; disagreements and stuck pairs are the
//! same typed error on both ranks; a peer that never waits is a timeout.

mod common;

use std::time::Duration;

use burn_tensor::{DType, Device, Tensor, TensorData};
use common::{errors, pair, world};
use proptest::prelude::*;
use ruda_comm::{LocalWorld, RankError};
use ruda_tensor::{
    DeviceWorld, Error, Exchange, Group, HostCollective, PairProblem, TensorExt, TensorOp,
    try_backward,
};

fn f64s(v: Vec<f64>, shape: [usize; 2], dev: &Device) -> Tensor<2> {
    Tensor::from_data(TensorData::new(v, shape), (dev, DType::F64))
}

fn values<const D: usize>(t: Tensor<D>) -> Vec<f64> {
    t.into_data().convert::<f64>().try_to_vec::<f64>().unwrap()
}

/// Rank r's input of the ring shift.
fn input(r: usize) -> Vec<f64> {
    (0..6).map(|i| (i + 7 * r) as f64 * 0.25 - 1.0).collect()
}

/// Rank r's weights in the loss `sum(w ⊙ received)`.
fn weights(r: usize) -> Vec<f64> {
    (0..6).map(|i| 1.0 - (i * (r + 2)) as f64 / 9.0).collect()
}

/// Every rank sends its `x` to the next and receives from the previous,
/// posting both before waiting; then the gradient of `sum(w ⊙ received)`
/// travels back. Returns (received, gradient of x).
fn ring<G: Group>(g: &G) -> Result<(Vec<f64>, Vec<f64>), Error> {
    let (me, n) = (g.rank(), g.size());
    let dev = Device::flex().autodiff();
    let ex = Exchange::new(g);
    let x = f64s(input(me), [2, 3], &dev).require_grad();
    let receipt = ex.isend(x.clone(), (me + 1) % n)?;
    assert_eq!(receipt.dims(), [0, 3]);
    let incoming = ex.irecv::<2>((me + n - 1) % n, &dev)?;
    assert_eq!(ex.posted(), 2);
    let y = incoming.wait()?;
    assert_eq!(ex.posted(), 0, "the wait carried out the send too");
    assert_eq!(y.dims(), [2, 3]);
    let got = values(y.clone());
    // The received tensor's gradient is posted for its sender ...
    try_backward(|| (y * f64s(weights(me), [2, 3], &dev)).sum().backward())?;
    assert_eq!(ex.posted(), 1);
    // ... and moves while the receipt's backward pass waits for ours.
    let grads = try_backward(|| receipt.sum().backward())?;
    assert_eq!(ex.posted(), 0);
    Ok((got, values(x.grad(&grads).expect("a gradient came back"))))
}

#[test]
fn a_ring_shift_posts_both_sides_and_carries_values_and_gradients() {
    for n in 2..=8 {
        let host = world(n).run(|c| ring(&HostCollective::new(c))).unwrap();
        let device = DeviceWorld::shared(n, Device::flex())
            .run(|g, _| ring(&g))
            .unwrap();
        for (which, out) in [("host", host), ("device", device)] {
            let (mut lhs, mut rhs) = (0.0, 0.0);
            for (r, (got, grad)) in out.iter().enumerate() {
                assert_eq!(
                    got,
                    &input((r + n - 1) % n),
                    "{which} {n}: rank {r} received"
                );
                assert_eq!(
                    grad,
                    &weights((r + 1) % n),
                    "{which} {n}: rank {r}'s gradient"
                );
                // ⟨A x, w⟩ and ⟨x, Aᵀ w⟩, summed over ranks.
                lhs += got.iter().zip(weights(r)).map(|(a, b)| a * b).sum::<f64>();
                rhs += input(r).iter().zip(grad).map(|(a, b)| a * b).sum::<f64>();
            }
            assert!(
                (lhs - rhs).abs() <= 1e-12 * lhs.abs().max(1.0),
                "{which}: {lhs} vs {rhs}"
            );
        }
    }
}

/// Each rank sends three tensors (f64, f16, a zero-size bf16) to each of
/// its neighbours on a line and receives theirs, everything posted before
/// one wait: they arrive with their shapes, dtypes and bits, in order.
#[test]
fn many_messages_to_several_peers_arrive_in_order() {
    let dtypes = [DType::F64, DType::F16, DType::BF16];
    let shapes = [[2usize, 3], [1, 4], [0, 5]];
    let message = |from: usize, to: usize, k: usize| {
        let len = shapes[k][0] * shapes[k][1];
        let v: Vec<f32> = (0..len)
            .map(|i| (i + 10 * from + 100 * to) as f32 * 0.5)
            .collect();
        Tensor::<2>::from_data(TensorData::new(v, shapes[k]), (&Device::flex(), dtypes[k]))
    };
    for n in 2..=6 {
        let out = world(n)
            .run(|c| {
                let g = HostCollective::new(c);
                let me = g.rank();
                let ex = Exchange::new(&g);
                let peers: Vec<usize> = [me.checked_sub(1), Some(me + 1).filter(|&p| p < n)]
                    .into_iter()
                    .flatten()
                    .collect();
                let mut incoming = Vec::new();
                for &p in &peers {
                    for k in 0..3 {
                        ex.isend(message(me, p, k), p)?;
                        incoming.push((p, k, ex.irecv::<2>(p, &Device::flex())?));
                    }
                }
                ex.wait()?;
                assert!(incoming.iter().all(|(_, _, i)| i.is_ready()));
                incoming
                    .into_iter()
                    .map(|(p, k, i)| Ok((p, k, i.wait()?.into_data())))
                    .collect::<Result<Vec<_>, Error>>()
            })
            .unwrap();
        for (me, got) in out.iter().enumerate() {
            for (p, k, data) in got {
                let want = message(*p, me, *k).into_data();
                assert_eq!(data.dtype(), dtypes[*k]);
                assert_eq!(data.shape(), want.shape());
                assert_eq!(
                    data.as_bytes(),
                    want.as_bytes(),
                    "{n} ranks: {p} → {me} #{k}"
                );
            }
        }
    }
}

/// Rank 0 posts three sends and one receive, then waits for the receive;
/// rank 1 takes the tensors one wait at a time before answering: what does
/// not pair up in a pass stays posted, and nothing is lost or reordered.
#[test]
fn unpaired_operations_stay_posted_for_a_later_wait() {
    let out = world(2)
        .run(|c| {
            let g = HostCollective::new(c);
            let ex = Exchange::new(&g);
            let dev = Device::flex();
            if g.rank() == 0 {
                for k in 0..3 {
                    ex.isend(Tensor::<1>::from_floats([k as f32; 2], &dev), 1)?;
                }
                let answer = ex.irecv::<1>(1, &dev)?.wait()?;
                ex.wait()?;
                Ok::<_, Error>(values(answer))
            } else {
                let mut sum = 0.0;
                for k in 0..3 {
                    let x = ex.irecv::<1>(0, &dev)?.wait()?;
                    let v = values(x);
                    assert_eq!(v, vec![k as f64; 2], "message {k}");
                    sum += v[0];
                }
                ex.isend(Tensor::<1>::from_floats([sum as f32], &dev), 0)?;
                ex.wait()?;
                Ok(vec![sum])
            }
        })
        .unwrap();
    assert_eq!(out[0], vec![3.0]);
}

/// `send_recv` between two ranks, and with different peers (a shift).
#[test]
fn send_recv_swaps_and_shifts() {
    for n in 2..=5 {
        let out = world(n).run_each(|c| {
            let g = HostCollective::new(c);
            let (me, n) = (g.rank(), g.size());
            let x = Tensor::<1>::from_floats([me as f32, 1.0], &Device::flex());
            let (receipt, y) =
                Exchange::new(&g).send_recv(x, (me + 2) % n, (me + n - 2) % n, &Device::flex())?;
            assert_eq!(receipt.dims(), [0]);
            Ok::<_, Error>(values(y)[0] as usize)
        });
        match n {
            // Two ranks apart is oneself on 2 ranks.
            2 => {
                for o in &out {
                    assert!(
                        matches!(o, Err(RankError::Failed(Error::InvalidPeer { .. }))),
                        "{o:?}"
                    );
                }
            }
            _ => {
                let got: Vec<usize> = out.into_iter().map(|o| o.unwrap()).collect();
                assert_eq!(got, (0..n).map(|r| (r + n - 2) % n).collect::<Vec<_>>());
            }
        }
    }
}

#[test]
fn a_pair_that_disagrees_fails_on_both_ranks() {
    // Rank 1 expects 3 dimensions, rank 0 sends 2.
    let e = errors(pair(|g| {
        let ex = Exchange::new(g);
        if g.rank() == 0 {
            ex.isend(Tensor::<2>::zeros([2, 2], &Device::flex()), 1)?;
            ex.wait()
        } else {
            ex.irecv::<3>(0, &Device::flex())?.wait().map(|_| ())
        }
    }));
    for (r, e) in e.iter().enumerate() {
        assert!(
            matches!(e, Error::PointToPoint { op: TensorOp::Exchange, rank, sender: 0, receiver: 1, backward: false, problem: PairProblem::Rank { sent: 2, expected: 3 } } if *rank == r),
            "rank {r}: {e:?}"
        );
    }
    // A tracked tensor for a receiver without autodiff.
    let e = errors(pair(|g| {
        let ex = Exchange::new(g);
        if g.rank() == 0 {
            let x = Tensor::<1>::from_floats([1.0], &Device::flex().autodiff()).require_grad();
            ex.isend(x, 1)?;
            ex.wait()
        } else {
            ex.irecv::<1>(0, &Device::flex())?.wait().map(|_| ())
        }
    }));
    for e in &e {
        assert!(
            matches!(
                e,
                Error::PointToPoint {
                    problem: PairProblem::Untracked,
                    sender: 0,
                    receiver: 1,
                    ..
                }
            ),
            "{e:?}"
        );
    }
}

/// Both ranks only send to each other (or only receive, or forward sends
/// meet only backward receives): nothing could progress, so both get the
/// same `Stuck` (lower rank as sender) with both ranks' counts; a receive
/// still posted on the failed exchange returns the error too.
#[test]
fn a_stuck_pair_is_the_same_error_on_both_ranks() {
    use ruda_tensor::PostedCounts;
    for case in 0..3 {
        let out = pair(|g| {
            let ex = Exchange::new(g);
            let peer = 1 - g.rank();
            let dev = Device::flex().autodiff();
            match case {
                0 => {
                    ex.isend(Tensor::<1>::zeros([3], &Device::flex()), peer)?;
                    ex.wait().map(|()| None)
                }
                1 => {
                    let a = ex.irecv::<1>(peer, &Device::flex())?;
                    let b = ex.irecv::<1>(peer, &Device::flex())?;
                    let first = a.wait().map(|_| ()).unwrap_err();
                    Ok(Some((
                        first,
                        b.is_ready(),
                        b.wait().map(|_| ()),
                        ex.posted(),
                    )))
                }
                _ => {
                    if g.rank() == 0 {
                        let x = Tensor::<1>::ones([2], &dev).require_grad();
                        let receipt = ex.isend(x, 1)?;
                        // The forward send goes; then the backward pass
                        // waits for the gradient, while rank 1 only sends
                        // a forward tensor back.
                        ex.wait()?;
                        try_backward(|| receipt.sum().backward()).map(|_| None)
                    } else {
                        let y = ex.irecv::<1>(0, &dev)?.wait()?;
                        ex.isend(y.detach(), 0)?;
                        ex.wait().map(|()| None)
                    }
                }
            }
        });
        let counts = |fs, bs, fr, br| PostedCounts {
            forward_sends: fs,
            backward_sends: bs,
            forward_receives: fr,
            backward_receives: br,
        };
        let (lower, higher) = match case {
            0 => (counts(1, 0, 0, 0), counts(1, 0, 0, 0)),
            1 => (counts(0, 0, 2, 0), counts(0, 0, 2, 0)),
            _ => (counts(0, 0, 0, 1), counts(1, 0, 0, 0)),
        };
        let want = PairProblem::Stuck { lower, higher };
        for (r, o) in out.into_iter().enumerate() {
            let stuck = |e: &Error| matches!(e, Error::PointToPoint { problem, rank, sender: 0, receiver: 1, .. } if *problem == want && *rank == r);
            match o {
                Err(RankError::Failed(e)) => {
                    assert!(case != 1 && stuck(&e), "case {case} rank {r}: {e:?}")
                }
                Ok(Some((first, ready, second, posted))) => {
                    assert!(case == 1 && stuck(&first), "{first:?}");
                    assert!(ready, "the failed exchange filled every posted receive");
                    assert!(matches!(second, Err(ref e) if stuck(e)), "{second:?}");
                    assert_eq!(posted, 0);
                }
                other => panic!("case {case} rank {r}: {other:?}"),
            }
        }
        assert!(
            want.to_string().contains("no posted operation pairs up"),
            "{want}"
        );
    }
}

/// Problems in both directions of a pair: both ranks report the lower
/// rank's finding (here: rank 1's tracked tensor for rank 0's device
/// without autodiff), not each its own.
#[test]
fn problems_in_both_directions_give_both_ranks_the_same_error() {
    let e = errors(pair(|g| {
        let ex = Exchange::new(g);
        if g.rank() == 0 {
            ex.isend(Tensor::<2>::zeros([2, 2], &Device::flex()), 1)?;
            ex.irecv::<1>(1, &Device::flex())?.wait().map(|_| ())
        } else {
            let x = Tensor::<1>::from_floats([1.0], &Device::flex().autodiff()).require_grad();
            ex.isend(x, 0)?;
            ex.irecv::<3>(0, &Device::flex())?.wait().map(|_| ())
        }
    }));
    for (r, e) in e.iter().enumerate() {
        assert!(
            matches!(e, Error::PointToPoint { rank, sender: 1, receiver: 0, backward: false, problem: PairProblem::Untracked, .. } if *rank == r),
            "rank {r}: {e:?}"
        );
    }
}

/// Two exchanges with different tags meeting on a pair: the same `Tag`
/// error on both ranks, never the other exchange's tensor.
#[test]
fn exchanges_with_different_tags_never_swap_tensors() {
    let e = errors(pair(|g| {
        let peer = 1 - g.rank();
        let (a, b) = (Exchange::tagged(g, 1), Exchange::tagged(g, 2));
        if g.rank() == 0 {
            a.isend(Tensor::<1>::zeros([1], &Device::flex()), peer)?;
            b.isend(Tensor::<1>::ones([1], &Device::flex()), peer)?;
            a.wait()?;
            b.wait()
        } else {
            let rb = b.irecv::<1>(peer, &Device::flex())?;
            let ra = a.irecv::<1>(peer, &Device::flex())?;
            rb.wait()?;
            ra.wait().map(|_| ())
        }
    }));
    for (r, e) in e.iter().enumerate() {
        assert!(
            matches!(e, Error::PointToPoint { rank, sender: 0, receiver: 1, problem: PairProblem::Tag { lower: 1, higher: 2 }, .. } if *rank == r),
            "rank {r}: {e:?}"
        );
    }
}

/// A forward tensor and a gradient between the same pair, posted in
/// different orders on the two ranks: forward messages pair with forward
/// receives and gradients with gradient receives, so both arrive.
#[test]
fn forward_tensors_and_gradients_pair_separately() {
    let out = world(2)
        .run(|c| {
            let g = HostCollective::new(c);
            let ex = Exchange::new(&g);
            let dev = Device::flex().autodiff();
            if g.rank() == 0 {
                let x = f64s(vec![1.0, -2.0, 3.0], [1, 3], &dev).require_grad();
                let receipt = ex.isend(x.clone(), 1)?;
                let later = ex.irecv::<2>(1, &dev)?; // a forward tensor, posted first
                let grads = try_backward(|| receipt.sum().backward())?; // then the gradient
                let z = later.wait()?;
                Ok::<_, Error>((values(x.grad(&grads).unwrap()), values(z)))
            } else {
                let y = ex.irecv::<2>(0, &dev)?.wait()?;
                try_backward(|| (y.clone() * y.clone()).sum().backward())?; // gradient posted first
                ex.isend(y.detach() * 10.0, 0)?; // then the forward tensor
                ex.wait()?;
                Ok((Vec::new(), Vec::new()))
            }
        })
        .unwrap();
    assert_eq!(out[0].0, vec![2.0, -4.0, 6.0]);
    assert_eq!(out[0].1, vec![10.0, -20.0, 30.0]);
}

/// One rank: no peer to post for, and a wait with nothing posted.
#[test]
fn one_rank_has_no_peer() {
    let out = world(1)
        .run(|c| {
            let g = HostCollective::new(c);
            let ex = Exchange::new(&g);
            let e = ex
                .isend(Tensor::<1>::zeros([1], &Device::flex()), 0)
                .unwrap_err();
            ex.wait()?;
            Ok::<_, Error>(e)
        })
        .unwrap();
    assert!(
        matches!(
            out[0],
            Error::InvalidPeer {
                peer: 0,
                size: 1,
                ..
            }
        ),
        "{:?}",
        out[0]
    );
}

/// Exchanges on the sub-groups of a split (even and odd world ranks), each
/// a ring of its own, with zero-size tensors and their (empty) gradients.
#[test]
fn rings_on_sub_groups_with_zero_size_tensors() {
    for n in 2..=7 {
        let out = world(n)
            .run(|c| {
                let world = HostCollective::new(c);
                let sub = world
                    .split(Some((world.rank() % 2) as u32), 0)?
                    .expect("a colour");
                let (me, k) = (sub.rank(), sub.size());
                if k == 1 {
                    return Ok::<_, Error>(None);
                }
                let dev = Device::flex().autodiff();
                let ex = Exchange::new(&sub);
                let x = f64s(Vec::new(), [0, 3], &dev).require_grad();
                let receipt = ex.isend(x.clone(), (me + 1) % k)?;
                let y = ex.irecv::<2>((me + k - 1) % k, &dev)?.wait()?;
                assert_eq!(y.dims(), [0, 3]);
                let v = f64s(vec![world.rank() as f64], [1, 1], &dev);
                let z = ex.send_recv(v, (me + 1) % k, (me + k - 1) % k, &dev)?.1;
                try_backward(|| y.sum().backward())?;
                let grads = try_backward(|| receipt.sum().backward())?;
                ex.wait()?;
                assert_eq!(x.grad(&grads).expect("an empty gradient").dims(), [0, 3]);
                Ok(Some(values(z)[0] as usize))
            })
            .unwrap();
        for (w, got) in out.iter().enumerate() {
            let same: Vec<usize> = (0..n).filter(|r| r % 2 == w % 2).collect();
            if same.len() > 1 {
                let i = same.iter().position(|&r| r == w).unwrap();
                let prev = same[(i + same.len() - 1) % same.len()];
                assert_eq!(*got, Some(prev), "{n} ranks, world rank {w}");
            }
        }
    }
}

#[test]
fn a_peer_outside_the_group_or_oneself_is_refused_before_posting() {
    let out = pair(|g| {
        let ex = Exchange::new(g);
        let me = g.rank();
        let own = ex
            .isend(Tensor::<1>::zeros([1], &Device::flex()), me)
            .unwrap_err();
        let far = ex.irecv::<1>(2, &Device::flex()).unwrap_err();
        Ok((own, far, ex.posted()))
    });
    for (r, o) in out.into_iter().enumerate() {
        let (own, far, posted) = o.unwrap();
        assert_eq!(
            own,
            Error::InvalidPeer {
                op: TensorOp::Exchange,
                rank: r,
                peer: r,
                size: 2
            }
        );
        assert_eq!(
            far,
            Error::InvalidPeer {
                op: TensorOp::Exchange,
                rank: r,
                peer: 2,
                size: 2
            }
        );
        assert!(own.to_string().contains("is this rank"), "{own}");
        assert!(far.to_string().contains("outside a group of 2"), "{far}");
        assert_eq!(posted, 0);
    }
}

/// A blocking `send` meeting an exchange's receive: an error on both
/// ranks (their first messages differ), not a hang or a wrong tensor.
#[test]
fn a_blocking_send_meeting_an_exchange_is_an_error_on_both_ranks() {
    let out = pair(|g| {
        if g.rank() == 0 {
            Tensor::<1>::zeros([2], &Device::flex())
                .send(g, 1)
                .map(|_| ())
        } else {
            Exchange::new(g)
                .irecv::<1>(0, &Device::flex())?
                .wait()
                .map(|_| ())
        }
    });
    for (r, o) in out.iter().enumerate() {
        // The transport refuses the mismatched message on both sides, and
        // names the call each rank was in.
        assert!(
            matches!(o, Err(RankError::Failed(Error::Comm(_)))),
            "rank {r}: {o:?}"
        );
        let text = o.as_ref().unwrap_err().to_string();
        assert!(text.starts_with(["send", "Exchange::wait"][r]), "{text}");
    }
}

/// A peer that never waits: the communicator's deadline ends the wait.
#[test]
fn a_peer_that_never_waits_is_a_timeout_not_a_hang() {
    let started = std::time::Instant::now();
    let out = LocalWorld::new(2)
        .timeout(Duration::from_millis(500))
        .run_each(|c| {
            let g = HostCollective::new(c);
            let ex = Exchange::new(&g);
            if g.rank() == 0 {
                ex.isend(Tensor::<1>::zeros([2], &Device::flex()), 1)?;
                ex.wait()
            } else {
                Ok(())
            }
        });
    assert!(
        matches!(&out[0], Err(RankError::Failed(Error::Comm(_)))),
        "{:?}",
        out[0]
    );
    assert!(started.elapsed() < Duration::from_secs(30));
}

/// The documented limit: a wait blocks at each peer it posted for until
/// that peer waits too, so a cycle through a third rank (valid with MPI's
/// eager sends) is ended by the communicator's timeout, an error on the
/// ranks, never a hang.
#[test]
fn a_cycle_of_waits_through_a_third_rank_ends_in_the_timeout() {
    let started = std::time::Instant::now();
    let out = LocalWorld::new(3)
        .timeout(Duration::from_millis(500))
        .run_each(|c| {
            let g = HostCollective::new(c);
            let ex = Exchange::new(&g);
            let dev = Device::flex();
            let one = || Tensor::<1>::ones([1], &dev);
            match g.rank() {
                0 => {
                    ex.isend(one(), 1)?;
                    ex.irecv::<1>(2, &dev)?.wait()?;
                    ex.wait()
                }
                1 => {
                    ex.irecv::<1>(2, &dev)?.wait()?;
                    ex.irecv::<1>(0, &dev)?.wait().map(|_| ())
                }
                _ => {
                    ex.isend(one(), 0)?;
                    ex.isend(one(), 1)?;
                    ex.wait()
                }
            }
        });
    assert!(
        out.iter()
            .any(|o| matches!(o, Err(RankError::Failed(Error::Comm(_))))),
        "{out:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(30));
}

/// A peer that panics instead of waiting: the waiting rank gets the
/// transport's peer-failure error at once, not a hang or a timeout.
#[test]
fn a_peer_that_panics_is_reported_to_the_waiting_rank() {
    let started = std::time::Instant::now();
    let out = pair(|g| {
        let ex = Exchange::new(g);
        if g.rank() == 1 {
            panic!("rank 1 fails before its wait");
        }
        ex.isend(Tensor::<1>::zeros([2], &Device::flex()), 1)?;
        ex.irecv::<1>(1, &Device::flex())?.wait().map(|_| ())
    });
    assert!(
        matches!(out[1], Err(RankError::Panicked(_))),
        "{:?}",
        out[1]
    );
    assert!(
        matches!(
            out[0],
            Err(RankError::Failed(Error::Comm(
                ruda_comm::CommError::PeerFailure { .. }
            )))
        ),
        "{:?}",
        out[0]
    );
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "before the 5 s deadline"
    );
}

/// Nothing posted: a wait returns at once.
#[test]
fn waiting_with_nothing_posted_returns_at_once() {
    let out = world(3)
        .run(|c| Exchange::new(&HostCollective::new(c)).wait())
        .unwrap();
    assert_eq!(out.len(), 3);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Random rings of random (possibly zero-size) messages, several per
    /// pair and some in both directions, all posted before one wait:
    /// everything arrives as sent.
    #[test]
    fn random_rings_deliver_every_message(
        n in 2usize..=5,
        per in 1usize..=3,
        rows in proptest::collection::vec(0usize..4, 3),
        back in any::<bool>(),
    ) {
        let msg = |from: usize, to: usize, k: usize| {
            let r = rows[k];
            let v: Vec<f32> = (0..r * 2).map(|i| (i + 10 * from + 100 * k + 1000 * to) as f32).collect();
            Tensor::<2>::from_data(TensorData::new(v, [r, 2]), &Device::flex())
        };
        let out = world(n).run(|c| {
            let g = HostCollective::new(c);
            let (me, n) = (g.rank(), g.size());
            let ex = Exchange::new(&g);
            let (next, prev) = ((me + 1) % n, (me + n - 1) % n);
            let mut inc = Vec::new();
            for k in 0..per {
                ex.isend(msg(me, next, k), next)?;
                if back {
                    ex.isend(msg(me, prev, k), prev)?;
                }
            }
            for k in 0..per {
                inc.push((prev, k, ex.irecv::<2>(prev, &Device::flex())?));
                if back {
                    inc.push((next, k, ex.irecv::<2>(next, &Device::flex())?));
                }
            }
            inc.into_iter()
                .map(|(from, k, i)| Ok((from, k, i.wait()?.into_data())))
                .collect::<Result<Vec<_>, Error>>()
        }).unwrap();
        for (me, got) in out.iter().enumerate() {
            for (from, k, data) in got {
                prop_assert_eq!(data.clone(), msg(*from, me, *k).into_data());
            }
        }
    }
}
