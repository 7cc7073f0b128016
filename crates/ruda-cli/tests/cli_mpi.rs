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

/// The main job under mpirun: one rank per process on a 2 × 2 grid and
/// on 2 replicas of a 1 × 2 grid, distributed equal to serial, only rank 0
/// reporting, every process exiting with the verdict's status; the serial
/// run's losses (full precision, from the checkpoint record) equal the
/// threaded launch's to the bit, and a run resumed under mpirun on
/// another grid goes on from the threaded run's checkpoint; a grid that
/// does not match the processes is refused on every rank.
#[test]
fn sfno_demo_runs_one_rank_per_process() {
    let root = std::env::temp_dir().join(format!("ruda-sfno-mpi-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let dir = |name: &str| root.join(name).to_str().unwrap().to_owned();
    let small = |out: &str, extra: &[&str]| -> Vec<String> {
        let mut v: Vec<String> = ["demo", "--nlat", "17", "--nlon", "32", "--out", out]
            .iter()
            .map(|s| s.to_string())
            .collect();
        v.extend(extra.iter().map(|s| s.to_string()));
        v
    };
    let serial_losses = |out: &str| -> Vec<String> {
        let p = std::path::Path::new(out).join("checkpoint/progress.txt");
        std::fs::read_to_string(p)
            .unwrap()
            .lines()
            .filter(|l| l.starts_with("loss "))
            .map(|l| l.rsplit(' ').next().unwrap().to_owned())
            .collect()
    };
    let threads = dir("threads");
    let args = small(
        &threads,
        &["--grid", "2x1", "--steps", "3", "--checkpoint-every", "3"],
    );
    let local = std::process::Command::new(env!("CARGO_BIN_EXE_ruda"))
        .args(&args)
        .output()
        .unwrap();
    let local_text = String::from_utf8_lossy(&local.stdout).into_owned();
    assert!(local_text.contains("EQUALS"), "{local_text}");
    assert_eq!(serial_losses(&threads).len(), 3);
    for (n, extra, what) in [
        (
            4,
            vec!["--grid", "2x2"],
            "2x2 polar × azimuth grid of MPI processes",
        ),
        (
            4,
            vec!["--grid", "1x2", "--replicas", "2"],
            "2 data-parallel replicas of a 1x2 polar × azimuth grid (4 MPI processes",
        ),
    ] {
        let out_dir = dir(&format!("mpi{}", extra.len()));
        let mut extra = extra.clone();
        extra.extend(["--steps", "3", "--checkpoint-every", "3"]);
        let args = small(&out_dir, &extra);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let Some(out) = mpirun(n, &args) else {
            return;
        };
        let text = String::from_utf8_lossy(&out.stdout);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(text.contains(what), "{text}{err}");
        assert!(
            text.contains("verdict: distributed EQUALS serial"),
            "{text}{err}"
        );
        assert_eq!(
            text.matches("verdict").count(),
            1,
            "only rank 0 reports: {text}"
        );
        assert_eq!(text.matches("step    2  loss").count(), 1, "{text}");
        let beaten = text.contains("the model BEATS persistence");
        assert_eq!(out.status.success(), beaten, "{text}{err}");
        assert_eq!(
            serial_losses(&out_dir),
            serial_losses(&threads),
            "{extra:?}"
        );
    }
    // The threaded run's checkpoint, resumed by 4 processes on 2 × 2.
    let args = small(&threads, &["--grid", "2x2", "--steps", "5", "--resume"]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let Some(out) = mpirun(4, &args) else {
        return;
    };
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("resuming after step 3"), "{text}");
    assert!(
        text.contains("step    4  loss") && !text.contains("step    2  loss"),
        "{text}"
    );
    assert!(
        text.contains("verdict: distributed EQUALS serial"),
        "{text}"
    );
    // A grid that does not match the processes is refused on every rank.
    let Some(out) = mpirun(3, &["demo", "--grid", "2x2", "--steps", "1"]) else {
        return;
    };
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    // Every process refuses (mpirun may end the others before they print).
    assert!(
        err.contains("1 replica(s) of a 2x2 grid need 4 MPI processes, mpirun started 3"),
        "{err}"
    );
    std::fs::remove_dir_all(&root).unwrap();
}

/// Under mpirun, a failure of the distributed run on every rank (its
/// checkpoint cannot be written) stops every process at that step with
/// the error naming the path; no process waits for the others.
#[test]
fn sfno_demo_under_mpirun_stops_together_on_a_failure() {
    let dir = std::env::temp_dir().join(format!("ruda-sfno-mpi-fail-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("checkpoint/step-2")).unwrap();
    std::fs::write(dir.join("checkpoint/step-2/distributed"), b"in the way").unwrap();
    let d = dir.to_str().unwrap();
    let args = [
        "demo",
        "--grid",
        "2x1",
        "--steps",
        "4",
        "--checkpoint-every",
        "2",
        "--nlat",
        "17",
        "--nlon",
        "32",
        "--out",
        d,
    ];
    let Some(out) = mpirun(2, &args) else {
        return;
    };
    let (text, err) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(!out.status.success(), "{text}{err}");
    assert!(err.contains("checkpoint/step-2/distributed"), "{err}");
    assert_eq!(
        err.matches("ruda demo: the 2x1 run failed on rank").count(),
        2,
        "{err}"
    );
    assert!(
        text.contains("step    0") && !text.contains("step    1"),
        "{text}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Under mpirun, a batch that cannot be made (a corrupt cached sample,
/// which every process reads) stops every process at that step with the
/// cache's error naming the file — rank 0 does not wait for a serial step
/// it never handed over.
#[test]
fn sfno_demo_under_mpirun_stops_on_a_bad_sample() {
    let dir = std::env::temp_dir().join(format!("ruda-sfno-mpi-cache-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let (out_dir, cache) = (dir.join("out"), dir.join("cache"));
    let (o, c) = (out_dir.to_str().unwrap(), cache.to_str().unwrap());
    let args = [
        "demo",
        "--grid",
        "2x1",
        "--nlat",
        "17",
        "--nlon",
        "32",
        "--out",
        o,
        "--sample-cache",
        c,
    ];
    let mut first = args.to_vec();
    first.extend(["--steps", "2"]);
    let Some(made) = mpirun(2, &first) else {
        return;
    };
    assert!(String::from_utf8_lossy(&made.stdout).contains("step    1"));
    // Step 1's first sample (seed 5) is now garbage.
    let folder = std::fs::read_dir(&cache)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    std::fs::write(folder.join("seed-5.bin"), b"garbage").unwrap();
    let mut again = args.to_vec();
    again.extend(["--steps", "3"]);
    let started = std::time::Instant::now();
    let Some(out) = mpirun(2, &again) else {
        return;
    };
    let (text, err) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(!out.status.success(), "{text}{err}");
    assert!(
        err.contains("sample cache") && err.contains("seed-5.bin"),
        "{err}"
    );
    assert!(
        text.contains("step    0") && !text.contains("step    1"),
        "{text}"
    );
    assert!(started.elapsed().as_secs() < 120, "{:?}", started.elapsed());
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `ruda bench --transport mpi --iters 3 --json` with `extra` arguments
/// on `n` ranks: its one JSON report (from rank 0), after a successful
/// run; `None` without `mpirun`.
fn bench_json(n: usize, extra: &[&str]) -> Option<serde_json::Value> {
    let mut args = vec!["bench", "--transport", "mpi", "--iters", "3", "--json"];
    args.extend_from_slice(extra);
    let out = mpirun(n, &args)?;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(serde_json::from_slice(&out.stdout).expect("one JSON document from rank 0"))
}

#[test]
fn bench_over_mpi_writes_one_json_report() {
    let Some(doc) = bench_json(3, &["--sizes", "4K"]) else {
        return;
    };
    assert_eq!(doc["transport"], "mpi");
    assert_eq!(doc["ranks"], 3);
    assert_eq!(doc["shared_buffers"], false);
    assert!(
        doc["rows"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["wrong"] == 0)
    );
}

/// `ruda bench --transport mpi --shared-buffers`: ruda's calls on the
/// world's shared buffers, every result right, and the report says so.
#[test]
fn bench_over_mpi_on_shared_buffers() {
    let Some(doc) = bench_json(2, &["--shared-buffers", "--sizes", "64K:256K"]) else {
        return;
    };
    assert_eq!(doc["shared_buffers"], true);
    let rows = doc["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 18, "6 operations at 3 sizes");
    assert!(rows.iter().all(|r| r["wrong"] == 0));
}

/// `ruda bench sht` under mpirun: one rank a process, one report.
#[test]
fn bench_sht_times_grids_of_processes_beside_the_serial_transform() {
    // 2 processes: the serial transform (rank 0), 2x1 contiguous and
    // mirrored and 1x2, one report from rank 0; each rank's own split of
    // its time; round trips within f64's tolerance.
    let Some(out) = mpirun(
        2,
        &[
            "bench",
            "sht",
            "--sizes",
            "13x22",
            "--dtype",
            "f64",
            "--grids",
            "2x1,1x2,2x2",
            "--channels",
            "2",
            "--iters",
            "2",
            "--warmup",
            "0",
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
    let rows: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "one JSON report: {e}: {}",
            String::from_utf8_lossy(&out.stdout)
        )
    });
    let rows = rows.as_array().unwrap();
    let runs: Vec<&str> = rows.iter().map(|r| r["run"].as_str().unwrap()).collect();
    // 2x2 needs 4 processes: left out.
    assert_eq!(runs, ["serial", "2x1", "2x1 mirrored", "1x2"]);
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    for r in &rows[1..] {
        assert_eq!(r["ranks"], 2, "{r}");
        assert_eq!(r["threads"], (cores / 2).max(1), "{r}");
        assert!(r["round_trip_err"].as_f64().unwrap() < 1e-12, "{r}");
        let per_rank = r["rank_stages"].as_array().unwrap();
        assert_eq!(per_rank.len(), 2, "{r}");
        for s in per_rank {
            assert!(s["comm"].as_f64().unwrap() > 0.0, "{r}");
            assert!(s["legendre"].as_f64().unwrap() > 0.0, "{r}");
        }
    }
    assert!(rows[0]["stages"]["legendre_gflops"].as_f64().unwrap() > 0.0);
    // No grid of 2 ranks: a usage error naming the processes, from every
    // rank, before anything runs.
    let Some(out) = mpirun(2, &["bench", "sht", "--sizes", "13x22", "--grids", "2x2"]) else {
        return;
    };
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("2 processes, but no grid of 2x2 has 2 ranks"),
        "{err}"
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
