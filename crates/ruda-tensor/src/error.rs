//! The one error type of the tensor layer, and the operations it names.

use alloc::{format, string::String, vec::Vec};
use core::fmt;

use burn_backend::DType;
use ruda_comm::CommError;
use thiserror::Error;

use crate::layout::LayoutError;

/// The tensor-level operation an error happened in: a method of the seed's
/// contract, a primitive, or a tensor method.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TensorOp {
    /// The contract's `all_gather_float` (equal shards, leading axis).
    AllGatherFloat,
    /// The contract's `reduce_scatter_sum` (equal shards, leading axis).
    ReduceScatterSum,
    /// The contract's `all_reduce_sum`, and the `all_reduce` method.
    AllReduceSum,
    /// The contract's `broadcast_float`, and the `broadcast` method.
    BroadcastFloat,
    /// The contract's `all_gather_int`.
    AllGatherInt,
    /// The contract's `all_to_all_v_float`, and the `all_to_all` method.
    AllToAllVFloat,
    /// The contract's `all_to_all_v_int`.
    AllToAllVInt,
    /// `exchange_rows_float` (neighbour exchange).
    ExchangeRowsFloat,
    /// `all_gather` along any dimension, per-rank sizes discovered.
    AllGather,
    /// `reduce_scatter` along any dimension.
    ReduceScatter,
    /// `copy_to`.
    CopyTo,
    /// `reduce_from`.
    ReduceFrom,
    /// `scatter_to`.
    ScatterTo,
    /// `gather_from`.
    GatherFrom,
    /// `gather_from_copy_to`.
    GatherFromCopyTo,
    /// `reduce_from_scatter_to`.
    ReduceFromScatterTo,
    /// `transpose` (distributed, an all-to-all).
    Transpose,
    /// `halo_exchange`.
    HaloExchange,
    /// `halo_reduce`.
    HaloReduce,
    /// Building a process grid.
    Grid,
    /// Seed 004's `all_reduce` over a replica group ([`crate::replica`]).
    ReplicaAllReduce,
    /// Seed 004's `all_gather(num_ranks)` over a replica group.
    ReplicaAllGather,
    /// Seed 004's `reduce_scatter(num_ranks)` over a replica group.
    ReplicaReduceScatter,
    /// Seed 004's `all_to_all` over a replica group.
    ReplicaAllToAll,
    /// Seed 004's `rank_slice` (select this rank's slice by its rank id).
    RankSlice,
    /// Seed 004's `rank_slice_by` (select a slice through a rank-id lookup).
    RankSliceBy,
    /// [`crate::ddp::all_reduce_gradients`]: every parameter's gradient
    /// reduced over the replicas.
    DdpGradients,
    /// The all-to-all of the primitives and tensor methods (any dimension;
    /// zero-size trailing axes move as empty rows).
    AllToAll,
    /// The all-reduce of the primitives and tensor methods (the seed's
    /// contract entry point is [`TensorOp::AllReduceSum`]).
    AllReduce,
    /// The broadcast of the primitives and tensor methods (the seed's
    /// contract entry point is [`TensorOp::BroadcastFloat`]).
    Broadcast,
    /// The integer all-to-all of the tensor methods (zero-size trailing
    /// axes move as empty rows; the seed's contract entry point is
    /// [`TensorOp::AllToAllVInt`]).
    AllToAllInt,
    /// [`crate::ddp::broadcast_module`]: every parameter of one rank's
    /// module to every replica.
    DdpBroadcast,
    /// [`crate::ddp::check_replicas`]: whether every replica's parameters
    /// are bit for bit rank 0's.
    DdpCheck,
    /// [`crate::ddp::save_checkpoint`]: one rank writes the run's state.
    DdpSave,
    /// [`crate::ddp::load_checkpoint`]: every rank reads it.
    DdpLoad,
    /// [`crate::TensorExt::all_reduce_with`]: a reduction other than the
    /// sum ([`ruda_comm::ReduceOp`]), every rank getting the result.
    AllReduceWith,
    /// [`crate::TensorExt::reduce_scatter_with`]: a reduction other than the
    /// sum, each rank keeping its chunk.
    ReduceScatterWith,
    /// [`crate::TensorExt::send`]: a tensor to one peer.
    Send,
    /// [`crate::recv`]: a tensor from one peer.
    Recv,
    /// [`crate::ddp::sync_buffers`]: every replica's buffers (running
    /// statistics, frozen parameters) made equal.
    DdpBuffers,
    /// [`crate::ddp::SyncBatchNorm::forward`]: batch statistics over every
    /// rank's shard.
    SyncBatchNorm,
    /// [`crate::ddp::Sharded::step`]: a data-parallel step with the
    /// optimizer state (and with ZeRO stage 2 the gradients) sharded.
    DdpSharded,
    /// [`crate::ddp::save_sharded_checkpoint`]: every rank writes its
    /// optimizer shard, one rank the model.
    DdpSaveSharded,
    /// [`crate::ddp::load_sharded_checkpoint`]: every rank reads the model
    /// and the optimizer state of the parameters it owns.
    DdpLoadSharded,
    /// [`crate::ddp::DistributedSampler::new`]: the ranks agree on the
    /// dataset's length.
    DdpSampler,
    /// [`crate::TensorExt::reduce`]: the sum over the group at one root.
    Reduce,
    /// [`crate::Exchange`]: posted sends and receives carried out together.
    Exchange,
    /// [`crate::pipeline::one_f_one_b`]: a pipeline schedule.
    Pipeline,
    /// [`crate::TensorExt::gather_to_root`]: every rank's tensor,
    /// concatenated at one root.
    GatherToRoot,
    /// [`crate::TensorExt::scatter_from_root`]: the root's tensor split
    /// over the ranks.
    ScatterFromRoot,
    /// [`crate::ddp::Overlap`]: gradients reduced during the backward pass.
    DdpOverlap,
}

impl TensorOp {
    /// Every operation, in code order.
    pub const ALL: [TensorOp; 51] = [
        TensorOp::AllGatherFloat,
        TensorOp::ReduceScatterSum,
        TensorOp::AllReduceSum,
        TensorOp::BroadcastFloat,
        TensorOp::AllGatherInt,
        TensorOp::AllToAllVFloat,
        TensorOp::AllToAllVInt,
        TensorOp::ExchangeRowsFloat,
        TensorOp::AllGather,
        TensorOp::ReduceScatter,
        TensorOp::CopyTo,
        TensorOp::ReduceFrom,
        TensorOp::ScatterTo,
        TensorOp::GatherFrom,
        TensorOp::GatherFromCopyTo,
        TensorOp::ReduceFromScatterTo,
        TensorOp::Transpose,
        TensorOp::HaloExchange,
        TensorOp::HaloReduce,
        TensorOp::Grid,
        TensorOp::ReplicaAllReduce,
        TensorOp::ReplicaAllGather,
        TensorOp::ReplicaReduceScatter,
        TensorOp::ReplicaAllToAll,
        TensorOp::RankSlice,
        TensorOp::RankSliceBy,
        TensorOp::DdpGradients,
        TensorOp::AllToAll,
        TensorOp::AllReduce,
        TensorOp::Broadcast,
        TensorOp::AllToAllInt,
        TensorOp::DdpBroadcast,
        TensorOp::DdpCheck,
        TensorOp::DdpSave,
        TensorOp::DdpLoad,
        TensorOp::AllReduceWith,
        TensorOp::ReduceScatterWith,
        TensorOp::Send,
        TensorOp::Recv,
        TensorOp::DdpBuffers,
        TensorOp::SyncBatchNorm,
        TensorOp::DdpSharded,
        TensorOp::DdpSaveSharded,
        TensorOp::DdpLoadSharded,
        TensorOp::DdpSampler,
        TensorOp::Reduce,
        TensorOp::Exchange,
        TensorOp::Pipeline,
        TensorOp::GatherToRoot,
        TensorOp::ScatterFromRoot,
        TensorOp::DdpOverlap,
    ];

    /// A small stable number for the operation (its index in [`TensorOp::ALL`]).
    pub fn code(self) -> i64 {
        Self::ALL.iter().position(|&o| o == self).expect("listed") as i64
    }

    /// The operation of [`TensorOp::code`] `c`.
    pub fn from_code(c: i64) -> Option<TensorOp> {
        usize::try_from(c)
            .ok()
            .and_then(|c| Self::ALL.get(c).copied())
    }

    /// The name as in the API.
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
            TensorOp::AllGather => "all_gather",
            TensorOp::ReduceScatter => "reduce_scatter",
            TensorOp::CopyTo => "copy_to",
            TensorOp::ReduceFrom => "reduce_from",
            TensorOp::ScatterTo => "scatter_to",
            TensorOp::GatherFrom => "gather_from",
            TensorOp::GatherFromCopyTo => "gather_from_copy_to",
            TensorOp::ReduceFromScatterTo => "reduce_from_scatter_to",
            TensorOp::Transpose => "transpose",
            TensorOp::HaloExchange => "halo_exchange",
            TensorOp::HaloReduce => "halo_reduce",
            TensorOp::Grid => "process_grid",
            TensorOp::ReplicaAllReduce => "replica::all_reduce",
            TensorOp::ReplicaAllGather => "replica::all_gather",
            TensorOp::ReplicaReduceScatter => "replica::reduce_scatter",
            TensorOp::ReplicaAllToAll => "replica::all_to_all",
            TensorOp::RankSlice => "replica::rank_slice",
            TensorOp::RankSliceBy => "replica::rank_slice_by",
            TensorOp::DdpGradients => "ddp::all_reduce_gradients",
            TensorOp::AllToAll => "all_to_all",
            TensorOp::AllReduce => "all_reduce",
            TensorOp::Broadcast => "broadcast",
            TensorOp::AllToAllInt => "all_to_all_int",
            TensorOp::DdpBroadcast => "ddp::broadcast_module",
            TensorOp::DdpCheck => "ddp::check_replicas",
            TensorOp::DdpSave => "ddp::save_checkpoint",
            TensorOp::DdpLoad => "ddp::load_checkpoint",
            TensorOp::AllReduceWith => "all_reduce_with",
            TensorOp::ReduceScatterWith => "reduce_scatter_with",
            TensorOp::Send => "send",
            TensorOp::Recv => "recv",
            TensorOp::DdpBuffers => "ddp::sync_buffers",
            TensorOp::SyncBatchNorm => "ddp::SyncBatchNorm::forward",
            TensorOp::DdpSharded => "ddp::Sharded::step",
            TensorOp::DdpSaveSharded => "ddp::save_sharded_checkpoint",
            TensorOp::DdpLoadSharded => "ddp::load_sharded_checkpoint",
            TensorOp::DdpSampler => "ddp::DistributedSampler::new",
            TensorOp::Reduce => "reduce",
            TensorOp::Exchange => "Exchange::wait",
            TensorOp::Pipeline => "pipeline::one_f_one_b",
            TensorOp::GatherToRoot => "gather_to_root",
            TensorOp::ScatterFromRoot => "scatter_from_root",
            TensorOp::DdpOverlap => "ddp::Overlap",
        }
    }
}

impl fmt::Display for TensorOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Which call a rank is in: an operation, forward or the backward pass of
/// it, at a position in its group's sequence of collectives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CallId {
    /// The operation.
    pub op: TensorOp,
    /// Whether this is the operation's backward pass.
    pub backward: bool,
    /// How many collectives the rank had made on the group before it.
    pub seq: u64,
}

impl fmt::Display for CallId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.backward {
            write!(f, "the backward pass of {} (#{})", self.op, self.seq)
        } else {
            write!(f, "{} (#{})", self.op, self.seq)
        }
    }
}

/// Everything that can go wrong in ruda's tensor layer: the communicator's
/// failures (one variant, [`Error::Comm`]) and violations of the tensor
/// contract or of a primitive's rules. Problems that depend on another
/// rank's arguments are found by one small exchange before any data moves
/// and reported on every rank: each error names the rank that reports it
/// (`rank`) and the rank at fault (`offender`), in the numbering of the
/// group of the call.
///
/// # Example
/// ```
/// use burn_tensor::{Device, Tensor};
/// use ruda_comm::LocalWorld;
/// use ruda_tensor::{Error, HostCollective, TensorExt};
///
/// let errors = LocalWorld::new(2).run_each(|c| {
///     let rows = 2 + ruda_comm::Communicator::rank(&c); // rank 1 holds another shape
///     let x = Tensor::<2>::zeros([rows, 3], &Device::flex());
///     x.all_reduce(&HostCollective::new(c)).map(|_| ())
/// });
/// for e in errors {
///     assert!(matches!(e.unwrap_err().into_error(), Some(Error::ShapeMismatch { offender: 1, .. })));
/// }
/// ```
#[derive(Clone, Debug, PartialEq, Error)]
pub enum Error {
    /// The communicator failed (timeout, peer failure, desync of the raw
    /// calls…); see [`CommError`].
    #[error(transparent)]
    Comm(#[from] CommError),
    /// Ranks are in different tensor operations, or at different positions
    /// in their sequence of calls on the group.
    #[error(
        "tensor-layer desync (reported by rank {rank}): rank {offender} is in {got} where rank {reference} is in {expected}"
    )]
    Desync {
        /// The reporting rank.
        rank: usize,
        /// The rank whose call differs.
        offender: usize,
        /// The rank it is compared with.
        reference: usize,
        /// The reference rank's call.
        expected: CallId,
        /// The offender's call.
        got: CallId,
    },
    /// Tensors that must agree in shape do not.
    #[error(
        "{op} (reported by rank {rank}): rank {offender} has shape {} where rank {reference} has {}{}",
        Dims(.got), Dims(.expected),
        match .free_axis { Some(a) => alloc::format!(" (axis {a} may differ)"), None => String::new() }
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
        /// The reference shape (its first 8 axes; `None` for the axis that may differ).
        expected: Vec<Option<usize>>,
        /// The offending shape, likewise.
        got: Vec<Option<usize>>,
        /// The axis allowed to differ across ranks, if any.
        free_axis: Option<usize>,
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
    /// Some ranks' inputs are tracked by autodiff and others' are not, for
    /// an operation whose backward pass communicates: the tracked ranks
    /// would wait in a backward collective the others never enter.
    #[error(
        "{op} (reported by rank {rank}): rank {offender}'s input {} gradients but rank {reference}'s {} (every rank must track, or none)",
        if *.offender_tracked { "requires" } else { "does not require" },
        if *.offender_tracked { "does not" } else { "does" }
    )]
    TrackingMismatch {
        /// The operation.
        op: TensorOp,
        /// The reporting rank.
        rank: usize,
        /// The rank that differs from the reference.
        offender: usize,
        /// The rank it is compared with.
        reference: usize,
        /// Whether the offender's input is tracked.
        offender_tracked: bool,
    },
    /// A tensor without the axes the operation needs.
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
        /// Its shape (first 8 axes).
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
    /// A root outside the group, or ranks naming different roots.
    #[error(
        "{op} (reported by rank {rank}): rank {offender} names root {root}{}",
        if .root >= .size {
            alloc::format!(", outside a group of {size}")
        } else {
            alloc::format!(" where rank 0 names {expected}")
        }
    )]
    InvalidRoot {
        /// The operation.
        op: TensorOp,
        /// The reporting rank.
        rank: usize,
        /// The rank whose root is wrong.
        offender: usize,
        /// The root it gave.
        root: usize,
        /// Rank 0's root (the same as `root` when it is simply out of range).
        expected: usize,
        /// The group size.
        size: usize,
    },
    /// A posted receive of an [`crate::Exchange`] was lost: the wait that
    /// was carrying it out panicked, or another thread waited on the same
    /// exchange at the same time (use an exchange from one thread).
    #[error(
        "{op} (reported by rank {rank}): a posted receive from rank {peer} was lost (the wait carrying it out panicked, or another thread waited on the exchange)"
    )]
    ExchangeLost {
        /// The operation.
        op: TensorOp,
        /// The reporting rank.
        rank: usize,
        /// The receive's peer.
        peer: usize,
    },
    /// A point-to-point peer outside the group or equal to this rank
    /// (a message to oneself could never be matched).
    #[error(
        "{op} (reported by rank {rank}): peer {peer} {}",
        if .peer >= .size {
            alloc::format!("is outside a group of {size}")
        } else {
            "is this rank".into()
        }
    )]
    InvalidPeer {
        /// The operation.
        op: TensorOp,
        /// The reporting rank.
        rank: usize,
        /// The peer it named.
        peer: usize,
        /// The group size.
        size: usize,
    },
    /// An element type the operation cannot handle (a sum of integers
    /// through a float collective, quantized or boolean storage).
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
    /// A layout request that cannot be met (bad dimension, empty chunk…).
    #[error("{op} on rank {rank}: {error}")]
    Layout {
        /// The operation.
        op: TensorOp,
        /// The reporting rank.
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
    /// Sizes of a [`HybridGrid`](crate::HybridGrid) that do not multiply to
    /// the world size (or a size of zero).
    #[error(
        "a {replicas} × {polar} × {azimuth} replicas × polar × azimuth grid does not fit a world of {world} ranks (sizes must be positive and multiply to the world size, which must be below 2^31)"
    )]
    HybridGridSize {
        /// Replicas requested.
        replicas: usize,
        /// Polar ranks requested.
        polar: usize,
        /// Azimuth ranks requested.
        azimuth: usize,
        /// Ranks in the world.
        world: usize,
    },
    /// Declared per-rank sizes that differ from what the ranks hold.
    #[error(
        "{op} (reported by rank {rank}): rank {offender} declared per-rank sizes {declared:?} but the ranks hold {actual:?}"
    )]
    DeclaredSizes {
        /// The operation.
        op: TensorOp,
        /// The reporting rank.
        rank: usize,
        /// The rank whose declaration is wrong.
        offender: usize,
        /// Its declaration, when the reporting rank knows it (its own).
        declared: Option<Vec<usize>>,
        /// What the ranks hold along the dimension, in rank order.
        actual: Vec<usize>,
    },
    /// A halo wider than a neighbour's chunk, or radii that differ.
    #[error(
        "{op} (reported by rank {rank}): rank {offender} holds {rows} rows for a halo of radius {radius} (every rank of a group of more than one needs at least the radius, and all must pass the same radius)"
    )]
    Halo {
        /// The operation.
        op: TensorOp,
        /// The reporting rank.
        rank: usize,
        /// The rank at fault.
        offender: usize,
        /// Its rows along the halo dimension.
        rows: usize,
        /// The radius it passed.
        radius: usize,
    },
    /// A halo-padded tensor whose rows are not `local_rows + 2 × radius`.
    #[error(
        "halo_reduce (reported by rank {rank}): rank {offender} has {rows} rows along the halo dimension, expected {expected}"
    )]
    HaloShape {
        /// The reporting rank.
        rank: usize,
        /// The rank whose tensor it is.
        offender: usize,
        /// Rows present.
        rows: usize,
        /// `local_rows + 2 × radius`.
        expected: usize,
    },
    /// Ranks pass different values for a parameter every rank must share.
    #[error(
        "{op} (reported by rank {rank}): rank {offender} passes {what} {got} where rank 0 passes {expected}"
    )]
    Mismatch {
        /// The operation.
        op: TensorOp,
        /// The reporting rank.
        rank: usize,
        /// The rank whose value differs.
        offender: usize,
        /// The parameter.
        what: &'static str,
        /// Rank 0's value.
        expected: i64,
        /// The offender's value.
        got: i64,
    },
    /// A `num_ranks` (seed 004's operations) that is not the size of the
    /// replica group the call runs over.
    #[error(
        "{op} (reported by rank {rank}): rank {offender} passes num_ranks {num_ranks} for a replica group of {size}"
    )]
    NumRanks {
        /// The operation.
        op: TensorOp,
        /// The reporting rank.
        rank: usize,
        /// The rank that passed it.
        offender: usize,
        /// The `num_ranks` it passed.
        num_ranks: usize,
        /// The group's size.
        size: usize,
    },
    /// A rank-id lookup table that does not fit the group
    /// ([`crate::replica::rank_slice_by`]).
    #[error("replica::rank_slice_by on rank {rank}: {problem}")]
    RankLookup {
        /// The rank (in the group).
        rank: usize,
        /// What is wrong.
        problem: LookupProblem,
    },
    /// A user-facing tensor on a backend or device ruda does not run on.
    #[error("this tensor cannot take part: {message}")]
    UnsupportedTensor {
        /// What the conversion reported.
        message: String,
    },
    /// Replicas whose modules differ ([`crate::ddp`]): another number of
    /// float parameters, or a parameter of another size or dtype at the
    /// same position in the module's order.
    #[error(
        "{op} (reported by rank {rank}): rank {offender}'s module differs from rank {reference}'s: {problem}"
    )]
    ModuleMismatch {
        /// The operation.
        op: TensorOp,
        /// The reporting rank.
        rank: usize,
        /// The rank whose module differs.
        offender: usize,
        /// The rank it is compared with (rank 0).
        reference: usize,
        /// How it differs.
        problem: ModuleProblem,
    },
    /// A rank's agreement record holds a code this build cannot read (a
    /// rank running another version of ruda, or not a tensor-layer record
    /// at all), or one that is not this call's (the rank is in another
    /// data-parallel call: its operation is named).
    #[error(
        "{op} (reported by rank {rank}): rank {offender}'s record {}",
        record_detail(what, *code)
    )]
    Record {
        /// The operation.
        op: TensorOp,
        /// The reporting rank.
        rank: usize,
        /// The rank whose record it is.
        offender: usize,
        /// Which field: `record marker`, `operation`, `problem`, `dtype`.
        what: &'static str,
        /// The code found.
        code: i64,
    },
    /// Replica groups that are not valid on their own
    /// ([`ruda_comm::ReplicaGroups::new`]), so that `?` works in a rank's
    /// code. (Groups that differ between ranks are found by
    /// [`crate::Group::replica_group`], as [`Error::Comm`].)
    #[error(transparent)]
    ReplicaGroups(#[from] ruda_comm::ReplicaGroupsError),
    /// A checkpoint a rank could not write or read
    /// ([`crate::ddp::save_checkpoint`], [`crate::ddp::load_checkpoint`]).
    #[error("{op} (reported by rank {rank}): {path}: rank {offender}: {message}")]
    Checkpoint {
        /// The operation.
        op: TensorOp,
        /// The reporting rank.
        rank: usize,
        /// The first rank that failed.
        offender: usize,
        /// The checkpoint's directory.
        path: String,
        /// What failed (the I/O error on the rank it happened on).
        message: String,
    },
    /// Ranks that sample datasets of different lengths
    /// ([`crate::ddp::DistributedSampler::new`]).
    #[error(
        "ddp::DistributedSampler::new (reported by rank {rank}): rank {offender}'s dataset has {len} samples where rank 0's has {expected}"
    )]
    Sampler {
        /// The reporting rank.
        rank: usize,
        /// The first rank whose length differs from rank 0's.
        offender: usize,
        /// Its length.
        len: usize,
        /// Rank 0's.
        expected: usize,
    },
    /// A setting outside its domain (a batch norm's epsilon, momentum or
    /// feature count).
    #[error("{op}: {setting} = {value} is outside its domain ({domain})")]
    InvalidSetting {
        /// The operation the setting is for.
        op: TensorOp,
        /// The setting's name.
        setting: &'static str,
        /// Its value.
        value: f64,
        /// The values it may take.
        domain: &'static str,
    },
    /// A weighted mean of gradients over a step in which every rank's shard
    /// was empty: there is no sample to average over.
    #[error("{op} (reported by rank {rank}): every rank's shard was empty: a mean over 0 samples")]
    EmptyBatch {
        /// The operation.
        op: TensorOp,
        /// The reporting rank.
        rank: usize,
    },
    /// A backward pass ran after every handle to its group was dropped.
    #[error(
        "the backward pass of {op} on rank {rank}: its group was dropped before the backward pass"
    )]
    GroupDropped {
        /// The operation whose backward it is.
        op: TensorOp,
        /// The rank (in the group).
        rank: usize,
    },
    /// Ranks passed different reduction operators to one call.
    #[error(
        "{op} (reported by rank {rank}): rank {offender} reduces with {got} where rank {reference} reduces with {expected}"
    )]
    ReduceOpMismatch {
        /// The operation.
        op: TensorOp,
        /// The reporting rank.
        rank: usize,
        /// The rank that differs from the reference.
        offender: usize,
        /// The rank it is compared with.
        reference: usize,
        /// The reference rank's operator.
        expected: ruda_comm::ReduceOp,
        /// The offender's operator.
        got: ruda_comm::ReduceOp,
    },
    /// A reduction whose gradient ruda does not define (the product) was
    /// called on a tensor that autodiff tracks.
    #[error(
        "{op} (reported by rank {rank}): rank {offender}'s input is tracked by autodiff, and {reduce} has no gradient here: detach the input"
    )]
    NotDifferentiable {
        /// The operation.
        op: TensorOp,
        /// The reporting rank.
        rank: usize,
        /// A rank whose input is tracked.
        offender: usize,
        /// The reduction.
        reduce: ruda_comm::ReduceOp,
    },
    /// A [`crate::ddp::Overlap`] step that cannot go on.
    #[error("ddp::Overlap on rank {rank}: {problem}")]
    Overlap {
        /// The reporting rank.
        rank: usize,
        /// What went wrong.
        problem: OverlapProblem,
    },
    /// The two ranks of a [`crate::TensorExt::send`] / [`crate::recv`] pair
    /// disagree; reported on both of them.
    #[error(
        "{op} between ranks {sender} (sending) and {receiver} (receiving), reported by rank {rank}: {problem}"
    )]
    PointToPoint {
        /// The operation of the reporting rank (its backward pass when
        /// `backward`).
        op: TensorOp,
        /// Whether the pair is in a backward pass.
        backward: bool,
        /// The reporting rank.
        rank: usize,
        /// The sending rank.
        sender: usize,
        /// The receiving rank.
        receiver: usize,
        /// What differs.
        problem: PairProblem,
    },
}

/// How the two ranks of a send/receive pair disagree
/// ([`Error::PointToPoint`]).
///
/// # Example
/// ```
/// use burn_tensor::{Device, Tensor};
/// use ruda_tensor::prelude::*;
/// use ruda_tensor::PairProblem;
/// let out = LocalWorld::new(2).run_each(|c| {
///     let g = HostCollective::new(c);
///     if g.rank() == 0 {
///         Tensor::<2>::zeros([2, 2], &Device::flex()).send(&g, 1).map(|_| ())
///     } else {
///         recv::<1, _>(&g, 0, &Device::flex()).map(|_| ()) // expects 1 dimension
///     }
/// });
/// for r in out {
///     let e = r.unwrap_err().into_error().unwrap();
///     assert!(matches!(e, Error::PointToPoint { problem: PairProblem::Rank { sent: 2, expected: 1 }, .. }));
/// }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PairProblem {
    /// The peer's message is not a tensor layer send (another call, or a
    /// message of another version): `code` is what it carried.
    NotASend {
        /// The word found where the send's marker belongs.
        code: i64,
    },
    /// One rank is in a forward call, the other in a backward pass.
    Phase {
        /// Whether the sender is in a backward pass.
        sender_backward: bool,
    },
    /// The receiver asked for a tensor of another number of dimensions.
    Rank {
        /// The sender's number of dimensions.
        sent: usize,
        /// The receiver's.
        expected: usize,
    },
    /// The sender's tensor is tracked by autodiff, so its backward pass will
    /// wait for a gradient, but the receiver's device has no autodiff.
    Untracked,
    /// The sender's tensor has a dtype the tensor layer does not move, more
    /// dimensions than a message carries (16), or more bytes than memory
    /// can hold.
    Unsupported,
    /// The two backward passes reached this pair's messages in different
    /// orders: the receiver waits for the gradient of forward message
    /// `expected`, the sender sends that of `got`.
    Order {
        /// The forward message whose gradient the receiver expects.
        expected: u64,
        /// The one whose gradient the sender sends.
        got: u64,
    },
    /// In an [`crate::Exchange`], none of the two ranks' posted operations
    /// on this pair pair up (both only send to each other, both only
    /// receive, or forward messages meet backward ones), so each would
    /// wait for the other forever. `sender` is the pair's lower rank.
    Stuck {
        /// What the lower rank posted for the higher.
        lower: PostedCounts,
        /// What the higher rank posted for the lower.
        higher: PostedCounts,
    },
    /// Two [`crate::Exchange`]s with different tags met on this pair
    /// (`sender` is the lower rank).
    Tag {
        /// The lower rank's exchange tag.
        lower: u32,
        /// The higher rank's.
        higher: u32,
    },
    /// More operations posted for one peer than an exchange carries out
    /// in one pass (`limit`).
    TooMany {
        /// The largest count posted.
        posted: usize,
        /// The limit.
        limit: usize,
    },
}

/// What a rank has posted for one peer in an [`crate::Exchange`]
/// ([`PairProblem::Stuck`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PostedCounts {
    /// Sends of forward tensors.
    pub forward_sends: usize,
    /// Sends of gradients (backward passes).
    pub backward_sends: usize,
    /// Receives of forward tensors.
    pub forward_receives: usize,
    /// Receives of gradients.
    pub backward_receives: usize,
}

impl fmt::Display for PostedCounts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} forward and {} backward sends, {} forward and {} backward receives",
            self.forward_sends, self.backward_sends, self.forward_receives, self.backward_receives
        )
    }
}

/// Why a [`crate::ddp::Overlap`] step cannot go on ([`Error::Overlap`]).
///
/// # Example
/// ```
/// use burn_nn::{Linear, LinearConfig};
/// use burn_tensor::{Device, Tensor};
/// use ruda_tensor::prelude::*;
/// use ruda_tensor::OverlapProblem;
/// use ruda_tensor::ddp::{GradientReduction, Overlap};
///
/// let out = LocalWorld::new(2).run_each(|c| {
///     let world = HostCollective::new(c);
///     let device = Device::flex().autodiff();
///     let model: Linear = LinearConfig::new(2, 1).init(&device);
///     let mut overlap = Overlap::new(&world)?;
///     let step = overlap.attach(&model, GradientReduction::Sum)?;
///     // The loss of the model itself, not of `step.module()`: no gradient
///     // reaches the reduction.
///     let loss = model.forward(Tensor::<2>::ones([1, 2], &device)).sum();
///     step.backward(loss).map(|_| ())
/// });
/// for r in out {
///     let e = r.unwrap_err().into_error().unwrap();
///     assert!(matches!(e, Error::Overlap { problem: OverlapProblem::NoGradients, .. }));
/// }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OverlapProblem {
    /// An earlier step of this `Overlap` failed or was abandoned, so its
    /// communicator may be out of step with the other ranks': make a new
    /// one on every rank (after loading a checkpoint).
    Unusable,
    /// No gradient of the module reached the reduction on any rank: the
    /// loss was not computed from [`crate::ddp::Attached::module`] (or no
    /// trainable parameter takes part in it).
    NoGradients,
    /// The reducing thread could not be started.
    Thread {
        /// The operating system's reason.
        kind: std::io::ErrorKind,
    },
}

impl fmt::Display for OverlapProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OverlapProblem::Unusable => write!(
                f,
                "an earlier step failed or was abandoned; make a new Overlap on every rank"
            ),
            OverlapProblem::NoGradients => write!(
                f,
                "no gradient of the module reached the reduction on any rank: compute the loss from Attached::module()"
            ),
            OverlapProblem::Thread { kind } => {
                write!(f, "the reducing thread could not be started: {kind}")
            }
        }
    }
}

impl fmt::Display for PairProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PairProblem::NotASend { code } => write!(
                f,
                "the sender's message is not a tensor send (marker {code:#x}): the ranks are in different calls"
            ),
            PairProblem::Phase { sender_backward } => write!(
                f,
                "the sender is {} and the receiver is not",
                if *sender_backward {
                    "in a backward pass"
                } else {
                    "in a forward call"
                }
            ),
            PairProblem::Rank { sent, expected } => write!(
                f,
                "the sender's tensor has {sent} dimensions, the receiver expects {expected}"
            ),
            PairProblem::Untracked => f.write_str(
                "the sender's tensor is tracked by autodiff but the receiver's device has no autodiff, so no gradient could return",
            ),
            PairProblem::Unsupported => f.write_str(
                "the sender's tensor has a dtype the tensor layer does not move, more than 16 dimensions or more bytes than memory holds",
            ),
            PairProblem::Order { expected, got } => write!(
                f,
                "the backward passes reached this pair's messages in different orders (the receiver expects the gradient of message #{expected}, the sender sends that of #{got}): Burn runs backward steps by depth in the graph, so send and receive tensors at matching depths, or one message per pair and step"
            ),
            PairProblem::Stuck { lower, higher } => write!(
                f,
                "no posted operation pairs up, so neither rank can progress (the lower rank posted {lower}; the higher {higher}): post the matching operations before waiting"
            ),
            PairProblem::Tag { lower, higher } => write!(
                f,
                "the lower rank's exchange has tag {lower}, the higher rank's {higher}: exchanges that run at once between the same ranks need their own tags (Exchange::tagged)"
            ),
            PairProblem::TooMany { posted, limit } => write!(
                f,
                "{posted} operations posted for one peer, more than the {limit} an exchange carries out at once: wait more often"
            ),
        }
    }
}

/// How two replicas' modules (or their calls on them) differ
/// ([`Error::ModuleMismatch`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModuleProblem {
    /// Another number of float parameters.
    ParamCount {
        /// The reference rank's count.
        expected: usize,
        /// The offender's count.
        got: usize,
    },
    /// The parameter at `index` (in the module's visiting order) has
    /// another element count, dtype or shape.
    Param {
        /// The parameter's position in the module's order.
        index: usize,
        /// The reference rank's (element count, dtype).
        expected: (usize, Option<DType>),
        /// The offender's (element count, dtype).
        got: (usize, Option<DType>),
    },
    /// Another kind of gradient reduction (`sum`, `mean`, `weighted mean`).
    Reduction {
        /// The reference rank's.
        expected: &'static str,
        /// The offender's.
        got: &'static str,
    },
    /// Another ZeRO stage ([`crate::ddp::Sharded`]).
    Stage {
        /// The reference rank's.
        expected: &'static str,
        /// The offender's.
        got: &'static str,
    },
    /// Another way of keeping buffers equal ([`crate::ddp::BufferSync`]:
    /// `broadcast`, `mean`, `off`).
    BufferSync {
        /// The reference rank's.
        expected: &'static str,
        /// The offender's.
        got: &'static str,
    },
    /// The parameter at `index` holds other values (bit for bit) than the
    /// reference's ([`crate::ddp::check_replicas`]).
    Values {
        /// The parameter's position in the module's order.
        index: usize,
    },
    /// Another grouping of gradients into collectives
    /// ([`crate::ddp::Buckets`]).
    Buckets {
        /// The reference rank's (alone bytes, bucket bytes).
        expected: (usize, usize),
        /// The offender's.
        got: (usize, usize),
    },
    /// Another number of integer and boolean parameters
    /// ([`crate::ddp::check_replicas`]).
    OtherParamCount {
        /// The reference rank's count.
        expected: usize,
        /// The offender's count.
        got: usize,
    },
    /// The module has parameters of a kind the call does not handle
    /// (integer or boolean parameters in [`crate::ddp::broadcast_module`]).
    Unsupported {
        /// How many.
        count: usize,
        /// Which kind (`integer or boolean`).
        kind: &'static str,
    },
}

impl fmt::Display for ModuleProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ModuleProblem::ParamCount { expected, got } => {
                write!(
                    f,
                    "{got} float parameters where the reference has {expected}"
                )
            }
            ModuleProblem::Param {
                index,
                expected,
                got,
            } => write!(
                f,
                "parameter {index} has {} elements of {:?} where the reference's has {} of {:?}{}",
                got.0,
                got.1,
                expected.0,
                expected.1,
                if got == expected {
                    " (same size, another shape)"
                } else {
                    ""
                }
            ),
            ModuleProblem::Reduction { expected, got } => write!(
                f,
                "it reduces gradients by {got} where the reference reduces by {expected}"
            ),
            ModuleProblem::Buckets { expected, got } => write!(
                f,
                "it groups gradients as (alone from {} bytes, buckets of {} bytes) where the reference uses ({}, {})",
                got.0, got.1, expected.0, expected.1
            ),
            ModuleProblem::OtherParamCount { expected, got } => write!(
                f,
                "{got} integer and boolean parameters where the reference has {expected}"
            ),
            ModuleProblem::Stage { expected, got } => write!(
                f,
                "it steps with {got} where the reference steps with {expected}"
            ),
            ModuleProblem::BufferSync { expected, got } => write!(
                f,
                "it keeps buffers equal by {got} where the reference does by {expected}"
            ),
            ModuleProblem::Values { index } => write!(
                f,
                "parameter {index} holds other values than the reference's"
            ),
            ModuleProblem::Unsupported { count, kind } => write!(
                f,
                "it has {count} {kind} parameters, which this call does not handle"
            ),
        }
    }
}

/// What [`Error::Record`] says about the code a peer's record holds in
/// field `what`.
fn record_detail(what: &str, code: i64) -> String {
    match (what, TensorOp::from_code(code)) {
        ("operation", Some(other)) => format!("is from {other}, another call"),
        _ => format!("has an unknown {what} code {code} (another ruda version on that rank?)"),
    }
}

impl Error {
    /// The same error, with a communicator failure shown as a failure of
    /// the tensor call `role` (whose agreement or data movement it was a
    /// step of) rather than of the internal communicator call.
    pub(crate) fn in_call(self, role: crate::linear_op::Role) -> Self {
        self.in_named_call(&role.label())
    }

    /// [`Error::in_call`] with the call's name given.
    pub(crate) fn in_named_call(self, name: &str) -> Self {
        match self {
            Error::Comm(c) => Error::Comm(c.in_call(name)),
            other => other,
        }
    }
}

/// The name the seed's contract gives the tensor layer's error type.
pub type TensorCollectiveError = Error;
/// The name the primitives' error had; the same type.
pub type PrimitiveError = Error;

/// A shape with axes that may be hidden (`?`), for messages.
struct Dims<'a>(&'a [Option<usize>]);

impl fmt::Display for Dims<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[")?;
        for (i, d) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            match d {
                Some(d) => write!(f, "{d}")?,
                None => f.write_str("*")?,
            }
        }
        f.write_str("]")
    }
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
    /// Fewer than two axes, or a second axis (the channels) of another
    /// size than the module's.
    Channels {
        /// The module's number of channels.
        expected: usize,
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
            ShapeProblem::Channels { expected } => write!(
                f,
                "is not [batch, {expected} channels, ...] as the module's {expected} features need"
            ),
        }
    }
}

/// What is wrong with a rank-id lookup table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LookupProblem {
    /// The table is not one entry per rank of the group.
    Shape {
        /// Its shape's number of axes.
        ndim: usize,
        /// Its entries (along its only axis).
        len: usize,
        /// The group's size.
        size: usize,
    },
    /// This rank's entry is not a slice index of the group.
    Index {
        /// The entry.
        index: i64,
        /// The group's size (the number of slices).
        size: usize,
    },
}

impl fmt::Display for LookupProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LookupProblem::Shape { ndim, len, size } => write!(
                f,
                "the lookup table has {ndim} axes and {len} entries; it needs one axis of {size} (one per rank)"
            ),
            LookupProblem::Index { index, size } => write!(
                f,
                "this rank's lookup entry {index} is not a slice index below {size}"
            ),
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
        /// Their sum (saturated).
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
    /// The backward pass would receive other row counts than the forward sent.
    Reverse {
        /// The source rank.
        source: usize,
        /// Rows the forward pass sent it.
        expected: usize,
        /// Rows it sends back.
        got: usize,
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
            CountProblem::Reverse {
                source,
                expected,
                got,
            } => {
                write!(
                    f,
                    "the reverse exchange expects {expected} rows from rank {source}, which sends {got}"
                )
            }
        }
    }
}
