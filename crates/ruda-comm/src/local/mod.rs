//! The local transport: ranks are threads of one process sharing memory.

mod affinity;
mod communicator;
mod group;
pub(crate) mod kernels;
mod p2p;
mod sync;
mod world;

pub use affinity::PIN_ENV;
pub use communicator::LocalCommunicator;
pub use world::{DEFAULT_TIMEOUT, LocalWorld, RankError, TIMEOUT_ENV, WorldError};
