//! Data-parallel training of a `burn-nn` model (Conv1d, ReLU, Linear; Adam):
//! on 1 to 4 ranks with disjoint (uneven) shards of one batch, every step
//! equals the serial run on the whole batch within f64 round-off, and the
//! replicas stay bit-identical.

#[path = "../examples/ddp_model/mod.rs"]
mod ddp_model;

#[test]
fn data_parallel_training_equals_the_serial_run_at_every_step() {
    let (batch, steps) = (13, 6);
    let serial = ddp_model::train(1, batch, steps).unwrap();
    for ranks in [2, 3, 4] {
        let runs = ddp_model::train(ranks, batch, steps).unwrap();
        for r in &runs {
            assert_eq!(r, &runs[0], "{ranks} ranks: replicas differ");
        }
        for (s, (one, many)) in serial[0].iter().zip(&runs[0]).enumerate() {
            let close = |a: f64, b: f64| (a - b).abs() <= 1e-12 * (1.0 + a.abs());
            assert!(
                close(one.loss, many.loss),
                "{ranks} ranks step {s}: loss {} vs {}",
                one.loss,
                many.loss
            );
            assert_eq!(one.params.len(), many.params.len());
            for (i, (a, b)) in one.params.iter().zip(&many.params).enumerate() {
                assert!(
                    close(*a, *b),
                    "{ranks} ranks step {s} parameter {i}: {a} vs {b}"
                );
            }
        }
        // Training moved the parameters: the comparison is not vacuous.
        assert_ne!(serial[0][0].params, serial[0][steps - 1].params);
    }
}

/// The same training on a device world (gradients summed by the backend's
/// own operations, never staged through host memory) equals the
/// host-staged run bit for bit.
#[test]
fn data_parallel_training_on_a_device_world_equals_the_host_staged_run() {
    let (batch, steps) = (13, 4);
    for ranks in [1, 3, 4] {
        let host = ddp_model::train(ranks, batch, steps).unwrap();
        let device = ddp_model::train_on_device(ranks, batch, steps).unwrap();
        assert_eq!(device, host, "{ranks} ranks");
    }
}
