//! One local group: its synchronisation, the slots through which ranks
//! publish a call's arguments to each other, each rank's flight recorder,
//! and the world the group belongs to.

use std::cell::UnsafeCell;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant, SystemTime};

use super::sync::{GroupSync, WaitPolicy};
use crate::flight::{FlightRecorder, RankHistory};
use crate::validate::{CallArgs, CountList};
use crate::{ErrorContext, Fingerprint, OpKind, PeerFailureCause};

/// What one rank publishes for a collective: its fingerprint, buffers and
/// counts. Pointers are valid between the two barrier episodes of the call.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Slot {
    pub fp: Fingerprint,
    pub send: *const u8,
    pub send_len: usize,
    pub recv: *mut u8,
    pub recv_len: usize,
    pub counts: *const usize,
    pub counts_len: usize,
    pub counts2: *const usize,
    pub counts2_len: usize,
    pub color: Option<u32>,
    pub key: i32,
}

impl Slot {
    pub(crate) fn new(fp: Fingerprint) -> Self {
        Slot {
            fp,
            send: core::ptr::null(),
            send_len: 0,
            recv: core::ptr::null_mut(),
            recv_len: 0,
            counts: core::ptr::null(),
            counts_len: 0,
            counts2: core::ptr::null(),
            counts2_len: 0,
            color: None,
            key: 0,
        }
    }

    /// The call this slot describes, for the rules of
    /// [`crate::validate`]: its fingerprint, buffer lengths and count lists.
    ///
    /// # Safety
    /// Only between the two barrier episodes of the call that published it,
    /// and the returned arguments must be dropped before the completion
    /// episode: the count lists are borrowed from their owner, who keeps
    /// them alive only until then (the lifetime ties them to this copy of
    /// the slot, not to the owner's lists).
    pub(crate) unsafe fn args(&self) -> CallArgs<'_> {
        // SAFETY: forwarded from the caller (the lists are live).
        let (counts, counts2) = unsafe {
            (
                list(self.counts, self.counts_len),
                list(self.counts2, self.counts2_len),
            )
        };
        CallArgs {
            fp: self.fp,
            send_len: self.send_len,
            recv_len: self.recv_len,
            counts: CountList::whole(counts),
            counts2: CountList::whole(counts2),
        }
    }

    /// The first count list.
    ///
    /// # Safety
    /// As [`Slot::args`].
    pub(crate) unsafe fn counts(&self) -> &[usize] {
        // SAFETY: forwarded from the caller.
        unsafe { list(self.counts, self.counts_len) }
    }

    /// The second count list (receive counts of `all_to_all_v`).
    ///
    /// # Safety
    /// As [`Slot::args`].
    pub(crate) unsafe fn counts2(&self) -> &[usize] {
        // SAFETY: forwarded from the caller.
        unsafe { list(self.counts2, self.counts2_len) }
    }
}

/// The list of `len` counts at `ptr` (empty when `len` is 0, whatever `ptr`).
///
/// # Safety
/// A nonzero `len` needs `ptr` to point at `len` live counts, unchanged for
/// the returned lifetime.
unsafe fn list<'a>(ptr: *const usize, len: usize) -> &'a [usize] {
    if len == 0 {
        return &[];
    }
    // SAFETY: the caller's contract.
    unsafe { core::slice::from_raw_parts(ptr, len) }
}

struct SlotCell(UnsafeCell<Slot>);

// SAFETY: a slot is written only by its owner before the checked barrier
// episode and read by others only after it, until the completion episode;
// the barrier's release/acquire ordering separates the two.
unsafe impl Sync for SlotCell {}
// SAFETY: as above; the raw pointers are only used under that discipline.
unsafe impl Send for SlotCell {}

/// The groups one world rank belongs to, with its rank in each.
type Memberships = Vec<(Weak<Group>, usize)>;

/// What every group of one local world shares: its size, deadline, the
/// flight recorders' epoch, and which groups each world rank belongs to, so
/// that the world can mark a rank's groups when the rank's work ends
/// (failure detection never waits for a communicator to be dropped).
pub(crate) struct World {
    pub size: usize,
    pub timeout: Duration,
    /// Whether communicators keep their flight recorders.
    record: bool,
    epoch: Instant,
    epoch_wall: SystemTime,
    /// `members[w]`: the groups world rank `w` joined, with its rank in each.
    members: Mutex<Vec<Memberships>>,
}

impl World {
    pub(crate) fn new(size: usize, timeout: Duration, record: bool) -> Arc<Self> {
        // The copy threshold reads `/sys` once per process: here, not inside
        // the first large collective while its peers wait.
        crate::copy_streaming_from_bytes();
        Arc::new(World {
            size,
            timeout,
            record,
            epoch: Instant::now(),
            epoch_wall: SystemTime::now(),
            members: Mutex::new(vec![Vec::new(); size]),
        })
    }

    fn register(&self, world_rank: usize, group: &Arc<Group>, rank: usize) {
        let mut m = self.members.lock().unwrap_or_else(|e| e.into_inner());
        let list = &mut m[world_rank];
        list.retain(|(g, _)| g.strong_count() > 0);
        list.push((Arc::downgrade(group), rank));
    }

    /// World rank `w`'s work has ended (`cause`): every group it belongs to
    /// learns that it will never arrive again.
    pub(crate) fn finish(&self, world_rank: usize, cause: PeerFailureCause) {
        let groups: Vec<(Arc<Group>, usize)> = {
            let mut m = self.members.lock().unwrap_or_else(|e| e.into_inner());
            std::mem::take(&mut m[world_rank])
                .into_iter()
                .filter_map(|(g, r)| g.upgrade().map(|g| (g, r)))
                .collect()
        };
        for (g, r) in groups {
            g.sync.leave(r, cause);
        }
    }
}

/// Shared state of one group of local ranks.
pub(crate) struct Group {
    pub sync: GroupSync,
    slots: Box<[SlotCell]>,
    /// Each rank's flight recorder.
    recorders: Box<[FlightRecorder]>,
    /// Where the leader of each colour publishes a new sub-group during `split`.
    pub split_out: Box<[Mutex<Option<Arc<Group>>>]>,
    /// The world rank of each rank of the group.
    pub world_ranks: Arc<[usize]>,
    pub world: Arc<World>,
}

impl Group {
    /// A group of the world's ranks `world_ranks`, in that order.
    pub(crate) fn new(world: &Arc<World>, world_ranks: Vec<usize>) -> Arc<Self> {
        let size = world_ranks.len();
        Arc::new(Group {
            sync: GroupSync::new(size, world.timeout, WaitPolicy::for_world(world.size)),
            slots: (0..size)
                .map(|_| {
                    SlotCell(UnsafeCell::new(Slot::new(Fingerprint::new(
                        0,
                        OpKind::Init,
                        None,
                        0,
                    ))))
                })
                .collect(),
            recorders: (0..size)
                .map(|_| FlightRecorder::new(world.epoch, world.epoch_wall, world.record))
                .collect(),
            split_out: (0..size).map(|_| Mutex::new(None)).collect(),
            world_ranks: world_ranks.into(),
            world: world.clone(),
        })
    }

    /// Record that rank `rank` of this group is held by a communicator of
    /// world rank `world_ranks[rank]`.
    pub(crate) fn register(self: &Arc<Self>, rank: usize) {
        self.world.register(self.world_ranks[rank], self, rank);
    }

    pub(crate) fn size(&self) -> usize {
        self.sync.size
    }

    pub(crate) fn recorder(&self, rank: usize) -> &FlightRecorder {
        &self.recorders[rank]
    }

    /// Every rank's recent calls.
    pub(crate) fn histories(&self) -> Vec<RankHistory> {
        self.recorders
            .iter()
            .enumerate()
            .map(|(r, rec)| rec.history(r, self.world_ranks[r]))
            .collect()
    }

    /// The context errors of this group carry; with the histories when `history`.
    pub(crate) fn context(&self, history: bool) -> ErrorContext {
        let histories = if history {
            self.histories()
        } else {
            Vec::new()
        };
        ErrorContext::new(self.world_ranks.to_vec(), histories)
    }

    /// Publish this rank's slot. Only the owner calls this, outside a call's
    /// barrier window.
    pub(crate) fn publish(&self, rank: usize, slot: Slot) {
        // SAFETY: see `SlotCell`: only the owner writes, and no peer reads
        // before the next checked episode.
        unsafe { *self.slots[rank].0.get() = slot }
    }

    /// Copy every rank's slot, after the checked episode.
    pub(crate) fn snapshot(&self) -> Vec<Slot> {
        // SAFETY: see `SlotCell`: every owner has published and waits for
        // the completion episode before writing again.
        self.slots.iter().map(|s| unsafe { *s.0.get() }).collect()
    }
}
