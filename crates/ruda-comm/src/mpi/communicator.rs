//! `MpiCommunicator`: one MPI process's rank in a communicator.

use std::ffi::{c_int, c_void};
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use mpi::ffi;

use super::raw::{self, check, count, counts_and_displs, datatype, operator};
use super::world::Session;
use crate::local::group::Slot;
use crate::local::validate;
use crate::{
    Accumulator, BufferRole, CommError, Communicator, DType, Element, Fingerprint, InvalidArgument,
    OpKind, ReduceOp,
};

/// One rank of an MPI communicator, from [`super::MpiWorld::init`] or
/// [`Communicator::split`].
///
/// Every collective maps to the MPI call that does it natively
/// (`MPI_Allreduce`, `MPI_Allgatherv`, `MPI_Reduce_scatter_block`,
/// `MPI_Reduce_scatter`, `MPI_Alltoallv`, …). `f16`/`bf16` move as 2-byte
/// words and are reduced in `f32`, rounded once. Every length is checked
/// against the counts before the call and every MPI return code is checked.
///
/// MPI cannot see a peer's buffers, so cross-rank checks (counts that
/// disagree, ranks in different collectives) need one extra small exchange
/// per call: set `RUDA_DEBUG=1` to get them, as errors on every rank.
/// Without it, a rank whose own arguments are inconsistent aborts the job
/// with the error (rather than leaving its peers blocked in MPI).
pub struct MpiCommunicator {
    comm: ffi::MPI_Comm,
    rank: usize,
    size: usize,
    seq: AtomicU64,
    busy: AtomicBool,
    // Declared last: dropped after `comm` is freed, so MPI is finalised
    // only after every communicator.
    session: Arc<Session>,
}

// SAFETY: the handle is only used inside calls, which are serialised per
// communicator (`busy`), and MPI runs with MPI_THREAD_SERIALIZED.
unsafe impl Send for MpiCommunicator {}
// SAFETY: as above.
unsafe impl Sync for MpiCommunicator {}

impl fmt::Debug for MpiCommunicator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MpiCommunicator")
            .field("rank", &self.rank)
            .field("size", &self.size)
            .finish()
    }
}

impl Drop for MpiCommunicator {
    fn drop(&mut self) {
        let mut done: c_int = 0;
        // SAFETY: free the communicator this value owns, unless MPI is gone.
        unsafe {
            ffi::MPI_Finalized(&mut done);
            if done == 0 {
                ffi::MPI_Comm_free(&mut self.comm);
            }
        }
    }
}

struct Busy<'a>(&'a AtomicBool);

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

/// What a call tells the debug-mode agreement about itself.
struct Call<'a> {
    fp: Fingerprint,
    send_len: usize,
    recv_len: usize,
    counts: &'a [usize],
    counts2: &'a [usize],
}

impl Call<'_> {
    /// A call without count lists.
    fn lens(fp: Fingerprint, send_len: usize, recv_len: usize) -> Self {
        Call {
            fp,
            send_len,
            recv_len,
            counts: &[],
            counts2: &[],
        }
    }
}

/// Open MPI's `MPI_IN_PLACE`, `(void *) 1` in its `mpi.h` (a macro, so
/// absent from the bindings); used only when the library is Open MPI.
#[allow(clippy::manual_dangling_ptr)]
const OPEN_MPI_IN_PLACE: *const c_void = 1 as *const c_void;

/// A word that zero-length buffers point to: an empty slice's dangling
/// pointer can equal Open MPI's `MPI_IN_PLACE` (`(void *) 1` for `u8`).
static EMPTY: [u64; 1] = [0];

/// The send pointer of `s`.
fn ptr<T>(s: &[T]) -> *const c_void {
    if s.is_empty() {
        EMPTY.as_ptr() as *const c_void
    } else {
        s.as_ptr() as *const c_void
    }
}

/// The receive pointer of `s` (never written through when `s` is empty:
/// every count is then zero).
fn mut_ptr<T>(s: &mut [T]) -> *mut c_void {
    if s.is_empty() {
        EMPTY.as_ptr() as *mut c_void
    } else {
        s.as_mut_ptr() as *mut c_void
    }
}

impl MpiCommunicator {
    pub(crate) fn new(comm: ffi::MPI_Comm, session: Arc<Session>) -> Self {
        let (mut rank, mut size): (c_int, c_int) = (0, 0);
        // SAFETY: a valid communicator handle.
        unsafe {
            ffi::MPI_Comm_rank(comm, &mut rank);
            ffi::MPI_Comm_size(comm, &mut size);
        }
        MpiCommunicator {
            comm,
            rank: rank as usize,
            size: size as usize,
            seq: AtomicU64::new(0),
            busy: AtomicBool::new(false),
            session,
        }
    }

    /// Whether the cross-rank checks of `RUDA_DEBUG=1` are on.
    pub fn debug(&self) -> bool {
        self.session.debug
    }

    fn enter(&self, op: OpKind) -> Result<Busy<'_>, CommError> {
        if self.busy.swap(true, Ordering::Acquire) {
            return Err(CommError::InvalidArgument {
                op,
                rank: self.rank,
                reason: InvalidArgument::ConcurrentUse,
                context: ErrorContext::none(),
            });
        }
        Ok(Busy(&self.busy))
    }

    fn fingerprint<T: Element>(&self, op: OpKind, count: usize) -> Fingerprint {
        Fingerprint::new(
            self.seq.fetch_add(1, Ordering::Relaxed),
            op,
            Some(T::DTYPE),
            count,
        )
    }

    /// Check a call before it reaches MPI. In debug mode every rank's
    /// arguments are gathered and checked as the local transport checks
    /// them, so a problem anywhere is the same error everywhere. Otherwise
    /// only this rank's own consistency is checked (`local`); a problem is
    /// returned in a one-rank world and aborts the job in a larger one.
    fn admit(
        &self,
        call: Call<'_>,
        local: impl FnOnce() -> Result<(), CommError>,
    ) -> Result<(), CommError> {
        if self.session.debug {
            return self.agree(call);
        }
        match local() {
            Ok(()) => Ok(()),
            Err(e) if self.size == 1 => Err(e),
            Err(e) => {
                eprintln!(
                    "ruda: {e}; aborting the MPI job so that no rank waits for this one (run with RUDA_DEBUG=1 to get it as an error on every rank)"
                );
                // SAFETY: abort the whole job.
                unsafe { ffi::MPI_Abort(ffi::RSMPI_COMM_WORLD, 71) };
                Err(e)
            }
        }
    }

    /// The debug-mode exchange: every rank's fingerprint, lengths and counts.
    fn agree(&self, call: Call<'_>) -> Result<(), CommError> {
        let n = self.size;
        let words = 10 + 2 * n;
        let fp = call.fp;
        let mut mine = vec![0i64; words];
        mine[0] = fp.seq as i64;
        mine[1] = fp.op.code() as i64;
        mine[2] = fp.dtype.map_or(0, |d| d.code() as i64 + 1);
        mine[3] = fp.count as i64;
        mine[4] = fp.reduce.map_or(0, |r| {
            ReduceOp::ALL.iter().position(|&o| o == r).expect("listed") as i64 + 1
        });
        mine[5] = fp.root.map_or(0, |r| r as i64 + 1);
        mine[6] = call.send_len as i64;
        mine[7] = call.recv_len as i64;
        mine[8] = call.counts.len() as i64;
        mine[9] = call.counts2.len() as i64;
        for (w, &c) in mine[10..10 + n].iter_mut().zip(call.counts) {
            *w = c as i64;
        }
        for (w, &c) in mine[10 + n..].iter_mut().zip(call.counts2) {
            *w = c as i64;
        }
        let mut all = vec![0i64; n * words];
        let c = count(fp.op, self.rank, words)?;
        // SAFETY: buffers of `words` and `n * words` i64 values.
        let rc = unsafe {
            ffi::MPI_Allgather(
                ptr(&mine),
                c,
                ffi::RSMPI_INT64_T,
                mut_ptr(&mut all),
                c,
                ffi::RSMPI_INT64_T,
                self.comm,
            )
        };
        check(fp.op, self.rank, rc)?;
        let rows: Vec<&[i64]> = all.chunks(words).collect();
        let lists: Vec<(Vec<usize>, Vec<usize>)> = rows
            .iter()
            .map(|w| {
                let a = w[10..10 + n].iter().map(|&x| x as usize).collect();
                let b = w[10 + n..].iter().map(|&x| x as usize).collect();
                (a, b)
            })
            .collect();
        let slots: Vec<Slot> = rows
            .iter()
            .zip(&lists)
            .map(|(w, (a, b))| {
                let op = OpKind::from_code(w[1] as u8).unwrap_or(OpKind::Init);
                let mut f = Fingerprint::new(
                    w[0] as u64,
                    op,
                    (w[2] > 0)
                        .then(|| DType::from_code(w[2] as u8 - 1))
                        .flatten(),
                    w[3] as usize,
                );
                f.reduce = (w[4] > 0).then(|| ReduceOp::ALL[w[4] as usize - 1]);
                f.root = (w[5] > 0).then(|| w[5] as usize - 1);
                let mut s = Slot::new(f);
                s.send_len = w[6] as usize;
                s.recv_len = w[7] as usize;
                // Lists longer than the group are reported by length before
                // any entry past `n` would be read.
                s.counts = a.as_ptr();
                s.counts_len = w[8] as usize;
                s.counts2 = b.as_ptr();
                s.counts2_len = w[9] as usize;
                s
            })
            .collect();
        validate::by_op(&slots, self.rank)
    }

    fn avg_on_integers<T: Element>(&self, op: OpKind, r: ReduceOp) -> Result<(), CommError> {
        if r == ReduceOp::Avg && !T::DTYPE.is_float() {
            return Err(CommError::InvalidArgument {
                op,
                rank: self.rank,
                reason: InvalidArgument::AverageOfIntegers { dtype: T::DTYPE },
                context: ErrorContext::none(),
            });
        }
        Ok(())
    }

    fn length(
        &self,
        op: OpKind,
        buffer: BufferRole,
        expected: usize,
        got: usize,
    ) -> Result<(), CommError> {
        if expected == got {
            Ok(())
        } else {
            Err(CommError::LengthMismatch {
                op,
                rank: self.rank,
                offender: self.rank,
                buffer,
                expected,
                got,
                context: ErrorContext::none(),
            })
        }
    }

    fn peer(&self, op: OpKind, peer: usize) -> Result<c_int, CommError> {
        if peer >= self.size {
            return Err(CommError::InvalidArgument {
                op,
                rank: self.rank,
                reason: InvalidArgument::Peer {
                    peer,
                    size: self.size,
                },
                context: ErrorContext::none(),
            });
        }
        Ok(peer as c_int)
    }

    /// Run the reducing MPI call `call(send, recv, datatype)` from `send`
    /// into `recv` in the type MPI should reduce in: u8 sums and products
    /// in u32 (Open MPI 4.1's vectorised 8-bit sum saturates; u32's
    /// wrap-around is a multiple of 256), f16/bf16 in f32 (rounded once);
    /// then divide averages by the group size.
    fn reduce_into<T: Element>(
        &self,
        kind: OpKind,
        send: &[T],
        recv: &mut [T],
        op: ReduceOp,
        call: impl Fn(*const c_void, *mut c_void, ffi::MPI_Datatype) -> c_int,
    ) -> Result<(), CommError> {
        let n = self.size;
        if T::DTYPE == DType::U8 && matches!(op, ReduceOp::Sum | ReduceOp::Prod) {
            let wide: Vec<u32> = bytemuck::cast_slice::<T, u8>(send)
                .iter()
                .map(|&b| b as u32)
                .collect();
            let mut out = vec![0u32; recv.len()];
            check(
                kind,
                self.rank,
                call(ptr(&wide), mut_ptr(&mut out), datatype(DType::U32)),
            )?;
            for (b, w) in bytemuck::cast_slice_mut::<T, u8>(recv).iter_mut().zip(&out) {
                *b = *w as u8;
            }
            return Ok(());
        }
        if is_half(T::DTYPE) {
            let wide = widen(send);
            let mut out = vec![0f32; recv.len()];
            // SAFETY: reading MPI's predefined datatype handle.
            check(
                kind,
                self.rank,
                call(ptr(&wide), mut_ptr(&mut out), unsafe { ffi::RSMPI_FLOAT }),
            )?;
            if op == ReduceOp::Avg {
                out.iter_mut().for_each(|x| *x /= n as f32);
            }
            narrow(&out, recv);
            return Ok(());
        }
        check(
            kind,
            self.rank,
            call(ptr(send), mut_ptr(recv), datatype(T::DTYPE)),
        )?;
        if op == ReduceOp::Avg {
            divide(recv, n);
        }
        Ok(())
    }

    fn self_message(&self, op: OpKind) -> CommError {
        CommError::InvalidArgument {
            op,
            rank: self.rank,
            reason: InvalidArgument::SelfMessage { op },
            context: ErrorContext::none(),
        }
    }

    /// Point-to-point with both sides told of a mismatch: a header (length,
    /// dtype) goes ahead of the data, the receiver drains a message that
    /// does not fit into a scratch buffer instead of truncating it, and
    /// acknowledges with its own length and type, so sender and receiver
    /// report the same error. Tags: 2 header, 0 data, 1 acknowledgement.
    fn p2p<T: Element>(
        &self,
        op: OpKind,
        send: Option<(&[T], c_int)>,
        recv: Option<(&mut [T], c_int)>,
    ) -> Result<(), CommError> {
        let me = self.rank;
        let code = T::DTYPE.code() as i64;
        let i64t = datatype(DType::I64);
        // 1. Headers: [length, dtype code] to the destination, from the source.
        let header_out = send.as_ref().map(|(b, _)| [b.len() as i64, code]);
        let mut header_in = [0i64; 2];
        self.exchange(
            op,
            send.as_ref()
                .zip(header_out.as_ref())
                .map(|((_, d), h)| (ptr(h), 2, i64t, *d)),
            recv.as_ref()
                .map(|(_, s)| (mut_ptr(&mut header_in), 2, i64t, *s)),
            2,
        )?;
        // 2. Data: taken whole, into the receive buffer when it fits and into
        // scratch otherwise (never truncated, never left in flight).
        let (expected, their_code) = (header_in[0] as usize, header_in[1]);
        let recv_ok = recv
            .as_ref()
            .is_some_and(|(b, _)| b.len() == expected && their_code == code);
        let mut scratch: Vec<u8> = Vec::new();
        let (recv_len, recv_src) = recv.as_ref().map_or((0, 0), |(b, s)| (b.len(), *s));
        let into = match recv {
            Some((buf, s)) if recv_ok => {
                Some((mut_ptr(buf), expected as c_int, datatype(T::DTYPE), s))
            }
            Some((_, s)) => {
                let their = DType::from_code(their_code as u8).unwrap_or(DType::U8);
                scratch.resize(expected * their.size_in_bytes(), 0);
                Some((mut_ptr(&mut scratch), expected as c_int, datatype(their), s))
            }
            None => None,
        };
        let has_recv = into.is_some();
        self.exchange(
            op,
            send.as_ref()
                .map(|(b, d)| (ptr(b), b.len() as c_int, datatype(T::DTYPE), *d)),
            into,
            0,
        )?;
        // 3. Acknowledgements: the receiver's [length, dtype] back to the sender.
        let ack_out = [recv_len as i64, code];
        let mut ack_in = [0i64; 2];
        self.exchange(
            op,
            has_recv.then(|| (ptr(&ack_out), 2, i64t, recv_src)),
            send.as_ref()
                .map(|(_, d)| (mut_ptr(&mut ack_in), 2, i64t, *d)),
            1,
        )?;
        if has_recv && !recv_ok {
            return Err(self.p2p_error(
                op,
                me,
                (expected, their_code),
                (recv_len, code),
                recv_src as usize,
            ));
        }
        if let Some((buf, d)) = send
            && (ack_in[0] as usize != buf.len() || ack_in[1] != code)
        {
            return Err(self.p2p_error(
                op,
                d as usize,
                (buf.len(), code),
                (ack_in[0] as usize, ack_in[1]),
                me,
            ));
        }
        Ok(())
    }

    /// One point-to-point phase: send, receive, or both at once (so rings
    /// and pairwise exchanges cannot deadlock on large messages).
    fn exchange(
        &self,
        op: OpKind,
        send: Option<(*const c_void, c_int, ffi::MPI_Datatype, c_int)>,
        recv: Option<(*mut c_void, c_int, ffi::MPI_Datatype, c_int)>,
        tag: c_int,
    ) -> Result<(), CommError> {
        // SAFETY: each pointer addresses a buffer of its count and datatype
        // (checked by the callers), peers are ranks of the group.
        let rc = unsafe {
            let ignore = ffi::RSMPI_STATUS_IGNORE;
            match (send, recv) {
                (Some((sp, sc, st, d)), Some((rp, rc, rt, s))) => {
                    ffi::MPI_Sendrecv(sp, sc, st, d, tag, rp, rc, rt, s, tag, self.comm, ignore)
                }
                (Some((sp, sc, st, d)), None) => ffi::MPI_Send(sp, sc, st, d, tag, self.comm),
                (None, Some((rp, rc, rt, s))) => {
                    ffi::MPI_Recv(rp, rc, rt, s, tag, self.comm, ignore)
                }
                (None, None) => 0,
            }
        };
        check(op, self.rank, rc)
    }

    /// The error of a message of `sent` (length, dtype code) from `sender`
    /// meeting a receive of `got` at `receiver`, as both sides report it.
    fn p2p_error(
        &self,
        op: OpKind,
        receiver: usize,
        sent: (usize, i64),
        got: (usize, i64),
        sender: usize,
    ) -> CommError {
        if sent.1 != got.1 {
            let dt = |c: i64| DType::from_code(c as u8);
            return CommError::Desync {
                op,
                rank: self.rank,
                first_rank: sender,
                first: Box::new(Fingerprint::new(0, OpKind::Send, dt(sent.1), sent.0)),
                other_rank: receiver,
                other: Box::new(Fingerprint::new(0, OpKind::Recv, dt(got.1), got.0)),
                context: ErrorContext::none(),
            };
        }
        CommError::LengthMismatch {
            op,
            rank: self.rank,
            offender: receiver,
            buffer: BufferRole::Receive,
            expected: sent.0,
            got: got.0,
            context: ErrorContext::none(),
        }
    }

    /// In-place all-reduce of `len` elements of `dt` at `p`, in chunks that
    /// fit a C `int`.
    fn all_reduce_raw(
        &self,
        p: *mut c_void,
        len: usize,
        size: usize,
        dt: ffi::MPI_Datatype,
        op: ffi::MPI_Op,
    ) -> Result<(), CommError> {
        let kind = OpKind::AllReduce;
        let mut off = 0;
        while off < len {
            let m = (len - off).min(raw::MAX_COUNT);
            // SAFETY: `p` holds `len` elements of `size` bytes.
            let chunk = unsafe { (p as *mut u8).add(off * size) } as *mut c_void;
            let rc = if self.session.in_place {
                // SAFETY: Open MPI's MPI_IN_PLACE is `(void *) 1`.
                unsafe {
                    ffi::MPI_Allreduce(OPEN_MPI_IN_PLACE, chunk, m as c_int, dt, op, self.comm)
                }
            } else {
                // SAFETY: a separate copy as the send buffer.
                let copy =
                    unsafe { std::slice::from_raw_parts(chunk as *const u8, m * size) }.to_vec();
                unsafe {
                    ffi::MPI_Allreduce(
                        copy.as_ptr() as *const c_void,
                        chunk,
                        m as c_int,
                        dt,
                        op,
                        self.comm,
                    )
                }
            };
            check(kind, self.rank, rc)?;
            off += m;
        }
        Ok(())
    }
}

/// Widen half-precision elements to f32 for a reduction.
fn widen<T: Element>(s: &[T]) -> Vec<f32> {
    match T::DTYPE {
        DType::F16 => bytemuck::cast_slice::<T, half::f16>(s)
            .iter()
            .map(|x| x.to_f32())
            .collect(),
        _ => bytemuck::cast_slice::<T, half::bf16>(s)
            .iter()
            .map(|x| x.to_f32())
            .collect(),
    }
}

/// Round f32 results back to a half-precision type, once.
fn narrow<T: Element>(src: &[f32], dst: &mut [T]) {
    match T::DTYPE {
        DType::F16 => {
            for (d, &x) in bytemuck::cast_slice_mut::<T, half::f16>(dst)
                .iter_mut()
                .zip(src)
            {
                *d = half::f16::from_f32(x);
            }
        }
        _ => {
            for (d, &x) in bytemuck::cast_slice_mut::<T, half::bf16>(dst)
                .iter_mut()
                .zip(src)
            {
                *d = half::bf16::from_f32(x);
            }
        }
    }
}

fn is_half(d: DType) -> bool {
    matches!(d, DType::F16 | DType::BF16)
}

/// Divide averaged results by the group size in the accumulation type.
fn divide<T: Element>(buf: &mut [T], n: usize) {
    for x in buf {
        *x = T::from_acc(x.to_acc().div_count(n));
    }
}

impl Communicator for MpiCommunicator {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.size
    }

    fn split(&self, color: Option<u32>, key: i32) -> Result<Option<Self>, CommError> {
        let op = OpKind::Split;
        let _b = self.enter(op)?;
        let fp = Fingerprint::new(self.seq.fetch_add(1, Ordering::Relaxed), op, None, 0);
        self.admit(Call::lens(fp, 0, 0), || Ok(()))?;
        let c = match color {
            None => unsafe { ffi::RSMPI_UNDEFINED },
            Some(c) => c_int::try_from(c).map_err(|_| CommError::InvalidArgument {
                op,
                rank: self.rank,
                reason: InvalidArgument::Color {
                    color: c,
                    max: i32::MAX as u32,
                },
                context: ErrorContext::none(),
            })?,
        };
        // SAFETY: reading MPI's null communicator handle.
        let mut out = unsafe { ffi::RSMPI_COMM_NULL };
        // SAFETY: a valid communicator; MPI writes the new handle.
        check(op, self.rank, unsafe {
            ffi::MPI_Comm_split(self.comm, c, key, &mut out)
        })?;
        // SAFETY: comparing with MPI's null communicator handle.
        if out == unsafe { ffi::RSMPI_COMM_NULL } {
            return Ok(None);
        }
        Ok(Some(MpiCommunicator::new(out, self.session.clone())))
    }

    fn all_reduce<T: Element>(&self, buf: &mut [T], op: ReduceOp) -> Result<(), CommError> {
        let kind = OpKind::AllReduce;
        let _b = self.enter(kind)?;
        let fp = self.fingerprint::<T>(kind, buf.len()).with_reduce(op);
        self.admit(Call::lens(fp, 0, buf.len()), || Ok(()))?;
        self.avg_on_integers::<T>(kind, op)?;
        if is_half(T::DTYPE) {
            let mut wide = widen(buf);
            self.all_reduce_raw(
                mut_ptr(&mut wide),
                wide.len(),
                4,
                unsafe { ffi::RSMPI_FLOAT },
                operator(op),
            )?;
            if op == ReduceOp::Avg {
                wide.iter_mut().for_each(|x| *x /= self.size as f32);
            }
            narrow(&wide, buf);
            return Ok(());
        }
        if T::DTYPE == DType::U8 && matches!(op, ReduceOp::Sum | ReduceOp::Prod) {
            // Open MPI 4.1's vectorised 8-bit sum saturates instead of
            // wrapping (found by the conformance suite): reduce in u32,
            // whose wrap-around is a multiple of 256, and truncate.
            let bytes: &mut [u8] = bytemuck::cast_slice_mut(buf);
            let mut wide: Vec<u32> = bytes.iter().map(|&b| b as u32).collect();
            self.all_reduce_raw(
                mut_ptr(&mut wide),
                wide.len(),
                4,
                datatype(DType::U32),
                operator(op),
            )?;
            for (b, w) in bytes.iter_mut().zip(&wide) {
                *b = *w as u8;
            }
            return Ok(());
        }
        self.all_reduce_raw(
            mut_ptr(buf),
            buf.len(),
            size_of::<T>(),
            datatype(T::DTYPE),
            operator(op),
        )?;
        if op == ReduceOp::Avg {
            divide(buf, self.size);
        }
        Ok(())
    }

    fn all_gather<T: Element>(&self, send: &[T], recv: &mut [T]) -> Result<(), CommError> {
        let kind = OpKind::AllGather;
        let _b = self.enter(kind)?;
        let fp = self.fingerprint::<T>(kind, send.len());
        let n = self.size;
        self.admit(Call::lens(fp, send.len(), recv.len()), || {
            self.length(kind, BufferRole::Receive, n * send.len(), recv.len())
        })?;
        let c = count(kind, self.rank, send.len())?;
        count(kind, self.rank, recv.len())?;
        let dt = datatype(T::DTYPE);
        // SAFETY: lengths checked: `send` holds c and `recv` n × c elements.
        let rc = unsafe { ffi::MPI_Allgather(ptr(send), c, dt, mut_ptr(recv), c, dt, self.comm) };
        check(kind, self.rank, rc)
    }

    fn all_gather_v<T: Element>(
        &self,
        send: &[T],
        recv: &mut [T],
        counts: &[usize],
    ) -> Result<(), CommError> {
        let kind = OpKind::AllGatherV;
        let _b = self.enter(kind)?;
        let fp = self.fingerprint::<T>(kind, 0);
        let (me, n) = (self.rank, self.size);
        self.admit(
            Call {
                fp,
                send_len: send.len(),
                recv_len: recv.len(),
                counts,
                counts2: &[],
            },
            || {
                self.length(kind, BufferRole::ReceiveCounts, n, counts.len())?;
                if counts[me] != send.len() {
                    return Err(CommError::CountMismatch {
                        op: kind,
                        rank: me,
                        offender: me,
                        peer: me,
                        expected: counts[me],
                        got: send.len(),
                        context: ErrorContext::none(),
                    });
                }
                self.length(kind, BufferRole::Receive, counts.iter().sum(), recv.len())
            },
        )?;
        let (c, d) = counts_and_displs(kind, me, counts)?;
        let dt = datatype(T::DTYPE);
        // SAFETY: lengths checked against the counts.
        let rc = unsafe {
            ffi::MPI_Allgatherv(
                ptr(send),
                c[me],
                dt,
                mut_ptr(recv),
                c.as_ptr(),
                d.as_ptr(),
                dt,
                self.comm,
            )
        };
        check(kind, me, rc)
    }

    fn reduce_scatter<T: Element>(
        &self,
        send: &[T],
        recv: &mut [T],
        op: ReduceOp,
    ) -> Result<(), CommError> {
        let kind = OpKind::ReduceScatter;
        let _b = self.enter(kind)?;
        let fp = self.fingerprint::<T>(kind, recv.len()).with_reduce(op);
        let n = self.size;
        self.admit(Call::lens(fp, send.len(), recv.len()), || {
            self.length(kind, BufferRole::Send, n * recv.len(), send.len())
        })?;
        self.avg_on_integers::<T>(kind, op)?;
        let c = count(kind, self.rank, recv.len())?;
        count(kind, self.rank, send.len())?;
        self.reduce_into(kind, send, recv, op, |sp, rp, dt| {
            // SAFETY: buffers of n × c and c elements of `dt`.
            unsafe { ffi::MPI_Reduce_scatter_block(sp, rp, c, dt, operator(op), self.comm) }
        })
    }

    fn reduce_scatter_v<T: Element>(
        &self,
        send: &[T],
        recv: &mut [T],
        counts: &[usize],
        op: ReduceOp,
    ) -> Result<(), CommError> {
        let kind = OpKind::ReduceScatterV;
        let _b = self.enter(kind)?;
        let fp = self.fingerprint::<T>(kind, 0).with_reduce(op);
        let (me, n) = (self.rank, self.size);
        self.admit(
            Call {
                fp,
                send_len: send.len(),
                recv_len: recv.len(),
                counts,
                counts2: &[],
            },
            || {
                self.length(kind, BufferRole::ReceiveCounts, n, counts.len())?;
                self.length(kind, BufferRole::Receive, counts[me], recv.len())?;
                self.length(kind, BufferRole::Send, counts.iter().sum(), send.len())
            },
        )?;
        self.avg_on_integers::<T>(kind, op)?;
        let (c, _) = counts_and_displs(kind, me, counts)?;
        self.reduce_into(kind, send, recv, op, |sp, rp, dt| {
            // SAFETY: buffers of the checked lengths, in elements of `dt`.
            unsafe { ffi::MPI_Reduce_scatter(sp, rp, c.as_ptr(), dt, operator(op), self.comm) }
        })
    }

    fn broadcast<T: Element>(&self, buf: &mut [T], root: usize) -> Result<(), CommError> {
        let kind = OpKind::Broadcast;
        let _b = self.enter(kind)?;
        let fp = self.fingerprint::<T>(kind, buf.len()).with_root(root);
        self.admit(Call::lens(fp, 0, buf.len()), || Ok(()))?;
        if root >= self.size {
            return Err(CommError::InvalidArgument {
                op: kind,
                rank: self.rank,
                reason: InvalidArgument::Root {
                    root,
                    size: self.size,
                },
                context: ErrorContext::none(),
            });
        }
        let dt = datatype(T::DTYPE);
        for chunk in buf.chunks_mut(raw::MAX_COUNT) {
            // SAFETY: a chunk of at most i32::MAX elements.
            let rc = unsafe {
                ffi::MPI_Bcast(
                    mut_ptr(chunk),
                    chunk.len() as c_int,
                    dt,
                    root as c_int,
                    self.comm,
                )
            };
            check(kind, self.rank, rc)?;
        }
        Ok(())
    }

    fn all_to_all<T: Element>(&self, send: &[T], recv: &mut [T]) -> Result<(), CommError> {
        let kind = OpKind::AllToAll;
        let _b = self.enter(kind)?;
        let fp = self.fingerprint::<T>(kind, send.len());
        let (me, n) = (self.rank, self.size);
        self.admit(Call::lens(fp, send.len(), recv.len()), || {
            if !send.len().is_multiple_of(n) {
                return Err(CommError::InvalidArgument {
                    op: kind,
                    rank: me,
                    reason: InvalidArgument::NotDivisible {
                        rank: me,
                        len: send.len(),
                        parts: n,
                    },
                    context: ErrorContext::none(),
                });
            }
            self.length(kind, BufferRole::Receive, send.len(), recv.len())
        })?;
        let c = count(kind, me, send.len() / n)?;
        count(kind, me, send.len())?;
        let dt = datatype(T::DTYPE);
        // SAFETY: both buffers hold n × c elements.
        let rc = unsafe { ffi::MPI_Alltoall(ptr(send), c, dt, mut_ptr(recv), c, dt, self.comm) };
        check(kind, me, rc)
    }

    fn all_to_all_v<T: Element>(
        &self,
        send: &[T],
        send_counts: &[usize],
        recv: &mut [T],
        recv_counts: &[usize],
    ) -> Result<(), CommError> {
        let kind = OpKind::AllToAllV;
        let _b = self.enter(kind)?;
        let fp = self.fingerprint::<T>(kind, 0);
        let (me, n) = (self.rank, self.size);
        let call = Call {
            fp,
            send_len: send.len(),
            recv_len: recv.len(),
            counts: send_counts,
            counts2: recv_counts,
        };
        self.admit(call, || {
            self.length(kind, BufferRole::SendCounts, n, send_counts.len())?;
            self.length(kind, BufferRole::ReceiveCounts, n, recv_counts.len())?;
            self.length(kind, BufferRole::Send, send_counts.iter().sum(), send.len())?;
            self.length(
                kind,
                BufferRole::Receive,
                recv_counts.iter().sum(),
                recv.len(),
            )
        })?;
        let (sc, sd) = counts_and_displs(kind, me, send_counts)?;
        let (rc_, rd) = counts_and_displs(kind, me, recv_counts)?;
        let dt = datatype(T::DTYPE);
        // SAFETY: lengths checked against the counts.
        let rc = unsafe {
            ffi::MPI_Alltoallv(
                ptr(send),
                sc.as_ptr(),
                sd.as_ptr(),
                dt,
                mut_ptr(recv),
                rc_.as_ptr(),
                rd.as_ptr(),
                dt,
                self.comm,
            )
        };
        check(kind, me, rc)
    }

    fn send<T: Element>(&self, buf: &[T], dest: usize) -> Result<(), CommError> {
        let kind = OpKind::Send;
        let _b = self.enter(kind)?;
        let d = self.peer(kind, dest)?;
        if dest == self.rank {
            return Err(self.self_message(kind));
        }
        count(kind, self.rank, buf.len())?;
        self.p2p(kind, Some((buf, d)), None::<(&mut [T], c_int)>)
    }

    fn recv<T: Element>(&self, buf: &mut [T], source: usize) -> Result<(), CommError> {
        let kind = OpKind::Recv;
        let _b = self.enter(kind)?;
        let s = self.peer(kind, source)?;
        if source == self.rank {
            return Err(self.self_message(kind));
        }
        count(kind, self.rank, buf.len())?;
        self.p2p(kind, None::<(&[T], c_int)>, Some((buf, s)))
    }

    fn send_recv<T: Element>(
        &self,
        send: &[T],
        dest: usize,
        recv: &mut [T],
        source: usize,
    ) -> Result<(), CommError> {
        let kind = OpKind::SendRecv;
        let _b = self.enter(kind)?;
        let (d, s) = (self.peer(kind, dest)?, self.peer(kind, source)?);
        count(kind, self.rank, send.len())?;
        count(kind, self.rank, recv.len())?;
        self.p2p(kind, Some((send, d)), Some((recv, s)))
    }

    fn barrier(&self) -> Result<(), CommError> {
        let kind = OpKind::Barrier;
        let _b = self.enter(kind)?;
        let fp = Fingerprint::new(self.seq.fetch_add(1, Ordering::Relaxed), kind, None, 0);
        self.admit(Call::lens(fp, 0, 0), || Ok(()))?;
        // SAFETY: a valid communicator.
        check(kind, self.rank, unsafe { ffi::MPI_Barrier(self.comm) })
    }
}
