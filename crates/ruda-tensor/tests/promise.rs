//! The tensor layer keeps its promise on the paths training takes: no
//! silently wrong result, no hang, a typed error on every rank — also under
//! autodiff, where Burn's graph keeps state alive after a rank has failed.

mod common;

use ruda_tensor::TransposeAxes;
use std::time::{Duration, Instant};

use burn_tensor::{DType, Device, Tensor, TensorData};
use common::*;
use ruda_comm::{CommError, LocalWorld, PeerFailureCause, RankError};
use ruda_tensor::{
    CallId, Error, Group, HostCollective, TensorExt, TensorOp, primitives, try_backward,
};

fn f64_tensor<const D: usize>(v: Vec<f64>, shape: [usize; D], device: &Device) -> Tensor<D> {
    Tensor::from_data(TensorData::new(v, shape), (device, DType::F64))
}

fn values<const D: usize>(t: Tensor<D>) -> Vec<f64> {
    t.into_data().convert::<f64>().try_to_vec::<f64>().unwrap()
}

/// A world whose deadline is long: a test that passes only by timing out
/// would take a minute, so "prompt" below means far under it.
fn patient(n: usize) -> LocalWorld {
    LocalWorld::new(n).timeout(Duration::from_secs(60))
}

#[test]
fn a_transpose_with_other_non_split_axes_is_an_error_everywhere() {
    // Issue 9 (2): [4, 2, 3, 4] against [4, 2, 4, 3] with dims (0, 1) has the
    // same product of the other axes; it used to return Ok with rank 0's
    // elements relabelled. A different product used to panic in Flex.
    for other in [[4, 2, 4, 3], [4, 2, 5, 3]] {
        let errs = errors(world(2).run_each(|c| {
            let g = HostCollective::new(c);
            let shape = if g.rank() == 0 { [4, 2, 3, 4] } else { other };
            let x = f64_tensor(vec![1.0; shape.iter().product()], shape, &Device::flex());
            x.transpose_over(
                &g,
                TransposeAxes {
                    split_in: 1,
                    split_out: 0,
                },
            )
            .map(|_| ())
        }));
        for (r, e) in errs.into_iter().enumerate() {
            match e {
                Error::ShapeMismatch {
                    op: TensorOp::Transpose,
                    rank,
                    offender: 1,
                    free_axis: Some(1),
                    expected,
                    got,
                    ..
                } => {
                    assert_eq!(rank, r);
                    assert_eq!(expected, vec![Some(4), None, Some(3), Some(4)]);
                    assert_eq!(got[2..], [Some(other[2]), Some(other[3])]);
                }
                other => panic!("{other}"),
            }
        }
    }
}

#[test]
fn ranks_in_different_operations_with_equal_shapes_are_a_desync() {
    // Issue 9 (7): both calls all-reduce a [3, 2] tensor underneath; the
    // agreement names the operations.
    let errs = errors(world(3).run_each(|c| {
        let g = HostCollective::new(c);
        let x = f64_tensor(vec![1.0; 6], [3, 2], &Device::flex());
        if g.rank() == 2 {
            x.reduce_from(&g).map(|_| ())
        } else {
            x.all_reduce(&g).map(|_| ())
        }
    }));
    for e in errs {
        let text = e.to_string();
        assert!(
            text.contains("rank 2 is in reduce_from (#0) where rank 0 is in all_reduce (#0)"),
            "{text}"
        );
        assert!(
            matches!(
                e,
                Error::Desync {
                    offender: 2,
                    expected: CallId {
                        op: TensorOp::AllReduce,
                        backward: false,
                        seq: 0
                    },
                    got: CallId {
                        op: TensorOp::ReduceFrom,
                        ..
                    },
                    ..
                }
            ),
            "{e}"
        );
    }
}

#[test]
fn each_call_is_one_agreement_and_one_data_exchange() {
    // Issue 9 (7): halo exchange used to make 5 collectives, transpose 4.
    world(3)
        .run(|c| {
            let g = HostCollective::new(c);
            let dev = Device::flex();
            let x = || f64_tensor(vec![1.0; 4 * 6], [4, 6], &dev);
            let count = |f: &dyn Fn() -> Result<(), Error>| -> Result<u64, Error> {
                let before = g.seq();
                f()?;
                Ok(g.seq() - before)
            };
            assert_eq!(count(&|| x().halo_exchange(&g, 0, 2).map(|_| ()))?, 2);
            assert_eq!(
                count(&|| x()
                    .transpose_over(
                        &g,
                        TransposeAxes {
                            split_in: 0,
                            split_out: 1
                        }
                    )
                    .map(|_| ()))?,
                2
            );
            assert_eq!(count(&|| x().all_gather(&g, 1).map(|_| ()))?, 2);
            assert_eq!(count(&|| x().all_to_all(&g, 0, &[1, 2, 1]).map(|_| ()))?, 2);
            assert_eq!(count(&|| x().all_reduce(&g).map(|_| ()))?, 2);
            assert_eq!(count(&|| x().copy_to(&g).map(|_| ()))?, 0);
            Ok::<_, Error>(())
        })
        .unwrap();
}

#[test]
fn halo_exchange_backward_equals_a_serial_reference() {
    // Issue 9 (8): 13 rows over 4 ranks ([4, 3, 3, 3]) with radius 2 and 3:
    // chunks with more rows than the radius but fewer than twice it.
    // Issue 17 (12): the backward pass is checked against the gradient
    // written out serially (where each input row appears in every rank's
    // output), not against `halo_reduce`, which runs the same code.
    const COLS: usize = 5;
    let n = 4;
    let rows_of = |r: usize| if r == 0 { 4 } else { 3 };
    for radius in [2, 3] {
        let ups: Vec<Vec<f64>> = (0..n)
            .map(|r| input::<f64>(7, 2, r, (rows_of(r) + 2 * radius) * COLS))
            .collect();
        // Row `i` of rank `r`'s input is row `radius + i` of its own output,
        // row `radius + rows(r-1) + i` of rank r-1's (its bottom halo) when
        // i < radius, and row `i - (rows(r) - radius)` of rank r+1's (its
        // top halo) when i >= rows(r) - radius.
        let expected: Vec<Vec<f64>> = (0..n)
            .map(|r| {
                let rows = rows_of(r);
                let mut g = vec![0.0; rows * COLS];
                for i in 0..rows {
                    for c in 0..COLS {
                        let mut v = ups[r][(radius + i) * COLS + c];
                        if r > 0 && i < radius {
                            v += ups[r - 1][(radius + rows_of(r - 1) + i) * COLS + c];
                        }
                        if r + 1 < n && i + radius >= rows {
                            v += ups[r + 1][(i + radius - rows) * COLS + c];
                        }
                        g[i * COLS + c] = v;
                    }
                }
                g
            })
            .collect();
        world(n)
            .run(|c| {
                let g = HostCollective::new(c);
                let me = g.rank();
                let rows = rows_of(me);
                let dev = Device::flex().autodiff();
                let x = f64_tensor(input::<f64>(7, 1, me, rows * COLS), [rows, COLS], &dev)
                    .require_grad();
                let upstream = f64_tensor(ups[me].clone(), [rows + 2 * radius, COLS], &dev);
                let y = x.clone().halo_exchange(&g, 0, radius)?;
                let grads = (y * upstream).sum().backward();
                let backward = values(x.grad(&grads).unwrap());
                assert_eq!(backward.len(), expected[me].len());
                for (i, (a, b)) in backward.iter().zip(&expected[me]).enumerate() {
                    assert!(
                        (a - b).abs() <= 1e-12 * (1.0 + b.abs()),
                        "radius {radius} rank {me} element {i}: {a} vs {b}"
                    );
                }
                Ok::<_, Error>(())
            })
            .unwrap();
    }
}

#[test]
fn halo_reduce_on_one_rank_with_fewer_rows_than_the_radius() {
    // Issue 9 (9): used to underflow `local_rows - radius`.
    world(1)
        .run(|c| {
            let g = HostCollective::new(c);
            let y = f64_tensor((0..5).map(f64::from).collect(), [5, 1], &Device::flex());
            let out = y.halo_reduce(&g, 0, 2, 1)?;
            assert_eq!(values(out), vec![2.0]); // the halo rows fall off the ends
            Ok::<_, Error>(())
        })
        .unwrap();
}

#[test]
fn a_rank_that_panics_after_a_differentiable_forward_fails_its_peers_promptly() {
    // Issue 9 (3): the autodiff graph keeps the backward state (and the
    // communicator it used to hold) alive; peers must not wait the deadline.
    let start = Instant::now();
    let results = patient(2).run_each(|c| {
        let g = HostCollective::new(c);
        let dev = Device::flex().autodiff();
        let x = f64_tensor(vec![1.0; 4], [2, 2], &dev).require_grad();
        let y = x.all_gather(&g, 0)?;
        if g.rank() == 1 {
            panic!("rank 1 fails after its forward");
        }
        y.sum().all_reduce(&g).map(|_| ())
    });
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "{:?}",
        start.elapsed()
    );
    assert!(
        matches!(
            &results[0],
            Err(RankError::Failed(Error::Comm(CommError::PeerFailure {
                peer: 1,
                cause: PeerFailureCause::Panicked,
                ..
            })))
        ),
        "{:?}",
        results[0]
    );
}

#[test]
fn a_backward_on_only_some_ranks_is_a_typed_error_promptly() {
    let start = Instant::now();
    let results = patient(3).run_each(|c| {
        let g = HostCollective::new(c);
        let dev = Device::flex().autodiff();
        let x = f64_tensor(vec![1.0; 3], [3], &dev).require_grad();
        let loss = x.all_gather(&g, 0)?.sum();
        if g.rank() == 2 {
            return Ok::<_, Error>(None); // skips the backward pass and returns
        }
        Ok(try_backward(|| loss.backward()).err())
    });
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "{:?}",
        start.elapsed()
    );
    for r in &results[..2] {
        // Rank 2 dropped its group on returning (the graph holds no strong
        // handle on it), or its world marked it finished: either way its
        // peers learn at once.
        assert!(
            matches!(
                r,
                Ok(Some(Error::Comm(CommError::PeerFailure {
                    peer: 2,
                    cause: PeerFailureCause::Finished | PeerFailureCause::LeftGroup,
                    ..
                })))
            ),
            "{r:?}"
        );
    }
}

#[test]
fn tracked_and_untracked_inputs_are_an_error_in_the_forward_pass() {
    // A rank whose input is untracked would skip a backward collective the
    // others enter: refused at once, on every rank.
    let errs = errors(world(2).run_each(|c| {
        let g = HostCollective::new(c);
        let dev = Device::flex().autodiff();
        let x = f64_tensor(vec![1.0; 2], [2], &dev);
        let x = if g.rank() == 0 { x.require_grad() } else { x };
        x.all_reduce(&g).map(|_| ())
    }));
    for e in errs {
        assert!(
            matches!(
                e,
                Error::TrackingMismatch {
                    offender: 1,
                    offender_tracked: false,
                    ..
                }
            ),
            "{e}"
        );
    }
    // Where the backward does not communicate, it does not matter.
    world(2)
        .run(|c| {
            let g = HostCollective::new(c);
            let dev = Device::flex().autodiff();
            let x = f64_tensor(vec![1.0; 2], [2], &dev);
            let x = if g.rank() == 0 { x.require_grad() } else { x };
            x.reduce_from(&g).map(|_| ())
        })
        .unwrap();
}

#[test]
fn a_backward_after_the_group_is_dropped_is_a_typed_error() {
    // Backward steps hold no strong handle on the group.
    world(1)
        .run(|c| {
            let dev = Device::flex().autodiff();
            let x = f64_tensor(vec![1.0; 2], [2], &dev).require_grad();
            let loss = {
                let g = HostCollective::new(c);
                x.all_reduce(&g)?.sum()
            }; // the last handle on the group goes here
            match try_backward(|| loss.backward()) {
                Err(Error::GroupDropped {
                    op: TensorOp::AllReduce,
                    rank: 0,
                }) => Ok(()),
                other => panic!("{:?}", other.map(|_| ())),
            }
        })
        .map_err(|e: ruda_comm::WorldError<Error>| e.to_string())
        .unwrap();
}

#[test]
fn primitive_level_calls_need_only_the_backend_named() {
    world(2)
        .run(|c| {
            let g = HostCollective::new(c);
            let x = leaf(vec![1.0, 2.0], &[2]);
            let y = primitives::all_gather::<Ad>(&g, x.clone(), 0)?;
            assert_eq!(read_ad(y).0, vec![1.0, 2.0, 1.0, 2.0]);
            Ok::<_, Error>(())
        })
        .unwrap();
}

#[test]
fn errors_name_the_operation_the_user_called() {
    // Issue 17 (9): a peer that left during a tensor all-reduce used to
    // read "all_gather on rank 0: …" (the agreement's internal step).
    let results = patient(2).run_each(|c| {
        let g = HostCollective::new(c);
        if g.rank() == 1 {
            return Ok(());
        }
        f64_tensor(vec![1.0; 4], [2, 2], &Device::flex())
            .all_reduce(&g)
            .map(|_| ())
    });
    match &results[0] {
        Err(RankError::Failed(e @ Error::Comm(CommError::PeerFailure { peer: 1, .. }))) => {
            let msg = e.to_string();
            assert!(msg.starts_with("all_reduce on rank 0: rank 1"), "{msg}");
        }
        other => panic!("{other:?}"),
    }
    // In the backward pass: rank 1 returns before its backward.
    let results = patient(2).run_each(|c| {
        let g = HostCollective::new(c);
        let x = f64_tensor(vec![1.0; 4], [2, 2], &Device::flex().autodiff()).require_grad();
        let y = x.all_gather(&g, 0)?;
        if g.rank() == 1 {
            return Ok(());
        }
        try_backward(|| y.sum().backward()).map(|_| ())
    });
    match &results[0] {
        Err(RankError::Failed(e @ Error::Comm(CommError::PeerFailure { .. }))) => {
            let msg = e.to_string();
            assert!(
                msg.starts_with("the backward pass of all_gather on rank 0: rank 1"),
                "{msg}"
            );
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn an_out_of_range_root_says_so() {
    // Issue 17 (9): it read "rank 0 names root 5 in a group of 2 where rank
    // 0 names 5".
    let errs = errors(world(2).run_each(|c| {
        let g = HostCollective::new(c);
        f64_tensor(vec![1.0; 2], [2], &Device::flex())
            .broadcast(&g, 5)
            .map(|_| ())
    }));
    for (r, e) in errs.into_iter().enumerate() {
        assert_eq!(
            e.to_string(),
            format!("broadcast (reported by rank {r}): rank 0 names root 5, outside a group of 2")
        );
    }
    // Roots that differ name rank 0's.
    let errs = errors(world(2).run_each(|c| {
        let g = HostCollective::new(c);
        let root = g.rank();
        f64_tensor(vec![1.0; 2], [2], &Device::flex())
            .broadcast(&g, root)
            .map(|_| ())
    }));
    for (r, e) in errs.into_iter().enumerate() {
        assert_eq!(
            e.to_string(),
            format!("broadcast (reported by rank {r}): rank 1 names root 1 where rank 0 names 0")
        );
    }
}

#[test]
fn invalid_replica_groups_convert_into_the_tensor_error() {
    // Issue 17 (9): `?` on ReplicaGroups::new in a rank's code.
    let out = world(1).run_each(|c| {
        let g = HostCollective::new(c);
        let groups = ruda_comm::ReplicaGroups::new([[0usize, 0]])?;
        g.replica_group(&groups).map(|_| ())
    });
    match &out[0] {
        Err(RankError::Failed(Error::ReplicaGroups(ruda_comm::ReplicaGroupsError::Repeated {
            rank: 0,
            ..
        }))) => {}
        other => panic!("{other:?}"),
    }
}

#[test]
fn one_transpose_convention_at_every_level() {
    // Issue 17 (11): the tensor method took (now, next), the primitive and
    // the operation (next, now). Now all take the same named axes, and the
    // seed's torch-harmonics names convert their tuple explicitly.
    use burn_flex::Flex;
    use ruda_tensor::ops::{Transpose, apply};
    let axes = TransposeAxes {
        split_in: 1,
        split_out: 0,
    };
    world(2)
        .run(|c| {
            let g = HostCollective::new(c);
            let cols = 2 + g.rank();
            let v: Vec<f64> = (0..4 * cols).map(|i| (100 * g.rank() + i) as f64).collect();
            let method =
                values(f64_tensor(v.clone(), [4, cols], &Device::flex()).transpose_over(&g, axes)?);
            let prim = read_float::<f64>(primitives::transpose::<Flex>(
                &g,
                float(v.clone(), &[4, cols]),
                axes,
                None,
            )?)
            .0;
            let op = read_float::<f64>(apply::<Flex, _, _>(
                &g,
                Transpose::new(axes, None),
                float(v.clone(), &[4, cols]),
            )?)
            .0;
            assert_eq!(method, prim);
            assert_eq!(method, op);
            // The expected rows: rank r's half of the 4 rows, all 5 columns.
            let me = g.rank();
            let mut want = Vec::new();
            for row in 2 * me..2 * me + 2 {
                for (src, w) in [(0usize, 2usize), (1, 3)] {
                    want.extend((0..w).map(|j| (100 * src + row * w + j) as f64));
                }
            }
            assert_eq!(method, want);
            Ok::<_, Error>(())
        })
        .unwrap();
}
