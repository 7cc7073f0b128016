//! The record exchange that opens every checked MPI collective: each rank
//! sends its call record (fingerprint, buffer lengths, count lists) to
//! every peer and receives theirs, with the deadline; a small call's data
//! travels in the same messages ([`super::inline`]). A record that never
//! comes names a rank that did not arrive; the records that came go
//! through the rules every transport applies ([`crate::validate`]), so
//! every rank reports the same error before any data moves.

use std::ffi::{c_int, c_void};
use std::sync::Mutex;
use std::time::Instant;

use mpi::ffi;

use super::inline::{self, Inbox, Parcel};
use super::raw::count;
use super::segment::{self, Segment};
use super::wait::{Inflight, ReqKind};
use crate::validate::{self, CallArgs, wire};
use crate::{CommError, DType, ErrorContext};

/// The tag of call records on a communicator's control channel.
pub(crate) const TAG_RECORD: c_int = 10;

/// The tag of the data a small call sends with its record.
const TAG_INLINE: c_int = 14;

/// Where the exchange runs.
pub(crate) struct Channel<'a> {
    pub session: &'a super::session::Session,
    pub ctl: ffi::MPI_Comm,
    pub rank: usize,
    pub size: usize,
}

/// The outcome of an exchange whose records passed the verdict: every
/// rank's message slot, and whether the call went inline (its data came
/// with the records and no data phase is needed).
pub(crate) struct Agreed {
    buf: Vec<u64>,
    slot: usize,
    record: usize,
    me: usize,
    /// Whether the call's data came with the records.
    pub(crate) inline: bool,
}

impl Agreed {
    /// The payloads that came with the records.
    pub(crate) fn inbox(&self) -> Inbox<'_> {
        Inbox {
            slots: &self.buf,
            slot: self.slot,
            record: self.record,
            me: self.me,
        }
    }

    /// Hand the message buffer back for the next call.
    pub(crate) fn release(self, store: &Mutex<Vec<u64>>) {
        *store.lock().unwrap_or_else(|e| e.into_inner()) = self.buf;
    }
}

/// Exchange records (and, for a small call, its data: `parcel`) with every
/// peer and check them all.
///
/// Every message lives in one buffer, kept in `store` between calls (a
/// call never overlaps another on its communicator), so that an exchange
/// allocates nothing once warm: slot `q` receives rank `q`'s messages
/// (this rank's own slot holds its record), and the slots after the `n`th
/// hold what this rank sends (one for all peers, or one per peer). A slot
/// is a record of [`wire::words`] words, the payload's length in bytes,
/// and room for the payload, which travels as a second message.
///
/// # Errors
/// [`CommError::Timeout`] naming the ranks whose record did not come by the
/// deadline (the buffer is then left to MPI, leaked); the argument errors
/// of [`validate::verdict`], the same on every rank, then
/// [`super::raw::fits_int`]'s on every rank's record; [`CommError::Transport`]
/// when MPI fails.
pub(crate) fn agree(
    ch: &Channel<'_>,
    call: &CallArgs<'_>,
    deadline: Instant,
    parcel: &Parcel<'_>,
    store: &Mutex<Vec<u64>>,
) -> Result<Agreed, CommError> {
    let (me, n, op) = (ch.rank, ch.size, call.fp.op);
    let w = wire::words(n);
    let slot = inline::slot_words(w, n);
    let carry = inline::inline_ok(call, n);
    let sends = if carry && matches!(parcel, Parcel::PerPeer(_)) {
        n
    } else {
        1
    };
    let too_large = || CommError::InvalidArgument {
        op,
        rank: me,
        reason: crate::InvalidArgument::TooLarge {
            count: usize::MAX,
            max: isize::MAX as usize / 8,
        },
        context: ErrorContext::none(),
    };
    let total = n
        .checked_add(sends)
        .and_then(|k| k.checked_mul(slot))
        .ok_or_else(too_large)?;
    let mut buf = std::mem::take(&mut *store.lock().unwrap_or_else(|e| e.into_inner()));
    if buf.len() < total {
        buf.resize(total, 0);
    }
    // This rank's record in its own slot, with no payload.
    wire::encode_into(
        call,
        n,
        bytemuck::cast_slice_mut(&mut buf[me * slot..me * slot + w]),
    );
    buf[me * slot + w] = 0;
    // What it sends: the record, the payload's length, the payload (to
    // nobody in a group of one).
    // Each peer gets two messages: the record (with the payload's length)
    // and, in a group small enough to carry data, the payload message (the
    // call's sequence number, then the payload, possibly empty), so that
    // the record stays within MPI's eager size (a record and a 4 KiB payload
    // in one message went through Open MPI's rendezvous protocol on shared
    // memory: a round trip more). Every call posts and sends exactly one of
    // each per peer, so they pair up in order, and the sequence number
    // catches a pairing that went wrong.
    let carries = n <= inline::INLINE_RANKS;
    for j in (0..sends).filter(|_| n > 1) {
        let base = (n + j) * slot;
        buf.copy_within(me * slot..me * slot + w, base);
        let payload: &[u8] = if carry {
            if sends == 1 {
                parcel.to(me)
            } else {
                parcel.to(j)
            }
        } else {
            &[]
        };
        buf[base + w] = payload.len() as u64;
        if carries {
            assert!(
                payload.len() <= (slot - w - 2) * 8,
                "an inline payload within its slot"
            );
            buf[base + w + 1] = call.fp.seq;
            let room: &mut [u8] = bytemuck::cast_slice_mut(&mut buf[base + w + 2..base + slot]);
            room[..payload.len()].copy_from_slice(payload);
        }
    }
    let mut fl = Inflight::new(ch.session, buf);
    let kinds = if carries { 2 } else { 1 };
    fl.reserve(2 * kinds * (n - 1));
    // Every pointer MPI gets, taken before any request is posted.
    // SAFETY: the buffer is owned by `fl`, which keeps it alive until every
    // request is complete (or leaks it); no request is in flight yet.
    let base: *mut u64 = unsafe { (*fl.bufs()).as_mut_ptr() };
    let at = |k: usize, word: usize| -> *mut c_void {
        debug_assert!(k < n + sends && word < slot);
        // SAFETY: valid: `base` covers the `(n + sends) * slot` words `fl` owns, and
        // `k < n + sends`, `word < slot` keep the offset inside; unaliased: only an address is
        // made, no reference.
        unsafe { base.add(k * slot + word) }.cast()
    };
    let (i64t, u8t) = (
        super::raw::datatype(DType::I64),
        super::raw::datatype(DType::U8),
    );
    // The record with its length word, and the payload message's room (its
    // sequence word and the payload).
    let record_len = count(op, me, w + 1)?;
    let room = count(op, me, (slot - w - 1) * 8)?;
    // Requests, in order: the records from every peer (peer `i` of the
    // n - 1 is rank `i` below `me`, `i + 1` above), their payloads, then
    // the sends of this rank's record and payload to each.
    let peer = |i: usize| if i < me { i } else { i + 1 };
    for i in 0..n - 1 {
        let (into, p) = (at(peer(i), 0), peer(i));
        fl.post(op, me, ReqKind::Recv, |r| {
            // SAFETY: `into` holds `record_len` words (rank `p`'s slot), which
            // only MPI touches until this receive completes; `p` is a rank of
            // `ctl`; a record is never longer.
            unsafe { ffi::MPI_Irecv(into, record_len, i64t, p as c_int, TAG_RECORD, ch.ctl, r) }
        })?;
    }
    if carries {
        for i in 0..n - 1 {
            let (into, p) = (at(peer(i), w + 1), peer(i));
            fl.post(op, me, ReqKind::Recv, |r| {
                // SAFETY: valid: `into` holds `room` bytes of `fl`'s buffer (alive until done; MPI
                // refuses a longer message rather than write past `room`); unaliased: only MPI
                // touches it until this receive completes.
                unsafe { ffi::MPI_Irecv(into, room, u8t, p as c_int, TAG_INLINE, ch.ctl, r) }
            })?;
        }
    }
    for i in 0..n - 1 {
        let p = peer(i);
        let j = n + if sends == 1 { 0 } else { p };
        let record = at(j, 0);
        fl.post(op, me, ReqKind::Send, |r| {
            // SAFETY: send slot `j` starts with `record_len` words, unchanged
            // until the sends complete (the receives write other slots).
            unsafe { ffi::MPI_Isend(record, record_len, i64t, p as c_int, TAG_RECORD, ch.ctl, r) }
        })?;
        if carries {
            let payload = at(j, w + 1);
            // SAFETY: the length word of send slot `j`, inside the buffer,
            // which no request writes.
            let len = unsafe { *base.add(j * slot + w) } as usize;
            // The sequence word and the payload: at most `room`, an int.
            let bytes = (8 + len) as c_int;
            fl.post(op, me, ReqKind::Send, |r| {
                // SAFETY: send slot `j`'s payload message, `bytes` ≤ `room`
                // bytes from word `w + 1`, unchanged until the sends complete.
                unsafe { ffi::MPI_Isend(payload, bytes, u8t, p as c_int, TAG_INLINE, ch.ctl, r) }
            })?;
        }
    }
    let pending = fl.wait(op, me, 0..fl.len(), deadline)?;
    if !pending.is_empty() {
        let receives = kinds * (n - 1);
        let (recvs, sends): (Vec<usize>, Vec<usize>) = pending.iter().partition(|&&i| i < receives);
        // A message that did not come names its rank; if every message came
        // but a send of ours is stuck, its destination is the one missing.
        let mut missing: Vec<usize> = if recvs.is_empty() {
            sends
                .iter()
                .map(|&i| peer((i - receives) / kinds))
                .collect()
        } else {
            recvs.iter().map(|&i| peer(i % (n - 1))).collect()
        };
        missing.sort_unstable();
        missing.dedup();
        drop(fl); // abandons the pending requests and leaks the buffer
        return Err(CommError::Timeout {
            op,
            rank: me,
            missing,
            waited: ch.session.timeout,
            context: ErrorContext::none(),
        });
    }
    let buf = fl
        .finish()
        .expect("no request is pending after the wait said so");
    verdict(buf, slot, w, n, me, store)
}

/// [`agree`] through a communicator's shared-memory segment (its ranks run
/// on one host): each rank writes its record, and for a small call its
/// payloads, into its own record area, passes the segment's barrier with
/// the deadline, then copies every peer's record and the payload meant
/// for it into the message buffer [`agree`] would have received, which
/// goes through the same verdict. No MPI message moves.
///
/// # Errors
/// As [`agree`]; the [`CommError::Timeout`] names the ranks that had not
/// arrived when the first rank gave up (the same names on every rank).
pub(crate) fn agree_shared(
    seg: &mut Segment,
    call: &CallArgs<'_>,
    deadline: Instant,
    parcel: &Parcel<'_>,
    store: &Mutex<Vec<u64>>,
    waited: std::time::Duration,
) -> Result<Agreed, CommError> {
    let (me, n, op) = (seg.rank(), seg.size(), call.fp.op);
    let w = wire::words(n);
    let slot = inline::slot_words(w, n);
    let entry = segment::entry_words();
    let area_words = seg.record_len() / 8;
    let sends = match parcel {
        _ if !(inline::inline_ok(call, n) && n <= inline::INLINE_RANKS) => 0,
        Parcel::PerPeer(_) => n,
        _ => 1,
    };
    let b = seg.next_call();
    {
        // SAFETY: valid: our record area of this parity is `area_words` mapped, 8-byte aligned
        // words; unaliased: only this rank writes it, no peer reads it before the barrier below
        // (`Segment::next_call`), and no other reference to it exists.
        let area = unsafe { std::slice::from_raw_parts_mut(seg.record(me, b), area_words) };
        wire::encode_into(call, n, bytemuck::cast_slice_mut(&mut area[..w]));
        area[w] = sends as u64;
        for j in 0..sends {
            let e = w + 1 + j * entry;
            let payload = parcel.to(j);
            assert!(
                payload.len() <= (entry - 2) * 8 && e + entry <= area_words,
                "an inline payload within its entry"
            );
            area[e] = payload.len() as u64;
            area[e + 1] = call.fp.seq;
            let room: &mut [u8] = bytemuck::cast_slice_mut(&mut area[e + 2..e + entry]);
            room[..payload.len()].copy_from_slice(payload);
        }
    }
    seg.barrier(deadline).map_err(|stop| CommError::Timeout {
        op,
        rank: me,
        missing: stop.missing,
        waited,
        context: ErrorContext::none(),
    })?;
    let mut buf = std::mem::take(&mut *store.lock().unwrap_or_else(|e| e.into_inner()));
    let total = n * slot;
    if buf.len() < total {
        buf.resize(total, 0);
    }
    for q in 0..n {
        // SAFETY: rank `q`'s record area of this call, written before the
        // barrier and not again before this rank passes the next call's
        // record barrier; only read here.
        let area = unsafe { std::slice::from_raw_parts(seg.record(q, b), area_words) };
        let out = &mut buf[q * slot..(q + 1) * slot];
        out[..w].copy_from_slice(&area[..w]);
        // The payload for this rank (entry 0 when one is sent to all), in
        // the layout `agree` receives: length, sequence number, payload.
        let sent = area[w] as usize;
        let j = if sent == 1 { 0 } else { me };
        let e = w + 1 + j * entry;
        if q == me || sent == 0 || j >= sent || e + entry > area_words {
            out[w] = 0;
            continue;
        }
        let room = (slot - w - 2).min(entry - 2);
        let len = (area[e] as usize).min(room * 8);
        out[w] = area[e];
        out[w + 1] = area[e + 1];
        out[w + 2..w + 2 + len.div_ceil(8)].copy_from_slice(&area[e + 2..e + 2 + len.div_ceil(8)]);
    }
    verdict(buf, slot, w, n, me, store)
}

/// Pass the verdict on the records in `buf` (one slot of `slot` words per
/// rank, records of `w` words): the agreement, or the error with the
/// buffer handed back to `store`.
fn verdict(
    buf: Vec<u64>,
    slot: usize,
    w: usize,
    n: usize,
    me: usize,
    store: &Mutex<Vec<u64>>,
) -> Result<Agreed, CommError> {
    let agreed = Agreed {
        buf,
        slot,
        record: w,
        me,
        inline: false,
    };
    match validate_records(&agreed.buf, slot, n, me) {
        Ok(inline) => Ok(Agreed { inline, ..agreed }),
        Err(e) => {
            agreed.release(store);
            Err(e)
        }
    }
}

/// Decode every rank's record (the first `wire::words(n)` words of each of
/// the `n` slots of `slot` words) and pass the verdict on them: the rules
/// of every transport, then MPI's `int` limit on every rank's counts (so
/// that a rank whose counts MPI cannot take fails on every rank, not alone
/// after the agreement, leaving its peers in the data phase). Records
/// equal to this rank's, word for word (the usual case), are decoded once.
/// Returns whether the call went inline (every rank's record passes
/// [`inline::inline_ok`], so every rank sent its data with it).
fn validate_records(buf: &[u64], slot: usize, n: usize, me: usize) -> Result<bool, CommError> {
    let w = wire::words(n);
    let record = |q: usize| -> &[i64] { bytemuck::cast_slice(&buf[q * slot..q * slot + w]) };
    let mine = record(me);
    let decoded: Vec<wire::Decoded> = if (0..n).all(|q| record(q) == mine) {
        vec![wire::decode(mine, n)]
    } else {
        (0..n).map(|q| wire::decode(record(q), n)).collect()
    };
    let calls: Vec<CallArgs<'_>> = (0..n)
        .map(|r| decoded[r.min(decoded.len() - 1)].args())
        .collect();
    validate::verdict(&calls, me)?;
    calls
        .iter()
        .try_for_each(|call| super::raw::fits_int(call, n, me))?;
    Ok(calls.iter().all(|c| inline::inline_ok(c, n)))
}
