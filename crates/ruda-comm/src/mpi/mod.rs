//! The MPI transport (feature `mpi`): ranks are processes started by
//! `mpirun`, on one machine or many, communicating through Open MPI.

mod abort;
mod agree;
mod communicator;
mod data;
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

pub use communicator::MpiCommunicator;
pub use world::{MpiWorld, MpiWorldBuilder};
