//! Single-copy collectives for the ranks of one host: each rank reads its
//! peers' buffers straight into its own with cross-memory attach
//! ([`super::cma`]), where the slot path of [`super::shared`] copies
//! every byte twice (into the sender's slot, out of it). Used by the
//! functions of [`super::shared`] for calls of
//! [`super::segment::SingleCopy::from_bytes`] to below
//! [`super::segment::SingleCopy::below_bytes`] when every rank of the
//! segment could read its peers at creation, and, in a segment with
//! arenas, for every call from 64 KiB: peers' shared buffers are read
//! through the mapping at any size, and a call that would need
//! cross-memory attach outside its window goes back to the slots
//! ([`Direct::Slots`]).
//!
//! A call is one round of the segment:
//! 1. each rank writes its buffer's address to the head of its slot of the
//!    round (and, for a shared buffer, its offset in the rank's arena:
//!    [`super::arena`]), and passes a barrier;
//! 2. each rank reads what it needs from its peers' buffers (a reduction
//!    reads its peers' blocks for it into private scratch memory, chunk by
//!    chunk, and reduces them in rank order with the thread transport's
//!    kernel, so the bits are those of a [`crate::LocalWorld`]); a peer's
//!    shared buffer is read through this rank's mapping of its arena
//!    instead, with `memcpy` (cross-memory attach read a reduce-scatter's
//!    shared buffers 3–5× slower than ordinary memory: 2 processes, 1 MiB
//!    253 against 72 µs);
//! 3. each rank writes whether a read was refused to its slot's head and
//!    passes a last barrier; if any rank's was, single copies go off on
//!    every rank and the call runs again through the slots ([`Direct`]).
//!
//! On the read path nobody but a rank writes its buffers, and only while
//! it is in the call: a peer's buffers are only ever read. A rank whose
//! last barrier fails (a peer gone: the same [`Stop`] on every rank,
//! naming it) returns while a stalled peer might still read its buffers,
//! which changes nothing in them; that peer then fails the same barrier.
//! (A broadcast of shared buffers in place is the exception: see
//! [`broadcast`].)
//!
//! All-reduce keeps the slots: its slot path already copies only peers'
//! shares in and results out, and a direct version (each rank reducing its
//! share from its peers' buffers, then reading their results) measured
//! slower at every size, cross-memory attach copying at about half of
//! `memcpy`'s speed here (2 processes: 123 against 99 µs at 1 MiB, 3.3–4.4
//! against 1.8–2.1 ms at 16 MiB). Broadcast reads only too: a root that
//! wrote half of each peer's buffer (`process_vm_writev`) was twice as
//! fast on 2 processes, but could write into a peer that had already left
//! the call at its deadline. On shared buffers that every non-root rank lets
//! its peers write, a broadcast from 256 KiB writes into its peers after all, in
//! pieces as on threads ([`broadcast`]): a peer that leaves the call early
//! is then a stranded call that ends the job, as in the all-reduce in
//! place of [`super::shared`].

use std::time::Instant;

use super::cma;
use super::segment::{Segment, Stop};
use crate::local::kernels;
use crate::{Element, ReduceOp};

/// The bytes a collective moves (its whole receive buffer, or a
/// reduce-scatter's send buffer, or a broadcast's buffer: the same on every
/// rank; for an all-to-all-v, the largest receive buffer of any rank) from
/// which the ranks of one host read their peers' buffers directly when
/// they can ([`crate::MpiWorldBuilder::shared_memory_single_copy`]):
/// all-gather(-v), all-to-all(-v), broadcast and reduce-scatter(-v) of at least this many
/// bytes and less than [`SINGLE_COPY_BELOW_BYTES`]. Smaller calls go
/// through the segment's slots, whose one barrier costs less than the
/// direct path's two and whose copies stay in cache.
///
/// # Example
/// ```
/// assert!(ruda_comm::SINGLE_COPY_FROM_BYTES < ruda_comm::SINGLE_COPY_BELOW_BYTES);
/// ```
pub const SINGLE_COPY_FROM_BYTES: usize = 64 << 10;

/// The bytes from which collectives go back to the segment's slots (see
/// [`SINGLE_COPY_FROM_BYTES`]). Past the last-level cache, the slot path's
/// two copies, pipelined round by round on both ranks' cores with streaming
/// stores, beat a reader's single copy: on this project's 2-core machine
/// (32 MiB L3), broadcast took 3.0–3.1 ms direct against 2.0–2.1 ms
/// through the slots at 16 MiB, reduce-scatter 2.1 against 1.9 ms, where
/// direct was ahead at 8 MiB (broadcast 0.79–0.82 against 1.05–1.08 ms).
///
/// # Example
/// ```
/// assert_eq!(ruda_comm::SINGLE_COPY_BELOW_BYTES, 16 << 20);
/// ```
pub const SINGLE_COPY_BELOW_BYTES: usize = 16 << 20;

/// How a direct call ended when every rank passed its last barrier.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use]
pub(crate) enum Direct {
    /// Every rank read what it needed: the call is complete.
    Done,
    /// Some rank's read was refused (a buffer the kernel cannot read, a
    /// permission lost): every rank saw it, single copies are now off on
    /// every rank of the segment, and the caller runs the call through
    /// the slots instead (its outputs are all rewritten there).
    Refused,
    /// Nothing was read: some buffer the call needs is not a shared buffer
    /// and cross-memory attach is off for this call (its size is outside
    /// the window, or the segment has none). Every rank saw the same
    /// buffers and returns this; the caller runs the call through the
    /// slots.
    Slots,
}

/// A refused read: the peer and the system's error.
type Refusal = (usize, std::io::Error);

/// Where every rank's buffer of a call is: its address in its process,
/// where it is a shared buffer, its offset in its rank's arena plus one
/// (0: not one), and whether its rank lets peers write it.
struct Buffers {
    addrs: Vec<usize>,
    arena: Vec<usize>,
    writable: Vec<bool>,
}

/// Publish this rank's buffer `buf` for the call at the head
/// of its slot `b` (word 0 its address, word 1 its refusal flag, cleared,
/// word 2 its arena offset plus one, or 0, word 3 whether peers may write
/// it), pass the barrier, and collect every rank's.
fn exchange<T>(
    seg: &Segment,
    b: usize,
    buf: &[T],
    writable: bool,
    deadline: Instant,
) -> Result<Buffers, Stop> {
    exchange_with(seg, b, buf, writable, &[], deadline)
}

/// Write what [`exchange_with`] publishes at the head of this rank's slot
/// `b`, without the barrier (a test stands in for a rank that publishes
/// and then stalls).
pub(crate) fn publish<T>(seg: &Segment, b: usize, buf: &[T], writable: bool, extra: &[u64]) {
    let (ptr, bytes) = (buf.as_ptr().cast::<u8>(), size_of_val(buf));
    let head = seg.slot(seg.rank(), b).cast::<u64>();
    let words = EXTRA
        .checked_add(extra.len())
        .and_then(|w| w.checked_mul(8));
    assert!(
        words.is_some_and(|w| w <= seg.slot_len()),
        "{} words in a slot of {} bytes",
        extra.len(),
        seg.slot_len()
    );
    for (i, &w) in extra.iter().enumerate() {
        // SAFETY: word `EXTRA + i` of this rank's slot of the round, inside it (asserted above), only this rank's until the round's barrier.
        unsafe { head.add(EXTRA + i).write(w) };
    }
    let arena = seg.arena_offset(ptr, bytes).map_or(0, |o| o as u64 + 1);
    // SAFETY: words 0 to 3 of this rank's slot of the round (4 KiB aligned, a page or more), only this rank's until the round's barrier.
    unsafe { head.write(ptr as u64) };
    // SAFETY: as above.
    unsafe { head.add(1).write(0) };
    // SAFETY: as above.
    unsafe { head.add(2).write(arena) };
    // SAFETY: as above.
    unsafe { head.add(3).write(u64::from(writable)) };
}

/// [`exchange`], publishing `extra` too, from word [`EXTRA`] of the head
/// (peers read it with [`extra_word`] until the round after next).
fn exchange_with<T>(
    seg: &Segment,
    b: usize,
    buf: &[T],
    writable: bool,
    extra: &[u64],
    deadline: Instant,
) -> Result<Buffers, Stop> {
    publish(seg, b, buf, writable, extra);
    seg.barrier(deadline)?;
    let word = |q: usize, i: usize| {
        // SAFETY: rank `q` wrote words 0, 2 and 3 before the barrier and writes them again only in a later round of this parity (`Segment::next_round`).
        unsafe { seg.slot(q, b).cast::<u64>().add(i).read() as usize }
    };
    Ok(Buffers {
        addrs: (0..seg.size()).map(|q| word(q, 0)).collect(),
        arena: (0..seg.size()).map(|q| word(q, 2)).collect(),
        writable: (0..seg.size()).map(|q| word(q, 3) != 0).collect(),
    })
}

/// The first head word [`exchange_with`] publishes its `extra` words at.
const EXTRA: usize = 4;

/// Word `i` of the `extra` words rank `q` published in round `b`.
///
/// # Safety
/// Rank `q` published at least `i + 1` extra words in round `b` with
/// [`exchange_with`], whose barrier this rank passed, and this rank has not
/// passed the barrier of the round after (when `q` may write them again).
unsafe fn extra_word(seg: &Segment, b: usize, q: usize, i: usize) -> u64 {
    // SAFETY: inside `q`'s slot (the caller: `q` wrote it there), written before the barrier, not rewritten before the round after next.
    unsafe { seg.slot(q, b).cast::<u64>().add(EXTRA + i).read() }
}

impl Buffers {
    /// Whether the call can read what it needs, the same on every rank:
    /// the buffers of the ranks in `needed` are all shared buffers, or
    /// cross-memory attach is on for a call of `bytes`.
    fn readable(
        &self,
        seg: &Segment,
        mut needed: impl Iterator<Item = usize>,
        bytes: usize,
    ) -> bool {
        seg.single_copy(bytes) || needed.all(|q| self.arena[q] != 0)
    }

    /// Rank `q`'s shared buffer from `offset` for `len` elements of `T`,
    /// as this process maps it, when it is one and the range lies in
    /// `q`'s arena.
    fn mapped<T>(&self, seg: &Segment, q: usize, offset: usize, len: usize) -> Option<*const T> {
        let size = size_of::<T>();
        let o = self.arena[q].checked_sub(1)?;
        let end = offset.checked_add(len)?.checked_mul(size)?.checked_add(o)?;
        (end <= seg.arena_len()).then(|| {
            seg.arena(q)
                .wrapping_add(o + offset * size)
                .cast::<T>()
                .cast_const()
        })
    }

    /// Read `len` elements from `offset` of rank `q`'s buffer into `local`:
    /// through this rank's mapping of `q`'s arena when it is a shared
    /// buffer and the range lies in that arena, else with cross-memory
    /// attach from the process of rank `q`. With `stream`, a mapped read
    /// writes `local` with non-temporal stores, which the caller fences
    /// ([`kernels::FenceOnExit`]) before any peer may read it.
    ///
    /// # Errors
    /// A refused cross-memory read: the peer and the system's error.
    ///
    /// # Safety
    /// `local` is valid for `len` writes, this rank's alone for the call,
    /// and overlaps no peer's buffer; `offset + len` elements lie in rank
    /// `q`'s buffer (the agreed lengths), which `q` does not write during
    /// the call.
    #[allow(clippy::too_many_arguments)]
    unsafe fn read<T: Element>(
        &self,
        seg: &Segment,
        q: usize,
        offset: usize,
        local: *mut T,
        len: usize,
        stream: bool,
    ) -> Result<(), Refusal> {
        if len == 0 {
            return Ok(());
        }
        if let Some(from) = self.mapped::<T>(seg, q, offset, len) {
            // SAFETY: `from` is `len` elements inside `q`'s arena (`mapped` checked), aligned (a shared buffer starts on a line; `offset` is whole elements), not written by `q` during the call; `local` as the caller says, who fences what `stream` streams.
            unsafe { kernels::copy_to(from, local, len, stream) };
            return Ok(());
        }
        let Some(&pid) = seg.pids().and_then(|p| p.get(q)) else {
            // `readable` sends such a call to the slots first.
            return Err((q, std::io::Error::other("no cross-memory attach")));
        };
        // SAFETY: forwarded from the caller.
        unsafe { fetch(q, pid, at::<T>(self.addrs[q], offset), local, len) }
    }
}

/// End a direct call on round `b`: publish whether this rank's reads were
/// refused (word 1 of its slot's head), pass the last barrier (after which
/// no peer reads this rank's buffers), and see whether any rank's were.
/// If so, single copies go off on every rank (each sees the same flags)
/// and the call must run again through the slots.
fn conclude(
    seg: &mut Segment,
    b: usize,
    refused: Option<Refusal>,
    deadline: Instant,
) -> Result<Direct, Stop> {
    let (me, n) = (seg.rank(), seg.size());
    let head = seg.slot(me, b).cast::<u64>();
    // SAFETY: word 1 of this rank's slot of the round: before the barrier below peers read the other words of the head, word 1 only after it.
    unsafe { head.add(1).write(u64::from(refused.is_some())) };
    seg.barrier(deadline)?;
    let any = (0..n).any(|q| {
        // SAFETY: rank `q` wrote word 1 before the barrier and writes it again only in a later round of this parity.
        unsafe { seg.slot(q, b).cast::<u64>().add(1).read() != 0 }
    });
    if !any {
        return Ok(Direct::Done);
    }
    if let Some((q, e)) = refused {
        eprintln!(
            "ruda: rank {me} of a shared-memory segment of {n} could not read rank {q}'s buffer directly ({e}); the segment moves data through its slots from now on"
        );
    }
    seg.clear_single_copy();
    Ok(Direct::Refused)
}

/// Read `len` elements at `remote` in rank `q` (process `pid`) into
/// `local`.
///
/// # Errors
/// The refusal: the peer and the system's error.
///
/// # Safety
/// `local` is valid for `len` writes and this rank's alone for the call.
unsafe fn fetch<T>(
    q: usize,
    pid: libc::pid_t,
    remote: usize,
    local: *mut T,
    len: usize,
) -> Result<(), Refusal> {
    let bytes = len
        .checked_mul(size_of::<T>())
        .expect("a buffer's size fits usize");
    // SAFETY: forwarded from the caller.
    unsafe { cma::read(pid, remote, local.cast(), bytes) }.map_err(|e| (q, e))
}

/// The address `offset` elements of `T` past `base`.
fn at<T>(base: usize, offset: usize) -> usize {
    offset
        .checked_mul(size_of::<T>())
        .and_then(|b| base.checked_add(b))
        .expect("an offset inside a peer's buffer of agreed length")
}

/// Peers in the order a rank reads them: from the next rank on, so that
/// ranks do not all read one peer at once.
fn peers(me: usize, n: usize) -> impl Iterator<Item = usize> {
    (1..n).map(move |i| (me + i) % n)
}

/// Reduce the block of `len` elements from `offset` of every rank's
/// `send` (this rank's at `own`) into `out`: peers' blocks are read chunk
/// by chunk into `scratch` (this rank's, [`Segment::take_scratch`]) and
/// reduced in rank order.
///
/// # Errors
/// The first refused read (the reduction stops there).
///
/// # Safety
/// `own` valid for `len` reads and `out` for `len` writes, not
/// overlapping; no peer reads `out`.
#[allow(clippy::too_many_arguments)]
unsafe fn reduce_block<T: Element>(
    seg: &Segment,
    scratch: &mut [u64],
    bufs: &Buffers,
    offset: usize,
    own: *const T,
    out: *mut T,
    len: usize,
    op: ReduceOp,
    stream: bool,
) -> Result<(), Refusal> {
    let (me, n) = (seg.rank(), seg.size());
    let mapped: Option<Vec<*const T>> = (0..n)
        .map(|q| {
            if q == me {
                Some(own)
            } else {
                bufs.mapped::<T>(seg, q, offset, len)
            }
        })
        .collect();
    if let Some(ins) = mapped {
        // Every peer's block is a shared buffer: reduce straight from the mappings.
        // SAFETY: inputs valid for `len` reads (`own`, and peers' blocks inside their arenas, not written during the call), `out` for `len` writes, overlapping none; `stream` is fenced by the caller.
        unsafe { kernels::reduce_to(&ins, out, len, op, stream) };
        return Ok(());
    }
    // Whole cache lines per piece, so that every chunk of `out` keeps the
    // 16-byte alignment streaming stores need.
    let grain = (64 / size_of::<T>().max(1)).max(1);
    let room = size_of_val(scratch) / size_of::<T>().max(1) / (n - 1).max(1) / grain * grain;
    assert!(room > 0 || n == 1, "scratch for single copies");
    let base = scratch.as_mut_ptr().cast::<T>();
    // Peer `q`'s piece of the scratch.
    let piece = |q: usize| base.wrapping_add((if q < me { q } else { q - 1 }) * room);
    let mut off = 0;
    while off < len {
        let m = room.min(len - off);
        for q in peers(me, n) {
            // SAFETY: peer `q`'s piece of `scratch` (borrowed mutably, process memory) holds `room >= m` elements; the block lies in `q`'s buffer (agreed counts).
            unsafe { bufs.read(seg, q, offset + off, piece(q), m, false)? };
        }
        let ins: Vec<*const T> = (0..n)
            .map(|q| {
                if q == me {
                    own.wrapping_add(off)
                } else {
                    piece(q).cast_const()
                }
            })
            .collect();
        // SAFETY: inputs valid for `m` reads (scratch, `own`), `out + off` for `m` writes, overlapping none; `stream` is fenced by the caller.
        unsafe { kernels::reduce_to(&ins, out.wrapping_add(off), m, op, stream) };
        off += m;
    }
    Ok(())
}

/// [`super::shared::reduce_scatter`] in single copies: this rank reduces
/// block `me` of every rank's `send` into `recv`.
pub(crate) fn reduce_scatter<T: Element>(
    seg: &mut Segment,
    send: &[T],
    recv: &mut [T],
    counts: &[usize],
    op: ReduceOp,
    deadline: Instant,
) -> Result<Direct, Stop> {
    let me = seg.rank();
    let offsets = kernels::offsets(counts);
    let (o, c) = (offsets[me], counts[me]);
    let (own, out) = (send[o..o + c].as_ptr(), recv[..c].as_mut_ptr());
    let stream = kernels::streams::<T>(recv.len());
    let _fence = kernels::FenceOnExit(stream);
    let b = seg.next_round();
    let bytes = size_of_val(send);
    let bufs = exchange(seg, b, send, false, deadline)?;
    if !bufs.readable(seg, 0..seg.size(), bytes) {
        return Ok(Direct::Slots);
    }
    let mut scratch = seg.take_scratch();
    // SAFETY: `own` is `c` elements of `send`, `out` the first `c` of `recv` (ours, read by no peer).
    let refused = unsafe { reduce_block(seg, &mut scratch, &bufs, o, own, out, c, op, stream) };
    seg.put_scratch(scratch);
    conclude(seg, b, refused.err(), deadline)
}

/// [`super::shared::all_gather`] in single copies: this rank copies its
/// own piece and reads every peer's `send` into its block of `recv`.
pub(crate) fn all_gather<T: Element>(
    seg: &mut Segment,
    send: &[T],
    recv: &mut [T],
    counts: &[usize],
    deadline: Instant,
) -> Result<Direct, Stop> {
    let (me, n) = (seg.rank(), seg.size());
    let offsets = kernels::offsets(counts);
    assert_eq!(send.len(), counts[me], "the agreed count of rank {me}");
    assert_eq!(recv.len(), counts.iter().sum::<usize>(), "the agreed total");
    // One pointer for the whole buffer, then the blocks inside it (a
    // pointer per reborrowed block would invalidate the ones before it).
    let base = recv.as_mut_ptr();
    let blocks: Vec<*mut T> = offsets.iter().map(|&o| base.wrapping_add(o)).collect();
    let b = seg.next_round();
    let bufs = exchange(seg, b, send, false, deadline)?;
    // An empty block is read from nobody (its buffer takes no arena room).
    let needed = (0..n).filter(|&q| counts[q] > 0);
    if !bufs.readable(seg, needed, size_of_val(recv)) {
        return Ok(Direct::Slots);
    }
    // Streamed or not by the whole output, as the thread transport decides.
    let stream = kernels::streams::<T>(recv.len());
    let _fence = kernels::FenceOnExit(stream);
    // SAFETY: `send` and block `me` of `recv` (ours, `counts[me]` elements inside it, checked above); `_fence` orders what it streams.
    unsafe { kernels::copy_to(send.as_ptr(), blocks[me], counts[me], stream) };
    let refused = peers(me, n).try_for_each(|q| {
        // SAFETY: block `q` of `recv` (inside it: offsets of counts totalling its length, checked above), ours; `q`'s send buffer holds `counts[q]`.
        unsafe { bufs.read(seg, q, 0, blocks[q], counts[q], stream) }
    });
    conclude(seg, b, refused.err(), deadline)
}

/// [`super::shared::broadcast`] in single copies: every rank but the root
/// reads the root's `buf` into its own. (The root does not write into its
/// peers' ordinary buffers: a peer that leaves the call at its deadline
/// must not have its memory written after it returned.)
///
/// Where every rank's `buf` is a shared buffer that its rank (the root
/// aside) lets peers write (`writable`: not `staged`) and the broadcast is
/// large enough for
/// the thread transport to share its copies (from 256 KiB:
/// [`kernels::broadcast_pieces`]), the ranks share them here too: rank
/// `q` copies piece `q` of the root's buffer into every other rank's
/// buffer through its mapping, so that every core copies (at n = 2 the
/// read-only path copies on one core of two: 1 MiB took 38–41 µs read,
/// 16–24 µs in pieces, 20–25 µs on threads). A peer may then write a
/// non-root rank's buffer until the last barrier: if that barrier fails,
/// such a rank calls `stranded` (which ends the job), as
/// [`super::shared::all_reduce`] in place does; the root, whose buffer is
/// only read, returns the `Stop` (and its own `writable` does not matter).
pub(crate) fn broadcast<T: Element>(
    seg: &mut Segment,
    buf: &mut [T],
    root: usize,
    deadline: Instant,
    writable: bool,
    stranded: impl FnOnce(&Stop),
) -> Result<Direct, Stop> {
    let (me, n) = (seg.rank(), seg.size());
    let count = buf.len();
    let b = seg.next_round();
    let bufs = exchange(seg, b, buf, writable, deadline)?;
    // Every rank's buffer, if each is a shared buffer its rank lets peers
    // write: the same choice on every rank (every rank's flag and offset,
    // the agreed length, the arena size of the segment).
    // The root's buffer is only read, so a root that refuses peers'
    // writes (staged) does not keep the others from writing each other's.
    let own = buf.as_mut_ptr();
    let shared: Option<Vec<*mut T>> = (0..n)
        .map(|q| {
            let p = bufs.mapped::<T>(seg, q, 0, count)?.cast_mut();
            (q == root || bufs.writable[q]).then_some(if q == me { own } else { p })
        })
        .collect();
    if let Some(ptrs) = shared.filter(|_| n > 1 && kernels::shares_broadcast::<T>(count)) {
        let src = ptrs[root].cast_const();
        for (d, lo, hi) in kernels::broadcast_pieces::<T>(count, n, root, me) {
            // Between the barriers rank `q` alone writes piece `q` of every rank's buffer but the root's (pieces are whole lines), and nobody writes the root's; `kernels::copy` orders what it streams before it returns.
            // SAFETY: `lo..hi` of `count` elements of the root's buffer and of rank `d`'s, mapped here (checked above) or ours; unaliased as above.
            unsafe { kernels::copy(src.add(lo), ptrs[d].add(lo), hi - lo) };
        }
        #[cfg(test)]
        {
            seg.in_place += 1;
        }
        if let Err(stop) = seg.barrier(deadline) {
            // Nobody writes the root's buffer: a peer still reading it
            // after the root returns changes nothing in it, and whatever
            // it copies from a buffer the root has reused lands only in
            // non-root ranks, which fail this same barrier (its verdict is
            // the same on every rank) and are stranded.
            if me != root {
                stranded(&stop);
            }
            return Err(stop);
        }
        return Ok(Direct::Done);
    }
    if !bufs.readable(seg, std::iter::once(root), size_of_val(buf)) {
        return Ok(Direct::Slots);
    }
    let mut refused = Ok(());
    if me != root {
        let stream = kernels::streams::<T>(count);
        let _fence = kernels::FenceOnExit(stream);
        // SAFETY: `buf` is ours; the root's, of the same agreed length, is only read; `_fence` orders what it streams.
        refused = unsafe { bufs.read(seg, root, 0, buf.as_mut_ptr(), count, stream) };
    }
    conclude(seg, b, refused.err(), deadline)
}

/// [`super::shared::all_to_all`] in single copies: this rank reads block
/// `me` of every peer's `send` into block `q` of `recv`.
pub(crate) fn all_to_all<T: Element>(
    seg: &mut Segment,
    send: &[T],
    recv: &mut [T],
    block: usize,
    deadline: Instant,
) -> Result<Direct, Stop> {
    let (me, n) = (seg.rank(), seg.size());
    let mine = me * block;
    let whole = n.checked_mul(block).expect("an agreed buffer length");
    assert!(
        send.len() == whole && recv.len() == whole,
        "n blocks of {block}"
    );
    // One pointer for the whole buffer, then the blocks inside it.
    let base = recv.as_mut_ptr();
    let blocks: Vec<*mut T> = (0..n).map(|q| base.wrapping_add(q * block)).collect();
    let own = send[mine..mine + block].as_ptr();
    let b = seg.next_round();
    let bufs = exchange(seg, b, send, false, deadline)?;
    if !bufs.readable(seg, 0..n, size_of_val(recv)) {
        return Ok(Direct::Slots);
    }
    let stream = kernels::streams::<T>(recv.len());
    let _fence = kernels::FenceOnExit(stream);
    // SAFETY: two ranges of `block` elements (inside `send` and `recv`, checked above), the second ours; `_fence` orders what it streams.
    unsafe { kernels::copy_to(own, blocks[me], block, stream) };
    let refused = peers(me, n).try_for_each(|q| {
        // SAFETY: block `q` of `recv` (inside it, checked above), ours; block `me` of `q`'s send buffer, of the agreed length.
        unsafe { bufs.read(seg, q, mine, blocks[q], block, stream) }
    });
    conclude(seg, b, refused.err(), deadline)
}

/// An all-to-all-v's blocks as this rank sees them: the counts it sends
/// and receives, where each block starts in its buffers, and the buffers'
/// lengths, checked once by [`BlocksV::new`] and again (cheaply) by every
/// function that copies with them ([`BlocksV::fits`]).
pub(crate) struct BlocksV<'a> {
    send_counts: &'a [usize],
    recv_counts: &'a [usize],
    /// Where block `q` starts in `send`, and in `recv`.
    send_at: Vec<usize>,
    recv_at: Vec<usize>,
    /// The lengths of `send` and `recv` it was made for.
    lens: (usize, usize),
}

impl<'a> BlocksV<'a> {
    /// The blocks of rank `me` of `n`, checked before any rank waits on
    /// this one: a count per rank, buffers of the counts' totals, and its
    /// block to itself as long as the one it receives from itself (the
    /// records agreed on all this; a failed check is a bug, not a peer's
    /// error).
    pub(crate) fn new<T>(
        (me, n): (usize, usize),
        (send, send_counts): (&[T], &'a [usize]),
        (recv, recv_counts): (&[T], &'a [usize]),
    ) -> Self {
        assert!(
            send_counts.len() == n && recv_counts.len() == n,
            "a count per rank"
        );
        let sum = |c: &[usize]| c.iter().sum::<usize>();
        assert_eq!(send.len(), sum(send_counts), "the agreed send length");
        assert_eq!(recv.len(), sum(recv_counts), "the agreed receive length");
        assert_eq!(
            send_counts[me], recv_counts[me],
            "rank {me}'s block to itself"
        );
        BlocksV {
            send_counts,
            recv_counts,
            send_at: kernels::offsets(send_counts),
            recv_at: kernels::offsets(recv_counts),
            lens: (send.len(), recv.len()),
        }
    }

    /// Assert that `send` and `recv` have the lengths these blocks were
    /// made for, so that copies at their offsets stay inside them.
    pub(crate) fn fits<T>(&self, send: &[T], recv: &[T]) {
        assert_eq!((send.len(), recv.len()), self.lens, "the blocks' buffers");
    }

    /// The counts this rank sends, and receives.
    pub(crate) fn counts(&self) -> (&'a [usize], &'a [usize]) {
        (self.send_counts, self.recv_counts)
    }

    /// Where each block starts in `send`, and in `recv`.
    pub(crate) fn offsets(&self) -> (&[usize], &[usize]) {
        (&self.send_at, &self.recv_at)
    }
}

/// What the ranks of an all-to-all-v published in its first round
/// ([`plan_all_to_all_v`]): the same on every rank but `bufs`' own view.
pub(crate) struct PlanV {
    /// The round the plan was published in (no other round may start
    /// before the call reads the plan's words: [`all_to_all_v`] runs right
    /// after it).
    b: usize,
    bufs: Buffers,
    /// The largest block any rank sends to a peer, in elements.
    pub(crate) most: usize,
    /// The largest receive buffer of any rank, in bytes: the call's size
    /// for [`Segment::direct`].
    pub(crate) bytes: usize,
}

/// The first round of an all-to-all-v on the segment: every rank publishes
/// its send buffer, its largest block for a peer, its receive buffer's
/// bytes and the offsets of its blocks in `send`, passes a barrier, and
/// reads every rank's.
pub(crate) fn plan_all_to_all_v<T>(
    seg: &mut Segment,
    send: &[T],
    blocks: &BlocksV<'_>,
    recv_bytes: usize,
    deadline: Instant,
) -> Result<PlanV, Stop> {
    let (me, n) = (seg.rank(), seg.size());
    assert_eq!(send.len(), blocks.lens.0, "the blocks' send buffer");
    let ((send_counts, _), (send_at, _)) = (blocks.counts(), blocks.offsets());
    let most = (0..n)
        .filter(|&q| q != me)
        .map(|q| send_counts[q])
        .max()
        .unwrap_or(0);
    let mut extra = vec![most as u64, recv_bytes as u64];
    extra.extend(send_at.iter().map(|&o| o as u64));
    let b = seg.next_round();
    let bufs = exchange_with(seg, b, send, false, &extra, deadline)?;
    let all = |i: usize| {
        (0..n)
            // SAFETY: every rank published `2 + n` extra words in round `b`, whose barrier we just passed.
            .map(|q| unsafe { extra_word(seg, b, q, i) } as usize)
            .max()
            .unwrap_or(0)
    };
    Ok(PlanV {
        b,
        most: all(0),
        bytes: all(1),
        bufs,
    })
}

/// [`super::shared::all_to_all_v`] in single copies, in the round of its
/// `plan`: this rank reads its block from every peer's `send` (at the
/// offset the peer published) into block `q` of `recv` (`recv_counts[q]`
/// elements; the counts agreed beforehand, so that rank `q`'s block for
/// this rank has that many).
pub(crate) fn all_to_all_v<T: Element>(
    seg: &mut Segment,
    plan: &PlanV,
    (send, recv): (&[T], &mut [T]),
    blocks: &BlocksV<'_>,
    deadline: Instant,
) -> Result<Direct, Stop> {
    let (me, n, b) = (seg.rank(), seg.size(), plan.b);
    blocks.fits(send, recv);
    let ((_, count), (so, ro)) = (blocks.counts(), blocks.offsets());
    // Only ranks with a block for this rank are read; the same choice on
    // every rank needs every rank's senders: those with any peer block.
    let senders = (0..n).filter(|&q| {
        // SAFETY: word 0 of the plan's extra words, published by every rank in round `b`.
        let most = unsafe { extra_word(seg, b, q, 0) };
        most > 0
    });
    if !plan.bufs.readable(seg, senders, plan.bytes) {
        return Ok(Direct::Slots);
    }
    let base = recv.as_mut_ptr();
    let stream = kernels::streams::<T>(recv.len());
    let _fence = kernels::FenceOnExit(stream);
    // SAFETY: `count[me]` elements (this rank's block to itself, as long as the one it sends itself: `BlocksV::new`) at `so[me]` of `send` and `ro[me]` of `recv`, inside both (`fits`: lengths the counts' totals), the second ours; `_fence` orders what it streams.
    unsafe { kernels::copy_to(send[so[me]..].as_ptr(), base.add(ro[me]), count[me], stream) };
    let refused = peers(me, n).try_for_each(|q| {
        // SAFETY: word `2 + me` of the plan's extra words: rank `q`'s offset of its block for this rank.
        let at = unsafe { extra_word(seg, b, q, 2 + me) } as usize;
        // SAFETY: block `q` of `recv` (inside it: offsets of counts totalling its length), ours; rank `q`'s block for this rank lies at `at` in its send buffer with the agreed `count[q]` elements.
        unsafe {
            plan.bufs
                .read(seg, q, at, base.add(ro[q]), count[q], stream)
        }
    });
    conclude(seg, b, refused.err(), deadline)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::mpi::segment::{self, SLOT, SingleCopy};
    use crate::mpi::shared;

    /// Two ranks of this process, each with its own mapping of one segment,
    /// reading each other directly from any size; rank `r` sees its peer's
    /// process as `pids[r]`.
    fn pair(pids: [libc::pid_t; 2]) -> Vec<Segment> {
        let name = segment::fresh_name();
        let segs = (0..2)
            .map(|r| {
                let mut s = Segment::map(&name, r == 0, 2, SLOT, r).expect("maps");
                let mut seen = vec![cma::pid(); 2];
                seen[1 - r] = pids[r];
                s.set_single_copy(SingleCopy {
                    pids: seen.into(),
                    from_bytes: 0,
                    below_bytes: usize::MAX,
                });
                s
            })
            .collect();
        segment::unlink(&name);
        segs
    }

    /// The collectives that read peers' buffers directly.
    const OPS: [&str; 5] = [
        "all-gather",
        "reduce-scatter",
        "broadcast",
        "all-to-all",
        "all-to-all-v",
    ];

    /// What rank `q` sends rank `p` in the two-rank all-to-all-v tests.
    const V_COUNTS: [[usize; 2]; 2] = [[1000, 3000], [2000, 5000]];

    /// Rank `r`'s send and receive counts in those tests.
    fn v_counts(r: usize) -> (Vec<usize>, Vec<usize>) {
        (
            V_COUNTS[r].to_vec(),
            (0..2).map(|q| V_COUNTS[q][r]).collect(),
        )
    }

    /// What rank `r` of 2 holds after `op` on the two-rank tests' inputs
    /// (rank `q`'s element `i` is `q * 10_000 + i`; blocks of 3000 and 5000,
    /// a broadcast of 4000 from rank 1, all-to-all blocks of 4000,
    /// all-to-all-v blocks of [`V_COUNTS`]).
    fn expected(op: &str, r: usize) -> Vec<f32> {
        let v = |q: usize, i: usize| (q * 10_000 + i) as f32;
        match op {
            "all-gather" => (0..3000)
                .map(|i| v(0, i))
                .chain((0..5000).map(|i| v(1, i)))
                .collect(),
            "reduce-scatter" => {
                let o = if r == 0 { 0 } else { 3000 };
                (0..[3000, 5000][r])
                    .map(|i| v(0, o + i) + v(1, o + i))
                    .collect()
            }
            "broadcast" => (0..4000).map(|i| v(1, i)).collect(),
            "all-to-all-v" => (0..2)
                .flat_map(|q| {
                    let at: usize = V_COUNTS[q][..r].iter().sum();
                    (0..V_COUNTS[q][r]).map(move |i| v(q, at + i))
                })
                .collect(),
            _ => (0..2)
                .flat_map(|q| (0..4000).map(move |i| v(q, r * 4000 + i)))
                .collect(),
        }
    }

    /// Two ranks' mappings of one segment with arenas of `arena` bytes;
    /// with `cma`, single copies on at every size, every peer looked for in
    /// process `cma`.
    fn arena_pair(arena: usize, cma: Option<libc::pid_t>) -> Vec<Segment> {
        let name = segment::fresh_name();
        let segs = (0..2)
            .map(|r| {
                let mut s =
                    Segment::map_with_arena(&name, r == 0, 2, SLOT, arena, r).expect("maps");
                if let Some(pid) = cma {
                    s.set_single_copy(SingleCopy {
                        pids: vec![pid; 2].into(),
                        from_bytes: 0,
                        below_bytes: usize::MAX,
                    });
                }
                s
            })
            .collect();
        segment::unlink(&name);
        segs
    }

    /// This rank's arena of `seg`, for a test thread that keeps `seg` (and
    /// so the mapping) until every buffer of the arena is dropped.
    fn arena_of(seg: &Segment) -> crate::mpi::arena::Arena {
        let base = std::ptr::NonNull::new(seg.arena(seg.rank())).unwrap();
        // SAFETY: this rank's arena in `seg`, 4 KiB aligned; the caller keeps `seg` past every buffer of it and writes it only from its thread outside collectives.
        unsafe { crate::mpi::arena::Arena::new(base, seg.arena_len()) }
    }

    /// The pid of a process that has ended (reading it is `ESRCH`).
    fn gone() -> libc::pid_t {
        let mut child = std::process::Command::new("true").spawn().expect("spawns");
        let pid = libc::pid_t::try_from(child.id()).expect("a pid");
        child.wait().expect("ends");
        pid
    }

    /// Rank 0 cannot read rank 1 (it looks for it in a process that has
    /// ended): in each collective both ranks see the refusal at the last
    /// barrier, run the call through the slots with the right result, and
    /// read directly no more; the next call is right too.
    #[test]
    fn a_refused_read_sends_the_call_through_the_slots_on_every_rank() {
        for op in OPS {
            let segs = pair([gone(), cma::pid()]);
            let handles: Vec<_> = segs
                .into_iter()
                .enumerate()
                .map(|(r, mut seg)| {
                    std::thread::spawn(move || {
                        let deadline = Instant::now() + Duration::from_secs(30);
                        let counts = [3000usize, 5000];
                        let v = |q: usize, i: usize| (q * 10_000 + i) as f32;
                        let out: Vec<f32> = match op {
                            "all-gather" => {
                                let send: Vec<f32> = (0..counts[r]).map(|i| v(r, i)).collect();
                                let mut recv = vec![0f32; 8000];
                                shared::all_gather(&mut seg, &send, &mut recv, &counts, deadline)
                                    .unwrap();
                                recv
                            }
                            "reduce-scatter" => {
                                let send: Vec<f32> = (0..8000).map(|i| v(r, i)).collect();
                                let mut recv = vec![0f32; counts[r]];
                                let sum = ReduceOp::Sum;
                                shared::reduce_scatter(
                                    &mut seg, &send, &mut recv, &counts, sum, deadline,
                                )
                                .unwrap();
                                recv
                            }
                            "broadcast" => {
                                // Rank 0 reads the root, rank 1, and fails.
                                let mut b: Vec<f32> = (0..4000).map(|i| v(r, i)).collect();
                                shared::broadcast(&mut seg, &mut b, 1, deadline, true, |_| {})
                                    .unwrap();
                                b
                            }
                            "all-to-all-v" => {
                                let (sc, rc) = v_counts(r);
                                let send: Vec<f32> =
                                    (0..sc.iter().sum()).map(|i| v(r, i)).collect();
                                let mut recv = vec![0f32; rc.iter().sum()];
                                shared::all_to_all_v(
                                    &mut seg,
                                    (&send, &sc),
                                    (&mut recv, &rc),
                                    deadline,
                                )
                                .unwrap();
                                recv
                            }
                            _ => {
                                let send: Vec<f32> = (0..8000).map(|i| v(r, i)).collect();
                                let mut recv = vec![0f32; 8000];
                                shared::all_to_all(&mut seg, &send, &mut recv, 4000, deadline)
                                    .unwrap();
                                recv
                            }
                        };
                        let after = seg.pids().is_some();
                        let mut again = vec![r as f64; 4000];
                        shared::broadcast(&mut seg, &mut again, 1, deadline, true, |_| {}).unwrap();
                        (out, after, again)
                    })
                })
                .collect();
            for (r, h) in handles.into_iter().enumerate() {
                let (out, after, again) = h.join().unwrap();
                let want = expected(op, r);
                assert_eq!(out, want, "{op} rank {r}");
                assert!(!after, "{op}: rank {r} reads directly no more");
                assert!(again.iter().all(|&x| x == 1.0), "{op} rank {r}");
            }
        }
    }

    /// Peers' shared buffers ([`crate::mpi::arena`]) are read through the
    /// mapping of their arenas, never with cross-memory attach: with every
    /// peer looked for in a process that has ended (so any such read is
    /// refused), every collective still reads directly (`Direct::Done`),
    /// with the right result, uneven blocks included.
    #[test]
    fn shared_buffers_are_read_through_the_arenas_mapping() {
        for op in OPS {
            let handles: Vec<_> = arena_pair(1 << 20, Some(gone()))
                .into_iter()
                .enumerate()
                .map(|(r, mut seg)| {
                    std::thread::spawn(move || {
                        let arena = arena_of(&seg);
                        let deadline = Instant::now() + Duration::from_secs(30);
                        let counts = [3000usize, 5000];
                        let v = |q: usize, i: usize| (q * 10_000 + i) as f32;
                        let room = |len: usize| arena.buffer::<f32>(len, r).unwrap();
                        let (done, out) = match op {
                            "all-gather" => {
                                let mut send = room(counts[r]);
                                send.iter_mut().enumerate().for_each(|(i, x)| *x = v(r, i));
                                let mut recv = room(8000);
                                let d = all_gather(&mut seg, &send, &mut recv, &counts, deadline);
                                (d, recv.to_vec())
                            }
                            "reduce-scatter" => {
                                let mut send = room(8000);
                                send.iter_mut().enumerate().for_each(|(i, x)| *x = v(r, i));
                                let mut recv = room(counts[r]);
                                let sum = ReduceOp::Sum;
                                let d = reduce_scatter(
                                    &mut seg, &send, &mut recv, &counts, sum, deadline,
                                );
                                (d, recv.to_vec())
                            }
                            "broadcast" => {
                                let mut b = room(4000);
                                b.iter_mut().enumerate().for_each(|(i, x)| *x = v(r, i));
                                (
                                    broadcast(&mut seg, &mut b, 1, deadline, true, |_| {}),
                                    b.to_vec(),
                                )
                            }
                            "all-to-all-v" => {
                                let (sc, rc) = v_counts(r);
                                let mut send = room(sc.iter().sum());
                                send.iter_mut().enumerate().for_each(|(i, x)| *x = v(r, i));
                                let mut recv = room(rc.iter().sum());
                                let blocks = BlocksV::new((r, 2), (&send, &sc), (&recv, &rc));
                                let bytes = size_of_val(&*recv);
                                let d =
                                    plan_all_to_all_v(&mut seg, &send, &blocks, bytes, deadline)
                                        .and_then(|plan| {
                                            all_to_all_v(
                                                &mut seg,
                                                &plan,
                                                (&send, &mut recv),
                                                &blocks,
                                                deadline,
                                            )
                                        });
                                (d, recv.to_vec())
                            }
                            _ => {
                                let mut send = room(8000);
                                send.iter_mut().enumerate().for_each(|(i, x)| *x = v(r, i));
                                let mut recv = room(8000);
                                let d = all_to_all(&mut seg, &send, &mut recv, 4000, deadline);
                                (d, recv.to_vec())
                            }
                        };
                        (done, out, seg.pids().is_some())
                    })
                })
                .collect();
            for (r, h) in handles.into_iter().enumerate() {
                let (done, out, still) = h.join().unwrap();
                assert_eq!(done, Ok(Direct::Done), "{op} rank {r}");
                assert!(still, "{op} rank {r}: single copies stay on");
                let want = expected(op, r);
                assert_eq!(out, want, "{op} rank {r}");
            }
        }
    }

    /// In a segment with arenas and no cross-memory attach at all, calls
    /// from 64 KiB still read shared buffers directly at any size; one
    /// rank's ordinary buffer sends every rank to the slots (`Slots`, the
    /// same on every rank), except in a broadcast, which reads the root's
    /// buffer only; the entry points of [`shared`] give the right results
    /// either way.
    #[test]
    fn without_cross_memory_attach_only_shared_buffers_are_read_directly() {
        // (the rank whose buffer is ordinary memory, if any; what every rank's direct call returns)
        let cases = [
            ("all-gather", None, Direct::Done),
            ("all-gather", Some(1), Direct::Slots),
            ("reduce-scatter", None, Direct::Done),
            ("reduce-scatter", Some(0), Direct::Slots),
            ("broadcast", Some(0), Direct::Done),
            ("broadcast", Some(1), Direct::Slots),
            ("all-to-all", None, Direct::Done),
            ("all-to-all", Some(0), Direct::Slots),
        ];
        for (op, plain, want) in cases {
            let handles: Vec<_> = arena_pair(4 << 20, None)
                .into_iter()
                .enumerate()
                .map(|(r, mut seg)| {
                    std::thread::spawn(move || {
                        assert!(
                            seg.pids().is_none() && seg.direct(64 << 10) && !seg.direct(60 << 10)
                        );
                        let arena = arena_of(&seg);
                        let deadline = Instant::now() + Duration::from_secs(30);
                        let v = |q: usize, i: usize| (q * 100_000 + i) as f32;
                        // 160 KiB of f32 in all, uneven blocks.
                        let counts = [15_000usize, 25_000];
                        let own = |len: usize, f: &dyn Fn(usize) -> f32| {
                            let mut b: Vec<f32> = (0..len).map(f).collect();
                            if plain == Some(r) {
                                (None, std::mem::take(&mut b))
                            } else {
                                let mut s = arena.buffer::<f32>(len, r).unwrap();
                                s.copy_from_slice(&b);
                                (Some(s), b)
                            }
                        };
                        let mut results = Vec::new();
                        for entry in [false, true] {
                            let (mut s1, mut p1) = match op {
                                "broadcast" => own(40_000, &|i| v(r, i)),
                                "all-gather" => own(counts[r], &|i| v(r, i)),
                                _ => own(40_000, &|i| v(r, i)),
                            };
                            let recv_len = match op {
                                "all-gather" | "all-to-all" => 40_000,
                                "reduce-scatter" => counts[r],
                                _ => 0,
                            };
                            let mut recv = vec![0f32; recv_len];
                            let buf: &mut [f32] = match &mut s1 {
                                Some(s) => s,
                                None => &mut p1,
                            };
                            let sum = ReduceOp::Sum;
                            if entry {
                                match op {
                                    "all-gather" => shared::all_gather(
                                        &mut seg, buf, &mut recv, &counts, deadline,
                                    ),
                                    "reduce-scatter" => shared::reduce_scatter(
                                        &mut seg, buf, &mut recv, &counts, sum, deadline,
                                    ),
                                    "all-to-all" => shared::all_to_all(
                                        &mut seg, buf, &mut recv, 20_000, deadline,
                                    ),
                                    _ => {
                                        shared::broadcast(&mut seg, buf, 1, deadline, true, |_| {})
                                    }
                                }
                                .unwrap();
                                results.push(if op == "broadcast" {
                                    buf.to_vec()
                                } else {
                                    recv
                                });
                            } else {
                                let d = match op {
                                    "all-gather" => {
                                        all_gather(&mut seg, buf, &mut recv, &counts, deadline)
                                    }
                                    "reduce-scatter" => reduce_scatter(
                                        &mut seg, buf, &mut recv, &counts, sum, deadline,
                                    ),
                                    "all-to-all" => {
                                        all_to_all(&mut seg, buf, &mut recv, 20_000, deadline)
                                    }
                                    _ => broadcast(&mut seg, buf, 1, deadline, true, |_| {}),
                                };
                                assert_eq!(d, Ok(want), "{op}, plain {plain:?}, rank {r}");
                            }
                        }
                        results.pop().unwrap()
                    })
                })
                .collect();
            let v = |q: usize, i: usize| (q * 100_000 + i) as f32;
            for (r, h) in handles.into_iter().enumerate() {
                let out = h.join().unwrap();
                let expect: Vec<f32> = match op {
                    "all-gather" => (0..15_000)
                        .map(|i| v(0, i))
                        .chain((0..25_000).map(|i| v(1, i)))
                        .collect(),
                    "reduce-scatter" => {
                        let o = [0, 15_000][r];
                        (0..[15_000, 25_000][r])
                            .map(|i| v(0, o + i) + v(1, o + i))
                            .collect()
                    }
                    "all-to-all" => (0..2)
                        .flat_map(|q| (0..20_000).map(move |i| v(q, r * 20_000 + i)))
                        .collect(),
                    _ => (0..40_000).map(|i| v(1, i)).collect(),
                };
                assert_eq!(out, expect, "{op}, plain {plain:?}, rank {r}");
            }
        }
    }

    /// An all-gather-v with an empty block (an empty shared buffer takes no
    /// arena room, so it is not a shared buffer) still reads the other
    /// blocks through the mapping, without cross-memory attach.
    #[test]
    fn an_empty_block_leaves_an_all_gather_on_the_mapping() {
        let handles: Vec<_> = arena_pair(1 << 20, None)
            .into_iter()
            .enumerate()
            .map(|(r, mut seg)| {
                std::thread::spawn(move || {
                    let arena = arena_of(&seg);
                    let counts = [0usize, 20_000];
                    let mut send = arena.buffer::<f32>(counts[r], r).unwrap();
                    send.iter_mut().enumerate().for_each(|(i, x)| *x = i as f32);
                    let mut recv = vec![0f32; 20_000];
                    let deadline = Instant::now() + Duration::from_secs(30);
                    let d = all_gather(&mut seg, &send, &mut recv, &counts, deadline);
                    (d, recv)
                })
            })
            .collect();
        for (r, h) in handles.into_iter().enumerate() {
            let (d, recv) = h.join().unwrap();
            assert_eq!(d, Ok(Direct::Done), "rank {r}");
            assert!(
                recv.iter().enumerate().all(|(i, &x)| x == i as f32),
                "rank {r}"
            );
        }
    }

    /// A peer that never publishes its buffer is named at the deadline by
    /// the first barrier, as on the slot path.
    #[test]
    fn a_peer_that_never_comes_is_named_at_the_deadline() {
        let mut segs = pair([cma::pid(), cma::pid()]);
        let mut a = segs.remove(0);
        let deadline = Instant::now() + Duration::from_millis(200);
        let mut recv = vec![0u8; 8];
        let out = all_gather(&mut a, &[1u8; 4], &mut recv, &[4, 4], deadline);
        assert!(Instant::now() >= deadline, "waited for the peer");
        assert_eq!(out, Err(Stop { missing: vec![1] }));
    }

    #[test]
    fn peers_are_read_from_the_next_rank_on() {
        assert_eq!(peers(1, 4).collect::<Vec<_>>(), vec![2, 3, 0]);
        assert_eq!(peers(0, 1).count(), 0);
        assert_eq!(at::<f64>(4096, 3), 4096 + 24);
    }
}
