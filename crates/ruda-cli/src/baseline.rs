//! `ruda bench --baseline mpi`: Open MPI's own collectives on the same
//! sizes, so that one command reproduces the comparison. The baseline runs
//! this same binary under `mpirun` with one process per rank, each bound to
//! a core when the ranks fit the machine, timing the raw MPI calls with
//! ruda's harness (`ruda bench --transport mpi --raw-mpi --json`); its
//! medians go beside ruda's rows.

use std::path::Path;
use std::process::Command;

use thiserror::Error;

use crate::bench_report::{BenchConfig, Report, Row};

/// Why the MPI baseline could not be measured.
#[derive(Debug, Error)]
pub enum BaselineError {
    /// The binary has no MPI transport to time raw MPI calls with.
    #[error("this ruda was built without MPI; rebuild with `--features mpi`")]
    NotBuilt,
    /// `mpirun` could not be started.
    #[error("cannot start `mpirun` (is Open MPI installed and on PATH?): {0}")]
    NoMpirun(std::io::Error),
    /// The path of this binary is unknown.
    #[error("cannot find this executable to run under mpirun: {0}")]
    Exe(std::io::Error),
    /// The baseline run failed.
    #[error("mpirun -n {ranks} ended with {status}: {stderr}")]
    Failed {
        /// Processes started.
        ranks: usize,
        /// The exit status.
        status: String,
        /// The end of what it printed on stderr.
        stderr: String,
    },
    /// The baseline run's output is not a report.
    #[error("the baseline run printed no JSON report: {0}")]
    Output(String),
}

/// The `mpirun` command line that measures the baseline of `cfg` with
/// `exe` (a ruda built with MPI).
///
/// # Example
/// ```
/// use ruda_cli::{baseline, bench_report::BenchConfig};
/// use ruda_bench::BenchOp;
/// use ruda_comm::DType;
/// let cfg = BenchConfig { ops: vec![BenchOp::AllGather], dtype: DType::F32,
///     sizes: vec![4096, 8192], ranks: 2, iters: None, warmup: None,
///     tensor: false, pin: true, raw_mpi: false, shared_buffers: false };
/// let cmd = baseline::command(&cfg, "ruda".as_ref(), 2);
/// let args: Vec<_> = cmd.get_args().map(|a| a.to_string_lossy().into_owned()).collect();
/// assert!(args.windows(2).any(|w| w == ["--sizes", "4096:8192"]));
/// assert!(args.windows(2).any(|w| w == ["--bind-to", "core"]));
/// ```
pub fn command(cfg: &BenchConfig, exe: &Path, cores: usize) -> Command {
    let mut cmd = Command::new("mpirun");
    // Root is refused unless allowed (CI and containers run as root).
    cmd.env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .args(["-n", &cfg.ranks.to_string()]);
    if cfg.ranks <= cores {
        cmd.args(["--bind-to", "core"]);
    } else {
        cmd.args(["--oversubscribe", "--bind-to", "none"]);
    }
    let op = match cfg.ops.as_slice() {
        [one] => one.name(),
        _ => "all",
    };
    let sizes = match (cfg.sizes.first(), cfg.sizes.last()) {
        (Some(lo), Some(hi)) => format!("{lo}:{hi}"),
        _ => "4K".to_string(),
    };
    cmd.arg(exe).args([
        "bench",
        "--transport",
        "mpi",
        "--raw-mpi",
        "--json",
        "--op",
        op,
        "--dtype",
        cfg.dtype.name(),
        "--sizes",
        &sizes,
    ]);
    if let Some(i) = cfg.iters {
        cmd.args(["--iters", &i.to_string()]);
    }
    if let Some(w) = cfg.warmup {
        cmd.args(["--warmup", &w.to_string()]);
    }
    cmd
}

/// Measure the baseline of `cfg`: the raw MPI rows.
///
/// # Errors
/// [`BaselineError`]: no MPI in this build, no `mpirun`, a failed run.
pub fn run(cfg: &BenchConfig) -> Result<Vec<Row>, BaselineError> {
    if !cfg!(feature = "mpi") {
        return Err(BaselineError::NotBuilt);
    }
    let exe = std::env::current_exe().map_err(BaselineError::Exe)?;
    let cores = std::thread::available_parallelism().map_or(1, |c| c.get());
    let out = command(cfg, &exe, cores)
        .output()
        .map_err(BaselineError::NoMpirun)?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let tail: String = err
            .chars()
            .rev()
            .take(2000)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        return Err(BaselineError::Failed {
            ranks: cfg.ranks,
            status: out.status.to_string(),
            stderr: tail,
        });
    }
    let report: Report =
        serde_json::from_slice(&out.stdout).map_err(|e| BaselineError::Output(e.to_string()))?;
    Ok(report.rows)
}

/// Put the baseline's medians beside the rows of the same op and size.
///
/// # Example
/// ```
/// use ruda_cli::{baseline, bench_report::Row};
/// use ruda_bench::{BenchOp, Measurement};
/// use ruda_comm::DType;
/// let m = |t: f64| Measurement::from_times(BenchOp::AllGather, DType::F32, 2, 1024,
///     [t, t, t], 10, f64::NAN, 0);
/// let mut ours = vec![Row::from_measurement("collective", &m(1e-6))];
/// baseline::attach(&mut ours, &[Row::from_measurement("mpi", &m(2e-6))]);
/// assert_eq!(ours[0].mpi_speedup, Some(2.0));
/// ```
pub fn attach(rows: &mut [Row], baseline: &[Row]) {
    for r in rows {
        if let Some(b) = baseline
            .iter()
            .find(|b| b.op == r.op && b.bytes == r.bytes && b.dtype == r.dtype)
        {
            r.mpi_us = Some(b.time_us);
            r.mpi_speedup = Some(b.time_us / r.time_us);
        }
    }
}
