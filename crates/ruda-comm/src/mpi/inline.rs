//! Small collectives carried with their call records.
//!
//! A checked collective first sends its call record to every peer. For a
//! small call that message is the whole cost of the check: on 2 ranks of
//! the development machine a 4 KiB all-gather took 0.9 µs in MPI and 2.0 µs
//! behind a separate record exchange. So when every rank's largest message
//! is at most [`INLINE_BYTES`] in a group of at most [`INLINE_RANKS`], each
//! rank sends its data along with its record (a second message, tagged
//! and numbered, so the record stays small), and once the
//! records agree the call completes from what arrived, with no data phase:
//! gathers copy each rank's block into place, reductions combine the
//! ranks' blocks in rank order with the local transport's kernel
//! (accumulating `f16`/`bf16` in `f32`, rounding once), so every rank gets
//! the same bits, the same as the threads of a `LocalWorld` get.
//!
//! Whether a call goes inline is decided from the records alone, so every
//! rank decides the same: each rank includes its data iff its own record
//! passes [`inline_ok`], and after the exchange the call is inline iff
//! every rank's record does. When records disagree the verdict fails first
//! and the data is never read; a mismatched peer's message still fits the
//! receive buffer, since nobody sends more than [`INLINE_BYTES`] with a
//! record.

use crate::validate::CallArgs;
use crate::{CommError, Element, ErrorContext, OpKind, ReduceOp};

/// The largest payload (bytes) a rank sends with its record: with its
/// sequence word and MPI's headers, within Open MPI's eager size on shared
/// memory (4 KiB with headers). A larger payload would go by rendezvous,
/// a round trip more, and a receive it had matched could then not be
/// cancelled when the call times out.
pub(crate) const INLINE_BYTES: usize = 4000;

/// The largest group whose small collectives go inline (each rank sends
/// every peer its own message, so the cost grows with the group).
pub(crate) const INLINE_RANKS: usize = 8;

/// What this rank sends each peer with its record.
pub(crate) enum Parcel<'a> {
    /// Nothing (the data moves in the data phase, or there is none).
    None,
    /// The same bytes to every peer.
    Same(&'a [u8]),
    /// Entry `p` to peer `p` (this rank's own entry is not sent).
    PerPeer(Vec<&'a [u8]>),
}

impl Parcel<'_> {
    /// The bytes for peer `p`.
    pub(crate) fn to(&self, p: usize) -> &[u8] {
        match self {
            Parcel::None => &[],
            Parcel::Same(b) => b,
            Parcel::PerPeer(v) => v.get(p).copied().unwrap_or(&[]),
        }
    }
}

/// [`Parcel::PerPeer`] of consecutive blocks of `buf`, block `p` holding
/// `counts[p]` elements; [`Parcel::None`] when they do not fit `buf` (the
/// call's own arguments are wrong: the verdict refuses it before any
/// payload is read, so nothing needs to be sent).
pub(crate) fn blocks<'a, T: Element>(
    buf: &'a [T],
    counts: impl IntoIterator<Item = usize>,
) -> Parcel<'a> {
    let mut off = 0usize;
    let mut out = Vec::new();
    for c in counts {
        let Some(block) = off.checked_add(c).and_then(|end| buf.get(off..end)) else {
            return Parcel::None;
        };
        out.push(bytemuck::cast_slice(block));
        off += c;
    }
    Parcel::PerPeer(out)
}

/// The largest message, in bytes, that the rank with record `call` sends a
/// peer in a group of `n` (0 for calls without data).
pub(crate) fn largest_message(call: &CallArgs<'_>, n: usize) -> usize {
    let size = call.fp.dtype.map_or(0, |d| d.size_in_bytes());
    let max = |v: &[usize]| v.iter().copied().max().unwrap_or(0);
    let elements = match call.fp.op {
        OpKind::AllReduce | OpKind::Broadcast | OpKind::ReduceScatter => call.recv_len,
        OpKind::AllGather | OpKind::AllGatherV => call.send_len,
        OpKind::AllToAll => call.send_len / n.max(1),
        OpKind::ReduceScatterV | OpKind::AllToAllV => max(call.counts.values),
        _ => 0,
    };
    elements.saturating_mul(size)
}

/// Whether the rank with record `call` sends its data with its record.
pub(crate) fn inline_ok(call: &CallArgs<'_>, n: usize) -> bool {
    n <= INLINE_RANKS
        && largest_message(call, n) <= INLINE_BYTES
        && !matches!(call.fp.op, OpKind::Split)
}

/// The words of one message slot in a group of `n` with records of
/// `record` words: the record, the payload's length in bytes, and, when
/// the group is small enough to carry a payload, the payload message: the
/// call's sequence number (so that a payload is never taken for another
/// call's) and room for [`INLINE_BYTES`].
pub(crate) fn slot_words(record: usize, n: usize) -> usize {
    let payload = if n <= INLINE_RANKS {
        1 + INLINE_BYTES.div_ceil(8)
    } else {
        0
    };
    record + 1 + payload
}

/// The payloads that arrived with the records of a call that went inline.
pub(crate) struct Inbox<'a> {
    /// Every rank's message slot (`slot` words each: record, length word,
    /// sequence word, payload; this rank's own holds only its record).
    pub(crate) slots: &'a [u64],
    /// Words per slot.
    pub(crate) slot: usize,
    /// Words of a record.
    pub(crate) record: usize,
    /// This rank.
    pub(crate) me: usize,
}

impl Inbox<'_> {
    /// The elements rank `q` (a peer) sent, which must number `expected`.
    ///
    /// # Errors
    /// [`CommError::Transport`] when the payload has another length or
    /// belongs to another call (the records agreed, so this means a
    /// corrupted or stale message).
    pub(crate) fn from<T: Element>(
        &self,
        op: OpKind,
        q: usize,
        expected: usize,
    ) -> Result<&[T], CommError> {
        let s = &self.slots[q * self.slot..(q + 1) * self.slot];
        let bytes = s[self.record] as usize;
        let want = expected.saturating_mul(size_of::<T>());
        let room = (self.slot - self.record).saturating_sub(2) * 8;
        // The record's first word is the call's sequence number.
        let (seq, record_seq) = (s.get(self.record + 1).copied(), s[0]);
        let problem = if bytes != want || bytes > room {
            Some(format!(
                "has {bytes} bytes where the agreed call needs {want}"
            ))
        } else if seq != Some(record_seq) {
            Some(format!(
                "belongs to call {} where the agreed call is {record_seq}",
                seq.unwrap_or(u64::MAX)
            ))
        } else {
            None
        };
        if let Some(problem) = problem {
            return Err(CommError::Transport {
                op,
                rank: self.me,
                message: format!("rank {q}'s data sent with its call record {problem}"),
                context: ErrorContext::none(),
            });
        }
        let words = &s[self.record + 2..];
        let all: &[u8] = bytemuck::cast_slice(words);
        // The payload starts on an 8-byte word: aligned for every element.
        Ok(bytemuck::cast_slice(&all[..bytes]))
    }
}

/// Reduce `inputs` (one slice per rank, in rank order, each `out.len()`
/// long) into `out` with the local transport's kernel: the same bits on
/// every rank.
pub(crate) fn reduce_blocks<T: Element>(inputs: &[&[T]], out: &mut [T], op: ReduceOp) {
    let len = out.len();
    assert!(
        inputs.iter().all(|x| x.len() == len),
        "blocks of one length"
    );
    let ptrs: Vec<*const T> = inputs.iter().map(|x| x.as_ptr()).collect();
    // SAFETY: every input holds `len` elements (asserted) and is not
    // written during the call (shared borrows); `out` is exclusively
    // borrowed, holds `len` elements and so aliases no input.
    unsafe { crate::local::kernels::reduce(&ptrs, &[out.as_mut_ptr()], len, op) }
}

/// Reduce in place: `inputs` in rank order, where `None` stands for `buf`
/// itself (this rank's contribution), each `buf.len()` long; the result
/// replaces `buf`.
pub(crate) fn reduce_in_place<T: Element>(inputs: &[Option<&[T]>], buf: &mut [T], op: ReduceOp) {
    let len = buf.len();
    assert!(
        inputs.iter().flatten().all(|x| x.len() == len),
        "blocks of one length"
    );
    let out = buf.as_mut_ptr();
    let ptrs: Vec<*const T> = inputs
        .iter()
        .map(|x| x.map_or(out as *const T, |s| s.as_ptr()))
        .collect();
    // SAFETY: valid: every pointer covers `len` elements (asserted); unaliased:
    // peers' inputs are unwritten shared borrows, `buf` is exclusively ours
    // and the kernel reads each chunk before writing it (output = input).
    unsafe { crate::local::kernels::reduce(&ptrs, &[out], len, op) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::validate::CountList;
    use crate::{DType, Fingerprint};

    fn call(op: OpKind, send: usize, recv: usize, counts: &[usize]) -> CallArgs<'_> {
        CallArgs {
            fp: Fingerprint::new(0, op, Some(DType::F32), 0),
            send_len: send,
            recv_len: recv,
            counts: CountList::whole(counts),
            counts2: CountList::whole(counts),
        }
    }

    #[test]
    fn the_largest_message_follows_each_operation() {
        let n = 4;
        assert_eq!(largest_message(&call(OpKind::AllReduce, 0, 10, &[]), n), 40);
        assert_eq!(largest_message(&call(OpKind::AllGather, 3, 12, &[]), n), 12);
        assert_eq!(largest_message(&call(OpKind::AllToAll, 8, 8, &[]), n), 8);
        assert_eq!(
            largest_message(&call(OpKind::AllToAllV, 9, 9, &[1, 5, 3, 0]), n),
            20
        );
        assert_eq!(largest_message(&call(OpKind::Barrier, 0, 0, &[]), n), 0);
        // 1000 f32 fit, 1001 do not; nor do more than INLINE_RANKS ranks.
        assert!(inline_ok(&call(OpKind::AllReduce, 0, 1000, &[]), 2));
        assert!(!inline_ok(&call(OpKind::AllReduce, 0, 1001, &[]), 2));
        assert!(!inline_ok(
            &call(OpKind::AllReduce, 0, 1, &[]),
            INLINE_RANKS + 1
        ));
        assert!(!inline_ok(&call(OpKind::Split, 0, 0, &[]), 2));
    }

    #[test]
    fn blocks_that_do_not_fit_send_nothing() {
        let buf = [1u8, 2, 3, 4, 5];
        match blocks(&buf, [2, 0, 3]) {
            Parcel::PerPeer(v) => assert_eq!(v, [&[1u8, 2][..], &[], &[3, 4, 5]]),
            _ => panic!("blocks that fit"),
        }
        assert!(matches!(blocks(&buf, [2, 4]), Parcel::None));
        assert!(matches!(blocks(&buf, [usize::MAX, 2]), Parcel::None));
    }

    #[test]
    fn a_payload_of_the_wrong_length_is_an_error_not_a_read_past_it() {
        let (record, n) = (3, 2);
        let slot = slot_words(record, n);
        let mut slots = vec![0u64; 2 * slot];
        // Rank 1's record of call 5 and its payload for call 5: 2 f32 (8
        // bytes), 1.0 and 2.0.
        slots[slot] = 5;
        slots[slot + record] = 8;
        slots[slot + record + 1] = 5;
        let two = [1f32, 2.0];
        slots[slot + record + 2] = bytemuck::cast::<[f32; 2], u64>(two);
        let inbox = Inbox {
            slots: &slots,
            slot,
            record,
            me: 0,
        };
        assert_eq!(inbox.from::<f32>(OpKind::AllGather, 1, 2).unwrap(), &two);
        assert!(matches!(
            inbox.from::<f32>(OpKind::AllGather, 1, 3),
            Err(CommError::Transport { .. })
        ));
        // A payload of another call (an earlier one, left unreceived) is
        // refused, never used.
        slots[slot + record + 1] = 4;
        let inbox = Inbox {
            slots: &slots,
            slot,
            record,
            me: 0,
        };
        match inbox.from::<f32>(OpKind::AllGather, 1, 2) {
            Err(CommError::Transport { message, .. }) => {
                assert!(message.contains("belongs to call 4"), "{message}")
            }
            other => panic!("{other:?}"),
        }
        // A length word past the slot is refused too.
        slots[slot + record] = u64::MAX;
        let inbox = Inbox {
            slots: &slots,
            slot,
            record,
            me: 0,
        };
        assert!(inbox.from::<u8>(OpKind::AllGather, 1, usize::MAX).is_err());
    }

    #[test]
    fn reductions_run_in_rank_order_with_half_precision_in_f32() {
        let a = [half::f16::from_f32(2048.0); 3];
        let b = [half::f16::from_f32(1.0); 3];
        let mut out = [half::f16::ZERO; 3];
        // 2048 + 1 + 1 in f16 steps would stay 2048; in f32 it is 2050.
        reduce_blocks(&[&a, &b, &b], &mut out, ReduceOp::Sum);
        assert_eq!(out, [half::f16::from_f32(2050.0); 3]);
        let mut out = [0u8; 1];
        reduce_blocks(&[&[200u8], &[100], &[1]], &mut out, ReduceOp::Sum);
        assert_eq!(out, [45]);
        // In place, this rank (None) second: averaged over three.
        let mut buf = [3f32, 6.0];
        reduce_in_place(
            &[Some(&[0f32, 3.0][..]), None, Some(&[0.0, 0.0])],
            &mut buf,
            ReduceOp::Mean,
        );
        assert_eq!(buf, [1.0, 3.0]);
    }
}
