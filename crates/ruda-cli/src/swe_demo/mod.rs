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
//! Under `mpirun` (feature `mpi`), `run_mpi` runs the same job with one
//! rank per process.
//!
//! [`Sfno`]: ruda_sfno::Sfno

#[cfg(feature = "mpi")]
mod mpi;
mod pictures;
pub mod progress;
pub mod trainer;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{Receiver, channel};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use burn_tensor::{DType, Device};
use indicatif::{ProgressBar, ProgressStyle};
use ruda_comm::{LocalWorld, WorldError};
use ruda_sfno::{SfnoConfig, SfnoError, ShallowWaterData, SphereMse};
use ruda_sphere::shallow_water::{SerialDomain, SerialTransforms};
use ruda_tensor::ddp::{GradientReduction, hybrid_step};
use ruda_tensor::{Group, HostCollective, HybridGrid};

use crate::demo::DemoError;
#[cfg(feature = "mpi")]
pub use mpi::run_mpi;
use trainer::{Batch, StepReport, Trainer};

/// What the shallow-water job trains, on how many ranks, and where its
/// pictures go.
#[derive(Clone, Debug, PartialEq)]
pub struct SweDemoConfig {
    /// Data-parallel replicas of the polar × azimuth grid, each training
    /// on its share of every batch.
    pub replicas: usize,
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
    /// Write a checkpoint to `out_dir/checkpoint` every this many steps
    /// and after the last (0: never).
    pub checkpoint_every: usize,
    /// Go on from the checkpoint in `out_dir/checkpoint` (on any grid of
    /// ranks) instead of starting afresh.
    pub resume: bool,
    /// Keep the training pairs under this folder and read them back from
    /// there in later runs (`ruda_sfno::SampleCache`).
    pub sample_cache: Option<PathBuf>,
}

impl Default for SweDemoConfig {
    /// A 32 × 64 grid, 2 × 2 ranks (one replica), 200 steps, 16 channels,
    /// 4 blocks, batches of 4, one-hour steps, a 12-hour rollout, no
    /// checkpoints: about 21 s on two cores.
    fn default() -> Self {
        SweDemoConfig {
            replicas: 1,
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
            checkpoint_every: 0,
            resume: false,
            sample_cache: None,
        }
    }
}

impl SweDemoConfig {
    /// The checkpoint folder: `out_dir/checkpoint`.
    pub fn checkpoint_dir(&self) -> PathBuf {
        self.out_dir.join("checkpoint")
    }

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

/// How a run writes its checkpoint into a folder.
type Save<'a> = dyn FnMut(&Trainer, &Path) -> Result<(), SfnoError> + 'a;

/// Train `trainer` on the batches from `rx`, writing a checkpoint after
/// the steps that ask for one, and handing each step's report to `tx`
/// (when given; an error is reported too, so that the main thread stops
/// sending rather than wait; `tx` says whether anyone still listens),
/// then validate and roll out.
#[allow(clippy::too_many_arguments)]
fn train_loop(
    trainer: &mut Trainer,
    rx: &Receiver<Batch>,
    tx: Option<&dyn Fn(Report) -> bool>,
    reduce: &mut trainer::Reduce<'_>,
    save: &mut Save<'_>,
    validation: &Batch,
    galewsky: &[Vec<f64>],
) -> Result<Finish, SfnoError> {
    while let Ok(batch) = rx.recv() {
        let mut report = trainer.step(&batch, reduce);
        if let (Ok(_), Some(dir)) = (&report, &batch.save)
            && let Err(e) = save(trainer, dir)
        {
            report = Err(e);
        }
        if let Some(tx) = tx {
            let listened = tx(match &report {
                Ok(r) => Ok(r.clone()),
                Err(e) => Err(e.to_string()),
            });
            if !listened {
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

/// The largest |a − b| over the largest |b|; infinite when the lengths
/// differ or a value is NaN.
fn rel_diff(a: &[f64], b: &[f64]) -> f64 {
    // A NaN anywhere is no agreement (`f64::max` would drop it).
    if a.len() != b.len() || a.iter().chain(b).any(|v| v.is_nan()) {
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
        save: None,
    })
}

/// Each replica's samples of a batch of `batch`: consecutive ranges, the
/// first `batch % replicas` one sample larger (a replica may have none).
fn shares(batch: usize, replicas: usize) -> Vec<std::ops::Range<usize>> {
    let mut start = 0;
    (0..replicas)
        .map(|r| {
            let n = batch / replicas + usize::from(r < batch % replicas);
            start += n;
            start - n..start
        })
        .collect()
}

/// What both launches share before training: the checked settings, the
/// data, the resumed record, and the report's first lines.
struct Setup {
    outer: ruda_sphere::ShtSpec,
    grid_name: String,
    ranks: usize,
    ckpt: PathBuf,
    resumed: Option<progress::Progress>,
    start: usize,
    data: ShallowWaterData,
    shares: Vec<std::ops::Range<usize>>,
    galewsky: Arc<Vec<Vec<f64>>>,
    validation: Batch,
}

impl Setup {
    /// Check `cfg`, read the checkpoint record when resuming, make the
    /// Galewsky states and the validation batch, and (on the lead) write
    /// the header naming how the ranks run (`threads`, `MPI processes`).
    fn new(
        cfg: &SweDemoConfig,
        how: &str,
        lead: bool,
        out: &mut impl Write,
    ) -> Result<Setup, DemoError> {
        let model_cfg = cfg.model();
        let (outer, inner) = model_cfg.specs().map_err(|e| grid_error(cfg, e))?;
        if cfg.replicas == 0 || cfg.batch == 0 {
            return Err(grid_error(
                cfg,
                "at least one replica and one sample per batch",
            ));
        }
        let (r, p, a) = (cfg.replicas, cfg.polar, cfg.azimuth);
        let grid_name = if r == 1 {
            format!("{p}x{a}")
        } else {
            format!("{r}x{p}x{a}")
        };
        for spec in [outer, inner] {
            ruda_sphere::SphereLayout::new(spec, (0, p), (0, a)).map_err(|e| grid_error(cfg, e))?;
        }
        let ranks = r
            .checked_mul(p)
            .and_then(|x| x.checked_mul(a))
            .ok_or_else(|| grid_error(cfg, "too many ranks"))?;
        let ckpt = cfg.checkpoint_dir();
        // Seeds: 1 + step · batch + sample, below the held-out ones at 2^40.
        let seeds = cfg.steps.checked_mul(cfg.batch).filter(|&n| n < 1 << 40);
        if seeds.is_none() {
            return Err(grid_error(cfg, "steps × batch must stay below 2^40"));
        }
        if cfg.checkpoint_every > 0 || cfg.resume {
            // burn-optim restores Adam's state in the default float dtype.
            let default = DType::from(Device::default().settings().float_dtype);
            if default != DType::F64 {
                return Err(DemoError::Checkpoint {
                    path: ckpt,
                    reason: format!(
                        "the default float dtype is {default:?}: checkpoints of the f64 models need `Device::default().configure(FloatDType::F64)` before the first tensor"
                    ),
                });
            }
        }
        let resumed = if cfg.resume {
            Some(progress::Progress::read(&ckpt, cfg)?)
        } else {
            None
        };
        let start = resumed.as_ref().map_or(0, |g| g.done);
        let dt = cfg.hours * 3600.0;
        // The grid too small for the solver is a usage error, as for the model.
        let data = ShallowWaterData::new(cfg.nlat, cfg.nlon, dt, SOLVER_DT, &Device::flex())
            .map_err(|e| grid_error(cfg, e))?
            .with_jets(true);
        let data = match &cfg.sample_cache {
            Some(dir) => data.with_cache(dir),
            None => data,
        };
        let shares = shares(cfg.batch, r);
        if lead {
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
            if r == 1 {
                writeln!(
                    out,
                    "distributed on a {grid_name} polar × azimuth grid of {how} (every parameter replicated, gradients summed over the grid); serial alongside"
                )?;
            } else {
                let split: Vec<String> = shares.iter().map(|s| s.len().to_string()).collect();
                writeln!(
                    out,
                    "distributed on {r} data-parallel replicas of a {p}x{a} polar × azimuth grid ({ranks} {how}; samples per replica {}): every parameter replicated, gradients summed over each replica's grid, then averaged over the replicas by their share of the batch; serial alongside on the whole batch",
                    split.join(" + ")
                )?;
            }
            if let Some(g) = &resumed {
                writeln!(
                    out,
                    "resuming after step {} from {} (largest difference so far {:.1e})",
                    g.done,
                    ckpt.display(),
                    g.worst
                )?;
            }
        }
        let galewsky = Arc::new(
            data.galewsky(cfg.rollout)
                .map_err(|e| rank_error("data", 0, e))?,
        );
        let validation = make_batch(&data, 1 << 40..(1 << 40) + cfg.batch as u64)
            .map_err(|e| rank_error("data", 0, e))?;
        if lead {
            std::fs::create_dir_all(&cfg.out_dir)?;
            if cfg.checkpoint_every > 0 {
                std::fs::create_dir_all(&ckpt)?;
            }
        }
        Ok(Setup {
            outer,
            grid_name,
            ranks,
            ckpt,
            resumed,
            start,
            data,
            shares,
            galewsky,
            validation,
        })
    }

    /// Step `i`'s global batch (every rank makes the same), asking for a
    /// checkpoint when one is due.
    fn batch(&self, cfg: &SweDemoConfig, i: usize) -> Result<Batch, SfnoError> {
        let seeds = (1 + (i * cfg.batch) as u64)..(1 + ((i + 1) * cfg.batch) as u64);
        let mut batch = make_batch(&self.data, seeds)?;
        let due = cfg.checkpoint_every > 0
            && ((i + 1).is_multiple_of(cfg.checkpoint_every) || i + 1 == cfg.steps);
        // Each checkpoint in a folder of its own; the record names it once
        // both runs have written theirs.
        batch.save = due.then(|| progress::generation(&self.ckpt, i + 1));
        Ok(batch)
    }

    /// The checkpoint a resumed run starts from: `checkpoint/step-<done>`.
    fn resume_dir(&self) -> PathBuf {
        progress::generation(&self.ckpt, self.start)
    }

    /// Replica `k`'s share of `batch`, with its checkpoint request.
    fn share(&self, batch: &Batch, k: usize) -> Batch {
        Batch {
            save: batch.save.clone(),
            ..batch.samples(self.shares[k].clone())
        }
    }
}

/// The lead's record of one step: print the comparison, keep the losses,
/// and write the checkpoint record when the step saved one (after every
/// rank and the serial run have written theirs).
#[allow(clippy::too_many_arguments)]
fn record_step(
    cfg: &SweDemoConfig,
    setup: &Setup,
    i: usize,
    (loss, serial): (f64, &StepReport),
    param_diff: f64,
    saved: bool,
    worst: &mut f64,
    losses: &mut Vec<(f64, f64)>,
    out: &mut impl Write,
) -> Result<(), DemoError> {
    let loss_diff = (loss - serial.loss).abs() / serial.loss.abs().max(f64::MIN_POSITIVE);
    *worst = worst.max(loss_diff).max(param_diff);
    writeln!(
        out,
        "step {i:>4}  loss {loss:.6e} (serial {:.6e})  Δloss {loss_diff:.1e}  Δparams {param_diff:.1e}",
        serial.loss
    )?;
    losses.push((loss, serial.loss));
    if saved {
        let record = progress::Progress {
            done: i + 1,
            worst: *worst,
            losses: losses.clone(),
        };
        record.write(&setup.ckpt, cfg)?;
        let folder = progress::generation(&setup.ckpt, i + 1);
        writeln!(out, "checkpoint after step {i}: {}", folder.display())?;
    }
    Ok(())
}

/// Run the job on threads, writing its report to `out` and its pictures
/// to `cfg.out_dir` (and, when asked, checkpoints to
/// [`SweDemoConfig::checkpoint_dir`]); returns the verdict.
///
/// A checkpoint holds the serial and the distributed model with their
/// Adam state (`ruda_tensor::ddp::save_checkpoint`) and the comparison so
/// far ([`progress::Progress`]); a resumed run goes on from it, on the
/// same or another grid of ranks, as the uninterrupted run would.
/// burn-optim restores Adam's state in the default device's float dtype:
/// checkpoints need `Device::default().configure(FloatDType::F64)` before
/// the first tensor (the `ruda` binary does it).
///
/// # Errors
/// [`DemoError::Grid`] when the grid does not fit the model or a size is
/// zero; [`DemoError::Checkpoint`] when a checkpoint cannot be read,
/// belongs to another training, or cannot be written;
/// [`DemoError::Rank`] when a rank (or the serial run, reported as rank 0
/// of `1x1`) fails; [`DemoError::Io`] when writing fails.
pub fn run(cfg: &SweDemoConfig, out: &mut impl Write) -> Result<SweVerdict, DemoError> {
    let setup = Setup::new(cfg, "threads", true, out)?;
    let model_cfg = cfg.model();
    let (r, p, a) = (cfg.replicas, cfg.polar, cfg.azimuth);
    let (ranks, start, resumed) = (setup.ranks, setup.start, &setup.resumed);
    let resume_dir = setup.resume_dir();
    let resume_dir = &resume_dir;
    let (grid_name, shares) = (&setup.grid_name, &setup.shares);
    let (galewsky, validation) = (&setup.galewsky, &setup.validation);
    let (serial_tx, serial_rx) = channel::<Batch>();
    let (serial_rep_tx, serial_rep_rx) = channel::<Report>();
    let (dist_rep_tx, dist_rep_rx) = channel::<(usize, Report)>();
    let mut rank_txs = Vec::new();
    let mut rank_rxs = Vec::new();
    for _ in 0..ranks {
        let (tx, rx) = channel::<Batch>();
        rank_txs.push(tx);
        rank_rxs.push(Mutex::new(Some(rx)));
    }
    let started = Instant::now();
    let bar = ProgressBar::new((cfg.steps - start) as u64);
    bar.set_style(
        ProgressStyle::with_template("{spinner} training [{bar:30}] {pos}/{len} steps {elapsed}")
            .expect("valid template"),
    );
    let (worst, losses, finishes) = std::thread::scope(|s| {
        let (g, v) = (galewsky.clone(), validation.clone());
        let serial_rx = Mutex::new(Some(serial_rx));
        let serial = s.spawn(move || {
            LocalWorld::new(1).run(|comm| {
                let world = HostCollective::new(comm);
                let serial_rx = serial_rx
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .take()
                    .expect("the serial run takes its receiver once");
                let mut t = Trainer::new(&model_cfg, &SerialDomain, MODEL_SEED, cfg.lr)?;
                if cfg.resume {
                    t.load(&world, &resume_dir.join("serial"))?;
                }
                let mut reduce =
                    |o: &mut burn_optim::ModuleOptimizer, lr, m, g| Ok(o.step(lr, m, g));
                let mut save = |t: &Trainer, dir: &Path| t.save(&world, &dir.join("serial"));
                let tx = |r: Report| serial_rep_tx.send(r).is_ok();
                train_loop(
                    &mut t,
                    &serial_rx,
                    Some(&tx),
                    &mut reduce,
                    &mut save,
                    &v,
                    &g,
                )
            })
        });
        let model_cfg = cfg.model();
        let (g, v) = (galewsky.clone(), validation.clone());
        // `dist_rep_tx` moves into the distributed run: when that run ends,
        // early or not, the main thread's receiver sees it.
        let (rank_rxs, shares) = (&rank_rxs, &shares);
        let dist = s.spawn(move || {
            LocalWorld::new(ranks).run(|comm| {
                let grid = HybridGrid::new(comm, r, p, a)?;
                let rx = rank_rxs[grid.world().rank()]
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .take()
                    .expect("each rank takes its own receiver once");
                let mut t = Trainer::new(&model_cfg, grid.domain(), MODEL_SEED, cfg.lr)?;
                if cfg.resume {
                    t.load(grid.world(), &resume_dir.join("distributed"))?;
                }
                let replica = grid.replica_rank();
                let samples = shares[replica].len();
                let mut reduce = |o: &mut burn_optim::ModuleOptimizer, lr, m, g| {
                    let how = GradientReduction::WeightedMean { samples };
                    Ok(hybrid_step(&grid, o, lr, m, g, how)?)
                };
                let mut save =
                    |t: &Trainer, dir: &Path| t.save(grid.world(), &dir.join("distributed"));
                // Each replica's first rank reports its replica's loss.
                let report = |rep: Report| dist_rep_tx.send((replica, rep)).is_ok();
                let tx = (grid.domain().world().rank() == 0)
                    .then_some(&report as &dyn Fn(Report) -> bool);
                let finish = train_loop(&mut t, &rx, tx, &mut reduce, &mut save, &v, &g)?;
                Ok::<_, SfnoError>((finish, t.patch_ranges()))
            })
        });
        let mut worst = resumed.as_ref().map_or(0.0, |g| g.worst);
        let mut losses = resumed.as_ref().map_or_else(Vec::new, |g| g.losses.clone());
        let mut failed = None;
        // Whether `failed` only says that a run ended: its own error, from
        // its join below, is then the one to report.
        let mut ended_early = false;
        let per_replica = cfg.polar * cfg.azimuth;
        for i in start..cfg.steps {
            let batch = match setup.batch(cfg, i) {
                Ok(b) => b,
                Err(e) => {
                    failed = Some(rank_error("data", 0, e));
                    break;
                }
            };
            let saved = batch.save.is_some();
            let parts: Vec<Batch> = (0..r).map(|k| setup.share(&batch, k)).collect();
            // Every receiver gets its batch (no early stop: a rank left
            // without it would wait for ever); a run that has ended makes
            // its send fail, and then nothing more is sent or awaited.
            let mut sent = serial_tx.send(batch).is_ok();
            for (rank, tx) in rank_txs.iter().enumerate() {
                sent &= tx.send(parts[rank / per_replica].clone()).is_ok();
            }
            if !sent {
                failed = Some(rank_error(grid_name, 0, "a run ended early"));
                ended_early = true;
                break;
            }
            let sr = match serial_rep_rx.recv() {
                Ok(Ok(sr)) => sr,
                Ok(Err(e)) => {
                    failed = Some(rank_error("1x1 (serial)", 0, e));
                    break;
                }
                Err(_) => {
                    failed = Some(rank_error("1x1 (serial)", 0, "the run ended early"));
                    ended_early = true;
                    break;
                }
            };
            let mut replicas: Vec<Option<StepReport>> = vec![None; r];
            for _ in 0..r {
                match dist_rep_rx.recv() {
                    Ok((k, Ok(dr))) => replicas[k] = Some(dr),
                    Ok((k, Err(e))) => {
                        failed = Some(rank_error(grid_name, k * per_replica, e));
                        break;
                    }
                    Err(_) => {
                        failed = Some(rank_error(grid_name, 0, "a run ended early"));
                        ended_early = true;
                        break;
                    }
                }
            }
            if failed.is_some() {
                break;
            }
            let replicas: Vec<StepReport> = replicas.into_iter().flatten().collect();
            // The global batch's loss: each replica's mean, weighted by its
            // samples.
            let loss = replicas
                .iter()
                .zip(shares.iter())
                .map(|(dr, range)| dr.loss * range.len() as f64)
                .sum::<f64>()
                / cfg.batch as f64;
            let param_diff = replicas
                .iter()
                .fold(0.0f64, |m, dr| m.max(rel_diff(&dr.params, &sr.params)));
            let step = (loss, &sr);
            let recorded = record_step(
                cfg,
                &setup,
                i,
                step,
                param_diff,
                saved,
                &mut worst,
                &mut losses,
                out,
            );
            if let Err(e) = recorded {
                failed = Some(e);
                break;
            }
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
            if ended_early {
                if let Ok(Err(WorldError::Rank { error, .. })) = &serial {
                    return Err(rank_error("1x1 (serial)", 0, error));
                }
                if let Ok(Err(WorldError::Rank { rank, error })) = &dist {
                    return Err(rank_error(grid_name, *rank, error));
                }
            }
            return Err(e);
        }
        let serial = serial.map_err(|_| rank_error("1x1 (serial)", 0, "panicked"))?;
        let dist = dist.map_err(|_| rank_error(grid_name, 0, "the world panicked"))?;
        Ok((worst, losses, (serial, dist)))
    })?;
    bar.finish_and_clear();
    let (serial, dist) = finishes;
    let serial = match serial {
        Ok(mut f) => f.remove(0),
        Err(WorldError::Rank { error, .. }) => return Err(rank_error("1x1 (serial)", 0, error)),
        Err(WorldError::Empty) => return Err(rank_error("1x1 (serial)", 0, "no ranks")),
    };
    let dist = match dist {
        Ok(d) => d,
        Err(WorldError::Rank { rank, error }) => return Err(rank_error(grid_name, rank, error)),
        Err(WorldError::Empty) => return Err(rank_error(grid_name, 0, "no ranks")),
    };
    let eval_worst = dist.iter().fold(0.0f64, |m, (f, _)| {
        m.max(rel_diff(&f.rollout, &serial.rollout))
            .max(rel_diff(&[f.validation], &[serial.validation]))
    });
    let worst = worst.max(eval_worst);
    if losses.len() != cfg.steps {
        return Err(rank_error(grid_name, 0, "the run stopped early"));
    }
    // Each replica's last prediction, assembled from its ranks' patches,
    // equals the serial one.
    let (nlat, nlon) = (cfg.nlat, cfg.nlon);
    let mut worst = worst;
    for replica in dist.chunks(p * a) {
        let mut assembled = vec![0.0; 3 * nlat * nlon];
        for (finish, (rows, cols)) in replica {
            let (h, w) = (rows.len(), cols.len());
            for f in 0..3 {
                for (i, r) in rows.clone().enumerate() {
                    for (j, c) in cols.clone().enumerate() {
                        assembled[(f * nlat + r) * nlon + c] = finish.last[(f * h + i) * w + j];
                    }
                }
            }
        }
        worst = worst.max(rel_diff(&assembled, &serial.last));
    }
    conclude(cfg, &setup, worst, &losses, &serial, started, out)
}

/// The end of a run, on the lead: the serial model against persistence,
/// the report, the pictures and the verdict (`worst`: the largest
/// difference between the runs, every check included).
fn conclude(
    cfg: &SweDemoConfig,
    setup: &Setup,
    worst: f64,
    losses: &[(f64, f64)],
    serial: &Finish,
    started: Instant,
    out: &mut impl Write,
) -> Result<SweVerdict, DemoError> {
    let (nlat, nlon) = (cfg.nlat, cfg.nlon);
    let (galewsky, validation, data) = (&setup.galewsky, &setup.validation, &setup.data);
    let start = setup.start;
    let truth = galewsky.last().expect("the rollout's states");
    // Persistence (the state kept) by the same loss over the sphere, serially.
    let mse = SphereMse::new(Arc::new(SerialTransforms::new(setup.outer)));
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
        cfg.steps - start,
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
    let written = pictures::draw(cfg, losses, &verdict, truth, &serial.last, data)
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
