//! `ruda bench --transport device`: the device-resident collectives
//! ([`ruda_tensor::DeviceGroup`], tensors on one Burn device shared by
//! every rank thread) against, in the same run and on the same device and
//! sizes, (a) the device's own tensor-copy rate — the same number of threads
//! each copying its tensor out of place with the backend's own elementwise
//! kernels (the faster of `y = x + 0` and a concatenation), the roofline of every row —, (b) the host-staged
//! path ([`ruda_tensor::HostCollective`] over the local transport: the
//! tensor is read to host memory, moved, and rebuilt on the device), and
//! (c) the local transport on plain host slices (ruda-comm's own
//! collective, with its own STREAM roofline).
//!
//! Each timed call takes a fresh input tensor made (and synchronised)
//! before the timer, and ends with `Device::sync`, so asynchronous
//! backends are timed to completion; the slowest rank counts. Bandwidths
//! follow nccl-tests ([`ruda_bench`]).

use std::io::Write;

use burn_tensor::{DType as BurnDType, Device, Tensor, TensorData};
use half::{bf16, f16};
use indicatif::ProgressBar;
use ruda_bench::Sample;
use ruda_bench::{self as bench, BenchOp, Iterations, Measurement};
use ruda_comm::{CommError, Communicator, DType, LocalCommunicator, ReduceOp};
use ruda_tensor::{DeviceGroup, DeviceWorld, Group, HostCollective, TensorExt};

use crate::bench_cmd::BenchError;
use crate::bench_report::{BenchConfig, Row};

/// The device the ranks share.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BenchDevice {
    /// Burn's CPU backend.
    Flex,
    /// wgpu's default adapter (a GPU, or lavapipe's CPU Vulkan); needs a
    /// build with feature `wgpu`.
    Wgpu,
}

impl BenchDevice {
    /// `flex` or `wgpu`.
    pub const fn name(self) -> &'static str {
        match self {
            BenchDevice::Flex => "flex",
            BenchDevice::Wgpu => "wgpu",
        }
    }

    /// The Burn device.
    ///
    /// # Errors
    /// [`BenchError::DeviceUnavailable`] for wgpu in a build without it.
    pub fn device(self) -> Result<Device, BenchError> {
        match self {
            BenchDevice::Flex => Ok(Device::flex()),
            #[cfg(feature = "wgpu")]
            BenchDevice::Wgpu => Ok(Device::wgpu(burn_tensor::DeviceKind::DefaultDevice)),
            #[cfg(not(feature = "wgpu"))]
            BenchDevice::Wgpu => Err(BenchError::DeviceUnavailable("wgpu")),
        }
    }
}

/// A harness error as text.
#[derive(Debug)]
struct Text(String);

impl From<CommError> for Text {
    fn from(e: CommError) -> Self {
        Text(e.to_string())
    }
}

impl From<ruda_tensor::Error> for Text {
    fn from(e: ruda_tensor::Error) -> Self {
        Text(e.to_string())
    }
}

fn burn_dtype(d: DType) -> BurnDType {
    match d {
        DType::F16 => BurnDType::F16,
        DType::BF16 => BurnDType::BF16,
        DType::F64 => BurnDType::F64,
        _ => BurnDType::F32,
    }
}

fn sync(device: &Device) -> Result<(), Text> {
    device.sync().map_err(|e| Text(format!("{e:?}")))
}

/// The device's aggregate tensor-copy rate, GB/s: every rank copies its
/// own tensor of `footprint / 2` bytes out of place at once, one read and
/// one write per element, with the faster of two of the backend's own
/// kernels — an elementwise `y = x + 0` and a concatenation of the
/// tensor's two halves (the kind of copy `DeviceGroup` makes; on Flex a
/// memcpy, far faster than the elementwise kernel in a debug build); bytes
/// counted over all ranks over the slowest rank's median time.
fn copy_rate<T: Sample + burn_backend::Element>(
    comm: &LocalCommunicator,
    device: &Device,
    footprint: usize,
    it: Iterations,
) -> Result<f64, Text> {
    let len = (footprint / 2 / size_of::<T>()).max(16);
    let x = Tensor::<1>::from_data(
        TensorData::new(vec![T::zeroed(); len], [len]),
        (device, burn_dtype(T::DTYPE)),
    );
    sync(device)?;
    let half = len / 2;
    let (a, b) = (
        x.clone().narrow(0, 0, half),
        x.clone().narrow(0, half, len - half),
    );
    // The best time of a copy made by `copy` (its inputs stay alive: it
    // writes a new tensor), synchronised (see `Samples::best`).
    let median = |copy: &dyn Fn() -> Tensor<1>| -> Result<f64, Text> {
        let samples = bench::time_calls(
            comm,
            it.warmup,
            it.iters.max(1),
            || (),
            |()| {
                let y = copy();
                sync(device)?;
                drop(y);
                Ok::<_, Text>(())
            },
        )?;
        Ok(samples.best())
    };
    let add = median(&|| x.clone().add_scalar(0.0))?;
    let cat = median(&|| Tensor::cat(vec![a.clone(), b.clone()], 0))?;
    let counted = 2.0 * (len * size_of::<T>()) as f64 * comm.size() as f64;
    Ok(counted / add.min(cat) / 1e9)
}

/// Time `op` through the tensor layer on group `g` (device-resident or
/// host-staged) with tensors on `device`; one checked call at the end.
#[allow(clippy::too_many_arguments)]
fn measure_group<G: Group, T: Sample + burn_backend::Element>(
    g: &G,
    comm: &LocalCommunicator,
    device: &Device,
    op: BenchOp,
    bytes: usize,
    it: Iterations,
    copy_gbps: f64,
) -> Result<Measurement, Text> {
    let (n, me) = (g.size(), g.rank());
    let count = bench::elements_for::<T>(bytes, n);
    let mut input = vec![T::zeroed(); bench::buffer_lens(op, n, count).0];
    bench::fill(op, me, n, count, &mut input);
    let dtype = burn_dtype(T::DTYPE);
    let make = || {
        let t = Tensor::<1>::from_data(
            TensorData::new(input.clone(), [input.len()]),
            (device, dtype),
        );
        // A sync error here surfaces in the timed call's own sync.
        let _ = device.sync();
        t
    };
    let counts = vec![count / n; n];
    let call = |x: Tensor<1>| -> Result<Tensor<1>, Text> {
        let y = match op {
            BenchOp::AllReduce => x.all_reduce(g)?,
            BenchOp::AllGather => x.all_gather(g, 0)?,
            BenchOp::ReduceScatter => x.reduce_scatter(g, 0)?,
            BenchOp::Broadcast => x.broadcast(g, 0)?,
            BenchOp::AllToAll | BenchOp::AllToAllV => x.all_to_all(g, 0, &counts)?,
        };
        sync(device)?;
        Ok(y)
    };
    let samples = bench::time_calls(comm, it.warmup, it.iters.max(1), make, |x| {
        call(x).map(drop)
    })?;
    let out = call(make())?.into_data();
    let got = out.as_slice::<T>().map_err(|e| Text(format!("{e:?}")))?;
    let mut w = [bench::count_wrong(op, me, n, count, got) as f64];
    comm.all_reduce(&mut w, ReduceOp::Sum)?;
    Ok(Measurement::from_times(
        op,
        T::DTYPE,
        n,
        count,
        [samples.median(), samples.quantile(0.99), f64::NAN],
        samples.times().len(),
        copy_gbps,
        w[0] as usize,
    ))
}

/// One size and op: the device-resident row, the host-staged row and the
/// local-transport row, measured in that order by every rank.
fn measure_three<T: Sample + burn_backend::Element>(
    cfg: &BenchConfig,
    device: &Device,
    op: BenchOp,
    bytes: usize,
) -> Result<[Measurement; 3], String> {
    let settings = cfg.settings(bytes);
    let it = settings.it;
    let out = DeviceWorld::shared(cfg.ranks, device.clone())
        .pin_threads(cfg.pin)
        .run(
            |g: DeviceGroup, d: &Device| -> Result<[Measurement; 3], Text> {
                let comm = g.comm();
                let n = comm.size();
                let host_comm = comm.split(Some(0), 0)?.expect("a colour");
                let host = HostCollective::new(host_comm);
                let s_bytes = bench::elements_for::<T>(bytes, n) * size_of::<T>();
                let copy = copy_rate::<T>(comm, d, op.footprint(n, s_bytes), it)?;
                let dev = measure_group::<_, T>(&g, comm, d, op, bytes, it, copy)?;
                let staged = measure_group::<_, T>(&host, comm, d, op, bytes, it, copy)?;
                let local = bench::measure::<_, T>(comm, op, bytes, settings)?;
                Ok([dev, staged, local])
            },
        )
        .map_err(|e| match e {
            ruda_comm::WorldError::Rank {
                rank,
                error: ruda_comm::RankError::Failed(Text(m)),
            } => format!("rank {rank}: {m}"),
            other => format!("{other:?}"),
        })?;
    Ok(out.into_iter().next().expect("one rank at least"))
}

/// Run the sweep: for every size and op, three rows (kinds `device`,
/// `tensor` for the host-staged path, `collective` for the local
/// transport on slices).
///
/// # Errors
/// [`BenchError::Run`] when a rank fails; [`BenchError::TensorDType`] for
/// a non-float element type; [`BenchError::DeviceUnavailable`].
pub fn run(
    cfg: &BenchConfig,
    which: BenchDevice,
    progress: &ProgressBar,
) -> Result<Vec<Row>, BenchError> {
    if !cfg.dtype.is_float() {
        return Err(BenchError::TensorDType(cfg.dtype));
    }
    let device = which.device()?;
    let mut rows = Vec::new();
    for &bytes in &cfg.sizes {
        for &op in &cfg.ops {
            progress.set_message(format!("{} {}", op.name(), crate::sizes::human(bytes)));
            let m = match cfg.dtype {
                DType::F16 => measure_three::<f16>(cfg, &device, op, bytes),
                DType::BF16 => measure_three::<bf16>(cfg, &device, op, bytes),
                DType::F64 => measure_three::<f64>(cfg, &device, op, bytes),
                _ => measure_three::<f32>(cfg, &device, op, bytes),
            }
            .map_err(|message| BenchError::Run {
                op: op.name(),
                bytes,
                message,
            })?;
            for (kind, m) in ["device", "tensor", "collective"].iter().zip(&m) {
                let row = Row::from_measurement(kind, m);
                // On one shared device, `DeviceGroup::broadcast` hands every
                // rank the root's tensor: nothing is copied, so the row has
                // no bandwidth to report.
                let shared_handle = *kind == "device" && op == BenchOp::Broadcast && cfg.ranks > 1;
                rows.push(if shared_handle {
                    row.without_data_movement()
                } else {
                    row
                });
            }
            progress.inc(1);
        }
    }
    Ok(rows)
}

/// Print the device table: per size and op, the device-resident p50 and
/// busbw with its roofline at the device's tensor-copy rate, then the
/// host-staged and local-transport busbw and the ratios.
///
/// # Errors
/// Writing fails.
pub fn print_table(
    cfg: &BenchConfig,
    which: BenchDevice,
    pinned: Option<&[usize]>,
    rows: &[Row],
    out: &mut impl Write,
) -> std::io::Result<()> {
    writeln!(
        out,
        "# ruda bench: {} ranks sharing one {} device, device transport, {}{}",
        cfg.ranks,
        which.name(),
        cfg.dtype,
        match pinned {
            Some(c) => format!(", ranks pinned to cores {c:?}"),
            None => ", ranks not pinned".to_string(),
        }
    )?;
    writeln!(
        out,
        "# device: DeviceGroup (handles exchanged, the backend's own slice/cat/add); host-staged: HostCollective on the same device; \
         local: the local transport on host slices. copy: the device's tensor-copy rate (the faster of y = x + 0 and a concatenation, on {} threads at once); \
         roof: the op's least traffic at that rate over the device p50",
        cfg.ranks
    )?;
    writeln!(
        out,
        "#{:>14} {:>14} {:>10} {:>10} {:>9} {:>6} {:>10} {:>9} {:>9} {:>9} {:>9} {:>9} {:>6}",
        "size",
        "op",
        "dev p50",
        "dev p99",
        "dev bus",
        "%roof",
        "host p50",
        "host bus",
        "dev/host",
        "local bus",
        "dev/local",
        "copy",
        "#wrong"
    )?;
    writeln!(
        out,
        "#{:>14} {:>14} {:>10} {:>10} {:>9} {:>6} {:>10} {:>9} {:>9} {:>9} {:>9} {:>9} {:>6}",
        "(B)", "", "(us)", "(us)", "(GB/s)", "", "(us)", "(GB/s)", "", "(GB/s)", "", "(GB/s)", ""
    )?;
    let f = |x: Option<f64>, p: usize| match x {
        Some(x) if x.is_finite() => format!("{x:.p$}"),
        _ => "-".to_string(),
    };
    for chunk in rows.chunks(3) {
        let [d, h, l] = chunk else { continue };
        writeln!(
            out,
            "{:>15} {:>14} {:>10} {:>10} {:>9} {:>6} {:>10} {:>9} {:>9} {:>9} {:>9} {:>9} {:>6}",
            d.bytes,
            d.op,
            f(Some(d.time_us), 2),
            f(Some(d.p99_us), 2),
            if d.moves_data {
                f(d.busbw, 3)
            } else {
                "no copy".to_string()
            },
            f(d.roofline_pct, 0),
            f(Some(h.time_us), 2),
            f(h.busbw, 3),
            f(Some(h.time_us / d.time_us), 2),
            f(l.busbw, 3),
            f(Some(l.time_us / d.time_us), 2),
            f(d.stream_gbps, 1),
            d.wrong + h.wrong + l.wrong
        )?;
    }
    let wrong: usize = rows.iter().map(|r| r.wrong).sum();
    writeln!(
        out,
        "# dev/host, dev/local: time ratios (above 1: the device path is faster); no copy: the device broadcast hands every rank the root's tensor on one shared device (no bytes move, no bandwidth); out of bounds values: {wrong} {}",
        if wrong == 0 { "OK" } else { "FAILED" }
    )
}
