//! [`check_replicas`]: whether every replica holds rank 0's parameters.

use alloc::vec::Vec;

use burn_core::module::{Module, ModuleVisitor, Param};
use burn_tensor::{Bool, DType, Int, Tensor, TensorData};

use super::buckets::Buckets;
use super::running::fold_running_states;
use super::structure::{self, Entry, Header};
use crate::error::{Error, ModuleProblem, TensorOp};
use crate::group::Group;
use crate::shape_hash;

/// A hash of a tensor: its dtype and shape, then its bytes (its dtype's
/// bit patterns, in order, with their length).
fn fingerprint(dtype: DType, dims: &[usize], data: &TensorData) -> i64 {
    let mut head = alloc::vec![
        crate::agreement::dtype_code(dtype) as u64,
        dims.len() as u64
    ];
    head.extend(dims.iter().map(|&d| d as u64));
    head.push(shape_hash::bytes(data.as_bytes()));
    shape_hash::mix(&head) as i64
}

/// Every float parameter (for the structure check) and the fingerprint of
/// every parameter's values, float, integer and boolean, in order.
#[derive(Default)]
struct Fingerprints {
    entries: Vec<Entry>,
    hashes: Vec<i64>,
}

impl ModuleVisitor for Fingerprints {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        let value = param.val();
        let (dtype, dims) = (value.dtype(), value.dims());
        self.hashes
            .push(fingerprint(dtype, &dims, &value.to_data()));
        self.entries.push(Entry::new::<D>(param.id, &value, None));
    }

    fn visit_int<const D: usize>(&mut self, param: &Param<Tensor<D, Int>>) {
        let value = param.val();
        let (dtype, dims) = (value.dtype(), value.dims());
        self.hashes
            .push(fingerprint(dtype, &dims, &value.into_data()));
    }

    fn visit_bool<const D: usize>(&mut self, param: &Param<Tensor<D, Bool>>) {
        // Booleans as 0/1 bytes: the storage a backend picks for them
        // (native, u8, u32) does not make equal values differ.
        let value = param.val().int().cast(DType::U8);
        let (dtype, dims) = (value.dtype(), value.dims());
        self.hashes
            .push(fingerprint(dtype, &dims, &value.into_data()));
    }
}

/// Check that every replica's module holds rank 0's parameters, bit for bit
/// (float, integer and boolean ones): e.g. after [`super::broadcast_module`],
/// after loading a checkpoint on every rank, or now and then in training to
/// catch replicas that drifted apart. Each rank hashes its parameters'
/// values on its own; only the hashes travel (one word per parameter), so
/// the check costs a read of the model, not a transfer of it.
///
/// "Equal" is bitwise: `0.0` and `-0.0` differ, and NaNs are equal only
/// with the same bits. A hash collision could let two different values
/// pass (64-bit hashes: vanishingly unlikely by accident).
///
/// # Errors
/// [`Error::ModuleMismatch`] on every rank when the modules differ in
/// structure (as for [`super::all_reduce_gradients`]) or
/// ([`ModuleProblem::Values`]) in the values of a parameter, naming the
/// first rank and parameter that differ; the group's errors.
///
/// # Example
/// ```
/// use burn_core::module::Module;
/// use burn_nn::{Linear, LinearConfig};
/// use burn_tensor::Device;
/// use ruda_comm::LocalWorld;
/// use ruda_tensor::{Error, HostCollective, ModuleProblem};
/// use ruda_tensor::ddp::check_replicas;
///
/// let out = LocalWorld::new(2).run_each(|comm| {
///     let world = HostCollective::new(comm);
///     // Independent random initialisations: the replicas differ.
///     let model: Linear = LinearConfig::new(4, 2).init(&Device::flex());
///     check_replicas(&world, &model)
/// });
/// for r in out {
///     assert!(matches!(
///         r.unwrap_err().into_error(),
///         Some(Error::ModuleMismatch { offender: 1, problem: ModuleProblem::Values { index: 0 }, .. })
///     ));
/// }
/// ```
pub fn check_replicas<M: Module, G: Group>(group: &G, module: &M) -> Result<(), Error> {
    check(group, module).map_err(|e| e.in_named_call(TensorOp::DdpCheck.name()))
}

fn check<M: Module, G: Group>(group: &G, module: &M) -> Result<(), Error> {
    let op = TensorOp::DdpCheck;
    let me = group.rank();
    fold_running_states(module);
    let mut prints = Fingerprints::default();
    module.visit(&mut prints);
    let header = Header {
        op,
        words: [prints.hashes.len() as i64, 0, 0],
        buckets: Buckets::default(),
    };
    let agreed = structure::agree(group, header, &prints.entries)?;
    let expected = agreed.headers[0][0] as usize;
    if let Some((r, w)) = agreed
        .headers
        .iter()
        .enumerate()
        .find(|(_, w)| w[0] as usize != expected)
    {
        // The same float parameters but another number of integer or
        // boolean ones.
        return Err(Error::ModuleMismatch {
            op,
            rank: me,
            offender: r,
            reference: 0,
            problem: ModuleProblem::OtherParamCount {
                expected: expected - prints.entries.len(),
                got: (w[0] as usize).saturating_sub(prints.entries.len()),
            },
        });
    }
    let all = group.exchange_words(&prints.hashes)?;
    let n = prints.hashes.len();
    if n == 0 {
        return Ok(());
    }
    let reference = &all[..n];
    for (r, theirs) in all.chunks(n).enumerate() {
        if let Some(index) = theirs.iter().zip(reference).position(|(a, b)| a != b) {
            return Err(Error::ModuleMismatch {
                op,
                rank: me,
                offender: r,
                reference: 0,
                problem: ModuleProblem::Values { index },
            });
        }
    }
    Ok(())
}
