//! Issue 18 (6, 8): the complete data-parallel example, run the way a user
//! runs it. In process: 1 to 8 thread ranks, uneven shards, gradient
//! accumulation, a checkpoint and resume, equal to the serial run within
//! f64 round-off, with its loss plot. As a program: the thread count from
//! `RUDA_WORLD_SIZE`, and a launcher's environment without MPI support
//! refused rather than run as independent worlds. (Under `mpirun`:
//! `tests/cli_mpi.rs`.) One test function, because the example makes f64
//! the process's default float dtype.

#[path = "../examples/ddp_classifier.rs"]
mod ddp_classifier;

use std::path::PathBuf;
use std::process::Command;

use ddp_classifier::{Opts, TOLERANCE, run};
use ruda_comm::LaunchMode;

fn opts(ranks: usize) -> Opts {
    Opts {
        ranks,
        steps: 24,
        batch: 61,
        micro: 2,
        resume_at: 11,
        checkpoint: None,
        plot: None,
        quiet: true,
    }
}

/// The example's binary, built by `cargo test` beside this test's.
pub fn example_binary() -> PathBuf {
    let exe = std::env::current_exe().expect("the test's path");
    exe.parent()
        .and_then(|deps| deps.parent())
        .expect("target/<profile>/deps")
        .join("examples")
        .join(format!("ddp_classifier{}", std::env::consts::EXE_SUFFIX))
}

#[test]
fn the_ddp_example_equals_the_serial_run_however_it_is_launched() {
    let launched = ruda_comm::MPI_LAUNCHER_ENV
        .iter()
        .chain(&ruda_comm::OTHER_LAUNCHER_ENV)
        .chain([&ruda_comm::WORLD_SIZE_ENV, &ruda_comm::LAUNCH_ENV])
        .find(|k| std::env::var_os(k).is_some());
    if let Some(k) = launched {
        eprintln!("{k} is set: it decides how the example runs, so this test cannot");
        return;
    }
    // In process: every world size, micro-batches of every kind (more
    // micro-batches than a shard has samples at 8 ranks of 61).
    for (ranks, micro) in [(1, 1), (2, 2), (3, 3), (4, 1), (8, 16)] {
        let o = Opts {
            micro,
            ..opts(ranks)
        };
        let s = run(&o)
            .expect("the run")
            .expect("this process holds rank 0");
        assert_eq!(s.mode, LaunchMode::Threads(ranks));
        assert_eq!(s.ranks, ranks);
        assert_eq!(s.losses.len(), o.steps);
        assert!(
            s.difference <= TOLERANCE,
            "{ranks} ranks, {micro} micro-batches: {:e} from the serial run",
            s.difference
        );
        // Training works (so the comparison compares something).
        assert!(s.losses[o.steps - 1] < 0.8 * s.losses[0], "{:?}", s.losses);
    }
    // More ranks than samples in a step: some shards are empty.
    let o = Opts {
        batch: 5,
        ..opts(8)
    };
    let s = run(&o).unwrap().unwrap();
    assert!(s.difference <= TOLERANCE, "{:e}", s.difference);

    // The plot holds both curves.
    let svg = std::env::temp_dir().join(format!("ruda-ddp-plot-{}.svg", std::process::id()));
    let s = run(&opts(2)).unwrap().unwrap();
    ddp_classifier::plot(&s, &svg).unwrap();
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(text.contains("<svg") && text.contains("serial") && text.contains("2 ranks"));
    std::fs::remove_file(&svg).unwrap();

    // As a program: RUDA_WORLD_SIZE sets the thread count.
    let bin = example_binary();
    // The child must not think a launcher started it (a test run under
    // Slurm or mpirun would otherwise switch it to MPI).
    let command = || {
        let mut c = Command::new(&bin);
        for k in ruda_comm::MPI_LAUNCHER_ENV
            .iter()
            .chain(&ruda_comm::OTHER_LAUNCHER_ENV)
        {
            c.env_remove(k);
        }
        c.env_remove(ruda_comm::LAUNCH_ENV);
        c
    };
    let out = command()
        .args(["--steps", "12", "--resume-at", "5", "--quiet"])
        .env(ruda_comm::WORLD_SIZE_ENV, "4")
        .output()
        .unwrap_or_else(|e| panic!("run {}: {e}", bin.display()));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("equal to the serial run: 4 (4 thread ranks)"),
        "{text}"
    );
    // A bad RUDA_WORLD_SIZE is an error, not a default.
    let out = command()
        .env(ruda_comm::WORLD_SIZE_ENV, "four")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("RUDA_WORLD_SIZE must be a positive number")
    );
    // Started by mpirun but built without MPI: refused, naming the cause.
    if !cfg!(feature = "mpi") {
        let out = command().env("OMPI_COMM_WORLD_SIZE", "2").output().unwrap();
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("OMPI_COMM_WORLD_SIZE") && err.contains("without ruda's `mpi` feature"),
            "{err}"
        );
    }
}
