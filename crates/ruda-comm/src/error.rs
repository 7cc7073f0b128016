//! The closed set of errors a communicator reports.

use std::time::Duration;

use thiserror::Error;

use std::fmt;
use std::sync::Arc;

use crate::flight::{ErrorKind, RankHistory};
use crate::replica::ReplicaGroupsError;
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
    /// The peer's work ended (its rank closure returned) while others still
    /// needed it, e.g. it skipped a backward pass the others ran.
    Finished,
}

impl core::fmt::Display for PeerFailureCause {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            PeerFailureCause::Panicked => "panicked",
            PeerFailureCause::LeftGroup => "dropped its communicator",
            PeerFailureCause::Finished => "returned from its work while others still needed it",
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
    /// A blocking send or receive addressed to the calling rank itself, or
    /// a `send_recv` with exactly one of its ends at the calling rank.
    #[error("{}", self_message_text(*.op))]
    SelfMessage {
        /// `send` or `recv`.
        op: OpKind,
    },
    /// `ReduceOp::Mean` on an integer type.
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
    /// Replica groups that are not valid for the communicator, or that
    /// differ between its ranks ([`crate::Communicator::replica_group`]).
    #[error("{0}")]
    ReplicaGroups(ReplicaGroupsError),
    /// A color not representable by the transport.
    #[error("color {color} is not supported by this transport (largest is {max})")]
    Color {
        /// The color given.
        color: u32,
        /// The largest color allowed.
        max: u32,
    },
}

/// The message of [`InvalidArgument::SelfMessage`] for `op`.
fn self_message_text(op: OpKind) -> &'static str {
    match op {
        OpKind::SendRecv => {
            "a send_recv with exactly one of dest and source at this rank can never complete (with both at this rank it is a local copy)"
        }
        OpKind::Send => {
            "a blocking send to oneself can never complete (copy the buffer, or send_recv with dest and source both this rank)"
        }
        _ => {
            "a blocking receive from oneself can never complete (copy the buffer, or send_recv with dest and source both this rank)"
        }
    }
}

/// Everything that can go wrong in a communicator call.
///
/// Every variant names the operation and the rank that reports it (`rank`);
/// the variants that concern another rank name it too. Ranks are ranks of
/// the communicator the call was made on (for a sub-communicator from
/// [`crate::Communicator::split`], its own numbering); the error's
/// [`ErrorContext`] maps them to world ranks, and messages show both
/// (`rank 1 (world 3)`) when the two differ. Collective errors are reported
/// on every rank of the call: no rank moves data unless every rank's
/// arguments are valid. [`CommError::Timeout`], [`CommError::Desync`] and
/// [`CommError::PeerFailure`] also carry every rank's recent calls (the
/// flight recorder, see [`ErrorContext::histories`]).
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
        "{} (reported by rank {}): rank {}'s {buffer} holds {got} elements, expected {expected}",
        .context.label(*.op), .context.name(*.rank), .context.name(*.offender)
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
        /// World ranks and flight-recorder histories (ignored by `==`).
        context: ErrorContext,
    },
    /// Two ranks disagree on a count (an element count, or what one sends
    /// and the other expects to receive).
    #[error(
        "{} (reported by rank {}): rank {} expects {expected} elements where rank {} provides {got}",
        .context.label(*.op), .context.name(*.rank), .context.name(*.offender), .context.name(*.peer)
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
        /// World ranks and flight-recorder histories (ignored by `==`).
        context: ErrorContext,
    },
    /// Ranks entered different collectives.
    #[error(
        "collective desync (reported by rank {}): rank {} called {first}, rank {} called {other}",
        .context.name(*.rank), .context.name(*.first_rank), .context.name(*.other_rank)
    )]
    Desync {
        /// The operation of the reporting rank.
        op: OpKind,
        /// The reporting rank.
        rank: usize,
        /// The first of the two disagreeing ranks.
        first_rank: usize,
        /// Its fingerprint.
        first: Box<Fingerprint>,
        /// The second disagreeing rank.
        other_rank: usize,
        /// Its fingerprint.
        other: Box<Fingerprint>,
        /// World ranks and flight-recorder histories (ignored by `==`).
        context: ErrorContext,
    },
    /// Some ranks did not arrive before the deadline.
    #[error(
        "{} on rank {} timed out after {waited:?}: {}",
        .context.label(*.op), .context.name(*.rank), MissingRanks(.context, .missing)
    )]
    Timeout {
        /// The operation.
        op: OpKind,
        /// The reporting rank.
        rank: usize,
        /// The ranks that did not arrive (empty when the transport cannot
        /// tell: an MPI collective that did not complete in its data phase).
        missing: Vec<usize>,
        /// The deadline that passed.
        waited: Duration,
        /// World ranks and flight-recorder histories (ignored by `==`).
        context: ErrorContext,
    },
    /// A peer failed, so the call can never complete.
    #[error("{} on rank {}: rank {} {cause}", .context.label(*.op), .context.name(*.rank), .context.name(*.peer))]
    PeerFailure {
        /// The operation.
        op: OpKind,
        /// The reporting rank.
        rank: usize,
        /// The failed rank.
        peer: usize,
        /// What happened to it.
        cause: PeerFailureCause,
        /// World ranks and flight-recorder histories (ignored by `==`).
        context: ErrorContext,
    },
    /// An argument no rank could make work.
    #[error("{} on rank {}: invalid argument: {reason}", .context.label(*.op), .context.name(*.rank))]
    InvalidArgument {
        /// The operation.
        op: OpKind,
        /// The reporting rank.
        rank: usize,
        /// What is wrong.
        reason: InvalidArgument,
        /// World ranks and flight-recorder histories (ignored by `==`).
        context: ErrorContext,
    },
    /// The underlying transport (MPI, NCCL) failed.
    #[error("{} on rank {}: transport error: {message}", .context.label(*.op), .context.name(*.rank))]
    Transport {
        /// The operation.
        op: OpKind,
        /// The reporting rank.
        rank: usize,
        /// The transport's own message.
        message: String,
        /// World ranks and flight-recorder histories (ignored by `==`).
        context: ErrorContext,
    },
}

impl CommError {
    /// The kind of error, without its fields.
    pub fn kind(&self) -> ErrorKind {
        match self {
            CommError::LengthMismatch { .. } => ErrorKind::LengthMismatch,
            CommError::CountMismatch { .. } => ErrorKind::CountMismatch,
            CommError::Desync { .. } => ErrorKind::Desync,
            CommError::Timeout { .. } => ErrorKind::Timeout,
            CommError::PeerFailure { .. } => ErrorKind::PeerFailure,
            CommError::InvalidArgument { .. } => ErrorKind::InvalidArgument,
            CommError::Transport { .. } => ErrorKind::Transport,
        }
    }

    /// World ranks and flight-recorder histories of the error.
    pub fn context(&self) -> &ErrorContext {
        match self {
            CommError::LengthMismatch { context, .. }
            | CommError::CountMismatch { context, .. }
            | CommError::Desync { context, .. }
            | CommError::Timeout { context, .. }
            | CommError::PeerFailure { context, .. }
            | CommError::InvalidArgument { context, .. }
            | CommError::Transport { context, .. } => context,
        }
    }

    fn context_mut(&mut self) -> &mut ErrorContext {
        match self {
            CommError::LengthMismatch { context, .. }
            | CommError::CountMismatch { context, .. }
            | CommError::Desync { context, .. }
            | CommError::Timeout { context, .. }
            | CommError::PeerFailure { context, .. }
            | CommError::InvalidArgument { context, .. }
            | CommError::Transport { context, .. } => context,
        }
    }

    /// The same error with `context`, unless it already has one (the
    /// innermost context, closest to the failure, wins).
    pub fn with_context(mut self, context: impl FnOnce() -> ErrorContext) -> Self {
        if self.context().is_empty() {
            let caller = self.context().caller.clone();
            let mut new = context();
            new.caller = caller.or(new.caller);
            *self.context_mut() = new;
        }
        self
    }

    /// The same error, shown as an error of `caller`: the operation the
    /// user called, when this communicator call was one of its steps (a
    /// tensor all-reduce first agrees through an all-gather, say). The
    /// message names `caller`; [`CommError::op`] still says which
    /// communicator call failed. The outermost caller wins.
    ///
    /// # Example
    /// ```
    /// use ruda_comm::{CommError, InvalidArgument, OpKind};
    /// let e = CommError::InvalidArgument {
    ///     op: OpKind::AllGather,
    ///     rank: 0,
    ///     reason: InvalidArgument::EmptyWorld,
    ///     context: Default::default(),
    /// }
    /// .in_call("all_reduce");
    /// assert!(e.to_string().starts_with("all_reduce on rank 0"));
    /// assert_eq!(e.op(), OpKind::AllGather);
    /// ```
    pub fn in_call(mut self, caller: impl Into<Arc<str>>) -> Self {
        self.context_mut().caller = Some(caller.into());
        self
    }

    /// Whether the flight recorder's histories belong in this error:
    /// timeouts, desyncs and peer failures, where the question is which
    /// rank stopped where.
    pub fn wants_history(&self) -> bool {
        matches!(
            self,
            CommError::Desync { .. } | CommError::Timeout { .. } | CommError::PeerFailure { .. }
        )
    }

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

/// Where an error happened beyond its own fields: the world rank of each
/// rank of the communicator, and, for timeouts, desyncs and peer failures,
/// each rank's recent calls from the flight recorder. It is diagnostic
/// context: `==` on errors ignores it (two ranks report the same error with
/// histories read at different moments).
///
/// # Example
/// ```
/// use std::time::Duration;
/// use ruda_comm::{CommError, Communicator, LocalWorld};
/// let out = LocalWorld::new(2).timeout(Duration::from_millis(200)).run_each(|c| {
///     c.barrier()?;
///     if c.rank() == 0 { c.barrier() } else { std::thread::sleep(Duration::from_millis(600)); Ok(()) }
/// });
/// let err = out[0].as_ref().unwrap_err();
/// let ruda_comm::RankError::Failed(e) = err else { panic!() };
/// assert!(matches!(e, CommError::Timeout { .. } | CommError::PeerFailure { .. }));
/// let h = e.context().histories();
/// assert_eq!(h.len(), 2);                       // both ranks' recent calls
/// assert_eq!(h[1].calls.len(), 1);              // rank 1 made one barrier only
/// ```
#[derive(Clone, Default)]
pub struct ErrorContext {
    data: Option<Arc<ContextData>>,
    /// The operation the user called, when the failed call was a step of
    /// it ([`CommError::in_call`]).
    caller: Option<Arc<str>>,
}

struct ContextData {
    world_ranks: Vec<usize>,
    histories: Vec<RankHistory>,
}

impl ErrorContext {
    /// A context naming the world rank of each rank of the communicator
    /// (`world_ranks[r]` for rank `r`) and carrying `histories`.
    pub fn new(world_ranks: Vec<usize>, histories: Vec<RankHistory>) -> Self {
        ErrorContext {
            data: Some(Arc::new(ContextData {
                world_ranks,
                histories,
            })),
            caller: None,
        }
    }

    /// No context (errors made before a transport adds it).
    pub const fn none() -> Self {
        ErrorContext {
            data: None,
            caller: None,
        }
    }

    /// Whether there are no world ranks or histories yet.
    pub fn is_empty(&self) -> bool {
        self.data.is_none()
    }

    /// The operation the user called, when the failed call was a step of
    /// it (see [`CommError::in_call`]).
    pub fn caller(&self) -> Option<&str> {
        self.caller.as_deref()
    }

    /// The operation as a message names it: the user's call when known
    /// ([`CommError::in_call`]), else the communicator call `op`.
    pub fn label(&self, op: OpKind) -> OpLabel<'_> {
        OpLabel { ctx: self, op }
    }

    /// The world rank of rank `r` of the communicator, when known.
    pub fn world_rank(&self, r: usize) -> Option<usize> {
        self.data
            .as_ref()
            .and_then(|d| d.world_ranks.get(r).copied())
    }

    /// Every rank's recent calls (oldest first), when the error carries them.
    pub fn histories(&self) -> &[RankHistory] {
        self.data.as_ref().map_or(&[], |d| &d.histories)
    }

    /// Whether the communicator numbers its ranks differently from the world.
    fn renumbered(&self) -> bool {
        self.data
            .as_ref()
            .is_some_and(|d| d.world_ranks.iter().enumerate().any(|(r, &w)| r != w))
    }

    /// Rank `r` for a message: `"r"`, or `"r (world w)"` in a renumbered group.
    pub fn name(&self, r: usize) -> RankName<'_> {
        RankName { ctx: self, rank: r }
    }

    /// Ranks for a message, as a list of [`ErrorContext::name`]s.
    pub fn names<'a>(&'a self, ranks: &'a [usize]) -> RankNames<'a> {
        RankNames { ctx: self, ranks }
    }
}

impl PartialEq for ErrorContext {
    /// Always equal: the context is diagnostic, not part of the error.
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl fmt::Debug for ErrorContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.data {
            None => f
                .debug_struct("ErrorContext")
                .field("caller", &self.caller)
                .finish(),
            Some(d) => f
                .debug_struct("ErrorContext")
                .field("world_ranks", &d.world_ranks)
                .field("histories", &d.histories.len())
                .field("caller", &self.caller)
                .finish(),
        }
    }
}

/// The ranks a timeout waited for, as its message shows them.
struct MissingRanks<'a>(&'a ErrorContext, &'a [usize]);

impl fmt::Display for MissingRanks<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.1.is_empty() {
            f.write_str(
                "the call did not complete (the transport does not say which rank is missing)",
            )
        } else {
            write!(f, "ranks {} never arrived", self.0.names(self.1))
        }
    }
}

/// An operation as an error message shows it; see [`ErrorContext::label`].
#[derive(Clone, Copy)]
pub struct OpLabel<'a> {
    ctx: &'a ErrorContext,
    op: OpKind,
}

impl fmt::Display for OpLabel<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.ctx.caller() {
            Some(c) => f.write_str(c),
            None => write!(f, "{}", self.op),
        }
    }
}

/// A rank as an error message shows it; see [`ErrorContext::name`].
#[derive(Clone, Copy)]
pub struct RankName<'a> {
    ctx: &'a ErrorContext,
    rank: usize,
}

impl fmt::Display for RankName<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.ctx.world_rank(self.rank) {
            Some(w) if self.ctx.renumbered() => write!(f, "{} (world {w})", self.rank),
            _ => write!(f, "{}", self.rank),
        }
    }
}

/// Ranks as an error message shows them; see [`ErrorContext::names`].
#[derive(Clone, Copy)]
pub struct RankNames<'a> {
    ctx: &'a ErrorContext,
    ranks: &'a [usize],
}

impl fmt::Display for RankNames<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[")?;
        for (i, &r) in self.ranks.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{}", self.ctx.name(r))?;
        }
        f.write_str("]")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timeout(missing: Vec<usize>) -> CommError {
        CommError::Timeout {
            op: OpKind::AllReduce,
            rank: 0,
            missing,
            waited: Duration::from_secs(1),
            context: ErrorContext::none(),
        }
    }

    #[test]
    fn a_timeout_without_missing_ranks_says_the_transport_cannot_tell() {
        assert_eq!(
            timeout(vec![2]).to_string(),
            "all_reduce on rank 0 timed out after 1s: ranks [2] never arrived"
        );
        let msg = timeout(vec![]).to_string();
        assert!(msg.contains("does not say which rank is missing"), "{msg}");
        assert!(!msg.contains("ranks []"), "{msg}");
    }

    #[test]
    fn the_caller_names_the_operation_and_survives_a_later_context() {
        let e = timeout(vec![1])
            .in_call("all_reduce")
            .with_context(|| ErrorContext::new(vec![4, 5], Vec::new()));
        assert_eq!(e.op(), OpKind::AllReduce);
        assert_eq!(e.context().caller(), Some("all_reduce"));
        assert_eq!(e.context().world_rank(1), Some(5));
        assert!(
            e.to_string().starts_with("all_reduce on rank 0 (world 4)"),
            "{e}"
        );
    }
}
