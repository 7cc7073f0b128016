//! The library behind the `ruda` binary: the demo (a spectral model on the
//! sphere trained on a process grid and checked against the serial run),
//! the bandwidth benchmark in the conventions of nccl-tests, and the
//! spherical harmonic transform benchmark.

#![warn(missing_docs)]

pub mod baseline;
pub mod bench_cmd;
pub mod bench_report;
pub mod demo;
pub mod device_bench;
pub mod picture;
pub mod plot;
pub mod sht_bench;
pub mod sizes;
pub mod swe_bench;
pub mod swe_demo;
pub mod timed_comm;
pub mod timed_group;

/// Every Rust snippet of the README, compiled and run as a doc test so
/// that it cannot rot (`cargo test -p ruda-cli --doc`).
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeSnippets;
