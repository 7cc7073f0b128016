//! The data phase of a collective through MPI, in one of three ways (ranks
//! on one host move data through shared memory instead: [`super::shared`]).
//!
//! - **On the caller's buffers, blocking** (the default, and without checks,
//!   at `MPI_THREAD_MULTIPLE`): MPI's blocking collective (`MPI_Allreduce`,
//!   `MPI_Bcast`, …), whose tuned algorithms beat the nonblocking ones
//!   (Open MPI's `MPI_Iallreduce` took 2–3× its blocking call on 2 ranks).
//!   With checks on, the deadline is kept by the watchdog
//!   ([`super::watchdog`]): every rank's record arrived, yet a peer may
//!   never join the data (its own exchange timed out a moment earlier, it
//!   died, its link is down); a rank still in the data phase at the
//!   deadline cannot hand back buffers MPI may still write, so it names
//!   the call and the silent peers and aborts the job.
//! - **On the caller's buffers, polled** (the same under
//!   `MPI_THREAD_SERIALIZED`, where a blocking call would hold ruda's MPI
//!   lock): the nonblocking collective, tested in a loop with the lock held
//!   only around each test; at the deadline the rank does what the
//!   watchdog does.
//! - **Staged** (`MpiWorldBuilder::staged(true)`): the nonblocking
//!   collective on copies that this module owns; on success the result is
//!   copied out, at the deadline the call returns a [`CommError::Timeout`]
//!   and the copies (and count arrays) are leaked, because peers may still
//!   complete the collective and MPI would then read and write them. The
//!   caller's buffers are never touched by MPI after the call returns.

use std::ffi::{c_int, c_void};
use std::time::{Duration, Instant};

use mpi::ffi;

use super::raw::check;
use super::session::Session;
use super::wait::{Inflight, ReqKind};
use super::watchdog::{self, Watch};
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

/// How a collective's `start` function runs its MPI call.
pub(crate) enum Call<'r> {
    /// Post the nonblocking form (`MPI_Iallreduce`, …), setting this
    /// request.
    Post(&'r mut ffi::MPI_Request),
    /// Run the blocking form (`MPI_Allreduce`, …): only at
    /// `MPI_THREAD_MULTIPLE`, with no lock held.
    Block,
}

/// One collective's data phase.
pub(crate) struct Phase<'a> {
    /// The operation (for errors).
    pub op: OpKind,
    /// The call's deadline and what to report when it passes, with checks
    /// on; `None` without them.
    pub watch: Option<Watch>,
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
        watch: Option<Watch>,
        send: &'a [u8],
        recv: &'a mut [u8],
    ) -> Self {
        Phase {
            op,
            watch,
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

/// Run the data phase: call `start(ptrs, i, call)` for `i` in
/// `0..phase.requests` (one MPI call per chunk), blocking or posted and
/// waited for (see the module's documentation for which).
///
/// # Errors
/// [`CommError::Timeout`] when a staged data phase passes its deadline (no
/// ranks named: MPI does not say which peer is missing from a collective;
/// every peer sent its record, so the missing one gave up in its own
/// exchange, died or was cut off); [`CommError::Transport`] when MPI fails. A data phase on the
/// caller's buffers that passes its deadline aborts the job instead.
pub(crate) fn run(
    session: &Session,
    rank: usize,
    phase: Phase<'_>,
    start: impl Fn(&Ptrs, usize, Call<'_>) -> c_int,
) -> Result<(), CommError> {
    if session.staged
        && let Some(watch) = phase.watch.clone()
    {
        return staged(session, rank, phase, watch.deadline, start);
    }
    if session.multiple() {
        blocking(rank, phase, start)
    } else {
        polled(session, rank, phase, start)
    }
}

fn staged(
    session: &Session,
    rank: usize,
    phase: Phase<'_>,
    deadline: Instant,
    start: impl Fn(&Ptrs, usize, Call<'_>) -> c_int,
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
        fl.post(op, rank, ReqKind::Collective, |r| {
            start(&ptrs, i, Call::Post(r))
        })?;
    }
    // On an error here `fl` is dropped with requests pending and leaks the
    // copies; the caller's buffers were never given to MPI.
    let pending = fl.wait_eagerly(op, rank, deadline)?;
    if !pending.is_empty() {
        drop(fl); // leaves the collective active and leaks its buffers
        return Err(data_timeout(session, op, rank));
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

/// A data phase past its deadline: no ranks named (MPI does not say which
/// peer is missing from a collective).
fn data_timeout(session: &Session, op: OpKind, rank: usize) -> CommError {
    CommError::Timeout {
        op,
        rank,
        missing: Vec::new(),
        waited: session.timeout,
        context: ErrorContext::none(),
    }
}

/// The pointers of a data phase on the caller's buffers.
fn direct_ptrs(phase: &mut Phase<'_>) -> Ptrs {
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
    Ptrs {
        send,
        recv,
        ints: phase.ints.iter().map(|v| v.as_ptr()).collect(),
    }
}

/// MPI's blocking calls on the caller's buffers, at `MPI_THREAD_MULTIPLE`
/// (no lock to hold); with checks on, under the watchdog.
fn blocking(
    rank: usize,
    mut phase: Phase<'_>,
    start: impl Fn(&Ptrs, usize, Call<'_>) -> c_int,
) -> Result<(), CommError> {
    let op = phase.op;
    // `phase` (the caller's exclusively borrowed buffers and the count
    // arrays) outlives every blocking call below, after which MPI keeps no
    // pointer into it.
    let ptrs = direct_ptrs(&mut phase);
    let armed = phase.watch.clone().map(watchdog::arm);
    let mut outcome = Ok(());
    for i in 0..phase.requests {
        outcome = check(op, rank, start(&ptrs, i, Call::Block));
        if outcome.is_err() {
            break;
        }
    }
    if let Some(armed) = armed {
        watchdog::disarm(armed, op, rank)?;
    }
    outcome
}

/// The nonblocking calls on the caller's buffers, tested with ruda's MPI
/// lock held only around each call (`MPI_THREAD_SERIALIZED`): with checks
/// on, a collective still pending at the deadline ends the job (see
/// [`watchdog::expire`]), since MPI may still use the buffers the caller
/// would get back.
fn polled(
    session: &Session,
    rank: usize,
    mut phase: Phase<'_>,
    start: impl Fn(&Ptrs, usize, Call<'_>) -> c_int,
) -> Result<(), CommError> {
    let op = phase.op;
    let ptrs = direct_ptrs(&mut phase);
    // The buffers stay the caller's (and the count arrays `phase`'s), not
    // `fl`'s, against `Inflight`'s rule: this is sound only because no path
    // below returns with a request pending except through an abort of the
    // job (which returns only once MPI is finalised).
    let mut fl = Inflight::new(session, ());
    let mut outcome = Ok(());
    for i in 0..phase.requests {
        if let Err(e) = fl.post(op, rank, ReqKind::Collective, |r| {
            start(&ptrs, i, Call::Post(r))
        }) {
            outcome = Err(e);
            break;
        }
    }
    if let Some(watch) = &phase.watch
        && outcome.is_ok()
    {
        match fl.wait_eagerly(op, rank, watch.deadline) {
            Ok(pending) if !pending.is_empty() => {
                watchdog::expire(watch);
                // Returns only when MPI is finalised: nothing can touch
                // the buffers any more, and the pending request must not
                // be tested (after `MPI_Finalize`) when `fl` is dropped.
                std::mem::forget(fl);
                return Err(data_timeout(session, op, rank));
            }
            Ok(_) => {}
            Err(e) => outcome = Err(e),
        }
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
            "ruda: {op} failed with MPI still using the caller's buffers; aborting the MPI job"
        );
        super::abort::abort_job(74);
    }
    // `phase` lives until here: no request is pending (or the job ended).
    drop(phase);
    outcome
}
