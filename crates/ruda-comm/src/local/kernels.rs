//! The data movement of the local transport: reductions over peers' buffers
//! and how work is partitioned between ranks.

use crate::{Accumulator, Element, ReduceOp};

/// The range of `0..len` that `rank` of `size` works on, aligned to cache
/// lines so that ranks never write the same line.
pub(crate) fn partition<T>(len: usize, rank: usize, size: usize) -> (usize, usize) {
    let grain = (64 / size_of::<T>().max(1)).max(1);
    let blocks = len.div_ceil(grain) as u128;
    // In u128: `blocks × rank` cannot overflow, and the quotient is at most
    // `blocks`, which fits `usize`.
    let cut = |r: usize| (blocks * r as u128 / size.max(1) as u128) as usize;
    let lo = cut(rank).saturating_mul(grain).min(len);
    let hi = cut(rank + 1).saturating_mul(grain).min(len);
    (lo, hi)
}

/// Reduce `len` elements starting at each of `inputs` (in rank order, so the
/// result is the same bits on every rank) and write the result to each of
/// `outputs`.
///
/// # Safety
/// Every input must be valid for `len` reads and every output for `len`
/// writes; no other thread may write these ranges during the call. An output
/// may be the same range as an input (in-place all-reduce): each chunk is
/// read completely before it is written.
pub(crate) unsafe fn reduce<T: Element>(
    inputs: &[*const T],
    outputs: &[*mut T],
    len: usize,
    op: ReduceOp,
) {
    // SAFETY: forwarded from the caller.
    unsafe { reduce_dispatch::<T, false>(inputs, outputs, len, op) }
}

/// Whether a call that writes `len` elements of `T` to fresh memory (not
/// read by the call) should write them with non-temporal stores
/// ([`reduce_to`], [`copy_to`]): from [`crate::copy_streaming_from_bytes`]
/// on, half the last-level cache (below it the result is likely read again
/// soon from cache, and cached stores are faster). A cached
/// store to a line not in cache first reads that line from memory
/// (write-allocate), so such a write moves two bytes of memory per byte
/// instead of one; a reduction of `n` inputs into a fresh buffer moved
/// `n + 2` bytes per output byte instead of `n + 1` (measured:
/// reduce-scatter at 64 MiB on 2 threads, 46–69 % of its roofline with
/// cached stores, 67–98 % streamed, one noisy run above).
///
/// The local transport asks per copy (an all-to-all's block, a
/// broadcast's piece of `count / n`, a reduce-scatter's block), and once
/// per call for an all-gather, for its largest block; the shared-memory
/// path of the MPI transport asks once per call, for the whole output it
/// writes round by round.
pub(crate) fn streams<T>(len: usize) -> bool {
    len.saturating_mul(size_of::<T>()) >= crate::copy_streaming_from_bytes()
}

/// [`reduce`] into one output that no input overlaps (a reduce-scatter's
/// receive buffer), streamed when [`streams`] says so; complete and
/// ordered before any later store when it returns.
///
/// # Safety
/// As [`reduce`], and `out` overlaps no input.
pub(crate) unsafe fn reduce_into<T: Element>(
    inputs: &[*const T],
    out: *mut T,
    len: usize,
    op: ReduceOp,
) {
    let stream = streams::<T>(len);
    // SAFETY: forwarded from the caller.
    unsafe { reduce_to(inputs, out, len, op, stream) };
    if stream {
        fence();
    }
}

/// [`reduce`] into one output that no input overlaps; with `stream`, the
/// whole tiles are written with non-temporal stores where the platform has
/// them and `out` is aligned to 16 bytes (cached stores otherwise).
///
/// # Safety
/// As [`reduce`], and `out` overlaps no input. With `stream`, the caller
/// runs [`fence`] before another thread may read `out` (streaming stores
/// are weakly ordered).
pub(crate) unsafe fn reduce_to<T: Element>(
    inputs: &[*const T],
    out: *mut T,
    len: usize,
    op: ReduceOp,
    stream: bool,
) {
    // SAFETY: forwarded from the caller; streaming needs the alignment
    // `nt::usable` checks.
    unsafe {
        if stream && nt::usable(out) {
            reduce_dispatch::<T, true>(inputs, &[out], len, op);
        } else {
            reduce_dispatch::<T, false>(inputs, &[out], len, op);
        }
    }
}

/// Order every earlier non-temporal store ([`reduce_to`], [`copy_to`] with
/// `stream`) before every later store: on x86 they are weakly ordered, and
/// a release store (the barrier that publishes a result) does not order
/// them. A no-op elsewhere.
pub(crate) fn fence() {
    nt::fence();
}

/// Runs [`fence`] when dropped, if made with `true`: a call that streams
/// into the caller's buffer round by round orders its stores on every way
/// out, an early error return included.
#[cfg(feature = "mpi")]
pub(crate) struct FenceOnExit(pub(crate) bool);

#[cfg(feature = "mpi")]
impl Drop for FenceOnExit {
    fn drop(&mut self) {
        if self.0 {
            fence();
        }
    }
}

/// [`reduce_with`] for `op`; `STREAM` as there.
///
/// # Safety
/// As [`reduce`]; with `STREAM`, every output is [`nt::usable`] and
/// overlaps no input, and the caller runs [`nt::fence`] before another
/// thread may read the outputs.
#[inline(always)]
unsafe fn reduce_dispatch<T: Element, const STREAM: bool>(
    inputs: &[*const T],
    outputs: &[*mut T],
    len: usize,
    op: ReduceOp,
) {
    let n = inputs.len();
    // SAFETY: forwarded from the caller.
    unsafe {
        match op {
            ReduceOp::Sum => {
                reduce_with::<T, _, STREAM>(inputs, outputs, len, Accumulator::add, None)
            }
            ReduceOp::Prod => {
                reduce_with::<T, _, STREAM>(inputs, outputs, len, Accumulator::mul, None)
            }
            ReduceOp::Min => {
                reduce_with::<T, _, STREAM>(inputs, outputs, len, Accumulator::min, None)
            }
            ReduceOp::Max => {
                reduce_with::<T, _, STREAM>(inputs, outputs, len, Accumulator::max, None)
            }
            ReduceOp::Mean => {
                reduce_with::<T, _, STREAM>(inputs, outputs, len, Accumulator::add, Some(n))
            }
        }
    }
}

/// Non-temporal (streaming) stores of whole tiles.
mod nt {
    use super::TILE;

    /// Whether tiles can be streamed to `p`: x86-64 (outside Miri) and `p`
    /// aligned to 16 bytes. A tile is `64 × size_of::<T>()` bytes, a
    /// multiple of 16, so every later tile of the same buffer is aligned
    /// too.
    pub(super) fn usable<T>(p: *mut T) -> bool {
        cfg!(all(target_arch = "x86_64", not(miri))) && (p as usize).is_multiple_of(16)
    }

    /// Elements of `T` before the first 16-byte boundary at or after `p`,
    /// from where tiles can be streamed ([`usable`]), if the platform
    /// streams and that boundary is an element boundary (`p` aligned to
    /// `T`, whose size divides 16) within `len` elements.
    pub(super) fn head<T>(p: *mut T, len: usize) -> Option<usize> {
        let size = size_of::<T>();
        let at = p as usize;
        if !cfg!(all(target_arch = "x86_64", not(miri)))
            || size == 0
            || !16usize.is_multiple_of(size)
            || !at.is_multiple_of(size)
        {
            return None;
        }
        let k = (16 - at % 16) % 16 / size;
        (k <= len).then_some(k)
    }

    /// Write the tile `y` to `dst` with non-temporal stores.
    ///
    /// # Safety
    /// `dst` is valid for `TILE` writes, no other thread accesses it, and
    /// [`usable`] holds for it.
    #[inline(always)]
    pub(super) unsafe fn store<T>(dst: *mut T, y: &[T; TILE]) {
        #[cfg(all(target_arch = "x86_64", not(miri)))]
        {
            use core::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_stream_si128};
            let bytes = size_of::<[T; TILE]>();
            let (src, dst) = (y.as_ptr().cast::<u8>(), dst.cast::<u8>());
            let mut i = 0;
            while i < bytes {
                // A tile is a multiple of 16 bytes, so `i + 16 <= bytes`;
                // SSE2 is part of x86-64's baseline.
                // SAFETY: in `y` and the caller's tile at `dst`, aligned (`usable`); unaliased (caller).
                unsafe {
                    _mm_stream_si128(
                        dst.add(i).cast::<__m128i>(),
                        _mm_loadu_si128(src.add(i).cast::<__m128i>()),
                    );
                }
                i += 16;
            }
        }
        #[cfg(not(all(target_arch = "x86_64", not(miri))))]
        // SAFETY: `dst` is valid for `TILE` writes (caller).
        unsafe {
            dst.cast::<[T; TILE]>().write_unaligned(*y)
        }
    }

    /// `sfence` on x86-64: see [`super::fence`].
    pub(super) fn fence() {
        #[cfg(all(target_arch = "x86_64", not(miri)))]
        // SAFETY: SSE is part of x86-64's baseline; `sfence` has no operands.
        unsafe {
            core::arch::x86_64::_mm_sfence()
        }
    }
}

/// Elements reduced per tile: the accumulators of a tile stay in vector
/// registers (64 f32 are four AVX-512 registers), so each input element is
/// loaded once and each output element stored once, with no pass over a
/// buffer in between. A 1024-element chunk accumulated on the stack ran at
/// half the rate of a fused loop on large buffers.
const TILE: usize = 64;

/// The tiled reduction; with `STREAM` the tiles are written by
/// [`nt::store`] (the tail with cached stores).
///
/// # Safety
/// As [`reduce_dispatch`].
#[inline(always)]
unsafe fn reduce_with<T: Element, F: Fn(T::Acc, T::Acc) -> T::Acc, const STREAM: bool>(
    inputs: &[*const T],
    outputs: &[*mut T],
    len: usize,
    combine: F,
    average_over: Option<usize>,
) {
    let Some((&first, rest)) = inputs.split_first() else {
        return;
    };
    let finish = |a: T::Acc| match average_over {
        Some(n) => T::from_acc(a.div_count(n)),
        None => T::from_acc(a),
    };
    let whole = len - len % TILE;
    let mut off = 0;
    while off < whole {
        let mut acc = [T::Acc::default(); TILE];
        // SAFETY: `len` valid elements behind every pointer (caller) and
        // `off + TILE <= len`; a tile is read before it is written (outputs
        // may alias inputs); unaligned access, as `T`'s alignment is all we know.
        unsafe {
            let x = first.add(off).cast::<[T; TILE]>().read_unaligned();
            for (a, x) in acc.iter_mut().zip(x) {
                *a = x.to_acc();
            }
            for &p in rest {
                let x = p.add(off).cast::<[T; TILE]>().read_unaligned();
                for (a, x) in acc.iter_mut().zip(x) {
                    *a = combine(*a, x.to_acc());
                }
            }
            let mut y = [T::zeroed(); TILE];
            for (y, a) in y.iter_mut().zip(acc) {
                *y = finish(a);
            }
            for &p in outputs {
                if STREAM {
                    nt::store(p.add(off), &y);
                } else {
                    p.add(off).cast::<[T; TILE]>().write_unaligned(y);
                }
            }
        }
        off += TILE;
    }
    for i in whole..len {
        // SAFETY: `i < len`; as above.
        unsafe {
            let mut a = first.add(i).read().to_acc();
            for &p in rest {
                a = combine(a, p.add(i).read().to_acc());
            }
            let y = finish(a);
            for &p in outputs {
                p.add(i).write(y);
            }
        }
    }
}

/// The order in which rank `me` of `n` visits the blocks of all ranks:
/// its own first, then `me + 1`, … wrapping around, so that at each step
/// every rank reads a different rank's buffer instead of all reading rank
/// 0's, then rank 1's, at once.
///
/// # Example (crate-internal)
/// `rotation(1, 3)` yields 1, 2, 0.
pub(crate) fn rotation(me: usize, n: usize) -> impl Iterator<Item = usize> {
    (0..n).map(move |k| (me + k) % n)
}

/// The block size from which an all-gather shares its copies
/// ([`gathers_shared`]).
const SHARED_GATHER_FROM_BYTES: usize = 1 << 20;

/// Whether an all-gather whose largest block is `block_bytes` shares its
/// copies among the ranks (from [`SHARED_GATHER_FROM_BYTES`] on): rank `r`
/// reads the `r`-th piece ([`partition`]) of every block once and writes it
/// into every rank's output ([`copy_to_each`]), streamed as [`streams`]
/// says for the largest block. Every distinct input byte is then read from
/// memory once, and every rank does `1 / n` of the work however uneven the
/// blocks. Below it each rank copies every block into its own output, in
/// [`rotation`] order, starting with its own block, hot in its cache. When
/// each rank copied every block into its own output, each block came from
/// memory once per rank, n² · S reads where the roofline counts n · S: an
/// all-gather at 64 MiB on 2 threads ran at 58–84 % of its roofline, and at
/// 67–78 % when the ranks read the blocks in the same order so that one's
/// reads might hit the line the other brought into the shared cache.
///
/// # Example (crate-internal)
/// `gathers_shared(1 << 20)` is `true`; `gathers_shared(64)` is `false`.
pub(crate) fn gathers_shared(block_bytes: usize) -> bool {
    block_bytes >= SHARED_GATHER_FROM_BYTES
}

/// The size from which a broadcast's copies are shared among all ranks.
/// Below it each rank copies into its own buffer, which it is about to read.
const SHARE_FROM_BYTES: usize = 256 << 10;

/// Whether a broadcast of `count` elements shares its copies among all
/// ranks ([`broadcast_pieces`]): from [`SHARE_FROM_BYTES`] on.
pub(crate) fn shares_broadcast<T>(count: usize) -> bool {
    count.saturating_mul(size_of::<T>()) >= SHARE_FROM_BYTES
}

/// The pieces of a broadcast of `count` elements from `root` that rank `me`
/// of `n` copies, as `(destination rank, lo, hi)`. Small broadcasts: each
/// non-root rank copies the root's buffer into its own. From
/// [`SHARE_FROM_BYTES`] on, every destination is split among all `n` ranks
/// ([`partition`]), so that the root's core copies too instead of idling
/// (at n = 2 the copy otherwise runs on one core of two).
pub(crate) fn broadcast_pieces<T>(
    count: usize,
    n: usize,
    root: usize,
    me: usize,
) -> Vec<(usize, usize, usize)> {
    if !shares_broadcast::<T>(count) {
        return if me == root {
            Vec::new()
        } else {
            vec![(me, 0, count)]
        };
    }
    let (lo, hi) = partition::<T>(count, me, n);
    rotation(me, n)
        .filter(|&d| d != root && hi > lo)
        .map(|d| (d, lo, hi))
        .collect()
}

/// Copy `len` elements from `src` to `dst`, streamed when [`streams`] says
/// so; complete and ordered before any later store when it returns.
///
/// # Safety
/// `src` valid for `len` reads, `dst` for `len` writes, not overlapping, and
/// no other thread writes either range during the call.
#[inline]
pub(crate) unsafe fn copy<T: Element>(src: *const T, dst: *mut T, len: usize) {
    let stream = streams::<T>(len);
    // SAFETY: forwarded from the caller.
    unsafe { copy_to(src, dst, len, stream) };
    if stream {
        fence();
    }
}

/// Copy `len` elements from `src` to `dst`; with `stream`, with
/// non-temporal stores where the platform has them ([`copy_to_each`]).
/// Otherwise the copy runs as `memcpy`s of at most [`CACHED_PIECE_BYTES`]:
/// glibc 2.36 copies 2 KiB to a few hundred KiB with `rep movsb`, which on
/// an AMD EPYC (Zen) ran at 2–3 GB/s instead of 46–50 whenever the
/// destination sat 4 to 16 bytes past the source within a cache line (a
/// `Vec<f32>` lands on any 16-byte boundary); below 2 KiB it copies with
/// vector registers at any offset.
///
/// # Safety
/// As [`copy`]. With `stream`, the caller runs [`fence`] before another
/// thread may read `dst`.
pub(crate) unsafe fn copy_to<T: Element>(src: *const T, dst: *mut T, len: usize, stream: bool) {
    if stream {
        // SAFETY: forwarded from the caller.
        return unsafe { copy_to_each(src, &[dst], len, true) };
    }
    let piece = (CACHED_PIECE_BYTES / size_of::<T>().max(1)).max(1);
    let mut off = 0;
    while off < len {
        let k = piece.min(len - off);
        // SAFETY: valid: `off + k <= len`, inside both ranges; unaliased: they do not overlap (caller).
        unsafe { core::ptr::copy_nonoverlapping(src.add(off), dst.add(off), k) };
        off += k;
    }
}

/// The largest piece a cached copy hands to `memcpy` at once ([`copy_to`]
/// says why): under glibc's smallest `rep movsb` threshold (2 KiB).
const CACHED_PIECE_BYTES: usize = 1024;

/// Copy `len` elements from `src` to each of `dsts`, in tiles that read
/// `src` once for every destination. With `stream`, each destination the
/// platform can stream to gets the elements before its first 16-byte
/// boundary with `memcpy`, then whole tiles with non-temporal stores from
/// there ([`nt::head`]), so that a destination at any offset streams; the
/// others get cached stores. A tile's reads for the destinations differ by
/// less than 16 bytes, so `src` still comes from memory once.
///
/// # Safety
/// `src` valid for `len` reads and every destination for `len` writes; no
/// two of these ranges overlap, and no other thread writes any of them
/// during the call. With `stream`, the caller runs [`fence`] before another
/// thread may read a destination.
pub(crate) unsafe fn copy_to_each<T: Element>(
    src: *const T,
    dsts: &[*mut T],
    len: usize,
    stream: bool,
) {
    // Per destination: where its tiles start, and whether they stream.
    let plan: Vec<(usize, bool)> = dsts
        .iter()
        .map(|&d| match nt::head(d, len).filter(|_| stream) {
            Some(h) => (h, true),
            None => (0, false),
        })
        .collect();
    let tiles = |h: usize| (len - h) / TILE;
    let most = plan.iter().map(|&(h, _)| tiles(h)).max().unwrap_or(0);
    for k in 0..most {
        for (&d, &(h, streamed)) in dsts.iter().zip(&plan) {
            if k >= tiles(h) {
                continue;
            }
            let off = h + k * TILE;
            // Whole tiles are multiples of 16 bytes, so a destination
            // streamed from `h` stays 16-byte aligned tile after tile.
            // SAFETY: valid: `off + TILE <= h + tiles(h) * TILE <= len`, in every range (caller), aligned at `h` (`nt::head`); unaliased: the ranges do not overlap (caller).
            unsafe {
                let y = src.add(off).cast::<[T; TILE]>().read_unaligned();
                if streamed {
                    nt::store(d.add(off), &y);
                } else {
                    d.add(off).cast::<[T; TILE]>().write_unaligned(y);
                }
            }
        }
    }
    for (&d, &(h, _)) in dsts.iter().zip(&plan) {
        let end = h + tiles(h) * TILE;
        // SAFETY: valid: the head `0..h` and the tail `end..len` lie in every range (`h <= end <= len`); unaliased: the ranges do not overlap (caller).
        unsafe {
            core::ptr::copy_nonoverlapping(src, d, h);
            core::ptr::copy_nonoverlapping(src.add(end), d.add(end), len - end);
        }
    }
}

/// Exclusive prefix sums: the offset of each block.
pub(crate) fn offsets(counts: &[usize]) -> Vec<usize> {
    let mut acc = 0;
    counts
        .iter()
        .map(|&c| {
            let o = acc;
            acc += c;
            o
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partition_covers_everything_once_aligned() {
        for len in [0, 1, 15, 16, 17, 1000, 4096, 4097] {
            for size in 1..=8 {
                let mut next = 0;
                for r in 0..size {
                    let (lo, hi) = partition::<f32>(len, r, size);
                    assert_eq!(lo, next, "len {len} size {size} rank {r}");
                    assert!(hi >= lo);
                    assert!(lo % 16 == 0 || lo == len);
                    next = hi;
                }
                assert_eq!(next, len);
            }
        }
    }

    /// Every non-root destination is covered exactly once, small or large.
    #[test]
    fn broadcast_pieces_cover_every_destination_once() {
        for count in [0, 10, SHARE_FROM_BYTES / 4 - 1, SHARE_FROM_BYTES / 4 + 17] {
            for n in 1..=5 {
                for root in 0..n {
                    let mut covered = vec![vec![0u8; count]; n];
                    for me in 0..n {
                        for (d, lo, hi) in broadcast_pieces::<f32>(count, n, root, me) {
                            assert_ne!(d, root);
                            covered[d][lo..hi].iter_mut().for_each(|c| *c += 1);
                        }
                    }
                    for (d, c) in covered.iter().enumerate() {
                        let want = u8::from(d != root);
                        assert!(
                            c.iter().all(|&x| x == want),
                            "count {count} n {n} root {root} dest {d}"
                        );
                    }
                }
            }
        }
        // Large: the root copies too.
        assert!(!broadcast_pieces::<f32>(1 << 20, 2, 0, 0).is_empty());
        assert!(broadcast_pieces::<f32>(1024, 2, 0, 0).is_empty());
    }

    /// Every destination gets the source's bits, for whole tiles and a
    /// tail, streamed or not, at an aligned and a misaligned destination.
    #[test]
    fn copy_to_each_writes_every_destination() {
        for len in [0, 1, TILE - 1, TILE, TILE + 3, 5 * TILE + 17] {
            let src: Vec<f32> = (0..len).map(|i| i as f32 * 0.5 - 3.0).collect();
            for stream in [false, true] {
                // One spare element so that a destination can start
                // misaligned (4 bytes past a 16-byte boundary).
                let mut a = vec![f32::NAN; len + 1];
                let mut b = vec![f32::NAN; len + 1];
                let pa = a.as_mut_ptr();
                // SAFETY: `b` has `len + 1` elements, so `b + 1` is in bounds and has `len` after it.
                let pb = unsafe { b.as_mut_ptr().add(1) };
                // SAFETY: valid: `src` has `len` elements and each destination `len` slots; unaliased: three distinct vectors; fenced below.
                unsafe { copy_to_each(src.as_ptr(), &[pa, pb], len, stream) };
                fence();
                assert_eq!(&a[..len], &src[..], "len {len} stream {stream}");
                assert_eq!(&b[1..], &src[..], "len {len} stream {stream}");
                assert!(a[len].is_nan() && b[0].is_nan(), "wrote past the range");
            }
        }
    }

    /// Cached copies in pieces: lengths around a piece's size, bytes and
    /// doubles, destinations at every offset within 16 bytes of the source's
    /// alignment, nothing written outside.
    #[test]
    fn copy_to_is_exact_across_pieces() {
        fn check<T: Element + PartialEq + core::fmt::Debug>(make: impl Fn(usize) -> T, fill: T) {
            let piece = CACHED_PIECE_BYTES / size_of::<T>();
            for len in [0, 1, piece - 1, piece, piece + 1, 3 * piece + 7] {
                let src: Vec<T> = (0..len).map(&make).collect();
                for at in 0..4 {
                    for stream in [false, true] {
                        let mut dst = vec![fill; len + 4];
                        // SAFETY: valid: `dst` has `len + 4` elements and `at < 4`; unaliased: distinct vectors; fenced below.
                        unsafe { copy_to(src.as_ptr(), dst.as_mut_ptr().add(at), len, stream) };
                        fence();
                        assert_eq!(&dst[at..at + len], &src[..], "len {len} at {at}");
                        assert!(dst[..at].iter().chain(&dst[at + len..]).all(|x| *x == fill));
                    }
                }
            }
        }
        check(|i| (i * 7 + 1) as u8, 0u8);
        check(|i| i as f64 * 0.5 + 1.0, 0f64);
    }

    #[test]
    fn gathers_shared_from_its_threshold() {
        assert!(!gathers_shared(SHARED_GATHER_FROM_BYTES - 1));
        assert!(gathers_shared(SHARED_GATHER_FROM_BYTES));
    }

    #[test]
    fn rotation_visits_every_rank_once_starting_with_itself() {
        assert_eq!(rotation(1, 3).collect::<Vec<_>>(), vec![1, 2, 0]);
        assert_eq!(rotation(0, 1).collect::<Vec<_>>(), vec![0]);
        for n in 1..=8 {
            for me in 0..n {
                let mut v: Vec<usize> = rotation(me, n).collect();
                assert_eq!(v[0], me);
                v.sort_unstable();
                assert_eq!(v, (0..n).collect::<Vec<_>>());
            }
        }
        // At every step the ranks read distinct sources.
        for k in 0..4 {
            let mut at: Vec<usize> = (0..4).map(|me| rotation(me, 4).nth(k).unwrap()).collect();
            at.sort_unstable();
            assert_eq!(at, vec![0, 1, 2, 3]);
        }
    }

    /// Tiles, the tail and in-place outputs, against a serial sum in rank
    /// order; f16 accumulates in f32 and rounds once.
    #[test]
    fn reduce_tiles_and_tail_match_a_serial_sum() {
        for len in [0, 1, TILE - 1, TILE, TILE + 1, 3 * TILE + 5] {
            let xs: Vec<Vec<f32>> = (0..3)
                .map(|r| (0..len).map(|i| (i * 7 + r * 3) as f32 * 0.25).collect())
                .collect();
            let mut out = vec![0f32; len];
            let ins: Vec<*const f32> = xs.iter().map(|x| x.as_ptr()).collect();
            // SAFETY: every input and the output hold `len` elements.
            unsafe { reduce(&ins, &[out.as_mut_ptr()], len, ReduceOp::Max) };
            for i in 0..len {
                assert_eq!(out[i], xs[2][i], "max at {i} of {len}");
            }
            let h: Vec<Vec<half::f16>> = (0..3)
                .map(|_| vec![half::f16::from_f32(1.0 / 3.0); len])
                .collect();
            let mut out = vec![half::f16::ZERO; len];
            let ins: Vec<*const half::f16> = h.iter().map(|x| x.as_ptr()).collect();
            // SAFETY: every input and the output hold `len` elements.
            unsafe { reduce(&ins, &[out.as_mut_ptr()], len, ReduceOp::Sum) };
            let once = half::f16::from_f32(3.0 * half::f16::from_f32(1.0 / 3.0).to_f32());
            assert!(out.iter().all(|&x| x == once), "f16 rounds once, len {len}");
        }
    }

    #[test]
    fn reduce_in_place_over_many_chunks() {
        let n = 3 * TILE * 16 + 5;
        let mut a: Vec<f64> = (0..n).map(|i| i as f64).collect();
        let b: Vec<f64> = (0..n).map(|i| 2.0 * i as f64).collect();
        let pa = a.as_mut_ptr();
        // SAFETY: both buffers hold `n` elements; the output may alias an
        // input (`reduce` reads each tile before writing it).
        unsafe { reduce(&[pa as *const f64, b.as_ptr()], &[pa], n, ReduceOp::Mean) };
        assert!(a.iter().enumerate().all(|(i, &x)| x == 1.5 * i as f64));
    }
}
