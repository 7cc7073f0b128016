//! The record exchange that opens every checked MPI collective: each rank
//! sends its call record (fingerprint, buffer lengths, count lists) to
//! every peer and receives theirs, with the deadline. A record that never
//! comes names a rank that did not arrive; the records that came go
//! through the rules every transport applies ([`crate::validate`]), so
//! every rank reports the same error before any data moves.

use std::ffi::{c_int, c_void};
use std::time::Instant;

use mpi::ffi;

use super::raw::count;
use super::wait::{Inflight, ReqKind};
use crate::validate::{self, CallArgs, wire};
use crate::{CommError, DType, ErrorContext};

/// The tag of call records on a communicator's control channel.
pub(crate) const TAG_RECORD: c_int = 10;

/// Where the exchange runs.
pub(crate) struct Channel<'a> {
    pub session: &'a super::session::Session,
    pub ctl: ffi::MPI_Comm,
    pub rank: usize,
    pub size: usize,
}

/// Exchange records with every peer and check them all.
///
/// # Errors
/// [`CommError::Timeout`] naming the ranks whose record did not come by the
/// deadline; the argument errors of [`validate::verdict`], the same on
/// every rank;
/// [`CommError::Transport`] when MPI fails.
pub(crate) fn agree(
    ch: &Channel<'_>,
    call: &CallArgs<'_>,
    deadline: Instant,
) -> Result<(), CommError> {
    let (me, n, op) = (ch.rank, ch.size, call.fp.op);
    let mine = wire::encode(call, n);
    let len = count(op, me, mine.len())?;
    let theirs = (0..n).map(|_| vec![0i64; mine.len()]).collect();
    let mut fl = Inflight::new(ch.session, Records { mine, theirs });
    let b = fl.bufs();
    // Every pointer MPI gets, taken before any request is posted.
    // SAFETY: `b` is owned by `fl`, which keeps it alive until every request
    // is complete (or leaks it); no request is in flight yet.
    let (recv_ptrs, send_ptr): (Vec<*mut c_void>, *const c_void) = unsafe {
        let r = &mut *b;
        let recv = r.theirs.iter_mut().map(|v| v.as_mut_ptr().cast()).collect();
        (recv, r.mine.as_ptr().cast())
    };
    let i64t = super::raw::datatype(DType::I64);
    // Requests 0..peers: receives from every peer; then sends to each.
    let peers: Vec<usize> = (0..n).filter(|&p| p != me).collect();
    for &p in &peers {
        let buf = recv_ptrs[p];
        fl.post(op, me, ReqKind::Recv, |r| {
            // SAFETY: `buf` holds `len` words that only MPI touches until this
            // receive completes; `p` is a rank of `ctl`.
            unsafe { ffi::MPI_Irecv(buf, len, i64t, p as c_int, TAG_RECORD, ch.ctl, r) }
        })?;
    }
    for &p in &peers {
        fl.post(op, me, ReqKind::Send, |r| {
            // SAFETY: `send_ptr` holds `len` words, unchanged until the sends complete.
            unsafe { ffi::MPI_Isend(send_ptr, len, i64t, p as c_int, TAG_RECORD, ch.ctl, r) }
        })?;
    }
    let pending = fl.wait(op, me, 0..fl.len(), deadline)?;
    if !pending.is_empty() {
        let (recvs, sends): (Vec<usize>, Vec<usize>) =
            pending.iter().partition(|&&i| i < peers.len());
        // A record that did not come names its rank; if every record came
        // but a send of ours is stuck, its destination is the one missing.
        let missing = if recvs.is_empty() {
            sends.iter().map(|&i| peers[i - peers.len()]).collect()
        } else {
            recvs.iter().map(|&i| peers[i]).collect()
        };
        drop(fl); // abandons the pending requests
        return Err(CommError::Timeout {
            op,
            rank: me,
            missing,
            waited: ch.session.timeout,
            context: ErrorContext::none(),
        });
    }
    // SAFETY: every request is complete: nothing but us touches the records.
    let records = unsafe { &mut *b };
    records.theirs[me] = std::mem::take(&mut records.mine);
    validate_records(&records.theirs, me)
}

/// Every rank's call record: this rank's own and those received.
struct Records {
    mine: Vec<i64>,
    theirs: Vec<Vec<i64>>,
}

/// Decode every rank's record and pass the verdict on them.
fn validate_records(records: &[Vec<i64>], me: usize) -> Result<(), CommError> {
    let n = records.len();
    let decoded: Vec<wire::Decoded> = records.iter().map(|w| wire::decode(w, n)).collect();
    let calls: Vec<CallArgs<'_>> = decoded.iter().map(wire::Decoded::args).collect();
    validate::verdict(&calls, me)
}
