//! Seed 004's operations by name, over a replica group: `all_reduce`,
//! `all_gather(num_ranks)`, `reduce_scatter(num_ranks)`, `all_to_all`, and
//! the rank-id slice helpers `rank_slice` / `rank_slice_by`.
//!
//! A replica group is the sub-group a rank gets from
//! [`Group::replica_group`] (the XLA/NKI convention: `[[0, 1]]`, a rank's
//! position in its listed group is its rank id). Every function takes that
//! group and runs over any [`Group`] implementation — device-resident
//! ([`crate::DeviceGroup`], as seed 004's HBM kernels) or host-staged.
//!
//! Shape rules (seed 004, dimension 0 is the one that moves; `n` the
//! group's size, every rank's input of the same shape):
//!
//! | operation | input | output |
//! |---|---|---|
//! | [`all_reduce`] | `[d0, …]` | `[d0, …]`, the sum over the group |
//! | [`all_gather`]`(num_ranks = n)` | `[d0, …]` | `[n·d0, …]`, rank order |
//! | [`reduce_scatter`]`(num_ranks = n)` | `[n·c, …]` | `[c, …]`: chunk `rank` of the sum |
//! | [`all_to_all`] | `[n·c, …]` | `[n·c, …]`: block `i` goes to rank `i`, received blocks in source order |
//! | [`rank_slice`] | `[n·c, …]` | `[c, …]`: chunk `rank` |
//! | [`rank_slice_by`]`(lookup)` | `[n·c, …]`, `lookup: [n]` | `[c, …]`: chunk `lookup[rank]` |
//!
//! Zero rows are allowed. Every violation is a typed [`Error`]: for the
//! collectives the same on every rank of the group before any data moves
//! ([`Error::NumRanks`], [`Error::BadShape`] with
//! [`crate::ShapeProblem::NotDivisible`], [`Error::ShapeMismatch`],
//! [`Error::DTypeMismatch`], …); the slice helpers communicate nothing and
//! report on the calling rank. All are differentiable on autodiff devices:
//! the collectives are [`LinearOp`]s (adjoints: `all_reduce` ↔ itself,
//! `all_gather` ↔ `reduce_scatter`, `all_to_all` ↔ itself), the slices are
//! Burn's own `narrow`/`select`.
//!
//! # Example: the seed's own
//! ```
//! use burn_tensor::{Device, Tensor};
//! use ruda_comm::ReplicaGroups;
//! use ruda_tensor::{DeviceWorld, Group, replica};
//!
//! let groups = ReplicaGroups::new([[0, 1]]).unwrap(); // replica_group=[[0,1]]
//! let out = DeviceWorld::shared(2, Device::flex()).run(|world, device| {
//!     let group = world.replica_group(&groups)?.expect("both ranks are listed");
//!     let x = Tensor::<2>::from_floats([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], device);
//!     let y = replica::all_reduce(x, &group)?;
//!     Ok::<_, ruda_tensor::Error>(y.into_data().try_to_vec::<f32>().unwrap())
//! }).unwrap();
//! assert_eq!(out, vec![vec![2.0, 4.0, 6.0, 8.0, 10.0, 12.0]; 2]);
//! ```

use alloc::vec;

use burn_backend::tensor::FloatTensor;
use burn_backend::{Backend, DType};

use crate::agreement::{self, Facts, Problem};
use crate::error::{Error, ShapeProblem, TensorOp};
use crate::group::Group;
use crate::ops::{AllReduce, LinearOp, Role};

/// The agreement of seed 004's collectives: one full shape on every rank
/// (no free axis), `tracked` alike, plus the rank's own problems.
fn agree_seed<G: Group>(
    g: &G,
    role: Role,
    shape: &[usize],
    dtype: DType,
    tracked: bool,
    problem: Option<Problem>,
) -> Result<(), Error> {
    let mut f = Facts::new(role.op, dtype, shape);
    f.backward = role.backward;
    f.tracked = Some(tracked);
    f.problem = problem;
    agreement::agree(g, f, |_, _, _| unreachable!("no parameter"))?;
    Ok(())
}

/// What is wrong with this rank's arguments to a seed collective that
/// splits (`parts = Some(p)`: dimension 0 must split into `p` chunks) or
/// declares `num_ranks`.
fn seed_problem(
    shape: &[usize],
    dtype: DType,
    size: usize,
    num_ranks: Option<usize>,
    split: bool,
    sum: bool,
) -> Option<Problem> {
    if shape.is_empty() {
        return Some(Problem::Shape(ShapeProblem::NoLeadingAxis));
    }
    if let Some(num_ranks) = num_ranks
        && num_ranks != size
    {
        return Some(Problem::NumRanks { num_ranks, size });
    }
    if split && !shape[0].is_multiple_of(size) {
        return Some(Problem::Shape(ShapeProblem::NotDivisible { ranks: size }));
    }
    let ok = if sum {
        agreement::summable(dtype)
    } else {
        agreement::movable(dtype)
    };
    (!ok).then_some(Problem::UnsupportedDType)
}

/// Seed 004's `all_gather(num_ranks)`: every rank's `[d0, …]` (one shape
/// everywhere) concatenated along dimension 0 in rank order into
/// `[num_ranks·d0, …]`; `num_ranks` must be the group's size. The adjoint
/// is [`ReplicaReduceScatter`].
///
/// # Example
/// See [`all_gather`].
#[derive(Clone, Copy, Debug)]
pub struct ReplicaAllGather {
    role: Role,
    num_ranks: usize,
}

impl ReplicaAllGather {
    /// The operation for `num_ranks` ranks.
    pub fn new(num_ranks: usize) -> Self {
        ReplicaAllGather {
            role: Role::forward(TensorOp::ReplicaAllGather),
            num_ranks,
        }
    }
}

impl LinearOp for ReplicaAllGather {
    /// Rows per rank.
    type Plan = usize;
    type Adjoint = ReplicaReduceScatter;

    fn role(&self) -> Role {
        self.role
    }

    fn plan<G: Group>(
        &self,
        g: &G,
        shape: &[usize],
        dtype: DType,
        tracked: bool,
    ) -> Result<usize, Error> {
        let problem = seed_problem(shape, dtype, g.size(), Some(self.num_ranks), false, false);
        agree_seed(g, self.role, shape, dtype, tracked, problem)?;
        Ok(shape[0])
    }

    fn forward<B: Backend, G: Group>(
        &self,
        g: &G,
        rows: &usize,
        x: FloatTensor<B>,
    ) -> Result<FloatTensor<B>, Error> {
        if g.size() == 1 {
            return Ok(x);
        }
        g.gather_rows::<B>(self.role.op, x, &vec![*rows; g.size()])
    }

    fn adjoint(&self, _: &usize) -> ReplicaReduceScatter {
        ReplicaReduceScatter {
            role: self.role.adjoint(),
            num_ranks: self.num_ranks,
        }
    }
}

/// Seed 004's `reduce_scatter(num_ranks)`: the sum over the group of every
/// rank's `[num_ranks·c, …]`, split along dimension 0 into `num_ranks`
/// chunks, rank `r` keeping chunk `r`; `num_ranks` must be the group's
/// size. The adjoint is [`ReplicaAllGather`].
///
/// # Example
/// See [`reduce_scatter`].
#[derive(Clone, Copy, Debug)]
pub struct ReplicaReduceScatter {
    role: Role,
    num_ranks: usize,
}

impl ReplicaReduceScatter {
    /// The operation for `num_ranks` ranks.
    pub fn new(num_ranks: usize) -> Self {
        ReplicaReduceScatter {
            role: Role::forward(TensorOp::ReplicaReduceScatter),
            num_ranks,
        }
    }
}

impl LinearOp for ReplicaReduceScatter {
    /// Rows per chunk.
    type Plan = usize;
    type Adjoint = ReplicaAllGather;

    fn role(&self) -> Role {
        self.role
    }

    fn plan<G: Group>(
        &self,
        g: &G,
        shape: &[usize],
        dtype: DType,
        tracked: bool,
    ) -> Result<usize, Error> {
        let n = g.size();
        let problem = seed_problem(shape, dtype, n, Some(self.num_ranks), true, true);
        agree_seed(g, self.role, shape, dtype, tracked, problem)?;
        Ok(shape[0] / n)
    }

    fn forward<B: Backend, G: Group>(
        &self,
        g: &G,
        chunk: &usize,
        x: FloatTensor<B>,
    ) -> Result<FloatTensor<B>, Error> {
        if g.size() == 1 {
            return Ok(x);
        }
        g.reduce_scatter_rows::<B>(self.role.op, x, &vec![*chunk; g.size()])
    }

    fn adjoint(&self, _: &usize) -> ReplicaAllGather {
        ReplicaAllGather {
            role: self.role.adjoint(),
            num_ranks: self.num_ranks,
        }
    }
}

/// Seed 004's `all_to_all`: every rank's `[n·c, …]` split along dimension
/// 0 into `n` blocks; block `i` goes to the group's rank `i`, and each rank
/// receives one block from every rank, in source order. Its own adjoint.
///
/// # Example
/// See [`all_to_all`].
#[derive(Clone, Copy, Debug)]
pub struct ReplicaAllToAll {
    role: Role,
}

impl ReplicaAllToAll {
    /// The operation.
    pub fn new() -> Self {
        ReplicaAllToAll {
            role: Role::forward(TensorOp::ReplicaAllToAll),
        }
    }
}

impl Default for ReplicaAllToAll {
    fn default() -> Self {
        Self::new()
    }
}

impl LinearOp for ReplicaAllToAll {
    /// Rows per block.
    type Plan = usize;
    type Adjoint = ReplicaAllToAll;

    fn role(&self) -> Role {
        self.role
    }

    fn plan<G: Group>(
        &self,
        g: &G,
        shape: &[usize],
        dtype: DType,
        tracked: bool,
    ) -> Result<usize, Error> {
        let n = g.size();
        let problem = seed_problem(shape, dtype, n, None, true, false);
        agree_seed(g, self.role, shape, dtype, tracked, problem)?;
        Ok(shape[0] / n)
    }

    fn forward<B: Backend, G: Group>(
        &self,
        g: &G,
        block: &usize,
        x: FloatTensor<B>,
    ) -> Result<FloatTensor<B>, Error> {
        if g.size() == 1 {
            return Ok(x);
        }
        let counts = vec![*block; g.size()];
        g.exchange_rows::<B>(self.role.op, x, &counts, &counts)
    }

    fn adjoint(&self, _: &usize) -> ReplicaAllToAll {
        ReplicaAllToAll {
            role: self.role.adjoint(),
        }
    }
}

/// Seed 004's `all_reduce` as a [`LinearOp`]: the sum over the group (one
/// shape everywhere), in rank order; its own adjoint.
pub fn all_reduce_op() -> AllReduce {
    AllReduce::with_role(Role::forward(TensorOp::ReplicaAllReduce))
}

#[cfg(feature = "tensor-api")]
mod tensor_fns;
#[cfg(feature = "tensor-api")]
pub use tensor_fns::{
    all_gather, all_reduce, all_to_all, rank_slice, rank_slice_by, reduce_scatter,
};
