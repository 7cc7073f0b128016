//! The hashes the agreement records carry where a whole list does not fit
//! in a word: shapes beyond the axes a record spells out, declared size
//! lists, a module's parameter shapes.
//!
//! They only detect disagreement (equal lists always hash equal; a
//! collision lets a mismatch through to the transport's own checks), so the
//! function only has to be deterministic across ranks and builds: it is the
//! SplitMix64 finaliser folded over the words.

/// A deterministic 64-bit hash of `parts`.
pub(crate) fn mix(parts: &[u64]) -> u64 {
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

/// The hash of a list of sizes, as a record word.
pub(crate) fn sizes(v: &[usize]) -> i64 {
    mix(&v.iter().map(|&x| x as u64).collect::<Vec<_>>()) as i64
}

/// [`sizes`], never 0 (which a record reads as "no declaration").
pub(crate) fn declared_sizes(v: &[usize]) -> i64 {
    sizes(v) | 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_lists_hash_equal_and_order_matters() {
        assert_eq!(sizes(&[4, 2, 3]), sizes(&[4, 2, 3]));
        assert_ne!(sizes(&[4, 2, 3]), sizes(&[4, 3, 2]));
        assert_ne!(sizes(&[0]), sizes(&[]));
        // The values records have carried since the hash was introduced
        // (computed independently from the published SplitMix64-based
        // definition): ranks built from different commits still agree.
        assert_eq!(mix(&[]), 0x9E37_79B9_7F4A_7C15);
        assert_eq!(sizes(&[4, 2, 3]), 0x0a80_a26b_3b8b_a2e3_u64 as i64);
        assert_eq!(sizes(&[7, 0, 9]), 0x3e59_afa5_d0f5_eb34_u64 as i64);
        assert_eq!(sizes(&[0]), 0xac21_48d9_c5bb_8f75_u64 as i64);
        assert_eq!(declared_sizes(&[]) & 1, 1);
        assert_eq!(declared_sizes(&[7, 0, 9]), sizes(&[7, 0, 9]) | 1);
    }
}
