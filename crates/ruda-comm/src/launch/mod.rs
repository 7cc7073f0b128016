//! One program, any launch: [`Launch`] runs a rank function as threads of
//! this process, or once per process when the program was started by an
//! MPI launcher (`mpirun`, `mpiexec`, `srun --mpi=pmix`), handing every
//! rank an [`AnyCommunicator`] either way.

mod any;

use core::fmt;
use std::time::Duration;

pub use any::AnyCommunicator;

use crate::{CommError, LocalWorld, RankError, WorldError};

/// The variable that sets the number of thread ranks (when no MPI launcher
/// started the program): `RUDA_WORLD_SIZE=4`.
pub const WORLD_SIZE_ENV: &str = "RUDA_WORLD_SIZE";

/// Variables MPI launchers set in every process they start, any one of
/// which means one rank per process: Open MPI's `mpirun` (ORTE in 4.x,
/// PRRTE in 5.x: `OMPI_COMM_WORLD_*`, and PRRTE's PMIx rank), the PMI of
/// MPICH's and Intel MPI's Hydra (`PMI_*`, `MPI_LOCALNRANKS`), Slurm's
/// `srun --mpi=pmi2` (`PMI_FD`, `PMI_RANK`, `PMI_SIZE`) and
/// `srun --mpi=pmix` (`PMIX_RANK`), and MVAPICH's `mpirun_rsh`.
pub const MPI_LAUNCHER_ENV: [&str; 8] = [
    "OMPI_COMM_WORLD_SIZE",
    "OMPI_COMM_WORLD_RANK",
    "PMI_SIZE",
    "PMI_RANK",
    "PMI_FD",
    "PMIX_RANK",
    "MPI_LOCALNRANKS",
    "MV2_COMM_WORLD_SIZE",
];

/// Variables that show a process launcher started this program among
/// others, without any of [`MPI_LAUNCHER_ENV`]: an `srun` step of several
/// tasks without an MPI plugin (`SLURM_STEP_NUM_TASKS` above 1; a batch
/// script, task 0 of its allocation, runs in a step of one task), a PMIx
/// server's namespace without a rank
/// (`PMIX_NAMESPACE`), a Hydra proxy's control channel
/// (`HYDRA_CONTROL_FD`). Running each process as its own thread world
/// there would make several independent jobs, each thinking it is the
/// whole one, so [`Launch`] refuses to guess
/// ([`LaunchError::UnknownLauncher`]) until [`LAUNCH_ENV`] says which.
pub const OTHER_LAUNCHER_ENV: [&str; 3] =
    ["SLURM_STEP_NUM_TASKS", "PMIX_NAMESPACE", "HYDRA_CONTROL_FD"];

/// The variable that decides the mode outright: `RUDA_LAUNCH=threads` (for a
/// program started under a launcher that is not meant to be an MPI job,
/// such as a Slurm step with `MpiDefault=pmix`) or `RUDA_LAUNCH=mpi`.
pub const LAUNCH_ENV: &str = "RUDA_LAUNCH";

/// How [`Launch::run`] will run the ranks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LaunchMode {
    /// `n` threads of this process, over the local transport.
    Threads(usize),
    /// One rank in this process, of an MPI job; `variable` is the launcher's
    /// variable that said so.
    Mpi {
        /// The launcher's variable found in the environment.
        variable: &'static str,
    },
}

impl fmt::Display for LaunchMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LaunchMode::Threads(n) => {
                write!(f, "{n} thread rank{}", if *n == 1 { "" } else { "s" })
            }
            LaunchMode::Mpi { variable } => {
                write!(f, "one MPI process per rank (found {variable})")
            }
        }
    }
}

/// Why [`Launch::run`] did not give the ranks' results.
#[derive(Debug)]
pub enum LaunchError<E> {
    /// A rank failed: with threads, the lowest rank that panicked if any
    /// did, else the lowest that returned an error; under MPI, this
    /// process's rank.
    Rank {
        /// The failing rank.
        rank: usize,
        /// How it failed.
        error: RankError<E>,
    },
    /// [`WORLD_SIZE_ENV`] is set to something other than a positive number,
    /// or the thread count given is 0.
    WorldSize {
        /// The value found.
        value: String,
    },
    /// [`LAUNCH_ENV`] is set to something other than `threads` or `mpi`.
    Mode {
        /// The value found.
        value: String,
    },
    /// An MPI launcher started this program, but it was built without
    /// feature `mpi`: running on threads instead would start one
    /// independent world per process, each thinking it is the whole job.
    NoMpi {
        /// The launcher's variable found in the environment.
        variable: &'static str,
    },
    /// A process launcher started this program among others, but none of
    /// the MPI launchers' variables ([`MPI_LAUNCHER_ENV`]) is set (see
    /// [`OTHER_LAUNCHER_ENV`]): set [`LAUNCH_ENV`] to `mpi` or `threads`.
    UnknownLauncher {
        /// The variable found.
        variable: &'static str,
        /// Its value.
        value: String,
    },
    /// MPI did not start, or its world communicator could not be made.
    Mpi(CommError),
}

impl<E: fmt::Display> fmt::Display for LaunchError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LaunchError::Rank { rank, error } => write!(f, "rank {rank}: {error}"),
            LaunchError::WorldSize { value } => write!(
                f,
                "{WORLD_SIZE_ENV} must be a positive number of ranks, found {value:?}"
            ),
            LaunchError::Mode { value } => write!(
                f,
                "{LAUNCH_ENV} must be `threads` or `mpi`, found {value:?}"
            ),
            LaunchError::NoMpi { variable } => write!(
                f,
                "started by an MPI launcher ({variable} is set), but this program was built without ruda's `mpi` feature"
            ),
            LaunchError::UnknownLauncher { variable, value } => write!(
                f,
                "started by a process launcher ({variable}={value}) that sets none of the MPI launchers' variables: set {LAUNCH_ENV}=mpi to run one rank per process over MPI, or {LAUNCH_ENV}=threads to run each process as its own world of threads"
            ),
            LaunchError::Mpi(e) => write!(f, "MPI did not start: {e}"),
        }
    }
}

impl<E: fmt::Debug + fmt::Display> std::error::Error for LaunchError<E> {}

impl<E> LaunchError<E> {
    /// The rank's error, if the failure is one the rank function returned.
    ///
    /// # Example
    /// ```
    /// use ruda_comm::{LaunchError, RankError};
    /// let e: LaunchError<&str> = LaunchError::Rank { rank: 1, error: RankError::Failed("no data") };
    /// assert_eq!(e.into_error(), Some("no data"));
    /// ```
    pub fn into_error(self) -> Option<E> {
        match self {
            LaunchError::Rank { error, .. } => error.into_error(),
            _ => None,
        }
    }
}

/// Runs a rank function however the program was started: as threads of
/// this process, or once per process under an MPI launcher. The function
/// gets an [`AnyCommunicator`] either way, so training code is written
/// once.
///
/// Which one, in order: [`LAUNCH_ENV`] when set (`threads` or `mpi`); an
/// MPI launcher's variables ([`MPI_LAUNCHER_ENV`]) mean one rank per
/// process (the job's size is the launcher's `-n`); otherwise
/// [`WORLD_SIZE_ENV`] threads if set, else the count given to
/// [`Launch::threads`], else 1.
///
/// Under MPI a rank whose function fails (an error or a panic) prints its
/// error and ends the job (`MPI_Abort`, exit code 1): its peers would
/// otherwise wait for it until their deadline. With threads its peers learn
/// of it at once and [`Launch::run`] returns it.
///
/// # Example
/// ```
/// use ruda_comm::{Communicator, Launch, ReduceOp};
/// // `cargo run` → 3 threads; `RUDA_WORLD_SIZE=5 cargo run` → 5 threads;
/// // `mpirun -n 4 target/release/prog` (feature `mpi`) → 4 processes.
/// let out = Launch::new().threads(3).run(|comm| {
///     let mut x = [1.0f64];
///     comm.all_reduce(&mut x, ReduceOp::Sum)?;
///     Ok::<_, ruda_comm::CommError>((comm.rank(), x[0]))
/// }).unwrap();
/// // Every rank this process ran, in rank order.
/// # if std::env::var_os("RUDA_WORLD_SIZE").is_none() {
/// assert_eq!(out, vec![(0, 3.0), (1, 3.0), (2, 3.0)]);
/// # }
/// ```
#[derive(Clone, Debug, Default)]
pub struct Launch {
    threads: Option<usize>,
    timeout: Option<Duration>,
}

impl Launch {
    /// A launch with the defaults (see [`Launch`]).
    ///
    /// # Example
    /// See [`Launch`].
    pub fn new() -> Self {
        Self::default()
    }

    /// The number of thread ranks when neither an MPI launcher nor
    /// [`WORLD_SIZE_ENV`] says otherwise.
    ///
    /// # Example
    /// See [`Launch`].
    pub fn threads(mut self, n: usize) -> Self {
        self.threads = Some(n);
        self
    }

    /// The deadline of every wait, on either transport (default:
    /// `RUDA_TIMEOUT_SECS`, else [`crate::DEFAULT_TIMEOUT`]).
    ///
    /// # Example
    /// ```
    /// use std::time::Duration;
    /// let launch = ruda_comm::Launch::new().threads(2).timeout(Duration::from_secs(30));
    /// # let _ = launch;
    /// ```
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// How [`Launch::run`] will run, read from the environment now.
    ///
    /// # Errors
    /// [`LaunchError::WorldSize`] for a bad [`WORLD_SIZE_ENV`] or 0 threads;
    /// [`LaunchError::Mode`] for a bad [`LAUNCH_ENV`];
    /// [`LaunchError::UnknownLauncher`] when a launcher of several processes
    /// is seen only through [`OTHER_LAUNCHER_ENV`].
    ///
    /// # Example
    /// ```
    /// use ruda_comm::{Launch, LaunchMode};
    /// # if std::env::var_os("RUDA_WORLD_SIZE").is_none() && std::env::var_os("RUDA_LAUNCH").is_none()
    /// #     && ruda_comm::MPI_LAUNCHER_ENV.iter().all(|k| std::env::var_os(k).is_none())
    /// #     && ruda_comm::OTHER_LAUNCHER_ENV.iter().all(|k| std::env::var_os(k).is_none()) {
    /// let mode = Launch::new().threads(2).mode::<String>().unwrap();
    /// assert_eq!(mode, LaunchMode::Threads(2)); // no launcher, no RUDA_WORLD_SIZE
    /// # }
    /// ```
    pub fn mode<E>(&self) -> Result<LaunchMode, LaunchError<E>> {
        mode_in(&self.threads, |k| std::env::var(k).ok())
    }

    /// Run `f` on every rank this process holds and return their results
    /// in rank order: all of them with threads, this process's one under
    /// MPI.
    ///
    /// # Errors
    /// [`LaunchError::Rank`] when a rank's function returns an error or
    /// panics (with threads; under MPI the job ends, see [`Launch`]); the
    /// mode's errors ([`Launch::mode`]); [`LaunchError::NoMpi`] under an MPI
    /// launcher without feature `mpi`; [`LaunchError::Mpi`] when MPI fails
    /// to start.
    ///
    /// # Example
    /// See [`Launch`].
    pub fn run<R, E, F>(&self, f: F) -> Result<Vec<R>, LaunchError<E>>
    where
        R: Send,
        E: Send + fmt::Display,
        F: Fn(AnyCommunicator) -> Result<R, E> + Sync,
    {
        match self.mode()? {
            LaunchMode::Threads(n) => {
                let mut world = LocalWorld::new(n);
                if let Some(t) = self.timeout {
                    world = world.timeout(t);
                }
                world
                    .run(|c| f(AnyCommunicator::Local(c)))
                    .map_err(|e| match e {
                        WorldError::Rank { rank, error } => LaunchError::Rank { rank, error },
                        WorldError::Empty => LaunchError::WorldSize { value: "0".into() },
                    })
            }
            LaunchMode::Mpi { variable } => self.run_mpi(variable, f),
        }
    }

    #[cfg(not(feature = "mpi"))]
    fn run_mpi<R, E, F>(&self, variable: &'static str, _: F) -> Result<Vec<R>, LaunchError<E>>
    where
        F: Fn(AnyCommunicator) -> Result<R, E> + Sync,
    {
        Err(LaunchError::NoMpi { variable })
    }

    #[cfg(feature = "mpi")]
    fn run_mpi<R, E, F>(&self, _: &'static str, f: F) -> Result<Vec<R>, LaunchError<E>>
    where
        E: fmt::Display,
        F: Fn(AnyCommunicator) -> Result<R, E> + Sync,
    {
        use crate::Communicator;
        let mut builder = crate::MpiWorld::builder();
        if let Some(t) = self.timeout {
            builder = builder.timeout(t);
        }
        let mpi = builder.init().map_err(LaunchError::Mpi)?;
        let comm = mpi.world().map_err(LaunchError::Mpi)?;
        let rank = comm.rank();
        let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            f(AnyCommunicator::from(comm))
        }));
        let failure = match out {
            Ok(Ok(r)) => {
                drop(mpi);
                return Ok(vec![r]);
            }
            Ok(Err(e)) => RankError::Failed(e),
            Err(payload) => RankError::Panicked(panic_message(payload.as_ref())),
        };
        // Peers still in calls would wait for this rank until their
        // deadline: say why, and end the job.
        eprintln!("ruda: rank {rank} of the MPI job failed: {failure}; aborting the job");
        mpi.abort_job(1);
        drop(mpi);
        Err(LaunchError::Rank {
            rank,
            error: failure,
        })
    }
}

/// The message of a panic payload.
#[cfg(feature = "mpi")]
fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| (*s).to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic with a non-string payload".into())
}

/// The first of [`OTHER_LAUNCHER_ENV`] that shows a launcher of several
/// processes, with its value.
fn other_launcher(var: &impl Fn(&str) -> Option<String>) -> Option<(&'static str, String)> {
    OTHER_LAUNCHER_ENV.into_iter().find_map(|k| {
        let v = var(k)?;
        let shows = match k {
            // A step of one task is a single process (a batch script, or
            // `srun -n 1`).
            "SLURM_STEP_NUM_TASKS" => v.trim().parse::<usize>().is_ok_and(|n| n > 1),
            _ => true,
        };
        shows.then_some((k, v))
    })
}

/// [`Launch::mode`] with the environment given as a lookup (for tests).
fn mode_in<E>(
    threads: &Option<usize>,
    var: impl Fn(&str) -> Option<String>,
) -> Result<LaunchMode, LaunchError<E>> {
    match var(LAUNCH_ENV).as_deref().map(str::trim) {
        Some("mpi") => {
            return Ok(LaunchMode::Mpi {
                variable: LAUNCH_ENV,
            });
        }
        Some("threads") => {}
        Some(other) => {
            return Err(LaunchError::Mode {
                value: other.into(),
            });
        }
        None => {
            if let Some(variable) = MPI_LAUNCHER_ENV.into_iter().find(|k| var(k).is_some()) {
                return Ok(LaunchMode::Mpi { variable });
            }
            if let Some((variable, value)) = other_launcher(&var) {
                return Err(LaunchError::UnknownLauncher { variable, value });
            }
        }
    }
    let n = match var(WORLD_SIZE_ENV) {
        Some(v) => match v.trim().parse::<usize>() {
            Ok(n) if n > 0 => n,
            _ => return Err(LaunchError::WorldSize { value: v }),
        },
        None => threads.unwrap_or(1),
    };
    if n == 0 {
        return Err(LaunchError::WorldSize { value: "0".into() });
    }
    Ok(LaunchMode::Threads(n))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |k| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn the_mode_follows_the_launcher_then_the_variable_then_the_argument() {
        let m = |t: Option<usize>, e: &[(&str, &str)]| mode_in::<String>(&t, env(e));
        assert_eq!(m(None, &[]).unwrap(), LaunchMode::Threads(1));
        assert_eq!(m(Some(3), &[]).unwrap(), LaunchMode::Threads(3));
        assert_eq!(
            m(Some(3), &[("RUDA_WORLD_SIZE", "5")]).unwrap(),
            LaunchMode::Threads(5)
        );
        assert_eq!(
            m(None, &[("RUDA_WORLD_SIZE", " 2 ")]).unwrap(),
            LaunchMode::Threads(2)
        );
        for k in MPI_LAUNCHER_ENV {
            assert_eq!(
                m(Some(3), &[("RUDA_WORLD_SIZE", "5"), (k, "4")]).unwrap(),
                LaunchMode::Mpi { variable: k }
            );
        }
        // A launcher seen only another way is an error until RUDA_LAUNCH
        // decides; a Slurm batch script (task 0 of an allocation of several
        // tasks, in a step of one) or a one-task step is not.
        for (k, v) in [
            ("SLURM_STEP_NUM_TASKS", "4"),
            ("PMIX_NAMESPACE", "prterun-h1-1234@1"),
            ("HYDRA_CONTROL_FD", "7"),
        ] {
            let e = m(Some(3), &[(k, v), ("SLURM_PROCID", "2")]).unwrap_err();
            assert!(
                matches!(&e, LaunchError::UnknownLauncher { variable, value } if *variable == k && value == v),
                "{e:?}"
            );
            assert!(e.to_string().contains("RUDA_LAUNCH=mpi"), "{e}");
            assert_eq!(
                m(
                    Some(3),
                    &[(k, v), ("SLURM_PROCID", "2"), ("RUDA_LAUNCH", "threads")]
                )
                .unwrap(),
                LaunchMode::Threads(3)
            );
            assert_eq!(
                m(Some(3), &[(k, v), ("RUDA_LAUNCH", "mpi")]).unwrap(),
                LaunchMode::Mpi {
                    variable: LAUNCH_ENV
                }
            );
        }
        let batch = [
            ("SLURM_NTASKS", "4"),
            ("SLURM_PROCID", "0"),
            ("SLURM_STEP_NUM_TASKS", "1"),
        ];
        assert_eq!(m(Some(2), &batch).unwrap(), LaunchMode::Threads(2));
        // Slurm's PMI2 plugin and Hydra are MPI launchers.
        assert_eq!(
            m(
                None,
                &[
                    ("PMI_FD", "5"),
                    ("SLURM_STEP_NUM_TASKS", "4"),
                    ("SLURM_PROCID", "1")
                ]
            )
            .unwrap(),
            LaunchMode::Mpi { variable: "PMI_FD" }
        );
        for bad in ["0", "-1", "four", ""] {
            let e = m(Some(3), &[("RUDA_WORLD_SIZE", bad)]).unwrap_err();
            assert!(
                matches!(&e, LaunchError::WorldSize { value } if value == bad),
                "{e:?}"
            );
            assert!(
                e.to_string()
                    .contains("RUDA_WORLD_SIZE must be a positive number"),
                "{e}"
            );
        }
        assert!(matches!(
            m(Some(0), &[]),
            Err(LaunchError::WorldSize { .. })
        ));
    }

    #[test]
    fn threads_run_every_rank_and_name_the_failing_one() {
        let out = Launch::new()
            .threads(4)
            .run(|c| Ok::<_, CommError>(crate::Communicator::rank(&c)));
        if std::env::var_os(WORLD_SIZE_ENV).is_none()
            && MPI_LAUNCHER_ENV
                .iter()
                .chain(&OTHER_LAUNCHER_ENV)
                .all(|k| std::env::var_os(k).is_none())
        {
            assert_eq!(out.unwrap(), vec![0, 1, 2, 3]);
            let e = Launch::new()
                .threads(3)
                .timeout(Duration::from_secs(5))
                .run(|c| {
                    if crate::Communicator::rank(&c) == 2 {
                        return Err("rank 2 gives up");
                    }
                    Ok(())
                })
                .unwrap_err();
            assert!(
                matches!(
                    &e,
                    LaunchError::Rank {
                        rank: 2,
                        error: RankError::Failed("rank 2 gives up")
                    }
                ),
                "{e:?}"
            );
            assert_eq!(e.into_error(), Some("rank 2 gives up"));
        }
    }
}
