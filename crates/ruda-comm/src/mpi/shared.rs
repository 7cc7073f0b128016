//! Collectives through a shared-memory [`Segment`], for the ranks of one
//! host (a whole communicator, or one host's part of a hierarchical
//! all-reduce): ruda's own kernels instead of MPI's point-to-point path.
//!
//! Data moves in rounds of at most one slot per rank. In each round a rank
//! copies its part into its own slot, passes a barrier, then reads the
//! slots of its peers: a reduction reduces its share (`1/n` of the round,
//! or its own block) from every slot in rank order with the thread
//! transport's kernel, so the result has the same bits as a
//! [`crate::LocalWorld`] run. An all-reduce keeps its own share in its
//! buffer, writes that share's result to its buffer and its slot, and
//! passes a second barrier before copying its peers' results out.
//!
//! Calls of the segment's single-copy window ([`Segment::single_copy`]),
//! and in a segment with arenas every call from 64 KiB
//! ([`Segment::direct_arena`]: peers' shared buffers are read through
//! the mapping), try to skip the slots: [`super::direct`].
//!
//! Every barrier has the call's deadline: a rank that never comes (it
//! died, or is stuck elsewhere) fails the barrier on every rank, which
//! return a [`Stop`] naming it. The caller's buffers are only ever written
//! by their own rank (peers at most read them, on the direct path), so
//! nothing writes them after the call returns, except in an all-reduce,
//! or a broadcast of 256 KiB or more, of shared buffers
//! ([`super::arena`]): peers write those in place, and a rank whose last
//! barrier fails there ends the job rather than return (not a broadcast's
//! root, whose buffer is only read: [`all_reduce_in_arenas`],
//! [`direct::broadcast`]).

use std::time::Instant;

use super::direct::{self, Direct};
use super::segment::{Segment, Stop};
use crate::local::kernels;
use crate::{Element, ReduceOp};

/// Elements of `T` per block when a slot of `slot` bytes holds `parts`
/// blocks: whole cache lines where they fit, at least one element.
fn block_elems<T>(slot: usize, parts: usize) -> usize {
    let grain = (64 / size_of::<T>().max(1)).max(1);
    let per = slot / size_of::<T>().max(1) / parts.max(1);
    (per / grain * grain).max(1)
}

/// Copy `len` elements of `T` from `src` to `dst` with cached stores, in
/// the local transport's pieces ([`kernels::copy_to`] says why not one
/// `memcpy`).
///
/// # Safety
/// `src` valid for `len` reads, `dst` for `len` writes, not overlapping,
/// and no one else writing either range meanwhile.
unsafe fn copy<T: Element>(src: *const T, dst: *mut T, len: usize) {
    // SAFETY: forwarded from the caller; no streaming, so no fence owed.
    unsafe { kernels::copy_to(src, dst, len, false) }
}

/// All-reduce `buf` in place over every rank of the segment.
///
/// In a segment with arenas, from 64 KiB ([`Segment::direct_arena`]), the
/// ranks first see whether every one's `buf` is a shared buffer
/// ([`super::arena`]) and `writable` (its rank lets peers write it): then
/// [`all_reduce_in_arenas`] runs instead of the rounds below, and
/// `stranded` is called if its last barrier fails.
///
/// Each round of `m` elements is cut into `n` shares ([`kernels::partition`]);
/// rank `q` reduces share `q`. A rank copies only its peers' shares into
/// its slot (its own share never leaves its buffer), reduces its share from
/// its own buffer and its peers' slots in rank order, writing the result
/// to its buffer and to its slot's own share, and after the second barrier
/// copies its peers' results out of their slots. Per round a rank moves
/// about `4m` elements through memory at `n = 2`, where copying the whole
/// round in and out moved `6m`.
pub(crate) fn all_reduce<T: Element>(
    seg: &mut Segment,
    buf: &mut [T],
    op: ReduceOp,
    deadline: Instant,
    writable: bool,
    stranded: impl FnOnce(&Stop),
) -> Result<(), Stop> {
    if seg.direct_arena(size_of_val(buf))
        && all_reduce_in_arenas(seg, buf, op, deadline, writable, stranded)?
    {
        return Ok(());
    }
    let (me, n) = (seg.rank(), seg.size());
    let chunk = block_elems::<T>(seg.slot_len(), 1);
    let mut off = 0;
    while off < buf.len() {
        let m = chunk.min(buf.len() - off);
        let share = |q: usize| kernels::partition::<T>(m, q, n);
        let b = seg.next_round();
        let slot = |q: usize| seg.slot(q, b).cast::<T>();
        let round = buf[off..off + m].as_mut_ptr();
        for q in (0..n).filter(|&q| q != me) {
            let (lo, hi) = share(q);
            // Slots are 4 KiB aligned and hold `chunk >= hi` elements;
            // nobody else touches ours until the barrier (`next_round`).
            // SAFETY: `round[lo..hi]` is in `buf`, ours; the slot is valid and ours (above).
            unsafe { copy(round.add(lo).cast_const(), slot(me).add(lo), hi - lo) };
        }
        seg.barrier(deadline)?;
        let (lo, hi) = share(me);
        let ins: Vec<*const T> = (0..n)
            .map(|q| {
                if q == me {
                    round.wrapping_add(lo).cast_const()
                } else {
                    slot(q).wrapping_add(lo).cast_const()
                }
            })
            .collect();
        // Alone, no peer reads the slot.
        let outs = [round.wrapping_add(lo), slot(me).wrapping_add(lo)];
        let outs = if n > 1 { &outs[..] } else { &outs[..1] };
        // Between the barriers peers read only their own shares of our
        // slot and write only their own slots; the kernel reads each tile
        // of every input before it writes it (our buffer is both).
        // SAFETY: share `lo..hi` of our round and of mapped slots (`chunk >= hi`); unaliased above.
        unsafe { kernels::reduce(&ins, outs, hi - lo, op) };
        seg.barrier(deadline)?;
        for q in (0..n).filter(|&q| q != me) {
            let (lo, hi) = share(q);
            // Rank `q` wrote its share's result to its slot before the
            // second barrier. It writes this slot buffer again in the round
            // after next (the same parity), which it starts only after
            // passing the next round's barriers, which this rank reaches
            // only after this copy.
            // SAFETY: valid: share `lo..hi` of `q`'s slot and of our round; unaliased: `q` no longer writes it, `round` is ours.
            unsafe { copy(slot(q).add(lo).cast_const(), round.add(lo), hi - lo) };
        }
        off += m;
    }
    Ok(())
}

/// All-reduce `buf` in place on every rank's memory, when every rank's
/// `buf` is a shared buffer: `Ok(false)` when some rank's is not (or it
/// refuses peers' writes, `!writable`), and the caller runs the call
/// through the slots.
///
/// One round of the segment: each rank publishes its buffer's offset in
/// its arena (plus one; 0: not in the arena) at the head of its slot and
/// passes a barrier; every rank reads the same offsets and makes the same
/// choice. If all are in bounds, rank `q` reduces share `q`
/// ([`kernels::partition`]) of every rank's buffer in rank order with the
/// thread transport's kernel (the bits of a [`crate::LocalWorld`] run) and
/// writes the result into every buffer, then passes a second barrier, after
/// which nobody touches a peer's buffer. Per element a rank reads `n`
/// shares and writes `n`, where the slots copy peers' shares in and the
/// results out (about `4m` per round of `m` at `n = 2` against `2m` here).
///
/// If the second barrier fails (a peer died or stalled midway), a stalled
/// peer may still write this rank's buffer after the call returns: the
/// rank calls `stranded`, which ends the job; if it returns (MPI already
/// finalised), the call's `Stop`.
fn all_reduce_in_arenas<T: Element>(
    seg: &mut Segment,
    buf: &mut [T],
    op: ReduceOp,
    deadline: Instant,
    writable: bool,
    stranded: impl FnOnce(&Stop),
) -> Result<bool, Stop> {
    let (me, n) = (seg.rank(), seg.size());
    let bytes = size_of_val(buf);
    let mine = if writable {
        seg.arena_offset(buf.as_ptr().cast(), bytes)
    } else {
        None
    };
    let b = seg.next_round();
    let head = seg.slot(me, b).cast::<u64>();
    // SAFETY: word 0 of this rank's slot of the round (4 KiB aligned), only this rank's until the barrier.
    unsafe { head.write(mine.map_or(0, |o| o as u64 + 1)) };
    seg.barrier(deadline)?;
    let arena = seg.arena_len();
    let offsets: Option<Vec<usize>> = (0..n)
        .map(|q| {
            // SAFETY: rank `q` wrote word 0 before the barrier and writes it again only in a later round of this parity (`Segment::next_round`).
            let word = unsafe { seg.slot(q, b).cast::<u64>().read() };
            let off = usize::try_from(word.checked_sub(1)?).ok()?;
            (off.checked_add(bytes)? <= arena).then_some(off)
        })
        .collect();
    let Some(offsets) = offsets else {
        return Ok(false);
    };
    let own = buf.as_mut_ptr();
    let bufs: Vec<*mut T> = (0..n)
        .map(|q| {
            if q == me {
                own
            } else {
                // In bounds: `offsets[q] + bytes <= arena` (above).
                seg.arena(q).wrapping_add(offsets[q]).cast::<T>()
            }
        })
        .collect();
    let (lo, hi) = kernels::partition::<T>(buf.len(), me, n);
    let ins: Vec<*const T> = bufs
        .iter()
        .map(|p| p.wrapping_add(lo).cast_const())
        .collect();
    let outs: Vec<*mut T> = bufs.iter().map(|p| p.wrapping_add(lo)).collect();
    // Between the barriers rank `q` alone touches share `q` of every buffer (shares are whole lines), and every buffer is its rank's `&mut` for the call; the kernel reads each tile of every input before it writes it.
    // SAFETY: `lo..hi` of `buf.len()` elements of every rank's buffer, mapped here and aligned (offsets are whole lines of 4 KiB aligned arenas); unaliased as above.
    unsafe { kernels::reduce(&ins, &outs, hi - lo, op) };
    #[cfg(test)]
    {
        seg.in_place += 1;
    }
    if let Err(stop) = seg.barrier(deadline) {
        stranded(&stop);
        return Err(stop);
    }
    Ok(true)
}

/// Reduce rank `q`'s block `counts[q]` of every rank's `send` (blocks in
/// rank order) into `recv` (`counts[me]` elements).
pub(crate) fn reduce_scatter<T: Element>(
    seg: &mut Segment,
    send: &[T],
    recv: &mut [T],
    counts: &[usize],
    op: ReduceOp,
    deadline: Instant,
) -> Result<(), Stop> {
    if seg.direct(size_of_val(send))
        && direct::reduce_scatter(seg, send, recv, counts, op, deadline)? == Direct::Done
    {
        return Ok(());
    }
    let (me, n) = (seg.rank(), seg.size());
    let k = block_elems::<T>(seg.slot_len(), n);
    let offsets = kernels::offsets(counts);
    let longest = counts.iter().copied().max().unwrap_or(0);
    let stream = kernels::streams::<T>(recv.len());
    let _fence = kernels::FenceOnExit(stream);
    let mut off = 0;
    while off < longest {
        let b = seg.next_round();
        let slot = |q: usize| seg.slot(q, b).cast::<T>();
        for (q, (&o, &c)) in offsets.iter().zip(counts).enumerate() {
            let m = k.min(c.saturating_sub(off));
            if m == 0 {
                continue;
            }
            // Block `q` of our slot holds `k >= m` elements (`block_elems`);
            // the agreed `counts` total `send`'s length.
            // SAFETY: valid: both ranges in bounds (above); unaliased: our slot is ours alone until the barrier, `send` the caller's.
            unsafe { copy(send[o + off..].as_ptr(), slot(me).add(q * k), m) };
        }
        seg.barrier(deadline)?;
        let m = k.min(counts[me].saturating_sub(off));
        if m == 0 {
            off += k;
            continue;
        }
        let ins: Vec<*const T> = (0..n)
            .map(|q| slot(q).wrapping_add(me * k).cast_const())
            .collect();
        // Block `me` of every slot is read by this rank only, until the
        // next round's barrier; `_fence` orders streamed stores.
        // SAFETY: valid: `m` elements of each slot's block and of `recv[off..]`; unaliased: `recv` is the caller's, no slot.
        unsafe { kernels::reduce_to(&ins, recv[off..].as_mut_ptr(), m, op, stream) };
        off += k;
    }
    Ok(())
}

/// Gather every rank's `send` (`counts[q]` elements from rank `q`) into
/// `recv`, in rank order.
pub(crate) fn all_gather<T: Element>(
    seg: &mut Segment,
    send: &[T],
    recv: &mut [T],
    counts: &[usize],
    deadline: Instant,
) -> Result<(), Stop> {
    if seg.direct(size_of_val(recv))
        && direct::all_gather(seg, send, recv, counts, deadline)? == Direct::Done
    {
        return Ok(());
    }
    let me = seg.rank();
    let chunk = block_elems::<T>(seg.slot_len(), 1);
    let offsets = kernels::offsets(counts);
    let longest = counts.iter().copied().max().unwrap_or(0);
    let stream = kernels::streams::<T>(recv.len());
    let _fence = kernels::FenceOnExit(stream);
    let mut off = 0;
    while off < longest {
        let b = seg.next_round();
        let slot = |q: usize| seg.slot(q, b).cast::<T>();
        let m = chunk.min(send.len().saturating_sub(off));
        if m > 0 {
            // SAFETY: valid: `m` elements within `send` and our slot; unaliased: our slot is ours alone until the barrier.
            unsafe { copy(send[off..].as_ptr(), slot(me), m) };
        }
        seg.barrier(deadline)?;
        for (q, (&o, &c)) in offsets.iter().zip(counts).enumerate() {
            let m = chunk.min(c.saturating_sub(off));
            if m == 0 {
                continue;
            }
            // Rank `q` wrote `m` elements to its slot before the barrier and
            // writes it again only after the next round's barrier; `_fence`
            // orders streamed stores.
            // SAFETY: valid: `m` elements of `q`'s slot and of `recv[o + off..]`; unaliased: `q` no longer writes its slot, `recv` is ours.
            unsafe {
                kernels::copy_to(
                    slot(q).cast_const(),
                    recv[o + off..].as_mut_ptr(),
                    m,
                    stream,
                )
            };
        }
        off += chunk;
    }
    Ok(())
}

/// Copy `root`'s `buf` to every rank's. On shared buffers from 256 KiB,
/// peers may write this rank's `buf` ([`direct::broadcast`]; not where a
/// non-root rank is `!writable`), and a non-root rank calls `stranded` if
/// the call's last barrier fails.
pub(crate) fn broadcast<T: Element>(
    seg: &mut Segment,
    buf: &mut [T],
    root: usize,
    deadline: Instant,
    writable: bool,
    stranded: impl FnOnce(&Stop),
) -> Result<(), Stop> {
    if seg.direct(size_of_val(buf))
        && direct::broadcast(seg, buf, root, deadline, writable, stranded)? == Direct::Done
    {
        return Ok(());
    }
    let me = seg.rank();
    let chunk = block_elems::<T>(seg.slot_len(), 1);
    let stream = me != root && kernels::streams::<T>(buf.len());
    let _fence = kernels::FenceOnExit(stream);
    let mut off = 0;
    while off < buf.len() {
        let m = chunk.min(buf.len() - off);
        let b = seg.next_round();
        let slot = seg.slot(root, b).cast::<T>();
        if me == root {
            // SAFETY: the root's own slot, only its until the barrier.
            unsafe { copy(buf[off..].as_ptr(), slot, m) };
        }
        seg.barrier(deadline)?;
        if me != root {
            // The root wrote its slot before the barrier and writes it
            // again only after the next round's barrier; `_fence` orders
            // streamed stores.
            // SAFETY: valid: `m` elements of the root's slot and of `buf[off..]`; unaliased: the root no longer writes it, `buf` is ours.
            unsafe { kernels::copy_to(slot.cast_const(), buf[off..].as_mut_ptr(), m, stream) };
        }
        off += m;
    }
    Ok(())
}

/// Send block `q` of `send` to rank `q` and receive rank `q`'s block for
/// this rank into block `q` of `recv` (blocks of `block` elements).
pub(crate) fn all_to_all<T: Element>(
    seg: &mut Segment,
    send: &[T],
    recv: &mut [T],
    block: usize,
    deadline: Instant,
) -> Result<(), Stop> {
    if seg.direct(size_of_val(recv))
        && direct::all_to_all(seg, send, recv, block, deadline)? == Direct::Done
    {
        return Ok(());
    }
    let n = seg.size();
    let counts = vec![block; n];
    let blocks = direct::BlocksV::new((seg.rank(), n), (send, &counts), (&*recv, &counts));
    blocks_through_slots(seg, (send, recv), &blocks, block, deadline)
}

/// Send block `q` of `send` (`send_counts[q]` elements, blocks in rank
/// order) to rank `q`, and receive rank `q`'s block for this rank into
/// block `q` of `recv` (`recv_counts[q]` elements). The counts agreed
/// beforehand: `send_counts[q]` here is `recv_counts[me]` on rank `q`.
///
/// A first round publishes every rank's send buffer, block offsets, largest
/// block for a peer and receive size ([`direct::plan_all_to_all_v`]). A
/// call whose largest receive buffer is inside the cross-memory window, or
/// whose senders' buffers are all shared buffers, then reads each block
/// straight from its sender ([`direct::all_to_all_v`]). Otherwise the
/// blocks go through the slots: each rank's slot is cut into a part per
/// destination, and each round carries the next part of every block, in as
/// many rounds as the largest block needs (the same number on every rank,
/// from the plan).
pub(crate) fn all_to_all_v<T: Element>(
    seg: &mut Segment,
    (send, send_counts): (&[T], &[usize]),
    (recv, recv_counts): (&mut [T], &[usize]),
    deadline: Instant,
) -> Result<(), Stop> {
    let (me, n) = (seg.rank(), seg.size());
    let blocks = direct::BlocksV::new((me, n), (send, send_counts), (&*recv, recv_counts));
    let plan = direct::plan_all_to_all_v(seg, send, &blocks, size_of_val(recv), deadline)?;
    if seg.direct(plan.bytes)
        && direct::all_to_all_v(seg, &plan, (send, &mut *recv), &blocks, deadline)? == Direct::Done
    {
        return Ok(());
    }
    blocks_through_slots(seg, (send, recv), &blocks, plan.most, deadline)
}

/// The slot path of an all-to-all(-v) with `blocks`: this rank copies its
/// block to itself, then in round `k` copies part `k` of its block for
/// each peer `p` into part `p` of its slot, passes the barrier, and copies
/// part `k` of each peer's block for it out of part `me` of that peer's
/// slot, in as many rounds as `most` (the largest block any rank sends a
/// peer: the same on every rank) needs.
fn blocks_through_slots<T: Element>(
    seg: &mut Segment,
    (send, recv): (&[T], &mut [T]),
    blocks: &direct::BlocksV<'_>,
    most: usize,
    deadline: Instant,
) -> Result<(), Stop> {
    let (me, n) = (seg.rank(), seg.size());
    blocks.fits(send, recv);
    let ((send_counts, recv_counts), (so, ro)) = (blocks.counts(), blocks.offsets());
    let part = block_elems::<T>(seg.slot_len(), n);
    let stream = kernels::streams::<T>(recv.len());
    let _fence = kernels::FenceOnExit(stream);
    let base = recv.as_mut_ptr();
    // SAFETY: `send_counts[me]` elements (as many as `recv_counts[me]`: `BlocksV::new`) at `so[me]` of `send` and `ro[me]` of `recv`, inside both (`fits`: lengths the counts' totals), the second ours; `_fence` orders what it streams.
    unsafe {
        kernels::copy_to(
            send[so[me]..].as_ptr(),
            base.add(ro[me]),
            send_counts[me],
            stream,
        )
    };
    // The `k`-th part of a block of `len`: its start and length.
    let piece = |k: usize, len: usize| {
        let lo = (k * part).min(len);
        (lo, (len - lo).min(part))
    };
    for k in 0..most.div_ceil(part) {
        let b = seg.next_round();
        let slot = |q: usize| seg.slot(q, b).cast::<T>();
        for p in (0..n).filter(|&p| p != me) {
            let (lo, m) = piece(k, send_counts[p]);
            // SAFETY: valid: part `p` of our slot holds `part >= m` elements (`n` parts fit the slot), `send[so[p] + lo..][..m]` lies in block `p` of `send`; unaliased: our slot is ours until the barrier.
            unsafe { copy(send[so[p] + lo..].as_ptr(), slot(me).add(p * part), m) };
        }
        seg.barrier(deadline)?;
        for q in (0..n).filter(|&q| q != me) {
            let (lo, m) = piece(k, recv_counts[q]);
            // Rank `q` wrote part `k` of its block for us (`recv_counts[q]`
            // elements, agreed) before the barrier and writes this slot
            // again only after the next round's barrier; `_fence` orders
            // streamed stores.
            // SAFETY: valid: `m` elements of part `me` of `q`'s slot and of block `q` of `recv` (inside it: offsets of counts totalling its length); unaliased: `q` no longer writes it, `recv` is ours.
            unsafe {
                kernels::copy_to(
                    slot(q).add(me * part).cast_const(),
                    base.add(ro[q] + lo),
                    m,
                    stream,
                )
            };
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::mpi::arena::Arena;
    use crate::mpi::segment::{self, Segment, SingleCopy};

    /// How the tests' segments move data: through the slots alone; single
    /// copies for every call but all-reduce's; single copies from 4 to 64
    /// KiB (other calls through the slots, interleaved).
    const MODES: [Option<(usize, usize)>; 3] = [None, Some((0, usize::MAX)), Some((4096, 1 << 16))];

    /// `n` ranks, each a thread with its own mapping of one segment with
    /// one-page slots (many rounds from small buffers), running `f(rank,
    /// segment)`; with `single_copy`, calls from the first to below the
    /// second many bytes read their peers' buffers directly (every rank is this process); the
    /// results in rank order.
    fn ranks<R: Send + 'static>(
        n: usize,
        single_copy: Option<(usize, usize)>,
        f: impl Fn(usize, &mut Segment) -> R + Send + Sync + 'static,
    ) -> Vec<R> {
        let name = segment::fresh_name();
        let slot = segment::slot_bytes(4096, n);
        let mut segs: Vec<Segment> = (0..n)
            .map(|r| {
                let mut seg = Segment::map(&name, r == 0, n, slot, r).expect("maps");
                if let Some((from_bytes, below_bytes)) = single_copy {
                    seg.set_single_copy(SingleCopy {
                        pids: vec![crate::mpi::cma::pid(); n].into(),
                        from_bytes,
                        below_bytes,
                    });
                }
                seg
            })
            .collect();
        segment::unlink(&name);
        let f = std::sync::Arc::new(f);
        let handles: Vec<_> = segs
            .drain(..)
            .enumerate()
            .map(|(r, mut s)| {
                let f = f.clone();
                std::thread::spawn(move || {
                    let out = f(r, &mut s);
                    // A direct call that went wrong could fall back to the
                    // slots and still give the right result: single copies
                    // must still be on.
                    assert_eq!(
                        s.pids().is_some(),
                        single_copy.is_some(),
                        "rank {r}: single copies kept"
                    );
                    out
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    }

    /// Slot rounds and direct calls interleaved on one segment, with odd
    /// and even numbers of rounds, over several calls of every kind: the
    /// slot heads' parity and the refusal flags hold across them.
    #[test]
    fn slot_rounds_and_direct_calls_interleave_on_one_segment() {
        for n in [2, 3] {
            let out = ranks(n, Some((2048, usize::MAX)), move |r, seg| {
                let mut sums = Vec::new();
                for call in 0..6usize {
                    // 1, 2 or 3 slot rounds of one page (1024 f32), then
                    // direct calls of 2 KiB and more.
                    let len = 700 + call * 600;
                    let mut v: Vec<f32> = (0..len).map(|i| value(r, i + call) as f32).collect();
                    all_reduce(seg, &mut v, ReduceOp::Sum, deadline(), true, |_| {}).unwrap();
                    sums.push(v);
                    let counts: Vec<usize> = (0..n).map(|q| 600 + 13 * q + call).collect();
                    let send: Vec<f32> = (0..counts[r])
                        .map(|i| (r * 1000 + i + call) as f32)
                        .collect();
                    let mut all = vec![0f32; counts.iter().sum()];
                    all_gather(seg, &send, &mut all, &counts, deadline()).unwrap();
                    let offsets = kernels::offsets(&counts);
                    for q in 0..n {
                        for i in 0..counts[q] {
                            assert_eq!(all[offsets[q] + i], (q * 1000 + i + call) as f32);
                        }
                    }
                    let total: usize = counts.iter().sum();
                    let send: Vec<f32> = (0..total).map(|i| value(r, i) as f32).collect();
                    let mut mine = vec![0f32; counts[r]];
                    reduce_scatter(seg, &send, &mut mine, &counts, ReduceOp::Sum, deadline())
                        .unwrap();
                    for (j, x) in mine.iter().enumerate() {
                        let want: f64 = (0..n).map(|p| value(p, offsets[r] + j)).sum();
                        assert_eq!(*x as f64, want);
                    }
                    let mut b: Vec<f32> = (0..len)
                        .map(|i| if r == call % n { i as f32 } else { -1.0 })
                        .collect();
                    broadcast(seg, &mut b, call % n, deadline(), true, |_| {}).unwrap();
                    assert!(b.iter().enumerate().all(|(i, &x)| x == i as f32));
                }
                sums
            });
            for sums in out {
                for (call, v) in sums.iter().enumerate() {
                    for (i, x) in v.iter().enumerate() {
                        let want: f64 = (0..n).map(|p| value(p, i + call)).sum();
                        assert_eq!(*x as f64, want, "n {n} call {call} at {i}");
                    }
                }
            }
        }
    }

    fn deadline() -> Instant {
        Instant::now() + Duration::from_secs(30)
    }

    /// Rank `r`'s value at `i`: exact in f32 and f64 sums.
    fn value(r: usize, i: usize) -> f64 {
        ((r * 7919 + i * 31) % 1000) as f64 - 500.0
    }

    /// Uneven counts, zeros included, for `n` ranks.
    fn uneven(n: usize, seed: usize) -> Vec<usize> {
        (0..n)
            .map(|q| [0, 1, 513, 1500, 64, 3000][(q + seed) % 6])
            .collect()
    }

    #[test]
    fn all_reduce_over_many_rounds_equals_the_rank_order_sum() {
        for mode in MODES {
            for n in 1..=4 {
                for len in [0usize, 1, 13, 1024, 5000] {
                    let out = ranks(n, mode, move |r, seg| {
                        let mut buf: Vec<f64> = (0..len).map(|i| value(r, i)).collect();
                        all_reduce(seg, &mut buf, ReduceOp::Sum, deadline(), true, |_| {}).unwrap();
                        let mut again: Vec<f32> = (0..len).map(|i| value(r, i) as f32).collect();
                        all_reduce(seg, &mut again, ReduceOp::Max, deadline(), true, |_| {})
                            .unwrap();
                        (buf, again)
                    });
                    for (sum, max) in out {
                        for i in 0..len {
                            let want: f64 = (0..n).map(|r| value(r, i)).sum();
                            assert_eq!(sum[i], want, "n {n} len {len} at {i}");
                            let top = (0..n).map(|r| value(r, i) as f32).fold(f32::MIN, f32::max);
                            assert_eq!(max[i], top, "n {n} len {len} at {i}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn reduce_scatter_with_uneven_and_empty_blocks() {
        for mode in MODES {
            for n in 1..=4 {
                for seed in 0..3 {
                    let counts = uneven(n, seed);
                    let total: usize = counts.iter().sum();
                    let c = counts.clone();
                    let out = ranks(n, mode, move |r, seg| {
                        let send: Vec<f32> = (0..total).map(|i| value(r, i) as f32).collect();
                        let mut recv = vec![0f32; c[r]];
                        reduce_scatter(seg, &send, &mut recv, &c, ReduceOp::Sum, deadline())
                            .unwrap();
                        recv
                    });
                    let offsets = kernels::offsets(&counts);
                    for (q, recv) in out.iter().enumerate() {
                        assert_eq!(recv.len(), counts[q]);
                        for (j, x) in recv.iter().enumerate() {
                            let want: f64 = (0..n).map(|r| value(r, offsets[q] + j)).sum();
                            assert_eq!(*x as f64, want, "n {n} seed {seed} rank {q} at {j}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn all_gather_with_uneven_and_empty_pieces() {
        for mode in MODES {
            for n in 1..=4 {
                for seed in 0..3 {
                    let counts = uneven(n, seed);
                    let total: usize = counts.iter().sum();
                    let c = counts.clone();
                    let out = ranks(n, mode, move |r, seg| {
                        let send: Vec<u8> = (0..c[r]).map(|i| (r * 37 + i) as u8).collect();
                        let mut recv = vec![0u8; total];
                        all_gather(seg, &send, &mut recv, &c, deadline()).unwrap();
                        recv
                    });
                    let want: Vec<u8> = (0..n)
                        .flat_map(|r| (0..counts[r]).map(move |i| (r * 37 + i) as u8))
                        .collect();
                    for recv in out {
                        assert_eq!(recv, want, "n {n} seed {seed}");
                    }
                }
            }
        }
    }

    #[test]
    fn broadcast_and_all_to_all_over_many_rounds() {
        for mode in MODES {
            for n in 1..=4 {
                for len in [0usize, 7, 2000] {
                    let out = ranks(n, mode, move |r, seg| {
                        let root = n - 1;
                        let mut b: Vec<i64> = (0..len)
                            .map(|i| if r == root { i as i64 * 3 } else { -1 })
                            .collect();
                        broadcast(seg, &mut b, root, deadline(), true, |_| {}).unwrap();
                        let send: Vec<u32> =
                            (0..n * len).map(|i| (r * 100_000 + i) as u32).collect();
                        let mut recv = vec![0u32; n * len];
                        all_to_all(seg, &send, &mut recv, len, deadline()).unwrap();
                        (b, recv)
                    });
                    for (me, (b, recv)) in out.into_iter().enumerate() {
                        assert!(b.iter().enumerate().all(|(i, &x)| x == i as i64 * 3));
                        for q in 0..n {
                            for j in 0..len {
                                let want = (q * 100_000 + me * len + j) as u32;
                                assert_eq!(recv[q * len + j], want, "n {n} len {len}");
                            }
                        }
                    }
                }
            }
        }
    }

    /// Outputs from `copy_streaming_from_bytes()` on are written with
    /// streaming stores, round by round: exact, with uneven tails, on 2
    /// and 3 ranks.
    #[test]
    fn streamed_outputs_are_exact() {
        for mode in MODES {
            let big = crate::copy_streaming_from_bytes() / 4 + 5;
            for n in [2, 3] {
                let counts: Vec<usize> = (0..n).map(|q| big + 61 * q).collect();
                let total: usize = counts.iter().sum();
                let c = counts.clone();
                let out = ranks(n, mode, move |r, seg| {
                    let send: Vec<u32> = (0..total).map(|i| (i * 3 + r) as u32).collect();
                    let mut rs = vec![0u32; c[r]];
                    assert!(
                        kernels::streams::<u32>(rs.len())
                            && (rs.as_ptr() as usize).is_multiple_of(16)
                    );
                    reduce_scatter(seg, &send, &mut rs, &c, ReduceOp::Sum, deadline()).unwrap();
                    let mine: Vec<u32> = (0..c[r]).map(|i| (i * 5 + r) as u32).collect();
                    let mut ag = vec![0u32; total];
                    all_gather(seg, &mine, &mut ag, &c, deadline()).unwrap();
                    let mut b: Vec<u32> = (0..big)
                        .map(|i| if r == 0 { i as u32 } else { 9 })
                        .collect();
                    broadcast(seg, &mut b, 0, deadline(), true, |_| {}).unwrap();
                    let block = big / n + 3;
                    let send: Vec<u32> = (0..n * block)
                        .map(|i| (r * 10_000_000 + i) as u32)
                        .collect();
                    let mut a2a = vec![0u32; n * block];
                    all_to_all(seg, &send, &mut a2a, block, deadline()).unwrap();
                    (rs, ag, b, a2a)
                });
                let offsets = kernels::offsets(&counts);
                let block = big / n + 3;
                for (me, (rs, ag, b, a2a)) in out.into_iter().enumerate() {
                    for (j, x) in rs.iter().enumerate() {
                        let want: usize = (0..n).map(|r| (offsets[me] + j) * 3 + r).sum();
                        assert_eq!(*x, want as u32, "reduce-scatter n {n} rank {me} at {j}");
                    }
                    for q in 0..n {
                        for i in 0..counts[q] {
                            assert_eq!(ag[offsets[q] + i], (i * 5 + q) as u32, "all-gather n {n}");
                        }
                        for j in 0..block {
                            let want = (q * 10_000_000 + me * block + j) as u32;
                            assert_eq!(a2a[q * block + j], want, "all-to-all n {n}");
                        }
                    }
                    assert!(
                        b.iter().enumerate().all(|(i, &x)| x == i as u32),
                        "broadcast n {n}"
                    );
                }
            }
        }
    }

    /// Rank 1 leaves after one round of a call the others run for many:
    /// at their deadline both name it, and the same.
    #[test]
    fn a_rank_gone_midway_is_named_by_every_other_rank() {
        let out = ranks(3, None, |r, seg| {
            let len = if r == 1 { 100 } else { 20_000 };
            let mut buf = vec![1f32; len];
            let d = Instant::now() + Duration::from_millis(300);
            all_reduce(seg, &mut buf, ReduceOp::Sum, d, true, |_| {})
        });
        assert_eq!(out[1], Ok(()), "its one round passed");
        for r in [0, 2] {
            assert_eq!(out[r], Err(Stop { missing: vec![1] }), "rank {r}");
        }
    }

    #[test]
    fn half_precision_sums_accumulate_in_f32_and_round_once() {
        for mode in MODES {
            use half::f16;
            let out = ranks(3, mode, move |r, seg| {
                // 2048 + 1 + 1 in f16: stepwise rounding loses both ones (the
                // spacing at 2048 is 2), one rounding of the f32 sum keeps them.
                let x = [2048.0f32, 1.0, 1.0][r];
                let mut buf = vec![f16::from_f32(x); 3000];
                all_reduce(seg, &mut buf, ReduceOp::Sum, deadline(), true, |_| {}).unwrap();
                buf
            });
            for buf in out {
                assert!(
                    buf.iter().all(|&x| x == f16::from_f32(2050.0)),
                    "{:?}",
                    buf[0]
                );
            }
        }
    }

    /// `n` ranks as in [`ranks`], on a segment whose ranks each have an
    /// arena of `arena` bytes; `f(rank, segment, arena)`.
    fn arena_ranks<R: Send + 'static>(
        n: usize,
        arena: usize,
        f: impl Fn(usize, &mut Segment, &Arena) -> R + Send + Sync + 'static,
    ) -> Vec<R> {
        let name = segment::fresh_name();
        let slot = segment::slot_bytes(4096, n);
        let segs: Vec<Segment> = (0..n)
            .map(|r| Segment::map_with_arena(&name, r == 0, n, slot, arena, r).expect("maps"))
            .collect();
        segment::unlink(&name);
        let f = std::sync::Arc::new(f);
        let handles: Vec<_> = segs
            .into_iter()
            .enumerate()
            .map(|(r, mut seg)| {
                let f = f.clone();
                std::thread::spawn(move || {
                    let base = std::ptr::NonNull::new(seg.arena(r)).unwrap();
                    // SAFETY: this rank's arena in `seg`, which outlives the arena (both live to the end of this thread's closure, the arena dropped first); written only by this thread outside collectives.
                    let a = unsafe { Arena::new(base, seg.arena_len()) };
                    f(r, &mut seg, &a)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    }

    /// Rank `r`'s value at `i`, inexact in f32, so that a sum in another
    /// order would show in the bits.
    fn inexact(r: usize, i: usize) -> f32 {
        (value(r, i) / 3.0 + 0.1 * r as f64) as f32
    }

    /// Shared buffers on every rank, 1 to 5 ranks, lengths from empty to
    /// many slots' worth and not a multiple of the ranks' shares: the
    /// in-place path runs (and says so), with the bits of the slot path
    /// (the thread transport's kernel in rank order), twice on the same
    /// buffers and between slot calls.
    #[test]
    fn shared_buffers_reduce_in_place_with_the_bits_of_the_slots() {
        for n in 1..=5 {
            let out = arena_ranks(n, 1 << 20, move |r, seg, arena| {
                let mut checked = 0;
                // The last is past 64 KiB, where the public entry goes in place too.
                for len in [0usize, 1, 17, 1000, 5003, 20_000] {
                    let mut shared = arena.buffer::<f32>(len, r).unwrap();
                    let mut plain: Vec<f32> = (0..len).map(|i| inexact(r, i)).collect();
                    shared.copy_from_slice(&plain);
                    all_reduce(seg, &mut plain, ReduceOp::Sum, deadline(), true, |_| {}).unwrap();
                    if n > 1 {
                        let took = all_reduce_in_arenas(
                            seg,
                            &mut shared,
                            ReduceOp::Sum,
                            deadline(),
                            true,
                            |_| panic!("stranded"),
                        );
                        // An empty buffer takes no room in the arena: ordinary memory.
                        assert_eq!(took, Ok(len > 0), "n {n} len {len}");
                    } else {
                        all_reduce(seg, &mut shared, ReduceOp::Sum, deadline(), true, |_| {})
                            .unwrap();
                    }
                    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                    assert_eq!(bits(&shared), bits(&plain), "n {n} len {len} rank {r}");
                    let exact: f64 = (0..n).map(|q| f64::from(inexact(q, 0))).sum();
                    if len > 0 {
                        assert!((f64::from(shared[0]) - exact).abs() < 1e-3 * exact.abs().max(1.0));
                    }
                    // Again on fresh inputs, through the public entry, with another operator.
                    let mut again: Vec<f32> = (0..len).map(|i| inexact(r, i + 1)).collect();
                    shared.copy_from_slice(&again);
                    let before = seg.rounds();
                    all_reduce(seg, &mut shared, ReduceOp::Max, deadline(), true, |_| {}).unwrap();
                    if len * 4 >= 64 << 10 && n > 1 {
                        // In place: one round (the slots take one per page here).
                        assert_eq!(seg.rounds(), before + 1, "n {n} len {len}");
                    }
                    all_reduce(seg, &mut again, ReduceOp::Max, deadline(), true, |_| {}).unwrap();
                    assert_eq!(bits(&shared), bits(&again), "n {n} len {len} rank {r}");
                    let most = (0..n).map(|q| inexact(q, 1)).fold(f32::MIN, f32::max);
                    if len > 0 {
                        assert_eq!(shared[0], most, "n {n} len {len} rank {r}");
                    }
                    checked += len;
                }
                checked
            });
            assert!(out.iter().all(|&c| c == 26_021), "n {n}");
        }
    }

    /// Half precision accumulates in f32 and rounds once, and a mean
    /// divides once, in place as on the slots; a sub-slice of a shared
    /// buffer that does not start on a cache line is ordinary memory (its
    /// shares would straddle lines), with the right result.
    #[test]
    fn half_precision_means_and_sub_slices_in_place() {
        use half::f16;
        let out = arena_ranks(3, 1 << 20, |r, seg, arena| {
            // 2048 + 1 + 1 in f16: only one rounding of the f32 sum keeps the ones.
            let mut h = arena.buffer::<f16>(40_000, r).unwrap();
            h.fill(f16::from_f32([2048.0, 1.0, 1.0][r]));
            let took = all_reduce_in_arenas(seg, &mut h, ReduceOp::Sum, deadline(), true, |_| {
                panic!("stranded")
            });
            assert_eq!(took, Ok(true));
            let mut m = arena.buffer::<f64>(20_000, r).unwrap();
            m.iter_mut()
                .enumerate()
                .for_each(|(i, x)| *x = value(r, i) / 7.0);
            let mut slots: Vec<f64> = m.to_vec();
            let before = seg.rounds();
            all_reduce(seg, &mut m, ReduceOp::Mean, deadline(), true, |_| {}).unwrap();
            assert_eq!(seg.rounds(), before + 1, "the public entry went in place");
            all_reduce(seg, &mut slots, ReduceOp::Mean, deadline(), true, |_| {}).unwrap();
            let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(
                bits(&m),
                bits(&slots),
                "a mean in place has the slots' bits"
            );
            let mut sub = arena.buffer::<f32>(20_001, r).unwrap();
            sub.iter_mut()
                .enumerate()
                .for_each(|(i, x)| *x = value(r, i) as f32);
            let took =
                all_reduce_in_arenas(seg, &mut sub[1..], ReduceOp::Sum, deadline(), true, |_| {
                    panic!("stranded")
                });
            assert_eq!(took, Ok(false), "a sub-slice off a line");
            all_reduce(seg, &mut sub[1..], ReduceOp::Sum, deadline(), true, |_| {}).unwrap();
            (h.to_vec(), m.to_vec(), sub.to_vec())
        });
        for (r, (h, m, sub)) in out.into_iter().enumerate() {
            assert!(
                h.iter().all(|&x| x == f16::from_f32(2050.0)),
                "rank {r}: {:?}",
                h[0]
            );
            for (i, &x) in m.iter().enumerate() {
                let want = (0..3).map(|q| value(q, i) / 7.0).sum::<f64>() / 3.0;
                assert!(
                    (x - want).abs() <= 1e-12 * want.abs().max(1.0),
                    "rank {r} at {i}"
                );
            }
            assert_eq!(sub[0], value(r, 0) as f32, "rank {r}: outside the call");
            for (i, &x) in sub.iter().enumerate().skip(1) {
                let want: f64 = (0..3).map(|q| value(q, i)).sum();
                assert_eq!(f64::from(x), want, "rank {r} at {i}");
            }
        }
    }

    /// One rank whose buffer is ordinary memory, or that refuses peers'
    /// writes (`writable == false`: a staged world), sends every rank to
    /// the slots, which give the right sums.
    #[test]
    fn one_plain_or_unwritable_buffer_sends_every_rank_to_the_slots() {
        for (odd, plain) in [(1usize, true), (2, false)] {
            let out = arena_ranks(3, 1 << 16, move |r, seg, arena| {
                let len = 3000;
                let mut shared = arena.buffer::<f64>(len, r).unwrap();
                let mut own: Vec<f64> = (0..len).map(|i| value(r, i)).collect();
                shared.copy_from_slice(&own);
                let writable = r != odd || plain;
                let buf: &mut [f64] = if r == odd && plain {
                    &mut own
                } else {
                    &mut shared
                };
                let took =
                    all_reduce_in_arenas(seg, buf, ReduceOp::Sum, deadline(), writable, |_| {
                        panic!("stranded")
                    });
                assert_eq!(took, Ok(false), "rank {r}");
                all_reduce(seg, buf, ReduceOp::Sum, deadline(), writable, |_| {}).unwrap();
                buf.to_vec()
            });
            for (r, got) in out.iter().enumerate() {
                for (i, &x) in got.iter().enumerate() {
                    let want: f64 = (0..3).map(|q| value(q, i)).sum();
                    assert_eq!(x, want, "odd {odd} rank {r} at {i}");
                }
            }
        }
    }

    /// Rank 1 passes the first barrier of an in-place all-reduce and never
    /// comes to the second: its peers cannot know that it will not still
    /// write their buffers, so each calls `stranded` once, with the Stop
    /// naming rank 1, before it returns that Stop.
    #[test]
    fn a_peer_stalled_midway_strands_its_peers() {
        let out = arena_ranks(3, 1 << 16, |r, seg, arena| {
            let len = 4000;
            let mut buf = arena.buffer::<f32>(len, r).unwrap();
            let d = Instant::now() + Duration::from_millis(300);
            if r == 1 {
                let b = seg.next_round();
                let off = seg.arena_offset(buf.as_ptr().cast(), len * 4).unwrap();
                // SAFETY: word 0 of this rank's slot of the round, as in `all_reduce_in_arenas`.
                unsafe { seg.slot(1, b).cast::<u64>().write(off as u64 + 1) };
                seg.barrier(d).unwrap();
                std::thread::sleep(Duration::from_millis(700));
                return (Ok(true), Vec::new());
            }
            let mut calls = Vec::new();
            let took = all_reduce_in_arenas(seg, &mut buf, ReduceOp::Sum, d, true, |stop| {
                calls.push(stop.clone())
            });
            (took, calls)
        });
        for r in [0, 2] {
            let stop = Stop { missing: vec![1] };
            assert_eq!(out[r].0, Err(stop.clone()), "rank {r}");
            assert_eq!(out[r].1, vec![stop], "rank {r}: stranded once");
        }
    }

    /// Broadcasts of shared buffers on 1 to 5 ranks from every root, from
    /// empty to past 256 KiB (where the ranks write their pieces into
    /// their peers, as on threads, even when the root refuses peers'
    /// writes) and to 1.2 MB, twice on the same buffers: every rank ends
    /// with the root's bits, and the calls from 256 KiB ran in place.
    #[test]
    fn shared_buffers_broadcast_in_place_from_every_root() {
        for n in 1..=5 {
            let out = arena_ranks(n, 2 << 20, move |r, seg, arena| {
                let mut checked = 0;
                for len in [0usize, 17, 20_000, 70_000, 300_000] {
                    let mut buf = arena.buffer::<f32>(len, r).unwrap();
                    for root in 0..n {
                        for round in 0..2 {
                            let mine = |i: usize| inexact(r, i + round);
                            buf.iter_mut().enumerate().for_each(|(i, x)| *x = mine(i));
                            // The second time the root refuses peers' writes: its buffer is only read.
                            let writable = round == 0 || r != root;
                            let before = seg.in_place;
                            broadcast(seg, &mut buf, root, deadline(), writable, |_| {
                                panic!("stranded")
                            })
                            .unwrap();
                            let in_place = n > 1 && len * 4 >= 256 << 10;
                            assert_eq!(
                                seg.in_place - before,
                                u64::from(in_place),
                                "n {n} len {len} root {root}"
                            );
                            for (i, &x) in buf.iter().enumerate() {
                                let want = inexact(root, i + round);
                                assert_eq!(
                                    x.to_bits(),
                                    want.to_bits(),
                                    "n {n} len {len} root {root} rank {r} at {i}"
                                );
                            }
                            checked += len;
                        }
                    }
                }
                checked
            });
            assert!(out.iter().all(|&c| c == 2 * n * 390_017), "n {n}");
        }
    }

    /// A broadcast of 1.2 MB from rank 1 on 3 ranks, one of which (`stalled`)
    /// publishes its buffer, passes the first barrier and stalls. In place
    /// (every buffer shared, every non-root rank writable, whether or not
    /// the root is) the other
    /// non-root rank is stranded (a peer may still write its buffer) and
    /// the root is not (nobody writes its buffer); both return the `Stop`.
    /// A non-root rank whose buffer is ordinary memory, or that refuses
    /// peers' writes (a staged world), keeps the call on the read-only
    /// path: nobody is stranded.
    #[test]
    fn a_stalled_writer_strands_a_broadcast_in_place_and_only_that() {
        // (stalled rank, rank that refuses writes or whose buffer is plain, plain?)
        let cases = [
            (1, None, false),
            (2, None, false),
            (1, Some(2), true),
            (1, Some(0), false),
            // A root that refuses peers' writes: still in place.
            (2, Some(1), false),
        ];
        for (stalled, odd, plain) in cases {
            let out = arena_ranks(3, 2 << 20, move |r, seg, arena| {
                let len = 300_000;
                let mut shared = arena.buffer::<f32>(len, r).unwrap();
                let mut own = vec![0f32; len];
                let here = odd == Some(r);
                let buf: &mut [f32] = if here && plain { &mut own } else { &mut shared };
                let writable = !here || plain;
                let d = Instant::now() + Duration::from_millis(300);
                if r == stalled {
                    let b = seg.next_round();
                    direct::publish(seg, b, buf, writable, &[]);
                    seg.barrier(d).unwrap();
                    std::thread::sleep(Duration::from_millis(700));
                    return (Ok(()), 0);
                }
                let mut stranded = 0;
                let got = broadcast(seg, buf, 1, d, writable, |_| stranded += 1);
                (got, stranded)
            });
            let case = format!("stalled {stalled} odd {odd:?}");
            for r in (0..3).filter(|&r| r != stalled) {
                let stop = Stop {
                    missing: vec![stalled],
                };
                assert_eq!(out[r].0, Err(stop), "{case} rank {r}");
                let in_place = odd.is_none() || (odd == Some(1) && !plain);
                let want = usize::from(in_place && r != 1);
                assert_eq!(
                    out[r].1, want,
                    "{case} rank {r}: stranded only in place, never the root"
                );
            }
        }
    }

    /// Rank `q`'s block for rank `p` in the all-to-all-v tests: uneven,
    /// empty ones included, some spanning many rounds of the tests' slots;
    /// `seed / 7` scales them.
    fn v_count(q: usize, p: usize, seed: usize) -> usize {
        [0, 1, 513, 1500, 64, 3000, 17][(q * 3 + p + seed) % 7] * (1 + seed / 7)
    }

    /// Element `i` of rank `q`'s block for rank `p`: exact in f64.
    fn v_value(q: usize, p: usize, i: usize) -> f64 {
        value(q, p * 4001 + i)
    }

    /// Rank `r`'s send buffer and its counts, and its receive counts.
    fn v_buffers(r: usize, n: usize, seed: usize) -> (Vec<f64>, Vec<usize>, Vec<usize>) {
        let sc: Vec<usize> = (0..n).map(|p| v_count(r, p, seed)).collect();
        let rc: Vec<usize> = (0..n).map(|q| v_count(q, r, seed)).collect();
        let send = (0..n)
            .flat_map(|p| (0..sc[p]).map(move |i| v_value(r, p, i)))
            .collect();
        (send, sc, rc)
    }

    /// What rank `r` must receive: every rank's block for it, in rank order.
    fn v_expected(r: usize, n: usize, seed: usize) -> Vec<f64> {
        (0..n)
            .flat_map(|q| (0..v_count(q, r, seed)).map(move |i| v_value(q, r, i)))
            .collect()
    }

    /// All-to-all-v over 1 to 5 ranks with uneven and empty blocks, through
    /// the slots (many rounds of one-page slots), through single copies,
    /// and with some calls in the window: every rank receives every block,
    /// twice on the same segment.
    #[test]
    fn all_to_all_v_with_uneven_and_empty_blocks() {
        for mode in MODES {
            for n in 1..=5 {
                for seed in 0..3 {
                    let out = ranks(n, mode, move |r, seg| {
                        let (send, sc, rc) = v_buffers(r, n, seed);
                        let mut got = Vec::new();
                        for _ in 0..2 {
                            let mut recv = vec![f64::NAN; rc.iter().sum()];
                            all_to_all_v(seg, (&send, &sc), (&mut recv, &rc), deadline()).unwrap();
                            got.push(recv);
                        }
                        got
                    });
                    for (r, got) in out.iter().enumerate() {
                        let want = v_expected(r, n, seed);
                        for recv in got {
                            assert_eq!(recv, &want, "mode {mode:?} n {n} seed {seed} rank {r}");
                        }
                    }
                }
            }
        }
    }

    /// Senders whose buffers are all shared buffers are read through the
    /// mapping in the plan's round (one round in all), from 64 KiB of the
    /// largest receive buffer; one sender on ordinary memory sends the call
    /// through the slots (more rounds), with the same result.
    #[test]
    fn all_to_all_v_reads_shared_senders_through_the_mapping() {
        for plain in [None, Some(1)] {
            let out = arena_ranks(3, 1 << 20, move |r, seg, arena| {
                // Blocks of up to 12 000 × 8 bytes: receive buffers past 64 KiB.
                let (own, sc, rc) = v_buffers(r, 3, 21);
                let mut shared = arena.buffer::<f64>(own.len(), r).unwrap();
                shared.copy_from_slice(&own);
                let send: &[f64] = if plain == Some(r) { &own } else { &shared };
                let mut recv = vec![0f64; rc.iter().sum()];
                let before = seg.rounds();
                all_to_all_v(seg, (send, &sc), (&mut recv, &rc), deadline()).unwrap();
                (recv, seg.rounds() - before)
            });
            let most = (0..3)
                .map(|r| v_expected(r, 3, 21).len() * 8)
                .max()
                .unwrap();
            assert!(most >= 64 << 10, "{most} bytes");
            for (r, (recv, rounds)) in out.iter().enumerate() {
                assert_eq!(recv, &v_expected(r, 3, 21), "plain {plain:?} rank {r}");
                if plain.is_none() {
                    assert_eq!(*rounds, 1, "rank {r}: read in the plan's round");
                } else {
                    assert!(*rounds > 1, "rank {r}: through the slots");
                }
            }
        }
    }

    /// A rank gone after the plan: its peers, reading its buffer directly
    /// or copying through the slots (told apart by the rounds they ran),
    /// name it at their deadline.
    #[test]
    fn all_to_all_v_names_a_rank_gone_after_the_plan() {
        // Seed 0: receive buffers inside the window of the third mode;
        // seed 21: past it.
        for (mode, seed) in MODES.into_iter().flat_map(|m| [(m, 0), (m, 21)]) {
            let out = ranks(3, mode, move |r, seg| {
                let (send, sc, rc) = v_buffers(r, 3, seed);
                let mut recv = vec![0f64; rc.iter().sum()];
                let d = Instant::now() + Duration::from_millis(300);
                let before = seg.rounds();
                if r == 1 {
                    let blocks = direct::BlocksV::new((1, 3), (&send, &sc), (&recv, &rc));
                    let plan = direct::plan_all_to_all_v(seg, &send, &blocks, recv.len() * 8, d);
                    // Its buffer stays alive while peers may still read it.
                    std::thread::sleep(Duration::from_millis(600));
                    return (plan.map(|_| ()), 1);
                }
                let got = all_to_all_v(seg, (&send, &sc), (&mut recv, &rc), d);
                (got, seg.rounds() - before)
            });
            // Direct (the plan's round alone) where the largest receive
            // buffer is inside the mode's window, else a slot round too.
            let most = (0..3)
                .map(|r| v_expected(r, 3, seed).len() * 8)
                .max()
                .unwrap();
            let direct = mode.is_some_and(|(from, below)| (from..below).contains(&most));
            assert_eq!(
                out[1].0,
                Ok(()),
                "mode {mode:?} seed {seed}: its plan passed"
            );
            for r in [0, 2] {
                assert_eq!(
                    out[r].0,
                    Err(Stop { missing: vec![1] }),
                    "mode {mode:?} seed {seed} rank {r}"
                );
                assert_eq!(
                    out[r].1,
                    if direct { 1 } else { 2 },
                    "mode {mode:?} seed {seed} rank {r}: rounds"
                );
            }
        }
    }
}
