//! Where a serial transform's time goes: [`profile`] runs a closure with
//! the kernels' stage clocks on and returns the time each [`Stage`] took
//! (`ruda bench sht` prints it below its table). The transforms run on the
//! calling thread (their kernels fan out over rayon inside a stage), so
//! the stages of one transform add up to at most its wall time; what they
//! leave out is Burn's own tensor work (reshapes, permutations,
//! allocations) between the kernels.
//!
//! The clocks are per thread: a `profile` call counts the stages of the
//! transforms that run on its own thread inside its closure (a transform
//! its closure hands to another thread is not counted), so threads may
//! profile at the same time — the ranks of a world, each around its part
//! of a distributed transform, waiting for one another — without seeing
//! each other's stages or waiting for each other's calls. Around a
//! distributed transform the stages leave out the time spent in its
//! collectives too. On a rayon worker (a `profile` inside a parallel
//! iterator) the worker may run another item's transform while it waits
//! inside a stage, and that transform's stages then count as well. Outside
//! `profile` a kernel pays one thread-local read per stage.
//!
//! # Example
//! ```
//! use burn_tensor::{DType, Device, Tensor};
//! use ruda_sphere::profile::{Stage, profile};
//! use ruda_sphere::{LatitudeGrid, RealSht, ShtSpec};
//!
//! let spec = ShtSpec::new(33, 64, LatitudeGrid::Equiangular)?;
//! let x = Tensor::<3>::ones([2, 33, 64], (&Device::flex(), DType::F64));
//! let (c, times) = profile(|| RealSht::new(spec).forward::<3, 4>(x));
//! assert_eq!(c?.dims(), [2, 17, 17, 2]);
//! assert!(times.get(Stage::Legendre) > std::time::Duration::ZERO);
//! # Ok::<(), ruda_sphere::SphereError>(())
//! ```

use core::cell::Cell;
use core::time::Duration;
use std::time::Instant;

/// A stage of the serial transforms' work.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Stage {
    /// The real FFTs along the longitudes.
    Fourier,
    /// Moving the spectra between rows-first and orders-first layouts.
    Reorder,
    /// The Legendre step (recurrence and sums).
    Legendre,
    /// Reading tensors into host memory and writing results back
    /// (including f32 ↔ f64 conversion).
    HostCopies,
}

impl Stage {
    /// Every stage, in pipeline order.
    pub const ALL: [Stage; 4] = [
        Stage::Fourier,
        Stage::Reorder,
        Stage::Legendre,
        Stage::HostCopies,
    ];

    /// A short name (`fft`, `reorder`, `legendre`, `host copies`).
    pub fn name(self) -> &'static str {
        match self {
            Stage::Fourier => "fft",
            Stage::Reorder => "reorder",
            Stage::Legendre => "legendre",
            Stage::HostCopies => "host copies",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// The time each stage took during one [`profile`] call.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StageTimes {
    nanos: [u64; 4],
}

impl StageTimes {
    /// The time spent in `stage`.
    pub fn get(&self, stage: Stage) -> Duration {
        Duration::from_nanos(self.nanos[stage.index()])
    }

    /// The time spent in all stages together.
    pub fn total(&self) -> Duration {
        Duration::from_nanos(self.nanos.iter().sum())
    }
}

std::thread_local! {
    /// How many [`profile`] calls this thread is inside.
    static DEPTH: Cell<usize> = const { Cell::new(0) };
    /// This thread's time in each stage while profiling, in nanoseconds.
    static NANOS: Cell<[u64; 4]> = const { Cell::new([0; 4]) };
}

/// Run `f` with the stage clocks of this thread on; its result and the
/// time each stage of the transforms it ran on this thread took. A
/// `profile` inside `f` returns the stages' times during its own closure
/// (and they count towards the outer call's too). Other threads' calls
/// neither wait for this one nor count towards it.
pub fn profile<R>(f: impl FnOnce() -> R) -> (R, StageTimes) {
    /// Leaves the call's depth as it found it, also when `f` unwinds.
    struct Depth;
    impl Drop for Depth {
        fn drop(&mut self) {
            DEPTH.with(|d| d.set(d.get().saturating_sub(1)));
        }
    }
    DEPTH.with(|d| d.set(d.get().saturating_add(1)));
    let depth = Depth;
    let before = NANOS.with(Cell::get);
    let out = f();
    let after = NANOS.with(Cell::get);
    drop(depth);
    let mut times = StageTimes::default();
    for ((t, a), b) in times.nanos.iter_mut().zip(after).zip(before) {
        *t = a.saturating_sub(b);
    }
    (out, times)
}

/// `f`'s result, its time added to `stage` while this thread profiles.
pub(crate) fn timed<R>(stage: Stage, f: impl FnOnce() -> R) -> R {
    if DEPTH.with(Cell::get) == 0 {
        return f();
    }
    let start = Instant::now();
    let out = f();
    let spent = u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX);
    NANOS.with(|n| {
        let mut all = n.get();
        all[stage.index()] = all[stage.index()].saturating_add(spent);
        n.set(all);
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Barrier, mpsc};

    fn sleep_in(stage: Stage, ms: u64) {
        timed(stage, || std::thread::sleep(Duration::from_millis(ms)));
    }

    #[test]
    fn a_stage_is_timed_inside_profile_and_not_outside() {
        sleep_in(Stage::Legendre, 2);
        let ((), none) = profile(|| {});
        assert_eq!(none, StageTimes::default(), "time outside profile counted");
        let (inner, outer) = profile(|| {
            sleep_in(Stage::Reorder, 3);
            let ((), inner) = profile(|| sleep_in(Stage::Legendre, 2));
            inner
        });
        assert!(outer.get(Stage::Reorder) >= Duration::from_millis(3));
        assert!(outer.get(Stage::Legendre) >= Duration::from_millis(2));
        assert_eq!(inner.get(Stage::Reorder), Duration::ZERO);
        assert!(inner.get(Stage::Legendre) >= Duration::from_millis(2));
        assert!(outer.total() >= inner.total());
        assert_eq!(DEPTH.with(Cell::get), 0, "the clocks are off again");
    }

    /// Two threads profile at once, each waiting inside its closure for
    /// the other (as two ranks of a world profiling their parts of a
    /// distributed transform do): both finish (one process-wide profile at
    /// a time deadlocked here), and each counts only its own stages.
    #[test]
    fn threads_that_wait_for_each_other_can_profile_at_once() {
        let barrier = Arc::new(Barrier::new(2));
        let (tx, rx) = mpsc::channel();
        for (stage, ms) in [(Stage::Fourier, 30), (Stage::Legendre, 60)] {
            let (barrier, tx) = (barrier.clone(), tx.clone());
            std::thread::spawn(move || {
                let ((), times) = profile(|| {
                    barrier.wait();
                    sleep_in(stage, ms);
                    barrier.wait();
                });
                let _ = tx.send((stage, ms, times));
            });
        }
        for _ in 0..2 {
            let (stage, ms, times) = rx
                .recv_timeout(Duration::from_secs(20))
                .expect("both profiles end (no deadlock)");
            assert!(times.get(stage) >= Duration::from_millis(ms), "{times:?}");
            assert_eq!(
                times.total(),
                times.get(stage),
                "{stage:?} counted another thread's: {times:?}"
            );
        }
    }

    /// A closure that unwinds leaves the clocks off.
    #[test]
    fn a_panic_inside_profile_leaves_the_clocks_off() {
        let r = std::panic::catch_unwind(|| profile(|| panic!("inside")));
        assert!(r.is_err());
        assert_eq!(DEPTH.with(Cell::get), 0);
        sleep_in(Stage::Fourier, 1);
        assert_eq!(NANOS.with(Cell::get), [0; 4], "timed outside profile");
    }
}
