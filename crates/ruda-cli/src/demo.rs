//! `ruda demo`: train a small spatially decomposed model on a polar ×
//! azimuth grid of in-process ranks, run the same model serially, and
//! compare every step's loss and gradients.
//!
//! The model regresses a `[channels, latitudes, longitudes]` field onto a
//! target: each rank holds a patch; a three-point latitude stencil with
//! learnable taps (one halo row from each polar neighbour) and learnable
//! per-channel weights give the prediction; the squared residual goes
//! through an azimuth transpose (longitudes whole, channels split), is
//! summed over longitudes, gathered over azimuth ranks and reduced over
//! polar ranks into one replicated loss. Parameters are replicated and
//! enter through `copy_to` regions, so their gradients are summed over all
//! ranks. Plain SGD updates them each step.

use std::io::Write;
use std::time::Instant;

use burn_autodiff::Autodiff;
use burn_backend::ops::FloatTensorOps;
use burn_backend::tensor::FloatTensor;
use burn_backend::{AutodiffBackend, Slice, TensorData, TensorMetadata, read_sync};
use burn_flex::{Flex, FlexDevice};
use indicatif::{ProgressBar, ProgressStyle};
use ruda_comm::{Communicator, LocalWorld, WorldError};
use ruda_tensor::layout::compute_split_shapes;
use ruda_tensor::primitives as p;
use ruda_tensor::{HostCollective, PrimitiveError, ProcessGrid};
use thiserror::Error;

type Ad = Autodiff<Flex>;

/// What the demo trains and on how many ranks.
#[derive(Clone, Debug, PartialEq)]
pub struct DemoConfig {
    /// Polar ranks.
    pub polar: usize,
    /// Azimuth ranks.
    pub azimuth: usize,
    /// Optimisation steps.
    pub steps: usize,
    /// SGD learning rate.
    pub learning_rate: f64,
    /// Channels of the field.
    pub channels: usize,
    /// Latitudes.
    pub nlat: usize,
    /// Longitudes.
    pub nlon: usize,
}

impl Default for DemoConfig {
    /// 4 channels on a 33 × 62 grid (uneven over 2 and 4 ranks), 2 × 2
    /// ranks, 12 steps.
    fn default() -> Self {
        DemoConfig {
            polar: 2,
            azimuth: 2,
            steps: 12,
            learning_rate: 0.5,
            channels: 4,
            nlat: 33,
            nlon: 62,
        }
    }
}

/// Why the demo could not run.
#[derive(Debug, Error)]
pub enum DemoError {
    /// A rank failed (a primitive's error, or a panic).
    #[error("the {grid} run failed on rank {rank}: {message}")]
    Rank {
        /// The grid, e.g. `2x2`.
        grid: String,
        /// The failing rank.
        rank: usize,
        /// What happened.
        message: String,
    },
    /// The grid does not fit the field.
    #[error(
        "a {polar}x{azimuth} grid does not fit {channels} channels × {nlat} × {nlon}: every rank needs at least one latitude, one longitude and one channel"
    )]
    Grid {
        /// Polar ranks.
        polar: usize,
        /// Azimuth ranks.
        azimuth: usize,
        /// Channels.
        channels: usize,
        /// Latitudes.
        nlat: usize,
        /// Longitudes.
        nlon: usize,
    },
    /// Under MPI, the grid does not match the number of processes.
    #[error("a {polar}x{azimuth} grid needs {} MPI processes, mpirun started {ranks}", polar * azimuth)]
    WorldSize {
        /// Polar ranks.
        polar: usize,
        /// Azimuth ranks.
        azimuth: usize,
        /// Processes started.
        ranks: usize,
    },
    /// Writing the report failed.
    #[error("writing the report: {0}")]
    Io(#[from] std::io::Error),
}

/// One optimisation step as one rank saw it.
#[derive(Clone, Debug, PartialEq)]
pub struct StepRecord {
    /// The (replicated) loss before the update.
    pub loss: f64,
    /// The gradient of every parameter (channel weights, then taps).
    pub grads: Vec<f64>,
}

fn tensor(values: Vec<f64>, shape: &[usize]) -> FloatTensor<Ad> {
    Ad::float_from_data(TensorData::new(values, shape.to_vec()), &FlexDevice)
}

fn values(t: FloatTensor<Flex>) -> Vec<f64> {
    read_sync(Flex::float_into_data(t))
        .expect("host tensor")
        .try_to_vec::<f64>()
        .expect("f64 tensor")
}

fn narrow(x: FloatTensor<Ad>, dim: usize, start: usize, len: usize) -> FloatTensor<Ad> {
    let full = Slice::new(0, None, 1);
    let mut s = vec![full; x.shape().num_dims()];
    s[dim] = Slice::new(start as isize, Some((start + len) as isize), 1);
    Ad::float_slice(x, &s)
}

/// The input field and the target, full size, the same on every rank.
fn fields(cfg: &DemoConfig) -> (Vec<f64>, Vec<f64>) {
    let (c, h, w) = (cfg.channels, cfg.nlat, cfg.nlon);
    let mut field = Vec::with_capacity(c * h * w);
    let mut target = Vec::with_capacity(c * h * w);
    for k in 0..c {
        for i in 0..h {
            let theta = (i as f64 + 0.5) * std::f64::consts::PI / h as f64;
            for j in 0..w {
                let phi = j as f64 * 2.0 * std::f64::consts::PI / w as f64;
                let f = (theta * (k + 1) as f64).sin() * (phi * (k + 1) as f64).cos()
                    + 0.1 * ((i * 7 + j * 3 + k) % 5) as f64;
                field.push(f);
                target.push(0.6 * f * theta.cos() + 0.2);
            }
        }
    }
    (field, target)
}

/// The replicated loss on `grid`, from this rank's patches.
fn loss<C: Communicator + std::fmt::Debug + 'static>(
    grid: &ProcessGrid<HostCollective<C>>,
    cfg: &DemoConfig,
    x: &FloatTensor<Ad>,
    target: &FloatTensor<Ad>,
    weights: FloatTensor<Ad>,
    taps: FloatTensor<Ad>,
) -> Result<FloatTensor<Ad>, PrimitiveError> {
    let w =
        p::copy_to_azimuth_region::<Ad, _>(grid, p::copy_to_polar_region::<Ad, _>(grid, weights)?)?;
    let t =
        p::copy_to_azimuth_region::<Ad, _>(grid, p::copy_to_polar_region::<Ad, _>(grid, taps)?)?;
    let h = x.shape()[1];
    let xh = p::polar_halo_exchange::<Ad, _>(grid, x.clone(), 1)?;
    let mut stencil = None;
    for k in 0..3 {
        let term = Ad::float_mul(narrow(xh.clone(), 1, k, h), narrow(t.clone(), 0, k, 1));
        stencil = Some(match stencil {
            None => term,
            Some(s) => Ad::float_add(s, term),
        });
    }
    let y = Ad::float_mul(stencil.expect("three taps"), w);
    let r = Ad::float_sub(y, target.clone());
    let sq = Ad::float_mul(r.clone(), r);
    let lon = compute_split_shapes(cfg.nlon, grid.azimuth_size()).expect("checked grid");
    let by_channel = p::distributed_transpose_azimuth::<Ad, _>(grid, sq, (0, -1), &lon)?;
    let per_lat = Ad::float_sum_dim(by_channel, 2);
    let channels = compute_split_shapes(cfg.channels, grid.azimuth_size()).expect("checked grid");
    let gathered = p::gather_from_sizes::<Ad>(grid.azimuth(), per_lat, 0, &channels)?;
    let partial = Ad::float_sum(gathered);
    let total = p::reduce_from_polar_region::<Ad, _>(grid, partial)?;
    let n = (cfg.channels * cfg.nlat * cfg.nlon) as f64;
    Ok(Ad::float_mul_scalar(total, (1.0 / n).into()))
}

fn check_grid(cfg: &DemoConfig, polar: usize, azimuth: usize) -> Result<(), DemoError> {
    if polar == 0
        || azimuth == 0
        || polar > cfg.nlat
        || azimuth > cfg.nlon
        || azimuth > cfg.channels
    {
        return Err(DemoError::Grid {
            polar,
            azimuth,
            channels: cfg.channels,
            nlat: cfg.nlat,
            nlon: cfg.nlon,
        });
    }
    Ok(())
}

/// Train as one rank of a `polar × azimuth` grid built on `comm` (every
/// rank of `comm` calls this); returns this rank's records.
///
/// # Errors
/// The primitives' errors.
pub fn train_rank<C: Communicator + std::fmt::Debug + 'static>(
    comm: C,
    cfg: &DemoConfig,
    polar: usize,
    azimuth: usize,
    progress: &ProgressBar,
) -> Result<Vec<StepRecord>, PrimitiveError> {
    let (field, target) = fields(cfg);
    let shape = [cfg.channels, cfg.nlat, cfg.nlon];
    let grid = ProcessGrid::new(comm, polar, azimuth)?;
    let patch = |v: &Vec<f64>| -> Result<FloatTensor<Ad>, PrimitiveError> {
        let x = p::scatter_to_polar_region::<Ad, _>(&grid, tensor(v.clone(), &shape), -2)?;
        p::scatter_to::<Ad>(grid.azimuth(), x, -1)
    };
    let (x, tgt) = (patch(&field)?, patch(&target)?);
    let mut weights = vec![1.0; cfg.channels];
    let mut taps = vec![0.2, 0.6, 0.2];
    let mut records = Vec::with_capacity(cfg.steps);
    let lead = grid.world().comm().rank() == 0;
    for _ in 0..cfg.steps {
        let wt = Ad::float_set_require_grad(tensor(weights.clone(), &[cfg.channels, 1, 1]), true);
        let tt = Ad::float_set_require_grad(tensor(taps.clone(), &[3, 1, 1]), true);
        let l = loss(&grid, cfg, &x, &tgt, wt.clone(), tt.clone())?;
        let value = values(Ad::inner(l.clone()))[0];
        let grads = Ad::backward(l);
        let gw = values(Ad::grad(&wt, &grads).expect("weights are used"));
        let gt = values(Ad::grad(&tt, &grads).expect("taps are used"));
        for (w, g) in weights.iter_mut().zip(&gw) {
            *w -= cfg.learning_rate * g;
        }
        for (t, g) in taps.iter_mut().zip(&gt) {
            *t -= cfg.learning_rate * g;
        }
        records.push(StepRecord {
            loss: value,
            grads: gw.into_iter().chain(gt).collect(),
        });
        if lead {
            progress.inc(1);
        }
    }
    Ok(records)
}

/// Train on a `polar × azimuth` grid of threads; every rank's records (they
/// are replicated, so rank 0's are returned after checking they agree).
///
/// # Errors
/// [`DemoError::Grid`] for a grid that does not fit the field;
/// [`DemoError::Rank`] when a rank fails.
pub fn train(
    cfg: &DemoConfig,
    polar: usize,
    azimuth: usize,
    progress: &ProgressBar,
) -> Result<Vec<StepRecord>, DemoError> {
    check_grid(cfg, polar, azimuth)?;
    let grid_name = format!("{polar}x{azimuth}");
    let runs = LocalWorld::new(polar * azimuth)
        .run(|comm| train_rank(comm, cfg, polar, azimuth, progress));
    let runs = runs.map_err(|e| match e {
        WorldError::Empty => DemoError::Grid {
            polar,
            azimuth,
            channels: cfg.channels,
            nlat: cfg.nlat,
            nlon: cfg.nlon,
        },
        WorldError::Rank { rank, error } => DemoError::Rank {
            grid: grid_name.clone(),
            rank,
            message: error.to_string(),
        },
    })?;
    // Replicated: every rank must have computed the very same numbers.
    for (rank, r) in runs.iter().enumerate() {
        if r != &runs[0] {
            return Err(DemoError::Rank {
                grid: grid_name,
                rank,
                message: "its replicated loss differs from rank 0's".into(),
            });
        }
    }
    Ok(runs.into_iter().next().expect("at least one rank"))
}

/// One step of the comparison.
#[derive(Clone, Debug, PartialEq)]
pub struct StepComparison {
    /// Distributed loss.
    pub distributed: f64,
    /// Serial loss.
    pub serial: f64,
    /// Largest gradient difference, relative to the gradient's size.
    pub grad_diff: f64,
}

/// The outcome of comparing the two runs.
#[derive(Clone, Debug, PartialEq)]
pub struct Verdict {
    /// Each step.
    pub steps: Vec<StepComparison>,
    /// The largest relative difference of any loss or gradient.
    pub worst: f64,
    /// Whether everything agrees within the tolerance.
    pub agree: bool,
}

/// Relative difference, scaled by the larger magnitude (at least 1).
fn rel(a: f64, b: f64) -> f64 {
    let d = (a - b).abs() / a.abs().max(b.abs()).max(1.0);
    if d.is_nan() { f64::INFINITY } else { d }
}

/// Compare the runs step by step; they agree when every loss and gradient
/// matches within `tolerance` (relative) and both ran the same steps.
///
/// # Example
/// ```
/// use ruda_cli::demo::{StepRecord, compare};
/// let a = vec![StepRecord { loss: 1.0, grads: vec![0.5] }];
/// let mut b = a.clone();
/// assert!(compare(&a, &b, 1e-12).agree);
/// b[0].grads[0] += 1e-6;
/// assert!(!compare(&a, &b, 1e-12).agree);
/// ```
pub fn compare(distributed: &[StepRecord], serial: &[StepRecord], tolerance: f64) -> Verdict {
    let steps: Vec<StepComparison> = distributed
        .iter()
        .zip(serial)
        .map(|(d, s)| StepComparison {
            distributed: d.loss,
            serial: s.loss,
            grad_diff: if d.grads.len() == s.grads.len() {
                d.grads
                    .iter()
                    .zip(&s.grads)
                    .map(|(a, b)| rel(*a, *b))
                    .fold(0.0, f64::max)
            } else {
                f64::INFINITY
            },
        })
        .collect();
    let worst = steps
        .iter()
        .map(|c| rel(c.distributed, c.serial).max(c.grad_diff))
        .fold(0.0, f64::max);
    let agree = distributed.len() == serial.len() && !distributed.is_empty() && worst <= tolerance;
    Verdict {
        steps,
        worst,
        agree,
    }
}

/// The tolerance of the demo's verdict: f64 round-off of sums taken in a
/// different order, with margin.
pub const TOLERANCE: f64 = 1e-10;

/// Run the demo on threads and write its report; returns the verdict.
///
/// # Errors
/// As [`train`], and [`DemoError::Io`].
pub fn run(cfg: &DemoConfig, out: &mut impl Write) -> Result<Verdict, DemoError> {
    header(cfg, "threads", out)?;
    let bar = progress(cfg);
    let t = Instant::now();
    let distributed = train(cfg, cfg.polar, cfg.azimuth, &bar)?;
    let t_dist = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let serial = train(cfg, 1, 1, &bar)?;
    let t_serial = t.elapsed().as_secs_f64();
    bar.finish_and_clear();
    report(cfg, &distributed, &serial, (t_dist, t_serial), out)
}

/// Run the demo with one rank per MPI process (every process calls this);
/// rank 0 also runs the serial model and writes the report, and every
/// rank returns rank 0's verdict.
///
/// # Errors
/// [`DemoError::Grid`] when the grid does not match the world or the
/// field; [`DemoError::Rank`]; [`DemoError::Io`].
#[cfg(feature = "mpi")]
pub fn run_mpi(
    cfg: &DemoConfig,
    world: ruda_comm::MpiCommunicator,
    out: &mut impl Write,
) -> Result<Verdict, DemoError> {
    use ruda_comm::ReduceOp;
    check_grid(cfg, cfg.polar, cfg.azimuth)?;
    let (me, n) = (world.rank(), world.size());
    if n != cfg.polar * cfg.azimuth {
        return Err(DemoError::WorldSize {
            polar: cfg.polar,
            azimuth: cfg.azimuth,
            ranks: n,
        });
    }
    let rank_err = |e: &dyn std::fmt::Display| DemoError::Rank {
        grid: format!("{}x{}", cfg.polar, cfg.azimuth),
        rank: me,
        message: e.to_string(),
    };
    let check = world
        .split(Some(0), 0)
        .map_err(|e| rank_err(&e))?
        .expect("a colour");
    if me == 0 {
        header(cfg, "MPI processes", out)?;
    }
    let bar = if me == 0 {
        progress(cfg)
    } else {
        ProgressBar::hidden()
    };
    let t = Instant::now();
    let distributed =
        train_rank(world, cfg, cfg.polar, cfg.azimuth, &bar).map_err(|e| rank_err(&e))?;
    let t_dist = t.elapsed().as_secs_f64();
    // Replicated: the same numbers on every rank.
    let flat: Vec<f64> = distributed
        .iter()
        .flat_map(|r| std::iter::once(r.loss).chain(r.grads.iter().copied()))
        .collect();
    let (mut hi, mut lo) = (flat.clone(), flat);
    check
        .all_reduce(&mut hi, ReduceOp::Max)
        .map_err(|e| rank_err(&e))?;
    check
        .all_reduce(&mut lo, ReduceOp::Min)
        .map_err(|e| rank_err(&e))?;
    if hi != lo {
        return Err(rank_err(
            &"the replicated loss or gradients differ between ranks",
        ));
    }
    let mut agree = [0u8];
    let verdict = if me == 0 {
        let t = Instant::now();
        let serial = train(cfg, 1, 1, &bar)?;
        let t_serial = t.elapsed().as_secs_f64();
        bar.finish_and_clear();
        let v = report(cfg, &distributed, &serial, (t_dist, t_serial), out)?;
        agree[0] = u8::from(v.agree);
        Some(v)
    } else {
        None
    };
    check.broadcast(&mut agree, 0).map_err(|e| rank_err(&e))?;
    Ok(verdict.unwrap_or(Verdict {
        steps: Vec::new(),
        worst: 0.0,
        agree: agree[0] == 1,
    }))
}

fn progress(cfg: &DemoConfig) -> ProgressBar {
    let bar = ProgressBar::new(2 * cfg.steps as u64);
    bar.set_style(
        ProgressStyle::with_template("{spinner} {msg} [{bar:30}] {pos}/{len} steps")
            .expect("valid template"),
    );
    bar.set_message("training");
    bar
}

fn header(cfg: &DemoConfig, ranks: &str, out: &mut impl Write) -> std::io::Result<()> {
    writeln!(
        out,
        "ruda demo: {} channels × {} latitudes × {} longitudes, {} SGD steps",
        cfg.channels, cfg.nlat, cfg.nlon, cfg.steps
    )?;
    writeln!(
        out,
        "distributed on a {}x{} polar × azimuth grid of {ranks}; serial on one rank",
        cfg.polar, cfg.azimuth
    )
}

/// Compare the runs, print the table and the verdict line.
fn report(
    cfg: &DemoConfig,
    distributed: &[StepRecord],
    serial: &[StepRecord],
    (t_dist, t_serial): (f64, f64),
    out: &mut impl Write,
) -> Result<Verdict, DemoError> {
    let verdict = compare(distributed, serial, TOLERANCE);
    writeln!(
        out,
        "{:>5} {:>22} {:>22} {:>14}",
        "step", "distributed loss", "serial loss", "max grad diff"
    )?;
    for (i, s) in verdict.steps.iter().enumerate() {
        writeln!(
            out,
            "{:>5} {:>22.15e} {:>22.15e} {:>14.2e}",
            i, s.distributed, s.serial, s.grad_diff
        )?;
    }
    writeln!(
        out,
        "distributed run {t_dist:.2} s, serial run {t_serial:.2} s"
    )?;
    if verdict.agree {
        writeln!(
            out,
            "verdict: OK — the {}x{} run matches the serial model at every step (largest relative difference {:.1e}, tolerance {:.0e})",
            cfg.polar, cfg.azimuth, verdict.worst, TOLERANCE
        )?;
    } else {
        writeln!(
            out,
            "verdict: MISMATCH — the {}x{} run differs from the serial model by up to {:.3e} (tolerance {:.0e})",
            cfg.polar, cfg.azimuth, verdict.worst, TOLERANCE
        )?;
    }
    Ok(verdict)
}
