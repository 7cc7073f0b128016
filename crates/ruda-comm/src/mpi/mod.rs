//! The MPI transport (feature `mpi`): ranks are processes started by
//! `mpirun`, on one machine or many, communicating through Open MPI.

mod communicator;
mod raw;
mod world;

pub use communicator::MpiCommunicator;
pub use world::MpiWorld;
