//! The conformance suite every transport must pass, generic over
//! [`Communicator`](ruda_comm::Communicator).
//!
//! Every rank generates every rank's input from a seed, so each can compute
//! the serial reference of a collective by itself and compare it with what
//! the transport delivered. Call the checks from every rank of a group with
//! the same arguments; each returns the first disagreement as a
//! [`ConformanceError`].
//!
//! Floating reductions are compared against an `f64` reference with the
//! tolerance of one final rounding to the element type (plus `f32`
//! accumulation error for `f16`/`bf16`), which a sum accumulated in the
//! element type itself would exceed; integer reductions must match the
//! wrapping reference exactly; gathers, broadcasts and exchanges must match
//! bit for bit.
//!
//! # Example
//! ```
//! use ruda_comm::LocalWorld;
//! use ruda_testkit::conformance;
//! LocalWorld::new(3).run(|comm| conformance::check_all_dtypes(&comm, 17, 42)).unwrap();
//! ```

mod checks;
mod replica;

pub use checks::{check_all_dtypes, check_dtype, check_split};
pub use replica::{check_replica_groups, replica_layout};
pub use ruda_bench::{Sample, mix};

use thiserror::Error;

use ruda_comm::{CommError, DType, OpKind};

/// What a conformance check found.
#[derive(Debug, Error)]
pub enum ConformanceError {
    /// The transport returned an error where none was expected.
    #[error(transparent)]
    Comm(#[from] CommError),
    /// The transport delivered a wrong value.
    #[error(
        "{op}<{dtype}> on rank {rank} of {size}, case {case}: element {index} is {got}, expected {expected}"
    )]
    Mismatch {
        /// The operation.
        op: OpKind,
        /// The element type.
        dtype: DType,
        /// The checking rank.
        rank: usize,
        /// The group size.
        size: usize,
        /// A description of the case (lengths, counts, reduction).
        case: String,
        /// The first wrong element.
        index: usize,
        /// What arrived.
        got: String,
        /// What the serial reference says.
        expected: String,
    },
    /// The transport returned a result where an error was required, or the
    /// wrong error.
    #[error("{op}<{dtype}> on rank {rank}: expected {expected}, got {got}")]
    WrongOutcome {
        /// The operation.
        op: OpKind,
        /// The element type.
        dtype: DType,
        /// The checking rank.
        rank: usize,
        /// What the contract requires.
        expected: String,
        /// What happened.
        got: String,
    },
}
