//! Buffers in data-parallel training: a BatchNorm model's replicas stay
//! bit for bit equal at every step through `ddp::step` (and drift apart
//! without it), `sync_buffers`' mean and its typed errors, and
//! `SyncBatchNorm`: on one rank it is burn-nn's BatchNorm, and trained on 2
//! to 8 ranks with uneven and empty shards it equals the one-rank run.

use burn_core as burn;

use burn::module::{Module, ModuleMapper, Param};
use burn_nn::{BatchNorm, BatchNormConfig, Linear, LinearConfig};
use burn_optim::{AdamConfig, GradientsParams, SgdConfig};
use burn_tensor::{DType, Device, Tensor, TensorData};
use ruda_comm::{LocalWorld, RankError};
use ruda_tensor::ddp::{
    BufferSync, GradientReduction, SyncBatchNorm, SyncBatchNormConfig, all_reduce_gradients,
    check_replicas, load_checkpoint, save_checkpoint, step, step_with, sync_buffers,
};
use ruda_tensor::{Error, Group, HostCollective, ModuleProblem, ShapeProblem, TensorOp};

/// Every float value set to one that depends only on its position in the
/// module, in f64: every rank (and the serial run) starts from the same
/// model without sharing a tensor.
#[derive(Default)]
struct Deterministic {
    next: usize,
}

impl ModuleMapper for Deterministic {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
        let id = param.id;
        let t = param.val();
        let dims = t.dims();
        let k = self.next;
        self.next += 1;
        let values: Vec<f64> = (0..dims.iter().product::<usize>())
            .map(|i| 0.6 + ((i * 7 + k * 13) as f64 * 0.37).sin() * 0.4)
            .collect();
        let fresh =
            Tensor::<D>::from_data(TensorData::new(values, dims), (&t.device(), DType::F64));
        let trainable = t.is_require_grad();
        Param::initialized(id, fresh.set_require_grad(trainable))
    }
}

const FEATURES: usize = 3;
const HIDDEN: usize = 4;

/// Sample `i` of the global batch: features and target.
fn sample(i: usize) -> ([f64; FEATURES], f64) {
    let x = i as f64;
    (
        [x.sin() * 2.0, (0.5 * x).cos() - 0.4, 0.3 * x - 1.0],
        (0.9 * x).cos(),
    )
}

/// Rows `range` of the global batch.
fn batch(range: std::ops::Range<usize>, device: &Device) -> (Tensor<2>, Tensor<2>) {
    let rows = range.len();
    let (x, y): (Vec<[f64; FEATURES]>, Vec<f64>) = range.map(sample).unzip();
    let x: Vec<f64> = x.into_iter().flatten().collect();
    let f64_on = (device, DType::F64);
    (
        Tensor::from_data(TensorData::new(x, [rows, FEATURES]), f64_on),
        Tensor::from_data(TensorData::new(y, [rows, 1]), f64_on),
    )
}

fn values<const D: usize>(t: Tensor<D>) -> Vec<f64> {
    t.into_data().convert::<f64>().try_to_vec::<f64>().unwrap()
}

/// Linear → BatchNorm → tanh → Linear.
#[derive(Module, Debug)]
struct BnNet {
    a: Linear,
    bn: BatchNorm,
    b: Linear,
}

impl BnNet {
    fn new(device: &Device) -> Self {
        BnNet {
            a: LinearConfig::new(FEATURES, HIDDEN).init(device),
            bn: BatchNormConfig::new(HIDDEN).init(device),
            b: LinearConfig::new(HIDDEN, 1).init(device),
        }
        .map(&mut Deterministic::default())
    }

    fn forward(&self, x: Tensor<2>) -> Tensor<2> {
        self.b.forward(self.bn.forward(self.a.forward(x)).tanh())
    }
}

/// Linear → SyncBatchNorm → tanh → Linear: `BnNet` with the statistics of
/// the global batch.
#[derive(Module, Debug)]
struct SyncNet {
    a: Linear,
    bn: SyncBatchNorm,
    b: Linear,
}

impl SyncNet {
    fn new(device: &Device) -> Self {
        SyncNet {
            // No bias before the batch norm: its gradient is zero up to
            // rounding noise, which Adam's normalization turns into steps.
            a: LinearConfig::new(FEATURES, HIDDEN)
                .with_bias(false)
                .init(device),
            bn: SyncBatchNormConfig::new(HIDDEN).init(device).unwrap(),
            b: LinearConfig::new(HIDDEN, 1).init(device),
        }
        .map(&mut Deterministic::default())
    }

    fn forward<G: Group>(&self, world: &G, x: Tensor<2>) -> Result<Tensor<2>, Error> {
        let h = self.bn.forward(world, self.a.forward(x))?;
        Ok(self.b.forward(h.tanh()))
    }

    /// Every value, the running statistics as the next forward pass reads
    /// them.
    fn state(&self) -> Vec<f64> {
        let mut v = values(self.a.weight.val());
        v.extend(values(self.bn.gamma.val()));
        v.extend(values(self.bn.beta.val()));
        v.extend(values(self.bn.running_mean.value_sync()));
        v.extend(values(self.bn.running_var.value_sync()));
        v.extend(values(self.b.weight.val()));
        v.extend(values(self.b.bias.as_ref().unwrap().val()));
        v
    }
}

/// Rank `r`'s rows of a batch of `n` split over `ranks` unevenly (rank 1
/// of three or more gets none).
fn shard(n: usize, ranks: usize, r: usize) -> std::ops::Range<usize> {
    let sizes: Vec<usize> = (0..ranks)
        .map(|q| if ranks >= 3 && q == 1 { 0 } else { 1 + q })
        .collect();
    let scale: usize = sizes.iter().sum();
    let mut bounds = vec![0];
    let mut acc = 0;
    for s in &sizes {
        acc += s;
        bounds.push(acc * n / scale);
    }
    bounds[r]..bounds[r + 1]
}

/// A BatchNorm model trained on uneven shards with `ddp::step` passes
/// `check_replicas` after every step, running statistics included (and
/// they moved); reducing the gradients alone, the replicas' running
/// statistics differ from the first step on and `check_replicas` names
/// them.
#[test]
fn a_batch_norm_model_keeps_equal_replicas_at_every_step_only_with_its_buffers_synced() {
    let (n, steps) = (11, 4);
    for ranks in [2, 3] {
        for synced in [true, false] {
            let out = LocalWorld::new(ranks).run_each(|c| {
                let world = HostCollective::new(c);
                let device = Device::flex().autodiff();
                let mut net = BnNet::new(&device);
                let mut optim = AdamConfig::new().init();
                let rows = shard(n, ranks, world.rank());
                let (x, y) = batch(rows, &device);
                let mut checks = Vec::new();
                for _ in 0..steps {
                    let err = net.forward(x.clone()) - y.clone();
                    let loss = (err.clone() * err).sum().mul_scalar(1.0 / n as f64);
                    let grads = GradientsParams::from_grads(loss.backward(), &net);
                    let how = GradientReduction::Sum;
                    net = if synced {
                        step(&world, &mut optim, 0.01, net, grads, how)?
                    } else {
                        let grads = all_reduce_gradients(&world, &net, grads, how)?;
                        optim.step(0.01, net, grads)
                    };
                    checks.push(check_replicas(&world, &net).err());
                }
                Ok::<_, Error>((checks, values(net.bn.running_mean.value_sync())))
            });
            let out: Vec<_> = out.into_iter().map(|r| r.unwrap()).collect();
            for (r, (checks, running)) in out.iter().enumerate() {
                if synced {
                    assert!(
                        checks.iter().all(Option::is_none),
                        "{ranks} ranks, rank {r}: {checks:?}"
                    );
                    assert_eq!(running, &out[0].1);
                } else {
                    assert!(
                        checks.iter().all(|e| matches!(
                            e,
                            Some(Error::ModuleMismatch {
                                problem: ModuleProblem::Values { .. },
                                ..
                            })
                        )),
                        "{ranks} ranks, rank {r} without buffer sync: {checks:?}"
                    );
                }
            }
            // The running mean left its initial value: the check is not vacuous.
            let initial = values(BnNet::new(&Device::flex()).bn.running_mean.value());
            assert_ne!(out[0].1, initial);
        }
    }
}

/// `BufferSync::Mean` gives every replica the mean of the replicas'
/// running statistics (rank r saw a constant batch of r + 1: its running
/// mean is 0.1 (r + 1) after one step, the mean over ranks 0.05 (n + 1)),
/// on 1 to 8 ranks; `Off` leaves each rank's own.
#[test]
fn sync_buffers_mean_averages_the_replicas_running_statistics() {
    for ranks in 1..=8 {
        for how in [BufferSync::Mean, BufferSync::Off] {
            let out = LocalWorld::new(ranks)
                .run(|c| {
                    let world = HostCollective::new(c);
                    let device = Device::flex().autodiff();
                    let bn: BatchNorm = BatchNormConfig::new(2).init(&device);
                    let x = Tensor::<2>::ones([3, 2], (&device, DType::F32))
                        .mul_scalar(world.rank() as f64 + 1.0);
                    let _ = bn.forward(x);
                    let bn = sync_buffers(&world, bn, how)?;
                    Ok::<_, Error>(values(bn.running_mean.value_sync()))
                })
                .unwrap();
            for (r, got) in out.iter().enumerate() {
                let want = match how {
                    BufferSync::Mean => 0.05 * (ranks as f64 + 1.0),
                    _ => 0.1 * (r as f64 + 1.0),
                };
                for g in got {
                    assert!(
                        (g - want).abs() < 1e-6,
                        "{ranks} ranks {how:?} rank {r}: {g} vs {want}"
                    );
                }
            }
        }
    }
}

/// Ranks that keep buffers equal in different ways, or broadcast from
/// another root or one outside the group, get a typed error on every rank
/// before data moves.
#[test]
fn ranks_that_sync_buffers_differently_are_an_error_on_every_rank() {
    type Choice = fn(usize) -> BufferSync;
    let cases: [(Choice, &str); 3] = [
        (
            |r| {
                if r == 1 {
                    BufferSync::Mean
                } else {
                    BufferSync::default()
                }
            },
            "kind",
        ),
        (|r| BufferSync::Broadcast { root: r.min(1) }, "root"),
        (|_| BufferSync::Broadcast { root: 3 }, "outside"),
    ];
    for (how, what) in cases {
        let out = LocalWorld::new(3).run_each(|c| {
            let world = HostCollective::new(c);
            let bn: BatchNorm = BatchNormConfig::new(2).init(&Device::flex().autodiff());
            sync_buffers(&world, bn, how(world.rank())).map(|_| ())
        });
        for (r, e) in out.into_iter().enumerate() {
            let e = match e {
                Err(RankError::Failed(e)) => e,
                other => panic!("{what}: rank {r}: {other:?}"),
            };
            match what {
                "kind" => assert!(
                    matches!(
                        e,
                        Error::ModuleMismatch {
                            op: TensorOp::DdpBuffers,
                            offender: 1,
                            problem: ModuleProblem::BufferSync {
                                expected: "broadcast",
                                got: "mean"
                            },
                            ..
                        }
                    ),
                    "{e}"
                ),
                "root" => assert!(
                    matches!(
                        e,
                        Error::InvalidRoot {
                            offender: 1,
                            root: 1,
                            expected: 0,
                            ..
                        }
                    ),
                    "{e}"
                ),
                _ => assert!(
                    matches!(
                        e,
                        Error::InvalidRoot {
                            offender: 0,
                            root: 3,
                            size: 3,
                            ..
                        }
                    ),
                    "{e}"
                ),
            }
            assert!(e.to_string().contains("ddp::sync_buffers"), "{e}");
        }
    }
}

/// A checkpoint saved mid-training holds the running statistics the next
/// forward pass would read (not the value one update behind), so the
/// resumed run's next step equals the uninterrupted one's. The steps here
/// do not sync buffers (which would fold the pending update itself): the
/// root's own statistics are what it saves. (SGD: no optimizer state,
/// which burn-optim would restore in f32.)
#[test]
fn a_checkpoint_holds_the_running_statistics_of_the_last_step() {
    let dir = std::env::temp_dir().join(format!("ruda-bn-ckpt-{}", std::process::id()));
    let out = LocalWorld::new(2)
        .run(|c| {
            let world = HostCollective::new(c);
            let device = Device::flex().autodiff();
            let mut net = BnNet::new(&device);
            let mut optim = SgdConfig::new().init();
            let (x, y) = batch(shard(9, 2, world.rank()), &device);
            let one_step = |net: BnNet, optim: &mut burn_optim::ModuleOptimizer| {
                let err = net.forward(x.clone()) - y.clone();
                let loss = (err.clone() * err).sum().mul_scalar(1.0 / 9.0);
                let grads = GradientsParams::from_grads(loss.backward(), &net);
                let grads = all_reduce_gradients(&world, &net, grads, GradientReduction::Sum)?;
                Ok::<_, Error>(optim.step(0.01, net, grads))
            };
            for _ in 0..2 {
                net = one_step(net, &mut optim)?;
            }
            save_checkpoint(&world, 0, &dir, &net, &optim)?;
            let live = values(net.bn.running_var.value_sync());
            let (loaded, mut loaded_optim) =
                load_checkpoint(&world, &dir, BnNet::new(&device), SgdConfig::new().init())?;
            let restored = values(loaded.bn.running_var.value_sync());
            let net = one_step(net, &mut optim)?;
            let resumed = one_step(loaded, &mut loaded_optim)?;
            Ok::<_, Error>((
                live,
                restored,
                values(net.bn.running_mean.value_sync()),
                values(resumed.bn.running_mean.value_sync()),
            ))
        })
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    // The root's: rank 1 loads the root's statistics, not its own.
    let (live, restored, next, resumed_next) = &out[0];
    assert_eq!(restored, live);
    assert_eq!(resumed_next, next);
    assert_ne!(
        out[1].0, out[0].0,
        "the replicas' statistics should differ here"
    );
}

/// On one rank, SyncBatchNorm is burn-nn's BatchNorm: output, the
/// gradients of input, gamma and beta, and the running statistics, within
/// f64 round-off.
#[test]
fn sync_batch_norm_on_one_rank_is_burn_nns_batch_norm() {
    LocalWorld::new(1)
        .run(|c| {
            let world = HostCollective::new(c);
            let device = Device::flex().autodiff();
            let f64_on = (&device, DType::F64);
            let x: Vec<f64> = (0..5 * 3 * 4)
                .map(|i| (i as f64 * 0.7).sin() * 3.0 + 0.2)
                .collect();
            let w: Vec<f64> = (0..5 * 3 * 4).map(|i| (i as f64 * 1.3).cos()).collect();
            let w = Tensor::<3>::from_data(TensorData::new(w, [5, 3, 4]), f64_on);
            let input = || {
                Tensor::<3>::from_data(TensorData::new(x.clone(), [5, 3, 4]), f64_on).require_grad()
            };
            let ours = SyncBatchNormConfig::new(3)
                .with_momentum(0.3)
                .init(&device)?
                .map(&mut Deterministic::default());
            let theirs = BatchNormConfig::new(3)
                .with_momentum(0.3)
                .init(&device)
                .map(&mut Deterministic::default());
            let (xa, xb) = (input(), input());
            let ya = ours.forward(&world, xa.clone())?;
            let yb = theirs.forward(xb.clone());
            let ga = (ya.clone() * w.clone()).powi_scalar(2).sum().backward();
            let gb = (yb.clone() * w).powi_scalar(2).sum().backward();
            let pairs = [
                (values(ya), values(yb)),
                (values(xa.grad(&ga).unwrap()), values(xb.grad(&gb).unwrap())),
                (
                    values(ours.gamma.val().grad(&ga).unwrap()),
                    values(theirs.gamma.val().grad(&gb).unwrap()),
                ),
                (
                    values(ours.beta.val().grad(&ga).unwrap()),
                    values(theirs.beta.val().grad(&gb).unwrap()),
                ),
                (
                    values(ours.running_mean.value_sync()),
                    values(theirs.running_mean.value_sync()),
                ),
                (
                    values(ours.running_var.value_sync()),
                    values(theirs.running_var.value_sync()),
                ),
            ];
            for (k, (a, b)) in pairs.iter().enumerate() {
                assert_eq!(a.len(), b.len());
                for (p, q) in a.iter().zip(b) {
                    assert!(
                        (p - q).abs() <= 1e-12 * (1.0 + q.abs()),
                        "quantity {k}: {p} vs {q}"
                    );
                }
            }
            Ok::<_, Error>(())
        })
        .unwrap();
}

/// One rank's training of the SyncBatchNorm net on its shard (each loss
/// its share of the global one, gradients summed), recording its state
/// after every step.
fn train_sync_net<G: Group>(world: &G, n: usize, steps: usize) -> Result<Vec<Vec<f64>>, Error> {
    let device = Device::flex().autodiff();
    let mut net = SyncNet::new(&device);
    let mut optim = AdamConfig::new().init();
    let (x, y) = batch(shard(n, world.size(), world.rank()), &device);
    let mut states = Vec::new();
    for _ in 0..steps {
        let err = net.forward(world, x.clone())? - y.clone();
        let loss = (err.clone() * err).sum().mul_scalar(1.0 / n as f64);
        let grads = GradientsParams::from_grads(loss.backward(), &net);
        let how = GradientReduction::Sum;
        net = step_with(world, &mut optim, 0.02, net, grads, how, BufferSync::Off)?;
        // The running statistics are equal without a buffer sync.
        check_replicas(world, &net)?;
        states.push(net.state());
    }
    Ok(states)
}

/// The SyncBatchNorm net trained data-parallel on 1 to 8 ranks (uneven
/// shards, an empty one from 3 ranks on) equals the serial run at every
/// step within f64 round-off: parameters and running statistics; and the
/// replicas are bit for bit equal without syncing buffers.
#[test]
fn a_sync_batch_norm_model_trained_data_parallel_equals_the_serial_run() {
    let (n, steps) = (13, 4);
    let serial = LocalWorld::new(1)
        .run(|c| train_sync_net(&HostCollective::new(c), n, steps))
        .unwrap()
        .remove(0);
    assert_ne!(serial[0], serial[steps - 1], "training moved nothing");
    for ranks in 2..=8 {
        let runs = LocalWorld::new(ranks)
            .run(|c| train_sync_net(&HostCollective::new(c), n, steps))
            .unwrap();
        for (r, run) in runs.iter().enumerate() {
            assert_eq!(run, &runs[0], "{ranks} ranks: rank {r} differs");
        }
        for (s, (one, many)) in serial.iter().zip(&runs[0]).enumerate() {
            for (i, (a, b)) in one.iter().zip(many).enumerate() {
                assert!(
                    (a - b).abs() <= 1e-12 * (1.0 + a.abs()),
                    "{ranks} ranks step {s} value {i}: {a} vs {b}"
                );
            }
        }
    }
}

/// A rank whose input has another number of channels makes every rank's
/// SyncBatchNorm fail with a typed error naming it (no rank waits in the
/// statistics' all-reduce); every shard empty is `EmptyBatch` everywhere;
/// a bad setting is refused at `init`.
#[test]
fn sync_batch_norm_errors_are_typed_and_on_every_rank() {
    let out = LocalWorld::new(3).run_each(|c| {
        let world = HostCollective::new(c);
        let device = Device::flex().autodiff();
        let bn = SyncBatchNormConfig::new(4).init(&device)?;
        let channels = if world.rank() == 2 { 5 } else { 4 };
        bn.forward(&world, Tensor::<3>::ones([2, channels, 3], &device))
            .map(|_| ())
    });
    for (r, e) in out.into_iter().enumerate() {
        match e {
            Err(RankError::Failed(Error::BadShape {
                op: TensorOp::SyncBatchNorm,
                offender: 2,
                problem: ShapeProblem::Channels { expected: 4 },
                ..
            })) => {}
            other => panic!("rank {r}: {other:?}"),
        }
    }
    let out = LocalWorld::new(2).run_each(|c| {
        let world = HostCollective::new(c);
        let device = Device::flex().autodiff();
        let bn = SyncBatchNormConfig::new(2).init(&device)?;
        bn.forward(&world, Tensor::<2>::ones([0, 2], &device))
            .map(|_| ())
    });
    for e in out {
        assert!(
            matches!(
                e,
                Err(RankError::Failed(Error::EmptyBatch {
                    op: TensorOp::SyncBatchNorm,
                    ..
                }))
            ),
            "{e:?}"
        );
    }
    let device = Device::flex();
    for (config, setting) in [
        (SyncBatchNormConfig::new(0), "num_features"),
        (SyncBatchNormConfig::new(2).with_epsilon(0.0), "epsilon"),
        (SyncBatchNormConfig::new(2).with_momentum(1.5), "momentum"),
        (
            SyncBatchNormConfig::new(2).with_momentum(f64::NAN),
            "momentum",
        ),
    ] {
        match config.init(&device) {
            Err(Error::InvalidSetting { setting: s, .. }) => assert_eq!(s, setting),
            other => panic!("{setting}: {other:?}"),
        }
    }
}

/// Without autodiff (inference) SyncBatchNorm uses the running statistics
/// and does not communicate: one rank alone of a group of two can call it.
#[test]
fn sync_batch_norm_in_inference_uses_the_running_statistics_without_communicating() {
    let out = LocalWorld::new(2)
        .run(|c| {
            let world = HostCollective::new(c);
            if world.rank() == 1 {
                return Ok::<_, Error>(Vec::new());
            }
            let device = Device::flex();
            let bn = SyncBatchNormConfig::new(2).init(&device)?;
            let y = bn.forward(&world, Tensor::<2>::ones([3, 2], &device).mul_scalar(2.0))?;
            // (2 − 0) / sqrt(1 + 1e-5)
            Ok(values(y))
        })
        .unwrap();
    for v in &out[0] {
        assert!((v - 2.0 / (1.0f64 + 1e-5).sqrt()).abs() < 1e-6, "{v}");
    }
}

/// Half-precision input whose per-channel sum is far past f16's 65504 (2
/// ranks × 40000 values near 2): SyncBatchNorm computes in f32, so the
/// output is finite, in f16, and normalized (mean 0, variance 1 over the
/// global batch).
#[test]
fn sync_batch_norm_of_a_large_half_precision_batch_is_finite() {
    let out = LocalWorld::new(2)
        .run(|c| {
            let world = HostCollective::new(c);
            let device = Device::flex().autodiff();
            let bn = SyncBatchNormConfig::new(1).init(&device)?;
            let rows = 40_000;
            let x: Vec<f32> = (0..rows)
                .map(|i| 2.0 + ((i + world.rank() * rows) % 7) as f32 * 0.125)
                .collect();
            let x = Tensor::<2>::from_data(TensorData::new(x, [rows, 1]), &device).cast(DType::F16);
            let y = bn.forward(&world, x)?;
            assert_eq!(y.dtype(), DType::F16);
            Ok::<_, Error>(values(y))
        })
        .unwrap();
    let all: Vec<f64> = out.concat();
    assert!(all.iter().all(|v| v.is_finite()));
    let n = all.len() as f64;
    let mean = all.iter().sum::<f64>() / n;
    let var = all.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / n;
    assert!(
        mean.abs() < 1e-2 && (var - 1.0).abs() < 1e-2,
        "mean {mean}, variance {var}"
    );
}

/// In inference, half-precision input to an f32 module is normalized in
/// the module's dtype and comes back in the input's.
#[test]
fn sync_batch_norm_in_inference_takes_half_precision_input() {
    let out = LocalWorld::new(1)
        .run(|c| {
            let world = HostCollective::new(c);
            let device = Device::flex();
            let bn = SyncBatchNormConfig::new(2).init(&device)?;
            let x = Tensor::<2>::ones([3, 2], (&device, DType::F32))
                .mul_scalar(2.0)
                .cast(DType::F16);
            let y = bn.forward(&world, x)?;
            assert_eq!(y.dtype(), DType::F16);
            Ok::<_, Error>(values(y))
        })
        .unwrap();
    let want = half::f16::from_f64(2.0 / (1.0f64 + 1e-5).sqrt()).to_f64();
    assert!(out[0].iter().all(|&v| v == want), "{:?} vs {want}", out[0]);
}
