//! Memory per rank of data-parallel training with Adam, plain and sharded
//! (ZeRO stages 1 and 2, `ruda_tensor::ddp::Sharded`), for a model of
//! about 100 million f32 parameters (24 Linear layers of 2048 × 2048).
//!
//! Each rank trains `--steps` steps on its own rows and prints its
//! process's peak resident memory (`VmHWM`, read after training) and its
//! optimizer state (tensors and bytes, from Burn's optimizer record). Run it under `mpirun` so
//! that each rank is a process of its own:
//!
//! ```text
//! cargo build --release -p ruda-cli --features mpi --example zero_memory
//! for n in 1 2 4; do for s in plain 1 2; do
//!   mpirun -n $n --oversubscribe --bind-to none target/release/examples/zero_memory --stage $s
//! done; done
//! ```
//!
//! On threads (without `mpirun`) the ranks share one process, so the peak
//! printed is the whole process's.

use burn_core as burn;

use burn::module::Module;
use burn_nn::{Linear, LinearConfig};
use burn_optim::{AdamConfig, GradientsParams};
use burn_tensor::{Device, Tensor};
use clap::Parser;
use ruda_tensor::ddp::{GradientReduction, Sharded, ZeroStage, broadcast_module, check_replicas};
use ruda_tensor::prelude::*;

/// Command-line options.
#[derive(Parser, Clone, Debug)]
#[command(about = "Memory per rank of plain and sharded (ZeRO) data-parallel training")]
struct Opts {
    /// `plain`, `1` or `2` (ZeRO stage).
    #[arg(long, default_value = "2")]
    stage: String,
    /// Linear layers of `width` × `width`.
    #[arg(long, default_value_t = 24)]
    layers: usize,
    /// The layers' width.
    #[arg(long, default_value_t = 2048)]
    width: usize,
    /// Optimizer steps.
    #[arg(long, default_value_t = 2)]
    steps: usize,
    /// Thread ranks when not started by mpirun.
    #[arg(long, default_value_t = 2)]
    ranks: usize,
}

/// A stack of square Linear layers.
#[derive(Module, Debug)]
struct Stack {
    layers: Vec<Linear>,
}

impl Stack {
    fn forward(&self, mut x: Tensor<2>) -> Tensor<2> {
        for l in &self.layers {
            x = l.forward(x).tanh();
        }
        x
    }
}

/// This process's `VmHWM` (peak resident memory) in MiB, from
/// `/proc/self/status` (0 where there is none).
fn peak_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<f64>().ok())
        })
        .map_or(0.0, |kb| kb / 1024.0)
}

fn rank_main(comm: AnyCommunicator, opts: &Opts) -> Result<String, Error> {
    let world = HostCollective::new(comm);
    let device = Device::flex().autodiff();
    let stack = Stack {
        layers: (0..opts.layers)
            .map(|_| LinearConfig::new(opts.width, opts.width).init(&device))
            .collect(),
    };
    let mut model = broadcast_module(&world, stack, 0)?;
    let params = model.num_params();
    let mut optim = AdamConfig::new().init();
    let stage = match opts.stage.as_str() {
        "1" => Some(ZeroStage::One),
        "2" => Some(ZeroStage::Two),
        "plain" => None,
        other => {
            return Err(Error::InvalidSetting {
                op: ruda_tensor::TensorOp::DdpSharded,
                setting: "--stage (plain, 1 or 2)",
                value: other.parse().unwrap_or(f64::NAN),
                domain: "plain, 1, 2",
            });
        }
    };
    for _ in 0..opts.steps {
        let x = Tensor::<2>::ones([2, opts.width], &device)
            .mul_scalar(0.01 * (world.rank() + 1) as f64);
        let loss = model.forward(x).powi_scalar(2).mean();
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        let how = GradientReduction::Mean;
        model = match stage {
            Some(stage) => Sharded::new(stage).step(&world, &mut optim, 1e-3, model, grads, how)?,
            None => ruda_tensor::ddp::step(&world, &mut optim, 1e-3, model, grads, how)?,
        };
    }
    check_replicas(&world, &model)?;
    // Before the record below copies the state.
    let peak = peak_mib();
    let record = optim.to_record();
    let tensors = record.len();
    let state_bytes = record.into_bytes().map(|b| b.len()).unwrap_or(0);
    Ok(format!(
        "rank {} of {}: stage {}, {:.1} M parameters, optimizer state {} tensors {:.0} MiB, peak resident {:.0} MiB",
        world.rank(),
        world.size(),
        opts.stage,
        params as f64 / 1e6,
        tensors,
        state_bytes as f64 / (1 << 20) as f64,
        peak
    ))
}

fn main() -> std::process::ExitCode {
    let opts = Opts::parse();
    let launch = Launch::new().threads(opts.ranks);
    match launch.run(|comm| rank_main(comm, &opts)) {
        Ok(lines) => {
            for l in lines {
                println!("{l}");
            }
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("zero_memory: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
