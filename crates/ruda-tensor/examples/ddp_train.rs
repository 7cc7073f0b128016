//! Data-parallel training of a `burn-nn` model with ruda: 4 ranks on
//! disjoint shards of one batch, gradients summed over the ranks after
//! `backward()` (one collective per step), an Adam step on every replica —
//! compared with one rank on the whole batch, step by step.
//!
//! Run with `cargo run -p ruda-tensor --example ddp_train`.

#[path = "ddp_model/mod.rs"]
mod ddp_model;

fn main() {
    let (batch, steps) = (13, 8);
    let serial = ddp_model::train(1, batch, steps).expect("the serial run");
    let parallel = ddp_model::train(4, batch, steps).expect("the 4-rank run");
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
            "step {s}: loss serial {:.15} 4 ranks {:.15}  largest parameter difference {d:.1e}",
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
    println!("4-rank data-parallel training equals the serial run to {worst:.1e}");
}
