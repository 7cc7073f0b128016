//! The values a benchmark sends and the results it expects: small whole
//! numbers, exact in every element type at every world size, laid out so
//! that a lost, doubled or misplaced block changes the result.
//!
//! Every value is `1 + (g mod 251)` for some global index `g` (or zero), so
//! it fits a `u8` and is an exact integer in `bf16` (whose integers are exact
//! up to 256). Reductions give each element one non-zero contribution (rank
//! `i mod n` owns element `i`), so a sum is exact whatever `n` is; a missing
//! or doubled rank turns that element into 0 or twice the value.

use super::BenchOp;
use crate::Sample;

/// The period of the pattern: a prime, so that no power-of-two block offset
/// maps a block onto another with the same values.
pub const PERIOD: usize = 251;

/// `1 + (g mod PERIOD)` for `g = (a mod P)·(b mod P) + c` without overflow.
fn value<T: Sample>(a: usize, b: usize, c: usize) -> T {
    let g = ((a % PERIOD) * (b % PERIOD) + c % PERIOD) % PERIOD;
    // `g < 251`, so `g + 1` fits a `u8`.
    T::from_small(g as u8 + 1)
}

/// The pattern value at global index `i`.
fn at<T: Sample>(i: usize) -> T {
    value(0, 0, i)
}

/// Fill `send` (the in/out buffer for all-reduce and broadcast) of `rank`
/// in a world of `n` ranks for `op`, where `count` is `S` in elements (see
/// [`super`]) and `block = count / n`.
///
/// # Example
/// ```
/// use ruda_bench::{BenchOp, expected, fill};
/// // Rank 1 of 2 owns the odd elements of an all-reduce's input.
/// let mut x = [0u8; 4];
/// fill(BenchOp::AllReduce, 1, 2, 4, &mut x);
/// assert_eq!(x, [0, 2, 0, 4]);
/// // The sum over both ranks is the pattern itself.
/// assert_eq!(expected::<u8>(BenchOp::AllReduce, 0, 2, 4, 3), 4);
/// ```
pub fn fill<T: Sample>(op: BenchOp, rank: usize, n: usize, count: usize, send: &mut [T]) {
    let block = count / n.max(1);
    match op {
        BenchOp::AllReduce | BenchOp::ReduceScatter => {
            for (i, x) in send.iter_mut().enumerate() {
                *x = if i % n == rank { at(i) } else { T::zeroed() };
            }
        }
        BenchOp::Broadcast => {
            for (i, x) in send.iter_mut().enumerate() {
                *x = if rank == 0 { at(i) } else { T::zeroed() };
            }
        }
        BenchOp::AllGather => {
            for (j, x) in send.iter_mut().enumerate() {
                *x = value(rank, block, j);
            }
        }
        BenchOp::AllToAll | BenchOp::AllToAllV => {
            // Block `q` goes to rank `q`: index `(rank·n + q)·block + j`.
            for (i, x) in send.iter_mut().enumerate() {
                let (q, j) = (i / block.max(1), i % block.max(1));
                *x = value((rank % PERIOD) * (n % PERIOD) + q, block, j);
            }
        }
    }
}

/// The expected element `i` of `rank`'s result (the in/out buffer for
/// all-reduce and broadcast, else the receive buffer).
pub fn expected<T: Sample>(op: BenchOp, rank: usize, n: usize, count: usize, i: usize) -> T {
    let block = count / n.max(1);
    match op {
        BenchOp::AllReduce | BenchOp::Broadcast | BenchOp::AllGather => at(i),
        BenchOp::ReduceScatter => value(rank, block, i),
        BenchOp::AllToAll | BenchOp::AllToAllV => {
            // Element `j` of block `r` came from rank `r`'s block `rank`.
            let (r, j) = (i / block.max(1), i % block.max(1));
            value((r % PERIOD) * (n % PERIOD) + rank, block, j)
        }
    }
}

/// How many elements of `got` differ (bitwise) from [`expected`].
pub fn count_wrong<T: Sample>(
    op: BenchOp,
    rank: usize,
    n: usize,
    count: usize,
    got: &[T],
) -> usize {
    got.iter()
        .enumerate()
        .filter(|(i, x)| {
            bytemuck::bytes_of(*x) != bytemuck::bytes_of(&expected::<T>(op, rank, n, count, *i))
        })
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::bf16;

    /// A serial model of each collective on the filled inputs, in `u64`,
    /// against `expected` in every element type, up to 300 ranks.
    #[test]
    fn expected_values_are_exact_and_never_wrap() {
        for n in [1, 2, 3, 23, 64, 255, 256, 300] {
            let count = n * 4;
            let block = 4;
            for op in BenchOp::ALL {
                let send_len = if op == BenchOp::AllGather {
                    block
                } else {
                    count
                };
                let inputs: Vec<Vec<u64>> = (0..n)
                    .map(|r| {
                        let mut v = vec![0u32; send_len];
                        fill::<u32>(op, r, n, count, &mut v);
                        v.into_iter().map(u64::from).collect()
                    })
                    .collect();
                for rank in [0, n / 2, n - 1] {
                    let reference: Vec<u64> = match op {
                        BenchOp::AllReduce => (0..count)
                            .map(|i| inputs.iter().map(|x| x[i]).sum())
                            .collect(),
                        BenchOp::ReduceScatter => (0..block)
                            .map(|j| inputs.iter().map(|x| x[rank * block + j]).sum())
                            .collect(),
                        BenchOp::Broadcast => inputs[0].clone(),
                        BenchOp::AllGather => inputs.concat(),
                        BenchOp::AllToAll | BenchOp::AllToAllV => (0..n)
                            .flat_map(|r| inputs[r][rank * block..(rank + 1) * block].to_vec())
                            .collect(),
                    };
                    for (i, &want) in reference.iter().enumerate() {
                        assert!((1..=251).contains(&want), "{op:?} n={n}: {want}");
                        let e: bf16 = expected(op, rank, n, count, i);
                        assert_eq!(e.to_f64(), want as f64, "{op:?} n={n} rank={rank} i={i}");
                        let e: u8 = expected(op, rank, n, count, i);
                        assert_eq!(u64::from(e), want);
                    }
                }
            }
        }
    }

    #[test]
    fn misplaced_blocks_are_counted_wrong() {
        let (n, count) = (4, 4 * 256);
        let block = count / n;
        let mut got: Vec<f32> = (0..count)
            .map(|i| expected(BenchOp::AllGather, 0, n, count, i))
            .collect();
        assert_eq!(count_wrong(BenchOp::AllGather, 0, n, count, &got), 0);
        // Swap two blocks.
        let (a, b) = got.split_at_mut(block);
        a.swap_with_slice(&mut b[..block]);
        assert_eq!(
            count_wrong(BenchOp::AllGather, 0, n, count, &got),
            2 * block
        );
        // Another rank's reduce-scatter block.
        let other: Vec<f32> = (0..block)
            .map(|i| expected(BenchOp::ReduceScatter, 1, n, count, i))
            .collect();
        assert_eq!(
            count_wrong(BenchOp::ReduceScatter, 2, n, count, &other),
            block
        );
    }
}
