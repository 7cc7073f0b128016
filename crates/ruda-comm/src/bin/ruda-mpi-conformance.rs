//! The conformance and failure suites on the MPI transport, one rank per
//! process: run under `mpirun -n N ruda-mpi-conformance [MODE]`. The test
//! `tests/mpi.rs` launches it for N = 1 to 4 and checks its exit status and
//! output. Modes:
//!
//! - `conformance` (default): every operation × every element type, uneven
//!   and zero-length pieces, sub-groups; prints `N passed, 0 failed`.
//! - `debug-failures` (with `RUDA_DEBUG=1`): mismatched lengths and
//!   different collectives end in the documented error on every rank.
//! - `p2p-failures`: point-to-point length and type mismatches end in the
//!   same error on both sides, and large rings complete.
//! - `panic`: rank 1 panics while the others wait in a collective; the job
//!   must end promptly with a non-zero status.

use std::process::ExitCode;

use ruda_comm::{CommError, Communicator, MpiWorld, OpKind, ReduceOp, conformance};

fn conformance_suite(world: &ruda_comm::MpiCommunicator) -> Result<usize, String> {
    let mut passed = 0;
    for (len, seed) in [(0usize, 3u64), (1, 4), (13, 5), (64, 6), (1000, 7)] {
        conformance::check_all_dtypes(world, len, seed).map_err(|e| format!("len {len}: {e}"))?;
        passed += 1;
    }
    for seed in 0..3 {
        conformance::check_split(world, seed).map_err(|e| format!("split seed {seed}: {e}"))?;
        passed += 1;
    }
    // Every operation on the two halves of the world.
    let half = world
        .split(Some((world.rank() % 2) as u32), 0)
        .map_err(|e| e.to_string())?
        .expect("a colour");
    conformance::check_all_dtypes(&half, 9, 11).map_err(|e| format!("sub-group: {e}"))?;
    passed += 1;
    Ok(passed)
}

fn debug_failures(world: &ruda_comm::MpiCommunicator) -> Result<usize, String> {
    if !world.debug() {
        return Err("run with RUDA_DEBUG=1".into());
    }
    let (me, n) = (world.rank(), world.size());
    let mut passed = 0;
    if n > 1 {
        // Rank n-1 passes one element fewer: a count mismatch on every rank.
        let mut v = vec![1f32; if me == n - 1 { 3 } else { 4 }];
        match world.all_reduce(&mut v, ReduceOp::Sum) {
            Err(CommError::CountMismatch { offender, .. }) if offender == n - 1 => passed += 1,
            other => return Err(format!("mismatched lengths: {other:?}")),
        }
        // Rank 1 calls another collective: a desync on every rank.
        let r = if me == 1 {
            world.all_gather(&[1.0f32, 2.0], &mut vec![0f32; 2 * n])
        } else {
            world.all_reduce(&mut [0f32; 8], ReduceOp::Sum)
        };
        match r {
            Err(CommError::Desync { first, other, .. })
                if first.op == OpKind::AllReduce && other.op == OpKind::AllGather =>
            {
                passed += 1
            }
            other => return Err(format!("desync: {other:?}")),
        }
    }
    // A bad root is refused everywhere.
    match world.broadcast(&mut [0u8; 2], n) {
        Err(CommError::InvalidArgument { .. }) => passed += 1,
        other => return Err(format!("bad root: {other:?}")),
    }
    // The world still works after refused calls.
    world.barrier().map_err(|e| e.to_string())?;
    Ok(passed + 1)
}

/// Point-to-point mismatches are errors on both sides, and the pair keeps
/// working afterwards (the mismatched message was drained, not left in
/// flight); large rings do not deadlock.
fn p2p_failures(world: &ruda_comm::MpiCommunicator) -> Result<usize, String> {
    let (me, n) = (world.rank(), world.size());
    if n < 2 {
        return Ok(0);
    }
    let mut passed = 0;
    if me < 2 {
        // Rank 1 expects 3 elements where rank 0 sends 4.
        let r = if me == 0 {
            world.send(&[1f32; 4], 1)
        } else {
            world.recv(&mut [0f32; 3], 0)
        };
        match r {
            Err(CommError::LengthMismatch {
                offender: 1,
                expected: 4,
                got: 3,
                ..
            }) => passed += 1,
            other => return Err(format!("length mismatch: {other:?}")),
        }
        // Other element types: a desync on both sides.
        let r = if me == 0 {
            world.send(&[1f32; 4], 1)
        } else {
            world.recv(&mut [0i32; 4], 0)
        };
        match r {
            Err(CommError::Desync {
                first_rank: 0,
                other_rank: 1,
                ..
            }) => passed += 1,
            other => return Err(format!("dtype mismatch: {other:?}")),
        }
        // The pair still works.
        let mut v = [0u8; 2];
        if me == 0 {
            world.send(&[7u8, 8], 1)
        } else {
            world.recv(&mut v, 0)
        }
        .map_err(|e| e.to_string())?;
        if me == 1 && v != [7, 8] {
            return Err(format!("after the mismatches: {v:?}"));
        }
        passed += 1;
    }
    // A ring of large send_recv calls (rendezvous-sized) completes.
    let big = vec![me as f64; 1 << 20];
    let mut got = vec![0f64; 1 << 20];
    world
        .send_recv(&big, (me + 1) % n, &mut got, (me + n - 1) % n)
        .map_err(|e| e.to_string())?;
    if got[0] != ((me + n - 1) % n) as f64 {
        return Err("ring".into());
    }
    Ok(passed + 1)
}

fn main() -> ExitCode {
    let mode = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "conformance".into());
    let world = match MpiWorld::init() {
        Ok(w) => w,
        Err(e) => {
            eprintln!("MPI did not start: {e}");
            return ExitCode::FAILURE;
        }
    };
    let (me, n) = (world.rank(), world.size());
    let result = match mode.as_str() {
        "conformance" => conformance_suite(&world),
        "debug-failures" => debug_failures(&world),
        "p2p-failures" => p2p_failures(&world),
        "panic" => {
            world.barrier().expect("barrier");
            if me == 1 % n {
                panic!("rank {me} fails on purpose");
            }
            let mut v = [1f64; 4];
            let _ = world.all_reduce(&mut v, ReduceOp::Sum);
            Err("the job should have been aborted".into())
        }
        other => Err(format!("unknown mode {other}")),
    };
    match result {
        Ok(passed) => {
            // mpirun's status is non-zero if any rank fails, so rank 0's
            // line stands for the job only together with a zero status.
            if me == 0 {
                println!("mpi {mode} on {n} ranks: {passed} passed, 0 failed");
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            // Panicking aborts the whole job (see MpiWorld::init), so no
            // rank is left waiting for this one.
            panic!("rank {me} of {n}: {mode} FAILED: {e}");
        }
    }
}
