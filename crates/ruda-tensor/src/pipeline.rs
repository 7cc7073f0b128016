//! Pipeline schedules: the order in which one stage of a model split
//! over ranks runs its micro-batches' forward and backward passes.
//!
//! [`one_f_one_b`] is the non-interleaved "one forward, one backward"
//! schedule of PipeDream-Flush / Megatron-LM: stage `s` of `S` first runs
//! `min(S − s − 1, M)` forward passes (warm-up), then alternates one
//! forward and one backward pass, then finishes the backward passes, so at
//! most `S − s` micro-batches' activations are alive on a stage at once
//! (GPipe's all-forward-then-all-backward keeps `M`). The stages move
//! activations and gradients with an [`crate::Exchange`]: each forward
//! posts its output's send, each backward posts its input gradient's send,
//! and the next wait carries both out paired with the neighbour's, so the
//! schedule cannot deadlock. `examples/pipeline_1f1b.rs` runs it.

use alloc::vec::Vec;

use crate::error::{Error, TensorOp};

/// One step of a stage's schedule: a micro-batch's forward or backward
/// pass.
///
/// # Example
/// See [`one_f_one_b`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PipeStep {
    /// The forward pass of micro-batch `m`.
    Forward(usize),
    /// The backward pass of micro-batch `m`.
    Backward(usize),
}

/// The 1F1B schedule of stage `stage` of `stages` over `micro_batches`
/// micro-batches: every micro-batch's forward pass once, then (later) its
/// backward pass once, in the order the stage runs them.
///
/// # Errors
/// [`Error::InvalidSetting`] when `stages` is 0 or `stage >= stages`.
///
/// # Example
/// ```
/// use ruda_tensor::pipeline::{PipeStep::*, one_f_one_b};
/// // The first of 3 stages warms up with 2 forward passes.
/// assert_eq!(
///     one_f_one_b(3, 0, 4).unwrap(),
///     vec![Forward(0), Forward(1), Forward(2), Backward(0), Forward(3), Backward(1), Backward(2), Backward(3)]
/// );
/// // The last stage alternates from the start.
/// assert_eq!(one_f_one_b(3, 2, 2).unwrap(), vec![Forward(0), Backward(0), Forward(1), Backward(1)]);
/// ```
pub fn one_f_one_b(
    stages: usize,
    stage: usize,
    micro_batches: usize,
) -> Result<Vec<PipeStep>, Error> {
    // Two steps a micro-batch, each a few words: a count whose schedule
    // could not be allocated is refused rather than a panic.
    let most = isize::MAX as usize / (2 * core::mem::size_of::<PipeStep>());
    if micro_batches > most {
        return Err(Error::InvalidSetting {
            op: TensorOp::Pipeline,
            setting: "micro_batches",
            value: micro_batches as f64,
            domain: "a schedule memory can hold",
        });
    }
    if stages == 0 || stage >= stages {
        return Err(Error::InvalidSetting {
            op: TensorOp::Pipeline,
            setting: if stages == 0 { "stages" } else { "stage" },
            value: if stages == 0 { 0.0 } else { stage as f64 },
            domain: "stages ≥ 1 and 0 ≤ stage < stages",
        });
    }
    let warmup = (stages - stage - 1).min(micro_batches);
    let steady = micro_batches - warmup;
    let mut steps = Vec::with_capacity(2 * micro_batches);
    steps.extend((0..warmup).map(PipeStep::Forward));
    for i in 0..steady {
        steps.push(PipeStep::Forward(warmup + i));
        steps.push(PipeStep::Backward(i));
    }
    steps.extend((steady..micro_batches).map(PipeStep::Backward));
    Ok(steps)
}
