//! The data movement of the local transport: reductions over peers' buffers
//! and how work is partitioned between ranks.

use crate::{Accumulator, Element, ReduceOp};

/// Elements reduced per pass; the accumulator chunk stays in L1.
const CHUNK: usize = 1024;

/// The range of `0..len` that `rank` of `size` works on, aligned to cache
/// lines so that ranks never write the same line.
pub(crate) fn partition<T>(len: usize, rank: usize, size: usize) -> (usize, usize) {
    let grain = (64 / size_of::<T>().max(1)).max(1);
    let blocks = len.div_ceil(grain);
    let lo = (blocks * rank / size * grain).min(len);
    let hi = (blocks * (rank + 1) / size * grain).min(len);
    (lo, hi)
}

/// Reduce `len` elements starting at each of `inputs` (in rank order, so the
/// result is the same bits on every rank) and write the result to each of
/// `outputs`.
///
/// # Safety
/// Every input must be valid for `len` reads and every output for `len`
/// writes; no other thread may write these ranges during the call. An output
/// may be the same range as an input (in-place all-reduce): each chunk is
/// read completely before it is written.
pub(crate) unsafe fn reduce<T: Element>(
    inputs: &[*const T],
    outputs: &[*mut T],
    len: usize,
    op: ReduceOp,
) {
    // SAFETY: forwarded from the caller.
    unsafe {
        match op {
            ReduceOp::Sum => reduce_with::<T, _>(inputs, outputs, len, Accumulator::add, None),
            ReduceOp::Prod => reduce_with::<T, _>(inputs, outputs, len, Accumulator::mul, None),
            ReduceOp::Min => reduce_with::<T, _>(inputs, outputs, len, Accumulator::min, None),
            ReduceOp::Max => reduce_with::<T, _>(inputs, outputs, len, Accumulator::max, None),
            ReduceOp::Avg => {
                reduce_with::<T, _>(inputs, outputs, len, Accumulator::add, Some(inputs.len()))
            }
        }
    }
}

#[inline(always)]
unsafe fn reduce_with<T: Element, F: Fn(T::Acc, T::Acc) -> T::Acc>(
    inputs: &[*const T],
    outputs: &[*mut T],
    len: usize,
    combine: F,
    average_over: Option<usize>,
) {
    let Some((&first, rest)) = inputs.split_first() else {
        return;
    };
    let mut acc = [T::Acc::default(); CHUNK];
    let mut off = 0;
    while off < len {
        let m = CHUNK.min(len - off);
        let acc = &mut acc[..m];
        // SAFETY: the caller guarantees `len` valid elements behind every
        // pointer; each shared slice is dropped before any write below.
        unsafe {
            let s = core::slice::from_raw_parts(first.add(off), m);
            for (a, x) in acc.iter_mut().zip(s) {
                *a = x.to_acc();
            }
            for &p in rest {
                let s = core::slice::from_raw_parts(p.add(off), m);
                for (a, x) in acc.iter_mut().zip(s) {
                    *a = combine(*a, x.to_acc());
                }
            }
        }
        if let Some(n) = average_over {
            for a in acc.iter_mut() {
                *a = a.div_count(n);
            }
        }
        for &p in outputs {
            // SAFETY: as above; no shared slice of this range is alive.
            let o = unsafe { core::slice::from_raw_parts_mut(p.add(off), m) };
            for (d, a) in o.iter_mut().zip(acc.iter()) {
                *d = T::from_acc(*a);
            }
        }
        off += m;
    }
}

/// Copy `len` elements from `src` to `dst`.
///
/// # Safety
/// `src` valid for `len` reads, `dst` for `len` writes, not overlapping, and
/// no other thread writes either range during the call.
#[inline]
pub(crate) unsafe fn copy<T: Element>(src: *const T, dst: *mut T, len: usize) {
    if len > 0 {
        // SAFETY: forwarded from the caller.
        unsafe { core::ptr::copy_nonoverlapping(src, dst, len) }
    }
}

/// Exclusive prefix sums: the offset of each block.
pub(crate) fn offsets(counts: &[usize]) -> Vec<usize> {
    let mut acc = 0;
    counts
        .iter()
        .map(|&c| {
            let o = acc;
            acc += c;
            o
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partition_covers_everything_once_aligned() {
        for len in [0, 1, 15, 16, 17, 1000, 4096, 4097] {
            for size in 1..=8 {
                let mut next = 0;
                for r in 0..size {
                    let (lo, hi) = partition::<f32>(len, r, size);
                    assert_eq!(lo, next, "len {len} size {size} rank {r}");
                    assert!(hi >= lo);
                    assert!(lo % 16 == 0 || lo == len);
                    next = hi;
                }
                assert_eq!(next, len);
            }
        }
    }

    #[test]
    fn reduce_in_place_over_many_chunks() {
        let n = 3 * CHUNK + 5;
        let mut a: Vec<f64> = (0..n).map(|i| i as f64).collect();
        let b: Vec<f64> = (0..n).map(|i| 2.0 * i as f64).collect();
        let pa = a.as_mut_ptr();
        unsafe { reduce(&[pa as *const f64, b.as_ptr()], &[pa], n, ReduceOp::Avg) };
        assert!(a.iter().enumerate().all(|(i, &x)| x == 1.5 * i as f64));
    }
}
