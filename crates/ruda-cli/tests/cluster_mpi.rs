//! `ruda demo` (the distributed spherical harmonic transforms on a 2 × 2
//! grid), the data-parallel example and the overlapped reduction's
//! example across two hosts of the namespace cluster
//! (`scripts/cluster.sh`), 2 ranks on each: TCP between the hosts, shared
//! memory within them, and the same verdicts as on one host.
//!
//! Runs only with `RUDA_CLUSTER=1` (root; CI sets it). Feature `mpi`.
#![cfg(feature = "mpi")]

use std::time::Duration;

use ruda_testkit::cluster::Cluster;

#[test]
fn the_demo_and_the_ddp_examples_across_two_hosts() {
    let Some(c) = Cluster::up(2) else { return };
    let limit = Duration::from_secs(300);
    let demo = [
        "demo",
        "--job",
        "synthetic",
        "--grid",
        "2x2",
        "--steps",
        "3",
        "--nlat",
        "17",
        "--nlon",
        "32",
        "--channels",
        "2",
    ];
    let out = c.mpirun(4, &[], env!("CARGO_BIN_EXE_ruda"), &demo, limit);
    let text = String::from_utf8_lossy(&out.stdout);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}{err}");
    assert!(
        text.contains("grid of MPI processes") && text.contains("verdict: OK"),
        "{text}{err}"
    );
    let exe = std::env::current_exe().expect("the test's path");
    let ddp = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target/<profile>/deps")
        .join("examples")
        .join("ddp_classifier");
    let out = c.mpirun(
        4,
        &[],
        ddp.to_str().expect("a UTF-8 path"),
        &["--steps", "16", "--resume-at", "7", "--quiet"],
        limit,
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}{err}");
    assert!(
        text.contains("equal to the serial run: 4 (one MPI process per rank"),
        "{text}{err}"
    );
    // Gradients reduced during the backward pass (ddp::Overlap) equal the
    // reduction after it, bit for bit, across the hosts too.
    let overlap = ddp.with_file_name("ddp_overlap");
    let args = [
        "--layers", "3", "--width", "64", "--batch", "8", "--steps", "3",
    ];
    let out = c.mpirun(
        4,
        &[],
        overlap.to_str().expect("a UTF-8 path"),
        &args,
        limit,
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}{err}");
    assert!(
        text.contains("4 ranks") && text.contains("parameters equal bit for bit: true"),
        "{text}{err}"
    );
}
