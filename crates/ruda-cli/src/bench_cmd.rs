//! `ruda bench`: bandwidth of the collectives (or of the tensor layer) over
//! a sweep of sizes, in the conventions of nccl-tests, each row with its
//! roofline measured in the same run, p50/p99, an independent back-to-back
//! wall-clock time, and optionally Open MPI's own collective on the same
//! sizes ([`crate::baseline`]). What it measures and prints is in
//! [`crate::bench_report`].

use std::io::Write;

use burn_backend::ops::FloatTensorOps;
use burn_backend::{TensorData, read_sync};
use burn_flex::{Flex, FlexDevice};
use half::{bf16, f16};
use indicatif::{ProgressBar, ProgressStyle};
use ruda_bench::Sample;
use ruda_bench::{self as bench, BenchOp, Measurement, Settings};
use ruda_comm::{CommError, Communicator, DType, LocalWorld};
use ruda_tensor::{
    BroadcastTensorCollective, HostCollective, ReplicatedTensorCollective, TensorCollective,
    VariableTensorCollective,
};
use thiserror::Error;

use crate::bench_report::{BenchConfig, Row};

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
    /// The device asked for is not in this build.
    #[error("--device {0}: this ruda was built without it (rebuild with --features {0})")]
    DeviceUnavailable(&'static str),
    /// Writing the output failed.
    #[error("writing the output: {0}")]
    Io(#[from] std::io::Error),
}

/// Run the sweep on threads; rows in size order, then table order of ops.
///
/// # Errors
/// [`BenchError::Run`] when a rank fails; [`BenchError::TensorDType`].
pub fn run(cfg: &BenchConfig, progress: &ProgressBar) -> Result<Vec<Row>, BenchError> {
    let world = LocalWorld::new(cfg.ranks).pin_threads(cfg.pin);
    sweep(cfg, progress, |op, bytes| {
        measure_dtype(cfg, &world, op, bytes)
    })
}

/// Run the sweep with one rank per MPI process (every process calls this;
/// every rank gets the same rows). `cfg.ranks` is ignored: the world's size
/// counts. With `cfg.raw_mpi` the raw MPI collectives are timed instead.
///
/// # Errors
/// As [`run`].
#[cfg(feature = "mpi")]
pub fn run_mpi(
    cfg: &BenchConfig,
    world: &ruda_comm::MpiCommunicator,
    progress: &ProgressBar,
) -> Result<Vec<Row>, BenchError> {
    // The tensor layer's own communicator, only when it is timed (a
    // communicator's segment, arenas included, is reserved up front).
    let tensor_comm = if cfg.tensor {
        let c = world
            .split(Some(0), 0)
            .map_err(|e| BenchError::Run {
                op: "split",
                bytes: 0,
                message: e.to_string(),
            })?
            .expect("a colour");
        Some(std::sync::Arc::new(c))
    } else {
        None
    };
    if cfg.shared_buffers && !cfg.raw_mpi {
        // Every rank's answer is the same (arenas are agreed); say why
        // there are none rather than fail inside the first measurement.
        world.shared_buffer::<u8>(1).map_err(|e| BenchError::Run {
            op: "shared_buffer",
            bytes: 0,
            message: e.to_string(),
        })?;
    }
    sweep(cfg, progress, |op, bytes| {
        let settings = cfg.settings(bytes);
        macro_rules! go {
            ($t:ty) => {
                if cfg.raw_mpi {
                    bench::measure_mpi_raw::<$t>(world, op, bytes, settings)
                        .map_err(|e| e.to_string())
                } else if cfg.tensor {
                    measure_tensor::<_, $t>(
                        HostCollective::from_arc(
                            tensor_comm.clone().expect("split for the tensor layer"),
                        ),
                        op,
                        bytes,
                        settings,
                    )
                } else if cfg.shared_buffers {
                    bench::measure_shared::<$t>(world, op, bytes, settings)
                        .map_err(|e| e.to_string())
                } else {
                    bench::measure::<_, $t>(world, op, bytes, settings).map_err(|e| e.to_string())
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
    let kind = if cfg.raw_mpi {
        "mpi"
    } else if cfg.tensor {
        "tensor"
    } else {
        "collective"
    };
    let mut rows = Vec::new();
    for &bytes in &cfg.sizes {
        for &op in &cfg.ops {
            progress.set_message(format!("{} {}", op.name(), crate::sizes::human(bytes)));
            let m = measure(op, bytes).map_err(|message| BenchError::Run {
                op: op.name(),
                bytes,
                message,
            })?;
            rows.push(Row::from_measurement(kind, &m));
            progress.inc(1);
        }
    }
    Ok(rows)
}

fn measure_dtype(
    cfg: &BenchConfig,
    world: &LocalWorld,
    op: BenchOp,
    bytes: usize,
) -> Result<Measurement, String> {
    macro_rules! go {
        ($t:ty) => {
            measure_one::<$t>(cfg, world, op, bytes)
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
    world: &LocalWorld,
    op: BenchOp,
    bytes: usize,
) -> Result<Measurement, String> {
    let settings = cfg.settings(bytes);
    let rows = world.run(|c| {
        if cfg.tensor {
            measure_tensor::<_, T>(HostCollective::new(c), op, bytes, settings)
        } else {
            bench::measure::<_, T>(&c, op, bytes, settings).map_err(|e| e.to_string())
        }
    });
    rows.map(|r| r.into_iter().next().expect("one rank at least"))
        .map_err(|e| e.to_string())
}

/// A harness error as the tensor bench's text error.
struct Text(String);

impl From<CommError> for Text {
    fn from(e: CommError) -> Self {
        Text(e.to_string())
    }
}

/// Time the tensor-layer version of `op` on Flex with the shared harness:
/// every timed call gets a fresh tensor built before the timer, as a
/// gradient would be, so there is no back-to-back time.
fn measure_tensor<
    C: Communicator + std::fmt::Debug + 'static,
    T: Sample + burn_backend::Element,
>(
    coll: HostCollective<C>,
    op: BenchOp,
    bytes: usize,
    settings: Settings,
) -> Result<Measurement, String> {
    let comm = coll.comm();
    let (n, me) = (comm.size(), comm.rank());
    let count = bench::elements_for::<T>(bytes, n);
    let stream = if settings.roofline {
        let s_bytes = count * size_of::<T>();
        bench::stream(
            comm,
            op.stream_kernel(n),
            op.footprint(n, s_bytes),
            settings.it,
        )
        .map_err(|e| e.to_string())?
    } else {
        f64::NAN
    };
    let mut input = vec![T::zeroed(); bench::buffer_lens(op, n, count).0];
    bench::fill(op, me, n, count, &mut input);
    let make = || Flex::float_from_data(TensorData::new(input.clone(), [input.len()]), &FlexDevice);
    let call = |x| -> Result<_, Text> {
        let r = match op {
            BenchOp::AllReduce => ReplicatedTensorCollective::<Flex>::all_reduce_sum(&coll, x),
            BenchOp::AllGather => TensorCollective::<Flex>::all_gather_float(&coll, x),
            BenchOp::ReduceScatter => TensorCollective::<Flex>::reduce_scatter_sum(&coll, x),
            BenchOp::Broadcast => BroadcastTensorCollective::<Flex>::broadcast_float(&coll, x, 0),
            BenchOp::AllToAll | BenchOp::AllToAllV => {
                VariableTensorCollective::<Flex>::all_to_all_v_float(&coll, x, &vec![count / n; n])
                    .map(|e| e.value)
            }
        };
        r.map_err(|e| Text(e.to_string()))
    };
    let samples = bench::time_calls(
        comm,
        settings.it.warmup,
        settings.it.iters.max(1),
        make,
        |x| call(x).map(drop),
    )
    .map_err(|Text(e)| e)?;
    let out = read_sync(Flex::float_into_data(call(make()).map_err(|Text(e)| e)?))
        .map_err(|e| format!("{e:?}"))?;
    let got = out.as_slice::<T>().map_err(|e| format!("{e:?}"))?;
    let mut w = [bench::count_wrong(op, me, n, count, got) as f64];
    comm.all_reduce(&mut w, ruda_comm::ReduceOp::Sum)
        .map_err(|e| e.to_string())?;
    Ok(Measurement::from_times(
        op,
        T::DTYPE,
        n,
        count,
        [samples.median(), samples.quantile(0.99), f64::NAN],
        samples.times().len(),
        stream,
        w[0] as usize,
    ))
}

/// Print the rows as a table in the style of nccl-tests, with the MPI
/// columns when a baseline was measured.
///
/// # Errors
/// Writing fails.
pub fn print_table(
    cfg: &BenchConfig,
    transport: &str,
    pinned: Option<&[usize]>,
    rows: &[Row],
    out: &mut impl Write,
) -> std::io::Result<()> {
    writeln!(
        out,
        "# ruda bench: {} ranks, {transport} transport{}{}{}, iterations per size: {}",
        cfg.ranks,
        if cfg.tensor {
            ", tensor layer on Flex"
        } else {
            ""
        },
        if cfg.shared_buffers {
            ", shared buffers"
        } else {
            ""
        },
        match pinned {
            Some(c) => format!(", ranks pinned to cores {c:?}"),
            None if transport == "local" => ", ranks not pinned".to_string(),
            None => String::new(),
        },
        match cfg.iters {
            Some(i) => i.to_string(),
            None => "auto (2000 at 4K down to 10 at 64M)".to_string(),
        }
    )?;
    writeln!(
        out,
        "# p50/p99: slowest rank per call; b2b: back-to-back calls, independent wall clock; \
         roofline: the op's minimum memory traffic at the STREAM rate of {} threads on the same buffer sizes",
        cfg.ranks
    )?;
    let baseline = rows.iter().any(|r| r.mpi_us.is_some());
    let header = bench::header();
    if baseline {
        let mut lines = header.lines();
        writeln!(
            out,
            "{} {:>10} {:>8}",
            lines.next().unwrap_or(""),
            "mpi p50",
            "mpi/ruda"
        )?;
        writeln!(
            out,
            "{} {:>10} {:>8}",
            lines.next().unwrap_or(""),
            "(us)",
            ""
        )?;
    } else {
        writeln!(out, "{header}")?;
    }
    for r in rows {
        let m = Measurement {
            op: r.bench_op().expect("known op"),
            dtype: cfg.dtype,
            ranks: r.ranks,
            bytes: r.bytes,
            count: r.count,
            time_us: r.time_us,
            p99_us: r.p99_us,
            iters: r.iters,
            wall_us: r.wall_us.unwrap_or(f64::NAN),
            algbw: r.algbw.unwrap_or(f64::NAN),
            busbw: r.busbw.unwrap_or(f64::NAN),
            stream_gbps: r.stream_gbps.unwrap_or(f64::NAN),
            roofline_us: r.roofline_us.unwrap_or(f64::NAN),
            wrong: r.wrong,
        };
        write!(out, "{}", bench::format_row(&m))?;
        if baseline {
            match (r.mpi_us, r.mpi_speedup) {
                (Some(t), Some(s)) => write!(out, " {t:>10.2} {s:>8.2}")?,
                _ => write!(out, " {:>10} {:>8}", "-", "-")?,
            }
        }
        writeln!(out)?;
    }
    let wrong: usize = rows.iter().map(|r| r.wrong).sum();
    writeln!(
        out,
        "# out of bounds values: {wrong} {}",
        if wrong == 0 { "OK" } else { "FAILED" }
    )
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
