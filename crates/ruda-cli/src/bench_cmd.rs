//! `ruda bench`: bandwidth of the collectives (or of the tensor layer) over
//! a sweep of sizes, in the conventions of nccl-tests, with a memcpy line of
//! each size measured in the same run.

use std::io::Write;
use std::time::Instant;

use burn_backend::ops::FloatTensorOps;
use burn_backend::{TensorData, read_sync};
use burn_flex::{Flex, FlexDevice};
use half::{bf16, f16};
use indicatif::{ProgressBar, ProgressStyle};
use ruda_comm::bench::{self, BenchOp, Measurement};
use ruda_comm::conformance::Sample;
use ruda_comm::{Communicator, DType, LocalWorld, ReduceOp};
use ruda_tensor::{
    BroadcastTensorCollective, HostCollective, ReplicatedTensorCollective, TensorCollective,
    VariableTensorCollective,
};
use serde::Serialize;
use thiserror::Error;

/// What to measure.
#[derive(Clone, Debug, PartialEq)]
pub struct BenchConfig {
    /// Operations, in table order.
    pub ops: Vec<BenchOp>,
    /// Element type.
    pub dtype: DType,
    /// Sizes `S` in bytes (see [`ruda_comm::bench`]).
    pub sizes: Vec<usize>,
    /// Ranks (threads).
    pub ranks: usize,
    /// Timed iterations per size.
    pub iters: usize,
    /// Untimed warm-up iterations per size.
    pub warmup: usize,
    /// Time the ruda-tensor layer on Flex instead of the raw communicator.
    pub tensor: bool,
}

/// Why a benchmark could not run.
#[derive(Debug, Error)]
pub enum BenchError {
    /// A rank failed.
    #[error("{op} at {bytes} bytes failed: {message}")]
    Run {
        /// The operation.
        op: &'static str,
        /// The size.
        bytes: usize,
        /// What happened.
        message: String,
    },
    /// The tensor layer moves floating tensors only.
    #[error("--tensor needs a floating element type (f16, bf16, f32, f64), not {0}")]
    TensorDType(DType),
    /// Writing the output failed.
    #[error("writing the output: {0}")]
    Io(#[from] std::io::Error),
}

/// One row of the output, as printed and as written by `--json`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Row {
    /// `collective`, `tensor` or `memcpy`.
    pub kind: &'static str,
    /// The operation (`all-reduce` …, or `memcpy`).
    pub op: &'static str,
    /// Element type.
    pub dtype: &'static str,
    /// Ranks.
    pub ranks: usize,
    /// `S` in bytes.
    pub bytes: usize,
    /// `S` in elements.
    pub count: usize,
    /// Slowest rank's median time, µs.
    pub time_us: f64,
    /// GB/s.
    pub algbw: f64,
    /// GB/s (memcpy: equal to algbw).
    pub busbw: f64,
    /// Elements that were wrong in the checked run.
    pub wrong: usize,
}

impl Row {
    fn from_measurement(kind: &'static str, m: &Measurement) -> Self {
        Row {
            kind,
            op: m.op.name(),
            dtype: m.dtype.name(),
            ranks: m.ranks,
            bytes: m.bytes,
            count: m.count,
            time_us: m.time_us,
            algbw: m.algbw,
            busbw: m.busbw,
            wrong: m.wrong,
        }
    }
}

/// Run the sweep on threads; rows in size order, each size's memcpy row
/// first.
///
/// # Errors
/// [`BenchError::Run`] when a rank fails; [`BenchError::TensorDType`].
pub fn run(cfg: &BenchConfig, progress: &ProgressBar) -> Result<Vec<Row>, BenchError> {
    sweep(cfg, progress, |op, bytes| measure_dtype(cfg, op, bytes))
}

/// Run the sweep with one rank per MPI process (every process calls this;
/// every rank gets the same rows). `cfg.ranks` is ignored: the world's size
/// counts.
///
/// # Errors
/// As [`run`].
#[cfg(feature = "mpi")]
pub fn run_mpi(
    cfg: &BenchConfig,
    world: ruda_comm::MpiCommunicator,
    progress: &ProgressBar,
) -> Result<Vec<Row>, BenchError> {
    let tensor_comm = world
        .split(Some(0), 0)
        .map_err(|e| BenchError::Run {
            op: "split",
            bytes: 0,
            message: e.to_string(),
        })?
        .expect("a colour");
    let tensor_comm = std::sync::Arc::new(tensor_comm);
    sweep(cfg, progress, |op, bytes| {
        macro_rules! go {
            ($t:ty) => {
                if cfg.tensor {
                    measure_tensor::<_, $t>(
                        HostCollective::from_arc(tensor_comm.clone()),
                        op,
                        bytes,
                        cfg.warmup,
                        cfg.iters,
                    )
                } else {
                    bench::measure::<_, $t>(&world, op, bytes, cfg.warmup, cfg.iters)
                        .map_err(|e| e.to_string())
                }
            };
        }
        match cfg.dtype {
            DType::F16 => go!(f16),
            DType::BF16 => go!(bf16),
            DType::F32 => go!(f32),
            DType::F64 => go!(f64),
            DType::U8 => go!(u8),
            DType::U32 => go!(u32),
            DType::I32 => go!(i32),
            DType::I64 => go!(i64),
        }
    })
}

fn sweep(
    cfg: &BenchConfig,
    progress: &ProgressBar,
    mut measure: impl FnMut(BenchOp, usize) -> Result<Measurement, String>,
) -> Result<Vec<Row>, BenchError> {
    if cfg.tensor && !cfg.dtype.is_float() {
        return Err(BenchError::TensorDType(cfg.dtype));
    }
    let mut rows = Vec::new();
    for &bytes in &cfg.sizes {
        let (us, gbps) = bench::memcpy(bytes, cfg.iters.max(5));
        rows.push(Row {
            kind: "memcpy",
            op: "memcpy",
            dtype: "u8",
            ranks: 1,
            bytes,
            count: bytes,
            time_us: us,
            algbw: gbps,
            busbw: gbps,
            wrong: 0,
        });
        for &op in &cfg.ops {
            progress.set_message(format!("{} {}", op.name(), crate::sizes::human(bytes)));
            let m = measure(op, bytes).map_err(|message| BenchError::Run {
                op: op.name(),
                bytes,
                message,
            })?;
            rows.push(Row::from_measurement(
                if cfg.tensor { "tensor" } else { "collective" },
                &m,
            ));
            progress.inc(1);
        }
    }
    Ok(rows)
}

fn measure_dtype(cfg: &BenchConfig, op: BenchOp, bytes: usize) -> Result<Measurement, String> {
    macro_rules! go {
        ($t:ty) => {
            measure_one::<$t>(cfg, op, bytes)
        };
    }
    match cfg.dtype {
        DType::F16 => go!(f16),
        DType::BF16 => go!(bf16),
        DType::F32 => go!(f32),
        DType::F64 => go!(f64),
        DType::U8 => go!(u8),
        DType::U32 => go!(u32),
        DType::I32 => go!(i32),
        DType::I64 => go!(i64),
    }
}

fn measure_one<T: Sample + burn_backend::Element>(
    cfg: &BenchConfig,
    op: BenchOp,
    bytes: usize,
) -> Result<Measurement, String> {
    let rows = LocalWorld::new(cfg.ranks).run(|c| {
        if cfg.tensor {
            measure_tensor::<_, T>(HostCollective::new(c), op, bytes, cfg.warmup, cfg.iters)
        } else {
            bench::measure::<_, T>(&c, op, bytes, cfg.warmup, cfg.iters).map_err(|e| e.to_string())
        }
    });
    rows.map(|r| r.into_iter().next().expect("one rank at least"))
        .map_err(|e| e.to_string())
}

/// Time the tensor-layer version of `op` on Flex: every timed call gets a
/// fresh tensor built before the timer, as a gradient would be.
fn measure_tensor<
    C: Communicator + std::fmt::Debug + 'static,
    T: Sample + burn_backend::Element,
>(
    coll: HostCollective<C>,
    op: BenchOp,
    bytes: usize,
    warmup: usize,
    iters: usize,
) -> Result<Measurement, String> {
    let n = coll.comm().size();
    let count = bench::elements_for::<T>(bytes, n);
    let fill = T::from_small(coll.comm().rank() as u8 + 1);
    let input_len = if op == BenchOp::AllGather {
        count / n
    } else {
        count
    };
    let make = || {
        Flex::float_from_data(
            TensorData::new(vec![fill; input_len], [input_len]),
            &FlexDevice,
        )
    };
    let call = |x| -> Result<_, String> {
        let r = match op {
            BenchOp::AllReduce => ReplicatedTensorCollective::<Flex>::all_reduce_sum(&coll, x),
            BenchOp::AllGather => TensorCollective::<Flex>::all_gather_float(&coll, x),
            BenchOp::ReduceScatter => TensorCollective::<Flex>::reduce_scatter_sum(&coll, x),
            BenchOp::Broadcast => BroadcastTensorCollective::<Flex>::broadcast_float(&coll, x, 0),
            BenchOp::AllToAll => {
                VariableTensorCollective::<Flex>::all_to_all_v_float(&coll, x, &vec![count / n; n])
                    .map(|e| e.value)
            }
        };
        r.map_err(|e| e.to_string())
    };
    for _ in 0..warmup {
        call(make())?;
    }
    let comm = coll.comm();
    let mut times = Vec::with_capacity(iters.max(1));
    for _ in 0..iters.max(1) {
        let x = make();
        comm.barrier().map_err(|e| e.to_string())?;
        let t = Instant::now();
        let out = call(x)?;
        let mut e = [t.elapsed().as_secs_f64()];
        drop(out);
        comm.all_reduce(&mut e, ReduceOp::Max)
            .map_err(|e| e.to_string())?;
        times.push(e[0]);
    }
    let out = read_sync(Flex::float_into_data(call(make())?)).map_err(|e| format!("{e:?}"))?;
    let got = out.as_slice::<T>().map_err(|e| format!("{e:?}"))?;
    let block = count / n;
    let total = T::from_small((n * (n + 1) / 2) as u8);
    let expected = |i: usize| match op {
        BenchOp::AllReduce | BenchOp::ReduceScatter => total,
        BenchOp::Broadcast => T::from_small(1),
        BenchOp::AllGather | BenchOp::AllToAll => T::from_small((i / block) as u8 + 1),
    };
    let wrong = got
        .iter()
        .enumerate()
        .filter(|(i, x)| **x != expected(*i))
        .count();
    let mut w = [wrong as f64];
    comm.all_reduce(&mut w, ReduceOp::Sum)
        .map_err(|e| e.to_string())?;
    times.sort_by(f64::total_cmp);
    let t = times[times.len() / 2];
    let s = (count * size_of::<T>()) as f64;
    let algbw = s / t / 1e9;
    Ok(Measurement {
        op,
        dtype: T::DTYPE,
        ranks: n,
        bytes: count * size_of::<T>(),
        count,
        time_us: t * 1e6,
        algbw,
        busbw: algbw * op.bus_factor(n),
        wrong: w[0] as usize,
    })
}

/// Print the rows as a table in the style of nccl-tests.
///
/// # Errors
/// Writing fails.
pub fn print_table(cfg: &BenchConfig, rows: &[Row], out: &mut impl Write) -> std::io::Result<()> {
    writeln!(
        out,
        "# ruda bench: {} ranks (threads), local transport{}, {} timed iterations after {} warm-up",
        cfg.ranks,
        if cfg.tensor {
            ", tensor layer on Flex"
        } else {
            ""
        },
        cfg.iters,
        cfg.warmup
    )?;
    writeln!(out, "{}", bench::header())?;
    for r in rows {
        if r.kind == "memcpy" {
            writeln!(
                out,
                "{}",
                bench::format_memcpy_row(r.bytes, r.time_us, r.algbw)
            )?;
        } else {
            let m = Measurement {
                op: BenchOp::ALL
                    .into_iter()
                    .find(|o| o.name() == r.op)
                    .expect("known op"),
                dtype: cfg.dtype,
                ranks: r.ranks,
                bytes: r.bytes,
                count: r.count,
                time_us: r.time_us,
                algbw: r.algbw,
                busbw: r.busbw,
                wrong: r.wrong,
            };
            writeln!(out, "{}", bench::format_row(&m))?;
        }
    }
    let wrong: usize = rows.iter().map(|r| r.wrong).sum();
    writeln!(
        out,
        "# out of bounds values: {wrong} {}",
        if wrong == 0 { "OK" } else { "FAILED" }
    )
}

/// The `--json` document: the configuration and every row.
#[derive(Debug, Serialize)]
pub struct Report<'a> {
    /// Ranks.
    pub ranks: usize,
    /// Element type.
    pub dtype: &'static str,
    /// `local`.
    pub transport: &'static str,
    /// Whether the tensor layer was timed.
    pub tensor: bool,
    /// Every row, memcpy rows included.
    pub rows: &'a [Row],
}

/// A progress bar for `steps` measurements, drawn only on a terminal.
pub fn progress(steps: u64) -> ProgressBar {
    let bar = ProgressBar::new(steps);
    bar.set_style(
        ProgressStyle::with_template("{spinner} {msg:<24} [{bar:30}] {pos}/{len}")
            .expect("valid template"),
    );
    bar
}
