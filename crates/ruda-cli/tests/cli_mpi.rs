//! `ruda demo` and `ruda bench --transport mpi` under real `mpirun` (feature
//! `mpi`). Without `mpirun` the tests say so and pass, unless
//! `RUDA_REQUIRE_MPI=1`.
#![cfg(feature = "mpi")]

use std::process::{Command, Output, Stdio};

fn mpirun(n: usize, args: &[&str]) -> Option<Output> {
    mpirun_program(n, std::path::Path::new(env!("CARGO_BIN_EXE_ruda")), args)
}

/// One `mpirun` at a time in this binary: concurrent mpiruns share Open
/// MPI's session directory (`/tmp/ompi.HOST.UID`), and one that finishes
/// can remove it while another creates its own inside.
static ONE_MPIRUN: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// `program` under `mpirun -n n`, or `None` without `mpirun`.
fn mpirun_program(n: usize, program: &std::path::Path, args: &[&str]) -> Option<Output> {
    let _one = ONE_MPIRUN
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if Command::new("mpirun")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_err()
    {
        assert!(
            std::env::var("RUDA_REQUIRE_MPI").as_deref() != Ok("1"),
            "RUDA_REQUIRE_MPI=1 but mpirun is missing"
        );
        eprintln!("mpirun not found: MPI tests not run");
        return None;
    }
    let out = Command::new("timeout")
        .args([
            "-k",
            "10",
            "300",
            "mpirun",
            "--oversubscribe",
            "--allow-run-as-root",
            "--bind-to",
            "none",
            "-n",
            &n.to_string(),
        ])
        .arg(program)
        .args(args)
        .output()
        .expect("start mpirun");
    Some(out)
}

#[test]
fn demo_runs_one_rank_per_process() {
    for (n, grid) in [(4, "2x2"), (2, "1x2")] {
        let Some(out) = mpirun(
            n,
            &[
                "demo",
                "--job",
                "synthetic",
                "--grid",
                grid,
                "--steps",
                "3",
                "--nlat",
                "17",
                "--nlon",
                "32",
                "--channels",
                "2",
            ],
        ) else {
            return;
        };
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            text.contains("grid of MPI processes") && text.contains("verdict: OK"),
            "{text}"
        );
        assert_eq!(
            text.matches("verdict").count(),
            1,
            "only rank 0 reports: {text}"
        );
        // Every step compared, in turns with the serial model on rank 0.
        let steps = text
            .lines()
            .filter(|l| l.trim_start().starts_with(|c: char| c.is_ascii_digit()))
            .count();
        assert_eq!(steps, 3, "{text}");
    }
    // A grid that does not match the processes is refused.
    let Some(out) = mpirun(2, &["demo", "--job", "synthetic", "--grid", "2x2"]) else {
        return;
    };
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("needs 4 MPI processes"));
}

#[test]
fn bench_over_mpi_writes_one_json_report() {
    let Some(out) = mpirun(
        3,
        &[
            "bench",
            "--transport",
            "mpi",
            "--sizes",
            "4K",
            "--iters",
            "3",
            "--json",
        ],
    ) else {
        return;
    };
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("one JSON document from rank 0");
    assert_eq!(doc["transport"], "mpi");
    assert_eq!(doc["ranks"], 3);
    assert!(
        doc["rows"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["wrong"] == 0)
    );
}

/// The data-parallel example (issue 18) as the same program under mpirun:
/// one rank per process, its checkpoint shared, equal to the serial run.
#[test]
fn the_ddp_example_runs_one_rank_per_process() {
    let exe = std::env::current_exe().expect("the test's path");
    let bin = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target/<profile>/deps")
        .join("examples")
        .join("ddp_classifier");
    let Some(out) = mpirun_program(3, &bin, &["--steps", "16", "--resume-at", "7", "--quiet"])
    else {
        return;
    };
    let text = String::from_utf8_lossy(&out.stdout);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !err.contains("without ruda's `mpi` feature"),
        "{} was built without MPI: `cargo test --workspace --features mpi` builds it \
         with (or `cargo build -p ruda-cli --features mpi --example ddp_classifier`)",
        bin.display()
    );
    assert!(out.status.success(), "{text}{err}");
    assert!(
        text.contains("equal to the serial run: 3 (one MPI process per rank"),
        "{text}"
    );
    assert_eq!(
        text.matches("equal to the serial run").count(),
        1,
        "only rank 0 reports: {text}"
    );
}
