//! The MPI transport under real `mpirun` (feature `mpi`): the conformance
//! suite on 1 to 4 ranks (with and without the per-call checks), the
//! failure suite, a rank that arrives after the deadline, two threads per
//! process, calls after finalisation, and a panic that takes the job down. A libtest binary cannot initialise MPI per test, so
//! each case launches the `ruda-mpi-conformance` binary under `mpirun`.
//!
//! Without `mpirun` on the PATH the tests say so and pass, unless
//! `RUDA_REQUIRE_MPI=1` (set by CI), which makes its absence a failure.
#![cfg(feature = "mpi")]

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn mpirun() -> Option<&'static str> {
    let found = Command::new("mpirun")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok();
    if !found {
        assert!(
            std::env::var("RUDA_REQUIRE_MPI").as_deref() != Ok("1"),
            "RUDA_REQUIRE_MPI=1 but mpirun is not on the PATH (install openmpi-bin)"
        );
        eprintln!(
            "mpirun not found: MPI tests not run (set RUDA_REQUIRE_MPI=1 to make this a failure)"
        );
        return None;
    }
    Some("mpirun")
}

/// One `mpirun` at a time in this binary: concurrent mpiruns share Open
/// MPI's session directory (`/tmp/ompi.HOST.UID`), and one that finishes
/// can remove it while another creates its own inside ("A call to mkdir
/// was unable to create the desired directory", seen in a CI run).
static ONE_MPIRUN: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Run the conformance binary on `n` ranks with `args`, killing it after `limit`.
fn launch(n: usize, args: &[&str], unchecked: bool, limit: Duration) -> Option<(Output, Duration)> {
    let mpirun = mpirun()?;
    let _one = ONE_MPIRUN
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let mut cmd = Command::new("timeout");
    cmd.args(["-k", "10"])
        .arg(limit.as_secs().to_string())
        .arg(mpirun)
        .args([
            "--oversubscribe",
            "--allow-run-as-root",
            "--bind-to",
            "none",
            "-n",
            &n.to_string(),
        ]);
    cmd.arg(env!("CARGO_BIN_EXE_ruda-mpi-conformance"));
    if unchecked {
        cmd.arg("--unchecked");
    }
    cmd.args(args);
    let start = Instant::now();
    let out = cmd.output().expect("start mpirun");
    Some((out, start.elapsed()))
}

/// Run the conformance suite on `n` ranks with `args` and check that it
/// passed whole; its output, or `None` without `mpirun`.
fn conformance(n: usize, args: &[&str], unchecked: bool) -> Option<String> {
    let (out, _) = launch(n, args, unchecked, Duration::from_secs(300))?;
    let t = text(&out);
    assert!(out.status.success(), "{n} ranks, {args:?}:\n{t}");
    assert!(
        t.contains(&format!(
            "mpi conformance on {n} ranks: 13 passed, 0 failed"
        )),
        "{t}"
    );
    Some(t)
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn conformance_on_one_to_four_ranks() {
    for n in 1..=4 {
        let Some(t) = conformance(n, &[], false) else {
            return;
        };
        // Ranks on one host move data through shared memory by default,
        // and read each other directly where the kernel lets them (same
        // user, no Yama restriction) and each has a CPU.
        let on = if n > 1 { "on" } else { "off" };
        assert!(t.contains(&format!("rank 0: shared memory {on}")), "{t}");
        let direct = if single_copy_expected(n) { "on" } else { "off" };
        assert!(t.contains(&format!("rank 0: single copy {direct}")), "{t}");
        assert!(!t.contains("could not read"), "no read refused:\n{t}");
    }
}

/// The same suite with the data of ranks on one host moving through MPI
/// (`shared_memory(false)`): the same results.
#[test]
fn conformance_through_mpi_on_one_host() {
    for n in [2, 3] {
        let Some(t) = conformance(n, &["conformance", "--no-shm"], false) else {
            return;
        };
        assert!(t.contains("rank 0: shared memory off"), "{t}");
    }
}

/// The suite through one-page shared-memory slots: its 5000-element
/// calls take many rounds (an f64 all-reduce 10, a reduce-scatter block
/// of 1/n of a slot per round), every dtype with a partial last round.
#[test]
fn conformance_through_small_shared_memory_slots() {
    for n in [2, 3] {
        let Some(t) = conformance(n, &["conformance", "--slot", "4096"], false) else {
            return;
        };
        assert!(t.contains("rank 0: shared memory on"), "{t}");
    }
}

/// The CPUs this test's process may run on (its affinity mask, which
/// `mpirun`'s ranks inherit: the MPI transport counts the union of its
/// ranks' masks).
fn cpus() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let list = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .unwrap_or("0")
        .trim();
    list.split(',')
        .map(|r| match r.split_once('-') {
            Some((a, b)) => b.parse::<usize>().unwrap_or(0) + 1 - a.parse::<usize>().unwrap_or(0),
            None => 1,
        })
        .sum()
}

/// Whether the kernel lets a rank read a sibling rank's memory: Yama's
/// `ptrace_scope` absent or 0, or 1 or 2 with `CAP_SYS_PTRACE` in the
/// effective set (bit 19 of `CapEff`). (A seccomp profile that refuses
/// the call would make the tests that expect single copies fail: they
/// then say so.)
fn siblings_readable() -> bool {
    let scope = std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope")
        .map_or(0, |s| s.trim().parse::<u32>().unwrap_or(3));
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let ptrace = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|c| u64::from_str_radix(c.trim(), 16).ok())
        .is_some_and(|caps| caps & (1 << 19) != 0);
    scope == 0 || (scope <= 2 && ptrace)
}

/// Whether `n` ranks on this machine read each other directly.
fn single_copy_expected(n: usize) -> bool {
    n > 1 && n <= cpus() && siblings_readable()
}

/// The suite with every all-gather, all-to-all, broadcast and
/// reduce-scatter of the one-host world (and its splits) reading peers'
/// buffers directly, from zero-length pieces up: the same results; and
/// with single copies off, the slots alone. Ranks past the CPUs turn
/// single copies off (slower there).
#[test]
fn conformance_through_single_copies_and_without_them() {
    for n in [2, 3, 4] {
        let Some(t) = conformance(n, &["conformance", "--single-copy-all"], false) else {
            return;
        };
        let on = if single_copy_expected(n) { "on" } else { "off" };
        assert!(t.contains(&format!("rank 0: single copy {on}")), "{t}");
        // A direct call that went wrong could fall back to the slots and
        // still pass: none may have.
        assert!(!t.contains("could not read"), "no read refused:\n{t}");
    }
    let Some(t) = conformance(3, &["conformance", "--slots-only"], false) else {
        return;
    };
    assert!(t.contains("rank 0: shared memory on"), "{t}");
    assert!(t.contains("rank 0: single copy off"), "{t}");
}

/// Nine ranks: past the groups whose small calls carry their data with
/// their call records (at most 8), so the world's calls exchange records
/// only, while its halves (5 and 4 ranks) carry data.
#[test]
fn conformance_on_nine_ranks() {
    conformance(9, &[], false);
}

#[test]
fn conformance_without_the_per_call_checks() {
    for n in [2, 3] {
        if conformance(n, &[], true).is_none() {
            return;
        }
    }
}

/// Checked collectives through MPI on copies (`staged(true)`, shared
/// memory off) give the same results as on the caller's buffers.
#[test]
fn conformance_with_the_data_phase_on_copies() {
    for n in [2, 3] {
        if conformance(n, &["conformance", "--staged", "--no-shm"], false).is_none() {
            return;
        }
    }
}

#[test]
fn mismatches_are_errors_on_every_rank() {
    for (n, passed) in [(1, 3), (2, 7), (3, 7)] {
        let Some((out, _)) = launch(n, &["failures"], false, Duration::from_secs(120)) else {
            return;
        };
        let t = text(&out);
        assert!(out.status.success(), "{n} ranks:\n{t}");
        assert!(
            t.contains(&format!(
                "mpi failures on {n} ranks: {passed} passed, 0 failed"
            )),
            "{t}"
        );
    }
}

/// The per-call checks can no longer be turned off from the environment:
/// the variable that used to do it (`RUDA_MPI_CHECKS=0`, exported to every
/// rank) leaves them on, so the failure suite (which refuses to run
/// without checks) still passes.
#[test]
fn the_environment_cannot_turn_the_checks_off() {
    let Some(mpirun) = mpirun() else {
        return;
    };
    let _one = ONE_MPIRUN
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let out = Command::new("timeout")
        .args(["-k", "10", "120", mpirun])
        .args([
            "--oversubscribe",
            "--allow-run-as-root",
            "--bind-to",
            "none",
        ])
        .args(["-n", "2", "-x", "RUDA_MPI_CHECKS"])
        .env("RUDA_MPI_CHECKS", "0")
        .arg(env!("CARGO_BIN_EXE_ruda-mpi-conformance"))
        .arg("failures")
        .output()
        .expect("start mpirun");
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    assert!(
        t.contains("mpi failures on 2 ranks: 7 passed, 0 failed"),
        "{t}"
    );
}

/// `--unchecked` belongs to the conformance mode alone: a mode that makes
/// mismatched calls on purpose must not run without the checks.
#[test]
fn unchecked_is_refused_outside_the_conformance_mode() {
    let Some((out, _)) = launch(2, &["failures"], true, Duration::from_secs(60)) else {
        return;
    };
    let t = text(&out);
    assert!(!out.status.success(), "{t}");
    assert!(
        t.contains("--unchecked is for the conformance mode only"),
        "{t}"
    );
}

#[test]
fn a_rank_that_arrives_late_is_a_timeout_naming_it_and_the_job_ends() {
    let Some((out, took)) = launch(3, &["timeout"], false, Duration::from_secs(60)) else {
        return;
    };
    let t = text(&out);
    assert_ne!(out.status.code(), Some(124), "the job hung:\n{t}");
    assert!(took < Duration::from_secs(30), "{took:?}");
    for r in 0..2 {
        assert!(
            t.contains(&format!("rank {r}: timed out waiting for rank 2")),
            "{t}"
        );
    }
    assert!(
        t.contains("aborting the MPI job instead of finalising"),
        "{t}"
    );
    assert!(!t.contains("FAILED"), "{t}");
}

/// A rank that arrives just after one peer's deadline but before
/// another's: its record exchange completes with the second, which then
/// moves to the data phase that the first (timed out) never joins. With
/// MPI's data phase (shared memory off) on copies (`staged(true)`) every rank must end within
/// twice its timeout (arrival, then the data phase's own deadline) plus a
/// margin, with the right result or a `Timeout` (the mode checks both and
/// prints a line per rank), and the job must end (it is aborted: the ranks
/// timed out).
#[test]
fn a_staged_straggler_ends_every_rank_in_time() {
    let Some((out, took)) = launch(
        3,
        &["straggler", "--staged", "--no-shm"],
        false,
        Duration::from_secs(60),
    ) else {
        return;
    };
    let t = text(&out);
    assert_ne!(out.status.code(), Some(124), "the job hung:\n{t}");
    assert!(took < Duration::from_secs(30), "{took:?}\n{t}");
    for r in 0..3 {
        assert!(
            t.contains(&format!(
                "rank {r}: straggler ended within twice the timeout"
            )),
            "rank {r} did not end in time:\n{t}"
        );
    }
    // The case this test is for: some rank got past the record exchange
    // and had to give up in the data phase.
    assert!(t.contains("a timeout in the data phase"), "{t}");
    assert!(!t.contains("FAILED"), "{t}");
}

/// The same straggler with the data phase on the caller's buffers (the
/// default across hosts, here with shared memory off): ranks 0 and 2 are left in the data phase, which rank 1 never
/// joins; they cannot return while MPI may still write their buffers, so
/// at their deadline each holds a roll call, names the call, itself, the
/// peer that never joined (rank 1) and the one still in it, and the job is
/// aborted with exit code 75, promptly (no rank waits for the one that
/// timed out to abort it).
#[test]
fn a_straggler_left_out_of_the_data_phase_ends_the_job_naming_it() {
    let Some((out, took)) = launch(
        3,
        &["straggler", "--no-shm"],
        false,
        Duration::from_secs(60),
    ) else {
        return;
    };
    let t = text(&out);
    assert_ne!(out.status.code(), Some(124), "the job hung:\n{t}");
    assert_eq!(out.status.code(), Some(75), "the job must be aborted:\n{t}");
    assert!(took < Duration::from_secs(30), "{took:?}\n{t}");
    for (me, other) in [(0, 2), (2, 0)] {
        let line = t
            .lines()
            .find(|l| l.contains(&format!("on rank {me} (world rank {me})")))
            .unwrap_or_else(|| panic!("no watchdog line from rank {me}:\n{t}"));
        assert!(
            line.contains("all_reduce (call 1, 4096 elements)"),
            "{line}"
        );
        assert!(line.contains("did not complete within 1.5s"), "{line}");
        assert!(
            line.contains("not in it (never joined, already left, or cannot be reached): rank 1 (world rank 1);"),
            "{line}"
        );
        assert!(
            line.contains(&format!("still in it: rank {other} (world rank {other})")),
            "{line}"
        );
        assert!(line.contains("exit code 75"), "{line}");
    }
    // The rank that timed out in its record exchange still reports it.
    assert!(
        t.contains("rank 1: straggler ended within twice the timeout"),
        "{t}"
    );
}

/// The same straggler on one host, whose ranks exchange their call records
/// through the shared-memory segment (the default): the exchange is one
/// barrier with one verdict, so it cannot pass on some ranks and fail on
/// others. Rank 1's deadline passes first, with rank 2 missing: every rank
/// returns a `Timeout` naming rank 2 (rank 0 waiting, rank 2 itself when
/// it comes late), within twice the timeout, and no rank is left in a data
/// phase (no watchdog abort).
#[test]
fn a_straggler_on_one_host_is_named_by_every_rank() {
    let Some((out, took)) = launch(3, &["straggler"], false, Duration::from_secs(60)) else {
        return;
    };
    let t = text(&out);
    assert_ne!(out.status.code(), Some(124), "the job hung:\n{t}");
    assert!(took < Duration::from_secs(30), "{took:?}\n{t}");
    assert!(t.contains("rank 0: shared memory on"), "{t}");
    for r in 0..3 {
        assert!(
            t.lines().any(|l| l.starts_with(&format!(
                "rank {r}: straggler ended within twice the timeout"
            )) && l.ends_with("a timeout naming [2]")),
            "rank {r} must end in time naming rank 2:\n{t}"
        );
    }
    assert!(!t.contains("exit code 75"), "no watchdog abort:\n{t}");
}

/// A rank killed (`SIGKILL`) in the middle of a stream of shared-memory
/// all-reduces (through the slots) and all-gathers (read directly where
/// single copies are on: 2 ranks here): Open MPI's runtime ends the job at
/// once, naming it; no rank is left spinning in the segment.
#[test]
fn a_rank_killed_in_shared_memory_ends_the_job_naming_it() {
    for n in [2, 3] {
        let Some((out, took)) = launch(n, &["die"], false, Duration::from_secs(120)) else {
            return;
        };
        let t = text(&out);
        assert_ne!(out.status.code(), Some(124), "the job hung:\n{t}");
        assert_ne!(out.status.code(), Some(0), "the job must fail:\n{t}");
        assert!(took < Duration::from_secs(30), "{took:?}\n{t}");
        assert!(t.contains("rank 0: shared memory on"), "{t}");
        let direct = if single_copy_expected(n) { "on" } else { "off" };
        assert!(t.contains(&format!("rank 0: single copy {direct}")), "{t}");
        assert!(
            t.contains("rank 1 with PID") && t.contains("exited on signal 9"),
            "{t}"
        );
    }
}

/// Collectives on shared buffers (`MpiWorldBuilder::shared_buffers`) on 1
/// to 4 ranks: the bits of the same calls on ordinary memory (all-reduces
/// in place on the peers' memory; data movement read through the arenas'
/// mapping, inside and past the cross-memory window), mixed with ordinary
/// memory, on a split, and a full arena's error (the mode's docs). One
/// rank has no segment and so no arena.
#[test]
fn shared_buffers_reduce_with_the_bits_of_ordinary_memory() {
    for n in 1..=4 {
        let Some((out, _)) = launch(n, &["shared-buffers"], false, Duration::from_secs(300)) else {
            return;
        };
        let t = text(&out);
        assert!(out.status.success(), "{n} ranks:\n{t}");
        let passed = if n == 1 { 1 } else { 83 };
        assert!(
            t.contains(&format!(
                "mpi shared-buffers on {n} ranks: {passed} passed, 0 failed"
            )),
            "{t}"
        );
    }
}

/// A rank killed among in-place all-reduces of shared buffers: Open MPI's
/// runtime ends the job at once, naming it, as on the slots.
#[test]
fn a_rank_killed_among_shared_buffer_all_reduces_ends_the_job_naming_it() {
    let Some((out, took)) = launch(
        2,
        &["die", "--shared-buffers"],
        false,
        Duration::from_secs(120),
    ) else {
        return;
    };
    let t = text(&out);
    assert_ne!(out.status.code(), Some(124), "the job hung:\n{t}");
    assert_ne!(out.status.code(), Some(0), "the job must fail:\n{t}");
    assert!(took < Duration::from_secs(30), "{took:?}\n{t}");
    assert!(t.contains("rank 0: die on shared buffers: true"), "{t}");
    assert!(
        t.contains("rank 1 with PID") && t.contains("exited on signal 9"),
        "{t}"
    );
}

/// Rank 1 stopped for 4 s among all-reduces and broadcasts of shared
/// buffers with a 1 s deadline: wherever the stop lands, the job ends, its
/// peers naming it, either as a `Timeout` (at the call's first barrier, or
/// on a broadcast's root, whose buffer nobody writes; then the world aborts
/// the job when dropped) or, inside a call whose peers write in place, by
/// ending the job with exit code 75 (a peer may still write their
/// buffers).
#[test]
fn a_rank_stalled_among_shared_buffer_all_reduces_and_broadcasts_is_named_and_the_job_ends() {
    for n in [2, 3] {
        let Some((out, took)) = launch(n, &["stall"], false, Duration::from_secs(120)) else {
            return;
        };
        let t = text(&out);
        assert_ne!(out.status.code(), Some(124), "the job hung:\n{t}");
        assert_ne!(out.status.code(), Some(0), "the job must fail:\n{t}");
        assert!(took < Duration::from_secs(15), "{took:?}\n{t}");
        let stranded = t.contains(
            "rank(s) 1 (world rank 1) did not finish writing shared buffers in place within 1s",
        );
        let timed_out = ["all_reduce", "broadcast"].iter().any(|op| {
            t.contains(&format!(
                "rank 0: stall: {op} on rank 0 timed out after 1s: ranks [1] never arrived"
            ))
        });
        assert!(stranded || timed_out, "{n} ranks:\n{t}");
        if stranded {
            assert_eq!(out.status.code(), Some(75), "{t}");
        }
    }
}

#[test]
fn two_threads_per_process_on_two_communicators() {
    for n in [2, 3] {
        let Some((out, _)) = launch(n, &["threads"], false, Duration::from_secs(120)) else {
            return;
        };
        let t = text(&out);
        assert!(out.status.success(), "{n} ranks:\n{t}");
        assert!(
            t.contains(&format!("mpi threads on {n} ranks: 2 passed, 0 failed")),
            "{t}"
        );
    }
}

#[test]
fn a_communicator_kept_past_finalize_fails_cleanly() {
    let Some((out, _)) = launch(2, &["finalize"], false, Duration::from_secs(60)) else {
        return;
    };
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    assert!(
        t.contains("mpi finalize on 2 ranks: 1 passed, 0 failed"),
        "{t}"
    );
}

#[test]
fn point_to_point_mismatches_fail_on_both_sides() {
    for n in [2, 3] {
        let Some((out, _)) = launch(n, &["p2p-failures"], false, Duration::from_secs(120)) else {
            return;
        };
        let t = text(&out);
        assert!(out.status.success(), "{n} ranks:\n{t}");
        assert!(
            t.contains(&format!(
                "mpi p2p-failures on {n} ranks: 5 passed, 0 failed"
            )),
            "{t}"
        );
    }
}

#[test]
fn a_panicking_rank_takes_the_job_down_promptly() {
    let Some((out, took)) = launch(3, &["panic"], false, Duration::from_secs(60)) else {
        return;
    };
    let t = text(&out);
    assert!(!out.status.success(), "{t}");
    assert_ne!(
        out.status.code(),
        Some(124),
        "the job hung until the time limit:\n{t}"
    );
    assert!(took < Duration::from_secs(30), "{took:?}");
    assert!(
        t.contains("fails on purpose") && t.contains("aborting the MPI job"),
        "{t}"
    );
}
