//! Pinning rank threads to cores: when a world fits the cores this process
//! may run on, rank `r` runs only on the `r`-th of them, as `mpirun` binds
//! each process to a core. Floating ranks hand off slowly when the scheduler
//! puts two on one core (each hand-off then waits for a time slice).
//!
//! Pinning must not change the process around the world. A thread inherits
//! its creator's affinity, and rayon sizes and spawns its global pool on
//! first use from the thread that uses it first: if that were a pinned rank
//! thread (Burn's CPU backend and ruda-sphere use rayon), the whole process
//! would get a one-worker pool stuck on rank 0's core. So a pinned world
//! makes sure rayon's global pool exists before it pins anything, created
//! with the affinity of the thread that starts the world and rayon's default
//! settings — the pool the process would have had without ruda. A program
//! that wants other settings calls `rayon::ThreadPoolBuilder::build_global`
//! before it starts a pinned world (or turns pinning off).

use core_affinity::CoreId;

/// The environment variable that turns pinning off by default (`0`, `off`,
/// `false` or `no`); [`crate::LocalWorld::pin_threads`] overrides it.
pub const PIN_ENV: &str = "RUDA_PIN";

/// Where the ranks of one world run: one core each, or anywhere.
#[derive(Clone, Debug)]
pub(crate) struct Placement {
    cores: Option<Vec<CoreId>>,
}

impl Placement {
    /// The placement of a world of `size` ranks: pinned when `pin` (else
    /// `RUDA_PIN`, else on) asks for it and the calling thread may run on at
    /// least `size` cores.
    pub(crate) fn for_world(size: usize, pin: Option<bool>) -> Self {
        let wanted = pin.unwrap_or_else(|| {
            std::env::var(PIN_ENV).map_or(true, |v| {
                !matches!(
                    v.trim().to_ascii_lowercase().as_str(),
                    "0" | "off" | "false" | "no"
                )
            })
        });
        let cores = wanted
            .then(core_affinity::get_core_ids)
            .flatten()
            .filter(|c| size >= 1 && c.len() >= size)
            .map(|mut c| {
                c.truncate(size);
                c
            });
        Placement { cores }
    }

    /// The core ids of ranks `0..size`, when pinned.
    pub(crate) fn cores(&self) -> Option<Vec<usize>> {
        self.cores
            .as_ref()
            .map(|c| c.iter().map(|c| c.id).collect())
    }

    /// Pin the calling thread, rank `rank`'s, to its core; nothing when
    /// the world is not pinned (or the system refuses, which only costs
    /// speed).
    pub(crate) fn enter(&self, rank: usize) {
        if let Some(core) = self.cores.as_ref().and_then(|c| c.get(rank)) {
            // Create rayon's global pool now, while this thread still has
            // the affinity of the thread that started the world, if nothing
            // has yet (see the module documentation).
            let _ = rayon_core::current_num_threads();
            let _ = core_affinity::set_for_current(*core);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_world_larger_than_the_machine_floats() {
        let cores = core_affinity::get_core_ids().map_or(0, |c| c.len());
        assert!(
            Placement::for_world(cores + 1, Some(true))
                .cores()
                .is_none()
        );
        assert!(Placement::for_world(1, Some(false)).cores().is_none());
        if cores >= 1 {
            let p = Placement::for_world(1, Some(true))
                .cores()
                .expect("one rank fits");
            assert_eq!(p.len(), 1);
        }
    }

    #[test]
    fn pinned_ranks_run_on_their_own_core() {
        let cores = core_affinity::get_core_ids().unwrap_or_default();
        let n = cores.len().min(2);
        if n == 0 {
            return;
        }
        let p = Placement::for_world(n, Some(true));
        let ids = p.cores().expect("fits");
        let seen: Vec<Vec<usize>> = std::thread::scope(|s| {
            (0..n)
                .map(|r| {
                    let p = &p;
                    s.spawn(move || {
                        p.enter(r);
                        core_affinity::get_core_ids()
                            .unwrap_or_default()
                            .iter()
                            .map(|c| c.id)
                            .collect()
                    })
                })
                .collect::<Vec<_>>()
                .into_iter()
                .map(|h| h.join().unwrap())
                .collect()
        });
        for (r, s) in seen.iter().enumerate() {
            assert_eq!(s, &vec![ids[r]], "rank {r} allowed on exactly its core");
        }
    }
}
