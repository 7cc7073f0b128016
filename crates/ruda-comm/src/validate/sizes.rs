//! Checked arithmetic on element counts: a sum or product that overflows,
//! or that no buffer could hold, is [`InvalidArgument::TooLarge`] (never a
//! wrapped count that would later address memory out of bounds).

use crate::{CommError, ErrorContext, InvalidArgument, OpKind};

/// The largest element count a buffer of `elem_size`-byte elements can hold.
pub(crate) fn max_elements(elem_size: usize) -> usize {
    isize::MAX as usize / elem_size.max(1)
}

fn too_large(op: OpKind, me: usize, count: usize, max: usize) -> CommError {
    CommError::InvalidArgument {
        op,
        rank: me,
        reason: InvalidArgument::TooLarge { count, max },
        context: ErrorContext::none(),
    }
}

/// The sum of a count list, at most `max`.
pub(crate) fn total(
    op: OpKind,
    me: usize,
    counts: &[usize],
    max: usize,
) -> Result<usize, CommError> {
    match counts.iter().try_fold(0usize, |a, &c| a.checked_add(c)) {
        Some(t) if t <= max => Ok(t),
        Some(t) => Err(too_large(op, me, t, max)),
        None => Err(too_large(
            op,
            me,
            counts.iter().fold(0usize, |a, &c| a.saturating_add(c)),
            max,
        )),
    }
}

/// `blocks × len`, at most `max`.
pub(crate) fn product(
    op: OpKind,
    me: usize,
    blocks: usize,
    len: usize,
    max: usize,
) -> Result<usize, CommError> {
    match blocks.checked_mul(len) {
        Some(t) if t <= max => Ok(t),
        Some(t) => Err(too_large(op, me, t, max)),
        None => Err(too_large(op, me, usize::MAX, max)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_and_products_past_the_limit_are_too_large() {
        let op = OpKind::AllToAllV;
        assert_eq!(total(op, 0, &[3, 4], 7).unwrap(), 7);
        let over = |r: Result<usize, CommError>| match r {
            Err(CommError::InvalidArgument {
                reason: InvalidArgument::TooLarge { count, max },
                ..
            }) => (count, max),
            other => panic!("{other:?}"),
        };
        assert_eq!(over(total(op, 0, &[3, 5], 7)), (8, 7));
        assert_eq!(over(total(op, 1, &[usize::MAX, 1], 7)), (usize::MAX, 7));
        assert_eq!(product(op, 0, 3, 4, 12).unwrap(), 12);
        assert_eq!(over(product(op, 0, 3, 5, 12)), (15, 12));
        assert_eq!(over(product(op, 0, 2, usize::MAX, 12)), (usize::MAX, 12));
        assert_eq!(max_elements(8), isize::MAX as usize / 8);
        assert_eq!(max_elements(0), isize::MAX as usize);
    }
}
