//! Step time of data-parallel training with the gradients reduced after
//! the backward pass (`ddp::all_reduce_gradients`) and during it
//! (`ddp::Overlap`), and the share of the communication the overlap hides.
//!
//! Two replicas of one model (a stack of `--layers` Linear layers of
//! `--width`, tanh between) train side by side from the same start on the
//! same rows, one step of each in turn; every step is timed (forward,
//! backward, reduction), and the end checks that both replicas hold the
//! same parameters bit for bit. Rank 0 prints medians:
//!
//! - `plain`: compute (forward + backward) and the reduction after it;
//! - `overlap`: the step, and the communication left exposed after the
//!   backward pass;
//! - hidden = (plain step − overlapped step) / plain reduction.
//!
//! Communication must cost something for this to mean anything: run it
//! across the namespace cluster's two hosts with a shaped link
//! (`scripts/cluster.sh`), one rank per host:
//!
//! ```text
//! cargo build --release -p ruda-cli --features mpi --example ddp_overlap
//! sudo scripts/cluster.sh up 2
//! sudo scripts/cluster.sh shape ruda-h1 1gbit; sudo scripts/cluster.sh shape ruda-h2 1gbit
//! sudo scripts/cluster.sh mpirun -n 2 -x RAYON_NUM_THREADS=1 \
//!     target/release/examples/ddp_overlap --layers 8 --width 512 --batch 512
//! ```
//!
//! Without `mpirun` the ranks are threads of one process (`--ranks`).

use burn_core as burn;

use burn::module::{Module, ModuleVisitor, Param};
use burn_nn::{Linear, LinearConfig};
use burn_optim::{GradientsParams, SgdConfig};
use burn_tensor::{Device, Tensor};
use clap::Parser;
use ruda_tensor::ddp::{
    GradientReduction, Overlap, all_reduce_gradients, broadcast_module, check_replicas,
};
use ruda_tensor::prelude::*;
use std::time::{Duration, Instant};

/// Command-line options.
#[derive(Parser, Clone, Debug)]
#[command(about = "Step time of data-parallel training with and without overlap")]
struct Opts {
    /// Linear layers of `width` × `width`.
    #[arg(long, default_value_t = 8)]
    layers: usize,
    /// The layers' width.
    #[arg(long, default_value_t = 512)]
    width: usize,
    /// Rows per rank.
    #[arg(long, default_value_t = 256)]
    batch: usize,
    /// Timed steps of each kind (after 2 untimed ones).
    #[arg(long, default_value_t = 10)]
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

/// Every float value of the model, as bits.
fn bits(m: &Stack) -> Vec<u32> {
    struct Read<'a>(&'a mut Vec<u32>);
    impl ModuleVisitor for Read<'_> {
        fn visit_float<const D: usize>(&mut self, p: &Param<Tensor<D>>) {
            let v = p.val().into_data().try_to_vec::<f32>().unwrap_or_default();
            self.0.extend(v.into_iter().map(f32::to_bits));
        }
    }
    let mut out = Vec::new();
    m.visit(&mut Read(&mut out));
    out
}

fn median(mut v: Vec<Duration>) -> f64 {
    v.sort();
    v.get(v.len() / 2).map_or(0.0, |d| d.as_secs_f64() * 1e3)
}

fn rank_main(comm: AnyCommunicator, opts: &Opts) -> Result<Option<String>, Error> {
    let world = HostCollective::new(comm);
    let device = Device::flex().autodiff();
    let stack = Stack {
        layers: (0..opts.layers)
            .map(|_| LinearConfig::new(opts.width, opts.width).init(&device))
            .collect(),
    };
    let stack = broadcast_module(&world, stack, 0)?;
    let (mut plain, mut overlapped) = (stack.clone(), stack);
    let mut optim_plain = SgdConfig::new().init();
    let mut optim_overlap = SgdConfig::new().init();
    let mut overlap = Overlap::new(&world)?;
    let how = GradientReduction::Mean;
    let lr = 1e-3;
    let x = Tensor::<2>::ones([opts.batch, opts.width], &device)
        .mul_scalar(0.01 * (world.rank() + 1) as f64);
    let (mut compute, mut reduce, mut plain_step) = (Vec::new(), Vec::new(), Vec::new());
    let (mut overlap_step, mut exposed, mut backward) = (Vec::new(), Vec::new(), Vec::new());
    let mut during = Vec::new();
    for s in 0..opts.steps + 2 {
        world.barrier()?;
        let t0 = Instant::now();
        let loss = plain.forward(x.clone()).powi_scalar(2).mean();
        let grads = GradientsParams::from_grads(loss.backward(), &plain);
        let t1 = Instant::now();
        let grads = all_reduce_gradients(&world, &plain, grads, how)?;
        let t2 = Instant::now();
        plain = optim_plain.step(lr, plain, grads);

        world.barrier()?;
        let t3 = Instant::now();
        let step = overlap.attach(&overlapped, how)?;
        let loss = step.module().forward(x.clone()).powi_scalar(2).mean();
        let grads = step.backward(loss)?;
        let t4 = Instant::now();
        overlapped = optim_overlap.step(lr, overlapped, grads);
        if s >= 2 {
            compute.push(t1 - t0);
            reduce.push(t2 - t1);
            plain_step.push(t2 - t0);
            overlap_step.push(t4 - t3);
            let r = overlap.report().expect("a report after a step");
            exposed.push(r.exposed);
            backward.push(r.backward);
            during.push((r.reduced_during_backward, r.buckets));
        }
    }
    check_replicas(&world, &overlapped)?;
    let same = bits(&plain) == bits(&overlapped);
    if world.rank() != 0 {
        return Ok(None);
    }
    let (plain_ms, overlap_ms, reduce_ms) = (
        median(plain_step),
        median(overlap_step),
        median(reduce.clone()),
    );
    let hidden = if reduce_ms > 0.0 {
        (plain_ms - overlap_ms) / reduce_ms
    } else {
        0.0
    };
    let (d, b) = during.last().copied().unwrap_or((0, 0));
    Ok(Some(format!(
        "{} ranks, {} layers of {}x{} ({:.2} M f32 parameters), {} rows per rank, medians of {} steps\n\
         plain:   step {:.1} ms = compute {:.1} ms + reduction {:.1} ms\n\
         overlap: step {:.1} ms (backward {:.1} ms, exposed communication {:.1} ms; {} of {} buckets reduced during the backward pass)\n\
         hidden: {:.0} % of the reduction; parameters equal bit for bit: {}",
        world.size(),
        opts.layers,
        opts.width,
        opts.width,
        (opts.layers * (opts.width * opts.width + opts.width)) as f64 / 1e6,
        opts.batch,
        opts.steps,
        plain_ms,
        median(compute),
        reduce_ms,
        overlap_ms,
        median(backward),
        median(exposed),
        d,
        b,
        hidden * 100.0,
        same
    )))
}

fn main() -> std::process::ExitCode {
    let opts = Opts::parse();
    let launch = Launch::new().threads(opts.ranks);
    match launch.run(|comm| rank_main(comm, &opts)) {
        Ok(lines) => {
            for l in lines.into_iter().flatten() {
                println!("{l}");
            }
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("ddp_overlap: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
