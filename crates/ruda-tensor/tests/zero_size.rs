//! Issue 17 (2): every operation — the primitives through the tensor
//! methods, and seed 004's replica operations — with zero-size chunks, zero
//! rows or columns on some or all ranks, gives the correct (possibly empty)
//! result with a gradient that satisfies the adjoint identity, or the same
//! typed error on every rank; never a panic. World sizes 1 to 8, drawn by
//! proptest with the row counts, column counts and radii; every case on
//! the host-staged group (`HostCollective` over the local transport) and
//! on the device-resident one (`DeviceGroup` on Flex).

mod common;

use burn_tensor::{DType, Device, Int, Tensor, TensorData};
use common::{dot, input, world};
use proptest::prelude::*;
use ruda_comm::RankError;
use ruda_tensor::TransposeAxes;
use ruda_tensor::{DeviceWorld, Error, Group, HostCollective, IntTensorExt, TensorExt, replica};

/// The operation under test, runnable on any group.
#[derive(Clone, Debug)]
enum Call {
    AllReduce,
    ReduceFrom,
    ReplicaAllReduce,
    AllGather(isize),
    GatherFromCopyTo,
    GatherFrom,
    ReduceScatter(isize),
    ReduceFromScatterTo,
    ScatterTo,
    CopyTo,
    Broadcast(usize),
    /// `reduce` to a root.
    Reduce(usize),
    /// Each rank's send counts.
    AllToAll(Vec<Vec<usize>>),
    /// `transpose_over(g, TransposeAxes { split_in: 1, split_out: 0 })`.
    Transpose,
    HaloExchange(usize),
    /// The radius and each rank's local rows.
    HaloReduce(usize, Vec<usize>),
    ReplicaAllGather(usize),
    ReplicaReduceScatter(usize),
    ReplicaAllToAll,
    RankSlice,
    /// Ranks take their slices in reverse.
    RankSliceBy,
}

impl Call {
    fn run<G: Group>(&self, g: &G, x: Tensor<2>) -> Result<Tensor<2>, Error> {
        let (me, n) = (g.rank(), g.size());
        match self {
            Call::AllReduce => x.all_reduce(g),
            Call::ReduceFrom => x.reduce_from(g),
            Call::ReplicaAllReduce => replica::all_reduce(x, g),
            Call::AllGather(dim) => x.all_gather(g, *dim),
            Call::GatherFromCopyTo => x.gather_from_copy_to(g, 0),
            Call::GatherFrom => x.gather_from(g, 0),
            Call::ReduceScatter(dim) => x.reduce_scatter(g, *dim),
            Call::ReduceFromScatterTo => x.reduce_from_scatter_to(g, 0),
            Call::ScatterTo => x.scatter_to(g, 0),
            Call::CopyTo => x.copy_to(g),
            Call::Broadcast(root) => x.broadcast(g, *root),
            Call::Reduce(root) => x.reduce(g, *root),
            Call::AllToAll(counts) => x.all_to_all(g, 0, &counts[me]),
            Call::Transpose => x.transpose_over(
                g,
                TransposeAxes {
                    split_in: 1,
                    split_out: 0,
                },
            ),
            Call::HaloExchange(radius) => x.halo_exchange(g, 0, *radius),
            Call::HaloReduce(radius, rows) => x.halo_reduce(g, 0, *radius, rows[me]),
            Call::ReplicaAllGather(k) => replica::all_gather(x, g, *k),
            Call::ReplicaReduceScatter(k) => replica::reduce_scatter(x, g, *k),
            Call::ReplicaAllToAll => replica::all_to_all(x, g),
            Call::RankSlice => replica::rank_slice(x, g),
            Call::RankSliceBy => {
                let lookup: Vec<i64> = (0..n as i64).rev().collect();
                let lookup = Tensor::<1, Int>::from_data(TensorData::new(lookup, [n]), &x.device());
                replica::rank_slice_by(x, &lookup, g)
            }
        }
    }
}

/// A rank's 2-D value, row-major.
#[derive(Clone, Debug, PartialEq)]
struct Val {
    v: Vec<f64>,
    shape: [usize; 2],
}

impl Val {
    fn new(seed: u64, tag: u64, who: usize, shape: [usize; 2]) -> Val {
        Val {
            v: input::<f64>(seed, tag, who, shape[0] * shape[1]),
            shape,
        }
    }

    fn rows(&self, start: usize, len: usize) -> Val {
        let c = self.shape[1];
        Val {
            v: self.v[start * c..(start + len) * c].to_vec(),
            shape: [len, c],
        }
    }

    /// `len` columns from `start`.
    fn cols(&self, start: usize, len: usize) -> Val {
        let c = self.shape[1];
        Val {
            v: (0..self.shape[0])
                .flat_map(|r| self.v[r * c + start..r * c + start + len].to_vec())
                .collect(),
            shape: [self.shape[0], len],
        }
    }

    fn stack(parts: &[Val], cols: usize) -> Val {
        Val {
            v: parts.iter().flat_map(|p| p.v.clone()).collect(),
            shape: [parts.iter().map(|p| p.shape[0]).sum(), cols],
        }
    }

    /// Concatenation along the columns (every part has `rows` rows).
    fn side_by_side(parts: &[Val], rows: usize) -> Val {
        let mut v = Vec::new();
        for r in 0..rows {
            for p in parts {
                let c = p.shape[1];
                v.extend_from_slice(&p.v[r * c..(r + 1) * c]);
            }
        }
        Val {
            v,
            shape: [rows, parts.iter().map(|p| p.shape[1]).sum()],
        }
    }

    fn sum(parts: &[Val]) -> Val {
        let mut out = parts[0].clone();
        for p in &parts[1..] {
            for (o, x) in out.v.iter_mut().zip(&p.v) {
                *o += x;
            }
        }
        out
    }

    fn zeros(shape: [usize; 2]) -> Val {
        Val {
            v: vec![0.0; shape[0] * shape[1]],
            shape,
        }
    }
}

/// Balanced chunks (the first `len % n` one larger), or `None` when some
/// rank would get none (the documented `EmptyChunk` error).
fn balanced(len: usize, n: usize) -> Option<Vec<usize>> {
    (len >= n).then(|| (0..n).map(|i| len / n + usize::from(i < len % n)).collect())
}

fn starts(sizes: &[usize]) -> Vec<usize> {
    sizes
        .iter()
        .scan(0, |acc, &s| {
            let o = *acc;
            *acc += s;
            Some(o)
        })
        .collect()
}

/// How a case must end.
#[derive(Clone)]
enum Expect {
    /// Every rank's output.
    Values(Vec<Val>),
    /// The same error on every rank.
    Error,
}

/// How values are counted in the adjoint identity: a replicated input or
/// output is one value, counted once (on rank 0).
#[derive(Clone, Copy, Default)]
struct Kinds {
    in_replicated: bool,
    out_replicated: bool,
}

/// The error's `Debug` text without the reporting rank's own field (the
/// only part allowed to differ between ranks).
fn without_reporter(e: &Error) -> String {
    let s = format!("{e:?}");
    let mut out = String::new();
    let mut rest = s.as_str();
    while let Some(i) = rest.find(" rank: ") {
        out.push_str(&rest[..i]);
        let after = &rest[i + " rank: ".len()..];
        let digits = after.chars().take_while(char::is_ascii_digit).count();
        out.push_str(" rank: _");
        rest = &after[digits..];
    }
    out.push_str(rest);
    out
}

/// One rank's part: run `call` on its tracked f64 input, backward with
/// weights `w` on the output; its output, ⟨A x, w⟩ and ⟨x, Aᵀ w⟩.
fn rank_part<G: Group>(
    g: &G,
    seed: u64,
    xs: &[Val],
    kinds: Kinds,
    call: &Call,
    name: &str,
) -> Result<(Val, f64, f64), Error> {
    let me = g.rank();
    let dev = Device::flex().autodiff();
    let x = Tensor::<2>::from_data(
        TensorData::new(xs[me].v.clone(), xs[me].shape),
        (&dev, DType::F64),
    )
    .require_grad();
    let y = call.run(g, x.clone())?;
    let shape = y.dims();
    let values = y.clone().into_data().try_to_vec::<f64>().unwrap();
    // A replicated output is one value: the same weights everywhere.
    let who = if kinds.out_replicated { 0 } else { me };
    let w = Val::new(seed, 77, who, shape);
    let wt = Tensor::<2>::from_data(TensorData::new(w.v.clone(), shape), (&dev, DType::F64));
    let grads = (y * wt).sum().backward();
    // Every operation is differentiable in its input: a missing gradient
    // means the graph was cut (Burn's slices of empty tensors do that).
    let g = x
        .grad(&grads)
        .unwrap_or_else(|| panic!("{name}: rank {me}'s input is off the autodiff graph"));
    assert_eq!(
        g.dims(),
        xs[me].shape,
        "{name}: gradient shape on rank {me}"
    );
    let gx = g.into_data().try_to_vec::<f64>().unwrap();
    Ok((
        Val {
            v: values.clone(),
            shape,
        },
        dot(&values, &w.v),
        dot(&xs[me].v, &gx),
    ))
}

/// Run `call` on every rank of a world of `xs.len()` on tracked f64
/// inputs, on the host-staged and on the device-resident group, and check
/// each outcome against `expect`: the forward values, the gradient's shape,
/// and Σ⟨A x, w⟩ = Σ⟨x, Aᵀ w⟩ (Aᵀ w from autodiff); or one error, the same
/// on every rank. Any panic fails.
fn check(name: &str, seed: u64, xs: &[Val], kinds: Kinds, call: Call, expect: Expect) {
    let n = xs.len();
    let host =
        world(n).run_each(|c| rank_part(&HostCollective::new(c), seed, xs, kinds, &call, name));
    verdict(
        &format!("{name} (host-staged)"),
        xs,
        kinds,
        host,
        expect.clone(),
    );
    let device = DeviceWorld::shared(n, Device::flex())
        .run_each(|g, _| rank_part(&g, seed, xs, kinds, &call, name));
    verdict(
        &format!("{name} (device-resident)"),
        xs,
        kinds,
        device,
        expect,
    );
}

/// Check one run's outcome (see [`check`]).
fn verdict(
    name: &str,
    xs: &[Val],
    kinds: Kinds,
    results: Vec<Result<(Val, f64, f64), RankError<Error>>>,
    expect: Expect,
) {
    let n = xs.len();
    let ctx = |r: usize| format!("{name}, {n} ranks, inputs {:?}, rank {r}", shapes(xs));
    for (r, res) in results.iter().enumerate() {
        if let Err(RankError::Panicked(p)) = res {
            panic!("{}: panicked: {p}", ctx(r));
        }
    }
    match expect {
        Expect::Values(want) => {
            let mut lhs = 0.0;
            let mut rhs = 0.0;
            for (r, res) in results.into_iter().enumerate() {
                let (got, l, rr) = match res {
                    Ok(v) => v,
                    Err(e) => panic!("{}: expected a result, got {e:?}", ctx(r)),
                };
                assert_eq!(got.shape, want[r].shape, "{}: shape", ctx(r));
                for (i, (a, b)) in got.v.iter().zip(&want[r].v).enumerate() {
                    assert!(
                        (a - b).abs() <= 1e-12 * (1.0 + b.abs()),
                        "{}: element {i}: {a} vs {b}",
                        ctx(r)
                    );
                }
                if r == 0 || !kinds.out_replicated {
                    lhs += l;
                }
                if r == 0 || !kinds.in_replicated {
                    rhs += rr;
                }
            }
            assert!(
                (lhs - rhs).abs() <= 1e-10 * (1.0 + lhs.abs()),
                "{name}, {n} ranks, inputs {:?}: adjoint identity {lhs} vs {rhs}",
                shapes(xs)
            );
        }
        Expect::Error => {
            let errors: Vec<String> = results
                .into_iter()
                .enumerate()
                .map(|(r, res)| match res {
                    Err(RankError::Failed(e)) => {
                        assert!(
                            !matches!(e, Error::Comm(_)),
                            "{}: a rule violation, not a transport failure: {e}",
                            ctx(r)
                        );
                        without_reporter(&e)
                    }
                    other => panic!("{}: expected an error, got {other:?}", ctx(r)),
                })
                .collect();
            for (r, e) in errors.iter().enumerate() {
                assert_eq!(e, &errors[0], "{}: the same error on every rank", ctx(r));
            }
        }
    }
}

fn shapes(xs: &[Val]) -> Vec<[usize; 2]> {
    xs.iter().map(|x| x.shape).collect()
}

/// One case's parameters, drawn by proptest: the world size, a row count
/// and a column count per rank (zeros likely), a shared radius and seed.
#[derive(Clone, Debug)]
struct Draw {
    n: usize,
    rows: Vec<usize>,
    cols: Vec<usize>,
    counts: Vec<Vec<usize>>,
    radius: usize,
    seed: u64,
}

fn draws() -> impl Strategy<Value = Draw> {
    (1usize..=8).prop_flat_map(|n| {
        (
            Just(n),
            prop::collection::vec(0usize..=2, n),
            prop::collection::vec(0usize..=2, n),
            prop::collection::vec(prop::collection::vec(0usize..=1, n), n),
            0usize..=1,
            any::<u64>(),
        )
            .prop_map(|(n, rows, cols, counts, radius, seed)| Draw {
                n,
                rows,
                cols,
                counts,
                radius,
                seed,
            })
    })
}

impl Draw {
    /// Every rank `[rows[0], cols[0]]`: one shape everywhere.
    fn same(&self) -> Vec<Val> {
        (0..self.n)
            .map(|r| Val::new(self.seed, 1, r, [self.rows[0], self.cols[0]]))
            .collect()
    }

    /// One value, replicated: rank 0's, everywhere.
    fn replicated(&self, shape: [usize; 2]) -> Vec<Val> {
        (0..self.n)
            .map(|_| Val::new(self.seed, 2, 0, shape))
            .collect()
    }

    /// Rank `r` holds `[rows[r], cols[0]]`.
    fn by_rows(&self) -> Vec<Val> {
        (0..self.n)
            .map(|r| Val::new(self.seed, 3, r, [self.rows[r], self.cols[0]]))
            .collect()
    }

    fn total_rows(&self) -> usize {
        self.rows.iter().sum()
    }
}

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: 24,
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn all_reduce_and_reduce_from(d in draws()) {
        let xs = d.same();
        let sum = Val::sum(&xs);
        check("all_reduce", d.seed, &xs, Kinds::default(), Call::AllReduce,
            Expect::Values(vec![sum.clone(); d.n]));
        check("reduce_from", d.seed, &xs, Kinds { out_replicated: true, ..Kinds::default() },
            Call::ReduceFrom, Expect::Values(vec![sum.clone(); d.n]));
        check("replica::all_reduce", d.seed, &xs, Kinds::default(),
            Call::ReplicaAllReduce, Expect::Values(vec![sum; d.n]));
    }

    #[test]
    fn all_gather_along_rows_and_columns(d in draws()) {
        let xs = d.by_rows();
        let all = Val::stack(&xs, d.cols[0]);
        check("all_gather(0)", d.seed, &xs, Kinds::default(), Call::AllGather(0),
            Expect::Values(vec![all.clone(); d.n]));
        check("gather_from_copy_to(0)", d.seed, &xs, Kinds::default(),
            Call::GatherFromCopyTo, Expect::Values(vec![all.clone(); d.n]));
        check("gather_from(0)", d.seed, &xs, Kinds { out_replicated: true, ..Kinds::default() },
            Call::GatherFrom, Expect::Values(vec![all; d.n]));
        // Columns that differ per rank, rows the same.
        let xs: Vec<Val> = (0..d.n).map(|r| Val::new(d.seed, 4, r, [d.rows[0], d.cols[r]])).collect();
        let all = Val::side_by_side(&xs, d.rows[0]);
        check("all_gather(1)", d.seed, &xs, Kinds::default(), Call::AllGather(1),
            Expect::Values(vec![all; d.n]));
    }

    #[test]
    fn reduce_scatter_and_scatter_to(d in draws()) {
        let total = d.total_rows();
        let shape = [total, d.cols[0]];
        let xs: Vec<Val> = (0..d.n).map(|r| Val::new(d.seed, 5, r, shape)).collect();
        let sum = Val::sum(&xs);
        let chunked = |v: &Val| match balanced(total, d.n) {
            Some(s) => Expect::Values(
                starts(&s).iter().zip(&s).map(|(&a, &l)| v.rows(a, l)).collect(),
            ),
            None => Expect::Error,
        };
        check("reduce_scatter(0)", d.seed, &xs, Kinds::default(),
            Call::ReduceScatter(0), chunked(&sum));
        // Along the columns (a swapped view inside): the first rank's row
        // count, often zero, with the total as the column count. The
        // output's next use (the weights' product in `rank_part`) must not
        // meet an empty view at a non-zero offset.
        let wide = [d.rows[0], total];
        let xs: Vec<Val> = (0..d.n).map(|r| Val::new(d.seed, 6, r, wide)).collect();
        let sum = Val::sum(&xs);
        let by_cols = match balanced(total, d.n) {
            Some(s) => Expect::Values(
                starts(&s).iter().zip(&s).map(|(&a, &l)| sum.cols(a, l)).collect(),
            ),
            None => Expect::Error,
        };
        check("reduce_scatter(1)", d.seed, &xs, Kinds::default(),
            Call::ReduceScatter(1), by_cols);
        let xs: Vec<Val> = (0..d.n).map(|r| Val::new(d.seed, 5, r, shape)).collect();
        let sum = Val::sum(&xs);
        check("reduce_from_scatter_to(0)", d.seed, &xs, Kinds::default(),
            Call::ReduceFromScatterTo, chunked(&sum));
        let rep = d.replicated(shape);
        check("scatter_to(0)", d.seed, &rep, Kinds { in_replicated: true, ..Kinds::default() },
            Call::ScatterTo, chunked(&rep[0]));
        check("copy_to", d.seed, &rep, Kinds { in_replicated: true, ..Kinds::default() },
            Call::CopyTo, Expect::Values(rep.clone()));
    }

    #[test]
    fn broadcast_from_the_last_rank(d in draws()) {
        let xs = d.same();
        let root = d.n - 1;
        check("broadcast", d.seed, &xs, Kinds::default(), Call::Broadcast(root),
            Expect::Values(vec![xs[root].clone(); d.n]));
    }

    #[test]
    fn reduce_to_the_last_rank(d in draws()) {
        let shape = d.same()[0].shape;
        let xs: Vec<Val> = (0..d.n).map(|r| Val::new(d.seed, 7, r, shape)).collect();
        let root = d.n - 1;
        let sum = Val::sum(&xs);
        let want = (0..d.n)
            .map(|r| if r == root { sum.clone() } else { Val::zeros(sum.shape) })
            .collect();
        check("reduce", d.seed, &xs, Kinds::default(), Call::Reduce(root), Expect::Values(want));
    }

    #[test]
    fn all_to_all_with_empty_sends(d in draws()) {
        let n = d.n;
        let cols = d.cols[0];
        let xs: Vec<Val> = (0..n)
            .map(|r| Val::new(d.seed, 6, r, [d.counts[r].iter().sum(), cols]))
            .collect();
        let want: Vec<Val> = (0..n)
            .map(|r| {
                let parts: Vec<Val> = (0..n)
                    .map(|s| xs[s].rows(starts(&d.counts[s])[r], d.counts[s][r]))
                    .collect();
                Val::stack(&parts, cols)
            })
            .collect();
        check("all_to_all(0)", d.seed, &xs, Kinds::default(),
            Call::AllToAll(d.counts.clone()), Expect::Values(want));
    }

    #[test]
    fn transpose_with_empty_chunks(d in draws(), d0 in 0usize..=6) {
        // Split along axis 1 (rank r holds cols[r] columns), whole along
        // axis 0 (d0 rows); afterwards split along 0, whole along 1.
        let xs: Vec<Val> = (0..d.n).map(|r| Val::new(d.seed, 7, r, [d0, d.cols[r]])).collect();
        let full = Val::side_by_side(&xs, d0);
        let want = match balanced(d0, d.n) {
            Some(s) => Expect::Values(starts(&s).iter().zip(&s).map(|(&a, &l)| full.rows(a, l)).collect()),
            None => Expect::Error,
        };
        check("transpose_over", d.seed, &xs, Kinds::default(),
            Call::Transpose, want);
    }

    #[test]
    fn halo_exchange_and_reduce_with_short_ranks(d in draws()) {
        let (n, radius, cols) = (d.n, d.radius, d.cols[0]);
        let too_short = n > 1 && d.rows.iter().any(|&h| h < radius);
        let xs = d.by_rows();
        let want = if too_short {
            Expect::Error
        } else {
            Expect::Values((0..n).map(|r| {
                let top = if r > 0 { xs[r - 1].rows(d.rows[r - 1] - radius, radius) } else { Val::zeros([radius, cols]) };
                let bottom = if r + 1 < n { xs[r + 1].rows(0, radius) } else { Val::zeros([radius, cols]) };
                Val::stack(&[top, xs[r].clone(), bottom], cols)
            }).collect())
        };
        check("halo_exchange", d.seed, &xs, Kinds::default(),
            Call::HaloExchange(radius), want);
        // halo_reduce: rank r holds rows[r] + 2·radius rows.
        let ys: Vec<Val> = (0..n).map(|r| Val::new(d.seed, 8, r, [d.rows[r] + 2 * radius, cols])).collect();
        let want = if too_short {
            Expect::Error
        } else {
            Expect::Values((0..n).map(|r| {
                let h = d.rows[r];
                let mut out = ys[r].rows(radius, h);
                let mut add = |from: &Val, at: usize| {
                    for i in 0..radius.min(h) {
                        for c in 0..cols {
                            out.v[(at + i) * cols + c] += from.v[i * cols + c];
                        }
                    }
                };
                if r > 0 {
                    add(&ys[r - 1].rows(radius + d.rows[r - 1], radius), 0);
                }
                if r + 1 < n {
                    add(&ys[r + 1].rows(0, radius), h.saturating_sub(radius));
                }
                out
            }).collect())
        };
        check("halo_reduce", d.seed, &ys, Kinds::default(),
            Call::HaloReduce(radius, d.rows.clone()), want);
    }

    #[test]
    fn replica_operations_with_empty_slices(d in draws()) {
        let n = d.n;
        let (r0, cols) = (d.rows[0], d.cols[0]);
        // all_gather: one shape everywhere, stacked.
        let xs = d.same();
        check("replica::all_gather", d.seed, &xs, Kinds::default(),
            Call::ReplicaAllGather(n),
            Expect::Values(vec![Val::stack(&xs, cols); n]));
        // reduce_scatter, all_to_all, rank_slice: [n·r0, cols].
        let xs: Vec<Val> = (0..n).map(|r| Val::new(d.seed, 9, r, [n * r0, cols])).collect();
        let sum = Val::sum(&xs);
        check("replica::reduce_scatter", d.seed, &xs, Kinds::default(),
            Call::ReplicaReduceScatter(n),
            Expect::Values((0..n).map(|r| sum.rows(r * r0, r0)).collect()));
        let want: Vec<Val> = (0..n)
            .map(|r| Val::stack(&(0..n).map(|s| xs[s].rows(r * r0, r0)).collect::<Vec<_>>(), cols))
            .collect();
        check("replica::all_to_all", d.seed, &xs, Kinds::default(),
            Call::ReplicaAllToAll, Expect::Values(want));
        check("replica::rank_slice", d.seed, &xs, Kinds::default(),
            Call::RankSlice,
            Expect::Values((0..n).map(|r| xs[r].rows(r * r0, r0)).collect()));
        // rank_slice_by: ranks take their slices in reverse.
        check("replica::rank_slice_by", d.seed, &xs, Kinds::default(),
            Call::RankSliceBy,
            Expect::Values((0..n).map(|r| xs[r].rows((n - 1 - r) * r0, r0)).collect()));
    }
}

/// Run an integer call on every rank, host-staged and device-resident, and
/// compare every rank's output with `want` bit for bit.
fn check_ints(
    name: &str,
    xs: &[(Vec<i64>, [usize; 2])],
    call: &IntOp,
    want: &[(Vec<i64>, [usize; 2])],
) {
    let n = xs.len();
    let part = |g: &dyn IntCall| -> Result<(Vec<i64>, [usize; 2]), Error> {
        let me = g.rank();
        let x = Tensor::<2, Int>::from_data(
            TensorData::new(xs[me].0.clone(), xs[me].1),
            (&Device::flex(), DType::I64),
        );
        let y = call(g, x)?;
        let shape = y.dims();
        Ok((y.into_data().try_to_vec::<i64>().unwrap(), shape))
    };
    let host = world(n).run(|c| part(&HostCollective::new(c))).unwrap();
    let device = DeviceWorld::shared(n, Device::flex())
        .run(|g, _| part(&g))
        .unwrap();
    assert_eq!(host, want, "{name} (host-staged), inputs {xs:?}");
    assert_eq!(device, want, "{name} (device-resident), inputs {xs:?}");
}

/// An integer call under test.
type IntOp = dyn Fn(&dyn IntCall, Tensor<2, Int>) -> Result<Tensor<2, Int>, Error> + Sync;

/// The integer methods on any group, as a trait object.
trait IntCall: Sync {
    fn rank(&self) -> usize;
    fn all_gather(&self, x: Tensor<2, Int>) -> Result<Tensor<2, Int>, Error>;
    fn all_to_all(&self, x: Tensor<2, Int>, counts: &[usize]) -> Result<Tensor<2, Int>, Error>;
}

impl<G: Group> IntCall for G {
    fn rank(&self) -> usize {
        Group::rank(self)
    }
    fn all_gather(&self, x: Tensor<2, Int>) -> Result<Tensor<2, Int>, Error> {
        IntTensorExt::all_gather(x, self, 0)
    }
    fn all_to_all(&self, x: Tensor<2, Int>, counts: &[usize]) -> Result<Tensor<2, Int>, Error> {
        IntTensorExt::all_to_all(x, self, 0, counts).map(|(y, _)| y)
    }
}

proptest! {
    #![proptest_config(config())]

    /// The integer methods: ranks without rows, rows without columns.
    #[test]
    fn integer_all_gather_and_all_to_all_with_empty_rows(d in draws()) {
        let (n, cols) = (d.n, d.cols[0]);
        let ints = |tag: u64, r: usize, rows: usize| -> (Vec<i64>, [usize; 2]) {
            let v = (0..rows * cols)
                .map(|i| (ruda_bench::mix(&[d.seed, tag, r as u64, i as u64]) >> 1) as i64)
                .collect();
            (v, [rows, cols])
        };
        let xs: Vec<_> = (0..n).map(|r| ints(1, r, d.rows[r])).collect();
        let all: (Vec<i64>, [usize; 2]) =
            (xs.iter().flat_map(|x| x.0.clone()).collect(), [d.total_rows(), cols]);
        check_ints("all_gather (integers)", &xs, &|g, x| g.all_gather(x), &vec![all; n]);
        let xs: Vec<_> = (0..n).map(|r| ints(2, r, d.counts[r].iter().sum())).collect();
        let want: Vec<_> = (0..n)
            .map(|r| {
                let mut v = Vec::new();
                let mut rows = 0;
                for (s, x) in xs.iter().enumerate() {
                    let start = starts(&d.counts[s])[r];
                    let k = d.counts[s][r];
                    v.extend_from_slice(&x.0[start * cols..(start + k) * cols]);
                    rows += k;
                }
                (v, [rows, cols])
            })
            .collect();
        let counts = d.counts.clone();
        check_ints(
            "all_to_all (integers)",
            &xs,
            &move |g, x| {
                let me = g.rank();
                g.all_to_all(x, &counts[me])
            },
            &want,
        );
    }
}

/// The reproduction of issue 17 (2): 3 columns on rank 0, none on rank 1.
#[test]
fn a_transpose_with_an_empty_chunk_is_correct_on_every_rank() {
    let xs = vec![Val::new(1, 1, 0, [4, 3]), Val::new(1, 1, 1, [4, 0])];
    check(
        "transpose_over",
        1,
        &xs,
        Kinds::default(),
        Call::Transpose,
        Expect::Values(vec![xs[0].rows(0, 2), xs[0].rows(2, 2)]),
    );
}
