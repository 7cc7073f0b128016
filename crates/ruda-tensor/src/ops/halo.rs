//! Halo exchange along one dimension of a group ordered like the polar
//! axis (no wrap-around) and its adjoint, the halo reduction. Each is the
//! other's backward pass, so `halo_exchange`'s backward equals
//! `halo_reduce`'s forward bit for bit.

use alloc::vec::Vec;

use burn_backend::tensor::FloatTensor;
use burn_backend::{Backend, DType, TensorMetadata};

use super::{LinearOp, Role, front, resolve};
use crate::agreement::{self, Facts, Problem};
use crate::error::{Error, TensorOp};
use crate::group::Group;
use crate::layout::{narrow, zeros_like_along};

/// Every rank's rows along the halo dimension.
#[derive(Clone, Debug)]
pub struct HaloPlan {
    /// The dimension, resolved.
    pub dim: usize,
    /// Every rank's rows along it (without halos).
    pub rows: Vec<usize>,
}

/// Agree on a halo call: one radius everywhere, and in a group of more
/// than one every rank holds at least `radius` rows (`rows` without halos).
#[allow(clippy::too_many_arguments)]
fn agree_halo<G: Group>(
    g: &G,
    role: Role,
    dim: isize,
    radius: usize,
    rows_of: impl Fn(usize) -> usize,
    problem: impl Fn(usize) -> Option<Problem>,
    shape: &[usize],
    dtype: DType,
    tracked: bool,
) -> Result<HaloPlan, Error> {
    let (me, n) = (g.rank(), g.size());
    let d = resolve(dim, shape.len());
    let rows = d.as_ref().map_or(0, |&d| rows_of(shape[d]));
    let problem = d
        .as_ref()
        .err()
        .copied()
        .or_else(|| d.as_ref().ok().and_then(|&d| problem(shape[d])))
        .or((!agreement::movable(dtype)).then_some(Problem::UnsupportedDType));
    let words = [radius as i64, rows as i64];
    let mut f = Facts::new(role.op, dtype, shape);
    f.backward = role.backward;
    f.problem = problem;
    f.free_axis = d.as_ref().ok().copied();
    f.tracked = Some(tracked);
    f.words = &words;
    let agreed = agreement::agree(g, f, |_, _, _| unreachable!("no parameter"))?;
    let rows: Vec<usize> = agreed.words.iter().map(|w| w[1].max(0) as usize).collect();
    for (r, w) in agreed.words.iter().enumerate() {
        let rad = w[0].max(0) as usize;
        if w[0] != agreed.words[0][0] || (n > 1 && rows[r] < rad) {
            return Err(Error::Halo {
                op: role.op,
                rank: me,
                offender: r,
                rows: rows[r],
                radius: rad,
            });
        }
    }
    Ok(HaloPlan {
        dim: d.unwrap_or(0),
        rows,
    })
}

/// The neighbours along the group (no wrap-around): `(prev, next)`.
fn neighbours(me: usize, n: usize) -> (Option<usize>, Option<usize>) {
    (me.checked_sub(1), (me + 1 < n).then_some(me + 1))
}

/// Borrow `radius` rows along a dimension from each neighbour (the previous
/// rank's last rows before this rank's, the next rank's first rows after;
/// zeros beyond the first and last rank), giving `rows + 2 × radius` rows.
/// A radius of 0 moves nothing.
#[derive(Clone, Copy, Debug)]
pub struct HaloExchange {
    role: Role,
    dim: isize,
    radius: usize,
}

impl HaloExchange {
    /// A halo of `radius` rows along `dim`.
    pub fn new(dim: isize, radius: usize) -> Self {
        HaloExchange {
            role: Role::forward(TensorOp::HaloExchange),
            dim,
            radius,
        }
    }
}

impl LinearOp for HaloExchange {
    type Plan = HaloPlan;
    type Adjoint = HaloReduce;

    fn role(&self) -> Role {
        self.role
    }

    fn plan<G: Group>(
        &self,
        g: &G,
        shape: &[usize],
        dtype: DType,
        tracked: bool,
    ) -> Result<HaloPlan, Error> {
        agree_halo(
            g,
            self.role,
            self.dim,
            self.radius,
            |rows| rows,
            |_| None,
            shape,
            dtype,
            tracked,
        )
    }

    fn forward<B: Backend, G: Group>(
        &self,
        g: &G,
        plan: &HaloPlan,
        x: FloatTensor<B>,
    ) -> Result<FloatTensor<B>, Error> {
        let (me, n, r) = (g.rank(), g.size(), self.radius);
        if r == 0 {
            return Ok(x);
        }
        let rows = plan.rows[me];
        let xt = front::<B>(x, plan.dim);
        let (prev, next) = neighbours(me, n);
        let mut send = alloc::vec![0usize; n];
        let mut recv = alloc::vec![0usize; n];
        let mut parts = Vec::new();
        if let Some(p) = prev {
            parts.push(narrow::<B>(xt.clone(), 0, 0, r));
            (send[p], recv[p]) = (r, r);
        }
        if let Some(q) = next {
            parts.push(narrow::<B>(xt.clone(), 0, rows - r, r));
            (send[q], recv[q]) = (r, r);
        }
        let got = if parts.is_empty() {
            None
        } else {
            Some(g.exchange_rows::<B>(self.role.op, B::float_cat(parts, 0), &send, &recv)?)
        };
        // Blocks arrive in source order: the previous rank's, then the next's.
        let top = match (prev, &got) {
            (Some(_), Some(got)) => narrow::<B>(got.clone(), 0, 0, r),
            _ => zeros_like_along::<B>(&xt, 0, r),
        };
        let bottom = match (next, got) {
            (Some(_), Some(got)) => {
                let len = got.shape()[0];
                narrow::<B>(got, 0, len - r, r)
            }
            _ => zeros_like_along::<B>(&xt, 0, r),
        };
        Ok(front::<B>(
            B::float_cat(alloc::vec![top, xt, bottom], 0),
            plan.dim,
        ))
    }

    fn adjoint(&self, plan: &HaloPlan) -> HaloReduce {
        HaloReduce {
            role: self.role.adjoint(),
            dim: plan.dim as isize,
            radius: self.radius,
            local_rows: None,
        }
    }
}

/// The adjoint of [`HaloExchange`]: the input holds `local_rows + 2 ×
/// radius` rows along a dimension; its halo rows are sent to the
/// neighbours that own them and added onto their rows (dropped beyond the
/// first and last rank), giving `local_rows` rows. Sums run in a fixed
/// order: own rows, then the previous rank's contribution, then the next
/// rank's.
#[derive(Clone, Copy, Debug)]
pub struct HaloReduce {
    role: Role,
    dim: isize,
    radius: usize,
    /// The rows without halos (`None`: the input's rows less `2 × radius`).
    local_rows: Option<usize>,
}

impl HaloReduce {
    /// Reduce a halo of `radius` rows along `dim` onto `local_rows` rows.
    pub fn new(dim: isize, radius: usize, local_rows: usize) -> Self {
        HaloReduce {
            role: Role::forward(TensorOp::HaloReduce),
            dim,
            radius,
            local_rows: Some(local_rows),
        }
    }
}

impl LinearOp for HaloReduce {
    type Plan = HaloPlan;
    type Adjoint = HaloExchange;

    fn role(&self) -> Role {
        self.role
    }

    fn plan<G: Group>(
        &self,
        g: &G,
        shape: &[usize],
        dtype: DType,
        tracked: bool,
    ) -> Result<HaloPlan, Error> {
        let r2 = 2 * self.radius;
        let local = self.local_rows;
        agree_halo(
            g,
            self.role,
            self.dim,
            self.radius,
            |rows| local.unwrap_or(rows.saturating_sub(r2)),
            |rows| {
                let expected = local.map_or(rows.max(r2), |l| l + r2);
                (rows != expected).then_some(Problem::HaloShape { rows, expected })
            },
            shape,
            dtype,
            tracked,
        )
    }

    fn forward<B: Backend, G: Group>(
        &self,
        g: &G,
        plan: &HaloPlan,
        y: FloatTensor<B>,
    ) -> Result<FloatTensor<B>, Error> {
        let (me, n, r) = (g.rank(), g.size(), self.radius);
        if r == 0 {
            return Ok(y);
        }
        let local = plan.rows[me];
        let yt = front::<B>(y, plan.dim);
        let own = narrow::<B>(yt.clone(), 0, r, local);
        let (prev, next) = neighbours(me, n);
        if prev.is_none() && next.is_none() {
            return Ok(front::<B>(own, plan.dim));
        }
        let mut send = alloc::vec![0usize; n];
        let mut recv = alloc::vec![0usize; n];
        let mut parts = Vec::new();
        if let Some(p) = prev {
            parts.push(narrow::<B>(yt.clone(), 0, 0, r));
            (send[p], recv[p]) = (r, r);
        }
        if let Some(q) = next {
            parts.push(narrow::<B>(yt, 0, r + local, r));
            (send[q], recv[q]) = (r, r);
        }
        let got = g.exchange_rows::<B>(self.role.op, B::float_cat(parts, 0), &send, &recv)?;
        // Every rank of a group of more than one holds at least `r` rows.
        let rest = local - r;
        let mut out = own;
        if prev.is_some() {
            let add = narrow::<B>(got.clone(), 0, 0, r);
            let pad = zeros_like_along::<B>(&add, 0, rest);
            out = B::float_add(out, B::float_cat(alloc::vec![add, pad], 0));
        }
        if next.is_some() {
            let len = got.shape()[0];
            let add = narrow::<B>(got, 0, len - r, r);
            let pad = zeros_like_along::<B>(&add, 0, rest);
            out = B::float_add(out, B::float_cat(alloc::vec![pad, add], 0));
        }
        Ok(front::<B>(out, plan.dim))
    }

    fn adjoint(&self, plan: &HaloPlan) -> HaloExchange {
        HaloExchange {
            role: self.role.adjoint(),
            dim: plan.dim as isize,
            radius: self.radius,
        }
    }
}
