//! `MpiCommunicator`: one MPI process's rank in a communicator.

use std::ffi::{c_int, c_void};
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime};

use mpi::ffi;

use super::agree::{self, Channel};
use super::arena::{Arena, SharedBuffer, SharedBufferError};
use super::data::{self, Call, Phase, Ptrs};
use super::inline::{self, Inbox, Parcel};
use super::placement::{self, Shm};
use super::raw::{self, check, count, counts_and_displs, datatype, operator};
use super::segment::{Segment, Stop};
use super::session::Session;
use super::shared;
use super::watchdog::Watch;
use crate::flight::{self, FlightRecorder, RankHistory};
use crate::validate::sizes::max_elements;
use crate::validate::{CallArgs, CountList};
use crate::{
    Accumulator, BufferRole, CommError, Communicator, DType, Element, ErrorContext, Fingerprint,
    InvalidArgument, OpKind, ReduceOp,
};

/// One rank of an MPI communicator, from [`super::MpiWorld::world`] or
/// [`Communicator::split`].
///
/// When all its ranks run on one host (and checks are on), its call
/// records and collective data go through a shared-memory segment instead
/// of the MPI calls described below, and a rank missing from a call is a
/// [`CommError::Timeout`] naming it on every rank; across hosts with the
/// same number of ranks on each, all-reduces can be hierarchical (see
/// [`MpiCommunicator::shared_memory`] and
/// [`super::MpiWorldBuilder::shared_memory`]). The rest of this applies
/// to what goes through MPI.
///
/// Every collective maps to the MPI call that does it natively
/// (`MPI_Allreduce`, `MPI_Allgatherv`, `MPI_Reduce_scatter_block`,
/// `MPI_Reduce_scatter`, `MPI_Alltoallv`, `MPI_Bcast`, …): the blocking
/// call, whose tuned algorithms run at the raw call's speed, at
/// `MPI_THREAD_MULTIPLE`; the nonblocking one, tested in a loop with ruda's
/// MPI lock held only around each test, under `MPI_THREAD_SERIALIZED` and,
/// on copies, with `staged(true)`.
/// `f16`/`bf16` move as 2-byte words and are reduced in `f32`, rounded
/// once. Every length is checked against the counts before the call and
/// every MPI return code is checked.
///
/// With checks on (the default; see [`super::MpiWorldBuilder::unchecked`]),
/// every collective first exchanges every rank's call record with each
/// peer, with the deadline: a rank that does not arrive is a
/// [`CommError::Timeout`] naming it, and ranks in different collectives or
/// with counts that do not fit (MPI's `int` counts included) get the same
/// error on every rank, as with the local transport, before any data moves.
/// A small call (every rank's largest message at most 4000 bytes, in a
/// group of at most 8) sends its data with its record and completes from what
/// arrived, with no data phase: reductions combine the ranks' blocks in
/// rank order with the local transport's kernel, so every rank gets the
/// same bits as the threads of a `LocalWorld`. A barrier is the record
/// exchange itself.
///
/// The data phase of a larger call has a deadline of its own (the same
/// timeout, from the moment every record is in, so that a late peer leaves
/// a large transfer its full time). A peer can still be missing from it:
/// one whose own record exchange timed out just before the last record
/// reached it, a process that died, a host whose link went down. By
/// default MPI works on the caller's buffers, which it may still write, so
/// a rank still in a data phase at its deadline ends the job: it holds a
/// short roll call with its peers, prints the call, itself and the peers
/// that never joined or cannot be reached, and aborts the job with exit
/// code 75 (see [`super::MpiWorldBuilder::staged`]). With `staged(true)`,
/// MPI works on copies instead and the call returns a
/// [`CommError::Timeout`] (no rank named: MPI does not say who is missing
/// from a collective); the copies are leaked, never the caller's memory.
/// Either way every rank of a call ends within twice the timeout plus a
/// poll interval (and, on the caller's buffers, the roll call's grace, a
/// 0.2 s pause and the abort's stagger of 0.2 s per world rank, at most
/// 3.2 s).
/// `split` has no nonblocking MPI form: a bounded barrier first makes sure
/// every rank is there, then the blocking split runs. A communicator that
/// timed out stays failed. Point-to-point calls rendezvous on a header and
/// an acknowledgement with the deadline, so a mismatch is an error on both
/// sides and a missing peer a timeout.
///
/// Calls on one communicator must not overlap (two threads using it at
/// once get [`InvalidArgument::ConcurrentUse`]); calls on different
/// communicators may, from any threads (MPI runs at
/// `MPI_THREAD_MULTIPLE`, or ruda serialises its MPI calls when MPI grants
/// only `MPI_THREAD_SERIALIZED`).
pub struct MpiCommunicator {
    comm: ffi::MPI_Comm,
    /// A duplicate of `comm` for call records and point-to-point headers,
    /// so they never meet data messages.
    ctl: ffi::MPI_Comm,
    rank: usize,
    size: usize,
    world_ranks: Arc<[usize]>,
    seq: AtomicU64,
    busy: AtomicBool,
    recorder: FlightRecorder,
    /// The error that failed this communicator for good (a timeout).
    failed: Mutex<Option<CommError>>,
    /// Whether `failed` holds an error.
    has_failed: AtomicBool,
    /// The record exchange's message buffer, kept between calls (see
    /// [`agree::agree`]).
    inbox: Mutex<Vec<u64>>,
    /// The shared-memory segment of a communicator on one host.
    shm: Mutex<Shm>,
    /// This rank's arena in the segment, for shared buffers (`None`: no
    /// segment, no arena asked for, or arenas that could not be had on
    /// some host).
    arena: Option<Arena>,
    session: Arc<Session>,
}

// SAFETY: the MPI handles are only used inside calls, which never overlap
// on one communicator (`busy`); MPI runs at MPI_THREAD_MULTIPLE, or every
// MPI call of this process goes through the session's lock
// (`Session::mpi`), which is what MPI_THREAD_SERIALIZED requires. Dropping
// on another thread frees the handles the same way.
unsafe impl Send for MpiCommunicator {}
// SAFETY: as above.
unsafe impl Sync for MpiCommunicator {}

impl fmt::Debug for MpiCommunicator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MpiCommunicator")
            .field("rank", &self.rank)
            .field("size", &self.size)
            .finish()
    }
}

impl Drop for MpiCommunicator {
    fn drop(&mut self) {
        let Ok(_gate) = self.session.gate(OpKind::Init, self.rank) else {
            return; // MPI is finalised: nothing to free
        };
        let (comm, ctl) = (&mut self.comm, &mut self.ctl);
        let shm = self.shm.get_mut().unwrap_or_else(|e| e.into_inner());
        // SAFETY: free the handles this value owns, under the session's lock.
        self.session.mpi(|| unsafe {
            shm.free();
            ffi::MPI_Comm_free(ctl);
            ffi::MPI_Comm_free(comm);
        });
    }
}

/// Fails its communicator for good when dropped armed, which happens only
/// when a call unwinds (see [`MpiCommunicator::call`]).
struct Unwind<'a> {
    comm: &'a MpiCommunicator,
    op: OpKind,
    armed: bool,
}

impl Drop for Unwind<'_> {
    fn drop(&mut self) {
        if self.armed {
            let c = self.comm;
            *c.failed.lock().unwrap_or_else(|e| e.into_inner()) = Some(CommError::Transport {
                op: self.op,
                rank: c.rank,
                message: "an earlier call on this communicator panicked midway".into(),
                context: ErrorContext::none(),
            });
            c.has_failed.store(true, Ordering::Release);
            // Peers may still be inside the call, as after a timeout.
            c.session.mark_broken();
        }
    }
}

struct Busy<'a>(&'a AtomicBool);

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

/// Open MPI's `MPI_IN_PLACE`, `(void *) 1` in its `mpi.h` (a macro, so
/// absent from the bindings); used only when the library is Open MPI.
#[allow(clippy::manual_dangling_ptr)]
const OPEN_MPI_IN_PLACE: *const c_void = 1 as *const c_void;

/// The bytes of a send buffer.
fn bytes<T: Element>(s: &[T]) -> &[u8] {
    bytemuck::cast_slice(s)
}

/// The bytes of a receive buffer.
fn bytes_mut<T: Element>(s: &mut [T]) -> &mut [u8] {
    bytemuck::cast_slice_mut(s)
}

/// The world rank of each rank of `comm`.
fn world_ranks(comm: ffi::MPI_Comm, size: usize) -> Result<Vec<usize>, CommError> {
    // SAFETY: reading MPI's null group handle.
    let (mut g, mut gw) = unsafe { (ffi::RSMPI_GROUP_NULL, ffi::RSMPI_GROUP_NULL) };
    let ranks: Vec<c_int> = (0..size as c_int).collect();
    let mut out = vec![0 as c_int; size];
    // SAFETY: valid communicators; `ranks` and `out` hold `size` entries;
    // both groups are freed.
    let rc = unsafe {
        let mut rc = ffi::MPI_Comm_group(comm, &mut g);
        if rc == 0 {
            rc = ffi::MPI_Comm_group(ffi::RSMPI_COMM_WORLD, &mut gw);
        }
        if rc == 0 {
            rc = ffi::MPI_Group_translate_ranks(
                g,
                size as c_int,
                ranks.as_ptr(),
                gw,
                out.as_mut_ptr(),
            );
        }
        ffi::MPI_Group_free(&mut g);
        ffi::MPI_Group_free(&mut gw);
        rc
    };
    check(OpKind::Init, 0, rc)?;
    Ok(out.into_iter().map(|r| r as usize).collect())
}

impl MpiCommunicator {
    /// A communicator over the same ranks as `parent` (which this does not
    /// own), with its own handles whose errors return codes.
    pub(crate) fn duplicate(
        parent: ffi::MPI_Comm,
        session: Arc<Session>,
    ) -> Result<Self, CommError> {
        // SAFETY: reading MPI's null communicator handle.
        let mut comm = unsafe { ffi::RSMPI_COMM_NULL };
        // SAFETY: a valid communicator; MPI writes the new handle.
        let rc = session.mpi(|| unsafe { ffi::MPI_Comm_dup(parent, &mut comm) });
        raw::check(OpKind::Init, 0, rc)?;
        Self::adopt(comm, session)
    }

    /// Own `comm` (a new communicator): set its error handler, duplicate it
    /// for the control channel, and learn the world ranks.
    fn adopt(mut comm: ffi::MPI_Comm, session: Arc<Session>) -> Result<Self, CommError> {
        let (mut rank, mut size): (c_int, c_int) = (0, 0);
        // SAFETY: reading MPI's null communicator handle.
        let mut ctl = unsafe { ffi::RSMPI_COMM_NULL };
        // SAFETY: `comm` is a valid communicator this value now owns; its
        // errors return codes; `ctl` is its duplicate (same handler).
        let rc = session.mpi(|| unsafe {
            let mut rc = ffi::MPI_Comm_set_errhandler(comm, ffi::RSMPI_ERRORS_RETURN);
            if rc == 0 {
                rc = ffi::MPI_Comm_dup(comm, &mut ctl);
            }
            ffi::MPI_Comm_rank(comm, &mut rank);
            ffi::MPI_Comm_size(comm, &mut size);
            rc
        });
        if let Err(e) = raw::check(OpKind::Init, rank as usize, rc) {
            // SAFETY: free the handle we own.
            session.mpi(|| unsafe { ffi::MPI_Comm_free(&mut comm) });
            return Err(e);
        }
        let size = size as usize;
        let world_ranks = session.mpi(|| world_ranks(comm, size))?;
        let shm = if size > 1 && session.checked {
            match placement::place(comm, rank as usize, size, &session) {
                Ok(s) => s,
                Err(e) => {
                    // SAFETY: free the handles we own.
                    session.mpi(|| unsafe {
                        ffi::MPI_Comm_free(&mut ctl);
                        ffi::MPI_Comm_free(&mut comm);
                    });
                    return Err(e);
                }
            }
        } else {
            Shm::Off
        };
        let seg = match &shm {
            Shm::Ready(seg) => Some(seg),
            Shm::Hosts(h) if h.arenas => Some(&h.seg),
            Shm::Hosts(_) | Shm::Off => None,
        };
        let arena = seg.filter(|s| s.arena_len() > 0).map(|s| {
            let base = std::ptr::NonNull::new(s.arena(s.rank())).expect("inside a mapping");
            // SAFETY: this rank's arena in the segment `shm` keeps mapped as long as this communicator, which every `SharedBuffer` borrows; 4 KiB aligned (`Segment::arena`); peers write it only inside collectives a buffer is passed to.
            unsafe { Arena::new(base, s.arena_len()) }
        });
        Ok(MpiCommunicator {
            comm,
            ctl,
            rank: rank as usize,
            size,
            world_ranks: world_ranks.into(),
            seq: AtomicU64::new(0),
            busy: AtomicBool::new(false),
            recorder: FlightRecorder::new(Instant::now(), SystemTime::now(), true),
            failed: Mutex::new(None),
            has_failed: AtomicBool::new(false),
            inbox: Mutex::new(Vec::new()),
            shm: Mutex::new(shm),
            arena,
            session,
        })
    }

    /// A zeroed buffer of `len` elements in this rank's part of the
    /// communicator's shared memory (see [`SharedBuffer`]), from the arena
    /// that [`super::MpiWorldBuilder::shared_buffers`] asks for. Local: no
    /// rank waits for another. An all-reduce of 64 KiB or more whose buffer
    /// is a shared buffer on every rank of a one-host communicator runs in
    /// place on the peers' memory, as threads do, with no copy through the
    /// segment's slots; other collectives read peers' shared buffers
    /// through the mapping.
    ///
    /// # Errors
    /// [`SharedBufferError::NoArena`] when the communicator has no arena
    /// (no segment, no arena asked for, or arenas that could not be had,
    /// on this host or across hosts on another); [`SharedBufferError::Full`]
    /// when no free range of the arena is large enough.
    ///
    /// # Example
    /// ```no_run
    /// use ruda_comm::{Communicator, MpiWorld, ReduceOp};
    /// let mpi = MpiWorld::builder().shared_buffers(16 << 20).init().expect("MPI starts");
    /// let world = mpi.world().unwrap();
    /// let mut x = world.shared_buffer::<f64>(1000).expect("room in the arena");
    /// x.fill(1.0);
    /// world.all_reduce(&mut x, ReduceOp::Sum).unwrap();
    /// assert_eq!(x[0], world.size() as f64);
    /// ```
    pub fn shared_buffer<T: Element>(
        &self,
        len: usize,
    ) -> Result<SharedBuffer<'_, T>, SharedBufferError> {
        self.arena
            .as_ref()
            .ok_or(SharedBufferError::NoArena { rank: self.rank })?
            .buffer(len, self.rank)
    }

    /// An in-place all-reduce or broadcast of shared buffers
    /// ([`SharedBuffer`]) whose last barrier failed: a stalled peer may
    /// still write this rank's buffer, so no error can be handed back. Say
    /// which call and which ranks, and end the job as a data phase past its
    /// deadline does ([`super::watchdog::EXIT_DATA_TIMEOUT`]); returns only
    /// if MPI was finalised meanwhile.
    fn stranded(&self, op: OpKind, seq: u64, stop: &Stop) {
        self.session.mark_broken();
        let world = |q: usize| self.world_ranks.get(q).copied().unwrap_or(q);
        let missing: Vec<String> = stop
            .missing
            .iter()
            .map(|&q| match q == self.rank {
                // The rank itself came back after its peers' deadline.
                true => format!("{q} (world rank {}, this rank)", world(q)),
                false => format!("{q} (world rank {})", world(q)),
            })
            .collect();
        eprintln!(
            "ruda: {} #{seq} on rank {} (world rank {}) of {}: rank(s) {} did not finish writing shared buffers in place within {:?}; a peer may still write this rank's buffer, so the job ends (exit code {})",
            op.name(),
            self.rank,
            world(self.rank),
            self.size,
            missing.join(", "),
            self.session.timeout,
            super::watchdog::EXIT_DATA_TIMEOUT,
        );
        super::abort::abort_job(super::watchdog::EXIT_DATA_TIMEOUT);
    }

    /// Whether this communicator's collectives move their data through
    /// shared memory (see [`super::MpiWorldBuilder::shared_memory`]):
    /// checks are on, no rank's world was built with
    /// `shared_memory(false)`, every rank could map its host's segment when
    /// the communicator was made, and either all its ranks run on one host
    /// (then every collective uses the segment) or, with
    /// [`super::MpiWorldBuilder::hierarchical`], they run on several hosts
    /// with the same number of ranks, more than one, on each (then
    /// all-reduces are hierarchical: a reduce-scatter through each host's
    /// segment, an all-reduce of one share per rank across hosts through
    /// MPI, an all-gather through the segment). The same on every rank.
    ///
    /// # Example
    /// ```no_run
    /// let mpi = ruda_comm::MpiWorld::init().expect("MPI starts");
    /// let world = mpi.world().unwrap();
    /// println!("shared memory: {}", world.shared_memory());
    /// ```
    pub fn shared_memory(&self) -> bool {
        !matches!(
            *self.shm.lock().unwrap_or_else(|e| e.into_inner()),
            Shm::Off
        )
    }

    /// Whether this communicator's shared-memory segment reads peers'
    /// buffers directly for mid-sized calls (see
    /// [`super::MpiWorldBuilder::shared_memory_single_copy`]): it has a
    /// segment ([`Self::shared_memory`]), no rank turned single copies
    /// off or gave an empty window, a host's ranks of this communicator
    /// have a CPU each (in the union of their affinity masks), every rank
    /// of each host could read each of its peers when the communicator was
    /// made, and no read has been refused since (after which the segment
    /// keeps its slots). The same on every rank of a host.
    ///
    /// # Example
    /// ```no_run
    /// let mpi = ruda_comm::MpiWorld::init().expect("MPI starts");
    /// let world = mpi.world().unwrap();
    /// println!("single copies: {}", world.shared_memory_single_copy());
    /// ```
    pub fn shared_memory_single_copy(&self) -> bool {
        match &*self.shm.lock().unwrap_or_else(|e| e.into_inner()) {
            Shm::Ready(seg) => seg.pids().is_some(),
            Shm::Hosts(h) => h.seg.pids().is_some(),
            Shm::Off => false,
        }
    }

    /// Run `f` on this communicator's shared-memory segment with the data
    /// phase's deadline; `None` when the data goes through MPI instead
    /// (checks off, ranks on several hosts, or no segment could be made).
    fn on_segment(
        &self,
        c: &Checked<'_>,
        f: impl FnOnce(&mut Segment, Instant) -> Result<(), Stop>,
    ) -> Option<Result<(), CommError>> {
        if !c.agreed() {
            return None;
        }
        let mut shm = self.shm.lock().unwrap_or_else(|e| e.into_inner());
        let Shm::Ready(seg) = &mut *shm else {
            return None;
        };
        let op = c.fp.op;
        let waited = self.session.timeout;
        Some(f(seg, Instant::now() + waited).map_err(|stop| self.stopped(op, stop, |q| q)))
    }

    /// The error of a call that stopped on a segment: a
    /// [`CommError::Timeout`] naming the ranks missing at the barrier
    /// (`rank` maps a segment rank to this communicator's).
    fn stopped(&self, op: OpKind, stop: Stop, rank: impl Fn(usize) -> usize) -> CommError {
        CommError::Timeout {
            op,
            rank: self.rank,
            missing: stop.missing.iter().map(|&q| rank(q)).collect(),
            waited: self.session.timeout,
            context: ErrorContext::none(),
        }
    }

    /// A hierarchical all-reduce across hosts (see [`Self::shared_memory`]);
    /// `None` when the communicator is not spread evenly over hosts, checks
    /// are off, or the type is `f16`/`bf16` (which must accumulate in
    /// `f32` across both levels) or `u8` (reduced in `u32` through MPI).
    /// Each host's ranks reduce-scatter `buf` through their segment into
    /// one cache-line-aligned share each, the ranks holding the same share
    /// on every host all-reduce it through MPI (under the watchdog, as any
    /// data phase on the caller's memory), and each host's ranks
    /// all-gather the shares back into `buf`. An average is a sum divided
    /// at the end. One deadline covers the three steps.
    fn all_reduce_hosts<T: Element>(
        &self,
        c: &Checked<'_>,
        buf: &mut [T],
        op: ReduceOp,
    ) -> Option<Result<(), CommError>> {
        if !c.agreed() || is_half(T::DTYPE) || T::DTYPE == DType::U8 {
            return None;
        }
        let mut shm = self.shm.lock().unwrap_or_else(|e| e.into_inner());
        let Shm::Hosts(h) = &mut *shm else {
            return None;
        };
        let watch = c.watch()?;
        let deadline = watch.deadline;
        let (k, me) = (h.seg.size(), h.seg.rank());
        let counts: Vec<usize> = (0..k)
            .map(|q| {
                let (lo, hi) = crate::local::kernels::partition::<T>(buf.len(), q, k);
                hi - lo
            })
            .collect();
        let sum = if op == ReduceOp::Mean {
            ReduceOp::Sum
        } else {
            op
        };
        let members = h.members.clone();
        let named = |stop: Stop| self.stopped(OpKind::AllReduce, stop, |q| members[q]);
        let mut share = vec![T::zeroed(); counts[me]];
        if let Err(stop) =
            shared::reduce_scatter(&mut h.seg, buf, &mut share, &counts, sum, deadline)
        {
            return Some(Err(named(stop)));
        }
        if let Err(e) = self.all_reduce_raw(
            h.cross,
            Some(watch),
            bytemuck::cast_slice_mut(&mut share),
            size_of::<T>(),
            datatype(T::DTYPE),
            operator(sum),
        ) {
            // This host's peers would wait in the all-gather until the
            // deadline: tell them now.
            h.seg.abandon();
            return Some(Err(e));
        }
        if let Err(stop) = shared::all_gather(&mut h.seg, &share, buf, &counts, deadline) {
            return Some(Err(named(stop)));
        }
        if op == ReduceOp::Mean {
            divide(buf, self.size);
        }
        Some(Ok(()))
    }

    /// Whether collectives exchange call records first (off only after the
    /// `unsafe` [`super::MpiWorldBuilder::unchecked`]).
    pub fn checked(&self) -> bool {
        self.session.checked
    }

    fn enter(&self, op: OpKind) -> Result<Busy<'_>, CommError> {
        if self.busy.swap(true, Ordering::Acquire) {
            return Err(self.finish(CommError::InvalidArgument {
                op,
                rank: self.rank,
                reason: InvalidArgument::ConcurrentUse,
                context: ErrorContext::none(),
            }));
        }
        Ok(Busy(&self.busy))
    }

    fn channel(&self) -> Channel<'_> {
        Channel {
            session: &self.session,
            ctl: self.ctl,
            rank: self.rank,
            size: self.size,
        }
    }

    /// Add the context to an error and dump the flight recorder if asked.
    fn finish(&self, e: CommError) -> CommError {
        let history = e.wants_history();
        let e = e.with_context(|| {
            let h = if history {
                vec![
                    self.recorder
                        .history(self.rank, self.world_ranks[self.rank]),
                ]
            } else {
                Vec::new()
            };
            ErrorContext::new(self.world_ranks.to_vec(), h)
        });
        if history {
            flight::dump_if_requested(&e);
        }
        e
    }

    /// Run one call: refuse concurrent use, number it, keep
    /// MPI from being finalised meanwhile, record it, refuse it on a failed
    /// communicator, run `body`, and fail the communicator for good if the
    /// call timed out.
    fn call<R>(
        &self,
        fp: Fingerprint,
        elements: usize,
        peer: Option<usize>,
        body: impl FnOnce(Fingerprint, Instant) -> Result<R, CommError>,
    ) -> Result<R, CommError> {
        let _busy = self.enter(fp.op)?;
        let _gate = self
            .session
            .gate(fp.op, self.rank)
            .map_err(|e| self.finish(e))?;
        // Collectives take the next sequence number; point-to-point calls
        // (between two ranks only) record how many collectives came before.
        let seq = if peer.is_some() {
            self.seq.load(Ordering::Relaxed)
        } else {
            self.seq.fetch_add(1, Ordering::Relaxed)
        };
        let fp = Fingerprint { seq, ..fp };
        let started = Instant::now();
        let token = self.recorder.begin(fp, elements, peer, started);
        // The flag spares a healthy call the lock (calls on one
        // communicator never overlap, so it is read after it is set).
        let failed = if self.has_failed.load(Ordering::Acquire) {
            self.failed
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone()
        } else {
            None
        };
        // A call that unwinds midway (a panic in it) may leave its peers
        // and its shared-memory episodes out of step: fail the
        // communicator for good.
        let mut unwind = Unwind {
            comm: self,
            op: fp.op,
            armed: true,
        };
        let r = match failed {
            Some(e) => Err(with_op(e, fp.op, self.rank)),
            None => body(fp, started),
        };
        unwind.armed = false;
        // A timeout leaves peers inside the call, and an MPI error may leave
        // a call's messages half received (a record without its payload):
        // either fails the communicator for good, since a later call could
        // meet this one's messages. A timeout also keeps MPI from being
        // finalised cleanly.
        if let Err(e @ (CommError::Timeout { .. } | CommError::Transport { .. })) = &r {
            *self.failed.lock().unwrap_or_else(|e| e.into_inner()) = Some(e.clone());
            self.has_failed.store(true, Ordering::Release);
            if matches!(e, CommError::Timeout { .. }) {
                self.session.mark_broken();
            }
        }
        self.recorder.end(token, flight::outcome_of(&r));
        r.map_err(|e| self.finish(e))
    }

    /// A collective: its body runs the check (every rank's record with
    /// checks on, this rank's own arguments otherwise; [`Check::run`]) with
    /// what it sends inline, then finishes from what came inline or moves
    /// the data.
    fn collective<R, L>(
        &self,
        fp: Fingerprint,
        send_len: usize,
        recv_len: usize,
        counts: (&[usize], &[usize]),
        local: L,
        body: impl FnOnce(Check<'_, L>) -> Result<R, CommError>,
    ) -> Result<R, CommError>
    where
        L: FnOnce() -> Result<(), CommError>,
    {
        let elements = send_len.max(recv_len);
        self.call(fp, elements, None, |fp, started| {
            body(Check {
                comm: self,
                started,
                call: CallArgs {
                    fp,
                    send_len,
                    recv_len,
                    counts: CountList::whole(counts.0),
                    counts2: CountList::whole(counts.1),
                },
                elements,
                local,
            })
        })
    }

    /// Move the data of a collective (see [`data::run`]).
    fn data(
        &self,
        phase: Phase<'_>,
        start: impl Fn(&Ptrs, usize, Call<'_>) -> c_int,
    ) -> Result<(), CommError> {
        data::run(&self.session, self.rank, phase, start)
    }

    /// Without checks, a rank whose own arguments are inconsistent would
    /// leave its peers blocked in MPI: in a group of more than one it
    /// aborts the job with the error instead.
    fn admit_unchecked(
        &self,
        local: impl FnOnce() -> Result<(), CommError>,
    ) -> Result<(), CommError> {
        match local() {
            Ok(()) => Ok(()),
            Err(e) if self.size == 1 => Err(e),
            Err(e) => {
                eprintln!(
                    "ruda: {e}; aborting the MPI job so that no rank waits for this one (checks are off: MpiWorldBuilder::unchecked)"
                );
                super::abort::abort_job(71);
                Err(e)
            }
        }
    }

    fn avg_on_integers<T: Element>(&self, op: OpKind, r: ReduceOp) -> Result<(), CommError> {
        if r == ReduceOp::Mean && !T::DTYPE.is_float() {
            return Err(CommError::InvalidArgument {
                op,
                rank: self.rank,
                reason: InvalidArgument::AverageOfIntegers { dtype: T::DTYPE },
                context: ErrorContext::none(),
            });
        }
        Ok(())
    }

    fn length(
        &self,
        op: OpKind,
        buffer: BufferRole,
        expected: usize,
        got: usize,
    ) -> Result<(), CommError> {
        if expected == got {
            Ok(())
        } else {
            Err(CommError::LengthMismatch {
                op,
                rank: self.rank,
                offender: self.rank,
                buffer,
                expected,
                got,
                context: ErrorContext::none(),
            })
        }
    }

    /// The sum of a count list, checked (see `validate::sizes::total`).
    fn total<T: Element>(&self, op: OpKind, counts: &[usize]) -> Result<usize, CommError> {
        crate::validate::sizes::total(op, self.rank, counts, max_elements(size_of::<T>()))
    }

    fn invalid(&self, op: OpKind, reason: InvalidArgument) -> CommError {
        CommError::InvalidArgument {
            op,
            rank: self.rank,
            reason,
            context: ErrorContext::none(),
        }
    }

    fn peer(&self, op: OpKind, peer: usize) -> Result<usize, CommError> {
        if peer >= self.size {
            return Err(self.invalid(
                op,
                InvalidArgument::Peer {
                    peer,
                    size: self.size,
                },
            ));
        }
        Ok(peer)
    }

    /// Run the reducing nonblocking MPI call `call(ptrs, datatype, request)`
    /// from `send` into `recv` in the type MPI should reduce in: u8 sums
    /// and products in u32 (Open MPI 4.1's vectorised 8-bit sum saturates;
    /// u32's wrap-around is a multiple of 256), f16/bf16 in f32 (rounded
    /// once); then divide averages by the group size. `ints` are the count
    /// arrays `call` finds in `ptrs.ints`.
    #[allow(clippy::too_many_arguments)]
    fn reduce_into<T: Element>(
        &self,
        kind: OpKind,
        watch: Option<Watch>,
        send: &[T],
        recv: &mut [T],
        op: ReduceOp,
        ints: Vec<Vec<c_int>>,
        mpi_call: impl Fn(&Ptrs, ffi::MPI_Datatype, Call<'_>) -> c_int,
    ) -> Result<(), CommError> {
        let n = self.size;
        let phase = |send, recv| Phase {
            ints: ints.clone(),
            ..Phase::new(kind, watch.clone(), send, recv)
        };
        if T::DTYPE == DType::U8 && matches!(op, ReduceOp::Sum | ReduceOp::Prod) {
            let wide: Vec<u32> = bytemuck::cast_slice::<T, u8>(send)
                .iter()
                .map(|&b| b as u32)
                .collect();
            let mut out = vec![0u32; recv.len()];
            let dt = datatype(DType::U32);
            self.data(
                phase(
                    bytemuck::cast_slice(&wide),
                    bytemuck::cast_slice_mut(&mut out),
                ),
                |p, _, c| mpi_call(p, dt, c),
            )?;
            for (b, w) in bytemuck::cast_slice_mut::<T, u8>(recv).iter_mut().zip(&out) {
                *b = *w as u8;
            }
            return Ok(());
        }
        if is_half(T::DTYPE) {
            let wide = widen(send);
            let mut out = vec![0f32; recv.len()];
            // SAFETY: reading MPI's predefined datatype handle.
            let float = unsafe { ffi::RSMPI_FLOAT };
            self.data(
                phase(
                    bytemuck::cast_slice(&wide),
                    bytemuck::cast_slice_mut(&mut out),
                ),
                |p, _, c| mpi_call(p, float, c),
            )?;
            if op == ReduceOp::Mean {
                out.iter_mut().for_each(|x| *x /= n as f32);
            }
            narrow(&out, recv);
            return Ok(());
        }
        let dt = datatype(T::DTYPE);
        self.data(
            phase(bytemuck::cast_slice(send), bytemuck::cast_slice_mut(recv)),
            |p, _, c| mpi_call(p, dt, c),
        )?;
        if op == ReduceOp::Mean {
            divide(recv, n);
        }
        Ok(())
    }

    /// In-place all-reduce of `bytes` (elements of `size` bytes, type `dt`),
    /// in chunks that fit a C `int`.
    #[allow(clippy::too_many_arguments)]
    fn all_reduce_raw(
        &self,
        comm: ffi::MPI_Comm,
        watch: Option<Watch>,
        bytes: &mut [u8],
        size: usize,
        dt: ffi::MPI_Datatype,
        op: ffi::MPI_Op,
    ) -> Result<(), CommError> {
        let kind = OpKind::AllReduce;
        let len = bytes.len() / size;
        let requests = len.div_ceil(raw::MAX_COUNT);
        let chunk = move |p: *mut c_void, i: usize| {
            let off = i * raw::MAX_COUNT;
            let m = (len - off).min(raw::MAX_COUNT);
            // SAFETY: `p` holds `len` elements of `size` bytes and
            // `off < len` (`i < requests`).
            (
                unsafe { (p as *mut u8).add(off * size) } as *mut c_void,
                m as c_int,
            )
        };
        if self.session.in_place {
            return self.data(
                Phase {
                    op: kind,
                    watch,
                    send: &[],
                    recv: bytes,
                    recv_in: true,
                    ints: Vec::new(),
                    requests,
                },
                |p, i, call| {
                    let (c, m) = chunk(p.recv, i);
                    // SAFETY: Open MPI's MPI_IN_PLACE is `(void *) 1`; `c`
                    // holds `m` elements that only MPI touches until the
                    // call returns (blocking) or the request completes.
                    unsafe {
                        match call {
                            Call::Post(r) => {
                                ffi::MPI_Iallreduce(OPEN_MPI_IN_PLACE, c, m, dt, op, comm, r)
                            }
                            Call::Block => {
                                ffi::MPI_Allreduce(OPEN_MPI_IN_PLACE, c, m, dt, op, comm)
                            }
                        }
                    }
                },
            );
        }
        let copy = bytes.to_vec();
        self.data(
            Phase {
                op: kind,
                watch,
                send: &copy,
                recv: bytes,
                recv_in: false,
                ints: Vec::new(),
                requests,
            },
            |p, i, call| {
                let (s, _) = chunk(p.send as *mut c_void, i);
                let (c, m) = chunk(p.recv, i);
                // SAFETY: a separate send buffer and `c`, `m` elements each,
                // untouched by anyone but MPI until the call returns
                // (blocking) or the request completes.
                unsafe {
                    match call {
                        Call::Post(r) => ffi::MPI_Iallreduce(s, c, m, dt, op, comm, r),
                        Call::Block => ffi::MPI_Allreduce(s, c, m, dt, op, comm),
                    }
                }
            },
        )
    }
}

/// A collective's check, which its body runs ([`Check::run`]) with what
/// it sends inline.
struct Check<'c, L> {
    comm: &'c MpiCommunicator,
    /// When the call started: the record exchange's deadline runs from it.
    started: Instant,
    call: CallArgs<'c>,
    elements: usize,
    local: L,
}

impl<'c, L: FnOnce() -> Result<(), CommError>> Check<'c, L> {
    /// With checks on: exchange every rank's record (and, for a small call,
    /// `parcel`: [`inline`]) with the deadline, and agree. A deadline for
    /// the record exchange (every rank arrives), then a fresh one for the
    /// data phase (the data moves): a peer that arrives late but within its
    /// deadline must not leave too little time for a large transfer. A call
    /// ends within twice the timeout (or, on the caller's buffers, the job
    /// is aborted then). Without checks: this rank's own arguments, and
    /// MPI's `int` limit on them.
    fn run(self, parcel: Parcel<'_>) -> Result<Checked<'c>, CommError> {
        let comm = self.comm;
        if !comm.session.checked {
            let call = self.call;
            comm.admit_unchecked(|| {
                (self.local)()?;
                raw::fits_int(&call, comm.size, comm.rank)
            })?;
            return Ok(Checked {
                comm,
                fp: call.fp,
                elements: self.elements,
                agreed: None,
            });
        }
        let deadline = self.started + comm.session.timeout;
        let mut shm = comm.shm.lock().unwrap_or_else(|e| e.into_inner());
        let agreed = if let Shm::Ready(seg) = &mut *shm {
            agree::agree_shared(
                seg,
                &self.call,
                deadline,
                &parcel,
                &comm.inbox,
                comm.session.timeout,
            )?
        } else {
            drop(shm);
            agree::agree(&comm.channel(), &self.call, deadline, &parcel, &comm.inbox)?
        };
        Ok(Checked {
            comm,
            fp: self.call.fp,
            elements: self.elements,
            agreed: Some(agreed),
        })
    }
}

/// A checked collective: what came inline, and the data phase's deadline.
struct Checked<'c> {
    comm: &'c MpiCommunicator,
    fp: Fingerprint,
    elements: usize,
    agreed: Option<agree::Agreed>,
}

impl Checked<'_> {
    /// Whether every rank's record came (checks on).
    fn agreed(&self) -> bool {
        self.agreed.is_some()
    }

    /// The data that came with the records, when the call went inline.
    fn inbox(&self) -> Option<Inbox<'_>> {
        self.agreed
            .as_ref()
            .filter(|a| a.inline)
            .map(agree::Agreed::inbox)
    }

    /// The data phase's deadline (from now: every record is in) and what to
    /// report when it passes (checks on).
    fn watch(&self) -> Option<Watch> {
        let comm = self.comm;
        self.agreed.as_ref().map(|_| Watch {
            deadline: Instant::now() + comm.session.timeout,
            op: self.fp.op,
            seq: self.fp.seq,
            elements: self.elements,
            rank: comm.rank,
            ctl: comm.ctl,
            world_ranks: comm.world_ranks.clone(),
            session: comm.session.clone(),
        })
    }
}

impl Drop for Checked<'_> {
    /// Hand the exchange's buffer back to the communicator for its next
    /// call (a convenience: a buffer not handed back is simply freed).
    fn drop(&mut self) {
        if let Some(a) = self.agreed.take() {
            a.release(&self.comm.inbox);
        }
    }
}

/// Widen half-precision elements to f32 for a reduction.
fn widen<T: Element>(s: &[T]) -> Vec<f32> {
    match T::DTYPE {
        DType::F16 => bytemuck::cast_slice::<T, half::f16>(s)
            .iter()
            .map(|x| x.to_f32())
            .collect(),
        _ => bytemuck::cast_slice::<T, half::bf16>(s)
            .iter()
            .map(|x| x.to_f32())
            .collect(),
    }
}

/// Round f32 results back to a half-precision type, once.
fn narrow<T: Element>(src: &[f32], dst: &mut [T]) {
    match T::DTYPE {
        DType::F16 => {
            for (d, &x) in bytemuck::cast_slice_mut::<T, half::f16>(dst)
                .iter_mut()
                .zip(src)
            {
                *d = half::f16::from_f32(x);
            }
        }
        _ => {
            for (d, &x) in bytemuck::cast_slice_mut::<T, half::bf16>(dst)
                .iter_mut()
                .zip(src)
            {
                *d = half::bf16::from_f32(x);
            }
        }
    }
}

fn is_half(d: DType) -> bool {
    matches!(d, DType::F16 | DType::BF16)
}

/// Divide averaged results by the group size in the accumulation type.
fn divide<T: Element>(buf: &mut [T], n: usize) {
    for x in buf {
        *x = T::from_acc(x.to_acc().div_count(n));
    }
}

/// `e` as reported by the call `op` of `rank` (a failed communicator
/// answers every later call with the error that failed it).
fn with_op(mut e: CommError, op: OpKind, rank: usize) -> CommError {
    if let CommError::Timeout { op: o, .. } = &mut e {
        *o = op;
    }
    e.reported_by(rank)
}

impl Communicator for MpiCommunicator {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.size
    }

    fn world_rank(&self, r: usize) -> usize {
        self.world_ranks[r]
    }

    fn seq(&self) -> u64 {
        self.seq.load(Ordering::Relaxed)
    }

    fn flight_record(&self) -> RankHistory {
        self.recorder
            .history(self.rank, self.world_ranks[self.rank])
    }

    fn split(&self, color: Option<u32>, key: i32) -> Result<Option<Self>, CommError> {
        let op = OpKind::Split;
        let fp = Fingerprint::new(0, op, None, 0);
        let c = match color {
            // SAFETY: reading MPI's "undefined" constant.
            None => unsafe { ffi::RSMPI_UNDEFINED },
            Some(c) => c_int::try_from(c).map_err(|_| {
                self.finish(self.invalid(
                    op,
                    InvalidArgument::Color {
                        color: c,
                        max: i32::MAX as u32,
                    },
                ))
            })?,
        };
        let out = self.collective(
            fp,
            0,
            0,
            (&[], &[]),
            || Ok(()),
            |gate| {
                let checked = gate.run(Parcel::None)?;
                let watch = checked.watch();
                if watch.is_some() {
                    // MPI has no nonblocking split: first make sure, within
                    // the deadline, that every rank has reached this point,
                    // so that the blocking split below has every rank.
                    self.data(Phase::new(op, watch, &[], &mut []), |_, _, call| {
                        // SAFETY: a valid communicator; no buffers.
                        unsafe {
                            match call {
                                Call::Post(r) => ffi::MPI_Ibarrier(self.comm, r),
                                Call::Block => ffi::MPI_Barrier(self.comm),
                            }
                        }
                    })?;
                }
                // SAFETY: reading MPI's null communicator handle.
                let mut out = unsafe { ffi::RSMPI_COMM_NULL };
                let rc = self.session.mpi(|| {
                    // SAFETY: a valid communicator; MPI writes the new handle.
                    // Every rank has arrived (checked) or is committed (unchecked).
                    unsafe { ffi::MPI_Comm_split(self.comm, c, key, &mut out) }
                });
                check(op, self.rank, rc)?;
                Ok(out)
            },
        )?;
        // SAFETY: comparing with MPI's null communicator handle.
        if out == unsafe { ffi::RSMPI_COMM_NULL } {
            return Ok(None);
        }
        MpiCommunicator::adopt(out, self.session.clone())
            .map(Some)
            .map_err(|e| self.finish(e))
    }

    fn all_reduce<T: Element>(&self, buf: &mut [T], op: ReduceOp) -> Result<(), CommError> {
        let kind = OpKind::AllReduce;
        let fp = Fingerprint::new(0, kind, Some(T::DTYPE), buf.len()).with_reduce(op);
        let len = buf.len();
        self.collective(
            fp,
            0,
            len,
            (&[], &[]),
            || Ok(()),
            |check| {
                let c = check.run(Parcel::Same(bytes(buf)))?;
                if let Some(inbox) = c.inbox() {
                    self.avg_on_integers::<T>(kind, op)?;
                    let inputs = (0..self.size)
                        .map(|q| {
                            (q != self.rank)
                                .then(|| inbox.from::<T>(kind, q, len))
                                .transpose()
                        })
                        .collect::<Result<Vec<_>, _>>()?;
                    inline::reduce_in_place(&inputs, buf, op);
                    return Ok(());
                }
                self.avg_on_integers::<T>(kind, op)?;
                let writable = !self.session.staged;
                let seq = c.fp.seq;
                let stranded = |stop: &Stop| self.stranded(kind, seq, stop);
                if let Some(r) = self.on_segment(&c, |seg, d| {
                    shared::all_reduce(seg, buf, op, d, writable, stranded)
                }) {
                    return r;
                }
                if let Some(r) = self.all_reduce_hosts(&c, buf, op) {
                    return r;
                }
                let watch = c.watch();
                if is_half(T::DTYPE) {
                    let mut wide = widen(buf);
                    self.all_reduce_raw(
                        self.comm,
                        watch,
                        bytemuck::cast_slice_mut(&mut wide),
                        4,
                        // SAFETY: reading MPI's predefined datatype handle.
                        unsafe { ffi::RSMPI_FLOAT },
                        operator(op),
                    )?;
                    if op == ReduceOp::Mean {
                        wide.iter_mut().for_each(|x| *x /= self.size as f32);
                    }
                    narrow(&wide, buf);
                    return Ok(());
                }
                if T::DTYPE == DType::U8 && matches!(op, ReduceOp::Sum | ReduceOp::Prod) {
                    // Open MPI 4.1's vectorised 8-bit sum saturates instead of
                    // wrapping (found by the conformance suite): reduce in u32,
                    // whose wrap-around is a multiple of 256, and truncate.
                    let bytes: &mut [u8] = bytemuck::cast_slice_mut(buf);
                    let mut wide: Vec<u32> = bytes.iter().map(|&b| b as u32).collect();
                    self.all_reduce_raw(
                        self.comm,
                        watch,
                        bytemuck::cast_slice_mut(&mut wide),
                        4,
                        datatype(DType::U32),
                        operator(op),
                    )?;
                    for (b, w) in bytes.iter_mut().zip(&wide) {
                        *b = *w as u8;
                    }
                    return Ok(());
                }
                self.all_reduce_raw(
                    self.comm,
                    watch,
                    bytemuck::cast_slice_mut(buf),
                    size_of::<T>(),
                    datatype(T::DTYPE),
                    operator(op),
                )?;
                if op == ReduceOp::Mean {
                    divide(buf, self.size);
                }
                Ok(())
            },
        )
    }

    fn all_gather<T: Element>(&self, send: &[T], recv: &mut [T]) -> Result<(), CommError> {
        let kind = OpKind::AllGather;
        let fp = Fingerprint::new(0, kind, Some(T::DTYPE), send.len());
        let (me, n) = (self.rank, self.size);
        let (send_len, recv_len) = (send.len(), recv.len());
        let want =
            || crate::validate::sizes::product(kind, me, n, send_len, max_elements(size_of::<T>()));
        self.collective(
            fp,
            send_len,
            recv_len,
            (&[], &[]),
            || self.length(kind, BufferRole::Receive, want()?, recv_len),
            |check| {
                let c = check.run(Parcel::Same(bytes(send)))?;
                if let Some(inbox) = c.inbox() {
                    for (q, block) in recv.chunks_exact_mut(send_len.max(1)).enumerate().take(n) {
                        let src = if q == me {
                            send
                        } else {
                            inbox.from::<T>(kind, q, send_len)?
                        };
                        block.copy_from_slice(src);
                    }
                    return Ok(());
                }
                let counts = vec![send_len; n];
                if let Some(r) =
                    self.on_segment(&c, |seg, d| shared::all_gather(seg, send, recv, &counts, d))
                {
                    return r;
                }
                let watch = c.watch();
                // MPI takes the per-rank count; the total may exceed an int.
                let c = count(kind, me, send.len())?;
                let dt = datatype(T::DTYPE);
                self.data(
                    Phase::new(kind, watch, bytes(send), bytes_mut(recv)),
                    |p, _, call| {
                        // SAFETY: lengths checked: `send` holds c and `recv`
                        // n × c elements, only MPI's until completion.
                        unsafe {
                            match call {
                                Call::Post(r) => {
                                    ffi::MPI_Iallgather(p.send, c, dt, p.recv, c, dt, self.comm, r)
                                }
                                Call::Block => {
                                    ffi::MPI_Allgather(p.send, c, dt, p.recv, c, dt, self.comm)
                                }
                            }
                        }
                    },
                )
            },
        )
    }

    fn all_gather_v<T: Element>(
        &self,
        send: &[T],
        recv: &mut [T],
        counts: &[usize],
    ) -> Result<(), CommError> {
        let kind = OpKind::AllGatherV;
        let fp = Fingerprint::new(0, kind, Some(T::DTYPE), 0);
        let (me, n) = (self.rank, self.size);
        let (send_len, recv_len) = (send.len(), recv.len());
        self.collective(
            fp,
            send_len,
            recv_len,
            (counts, &[]),
            || {
                self.length(kind, BufferRole::ReceiveCounts, n, counts.len())?;
                if counts[me] != send_len {
                    return Err(CommError::CountMismatch {
                        op: kind,
                        rank: me,
                        offender: me,
                        peer: me,
                        expected: counts[me],
                        got: send_len,
                        context: ErrorContext::none(),
                    });
                }
                let total = self.total::<T>(kind, counts)?;
                self.length(kind, BufferRole::Receive, total, recv_len)
            },
            |check| {
                let c = check.run(Parcel::Same(bytes(send)))?;
                if let Some(inbox) = c.inbox() {
                    let mut off = 0;
                    for (q, &k) in counts.iter().enumerate() {
                        let src = if q == me {
                            send
                        } else {
                            inbox.from::<T>(kind, q, k)?
                        };
                        recv[off..off + k].copy_from_slice(src);
                        off += k;
                    }
                    return Ok(());
                }
                if let Some(r) =
                    self.on_segment(&c, |seg, d| shared::all_gather(seg, send, recv, counts, d))
                {
                    return r;
                }
                let watch = c.watch();
                let (c, d) = counts_and_displs(kind, me, counts)?;
                let dt = datatype(T::DTYPE);
                let mine = c[me];
                let phase = Phase {
                    ints: vec![c, d],
                    ..Phase::new(kind, watch, bytes(send), bytes_mut(recv))
                };
                self.data(phase, |p, _, call| {
                    // SAFETY: lengths checked against the counts; the count
                    // arrays live until completion.
                    unsafe {
                        match call {
                            Call::Post(r) => ffi::MPI_Iallgatherv(
                                p.send, mine, dt, p.recv, p.ints[0], p.ints[1], dt, self.comm, r,
                            ),
                            Call::Block => ffi::MPI_Allgatherv(
                                p.send, mine, dt, p.recv, p.ints[0], p.ints[1], dt, self.comm,
                            ),
                        }
                    }
                })
            },
        )
    }

    fn reduce_scatter<T: Element>(
        &self,
        send: &[T],
        recv: &mut [T],
        op: ReduceOp,
    ) -> Result<(), CommError> {
        let kind = OpKind::ReduceScatter;
        let fp = Fingerprint::new(0, kind, Some(T::DTYPE), recv.len()).with_reduce(op);
        let (me, n) = (self.rank, self.size);
        let (send_len, recv_len) = (send.len(), recv.len());
        self.collective(
            fp,
            send_len,
            recv_len,
            (&[], &[]),
            || {
                let want = crate::validate::sizes::product(
                    kind,
                    me,
                    n,
                    recv_len,
                    max_elements(size_of::<T>()),
                )?;
                self.length(kind, BufferRole::Send, want, send_len)
            },
            |check| {
                let c = check.run(inline::blocks(send, vec![recv_len; n]))?;
                if let Some(inbox) = c.inbox() {
                    self.avg_on_integers::<T>(kind, op)?;
                    let inputs = (0..n)
                        .map(|q| {
                            if q == me {
                                Ok(&send[me * recv_len..(me + 1) * recv_len])
                            } else {
                                inbox.from::<T>(kind, q, recv_len)
                            }
                        })
                        .collect::<Result<Vec<_>, _>>()?;
                    inline::reduce_blocks(&inputs, recv, op);
                    return Ok(());
                }
                self.avg_on_integers::<T>(kind, op)?;
                let counts = vec![recv_len; n];
                if let Some(r) = self.on_segment(&c, |seg, d| {
                    shared::reduce_scatter(seg, send, recv, &counts, op, d)
                }) {
                    return r;
                }
                let watch = c.watch();
                let c = count(kind, me, recv_len)?;
                let mop = operator(op);
                self.reduce_into(kind, watch, send, recv, op, Vec::new(), |p, dt, call| {
                    // SAFETY: buffers of n × c and c elements of `dt`, only
                    // MPI's until completion.
                    unsafe {
                        match call {
                            Call::Post(r) => ffi::MPI_Ireduce_scatter_block(
                                p.send, p.recv, c, dt, mop, self.comm, r,
                            ),
                            Call::Block => {
                                ffi::MPI_Reduce_scatter_block(p.send, p.recv, c, dt, mop, self.comm)
                            }
                        }
                    }
                })
            },
        )
    }

    fn reduce_scatter_v<T: Element>(
        &self,
        send: &[T],
        recv: &mut [T],
        counts: &[usize],
        op: ReduceOp,
    ) -> Result<(), CommError> {
        let kind = OpKind::ReduceScatterV;
        let fp = Fingerprint::new(0, kind, Some(T::DTYPE), 0).with_reduce(op);
        let (me, n) = (self.rank, self.size);
        let (send_len, recv_len) = (send.len(), recv.len());
        self.collective(
            fp,
            send_len,
            recv_len,
            (counts, &[]),
            || {
                self.length(kind, BufferRole::ReceiveCounts, n, counts.len())?;
                self.length(kind, BufferRole::Receive, counts[me], recv_len)?;
                let total = self.total::<T>(kind, counts)?;
                self.length(kind, BufferRole::Send, total, send_len)
            },
            |check| {
                let c = check.run(inline::blocks(send, counts.iter().copied()))?;
                if let Some(inbox) = c.inbox() {
                    // The records agreed: the counts fit the buffers.
                    let offsets = crate::local::kernels::offsets(counts);
                    let block = |p: usize| &send[offsets[p]..offsets[p] + counts[p]];
                    self.avg_on_integers::<T>(kind, op)?;
                    let inputs = (0..n)
                        .map(|q| {
                            if q == me {
                                Ok(block(me))
                            } else {
                                inbox.from::<T>(kind, q, counts[me])
                            }
                        })
                        .collect::<Result<Vec<_>, _>>()?;
                    inline::reduce_blocks(&inputs, recv, op);
                    return Ok(());
                }
                self.avg_on_integers::<T>(kind, op)?;
                if let Some(r) = self.on_segment(&c, |seg, d| {
                    shared::reduce_scatter(seg, send, recv, counts, op, d)
                }) {
                    return r;
                }
                let watch = c.watch();
                let (c, _) = counts_and_displs(kind, me, counts)?;
                let mop = operator(op);
                self.reduce_into(kind, watch, send, recv, op, vec![c], |p, dt, call| {
                    // SAFETY: buffers of the checked lengths, in elements of
                    // `dt`; the count array lives until completion.
                    unsafe {
                        match call {
                            Call::Post(r) => ffi::MPI_Ireduce_scatter(
                                p.send, p.recv, p.ints[0], dt, mop, self.comm, r,
                            ),
                            Call::Block => ffi::MPI_Reduce_scatter(
                                p.send, p.recv, p.ints[0], dt, mop, self.comm,
                            ),
                        }
                    }
                })
            },
        )
    }

    fn broadcast<T: Element>(&self, buf: &mut [T], root: usize) -> Result<(), CommError> {
        let kind = OpKind::Broadcast;
        let fp = Fingerprint::new(0, kind, Some(T::DTYPE), buf.len()).with_root(root);
        let n = self.size;
        let bad_root = || {
            if root >= n {
                Err(self.invalid(kind, InvalidArgument::Root { root, size: n }))
            } else {
                Ok(())
            }
        };
        let len = buf.len();
        // A bad root is the same on every rank that passes it: an error,
        // never a reason to abort.
        self.collective(
            fp,
            0,
            len,
            (&[], &[]),
            || Ok(()),
            |check| {
                let parcel = if self.rank == root {
                    Parcel::Same(bytes(buf))
                } else {
                    Parcel::None
                };
                let c = check.run(parcel)?;
                if let Some(inbox) = c.inbox() {
                    bad_root()?;
                    if self.rank != root {
                        buf.copy_from_slice(inbox.from::<T>(kind, root, len)?);
                    }
                    return Ok(());
                }
                bad_root()?;
                let writable = !self.session.staged;
                let seq = c.fp.seq;
                let stranded = |stop: &Stop| self.stranded(kind, seq, stop);
                if let Some(r) = self.on_segment(&c, |seg, d| {
                    shared::broadcast(seg, buf, root, d, writable, stranded)
                }) {
                    return r;
                }
                let watch = c.watch();
                let dt = datatype(T::DTYPE);
                let size = size_of::<T>();
                let phase = Phase {
                    recv_in: true,
                    requests: len.div_ceil(raw::MAX_COUNT),
                    ..Phase::new(kind, watch, &[], bytes_mut(buf))
                };
                self.data(phase, |p, i, call| {
                    let off = i * raw::MAX_COUNT;
                    let m = (len - off).min(raw::MAX_COUNT) as c_int;
                    // SAFETY: `p.recv` holds `len` elements and `off < len`;
                    // the chunk holds `m` of them, only MPI's until completion.
                    unsafe {
                        let c = (p.recv as *mut u8).add(off * size) as *mut c_void;
                        match call {
                            Call::Post(r) => ffi::MPI_Ibcast(c, m, dt, root as c_int, self.comm, r),
                            Call::Block => ffi::MPI_Bcast(c, m, dt, root as c_int, self.comm),
                        }
                    }
                })
            },
        )
    }

    fn all_to_all<T: Element>(&self, send: &[T], recv: &mut [T]) -> Result<(), CommError> {
        let kind = OpKind::AllToAll;
        let fp = Fingerprint::new(0, kind, Some(T::DTYPE), send.len());
        let (me, n) = (self.rank, self.size);
        let (send_len, recv_len) = (send.len(), recv.len());
        self.collective(
            fp,
            send_len,
            recv_len,
            (&[], &[]),
            || {
                if !send_len.is_multiple_of(n) {
                    return Err(self.invalid(
                        kind,
                        InvalidArgument::NotDivisible {
                            rank: me,
                            len: send_len,
                            parts: n,
                        },
                    ));
                }
                self.length(kind, BufferRole::Receive, send_len, recv_len)
            },
            |check| {
                let k = send_len / n;
                let c = check.run(inline::blocks(send, vec![k; n]))?;
                if let Some(inbox) = c.inbox() {
                    for (q, block) in recv.chunks_exact_mut(k.max(1)).enumerate().take(n) {
                        let src = if q == me {
                            &send[me * k..(me + 1) * k]
                        } else {
                            inbox.from::<T>(kind, q, k)?
                        };
                        block.copy_from_slice(src);
                    }
                    return Ok(());
                }
                if let Some(r) =
                    self.on_segment(&c, |seg, d| shared::all_to_all(seg, send, recv, k, d))
                {
                    return r;
                }
                let watch = c.watch();
                // MPI takes the per-block count; the total may exceed an int.
                let c = count(kind, me, send_len / n)?;
                let dt = datatype(T::DTYPE);
                self.data(
                    Phase::new(kind, watch, bytes(send), bytes_mut(recv)),
                    |p, _, call| {
                        // SAFETY: both buffers hold n × c elements, only
                        // MPI's until completion.
                        unsafe {
                            match call {
                                Call::Post(r) => {
                                    ffi::MPI_Ialltoall(p.send, c, dt, p.recv, c, dt, self.comm, r)
                                }
                                Call::Block => {
                                    ffi::MPI_Alltoall(p.send, c, dt, p.recv, c, dt, self.comm)
                                }
                            }
                        }
                    },
                )
            },
        )
    }

    fn all_to_all_v<T: Element>(
        &self,
        send: &[T],
        send_counts: &[usize],
        recv: &mut [T],
        recv_counts: &[usize],
    ) -> Result<(), CommError> {
        let kind = OpKind::AllToAllV;
        let fp = Fingerprint::new(0, kind, Some(T::DTYPE), 0);
        let (me, n) = (self.rank, self.size);
        let (send_len, recv_len) = (send.len(), recv.len());
        self.collective(
            fp,
            send_len,
            recv_len,
            (send_counts, recv_counts),
            || {
                self.length(kind, BufferRole::SendCounts, n, send_counts.len())?;
                self.length(kind, BufferRole::ReceiveCounts, n, recv_counts.len())?;
                let sent = self.total::<T>(kind, send_counts)?;
                self.length(kind, BufferRole::Send, sent, send_len)?;
                let received = self.total::<T>(kind, recv_counts)?;
                self.length(kind, BufferRole::Receive, received, recv_len)
            },
            |check| {
                let c = check.run(inline::blocks(send, send_counts.iter().copied()))?;
                if let Some(inbox) = c.inbox() {
                    // The records agreed: the counts fit the buffers.
                    let (so, ro) = (
                        crate::local::kernels::offsets(send_counts),
                        crate::local::kernels::offsets(recv_counts),
                    );
                    for q in 0..n {
                        let k = recv_counts[q];
                        let src = if q == me {
                            &send[so[me]..so[me] + send_counts[me]]
                        } else {
                            inbox.from::<T>(kind, q, k)?
                        };
                        recv[ro[q]..ro[q] + k].copy_from_slice(src);
                    }
                    return Ok(());
                }
                if let Some(r) = self.on_segment(&c, |seg, d| {
                    shared::all_to_all_v(seg, (send, send_counts), (&mut *recv, recv_counts), d)
                }) {
                    return r;
                }
                let watch = c.watch();
                let (sc, sd) = counts_and_displs(kind, me, send_counts)?;
                let (rc, rd) = counts_and_displs(kind, me, recv_counts)?;
                let dt = datatype(T::DTYPE);
                let phase = Phase {
                    ints: vec![sc, sd, rc, rd],
                    ..Phase::new(kind, watch, bytes(send), bytes_mut(recv))
                };
                self.data(phase, |p, _, call| {
                    // SAFETY: lengths checked against the counts; the count
                    // arrays live until completion.
                    unsafe {
                        match call {
                            Call::Post(r) => ffi::MPI_Ialltoallv(
                                p.send, p.ints[0], p.ints[1], dt, p.recv, p.ints[2], p.ints[3], dt,
                                self.comm, r,
                            ),
                            Call::Block => ffi::MPI_Alltoallv(
                                p.send, p.ints[0], p.ints[1], dt, p.recv, p.ints[2], p.ints[3], dt,
                                self.comm,
                            ),
                        }
                    }
                })
            },
        )
    }

    fn send<T: Element>(&self, buf: &[T], dest: usize) -> Result<(), CommError> {
        let kind = OpKind::Send;
        let fp = Fingerprint::new(0, kind, Some(T::DTYPE), buf.len());
        self.call(fp, buf.len(), Some(dest), |_, started| {
            let d = self.peer(kind, dest)?;
            if d == self.rank {
                return Err(self.invalid(kind, InvalidArgument::SelfMessage { op: kind }));
            }
            let deadline = started + self.session.timeout;
            super::p2p::exchange(
                &self.channel(),
                self.comm,
                kind,
                Some((buf, d)),
                None::<(&mut [T], usize)>,
                deadline,
            )
        })
    }

    fn recv<T: Element>(&self, buf: &mut [T], source: usize) -> Result<(), CommError> {
        let kind = OpKind::Recv;
        let fp = Fingerprint::new(0, kind, Some(T::DTYPE), buf.len());
        self.call(fp, buf.len(), Some(source), |_, started| {
            let s = self.peer(kind, source)?;
            if s == self.rank {
                return Err(self.invalid(kind, InvalidArgument::SelfMessage { op: kind }));
            }
            let deadline = started + self.session.timeout;
            super::p2p::exchange(
                &self.channel(),
                self.comm,
                kind,
                None::<(&[T], usize)>,
                Some((buf, s)),
                deadline,
            )
        })
    }

    fn send_recv<T: Element>(
        &self,
        send: &[T],
        dest: usize,
        recv: &mut [T],
        source: usize,
    ) -> Result<(), CommError> {
        let kind = OpKind::SendRecv;
        let fp = Fingerprint::new(0, kind, Some(T::DTYPE), send.len());
        let me = self.rank;
        self.call(fp, send.len(), Some(dest), |_, started| {
            let (d, s) = (self.peer(kind, dest)?, self.peer(kind, source)?);
            match (d == me, s == me) {
                (true, true) => {
                    self.length(kind, BufferRole::Receive, send.len(), recv.len())?;
                    recv.copy_from_slice(send);
                    return Ok(());
                }
                (false, false) => {}
                _ => return Err(self.invalid(kind, InvalidArgument::SelfMessage { op: kind })),
            }
            let deadline = started + self.session.timeout;
            super::p2p::exchange(
                &self.channel(),
                self.comm,
                kind,
                Some((send, d)),
                Some((recv, s)),
                deadline,
            )
        })
    }

    fn barrier(&self) -> Result<(), CommError> {
        let kind = OpKind::Barrier;
        let fp = Fingerprint::new(0, kind, None, 0);
        self.collective(
            fp,
            0,
            0,
            (&[], &[]),
            || Ok(()),
            |check| {
                let c = check.run(Parcel::None)?;
                if c.agreed() {
                    // Every rank sent its record on entering the call, and
                    // this rank has them all: every rank has entered.
                    return Ok(());
                }
                let watch = c.watch();
                self.data(Phase::new(kind, watch, &[], &mut []), |_, _, call| {
                    // SAFETY: a valid communicator; no buffers.
                    unsafe {
                        match call {
                            Call::Post(r) => ffi::MPI_Ibarrier(self.comm, r),
                            Call::Block => ffi::MPI_Barrier(self.comm),
                        }
                    }
                })
            },
        )
    }
}
