//! [`broadcast_module`]: one rank's module to every replica.

use alloc::collections::BTreeMap;
use alloc::vec::Vec;

use burn_core::module::{Module, ModuleMapper, ModuleVisitor, Param};
use burn_tensor::{Bool, Int, Tensor};

use super::buckets::Buckets;
use super::running::fold_running_states;
use super::structure::{self, Entry, Header};
use crate::error::{Error, ModuleProblem, TensorOp};
use crate::group::Group;
use crate::methods::TensorExt;

/// Every float parameter's value (detached, flattened), and a count of the
/// integer and boolean parameters.
#[derive(Default)]
struct Values {
    entries: Vec<Entry>,
    ints: usize,
    bools: usize,
}

impl ModuleVisitor for Values {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        // A parameter tied into several fields (one id) travels once.
        if self.entries.iter().any(|e| e.id == param.id) {
            return;
        }
        let value = param.val();
        let data = value.clone().detach();
        self.entries.push(Entry::new(param.id, &value, Some(data)));
    }

    fn visit_int<const D: usize>(&mut self, _: &Param<Tensor<D, Int>>) {
        self.ints += 1;
    }

    fn visit_bool<const D: usize>(&mut self, _: &Param<Tensor<D, Bool>>) {
        self.bools += 1;
    }
}

/// Sets each float parameter to its broadcast value, keeping its id,
/// device, gradient requirement and load/save mappers.
pub(super) struct Assign(pub(super) BTreeMap<u64, Tensor<1>>);

impl ModuleMapper for Assign {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
        // `get`, not `remove`: every field a tied parameter appears in.
        match self.0.get(&param.id.val()).cloned() {
            Some(flat) => param.map(|old| {
                let require_grad = old.is_require_grad();
                // A fresh leaf: Burn refuses to track a tensor that is the
                // output of another operation.
                crate::reshape(flat, old.dims())
                    .detach()
                    .set_require_grad(require_grad)
            }),
            None => param,
        }
    }
}

/// Make every replica equal to `root`'s: broadcast every float parameter of
/// `module` from `root` over `group` (parameters of 1 MiB or more each on
/// their own, smaller ones packed into buckets of at most 25 MiB per
/// element type, as [`super::all_reduce_gradients`] moves gradients), and
/// return the module
/// with the root's values, bit for bit. Each parameter keeps its id, device
/// and whether it requires a gradient, so an optimizer's state keyed by
/// parameter id stays valid. Call it once after building (or loading) the
/// model on every rank, before training.
///
/// Before any data moves the ranks check that they name the same root and
/// that their modules have the same float parameters (count, dtype, shape,
/// in order).
///
/// # Errors
/// [`Error::InvalidRoot`] on every rank when `root` is outside the group or
/// differs from rank 0's; [`Error::ModuleMismatch`] when the modules
/// differ, or ([`ModuleProblem::Unsupported`]) when a rank's module has
/// integer or boolean parameters, which this call does not broadcast yet;
/// the group's errors.
///
/// # Example
/// ```
/// use burn_core::module::Module;
/// use burn_nn::{Linear, LinearConfig};
/// use burn_tensor::Device;
/// use ruda_comm::LocalWorld;
/// use ruda_tensor::HostCollective;
/// use ruda_tensor::ddp::{broadcast_module, check_replicas};
///
/// let weights = LocalWorld::new(3).run(|comm| {
///     let world = HostCollective::new(comm);
///     // Every rank initialises its own random weights ...
///     let model: Linear = LinearConfig::new(4, 2).init(&Device::flex().autodiff());
///     // ... then takes rank 0's.
///     let model = broadcast_module(&world, model, 0)?;
///     check_replicas(&world, &model)?;
///     Ok::<_, ruda_tensor::Error>(model.weight.val().into_data().try_to_vec::<f32>().unwrap())
/// }).unwrap();
/// assert_eq!(weights[1], weights[0]);
/// assert_eq!(weights[2], weights[0]);
/// ```
pub fn broadcast_module<M: Module, G: Group>(
    group: &G,
    module: M,
    root: usize,
) -> Result<M, Error> {
    broadcast(group, module, root).map_err(|e| e.in_named_call(TensorOp::DdpBroadcast.name()))
}

fn broadcast<M: Module, G: Group>(group: &G, module: M, root: usize) -> Result<M, Error> {
    let op = TensorOp::DdpBroadcast;
    let me = group.rank();
    fold_running_states(&module);
    let mut values = Values::default();
    module.visit(&mut values);
    let others = values.ints + values.bools;
    let header = Header {
        op,
        words: [root as i64, others as i64, 0],
        buckets: Buckets::default(),
    };
    let agreed = structure::agree(group, header, &values.entries)?;
    let size = group.size();
    let root0 = agreed.headers[0][0] as usize;
    if let Some((r, w)) = agreed
        .headers
        .iter()
        .enumerate()
        .find(|(_, w)| w[0] as usize != root0 || w[0] as usize >= size)
    {
        return Err(Error::InvalidRoot {
            op,
            rank: me,
            offender: r,
            root: w[0] as usize,
            expected: root0,
            size,
        });
    }
    if let Some((r, w)) = agreed.headers.iter().enumerate().find(|(_, w)| w[1] != 0) {
        return Err(Error::ModuleMismatch {
            op,
            rank: me,
            offender: r,
            reference: 0,
            problem: ModuleProblem::Unsupported {
                count: w[1] as usize,
                kind: "integer or boolean",
            },
        });
    }
    let mut out = BTreeMap::new();
    structure::per_bucket(
        values.entries,
        &agreed.used,
        Buckets::default(),
        |bucket| bucket.broadcast(group, root),
        |entry, value| {
            out.insert(entry.id.val(), value);
        },
    )?;
    Ok(module.map(&mut Assign(out)))
}
