//! The data-parallel training shared by `examples/ddp_train.rs` and
//! `tests/ddp.rs`: a small `burn-nn` model (Conv1d → ReLU → Linear) trained
//! with Adam by `n` ranks on disjoint shards of one batch, gradients summed
//! with `ruda_tensor::ddp::all_reduce_gradients` after `backward()`.
//!
//! Each rank's loss is the sum of squared errors over its shard divided by
//! the global batch size, so the sum over ranks of the gradients is the
//! full-batch gradient: `n` ranks and one rank make the same steps, up to
//! f64 round-off.

#![allow(dead_code)]

use burn_core as burn;

use burn::module::{Module, ModuleMapper, Param};
use burn_nn::conv::{Conv1d, Conv1dConfig};
use burn_nn::{Linear, LinearConfig, PaddingConfig1d, Relu};
use burn_optim::{AdamConfig, GradientsParams};
use burn_tensor::{DType, Device, Tensor, TensorData};
use ruda_comm::LocalWorld;
use ruda_tensor::ddp::{GradientReduction, all_reduce_gradients};
use ruda_tensor::layout::compute_split_shapes;
use ruda_tensor::{DeviceWorld, Error, Group, HostCollective, TensorExt};

pub const CHANNELS: usize = 2;
pub const LENGTH: usize = 8;

/// Conv1d (2 → 3 channels, kernel 3, same padding) → ReLU → Linear (24 → 1).
#[derive(Module, Debug)]
pub struct Net {
    conv: Conv1d,
    act: Relu,
    head: Linear,
}

impl Net {
    pub fn new(device: &Device) -> Self {
        Net {
            conv: Conv1dConfig::new(CHANNELS, 3, 3)
                .with_padding(PaddingConfig1d::Same)
                .init(device),
            act: Relu::new(),
            head: LinearConfig::new(3 * LENGTH, 1).init(device),
        }
        .map(&mut Deterministic::default())
    }

    pub fn forward(&self, x: Tensor<3>) -> Tensor<2> {
        let [batch, _, _] = x.dims();
        let h = self.act.forward(self.conv.forward(x));
        self.head.forward(h.reshape([batch, 3 * LENGTH]))
    }
}

/// Sets every parameter to values that depend only on its position in the
/// model, so that every rank (and the serial run) starts from the same
/// model without sharing a tensor between ranks.
#[derive(Default)]
pub struct Deterministic {
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
            .map(|i| ((i * 7 + k * 13) as f64 * 0.37).sin() * 0.4)
            .collect();
        let fresh =
            Tensor::<D>::from_data(TensorData::new(values, dims), (&t.device(), DType::F64));
        Param::initialized(id, fresh.require_grad())
    }
}

/// The global batch: inputs `[batch, 2, 8]` and targets `[batch, 1]`.
pub fn batch(size: usize) -> (Vec<f64>, Vec<f64>) {
    let x = (0..size * CHANNELS * LENGTH)
        .map(|i| ((i * 31) % 17) as f64 / 17.0 - 0.5)
        .collect();
    let y = (0..size).map(|b| (b as f64 * 0.9).cos()).collect();
    (x, y)
}

/// One step's record: the global loss and every parameter's value.
#[derive(Clone, Debug, PartialEq)]
pub struct Step {
    pub loss: f64,
    pub params: Vec<f64>,
}

fn params_of(net: &Net) -> Vec<f64> {
    let mut out = Vec::new();
    struct Read<'a>(&'a mut Vec<f64>);
    impl burn::module::ModuleVisitor for Read<'_> {
        fn visit_float<const D: usize>(&mut self, p: &Param<Tensor<D>>) {
            let v = p.val().into_data().convert::<f64>();
            self.0.extend(v.try_to_vec::<f64>().expect("f64"));
        }
    }
    net.visit(&mut Read(&mut out));
    out
}

/// Train for `steps` on `ranks` threads, each rank on its balanced shard of
/// a batch of `batch_size`; every rank's records. Tensors are staged
/// through host memory by the local transport ([`HostCollective`]).
///
/// # Errors
/// The tensor layer's errors.
pub fn train(ranks: usize, batch_size: usize, steps: usize) -> Result<Vec<Vec<Step>>, String> {
    let shards = compute_split_shapes(batch_size, ranks).map_err(|e| e.to_string())?;
    LocalWorld::new(ranks)
        .run(|comm| rank_steps(&HostCollective::new(comm), &shards, steps))
        .map_err(|e| e.to_string())
}

/// [`train`] on a device world: the ranks share one Flex device and the
/// gradients never leave it ([`ruda_tensor::DeviceGroup`]).
///
/// # Errors
/// The tensor layer's errors.
pub fn train_on_device(
    ranks: usize,
    batch_size: usize,
    steps: usize,
) -> Result<Vec<Vec<Step>>, String> {
    let shards = compute_split_shapes(batch_size, ranks).map_err(|e| e.to_string())?;
    DeviceWorld::shared(ranks, Device::flex())
        .run(|group, _| rank_steps(&group, &shards, steps))
        .map_err(|e| e.to_string())
}

/// One rank's training on its shard of the batch (`shards`: every rank's
/// rows), gradients summed over `world`.
pub fn rank_steps<G: Group>(world: &G, shards: &[usize], steps: usize) -> Result<Vec<Step>, Error> {
    let batch_size: usize = shards.iter().sum();
    let (x, y) = batch(batch_size);
    let me = world.rank();
    let start: usize = shards[..me].iter().sum();
    let rows = shards[me];
    let device = Device::flex().autodiff();
    let f64_on = (&device, DType::F64);
    let per = CHANNELS * LENGTH;
    let xs = Tensor::<3>::from_data(
        TensorData::new(
            x[start * per..(start + rows) * per].to_vec(),
            [rows, CHANNELS, LENGTH],
        ),
        f64_on,
    );
    let ys = Tensor::<2>::from_data(
        TensorData::new(y[start..start + rows].to_vec(), [rows, 1]),
        f64_on,
    );
    let mut net = Net::new(&device);
    let mut optim = AdamConfig::new().init();
    let mut records = Vec::with_capacity(steps);
    for _ in 0..steps {
        let err = net.forward(xs.clone()) - ys.clone();
        // Times the reciprocal: burn-autodiff 0.22.1's `div_scalar`
        // backward rounds `1 / divisor` to f32.
        let loss = (err.clone() * err)
            .sum()
            .mul_scalar(1.0 / batch_size as f64);
        let global = loss.clone().detach().all_reduce(world)?;
        let grads = GradientsParams::from_grads(loss.backward(), &net);
        let grads = all_reduce_gradients(world, &net, grads, GradientReduction::Sum)?;
        net = optim.step(0.05, net, grads);
        records.push(Step {
            loss: global
                .into_data()
                .convert::<f64>()
                .try_to_vec::<f64>()
                .expect("f64")[0],
            params: params_of(&net),
        });
    }
    Ok(records)
}
