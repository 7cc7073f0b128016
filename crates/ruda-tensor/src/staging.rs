//! The host implementation of every tensor collective: tensors are read
//! into host [`TensorData`], moved by the communicator, and rebuilt.
//!
//! Copies per call (beyond the backend's own `into_data`/`from_data`, which
//! are zero-copy on Flex for a unique contiguous tensor): `all_reduce_sum`
//! and `broadcast_float` work in place on the staged bytes (no copy but the
//! communication itself); `all_gather_*`, `reduce_scatter_sum` and
//! `all_to_all_v_*` write the communicator's output straight into the new
//! tensor's storage (one copy, the communication itself). Non-reducing
//! operations move any dtype bit for bit as words of its size; sums run in
//! the element type, with `f16`/`bf16` accumulated in `f32`.

use alloc::borrow::Cow;
use alloc::vec::Vec;

use burn_backend::{Bytes, DType, TensorData};
use bytemuck::Pod;
use half::{bf16, f16};
use ruda_comm::{Communicator, ReduceOp};

use crate::contract::{self, Local, Problem, ShapeRule};
use crate::error::{CountProblem, ShapeProblem, TensorCollectiveError, TensorOp};

/// Run `$body` with `$W` the word type of `$size` bytes.
macro_rules! with_word {
    ($size:expr, $W:ident, $body:block) => {
        match $size {
            1 => {
                type $W = u8;
                $body
            }
            2 => {
                type $W = f16;
                $body
            }
            4 => {
                type $W = u32;
                $body
            }
            _ => {
                type $W = i64;
                $body
            }
        }
    };
}

/// Run `$body` with `$T` the float element type of `$dtype`.
macro_rules! with_float {
    ($dtype:expr, $T:ident, $body:block) => {
        match $dtype {
            DType::F64 => {
                type $T = f64;
                $body
            }
            DType::F16 => {
                type $T = f16;
                $body
            }
            DType::BF16 => {
                type $T = bf16;
                $body
            }
            _ => {
                type $T = f32;
                $body
            }
        }
    };
}

/// Size of the word a dtype moves as, if it can move at all.
fn word_size(dtype: DType) -> Option<usize> {
    (contract::dtype_code(dtype) != 0).then(|| dtype.size())
}

fn is_summable(dtype: DType) -> bool {
    matches!(
        dtype,
        DType::F64 | DType::F32 | DType::Flex32 | DType::F16 | DType::BF16
    )
}

/// A typed view of staged bytes, copied only if they are misaligned.
fn view<W: Pod>(bytes: &[u8]) -> Cow<'_, [W]> {
    match bytemuck::try_cast_slice(bytes) {
        Ok(s) => Cow::Borrowed(s),
        Err(_) => Cow::Owned(bytemuck::pod_collect_to_vec(bytes)),
    }
}

/// Run `f` on a typed mutable view of `bytes`, copying only if misaligned.
fn in_place<W: Pod, R>(bytes: &mut [u8], f: impl FnOnce(&mut [W]) -> R) -> R {
    match bytemuck::try_cast_slice_mut(bytes) {
        Ok(s) => f(s),
        Err(_) => {
            let mut v: Vec<W> = bytemuck::pod_collect_to_vec(bytes);
            let r = f(&mut v);
            bytes.copy_from_slice(bytemuck::cast_slice(&v));
            r
        }
    }
}

fn rebuild<W: Pod + Send + Sync>(words: Vec<W>, shape: Vec<usize>, dtype: DType) -> TensorData {
    TensorData::from_bytes(Bytes::from_elems(words), shape, dtype)
}

fn with_leading(shape: &[usize], rows: usize) -> Vec<usize> {
    let mut s = shape.to_vec();
    s[0] = rows;
    s
}

fn unsupported_unless(ok: bool) -> Option<Problem> {
    (!ok).then_some(Problem::UnsupportedDType)
}

/// Gather equal leading-axis shards in rank order.
pub(crate) fn all_gather<C: Communicator>(
    comm: &C,
    op: TensorOp,
    data: TensorData,
) -> Result<TensorData, TensorCollectiveError> {
    let (n, dtype) = (comm.size(), data.dtype());
    let shape = data.shape().to_vec();
    let word = word_size(dtype);
    let problem =
        contract::leading_axis_problem(&shape).or_else(|| unsupported_unless(word.is_some()));
    contract::agree(comm, Local::equal(op, problem, dtype, &shape))?;
    let out_shape = with_leading(&shape, n * shape[0]);
    with_word!(word.unwrap_or(1), W, {
        let src = view::<W>(data.as_bytes());
        let out = comm.all_gather_vec(&src)?;
        Ok(rebuild(out, out_shape, dtype))
    })
}

/// Sum across ranks and keep this rank's leading-axis shard.
pub(crate) fn reduce_scatter_sum<C: Communicator>(
    comm: &C,
    data: TensorData,
) -> Result<TensorData, TensorCollectiveError> {
    let op = TensorOp::ReduceScatterSum;
    let (n, dtype) = (comm.size(), data.dtype());
    let shape = data.shape().to_vec();
    let problem = contract::leading_axis_problem(&shape)
        .or_else(|| unsupported_unless(is_summable(dtype)))
        .or_else(|| {
            (!shape[0].is_multiple_of(n))
                .then_some(Problem::Shape(ShapeProblem::NotDivisible { ranks: n }))
        });
    contract::agree(comm, Local::equal(op, problem, dtype, &shape))?;
    let out_shape = with_leading(&shape, shape[0] / n);
    with_float!(dtype, T, {
        let src = view::<T>(data.as_bytes());
        let out = comm.reduce_scatter_vec(&src, ReduceOp::Sum)?;
        Ok(rebuild(out, out_shape, dtype))
    })
}

/// Sum across ranks, in place.
pub(crate) fn all_reduce_sum<C: Communicator>(
    comm: &C,
    data: TensorData,
) -> Result<TensorData, TensorCollectiveError> {
    let op = TensorOp::AllReduceSum;
    let dtype = data.dtype();
    let shape = data.shape().to_vec();
    let problem = unsupported_unless(is_summable(dtype));
    contract::agree(comm, Local::equal(op, problem, dtype, &shape))?;
    let (mut bytes, shape, dtype) = data.into_parts();
    with_float!(dtype, T, {
        in_place::<T, _>(&mut bytes, |s| comm.all_reduce(s, ReduceOp::Sum))?
    });
    Ok(TensorData::from_bytes(bytes, shape, dtype))
}

/// Replace every rank's values by the root's, in place.
pub(crate) fn broadcast<C: Communicator>(
    comm: &C,
    data: TensorData,
    root: u32,
) -> Result<TensorData, TensorCollectiveError> {
    let op = TensorOp::BroadcastFloat;
    let (n, dtype) = (comm.size(), data.dtype());
    let shape = data.shape().to_vec();
    let word = word_size(dtype);
    let problem = ((root as usize) >= n)
        .then_some(Problem::InvalidRoot { root, size: n })
        .or_else(|| unsupported_unless(word.is_some()));
    contract::agree(comm, Local::equal(op, problem, dtype, &shape))?;
    let (mut bytes, shape, dtype) = data.into_parts();
    with_word!(word.unwrap_or(1), W, {
        in_place::<W, _>(&mut bytes, |s| comm.broadcast(s, root as usize))?
    });
    Ok(TensorData::from_bytes(bytes, shape, dtype))
}

/// Exchange variable row blocks; returns the received rows and the row
/// count from each source.
pub(crate) fn all_to_all_v<C: Communicator>(
    comm: &C,
    op: TensorOp,
    data: TensorData,
    send_counts: &[usize],
) -> Result<(TensorData, Vec<usize>), TensorCollectiveError> {
    let (n, dtype) = (comm.size(), data.dtype());
    let shape = data.shape().to_vec();
    let word = word_size(dtype);
    let sum: usize = send_counts.iter().sum();
    let problem = contract::leading_axis_problem(&shape)
        .or_else(|| unsupported_unless(word.is_some()))
        .or_else(|| {
            (send_counts.len() != n).then_some(Problem::Counts(CountProblem::Length {
                got: send_counts.len(),
                ranks: n,
            }))
        })
        .or_else(|| {
            (sum != shape[0]).then_some(Problem::Counts(CountProblem::Sum {
                sum,
                rows: shape[0],
            }))
        });
    contract::agree(
        comm,
        Local {
            op,
            problem,
            dtype,
            shape: &shape,
            rule: ShapeRule::Trailing,
            extra: &[],
        },
    )?;
    let sent: Vec<i64> = send_counts.iter().map(|&c| c as i64).collect();
    let mut received = alloc::vec![0i64; n];
    comm.all_to_all(&sent, &mut received)?;
    let receive_counts: Vec<usize> = received.iter().map(|&c| c as usize).collect();
    let row: usize = shape[1..].iter().product();
    let out_shape = with_leading(&shape, receive_counts.iter().sum());
    let send_elems: Vec<usize> = send_counts.iter().map(|c| c * row).collect();
    let recv_elems: Vec<usize> = receive_counts.iter().map(|c| c * row).collect();
    let out = with_word!(word.unwrap_or(1), W, {
        let src = view::<W>(data.as_bytes());
        let out = comm.all_to_all_v_vec(&src, &send_elems, &recv_elems)?;
        rebuild(out, out_shape, dtype)
    });
    Ok((out, receive_counts))
}

/// Check a neighbour exchange's plan on every rank at once. `sends` are
/// `(destination, rows)`; returns the row count each source sends here.
pub(crate) fn agree_exchange<C: Communicator>(
    comm: &C,
    dtype: DType,
    shape: &[usize],
    sends: &[(u32, usize)],
    receive_from: &[u32],
) -> Result<Vec<usize>, TensorCollectiveError> {
    let op = TensorOp::ExchangeRowsFloat;
    let (me, n) = (comm.rank(), comm.size());
    // extra[d] = rows + 1 sent to d (0: no block); extra[n + s] = 1 if receiving from s.
    let mut extra = alloc::vec![0i64; 2 * n];
    let mut problem = contract::leading_axis_problem(shape)
        .or_else(|| unsupported_unless(word_size(dtype).is_some()));
    for &(d, rows) in sends {
        let d = d as usize;
        if d >= n || extra[d] != 0 {
            problem = problem.or(Some(Problem::Counts(CountProblem::BadPeer {
                peer: d,
                ranks: n,
            })));
        } else {
            extra[d] = rows as i64 + 1;
        }
    }
    for &s in receive_from {
        let s = s as usize;
        if s >= n || extra[n + s] != 0 {
            problem = problem.or(Some(Problem::Counts(CountProblem::BadPeer {
                peer: s,
                ranks: n,
            })));
        } else {
            extra[n + s] = 1;
        }
    }
    let sum: usize = sends.iter().map(|s| s.1).sum();
    if problem.is_none() && sum != shape[0] {
        problem = Some(Problem::Counts(CountProblem::Sum {
            sum,
            rows: shape[0],
        }));
    }
    let all = contract::agree(
        comm,
        Local {
            op,
            problem,
            dtype,
            shape,
            rule: ShapeRule::Trailing,
            extra: &extra,
        },
    )?;
    for (src, plan) in all.iter().enumerate() {
        for (dst, wants) in all.iter().enumerate() {
            let sent = plan[dst] != 0;
            if sent != (wants[n + src] != 0) {
                return Err(TensorCollectiveError::Counts {
                    op,
                    rank: me,
                    offender: if sent { src } else { dst },
                    problem: CountProblem::Unmatched {
                        source: src,
                        dest: dst,
                        sent,
                    },
                });
            }
        }
    }
    Ok(all
        .iter()
        .map(|plan| (plan[me] - 1).max(0) as usize)
        .collect())
}
