//! The per-order host blocks a serial transform keeps between calls.
//!
//! A fused transform hands its stages one block of f64 values per order
//! (the FFT's spectra and the Legendre kernel's results over the
//! latitudes, the coefficients over the degrees): at 721×1440 with 4
//! vector fields, 361 blocks of 92 KB and 361 of 46 KB per direction.
//! Allocated afresh on every call they came from the allocator's
//! per-thread arenas, which hand freed memory back to the kernel, so every
//! call faulted tens of thousands of 4 KiB pages in again: page faults took
//! 28 % of a vector forward + inverse pair's samples at that size, and
//! keeping the blocks took its median from 86.6 to 71.9 ms. A [`BlockPool`]
//! keeps the blocks a call gave back for the next call.
//!
//! Memory: the blocks of the largest batch the transform has seen (a call
//! on a smaller batch takes the same blocks, shortened; a request that no
//! free block fits drops the free blocks smaller than it, outgrown). Calls
//! on one transform that overlapped in time each took their own blocks and
//! all give them back, so after `n` calls overlapped the pool holds `n`
//! calls' blocks until a larger batch drops them. They are freed when the
//! last holder of the transform's step goes: the transform, or an autodiff
//! graph that recorded one of its calls.

use alloc::collections::BTreeMap;
use alloc::vec::Vec;
use std::sync::{Mutex, PoisonError};

/// Free blocks by capacity, shared by the clones of one transform's step.
#[derive(Default)]
pub(crate) struct BlockPool {
    free: Mutex<BTreeMap<usize, Vec<Vec<f64>>>>,
}

impl core::fmt::Debug for BlockPool {
    /// How many blocks are free and how many values they hold (not the
    /// values themselves).
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let free = self.free.lock().unwrap_or_else(PoisonError::into_inner);
        let blocks: usize = free.values().map(Vec::len).sum();
        let values: usize = free.iter().map(|(cap, list)| cap * list.len()).sum();
        f.debug_struct("BlockPool")
            .field("free_blocks", &blocks)
            .field("free_values", &values)
            .finish()
    }
}

impl BlockPool {
    /// A block of `len` values: a free one of enough capacity where there
    /// is one (the smallest), holding whatever values it held (every one
    /// initialised: the caller overwrites what it reads), else a new one of
    /// zeros, and then the free blocks smaller than `len` are dropped (a
    /// larger batch outgrew them). No block for `len` 0.
    pub(crate) fn take(&self, len: usize) -> Vec<f64> {
        if len == 0 {
            return Vec::new();
        }
        let found = {
            let mut free = self.free.lock().unwrap_or_else(PoisonError::into_inner);
            let key = free.range(len..).next().map(|(&k, _)| k);
            match key {
                Some(k) => {
                    let list = free.get_mut(&k).expect("a listed capacity");
                    let v = list.pop();
                    if list.is_empty() {
                        free.remove(&k);
                    }
                    v
                }
                None => {
                    free.clear();
                    None
                }
            }
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

    /// The number of free blocks.
    #[cfg(test)]
    pub(crate) fn held_blocks(&self) -> usize {
        let free = self.free.lock().unwrap_or_else(PoisonError::into_inner);
        free.values().map(Vec::len).sum()
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
        assert_eq!(
            format!("{pool:?}"),
            "BlockPool { free_blocks: 2, free_values: 110 }"
        );
        // The smallest block that fits is taken.
        let f = pool.take(5);
        assert_eq!(f.capacity(), 10);
        assert_eq!(pool.take_zeroed(50), alloc::vec![0.0; 50]);
        assert_eq!(pool.held(), 0);
        pool.give([Vec::new(), f]);
        assert_eq!(pool.held(), 10);
        // Nothing for an empty request.
        assert_eq!(pool.take(0).capacity(), 0);
        assert_eq!(pool.held(), 10);
    }

    #[test]
    fn a_request_no_free_block_fits_drops_the_smaller_ones() {
        let pool = BlockPool::default();
        pool.give([
            alloc::vec![1.0; 10],
            alloc::vec![1.0; 20],
            alloc::vec![1.0; 40],
        ]);
        // Fits: the others stay.
        let a = pool.take(15);
        assert_eq!((a.capacity(), pool.held()), (20, 50));
        // Fits none: a new block, and the outgrown ones are gone.
        let b = pool.take(100);
        assert_eq!((b.len(), pool.held()), (100, 0));
        // A batch that grows call after call keeps one call's blocks.
        for batch in 1..=8 {
            let blocks: Vec<_> = (0..3).map(|_| pool.take(batch * 10)).collect();
            pool.give(blocks);
            assert_eq!(pool.held(), 3 * batch * 10, "batch {batch}");
        }
    }
}
