//! The Galewsky et al. (2004) barotropically unstable jet on ruda-sphere's
//! shallow-water solver: integrates it for `--days` days and draws the
//! relative vorticity (and the height) as PNG maps, the picture of the
//! paper's figure 4 (vorticity at day 6: the jet rolled up into a train of
//! vortices over the northern mid-latitudes).
//!
//! ```text
//! cargo run --release -p ruda-cli --example galewsky -- --days 6 --out galewsky_day6.png
//! ```
//!
//! It prints each day's mass and energy (the mass is conserved to
//! round-off; the energy falls only by the hyperdiffusion) and the time per
//! step.

use std::path::PathBuf;
use std::time::Instant;

use burn_tensor::{DType, Device};
use clap::Parser;
use ruda_cli::picture::{Palette, write_maps};
use ruda_sphere::shallow_water::{Planet, SerialTransforms, ShallowWaterSolver};
use ruda_sphere::{LatitudeGrid, ShtSpec};

/// Command-line options.
#[derive(Parser, Debug)]
struct Args {
    /// Latitudes of the equiangular grid (lmax = nlat / 2).
    #[arg(long, default_value_t = 128)]
    nlat: usize,
    /// Days of model time.
    #[arg(long, default_value_t = 6.0)]
    days: f64,
    /// Time step in seconds.
    #[arg(long, default_value_t = 150.0)]
    dt: f64,
    /// The picture: vorticity (left) and height (right) at the end.
    #[arg(long, default_value = "galewsky_day6.png")]
    out: PathBuf,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let (nlat, nlon) = (args.nlat, 2 * args.nlat);
    let spec =
        ShtSpec::with_truncation(nlat, nlon, LatitudeGrid::Equiangular, Some(nlat / 2), None)?
            .with_csphase(false);
    let planet = Planet::default();
    let solver = ShallowWaterSolver::new(
        SerialTransforms::new(spec),
        args.dt,
        planet,
        &Device::flex(),
        DType::F64,
    )?;
    let mut state = solver.galewsky()?;
    let (m0, e0) = (solver.mass(state.clone())?, solver.energy(state.clone())?);
    let per_day = (86400.0 / args.dt).round() as usize;
    let total = (args.days * per_day as f64).round() as usize;
    println!(
        "Galewsky jet: {nlat} x {nlon} grid, lmax {}, dt {} s, {total} steps",
        spec.lmax(),
        args.dt
    );
    let started = Instant::now();
    let mut done = 0;
    while done < total {
        let n = per_day.min(total - done);
        state = solver.step(state, n)?;
        done += n;
        let (m, e) = (solver.mass(state.clone())?, solver.energy(state.clone())?);
        println!(
            "day {:5.2}: mass change {:+.1e}, energy change {:+.2e} ({:.2} ms per step)",
            done as f64 / per_day as f64,
            (m - m0) / m0,
            (e - e0) / e0,
            started.elapsed().as_secs_f64() * 1e3 / done as f64
        );
    }
    let fields = solver.to_grid(state)?;
    let vorticity: Vec<f64> = fields
        .clone()
        .narrow(0, 1, 1)
        .into_data()
        .try_to_vec::<f64>()
        .map_err(|e| format!("{e:?}"))?;
    let height: Vec<f64> = fields
        .narrow(0, 0, 1)
        .div_scalar(planet.gravity)
        .into_data()
        .try_to_vec::<f64>()
        .map_err(|e| format!("{e:?}"))?;
    // The paper's figure shades ±1.6e-4 s⁻¹.
    write_maps(
        &args.out,
        nlat,
        nlon,
        &[
            (&vorticity, Palette::Diverging { limit: 1.6e-4 }),
            (&height, Palette::sequential_for(&height)),
        ],
    )?;
    let (lo, hi) = vorticity
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &v| {
            (a.min(v), b.max(v))
        });
    println!(
        "wrote {} (vorticity {lo:.2e} .. {hi:.2e} 1/s, left; height, right)",
        args.out.display()
    );
    Ok(())
}
