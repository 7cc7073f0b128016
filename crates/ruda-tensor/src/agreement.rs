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
/// Where each field sits in a record: the marker (0), the call (1–3: op,
/// direction, position), the problem (4–7), then these; the first
/// [`SHOWN`] axes from `DIMS`, the per-peer words from [`HEAD`].
const DTYPE: usize = 8;
const TRACKED: usize = 9;
const NDIM: usize = 10;
const HASH: usize = 11;
const FREE: usize = 12;
const FREE_SIZE: usize = 13;
const PARAM: usize = 14;
const DIMS: usize = 15;
/// Words before the per-peer counts.
const HEAD: usize = DIMS + SHOWN;

/// What a rank found wrong with its own arguments before the exchange.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Problem {
    Shape(ShapeProblem),
    Counts(CountProblem),
    UnsupportedDType,
    Dim {
        dim: isize,
        ndim: usize,
    },
    EmptyChunk {
        size: usize,
        chunks: usize,
    },
    Root {
        root: usize,
    },
    HaloShape {
        rows: usize,
        expected: usize,
    },
    NumRanks {
        num_ranks: usize,
        size: usize,
    },
    /// The input is tracked by autodiff and the reduction has no gradient.
    NotDifferentiable,
}

impl Problem {
    /// The problem as four record words: a code and up to three values.
    fn encode(self) -> [i64; 4] {
        let u = |x: usize| x as i64;
        match self {
            Problem::Shape(ShapeProblem::NoLeadingAxis) => [1, 0, 0, 0],
            Problem::Shape(ShapeProblem::ZeroTrailingAxis) => [2, 0, 0, 0],
            Problem::Shape(ShapeProblem::NotDivisible { ranks }) => [3, u(ranks), 0, 0],
            Problem::Counts(CountProblem::Length { got, ranks }) => [4, u(got), u(ranks), 0],
            Problem::Counts(CountProblem::Sum { sum, rows }) => [5, u(sum), u(rows), 0],
            Problem::Counts(CountProblem::BadPeer { peer, ranks }) => [6, u(peer), u(ranks), 0],
            Problem::Counts(CountProblem::Unmatched { source, dest, sent }) => {
                [7 + i64::from(sent), u(source), u(dest), 0]
            }
            Problem::Counts(CountProblem::Reverse {
                source,
                expected,
                got,
            }) => [9, u(source), u(expected), u(got)],
            Problem::UnsupportedDType => [10, 0, 0, 0],
            Problem::Dim { dim, ndim } => [11, dim as i64, u(ndim), 0],
            Problem::EmptyChunk { size, chunks } => [12, u(size), u(chunks), 0],
            Problem::Root { root } => [13, u(root), 0, 0],
            Problem::HaloShape { rows, expected } => [14, u(rows), u(expected), 0],
            Problem::NumRanks { num_ranks, size } => [15, u(num_ranks), u(size), 0],
            Problem::NotDifferentiable => [16, 0, 0, 0],
            Problem::Shape(ShapeProblem::Channels { expected }) => [17, u(expected), 0, 0],
        }
    }

    /// The problem of four record words: `Ok(None)` for none, `Err(code)`
    /// for a code this build does not know (a record from another
    /// version), never another problem.
    fn decode(w: [i64; 4]) -> Result<Option<Problem>, i64> {
        let (a, b, c) = (w[1] as usize, w[2] as usize, w[3] as usize);
        Ok(Some(match w[0] {
            0 => return Ok(None),
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
            9 => Problem::Counts(CountProblem::Reverse {
                source: a,
                expected: b,
                got: c,
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
            16 => Problem::NotDifferentiable,
            17 => Problem::Shape(ShapeProblem::Channels { expected: a }),
            code => return Err(code),
        }))
    }
}

/// The word a reduction travels as in agreement records.
pub(crate) fn reduce_op_code(r: ruda_comm::ReduceOp) -> i64 {
    match r {
        ruda_comm::ReduceOp::Sum => 1,
        ruda_comm::ReduceOp::Prod => 2,
        ruda_comm::ReduceOp::Min => 3,
        ruda_comm::ReduceOp::Max => 4,
        ruda_comm::ReduceOp::Mean => 5,
    }
}

/// The reduction of a record word.
pub(crate) fn reduce_op_of(code: i64) -> Option<ruda_comm::ReduceOp> {
    ruda_comm::ReduceOp::ALL
        .into_iter()
        .find(|&r| reduce_op_code(r) == code)
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
    crate::shape_hash::mix(&dims) as i64
}

/// This rank's record of its call (`seq`: its position in the group's
/// sequence of collectives; `n`: the group's size).
fn record(f: &Facts<'_>, seq: u64, n: usize) -> Vec<i64> {
    let words = HEAD + 2 * n;
    let mut mine = alloc::vec![0i64; words];
    mine[0] = MAGIC;
    mine[1] = f.op.code();
    mine[2] = i64::from(f.backward);
    mine[3] = seq as i64;
    mine[4..8].copy_from_slice(&f.problem.map_or([0; 4], Problem::encode));
    mine[DTYPE] = dtype_code(f.dtype);
    mine[TRACKED] = f.tracked.map_or(2, i64::from);
    mine[NDIM] = f.shape.len() as i64;
    mine[HASH] = hash_masked(f.shape, f.free_axis);
    mine[FREE] = f.free_axis.map_or(0, |a| a as i64 + 1);
    mine[FREE_SIZE] = f
        .free_axis
        .or((!f.shape.is_empty()).then_some(0))
        .map_or(0, |a| f.shape.get(a).copied().unwrap_or(0) as i64);
    mine[PARAM] = f.param;
    for (i, slot) in mine[DIMS..HEAD].iter_mut().enumerate() {
        *slot = match f.shape.get(i) {
            Some(_) if Some(i) == f.free_axis => -1,
            Some(&d) => d as i64,
            None => -2,
        };
    }
    for (slot, &w) in mine[HEAD..].iter_mut().zip(f.words) {
        *slot = w;
    }
    mine
}

/// Exchange every rank's record and return the same verdict on every rank.
///
/// # Errors
/// In this order, for the first rank (in rank order) where it applies:
/// [`Error::Desync`] (another operation, direction or position than rank
/// 0); the problem a rank reported about its own arguments;
/// [`Error::DTypeMismatch`]; [`Error::TrackingMismatch`]; a parameter that
/// differs (reported by `param_error(offender, its value, rank 0's)`); [`Error::ShapeMismatch`]; and the
/// communicator's errors.
pub(crate) fn agree<G: Group>(
    g: &G,
    f: Facts<'_>,
    param_error: impl Fn(usize, i64, i64) -> Error,
) -> Result<Agreed, Error> {
    let (me, n) = (g.rank(), g.size());
    let words = HEAD + 2 * n;
    let mine = record(&f, g.seq(), n);
    let all = g.exchange_words(&mine)?;
    let recs: Vec<&[i64]> = all.chunks(words).collect();
    verdict(&recs, me, &f, &param_error)?;
    Ok(Agreed {
        sizes: recs.iter().map(|r| r[FREE_SIZE].max(0) as usize).collect(),
        words: recs.iter().map(|r| r[HEAD..].to_vec()).collect(),
    })
}

/// The call a record is from, or the unknown operation code.
fn call_id(r: &[i64]) -> Result<CallId, i64> {
    Ok(CallId {
        op: TensorOp::from_code(r[1]).ok_or(r[1])?,
        backward: r[2] != 0,
        seq: r[3] as u64,
    })
}

fn shown(r: &[i64]) -> Vec<Option<usize>> {
    let ndim = (r[NDIM].max(0) as usize).min(SHOWN);
    r[DIMS..DIMS + ndim]
        .iter()
        .map(|&d| (d >= 0).then_some(d as usize))
        .collect()
}

fn verdict(
    recs: &[&[i64]],
    me: usize,
    f: &Facts<'_>,
    param_error: &impl Fn(usize, i64, i64) -> Error,
) -> Result<(), Error> {
    let op = f.op;
    let r0 = recs[0];
    let unreadable = |offender: usize, what: &'static str, code: i64| Error::Record {
        op,
        rank: me,
        offender,
        what,
        code,
    };
    for (r, rec) in recs.iter().enumerate() {
        if rec[0] != MAGIC {
            return Err(unreadable(r, "record marker", rec[0]));
        }
        let got = call_id(rec).map_err(|c| unreadable(r, "operation", c))?;
        if rec[1..4] != r0[1..4] {
            return Err(Error::Desync {
                rank: me,
                offender: r,
                reference: 0,
                expected: call_id(r0).map_err(|c| unreadable(0, "operation", c))?,
                got,
            });
        }
    }
    for (r, rec) in recs.iter().enumerate() {
        let decoded = Problem::decode([rec[4], rec[5], rec[6], rec[7]])
            .map_err(|c| unreadable(r, "problem", c))?;
        if let Some(p) = decoded {
            return Err(problem_error(op, me, r, p, rec, n_of(recs), r0[PARAM]));
        }
    }
    for (r, rec) in recs.iter().enumerate() {
        if rec[DTYPE] != 0 && dtype_of(rec[DTYPE]).is_none() {
            return Err(unreadable(r, "dtype", rec[DTYPE]));
        }
    }
    for (r, rec) in recs.iter().enumerate().skip(1) {
        if rec[DTYPE] != r0[DTYPE] {
            let (Some(expected), Some(got)) = (dtype_of(r0[DTYPE]), dtype_of(rec[DTYPE])) else {
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
        if rec[TRACKED] != r0[TRACKED] && rec[TRACKED] != 2 && r0[TRACKED] != 2 {
            return Err(Error::TrackingMismatch {
                op,
                rank: me,
                offender: r,
                reference: 0,
                offender_tracked: rec[TRACKED] == 1,
            });
        }
    }
    for (r, rec) in recs.iter().enumerate().skip(1) {
        if rec[PARAM] != r0[PARAM] {
            return Err(param_error(r, rec[PARAM], r0[PARAM]));
        }
    }
    for (r, rec) in recs.iter().enumerate().skip(1) {
        // The axes the record carries are compared exactly; the hash
        // decides only for axes beyond them.
        let ndim = rec[NDIM].max(0) as usize;
        let differs = rec[NDIM] != r0[NDIM]
            || rec[FREE] != r0[FREE]
            || rec[DIMS..HEAD] != r0[DIMS..HEAD]
            || (ndim > SHOWN && rec[HASH] != r0[HASH]);
        if differs {
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
            dtype: dtype_of(rec[DTYPE]),
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
        Problem::NotDifferentiable => Error::NotDifferentiable {
            op,
            rank: me,
            offender,
            reduce: reduce_op_of(rec[PARAM]).unwrap_or(ruda_comm::ReduceOp::Prod),
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Every problem, with values at the edges of what a record carries.
    fn every_problem() -> Vec<Problem> {
        let big = usize::MAX >> 1;
        let mut v = vec![
            Problem::Shape(ShapeProblem::NoLeadingAxis),
            Problem::Shape(ShapeProblem::ZeroTrailingAxis),
            Problem::UnsupportedDType,
            Problem::NotDifferentiable,
        ];
        for (a, b, c) in [(0, 0, 0), (1, 2, 3), (big, big - 1, 7)] {
            v.extend([
                Problem::Shape(ShapeProblem::NotDivisible { ranks: a }),
                Problem::Counts(CountProblem::Length { got: a, ranks: b }),
                Problem::Counts(CountProblem::Sum { sum: a, rows: b }),
                Problem::Counts(CountProblem::BadPeer { peer: a, ranks: b }),
                Problem::Counts(CountProblem::Unmatched {
                    source: a,
                    dest: b,
                    sent: false,
                }),
                Problem::Counts(CountProblem::Unmatched {
                    source: a,
                    dest: b,
                    sent: true,
                }),
                Problem::Counts(CountProblem::Reverse {
                    source: a,
                    expected: b,
                    got: c,
                }),
                Problem::Dim {
                    dim: -(a as isize) - 1,
                    ndim: b,
                },
                Problem::Dim {
                    dim: a as isize,
                    ndim: b,
                },
                Problem::EmptyChunk { size: a, chunks: b },
                Problem::Root { root: a },
                Problem::HaloShape {
                    rows: a,
                    expected: b,
                },
                Problem::NumRanks {
                    num_ranks: a,
                    size: b,
                },
                Problem::Shape(ShapeProblem::Channels { expected: a }),
            ]);
        }
        v
    }

    #[test]
    fn every_problem_round_trips_through_its_record_words() {
        let problems = every_problem();
        let mut codes = std::collections::BTreeSet::new();
        for p in problems {
            let w = p.encode();
            assert_ne!(w[0], 0, "{p:?} is not 'no problem'");
            codes.insert(w[0]);
            assert_eq!(Problem::decode(w), Ok(Some(p)), "{p:?} as {w:?}");
        }
        // 17 codes: one per problem, the two kinds of unmatched block apart.
        assert_eq!(codes.len(), 17);
        assert_eq!(Problem::decode([0; 4]), Ok(None));
    }

    #[test]
    fn an_unknown_problem_code_is_its_own_error() {
        for code in [18, 99, -1, i64::MAX] {
            assert_eq!(Problem::decode([code, 1, 2, 3]), Err(code));
        }
    }

    #[test]
    fn every_dtype_code_round_trips() {
        for d in [
            DType::F64,
            DType::F32,
            DType::Flex32,
            DType::F16,
            DType::BF16,
            DType::I64,
            DType::I32,
            DType::I16,
            DType::I8,
            DType::U64,
            DType::U32,
            DType::U16,
            DType::U8,
        ] {
            assert_eq!(dtype_of(dtype_code(d)), Some(d));
        }
        assert_eq!(dtype_of(0), None);
        assert_eq!(dtype_of(14), None);
    }

    fn judge(recs: &[Vec<i64>], f: &Facts<'_>) -> Result<(), Error> {
        let recs: Vec<&[i64]> = recs.iter().map(Vec::as_slice).collect();
        verdict(&recs, 0, f, &|_, _, _| unreachable!("no parameter"))
    }

    #[test]
    fn shapes_the_record_carries_are_compared_exactly_not_by_hash() {
        let (a, b) = ([2usize, 3], [2usize, 4]);
        let fa = Facts::new(TensorOp::AllReduceSum, DType::F64, &a);
        let fb = Facts::new(TensorOp::AllReduceSum, DType::F64, &b);
        let mut r1 = record(&fb, 0, 2);
        let r0 = record(&fa, 0, 2);
        // As if the two shapes' hashes collided.
        r1[HASH] = r0[HASH];
        match judge(&[r0, r1], &fa) {
            Err(Error::ShapeMismatch {
                offender: 1,
                expected,
                got,
                ..
            }) => {
                assert_eq!(expected, vec![Some(2), Some(3)]);
                assert_eq!(got, vec![Some(2), Some(4)]);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn records_with_unknown_codes_are_record_errors() {
        let shape = [2usize, 3];
        let f = Facts::new(TensorOp::AllReduceSum, DType::F64, &shape);
        let good = record(&f, 0, 2);
        for (field, at, what) in [
            (1usize, 9999i64, "operation"),
            (4, 77, "problem"),
            (DTYPE, 55, "dtype"),
            (0, 12345, "record marker"),
        ] {
            let mut bad = good.clone();
            bad[field] = at;
            match judge(&[good.clone(), bad], &f) {
                Err(Error::Record {
                    offender: 1,
                    what: w,
                    code,
                    ..
                }) => {
                    assert_eq!((w, code), (what, at));
                }
                other => panic!("{what}: {other:?}"),
            }
        }
    }
}
