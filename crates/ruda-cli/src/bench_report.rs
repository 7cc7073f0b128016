//! What `ruda bench` measures and prints: its configuration
//! ([`BenchConfig`]), one row per operation and size ([`Row`]) and the
//! `--json` document ([`Report`]). The sweep that fills them is
//! [`crate::bench_cmd`]; the Open MPI baseline that adds its column is
//! [`crate::baseline`].

use ruda_bench::{BenchOp, Iterations, Measurement, Settings};
use ruda_comm::DType;
use serde::{Deserialize, Serialize};

/// What to measure.
#[derive(Clone, Debug, PartialEq)]
pub struct BenchConfig {
    /// Operations, in table order.
    pub ops: Vec<BenchOp>,
    /// Element type.
    pub dtype: DType,
    /// Sizes `S` in bytes (see [`ruda_bench`]).
    pub sizes: Vec<usize>,
    /// Ranks (threads).
    pub ranks: usize,
    /// Timed iterations per size; `None`: [`Iterations::auto`].
    pub iters: Option<usize>,
    /// Untimed warm-up iterations per size; `None`: a tenth of the timed
    /// ones, at least two.
    pub warmup: Option<usize>,
    /// Time the ruda-tensor layer on Flex instead of the raw communicator.
    pub tensor: bool,
    /// Pin rank threads to cores ([`LocalWorld::pin_threads`]).
    pub pin: bool,
    /// Time the raw MPI collective instead of ruda's (MPI transport only:
    /// the baseline run of `--baseline mpi`).
    pub raw_mpi: bool,
    /// Give ruda's calls shared buffers of the MPI world
    /// (`--shared-buffers`, MPI transport only; the world must have been
    /// built with arenas of [`ruda_bench::shared_arena_bytes`]).
    pub shared_buffers: bool,
}

impl BenchConfig {
    /// How to measure `bytes`: the configured or automatic iterations, with
    /// roofline and back-to-back time.
    pub fn settings(&self, bytes: usize) -> Settings {
        let auto = Iterations::auto(bytes);
        let iters = self.iters.unwrap_or(auto.iters).max(1);
        Settings {
            it: Iterations {
                warmup: self.warmup.unwrap_or((iters / 10).max(2)),
                iters,
            },
            roofline: true,
            wall: true,
        }
    }
}

/// One row of the output, as printed and as written by `--json` (figures
/// not measured are `null` there).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Row {
    /// `collective`, `tensor` or `mpi` (the raw MPI call).
    pub kind: String,
    /// The operation (`all-reduce` …).
    pub op: String,
    /// Element type.
    pub dtype: String,
    /// Ranks.
    pub ranks: usize,
    /// `S` in bytes.
    pub bytes: usize,
    /// `S` in elements.
    pub count: usize,
    /// Slowest rank's median time (p50), µs.
    pub time_us: f64,
    /// Slowest rank's 99th-percentile time, µs.
    pub p99_us: f64,
    /// Timed iterations behind p50 and p99.
    pub iters: usize,
    /// Back-to-back calls: the slowest rank's total over their number, µs.
    pub wall_us: Option<f64>,
    /// GB/s (`None` for a row that moves no data).
    pub algbw: Option<f64>,
    /// GB/s (`None` for a row that moves no data).
    pub busbw: Option<f64>,
    /// Whether the call copies any bytes: `false` for the device-resident
    /// broadcast on one shared device, which hands every rank the root's
    /// tensor (then no bandwidth and no roofline are reported).
    #[serde(default = "moves_data_default")]
    pub moves_data: bool,
    /// Aggregate STREAM rate (copy or add) of all ranks on this row's
    /// buffer size, GB/s.
    pub stream_gbps: Option<f64>,
    /// The op's bytes at `stream_gbps`, µs.
    pub roofline_us: Option<f64>,
    /// `roofline_us / time_us`, percent.
    pub roofline_pct: Option<f64>,
    /// Elements that were wrong in the checked run.
    pub wrong: usize,
    /// The raw MPI collective's p50 on the same size, µs (`--baseline mpi`).
    pub mpi_us: Option<f64>,
    /// `mpi_us / time_us`: above 1, ruda is faster.
    pub mpi_speedup: Option<f64>,
}

fn moves_data_default() -> bool {
    true
}

fn finite(x: f64) -> Option<f64> {
    x.is_finite().then_some(x)
}

impl Row {
    /// The same row for a call that copies no bytes: no bandwidth and no
    /// roofline (the time stays: what the call costs).
    pub fn without_data_movement(mut self) -> Self {
        self.moves_data = false;
        self.algbw = None;
        self.busbw = None;
        self.roofline_us = None;
        self.roofline_pct = None;
        self
    }

    /// The row of a measurement.
    pub fn from_measurement(kind: &str, m: &Measurement) -> Self {
        Row {
            kind: kind.to_string(),
            op: m.op.name().to_string(),
            dtype: m.dtype.name().to_string(),
            ranks: m.ranks,
            bytes: m.bytes,
            count: m.count,
            time_us: m.time_us,
            p99_us: m.p99_us,
            iters: m.iters,
            wall_us: finite(m.wall_us),
            algbw: finite(m.algbw),
            busbw: finite(m.busbw),
            moves_data: true,
            stream_gbps: finite(m.stream_gbps),
            roofline_us: finite(m.roofline_us),
            roofline_pct: finite(m.roofline_pct()),
            wrong: m.wrong,
            mpi_us: None,
            mpi_speedup: None,
        }
    }

    /// The operation of this row.
    pub fn bench_op(&self) -> Option<BenchOp> {
        BenchOp::ALL.into_iter().find(|o| o.name() == self.op)
    }

    /// The roofline busbw: `S` over the roofline time, times the bus factor.
    pub fn roofline_busbw(&self) -> Option<f64> {
        let op = self.bench_op()?;
        self.roofline_us
            .map(|t| self.bytes as f64 / (t * 1e-6) / 1e9 * op.bus_factor(self.ranks))
    }
}

/// The `--json` document: the configuration and every row.
#[derive(Debug, Serialize, Deserialize)]
pub struct Report {
    /// Ranks.
    pub ranks: usize,
    /// Element type.
    pub dtype: String,
    /// `local`, `mpi` or `device`.
    pub transport: String,
    /// The device the ranks share (`flex`, `wgpu`) with the device
    /// transport.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<String>,
    /// Whether the tensor layer was timed.
    pub tensor: bool,
    /// Whether ruda's calls had shared buffers (`--shared-buffers`).
    #[serde(default)]
    pub shared_buffers: bool,
    /// The core of each rank when the ranks were pinned.
    pub pinned_cores: Option<Vec<usize>>,
    /// Every row.
    pub rows: Vec<Row>,
}
