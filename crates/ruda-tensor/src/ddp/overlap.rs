//! [`Overlap`]: gradients reduced over the replicas while the backward
//! pass is still computing the others (PyTorch DDP's communication hook).

use alloc::boxed::Box;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use core::time::Duration;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, channel};
use std::thread::JoinHandle;

use burn_core::module::{Module, ModuleMapper, ModuleVisitor, Param};
use burn_optim::GradientsParams;
use burn_tensor::{DType, Device, Tensor};

use super::buckets::Buckets;
use super::gradients::{GradientReduction, agreed_scale, for_the_sum};
use super::structure::{self, Bucket, Entry, Header, narrow_or_empty};
use super::tap::{Message, Tap, Tapped};
use crate::error::{Error, TensorOp};
use crate::group::Group;
use crate::methods::TensorExt;
use crate::route::routed;

/// Marks the arrival flags exchanged after the backward pass ("rudaOVL1").
const FLAGS: i64 = 0x7275_6461_4f56_4c31;

/// Arrival flags packed per exchanged word.
const FLAG_BITS: usize = 62;

/// How long the reducing thread waits for a gradient before it looks
/// whether its step was abandoned.
const POLL: Duration = Duration::from_millis(20);

/// Data-parallel gradient reduction overlapped with the backward pass.
///
/// [`Overlap::attach`] returns a copy of the module whose float parameters
/// carry a hook in Burn's autodiff graph; run the forward pass on it and
/// hand the loss to [`Attached::backward`]. As the backward pass finishes
/// each parameter's gradient, the hook hands it to a thread of the step's
/// own, which reduces the gradients over the group in buckets, the last
/// layers' first, while the backward pass goes on with the earlier ones;
/// [`Attached::backward`] returns the reduced gradients, ready for the
/// optimizer, when both are done.
///
/// **The same gradients, bit for bit, as [`super::all_reduce_gradients_with`]**
/// after `backward()` with the same [`Buckets`] and reduction: the same
/// buckets, each reduced by the same collective (they start in reverse
/// order; a collective's result does not depend on when it starts). The
/// local gradients are Burn's own, from a graph with the hooks in it: a
/// hook runs at the depth of the layer that used its parameter, and so
/// the backward pass takes every step of the plain graph in the same
/// order, except that a tensor used by three or more operations sums its
/// gradient contributions in the order their steps run, which hooks can
/// change where they make an operation deeper (a hook's depth is learned
/// from the previous step's loss, spread evenly over the parameters):
/// such a gradient can then differ in its last bits from the plain
/// graph's. A model whose tensors have at most two uses each (chains,
/// residual blocks, weights used twice) gets the same bits.
///
/// The first step learns the depth of the loss in Burn's tape, so its hooks
/// run only at the end of the backward pass (no overlap yet); from the
/// second step on they run where their gradients are ready.
///
/// The reducing thread uses a communicator of its own
/// ([`Group::split`] of the group, made by [`Overlap::new`]), so collectives
/// of the model's own backward pass on `group` (a domain-decomposed
/// layer, a [`super::SyncBatchNorm`]) never meet the gradients' buckets.
///
/// A parameter without a gradient on some ranks counts as zeros there; one
/// without a gradient on every rank (unused, frozen) stays without one, as
/// after [`super::all_reduce_gradients`] (the ranks compare which
/// gradients came in one small exchange after the backward pass).
///
/// # Example
/// ```
/// use burn_core::module::Module;
/// use burn_nn::{Linear, LinearConfig};
/// use burn_optim::{GradientsParams, ModuleOptimizer, SgdConfig};
/// use burn_tensor::{Device, Tensor};
/// use ruda_comm::LocalWorld;
/// use ruda_tensor::{Group, HostCollective};
/// use ruda_tensor::ddp::{GradientReduction, Overlap, broadcast_module};
///
/// let weights = LocalWorld::new(2).run(|comm| {
///     let world = HostCollective::new(comm);
///     let device = Device::flex().autodiff();
///     let model: Linear = LinearConfig::new(3, 2).init(&device);
///     let mut model = broadcast_module(&world, model, 0)?;
///     let mut optim: ModuleOptimizer = SgdConfig::new().init();
///     let mut overlap = Overlap::new(&world)?;
///     for _ in 0..3 {
///         let samples = 2 + world.rank(); // uneven shards
///         let x = Tensor::<2>::ones([samples, 3], &device);
///         let step = overlap.attach(&model, GradientReduction::WeightedMean { samples })?;
///         let loss = step.module().forward(x).mean();
///         let grads = step.backward(loss)?; // reduced while the backward pass ran
///         model = optim.step(0.1, model, grads);
///     }
///     Ok::<_, ruda_tensor::Error>(model.weight.val().into_data().try_to_vec::<f32>().unwrap())
/// }).unwrap();
/// assert_eq!(weights[0], weights[1]);
/// ```
#[derive(Debug)]
pub struct Overlap<G: Group> {
    /// The caller's group: the agreements.
    group: G,
    /// The reducing thread's communicator.
    comm: G,
    buckets: Buckets,
    /// The depth of the last backward pass's loss (0: none yet).
    loss_depth: Arc<AtomicUsize>,
    /// Untracked anchors: `ladder[k]` has depth `k`.
    ladder: Vec<Tensor<1>>,
    /// The last finished step's report.
    report: Arc<std::sync::Mutex<Option<OverlapReport>>>,
    /// Which gradients came on every rank in the last finished step (the
    /// same on every rank: from the exchange after it).
    everywhere: Arc<std::sync::Mutex<Option<Vec<bool>>>>,
}

impl<G: Group> Overlap<G> {
    /// Overlapped reduction over `group` with the default [`Buckets`]
    /// (collective: every rank of `group` calls it, to make the reducing
    /// thread's communicator).
    ///
    /// # Errors
    /// The group's errors from [`Group::split`].
    ///
    /// # Example
    /// ```
    /// use ruda_comm::LocalWorld;
    /// use ruda_tensor::HostCollective;
    /// use ruda_tensor::ddp::Overlap;
    /// LocalWorld::new(2)
    ///     .run(|comm| Overlap::new(&HostCollective::new(comm)).map(|_| ()))
    ///     .unwrap();
    /// ```
    pub fn new(group: &G) -> Result<Self, Error> {
        Self::with_buckets(group, Buckets::default())
    }

    /// [`Overlap::new`] with gradients grouped into collectives as
    /// `buckets` says (the same on every rank; otherwise
    /// [`Error::ModuleMismatch`] at [`Overlap::attach`]).
    ///
    /// # Errors
    /// As [`Overlap::new`].
    ///
    /// # Example
    /// ```
    /// use ruda_comm::LocalWorld;
    /// use ruda_tensor::HostCollective;
    /// use ruda_tensor::ddp::{Buckets, Overlap};
    /// let buckets = Buckets { alone_bytes: 1 << 20, bucket_bytes: 4 << 20 };
    /// LocalWorld::new(2)
    ///     .run(|comm| Overlap::with_buckets(&HostCollective::new(comm), buckets).map(|_| ()))
    ///     .unwrap();
    /// ```
    pub fn with_buckets(group: &G, buckets: Buckets) -> Result<Self, Error> {
        let comm = group
            .split(Some(0), group.rank() as i32)
            .map_err(|e| e.in_named_call(TensorOp::DdpOverlap.name()))?
            .ok_or_else(|| Error::Backend {
                op: TensorOp::DdpOverlap,
                rank: group.rank(),
                message: "splitting the group with every rank in gave no group".into(),
            })?;
        Ok(Overlap {
            group: group.clone(),
            comm,
            buckets,
            loss_depth: Arc::new(AtomicUsize::new(0)),
            ladder: Vec::new(),
            report: Arc::default(),
            everywhere: Arc::default(),
        })
    }

    /// Start one step: agree with the other ranks on the module's
    /// structure and on `reduction` (as [`super::all_reduce_gradients`]
    /// does), start the reducing thread, and return a copy of `module`
    /// whose trainable float parameters are hooked (a cheap copy: the
    /// parameters' values are shared). Run the forward pass on
    /// [`Attached::module`], then [`Attached::backward`].
    ///
    /// # Errors
    /// [`Error::ModuleMismatch`] on every rank when the replicas' modules,
    /// reductions or buckets differ; [`Error::EmptyBatch`] for a weighted
    /// mean over no samples; the group's errors.
    ///
    /// # Example
    /// See [`Overlap`].
    pub fn attach<M: Module>(
        &mut self,
        module: &M,
        reduction: GradientReduction,
    ) -> Result<Attached<M, G>, Error> {
        self.start(module, reduction)
            .map_err(|e| e.in_named_call(TensorOp::DdpOverlap.name()))
    }

    /// How the last step that returned its gradients went (`None`
    /// before the first).
    ///
    /// # Example
    /// ```
    /// use burn_nn::{Linear, LinearConfig};
    /// use burn_tensor::{Device, Tensor};
    /// use ruda_comm::LocalWorld;
    /// use ruda_tensor::HostCollective;
    /// use ruda_tensor::ddp::{GradientReduction, Overlap};
    ///
    /// LocalWorld::new(2).run(|comm| {
    ///     let world = HostCollective::new(comm);
    ///     let device = Device::flex().autodiff();
    ///     let model: Linear = LinearConfig::new(3, 2).init(&device);
    ///     let mut overlap = Overlap::new(&world)?;
    ///     assert!(overlap.report().is_none());
    ///     let step = overlap.attach(&model, GradientReduction::Mean)?;
    ///     let loss = step.module().forward(Tensor::<2>::ones([2, 3], &device)).mean();
    ///     step.backward(loss)?;
    ///     let report = overlap.report().unwrap();
    ///     assert_eq!(report.buckets, 1); // weight and bias in one bucket
    ///     assert!(report.reduced_during_backward <= report.buckets);
    ///     Ok::<_, ruda_tensor::Error>(())
    /// }).unwrap();
    /// ```
    pub fn report(&self) -> Option<OverlapReport> {
        *self
            .report
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// [`Overlap::attach`], with errors as its steps report them.
    fn start<M: Module>(
        &mut self,
        module: &M,
        reduction: GradientReduction,
    ) -> Result<Attached<M, G>, Error> {
        let op = TensorOp::DdpOverlap;
        let mut visitor = Describe {
            entries: Vec::new(),
            trainable: Vec::new(),
        };
        module.visit(&mut visitor);
        let Describe {
            mut entries,
            trainable,
        } = visitor;
        let header = Header {
            op,
            words: [reduction.words()[0], reduction.words()[1], 0],
            buckets: self.buckets,
        };
        let agreed = structure::agree(&self.group, header, &entries)?;
        let scale = agreed_scale(&self.group, op, reduction, &agreed)?;
        for e in &mut entries {
            e.data = None;
        }
        let shapes: Vec<(DType, usize)> = entries.iter().map(|e| (e.dtype, e.numel)).collect();
        let mut plan = structure::plan(&shapes, &agreed.used, self.buckets);
        // The last layers' gradients come first: a bucket is ready when
        // its first parameter's gradient is, so the bucket whose first
        // parameter is the latest in the module goes first (the small
        // parameters of many layers packed together go when the earliest
        // of them is ready); but a bucket with a gradient that did not come on every rank
        // last step (a layer some rank skips) goes last, where waiting for
        // it holds up no other (its ranks learn it is missing only when
        // their backward pass ends). The same order on every rank: the
        // history is from the exchange after the last step.
        let everywhere = self
            .everywhere
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
            .filter(|e| e.len() == entries.len());
        plan.sort_by_key(|b| {
            let late = everywhere
                .as_ref()
                .is_some_and(|e| b.members.iter().any(|&i| !e[i]));
            (late, core::cmp::Reverse(b.members.iter().copied().min()))
        });

        let (tx, rx) = channel();
        let cancel = Arc::new(AtomicBool::new(false));
        let done = Arc::new(AtomicUsize::new(0));
        let buckets = plan.len();
        let worker = Worker {
            done: done.clone(),
            comm: self.comm.clone(),
            plan,
            metas: entries
                .iter()
                .map(|e| (e.numel, e.dtype, e.device.clone()))
                .collect(),
            scale,
            ignore: matches!(reduction, GradientReduction::WeightedMean { samples: 0 }),
            rx,
            cancel: cancel.clone(),
        };
        let handle = std::thread::Builder::new()
            .name(alloc::format!("ruda-overlap-{}", self.group.rank()))
            .spawn(move || worker.run())
            .map_err(|e| Error::Backend {
                op,
                rank: self.group.rank(),
                message: alloc::format!("cannot start the reducing thread: {e}"),
            })?;

        // Taps at depths spread over the last loss's depth, in the
        // module's order (the first parameters are used first).
        let count = trainable.iter().filter(|&&t| t).count();
        let loss_depth = self.loss_depth.load(Ordering::Relaxed);
        let mut mapper = Hook {
            next: 0,
            position: 0,
            count,
            loss_depth,
            trainable: &trainable,
            tx: tx.clone(),
            ladder: &mut self.ladder,
            failed: None,
        };
        let hooked = module.clone().map(&mut mapper);
        let failed = mapper.failed.take();
        let attached = Attached {
            module: hooked,
            group: self.group.clone(),
            entries,
            tx,
            cancel,
            worker: Some(handle),
            loss_depth: self.loss_depth.clone(),
            done,
            buckets,
            report: self.report.clone(),
            everywhere: self.everywhere.clone(),
        };
        match failed {
            Some(e) => Err(e),
            None => Ok(attached),
        }
    }
}

/// How much of one step's reduction [`Overlap`] hid behind its backward
/// pass ([`Overlap::report`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OverlapReport {
    /// Collectives the step's gradients took.
    pub buckets: usize,
    /// Of those, the ones finished before the backward pass ended.
    pub reduced_during_backward: usize,
    /// The backward pass's wall time.
    pub backward: Duration,
    /// The time from the end of the backward pass until every bucket was
    /// reduced: the communication left exposed.
    pub exposed: Duration,
}

/// One step of [`Overlap`]: the hooked module and the reducing thread.
///
/// Dropping it without [`Attached::backward`] abandons the step: the
/// thread stops (peers in the step then report a timeout or a peer
/// failure from its collectives).
pub struct Attached<M, G: Group> {
    module: M,
    group: G,
    entries: Vec<Entry>,
    tx: Sender<Message>,
    cancel: Arc<AtomicBool>,
    worker: Option<JoinHandle<Option<Result<Reduced, Error>>>>,
    loss_depth: Arc<AtomicUsize>,
    /// Buckets the thread has reduced so far.
    done: Arc<AtomicUsize>,
    buckets: usize,
    report: Arc<std::sync::Mutex<Option<OverlapReport>>>,
    everywhere: Arc<std::sync::Mutex<Option<Vec<bool>>>>,
}

impl<M, G: Group> core::fmt::Debug for Attached<M, G> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Attached")
            .field("rank", &self.group.rank())
            .field("params", &self.entries.len())
            .finish_non_exhaustive()
    }
}

impl<M: Module, G: Group> Attached<M, G> {
    /// The hooked copy of the module: run the forward pass on it.
    ///
    /// # Example
    /// See [`Overlap`].
    pub fn module(&self) -> &M {
        &self.module
    }

    /// Run the backward pass from `loss` (every rank's), reducing the
    /// gradients as they come, and return them reduced over the group
    /// for the optimizer (with the parameter ids of the module given to
    /// [`Overlap::attach`]).
    ///
    /// # Errors
    /// A collective of the model's own backward pass that fails (as
    /// [`crate::try_backward`]); the reducing thread's collectives' errors
    /// (a peer that stopped or never ran its backward pass: a timeout at
    /// the group's deadline); [`Error::Record`] when a peer is in another
    /// call.
    ///
    /// # Example
    /// See [`Overlap`].
    pub fn backward<const D: usize>(mut self, loss: Tensor<D>) -> Result<GradientsParams, Error> {
        let result = self.run(loss);
        result.map_err(|e| e.in_named_call(TensorOp::DdpOverlap.name()))
    }

    /// [`Attached::backward`], with errors as its steps report them.
    fn run<const D: usize>(&mut self, loss: Tensor<D>) -> Result<GradientsParams, Error> {
        let depth = self.loss_depth.clone();
        let probed = routed!(loss, D, burn_tensor::Float, |B, t| {
            Ok::<_, Error>(<B as Tapped>::probe(t, depth))
        });
        let started = std::time::Instant::now();
        let backward = probed.and_then(|l| crate::try_backward(|| l.backward()));
        if let Err(e) = backward {
            self.stop();
            return Err(e);
        }
        let ended = std::time::Instant::now();
        let reduced_during_backward = self.done.load(Ordering::Acquire);
        // Gradients that have not come never will (unused parameters).
        let _ = self.tx.send(Message::Flush);
        let reduced = match self.worker.take().map(JoinHandle::join) {
            Some(Ok(Some(r))) => r?,
            Some(Err(panic)) => std::panic::resume_unwind(panic),
            // Not cancelled, so the thread always answers.
            _ => unreachable!("the reducing thread ran to its end"),
        };
        *self
            .report
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(OverlapReport {
            buckets: self.buckets,
            reduced_during_backward,
            backward: ended - started,
            exposed: ended.elapsed(),
        });
        let (used, everywhere) = arrivals(&self.group, &reduced.arrived)?;
        *self
            .everywhere
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(everywhere);
        let mut grads = GradientsParams::new();
        let Reduced {
            mut results,
            arrived,
            own,
        } = reduced;
        for (i, entry) in core::mem::take(&mut self.entries).into_iter().enumerate() {
            if !used[i] {
                continue;
            }
            if let (Some(t), Some(restore)) = (results[i].take(), entry.restore) {
                let own = if arrived[i] { own[i] } else { entry.dtype };
                let t = if t.dtype() == own { t } else { t.cast(own) };
                restore(t, &mut grads);
            }
        }
        Ok(grads)
    }

    /// Tell the thread to stop and wait for it (bounded: a collective it
    /// is in ends by the group's deadline).
    fn stop(&mut self) {
        self.cancel.store(true, Ordering::Relaxed);
        if let Some(handle) = self.worker.take() {
            let _ = handle.join();
        }
    }
}

impl<M, G: Group> Drop for Attached<M, G> {
    fn drop(&mut self) {
        // Cleanup only (a peer learns of this rank's absence from its
        // collectives' deadlines, never from this).
        self.cancel.store(true, Ordering::Relaxed);
        if let Some(handle) = self.worker.take() {
            let _ = handle.join();
        }
    }
}

/// Whether some rank's gradient came for each parameter, and whether
/// every rank's did.
///
/// # Errors
/// The group's errors; [`Error::Record`] when a peer is in another call.
fn arrivals<G: Group>(group: &G, arrived: &[bool]) -> Result<(Vec<bool>, Vec<bool>), Error> {
    let op = TensorOp::DdpOverlap;
    let mut words = alloc::vec![FLAGS, op.code()];
    for chunk in arrived.chunks(FLAG_BITS) {
        let bits = chunk
            .iter()
            .enumerate()
            .fold(0i64, |w, (b, &a)| w | (i64::from(a) << b));
        words.push(bits);
    }
    let all = group.exchange_words(&words)?;
    let fields = [("record marker", FLAGS), ("operation", op.code())];
    structure::check_records(group, op, &all, words.len(), &fields)?;
    let mut used = alloc::vec![false; arrived.len()];
    let mut everywhere = alloc::vec![true; arrived.len()];
    for theirs in all.chunks(words.len()) {
        for (i, (u, e)) in used.iter_mut().zip(&mut everywhere).enumerate() {
            let came = theirs[2 + i / FLAG_BITS] >> (i % FLAG_BITS) & 1 == 1;
            *u |= came;
            *e &= came;
        }
    }
    Ok((used, everywhere))
}

/// Every float parameter of a module, in visiting order, and whether it
/// takes a gradient here.
struct Describe {
    entries: Vec<Entry>,
    trainable: Vec<bool>,
}

impl ModuleVisitor for Describe {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        let id = param.id;
        let value = param.val();
        let trainable = value.is_require_grad();
        let dims = value.dims();
        let mut entry = Entry::new::<D>(id, &value, None);
        // What the agreement reads as "some rank has data": here, whether
        // some rank trains the parameter (its bucket is planned for).
        if trainable {
            entry.data = Some(Tensor::zeros([0], (&entry.device, entry.dtype)));
        }
        entry.restore = Some(Box::new(
            move |t: Tensor<1>, grads: &mut GradientsParams| {
                grads.register::<D>(id, crate::reshape(t, dims));
            },
        ));
        self.entries.push(entry);
        self.trainable.push(trainable);
    }
}

/// Puts a tap on every trainable float parameter.
struct Hook<'a> {
    /// The next parameter's index in visiting order.
    next: usize,
    /// The next trainable parameter's position among the trainable ones.
    position: usize,
    count: usize,
    loss_depth: usize,
    trainable: &'a [bool],
    tx: Sender<Message>,
    ladder: &'a mut Vec<Tensor<1>>,
    failed: Option<Error>,
}

impl Hook<'_> {
    /// The depth of the tap of the trainable parameter at `position`: the
    /// loss's depth spread evenly over the parameters in the module's
    /// order (1, the end of the backward pass, before a loss was seen).
    fn depth(&self, position: usize) -> usize {
        if self.loss_depth < 2 || self.count == 0 {
            return 1;
        }
        let spread = (position as u128) * (self.loss_depth as u128 - 1) / (self.count as u128);
        usize::try_from(spread).unwrap_or(usize::MAX).max(1)
    }

    /// An untracked tensor of depth `depth - 1` on `device`, if `depth`
    /// is above 1 (`None`: the tap's own depth, 1, is right).
    fn anchor(&mut self, device: &Device, depth: usize) -> Result<Option<Tensor<1>>, Error> {
        if depth < 2 {
            return Ok(None);
        }
        if self.ladder.is_empty() {
            self.ladder.push(Tensor::<1>::zeros([1], device));
        }
        while self.ladder.len() < depth {
            let last = self.ladder[self.ladder.len() - 1].clone();
            let next = deeper(last)?;
            self.ladder.push(next);
        }
        Ok(Some(self.ladder[depth - 1].clone()))
    }
}

impl ModuleMapper for Hook<'_> {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
        let index = self.next;
        self.next += 1;
        if !self.trainable.get(index).copied().unwrap_or(false) || self.failed.is_some() {
            return param;
        }
        let depth = self.depth(self.position);
        self.position += 1;
        param.map(|value| {
            let tap = Tap {
                index,
                tx: self.tx.clone(),
            };
            let anchor = match self.anchor(&value.device(), depth) {
                Ok(a) => a,
                Err(e) => {
                    self.failed = Some(e);
                    return value;
                }
            };
            match tap_tensor(value.clone(), anchor, tap) {
                Ok(t) => t,
                Err(e) => {
                    self.failed = Some(e);
                    value
                }
            }
        })
    }
}

/// `x` one level deeper (see [`Tapped::deeper`]).
fn deeper<const D: usize>(x: Tensor<D>) -> Result<Tensor<D>, Error> {
    routed!(x, D, burn_tensor::Float, |B, t| Ok::<_, Error>(
        <B as Tapped>::deeper(t)
    ))
}

/// `x` with a tap (see [`Tapped::tap`]); an anchor on another backend
/// than `x`'s is left out (the tap then runs at the end of the backward
/// pass).
fn tap_tensor<const D: usize>(
    x: Tensor<D>,
    anchor: Option<Tensor<1>>,
    tap: Tap,
) -> Result<Tensor<D>, Error> {
    routed!(x, D, burn_tensor::Float, |B, t| {
        let anchor = anchor.and_then(|a| a.try_into_primitive::<B>().ok());
        Ok::<_, Error>(<B as Tapped>::tap(t, anchor, tap))
    })
}

/// What the reducing thread hands back.
struct Reduced {
    /// Each parameter's reduced gradient, flattened, in its dtype (`None`
    /// for parameters no rank trains).
    results: Vec<Option<Tensor<1>>>,
    /// Whether this rank's gradient came for each parameter.
    arrived: Vec<bool>,
    /// The dtype this rank's gradient had (where it came).
    own: Vec<DType>,
}

/// The reducing thread's work: wait for each bucket's gradients in plan
/// order, reduce it, go on.
struct Worker<G> {
    comm: G,
    /// Buckets reduced so far.
    done: Arc<AtomicUsize>,
    plan: Vec<Bucket>,
    /// Each parameter's element count, dtype and device.
    metas: Vec<(usize, DType, Device)>,
    scale: Option<f64>,
    /// A weighted mean over no samples here: this rank's gradients count
    /// as zeros (not even a NaN from a mean over nothing is read).
    ignore: bool,
    rx: Receiver<Message>,
    cancel: Arc<AtomicBool>,
}

impl<G: Group> Worker<G> {
    /// Reduce every bucket; `None` when the step was abandoned.
    fn run(self) -> Option<Result<Reduced, Error>> {
        let n = self.metas.len();
        let mut slots: Vec<Option<Tensor<1>>> = (0..n).map(|_| None).collect();
        let mut arrived = alloc::vec![false; n];
        let mut own: Vec<DType> = self.metas.iter().map(|m| m.1).collect();
        let mut results: Vec<Option<Tensor<1>>> = (0..n).map(|_| None).collect();
        let mut flushed = false;
        for bucket in &self.plan {
            while !flushed && bucket.members.iter().any(|&i| !arrived[i]) {
                match self.rx.recv_timeout(POLL) {
                    Ok(Message::Grad { index, grad }) if index < n && !arrived[index] => {
                        arrived[index] = true;
                        if !self.ignore {
                            own[index] = grad.dtype();
                            slots[index] =
                                Some(for_the_sum(*grad, self.scale, self.metas[index].1));
                        }
                    }
                    Ok(Message::Grad { .. }) => {}
                    Ok(Message::Flush) | Err(RecvTimeoutError::Disconnected) => flushed = true,
                    Err(RecvTimeoutError::Timeout) => {}
                }
                if self.cancel.load(Ordering::Relaxed) {
                    return None;
                }
            }
            if self.cancel.load(Ordering::Relaxed) {
                return None;
            }
            let flats: Vec<Tensor<1>> = bucket
                .members
                .iter()
                .map(|&i| {
                    slots[i].take().unwrap_or_else(|| {
                        let (numel, dtype, device) = &self.metas[i];
                        Tensor::zeros([*numel], (device, *dtype))
                    })
                })
                .collect();
            let data = if bucket.alone {
                flats.into_iter().next().expect("a bucket has a member")
            } else {
                Tensor::cat(flats, 0)
            };
            let out = match data.all_reduce(&self.comm) {
                Ok(out) => out,
                Err(e) => return Some(Err(e)),
            };
            self.done.fetch_add(1, Ordering::Release);
            let mut start = 0;
            for &i in &bucket.members {
                let len = self.metas[i].0;
                results[i] = Some(if bucket.alone {
                    out.clone()
                } else {
                    narrow_or_empty(&out, start, len)
                });
                start += len;
            }
        }
        if self.ignore {
            // Waited for, never counted.
            arrived.iter_mut().for_each(|a| *a = false);
        }
        Some(Ok(Reduced {
            results,
            arrived,
            own,
        }))
    }
}
