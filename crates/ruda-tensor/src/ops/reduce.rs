//! Sums over the group: `all_reduce` (its own adjoint), `copy_to` (identity
//! forward, sum backward) and `reduce_from` (sum forward, identity
//! backward), and the identity itself.

use burn_backend::tensor::FloatTensor;
use burn_backend::{Backend, DType};

use super::{LinearOp, Role};
use crate::agreement::{self, Facts, Problem};
use crate::error::{Error, TensorOp};
use crate::group::Group;

/// Agreement for a sum: the same shape and a summable dtype everywhere;
/// `tracked` must agree when the backward pass communicates.
fn agree_sum<G: Group>(
    g: &G,
    role: Role,
    shape: &[usize],
    dtype: DType,
    tracked: Option<bool>,
) -> Result<(), Error> {
    let mut f = Facts::new(role.op, dtype, shape);
    f.backward = role.backward;
    f.tracked = tracked;
    f.problem = (!agreement::summable(dtype)).then_some(Problem::UnsupportedDType);
    agreement::agree(g, f, |_, _, _| unreachable!("no parameter"))?;
    Ok(())
}

/// Sum over the group, every rank getting the result; its own adjoint.
/// Varying (partial sums) → replicated, as a collective; see
/// [`ReduceFrom`] and [`CopyTo`] for the replicated/varying primitives.
#[derive(Clone, Copy, Debug)]
pub struct AllReduce {
    role: Role,
}

impl AllReduce {
    /// The `all_reduce` method's operation.
    pub fn new() -> Self {
        Self::with_role(Role::forward(TensorOp::AllReduce))
    }

    /// The seed contract's `all_reduce_sum` (the same operation, named as
    /// the contract names it).
    pub fn contract() -> Self {
        Self::with_role(Role::forward(TensorOp::AllReduceSum))
    }

    pub(crate) fn with_role(role: Role) -> Self {
        AllReduce { role }
    }
}

impl Default for AllReduce {
    fn default() -> Self {
        Self::new()
    }
}

impl LinearOp for AllReduce {
    type Plan = ();
    type Adjoint = AllReduce;

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
        agree_sum(g, self.role, shape, dtype, Some(tracked))
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
        g.sum::<B>(self.role.op, x)
    }

    fn adjoint(&self, _: &()) -> AllReduce {
        AllReduce::with_role(self.role.adjoint())
    }
}

/// Identity forward; the gradient is summed over the group. Use it where a
/// replicated value enters per-rank computation (replicated → varying).
/// Its forward moves nothing and exchanges nothing.
#[derive(Clone, Copy, Debug, Default)]
pub struct CopyTo;

impl LinearOp for CopyTo {
    type Plan = ();
    type Adjoint = AllReduce;

    fn role(&self) -> Role {
        Role::forward(TensorOp::CopyTo)
    }

    fn plan<G: Group>(&self, _: &G, _: &[usize], _: DType, _: bool) -> Result<(), Error> {
        Ok(())
    }

    fn forward<B: Backend, G: Group>(
        &self,
        _: &G,
        _: &(),
        x: FloatTensor<B>,
    ) -> Result<FloatTensor<B>, Error> {
        Ok(x)
    }

    fn adjoint(&self, _: &()) -> AllReduce {
        AllReduce::with_role(self.role().adjoint())
    }
}

/// Sum over the group forward; the gradient passes unchanged. Use it where
/// per-rank partial results become one replicated value (varying →
/// replicated).
#[derive(Clone, Copy, Debug, Default)]
pub struct ReduceFrom;

impl LinearOp for ReduceFrom {
    type Plan = ();
    type Adjoint = Identity;

    fn role(&self) -> Role {
        Role::forward(TensorOp::ReduceFrom)
    }

    fn plan<G: Group>(&self, g: &G, shape: &[usize], dtype: DType, _: bool) -> Result<(), Error> {
        agree_sum(g, self.role(), shape, dtype, None)
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
        g.sum::<B>(TensorOp::ReduceFrom, x)
    }

    fn adjoint(&self, _: &()) -> Identity {
        Identity
    }
}

/// The identity, which communicates nothing (the adjoint of [`ReduceFrom`]).
#[derive(Clone, Copy, Debug, Default)]
pub struct Identity;

impl LinearOp for Identity {
    type Plan = ();
    type Adjoint = Identity;

    fn role(&self) -> Role {
        Role::forward(TensorOp::ReduceFrom).adjoint()
    }

    fn plan<G: Group>(&self, _: &G, _: &[usize], _: DType, _: bool) -> Result<(), Error> {
        Ok(())
    }

    fn forward<B: Backend, G: Group>(
        &self,
        _: &G,
        _: &(),
        x: FloatTensor<B>,
    ) -> Result<FloatTensor<B>, Error> {
        Ok(x)
    }

    fn adjoint(&self, _: &()) -> Identity {
        Identity
    }
}
