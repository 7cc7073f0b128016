//! What an [`super::Exchange`] holds between posting and waiting: posted
//! sends (a header and the tensor, moved when the pair meets) and posted
//! receives (what the receiver will accept, and the slot the tensor lands
//! in).

use alloc::boxed::Box;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::any::Any;
use std::sync::{Mutex, MutexGuard};

use burn_backend::DType;

use crate::agreement::{self, dtype_code, dtype_of};
use crate::error::{Error, PairProblem};
use crate::p2p::{MAX_DIMS, PairPlan};

/// Words of one send's descriptor: phase, dtype, tracked, tag, number of
/// dimensions, then the dimensions.
pub(crate) const DESC: usize = 5 + MAX_DIMS;

/// A tensor received by a posted receive, with what its sender declared.
pub(crate) struct Arrived {
    /// The backend's float primitive, boxed (the receive knows its type).
    pub(crate) tensor: Box<dyn Any + Send>,
    /// The sender's descriptor.
    pub(crate) desc: Desc,
}

/// Where a posted receive's tensor (or the error that ended it) lands.
pub(crate) type Slot = Mutex<Option<Result<Arrived, Error>>>;

/// Lock a mutex, ignoring poisoning (the data is a queue or a slot, valid
/// after any panic in a holder).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// What a send declares about its tensor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Desc {
    /// Sent from a backward pass (a gradient).
    pub(crate) backward: bool,
    /// The dtype; `None` when the code is not one the tensor layer moves.
    pub(crate) dtype: Option<DType>,
    /// Whether the sender's tensor is tracked by autodiff.
    pub(crate) tracked: bool,
    /// The forward message's name (a gradient carries its message's).
    pub(crate) tag: u64,
    /// The shape.
    pub(crate) shape: Vec<usize>,
    /// Whether the shape and dtype make a size memory can hold.
    pub(crate) fits: bool,
}

impl Desc {
    /// The descriptor of a send planned as `plan`.
    pub(crate) fn of(plan: &PairPlan, backward: bool) -> Desc {
        Desc {
            backward,
            dtype: Some(plan.dtype),
            tracked: plan.tracked,
            tag: plan.tag,
            shape: plan.shape.clone(),
            fits: true,
        }
    }

    /// Its words (a shape of more than [`MAX_DIMS`] dimensions is sent as
    /// that count, which the receiver refuses).
    pub(crate) fn words(&self) -> [i64; DESC] {
        let mut w = [0i64; DESC];
        w[0] = i64::from(self.backward);
        w[1] = self.dtype.map_or(-1, dtype_code);
        w[2] = i64::from(self.tracked);
        w[3] = self.tag as i64;
        w[4] = self.shape.len() as i64;
        for (slot, &d) in w[5..].iter_mut().zip(&self.shape) {
            *slot = i64::try_from(d).unwrap_or(-1);
        }
        w
    }

    /// A descriptor read from a peer's words, checked before anything is
    /// allocated for it.
    pub(crate) fn parse(w: &[i64]) -> Desc {
        let ndim = usize::try_from(w[4]).unwrap_or(usize::MAX);
        let dtype = dtype_of(w[1]).filter(|&d| agreement::summable(d));
        let dims: Option<Vec<usize>> = (ndim <= MAX_DIMS).then(|| {
            w[5..5 + ndim]
                .iter()
                .map(|&d| usize::try_from(d).unwrap_or(usize::MAX))
                .collect()
        });
        let fits = match (&dims, dtype) {
            (Some(dims), Some(d)) => dims
                .iter()
                .try_fold(d.size(), |a, &x| a.checked_mul(x))
                .is_some_and(|bytes| bytes <= isize::MAX as usize),
            _ => false,
        };
        Desc {
            backward: w[0] != 0,
            dtype,
            tracked: w[2] != 0,
            tag: w[3] as u64,
            shape: dims.unwrap_or_else(|| alloc::vec![0; ndim.min(MAX_DIMS + 1)]),
            fits,
        }
    }
}

/// What a posted receive accepts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Want {
    /// Posted by a backward pass (waits for a gradient).
    pub(crate) backward: bool,
    /// The number of dimensions.
    pub(crate) ndim: usize,
    /// Whether a tracked tensor may arrive (the device has autodiff).
    pub(crate) autodiff: bool,
    /// In a backward pass, the forward message whose gradient must arrive.
    pub(crate) expect: Option<u64>,
}

impl Want {
    /// Why `desc` cannot be this receive's message, if it cannot.
    pub(crate) fn check(&self, desc: &Desc) -> Option<PairProblem> {
        if desc.backward != self.backward {
            Some(PairProblem::Phase {
                sender_backward: desc.backward,
            })
        } else if desc.dtype.is_none() || !desc.fits {
            Some(PairProblem::Unsupported)
        } else if let Some(expected) = self.expect.filter(|&e| e != desc.tag) {
            Some(PairProblem::Order {
                expected,
                got: desc.tag,
            })
        } else if desc.shape.len() != self.ndim {
            Some(PairProblem::Rank {
                sent: desc.shape.len(),
                expected: self.ndim,
            })
        } else if desc.tracked && !self.autodiff {
            Some(PairProblem::Untracked)
        } else {
            None
        }
    }
}

/// Moves a posted send's tensor to its peer over the exchange's group.
pub(crate) type Payload<G> = Box<dyn FnOnce(&G) -> Result<(), Error> + Send>;
/// Receives a posted receive's tensor over the exchange's group.
pub(crate) type Receive<G> =
    Box<dyn FnOnce(&G, &Desc) -> Result<Box<dyn Any + Send>, Error> + Send>;

/// A posted send.
pub(crate) struct PostedSend<G> {
    pub(crate) peer: usize,
    pub(crate) desc: Desc,
    pub(crate) payload: Payload<G>,
}

/// A posted receive.
pub(crate) struct PostedRecv<G> {
    pub(crate) peer: usize,
    pub(crate) want: Want,
    pub(crate) receive: Receive<G>,
    pub(crate) slot: Arc<Slot>,
}

/// A posted operation.
pub(crate) enum Posted<G> {
    /// A send.
    Send(PostedSend<G>),
    /// A receive.
    Recv(PostedRecv<G>),
}

/// The operations posted to an exchange and not yet carried out, in the
/// order they were posted.
pub(crate) struct Queue<G> {
    pub(crate) posted: Mutex<Vec<Posted<G>>>,
    /// The exchange's tag (both ranks of a pair must use the same).
    pub(crate) tag: u32,
}

impl<G> Queue<G> {
    /// An empty queue.
    pub(crate) fn new(tag: u32) -> Self {
        Queue {
            posted: Mutex::new(Vec::new()),
            tag,
        }
    }

    /// Post `op` after the others.
    pub(crate) fn post(&self, op: Posted<G>) {
        lock(&self.posted).push(op);
    }

    /// How many operations are posted.
    pub(crate) fn len(&self) -> usize {
        lock(&self.posted).len()
    }
}

impl<G> core::fmt::Debug for Queue<G> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "Queue(tag {}, {} posted)", self.tag, self.len())
    }
}
