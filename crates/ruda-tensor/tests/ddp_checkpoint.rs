//! Checkpoints of a data-parallel run: saved by one rank, loaded by all
//! into fresh replicas (other random weights, a new optimizer), the resumed
//! run equals the uninterrupted one bit for bit; failures to write or read
//! are typed errors on every rank.

use std::path::PathBuf;

use burn_nn::{Linear, LinearConfig};
use burn_optim::{AdamConfig, GradientsParams, ModuleOptimizer};
use burn_tensor::{Device, Tensor, TensorData};
use ruda_comm::{LocalWorld, RankError};
use ruda_tensor::ddp::{
    CHECKPOINT_FILE, GradientReduction, all_reduce_gradients, broadcast_module, load_checkpoint,
    save_checkpoint,
};
use ruda_tensor::{Error, Group, HostCollective, TensorOp};

fn temp_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ruda-ckpt-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// Rank `r`'s shard at `step`: `rows` samples of three features.
fn shard(r: usize, step: usize, rows: usize, device: &Device) -> Tensor<2> {
    let v: Vec<f32> = (0..rows * 3)
        .map(|i| (((i + 7 * r + 13 * step) % 17) as f32 - 8.0) / 4.0)
        .collect();
    Tensor::from_data(TensorData::new(v, [rows, 3]), device)
}

fn weights(m: &Linear) -> Vec<f32> {
    let mut w = m.weight.val().into_data().try_to_vec::<f32>().unwrap();
    w.extend(
        m.bias
            .as_ref()
            .unwrap()
            .val()
            .into_data()
            .try_to_vec::<f32>()
            .unwrap(),
    );
    w
}

/// Train `steps` steps from `model`/`optim` starting at step `from`; the
/// weights after each step.
fn train<G: Group>(
    world: &G,
    mut model: Linear,
    mut optim: ModuleOptimizer,
    from: usize,
    steps: usize,
) -> Result<(Linear, ModuleOptimizer, Vec<Vec<f32>>), Error> {
    let device = Device::flex().autodiff();
    let rows = 2 + world.rank(); // uneven shards
    let mut seen = Vec::new();
    for step in from..from + steps {
        let y = model.forward(shard(world.rank(), step, rows, &device));
        let loss = (y.clone() * y).mean();
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        let how = GradientReduction::WeightedMean { samples: rows };
        let grads = all_reduce_gradients(world, &model, grads, how)?;
        model = optim.step(0.05, model, grads);
        seen.push(weights(&model));
    }
    Ok((model, optim, seen))
}

#[test]
fn a_resumed_run_equals_the_uninterrupted_one_bit_for_bit() {
    let (total, k) = (6, 2);
    for n in [1, 2, 3] {
        let dir = temp_dir(&format!("resume{n}"));
        let out = LocalWorld::new(n)
            .run(|c| {
                let world = HostCollective::new(c);
                let device = Device::flex().autodiff();
                let start = broadcast_module(&world, LinearConfig::new(3, 2).init(&device), 0)?;
                // Uninterrupted.
                let (_, _, whole) =
                    train(&world, start.clone(), AdamConfig::new().init(), 0, total)?;
                // Stopped after k steps, saved by the last rank ...
                let (m, o, first) = train(&world, start, AdamConfig::new().init(), 0, k)?;
                save_checkpoint(&world, n - 1, &dir, &m, &o)?;
                drop((m, o));
                // ... and resumed into fresh replicas with other random weights.
                let fresh: Linear = LinearConfig::new(3, 2).init(&device);
                let (m, o) = load_checkpoint(&world, &dir, fresh, AdamConfig::new().init())?;
                // Nothing stays tied to the file: overwriting it (as the next
                // save would) does not change the resumed run.
                world.exchange_words(&[0])?;
                if world.rank() == 0 {
                    std::fs::write(dir.join(CHECKPOINT_FILE), b"overwritten").unwrap();
                }
                world.exchange_words(&[0])?;
                let (_, _, rest) = train(&world, m, o, k, total - k)?;
                Ok::<_, Error>((whole, first.into_iter().chain(rest).collect::<Vec<_>>()))
            })
            .unwrap();
        for (r, (whole, resumed)) in out.iter().enumerate() {
            assert_eq!(resumed, whole, "{n} ranks, rank {r}");
            assert_ne!(whole[0], whole[total - 1], "training moved the weights");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

fn failures(out: Vec<Result<(), RankError<Error>>>) -> Vec<Error> {
    out.into_iter()
        .map(|r| match r {
            Err(RankError::Failed(e)) => e,
            other => panic!("expected an error, got {other:?}"),
        })
        .collect()
}

#[test]
fn a_checkpoint_that_cannot_be_read_or_written_is_an_error_on_every_rank() {
    // Nothing to read.
    let missing = temp_dir("missing");
    let out = LocalWorld::new(2).run_each(|c| {
        let world = HostCollective::new(c);
        let m: Linear = LinearConfig::new(3, 2).init(&Device::flex().autodiff());
        load_checkpoint(&world, &missing, m, AdamConfig::new().init()).map(|_| ())
    });
    for (r, e) in failures(out).into_iter().enumerate() {
        match e {
            Error::Checkpoint {
                op: TensorOp::DdpLoad,
                rank,
                offender: 0,
                ref message,
                ..
            } => {
                assert_eq!(rank, r);
                if r == 0 {
                    assert!(message.contains(CHECKPOINT_FILE), "{message}");
                }
            }
            other => panic!("rank {r}: {other}"),
        }
    }
    // A directory that cannot be created (under a regular file): the root
    // (rank 1) fails, every rank says so.
    let file = temp_dir("file");
    std::fs::write(&file, b"not a directory").unwrap();
    let out = LocalWorld::new(3).run_each(|c| {
        let world = HostCollective::new(c);
        let m: Linear = LinearConfig::new(3, 2).init(&Device::flex().autodiff());
        save_checkpoint(&world, 1, file.join("ckpt"), &m, &AdamConfig::new().init())
    });
    for (r, e) in failures(out).into_iter().enumerate() {
        match e {
            Error::Checkpoint {
                op: TensorOp::DdpSave,
                rank,
                offender: 1,
                ..
            } => assert_eq!(rank, r),
            other => panic!("rank {r}: {other}"),
        }
    }
    std::fs::remove_file(&file).unwrap();
}

/// One rank that cannot read (its directory differs), a file that is not a
/// checkpoint, roots that differ, and a rank saving while its peer loads:
/// each a typed error on every rank.
#[test]
fn partial_read_failures_corrupt_files_roots_and_mixed_calls_are_errors_everywhere() {
    let dir = temp_dir("good");
    LocalWorld::new(2)
        .run(|c| {
            let world = HostCollective::new(c);
            let m: Linear = LinearConfig::new(3, 2).init(&Device::flex().autodiff());
            let m = broadcast_module(&world, m, 0)?;
            save_checkpoint(&world, 0, &dir, &m, &AdamConfig::new().init())
        })
        .unwrap();
    let elsewhere = temp_dir("elsewhere");
    let out = LocalWorld::new(3).run_each(|c| {
        let world = HostCollective::new(c);
        let m: Linear = LinearConfig::new(3, 2).init(&Device::flex().autodiff());
        let d = if world.rank() == 1 { &elsewhere } else { &dir };
        load_checkpoint(&world, d, m, AdamConfig::new().init()).map(|_| ())
    });
    for (r, e) in failures(out).into_iter().enumerate() {
        match e {
            Error::Checkpoint {
                rank, offender: 1, ..
            } => assert_eq!(rank, r),
            other => panic!("one rank elsewhere, rank {r}: {other}"),
        }
    }
    let corrupt = temp_dir("corrupt");
    std::fs::create_dir_all(&corrupt).unwrap();
    std::fs::write(corrupt.join(CHECKPOINT_FILE), b"RUDACKP1 but nothing after").unwrap();
    let out = LocalWorld::new(2).run_each(|c| {
        let world = HostCollective::new(c);
        let m: Linear = LinearConfig::new(3, 2).init(&Device::flex().autodiff());
        load_checkpoint(&world, &corrupt, m, AdamConfig::new().init()).map(|_| ())
    });
    for (r, e) in failures(out).into_iter().enumerate() {
        match e {
            Error::Checkpoint {
                rank,
                offender: 0,
                ref message,
                ..
            } => {
                assert_eq!(rank, r);
                if r == 0 {
                    assert!(message.contains("not a ruda checkpoint"), "{message}");
                }
            }
            other => panic!("corrupt, rank {r}: {other}"),
        }
    }
    let out = LocalWorld::new(2).run_each(|c| {
        let world = HostCollective::new(c);
        let m: Linear = LinearConfig::new(3, 2).init(&Device::flex().autodiff());
        save_checkpoint(&world, world.rank(), &dir, &m, &AdamConfig::new().init())
    });
    for (r, e) in failures(out).into_iter().enumerate() {
        match e {
            Error::InvalidRoot {
                op: TensorOp::DdpSave,
                rank,
                offender: 1,
                root: 1,
                expected: 0,
                ..
            } => {
                assert_eq!(rank, r)
            }
            other => panic!("roots, rank {r}: {other}"),
        }
    }
    let out = LocalWorld::new(2).run_each(|c| {
        let world = HostCollective::new(c);
        let m: Linear = LinearConfig::new(3, 2).init(&Device::flex().autodiff());
        if world.rank() == 0 {
            save_checkpoint(&world, 0, &dir, &m, &AdamConfig::new().init())
        } else {
            load_checkpoint(&world, &dir, m, AdamConfig::new().init()).map(|_| ())
        }
    });
    for (r, e) in failures(out).into_iter().enumerate() {
        match e {
            Error::Record {
                rank,
                what: "operation",
                ..
            } => assert_eq!(rank, r),
            other => panic!("save vs load, rank {r}: {other}"),
        }
    }
    for d in [&dir, &corrupt] {
        std::fs::remove_dir_all(d).unwrap();
    }
}

/// An f64 model whose optimizer has state, in a process whose default float
/// dtype is f32: burn-optim 0.22.1 would restore the state in f32 (and the
/// next step would panic on the mixed dtypes), so loading is a typed error
/// on every rank that says how to fix it. A model in the default dtype, or
/// an optimizer without state, loads.
#[test]
fn optimizer_state_that_would_change_dtype_is_refused() {
    use burn_core::module::{Module, ModuleMapper, Param};
    struct ToF64;
    impl ModuleMapper for ToF64 {
        fn map_float<const D: usize>(&mut self, p: Param<Tensor<D>>) -> Param<Tensor<D>> {
            p.map(|t| {
                let tracked = t.is_require_grad();
                let device = t.device();
                let data = t.into_data().convert::<f64>();
                Tensor::<D>::from_data(data, (&device, burn_tensor::DType::F64))
                    .set_require_grad(tracked)
            })
        }
    }
    assert_eq!(
        Device::default().settings().float_dtype,
        burn_tensor::FloatDType::F32,
        "this test needs the default f32"
    );
    for (f64_model, with_state) in [(true, true), (true, false), (false, true)] {
        let dir = temp_dir(&format!("dtype-{f64_model}-{with_state}"));
        let out = LocalWorld::new(2).run_each(|c| {
            let world = HostCollective::new(c);
            let device = Device::flex().autodiff();
            let new = || {
                let m: Linear = LinearConfig::new(3, 2).init(&device);
                if f64_model { m.map(&mut ToF64) } else { m }
            };
            let m = broadcast_module(&world, new(), 0)?;
            let (m, o) = if with_state {
                // One Adam step, in the model's dtype.
                let x = shard(world.rank(), 0, 2, &device).cast(m.weight.val().dtype());
                let y = m.forward(x);
                let grads = GradientsParams::from_grads((y.clone() * y).mean().backward(), &m);
                let how = GradientReduction::WeightedMean { samples: 2 };
                let grads = all_reduce_gradients(&world, &m, grads, how)?;
                let mut o = AdamConfig::new().init();
                (o.step(0.05, m, grads), o)
            } else {
                (m, AdamConfig::new().init())
            };
            save_checkpoint(&world, 0, &dir, &m, &o)?;
            load_checkpoint(&world, &dir, new(), AdamConfig::new().init()).map(|_| ())
        });
        if f64_model && with_state {
            for (r, e) in failures(out).into_iter().enumerate() {
                match e {
                    Error::Checkpoint {
                        op: TensorOp::DdpLoad,
                        ref message,
                        ..
                    } => assert!(
                        r != 0 || (message.contains("F64") && message.contains("configure")),
                        "{message}"
                    ),
                    other => panic!("rank {r}: {other}"),
                }
            }
        } else {
            for o in out {
                o.unwrap_or_else(|e| panic!("f64 {f64_model}, state {with_state}: {e:?}"));
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
