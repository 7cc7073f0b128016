//! # ruda-bench
//!
//! Bandwidth measurement for ruda in the conventions of nccl-tests, shared
//! by `ruda bench`, this crate's benchmarks (`cargo bench -p ruda-bench`),
//! the tensor benchmarks and `ruda-mpi-bench`. It lives outside the library
//! crates: a user of `ruda-comm` does not build it.
//!
//! `algbw = S / t`, where `S` is one rank's buffer for all-reduce and
//! broadcast and the total gathered size for all-gather, reduce-scatter and
//! all-to-all; `busbw = algbw × 2(n−1)/n` for all-reduce, `× (n−1)/n` for
//! all-gather, reduce-scatter and all-to-all, and `× 1` for broadcast. `t` is
//! the slowest rank's time, the median over the timed iterations
//! ([`time_calls`]).
//!
//! Each row also carries its roofline: the bytes the operation must move
//! ([`BenchOp::traffic`]) divided by the aggregate rate at which the same
//! number of threads move bytes through buffers of the same size
//! ([`stream`]), measured just before it; and an independent wall-clock
//! time of back-to-back calls ([`time_back_to_back`]).

#![warn(missing_docs)]

#[cfg(feature = "mpi")]
mod mpi_raw;
#[cfg(feature = "mpi")]
mod mpi_shared;
mod pattern;
mod roofline;
mod sample;
mod timing;

#[cfg(feature = "mpi")]
pub use mpi_raw::{measure_mpi_raw, mpi_in_place};
#[cfg(feature = "mpi")]
pub use mpi_shared::{measure_shared, shared_arena_bytes};
pub use pattern::{PERIOD, count_wrong, expected, fill};
pub use roofline::{StreamKernel, Traffic, stream};
#[doc(hidden)]
pub use ruda_comm::mix;
pub use sample::Sample;
pub use timing::{Iterations, Samples, median_seconds, time_back_to_back, time_calls};

use ruda_comm::{CommError, Communicator, DType, ReduceOp};
/// A collective that can be benchmarked.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BenchOp {
    /// `all_reduce` with `Sum`.
    AllReduce,
    /// `all_gather`.
    AllGather,
    /// `reduce_scatter` with `Sum`.
    ReduceScatter,
    /// `all_to_all`.
    AllToAll,
    /// `all_to_all_v` with every block the same size (the variable
    /// exchange's own cost beside [`BenchOp::AllToAll`]: expert and
    /// sequence parallelism call it with uneven blocks).
    AllToAllV,
    /// `broadcast` from rank 0.
    Broadcast,
}

impl BenchOp {
    /// Every operation, in table order.
    pub const ALL: [BenchOp; 6] = [
        BenchOp::AllReduce,
        BenchOp::AllGather,
        BenchOp::ReduceScatter,
        BenchOp::AllToAll,
        BenchOp::AllToAllV,
        BenchOp::Broadcast,
    ];

    /// The kebab-case name used on the command line (`"all-reduce"`).
    pub const fn name(self) -> &'static str {
        match self {
            BenchOp::AllReduce => "all-reduce",
            BenchOp::AllGather => "all-gather",
            BenchOp::ReduceScatter => "reduce-scatter",
            BenchOp::AllToAll => "all-to-all",
            BenchOp::AllToAllV => "all-to-all-v",
            BenchOp::Broadcast => "broadcast",
        }
    }

    /// The factor from algbw to busbw for `n` ranks.
    ///
    /// # Example
    /// ```
    /// use ruda_bench::BenchOp;
    /// assert_eq!(BenchOp::AllReduce.bus_factor(4), 1.5);
    /// assert_eq!(BenchOp::AllGather.bus_factor(4), 0.75);
    /// assert_eq!(BenchOp::Broadcast.bus_factor(4), 1.0);
    /// ```
    pub fn bus_factor(self, n: usize) -> f64 {
        let n = n as f64;
        match self {
            BenchOp::AllReduce => 2.0 * (n - 1.0) / n,
            BenchOp::AllGather
            | BenchOp::ReduceScatter
            | BenchOp::AllToAll
            | BenchOp::AllToAllV => (n - 1.0) / n,
            BenchOp::Broadcast => 1.0,
        }
    }
}

/// One row of a bandwidth table.
#[derive(Clone, Debug, PartialEq)]
pub struct Measurement {
    /// The operation.
    pub op: BenchOp,
    /// The element type.
    pub dtype: DType,
    /// Ranks taking part.
    pub ranks: usize,
    /// `S` in bytes (see the module docs).
    pub bytes: usize,
    /// `S` in elements.
    pub count: usize,
    /// Median over iterations of the slowest rank's time, in microseconds
    /// (p50).
    pub time_us: f64,
    /// 99th percentile of the same times, in microseconds.
    pub p99_us: f64,
    /// Timed iterations behind `time_us` and `p99_us`.
    pub iters: usize,
    /// The slowest rank's time of back-to-back calls divided by their
    /// number, in microseconds; NaN when not measured.
    pub wall_us: f64,
    /// `S / t` in GB/s (10⁹ bytes per second).
    pub algbw: f64,
    /// `algbw × bus_factor`.
    pub busbw: f64,
    /// Aggregate STREAM rate of all ranks on the operation's buffer size
    /// ([`stream`] with [`BenchOp::stream_kernel`]), GB/s; NaN when not
    /// measured.
    pub stream_gbps: f64,
    /// The least time the operation's bytes ([`BenchOp::traffic`]) take at
    /// `stream_gbps`, in microseconds; NaN when not measured.
    pub roofline_us: f64,
    /// Elements that differed from the expected result in the check run.
    pub wrong: usize,
}

impl Measurement {
    /// `roofline_us / time_us` in percent: 100 is as fast as the memory
    /// system moves the bytes the operation must move.
    pub fn roofline_pct(&self) -> f64 {
        100.0 * self.roofline_us / self.time_us
    }

    /// A row from times in seconds (median, p99, back-to-back) and the
    /// STREAM rate: the bandwidths and roofline follow from them.
    ///
    /// # Example
    /// ```
    /// use ruda_bench::{BenchOp, Measurement};
    /// use ruda_comm::DType;
    /// // 64 MiB all-reduce on 2 ranks in 6 ms, memory moving 44 GB/s.
    /// let m = Measurement::from_times(BenchOp::AllReduce, DType::F32, 2, 16 << 20,
    ///     [6e-3, 7e-3, 6.5e-3], 10, 44.0, 0);
    /// assert!((m.algbw - 11.18).abs() < 0.01);
    /// assert!((m.roofline_us - 6100.0).abs() < 1.0);
    /// ```
    #[allow(clippy::too_many_arguments)]
    pub fn from_times(
        op: BenchOp,
        dtype: DType,
        ranks: usize,
        count: usize,
        [median, p99, wall]: [f64; 3],
        iters: usize,
        stream_gbps: f64,
        wrong: usize,
    ) -> Self {
        let bytes = count.saturating_mul(dtype.size_in_bytes());
        let algbw = bytes as f64 / median / 1e9;
        Measurement {
            op,
            dtype,
            ranks,
            bytes,
            count,
            time_us: median * 1e6,
            p99_us: p99 * 1e6,
            iters,
            wall_us: wall * 1e6,
            algbw,
            busbw: algbw * op.bus_factor(ranks),
            stream_gbps,
            roofline_us: op.traffic(ranks, bytes).total() / (stream_gbps * 1e9) * 1e6,
            wrong,
        }
    }
}

/// How to measure one row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Settings {
    /// Warm-up and timed calls.
    pub it: Iterations,
    /// Measure the STREAM roofline on the same ranks first.
    pub roofline: bool,
    /// Also time `it.iters` calls back to back.
    pub wall: bool,
}

impl Settings {
    /// [`Iterations::auto`] for `bytes`, with the roofline and the
    /// back-to-back time.
    ///
    /// # Example
    /// ```
    /// use ruda_bench::Settings;
    /// let s = Settings::auto(64 << 20);
    /// assert!(s.roofline && s.wall && s.it.iters == 10);
    /// assert!(!Settings::quick(1, 3).roofline);
    /// ```
    pub fn auto(bytes: usize) -> Self {
        Settings {
            it: Iterations::auto(bytes),
            roofline: true,
            wall: true,
        }
    }

    /// `warmup` and `iters` calls, nothing else: for quick checks.
    pub fn quick(warmup: usize, iters: usize) -> Self {
        Settings {
            it: Iterations { warmup, iters },
            roofline: false,
            wall: false,
        }
    }
}

/// Elements of `S` for `bytes`, rounded down to a multiple of `ranks` (at
/// least `ranks`).
pub fn elements_for<T: Sample>(bytes: usize, ranks: usize) -> usize {
    let per = (bytes / size_of::<T>()).max(ranks);
    per - per % ranks
}

/// The send and receive lengths of `op` for `S = count` elements on `n`
/// ranks (the receive length is 0 for the in-place all-reduce and
/// broadcast).
///
/// # Example
/// ```
/// use ruda_bench::{BenchOp, buffer_lens};
/// assert_eq!(buffer_lens(BenchOp::AllGather, 4, 16), (4, 16));
/// assert_eq!(buffer_lens(BenchOp::AllReduce, 4, 16), (16, 0));
/// ```
pub fn buffer_lens(op: BenchOp, n: usize, count: usize) -> (usize, usize) {
    let block = count / n.max(1);
    match op {
        BenchOp::AllReduce | BenchOp::Broadcast => (count, 0),
        BenchOp::AllGather => (block, count),
        BenchOp::ReduceScatter => (count, block),
        BenchOp::AllToAll | BenchOp::AllToAllV => (count, count),
    }
}

/// Measure `op` with ruda's own collective on `comm` (call from every rank
/// with the same arguments): the roofline first if asked, then the timed
/// calls ([`time_calls`]), the back-to-back calls if asked, and one checked
/// call on freshly filled inputs. All-reduce and broadcast run in place.
/// Every rank returns the same row.
///
/// # Errors
/// Any [`CommError`] of the collectives.
///
/// # Example
/// ```
/// use ruda_bench::{self as bench, BenchOp, Settings};
/// use ruda_comm::LocalWorld;
/// let rows = LocalWorld::new(2)
///     .run(|c| bench::measure::<_, f32>(&c, BenchOp::AllReduce, 4096, Settings::quick(1, 3)))
///     .unwrap();
/// assert_eq!(rows[0].wrong, 0);
/// assert_eq!(rows[0].bytes, 4096);
/// ```
pub fn measure<C: Communicator, T: Sample>(
    comm: &C,
    op: BenchOp,
    bytes: usize,
    settings: Settings,
) -> Result<Measurement, CommError> {
    measure_with::<C, T, CommError>(comm, op, bytes, settings, |send, recv| {
        call(comm, op, send, recv)
    })
}

thread_local! {
    /// The equal counts of [`BenchOp::AllToAllV`]'s calls on this thread.
    static EQUAL_COUNTS: std::cell::RefCell<Vec<usize>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// One call of `op` as [`measure`] times it, on buffers laid out as
/// [`buffer_lens`] says: all-reduce (a sum) and broadcast (from rank 0) in
/// place on `send`.
///
/// # Errors
/// The call's.
///
/// # Example
/// ```
/// use ruda_bench::{self as bench, BenchOp};
/// use ruda_comm::{Communicator, LocalWorld};
/// let out = LocalWorld::new(2).run(|c| {
///     let (mut send, mut recv) = (vec![1f32; 4], vec![0f32; 8]);
///     bench::call(&c, BenchOp::AllGather, &mut send, &mut recv).map(|()| recv)
/// }).unwrap();
/// assert_eq!(out[0], vec![1.0; 8]);
/// ```
pub fn call<C: Communicator, T: Sample>(
    comm: &C,
    op: BenchOp,
    send: &mut [T],
    recv: &mut [T],
) -> Result<(), CommError> {
    match op {
        BenchOp::AllReduce => comm.all_reduce(send, ReduceOp::Sum),
        BenchOp::Broadcast => comm.broadcast(send, 0),
        BenchOp::AllGather => comm.all_gather(send, recv),
        BenchOp::ReduceScatter => comm.reduce_scatter(send, recv, ReduceOp::Sum),
        BenchOp::AllToAll => comm.all_to_all(send, recv),
        BenchOp::AllToAllV => EQUAL_COUNTS.with_borrow_mut(|counts| {
            // Kept between calls: the timed call allocates nothing, as the
            // raw baseline's.
            let n = comm.size();
            counts.clear();
            counts.resize(n, send.len() / n.max(1));
            let counts: &[usize] = counts;
            comm.all_to_all_v(send, counts, recv, counts)
        }),
    }
}

/// [`measure`] with any implementation of the call: `run(send, recv)` does
/// `op` once on buffers laid out as [`buffer_lens`] says (all-reduce and
/// broadcast in place on `send`). The harness, the inputs and the check are
/// [`measure`]'s.
///
/// # Errors
/// The first error of `run` or of the harness.
///
/// # Example
/// ```
/// use ruda_bench::{self as bench, BenchOp, Settings};
/// use ruda_comm::{Communicator, LocalWorld, CommError};
/// let rows = LocalWorld::new(2).run(|c| {
///     bench::measure_with::<_, u8, CommError>(&c, BenchOp::AllGather, 64, Settings::quick(0, 2),
///         |send, recv| c.all_gather(send, recv))
/// }).unwrap();
/// assert_eq!(rows[0].wrong, 0);
/// ```
pub fn measure_with<C, T, E>(
    comm: &C,
    op: BenchOp,
    bytes: usize,
    settings: Settings,
    run: impl FnMut(&mut [T], &mut [T]) -> Result<(), E>,
) -> Result<Measurement, E>
where
    C: Communicator,
    T: Sample,
    E: From<CommError>,
{
    let count = elements_for::<T>(bytes, comm.size());
    let (send_len, recv_len) = buffer_lens(op, comm.size(), count);
    let (mut send_room, send_at) = line_aligned::<T>(send_len);
    let (mut recv_room, recv_at) = line_aligned::<T>(recv_len);
    let send = &mut send_room[send_at..send_at + send_len];
    let recv = &mut recv_room[recv_at..recv_at + recv_len];
    measure_in(comm, op, bytes, settings, send, recv, run)
}

/// [`measure_with`] on buffers the caller provides (memory of its own
/// kind, such as an MPI communicator's shared buffers): `send` and `recv`
/// of the lengths [`buffer_lens`] gives for [`elements_for`]`(bytes)`
/// elements; their contents are overwritten.
///
/// # Errors
/// As [`measure_with`].
///
/// # Panics
/// When a buffer's length is not the one [`buffer_lens`] gives.
///
/// # Example
/// ```
/// use ruda_bench::{self as bench, BenchOp, Settings};
/// use ruda_comm::{Communicator, LocalWorld, CommError, ReduceOp};
/// let rows = LocalWorld::new(2).run(|c| {
///     let count = bench::elements_for::<f32>(64, 2);
///     let (s, r) = bench::buffer_lens(BenchOp::AllReduce, 2, count);
///     let (mut send, mut recv) = (vec![0f32; s], vec![0f32; r]);
///     bench::measure_in::<_, f32, CommError>(&c, BenchOp::AllReduce, 64, Settings::quick(0, 2),
///         &mut send, &mut recv, |send, _| c.all_reduce(send, ReduceOp::Sum))
/// }).unwrap();
/// assert_eq!(rows[0].wrong, 0);
/// ```
pub fn measure_in<C, T, E>(
    comm: &C,
    op: BenchOp,
    bytes: usize,
    settings: Settings,
    send: &mut [T],
    recv: &mut [T],
    mut run: impl FnMut(&mut [T], &mut [T]) -> Result<(), E>,
) -> Result<Measurement, E>
where
    C: Communicator,
    T: Sample,
    E: From<CommError>,
{
    let (n, me) = (comm.size(), comm.rank());
    let count = elements_for::<T>(bytes, n);
    let (send_len, recv_len) = buffer_lens(op, n, count);
    assert_eq!(
        (send.len(), recv.len()),
        (send_len, recv_len),
        "{op:?} of {bytes} bytes on {n} ranks: buffer lengths"
    );
    let s_bytes = count * size_of::<T>();
    let it = settings.it;
    let stream_gbps = if settings.roofline {
        stream(comm, op.stream_kernel(n), op.footprint(n, s_bytes), it)?
    } else {
        f64::NAN
    };
    fill(op, me, n, count, send);
    let samples = time_calls(
        comm,
        it.warmup,
        it.iters.max(1),
        || (),
        |()| run(send, recv),
    )?;
    let wall = if settings.wall {
        time_back_to_back(comm, it.iters.max(1), || run(send, recv))?
    } else {
        f64::NAN
    };
    // Checked run on fresh inputs.
    fill(op, me, n, count, send);
    recv.fill(T::zeroed());
    run(send, recv)?;
    let out: &[T] = if recv_len == 0 { send } else { recv };
    let mut wrong = [count_wrong(op, me, n, count, out) as f64];
    comm.all_reduce(&mut wrong, ReduceOp::Sum)?;
    Ok(Measurement::from_times(
        op,
        T::DTYPE,
        n,
        count,
        [samples.median(), samples.quantile(0.99), wall],
        samples.times().len(),
        stream_gbps,
        wrong[0] as usize,
    ))
}

/// Room for `len` zeroed elements that start on a 64-byte line: the vector
/// and the index of the first. [`measure_with`] puts every buffer on a
/// line, as nccl-tests' device buffers are, so that a call's speed does not
/// depend on where the allocator happened to put them: glibc 2.36's
/// `memcpy` on an AMD EPYC (Zen) runs 15–20× slower when the destination
/// sits 4 to 16 bytes past the source within a line, and a raw Open MPI
/// all-gather of 1 MiB, which copies with it, took 73 µs in one run and
/// 239 µs in another.
pub(crate) fn line_aligned<T: Sample>(len: usize) -> (Vec<T>, usize) {
    let spare = (64 / size_of::<T>().max(1)).max(1);
    let room = vec![T::zeroed(); len.saturating_add(spare)];
    let at = room.as_ptr().align_offset(64);
    (room, if at < spare { at } else { 0 })
}

/// The single-thread memcpy reference of `bytes`: median time of `iters`
/// copies, as `(time_us, GB/s)`. One thread with the machine to itself: a
/// reference for the copy kernel, never a limit for a collective's busbw
/// (see [`stream`] for that).
///
/// # Example
/// ```
/// let (us, gbps) = ruda_bench::memcpy(1 << 20, 5);
/// assert!(us > 0.0 && gbps > 0.0);
/// ```
pub fn memcpy(bytes: usize, iters: usize) -> (f64, f64) {
    let src = vec![1u8; bytes.max(1)];
    let mut dst = vec![0u8; bytes.max(1)];
    dst.copy_from_slice(&src);
    let times: Vec<f64> = (0..iters.max(1))
        .map(|_| {
            let t = std::time::Instant::now();
            dst.copy_from_slice(std::hint::black_box(&src));
            std::hint::black_box(&mut dst);
            t.elapsed().as_secs_f64()
        })
        .collect();
    let t = Samples::new(times).median();
    (t * 1e6, bytes as f64 / t / 1e9)
}

/// The column header of [`format_row`], two lines in the style of nccl-tests.
pub fn header() -> String {
    let top = [
        "size", "count", "type", "op", "p50", "p99", "b2b", "algbw", "busbw", "roofline", "%roof",
        "#wrong",
    ];
    let unit = [
        "(B)",
        "(elements)",
        "",
        "",
        "(us)",
        "(us)",
        "(us)",
        "(GB/s)",
        "(GB/s)",
        "(us)",
        "",
        "",
    ];
    let line = |c: [&str; 12]| {
        format!(
            "#{:>14} {:>10} {:>5} {:>14} {:>10} {:>10} {:>10} {:>8} {:>8} {:>10} {:>6} {:>6}",
            c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7], c[8], c[9], c[10], c[11]
        )
    };
    format!("{}\n{}", line(top), line(unit))
}

/// One table row, aligned with [`header`]; figures not measured print `-`.
///
/// # Example
/// ```
/// use ruda_bench::{BenchOp, Measurement, format_row};
/// use ruda_comm::DType;
/// let m = Measurement::from_times(BenchOp::AllGather, DType::F32, 2, 1024,
///     [2e-6, 3e-6, f64::NAN], 100, 40.0, 0);
/// let row = format_row(&m);
/// assert!(row.contains("all-gather") && row.contains(" - "));
/// ```
pub fn format_row(m: &Measurement) -> String {
    let f = |x: f64, p: usize| {
        if x.is_finite() {
            format!("{x:.p$}")
        } else {
            "-".to_string()
        }
    };
    format!(
        "{:>15} {:>10} {:>5} {:>14} {:>10} {:>10} {:>10} {:>8} {:>8} {:>10} {:>6} {:>6}",
        m.bytes,
        m.count,
        m.dtype.name(),
        m.op.name(),
        f(m.time_us, 2),
        f(m.p99_us, 2),
        f(m.wall_us, 2),
        f(m.algbw, 3),
        f(m.busbw, 3),
        f(m.roofline_us, 2),
        f(m.roofline_pct(), 0),
        m.wrong
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use ruda_comm::LocalWorld;

    /// Every buffer the harness measures on starts on a line, whatever the
    /// element size, with room for every element.
    #[test]
    fn measured_buffers_start_on_a_line() {
        fn check<T: Sample>() {
            for len in [0, 1, 17, 4096] {
                let (room, at) = line_aligned::<T>(len);
                assert!(room.len() >= at + len);
                assert!(
                    (room[at..].as_ptr() as usize).is_multiple_of(64),
                    "len {len}"
                );
                assert!(room.iter().all(|x| *x == T::zeroed()));
            }
        }
        check::<f32>();
        check::<f64>();
        check::<half::f16>();
        check::<u8>();
    }

    #[test]
    fn bus_factors_follow_nccl_tests() {
        assert_eq!(BenchOp::AllReduce.bus_factor(2), 1.0);
        assert_eq!(BenchOp::AllReduce.bus_factor(8), 1.75);
        assert_eq!(BenchOp::ReduceScatter.bus_factor(2), 0.5);
        assert_eq!(BenchOp::AllToAll.bus_factor(8), 0.875);
        assert_eq!(BenchOp::Broadcast.bus_factor(8), 1.0);
        assert_eq!(BenchOp::AllGather.bus_factor(1), 0.0);
    }

    /// Known times give known figures: a wrong formula fails.
    #[test]
    fn figures_from_known_times() {
        // 4 ranks, S = 1 MiB of f32, 100 µs median, 50 GB/s of STREAM add.
        let m = Measurement::from_times(
            BenchOp::AllReduce,
            DType::F32,
            4,
            1 << 18,
            [100e-6, 250e-6, 120e-6],
            10,
            50.0,
            0,
        );
        assert_eq!(m.bytes, 1 << 20);
        assert!((m.algbw - 10.485_76).abs() < 1e-9);
        assert!((m.busbw - 10.485_76 * 1.5).abs() < 1e-9);
        assert!((m.time_us - 100.0).abs() < 1e-9 && (m.p99_us - 250.0).abs() < 1e-9);
        assert!((m.wall_us - 120.0).abs() < 1e-9);
        // 8 MiB moved at 50 GB/s: 167.77 µs.
        assert!((m.roofline_us - 8.0 * 1_048_576.0 / 50e3).abs() < 1e-6);
        assert!((m.roofline_pct() - 167.772_16).abs() < 1e-6);
        let g = Measurement::from_times(
            BenchOp::AllGather,
            DType::BF16,
            2,
            1 << 20,
            [1e-3, 1e-3, 1e-3],
            10,
            20.0,
            0,
        );
        assert_eq!(g.bytes, 2 << 20);
        assert!((g.algbw - 2.097_152).abs() < 1e-9 && (g.busbw - 1.048_576).abs() < 1e-9);
    }

    #[test]
    fn every_op_measures_and_checks_correctly() {
        for n in [1, 3] {
            for op in BenchOp::ALL {
                let settings = Settings {
                    it: Iterations {
                        warmup: 1,
                        iters: 2,
                    },
                    roofline: n == 3,
                    wall: true,
                };
                let rows = LocalWorld::new(n)
                    .run(|c| measure::<_, half::bf16>(&c, op, 1000, settings))
                    .unwrap();
                let m = &rows[0];
                assert_eq!(m.wrong, 0, "{op:?} n={n}");
                assert_eq!(m.count % n, 0);
                assert_eq!(m.iters, 2);
                assert!(m.wall_us > 0.0 && m.p99_us >= m.time_us);
                assert_eq!(m.roofline_us.is_finite(), n == 3 && m.stream_gbps > 0.0);
                assert!((m.busbw - m.algbw * op.bus_factor(n)).abs() < 1e-12);
                assert!(
                    (m.algbw - m.bytes as f64 / (m.time_us * 1e-6) / 1e9).abs() < 1e-6 * m.algbw
                );
                assert!(
                    rows.iter().all(|r| format!("{r:?}") == format!("{m:?}")),
                    "same row on every rank"
                );
            }
        }
    }

    /// From 23 ranks up the old expected sum `n(n+1)/2 as u8` wrapped.
    #[test]
    fn large_worlds_check_correct_data_as_correct() {
        for op in [BenchOp::AllReduce, BenchOp::AllToAll] {
            let rows = LocalWorld::new(24)
                .run(|c| measure::<_, u8>(&c, op, 24 * 24, Settings::quick(0, 1)))
                .unwrap();
            assert_eq!(rows[0].wrong, 0, "{op:?}");
        }
    }

    /// From 256 KiB on every rank copies a share of every destination.
    #[test]
    fn large_broadcasts_from_any_root_are_correct() {
        for n in [2, 3] {
            let rows = LocalWorld::new(n)
                .run(|c| measure::<_, f32>(&c, BenchOp::Broadcast, 1 << 20, Settings::quick(0, 1)))
                .unwrap();
            assert_eq!(rows[0].wrong, 0);
        }
        let out = LocalWorld::new(3)
            .run(|c| {
                let mut v = vec![c.rank() as u32; 100_000];
                c.broadcast(&mut v, 2).map(|_| v)
            })
            .unwrap();
        assert!(out.iter().all(|v| v.iter().all(|&x| x == 2)));
    }

    #[test]
    fn a_wrong_collective_is_counted() {
        // An "all-gather" that copies only this rank's block everywhere.
        let rows = LocalWorld::new(2)
            .run(|c| {
                measure_with::<_, f32, CommError>(
                    &c,
                    BenchOp::AllGather,
                    4096,
                    Settings::quick(0, 1),
                    |s, r| {
                        for chunk in r.chunks_mut(s.len()) {
                            chunk.copy_from_slice(s);
                        }
                        Ok(())
                    },
                )
            })
            .unwrap();
        assert_eq!(rows[0].wrong, 2 * 512);
    }

    #[test]
    fn elements_round_to_the_group() {
        assert_eq!(elements_for::<f32>(4096, 3), 1023);
        assert_eq!(elements_for::<f32>(2, 4), 4);
        assert_eq!(buffer_lens(BenchOp::ReduceScatter, 4, 16), (16, 4));
    }
}
