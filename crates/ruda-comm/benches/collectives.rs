//! Local-transport bandwidth table: all-reduce, all-gather, reduce-scatter
//! and all-to-all on f32 at n = 2 and 4, sizes 4 KiB to 64 MiB, with a memcpy
//! line of each size measured in the same run.
//!
//! Run with `cargo bench -p ruda-comm --bench collectives`.

use ruda_comm::LocalWorld;
use ruda_comm::bench::{self, BenchOp};

fn main() {
    let sizes = [4 << 10, 1 << 20, 16 << 20, 64 << 20];
    let ops = [
        BenchOp::AllReduce,
        BenchOp::AllGather,
        BenchOp::ReduceScatter,
        BenchOp::AllToAll,
    ];
    // `cargo bench` passes `--bench`; `cargo test` runs benches with no
    // argument, where one small size keeps it quick.
    let quick = !std::env::args().any(|a| a == "--bench");
    let sizes: &[usize] = if quick { &sizes[..1] } else { &sizes };
    for n in [2, 4] {
        println!("# local transport, {n} ranks");
        println!("{}", bench::header());
        for &bytes in sizes {
            let iters = if bytes >= 16 << 20 {
                10
            } else if bytes >= 1 << 20 {
                50
            } else {
                2000
            };
            let (us, gbps) = bench::memcpy(bytes, iters);
            println!("{}", bench::format_memcpy_row(bytes, us, gbps));
            for op in ops {
                let rows = LocalWorld::new(n)
                    .run(|c| bench::measure::<_, f32>(&c, op, bytes, iters / 10 + 1, iters))
                    .expect("benchmark run");
                let m = &rows[0];
                println!(
                    "{}   ({:.0}% of memcpy)",
                    bench::format_row(m),
                    100.0 * m.busbw / gbps
                );
                assert_eq!(m.wrong, 0, "wrong results");
            }
        }
    }
}
