//! The job's pictures: maps of the rollout's last state (truth, model,
//! difference) and the curves of the loss and the rollout error.

use std::path::PathBuf;

use ruda_sfno::ShallowWaterData;

use super::{SweDemoConfig, SweVerdict};
use crate::picture::{Palette, write_maps};
use crate::plot::lines;

/// Field `f` of `[3, nlat, nlon]` values, in physical units.
fn field(v: &[f64], f: usize, n: usize, data: &ShallowWaterData, scale: f64) -> Vec<f64> {
    let (mean, std) = data.normalisation();
    v[f * n..(f + 1) * n]
        .iter()
        .map(|x| (x * std[f] + mean[f]) * scale)
        .collect()
}

/// Draw the pictures into `cfg.out_dir`; returns the files written.
///
/// # Errors
/// The first drawing or writing error, as text.
pub(super) fn draw(
    cfg: &SweDemoConfig,
    losses: &[(f64, f64)],
    verdict: &SweVerdict,
    truth: &[f64],
    prediction: &[f64],
    data: &ShallowWaterData,
) -> Result<Vec<PathBuf>, String> {
    let (nlat, nlon) = (cfg.nlat, cfg.nlon);
    let n = nlat * nlon;
    let g = data.solver().planet().gravity;
    let mut written = Vec::new();
    for (f, name, scale) in [(1, "vorticity", 1.0), (0, "height", 1.0 / g)] {
        let t = field(truth, f, n, data, scale);
        let p = field(prediction, f, n, data, scale);
        let d: Vec<f64> = p.iter().zip(&t).map(|(a, b)| a - b).collect();
        let palette = if f == 1 {
            Palette::diverging_for(&t)
        } else {
            Palette::sequential_for(&t)
        };
        let path = cfg.out_dir.join(format!("rollout_{name}.png"));
        write_maps(
            &path,
            nlat,
            nlon,
            &[
                (&t, palette),
                (&p, palette),
                (&d, Palette::diverging_for(&d)),
            ],
        )
        .map_err(|e| e.to_string())?;
        written.push(path);
    }
    let log = |v: f64| v.max(f64::MIN_POSITIVE).log10();
    let path = cfg.out_dir.join("loss.svg");
    lines(
        &[
            (
                format!("distributed {}x{}", cfg.polar, cfg.azimuth),
                losses
                    .iter()
                    .enumerate()
                    .map(|(i, l)| (i as f64, log(l.0)))
                    .collect(),
            ),
            (
                "serial".into(),
                losses
                    .iter()
                    .enumerate()
                    .map(|(i, l)| (i as f64, log(l.1)))
                    .collect(),
            ),
        ],
        "training loss (squared error over the sphere, normalised fields)",
        "step",
        "log10 loss",
        &path,
    )?;
    written.push(path);
    let path = cfg.out_dir.join("rollout_error.svg");
    let hours = |k: usize| (k + 1) as f64 * cfg.hours;
    lines(
        &[
            (
                "SFNO".into(),
                verdict
                    .model
                    .iter()
                    .enumerate()
                    .map(|(k, e)| (hours(k), *e))
                    .collect(),
            ),
            (
                "persistence".into(),
                verdict
                    .persistence
                    .iter()
                    .enumerate()
                    .map(|(k, e)| (hours(k), *e))
                    .collect(),
            ),
        ],
        "Galewsky jet: relative L2 error of the rollout",
        "hours",
        "relative L2 error",
        &path,
    )?;
    written.push(path);
    Ok(written)
}
