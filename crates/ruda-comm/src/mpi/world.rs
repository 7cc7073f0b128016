//! Starting and ending MPI for ruda: initialisation at a thread level that
//! is checked, the world communicator, the optional panic hook that takes
//! the job down, and finalisation tied to an explicit guard.

use std::ffi::{c_char, c_int};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use mpi::ffi;

use super::communicator::MpiCommunicator;
use super::raw;
use super::session::{Session, SharedMemory};
use crate::{CommError, ErrorContext, OpKind, TIMEOUT_ENV};

/// Whether this process has an `MpiWorld` alive (`Some(true)`), had one
/// (`Some(false)`: MPI cannot start again), or never had one.
static STARTED: Mutex<Option<bool>> = Mutex::new(None);

/// How to start MPI; see [`MpiWorld::builder`].
///
/// # Example
/// ```no_run
/// use std::time::Duration;
/// use ruda_comm::MpiWorld;
/// // Run with: mpirun -n 4 target/release/my_program
/// let mpi = MpiWorld::builder()
///     .timeout(Duration::from_secs(60))
///     .abort_on_panic(true)
///     .init()
///     .expect("MPI starts");
/// let world = mpi.world().unwrap();
/// # drop(world);
/// mpi.finalize().unwrap();
/// ```
#[derive(Clone, Debug)]
pub struct MpiWorldBuilder {
    timeout: Option<Duration>,
    abort_on_panic: bool,
    checked: bool,
    staged: bool,
    shm: SharedMemory,
}

impl MpiWorldBuilder {
    /// The deadline of every wait (default: `RUDA_TIMEOUT_SECS`, else
    /// [`crate::DEFAULT_TIMEOUT`]): for every rank to arrive at a call, and
    /// again, from then on, for a collective's data to move (so a checked
    /// collective ends within twice this).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Install a panic hook that aborts the whole MPI job after printing
    /// the panic, so that no rank waits for one that died (default off).
    /// The hook fires on every panic of the process, caught ones included.
    pub fn abort_on_panic(mut self, yes: bool) -> Self {
        self.abort_on_panic = yes;
        self
    }

    /// Keep the per-call checks on (the default; this undoes an earlier
    /// [`MpiWorldBuilder::unchecked`]). Every collective first exchanges
    /// every rank's call record with each peer, with the deadline: a
    /// missing rank is a [`CommError::Timeout`] naming it, and ranks in
    /// different collectives or with counts that do not fit get the same
    /// error on every rank before any data moves, at the cost of a record
    /// to and from each peer per call (and, in groups of up to 8, a second
    /// small message that carries a call of up to 4000 bytes a message, which
    /// then needs no data phase). The data phase that follows has the same
    /// deadline (see [`MpiCommunicator`]).
    ///
    /// # Example
    /// ```no_run
    /// let mpi = ruda_comm::MpiWorld::builder().checked().init().expect("MPI starts");
    /// assert!(mpi.world().unwrap().checked());
    /// ```
    pub fn checked(mut self) -> Self {
        self.checked = true;
        self
    }

    /// Turn the per-call checks off: collectives go straight to MPI, with
    /// no record exchange and no deadline (point-to-point calls keep their
    /// rendezvous and deadline). A rank whose own arguments are
    /// inconsistent (a buffer that does not fit its own counts) still
    /// aborts the job rather than call MPI with them.
    ///
    /// # Safety
    /// Without the checks nothing stops an erroneous MPI program, whose
    /// behaviour is undefined (truncated messages, writes past a buffer,
    /// hangs). The caller guarantees, for every communicator of this
    /// world, that every rank of it makes the same sequence of collective
    /// calls, each with the same operation, element type, reduction
    /// operator and root, and with counts that agree across ranks (the
    /// same length for `all_reduce` and `broadcast`, per-rank lengths that
    /// match every peer's count lists for the `_v` calls and `all_to_all`),
    /// and that every rank of it arrives (a rank that never makes a call
    /// leaves its peers blocked for good). These are exactly the
    /// conditions the checks verify at run time.
    ///
    /// # Example
    /// ```no_run
    /// let b = ruda_comm::MpiWorld::builder();
    /// // SAFETY: every rank of this program makes the same collective calls
    /// // with matching arguments (a single all-reduce of one element).
    /// let mpi = unsafe { b.unchecked() }.init().expect("MPI starts");
    /// let world = mpi.world().unwrap();
    /// assert!(!world.checked());
    /// ```
    ///
    /// Without `unsafe` it does not compile:
    /// ```compile_fail,E0133
    /// let b = ruda_comm::MpiWorld::builder().unchecked();
    /// ```
    pub unsafe fn unchecked(mut self) -> Self {
        self.checked = false;
        self
    }

    /// Whether a checked collective's data phase works on copies of the
    /// caller's buffers (`true`) or on the buffers themselves (`false`, the
    /// default). Both keep the deadline; they differ when a peer never
    /// joins the data phase or never finishes it (one whose own record
    /// exchange timed out a moment earlier, a process that died, a host
    /// whose link went down), which MPI can neither detect nor cancel.
    ///
    /// - `false` (the default): MPI's blocking collectives on the caller's
    ///   buffers, whose tuned algorithms run at the raw MPI call's speed,
    ///   under a watchdog thread (`ruda-mpi-watchdog`, one per process,
    ///   started by the first checked collective). A rank still in a data
    ///   phase at its deadline cannot hand back buffers MPI may still
    ///   write: it holds a short roll call with its peers (a quarter of the
    ///   timeout, 50 ms to 2 s), prints the call, its rank and the peers
    ///   that never joined or cannot be reached, and aborts the job with
    ///   exit code 75, as NCCL's and PyTorch's watchdogs do.
    /// - `true`: MPI's nonblocking collectives on copies; at the deadline
    ///   the call returns [`CommError::Timeout`] and the copies are leaked
    ///   (MPI may still use them). The copies and the nonblocking
    ///   algorithms cost time on large buffers (measured on 2 ranks of this
    ///   project's 2-core machine, 16 MiB of f32: all-reduce 15.3 vs 5.3 ms,
    ///   all-gather 7.2 vs 4.4 ms; see the README's MPI section).
    ///
    /// # Example
    /// ```no_run
    /// // A rank whose peers vanish mid-call gets a Timeout to report instead
    /// // of ending the job there (dropping the world then aborts the job,
    /// // since peers may still be inside the call).
    /// let mpi = ruda_comm::MpiWorld::builder().staged(true).init().expect("MPI starts");
    /// # drop(mpi);
    /// ```
    pub fn staged(mut self, yes: bool) -> Self {
        self.staged = yes;
        self
    }

    /// Whether communicators whose processes all run on one host move
    /// their collectives' data through a shared-memory segment with ruda's
    /// own kernels (default `true`; only with checks on). The segment is
    /// made when the communicator is (by [`MpiWorld::world`] or `split`,
    /// with a few more blocking MPI calls: up to nine across hosts), reserved in `/dev/shm` up
    /// front (two slots of [`Self::shared_memory_slot`] per rank, two
    /// record areas per rank of up to 32 KiB in groups of up to 8 and a
    /// few hundred bytes above, and a header of a page or more), and unmapped when the communicator is dropped. A
    /// segment that some rank cannot make or map (a full `/dev/shm`) is no
    /// error: that communicator moves its data through MPI, and the rank
    /// says why on stderr. Then:
    /// - call records, and the data of small calls, go through the
    ///   segment: no MPI message per call;
    /// - all-reduce, reduce-scatter(-v), all-gather(-v), broadcast and
    ///   all-to-all(-v) move their data through it (point-to-point calls
    ///   and `split` go through MPI);
    /// - reductions run in rank order with the thread transport's kernels,
    ///   so a result has the same bits as on a [`crate::LocalWorld`];
    /// - a rank that does not come within the deadline (it died, or waits
    ///   elsewhere) gives every other rank a [`CommError::Timeout`] naming
    ///   it (the same names on every rank), never the watchdog's abort
    ///   mid-call: no peer ever writes the caller's buffers (peers at most
    ///   read them, [`Self::shared_memory_single_copy`]). As after any
    ///   timeout, the communicator stays failed and dropping the
    ///   [`MpiWorld`] then aborts the job. The one exception is an
    ///   all-reduce (or a broadcast of 256 KiB or more) of shared buffers
    ///   ([`Self::shared_buffers`]), which peers write in place: a rank
    ///   that loses a peer midway ends the job (exit code 75) instead,
    ///   except a broadcast's root, whose buffer nobody writes.
    ///
    /// Across hosts, see [`Self::hierarchical`].
    ///
    /// With `false` on any rank, MPI moves every communicator's data. Each
    /// rank tells whether its communicator uses the
    /// segment: [`MpiCommunicator::shared_memory`].
    ///
    /// # Example
    /// ```no_run
    /// // Compare with Open MPI's own shared-memory path.
    /// let mpi = ruda_comm::MpiWorld::builder().shared_memory(false).init().expect("MPI starts");
    /// assert!(!mpi.world().unwrap().shared_memory());
    /// ```
    pub fn shared_memory(mut self, yes: bool) -> Self {
        self.shm.on = yes;
        self
    }

    /// The size of each of a rank's two slots in a shared-memory segment,
    /// in bytes (rounded up to whole pages, at least one page and a cache
    /// line per rank, at most 1 GiB). By default 1 MiB on up to 8 ranks,
    /// then less, so that a segment's slots take at most 16 MiB of
    /// `/dev/shm` up to 32 ranks, 256 KiB from there on; 256 KiB where the
    /// host's ranks outnumber its online CPUs (measured faster there, the
    /// ranks taking turns on the cores). Data moves in rounds
    /// of at most one slot per rank (a `1/n` block of one for
    /// reduce-scatter and all-to-all), with a barrier or two per round, so
    /// larger slots mean fewer rounds: on 2 processes of the development
    /// machine 1 MiB slots took a 1 MiB all-reduce 48–77 µs where 256 KiB
    /// slots took 113. Rank 0's setting holds for every rank of a
    /// communicator. Small slots only serve tests that want many rounds
    /// from small buffers.
    ///
    /// # Example
    /// ```no_run
    /// let mpi = ruda_comm::MpiWorld::builder()
    ///     .shared_memory_slot(256 << 10)
    ///     .init()
    ///     .expect("MPI starts");
    /// # drop(mpi);
    /// ```
    pub fn shared_memory_slot(mut self, bytes: usize) -> Self {
        self.shm.slot = Some(bytes);
        self
    }

    /// Give each rank an arena of `bytes` (rounded up to whole pages;
    /// default 0: none) in every shared-memory segment, for
    /// [`MpiCommunicator::shared_buffer`]: buffers that every rank of the
    /// host has mapped, so that an all-reduce of 64 KiB or more (and a
    /// broadcast of 256 KiB or more) of shared buffers on every rank runs
    /// in place on its peers' memory with no copy through the slots, as
    /// threads do, and other collectives read
    /// peers' shared buffers through the mapping (see
    /// [`crate::SharedBuffer`], which also says how a failure midway
    /// ends). Each communicator with a segment reserves its host's ranks'
    /// arenas in `/dev/shm` up front, beside its slots (`ranks × bytes`;
    /// where that cannot be had, the segment is made without arenas, says
    /// so on stderr, and `shared_buffer` returns
    /// [`crate::SharedBufferError::NoArena`]; across hosts, arenas are
    /// offered only where every host has them). Rank 0's setting
    /// holds for every rank of a communicator. Worlds built with
    /// [`Self::staged`] get arenas too, but no peer writes their buffers
    /// (no peer may write a buffer a `Timeout` hands back): their
    /// all-reduces keep the slots, and their broadcasts read the root's
    /// buffer, unless the staged rank is the root, whose buffer nobody
    /// writes anyway.
    ///
    /// # Example
    /// ```no_run
    /// use ruda_comm::{Communicator, ReduceOp};
    /// let mpi = ruda_comm::MpiWorld::builder()
    ///     .shared_buffers(256 << 20)
    ///     .init()
    ///     .expect("MPI starts");
    /// let world = mpi.world().unwrap();
    /// let mut grads = world.shared_buffer::<f32>(16 << 20).expect("room in the arena");
    /// world.all_reduce(&mut grads, ReduceOp::Mean).unwrap();
    /// ```
    pub fn shared_buffers(mut self, bytes: usize) -> Self {
        self.shm.arena = bytes;
        self
    }

    /// Whether the ranks of a host's segment read their peers' buffers
    /// directly (default `true`): an all-gather(-v), all-to-all(-v),
    /// broadcast or reduce-scatter(-v) of [`crate::SINGLE_COPY_FROM_BYTES`] (64 KiB)
    /// to below [`crate::SINGLE_COPY_BELOW_BYTES`] (16 MiB) then moves each
    /// byte once, from the peer's buffer into the reader's, with Linux's
    /// cross-memory attach (`process_vm_readv`, as Open MPI's
    /// shared-memory transport does for large messages), where the
    /// segment's slots copy it twice (into the sender's slot, out of it).
    /// This holds for the host-local steps of a hierarchical all-reduce
    /// too. Smaller calls keep the slots, whose one barrier costs less than
    /// the direct path's two; larger ones too, and a plain all-reduce
    /// (measured faster there; see the constants). On 2 processes of the
    /// 2-core development machine, 256 KiB to 4 MiB of all-gather took
    /// 0.44–0.64× the slot path's time and all-to-all 0.42–0.77×, level
    /// with Open MPI's own (which reads the same way).
    ///
    /// Single copies are also off where a host runs more of the
    /// communicator's ranks than the CPUs they may run on (the union of
    /// their affinity masks): there, with ranks taking turns on the cores,
    /// they measured 2–3× slower than the slots at 64 KiB to 1 MiB (4
    /// processes on 2 cores), and level at 16 MiB. A CPU quota (a cgroup's
    /// `cpu.max`, `docker --cpus`) is not seen: where ranks outnumber it,
    /// turn single copies off.
    ///
    /// The kernel allows such reads between processes of one user unless a
    /// process turned off `PR_SET_DUMPABLE`, Yama's `ptrace_scope` forbids
    /// them (at 1 only a parent or a process with `CAP_SYS_PTRACE` may
    /// read, at 2 only the latter, at 3 nobody), or a seccomp profile
    /// refuses the call. When the communicator
    /// is made, every rank reads a known word from each peer (one
    /// `MPI_Allgather` and one `MPI_Allreduce` more); only if every rank
    /// succeeds does the segment read directly, else it keeps its slots,
    /// without a message. Nothing in the process is changed for it (no
    /// `prctl`). With `false` on any rank, the slots move every call's
    /// data, except that shared buffers ([`Self::shared_buffers`]) are
    /// still read through the mapping every rank has of them, from 64 KiB
    /// at any size: this setting governs cross-memory attach.
    ///
    /// Peers' ordinary buffers are only ever read, never written, and only
    /// between two barriers of the call. A peer gone mid-call fails the call on
    /// every rank with a [`CommError::Timeout`] naming it, as on the slot
    /// path. A read refused later (a buffer the kernel cannot pin, such as
    /// a device mapping; a process that turned off `PR_SET_DUMPABLE`) is
    /// no error: every rank learns of it at the call's last barrier, runs
    /// the call again through the slots, and keeps the slots from then on;
    /// the rank whose read was refused says why on stderr.
    ///
    /// # Example
    /// ```no_run
    /// // Measure the slot path alone.
    /// let mpi = ruda_comm::MpiWorld::builder()
    ///     .shared_memory_single_copy(false)
    ///     .init()
    ///     .expect("MPI starts");
    /// # drop(mpi);
    /// ```
    pub fn shared_memory_single_copy(mut self, yes: bool) -> Self {
        self.shm.single_copy = yes;
        self
    }

    /// The sizes of the calls that read peers' buffers directly when
    /// [`Self::shared_memory_single_copy`] is on, in bytes of the call's
    /// whole receive buffer (a reduce-scatter's send buffer, a broadcast's
    /// buffer), default [`crate::SINGLE_COPY_FROM_BYTES`]`..`[`crate::SINGLE_COPY_BELOW_BYTES`].
    /// Rank 0's setting holds for every rank of a communicator. The
    /// default window is where single copies measured faster than the
    /// slots on this project's machine; `0..usize::MAX` sends every call
    /// of those collectives through them (the tests do, to cover every
    /// edge case on that path); an empty range (on any rank) is the same as
    /// `false`.
    ///
    /// # Example
    /// ```no_run
    /// let mpi = ruda_comm::MpiWorld::builder()
    ///     .shared_memory_single_copy_sizes(1 << 20..64 << 20)
    ///     .init()
    ///     .expect("MPI starts");
    /// # drop(mpi);
    /// ```
    pub fn shared_memory_single_copy_sizes(mut self, bytes: std::ops::Range<usize>) -> Self {
        self.shm.single_copy_sizes = bytes;
        self
    }

    /// Whether communicators whose ranks span several hosts, with the same
    /// number of ranks (more than one) on each, make their all-reduces
    /// hierarchical (default `false`; needs [`Self::shared_memory`] on
    /// every rank). Each host's ranks then share a segment: an all-reduce
    /// reduce-scatters through it into one share per rank, all-reduces
    /// each share across hosts through MPI (the ranks of one position on
    /// every host; under the watchdog, as any MPI data phase on the
    /// caller's memory), and all-gathers the shares back through the
    /// segment. `f16`/`bf16` and `u8` keep MPI's path. Off by default
    /// because it has not been measured faster: on this project's
    /// emulated cluster (2 hosts of 2 ranks sharing 2 cores, linked by
    /// veth) it took 1.45–1.7× Open MPI's own all-reduce at 1–16 MiB, the
    /// copies through the segment competing for the cores that also carry
    /// the "network" (see the README). On hosts with cores of their own
    /// and a real link it sends each byte across hosts once per host
    /// rather than once per rank.
    ///
    /// # Example
    /// ```no_run
    /// let mpi = ruda_comm::MpiWorld::builder().hierarchical(true).init().expect("MPI starts");
    /// # drop(mpi);
    /// ```
    pub fn hierarchical(mut self, yes: bool) -> Self {
        self.shm.hierarchical = yes;
        self
    }

    /// Start MPI (or join an MPI someone else started) and return the guard
    /// that finalises it.
    ///
    /// # Errors
    /// [`CommError::Transport`] when MPI fails to start, was already
    /// finalised, another `MpiWorld` is alive in this process, or MPI runs
    /// at a thread level below `MPI_THREAD_SERIALIZED` (ruda's calls may
    /// come from several threads).
    pub fn init(self) -> Result<MpiWorld, CommError> {
        let mut started = STARTED.lock().unwrap_or_else(|e| e.into_inner());
        match *started {
            Some(true) => return Err(transport("another MpiWorld is alive in this process")),
            Some(false) => return Err(transport("MPI was already finalised in this process")),
            None => {}
        }
        // The copy threshold reads `/sys` once per process: here, not inside
        // the first large collective while its peers wait.
        crate::copy_streaming_from_bytes();
        let (owns, provided) = start()?;
        if provided < thread_level_serialized() {
            return Err(transport(&format!(
                "MPI runs at thread level {} (ruda needs MPI_THREAD_SERIALIZED or MPI_THREAD_MULTIPLE)",
                level_name(provided)
            )));
        }
        if self.abort_on_panic {
            install_panic_hook();
        }
        let checked = self.checked;
        let timeout = self.timeout.unwrap_or_else(default_timeout);
        let multiple = provided >= thread_level_multiple();
        *started = Some(true);
        Ok(MpiWorld {
            session: Arc::new(Session::new(
                is_open_mpi(),
                checked,
                self.staged,
                timeout,
                multiple,
                self.shm,
            )),
            owns,
            multiple,
        })
    }
}

/// The MPI transport's entry point and the guard that finalises MPI.
///
/// MPI is finalised when [`MpiWorld::finalize`] is called or the guard is
/// dropped — not when the last communicator goes, since an autodiff graph
/// may keep communicators alive. Communicators used after that fail with
/// [`CommError::Transport`].
///
/// After a call of this process timed out ([`CommError::Timeout`]), a late
/// peer may still be inside that call and MPI cannot end cleanly: then
/// finalising (or dropping the guard) aborts the whole job (exit code 75)
/// instead, so that no rank is left waiting. The timed-out ranks get their
/// error first, to report or record.
///
/// # Example
/// ```no_run
/// use ruda_comm::{Communicator, MpiWorld, ReduceOp};
/// // Run with: mpirun -n 4 target/release/my_program
/// let mpi = MpiWorld::init().expect("MPI starts");
/// let world = mpi.world().unwrap();
/// let mut x = [world.rank() as f32];
/// world.all_reduce(&mut x, ReduceOp::Sum).unwrap();
/// ```
#[derive(Debug)]
pub struct MpiWorld {
    session: Arc<Session>,
    owns: bool,
    multiple: bool,
}

impl MpiWorld {
    /// Start MPI with the defaults (see [`MpiWorldBuilder`]).
    ///
    /// # Errors
    /// As [`MpiWorldBuilder::init`].
    pub fn init() -> Result<MpiWorld, CommError> {
        Self::builder().init()
    }

    /// Settings for starting MPI.
    pub fn builder() -> MpiWorldBuilder {
        MpiWorldBuilder {
            timeout: None,
            abort_on_panic: false,
            checked: true,
            staged: false,
            shm: SharedMemory::default(),
        }
    }

    /// A communicator over every process of the job (a duplicate of
    /// `MPI_COMM_WORLD` whose errors return codes instead of aborting;
    /// `MPI_COMM_WORLD` itself is left as it is).
    ///
    /// # Errors
    /// [`CommError::Transport`] when MPI fails or is finalised.
    pub fn world(&self) -> Result<MpiCommunicator, CommError> {
        let _gate = self.session.gate(OpKind::Init, 0)?;
        // SAFETY: reading MPI's predefined world handle after initialisation.
        let world = unsafe { ffi::RSMPI_COMM_WORLD };
        MpiCommunicator::duplicate(world, self.session.clone())
    }

    /// Whether MPI granted `MPI_THREAD_MULTIPLE` (else ruda serialises its
    /// MPI calls process-wide).
    pub fn thread_multiple(&self) -> bool {
        self.multiple
    }

    /// Finalise MPI (if ruda started it) once every call in flight has
    /// returned.
    ///
    /// # Errors
    /// None today; the signature leaves room for MPI's.
    pub fn finalize(self) -> Result<(), CommError> {
        // Drop does the work (settle, then finalise or abort).
        Ok(())
    }

    /// Before finalising, wait for every other process in a plain barrier
    /// on the world. `MPI_Finalize` waits for every process inside Open
    /// MPI's runtime, and an `MPI_Abort` from a peer while others wait
    /// there can leave Open MPI 4.1's `mpirun` hung or crashed after every
    /// process has ended (seen under the chaos suite: a mismatch that two
    /// ranks report at once while the two others time out and abort). A
    /// process whose calls timed out skips this and aborts; the others
    /// wait here — where a peer's abort ends them cleanly — with no
    /// deadline, as `MPI_Finalize` itself would (a peer that is merely slow
    /// to finish is not an error). The barrier is `MPI_Ibarrier`, tested
    /// with ruda's MPI lock held only around each test, so that threads
    /// still in calls on other communicators keep progressing.
    fn settle(&self) {
        if self.session.is_broken() || !self.owns {
            return;
        }
        // MPI is initialised and not finalised (this world owns it and has
        // not finalised it yet), and ruda issues nothing else on
        // `MPI_COMM_WORLD` itself (it works on duplicates). Other threads
        // may still be inside calls on other communicators (finalisation
        // waits for them after this): so the barrier is nonblocking and
        // tested with the MPI lock held only around each call, never across
        // the wait, which under `MPI_THREAD_SERIALIZED` would keep their
        // calls (and the peers waiting on them) from progressing.
        let mut req = super::wait::null_request();
        let rc = self.session.mpi(|| {
            // SAFETY: MPI is initialised; `req` is a valid, unaliased handle it writes; no buffers.
            unsafe { ffi::MPI_Ibarrier(ffi::RSMPI_COMM_WORLD, &mut req) }
        });
        if rc != 0 {
            return;
        }
        let mut reqs = [req];
        // No deadline, as `MPI_Finalize` has none (waited in rounds).
        loop {
            let far = std::time::Instant::now() + Duration::from_secs(3600);
            let patient = super::wait::Poll::Patient;
            match super::wait::wait_until(
                &self.session,
                OpKind::Barrier,
                0,
                &mut reqs,
                far,
                patient,
            ) {
                Ok(pending) if pending.is_empty() => return,
                Ok(_) => {}
                // MPI failed: finalise (or abort) as before; the barrier's
                // request holds no buffers.
                Err(_) => return,
            }
        }
    }
}

impl MpiWorld {
    /// End the whole MPI job now with exit code `code` (`MPI_Abort`), for
    /// a rank that cannot go on: its peers would otherwise wait for it until
    /// their deadline.
    pub(crate) fn abort_job(&self, code: i32) {
        super::abort::abort_job(code);
    }
}

impl Drop for MpiWorld {
    fn drop(&mut self) {
        self.settle();
        self.session.finalize(self.owns);
        *STARTED.lock().unwrap_or_else(|e| e.into_inner()) = Some(false);
    }
}

fn transport(message: &str) -> CommError {
    CommError::Transport {
        op: OpKind::Init,
        rank: 0,
        message: message.into(),
        context: ErrorContext::none(),
    }
}

fn default_timeout() -> Duration {
    std::env::var(TIMEOUT_ENV)
        .ok()
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s > 0.0)
        .map_or(crate::DEFAULT_TIMEOUT, Duration::from_secs_f64)
}

fn thread_level_serialized() -> c_int {
    // SAFETY: reading a constant of the bindings.
    unsafe { ffi::RSMPI_THREAD_SERIALIZED as c_int }
}

fn thread_level_multiple() -> c_int {
    // SAFETY: reading a constant of the bindings.
    unsafe { ffi::RSMPI_THREAD_MULTIPLE as c_int }
}

fn level_name(level: c_int) -> &'static str {
    // SAFETY: reading constants of the bindings.
    let (single, funneled) = unsafe {
        (
            ffi::RSMPI_THREAD_SINGLE as c_int,
            ffi::RSMPI_THREAD_FUNNELED as c_int,
        )
    };
    match level {
        l if l == single => "MPI_THREAD_SINGLE",
        l if l == funneled => "MPI_THREAD_FUNNELED",
        l if l == thread_level_serialized() => "MPI_THREAD_SERIALIZED",
        _ => "MPI_THREAD_MULTIPLE",
    }
}

/// Initialise MPI if nobody has; returns whether ruda owns it (and must
/// finalise it) and the thread level in force.
fn start() -> Result<(bool, c_int), CommError> {
    let (mut initialized, mut finalized): (c_int, c_int) = (0, 0);
    // SAFETY: MPI state queries are allowed before MPI_Init.
    unsafe {
        ffi::MPI_Initialized(&mut initialized);
        ffi::MPI_Finalized(&mut finalized);
    }
    if finalized != 0 {
        return Err(transport("MPI was already finalised in this process"));
    }
    let mut provided: c_int = 0;
    if initialized == 0 {
        // SAFETY: first initialisation of this process; no arguments passed.
        let rc = unsafe {
            ffi::MPI_Init_thread(
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                thread_level_multiple(),
                &mut provided,
            )
        };
        raw::check(OpKind::Init, 0, rc)?;
        Ok((true, provided))
    } else {
        // SAFETY: MPI is initialised; query the level someone else chose.
        let rc = unsafe { ffi::MPI_Query_thread(&mut provided) };
        raw::check(OpKind::Init, 0, rc)?;
        Ok((false, provided))
    }
}

fn is_open_mpi() -> bool {
    let mut buf = vec![0 as c_char; 8192];
    let mut len: c_int = 0;
    // SAFETY: the buffer exceeds MPI_MAX_LIBRARY_VERSION_STRING.
    let rc = unsafe { ffi::MPI_Get_library_version(buf.as_mut_ptr(), &mut len) };
    rc == 0
        && buf[..len.max(0) as usize]
            .iter()
            .map(|&c| c as u8 as char)
            .collect::<String>()
            .contains("Open MPI")
}

fn install_panic_hook() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            previous(info);
            eprintln!("ruda: a rank panicked; aborting the MPI job so that no rank waits for it");
            super::abort::abort_job(70);
        }));
    });
}
