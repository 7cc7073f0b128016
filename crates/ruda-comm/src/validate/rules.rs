//! The checks of every collective, over every rank's [`CallArgs`] in rank
//! order: each rank runs them on the same list and so reaches the same
//! verdict.

use super::args::{CallArgs, CountList};
use super::sizes::{max_elements, product, total};
use crate::{BufferRole, CommError, ErrorContext, InvalidArgument, OpKind, ReduceOp};

/// The verdict on a collective call: every rank entered the same call
/// ([`CommError::Desync`] otherwise), then the checks of the operation
/// `calls[me]` names. Operations without arguments to check beyond their
/// fingerprint (barrier, split, object gathers) pass once they agree.
///
/// The fingerprint check runs first for every operation, whatever it is:
/// the local transport's object gathers rely on it for soundness (a peer's
/// value is read as this rank's type only after every fingerprint named
/// the same type).
///
/// # Errors
/// The first problem found, as reported by rank `me`.
pub(crate) fn verdict(calls: &[CallArgs<'_>], me: usize) -> Result<(), CommError> {
    same_call(calls, me)?;
    let fp = calls[me].fp;
    match fp.op {
        OpKind::AllReduce => all_reduce(calls, me),
        OpKind::AllGather => all_gather(calls, me),
        OpKind::AllGatherV => all_gather_v(calls, me),
        OpKind::ReduceScatter => reduce_scatter(calls, me),
        OpKind::ReduceScatterV => reduce_scatter_v(calls, me),
        OpKind::Broadcast => broadcast(calls, me, fp.root.unwrap_or(0)),
        OpKind::AllToAll => all_to_all(calls, me),
        OpKind::AllToAllV => all_to_all_v(calls, me),
        _ => Ok(()),
    }
}

/// Every rank entered the same kind of call.
fn same_call(calls: &[CallArgs<'_>], me: usize) -> Result<(), CommError> {
    let first = &calls[0].fp;
    for (r, s) in calls.iter().enumerate().skip(1) {
        if !first.same_call(&s.fp) {
            return Err(CommError::Desync {
                op: calls[me].fp.op,
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

/// Rank `offender`'s count for `peer` is what the peer says.
fn count_match(
    op: OpKind,
    me: usize,
    offender: usize,
    peer: usize,
    expected: usize,
    got: usize,
) -> Result<(), CommError> {
    if expected == got {
        return Ok(());
    }
    Err(CommError::CountMismatch {
        op,
        rank: me,
        offender,
        peer,
        expected,
        got,
        context: ErrorContext::none(),
    })
}

/// Every rank's fingerprint count equals rank 0's.
fn equal_counts(calls: &[CallArgs<'_>], op: OpKind, me: usize) -> Result<(), CommError> {
    let c0 = calls[0].fp.count;
    match calls.iter().enumerate().find(|(_, s)| s.fp.count != c0) {
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
fn reduction(calls: &[CallArgs<'_>], me: usize) -> Result<(), CommError> {
    let fp = &calls[0].fp;
    if let (Some(ReduceOp::Mean), Some(dtype)) = (fp.reduce, fp.dtype)
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
        Err(mismatch(op, me, offender, buffer, expected, got))
    }
}

fn mismatch(
    op: OpKind,
    me: usize,
    offender: usize,
    buffer: BufferRole,
    expected: usize,
    got: usize,
) -> CommError {
    CommError::LengthMismatch {
        op,
        rank: me,
        offender,
        buffer,
        expected,
        got,
        context: ErrorContext::none(),
    }
}

/// Each rank's count list (the second one when `second`) has one entry per
/// rank: the lists, each exactly one entry per rank.
fn count_lists<'a>(
    calls: &[CallArgs<'a>],
    op: OpKind,
    me: usize,
    second: bool,
) -> Result<Vec<&'a [usize]>, CommError> {
    let n = calls.len();
    let role = match (second, op) {
        (false, OpKind::AllToAllV) => BufferRole::SendCounts,
        _ => BufferRole::ReceiveCounts,
    };
    calls
        .iter()
        .enumerate()
        .map(|(r, s)| {
            let list: CountList<'a> = if second { s.counts2 } else { s.counts };
            length(op, me, r, role, n, list.len)?;
            // A list of the right length whose entries did not all arrive
            // cannot be checked: report it as the length that arrived.
            list.exactly(n)
                .ok_or_else(|| mismatch(op, me, r, role, n, list.values.len()))
        })
        .collect()
}

/// The largest element count a buffer of the call's element type can hold.
fn max_of(calls: &[CallArgs<'_>]) -> usize {
    max_elements(calls[0].fp.dtype.map_or(1, |d| d.size_in_bytes()))
}

/// The chunk of a reduce-scatter or all-to-all does not divide.
fn divisible(
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
fn all_gather(calls: &[CallArgs<'_>], me: usize) -> Result<(), CommError> {
    let kind = OpKind::AllGather;
    equal_counts(calls, kind, me)?;
    let (n, max) = (calls.len(), max_of(calls));
    for (r, s) in calls.iter().enumerate() {
        let want = product(kind, me, n, s.send_len, max)?;
        length(kind, me, r, BufferRole::Receive, want, s.recv_len)?;
    }
    Ok(())
}

/// Every rank's arguments of `reduce_scatter` fit together.
fn reduce_scatter(calls: &[CallArgs<'_>], me: usize) -> Result<(), CommError> {
    let kind = OpKind::ReduceScatter;
    equal_counts(calls, kind, me)?;
    reduction(calls, me)?;
    let (n, max) = (calls.len(), max_of(calls));
    for (r, s) in calls.iter().enumerate() {
        let want = product(kind, me, n, s.recv_len, max)?;
        length(kind, me, r, BufferRole::Send, want, s.send_len)?;
    }
    Ok(())
}

/// Every rank's arguments of `all_to_all_v` fit together.
fn all_to_all_v(calls: &[CallArgs<'_>], me: usize) -> Result<(), CommError> {
    let kind = OpKind::AllToAllV;
    let sends = count_lists(calls, kind, me, false)?;
    let recvs = count_lists(calls, kind, me, true)?;
    let max = max_of(calls);
    for (r, s) in calls.iter().enumerate() {
        let sent = total(kind, me, sends[r], max)?;
        length(kind, me, r, BufferRole::Send, sent, s.send_len)?;
        let received = total(kind, me, recvs[r], max)?;
        length(kind, me, r, BufferRole::Receive, received, s.recv_len)?;
    }
    for r in 0..calls.len() {
        for p in 0..calls.len() {
            let (expected, got) = (recvs[r][p], sends[p][r]);
            count_match(kind, me, r, p, expected, got)?;
        }
    }
    Ok(())
}

/// Every rank's arguments of `all_reduce` fit together.
fn all_reduce(calls: &[CallArgs<'_>], me: usize) -> Result<(), CommError> {
    let kind = OpKind::AllReduce;
    equal_counts(calls, kind, me)?;
    reduction(calls, me)
}

/// Every rank's count list against what the peers hold: rank `r`'s
/// `counts[p]` must equal `peer_len(p)`, and the sum of its counts must be
/// the length of its own `total_role` buffer (`own_len(r)`).
fn counts_against(
    calls: &[CallArgs<'_>],
    kind: OpKind,
    me: usize,
    peer_len: fn(&CallArgs<'_>) -> usize,
    total_role: BufferRole,
    own_len: fn(&CallArgs<'_>) -> usize,
) -> Result<(), CommError> {
    let lists = count_lists(calls, kind, me, false)?;
    for (r, s) in calls.iter().enumerate() {
        for (p, peer) in calls.iter().enumerate() {
            let (expected, got) = (lists[r][p], peer_len(peer));
            count_match(kind, me, r, p, expected, got)?;
        }
        let sum = total(kind, me, lists[r], max_of(calls))?;
        length(kind, me, r, total_role, sum, own_len(s))?;
    }
    Ok(())
}

/// Every rank's arguments of `all_gather_v` fit together: rank `r`'s
/// `counts[p]` is what rank `p` sends, and its receive buffer holds them all.
fn all_gather_v(calls: &[CallArgs<'_>], me: usize) -> Result<(), CommError> {
    counts_against(
        calls,
        OpKind::AllGatherV,
        me,
        |p| p.send_len,
        BufferRole::Receive,
        |s| s.recv_len,
    )
}

/// Every rank's arguments of `reduce_scatter_v` fit together: rank `r`'s
/// `counts[p]` is what rank `p` receives, and its send buffer covers them all.
fn reduce_scatter_v(calls: &[CallArgs<'_>], me: usize) -> Result<(), CommError> {
    reduction(calls, me)?;
    counts_against(
        calls,
        OpKind::ReduceScatterV,
        me,
        |p| p.recv_len,
        BufferRole::Send,
        |s| s.send_len,
    )
}

/// Every rank's arguments of `broadcast` fit together.
fn broadcast(calls: &[CallArgs<'_>], me: usize, root: usize) -> Result<(), CommError> {
    let kind = OpKind::Broadcast;
    let size = calls.len();
    if root >= size {
        return Err(CommError::InvalidArgument {
            op: kind,
            rank: me,
            reason: InvalidArgument::Root { root, size },
            context: ErrorContext::none(),
        });
    }
    equal_counts(calls, kind, me)
}

/// Every rank's arguments of `all_to_all` fit together.
fn all_to_all(calls: &[CallArgs<'_>], me: usize) -> Result<(), CommError> {
    let kind = OpKind::AllToAll;
    equal_counts(calls, kind, me)?;
    let n = calls.len();
    for (r, s) in calls.iter().enumerate() {
        divisible(kind, me, r, s.send_len, n)?;
        length(kind, me, r, BufferRole::Receive, s.send_len, s.recv_len)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DType, Fingerprint};

    fn a2av<'a>(
        sends: CountList<'a>,
        recvs: CountList<'a>,
        send: usize,
        recv: usize,
    ) -> CallArgs<'a> {
        let mut c = CallArgs::new(Fingerprint::new(3, OpKind::AllToAllV, Some(DType::F32), 0));
        (c.counts, c.counts2, c.send_len, c.recv_len) = (sends, recvs, send, recv);
        c
    }

    #[test]
    fn every_rank_reaches_the_same_verdict_naming_the_offender() {
        // Rank 1 sends 2 to rank 0, but rank 0 expects 1 from it.
        let (s0, r0, s1, r1) = ([1, 1], [1, 1], [2, 1], [1, 1]);
        let calls = [
            a2av(CountList::whole(&s0), CountList::whole(&r0), 2, 2),
            a2av(CountList::whole(&s1), CountList::whole(&r1), 3, 2),
        ];
        for me in 0..2 {
            match verdict(&calls, me) {
                Err(CommError::CountMismatch {
                    rank,
                    offender,
                    peer,
                    expected,
                    got,
                    ..
                }) => {
                    assert_eq!((rank, offender, peer, expected, got), (me, 0, 1, 1, 2));
                }
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn a_list_of_the_wrong_length_is_reported_before_any_entry_is_read() {
        // Rank 1 declared 3 send counts in a group of 2; only 2 arrived.
        let (s0, r0, s1, r1) = ([0, 0], [0, 0], [0, 0, 5], [0, 0]);
        let truncated = CountList {
            len: 3,
            values: &s1[..2],
        };
        let calls = [
            a2av(CountList::whole(&s0), CountList::whole(&r0), 0, 0),
            a2av(truncated, CountList::whole(&r1), 5, 0),
        ];
        match verdict(&calls, 0) {
            Err(CommError::LengthMismatch {
                offender,
                buffer,
                expected,
                got,
                ..
            }) => {
                assert_eq!(
                    (offender, buffer, expected, got),
                    (1, BufferRole::SendCounts, 2, 3)
                );
            }
            other => panic!("{other:?}"),
        }
        // A list whose declared length is right but whose entries did not
        // all arrive is refused, not read past its end.
        let short = CountList {
            len: 2,
            values: &s1[..1],
        };
        let calls = [
            a2av(CountList::whole(&s0), CountList::whole(&r0), 0, 0),
            a2av(short, CountList::whole(&r1), 0, 0),
        ];
        assert!(matches!(
            verdict(&calls, 1),
            Err(CommError::LengthMismatch {
                offender: 1,
                got: 1,
                ..
            })
        ));
    }

    #[test]
    fn calls_that_differ_are_a_desync_and_argument_free_calls_pass() {
        let barrier = |seq| CallArgs::new(Fingerprint::new(seq, OpKind::Barrier, None, 0));
        assert!(verdict(&[barrier(4), barrier(4)], 1).is_ok());
        assert!(matches!(
            verdict(&[barrier(4), barrier(5)], 0),
            Err(CommError::Desync { other_rank: 1, .. })
        ));
    }
}
