//! Seed 004's operations over replica groups (`ruda_tensor::replica`): the
//! seed's own example, each operation against a serial reference on
//! uneven, single-rank, partial (ranks in no group) and listed-order
//! groups, empty tensors, the adjoint identity of each in f64, and the
//! typed errors — on the device-resident group and on the host-staged one.

mod common;

use std::time::Duration;

use burn_tensor::{DType, Device, Int, Tensor, TensorData};
use common::world;
use ruda_comm::{CommError, InvalidArgument, ReplicaGroups, ReplicaGroupsError};
use ruda_tensor::{
    DeviceWorld, Error, Group, HostCollective, LookupProblem, ShapeProblem, TensorOp, replica,
};

fn f64s<const D: usize>(t: Tensor<D>) -> Vec<f64> {
    t.into_data().convert::<f64>().try_to_vec::<f64>().unwrap()
}

fn tensor<const D: usize>(v: Vec<f64>, shape: [usize; D], device: &Device) -> Tensor<D> {
    Tensor::from_data(TensorData::new(v, shape), (device, DType::F64))
}

/// World rank `w`'s input of `rows × COLS` for test `tag`.
fn input(w: usize, tag: usize, rows: usize) -> Vec<f64> {
    (0..rows * COLS)
        .map(|i| ((w * 31 + tag * 7 + i * 5) % 17) as f64 - 8.0 + 0.25 * i as f64)
        .collect()
}

const COLS: usize = 3;

/// Run `f` on every rank of a world of `n`, host-staged and device-resident,
/// and check both give the same results; return them.
fn both<R: PartialEq + std::fmt::Debug + Send>(
    n: usize,
    f: impl Fn(&dyn Runner) -> R + Sync,
) -> Vec<R> {
    let host = world(n)
        .run(|c| Ok::<_, Error>(f(&On(HostCollective::new(c)))))
        .unwrap();
    let device = DeviceWorld::shared(n, Device::flex())
        .timeout(Duration::from_secs(60))
        .run(|g, _| Ok::<_, Error>(f(&On(g))))
        .unwrap();
    assert_eq!(device, host, "device-resident and host-staged differ");
    device
}

/// The seed's operations on one rank's world group of either kind.
trait Runner {
    fn world_rank(&self) -> usize;
    /// Run one operation over this rank's replica group of `groups`;
    /// `None` when this rank is in no group.
    fn op(&self, groups: &ReplicaGroups, op: Op, rows: usize) -> Option<Result<Ran, Error>>;
}

struct On<G>(G);

#[derive(Clone, Copy, Debug)]
enum Op {
    AllReduce,
    AllGather,
    ReduceScatter,
    AllToAll,
    RankSlice,
    RankSliceBy,
    /// The seed's example input on every rank, all-reduced, in f32.
    SeedExample,
    /// `all_gather` with group rank 1 passing `num_ranks = size + 1`.
    BadNumRanks,
    /// `all_gather` with world rank 1 holding one row more.
    UnevenGather,
    /// `rank_slice_by` with a table too short, or (group rank 0) an
    /// entry out of range.
    BadLookup,
}

/// One rank's run: its position and group size, output values and shape,
/// and ⟨A x, w⟩, ⟨x, Aᵀ w⟩ (from autodiff) for the adjoint identity.
#[derive(Clone, Debug, PartialEq)]
struct Ran {
    pos: usize,
    size: usize,
    shape: Vec<usize>,
    y: Vec<f64>,
    lhs: f64,
    rhs: f64,
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

fn run_op<G: Group>(g: &G, w: usize, op: Op, rows: usize) -> Result<Ran, Error> {
    let (pos, n) = (g.rank(), g.size());
    let dev = Device::flex().autodiff();
    let rows = rows + usize::from(matches!(op, Op::UnevenGather) && w == 1);
    let x0 = match op {
        Op::SeedExample => vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0],
        _ => input(w, 1, rows),
    };
    let x = match op {
        Op::SeedExample => Tensor::from_data(TensorData::new(x0.clone(), [2, 3]), &dev),
        _ => tensor(x0.clone(), [rows, COLS], &dev),
    }
    .require_grad();
    let y = match op {
        Op::AllReduce => replica::all_reduce(x.clone(), g)?,
        Op::AllGather => replica::all_gather(x.clone(), g, n)?,
        Op::ReduceScatter => replica::reduce_scatter(x.clone(), g, n)?,
        Op::AllToAll => replica::all_to_all(x.clone(), g)?,
        Op::RankSlice => replica::rank_slice(x.clone(), g)?,
        Op::RankSliceBy => {
            let rev: Vec<i64> = (0..n as i64).rev().collect();
            let lookup = Tensor::<1, Int>::from_data(TensorData::new(rev, [n]), &dev);
            replica::rank_slice_by(x.clone(), &lookup, g)?
        }
        Op::SeedExample => replica::all_reduce(x.clone(), g)?,
        Op::BadNumRanks => replica::all_gather(x.clone(), g, n + usize::from(pos == 1))?,
        Op::UnevenGather => replica::all_gather(x.clone(), g, n)?,
        Op::BadLookup => {
            let table: Vec<i64> = if pos == 0 { vec![7, 0, 1] } else { vec![0, 1] };
            let len = table.len();
            let lookup = Tensor::<1, Int>::from_data(TensorData::new(table, [len]), &dev);
            replica::rank_slice_by(x.clone(), &lookup, g)?
        }
    };
    let shape = y.dims().to_vec();
    let yv = f64s(y.clone());
    let w0 = input(w, 2, shape[0]);
    let w0 = w0[..shape.iter().product::<usize>()].to_vec();
    let wt = Tensor::from_data(
        TensorData::new(w0.clone(), [shape[0], shape[1]]),
        (&dev, y.dtype()),
    );
    // Burn records no graph through zero-element tensors: nothing to check.
    let gx = if x0.is_empty() || w0.is_empty() {
        vec![0.0; x0.len()]
    } else {
        let grads = ruda_tensor::try_backward(|| (y * wt).sum().backward())?;
        x.grad(&grads).map_or(vec![0.0; x0.len()], f64s)
    };
    Ok(Ran {
        pos,
        size: n,
        shape,
        lhs: dot(&yv, &w0),
        rhs: dot(&x0, &gx),
        y: yv,
    })
}

impl<G: Group> Runner for On<G> {
    fn world_rank(&self) -> usize {
        self.0.rank()
    }

    fn op(&self, groups: &ReplicaGroups, op: Op, rows: usize) -> Option<Result<Ran, Error>> {
        let sub = match self.0.replica_group(groups) {
            Ok(s) => s,
            Err(e) => return Some(Err(e)),
        };
        sub.map(|g| run_op(&g, self.0.rank(), op, rows))
    }
}

/// The serial reference of `op` for the members of one group (world ranks
/// in listed order), each with `rows` input rows: every member's output.
fn serial(op: Op, members: &[usize], rows: usize) -> Vec<Vec<f64>> {
    let n = members.len();
    let xs: Vec<Vec<f64>> = members.iter().map(|&w| input(w, 1, rows)).collect();
    let sum: Vec<f64> = (0..rows * COLS)
        .map(|i| {
            xs.iter()
                .fold(None, |a: Option<f64>, x| Some(a.map_or(x[i], |a| a + x[i])))
                .unwrap_or(0.0)
        })
        .collect();
    let chunk = |v: &[f64], k: usize| -> Vec<f64> {
        let c = rows / n * COLS;
        v[k * c..(k + 1) * c].to_vec()
    };
    (0..n)
        .map(|pos| match op {
            Op::AllReduce => sum.clone(),
            Op::AllGather => xs.concat(),
            Op::ReduceScatter => chunk(&sum, pos),
            Op::AllToAll => (0..n).flat_map(|src| chunk(&xs[src], pos)).collect(),
            Op::RankSlice => chunk(&xs[pos], pos),
            Op::RankSliceBy => chunk(&xs[pos], n - 1 - pos),
            _ => unreachable!("not a reference case"),
        })
        .collect()
}

const OPS: [Op; 6] = [
    Op::AllReduce,
    Op::AllGather,
    Op::ReduceScatter,
    Op::AllToAll,
    Op::RankSlice,
    Op::RankSliceBy,
];

/// Every op on every layout against the serial reference.
fn check_layout(n: usize, layout: &[Vec<usize>], rows_per_member: usize) {
    let groups = ReplicaGroups::new(layout.to_vec()).unwrap();
    for op in OPS {
        let out = both(n, |r| {
            r.op(
                &groups,
                op,
                rows_per_member * groups_len(layout, r.world_rank()),
            )
        });
        for (w, res) in out.iter().enumerate() {
            let listed = layout
                .iter()
                .find_map(|g| g.iter().position(|&m| m == w).map(|p| (g.clone(), p)));
            let what = format!("{op:?} on {layout:?}, world rank {w}");
            match (res, listed) {
                (None, None) => {}
                (Some(Ok(ran)), Some((members, pos))) => {
                    let k = members.len();
                    assert_eq!((ran.pos, ran.size), (pos, k), "{what}");
                    let want = &serial(op, &members, rows_per_member * k)[pos];
                    assert_eq!(&ran.y, want, "{what}");
                    let rows = rows_per_member * k;
                    let out_rows = match op {
                        Op::AllReduce | Op::AllToAll => rows,
                        Op::AllGather => k * rows,
                        _ => rows / k,
                    };
                    assert_eq!(ran.shape, vec![out_rows, COLS], "{what}");
                }
                other => panic!("{what}: {other:?}"),
            }
        }
        // Adjoint identity over each group: Σ⟨A x, w⟩ = Σ⟨x, Aᵀ w⟩.
        for members in layout {
            let (l, r): (f64, f64) = members
                .iter()
                .map(|&w| {
                    let ran = out[w].as_ref().unwrap().as_ref().unwrap();
                    (ran.lhs, ran.rhs)
                })
                .fold((0.0, 0.0), |a, b| (a.0 + b.0, a.1 + b.1));
            assert!(
                (l - r).abs() <= 1e-10 * (1.0 + l.abs()),
                "{op:?} on {layout:?}: adjoint identity {l} vs {r}"
            );
        }
    }
}

/// The size of world rank `w`'s group (1 when it is in none; unused then).
fn groups_len(layout: &[Vec<usize>], w: usize) -> usize {
    layout.iter().find(|g| g.contains(&w)).map_or(1, Vec::len)
}

#[test]
fn the_seeds_example() {
    // replica_group=[[0,1]], [[1,2,3],[4,5,6]] on both ranks → [[2,4,6],[8,10,12]].
    let want = vec![2.0, 4.0, 6.0, 8.0, 10.0, 12.0];
    let groups = ReplicaGroups::new([[0, 1]]).unwrap();
    let out = both(2, |r| r.op(&groups, Op::SeedExample, 2));
    for ran in out {
        let ran = ran.unwrap().unwrap();
        assert_eq!((ran.shape, ran.y), (vec![2, 3], want.clone()));
    }
    // The same group on a world of four: ranks 2 and 3 are in no group.
    let out = both(4, |r| r.op(&groups, Op::SeedExample, 2));
    assert!(out[2].is_none() && out[3].is_none());
    for ran in &out[..2] {
        assert_eq!(ran.as_ref().unwrap().as_ref().unwrap().y, want);
    }
}

#[test]
fn every_op_on_every_group_shape() {
    // One group of two; listed order not sorted (uneven group sizes);
    // single-rank groups; a partial list (ranks in no group); one rank.
    check_layout(2, &[vec![0, 1]], 2);
    check_layout(5, &[vec![3, 1], vec![0, 2, 4]], 2);
    check_layout(3, &[vec![2], vec![0], vec![1]], 3);
    check_layout(4, &[vec![2, 0, 3]], 1);
    check_layout(1, &[vec![0]], 2);
}

#[test]
fn empty_tensors_pass_through() {
    // Zero rows on every rank: every op returns zero rows (all-gather: 0·n).
    check_layout(3, &[vec![1, 0, 2]], 0);
}

/// One rank's outcome of a call that must fail.
fn failure(r: &dyn Runner, groups: &ReplicaGroups, op: Op, rows: usize) -> Option<Error> {
    r.op(groups, op, rows)
        .map(|res| res.expect_err("must fail"))
}

#[test]
fn rule_violations_are_typed_errors_on_every_rank_of_the_group() {
    let groups = ReplicaGroups::new([[2, 0, 1]]).unwrap();
    // Rank 1 of the group (world rank 0) passes num_ranks 4 to a group of 3.
    for e in both(3, |r| failure(r, &groups, Op::BadNumRanks, 2)) {
        let e = e.unwrap();
        assert!(
            matches!(
                e,
                Error::NumRanks {
                    op: TensorOp::ReplicaAllGather,
                    offender: 1,
                    num_ranks: 4,
                    size: 3,
                    ..
                }
            ),
            "{e}"
        );
    }
    // 4 rows do not split into 3 chunks.
    for e in both(3, |r| failure(r, &groups, Op::ReduceScatter, 4)) {
        assert!(matches!(
            e.unwrap(),
            Error::BadShape {
                op: TensorOp::ReplicaReduceScatter,
                offender: 0,
                problem: ShapeProblem::NotDivisible { ranks: 3 },
                ..
            }
        ),);
    }
    for e in both(3, |r| failure(r, &groups, Op::AllToAll, 4)) {
        assert!(matches!(
            e.unwrap(),
            Error::BadShape {
                op: TensorOp::ReplicaAllToAll,
                ..
            }
        ));
    }
    // Seed all-gather: one shape on every rank (world rank 1 holds 3 rows).
    for e in both(3, |r| failure(r, &groups, Op::UnevenGather, 2)) {
        assert!(matches!(
            e.unwrap(),
            Error::ShapeMismatch {
                op: TensorOp::ReplicaAllGather,
                offender: 2,
                ..
            }
        ));
    }
    // The slice helpers report on the calling rank.
    for e in both(3, |r| failure(r, &groups, Op::RankSlice, 4)) {
        assert!(matches!(
            e.unwrap(),
            Error::BadShape {
                op: TensorOp::RankSlice,
                problem: ShapeProblem::NotDivisible { ranks: 3 },
                ..
            }
        ));
    }
    for (w, e) in both(3, |r| failure(r, &groups, Op::BadLookup, 3))
        .into_iter()
        .enumerate()
    {
        let e = e.unwrap();
        // World rank 2 (group rank 0) reads entry 7; the others a table too short.
        let want = if w == 2 {
            LookupProblem::Index { index: 7, size: 3 }
        } else {
            LookupProblem::Shape {
                ndim: 1,
                len: 2,
                size: 3,
            }
        };
        assert!(
            matches!(&e, Error::RankLookup { problem, .. } if *problem == want),
            "{e}"
        );
    }
}

#[test]
fn bad_or_differing_replica_groups_fail_on_every_rank() {
    let out = both(3, |r| {
        // World rank 2 lists the group in another order.
        let g = if r.world_rank() == 2 {
            ReplicaGroups::new([[1, 0, 2]])
        } else {
            ReplicaGroups::new([[0, 1, 2]])
        }
        .unwrap();
        failure(r, &g, Op::AllReduce, 2)
    });
    for e in out {
        match e.unwrap() {
            Error::Comm(CommError::InvalidArgument {
                reason:
                    InvalidArgument::ReplicaGroups(ReplicaGroupsError::Differ {
                        reference: 0,
                        offender: 2,
                    }),
                ..
            }) => {}
            other => panic!("{other}"),
        }
    }
    let far = ReplicaGroups::new([[0, 3]]).unwrap();
    for e in both(3, |r| failure(r, &far, Op::AllReduce, 2)) {
        assert!(matches!(
            e.unwrap(),
            Error::Comm(CommError::InvalidArgument {
                reason: InvalidArgument::ReplicaGroups(ReplicaGroupsError::OutOfRange {
                    rank: 3,
                    ..
                }),
                ..
            })
        ));
    }
}
