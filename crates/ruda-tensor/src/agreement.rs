//! The one exchange every tensor-level call makes before data moves: each
//! rank contributes a fixed-size record of its call (operation, forward or
//! backward, its position in the group's sequence of collectives), the
//! problems it found in its own arguments, its dtype, whether its input is
//! tracked by autodiff, its full shape (one axis may be free to differ),
//! one parameter every rank must share (a radius, a root…) and up to two
//! words per peer (counts). Every rank checks every record in the same
//! order, so a violation anywhere is the same error everywhere; on success
//! every rank knows every rank's free-axis size and counts, which is all
//! the data movement needs (no second exchange).

use alloc::vec::Vec;

use burn_backend::DType;

use crate::error::{CallId, CountProblem, Error, ShapeProblem, TensorOp};
use crate::group::Group;
use crate::layout::LayoutError;

/// Marks a tensor-layer record ("rudaTens").
const MAGIC: i64 = 0x7275_6461_5465_6e73;
/// Axes shown in error messages; longer shapes are compared by hash.
const SHOWN: usize = 8;
/// Words before the per-peer counts.
const HEAD: usize = 14 + SHOWN;

/// What a rank found wrong with its own arguments before the exchange.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Problem {
    Shape(ShapeProblem),
    Counts(CountProblem),
    UnsupportedDType,
    Dim { dim: isize, ndim: usize },
    EmptyChunk { size: usize, chunks: usize },
    Root { root: usize },
    HaloShape { rows: usize, expected: usize },
    NumRanks { num_ranks: usize, size: usize },
}

impl Problem {
    fn encode(self) -> [i64; 3] {
        let u = |x: usize| x as i64;
        match self {
            Problem::Shape(ShapeProblem::NoLeadingAxis) => [1, 0, 0],
            Problem::Shape(ShapeProblem::ZeroTrailingAxis) => [2, 0, 0],
            Problem::Shape(ShapeProblem::NotDivisible { ranks }) => [3, u(ranks), 0],
            Problem::Counts(CountProblem::Length { got, ranks }) => [4, u(got), u(ranks)],
            Problem::Counts(CountProblem::Sum { sum, rows }) => [5, u(sum), u(rows)],
            Problem::Counts(CountProblem::BadPeer { peer, ranks }) => [6, u(peer), u(ranks)],
            Problem::Counts(CountProblem::Unmatched { source, dest, sent }) => {
                [7 + i64::from(sent), u(source), u(dest)]
            }
            Problem::Counts(CountProblem::Reverse { .. }) => [9, 0, 0],
            Problem::UnsupportedDType => [10, 0, 0],
            Problem::Dim { dim, ndim } => [11, dim as i64, u(ndim)],
            Problem::EmptyChunk { size, chunks } => [12, u(size), u(chunks)],
            Problem::Root { root } => [13, u(root), 0],
            Problem::HaloShape { rows, expected } => [14, u(rows), u(expected)],
            Problem::NumRanks { num_ranks, size } => [15, u(num_ranks), u(size)],
        }
    }

    fn decode(w: [i64; 3]) -> Option<Problem> {
        let (a, b) = (w[1] as usize, w[2] as usize);
        Some(match w[0] {
            0 => return None,
            1 => Problem::Shape(ShapeProblem::NoLeadingAxis),
            2 => Problem::Shape(ShapeProblem::ZeroTrailingAxis),
            3 => Problem::Shape(ShapeProblem::NotDivisible { ranks: a }),
            4 => Problem::Counts(CountProblem::Length { got: a, ranks: b }),
            5 => Problem::Counts(CountProblem::Sum { sum: a, rows: b }),
            6 => Problem::Counts(CountProblem::BadPeer { peer: a, ranks: b }),
            7 | 8 => Problem::Counts(CountProblem::Unmatched {
                source: a,
                dest: b,
                sent: w[0] == 8,
            }),
            10 => Problem::UnsupportedDType,
            11 => Problem::Dim {
                dim: w[1] as isize,
                ndim: b,
            },
            12 => Problem::EmptyChunk { size: a, chunks: b },
            13 => Problem::Root { root: a },
            14 => Problem::HaloShape {
                rows: a,
                expected: b,
            },
            15 => Problem::NumRanks {
                num_ranks: a,
                size: b,
            },
            _ => Problem::UnsupportedDType,
        })
    }
}

/// The dtype code sent in records; 0 for dtypes no collective moves.
pub(crate) fn dtype_code(d: DType) -> i64 {
    match d {
        DType::F64 => 1,
        DType::F32 => 2,
        DType::Flex32 => 3,
        DType::F16 => 4,
        DType::BF16 => 5,
        DType::I64 => 6,
        DType::I32 => 7,
        DType::I16 => 8,
        DType::I8 => 9,
        DType::U64 => 10,
        DType::U32 => 11,
        DType::U16 => 12,
        DType::U8 => 13,
        _ => 0,
    }
}

pub(crate) fn dtype_of(code: i64) -> Option<DType> {
    Some(match code {
        1 => DType::F64,
        2 => DType::F32,
        3 => DType::Flex32,
        4 => DType::F16,
        5 => DType::BF16,
        6 => DType::I64,
        7 => DType::I32,
        8 => DType::I16,
        9 => DType::I8,
        10 => DType::U64,
        11 => DType::U32,
        12 => DType::U16,
        13 => DType::U8,
        _ => return None,
    })
}

/// Whether a dtype can move at all (as words of its size).
pub(crate) fn movable(d: DType) -> bool {
    dtype_code(d) != 0
}

/// Whether a dtype can be summed by the float collectives.
pub(crate) fn summable(d: DType) -> bool {
    matches!(
        d,
        DType::F64 | DType::F32 | DType::Flex32 | DType::F16 | DType::BF16
    )
}

/// The local facts one rank brings to a call.
pub(crate) struct Facts<'a> {
    pub op: TensorOp,
    pub backward: bool,
    pub problem: Option<Problem>,
    pub dtype: DType,
    pub shape: &'a [usize],
    /// The axis whose size may differ across ranks.
    pub free_axis: Option<usize>,
    /// `Some(tracked)` when every rank must agree on it (the backward pass
    /// communicates).
    pub tracked: Option<bool>,
    /// A value every rank must pass alike (a radius, a root…).
    pub param: i64,
    /// Up to two words per peer (counts), not compared.
    pub words: &'a [i64],
}

impl<'a> Facts<'a> {
    /// Facts of a forward call with no free axis, no parameter, no words.
    pub(crate) fn new(op: TensorOp, dtype: DType, shape: &'a [usize]) -> Self {
        Facts {
            op,
            backward: false,
            problem: None,
            dtype,
            shape,
            free_axis: None,
            tracked: None,
            param: 0,
            words: &[],
        }
    }
}

/// What every rank learns from the exchange.
#[derive(Clone, Debug)]
pub(crate) struct Agreed {
    /// Each rank's size along the free axis (the leading axis when none is free).
    pub sizes: Vec<usize>,
    /// Each rank's per-peer words (two per peer).
    pub words: Vec<Vec<i64>>,
}

fn hash_masked(shape: &[usize], free: Option<usize>) -> i64 {
    let dims: Vec<u64> = shape
        .iter()
        .enumerate()
        .map(|(i, &d)| if Some(i) == free { u64::MAX } else { d as u64 })
        .collect();
    ruda_comm::conformance::mix(&dims) as i64
}

/// Exchange every rank's record and return the same verdict on every rank.
///
/// # Errors
/// In this order, for the first rank (in rank order) where it applies:
/// [`Error::Desync`] (another operation, direction or position than rank
/// 0); the problem a rank reported about its own arguments;
/// [`Error::DTypeMismatch`]; [`Error::TrackingMismatch`]; a parameter that
/// differs (reported by `param_error`); [`Error::ShapeMismatch`]; and the
/// communicator's errors.
pub(crate) fn agree<G: Group>(
    g: &G,
    f: Facts<'_>,
    param_error: impl Fn(usize, i64) -> Error,
) -> Result<Agreed, Error> {
    let (me, n) = (g.rank(), g.size());
    let words = HEAD + 2 * n;
    let mut mine = alloc::vec![0i64; words];
    mine[0] = MAGIC;
    mine[1] = f.op.code();
    mine[2] = i64::from(f.backward);
    mine[3] = g.seq() as i64;
    mine[4..7].copy_from_slice(&f.problem.map_or([0; 3], Problem::encode));
    mine[7] = dtype_code(f.dtype);
    mine[8] = f.tracked.map_or(2, i64::from);
    mine[9] = f.shape.len() as i64;
    mine[10] = hash_masked(f.shape, f.free_axis);
    mine[11] = f.free_axis.map_or(0, |a| a as i64 + 1);
    mine[12] = f
        .free_axis
        .or((!f.shape.is_empty()).then_some(0))
        .map_or(0, |a| f.shape.get(a).copied().unwrap_or(0) as i64);
    mine[13] = f.param;
    for (i, slot) in mine[14..HEAD].iter_mut().enumerate() {
        *slot = match f.shape.get(i) {
            Some(_) if Some(i) == f.free_axis => -1,
            Some(&d) => d as i64,
            None => -2,
        };
    }
    for (slot, &w) in mine[HEAD..].iter_mut().zip(f.words) {
        *slot = w;
    }
    let all = g.exchange_words(&mine)?;
    let recs: Vec<&[i64]> = all.chunks(words).collect();
    verdict(&recs, me, &f, &param_error)?;
    Ok(Agreed {
        sizes: recs.iter().map(|r| r[12].max(0) as usize).collect(),
        words: recs.iter().map(|r| r[HEAD..].to_vec()).collect(),
    })
}

fn call_id(r: &[i64]) -> CallId {
    CallId {
        op: TensorOp::from_code(r[1]).unwrap_or(TensorOp::Grid),
        backward: r[2] != 0,
        seq: r[3] as u64,
    }
}

fn shown(r: &[i64]) -> Vec<Option<usize>> {
    let ndim = (r[9].max(0) as usize).min(SHOWN);
    r[14..14 + ndim]
        .iter()
        .map(|&d| (d >= 0).then_some(d as usize))
        .collect()
}

fn verdict(
    recs: &[&[i64]],
    me: usize,
    f: &Facts<'_>,
    param_error: &impl Fn(usize, i64) -> Error,
) -> Result<(), Error> {
    let op = f.op;
    let r0 = recs[0];
    for (r, rec) in recs.iter().enumerate() {
        if rec[0] != MAGIC || rec[1..4] != r0[1..4] {
            return Err(Error::Desync {
                rank: me,
                offender: r,
                reference: 0,
                expected: call_id(r0),
                got: call_id(rec),
            });
        }
    }
    for (r, rec) in recs.iter().enumerate() {
        if let Some(p) = Problem::decode([rec[4], rec[5], rec[6]]) {
            return Err(problem_error(op, me, r, p, rec, n_of(recs), r0[13]));
        }
    }
    for (r, rec) in recs.iter().enumerate().skip(1) {
        if rec[7] != r0[7] {
            let (Some(expected), Some(got)) = (dtype_of(r0[7]), dtype_of(rec[7])) else {
                unreachable!("unmovable dtypes are reported as problems first")
            };
            return Err(Error::DTypeMismatch {
                op,
                rank: me,
                offender: r,
                reference: 0,
                expected,
                got,
            });
        }
    }
    for (r, rec) in recs.iter().enumerate().skip(1) {
        if rec[8] != r0[8] && rec[8] != 2 && r0[8] != 2 {
            return Err(Error::TrackingMismatch {
                op,
                rank: me,
                offender: r,
                reference: 0,
                offender_tracked: rec[8] == 1,
            });
        }
    }
    for (r, rec) in recs.iter().enumerate().skip(1) {
        if rec[13] != r0[13] {
            return Err(param_error(r, rec[13]));
        }
    }
    for (r, rec) in recs.iter().enumerate().skip(1) {
        if rec[9] != r0[9] || rec[10] != r0[10] || rec[11] != r0[11] {
            return Err(Error::ShapeMismatch {
                op,
                rank: me,
                offender: r,
                reference: 0,
                expected: shown(r0),
                got: shown(rec),
                free_axis: f.free_axis,
            });
        }
    }
    Ok(())
}

fn n_of(recs: &[&[i64]]) -> usize {
    recs.len()
}

fn problem_error(
    op: TensorOp,
    me: usize,
    offender: usize,
    p: Problem,
    rec: &[i64],
    n: usize,
    root0: i64,
) -> Error {
    match p {
        Problem::Shape(problem) => Error::BadShape {
            op,
            rank: me,
            offender,
            shape: shown(rec).into_iter().map(|d| d.unwrap_or(0)).collect(),
            problem,
        },
        Problem::Counts(problem) => Error::Counts {
            op,
            rank: me,
            offender,
            problem,
        },
        Problem::UnsupportedDType => Error::UnsupportedDType {
            op,
            rank: me,
            offender,
            dtype: dtype_of(rec[7]),
        },
        Problem::Dim { dim, ndim } => Error::Layout {
            op,
            rank: me,
            error: LayoutError::Dim { dim, ndim },
        },
        Problem::EmptyChunk { size, chunks } => Error::Layout {
            op,
            rank: me,
            error: LayoutError::EmptyChunk { size, chunks },
        },
        Problem::HaloShape { rows, expected } => Error::HaloShape {
            rank: me,
            offender,
            rows,
            expected,
        },
        Problem::NumRanks { num_ranks, size } => Error::NumRanks {
            op,
            rank: me,
            offender,
            num_ranks,
            size,
        },
        Problem::Root { root } => Error::InvalidRoot {
            op,
            rank: me,
            offender,
            root,
            expected: root0.max(0) as usize,
            size: n,
        },
    }
}
