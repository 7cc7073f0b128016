//! `RUDA_COPY_STREAMING_FROM_BYTES` sets the size from which copies stream
//! (its own process, since it changes the environment, and one test, since
//! the threshold is read once). At 64 KiB, small calls take the streamed
//! paths: all-gathers whose pieces land at any offset in uneven blocks on
//! 3 to 5 ranks, all-to-alls and broadcasts, each checked element by
//! element against what every rank sent.

use std::time::Duration;

use ruda_comm::{COPY_STREAMING_ENV, CommError, Communicator, LocalWorld};

fn value(r: usize, i: usize) -> u32 {
    (r as u32) << 24 | (i as u32 & 0x00ff_ffff)
}

#[test]
fn the_variable_moves_the_threshold_and_streamed_calls_stay_exact() {
    // SAFETY: this binary has a single test: no other thread reads the environment meanwhile.
    unsafe { std::env::set_var(COPY_STREAMING_ENV, "65536") };
    assert_eq!(ruda_comm::copy_streaming_from_bytes(), 65536);
    // All-gathers share from 1 MiB blocks and now stream there too: blocks
    // of odd lengths and an empty one put every piece at its own offset.
    let mib = (1 << 20) / 4;
    for n in 3..=5 {
        let counts: Vec<usize> = (0..n)
            .map(|r| match r % 3 {
                0 => mib + 2 * r + 1,
                1 => 0,
                _ => mib / 2 + 7,
            })
            .collect();
        let total: usize = counts.iter().sum();
        let out = LocalWorld::new(n)
            .timeout(Duration::from_secs(60))
            .run(|c| {
                let r = c.rank();
                let mine: Vec<u32> = (0..counts[r]).map(|i| value(r, i)).collect();
                let mut gathered = vec![u32::MAX; total];
                c.all_gather_v(&mine, &mut gathered, &counts)?;
                // All-to-all blocks of 64 KiB + 3 elements: each streams, and
                // every block but the first starts off a 16-byte boundary.
                let block = (1 << 14) + 3;
                let send: Vec<u32> = (0..n * block).map(|i| value(r, i)).collect();
                let mut swapped = vec![u32::MAX; n * block];
                c.all_to_all(&send, &mut swapped)?;
                let mut b: Vec<u32> = (0..(1 << 16) + 5)
                    .map(|i| if r == 1 { value(1, i) } else { 0 })
                    .collect();
                c.broadcast(&mut b, 1)?;
                Ok::<_, CommError>((gathered, swapped, b))
            })
            .unwrap();
        for (me, (gathered, swapped, b)) in out.iter().enumerate() {
            let mut at = 0;
            for (r, &k) in counts.iter().enumerate() {
                for i in 0..k {
                    assert_eq!(gathered[at + i], value(r, i), "gather: n {n} rank {me}");
                }
                at += k;
            }
            let block = (1 << 14) + 3;
            for q in 0..n {
                for i in 0..block {
                    let want = value(q, me * block + i);
                    assert_eq!(swapped[q * block + i], want, "all-to-all: n {n} rank {me}");
                }
            }
            assert!(
                b.iter().enumerate().all(|(i, &x)| x == value(1, i)),
                "broadcast: n {n} rank {me}"
            );
        }
    }
}
