//! The MPI transport against the same collectives called directly on the
//! MPI library, in the same run and with the same harness
//! ([`ruda_bench`]): `mpirun -n N ruda-mpi-bench [--unchecked] [--staged] [--no-shm] [--slots|--single-copy-all] [--hierarchical] [--slot BYTES] [--shared-buffers] [SIZES]` prints, for
//! every collective on f32, ruda's row (p50, p99, back-to-back time,
//! bandwidths, roofline) and the raw MPI call's p50 with the time ratio
//! MPI / ruda (above 1: ruda is faster). The all-reduce is in place on both
//! sides. SIZES defaults to `4K,1M,16M,64M`.
//!
//! By default ruda's collectives are checked and work on the caller's
//! buffers under the watchdog (the default world). `--staged` measures the
//! checked collectives on copies instead (`MpiWorldBuilder::staged(true)`,
//! the mode whose calls return a `Timeout` rather than end the job).
//!
//! Ranks on one host move data through shared memory (the default world);
//! `--no-shm` measures them through MPI instead
//! (`MpiWorldBuilder::shared_memory(false)`); `--slot BYTES` (like `1M`)
//! sets the segment's slot size (`MpiWorldBuilder::shared_memory_slot`);
//! `--slots` keeps every call on the segment's slots, without single-copy
//! reads of peers' buffers (`MpiWorldBuilder::shared_memory_single_copy`);
//! `--single-copy-all` reads directly at every size
//! (`MpiWorldBuilder::shared_memory_single_copy_sizes(0..usize::MAX)`);
//! `--hierarchical` makes all-reduces across hosts hierarchical
//! (`MpiWorldBuilder::hierarchical`).
//!
//! `--shared-buffers` gives ruda's calls shared buffers
//! (`MpiWorldBuilder::shared_buffers`, `MpiCommunicator::shared_buffer`)
//! where it measured line-aligned vectors: an all-reduce then runs in place
//! on the peers' memory, as threads do, and the other collectives read
//! peers' buffers through the mapping. Raw MPI keeps its own vectors.
//!
//! `--unchecked` measures ruda without its per-call checks, through the
//! `unsafe` `MpiWorldBuilder::unchecked`: the benchmark makes the same
//! calls with matching arguments on every rank, and whoever passes the
//! flag guarantees that every rank of the job runs this binary with the
//! same flag and sizes.

use ruda_bench::{self as bench, BenchOp, Settings};
use ruda_comm::{Communicator, MpiWorld};

fn parse(s: &str) -> usize {
    let (num, mult) = match s.chars().last() {
        Some('K') => (&s[..s.len() - 1], 1 << 10),
        Some('M') => (&s[..s.len() - 1], 1 << 20),
        _ => (s, 1),
    };
    num.parse::<usize>().expect("a size like 4K or 64M") * mult
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut builder = MpiWorld::builder();
    if args.iter().any(|a| a == "--unchecked") {
        // SAFETY: every rank runs the same measurements (same sizes, same
        // operations in the same order, matching counts), and the caller
        // guarantees that every rank of the job gets the same arguments.
        builder = unsafe { builder.unchecked() };
    }
    if args.iter().any(|a| a == "--staged") {
        // Checked collectives on copies (a peer missing from a data phase
        // is a Timeout instead of ending the job).
        builder = builder.staged(true);
    }
    if args.iter().any(|a| a == "--no-shm") {
        builder = builder.shared_memory(false);
    }
    if args.iter().any(|a| a == "--slots") {
        builder = builder.shared_memory_single_copy(false);
    }
    if args.iter().any(|a| a == "--single-copy-all") {
        builder = builder.shared_memory_single_copy_sizes(0..usize::MAX);
    }
    if args.iter().any(|a| a == "--hierarchical") {
        builder = builder.hierarchical(true);
    }
    if let Some(i) = args.iter().position(|a| a == "--slot") {
        let bytes = args.get(i + 1).map(|b| parse(b)).expect("--slot BYTES");
        builder = builder.shared_memory_slot(bytes);
    }
    let sizes: Vec<usize> = args
        .iter()
        .enumerate()
        .find(|&(i, a)| !a.starts_with("--") && (i == 0 || args[i - 1] != "--slot"))
        .map(|(_, a)| a.clone())
        .unwrap_or_else(|| "4K,1M,16M,64M".into())
        .split(',')
        .map(parse)
        .collect();
    let shared = args.iter().any(|a| a == "--shared-buffers");
    if shared {
        let largest = sizes.iter().copied().max().unwrap_or(0);
        builder = builder.shared_buffers(bench::shared_arena_bytes(largest));
    }
    let mpi = builder.init().expect("MPI starts");
    let world = mpi.world().expect("the world communicator");
    let (me, n) = (world.rank(), world.size());
    if me == 0 {
        println!(
            "# ruda MPI transport vs the raw MPI call, {n} ranks, f32; all-reduce in place: {}; per-call checks: {}; shared memory: {}; shared buffers: {shared}",
            bench::mpi_in_place(),
            world.checked(),
            world.shared_memory()
        );
        let header = bench::header();
        let mut lines = header.lines();
        println!(
            "{} {:>10} {:>8}",
            lines.next().unwrap_or(""),
            "mpi p50",
            "mpi/ruda"
        );
        println!("{} {:>10} {:>8}", lines.next().unwrap_or(""), "(us)", "");
    }
    let mut wrong = 0;
    for &bytes in &sizes {
        let settings = Settings::auto(bytes);
        for op in BenchOp::ALL {
            let ruda = if shared {
                bench::measure_shared::<f32>(&world, op, bytes, settings)
            } else {
                bench::measure::<_, f32>(&world, op, bytes, settings)
            }
            .expect("ruda");
            let raw = bench::measure_mpi_raw::<f32>(
                &world,
                op,
                bytes,
                Settings {
                    roofline: false,
                    wall: false,
                    ..settings
                },
            )
            .expect("raw MPI");
            wrong += ruda.wrong + raw.wrong;
            if me == 0 {
                println!(
                    "{} {:>10.2} {:>8.3}",
                    bench::format_row(&ruda),
                    raw.time_us,
                    raw.time_us / ruda.time_us
                );
            }
        }
    }
    assert_eq!(wrong, 0, "wrong results");
}
