//! Argument checks of the local transport. They run on every rank over all
//! ranks' published slots, in rank order, so every rank finds the same first
//! problem and reports the same error (but for the reporting rank).

use super::group::Slot;
use crate::{BufferRole, CommError, InvalidArgument, OpKind, ReduceOp};

/// Every rank entered the same kind of call.
pub(crate) fn same_call(slots: &[Slot], me: usize) -> Result<(), CommError> {
    let first = &slots[0].fp;
    for (r, s) in slots.iter().enumerate().skip(1) {
        if !first.same_call(&s.fp) {
            return Err(CommError::Desync {
                op: slots[me].fp.op,
                rank: me,
                first_rank: 0,
                first: *first,
                other_rank: r,
                other: s.fp,
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

/// The chunk of a reduce-scatter or all-to-all does not divide.
pub(crate) fn divisible(
    op: OpKind,
    me: usize,
    offender: usize,
    len: usize,
    parts: usize,
) -> Result<(), CommError> {
    if len % parts == 0 {
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
        })
    }
}
