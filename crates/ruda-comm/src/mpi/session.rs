//! The process-wide MPI session: the thread level MPI granted, the lock
//! that serialises ruda's MPI calls when MPI grants only
//! `MPI_THREAD_SERIALIZED`, the gate that keeps calls out of a finalised
//! MPI, and the settings every communicator of the session shares.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, RwLock, RwLockReadGuard};
use std::time::Duration;

use mpi::ffi;

use crate::{CommError, ErrorContext, OpKind};

/// What one process's MPI session shares between its communicators.
#[derive(Debug)]
pub(crate) struct Session {
    /// `MPI_IN_PLACE` is Open MPI's `(void *) 1`; other libraries get a copy.
    pub in_place: bool,
    /// Whether every collective first exchanges every rank's call record
    /// (the deadline, and cross-rank checks); see `MpiWorldBuilder::checked`.
    pub checked: bool,
    /// Whether a checked collective's data phase works on copies (see
    /// `MpiWorldBuilder::staged`).
    pub staged: bool,
    /// The deadline of every wait.
    pub timeout: Duration,
    /// How communicators may use shared memory.
    pub shm: SharedMemory,
    /// Held around every MPI call when MPI is at `MPI_THREAD_SERIALIZED`;
    /// `None` at `MPI_THREAD_MULTIPLE`, where calls from several threads
    /// may overlap.
    serial: Option<Mutex<()>>,
    /// `true` once MPI is finalised: calls hold a read guard, finalisation
    /// takes the write guard, so no call runs into a finalised MPI.
    finalized: RwLock<bool>,
    /// Set when a call timed out (see [`Session::mark_broken`]).
    broken: AtomicBool,
    /// Staging buffers of checked collectives, kept between calls (see
    /// [`Session::staging`]).
    staging: Mutex<Vec<Vec<u64>>>,
}

/// How a session's communicators may use shared memory (see
/// `MpiWorldBuilder::shared_memory`).
#[derive(Clone, Debug)]
pub(crate) struct SharedMemory {
    /// Communicators on one host move data through a segment.
    pub on: bool,
    /// Bytes of each slot of a segment, as asked for
    /// (`MpiWorldBuilder::shared_memory_slot`); `None`: by the number of
    /// ranks (`segment::default_slot`).
    pub slot: Option<usize>,
    /// Bytes of each rank's shared-buffer arena in a segment, as asked for
    /// (`MpiWorldBuilder::shared_buffers`; 0: none).
    pub arena: usize,
    /// Communicators across hosts with as many ranks on each make their
    /// all-reduces hierarchical (`MpiWorldBuilder::hierarchical`).
    pub hierarchical: bool,
    /// Ranks of one host read their peers' buffers directly where they can
    /// (`MpiWorldBuilder::shared_memory_single_copy`).
    pub single_copy: bool,
    /// The call sizes that read directly, in bytes, as asked for (rank 0's
    /// hold: `MpiWorldBuilder::shared_memory_single_copy_sizes`).
    pub single_copy_sizes: std::ops::Range<usize>,
}

impl Default for SharedMemory {
    fn default() -> Self {
        SharedMemory {
            on: true,
            slot: None,
            arena: 0,
            hierarchical: false,
            single_copy: true,
            single_copy_sizes: super::direct::SINGLE_COPY_FROM_BYTES
                ..super::direct::SINGLE_COPY_BELOW_BYTES,
        }
    }
}

/// Staging buffers kept for reuse, at most.
const STAGING_KEPT: usize = 4;

/// Bytes of staging buffers kept for reuse, at most (a larger buffer is
/// freed after its call): the pool must not hold the largest buffers a
/// process ever staged for the rest of its life.
pub(crate) const STAGING_KEPT_BYTES: usize = 256 << 20;

/// Keeps MPI from being finalised while a call runs.
pub(crate) type Gate<'a> = RwLockReadGuard<'a, bool>;

impl Session {
    pub(crate) fn new(
        in_place: bool,
        checked: bool,
        staged: bool,
        timeout: Duration,
        multiple: bool,
        shm: SharedMemory,
    ) -> Self {
        Session {
            in_place,
            checked,
            staged,
            timeout,
            shm,
            serial: (!multiple).then(|| Mutex::new(())),
            finalized: RwLock::new(false),
            broken: AtomicBool::new(false),
            staging: Mutex::new(Vec::new()),
        }
    }

    /// Enter a call: fails once MPI is finalised.
    pub(crate) fn gate(&self, op: OpKind, rank: usize) -> Result<Gate<'_>, CommError> {
        let g = self.finalized.read().unwrap_or_else(|e| e.into_inner());
        if *g {
            return Err(CommError::Transport {
                op,
                rank,
                message: "MPI is finalised (its MpiWorld was finalised or dropped)".into(),
                context: ErrorContext::none(),
            });
        }
        Ok(g)
    }

    /// A staging buffer of `words` 8-byte words for a checked collective,
    /// reused from an earlier call when one is large enough: a fresh
    /// allocation per call costs its page faults and, in Open MPI, the
    /// registration of new memory for its single-copy transfers (measured:
    /// a 16 MiB all-to-all on 2 ranks 13× slower than on reused buffers).
    /// The contents are stale: the caller copies in what MPI must read.
    pub(crate) fn staging(&self, words: usize) -> Vec<u64> {
        let mut kept = self.staging.lock().unwrap_or_else(|e| e.into_inner());
        // The smallest kept buffer that fits.
        let fit = kept
            .iter()
            .enumerate()
            .filter(|(_, v)| v.capacity() >= words)
            .min_by_key(|(_, v)| v.capacity())
            .map(|(i, _)| i);
        let mut v = match fit {
            Some(i) => kept.swap_remove(i),
            None => Vec::new(),
        };
        drop(kept);
        if v.len() >= words {
            v.truncate(words);
        } else {
            v.resize(words, 0);
        }
        v
    }

    /// Return a staging buffer (after its collective completed) for reuse:
    /// at most [`STAGING_KEPT`] buffers and [`STAGING_KEPT_BYTES`] are
    /// kept, the smallest freed first (a buffer above the byte cap on its
    /// own is freed at once).
    pub(crate) fn keep_staging(&self, v: Vec<u64>) {
        let bytes = |v: &Vec<u64>| v.capacity().saturating_mul(8);
        if v.capacity() == 0 || bytes(&v) > STAGING_KEPT_BYTES {
            return;
        }
        let mut kept = self.staging.lock().unwrap_or_else(|e| e.into_inner());
        kept.push(v);
        loop {
            let total = kept.iter().map(bytes).fold(0usize, usize::saturating_add);
            if kept.len() <= STAGING_KEPT && total <= STAGING_KEPT_BYTES {
                break;
            }
            let Some(i) = kept
                .iter()
                .enumerate()
                .min_by_key(|(_, v)| v.capacity())
                .map(|(i, _)| i)
            else {
                break;
            };
            kept.swap_remove(i);
        }
    }

    /// The bytes of staging buffers kept now.
    #[cfg(test)]
    fn kept_bytes(&self) -> usize {
        let kept = self.staging.lock().unwrap_or_else(|e| e.into_inner());
        kept.iter().map(|v| v.capacity() * 8).sum()
    }

    /// Whether MPI runs at `MPI_THREAD_MULTIPLE` (no process-wide lock:
    /// a thread may block in MPI while others call it).
    pub(crate) fn multiple(&self) -> bool {
        self.serial.is_none()
    }

    /// Run one MPI call, serialised process-wide when MPI requires it.
    pub(crate) fn mpi<R>(&self, f: impl FnOnce() -> R) -> R {
        let _g: Option<MutexGuard<'_, ()>> = self
            .serial
            .as_ref()
            .map(|m| m.lock().unwrap_or_else(|e| e.into_inner()));
        f()
    }

    /// Finalise MPI (when `owns` it: ruda initialised it) after every call
    /// in flight has returned; later calls fail with a transport error.
    pub(crate) fn finalize(&self, owns: bool) {
        let mut g = self.finalized.write().unwrap_or_else(|e| e.into_inner());
        if *g {
            return;
        }
        *g = true;
        if self.is_broken() {
            eprintln!(
                "ruda: an MPI call of this process timed out, so peers may still wait inside it; aborting the MPI job instead of finalising"
            );
            // MPI is initialised and not yet finalised (checked above).
            super::abort::abort_job(75);
        }
        if owns {
            // Under the end lock: no abort is between its check and its
            // `MPI_Abort` (see `abort`), and none starts until this is done.
            super::abort::finalize_under(|| {
                let mut done: std::ffi::c_int = 0;
                // SAFETY: no ruda call is in flight (we hold the write gate);
                // plain state query, then finalisation of the MPI we started.
                unsafe {
                    ffi::MPI_Finalized(&mut done);
                    if done == 0 {
                        ffi::MPI_Finalize();
                    }
                }
            });
        }
    }

    /// Record that a call timed out: peers may still be inside it, so MPI
    /// can no longer be finalised cleanly.
    pub(crate) fn mark_broken(&self) {
        self.broken.store(true, Ordering::Release);
    }

    /// Whether a call of this process timed out.
    pub(crate) fn is_broken(&self) -> bool {
        self.broken.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session() -> Session {
        Session::new(
            true,
            true,
            true,
            Duration::from_secs(1),
            true,
            SharedMemory::default(),
        )
    }

    /// Staging buffers are reused, and the pool keeps at most four of them
    /// and at most `STAGING_KEPT_BYTES` (without the byte cap it held the
    /// four largest buffers ever staged: here 4 × 200 MiB).
    #[test]
    fn the_staging_pool_is_capped_in_bytes_and_count() {
        let s = session();
        let words = |mib: usize| (mib << 20) / 8;
        let v = s.staging(words(1));
        let p = v.as_ptr();
        s.keep_staging(v);
        let again = s.staging(words(1) / 2);
        assert_eq!(again.as_ptr(), p, "a kept buffer is reused");
        drop(again);
        for _ in 0..4 {
            s.keep_staging(vec![0u64; words(200)]);
        }
        assert!(s.kept_bytes() <= STAGING_KEPT_BYTES, "{}", s.kept_bytes());
        assert_eq!(s.kept_bytes(), 200 << 20);
        // One above the cap on its own is not kept at all.
        s.keep_staging(vec![0u64; words(300)]);
        assert_eq!(s.kept_bytes(), 200 << 20);
        // Many small ones: at most four.
        for _ in 0..6 {
            s.keep_staging(vec![0u64; words(1)]);
        }
        assert!(s.staging.lock().unwrap().len() <= STAGING_KEPT);
        assert!(s.kept_bytes() <= STAGING_KEPT_BYTES);
    }
}
