//! Single-copy collectives for the ranks of one host: each rank reads its
//! peers' buffers straight into its own with cross-memory attach
//! ([`super::cma`]), where the slot path of [`super::shared`] copies
//! every byte twice (into the sender's slot, out of it). Used by the
//! functions of [`super::shared`] for calls of
//! [`super::segment::SingleCopy::from_bytes`] to below
//! [`super::segment::SingleCopy::below_bytes`] when every rank of the
//! segment could read its peers at creation.
//!
//! A call is one round of the segment:
//! 1. each rank writes the addresses of its buffers to the head of its slot
//!    of the round, and passes a barrier;
//! 2. each rank reads what it needs from its peers' buffers (a reduction
//!    reads its peers' blocks for it into private scratch memory, chunk by
//!    chunk, and reduces them in rank order with the thread transport's
//!    kernel, so the bits are those of a [`crate::LocalWorld`]);
//! 3. a last barrier: no rank returns (and lets its caller reuse a buffer)
//!    while a peer may still read it.
//!
//! A broadcast's root also writes part of each peer's buffer
//! (`process_vm_writev`), the one range that peer leaves to it.
//!
//! All-reduce keeps the slots: its slot path already copies only peers'
//! shares in and results out, and a direct version (each rank reducing its
//! share from its peers' buffers, then reading their results) measured
//! slower at every size, cross-memory attach copying at about half of
//! `memcpy`'s speed here (2 processes: 123 against 99 µs at 1 MiB, 3.3–4.4
//! against 1.8–2.1 ms at 16 MiB).
//!
//! A rank writes only its own buffers (and a broadcast's root the part of
//! each peer's that the peer leaves to it), and only ranges nobody else
//! reads or writes in that phase. A transfer that fails because the peer
//! is gone waits at the next barrier, which fails on every rank naming
//! it; any other failed transfer abandons the call ([`Segment::abandon`])
//! and returns the system's error in [`Stop::read`], and the peers stop
//! naming this rank.

use std::time::Instant;

use super::cma;
use super::segment::{Segment, Stop};
use crate::local::kernels;
use crate::{Element, ReduceOp};

/// The bytes a collective moves (its whole receive buffer, or a
/// reduce-scatter's send buffer, or a broadcast's buffer: the same on every
/// rank) from which the ranks of one host read their peers' buffers
/// directly when they can
/// ([`crate::MpiWorldBuilder::shared_memory_single_copy`]): all-gather(-v),
/// all-to-all, broadcast and reduce-scatter(-v) of at least this many
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

/// Publish `addr` (this rank's buffer for the call) at the head of this
/// rank's slot `b`, pass the barrier, and collect every rank's.
fn exchange(seg: &Segment, b: usize, addr: usize, deadline: Instant) -> Result<Vec<usize>, Stop> {
    let head = seg.slot(seg.rank(), b).cast::<u64>();
    // SAFETY: the head of this rank's slot of the round (4 KiB aligned, at least a page), written only by this rank before the barrier.
    unsafe { head.write(addr as u64) };
    seg.barrier(deadline)?;
    Ok((0..seg.size())
        .map(|q| {
            // SAFETY: rank `q` wrote its head before the barrier and writes it again only in a later round of this parity (see `Segment::next_round`).
            let a = unsafe { seg.slot(q, b).cast::<u64>().read() };
            a as usize
        })
        .collect())
}

/// Read `len` elements at `remote` in rank `q` (process `pid`) into
/// `local`; on failure, stop the call (see the module's documentation).
///
/// # Safety
/// `local` is valid for `len` writes and this rank's alone for the call.
unsafe fn fetch<T>(
    seg: &Segment,
    q: usize,
    pid: libc::pid_t,
    remote: usize,
    local: *mut T,
    len: usize,
    deadline: Instant,
) -> Result<(), Stop> {
    let bytes = len
        .checked_mul(size_of::<T>())
        .expect("a buffer's size fits usize");
    // SAFETY: forwarded from the caller.
    let read = unsafe { cma::read(pid, remote, local.cast(), bytes) };
    stopped(seg, q, read, deadline)
}

/// Write `len` elements from `local` to `remote` in rank `q` (process
/// `pid`); on failure, stop the call (see the module's documentation).
///
/// # Safety
/// `local` is valid for `len` reads; by the call's protocol nobody in rank
/// `q` touches those elements at `remote` until the next barrier.
unsafe fn put<T>(
    seg: &Segment,
    q: usize,
    pid: libc::pid_t,
    local: *const T,
    remote: usize,
    len: usize,
    deadline: Instant,
) -> Result<(), Stop> {
    let bytes = len
        .checked_mul(size_of::<T>())
        .expect("a buffer's size fits usize");
    // SAFETY: forwarded from the caller.
    let wrote = unsafe { cma::write(pid, remote, local.cast(), bytes) };
    stopped(seg, q, wrote, deadline)
}

/// What a transfer with rank `q` that ended in `moved` means for the call.
fn stopped(
    seg: &Segment,
    q: usize,
    moved: std::io::Result<()>,
    deadline: Instant,
) -> Result<(), Stop> {
    match moved {
        Ok(()) => Ok(()),
        Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {
            // The peer is gone: the next barrier fails on every rank and
            // names it (it can never arrive).
            seg.barrier(deadline)?;
            Err(Stop {
                missing: vec![q],
                read: Some((q, e.to_string())),
            })
        }
        Err(e) => {
            seg.abandon();
            Err(Stop {
                missing: vec![seg.rank()],
                read: Some((q, e.to_string())),
            })
        }
    }
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
/// buffer (this rank's at `own`) into `out`: peers' blocks are read chunk
/// by chunk into `scratch` (this rank's, [`Segment::take_scratch`]) and
/// reduced in rank order.
///
/// # Safety
/// `own` valid for `len` reads and `out` for `len` writes (they may be the
/// same range); no peer reads `out` during the call's phase.
#[allow(clippy::too_many_arguments)]
unsafe fn reduce_block<T: Element>(
    seg: &Segment,
    scratch: &mut [u64],
    addrs: &[usize],
    offset: usize,
    own: *const T,
    out: *mut T,
    len: usize,
    op: ReduceOp,
    stream: bool,
    deadline: Instant,
) -> Result<(), Stop> {
    let (me, n) = (seg.rank(), seg.size());
    let pids = seg.pids().expect("single copy is on");
    let room = size_of_val(scratch) / size_of::<T>().max(1) / (n - 1).max(1);
    assert!(room > 0 || n == 1, "scratch for single copies");
    let base = scratch.as_mut_ptr().cast::<T>();
    let mut off = 0;
    while off < len {
        let m = room.min(len - off);
        let mut ins = Vec::with_capacity(n);
        for q in 0..n {
            if q == me {
                ins.push(own.wrapping_add(off));
                continue;
            }
            let i = if q < me { q } else { q - 1 };
            let piece = base.wrapping_add(i * room);
            let from = at::<T>(addrs[q], offset + off);
            // SAFETY: piece `i` of `scratch` (borrowed mutably) holds `room >= m` elements.
            unsafe { fetch(seg, q, pids[q], from, piece, m, deadline)? };
            ins.push(piece.cast_const());
        }
        let to = out.wrapping_add(off);
        if stream {
            // SAFETY: inputs valid for `m` reads (scratch, `own`), `to` for `m` writes and, streamed, a reduce-scatter's `recv` (no input).
            unsafe { kernels::reduce_to(&ins, to, m, op, true) };
        } else {
            // SAFETY: as above; `to` may be `own`'s range (the kernel reads each tile before writing it).
            unsafe { kernels::reduce(&ins, &[to], m, op) };
        }
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
) -> Result<(), Stop> {
    let b = seg.next_round();
    let mut scratch = seg.take_scratch();
    let seg_ = &*seg;
    let mut run = |scratch: &mut [u64]| {
        let me = seg_.rank();
        let offsets = kernels::offsets(counts);
        let addrs = exchange(seg_, b, send.as_ptr() as usize, deadline)?;
        let stream = kernels::streams::<T>(recv.len());
        let _fence = kernels::FenceOnExit(stream);
        let (o, c) = (offsets[me], counts[me]);
        let (own, out) = (send[o..o + c].as_ptr(), recv[..c].as_mut_ptr());
        // SAFETY: `own` is `c` elements of `send`; `recv` (ours, no peer reads it) holds `c`.
        unsafe { reduce_block(seg_, scratch, &addrs, o, own, out, c, op, stream, deadline)? };
        seg_.barrier(deadline)
    };
    let out = run(&mut scratch);
    seg.put_scratch(scratch);
    out
}

/// [`super::shared::all_gather`] in single copies: this rank copies its
/// own piece and reads every peer's `send` into its block of `recv`.
pub(crate) fn all_gather<T: Element>(
    seg: &mut Segment,
    send: &[T],
    recv: &mut [T],
    counts: &[usize],
    deadline: Instant,
) -> Result<(), Stop> {
    let b = seg.next_round();
    let seg = &*seg;
    let (me, n) = (seg.rank(), seg.size());
    let pids = seg.pids().expect("single copy is on");
    let offsets = kernels::offsets(counts);
    let addrs = exchange(seg, b, send.as_ptr() as usize, deadline)?;
    let o = offsets[me];
    assert_eq!(send.len(), counts[me], "the agreed count of rank {me}");
    // SAFETY: `send` and block `me` of `recv` (ours) hold `counts[me]` elements; `kernels::copy` fences what it streams.
    unsafe { kernels::copy(send.as_ptr(), recv[o..].as_mut_ptr(), counts[me]) };
    for q in peers(me, n) {
        let into = recv[offsets[q]..offsets[q] + counts[q]].as_mut_ptr();
        // SAFETY: block `q` of `recv`, ours.
        unsafe { fetch(seg, q, pids[q], addrs[q], into, counts[q], deadline)? };
    }
    seg.barrier(deadline)
}

/// [`super::shared::broadcast`] in single copies. The buffer is cut into
/// `n` parts ([`kernels::partition`]); the root writes part `q` straight
/// into each rank `q`'s buffer while every rank but the root reads the
/// other parts from the root's, so the root's core copies too (on 2 ranks
/// each copies half).
pub(crate) fn broadcast<T: Element>(
    seg: &mut Segment,
    buf: &mut [T],
    root: usize,
    deadline: Instant,
) -> Result<(), Stop> {
    let b = seg.next_round();
    let seg = &*seg;
    let (me, n) = (seg.rank(), seg.size());
    let pids = seg.pids().expect("single copy is on");
    let len = buf.len();
    let part = |q: usize| kernels::partition::<T>(len, q, n);
    let addrs = exchange(seg, b, buf.as_ptr() as usize, deadline)?;
    if me == root {
        for q in peers(me, n) {
            let (lo, hi) = part(q);
            let from = buf[lo..hi].as_ptr();
            // SAFETY: our part `q` is read; rank `q` leaves its part `q` to us until the barrier.
            unsafe {
                put(
                    seg,
                    q,
                    pids[q],
                    from,
                    at::<T>(addrs[q], lo),
                    hi - lo,
                    deadline,
                )?
            };
        }
    } else {
        for p in (0..n).filter(|&p| p != me) {
            let (lo, hi) = part(p);
            let into = buf[lo..hi].as_mut_ptr();
            // SAFETY: part `p` of `buf` is ours (the root writes only part `me`); the root's is only read.
            unsafe {
                fetch(
                    seg,
                    root,
                    pids[root],
                    at::<T>(addrs[root], lo),
                    into,
                    hi - lo,
                    deadline,
                )?
            };
        }
    }
    seg.barrier(deadline)
}

/// [`super::shared::all_to_all`] in single copies: this rank reads block
/// `me` of every peer's `send` into block `q` of `recv`.
pub(crate) fn all_to_all<T: Element>(
    seg: &mut Segment,
    send: &[T],
    recv: &mut [T],
    block: usize,
    deadline: Instant,
) -> Result<(), Stop> {
    let b = seg.next_round();
    let seg = &*seg;
    let (me, n) = (seg.rank(), seg.size());
    let pids = seg.pids().expect("single copy is on");
    let addrs = exchange(seg, b, send.as_ptr() as usize, deadline)?;
    let mine = me * block;
    let (from, to) = (&send[mine..mine + block], &mut recv[mine..mine + block]);
    // SAFETY: two ranges of `block` elements, `to` ours; `kernels::copy` fences what it streams.
    unsafe { kernels::copy(from.as_ptr(), to.as_mut_ptr(), block) };
    for q in peers(me, n) {
        let into = recv[q * block..(q + 1) * block].as_mut_ptr();
        // SAFETY: block `q` of `recv`, ours.
        unsafe {
            fetch(
                seg,
                q,
                pids[q],
                at::<T>(addrs[q], mine),
                into,
                block,
                deadline,
            )?
        };
    }
    seg.barrier(deadline)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::mpi::segment::{self, SLOT, SingleCopy};

    /// Two ranks of this process, each with its own mapping of one segment,
    /// reading each other directly from any size.
    fn pair() -> (Segment, Segment) {
        let name = segment::fresh_name();
        let mut segs: Vec<Segment> = (0..2)
            .map(|r| {
                let mut s = Segment::map(&name, r == 0, 2, SLOT, r).expect("maps");
                s.set_single_copy(SingleCopy {
                    pids: vec![cma::pid(); 2].into(),
                    from_bytes: 0,
                    below_bytes: usize::MAX,
                });
                s
            })
            .collect();
        segment::unlink(&name);
        let b = segs.pop().expect("two");
        (segs.pop().expect("two"), b)
    }

    /// A read refused while the peer lives (here: an unmapped address)
    /// fails this rank's call with the system's error naming the peer, and
    /// fails the peer's next barrier at once, naming this rank.
    #[test]
    fn a_refused_read_stops_both_ranks_at_once() {
        let (a, b) = pair();
        let long = Instant::now() + Duration::from_secs(60);
        let mut x = [0f32; 4];
        // SAFETY: `x` is ours, 4 elements.
        let stop = unsafe { fetch(&a, 1, cma::pid(), 8, x.as_mut_ptr(), 4, long) }.unwrap_err();
        assert_eq!(stop.missing, vec![0]);
        let (peer, why) = stop.read.expect("a failed read");
        assert_eq!(peer, 1);
        assert!(why.contains("Bad address"), "{why}");
        let start = Instant::now();
        let peer_stop = b.barrier(long).unwrap_err();
        assert!(start.elapsed() < Duration::from_secs(10), "at once");
        assert_eq!(peer_stop, Stop::missing(vec![0]));
    }

    /// A peer that is gone (its process ended: `ESRCH`) is named by the
    /// barrier that follows, at the deadline, as on the slot path.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_peer_gone_is_named_at_the_deadline() {
        let (a, _b) = pair();
        let mut child = std::process::Command::new("true").spawn().expect("spawns");
        let gone = libc::pid_t::try_from(child.id()).expect("a pid");
        child.wait().expect("ends");
        let deadline = Instant::now() + Duration::from_millis(200);
        let mut x = [0u8; 4];
        // SAFETY: `x` is ours, 4 elements.
        let stop = unsafe { fetch(&a, 1, gone, 4096, x.as_mut_ptr(), 4, deadline) }.unwrap_err();
        assert!(Instant::now() >= deadline, "waited for the peer");
        assert_eq!(stop, Stop::missing(vec![1]));
    }

    #[test]
    fn peers_are_read_from_the_next_rank_on() {
        assert_eq!(peers(1, 4).collect::<Vec<_>>(), vec![2, 3, 0]);
        assert_eq!(peers(0, 1).count(), 0);
        assert_eq!(at::<f64>(4096, 3), 4096 + 24);
    }
}
