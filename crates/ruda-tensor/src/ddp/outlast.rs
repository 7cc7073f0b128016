//! Local work (a checkpoint's file I/O) that may take longer than the
//! collective deadline, with the group kept in step meanwhile: a helper
//! thread exchanges a heartbeat with every rank every [`BEAT`] until every
//! rank's work is done, so a slow disk on one rank is waited for, while a
//! rank that fails or vanishes is still found within the deadline.

use core::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::error::{Error, TensorOp};
use crate::group::Group;

use super::checkpoint::exchange;

/// How often the ranks exchange their heartbeat while one of them works.
/// Far below any useful collective deadline; each beat is one small
/// exchange of four words per rank.
pub(super) const BEAT: Duration = Duration::from_millis(20);

/// The phases of heartbeat exchanges start here (a checkpoint's own
/// exchanges use small phases), so a heartbeat never passes for another
/// exchange of the same call.
const HEARTBEAT_PHASE: i64 = 1 << 20;

/// Run `step` on this thread while a helper thread keeps the group in
/// step: every rank calls it (collectively) with its own step (possibly
/// nothing to do), and every rank returns once every rank's step is done.
/// `step` runs to its end even when the group fails meanwhile (file I/O
/// cannot be cancelled); a panic in it ends this rank's heartbeat as if it
/// were done (its peers learn of the panic from what follows) and is then
/// resumed. There is no upper bound: a step that never returns (a hung
/// disk) keeps the group waiting, as any local work between collectives
/// would; each beat is one record in the flight recorder.
///
/// # Errors
/// The group's errors (a rank that never calls, fails or ends).
pub(super) fn outlasting<G: Group, T>(
    group: &G,
    op: TensorOp,
    phase: i64,
    step: impl FnOnce() -> T,
) -> Result<T, Error> {
    let done = AtomicBool::new(false);
    let phase = HEARTBEAT_PHASE + phase;
    std::thread::scope(|s| {
        let beats = s.spawn(|| -> Result<(), Error> {
            loop {
                let mine = done.load(Ordering::Acquire);
                let all = exchange(group, op, phase, i64::from(mine))?;
                if all.iter().all(|&d| d != 0) {
                    return Ok(());
                }
                if !mine {
                    // Woken early when this rank's step ends.
                    std::thread::park_timeout(BEAT);
                } else {
                    std::thread::sleep(BEAT);
                }
            }
        });
        let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(step));
        done.store(true, Ordering::Release);
        beats.thread().unpark();
        let beat = beats.join();
        let out = match out {
            Ok(out) => out,
            Err(payload) => std::panic::resume_unwind(payload),
        };
        match beat {
            Ok(Ok(())) => Ok(out),
            Ok(Err(e)) => Err(e),
            Err(payload) => std::panic::resume_unwind(payload),
        }
    })
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use ruda_comm::LocalWorld;

    use super::{BEAT, outlasting};
    use crate::HostCollective;
    use crate::ddp::checkpoint::exchange;
    use crate::error::{Error, TensorOp};
    use crate::group::Group;

    const DEADLINE: Duration = Duration::from_millis(600);

    /// Rank 1 works for three deadlines; the others wait through it and
    /// then make an ordinary exchange.
    #[test]
    fn a_step_longer_than_the_deadline_is_waited_for() {
        let started = Instant::now();
        let out = LocalWorld::new(3)
            .timeout(DEADLINE)
            .run(|c| {
                let g = HostCollective::new(c);
                let me = g.rank();
                let got = outlasting(&g, TensorOp::DdpSave, 1, || {
                    if me == 1 {
                        std::thread::sleep(3 * DEADLINE);
                    }
                    me * 10
                })?;
                let after = exchange(&g, TensorOp::DdpSave, 2, got as i64)?;
                Ok::<_, Error>(after)
            })
            .unwrap();
        assert!(out.iter().all(|v| v == &[0, 10, 20]), "{out:?}");
        assert!(started.elapsed() >= 3 * DEADLINE);
        assert!(BEAT < DEADLINE / 4);
    }

    /// The same step without the heartbeat: the waiting ranks' next
    /// exchange times out (what the heartbeat prevents).
    #[test]
    fn without_the_heartbeat_the_same_step_times_out() {
        let out = LocalWorld::new(3).timeout(DEADLINE).run_each(|c| {
            let g = HostCollective::new(c);
            if g.rank() == 1 {
                std::thread::sleep(3 * DEADLINE);
            }
            exchange(&g, TensorOp::DdpSave, 2, 0).map(|_| ())
        });
        assert!(out.iter().any(|o| o.is_err()), "{out:?}");
    }

    /// A rank that ends at once, or one that lives on without calling (for
    /// five deadlines): the other's heartbeat fails with the transport's
    /// error (at once, or within about one deadline, long before the
    /// silent rank returns), and its step still runs to its end.
    #[test]
    fn a_missing_rank_is_found_while_the_others_work() {
        for absent_for in [Duration::ZERO, 5 * DEADLINE] {
            let out = LocalWorld::new(2).timeout(DEADLINE).run_each(|c| {
                let g = HostCollective::new(c);
                let started = Instant::now();
                if g.rank() == 1 {
                    std::thread::sleep(absent_for);
                    return Ok(None);
                }
                let mut ran = false;
                let r = outlasting(&g, TensorOp::DdpSave, 1, || {
                    std::thread::sleep(DEADLINE / 2);
                    ran = true;
                });
                Ok::<_, Error>(Some((r, ran, started.elapsed())))
            });
            match &out[0] {
                Ok(Some((Err(Error::Comm(_)), true, took))) => {
                    assert!(
                        *took < 3 * DEADLINE,
                        "absent for {absent_for:?}: found after {took:?}"
                    )
                }
                other => panic!("absent for {absent_for:?}: {other:?}"),
            }
        }
    }
}
