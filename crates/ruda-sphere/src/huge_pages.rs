//! Large host buffers of the transforms, backed by transparent huge pages
//! where Linux offers them on request.
//!
//! A transform of a large grid writes fresh buffers of tens to hundreds of
//! MiB per call (the FFT's spectra, the reordered coefficients, the output
//! field). glibc maps each buffer over 32 MiB from the kernel anew, and
//! hands heap memory above its trim threshold back, so with 4 KiB pages
//! the first write to each page is a fault: about 43 000 faults per
//! forward + inverse pair at 1441×2880 f64 with 4 fields, a quarter of the
//! process's time in the kernel. Advising these buffers for 2 MiB pages
//! (`madvise(MADV_HUGEPAGE)`, honoured when the system's transparent huge
//! pages are `always` or `madvise`) left about 750 faults per pair.
//!
//! The transform's result, which becomes the caller's tensor, is the one
//! large buffer that must be fresh on every call. The inverse FFT writes it
//! through [`Fresh`]: advised before anything touches it, and not zeroed
//! by one thread first. A buffer under glibc's mapping threshold (32 MiB at
//! most) comes from its heap, where `calloc` zeroes it with one thread's
//! `memset`, taking its 4 KiB faults before the advice came (16.6 MB for 4
//! vector fields at 361×720: the pair's median was 13.6–15.4 ms against
//! 14.2–16.4 ms, three runs alternating the two in one process); larger
//! ones are fresh mappings either way. Each task zeroes a row just before
//! the FFT overwrites it, so the page faults and the writes are spread
//! over the threads. The per-order blocks in between are kept by the
//! transform ([`crate::block_pool`]).
//!
//! Side effects on the process, all confined to memory these buffers
//! occupy:
//! - the advice splits the allocator's mapping at the advised range, and
//!   stays on that memory: a buffer over 32 MiB is unmapped when freed,
//!   but one between 4 and 32 MiB may come from glibc's heap (once a
//!   larger mapped block was freed), whose region then keeps the advice
//!   for later allocations there (up to 2 MiB more resident memory per
//!   huge page partly used);
//! - with the kernel's default `defrag` setting (`madvise`), a fault in
//!   advised memory may compact memory to find a huge page, which can
//!   stall the faulting thread on a fragmented machine.

use core::mem::MaybeUninit;

/// Buffers from this size on are advised; smaller ones come from the
/// allocator's heap, already mapped.
const ADVISE_FROM_BYTES: usize = 4 << 20;

/// The huge page size of x86-64 and of most aarch64 kernels.
const HUGE_PAGE: usize = 2 << 20;

/// `len` zeros in a fresh vector. From 4 MiB on, on Linux, the whole
/// 2 MiB pages inside it are advised for transparent huge pages: before
/// its first write where the allocator maps it untouched (over 32 MiB, or
/// fresh heap), for its later faults otherwise.
pub(crate) fn zeroed<T: realfft::FftNum>(len: usize) -> Vec<T> {
    let v = vec![T::zero(); len];
    advise(&v);
    v
}

/// A fresh buffer of `len` values that parallel tasks initialise in
/// disjoint pieces, each piece just before it is written (for a buffer
/// that is overwritten whole, as an inverse FFT's output is): no `memset`
/// of the whole buffer by one thread first, and its page faults taken by
/// the tasks that write it. From 4 MiB on it is advised for huge pages
/// before anything touches it.
pub(crate) struct Fresh<T> {
    v: Vec<T>,
    len: usize,
}

impl<T: realfft::FftNum> Fresh<T> {
    /// Room for `len` values, none initialised.
    pub(crate) fn new(len: usize) -> Self {
        let mut v = Vec::with_capacity(len);
        advise(v.spare_capacity_mut());
        Fresh { v, len }
    }

    /// The uninitialised room, `len` values, for the tasks to split.
    pub(crate) fn room(&mut self) -> &mut [MaybeUninit<T>] {
        &mut self.v.spare_capacity_mut()[..self.len]
    }

    /// The buffer, once every value of [`Fresh::room`] is initialised.
    ///
    /// # Safety
    /// Every element of the room must have been written (as
    /// [`zeroed_piece`] does) since `self` was made.
    pub(crate) unsafe fn assume_init(mut self) -> Vec<T> {
        // SAFETY: valid: `len` is at most the capacity (reserved in `new`) and the caller promises that the first `len` elements are initialised.
        unsafe { self.v.set_len(self.len) };
        self.v
    }
}

/// `piece` set to zeros and handed back as initialised values, for its
/// writer to overwrite while it is in cache.
pub(crate) fn zeroed_piece<T: realfft::FftNum>(piece: &mut [MaybeUninit<T>]) -> &mut [T] {
    piece.fill(MaybeUninit::new(T::zero()));
    let (ptr, len) = (piece.as_mut_ptr().cast::<T>(), piece.len());
    // `MaybeUninit<T>` has `T`'s size and alignment, so the cast pointer
    // covers the same `len` elements, all of them written just above.
    // SAFETY: valid: every element is initialised and the memory is `piece`'s; unaliased: the result reborrows `piece` exclusively for its lifetime.
    unsafe { core::slice::from_raw_parts_mut(ptr, len) }
}

/// Advise the whole huge pages inside `v` (initialised or not: only its
/// addresses are read) for transparent huge pages; a
/// no-op below [`ADVISE_FROM_BYTES`], off Linux, or where the kernel
/// refuses (the advice is only ever a hint).
fn advise<T>(v: &[T]) {
    let bytes = size_of_val(v);
    if bytes < ADVISE_FROM_BYTES {
        return;
    }
    #[cfg(target_os = "linux")]
    {
        let start = v.as_ptr() as usize;
        let Some(end) = start.checked_add(bytes) else {
            return;
        };
        let Some(first) = start.checked_next_multiple_of(HUGE_PAGE) else {
            return;
        };
        let last = end - end % HUGE_PAGE;
        if last <= first {
            return;
        }
        // `first..last` is rounded inwards to huge-page boundaries, which
        // are page aligned, as madvise requires. MADV_HUGEPAGE changes
        // neither the contents nor the validity of the memory, only how
        // the kernel backs it.
        // SAFETY: valid: `first..last` lies inside `v`'s allocation; unaliased: no Rust access is made, the kernel only changes how it backs the pages.
        let _ = unsafe {
            libc::madvise(
                first as *mut libc::c_void,
                last - first,
                libc::MADV_HUGEPAGE,
            )
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zeroed_is_zero_at_every_size() {
        for len in [0usize, 1, 1000, (4 << 20) / 8 + 3, (9 << 20) / 8] {
            let v: Vec<f64> = zeroed(len);
            assert_eq!(v.len(), len);
            assert!(v.iter().all(|&x| x == 0.0));
        }
    }

    /// A fresh buffer whose pieces are zeroed and written by parallel
    /// tasks holds every task's values, small (below the advice) and large
    /// (advised), and an empty one is empty.
    #[test]
    fn a_fresh_buffer_holds_what_its_pieces_were_given() {
        use rayon::prelude::*;
        for (len, piece) in [(0usize, 1usize), (10, 3), ((5 << 20) / 8 + 7, 4096)] {
            let mut fresh = Fresh::<f64>::new(len);
            fresh
                .room()
                .par_chunks_mut(piece)
                .enumerate()
                .for_each(|(i, p)| {
                    let p = zeroed_piece(p);
                    assert!(p.iter().all(|&x| x == 0.0));
                    // Write all but the last value: it stays zero.
                    let last = p.len() - 1;
                    for (j, x) in p[..last].iter_mut().enumerate() {
                        *x = (i * piece + j) as f64;
                    }
                });
            // SAFETY: valid: every piece of the room was set by `zeroed_piece`.
            let v = unsafe { fresh.assume_init() };
            assert_eq!(v.len(), len);
            for (at, &x) in v.iter().enumerate() {
                let want = if at % piece == piece - 1 || at == len - 1 {
                    0.0
                } else {
                    at as f64
                };
                assert_eq!(x, want, "{len} values in pieces of {piece}: at {at}");
            }
        }
    }

    /// On Linux with transparent huge pages on request, a large advised
    /// buffer is backed by huge pages once written (read from
    /// /proc/self/smaps); skipped where the kernel does not offer them or
    /// never compacts memory to find one.
    #[cfg(target_os = "linux")]
    #[test]
    fn large_buffers_get_huge_pages_where_offered() {
        let read = |f: &str| {
            std::fs::read_to_string(format!("/sys/kernel/mm/transparent_hugepage/{f}"))
                .unwrap_or_default()
        };
        let (mode, defrag) = (read("enabled"), read("defrag"));
        // Without compaction on request a fault takes a huge page only if
        // one is free at that moment: no promise to test.
        if !(mode.contains("[madvise]") || mode.contains("[always]")) || defrag.contains("[never]")
        {
            return;
        }
        let mut v: Vec<f64> = zeroed((32 << 20) / 8);
        v.iter_mut().enumerate().for_each(|(i, x)| *x = i as f64);
        // The middle: the advised part is a mapping of its own.
        let at = v[v.len() / 2..].as_ptr() as usize;
        let smaps = std::fs::read_to_string("/proc/self/smaps").expect("smaps");
        let mut huge_kb = None;
        let mut inside = false;
        for line in smaps.lines() {
            if let Some((range, _)) = line.split_once(' ')
                && let Some((lo, hi)) = range.split_once('-')
                && let (Ok(lo), Ok(hi)) =
                    (usize::from_str_radix(lo, 16), usize::from_str_radix(hi, 16))
            {
                inside = lo <= at && at < hi;
                continue;
            }
            if inside && let Some(kb) = line.strip_prefix("AnonHugePages:") {
                huge_kb = kb
                    .trim()
                    .trim_end_matches("kB")
                    .trim()
                    .parse::<usize>()
                    .ok();
            }
        }
        let huge_kb = huge_kb.expect("the buffer's mapping is listed");
        // Memory may be too fragmented for some pages: at least one huge
        // page shows the advice was given (none is 0 kB).
        assert!(
            huge_kb >= 2 << 10,
            "{huge_kb} kB of the advised 30 MiB in huge pages"
        );
        assert_eq!(v[12345], 12345.0);
    }
}
