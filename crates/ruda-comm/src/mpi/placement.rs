//! Where a communicator's ranks run, decided when it is made, and what
//! that lets its collectives use: one shared-memory segment for a
//! communicator on one host; with `MpiWorldBuilder::hierarchical(true)`,
//! across hosts with the same number of ranks on each (more than one), a
//! segment per host and a communicator joining the ranks of equal
//! position on every host, for hierarchical all-reduces; otherwise MPI
//! alone.

use std::ffi::c_int;

use mpi::ffi;

use super::raw::{self, datatype, operator};
use super::segment::{self, Segment, SegmentError, SingleCopy};
use super::session::Session;
use super::{arena, cma};
use crate::{CommError, DType, OpKind, ReduceOp};

/// The longest segment name rank 0's 64-byte message carries (after its
/// flag and length bytes, before the arena and slot sizes).
const MAX_NAME: usize = 46;

/// Whether, and how, a communicator moves its data through shared memory.
pub(crate) enum Shm {
    /// Not at all: checks are off, a rank's world was built with
    /// `shared_memory(false)`, a segment could not be mapped, or its ranks
    /// span hosts without `hierarchical(true)` on every rank, unevenly, or
    /// one per host.
    Off,
    /// Every rank on one host: everything through this segment.
    Ready(Segment),
    /// Several hosts with the same number of ranks each: all-reduces are
    /// hierarchical.
    Hosts(Hosts),
}

/// A communicator's view of its host, when its ranks span several hosts
/// with `k > 1` ranks on each.
pub(crate) struct Hosts {
    /// The segment of this host's ranks (in communicator rank order).
    pub seg: Segment,
    /// The communicator of the ranks with this rank's position on every
    /// host.
    pub cross: ffi::MPI_Comm,
    /// The communicator rank of each of this host's ranks.
    pub members: Vec<usize>,
    /// Whether every host's segment has arenas (hosts decide alone whether
    /// theirs can be had; shared buffers are offered only where all have
    /// them, so that every rank gets the same answer).
    pub arenas: bool,
}

impl Shm {
    /// Free the MPI handles this holds (the segment unmaps when dropped).
    /// Call with MPI not finalised, under the session's lock. Only the
    /// communicator's drop may call it: its arena and every `SharedBuffer`
    /// borrowed from it point into the segment until then, so a segment
    /// replaced on a live communicator would leave them dangling.
    pub(crate) fn free(&mut self) {
        if let Shm::Hosts(h) = self {
            // SAFETY: handles this value owns, freed once (then null).
            unsafe { ffi::MPI_Comm_free(&mut h.cross) };
        }
        *self = Shm::Off;
    }
}

/// Decide where the ranks of `comm` (this one `rank` of `size`) run and
/// map what they share. Collective over `comm`, blocking, like the rest of
/// a communicator's creation; every rank gets the same kind of answer.
pub(crate) fn place(
    comm: ffi::MPI_Comm,
    rank: usize,
    size: usize,
    session: &Session,
) -> Result<Shm, CommError> {
    let want = session.shm.on;
    // SAFETY: reading MPI's null communicator handle.
    let mut node = unsafe { ffi::RSMPI_COMM_NULL };
    let (mut node_size, mut node_rank): (c_int, c_int) = (0, 0);
    // SAFETY: a valid communicator; MPI writes the new handle, which this
    // function frees or hands on.
    let rc = session.mpi(|| unsafe {
        let rc = ffi::MPI_Comm_split_type(
            comm,
            ffi::RSMPI_COMM_TYPE_SHARED,
            rank as c_int,
            ffi::RSMPI_INFO_NULL,
            &mut node,
        );
        if rc == 0 {
            ffi::MPI_Comm_size(node, &mut node_size);
            ffi::MPI_Comm_rank(node, &mut node_rank);
        }
        rc
    });
    raw::check(OpKind::Init, rank, rc)?;
    let free = |c: &mut ffi::MPI_Comm| {
        // SAFETY: a handle this function owns, freed once.
        session.mpi(|| unsafe { ffi::MPI_Comm_free(c) });
    };
    // Every rank's view at once: whether all are on one host and want the
    // segment, the smallest and largest number of ranks on a host, and
    // whether all want hierarchical all-reduces.
    let one = c_int::from(want && node_size as usize == size);
    let mine = [
        one,
        node_size,
        -node_size,
        c_int::from(want && session.shm.hierarchical),
    ];
    let all = match min_all(comm, &mine, session) {
        Ok(a) => a,
        Err(e) => {
            free(&mut node);
            return Err(e);
        }
    };
    if all[0] == 1 {
        free(&mut node);
        return open_segment(comm, rank, size, session).map(|s| s.map_or(Shm::Off, Shm::Ready));
    }
    let (fewest, most, wanted) = (all[1], -all[2], all[3] == 1);
    if !wanted || fewest != most || fewest < 2 {
        free(&mut node);
        return Ok(Shm::Off);
    }
    match hosts(
        comm,
        node,
        rank,
        node_rank as usize,
        node_size as usize,
        session,
    ) {
        Ok(Some(h)) => Ok(Shm::Hosts(h)),
        Ok(None) => Ok(Shm::Off),
        Err(e) => Err(e),
    }
}

/// The minimum over the ranks of `comm` of each of four ints.
fn min_all(
    comm: ffi::MPI_Comm,
    mine: &[c_int; 4],
    session: &Session,
) -> Result<[c_int; 4], CommError> {
    let mut all = [0 as c_int; 4];
    // SAFETY: four ints each way; a blocking call on a valid communicator.
    let rc = session.mpi(|| unsafe {
        ffi::MPI_Allreduce(
            mine.as_ptr().cast(),
            all.as_mut_ptr().cast(),
            4,
            datatype(DType::I32),
            operator(ReduceOp::Min),
            comm,
        )
    });
    raw::check(OpKind::Init, 0, rc)?;
    Ok(all)
}

/// The hierarchical setup: the cross-host communicator, the members of
/// this host, and this host's segment; `None` (everything freed) when any
/// host could not map its segment. Takes `node` over.
fn hosts(
    comm: ffi::MPI_Comm,
    mut node: ffi::MPI_Comm,
    rank: usize,
    node_rank: usize,
    node_size: usize,
    session: &Session,
) -> Result<Option<Hosts>, CommError> {
    // SAFETY: reading MPI's null communicator handle.
    let mut cross = unsafe { ffi::RSMPI_COMM_NULL };
    let me = rank as c_int;
    let mut members = vec![0 as c_int; node_size];
    // SAFETY: valid communicators; MPI writes the new handle; `members`
    // holds one int per rank of `node`.
    let rc = session.mpi(|| unsafe {
        let mut rc = ffi::MPI_Comm_split(comm, node_rank as c_int, me, &mut cross);
        if rc == 0 {
            rc = ffi::MPI_Allgather(
                (&me as *const c_int).cast(),
                1,
                datatype(DType::I32),
                members.as_mut_ptr().cast(),
                1,
                datatype(DType::I32),
                node,
            );
        }
        rc
    });
    let seg = raw::check(OpKind::Init, rank, rc)
        .and_then(|()| open_segment(node, node_rank, node_size, session));
    // Every host must have its segment, or none uses one; a rank whose
    // setup failed still takes part, so that no rank waits for it.
    let ok = seg.as_ref().map_or(0, |s| c_int::from(s.is_some()));
    let arenas = seg.as_ref().map_or(0, |s| {
        c_int::from(s.as_ref().is_some_and(|s| s.arena_len() > 0))
    });
    let all = min_all(comm, &[ok, arenas, 0, 0], session);
    // The host's communicator served the setup only.
    // SAFETY: a handle this function owns, freed once.
    session.mpi(|| unsafe { ffi::MPI_Comm_free(&mut node) });
    match (seg, all) {
        (Ok(Some(seg)), Ok(a)) if a[0] == 1 => Ok(Some(Hosts {
            seg,
            cross,
            members: members.iter().map(|&r| r as usize).collect(),
            arenas: a[1] == 1,
        })),
        (seg, all) => {
            // SAFETY: reading MPI's null handle; freeing one this function
            // owns, once.
            session.mpi(|| unsafe {
                if cross != ffi::RSMPI_COMM_NULL {
                    ffi::MPI_Comm_free(&mut cross);
                }
            });
            seg.and(all).map(|_| None)
        }
    }
}

/// Make the segment (rank 0), tell every rank its name, map it on every
/// rank and agree that every rank did; then remove the name, so the memory
/// goes with the last rank that unmaps it. Collective over `comm` (all of
/// whose ranks run on one host), blocking, like the rest of a
/// communicator's creation. A segment that some rank cannot map is no
/// error: the communicator moves its data through MPI (and says why).
fn open_segment(
    comm: ffi::MPI_Comm,
    rank: usize,
    size: usize,
    session: &Session,
) -> Result<Option<Segment>, CommError> {
    // Rank 0's message: whether it made the segment, the length of its
    // name, the name, and (in the last 16 bytes) the arena and slot sizes.
    let mut msg = [0u8; 64];
    let mut created = None;
    let mut why = None;
    if rank == 0 {
        let name = segment::fresh_name();
        let asked = session
            .shm
            .slot
            .unwrap_or_else(|| segment::default_slot(size, segment::online_cpus()));
        let slot = segment::slot_bytes(asked, size);
        msg[56..].copy_from_slice(&(slot as u64).to_le_bytes());
        // Arenas that cannot be had (too large, a `/dev/shm` too small for
        // them) cost only themselves: the segment is made without them,
        // keeps its slots, and `shared_buffer` says `NoArena`.
        let asked_arena = session.shm.arena;
        let with_arena = match arena::arena_bytes(asked_arena) {
            Some(0) => None,
            Some(arena) => {
                Some(Segment::map_with_arena(&name, true, size, slot, arena, 0).map(|s| (s, arena)))
            }
            None => Some(Err(SegmentError(format!("{asked_arena} bytes overflow")))),
        };
        let made = match with_arena {
            Some(Ok((s, arena))) => {
                msg[48..56].copy_from_slice(&(arena as u64).to_le_bytes());
                Ok(s)
            }
            Some(Err(e)) => {
                let plain = Segment::map(&name, true, size, slot, 0);
                if plain.is_ok() {
                    eprintln!(
                        "ruda: no shared-buffer arenas of {asked_arena} bytes for a communicator of {size} ranks ({}); its segment keeps its slots",
                        e.0
                    );
                }
                plain
            }
            None => Segment::map(&name, true, size, slot, 0),
        };
        match made {
            Ok(s) if name.len() <= MAX_NAME => {
                msg[0] = 1;
                msg[1] = name.len() as u8;
                msg[2..2 + name.len()].copy_from_slice(name.as_bytes());
                created = Some((name, s));
            }
            Ok(_) => {
                segment::unlink(&name);
                why = Some(format!("the name {name} is too long"));
            }
            Err(e) => why = Some(e.0),
        }
    }
    // SAFETY: 64 bytes from rank 0 to all, a blocking call on a valid
    // communicator.
    let rc = session.mpi(|| unsafe {
        ffi::MPI_Bcast(msg.as_mut_ptr().cast(), 64, datatype(DType::U8), 0, comm)
    });
    let name = created.as_ref().map(|(n, _)| n.clone());
    let sent = raw::check(OpKind::Init, rank, rc);
    // A rank whose broadcast failed still takes part in the agreement, so
    // that no rank waits for it, then reports its error.
    let agreed = {
        let mine = match created.take() {
            _ if sent.is_err() => None,
            Some((_, s)) => Some(s),
            None if msg[0] == 1 => {
                let len = usize::from(msg[1]).min(MAX_NAME);
                let name = String::from_utf8_lossy(&msg[2..2 + len]).into_owned();
                let slot = u64::from_le_bytes(msg[56..].try_into().expect("8 bytes"));
                let slot = segment::slot_bytes(usize::try_from(slot).unwrap_or(usize::MAX), size);
                let arena = u64::from_le_bytes(msg[48..56].try_into().expect("8 bytes"));
                // Rank 0 sent whole pages; a length that does not fit here
                // fails the mapping below (the sizes disagree).
                let arena = usize::try_from(arena).unwrap_or(usize::MAX) / 4096 * 4096;
                Segment::map_with_arena(&name, false, size, slot, arena, rank)
                    .map_err(|e| why = Some(e.0))
                    .ok()
            }
            None => None,
        };
        let flag = c_int::from(mine.is_some());
        let mut all: c_int = 0;
        // SAFETY: one int each way; a blocking call on a valid communicator.
        let rc = session.mpi(|| unsafe {
            ffi::MPI_Allreduce(
                (&flag as *const c_int).cast(),
                (&mut all as *mut c_int).cast(),
                1,
                datatype(DType::I32),
                operator(ReduceOp::Min),
                comm,
            )
        });
        sent.and(raw::check(OpKind::Init, rank, rc))
            .map(|()| mine.filter(|_| all == 1))
    };
    // Every rank that could map it has (or the call failed): the name is
    // no longer needed.
    if let Some(n) = name {
        segment::unlink(&n);
    }
    match agreed? {
        Some(mut s) => {
            if size > 1
                && let Some(single_copy) = probe_single_copy(comm, rank, size, session)?
            {
                s.set_single_copy(single_copy);
            }
            Ok(Some(s))
        }
        None => {
            if let Some(why) = why {
                eprintln!(
                    "ruda: rank {rank} of a communicator of {size} cannot use shared memory ({why}); it moves data through MPI"
                );
            }
            Ok(None)
        }
    }
}

/// Whether every rank of `comm` (all on one host, with a segment) wants
/// single copies, the ranks have a CPU each (in the union of their
/// affinity masks), and every rank can read each peer's memory
/// ([`super::MpiWorldBuilder::shared_memory_single_copy`]): each rank
/// publishes its process id and the address of a word it chose, reads
/// every peer's word with [`cma::readable`], and the ranks agree on the
/// outcome (the minimum). Collective over `comm`, blocking; returns the
/// process ids in rank order and rank 0's call sizes when every rank
/// succeeded.
fn probe_single_copy(
    comm: ffi::MPI_Comm,
    rank: usize,
    size: usize,
    session: &Session,
) -> Result<Option<SingleCopy>, CommError> {
    // Each rank's pid, word address, word, whether it wants single
    // copies, its call sizes (rank 0's hold), and its CPU affinity mask.
    const WORDS: usize = 6 + cma::MASK_WORDS;
    let pid = cma::pid();
    // A word unlikely to be found by chance at a wrong address: the pid
    // and the word's own address.
    let mut word = Box::new(0x7275_6461_0000_0000_u64 ^ u64::from(pid.unsigned_abs()));
    let at = std::ptr::from_ref::<u64>(&word) as usize;
    *word ^= at as u64;
    let token = **std::hint::black_box(&word);
    let sizes = &session.shm.single_copy_sizes;
    let mut mine = [0i64; WORDS];
    mine[..6].copy_from_slice(&[
        i64::from(pid),
        at as i64,
        token as i64,
        i64::from(session.shm.single_copy && !sizes.is_empty()),
        sizes.start as i64,
        sizes.end as i64,
    ]);
    for (m, w) in mine[6..].iter_mut().zip(cma::cpu_mask()) {
        *m = w as i64;
    }
    let mut all = vec![0i64; size * WORDS];
    // SAFETY: `WORDS` i64 from each rank into `all` (`WORDS` per rank); a blocking call on a valid communicator.
    let rc = session.mpi(|| unsafe {
        ffi::MPI_Allgather(
            mine.as_ptr().cast(),
            WORDS as c_int,
            datatype(DType::I64),
            all.as_mut_ptr().cast(),
            WORDS as c_int,
            datatype(DType::I64),
            comm,
        )
    });
    // A rank whose gather failed still takes part in the agreement (with
    // a no), so that no rank waits for it, then reports its error.
    let gathered = raw::check(OpKind::Init, rank, rc);
    // With more ranks than the CPUs they may run on (the union of their
    // affinity masks: one core each under `mpirun --bind-to core`),
    // single copies measured 2–3× slower than the slots at 64 KiB to
    // 1 MiB (4 processes on 2 cores).
    let mut cpus = [0u64; cma::MASK_WORDS];
    for w in all.chunks_exact(WORDS) {
        for (c, &m) in cpus.iter_mut().zip(&w[6..]) {
            *c |= m as u64;
        }
    }
    let fits = cpus.iter().map(|c| c.count_ones() as usize).sum::<usize>() >= size;
    let ok = gathered.is_ok()
        && fits
        && all.chunks_exact(WORDS).enumerate().all(|(q, w)| {
            w[3] == 1
                && (q == rank
                    || libc::pid_t::try_from(w[0])
                        .is_ok_and(|p| cma::readable(p, w[1] as usize, w[2] as u64)))
        });
    // Every rank has read every word once the agreement returns.
    let agreed = min_all(comm, &[c_int::from(ok), 0, 0, 0], session);
    drop(std::hint::black_box(word));
    gathered?;
    if agreed?[0] != 1 {
        return Ok(None);
    }
    Ok(Some(SingleCopy {
        pids: all
            .chunks_exact(WORDS)
            .map(|w| libc::pid_t::try_from(w[0]).unwrap_or(0))
            .collect(),
        from_bytes: all[4] as usize,
        below_bytes: all[5] as usize,
    }))
}
