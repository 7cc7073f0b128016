//! A pinned world must not change the thread pool the rest of the process
//! gets: when a pinned rank thread is the first to use rayon, the global
//! pool still has one worker per core the process may run on, and its
//! workers may run on all of them (not on rank 0's core only).
//!
//! One test in its own file: rayon's global pool is per process.

use std::collections::BTreeSet;

use ruda_comm::{Communicator, LocalWorld};

fn allowed_cores() -> BTreeSet<usize> {
    core_affinity::get_core_ids()
        .unwrap_or_default()
        .into_iter()
        .map(|c| c.id)
        .collect()
}

#[test]
fn a_pinned_rank_thread_that_uses_rayon_first_leaves_the_global_pool_alone() {
    let before = allowed_cores();
    let parallelism = std::env::var("RAYON_NUM_THREADS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|&n| n > 0)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let ranks = before.len().min(2);
    assert!(ranks >= 1, "this process may run on some core");
    let world = LocalWorld::new(ranks).pin_threads(true);
    assert!(world.pinned_cores().is_some(), "the world is pinned");
    let seen = world
        .run(|c| {
            // Rank 0 uses rayon first, from its pinned thread.
            let mine = allowed_cores();
            let sum = if c.rank() == 0 {
                let (a, b) = rayon_core::join(|| 1 + 1, || 2 + 2);
                a + b
            } else {
                6
            };
            Ok::<_, ()>((mine, sum))
        })
        .unwrap();
    for (r, (mine, sum)) in seen.iter().enumerate() {
        assert_eq!(mine.len(), 1, "rank {r} ran pinned to one core");
        assert_eq!(*sum, 6);
    }
    // The process around the world: the pool rayon would have made anyway.
    assert_eq!(
        allowed_cores(),
        before,
        "the caller's affinity is untouched"
    );
    assert_eq!(
        rayon_core::current_num_threads(),
        parallelism,
        "rayon's global pool is sized as from this thread"
    );
    let worker_cores = rayon_core::broadcast(|_| allowed_cores());
    assert_eq!(worker_cores.len(), parallelism);
    for (w, cores) in worker_cores.iter().enumerate() {
        assert_eq!(
            cores, &before,
            "pool worker {w} may run on every allowed core"
        );
    }
}
