//! ZeRO stages 1 and 2 (`ddp::Sharded`): training equals plain data
//! parallelism with the same optimizer bit for bit on 1 to 8 ranks (host
//! and device-resident groups), each parameter's optimizer state lives on
//! exactly one rank, and ranks that shard differently get a typed error.

mod common;
#[path = "../examples/ddp_model/mod.rs"]
mod ddp_model;

use burn_core as burn;

use burn::module::{Module, Param};
use burn_optim::{AdamConfig, GradientsParams};
use burn_tensor::{DType, Device, Tensor, TensorData};
use common::param_bits as bits;
use ddp_model::{CHANNELS, LENGTH, Net};
use ruda_comm::{Communicator, LocalWorld, RankError};
use ruda_tensor::ddp::{Buckets, GradientReduction, Sharded, ZeroStage, check_replicas, step};
use ruda_tensor::layout::compute_split_shapes;
use ruda_tensor::{DeviceWorld, Error, Group, HostCollective, ModuleProblem, TensorOp};

/// How a run steps: plain data parallelism or a ZeRO stage.
#[derive(Clone, Copy, Debug)]
enum How {
    Plain,
    Zero(ZeroStage),
    /// A stage with transfers cut into runs of at most this many bytes.
    Chunked(ZeroStage, usize),
}

/// One rank's training: every step's parameters (bits) and, at the end,
/// the number of tensors in its optimizer's state.
fn train<G: Group>(
    world: &G,
    batch: usize,
    steps: usize,
    how: How,
) -> Result<(Vec<Vec<u64>>, usize), Error> {
    let shards = compute_split_shapes(batch, world.size()).unwrap();
    let me = world.rank();
    let start: usize = shards[..me].iter().sum();
    let rows = shards[me];
    let (x, y) = ddp_model::batch(batch);
    let device = Device::flex().autodiff();
    let on = (&device, DType::F64);
    let per = CHANNELS * LENGTH;
    let xs = Tensor::<3>::from_data(
        TensorData::new(
            x[start * per..(start + rows) * per].to_vec(),
            [rows, CHANNELS, LENGTH],
        ),
        on,
    );
    let ys = Tensor::<2>::from_data(
        TensorData::new(y[start..start + rows].to_vec(), [rows, 1]),
        on,
    );
    let mut net = Net::new(&device);
    let mut optim = AdamConfig::new().init();
    let mut record = Vec::new();
    for s in 0..steps {
        let err = net.forward(xs.clone()) - ys.clone();
        // Alternate the reductions: the scaling happens before the sum in both paths.
        let (loss, reduction) = if s % 2 == 0 {
            (
                (err.clone() * err).sum().mul_scalar(1.0 / batch as f64),
                GradientReduction::Sum,
            )
        } else {
            let mean = (err.clone() * err)
                .sum()
                .mul_scalar(1.0 / rows.max(1) as f64);
            (mean, GradientReduction::WeightedMean { samples: rows })
        };
        let grads = GradientsParams::from_grads(loss.backward(), &net);
        net = match how {
            How::Plain => step(world, &mut optim, 0.05, net, grads, reduction)?,
            How::Zero(stage) => {
                Sharded::new(stage).step(world, &mut optim, 0.05, net, grads, reduction)?
            }
            How::Chunked(stage, bytes) => {
                let buckets = Buckets {
                    bucket_bytes: bytes,
                    ..Buckets::default()
                };
                let sharded = Sharded {
                    buckets,
                    ..Sharded::new(stage)
                };
                sharded.step(world, &mut optim, 0.05, net, grads, reduction)?
            }
        };
        check_replicas(world, &net)?;
        record.push(bits(&net));
    }
    Ok((record, optim.to_record().len()))
}

fn on_threads(ranks: usize, how: How) -> Vec<(Vec<Vec<u64>>, usize)> {
    LocalWorld::new(ranks)
        .run(|c| train(&HostCollective::new(c), 11, 4, how))
        .unwrap()
}

/// ZeRO 1 and 2 make the same steps as plain data parallelism, bit for
/// bit, on 1 to 8 ranks (uneven shards; from 5 ranks on some ranks own no
/// parameter); each parameter's Adam state is on one rank only: the ranks'
/// state tensors add up to the plain run's, and from 2 ranks on no rank
/// holds all of it.
#[test]
fn sharded_steps_equal_plain_data_parallel_steps_bit_for_bit() {
    for ranks in 1..=8 {
        let plain = on_threads(ranks, How::Plain);
        let full = plain[0].1;
        assert!(full > 0);
        for how in [
            How::Zero(ZeroStage::One),
            How::Zero(ZeroStage::Two),
            // Every parameter in a run of its own, and runs of a few.
            How::Chunked(ZeroStage::Two, 0),
            How::Chunked(ZeroStage::Two, 300),
            How::Chunked(ZeroStage::One, 0),
        ] {
            let stage = how;
            let sharded = on_threads(ranks, how);
            for (r, (steps, state)) in sharded.iter().enumerate() {
                assert_eq!(
                    steps, &plain[r].0,
                    "{ranks} ranks {stage:?}: rank {r}'s steps differ"
                );
                if ranks > 1 {
                    assert!(
                        *state < full,
                        "{ranks} ranks {stage:?}: rank {r} holds all {full} state tensors"
                    );
                }
            }
            let total: usize = sharded.iter().map(|(_, s)| s).sum();
            assert_eq!(
                total, full,
                "{ranks} ranks {stage:?}: state tensors over the ranks"
            );
        }
    }
}

/// On a device-resident group (gradients and parameters never leave the
/// device) ZeRO 2 equals the host-staged plain run bit for bit.
#[test]
fn sharded_steps_on_a_device_world_equal_the_host_staged_plain_run() {
    for ranks in [2, 3] {
        let plain = on_threads(ranks, How::Plain);
        let device = DeviceWorld::shared(ranks, Device::flex())
            .run(|group, _| train(&group, 11, 3, How::Zero(ZeroStage::Two)))
            .unwrap();
        for (r, (steps, _)) in device.iter().enumerate() {
            assert_eq!(steps[..], plain[r].0[..3], "{ranks} ranks: rank {r}");
        }
    }
}

/// Ranks in different stages, with different transfer sizes, or one in a
/// plain step get a typed error on every rank instead of mixing
/// collectives.
#[test]
fn ranks_that_shard_differently_are_an_error_on_every_rank() {
    for mixed in [
        How::Zero(ZeroStage::Two),
        How::Plain,
        How::Chunked(ZeroStage::One, 100),
    ] {
        let out = LocalWorld::new(2).run_each(|c| {
            let how = if c.rank() == 1 {
                mixed
            } else {
                How::Zero(ZeroStage::One)
            };
            train(&HostCollective::new(c), 6, 1, how).map(|_| ())
        });
        for (r, e) in out.into_iter().enumerate() {
            let e = match e {
                Err(RankError::Failed(e)) => e,
                other => panic!("{mixed:?} rank {r}: {other:?}"),
            };
            match mixed {
                How::Plain => assert!(
                    matches!(
                        e,
                        // Each rank names the other, whose call is not its own.
                        Error::Record {
                            offender,
                            what: "operation",
                            ..
                        } if offender == 1 - r
                    ),
                    "rank {r}: {e}"
                ),
                How::Chunked(..) => assert!(
                    matches!(
                        e,
                        Error::ModuleMismatch {
                            offender: 1,
                            problem: ModuleProblem::Buckets { .. },
                            ..
                        }
                    ),
                    "rank {r}: {e}"
                ),
                How::Zero(_) => assert!(
                    matches!(
                        e,
                        Error::ModuleMismatch {
                            op: TensorOp::DdpSharded,
                            offender: 1,
                            problem: ModuleProblem::Stage {
                                expected: "ZeRO stage 1",
                                got: "ZeRO stage 2"
                            },
                            ..
                        }
                    ),
                    "rank {r}: {e}"
                ),
            }
        }
    }
}

/// A module with a zero-size parameter (an empty bias) beside a real one:
/// plain DDP and both ZeRO stages step it without a panic (Burn refuses a
/// zero-length narrow, which unpacking a bucket or a shard would ask for)
/// and agree with each other bit for bit.
#[test]
fn a_zero_size_parameter_steps_in_every_mode() {
    #[derive(Module, Debug)]
    struct WithEmpty {
        empty: Param<Tensor<1>>,
        weight: Param<Tensor<1>>,
    }
    let results = LocalWorld::new(2)
        .run(|comm| {
            let world = HostCollective::new(comm);
            let device = Device::flex().autodiff();
            let on = (&device, DType::F64);
            let mut out = Vec::new();
            for mode in 0..3 {
                let mut m = WithEmpty {
                    empty: Param::from_tensor(Tensor::zeros([0], on).require_grad()),
                    weight: Param::from_tensor(
                        Tensor::from_data(TensorData::new(vec![0.5, -1.0, 2.0], [3]), on)
                            .require_grad(),
                    ),
                };
                let mut optim = AdamConfig::new().init();
                for _ in 0..2 {
                    let scale = 1.0 + world.rank() as f64;
                    let loss = (m.weight.val() * m.weight.val()).sum().mul_scalar(scale)
                        + m.empty.val().sum();
                    let grads = GradientsParams::from_grads(loss.backward(), &m);
                    let how = GradientReduction::Mean;
                    m = match mode {
                        0 => step(&world, &mut optim, 0.1, m, grads, how)?,
                        1 => Sharded::new(ZeroStage::One)
                            .step(&world, &mut optim, 0.1, m, grads, how)?,
                        _ => Sharded::new(ZeroStage::Two)
                            .step(&world, &mut optim, 0.1, m, grads, how)?,
                    };
                }
                assert_eq!(m.empty.val().dims(), [0]);
                out.push(m.weight.val().into_data().try_to_vec::<f64>().unwrap());
            }
            Ok::<_, Error>(out)
        })
        .unwrap();
    for r in &results {
        assert_eq!(r[0], r[1], "ZeRO 1 vs plain");
        assert_eq!(r[0], r[2], "ZeRO 2 vs plain");
        assert_ne!(r[0], vec![0.5, -1.0, 2.0], "the steps moved the weight");
    }
    assert_eq!(results[0], results[1], "replicas equal");
}
