//! The conformance suite on the local transport: every operation, every
//! element type, world sizes 1 to 8, sub-groups, property-based sizes.

use std::time::Duration;

use proptest::prelude::*;
use ruda_comm::{Communicator, LocalWorld, ReduceOp};
use ruda_testkit::conformance;

fn world(n: usize) -> LocalWorld {
    LocalWorld::new(n).timeout(Duration::from_secs(60))
}

#[test]
fn every_op_every_dtype_world_sizes_1_to_8() {
    for n in 1..=8 {
        for (len, seed) in [(0, 3), (1, 4), (13, 5), (64, 6)] {
            world(n)
                .run(|c| conformance::check_all_dtypes(&c, len, seed))
                .unwrap_or_else(|e| panic!("n={n} len={len}: {e}"));
        }
    }
}

#[test]
fn sub_groups_world_sizes_1_to_8() {
    for n in 1..=8 {
        for seed in 0..3 {
            world(n)
                .run(|c| conformance::check_split(&c, seed))
                .unwrap_or_else(|e| panic!("n={n} seed={seed}: {e}"));
        }
    }
}

#[test]
fn collectives_on_sub_groups() {
    // Every operation on the sub-groups of a 2×3 grid, rows and columns.
    world(6)
        .run(|c| {
            let row = c.split(Some((c.rank() / 3) as u32), 0)?.expect("row");
            let col = c.split(Some((c.rank() % 3) as u32), 0)?.expect("column");
            conformance::check_all_dtypes(&row, 9, 11)?;
            conformance::check_all_dtypes(&col, 9, 12)?;
            conformance::check_all_dtypes(&c, 9, 13)
        })
        .unwrap();
}

#[test]
fn large_buffers_cross_reduction_chunks() {
    // Beyond the 1024-element reduction chunk and the cache-line partition.
    for n in [2, 3, 5] {
        world(n)
            .run(|c| {
                conformance::check_dtype::<_, f32>(&c, 5000, 21)?;
                conformance::check_dtype::<_, half::bf16>(&c, 3000, 22)
            })
            .unwrap();
    }
}

#[test]
fn streamed_outputs_from_the_threshold() {
    // Blocks of `copy_streaming_from_bytes()` (half the last-level cache,
    // at least 4 MiB) and more are written with non-temporal stores (the
    // blocks of an all-gather and an all-to-all, the reduce-scatters'
    // outputs; a broadcast's pieces of count / n stay below) and
    // all-gathers share their copies. Blocks of the threshold + 64 bytes
    // keep every block 16-byte aligned, so every one streams, with a tail
    // of a quarter tile. Three ranks run at the least threshold (4 MiB),
    // which streams where the cache is at most 8 MiB and shares the
    // all-gathers' copies everywhere: at this machine's 16 MiB they made
    // the test take 3 minutes in a debug build.
    let len = |bytes: usize| bytes / 4 + 16;
    for (n, bytes) in [
        (2, ruda_comm::copy_streaming_from_bytes()),
        (3, ruda_comm::COPY_STREAMING_MIN_BYTES),
    ] {
        world(n)
            .run(|c| conformance::check_dtype::<_, f32>(&c, len(bytes), 23))
            .unwrap_or_else(|e| panic!("n={n}: {e}"));
    }
}

#[test]
fn results_are_bit_identical_on_every_rank() {
    // Each element is reduced once, in rank order, and copied to all.
    let out = world(5)
        .run(|c| {
            let mut v: Vec<f32> = (0..4099)
                .map(|i| ((i * 7919 + c.rank() * 104_729) % 1000) as f32 * 0.001_3 + 1e-7)
                .collect();
            c.all_reduce(&mut v, ReduceOp::Sum).map(|_| v)
        })
        .unwrap();
    for v in &out[1..] {
        assert!(
            v.iter()
                .zip(&out[0])
                .all(|(a, b)| a.to_bits() == b.to_bits())
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, .. ProptestConfig::default() })]

    #[test]
    fn proptest_all_ops(n in 1usize..=8, len in 0usize..40, seed in any::<u64>()) {
        let r = world(n).run(|c| conformance::check_all_dtypes(&c, len, seed));
        prop_assert!(r.is_ok(), "n={} len={} seed={}: {}", n, len, seed, r.unwrap_err());
    }

    #[test]
    fn proptest_split(n in 1usize..=8, seed in any::<u64>()) {
        let r = world(n).run(|c| conformance::check_split(&c, seed));
        prop_assert!(r.is_ok(), "n={} seed={}: {}", n, seed, r.unwrap_err());
    }
}

#[test]
fn replica_groups_world_sizes_1_to_8() {
    for n in 1..=8 {
        for seed in 0..4 {
            LocalWorld::new(n)
                .timeout(Duration::from_secs(20))
                .run(|c| conformance::check_replica_groups(&c, seed))
                .unwrap_or_else(|e| panic!("{n} ranks, seed {seed}: {e}"));
        }
    }
}
