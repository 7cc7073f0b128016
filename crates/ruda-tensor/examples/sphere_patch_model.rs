//! A small spatially decomposed model on a 2 × 2 process grid whose loss
//! and gradient match the single-rank run, written with the tensor methods
//! of `ruda_tensor::TensorExt` on Burn's `Tensor` (no type annotations).
//!
//! Run with `cargo run -p ruda-tensor --example sphere_patch_model` (4 thread
//! ranks, a 2 × 2 grid; `RUDA_WORLD_SIZE=6` gives 2 × 3), or built with
//! feature `mpi` under `mpirun -n 4` (one rank per process): the same
//! program, launched by `ruda_comm::Launch`.
//!
//! The field is `[channels, latitudes, longitudes]`, every rank holding a
//! polar × azimuth patch of it. The model applies a three-point latitude
//! stencil (which needs one halo row from each polar neighbour), scales each
//! channel by a learnable weight, squares, sums over longitudes after an
//! azimuth transpose, and gathers the result. The same code runs on a 1 × 1
//! grid, which is the serial model. Everything stays in f64.

use burn_tensor::{DType, Device, Tensor, TensorData};
use ruda_comm::{Communicator, Launch, LocalWorld};
use ruda_tensor::TransposeAxes;
use ruda_tensor::{Error, ProcessGrid, TensorExt};

const CHANNELS: usize = 4;
const NLAT: usize = 7; // splits unevenly over 2 polar ranks: [4, 3]
const NLON: usize = 10;

/// The loss of the model on `grid`, replicated on every rank.
fn model<G: ruda_tensor::Group>(
    grid: &ProcessGrid<G>,
    field: Tensor<3>,
    weight: Tensor<3>,
) -> Result<Tensor<1>, Error> {
    let (polar, azimuth) = (grid.polar(), grid.azimuth());
    // The weight is replicated; entering per-rank computation it is
    // "copied to" both groups, so its gradient is summed over all ranks.
    let w = weight.copy_to(polar)?.copy_to(azimuth)?;
    // Each rank keeps its patch of the (replicated) input field.
    let x = field.scatter_to(polar, -2)?.scatter_to(azimuth, -1)?;
    let h = x.dims()[1];
    // Three-point stencil along latitude, zero beyond the poles.
    let xh = x.halo_exchange(polar, -2, 1)?;
    let row = |start: usize| xh.clone().narrow(1, start, h);
    let stencil = (row(0) + row(2)) * 0.25 + row(1) * 0.5;
    let y = stencil * w;
    let energy = y.clone() * y;
    // Longitudes become whole, channels split, over the azimuth group.
    let per_lat = energy
        .transpose_over(
            azimuth,
            TransposeAxes {
                split_in: -1,
                split_out: 0,
            },
        )?
        .sum_dim(2);
    // Gather channels (azimuth) and latitudes (polar): replicated everywhere.
    let all = per_lat.gather_from(azimuth, 0)?.gather_from(polar, -2)?;
    Ok(all.sum())
}

/// One rank's loss and weight gradient on a `polar × azimuth` grid.
fn rank_run<C: Communicator + std::fmt::Debug + 'static>(
    comm: C,
    polar: usize,
    azimuth: usize,
) -> Result<(f64, Vec<f64>), Error> {
    let field: Vec<f64> = (0..CHANNELS * NLAT * NLON)
        .map(|i| ((i * 37) % 11) as f64 / 11.0 - 0.4)
        .collect();
    let weight = vec![0.5, -1.0, 2.0, 1.5];
    let grid = ProcessGrid::new(comm, polar, azimuth)?;
    // f64 stays f64: name the dtype (plain `from_data` would cast to the
    // device's default float).
    let device = Device::flex().autodiff();
    let f64_on = (&device, DType::F64);
    let w =
        Tensor::<3>::from_data(TensorData::new(weight, [CHANNELS, 1, 1]), f64_on).require_grad();
    let x = Tensor::<3>::from_data(TensorData::new(field, [CHANNELS, NLAT, NLON]), f64_on);
    let loss = model(&grid, x, w.clone())?;
    let value = loss.clone().into_data().try_to_vec::<f64>().unwrap()[0];
    let grads = loss.backward();
    let g = w.grad(&grads).expect("the weight has a gradient");
    Ok((value, g.into_data().try_to_vec::<f64>().unwrap()))
}

fn main() {
    // The serial model: one rank, in this process.
    let (serial_loss, serial_grad) = LocalWorld::new(1)
        .run(|comm| rank_run(comm, 1, 1))
        .expect("the serial run")
        .remove(0);
    // The distributed one: threads, or one process per rank under mpirun.
    let per_rank = Launch::new()
        .threads(4)
        .run(|comm| {
            let n = comm.size();
            let polar = if n % 2 == 0 { 2 } else { 1 };
            rank_run(comm, polar, n / polar).map(|r| (n, r))
        })
        .unwrap_or_else(|e| panic!("the distributed run failed: {e}"));
    // The loss is replicated: every rank holds the same value and gradient.
    for r in &per_rank {
        assert_eq!(r, &per_rank[0]);
    }
    let (n, (loss, grad)) = per_rank[0].clone();
    let shape = if n % 2 == 0 {
        format!("2x{}", n / 2)
    } else {
        format!("1x{n}")
    };
    println!("loss      serial {serial_loss:.15}  {shape} {loss:.15}");
    for (c, (s, d)) in serial_grad.iter().zip(&grad).enumerate() {
        println!("dL/dw[{c}]  serial {s:+.15}  {shape} {d:+.15}");
    }
    let worst = serial_grad
        .iter()
        .zip(&grad)
        .map(|(s, d)| (s - d).abs())
        .fold((loss - serial_loss).abs(), f64::max);
    assert!(
        worst < 1e-12,
        "distributed and serial disagree by {worst:e}"
    );
    println!("distributed and serial agree to {worst:.1e}");
}
