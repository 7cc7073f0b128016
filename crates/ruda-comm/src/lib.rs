//! # ruda-comm
//!
//! Communicators and transports over plain host buffers: the collective
//! layer of ruda, with no tensor framework.
//!
//! - [`Communicator`]: the contract (all-reduce, all-gather(v),
//!   reduce-scatter(v), broadcast, all-to-all(v), send/recv, barrier, split).
//! - [`LocalWorld`] / [`LocalCommunicator`]: ranks as threads of this process.
//! - [`Element`]: the types that travel; [`CommError`]: what goes wrong.
//!
//! ```
//! use ruda_comm::{Communicator, LocalWorld, ReduceOp};
//! let out = LocalWorld::new(4).run(|comm| {
//!     let mut grad = vec![comm.rank() as f32; 3];
//!     comm.all_reduce(&mut grad, ReduceOp::Mean)?;
//!     Ok::<_, ruda_comm::CommError>(grad)
//! }).unwrap();
//! assert!(out.iter().all(|g| g == &vec![1.5; 3]));
//! ```

#![warn(missing_docs)]

mod communicator;
mod copy;
mod element;
mod error;
mod fingerprint;
mod flight;
mod hash;
mod launch;
mod local;
#[cfg(feature = "mpi")]
mod mpi;
mod reduce_op;
mod replica;
mod validate;

pub use communicator::Communicator;
pub use copy::{
    COPY_STREAMING_ENV, COPY_STREAMING_MAX_BYTES, COPY_STREAMING_MIN_BYTES, copy_streaming,
    copy_streaming_from_bytes, copy_streaming_to_each,
};
pub use element::{Accumulator, DType, Element};
pub use error::{
    BufferRole, CommError, ErrorContext, InvalidArgument, OpLabel, PeerFailureCause, RankName,
    RankNames,
};
pub use fingerprint::{Fingerprint, ObjectType, OpKind};
pub use flight::{
    CallRecord, ErrorKind, FLIGHT_RECORDER_ENTRIES, FLIGHT_RECORDER_ENV, Outcome, RankHistory,
};
// Shared with ruda's other crates (call records and shape hashes must
// agree across them); not part of the API.
#[doc(hidden)]
pub use hash::mix;
pub use launch::{
    AnyCommunicator, LAUNCH_ENV, Launch, LaunchError, LaunchMode, MPI_LAUNCHER_ENV,
    OTHER_LAUNCHER_ENV, WORLD_SIZE_ENV,
};
pub use local::{
    DEFAULT_TIMEOUT, LocalCommunicator, LocalWorld, PIN_ENV, RankError, TIMEOUT_ENV, WorldError,
};
pub use reduce_op::ReduceOp;
pub use replica::{ReplicaGroups, ReplicaGroupsError};

#[cfg(feature = "mpi")]
pub use mpi::{
    MpiCommunicator, MpiWorld, MpiWorldBuilder, SINGLE_COPY_BELOW_BYTES, SINGLE_COPY_FROM_BYTES,
    SharedBuffer, SharedBufferError,
};
