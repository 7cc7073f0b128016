//! Parsing byte sizes (`4K`, `64M`) and doubling ranges (`4K:64M`).

use thiserror::Error;

/// A size or range that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SizeError {
    /// Not a number with an optional K/M/G suffix.
    #[error(
        "`{0}` is not a size: use a number of bytes with an optional K, M or G suffix (powers of 1024), e.g. 4K"
    )]
    Size(String),
    /// A range whose end is below its start.
    #[error("the range {0} ends below its start")]
    Backwards(String),
}

/// Parse `4096`, `4K`, `1M`, `2G` (binary multiples).
///
/// # Errors
/// [`SizeError::Size`] for anything else, or zero.
///
/// # Example
/// ```
/// assert_eq!(ruda_cli::sizes::parse_size("64M").unwrap(), 64 << 20);
/// ```
pub fn parse_size(s: &str) -> Result<usize, SizeError> {
    let t = s.trim();
    let (num, mult) = match t.char_indices().last() {
        Some((i, 'K' | 'k')) => (&t[..i], 1usize << 10),
        Some((i, 'M' | 'm')) => (&t[..i], 1 << 20),
        Some((i, 'G' | 'g')) => (&t[..i], 1 << 30),
        _ => (t, 1),
    };
    num.parse::<usize>()
        .ok()
        .and_then(|n| n.checked_mul(mult))
        .filter(|&n| n > 0)
        .ok_or_else(|| SizeError::Size(s.to_string()))
}

/// Parse a size or a doubling range `LO:HI` into the sizes to run.
///
/// # Errors
/// As [`parse_size`], and [`SizeError::Backwards`].
///
/// # Example
/// ```
/// assert_eq!(ruda_cli::sizes::parse_sizes("4K:16K").unwrap(), vec![4096, 8192, 16384]);
/// ```
pub fn parse_sizes(s: &str) -> Result<Vec<usize>, SizeError> {
    match s.split_once(':') {
        None => Ok(vec![parse_size(s)?]),
        Some((lo, hi)) => {
            let (lo, hi) = (parse_size(lo)?, parse_size(hi)?);
            if hi < lo {
                return Err(SizeError::Backwards(s.to_string()));
            }
            let mut v = Vec::new();
            let mut x = lo;
            while x <= hi {
                v.push(x);
                x *= 2;
            }
            Ok(v)
        }
    }
}

/// Human form of a byte count (`4K`, `64M`).
pub fn human(bytes: usize) -> String {
    match bytes {
        b if b >= 1 << 30 && b % (1 << 30) == 0 => format!("{}G", b >> 30),
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{}M", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{}K", b >> 10),
        b => format!("{b}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_and_reject() {
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert_eq!(parse_size("4k").unwrap(), 4096);
        assert_eq!(parse_sizes("4K:64M").unwrap().len(), 15);
        assert_eq!(parse_sizes("1M:1M").unwrap(), vec![1 << 20]);
        assert!(matches!(parse_size("0"), Err(SizeError::Size(_))));
        assert!(matches!(parse_size("4Q"), Err(SizeError::Size(_))));
        assert!(matches!(parse_sizes("8K:4K"), Err(SizeError::Backwards(_))));
        assert_eq!(human(64 << 20), "64M");
        assert_eq!(human(1000), "1000");
    }
}
