//! `ruda`: the command-line face of ruda — `ruda demo` trains a spectral
//! model on the sphere distributed over a process grid and proves it
//! matches the serial model; `ruda bench` measures collective bandwidth in
//! the conventions of nccl-tests, `ruda bench sht` the spherical harmonic
//! transform.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use ruda_bench::BenchOp;
use ruda_cli::bench_cmd::{self, BenchError};
use ruda_cli::bench_report::{BenchConfig, Report, Row};
use ruda_cli::demo::{self, DemoConfig};
use ruda_cli::{plot, sizes};
use ruda_comm::DType;

/// Differentiable collective communication for Rust tensors.
#[derive(Parser, Debug)]
#[command(name = "ruda", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// The main job: a spherical Fourier neural operator learns the
    /// shallow-water equations on a polar × azimuth grid of ranks (threads,
    /// or processes under mpirun), alongside the same model trained
    /// serially; every step's loss and parameters are compared, the model
    /// is rolled out on the Galewsky jet against persistence, and pictures
    /// are written (exit status 1 unless the runs agree and the model
    /// beats persistence). `--job synthetic`: the smaller demo of a linear
    /// spectral model.
    Demo {
        /// `sfno` (the shallow-water job) or `synthetic`.
        #[arg(long, value_enum, default_value_t = DemoJob::Sfno)]
        job: DemoJob,
        /// The process grid, polar × azimuth ranks, e.g. 2x2 or 4x1.
        #[arg(long, default_value = "2x2", value_parser = parse_grid)]
        grid: (usize, usize),
        /// Optimisation steps (sfno: 200, synthetic: 12).
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1000))]
        steps: Option<u32>,
        /// Latitudes of the equiangular grid, poles included (sfno: 32,
        /// synthetic: 361).
        #[arg(long, value_parser = clap::value_parser!(u32).range(2..=2049))]
        nlat: Option<u32>,
        /// Longitudes (sfno: 64, synthetic: 720).
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..=4096))]
        nlon: Option<u32>,
        /// Channels of the field (synthetic only; 4).
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..=256))]
        channels: Option<u32>,
        /// How the threads move tensors (synthetic only): `local` (staged
        /// through host memory by the local transport), `device` (kept on
        /// their shared Flex device) or `wgpu` (kept on wgpu's default
        /// adapter, the serial model and the transforms there too; a build
        /// with feature `wgpu`). Ignored under mpirun.
        #[arg(long, value_enum)]
        transport: Option<DemoTransportArg>,
        /// Where the sfno job writes its pictures (created if missing).
        #[arg(long, default_value = "ruda-demo")]
        out: PathBuf,
        /// Data-parallel replicas of the grid (sfno only; 1): each trains
        /// on its share of every batch, e.g. `--replicas 2 --grid 1x2`
        /// runs 4 ranks.
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..=64))]
        replicas: Option<u32>,
        /// Write a checkpoint to `<out>/checkpoint` every this many steps
        /// and after the last (sfno only).
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
        checkpoint_every: Option<u32>,
        /// Go on from the checkpoint in `<out>/checkpoint` up to `--steps`,
        /// on this or another grid (sfno only).
        #[arg(long)]
        resume: bool,
        /// Keep the generated training pairs in this folder and read them
        /// back in later runs (sfno only).
        #[arg(long)]
        sample_cache: Option<PathBuf>,
    },
    /// Measure collective bandwidth over a sweep of sizes, each row with its
    /// memory roofline measured in the same run, p50/p99 and a back-to-back
    /// wall-clock time; optionally beside Open MPI's own collectives
    /// (`ruda bench sht`: time the spherical harmonic transform instead).
    #[command(args_conflicts_with_subcommands = true)]
    Bench {
        /// What else to benchmark.
        #[command(subcommand)]
        target: Option<BenchTarget>,
        /// The collective to time.
        #[arg(long, value_enum, default_value_t = OpArg::All)]
        op: OpArg,
        /// Element type.
        #[arg(long, value_enum, default_value_t = DTypeArg::F32)]
        dtype: DTypeArg,
        /// Sizes in bytes: one size (64M) or a doubling range (4K:64M).
        #[arg(long, default_value = "4K:64M")]
        sizes: String,
        /// Ranks (threads of this process with the local transport).
        #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..=64))]
        ranks: u16,
        /// Transport: `local` (threads); `mpi` needs a build with MPI
        /// support; `device`: threads sharing one Burn device (--device),
        /// tensors never leaving it, beside the host-staged path and the
        /// local transport on the same sizes.
        #[arg(long, value_enum, default_value_t = TransportArg::Local)]
        transport: TransportArg,
        /// The device of `--transport device`: `flex` (CPU, the default) or
        /// `wgpu` (a build with --features wgpu).
        #[arg(long, value_enum)]
        device: Option<DeviceArg>,
        /// Timed iterations per size (the median and 99th percentile of the
        /// slowest rank are reported); default: 2000 at 4K down to 10 at 64M.
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
        iters: Option<u32>,
        /// Untimed warm-up iterations per size; default: a tenth of --iters, at least 2.
        #[arg(long)]
        warmup: Option<u32>,
        /// Let rank threads float instead of pinning rank r to the r-th core
        /// (pinning needs no more ranks than cores; RUDA_PIN=0 also turns it off).
        #[arg(long)]
        no_pin: bool,
        /// Also time Open MPI's own collective on the same sizes (runs this
        /// binary under `mpirun`; needs a build with `--features mpi`) and
        /// print its median and the ratio MPI / ruda beside each row.
        #[arg(long, value_enum)]
        baseline: Option<BaselineArg>,
        /// Time the raw MPI calls instead of ruda's (with --transport mpi;
        /// used by --baseline mpi).
        #[arg(long, hide = true)]
        raw_mpi: bool,
        /// Time the ruda-tensor layer on Burn's Flex backend instead of the raw communicator.
        #[arg(long)]
        tensor: bool,
        /// With --transport mpi: give ruda's calls shared buffers of the
        /// world (`MpiWorldBuilder::shared_buffers`), so that ranks on one
        /// host all-reduce in place on each other's memory and read each
        /// other's buffers through the mapping, as threads do.
        #[arg(long)]
        shared_buffers: bool,
        /// Print JSON instead of the table.
        #[arg(long)]
        json: bool,
        /// Also draw busbw (and each op's roofline) against size as an SVG file.
        #[arg(long, value_name = "FILE.svg")]
        plot: Option<PathBuf>,
    },
}

#[derive(Subcommand, Debug)]
enum BenchTarget {
    /// Time the spherical harmonic transform (forward + inverse) serially
    /// and on process grids of threads, with the share of time spent in
    /// communication and, with --torch-harmonics, --ducc0 and --shtns, those
    /// libraries on the same machine in the same run.
    Sht(ShtArgs),
    /// Time the shallow-water workload: a step of the spectral solver and
    /// a training step of the SFNO, with --torch-harmonics the same
    /// workloads in torch-harmonics in the same run.
    Swe(SweArgs),
}

#[derive(clap::Args, Debug)]
struct SweArgs {
    /// The solver's equiangular grid as NLATxNLON (lmax = ceil(nlat/3)).
    #[arg(long, default_value = "256x512", value_parser = parse_sphere_size)]
    solver: (usize, usize),
    /// The SFNO's grid as NLATxNLON.
    #[arg(long, default_value = "32x64", value_parser = parse_sphere_size)]
    sfno: (usize, usize),
    /// The SFNO's channels.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=4096))]
    embed_dim: u32,
    /// The SFNO's blocks.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=64))]
    layers: u32,
    /// Samples per training step.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=4096))]
    batch: u32,
    #[command(flatten)]
    timing: Timing,
}

/// How `ruda bench sht` and `ruda bench swe` time, and their anchor.
#[derive(clap::Args, Debug)]
struct Timing {
    /// Timed iterations (the median is reported).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..))]
    iters: u32,
    /// Untimed warm-up iterations.
    #[arg(long, default_value_t = 2)]
    warmup: u32,
    /// Also time torch-harmonics 0.9.3 with this Python interpreter.
    #[arg(long, value_name = "PYTHON")]
    torch_harmonics: Option<PathBuf>,
}

fn bench_swe(args: SweArgs, out: &mut impl Write) -> ExitCode {
    use ruda_cli::swe_bench::{self, SweBenchConfig};
    let cfg = SweBenchConfig {
        solver: args.solver,
        sfno: args.sfno,
        embed_dim: args.embed_dim as usize,
        layers: args.layers as usize,
        batch: args.batch as usize,
        iters: args.timing.iters as usize,
        warmup: args.timing.warmup as usize,
        ..SweBenchConfig::default()
    };
    let mut rows = match swe_bench::run(&cfg) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("ruda bench swe: {e}");
            return ExitCode::FAILURE;
        }
    };
    if let Some(python) = &args.timing.torch_harmonics
        && let Err(e) = swe_bench::add_torch_harmonics(&cfg, python, &mut rows)
    {
        eprintln!("ruda bench swe: {e}");
        return ExitCode::FAILURE;
    }
    match swe_bench::print_table(&rows, out) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ruda bench swe: {e}");
            ExitCode::FAILURE
        }
    }
}

#[derive(clap::Args, Debug)]
struct ShtArgs {
    /// Equiangular grids as NLATxNLON, comma-separated.
    #[arg(long, default_value = "91x180,181x360,361x720", value_delimiter = ',', value_parser = parse_sphere_size)]
    sizes: Vec<(usize, usize)>,
    /// Element types, comma-separated (f32, f64).
    #[arg(long, default_value = "f32,f64", value_delimiter = ',')]
    dtype: Vec<FloatArg>,
    /// Process grids (polar × azimuth ranks), comma-separated; the serial
    /// transform always runs first.
    #[arg(long, default_value = "2x1,1x2,2x2", value_delimiter = ',', value_parser = parse_grid)]
    grids: Vec<(usize, usize)>,
    /// How latitudes are dealt to polar ranks, comma-separated: contiguous
    /// (torch-harmonics' layout) and mirrored (each rank a northern band
    /// and its southern mirror); grids of one polar rank run once.
    #[arg(long, default_value = "contiguous,mirrored", value_delimiter = ',')]
    split: Vec<SplitArg>,
    /// Fields transformed together.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=4096))]
    channels: u32,
    #[command(flatten)]
    timing: Timing,
    /// Also time ducc0 (analysis_2d + synthesis_2d) with this Python
    /// interpreter.
    #[arg(long, value_name = "PYTHON")]
    ducc0: Option<PathBuf>,
    /// Also time SHTns (analys + synth; with --vector spat_to_SHsphtor +
    /// SHsphtor_to_spat) with this Python interpreter (pip install shtns,
    /// with libfftw3-dev; f64 only).
    #[arg(long, value_name = "PYTHON")]
    shtns: Option<PathBuf>,
    /// Time the vector transforms instead: each channel a tangential field
    /// of two components (torch-harmonics' RealVectorSHT, ducc0's spin 1)
    #[arg(long)]
    vector: bool,
    /// Print JSON instead of the table.
    #[arg(long)]
    json: bool,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum SplitArg {
    Contiguous,
    Mirrored,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum FloatArg {
    F32,
    F64,
}

fn parse_sphere_size(s: &str) -> Result<(usize, usize), String> {
    let bad = || {
        format!("`{s}` is not a grid size: write latitudes × longitudes as NLATxNLON, e.g. 181x360")
    };
    let (h, w) = s.split_once(['x', 'X']).ok_or_else(bad)?;
    let (h, w) = (
        h.trim().parse::<usize>().map_err(|_| bad())?,
        w.trim().parse::<usize>().map_err(|_| bad())?,
    );
    if !(2..=4096).contains(&h) || !(1..=8192).contains(&w) {
        return Err(format!(
            "a {h}x{w} grid is out of range: 2 to 4096 latitudes, 1 to 8192 longitudes"
        ));
    }
    Ok((h, w))
}

/// `ruda bench sht`.
fn bench_sht(args: ShtArgs, out: &mut impl Write) -> ExitCode {
    use ruda_cli::sht_bench::{self, ShtBenchConfig};
    let mut grids = vec![(1, 1)];
    grids.extend(args.grids.iter().copied().filter(|&g| g != (1, 1)));
    let cfg = ShtBenchConfig {
        sizes: args.sizes.clone(),
        dtypes: args
            .dtype
            .iter()
            .map(|d| match d {
                FloatArg::F32 => burn_tensor::DType::F32,
                FloatArg::F64 => burn_tensor::DType::F64,
            })
            .collect(),
        grids,
        splits: {
            let mut splits = Vec::new();
            for s in &args.split {
                let s = match s {
                    SplitArg::Contiguous => ruda_sphere::LatitudeSplit::Contiguous,
                    SplitArg::Mirrored => ruda_sphere::LatitudeSplit::Mirrored,
                };
                if !splits.contains(&s) {
                    splits.push(s);
                }
            }
            splits
        },
        channels: args.channels as usize,
        iters: args.timing.iters as usize,
        warmup: args.timing.warmup as usize,
        vector: args.vector,
    };
    let bar = sht_bench::progress((cfg.sizes.len() * cfg.dtypes.len() * cfg.runs()) as u64);
    #[cfg(feature = "mpi")]
    if under_mpirun() {
        // One rank a process; rank 0 prints, while the others wait (asleep
        // in a barrier, so that the peak rank 0 measures for the table is
        // not shared with them) before MPI ends. Ranks wait for rank 0
        // alone while it times the serial transform and runs the anchors'
        // scripts: the world's deadline is an hour rather than minutes.
        let builder = ruda_comm::MpiWorld::builder().timeout(std::time::Duration::from_secs(3600));
        let (_mpi, world) = match start_mpi_with(builder) {
            Ok(started) => started,
            Err(e) => {
                eprintln!("ruda bench sht: starting MPI: {e}");
                return ExitCode::FAILURE;
            }
        };
        if ruda_comm::Communicator::rank(&world) != 0 {
            bar.set_draw_target(indicatif::ProgressDrawTarget::hidden());
        }
        let code = match sht_bench::run_processes(&cfg, &world, &bar) {
            Ok(Some(rows)) => {
                bar.finish_and_clear();
                finish_sht(&cfg, &args, Ok(rows), out)
            }
            Ok(None) => ExitCode::SUCCESS,
            Err(e) => {
                bar.finish_and_clear();
                finish_sht(&cfg, &args, Err(e), out)
            }
        };
        if let Err(e) = ruda_comm::Communicator::barrier(&world) {
            eprintln!("ruda bench sht: the ranks' last barrier: {e}");
            return ExitCode::FAILURE;
        }
        return code;
    }
    let rows = sht_bench::run(&cfg, &bar);
    bar.finish_and_clear();
    finish_sht(&cfg, &args, rows, out)
}

/// `ruda bench sht`'s anchors, table and exit code, once its rows are in.
fn finish_sht(
    cfg: &ruda_cli::sht_bench::ShtBenchConfig,
    args: &ShtArgs,
    rows: Result<Vec<ruda_cli::sht_bench::ShtRow>, ruda_cli::sht_bench::ShtBenchError>,
    out: &mut impl Write,
) -> ExitCode {
    use ruda_cli::sht_bench;
    let mut rows = match rows {
        Ok(r) => r,
        Err(
            e @ (sht_bench::ShtBenchError::Config(_) | sht_bench::ShtBenchError::Processes { .. }),
        ) => {
            eprintln!("ruda bench sht: {e}");
            return ExitCode::from(USAGE);
        }
        Err(e) => {
            eprintln!("ruda bench sht: {e}");
            return ExitCode::FAILURE;
        }
    };
    let anchors = [
        (
            sht_bench::Anchor::TorchHarmonics,
            &args.timing.torch_harmonics,
        ),
        (sht_bench::Anchor::Ducc0, &args.ducc0),
        (sht_bench::Anchor::Shtns, &args.shtns),
    ];
    for (anchor, python) in anchors {
        if let Some(python) = python
            && let Err(e) = sht_bench::add_anchor(cfg, anchor, python, &mut rows)
        {
            eprintln!("ruda bench sht: {e}");
            return ExitCode::FAILURE;
        }
    }
    let written = if args.json {
        serde_json::to_writer_pretty(&mut *out, &rows)
            .map_err(std::io::Error::other)
            .and_then(|_| writeln!(out))
    } else {
        sht_bench::print_table(cfg, &rows, out)
    };
    if let Err(e) = written {
        eprintln!("ruda bench sht: writing the output: {e}");
        return ExitCode::FAILURE;
    }
    if rows.iter().any(|r| r.wrong) {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum OpArg {
    AllReduce,
    AllGather,
    ReduceScatter,
    AllToAll,
    AllToAllV,
    Broadcast,
    All,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum DTypeArg {
    F16,
    Bf16,
    F32,
    F64,
    U8,
    U32,
    I32,
    I64,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum BaselineArg {
    /// Open MPI's collectives, one process per rank.
    Mpi,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum TransportArg {
    Local,
    Mpi,
    Device,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum DemoJob {
    /// A spherical Fourier neural operator learns the shallow-water equations.
    Sfno,
    /// A linear spectral model learns a synthetic map.
    Synthetic,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum DemoTransportArg {
    Local,
    Device,
    Wgpu,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum DeviceArg {
    Flex,
    Wgpu,
}

fn parse_grid(s: &str) -> Result<(usize, usize), String> {
    let bad = || format!("`{s}` is not a grid: write polar × azimuth ranks as PxA, e.g. 2x2");
    let (p, a) = s.split_once(['x', 'X']).ok_or_else(bad)?;
    let (p, a) = (
        p.trim().parse::<usize>().map_err(|_| bad())?,
        a.trim().parse::<usize>().map_err(|_| bad())?,
    );
    if p == 0 || a == 0 || p * a > 64 {
        return Err(format!(
            "a {p}x{a} grid is not allowed: each side at least 1, at most 64 ranks in all"
        ));
    }
    Ok((p, a))
}

/// The operations `op` names. On tensors (`--tensor`, `--transport
/// device`) all-to-all is the variable exchange itself, so `all` times it
/// once there, as `all-to-all`.
fn ops(op: OpArg, tensors: bool) -> Vec<BenchOp> {
    match op {
        OpArg::AllReduce => vec![BenchOp::AllReduce],
        OpArg::AllGather => vec![BenchOp::AllGather],
        OpArg::ReduceScatter => vec![BenchOp::ReduceScatter],
        OpArg::AllToAll => vec![BenchOp::AllToAll],
        OpArg::AllToAllV => vec![BenchOp::AllToAllV],
        OpArg::Broadcast => vec![BenchOp::Broadcast],
        OpArg::All => BenchOp::ALL
            .into_iter()
            .filter(|&o| !(tensors && o == BenchOp::AllToAllV))
            .collect(),
    }
}

fn dtype(d: DTypeArg) -> DType {
    match d {
        DTypeArg::F16 => DType::F16,
        DTypeArg::Bf16 => DType::BF16,
        DTypeArg::F32 => DType::F32,
        DTypeArg::F64 => DType::F64,
        DTypeArg::U8 => DType::U8,
        DTypeArg::U32 => DType::U32,
        DTypeArg::I32 => DType::I32,
        DTypeArg::I64 => DType::I64,
    }
}

/// Whether this process was started by `mpirun` (Open MPI, or a PMI launcher).
#[cfg(feature = "mpi")]
fn under_mpirun() -> bool {
    ["OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"]
        .iter()
        .any(|v| std::env::var_os(v).is_some())
}

/// MPI started for a demo under `mpirun`: the guard (MPI stays up while it
/// lives) and the world communicator. A panicking rank takes the job down
/// rather than leave its peers waiting.
#[cfg(feature = "mpi")]
fn start_mpi() -> Result<(ruda_comm::MpiWorld, ruda_comm::MpiCommunicator), demo::DemoError> {
    start_mpi_with(ruda_comm::MpiWorld::builder())
}

/// [`start_mpi`] from `builder` (a panic still aborts the job).
#[cfg(feature = "mpi")]
fn start_mpi_with(
    builder: ruda_comm::MpiWorldBuilder,
) -> Result<(ruda_comm::MpiWorld, ruda_comm::MpiCommunicator), demo::DemoError> {
    let fail = |e: ruda_comm::CommError| demo::DemoError::Rank {
        grid: "mpi".into(),
        rank: 0,
        message: e.to_string(),
    };
    let mpi = builder.abort_on_panic(true).init().map_err(fail)?;
    let world = mpi.world().map_err(fail)?;
    Ok((mpi, world))
}

/// The demo on threads, or on MPI processes when started by `mpirun`.
fn run_demo(
    cfg: &DemoConfig,
    transport: demo::DemoTransport,
    out: &mut impl Write,
) -> Result<demo::Verdict, demo::DemoError> {
    #[cfg(feature = "mpi")]
    if under_mpirun() {
        // `_mpi` keeps MPI up until the run returns.
        let (_mpi, world) = start_mpi()?;
        return demo::run_mpi(cfg, world, out);
    }
    demo::run_on(cfg, transport, out)
}

/// A demo's error, and whether this process has already written it to
/// stderr.
struct Failure {
    error: demo::DemoError,
    reported: bool,
}

impl From<demo::DemoError> for Failure {
    fn from(error: demo::DemoError) -> Self {
        Failure {
            error,
            reported: false,
        }
    }
}

/// The shallow-water job on threads, or on MPI processes when started by
/// `mpirun`.
fn run_swe_demo(
    cfg: &ruda_cli::swe_demo::SweDemoConfig,
    out: &mut impl Write,
) -> Result<ruda_cli::swe_demo::SweVerdict, Failure> {
    #[cfg(feature = "mpi")]
    if under_mpirun() {
        let (mpi, world) = start_mpi()?;
        // A second handle on the world, made by every rank now, for the
        // barrier after a failure below.
        let done = mpi.world().map_err(|e| demo::DemoError::Rank {
            grid: "mpi".into(),
            rank: 0,
            message: e.to_string(),
        })?;
        return ruda_cli::swe_demo::run_mpi(cfg, world, out).map_err(|error| {
            // Every rank fails at the same step (the run spreads a failure),
            // but mpirun ends the whole job as soon as the first process
            // exits with an error: each rank writes its report, then waits
            // (until the group's deadline at most) for the others to have
            // written theirs.
            report_line(&format!("ruda demo: {error}"));
            let _ = ruda_comm::Communicator::barrier(&done);
            Failure {
                error,
                reported: true,
            }
        });
    }
    Ok(ruda_cli::swe_demo::run(cfg, out)?)
}

/// Why `ruda bench` measured nothing.
#[derive(Debug, thiserror::Error)]
enum BenchFailure {
    /// The sweep failed.
    #[error(transparent)]
    Bench(#[from] BenchError),
    /// The MPI baseline could not be measured.
    #[error("--baseline mpi: {0}")]
    Baseline(#[from] ruda_cli::baseline::BaselineError),
}

/// The bench rows, whether this process writes them, and the ranks.
fn run_bench(
    cfg: &BenchConfig,
    mpi: bool,
    baseline: bool,
    bar: &indicatif::ProgressBar,
) -> Result<(Vec<Row>, bool, usize), BenchFailure> {
    #[cfg(feature = "mpi")]
    if mpi {
        use ruda_comm::Communicator;
        let fail = |e: ruda_comm::CommError| bench_cmd::BenchError::Run {
            op: "init",
            bytes: 0,
            message: e.to_string(),
        };
        let mut builder = ruda_comm::MpiWorld::builder().abort_on_panic(true);
        if cfg.shared_buffers {
            let largest = cfg.sizes.iter().copied().max().unwrap_or(0);
            builder = builder.shared_buffers(ruda_bench::shared_arena_bytes(largest));
        }
        let mpi = builder.init().map_err(fail)?;
        let world = mpi.world().map_err(fail)?;
        let (lead, ranks) = (world.rank() == 0, world.size());
        if !lead {
            bar.set_draw_target(indicatif::ProgressDrawTarget::hidden());
        }
        let mut rows = bench_cmd::run_mpi(cfg, &world, bar)?;
        if baseline && !cfg.raw_mpi {
            let raw_cfg = BenchConfig {
                raw_mpi: true,
                ..cfg.clone()
            };
            let raw = bench_cmd::run_mpi(&raw_cfg, &world, bar)?;
            ruda_cli::baseline::attach(&mut rows, &raw);
        }
        return Ok((rows, lead, ranks));
    }
    let _ = mpi;
    let mut rows = bench_cmd::run(cfg, bar)?;
    if baseline {
        bar.set_message("Open MPI baseline");
        let raw = ruda_cli::baseline::run(cfg)?;
        ruda_cli::baseline::attach(&mut rows, &raw);
    }
    Ok((rows, true, cfg.ranks))
}

/// Exit status for usage errors, as clap's own.
const USAGE: u8 = 2;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let mut out = std::io::stdout().lock();
    match cli.command {
        Command::Demo {
            job: DemoJob::Sfno,
            grid: (polar, azimuth),
            steps,
            nlat,
            nlon,
            channels,
            transport,
            out: out_dir,
            replicas,
            checkpoint_every,
            resume,
            sample_cache,
        } => {
            if channels.is_some() || transport.is_some() {
                eprintln!("ruda demo: --channels and --transport are options of `--job synthetic`");
                return ExitCode::from(USAGE);
            }
            // The demo trains in f64, and burn-optim restores a
            // checkpoint's Adam state in the default device's float dtype:
            // make it f64 before the first tensor.
            if let Err(e) = burn_tensor::Device::default().configure(burn_tensor::FloatDType::F64) {
                eprintln!("ruda demo: cannot make f64 the default float type: {e:?}");
                return ExitCode::FAILURE;
            }
            let d = ruda_cli::swe_demo::SweDemoConfig::default();
            let cfg = ruda_cli::swe_demo::SweDemoConfig {
                polar,
                azimuth,
                steps: steps.map_or(d.steps, |s| s as usize),
                nlat: nlat.map_or(d.nlat, |n| n as usize),
                nlon: nlon.map_or(d.nlon, |n| n as usize),
                out_dir,
                replicas: replicas.map_or(d.replicas, |n| n as usize),
                checkpoint_every: checkpoint_every.map_or(0, |n| n as usize),
                resume,
                sample_cache,
                ..d
            };
            match run_swe_demo(&cfg, &mut out) {
                Ok(v) if v.agree && v.beats_persistence => ExitCode::SUCCESS,
                Ok(_) => ExitCode::FAILURE,
                Err(Failure { error, reported }) => {
                    if !reported {
                        report_line(&format!("ruda demo: {error}"));
                    }
                    match error {
                        demo::DemoError::Grid { .. } | demo::DemoError::Processes { .. } => {
                            ExitCode::from(USAGE)
                        }
                        _ => ExitCode::FAILURE,
                    }
                }
            }
        }
        Command::Demo {
            job: DemoJob::Synthetic,
            grid: (polar, azimuth),
            steps,
            nlat,
            nlon,
            channels,
            transport,
            out: _,
            replicas,
            checkpoint_every,
            resume,
            sample_cache,
        } => {
            if replicas.is_some() || checkpoint_every.is_some() || resume || sample_cache.is_some()
            {
                eprintln!(
                    "ruda demo: --replicas, --checkpoint-every, --resume and --sample-cache are options of `--job sfno`"
                );
                return ExitCode::from(USAGE);
            }
            let d = DemoConfig::default();
            let cfg = DemoConfig {
                polar,
                azimuth,
                steps: steps.map_or(d.steps, |s| s as usize),
                nlat: nlat.map_or(d.nlat, |n| n as usize),
                nlon: nlon.map_or(d.nlon, |n| n as usize),
                channels: channels.map_or(d.channels, |n| n as usize),
            };
            let transport = match transport.unwrap_or(DemoTransportArg::Local) {
                DemoTransportArg::Local => demo::DemoTransport::Threads,
                DemoTransportArg::Device => demo::DemoTransport::Device,
                DemoTransportArg::Wgpu => demo::DemoTransport::Wgpu,
            };
            match run_demo(&cfg, transport, &mut out) {
                Ok(v) if v.agree => ExitCode::SUCCESS,
                Ok(_) => ExitCode::FAILURE,
                Err(
                    e @ (demo::DemoError::Grid { .. }
                    | demo::DemoError::Unavailable(_)
                    | demo::DemoError::NoF64(_)),
                ) => {
                    eprintln!("ruda demo: {e}");
                    ExitCode::from(USAGE)
                }
                Err(e) => {
                    eprintln!("ruda demo: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::Bench {
            target: Some(BenchTarget::Sht(args)),
            ..
        } => bench_sht(args, &mut out),
        Command::Bench {
            target: Some(BenchTarget::Swe(args)),
            ..
        } => bench_swe(args, &mut out),
        Command::Bench {
            target: None,
            op,
            dtype: d,
            sizes: s,
            ranks,
            transport,
            device,
            iters,
            warmup,
            no_pin,
            baseline,
            raw_mpi,
            tensor,
            shared_buffers,
            json,
            plot: plot_file,
        } => {
            let mpi = matches!(transport, TransportArg::Mpi);
            if shared_buffers && (!mpi || tensor || raw_mpi) {
                eprintln!(
                    "ruda bench: --shared-buffers is for ruda's communicator over --transport mpi (not --tensor or --raw-mpi)"
                );
                return ExitCode::from(USAGE);
            }
            if device.is_some() && !matches!(transport, TransportArg::Device) {
                eprintln!("ruda bench: --device is for --transport device");
                return ExitCode::from(USAGE);
            }
            let on_device = matches!(transport, TransportArg::Device).then_some(match device {
                Some(DeviceArg::Wgpu) => ruda_cli::device_bench::BenchDevice::Wgpu,
                _ => ruda_cli::device_bench::BenchDevice::Flex,
            });
            if on_device.is_some() && (baseline.is_some() || tensor) {
                eprintln!(
                    "ruda bench: --transport device already times the host-staged tensor path and the local transport beside it; drop --baseline and --tensor"
                );
                return ExitCode::from(USAGE);
            }
            if mpi && !cfg!(feature = "mpi") {
                eprintln!(
                    "ruda bench: this ruda was built without MPI; rebuild with --features mpi and start it under mpirun"
                );
                return ExitCode::from(USAGE);
            }
            if let Some(which) = on_device
                && let Err(e) = which.device()
            {
                eprintln!("ruda bench: {e}");
                return ExitCode::from(USAGE);
            }
            let sizes = match sizes::parse_sizes(&s) {
                Ok(v) => v,
                Err(e) => {
                    eprintln!("ruda bench: --sizes: {e}");
                    return ExitCode::from(USAGE);
                }
            };
            let cfg = BenchConfig {
                ops: ops(op, tensor || on_device.is_some()),
                dtype: dtype(d),
                sizes,
                ranks: ranks as usize,
                iters: iters.map(|i| i as usize),
                warmup: warmup.map(|w| w as usize),
                tensor,
                pin: !no_pin,
                raw_mpi: raw_mpi && mpi,
                shared_buffers,
            };
            let baseline = baseline.is_some();
            if baseline && !cfg!(feature = "mpi") {
                eprintln!(
                    "ruda bench: --baseline mpi: {}",
                    ruda_cli::baseline::BaselineError::NotBuilt
                );
                return ExitCode::from(USAGE);
            }
            if (tensor || on_device.is_some()) && !cfg.dtype.is_float() {
                eprintln!(
                    "ruda bench: {}",
                    bench_cmd::BenchError::TensorDType(cfg.dtype)
                );
                return ExitCode::from(USAGE);
            }
            let bar = bench_cmd::progress((cfg.sizes.len() * cfg.ops.len()) as u64);
            let result = match on_device {
                Some(which) => ruda_cli::device_bench::run(&cfg, which, &bar)
                    .map(|r| (r, true, cfg.ranks))
                    .map_err(BenchFailure::from),
                None => run_bench(&cfg, mpi, baseline, &bar),
            };
            let (rows, lead, ranks) = match result {
                Ok(r) => r,
                Err(e) => {
                    bar.finish_and_clear();
                    eprintln!("ruda bench: {e}");
                    return ExitCode::FAILURE;
                }
            };
            bar.finish_and_clear();
            let cfg = BenchConfig { ranks, ..cfg };
            let wrong = rows.iter().any(|r| r.wrong > 0);
            if !lead {
                // Under MPI only rank 0 writes.
                return if wrong {
                    ExitCode::FAILURE
                } else {
                    ExitCode::SUCCESS
                };
            }
            let transport = if mpi {
                "mpi"
            } else if on_device.is_some() {
                "device"
            } else {
                "local"
            };
            let pinned = (!mpi)
                .then(|| {
                    ruda_comm::LocalWorld::new(cfg.ranks)
                        .pin_threads(cfg.pin)
                        .pinned_cores()
                })
                .flatten();
            let written = if json {
                let report = Report {
                    ranks: cfg.ranks,
                    dtype: cfg.dtype.name().to_string(),
                    transport: transport.to_string(),
                    device: on_device.map(|d| d.name().to_string()),
                    tensor,
                    shared_buffers,
                    pinned_cores: pinned.clone(),
                    rows: rows.clone(),
                };
                serde_json::to_writer_pretty(&mut out, &report)
                    .map_err(std::io::Error::other)
                    .and_then(|_| writeln!(out))
            } else if let Some(which) = on_device {
                ruda_cli::device_bench::print_table(&cfg, which, pinned.as_deref(), &rows, &mut out)
            } else {
                bench_cmd::print_table(&cfg, transport, pinned.as_deref(), &rows, &mut out)
            };
            if let Err(e) = written {
                eprintln!("ruda bench: writing the output: {e}");
                return ExitCode::FAILURE;
            }
            if let Some(path) = plot_file {
                let title = format!(
                    "ruda {} bench, {} ranks, {}",
                    if on_device.is_some() {
                        "device"
                    } else if tensor {
                        "tensor"
                    } else {
                        "collective"
                    },
                    cfg.ranks,
                    cfg.dtype
                );
                // The device table's own rows (its references are in the table).
                let plotted: Vec<Row> = rows
                    .iter()
                    .filter(|r| on_device.is_none() || r.kind == "device")
                    .cloned()
                    .collect();
                if let Err(e) = plot::plot(&plotted, &title, &path) {
                    eprintln!("ruda bench: --plot {}: {e}", path.display());
                    return ExitCode::FAILURE;
                }
            }
            if wrong {
                ExitCode::FAILURE
            } else {
                ExitCode::SUCCESS
            }
        }
    }
}

/// Print `line` to standard error in one write: under `mpirun` every
/// process reports its own error to the same stream, and `eprintln!`
/// writes a formatted message piece by piece, so two processes' lines
/// could interleave mid-line (a CI run saw "ruda demo: ruda demo: …").
fn report_line(line: &str) {
    let mut buf = String::with_capacity(line.len() + 1);
    buf.push_str(line);
    buf.push('\n');
    let _ = std::io::stderr().lock().write_all(buf.as_bytes());
}
