//! Ending the whole MPI job from one process.
//!
//! Open MPI 4.1's `mpirun` can hang or crash when several processes call
//! `MPI_Abort` at the same moment (seen here: a timeout on two ranks at
//! once left `mpirun` deadlocked with every rank already exited, or killed
//! it with a segmentation fault). A timeout or a mismatch is usually seen
//! by several ranks together, so ruda staggers its aborts by world rank:
//! the lowest-ranked process aborts at once and the others only after
//! [`STAGGER`] per rank, by which time `mpirun` has normally killed them.

use std::ffi::c_int;
use std::time::Duration;

use mpi::ffi;

/// The delay between the aborts of consecutive world ranks.
pub(crate) const STAGGER: Duration = Duration::from_millis(200);

/// The longest delay (world ranks beyond 16 wait as rank 16).
const MAX_RANKS_STAGGERED: u32 = 16;

/// Abort the MPI job with `code` after this process's stagger delay.
/// Does nothing when MPI is already finalised (a panic after the world
/// was dropped: nothing is left to abort).
pub(crate) fn abort_job(code: c_int) {
    let mut done: c_int = 0;
    // SAFETY: `MPI_Finalized` may be called at any time; `done` is a valid,
    // unaliased int it writes.
    unsafe { ffi::MPI_Finalized(&mut done) };
    if done != 0 {
        return;
    }
    let mut rank: c_int = 0;
    // MPI is initialised (ruda's callers run only after `MpiWorld::init`)
    // and not finalised (checked above).
    // SAFETY: the world handle is valid; `rank` is a valid, unaliased int.
    unsafe { ffi::MPI_Comm_rank(ffi::RSMPI_COMM_WORLD, &mut rank) };
    let steps = u32::try_from(rank).unwrap_or(0).min(MAX_RANKS_STAGGERED);
    std::thread::sleep(STAGGER * steps);
    // SAFETY: aborts the whole job; MPI is initialised and not finalised
    // (as above).
    unsafe { ffi::MPI_Abort(ffi::RSMPI_COMM_WORLD, code) };
}
