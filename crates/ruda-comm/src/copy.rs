//! A bulk copy that does not pass through the cache: the copy ruda's local
//! transport moves large blocks with, offered for measuring the machine's
//! copy rate as the transport sees it (`ruda bench`'s roofline).

use crate::Element;

/// The size from which [`copy_streaming`] (and the local transport's
/// copies and reductions into fresh buffers) write with non-temporal
/// stores: about the last-level cache of a small machine.
///
/// # Example
/// ```
/// assert_eq!(ruda_comm::COPY_STREAMING_FROM_BYTES, 4 << 20);
/// ```
pub const COPY_STREAMING_FROM_BYTES: usize = 4 << 20;

/// Copy `src` into `dst` (like [`slice::copy_from_slice`]). From
/// [`COPY_STREAMING_FROM_BYTES`] (4 MiB) on
/// (on x86-64, with `dst` aligned to 16 bytes) the copy writes with
/// non-temporal stores: it skips the read of each destination line that a
/// cached store first makes (write-allocate), so it moves two bytes of
/// memory per byte copied instead of three, and leaves the cache to the
/// data around it. Smaller copies, or other platforms, are a plain
/// `memcpy`. The copy is complete, and visible to other threads through
/// any later synchronisation, when the function returns.
///
/// # Panics
/// If the lengths differ, as `copy_from_slice` does.
///
/// # Example
/// ```
/// let src: Vec<f32> = (0..(2 << 20)).map(|i| i as f32).collect();
/// let mut dst = vec![0f32; src.len()];
/// ruda_comm::copy_streaming(&src, &mut dst);
/// assert_eq!(src, dst);
/// ```
pub fn copy_streaming<T: Element>(src: &[T], dst: &mut [T]) {
    assert_eq!(
        src.len(),
        dst.len(),
        "copy_streaming: source has {} elements, destination {}",
        src.len(),
        dst.len()
    );
    // SAFETY: both slices hold `src.len()` elements; a shared and an
    // exclusive borrow cannot overlap, and the exclusive one keeps every
    // other thread off `dst` for the call.
    unsafe { crate::local::kernels::copy(src.as_ptr(), dst.as_mut_ptr(), src.len()) }
}

/// Copy `src` into each of `dsts`, reading each part of `src` once and
/// writing it to every destination before moving on: the access mix of an
/// all-gather (one read, one write per rank) and of a broadcast, which the
/// local transport moves its large blocks with. From
/// [`COPY_STREAMING_FROM_BYTES`] of `src` on (on x86-64), every destination
/// aligned to 16 bytes is written with non-temporal stores, as
/// [`copy_streaming`] writes; the others, and smaller copies, with cached
/// stores. Complete, and visible to other threads through any later
/// synchronisation, when the function returns.
///
/// # Panics
/// If a destination's length differs from `src`'s, naming it.
///
/// # Example
/// ```
/// let src: Vec<f32> = (0..1000).map(|i| i as f32).collect();
/// let (mut a, mut b) = (vec![0f32; 1000], vec![0f32; 1000]);
/// ruda_comm::copy_streaming_to_each(&src, &mut [&mut a[..], &mut b[..]]);
/// assert!(a == src && b == src);
/// ```
pub fn copy_streaming_to_each<T: Element>(src: &[T], dsts: &mut [&mut [T]]) {
    for (i, d) in dsts.iter().enumerate() {
        assert_eq!(
            src.len(),
            d.len(),
            "copy_streaming_to_each: source has {} elements, destination {i} {}",
            src.len(),
            d.len()
        );
    }
    let stream = crate::local::kernels::streams::<T>(src.len());
    let ptrs: Vec<*mut T> = dsts.iter_mut().map(|d| d.as_mut_ptr()).collect();
    // SAFETY: `src` and every destination hold `src.len()` elements
    // (checked); a shared borrow and exclusive ones cannot overlap, nor can
    // two exclusive ones, and the exclusive borrows keep every other thread
    // off the destinations; fenced below.
    unsafe { crate::local::kernels::copy_to_each(src.as_ptr(), &ptrs, src.len(), stream) };
    if stream {
        crate::local::kernels::fence();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Streamed (aligned, large), unaligned and small copies, with tails
    /// that are not a whole tile, are all exact and write nothing outside
    /// the destination.
    #[test]
    fn copies_exactly_at_every_size_and_alignment() {
        let big = (4 << 20) / 4 + 37;
        let src: Vec<u32> = (0..big as u32 + 3)
            .map(|i| i.wrapping_mul(2654435761))
            .collect();
        for (lo, len) in [(0, big), (1, big), (0, 5), (2, 0), (0, big - 64)] {
            for at in [0, 1] {
                let mut dst = vec![7u32; len + 2];
                if at == 0 && len == big {
                    assert!(kernels_stream(&dst), "the streamed path is the one tested");
                }
                copy_streaming(&src[lo..lo + len], &mut dst[at..at + len]);
                assert_eq!(
                    &dst[at..at + len],
                    &src[lo..lo + len],
                    "offset {lo}, len {len}"
                );
                assert!(dst[..at].iter().chain(&dst[at + len..]).all(|&x| x == 7));
            }
        }
    }

    /// Streamed copies of other element sizes, with and without a tail.
    #[test]
    fn streams_bytes_and_doubles_with_and_without_a_tail() {
        for extra in [0usize, 5] {
            let len = COPY_STREAMING_FROM_BYTES + 64 * 3 + extra;
            let src: Vec<u8> = (0..len).map(|i| (i * 7 + i / 251) as u8).collect();
            let mut dst = vec![0u8; len];
            assert!(kernels_stream_bytes(dst.as_ptr() as usize));
            copy_streaming(&src, &mut dst);
            assert_eq!(src, dst, "u8, tail {extra}");
            let n = COPY_STREAMING_FROM_BYTES / 8 + extra;
            let src: Vec<f64> = (0..n).map(|i| i as f64 * 0.5 - 3.0).collect();
            let mut dst = vec![0f64; n];
            assert!(kernels_stream_bytes(dst.as_ptr() as usize));
            copy_streaming(&src, &mut dst);
            assert_eq!(src, dst, "f64, tail {extra}");
        }
    }

    fn kernels_stream_bytes(at: usize) -> bool {
        !cfg!(all(target_arch = "x86_64", not(miri))) || at.is_multiple_of(16)
    }

    /// Whether a copy to `dst` streams on this platform.
    fn kernels_stream(dst: &[u32]) -> bool {
        kernels_stream_bytes(dst.as_ptr() as usize)
    }

    /// Every destination gets `src` at a streamed size and a small one,
    /// one of them misaligned, and nothing outside is written.
    #[test]
    fn copies_to_each_destination_streamed_or_not() {
        for len in [5, (4 << 20) / 4 + 37] {
            let src: Vec<u32> = (0..len as u32)
                .map(|i| i.wrapping_mul(2654435761))
                .collect();
            let mut a = vec![7u32; len + 1];
            let mut b = vec![7u32; len + 1];
            let (a_in, b_in) = (&mut a[..len], &mut b[1..]);
            copy_streaming_to_each(&src, &mut [a_in, b_in]);
            assert_eq!(&a[..len], &src[..], "len {len}");
            assert_eq!(&b[1..], &src[..], "len {len}");
            assert!(a[len] == 7 && b[0] == 7, "wrote outside, len {len}");
        }
        copy_streaming_to_each::<f32>(&[], &mut []);
    }

    #[test]
    #[should_panic(expected = "source has 3 elements, destination 1 2")]
    fn a_destination_of_another_length_panics() {
        copy_streaming_to_each(&[1u8, 2, 3], &mut [&mut [0u8; 3], &mut [0u8; 2]]);
    }

    #[test]
    #[should_panic(expected = "source has 3 elements, destination 2")]
    fn different_lengths_panic() {
        copy_streaming(&[1u8, 2, 3], &mut [0u8; 2]);
    }
}
