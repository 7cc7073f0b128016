//! Bandwidth measurement in the conventions of nccl-tests, shared by the
//! crate's benchmark and `ruda bench`.
//!
//! `algbw = S / t`, where `S` is one rank's buffer for all-reduce and
//! broadcast and the total gathered size for all-gather, reduce-scatter and
//! all-to-all; `busbw = algbw × 2(n−1)/n` for all-reduce, `× (n−1)/n` for
//! all-gather, reduce-scatter and all-to-all, and `× 1` for broadcast. `t` is
//! the slowest rank's time, the median over the timed iterations.

use std::time::Instant;

use crate::conformance::Sample;
use crate::{CommError, Communicator, DType, ReduceOp};

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
    /// `broadcast` from rank 0.
    Broadcast,
}

impl BenchOp {
    /// Every operation, in table order.
    pub const ALL: [BenchOp; 5] = [
        BenchOp::AllReduce,
        BenchOp::AllGather,
        BenchOp::ReduceScatter,
        BenchOp::AllToAll,
        BenchOp::Broadcast,
    ];

    /// The kebab-case name used on the command line (`"all-reduce"`).
    pub const fn name(self) -> &'static str {
        match self {
            BenchOp::AllReduce => "all-reduce",
            BenchOp::AllGather => "all-gather",
            BenchOp::ReduceScatter => "reduce-scatter",
            BenchOp::AllToAll => "all-to-all",
            BenchOp::Broadcast => "broadcast",
        }
    }

    /// The factor from algbw to busbw for `n` ranks.
    ///
    /// # Example
    /// ```
    /// use ruda_comm::bench::BenchOp;
    /// assert_eq!(BenchOp::AllReduce.bus_factor(4), 1.5);
    /// assert_eq!(BenchOp::AllGather.bus_factor(4), 0.75);
    /// assert_eq!(BenchOp::Broadcast.bus_factor(4), 1.0);
    /// ```
    pub fn bus_factor(self, n: usize) -> f64 {
        let n = n as f64;
        match self {
            BenchOp::AllReduce => 2.0 * (n - 1.0) / n,
            BenchOp::AllGather | BenchOp::ReduceScatter | BenchOp::AllToAll => (n - 1.0) / n,
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
    /// Median over iterations of the slowest rank's time, in microseconds.
    pub time_us: f64,
    /// `S / t` in GB/s (10⁹ bytes per second).
    pub algbw: f64,
    /// `algbw × bus_factor`.
    pub busbw: f64,
    /// Elements that differed from the expected result in the check run.
    pub wrong: usize,
}

/// Elements of `S` for `bytes`, rounded down to a multiple of `ranks` (at
/// least `ranks`).
pub fn elements_for<T: Sample>(bytes: usize, ranks: usize) -> usize {
    let per = (bytes / size_of::<T>()).max(ranks);
    per - per % ranks
}

/// Median of a non-empty list.
fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    if v.len() % 2 == 1 {
        v[m]
    } else {
        0.5 * (v[m - 1] + v[m])
    }
}

/// Time `op` on `comm` (call from every rank with the same arguments):
/// `warmup` untimed runs, then `iters` timed ones, each started together
/// after a barrier; then one checked run. Every rank returns the same row.
///
/// # Errors
/// Any [`CommError`] of the collectives.
///
/// # Example
/// ```
/// use ruda_comm::{LocalWorld, bench::{self, BenchOp}};
/// let rows = LocalWorld::new(2).run(|c| bench::measure::<_, f32>(&c, BenchOp::AllReduce, 4096, 1, 3)).unwrap();
/// assert_eq!(rows[0].wrong, 0);
/// assert_eq!(rows[0].bytes, 4096);
/// ```
pub fn measure<C: Communicator, T: Sample>(
    comm: &C,
    op: BenchOp,
    bytes: usize,
    warmup: usize,
    iters: usize,
) -> Result<Measurement, CommError> {
    let n = comm.size();
    let count = elements_for::<T>(bytes, n);
    let block = count / n;
    let (send_len, recv_len) = match op {
        BenchOp::AllReduce | BenchOp::Broadcast => (count, 0),
        BenchOp::AllGather => (block, count),
        BenchOp::ReduceScatter => (count, block),
        BenchOp::AllToAll => (count, count),
    };
    let fill = T::from_small(comm.rank() as u8 + 1);
    let mut send = vec![fill; send_len];
    let mut recv = vec![T::zeroed(); recv_len];
    let run = |send: &mut Vec<T>, recv: &mut Vec<T>| match op {
        BenchOp::AllReduce => comm.all_reduce(send, ReduceOp::Sum),
        BenchOp::Broadcast => comm.broadcast(send, 0),
        BenchOp::AllGather => comm.all_gather(send, recv),
        BenchOp::ReduceScatter => comm.reduce_scatter(send, recv, ReduceOp::Sum),
        BenchOp::AllToAll => comm.all_to_all(send, recv),
    };
    for _ in 0..warmup {
        run(&mut send, &mut recv)?;
    }
    let mut times = Vec::with_capacity(iters.max(1));
    for _ in 0..iters.max(1) {
        comm.barrier()?;
        let t = Instant::now();
        run(&mut send, &mut recv)?;
        let mut slowest = [t.elapsed().as_secs_f64()];
        comm.all_reduce(&mut slowest, ReduceOp::Max)?;
        times.push(slowest[0]);
    }
    // Checked run on fresh inputs.
    send.fill(fill);
    run(&mut send, &mut recv)?;
    let wrong = match op {
        BenchOp::AllReduce => count_wrong(&send, |_| T::from_small((n * (n + 1) / 2) as u8)),
        BenchOp::Broadcast => count_wrong(&send, |_| T::from_small(1)),
        BenchOp::AllGather => count_wrong(&recv, |i| T::from_small((i / block) as u8 + 1)),
        BenchOp::ReduceScatter => count_wrong(&recv, |_| T::from_small((n * (n + 1) / 2) as u8)),
        BenchOp::AllToAll => count_wrong(&recv, |i| T::from_small((i / block) as u8 + 1)),
    };
    let mut wrong_all = [wrong as f64];
    comm.all_reduce(&mut wrong_all, ReduceOp::Sum)?;
    let t = median(times);
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
        wrong: wrong_all[0] as usize,
    })
}

fn count_wrong<T: Sample>(v: &[T], expected: impl Fn(usize) -> T) -> usize {
    v.iter()
        .enumerate()
        .filter(|(i, x)| bytemuck::bytes_of(*x) != bytemuck::bytes_of(&expected(*i)))
        .count()
}

/// The single-thread memcpy reference of `bytes`: median time of `iters`
/// copies, as `(time_us, GB/s)`.
///
/// # Example
/// ```
/// let (us, gbps) = ruda_comm::bench::memcpy(1 << 20, 5);
/// assert!(us > 0.0 && gbps > 0.0);
/// ```
pub fn memcpy(bytes: usize, iters: usize) -> (f64, f64) {
    let src = vec![1u8; bytes.max(1)];
    let mut dst = vec![0u8; bytes.max(1)];
    dst.copy_from_slice(&src);
    let times: Vec<f64> = (0..iters.max(1))
        .map(|_| {
            let t = Instant::now();
            dst.copy_from_slice(std::hint::black_box(&src));
            std::hint::black_box(&mut dst);
            t.elapsed().as_secs_f64()
        })
        .collect();
    let t = median(times);
    (t * 1e6, bytes as f64 / t / 1e9)
}

/// The column header of [`format_row`], two lines in the style of nccl-tests.
pub fn header() -> String {
    format!(
        "#{:>14} {:>12} {:>6} {:>15} {:>12} {:>9} {:>9} {:>7}\n#{:>14} {:>12} {:>6} {:>15} {:>12} {:>9} {:>9} {:>7}",
        "size",
        "count",
        "type",
        "op",
        "time",
        "algbw",
        "busbw",
        "#wrong",
        "(B)",
        "(elements)",
        "",
        "",
        "(us)",
        "(GB/s)",
        "(GB/s)",
        ""
    )
}

/// One table row, aligned with [`header`].
///
/// # Example
/// ```
/// use ruda_comm::{DType, bench::{BenchOp, Measurement, format_row}};
/// let m = Measurement { op: BenchOp::AllGather, dtype: DType::F32, ranks: 2, bytes: 4096,
///     count: 1024, time_us: 2.0, algbw: 2.048, busbw: 1.024, wrong: 0 };
/// assert!(format_row(&m).contains("all-gather"));
/// ```
pub fn format_row(m: &Measurement) -> String {
    format!(
        "{:>15} {:>12} {:>6} {:>15} {:>12.2} {:>9.3} {:>9.3} {:>7}",
        m.bytes,
        m.count,
        m.dtype.name(),
        m.op.name(),
        m.time_us,
        m.algbw,
        m.busbw,
        m.wrong
    )
}

/// A memcpy reference row, aligned with [`header`].
pub fn format_memcpy_row(bytes: usize, time_us: f64, gbps: f64) -> String {
    format!(
        "{:>15} {:>12} {:>6} {:>15} {:>12.2} {:>9.3} {:>9} {:>7}",
        bytes, "", "u8", "memcpy", time_us, gbps, "", ""
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::LocalWorld;

    #[test]
    fn bus_factors_follow_nccl_tests() {
        assert_eq!(BenchOp::AllReduce.bus_factor(2), 1.0);
        assert_eq!(BenchOp::AllReduce.bus_factor(8), 1.75);
        assert_eq!(BenchOp::ReduceScatter.bus_factor(2), 0.5);
        assert_eq!(BenchOp::AllToAll.bus_factor(8), 0.875);
        assert_eq!(BenchOp::Broadcast.bus_factor(8), 1.0);
        assert_eq!(BenchOp::AllGather.bus_factor(1), 0.0);
    }

    #[test]
    fn every_op_measures_and_checks_correctly() {
        for n in [1, 3] {
            for op in BenchOp::ALL {
                let rows = LocalWorld::new(n)
                    .run(|c| measure::<_, half::bf16>(&c, op, 1000, 1, 2))
                    .unwrap();
                let m = &rows[0];
                assert_eq!(m.wrong, 0, "{op:?} n={n}");
                assert_eq!(m.count % n, 0);
                assert!((m.busbw - m.algbw * op.bus_factor(n)).abs() < 1e-12);
                assert!(
                    (m.algbw - m.bytes as f64 / (m.time_us * 1e-6) / 1e9).abs() < 1e-6 * m.algbw
                );
                assert!(rows.iter().all(|r| r == m), "same row on every rank");
            }
        }
    }

    #[test]
    fn elements_round_to_the_group() {
        assert_eq!(elements_for::<f32>(4096, 3), 1023);
        assert_eq!(elements_for::<f32>(2, 4), 4);
        assert_eq!(median(vec![3.0, 1.0, 2.0, 10.0]), 2.5);
    }
}
