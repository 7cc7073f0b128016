//! ruda's collectives on an MPI communicator's shared buffers
//! (`MpiCommunicator::shared_buffer`), timed, filled and checked exactly
//! as on ordinary memory ([`super::measure_in`]).

use ruda_comm::{CommError, MpiCommunicator};

use super::{BenchOp, Measurement, Settings, buffer_lens, call, elements_for, measure_in};
use crate::Sample;

/// The arena each rank needs for [`measure_shared`] up to `largest` bytes
/// a call (for `MpiWorldBuilder::shared_buffers`): a call's send and
/// receive buffers together hold at most twice its bytes (an all-gather's),
/// plus a line each, rounded into one spare MiB.
///
/// # Example
/// ```
/// assert_eq!(ruda_bench::shared_arena_bytes(1 << 20), 3 << 20);
/// ```
pub fn shared_arena_bytes(largest: usize) -> usize {
    largest.saturating_mul(2).saturating_add(1 << 20)
}

/// [`super::measure`] on shared buffers of `world`: ruda's call of `op`
/// on `bytes`, its send and receive buffers in this rank's arena (an
/// all-reduce then runs in place on the peers' memory; the other
/// collectives read the peers' buffers through the mapping).
///
/// # Errors
/// A [`CommError`] of the harness or the call.
///
/// # Panics
/// When the arena cannot hold the buffers (see [`shared_arena_bytes`]),
/// naming the call and the arena's error.
///
/// # Example
/// ```no_run
/// use ruda_bench::{BenchOp, Settings};
/// let mpi = ruda_comm::MpiWorld::builder()
///     .shared_buffers(ruda_bench::shared_arena_bytes(1 << 20))
///     .init()
///     .expect("MPI starts");
/// let world = mpi.world().unwrap();
/// let row = ruda_bench::measure_shared::<f32>(&world, BenchOp::AllReduce, 1 << 20, Settings::auto(1 << 20)).unwrap();
/// assert_eq!(row.wrong, 0);
/// ```
pub fn measure_shared<T: Sample>(
    world: &MpiCommunicator,
    op: BenchOp,
    bytes: usize,
    settings: Settings,
) -> Result<Measurement, CommError> {
    use ruda_comm::Communicator;
    let count = elements_for::<T>(bytes, world.size());
    let (s, r) = buffer_lens(op, world.size(), count);
    let room = |len| {
        world
            .shared_buffer::<T>(len)
            .unwrap_or_else(|e| panic!("{op:?} of {bytes} bytes: {e}"))
    };
    let (mut send, mut recv) = (room(s), room(r));
    measure_in::<_, T, CommError>(
        world,
        op,
        bytes,
        settings,
        &mut send,
        &mut recv,
        |send, recv| call(world, op, send, recv),
    )
}
