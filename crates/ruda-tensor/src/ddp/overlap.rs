//! [`Overlap`]: gradients reduced over the replicas while the backward
//! pass is still computing the others (PyTorch DDP's communication hook).

use alloc::boxed::Box;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::any::Any;
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
use crate::error::{Error, OverlapProblem, TensorOp};
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
/// **Where the hooks run.** Burn runs the backward pass by depth in the
/// graph, deepest first. The first step learns the depth of the loss (its
/// hooks run at the end of the backward pass: no overlap yet); later steps
/// spread the hooks evenly over that depth in the module's order, which
/// puts each near the step of the layer that uses it when the module
/// declares its layers in the order its forward pass uses them. A hook
/// always runs after every use of its parameter, wherever it is placed.
///
/// **Bits.** Each bucket is reduced by the same collective as in
/// [`super::all_reduce_gradients_with`] with the same [`Buckets`] and
/// reduction (they start in another order; a collective's result does not
/// depend on when it starts), so for the same local gradients the result
/// is the same bits; the buckets are grouped alike once the same
/// parameters have gradients as in the last step (a parameter that starts
/// to have one is reduced alone at the end of its first step, which can
/// change the last bits where the transport's sum depends on the message
/// size: MPI across hosts with 3 or more of them). The local gradients are
/// Burn's, from a graph with the hooks in it: where a hook lies deeper
/// than its layer's other input, the layer's steps move deeper too, and a
/// tensor used by **three or more** operations, whose gradient Burn sums
/// in the order their steps run, can then get its parts summed in another
/// order — differing in its last bits. Models whose tensors have at most
/// two uses (chains, residual blocks, a weight used twice) get the same
/// bits as after `backward()` (tested); attention blocks, whose input feeds
/// the query, key and value projections and a residual, are in the other
/// case.
///
/// The reducing thread uses a communicator of its own
/// ([`Group::split`] of the group, made by [`Overlap::new`]), so collectives
/// of the model's own backward pass on `group` (a domain-decomposed
/// layer, a [`super::SyncBatchNorm`]) never meet the gradients' buckets.
/// Its collectives start when this rank's gradients are ready, so their
/// deadline (the group's) also covers the time the slowest peer still
/// needs for its backward pass.
///
/// A parameter without a gradient on some ranks counts as zeros there; one
/// without a gradient on every rank (unused, frozen) stays without one, as
/// after [`super::all_reduce_gradients`] (the ranks compare which
/// gradients came in one small exchange after the backward pass). One
/// tensor that appears twice in the module (a layer cloned into two
/// fields) gets one hook and the sum of both uses' gradients, once, as
/// after `backward()`.
///
/// After a failed or abandoned step the `Overlap` refuses further steps
/// ([`crate::OverlapProblem::Unusable`]): its communicator may be out of
/// step with the other ranks'.
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
    /// The depth of the first step's loss (0: no step yet). Learned once,
    /// from the step without anchors: later losses lie deeper where hooks
    /// made layers deeper, and learning from them would feed on itself.
    loss_depth: usize,
    /// Untracked anchors on one device: `ladder.1[k]` has depth `k`.
    ladder: Option<(Device, Vec<Tensor<1>>)>,
    /// The last finished step's report.
    report: Option<OverlapReport>,
    /// Which gradients came in the last finished step (the same on every
    /// rank: from the exchange after it).
    history: Option<History>,
    /// A step failed or was abandoned.
    failed: bool,
}

/// Which gradients came in a finished step, on some rank and on every
/// rank.
#[derive(Clone, Debug, PartialEq, Eq)]
struct History {
    used: Vec<bool>,
    everywhere: Vec<bool>,
}

impl History {
    /// A word that differs when two histories differ (almost surely).
    fn word(history: Option<&History>) -> i64 {
        match history {
            None => 0,
            Some(h) => {
                let bits: Vec<u64> = h
                    .used
                    .iter()
                    .chain(&h.everywhere)
                    .map(|&b| u64::from(b))
                    .collect();
                // Never 0 (no history), whatever the hash.
                (crate::shape_hash::mix(&bits) | 1) as i64
            }
        }
    }
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
        // Every rank passes a colour, so every rank gets a group.
        let comm = group
            .split(Some(0), group.rank() as i32)
            .map_err(|e| e.in_named_call(TensorOp::DdpOverlap.name()))?
            .expect("a split in which every rank has a colour gives every rank a group");
        Ok(Overlap {
            group: group.clone(),
            comm,
            buckets,
            loss_depth: 0,
            ladder: None,
            report: None,
            history: None,
            failed: false,
        })
    }

    /// Start one step: agree with the other ranks on the module's
    /// structure and on `reduction` (as [`super::all_reduce_gradients`]
    /// does), start the reducing thread, and return a copy of `module`
    /// whose trainable float parameters are hooked (a cheap copy: the
    /// parameters' values are shared). Run the forward pass on
    /// [`Attached::module`], then [`Attached::backward`]. The step borrows
    /// the `Overlap`, so two steps cannot share its communicator.
    ///
    /// # Errors
    /// [`Error::ModuleMismatch`] on every rank when the replicas' modules,
    /// reductions or buckets differ; [`Error::EmptyBatch`] for a weighted
    /// mean over no samples; [`Error::Overlap`] after a failed step
    /// ([`OverlapProblem::Unusable`]) or when the thread cannot start;
    /// [`Error::UnsupportedTensor`] for parameters on a backend ruda does
    /// not run on; the group's errors.
    ///
    /// # Example
    /// See [`Overlap`].
    pub fn attach<M: Module>(
        &mut self,
        module: &M,
        reduction: GradientReduction,
    ) -> Result<Attached<'_, M, G>, Error> {
        if self.failed {
            return Err(Error::Overlap {
                rank: self.group.rank(),
                problem: OverlapProblem::Unusable,
            });
        }
        // A step counts as failed until it returns its gradients: a rank
        // may fail after its peers agreed, and their communicators are then
        // no longer in step with this one's.
        self.failed = true;
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
        self.report
    }

    /// [`Overlap::attach`], with errors as its steps report them.
    fn start<M: Module>(
        &mut self,
        module: &M,
        reduction: GradientReduction,
    ) -> Result<Attached<'_, M, G>, Error> {
        let op = TensorOp::DdpOverlap;
        let me = self.group.rank();
        let mut visitor = Describe {
            entries: Vec::new(),
            trainable: Vec::new(),
            seen: Vec::new(),
        };
        module.visit(&mut visitor);
        let Describe {
            mut entries,
            trainable,
            ..
        } = visitor;
        let history = self
            .history
            .take()
            .filter(|h| h.used.len() == entries.len());
        let header = Header {
            op,
            words: [
                reduction.words()[0],
                reduction.words()[1],
                History::word(history.as_ref()),
            ],
            buckets: self.buckets,
        };
        let agreed = structure::agree(&self.group, header, &entries)?;
        let scale = agreed_scale(&self.group, op, reduction, &agreed)?;
        // Every rank sees every rank's history word: where they differ
        // (a rank missed the end of a step), every rank drops its history.
        let history =
            history.filter(|_| agreed.headers.iter().all(|w| w[2] == agreed.headers[0][2]));
        for e in &mut entries {
            e.data = None;
        }
        // Planned: trained on some rank now, and (after a step) with a
        // gradient on some rank last time, as the plain reduction plans
        // for the gradients there are.
        let planned: Vec<bool> = match &history {
            Some(h) => agreed
                .used
                .iter()
                .zip(&h.used)
                .map(|(&t, &u)| t && u)
                .collect(),
            None => agreed.used.clone(),
        };
        let shapes: Vec<(DType, usize)> = entries.iter().map(|e| (e.dtype, e.numel)).collect();
        let mut plan = structure::plan(&shapes, &planned, self.buckets);
        // The last layers' gradients come first: a bucket is ready when
        // its first parameter's gradient is, so the bucket whose first
        // parameter is the latest in the module goes first (the small
        // parameters of many layers packed together go when the earliest
        // of them is ready); but a bucket with a gradient that did not come
        // on every rank last step (a layer some rank skips) goes last,
        // where waiting for it holds up no other (its ranks learn it is
        // missing only when their backward pass ends). The same order on
        // every rank: the history is agreed.
        plan.sort_by_key(|b| {
            let late = history
                .as_ref()
                .is_some_and(|h| b.members.iter().any(|&i| !h.everywhere[i]));
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
            .name(alloc::format!("ruda-overlap-{me}"))
            .spawn(move || worker.run())
            .map_err(|e| Error::Overlap {
                rank: me,
                problem: OverlapProblem::Thread { kind: e.kind() },
            })?;

        // Taps at depths spread over the first loss's depth, in the
        // module's order (the first parameters are used first).
        let count = trainable.iter().filter(|&&t| t).count();
        let mut mapper = Hook {
            next: 0,
            position: 0,
            count,
            loss_depth: self.loss_depth,
            trainable: &trainable,
            tx: tx.clone(),
            ladder: &mut self.ladder,
            tapped: Vec::new(),
            failed: None,
        };
        let hooked = module.clone().map(&mut mapper);
        let failed = mapper.failed.take();
        let attached = Attached {
            module: hooked,
            entries,
            planned,
            tx,
            cancel,
            worker: Some(handle),
            done,
            buckets,
            depth: Arc::new(AtomicUsize::new(0)),
            trained: agreed.used.iter().any(|&u| u),
            overlap: self,
        };
        match failed {
            // Dropping the step stops its thread and marks the failure.
            Some(e) => Err(e),
            None => Ok(attached),
        }
    }
}

/// How much of one step's reduction [`Overlap`] hid behind its backward
/// pass ([`Overlap::report`]).
///
/// # Example
/// See [`Overlap::report`].
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
    /// The depth of the loss in Burn's graph that places the hooks
    /// (learned from the first step).
    pub loss_depth: usize,
}

/// One step of [`Overlap`]: the hooked module and the reducing thread.
///
/// Dropping it without [`Attached::backward`] abandons the step: the
/// thread stops, its peers' reductions end at the group's deadline, and
/// the `Overlap` refuses further steps.
///
/// A step borrows its `Overlap`, so a second step cannot start while one
/// is alive (their reductions would share a communicator):
///
/// ```compile_fail
/// use burn_nn::{Linear, LinearConfig};
/// use burn_tensor::Device;
/// use ruda_comm::LocalWorld;
/// use ruda_tensor::HostCollective;
/// use ruda_tensor::ddp::{GradientReduction, Overlap};
///
/// LocalWorld::new(1).run(|comm| {
///     let world = HostCollective::new(comm);
///     let model: Linear = LinearConfig::new(2, 1).init(&Device::flex().autodiff());
///     let mut overlap = Overlap::new(&world)?;
///     let first = overlap.attach(&model, GradientReduction::Sum)?;
///     let second = overlap.attach(&model, GradientReduction::Sum)?; // `overlap` is borrowed
///     drop((first, second));
///     Ok::<_, ruda_tensor::Error>(())
/// }).unwrap();
/// ```
#[must_use = "a step must end with Attached::backward, or its peers wait until the deadline"]
pub struct Attached<'a, M, G: Group> {
    overlap: &'a mut Overlap<G>,
    module: M,
    entries: Vec<Entry>,
    /// The parameters the thread's buckets carry.
    planned: Vec<bool>,
    tx: Sender<Message>,
    cancel: Arc<AtomicBool>,
    worker: Option<JoinHandle<Option<Result<Reduced, Error>>>>,
    /// Buckets the thread has reduced so far.
    done: Arc<AtomicUsize>,
    buckets: usize,
    /// The loss's depth, from the probe.
    depth: Arc<AtomicUsize>,
    /// Whether some rank trains some parameter.
    trained: bool,
}

impl<M, G: Group> core::fmt::Debug for Attached<'_, M, G> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Attached")
            .field("rank", &self.overlap.group.rank())
            .field("params", &self.entries.len())
            .field("buckets", &self.buckets)
            .finish_non_exhaustive()
    }
}

impl<M: Module, G: Group> Attached<'_, M, G> {
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
    /// call; [`Error::Overlap`] with [`OverlapProblem::NoGradients`] on
    /// every rank when no gradient of the module came on any rank (a loss
    /// not computed from [`Attached::module`]). After an error the
    /// `Overlap` refuses further steps.
    ///
    /// # Example
    /// See [`Overlap`].
    pub fn backward<const D: usize>(mut self, loss: Tensor<D>) -> Result<GradientsParams, Error> {
        self.run(loss)
            .map_err(|e| e.in_named_call(TensorOp::DdpOverlap.name()))
    }

    /// [`Attached::backward`], with errors as its steps report them.
    fn run<const D: usize>(&mut self, loss: Tensor<D>) -> Result<GradientsParams, Error> {
        let depth = self.depth.clone();
        let probed = routed!(loss, D, burn_tensor::Float, |B, t| {
            Ok::<_, Error>(<B as Tapped>::probe(t, depth))
        });
        let started = std::time::Instant::now();
        let backward = probed.and_then(|l| crate::try_backward(|| l.backward()));
        let ended = std::time::Instant::now();
        let reduced_during_backward = self.done.load(Ordering::Acquire);
        backward?;
        // Gradients that have not come never will (unused parameters).
        let _ = self.tx.send(Message::Flush);
        let reduced = match self.worker.take().map(JoinHandle::join) {
            Some(Ok(Some(r))) => r?,
            Some(Err(panic)) => std::panic::resume_unwind(panic),
            // Not cancelled, so the thread always answers.
            _ => unreachable!("the reducing thread ran to its end"),
        };
        let Reduced {
            mut results,
            mut slots,
            arrived,
            own,
        } = reduced;
        let me = self.overlap.group.rank();
        let (used, everywhere) = arrivals(&self.overlap.group, &arrived)?;
        if self.trained && !used.iter().any(|&u| u) {
            return Err(Error::Overlap {
                rank: me,
                problem: OverlapProblem::NoGradients,
            });
        }
        // Gradients the buckets did not plan for (a parameter without one
        // anywhere last step): each alone, in the module's order, the
        // same on every rank (from the exchange).
        for i in 0..used.len() {
            if used[i] && !self.planned[i] {
                let (numel, dtype) = (self.entries[i].numel, self.entries[i].dtype);
                let data = slots[i]
                    .take()
                    .unwrap_or_else(|| Tensor::zeros([numel], (&self.entries[i].device, dtype)));
                results[i] = Some(data.all_reduce(&self.overlap.comm)?);
            }
        }
        let exposed = ended.elapsed();
        let mut grads = GradientsParams::new();
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
        if self.overlap.loss_depth == 0 {
            self.overlap.loss_depth = self.depth.load(Ordering::Relaxed);
        }
        self.overlap.failed = false;
        self.overlap.history = Some(History { used, everywhere });
        self.overlap.report = Some(OverlapReport {
            buckets: self.buckets,
            reduced_during_backward,
            backward: ended - started,
            exposed,
            loss_depth: self.overlap.loss_depth,
        });
        Ok(grads)
    }
}

impl<M, G: Group> Drop for Attached<'_, M, G> {
    fn drop(&mut self) {
        // Cleanup only (a peer learns of this rank's absence from its
        // collectives' deadlines, never from this): a thread still
        // waiting for gradients stops; one in a collective ends with it
        // (by the group's deadline).
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
/// takes a gradient here (a second appearance of one tensor takes none:
/// the first carries the sum of both uses, as after `backward()`).
struct Describe {
    entries: Vec<Entry>,
    trainable: Vec<bool>,
    seen: Vec<u64>,
}

impl ModuleVisitor for Describe {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        let id = param.id;
        let value = param.val();
        let node = node_of(&value);
        let repeat = node.is_some_and(|n| self.seen.contains(&n));
        let trainable = value.is_require_grad() && !repeat;
        let dims = value.dims();
        let mut entry = Entry::new::<D>(id, &value, None);
        // What the agreement reads as "some rank has data": here, whether
        // some rank trains the parameter (its bucket is planned for).
        if trainable {
            entry.data = Some(Tensor::zeros([0], (&entry.device, entry.dtype)));
        }
        if !repeat {
            self.seen.extend(node);
            entry.restore = Some(Box::new(
                move |t: Tensor<1>, grads: &mut GradientsParams| {
                    grads.register::<D>(id, crate::reshape(t, dims));
                },
            ));
        }
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
    ladder: &'a mut Option<(Device, Vec<Tensor<1>>)>,
    /// The tapped values so far, by the graph node of the value (one
    /// tensor in two places gets one tapped value).
    tapped: Vec<(u64, Box<dyn Any>)>,
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
        if self.ladder.as_ref().is_none_or(|(d, _)| d != device) {
            *self.ladder = Some((device.clone(), alloc::vec![Tensor::<1>::zeros([1], device)]));
        }
        let (_, ladder) = self.ladder.as_mut().expect("made above");
        while ladder.len() < depth {
            let next = deeper(ladder[ladder.len() - 1].clone())?;
            ladder.push(next);
        }
        Ok(Some(ladder[depth - 1].clone()))
    }
}

impl ModuleMapper for Hook<'_> {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
        let index = self.next;
        self.next += 1;
        if self.failed.is_some() {
            return param;
        }
        let node = node_of(&param.val());
        if let Some((_, t)) = self.tapped.iter().find(|(n, _)| Some(*n) == node) {
            // The same tensor again: the same tapped value, so that its
            // one tap gets the sum of every use's gradient.
            return match t.downcast_ref::<Tensor<D>>() {
                Some(t) => {
                    let t = t.clone();
                    param.map(|_| t)
                }
                None => param,
            };
        }
        if !self.trainable.get(index).copied().unwrap_or(false) {
            return param;
        }
        let depth = self.depth(self.position);
        self.position += 1;
        param.map(|value| {
            let tap = Tap {
                index,
                tx: self.tx.clone(),
            };
            let tapped = self
                .anchor(&value.device(), depth)
                .and_then(|anchor| tap_tensor(value.clone(), anchor, tap));
            match tapped {
                Ok(t) => {
                    if let Some(n) = node {
                        self.tapped.push((n, Box::new(t.clone())));
                    }
                    t
                }
                Err(e) => {
                    self.failed = Some(e);
                    value
                }
            }
        })
    }
}

/// The graph node of `x`'s value (see [`Tapped::node`]).
fn node_of<const D: usize>(x: &Tensor<D>) -> Option<u64> {
    let mut node = None;
    let mut routed = |x: Tensor<D>| -> Result<Tensor<D>, Error> {
        routed!(x, D, burn_tensor::Float, |B, t| {
            node = <B as Tapped>::node(&t);
            Ok::<_, Error>(t)
        })
    };
    let _ = routed(x.clone());
    node
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
    /// Each planned parameter's reduced gradient, flattened, in its dtype.
    results: Vec<Option<Tensor<1>>>,
    /// This rank's gradients that no bucket carried (scaled, cast).
    slots: Vec<Option<Tensor<1>>>,
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
    /// Take one message, if one comes within [`POLL`]; `true` once the
    /// backward pass is over.
    fn receive(
        &self,
        slots: &mut [Option<Tensor<1>>],
        arrived: &mut [bool],
        own: &mut [DType],
    ) -> bool {
        match self.rx.recv_timeout(POLL) {
            Ok(Message::Grad { index, grad }) if index < arrived.len() && !arrived[index] => {
                arrived[index] = true;
                if !self.ignore {
                    own[index] = grad.dtype();
                    slots[index] = Some(for_the_sum(*grad, self.scale, self.metas[index].1));
                }
                false
            }
            Ok(Message::Grad { .. }) | Err(RecvTimeoutError::Timeout) => false,
            Ok(Message::Flush) | Err(RecvTimeoutError::Disconnected) => true,
        }
    }

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
                flushed = self.receive(&mut slots, &mut arrived, &mut own);
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
        // Gradients no bucket carries (not planned for) may still come.
        while !flushed {
            flushed = self.receive(&mut slots, &mut arrived, &mut own);
            if self.cancel.load(Ordering::Relaxed) {
                return None;
            }
        }
        if self.ignore {
            // Waited for, never counted.
            arrived.iter_mut().for_each(|a| *a = false);
        }
        Some(Ok(Reduced {
            results,
            slots,
            arrived,
            own,
        }))
    }
}
