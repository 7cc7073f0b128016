//! # ruda-tensor
//!
//! The tensor layer of ruda on Burn (work in progress).
