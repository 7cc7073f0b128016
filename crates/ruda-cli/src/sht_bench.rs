//! `ruda bench sht`: forward + inverse spherical harmonic transform time,
//! serial (on all cores) and on process grids of in-process ranks (P ranks
//! × T threads each = the cores, so that `vs serial` is the parallel
//! efficiency at equal cores), latitudes split contiguous or in mirrored
//! polar bands, with the share of time spent in communication, a round-trip check of every configuration, and
//! (optionally) torch-harmonics' `RealSHT` / `InverseRealSHT` on CPU timed
//! in the same run by a Python script shipped inside the binary; with
//! `--vector`, the vector transforms of tangential fields (and the anchors'
//! vector transforms: torch-harmonics' `RealVectorSHT`, ducc0's spin 1).

use std::io::Write;
use std::path::Path;
use std::process::Command;
use std::time::Instant;

use burn_tensor::{DType, Device, Tensor, TensorData};
use indicatif::ProgressBar;
use ruda_comm::{Communicator, LocalWorld};
use ruda_sphere::profile::{Stage, StageTimes, profile};
use ruda_sphere::{
    DistributedInverseRealSht, DistributedInverseRealVectorSht, DistributedRealSht,
    DistributedRealVectorSht, InverseRealSht, InverseRealVectorSht, LatitudeGrid, LatitudeSplit,
    RealSht, RealVectorSht, ShtSpec, SphereError, SphereLayout,
};
use ruda_tensor::{Group, ProcessGrid};
use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::timed_comm::TimedComm;

/// The torch-harmonics timing script (run with `--torch-harmonics PYTHON`).
pub const TORCH_HARMONICS_SCRIPT: &str = include_str!("../scripts/sht_bench_torch_harmonics.py");

/// The ducc0 timing script (run with `--ducc0 PYTHON`).
pub const DUCC0_SCRIPT: &str = include_str!("../scripts/sht_bench_ducc0.py");

/// The SHTns timing script (run with `--shtns PYTHON`).
pub const SHTNS_SCRIPT: &str = include_str!("../scripts/sht_bench_shtns.py");

/// A reference implementation timed beside ruda-sphere in the same run, by
/// a Python script given an interpreter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Anchor {
    /// torch-harmonics 0.9.3 (the conventions' reference).
    TorchHarmonics,
    /// ducc0 (a fast CPU transform; the wheel from PyPI).
    Ducc0,
    /// SHTns (the fastest CPU transform; f64 only: its rows are f64).
    Shtns,
}

impl Anchor {
    /// The name its rows carry in the table.
    pub fn name(self) -> &'static str {
        match self {
            Anchor::TorchHarmonics => "torch-harmonics",
            Anchor::Ducc0 => "ducc0",
            Anchor::Shtns => "SHTns",
        }
    }

    /// Every anchor, in the table's column order.
    pub const ALL: [Anchor; 3] = [Anchor::TorchHarmonics, Anchor::Ducc0, Anchor::Shtns];

    fn script(self) -> &'static str {
        match self {
            Anchor::TorchHarmonics => TORCH_HARMONICS_SCRIPT,
            Anchor::Ducc0 => DUCC0_SCRIPT,
            Anchor::Shtns => SHTNS_SCRIPT,
        }
    }
}

/// What to time.
#[derive(Clone, Debug, PartialEq)]
pub struct ShtBenchConfig {
    /// Equiangular grids, `(nlat, nlon)`.
    pub sizes: Vec<(usize, usize)>,
    /// Element types (f32, f64).
    pub dtypes: Vec<DType>,
    /// Process grids, polar × azimuth; `1x1` is the serial transform.
    pub grids: Vec<(usize, usize)>,
    /// How latitudes are dealt to polar ranks; grids of one polar rank run
    /// once, contiguous.
    pub splits: Vec<LatitudeSplit>,
    /// Fields transformed together (leading dimension).
    pub channels: usize,
    /// Timed iterations (the median is reported).
    pub iters: usize,
    /// Untimed iterations first.
    pub warmup: usize,
    /// Time the vector transforms: each channel a tangential field of two
    /// components.
    pub vector: bool,
}

impl Default for ShtBenchConfig {
    /// The table: 91 × 180, 181 × 360 and 361 × 720, f32 and f64,
    /// serial, 2 and 4 ranks, 4 channels.
    fn default() -> Self {
        ShtBenchConfig {
            sizes: vec![(91, 180), (181, 360), (361, 720)],
            dtypes: vec![DType::F32, DType::F64],
            grids: vec![(1, 1), (2, 1), (1, 2), (2, 2)],
            splits: vec![LatitudeSplit::Contiguous, LatitudeSplit::Mirrored],
            channels: 4,
            iters: 10,
            warmup: 2,
            vector: false,
        }
    }
}

impl ShtBenchConfig {
    /// Runs per size and dtype: each grid once per split (once when it
    /// has one polar rank).
    pub fn runs(&self) -> usize {
        self.grids
            .iter()
            .map(|&(p, _)| splits_of(self, p).len())
            .sum()
    }
}

/// A progress bar over the configurations (drawn on stderr).
pub fn progress(steps: u64) -> ProgressBar {
    let bar = ProgressBar::new(steps);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{spinner} {msg:<24} [{bar:30}] {pos}/{len} {elapsed}",
        )
        .expect("valid template"),
    );
    bar
}

/// One line of the table.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct ShtRow {
    /// Latitudes.
    pub nlat: usize,
    /// Longitudes.
    pub nlon: usize,
    /// Degrees and orders kept.
    pub lmax: usize,
    /// `f32` or `f64`.
    pub dtype: &'static str,
    /// `serial`, a grid such as `2x2` (`2x2 mirrored` for mirrored polar
    /// bands), or `torch-harmonics`.
    pub run: String,
    /// Ranks (1 for an anchor).
    pub ranks: usize,
    /// Threads of each rank (the serial transform's: every core).
    pub threads: usize,
    /// Median over iterations of the slowest rank's forward + inverse time.
    pub time_ms: f64,
    /// Share of that time spent in collectives (mean over ranks).
    pub comm_share: f64,
    /// Time spent in collectives, ms (mean over ranks, median over
    /// iterations): the rest of `time_ms` is computation and waiting.
    pub comm_ms: f64,
    /// Serial ruda-sphere time divided by this time.
    pub vs_serial: f64,
    /// torch-harmonics' time divided by this time (when it ran).
    pub vs_torch_harmonics: Option<f64>,
    /// ducc0's time divided by this time (when it ran).
    pub vs_ducc0: Option<f64>,
    /// SHTns' time divided by this time (when it ran; f64 rows only).
    pub vs_shtns: Option<f64>,
    /// Largest `|isht(sht(x)) − x|` relative to `max |x|` for a band-limited
    /// field (`None` for torch-harmonics).
    pub round_trip_err: Option<f64>,
    /// Whether the round trip exceeded the tolerance of the element type.
    pub wrong: bool,
    /// Where the serial transform's time went (serial rows only).
    pub stages: Option<StageSplit>,
    /// Where each rank's time went (grid rows only).
    pub rank_stages: Vec<StageSplit>,
}

/// Where a forward + inverse transform's time goes (the serial one's, or
/// one rank's part of a distributed one), in ms (mean over the timed
/// iterations), from [`ruda_sphere::profile`].
#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq)]
pub struct StageSplit {
    /// The real FFTs along the longitudes.
    pub fft: f64,
    /// Spectra moved between rows-first and orders-first layouts.
    pub reorder: f64,
    /// The Legendre step.
    pub legendre: f64,
    /// Tensors read into host memory and results written back.
    pub host_copies: f64,
    /// In collectives, waiting for peers included (0 serially).
    pub comm: f64,
    /// The rest: Burn's tensor work between the kernels.
    pub other: f64,
    /// The Legendre stage's rate in GFLOP/s, counting the multiply-adds of
    /// every (order, degree, latitude pair, column) once per direction as
    /// two operations (work left out next to the poles counts as done).
    pub legendre_gflops: f64,
}

impl StageSplit {
    /// Add one iteration: its `stages`, and its `wall` time and time in
    /// collectives in seconds.
    fn add(&mut self, stages: &StageTimes, wall: f64, comm: f64) {
        let ms = |s: Stage| stages.get(s).as_secs_f64() * 1e3;
        self.fft += ms(Stage::Fourier);
        self.reorder += ms(Stage::Reorder);
        self.legendre += ms(Stage::Legendre);
        self.host_copies += ms(Stage::HostCopies);
        self.comm += comm * 1e3;
        self.other += (wall - stages.total().as_secs_f64() - comm).max(0.0) * 1e3;
    }

    /// The mean of the `n` iterations added.
    fn mean(mut self, n: usize) -> Self {
        let n = n.max(1) as f64;
        for v in [
            &mut self.fft,
            &mut self.reorder,
            &mut self.legendre,
            &mut self.host_copies,
            &mut self.comm,
            &mut self.other,
        ] {
            *v /= n;
        }
        self
    }
}

impl ShtRow {
    /// The ratio column of `anchor`.
    fn vs_mut(&mut self, anchor: Anchor) -> &mut Option<f64> {
        match anchor {
            Anchor::TorchHarmonics => &mut self.vs_torch_harmonics,
            Anchor::Ducc0 => &mut self.vs_ducc0,
            Anchor::Shtns => &mut self.vs_shtns,
        }
    }
}

/// The nominal operations of a serial forward + inverse Legendre stage:
/// per direction, per order `m`, degree `l ≥ m`, latitude pair (the
/// equator counts as one) and column, one multiply-add (two operations).
pub fn legendre_flops(spec: ShtSpec, channels: usize, vector: bool) -> f64 {
    let (l, m) = (spec.lmax() as f64, spec.mmax() as f64);
    // Σ_{m < mmax} (lmax − m), for mmax ≤ lmax.
    let pairs = m * l - m * (m - 1.0) / 2.0;
    let cols = 2.0 * channels as f64 * if vector { 2.0 } else { 1.0 };
    let half = spec.nlat().div_ceil(2) as f64;
    2.0 * 2.0 * pairs * half * cols
}

/// Why the benchmark could not run.
#[derive(Debug, Error)]
pub enum ShtBenchError {
    /// A transform failed on a rank.
    #[error("{grid} {nlat}x{nlon} {dtype}: rank {rank} failed: {message}")]
    Rank {
        /// The grid.
        grid: String,
        /// Latitudes.
        nlat: usize,
        /// Longitudes.
        nlon: usize,
        /// Element type.
        dtype: &'static str,
        /// The failing rank.
        rank: usize,
        /// What happened.
        message: String,
    },
    /// A grid or size that cannot be benchmarked.
    #[error("{0}")]
    Config(#[from] SphereError),
    /// Under `mpirun`: no grid asked for has as many ranks as there are
    /// processes.
    #[error(
        "{processes} processes, but no grid of {grids} has {processes} ranks: pass --grids with one that does (e.g. {processes}x1)"
    )]
    Processes {
        /// Processes in the world.
        processes: usize,
        /// The grids asked for, as `2x2, 4x1`.
        grids: String,
    },
    /// A rank's pool of threads could not start.
    #[error("could not start {threads} threads for each of {ranks} ranks: {message}")]
    Threads {
        /// Ranks.
        ranks: usize,
        /// Threads asked for each.
        threads: usize,
        /// What the thread pool said.
        message: String,
    },
    /// An anchor's script failed (`name`: `torch-harmonics`, `ducc0` or `SHTns`).
    #[error("{name} script: {message}")]
    Anchor {
        /// The anchor.
        name: &'static str,
        /// What went wrong.
        message: String,
    },
}

fn dtype_name(d: DType) -> &'static str {
    if d == DType::F32 { "f32" } else { "f64" }
}

/// The round-trip tolerance of an element type.
fn tolerance(d: DType) -> f64 {
    if d == DType::F32 { 1e-4 } else { 1e-10 }
}

/// Median of `v` (sorted in place).
fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// A band-limited f64 field `[channels, nlat, nlon]` (vector:
/// `[channels, 2, nlat, nlon]`; the inverse transform of random
/// coefficients, none at degree 0 or at the Nyquist order for a vector
/// field), as values.
fn band_limited_field(spec: ShtSpec, channels: usize, vector: bool) -> Vec<f64> {
    let (l, m) = (spec.lmax(), spec.mmax());
    let parts = if vector { 2 } else { 1 };
    let mut s = 0x2545_F491_4F6C_DD1Du64;
    let mut c = Vec::with_capacity(channels * parts * l * m * 2);
    for _ in 0..channels * parts {
        for li in 0..l {
            for mi in 0..m {
                for part in 0..2 {
                    s ^= s << 13;
                    s ^= s >> 7;
                    s ^= s << 17;
                    let v = (s >> 11) as f64 / (1u64 << 53) as f64 - 0.5;
                    let nyquist = 2 * mi == spec.nlon();
                    let zero = mi > li
                        || (part == 1 && (mi == 0 || nyquist))
                        || (vector && (li == 0 || nyquist));
                    c.push(if zero { 0.0 } else { v });
                }
            }
        }
    }
    let c = Tensor::<5>::from_data(
        TensorData::new(c, [channels, parts, l, m, 2]),
        (&Device::flex(), DType::F64),
    );
    let x: Tensor<4> = if vector {
        InverseRealVectorSht::new(spec).forward(c)
    } else {
        InverseRealSht::new(spec).forward(c)
    }
    .expect("a valid spec and shape");
    x.into_data().try_to_vec::<f64>().expect("f64 values")
}

/// A rank's transforms, scalar (fields `[c, 1, lat, lon]`) or vector
/// (`[c, 2, lat, lon]`).
enum Transforms<G> {
    Scalar(DistributedRealSht<G>, DistributedInverseRealSht<G>),
    Vector(
        DistributedRealVectorSht<G>,
        DistributedInverseRealVectorSht<G>,
    ),
}

impl<G: Group> Transforms<G> {
    fn new(
        grid: &ProcessGrid<G>,
        spec: ShtSpec,
        split: LatitudeSplit,
        vector: bool,
    ) -> Result<Self, SphereError> {
        Ok(if vector {
            Transforms::Vector(
                DistributedRealVectorSht::with_split(grid, spec, split)?,
                DistributedInverseRealVectorSht::with_split(grid, spec, split)?,
            )
        } else {
            Transforms::Scalar(
                DistributedRealSht::with_split(grid, spec, split)?,
                DistributedInverseRealSht::with_split(grid, spec, split)?,
            )
        })
    }

    fn layout(&self) -> &SphereLayout {
        match self {
            Transforms::Scalar(f, _) => f.layout(),
            Transforms::Vector(f, _) => f.layout(),
        }
    }

    fn round_trip(&self, x: Tensor<4>) -> Result<Tensor<4>, SphereError> {
        match self {
            Transforms::Scalar(f, i) => i.forward::<5, 4>(f.forward(x)?),
            Transforms::Vector(f, i) => i.forward::<5, 4>(f.forward(x)?),
        }
    }
}

/// `[c, h, w]` values restricted to rows (runs, in order) and columns.
fn patch(
    v: &[f64],
    [c, h, w]: [usize; 3],
    rows: &[std::ops::Range<usize>],
    cols: std::ops::Range<usize>,
) -> Vec<f64> {
    let mut out = Vec::new();
    for ci in 0..c {
        for r in rows.iter().cloned().flatten() {
            let s = (ci * h + r) * w;
            out.extend_from_slice(&v[s + cols.start..s + cols.end]);
        }
    }
    out
}

/// Per iteration: (seconds, seconds in collectives); and the round trip's
/// (max |error|, max |x|) of this rank.
type RankTiming = (Vec<(f64, f64)>, (f64, f64));

fn time_rank<C: Communicator + std::fmt::Debug + 'static>(
    comm: C,
    (p, a): (usize, usize),
    split: LatitudeSplit,
    spec: ShtSpec,
    dtype: DType,
    field: &[f64],
    cfg: &ShtBenchConfig,
) -> Result<(RankTiming, StageSplit), SphereError> {
    let comm = TimedComm::new(comm);
    let clock = comm.clock();
    let grid = ProcessGrid::new(comm, p, a)?;
    let transforms = Transforms::new(&grid, spec, split, cfg.vector)?;
    let layout = transforms.layout();
    let (rows, cols) = (layout.lat_bands(), layout.lon_range());
    let parts = if cfg.vector { 2 } else { 1 };
    let dims = [
        cfg.channels,
        parts,
        layout.lat_sizes()[grid.polar_rank()],
        cols.len(),
    ];
    let fields = cfg.channels * parts;
    let local = patch(field, [fields, spec.nlat(), spec.nlon()], rows, cols);
    let x = Tensor::<4>::from_data(
        TensorData::new(local.clone(), dims),
        (&Device::flex(), dtype),
    );
    let mut times = Vec::with_capacity(cfg.iters);
    let mut last = None;
    let mut stages_sum = StageSplit::default();
    for i in 0..cfg.warmup + cfg.iters {
        grid.world()
            .comm()
            .barrier()
            .map_err(ruda_tensor::Error::from)?;
        let (t, c0) = (Instant::now(), clock.spent());
        let (y, stages) = profile(|| transforms.round_trip(x.clone()));
        let y = y?;
        let (secs, comm_secs) = (
            t.elapsed().as_secs_f64(),
            (clock.spent() - c0).as_secs_f64(),
        );
        if i >= cfg.warmup {
            times.push((secs, comm_secs));
            stages_sum.add(&stages, secs, comm_secs);
        }
        last = Some(y);
    }
    let (err, scale) = round_trip_error(last, dtype, &local);
    Ok(((times, (err, scale)), stages_sum.mean(cfg.iters)))
}

/// The largest `|y − x|` of the last round trip `y` against the field `x`
/// it started from, and the largest `|x|`.
fn round_trip_error(last: Option<Tensor<4>>, dtype: DType, x: &[f64]) -> (f64, f64) {
    let y = last.expect("at least one iteration").into_data();
    let y: Vec<f64> = match dtype {
        DType::F32 => y
            .try_to_vec::<f32>()
            .expect("f32")
            .into_iter()
            .map(f64::from)
            .collect(),
        _ => y.try_to_vec::<f64>().expect("f64"),
    };
    let err = y
        .iter()
        .zip(x)
        .fold(0.0f64, |m, (a, b)| m.max((a - b).abs()));
    (err, x.iter().fold(0.0f64, |m, v| m.max(v.abs())))
}

/// The serial transforms' timings on a pool of `threads` (every core: not
/// the global pool, which `RAYON_NUM_THREADS` may have narrowed for the
/// ranks of a world).
fn serial_timing(
    spec: ShtSpec,
    dtype: DType,
    field: &[f64],
    threads: usize,
    cfg: &ShtBenchConfig,
) -> Result<(RankTiming, StageSplit), ShtBenchError> {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .map_err(|e| ShtBenchError::Threads {
            ranks: 1,
            threads,
            message: e.to_string(),
        })?;
    Ok(pool.install(|| serial_timing_here(spec, dtype, field, cfg))?)
}

fn serial_timing_here(
    spec: ShtSpec,
    dtype: DType,
    field: &[f64],
    cfg: &ShtBenchConfig,
) -> Result<(RankTiming, StageSplit), SphereError> {
    // Only the transforms timed are made (their setup is not timed, but
    // they hold memory).
    let round_trip: Box<dyn Fn(Tensor<4>) -> Result<Tensor<4>, SphereError>> = if cfg.vector {
        let (vsht, ivsht) = (RealVectorSht::new(spec), InverseRealVectorSht::new(spec));
        Box::new(move |x| ivsht.forward::<5, 4>(vsht.forward(x)?))
    } else {
        let (sht, isht) = (RealSht::new(spec), InverseRealSht::new(spec));
        Box::new(move |x| isht.forward::<5, 4>(sht.forward(x)?))
    };
    let parts = if cfg.vector { 2 } else { 1 };
    let x = Tensor::<4>::from_data(
        TensorData::new(
            field.to_vec(),
            [cfg.channels, parts, spec.nlat(), spec.nlon()],
        ),
        (&Device::flex(), dtype),
    );
    let mut times = Vec::with_capacity(cfg.iters);
    let mut last = None;
    let mut split = StageSplit::default();
    for i in 0..cfg.warmup + cfg.iters {
        let t = Instant::now();
        let (y, stages) = profile(|| round_trip(x.clone()));
        let y = y?;
        let wall = t.elapsed().as_secs_f64();
        if i >= cfg.warmup {
            times.push((wall, 0.0));
            split.add(&stages, wall, 0.0);
        }
        last = Some(y);
    }
    let mut split = split.mean(cfg.iters);
    split.legendre_gflops =
        legendre_flops(spec, cfg.channels, cfg.vector) / (split.legendre * 1e-3) / 1e9;
    let (err, scale) = round_trip_error(last, dtype, field);
    Ok(((times, (err, scale)), split))
}

/// Time every configuration; rows in the order size, dtype, grid.
///
/// # Errors
/// [`ShtBenchError::Config`] for a grid that does not fit a size;
/// [`ShtBenchError::Rank`] when a rank fails.
pub fn run(cfg: &ShtBenchConfig, bar: &ProgressBar) -> Result<Vec<ShtRow>, ShtBenchError> {
    check_grids(cfg, &cfg.grids)?;
    drive(cfg, bar, &cfg.grids, &mut |run: Run<'_>| {
        let (p, a) = run.grid;
        if (p, a) == (1, 1) {
            return Ok(Some(vec![serial_timing(
                run.spec,
                run.dtype,
                run.field,
                run.threads,
                cfg,
            )?]));
        }
        let ranks = p * a;
        // Each rank on its own pool of threads: P × T = the cores (at
        // least one thread a rank).
        let pools = (0..ranks)
            .map(|_| {
                rayon::ThreadPoolBuilder::new()
                    .num_threads(run.threads)
                    .build()
            })
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| ShtBenchError::Threads {
                ranks,
                threads: run.threads,
                message: e.to_string(),
            })?;
        let timings = LocalWorld::new(ranks)
            .run(|comm| {
                pools[comm.rank()].install(|| {
                    time_rank(
                        comm, run.grid, run.split, run.spec, run.dtype, run.field, cfg,
                    )
                })
            })
            .map_err(|e| match e {
                ruda_comm::WorldError::Rank { rank, error } => run.failed(rank, error.to_string()),
                other => run.failed(0, other.to_string()),
            })?;
        Ok(Some(timings))
    })
}

/// One configuration to time: the serial transform (`grid` 1×1) or a
/// grid of ranks.
struct Run<'a> {
    spec: ShtSpec,
    dtype: DType,
    /// The whole field, `[channels × parts, nlat, nlon]`.
    field: &'a [f64],
    grid: (usize, usize),
    split: LatitudeSplit,
    /// Threads of each rank (of the serial transform: every core).
    threads: usize,
    /// The row's name.
    name: &'a str,
}

impl Run<'_> {
    /// `rank` of this run failed with `message`.
    fn failed(&self, rank: usize, message: String) -> ShtBenchError {
        ShtBenchError::Rank {
            grid: self.name.to_string(),
            nlat: self.spec.nlat(),
            nlon: self.spec.nlon(),
            dtype: dtype_name(self.dtype),
            rank,
            message,
        }
    }
}

/// Each rank's timings and stage split of a run, where this process makes
/// the rows (`None` on the other processes of a world).
type Timings = Option<Vec<(RankTiming, StageSplit)>>;

/// Time the serial transform and `grids` for every size and dtype with
/// `time`, and make the rows (where `time` returns the timings).
fn drive(
    cfg: &ShtBenchConfig,
    bar: &ProgressBar,
    grids: &[(usize, usize)],
    time: &mut dyn FnMut(Run<'_>) -> Result<Timings, ShtBenchError>,
) -> Result<Vec<ShtRow>, ShtBenchError> {
    let mut rows = Vec::new();
    for &(nlat, nlon) in &cfg.sizes {
        let spec = ShtSpec::new(nlat, nlon, LatitudeGrid::Equiangular)?;
        let field = band_limited_field(spec, cfg.channels, cfg.vector);
        for &dtype in &cfg.dtypes {
            let name = dtype_name(dtype);
            let mut serial_ms = None;
            for (p, a, split) in grids
                .iter()
                .flat_map(|&(p, a)| splits_of(cfg, p).into_iter().map(move |s| (p, a, s)))
            {
                let serial = (p, a) == (1, 1);
                let grid_name = match (serial, split) {
                    (true, _) => "serial".to_string(),
                    (false, LatitudeSplit::Contiguous) => format!("{p}x{a}"),
                    (false, LatitudeSplit::Mirrored) => format!("{p}x{a} mirrored"),
                };
                bar.set_message(format!("{nlat}x{nlon} {name} {grid_name}"));
                let ranks = p * a;
                let threads = if serial {
                    self::threads()
                } else {
                    (self::threads() / ranks).max(1)
                };
                let timings = time(Run {
                    spec,
                    dtype,
                    field: &field,
                    grid: (p, a),
                    split,
                    threads,
                    name: &grid_name,
                })?;
                bar.inc(1);
                let Some(timings) = timings else { continue };
                let (per_rank, mut rank_stages): (Vec<RankTiming>, Vec<StageSplit>) =
                    timings.into_iter().unzip();
                let stages = if serial { rank_stages.pop() } else { None };
                let mut slowest: Vec<f64> = (0..cfg.iters)
                    .map(|i| per_rank.iter().map(|r| r.0[i].0).fold(0.0, f64::max))
                    .collect();
                let mut shares: Vec<f64> = (0..cfg.iters)
                    .map(|i| {
                        per_rank.iter().map(|r| r.0[i].1 / r.0[i].0).sum::<f64>()
                            / per_rank.len() as f64
                    })
                    .collect();
                let time_ms = median(&mut slowest) * 1e3;
                let comm_share = median(&mut shares);
                let mut comm: Vec<f64> = (0..cfg.iters)
                    .map(|i| per_rank.iter().map(|r| r.0[i].1).sum::<f64>() / per_rank.len() as f64)
                    .collect();
                let comm_ms = median(&mut comm) * 1e3;
                let err = per_rank.iter().map(|r| r.1.0).fold(0.0, f64::max);
                let scale = per_rank.iter().map(|r| r.1.1).fold(0.0, f64::max);
                let rel = err / scale.max(f64::MIN_POSITIVE);
                let serial_time = *serial_ms.get_or_insert(time_ms);
                rows.push(ShtRow {
                    nlat,
                    nlon,
                    lmax: spec.lmax(),
                    dtype: name,
                    run: grid_name,
                    ranks,
                    threads,
                    time_ms,
                    comm_share,
                    comm_ms,
                    vs_serial: serial_time / time_ms,
                    vs_torch_harmonics: None,
                    vs_ducc0: None,
                    vs_shtns: None,
                    round_trip_err: Some(rel),
                    wrong: rel.is_nan() || rel > tolerance(dtype),
                    stages,
                    rank_stages,
                });
            }
        }
    }
    Ok(rows)
}

/// `ruda bench sht` on the processes of a world, one rank each (under
/// `mpirun`): the serial transform on rank 0 with every core it may use
/// (the other ranks wait), then each grid of `comm`'s size in `cfg.grids`,
/// each rank on a pool of `cores / ranks` threads. The rows, on rank 0
/// (`None` on the others); run it with `mpirun --bind-to none` so that the
/// serial transform and the ranks' pools see every core (a process bound
/// to one core runs one thread, and its row says so).
///
/// One process runs the serial transform alone.
///
/// # Errors
/// [`ShtBenchError::Processes`] when there are several processes and no
/// grid of `cfg.grids` has as many ranks; [`ShtBenchError::Config`] when
/// one does not fit a size; [`ShtBenchError::Rank`] on every rank when a
/// rank fails (naming the first that did).
pub fn run_processes<C: Communicator + std::fmt::Debug + 'static>(
    cfg: &ShtBenchConfig,
    comm: &C,
    bar: &ProgressBar,
) -> Result<Option<Vec<ShtRow>>, ShtBenchError> {
    let (rank, n) = (comm.rank(), comm.size());
    let mut grids = vec![(1, 1)];
    grids.extend(
        cfg.grids
            .iter()
            .copied()
            .filter(|&(p, a)| p * a == n && n > 1),
    );
    if grids.len() == 1 && n > 1 {
        let asked: Vec<String> = cfg
            .grids
            .iter()
            .filter(|&&g| g != (1, 1))
            .map(|(p, a)| format!("{p}x{a}"))
            .collect();
        return Err(ShtBenchError::Processes {
            processes: n,
            grids: asked.join(", "),
        });
    }
    check_grids(cfg, &grids)?;
    let runs: usize = grids.iter().map(|&(p, _)| splits_of(cfg, p).len()).sum();
    bar.set_length((cfg.sizes.len() * cfg.dtypes.len() * runs) as u64);
    let rows = drive(cfg, bar, &grids, &mut |run: Run<'_>| {
        let serial = run.grid == (1, 1);
        // Each rank's findings, packed as [ok, error, scale, stages…,
        // GFLOP/s, (seconds, seconds in collectives) per iteration].
        let mine: Result<(RankTiming, StageSplit), ShtBenchError> = if serial {
            if rank == 0 {
                serial_timing(run.spec, run.dtype, run.field, run.threads, cfg)
            } else {
                Ok((
                    (vec![(0.0, 0.0); cfg.iters], (0.0, 0.0)),
                    StageSplit::default(),
                ))
            }
        } else {
            // A communicator of its own for the run, made by every rank (a
            // collective) before anything that may fail on one rank only:
            // failed or not, every rank then reaches the exchange below.
            match comm.split(Some(0), rank as i32) {
                Err(e) => Err(run.failed(rank, e.to_string())),
                Ok(None) => Err(run.failed(rank, "split gave no communicator".into())),
                Ok(Some(sub)) => rayon::ThreadPoolBuilder::new()
                    .num_threads(run.threads)
                    .build()
                    .map_err(|e| run.failed(rank, format!("starting {} threads: {e}", run.threads)))
                    .and_then(|pool| {
                        pool.install(|| {
                            time_rank(
                                sub, run.grid, run.split, run.spec, run.dtype, run.field, cfg,
                            )
                        })
                        .map_err(|e| run.failed(rank, e.to_string()))
                    }),
            }
        };
        let width = 10 + 2 * cfg.iters;
        let packed = match &mine {
            Ok(((times, (err, scale)), s)) => {
                let mut v = vec![1.0, *err, *scale];
                v.extend([
                    s.fft,
                    s.reorder,
                    s.legendre,
                    s.host_copies,
                    s.comm,
                    s.other,
                    s.legendre_gflops,
                ]);
                v.extend(times.iter().flat_map(|&(t, c)| [t, c]));
                v
            }
            Err(_) => vec![0.0; width],
        };
        let all = comm
            .all_gather_vec(&packed)
            .map_err(|e| run.failed(rank, e.to_string()))?;
        // This rank's own error first (its peers name it below).
        mine?;
        if let Some(failed) = (0..n).find(|&r| all[r * width] != 1.0) {
            return Err(run.failed(failed, "failed (its own process reports why)".into()));
        }
        if rank != 0 {
            return Ok(None);
        }
        let ranks = if serial { 1 } else { n };
        Ok(Some(
            (0..ranks)
                .map(|r| {
                    let v = &all[r * width..(r + 1) * width];
                    let times = v[10..].chunks(2).map(|c| (c[0], c[1])).collect();
                    let split = StageSplit {
                        fft: v[3],
                        reorder: v[4],
                        legendre: v[5],
                        host_copies: v[6],
                        comm: v[7],
                        other: v[8],
                        legendre_gflops: v[9],
                    };
                    ((times, (v[1], v[2])), split)
                })
                .collect(),
        ))
    })?;
    Ok((rank == 0).then_some(rows))
}

/// Every grid must fit every size before anything runs.
fn check_grids(cfg: &ShtBenchConfig, grids: &[(usize, usize)]) -> Result<(), ShtBenchError> {
    for &(nlat, nlon) in &cfg.sizes {
        let spec = ShtSpec::new(nlat, nlon, LatitudeGrid::Equiangular)?;
        for &(p, a) in grids {
            for split in splits_of(cfg, p) {
                for rank in 0..p * a {
                    SphereLayout::with_split(spec, (rank / a, p), (rank % a, a), split)?;
                }
            }
        }
    }
    Ok(())
}

/// The splits a grid of `p` polar ranks runs with (one, contiguous, when
/// `p` is 1: the splits are the same there).
fn splits_of(cfg: &ShtBenchConfig, p: usize) -> Vec<LatitudeSplit> {
    if p == 1 {
        vec![LatitudeSplit::Contiguous]
    } else {
        cfg.splits.clone()
    }
}

/// One timing from an anchor's script.
#[derive(Debug, Deserialize)]
struct AnchorTiming {
    nlat: usize,
    nlon: usize,
    lmax: usize,
    dtype: String,
    threads: usize,
    ms: f64,
}

/// Time torch-harmonics with `python` on the same sizes, types, channels
/// and iterations, and add its rows (and the ratios against it).
///
/// # Errors
/// As [`add_anchor`].
pub fn add_torch_harmonics(
    cfg: &ShtBenchConfig,
    python: &Path,
    rows: &mut Vec<ShtRow>,
) -> Result<(), ShtBenchError> {
    add_anchor(cfg, Anchor::TorchHarmonics, python, rows)
}

/// Time `anchor` with `python` on the same sizes, types, channels and
/// iterations, with as many threads as this machine has cores, and add
/// its rows (and every row's ratio against it).
///
/// # Errors
/// [`ShtBenchError::Anchor`] when the script cannot run or its output
/// cannot be read.
pub fn add_anchor(
    cfg: &ShtBenchConfig,
    anchor: Anchor,
    python: &Path,
    rows: &mut Vec<ShtRow>,
) -> Result<(), ShtBenchError> {
    let fail = |message: String| ShtBenchError::Anchor {
        name: anchor.name(),
        message,
    };
    if anchor == Anchor::Shtns && !cfg.dtypes.contains(&DType::F64) {
        eprintln!(
            "ruda bench sht: SHTns computes in f64 only and no f64 row was asked for: not timed"
        );
        return Ok(());
    }
    let script = std::env::temp_dir().join(format!(
        "ruda-sht-bench-{}-{}.py",
        anchor.name(),
        std::process::id()
    ));
    std::fs::write(&script, anchor.script())
        .map_err(|e| fail(format!("writing {}: {e}", script.display())))?;
    let sizes: Vec<String> = cfg.sizes.iter().map(|(h, w)| format!("{h}x{w}")).collect();
    let dtypes: Vec<&str> = cfg.dtypes.iter().map(|&d| dtype_name(d)).collect();
    let threads = threads();
    let out = Command::new(python)
        .arg(&script)
        .args(["--sizes", &sizes.join(",")])
        .args(["--dtypes", &dtypes.join(",")])
        .args(["--channels", &cfg.channels.to_string()])
        .args(["--iters", &cfg.iters.to_string()])
        .args(["--warmup", &cfg.warmup.to_string()])
        .args(["--threads", &threads.to_string()])
        .args(if cfg.vector { &["--vector"][..] } else { &[] })
        .output();
    let _ = std::fs::remove_file(&script);
    let out = out.map_err(|e| fail(format!("starting {}: {e}", python.display())))?;
    if !out.status.success() {
        return Err(fail(format!(
            "{} exited with {}: {}",
            python.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    // What the script says besides its answer (a library's build line, a
    // size it skipped) reaches the user.
    let said = String::from_utf8_lossy(&out.stderr);
    for line in said.lines().filter(|l| !l.trim().is_empty()) {
        eprintln!("{}: {line}", anchor.name());
    }
    let timings: Vec<AnchorTiming> = serde_json::from_slice(&out.stdout)
        .map_err(|e| fail(format!("reading its output: {e}")))?;
    for t in timings {
        let key = |r: &ShtRow| r.nlat == t.nlat && r.nlon == t.nlon && r.dtype == t.dtype;
        let serial = rows
            .iter()
            .find(|r| key(r) && r.run == "serial")
            .map_or(f64::NAN, |r| r.time_ms);
        for r in rows.iter_mut().filter(|r| key(r)) {
            *r.vs_mut(anchor) = Some(t.ms / r.time_ms);
        }
        let at = rows.iter().rposition(key).map_or(rows.len(), |i| i + 1);
        let dtype = if t.dtype == "f32" { "f32" } else { "f64" };
        // The anchor's own row: its ratio to itself is 1, its ratio to an
        // anchor timed earlier is filled in here, to one timed later then.
        let mut own = ShtRow {
            nlat: t.nlat,
            nlon: t.nlon,
            lmax: t.lmax,
            dtype,
            run: anchor.name().into(),
            ranks: 1,
            threads: t.threads,
            time_ms: t.ms,
            comm_share: 0.0,
            comm_ms: 0.0,
            vs_serial: serial / t.ms,
            vs_torch_harmonics: None,
            vs_ducc0: None,
            vs_shtns: None,
            round_trip_err: None,
            wrong: false,
            stages: None,
            rank_stages: Vec::new(),
        };
        for other in Anchor::ALL {
            *own.vs_mut(other) = if other == anchor {
                Some(1.0)
            } else {
                rows.iter()
                    .find(|r| key(r) && r.run == other.name())
                    .map(|r| r.time_ms / t.ms)
            };
        }
        rows.insert(at, own);
    }
    Ok(())
}

/// Print the table.
///
/// # Errors
/// Writing to `out`.
pub fn print_table(
    cfg: &ShtBenchConfig,
    rows: &[ShtRow],
    out: &mut impl Write,
) -> std::io::Result<()> {
    writeln!(
        out,
        "# forward + inverse real {}SHT, equiangular grid, {} channels{}, median of {} (after {} warm-up), slowest rank",
        if cfg.vector { "vector " } else { "" },
        cfg.channels,
        if cfg.vector { " of 2 components" } else { "" },
        cfg.iters,
        cfg.warmup
    )?;
    writeln!(
        out,
        "{:>9} {:>4} {:>5} {:>16} {:>7} {:>10} {:>7} {:>7} {:>9} {:>9} {:>9} {:>9} {:>10}",
        "grid",
        "lmax",
        "dtype",
        "run",
        "ranks",
        "time ms",
        "comm ms",
        "comm %",
        "vs serial",
        "vs th",
        "vs ducc0",
        "vs SHTns",
        "round trip"
    )?;
    for r in rows {
        writeln!(
            out,
            "{:>9} {:>4} {:>5} {:>16} {:>7} {:>10.3} {:>7.2} {:>7.1} {:>9.2} {:>9} {:>9} {:>9} {:>10}",
            format!("{}x{}", r.nlat, r.nlon),
            r.lmax,
            r.dtype,
            r.run,
            format!("{}x{}", r.ranks, r.threads),
            r.time_ms,
            r.comm_ms,
            100.0 * r.comm_share,
            r.vs_serial,
            r.vs_torch_harmonics
                .map_or("-".into(), |v| format!("{v:.2}")),
            r.vs_ducc0.map_or("-".into(), |v| format!("{v:.2}")),
            r.vs_shtns.map_or("-".into(), |v| format!("{v:.2}")),
            match (r.round_trip_err, r.wrong) {
                (None, _) => "-".into(),
                (Some(e), false) => format!("{e:.1e}"),
                (Some(e), true) => format!("{e:.1e} WRONG"),
            }
        )?;
    }
    writeln!(
        out,
        "# vs serial, vs th, vs ducc0, vs SHTns: the serial ruda-sphere time, torch-harmonics', ducc0's, SHTns' time (SHTns: f64 only, its polar_opt 1e-10; ruda leaves out values below 1e-17), divided by this row's (above 1: this row is faster)"
    )?;
    writeln!(
        out,
        "# ranks: ranks x threads of each (the serial transform and the anchors on every core, the ranks' threads adding up to the cores), so vs serial of a grid is its parallel efficiency at equal cores; comm ms: mean over ranks of the time in collectives (the rest is computation and waiting); mirrored: latitudes dealt in mirrored polar bands (LatitudeSplit::Mirrored)"
    )?;
    writeln!(
        out,
        "# GFLOP/s nominal: a multiply-add (two operations) per order, degree, latitude pair and column, each direction, work left out next to the poles counted as done"
    )?;
    let peak = fma_peak_gflops(threads());
    writeln!(
        out,
        "# Legendre kernels: {} (RUDA_SPHERE_KERNEL lowers it); this machine's measured FMA peak: {peak:.1} GFLOP/s on {} threads",
        ruda_sphere::kernel_level().name(),
        threads()
    )?;
    for r in rows {
        if let Some(s) = r.stages {
            writeln!(
                out,
                "# serial {}x{} {}, ms: fft {:.1}, reorder {:.1}, legendre {:.1} ({:.1} GFLOP/s nominal, {:.0} % of the FMA peak), host copies {:.1}, other (Burn tensor work) {:.1}",
                r.nlat,
                r.nlon,
                r.dtype,
                s.fft,
                s.reorder,
                s.legendre,
                s.legendre_gflops,
                100.0 * s.legendre_gflops / peak,
                s.host_copies,
                s.other
            )?;
        }
    }
    for r in rows {
        for (rank, s) in r.rank_stages.iter().enumerate() {
            writeln!(
                out,
                "# {} {}x{} {} rank {rank} ({} threads), ms: fft {:.1}, reorder {:.1}, legendre {:.1}, host copies {:.1}, comm {:.1}, other {:.1}",
                r.run,
                r.nlat,
                r.nlon,
                r.dtype,
                r.threads,
                s.fft,
                s.reorder,
                s.legendre,
                s.host_copies,
                s.comm,
                s.other
            )?;
        }
    }
    Ok(())
}

/// The threads the transforms and the anchors use: this machine's cores.
fn threads() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}

/// This machine's fused multiply-add rate on `threads` threads at the
/// Legendre kernels' level ([`ruda_sphere::kernel_level`]), in GFLOP/s
/// (a multiply-add counts two): twelve independent chains of multiply-adds
/// in registers per thread, as many steps as take at least 20 ms, the best
/// of three runs. The roofline the Legendre stage's rate is reported
/// against.
pub fn fma_peak_gflops(threads: usize) -> f64 {
    let threads = threads.max(1);
    // (the chains' sum, the lanes each step updates)
    let one = |steps: u64, seed: f64| -> (f64, usize) {
        #[cfg(target_arch = "x86_64")]
        match ruda_sphere::kernel_level() {
            ruda_sphere::KernelLevel::Avx512 => {
                // SAFETY: `chains_avx512` requires AVX-512F and FMA; the
                // kernel level is `Avx512` only when the CPU reports both
                // (`KernelLevel::detected`).
                return (unsafe { chains_avx512(steps, seed) }, CHAINS * 8);
            }
            ruda_sphere::KernelLevel::Avx2 => {
                // SAFETY: `chains_avx2` requires AVX2 and FMA; the kernel
                // level is `Avx2` or above only when the CPU reports both.
                return (unsafe { chains_avx2(steps, seed) }, CHAINS * 4);
            }
            ruda_sphere::KernelLevel::Portable => {}
        }
        (chains(steps, seed), CHAINS)
    };
    let run = |steps: u64| -> (f64, usize) {
        let t = Instant::now();
        let lanes = std::thread::scope(|s| {
            let handles: Vec<_> = (0..threads)
                .map(|i| s.spawn(move || one(steps, 1.0 + i as f64 * 1e-3)))
                .collect();
            let done: Vec<(f64, usize)> = handles
                .into_iter()
                .map(|h| h.join().unwrap_or((f64::NAN, 0)))
                .collect();
            std::hint::black_box(&done);
            done.first().map_or(0, |d| d.1)
        });
        (t.elapsed().as_secs_f64(), lanes)
    };
    let mut steps = 1 << 16;
    while run(steps).0 < 0.02 && steps < 1 << 32 {
        steps *= 2;
    }
    let (mut best, mut lanes) = (f64::INFINITY, 0);
    for _ in 0..3 {
        let (t, l) = run(steps);
        (best, lanes) = (best.min(t), l);
    }
    threads as f64 * steps as f64 * lanes as f64 * 2.0 / best / 1e9
}

/// Independent chains of multiply-adds per thread in the peak loops:
/// twelve registers (256- or 512-bit), enough to cover the latency of two
/// units on every x86-64 this runs on.
const CHAINS: usize = 12;

/// `steps` rounds of one multiply-add (unfused) on each of [`CHAINS`]
/// scalar chains.
fn chains(steps: u64, seed: f64) -> f64 {
    let (a, b) = (
        std::hint::black_box(0.999_999_9),
        std::hint::black_box(1e-9),
    );
    let mut acc = [seed; CHAINS];
    for _ in 0..steps {
        for v in acc.iter_mut() {
            *v = *v * a + b;
        }
    }
    acc.iter().sum()
}

/// [`chains`] in 256-bit fused multiply-adds (the compiler keeps the
/// scalar form of a lane-by-lane `mul_add`, so the vector instructions
/// are named).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn chains_avx2(steps: u64, seed: f64) -> f64 {
    use std::arch::x86_64::*;
    let (a, b) = (
        _mm256_set1_pd(std::hint::black_box(0.999_999_9)),
        _mm256_set1_pd(std::hint::black_box(1e-9)),
    );
    let mut acc = [_mm256_set1_pd(seed); CHAINS];
    for _ in 0..steps {
        for v in acc.iter_mut() {
            *v = _mm256_fmadd_pd(*v, a, b);
        }
    }
    let mut lanes = [0.0f64; 4];
    let mut sum = 0.0;
    for v in acc {
        // SAFETY: `lanes` holds four f64, what one 256-bit store writes;
        // `storeu` takes any alignment.
        unsafe { _mm256_storeu_pd(lanes.as_mut_ptr(), v) };
        sum += lanes.iter().sum::<f64>();
    }
    sum
}

/// [`chains`] in 512-bit fused multiply-adds.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
fn chains_avx512(steps: u64, seed: f64) -> f64 {
    use std::arch::x86_64::*;
    let (a, b) = (
        _mm512_set1_pd(std::hint::black_box(0.999_999_9)),
        _mm512_set1_pd(std::hint::black_box(1e-9)),
    );
    let mut acc = [_mm512_set1_pd(seed); CHAINS];
    for _ in 0..steps {
        for v in acc.iter_mut() {
            *v = _mm512_fmadd_pd(*v, a, b);
        }
    }
    let mut sum = 0.0;
    for v in acc {
        sum += _mm512_reduce_add_pd(v);
    }
    sum
}
