//! Issue 18 (5): tensor `send` / `recv`, each the other's adjoint. Values
//! and gradients along a chain of 2 to 8 ranks against an f64 reference,
//! on the host-staged and the device-resident group; zero-size tensors and
//! halves arrive as sent; a pair that disagrees ends in the same typed
//! error on both ranks, and a peer that never answers in a timeout.

mod common;

use std::time::Duration;

use burn_tensor::{DType, Device, Tensor, TensorData};
use common::{errors, pair, world};
use ruda_comm::{CommError, RankError};
use ruda_tensor::{
    DeviceWorld, Error, Group, HostCollective, PairProblem, TensorExt, TensorOp, recv,
};

/// A chain: rank 0 sends `x`, every middle rank receives, doubles and
/// passes on, the last computes `sum(w ⊙ y)`; every rank runs the backward
/// pass. Returns rank 0's gradient and the last rank's value.
fn chain<G: Group>(g: &G, x: &[f64], w: &[f64]) -> Result<(Vec<f64>, Vec<f64>), Error> {
    let (me, n) = (g.rank(), g.size());
    let dev = Device::flex().autodiff();
    let shape = [2, x.len() / 2];
    if me == 0 {
        let x = Tensor::<2>::from_data(TensorData::new(x.to_vec(), shape), (&dev, DType::F64))
            .require_grad();
        let receipt = x.clone().send(g, 1)?;
        assert_eq!(receipt.dims(), [0, shape[1]]);
        let grads = ruda_tensor::try_backward(|| receipt.sum().backward())?;
        let gx = x.grad(&grads).expect("a gradient came back");
        return Ok((gx.into_data().try_to_vec::<f64>().unwrap(), Vec::new()));
    }
    let y: Tensor<2> = recv(g, me - 1, &dev)?;
    assert_eq!(y.dims(), shape);
    if me + 1 < n {
        let receipt = (y * 2.0).send(g, me + 1)?;
        ruda_tensor::try_backward(|| receipt.sum().backward())?;
        Ok((Vec::new(), Vec::new()))
    } else {
        let values = y.clone().into_data().try_to_vec::<f64>().unwrap();
        let wt = Tensor::<2>::from_data(TensorData::new(w.to_vec(), shape), (&dev, DType::F64));
        ruda_tensor::try_backward(|| (y * wt).sum().backward())?;
        Ok((Vec::new(), values))
    }
}

#[test]
fn a_chain_of_sends_carries_values_forward_and_gradients_back() {
    for n in 2..=8 {
        let x: Vec<f64> = (0..6).map(|i| 0.1 + i as f64 / 3.0).collect();
        let w: Vec<f64> = (0..6).map(|i| 1.0 - i as f64 / 7.0).collect();
        let scale = 2f64.powi(n as i32 - 2);
        let host = world(n)
            .run(|c| chain(&HostCollective::new(c), &x, &w))
            .unwrap();
        let device = DeviceWorld::shared(n, Device::flex())
            .run(|g, _| chain(&g, &x, &w))
            .unwrap();
        for (which, out) in [("host", host), ("device", device)] {
            let want_y: Vec<f64> = x.iter().map(|v| v * scale).collect();
            let want_g: Vec<f64> = w.iter().map(|v| v * scale).collect();
            assert_eq!(
                out[n - 1].1,
                want_y,
                "{which}, {n} ranks: the last rank's value"
            );
            assert_eq!(out[0].0, want_g, "{which}, {n} ranks: rank 0's gradient");
            // ⟨A x, w⟩ = ⟨x, Aᵀ w⟩: A is the chain (x ↦ 2ⁿ⁻² x on the last rank).
            let lhs: f64 = want_y.iter().zip(&w).map(|(a, b)| a * b).sum();
            let rhs: f64 = x.iter().zip(&out[0].0).map(|(a, b)| a * b).sum();
            assert!(
                (lhs - rhs).abs() <= 1e-12 * lhs.abs(),
                "{which}: {lhs} vs {rhs}"
            );
        }
    }
}

/// Zero-size tensors, halves and f64 arrive with their shape, dtype and
/// bits; without autodiff the receipt can be dropped.
#[test]
fn shapes_and_dtypes_arrive_as_sent() {
    for dtype in [DType::F64, DType::F32, DType::F16, DType::BF16] {
        for shape in [[0usize, 3, 2], [2, 0, 5], [3, 4, 1]] {
            let len: usize = shape.iter().product();
            let v: Vec<f32> = (0..len).map(|i| i as f32 * 0.37 - 1.0).collect();
            let sent =
                Tensor::<3>::from_data(TensorData::new(v.clone(), shape), (&Device::flex(), dtype));
            let want = sent.clone().into_data();
            let out = world(2)
                .run(|c| {
                    let g = HostCollective::new(c);
                    if g.rank() == 0 {
                        sent.clone().send(&g, 1)?;
                        Ok::<_, Error>(None)
                    } else {
                        Ok(Some(recv::<3, _>(&g, 0, &Device::flex())?.into_data()))
                    }
                })
                .unwrap();
            let got = out[1].clone().unwrap();
            assert_eq!(got.dtype(), dtype, "{dtype:?} {shape:?}");
            assert_eq!(got.shape(), want.shape(), "{dtype:?} {shape:?}");
            assert_eq!(got.as_bytes(), want.as_bytes(), "{dtype:?} {shape:?}");
        }
    }
}

#[test]
fn a_pair_that_disagrees_fails_on_both_ranks() {
    // The receiver expects 3 dimensions, the sender sends 2.
    let e = errors(pair(|g| {
        if g.rank() == 0 {
            Tensor::<2>::zeros([2, 2], &Device::flex())
                .send(g, 1)
                .map(|_| ())
        } else {
            recv::<3, _>(g, 0, &Device::flex()).map(|_| ())
        }
    }));
    for (r, e) in e.iter().enumerate() {
        assert!(
            matches!(e, Error::PointToPoint { rank, sender: 0, receiver: 1, backward: false, problem: PairProblem::Rank { sent: 2, expected: 3 }, .. } if *rank == r),
            "rank {r}: {e:?}"
        );
    }
    assert!(
        e[0].to_string()
            .contains("has 2 dimensions, the receiver expects 3"),
        "{}",
        e[0]
    );
    // A tracked tensor for a receiver without autodiff: its gradient could
    // never come back.
    let e = errors(pair(|g| {
        if g.rank() == 0 {
            let x = Tensor::<1>::from_floats([1.0], &Device::flex().autodiff()).require_grad();
            x.send(g, 1).map(|_| ())
        } else {
            recv::<1, _>(g, 0, &Device::flex()).map(|_| ())
        }
    }));
    for (r, e) in e.iter().enumerate() {
        let op = [TensorOp::Send, TensorOp::Recv][r];
        assert!(
            matches!(e, Error::PointToPoint { op: o, rank, sender: 0, receiver: 1, backward: false, problem: PairProblem::Untracked } if *o == op && *rank == r),
            "rank {r}: {e:?}"
        );
    }
}

/// A send to a peer that never receives, a receive from one that never
/// sends, and a send to oneself end in the communicator's typed errors.
#[test]
fn a_missing_peer_is_an_error_not_a_hang() {
    let out = pair(|g| {
        if g.rank() == 0 {
            Tensor::<1>::from_floats([1.0], &Device::flex())
                .send(g, 1)
                .map(|_| ())
        } else {
            std::thread::sleep(Duration::from_millis(100));
            Ok(())
        }
    });
    assert!(
        matches!(&out[0], Err(RankError::Failed(Error::Comm(_)))),
        "{:?}",
        out[0]
    );
    let out = pair(|g| {
        if g.rank() == 1 {
            recv::<1, _>(g, 0, &Device::flex()).map(|_| ())
        } else {
            Ok(())
        }
    });
    assert!(
        matches!(&out[1], Err(RankError::Failed(Error::Comm(_)))),
        "{:?}",
        out[1]
    );
    let out = pair(|g| {
        Tensor::<1>::from_floats([1.0], &Device::flex())
            .send(g, g.rank())
            .map(|_| ())
    });
    for o in &out {
        assert!(
            matches!(
                o,
                Err(RankError::Failed(Error::Comm(
                    CommError::InvalidArgument { .. }
                )))
            ),
            "{o:?}"
        );
    }
}

/// The sender skips the backward pass: the receiver's backward pass (which
/// sends the gradient home) ends in a typed error, not a hang.
#[test]
fn a_sender_that_skips_the_backward_pass_is_an_error() {
    let out = pair(|g| {
        let dev = Device::flex().autodiff();
        if g.rank() == 0 {
            let x = Tensor::<1>::from_floats([1.0, 2.0], &dev).require_grad();
            let _receipt = x.send(g, 1)?;
            Ok(true)
        } else {
            let y: Tensor<1> = recv(g, 0, &dev)?;
            Ok(ruda_tensor::try_backward(|| y.sum().backward()).is_err())
        }
    });
    assert!(matches!(out[1], Ok(true)), "{:?}", out[1]);
}

/// Two messages between one pair whose backward passes reach them in
/// different orders: a typed error on both ranks, never a gradient
/// delivered to the other tensor (both have the same shape).
#[test]
fn backward_passes_that_pair_messages_differently_are_an_error() {
    let out = pair(|g| {
        let dev = Device::flex().autodiff();
        if g.rank() == 0 {
            let x = Tensor::<1>::from_floats([1.0, 2.0], &dev).require_grad();
            let a = x.clone() * 2.0; // deeper than b in the graph: its step runs first
            let ra = a.send(g, 1)?;
            let rb = x.clone().send(g, 1)?;
            ruda_tensor::try_backward(|| (ra.sum() + rb.sum()).backward()).map(|_| ())
        } else {
            let ya: Tensor<1> = recv(g, 0, &dev)?;
            let yb: Tensor<1> = recv(g, 0, &dev)?;
            // b's gradient first, in a backward pass of its own.
            ruda_tensor::try_backward(|| yb.sum().backward())?;
            ruda_tensor::try_backward(|| ya.sum().backward()).map(|_| ())
        }
    });
    for (r, o) in out.iter().enumerate() {
        assert!(
            matches!(
                o,
                Err(RankError::Failed(Error::PointToPoint {
                    backward: true,
                    sender: 1,
                    receiver: 0,
                    problem: PairProblem::Order { .. },
                    ..
                }))
            ),
            "rank {r}: {o:?}"
        );
    }
    // The same messages in matching orders deliver each gradient home.
    let out = pair(|g| {
        let dev = Device::flex().autodiff();
        if g.rank() == 0 {
            let x = Tensor::<1>::from_floats([1.0, 2.0], &dev).require_grad();
            let y = Tensor::<1>::from_floats([3.0, 4.0], &dev).require_grad();
            let rx = x.clone().send(g, 1)?;
            let ry = y.clone().send(g, 1)?;
            let grads = ruda_tensor::try_backward(|| (rx.sum() + ry.sum()).backward())?;
            let v = |t: &Tensor<1>| {
                t.grad(&grads)
                    .unwrap()
                    .into_data()
                    .try_to_vec::<f32>()
                    .unwrap()
            };
            Ok((v(&x), v(&y)))
        } else {
            let a: Tensor<1> = recv(g, 0, &dev)?;
            let b: Tensor<1> = recv(g, 0, &dev)?;
            ruda_tensor::try_backward(|| (a * 10.0 + b * 100.0).sum().backward())?;
            Ok((Vec::new(), Vec::new()))
        }
    });
    match &out[0] {
        Ok((gx, gy)) => {
            assert_eq!(gx, &vec![10.0, 10.0]);
            assert_eq!(gy, &vec![100.0, 100.0]);
        }
        // Burn may reach the two steps in either order: then both ranks say so.
        Err(RankError::Failed(Error::PointToPoint {
            problem: PairProblem::Order { .. },
            ..
        })) => {}
        other => panic!("{other:?}"),
    }
}

/// A receiver in its backward pass meets a forward send: a phase error on
/// both ranks.
#[test]
fn a_forward_send_into_a_backward_receive_is_an_error() {
    let out = pair(|g| {
        let dev = Device::flex().autodiff();
        if g.rank() == 0 {
            let x = Tensor::<1>::from_floats([1.0, 2.0], &dev).require_grad();
            let receipt = x.send(g, 1)?;
            ruda_tensor::try_backward(|| receipt.sum().backward()).map(|_| ())
        } else {
            let y: Tensor<1> = recv(g, 0, &dev)?;
            // Sends forward instead of running its backward pass.
            y.detach().send(g, 0).map(|_| ())
        }
    });
    for (r, o) in out.iter().enumerate() {
        assert!(
            matches!(
                o,
                Err(RankError::Failed(Error::PointToPoint {
                    sender: 1,
                    receiver: 0,
                    problem: PairProblem::Phase {
                        sender_backward: false
                    },
                    ..
                }))
            ),
            "rank {r}: {o:?}"
        );
    }
}
