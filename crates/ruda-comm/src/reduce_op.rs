//! The reduction operators of `all_reduce` and `reduce_scatter`.

use core::fmt;

/// How corresponding elements of all ranks combine.
///
/// `Mean` is the sum divided by the group size, computed in the
/// accumulation type; it is defined for floating types only. (It was
/// called `Avg`; the data-parallel layer's `GradientReduction::Mean` and
/// `BufferSync::Mean` use the same name.)
///
/// # Example
/// ```
/// use ruda_comm::{Communicator, LocalWorld, ReduceOp};
/// let out = LocalWorld::new(2).run(|comm| {
///     let mut v = [comm.rank() as f32 + 1.0];
///     comm.all_reduce(&mut v, ReduceOp::Max)?;
///     Ok::<_, ruda_comm::CommError>(v[0])
/// }).unwrap();
/// assert_eq!(out, vec![2.0, 2.0]);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    /// Sum (wrapping for integers).
    Sum,
    /// Product (wrapping for integers).
    Prod,
    /// Minimum.
    Min,
    /// Maximum.
    Max,
    /// Arithmetic mean (floating types only): MPI's and NCCL's average.
    Mean,
}

impl ReduceOp {
    /// All operators, for tests and benchmarks.
    pub const ALL: [ReduceOp; 5] = [
        ReduceOp::Sum,
        ReduceOp::Prod,
        ReduceOp::Min,
        ReduceOp::Max,
        ReduceOp::Mean,
    ];

    /// Lower-case name (`"sum"`).
    pub const fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Prod => "prod",
            ReduceOp::Min => "min",
            ReduceOp::Max => "max",
            ReduceOp::Mean => "mean",
        }
    }
}

impl fmt::Display for ReduceOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
