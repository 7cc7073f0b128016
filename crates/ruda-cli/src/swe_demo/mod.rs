//! `ruda demo` (the main job): a spherical Fourier neural operator learns
//! the shallow-water equations on the rotating sphere, trained on a polar
//! × azimuth grid of ranks and, alongside, serially; every step's loss and
//! parameters are compared, and the trained model is rolled out on the
//! Galewsky jet against the solver and against persistence.
//!
//! The data are torch-harmonics' `PdeDataset`: random band-limited states
//! made on the fly by ruda-sphere's shallow-water solver, each paired with
//! the state an hour later. The model is ruda-sfno's [`Sfno`] (residual
//! prediction), its loss the squared error integrated over the sphere,
//! Adam its optimizer. The distributed model runs ruda-sphere's
//! distributed transforms with every parameter replicated and gradients
//! summed over the grid (`ruda_tensor::ddp::step` with
//! `GradientReduction::Sum`).
//!
//! [`Sfno`]: ruda_sfno::Sfno

mod pictures;
pub mod trainer;

use std::io::Write;
use std::path::PathBuf;
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use burn_tensor::{DType, Device};
use indicatif::{ProgressBar, ProgressStyle};
use ruda_comm::{LocalWorld, WorldError};
use ruda_sfno::{SfnoConfig, SfnoError, ShallowWaterData, SphereMse};
use ruda_sphere::shallow_water::{SerialDomain, SerialTransforms};
use ruda_tensor::ProcessGrid;
use ruda_tensor::ddp::{GradientReduction, step};

use crate::demo::DemoError;
use trainer::{Batch, StepReport, Trainer};

/// What the shallow-water job trains, on how many ranks, and where its
/// pictures go.
#[derive(Clone, Debug, PartialEq)]
pub struct SweDemoConfig {
    /// Polar ranks.
    pub polar: usize,
    /// Azimuth ranks.
    pub azimuth: usize,
    /// Adam steps.
    pub steps: usize,
    /// Latitudes of the equiangular grid (poles included).
    pub nlat: usize,
    /// Longitudes.
    pub nlon: usize,
    /// Pairs per step.
    pub batch: usize,
    /// The model's channels.
    pub embed_dim: usize,
    /// The model's blocks.
    pub layers: usize,
    /// Adam's step size.
    pub lr: f64,
    /// Hours between a state and its target.
    pub hours: f64,
    /// Steps of the Galewsky rollout.
    pub rollout: usize,
    /// Where the pictures are written (created if missing).
    pub out_dir: PathBuf,
}

impl Default for SweDemoConfig {
    /// A 32 × 64 grid, 2 × 2 ranks, 200 steps, 16 channels, 4 blocks,
    /// batches of 4, one-hour steps, a 12-hour rollout: about 21 s on two
    /// cores.
    fn default() -> Self {
        SweDemoConfig {
            polar: 2,
            azimuth: 2,
            steps: 200,
            nlat: 32,
            nlon: 64,
            batch: 4,
            embed_dim: 16,
            layers: 4,
            lr: 3e-3,
            hours: 1.0,
            rollout: 12,
            out_dir: PathBuf::from("ruda-demo"),
        }
    }
}

impl SweDemoConfig {
    /// The model's configuration.
    pub fn model(&self) -> SfnoConfig {
        SfnoConfig {
            embed_dim: self.embed_dim,
            num_layers: self.layers,
            scale_factor: 2,
            residual_prediction: true,
            decoder_scale: 0.0,
            ..SfnoConfig::new(self.nlat, self.nlon)
        }
    }
}

/// The seed of the model's parameters (every run the same).
const MODEL_SEED: u64 = 2026;

/// The solver's own step, seconds (stable at the demo's truncation).
const SOLVER_DT: f64 = 600.0;

/// The largest relative difference between the distributed and the serial
/// run that counts as equal: f64 round-off of sums in another order,
/// grown over the steps, with margin.
pub const TOLERANCE: f64 = 1e-9;

/// How the job ended.
#[derive(Clone, Debug, PartialEq)]
pub struct SweVerdict {
    /// The largest relative difference of any step's loss or parameters.
    pub worst: f64,
    /// Whether it is within [`TOLERANCE`].
    pub agree: bool,
    /// The serial model's relative L2 error after each rollout step.
    pub model: Vec<f64>,
    /// Persistence's (the initial state kept).
    pub persistence: Vec<f64>,
    /// Whether the model's mean rollout error is below persistence's.
    pub beats_persistence: bool,
}

/// What a run's ranks (or the serial run) return at the end.
struct Finish {
    validation: f64,
    rollout: Vec<f64>,
    last: Vec<f64>,
}

fn rank_error(grid: &str, rank: usize, e: impl std::fmt::Display) -> DemoError {
    DemoError::Rank {
        grid: grid.into(),
        rank,
        message: e.to_string(),
    }
}

/// A step's report, or why the run stopped.
type Report = Result<StepReport, String>;

/// Train `trainer` on the batches from `rx`, reporting each step to `tx`
/// (when given; an error is reported too, so that the main thread stops
/// sending rather than wait), then validate and roll out.
fn train_loop(
    trainer: &mut Trainer,
    rx: &Receiver<Batch>,
    tx: Option<&Sender<Report>>,
    reduce: &mut trainer::Reduce<'_>,
    validation: &Batch,
    galewsky: &[Vec<f64>],
) -> Result<Finish, SfnoError> {
    while let Ok(batch) = rx.recv() {
        let report = trainer.step(&batch, reduce);
        if let Some(tx) = tx {
            let sent = tx.send(match &report {
                Ok(r) => Ok(r.clone()),
                Err(e) => Err(e.to_string()),
            });
            if sent.is_err() {
                break;
            }
        }
        report?;
    }
    let validation = trainer.loss(validation)?;
    let (rollout, last) = trainer.rollout(galewsky)?;
    Ok(Finish {
        validation,
        rollout,
        last,
    })
}

/// The largest |a − b| over the largest |b|.
fn rel_diff(a: &[f64], b: &[f64]) -> f64 {
    if a.len() != b.len() {
        return f64::INFINITY;
    }
    let scale = b
        .iter()
        .fold(0.0f64, |m, v| m.max(v.abs()))
        .max(f64::MIN_POSITIVE);
    a.iter()
        .zip(b)
        .fold(0.0f64, |m, (x, y)| m.max((x - y).abs()))
        / scale
}

fn make_batch(data: &ShallowWaterData, seeds: std::ops::Range<u64>) -> Result<Batch, SfnoError> {
    let (mut inputs, mut targets) = (Vec::new(), Vec::new());
    let size = seeds.end.saturating_sub(seeds.start) as usize;
    for seed in seeds {
        let (x, y) = data.sample(seed)?;
        inputs.extend(x);
        targets.extend(y);
    }
    Ok(Batch {
        size,
        inputs: Arc::new(inputs),
        targets: Arc::new(targets),
    })
}

/// Run the job on threads, writing its report to `out` and its pictures
/// to `cfg.out_dir`; returns the verdict.
///
/// # Errors
/// [`DemoError::Grid`] when the grid does not fit the model;
/// [`DemoError::Rank`] when a rank (or the serial run, reported as rank 0
/// of `1x1`) fails; [`DemoError::Io`] when writing fails.
pub fn run(cfg: &SweDemoConfig, out: &mut impl Write) -> Result<SweVerdict, DemoError> {
    let model_cfg = cfg.model();
    let (outer, inner) = model_cfg.specs().map_err(|e| grid_error(cfg, e))?;
    let grid_name = format!("{}x{}", cfg.polar, cfg.azimuth);
    for spec in [outer, inner] {
        ruda_sphere::SphereLayout::new(spec, (0, cfg.polar), (0, cfg.azimuth))
            .map_err(|e| grid_error(cfg, e))?;
    }
    let dt = cfg.hours * 3600.0;
    // The grid too small for the solver is a usage error, as for the model.
    let data = ShallowWaterData::new(cfg.nlat, cfg.nlon, dt, SOLVER_DT, &Device::flex())
        .map_err(|e| grid_error(cfg, e))?
        .with_jets(true);
    writeln!(
        out,
        "ruda demo: a spherical Fourier neural operator learns the shallow-water equations ({} h steps; data from ruda-sphere's solver, {} solver steps of {SOLVER_DT} s per pair)",
        cfg.hours,
        data.nsteps()
    )?;
    writeln!(
        out,
        "model: {} channels, {} blocks, {} × {} equiangular grid (internal {} × {} Legendre–Gauss, {} modes); Adam lr {}, batches of {}, {} steps",
        cfg.embed_dim,
        cfg.layers,
        cfg.nlat,
        cfg.nlon,
        inner.nlat(),
        inner.nlon(),
        inner.lmax(),
        cfg.lr,
        cfg.batch,
        cfg.steps
    )?;
    writeln!(
        out,
        "distributed on a {grid_name} polar × azimuth grid of threads (every parameter replicated, gradients summed over the grid); serial alongside"
    )?;
    let galewsky = Arc::new(
        data.galewsky(cfg.rollout)
            .map_err(|e| rank_error("data", 0, e))?,
    );
    let validation = make_batch(&data, 1 << 40..(1 << 40) + cfg.batch as u64)
        .map_err(|e| rank_error("data", 0, e))?;
    std::fs::create_dir_all(&cfg.out_dir)?;

    let ranks = cfg.polar * cfg.azimuth;
    let (serial_tx, serial_rx) = channel::<Batch>();
    let (serial_rep_tx, serial_rep_rx) = channel::<Report>();
    let (dist_rep_tx, dist_rep_rx) = channel::<Report>();
    let mut rank_txs = Vec::new();
    let mut rank_rxs = Vec::new();
    for _ in 0..ranks {
        let (tx, rx) = channel::<Batch>();
        rank_txs.push(tx);
        rank_rxs.push(Mutex::new(Some(rx)));
    }
    let started = Instant::now();
    let bar = ProgressBar::new(cfg.steps as u64);
    bar.set_style(
        ProgressStyle::with_template("{spinner} training [{bar:30}] {pos}/{len} steps {elapsed}")
            .expect("valid template"),
    );
    let (worst, losses, finishes) = std::thread::scope(|s| {
        let (g, v) = (galewsky.clone(), validation.clone());
        let serial = s.spawn(move || {
            let mut t = Trainer::new(&model_cfg, &SerialDomain, MODEL_SEED, cfg.lr)?;
            let mut reduce = |o: &mut burn_optim::ModuleOptimizer, lr, m, g| Ok(o.step(lr, m, g));
            train_loop(
                &mut t,
                &serial_rx,
                Some(&serial_rep_tx),
                &mut reduce,
                &v,
                &g,
            )
        });
        let model_cfg = cfg.model();
        let (g, v) = (galewsky.clone(), validation.clone());
        let rank_rxs = &rank_rxs;
        let dist = s.spawn(move || {
            LocalWorld::new(ranks).run(|comm| {
                let grid = ProcessGrid::new(comm, cfg.polar, cfg.azimuth)?;
                let rank = grid.polar_rank() * cfg.azimuth + grid.azimuth_rank();
                let rx = rank_rxs[rank]
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .take()
                    .expect("each rank takes its own receiver once");
                let mut t = Trainer::new(&model_cfg, &grid, MODEL_SEED, cfg.lr)?;
                let mut reduce = |o: &mut burn_optim::ModuleOptimizer, lr, m, g| {
                    Ok(step(grid.world(), o, lr, m, g, GradientReduction::Sum)?)
                };
                let tx = (rank == 0).then_some(&dist_rep_tx);
                let finish = train_loop(&mut t, &rx, tx, &mut reduce, &v, &g)?;
                Ok::<_, SfnoError>((finish, t.patch_ranges()))
            })
        });
        let mut worst = 0.0f64;
        let mut losses = Vec::new();
        let mut failed = None;
        for i in 0..cfg.steps {
            let seeds = (1 + (i * cfg.batch) as u64)..(1 + ((i + 1) * cfg.batch) as u64);
            let batch = match make_batch(&data, seeds) {
                Ok(b) => b,
                Err(e) => {
                    failed = Some(rank_error("data", 0, e));
                    break;
                }
            };
            // Every receiver gets the batch (no early stop: a rank left
            // without it would wait for ever); a run that has ended makes
            // its send fail, and then nothing more is sent or awaited.
            let mut sent = serial_tx.send(batch.clone()).is_ok();
            for tx in &rank_txs {
                sent &= tx.send(batch.clone()).is_ok();
            }
            if !sent {
                failed = Some(rank_error(&grid_name, 0, "a run ended early"));
                break;
            }
            let (sr, dr) = match (serial_rep_rx.recv(), dist_rep_rx.recv()) {
                (Ok(Ok(sr)), Ok(Ok(dr))) => (sr, dr),
                (Ok(Err(e)), _) => {
                    failed = Some(rank_error("1x1 (serial)", 0, e));
                    break;
                }
                (_, Ok(Err(e))) => {
                    failed = Some(rank_error(&grid_name, 0, e));
                    break;
                }
                _ => {
                    failed = Some(rank_error(&grid_name, 0, "a run ended early"));
                    break;
                }
            };
            let loss_diff = (dr.loss - sr.loss).abs() / sr.loss.abs().max(f64::MIN_POSITIVE);
            let param_diff = rel_diff(&dr.params, &sr.params);
            worst = worst.max(loss_diff).max(param_diff);
            if let Err(e) = writeln!(
                out,
                "step {i:>4}  loss {:.6e} (serial {:.6e})  Δloss {loss_diff:.1e}  Δparams {param_diff:.1e}",
                dr.loss, sr.loss
            ) {
                failed = Some(e.into());
                break;
            }
            losses.push((dr.loss, sr.loss));
            bar.inc(1);
        }
        drop(serial_tx);
        drop(rank_txs);
        // A run that stopped has its error reported above, or its panic
        // here; either way the other run's receivers are closed, so it
        // ends too.
        let serial = serial.join();
        let dist = dist.join();
        if let Some(e) = failed {
            return Err(e);
        }
        let serial = serial.map_err(|_| rank_error("1x1 (serial)", 0, "panicked"))?;
        let dist = dist.map_err(|_| rank_error(&grid_name, 0, "the world panicked"))?;
        Ok((worst, losses, (serial, dist)))
    })?;
    bar.finish_and_clear();
    let (serial, dist) = finishes;
    let serial = serial.map_err(|e| rank_error("1x1 (serial)", 0, e))?;
    let dist = match dist {
        Ok(d) => d,
        Err(WorldError::Rank { rank, error }) => return Err(rank_error(&grid_name, rank, error)),
        Err(WorldError::Empty) => return Err(rank_error(&grid_name, 0, "no ranks")),
    };
    let eval_worst = dist.iter().fold(0.0f64, |m, (f, _)| {
        m.max(rel_diff(&f.rollout, &serial.rollout))
            .max((f.validation - serial.validation).abs() / serial.validation)
    });
    let worst = worst.max(eval_worst);
    if losses.len() != cfg.steps {
        return Err(rank_error(&grid_name, 0, "the run stopped early"));
    }
    // The distributed last prediction, assembled from the ranks' patches,
    // equals the serial one.
    let (nlat, nlon) = (cfg.nlat, cfg.nlon);
    let mut assembled = vec![0.0; 3 * nlat * nlon];
    for (finish, (rows, cols)) in &dist {
        let (h, w) = (rows.len(), cols.len());
        for f in 0..3 {
            for (i, r) in rows.clone().enumerate() {
                for (j, c) in cols.clone().enumerate() {
                    assembled[(f * nlat + r) * nlon + c] = finish.last[(f * h + i) * w + j];
                }
            }
        }
    }
    let worst = worst.max(rel_diff(&assembled, &serial.last));
    let truth = galewsky.last().expect("the rollout's states");
    // Persistence (the state kept) by the same loss over the sphere, serially.
    let mse = SphereMse::new(Arc::new(SerialTransforms::new(outer)));
    let whole = |v: &[f64], b: usize| {
        ruda_sfno::patch(
            v,
            [b, 3, nlat, nlon],
            0..nlat,
            0..nlon,
            &Device::flex(),
            DType::F64,
        )
    };
    let persistence = galewsky[1..]
        .iter()
        .map(|g| mse.relative_l2(whole(&galewsky[0], 1), whole(g, 1)))
        .collect::<Result<Vec<f64>, _>>()
        .map_err(|e| rank_error("persistence", 0, e))?;
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
    let beats = mean(&serial.rollout) < mean(&persistence);
    let verdict = SweVerdict {
        worst,
        agree: worst <= TOLERANCE,
        model: serial.rollout.clone(),
        persistence,
        beats_persistence: beats,
    };
    let persistence_loss = mse
        .local(
            whole(&validation.inputs, validation.size),
            whole(&validation.targets, validation.size),
        )
        .and_then(|l| mse.total(l))
        .map_err(|e| rank_error("persistence", 0, e))?;
    writeln!(
        out,
        "trained {} steps in {:.1} s; validation loss {:.4e} on held-out states (persistence: {:.4e})",
        cfg.steps,
        started.elapsed().as_secs_f64(),
        serial.validation,
        persistence_loss
    )?;
    writeln!(
        out,
        "Galewsky jet rollout, relative L2 error per {} h step:",
        cfg.hours
    )?;
    writeln!(out, "{:>6} {:>12} {:>12}", "hours", "model", "persistence")?;
    for (k, (m, p)) in verdict.model.iter().zip(&verdict.persistence).enumerate() {
        writeln!(
            out,
            "{:>6} {m:>12.4e} {p:>12.4e}",
            (k + 1) as f64 * cfg.hours
        )?;
    }
    let written = pictures::draw(cfg, &losses, &verdict, truth, &serial.last, &data)
        .map_err(|e| rank_error("pictures", 0, e))?;
    for path in written {
        writeln!(out, "wrote {}", path.display())?;
    }
    writeln!(
        out,
        "verdict: distributed {} serial (largest relative difference {:.1e}, tolerance {:.0e}); the model {} persistence on the rollout (mean error {:.3e} vs {:.3e})",
        if verdict.agree {
            "EQUALS"
        } else {
            "DIFFERS FROM"
        },
        worst,
        TOLERANCE,
        if beats { "BEATS" } else { "does NOT beat" },
        mean(&verdict.model),
        mean(&verdict.persistence)
    )?;
    Ok(verdict)
}

fn grid_error(cfg: &SweDemoConfig, e: impl std::fmt::Display) -> DemoError {
    DemoError::Grid {
        polar: cfg.polar,
        azimuth: cfg.azimuth,
        channels: 3,
        nlat: cfg.nlat,
        nlon: cfg.nlon,
        reason: e.to_string(),
    }
}
