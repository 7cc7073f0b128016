//! [`sync_buffers`]: every replica's non-trainable state made equal.

use alloc::collections::BTreeMap;
use alloc::vec::Vec;

use burn_core::module::{Module, ModuleVisitor, Param};
use burn_tensor::Tensor;
use ruda_comm::ReduceOp;

use super::broadcast::Assign;
use super::buckets::Buckets;
use super::running::fold_running_states;
use super::structure::{self, Entry, Header};
use crate::error::{Error, ModuleProblem, TensorOp};
use crate::group::Group;
use crate::methods::TensorExt;

/// How [`sync_buffers`] (and [`super::step`]) make the replicas' buffers
/// equal. Every rank must pass the same (otherwise
/// [`Error::ModuleMismatch`] with [`ModuleProblem::BufferSync`], or
/// [`Error::InvalidRoot`] for another root, on every rank).
///
/// # Example
/// ```
/// use ruda_tensor::ddp::BufferSync;
/// assert_eq!(BufferSync::default(), BufferSync::Broadcast { root: 0 });
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BufferSync {
    /// Every replica takes `root`'s buffers, bit for bit (PyTorch DDP's
    /// default, `broadcast_buffers=True`): a BatchNorm's running
    /// statistics are then those `root` computed from its own shards.
    Broadcast {
        /// The rank whose buffers every replica takes.
        root: usize,
    },
    /// Every replica takes the mean of the replicas' buffers (computed in
    /// the accumulation type, the same bits on every rank): running
    /// statistics that have seen every rank's shards.
    Mean,
    /// Nothing moves (the ranks still agree on the call): for buffers
    /// that are equal by construction, such as
    /// [`super::SyncBatchNorm`]'s statistics.
    Off,
}

impl Default for BufferSync {
    fn default() -> Self {
        BufferSync::Broadcast { root: 0 }
    }
}

impl BufferSync {
    /// The two words this choice contributes to the agreement.
    fn words(self) -> [i64; 2] {
        match self {
            // Roots beyond i64::MAX cannot name a rank.
            BufferSync::Broadcast { root } => [0, i64::try_from(root).unwrap_or(i64::MAX)],
            BufferSync::Mean => [1, 0],
            BufferSync::Off => [2, 0],
        }
    }

    /// The name of the kind a code stands for, for messages.
    fn name_of(code: i64) -> &'static str {
        match code {
            0 => "broadcast",
            1 => "mean",
            2 => "off",
            _ => "unknown",
        }
    }
}

/// Every float value of a module that takes no gradient, in order (a tied
/// one once).
#[derive(Default)]
struct Buffers {
    entries: Vec<Entry>,
}

impl ModuleVisitor for Buffers {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        let value = param.val();
        if value.is_require_grad() || self.entries.iter().any(|e| e.id == param.id) {
            return;
        }
        let data = value.clone().detach();
        self.entries.push(Entry::new(param.id, &value, Some(data)));
    }
}

/// Make every replica's buffers equal, as `how` says, and return the
/// module. Buffers are the module's float values that take no gradient:
/// Burn's `RunningState`s (a `BatchNorm`'s running mean and variance) and
/// parameters frozen with `set_require_grad(false)` (on a device without
/// autodiff, where nothing takes a gradient, every float parameter).
/// Trainable parameters are left alone: [`super::all_reduce_gradients`]
/// keeps them equal. Unlike PyTorch, which broadcasts only registered
/// buffers, frozen parameters travel too (Burn's visitor shows a
/// `RunningState` as a parameter without a gradient, like a frozen one): a
/// large frozen backbone is broadcast every step unless you pass
/// [`BufferSync::Off`] and sync the running statistics yourself.
/// [`BufferSync::Mean`] rewrites values that are already equal by a
/// rounding of their mean (a frozen parameter may move by an ulp): prefer
/// `Broadcast` for models with frozen parameters.
///
/// Each replica updates its running statistics from its own shard, so
/// without this call the replicas drift apart from the first step
/// (and [`super::check_replicas`] says so). [`super::step`] calls it after
/// every optimizer step; call it yourself in a loop of your own, once per
/// step. Pending `RunningState` updates are folded in first, so the value
/// written is the one the next forward pass reads.
///
/// # Errors
/// [`Error::ModuleMismatch`] on every rank when the replicas' buffers
/// differ in count, dtype or shape, or ([`ModuleProblem::BufferSync`]) when
/// the ranks pass different `how`; [`Error::InvalidRoot`] on every rank for
/// a root outside the group or unlike rank 0's; the group's errors.
///
/// # Example
/// ```
/// use burn_core::module::Module;
/// use burn_nn::{BatchNorm, BatchNormConfig};
/// use burn_tensor::{Device, Tensor};
/// use ruda_comm::LocalWorld;
/// use ruda_tensor::{Group, HostCollective};
/// use ruda_tensor::ddp::{BufferSync, check_replicas, sync_buffers};
///
/// LocalWorld::new(2).run(|comm| {
///     let world = HostCollective::new(comm);
///     let device = Device::flex().autodiff();
///     let bn: BatchNorm = BatchNormConfig::new(3).init(&device);
///     // Each rank's batch moves its running statistics its own way ...
///     let x = Tensor::<2>::ones([4, 3], &device).mul_scalar(world.rank() as f64);
///     let _ = bn.forward(x);
///     // ... until rank 0's are every rank's.
///     let bn = sync_buffers(&world, bn, BufferSync::Broadcast { root: 0 })?;
///     check_replicas(&world, &bn)
/// }).unwrap();
/// ```
pub fn sync_buffers<M: Module, G: Group>(
    group: &G,
    module: M,
    how: BufferSync,
) -> Result<M, Error> {
    sync(group, module, how).map_err(|e| e.in_named_call(TensorOp::DdpBuffers.name()))
}

fn sync<M: Module, G: Group>(group: &G, module: M, how: BufferSync) -> Result<M, Error> {
    let op = TensorOp::DdpBuffers;
    let me = group.rank();
    fold_running_states(&module);
    let mut buffers = Buffers::default();
    module.visit(&mut buffers);
    let header = Header {
        op,
        words: [how.words()[0], how.words()[1], 0],
        buckets: Buckets::default(),
    };
    let agreed = structure::agree(group, header, &buffers.entries)?;
    let reference = agreed.headers[0];
    if let Some((r, w)) = agreed
        .headers
        .iter()
        .enumerate()
        .find(|(_, w)| w[0] != reference[0])
    {
        return Err(Error::ModuleMismatch {
            op,
            rank: me,
            offender: r,
            reference: 0,
            problem: ModuleProblem::BufferSync {
                expected: BufferSync::name_of(reference[0]),
                got: BufferSync::name_of(w[0]),
            },
        });
    }
    let size = group.size();
    let root = match how {
        BufferSync::Broadcast { .. } => {
            let root0 = reference[1] as usize;
            if let Some((r, w)) = agreed
                .headers
                .iter()
                .enumerate()
                .find(|(_, w)| w[1] != reference[1] || w[1] as usize >= size)
            {
                return Err(Error::InvalidRoot {
                    op,
                    rank: me,
                    offender: r,
                    root: w[1] as usize,
                    expected: root0,
                    size,
                });
            }
            Some(root0)
        }
        BufferSync::Mean => None,
        BufferSync::Off => return Ok(module),
    };
    let mut out = BTreeMap::new();
    structure::per_bucket(
        buffers.entries,
        &agreed.used,
        Buckets::default(),
        |bucket| match root {
            Some(root) => bucket.broadcast(group, root),
            None => bucket.all_reduce_with(group, ReduceOp::Mean),
        },
        |entry, value| {
            out.insert(entry.id.val(), value);
        },
    )?;
    Ok(module.map(&mut Assign(out)))
}
