//! Group state shared by the threads of one local group: the two-phase
//! barrier every collective passes, poison, and the point-to-point mailboxes.
//!
//! A collective passes two barrier episodes. The first (*checked*) can fail:
//! on deadline, on a peer that panicked or left, or because the group is
//! already poisoned; whether it completes or fails is decided under the
//! state lock, so either every rank passes it or none does. Between the two
//! episodes ranks read each other's buffers. The second (*completion*)
//! episode cannot fail and has no deadline: the work between the two is
//! bounded and no rank may leave while a peer still reads its buffers.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::{CommError, DType, ErrorContext, OpKind, PeerFailureCause};

/// Why a group can no longer run collectives.
#[derive(Clone, Debug)]
pub(crate) enum Poison {
    /// A rank panicked or left while others waited for it.
    Failed {
        peer: usize,
        cause: PeerFailureCause,
    },
    /// A collective timed out waiting for these ranks.
    TimedOut {
        missing: Vec<usize>,
        waited: Duration,
    },
}

impl Poison {
    pub(crate) fn to_error(&self, op: OpKind, rank: usize) -> CommError {
        match self {
            Poison::Failed { peer, cause } => CommError::PeerFailure {
                op,
                rank,
                peer: *peer,
                cause: *cause,
                context: ErrorContext::none(),
            },
            Poison::TimedOut { missing, waited } => CommError::Timeout {
                op,
                rank,
                missing: missing.clone(),
                waited: *waited,
                context: ErrorContext::none(),
            },
        }
    }
}

/// State of a point-to-point offer in a mailbox.
pub(crate) enum OfferState {
    Posted,
    Taken,
    Done(Result<(), CommError>),
}

/// A blocking send waiting for its receiver.
pub(crate) struct Offer {
    pub dtype: DType,
    pub len: usize,
    pub ptr: *const u8,
    pub state: OfferState,
}

// SAFETY: the pointer is only dereferenced by the receiver while the sender
// blocks in `send` (state `Taken`), which keeps the buffer alive and unchanged.
unsafe impl Send for Offer {}

pub(crate) struct State {
    pub poison: Option<Poison>,
    pub left: Vec<Option<PeerFailureCause>>,
    /// `mailboxes[src * size + dst]`: the pending send from `src` to `dst`.
    pub mailboxes: Vec<Option<Offer>>,
}

/// How long a waiter spins before it yields, then sleeps.
#[derive(Clone, Copy, Debug)]
pub(crate) struct WaitPolicy {
    pub spin: Duration,
    pub yield_for: Duration,
}

impl WaitPolicy {
    /// Spin briefly when every rank has a core; otherwise yield at once so
    /// that oversubscribed ranks let the rank they wait for run. The spin is
    /// short even with enough cores: the scheduler may still put two ranks
    /// on one core for a while, and then only a yield lets the peer run
    /// (a 50 µs spin measured ~100 µs per hand-off in that case).
    pub(crate) fn for_world(world_size: usize) -> Self {
        let cores = std::thread::available_parallelism().map_or(1, |c| c.get());
        if world_size <= cores {
            WaitPolicy {
                spin: Duration::from_micros(3),
                yield_for: Duration::from_micros(500),
            }
        } else {
            WaitPolicy {
                spin: Duration::ZERO,
                yield_for: Duration::from_micros(500),
            }
        }
    }
}

pub(crate) struct GroupSync {
    pub size: usize,
    pub timeout: Duration,
    pub policy: WaitPolicy,
    count: AtomicUsize,
    generation: AtomicU64,
    /// Barrier episodes each rank has arrived at.
    reached: Box<[AtomicU64]>,
    /// Set whenever waiters must look at the locked state: the group is
    /// poisoned or a rank has left. Never cleared, on purpose: both are
    /// permanent (a poisoned group stays failed; a departed rank never
    /// arrives again, so once it is set no later checked episode of the
    /// group can complete, and only the slow path can say why).
    alert: AtomicBool,
    state: Mutex<State>,
    cv: Condvar,
    sleepers: AtomicUsize,
    /// One more than the completion episode at which a rank arrived while
    /// unwinding from a call's work (0: none yet), and that rank. A later
    /// call cannot overwrite them before every rank of this one has read
    /// them: its work starts only after all ranks pass its checked episode.
    unwound_episode: AtomicU64,
    unwound_rank: AtomicUsize,
}

impl GroupSync {
    pub(crate) fn new(size: usize, timeout: Duration, policy: WaitPolicy) -> Self {
        GroupSync {
            size,
            timeout,
            policy,
            count: AtomicUsize::new(0),
            generation: AtomicU64::new(0),
            reached: (0..size).map(|_| AtomicU64::new(0)).collect(),
            alert: AtomicBool::new(false),
            state: Mutex::new(State {
                poison: None,
                left: vec![None; size],
                mailboxes: (0..size * size).map(|_| None).collect(),
            }),
            cv: Condvar::new(),
            sleepers: AtomicUsize::new(0),
            unwound_episode: AtomicU64::new(0),
            unwound_rank: AtomicUsize::new(0),
        }
    }

    /// The barrier episode the group is at. Between a call's checked and
    /// completion episodes it names the completion episode: it cannot
    /// advance until the rank reading it arrives there.
    pub(crate) fn episode(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// `rank` is unwinding from a call's work and is about to arrive at its
    /// completion episode `episode`: the pieces it should have written may
    /// be missing from its peers' buffers. Its peers learn it from
    /// [`GroupSync::unwound_in`] once that episode passes, and the group is
    /// poisoned as by a panic.
    pub(crate) fn unwinding(&self, rank: usize, episode: u64) {
        self.unwound_rank.store(rank, Ordering::Relaxed);
        // The barrier's release/acquire carries both stores to every rank
        // that passes the completion episode.
        self.unwound_episode.store(episode + 1, Ordering::Release);
        let mut st = self.lock();
        if st.poison.is_none() {
            st.poison = Some(Poison::Failed {
                peer: rank,
                cause: PeerFailureCause::Panicked,
            });
        }
        self.alert.store(true, Ordering::Release);
        drop(st);
        self.notify();
    }

    /// The rank that unwound from the work of the call whose completion
    /// episode was `episode`, if one did. Read after that episode passed.
    pub(crate) fn unwound_in(&self, episode: u64) -> Option<usize> {
        (self.unwound_episode.load(Ordering::Acquire) == episode + 1)
            .then(|| self.unwound_rank.load(Ordering::Relaxed))
    }

    /// The locked state; a poisoned mutex (a panic while holding it, which
    /// no code path here does) is recovered, since the state stays valid.
    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn notify(&self) {
        self.cv.notify_all();
    }

    /// Wait on the condition variable until notified or `deadline`.
    /// Returns the guard and whether the deadline passed.
    pub(crate) fn wait_until<'a>(
        &'a self,
        guard: MutexGuard<'a, State>,
        deadline: Option<Instant>,
    ) -> (MutexGuard<'a, State>, bool) {
        match deadline {
            None => (
                self.cv.wait(guard).unwrap_or_else(|e| e.into_inner()),
                false,
            ),
            Some(d) => {
                let now = Instant::now();
                if now >= d {
                    return (guard, true);
                }
                let (g, _) = self
                    .cv
                    .wait_timeout(guard, d - now)
                    .unwrap_or_else(|e| e.into_inner());
                (g, Instant::now() >= d)
            }
        }
    }

    /// Record that `rank` left the group, panicking or not. A panic poisons
    /// every collective of the group; a plain leave fails only the waits
    /// that need this rank.
    ///
    /// The first cause is kept, except that a panic overrides a plain
    /// departure (a rank may drop one communicator, then panic).
    pub(crate) fn leave(&self, rank: usize, cause: PeerFailureCause) {
        let mut st = self.lock();
        if st.left[rank].is_none() || cause == PeerFailureCause::Panicked {
            st.left[rank] = Some(cause);
        }
        if cause == PeerFailureCause::Panicked && st.poison.is_none() {
            st.poison = Some(Poison::Failed { peer: rank, cause });
        }
        self.alert.store(true, Ordering::Release);
        drop(st);
        self.notify();
    }

    /// One barrier episode. `checked` episodes fail on poison, a departed
    /// peer or the deadline; completion episodes always succeed.
    pub(crate) fn arrive(
        &self,
        rank: usize,
        op: OpKind,
        checked: bool,
        started: Instant,
    ) -> Result<(), CommError> {
        let generation = self.generation.load(Ordering::Acquire);
        self.reached[rank].store(generation + 1, Ordering::Release);
        if self.count.fetch_add(1, Ordering::AcqRel) + 1 == self.size {
            return self.complete(generation, rank, op, checked);
        }
        self.wait(generation, rank, op, checked, started)
    }

    fn complete(
        &self,
        generation: u64,
        rank: usize,
        op: OpKind,
        checked: bool,
    ) -> Result<(), CommError> {
        let st = self.lock();
        if checked && let Some(p) = &st.poison {
            return Err(p.to_error(op, rank));
        }
        self.count.store(0, Ordering::Relaxed);
        self.generation.store(generation + 1, Ordering::Release);
        drop(st);
        // Waking the condition variable is a system call; skip it when no
        // rank sleeps on it. A rank that starts sleeping after this load
        // takes the state lock after the unlock above, so it sees the new
        // generation before it waits.
        if self.sleepers.load(Ordering::SeqCst) > 0 {
            self.notify();
        }
        Ok(())
    }

    fn wait(
        &self,
        generation: u64,
        rank: usize,
        op: OpKind,
        checked: bool,
        started: Instant,
    ) -> Result<(), CommError> {
        let passed = || self.generation.load(Ordering::Acquire) != generation;
        // Spin, then yield, while nothing needs the slow path.
        let fast_until = Instant::now() + self.policy.spin + self.policy.yield_for;
        let spin_until = Instant::now() + self.policy.spin;
        let mut i = 0u32;
        loop {
            if passed() {
                return Ok(());
            }
            if checked && self.alert.load(Ordering::Acquire) {
                break;
            }
            i = i.wrapping_add(1);
            if i.is_multiple_of(16) {
                let now = Instant::now();
                if now >= fast_until {
                    break;
                }
                if now >= spin_until {
                    std::thread::yield_now();
                    continue;
                }
            }
            std::hint::spin_loop();
        }
        let deadline = checked.then(|| started + self.timeout);
        struct Sleeper<'a>(&'a AtomicUsize);
        impl Drop for Sleeper<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::SeqCst);
            }
        }
        self.sleepers.fetch_add(1, Ordering::SeqCst);
        let _sleeper = Sleeper(&self.sleepers);
        let mut st = self.lock();
        loop {
            if passed() {
                return Ok(());
            }
            if checked {
                if let Some(p) = &st.poison {
                    return Err(p.to_error(op, rank));
                }
                // A rank that has not arrived and has left will never come.
                if let Some((peer, cause)) = (0..self.size).find_map(|r| {
                    let absent = self.reached[r].load(Ordering::Acquire) <= generation;
                    st.left[r].filter(|_| absent).map(|c| (r, c))
                }) {
                    let p = Poison::Failed { peer, cause };
                    let e = p.to_error(op, rank);
                    st.poison = Some(p);
                    self.alert.store(true, Ordering::Release);
                    drop(st);
                    self.notify();
                    return Err(e);
                }
            }
            let (g, timed_out) = self.wait_until(st, deadline);
            st = g;
            if timed_out && !passed() && st.poison.is_none() {
                let missing = (0..self.size)
                    .filter(|&r| self.reached[r].load(Ordering::Acquire) <= generation)
                    .collect();
                let p = Poison::TimedOut {
                    missing,
                    waited: self.timeout,
                };
                let e = p.to_error(op, rank);
                st.poison = Some(p);
                self.alert.store(true, Ordering::Release);
                drop(st);
                self.notify();
                return Err(e);
            }
        }
    }
}
