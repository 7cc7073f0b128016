//! The closed set of errors a communicator reports.

use std::time::Duration;

use thiserror::Error;

use crate::{DType, Fingerprint, OpKind};

/// Which buffer of a call an error is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BufferRole {
    /// The buffer that is read.
    Send,
    /// The buffer that is written.
    Receive,
    /// A buffer that is both read and written (`all_reduce`, `broadcast`).
    InOut,
    /// A list of send counts.
    SendCounts,
    /// A list of receive counts.
    ReceiveCounts,
}

impl core::fmt::Display for BufferRole {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            BufferRole::Send => "send buffer",
            BufferRole::Receive => "receive buffer",
            BufferRole::InOut => "buffer",
            BufferRole::SendCounts => "send counts",
            BufferRole::ReceiveCounts => "receive counts",
        })
    }
}

/// Why a peer can no longer take part.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PeerFailureCause {
    /// The peer's thread or process panicked.
    Panicked,
    /// The peer dropped its communicator (left the group) while others still needed it.
    LeftGroup,
}

impl core::fmt::Display for PeerFailureCause {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            PeerFailureCause::Panicked => "panicked",
            PeerFailureCause::LeftGroup => "dropped its communicator",
        })
    }
}

/// An argument that no rank could make work.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Error)]
pub enum InvalidArgument {
    /// A root rank outside the group.
    #[error("root {root} is not a rank of a group of {size}")]
    Root {
        /// The root given.
        root: usize,
        /// The group size.
        size: usize,
    },
    /// A peer rank outside the group.
    #[error("peer {peer} is not a rank of a group of {size}")]
    Peer {
        /// The peer given.
        peer: usize,
        /// The group size.
        size: usize,
    },
    /// A blocking send or receive addressed to the calling rank itself.
    #[error("a blocking {op} to oneself can never complete; use send_recv")]
    SelfMessage {
        /// `send` or `recv`.
        op: OpKind,
    },
    /// `ReduceOp::Avg` on an integer type.
    #[error("the average of {dtype} values is not defined; reduce with Sum and divide")]
    AverageOfIntegers {
        /// The integer type.
        dtype: DType,
    },
    /// A buffer that must hold one equal block per rank does not divide.
    #[error("rank {rank}'s buffer of {len} elements does not split into {parts} equal blocks")]
    NotDivisible {
        /// The rank whose buffer it is.
        rank: usize,
        /// Its length.
        len: usize,
        /// The number of blocks (the group size).
        parts: usize,
    },
    /// More elements in one call than the transport can address.
    #[error("{count} elements in one call exceed the transport's limit of {max}")]
    TooLarge {
        /// Elements requested.
        count: usize,
        /// The limit.
        max: usize,
    },
    /// A world of zero ranks.
    #[error("a communicator needs at least one rank")]
    EmptyWorld,
    /// Two threads used one rank's communicator at the same time.
    #[error("this rank's communicator is already inside a call on another thread")]
    ConcurrentUse,
    /// A color not representable by the transport.
    #[error("color {color} is not supported by this transport (largest is {max})")]
    Color {
        /// The color given.
        color: u32,
        /// The largest color allowed.
        max: u32,
    },
}

/// Everything that can go wrong in a communicator call.
///
/// Every variant names the operation and the rank that reports it (`rank`);
/// the variants that concern another rank name it too. All ranks are ranks
/// of the communicator the call was made on (for a sub-communicator from
/// [`crate::Communicator::split`], its own numbering, not the world's). Collective errors are reported on every rank of the call:
/// no rank moves data unless every rank's arguments are valid.
///
/// # Example
/// ```
/// use ruda_comm::{CommError, Communicator, LocalWorld};
/// let results = LocalWorld::new(2).run_each(|comm| {
///     // rank 1 passes a buffer one element too short
///     let mut v = vec![1.0f32; 4 - comm.rank()];
///     comm.all_reduce(&mut v, ruda_comm::ReduceOp::Sum)
/// });
/// for r in results {
///     assert!(matches!(r.unwrap_err().into_error(), Some(CommError::CountMismatch { .. })));
/// }
/// ```
#[derive(Clone, Debug, PartialEq, Error)]
pub enum CommError {
    /// A buffer's length does not fit the counts of the call.
    #[error(
        "{op} (reported by rank {rank}): rank {offender}'s {buffer} holds {got} elements, expected {expected}"
    )]
    LengthMismatch {
        /// The operation.
        op: OpKind,
        /// The reporting rank.
        rank: usize,
        /// The rank whose buffer is wrong.
        offender: usize,
        /// Which buffer.
        buffer: BufferRole,
        /// What the counts require.
        expected: usize,
        /// What the buffer holds.
        got: usize,
    },
    /// Two ranks disagree on a count (an element count, or what one sends
    /// and the other expects to receive).
    #[error(
        "{op} (reported by rank {rank}): rank {offender} expects {expected} elements where rank {peer} provides {got}"
    )]
    CountMismatch {
        /// The operation.
        op: OpKind,
        /// The reporting rank.
        rank: usize,
        /// The rank whose expectation is not met.
        offender: usize,
        /// The rank it disagrees with.
        peer: usize,
        /// What `offender` expects.
        expected: usize,
        /// What `peer` provides.
        got: usize,
    },
    /// Ranks entered different collectives.
    #[error(
        "collective desync (reported by rank {rank}): rank {first_rank} called {first}, rank {other_rank} called {other}"
    )]
    Desync {
        /// The operation of the reporting rank.
        op: OpKind,
        /// The reporting rank.
        rank: usize,
        /// The first of the two disagreeing ranks.
        first_rank: usize,
        /// Its fingerprint.
        first: Fingerprint,
        /// The second disagreeing rank.
        other_rank: usize,
        /// Its fingerprint.
        other: Fingerprint,
    },
    /// Some ranks did not arrive before the deadline.
    #[error("{op} on rank {rank} timed out after {waited:?}: ranks {missing:?} never arrived")]
    Timeout {
        /// The operation.
        op: OpKind,
        /// The reporting rank.
        rank: usize,
        /// The ranks that did not arrive.
        missing: Vec<usize>,
        /// The deadline that passed.
        waited: Duration,
    },
    /// A peer failed, so the call can never complete.
    #[error("{op} on rank {rank}: rank {peer} {cause}")]
    PeerFailure {
        /// The operation.
        op: OpKind,
        /// The reporting rank.
        rank: usize,
        /// The failed rank.
        peer: usize,
        /// What happened to it.
        cause: PeerFailureCause,
    },
    /// An argument no rank could make work.
    #[error("{op} on rank {rank}: invalid argument: {reason}")]
    InvalidArgument {
        /// The operation.
        op: OpKind,
        /// The reporting rank.
        rank: usize,
        /// What is wrong.
        reason: InvalidArgument,
    },
    /// The underlying transport (MPI, NCCL) failed.
    #[error("{op} on rank {rank}: transport error: {message}")]
    Transport {
        /// The operation.
        op: OpKind,
        /// The reporting rank.
        rank: usize,
        /// The transport's own message.
        message: String,
    },
}

impl CommError {
    /// The operation the error happened in.
    pub fn op(&self) -> OpKind {
        match self {
            CommError::LengthMismatch { op, .. }
            | CommError::CountMismatch { op, .. }
            | CommError::Desync { op, .. }
            | CommError::Timeout { op, .. }
            | CommError::PeerFailure { op, .. }
            | CommError::InvalidArgument { op, .. }
            | CommError::Transport { op, .. } => *op,
        }
    }

    /// The rank that reports the error.
    pub fn rank(&self) -> usize {
        match self {
            CommError::LengthMismatch { rank, .. }
            | CommError::CountMismatch { rank, .. }
            | CommError::Desync { rank, .. }
            | CommError::Timeout { rank, .. }
            | CommError::PeerFailure { rank, .. }
            | CommError::InvalidArgument { rank, .. }
            | CommError::Transport { rank, .. } => *rank,
        }
    }

    /// The same error as reported by another rank: collective errors are
    /// identical on every rank but for the reporting rank, so tests compare
    /// `a.reported_by(0) == b.reported_by(0)`.
    pub fn reported_by(mut self, reporter: usize) -> Self {
        match &mut self {
            CommError::LengthMismatch { rank, .. }
            | CommError::CountMismatch { rank, .. }
            | CommError::Desync { rank, .. }
            | CommError::Timeout { rank, .. }
            | CommError::PeerFailure { rank, .. }
            | CommError::InvalidArgument { rank, .. }
            | CommError::Transport { rank, .. } => *rank = reporter,
        }
        self
    }
}
