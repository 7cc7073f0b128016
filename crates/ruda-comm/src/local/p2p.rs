//! Point-to-point messages of the local transport: a rendezvous through a
//! mailbox per ordered pair of ranks. The sender posts a pointer to its
//! buffer and blocks; the receiver checks type and length, copies, and
//! reports the outcome to the sender, so a mismatch is an error on both.

use std::time::Instant;

use super::sync::{GroupSync, Offer, OfferState};
use crate::{BufferRole, CommError, Element, ErrorContext, Fingerprint, OpKind};

/// Post `buf` in the mailbox from `me` to `dest`.
pub(crate) fn post<T: Element>(sync: &GroupSync, me: usize, dest: usize, buf: &[T]) {
    let mut st = sync.lock();
    st.mailboxes[me * sync.size + dest] = Some(Offer {
        dtype: T::DTYPE,
        len: buf.len(),
        ptr: buf.as_ptr().cast(),
        state: OfferState::Posted,
    });
    drop(st);
    sync.notify();
}

/// Wait until the offer from `me` to `dest` is delivered or refused. On
/// timeout or failure, an offer not yet taken is withdrawn; one being copied
/// is waited for, since the receiver reads the sender's buffer.
pub(crate) fn await_delivery(
    sync: &GroupSync,
    op: OpKind,
    me: usize,
    dest: usize,
    started: Instant,
) -> Result<(), CommError> {
    let idx = me * sync.size + dest;
    let deadline = started + sync.timeout;
    let mut st = sync.lock();
    loop {
        let offer = st.mailboxes[idx].as_mut().expect("posted offer");
        match &offer.state {
            OfferState::Done(_) => {
                let Some(Offer {
                    state: OfferState::Done(r),
                    ..
                }) = st.mailboxes[idx].take()
                else {
                    unreachable!("checked above")
                };
                return r.map_err(|e| e.reported_by(me));
            }
            OfferState::Taken => {
                let (g, _) = sync.wait_until(st, None);
                st = g;
                continue;
            }
            OfferState::Posted => {}
        }
        let failure = st.poison.as_ref().map(|p| p.to_error(op, me)).or_else(|| {
            st.left[dest].map(|cause| CommError::PeerFailure {
                op,
                rank: me,
                peer: dest,
                cause,
                context: ErrorContext::none(),
            })
        });
        if let Some(e) = failure {
            st.mailboxes[idx] = None;
            return Err(e);
        }
        let (g, timed_out) = sync.wait_until(st, Some(deadline));
        st = g;
        if timed_out
            && matches!(
                st.mailboxes[idx].as_ref().map(|o| &o.state),
                Some(OfferState::Posted)
            )
        {
            st.mailboxes[idx] = None;
            return Err(CommError::Timeout {
                op,
                rank: me,
                missing: vec![dest],
                waited: sync.timeout,
                context: ErrorContext::none(),
            });
        }
    }
}

/// Receive into `buf` the offer from `source` to `me`.
pub(crate) fn receive<T: Element>(
    sync: &GroupSync,
    op: OpKind,
    me: usize,
    source: usize,
    buf: &mut [T],
    started: Instant,
) -> Result<(), CommError> {
    let idx = source * sync.size + me;
    let deadline = started + sync.timeout;
    let mut st = sync.lock();
    loop {
        if let Some(offer) = st.mailboxes[idx].as_mut()
            && matches!(offer.state, OfferState::Posted)
        {
            let verdict = if offer.dtype != T::DTYPE {
                Err(CommError::Desync {
                    op,
                    rank: me,
                    first_rank: source,
                    first: Box::new(Fingerprint::new(
                        0,
                        OpKind::Send,
                        Some(offer.dtype),
                        offer.len,
                    )),
                    other_rank: me,
                    other: Box::new(Fingerprint::new(0, op, Some(T::DTYPE), buf.len())),
                    context: ErrorContext::none(),
                })
            } else if offer.len != buf.len() {
                Err(CommError::LengthMismatch {
                    op,
                    rank: me,
                    offender: me,
                    buffer: BufferRole::Receive,
                    expected: offer.len,
                    got: buf.len(),
                    context: ErrorContext::none(),
                })
            } else {
                Ok(())
            };
            if let Err(e) = verdict {
                offer.state = OfferState::Done(Err(e.clone()));
                drop(st);
                sync.notify();
                return Err(e);
            }
            offer.state = OfferState::Taken;
            let src = offer.ptr as *const T;
            drop(st);
            // SAFETY: the sender blocks until the state leaves `Taken`, so its
            // buffer of `buf.len()` elements (checked) stays valid and unchanged.
            unsafe { super::kernels::copy(src, buf.as_mut_ptr(), buf.len()) };
            let mut st = sync.lock();
            if let Some(offer) = st.mailboxes[idx].as_mut() {
                offer.state = OfferState::Done(Ok(()));
            }
            drop(st);
            sync.notify();
            return Ok(());
        }
        if let Some(p) = &st.poison {
            return Err(p.to_error(op, me));
        }
        if let Some(cause) = st.left[source] {
            return Err(CommError::PeerFailure {
                op,
                rank: me,
                peer: source,
                cause,
                context: ErrorContext::none(),
            });
        }
        let (g, timed_out) = sync.wait_until(st, Some(deadline));
        st = g;
        if timed_out
            && !matches!(
                st.mailboxes[idx].as_ref().map(|o| &o.state),
                Some(OfferState::Posted)
            )
        {
            return Err(CommError::Timeout {
                op,
                rank: me,
                missing: vec![source],
                waited: sync.timeout,
                context: ErrorContext::none(),
            });
        }
    }
}
