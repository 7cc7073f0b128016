//! # ruda-testkit
//!
//! ruda's test machinery, kept out of the library crates users build
//! (`publish = false`):
//!
//! - [`conformance`]: the suite every transport passes, generic over
//!   [`Communicator`](ruda_comm::Communicator): every operation and element
//!   type against a serial reference.
//! - `ruda-chaos`: random programs of collectives and differentiable
//!   primitives with one injected fault each, on the local transport or
//!   under `mpirun` (its tests are `tests/chaos.rs` and `tests/chaos_mpi.rs`).
//! - `ruda-mpi-conformance` and `ruda-tensor-mpi-check` (feature `mpi`): the
//!   conformance suite, failure modes and the tensor layer under real
//!   `mpirun`, launched by `tests/comm_mpi.rs` and `tests/tensor_mpi.rs`.
//! - [`cluster`]: the namespace cluster of `scripts/cluster.sh` (hosts on
//!   this machine, faults between them) for `tests/cluster_mpi.rs`.

#![warn(missing_docs)]

pub mod cluster;
pub mod conformance;
