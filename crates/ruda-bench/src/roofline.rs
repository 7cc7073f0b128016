//! The physical limit of a collective on one machine: the bytes it must
//! move through memory, and the aggregate rate at which `n` threads (or
//! processes) move bytes, measured STREAM-style in the same run on buffers
//! of the same size as the operation's.
//!
//! Bytes are counted as STREAM counts them: every element read and every
//! element written once, not the extra line reads of write-allocate.

use std::hint::black_box;

use super::BenchOp;
use super::timing::{Iterations, time_calls};
use ruda_comm::{CommError, Communicator};

/// The STREAM kernel whose access pattern stands for an operation's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StreamKernel {
    /// `b[i] = a[i]` (`memcpy` or a non-temporal copy, whichever is
    /// faster): 1 read and 1 write per element.
    Copy,
    /// `a[i] += b[i]` in place: 2 reads and 1 write per element.
    Add,
    /// `a[i] = b[i] = a[i] + b[i]`: 2 reads and 2 writes per element, the
    /// access mix of an in-place all-reduce (every buffer read and written
    /// once). Memory moves this mix faster per byte than `Add`'s (measured
    /// 20–30 % here), so an all-reduce held to `Add` read above 100 %.
    Sum,
}

impl StreamKernel {
    /// `"copy"` or `"add"`.
    pub const fn name(self) -> &'static str {
        match self {
            StreamKernel::Copy => "copy",
            StreamKernel::Add => "add",
            StreamKernel::Sum => "sum",
        }
    }

    /// Bytes counted per byte of one array: 2 for copy, 3 for add, 4 for
    /// sum.
    pub const fn counted_per_byte(self) -> f64 {
        match self {
            StreamKernel::Copy => 2.0,
            StreamKernel::Add => 3.0,
            StreamKernel::Sum => 4.0,
        }
    }
}

/// Bytes an operation must read and write, summed over all ranks.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Traffic {
    /// Bytes read.
    pub read: f64,
    /// Bytes written.
    pub written: f64,
}

impl Traffic {
    /// `read + written`.
    pub fn total(&self) -> f64 {
        self.read + self.written
    }
}

impl BenchOp {
    /// The bytes this operation must move at least over shared memory with
    /// `n` ranks and `S = s` bytes (see [`super`] for `S`): every output
    /// byte is written once and every distinct input byte is read once.
    /// Inputs that several ranks read (an all-gather's blocks, a
    /// broadcast's root buffer) count once, since the later reads may come
    /// from a shared cache: the count is a hard lower bound for every op,
    /// so a row above 100 % of its roofline is a measurement error.
    ///
    /// | op | read | written |
    /// |---|---|---|
    /// | all-reduce (in place) | n·S | n·S (none for n = 1) |
    /// | reduce-scatter | n·S | S |
    /// | all-to-all | n·S | n·S |
    /// | all-gather | S | n·S |
    /// | broadcast (in place) | S | (n−1)·S (none for n = 1) |
    ///
    /// # Example
    /// ```
    /// use ruda_bench::BenchOp;
    /// let t = BenchOp::AllReduce.traffic(2, 64 << 20);
    /// assert_eq!(t.total(), 4.0 * (64 << 20) as f64);
    /// ```
    pub fn traffic(self, n: usize, s: usize) -> Traffic {
        let (n, s) = (n as f64, s as f64);
        let (read, written) = match self {
            BenchOp::AllReduce if n <= 1.0 => (0.0, 0.0),
            BenchOp::Broadcast if n <= 1.0 => (0.0, 0.0),
            BenchOp::AllReduce | BenchOp::AllToAll => (n * s, n * s),
            BenchOp::AllGather => (s, n * s),
            BenchOp::ReduceScatter => (n * s, s),
            BenchOp::Broadcast => (s, (n - 1.0) * s),
        };
        Traffic { read, written }
    }

    /// Bytes of one rank's buffers (send and receive) for `S = s`: the
    /// working set per thread that its roofline is measured on.
    ///
    /// # Example
    /// ```
    /// use ruda_bench::BenchOp;
    /// assert_eq!(BenchOp::AllGather.footprint(4, 4096), 4096 + 1024);
    /// ```
    pub fn footprint(self, n: usize, s: usize) -> usize {
        let block = s / n.max(1);
        match self {
            BenchOp::AllReduce | BenchOp::Broadcast => s,
            BenchOp::AllGather | BenchOp::ReduceScatter => s.saturating_add(block),
            BenchOp::AllToAll => s.saturating_mul(2),
        }
    }

    /// The STREAM kernel with this operation's access mix: sum for the
    /// in-place all-reduce (reads and writes every buffer), add for
    /// reduce-scatter (reads n bytes per byte written), copy for the rest.
    pub const fn stream_kernel(self) -> StreamKernel {
        match self {
            BenchOp::AllReduce => StreamKernel::Sum,
            BenchOp::ReduceScatter => StreamKernel::Add,
            _ => StreamKernel::Copy,
        }
    }
}

/// The aggregate rate, in GB/s (10⁹ bytes per second), at which all ranks of
/// `comm` together run `kernel` on two arrays that fill `footprint` bytes per
/// rank (copy: the faster of `memcpy` and [`ruda_comm::copy_streaming`]):
/// the bytes counted on every rank divided by the best of the slowest
/// rank's times ([`time_calls`], [`crate::Samples::best`]), as STREAM
/// reports its best rate: near the last-level cache's size the rate is
/// bimodal (two threads copying 8 MiB each moved 53 GB/s in one run and
/// 97 GB/s in the next on the development machine), and a median then
/// under-rates the machine, so that a collective reads above 100 %. Call from every rank; every rank gets the
/// same figure.
///
/// # Errors
/// The harness's [`CommError`].
///
/// # Example
/// ```
/// use ruda_comm::LocalWorld;
/// use ruda_bench::{Iterations, StreamKernel, stream};
/// let it = Iterations { warmup: 1, iters: 5 };
/// let r = LocalWorld::new(2).run(|c| stream(&c, StreamKernel::Add, 1 << 20, it)).unwrap();
/// assert!(r[0] > 0.0);
/// ```
pub fn stream<C: Communicator>(
    comm: &C,
    kernel: StreamKernel,
    footprint: usize,
    it: Iterations,
) -> Result<f64, CommError> {
    let rate = stream_with(comm, kernel, footprint, it, false)?;
    let array_bytes = (footprint / 2 / size_of::<f32>()).max(16) * size_of::<f32>();
    if kernel != StreamKernel::Copy || array_bytes < ruda_comm::COPY_STREAMING_FROM_BYTES {
        // Below its threshold the streaming copy is `memcpy` itself.
        return Ok(rate);
    }
    // The faster of two copies counts: `memcpy`, and the non-temporal copy
    // the local transport moves large blocks with, which ran up to 1.5×
    // faster than glibc's `memcpy` at 64 MiB on the development machine.
    // Each runs on its own: a streaming store evicts the line it writes, so
    // alternating them slowed `memcpy` on buffers that fit in cache.
    Ok(rate.max(stream_with(comm, kernel, footprint, it, true)?))
}

/// [`stream`] with one copy: `streaming` picks
/// [`ruda_comm::copy_streaming`] over `memcpy` (other kernels ignore it).
fn stream_with<C: Communicator>(
    comm: &C,
    kernel: StreamKernel,
    footprint: usize,
    it: Iterations,
    streaming: bool,
) -> Result<f64, CommError> {
    let len = (footprint / 2 / size_of::<f32>()).max(16);
    let mut a = vec![1.0f32; len];
    let mut b = vec![0.5f32; len];
    let samples = time_calls(
        comm,
        it.warmup,
        it.iters.max(1),
        || (),
        |()| {
            match kernel {
                StreamKernel::Copy if streaming => ruda_comm::copy_streaming(black_box(&a), &mut b),
                StreamKernel::Copy => b.copy_from_slice(black_box(&a)),
                StreamKernel::Add => {
                    for (x, y) in a.iter_mut().zip(black_box(&b)) {
                        *x += *y;
                    }
                }
                StreamKernel::Sum => {
                    for (x, y) in a.iter_mut().zip(black_box(&mut b).iter_mut()) {
                        let s = *x + *y;
                        *x = s;
                        *y = s;
                    }
                }
            }
            black_box((&mut a, &mut b));
            Ok::<_, CommError>(())
        },
    )?;
    let counted = kernel.counted_per_byte() * (len * size_of::<f32>()) as f64 * comm.size() as f64;
    Ok(counted / samples.best() / 1e9)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A wrong formula fails: the bytes of every op at n = 4, S = 1 MiB.
    #[test]
    fn traffic_pins_bytes_per_op() {
        let s = 1 << 20;
        let mib = |x: f64| x * s as f64;
        let t = |op: BenchOp| {
            let t = op.traffic(4, s);
            (t.read, t.written)
        };
        assert_eq!(t(BenchOp::AllReduce), (mib(4.0), mib(4.0)));
        assert_eq!(t(BenchOp::ReduceScatter), (mib(4.0), mib(1.0)));
        // Distinct bytes: the gathered blocks and the root's buffer once.
        assert_eq!(t(BenchOp::AllGather), (mib(1.0), mib(4.0)));
        assert_eq!(t(BenchOp::AllToAll), (mib(4.0), mib(4.0)));
        assert_eq!(t(BenchOp::Broadcast), (mib(1.0), mib(3.0)));
        assert_eq!(BenchOp::Broadcast.traffic(1, s).total(), 0.0);
        assert_eq!(BenchOp::AllReduce.traffic(1, s).total(), 0.0);
        assert_eq!(BenchOp::ReduceScatter.traffic(1, s).total(), mib(2.0));
        // The issue's example: an n = 2 all-reduce of 64 MiB moves 4·S.
        assert_eq!(
            BenchOp::AllReduce.traffic(2, 64 << 20).total(),
            4.0 * (64 << 20) as f64
        );
        assert_eq!(BenchOp::AllToAll.footprint(2, s), 2 * s);
        assert_eq!(BenchOp::ReduceScatter.footprint(4, s), s + s / 4);
        assert_eq!(BenchOp::AllReduce.stream_kernel(), StreamKernel::Sum);
        assert_eq!(BenchOp::ReduceScatter.stream_kernel(), StreamKernel::Add);
        assert_eq!(BenchOp::AllToAll.stream_kernel(), StreamKernel::Copy);
    }
}
