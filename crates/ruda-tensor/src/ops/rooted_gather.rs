//! Gather to a root and scatter from a root along a dimension, each the
//! other's adjoint. Only the data each rank needs moves (point to point
//! between the root and every other rank), so a gather's cost is its
//! volume at the root, not an all-gather's.

use alloc::vec::Vec;

use burn_backend::tensor::FloatTensor;
use burn_backend::{Backend, DType, FloatDType, Shape, TensorMetadata};

use super::{LinearOp, Role, resolve};
use crate::agreement::{self, Facts, Problem};
use crate::error::{Error, TensorOp};
use crate::group::Group;
use crate::layout::{narrow, starts};

/// What the ranks of a rooted gather or scatter agreed on.
#[derive(Clone, Debug)]
pub struct RootedPlan {
    /// The dimension, resolved.
    pub dim: usize,
    /// Every rank's size along it (of the input).
    pub sizes: Vec<usize>,
    /// The shape of this rank's input.
    pub shape: Vec<usize>,
}

/// Agree on the root, the dimension, every other axis and the dtype; the
/// sizes along `dim` may differ.
fn agree_rooted_rows<G: Group>(
    g: &G,
    role: Role,
    root: usize,
    dim: isize,
    shape: &[usize],
    dtype: DType,
    tracked: bool,
) -> Result<RootedPlan, Error> {
    let n = g.size();
    let d = resolve(dim, shape.len());
    let problem = if root >= n {
        Some(Problem::Root { root })
    } else {
        d.err()
            .or_else(|| (!agreement::movable(dtype)).then_some(Problem::UnsupportedDType))
    };
    let d = d.unwrap_or(0);
    let mut f = Facts::new(role.op, dtype, shape);
    f.backward = role.backward;
    f.problem = problem;
    f.free_axis = Some(d);
    f.tracked = Some(tracked);
    f.param = root as i64;
    let me = g.rank();
    let agreed = agreement::agree(g, f, |offender, theirs, rank0s| Error::InvalidRoot {
        op: role.op,
        rank: me,
        offender,
        root: theirs.max(0) as usize,
        expected: rank0s.max(0) as usize,
        size: n,
    })?;
    Ok(RootedPlan {
        dim: d,
        sizes: agreed.sizes,
        shape: shape.to_vec(),
    })
}

/// `shape` with `len` along `dim`.
fn with_len(shape: &[usize], dim: usize, len: usize) -> Vec<usize> {
    let mut s = shape.to_vec();
    s[dim] = len;
    s
}

fn zeros<B: Backend>(like: &FloatTensor<B>, shape: Vec<usize>) -> FloatTensor<B> {
    B::float_zeros(
        Shape::from(shape),
        &like.device(),
        FloatDType::from(like.dtype()),
    )
}

/// The root gets every rank's tensor concatenated along a dimension in
/// rank order (sizes along it may differ); every other rank gets its
/// input's shape with that dimension `keep` long, zeros (0 for the
/// `gather_to_root` call; the adjoint of a scatter keeps its input's size).
#[derive(Clone, Debug)]
pub struct GatherToRoot {
    role: Role,
    root: usize,
    dim: isize,
    /// On non-roots, the output's size along `dim` (per rank).
    keep: Option<Vec<usize>>,
}

impl GatherToRoot {
    /// Gather along `dim` to `root`.
    pub fn new(root: usize, dim: isize) -> Self {
        GatherToRoot {
            role: Role::forward(TensorOp::GatherToRoot),
            root,
            dim,
            keep: None,
        }
    }
}

impl LinearOp for GatherToRoot {
    type Plan = RootedPlan;
    type Adjoint = ScatterFromRoot;

    fn role(&self) -> Role {
        self.role
    }

    fn plan<G: Group>(
        &self,
        g: &G,
        shape: &[usize],
        dtype: DType,
        tracked: bool,
    ) -> Result<RootedPlan, Error> {
        agree_rooted_rows(g, self.role, self.root, self.dim, shape, dtype, tracked)
    }

    fn forward<B: Backend, G: Group>(
        &self,
        g: &G,
        plan: &RootedPlan,
        x: FloatTensor<B>,
    ) -> Result<FloatTensor<B>, Error> {
        let (me, op, d) = (g.rank(), self.role.op, plan.dim);
        if me != self.root {
            let keep = self.keep.as_ref().map_or(0, |k| k[me]);
            let out = zeros::<B>(&x, with_len(&plan.shape, d, keep));
            g.send_float::<B>(op, x, self.root)?;
            return Ok(out);
        }
        let dtype = x.dtype();
        let device = x.device();
        let mut parts = Vec::with_capacity(g.size());
        let mut own = Some(x);
        for (r, &len) in plan.sizes.iter().enumerate() {
            if r == me {
                parts.push(own.take().expect("this rank's part is taken once"));
            } else {
                let shape = with_len(&plan.shape, d, len);
                parts.push(g.recv_float::<B>(op, &shape, dtype, &device, r)?);
            }
        }
        Ok(if parts.len() == 1 {
            parts.pop().expect("one part")
        } else {
            B::float_cat(parts, d)
        })
    }

    fn adjoint(&self, plan: &RootedPlan) -> ScatterFromRoot {
        ScatterFromRoot {
            role: self.role.adjoint(),
            root: self.root,
            dim: plan.dim as isize,
            chunks: Some(plan.sizes.clone()),
        }
    }
}

/// The root's tensor split along a dimension, chunk `r` to rank `r`
/// (balanced chunks, or the given ones); the other ranks' inputs only give
/// the shape of every other axis. The adjoint gathers the chunks' gradients
/// to the root (zeros for the other ranks' inputs).
#[derive(Clone, Debug)]
pub struct ScatterFromRoot {
    role: Role,
    root: usize,
    dim: isize,
    chunks: Option<Vec<usize>>,
}

impl ScatterFromRoot {
    /// Scatter `root`'s tensor along `dim` in balanced chunks (the first
    /// `len % ranks` ranks one longer).
    pub fn new(root: usize, dim: isize) -> Self {
        ScatterFromRoot {
            role: Role::forward(TensorOp::ScatterFromRoot),
            root,
            dim,
            chunks: None,
        }
    }
}

/// A scatter's plan: the agreement and the chunk sizes.
#[derive(Clone, Debug)]
pub struct ScatterPlan {
    /// What the ranks agreed on (every rank's input size along `dim`).
    pub rooted: RootedPlan,
    /// Each rank's chunk of the root's tensor.
    pub chunks: Vec<usize>,
}

impl LinearOp for ScatterFromRoot {
    type Plan = ScatterPlan;
    type Adjoint = GatherToRoot;

    fn role(&self) -> Role {
        self.role
    }

    fn plan<G: Group>(
        &self,
        g: &G,
        shape: &[usize],
        dtype: DType,
        tracked: bool,
    ) -> Result<ScatterPlan, Error> {
        let rooted = agree_rooted_rows(g, self.role, self.root, self.dim, shape, dtype, tracked)?;
        let len = rooted.sizes[self.root];
        let chunks = match &self.chunks {
            Some(c) => c.clone(),
            // Balanced: never fails for n ≥ 1 (chunks may be empty).
            None => {
                let n = g.size();
                (0..n).map(|r| len / n + usize::from(r < len % n)).collect()
            }
        };
        let total = chunks.iter().try_fold(0usize, |a, &c| a.checked_add(c));
        if total != Some(len) || chunks.len() != g.size() {
            return Err(Error::Counts {
                op: self.role.op,
                rank: g.rank(),
                offender: self.root,
                problem: crate::error::CountProblem::Sum {
                    sum: total.unwrap_or(usize::MAX),
                    rows: len,
                },
            });
        }
        Ok(ScatterPlan { rooted, chunks })
    }

    fn forward<B: Backend, G: Group>(
        &self,
        g: &G,
        plan: &ScatterPlan,
        x: FloatTensor<B>,
    ) -> Result<FloatTensor<B>, Error> {
        let (me, op, d) = (g.rank(), self.role.op, plan.rooted.dim);
        let shape = &plan.rooted.shape;
        if me != self.root {
            let chunk = with_len(shape, d, plan.chunks[me]);
            return g.recv_float::<B>(op, &chunk, x.dtype(), &x.device(), self.root);
        }
        let at = starts(&plan.chunks);
        let mut own = None;
        for (r, (&start, &len)) in at.iter().zip(&plan.chunks).enumerate() {
            let part = narrow::<B>(x.clone(), d, start, len);
            if r == me {
                own = Some(part);
            } else {
                g.send_float::<B>(op, part, r)?;
            }
        }
        Ok(own.expect("the root keeps its own chunk"))
    }

    fn adjoint(&self, plan: &ScatterPlan) -> GatherToRoot {
        GatherToRoot {
            role: self.role.adjoint(),
            root: self.root,
            dim: plan.rooted.dim as isize,
            keep: Some(plan.rooted.sizes.clone()),
        }
    }
}
