//! `ddp::DistributedSampler`: over any dataset length (0 included) and 1
//! to 8 ranks, each tail mode deals every sample as it promises, shuffled
//! epochs are permutations fixed by (seed, epoch) and differ between
//! epochs, and ranks with different lengths get a typed error.

use proptest::prelude::*;
use ruda_comm::{Communicator, LocalWorld, RankError};
use ruda_tensor::ddp::{DistributedSampler, Tail};
use ruda_tensor::{Error, HostCollective};

fn shards(len: usize, ranks: usize, tail: Tail, seed: Option<u64>, epoch: u64) -> Vec<Vec<usize>> {
    (0..ranks)
        .map(|r| {
            let s = DistributedSampler::local(len, ranks, r).with_tail(tail);
            let s = match seed {
                Some(seed) => s.shuffled(seed),
                None => s,
            };
            let idx = s.indices(epoch);
            assert_eq!(idx.len(), s.num_samples(), "num_samples of rank {r}");
            idx
        })
        .collect()
}

proptest! {
    #[test]
    fn every_tail_mode_deals_the_samples_it_promises(
        len in 0usize..60,
        ranks in 1usize..=8,
        tail in prop_oneof![Just(Tail::Uneven), Just(Tail::Drop), Just(Tail::Pad)],
        seed in proptest::option::of(any::<u64>()),
        epoch in 0u64..4,
    ) {
        let out = shards(len, ranks, tail, seed, epoch);
        let sizes: Vec<usize> = out.iter().map(Vec::len).collect();
        let mut all: Vec<usize> = out.concat();
        prop_assert!(all.iter().all(|&i| i < len));
        all.sort_unstable();
        let distinct = {
            let mut d = all.clone();
            d.dedup();
            d
        };
        match tail {
            Tail::Uneven => {
                // Each sample exactly once; shard sizes differ by at most one.
                prop_assert_eq!(&all, &(0..len).collect::<Vec<_>>());
                let (lo, hi) = (sizes.iter().min().unwrap(), sizes.iter().max().unwrap());
                prop_assert!(hi - lo <= 1, "{:?}", sizes);
            }
            Tail::Drop => {
                prop_assert!(sizes.iter().all(|&s| s == len / ranks), "{:?}", sizes);
                prop_assert_eq!(distinct.len(), all.len(), "no sample twice");
            }
            Tail::Pad => {
                prop_assert!(sizes.iter().all(|&s| s == len.div_ceil(ranks)), "{:?}", sizes);
                prop_assert_eq!(&distinct, &(0..len).collect::<Vec<_>>(), "every sample");
                prop_assert!(all.len() - distinct.len() < ranks, "at most ranks − 1 repeats");
            }
        }
        // The same (seed, epoch) deals the same shards.
        prop_assert_eq!(&out, &shards(len, ranks, tail, seed, epoch));
    }
}

/// Shuffling draws another order in another epoch (for a dataset large
/// enough that two equal permutations are out of the question), and the
/// order without a seed is the dataset's.
#[test]
fn shuffled_epochs_differ_and_unshuffled_ones_keep_the_order() {
    let s = DistributedSampler::local(100, 1, 0);
    assert_eq!(s.indices(3), (0..100).collect::<Vec<_>>());
    let s = s.shuffled(42);
    let (a, b) = (s.indices(0), s.indices(1));
    assert_ne!(a, b);
    assert_ne!(a, (0..100).collect::<Vec<_>>());
    assert_ne!(
        s.indices(0),
        DistributedSampler::local(100, 1, 0).shuffled(43).indices(0)
    );
}

/// `new` agrees on the length: ranks with different lengths fail on every
/// rank, naming the first that differs.
#[test]
fn ranks_with_different_lengths_are_an_error_on_every_rank() {
    let out = LocalWorld::new(3).run_each(|c| {
        let len = if c.rank() == 2 { 11 } else { 10 };
        DistributedSampler::new(&HostCollective::new(c), len).map(|_| ())
    });
    for (r, e) in out.into_iter().enumerate() {
        match e {
            Err(RankError::Failed(Error::Sampler {
                offender: 2,
                len: 11,
                expected: 10,
                ..
            })) => {}
            other => panic!("rank {r}: {other:?}"),
        }
    }
}
