//! Integer collectives: bit-exact movement of `u8`/`u32`/`i32`/`i64` (and
//! every integer dtype Burn has) as words of their size, never through
//! floats. Integers carry no gradient.

use alloc::vec::Vec;

use burn_backend::tensor::IntTensor;
use burn_backend::{Backend, TensorMetadata};

use crate::agreement::{self, Facts, Problem};
use crate::error::{Error, ShapeProblem, TensorOp};
use crate::group::Group;
use crate::ops::{Expect, agree_exchange, front_int, resolve, role_of};

/// Concatenate every rank's integer tensor along `dim` in rank order (each
/// rank's size along it may differ; every other axis must agree). With
/// `equal`, the contract's form: equal leading-axis shards.
pub(crate) fn all_gather_int<B: Backend, G: Group>(
    g: &G,
    op: TensorOp,
    x: IntTensor<B>,
    dim: isize,
    equal: bool,
) -> Result<IntTensor<B>, Error> {
    let shape = x.shape().to_vec();
    let dtype = x.dtype();
    let d = resolve(dim, shape.len());
    let problem = if shape.is_empty() {
        Some(Problem::Shape(ShapeProblem::NoLeadingAxis))
    } else if equal && shape[1..].contains(&0) {
        Some(Problem::Shape(ShapeProblem::ZeroTrailingAxis))
    } else {
        d.as_ref()
            .err()
            .copied()
            .or((!agreement::movable(dtype)).then_some(Problem::UnsupportedDType))
    };
    let d = d.unwrap_or(0);
    let mut f = Facts::new(op, dtype, &shape);
    f.problem = problem;
    f.free_axis = (!equal).then_some(d);
    let named = |e: Error| e.in_call(role_of(op));
    let agreed = agreement::agree(g, f, |_, _, _| unreachable!("no parameter")).map_err(named)?;
    if g.size() == 1 {
        return Ok(x);
    }
    let out = g
        .gather_rows_int::<B>(op, front_int::<B>(x, d), &agreed.sizes)
        .map_err(named)?;
    Ok(front_int::<B>(out, d))
}

/// Send `send_counts[p]` rows along `dim` to rank `p`; returns the rows
/// received (in source order) and the count from each source.
pub(crate) fn all_to_all_int<B: Backend, G: Group>(
    g: &G,
    op: TensorOp,
    x: IntTensor<B>,
    dim: isize,
    send_counts: &[usize],
) -> Result<(IntTensor<B>, Vec<usize>), Error> {
    let xshape = x.shape().to_vec();
    let d = resolve(dim, xshape.len());
    let dd = d.unwrap_or(0);
    let xt = front_int::<B>(x, dd);
    let shape = xt.shape().to_vec();
    let send: Vec<Option<usize>> = send_counts.iter().map(|&c| Some(c)).collect();
    let expect = alloc::vec![Expect::Any; send.len()];
    let plan = agree_exchange(
        g,
        role_of(op),
        &send,
        &expect,
        &shape,
        xt.dtype(),
        None,
        op == TensorOp::AllToAllVInt,
        d.err(),
    )
    .map_err(|e| e.in_call(role_of(op)))?;
    if g.size() == 1 {
        return Ok((front_int::<B>(xt, dd), plan.recv));
    }
    let out = g
        .exchange_rows_int::<B>(op, xt, &plan.send, &plan.recv)
        .map_err(|e| e.in_call(role_of(op)))?;
    Ok((front_int::<B>(out, dd), plan.recv))
}
