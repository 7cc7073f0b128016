//! All-gathers whose largest block reaches 1 MiB share their copies: rank
//! `r` writes the `r`-th piece of every block into every rank's output.
//! Every output element must still come from the right block, with uneven
//! blocks, an empty one, misaligned offsets and world sizes 1 to 5, and a
//! call just below the threshold (each rank copying into its own output)
//! must give the same result.

use std::time::Duration;

use ruda_comm::{CommError, Communicator, LocalWorld};

/// The value rank `r`'s block holds at `i`: distinct across ranks and
/// positions, exact in `u32`.
fn value(r: usize, i: usize) -> u32 {
    (r as u32) << 24 | (i as u32 & 0x00ff_ffff)
}

/// All-gather blocks of `counts[r]` elements on `counts.len()` ranks and
/// check every rank's output element by element.
fn check(counts: &[usize]) {
    let n = counts.len();
    let total: usize = counts.iter().sum();
    let out = LocalWorld::new(n)
        .timeout(Duration::from_secs(60))
        .run(|c| {
            let mine: Vec<u32> = (0..counts[c.rank()]).map(|i| value(c.rank(), i)).collect();
            let mut recv = vec![u32::MAX; total];
            c.all_gather_v(&mine, &mut recv, counts)?;
            Ok::<_, CommError>(recv)
        })
        .unwrap();
    for (me, recv) in out.iter().enumerate() {
        let mut at = 0;
        for (r, &k) in counts.iter().enumerate() {
            for i in 0..k {
                assert_eq!(
                    recv[at + i],
                    value(r, i),
                    "rank {me} of {n}, block {r} at {i}, counts {counts:?}"
                );
            }
            at += k;
        }
    }
}

/// A 1 MiB block of `u32`.
const MIB: usize = (1 << 20) / 4;

#[test]
fn shared_all_gathers_give_every_block_to_every_rank() {
    for n in 1..=5 {
        // Even blocks at the threshold.
        check(&vec![MIB; n]);
        // Uneven: one at the threshold, one empty, odd lengths, so that
        // blocks start off a cache line.
        let counts: Vec<usize> = (0..n)
            .map(|r| match r % 3 {
                0 => MIB + 3,
                1 => 0,
                _ => 1001 + r,
            })
            .collect();
        check(&counts);
    }
}

#[test]
fn just_below_the_threshold_each_rank_copies_its_own() {
    for n in [2, 3] {
        check(&vec![MIB - 1; n]);
    }
}
