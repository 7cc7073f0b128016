//! The agreement every tensor collective reaches before data moves: one
//! small all-gather of a header per rank (local problems, dtype, shape), so
//! that a violation anywhere is the same error on every rank.

use alloc::vec::Vec;

use burn_backend::DType;
use ruda_comm::Communicator;

use crate::error::{CountProblem, ShapeProblem, TensorCollectiveError, TensorOp};

/// Axes recorded in a header for error messages; longer shapes are compared
/// through a hash of all axes.
const SHOWN_AXES: usize = 8;
/// Words in one header.
pub(crate) const HEADER_WORDS: usize = 6 + SHOWN_AXES;

/// What a rank found wrong with its own input before the exchange.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Problem {
    Shape(ShapeProblem),
    Counts(CountProblem),
    UnsupportedDType,
    InvalidRoot { root: u32, size: usize },
}

/// Which axes must agree across ranks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ShapeRule {
    /// The whole shape.
    Equal,
    /// All but the leading axis.
    Trailing,
}

/// The dtype code sent in headers; 0 for dtypes no collective moves.
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

fn dtype_of(code: i64) -> Option<DType> {
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

/// One rank's header, decoded.
#[derive(Clone, Debug)]
pub(crate) struct Header {
    problem: Option<Problem>,
    dtype: i64,
    ndim: usize,
    hash: i64,
    shown: Vec<usize>,
}

fn hash(dims: &[usize]) -> i64 {
    ruda_comm::conformance::mix(&dims.iter().map(|&d| d as u64).collect::<Vec<_>>()) as i64
}

fn encode(problem: Option<Problem>, dtype: DType, shape: &[usize]) -> [i64; HEADER_WORDS] {
    let mut h = [0i64; HEADER_WORDS];
    let (code, a, b) = match problem {
        None => (0, 0, 0),
        Some(Problem::Shape(ShapeProblem::NoLeadingAxis)) => (1, 0, 0),
        Some(Problem::Shape(ShapeProblem::ZeroTrailingAxis)) => (2, 0, 0),
        Some(Problem::Shape(ShapeProblem::NotDivisible { ranks })) => (3, ranks, 0),
        Some(Problem::Counts(CountProblem::Length { got, ranks })) => (4, got, ranks),
        Some(Problem::Counts(CountProblem::Sum { sum, rows })) => (5, sum, rows),
        Some(Problem::Counts(CountProblem::BadPeer { peer, ranks })) => (6, peer, ranks),
        Some(Problem::Counts(CountProblem::Unmatched { source, dest, sent })) => {
            (7 + i64::from(sent), source, dest)
        }
        Some(Problem::UnsupportedDType) => (9, 0, 0),
        Some(Problem::InvalidRoot { root, size }) => (10, root as usize, size),
    };
    h[0] = code;
    h[1] = a as i64;
    h[2] = b as i64;
    h[3] = dtype_code(dtype);
    h[4] = shape.len() as i64;
    h[5] = hash(shape);
    for (slot, &d) in h[6..].iter_mut().zip(shape) {
        *slot = d as i64;
    }
    h
}

fn decode(h: &[i64]) -> Header {
    let (a, b) = (h[1] as usize, h[2] as usize);
    let problem = match h[0] {
        0 => None,
        1 => Some(Problem::Shape(ShapeProblem::NoLeadingAxis)),
        2 => Some(Problem::Shape(ShapeProblem::ZeroTrailingAxis)),
        3 => Some(Problem::Shape(ShapeProblem::NotDivisible { ranks: a })),
        4 => Some(Problem::Counts(CountProblem::Length { got: a, ranks: b })),
        5 => Some(Problem::Counts(CountProblem::Sum { sum: a, rows: b })),
        6 => Some(Problem::Counts(CountProblem::BadPeer { peer: a, ranks: b })),
        7 | 8 => Some(Problem::Counts(CountProblem::Unmatched {
            source: a,
            dest: b,
            sent: h[0] == 8,
        })),
        9 => Some(Problem::UnsupportedDType),
        _ => Some(Problem::InvalidRoot {
            root: a as u32,
            size: b,
        }),
    };
    let ndim = h[4] as usize;
    Header {
        problem,
        dtype: h[3],
        ndim,
        hash: h[5],
        shown: h[6..6 + ndim.min(SHOWN_AXES)]
            .iter()
            .map(|&d| d as usize)
            .collect(),
    }
}

/// The local facts one rank brings to the agreement.
pub(crate) struct Local<'a> {
    pub op: TensorOp,
    pub problem: Option<Problem>,
    pub dtype: DType,
    pub shape: &'a [usize],
    pub rule: ShapeRule,
    /// Extra words to gather with the header (the same count on every rank).
    pub extra: &'a [i64],
}

impl<'a> Local<'a> {
    /// Facts of an operation whose whole shape must agree, with no extra words.
    pub(crate) fn equal(
        op: TensorOp,
        problem: Option<Problem>,
        dtype: DType,
        shape: &'a [usize],
    ) -> Self {
        Local {
            op,
            problem,
            dtype,
            shape,
            rule: ShapeRule::Equal,
            extra: &[],
        }
    }
}

/// All-gather every rank's header (and extra words) and return the same
/// verdict on every rank: the first problem in rank order, or a dtype or
/// shape disagreement with rank 0. On success, every rank's extra words.
pub(crate) fn agree<C: Communicator>(
    comm: &C,
    local: Local<'_>,
) -> Result<Vec<Vec<i64>>, TensorCollectiveError> {
    let (me, n) = (comm.rank(), comm.size());
    let op = local.op;
    let words = HEADER_WORDS + local.extra.len();
    let mut mine = Vec::with_capacity(words);
    let mut header = encode(local.problem, local.dtype, local.shape);
    if local.rule == ShapeRule::Trailing {
        // Compare trailing axes only: put their hash where the comparison looks.
        header[5] = hash(local.shape.get(1..).unwrap_or(&[]));
    }
    mine.extend_from_slice(&header);
    mine.extend_from_slice(local.extra);
    let mut all = alloc::vec![0i64; n * words];
    comm.all_gather(&mine, &mut all)?;
    let rows: Vec<&[i64]> = all.chunks(words).collect();
    let headers: Vec<Header> = rows.iter().map(|r| decode(&r[..HEADER_WORDS])).collect();
    for (r, h) in headers.iter().enumerate() {
        if let Some(p) = h.problem {
            return Err(problem_error(op, me, r, p, h, r == me, local));
        }
    }
    let h0 = &headers[0];
    for (r, h) in headers.iter().enumerate().skip(1) {
        if h.dtype != h0.dtype {
            let (Some(expected), Some(got)) = (dtype_of(h0.dtype), dtype_of(h.dtype)) else {
                unreachable!("unsupported dtypes are reported as problems first")
            };
            return Err(TensorCollectiveError::DTypeMismatch {
                op,
                rank: me,
                offender: r,
                reference: 0,
                expected,
                got,
            });
        }
        // The hash covers the axes the rule compares (see above).
        if h.ndim != h0.ndim || h.hash != h0.hash {
            return Err(TensorCollectiveError::ShapeMismatch {
                op,
                rank: me,
                offender: r,
                reference: 0,
                expected: h0.shown.clone(),
                got: h.shown.clone(),
                trailing_only: local.rule == ShapeRule::Trailing,
            });
        }
    }
    Ok(rows.iter().map(|r| r[HEADER_WORDS..].to_vec()).collect())
}

fn problem_error(
    op: TensorOp,
    me: usize,
    offender: usize,
    problem: Problem,
    h: &Header,
    is_me: bool,
    local: Local<'_>,
) -> TensorCollectiveError {
    match problem {
        Problem::Shape(problem) => TensorCollectiveError::BadShape {
            op,
            rank: me,
            offender,
            shape: h.shown.clone(),
            problem,
        },
        Problem::Counts(problem) => TensorCollectiveError::Counts {
            op,
            rank: me,
            offender,
            problem,
        },
        Problem::UnsupportedDType => TensorCollectiveError::UnsupportedDType {
            op,
            rank: me,
            offender,
            dtype: if is_me {
                Some(local.dtype)
            } else {
                dtype_of(h.dtype)
            },
        },
        Problem::InvalidRoot { root, size } => TensorCollectiveError::InvalidRoot {
            op,
            rank: me,
            root,
            size,
        },
    }
}

/// The local shape checks of the leading-axis operations: a leading axis,
/// no zero-sized trailing axis.
pub(crate) fn leading_axis_problem(shape: &[usize]) -> Option<Problem> {
    if shape.is_empty() {
        Some(Problem::Shape(ShapeProblem::NoLeadingAxis))
    } else if shape[1..].contains(&0) {
        Some(Problem::Shape(ShapeProblem::ZeroTrailingAxis))
    } else {
        None
    }
}
