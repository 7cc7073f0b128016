//! Gathers along a dimension and their adjoints: `all_gather` /
//! `gather_from_copy_to` (adjoint: reduce-scatter), `gather_from` (adjoint:
//! keep this rank's chunk), `reduce_scatter` / `reduce_from_scatter_to`
//! (adjoint: all-gather) and `scatter_to` (keep this rank's chunk; adjoint:
//! all-gather). Per-rank sizes are discovered by the agreement and travel
//! from the forward to the backward pass, so any consistent uneven layout
//! works both ways.

use alloc::vec::Vec;

use burn_backend::tensor::FloatTensor;
use burn_backend::{Backend, DType};

use super::{LinearOp, Role, balanced, front, resolve};
use crate::agreement::{self, Facts, Problem};
use crate::error::{Error, ShapeProblem, TensorOp};
use crate::group::Group;
use crate::layout::{narrow, starts};
use crate::shape_hash;

/// What the backward pass of a gather does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum GatherKind {
    /// Varying → varying: the gradient is reduce-scattered.
    CopyTo,
    /// Varying → replicated: each rank keeps its chunk of the gradient.
    Replicated,
}

/// Concatenate every rank's tensor along a dimension in rank order; every
/// other axis must agree. Each rank may hold a different size along the
/// dimension (discovered; a declared list is checked on every rank).
#[derive(Clone, Debug)]
pub struct Gather {
    role: Role,
    dim: isize,
    /// The contract's form: equal shards, a leading axis, no zero trailing axis.
    equal: bool,
    declared: Option<Vec<usize>>,
    kind: GatherKind,
}

impl Gather {
    /// `all_gather` along `dim`; the adjoint reduce-scatters.
    pub fn all_gather(dim: isize) -> Self {
        Gather {
            role: Role::forward(TensorOp::AllGather),
            dim,
            equal: false,
            declared: None,
            kind: GatherKind::CopyTo,
        }
    }

    /// The contract's `all_gather_float`: equal leading-axis shards.
    pub fn contract() -> Self {
        Gather {
            role: Role::forward(TensorOp::AllGatherFloat),
            dim: 0,
            equal: true,
            declared: None,
            kind: GatherKind::CopyTo,
        }
    }

    /// `gather_from_copy_to` along `dim` (the adjoint reduce-scatters).
    pub fn gather_from_copy_to(dim: isize, declared: Option<Vec<usize>>) -> Self {
        Gather {
            role: Role::forward(TensorOp::GatherFromCopyTo),
            dim,
            equal: false,
            declared,
            kind: GatherKind::CopyTo,
        }
    }

    /// `gather_from` along `dim` (the adjoint keeps this rank's chunk).
    pub fn gather_from(dim: isize, declared: Option<Vec<usize>>) -> Self {
        Gather {
            role: Role::forward(TensorOp::GatherFrom),
            dim,
            equal: false,
            declared,
            kind: GatherKind::Replicated,
        }
    }
}

/// The dimension and every rank's size along it.
#[derive(Clone, Debug)]
pub struct ChunkPlan {
    /// The dimension, resolved.
    pub dim: usize,
    /// Every rank's size along it.
    pub sizes: Vec<usize>,
}

impl LinearOp for Gather {
    type Plan = ChunkPlan;
    type Adjoint = GatherAdjoint;

    fn role(&self) -> Role {
        self.role
    }

    fn plan<G: Group>(
        &self,
        g: &G,
        shape: &[usize],
        dtype: DType,
        tracked: bool,
    ) -> Result<ChunkPlan, Error> {
        let (me, op) = (g.rank(), self.role.op);
        let d = resolve(self.dim, shape.len());
        let problem = d.err().or_else(|| {
            if self.equal && shape[1..].contains(&0) {
                Some(Problem::Shape(ShapeProblem::ZeroTrailingAxis))
            } else {
                (!agreement::movable(dtype)).then_some(Problem::UnsupportedDType)
            }
        });
        let problem = if self.equal && shape.is_empty() {
            Some(Problem::Shape(ShapeProblem::NoLeadingAxis))
        } else {
            problem
        };
        let d = d.unwrap_or(0);
        let words = match &self.declared {
            Some(v) => [shape_hash::declared_sizes(v), v.len() as i64],
            None => [0, 0],
        };
        let mut f = Facts::new(op, dtype, shape);
        f.backward = self.role.backward;
        f.problem = problem;
        f.free_axis = (!self.equal).then_some(d);
        f.tracked = (self.kind == GatherKind::CopyTo).then_some(tracked);
        f.words = &words;
        let agreed = agreement::agree(g, f, |_, _, _| unreachable!("no parameter"))?;
        let sizes = agreed.sizes;
        let want = shape_hash::declared_sizes(&sizes);
        for (r, w) in agreed.words.iter().enumerate() {
            if w[0] != 0 && w[0] != want {
                return Err(Error::DeclaredSizes {
                    op,
                    rank: me,
                    offender: r,
                    declared: (r == me).then(|| self.declared.clone()).flatten(),
                    actual: sizes,
                });
            }
        }
        Ok(ChunkPlan { dim: d, sizes })
    }

    fn forward<B: Backend, G: Group>(
        &self,
        g: &G,
        plan: &ChunkPlan,
        x: FloatTensor<B>,
    ) -> Result<FloatTensor<B>, Error> {
        if g.size() == 1 {
            return Ok(x);
        }
        let out = g.gather_rows::<B>(self.role.op, front::<B>(x, plan.dim), &plan.sizes)?;
        Ok(front::<B>(out, plan.dim))
    }

    fn adjoint(&self, plan: &ChunkPlan) -> GatherAdjoint {
        let dim = plan.dim as isize;
        let sizes = Some(plan.sizes.clone());
        match self.kind {
            GatherKind::CopyTo => GatherAdjoint::ReduceScatter(ReduceScatter {
                role: self.role.adjoint(),
                dim,
                sizes,
                contract: false,
            }),
            GatherKind::Replicated => GatherAdjoint::Keep(KeepChunk {
                role: self.role.adjoint(),
                dim,
                sizes,
            }),
        }
    }
}

/// The adjoint of a [`Gather`]: a reduce-scatter (of a varying gather) or
/// keeping this rank's chunk (of `gather_from`).
#[derive(Clone, Debug)]
pub enum GatherAdjoint {
    /// Reduce-scatter the gradient.
    ReduceScatter(ReduceScatter),
    /// Keep this rank's chunk of the gradient.
    Keep(KeepChunk),
}

impl LinearOp for GatherAdjoint {
    type Plan = ChunkPlan;
    type Adjoint = Gather;

    fn role(&self) -> Role {
        match self {
            GatherAdjoint::ReduceScatter(o) => o.role(),
            GatherAdjoint::Keep(o) => o.role(),
        }
    }

    fn plan<G: Group>(
        &self,
        g: &G,
        shape: &[usize],
        dtype: DType,
        tracked: bool,
    ) -> Result<ChunkPlan, Error> {
        match self {
            GatherAdjoint::ReduceScatter(o) => o.plan(g, shape, dtype, tracked),
            GatherAdjoint::Keep(o) => o.plan(g, shape, dtype, tracked),
        }
    }

    fn forward<B: Backend, G: Group>(
        &self,
        g: &G,
        plan: &ChunkPlan,
        x: FloatTensor<B>,
    ) -> Result<FloatTensor<B>, Error> {
        match self {
            GatherAdjoint::ReduceScatter(o) => o.forward::<B, G>(g, plan, x),
            GatherAdjoint::Keep(o) => o.forward::<B, G>(g, plan, x),
        }
    }

    fn adjoint(&self, plan: &ChunkPlan) -> Gather {
        match self {
            GatherAdjoint::ReduceScatter(o) => o.adjoint(plan),
            GatherAdjoint::Keep(o) => o.adjoint(plan),
        }
    }
}

/// Sum over the group and keep this rank's chunk along a dimension
/// (balanced chunks unless sizes are given); every rank's tensor has the
/// same shape.
#[derive(Clone, Debug)]
pub struct ReduceScatter {
    role: Role,
    dim: isize,
    sizes: Option<Vec<usize>>,
    /// The contract's form: a leading axis that splits into equal shards.
    contract: bool,
}

impl ReduceScatter {
    /// `reduce_scatter` along `dim` into balanced chunks.
    pub fn new(dim: isize) -> Self {
        ReduceScatter {
            role: Role::forward(TensorOp::ReduceScatter),
            dim,
            sizes: None,
            contract: false,
        }
    }

    /// `reduce_from_scatter_to` along `dim` into balanced chunks.
    pub fn reduce_from_scatter_to(dim: isize) -> Self {
        ReduceScatter {
            role: Role::forward(TensorOp::ReduceFromScatterTo),
            ..Self::new(dim)
        }
    }

    /// The contract's `reduce_scatter_sum`: equal leading-axis shards.
    pub fn contract() -> Self {
        ReduceScatter {
            role: Role::forward(TensorOp::ReduceScatterSum),
            dim: 0,
            sizes: None,
            contract: true,
        }
    }
}

impl LinearOp for ReduceScatter {
    type Plan = ChunkPlan;
    type Adjoint = Gather;

    fn role(&self) -> Role {
        self.role
    }

    fn plan<G: Group>(
        &self,
        g: &G,
        shape: &[usize],
        dtype: DType,
        tracked: bool,
    ) -> Result<ChunkPlan, Error> {
        let n = g.size();
        let d = resolve(self.dim, shape.len());
        let len = d.as_ref().map_or(0, |&d| shape[d]);
        let sizes = match &self.sizes {
            Some(s) if s.iter().sum::<usize>() == len && s.len() == n => Ok(s.clone()),
            Some(s) => Err(Problem::Counts(crate::error::CountProblem::Sum {
                sum: s.iter().fold(0usize, |a, &b| a.saturating_add(b)),
                rows: len,
            })),
            None => balanced(len, n),
        };
        let problem = if self.contract && shape.is_empty() {
            Some(Problem::Shape(ShapeProblem::NoLeadingAxis))
        } else if self.contract && shape[1..].contains(&0) {
            Some(Problem::Shape(ShapeProblem::ZeroTrailingAxis))
        } else if self.contract && !len.is_multiple_of(n) {
            Some(Problem::Shape(ShapeProblem::NotDivisible { ranks: n }))
        } else {
            d.as_ref()
                .err()
                .copied()
                .or_else(|| sizes.as_ref().err().copied())
                .or_else(|| (!agreement::summable(dtype)).then_some(Problem::UnsupportedDType))
        };
        let mut f = Facts::new(self.role.op, dtype, shape);
        f.backward = self.role.backward;
        f.problem = problem;
        f.tracked = Some(tracked);
        agreement::agree(g, f, |_, _, _| unreachable!("no parameter"))?;
        Ok(ChunkPlan {
            dim: d.unwrap_or(0),
            sizes: sizes.unwrap_or_default(),
        })
    }

    fn forward<B: Backend, G: Group>(
        &self,
        g: &G,
        plan: &ChunkPlan,
        x: FloatTensor<B>,
    ) -> Result<FloatTensor<B>, Error> {
        if g.size() == 1 {
            return Ok(x);
        }
        let out = g.reduce_scatter_rows::<B>(self.role.op, front::<B>(x, plan.dim), &plan.sizes)?;
        Ok(front::<B>(out, plan.dim))
    }

    fn adjoint(&self, plan: &ChunkPlan) -> Gather {
        Gather {
            role: self.role.adjoint(),
            dim: plan.dim as isize,
            equal: false,
            declared: Some(plan.sizes.clone()),
            kind: GatherKind::CopyTo,
        }
    }
}

/// Keep this rank's chunk of a replicated tensor along a dimension
/// (`scatter_to`; balanced chunks unless sizes are given). Its forward
/// moves and exchanges nothing; the adjoint all-gathers.
#[derive(Clone, Debug)]
pub struct KeepChunk {
    role: Role,
    dim: isize,
    sizes: Option<Vec<usize>>,
}

impl KeepChunk {
    /// `scatter_to` along `dim`, balanced chunks.
    pub fn scatter_to(dim: isize) -> Self {
        KeepChunk {
            role: Role::forward(TensorOp::ScatterTo),
            dim,
            sizes: None,
        }
    }
}

impl LinearOp for KeepChunk {
    type Plan = ChunkPlan;
    type Adjoint = Gather;

    fn role(&self) -> Role {
        self.role
    }

    fn plan<G: Group>(
        &self,
        g: &G,
        shape: &[usize],
        _: DType,
        _: bool,
    ) -> Result<ChunkPlan, Error> {
        let (me, op) = (g.rank(), self.role.op);
        let layout = |e| Error::Layout {
            op,
            rank: me,
            error: e,
        };
        let d = crate::layout::normalize_dim(self.dim, shape.len()).map_err(layout)?;
        let sizes = match &self.sizes {
            Some(s) => s.clone(),
            None => crate::layout::compute_split_shapes(shape[d], g.size()).map_err(layout)?,
        };
        Ok(ChunkPlan { dim: d, sizes })
    }

    fn forward<B: Backend, G: Group>(
        &self,
        g: &G,
        plan: &ChunkPlan,
        x: FloatTensor<B>,
    ) -> Result<FloatTensor<B>, Error> {
        let me = g.rank();
        Ok(narrow::<B>(
            x,
            plan.dim,
            starts(&plan.sizes)[me],
            plan.sizes[me],
        ))
    }

    fn adjoint(&self, plan: &ChunkPlan) -> Gather {
        Gather {
            role: self.role.adjoint(),
            dim: plan.dim as isize,
            equal: false,
            declared: Some(plan.sizes.clone()),
            kind: GatherKind::Replicated,
        }
    }
}
