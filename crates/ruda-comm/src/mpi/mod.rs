//! The MPI transport (feature `mpi`): ranks are processes started by
//! `mpirun`, on one machine or many, communicating through Open MPI.

mod abort;
mod agree;
mod arena;
mod cma;
mod communicator;
mod data;
mod direct;
mod inline;
mod p2p;
mod placement;
mod raw;
mod segment;
mod session;
mod shared;
mod wait;
mod watchdog;
mod world;

pub use arena::{SharedBuffer, SharedBufferError};
pub use communicator::MpiCommunicator;
pub use direct::{SINGLE_COPY_BELOW_BYTES, SINGLE_COPY_FROM_BYTES};
pub use world::{MpiWorld, MpiWorldBuilder};
