//! Rooted operations: `broadcast` and its adjoint, the sum to the root.

use burn_backend::tensor::FloatTensor;
use burn_backend::{Backend, DType, TensorMetadata};

use super::{LinearOp, Role};
use crate::agreement::{self, Facts, Problem};
use crate::error::{Error, TensorOp};
use crate::group::Group;

/// Agreement for a rooted call: the same shape, root and a fitting dtype.
fn agree_rooted<G: Group>(
    g: &G,
    role: Role,
    root: usize,
    shape: &[usize],
    dtype: DType,
    tracked: bool,
    sum: bool,
) -> Result<(), Error> {
    let n = g.size();
    let mut f = Facts::new(role.op, dtype, shape);
    f.backward = role.backward;
    f.tracked = Some(tracked);
    f.param = root as i64;
    let dtype_ok = if sum {
        agreement::summable(dtype)
    } else {
        agreement::movable(dtype)
    };
    f.problem = if root >= n {
        Some(Problem::Root { root })
    } else {
        (!dtype_ok).then_some(Problem::UnsupportedDType)
    };
    let me = g.rank();
    agreement::agree(g, f, |offender, theirs, rank0s| Error::InvalidRoot {
        op: role.op,
        rank: me,
        offender,
        root: theirs.max(0) as usize,
        expected: rank0s.max(0) as usize,
        size: n,
    })?;
    Ok(())
}

/// Every rank gets the root's value; the adjoint sums the gradients at the
/// root ([`SumToRoot`]).
#[derive(Clone, Copy, Debug)]
pub struct Broadcast {
    role: Role,
    root: usize,
}

impl Broadcast {
    /// Broadcast from `root`.
    pub fn new(root: usize) -> Self {
        Broadcast {
            role: Role::forward(TensorOp::Broadcast),
            root,
        }
    }

    /// The seed contract's `broadcast_float` from `root` (the same
    /// operation, named as the contract names it).
    pub fn contract(root: usize) -> Self {
        Broadcast {
            role: Role::forward(TensorOp::BroadcastFloat),
            root,
        }
    }
}

impl LinearOp for Broadcast {
    type Plan = ();
    type Adjoint = SumToRoot;

    fn role(&self) -> Role {
        self.role
    }

    fn plan<G: Group>(
        &self,
        g: &G,
        shape: &[usize],
        dtype: DType,
        tracked: bool,
    ) -> Result<(), Error> {
        agree_rooted(g, self.role, self.root, shape, dtype, tracked, false)
    }

    fn forward<B: Backend, G: Group>(
        &self,
        g: &G,
        _: &(),
        x: FloatTensor<B>,
    ) -> Result<FloatTensor<B>, Error> {
        if g.size() == 1 {
            return Ok(x);
        }
        g.broadcast::<B>(self.role.op, x, self.root)
    }

    fn adjoint(&self, _: &()) -> SumToRoot {
        SumToRoot {
            role: self.role.adjoint(),
            root: self.root,
        }
    }
}

/// The root gets the sum over the group, every other rank zeros (the
/// adjoint of [`Broadcast`]: only the root's input reached the output).
#[derive(Clone, Copy, Debug)]
pub struct SumToRoot {
    role: Role,
    root: usize,
}

impl SumToRoot {
    /// The sum to `root` (the `reduce` method's operation; its adjoint is
    /// the broadcast from `root`).
    pub fn new(root: usize) -> Self {
        SumToRoot {
            role: Role::forward(TensorOp::Reduce),
            root,
        }
    }
}

impl LinearOp for SumToRoot {
    type Plan = ();
    type Adjoint = Broadcast;

    fn role(&self) -> Role {
        self.role
    }

    fn plan<G: Group>(
        &self,
        g: &G,
        shape: &[usize],
        dtype: DType,
        tracked: bool,
    ) -> Result<(), Error> {
        agree_rooted(g, self.role, self.root, shape, dtype, tracked, true)
    }

    fn forward<B: Backend, G: Group>(
        &self,
        g: &G,
        _: &(),
        x: FloatTensor<B>,
    ) -> Result<FloatTensor<B>, Error> {
        let summed = if g.size() == 1 {
            x
        } else {
            g.sum::<B>(self.role.op, x)?
        };
        if g.rank() == self.root {
            Ok(summed)
        } else {
            Ok(B::float_zeros(
                summed.shape(),
                &summed.device(),
                summed.dtype().into(),
            ))
        }
    }

    fn adjoint(&self, _: &()) -> Broadcast {
        Broadcast {
            role: self.role.adjoint(),
            root: self.root,
        }
    }
}
