//! [`Sharded`]: data-parallel steps with the optimizer state (ZeRO stage
//! 1) and the reduced gradients (stage 2) divided among the ranks.

use alloc::collections::BTreeMap;
use alloc::vec::Vec;

use core::ops::Range;

use burn_core::module::{Module, ModuleVisitor, Param};
use burn_optim::{GradientsParams, LearningRate, ModuleOptimizer};
use burn_tensor::{DType, Device, Tensor};

use super::broadcast::Assign;
use super::buckets::Buckets;
use super::buffers::{BufferSync, sync_buffers};
use super::gradients::{GradientReduction, Prepared, prepare, restore};
use super::structure::{self, Entry};
use crate::error::{Error, ModuleProblem, TensorOp};
use crate::group::Group;
use crate::methods::TensorExt;

/// What a [`Sharded`] step divides among the ranks (ZeRO, Rajbhandari et
/// al. 2020; PyTorch's `ZeroRedundancyOptimizer` is stage 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ZeroStage {
    /// The optimizer state: each parameter is stepped by one rank, its
    /// owner, which alone holds its optimizer state; the gradients are
    /// all-reduced as in plain data parallelism.
    One,
    /// The optimizer state and the reduced gradients: the gradients are
    /// reduce-scattered, each owner receiving the sums of its parameters'
    /// gradients only.
    Two,
}

impl ZeroStage {
    /// The word this stage contributes to the agreement.
    fn code(self) -> i64 {
        match self {
            ZeroStage::One => 1,
            ZeroStage::Two => 2,
        }
    }

    /// The name of the stage a code stands for, for messages.
    fn name_of(code: i64) -> &'static str {
        match code {
            1 => "ZeRO stage 1",
            2 => "ZeRO stage 2",
            _ => "unknown",
        }
    }
}

/// A data-parallel step with sharded optimizer state: ZeRO stage 1 or 2
/// over Burn's `ModuleOptimizer`.
///
/// Every float parameter has one owner rank (whole parameters, in the
/// module's order, each to the rank with the fewest bytes so far, counting
/// every float value, buffers and frozen parameters included, so that the
/// assignment depends only on the module's structure: the same on every
/// rank, from step to step, and when a checkpoint is loaded). After `backward()`,
/// [`Sharded::step`] reduces the gradients (all-reduce for stage 1,
/// reduce-scatter for stage 2), steps the optimizer on the parameters this
/// rank owns only — so `optim` creates and keeps state for those only,
/// about 1/n of it with Adam's two moments — then all-gathers the updated
/// parameters and syncs the buffers as [`super::step`] does. The replicas
/// end every step bit for bit equal, and (on the in-process and
/// device-resident transports, which sum ranks in rank order in every
/// collective) bit for bit equal to plain [`super::step`] with the same
/// optimizer.
///
/// Stage 3 (parameters sharded between steps, gathered layer by layer in
/// the forward pass, as FSDP does) is not offered: a Burn `Module` holds
/// its parameters as values that its forward pass reads directly, with no
/// hook before each layer where a gather could run.
///
/// # Example
/// ```
/// use burn_core::module::Module;
/// use burn_nn::{Linear, LinearConfig};
/// use burn_optim::{AdamConfig, GradientsParams};
/// use burn_tensor::{Device, Tensor};
/// use ruda_comm::LocalWorld;
/// use ruda_tensor::HostCollective;
/// use ruda_tensor::ddp::{GradientReduction, Sharded, ZeroStage, broadcast_module, check_replicas};
///
/// LocalWorld::new(2).run(|comm| {
///     let world = HostCollective::new(comm);
///     let device = Device::flex().autodiff();
///     let model: Linear = LinearConfig::new(4, 3).init(&device);
///     let mut model = broadcast_module(&world, model, 0)?;
///     let mut optim = AdamConfig::new().init();
///     let sharded = Sharded::new(ZeroStage::Two);
///     let loss = model.forward(Tensor::<2>::ones([2, 4], &device)).mean();
///     let grads = GradientsParams::from_grads(loss.backward(), &model);
///     model = sharded.step(&world, &mut optim, 0.1, model, grads, GradientReduction::Mean)?;
///     check_replicas(&world, &model)?;
///     // The weight has one owner and the bias the other: one Adam state each.
///     assert_eq!(optim.to_record().len(), 2);
///     Ok::<_, ruda_tensor::Error>(())
/// }).unwrap();
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sharded {
    /// What is sharded.
    pub stage: ZeroStage,
    /// How the buffers are made equal after each step.
    pub buffers: BufferSync,
    /// How the transfers are cut: stage 1 all-reduces the gradients in
    /// these buckets; the reduce-scatter (stage 2) and the all-gather of
    /// the parameters move runs of consecutive parameters of about
    /// `bucket_bytes` each, so they hold one such run at a time besides
    /// the model. A run holds at least one parameter, and stage 2 pads
    /// every owner's segment of a run to the longest: a parameter larger
    /// than `bucket_bytes / ranks` moves in a run of its own of
    /// `ranks ×` its size, mostly zeros (the price of a reduce-scatter
    /// without uneven chunks). Every rank must pass the same.
    pub buckets: Buckets,
}

impl Sharded {
    /// Steps of `stage`, with the buffers broadcast from rank 0.
    pub fn new(stage: ZeroStage) -> Self {
        Sharded {
            stage,
            buffers: BufferSync::default(),
            buckets: Buckets::default(),
        }
    }

    /// One sharded data-parallel step after `backward()`: reduce `grads`
    /// over `group` as `reduction` says, step `optim` with learning rate
    /// `lr` on the parameters this rank owns, give every rank every updated
    /// parameter, and sync the buffers. `optim` must be used for this
    /// module's sharded steps only, with the same group.
    ///
    /// # Errors
    /// As [`super::all_reduce_gradients`] (the call named
    /// `ddp::Sharded::step`) and [`super::sync_buffers`]; the group's
    /// errors.
    ///
    /// # Example
    /// See [`Sharded`].
    pub fn step<M: Module, G: Group>(
        &self,
        group: &G,
        optim: &mut ModuleOptimizer,
        lr: LearningRate,
        module: M,
        grads: GradientsParams,
        reduction: GradientReduction,
    ) -> Result<M, Error> {
        let module = self
            .sharded_step(group, optim, lr, module, grads, reduction)
            .map_err(|e| e.in_named_call(TensorOp::DdpSharded.name()))?;
        sync_buffers(group, module, self.buffers)
    }

    fn sharded_step<M: Module, G: Group>(
        &self,
        group: &G,
        optim: &mut ModuleOptimizer,
        lr: LearningRate,
        module: M,
        grads: GradientsParams,
        reduction: GradientReduction,
    ) -> Result<M, Error> {
        let me = group.rank();
        let n = group.size();
        let buckets = self.buckets;
        let Prepared {
            entries,
            used,
            mut grads,
            variants,
        } = prepare(
            group,
            &module,
            grads,
            reduction,
            buckets,
            TensorOp::DdpSharded,
            self.stage.code(),
        )?;
        if let Some((r, &v)) = variants
            .iter()
            .enumerate()
            .find(|(_, v)| **v != variants[0])
        {
            return Err(Error::ModuleMismatch {
                op: TensorOp::DdpSharded,
                rank: me,
                offender: r,
                reference: 0,
                problem: ModuleProblem::Stage {
                    expected: ZeroStage::name_of(variants[0]),
                    got: ZeroStage::name_of(v),
                },
            });
        }
        let owners = owners(&entries, n);
        // What the transfers need: each stepped entry's id, dtype, size
        // and owner, in chunks of consecutive parameters.
        let slots: Vec<Slot> = entries
            .iter()
            .enumerate()
            .filter(|(i, _)| used[*i])
            .map(|(i, e)| Slot {
                index: i,
                id: e.id.val(),
                dtype: e.dtype,
                numel: e.numel,
                owner: owners[i],
            })
            .collect();
        let chunks = chunks(&slots, n, buckets.bucket_bytes);
        match self.stage {
            ZeroStage::One => {
                // Each id's owner (a tied parameter's first entry, the one
                // its gradient is in).
                let mut owner_of = BTreeMap::new();
                for (e, &o) in entries.iter().zip(&owners) {
                    owner_of.entry(e.id.val()).or_insert(o);
                }
                structure::per_bucket(
                    entries,
                    &used,
                    buckets,
                    |bucket| bucket.all_reduce(group),
                    |entry, reduced| {
                        if owner_of.get(&entry.id.val()) == Some(&me) {
                            restore(entry, reduced, &mut grads);
                        }
                    },
                )?;
            }
            ZeroStage::Two => {
                let mut entries: Vec<Option<Entry>> = entries.into_iter().map(Some).collect();
                for chunk in &chunks {
                    reduce_scatter_chunk(group, &slots[chunk.clone()], &mut entries, &mut grads)?;
                }
            }
        }
        let mut module = optim.step(lr, module, grads);
        for chunk in &chunks {
            module = gather_chunk(group, module, &slots[chunk.clone()])?;
        }
        Ok(module)
    }
}

/// A parameter some rank steps: where its entry is, what it holds, and
/// who owns it.
struct Slot {
    index: usize,
    id: u64,
    dtype: DType,
    numel: usize,
    owner: usize,
}

/// The owner of each entry: in order, each to the rank with the fewest
/// bytes so far (the lowest such rank on ties). It depends only on the
/// agreed structure (dtypes and sizes) and the group's size, so every rank
/// computes the same owners, at every step.
pub(super) fn owners(entries: &[Entry], ranks: usize) -> Vec<usize> {
    let mut load = alloc::vec![0usize; ranks.max(1)];
    entries
        .iter()
        .map(|e| {
            let (owner, _) = load
                .iter()
                .enumerate()
                .min_by_key(|&(r, &bytes)| (bytes, r))
                .expect("at least one rank");
            load[owner] = load[owner].saturating_add(e.numel.saturating_mul(e.dtype.size()));
            owner
        })
        .collect()
}

/// `slots` cut into runs of consecutive slots of one dtype, each moving
/// at most about `bytes` through one collective (every owner's segment
/// padded to the longest, so `ranks ×` the longest segment), and at least
/// one slot: the transfers then hold one chunk at a time besides the
/// model, not a second copy of it.
fn chunks(slots: &[Slot], ranks: usize, bytes: usize) -> Vec<Range<usize>> {
    let mut out = Vec::new();
    let mut start = 0;
    while start < slots.len() {
        let dtype = slots[start].dtype;
        let mut per = alloc::vec![0usize; ranks];
        let mut end = start;
        while end < slots.len() && slots[end].dtype == dtype {
            let s = &slots[end];
            per[s.owner] = per[s.owner].saturating_add(s.numel);
            let longest = per.iter().copied().max().unwrap_or(0);
            let moved = longest.saturating_mul(ranks).saturating_mul(dtype.size());
            if end > start && moved > bytes {
                break;
            }
            end += 1;
        }
        out.push(start..end);
        start = end;
    }
    out
}

/// The longest owner's segment of `slots` (elements), every segment
/// padded to it.
fn segment_len(slots: &[Slot], ranks: usize) -> usize {
    let mut per = alloc::vec![0usize; ranks];
    for s in slots {
        per[s.owner] = per[s.owner].saturating_add(s.numel);
    }
    per.into_iter().max().unwrap_or(0)
}

/// ZeRO stage 2's reduction of one chunk: every rank's gradients of the
/// chunk laid out owner by owner (each owner's parameters in the module's
/// order, zeros where this rank has none, each segment padded to the
/// longest), summed by one reduce-scatter that leaves each rank its own
/// segment; the owned parameters' sums are registered in `grads`.
fn reduce_scatter_chunk<G: Group>(
    group: &G,
    slots: &[Slot],
    entries: &mut [Option<Entry>],
    grads: &mut GradientsParams,
) -> Result<(), Error> {
    let me = group.rank();
    let n = group.size();
    let len = segment_len(slots, n);
    let Some(first) = slots.first().filter(|_| len > 0) else {
        return Ok(());
    };
    let dtype = first.dtype;
    let device = entries[first.index]
        .as_ref()
        .expect("each slot taken once")
        .device
        .clone();
    let mut flats = Vec::new();
    for owner in 0..n {
        let mut filled = 0usize;
        for s in slots.iter().filter(|s| s.owner == owner) {
            let e = entries[s.index].as_mut().expect("each slot taken once");
            filled += e.numel;
            flats.push(
                e.data
                    .take()
                    .unwrap_or_else(|| Tensor::zeros([e.numel], (&e.device, e.dtype))),
            );
        }
        if filled < len {
            flats.push(Tensor::zeros([len - filled], (&device, dtype)));
        }
    }
    let mine = Tensor::cat(flats, 0).reduce_scatter(group, 0)?;
    let mut start = 0usize;
    for s in slots.iter().filter(|s| s.owner == me) {
        let e = entries[s.index].take().expect("each slot taken once");
        let g = super::structure::narrow_or_empty(&mine, start, s.numel);
        start += s.numel;
        restore(e, g, grads);
    }
    Ok(())
}

/// Every parameter of one chunk given its owner's new value: each rank's
/// owned parameters of the chunk flattened and concatenated, one
/// all-gather of these segments (of their own sizes: the new values are
/// views of the gathered buffer, which must not hold padding), then sliced
/// per parameter and assigned, so the module holds the old values of one
/// chunk at a time.
fn gather_chunk<M: Module, G: Group>(group: &G, module: M, slots: &[Slot]) -> Result<M, Error> {
    let me = group.rank();
    let n = group.size();
    let mut sizes = alloc::vec![0usize; n];
    for s in slots {
        sizes[s.owner] = sizes[s.owner].saturating_add(s.numel);
    }
    let Some(first) = slots.first().filter(|_| sizes.iter().any(|&l| l > 0)) else {
        return Ok(module);
    };
    let dtype = first.dtype;
    let wanted: BTreeMap<u64, ()> = slots
        .iter()
        .filter(|s| s.owner == me)
        .map(|s| (s.id, ()))
        .collect();
    let mut current = BTreeMap::new();
    let mut device = None;
    module.visit(&mut Values {
        wanted: &wanted,
        out: &mut current,
        device: &mut device,
    });
    let device = device.unwrap_or_else(|| {
        // This rank owns nothing of the chunk: zeros on the module's device.
        let mut any = None;
        module.visit(&mut AnyDevice(&mut any));
        any.expect("a module with a stepped parameter has a device")
    });
    let mut flats = Vec::new();
    for s in slots.iter().filter(|s| s.owner == me) {
        let v: Tensor<1> = current.remove(&s.id).expect("visited");
        flats.push(if v.dtype() == dtype { v } else { v.cast(dtype) });
    }
    let mine = if flats.is_empty() {
        Tensor::zeros([0], (&device, dtype))
    } else {
        Tensor::cat(flats, 0)
    };
    let all = mine.gather_from_sizes(group, 0, &sizes)?;
    // Where each owner's segment starts, then where its next parameter does.
    let mut offset: Vec<usize> = sizes
        .iter()
        .scan(0usize, |acc, &l| {
            let start = *acc;
            *acc += l;
            Some(start)
        })
        .collect();
    let mut values = BTreeMap::new();
    for s in slots {
        values.insert(
            s.id,
            super::structure::narrow_or_empty(&all, offset[s.owner], s.numel),
        );
        offset[s.owner] += s.numel;
    }
    Ok(module.map(&mut Assign(values)))
}

/// The current values (flattened, untracked) of the parameters in
/// `wanted`, and their device.
struct Values<'a> {
    wanted: &'a BTreeMap<u64, ()>,
    out: &'a mut BTreeMap<u64, Tensor<1>>,
    device: &'a mut Option<Device>,
}

impl ModuleVisitor for Values<'_> {
    fn visit_float<const D: usize>(&mut self, p: &Param<Tensor<D>>) {
        if !self.wanted.contains_key(&p.id.val()) || self.out.contains_key(&p.id.val()) {
            return;
        }
        // Untracked: ranks that own nothing of a chunk send zeros.
        let v = p.val().detach().set_require_grad(false);
        self.device.get_or_insert_with(|| v.device());
        let numel = v.dims().iter().product::<usize>();
        self.out.insert(p.id.val(), crate::reshape(v, [numel]));
    }
}

/// The device of a module's first float parameter.
struct AnyDevice<'a>(&'a mut Option<Device>);

impl ModuleVisitor for AnyDevice<'_> {
    fn visit_float<const D: usize>(&mut self, p: &Param<Tensor<D>>) {
        if self.0.is_none() {
            *self.0 = Some(p.val().device());
        }
    }
}
