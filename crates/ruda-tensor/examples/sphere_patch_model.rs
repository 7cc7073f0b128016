//! A small spatially decomposed model on a 2 × 2 process grid whose loss
//! and gradient match the single-rank run.
//!
//! Run with `cargo run -p ruda-tensor --example sphere_patch_model`.
//!
//! The field is `[channels, latitudes, longitudes]`, every rank holding a
//! polar × azimuth patch of it. The model applies a three-point latitude
//! stencil (which needs one halo row from each polar neighbour), scales each
//! channel by a learnable weight, squares, sums over longitudes after an
//! azimuth transpose, and gathers the result. The same code runs on a 1 × 1
//! grid, which is the serial model.

use burn_autodiff::Autodiff;
use burn_backend::ops::FloatTensorOps;
use burn_backend::tensor::FloatTensor;
use burn_backend::{AutodiffBackend, TensorData, TensorMetadata, read_sync};
use burn_flex::{Flex, FlexDevice};
use ruda_comm::{LocalCommunicator, LocalWorld};
use ruda_tensor::ProcessGrid;
use ruda_tensor::layout::compute_split_shapes;
use ruda_tensor::primitives::{self as p, PrimitiveError};

type Ad = Autodiff<Flex>;
type Grid = ProcessGrid<LocalCommunicator>;

const CHANNELS: usize = 4;
const NLAT: usize = 7; // splits unevenly over 2 polar ranks: [4, 3]
const NLON: usize = 10;

fn tensor(values: Vec<f64>, shape: &[usize]) -> FloatTensor<Ad> {
    Ad::float_from_data(TensorData::new(values, shape.to_vec()), &FlexDevice)
}

/// The loss of the model on `grid`, replicated on every rank.
fn model(
    grid: &Grid,
    field: FloatTensor<Ad>,
    weight: FloatTensor<Ad>,
) -> Result<FloatTensor<Ad>, PrimitiveError> {
    // The weight is replicated; entering per-rank computation it is
    // "copied to" both regions, so its gradient is summed over all ranks.
    let w =
        p::copy_to_azimuth_region::<Ad, _>(grid, p::copy_to_polar_region::<Ad, _>(grid, weight)?)?;
    // Each rank keeps its patch of the (replicated) input field.
    let x = p::scatter_to_polar_region::<Ad, _>(grid, field, -2)?;
    let x = p::scatter_to::<Ad, _>(grid.azimuth(), x, -1)?;
    let h = x.shape()[1];
    // Three-point stencil along latitude, zero beyond the poles.
    let xh = p::polar_halo_exchange::<Ad, _>(grid, x, 1)?;
    let row = |start| narrow_lat(xh.clone(), start, h);
    let stencil = Ad::float_add(
        Ad::float_mul_scalar(Ad::float_add(row(0), row(2)), 0.25.into()),
        Ad::float_mul_scalar(row(1), 0.5.into()),
    );
    let y = Ad::float_mul(stencil, w);
    let energy = Ad::float_mul(y.clone(), y);
    // Longitudes become whole, channels split, over the azimuth group.
    let lon_sizes = compute_split_shapes(NLON, grid.azimuth_size()).expect("enough longitudes");
    let t = p::distributed_transpose_azimuth::<Ad, _>(grid, energy, (0, -1), &lon_sizes)?;
    let per_lat = Ad::float_sum_dim(t, 2);
    // Gather channels (azimuth) and latitudes (polar): replicated everywhere.
    let ch_sizes = compute_split_shapes(CHANNELS, grid.azimuth_size()).expect("enough channels");
    let lat_sizes = compute_split_shapes(NLAT, grid.polar_size()).expect("enough latitudes");
    let all = p::gather_from::<Ad, _>(grid.azimuth(), per_lat, 0, &ch_sizes)?;
    let all = p::gather_from_polar_region::<Ad, _>(grid, all, -2, &lat_sizes)?;
    Ok(Ad::float_sum(all))
}

fn narrow_lat(x: FloatTensor<Ad>, start: usize, len: usize) -> FloatTensor<Ad> {
    use burn_backend::Slice;
    let full = Slice::new(0, None, 1);
    Ad::float_slice(
        x,
        &[
            full,
            Slice::new(start as isize, Some((start + len) as isize), 1),
            full,
        ],
    )
}

/// Loss and weight gradient on a `polar × azimuth` grid of threads.
fn run(polar: usize, azimuth: usize) -> (f64, Vec<f64>) {
    let field: Vec<f64> = (0..CHANNELS * NLAT * NLON)
        .map(|i| ((i * 37) % 11) as f64 / 11.0 - 0.4)
        .collect();
    let weight = vec![0.5, -1.0, 2.0, 1.5];
    let per_rank = LocalWorld::new(polar * azimuth)
        .run(|comm| {
            let grid = ProcessGrid::new(comm, polar, azimuth)?;
            let w = Ad::float_set_require_grad(tensor(weight.clone(), &[CHANNELS, 1, 1]), true);
            let loss = model(
                &grid,
                tensor(field.clone(), &[CHANNELS, NLAT, NLON]),
                w.clone(),
            )?;
            let value = read_sync(Flex::float_into_data(Ad::inner(loss.clone())))
                .unwrap()
                .try_to_vec::<f64>()
                .unwrap()[0];
            let grads = Ad::backward(loss);
            let g = Ad::grad(&w, &grads).expect("the weight has a gradient");
            let g = read_sync(Flex::float_into_data(g))
                .unwrap()
                .try_to_vec::<f64>()
                .unwrap();
            Ok::<_, PrimitiveError>((value, g))
        })
        .unwrap_or_else(|e| panic!("{polar}x{azimuth} run failed: {e}"));
    // The loss is replicated: every rank holds the same value and gradient.
    for r in &per_rank {
        assert_eq!(r, &per_rank[0]);
    }
    per_rank[0].clone()
}

fn main() {
    let (serial_loss, serial_grad) = run(1, 1);
    let (loss, grad) = run(2, 2);
    println!("loss      serial {serial_loss:.15}  2x2 {loss:.15}");
    for (c, (s, d)) in serial_grad.iter().zip(&grad).enumerate() {
        println!("dL/dw[{c}]  serial {s:+.15}  2x2 {d:+.15}");
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
