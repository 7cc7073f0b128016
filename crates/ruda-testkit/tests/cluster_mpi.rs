//! The MPI transport across two hosts of the namespace cluster
//! (`scripts/cluster.sh`: network namespaces with their own hostnames,
//! joined by veth pairs on a bridge; Open MPI uses TCP between them and
//! shared memory within each), 2 hosts × 2 ranks: the conformance and
//! failure suites and the tensor layer, then the faults a network gives —
//! a cut link, a killed rank, a stalled host, packet loss — each ending in
//! right results, or in typed errors and a job that ends, never a hang.
//!
//! Runs only with `RUDA_CLUSTER=1` (root; CI sets it). Feature `mpi`.
#![cfg(feature = "mpi")]

use std::io::{BufRead, BufReader, Read};
use std::process::Output;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use ruda_testkit::cluster::Cluster;

const CONFORMANCE: &str = env!("CARGO_BIN_EXE_ruda-mpi-conformance");
const TENSOR: &str = env!("CARGO_BIN_EXE_ruda-tensor-mpi-check");

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn the_suites_pass_across_two_hosts() {
    let Some(c) = Cluster::up(2) else { return };
    let limit = Duration::from_secs(300);
    // Two ranks a host: by default the world's data goes through MPI;
    // with `hierarchical(true)` its all-reduces go through each host's
    // segment, then across hosts through MPI (also in many rounds, with
    // one-page slots).
    for (args, shm) in [
        (&["conformance"][..], "off"),
        (&["conformance", "--hierarchical"][..], "on"),
        (
            &["conformance", "--hierarchical", "--slot", "4096"][..],
            "on",
        ),
    ] {
        let out = c.mpirun(4, &[], CONFORMANCE, args, limit);
        let t = text(&out);
        assert!(out.status.success(), "{args:?}: {t}");
        assert!(
            t.contains(&format!("rank 0: shared memory {shm}")),
            "{args:?}: {t}"
        );
        assert!(
            t.contains("mpi conformance on 4 ranks: 13 passed, 0 failed"),
            "{args:?}: {t}"
        );
    }
    let out = c.mpirun(4, &[], CONFORMANCE, &["failures"], limit);
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    assert!(
        t.contains("mpi failures on 4 ranks: 7 passed, 0 failed"),
        "{t}"
    );
    let out = c.mpirun(4, &[], TENSOR, &[], limit);
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    assert!(
        t.contains("tensor layer on mpi, 4 ranks: 14 passed, 0 failed"),
        "{t}"
    );
}

/// A soak of checked all-reduces across the hosts, started; `fault` runs
/// once rank 0 says the soak has begun (plus `after`). Returns the job's
/// output, its exit code and how long it took from the fault.
fn soak_with_fault(
    c: &Cluster,
    env: &[(&str, &str)],
    args: &[&str],
    after: Duration,
    fault: impl FnOnce(),
) -> (String, Option<i32>, Duration) {
    soak_with(c, env, args, after, fault).0
}

/// [`soak_with_fault`], and whether the job was still running when the
/// fault was over.
fn soak_with(
    c: &Cluster,
    env: &[(&str, &str)],
    args: &[&str],
    after: Duration,
    fault: impl FnOnce(),
) -> ((String, Option<i32>, Duration), bool) {
    let mut child = c.spawn(4, env, CONFORMANCE, args, Duration::from_secs(240));
    let stdout = child.stdout.take().expect("piped");
    let mut stderr = child.stderr.take().expect("piped");
    let (started_tx, started_rx) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut out = String::new();
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if line.starts_with("soak: started") {
                let _ = started_tx.send(());
            }
            out.push_str(&line);
            out.push('\n');
        }
        out
    });
    let errs = std::thread::spawn(move || {
        let mut e = String::new();
        let _ = stderr.read_to_string(&mut e);
        e
    });
    let started = started_rx.recv_timeout(Duration::from_secs(120)).is_ok();
    std::thread::sleep(after);
    let t0 = Instant::now();
    if started {
        fault();
    }
    let running = child.try_wait().expect("poll mpirun").is_none();
    let status = child.wait().expect("wait for mpirun");
    let took = t0.elapsed();
    let t = format!(
        "{}{}",
        reader.join().expect("stdout"),
        errs.join().expect("stderr")
    );
    assert!(started, "the soak never started:\n{t}");
    ((t, status.code(), took), running)
}

/// A host's link cut during a soak of 4 MiB all-reduces: the ranks on the
/// other host get a typed timeout naming the ranks they lost (in a record
/// exchange) or the watchdog's line naming them (in a data phase), and the
/// job ends — within the deadline, the roll call, and the ~6 s TCP needs
/// to give up on the lost host's daemon — never a hang.
#[test]
fn a_cut_link_ends_the_job_naming_the_lost_ranks() {
    let Some(c) = Cluster::up(2) else { return };
    let h2 = c.host(2);
    let (t, code, took) = soak_with_fault(
        &c,
        &[("RUDA_TIMEOUT_SECS", "3")],
        &["soak", "100000", "1048576"],
        Duration::from_millis(500),
        || c.link(&h2, false),
    );
    assert_ne!(code, Some(124), "the job hung:\n{t}");
    assert_ne!(code, Some(0), "the job must fail:\n{t}");
    assert!(
        took < Duration::from_secs(60),
        "ended {took:?} after the cut:\n{t}"
    );
    // Rank 0 or 1 (on ruda-h1) names what it lost, ranks on ruda-h2: in a
    // record exchange (`Timeout`), or in a data phase (the watchdog).
    let named = t.lines().any(|l| {
        let on_h1 = ["on rank 0", "on rank 1"].iter().any(|r| l.contains(r));
        let record = l.contains("timed out after 3s")
            && ["ranks [2] ", "ranks [3] ", "ranks [2, 3] "]
                .iter()
                .any(|m| l.contains(&format!("{m}never arrived")));
        let data = l.contains("did not complete within 3s")
            && ["rank 2 (world rank 2)", "rank 3 (world rank 3)"]
                .iter()
                .any(|m| l.contains(&format!("cannot be reached): {m}")));
        on_h1 && (record || data)
    });
    assert!(named, "no rank named the lost host's ranks:\n{t}");
    assert!(!t.contains(": element "), "a wrong result:\n{t}");
}

/// A rank killed during a collective, and one killed between collectives:
/// Open MPI's runtime ends the job at once, naming the rank and its host.
#[test]
fn a_killed_rank_ends_the_job_naming_it() {
    let Some(c) = Cluster::up(2) else { return };
    let h2 = c.host(2);
    for args in [
        // During: the ranks are always in an all-reduce.
        &["soak", "100000", "1048576"][..],
        // Between: small calls, most of the time between them is the
        // rank's own checking.
        &["soak", "100000000", "16"][..],
    ] {
        let (t, code, took) = soak_with_fault(
            &c,
            &[("RUDA_TIMEOUT_SECS", "10")],
            args,
            Duration::from_millis(300),
            || {
                let pids = c.pids(&h2, "ruda-mpi-conformance");
                assert!(!pids.is_empty(), "no rank runs on {h2}");
                let _ = std::process::Command::new("kill")
                    .args(["-KILL", &pids[0].to_string()])
                    .status();
            },
        );
        assert_ne!(code, Some(124), "the job hung:\n{t}");
        assert_ne!(code, Some(0), "the job must fail:\n{t}");
        assert!(took < Duration::from_secs(30), "{took:?}:\n{t}");
        assert!(
            t.contains("exited on signal 9") && t.contains(&format!("on node {h2}")),
            "{args:?}:\n{t}"
        );
    }
}

/// A host stopped for 200 ms (twice) in the middle of a soak, and 1 %
/// packet loss on both hosts: every result stays right.
#[test]
fn a_stalled_host_and_packet_loss_leave_every_result_right() {
    let Some(c) = Cluster::up(2) else { return };
    let h2 = c.host(2);
    let env = [("RUDA_TIMEOUT_SECS", "20")];
    let ((t, code, _), overlapped) = soak_with(
        &c,
        &env,
        &["soak", "200", "262144"],
        Duration::from_millis(200),
        || {
            c.stall(&h2, 200);
            std::thread::sleep(Duration::from_millis(100));
            c.stall(&h2, 200);
        },
    );
    assert!(overlapped, "the soak ended before the stalls did:\n{t}");
    assert_eq!(code, Some(0), "{t}");
    assert!(
        t.contains("soak: 200 all-reduces of 262144 f32 right on 4 ranks"),
        "{t}"
    );
    let clean = c.mpirun(
        4,
        &env,
        CONFORMANCE,
        &["soak", "40", "262144"],
        Duration::from_secs(120),
    );
    c.loss(&c.host(1), 1);
    c.loss(&h2, 1);
    let lossy = c.mpirun(
        4,
        &env,
        CONFORMANCE,
        &["soak", "40", "262144"],
        Duration::from_secs(180),
    );
    let dropped = c.dropped(&c.host(1)) + c.dropped(&h2);
    assert!(dropped > 0, "the loss rule dropped nothing");
    eprintln!("1 % loss: {dropped} packets dropped");
    for (what, out) in [("clean", &clean), ("1 % loss", &lossy)] {
        let t = text(out);
        assert!(out.status.success(), "{what}:\n{t}");
        let line = t
            .lines()
            .find(|l| l.contains("soak: 40 all-reduces of 262144 f32 right on 4 ranks"))
            .unwrap_or_else(|| panic!("{what}:\n{t}"));
        eprintln!("{what}: {line}");
    }
}
