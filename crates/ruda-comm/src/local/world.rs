//! `LocalWorld`: run one closure per rank on threads of this process.

use std::any::Any;
use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::time::Duration;

use super::communicator::LocalCommunicator;
use super::group::{Group, World};
use crate::PeerFailureCause;

/// The deadline of every wait when neither the builder nor
/// `RUDA_TIMEOUT_SECS` sets one.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);

/// The environment variable that sets the default deadline, in seconds
/// (fractions allowed).
pub const TIMEOUT_ENV: &str = "RUDA_TIMEOUT_SECS";

/// How one rank of a [`LocalWorld`] run ended, when it did not succeed.
#[derive(Debug, PartialEq)]
pub enum RankError<E> {
    /// The rank's closure returned this error.
    Failed(E),
    /// The rank's closure panicked with this message.
    Panicked(String),
}

impl<E> RankError<E> {
    /// The closure's error, if it returned one (rather than panicking).
    pub fn into_error(self) -> Option<E> {
        match self {
            RankError::Failed(e) => Some(e),
            RankError::Panicked(_) => None,
        }
    }
}

impl<E: fmt::Display> fmt::Display for RankError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RankError::Failed(e) => write!(f, "{e}"),
            RankError::Panicked(m) => write!(f, "panicked: {m}"),
        }
    }
}

/// Why a [`LocalWorld::run`] did not give every rank's result.
#[derive(Debug, PartialEq)]
pub enum WorldError<E> {
    /// The world has no ranks.
    Empty,
    /// A rank failed: the lowest rank that panicked if any did (the others'
    /// errors are usually its consequence), else the lowest rank that
    /// returned an error.
    Rank {
        /// The failing rank.
        rank: usize,
        /// How it failed.
        error: RankError<E>,
    },
}

impl<E: fmt::Display> fmt::Display for WorldError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WorldError::Empty => f.write_str("a local world needs at least one rank"),
            WorldError::Rank { rank, error } => write!(f, "rank {rank}: {error}"),
        }
    }
}

impl<E: fmt::Debug + fmt::Display> std::error::Error for WorldError<E> {}

impl<E> WorldError<E> {
    /// The rank's error, if the failure is a returned error.
    pub fn into_error(self) -> Option<E> {
        match self {
            WorldError::Rank { error, .. } => error.into_error(),
            WorldError::Empty => None,
        }
    }
}

/// A world of `size` ranks as threads of this process, the embedded
/// transport and the test bed.
///
/// # Example
/// ```
/// use std::time::Duration;
/// use ruda_comm::{Communicator, LocalWorld, ReduceOp};
/// let world = LocalWorld::new(4).timeout(Duration::from_secs(10));
/// let out = world.run(|comm| {
///     let mut x = [1.0f32];
///     comm.all_reduce(&mut x, ReduceOp::Sum)?;
///     Ok::<_, ruda_comm::CommError>(x[0])
/// }).unwrap();
/// assert_eq!(out, vec![4.0; 4]);
/// ```
#[derive(Clone, Debug)]
pub struct LocalWorld {
    size: usize,
    timeout: Option<Duration>,
    pin: Option<bool>,
    record: bool,
}

impl LocalWorld {
    /// A world of `size` ranks with the default deadline.
    pub fn new(size: usize) -> Self {
        LocalWorld {
            size,
            timeout: None,
            pin: None,
            record: true,
        }
    }

    /// Keep every communicator's flight recorder (`true`, the default: a
    /// few tens of nanoseconds per call) or not (`false`: errors then carry
    /// no histories). Meant for measuring what the recorder costs.
    ///
    /// # Example
    /// ```
    /// use ruda_comm::{Communicator, LocalWorld};
    /// let h = LocalWorld::new(1).flight_recorder(false).run(|c| {
    ///     c.barrier()?;
    ///     Ok::<_, ruda_comm::CommError>(c.flight_record().calls.len())
    /// }).unwrap();
    /// assert_eq!(h, vec![0]);
    /// ```
    pub fn flight_recorder(mut self, on: bool) -> Self {
        self.record = on;
        self
    }

    /// Pin rank `r`'s thread to the `r`-th core this process may run on
    /// (`true`, the default unless `RUDA_PIN=0`), or let the ranks float
    /// (`false`). Pinning applies to [`LocalWorld::run`] and
    /// [`LocalWorld::run_each`] and only when the world has no more ranks
    /// than those cores; [`LocalWorld::pinned_cores`] says where they run.
    ///
    /// # Example
    /// ```
    /// use ruda_comm::LocalWorld;
    /// assert_eq!(LocalWorld::new(2).pin_threads(false).pinned_cores(), None);
    /// ```
    pub fn pin_threads(mut self, on: bool) -> Self {
        self.pin = Some(on);
        self
    }

    /// The core of each rank when [`LocalWorld::run`] pins them, else `None`
    /// (pinning turned off, or more ranks than cores).
    ///
    /// # Example
    /// ```
    /// use ruda_comm::LocalWorld;
    /// let cores = std::thread::available_parallelism().map_or(1, |c| c.get());
    /// assert_eq!(LocalWorld::new(cores + 1).pinned_cores(), None);
    /// ```
    pub fn pinned_cores(&self) -> Option<Vec<usize>> {
        super::affinity::Placement::for_world(self.size, self.pin).cores()
    }

    /// Set the deadline of every wait, overriding `RUDA_TIMEOUT_SECS`.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Number of ranks.
    pub fn size(&self) -> usize {
        self.size
    }

    /// The deadline in force: the builder's, else `RUDA_TIMEOUT_SECS`, else
    /// [`DEFAULT_TIMEOUT`]. An unparsable variable is ignored.
    pub fn effective_timeout(&self) -> Duration {
        self.timeout.unwrap_or_else(|| {
            std::env::var(TIMEOUT_ENV)
                .ok()
                .and_then(|v| v.trim().parse::<f64>().ok())
                .filter(|s| s.is_finite() && *s > 0.0)
                .map_or(DEFAULT_TIMEOUT, Duration::from_secs_f64)
        })
    }

    /// Build the communicators of every rank without running anything, for
    /// callers that manage their own threads. Each must move to its own thread.
    ///
    /// # Example
    /// ```
    /// use ruda_comm::{Communicator, LocalWorld};
    /// let comms = LocalWorld::new(2).communicators();
    /// let handles: Vec<_> = comms.into_iter().map(|c| std::thread::spawn(move || {
    ///     c.barrier().map(|_| c.rank())
    /// })).collect();
    /// let ranks: Vec<usize> = handles.into_iter().map(|h| h.join().unwrap().unwrap()).collect();
    /// assert_eq!(ranks, vec![0, 1]);
    /// ```
    pub fn communicators(&self) -> Vec<LocalCommunicator> {
        self.build().1
    }

    /// The world's shared state and every rank's communicator.
    fn build(&self) -> (Option<Arc<World>>, Vec<LocalCommunicator>) {
        if self.size == 0 {
            return (None, Vec::new());
        }
        let world = World::new(self.size, self.effective_timeout(), self.record);
        let group = Group::new(&world, (0..self.size).collect());
        let comms = (0..self.size)
            .map(|r| LocalCommunicator::new(group.clone(), r))
            .collect();
        (Some(world), comms)
    }

    /// Run `f` on every rank, each on its own thread with its own
    /// communicator, and return every rank's outcome in rank order.
    ///
    /// When a rank's closure returns or panics, every group the rank
    /// belongs to (the world and every split of it) learns at once that the
    /// rank will not arrive again, so peers still waiting for it fail
    /// promptly with [`crate::CommError::PeerFailure`]
    /// ([`PeerFailureCause::Finished`] or [`PeerFailureCause::Panicked`]) —
    /// also when the rank's communicators are still alive, e.g. held by an
    /// autodiff graph. (With [`LocalWorld::communicators`] and threads of
    /// your own, the same happens only when a communicator is dropped.)
    ///
    /// # Example
    /// ```
    /// use ruda_comm::{LocalWorld, RankError};
    /// let out = LocalWorld::new(2).run_each(|c| {
    ///     use ruda_comm::Communicator;
    ///     if c.rank() == 1 { Err("no") } else { Ok(c.rank()) }
    /// });
    /// assert_eq!(out, vec![Ok(0), Err(RankError::Failed("no"))]);
    /// ```
    pub fn run_each<R, E, F>(&self, f: F) -> Vec<Result<R, RankError<E>>>
    where
        R: Send,
        E: Send,
        F: Fn(LocalCommunicator) -> Result<R, E> + Sync,
    {
        let (world, comms) = self.build();
        let placement = &super::affinity::Placement::for_world(self.size, self.pin);
        let f = &f;
        let world = &world;
        std::thread::scope(|scope| {
            let handles: Vec<_> = comms
                .into_iter()
                .enumerate()
                .map(|(rank, comm)| {
                    std::thread::Builder::new()
                        .name(format!("ruda-rank-{rank}"))
                        .spawn_scoped(scope, move || {
                            placement.enter(rank);
                            let out = catch_unwind(AssertUnwindSafe(|| f(comm)));
                            let cause = match out {
                                Ok(_) => PeerFailureCause::Finished,
                                Err(_) => PeerFailureCause::Panicked,
                            };
                            if let Some(w) = world {
                                w.finish(rank, cause);
                            }
                            match out {
                                Ok(Ok(r)) => Ok(r),
                                Ok(Err(e)) => Err(RankError::Failed(e)),
                                Err(p) => Err(RankError::Panicked(panic_message(p))),
                            }
                        })
                        .expect("spawn a rank thread")
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|p| Err(RankError::Panicked(panic_message(p))))
                })
                .collect()
        })
    }

    /// Run `f` on every rank and return every rank's result, or the first
    /// failure (see [`WorldError::Rank`]).
    ///
    /// # Errors
    /// [`WorldError::Empty`] for a world of zero ranks; [`WorldError::Rank`]
    /// when a rank returned an error or panicked.
    ///
    /// # Example
    /// ```
    /// use ruda_comm::{Communicator, LocalWorld};
    /// let ranks = LocalWorld::new(3).run(|c| Ok::<_, ()>(c.rank())).unwrap();
    /// assert_eq!(ranks, vec![0, 1, 2]);
    /// ```
    pub fn run<R, E, F>(&self, f: F) -> Result<Vec<R>, WorldError<E>>
    where
        R: Send,
        E: Send,
        F: Fn(LocalCommunicator) -> Result<R, E> + Sync,
    {
        if self.size == 0 {
            return Err(WorldError::Empty);
        }
        let results = self.run_each(f);
        let culprit = results
            .iter()
            .position(|r| matches!(r, Err(RankError::Panicked(_))))
            .or_else(|| results.iter().position(Result::is_err));
        match culprit {
            None => Ok(results
                .into_iter()
                .map(|r| r.ok().expect("all ok"))
                .collect()),
            Some(rank) => {
                let error = results
                    .into_iter()
                    .nth(rank)
                    .and_then(Result::err)
                    .expect("the culprit failed");
                Err(WorldError::Rank { rank, error })
            }
        }
    }
}

fn panic_message(p: Box<dyn Any + Send>) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_string()
    }
}
