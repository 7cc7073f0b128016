//! The baseline: the same collective called directly on the MPI library
//! (`MPI_Allreduce` in place, `MPI_Allgather`, `MPI_Reduce_scatter_block`,
//! `MPI_Alltoall`, `MPI_Alltoallv` with equal blocks, `MPI_Bcast`), timed,
//! filled and checked exactly as ruda's own ([`super::measure_with`]).

use std::ffi::{c_char, c_int, c_void};

use mpi::ffi;

use super::{BenchOp, Measurement, Settings, measure_with};
use crate::Sample;
use ruda_comm::{CommError, Communicator, DType, ErrorContext, MpiCommunicator, OpKind};

/// Whether the library is Open MPI, whose `MPI_IN_PLACE` is `(void *) 1`
/// (a macro, absent from the bindings): only then is the raw all-reduce in
/// place; elsewhere it reduces into a separate buffer.
pub fn mpi_in_place() -> bool {
    let mut buf = vec![0 as c_char; 8192];
    let mut len: c_int = 0;
    // SAFETY: the buffer exceeds MPI_MAX_LIBRARY_VERSION_STRING; the call is
    // allowed before and after initialisation.
    let rc = unsafe { ffi::MPI_Get_library_version(buf.as_mut_ptr(), &mut len) };
    rc == 0
        && buf[..len.clamp(0, 8192) as usize]
            .iter()
            .map(|&c| c as u8 as char)
            .collect::<String>()
            .contains("Open MPI")
}

/// Open MPI's `MPI_IN_PLACE`, `(void *) 1` in its `mpi.h`.
#[allow(clippy::manual_dangling_ptr)]
const OPEN_MPI_IN_PLACE: *const c_void = 1 as *const c_void;

/// The MPI datatype of `d`, or `None` for the half types (MPI has no sum
/// for them, so there is no raw baseline to compare with).
fn datatype(d: DType) -> Option<ffi::MPI_Datatype> {
    // SAFETY: reading MPI's predefined datatype handles after initialisation.
    unsafe {
        match d {
            DType::F16 | DType::BF16 => None,
            DType::F32 => Some(ffi::RSMPI_FLOAT),
            DType::F64 => Some(ffi::RSMPI_DOUBLE),
            DType::U8 => Some(ffi::RSMPI_UINT8_T),
            DType::U32 => Some(ffi::RSMPI_UINT32_T),
            DType::I32 => Some(ffi::RSMPI_INT32_T),
            DType::I64 => Some(ffi::RSMPI_INT64_T),
        }
    }
}

/// Measure the raw MPI collective for `op` on the world that `world` spans
/// (call from every rank after [`ruda_comm::MpiWorld::init`]), with ruda's
/// harness, inputs and check. The all-reduce runs in place where the library
/// is Open MPI ([`mpi_in_place`]), as ruda's does.
///
/// # Errors
/// [`CommError::Transport`] when MPI returns an error or has no datatype for
/// `T` (f16, bf16); the harness's errors.
pub fn measure_mpi_raw<T: Sample>(
    world: &MpiCommunicator,
    op: BenchOp,
    bytes: usize,
    settings: Settings,
) -> Result<Measurement, CommError> {
    let kind = match op {
        BenchOp::AllReduce => OpKind::AllReduce,
        BenchOp::AllGather => OpKind::AllGather,
        BenchOp::ReduceScatter => OpKind::ReduceScatter,
        BenchOp::AllToAll => OpKind::AllToAll,
        BenchOp::AllToAllV => OpKind::AllToAllV,
        BenchOp::Broadcast => OpKind::Broadcast,
    };
    let transport = |what: &str| CommError::Transport {
        op: kind,
        rank: world.rank(),
        message: what.to_string(),
        context: ErrorContext::none(),
    };
    let dt = datatype(T::DTYPE)
        .ok_or_else(|| transport(&format!("MPI has no datatype to sum {}", T::DTYPE)))?;
    let in_place = mpi_in_place();
    // SAFETY: reading MPI's predefined handles after initialisation.
    let (comm, sum) = unsafe { (ffi::RSMPI_COMM_WORLD, ffi::RSMPI_SUM) };
    let n = world.size();
    let mut scratch: Vec<T> = Vec::new();
    let (mut counts, mut displs): (Vec<c_int>, Vec<c_int>) = (Vec::new(), Vec::new());
    measure_with::<_, T, CommError>(world, op, bytes, settings, |send, recv| {
        let c = |len: usize| c_int::try_from(len).map_err(|_| transport("count exceeds a C int"));
        let block = c(recv.len() / n.max(1))?;
        if op == BenchOp::AllToAllV {
            // Equal blocks, as MPI_Alltoall's.
            counts.clear();
            counts.resize(n, block);
            displs.clear();
            for q in 0..n {
                displs.push(c(q * (recv.len() / n.max(1)))?);
            }
        }
        let sp = send.as_mut_ptr() as *mut c_void;
        let rp = recv.as_mut_ptr() as *mut c_void;
        // SAFETY: every buffer has the length its count says (see
        // `buffer_lens`), lives across the blocking call, and the send and
        // receive buffers do not overlap.
        let rc = unsafe {
            match op {
                BenchOp::AllReduce if in_place => {
                    ffi::MPI_Allreduce(OPEN_MPI_IN_PLACE, sp, c(send.len())?, dt, sum, comm)
                }
                BenchOp::AllReduce => {
                    scratch.clear();
                    scratch.extend_from_slice(send);
                    ffi::MPI_Allreduce(
                        scratch.as_ptr() as *const c_void,
                        sp,
                        c(send.len())?,
                        dt,
                        sum,
                        comm,
                    )
                }
                BenchOp::Broadcast => ffi::MPI_Bcast(sp, c(send.len())?, dt, 0, comm),
                BenchOp::AllGather => {
                    ffi::MPI_Allgather(sp, c(send.len())?, dt, rp, c(send.len())?, dt, comm)
                }
                BenchOp::ReduceScatter => {
                    ffi::MPI_Reduce_scatter_block(sp, rp, c(recv.len())?, dt, sum, comm)
                }
                BenchOp::AllToAll => ffi::MPI_Alltoall(sp, block, dt, rp, block, dt, comm),
                BenchOp::AllToAllV => ffi::MPI_Alltoallv(
                    sp,
                    counts.as_ptr(),
                    displs.as_ptr(),
                    dt,
                    rp,
                    counts.as_ptr(),
                    displs.as_ptr(),
                    dt,
                    comm,
                ),
            }
        };
        if rc == 0 {
            Ok(())
        } else {
            Err(transport(&format!("MPI {} returned {rc}", op.name())))
        }
    })
}
