//! Thin checked wrappers over the MPI C interface: datatypes, reduction
//! operators, counts that must fit a C `int`, and return codes.

use std::ffi::{c_char, c_int};

use mpi::ffi;

use crate::validate::CallArgs;
use crate::{CommError, DType, ErrorContext, InvalidArgument, OpKind, ReduceOp};

/// The MPI datatype an element moves as. `f16` and `bf16` move as 2-byte
/// words; their reductions are done in `f32` (see the communicator).
pub(crate) fn datatype(d: DType) -> ffi::MPI_Datatype {
    // SAFETY: reading MPI's predefined datatype handles after initialisation.
    unsafe {
        match d {
            DType::F16 | DType::BF16 => ffi::RSMPI_UINT16_T,
            DType::F32 => ffi::RSMPI_FLOAT,
            DType::F64 => ffi::RSMPI_DOUBLE,
            DType::U8 => ffi::RSMPI_UINT8_T,
            DType::U32 => ffi::RSMPI_UINT32_T,
            DType::I32 => ffi::RSMPI_INT32_T,
            DType::I64 => ffi::RSMPI_INT64_T,
        }
    }
}

/// The MPI operator of a reduction (`Mean` sums, then divides).
pub(crate) fn operator(op: ReduceOp) -> ffi::MPI_Op {
    // SAFETY: reading MPI's predefined operator handles after initialisation.
    unsafe {
        match op {
            ReduceOp::Sum | ReduceOp::Mean => ffi::RSMPI_SUM,
            ReduceOp::Prod => ffi::RSMPI_PROD,
            ReduceOp::Min => ffi::RSMPI_MIN,
            ReduceOp::Max => ffi::RSMPI_MAX,
        }
    }
}

/// The largest element count one MPI call takes.
pub(crate) const MAX_COUNT: usize = i32::MAX as usize;

/// `n` as a C `int`, or the error that says the call is too large.
pub(crate) fn count(op: OpKind, rank: usize, n: usize) -> Result<c_int, CommError> {
    c_int::try_from(n).map_err(|_| CommError::InvalidArgument {
        op,
        rank,
        reason: InvalidArgument::TooLarge {
            count: n,
            max: MAX_COUNT,
        },
        context: ErrorContext::none(),
    })
}

/// Counts and displacements of a `_v` call as C `int`s.
pub(crate) fn counts_and_displs(
    op: OpKind,
    rank: usize,
    counts: &[usize],
) -> Result<(Vec<c_int>, Vec<c_int>), CommError> {
    let mut c = Vec::with_capacity(counts.len());
    let mut d = Vec::with_capacity(counts.len());
    let mut off = 0usize;
    for &n in counts {
        c.push(count(op, rank, n)?);
        d.push(count(op, rank, off)?);
        // Both are at most `MAX_COUNT` here, so this cannot overflow.
        off += n;
    }
    count(op, rank, off)?;
    Ok((c, d))
}

/// Whether one rank's call fits MPI's `int` counts: the counts each MPI
/// call of the operation takes (per-rank blocks, count lists and their
/// displacements; all-reduce and broadcast go in chunks and have no
/// limit). The record exchange applies it to every rank's record, in rank
/// order, so that every rank reports the same error before any data moves;
/// without checks a rank applies it to its own arguments.
///
/// # Errors
/// [`InvalidArgument::TooLarge`] with the first count that does not fit,
/// as reported by rank `me`.
pub(crate) fn fits_int(call: &CallArgs<'_>, size: usize, me: usize) -> Result<(), CommError> {
    let op = call.fp.op;
    let one = |n: usize| count(op, me, n).map(|_| ());
    let list = |counts: &[usize]| counts_and_displs(op, me, counts).map(|_| ());
    match op {
        OpKind::AllGather => one(call.send_len),
        OpKind::ReduceScatter => one(call.recv_len),
        OpKind::AllToAll => one(call.send_len / size.max(1)),
        OpKind::AllGatherV | OpKind::ReduceScatterV => list(call.counts.values),
        OpKind::AllToAllV => {
            list(call.counts.values)?;
            list(call.counts2.values)
        }
        _ => Ok(()),
    }
}

/// MPI's own text for an error code.
pub(crate) fn error_string(code: c_int) -> String {
    let mut buf = vec![0 as c_char; 512];
    let mut len: c_int = 0;
    // SAFETY: the buffer holds MPI_MAX_ERROR_STRING (256 in Open MPI) and more.
    let rc = unsafe { ffi::MPI_Error_string(code, buf.as_mut_ptr(), &mut len) };
    if rc != 0 {
        return format!("MPI error {code}");
    }
    let bytes: Vec<u8> = buf[..len.max(0) as usize]
        .iter()
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Turn an MPI return code into a result.
pub(crate) fn check(op: OpKind, rank: usize, rc: c_int) -> Result<(), CommError> {
    if rc == 0 {
        Ok(())
    } else {
        Err(CommError::Transport {
            op,
            rank,
            message: error_string(rc),
            context: ErrorContext::none(),
        })
    }
}
