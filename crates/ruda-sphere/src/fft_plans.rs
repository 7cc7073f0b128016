//! The longitude FFT plans, made once per element type, length and
//! direction and shared for the life of the process by every transform
//! and thread (a `realfft` plan is immutable and `Sync`): a transform no
//! longer plans its FFTs on every call.
//!
//! The cache holds one plan per length and direction a program has used
//! (its twiddle factors: O(`nlon`) values each), never evicted.

use alloc::boxed::Box;
use alloc::sync::Arc;
use core::any::{Any, TypeId};
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock, PoisonError};

use realfft::{ComplexToReal, FftNum, RealFftPlanner, RealToComplex};

/// Plans by element type, length and direction (`true`: forward).
type Cache = Mutex<HashMap<(TypeId, usize, bool), Box<dyn Any + Send + Sync>>>;

fn cache() -> &'static Cache {
    static CACHE: OnceLock<Cache> = OnceLock::new();
    CACHE.get_or_init(Cache::default)
}

/// The plan under `key`, made by `make` the first time.
fn plan<P: Clone + Send + Sync + 'static>(
    key: (TypeId, usize, bool),
    make: impl FnOnce() -> P,
) -> P {
    // A panic while planning leaves nothing half-inserted: the map only
    // ever gains whole entries, so a poisoned lock is safe to reuse.
    let mut plans = cache().lock().unwrap_or_else(PoisonError::into_inner);
    plans
        .entry(key)
        .or_insert_with(|| Box::new(make()))
        .downcast_ref::<P>()
        .expect("each key holds the plan type it was made with")
        .clone()
}

/// The real-to-complex plan of length `n`.
pub(crate) fn forward<T: FftNum>(n: usize) -> Arc<dyn RealToComplex<T>> {
    plan((TypeId::of::<T>(), n, true), || {
        RealFftPlanner::<T>::new().plan_fft_forward(n)
    })
}

/// The complex-to-real plan of length `n`.
pub(crate) fn inverse<T: FftNum>(n: usize) -> Arc<dyn ComplexToReal<T>> {
    plan((TypeId::of::<T>(), n, false), || {
        RealFftPlanner::<T>::new().plan_fft_inverse(n)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plan_is_made_once_per_type_length_and_direction() {
        assert!(Arc::ptr_eq(&forward::<f64>(360), &forward::<f64>(360)));
        assert!(Arc::ptr_eq(&inverse::<f32>(360), &inverse::<f32>(360)));
        assert_eq!(forward::<f64>(360).len(), 360);
        assert_eq!(forward::<f32>(90).len(), 90);
        assert_eq!(inverse::<f64>(90).len(), 90);
        // Another length or type is another plan.
        let (a, b) = (forward::<f64>(360), forward::<f64>(180));
        assert_eq!((a.len(), b.len()), (360, 180));
    }

    #[test]
    fn plans_are_shared_across_threads() {
        let here = forward::<f64>(720);
        let there = std::thread::spawn(|| forward::<f64>(720)).join().unwrap();
        assert!(Arc::ptr_eq(&here, &there));
    }
}
