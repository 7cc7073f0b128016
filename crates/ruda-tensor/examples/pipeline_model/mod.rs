//! The pipeline training shared by `examples/pipeline_1f1b.rs` and
//! `tests/pipeline.rs`: a chain of stages (Linear → tanh), trained with
//! Adam on micro-batches whose gradients are accumulated, either serially
//! on one rank or with stage `s` on rank `s`, scheduled 1F1B
//! ([`one_f_one_b`]) and moving activations and gradients through an
//! [`Exchange`].
//!
//! Both runs make the same floating-point operations in the same order
//! (each stage's forward and backward pass per micro-batch, gradients
//! accumulated in micro-batch order), so they agree bit for bit.

#![allow(dead_code)]

use burn_core as burn;

use burn::module::{Module, Param};
use burn_nn::Linear;
use burn_optim::{AdamConfig, GradientsAccumulator, GradientsParams};
use burn_tensor::activation::tanh;
use burn_tensor::{DType, Device, Tensor, TensorData};
use ruda_comm::LocalWorld;
use ruda_tensor::pipeline::{PipeStep, one_f_one_b};
use ruda_tensor::{DeviceWorld, Error, Exchange, Group, HostCollective, try_backward};

/// The width of every layer.
pub const WIDTH: usize = 5;
/// Adam's learning rate.
pub const LR: f64 = 0.05;

/// One stage: Linear (WIDTH → WIDTH) → tanh.
#[derive(Module, Debug)]
pub struct Stage {
    linear: Linear,
}

impl Stage {
    /// Stage `index`, with weights that depend only on the index.
    pub fn new(index: usize, device: &Device) -> Self {
        let w: Vec<f64> = (0..WIDTH * WIDTH)
            .map(|i| ((i * 7 + index * 13) as f64 * 0.37).sin() * 0.6)
            .collect();
        let b: Vec<f64> = (0..WIDTH)
            .map(|i| ((i + index * 5) as f64 * 0.71).cos() * 0.1)
            .collect();
        let f64s = (device, DType::F64);
        Stage {
            linear: Linear {
                weight: Param::from_tensor(Tensor::from_data(
                    TensorData::new(w, [WIDTH, WIDTH]),
                    f64s,
                )),
                bias: Some(Param::from_tensor(Tensor::from_data(
                    TensorData::new(b, [WIDTH]),
                    f64s,
                ))),
            },
        }
    }

    /// `tanh(x W + b)`.
    pub fn forward(&self, x: Tensor<2>) -> Tensor<2> {
        tanh(self.linear.forward(x))
    }

    /// Every parameter's values, in module order.
    pub fn values(&self) -> Vec<f64> {
        let mut out = self
            .linear
            .weight
            .val()
            .into_data()
            .try_to_vec::<f64>()
            .expect("f64");
        if let Some(b) = &self.linear.bias {
            out.extend(b.val().into_data().try_to_vec::<f64>().expect("f64"));
        }
        out
    }
}

/// Micro-batch `m` of `rows` rows: input and target, `[rows, WIDTH]` each.
pub fn micro_batch(m: usize, rows: usize, device: &Device) -> (Tensor<2>, Tensor<2>) {
    let values = |k: usize, f: fn(f64) -> f64| -> Tensor<2> {
        let v = (0..rows * WIDTH)
            .map(|i| f(((i + 3 * m) * (k + 11)) as f64 * 0.13) * 0.8)
            .collect::<Vec<f64>>();
        Tensor::from_data(TensorData::new(v, [rows, WIDTH]), (device, DType::F64))
    };
    (values(1, f64::sin), values(2, f64::cos))
}

/// The squared error of micro-batch output `y` against `target`.
fn loss(y: Tensor<2>, target: Tensor<2>) -> Tensor<1> {
    (y - target).powi_scalar(2).sum()
}

fn scalar(t: Tensor<1>) -> f64 {
    t.into_data().try_to_vec::<f64>().expect("f64")[0]
}

/// What a training run ends with: every stage's parameters and every
/// step's loss (summed over micro-batches).
#[derive(Clone, Debug, PartialEq)]
pub struct Trained {
    /// Each stage's parameter values, stage by stage.
    pub stages: Vec<Vec<f64>>,
    /// Each step's loss.
    pub losses: Vec<f64>,
}

/// Train all `stages` on one rank: per step, each micro-batch's loss
/// backward in turn, gradients accumulated, one Adam step.
pub fn train_serial(stages: usize, micro: usize, rows: usize, steps: usize) -> Trained {
    let dev = Device::flex().autodiff();
    let mut chain: Vec<Stage> = (0..stages).map(|s| Stage::new(s, &dev)).collect();
    let mut optim = AdamConfig::new().init();
    let mut losses = Vec::new();
    for _ in 0..steps {
        let mut acc = GradientsAccumulator::new();
        let mut total = 0.0;
        for m in 0..micro {
            let (x, target) = micro_batch(m, rows, &dev);
            let y = chain.iter().fold(x, |h, stage| stage.forward(h));
            let l = loss(y, target);
            total += scalar(l.clone());
            let grads = l.backward();
            acc.accumulate(&chain, GradientsParams::from_grads(grads, &chain));
        }
        chain = optim.step(LR, chain, acc.grads());
        losses.push(total);
    }
    Trained {
        stages: chain.iter().map(Stage::values).collect(),
        losses,
    }
}

/// One rank's part of the pipeline: stage `world.rank()` of
/// `world.size()`; its parameters, and (on the last stage) each step's
/// loss.
///
/// # Errors
/// The exchange's errors.
pub fn rank_steps<G: Group>(
    world: &G,
    micro: usize,
    rows: usize,
    steps: usize,
) -> Result<(Vec<f64>, Vec<f64>), Error> {
    let (s, n) = (world.rank(), world.size());
    let last = s + 1 == n;
    let dev = Device::flex().autodiff();
    let mut stage = Stage::new(s, &dev);
    let mut optim = AdamConfig::new().init();
    let ex = Exchange::new(world);
    let schedule = one_f_one_b(n, s, micro)?;
    let mut losses = Vec::new();
    for _ in 0..steps {
        // Per micro-batch in flight: the tensor its backward pass starts
        // from (the loss on the last stage, the sent output's receipt on
        // the others).
        let mut started: Vec<Option<Tensor<1>>> = (0..micro).map(|_| None).collect();
        let mut acc = GradientsAccumulator::new();
        let mut total = 0.0;
        for &step in &schedule {
            match step {
                PipeStep::Forward(m) => {
                    let (x, target) = micro_batch(m, rows, &dev);
                    let input = if s == 0 {
                        x
                    } else {
                        ex.irecv::<2>(s - 1, &dev)?.wait()?
                    };
                    let y = stage.forward(input);
                    started[m] = Some(if last {
                        loss(y, target)
                    } else {
                        ex.isend(y, s + 1)?.sum()
                    });
                }
                PipeStep::Backward(m) => {
                    let root = started[m].take().expect("the schedule runs forward first");
                    if last {
                        total += scalar(root.clone());
                    }
                    let grads = try_backward(|| root.backward())?;
                    acc.accumulate(&stage, GradientsParams::from_grads(grads, &stage));
                }
            }
        }
        // The last backward pass's gradient send is still posted.
        ex.wait()?;
        stage = optim.step(LR, stage, acc.grads());
        losses.push(total);
    }
    Ok((stage.values(), losses))
}

/// Train `stages` stages as a 1F1B pipeline, one rank (thread) per stage.
///
/// # Errors
/// The exchange's errors, as text.
pub fn train_pipeline(
    stages: usize,
    micro: usize,
    rows: usize,
    steps: usize,
) -> Result<Trained, String> {
    let runs = LocalWorld::new(stages)
        .run(|c| rank_steps(&HostCollective::new(c), micro, rows, steps))
        .map_err(|e| e.to_string())?;
    Ok(collect(runs))
}

/// [`train_pipeline`] on a device world (tensors never staged through host
/// memory).
///
/// # Errors
/// The exchange's errors, as text.
pub fn train_pipeline_on_device(
    stages: usize,
    micro: usize,
    rows: usize,
    steps: usize,
) -> Result<Trained, String> {
    let runs = DeviceWorld::shared(stages, Device::flex())
        .run(|g, _| rank_steps(&g, micro, rows, steps))
        .map_err(|e| e.to_string())?;
    Ok(collect(runs))
}

fn collect(runs: Vec<(Vec<f64>, Vec<f64>)>) -> Trained {
    let losses = runs.last().map(|r| r.1.clone()).unwrap_or_default();
    Trained {
        stages: runs.into_iter().map(|r| r.0).collect(),
        losses,
    }
}
