//! A bulk copy that does not pass through the cache: the copy ruda's local
//! transport moves large blocks with, offered for measuring the machine's
//! copy rate as the transport sees it (`ruda bench`'s roofline).

use std::sync::OnceLock;

use crate::Element;

/// The least size from which copies stream ([`copy_streaming_from_bytes`]),
/// and the size itself where the last-level cache's size is unknown.
///
/// # Example
/// ```
/// assert_eq!(ruda_comm::COPY_STREAMING_MIN_BYTES, 4 << 20);
/// assert!(ruda_comm::copy_streaming_from_bytes() >= ruda_comm::COPY_STREAMING_MIN_BYTES);
/// ```
pub const COPY_STREAMING_MIN_BYTES: usize = 4 << 20;

/// The largest size from which copies start to stream, whatever the cache
/// says: a machine that reports a huge last-level cache (a virtual
/// machine's guess, a part with stacked cache) still streams 32 MiB copies.
///
/// # Example
/// ```
/// assert!(ruda_comm::copy_streaming_from_bytes() <= ruda_comm::COPY_STREAMING_MAX_BYTES);
/// ```
pub const COPY_STREAMING_MAX_BYTES: usize = 32 << 20;

/// The environment variable that sets [`copy_streaming_from_bytes`] in
/// bytes (any positive integer, outside the clamp), read once per process;
/// an unparsable or zero value is ignored.
pub const COPY_STREAMING_ENV: &str = "RUDA_COPY_STREAMING_FROM_BYTES";

/// The size from which [`copy_streaming`] (and the local transport's
/// copies and reductions into fresh buffers, and the MPI transport's
/// shared-memory copies) write with non-temporal stores on this machine:
/// half its last-level cache, so that a copy's source and destination fit
/// in it together, clamped to [`COPY_STREAMING_MIN_BYTES`] (which it is
/// where the cache's size cannot be read: outside Linux, or without
/// `/sys`) and [`COPY_STREAMING_MAX_BYTES`]; or [`COPY_STREAMING_ENV`]'s
/// value. Read once per process, from `/sys/devices/system/cpu/cpu0/cache`
/// (when a `LocalWorld` runs or an `MpiWorld` starts, so never inside a
/// collective), and the same for every thread after that.
///
/// With 4 MiB on a machine whose last-level cache holds 32 MiB (the AMD
/// EPYC development machine), 8 MiB collectives on 2 threads streamed to
/// memory what cached stores would have kept: 16 MiB there made the 8 MiB
/// all-gather 2.7× faster (744 → 264–284 µs), the broadcast 2.6×,
/// all-to-all 1.4–1.7× and reduce-scatter 1.3–1.6×, with 32 and 64 MiB
/// unchanged (two alternating runs).
///
/// # Example
/// ```
/// let from = ruda_comm::copy_streaming_from_bytes();
/// assert!(from >= 4 << 20);
/// assert_eq!(from, ruda_comm::copy_streaming_from_bytes(), "read once");
/// ```
pub fn copy_streaming_from_bytes() -> usize {
    static FROM: OnceLock<usize> = OnceLock::new();
    *FROM.get_or_init(|| {
        let set = std::env::var(COPY_STREAMING_ENV).ok();
        from_env(set.as_deref()).unwrap_or_else(|| streaming_from(last_level_cache_bytes()))
    })
}

/// [`COPY_STREAMING_ENV`]'s value, if it is a positive integer.
fn from_env(v: Option<&str>) -> Option<usize> {
    v?.trim().parse::<usize>().ok().filter(|&b| b > 0)
}

/// [`copy_streaming_from_bytes`] for a last-level cache of `llc` bytes.
fn streaming_from(llc: Option<usize>) -> usize {
    llc.map_or(COPY_STREAMING_MIN_BYTES, |b| {
        (b / 2).clamp(COPY_STREAMING_MIN_BYTES, COPY_STREAMING_MAX_BYTES)
    })
}

/// The size of the highest-level data or unified cache of CPU 0, from
/// Linux's sysfs; `None` where it cannot be read.
fn last_level_cache_bytes() -> Option<usize> {
    if cfg!(miri) {
        return None;
    }
    let dir = std::fs::read_dir("/sys/devices/system/cpu/cpu0/cache").ok()?;
    let read = |p: &std::path::Path, f: &str| std::fs::read_to_string(p.join(f)).ok();
    dir.filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with("index"))
        .filter_map(|e| {
            let p = e.path();
            let kind = read(&p, "type")?;
            if kind.trim() == "Instruction" {
                return None;
            }
            let level: u32 = read(&p, "level")?.trim().parse().ok()?;
            Some((level, cache_size(&read(&p, "size")?)?))
        })
        .max()
        .map(|(_, bytes)| bytes)
}

/// Bytes of a sysfs cache size (`"32768K"`, `"1M"`, `"512"`); `None` when
/// it is not one.
fn cache_size(s: &str) -> Option<usize> {
    let s = s.trim();
    let (digits, unit) = match s.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
        Some((i, _)) => s.split_at(i),
        None => (s, ""),
    };
    let shift = match unit {
        "" => 0,
        "K" => 10,
        "M" => 20,
        "G" => 30,
        _ => return None,
    };
    digits.parse::<usize>().ok()?.checked_mul(1 << shift)
}

/// Copy `src` into `dst` (like [`slice::copy_from_slice`]). From
/// [`copy_streaming_from_bytes`] on (on x86-64) the copy writes with
/// non-temporal stores from `dst`'s first 16-byte boundary on (the few
/// elements before it with `memcpy`): it skips the read of each
/// destination line that a cached store first makes (write-allocate), so
/// it moves two bytes of memory per byte copied instead of three, and
/// leaves the cache to the data around it. Smaller copies, or other
/// platforms, are `memcpy`s of at most 1 KiB each (glibc's `rep movsb`,
/// which it uses from 2 KiB, is 15–20× slower on AMD Zen when the
/// destination sits 4–16 bytes past the source within a cache line). The
/// copy is complete, and visible to other threads through any later
/// synchronisation, when the function returns.
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
/// [`copy_streaming_from_bytes`] of `src` on (on x86-64), every destination
/// is written with non-temporal stores as [`copy_streaming`] writes;
/// smaller copies with cached stores. Complete, and visible to other
/// threads through any later synchronisation, when the function returns.
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
    // The exclusive borrows keep every other thread off the destinations.
    // SAFETY: valid: `src` and every destination hold `src.len()` elements (checked); unaliased: a `&` and `&mut`s (or two `&mut`s) cannot overlap; fenced below.
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
        let big = copy_streaming_from_bytes() / 4 + 37;
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
            let len = copy_streaming_from_bytes() + 64 * 3 + extra;
            let src: Vec<u8> = (0..len).map(|i| (i * 7 + i / 251) as u8).collect();
            let mut dst = vec![0u8; len];
            assert!(kernels_stream_bytes(dst.as_ptr() as usize));
            copy_streaming(&src, &mut dst);
            assert_eq!(src, dst, "u8, tail {extra}");
            let n = copy_streaming_from_bytes() / 8 + extra;
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
        for len in [5, copy_streaming_from_bytes() / 4 + 37] {
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

    /// Half the cache, clamped; the floor where unknown; the variable's
    /// positive integers only.
    #[test]
    fn streaming_starts_at_half_the_last_level_cache() {
        assert_eq!(streaming_from(Some(32 << 20)), 16 << 20);
        assert_eq!(streaming_from(Some(4 << 20)), COPY_STREAMING_MIN_BYTES);
        assert_eq!(streaming_from(Some(1 << 30)), COPY_STREAMING_MAX_BYTES);
        assert_eq!(streaming_from(None), COPY_STREAMING_MIN_BYTES);
        assert_eq!(from_env(Some(" 65536\n")), Some(65536));
        assert_eq!(from_env(Some("0")), None);
        assert_eq!(from_env(Some("64K")), None);
        assert_eq!(from_env(None), None);
        let set = std::env::var(COPY_STREAMING_ENV).ok();
        assert_eq!(
            copy_streaming_from_bytes(),
            from_env(set.as_deref()).unwrap_or_else(|| streaming_from(last_level_cache_bytes()))
        );
    }

    #[test]
    fn cache_sizes_parse_as_sysfs_writes_them() {
        assert_eq!(cache_size("32768K\n"), Some(32 << 20));
        assert_eq!(cache_size("1M"), Some(1 << 20));
        assert_eq!(cache_size("2G"), Some(2 << 30));
        assert_eq!(cache_size("512"), Some(512));
        assert_eq!(cache_size("12KB"), None);
        assert_eq!(cache_size("K"), None);
        assert_eq!(cache_size(""), None);
        assert_eq!(cache_size("99999999999999999999G"), None);
    }

    #[test]
    #[should_panic(expected = "source has 3 elements, destination 2")]
    fn different_lengths_panic() {
        copy_streaming(&[1u8, 2, 3], &mut [0u8; 2]);
    }
}
