//! Where a serial transform's time goes: [`profile`] runs a closure with
//! the kernels' stage clocks on and returns the time each [`Stage`] took
//! (`ruda bench sht` prints it below its table). The transforms run on the
//! calling thread (their kernels fan out over rayon inside a stage), so
//! the stages of one transform add up to at most its wall time; what they
//! leave out is Burn's own tensor work (reshapes, permutations,
//! allocations) between the kernels.
//!
//! The clocks are process-wide: `profile` calls are serialised, and a
//! transform running on another thread during one is counted too. Outside
//! `profile` a kernel pays one relaxed atomic load per stage.
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

use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use core::time::Duration;
use std::sync::{Mutex, PoisonError};
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

static ON: AtomicBool = AtomicBool::new(false);
static NANOS: [AtomicU64; 4] = [const { AtomicU64::new(0) }; 4];
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

std::thread_local! {
    /// Whether this thread is inside a [`profile`] call.
    static INSIDE: core::cell::Cell<bool> = const { core::cell::Cell::new(false) };
}

fn snapshot() -> [u64; 4] {
    core::array::from_fn(|i| NANOS[i].load(Ordering::Relaxed))
}

/// Run `f` with the stage clocks on; its result and the stages' times. A
/// `profile` inside `f` returns the stages' times during its own closure
/// (and they count towards the outer call's too).
pub fn profile<R>(f: impl FnOnce() -> R) -> (R, StageTimes) {
    if INSIDE.with(core::cell::Cell::get) {
        let before = snapshot();
        let out = f();
        let after = snapshot();
        let mut times = StageTimes::default();
        for ((t, a), b) in times.nanos.iter_mut().zip(after).zip(before) {
            *t = a.saturating_sub(b);
        }
        return (out, times);
    }
    // A panic in an earlier `f` leaves nothing to repair: the counters are
    // reset below.
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(PoisonError::into_inner);
    for n in &NANOS {
        n.store(0, Ordering::Relaxed);
    }
    ON.store(true, Ordering::SeqCst);
    INSIDE.with(|i| i.set(true));
    struct Off;
    impl Drop for Off {
        fn drop(&mut self) {
            ON.store(false, Ordering::SeqCst);
            INSIDE.with(|i| i.set(false));
        }
    }
    let off = Off;
    let out = f();
    drop(off);
    let mut times = StageTimes::default();
    for (t, n) in times.nanos.iter_mut().zip(&NANOS) {
        *t = n.load(Ordering::Relaxed);
    }
    (out, times)
}

/// `f`'s result, its time added to `stage` while profiling.
pub(crate) fn timed<R>(stage: Stage, f: impl FnOnce() -> R) -> R {
    if !ON.load(Ordering::Relaxed) {
        return f();
    }
    let start = Instant::now();
    let out = f();
    let spent = u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX);
    NANOS[stage.index()].fetch_add(spent, Ordering::Relaxed);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    // Other unit tests of this crate may run transforms at the same time
    // (the fourier tests use the orders-first layout and record `Reorder`
    // while the clocks are on), so only lower bounds are asserted here.
    #[test]
    fn a_stage_is_timed_inside_profile_and_not_outside() {
        {
            let _one = ONE_AT_A_TIME.lock().unwrap_or_else(PoisonError::into_inner);
            NANOS[Stage::Legendre.index()].store(0, Ordering::SeqCst);
            timed(Stage::Legendre, || {
                std::thread::sleep(Duration::from_millis(1))
            });
            assert_eq!(NANOS[Stage::Legendre.index()].load(Ordering::SeqCst), 0);
        }
        let (inner, outer) = profile(|| {
            timed(Stage::Reorder, || {
                std::thread::sleep(Duration::from_millis(3))
            });
            let ((), inner) = profile(|| {
                timed(Stage::Legendre, || {
                    std::thread::sleep(Duration::from_millis(2))
                });
            });
            inner
        });
        assert!(outer.get(Stage::Reorder) >= Duration::from_millis(3));
        assert!(outer.get(Stage::Legendre) >= Duration::from_millis(2));
        assert!(inner.get(Stage::Legendre) >= Duration::from_millis(2));
        assert!(outer.total() >= inner.total());
        assert!(!ON.load(Ordering::SeqCst), "the clocks are off again");
    }
}
