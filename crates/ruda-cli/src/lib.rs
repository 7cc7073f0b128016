//! The library behind the `ruda` binary: the demo (a spatially decomposed
//! model trained on a process grid and checked against the serial run) and
//! the bandwidth benchmark in the conventions of nccl-tests.

#![warn(missing_docs)]

pub mod baseline;
pub mod bench_cmd;
pub mod demo;
pub mod plot;
pub mod sizes;
