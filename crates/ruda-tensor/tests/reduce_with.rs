//! Issue 18 (5): tensor all-reduce and reduce-scatter with every
//! `ReduceOp`, differentiable where defined. Forward values and gradients
//! against an f64 reference computed here; world sizes 1 to 8 with shapes
//! that include zero rows and columns and inputs drawn from a small set of
//! values, so ties for the extremum are common; both the host-staged and
//! the device-resident group; and the typed errors, the same on every rank.

mod common;

use std::time::Duration;

use burn_tensor::{DType, Device, Tensor, TensorData};
use common::{dot, errors, world};
use proptest::prelude::*;
use ruda_bench::mix;
use ruda_comm::{LocalWorld, RankError, ReduceOp};
use ruda_tensor::{DeviceWorld, Error, Group, HostCollective, TensorExt, TensorOp};

/// Rank `r`'s input: small integers (ties likely), f64.
fn value(seed: u64, r: usize, len: usize) -> Vec<f64> {
    (0..len)
        .map(|i| (mix(&[seed, 5, r as u64, i as u64]) % 4) as f64 - 1.0)
        .collect()
}

/// Rank `r`'s output-gradient weights for an output of `len` values.
fn weights(seed: u64, r: usize, len: usize) -> Vec<f64> {
    (0..len)
        .map(|i| (mix(&[seed, 6, r as u64, i as u64]) % 1000) as f64 / 250.0 - 2.0)
        .collect()
}

/// The reduction of every rank's element `i`, in rank order.
fn reduce_ref(xs: &[Vec<f64>], i: usize, op: ReduceOp) -> f64 {
    let it = xs.iter().map(|x| x[i]);
    match op {
        ReduceOp::Sum => it.sum(),
        ReduceOp::Mean => it.sum::<f64>() / xs.len() as f64,
        ReduceOp::Prod => it.product(),
        ReduceOp::Max => it.fold(f64::NEG_INFINITY, f64::max),
        ReduceOp::Min => it.fold(f64::INFINITY, f64::min),
    }
}

/// Balanced chunks of `len` over `n` (the first `len % n` one larger), or
/// `None` when a rank would get none.
fn chunks(len: usize, n: usize) -> Option<Vec<usize>> {
    (len >= n).then(|| (0..n).map(|i| len / n + usize::from(i < len % n)).collect())
}

/// What a case must give: each rank's output and input gradient
/// (row-major, `[rows, cols]` inputs), or one error on every rank.
enum Want {
    Values {
        out: Vec<(Vec<f64>, [usize; 2])>,
        grad: Vec<Vec<f64>>,
    },
    Error,
}

/// The reference for `op` over inputs `xs` of shape `shape`, scattered
/// along `dim` when given; the output gradient of rank `r` is
/// `weights(seed, r, …)`.
fn reference(
    seed: u64,
    xs: &[Vec<f64>],
    shape: [usize; 2],
    op: ReduceOp,
    dim: Option<usize>,
    tracked: bool,
) -> Want {
    let n = xs.len();
    let len = shape[0] * shape[1];
    if tracked && op == ReduceOp::Prod {
        return Want::Error;
    }
    let full: Vec<f64> = (0..len).map(|i| reduce_ref(xs, i, op)).collect();
    // Which chunk of the whole each rank keeps: (dim, start, len).
    let cut: Vec<Option<(usize, usize, usize)>> = match dim {
        None => vec![None; n],
        Some(d) => match chunks(shape[d], n) {
            None => return Want::Error,
            Some(c) => (0..n)
                .map(|r| Some((d, c[..r].iter().sum(), c[r])))
                .collect(),
        },
    };
    let in_cut = |c: Option<(usize, usize, usize)>, i: usize| match c {
        None => true,
        Some((d, s, l)) => {
            let idx = if d == 0 { i / shape[1] } else { i % shape[1] };
            idx >= s && idx < s + l
        }
    };
    let mut out = Vec::new();
    // The output gradient of every rank, zero-padded to the whole shape, summed.
    let mut total = vec![0.0; len];
    for (r, c) in cut.iter().enumerate() {
        let kept: Vec<f64> = (0..len)
            .filter(|&i| in_cut(*c, i))
            .map(|i| full[i])
            .collect();
        let oshape = match c {
            None => shape,
            Some((0, _, l)) => [*l, shape[1]],
            Some((_, _, l)) => [shape[0], *l],
        };
        let w = weights(seed, r, kept.len());
        let mut k = 0;
        for (i, t) in total.iter_mut().enumerate() {
            if in_cut(*c, i) {
                *t += w[k];
                k += 1;
            }
        }
        out.push((kept, oshape));
    }
    let grad = (0..n)
        .map(|r| {
            (0..len)
                .map(|i| match op {
                    ReduceOp::Sum => total[i],
                    ReduceOp::Mean => total[i] / n as f64,
                    ReduceOp::Prod => 0.0,
                    ReduceOp::Max | ReduceOp::Min => {
                        let holders = xs.iter().filter(|x| x[i] == full[i]).count();
                        if xs[r][i] == full[i] {
                            total[i] / holders as f64
                        } else {
                            0.0
                        }
                    }
                })
                .collect()
        })
        .collect();
    Want::Values { out, grad }
}

/// One rank's part: the call on its f64 input (tracked or not), backward
/// with its weights; the output, its shape and the input's gradient.
#[allow(clippy::type_complexity)]
fn rank_part<G: Group>(
    g: &G,
    seed: u64,
    xs: &[Vec<f64>],
    shape: [usize; 2],
    op: ReduceOp,
    dim: Option<isize>,
    tracked: bool,
) -> Result<(Vec<f64>, [usize; 2], Vec<f64>), Error> {
    let me = g.rank();
    let dev = Device::flex().autodiff();
    let mut x = Tensor::<2>::from_data(TensorData::new(xs[me].clone(), shape), (&dev, DType::F64));
    if tracked {
        x = x.require_grad();
    }
    let y = match dim {
        None => x.clone().all_reduce_with(g, op)?,
        Some(d) => x.clone().reduce_scatter_with(g, d, op)?,
    };
    let oshape = y.dims();
    let out = y.clone().into_data().try_to_vec::<f64>().unwrap();
    if !tracked {
        return Ok((out, oshape, Vec::new()));
    }
    let w = Tensor::<2>::from_data(
        TensorData::new(weights(seed, me, out.len()), oshape),
        (&dev, DType::F64),
    );
    let grads = (y * w).sum().backward();
    let gx = x
        .grad(&grads)
        .map(|t| t.into_data().try_to_vec::<f64>().unwrap())
        .unwrap_or_else(|| vec![0.0; shape[0] * shape[1]]);
    Ok((out, oshape, gx))
}

/// `op` on every rank of `n`, host-staged and device-resident, checked
/// against the reference.
fn run_case(
    seed: u64,
    n: usize,
    shape: [usize; 2],
    op: ReduceOp,
    dim: Option<isize>,
    tracked: bool,
) {
    let xs: Vec<Vec<f64>> = (0..n)
        .map(|r| value(seed, r, shape[0] * shape[1]))
        .collect();
    let want = reference(
        seed,
        &xs,
        shape,
        op,
        dim.map(|d| d.rem_euclid(2) as usize),
        tracked,
    );
    let host = world(n)
        .run_each(|c| rank_part(&HostCollective::new(c), seed, &xs, shape, op, dim, tracked));
    let device = DeviceWorld::shared(n, Device::flex())
        .run_each(|g, _| rank_part(&g, seed, &xs, shape, op, dim, tracked));
    for (which, results) in [("host-staged", host), ("device-resident", device)] {
        let ctx = format!("{op} {dim:?} {which}, {n} ranks, shape {shape:?}, tracked {tracked}");
        match &want {
            Want::Values { out, grad } => {
                let mut lhs = 0.0;
                let mut rhs = 0.0;
                for (r, res) in results.into_iter().enumerate() {
                    let (got, oshape, gx) =
                        res.unwrap_or_else(|e| panic!("{ctx}, rank {r}: {e:?}"));
                    assert_eq!(oshape, out[r].1, "{ctx}, rank {r}: shape");
                    for (i, (a, b)) in got.iter().zip(&out[r].0).enumerate() {
                        assert!(
                            (a - b).abs() <= 1e-12 * (1.0 + b.abs()),
                            "{ctx}, rank {r}, element {i}: {a} vs {b}"
                        );
                    }
                    assert_eq!(got.len(), out[r].0.len(), "{ctx}, rank {r}: length");
                    if tracked {
                        assert_eq!(gx.len(), grad[r].len(), "{ctx}, rank {r}: gradient length");
                        for (i, (a, b)) in gx.iter().zip(&grad[r]).enumerate() {
                            assert!(
                                (a - b).abs() <= 1e-12 * (1.0 + b.abs()),
                                "{ctx}, rank {r}, gradient element {i}: {a} vs {b}"
                            );
                        }
                        lhs += dot(&got, &weights(seed, r, got.len()));
                        rhs += dot(&xs[r], &gx);
                    }
                }
                // Sum and mean are linear: ⟨A x, w⟩ = ⟨x, Aᵀ w⟩ over ranks.
                if tracked && matches!(op, ReduceOp::Sum | ReduceOp::Mean) {
                    assert!(
                        (lhs - rhs).abs() <= 1e-10 * (1.0 + lhs.abs()),
                        "{ctx}: adjoint identity {lhs} vs {rhs}"
                    );
                }
            }
            Want::Error => {
                let errs: Vec<String> = results
                    .into_iter()
                    .enumerate()
                    .map(|(r, res)| match res {
                        Err(RankError::Failed(e)) => {
                            assert!(
                                !matches!(e, Error::Comm(_)),
                                "{ctx}, rank {r}: a rule, not a transport failure: {e}"
                            );
                            strip_rank(&format!("{e:?}"))
                        }
                        other => panic!("{ctx}, rank {r}: expected an error, got {other:?}"),
                    })
                    .collect();
                assert!(
                    errs.iter().all(|e| e == &errs[0]),
                    "{ctx}: one error everywhere: {errs:?}"
                );
            }
        }
    }
}

/// An error's `Debug` text without the reporting rank.
fn strip_rank(s: &str) -> String {
    let mut out = String::new();
    let mut rest = s;
    while let Some(i) = rest.find(" rank: ") {
        out.push_str(&rest[..i]);
        let after = &rest[i + 7..];
        let digits = after.chars().take_while(char::is_ascii_digit).count();
        out.push_str(" rank: _");
        rest = &after[digits..];
    }
    out.push_str(rest);
    out
}

fn ops() -> impl Strategy<Value = ReduceOp> {
    prop::sample::select(ReduceOp::ALL.to_vec())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Every operator, all-reduce and reduce-scatter along either axis,
    /// tracked and not, 1 to 8 ranks, rows and columns 0 to 3.
    #[test]
    fn every_operator_matches_the_f64_reference(
        n in 1usize..=8,
        rows in 0usize..=3,
        cols in 0usize..=3,
        op in ops(),
        dim in prop::option::of(0isize..=1),
        tracked in any::<bool>(),
        seed in any::<u64>(),
    ) {
        run_case(seed, n, [rows, cols], op, dim, tracked);
    }
}

/// Fixed cases a reader can check by hand, at every world size: uneven
/// chunks (5 rows over 2, 3 and 4 ranks), and every rank tied.
#[test]
fn fixed_cases_at_every_world_size() {
    for n in 1..=8 {
        for op in ReduceOp::ALL {
            run_case(11, n, [5, 2], op, None, true);
            run_case(12, n, [5, 2], op, Some(0), true);
            run_case(13, n, [2, 5], op, Some(-1), op != ReduceOp::Prod);
        }
    }
}

/// A tie shares the gradient equally; the extremum's own rank gets all of it.
#[test]
fn a_tie_shares_the_gradient() {
    let out = LocalWorld::new(4)
        .run(|c| {
            let g = HostCollective::new(c);
            let v = [[3.0, 1.0], [3.0, 2.0], [0.0, 2.0], [3.0, 0.5]][g.rank()];
            let x = Tensor::<1>::from_floats(v, &Device::flex().autodiff()).require_grad();
            let y = x.clone().all_reduce_with(&g, ReduceOp::Max)?;
            let grads = y.sum().backward();
            Ok::<_, Error>(
                x.grad(&grads)
                    .unwrap()
                    .into_data()
                    .try_to_vec::<f32>()
                    .unwrap(),
            )
        })
        .unwrap();
    // Four output gradients of 1 per element: 4 / 3 to each of the three
    // ranks tied at 3.0, 4 / 2 to the two ranks tied at 2.0.
    let third = 4.0f32 / 3.0;
    assert_eq!(
        out,
        vec![
            vec![third, 0.0],
            vec![third, 2.0],
            vec![0.0, 2.0],
            vec![third, 0.0]
        ]
    );
}

/// An infinite extremum keeps its value and its gradient (a construction
/// that subtracts values would turn both into NaN); a NaN loses to a
/// number (IEEE maxNum/minNum, as the local transport's kernels).
#[test]
fn infinities_and_nan() {
    for group in ["host", "device"] {
        let run = |g: &dyn Fn(Tensor<1>, ReduceOp) -> Result<Tensor<1>, Error>, me: usize| {
            let v = [[f32::INFINITY, f32::NAN, 1.0], [1.0, 2.0, f32::NAN]][me];
            let x = Tensor::<1>::from_floats(v, &Device::flex().autodiff()).require_grad();
            let y = g(x.clone(), ReduceOp::Max)?;
            let vals = y.clone().into_data().try_to_vec::<f32>().unwrap();
            let grads = y.sum().backward();
            let gx = x
                .grad(&grads)
                .unwrap()
                .into_data()
                .try_to_vec::<f32>()
                .unwrap();
            Ok::<_, Error>((vals, gx))
        };
        let out = if group == "host" {
            LocalWorld::new(2)
                .run(|c| {
                    let g = HostCollective::new(c);
                    run(&|x, op| x.all_reduce_with(&g, op), g.rank())
                })
                .unwrap()
        } else {
            DeviceWorld::shared(2, Device::flex())
                .run(|g, _| run(&|x, op| x.all_reduce_with(&g, op), g.rank()))
                .unwrap()
        };
        for (vals, _) in &out {
            assert_eq!(vals, &vec![f32::INFINITY, 2.0, 1.0], "{group}");
        }
        assert_eq!(out[0].1, vec![2.0, 0.0, 2.0], "{group}: rank 0's gradient");
        assert_eq!(out[1].1, vec![0.0, 2.0, 0.0], "{group}: rank 1's gradient");
    }
    // Every rank NaN: the result is NaN and no rank gets a gradient; the
    // minimum of -inf keeps its value and its gradient.
    let out = LocalWorld::new(3)
        .run(|c| {
            let g = HostCollective::new(c);
            let v = [f32::NAN, [f32::NEG_INFINITY, 0.0, 5.0][g.rank()]];
            let x = Tensor::<1>::from_floats(v, &Device::flex().autodiff()).require_grad();
            let y = x.clone().all_reduce_with(&g, ReduceOp::Min)?;
            let vals = y.clone().into_data().try_to_vec::<f32>().unwrap();
            let grads = y.sum().backward();
            let gx = x
                .grad(&grads)
                .unwrap()
                .into_data()
                .try_to_vec::<f32>()
                .unwrap();
            Ok::<_, Error>((vals, gx))
        })
        .unwrap();
    for (r, (vals, gx)) in out.iter().enumerate() {
        assert!(vals[0].is_nan() && vals[1] == f32::NEG_INFINITY, "{vals:?}");
        assert_eq!(gx, &vec![0.0, if r == 0 { 3.0 } else { 0.0 }], "rank {r}");
    }
}

/// The host-staged and the device-resident group give the same bits for
/// every operator, in f32 and f16/bf16 (which combine in f32: the mean of
/// two f16 60000s is 60000, not the overflow an f16 sum would give).
#[test]
fn host_and_device_agree_bit_for_bit_and_halves_combine_in_f32() {
    for dtype in [DType::F32, DType::F16, DType::BF16] {
        for op in ReduceOp::ALL {
            let part = |me: usize, dev: &Device| {
                let v: Vec<f32> = (0..64)
                    .map(|i| ((mix(&[9, me as u64, i]) % 2001) as f32 - 1000.0) / 7.0)
                    .chain([60000.0, -0.0])
                    .collect();
                Tensor::<1>::from_data(TensorData::new(v, [66]), (dev, dtype))
            };
            let bits = |t: Tensor<1>| t.cast(DType::F32).into_data().try_to_vec::<f32>().unwrap();
            let host = world(3)
                .run(|c| {
                    let g = HostCollective::new(c);
                    part(g.rank(), &Device::flex())
                        .all_reduce_with(&g, op)
                        .map(bits)
                })
                .unwrap();
            let device = DeviceWorld::shared(3, Device::flex())
                .run(|g, dev| part(g.rank(), dev).all_reduce_with(&g, op).map(bits))
                .unwrap();
            for r in 0..3 {
                let h: Vec<u32> = host[r].iter().map(|x| x.to_bits()).collect();
                let d: Vec<u32> = device[r].iter().map(|x| x.to_bits()).collect();
                assert_eq!(h, d, "{op} {dtype:?}: rank {r}");
            }
            if op == ReduceOp::Mean && dtype == DType::F16 {
                assert_eq!(host[0][64], 60000.0, "f16 mean of 60000s");
            }
        }
    }
}

/// Ranks passing different operators, a tracked product, and ranks that
/// disagree on tracking: typed errors on every rank, before data moves.
#[test]
fn mismatches_are_typed_errors_on_every_rank() {
    // Rank 2 takes the minimum where the others take the maximum.
    let e = errors(world(3).run_each(|c| {
        let g = HostCollective::new(c);
        let op = if g.rank() == 2 {
            ReduceOp::Min
        } else {
            ReduceOp::Max
        };
        Tensor::<1>::from_floats([1.0], &Device::flex()).all_reduce_with(&g, op)
    }));
    for (r, e) in e.iter().enumerate() {
        assert!(
            matches!(e, Error::ReduceOpMismatch { op: TensorOp::AllReduceWith, rank, offender: 2, expected: ReduceOp::Max, got: ReduceOp::Min, .. } if *rank == r),
            "rank {r}: {e:?}"
        );
        assert!(e.to_string().contains("rank 2 reduces with min"), "{e}");
    }
    // Sum is `all_reduce` itself: against another operator, a desync.
    let e = errors(world(2).run_each(|c| {
        let g = HostCollective::new(c);
        let op = if g.rank() == 0 {
            ReduceOp::Sum
        } else {
            ReduceOp::Max
        };
        Tensor::<1>::from_floats([1.0], &Device::flex()).all_reduce_with(&g, op)
    }));
    for e in &e {
        assert!(matches!(e, Error::Desync { offender: 1, .. }), "{e:?}");
    }
    // The product of a tracked input, on rank 1 only: refused everywhere.
    let e = errors(world(2).run_each(|c| {
        let g = HostCollective::new(c);
        let mut x = Tensor::<1>::from_floats([1.0, 2.0], &Device::flex().autodiff());
        if g.rank() == 1 {
            x = x.require_grad();
        }
        x.reduce_scatter_with(&g, 0, ReduceOp::Prod)
    }));
    for e in &e {
        assert!(
            matches!(
                e,
                Error::NotDifferentiable {
                    op: TensorOp::ReduceScatterWith,
                    offender: 1,
                    reduce: ReduceOp::Prod,
                    ..
                }
            ),
            "{e:?}"
        );
    }
    // One rank's maximum is tracked, the other's is not: its backward pass
    // would wait for a peer that never comes.
    let e = errors(world(2).run_each(|c| {
        let g = HostCollective::new(c);
        let mut x = Tensor::<1>::from_floats([1.0], &Device::flex().autodiff());
        if g.rank() == 0 {
            x = x.require_grad();
        }
        x.all_reduce_with(&g, ReduceOp::Max)
    }));
    for e in &e {
        assert!(
            matches!(e, Error::TrackingMismatch { offender: 1, .. }),
            "{e:?}"
        );
    }
    // A chunk for every rank: 2 rows over 3 ranks is refused everywhere.
    let e = errors(world(3).run_each(|c| {
        let g = HostCollective::new(c);
        Tensor::<2>::zeros([2, 4], &Device::flex()).reduce_scatter_with(&g, 0, ReduceOp::Mean)
    }));
    for e in &e {
        assert!(
            matches!(
                e,
                Error::Layout {
                    op: TensorOp::ReduceScatterWith,
                    ..
                }
            ),
            "{e:?}"
        );
    }
}

/// A peer that skips the backward pass of a maximum: the others' backward
/// pass ends in a typed error within the world's deadline, not a hang.
#[test]
fn a_peer_that_skips_the_backward_pass_is_an_error() {
    let out = LocalWorld::new(2)
        .timeout(Duration::from_secs(5))
        .run_each(|c| {
            let g = HostCollective::new(c);
            let me = g.rank();
            let x =
                Tensor::<1>::from_floats([me as f32], &Device::flex().autodiff()).require_grad();
            let y = x.all_reduce_with(&g, ReduceOp::Max)?;
            if me == 1 {
                return Ok(false);
            }
            Ok::<_, Error>(ruda_tensor::try_backward(|| y.sum().backward()).is_err())
        });
    assert!(matches!(out[0], Ok(true)), "{:?}", out[0]);
}

/// `barrier` on both groups; a rank that leaves instead fails the others.
#[test]
fn barrier_on_every_group() {
    world(3).run(|c| HostCollective::new(c).barrier()).unwrap();
    DeviceWorld::shared(3, Device::flex())
        .run(|g, _| g.barrier())
        .unwrap();
    let out = LocalWorld::new(3)
        .timeout(Duration::from_secs(5))
        .run_each(|c| {
            let g = HostCollective::new(c);
            if g.rank() == 2 {
                return Ok(());
            }
            g.barrier()
        });
    assert!(
        matches!(&out[0], Err(RankError::Failed(Error::Comm(_)))),
        "{:?}",
        out[0]
    );
    assert!(
        matches!(&out[1], Err(RankError::Failed(Error::Comm(_)))),
        "{:?}",
        out[1]
    );
}
