//! The record exchange that opens every checked MPI collective: each rank
//! sends its call record (fingerprint, buffer lengths, count lists) to
//! every peer and receives theirs, with the deadline. A record that never
//! comes names a rank that did not arrive; records that disagree are
//! checked as the local transport checks its slots, so every rank reports
//! the same error before any data moves.

use std::ffi::{c_int, c_void};
use std::time::Instant;

use mpi::ffi;

use super::raw::count;
use super::wait::{Inflight, ReqKind};
use crate::local::group::Slot;
use crate::local::validate;
use crate::{CommError, DType, ErrorContext, Fingerprint, OpKind, ReduceOp};

/// The tag of call records on a communicator's control channel.
pub(crate) const TAG_RECORD: c_int = 10;

/// What a call tells its peers about itself.
pub(crate) struct Call<'a> {
    pub fp: Fingerprint,
    pub send_len: usize,
    pub recv_len: usize,
    pub counts: &'a [usize],
    pub counts2: &'a [usize],
}

/// Where the exchange runs.
pub(crate) struct Channel<'a> {
    pub session: &'a super::session::Session,
    pub ctl: ffi::MPI_Comm,
    pub rank: usize,
    pub size: usize,
}

fn words(n: usize) -> usize {
    10 + 2 * n
}

fn encode(call: &Call<'_>, n: usize) -> Vec<i64> {
    let fp = call.fp;
    let mut w = vec![0i64; words(n)];
    w[0] = fp.seq as i64;
    w[1] = fp.op.code() as i64;
    w[2] = fp.dtype.map_or(0, |d| d.code() as i64 + 1);
    w[3] = fp.count as i64;
    w[4] = fp.reduce.map_or(0, |r| {
        ReduceOp::ALL.iter().position(|&o| o == r).expect("listed") as i64 + 1
    });
    w[5] = fp.root.map_or(0, |r| r as i64 + 1);
    w[6] = call.send_len as i64;
    w[7] = call.recv_len as i64;
    w[8] = call.counts.len() as i64;
    w[9] = call.counts2.len() as i64;
    for (x, &c) in w[10..10 + n].iter_mut().zip(call.counts) {
        *x = c as i64;
    }
    for (x, &c) in w[10 + n..].iter_mut().zip(call.counts2) {
        *x = c as i64;
    }
    w
}

/// Exchange records with every peer and check them all.
///
/// # Errors
/// [`CommError::Timeout`] naming the ranks whose record did not come by the
/// deadline; the local transport's argument errors, the same on every rank;
/// [`CommError::Transport`] when MPI fails.
pub(crate) fn agree(ch: &Channel<'_>, call: &Call<'_>, deadline: Instant) -> Result<(), CommError> {
    let (me, n, op) = (ch.rank, ch.size, call.fp.op);
    let mine = encode(call, n);
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

/// Decode every rank's record into slots and run the local transport's
/// checks on them.
fn validate_records(records: &[Vec<i64>], me: usize) -> Result<(), CommError> {
    let n = records.len();
    let lists: Vec<(Vec<usize>, Vec<usize>)> = records
        .iter()
        .map(|w| {
            let a = w[10..10 + n].iter().map(|&x| x as usize).collect();
            let b = w[10 + n..].iter().map(|&x| x as usize).collect();
            (a, b)
        })
        .collect();
    let slots: Vec<Slot> = records
        .iter()
        .zip(&lists)
        .map(|(w, (a, b))| {
            let op = OpKind::from_code(w[1] as u8).unwrap_or(OpKind::Init);
            let mut f = Fingerprint::new(
                w[0] as u64,
                op,
                (w[2] > 0)
                    .then(|| DType::from_code(w[2] as u8 - 1))
                    .flatten(),
                w[3] as usize,
            );
            f.reduce = (w[4] > 0).then(|| ReduceOp::ALL[(w[4] as usize - 1).min(4)]);
            f.root = (w[5] > 0).then(|| w[5] as usize - 1);
            let mut s = Slot::new(f);
            s.send_len = w[6] as usize;
            s.recv_len = w[7] as usize;
            // A list whose length is not `n` is reported by `count_lists`
            // before any of its entries is read (`by_op` checks lengths
            // first), so no entry past the `n` decoded here is ever read.
            s.counts = a.as_ptr();
            s.counts_len = w[8] as usize;
            s.counts2 = b.as_ptr();
            s.counts2_len = w[9] as usize;
            s
        })
        .collect();
    validate::by_op(&slots, me)
}
