//! The graph hooks behind [`super::Overlap`]: a tap on a parameter whose
//! backward step hands the parameter's finished gradient to the reducing
//! thread, anchors that place a tap at a chosen depth of Burn's tape, and
//! a probe that reads the depth of the loss.
//!
//! Burn's backward pass runs its steps by depth, deepest first, where a
//! node's depth is one more than its deepest input's. A tap applied to a
//! parameter before the forward pass would have depth 1 and run last,
//! after the whole backward pass; an *anchor* (an untracked input of depth
//! d − 1, which adds no gradient path) gives the tap depth d, so it runs
//! once the backward pass is back at the depth of the layer that used the
//! parameter. A tap always runs after every consumer of its output (a
//! consumer is deeper than its inputs), so its gradient is complete,
//! whatever depth it has.

use alloc::boxed::Box;
use alloc::sync::Arc;
use core::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::Sender;

use burn_autodiff::Autodiff;
use burn_autodiff::checkpoint::base::Checkpointer;
use burn_autodiff::checkpoint::strategy::CheckpointStrategy;
use burn_autodiff::grads::Gradients;
use burn_autodiff::ops::{Backward, Ops, OpsKind, unary};
use burn_backend::tensor::FloatTensor;
use burn_backend::{Backend, TensorMetadata};
use burn_dispatch::{DispatchKindConversion, DispatchTensor};
use burn_tensor::Tensor;

use crate::backend::PlainBackend;

/// What the taps and the caller tell the reducing thread.
#[derive(Debug)]
pub(super) enum Message {
    /// Parameter `index`'s finished local gradient, flattened, in its own
    /// dtype (no autodiff).
    Grad { index: usize, grad: Box<Tensor<1>> },
    /// The backward pass is over: gradients that have not come never will.
    Flush,
}

/// The backward state of a tap: which parameter, and where its gradient
/// goes.
#[derive(Clone, Debug)]
pub(super) struct Tap {
    pub index: usize,
    pub tx: Sender<Message>,
}

/// Backends whose tensors can be tapped: every plain backend (nothing to
/// tap: no backward pass) and `Autodiff` of any of them.
pub(super) trait Tapped: Backend {
    /// `x` unchanged, with a backward step that sends `x`'s gradient to
    /// `tap` instead of passing it on (so `x` itself gets no gradient); its
    /// depth is one more than `anchor`'s, if given and deeper than `x`.
    fn tap(x: FloatTensor<Self>, anchor: Option<FloatTensor<Self>>, tap: Tap) -> FloatTensor<Self>;

    /// The id of `x`'s node in the autodiff graph (`None` on a plain
    /// backend): two parameters with the same node are one tensor.
    fn node(x: &FloatTensor<Self>) -> Option<u64>;

    /// `x` one level deeper in the graph (an untracked `x` stays untracked:
    /// the anchors of [`Tapped::tap`]).
    fn deeper(x: FloatTensor<Self>) -> FloatTensor<Self>;

    /// `x` unchanged; the backward pass stores `x`'s depth in `depth` when
    /// it starts from the result.
    fn probe(x: FloatTensor<Self>, depth: Arc<AtomicUsize>) -> FloatTensor<Self>;
}

impl<B: PlainBackend> Tapped for B {
    fn tap(x: FloatTensor<Self>, _: Option<FloatTensor<Self>>, _: Tap) -> FloatTensor<Self> {
        x
    }

    fn node(_: &FloatTensor<Self>) -> Option<u64> {
        None
    }

    fn deeper(x: FloatTensor<Self>) -> FloatTensor<Self> {
        x
    }

    fn probe(x: FloatTensor<Self>, _: Arc<AtomicUsize>) -> FloatTensor<Self> {
        x
    }
}

/// The backward step of a tap.
#[derive(Debug)]
struct TapStep;

impl<B: PlainBackend, const N: usize> Backward<B, N> for TapStep
where
    DispatchTensor: DispatchKindConversion<B>,
{
    type State = Tap;

    fn backward(self, ops: Ops<Tap, N>, grads: &mut Gradients, _: &mut Checkpointer) {
        let grad = grads.consume::<B>(&ops.node);
        let numel = grad.shape().num_elements();
        let flat = B::float_reshape(grad, burn_backend::Shape::new([numel]));
        let grad = Tensor::<1>::from_primitive::<B>(flat);
        // A closed channel means the step was abandoned (its thread saw a
        // cancellation): the gradient has nowhere to go.
        let _ = ops.state.tx.send(Message::Grad {
            index: ops.state.index,
            grad: Box::new(grad),
        });
    }
}

/// The backward step of [`Tapped::deeper`] and [`Tapped::probe`]: the
/// gradient passes unchanged; a probe first records its input's depth.
#[derive(Debug)]
struct Pass;

impl<B: PlainBackend> Backward<B, 1> for Pass {
    type State = Option<Arc<AtomicUsize>>;

    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        if let Some(depth) = &ops.state {
            depth.store(ops.node.order.saturating_sub(1), Ordering::Relaxed);
        }
        unary::<B, _>(ops.parents, ops.node, grads, |grad| grad);
    }
}

impl<B: PlainBackend, CK: CheckpointStrategy> Tapped for Autodiff<B, CK>
where
    DispatchTensor: DispatchKindConversion<B>,
{
    fn tap(x: FloatTensor<Self>, anchor: Option<FloatTensor<Self>>, tap: Tap) -> FloatTensor<Self> {
        let (inner, guard) = x.into_parts();
        match anchor {
            Some(anchor) => {
                let (_, anchor) = anchor.into_parts();
                match TapStep
                    .prepare::<CK>([guard, anchor])
                    .compute_bound()
                    .stateful()
                {
                    OpsKind::Tracked(prep) => prep.finish(tap, inner),
                    OpsKind::UnTracked(prep) => prep.finish(inner),
                }
            }
            None => match TapStep.prepare::<CK>([guard]).compute_bound().stateful() {
                OpsKind::Tracked(prep) => prep.finish(tap, inner),
                OpsKind::UnTracked(prep) => prep.finish(inner),
            },
        }
    }

    fn node(x: &FloatTensor<Self>) -> Option<u64> {
        Some(x.id().value)
    }

    fn deeper(x: FloatTensor<Self>) -> FloatTensor<Self> {
        let (inner, guard) = x.into_parts();
        match Pass.prepare::<CK>([guard]).compute_bound().stateful() {
            OpsKind::Tracked(prep) => prep.finish(None, inner),
            OpsKind::UnTracked(prep) => prep.finish(inner),
        }
    }

    fn probe(x: FloatTensor<Self>, depth: Arc<AtomicUsize>) -> FloatTensor<Self> {
        let (inner, guard) = x.into_parts();
        match Pass.prepare::<CK>([guard]).compute_bound().stateful() {
            OpsKind::Tracked(prep) => prep.finish(Some(depth), inner),
            OpsKind::UnTracked(prep) => prep.finish(inner),
        }
    }
}
