//! The one timing harness of every ruda benchmark: per-iteration times of
//! the slowest rank, their median and 99th percentile, and an independent
//! wall-clock figure from back-to-back calls.

use std::time::Instant;

use ruda_comm::{CommError, Communicator, ReduceOp};

/// Per-iteration times in seconds, each the slowest rank's, in the order
/// they were measured.
///
/// # Example
/// ```
/// use ruda_bench::Samples;
/// let s = Samples::new(vec![3.0, 1.0, 2.0, 10.0]);
/// assert_eq!(s.median(), 2.5);
/// assert_eq!(s.quantile(0.99), 10.0);
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct Samples {
    times: Vec<f64>,
}

impl Samples {
    /// Wrap measured times (seconds).
    pub fn new(times: Vec<f64>) -> Self {
        Samples { times }
    }

    /// The times, in measurement order.
    pub fn times(&self) -> &[f64] {
        &self.times
    }

    fn sorted(&self) -> Vec<f64> {
        let mut v = self.times.clone();
        v.sort_by(f64::total_cmp);
        v
    }

    /// The median: the middle time, or the mean of the two middle ones; NaN
    /// when empty. The one median every ruda benchmark reports.
    pub fn median(&self) -> f64 {
        let v = self.sorted();
        let m = v.len() / 2;
        match v.len() {
            0 => f64::NAN,
            l if l % 2 == 1 => v[m],
            _ => 0.5 * (v[m - 1] + v[m]),
        }
    }

    /// The shortest time; NaN when empty. What a roofline divides by: a
    /// rate the machine reached once is a rate it can reach (STREAM too
    /// reports its best rate), where a median under-rates a machine whose
    /// cache behaviour makes its times bimodal.
    ///
    /// # Example
    /// ```
    /// use ruda_bench::Samples;
    /// assert_eq!(Samples::new(vec![3.0, 1.0, 2.0]).best(), 1.0);
    /// assert!(Samples::new(Vec::new()).best().is_nan());
    /// ```
    pub fn best(&self) -> f64 {
        self.times
            .iter()
            .copied()
            .reduce(f64::min)
            .unwrap_or(f64::NAN)
    }

    /// The `q`-quantile by nearest rank (the smallest time with at least a
    /// fraction `q` of the times at or below it); NaN when empty.
    pub fn quantile(&self, q: f64) -> f64 {
        let v = self.sorted();
        if v.is_empty() {
            return f64::NAN;
        }
        let k = ((q.clamp(0.0, 1.0) * v.len() as f64).ceil() as usize).clamp(1, v.len());
        v[k - 1]
    }
}

/// Warm-up and timed iterations for one size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Iterations {
    /// Untimed calls first (they also fault in every page).
    pub warmup: usize,
    /// Timed calls.
    pub iters: usize,
}

impl Iterations {
    /// The default for `bytes`: about 256 MiB of `S` in all, between 10 and
    /// 2000 timed calls (so that small sizes have a meaningful p99), and a
    /// tenth as many warm-up calls, at least two.
    ///
    /// # Example
    /// ```
    /// use ruda_bench::Iterations;
    /// assert_eq!(Iterations::auto(4096).iters, 2000);
    /// assert_eq!(Iterations::auto(64 << 20).iters, 10);
    /// ```
    pub fn auto(bytes: usize) -> Self {
        let iters = ((256usize << 20) / bytes.max(1)).clamp(10, 2000);
        Iterations {
            warmup: (iters / 10).max(2),
            iters,
        }
    }
}

/// Time `call` on every rank of `comm` (call from every rank with the same
/// arguments): `warmup` untimed calls, then `iters` timed ones, each after
/// `prep` (untimed) and a barrier; a call's time is the slowest rank's, from
/// leaving the barrier to returning. Every rank returns the same samples.
///
/// # Errors
/// The first error of `prep`'s call or of the harness's own barrier and
/// maximum.
///
/// # Example
/// ```
/// use ruda_bench as bench;
/// use ruda_comm::{Communicator, LocalWorld, ReduceOp};
/// let s = LocalWorld::new(2).run(|c| {
///     let mut x = vec![1.0f32; 256];
///     bench::time_calls(&c, 1, 5, || (), |()| c.all_reduce(&mut x, ReduceOp::Sum))
/// }).unwrap();
/// assert_eq!(s[0].times().len(), 5);
/// assert_eq!(s[0], s[1]);
/// ```
pub fn time_calls<C, S, E>(
    comm: &C,
    warmup: usize,
    iters: usize,
    mut prep: impl FnMut() -> S,
    mut call: impl FnMut(S) -> Result<(), E>,
) -> Result<Samples, E>
where
    C: Communicator,
    E: From<CommError>,
{
    for _ in 0..warmup {
        call(prep())?;
    }
    let mut times = Vec::with_capacity(iters);
    for _ in 0..iters {
        let s = prep();
        comm.barrier()?;
        let t = Instant::now();
        call(s)?;
        let mut slowest = [t.elapsed().as_secs_f64()];
        comm.all_reduce(&mut slowest, ReduceOp::Max)?;
        times.push(slowest[0]);
    }
    Ok(Samples::new(times))
}

/// The independent wall-clock figure: one barrier, then `calls` calls back
/// to back with nothing between them; the slowest rank's total time divided
/// by `calls`, in seconds. It agrees with [`time_calls`]'s median when
/// nothing but the calls takes time, and reads higher when the calls have a
/// noisy tail (it is a mean).
///
/// # Errors
/// The first error of `call` or of the harness's barrier and maximum.
///
/// # Example
/// ```
/// use ruda_bench as bench;
/// use ruda_comm::{Communicator, LocalWorld};
/// let t = LocalWorld::new(2).run(|c| bench::time_back_to_back(&c, 10, || c.barrier())).unwrap();
/// assert!(t[0] > 0.0 && t[0] == t[1]);
/// ```
pub fn time_back_to_back<C, E>(
    comm: &C,
    calls: usize,
    mut call: impl FnMut() -> Result<(), E>,
) -> Result<f64, E>
where
    C: Communicator,
    E: From<CommError>,
{
    comm.barrier()?;
    let t = Instant::now();
    for _ in 0..calls {
        call()?;
    }
    let mut slowest = [t.elapsed().as_secs_f64()];
    comm.all_reduce(&mut slowest, ReduceOp::Max)?;
    Ok(slowest[0] / calls.max(1) as f64)
}

/// The median of [`time_calls`] over `it` for a call `f` that reports no
/// errors of its own (a benchmark's closure, which panics on failure):
/// seconds, the slowest rank's.
///
/// # Errors
/// The harness's own barrier and maximum.
///
/// # Example
/// ```
/// use ruda_bench::{Iterations, median_seconds};
/// use ruda_comm::{Communicator, LocalWorld, ReduceOp};
/// let it = Iterations { warmup: 1, iters: 3 };
/// let t = LocalWorld::new(2).run(|c| {
///     median_seconds(&c, it, || vec![1.0f32; 64], |mut x| c.all_reduce(&mut x, ReduceOp::Sum).unwrap())
/// }).unwrap();
/// assert!(t[0] > 0.0 && t[0] == t[1]);
/// ```
pub fn median_seconds<C: Communicator, S>(
    comm: &C,
    it: Iterations,
    prep: impl FnMut() -> S,
    mut f: impl FnMut(S),
) -> Result<f64, CommError> {
    time_calls(comm, it.warmup, it.iters, prep, |s| {
        f(s);
        Ok::<_, CommError>(())
    })
    .map(|s| s.median())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_and_quantiles() {
        let s = Samples::new((1..=100).map(f64::from).collect());
        assert_eq!(s.median(), 50.5);
        assert_eq!(s.quantile(0.5), 50.0);
        assert_eq!(s.quantile(0.99), 99.0);
        assert_eq!(s.quantile(1.0), 100.0);
        assert_eq!(s.quantile(0.0), 1.0);
        assert_eq!(Samples::new(vec![7.0]).quantile(0.99), 7.0);
        assert!(Samples::new(vec![]).median().is_nan());
        assert_eq!(Samples::new(vec![3.0, 1.0, 2.0]).median(), 2.0);
    }

    #[test]
    fn iterations_stay_in_bounds() {
        assert_eq!(
            Iterations::auto(1),
            Iterations {
                warmup: 200,
                iters: 2000
            }
        );
        assert_eq!(
            Iterations::auto(1 << 20),
            Iterations {
                warmup: 25,
                iters: 256
            }
        );
        assert_eq!(Iterations::auto(usize::MAX).iters, 10);
        assert_eq!(Iterations::auto(usize::MAX).warmup, 2);
    }
}
