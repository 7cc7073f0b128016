//! The data phase of a collective: MPI's nonblocking collective
//! (`MPI_Iallreduce`, `MPI_Ibcast`, …), tested in a loop with the MPI lock
//! held only around each call.
//!
//! With the per-call checks on, the wait has the call's deadline. Every
//! rank's record arrived, yet a peer may still be missing from the data:
//! one whose own record exchange timed out a moment earlier (its deadline
//! passed just before the last record reached it) gives up and never
//! starts the collective. A blocking call would then wait for it with no
//! deadline. Here the wait ends at the deadline with a
//! [`CommError::Timeout`]; since MPI can neither cancel nor free a pending
//! collective, MPI works on copies of the caller's buffers that this module
//! owns: on success the result is copied out, on a timeout the copies (and
//! the count arrays) are leaked, because peers may still complete the
//! collective and MPI would then read and write them. The caller's buffers
//! are never touched by MPI after the call returns.
//!
//! With the checks off (the `unsafe` `MpiWorldBuilder::unchecked`, whose
//! contract says every rank makes matching calls), MPI works on the
//! caller's buffers directly and the wait has no deadline.

use std::ffi::{c_int, c_void};
use std::time::{Duration, Instant};

use mpi::ffi;

use super::session::Session;
use super::wait::{Inflight, ReqKind};
use crate::{CommError, ErrorContext, OpKind};

/// A word that zero-length buffers point to (never read or written: every
/// count is then zero). An empty slice's dangling pointer can equal Open
/// MPI's `MPI_IN_PLACE` (`(void *) 1`).
static EMPTY: [u64; 1] = [0];

/// The pointers a collective's requests get.
pub(crate) struct Ptrs {
    /// What MPI reads (`EMPTY` when there is nothing).
    pub send: *const c_void,
    /// What MPI writes (`EMPTY` when there is nothing).
    pub recv: *mut c_void,
    /// The count and displacement arrays, in the order given.
    pub ints: Vec<*const c_int>,
}

/// One collective's data phase.
pub(crate) struct Phase<'a> {
    /// The operation (for errors).
    pub op: OpKind,
    /// The call's deadline with checks on; `None` without them.
    pub deadline: Option<Instant>,
    /// The bytes MPI reads.
    pub send: &'a [u8],
    /// The bytes MPI writes.
    pub recv: &'a mut [u8],
    /// Whether MPI also reads `recv` (in place, broadcast).
    pub recv_in: bool,
    /// Count and displacement arrays, which MPI reads until completion.
    pub ints: Vec<Vec<c_int>>,
    /// How many requests `start` posts (one per chunk).
    pub requests: usize,
}

impl<'a> Phase<'a> {
    /// One request, no count arrays, `recv` write-only.
    pub(crate) fn new(
        op: OpKind,
        deadline: Option<Instant>,
        send: &'a [u8],
        recv: &'a mut [u8],
    ) -> Self {
        Phase {
            op,
            deadline,
            send,
            recv,
            recv_in: false,
            ints: Vec::new(),
            requests: 1,
        }
    }
}

/// Copies of the buffers that MPI works on with checks on.
struct Staged {
    send: Vec<u64>,
    recv: Vec<u64>,
    ints: Vec<Vec<c_int>>,
}

fn send_ptr(p: *const u64, bytes: usize) -> *const c_void {
    if bytes == 0 {
        EMPTY.as_ptr().cast()
    } else {
        p.cast()
    }
}

fn recv_ptr(p: *mut u64, bytes: usize) -> *mut c_void {
    if bytes == 0 {
        EMPTY.as_ptr() as *mut c_void
    } else {
        p.cast()
    }
}

/// A staging buffer for `bytes` in 8-byte words (so that every element type
/// is aligned), from the session's pool; with `copy`, holding `bytes`.
fn words(session: &Session, bytes: &[u8], copy: bool) -> Vec<u64> {
    let mut w = session.staging(bytes.len().div_ceil(8));
    if copy {
        bytemuck::cast_slice_mut::<u64, u8>(&mut w)[..bytes.len()].copy_from_slice(bytes);
    }
    w
}

/// Run the data phase: post request `i` for `i` in `0..phase.requests`
/// with `start(ptrs, i, request)`, then wait for all of them.
///
/// # Errors
/// [`CommError::Timeout`] when the deadline passes first (no ranks named:
/// MPI does not say which peer is missing from a collective; every peer
/// sent its record, so the missing one gave up in its own exchange);
/// [`CommError::Transport`] when MPI fails.
pub(crate) fn run(
    session: &Session,
    rank: usize,
    phase: Phase<'_>,
    start: impl Fn(&Ptrs, usize, &mut ffi::MPI_Request) -> c_int,
) -> Result<(), CommError> {
    match phase.deadline {
        Some(deadline) if session.staged => staged(session, rank, phase, deadline, start),
        deadline => direct(session, rank, phase, deadline, start),
    }
}

fn staged(
    session: &Session,
    rank: usize,
    phase: Phase<'_>,
    deadline: Instant,
    start: impl Fn(&Ptrs, usize, &mut ffi::MPI_Request) -> c_int,
) -> Result<(), CommError> {
    let op = phase.op;
    let (send_bytes, recv_bytes) = (phase.send.len(), phase.recv.len());
    let mut fl = Inflight::new(
        session,
        Staged {
            send: words(session, phase.send, true),
            recv: words(session, phase.recv, phase.recv_in),
            ints: phase.ints,
        },
    );
    let b = fl.bufs();
    // Every pointer MPI gets, taken before any request is posted.
    // SAFETY: `b` is owned by `fl`, which keeps it alive until every request
    // is complete (or leaks it); no request is in flight yet, so this is
    // the only access.
    let ptrs = unsafe {
        let s = &mut *b;
        Ptrs {
            send: send_ptr(s.send.as_ptr(), send_bytes),
            recv: recv_ptr(s.recv.as_mut_ptr(), recv_bytes),
            ints: s.ints.iter().map(|v| v.as_ptr()).collect(),
        }
    };
    for i in 0..phase.requests {
        fl.post(op, rank, ReqKind::Collective, |r| start(&ptrs, i, r))?;
    }
    // On an error here `fl` is dropped with requests pending and leaks the
    // copies; the caller's buffers were never given to MPI.
    let pending = fl.wait_eagerly(op, rank, deadline)?;
    if !pending.is_empty() {
        drop(fl); // leaves the collective active and leaks its buffers
        return Err(CommError::Timeout {
            op,
            rank,
            missing: Vec::new(),
            waited: session.timeout,
            context: ErrorContext::none(),
        });
    }
    // Every request is complete: the copies are ours again.
    let s = fl
        .finish()
        .expect("no request is pending after the wait said so");
    phase
        .recv
        .copy_from_slice(&bytemuck::cast_slice::<u64, u8>(&s.recv)[..recv_bytes]);
    session.keep_staging(s.send);
    session.keep_staging(s.recv);
    Ok(())
}

/// The data phase on the caller's buffers: without checks (no deadline), or
/// checked but not staged (`MpiWorldBuilder::staged(false)`), where a
/// collective still pending at the deadline aborts the job, since MPI may
/// still use the buffers the caller gets back.
fn direct(
    session: &Session,
    rank: usize,
    phase: Phase<'_>,
    deadline: Option<Instant>,
    start: impl Fn(&Ptrs, usize, &mut ffi::MPI_Request) -> c_int,
) -> Result<(), CommError> {
    let op = phase.op;
    let send = if phase.send.is_empty() {
        EMPTY.as_ptr().cast()
    } else {
        phase.send.as_ptr().cast()
    };
    let recv = if phase.recv.is_empty() {
        EMPTY.as_ptr() as *mut c_void
    } else {
        phase.recv.as_mut_ptr().cast()
    };
    let mut fl = Inflight::new(session, phase.ints);
    let b = fl.bufs();
    // SAFETY: `b` is owned by `fl`; no request is in flight yet.
    let ints = unsafe { (*b).iter().map(|v| v.as_ptr()).collect() };
    let ptrs = Ptrs { send, recv, ints };
    let mut outcome = Ok(());
    for i in 0..phase.requests {
        if let Err(e) = fl.post(op, rank, ReqKind::Collective, |r| start(&ptrs, i, r)) {
            outcome = Err(e);
            break;
        }
    }
    if let Some(deadline) = deadline {
        if outcome.is_ok() {
            match fl.wait_eagerly(op, rank, deadline) {
                Ok(pending) if !pending.is_empty() => {
                    let e = CommError::Timeout {
                        op,
                        rank,
                        missing: Vec::new(),
                        waited: session.timeout,
                        context: ErrorContext::none(),
                    };
                    eprintln!(
                        "ruda: {e}; MPI may still use the caller's buffers (data phase not staged), so the MPI job is aborted"
                    );
                    session.mark_broken();
                    super::abort::abort_job(75);
                    // Returns only when MPI is finalised: nothing can touch
                    // the buffers any more.
                    return Err(e);
                }
                Ok(_) => {}
                Err(e) => outcome = Err(e),
            }
        }
    } else if outcome.is_ok() && fl.pending() && session.multiple() {
        // No deadline (the unchecked contract says every rank arrives): at
        // MPI_THREAD_MULTIPLE block in MPI, which progresses the collective
        // best; under the MPI lock, poll in rounds (below) so that other
        // threads' calls go on.
        outcome = fl.wait_all_blocking(op, rank);
    }
    while outcome.is_ok() && fl.pending() {
        if let Err(e) = fl.wait_eagerly(op, rank, Instant::now() + Duration::from_secs(60)) {
            outcome = Err(e);
        }
    }
    if outcome.is_err() && fl.pending() {
        // MPI may still read and write the caller's buffers, which we must
        // not hand back: end the job instead (this returns only when MPI
        // is finalised, when nothing can touch them any more).
        eprintln!(
            "ruda: {op} failed with MPI still using the caller's buffers (checks are off); aborting the MPI job"
        );
        super::abort::abort_job(74);
    }
    outcome
}
