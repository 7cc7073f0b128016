//! Argument checks of the local transport. They run on every rank over all
//! ranks' published slots, in rank order, so every rank finds the same first
//! problem and reports the same error (but for the reporting rank).

use super::group::Slot;
use crate::{BufferRole, CommError, ErrorContext, InvalidArgument, OpKind, ReduceOp};

/// Every rank entered the same kind of call.
pub(crate) fn same_call(slots: &[Slot], me: usize) -> Result<(), CommError> {
    let first = &slots[0].fp;
    for (r, s) in slots.iter().enumerate().skip(1) {
        if !first.same_call(&s.fp) {
            return Err(CommError::Desync {
                op: slots[me].fp.op,
                rank: me,
                first_rank: 0,
                first: Box::new(*first),
                other_rank: r,
                other: Box::new(s.fp),
                context: ErrorContext::none(),
            });
        }
    }
    Ok(())
}

/// Every rank's fingerprint count equals rank 0's.
pub(crate) fn equal_counts(slots: &[Slot], op: OpKind, me: usize) -> Result<(), CommError> {
    let c0 = slots[0].fp.count;
    match slots.iter().enumerate().find(|(_, s)| s.fp.count != c0) {
        Some((r, s)) => Err(CommError::CountMismatch {
            op,
            rank: me,
            offender: r,
            peer: 0,
            expected: s.fp.count,
            got: c0,
            context: ErrorContext::none(),
        }),
        None => Ok(()),
    }
}

/// A reduction is defined for the element type.
pub(crate) fn reduction(slots: &[Slot], me: usize) -> Result<(), CommError> {
    let fp = &slots[0].fp;
    if let (Some(ReduceOp::Avg), Some(dtype)) = (fp.reduce, fp.dtype)
        && !dtype.is_float()
    {
        return Err(CommError::InvalidArgument {
            op: fp.op,
            rank: me,
            reason: InvalidArgument::AverageOfIntegers { dtype },
            context: ErrorContext::none(),
        });
    }
    Ok(())
}

/// A length error about `offender`'s buffer.
pub(crate) fn length(
    op: OpKind,
    me: usize,
    offender: usize,
    buffer: BufferRole,
    expected: usize,
    got: usize,
) -> Result<(), CommError> {
    if expected == got {
        Ok(())
    } else {
        Err(CommError::LengthMismatch {
            op,
            rank: me,
            offender,
            buffer,
            expected,
            got,
            context: ErrorContext::none(),
        })
    }
}

/// Each rank's count list has one entry per rank.
///
/// # Safety
/// Between the two barrier episodes of the call.
pub(crate) unsafe fn count_lists(
    slots: &[Slot],
    op: OpKind,
    me: usize,
    second: bool,
) -> Result<(), CommError> {
    let n = slots.len();
    for (r, s) in slots.iter().enumerate() {
        let (len, role) = if second {
            (s.counts2_len, BufferRole::ReceiveCounts)
        } else {
            (
                s.counts_len,
                if op == OpKind::AllToAllV {
                    BufferRole::SendCounts
                } else {
                    BufferRole::ReceiveCounts
                },
            )
        };
        length(op, me, r, role, n, len)?;
    }
    Ok(())
}

/// The largest element count a buffer of `slots`' element type can hold.
fn max_elements(slots: &[Slot]) -> usize {
    let size = slots[0].fp.dtype.map_or(1, |d| d.size_in_bytes());
    isize::MAX as usize / size
}

fn too_large(op: OpKind, me: usize, count: usize, max: usize) -> CommError {
    CommError::InvalidArgument {
        op,
        rank: me,
        reason: InvalidArgument::TooLarge { count, max },
        context: ErrorContext::none(),
    }
}

/// The sum of a count list, checked: a sum that overflows, or that no
/// buffer could hold, is [`InvalidArgument::TooLarge`] (never a wrapped
/// count that would later address memory out of bounds).
pub(crate) fn total(
    op: OpKind,
    me: usize,
    counts: &[usize],
    max: usize,
) -> Result<usize, CommError> {
    match counts.iter().try_fold(0usize, |a, &c| a.checked_add(c)) {
        Some(t) if t <= max => Ok(t),
        Some(t) => Err(too_large(op, me, t, max)),
        None => Err(too_large(
            op,
            me,
            counts.iter().fold(0usize, |a, &c| a.saturating_add(c)),
            max,
        )),
    }
}

/// `blocks × len`, checked like [`total`].
pub(crate) fn product(
    op: OpKind,
    me: usize,
    blocks: usize,
    len: usize,
    max: usize,
) -> Result<usize, CommError> {
    match blocks.checked_mul(len) {
        Some(t) if t <= max => Ok(t),
        Some(t) => Err(too_large(op, me, t, max)),
        None => Err(too_large(op, me, usize::MAX, max)),
    }
}

/// The chunk of a reduce-scatter or all-to-all does not divide.
pub(crate) fn divisible(
    op: OpKind,
    me: usize,
    offender: usize,
    len: usize,
    parts: usize,
) -> Result<(), CommError> {
    if len.is_multiple_of(parts) {
        Ok(())
    } else {
        Err(CommError::InvalidArgument {
            op,
            rank: me,
            reason: InvalidArgument::NotDivisible {
                rank: offender,
                len,
                parts,
            },
            context: ErrorContext::none(),
        })
    }
}

/// Every rank's arguments of `all_gather` fit together.
pub(crate) fn all_gather(slots: &[Slot], me: usize) -> Result<(), CommError> {
    let kind = OpKind::AllGather;
    equal_counts(slots, kind, me)?;
    let (n, max) = (slots.len(), max_elements(slots));
    for (r, s) in slots.iter().enumerate() {
        let want = product(kind, me, n, s.send_len, max)?;
        length(kind, me, r, BufferRole::Receive, want, s.recv_len)?;
    }
    Ok(())
}

/// Every rank's arguments of `reduce_scatter` fit together.
pub(crate) fn reduce_scatter(slots: &[Slot], me: usize) -> Result<(), CommError> {
    let kind = OpKind::ReduceScatter;
    equal_counts(slots, kind, me)?;
    reduction(slots, me)?;
    let (n, max) = (slots.len(), max_elements(slots));
    for (r, s) in slots.iter().enumerate() {
        let want = product(kind, me, n, s.recv_len, max)?;
        length(kind, me, r, BufferRole::Send, want, s.send_len)?;
    }
    Ok(())
}

/// Every rank's arguments of `all_to_all_v` fit together.
///
/// Reads the published count lists, so it must run between the two
/// barrier episodes of the call (or on owned copies).
pub(crate) fn all_to_all_v(slots: &[Slot], me: usize) -> Result<(), CommError> {
    let kind = OpKind::AllToAllV;
    // SAFETY: inside the call's barrier window.
    unsafe {
        count_lists(slots, kind, me, false)?;
        count_lists(slots, kind, me, true)?;
        let max = max_elements(slots);
        for (r, s) in slots.iter().enumerate() {
            let sent = total(kind, me, s.counts(), max)?;
            length(kind, me, r, BufferRole::Send, sent, s.send_len)?;
            let received = total(kind, me, s.counts2(), max)?;
            length(kind, me, r, BufferRole::Receive, received, s.recv_len)?;
        }
        for (r, s) in slots.iter().enumerate() {
            for (p, peer) in slots.iter().enumerate() {
                let (expected, got) = (s.counts2()[p], peer.counts()[r]);
                if expected != got {
                    return Err(CommError::CountMismatch {
                        op: kind,
                        rank: me,
                        offender: r,
                        peer: p,
                        expected,
                        got,
                        context: ErrorContext::none(),
                    });
                }
            }
        }
    }
    Ok(())
}

/// Every rank's arguments of `all_reduce` fit together.
pub(crate) fn all_reduce(slots: &[Slot], me: usize) -> Result<(), CommError> {
    let kind = OpKind::AllReduce;
    equal_counts(slots, kind, me)?;
    reduction(slots, me)
}

/// Every rank's count list against what the peers hold: rank `r`'s
/// `counts[p]` must equal `peer_len(p)`, and the sum of its counts must be
/// the length of its own `total_role` buffer (`own_len(r)`).
///
/// # Safety
/// Reads the published count lists: only between the two barrier episodes
/// of the call (or on owned copies).
unsafe fn counts_against(
    slots: &[Slot],
    kind: OpKind,
    me: usize,
    peer_len: fn(&Slot) -> usize,
    total_role: BufferRole,
    own_len: fn(&Slot) -> usize,
) -> Result<(), CommError> {
    // SAFETY: forwarded from the caller.
    unsafe {
        count_lists(slots, kind, me, false)?;
        for (r, s) in slots.iter().enumerate() {
            for (p, peer) in slots.iter().enumerate() {
                let (expected, got) = (s.counts()[p], peer_len(peer));
                if expected != got {
                    return Err(CommError::CountMismatch {
                        op: kind,
                        rank: me,
                        offender: r,
                        peer: p,
                        expected,
                        got,
                        context: ErrorContext::none(),
                    });
                }
            }
            let sum = total(kind, me, s.counts(), max_elements(slots))?;
            length(kind, me, r, total_role, sum, own_len(s))?;
        }
    }
    Ok(())
}

/// Every rank's arguments of `all_gather_v` fit together: rank `r`'s
/// `counts[p]` is what rank `p` sends, and its receive buffer holds them all.
///
/// Reads the published count lists, so it must run between the two
/// barrier episodes of the call (or on owned copies).
pub(crate) fn all_gather_v(slots: &[Slot], me: usize) -> Result<(), CommError> {
    // SAFETY: inside the call's barrier window (see above).
    unsafe {
        counts_against(
            slots,
            OpKind::AllGatherV,
            me,
            |p| p.send_len,
            BufferRole::Receive,
            |s| s.recv_len,
        )
    }
}

/// Every rank's arguments of `reduce_scatter_v` fit together: rank `r`'s
/// `counts[p]` is what rank `p` receives, and its send buffer covers them all.
///
/// Reads the published count lists, so it must run between the two
/// barrier episodes of the call (or on owned copies).
pub(crate) fn reduce_scatter_v(slots: &[Slot], me: usize) -> Result<(), CommError> {
    reduction(slots, me)?;
    // SAFETY: inside the call's barrier window (see above).
    unsafe {
        counts_against(
            slots,
            OpKind::ReduceScatterV,
            me,
            |p| p.recv_len,
            BufferRole::Send,
            |s| s.send_len,
        )
    }
}

/// Every rank's arguments of `broadcast` fit together.
pub(crate) fn broadcast(slots: &[Slot], me: usize, root: usize) -> Result<(), CommError> {
    let kind = OpKind::Broadcast;
    let size = slots.len();
    if root >= size {
        return Err(CommError::InvalidArgument {
            op: kind,
            rank: me,
            reason: InvalidArgument::Root { root, size },
            context: ErrorContext::none(),
        });
    }
    equal_counts(slots, kind, me)
}

/// Every rank's arguments of `all_to_all` fit together.
pub(crate) fn all_to_all(slots: &[Slot], me: usize) -> Result<(), CommError> {
    let kind = OpKind::AllToAll;
    equal_counts(slots, kind, me)?;
    let n = slots.len();
    for (r, s) in slots.iter().enumerate() {
        divisible(kind, me, r, s.send_len, n)?;
        length(kind, me, r, BufferRole::Receive, s.send_len, s.recv_len)?;
    }
    Ok(())
}
/// The checks of whichever collective `slots[me]` describes, after
/// [`same_call`]: used by transports that gather every rank's slot
/// (the MPI transport's debug mode).
///
/// Reads the count lists the slots point to.
#[cfg_attr(not(feature = "mpi"), allow(dead_code))]
pub(crate) fn by_op(slots: &[Slot], me: usize) -> Result<(), CommError> {
    same_call(slots, me)?;
    let fp = slots[me].fp;
    match fp.op {
        OpKind::AllReduce => all_reduce(slots, me),
        OpKind::AllGather => all_gather(slots, me),
        OpKind::AllGatherV => all_gather_v(slots, me),
        OpKind::ReduceScatter => reduce_scatter(slots, me),
        OpKind::ReduceScatterV => reduce_scatter_v(slots, me),
        OpKind::Broadcast => broadcast(slots, me, fp.root.unwrap_or(0)),
        OpKind::AllToAll => all_to_all(slots, me),
        OpKind::AllToAllV => all_to_all_v(slots, me),
        _ => Ok(()),
    }
}
