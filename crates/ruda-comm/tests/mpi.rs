//! The MPI transport under real `mpirun` (feature `mpi`): the conformance
//! suite on 1 to 4 ranks, the debug-mode failure suite, and a panic that
//! takes the job down. A libtest binary cannot initialise MPI per test, so
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

/// Run the conformance binary on `n` ranks with `args`, killing it after `limit`.
fn launch(n: usize, args: &[&str], debug: bool, limit: Duration) -> Option<(Output, Duration)> {
    let mpirun = mpirun()?;
    let mut cmd = Command::new("timeout");
    cmd.arg(limit.as_secs().to_string()).arg(mpirun).args([
        "--oversubscribe",
        "--allow-run-as-root",
        "--bind-to",
        "none",
        "-n",
        &n.to_string(),
    ]);
    if debug {
        cmd.env("RUDA_DEBUG", "1").args(["-x", "RUDA_DEBUG"]);
    }
    cmd.arg(env!("CARGO_BIN_EXE_ruda-mpi-conformance"))
        .args(args);
    let start = Instant::now();
    let out = cmd.output().expect("start mpirun");
    Some((out, start.elapsed()))
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
        let Some((out, _)) = launch(n, &[], false, Duration::from_secs(300)) else {
            return;
        };
        let t = text(&out);
        assert!(out.status.success(), "{n} ranks:\n{t}");
        assert!(
            t.contains(&format!("mpi conformance on {n} ranks: 9 passed, 0 failed")),
            "{t}"
        );
    }
}

#[test]
fn debug_mode_turns_mismatches_into_errors_on_every_rank() {
    for n in [1, 2, 3] {
        let Some((out, _)) = launch(n, &["debug-failures"], true, Duration::from_secs(120)) else {
            return;
        };
        let t = text(&out);
        assert!(out.status.success(), "{n} ranks:\n{t}");
        assert!(
            t.contains(&format!("mpi debug-failures on {n} ranks:")) && t.contains("0 failed"),
            "{t}"
        );
    }
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
                "mpi p2p-failures on {n} ranks: 4 passed, 0 failed"
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
