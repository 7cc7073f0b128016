//! `ruda demo`: train a spectral model on the sphere distributed over a
//! polar × azimuth grid of ranks, train the same model serially, and
//! compare every step's loss and gradients — in turns, step by step, so
//! that only the comparisons are kept and the demo's memory does not grow
//! with the number of steps.
//!
//! The data ([`problem`]) is a band-limited random field of several
//! channels on an equiangular grid and its image under one and two steps
//! of a linear map: solid-body rotation about the polar axis, diffusion,
//! and a coupling of the channels; and a band-limited random wind under the
//! same rotation and diffusion. The model ([`model`]) is a spectral
//! block — forward transform, a learnable complex filter per mode `(l, m)`
//! and channel, inverse transform — plus a learnable pointwise channel mix,
//! and a vector spectral block for the wind (vector transforms, a
//! learnable filter per mode on the spheroidal and toroidal coefficients);
//! it can represent the maps exactly, and Adam fits it on the one-step and
//! two-step (rollout) error, so gradients flow through all four transforms.
//!
//! The distributed run uses ruda-sphere's distributed transforms (azimuth
//! transposes, polar reduce-scatter and all-gather) with the parameters
//! entering through `copy_to` regions and the loss leaving through
//! `reduce_from` regions; the serial run uses its serial transforms, code
//! that involves no communication at all. Ranks are threads (tensors
//! staged through host memory by the local transport, or, with
//! [`DemoTransport::Device`], kept on their shared Flex device by the
//! device-resident group, or with [`DemoTransport::Wgpu`] on wgpu's default
//! adapter, the serial model there too), or MPI processes under `mpirun`
//! (feature `mpi`; on Flex, whatever the transport asked).

pub mod model;
pub mod problem;
mod turns;

use std::io::Write;

use indicatif::{ProgressBar, ProgressStyle};
use ruda_comm::{Communicator, LocalCommunicator, LocalWorld, WorldError};
use ruda_sphere::{LatitudeGrid, ShtSpec, SphereError, SphereLayout};
use ruda_tensor::{DeviceGroup, DeviceWorld, Group, HostCollective, ProcessGrid};
use thiserror::Error;

use crate::timed_comm::TimedComm;
use crate::timed_group::TimedGroup;
use problem::Problem;

/// What the demo trains and on how many ranks.
#[derive(Clone, Debug, PartialEq)]
pub struct DemoConfig {
    /// Polar ranks.
    pub polar: usize,
    /// Azimuth ranks.
    pub azimuth: usize,
    /// Optimisation steps.
    pub steps: usize,
    /// Channels of the field.
    pub channels: usize,
    /// Latitudes (equiangular, poles included).
    pub nlat: usize,
    /// Longitudes.
    pub nlon: usize,
}

impl Default for DemoConfig {
    /// 4 channels on a 361 × 720 grid (half a degree; lmax = 181; latitudes
    /// and degrees uneven over 2 ranks), 2 × 2 ranks, 12 steps: about 8 s
    /// on two cores.
    fn default() -> Self {
        DemoConfig {
            polar: 2,
            azimuth: 2,
            steps: 12,
            channels: 4,
            nlat: 361,
            nlon: 720,
        }
    }
}

/// How the threads of a distributed run move tensors.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DemoTransport {
    /// The local transport, tensors staged through host memory
    /// ([`HostCollective`]).
    #[default]
    Threads,
    /// Threads sharing one Flex device, tensors moved by the backend's own
    /// operations ([`DeviceGroup`]).
    Device,
    /// Threads sharing wgpu's default adapter (a GPU, or lavapipe's CPU
    /// Vulkan), device-resident as [`DemoTransport::Device`], the serial
    /// model on it too: the transforms' steps run there as tensor
    /// operations. Needs a build with feature `wgpu`.
    Wgpu,
}

impl DemoTransport {
    /// The device the models train on.
    ///
    /// # Errors
    /// [`DemoError::Unavailable`] for wgpu in a build without it;
    /// [`DemoError::NoF64`] for an adapter without f64 (the demo trains in
    /// f64).
    ///
    /// # Example
    /// ```
    /// use ruda_cli::demo::DemoTransport;
    /// assert_eq!(DemoTransport::Device.device().unwrap(), burn_tensor::Device::flex());
    /// ```
    pub fn device(self) -> Result<burn_tensor::Device, DemoError> {
        match self {
            DemoTransport::Threads | DemoTransport::Device => Ok(burn_tensor::Device::flex()),
            #[cfg(feature = "wgpu")]
            DemoTransport::Wgpu => {
                let device = burn_tensor::Device::wgpu(burn_tensor::DeviceKind::DefaultDevice);
                if device.supports_dtype(burn_tensor::DType::F64) {
                    Ok(device)
                } else {
                    Err(DemoError::NoF64("wgpu's default adapter"))
                }
            }
            #[cfg(not(feature = "wgpu"))]
            DemoTransport::Wgpu => Err(DemoError::Unavailable("wgpu")),
        }
    }
}

/// Why the demo could not run.
#[derive(Debug, Error)]
pub enum DemoError {
    /// A rank failed (a transform's or primitive's error, or a panic).
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
        "a {polar}x{azimuth} grid does not fit {channels} channels × {nlat} × {nlon}: {reason}"
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
        /// What does not fit.
        reason: String,
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
    /// Under MPI, the replicas × polar × azimuth ranks are not the number
    /// of processes.
    #[error(
        "{replicas} replica(s) of a {polar}x{azimuth} grid need {} MPI processes, mpirun started {ranks}",
        replicas.saturating_mul(*polar).saturating_mul(*azimuth)
    )]
    Processes {
        /// Replicas.
        replicas: usize,
        /// Polar ranks.
        polar: usize,
        /// Azimuth ranks.
        azimuth: usize,
        /// Processes started.
        ranks: usize,
    },
    /// A checkpoint that cannot be written, read or resumed from.
    #[error("checkpoint {}: {reason}", path.display())]
    Checkpoint {
        /// The file or folder.
        path: std::path::PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// Writing the report failed.
    #[error("writing the report: {0}")]
    Io(#[from] std::io::Error),
    /// A device this build does not have.
    #[error("this ruda was built without {0}: rebuild it with `--features {0}`")]
    Unavailable(&'static str),
    /// A device without f64, which the demo trains in.
    #[error("{0} has no f64, which the demo trains in")]
    NoF64(&'static str),
}

/// One optimisation step as one rank saw it.
#[derive(Clone, Debug, PartialEq)]
pub struct StepRecord {
    /// The (replicated) loss before the update.
    pub loss: f64,
    /// The gradient of every parameter (filter, then channel mix).
    pub grads: Vec<f64>,
}

/// How long one step took on one rank.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct StepTiming {
    /// Wall time of the forward and backward pass, seconds.
    pub wall: f64,
    /// Of which in collectives (waiting for peers included), seconds.
    pub comm: f64,
}

/// A run's records (replicated) and its timings (the slowest rank's wall
/// time, the ranks' mean communication time).
#[derive(Clone, Debug, PartialEq)]
pub struct Run {
    /// Every step's loss and gradients.
    pub records: Vec<StepRecord>,
    /// Every step's time.
    pub timings: Vec<StepTiming>,
}

fn grid_error(cfg: &DemoConfig, polar: usize, azimuth: usize, reason: String) -> DemoError {
    DemoError::Grid {
        polar,
        azimuth,
        channels: cfg.channels,
        nlat: cfg.nlat,
        nlon: cfg.nlon,
        reason,
    }
}

/// Check that the grid fits the field before starting any rank.
fn check_grid(cfg: &DemoConfig, polar: usize, azimuth: usize) -> Result<Problem, DemoError> {
    if polar == 0 || azimuth == 0 {
        return Err(grid_error(cfg, polar, azimuth, "no ranks".into()));
    }
    let fit = |e: SphereError| grid_error(cfg, polar, azimuth, e.to_string());
    let spec = ShtSpec::new(cfg.nlat, cfg.nlon, LatitudeGrid::Equiangular).map_err(fit)?;
    for pr in 0..polar {
        for ar in 0..azimuth {
            SphereLayout::new(spec, (pr, polar), (ar, azimuth)).map_err(fit)?;
        }
    }
    Problem::new(cfg.nlat, cfg.nlon, cfg.channels).map_err(fit)
}

/// Every rank's timings folded into one per step.
fn fold_timings(per_rank: &[Vec<StepTiming>]) -> Vec<StepTiming> {
    let steps = per_rank.first().map_or(0, Vec::len);
    (0..steps)
        .map(|s| StepTiming {
            wall: per_rank.iter().map(|r| r[s].wall).fold(0.0, f64::max),
            comm: per_rank.iter().map(|r| r[s].comm).sum::<f64>() / per_rank.len() as f64,
        })
        .collect()
}

/// Train as one rank of a `polar × azimuth` grid built on `comm` (every
/// rank of `comm` calls this); returns this rank's records and timings.
///
/// # Errors
/// The transforms' and primitives' errors.
pub fn train_rank<C: Communicator + std::fmt::Debug + 'static>(
    comm: C,
    problem: &Problem,
    cfg: &DemoConfig,
    progress: &ProgressBar,
) -> Result<(Vec<StepRecord>, Vec<StepTiming>), SphereError> {
    let comm = TimedComm::new(comm);
    let clock = comm.clock();
    let lead = comm.rank() == 0;
    let grid = ProcessGrid::new(comm, cfg.polar, cfg.azimuth)?;
    let device = burn_tensor::Device::flex();
    model::train_all(
        problem,
        Some(grid),
        &device,
        cfg.steps,
        Some(&clock),
        progress,
        lead,
    )
}

/// Train as one rank of a `polar × azimuth` grid built on a device-resident
/// group whose tensors live on `device` (every rank of `group` calls this);
/// returns this rank's records and timings.
///
/// # Errors
/// The transforms' and primitives' errors.
pub fn train_rank_device(
    group: DeviceGroup,
    problem: &Problem,
    cfg: &DemoConfig,
    device: &burn_tensor::Device,
    progress: &ProgressBar,
) -> Result<(Vec<StepRecord>, Vec<StepTiming>), SphereError> {
    let group = TimedGroup::new(group);
    let clock = group.clock();
    let lead = group.rank() == 0;
    let grid = ProcessGrid::from_group(group, cfg.polar, cfg.azimuth)?;
    model::train_all(
        problem,
        Some(grid),
        device,
        cfg.steps,
        Some(&clock),
        progress,
        lead,
    )
}

/// [`train`] with the distributed run's ranks moving tensors by
/// `transport`.
///
/// # Errors
/// As [`train`].
pub fn train_on(
    cfg: &DemoConfig,
    polar: usize,
    azimuth: usize,
    transport: DemoTransport,
    progress: &ProgressBar,
) -> Result<Run, DemoError> {
    let problem = check_grid(cfg, polar, azimuth)?;
    train_problem(&problem, cfg, polar, azimuth, transport, progress)
}

/// Train on a `polar × azimuth` grid of threads (`1 × 1`: the serial
/// transforms, no communication).
///
/// # Errors
/// [`DemoError::Grid`] for a grid that does not fit the field;
/// [`DemoError::Rank`] when a rank fails or the ranks' replicated results
/// differ.
pub fn train(
    cfg: &DemoConfig,
    polar: usize,
    azimuth: usize,
    progress: &ProgressBar,
) -> Result<Run, DemoError> {
    train_on(cfg, polar, azimuth, DemoTransport::Threads, progress)
}

fn train_problem(
    problem: &Problem,
    cfg: &DemoConfig,
    polar: usize,
    azimuth: usize,
    transport: DemoTransport,
    progress: &ProgressBar,
) -> Result<Run, DemoError> {
    let grid_name = format!("{polar}x{azimuth}");
    let device = transport.device()?;
    if (polar, azimuth) == (1, 1) {
        let (records, timings) = model::train_all::<HostCollective<LocalCommunicator>>(
            problem, None, &device, cfg.steps, None, progress, true,
        )
        .map_err(|e| DemoError::Rank {
            grid: "serial".into(),
            rank: 0,
            message: e.to_string(),
        })?;
        return Ok(Run { records, timings });
    }
    let cfg = DemoConfig {
        polar,
        azimuth,
        ..cfg.clone()
    };
    let runs = match transport {
        DemoTransport::Threads => {
            LocalWorld::new(polar * azimuth).run(|comm| train_rank(comm, problem, &cfg, progress))
        }
        DemoTransport::Device | DemoTransport::Wgpu => DeviceWorld::shared(polar * azimuth, device)
            .run(|group, device| train_rank_device(group, problem, &cfg, device, progress)),
    }
    .map_err(|e| match e {
        WorldError::Empty => grid_error(&cfg, polar, azimuth, "no ranks".into()),
        WorldError::Rank { rank, error } => DemoError::Rank {
            grid: grid_name.clone(),
            rank,
            message: error.to_string(),
        },
    })?;
    // Replicated: every rank must have computed the very same numbers.
    for (rank, r) in runs.iter().enumerate() {
        if r.0 != runs[0].0 {
            return Err(DemoError::Rank {
                grid: grid_name,
                rank,
                message: "its replicated loss or gradients differ from rank 0's".into(),
            });
        }
    }
    let timings: Vec<Vec<StepTiming>> = runs.iter().map(|r| r.1.clone()).collect();
    Ok(Run {
        records: runs.into_iter().next().expect("at least one rank").0,
        timings: fold_timings(&timings),
    })
}

/// One step of the comparison.
#[derive(Clone, Debug, PartialEq)]
pub struct StepComparison {
    /// Distributed loss.
    pub distributed: f64,
    /// Serial loss.
    pub serial: f64,
    /// Largest gradient difference relative to the serial gradient's
    /// largest entry.
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

/// `|a − b| / scale`, infinite for NaN.
fn rel(diff: f64, scale: f64) -> f64 {
    let d = diff / scale.max(f64::MIN_POSITIVE);
    if d.is_nan() { f64::INFINITY } else { d }
}

/// Compare the runs step by step: each loss relative to the serial loss,
/// each gradient's largest difference relative to the serial gradient's
/// largest entry. They agree when everything is within `tolerance` and
/// both ran the same, non-zero, number of steps.
///
/// # Example
/// ```
/// use ruda_cli::demo::{StepRecord, compare};
/// let a = vec![StepRecord { loss: 1.0, grads: vec![0.5, 1e-3] }];
/// let mut b = a.clone();
/// assert!(compare(&a, &b, 1e-12).agree);
/// b[0].grads[1] += 1e-9;
/// assert!(!compare(&a, &b, 1e-12).agree);
/// ```
pub fn compare(distributed: &[StepRecord], serial: &[StepRecord], tolerance: f64) -> Verdict {
    let steps: Vec<StepComparison> = distributed
        .iter()
        .zip(serial)
        .map(|(d, s)| compare_step(d, s))
        .collect();
    let same_length = distributed.len() == serial.len();
    verdict(steps, same_length, tolerance)
}

/// One step of [`compare`].
pub fn compare_step(d: &StepRecord, s: &StepRecord) -> StepComparison {
    StepComparison {
        distributed: d.loss,
        serial: s.loss,
        grad_diff: if d.grads.len() == s.grads.len() {
            let diff = d
                .grads
                .iter()
                .zip(&s.grads)
                .map(|(a, b)| (a - b).abs())
                .fold(0.0, f64::max);
            let scale = s.grads.iter().map(|g| g.abs()).fold(0.0, f64::max);
            if d.grads.iter().chain(&s.grads).any(|g| g.is_nan()) {
                f64::INFINITY
            } else {
                rel(diff, scale)
            }
        } else {
            f64::INFINITY
        },
    }
}

/// The verdict on compared steps: they agree when there is at least one,
/// both runs ran as many (`same_length`), and every loss and gradient is
/// within `tolerance`.
fn verdict(steps: Vec<StepComparison>, same_length: bool, tolerance: f64) -> Verdict {
    let worst = steps
        .iter()
        .map(|c| rel((c.distributed - c.serial).abs(), c.serial.abs()).max(c.grad_diff))
        .fold(0.0, f64::max);
    let agree = same_length && !steps.is_empty() && worst <= tolerance;
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
    run_on(cfg, DemoTransport::Threads, out)
}

/// [`run`] with the distributed run's threads moving tensors by
/// `transport`.
///
/// # Errors
/// As [`run`].
pub fn run_on(
    cfg: &DemoConfig,
    transport: DemoTransport,
    out: &mut impl Write,
) -> Result<Verdict, DemoError> {
    let problem = check_grid(cfg, cfg.polar, cfg.azimuth)?;
    // A device this build lacks is refused before anything is printed.
    transport.device()?;
    let ranks = match transport {
        DemoTransport::Threads => "threads",
        DemoTransport::Device => {
            "threads sharing one Flex device (device-resident collectives, no host staging)"
        }
        DemoTransport::Wgpu => {
            "threads sharing one wgpu device (device-resident collectives; the transforms' steps and the serial model on the device too)"
        }
    };
    header(cfg, ranks, out)?;
    let bar = progress(cfg);
    let compared = turns::in_turns(&problem, cfg, transport, &bar)?;
    bar.finish_and_clear();
    let same_length = compared.steps.len() == cfg.steps;
    let v = verdict(compared.steps, same_length, TOLERANCE);
    report(cfg, v, &compared.distributed, &compared.serial, out)
}

/// Run the demo with one rank per MPI process (every process calls this);
/// rank 0 also runs the serial model, in a thread and in turns with its
/// distributed steps (each step's replicated results checked across the
/// ranks by a reduction, then compared and dropped), writes the report,
/// and every rank returns rank 0's verdict.
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
    let (me, n) = (world.rank(), world.size());
    if n != cfg.polar * cfg.azimuth {
        return Err(DemoError::WorldSize {
            polar: cfg.polar,
            azimuth: cfg.azimuth,
            ranks: n,
        });
    }
    let problem = check_grid(cfg, cfg.polar, cfg.azimuth)?;
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
    // Rank 0 trains the serial model in a thread, in turns with its own
    // distributed steps (`turns`): only each step's comparison is kept.
    let compared = std::thread::scope(|scope| {
        let (record_tx, record_rx) = std::sync::mpsc::sync_channel(1);
        let (resume_tx, resume_rx) = std::sync::mpsc::sync_channel(1);
        let serial = (me == 0).then(|| {
            let (problem, bar) = (&problem, &bar);
            scope.spawn(move || {
                let device = burn_tensor::Device::flex();
                turns::serial_side(
                    problem,
                    &device,
                    cfg.steps,
                    bar,
                    vec![record_rx],
                    vec![resume_tx],
                )
            })
        });
        let comm = crate::timed_comm::TimedComm::new(world);
        let clock = comm.clock();
        let lead = me == 0;
        let mut step = 0;
        let trained = ProcessGrid::new(comm, cfg.polar, cfg.azimuth)
            .map_err(SphereError::from)
            .map_err(turns::TurnError::from)
            .and_then(|grid| {
                model::train::<_, turns::TurnError>(
                    &problem,
                    Some(grid),
                    &burn_tensor::Device::flex(),
                    cfg.steps,
                    Some(&clock),
                    lead.then_some(&bar),
                    |record, timing| {
                        // Replicated: the same numbers on every rank.
                        let flat: Vec<f64> = std::iter::once(record.loss)
                            .chain(record.grads.iter().copied())
                            .collect();
                        let (mut hi, mut lo) = (flat.clone(), flat);
                        let fail = |e: ruda_comm::CommError| {
                            turns::TurnError::Sphere(SphereError::from(ruda_tensor::Error::from(e)))
                        };
                        check.all_reduce(&mut hi, ReduceOp::Max).map_err(fail)?;
                        check.all_reduce(&mut lo, ReduceOp::Min).map_err(fail)?;
                        // Bit for bit (a NaN on every rank is the same
                        // NaN: the comparison with the serial run names it).
                        let same = hi.iter().zip(&lo).all(|(a, b)| a.to_bits() == b.to_bits());
                        if !same {
                            return Err(turns::TurnError::Replicas { step });
                        }
                        // The step's time: the slowest rank's wall time, the
                        // ranks' mean communication time.
                        let all = check
                            .all_gather_vec(&[timing.wall, timing.comm])
                            .map_err(fail)?;
                        let ranks = (all.len() / 2).max(1) as f64;
                        let folded = StepTiming {
                            wall: all.chunks(2).map(|p| p[0]).fold(0.0, f64::max),
                            comm: all.chunks(2).map(|p| p[1]).sum::<f64>() / ranks,
                        };
                        step += 1;
                        // Rank 0 hands the step over and waits for the serial
                        // step; every rank then hears whether to go on (so
                        // that none times its next step across the serial
                        // one, and all stop together if the serial run did).
                        let mut go = [1u8];
                        if me == 0 {
                            let handed = record_tx.send((record, folded)).is_ok()
                                && resume_rx.recv().is_ok();
                            go[0] = u8::from(handed);
                        }
                        check.broadcast(&mut go, 0).map_err(fail)?;
                        if go[0] == 1 {
                            Ok(())
                        } else {
                            Err(turns::TurnError::Stopped)
                        }
                    },
                )
            });
        // The serial side learns of a failure here by its ends closing.
        drop(record_tx);
        drop(resume_rx);
        let serial = serial.map(|h| h.join());
        (trained, serial)
    });
    let (trained, serial) = compared;
    let serial_failed = |message: String| DemoError::Rank {
        grid: "serial".into(),
        rank: 0,
        message,
    };
    // Rank 0's outcome; every rank hears it (0: failed, 1: the runs
    // differ, 2: they agree) before any returns.
    let outcome: Option<Result<Verdict, DemoError>> = match serial {
        None => None,
        Some(Err(_)) => Some(Err(serial_failed("the serial run panicked".into()))),
        Some(Ok(Err(turns::TurnError::Stopped))) => Some(Err(trained.as_ref().err().map_or_else(
            || serial_failed("the serial run stopped".into()),
            |e| rank_err(e),
        ))),
        Some(Ok(Err(e))) => Some(Err(serial_failed(e.to_string()))),
        Some(Ok(Ok(c))) => Some(match &trained {
            Err(e) => Err(rank_err(e)),
            Ok(()) => {
                bar.finish_and_clear();
                let same_length = c.steps.len() == cfg.steps;
                let v = verdict(c.steps, same_length, TOLERANCE);
                report(cfg, v, &c.distributed, &c.serial, out)
            }
        }),
    };
    let mut status = [match &outcome {
        Some(Ok(v)) => 1 + u8::from(v.agree),
        _ => 0,
    }];
    let heard = check.broadcast(&mut status, 0);
    if let Some(outcome) = outcome {
        return outcome;
    }
    trained.map_err(|e| rank_err(&e))?;
    heard.map_err(|e| rank_err(&e))?;
    match status[0] {
        0 => Err(DemoError::Rank {
            grid: format!("{}x{}", cfg.polar, cfg.azimuth),
            rank: 0,
            message: "rank 0 failed (its own report says how)".into(),
        }),
        s => Ok(Verdict {
            steps: Vec::new(),
            worst: 0.0,
            agree: s == 2,
        }),
    }
}

fn progress(cfg: &DemoConfig) -> ProgressBar {
    let bar = ProgressBar::new(2 * cfg.steps as u64);
    bar.set_style(
        ProgressStyle::with_template("{spinner} {msg} [{bar:30}] {pos}/{len} steps {elapsed}")
            .expect("valid template"),
    );
    bar.set_message("training (distributed, then serial)");
    bar
}

fn header(cfg: &DemoConfig, ranks: &str, out: &mut impl Write) -> std::io::Result<()> {
    let lmax = cfg.nlat.div_ceil(2).min(cfg.nlon / 2 + 1);
    writeln!(
        out,
        "ruda demo: a spectral model on the sphere, {} channels on a {} × {} equiangular grid (lmax = mmax = {lmax}), {} Adam steps",
        cfg.channels, cfg.nlat, cfg.nlon, cfg.steps
    )?;
    writeln!(
        out,
        "it learns one step of solid-body rotation ({:.2} rad about the polar axis), diffusion and channel coupling, and the same rotation and diffusion of a wind (a tangential vector field, through the vector transforms), on one- and two-step rollouts",
        problem::ROTATION
    )?;
    writeln!(
        out,
        "distributed on a {}x{} polar × azimuth grid of {ranks}; serial with the serial transforms",
        cfg.polar, cfg.azimuth
    )
}

/// Print the compared steps' table and the verdict line.
fn report(
    cfg: &DemoConfig,
    verdict: Verdict,
    distributed: &[StepTiming],
    serial: &[StepTiming],
    out: &mut impl Write,
) -> Result<Verdict, DemoError> {
    writeln!(
        out,
        "{:>5} {:>22} {:>22} {:>14} {:>27} {:>10}",
        "step",
        "distributed loss",
        "serial loss",
        "max grad diff",
        "distributed ms (comm ms)",
        "serial ms"
    )?;
    for (i, s) in verdict.steps.iter().enumerate() {
        let (d, t) = (distributed[i], serial[i]);
        writeln!(
            out,
            "{:>5} {:>22.15e} {:>22.15e} {:>14.2e} {:>17.1} {:>9} {:>10.1}",
            i,
            s.distributed,
            s.serial,
            s.grad_diff,
            1e3 * d.wall,
            format!("({:.1})", 1e3 * d.comm),
            1e3 * t.wall
        )?;
    }
    let (wall, comm): (f64, f64) = distributed
        .iter()
        .fold((0.0, 0.0), |(w, c), t| (w + t.wall, c + t.comm));
    let serial_wall: f64 = serial.iter().map(|t| t.wall).sum();
    writeln!(
        out,
        "distributed steps {wall:.2} s ({:.2} s compute + {:.2} s communication, {:.0}%), serial steps {serial_wall:.2} s",
        wall - comm,
        comm,
        100.0 * comm / wall.max(f64::MIN_POSITIVE)
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
