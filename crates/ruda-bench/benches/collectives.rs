//! Local-transport bandwidth table: every collective on f32 at n = 2 and 4,
//! sizes 4 KiB to 64 MiB (doubling), each row with its STREAM roofline
//! measured on the same threads just before it, p50/p99 and the
//! back-to-back wall-clock time ([`ruda_bench`]).
//!
//! Run with `cargo bench -p ruda-bench --bench collectives`; `RUDA_PIN=0`
//! lets the rank threads float.

use ruda_bench::{self as bench, BenchOp, Settings};
use ruda_comm::LocalWorld;

fn main() {
    // `cargo bench` passes `--bench`; `cargo test` runs benches with no
    // argument, where one small size keeps it quick.
    let quick = !std::env::args().any(|a| a == "--bench");
    let sizes: Vec<usize> = if quick {
        vec![4 << 10]
    } else {
        (12..=26).map(|p| 1usize << p).collect()
    };
    for n in [2, 4] {
        let world = LocalWorld::new(n);
        println!(
            "# local transport, {n} ranks, f32, pinned to cores {:?}",
            world.pinned_cores()
        );
        println!("{}", bench::header());
        for &bytes in &sizes {
            let settings = if quick {
                Settings::quick(1, 5)
            } else {
                Settings::auto(bytes)
            };
            for op in BenchOp::ALL {
                let rows = world
                    .run(|c| bench::measure::<_, f32>(&c, op, bytes, settings))
                    .expect("benchmark run");
                let m = &rows[0];
                println!("{}", bench::format_row(m));
                assert_eq!(m.wrong, 0, "wrong results");
            }
        }
    }
}
