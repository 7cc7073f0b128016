//! What the flight recorder costs: 4 KiB all-reduce latency (f32, n = 2
//! and 4) with every communicator's recorder on and off, alternated in one
//! run so that both see the same machine. Prints the medians of
//! [`ruda_bench::time_calls`] and the difference.
//!
//! Run with `cargo bench -p ruda-bench --bench flight_recorder`.

use ruda_bench::time_calls;
use ruda_comm::{Communicator, LocalWorld, ReduceOp};

fn median_us(world: &LocalWorld, iters: usize) -> f64 {
    let s = world
        .run(|c| {
            let mut x = vec![1.0f32; 1024];
            time_calls(
                &c,
                iters / 10,
                iters,
                || (),
                |()| c.all_reduce(&mut x, ReduceOp::Sum),
            )
        })
        .expect("benchmark run");
    s[0].median() * 1e6
}

fn main() {
    let quick = !std::env::args().any(|a| a == "--bench");
    let (rounds, iters) = if quick { (1, 50) } else { (10, 2000) };
    for n in [2, 4] {
        let (mut on, mut off) = (Vec::new(), Vec::new());
        for _ in 0..rounds {
            on.push(median_us(&LocalWorld::new(n), iters));
            off.push(median_us(&LocalWorld::new(n).flight_recorder(false), iters));
        }
        let mid = |v: &mut Vec<f64>| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        let (a, b) = (mid(&mut on), mid(&mut off));
        println!(
            "n={n}: 4 KiB all-reduce p50 with the flight recorder {a:.2} us, without {b:.2} us: {:+.2} us ({:+.1} %) over {rounds} alternated rounds of {iters} calls",
            a - b,
            100.0 * (a - b) / b
        );
    }
}
