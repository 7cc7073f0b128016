//! Issue 27 (5): a model split into 2–4 pipeline stages, trained with the
//! 1F1B schedule through an `Exchange`, equals the serial model bit for
//! bit (parameters and losses), with fewer, as many and more micro-batches
//! than stages, on the host-staged and the device-resident group; the
//! schedule itself runs every pass once, forward before backward, with at
//! most `stages − stage` micro-batches in flight.

#[path = "../examples/pipeline_model/mod.rs"]
mod pipeline_model;

use ruda_tensor::Error;
use ruda_tensor::pipeline::{PipeStep, one_f_one_b};

#[test]
fn a_1f1b_pipeline_equals_the_serial_run_bit_for_bit() {
    for stages in 2..=4 {
        for micro in [1, stages, 5] {
            let serial = pipeline_model::train_serial(stages, micro, 3, 3);
            let piped = pipeline_model::train_pipeline(stages, micro, 3, 3).unwrap();
            assert_eq!(piped, serial, "{stages} stages, {micro} micro-batches");
            // Training moved the parameters: the comparison is not vacuous.
            let fresh = pipeline_model::train_serial(stages, micro, 3, 0);
            assert_ne!(fresh.stages, serial.stages);
            assert!(serial.losses[2] < serial.losses[0], "{:?}", serial.losses);
        }
    }
}

/// Micro-batches of no rows (an empty batch): zero losses and zero
/// gradients travel through every stage, and the pipeline still equals
/// the serial run.
#[test]
fn empty_micro_batches_pass_through_the_pipeline() {
    for stages in [2, 3] {
        let serial = pipeline_model::train_serial(stages, 2, 0, 2);
        let piped = pipeline_model::train_pipeline(stages, 2, 0, 2).unwrap();
        assert_eq!(piped, serial, "{stages} stages");
        assert_eq!(serial.losses, vec![0.0, 0.0]);
    }
}

#[test]
fn the_pipeline_on_a_device_world_equals_the_serial_run() {
    let serial = pipeline_model::train_serial(3, 4, 2, 2);
    let piped = pipeline_model::train_pipeline_on_device(3, 4, 2, 2).unwrap();
    assert_eq!(piped, serial);
}

#[test]
fn the_1f1b_schedule_runs_each_pass_once_with_bounded_activations() {
    for stages in 1..=8 {
        for stage in 0..stages {
            for micro in 0..=10 {
                let steps = one_f_one_b(stages, stage, micro).unwrap();
                assert_eq!(steps.len(), 2 * micro);
                let (mut fwd, mut bwd, mut peak) = (0usize, 0usize, 0usize);
                for step in &steps {
                    match *step {
                        PipeStep::Forward(m) => {
                            assert_eq!(m, fwd, "forward passes in order");
                            fwd += 1;
                        }
                        PipeStep::Backward(m) => {
                            assert_eq!(m, bwd, "backward passes in order");
                            assert!(m < fwd, "backward of {m} before its forward");
                            bwd += 1;
                        }
                    }
                    peak = peak.max(fwd - bwd);
                }
                assert_eq!((fwd, bwd), (micro, micro));
                assert!(
                    peak <= (stages - stage).min(micro.max(1)),
                    "{stages} stages, stage {stage}, {micro} micro-batches: {peak} in flight"
                );
            }
        }
    }
    for huge in [usize::MAX, usize::MAX / 2 - 1, isize::MAX as usize / 4] {
        assert!(matches!(
            one_f_one_b(2, 0, huge),
            Err(Error::InvalidSetting {
                setting: "micro_batches",
                ..
            })
        ));
    }
    for (stages, stage) in [(0, 0), (3, 3)] {
        assert!(matches!(
            one_f_one_b(stages, stage, 4),
            Err(Error::InvalidSetting { .. })
        ));
    }
}
