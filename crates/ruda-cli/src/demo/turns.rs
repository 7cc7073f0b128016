//! The demo's two runs in turns: every rank of the distributed run does a
//! step and hands its loss and gradients over; the serial model then does
//! the same step, compares, and lets the ranks go on. Only the comparison
//! of each step is kept (three numbers and the timings), so the demo's
//! memory does not grow with `--steps`; and the two runs never compute at
//! the same time, so each step's timing is its own.
//!
//! Every hand-over goes through a one-slot channel between one rank and
//! the serial thread, and each side then waits for the other's: a side that
//! fails or panics drops its ends (and ends that no rank took are dropped
//! once the world returns or unwinds), and the other side's next hand-over
//! fails with [`TurnError::Stopped`] instead of waiting for ever.

use std::sync::Mutex;
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};

use burn_tensor::Device;
use indicatif::ProgressBar;
use ruda_comm::{Communicator, LocalCommunicator, LocalWorld, WorldError};
use ruda_sphere::SphereError;
use ruda_tensor::{DeviceWorld, Group, HostCollective, ProcessGrid};
use thiserror::Error;

use super::problem::Problem;
use super::{
    DemoConfig, DemoError, DemoTransport, StepComparison, StepRecord, StepTiming, compare_step,
    grid_error, model,
};
use crate::timed_comm::{CommClock, TimedComm};
use crate::timed_group::TimedGroup;

/// Why a turn could not be taken.
#[derive(Debug, Error)]
pub(crate) enum TurnError {
    /// A transform's or primitive's error.
    #[error(transparent)]
    Sphere(#[from] SphereError),
    /// The other side stopped (failed or panicked) before this hand-over.
    #[error("the other run stopped before this step's hand-over")]
    Stopped,
    /// The ranks' replicated loss or gradients differ (found by a
    /// reduction: which rank is not known; the MPI demo's check).
    #[cfg_attr(not(feature = "mpi"), allow(dead_code))]
    #[error("the ranks' replicated loss or gradients differ at step {step}")]
    Replicas {
        /// The step.
        step: usize,
    },
    /// A rank's replicated loss or gradients differ from rank 0's.
    #[error("rank {rank}'s replicated loss or gradients differ from rank 0's at step {step}")]
    Replica {
        /// The rank.
        rank: usize,
        /// The step.
        step: usize,
    },
}

/// What the runs in turns leave: each step's comparison and timings.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Compared {
    /// Each step's comparison.
    pub(crate) steps: Vec<StepComparison>,
    /// Each distributed step's time (the slowest rank's wall time, the
    /// ranks' mean communication time).
    pub(crate) distributed: Vec<StepTiming>,
    /// Each serial step's time.
    pub(crate) serial: Vec<StepTiming>,
}

/// A rank's ends of its hand-over channels: its records out, the serial
/// thread's go-ahead in.
type RankEnds = (SyncSender<(StepRecord, StepTiming)>, Receiver<()>);

/// Drops every rank's ends still in the slots when it goes.
struct Release<'a>(&'a [Mutex<Option<RankEnds>>]);

impl Drop for Release<'_> {
    fn drop(&mut self) {
        for slot in self.0 {
            slot.lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .take();
        }
    }
}

/// Train on `cfg`'s grid and serially in turns, comparing as they go.
///
/// # Errors
/// [`DemoError::Rank`] naming the rank (or the serial run) that failed, or
/// whose replicated results differ.
pub(crate) fn in_turns(
    problem: &Problem,
    cfg: &DemoConfig,
    transport: DemoTransport,
    progress: &ProgressBar,
) -> Result<Compared, DemoError> {
    let n = cfg.polar * cfg.azimuth;
    let grid_name = format!("{}x{}", cfg.polar, cfg.azimuth);
    let (mut ends, mut records, mut resume) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..n {
        let (record_tx, record_rx) = sync_channel(1);
        let (resume_tx, resume_rx) = sync_channel(1);
        ends.push(Mutex::new(Some((record_tx, resume_rx))));
        records.push(record_rx);
        resume.push(resume_tx);
    }
    let take = |rank: usize| -> RankEnds {
        ends[rank]
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
            .expect("each rank takes its own ends once")
    };
    debug_assert!(n > 0, "check_grid refuses an empty grid");
    let device = transport.device()?;
    let (world, serial) = std::thread::scope(|scope| {
        let serial =
            scope.spawn(|| serial_side(problem, &device, cfg.steps, progress, records, resume));
        // Ends that no rank took (a world that failed before starting a
        // rank, or a panic here) are dropped before the serial thread is
        // joined, so that its next hand-over fails instead of waiting.
        let release = Release(&ends);
        let world = match transport {
            DemoTransport::Threads => LocalWorld::new(n).run(|comm| {
                let ends = take(comm.rank());
                let comm = TimedComm::new(comm);
                let clock = comm.clock();
                let grid =
                    ProcessGrid::new(comm, cfg.polar, cfg.azimuth).map_err(SphereError::from)?;
                rank_side(problem, cfg, grid, &device, &clock, progress, ends)
            }),
            DemoTransport::Device | DemoTransport::Wgpu => DeviceWorld::shared(n, device.clone())
                .run(|group, device| {
                    let ends = take(group.rank());
                    let group = TimedGroup::new(group);
                    let clock = group.clock();
                    let grid = ProcessGrid::from_group(group, cfg.polar, cfg.azimuth)
                        .map_err(SphereError::from)?;
                    rank_side(problem, cfg, grid, device, &clock, progress, ends)
                }),
        };
        drop(release);
        (world, serial.join())
    });
    let serial_failed = |message: String| DemoError::Rank {
        grid: "serial".into(),
        rank: 0,
        message,
    };
    match serial {
        Err(_) => Err(serial_failed("the serial run panicked".into())),
        Ok(Err(TurnError::Replica { rank, step })) => Err(DemoError::Rank {
            grid: grid_name,
            rank,
            message: format!(
                "its replicated loss or gradients differ from rank 0's at step {step}"
            ),
        }),
        Ok(Err(e @ (TurnError::Sphere(_) | TurnError::Replicas { .. }))) => {
            Err(serial_failed(e.to_string()))
        }
        Ok(result) => match world {
            Err(WorldError::Empty) => {
                Err(grid_error(cfg, cfg.polar, cfg.azimuth, "no ranks".into()))
            }
            Err(WorldError::Rank { rank, error }) => Err(DemoError::Rank {
                grid: grid_name,
                rank,
                message: error.to_string(),
            }),
            Ok(_) => result.map_err(|e| serial_failed(e.to_string())),
        },
    }
}

/// One rank of the distributed run: train, handing each step over.
fn rank_side<G: Group>(
    problem: &Problem,
    cfg: &DemoConfig,
    grid: ProcessGrid<G>,
    device: &Device,
    clock: &CommClock,
    progress: &ProgressBar,
    (record_tx, resume_rx): RankEnds,
) -> Result<(), TurnError> {
    let lead = grid.world().rank() == 0;
    model::train::<G, TurnError>(
        problem,
        Some(grid),
        device,
        cfg.steps,
        Some(clock),
        lead.then_some(progress),
        |record, timing| {
            record_tx
                .send((record, timing))
                .map_err(|_| TurnError::Stopped)?;
            resume_rx.recv().map_err(|_| TurnError::Stopped)
        },
    )
}

/// The serial run: before each of its steps, the distributed step's
/// records from every rank; after it, the comparison and the go-ahead.
pub(crate) fn serial_side(
    problem: &Problem,
    device: &Device,
    steps: usize,
    progress: &ProgressBar,
    records: Vec<Receiver<(StepRecord, StepTiming)>>,
    resume: Vec<SyncSender<()>>,
) -> Result<Compared, TurnError> {
    let collect = |records: &[Receiver<(StepRecord, StepTiming)>]| {
        records
            .iter()
            .map(|r| r.recv().map_err(|_| TurnError::Stopped))
            .collect::<Result<Vec<_>, _>>()
    };
    let mut out = Compared {
        steps: Vec::with_capacity(steps),
        distributed: Vec::with_capacity(steps),
        serial: Vec::with_capacity(steps),
    };
    if steps == 0 {
        return Ok(out);
    }
    let mut pending = collect(&records)?;
    model::train::<HostCollective<LocalCommunicator>, TurnError>(
        problem,
        None,
        device,
        steps,
        None,
        Some(progress),
        |record, timing| {
            let step = out.steps.len();
            let first = &pending[0].0;
            if let Some(rank) = pending.iter().position(|(r, _)| r != first) {
                return Err(TurnError::Replica { rank, step });
            }
            out.steps.push(compare_step(first, &record));
            let ranks = pending.len() as f64;
            out.distributed.push(StepTiming {
                wall: pending.iter().map(|(_, t)| t.wall).fold(0.0, f64::max),
                comm: pending.iter().map(|(_, t)| t.comm).sum::<f64>() / ranks,
            });
            out.serial.push(timing);
            for go in &resume {
                go.send(()).map_err(|_| TurnError::Stopped)?;
            }
            if step + 1 < steps {
                pending = collect(&records)?;
            }
            Ok(())
        },
    )?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small() -> Problem {
        Problem::new(9, 16, 1).expect("a small problem")
    }

    fn record(loss: f64) -> (StepRecord, StepTiming) {
        (
            StepRecord {
                loss,
                grads: vec![loss; 3],
            },
            StepTiming::default(),
        )
    }

    /// Two "ranks" hand over different replicated records: the serial side
    /// names rank 1 and step 0.
    #[test]
    fn a_replica_that_differs_is_named() {
        let (tx0, rx0) = sync_channel(1);
        let (tx1, rx1) = sync_channel(1);
        let (go0, _keep0) = sync_channel(1);
        let (go1, _keep1) = sync_channel(1);
        tx0.send(record(1.0)).unwrap();
        tx1.send(record(2.0)).unwrap();
        let e = serial_side(
            &small(),
            &Device::flex(),
            3,
            &ProgressBar::hidden(),
            vec![rx0, rx1],
            vec![go0, go1],
        )
        .unwrap_err();
        assert!(matches!(e, TurnError::Replica { rank: 1, step: 0 }), "{e}");
    }

    /// A rank that stops before its hand-over (its sender dropped) stops
    /// the serial side at once instead of leaving it waiting.
    #[test]
    fn a_rank_that_stops_stops_the_serial_run() {
        let (tx, rx) = sync_channel::<(StepRecord, StepTiming)>(1);
        let (go, _keep) = sync_channel(1);
        drop(tx);
        let e = serial_side(
            &small(),
            &Device::flex(),
            3,
            &ProgressBar::hidden(),
            vec![rx],
            vec![go],
        )
        .unwrap_err();
        assert!(matches!(e, TurnError::Stopped), "{e}");
    }

    /// A serial side that is gone (its go-ahead sender dropped) stops a rank
    /// at its first hand-over.
    #[test]
    fn a_serial_run_that_stops_stops_the_ranks() {
        let cfg = DemoConfig {
            polar: 1,
            azimuth: 1,
            steps: 3,
            channels: 1,
            nlat: 9,
            nlon: 16,
        };
        let (record_tx, record_rx) = sync_channel(1);
        let (go, resume_rx) = sync_channel::<()>(1);
        drop(go);
        let ends = Mutex::new(Some((record_tx, resume_rx)));
        let problem = small();
        let e = LocalWorld::new(1).run(|comm| {
            let ends = ends.lock().unwrap().take().expect("one rank");
            let comm = TimedComm::new(comm);
            let clock = comm.clock();
            let grid = ProcessGrid::new(comm, 1, 1).map_err(SphereError::from)?;
            let device = Device::flex();
            rank_side(
                &problem,
                &cfg,
                grid,
                &device,
                &clock,
                &ProgressBar::hidden(),
                ends,
            )
        });
        assert!(
            matches!(
                &e,
                Err(WorldError::Rank {
                    rank: 0,
                    error: ruda_comm::RankError::Failed(TurnError::Stopped),
                })
            ),
            "{e:?}"
        );
        // The rank handed its first step over before it stopped.
        assert_eq!(record_rx.try_iter().count(), 1);
    }

    /// Ends that no rank took (a world that never started a rank) are
    /// dropped by `Release`, so the serial side, waiting for that rank's
    /// first step, stops instead of waiting for ever.
    #[test]
    fn ends_no_rank_took_are_released() {
        let (record_tx, record_rx) = sync_channel::<(StepRecord, StepTiming)>(1);
        let (go, resume_rx) = sync_channel(1);
        let ends = vec![Mutex::new(Some((record_tx, resume_rx)))];
        let problem = small();
        let e = std::thread::scope(|scope| {
            let serial = scope.spawn(|| {
                serial_side(
                    &problem,
                    &Device::flex(),
                    3,
                    &ProgressBar::hidden(),
                    vec![record_rx],
                    vec![go],
                )
            });
            drop(Release(&ends));
            serial.join().expect("no panic")
        })
        .unwrap_err();
        assert!(matches!(e, TurnError::Stopped), "{e}");
        assert!(ends[0].lock().unwrap().is_none());
    }
}
