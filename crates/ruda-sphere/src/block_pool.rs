//! The per-order host blocks a serial transform keeps between calls.
//!
//! A fused transform hands its stages one block of f64 values per order
//! (the FFT's spectra, the Legendre kernel's results, the coefficients
//! gathered per order): at 721×1440 with 4 vector fields, 361 blocks of
//! 92 KB twice per direction. Allocated afresh on every call they came from
//! the allocator's per-thread arenas, which hand freed memory back to the
//! kernel, so every call faulted tens of thousands of 4 KiB pages in again
//! (a third of the process's time in the kernel at that size). A
//! [`BlockPool`] keeps the blocks a call gave back for the next call.
//!
//! Memory: a pool holds at most the blocks that calls had out at once (one
//! call's at a time when calls follow each other), and frees them when the
//! transform that owns it is dropped.

use alloc::collections::BTreeMap;
use alloc::vec::Vec;
use std::sync::{Mutex, PoisonError};

/// Free blocks by capacity, shared by the clones of one transform's step.
#[derive(Debug, Default)]
pub(crate) struct BlockPool {
    free: Mutex<BTreeMap<usize, Vec<Vec<f64>>>>,
}

impl BlockPool {
    /// A block of `len` values: a free one of enough capacity where there
    /// is one, holding whatever values it held (every one initialised: the
    /// caller overwrites what it reads), else a new one of zeros.
    pub(crate) fn take(&self, len: usize) -> Vec<f64> {
        let found = {
            let mut free = self.free.lock().unwrap_or_else(PoisonError::into_inner);
            let key = free.range(len..).next().map(|(&k, _)| k);
            key.and_then(|k| {
                let list = free.get_mut(&k)?;
                let v = list.pop();
                if list.is_empty() {
                    free.remove(&k);
                }
                v
            })
        };
        match found {
            Some(mut v) => {
                // Within the capacity: no allocation; only values past the
                // old length are written.
                if v.len() >= len {
                    v.truncate(len);
                } else {
                    v.resize(len, 0.0);
                }
                v
            }
            None => alloc::vec![0.0; len],
        }
    }

    /// `len` zeros, in a block from the pool where one is free.
    pub(crate) fn take_zeroed(&self, len: usize) -> Vec<f64> {
        let mut v = self.take(len);
        v.fill(0.0);
        v
    }

    /// Keep `blocks` for later calls (blocks without capacity are dropped).
    pub(crate) fn give(&self, blocks: impl IntoIterator<Item = Vec<f64>>) {
        let mut free = self.free.lock().unwrap_or_else(PoisonError::into_inner);
        for v in blocks {
            if v.capacity() > 0 {
                free.entry(v.capacity()).or_default().push(v);
            }
        }
    }

    /// A pool of `count` free blocks of `len` NaNs: what a former call
    /// could leave, for tests that every value taken is written.
    #[cfg(test)]
    pub(crate) fn dirty(count: usize, len: usize) -> Self {
        let pool = BlockPool::default();
        pool.give((0..count).map(|_| alloc::vec![f64::NAN; len]));
        pool
    }

    /// The values the pool holds (capacity of its free blocks).
    #[cfg(test)]
    pub(crate) fn held(&self) -> usize {
        let free = self.free.lock().unwrap_or_else(PoisonError::into_inner);
        free.iter().map(|(cap, list)| cap * list.len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_block_given_back_is_taken_again_at_any_length_up_to_its_capacity() {
        let pool = BlockPool::default();
        let mut a = pool.take(100);
        assert_eq!(a, alloc::vec![0.0; 100]);
        a.iter_mut().for_each(|x| *x = 7.0);
        let ptr = a.as_ptr();
        pool.give([a]);
        assert_eq!(pool.held(), 100);
        // Shorter: the same memory, its old values.
        let b = pool.take(60);
        assert_eq!((b.as_ptr(), b.len()), (ptr, 60));
        assert!(b.iter().all(|&x| x == 7.0));
        pool.give([b]);
        // Longer than its length, within its capacity: the same memory,
        // zeros past the old length.
        let c = pool.take(100);
        assert_eq!((c.as_ptr(), c.len()), (ptr, 100));
        assert!(c[..60].iter().all(|&x| x == 7.0) && c[60..].iter().all(|&x| x == 0.0));
        // Nothing free: a new block of zeros.
        let d = pool.take(10);
        assert_ne!(d.as_ptr(), ptr);
        assert_eq!(d, alloc::vec![0.0; 10]);
        pool.give([c, d]);
        assert_eq!(pool.held(), 110);
        // Too large for every free block: a new one; the others stay.
        let e = pool.take(1000);
        assert_eq!(e.len(), 1000);
        assert_eq!(pool.held(), 110);
        // The smallest block that fits is taken.
        let f = pool.take(5);
        assert_eq!(f.capacity(), 10);
        assert_eq!(pool.take_zeroed(50), alloc::vec![0.0; 50]);
        assert_eq!(pool.held(), 0);
        pool.give([Vec::new()]);
        assert_eq!(pool.held(), 0);
    }
}
