//! Recording a linear host operation on `Autodiff`: the forward runs on the
//! inner backend, the backward applies the operation's adjoint (given as a
//! function of the same state) to the output's gradient. Every backend
//! operation of this crate (the longitude FFT, the Legendre step, the
//! fused transforms) is one of these.

use core::fmt::Debug;

use burn_autodiff::Autodiff;
use burn_autodiff::checkpoint::base::Checkpointer;
use burn_autodiff::checkpoint::strategy::CheckpointStrategy;
use burn_autodiff::grads::Gradients;
use burn_autodiff::ops::{Backward, Ops, OpsKind, unary};
use burn_backend::Backend;
use burn_backend::tensor::FloatTensor;

/// An operation on the inner backend's tensors, parameterised by `S`.
pub(crate) type HostFn<B, S> = fn(FloatTensor<B>, S) -> FloatTensor<B>;

/// The backward step: `adjoint(gradient, state)`.
struct AdjointStep<B: Backend, S> {
    adjoint: HostFn<B, S>,
}

impl<B: Backend, S> Debug for AdjointStep<B, S> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("AdjointStep")
    }
}

impl<B: Backend, S: Clone + Send + Debug + 'static> Backward<B, 1> for AdjointStep<B, S> {
    type State = S;
    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        let Ops {
            parents,
            node,
            state,
        } = ops;
        unary::<B, _>(parents, node, grads, |g| (self.adjoint)(g, state));
    }
}

/// `forward(x, state)` on `Autodiff<B, C>`, with `adjoint(g, state)` as its
/// backward when `x` is tracked.
pub(crate) fn linear<B, C, S>(
    x: FloatTensor<Autodiff<B, C>>,
    state: S,
    forward: HostFn<B, S>,
    adjoint: HostFn<B, S>,
) -> FloatTensor<Autodiff<B, C>>
where
    B: Backend,
    C: CheckpointStrategy,
    S: Clone + Send + Debug + 'static,
{
    let (x, guard) = x.into_parts();
    let out = forward(x, state.clone());
    match (AdjointStep { adjoint })
        .prepare::<C>([guard])
        .compute_bound()
        .stateful()
    {
        OpsKind::Tracked(prep) => prep.finish(state, out),
        OpsKind::UnTracked(prep) => prep.finish(out),
    }
}
