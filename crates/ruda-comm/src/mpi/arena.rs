//! Shared buffers: memory of a rank's *arena*, a part of its communicator's
//! shared-memory segment that every rank of the host has mapped
//! ([`super::MpiWorldBuilder::shared_buffers`]).
//!
//! A collective of 64 KiB or more whose buffers are all shared buffers
//! needs no copy through the segment's slots: an all-reduce works on its
//! peers' buffers in place, as the thread transport does
//! ([`super::shared`]), each rank reducing its share of every buffer and
//! writing the result into all of them between two barriers; a broadcast
//! of 256 KiB or more writes the root's pieces into every peer, as threads
//! do; other collectives read peers' buffers through the mapping
//! ([`super::direct`]). Allocation is local (no collective): each rank owns its
//! arena and hands out first-fit ranges of whole cache lines; peers learn
//! a buffer's offset in the call that uses it.

use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;
use std::sync::Mutex;

use thiserror::Error;

use crate::{DType, Element};

/// The granule of arena ranges: a cache line, so that two buffers never
/// share one and every element type is aligned.
const GRAIN: usize = 64;

/// The offset of a buffer of no bytes, which takes no range.
const EMPTY: usize = usize::MAX;

/// The bytes of each rank's arena for `requested` bytes: rounded up to
/// whole pages; `None` on overflow.
pub(crate) fn arena_bytes(requested: usize) -> Option<usize> {
    requested.checked_next_multiple_of(4096)
}

/// Why [`super::MpiCommunicator::shared_buffer`] could not hand out a buffer.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum SharedBufferError {
    /// The communicator has no arena: its world was built without
    /// [`super::MpiWorldBuilder::shared_buffers`], its arenas could not be
    /// reserved (on its host, or across hosts on another: the segment was
    /// made without them), or it moves its data through MPI (no segment:
    /// one rank, ranks on several hosts without `hierarchical`, checks off,
    /// shared memory off or unavailable).
    #[error(
        "rank {rank} has no shared-buffer arena on this communicator (see MpiWorldBuilder::shared_buffers)"
    )]
    NoArena {
        /// The rank that asked.
        rank: usize,
    },
    /// No free range of the arena is large enough.
    #[error(
        "rank {rank}'s shared-buffer arena has no free range of {requested} bytes ({len} elements of {dtype}); {free} of its {arena} bytes are free"
    )]
    Full {
        /// The rank that asked.
        rank: usize,
        /// The elements asked for.
        len: usize,
        /// Their type.
        dtype: DType,
        /// The bytes that needed (whole cache lines).
        requested: usize,
        /// The arena's free bytes, in all its ranges.
        free: usize,
        /// The arena's size.
        arena: usize,
    },
}

/// One rank's arena: its free ranges, as `(offset, bytes)` in offset order,
/// none adjacent to another.
#[derive(Debug)]
pub(crate) struct Arena {
    /// Where the arena starts in this process (4 KiB aligned).
    base: NonNull<u8>,
    /// Its bytes.
    len: usize,
    free: Mutex<Vec<(usize, usize)>>,
}

// SAFETY: `base` points at the segment's mapping, which the communicator that owns this arena keeps; the arena itself only does arithmetic on it under its lock.
unsafe impl Send for Arena {}
// SAFETY: as above.
unsafe impl Sync for Arena {}

impl Arena {
    /// The arena of `len` bytes at `base`.
    ///
    /// # Safety
    /// `base` is valid for reads and writes of `len` bytes for as long as
    /// any buffer this arena hands out lives (the arena itself only does
    /// arithmetic on it), 4 KiB aligned, and written by nobody else
    /// outside collectives that the buffers are passed to.
    pub(crate) unsafe fn new(base: NonNull<u8>, len: usize) -> Self {
        Arena {
            base,
            len,
            free: Mutex::new(if len > 0 { vec![(0, len)] } else { vec![] }),
        }
    }

    /// The bytes a range for `bytes` takes: whole lines (more than any
    /// arena has when that overflows). [`Arena::buffer`] never asks for 0.
    fn span(bytes: usize) -> usize {
        bytes.checked_next_multiple_of(GRAIN).unwrap_or(usize::MAX)
    }

    /// The first free range of [`Arena::span`]`(bytes)`: its offset. `Err`
    /// holds the bytes needed and the bytes free.
    fn take(&self, bytes: usize) -> Result<usize, (usize, usize)> {
        let need = Self::span(bytes);
        let mut free = self.free.lock().unwrap_or_else(|e| e.into_inner());
        let Some(i) = free.iter().position(|&(_, n)| n >= need) else {
            return Err((need, free.iter().map(|&(_, n)| n).sum()));
        };
        let (off, n) = free[i];
        if n == need {
            free.remove(i);
        } else {
            free[i] = (off + need, n - need);
        }
        Ok(off)
    }

    /// Give back the range of `bytes` (as asked of [`Arena::take`]) at `off`.
    fn give(&self, off: usize, bytes: usize) {
        let need = Self::span(bytes);
        let mut free = self.free.lock().unwrap_or_else(|e| e.into_inner());
        let i = free.partition_point(|&(o, _)| o < off);
        debug_assert!(i == 0 || free[i - 1].0 + free[i - 1].1 <= off, "overlap");
        debug_assert!(i == free.len() || off + need <= free[i].0, "overlap");
        free.insert(i, (off, need));
        // Merge with the next range, then with the previous one.
        if i + 1 < free.len() && free[i].0 + free[i].1 == free[i + 1].0 {
            free[i].1 += free[i + 1].1;
            free.remove(i + 1);
        }
        if i > 0 && free[i - 1].0 + free[i - 1].1 == free[i].0 {
            free[i - 1].1 += free[i].1;
            free.remove(i);
        }
    }

    /// The bytes free, in all ranges.
    #[cfg(test)]
    fn free_bytes(&self) -> usize {
        let free = self.free.lock().unwrap_or_else(|e| e.into_inner());
        free.iter().map(|&(_, n)| n).sum()
    }

    /// A zeroed buffer of `len` elements of `T` in this arena, for `rank`.
    pub(crate) fn buffer<T: Element>(
        &self,
        len: usize,
        rank: usize,
    ) -> Result<SharedBuffer<'_, T>, SharedBufferError> {
        let full = |(requested, free)| SharedBufferError::Full {
            rank,
            len,
            dtype: T::DTYPE,
            requested,
            free,
            arena: self.len,
        };
        // An overflowing length asks for more than any arena has.
        let bytes = len.saturating_mul(size_of::<T>());
        if bytes == 0 {
            // No memory: no range to take or give back (and never a shared buffer to a call).
            return Ok(SharedBuffer {
                ptr: NonNull::dangling(),
                len,
                off: EMPTY,
                bytes: 0,
                arena: self,
                _own: PhantomData,
            });
        }
        let off = self.take(bytes).map_err(full)?;
        // SAFETY: `take` returned a range of at least `bytes` bytes at `off` inside the arena's `len` bytes from `base`.
        let at = unsafe { self.base.as_ptr().add(off) };
        // SAFETY: the range is this buffer's alone (taken above) and lies in the live mapping (as above).
        unsafe { at.write_bytes(0, bytes) };
        Ok(SharedBuffer {
            // The arena is 4 KiB aligned and `off` a multiple of 64, so `at` is aligned for any element type.
            ptr: NonNull::new(at.cast::<T>()).expect("inside a mapping"),
            len,
            off,
            bytes,
            arena: self,
            _own: PhantomData,
        })
    }
}

/// A buffer of `len` elements of `T` in this rank's part of its
/// communicator's shared memory, made by
/// [`super::MpiCommunicator::shared_buffer`]; it derefs to `[T]` and is
/// used wherever a collective takes a slice.
///
/// When every rank of a communicator on one host passes a shared buffer to
/// an all-reduce of 64 KiB or more, no byte is copied through the
/// segment's slots: each rank reduces its share of every rank's buffer in
/// place and writes the result into all of them, as ranks of a
/// [`crate::LocalWorld`] do, with the same bits. A broadcast of 256 KiB or
/// more is shared out likewise: rank `q` copies piece `q` of the root's
/// buffer into every other rank's. All-gathers, all-to-all(-v)s, smaller
/// broadcasts and reduce-scatters of 64 KiB or more read peers' shared
/// buffers through the mapping (`memcpy`), where ordinary memory is read
/// with cross-memory attach or through the slots. A call where some
/// rank's buffer is ordinary memory, or a sub-slice that does not start on
/// a cache line, or an empty buffer (which takes no room in the arena),
/// runs as on ordinary memory.
///
/// Peers write into it only inside a collective this rank passes it to,
/// between two barriers. A rank whose second barrier does not pass (a
/// peer died or stalled midway) could then not know that no peer still
/// writes, so it ends the job as a data phase past its deadline does
/// (exit code 75, naming the call and the missing ranks); worlds built
/// with [`super::MpiWorldBuilder::staged`] never take this path and keep
/// their `Timeout`.
///
/// Dropping it gives its range back to the arena. It borrows its
/// communicator, which it cannot outlive.
///
/// # Example
/// ```no_run
/// use ruda_comm::{Communicator, MpiWorld, ReduceOp};
/// let mpi = MpiWorld::builder().shared_buffers(64 << 20).init().expect("MPI starts");
/// let world = mpi.world().unwrap();
/// let mut grads = world.shared_buffer::<f32>(1 << 20).expect("the arena has room");
/// grads.fill(world.rank() as f32);
/// world.all_reduce(&mut grads, ReduceOp::Sum).unwrap();
/// ```
pub struct SharedBuffer<'c, T: Element> {
    ptr: NonNull<T>,
    len: usize,
    /// Its range of the arena: offset and bytes asked for.
    off: usize,
    bytes: usize,
    arena: &'c Arena,
    _own: PhantomData<T>,
}

// SAFETY: the buffer owns its elements as a `Vec<T>` would (no other handle reaches them outside a collective this rank is in); its arena is `Sync`.
unsafe impl<T: Element> Send for SharedBuffer<'_, T> {}
// SAFETY: as above; shared references only read.
unsafe impl<T: Element> Sync for SharedBuffer<'_, T> {}

impl<T: Element> SharedBuffer<'_, T> {
    /// Its offset in this rank's arena, in bytes.
    #[cfg(test)]
    pub(crate) fn offset(&self) -> usize {
        self.off
    }
}

impl<T: Element> Deref for SharedBuffer<'_, T> {
    type Target = [T];

    fn deref(&self) -> &[T] {
        // SAFETY: `len` initialised elements (zeroed when made, `T: Pod`), aligned, inside the mapping the borrowed communicator keeps (or none at a dangling, aligned pointer); written by peers only inside a collective that holds `&mut self`.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl<T: Element> DerefMut for SharedBuffer<'_, T> {
    fn deref_mut(&mut self) -> &mut [T] {
        // SAFETY: as in `deref`, and `&mut self` makes the view exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl<T: Element> Drop for SharedBuffer<'_, T> {
    fn drop(&mut self) {
        if self.off != EMPTY {
            self.arena.give(self.off, self.bytes);
        }
    }
}

impl<T: Element + std::fmt::Debug> std::fmt::Debug for SharedBuffer<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // An empty buffer takes no range: no offset to show.
        let offset = (self.off != EMPTY).then_some(self.off);
        f.debug_struct("SharedBuffer")
            .field("offset", &offset)
            .field("len", &self.len)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Page-aligned memory for a test arena, freed when dropped.
    struct Room(NonNull<u8>, std::alloc::Layout);

    impl Drop for Room {
        fn drop(&mut self) {
            // SAFETY: allocated in `arena` with this layout, freed once.
            unsafe { std::alloc::dealloc(self.0.as_ptr(), self.1) };
        }
    }

    fn arena(len: usize) -> (Room, Arena) {
        let layout = std::alloc::Layout::from_size_align(len.max(1), 4096).unwrap();
        // SAFETY: a layout of nonzero size.
        let base = NonNull::new(unsafe { std::alloc::alloc_zeroed(layout) }).expect("memory");
        // SAFETY: `len` bytes (at least) at `base`, 4 KiB aligned; each test keeps the `Room` bound beside the arena and drops the arena's buffers before either.
        let a = unsafe { Arena::new(base, len) };
        (Room(base, layout), a)
    }

    #[test]
    fn pages_round_up_and_overflow_is_none() {
        assert_eq!(arena_bytes(0), Some(0));
        assert_eq!(arena_bytes(1), Some(4096));
        assert_eq!(arena_bytes(8192), Some(8192));
        assert_eq!(arena_bytes(usize::MAX), None);
    }

    #[test]
    fn buffers_are_zeroed_lined_disjoint_and_given_back() {
        let (_room, a) = arena(4096);
        let mut x = a.buffer::<f32>(3, 0).unwrap();
        x.fill(7.0);
        let y = a.buffer::<f64>(5, 0).unwrap();
        assert!(y.iter().all(|&v| v == 0.0));
        assert_eq!(x.offset(), 0);
        assert_eq!(y.offset(), 64, "whole lines: 12 bytes take one");
        assert_eq!(a.free_bytes(), 4096 - 128);
        drop(x);
        // The freed line is reused, and zeroed again.
        let z = a.buffer::<f32>(16, 0).unwrap();
        assert_eq!(z.offset(), 0);
        assert!(z.iter().all(|&v| v == 0.0));
        drop((y, z));
        assert_eq!(a.free_bytes(), 4096);
        // Merged back into one range: the whole arena fits again.
        assert_eq!(a.buffer::<u8>(4096, 0).unwrap().offset(), 0);
    }

    #[test]
    fn a_full_arena_says_what_was_asked_and_what_is_free() {
        let (_room, a) = arena(4096);
        let _x = a.buffer::<u8>(4000, 2).unwrap();
        match a.buffer::<f32>(100, 2) {
            Err(SharedBufferError::Full {
                rank: 2,
                len: 100,
                dtype: DType::F32,
                requested: 448,
                free: 64,
                arena: 4096,
            }) => {}
            other => panic!("{other:?}"),
        }
        let overflow = a.buffer::<f64>(usize::MAX / 4, 2).unwrap_err();
        assert!(matches!(
            overflow,
            SharedBufferError::Full {
                requested: usize::MAX,
                ..
            }
        ));
        let (_none, empty) = arena(0);
        assert!(matches!(
            empty.buffer::<f32>(1, 0),
            Err(SharedBufferError::Full { arena: 0, .. })
        ));
        assert!(
            empty.buffer::<f32>(0, 0).is_ok(),
            "an empty buffer needs no room"
        );
    }

    #[test]
    fn empty_buffers_take_no_room_and_ranges_merge_both_ways() {
        let (_room, a) = arena(4096);
        let empty = a.buffer::<f64>(0, 0).unwrap();
        assert!(empty.is_empty() && empty.offset() == EMPTY);
        assert_eq!(a.free_bytes(), 4096);
        // `Debug` shows no offset for it, and a real one otherwise.
        assert!(
            format!("{empty:?}").contains("offset: None, len: 0"),
            "{empty:?}"
        );
        let one = a.buffer::<f64>(1, 0).unwrap();
        assert!(
            format!("{one:?}").contains("offset: Some(0), len: 1"),
            "{one:?}"
        );
        drop((empty, one));
        assert_eq!(a.free_bytes(), 4096);
        let bufs: Vec<_> = (0..4).map(|_| a.buffer::<f32>(1, 0).unwrap()).collect();
        assert_eq!(
            bufs.iter().map(SharedBuffer::offset).collect::<Vec<_>>(),
            vec![0, 64, 128, 192]
        );
        let mut bufs = bufs.into_iter();
        let (b0, b1, b2, b3) = (
            bufs.next().unwrap(),
            bufs.next().unwrap(),
            bufs.next().unwrap(),
            bufs.next().unwrap(),
        );
        drop(b0);
        drop(b2);
        drop(b1); // merges with both neighbours
        assert_eq!(
            a.free.lock().unwrap().as_slice(),
            &[(0, 192), (256, 4096 - 256)]
        );
        drop(b3);
        assert_eq!(a.free.lock().unwrap().as_slice(), &[(0, 4096)]);
    }
}
