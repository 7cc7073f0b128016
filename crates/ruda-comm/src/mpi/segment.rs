//! A shared-memory segment for the ranks of one communicator on one host
//! (or for one host's ranks of a communicator across hosts, see
//! [`super::placement`]): a barrier with a verdict, and two slot
//! buffers per rank that the collectives of [`super::shared`] move data
//! through.
//!
//! The segment is a POSIX shared-memory object that rank 0 creates and
//! every rank maps; its name is unlinked as soon as every rank has mapped
//! it, so the memory goes with the last process that unmaps it (a rank
//! dropping its communicator, or any process ending, crashed or not). No
//! MPI window is used: `MPI_Win_free` is collective, and a communicator
//! dropped on one rank while its peers still work elsewhere must not wait
//! for them.
//!
//! # Layout
//! Header lines of a whole number of 128-byte cache-line pairs (against
//! the adjacent-line prefetcher): line 0 holds the *verdict*, line `1 + q`
//! rank `q`'s *arrival* count and the bitmap of missing ranks it publishes
//! when it fails an episode (one bit per rank). Then, from the next 4 KiB boundary, two record areas
//! per rank (a call record and the small payloads sent with it, in
//! alternate calls: [`super::agree::agree_shared`]), rank `q`'s area `b` at
//! `(2 q + b) × record_len`; then, from the next 4 KiB boundary, two slot
//! buffers per rank, rank `q`'s buffer `b` at `(2 q + b) × slot`. A
//! single-copy call ([`super::direct`]) uses only the first two words of
//! its round's slot: the buffer's address and the refusal flag.
//!
//! # The barrier
//! A rank arrives at episode `e` by storing `e` in its arrival word, then
//! waits for the verdict on `e`, which is decided exactly once, by a
//! compare-and-swap from `e − 1`: to `e` (passed) by a rank that sees every
//! arrival, or to `FAILED | rank | e` by a rank whose deadline passed
//! first, which has published the ranks it found missing. So either every
//! rank passes an episode or none does, every rank names the same missing
//! ranks (the decider's), and a rank that comes after a failure fails
//! too. A failed segment stays failed; a failure of a later episode tells
//! a rank still waiting on `e` that `e` passed.

use std::cell::Cell;
use std::ffi::CString;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Bytes of one slot buffer of a segment of 2 ranks by default (each rank
/// has two, used in alternate rounds); see [`default_slot`]. The tests'
/// slot size.
pub(crate) const SLOT: usize = 256 << 10;

/// Bytes of all ranks' slot buffers together, at most, by default.
const SLOTS_TOTAL: usize = 16 << 20;

/// The default slot size for `size` ranks on a host of `cpus` online
/// CPUs: 1 MiB up to 8 ranks, then less so that the slots take at most
/// 16 MiB of `/dev/shm`, and at least 256 KiB; 256 KiB when the ranks
/// outnumber the CPUs. On 2 processes of the 2-core development machine
/// 1 MiB slots against 256 KiB ones (three runs each) took the all-reduce
/// from 113 to 48 µs at 1 MiB and from 392 to 200 µs at 4 MiB, and a
/// broadcast at 16 MiB from 2.0 to 1.3 ms (fewer rounds, each with its
/// barriers); on 4 processes sharing the 2 cores they were slower (a
/// 1 MiB all-reduce 490–980 against 185–225 µs): a round waits for every
/// rank, and larger rounds overlap less while ranks take turns.
pub(crate) fn default_slot(size: usize, cpus: usize) -> usize {
    if size > cpus {
        return SLOT;
    }
    (SLOTS_TOTAL / 2 / size.max(1)).clamp(SLOT, 4 * SLOT)
}

/// The host's online CPUs (not this process's affinity: under `mpirun
/// --bind-to core` each rank sees one CPU, yet its peers have cores of
/// their own); at least 1.
pub(crate) fn online_cpus() -> usize {
    // SAFETY: sysconf only reads the system's configuration.
    let online = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    usize::try_from(online).unwrap_or(1).max(1)
}

/// The slot size for a request on `size` ranks: a whole number of pages,
/// at least one and at least a cache line per rank (the blocks of an
/// all-to-all), at most 1 GiB.
pub(crate) fn slot_bytes(requested: usize, size: usize) -> usize {
    requested
        .max(size.saturating_mul(64))
        .clamp(4096, 1 << 30)
        .next_multiple_of(4096)
}

/// Bytes of a rank's scratch memory for single copies at most (a slot's
/// size below it): peers' blocks read before a reduction, in chunks.
const SCRATCH_MAX: usize = 4 << 20;

/// Header lines are whole multiples of this (two 64-byte cache lines).
const LINE: usize = 128;

/// The verdict's failure bit; below it, the deciding rank from bit
/// [`DECIDER`] and the episode under it.
const FAILED: u64 = 1 << 63;

/// The first bit of the deciding rank in a failed verdict (episodes below
/// it: 2^47, more than a million barriers a second for four years).
const DECIDER: u32 = 47;

/// Ranks a segment can have (the deciding rank's bits in a verdict).
const MAX_RANKS: usize = 1 << (63 - DECIDER);

/// The bytes of one header line for `size` ranks: an arrival word and a
/// bitmap of `size` bits.
fn line_len(size: usize) -> Option<usize> {
    size.div_ceil(64)
        .checked_add(1)?
        .checked_mul(8)
        .map(|b| b.next_multiple_of(LINE))
}

/// Why a barrier did not pass.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Stop {
    /// The ranks that had not arrived when the rank that failed the
    /// episode gave up, or the rank that abandoned it
    /// ([`Segment::abandon`]): the same on every rank (a rank that came
    /// late finds itself here). Empty only if this rank's episodes were
    /// ahead of the segment's, which the protocol rules out.
    pub missing: Vec<usize>,
}

/// How a segment's collectives may read their peers' buffers directly
/// ([`super::direct`]): agreed by every rank when the segment is made.
#[derive(Clone, Debug)]
pub(crate) struct SingleCopy {
    /// Each rank's process id, in rank order.
    pub pids: Box<[libc::pid_t]>,
    /// Calls that move at least this many bytes (the same on every rank)
    /// and fewer than `below_bytes` read directly; others go through the
    /// slots.
    pub from_bytes: usize,
    /// See `from_bytes`.
    pub below_bytes: usize,
}

/// How a waiting rank spends its time.
#[derive(Clone, Copy, Debug)]
struct Patience {
    /// Spin this long before yielding (zero when ranks outnumber cores).
    spin: Duration,
    /// Yield this long, then sleep between looks.
    yield_for: Duration,
}

/// How long a rank that has waited `waited` at a barrier sleeps before it
/// looks again: 50 µs at first, then a hundredth of the time waited so
/// far, at most 1 ms. A long wait (a peer computing, or rank 0 timing
/// alone while the others wait) then costs about a thousand wake-ups a
/// second rather than twenty thousand, and the wake-up comes at most 1 %
/// of the wait (and 1 ms) after the last arrival.
fn nap(waited: Duration) -> Duration {
    (waited / 100).clamp(Duration::from_micros(50), Duration::from_millis(1))
}

/// One rank's mapping of a communicator's segment.
pub(crate) struct Segment {
    base: NonNull<u8>,
    len: usize,
    size: usize,
    rank: usize,
    /// Bytes of each slot buffer.
    slot: usize,
    /// Bytes of a header line.
    line: usize,
    /// Offset of the record areas, bytes of each, and offset of the slots.
    records: usize,
    record_len: usize,
    slots: usize,
    /// Offset of the arenas and bytes of each rank's
    /// ([`super::arena`]; 0: none).
    arenas: usize,
    arena: usize,
    /// Barrier episodes this rank has arrived at.
    episode: Cell<u64>,
    /// Rounds run (their parity picks the slot buffer).
    round: u64,
    /// Record exchanges run (their parity picks the record area).
    calls: u64,
    patience: Patience,
    /// Set when every rank can read its peers' memory (`None`: slots only).
    single_copy: Option<SingleCopy>,
    /// This rank's private memory for peers' blocks read directly before a
    /// reduction (a slot's size, at most [`SCRATCH_MAX`], made with
    /// `single_copy`): process memory, not the segment's.
    scratch: Vec<u64>,
    /// Calls this rank ran writing peers' shared buffers in place (a test
    /// tells that path by it).
    #[cfg(test)]
    pub(crate) in_place: u64,
}

// SAFETY: the mapping is plain shared memory, valid wherever this value
// goes; its words are atomics and its slots are read and written only
// inside a collective, under the barrier protocol, by the one thread that
// holds the communicator (calls on one communicator never overlap). Its
// arenas are written outside collectives only by their owners, through
// `SharedBuffer`s, which peers touch only inside a collective they are
// passed to.
unsafe impl Send for Segment {}

/// Why a segment could not be made or mapped.
#[derive(Debug)]
pub(crate) struct SegmentError(pub String);

/// The offsets of a segment's parts for `size` ranks with slots of
/// `slot` bytes and arenas of `arena` bytes (a multiple of 4096): the
/// record areas, the slots, the arenas, and the whole length; `None` on
/// overflow.
fn layout(size: usize, slot: usize, arena: usize) -> Option<(usize, usize, usize, usize)> {
    let records = size
        .checked_add(1)?
        .checked_mul(line_len(size)?)?
        .checked_next_multiple_of(4096)?;
    let areas = size.checked_mul(2)?.checked_mul(record_len(size)?)?;
    let slots = records.checked_add(areas)?.checked_next_multiple_of(4096)?;
    let arenas = slots.checked_add(size.checked_mul(2)?.checked_mul(slot)?)?;
    let len = arenas.checked_add(size.checked_mul(arena)?)?;
    Some((records, slots, arenas, len))
}

/// The bytes a segment for `size` ranks with slots of `slot` bytes takes,
/// or `None` on overflow.
#[cfg(test)]
pub(crate) fn segment_len(size: usize, slot: usize) -> Option<usize> {
    layout(size, slot, 0).map(|(_, _, _, len)| len)
}

/// The bytes of one record area in a group of `size`: the call record
/// (`wire::words`), a word saying how many payloads follow, and, in a group
/// small enough to send data with its records, one payload entry per peer
/// (its length word, the call's sequence number and room for
/// `INLINE_BYTES`), in whole cache lines.
pub(crate) fn record_len(size: usize) -> Option<usize> {
    let entries = if size <= super::inline::INLINE_RANKS {
        size.checked_mul(entry_words())?
    } else {
        0
    };
    crate::validate::wire::words(size)
        .checked_add(1)?
        .checked_add(entries)?
        .checked_mul(8)
        .map(|b| b.next_multiple_of(LINE))
}

/// The words of one payload entry of a record area.
pub(crate) fn entry_words() -> usize {
    2 + super::inline::INLINE_BYTES.div_ceil(8)
}

/// A name no other segment on this host has: the creating process's id,
/// a per-process count and the clock.
pub(crate) fn fresh_name() -> String {
    static COUNT: AtomicU64 = AtomicU64::new(0);
    let n = COUNT.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    format!("/ruda-{}-{n}-{nanos}", std::process::id())
}

fn os_error(what: &str, name: &str) -> SegmentError {
    SegmentError(format!(
        "{what} {name}: {}",
        std::io::Error::last_os_error()
    ))
}

/// Remove the segment's name (the memory stays while a rank maps it).
pub(crate) fn unlink(name: &str) {
    if let Ok(c) = CString::new(name) {
        // SAFETY: a NUL-terminated name; shm_unlink only reads it.
        unsafe { libc::shm_unlink(c.as_ptr()) };
    }
}

impl Segment {
    /// Create (`create`, rank 0: the name must not exist) or open the
    /// segment `name` for `size` ranks with slots of `slot` bytes (from
    /// [`slot_bytes`]) and map it for `rank`, without arenas.
    pub(crate) fn map(
        name: &str,
        create: bool,
        size: usize,
        slot: usize,
        rank: usize,
    ) -> Result<Segment, SegmentError> {
        Self::map_with_arena(name, create, size, slot, 0, rank)
    }

    /// [`Segment::map`] with an arena of `arena` bytes (a multiple of
    /// 4096, from [`super::arena::arena_bytes`]) per rank after the slots.
    pub(crate) fn map_with_arena(
        name: &str,
        create: bool,
        size: usize,
        slot: usize,
        arena: usize,
        rank: usize,
    ) -> Result<Segment, SegmentError> {
        debug_assert_eq!(slot, slot_bytes(slot, size));
        debug_assert!(arena.is_multiple_of(4096));
        let overflow = || SegmentError(format!("a segment for {size} ranks overflows"));
        if size == 0 || size > MAX_RANKS {
            return Err(overflow());
        }
        let (records, slots, arenas, len) = layout(size, slot, arena).ok_or_else(overflow)?;
        let record_len = record_len(size).ok_or_else(overflow)?;
        let line = line_len(size).ok_or_else(overflow)?;
        let c = CString::new(name).map_err(|_| SegmentError(format!("bad name {name:?}")))?;
        let flags = if create {
            libc::O_CREAT | libc::O_EXCL | libc::O_RDWR
        } else {
            libc::O_RDWR
        };
        // SAFETY: a NUL-terminated name; the call only reads it.
        let fd = unsafe { libc::shm_open(c.as_ptr(), flags, 0o600) };
        if fd < 0 {
            return Err(os_error("shm_open", name));
        }
        let close = |e: SegmentError| {
            // SAFETY: `fd` is ours and closed once.
            unsafe { libc::close(fd) };
            if create {
                unlink(name);
            }
            e
        };
        let off_len = libc::off_t::try_from(len)
            .map_err(|_| close(SegmentError(format!("{len} bytes do not fit off_t"))))?;
        // SAFETY: `fd` is an open shared-memory object; a new one is zeroed
        // when it grows.
        if create && unsafe { libc::ftruncate(fd, off_len) } != 0 {
            return Err(close(os_error("ftruncate", name)));
        }
        // Reserve the pages now: on a full /dev/shm (64 MiB in a default
        // Docker container) a sized but unreserved object maps fine, and
        // the first write to a page that cannot be had kills the process
        // (SIGBUS) mid-collective.
        let rc = if create {
            // SAFETY: an open descriptor; the call only allocates its pages.
            unsafe { libc::posix_fallocate(fd, 0, off_len) }
        } else {
            0
        };
        if rc != 0 {
            let why = std::io::Error::from_raw_os_error(rc);
            return Err(close(SegmentError(format!(
                "cannot reserve {len} bytes for {name} in /dev/shm: {why}"
            ))));
        }
        if !create {
            // The creator sized it before it sent the name; refuse a shorter
            // object (a stale one under the same name) rather than fault.
            // SAFETY: `st` is written by fstat on an open descriptor.
            let mut st: libc::stat = unsafe { std::mem::zeroed() };
            // SAFETY: as above.
            if unsafe { libc::fstat(fd, &mut st) } != 0 {
                return Err(close(os_error("fstat", name)));
            }
            if st.st_size != off_len {
                return Err(close(SegmentError(format!(
                    "{name} has {} bytes, not {len}",
                    st.st_size
                ))));
            }
        }
        // SAFETY: a fresh shared read-write mapping of `len` bytes of an
        // object of `len` bytes; the kernel picks the address.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(close(os_error("mmap", name)));
        }
        // SAFETY: the mapping keeps the object; the descriptor is no longer
        // needed.
        unsafe { libc::close(fd) };
        let cores = online_cpus();
        // With a core per rank, spin briefly, then yield; with more ranks
        // than cores, the rank waited for needs a core now: sleep soon (a
        // yield alone left 9 ranks on 2 cores 5x slower).
        let patience = if size <= cores {
            Patience {
                spin: Duration::from_micros(20),
                yield_for: Duration::from_millis(2),
            }
        } else {
            Patience {
                spin: Duration::ZERO,
                yield_for: Duration::from_micros(50),
            }
        };
        Ok(Segment {
            base: NonNull::new(p.cast()).expect("mmap returned a non-null address"),
            len,
            size,
            rank,
            slot,
            line,
            records,
            record_len,
            slots,
            arenas,
            arena,
            episode: Cell::new(0),
            #[cfg(test)]
            in_place: 0,
            round: 0,
            calls: 0,
            patience,
            single_copy: None,
            scratch: Vec::new(),
        })
    }

    /// The number of ranks.
    pub(crate) fn size(&self) -> usize {
        self.size
    }

    /// This rank.
    pub(crate) fn rank(&self) -> usize {
        self.rank
    }

    /// Bytes of each slot buffer (a multiple of 4096).
    pub(crate) fn slot_len(&self) -> usize {
        self.slot
    }

    /// Word `word` of header line `line`.
    fn word(&self, line: usize, word: usize) -> &AtomicU64 {
        assert!(line <= self.size && word < self.line / 8, "header word");
        // SAFETY: valid: line <= size, word < line/8 (asserted) lie in the
        // header of the live mapping, 8-byte aligned; unaliased: only ever
        // accessed atomically, through shared references, in every process.
        unsafe {
            &*self
                .base
                .as_ptr()
                .add(line * self.line + word * 8)
                .cast::<AtomicU64>()
        }
    }

    fn verdict(&self) -> &AtomicU64 {
        self.word(0, 0)
    }

    fn arrival(&self, q: usize) -> &AtomicU64 {
        self.word(1 + q, 0)
    }

    /// Word `i` of the bitmap of missing ranks that rank `q` publishes.
    fn missing_word(&self, q: usize, i: usize) -> &AtomicU64 {
        self.word(1 + q, 1 + i)
    }

    /// The slot buffer `b` of rank `q`: [`Segment::slot_len`] bytes, 4 KiB
    /// aligned.
    pub(crate) fn slot(&self, q: usize, b: usize) -> *mut u8 {
        assert!(q < self.size && b < 2, "slot {b} of rank {q}");
        let off = self.slots + (2 * q + b) * self.slot;
        debug_assert!(off + self.slot <= self.len);
        // SAFETY: `off + slot <= len` (see `layout`, which checked this
        // arithmetic for `size` and `slot`).
        unsafe { self.base.as_ptr().add(off) }
    }

    /// Bytes of each rank's arena (0: none; a multiple of 4096).
    pub(crate) fn arena_len(&self) -> usize {
        self.arena
    }

    /// The arena of rank `q`: [`Segment::arena_len`] bytes, 4 KiB aligned.
    pub(crate) fn arena(&self, q: usize) -> *mut u8 {
        assert!(q < self.size, "arena of rank {q}");
        let off = self.arenas + q * self.arena;
        debug_assert!(off + self.arena <= self.len);
        // SAFETY: `off + arena <= len` (see `layout`, which checked this arithmetic for `size` and `arena`).
        unsafe { self.base.as_ptr().add(off) }
    }

    /// Where `bytes` bytes at `ptr` lie in this rank's arena: their offset,
    /// or `None` when any of them lies outside it or they do not start on a
    /// cache line (a sub-slice of a shared buffer: its shares would
    /// straddle lines, so it is used as ordinary memory).
    pub(crate) fn arena_offset(&self, ptr: *const u8, bytes: usize) -> Option<usize> {
        let off = (ptr as usize).checked_sub(self.arena(self.rank) as usize)?;
        (off.checked_add(bytes)? <= self.arena && self.arena > 0 && off.is_multiple_of(64))
            .then_some(off)
    }

    /// The record area `b` of rank `q`: [`Segment::record_len`] bytes,
    /// cache-line aligned.
    pub(crate) fn record(&self, q: usize, b: usize) -> *mut u64 {
        assert!(q < self.size && b < 2, "record area {b} of rank {q}");
        let off = self.records + (2 * q + b) * self.record_len;
        debug_assert!(off + self.record_len <= self.slots);
        // SAFETY: `off + record_len <= slots <= len` (see `layout`).
        unsafe { self.base.as_ptr().add(off).cast() }
    }

    /// Bytes of each record area (a multiple of 128).
    pub(crate) fn record_len(&self) -> usize {
        self.record_len
    }

    /// Start a record exchange: the record area (0 or 1) it uses, by the
    /// same rule as [`Segment::next_round`]: a rank writes its area of call
    /// `c` only after passing the record barrier of call `c − 1`, which
    /// every rank enters only after its last read of the areas of call
    /// `c − 2` (a call's payloads are read before its data rounds or its
    /// return).
    pub(crate) fn next_call(&mut self) -> usize {
        let b = (self.calls % 2) as usize;
        self.calls += 1;
        b
    }

    /// Rounds run so far (a test tells a path by them).
    #[cfg(test)]
    pub(crate) fn rounds(&self) -> u64 {
        self.round
    }

    /// Start a round: the slot buffer (0 or 1) it uses. A rank writes its
    /// slot of round `r` only after passing the barriers of round `r − 1`,
    /// which every rank enters only after its last access to the buffers of
    /// round `r − 2`, the same parity.
    pub(crate) fn next_round(&mut self) -> usize {
        let b = (self.round % 2) as usize;
        self.round += 1;
        b
    }

    /// Let the collectives read peers' buffers directly (every rank must set
    /// the same, agreed when the segment is made).
    pub(crate) fn set_single_copy(&mut self, single_copy: SingleCopy) {
        debug_assert_eq!(single_copy.pids.len(), self.size);
        self.single_copy = Some(single_copy);
        self.scratch = vec![0; self.slot.min(SCRATCH_MAX) / 8];
    }

    /// Turn single copies off for good (every rank does, at the same
    /// call: [`super::direct`]'s refusals), and free the scratch memory.
    pub(crate) fn clear_single_copy(&mut self) {
        self.single_copy = None;
        self.scratch = Vec::new();
    }

    /// Take this rank's scratch memory for single copies (a slot's size,
    /// at most 4 MiB; empty without them) for a call; [`Segment::put_scratch`] gives it back.
    pub(crate) fn take_scratch(&mut self) -> Vec<u64> {
        std::mem::take(&mut self.scratch)
    }

    /// Give back what [`Segment::take_scratch`] took.
    pub(crate) fn put_scratch(&mut self, scratch: Vec<u64>) {
        self.scratch = scratch;
    }

    /// Whether a call of `bytes` (the same on every rank) tries to read
    /// its peers' buffers directly ([`super::direct`]) rather than through
    /// the slots: inside the cross-memory window ([`Segment::single_copy`]),
    /// or, in a segment with arenas, from
    /// [`super::direct::SINGLE_COPY_FROM_BYTES`] on at any size (shared
    /// buffers are read through the mapping; a call whose buffers are not
    /// shared buffers then goes to the slots after one exchange).
    pub(crate) fn direct(&self, bytes: usize) -> bool {
        self.direct_arena(bytes) || self.single_copy(bytes)
    }

    /// Whether a call of `bytes` (the same on every rank) first sees
    /// whether its buffers are shared buffers: in a segment with arenas,
    /// from [`super::direct::SINGLE_COPY_FROM_BYTES`] on (below it, the
    /// exchange's barrier would cost more than the slots' copies save).
    pub(crate) fn direct_arena(&self, bytes: usize) -> bool {
        self.arena > 0 && self.size > 1 && bytes >= super::direct::SINGLE_COPY_FROM_BYTES
    }

    /// Whether a call of `bytes` may read its peers' buffers with
    /// cross-memory attach.
    pub(crate) fn single_copy(&self, bytes: usize) -> bool {
        self.single_copy
            .as_ref()
            .is_some_and(|s| (s.from_bytes..s.below_bytes).contains(&bytes))
    }

    /// Every rank's process id when single copies are on (whatever the
    /// size).
    pub(crate) fn pids(&self) -> Option<&[libc::pid_t]> {
        self.single_copy.as_ref().map(|s| &*s.pids)
    }

    /// Whether a barrier of this segment ever failed.
    #[cfg(test)]
    pub(crate) fn failed(&self) -> bool {
        self.verdict().load(Ordering::Acquire) & FAILED != 0
    }

    /// Arrive at the next barrier episode and wait until every rank has
    /// (every rank then passes), or until `deadline` (no rank passes).
    ///
    /// # Errors
    /// [`Stop`] when the deadline passed first, here or on a peer, or a
    /// barrier of this segment failed before.
    pub(crate) fn barrier(&self, deadline: Instant) -> Result<(), Stop> {
        let e = self.arrive();
        self.wait(e, deadline)
    }

    /// Arrive at the next episode; returns it.
    fn arrive(&self) -> u64 {
        let e = self.episode.get() + 1;
        self.episode.set(e);
        self.arrival(self.rank).store(e, Ordering::SeqCst);
        e
    }

    /// Wait for the verdict on episode `e` (see the module's
    /// documentation). Every path re-reads the verdict, and the verdict
    /// changes once every rank arrives or any deadline passes, so this
    /// returns by the deadline, or as soon as a peer decides.
    fn wait(&self, e: u64, deadline: Instant) -> Result<(), Stop> {
        let start = Instant::now();
        let mut polls = 0u32;
        loop {
            let v = self.verdict().load(Ordering::Acquire);
            if v & FAILED != 0 {
                let failed = v & ((1 << DECIDER) - 1);
                if failed > e {
                    // A later episode failed: it could only be decided once
                    // this one had passed.
                    return Ok(());
                }
                let decider = ((v & !FAILED) >> DECIDER) as usize;
                return Err(self.stop(decider));
            }
            if v >= e {
                return Ok(());
            }
            if v + 1 < e {
                // Ahead of the segment: cannot happen (the verdict is at
                // least the lowest arrival minus one), kept as a defence.
                return Err(Stop {
                    missing: Vec::new(),
                });
            }
            if (0..self.size).all(|q| self.arrival(q).load(Ordering::Acquire) >= e) {
                // Either this rank decides, or another decided first (then
                // the verdict says what).
                let _ =
                    self.verdict()
                        .compare_exchange(e - 1, e, Ordering::AcqRel, Ordering::Acquire);
                continue;
            }
            polls = polls.wrapping_add(1);
            if !polls.is_multiple_of(32) {
                std::hint::spin_loop();
                continue;
            }
            let now = Instant::now();
            if now >= deadline {
                // Publish who is missing, then try to fail the episode with
                // this rank as the decider (the release of the swap makes
                // the bitmap visible to whoever reads the verdict).
                let mut any = false;
                for i in 0..self.size.div_ceil(64) {
                    let mut bits = 0u64;
                    for q in (i * 64..self.size).take(64) {
                        if self.arrival(q).load(Ordering::Acquire) < e {
                            bits |= 1 << (q - i * 64);
                        }
                    }
                    any |= bits != 0;
                    self.missing_word(self.rank, i)
                        .store(bits, Ordering::Relaxed);
                }
                if any {
                    let failed = FAILED | ((self.rank as u64) << DECIDER) | e;
                    let _ = self.verdict().compare_exchange(
                        e - 1,
                        failed,
                        Ordering::AcqRel,
                        Ordering::Acquire,
                    );
                }
                continue;
            }
            let waited = now - start;
            if waited < self.patience.spin {
                std::hint::spin_loop();
            } else if waited < self.patience.yield_for {
                std::thread::yield_now();
            } else {
                // Never past the deadline: a rank notices it on time.
                std::thread::sleep(nap(waited).min(deadline.saturating_duration_since(now)));
            }
        }
    }

    /// Fail the next episode at once, naming this rank: for a rank that
    /// leaves a call between two barriers (an error outside the segment),
    /// so that its peers stop waiting for it now rather than at their
    /// deadline. If a peer decided the episode first, its verdict stands.
    pub(crate) fn abandon(&self) {
        let passed = self.episode.get();
        for i in 0..self.size.div_ceil(64) {
            let bits = if i == self.rank / 64 {
                1 << (self.rank % 64)
            } else {
                0
            };
            self.missing_word(self.rank, i)
                .store(bits, Ordering::Relaxed);
        }
        let failed = FAILED | ((self.rank as u64) << DECIDER) | (passed + 1);
        let _ =
            self.verdict()
                .compare_exchange(passed, failed, Ordering::AcqRel, Ordering::Acquire);
    }

    /// The ranks that `decider` found missing when it failed an episode.
    fn stop(&self, decider: usize) -> Stop {
        let decider = decider.min(self.size - 1);
        let missing = (0..self.size)
            .filter(|&q| {
                let bits = self.missing_word(decider, q / 64).load(Ordering::Relaxed);
                bits & (1 << (q % 64)) != 0
            })
            .collect();
        Stop { missing }
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        // The communicator's arena and its `SharedBuffer`s point into the mapping between calls; a segment with an arena in use is dropped only with its communicator (by `Shm::free` or the field's drop), which no `SharedBuffer` (borrowing it) outlives, and the arena itself only does arithmetic.
        // SAFETY: the mapping this value made, unmapped once; no collective (which holds `&mut self`) and no shared buffer is live (above).
        unsafe { libc::munmap(self.base.as_ptr().cast(), self.len) };
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_long_wait_sleeps_longer_but_at_most_a_hundredth_of_it_and_1_ms() {
        use super::nap;
        use std::time::Duration;
        let us = Duration::from_micros;
        assert_eq!(nap(Duration::ZERO), us(50));
        assert_eq!(nap(us(5_000)), us(50));
        assert_eq!(nap(us(50_000)), us(500));
        assert_eq!(nap(Duration::from_secs(3)), us(1_000));
        let mut last = Duration::ZERO;
        for w in (0..200).map(|i| us(i * 997)) {
            let n = nap(w);
            assert!(
                n >= last && n <= us(1_000) && (n <= w / 100 || n == us(50)),
                "{w:?}: {n:?}"
            );
            last = n;
        }
    }

    use super::*;

    /// Two ranks of one process, each with its own mapping of one segment
    /// (as two processes would have).
    fn pair() -> (Segment, Segment) {
        let name = fresh_name();
        let a = Segment::map(&name, true, 2, SLOT, 0).expect("creates");
        let b = Segment::map(&name, false, 2, SLOT, 1).expect("opens");
        unlink(&name);
        (a, b)
    }

    #[test]
    fn both_ranks_pass_a_barrier_and_see_each_others_slots() {
        let (mut a, mut b) = pair();
        let deadline = Instant::now() + Duration::from_secs(10);
        let t = std::thread::spawn(move || {
            for i in 0..100u8 {
                let s = b.next_round();
                // SAFETY: rank 1's own slot, written before the barrier.
                unsafe { b.slot(1, s).write(i) };
                b.barrier(deadline).unwrap();
                // SAFETY: rank 0's slot, read between the barriers.
                let x = unsafe { b.slot(0, s).read() };
                assert_eq!(x, i.wrapping_mul(3));
                b.barrier(deadline).unwrap();
            }
        });
        for i in 0..100u8 {
            let s = a.next_round();
            // SAFETY: as above, for rank 0.
            unsafe { a.slot(0, s).write(i.wrapping_mul(3)) };
            a.barrier(deadline).unwrap();
            // SAFETY: as above.
            let x = unsafe { a.slot(1, s).read() };
            assert_eq!(x, i);
            a.barrier(deadline).unwrap();
        }
        t.join().unwrap();
    }

    #[test]
    fn a_missing_rank_fails_the_barrier_on_time_and_a_late_one_fails_too() {
        let (a, b) = pair();
        let t0 = Instant::now();
        let e = a.barrier(t0 + Duration::from_millis(100)).unwrap_err();
        assert_eq!(e.missing, vec![1]);
        let took = t0.elapsed();
        assert!(took < Duration::from_secs(5), "took {took:?}");
        assert!(a.failed() && b.failed());
        // Rank 1 comes after the verdict: it fails at once, named as the
        // decider named it.
        let e = b
            .barrier(Instant::now() + Duration::from_secs(60))
            .unwrap_err();
        assert_eq!(e.missing, vec![1]);
        // And the segment stays failed, with the same names.
        let e = a
            .barrier(Instant::now() + Duration::from_secs(60))
            .unwrap_err();
        assert_eq!(e.missing, vec![1]);
    }

    /// A rank that arrived at an episode but looks at the verdict only
    /// after its peer passed it and failed the next one: the episode it
    /// waited on passed (the call returns on both ranks alike).
    #[test]
    fn a_later_failure_tells_a_slow_rank_its_episode_passed() {
        let (a, b) = pair();
        let far = Instant::now() + Duration::from_secs(60);
        let e = b.arrive();
        a.barrier(far).unwrap();
        let stop = a
            .barrier(Instant::now() + Duration::from_millis(50))
            .unwrap_err();
        assert_eq!(stop.missing, vec![1]);
        assert_eq!(b.wait(e, far), Ok(()), "episode {e} passed");
        assert_eq!(b.barrier(far).unwrap_err().missing, vec![1]);
    }

    /// The names are the decider's, not what a rank sees when it looks:
    /// rank 2 decides with ranks 0 and 1 missing, then rank 1 arrives; rank
    /// 0, reading the verdict after that, still names both.
    #[test]
    fn every_rank_names_what_the_decider_saw() {
        let name = fresh_name();
        let segs: Vec<Segment> = (0..3)
            .map(|r| Segment::map(&name, r == 0, 3, SLOT, r).unwrap())
            .collect();
        unlink(&name);
        let stop = segs[2]
            .barrier(Instant::now() + Duration::from_millis(20))
            .unwrap_err();
        assert_eq!(stop.missing, vec![0, 1]);
        let late = segs[1].barrier(Instant::now() + Duration::from_secs(60));
        assert_eq!(late.unwrap_err().missing, vec![0, 1]);
        let e = segs[0].arrive();
        let seen = segs[0].wait(e, Instant::now() + Duration::from_secs(60));
        assert_eq!(seen.unwrap_err().missing, vec![0, 1]);
    }

    /// A rank that leaves between two barriers fails the next episode at
    /// once, naming itself, and its peers stop waiting then (not at their
    /// far deadline).
    #[test]
    fn an_abandoned_call_fails_its_peers_at_once() {
        let (a, b) = pair();
        let far = Instant::now() + Duration::from_secs(60);
        let t = std::thread::spawn(move || {
            b.barrier(far).unwrap();
            let t0 = Instant::now();
            let stop = b.barrier(far).unwrap_err();
            (stop, t0.elapsed())
        });
        a.barrier(far).unwrap();
        std::thread::sleep(Duration::from_millis(50));
        a.abandon();
        let (stop, waited) = t.join().unwrap();
        assert_eq!(stop.missing, vec![0]);
        assert!(waited < Duration::from_secs(10), "{waited:?}");
        assert_eq!(a.barrier(far).unwrap_err().missing, vec![0]);
    }

    /// The bitmap covers every rank: 70 ranks (two words), the last ones
    /// missing.
    #[test]
    fn the_missing_ranks_of_a_large_group_are_named() {
        let name = fresh_name();
        let n = 70;
        let segs: Vec<Segment> = (0..n)
            .map(|r| Segment::map(&name, r == 0, n, slot_bytes(0, n), r).unwrap())
            .collect();
        unlink(&name);
        for s in &segs[..65] {
            s.arrive();
        }
        let stop = segs[3]
            .wait(1, Instant::now() + Duration::from_millis(20))
            .unwrap_err();
        assert_eq!(stop.missing, (65..70).collect::<Vec<_>>());
        let late = segs[69].barrier(Instant::now() + Duration::from_secs(60));
        assert_eq!(late.unwrap_err().missing, (65..70).collect::<Vec<_>>());
    }

    #[test]
    fn the_length_is_checked_and_a_stale_object_of_another_size_is_refused() {
        assert!(segment_len(usize::MAX / 2, SLOT).is_none());
        assert!(segment_len(3, usize::MAX / 4).is_none());
        let areas = 4 * record_len(2).unwrap();
        assert_eq!(line_len(2), Some(128));
        assert_eq!(
            line_len(200),
            Some(128),
            "an arrival word and 4 bitmap words"
        );
        assert_eq!(line_len(1000), Some(256));
        assert_eq!(
            segment_len(2, SLOT),
            Some(4096 + areas.next_multiple_of(4096) + 4 * SLOT),
            "header page, four record areas, then four slots"
        );
        assert!(record_len(2).unwrap() >= 8 * (2 * entry_words() + 1));
        assert_eq!(
            record_len(9),
            Some((8 * (crate::validate::wire::words(9) + 1)).next_multiple_of(128))
        );
        assert_eq!(default_slot(1, 2), 1 << 20);
        assert_eq!(default_slot(8, 64), 1 << 20);
        assert_eq!(default_slot(16, 64), 512 << 10);
        assert_eq!(default_slot(32, 64), 256 << 10);
        assert_eq!(default_slot(1000, 2000), 256 << 10);
        assert_eq!(default_slot(4, 2), 256 << 10, "ranks sharing cores");
        assert_eq!(slot_bytes(0, 2), 4096);
        assert_eq!(slot_bytes(5000, 2), 8192);
        assert_eq!(slot_bytes(4096, 100), 8192, "a cache line per rank");
        assert_eq!(slot_bytes(usize::MAX, 2), 1 << 30);
        assert_eq!(slot_bytes(0, usize::MAX), 1 << 30);
        let name = fresh_name();
        let a = Segment::map(&name, true, 2, SLOT, 0).unwrap();
        let e = Segment::map(&name, false, 3, SLOT, 1)
            .err()
            .expect("refused");
        assert!(e.0.contains("bytes"), "{}", e.0);
        unlink(&name);
        assert!(Segment::map(&name, false, 2, SLOT, 1).is_err(), "unlinked");
        drop(a);
    }
}
