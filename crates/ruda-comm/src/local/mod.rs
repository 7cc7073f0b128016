//! The local transport: ranks are threads of one process sharing memory.

mod communicator;
mod group;
mod kernels;
mod p2p;
mod sync;
mod validate;
mod world;

pub use communicator::LocalCommunicator;
pub use world::{DEFAULT_TIMEOUT, LocalWorld, RankError, TIMEOUT_ENV, WorldError};
