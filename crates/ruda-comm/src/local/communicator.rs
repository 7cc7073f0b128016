//! `LocalCommunicator`: one rank of a group of threads in this process.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

use super::group::{Group, Slot};
use super::kernels;
use crate::flight::{self, RankHistory, Token};
use crate::validate::{self, CallArgs};
use crate::{
    BufferRole, CommError, Communicator, Element, ErrorContext, Fingerprint, InvalidArgument,
    OpKind, PeerFailureCause, ReduceOp,
};

/// One rank of an in-process group; made by [`crate::LocalWorld`] or by
/// [`Communicator::split`].
///
/// Collectives read peers' buffers directly: an all-reduce reads each
/// input once and writes each output once, with the work split between
/// ranks. Every call is fingerprinted and checked on every rank before any
/// data moves; every wait has the world's deadline; a rank that panics
/// poisons its groups, and one that drops its communicator fails the calls
/// that wait for it.
///
/// Calls on one communicator must not overlap (two threads using the same
/// rank at once get [`InvalidArgument::ConcurrentUse`]).
///
/// # Example
/// ```
/// use ruda_comm::{Communicator, LocalWorld};
/// let out = LocalWorld::new(2).run(|comm| {
///     let mut all = [0i64; 2];
///     comm.all_gather(&[comm.rank() as i64 * 7], &mut all).map(|_| all)
/// }).unwrap();
/// assert_eq!(out, vec![[0, 7], [0, 7]]);
/// ```
pub struct LocalCommunicator {
    group: Arc<Group>,
    rank: usize,
    seq: AtomicU64,
    busy: AtomicBool,
}

impl fmt::Debug for LocalCommunicator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LocalCommunicator")
            .field("rank", &self.rank)
            .field("size", &self.group.size())
            .finish()
    }
}

impl Drop for LocalCommunicator {
    fn drop(&mut self) {
        let cause = if std::thread::panicking() {
            PeerFailureCause::Panicked
        } else {
            PeerFailureCause::LeftGroup
        };
        self.group.sync.leave(self.rank, cause);
    }
}

/// Clears the busy flag of a communicator when a call ends.
struct Busy<'a>(&'a AtomicBool);

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

/// Arrives at the completion episode when dropped, also while unwinding, so
/// that no rank leaves while a peer may still read its buffers. Dropped
/// before `returned` is set, it is unwinding from the call's work and says
/// so to the group first, so that no peer returns `Ok` from a call whose
/// pieces this rank may not have written.
struct Completion<'a> {
    comm: &'a LocalCommunicator,
    op: OpKind,
    started: Instant,
    /// The completion episode's number ([`super::sync::GroupSync::episode`]).
    episode: u64,
    /// Set once the verdict and the work have returned.
    returned: bool,
}

impl Drop for Completion<'_> {
    fn drop(&mut self) {
        if !self.returned {
            self.comm.group.sync.unwinding(self.comm.rank, self.episode);
        }
        // A completion episode cannot fail.
        let _ = self
            .comm
            .group
            .sync
            .arrive(self.comm.rank, self.op, false, self.started);
    }
}

impl LocalCommunicator {
    pub(crate) fn new(group: Arc<Group>, rank: usize) -> Self {
        group.register(rank);
        LocalCommunicator {
            group,
            rank,
            seq: AtomicU64::new(0),
            busy: AtomicBool::new(false),
        }
    }

    /// A fingerprint without its sequence number, which the call takes only
    /// once it is admitted (a refused call takes none).
    fn fingerprint<T: Element>(&self, op: OpKind, count: usize) -> Fingerprint {
        Fingerprint::new(0, op, Some(T::DTYPE), count)
    }

    fn enter(&self, op: OpKind) -> Result<Busy<'_>, CommError> {
        if self.busy.swap(true, Ordering::Acquire) {
            return Err(self.invalid(op, InvalidArgument::ConcurrentUse));
        }
        Ok(Busy(&self.busy))
    }

    fn invalid(&self, op: OpKind, reason: InvalidArgument) -> CommError {
        CommError::InvalidArgument {
            op,
            rank: self.rank,
            reason,
            context: self.group.context(false),
        }
    }

    /// Add the group's context (world ranks, and the flight recorder's
    /// histories where they help) to an error, and dump it if asked.
    fn finish_error(&self, e: CommError) -> CommError {
        let history = e.wants_history();
        let e = e.with_context(|| self.group.context(history));
        if e.wants_history() {
            flight::dump_if_requested(&e);
        }
        e
    }

    /// Record the end of a call and dress its error.
    fn end<R>(&self, token: Token, r: Result<R, CommError>) -> Result<R, CommError> {
        self.group
            .recorder(self.rank)
            .end(token, flight::outcome_of(&r));
        r.map_err(|e| self.finish_error(e))
    }

    /// Run one collective: take the next sequence number, publish `slot`,
    /// pass the checked episode, check every rank's arguments with
    /// [`validate::verdict`] (the same verdict on every rank), run `work` on
    /// success, and pass the completion episode. The caller holds `busy`.
    fn collective_entered<R>(
        &self,
        _busy: &Busy<'_>,
        mut slot: Slot,
        work: impl FnOnce(&[Slot]) -> R,
    ) -> Result<R, CommError> {
        slot.fp.seq = self.seq.fetch_add(1, Ordering::Relaxed);
        let elements = slot.send_len.max(slot.recv_len).max(slot.fp.count);
        // One clock read serves the deadline and the flight recorder.
        let started = Instant::now();
        let token = self
            .group
            .recorder(self.rank)
            .begin(slot.fp, elements, None, started);
        let r = self.run(slot, started, work);
        self.end(token, r)
    }

    fn run<R>(
        &self,
        slot: Slot,
        started: Instant,
        work: impl FnOnce(&[Slot]) -> R,
    ) -> Result<R, CommError> {
        let op = slot.fp.op;
        self.group.publish(self.rank, slot);
        self.group.sync.arrive(self.rank, op, true, started)?;
        let mut completion = Completion {
            comm: self,
            op,
            started,
            episode: self.group.sync.episode(),
            returned: false,
        };
        let slots = self.group.snapshot();
        // SAFETY: between the call's two barrier episodes (the completion episode runs when `completion` drops, after `args` is gone).
        let args: Vec<CallArgs<'_>> = slots.iter().map(|s| unsafe { s.args() }).collect();
        let verdict = validate::verdict(&args, self.rank);
        drop(args);
        let out = verdict.map(|()| work(&slots));
        completion.returned = true;
        let episode = completion.episode;
        drop(completion);
        // A peer that unwound from its work may have left its pieces of this
        // rank's output unwritten: the call fails on every rank that returns.
        if out.is_ok()
            && let Some(peer) = self.group.sync.unwound_in(episode)
        {
            return Err(CommError::PeerFailure {
                op,
                rank: self.rank,
                peer,
                cause: PeerFailureCause::Panicked,
                context: ErrorContext::none(),
            });
        }
        out
    }

    /// [`LocalCommunicator::collective_entered`] for a call that is not yet
    /// inside this communicator.
    fn collective<R>(&self, slot: Slot, work: impl FnOnce(&[Slot]) -> R) -> Result<R, CommError> {
        let busy = self.enter(slot.fp.op)?;
        self.collective_entered(&busy, slot, work)
    }

    /// A point-to-point call: record it, run it, dress its error.
    fn point_to_point(
        &self,
        mut fp: Fingerprint,
        elements: usize,
        peer: usize,
        call: impl FnOnce() -> Result<(), CommError>,
    ) -> Result<(), CommError> {
        // Between two ranks only: it records how many collectives came
        // before and takes no sequence number.
        fp.seq = self.seq.load(Ordering::Relaxed);
        let token = self
            .group
            .recorder(self.rank)
            .begin(fp, elements, Some(peer), Instant::now());
        let r = call();
        self.end(token, r)
    }

    /// `all_gather` into `recv_len` elements at `recv_ptr`, which it writes
    /// completely on success and never reads.
    fn all_gather_raw<T: Element>(
        &self,
        send: &[T],
        recv_ptr: *mut T,
        recv_len: usize,
    ) -> Result<(), CommError> {
        let me = self.rank;
        let mut slot = Slot::new(self.fingerprint::<T>(OpKind::AllGather, send.len()));
        slot.send = send.as_ptr().cast();
        slot.send_len = send.len();
        slot.recv = recv_ptr.cast();
        slot.recv_len = recv_len;
        self.collective(slot, |slots| {
            let c = slots[0].fp.count;
            let lens = vec![c; slots.len()];
            let off = kernels::offsets(&lens);
            // SAFETY: inside the barrier window; every send buffer holds `c`
            // elements and every receive buffer `size × c` (checked).
            unsafe { gather_blocks::<T>(slots, me, &lens, &off) }
        })
    }

    /// `reduce_scatter` into `recv_len` elements at `recv_ptr`, which it writes
    /// completely on success and never reads.
    fn reduce_scatter_raw<T: Element>(
        &self,
        send: &[T],
        recv_ptr: *mut T,
        recv_len: usize,
        op: ReduceOp,
    ) -> Result<(), CommError> {
        let me = self.rank;
        let kind = OpKind::ReduceScatter;
        let mut slot = Slot::new(self.fingerprint::<T>(kind, recv_len).with_reduce(op));
        slot.send = send.as_ptr().cast();
        slot.send_len = send.len();
        slot.recv = recv_ptr.cast();
        slot.recv_len = recv_len;
        self.collective(slot, |slots| {
            let c = slots[0].fp.count;
            let ins: Vec<*const T> = slots
                .iter()
                // SAFETY: every send buffer holds `size × c` elements
                // (checked), so block `me` starts in bounds.
                .map(|s| unsafe { ptr::<T>(s).0.add(me * c) })
                .collect();
            // The receive buffer is borrowed `&mut` by this rank's caller,
            // the send buffers `&` by theirs, so none overlaps it.
            // SAFETY: valid: lengths checked; unaliased: see above.
            unsafe { kernels::reduce_into(&ins, ptr::<T>(&slots[me]).1, c, op) }
        })
    }

    /// `all_to_all_v` into `recv_len` elements at `recv_ptr`, which it writes
    /// completely on success and never reads.
    fn all_to_all_v_raw<T: Element>(
        &self,
        send: &[T],
        send_counts: &[usize],
        recv_ptr: *mut T,
        recv_len: usize,
        recv_counts: &[usize],
    ) -> Result<(), CommError> {
        let me = self.rank;
        let kind = OpKind::AllToAllV;
        let mut slot = Slot::new(self.fingerprint::<T>(kind, 0));
        slot.send = send.as_ptr().cast();
        slot.send_len = send.len();
        slot.recv = recv_ptr.cast();
        slot.recv_len = recv_len;
        slot.counts = send_counts.as_ptr();
        slot.counts_len = send_counts.len();
        slot.counts2 = recv_counts.as_ptr();
        slot.counts2_len = recv_counts.len();
        self.collective(slot, |slots| {
            let dst = ptr::<T>(&slots[me]).1;
            // SAFETY: inside the barrier window; counts checked to match.
            let recv_off = kernels::offsets(unsafe { slots[me].counts2() });
            for p in kernels::rotation(me, slots.len()) {
                let s = &slots[p];
                // SAFETY: as above.
                let counts = unsafe { s.counts() };
                let from: usize = counts[..me].iter().sum();
                // SAFETY: lengths checked; only this rank writes its receive buffer.
                unsafe { kernels::copy(ptr::<T>(s).0.add(from), dst.add(recv_off[p]), counts[me]) }
            }
        })
    }

    /// Every rank's `mine`, cloned, in rank order (collective): how rank
    /// threads share Rust values — tensor handles, shapes, anything
    /// `Clone` — with the same checks as every other collective of the
    /// local transport. Each rank clones its peers' values between the
    /// call's two barrier episodes, while their owners are held inside the
    /// call; nothing is copied through bytes.
    ///
    /// The type is part of the call's fingerprint: ranks that share values
    /// of different types get [`CommError::Desync`] (naming both types) on
    /// every rank, never a misread value. The deadline, poison on panic and
    /// the flight recorder apply as to every collective. The clones run
    /// between the call's two barrier episodes: a `Clone` that panics
    /// unwinds through the completion episode (no rank's value is released
    /// while a peer may still read it) and then panics on the rank that ran
    /// it, whose peers get [`CommError::PeerFailure`] naming it from this
    /// call, as from every later call of the group, which stays poisoned;
    /// a `Clone` that blocks holds every rank of the group in the
    /// completion episode, which has no deadline — keep `Clone` cheap and
    /// non-blocking (a handle, a shape).
    ///
    /// # Errors
    /// The collective errors ([`CommError::Desync`], [`CommError::Timeout`],
    /// [`CommError::PeerFailure`]); [`InvalidArgument::ConcurrentUse`].
    ///
    /// # Example
    /// ```
    /// use ruda_comm::{Communicator, LocalWorld};
    /// let out = LocalWorld::new(3).run(|comm| {
    ///     let mine = format!("rank {}", comm.rank());
    ///     comm.all_gather_objects(&mine)
    /// }).unwrap();
    /// assert_eq!(out[1], vec!["rank 0", "rank 1", "rank 2"]);
    /// ```
    pub fn all_gather_objects<T: Clone + Send + Sync + 'static>(
        &self,
        mine: &T,
    ) -> Result<Vec<T>, CommError> {
        let fp = Fingerprint::new(0, OpKind::AllGatherObjects, None, 1).with_object::<T>();
        let mut slot = Slot::new(fp);
        slot.send = core::ptr::from_ref(mine).cast();
        slot.send_len = 1;
        self.collective(slot, |slots| {
            slots
                .iter()
                .map(|s| {
                    // `validate::verdict` has checked (first, for every
                    // operation), before this work runs,
                    // that every rank's fingerprint names this rank's
                    // `TypeId`; each owner holds its `&T` for the whole
                    // call, which it leaves only after the completion
                    // episode that follows this work (also when a clone
                    // panics: the episode runs while unwinding).
                    // Only shared references to it exist (`&T`, `T:
                    // Sync`) and nothing writes it during the call.
                    // SAFETY: `send` is a live, aligned `T`, read shared.
                    let theirs: &T = unsafe { &*s.send.cast::<T>() };
                    theirs.clone()
                })
                .collect()
        })
    }

    fn sync(&self) -> &super::sync::GroupSync {
        &self.group.sync
    }

    fn check_peer(&self, op: OpKind, peer: usize) -> Result<(), CommError> {
        if peer >= self.size() {
            return Err(self.invalid(
                op,
                InvalidArgument::Peer {
                    peer,
                    size: self.size(),
                },
            ));
        }
        Ok(())
    }
}

/// An uninitialised output of `len` elements (`None`: the length
/// overflowed). A length no allocation can hold gets an empty vector and is
/// passed on, so that the collective refuses it on every rank as too large
/// instead of this rank failing alone before the call.
fn output<T>(len: Option<usize>) -> (Vec<T>, usize) {
    match len {
        Some(n) if n <= isize::MAX as usize / size_of::<T>().max(1) => (Vec::with_capacity(n), n),
        Some(n) => (Vec::new(), n),
        None => (Vec::new(), usize::MAX),
    }
}

/// Rank `me`'s share of an all-gather of the blocks `lens` (rank `p`'s at
/// offset `off[p]` of every output). Large blocks
/// ([`kernels::gathers_shared`]): the `me`-th piece of every block, read
/// once and written into every rank's receive buffer. Small ones: every
/// block into this rank's own receive buffer. Either way every output
/// element is written by exactly one rank, the call's choice is the same
/// on every rank (it depends on `lens` only), and streamed stores are
/// fenced before it returns. Nothing in it panics (its indices are ranks,
/// below `slots.len()`, which `lens` and `off` have as their length); a
/// rank that did unwind here would leave its pieces of its peers' outputs
/// unwritten, and they would return [`CommError::PeerFailure`] from the
/// call (see `Completion`), as from a rank unwinding in an all-reduce's
/// share.
///
/// # Safety
/// Between the call's two barrier episodes: `slots[p]`'s send buffer holds
/// `lens[p]` elements and every receive buffer `off[p] + lens[p]` for
/// every `p`, no send buffer overlaps a receive buffer (the callers borrow
/// them `&` and `&mut`), and every rank runs this with the same `lens` and
/// `off`.
unsafe fn gather_blocks<T: Element>(slots: &[Slot], me: usize, lens: &[usize], off: &[usize]) {
    let n = slots.len();
    let largest = lens.iter().copied().max().unwrap_or(0);
    if kernels::gathers_shared(largest.saturating_mul(size_of::<T>())) {
        let stream = kernels::streams::<T>(largest);
        let mut dsts: Vec<*mut T> = Vec::with_capacity(n);
        for p in kernels::rotation(me, n) {
            let (lo, hi) = kernels::partition::<T>(lens[p], me, n);
            if hi == lo {
                continue;
            }
            dsts.clear();
            // SAFETY: valid: `lo <= hi <= lens[p]`, so the piece lies in rank `p`'s send buffer and at `off[p] + lo` of every receive buffer (caller); only offsets are computed here.
            let src = unsafe {
                dsts.extend(slots.iter().map(|s| ptr::<T>(s).1.add(off[p] + lo)));
                ptr::<T>(&slots[p]).0.add(lo)
            };
            // SAFETY: valid: in bounds (above); unaliased: a block's pieces are disjoint (`partition`), so this rank alone writes them, and no send buffer overlaps a receive buffer (caller); fenced below.
            unsafe { kernels::copy_to_each(src, &dsts, hi - lo, stream) }
        }
        if stream {
            kernels::fence();
        }
    } else {
        let dst = ptr::<T>(&slots[me]).1;
        for p in kernels::rotation(me, n) {
            // SAFETY: valid: in bounds (caller); unaliased: only this rank writes its receive buffer, which no send buffer overlaps.
            unsafe { kernels::copy(ptr::<T>(&slots[p]).0, dst.add(off[p]), lens[p]) }
        }
    }
}

fn ptr<T>(s: &Slot) -> (*const T, *mut T) {
    (s.send as *const T, s.recv as *mut T)
}

impl Communicator for LocalCommunicator {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.group.size()
    }

    fn world_rank(&self, r: usize) -> usize {
        self.group.world_ranks[r]
    }

    fn seq(&self) -> u64 {
        self.seq.load(Ordering::Relaxed)
    }

    fn flight_record(&self) -> RankHistory {
        self.group
            .recorder(self.rank)
            .history(self.rank, self.group.world_ranks[self.rank])
    }

    fn split(&self, color: Option<u32>, key: i32) -> Result<Option<Self>, CommError> {
        let me = self.rank;
        let mut slot = Slot::new(Fingerprint::new(0, OpKind::Split, None, 0));
        slot.color = color;
        slot.key = key;
        let group = &self.group;
        // Held until the last episode below, so that no other call of this
        // rank can arrive in it.
        let busy = self.enter(OpKind::Split)?;
        let joined = self.collective_entered(&busy, slot, |slots| {
            let color = color?;
            let mut members: Vec<usize> = (0..slots.len())
                .filter(|&r| slots[r].color == Some(color))
                .collect();
            members.sort_by_key(|&r| (slots[r].key, r));
            let leader = *members.iter().min().expect("this rank is a member");
            if leader == me {
                let world_ranks = members.iter().map(|&r| group.world_ranks[r]).collect();
                let sub = Group::new(&group.world, world_ranks);
                *group.split_out[me]
                    .lock()
                    .unwrap_or_else(|e| e.into_inner()) = Some(sub);
            }
            let new_rank = members.iter().position(|&r| r == me).expect("member");
            Some((leader, new_rank))
        })?;
        // The completion episode has passed, so every leader has published;
        // members collect, and one more episode keeps the leaders' slots until
        // everyone has.
        let started = Instant::now();
        let out = joined.map(|(leader, new_rank)| {
            let sub = group.split_out[leader]
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone()
                .expect("the leader published the sub-group");
            LocalCommunicator::new(sub, new_rank)
        });
        self.sync()
            .arrive(me, OpKind::Split, false, started)
            .map_err(|e| self.finish_error(e))?;
        *group.split_out[me]
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = None;
        drop(busy);
        Ok(out)
    }

    fn all_reduce<T: Element>(&self, buf: &mut [T], op: ReduceOp) -> Result<(), CommError> {
        let me = self.rank;
        let mut slot = Slot::new(
            self.fingerprint::<T>(OpKind::AllReduce, buf.len())
                .with_reduce(op),
        );
        slot.recv = buf.as_mut_ptr().cast();
        self.collective(slot, |slots| {
            let n = slots.len();
            let (lo, hi) = kernels::partition::<T>(slots[0].fp.count, me, n);
            let ptrs: Vec<*mut T> = slots
                .iter()
                // SAFETY: every buffer holds `count` elements (checked)
                // and `lo <= count` (see `partition`).
                .map(|s| unsafe { ptr::<T>(s).1.add(lo) })
                .collect();
            let ins: Vec<*const T> = ptrs.iter().map(|&p| p as *const T).collect();
            // SAFETY: every rank's buffer has `count` elements (checked);
            // this rank alone touches `lo..hi` of every buffer until the
            // completion episode.
            unsafe { kernels::reduce(&ins, &ptrs, hi - lo, op) }
        })
    }

    fn all_gather<T: Element>(&self, send: &[T], recv: &mut [T]) -> Result<(), CommError> {
        self.all_gather_raw(send, recv.as_mut_ptr(), recv.len())
    }

    fn all_gather_v<T: Element>(
        &self,
        send: &[T],
        recv: &mut [T],
        counts: &[usize],
    ) -> Result<(), CommError> {
        let me = self.rank;
        let op = OpKind::AllGatherV;
        let mut slot = Slot::new(self.fingerprint::<T>(op, 0));
        slot.send = send.as_ptr().cast();
        slot.send_len = send.len();
        slot.recv = recv.as_mut_ptr().cast();
        slot.recv_len = recv.len();
        slot.counts = counts.as_ptr();
        slot.counts_len = counts.len();
        self.collective(slot, |slots| {
            let lens: Vec<usize> = slots.iter().map(|s| s.send_len).collect();
            let off = kernels::offsets(&lens);
            // SAFETY: inside the barrier window; every rank's counts match
            // the send lengths and its receive buffer holds their sum
            // (checked).
            unsafe { gather_blocks::<T>(slots, me, &lens, &off) }
        })
    }

    fn reduce_scatter<T: Element>(
        &self,
        send: &[T],
        recv: &mut [T],
        op: ReduceOp,
    ) -> Result<(), CommError> {
        self.reduce_scatter_raw(send, recv.as_mut_ptr(), recv.len(), op)
    }

    fn reduce_scatter_v<T: Element>(
        &self,
        send: &[T],
        recv: &mut [T],
        counts: &[usize],
        op: ReduceOp,
    ) -> Result<(), CommError> {
        let me = self.rank;
        let kind = OpKind::ReduceScatterV;
        let mut slot = Slot::new(self.fingerprint::<T>(kind, 0).with_reduce(op));
        slot.send = send.as_ptr().cast();
        slot.send_len = send.len();
        slot.recv = recv.as_mut_ptr().cast();
        slot.recv_len = recv.len();
        slot.counts = counts.as_ptr();
        slot.counts_len = counts.len();
        self.collective(slot, |slots| {
            // SAFETY: inside the barrier window; counts checked equal.
            // SAFETY: inside the barrier window, where the published
            // count lists are alive (and were checked to be `size` long).
            let offsets = kernels::offsets(unsafe { slots[me].counts() });
            let c = slots[me].recv_len;
            let ins: Vec<*const T> = slots
                .iter()
                // SAFETY: every send buffer covers the sum of the counts
                // (checked), so this rank's block starts in bounds.
                .map(|s| unsafe { ptr::<T>(s).0.add(offsets[me]) })
                .collect();
            // The receive buffer is borrowed `&mut` by this rank's caller,
            // the send buffers `&` by theirs, so none overlaps it.
            // SAFETY: valid: lengths checked; unaliased: see above.
            unsafe { kernels::reduce_into(&ins, ptr::<T>(&slots[me]).1, c, op) }
        })
    }

    fn broadcast<T: Element>(&self, buf: &mut [T], root: usize) -> Result<(), CommError> {
        let me = self.rank;
        let kind = OpKind::Broadcast;
        let mut slot = Slot::new(self.fingerprint::<T>(kind, buf.len()).with_root(root));
        slot.recv = buf.as_mut_ptr().cast();
        slot.send = slot.recv;
        self.collective(slot, |slots| {
            let count = slots[0].fp.count;
            for (d, lo, hi) in kernels::broadcast_pieces::<T>(count, slots.len(), root, me) {
                // SAFETY: lengths equal (checked); the root's buffer is
                // only read, and the ranges of one destination that
                // different ranks write are disjoint.
                unsafe {
                    kernels::copy(
                        ptr::<T>(&slots[root]).0.add(lo),
                        ptr::<T>(&slots[d]).1.add(lo),
                        hi - lo,
                    )
                }
            }
        })
    }

    fn all_to_all<T: Element>(&self, send: &[T], recv: &mut [T]) -> Result<(), CommError> {
        let me = self.rank;
        let kind = OpKind::AllToAll;
        let mut slot = Slot::new(self.fingerprint::<T>(kind, send.len()));
        slot.send = send.as_ptr().cast();
        slot.send_len = send.len();
        slot.recv = recv.as_mut_ptr().cast();
        slot.recv_len = recv.len();
        self.collective(slot, |slots| {
            let c = slots[0].fp.count / slots.len();
            let dst = ptr::<T>(&slots[me]).1;
            for p in kernels::rotation(me, slots.len()) {
                // SAFETY: lengths checked; only this rank writes its receive buffer.
                unsafe { kernels::copy(ptr::<T>(&slots[p]).0.add(me * c), dst.add(p * c), c) }
            }
        })
    }

    fn all_to_all_v<T: Element>(
        &self,
        send: &[T],
        send_counts: &[usize],
        recv: &mut [T],
        recv_counts: &[usize],
    ) -> Result<(), CommError> {
        self.all_to_all_v_raw(
            send,
            send_counts,
            recv.as_mut_ptr(),
            recv.len(),
            recv_counts,
        )
    }

    fn all_gather_vec<T: Element>(&self, send: &[T]) -> Result<Vec<T>, CommError> {
        let (mut out, len) = output::<T>(send.len().checked_mul(self.size()));
        self.all_gather_raw(send, out.as_mut_ptr(), len)?;
        // SAFETY: on success every one of the `len` elements was written
        // (and `len` fits the allocation: a `len` beyond it is refused as
        // too large before any data moves).
        unsafe { out.set_len(len) };
        Ok(out)
    }

    fn reduce_scatter_vec<T: Element>(
        &self,
        send: &[T],
        op: ReduceOp,
    ) -> Result<Vec<T>, CommError> {
        let (mut out, len) = output::<T>(Some(send.len() / self.size()));
        self.reduce_scatter_raw(send, out.as_mut_ptr(), len, op)?;
        // SAFETY: on success every one of the `len` elements was written.
        unsafe { out.set_len(len) };
        Ok(out)
    }

    fn all_to_all_v_vec<T: Element>(
        &self,
        send: &[T],
        send_counts: &[usize],
        recv_counts: &[usize],
    ) -> Result<Vec<T>, CommError> {
        let sum = recv_counts
            .iter()
            .try_fold(0usize, |a, &c| a.checked_add(c));
        let (mut out, len) = output::<T>(sum);
        self.all_to_all_v_raw(send, send_counts, out.as_mut_ptr(), len, recv_counts)?;
        // SAFETY: on success every one of the `len` elements was written
        // (receive counts are checked against what every peer sends, and
        // their sum against what the allocation holds).
        unsafe { out.set_len(len) };
        Ok(out)
    }

    fn send<T: Element>(&self, buf: &[T], dest: usize) -> Result<(), CommError> {
        let op = OpKind::Send;
        let _busy = self.enter(op)?;
        let fp = self.fingerprint::<T>(op, buf.len());
        self.point_to_point(fp, buf.len(), dest, || {
            self.check_peer(op, dest)?;
            if dest == self.rank {
                return Err(self.invalid(op, InvalidArgument::SelfMessage { op }));
            }
            let started = Instant::now();
            super::p2p::post(self.sync(), self.rank, dest, buf);
            super::p2p::await_delivery(self.sync(), op, self.rank, dest, started)
        })
    }

    fn recv<T: Element>(&self, buf: &mut [T], source: usize) -> Result<(), CommError> {
        let op = OpKind::Recv;
        let _busy = self.enter(op)?;
        let fp = self.fingerprint::<T>(op, buf.len());
        self.point_to_point(fp, buf.len(), source, || {
            self.check_peer(op, source)?;
            if source == self.rank {
                return Err(self.invalid(op, InvalidArgument::SelfMessage { op }));
            }
            super::p2p::receive(self.sync(), op, self.rank, source, buf, Instant::now())
        })
    }

    fn send_recv<T: Element>(
        &self,
        send: &[T],
        dest: usize,
        recv: &mut [T],
        source: usize,
    ) -> Result<(), CommError> {
        let op = OpKind::SendRecv;
        let _busy = self.enter(op)?;
        let fp = self.fingerprint::<T>(op, send.len());
        let me = self.rank;
        self.point_to_point(fp, send.len(), dest, || {
            self.check_peer(op, dest)?;
            self.check_peer(op, source)?;
            match (dest == me, source == me) {
                (true, true) => {
                    validate::length(op, me, me, BufferRole::Receive, send.len(), recv.len())?;
                    recv.copy_from_slice(send);
                    return Ok(());
                }
                (false, false) => {}
                _ => return Err(self.invalid(op, InvalidArgument::SelfMessage { op })),
            }
            let started = Instant::now();
            super::p2p::post(self.sync(), me, dest, send);
            let received = super::p2p::receive(self.sync(), op, me, source, recv, started);
            let delivered = super::p2p::await_delivery(self.sync(), op, me, dest, started);
            received.and(delivered)
        })
    }

    fn barrier(&self) -> Result<(), CommError> {
        let slot = Slot::new(Fingerprint::new(0, OpKind::Barrier, None, 0));
        self.collective(slot, |_| ())
    }
}
