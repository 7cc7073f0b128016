//! Ending the whole MPI job from one process.
//!
//! Open MPI 4.1's `mpirun` can hang or crash when several processes call
//! `MPI_Abort` at the same moment (seen here: a timeout on two ranks at
//! once left `mpirun` deadlocked with every rank already exited, or killed
//! it with a segmentation fault). A timeout or a mismatch is usually seen
//! by several ranks together, so ruda staggers its aborts by world rank:
//! the lowest-ranked process aborts at once and the others only after
//! [`STAGGER`] per rank, by which time `mpirun` has normally killed them.
//!
//! `MPI_Abort` after `MPI_Finalize` is erroneous, and the stagger leaves a
//! window between checking that MPI is not finalised and aborting: another
//! thread could finalise MPI meanwhile. So both ends of MPI are taken under
//! one process-wide lock, [`END`]: an abort holds it from the check to the
//! abort (which does not return), and ruda's finalisation holds it around
//! `MPI_Finalize` (see [`finalize_under`]). Whichever comes first wins: a
//! finalisation waits for a pending abort (which then ends the process),
//! and an abort after a finalisation sees it and does nothing.
//!
//! No deadlock: nothing is locked while `END` is held (the stagger sleep,
//! `MPI_Abort` and `MPI_Finalize` do not call back into ruda), and
//! finalisation calls [`abort_job`] (a timed-out process aborts instead of
//! finalising) before it takes `END`, never while holding it.

use std::ffi::c_int;
use std::sync::Mutex;
use std::time::Duration;

use mpi::ffi;

/// The delay between the aborts of consecutive world ranks.
pub(crate) const STAGGER: Duration = Duration::from_millis(200);

/// The longest delay (world ranks beyond 16 wait as rank 16).
const MAX_RANKS_STAGGERED: u32 = 16;

/// Held while MPI is being ended, by an abort or by ruda's finalisation.
static END: Mutex<()> = Mutex::new(());

/// What ending the job needs from MPI (a trait so that the ordering of
/// aborts and finalisation can be tested without ending a process).
pub(crate) trait Ending {
    /// Whether MPI is finalised.
    fn finalized(&self) -> bool;
    /// This process's world rank.
    fn world_rank(&self) -> c_int;
    /// Abort the job (does not return on a real MPI).
    fn abort(&self, code: c_int);
}

/// The real MPI.
struct Mpi;

impl Ending for Mpi {
    fn finalized(&self) -> bool {
        let mut done: c_int = 0;
        // SAFETY: `MPI_Finalized` may be called at any time; `done` is a
        // valid, unaliased int it writes.
        unsafe { ffi::MPI_Finalized(&mut done) };
        done != 0
    }

    fn world_rank(&self) -> c_int {
        let mut rank: c_int = 0;
        // Called by `abort_under` only after `finalized()` said no, with
        // `END` held (nobody finalises MPI meanwhile), and only after
        // `MpiWorld::init`: MPI is initialised and not finalised.
        // SAFETY: the world handle is valid; `rank` is a valid, unaliased int MPI writes.
        unsafe { ffi::MPI_Comm_rank(ffi::RSMPI_COMM_WORLD, &mut rank) };
        rank
    }

    fn abort(&self, code: c_int) {
        // SAFETY: as for `world_rank`: MPI is initialised and, with `END`
        // held since the check, not finalised. Aborts the whole job.
        unsafe { ffi::MPI_Abort(ffi::RSMPI_COMM_WORLD, code) };
    }
}

/// Abort the MPI job with `code` after this process's stagger delay.
/// Does nothing when MPI is already finalised (a panic after the world
/// was dropped: nothing is left to abort).
pub(crate) fn abort_job(code: c_int) {
    abort_under(&END, &Mpi, STAGGER, code);
}

/// Run `finalize` (ruda's `MPI_Finalize`) with the end lock held, so that
/// it never runs between an abort's check and its `MPI_Abort`.
pub(crate) fn finalize_under<R>(finalize: impl FnOnce() -> R) -> R {
    finalize_with(&END, finalize)
}

fn finalize_with<R>(lock: &Mutex<()>, finalize: impl FnOnce() -> R) -> R {
    let _end = lock.lock().unwrap_or_else(|e| e.into_inner());
    finalize()
}

fn abort_under(lock: &Mutex<()>, mpi: &impl Ending, stagger: Duration, code: c_int) {
    // Held until the abort: MPI cannot be finalised in between.
    let _end = lock.lock().unwrap_or_else(|e| e.into_inner());
    if mpi.finalized() {
        return;
    }
    let steps = u32::try_from(mpi.world_rank())
        .unwrap_or(0)
        .min(MAX_RANKS_STAGGERED);
    std::thread::sleep(stagger.saturating_mul(steps));
    mpi.abort(code);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Instant;

    /// A fake MPI that records what happened, in order.
    #[derive(Default)]
    struct Fake {
        finalized: AtomicBool,
        /// Set when the abort asks for the rank: it holds the end lock then.
        entered: AtomicBool,
        events: Mutex<Vec<String>>,
    }

    impl Ending for Fake {
        fn finalized(&self) -> bool {
            self.finalized.load(Ordering::SeqCst)
        }
        fn world_rank(&self) -> c_int {
            self.entered.store(true, Ordering::SeqCst);
            3
        }
        fn abort(&self, code: c_int) {
            let f = self.finalized();
            self.events
                .lock()
                .unwrap()
                .push(format!("abort {code} (finalised: {f})"));
        }
    }

    impl Fake {
        fn finalize(&self) {
            self.finalized.store(true, Ordering::SeqCst);
            self.events.lock().unwrap().push("finalize".into());
        }
    }

    /// A finalisation that starts while an abort sleeps its stagger waits
    /// for the abort: the abort never meets a finalised MPI. (Without the
    /// lock the finalisation ran during the sleep, and the abort came
    /// after it: `["finalize", "abort 70 (finalised: true)"]`.)
    #[test]
    fn a_finalisation_during_the_stagger_waits_for_the_abort() {
        let lock = Mutex::new(());
        let fake = Fake::default();
        let start = Instant::now();
        std::thread::scope(|s| {
            s.spawn(|| abort_under(&lock, &fake, Duration::from_millis(50), 70));
            // Once the abort has passed its check (it holds the lock and
            // sleeps rank 3's 150 ms), finalise: no timing assumption.
            while !fake.entered.load(Ordering::SeqCst) {
                std::thread::yield_now();
            }
            finalize_with(&lock, || fake.finalize());
        });
        assert!(start.elapsed() >= Duration::from_millis(150));
        assert_eq!(
            *fake.events.lock().unwrap(),
            ["abort 70 (finalised: false)", "finalize"]
        );
    }

    /// An abort after a finalisation does nothing.
    #[test]
    fn an_abort_after_finalisation_does_nothing() {
        let lock = Mutex::new(());
        let fake = Fake::default();
        finalize_with(&lock, || fake.finalize());
        abort_under(&lock, &fake, Duration::from_millis(50), 70);
        assert_eq!(*fake.events.lock().unwrap(), ["finalize"]);
    }
}
