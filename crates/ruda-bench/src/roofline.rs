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
    /// `b_j[i] = a[i]` for `j` in `0..k` (`k` = the field; cached stores or
    /// [`ruda_comm::copy_streaming_to_each`], whichever is faster): 1 read
    /// and `k` writes per element, the access mix of an all-gather over `k`
    /// ranks (each rank reads its share of the blocks once and writes it
    /// into every output) and of a broadcast to `k` ranks. Memory writes
    /// more slowly than it reads: on the development machine two threads
    /// wrote 23 GB/s with streaming stores and nothing else, so the fan of
    /// `k = 2` moved 29–31 GB/s where a copy moved 42–46, and an all-gather
    /// held to the copy's rate could not pass 75 % of its roofline. A fan
    /// of 0 runs and counts as a fan of 1 (a copy's mix, with the fan's
    /// copies).
    Fan(usize),
}

impl StreamKernel {
    /// `"copy"`, `"add"`, `"sum"` or `"fan"`.
    pub const fn name(self) -> &'static str {
        match self {
            StreamKernel::Copy => "copy",
            StreamKernel::Add => "add",
            StreamKernel::Sum => "sum",
            StreamKernel::Fan(_) => "fan",
        }
    }

    /// Bytes counted per byte of the source array: 2 for copy, 3 for add,
    /// 4 for sum, `1 + k` for a fan of `k` (at least 1).
    pub const fn counted_per_byte(self) -> f64 {
        match self {
            StreamKernel::Copy => 2.0,
            StreamKernel::Add => 3.0,
            StreamKernel::Sum => 4.0,
            StreamKernel::Fan(k) => 1.0 + fan_width(k) as f64,
        }
    }

    /// Elements of the source array when the arrays fill `footprint` bytes
    /// of `f32`: two arrays of equal length, or a fan's source and its `k`
    /// destinations; at least 16.
    fn source_len(self, footprint: usize) -> usize {
        let arrays = match self {
            StreamKernel::Fan(k) => fan_width(k).saturating_add(1),
            _ => 2,
        };
        (footprint / arrays / size_of::<f32>()).max(16)
    }
}

/// A fan of `k` destinations, or a copy for fewer than two.
const fn fan_of(k: usize) -> StreamKernel {
    if k >= 2 {
        StreamKernel::Fan(k)
    } else {
        StreamKernel::Copy
    }
}

/// A fan's number of destinations, at least 1.
const fn fan_width(k: usize) -> usize {
    if k == 0 { 1 } else { k }
}

/// Elements a cached fan copies to every destination before the next
/// piece (256 bytes, as the transport's tiles): the piece stays in the
/// first-level cache while it is written `k` times, so that the source is
/// read from memory once. Pieces of 16 KiB ran 20× slower on the
/// development machine (an AMD EPYC), where glibc copies them with
/// `rep movsb`.
const FAN_PIECE: usize = 64;

/// Elements between a fan of `k`'s destinations beyond their length, and
/// before the first: its `k + 1` arrays spread over a page in steps of
/// `4096 / (k + 1)` bytes (whole lines, at least one), since loads from one
/// array and stores to another at the same offset within a page are falsely
/// taken for dependent (arrays at one offset read 119–130 % of the roofline
/// at 2–4 MiB on the development machine).
fn fan_skew(k: usize) -> usize {
    let step = 4096 / fan_width(k).saturating_add(1) / 64 * 64;
    step.max(64) / size_of::<f32>()
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
            BenchOp::AllReduce | BenchOp::AllToAll | BenchOp::AllToAllV => (n * s, n * s),
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
            BenchOp::AllToAll | BenchOp::AllToAllV => s.saturating_mul(2),
        }
    }

    /// The STREAM kernel with this operation's access mix over `n` ranks:
    /// sum for the in-place all-reduce (reads and writes every buffer), add
    /// for reduce-scatter (reads n bytes per byte written), a fan of `n`
    /// for all-gather and of `n − 1` for broadcast (one read, that many
    /// writes), copy for all-to-all and for a fan of one.
    ///
    /// # Example
    /// ```
    /// use ruda_bench::{BenchOp, StreamKernel};
    /// assert_eq!(BenchOp::AllGather.stream_kernel(4), StreamKernel::Fan(4));
    /// assert_eq!(BenchOp::Broadcast.stream_kernel(2), StreamKernel::Copy);
    /// ```
    pub const fn stream_kernel(self, n: usize) -> StreamKernel {
        match self {
            BenchOp::AllReduce => StreamKernel::Sum,
            BenchOp::ReduceScatter => StreamKernel::Add,
            BenchOp::AllGather => fan_of(n),
            BenchOp::Broadcast => fan_of(n.saturating_sub(1)),
            BenchOp::AllToAll | BenchOp::AllToAllV => StreamKernel::Copy,
        }
    }
}

/// The aggregate rate, in GB/s (10⁹ bytes per second), at which all ranks of
/// `comm` together run `kernel` on arrays that fill `footprint` bytes per
/// rank, each starting on a cache line (two of equal length, or a fan's
/// source and `k` destinations; copy: the faster of `memcpy` and
/// [`ruda_comm::copy_streaming`]; fan: of cached 256-byte pieces and
/// [`ruda_comm::copy_streaming_to_each`]):
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
/// # Panics
/// If the arrays cannot be allocated (a footprint or a fan's width beyond
/// memory).
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
    if !matches!(kernel, StreamKernel::Copy | StreamKernel::Fan(_)) {
        return Ok(rate);
    }
    // The faster of two copies counts: cached stores, and the transport's
    // own copy (streamed from `copy_streaming_from_bytes`, which ran up to
    // 1.5× faster than glibc's `memcpy` at 64 MiB on the development
    // machine; below it, `memcpy` in 1 KiB pieces).
    // Each runs on its own: a streaming store evicts the line it writes, so
    // alternating them slowed `memcpy` on buffers that fit in cache.
    Ok(rate.max(stream_with(comm, kernel, footprint, it, true)?))
}

/// [`stream`] with one copy: `streaming` picks
/// [`ruda_comm::copy_streaming`] over `memcpy`, and
/// [`ruda_comm::copy_streaming_to_each`] over cached copies for a fan
/// (other kernels ignore it).
fn stream_with<C: Communicator>(
    comm: &C,
    kernel: StreamKernel,
    footprint: usize,
    it: Iterations,
    streaming: bool,
) -> Result<f64, CommError> {
    let len = kernel.source_len(footprint);
    // A fan's destinations start `skew` elements apart beyond their length
    // (`fan_skew`).
    let (skew, b_len) = match kernel {
        StreamKernel::Fan(k) => {
            let skew = fan_skew(k);
            (skew, fan_width(k).saturating_mul(len.saturating_add(skew)))
        }
        _ => (0, len),
    };
    let stride = len + skew;
    let (mut a_room, a_at) = crate::line_aligned::<f32>(len);
    let (mut b_room, b_at) = crate::line_aligned::<f32>(b_len);
    let a = &mut a_room[a_at..a_at + len];
    let b = &mut b_room[b_at..b_at + b_len];
    a.fill(1.0);
    b.fill(0.5);
    let samples = time_calls(
        comm,
        it.warmup,
        it.iters.max(1),
        || (),
        |()| {
            match kernel {
                StreamKernel::Copy if streaming => ruda_comm::copy_streaming(black_box(&*a), b),
                StreamKernel::Copy => b.copy_from_slice(black_box(&*a)),
                StreamKernel::Fan(_) if streaming => {
                    let mut outs: Vec<&mut [f32]> =
                        b.chunks_mut(stride).map(|o| &mut o[skew..]).collect();
                    ruda_comm::copy_streaming_to_each(black_box(&*a), &mut outs);
                }
                StreamKernel::Fan(_) => {
                    for (i, piece) in black_box(&*a).chunks(FAN_PIECE).enumerate() {
                        let at = skew + i * FAN_PIECE;
                        for out in b.chunks_mut(stride) {
                            out[at..at + piece.len()].copy_from_slice(piece);
                        }
                    }
                }
                StreamKernel::Add => {
                    for (x, y) in a.iter_mut().zip(black_box(&*b)) {
                        *x += *y;
                    }
                }
                StreamKernel::Sum => {
                    for (x, y) in a.iter_mut().zip(black_box(&mut *b).iter_mut()) {
                        let s = *x + *y;
                        *x = s;
                        *y = s;
                    }
                }
            }
            black_box((&mut *a, &mut *b));
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
        assert_eq!(BenchOp::AllReduce.stream_kernel(4), StreamKernel::Sum);
        assert_eq!(BenchOp::ReduceScatter.stream_kernel(4), StreamKernel::Add);
        assert_eq!(BenchOp::AllToAll.stream_kernel(4), StreamKernel::Copy);
        assert_eq!(BenchOp::AllGather.stream_kernel(4), StreamKernel::Fan(4));
        assert_eq!(BenchOp::AllGather.stream_kernel(1), StreamKernel::Copy);
        assert_eq!(BenchOp::Broadcast.stream_kernel(4), StreamKernel::Fan(3));
        assert_eq!(BenchOp::Broadcast.stream_kernel(2), StreamKernel::Copy);
        assert_eq!(BenchOp::Broadcast.stream_kernel(1), StreamKernel::Copy);
    }

    /// A fan's arrays fill the footprint: its source is a `1 + k`-th of it,
    /// and it counts `1 + k` bytes per source byte, so the bytes counted
    /// per footprint byte are those of a copy (one per byte, every byte of
    /// every array read or written once).
    #[test]
    fn fan_arrays_fill_the_footprint() {
        let fp = 3 << 20;
        let fan = StreamKernel::Fan(2);
        assert_eq!(fan.source_len(fp), (1 << 20) / 4);
        assert_eq!(StreamKernel::Copy.source_len(fp), (3 << 19) / 4);
        assert_eq!(fan.counted_per_byte(), 3.0);
        let counted = |k: StreamKernel| k.counted_per_byte() * (k.source_len(fp) * 4) as f64;
        assert_eq!(counted(fan), counted(StreamKernel::Copy));
        assert_eq!(StreamKernel::Fan(0).counted_per_byte(), 2.0);
    }

    /// A fan's destinations sit at distinct offsets within a page, none at
    /// the source's, for widths 1 to 16, when the array lengths are whole
    /// pages (the buffer sizes the bench uses).
    #[test]
    fn fan_destinations_spread_over_a_page() {
        for k in 1..=16 {
            let step = fan_skew(k) * size_of::<f32>();
            assert!(step >= 64 && step.is_multiple_of(64), "k {k}");
            let mut at: Vec<usize> = (1..=k).map(|j| step * j % 4096).collect();
            assert!(at.iter().all(|&o| o != 0), "k {k}: {at:?}");
            at.sort_unstable();
            at.dedup();
            assert_eq!(at.len(), k, "k {k}");
        }
    }

    /// Both fans (cached and streamed) run on two ranks and give a rate.
    #[test]
    fn a_fan_measures_at_both_sizes() {
        use ruda_comm::LocalWorld;
        let it = Iterations {
            warmup: 1,
            iters: 2,
        };
        for fp in [3 << 10, 3 * ruda_comm::copy_streaming_from_bytes()] {
            let r = LocalWorld::new(2)
                .run(|c| stream(&c, StreamKernel::Fan(2), fp, it))
                .unwrap();
            assert!(
                r[0] > 0.0 && r[0].is_finite() && r[0] == r[1],
                "{r:?} at {fp}"
            );
        }
    }
}
