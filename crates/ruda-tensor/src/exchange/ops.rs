//! The exchange's operations as [`LinearOp`]s, so autodiff records their
//! adjoints: a posted send's adjoint receives its gradient (posting the
//! receive and waiting for it, since the backward pass needs the value),
//! a delivered receive's adjoint posts its gradient's send (carried out at
//! the exchange's next wait).

use alloc::boxed::Box;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::any::Any;
use std::sync::Mutex;

use burn_backend::tensor::FloatTensor;
use burn_backend::{Backend, DType, FloatDType, Shape, TensorMetadata};

use crate::error::{Error, TensorOp};
use crate::group::Group;
use crate::linear_op::{LinearOp, Role};
use crate::p2p::{PairPlan, TAGS, receipt_shape};

use super::posted::{Desc, Posted, PostedRecv, PostedSend, Queue, Slot, Want, lock};
use super::progress::drive;

/// `peer` checked as a point-to-point partner of this rank.
pub(crate) fn check_peer<G: Group>(g: &G, peer: usize) -> Result<(), Error> {
    if peer >= g.size() || peer == g.rank() {
        return Err(Error::InvalidPeer {
            op: TensorOp::Exchange,
            rank: g.rank(),
            peer,
            size: g.size(),
        });
    }
    Ok(())
}

/// The exchange's own group type, from the group an operation runs on
/// (always the exchange's: its operations are only run over it).
fn own<X: Group, G: Group>(g: &G) -> Result<&X, Error> {
    (g as &dyn Any)
        .downcast_ref::<X>()
        .ok_or_else(|| Error::UnsupportedTensor {
            message: alloc::format!(
                "an exchange's operation ran over another group type ({})",
                core::any::type_name::<G>()
            ),
        })
}

/// A tensor's primitive back from its box (always the type it was boxed
/// as: a receive is posted and delivered on the same device).
fn unbox<B: Backend>(t: Box<dyn Any + Send>) -> Result<FloatTensor<B>, Error> {
    t.downcast::<FloatTensor<B>>()
        .map(|t| *t)
        .map_err(|_| Error::UnsupportedTensor {
            message: alloc::format!(
                "a received tensor is not a {} tensor",
                core::any::type_name::<B>()
            ),
        })
}

/// A posted receive of a tensor from `source` onto `device`.
fn receive<X: Group, B: Backend>(
    device: burn_backend::tensor::Device<B>,
    source: usize,
) -> super::posted::Receive<X> {
    Box::new(move |g: &X, d: &Desc| {
        let dtype = d.dtype.unwrap_or(DType::F32);
        g.recv_float::<B>(TensorOp::Exchange, &d.shape, dtype, &device, source)
            .map(|t| Box::new(t) as Box<dyn Any + Send>)
    })
}

/// Post this tensor's send to `dest`; the result is an empty receipt whose
/// backward pass receives the gradient.
#[derive(Clone, Debug)]
pub(crate) struct PostSend<X: Group> {
    pub(crate) queue: Arc<Queue<X>>,
    pub(crate) role: Role,
    pub(crate) dest: usize,
    /// In a backward pass, the forward message this gradient answers.
    pub(crate) tag: Option<u64>,
}

impl<X: Group> LinearOp for PostSend<X> {
    type Plan = PairPlan;
    type Adjoint = WaitRecv<X>;

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
        check_peer(g, self.dest)?;
        Ok(PairPlan {
            shape: shape.to_vec(),
            dtype,
            tracked: tracked && !self.role.backward,
            tag: self
                .tag
                .unwrap_or_else(|| TAGS.fetch_add(1, core::sync::atomic::Ordering::Relaxed)),
        })
    }

    fn forward<B: Backend, G: Group>(
        &self,
        _: &G,
        plan: &PairPlan,
        x: FloatTensor<B>,
    ) -> Result<FloatTensor<B>, Error> {
        let device = x.device();
        let dest = self.dest;
        self.queue.post(Posted::Send(PostedSend {
            peer: dest,
            desc: Desc::of(plan, self.role.backward),
            payload: Box::new(move |g: &X| g.send_float::<B>(TensorOp::Exchange, x, dest)),
        }));
        Ok(B::float_zeros(
            Shape::from(receipt_shape(&plan.shape)),
            &device,
            FloatDType::from(plan.dtype),
        ))
    }

    fn adjoint(&self, plan: &PairPlan) -> WaitRecv<X> {
        WaitRecv {
            queue: self.queue.clone(),
            role: self.role.adjoint(),
            source: self.dest,
            expect: plan.tag,
            shape: plan.shape.clone(),
        }
    }
}

/// Post a receive of the gradient of forward message `expect` from
/// `source` and wait for it (a posted send's backward pass).
#[derive(Clone, Debug)]
pub(crate) struct WaitRecv<X: Group> {
    queue: Arc<Queue<X>>,
    role: Role,
    source: usize,
    expect: u64,
    /// The forward tensor's shape (the gradient's).
    shape: Vec<usize>,
}

impl<X: Group> LinearOp for WaitRecv<X> {
    type Plan = PairPlan;
    type Adjoint = PostSend<X>;

    fn role(&self) -> Role {
        self.role
    }

    fn plan<G: Group>(&self, _: &G, _: &[usize], dtype: DType, _: bool) -> Result<PairPlan, Error> {
        Ok(PairPlan {
            shape: self.shape.clone(),
            dtype,
            tracked: false,
            tag: self.expect,
        })
    }

    fn forward<B: Backend, G: Group>(
        &self,
        g: &G,
        _: &PairPlan,
        receipt: FloatTensor<B>,
    ) -> Result<FloatTensor<B>, Error> {
        let g: &X = own(g)?;
        let slot: Arc<Slot> = Arc::new(Mutex::new(None));
        self.queue.post(Posted::Recv(PostedRecv {
            peer: self.source,
            want: Want {
                backward: true,
                ndim: self.shape.len(),
                autodiff: false,
                expect: Some(self.expect),
            },
            receive: receive::<X, B>(receipt.device(), self.source),
            slot: slot.clone(),
        }));
        drive(g, &self.queue, &|| lock(&slot).is_some())?;
        let arrived = lock(&slot).take().ok_or(Error::ExchangeLost {
            op: TensorOp::Exchange,
            rank: g.rank(),
            peer: self.source,
        })??;
        unbox::<B>(arrived.tensor)
    }

    fn adjoint(&self, _: &PairPlan) -> PostSend<X> {
        PostSend {
            queue: self.queue.clone(),
            role: self.role.adjoint(),
            dest: self.source,
            tag: Some(self.expect),
        }
    }
}

/// Post a receive from `source` onto the device of the (empty) input,
/// which passes through (an irecv, before its tensor's shape is known).
#[derive(Clone)]
pub(crate) struct PostRecv<X: Group> {
    pub(crate) queue: Arc<Queue<X>>,
    pub(crate) source: usize,
    pub(crate) want: Want,
    pub(crate) slot: Arc<Slot>,
}

impl<X: Group> core::fmt::Debug for PostRecv<X> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "PostRecv {{ source: {}, want: {:?} }}",
            self.source, self.want
        )
    }
}

impl<X: Group> LinearOp for PostRecv<X> {
    type Plan = ();
    type Adjoint = Self;

    fn role(&self) -> Role {
        Role::forward(TensorOp::Exchange)
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
        self.queue.post(Posted::Recv(PostedRecv {
            peer: self.source,
            want: self.want.clone(),
            receive: receive::<X, B>(x.device(), self.source),
            slot: self.slot.clone(),
        }));
        Ok(x)
    }

    fn adjoint(&self, _: &()) -> Self {
        self.clone()
    }
}

/// A received tensor, handed over from its slot in place of the (empty)
/// placeholder; its backward pass posts the gradient's send home.
#[derive(Clone)]
pub(crate) struct Delivered<X: Group> {
    pub(crate) queue: Arc<Queue<X>>,
    pub(crate) source: usize,
    pub(crate) tensor: Arc<Mutex<Option<Box<dyn Any + Send>>>>,
}

impl<X: Group> core::fmt::Debug for Delivered<X> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "Delivered {{ source: {} }}", self.source)
    }
}

impl<X: Group> LinearOp for Delivered<X> {
    type Plan = PairPlan;
    type Adjoint = PostSend<X>;

    fn role(&self) -> Role {
        Role::forward(TensorOp::Exchange)
    }

    fn plan<G: Group>(
        &self,
        _: &G,
        shape: &[usize],
        dtype: DType,
        tracked: bool,
    ) -> Result<PairPlan, Error> {
        Ok(PairPlan {
            shape: shape.to_vec(),
            dtype,
            tracked,
            tag: 0,
        })
    }

    fn forward<B: Backend, G: Group>(
        &self,
        _: &G,
        _: &PairPlan,
        _: FloatTensor<B>,
    ) -> Result<FloatTensor<B>, Error> {
        let t = lock(&self.tensor)
            .take()
            .ok_or_else(|| Error::UnsupportedTensor {
                message: "a received tensor was delivered twice".into(),
            })?;
        unbox::<B>(t)
    }

    fn adjoint(&self, plan: &PairPlan) -> PostSend<X> {
        PostSend {
            queue: self.queue.clone(),
            role: Role {
                op: TensorOp::Exchange,
                backward: true,
            },
            dest: self.source,
            tag: Some(plan.tag),
        }
    }
}
