//! Helpers shared by the tensor-layer tests: building tensors from vectors
//! on Flex and Autodiff<Flex>, reading them back, generating inputs.

#![allow(dead_code)]

use std::time::Duration;

use burn_autodiff::Autodiff;
use burn_backend::ops::{FloatTensorOps, IntTensorOps};
use burn_backend::tensor::{FloatTensor, IntTensor};
use burn_backend::{AutodiffBackend, Element as BurnElement, TensorData, read_sync};
use burn_flex::{Flex, FlexDevice};
use ruda_bench::{Sample, mix};
use ruda_comm::{Communicator, LocalWorld};

pub type Ad = Autodiff<Flex>;

pub fn world(n: usize) -> LocalWorld {
    LocalWorld::new(n).timeout(Duration::from_secs(60))
}

pub fn float<T: BurnElement>(v: Vec<T>, shape: &[usize]) -> FloatTensor<Flex> {
    Flex::float_from_data(TensorData::new(v, shape.to_vec()), &FlexDevice)
}

pub fn int<T: BurnElement>(v: Vec<T>, shape: &[usize]) -> IntTensor<Flex> {
    Flex::int_from_data(TensorData::new(v, shape.to_vec()), &FlexDevice)
}

pub fn read_float<T: BurnElement>(t: FloatTensor<Flex>) -> (Vec<T>, Vec<usize>) {
    let d = read_sync(Flex::float_into_data(t)).unwrap();
    (d.try_to_vec::<T>().unwrap(), d.shape().to_vec())
}

pub fn read_int<T: BurnElement>(t: IntTensor<Flex>) -> (Vec<T>, Vec<usize>, burn_backend::DType) {
    let d = read_sync(Flex::int_into_data(t)).unwrap();
    (d.try_to_vec::<T>().unwrap(), d.shape().to_vec(), d.dtype())
}

/// A tracked f64 leaf on Autodiff<Flex>.
pub fn leaf(v: Vec<f64>, shape: &[usize]) -> FloatTensor<Ad> {
    Ad::float_set_require_grad(
        Ad::float_from_data(TensorData::new(v, shape.to_vec()), &FlexDevice),
        true,
    )
}

/// An untracked constant on Autodiff<Flex>.
pub fn constant(v: Vec<f64>, shape: &[usize]) -> FloatTensor<Ad> {
    Ad::float_from_data(TensorData::new(v, shape.to_vec()), &FlexDevice)
}

/// `sum(w ⊙ y)` on Autodiff.
pub fn weighted_sum(y: FloatTensor<Ad>, w: FloatTensor<Ad>) -> FloatTensor<Ad> {
    Ad::float_sum(Ad::float_mul(y, w))
}

/// The gradient of `x` after `backward(loss)`, as a vector (zeros when the
/// loss does not depend on `x`, where Burn records no gradient).
pub fn grad_of(loss: FloatTensor<Ad>, x: &FloatTensor<Ad>) -> Vec<f64> {
    let grads = Ad::backward(loss);
    match Ad::grad(x, &grads) {
        Some(g) => read_float::<f64>(g).0,
        None => vec![0.0; burn_backend::TensorMetadata::shape(x).num_elements()],
    }
}

pub fn read_ad(t: FloatTensor<Ad>) -> (Vec<f64>, Vec<usize>) {
    read_float::<f64>(Ad::inner(t))
}

/// Rank `r`'s generated input of `len` values for test `tag`.
pub fn input<T: Sample>(seed: u64, tag: u64, r: usize, len: usize) -> Vec<T> {
    (0..len)
        .map(|i| T::sample(mix(&[seed, tag, r as u64, i as u64]), false))
        .collect()
}

pub fn dot(a: &[f64], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

pub fn assert_close(got: &[f64], want: &[f64], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= 1e-12 * (1.0 + w.abs()),
            "{what}: element {i}: {g} vs {w}"
        );
    }
}

/// Row counts per rank for uneven layouts: rank r of n sends `counts[r][p]` rows to p.
pub fn counts(seed: u64, n: usize, max: usize) -> Vec<Vec<usize>> {
    (0..n)
        .map(|r| {
            (0..n)
                .map(|p| (mix(&[seed, 99, r as u64, p as u64]) % (max as u64 + 1)) as usize)
                .collect()
        })
        .collect()
}

/// All ranks' inputs to all ranks' outputs, serially.
pub type SerialModel = dyn Fn(&[Vec<f64>]) -> Vec<Vec<f64>> + Sync;
/// A distributed forward on Autodiff.
pub type Forward<C> = dyn Fn(&C, FloatTensor<Ad>) -> FloatTensor<Ad> + Sync;

/// A linear distributed operation under test on varying inputs and outputs.
pub struct LinearCase<'a, C> {
    pub name: &'a str,
    /// Rows of rank r's input (trailing size `cols`).
    pub rows: &'a (dyn Fn(usize) -> usize + Sync),
    pub cols: usize,
    pub forward: &'a Forward<C>,
    pub serial: &'a SerialModel,
}

/// [`check_op`] for varying inputs and outputs of shape `[rows(r), cols]`.
pub fn check_linear<C>(
    n: usize,
    seed: u64,
    make: impl Fn(ruda_comm::LocalCommunicator) -> C + Sync,
    case: &LinearCase<'_, C>,
) {
    let cols = case.cols;
    let singletons: Vec<Vec<usize>> = (0..n).map(|r| vec![r]).collect();
    check_op(
        n,
        seed,
        make,
        &OpCase {
            name: case.name,
            in_shape: &|r| vec![(case.rows)(r), cols],
            in_groups: singletons.clone(),
            out_groups: singletons,
            forward: case.forward,
            serial: case.serial,
        },
    );
}

/// A linear distributed operation under test. Ranks in one of `in_groups`
/// hold one replicated input value (varying inputs: one rank per group);
/// likewise `out_groups` for the output. A replicated value is one value:
/// its weight in the loss and its gradient are counted once.
pub struct OpCase<'a, C> {
    pub name: &'a str,
    pub in_shape: &'a (dyn Fn(usize) -> Vec<usize> + Sync),
    pub in_groups: Vec<Vec<usize>>,
    pub out_groups: Vec<Vec<usize>>,
    pub forward: &'a Forward<C>,
    pub serial: &'a SerialModel,
}

fn group_of(groups: &[Vec<usize>], r: usize) -> usize {
    groups
        .iter()
        .position(|g| g.contains(&r))
        .expect("every rank is in a group")
}

/// On every rank of a world of `n`: (a) forward equals the serial model,
/// (b) the gradient of L = Σ over output values ⟨w, A(x)⟩ equals the serial
/// model's (derived column by column from the serial forward, since A is
/// linear), (c) the adjoint identity Σ⟨A x, w⟩ = Σ⟨x, Aᵀ w⟩ with replicated
/// operands counted once, Aᵀ w coming from autodiff.
pub fn check_op<C>(
    n: usize,
    seed: u64,
    make: impl Fn(ruda_comm::LocalCommunicator) -> C + Sync,
    case: &OpCase<'_, C>,
) {
    let in_len = |r: usize| (case.in_shape)(r).iter().product::<usize>();
    let xs: Vec<Vec<f64>> = (0..n)
        .map(|r| input::<f64>(seed, 11, group_of(&case.in_groups, r), in_len(r)))
        .collect();
    let outs = (case.serial)(&xs);
    let ws: Vec<Vec<f64>> = (0..n)
        .map(|r| input::<f64>(seed, 12, group_of(&case.out_groups, r), outs[r].len()))
        .collect();
    // L counts each output value once: on the first rank of its group.
    let loss = |outs: &[Vec<f64>]| -> f64 {
        case.out_groups
            .iter()
            .map(|g| dot(&outs[g[0]], &ws[g[0]]))
            .sum()
    };
    for g in &case.out_groups {
        for &r in g {
            assert_close(
                &outs[r],
                &outs[g[0]],
                &format!("{}: serial model replicates its output", case.name),
            );
        }
    }
    // Serial gradient of each input value: perturb it on every rank holding it.
    let grads: Vec<Vec<f64>> = (0..n)
        .map(|r| {
            let members = &case.in_groups[group_of(&case.in_groups, r)];
            (0..xs[r].len())
                .map(|i| {
                    let mut e: Vec<Vec<f64>> = xs.iter().map(|x| vec![0.0; x.len()]).collect();
                    for &m in members {
                        e[m][i] = 1.0;
                    }
                    loss(&(case.serial)(&e))
                })
                .collect()
        })
        .collect();
    let lhs_serial = loss(&outs);
    let first_in = |r: usize| case.in_groups.iter().any(|g| g[0] == r);
    let first_out = |r: usize| case.out_groups.iter().any(|g| g[0] == r);
    let results = world(n).run(|c| {
        let me = c.rank();
        let sums = HostSums(std::sync::Arc::new(c.split(Some(0), 0).unwrap().unwrap()));
        let comm = make(c);
        let x = leaf(xs[me].clone(), &(case.in_shape)(me));
        let out = (case.forward)(&comm, x.clone());
        let (got, _) = read_ad(out.clone());
        assert_close(
            &got,
            &outs[me],
            &format!("{} forward, n={n}, rank {me}", case.name),
        );
        let shape: Vec<usize> = burn_backend::TensorMetadata::shape(&out).to_vec();
        // Every rank seeds its backward with the weight of the value it
        // holds: a replicated output's loss is computed redundantly, so each
        // rank sees the full gradient of that one value.
        let l = weighted_sum(out, constant(ws[me].clone(), &shape));
        let g = grad_of(l, &x);
        assert_close(
            &g,
            &grads[me],
            &format!("{} gradient, n={n}, rank {me}", case.name),
        );
        let lhs = sums.sum(if first_out(me) {
            dot(&got, &ws[me])
        } else {
            0.0
        });
        let rhs = sums.sum(if first_in(me) { dot(&xs[me], &g) } else { 0.0 });
        assert!(
            (lhs - rhs).abs() <= 1e-10 * (1.0 + lhs.abs()),
            "{} adjoint identity n={n}: {lhs} vs {rhs}",
            case.name
        );
        assert!((lhs - lhs_serial).abs() <= 1e-10 * (1.0 + lhs.abs()));
        Ok::<_, ()>(())
    });
    results.unwrap_or_else(|e| panic!("{} n={n}: {e:?}", case.name));
}

/// Scalar sums over all ranks, on a communicator of their own.
pub struct HostSums(pub std::sync::Arc<ruda_comm::LocalCommunicator>);

impl HostSums {
    pub fn sum(&self, v: f64) -> f64 {
        let mut b = [v];
        self.0.all_reduce(&mut b, ruda_comm::ReduceOp::Sum).unwrap();
        b[0]
    }
}

/// Every rank's error from a run where every rank must fail (panics if one
/// succeeded or panicked).
pub fn errors<R: std::fmt::Debug, E: std::fmt::Debug>(
    results: Vec<Result<R, ruda_comm::RankError<E>>>,
) -> Vec<E> {
    results
        .into_iter()
        .map(|r| match r {
            Err(ruda_comm::RankError::Failed(e)) => e,
            other => panic!("expected an error, got {other:?}"),
        })
        .collect()
}

/// Run `f` on two ranks of the local transport (a 5 s deadline) with a
/// host-staged group each; every rank's outcome.
pub fn pair<R: Send + std::fmt::Debug>(
    f: impl Fn(
        &ruda_tensor::HostCollective<ruda_comm::LocalCommunicator>,
    ) -> Result<R, ruda_tensor::Error>
    + Sync,
) -> Vec<Result<R, ruda_comm::RankError<ruda_tensor::Error>>> {
    LocalWorld::new(2)
        .timeout(Duration::from_secs(5))
        .run_each(|c| f(&ruda_tensor::HostCollective::new(c)))
}

/// Every float parameter value of `module`, in visiting order, as f64 bits
/// (exact comparisons of whole models).
pub fn param_bits<M: burn_core::module::Module>(module: &M) -> Vec<u64> {
    use burn_core::module::{ModuleVisitor, Param};
    struct Read<'a>(&'a mut Vec<u64>);
    impl ModuleVisitor for Read<'_> {
        fn visit_float<const D: usize>(&mut self, p: &Param<burn_tensor::Tensor<D>>) {
            let v = p.val().into_data().convert::<f64>();
            self.0
                .extend(v.try_to_vec::<f64>().unwrap().into_iter().map(f64::to_bits));
        }
    }
    let mut out = Vec::new();
    module.visit(&mut Read(&mut out));
    out
}
