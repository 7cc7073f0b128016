//! The watchdog of checked collectives whose data phase runs on the
//! caller's buffers (the default, `MpiWorldBuilder::staged(false)`).
//!
//! Every rank's call record has arrived when the data phase starts, yet a
//! peer can still fail to join it or finish it: one whose own record
//! exchange timed out a moment earlier, a process that died, a host whose
//! link went down. MPI can neither cancel a collective nor say which peer
//! it waits for, and a safe caller must never get back a buffer MPI may
//! still write. So, as NCCL's and PyTorch's watchdogs do, a collective
//! whose data phase passes its deadline ends the job: the rank holds a
//! short roll call with its peers (who is still in a data phase of this
//! communicator, who is silent), prints which call, which rank and which
//! peers never joined or cannot be reached, and aborts the job with exit
//! code [`EXIT_DATA_TIMEOUT`].
//!
//! With MPI at `MPI_THREAD_MULTIPLE` the data phase is MPI's blocking call
//! (its tuned algorithms), so the deadline is kept by a thread of its own:
//! one per process, named `ruda-mpi-watchdog`, started by the first checked
//! data phase and asleep on a condition variable between deadlines. Arming
//! and disarming it is a lock, a push and a removal (no wake-up unless the
//! new deadline is the earliest). The rank that waits in rounds instead
//! (`MPI_THREAD_SERIALIZED`) holds the roll call itself ([`expire`]).

use std::ffi::{c_int, c_void};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use mpi::ffi;

use super::session::Session;
use super::wait::{Inflight, ReqKind};
use crate::{CommError, DType, ErrorContext, OpKind};

/// The exit code of a job aborted because a call timed out (a data phase
/// past its deadline, or a world dropped after a timeout).
pub(crate) const EXIT_DATA_TIMEOUT: c_int = 75;

/// The tag of roll-call notes on a communicator's control channel.
const TAG_ROLL_CALL: c_int = 13;

/// The first word of a roll-call note (`"rudaRoll"`), so a stray message
/// is never read as one.
const ROLL_CALL_MAGIC: i64 = 0x7275_6461_526f_6c6c;

/// One collective's data phase, as the watchdog sees it.
#[derive(Clone)]
pub(crate) struct Watch {
    /// When the data phase must be over.
    pub deadline: Instant,
    /// The operation.
    pub op: OpKind,
    /// The call's sequence number on its communicator.
    pub seq: u64,
    /// The call's element count (the larger buffer).
    pub elements: usize,
    /// This rank in the communicator.
    pub rank: usize,
    /// The communicator's control channel (records, headers, roll calls).
    pub ctl: ffi::MPI_Comm,
    /// The world rank of each rank of the communicator.
    pub world_ranks: Arc<[usize]>,
    /// The session (for its lock and its timeout).
    pub session: Arc<Session>,
}

// SAFETY: `ctl` is an MPI handle that the watchdog thread uses only while
// the call it belongs to is armed: the call holds a borrow of its
// communicator (which frees `ctl` only when dropped) until `disarm`
// returns, and `disarm` of a call that fired does not return before the
// watchdog is done with the handle (see `Watchdog::disarm`). The watchdog
// thread exists only at `MPI_THREAD_MULTIPLE` (blocking data phases), where
// MPI may be called from any thread.
unsafe impl Send for Watch {}

/// An armed call, until it is disarmed (or fires).
struct Entry {
    id: u64,
    watch: Watch,
    /// The watchdog took it: the job is being aborted.
    fired: bool,
    /// The watchdog is done with it (its abort returned).
    over: bool,
}

#[derive(Default)]
struct Registry {
    entries: Vec<Entry>,
    next: u64,
    /// Until when the watchdog thread sleeps (`None`: until woken). An
    /// armed call wakes it only when its deadline is earlier: deadlines
    /// grow with time, so a steady stream of calls wakes it about once per
    /// timeout instead of once per call (a wake-up per call cost a 4 KiB
    /// collective on 2 ranks of a 2-core machine ~7 µs).
    asleep_until: Option<Instant>,
}

/// A watchdog: the registry of armed calls and the thread that fires.
struct Watchdog {
    registry: Mutex<Registry>,
    /// Wakes the watchdog thread for a deadline earlier than all others.
    wake: Condvar,
    /// Wakes a disarm waiting for a fired entry to be done with.
    done: Condvar,
    /// What firing does ([`expire`]; a recorder in tests).
    fire: fn(&Watch),
}

/// The process's watchdog, started on first use.
fn watchdog() -> &'static Watchdog {
    static DOG: OnceLock<&'static Watchdog> = OnceLock::new();
    DOG.get_or_init(|| Watchdog::start(expire))
}

/// A call under the watchdog (see [`arm`]): [`disarm`] ends the watch, and
/// so does dropping it (on an unwind between the two), so that no entry
/// outlives its call and its communicator's handle.
#[must_use = "an armed call must be disarmed"]
pub(crate) struct Armed(u64);

impl Drop for Armed {
    fn drop(&mut self) {
        // Only an unwind gets here (`disarm` forgets the value); the error,
        // if the watchdog fired, goes with the unwind.
        let _ = watchdog().end_watch(self.0);
    }
}

/// Put a blocking data phase under the watchdog until [`disarm`].
pub(crate) fn arm(watch: Watch) -> Armed {
    Armed(watchdog().arm(watch))
}

/// End the watch of a data phase that returned.
///
/// # Errors
/// [`CommError::Timeout`] (no rank named) when the watchdog fired first
/// and the abort it started returned (it does not on a live MPI): the
/// caller's buffers are handed back only once the watchdog is done.
pub(crate) fn disarm(armed: Armed, op: OpKind, rank: usize) -> Result<(), CommError> {
    let id = armed.0;
    std::mem::forget(armed);
    watchdog()
        .end_watch(id)
        .map_err(|waited| CommError::Timeout {
            op,
            rank,
            missing: Vec::new(),
            waited,
            context: ErrorContext::none(),
        })
}

impl Watchdog {
    /// A watchdog whose thread runs for the rest of the process.
    fn start(fire: fn(&Watch)) -> &'static Watchdog {
        let dog: &'static Watchdog = Box::leak(Box::new(Watchdog {
            registry: Mutex::new(Registry::default()),
            wake: Condvar::new(),
            done: Condvar::new(),
            fire,
        }));
        std::thread::Builder::new()
            .name("ruda-mpi-watchdog".into())
            .spawn(move || dog.run())
            .expect("the MPI watchdog thread starts");
        dog
    }

    /// Register `watch`; returns its id.
    fn arm(&self, watch: Watch) -> u64 {
        let mut reg = self.lock();
        let earliest = reg.asleep_until.is_none_or(|t| t > watch.deadline);
        let id = reg.next;
        reg.next += 1;
        reg.entries.push(Entry {
            id,
            watch,
            fired: false,
            over: false,
        });
        drop(reg);
        if earliest {
            self.wake.notify_one();
        }
        id
    }

    /// Remove watch `id`; if the watchdog fired on it, wait until it is
    /// done with it and return the timeout that passed.
    fn end_watch(&self, id: u64) -> Result<(), Duration> {
        let mut reg = self.lock();
        let find = |reg: &Registry| reg.entries.iter().position(|e| e.id == id);
        // Only this function removes an entry, so it is there.
        let Some(mut i) = find(&reg) else {
            return Ok(());
        };
        if !reg.entries[i].fired {
            reg.entries.swap_remove(i);
            return Ok(());
        }
        // The deadline passed and the watchdog is aborting the job: wait
        // until it is done with this call (the process normally ends
        // meanwhile).
        while !reg.entries[i].over {
            reg = self.done.wait(reg).unwrap_or_else(|e| e.into_inner());
            i = find(&reg).unwrap_or(i);
        }
        Err(reg.entries.swap_remove(i).watch.session.timeout)
    }

    fn lock(&self) -> MutexGuard<'_, Registry> {
        self.registry.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn run(&self) {
        let mut reg = self.lock();
        loop {
            let now = Instant::now();
            let next = reg
                .entries
                .iter()
                .enumerate()
                .filter(|(_, e)| !e.fired)
                .min_by_key(|(_, e)| e.watch.deadline)
                .map(|(i, e)| (i, e.watch.deadline));
            match next {
                None => {
                    reg.asleep_until = None;
                    reg = self.wake.wait(reg).unwrap_or_else(|e| e.into_inner());
                }
                Some((_, at)) if at > now => {
                    reg.asleep_until = Some(at);
                    reg = self
                        .wake
                        .wait_timeout(reg, at - now)
                        .unwrap_or_else(|e| e.into_inner())
                        .0;
                }
                Some((i, _)) => {
                    reg.entries[i].fired = true;
                    let (id, watch) = (reg.entries[i].id, reg.entries[i].watch.clone());
                    drop(reg);
                    (self.fire)(&watch);
                    // The abort returned (MPI was finalised meanwhile):
                    // let the call return its timeout.
                    reg = self.lock();
                    for e in reg.entries.iter_mut().filter(|e| e.id == id) {
                        e.over = true;
                    }
                    self.done.notify_all();
                }
            }
        }
    }
}

/// A data phase is past its deadline: hold the roll call, say what is
/// known, and abort the job ([`EXIT_DATA_TIMEOUT`]). Returns only if MPI
/// was finalised meanwhile (then nothing can use the buffers any more).
pub(crate) fn expire(w: &Watch) {
    w.session.mark_broken();
    let grace = roll_call_grace(w.session.timeout);
    let roll = roll_call(w, grace);
    eprintln!("ruda: {}", report(w, &roll));
    // The peers stuck in the same data phase print their own lines at about
    // this moment: a short pause lets them out before the job goes down
    // (the lowest world rank aborts first, the others are staggered).
    std::thread::sleep(REPORT_PAUSE);
    super::abort::abort_job(EXIT_DATA_TIMEOUT);
}

/// How long a rank waits after printing its watchdog line before it aborts
/// the job.
const REPORT_PAUSE: Duration = Duration::from_millis(200);

/// How long a roll call listens for peers: long enough for every peer
/// stuck in the same data phase (whose deadlines fall within a message
/// latency of each other) to fire too, short beside the deadline.
fn roll_call_grace(timeout: Duration) -> Duration {
    (timeout / 4).clamp(Duration::from_millis(50), Duration::from_secs(2))
}

/// What a roll call heard: for each peer, the sequence number of the data
/// phase it is stuck in, or `None` when it stayed silent.
struct Roll {
    heard: Vec<Option<u64>>,
}

/// Send this rank's note (the call's sequence number) to every peer on the
/// control channel and listen `grace` for theirs. A peer stuck in a data
/// phase of this communicator fires within the grace too and answers; one
/// that never joined (it timed out in its record exchange and went on),
/// died, or sits behind a cut link stays silent. Requests still pending
/// at the end are abandoned (their buffers leaked): the job is about to be
/// aborted.
fn roll_call(w: &Watch, grace: Duration) -> Roll {
    let n = w.world_ranks.len();
    let mut heard = vec![None; n];
    let mine = [ROLL_CALL_MAGIC, w.seq as i64];
    let notes = Notes {
        mine,
        theirs: vec![[0i64; 2]; n],
    };
    let mut fl = Inflight::new(&w.session, notes);
    let b = fl.bufs();
    // SAFETY: `b` is valid (owned by `fl`, which keeps it alive until every
    // request is complete, or leaks it); no request is in flight yet, so
    // this `&mut` is its only alias while the pointers are taken.
    let (recv, send): (Vec<*mut c_void>, *const c_void) = unsafe {
        let s = &mut *b;
        (
            s.theirs.iter_mut().map(|v| v.as_mut_ptr().cast()).collect(),
            s.mine.as_ptr().cast(),
        )
    };
    let i64t = super::raw::datatype(DType::I64);
    let peers: Vec<usize> = (0..n).filter(|&p| p != w.rank).collect();
    let mut posted = true;
    for &p in &peers {
        let buf = recv[p];
        posted &= fl
            .post(w.op, w.rank, ReqKind::Recv, |r| {
                // SAFETY: valid: `buf` is 2 words of `fl`'s notes, `p` a rank
                // of the valid `ctl`; unaliased: no reference to the notes
                // exists, only MPI writes them until the receive completes.
                unsafe { ffi::MPI_Irecv(buf, 2, i64t, p as c_int, TAG_ROLL_CALL, w.ctl, r) }
            })
            .is_ok();
    }
    for &p in &peers {
        posted &= fl
            .post(w.op, w.rank, ReqKind::Send, |r| {
                // SAFETY: `send` is valid for the 2 words of this rank's
                // note in `fl`, which nothing writes (no mutable alias) until
                // the sends complete; `ctl` is valid (see `Watch`).
                unsafe { ffi::MPI_Isend(send, 2, i64t, p as c_int, TAG_ROLL_CALL, w.ctl, r) }
            })
            .is_ok();
    }
    if !posted {
        return Roll { heard };
    }
    let receives = 0..peers.len();
    let pending = fl
        .wait(w.op, w.rank, receives.clone(), Instant::now() + grace)
        .unwrap_or_else(|_| receives.clone().collect());
    for (i, &p) in peers.iter().enumerate() {
        if pending.contains(&i) {
            continue;
        }
        // SAFETY: valid: `recv[p]` is 2 words `fl` keeps alive; unaliased:
        // receive `i` is complete (MPI no longer writes them) and the read
        // goes through the raw pointer, never a reference to the notes.
        let note = unsafe { std::ptr::read(recv[p] as *const [i64; 2]) };
        if note[0] == ROLL_CALL_MAGIC {
            heard[p] = Some(note[1] as u64);
        }
    }
    // Dropping `fl` cancels the silent peers' receives and frees or leaks
    // the sends to them.
    drop(fl);
    Roll { heard }
}

/// This rank's note and its peers'.
struct Notes {
    mine: [i64; 2],
    theirs: Vec<[i64; 2]>,
}

/// The line a rank prints before it aborts the job.
fn report(w: &Watch, roll: &Roll) -> String {
    let name = |r: usize| format!("rank {r} (world rank {})", w.world_ranks[r]);
    let list = |rs: &[usize]| {
        if rs.is_empty() {
            "none".to_string()
        } else {
            rs.iter().map(|&r| name(r)).collect::<Vec<_>>().join(", ")
        }
    };
    let peers = (0..w.world_ranks.len()).filter(|&p| p != w.rank);
    let same: Vec<usize> = peers
        .clone()
        .filter(|&p| roll.heard[p] == Some(w.seq))
        .collect();
    let other: Vec<String> = peers
        .clone()
        .filter_map(|p| match roll.heard[p] {
            Some(s) if s != w.seq => Some(format!("{} in call {s}", name(p))),
            _ => None,
        })
        .collect();
    let silent: Vec<usize> = peers.filter(|&p| roll.heard[p].is_none()).collect();
    let mut line = format!(
        "{} (call {}, {} elements) on {} of a communicator of world ranks {:?}: its data phase did not complete within {:?} of every call record arriving (MPI may still use the caller's buffers); peers not in it (never joined, already left, or cannot be reached): {}; peers still in it: {}",
        w.op,
        w.seq,
        w.elements,
        name(w.rank),
        &*w.world_ranks,
        w.session.timeout,
        list(&silent),
        list(&same),
    );
    if !other.is_empty() {
        line.push_str(&format!("; peers in another call: {}", other.join(", ")));
    }
    line.push_str(&format!(
        "; aborting the MPI job (exit code {EXIT_DATA_TIMEOUT})"
    ));
    line
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A watch of call `seq` of a 3-rank communicator, due `after` from now.
    fn watch(seq: u64, after: Duration) -> Watch {
        Watch {
            deadline: Instant::now() + after,
            op: OpKind::AllReduce,
            seq,
            elements: 4096,
            rank: 0,
            // SAFETY: reading MPI's null handle (no MPI call is made: the
            // tests' watchdogs fire into a recorder, not a roll call).
            ctl: unsafe { ffi::RSMPI_COMM_NULL },
            world_ranks: vec![0, 1, 2].into(),
            session: Arc::new(Session::new(
                true,
                true,
                false,
                Duration::from_secs(7),
                true,
                crate::mpi::session::SharedMemory::default(),
            )),
        }
    }

    /// Each test's own watchdog, firing into its own counters: `fired`
    /// when a firing starts, `finished` when it is done (an abort takes a
    /// moment; a disarm must wait it out).
    macro_rules! dog_counting {
        ($dog:ident, $fired:ident, $finished:ident) => {
            static $fired: AtomicUsize = AtomicUsize::new(0);
            static $finished: AtomicUsize = AtomicUsize::new(0);
            fn fire(_: &Watch) {
                $fired.fetch_add(1, Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(100));
                $finished.fetch_add(1, Ordering::SeqCst);
            }
            let $dog = Watchdog::start(fire);
        };
    }

    fn wait_for(counter: &AtomicUsize, n: usize, within: Duration) -> bool {
        let until = Instant::now() + within;
        while counter.load(Ordering::SeqCst) < n {
            if Instant::now() > until {
                return false;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        true
    }

    #[test]
    fn a_call_disarmed_in_time_never_fires() {
        dog_counting!(dog, FIRED, FINISHED);
        for seq in 0..50 {
            let id = dog.arm(watch(seq, Duration::from_millis(100)));
            assert_eq!(dog.end_watch(id), Ok(()));
        }
        std::thread::sleep(Duration::from_millis(300));
        assert_eq!(FIRED.load(Ordering::SeqCst), 0);
        assert!(dog.lock().entries.is_empty());
    }

    /// A call past its deadline fires once; its disarm waits until the
    /// firing is done and reports the timeout.
    #[test]
    fn a_late_call_fires_once_and_its_disarm_waits_for_it() {
        dog_counting!(dog, FIRED, FINISHED);
        let id = dog.arm(watch(1, Duration::from_millis(20)));
        assert!(
            wait_for(&FIRED, 1, Duration::from_secs(10)),
            "it never fired"
        );
        assert_eq!(dog.end_watch(id), Err(Duration::from_secs(7)));
        // The disarm returned only once the firing was over.
        assert_eq!(FINISHED.load(Ordering::SeqCst), 1);
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(FIRED.load(Ordering::SeqCst), 1);
        assert!(dog.lock().entries.is_empty());
    }

    /// The thread sleeps until the earliest deadline; a call due earlier
    /// than that wakes it (the wake-up a later deadline is spared).
    #[test]
    fn an_earlier_deadline_wakes_the_sleeping_watchdog() {
        dog_counting!(dog, FIRED, FINISHED);
        let far = dog.arm(watch(1, Duration::from_secs(3600)));
        std::thread::sleep(Duration::from_millis(50)); // asleep until `far`
        let near = dog.arm(watch(2, Duration::from_millis(20)));
        assert!(
            wait_for(&FIRED, 1, Duration::from_secs(30)),
            "the near deadline waited for the far one"
        );
        assert_eq!(dog.end_watch(far), Ok(()));
        assert!(dog.end_watch(near).is_err());
        assert_eq!(FINISHED.load(Ordering::SeqCst), 1);
    }

    /// A dropped `Armed` (an unwind between arm and disarm) leaves no entry
    /// behind to fire on a communicator that is gone.
    #[test]
    fn an_unwound_call_leaves_no_watch() {
        let before = watchdog().lock().entries.len();
        let armed = arm(watch(9, Duration::from_secs(3600)));
        assert_eq!(watchdog().lock().entries.len(), before + 1);
        drop(armed);
        assert_eq!(watchdog().lock().entries.len(), before);
    }

    #[test]
    fn the_report_names_the_call_the_rank_and_each_peer() {
        let w = watch(4, Duration::ZERO);
        let roll = Roll {
            heard: vec![None, Some(4), None],
        };
        let line = report(&w, &roll);
        assert!(
            line.starts_with("all_reduce (call 4, 4096 elements) on rank 0 (world rank 0) of a communicator of world ranks [0, 1, 2]"),
            "{line}"
        );
        assert!(line.contains("within 7s"), "{line}");
        assert!(
            line.contains("cannot be reached): rank 2 (world rank 2); peers still in it: rank 1 (world rank 1)"),
            "{line}"
        );
        assert!(
            line.ends_with("aborting the MPI job (exit code 75)"),
            "{line}"
        );
        let roll = Roll {
            heard: vec![None, Some(5), Some(4)],
        };
        let line = report(&w, &roll);
        assert!(line.contains("cannot be reached): none;"), "{line}");
        assert!(
            line.contains("peers in another call: rank 1 (world rank 1) in call 5"),
            "{line}"
        );
    }

    #[test]
    fn the_grace_is_a_quarter_of_the_timeout_within_bounds() {
        assert_eq!(
            roll_call_grace(Duration::from_millis(100)),
            Duration::from_millis(50)
        );
        assert_eq!(
            roll_call_grace(Duration::from_millis(1500)),
            Duration::from_millis(375)
        );
        assert_eq!(
            roll_call_grace(Duration::from_secs(300)),
            Duration::from_secs(2)
        );
    }
}
