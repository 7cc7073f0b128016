//! Waiting for non-blocking MPI requests with a deadline, and abandoning
//! the ones that cannot complete without leaving MPI to write into memory
//! that is gone.

use std::ffi::c_int;
use std::time::{Duration, Instant};

use mpi::ffi;

use super::raw::check;
use super::session::Session;
use crate::{CommError, OpKind};

/// The null request handle.
pub(crate) fn null_request() -> ffi::MPI_Request {
    // SAFETY: reading MPI's predefined null request handle.
    unsafe { ffi::RSMPI_REQUEST_NULL }
}

/// How a wait polls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Poll {
    /// Spin briefly, then yield, then sleep for growing intervals, so that
    /// a long wait (for a peer that has not arrived) does not take a core
    /// from the ranks it waits for.
    Patient,
    /// Test continuously, yielding now and then: for a collective's data
    /// phase, where every peer has arrived and MPI's nonblocking
    /// collectives progress only inside `MPI_Test` (a sleep between tests
    /// stalls every round of the algorithm), as a blocking MPI call would
    /// poll.
    Eager,
}

/// Poll `reqs` until every one completes or `deadline` passes. Completed
/// requests become the null request. Returns the indices still pending.
///
/// Each poll is one `MPI_Testall` (one turn of MPI's progress engine for
/// every request; testing them one by one cost a turn each); only at the
/// deadline are the requests tested one by one, to tell which are pending.
/// The MPI lock (when MPI needs one) is held only for each test, so other
/// threads' calls go on meanwhile; `poll` says how tests are spaced.
pub(crate) fn wait_until(
    session: &Session,
    op: OpKind,
    rank: usize,
    reqs: &mut [ffi::MPI_Request],
    deadline: Instant,
    poll: Poll,
) -> Result<Vec<usize>, CommError> {
    let null = null_request();
    let n = c_int::try_from(reqs.len()).map_err(|_| CommError::InvalidArgument {
        op,
        rank,
        reason: crate::InvalidArgument::TooLarge {
            count: reqs.len(),
            max: c_int::MAX as usize,
        },
        context: crate::ErrorContext::none(),
    })?;
    // Read at the first clock reading: a wait that ends within its first
    // polls reads no clock at all.
    let mut start = None;
    let mut polls = 0u32;
    loop {
        let mut flag: c_int = 0;
        let all = reqs.as_mut_ptr();
        let rc = session.mpi(|| {
            // SAFETY: valid: `all` points to the `n` requests of `reqs`, `flag`
            // is a local; unaliased: `reqs` is held mutably here. MPI_Testall
            // completes all of them (nulling each) or none.
            unsafe { ffi::MPI_Testall(n, all, &mut flag, ffi::RSMPI_STATUSES_IGNORE) }
        });
        check(op, rank, rc)?;
        if flag != 0 {
            return Ok(Vec::new());
        }
        polls = polls.wrapping_add(1);
        // The clock is read every CLOCK_EVERY polls only (it cost a tenth
        // of a small collective's time when read at every poll).
        if !polls.is_multiple_of(CLOCK_EVERY) {
            std::hint::spin_loop();
            continue;
        }
        let now = Instant::now();
        if now >= deadline {
            let mut pending = Vec::new();
            for (i, r) in reqs.iter_mut().enumerate() {
                if *r == null {
                    continue;
                }
                let mut done: c_int = 0;
                // SAFETY: `r` is an active request of this process; MPI_Test
                // completes it (setting it to null) or leaves it active.
                let rc = session
                    .mpi(|| unsafe { ffi::MPI_Test(r, &mut done, ffi::RSMPI_STATUS_IGNORE) });
                check(op, rank, rc)?;
                if done == 0 {
                    pending.push(i);
                }
            }
            return Ok(pending);
        }
        back_off(poll, now - *start.get_or_insert(now));
    }
}

/// How many polls pass between two readings of the clock.
const CLOCK_EVERY: u32 = 16;

/// How long a wait tests without pause before it starts to yield the core:
/// peers that arrive together exchange their records within a few
/// microseconds, and a yield (a system call) in that window delays the
/// progress that a peer's rendezvous needs from this rank.
const SPIN: Duration = Duration::from_micros(50);

/// Pause between polls: none within [`SPIN`]; then a patient wait (for a
/// peer that has not arrived) yields, then sleeps for growing intervals so
/// that it does not take a core from the ranks it waits for, while an
/// eager one (a data phase, whose peers have all arrived and whose
/// nonblocking collective progresses only inside tests) only yields.
fn back_off(poll: Poll, waited: Duration) {
    if waited < SPIN {
        return;
    }
    match poll {
        Poll::Eager => std::thread::yield_now(),
        Poll::Patient if waited < Duration::from_millis(2) => std::thread::yield_now(),
        Poll::Patient if waited < Duration::from_millis(200) => {
            std::thread::sleep(Duration::from_micros(20))
        }
        Poll::Patient => std::thread::sleep(Duration::from_millis(1)),
    }
}

/// How long a cancelled receive is tested before it is left pending.
const CANCEL_GRACE: Duration = Duration::from_millis(100);

/// What a request does, which decides how a pending one is given up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ReqKind {
    /// A point-to-point receive: cancelled, then completed.
    Recv,
    /// A point-to-point send: freed if still pending (MPI finishes or drops
    /// it on its own); its buffer must then be leaked.
    Send,
    /// A nonblocking collective: MPI allows neither cancelling nor freeing
    /// it, so a pending one is left active for good, and every buffer it
    /// uses must be leaked.
    Collective,
}

/// Give up on the pending requests of a timed-out call: receives are
/// cancelled and completed (or left pending after [`CANCEL_GRACE`]); a send still pending (MPI cannot cancel it
/// reliably) is freed; a collective still pending is left active (see
/// [`ReqKind::Collective`]). Returns whether every request is complete
/// (so that all buffers may be released); otherwise the caller must leak
/// the buffers, which MPI may still read or write.
pub(crate) fn abandon(session: &Session, reqs: &mut [ffi::MPI_Request], kinds: &[ReqKind]) -> bool {
    let null = null_request();
    let mut all_done = true;
    for (r, &kind) in reqs.iter_mut().zip(kinds) {
        if *r == null {
            continue;
        }
        match kind {
            ReqKind::Recv => {
                // SAFETY: an active receive of this process: cancel it.
                session.mpi(|| unsafe { ffi::MPI_Cancel(r) });
                // A cancelled receive, or one matched by an eager message,
                // completes at once; one already matched by a rendezvous
                // completes only as its sender progresses, which a peer
                // that gave up may never do: test it for a moment, then
                // leave it pending (its buffer is leaked).
                let until = Instant::now() + CANCEL_GRACE;
                let mut flag: c_int = 0;
                loop {
                    // SAFETY: an active (cancelled) receive of this process;
                    // MPI_Test completes it (setting it to null) or leaves it.
                    session
                        .mpi(|| unsafe { ffi::MPI_Test(r, &mut flag, ffi::RSMPI_STATUS_IGNORE) });
                    if flag != 0 || Instant::now() >= until {
                        break;
                    }
                    std::thread::yield_now();
                }
                all_done &= flag != 0;
            }
            ReqKind::Send => {
                let mut flag: c_int = 0;
                // SAFETY: an active send of this process; if it has not
                // completed, free it (MPI finishes or drops it on its own).
                session.mpi(|| unsafe {
                    ffi::MPI_Test(r, &mut flag, ffi::RSMPI_STATUS_IGNORE);
                    if flag == 0 {
                        ffi::MPI_Request_free(r);
                    }
                });
                all_done &= flag != 0;
            }
            ReqKind::Collective => {
                let mut flag: c_int = 0;
                // SAFETY: an active collective request of this process; a
                // last test, and if it is still pending it stays active
                // (freeing or cancelling it is erroneous in MPI).
                session.mpi(|| unsafe { ffi::MPI_Test(r, &mut flag, ffi::RSMPI_STATUS_IGNORE) });
                all_done &= flag != 0;
            }
        }
    }
    all_done
}

/// Requests in flight and the buffers they use, released together: when
/// dropped with requests still pending (an error or a timeout), those are
/// abandoned (see [`abandon`]) and the buffers are freed only if MPI can no
/// longer touch them, else leaked. Every buffer a request of this value
/// uses must live in `B`.
pub(crate) struct Inflight<'a, B> {
    session: &'a Session,
    reqs: Vec<ffi::MPI_Request>,
    kinds: Vec<ReqKind>,
    /// Owned (from `Box::into_raw`); reached only through this pointer, so
    /// that no reference to it exists while MPI writes into it.
    bufs: *mut B,
}

impl<'a, B> Inflight<'a, B> {
    pub(crate) fn new(session: &'a Session, bufs: B) -> Self {
        Inflight {
            session,
            reqs: Vec::new(),
            kinds: Vec::new(),
            bufs: Box::into_raw(Box::new(bufs)),
        }
    }

    /// Room for `more` requests, so that posting them does not allocate.
    pub(crate) fn reserve(&mut self, more: usize) {
        self.reqs.reserve(more);
        self.kinds.reserve(more);
    }

    /// The buffers, for taking pointers into them and, once the requests
    /// that write them have completed, reading them.
    pub(crate) fn bufs(&self) -> *mut B {
        self.bufs
    }

    /// Post one request with `start`, which gets the request handle to set;
    /// returns its index.
    pub(crate) fn post(
        &mut self,
        op: OpKind,
        rank: usize,
        kind: ReqKind,
        start: impl FnOnce(&mut ffi::MPI_Request) -> c_int,
    ) -> Result<usize, CommError> {
        self.reqs.push(null_request());
        self.kinds.push(kind);
        let i = self.reqs.len() - 1;
        let r = &mut self.reqs[i];
        let rc = self.session.mpi(|| start(r));
        check(op, rank, rc)?;
        Ok(i)
    }

    /// Wait for the requests `range` until `deadline`; returns the indices
    /// still pending.
    pub(crate) fn wait(
        &mut self,
        op: OpKind,
        rank: usize,
        range: std::ops::Range<usize>,
        deadline: Instant,
    ) -> Result<Vec<usize>, CommError> {
        let start = range.start;
        let pending = wait_until(
            self.session,
            op,
            rank,
            &mut self.reqs[range],
            deadline,
            Poll::Patient,
        )?;
        Ok(pending.into_iter().map(|i| i + start).collect())
    }

    /// [`Inflight::wait`] for every request, testing continuously
    /// ([`Poll::Eager`]): a collective's data phase.
    pub(crate) fn wait_eagerly(
        &mut self,
        op: OpKind,
        rank: usize,
        deadline: Instant,
    ) -> Result<Vec<usize>, CommError> {
        wait_until(
            self.session,
            op,
            rank,
            &mut self.reqs,
            deadline,
            Poll::Eager,
        )
    }

    /// Whether a posted request is still pending.
    pub(crate) fn pending(&self) -> bool {
        let null = null_request();
        self.reqs.iter().any(|r| *r != null)
    }

    /// How many requests were posted.
    pub(crate) fn len(&self) -> usize {
        self.reqs.len()
    }
}

impl<B> Inflight<'_, B> {
    /// The buffers back, once every request is complete (`None` while one
    /// is pending: then they stay with this value, to be abandoned).
    pub(crate) fn finish(mut self) -> Option<B> {
        if self.pending() {
            return None;
        }
        let bufs = core::mem::replace(&mut self.bufs, core::ptr::null_mut());
        // SAFETY: from `Box::into_raw` in `new`, taken out exactly once
        // (the field is null now, which `drop` skips); no request is
        // pending, so MPI holds no pointer into it.
        Some(*unsafe { Box::from_raw(bufs) })
    }
}

impl<B> Drop for Inflight<'_, B> {
    fn drop(&mut self) {
        if self.bufs.is_null() {
            return; // handed back by `finish`
        }
        let null = null_request();
        let done = self.reqs.iter().all(|r| *r == null)
            || abandon(self.session, &mut self.reqs, &self.kinds);
        if done {
            // SAFETY: from `Box::into_raw` in `new`; no request uses it now.
            drop(unsafe { Box::from_raw(self.bufs) });
        }
        // Otherwise MPI may still read a send buffer, or read and write the
        // buffers of a collective that peers may yet complete: leave them
        // allocated for the rest of the process (deliberately leaked; the
        // call timed out, so the session is broken and the job is aborted
        // when its MpiWorld goes, rather than finalised).
    }
}
