//! Gradient reduction overlapped with the backward pass (`ddp::Overlap`):
//! the same training as `all_reduce_gradients_with` after `backward()`,
//! bit for bit, on 1 to 8 ranks with uneven and empty shards, parameters
//! unused on some ranks or on all, frozen parameters and every reduction;
//! buckets reduced while the backward pass still runs; typed errors.

mod common;
#[path = "../examples/ddp_model/mod.rs"]
mod ddp_model;

use std::time::Duration;

use burn_autodiff::Autodiff;
use burn_autodiff::checkpoint::base::Checkpointer;
use burn_autodiff::checkpoint::strategy::NoCheckpointing;
use burn_autodiff::grads::Gradients;
use burn_autodiff::ops::{Backward, Ops, OpsKind, unary};
use burn_core as burn;
use burn_flex::Flex;

use burn::module::{Module, Param};
use burn_nn::{Linear, LinearConfig};
use burn_optim::{AdamConfig, GradientsParams};
use burn_tensor::{DType, Device, Tensor, TensorData};
use common::param_bits as bits;
use ddp_model::Deterministic;
use proptest::prelude::*;
use ruda_comm::{LocalWorld, RankError};
use ruda_tensor::ddp::{
    Buckets, GradientReduction, Overlap, OverlapReport, all_reduce_gradients_with,
};
use ruda_tensor::{
    DeviceWorld, Error, Group, HostCollective, ModuleProblem, OverlapProblem, TensorOp,
};

const WIDTH: usize = 5;

/// A residual MLP with a weight used twice, a layer only rank 0 uses, one
/// no rank uses and a frozen one: every tensor has at most two uses.
#[derive(Module, Debug)]
struct Deep {
    layers: Vec<Linear>,
    tied: Linear,
    only_rank0: Linear,
    unused: Linear,
    frozen: Linear,
    head: Linear,
}

impl Deep {
    fn new(device: &Device, depth: usize) -> Self {
        let lin = |i, o| LinearConfig::new(i, o).init(device);
        let net = Deep {
            layers: (0..depth).map(|_| lin(WIDTH, WIDTH)).collect(),
            tied: lin(WIDTH, WIDTH),
            only_rank0: lin(WIDTH, WIDTH),
            unused: lin(WIDTH, 3),
            frozen: lin(WIDTH, WIDTH),
            head: lin(WIDTH, 1),
        }
        .map(&mut Deterministic::default());
        let frozen = net.frozen.clone().no_grad();
        Deep { frozen, ..net }
    }

    /// `slow`: a backward step that sleeps this long after the first layer.
    fn forward(&self, x: Tensor<2>, rank: usize, slow: Option<Duration>) -> Tensor<2> {
        let mut h = x;
        for (i, layer) in self.layers.iter().enumerate() {
            let mut y = layer.forward(h.clone());
            if i == 0
                && let Some(d) = slow
            {
                y = sleepy(y, d);
            }
            h = h + y.tanh();
        }
        h = self.tied.forward(self.tied.forward(h).tanh());
        h = self.frozen.forward(h);
        if rank == 0 {
            h = h.clone() + self.only_rank0.forward(h).tanh();
        }
        self.head.forward(h)
    }
}

/// The backward step of [`sleepy`].
#[derive(Debug)]
struct Sleep;

impl Backward<Flex, 1> for Sleep {
    type State = Duration;

    fn backward(self, ops: Ops<Duration, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        std::thread::sleep(ops.state);
        unary::<Flex, _>(ops.parents, ops.node, grads, |g| g);
    }
}

/// `x`, with a backward step that sleeps `d`: a long backward pass.
fn sleepy(x: Tensor<2>, d: Duration) -> Tensor<2> {
    let (inner, guard) = x
        .try_into_primitive::<Autodiff<Flex>>()
        .expect("an Autodiff<Flex> tensor")
        .into_parts();
    let out = match Sleep
        .prepare::<NoCheckpointing>([guard])
        .compute_bound()
        .stateful()
    {
        OpsKind::Tracked(prep) => prep.finish(d, inner),
        OpsKind::UnTracked(prep) => prep.finish(inner),
    };
    Tensor::from_primitive::<Autodiff<Flex>>(out)
}

/// How gradients are reduced.
#[derive(Clone, Copy, Debug)]
enum How {
    /// `all_reduce_gradients_with` after `backward()`.
    Plain,
    /// `Overlap`.
    Overlapped,
}

/// One rank's training: the parameters (bits) after every step, and the
/// overlap reports.
fn train<G: Group>(
    world: &G,
    batch: usize,
    steps: usize,
    buckets: Buckets,
    how: How,
) -> Result<(Vec<Vec<u64>>, Vec<OverlapReport>), Error> {
    // Balanced shards, empty ones where the batch has fewer rows than ranks.
    let n = world.size();
    let shards: Vec<usize> = (0..n)
        .map(|r| batch / n + usize::from(r < batch % n))
        .collect();
    let me = world.rank();
    let start: usize = shards[..me].iter().sum();
    let rows = shards[me];
    let device = Device::flex().autodiff();
    let on = (&device, DType::F64);
    let xs: Vec<f64> = (start * WIDTH..(start + rows) * WIDTH)
        .map(|i| ((i * 31) % 17) as f64 / 17.0 - 0.5)
        .collect();
    let ys: Vec<f64> = (start..start + rows)
        .map(|b| (b as f64 * 0.9).cos())
        .collect();
    let x = Tensor::<2>::from_data(TensorData::new(xs, [rows, WIDTH]), on);
    let y = Tensor::<2>::from_data(TensorData::new(ys, [rows, 1]), on);
    let mut net = Deep::new(&device, 3);
    let mut optim = AdamConfig::new().init();
    let mut overlap = match how {
        How::Overlapped => Some(Overlap::with_buckets(world, buckets)?),
        How::Plain => None,
    };
    let (mut record, mut reports) = (Vec::new(), Vec::new());
    for s in 0..steps {
        let all_full = shards.iter().all(|&r| r > 0);
        let reduction = match s % 3 {
            0 => GradientReduction::Sum,
            1 if all_full => GradientReduction::Mean,
            _ => GradientReduction::WeightedMean { samples: rows },
        };
        let loss = |net: &Deep| {
            let err = net.forward(x.clone(), me, None) - y.clone();
            let sq = (err.clone() * err).sum();
            match reduction {
                GradientReduction::Sum => sq.mul_scalar(1.0 / batch.max(1) as f64),
                _ => sq.mul_scalar(1.0 / rows.max(1) as f64),
            }
        };
        let grads = match overlap.as_mut() {
            None => {
                let grads = GradientsParams::from_grads(loss(&net).backward(), &net);
                all_reduce_gradients_with(world, &net, grads, reduction, buckets)?
            }
            Some(o) => {
                let step = o.attach(&net, reduction)?;
                let l = loss(step.module());
                let grads = step.backward(l)?;
                reports.push(o.report().expect("a report after a step"));
                grads
            }
        };
        net = optim.step(0.01, net, grads);
        record.push(bits(&net));
    }
    Ok((record, reports))
}

/// Both runs on `ranks` threads: every rank's record, plain and overlapped.
type Records = Vec<Vec<Vec<u64>>>;

fn both(ranks: usize, batch: usize, steps: usize, buckets: Buckets) -> (Records, Records) {
    let run = |how| {
        LocalWorld::new(ranks)
            .run(|c| train(&HostCollective::new(c), batch, steps, buckets, how).map(|r| r.0))
            .unwrap()
    };
    (run(How::Plain), run(How::Overlapped))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 10, ..ProptestConfig::default() })]

    /// Overlapped training equals plain data parallelism bit for bit,
    /// every step (the first with the hooks at the end of the backward
    /// pass, the later ones with them spread over it), on 1 to 8 ranks
    /// with uneven and empty shards, per-parameter, packed and default
    /// buckets.
    #[test]
    fn equals_the_plain_reduction_bit_for_bit(
        ranks in 1usize..=8,
        batch in 0usize..=11,
        which in 0usize..3,
    ) {
        let buckets = [
            Buckets::default(),
            Buckets { alone_bytes: 0, bucket_bytes: 0 },
            Buckets { alone_bytes: 200, bucket_bytes: 300 },
        ][which];
        let (plain, overlapped) = both(ranks, batch.max(1), 4, buckets);
        prop_assert_eq!(&plain, &overlapped);
        for rank in &overlapped {
            prop_assert_eq!(rank, &overlapped[0], "replicas differ");
        }
    }
}

/// An empty global batch's edge: every shard empty under a weighted mean
/// is the typed error on every rank, in both paths.
#[test]
fn no_samples_anywhere_is_an_empty_batch_on_every_rank() {
    for how in [How::Plain, How::Overlapped] {
        let errs = common::errors(LocalWorld::new(3).run_each(|c| {
            let world = HostCollective::new(c);
            let device = Device::flex().autodiff();
            let net = Deep::new(&device, 1);
            let x = Tensor::<2>::zeros([0, WIDTH], (&device, DType::F64));
            let reduction = GradientReduction::WeightedMean { samples: 0 };
            match how {
                How::Plain => {
                    let loss = net.forward(x, world.rank(), None).sum();
                    let grads = GradientsParams::from_grads(loss.backward(), &net);
                    ruda_tensor::ddp::all_reduce_gradients(&world, &net, grads, reduction)
                        .map(|_| ())
                }
                How::Overlapped => {
                    let mut overlap = Overlap::new(&world)?;
                    overlap.attach(&net, reduction).map(|_| ())
                }
            }
        }));
        assert!(
            errs.iter().all(|e| matches!(e, Error::EmptyBatch { .. })),
            "{how:?}: {errs:?}"
        );
    }
}

/// The hooks run inside the backward pass: with a backward pass held up
/// for 400 ms after the first layer, from the second step on the buckets
/// of the layers after it are reduced before the backward pass ends (the
/// first step learns the depths: its hooks run at the end).
#[test]
fn buckets_are_reduced_while_the_backward_pass_runs() {
    let reports = LocalWorld::new(2)
        .run(|c| {
            let world = HostCollective::new(c);
            let device = Device::flex().autodiff();
            let net = Deep::new(&device, 4);
            let x = Tensor::<2>::ones([3, WIDTH], (&device, DType::F64));
            // Every gradient in a bucket of its own.
            let buckets = Buckets {
                alone_bytes: 0,
                bucket_bytes: 0,
            };
            let mut overlap = Overlap::with_buckets(&world, buckets)?;
            let mut reports = Vec::new();
            for _ in 0..3 {
                let step = overlap.attach(&net, GradientReduction::Mean)?;
                let slow = Some(Duration::from_millis(400));
                let loss = step.module().forward(x.clone(), world.rank(), slow).sum();
                step.backward(loss)?;
                reports.push(overlap.report().unwrap());
            }
            Ok::<_, Error>(reports)
        })
        .unwrap();
    for rank in &reports {
        for (s, r) in rank.iter().enumerate() {
            // layers (4 × 2), tied (2), only_rank0 (2), unused (2), head (2);
            // the frozen layer takes no gradient; from the second step the
            // unused layer, which no rank had a gradient for, is not
            // planned for (as the plain reduction leaves it out).
            let planned = if s == 0 { 16 } else { 14 };
            assert_eq!(r.buckets, planned, "step {s}: {r:?}");
            assert!(r.backward >= Duration::from_millis(400), "{r:?}");
        }
        // From the second step: at least the head, the tied layer and the
        // last two layers (8 buckets) were reduced while the first layer's
        // backward step slept (with every hook at the end of the backward
        // pass, as in the first step, 2 at most were). The layers only
        // rank 0 runs, or none, go last.
        for r in &rank[1..] {
            assert!(
                r.reduced_during_backward >= 8,
                "too few buckets reduced during the backward pass: {r:?}"
            );
        }
    }
}

/// A plain chain of layers.
#[derive(Module, Debug)]
struct Chain {
    layers: Vec<Linear>,
}

/// With the small parameters of every layer packed into one bucket (the
/// biases) and the large ones alone (the weights), the weights of the
/// layers after a held-up first layer are still reduced during the
/// backward pass: a bucket goes when its earliest parameter is ready, so
/// the packed one goes last instead of holding up the others.
#[test]
fn a_bucket_spanning_many_layers_does_not_hold_up_the_others() {
    let reports = LocalWorld::new(2)
        .run(|c| {
            let world = HostCollective::new(c);
            let device = Device::flex().autodiff();
            let net = Chain {
                layers: (0..4)
                    .map(|_| LinearConfig::new(WIDTH, WIDTH).init(&device))
                    .collect(),
            }
            .map(&mut Deterministic::default());
            let x = Tensor::<2>::ones([3, WIDTH], (&device, DType::F64));
            // Weights (200 bytes) alone, biases (40 bytes) in one bucket.
            let buckets = Buckets {
                alone_bytes: 100,
                bucket_bytes: 1 << 20,
            };
            let mut overlap = Overlap::with_buckets(&world, buckets)?;
            let mut reports = Vec::new();
            for _ in 0..3 {
                let step = overlap.attach(&net, GradientReduction::Mean)?;
                let mut h = x.clone();
                for (i, layer) in step.module().layers.iter().enumerate() {
                    h = layer.forward(h);
                    if i == 0 {
                        h = sleepy(h, Duration::from_millis(400));
                    }
                    h = h.tanh();
                }
                step.backward(h.sum())?;
                reports.push(overlap.report().unwrap());
            }
            Ok::<_, Error>(reports)
        })
        .unwrap();
    for rank in &reports {
        for r in &rank[1..] {
            assert_eq!(r.buckets, 5, "{r:?}");
            // The last two layers' weights at least.
            assert!(r.reduced_during_backward >= 2, "{r:?}");
        }
    }
}

/// Ranks that reduce differently, or bucket differently, get the typed
/// mismatch on every rank before any data moves.
#[test]
fn ranks_that_disagree_get_a_module_mismatch_on_every_rank() {
    let errs = common::errors(common::pair(|world| {
        let device = Device::flex().autodiff();
        let net = Deep::new(&device, 1);
        let reduction = if world.rank() == 0 {
            GradientReduction::Sum
        } else {
            GradientReduction::Mean
        };
        Overlap::new(world)?.attach(&net, reduction).map(|_| ())
    }));
    for e in &errs {
        assert!(
            matches!(
                e,
                Error::ModuleMismatch {
                    op: TensorOp::DdpOverlap,
                    problem: ModuleProblem::Reduction { .. },
                    ..
                }
            ),
            "{e:?}"
        );
    }
    let errs = common::errors(common::pair(|world| {
        let device = Device::flex().autodiff();
        let net = Deep::new(&device, 1);
        let buckets = Buckets {
            bucket_bytes: 100 + world.rank(),
            ..Buckets::default()
        };
        Overlap::with_buckets(world, buckets)?
            .attach(&net, GradientReduction::Sum)
            .map(|_| ())
    }));
    for e in &errs {
        assert!(
            matches!(
                e,
                Error::ModuleMismatch {
                    problem: ModuleProblem::Buckets { .. },
                    ..
                }
            ),
            "{e:?}"
        );
    }
}

/// Asserts that an `attach` was refused as [`OverlapProblem::Unusable`].
fn assert_unusable(attached: &Result<(), Error>) {
    assert!(
        matches!(
            attached,
            Err(Error::Overlap {
                problem: OverlapProblem::Unusable,
                ..
            })
        ),
        "{attached:?}"
    );
}

/// A rank that abandons its step after the forward pass (never runs the
/// backward pass) leaves its peer a typed error within the deadline, not
/// a hang; the abandoning rank's own call returns.
#[test]
fn a_peer_that_never_runs_its_backward_pass_is_a_typed_error() {
    let started = std::time::Instant::now();
    let out = LocalWorld::new(2)
        .timeout(Duration::from_secs(2))
        .run_each(|c| {
            let world = HostCollective::new(c);
            let device = Device::flex().autodiff();
            let net = Deep::new(&device, 2);
            let mut overlap = Overlap::new(&world)?;
            let step = overlap.attach(&net, GradientReduction::Mean)?;
            let x = Tensor::<2>::ones([2, WIDTH], (&device, DType::F64));
            let loss = step.module().forward(x, world.rank(), None).sum();
            if world.rank() == 1 {
                drop(step);
                // An abandoned step leaves the Overlap unusable.
                let again = overlap.attach(&net, GradientReduction::Mean).map(|_| ());
                assert_unusable(&again);
                return Ok(None);
            }
            let result = step.backward(loss).map(|_| Some(()));
            // So does a failed one.
            let again = overlap.attach(&net, GradientReduction::Mean).map(|_| ());
            assert_unusable(&again);
            result
        });
    assert!(matches!(out[1], Ok(None)), "{:?}", out[1]);
    match &out[0] {
        Err(RankError::Failed(Error::Comm(e))) => {
            let text = e.to_string();
            assert!(text.contains("ddp::Overlap"), "{text}");
        }
        other => panic!("rank 0: {other:?}"),
    }
    assert!(started.elapsed() < Duration::from_secs(20));
}

/// On a device-resident group the overlapped run equals the plain one too.
#[test]
fn equals_the_plain_reduction_on_a_device_world() {
    for ranks in [1, 3] {
        let run = |how| {
            DeviceWorld::shared(ranks, Device::flex())
                .run(|g, _| train(&g, 7, 4, Buckets::default(), how).map(|r| r.0))
                .unwrap()
        };
        assert_eq!(run(How::Plain), run(How::Overlapped), "{ranks} ranks");
    }
}

/// One half-precision parameter.
#[derive(Module, Debug)]
struct Half {
    w: Param<Tensor<1>>,
}

/// Half-precision gradients whose sum overflows the dtype but whose mean
/// fits: the overlapped `Mean` scales before the sum as the plain one
/// does, finite and the same bits, in f16 and bf16 on 2 and 3 ranks.
#[test]
fn half_precision_means_equal_the_plain_reduction() {
    for (dtype, big) in [(DType::F16, 40000.0f64), (DType::BF16, 2.0e38)] {
        for ranks in [2usize, 3] {
            let run = |how: How| {
                LocalWorld::new(ranks)
                    .run(|c| {
                        let world = HostCollective::new(c);
                        let device = Device::flex().autodiff();
                        let w = Tensor::<1>::zeros([4], (&device, dtype)).require_grad();
                        let m = Half {
                            w: Param::from_tensor(w),
                        };
                        let r = world.rank() as f64;
                        let coef = Tensor::<1>::from_data(
                            TensorData::new(vec![big, -big, big * (1.0 - 0.01 * r), 1.5], [4]),
                            (&device, DType::F64),
                        )
                        .cast(dtype);
                        let loss = |m: &Half| (m.w.val() * coef.clone()).sum();
                        let grads = match how {
                            How::Plain => {
                                let g = GradientsParams::from_grads(loss(&m).backward(), &m);
                                ruda_tensor::ddp::all_reduce_gradients(
                                    &world,
                                    &m,
                                    g,
                                    GradientReduction::Mean,
                                )?
                            }
                            How::Overlapped => {
                                let mut o = Overlap::new(&world)?;
                                let step = o.attach(&m, GradientReduction::Mean)?;
                                let l = loss(step.module());
                                step.backward(l)?
                            }
                        };
                        let g = grads.get::<1>(m.w.id).expect("a gradient");
                        assert_eq!(g.dtype(), dtype);
                        Ok::<_, Error>(g.into_data().convert::<f64>().try_to_vec::<f64>().unwrap())
                    })
                    .unwrap()
            };
            let (plain, overlapped) = (run(How::Plain), run(How::Overlapped));
            assert_eq!(plain, overlapped, "{dtype:?} {ranks} ranks");
            assert!(
                overlapped.iter().flatten().all(|g| g.is_finite()),
                "{dtype:?} {ranks} ranks: {overlapped:?}"
            );
        }
    }
}

/// A module that declares its head before the layers its forward pass
/// runs first, and uses one layer twice under two names (the same
/// parameter ids: tied weights).
#[derive(Module, Debug)]
struct Twisted {
    head: Linear,
    layers: Vec<Linear>,
    again: Linear,
}

impl Twisted {
    fn forward(&self, x: Tensor<2>) -> Tensor<2> {
        let mut h = x;
        for l in &self.layers {
            h = l.forward(h).tanh();
        }
        h = self.again.forward(h).tanh();
        self.head.forward(h)
    }
}

/// Declared out of forward order, with one layer in two fields: the
/// hooks' depths are learned once (the loss depth stays that of the first
/// step instead of feeding on the hooks' own), and the training equals
/// the plain reduction bit for bit (the shared tensor gets the sum of both
/// uses' gradients once, as after `backward()`; what Burn's optimizer then
/// does with two fields of one id is the same in both runs).
#[test]
fn out_of_order_modules_and_tied_weights_equal_the_plain_reduction() {
    let run = |how: How| {
        LocalWorld::new(3)
            .run(|c| {
                let world = HostCollective::new(c);
                let device = Device::flex().autodiff();
                let lin = |i, o| LinearConfig::new(i, o).init(&device);
                let layers: Vec<Linear> = (0..4).map(|_| lin(WIDTH, WIDTH)).collect();
                let again = layers[1].clone();
                let mut net = Twisted {
                    head: lin(WIDTH, 1),
                    layers,
                    again,
                }
                .map(&mut Deterministic::default());
                // The mapper gave the tied copy fresh values: tie it again.
                net.again = net.layers[1].clone();
                let rows = 1 + world.rank();
                let x = Tensor::<2>::ones([rows, WIDTH], (&device, DType::F64))
                    .mul_scalar(0.1 * (1 + world.rank()) as f64);
                let mut optim = AdamConfig::new().init();
                let mut overlap = Overlap::new(&world)?;
                let (mut bits_per_step, mut depths) = (Vec::new(), Vec::new());
                for _ in 0..5 {
                    let reduction = GradientReduction::WeightedMean { samples: rows };
                    let grads = match how {
                        How::Plain => {
                            let loss = net.forward(x.clone()).mean();
                            let g = GradientsParams::from_grads(loss.backward(), &net);
                            ruda_tensor::ddp::all_reduce_gradients(&world, &net, g, reduction)?
                        }
                        How::Overlapped => {
                            let step = overlap.attach(&net, reduction)?;
                            let loss = step.module().forward(x.clone()).mean();
                            let g = step.backward(loss)?;
                            depths.push(overlap.report().unwrap().loss_depth);
                            g
                        }
                    };
                    net = optim.step(0.01, net, grads);
                    let mut b = Vec::new();
                    for l in [&net.head, &net.layers[0], &net.layers[1], &net.again] {
                        let w = l.weight.val().into_data().convert::<f64>();
                        b.extend(w.try_to_vec::<f64>().unwrap().into_iter().map(f64::to_bits));
                    }
                    bits_per_step.push(b);
                }
                Ok::<_, Error>((bits_per_step, depths))
            })
            .unwrap()
    };
    let (plain, overlapped) = (run(How::Plain), run(How::Overlapped));
    for (r, ((p, _), (o, depths))) in plain.iter().zip(&overlapped).enumerate() {
        assert_eq!(p, o, "rank {r}");
        assert!(depths[0] > 2, "{depths:?}");
        assert!(depths.iter().all(|&d| d == depths[0]), "{depths:?}");
    }
}
