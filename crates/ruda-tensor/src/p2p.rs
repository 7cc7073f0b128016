//! Point-to-point tensors: [`crate::TensorExt::send`] and [`recv`], each
//! the other's adjoint.
//!
//! A send is a handshake and a message. The sender's header (its call,
//! forward or backward, dtype, tracking, shape) goes first; the receiver
//! checks it and answers with its verdict, so a disagreement is the same
//! [`Error::PointToPoint`] on both ranks before any data moves; then the
//! tensor follows. Every wait is the communicator's, with its deadline.
//!
//! On autodiff the sender's result is an empty *receipt* whose backward
//! pass receives the gradient, and the receiver's result is a tensor whose
//! backward pass sends its gradient home. Each forward message carries a
//! tag that its gradient carries back, so a backward pass that reaches a
//! pair's messages in another order than its peer's is an error on both
//! ranks ([`PairProblem::Order`]), never a gradient delivered to the wrong
//! tensor. (Burn runs backward steps by their depth in the graph, deepest
//! first, not in reverse order of creation: two messages between the same
//! two ranks pair up when both sides' tensors sit at matching depths, e.g.
//! sent as computed and received into the same computation.)

use alloc::vec;
use alloc::vec::Vec;

use burn_backend::tensor::FloatTensor;
use burn_backend::{Backend, DType, FloatDType, Shape, TensorMetadata};
use burn_tensor::Tensor;

use crate::agreement::{self, dtype_code, dtype_of};
use crate::backend::DistBackend;
use crate::error::{Error, PairProblem, TensorOp};
use crate::group::Group;
use crate::linear_op::{LinearOp, Role};
use crate::ops::apply;
use crate::route::routed;

/// The first word of every handshake message ("RUDA-P2P").
pub(crate) const MAGIC: i64 = 0x5255_4441_5032_5031;
/// The most dimensions a header carries.
pub(crate) const MAX_DIMS: usize = 16;
/// Header words: marker, call, phase, dtype, tracked, rank, tag, dimensions.
const HEADER: usize = 7 + MAX_DIMS;

/// A process-wide counter naming forward messages ([`PairPlan::tag`]).
pub(crate) static TAGS: core::sync::atomic::AtomicU64 = core::sync::atomic::AtomicU64::new(1);
/// Reply words: marker, problem code, two values.
pub(crate) const REPLY: usize = 4;

/// What the two ranks of a pair learn: the tensor's shape and dtype, and
/// whether the sender's tensor is tracked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct PairPlan {
    pub(crate) shape: Vec<usize>,
    pub(crate) dtype: DType,
    pub(crate) tracked: bool,
    /// The forward message's name, which its gradient carries back.
    pub(crate) tag: u64,
}

pub(crate) fn encode(p: Option<PairProblem>) -> [i64; REPLY] {
    match p {
        None => [MAGIC, 0, 0, 0],
        Some(PairProblem::NotASend { code }) => [MAGIC, 1, code, 0],
        Some(PairProblem::Phase { sender_backward }) => [MAGIC, 2, i64::from(sender_backward), 0],
        Some(PairProblem::Rank { sent, expected }) => [MAGIC, 3, sent as i64, expected as i64],
        Some(PairProblem::Untracked) => [MAGIC, 4, 0, 0],
        Some(PairProblem::Unsupported) => [MAGIC, 5, 0, 0],
        Some(PairProblem::Order { expected, got }) => [MAGIC, 6, expected as i64, got as i64],
        // An exchange's pair problems are found by both ranks from the same
        // summary and never sent: their codes carry no values.
        Some(PairProblem::Stuck { .. }) => [MAGIC, 7, 0, 0],
        Some(PairProblem::Tag { lower, higher }) => [MAGIC, 8, i64::from(lower), i64::from(higher)],
        Some(PairProblem::TooMany { posted, limit }) => [MAGIC, 9, posted as i64, limit as i64],
    }
}

pub(crate) fn decode(w: &[i64; REPLY]) -> Option<PairProblem> {
    Some(match (w[0], w[1]) {
        (MAGIC, 0) => return None,
        (MAGIC, 2) => PairProblem::Phase {
            sender_backward: w[2] != 0,
        },
        (MAGIC, 3) => PairProblem::Rank {
            sent: w[2].max(0) as usize,
            expected: w[3].max(0) as usize,
        },
        (MAGIC, 4) => PairProblem::Untracked,
        (MAGIC, 5) => PairProblem::Unsupported,
        (MAGIC, 6) => PairProblem::Order {
            expected: w[2] as u64,
            got: w[3] as u64,
        },
        (MAGIC, 7) => PairProblem::Stuck {
            lower: crate::error::PostedCounts::default(),
            higher: crate::error::PostedCounts::default(),
        },
        (MAGIC, 8) => PairProblem::Tag {
            lower: w[2] as u32,
            higher: w[3] as u32,
        },
        (MAGIC, 9) => PairProblem::TooMany {
            posted: w[2].max(0) as usize,
            limit: w[3].max(0) as usize,
        },
        (MAGIC, 1) => PairProblem::NotASend { code: w[2] },
        (code, _) => PairProblem::NotASend { code },
    })
}

pub(crate) fn pair_error(
    role: Role,
    rank: usize,
    sender: usize,
    receiver: usize,
    problem: PairProblem,
) -> Error {
    Error::PointToPoint {
        op: role.op,
        backward: role.backward,
        rank,
        sender,
        receiver,
        problem,
    }
}

/// The sender's half of the handshake.
fn handshake_send<G: Group>(
    g: &G,
    role: Role,
    dest: usize,
    shape: &[usize],
    dtype: DType,
    tracked: bool,
    tag: u64,
) -> Result<PairPlan, Error> {
    let mut header = [0i64; HEADER];
    header[..7].copy_from_slice(&[
        MAGIC,
        TensorOp::Send.code(),
        i64::from(role.backward),
        dtype_code(dtype),
        i64::from(tracked),
        shape.len() as i64,
        tag as i64,
    ]);
    for (w, &d) in header[7..].iter_mut().zip(shape) {
        *w = d as i64;
    }
    g.send_words(&header, dest)?;
    let mut reply = [0i64; REPLY];
    g.recv_words(&mut reply, dest)?;
    match decode(&reply) {
        Some(problem) => Err(pair_error(role, g.rank(), g.rank(), dest, problem)),
        None => Ok(PairPlan {
            shape: shape.to_vec(),
            dtype,
            tracked,
            tag,
        }),
    }
}

/// The receiver's half: `ndim` dimensions expected; `autodiff`: whether a
/// tracked tensor may arrive (its gradient will be sent back); `expect`:
/// in a backward pass, the tag of the forward message whose gradient this
/// is.
fn handshake_recv<G: Group>(
    g: &G,
    role: Role,
    source: usize,
    ndim: usize,
    autodiff: bool,
    expect: Option<u64>,
) -> Result<PairPlan, Error> {
    let mut h = [0i64; HEADER];
    g.recv_words(&mut h, source)?;
    let sent = h[5].max(0) as usize;
    let dtype = dtype_of(h[3]).filter(|&d| agreement::summable(d));
    let tag = h[6] as u64;
    // The message's size, checked before anything is allocated for it.
    let fits = dtype.is_some_and(|d| {
        h[7..7 + sent.min(MAX_DIMS)]
            .iter()
            .try_fold(d.size(), |a, &x| {
                usize::try_from(x).ok().and_then(|x| a.checked_mul(x))
            })
            .is_some_and(|bytes| bytes <= isize::MAX as usize)
    });
    let problem = if h[0] != MAGIC || h[1] != TensorOp::Send.code() {
        Some(PairProblem::NotASend {
            code: if h[0] != MAGIC { h[0] } else { h[1] },
        })
    } else if (h[2] != 0) != role.backward {
        Some(PairProblem::Phase {
            sender_backward: h[2] != 0,
        })
    } else if dtype.is_none() || sent > MAX_DIMS || !fits {
        Some(PairProblem::Unsupported)
    } else if let Some(expected) = expect.filter(|&e| e != tag) {
        Some(PairProblem::Order { expected, got: tag })
    } else if sent != ndim {
        Some(PairProblem::Rank {
            sent,
            expected: ndim,
        })
    } else if h[4] != 0 && !autodiff {
        Some(PairProblem::Untracked)
    } else {
        None
    };
    g.send_words(&encode(problem), source)?;
    match (problem, dtype) {
        (Some(problem), _) => Err(pair_error(role, g.rank(), source, g.rank(), problem)),
        (None, Some(dtype)) => Ok(PairPlan {
            shape: h[7..7 + sent].iter().map(|&d| d as usize).collect(),
            dtype,
            tracked: h[4] != 0,
            tag,
        }),
        (None, None) => unreachable!("an unknown dtype is a problem"),
    }
}

/// This tensor to `dest`; the result is an empty receipt.
#[derive(Clone, Copy, Debug)]
struct SendTo {
    role: Role,
    dest: usize,
    /// In a backward pass, the tag of the forward message this gradient
    /// answers; a forward send takes a new one.
    tag: Option<u64>,
}

impl LinearOp for SendTo {
    type Plan = PairPlan;
    type Adjoint = RecvFrom;

    fn role(&self) -> Role {
        self.role
    }

    fn plan<G: Group>(
        &self,
        g: &G,
        shape: &[usize],
        dtype: DType,
        tracked: bool,
    ) -> Result<PairPlan, Error> {
        let tag = self
            .tag
            .unwrap_or_else(|| TAGS.fetch_add(1, core::sync::atomic::Ordering::Relaxed));
        handshake_send(g, self.role, self.dest, shape, dtype, tracked, tag)
    }

    fn forward<B: Backend, G: Group>(
        &self,
        g: &G,
        plan: &PairPlan,
        x: FloatTensor<B>,
    ) -> Result<FloatTensor<B>, Error> {
        let device = x.device();
        g.send_float::<B>(self.role.op, x, self.dest)?;
        Ok(B::float_zeros(
            Shape::from(receipt_shape(&plan.shape)),
            &device,
            FloatDType::from(plan.dtype),
        ))
    }

    fn adjoint(&self, plan: &PairPlan) -> RecvFrom {
        RecvFrom {
            role: self.role.adjoint(),
            source: self.dest,
            expect: Some(plan.tag),
        }
    }
}

/// A tensor from `source`; the input is an empty placeholder.
#[derive(Clone, Copy, Debug)]
struct RecvFrom {
    role: Role,
    source: usize,
    /// In a backward pass, the tag of the forward message whose gradient
    /// must arrive.
    expect: Option<u64>,
}

impl LinearOp for RecvFrom {
    type Plan = PairPlan;
    type Adjoint = SendTo;

    fn role(&self) -> Role {
        self.role
    }

    fn plan<G: Group>(&self, g: &G, shape: &[usize], _: DType, _: bool) -> Result<PairPlan, Error> {
        // Only the backward pass plans here (a gradient arrives, untracked).
        handshake_recv(g, self.role, self.source, shape.len(), false, self.expect)
    }

    fn forward<B: Backend, G: Group>(
        &self,
        g: &G,
        plan: &PairPlan,
        placeholder: FloatTensor<B>,
    ) -> Result<FloatTensor<B>, Error> {
        let device = placeholder.device();
        g.recv_float::<B>(self.role.op, &plan.shape, plan.dtype, &device, self.source)
    }

    fn adjoint(&self, plan: &PairPlan) -> SendTo {
        SendTo {
            role: self.role.adjoint(),
            dest: self.source,
            tag: Some(plan.tag),
        }
    }
}

/// A shape with its leading axis 0 (at least one axis).
pub(crate) fn receipt_shape(shape: &[usize]) -> Vec<usize> {
    let mut s = if shape.is_empty() {
        vec![0]
    } else {
        shape.to_vec()
    };
    s[0] = 0;
    s
}

/// [`crate::TensorExt::send`].
pub(crate) fn send<const D: usize, G: Group>(
    x: Tensor<D>,
    g: &G,
    dest: usize,
) -> Result<Tensor<D>, Error> {
    let op = SendTo {
        role: Role::forward(TensorOp::Send),
        dest,
        tag: None,
    };
    routed!(x, D, burn_tensor::Float, |B, t| apply::<B, _, _>(g, op, t))
}

/// Receive a tensor of `D` dimensions from rank `source` of the group
/// (which calls [`crate::TensorExt::send`]) onto `device`; its shape and
/// dtype are the sender's. When the sender's tensor is tracked by
/// autodiff, so is the result: its backward pass sends the gradient back
/// to `source` (the adjoint of a receive is a send), so `device` must
/// have autodiff.
///
/// # Errors
/// [`Error::PointToPoint`] on both ranks when the pair disagrees (another
/// number of dimensions, a tracked tensor for a device without autodiff,
/// the sender in another call); the communicator's errors (a bad or own
/// rank; a sender that never sends ends in a timeout, not a hang).
///
/// # Example
/// ```
/// use burn_tensor::{Device, Tensor};
/// use ruda_tensor::prelude::*;
///
/// let out = LocalWorld::new(2).run(|c| {
///     let world = HostCollective::new(c);
///     if world.rank() == 0 {
///         Tensor::<2>::ones([2, 3], &Device::flex()).send(&world, 1)?;
///         Ok::<_, Error>(Vec::new())
///     } else {
///         let y: Tensor<2> = recv(&world, 0, &Device::flex())?;
///         Ok(y.dims().to_vec())
///     }
/// }).unwrap();
/// assert_eq!(out[1], vec![2, 3]);
/// ```
pub fn recv<const D: usize, G: Group>(
    group: &G,
    source: usize,
    device: &burn_tensor::Device,
) -> Result<Tensor<D>, Error> {
    let role = Role::forward(TensorOp::Recv);
    let plan = handshake_recv(group, role, source, D, device.is_autodiff(), None)?;
    let mut placeholder = Tensor::<D>::zeros(receipt_shape(&plan.shape), (device, plan.dtype));
    if plan.tracked {
        placeholder = placeholder.require_grad();
    }
    let op = RecvFrom {
        role,
        source,
        expect: None,
    };
    routed!(placeholder, D, burn_tensor::Float, |B, t| B::run(
        group,
        op,
        plan.clone(),
        t
    )
    .map_err(|e| e.in_call(role)))
}
