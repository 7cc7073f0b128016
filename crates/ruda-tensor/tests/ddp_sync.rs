//! Starting replicas equal and keeping them honest: `broadcast_module`,
//! `check_replicas`, the weighted mean of gradients over uneven (and empty)
//! shards against the serial run, and the typed errors when ranks disagree
//! about the call.

use burn_core as burn;

use burn::module::{Module, ModuleMapper, Param, ParamId};
use burn_nn::{Linear, LinearConfig};
use burn_optim::GradientsParams;
use burn_tensor::{DType, Device, Int, Tensor, TensorData};
use ruda_comm::{LocalWorld, RankError};
use ruda_tensor::ddp::{
    Buckets, GradientReduction, all_reduce_gradients, all_reduce_gradients_with, broadcast_module,
    check_replicas,
};
use ruda_tensor::{DeviceWorld, Error, Group, HostCollective, ModuleProblem, TensorOp};

/// Every float parameter cast to f64 (ids kept), so that comparisons with
/// the serial run are at f64 round-off.
struct ToF64;

impl ModuleMapper for ToF64 {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
        let id = param.id;
        let t = param.val().cast(DType::F64);
        Param::initialized(id, t.detach().require_grad())
    }
}

/// A Linear layer with deterministic f64 weights and bias.
fn layer(device: &Device) -> Linear {
    let mut m: Linear = LinearConfig::new(3, 2).init(device).map(&mut ToF64);
    let w: Vec<f64> = (0..6).map(|i| 0.1 * i as f64 - 0.2).collect();
    let id = m.weight.id;
    m.weight = Param::initialized(
        id,
        Tensor::<2>::from_data(TensorData::new(w, [3, 2]), (device, DType::F64)).require_grad(),
    );
    let bias = m.bias.take().expect("a bias");
    m.bias = Some(Param::initialized(
        bias.id,
        Tensor::<1>::from_data(TensorData::new(vec![0.3, -0.1], [2]), (device, DType::F64))
            .require_grad(),
    ));
    m
}

/// Sample `i` of the global batch: three features.
fn sample(i: usize) -> [f64; 3] {
    let x = i as f64;
    [x.sin(), (0.5 * x).cos(), 0.1 * x - 0.3]
}

fn batch(range: std::ops::Range<usize>, device: &Device) -> Tensor<2> {
    let rows = range.len();
    let v: Vec<f64> = range.flat_map(sample).collect();
    Tensor::from_data(TensorData::new(v, [rows, 3]), (device, DType::F64))
}

/// The mean over rows of a squared error; NaN over no rows, as a mean over
/// an empty shard is.
fn loss(m: &Linear, x: Tensor<2>) -> Tensor<1> {
    let y = m.forward(x);
    (y.clone() * y).sum_dim(1).mean()
}

fn values(t: Tensor<2>) -> Vec<f64> {
    t.into_data().convert::<f64>().try_to_vec::<f64>().unwrap()
}

fn failures<T: std::fmt::Debug>(out: Vec<Result<T, RankError<Error>>>) -> Vec<Error> {
    out.into_iter()
        .map(|r| match r {
            Err(RankError::Failed(e)) => e,
            other => panic!("expected an error, got {other:?}"),
        })
        .collect()
}

/// The weighted mean of the ranks' gradients (each rank's loss a mean over
/// its own shard) is the gradient of the mean loss over the global batch,
/// for uneven shards, empty ones (whose NaN gradient is not read) and 1 to
/// 6 ranks; the plain mean is not, which the test also shows.
#[test]
fn the_weighted_mean_over_uneven_shards_equals_the_serial_gradient() {
    let serial = |total: usize| {
        let device = Device::flex().autodiff();
        let m = layer(&device);
        let g = GradientsParams::from_grads(loss(&m, batch(0..total, &device)).backward(), &m);
        values(g.get::<2>(m.weight.id).unwrap())
    };
    for n in 1..=6usize {
        let shards: Vec<usize> = (0..n).map(|r| (r * 5 + 2) % 6).collect();
        let total: usize = shards.iter().sum();
        assert!(total > 0);
        let want = serial(total);
        for reduction in ["weighted", "plain"] {
            let out = LocalWorld::new(n)
                .run(|c| {
                    let world = HostCollective::new(c);
                    let me = world.rank();
                    let start: usize = shards[..me].iter().sum();
                    let samples = shards[me];
                    let device = Device::flex().autodiff();
                    let m = layer(&device);
                    let l = loss(&m, batch(start..start + samples, &device));
                    let g = GradientsParams::from_grads(l.backward(), &m);
                    let how = if reduction == "weighted" {
                        GradientReduction::WeightedMean { samples }
                    } else {
                        GradientReduction::Mean
                    };
                    let g = all_reduce_gradients(&world, &m, g, how)?;
                    Ok::<_, Error>(values(g.get::<2>(m.weight.id).unwrap()))
                })
                .unwrap();
            for (r, got) in out.iter().enumerate() {
                assert_eq!(got, &out[0], "{n} ranks, {reduction}: rank {r} differs");
            }
            let close = out[0]
                .iter()
                .zip(&want)
                .all(|(a, b)| (a - b).abs() <= 1e-13 * (1.0 + b.abs()));
            if reduction == "weighted" {
                assert!(
                    close,
                    "{n} ranks {shards:?}: {:?} vs serial {want:?}",
                    out[0]
                );
            } else if shards.iter().any(|&s| s != shards[0]) {
                // Uneven shards: the plain mean is another gradient (or NaN).
                assert!(!close, "{n} ranks {shards:?}: the plain mean matched");
            }
        }
    }
}

#[test]
fn a_weighted_mean_over_no_samples_is_an_error_on_every_rank() {
    let out = LocalWorld::new(3).run_each(|c| {
        let world = HostCollective::new(c);
        let m = layer(&Device::flex().autodiff());
        let how = GradientReduction::WeightedMean { samples: 0 };
        all_reduce_gradients(&world, &m, GradientsParams::new(), how).map(|_| ())
    });
    for (r, e) in failures(out).into_iter().enumerate() {
        match e {
            Error::EmptyBatch {
                op: TensorOp::DdpGradients,
                rank,
            } => assert_eq!(rank, r),
            other => panic!("rank {r}: {other}"),
        }
    }
}

/// A rank that averages while the others take a weighted mean would make
/// a silently wrong step: it is an error on every rank instead.
#[test]
fn ranks_that_reduce_differently_are_an_error_on_every_rank() {
    let out = LocalWorld::new(3).run_each(|c| {
        let world = HostCollective::new(c);
        let how = if world.rank() == 2 {
            GradientReduction::Mean
        } else {
            GradientReduction::WeightedMean { samples: 4 }
        };
        let m = layer(&Device::flex().autodiff());
        all_reduce_gradients(&world, &m, GradientsParams::new(), how).map(|_| ())
    });
    for (r, e) in failures(out).into_iter().enumerate() {
        match e {
            Error::ModuleMismatch {
                rank,
                offender: 2,
                problem:
                    ModuleProblem::Reduction {
                        expected: "weighted mean",
                        got: "mean",
                    },
                ..
            } => assert_eq!(rank, r),
            other => panic!("rank {r}: {other}"),
        }
    }
}

/// Independently initialised replicas become the root's, bit for bit, with
/// their ids and gradient tracking kept: a backward pass and a check pass
/// afterwards; on 1 to 5 ranks, every root, host-staged and device-resident.
#[test]
fn broadcast_module_makes_every_replica_the_roots() {
    for n in 1..=5usize {
        for root in 0..n {
            let host = LocalWorld::new(n)
                .run(|c| broadcast_and_train(&HostCollective::new(c), root))
                .unwrap();
            let device = DeviceWorld::shared(n, Device::flex())
                .run(|g, _| broadcast_and_train(&g, root))
                .unwrap();
            for (what, out) in [("host", &host), ("device", &device)] {
                let (before_root, _) = &out[root];
                for (r, (before, after)) in out.iter().enumerate() {
                    assert_eq!(after, before_root, "{what} {n} ranks root {root}: rank {r}");
                    if n > 1 && r != root {
                        // The replicas started different: the test is not vacuous.
                        assert_ne!(before, before_root, "{what} rank {r} started equal");
                    }
                }
            }
        }
    }
}

/// One rank's part: a random layer, broadcast, then a training step's
/// backward pass on the broadcast parameters and a replica check. Returns
/// the weights before and after the broadcast.
fn broadcast_and_train<G: Group>(world: &G, root: usize) -> Result<(Vec<f64>, Vec<f64>), Error> {
    let device = Device::flex().autodiff();
    let m: Linear = LinearConfig::new(3, 2).init(&device);
    let before = values(m.weight.val());
    let (id, bias_id) = (m.weight.id, m.bias.as_ref().unwrap().id);
    let m = broadcast_module(world, m, root)?;
    assert_eq!((m.weight.id, m.bias.as_ref().unwrap().id), (id, bias_id));
    assert!(m.weight.val().is_require_grad());
    let l = loss(&m, batch(0..4, &device).cast(DType::F32));
    let g = GradientsParams::from_grads(l.backward(), &m);
    assert!(
        g.get::<2>(m.weight.id).is_some(),
        "the broadcast weight is a trainable leaf"
    );
    check_replicas(world, &m)?;
    Ok((before, values(m.weight.val())))
}

#[test]
fn broadcast_module_with_another_root_or_one_outside_the_group_is_an_error_everywhere() {
    for (roots, offender, root, expected) in [([0, 1, 0], 1, 1, 0), ([0, 0, 3], 2, 3, 0)] {
        let out = LocalWorld::new(3).run_each(|c| {
            let world = HostCollective::new(c);
            let m: Linear = LinearConfig::new(3, 2).init(&Device::flex().autodiff());
            broadcast_module(&world, m, roots[world.rank()]).map(|_| ())
        });
        for (r, e) in failures(out).into_iter().enumerate() {
            match e {
                Error::InvalidRoot {
                    op: TensorOp::DdpBroadcast,
                    rank,
                    offender: o,
                    root: got,
                    expected: want,
                    size: 3,
                } => assert_eq!((rank, o, got, want), (r, offender, root, expected)),
                other => panic!("roots {roots:?} rank {r}: {other}"),
            }
        }
    }
}

/// A module with an integer parameter.
#[derive(Module, Debug)]
struct WithIds {
    layer: Linear,
    ids: Param<Tensor<1, Int>>,
}

fn with_ids(device: &Device, first: i64) -> WithIds {
    WithIds {
        layer: LinearConfig::new(2, 2).init(device).map(&mut ToF64),
        ids: Param::initialized(
            ParamId::new(),
            Tensor::<1, Int>::from_data(TensorData::new(vec![first, 7, 9], [3]), device),
        ),
    }
}

/// `broadcast_module` does not broadcast integer parameters yet: it says
/// so on every rank rather than leave them different.
#[test]
fn broadcast_module_refuses_integer_parameters_on_every_rank() {
    let out = LocalWorld::new(2).run_each(|c| {
        let world = HostCollective::new(c);
        broadcast_module(&world, with_ids(&Device::flex().autodiff(), 1), 0).map(|_| ())
    });
    for (r, e) in failures(out).into_iter().enumerate() {
        match e {
            Error::ModuleMismatch {
                rank,
                offender: 0,
                problem: ModuleProblem::Unsupported { count: 1, .. },
                ..
            } => assert_eq!(rank, r),
            other => panic!("rank {r}: {other}"),
        }
    }
}

/// Replicas that differ in one float or integer parameter's values, or in
/// structure, fail the check on every rank, naming the first difference;
/// equal replicas pass.
#[test]
fn check_replicas_names_the_first_parameter_that_differs() {
    // (which rank differs, how) → the expected problem.
    let cases: [(usize, &str, ModuleProblem); 3] = [
        (2, "bias", ModuleProblem::Values { index: 1 }),
        (1, "ids", ModuleProblem::Values { index: 2 }),
        (
            1,
            "shape",
            ModuleProblem::Param {
                index: 0,
                expected: (4, Some(DType::F64)),
                got: (6, Some(DType::F64)),
            },
        ),
    ];
    for (bad, how, problem) in cases {
        let out = LocalWorld::new(3).run_each(|c| {
            let world = HostCollective::new(c);
            let device = Device::flex().autodiff();
            let me = world.rank();
            let mut m = with_ids(&device, if me == bad && how == "ids" { 2 } else { 1 });
            // Equal floats everywhere (the init is random): zeros.
            m = m.map(&mut ruda_tensor::ddp::Zeros).map(&mut ToF64);
            if me == bad && how == "bias" {
                let b = m.layer.bias.take().unwrap();
                let id = b.id;
                m.layer.bias = Some(Param::initialized(id, b.val().add_scalar(1e-300)));
            }
            if me == bad && how == "shape" {
                m.layer = LinearConfig::new(3, 2)
                    .init(&device)
                    .map(&mut ruda_tensor::ddp::Zeros)
                    .map(&mut ToF64);
            }
            check_replicas(&world, &m)
        });
        for (r, e) in failures(out).into_iter().enumerate() {
            match e {
                Error::ModuleMismatch {
                    op: TensorOp::DdpCheck,
                    rank,
                    offender,
                    problem: p,
                    ..
                } => assert_eq!((rank, offender, p), (r, bad, problem), "{how}"),
                other => panic!("{how} rank {r}: {other}"),
            }
        }
    }
    let ok = LocalWorld::new(3).run(|c| {
        let world = HostCollective::new(c);
        let m = with_ids(&Device::flex().autodiff(), 1).map(&mut ruda_tensor::ddp::Zeros);
        check_replicas(&world, &m)
    });
    assert!(ok.is_ok(), "{ok:?}");
}

/// A layer of 1 MiB of f32 weights (reduced and broadcast on its own, in
/// place) beside small ones (packed into a bucket).
#[derive(Module, Debug)]
struct BigAndSmall {
    big: Linear,
    small: Linear,
}

fn big_and_small(device: &Device) -> BigAndSmall {
    BigAndSmall {
        big: LinearConfig::new(512, 512).init(device),
        small: LinearConfig::new(3, 2).init(device),
    }
    .map(&mut ToF64)
}

/// Rank `r`'s input to the big layer.
fn big_input(r: usize, device: &Device) -> Tensor<2> {
    let v: Vec<f64> = (0..2 * 512)
        .map(|i| ((i * 7 + r * 13) % 11) as f64 - 5.0)
        .collect();
    Tensor::from_data(TensorData::new(v, [2, 512]), (device, DType::F64))
}

/// Rank `r`'s loss: the big layer's output summed (rank 1 does not use the
/// big layer: it has no gradient for it), plus the small layer's.
fn big_and_small_loss(m: &BigAndSmall, r: usize, device: &Device) -> Tensor<1> {
    let small = m.small.forward(batch(r..r + 2, device)).sum();
    if r == 1 {
        small
    } else {
        m.big.forward(big_input(r, device)).sum() + small
    }
}

/// Parameters of 1 MiB and more take the in-place path, smaller ones the
/// packed one; a rank without a gradient for a large parameter contributes
/// zeros; broadcast takes both paths too.
#[test]
fn large_parameters_travel_alone_and_small_ones_in_buckets() {
    let n = 3;
    // Every rank's own gradients, computed in one process.
    let own: Vec<(Option<Vec<f64>>, Vec<f64>)> = (0..n)
        .map(|r| {
            let device = Device::flex().autodiff();
            let m = big_and_small(&device).map(&mut ruda_tensor::ddp::Zeros);
            let g = GradientsParams::from_grads(big_and_small_loss(&m, r, &device).backward(), &m);
            (
                g.get::<2>(m.big.weight.id).map(values),
                values(g.get::<2>(m.small.weight.id).unwrap()),
            )
        })
        .collect();
    assert!(own[1].0.is_none() && own[0].0.is_some());
    let sum = |parts: Vec<&Vec<f64>>| -> Vec<f64> {
        (0..parts[0].len())
            .map(|i| parts.iter().map(|p| p[i]).sum())
            .collect()
    };
    let want_big = sum(own.iter().filter_map(|o| o.0.as_ref()).collect());
    let want_small = sum(own.iter().map(|o| &o.1).collect());
    let out = LocalWorld::new(n)
        .run(|c| {
            let world = HostCollective::new(c);
            let r = world.rank();
            let device = Device::flex().autodiff();
            // Random replicas, made equal (big layer included) by the broadcast.
            let m = broadcast_module(&world, big_and_small(&device), 2)?;
            check_replicas(&world, &m)?;
            let m = m.map(&mut ruda_tensor::ddp::Zeros);
            let g = GradientsParams::from_grads(big_and_small_loss(&m, r, &device).backward(), &m);
            let g = all_reduce_gradients(&world, &m, g, GradientReduction::Sum)?;
            let (big, small) = (
                g.get::<2>(m.big.weight.id).unwrap(),
                g.get::<2>(m.small.weight.id).unwrap(),
            );
            // Gradients come back as Burn's own do: without autodiff (rank 1's
            // big one is zeros made here).
            assert!(!big.is_autodiff() && !small.is_autodiff(), "rank {r}");
            Ok::<_, Error>((values(big), values(small)))
        })
        .unwrap();
    let close = |a: &[f64], b: &[f64]| {
        a.len() == b.len()
            && a.iter()
                .zip(b)
                .all(|(x, y)| (x - y).abs() <= 1e-12 * (1.0 + y.abs()))
    };
    for (r, (big, small)) in out.iter().enumerate() {
        assert!(close(big, &want_big), "rank {r}: big layer");
        assert!(close(small, &want_small), "rank {r}: small layer");
    }
}

/// A layer tied into two fields (one parameter id): the broadcast reaches
/// both.
#[derive(Module, Debug)]
struct Tied {
    a: Linear,
    b: Linear,
}

#[test]
fn broadcast_module_reaches_every_field_a_tied_parameter_is_in() {
    let out = LocalWorld::new(2)
        .run(|c| {
            let world = HostCollective::new(c);
            let l: Linear = LinearConfig::new(3, 2).init(&Device::flex().autodiff());
            let m = broadcast_module(&world, Tied { a: l.clone(), b: l }, 0)?;
            Ok::<_, Error>((values(m.a.weight.val()), values(m.b.weight.val())))
        })
        .unwrap();
    for (a, b) in &out {
        assert_eq!(a, &out[0].0);
        assert_eq!(b, &out[0].0);
    }
}

/// A rank whose gradient has another dtype than its parameter (a bf16
/// gradient of an f32 weight) while its peer has none: the reduction runs
/// in the parameter's dtype on every rank (the same buckets everywhere),
/// and each rank gets the result back in its own gradient's dtype.
#[test]
fn gradients_travel_in_their_parameters_dtype_and_come_back_in_their_own() {
    let out = LocalWorld::new(2)
        .run(|c| {
            let world = HostCollective::new(c);
            let device = Device::flex();
            let m: Linear = LinearConfig::new(3, 2).init(&device);
            let mut g = GradientsParams::new();
            if world.rank() == 0 {
                let w: Vec<f32> = vec![0.5, 1.5, -2.0, 4.0, 0.25, 8.0];
                let t = Tensor::<2>::from_data(TensorData::new(w, [3, 2]), &device);
                g.register::<2>(m.weight.id, t.cast(DType::BF16));
            }
            let b = Tensor::<1>::from_data(TensorData::new(vec![1.0f32, 2.0], [2]), &device);
            g.register::<1>(m.bias.as_ref().unwrap().id, b);
            let g = all_reduce_gradients(&world, &m, g, GradientReduction::Sum)?;
            let w = g.get::<2>(m.weight.id).unwrap();
            Ok::<_, Error>((w.dtype(), values(w)))
        })
        .unwrap();
    assert_eq!(out[0].0, DType::BF16);
    assert_eq!(out[1].0, DType::F32);
    for (_, v) in &out {
        assert_eq!(v, &vec![0.5, 1.5, -2.0, 4.0, 0.25, 8.0]);
    }
}

/// A parameter only ranks with no samples have a gradient for stays
/// without one under the weighted mean (their gradients count for
/// nothing), and the others' are unaffected.
#[test]
fn a_gradient_only_empty_ranks_have_is_no_gradient() {
    let out = LocalWorld::new(3)
        .run(|c| {
            let world = HostCollective::new(c);
            let me = world.rank();
            let device = Device::flex();
            let m: Linear = LinearConfig::new(3, 2).init(&device);
            let samples = if me == 1 { 0 } else { 2 };
            let mut g = GradientsParams::new();
            if me == 1 {
                // A NaN gradient, as a mean over no samples gives.
                g.register::<2>(m.weight.id, Tensor::full([3, 2], f32::NAN, &device));
            }
            let b = Tensor::<1>::from_data(TensorData::new(vec![me as f32, 1.0], [2]), &device);
            g.register::<1>(m.bias.as_ref().unwrap().id, b);
            let how = GradientReduction::WeightedMean { samples };
            let g = all_reduce_gradients(&world, &m, g, how)?;
            let bias = g.get::<1>(m.bias.as_ref().unwrap().id).unwrap();
            Ok::<_, Error>((
                g.get::<2>(m.weight.id).is_some(),
                bias.into_data()
                    .convert::<f64>()
                    .try_to_vec::<f64>()
                    .unwrap(),
            ))
        })
        .unwrap();
    for (has_weight, bias) in out {
        assert!(!has_weight);
        // Ranks 0 and 2 with 2 samples each: (0 + 2) / 2 and (1 + 1) / 2.
        assert_eq!(bias, vec![1.0, 1.0]);
    }
}

/// One rank's gradients of [`big_and_small`] (zeroed) under `buckets`,
/// and how many collectives the reduction made.
fn grads_with(
    world: &HostCollective<ruda_comm::LocalCommunicator>,
    buckets: Buckets,
) -> Result<(Vec<f64>, Vec<f64>, u64), Error> {
    let r = world.rank();
    let device = Device::flex().autodiff();
    let m = big_and_small(&device).map(&mut ruda_tensor::ddp::Zeros);
    let g = GradientsParams::from_grads(big_and_small_loss(&m, r, &device).backward(), &m);
    let before = world.seq();
    let g = all_reduce_gradients_with(world, &m, g, GradientReduction::Sum, buckets)?;
    let calls = world.seq() - before;
    Ok((
        values(g.get::<2>(m.big.weight.id).unwrap()),
        values(g.get::<2>(m.small.weight.id).unwrap()),
        calls,
    ))
}

/// Every grouping gives the same gradients, bit for bit (sums in the same
/// rank order): all alone, all in one bucket, one bucket per gradient; and
/// ranks that group differently get a typed error on every rank.
#[test]
fn every_bucket_size_gives_the_same_gradients_and_ranks_must_agree_on_it() {
    let groupings = [
        Buckets::default(),
        Buckets {
            alone_bytes: 0,
            bucket_bytes: 0,
        },
        Buckets {
            alone_bytes: usize::MAX,
            bucket_bytes: usize::MAX,
        },
        Buckets {
            alone_bytes: usize::MAX,
            bucket_bytes: 0,
        },
    ];
    let runs: Vec<_> = groupings
        .iter()
        .map(|&b| {
            LocalWorld::new(3)
                .run(|c| grads_with(&HostCollective::new(c), b))
                .unwrap()
        })
        .collect();
    for (b, run) in groupings.iter().zip(&runs) {
        for (rank, (big, small, _)) in run.iter().enumerate() {
            assert_eq!((big, small), (&runs[0][rank].0, &runs[0][rank].1), "{b:?}");
        }
    }
    // The groupings are applied: four gradients (a 2 MiB weight, three
    // small ones) make 2, 4, 1 and 4 reductions, each the same number of
    // collectives beside a fixed agreement.
    let calls: Vec<i64> = runs.iter().map(|run| run[0].2 as i64).collect();
    let (default, all_alone, one_bucket, one_each) = (calls[0], calls[1], calls[2], calls[3]);
    assert_eq!(all_alone, one_each, "{calls:?}");
    let per_reduction = default - one_bucket;
    assert!(per_reduction > 0, "{calls:?}");
    assert_eq!(all_alone - one_bucket, 3 * per_reduction, "{calls:?}");
    let out = LocalWorld::new(3).run_each(|c| {
        let world = HostCollective::new(c);
        let b = if world.rank() == 1 {
            Buckets {
                bucket_bytes: 1 << 10,
                ..Buckets::default()
            }
        } else {
            Buckets::default()
        };
        grads_with(&world, b).map(|_| ())
    });
    for (r, e) in failures(out).into_iter().enumerate() {
        match e {
            Error::ModuleMismatch {
                rank,
                offender: 1,
                problem: ModuleProblem::Buckets { expected, got },
                ..
            } => {
                assert_eq!(rank, r);
                assert_eq!((expected, got), ((1 << 20, 25 << 20), (1 << 20, 1 << 10)));
            }
            other => panic!("rank {r}: {other}"),
        }
    }
}

/// Gradient accumulation over micro-batches without communicating, then
/// one weighted-mean reduction: the serial gradient of the mean loss over
/// the global batch, on uneven shards cut into uneven micro-batches.
#[test]
fn accumulating_micro_batches_then_reducing_once_equals_the_serial_gradient() {
    let shards = [5usize, 2, 4];
    let total: usize = shards.iter().sum();
    let serial = {
        let device = Device::flex().autodiff();
        let m = layer(&device);
        let g = GradientsParams::from_grads(loss(&m, batch(0..total, &device)).backward(), &m);
        values(g.get::<2>(m.weight.id).unwrap())
    };
    let out = LocalWorld::new(3)
        .run(|c| {
            let world = HostCollective::new(c);
            let me = world.rank();
            let start: usize = shards[..me].iter().sum();
            let n = shards[me];
            let device = Device::flex().autodiff();
            let m = layer(&device);
            let mut acc = burn_optim::GradientsAccumulator::<Linear>::new();
            // Micro-batches of at most 2 rows, each loss scaled to its share
            // of the rank's mean.
            let mut from = start;
            while from < start + n {
                let to = (from + 2).min(start + n);
                let micro =
                    loss(&m, batch(from..to, &device)).mul_scalar((to - from) as f64 / n as f64);
                acc.accumulate(&m, GradientsParams::from_grads(micro.backward(), &m));
                from = to;
            }
            let how = GradientReduction::WeightedMean { samples: n };
            let g = all_reduce_gradients(&world, &m, acc.grads(), how)?;
            Ok::<_, Error>(values(g.get::<2>(m.weight.id).unwrap()))
        })
        .unwrap();
    for got in &out {
        assert!(
            got.iter()
                .zip(&serial)
                .all(|(a, b)| (a - b).abs() <= 1e-13 * (1.0 + b.abs())),
            "{got:?} vs serial {serial:?}"
        );
    }
}

/// A module of one half-precision parameter.
#[derive(Module, Debug)]
struct Half {
    w: Param<Tensor<1>>,
}

/// `GradientReduction::Mean` of half-precision gradients whose sum
/// overflows the dtype (f16: 2 × 40000 > 65504; bf16: 2 × 2e38 > 3.4e38)
/// but whose mean fits: every rank scales by 1/ranks before the sum, so the
/// mean comes back finite and within one rounding of the f64 mean, on 2 and
/// 3 ranks; summed (`Sum`), the same gradients overflow, which is what the
/// scaling avoids.
#[test]
fn the_mean_of_half_precision_gradients_whose_sum_overflows_is_finite() {
    for (dtype, big) in [(DType::F16, 40000.0f64), (DType::BF16, 2.0e38)] {
        for ranks in [2usize, 3] {
            let grad = |r: usize| vec![big, -big, big * (1.0 - 0.01 * r as f64), 1.5];
            let run = |reduction: GradientReduction| {
                LocalWorld::new(ranks)
                    .run(|c| {
                        let world = HostCollective::new(c);
                        let device = Device::flex();
                        let w = Tensor::<1>::zeros([4], (&device, dtype));
                        let m = Half {
                            w: Param::from_tensor(w),
                        };
                        let g = Tensor::<1>::from_data(
                            TensorData::new(grad(world.rank()), [4]),
                            (&device, DType::F64),
                        )
                        .cast(dtype);
                        let mut grads = GradientsParams::new();
                        grads.register::<1>(m.w.id, g);
                        let g = all_reduce_gradients(&world, &m, grads, reduction)?;
                        let g = g.get::<1>(m.w.id).unwrap();
                        assert_eq!(g.dtype(), dtype);
                        Ok::<_, Error>(g.into_data().convert::<f64>().try_to_vec::<f64>().unwrap())
                    })
                    .unwrap()
            };
            let means = run(GradientReduction::Mean);
            // One rounding of each scaled gradient and one of the sum: a
            // few units of the dtype's epsilon.
            let eps = if dtype == DType::F16 {
                1.0 / 1024.0
            } else {
                1.0 / 128.0
            };
            for (r, got) in means.iter().enumerate() {
                assert_eq!(got, &means[0], "{dtype:?} {ranks} ranks: rank {r} differs");
                for (i, &g) in got.iter().enumerate() {
                    let want = (0..ranks).map(|q| grad(q)[i]).sum::<f64>() / ranks as f64;
                    assert!(
                        g.is_finite() && (g - want).abs() <= 3.0 * eps * want.abs(),
                        "{dtype:?} {ranks} ranks element {i}: {g} vs {want}"
                    );
                }
            }
            let sums = run(GradientReduction::Sum);
            assert!(
                sums[0][0].is_infinite() && sums[0][1].is_infinite(),
                "{dtype:?} {ranks} ranks: the sum {:?} should overflow",
                sums[0]
            );
        }
    }
}

/// An f32 gradient of an f16 parameter is scaled before it is cast to the
/// parameter's dtype: rank 0's 100000 (past f16's 65504) with weight 1/4
/// and rank 1's 0 with weight 3/4 average to 25000, not inf.
#[test]
fn a_wide_gradient_of_a_half_precision_parameter_is_scaled_before_its_cast() {
    let out = LocalWorld::new(2)
        .run(|c| {
            let world = HostCollective::new(c);
            let device = Device::flex();
            let m = Half {
                w: Param::from_tensor(Tensor::<1>::zeros([2], (&device, DType::F16))),
            };
            let v = if world.rank() == 0 { 100_000.0f32 } else { 0.0 };
            let g = Tensor::<1>::from_data(TensorData::new(vec![v, -v], [2]), &device);
            let mut grads = GradientsParams::new();
            grads.register::<1>(m.w.id, g);
            let samples = 1 + 2 * world.rank();
            let reduction = GradientReduction::WeightedMean { samples };
            let g = all_reduce_gradients(&world, &m, grads, reduction)?;
            let g = g.get::<1>(m.w.id).unwrap();
            Ok::<_, Error>((g.dtype(), values(g.reshape([1, 2]))))
        })
        .unwrap();
    // 25000 in f16 (spacing 16 there, a tie rounded to even).
    let want = half::f16::from_f64(25_000.0).to_f64();
    assert_eq!(want, 24_992.0);
    for (dtype, v) in out {
        // Back in the rank's own gradient dtype, with the f16 sum's value.
        assert_eq!(dtype, DType::F32);
        assert_eq!(v, vec![want, -want]);
    }
}
