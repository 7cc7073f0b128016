//! Sharded checkpoints (`ddp::save_sharded_checkpoint`,
//! `load_sharded_checkpoint`): a ZeRO run saved on n ranks resumes on m
//! ranks with each parameter's optimizer state on its new owner, and the
//! resumed run equals the uninterrupted one bit for bit; a shard of
//! another save is refused on every rank.

use std::path::PathBuf;

use burn_core as burn;

use burn::module::{Module, ModuleVisitor, Param};
use burn_nn::{Linear, LinearConfig};
use burn_optim::{AdamConfig, GradientsParams, ModuleOptimizer};
use burn_tensor::{Device, Tensor, TensorData};
use ruda_comm::{LocalWorld, RankError};
use ruda_tensor::ddp::{
    GradientReduction, Sharded, ZeroStage, broadcast_module, load_sharded_checkpoint,
    save_sharded_checkpoint, step,
};
use ruda_tensor::{Error, Group, HostCollective, TensorOp};

/// Linear → tanh → Linear → tanh → Linear, f32.
#[derive(Module, Debug)]
struct Mlp {
    a: Linear,
    b: Linear,
    c: Linear,
}

impl Mlp {
    fn new(device: &Device) -> Self {
        Mlp {
            a: LinearConfig::new(3, 8).init(device),
            b: LinearConfig::new(8, 8).init(device),
            c: LinearConfig::new(8, 1).init(device),
        }
    }

    fn forward(&self, x: Tensor<2>) -> Tensor<2> {
        self.c
            .forward(self.b.forward(self.a.forward(x).tanh()).tanh())
    }
}

fn bits(m: &Mlp) -> Vec<u32> {
    struct Read<'a>(&'a mut Vec<u32>);
    impl ModuleVisitor for Read<'_> {
        fn visit_float<const D: usize>(&mut self, p: &Param<Tensor<D>>) {
            let v = p.val().into_data().try_to_vec::<f32>().unwrap();
            self.0.extend(v.into_iter().map(f32::to_bits));
        }
    }
    let mut out = Vec::new();
    m.visit(&mut Read(&mut out));
    out
}

fn temp_dir(tag: &str) -> PathBuf {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    std::env::temp_dir().join(format!("ruda-{tag}-{}-{nanos}", std::process::id()))
}

/// `steps` steps on every rank's copy of the same batch (mean loss, the
/// mean over ranks: with 1 or 2 ranks the same bits as one process),
/// plainly (`None`) or sharded.
fn train<G: Group>(
    world: &G,
    mut model: Mlp,
    optim: &mut ModuleOptimizer,
    steps: usize,
    stage: Option<ZeroStage>,
) -> Result<Mlp, Error> {
    let device = Device::flex().autodiff();
    let x: Vec<f32> = (0..12).map(|i| (i as f32 * 0.7).sin()).collect();
    let x = Tensor::<2>::from_data(TensorData::new(x, [4, 3]), &device);
    let y = Tensor::<2>::from_data(
        TensorData::new(vec![0.5f32, -0.25, 1.0, 0.0], [4, 1]),
        &device,
    );
    for _ in 0..steps {
        let err = model.forward(x.clone()) - y.clone();
        let loss = (err.clone() * err).mean();
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        let how = GradientReduction::Mean;
        model = match stage {
            Some(s) => Sharded::new(s).step(world, optim, 0.01, model, grads, how)?,
            None => step(world, optim, 0.01, model, grads, how)?,
        };
    }
    Ok(model)
}

/// Train 3 sharded steps on `from` ranks, save, and train 2 more (the
/// uninterrupted run: rank 0's parameters); then load on `to` ranks
/// (fresh random models, fresh Adam) and train the same 2 steps: every
/// `to` rank's final parameters and optimizer state size.
fn straight_then_resumed(from: usize, to: usize) -> (Vec<u32>, Vec<(Vec<u32>, usize)>) {
    let dir = temp_dir("sharded-ckpt");
    let straight = LocalWorld::new(from)
        .run(|c| {
            let world = HostCollective::new(c);
            let model = broadcast_module(&world, Mlp::new(&Device::flex().autodiff()), 0)?;
            let mut optim = AdamConfig::new().init();
            let model = train(&world, model, &mut optim, 3, Some(ZeroStage::Two))?;
            save_sharded_checkpoint(&world, &dir, &model, &optim)?;
            let model = train(&world, model, &mut optim, 2, Some(ZeroStage::One))?;
            Ok::<_, Error>(bits(&model))
        })
        .unwrap()
        .remove(0);
    let resumed = LocalWorld::new(to)
        .run(|c| {
            let world = HostCollective::new(c);
            let fresh = Mlp::new(&Device::flex().autodiff());
            let (model, mut optim) =
                load_sharded_checkpoint(&world, &dir, fresh, AdamConfig::new().init())?;
            let state = optim.to_record().len();
            // Sharded on: a plain step would give the parameters this
            // rank does not own a fresh Adam state.
            let model = train(&world, model, &mut optim, 2, Some(ZeroStage::Two))?;
            Ok::<_, Error>((bits(&model), state))
        })
        .unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    (straight, resumed)
}

/// Saved on 2 ranks and resumed on 2 or 1, or saved on 1 and resumed on
/// 2, the resumed run equals the uninterrupted one bit for bit (1 and 2
/// ranks on the same batch make the same steps), each parameter's Adam
/// state on exactly one rank; resumed on 3, the state is spread over the
/// three and the replicas stay equal.
#[test]
fn a_sharded_checkpoint_resumes_on_any_number_of_ranks() {
    let full = 2 * 6; // Adam's two moments for 6 parameters
    for (from, to) in [(2, 2), (2, 1), (1, 2), (2, 3)] {
        let (straight, resumed) = straight_then_resumed(from, to);
        for (r, (b, _)) in resumed.iter().enumerate() {
            if to < 3 {
                assert_eq!(b, &straight, "saved on {from}, resumed on {to}: rank {r}");
            }
            assert_eq!(b, &resumed[0].0, "{from} → {to}: replicas differ");
        }
        let states: Vec<usize> = resumed.iter().map(|(_, s)| *s).collect();
        assert_eq!(
            states.iter().sum::<usize>(),
            full,
            "{from} → {to}: {states:?}"
        );
        if to > 1 {
            assert!(
                states.iter().all(|&s| s < full),
                "{from} → {to}: {states:?}"
            );
        }
    }
}

/// A directory without a checkpoint, or one whose shard comes from another
/// save, is an error on every rank naming the rank that could not read.
#[test]
fn a_missing_or_mixed_sharded_checkpoint_is_an_error_on_every_rank() {
    let (a, b) = (temp_dir("sharded-a"), temp_dir("sharded-b"));
    for dir in [&a, &b] {
        LocalWorld::new(2)
            .run(|c| {
                let world = HostCollective::new(c);
                let model = broadcast_module(&world, Mlp::new(&Device::flex().autodiff()), 0)?;
                let mut optim = AdamConfig::new().init();
                let model = train(&world, model, &mut optim, 1, Some(ZeroStage::One))?;
                save_sharded_checkpoint(&world, dir, &model, &optim)
            })
            .unwrap();
    }
    // B's shard of rank 1 replaced by A's (another save's).
    let shard_1 = |dir: &PathBuf| {
        std::fs::read_dir(dir)
            .unwrap()
            .map(|f| f.unwrap().path())
            .find(|p| p.to_string_lossy().ends_with("-1.ruda"))
            .unwrap()
    };
    std::fs::copy(shard_1(&a), shard_1(&b)).unwrap();
    for (dir, says) in [
        (&b, "a save cut short"),
        (&temp_dir("sharded-none"), "reading"),
    ] {
        let out = LocalWorld::new(2).run_each(|c| {
            let world = HostCollective::new(c);
            let fresh = Mlp::new(&Device::flex().autodiff());
            load_sharded_checkpoint(&world, dir, fresh, AdamConfig::new().init()).map(|_| ())
        });
        for (r, e) in out.into_iter().enumerate() {
            match e {
                Err(RankError::Failed(Error::Checkpoint {
                    op: TensorOp::DdpLoadSharded,
                    offender: 0,
                    message,
                    ..
                })) => assert!(r != 0 || message.contains(says), "rank {r}: {message}"),
                other => panic!("rank {r}: {other:?}"),
            }
        }
    }
    std::fs::remove_dir_all(&a).unwrap();
    std::fs::remove_dir_all(&b).unwrap();
}

/// A rank whose optimizer also holds state for parameters it does not own
/// (plain steps before the sharded ones) saves only its own; the load on
/// two ranks equals the uninterrupted run, and a second save into the same
/// directory leaves one save's shards.
#[test]
fn leftover_state_of_plain_steps_is_not_saved_twice() {
    let dir = temp_dir("sharded-leftover");
    let straight = LocalWorld::new(2)
        .run(|c| {
            let world = HostCollective::new(c);
            let model = broadcast_module(&world, Mlp::new(&Device::flex().autodiff()), 0)?;
            let mut optim = AdamConfig::new().init();
            let model = train(&world, model, &mut optim, 2, None)?;
            let model = train(&world, model, &mut optim, 1, Some(ZeroStage::One))?;
            save_sharded_checkpoint(&world, &dir, &model, &optim)?;
            save_sharded_checkpoint(&world, &dir, &model, &optim)?;
            let model = train(&world, model, &mut optim, 2, Some(ZeroStage::One))?;
            Ok::<_, Error>(bits(&model))
        })
        .unwrap();
    let shards = std::fs::read_dir(&dir)
        .unwrap()
        .filter(|f| {
            f.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .starts_with("optimizer-")
        })
        .count();
    assert_eq!(shards, 2, "one save's shards");
    let resumed = LocalWorld::new(2)
        .run(|c| {
            let world = HostCollective::new(c);
            let fresh = Mlp::new(&Device::flex().autodiff());
            let (model, mut optim) =
                load_sharded_checkpoint(&world, &dir, fresh, AdamConfig::new().init())?;
            let model = train(&world, model, &mut optim, 2, Some(ZeroStage::One))?;
            Ok::<_, Error>(bits(&model))
        })
        .unwrap();
    assert_eq!(resumed, straight);
    std::fs::remove_dir_all(&dir).unwrap();
}
