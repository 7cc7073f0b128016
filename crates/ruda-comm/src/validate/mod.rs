//! The rules every transport applies to a collective call, in one place.
//!
//! A transport is "move bytes + exchange records": before any data moves,
//! each rank learns every rank's [`CallArgs`] (the local transport reads
//! them from shared slots, the MPI transport exchanges them as
//! [`wire`] words) and calls [`verdict`] on the same list in rank order, so
//! every rank finds the same first problem and reports the same error (but
//! for the reporting rank). The checked arithmetic on counts ([`sizes`])
//! serves the transports' own local checks as well.

mod args;
mod rules;
pub(crate) mod sizes;
#[cfg_attr(not(feature = "mpi"), allow(dead_code))]
pub(crate) mod wire;

pub(crate) use args::{CallArgs, CountList};
pub(crate) use rules::{length, verdict};
