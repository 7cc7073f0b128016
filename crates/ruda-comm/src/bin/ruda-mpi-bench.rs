//! The MPI transport against the same collectives called directly through
//! rsmpi, in the same run: `mpirun -n N ruda-mpi-bench [SIZES]` prints, for
//! all-reduce, all-gather, reduce-scatter and all-to-all on f32, the slowest
//! rank's median time of each, their ratio, and ruda's busbw with a memcpy
//! line per size. SIZES defaults to `4K,1M,16M,64M`.

use std::time::Instant;

use mpi::collective::SystemOperation;
use mpi::topology::SimpleCommunicator;
use mpi::traits::*;
use ruda_comm::bench::{self, BenchOp};
use ruda_comm::{Communicator, MpiWorld, ReduceOp};

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Slowest rank's median time of `f` over `iters` runs after warm-up.
fn time(world: &ruda_comm::MpiCommunicator, iters: usize, mut f: impl FnMut()) -> f64 {
    for _ in 0..iters / 5 + 1 {
        f();
    }
    let mut t = Vec::with_capacity(iters);
    for _ in 0..iters {
        world.barrier().expect("barrier");
        let s = Instant::now();
        f();
        let mut e = [s.elapsed().as_secs_f64()];
        world.all_reduce(&mut e, ReduceOp::Max).expect("max");
        t.push(e[0]);
    }
    median(t)
}

fn parse(s: &str) -> usize {
    let (num, mult) = match s.chars().last() {
        Some('K') => (&s[..s.len() - 1], 1 << 10),
        Some('M') => (&s[..s.len() - 1], 1 << 20),
        _ => (s, 1),
    };
    num.parse::<usize>().expect("a size like 4K or 64M") * mult
}

fn main() {
    let mpi = MpiWorld::init().expect("MPI starts");
    let world = mpi.world().expect("the world communicator");
    let raw = SimpleCommunicator::world();
    let (me, n) = (world.rank(), world.size());
    let sizes: Vec<usize> = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "4K,1M,16M,64M".into())
        .split(',')
        .map(parse)
        .collect();
    if me == 0 {
        println!(
            "# ruda MPI transport vs direct rsmpi, {n} ranks, f32; time = slowest rank, median"
        );
        println!(
            "{:>10} {:>15} {:>12} {:>12} {:>8} {:>12} {:>12}",
            "bytes", "op", "ruda (us)", "rsmpi (us)", "ratio", "busbw GB/s", "memcpy GB/s"
        );
    }
    for &bytes in &sizes {
        let iters = if bytes >= 16 << 20 {
            10
        } else if bytes >= 1 << 20 {
            50
        } else {
            1000
        };
        let (_, memcpy) = bench::memcpy(bytes, iters);
        let count = bytes / 4 / n * n;
        for op in [
            BenchOp::AllReduce,
            BenchOp::AllGather,
            BenchOp::ReduceScatter,
            BenchOp::AllToAll,
        ] {
            let block = count / n;
            let send = vec![
                1f32;
                if op == BenchOp::AllGather {
                    block
                } else {
                    count
                }
            ];
            let mut recv = vec![
                0f32;
                if op == BenchOp::ReduceScatter {
                    block
                } else {
                    count
                }
            ];
            let mut inout = send.clone();
            let ruda = match op {
                BenchOp::AllReduce => time(&world, iters, || {
                    world.all_reduce(&mut inout, ReduceOp::Sum).expect("ruda")
                }),
                BenchOp::AllGather => time(&world, iters, || {
                    world.all_gather(&send, &mut recv).expect("ruda")
                }),
                BenchOp::ReduceScatter => time(&world, iters, || {
                    world
                        .reduce_scatter(&send, &mut recv, ReduceOp::Sum)
                        .expect("ruda")
                }),
                _ => time(&world, iters, || {
                    world.all_to_all(&send, &mut recv).expect("ruda")
                }),
            };
            // rsmpi: the same call with separate send and receive buffers.
            let direct = match op {
                BenchOp::AllReduce => time(&world, iters, || {
                    raw.all_reduce_into(&send[..], &mut recv[..], SystemOperation::sum())
                }),
                BenchOp::AllGather => time(&world, iters, || {
                    raw.all_gather_into(&send[..], &mut recv[..])
                }),
                BenchOp::ReduceScatter => time(&world, iters, || {
                    raw.reduce_scatter_block_into(&send[..], &mut recv[..], SystemOperation::sum())
                }),
                _ => time(&world, iters, || {
                    raw.all_to_all_into(&send[..], &mut recv[..])
                }),
            };
            if me == 0 {
                let busbw = (count * 4) as f64 / ruda / 1e9 * op.bus_factor(n);
                println!(
                    "{:>10} {:>15} {:>12.2} {:>12.2} {:>8.3} {:>12.3} {:>12.3}",
                    count * 4,
                    op.name(),
                    ruda * 1e6,
                    direct * 1e6,
                    ruda / direct,
                    busbw,
                    memcpy
                );
            }
        }
    }
}
