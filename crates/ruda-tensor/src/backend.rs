//! The backends ruda's operations run on, and how autodiff learns their
//! adjoints.
//!
//! `Autodiff<B, C>` is itself a Burn `Backend`, so a blanket implementation
//! over all backends could not be joined by a differentiable one for
//! `Autodiff`. Plain backends therefore opt in through [`PlainBackend`]
//! (implemented here for every backend Burn ships that ruda builds with),
//! and [`DistBackend`] is implemented for every plain backend (run the
//! forward) and for `Autodiff` of any of them (run the forward on the inner
//! backend, record the adjoint).

use core::cell::RefCell;
use core::fmt::Debug;
use core::marker::PhantomData;

use burn_autodiff::Autodiff;
use burn_autodiff::checkpoint::base::Checkpointer;
use burn_autodiff::checkpoint::strategy::CheckpointStrategy;
use burn_autodiff::grads::Gradients;
use burn_autodiff::ops::{Backward, Ops, OpsKind, unary};
use burn_backend::Backend;
use burn_backend::tensor::FloatTensor;

use crate::error::{Error, TensorOp};
use crate::group::Group;
use crate::linear_op::{LinearOp, run_plain};

/// A backend without autodiff on which ruda's operations run directly.
///
/// Implemented for Burn's CPU backend `burn_flex::Flex` (feature `flex`)
/// and for the CubeCL backend that carries wgpu (Vulkan, Metal, DX12),
/// CUDA and ROCm (feature `cube`). `Autodiff` of any plain backend is a
/// [`DistBackend`] too. A backend type of your own crate joins by
/// implementing this marker.
pub trait PlainBackend: Backend {}

#[cfg(feature = "flex")]
impl PlainBackend for burn_flex::Flex {}

#[cfg(feature = "cube")]
impl PlainBackend for burn_cubecl::Cube {}

/// A backend the tensor layer runs on: every [`PlainBackend`], and
/// `burn_autodiff::Autodiff` of any of them, where every operation records
/// its adjoint for the backward pass. You do not call its methods
/// yourself: use the operations of [`crate::ops`], the primitives of
/// [`crate::primitives`] or the methods of [`crate::TensorExt`].
pub trait DistBackend: carry::Carry {
    /// Whether `x` is tracked by autodiff (always `false` on a plain backend).
    fn is_tracked(x: &FloatTensor<Self>) -> bool;

    /// Run `op` with the agreed `plan` (see [`crate::ops::apply`]).
    ///
    /// # Errors
    /// As [`LinearOp::forward`].
    fn run<G: Group, O: LinearOp>(
        g: &G,
        op: O,
        plan: O::Plan,
        x: FloatTensor<Self>,
    ) -> Result<FloatTensor<Self>, Error>;
}

/// Crate-internal backend plumbing, sealed: the trait is public inside a
/// private module, so no other crate can name, call or implement it (and
/// so none can implement [`DistBackend`] except through
/// [`PlainBackend`]).
pub(crate) mod carry {
    use burn_backend::Backend;
    use burn_backend::tensor::FloatTensor;

    /// The value swap behind the extremum of
    /// [`crate::TensorExt::all_reduce_with`].
    pub trait Carry: Backend {
        /// `value` (its own graph, if any, cut off), with the gradient of
        /// the result passed unchanged to `carrier` (same shape).
        fn with_value(carrier: FloatTensor<Self>, value: FloatTensor<Self>) -> FloatTensor<Self>;
    }
}

impl<B: PlainBackend> carry::Carry for B {
    fn with_value(_: FloatTensor<Self>, value: FloatTensor<Self>) -> FloatTensor<Self> {
        value
    }
}

impl<B: PlainBackend, CK: CheckpointStrategy> carry::Carry for Autodiff<B, CK> {
    fn with_value(carrier: FloatTensor<Self>, value: FloatTensor<Self>) -> FloatTensor<Self> {
        let (_, guard) = carrier.into_parts();
        let (out, _) = value.into_parts();
        match PassGradient
            .prepare::<CK>([guard])
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(prep) => prep.finish((), out),
            OpsKind::UnTracked(prep) => prep.finish(out),
        }
    }
}

impl<B: PlainBackend> DistBackend for B {
    fn is_tracked(_: &FloatTensor<Self>) -> bool {
        false
    }

    fn run<G: Group, O: LinearOp>(
        g: &G,
        op: O,
        plan: O::Plan,
        x: FloatTensor<Self>,
    ) -> Result<FloatTensor<Self>, Error> {
        op.forward::<B, G>(g, &plan, x)
    }
}

/// What the backward step of an operation keeps: a handle that does not
/// keep the group alive (Burn's autodiff graph may outlive the rank that
/// built it; a rank's end is detected by its world, never by a drop), and
/// the adjoint operation.
#[derive(Clone, Debug)]
struct AdjointState<W, A> {
    group: W,
    rank: usize,
    op: TensorOp,
    adjoint: A,
}

/// The backward step of every operation: apply its adjoint to the gradient.
#[derive(Debug)]
struct AdjointStep<G, A>(PhantomData<fn() -> (G, A)>);

impl<B: PlainBackend, G: Group, A: LinearOp> Backward<B, 1> for AdjointStep<G, A> {
    type State = AdjointState<G::Weak, A>;

    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        let Ops {
            parents,
            node,
            state,
        } = ops;
        unary::<B, _>(parents, node, grads, |grad| {
            let result = match G::upgrade(&state.group) {
                Some(g) => run_plain::<B, G, A>(&g, state.adjoint, grad),
                None => Err(Error::GroupDropped {
                    op: state.op,
                    rank: state.rank,
                }),
            };
            backward_result(state.op, result)
        });
    }
}

/// The backward step of `carry::Carry::with_value`: the gradient passes
/// to the carrier unchanged.
#[derive(Debug)]
struct PassGradient;

impl<B: PlainBackend> Backward<B, 1> for PassGradient {
    type State = ();

    fn backward(self, ops: Ops<(), 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        unary::<B, _>(ops.parents, ops.node, grads, |grad| grad);
    }
}

impl<B: PlainBackend, CK: CheckpointStrategy> DistBackend for Autodiff<B, CK> {
    fn is_tracked(x: &FloatTensor<Self>) -> bool {
        x.is_tracked()
    }

    fn run<G: Group, O: LinearOp>(
        g: &G,
        op: O,
        plan: O::Plan,
        x: FloatTensor<Self>,
    ) -> Result<FloatTensor<Self>, Error> {
        let (inner, guard) = x.into_parts();
        let out = op.forward::<B, G>(g, &plan, inner)?;
        let step = AdjointStep::<G, O::Adjoint>(PhantomData);
        Ok(
            match step.prepare::<CK>([guard]).compute_bound().stateful() {
                OpsKind::Tracked(prep) => {
                    let state = AdjointState {
                        group: g.downgrade(),
                        rank: g.rank(),
                        op: op.role().op,
                        adjoint: op.adjoint(&plan),
                    };
                    prep.finish(state, out)
                }
                OpsKind::UnTracked(prep) => prep.finish(out),
            },
        )
    }
}

std::thread_local! {
    /// The error that ended the last backward pass on this thread, for
    /// [`try_backward`].
    static BACKWARD_ERROR: RefCell<Option<Error>> = const { RefCell::new(None) };
}

/// The gradient an adjoint produced, or a panic with its error: Burn's
/// backward pass cannot return errors. The typed error is kept for
/// [`try_backward`] on this thread.
fn backward_result<T>(op: TensorOp, r: Result<T, Error>) -> T {
    match r {
        Ok(t) => t,
        Err(e) => {
            // The error names the call already when it came from a
            // communicator ("the backward pass of all_gather on rank 0: …").
            let msg = match &e {
                Error::Comm(_) => alloc::format!("ruda: {e}"),
                _ => alloc::format!("ruda: the backward pass of {op} failed: {e}"),
            };
            BACKWARD_ERROR.with(|slot| *slot.borrow_mut() = Some(e));
            panic!("{msg}")
        }
    }
}

/// Run a backward pass and return ruda's typed error if one of its
/// collectives fails (a peer that stopped, skipped the backward pass or
/// entered another call), instead of the panic Burn's backward pass turns
/// it into. Other panics propagate unchanged.
///
/// # Errors
/// The [`Error`] of the failing collective.
///
/// # Example
/// ```
/// use burn_tensor::{Device, Tensor};
/// use ruda_comm::LocalWorld;
/// use ruda_tensor::{Error, HostCollective, TensorExt, try_backward};
///
/// let out = LocalWorld::new(2).run_each(|c| {
///     let me = ruda_comm::Communicator::rank(&c);
///     let g = HostCollective::new(c);
///     let x = Tensor::<1>::from_floats([1.0, 2.0], &Device::flex().autodiff()).require_grad();
///     let y = x.all_reduce(&g)?.sum();
///     if me == 1 {
///         return Ok(false); // rank 1 skips the backward pass and leaves
///     }
///     Ok::<_, Error>(try_backward(|| y.backward()).is_err())
/// });
/// assert_eq!(out[0], Ok(true)); // rank 0 gets a typed error, promptly
/// ```
pub fn try_backward<R>(backward: impl FnOnce() -> R) -> Result<R, Error> {
    BACKWARD_ERROR.with(|slot| slot.borrow_mut().take());
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(backward)) {
        Ok(r) => Ok(r),
        Err(payload) => match BACKWARD_ERROR.with(|slot| slot.borrow_mut().take()) {
            Some(e) => Err(e),
            None => std::panic::resume_unwind(payload),
        },
    }
}

#[cfg(test)]
mod tests {
    use burn_autodiff::Autodiff;
    use burn_backend::{AutodiffBackend, TensorData, ops::FloatTensorOps, read_sync};
    use burn_flex::{Flex, FlexDevice};

    use super::carry::Carry;

    type Ad = Autodiff<Flex>;

    /// The value given, the carrier's gradient.
    #[test]
    fn with_value_keeps_the_value_and_the_carriers_gradient() {
        let x = Ad::float_set_require_grad(
            Ad::float_from_data(TensorData::new(vec![1.0f32], [1]), &FlexDevice),
            true,
        );
        let carrier = Ad::float_mul_scalar(x.clone(), 3.0.into());
        let y = Ad::with_value(
            carrier,
            Ad::float_from_data(TensorData::new(vec![7.0f32], [1]), &FlexDevice),
        );
        let grads = Ad::backward(Ad::float_sum(y.clone()));
        let value = read_sync(Flex::float_into_data(Ad::inner(y)))
            .unwrap()
            .try_to_vec::<f32>()
            .unwrap();
        let dx = read_sync(Flex::float_into_data(Ad::grad(&x, &grads).unwrap()))
            .unwrap()
            .try_to_vec::<f32>()
            .unwrap();
        assert_eq!((value, dx), (vec![7.0], vec![3.0]));
    }
}
