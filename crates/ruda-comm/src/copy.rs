//! A bulk copy that does not pass through the cache: the copy ruda's local
//! transport moves large blocks with, offered for measuring the machine's
//! copy rate as the transport sees it (`ruda bench`'s roofline).

use crate::Element;

/// Copy `src` into `dst` (like [`slice::copy_from_slice`]). From 4 MiB on
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

    /// Whether a copy to `dst` streams on this platform.
    fn kernels_stream(dst: &[u32]) -> bool {
        !cfg!(all(target_arch = "x86_64", not(miri))) || (dst.as_ptr() as usize).is_multiple_of(16)
    }

    #[test]
    #[should_panic(expected = "source has 3 elements, destination 2")]
    fn different_lengths_panic() {
        copy_streaming(&[1u8, 2, 3], &mut [0u8; 2]);
    }
}
