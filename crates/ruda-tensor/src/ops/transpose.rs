//! The distributed transpose: an all-to-all that moves the split from one
//! dimension to another.

use alloc::vec::Vec;

use burn_backend::tensor::FloatTensor;
use burn_backend::{Backend, DType, Shape, TensorMetadata};

use super::{LinearOp, Role, balanced, resolve};
use crate::agreement::{self, Facts, Problem};
use crate::error::{Error, TensorOp};
use crate::group::Group;
use crate::layout::{narrow, starts};
use crate::shape_hash;

/// The two axes of a distributed transpose, named so that they cannot be
/// swapped silently: the input is split over the ranks along `split_in`
/// (and whole along `split_out`); the output is split along `split_out`
/// (and whole along `split_in`). Every level takes it — the tensor method
/// [`crate::TensorExt::transpose_over`], [`crate::primitives::transpose`]
/// and [`Transpose::new`] — so code moves between levels unchanged. Only
/// the seed's torch-harmonics names (`distributed_transpose_azimuth` and
/// `_polar`) keep torch-harmonics' tuple `dims = (split_out, split_in)`;
/// [`TransposeAxes::from_torch_harmonics`] converts it.
///
/// # Example
/// ```
/// use burn_tensor::{Device, Tensor};
/// use ruda_comm::LocalWorld;
/// use ruda_tensor::{HostCollective, TensorExt, TransposeAxes};
/// let shapes = LocalWorld::new(2).run(|c| {
///     let g = HostCollective::new(c);
///     let x = Tensor::<2>::zeros([4, 3], &Device::flex()); // columns split: 3 + 3
///     let y = x.transpose_over(&g, TransposeAxes { split_in: 1, split_out: 0 })?;
///     Ok::<_, ruda_tensor::Error>(y.dims())
/// }).unwrap();
/// assert_eq!(shapes, vec![[2, 6], [2, 6]]); // rows split: 2 + 2
/// assert_eq!(
///     TransposeAxes::from_torch_harmonics((0, 1)),
///     TransposeAxes { split_in: 1, split_out: 0 }
/// );
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TransposeAxes {
    /// The axis the input is split along (sizes may differ per rank).
    pub split_in: isize,
    /// The axis the output is split along (balanced chunks).
    pub split_out: isize,
}

impl TransposeAxes {
    /// From torch-harmonics' `dims = (dim0, dim1)` of
    /// `distributed_transpose_azimuth/polar`: the output split along
    /// `dim0`, the input along `dim1`.
    pub const fn from_torch_harmonics(dims: (isize, isize)) -> Self {
        TransposeAxes {
            split_in: dims.1,
            split_out: dims.0,
        }
    }

    /// The same transpose backwards (the adjoint's axes).
    pub const fn reversed(self) -> Self {
        TransposeAxes {
            split_in: self.split_out,
            split_out: self.split_in,
        }
    }
}

/// The input is split over the ranks along `axes.split_in` (each rank's
/// size discovered; a declared list is checked) and whole along
/// `axes.split_out`; the output is split along `axes.split_out` (balanced
/// chunks, or the sizes the forward pass had when this is its adjoint) and
/// whole along `axes.split_in`. Every other axis must agree across ranks.
/// The adjoint is the inverse transpose with the forward's actual sizes.
#[derive(Clone, Debug)]
pub struct Transpose {
    role: Role,
    /// `(split_out, split_in)`.
    dims: (isize, isize),
    declared: Option<Vec<usize>>,
    out_sizes: Option<Vec<usize>>,
}

impl Transpose {
    /// Transpose over `axes`, optionally checking the declared sizes along
    /// `axes.split_in`.
    pub fn new(axes: TransposeAxes, declared: Option<Vec<usize>>) -> Self {
        Transpose {
            role: Role::forward(TensorOp::Transpose),
            dims: (axes.split_out, axes.split_in),
            declared,
            out_sizes: None,
        }
    }
}

/// The resolved dimensions and every rank's sizes along both.
#[derive(Clone, Debug)]
pub struct TransposePlan {
    /// The dimension split in the output.
    pub d0: usize,
    /// The dimension split in the input.
    pub d1: usize,
    /// Every rank's size along `d0` in the output.
    pub sizes0: Vec<usize>,
    /// Every rank's size along `d1` in the input.
    pub sizes1: Vec<usize>,
}

impl LinearOp for Transpose {
    type Plan = TransposePlan;
    type Adjoint = Transpose;

    fn role(&self) -> Role {
        self.role
    }

    fn plan<G: Group>(
        &self,
        g: &G,
        shape: &[usize],
        dtype: DType,
        tracked: bool,
    ) -> Result<TransposePlan, Error> {
        let (me, n, op) = (g.rank(), g.size(), self.role.op);
        let ndim = shape.len();
        let d0 = resolve(self.dims.0, ndim);
        let d1 = resolve(self.dims.1, ndim).and_then(|d1| match d0 {
            Ok(d0) if d0 == d1 => Err(Problem::Dim {
                dim: self.dims.1,
                ndim,
            }),
            _ => Ok(d1),
        });
        let sizes0 = match (&self.out_sizes, d0) {
            (Some(s), _) => Ok(s.clone()),
            (None, Ok(d0)) => balanced(shape[d0], n),
            (None, Err(p)) => Err(p),
        };
        let problem = d0
            .err()
            .or(d1.err())
            .or(sizes0.as_ref().err().copied())
            .or((!agreement::movable(dtype)).then_some(Problem::UnsupportedDType));
        let (d0, d1) = (d0.unwrap_or(0), d1.unwrap_or(0));
        let words = match &self.declared {
            Some(v) => [shape_hash::declared_sizes(v), 0],
            None => [0, 0],
        };
        let mut f = Facts::new(op, dtype, shape);
        f.backward = self.role.backward;
        f.problem = problem;
        f.free_axis = Some(d1);
        f.tracked = Some(tracked);
        f.param = (d0 * 64 + d1) as i64;
        f.words = &words;
        let agreed = agreement::agree(g, f, |offender, got, expected| Error::Mismatch {
            op,
            rank: me,
            offender,
            what: "axes (as 64 × split_out + split_in, resolved)",
            expected,
            got,
        })?;
        let sizes1 = agreed.sizes;
        let want = shape_hash::declared_sizes(&sizes1);
        for (r, w) in agreed.words.iter().enumerate() {
            if w[0] != 0 && w[0] != want {
                return Err(Error::DeclaredSizes {
                    op,
                    rank: me,
                    offender: r,
                    declared: (r == me).then(|| self.declared.clone()).flatten(),
                    actual: sizes1,
                });
            }
        }
        Ok(TransposePlan {
            d0,
            d1,
            sizes0: sizes0.unwrap_or_default(),
            sizes1,
        })
    }

    fn forward<B: Backend, G: Group>(
        &self,
        g: &G,
        plan: &TransposePlan,
        x: FloatTensor<B>,
    ) -> Result<FloatTensor<B>, Error> {
        let (me, n) = (g.rank(), g.size());
        if n == 1 {
            return Ok(x);
        }
        let (d0, d1) = (plan.d0, plan.d1);
        let shape = x.shape().to_vec();
        // Every block keeps the tensor's own axis order (no permutes, so
        // every copy runs over long contiguous stretches and the result is
        // contiguous): destination p gets the slab `d0 ∈ chunk p`,
        // flattened; block p received is the slab of source p with
        // `d0 = sizes0[me]` and `d1 = sizes1[p]`, and the blocks join along
        // d1. Elements travel as rows of one.
        // Elements per unit of axis `d` (the product of every other axis;
        // no division, so a zero-size axis anywhere is fine).
        let per = |s: &[usize], d: usize| -> usize {
            s.iter()
                .enumerate()
                .filter(|&(i, _)| i != d)
                .map(|(_, &v)| v)
                .product()
        };
        let sends: Vec<usize> = plan.sizes0.iter().map(|&c| per(&shape, d0) * c).collect();
        let flat = if d0 == 0 {
            B::float_reshape(x, Shape::from(alloc::vec![per(&shape, d0) * shape[d0], 1]))
        } else {
            let parts = starts(&plan.sizes0)
                .into_iter()
                .zip(&plan.sizes0)
                .zip(&sends)
                .map(|((s, &c), &len)| {
                    B::float_reshape(
                        narrow::<B>(x.clone(), d0, s, c),
                        Shape::from(alloc::vec![len, 1]),
                    )
                })
                .collect();
            B::float_cat(parts, 0)
        };
        let mut block_shape = shape.clone();
        block_shape[d0] = plan.sizes0[me];
        let recv: Vec<usize> = plan
            .sizes1
            .iter()
            .map(|&s| per(&block_shape, d1) * s)
            .collect();
        let got = g.exchange_rows::<B>(self.role.op, flat, &sends, &recv)?;
        let blocks = starts(&recv)
            .into_iter()
            .zip(&recv)
            .zip(&plan.sizes1)
            .map(|((s, &len), &s1)| {
                let mut bs = block_shape.clone();
                bs[d1] = s1;
                B::float_reshape(narrow::<B>(got.clone(), 0, s, len), Shape::from(bs))
            })
            .collect();
        Ok(B::float_cat(blocks, d1))
    }

    fn adjoint(&self, plan: &TransposePlan) -> Transpose {
        Transpose {
            role: self.role.adjoint(),
            dims: (plan.d1 as isize, plan.d0 as isize),
            declared: Some(plan.sizes0.clone()),
            out_sizes: Some(plan.sizes1.clone()),
        }
    }
}
