//! [`Sharded`]: data-parallel steps with the optimizer state (ZeRO stage
//! 1) and the reduced gradients (stage 2) divided among the ranks.

use alloc::collections::BTreeMap;
use alloc::vec::Vec;

use burn_core::module::Module;
use burn_optim::{GradientsParams, LearningRate, ModuleOptimizer};
use burn_tensor::{DType, Tensor};

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
/// Every trainable parameter has one owner rank (whole parameters, in the
/// module's order, each to the rank with the fewest bytes so far: the same
/// on every rank, and stable from step to step). After `backward()`,
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
}

impl Sharded {
    /// Steps of `stage`, with the buffers broadcast from rank 0.
    pub fn new(stage: ZeroStage) -> Self {
        Sharded {
            stage,
            buffers: BufferSync::default(),
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
        let buckets = Buckets::default();
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
        // What the gather needs after the step: each stepped entry's id,
        // dtype, size and owner.
        let stepped: Vec<Slot> = entries
            .iter()
            .zip(&used)
            .zip(&owners)
            .filter(|((_, u), _)| **u)
            .map(|((e, _), &owner)| Slot {
                id: e.id.val(),
                dtype: e.dtype,
                numel: e.numel,
                owner,
            })
            .collect();
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
                reduce_scatter_owned(group, entries, &used, &owners, &mut grads)?;
            }
        }
        let module = optim.step(lr, module, grads);
        let values = gather_owned(group, &module, &stepped)?;
        Ok(module.map(&mut Assign(values)))
    }
}

/// A parameter some rank stepped: who did, and what it holds.
struct Slot {
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

/// The dtypes of `dtypes` in order of first appearance.
fn distinct(dtypes: impl Iterator<Item = DType>) -> Vec<DType> {
    let mut out: Vec<DType> = Vec::new();
    for d in dtypes {
        if !out.contains(&d) {
            out.push(d);
        }
    }
    out
}

/// Each rank's segment length for `dtype`: the elements of the stepped
/// parameters of that dtype it owns, the longest over the ranks (every
/// segment padded to it, so the flat vector splits evenly).
fn segment_len(sizes: impl Iterator<Item = (usize, usize)>, ranks: usize) -> usize {
    let mut per = alloc::vec![0usize; ranks];
    for (owner, numel) in sizes {
        per[owner] = per[owner].saturating_add(numel);
    }
    per.into_iter().max().unwrap_or(0)
}

/// ZeRO stage 2's reduction: per dtype, every rank's gradients laid out
/// owner by owner (each owner's parameters in the module's order, zeros
/// where this rank has none, each segment padded to the longest), summed
/// by one reduce-scatter that leaves each rank its own segment; the owned
/// parameters' sums are registered in `grads`.
fn reduce_scatter_owned<G: Group>(
    group: &G,
    entries: Vec<Entry>,
    used: &[bool],
    owners: &[usize],
    grads: &mut GradientsParams,
) -> Result<(), Error> {
    let me = group.rank();
    let n = group.size();
    let mut items: Vec<(Entry, usize)> = entries
        .into_iter()
        .zip(used)
        .zip(owners)
        .filter_map(|((e, &u), &o)| u.then_some((e, o)))
        .collect();
    for dtype in distinct(items.iter().map(|(e, _)| e.dtype)) {
        let (of_dtype, rest): (Vec<_>, Vec<_>) =
            items.into_iter().partition(|(e, _)| e.dtype == dtype);
        items = rest;
        let len = segment_len(of_dtype.iter().map(|(e, o)| (*o, e.numel)), n);
        if len == 0 {
            continue;
        }
        let device = of_dtype[0].0.device.clone();
        let mut by_owner: Vec<Vec<Entry>> = (0..n).map(|_| Vec::new()).collect();
        for (e, o) in of_dtype {
            by_owner[o].push(e);
        }
        let mut flats = Vec::new();
        for owned in &mut by_owner {
            let mut filled = 0usize;
            for e in owned.iter_mut() {
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
        for e in by_owner.swap_remove(me) {
            let numel = e.numel;
            let g = mine.clone().narrow(0, start, numel);
            start += numel;
            restore(e, g, grads);
        }
    }
    Ok(())
}

/// Every stepped parameter's new value from its owner: per dtype, each
/// rank's owned parameters flattened and concatenated (padded to the
/// longest segment), one all-gather, then sliced per parameter.
fn gather_owned<M: Module, G: Group>(
    group: &G,
    module: &M,
    stepped: &[Slot],
) -> Result<BTreeMap<u64, Tensor<1>>, Error> {
    let me = group.rank();
    let n = group.size();
    let mut current = BTreeMap::new();
    struct Values<'a>(&'a mut BTreeMap<u64, Tensor<1>>);
    impl burn_core::module::ModuleVisitor for Values<'_> {
        fn visit_float<const D: usize>(&mut self, p: &burn_core::module::Param<Tensor<D>>) {
            // Untracked: ranks that own nothing of a dtype send zeros.
            let v = p.val().detach().set_require_grad(false);
            let numel = v.dims().iter().product::<usize>();
            self.0
                .entry(p.id.val())
                .or_insert_with(|| crate::reshape(v, [numel]));
        }
    }
    module.visit(&mut Values(&mut current));
    let mut out = BTreeMap::new();
    for dtype in distinct(stepped.iter().map(|s| s.dtype)) {
        let of_dtype: Vec<&Slot> = stepped.iter().filter(|s| s.dtype == dtype).collect();
        let len = segment_len(of_dtype.iter().map(|s| (s.owner, s.numel)), n);
        if len == 0 {
            continue;
        }
        let mut flats = Vec::new();
        let mut filled = 0usize;
        let mut device = None;
        for s in of_dtype.iter().filter(|s| s.owner == me) {
            let v = current[&s.id].clone();
            device.get_or_insert_with(|| v.device());
            let v = if v.dtype() == dtype { v } else { v.cast(dtype) };
            flats.push(v);
            filled += s.numel;
        }
        let device = device.unwrap_or_else(|| current[&of_dtype[0].id].device());
        if filled < len {
            flats.push(Tensor::zeros([len - filled], (&device, dtype)));
        }
        let all = Tensor::cat(flats, 0).all_gather(group, 0)?;
        let mut offset = alloc::vec![0usize; n];
        for s in of_dtype {
            let start = s.owner * len + offset[s.owner];
            offset[s.owner] += s.numel;
            out.insert(s.id, all.clone().narrow(0, start, s.numel));
        }
    }
    Ok(out)
}
