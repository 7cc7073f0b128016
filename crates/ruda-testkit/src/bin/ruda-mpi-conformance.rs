//! The conformance and failure suites on the MPI transport, one rank per
//! process: run under `mpirun -n N ruda-mpi-conformance [--unchecked] [MODE]`. The test
//! `tests/mpi.rs` launches it for N = 1 to 4 and checks its exit status and
//! output. Modes:
//!
//! - `conformance` (default): every operation × every element type, uneven
//!   and zero-length pieces, sub-groups, replica groups (and their
//!   refusals); prints `N passed, 0 failed`.
//!   With `--unchecked` the same without the per-call checks: the binary
//!   then starts MPI with the `unsafe` `MpiWorldBuilder::unchecked`, whose
//!   contract (every rank makes the same collective calls with matching
//!   arguments) this mode keeps by construction. Whoever runs the binary
//!   with `--unchecked` takes that contract on: every rank of the job must
//!   run this binary, in this mode, with the same flag. Other modes refuse
//!   the flag (they make mismatched calls on purpose).
//! - `failures`: mismatched lengths, different collectives, bad roots,
//!   overflowing counts and counts past MPI's `int` on some ranks end in
//!   the documented error on every rank, and
//!   `MPI_COMM_WORLD`'s own error handler is left alone.
//! - `timeout`: the last rank arrives after the deadline; the others get a
//!   `Timeout` naming it (with their flight record), and the job is then
//!   aborted rather than left waiting.
//! - `straggler` (3 ranks): the last rank arrives just after rank 1's
//!   deadline but before rank 0's, so its record exchange completes with
//!   rank 0 while rank 1 has given up: every rank must still end the call
//!   with the right result or a `Timeout` within twice its timeout (one for
//!   every rank to arrive, one for the data phase) and a small margin, and
//!   say so; the job is then aborted. This needs `--staged`
//!   (`MpiWorldBuilder::staged(true)`: the data phase on copies). Without
//!   it (the default: the data phase on the caller's buffers) the ranks
//!   left in the data phase abort the job at their deadline instead of
//!   returning, naming the rank that never joined.
//! - `p2p-failures`: point-to-point length and type mismatches end in the
//!   same error on both sides, a self-addressed half of a `send_recv` is
//!   refused, and large rings complete.
//! - `threads`: two threads per process use the world and a split of it at
//!   the same time; results are checked.
//! - `finalize`: a communicator kept past `MpiWorld::finalize` fails with
//!   a transport error instead of calling into a finalised MPI.
//! - `panic`: with `abort_on_panic`, rank 1 panics while the others wait in
//!   a collective; the job must end promptly with a non-zero status.
//! - `die`: rank 1 is killed mid-collective; the job must end promptly,
//!   naming it.
//! - `--no-shm` (any mode): `MpiWorldBuilder::shared_memory(false)`, so
//!   that ranks on one host move data through MPI. Rank 0 prints whether
//!   the world uses shared memory. `--slot BYTES`: shared-memory slots of
//!   that size (`MpiWorldBuilder::shared_memory_slot`; 4096 makes the
//!   suite's 5000-element calls take many rounds). `--hierarchical`:
//!   `MpiWorldBuilder::hierarchical(true)` (across hosts).
//!   `--single-copy-all`: every all-gather, all-to-all, broadcast and
//!   reduce-scatter of ranks on one host reads its peers' buffers directly
//!   (`MpiWorldBuilder::shared_memory_single_copy_sizes(0..usize::MAX)`);
//!   `--slots-only`: none does (`shared_memory_single_copy(false)`). Rank
//!   0 prints whether the world reads directly.
//! - `shared-buffers` (its world has 64 MiB arenas,
//!   `MpiWorldBuilder::shared_buffers`): all-reduces of shared buffers
//!   (f32, f64, f16; sum, max, mean; empty to many slots long) have the
//!   bits of the same call on ordinary memory; so do all-gathers,
//!   reduce-scatters, broadcasts and all-to-all(-v)s of shared buffers inside
//!   and past the cross-memory window (read through the arenas' mapping);
//!   one rank with ordinary memory among shared buffers, a split's arenas,
//!   a full arena's error, and ranges given back. `die --shared-buffers` kills a rank among
//!   all-reduces of shared buffers (in place on the peers' memory).
//! - `stall` (its world has 64 MiB arenas and a 1 s deadline): rank 1 is stopped
//!   (`SIGSTOP`) for 4 s among all-reduces and broadcasts of shared buffers; wherever the
//!   stop lands, its peers end within their deadline, naming it (a
//!   `Timeout` at the first barrier, or the end of the job with exit code
//!   75 when it stopped inside a call whose peers write in place).
//! - `soak [CALLS] [ELEMENTS]`: checked all-reduces in a loop (default 100
//!   of 2^20 f32), for the namespace cluster's fault tests: a stall or
//!   packet loss must leave every result right; a cut link or a killed
//!   rank must end the job.

use std::process::ExitCode;
use std::time::Duration;

use ruda_comm::{
    CommError, Communicator, InvalidArgument, MpiCommunicator, MpiWorld, OpKind, ReduceOp,
};
use ruda_testkit::conformance;

fn conformance_suite(world: &MpiCommunicator) -> Result<usize, String> {
    let mut passed = 0;
    // Calls of up to 4000 bytes a message go inline (their data with their
    // call records): up to 1000 elements of 4 bytes; 5000 elements take
    // MPI's data phase for every type (half precision included).
    for (len, seed) in [
        (0usize, 3u64),
        (1, 4),
        (13, 5),
        (64, 6),
        (1000, 7),
        (5000, 8),
    ] {
        conformance::check_all_dtypes(world, len, seed).map_err(|e| format!("len {len}: {e}"))?;
        passed += 1;
    }
    for seed in 0..3 {
        conformance::check_split(world, seed).map_err(|e| format!("split seed {seed}: {e}"))?;
        passed += 1;
    }
    for seed in 0..2 {
        conformance::check_replica_groups(world, seed)
            .map_err(|e| format!("replica groups seed {seed}: {e}"))?;
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

fn failures(world: &MpiCommunicator) -> Result<usize, String> {
    if !world.checked() {
        return Err("run with the per-call checks on".into());
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
        // Counts whose sum overflows: too large on every rank, no crash.
        let mut counts = vec![0usize; n];
        let r = if me == 0 {
            counts[0] = usize::MAX;
            counts[1] = 1;
            world.all_to_all_v::<f32>(&[], &counts, &mut [], &counts)
        } else {
            world.all_to_all_v::<f32>(&[], &counts, &mut [], &counts)
        };
        match r {
            Err(CommError::InvalidArgument {
                reason: InvalidArgument::TooLarge { .. },
                ..
            }) => passed += 1,
            other => return Err(format!("overflowing counts: {other:?}")),
        }
        // Counts that add up but exceed MPI's `int` on ranks 0 and 1 only
        // (2^31 bytes from rank 0 to rank 1): too large on every rank, the
        // others included, before any data moves (they used to enter the
        // data phase alone and wait). The buffers are zeroed allocations
        // that nothing touches.
        let big = 1usize << 31;
        let (mut sends, mut recvs) = (vec![0usize; n], vec![0usize; n]);
        if me == 0 {
            sends[1] = big;
        }
        if me == 1 {
            recvs[0] = big;
        }
        let send = vec![0u8; sends.iter().sum()];
        let mut recv = vec![0u8; recvs.iter().sum()];
        match world.all_to_all_v(&send, &sends, &mut recv, &recvs) {
            Err(CommError::InvalidArgument {
                reason: InvalidArgument::TooLarge { count, max },
                ..
            }) if count == big && max == i32::MAX as usize => passed += 1,
            other => return Err(format!("counts past MPI's int: {other:?}")),
        }
    }
    // A bad root is refused everywhere.
    match world.broadcast(&mut [0u8; 2], n) {
        Err(CommError::InvalidArgument { .. }) => passed += 1,
        other => return Err(format!("bad root: {other:?}")),
    }
    // The world still works after refused calls.
    world.barrier().map_err(|e| e.to_string())?;
    // ruda set its error handler on its own communicators only.
    if !world_handler_is_fatal() {
        return Err("MPI_COMM_WORLD's error handler was changed".into());
    }
    Ok(passed + 2)
}

fn world_handler_is_fatal() -> bool {
    use mpi::ffi;
    // SAFETY: MPI is initialised; query and free the handler of the world.
    unsafe {
        let mut h = std::mem::MaybeUninit::<ffi::MPI_Errhandler>::uninit();
        ffi::MPI_Comm_get_errhandler(ffi::RSMPI_COMM_WORLD, h.as_mut_ptr());
        let mut h = h.assume_init();
        let fatal = h == ffi::RSMPI_ERRORS_ARE_FATAL;
        ffi::MPI_Errhandler_free(&mut h);
        fatal
    }
}

/// The last rank arrives late: the others time out naming it.
fn timeout(world: &MpiCommunicator) -> Result<usize, String> {
    let (me, n) = (world.rank(), world.size());
    world.barrier().map_err(|e| e.to_string())?;
    let pairs = world
        .split(Some(0), 0)
        .map_err(|e| e.to_string())?
        .expect("a colour");
    if me == n - 1 {
        std::thread::sleep(Duration::from_secs(5));
        // Joins late; the others have given up, and abort the job.
        let _ = world.all_reduce(&mut [1f64], ReduceOp::Sum);
        std::thread::sleep(Duration::from_secs(60));
        return Err("the job should have been aborted".into());
    }
    // A receive from the late rank times out naming it.
    match pairs.recv(&mut [0u32; 3], n - 1) {
        Err(CommError::Timeout {
            op: OpKind::Recv,
            ref missing,
            ..
        }) if missing == &vec![n - 1] => {}
        other => return Err(format!("expected a receive timeout: {other:?}")),
    }
    match world.all_reduce(&mut [1f64], ReduceOp::Sum) {
        Err(CommError::Timeout {
            ref missing,
            ref context,
            ..
        }) if missing == &vec![n - 1] => {
            let h = context.histories();
            let ok =
                h.len() == 1 && h[0].calls.len() == 3 && h[0].calls[2].fp.op == OpKind::AllReduce;
            if !ok {
                return Err(format!("history: {h:?}"));
            }
        }
        other => return Err(format!("expected a timeout naming {}: {other:?}", n - 1)),
    }
    // The communicator stays failed.
    match world.barrier() {
        Err(CommError::Timeout {
            op: OpKind::Barrier,
            ..
        }) => {}
        other => return Err(format!("after the timeout: {other:?}")),
    }
    println!("rank {me}: timed out waiting for rank {}", n - 1);
    Ok(3)
}

/// The deadline of the `straggler` mode.
const STRAGGLER_TIMEOUT: Duration = Duration::from_millis(1500);

/// The elements of the `straggler` mode's all-reduce: 32 KiB, past what
/// travels with a call record.
const STRAGGLER_LEN: usize = 4096;

/// Rank 1 starts the all-reduce at once (deadline at 1.5 s), rank 0 after
/// 0.5 s (deadline at 2 s), rank 2 at 1.75 s: rank 1 times out in the
/// record exchange, while ranks 0 and 2 receive every record (rank 1 sent
/// its own at once) and reach the data phase, which rank 1 never joins.
/// Every rank must end within twice its timeout (arrival, then a fresh
/// deadline for the data) plus a margin; all hold on until 5 s, so that
/// each can report before the job is aborted.
fn straggler(world: &MpiCommunicator) -> Result<usize, String> {
    let (me, n) = (world.rank(), world.size());
    if n != 3 {
        return Err("run on 3 ranks".into());
    }
    world.barrier().map_err(|e| e.to_string())?;
    let t0 = std::time::Instant::now();
    let delay = [500, 0, 1750][me];
    std::thread::sleep(Duration::from_millis(delay));
    let start = std::time::Instant::now();
    // Large enough for a data phase (a small call's data travels with its
    // record, and the ranks that get every record finish it).
    let mut v = vec![1f64; STRAGGLER_LEN];
    let r = world.all_reduce(&mut v, ReduceOp::Sum);
    let took = start.elapsed();
    let margin = Duration::from_millis(500);
    let outcome = match &r {
        Ok(()) if v.iter().all(|&x| x == 3.0) => "the right result".to_string(),
        Ok(()) => return Err(format!("a wrong result {}", v[0])),
        Err(CommError::Timeout {
            op: OpKind::AllReduce,
            missing,
            ..
        }) if missing.is_empty() => "a timeout in the data phase".into(),
        Err(CommError::Timeout {
            op: OpKind::AllReduce,
            missing,
            ..
        }) => format!("a timeout naming {missing:?}"),
        Err(e) => return Err(format!("an unexpected error: {e}")),
    };
    if took > 2 * STRAGGLER_TIMEOUT + margin {
        return Err(format!("ended after {took:?} with {outcome}"));
    }
    println!(
        "rank {me}: straggler ended within twice the timeout ({} ms) with {outcome}",
        took.as_millis()
    );
    std::thread::sleep(Duration::from_secs(5).saturating_sub(t0.elapsed()));
    Ok(1)
}

/// `die` (2 ranks or more): rank 1 is killed (`SIGKILL`, by itself, from
/// another thread) while every rank is inside a stream of 4 MiB
/// all-reduces and all-gathers of 1 MiB per rank; the job must end
/// promptly, naming it (mpirun's own line).
fn die(world: &MpiCommunicator) -> Result<usize, String> {
    let me = world.rank();
    world.barrier().map_err(|e| e.to_string())?;
    if me == 1 {
        std::thread::spawn(|| {
            std::thread::sleep(Duration::from_millis(300));
            let _ = std::process::Command::new("kill")
                .args(["-9", &std::process::id().to_string()])
                .status();
        });
    }
    // All-reduces through the slots (or in place, on shared buffers) and
    // all-gathers of 1 MiB per rank, read directly where single copies are
    // on: the kill lands in either.
    let mut shared = world.shared_buffer::<f32>(1 << 20).ok();
    if me == 0 {
        println!("rank 0: die on shared buffers: {}", shared.is_some());
    }
    let mut plain = if shared.is_some() {
        Vec::new()
    } else {
        vec![1f32; 1 << 20]
    };
    let v: &mut [f32] = match &mut shared {
        Some(b) => b,
        None => &mut plain,
    };
    v.fill(1.0);
    let part = vec![me as f32; 1 << 18];
    let mut all = vec![0f32; part.len() * world.size()];
    for _ in 0..100_000 {
        let r = world
            .all_reduce(v, ReduceOp::Max)
            .and_then(|()| world.all_gather(&part, &mut all));
        if let Err(e) = r {
            println!("rank {me}: die: {e}");
            return Ok(1);
        }
    }
    Err("rank 1 should have died".into())
}

/// Bytes of each rank's arena in the `shared-buffers` mode and with
/// `--shared-buffers`.
const ARENA: usize = 64 << 20;

/// Rank `r`'s value at `i` for the shared-buffer checks: inexact in f32,
/// so that another reduction order would show in the bits.
fn shared_value(r: usize, i: usize) -> f64 {
    ((r * 7919 + i * 31) % 1000) as f64 / 3.0 - 100.0 + 0.1 * r as f64
}

/// An all-reduce of `len` elements on a shared buffer and on ordinary
/// memory (`plain_here`: this rank uses ordinary memory for both): the
/// same bits, and element 0 near its exact value.
fn shared_against_plain<T: ruda_comm::Element + std::fmt::Debug>(
    comm: &MpiCommunicator,
    len: usize,
    op: ReduceOp,
    plain_here: bool,
    make: impl Fn(f64) -> T,
    back: impl Fn(T) -> f64,
) -> Result<(), String> {
    let (me, n) = (comm.rank(), comm.size());
    let what = format!("{:?} {op:?} of {len} on rank {me}", T::DTYPE);
    let mut plain: Vec<T> = (0..len).map(|i| make(shared_value(me, i))).collect();
    let mut other = plain.clone();
    let mut shared = comm
        .shared_buffer::<T>(len)
        .map_err(|e| format!("{what}: {e}"))?;
    shared.copy_from_slice(&plain);
    let buf: &mut [T] = if plain_here { &mut other } else { &mut shared };
    comm.all_reduce(buf, op)
        .map_err(|e| format!("{what}: {e}"))?;
    comm.all_reduce(&mut plain, op)
        .map_err(|e| format!("{what}: {e}"))?;
    let buf: &[T] = if plain_here { &other } else { &shared };
    if bytemuck::cast_slice::<T, u8>(buf) != bytemuck::cast_slice::<T, u8>(&plain) {
        let at = (0..len)
            .find(|&i| back(buf[i]) != back(plain[i]))
            .unwrap_or(0);
        return Err(format!(
            "{what}: {:?} on shared memory against {:?} at {at}",
            buf.get(at),
            plain.get(at)
        ));
    }
    if len > 0 {
        let xs = (0..n).map(|q| back(make(shared_value(q, 0))));
        let want = match op {
            ReduceOp::Sum => xs.sum::<f64>(),
            ReduceOp::Mean => xs.sum::<f64>() / n as f64,
            _ => xs.fold(f64::MIN, f64::max),
        };
        let got = back(buf[0]);
        if (got - want).abs() > 1e-2 * want.abs().max(1.0) {
            return Err(format!("{what}: {got} where {want}"));
        }
    }
    Ok(())
}

/// The `stall` mode (see the module's docs).
fn stall(world: &MpiCommunicator) -> Result<usize, String> {
    let me = world.rank();
    let mut v = world
        .shared_buffer::<f32>(1 << 18)
        .map_err(|e| e.to_string())?;
    world.barrier().map_err(|e| e.to_string())?;
    if me == 1 {
        let pid = std::process::id();
        std::process::Command::new("sh")
            .arg("-c")
            .arg(format!(
                "sleep 0.3; kill -STOP {pid}; sleep 4; kill -CONT {pid}"
            ))
            .spawn()
            .map_err(|e| e.to_string())?;
    }
    // All-reduces and broadcasts (1 MiB: peers write in place) in turn.
    for i in 0..1_000_000u32 {
        v.fill(i as f32);
        let done = if i % 2 == 0 {
            world.all_reduce(&mut v, ReduceOp::Max)
        } else {
            world.broadcast(&mut v, i as usize / 2 % world.size())
        };
        if let Err(e) = done {
            println!("rank {me}: stall: {e}");
            return Ok(1);
        }
    }
    Err("rank 1 should have stalled".into())
}

/// One data-movement collective (`op`: all-gather, reduce-scatter,
/// broadcast from the last rank, all-to-all) of `total` f32 on shared
/// buffers (ordinary memory on this rank when `plain_here`) and on
/// ordinary memory: the same result.
fn moved_against_plain(
    comm: &MpiCommunicator,
    op: &str,
    total: usize,
    plain_here: bool,
) -> Result<(), String> {
    let (me, n) = (comm.rank(), comm.size());
    let what = format!("{op} of {total} on rank {me} (plain here: {plain_here})");
    let block = total / n;
    // All-to-all-v: rank q sends rank p `block` plus up to 2 × 4097 more
    // (uneven, off cache lines), and nothing to itself.
    let v = |q: usize, p: usize| {
        if q == p {
            0
        } else {
            block + (q + 2 * p) % 3 * 4097
        }
    };
    let (sends, recvs): (Vec<usize>, Vec<usize>) = (0..n).map(|q| (v(me, q), v(q, me))).unzip();
    let (send_len, recv_len) = match op {
        "all-gather" => (block, block * n),
        "reduce-scatter" => (block * n, block),
        "broadcast" => (total, 0),
        "all-to-all-v" => (sends.iter().sum(), recvs.iter().sum()),
        _ => (block * n, block * n),
    };
    let run = |send: &mut [f32], recv: &mut [f32]| match op {
        "all-gather" => comm.all_gather(send, recv),
        "reduce-scatter" => comm.reduce_scatter(send, recv, ReduceOp::Sum),
        "broadcast" => comm.broadcast(send, n - 1),
        "all-to-all-v" => comm.all_to_all_v(send, &sends, recv, &recvs),
        _ => comm.all_to_all(send, recv),
    };
    let fill = |b: &mut [f32]| {
        b.iter_mut()
            .enumerate()
            .for_each(|(i, x)| *x = shared_value(me, i) as f32)
    };
    let err = |e: CommError| format!("{what}: {e}");
    let (mut send, mut recv) = (vec![0f32; send_len], vec![0f32; recv_len]);
    fill(&mut send);
    run(&mut send, &mut recv).map_err(err)?;
    let want = if op == "broadcast" { send } else { recv };
    let room = |len| {
        comm.shared_buffer::<f32>(len)
            .map_err(|e| format!("{what}: {e}"))
    };
    let (mut s_shared, mut r_shared) = (room(send_len)?, room(recv_len)?);
    let (mut s_plain, mut r_plain) = (vec![0f32; send_len], vec![0f32; recv_len]);
    let (send, recv): (&mut [f32], &mut [f32]) = if plain_here {
        (&mut s_plain, &mut r_plain)
    } else {
        (&mut s_shared, &mut r_shared)
    };
    fill(send);
    run(send, recv).map_err(err)?;
    let got: &[f32] = if op == "broadcast" { send } else { recv };
    if bytemuck::cast_slice::<f32, u8>(got) != bytemuck::cast_slice::<f32, u8>(&want) {
        let at = (0..want.len()).find(|&i| got[i] != want[i]).unwrap_or(0);
        return Err(format!("{what}: {} against {} at {at}", got[at], want[at]));
    }
    Ok(())
}

/// The `shared-buffers` mode (see the module's docs).
fn shared_buffers(world: &MpiCommunicator) -> Result<usize, String> {
    use half::f16;
    use ruda_comm::SharedBufferError;
    let (me, n) = (world.rank(), world.size());
    if n == 1 {
        // One rank has no segment, so no arena.
        return match world.shared_buffer::<f32>(1) {
            Err(SharedBufferError::NoArena { rank: 0 }) => Ok(1),
            other => Err(format!("one rank: {other:?}")),
        };
    }
    let mut passed = 0;
    // Up to 5003 the calls go through the slots (below 64 KiB); 20 000 f32
    // and up in place.
    for len in [0usize, 1, 17, 5003, 20_000, 300_000] {
        for op in [ReduceOp::Sum, ReduceOp::Max, ReduceOp::Mean] {
            shared_against_plain::<f32>(world, len, op, false, |x| x as f32, f64::from)?;
            shared_against_plain::<f64>(world, len, op, false, |x| x, |x| x)?;
            shared_against_plain::<f16>(world, len, op, false, f16::from_f64, f16::to_f64)?;
            passed += 3;
        }
        // One rank on ordinary memory sends every rank to the slots.
        shared_against_plain::<f32>(
            world,
            len,
            ReduceOp::Sum,
            me == n - 1,
            |x| x as f32,
            f64::from,
        )?;
        passed += 1;
    }
    // Data movement inside the cross-memory window (1.2 MB) and past it
    // (17.2 MB): shared buffers read through the arenas' mapping, and one
    // rank on ordinary memory.
    for total in [300_000usize, 4_300_000] {
        for op in [
            "all-gather",
            "reduce-scatter",
            "broadcast",
            "all-to-all",
            "all-to-all-v",
        ] {
            moved_against_plain(world, op, total, false)?;
            moved_against_plain(world, op, total, me == 0)?;
            passed += 2;
        }
    }
    // A split has arenas of its own where it has a segment (two ranks or more).
    let sub = world
        .split(Some((me % 2) as u32), 0)
        .map_err(|e| e.to_string())?
        .ok_or("a colour was given")?;
    if sub.size() > 1 {
        // 64 KiB: the split's all-reduce in place.
        shared_against_plain::<f64>(&sub, 8192, ReduceOp::Sum, false, |x| x, |x| x)?;
    } else if !matches!(
        sub.shared_buffer::<f64>(1),
        Err(SharedBufferError::NoArena { .. })
    ) {
        return Err("a split of one rank has no arena".into());
    }
    // A shared buffer of the world passed to the split (whose segment it
    // is not in) is ordinary memory there: the right sum.
    let mut foreign = world
        .shared_buffer::<f64>(20_000)
        .map_err(|e| e.to_string())?;
    foreign.fill(me as f64);
    sub.all_reduce(&mut foreign, ReduceOp::Sum)
        .map_err(|e| e.to_string())?;
    let want: f64 = (0..n).filter(|q| q % 2 == me % 2).map(|q| q as f64).sum();
    if foreign.iter().any(|&x| x != want) {
        return Err(format!(
            "a world buffer on the split: {} where {want}",
            foreign[0]
        ));
    }
    drop(foreign);
    passed += 2;
    // A full arena says so, naming the rank; every range comes back.
    let kept = world
        .shared_buffer::<u8>(ARENA / 2)
        .map_err(|e| e.to_string())?;
    match world.shared_buffer::<u8>(ARENA / 2 + 1) {
        Err(SharedBufferError::Full {
            rank,
            free,
            arena: ARENA,
            ..
        }) if rank == me && free == ARENA / 2 => {}
        other => return Err(format!("a full arena: {other:?}")),
    }
    drop(kept);
    let whole = world
        .shared_buffer::<u8>(ARENA)
        .map_err(|e| format!("the whole arena back: {e}"))?;
    drop(whole);
    passed += 1;
    Ok(passed)
}

/// `soak CALLS ELEMENTS`: `CALLS` all-reduces of `ELEMENTS` f32 on the
/// world, each checked (rank r contributes r + 1 + call number, so a stale
/// or mixed-up buffer shows), printing when they start (`soak: started`,
/// for a test that waits to break something mid-run) and how long they
/// took. A network fault under it must leave every result right, or end
/// the job (the watchdog).
fn soak(world: &MpiCommunicator, args: &[String]) -> Result<usize, String> {
    let (me, n) = (world.rank(), world.size());
    let num = |i: usize, default: usize| {
        args.iter()
            .filter(|a| !a.starts_with("--"))
            .nth(i)
            .map_or(Ok(default), |a| {
                a.parse::<usize>().map_err(|e| format!("{a}: {e}"))
            })
    };
    let (calls, len) = (num(1, 100)?, num(2, 1 << 20)?);
    world.barrier().map_err(|e| e.to_string())?;
    if me == 0 {
        println!("soak: started, {calls} all-reduces of {len} f32 on {n} ranks");
    }
    let start = std::time::Instant::now();
    let mut v = vec![0f32; len];
    for call in 0..calls {
        v.fill((me + 1 + call) as f32);
        world
            .all_reduce(&mut v, ReduceOp::Sum)
            .map_err(|e| format!("call {call}: {e}"))?;
        let want = (0..n).map(|r| (r + 1 + call) as f32).sum::<f32>();
        if let Some(i) = v.iter().position(|&x| x != want) {
            return Err(format!("call {call}: element {i} is {} not {want}", v[i]));
        }
    }
    if me == 0 {
        println!(
            "soak: {calls} all-reduces of {len} f32 right on {n} ranks in {:.3} s",
            start.elapsed().as_secs_f64()
        );
    }
    Ok(calls)
}

/// Point-to-point mismatches are errors on both sides, and the pair keeps
/// working afterwards; large rings do not deadlock.
fn p2p_failures(world: &MpiCommunicator) -> Result<usize, String> {
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
    // Half of a send_recv addressed to oneself is refused, not a hang.
    match world.send_recv(&[1u8], me, &mut [0u8], (me + 1) % n) {
        Err(CommError::InvalidArgument {
            reason: InvalidArgument::SelfMessage { .. },
            ..
        }) => passed += 1,
        other => return Err(format!("self send_recv: {other:?}")),
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

/// Two threads per process, each on its own communicator, at once.
fn threads(world: &MpiCommunicator) -> Result<usize, String> {
    let (me, n) = (world.rank(), world.size());
    let sub = world
        .split(Some((me % 2) as u32), me as i32)
        .map_err(|e| e.to_string())?
        .expect("a colour");
    let sub_n = sub.size();
    let rounds = 200;
    std::thread::scope(|s| {
        let a = s.spawn(|| {
            for i in 0..rounds {
                let mut v = [(me + i) as f64; 64];
                world
                    .all_reduce(&mut v, ReduceOp::Sum)
                    .map_err(|e| e.to_string())?;
                let want = (0..n).map(|r| (r + i) as f64).sum::<f64>();
                if v.iter().any(|&x| x != want) {
                    return Err(format!("world round {i}: {} != {want}", v[0]));
                }
            }
            Ok(())
        });
        let b = s.spawn(|| {
            for i in 0..rounds {
                let mut out = vec![0u32; sub_n];
                sub.all_gather(&[(me * 1000 + i) as u32], &mut out)
                    .map_err(|e| e.to_string())?;
                let want: Vec<u32> = (0..n)
                    .filter(|r| r % 2 == me % 2)
                    .map(|r| (r * 1000 + i) as u32)
                    .collect();
                if out != want {
                    return Err(format!("split round {i}: {out:?} != {want:?}"));
                }
            }
            Ok(())
        });
        a.join().expect("thread a")?;
        b.join().expect("thread b")
    })?;
    Ok(2)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let unchecked = args.iter().any(|a| a == "--unchecked");
    let staged = args.iter().any(|a| a == "--staged");
    let no_shm = args.iter().any(|a| a == "--no-shm");
    let mode = args
        .iter()
        .enumerate()
        .find(|&(i, a)| !a.starts_with("--") && (i == 0 || args[i - 1] != "--slot"))
        .map(|(_, a)| a)
        .cloned()
        .unwrap_or_else(|| "conformance".into());
    let mut builder = match mode.as_str() {
        "timeout" => MpiWorld::builder().timeout(Duration::from_millis(1500)),
        "stall" => MpiWorld::builder()
            .timeout(Duration::from_secs(1))
            .shared_buffers(ARENA),
        "shared-buffers" => MpiWorld::builder()
            .abort_on_panic(true)
            .shared_buffers(ARENA),
        "straggler" => MpiWorld::builder().timeout(STRAGGLER_TIMEOUT),
        _ => MpiWorld::builder().abort_on_panic(true),
    };
    if unchecked {
        if mode != "conformance" {
            eprintln!(
                "--unchecked is for the conformance mode only (mode {mode} makes mismatched calls on purpose)"
            );
            return ExitCode::FAILURE;
        }
        // The suite's calls depend only on the rank count and fixed seeds
        // (locally refused calls never reach MPI), every rank runs it to
        // the end, and the caller gives every rank this flag.
        // SAFETY: every rank makes the same collective calls with matching arguments.
        builder = unsafe { builder.unchecked() };
    }
    if staged {
        builder = builder.staged(true);
    }
    if no_shm {
        builder = builder.shared_memory(false);
    }
    if args.iter().any(|a| a == "--shared-buffers") {
        builder = builder.shared_buffers(ARENA);
    }
    if args.iter().any(|a| a == "--hierarchical") {
        builder = builder.hierarchical(true);
    }
    if args.iter().any(|a| a == "--single-copy-all") {
        builder = builder.shared_memory_single_copy_sizes(0..usize::MAX);
    }
    if args.iter().any(|a| a == "--slots-only") {
        builder = builder.shared_memory_single_copy(false);
    }
    if let Some(i) = args.iter().position(|a| a == "--slot") {
        let Some(bytes) = args.get(i + 1).and_then(|b| b.parse::<usize>().ok()) else {
            eprintln!("--slot takes a number of bytes");
            return ExitCode::FAILURE;
        };
        builder = builder.shared_memory_slot(bytes);
    }
    let mpi = match builder.init() {
        Ok(m) => m,
        Err(e) => {
            eprintln!("MPI did not start: {e}");
            return ExitCode::FAILURE;
        }
    };
    let world = mpi.world().expect("the world communicator");
    let (me, n) = (world.rank(), world.size());
    if me == 0 {
        let on = if world.shared_memory() { "on" } else { "off" };
        println!("rank 0: shared memory {on}");
        let on = if world.shared_memory_single_copy() {
            "on"
        } else {
            "off"
        };
        println!("rank 0: single copy {on}");
    }
    let result = match mode.as_str() {
        "conformance" => conformance_suite(&world).and_then(|passed| {
            // Every segment the suite's communicators made (rank 0 of each
            // names it after its own process) is unlinked once mapped: none
            // is left in /dev/shm while the process still runs.
            let prefix = format!("ruda-{}-", std::process::id());
            let left: Vec<String> = std::fs::read_dir("/dev/shm")
                .map(|d| {
                    d.filter_map(|e| e.ok())
                        .map(|e| e.file_name().to_string_lossy().into_owned())
                        .filter(|f| f.starts_with(&prefix))
                        .collect()
                })
                .unwrap_or_default();
            if left.is_empty() {
                Ok(passed + 1)
            } else {
                Err(format!("shared-memory objects left in /dev/shm: {left:?}"))
            }
        }),
        "failures" => failures(&world),
        "timeout" => timeout(&world),
        "straggler" => straggler(&world),
        "p2p-failures" => p2p_failures(&world),
        "threads" => threads(&world),
        "finalize" => {
            world.barrier().expect("barrier");
            let kept = world.split(Some(0), 0).expect("split").expect("colour");
            mpi.finalize().expect("finalize");
            match kept.barrier() {
                Err(CommError::Transport { message, .. }) if message.contains("finalised") => {
                    if me == 0 {
                        println!("mpi finalize on {n} ranks: 1 passed, 0 failed");
                    }
                    return ExitCode::SUCCESS;
                }
                other => Err(format!("a call after finalize: {other:?}")),
            }
        }
        "soak" => soak(&world, &args),
        "die" => die(&world),
        "shared-buffers" => shared_buffers(&world),
        "stall" => stall(&world),
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
            // Panicking aborts the whole job (abort_on_panic), so no rank is
            // left waiting for this one.
            panic!("rank {me} of {n}: {mode} FAILED: {e}");
        }
    }
}
