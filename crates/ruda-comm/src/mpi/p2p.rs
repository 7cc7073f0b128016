//! Point-to-point calls on MPI with a rendezvous that both sides agree on
//! before data moves: the sender's header (length, type) goes to the
//! receiver, which answers with an acknowledgement that accepts or refuses
//! it. Both waits have the deadline; data moves only between two ranks that
//! have both committed to it, so it cannot hang, a mismatch is the same
//! error on both sides, and nothing is truncated or left in flight.

use std::ffi::{c_int, c_void};
use std::time::Instant;

use mpi::ffi;

use super::agree::Channel;
use super::raw::{check, count, datatype};
use super::wait::{Inflight, ReqKind};
use crate::{BufferRole, CommError, DType, Element, ErrorContext, Fingerprint, OpKind};

/// Tags on the control channel.
const TAG_HEADER: c_int = 11;
const TAG_ACK: c_int = 12;
/// The tag of data on the main communicator.
const TAG_DATA: c_int = 0;

/// The small messages of one rendezvous.
struct Words {
    /// This rank's header: [length, dtype code].
    header_out: [i64; 2],
    /// The sender's header.
    header_in: [i64; 2],
    /// This rank's verdict on the sender's header: [length, dtype code, accepted].
    ack_out: [i64; 3],
    /// The receiver's verdict on this rank's header.
    ack_in: [i64; 3],
}

/// A word zero-length buffers point to (never written through).
static EMPTY: [u64; 1] = [0];

/// The error of a message of `sent` (length, dtype code) from `sender`
/// meeting a receive of `got` at `receiver`, as both sides report it.
fn mismatch(
    op: OpKind,
    me: usize,
    receiver: usize,
    sent: (usize, i64),
    got: (usize, i64),
    sender: usize,
) -> CommError {
    if sent.1 != got.1 {
        let dt = |c: i64| DType::from_code(c as u8);
        return CommError::Desync {
            op,
            rank: me,
            first_rank: sender,
            first: Box::new(Fingerprint::new(0, OpKind::Send, dt(sent.1), sent.0)),
            other_rank: receiver,
            other: Box::new(Fingerprint::new(0, OpKind::Recv, dt(got.1), got.0)),
            context: ErrorContext::none(),
        };
    }
    CommError::LengthMismatch {
        op,
        rank: me,
        offender: receiver,
        buffer: BufferRole::Receive,
        expected: sent.0,
        got: got.0,
        context: ErrorContext::none(),
    }
}

/// Send `send` (to its rank) and receive into `recv` (from its rank), one
/// or both, on `comm` with the control channel of `ch`.
///
/// # Errors
/// [`CommError::Timeout`] naming the peers that did not take part by the
/// deadline; [`CommError::LengthMismatch`] or [`CommError::Desync`] on both
/// sides when the receive does not fit what is sent; transport errors.
pub(crate) fn exchange<T: Element>(
    ch: &Channel<'_>,
    comm: ffi::MPI_Comm,
    op: OpKind,
    send: Option<(&[T], usize)>,
    recv: Option<(&mut [T], usize)>,
    deadline: Instant,
) -> Result<(), CommError> {
    let me = ch.rank;
    let code = T::DTYPE.code() as i64;
    let i64t = datatype(DType::I64);
    let s = ch.session;
    let source = recv.as_ref().map(|(_, r)| *r);
    let dest = send.as_ref().map(|(_, d)| *d);
    let mut fl = Inflight::new(
        s,
        Words {
            header_out: [send.as_ref().map_or(0, |(b, _)| b.len() as i64), code],
            header_in: [0; 2],
            ack_out: [0; 3],
            ack_in: [0; 3],
        },
    );
    let w = fl.bufs();
    // Every pointer MPI gets, taken before any request is posted.
    // SAFETY: `w` is owned by `fl` until every request is complete (or it
    // is leaked); no request is in flight yet. Fields are read or written
    // below only through `w`, and only when no request uses them.
    let (header_out, header_in, ack_out, ack_in): (
        *const c_void,
        *mut c_void,
        *const c_void,
        *mut c_void,
    ) = {
        // SAFETY: `w` is owned by `fl` until every request is complete (or
        // it is leaked); no request is in flight yet, so this reference is
        // the only access.
        let w = unsafe { &mut *w };
        (
            w.header_out.as_ptr().cast(),
            w.header_in.as_mut_ptr().cast(),
            w.ack_out.as_ptr().cast(),
            w.ack_in.as_mut_ptr().cast(),
        )
    };
    let ctl = ch.ctl;
    // Requests: the sender's header (if receiving), the receiver's verdict
    // and this rank's header (if sending).
    let header_req = match source {
        Some(src) => Some(fl.post(op, me, ReqKind::Recv, |r| {
            // SAFETY: 2 words only MPI touches until the receive completes.
            unsafe { ffi::MPI_Irecv(header_in, 2, i64t, src as c_int, TAG_HEADER, ctl, r) }
        })?),
        None => None,
    };
    let ack_req = match dest {
        Some(d) => {
            let i = fl.post(op, me, ReqKind::Recv, |r| {
                // SAFETY: 3 words only MPI touches until the receive completes.
                unsafe { ffi::MPI_Irecv(ack_in, 3, i64t, d as c_int, TAG_ACK, ctl, r) }
            })?;
            fl.post(op, me, ReqKind::Send, |r| {
                // SAFETY: 2 words, unchanged until the send completes.
                unsafe { ffi::MPI_Isend(header_out, 2, i64t, d as c_int, TAG_HEADER, ctl, r) }
            })?;
            Some(i)
        }
        None => None,
    };
    let timeout = |missing: Vec<usize>| CommError::Timeout {
        op,
        rank: me,
        missing,
        waited: s.timeout,
        context: ErrorContext::none(),
    };
    // The sender's header, then this rank's verdict on it.
    let mut accepted = false;
    if let (Some(i), Some(src), Some((buf, _))) = (header_req, source, recv.as_ref()) {
        if !fl.wait(op, me, i..i + 1, deadline)?.is_empty() {
            let mut missing = vec![src];
            if let (Some(a), Some(d)) = (ack_req, dest)
                && d != src
                && !fl.wait(op, me, a..a + 1, Instant::now())?.is_empty()
            {
                missing.push(d);
            }
            return Err(timeout(missing));
        }
        // SAFETY: the header's receive is complete; the verdict's send is
        // not posted yet.
        unsafe {
            let got = (*w).header_in;
            accepted = got[0] as usize == buf.len() && got[1] == code;
            (*w).ack_out = [buf.len() as i64, code, i64::from(accepted)];
        }
        fl.post(op, me, ReqKind::Send, |r| {
            // SAFETY: 3 words, unchanged until the send completes.
            unsafe { ffi::MPI_Isend(ack_out, 3, i64t, src as c_int, TAG_ACK, ctl, r) }
        })?;
    }
    // The receiver's verdict on this rank's header.
    let mut delivered = false;
    if let (Some(a), Some(d)) = (ack_req, dest) {
        if !fl.wait(op, me, a..a + 1, deadline)?.is_empty() {
            return Err(timeout(vec![d]));
        }
        // SAFETY: the verdict's receive is complete.
        delivered = unsafe { (*w).ack_in[2] } == 1;
    }
    // Data, between committed ranks only.
    let dt = datatype(T::DTYPE);
    let send_data = send.as_ref().filter(|_| delivered);
    let rc = match (send_data, recv, accepted) {
        (Some((out, d)), Some((into, src)), true) => {
            let (sc, rc) = (count(op, me, out.len())?, count(op, me, into.len())?);
            let (sp, rp) = (ptr(out), mut_ptr(into));
            // SAFETY: both buffers hold their counts; both peers committed.
            s.mpi(|| unsafe {
                ffi::MPI_Sendrecv(
                    sp,
                    sc,
                    dt,
                    *d as c_int,
                    TAG_DATA,
                    rp,
                    rc,
                    dt,
                    src as c_int,
                    TAG_DATA,
                    comm,
                    ffi::RSMPI_STATUS_IGNORE,
                )
            })
        }
        (Some((out, d)), _, _) => {
            let sc = count(op, me, out.len())?;
            let sp = ptr(out);
            // SAFETY: as above.
            s.mpi(|| unsafe { ffi::MPI_Send(sp, sc, dt, *d as c_int, TAG_DATA, comm) })
        }
        (None, Some((into, src)), true) => {
            let rc = count(op, me, into.len())?;
            let rp = mut_ptr(into);
            // SAFETY: as above.
            s.mpi(|| unsafe {
                ffi::MPI_Recv(
                    rp,
                    rc,
                    dt,
                    src as c_int,
                    TAG_DATA,
                    comm,
                    ffi::RSMPI_STATUS_IGNORE,
                )
            })
        }
        _ => 0,
    };
    check(op, me, rc)?;
    // Our header and verdict were received (the peers answered or sent
    // data), so these complete at once.
    if !fl.wait(op, me, 0..fl.len(), deadline)?.is_empty() {
        return Err(timeout(dest.into_iter().chain(source).collect()));
    }
    // SAFETY: every request is complete.
    let w = unsafe { &*w };
    if let Some(src) = source
        && !accepted
    {
        let sent = (w.header_in[0] as usize, w.header_in[1]);
        return Err(mismatch(
            op,
            me,
            me,
            sent,
            (w.ack_out[0] as usize, code),
            src,
        ));
    }
    if let (Some(d), Some((out, _))) = (dest, send.as_ref())
        && !delivered
    {
        let got = (w.ack_in[0] as usize, w.ack_in[1]);
        return Err(mismatch(op, me, d, (out.len(), code), got, me));
    }
    Ok(())
}

fn ptr<T>(s: &[T]) -> *const c_void {
    if s.is_empty() {
        EMPTY.as_ptr().cast()
    } else {
        s.as_ptr().cast()
    }
}

fn mut_ptr<T>(s: &mut [T]) -> *mut c_void {
    if s.is_empty() {
        EMPTY.as_ptr() as *mut c_void
    } else {
        s.as_mut_ptr().cast()
    }
}
