//! What one rank declares about a collective call.

use crate::Fingerprint;

/// A count list as a rank declared it: its length, and as many of its
/// entries as the transport carried (a transport may carry at most one entry
/// per rank, so a list longer than the group arrives truncated; the rules
/// report its length before reading any entry).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct CountList<'a> {
    /// The length the rank passed.
    pub len: usize,
    /// The entries carried: `values.len() <= len`.
    pub values: &'a [usize],
}

impl<'a> CountList<'a> {
    /// A list carried whole.
    pub(crate) fn whole(values: &'a [usize]) -> Self {
        CountList {
            len: values.len(),
            values,
        }
    }

    /// The entries, when the list has exactly `n` of them and all arrived.
    pub(crate) fn exactly(&self, n: usize) -> Option<&'a [usize]> {
        (self.len == n && self.values.len() == n).then_some(self.values)
    }
}

/// Everything the rules need to know about one rank's call: its fingerprint
/// (operation, sequence number, element type, count, reduction, root), the
/// lengths of its buffers and its count lists. Nothing here points at data.
#[derive(Clone, Copy, Debug)]
pub(crate) struct CallArgs<'a> {
    pub fp: Fingerprint,
    pub send_len: usize,
    pub recv_len: usize,
    /// The first count list (send counts of `all_to_all_v`, receive counts
    /// of `all_gather_v`, `reduce_scatter_v`'s counts).
    pub counts: CountList<'a>,
    /// The second count list (receive counts of `all_to_all_v`).
    pub counts2: CountList<'a>,
}

impl CallArgs<'_> {
    /// A call with no buffers and no count lists.
    #[cfg(test)]
    pub(crate) fn new(fp: Fingerprint) -> Self {
        CallArgs {
            fp,
            send_len: 0,
            recv_len: 0,
            counts: CountList::default(),
            counts2: CountList::default(),
        }
    }
}
