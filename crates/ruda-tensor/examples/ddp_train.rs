//! Data-parallel training of a `burn-nn` model with ruda: 4 ranks on
//! disjoint shards of one batch, gradients summed over the ranks after
//! `backward()` (one collective per step), an Adam step on every replica —
//! compared with one rank on the whole batch, step by step.
//!
//! Run with `cargo run -p ruda-tensor --example ddp_train` (4 thread ranks;
//! `RUDA_WORLD_SIZE` sets another count), or built with feature `mpi` under
//! `mpirun -n 4`: the same program, launched by `ruda_comm::Launch`.

#[path = "ddp_model/mod.rs"]
mod ddp_model;

use ruda_comm::{Communicator, Launch};
use ruda_tensor::HostCollective;
use ruda_tensor::layout::compute_split_shapes;

fn main() {
    let (batch, steps) = (13, 8);
    // The serial run: one rank, in this process.
    let serial = ddp_model::train(1, batch, steps).expect("the serial run");
    // The data-parallel one: threads, or one process per rank under mpirun.
    let parallel = Launch::new()
        .threads(4)
        .run(|comm| {
            let n = comm.size();
            let shards = compute_split_shapes(batch, n).expect("a sample per rank");
            ddp_model::rank_steps(&HostCollective::new(comm), &shards, steps).map(|s| (n, s))
        })
        .unwrap_or_else(|e| panic!("the data-parallel run failed: {e}"));
    let ranks = parallel[0].0;
    let parallel: Vec<_> = parallel.into_iter().map(|(_, s)| s).collect();
    let mut worst = 0f64;
    for (s, (one, four)) in serial[0].iter().zip(&parallel[0]).enumerate() {
        let d = one
            .params
            .iter()
            .zip(&four.params)
            .map(|(a, b)| (a - b).abs())
            .fold((one.loss - four.loss).abs(), f64::max);
        worst = worst.max(d);
        println!(
            "step {s}: loss serial {:.15} {ranks} ranks {:.15}  largest parameter difference {d:.1e}",
            one.loss, four.loss
        );
    }
    for r in &parallel {
        assert_eq!(r, &parallel[0], "the replicas must stay identical");
    }
    assert!(
        worst < 1e-12,
        "serial and data-parallel differ by {worst:e}"
    );
    println!("{ranks}-rank data-parallel training equals the serial run to {worst:.1e}");
}
