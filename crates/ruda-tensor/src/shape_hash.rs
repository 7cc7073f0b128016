//! The hashes the agreement records carry where a whole list does not fit
//! in a word: shapes beyond the axes a record spells out, declared size
//! lists, a module's parameter shapes.
//!
//! They only detect disagreement (equal lists always hash equal; a
//! collision lets a mismatch through to the transport's own checks), so the
//! function only has to be deterministic across ranks and builds:
//! [`ruda_comm::mix`].

use alloc::vec::Vec;

pub(crate) use ruda_comm::mix;

/// The hash of a list of sizes, as a record word.
pub(crate) fn sizes(v: &[usize]) -> i64 {
    mix(&v.iter().map(|&x| x as u64).collect::<Vec<_>>()) as i64
}

/// The hash of a byte string (its length, then its bytes in 8-byte
/// little-endian words, the last one zero-padded). Used by DDP's replica
/// fingerprints and checkpoints (feature `train`).
#[cfg_attr(not(feature = "train"), allow(dead_code))]
pub(crate) fn bytes(b: &[u8]) -> u64 {
    let words: Vec<u64> = core::iter::once(b.len() as u64)
        .chain(b.chunks(8).map(|c| {
            let mut w = [0u8; 8];
            w[..c.len()].copy_from_slice(c);
            u64::from_le_bytes(w)
        }))
        .collect();
    mix(&words)
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
        // Byte strings: the length counts (a trailing zero byte differs).
        assert_eq!(bytes(&[1, 2, 3]), bytes(&[1, 2, 3]));
        assert_ne!(bytes(&[1, 2, 3]), bytes(&[1, 2, 3, 0]));
        assert_ne!(bytes(&[]), bytes(&[0]));
    }
}
