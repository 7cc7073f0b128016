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

    #[test]
    #[should_panic(expected = "source has 3 elements, destination 2")]
    fn different_lengths_panic() {
        copy_streaming(&[1u8, 2, 3], &mut [0u8; 2]);
    }
}
