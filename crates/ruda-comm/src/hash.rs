//! [`mix`]: the deterministic hash ruda's records carry where a list does
//! not fit in a word (shape lists, a module's parameter values), and that
//! test patterns derive values from.

/// A deterministic 64-bit hash of `parts` (the SplitMix64 finaliser folded
/// over the words): the same on every rank, build and platform, so that
/// ranks can compare hashes instead of lists.
///
/// # Example
/// ```
/// assert_eq!(ruda_comm::mix(&[4, 2, 3]), 0x0a80_a26b_3b8b_a2e3);
/// assert_ne!(ruda_comm::mix(&[4, 2, 3]), ruda_comm::mix(&[4, 3, 2]));
/// ```
pub fn mix(parts: &[u64]) -> u64 {
    let mut h = 0x9E37_79B9_7F4A_7C15u64;
    for &p in parts {
        h ^= p
            .wrapping_add(0x9E37_79B9_7F4A_7C15)
            .wrapping_add(h << 6)
            .wrapping_add(h >> 2);
        h = (h ^ (h >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        h = (h ^ (h >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        h ^= h >> 31;
    }
    h
}
