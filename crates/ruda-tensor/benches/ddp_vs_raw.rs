//! The data-parallel gradient reduction against the raw all-reduce of the
//! same bytes, measured in the same run (issue 18's model: an MLP
//! 512 → 2048 → 2048 → 512, 6.3 M f32 parameters, 25 MB of gradients).
//!
//! Run with `cargo bench -p ruda-tensor --bench ddp_vs_raw`. Each timed call
//! gets fresh gradient tensors (as a backward pass leaves them), built
//! outside the timer; time is the slowest rank's, median over iterations
//! ([`ruda_bench::time_calls`]).
//!
//! Columns: `raw`, the slice all-reduce in place on a buffer touched before
//! the timer; `tensor`, the tensor-layer all-reduce of one tensor of the
//! same size; `ddp`, `ddp::all_reduce_gradients` (sum) on the model's seven
//! gradients; and the ratios to `raw`.

use burn_core as burn;

use burn::module::Module;
use burn_nn::{Linear, LinearConfig};
use burn_optim::GradientsParams;
use burn_tensor::{Device, Tensor};
use ruda_bench::{Iterations, median_seconds};
use ruda_comm::{Communicator, LocalWorld, ReduceOp};
use ruda_tensor::ddp::{GradientReduction, all_reduce_gradients};
use ruda_tensor::{HostCollective, TensorExt};

#[derive(Module, Debug)]
struct Mlp {
    a: Linear,
    b: Linear,
    c: Linear,
}

fn mlp(widths: [usize; 4], device: &Device) -> Mlp {
    Mlp {
        a: LinearConfig::new(widths[0], widths[1]).init(device),
        b: LinearConfig::new(widths[1], widths[2]).init(device),
        c: LinearConfig::new(widths[2], widths[3]).init(device),
    }
}

/// Fresh gradients for every parameter of `m`, as a backward pass gives.
fn grads(m: &Mlp, device: &Device) -> GradientsParams {
    let mut g = GradientsParams::new();
    for l in [&m.a, &m.b, &m.c] {
        g.register::<2>(l.weight.id, Tensor::ones(l.weight.val().dims(), device));
        let b = l.bias.as_ref().expect("bias");
        g.register::<1>(b.id, Tensor::ones(b.val().dims(), device));
    }
    g
}

fn seconds<C: Communicator, S>(
    comm: &C,
    it: Iterations,
    prep: impl FnMut() -> S,
    f: impl FnMut(S),
) -> f64 {
    median_seconds(comm, it, prep, f).expect("harness")
}

fn main() {
    let quick = !std::env::args().any(|a| a == "--bench");
    let widths = if quick {
        [8, 16, 16, 8]
    } else {
        [512, 2048, 2048, 512]
    };
    let device = Device::flex();
    let params: usize = (0..3)
        .map(|i| widths[i] * widths[i + 1] + widths[i + 1])
        .sum();
    let bytes = params * 4;
    let it = if quick {
        Iterations {
            warmup: 1,
            iters: 3,
        }
    } else {
        Iterations::auto(bytes)
    };
    println!(
        "{:>6} {:>12} {:>10} {:>12} {:>10} {:>13} {:>10}",
        "ranks", "bytes", "raw (ms)", "tensor (ms)", "ddp (ms)", "tensor/raw", "ddp/raw"
    );
    for n in [2, 3] {
        let rows = LocalWorld::new(n)
            .run(|c| {
                let world = HostCollective::new(c);
                let comm = world.comm();
                let m = mlp(widths, &device);
                let mut buf = vec![1f32; params];
                let raw = seconds(
                    comm,
                    it,
                    || (),
                    |()| comm.all_reduce(&mut buf, ReduceOp::Sum).unwrap(),
                );
                let tensor = seconds(
                    comm,
                    it,
                    || Tensor::<1>::ones([params], &device),
                    |x| {
                        std::hint::black_box(x.all_reduce(&world).unwrap());
                    },
                );
                let ddp = seconds(
                    comm,
                    it,
                    || grads(&m, &device),
                    |g| {
                        let g =
                            all_reduce_gradients(&world, &m, g, GradientReduction::Sum).unwrap();
                        std::hint::black_box(g);
                    },
                );
                // The reduction is right: every gradient is n.
                let g =
                    all_reduce_gradients(&world, &m, grads(&m, &device), GradientReduction::Sum)
                        .unwrap();
                let w = g.get::<2>(m.b.weight.id).unwrap();
                assert!(w.into_data().iter::<f32>().all(|v| v == n as f32));
                Ok::<_, ()>((raw, tensor, ddp))
            })
            .unwrap();
        let (raw, tensor, ddp) = rows[0];
        println!(
            "{:>6} {:>12} {:>10.2} {:>12.2} {:>10.2} {:>13.2} {:>10.2}",
            n,
            bytes,
            raw * 1e3,
            tensor * 1e3,
            ddp * 1e3,
            tensor / raw,
            ddp / raw
        );
    }
}
