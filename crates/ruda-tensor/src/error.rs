//! Errors of the tensor contract.

use alloc::{string::String, vec::Vec};
use core::fmt;

use burn_backend::DType;
use ruda_comm::CommError;
use thiserror::Error;

/// The tensor-level operation an error happened in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TensorOp {
    /// `all_gather_float`.
    AllGatherFloat,
    /// `reduce_scatter_sum`.
    ReduceScatterSum,
    /// `all_reduce_sum`.
    AllReduceSum,
    /// `broadcast_float`.
    BroadcastFloat,
    /// `all_gather_int`.
    AllGatherInt,
    /// `all_to_all_v_float`.
    AllToAllVFloat,
    /// `all_to_all_v_int`.
    AllToAllVInt,
    /// `exchange_rows_float`.
    ExchangeRowsFloat,
}

impl TensorOp {
    /// The method name.
    pub const fn name(self) -> &'static str {
        match self {
            TensorOp::AllGatherFloat => "all_gather_float",
            TensorOp::ReduceScatterSum => "reduce_scatter_sum",
            TensorOp::AllReduceSum => "all_reduce_sum",
            TensorOp::BroadcastFloat => "broadcast_float",
            TensorOp::AllGatherInt => "all_gather_int",
            TensorOp::AllToAllVFloat => "all_to_all_v_float",
            TensorOp::AllToAllVInt => "all_to_all_v_int",
            TensorOp::ExchangeRowsFloat => "exchange_rows_float",
        }
    }
}

impl fmt::Display for TensorOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A failure of a tensor collective: the transport's error, or a violation
/// of the tensor contract. Contract violations are found before any data
/// moves and reported on every rank of the call (each names the rank that
/// reports it, `rank`, and the rank whose input is at fault, `offender`).
///
/// # Example
/// ```
/// use burn_flex::{Flex, FlexDevice};
/// use burn_backend::{TensorData, ops::FloatTensorOps};
/// use ruda_comm::{Communicator, LocalWorld};
/// use ruda_tensor::{HostCollective, TensorCollective, TensorCollectiveError};
///
/// let errors = LocalWorld::new(2).run_each(|c| {
///     let rows = 2 + c.rank(); // rank 1 holds a shard of another shape
///     let x = Flex::float_from_data(TensorData::new(vec![0f32; rows * 3], [rows, 3]), &FlexDevice);
///     TensorCollective::<Flex>::all_gather_float(&HostCollective::new(c), x).map(|_| ())
/// });
/// for e in errors {
///     assert!(matches!(e.unwrap_err().into_error(), Some(TensorCollectiveError::ShapeMismatch { offender: 1, .. })));
/// }
/// ```
#[derive(Clone, Debug, PartialEq, Error)]
pub enum TensorCollectiveError {
    /// The communicator failed.
    #[error(transparent)]
    Comm(#[from] CommError),
    /// Shards that must agree in shape do not.
    #[error(
        "{op} (reported by rank {rank}): rank {offender} has shape {got:?} where rank {reference} has {expected:?}{}",
        if *.trailing_only { " (trailing axes must match)" } else { "" }
    )]
    ShapeMismatch {
        /// The operation.
        op: TensorOp,
        /// The reporting rank.
        rank: usize,
        /// The rank whose shape differs.
        offender: usize,
        /// The rank it is compared with.
        reference: usize,
        /// The reference shape (at most its first 8 axes).
        expected: Vec<usize>,
        /// The offending shape (at most its first 8 axes).
        got: Vec<usize>,
        /// Whether only the trailing axes had to agree.
        trailing_only: bool,
    },
    /// Ranks passed tensors of different element types.
    #[error(
        "{op} (reported by rank {rank}): rank {offender} passes {got:?} where rank {reference} passes {expected:?}"
    )]
    DTypeMismatch {
        /// The operation.
        op: TensorOp,
        /// The reporting rank.
        rank: usize,
        /// The rank whose dtype differs.
        offender: usize,
        /// The rank it is compared with.
        reference: usize,
        /// The reference dtype.
        expected: DType,
        /// The offending dtype.
        got: DType,
    },
    /// A tensor without the axes the operation needs: no leading axis (a
    /// scalar), or a trailing axis of size zero.
    #[error(
        "{op} (reported by rank {rank}): rank {offender}'s tensor of shape {shape:?} {problem}"
    )]
    BadShape {
        /// The operation.
        op: TensorOp,
        /// The reporting rank.
        rank: usize,
        /// The rank whose tensor it is.
        offender: usize,
        /// Its shape.
        shape: Vec<usize>,
        /// What is wrong with it.
        problem: ShapeProblem,
    },
    /// Row counts that do not fit the tensor or the group.
    #[error("{op} (reported by rank {rank}): rank {offender}: {problem}")]
    Counts {
        /// The operation.
        op: TensorOp,
        /// The reporting rank.
        rank: usize,
        /// The rank whose counts are wrong.
        offender: usize,
        /// What is wrong.
        problem: CountProblem,
    },
    /// A root outside the group.
    #[error("{op} (reported by rank {rank}): root {root} is not a rank of a group of {size}")]
    InvalidRoot {
        /// The operation.
        op: TensorOp,
        /// The reporting rank.
        rank: usize,
        /// The root given.
        root: u32,
        /// The group size.
        size: usize,
    },
    /// An element type the operation cannot handle (e.g. a sum of integers
    /// through a float collective, or quantized storage).
    #[error("{op} (reported by rank {rank}): rank {offender}'s dtype {} is not supported here", match .dtype { Some(d) => alloc::format!("{d:?}"), None => "(quantized or boolean)".into() })]
    UnsupportedDType {
        /// The operation.
        op: TensorOp,
        /// The reporting rank.
        rank: usize,
        /// The rank whose tensor it is.
        offender: usize,
        /// The dtype, when the reporting rank can name it.
        dtype: Option<DType>,
    },
    /// The backend failed to read or create a tensor.
    #[error("{op} on rank {rank}: backend error: {message}")]
    Backend {
        /// The operation.
        op: TensorOp,
        /// The reporting rank.
        rank: usize,
        /// The backend's message.
        message: String,
    },
}

/// What is wrong with a tensor's shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ShapeProblem {
    /// It has no leading axis.
    NoLeadingAxis,
    /// A trailing axis has size zero.
    ZeroTrailingAxis,
    /// Its leading axis does not split into equal shards over the group.
    NotDivisible {
        /// The group size.
        ranks: usize,
    },
}

impl fmt::Display for ShapeProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ShapeProblem::NoLeadingAxis => f.write_str("has no leading axis"),
            ShapeProblem::ZeroTrailingAxis => f.write_str("has a trailing axis of size zero"),
            ShapeProblem::NotDivisible { ranks } => {
                write!(
                    f,
                    "has a leading axis that does not split into {ranks} equal shards"
                )
            }
        }
    }
}

/// What is wrong with row counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CountProblem {
    /// The send counts do not have one entry per rank.
    Length {
        /// Entries given.
        got: usize,
        /// The group size.
        ranks: usize,
    },
    /// The send counts do not add up to the tensor's rows.
    Sum {
        /// Their sum.
        sum: usize,
        /// The rows of the tensor.
        rows: usize,
    },
    /// A peer sends a block this rank did not ask for, or does not send one it asked for.
    Unmatched {
        /// The sending rank.
        source: usize,
        /// The receiving rank.
        dest: usize,
        /// Whether the block was sent.
        sent: bool,
    },
    /// A peer appears twice in a send or receive list, or is not in the group.
    BadPeer {
        /// The peer given.
        peer: usize,
        /// The group size.
        ranks: usize,
    },
}

impl fmt::Display for CountProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CountProblem::Length { got, ranks } => {
                write!(f, "{got} send counts for a group of {ranks}")
            }
            CountProblem::Sum { sum, rows } => {
                write!(f, "send counts add up to {sum} rows, the tensor has {rows}")
            }
            CountProblem::Unmatched {
                source,
                dest,
                sent: true,
            } => {
                write!(
                    f,
                    "rank {source} sends rows to rank {dest}, which does not receive from it"
                )
            }
            CountProblem::Unmatched {
                source,
                dest,
                sent: false,
            } => {
                write!(
                    f,
                    "rank {dest} receives from rank {source}, which sends it nothing"
                )
            }
            CountProblem::BadPeer { peer, ranks } => {
                write!(f, "peer {peer} is repeated or not in the group of {ranks}")
            }
        }
    }
}
