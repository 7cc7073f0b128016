//! Errors of the distributed primitives and the process grid.

use alloc::vec::Vec;
use core::fmt;

use ruda_comm::CommError;
use thiserror::Error;

use crate::error::TensorCollectiveError;
use crate::layout::LayoutError;

/// The primitive an error happened in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PrimitiveOp {
    /// [`crate::primitives::transpose`].
    Transpose,
    /// [`crate::primitives::copy_to`].
    CopyTo,
    /// [`crate::primitives::reduce_from`].
    ReduceFrom,
    /// [`crate::primitives::scatter_to`].
    ScatterTo,
    /// [`crate::primitives::gather_from`].
    GatherFrom,
    /// [`crate::primitives::gather_from_copy_to`].
    GatherFromCopyTo,
    /// [`crate::primitives::reduce_from_scatter_to`].
    ReduceFromScatterTo,
    /// [`crate::primitives::halo_exchange`].
    HaloExchange,
    /// [`crate::primitives::halo_reduce`].
    HaloReduce,
    /// [`crate::ProcessGrid::new`].
    Grid,
}

impl fmt::Display for PrimitiveOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PrimitiveOp::Transpose => "transpose",
            PrimitiveOp::CopyTo => "copy_to",
            PrimitiveOp::ReduceFrom => "reduce_from",
            PrimitiveOp::ScatterTo => "scatter_to",
            PrimitiveOp::GatherFrom => "gather_from",
            PrimitiveOp::GatherFromCopyTo => "gather_from_copy_to",
            PrimitiveOp::ReduceFromScatterTo => "reduce_from_scatter_to",
            PrimitiveOp::HaloExchange => "halo_exchange",
            PrimitiveOp::HaloReduce => "halo_reduce",
            PrimitiveOp::Grid => "process_grid",
        })
    }
}

/// Everything a distributed primitive can fail with. Errors that depend on
/// another rank's arguments (declared sizes, halo widths) are found by a
/// small exchange before any data moves and reported on every rank.
#[derive(Clone, Debug, PartialEq, Error)]
pub enum PrimitiveError {
    /// A tensor collective failed.
    #[error(transparent)]
    Collective(#[from] TensorCollectiveError),
    /// The communicator failed.
    #[error(transparent)]
    Comm(#[from] CommError),
    /// A layout request that cannot be met (bad dimension, empty chunk…).
    #[error("{op} on rank {rank}: {error}")]
    Layout {
        /// The primitive.
        op: PrimitiveOp,
        /// The reporting rank (in the group of the call).
        rank: usize,
        /// What is wrong.
        error: LayoutError,
    },
    /// Grid sizes that do not multiply to the world size.
    #[error("a {polar} × {azimuth} process grid needs {} ranks, the world has {world}", polar * azimuth)]
    GridSize {
        /// Polar ranks requested.
        polar: usize,
        /// Azimuth ranks requested.
        azimuth: usize,
        /// Ranks in the world.
        world: usize,
    },
    /// Per-rank sizes that do not match what the ranks actually hold.
    #[error(
        "{op} (reported by rank {rank}): rank {offender} declared per-rank sizes {declared:?} but the ranks hold {actual:?}"
    )]
    DeclaredSizes {
        /// The primitive.
        op: PrimitiveOp,
        /// The reporting rank.
        rank: usize,
        /// The rank whose declaration is wrong.
        offender: usize,
        /// Its declaration, when the reporting rank knows it (its own, or a
        /// wrong count of entries).
        declared: Option<Vec<usize>>,
        /// What the ranks hold along the dimension, in rank order.
        actual: Vec<usize>,
    },
    /// A halo wider than a neighbour's chunk, or radii that differ.
    #[error(
        "{op} (reported by rank {rank}): rank {offender} holds {rows} rows for a halo of radius {radius} (every rank of a polar group of more than one needs at least the radius, and all must pass the same radius)"
    )]
    Halo {
        /// The primitive.
        op: PrimitiveOp,
        /// The reporting rank.
        rank: usize,
        /// The rank at fault.
        offender: usize,
        /// Its rows along the latitude dimension.
        rows: usize,
        /// The radius it passed.
        radius: usize,
    },
    /// A user-facing tensor on a backend the primitives do not run on.
    #[error("this tensor cannot take part: {message}")]
    UnsupportedTensor {
        /// What the conversion reported.
        message: alloc::string::String,
    },
    /// A halo-padded tensor whose rows are not `local_rows + 2 × radius`.
    #[error(
        "halo_reduce on rank {rank}: {rows} rows along the latitude dimension, expected {expected}"
    )]
    HaloShape {
        /// The reporting rank.
        rank: usize,
        /// Rows present.
        rows: usize,
        /// `local_rows + 2 × radius`.
        expected: usize,
    },
}
