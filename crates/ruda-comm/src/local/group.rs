//! One local group: its synchronisation and the slots through which ranks
//! publish a call's arguments to each other.

use std::cell::UnsafeCell;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::sync::{GroupSync, WaitPolicy};
use crate::{Fingerprint, OpKind};

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

    /// The first count list.
    ///
    /// # Safety
    /// Only between the two barrier episodes of the call that published it.
    pub(crate) unsafe fn counts(&self) -> &[usize] {
        if self.counts_len == 0 {
            return &[];
        }
        // SAFETY: the owner keeps the list alive until the completion episode.
        unsafe { core::slice::from_raw_parts(self.counts, self.counts_len) }
    }

    /// The second count list (receive counts of `all_to_all_v`).
    ///
    /// # Safety
    /// As [`Slot::counts`].
    pub(crate) unsafe fn counts2(&self) -> &[usize] {
        if self.counts2_len == 0 {
            return &[];
        }
        // SAFETY: as above.
        unsafe { core::slice::from_raw_parts(self.counts2, self.counts2_len) }
    }
}

struct SlotCell(UnsafeCell<Slot>);

// SAFETY: a slot is written only by its owner before the checked barrier
// episode and read by others only after it, until the completion episode;
// the barrier's release/acquire ordering separates the two.
unsafe impl Sync for SlotCell {}
// SAFETY: as above; the raw pointers are only used under that discipline.
unsafe impl Send for SlotCell {}

/// Shared state of one group of local ranks.
pub(crate) struct Group {
    pub sync: GroupSync,
    slots: Box<[SlotCell]>,
    /// Where the leader of each colour publishes a new sub-group during `split`.
    pub split_out: Box<[Mutex<Option<Arc<Group>>>]>,
    pub world_size: usize,
}

impl Group {
    pub(crate) fn new(size: usize, timeout: Duration, world_size: usize) -> Arc<Self> {
        Arc::new(Group {
            sync: GroupSync::new(size, timeout, WaitPolicy::for_world(world_size)),
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
            split_out: (0..size).map(|_| Mutex::new(None)).collect(),
            world_size,
        })
    }

    pub(crate) fn size(&self) -> usize {
        self.sync.size
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
