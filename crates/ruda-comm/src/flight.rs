//! The flight recorder: every communicator keeps its last calls (sequence,
//! operation, element type, counts, root or peer, start and end, outcome)
//! in a small ring, always. [`crate::CommError::Timeout`],
//! [`crate::CommError::Desync`] and [`crate::CommError::PeerFailure`] carry
//! every rank's recent history in their [`crate::ErrorContext`], so that a
//! user sees which rank stopped where; with `RUDA_FLIGHT_RECORDER=path` set,
//! each reporting rank also writes what it knows to `path.<world rank>`.
//!
//! Recording costs two uncontended lock/unlock pairs and two clock reads
//! per call.

use std::fmt;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

use crate::{CommError, Fingerprint};

/// Calls each communicator remembers.
pub const FLIGHT_RECORDER_ENTRIES: usize = 64;

/// The environment variable naming the file prefix failures are dumped to.
pub const FLIGHT_RECORDER_ENV: &str = "RUDA_FLIGHT_RECORDER";

/// How a recorded call ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// Still inside the call (or the rank never came back from it).
    Running,
    /// Returned successfully.
    Completed,
    /// Returned this kind of error.
    Failed(ErrorKind),
}

/// The kind of a [`CommError`], without its fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// [`CommError::LengthMismatch`].
    LengthMismatch,
    /// [`CommError::CountMismatch`].
    CountMismatch,
    /// [`CommError::Desync`].
    Desync,
    /// [`CommError::Timeout`].
    Timeout,
    /// [`CommError::PeerFailure`].
    PeerFailure,
    /// [`CommError::InvalidArgument`].
    InvalidArgument,
    /// [`CommError::Transport`].
    Transport,
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Outcome::Running => f.write_str("RUNNING"),
            Outcome::Completed => f.write_str("ok"),
            Outcome::Failed(k) => write!(f, "failed: {k:?}"),
        }
    }
}

/// One call as the flight recorder keeps it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CallRecord {
    /// The call's fingerprint (sequence number, operation, type, count,
    /// reduction, root). A point-to-point call takes no sequence number of
    /// its own: its `seq` is the number of collectives before it.
    pub fp: Fingerprint,
    /// Elements this rank passed (its send or in-place buffer; for `recv`,
    /// its receive buffer).
    pub elements: usize,
    /// The peer of a point-to-point call, in the communicator's numbering.
    pub peer: Option<usize>,
    /// When the call started, from the recorder's epoch.
    pub started: Duration,
    /// When it returned, from the recorder's epoch.
    pub ended: Option<Duration>,
    /// How it ended.
    pub outcome: Outcome,
}

impl fmt::Display for CallRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.fp)?;
        if let Some(p) = self.peer {
            write!(f, " peer {p}")?;
        }
        write!(
            f,
            " [{} elements] started +{:.6}s",
            self.elements,
            self.started.as_secs_f64()
        )?;
        match self.ended {
            Some(e) => write!(f, ", took {:.1} us", (e - self.started).as_secs_f64() * 1e6)?,
            None => f.write_str(", never returned")?,
        }
        write!(f, ": {}", self.outcome)
    }
}

/// The recent calls of one rank of a communicator, oldest first.
///
/// # Example
/// ```
/// use ruda_comm::{Communicator, LocalWorld};
/// let h = LocalWorld::new(2).run(|c| { c.barrier()?; Ok::<_, ruda_comm::CommError>(c.flight_record()) }).unwrap();
/// assert_eq!(h[0].calls.len(), 1);
/// assert_eq!(h[0].calls[0].fp.op, ruda_comm::OpKind::Barrier);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RankHistory {
    /// The rank in the communicator.
    pub rank: usize,
    /// Its rank in the world the communicator was split from.
    pub world_rank: usize,
    /// Wall-clock time of the recorder's epoch, to which every call's times are relative.
    pub epoch: SystemTime,
    /// Calls the rank made before (and including) the failure, oldest first.
    pub calls: Vec<CallRecord>,
}

impl fmt::Display for RankHistory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "rank {} (world {}), last {} calls:",
            self.rank,
            self.world_rank,
            self.calls.len()
        )?;
        for c in &self.calls {
            writeln!(f, "  {c}")?;
        }
        Ok(())
    }
}

struct Ring {
    entries: Vec<CallRecord>,
    /// Calls recorded so far; the next goes to `total % capacity`.
    total: u64,
}

/// One rank's ring of recent calls. Written by the rank's own calls (which
/// never overlap: communicators refuse concurrent use), read by any rank
/// that reports an error. Aligned to its own cache lines: the ranks'
/// recorders sit side by side in their group, and each rank locks its own
/// on every call.
#[repr(align(128))]
pub(crate) struct FlightRecorder {
    epoch: Instant,
    epoch_wall: SystemTime,
    /// Whether calls are recorded at all.
    on: bool,
    ring: Mutex<Ring>,
}

/// Where a call's record sits, to finish it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Token(u64);

impl FlightRecorder {
    /// An empty recorder whose times count from `epoch`.
    pub(crate) fn new(epoch: Instant, epoch_wall: SystemTime, on: bool) -> Self {
        FlightRecorder {
            epoch,
            epoch_wall,
            on,
            ring: Mutex::new(Ring {
                entries: Vec::with_capacity(FLIGHT_RECORDER_ENTRIES),
                total: 0,
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Ring> {
        // A panic never happens while the ring is locked; recover anyway.
        self.ring.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Record the start of a call.
    pub(crate) fn begin(
        &self,
        fp: Fingerprint,
        elements: usize,
        peer: Option<usize>,
        now: Instant,
    ) -> Token {
        if !self.on {
            return Token(u64::MAX);
        }
        let record = CallRecord {
            fp,
            elements,
            peer,
            started: now.saturating_duration_since(self.epoch),
            ended: None,
            outcome: Outcome::Running,
        };
        let mut ring = self.lock();
        let token = ring.total;
        if ring.entries.len() < FLIGHT_RECORDER_ENTRIES {
            ring.entries.push(record);
        } else {
            let slot = (token % FLIGHT_RECORDER_ENTRIES as u64) as usize;
            ring.entries[slot] = record;
        }
        ring.total += 1;
        Token(token)
    }

    /// Record how the call of `token` ended.
    pub(crate) fn end(&self, token: Token, outcome: Outcome) {
        if !self.on {
            return;
        }
        let now = self.epoch.elapsed();
        let mut ring = self.lock();
        // Calls never overlap, so the record is still there unless more
        // than a ring's worth of calls passed, which cannot happen.
        if ring.total - token.0 <= FLIGHT_RECORDER_ENTRIES as u64 {
            let slot = (token.0 % FLIGHT_RECORDER_ENTRIES as u64) as usize;
            let r = &mut ring.entries[slot];
            r.ended = Some(now);
            r.outcome = outcome;
        }
    }

    /// The recorded calls, oldest first.
    pub(crate) fn history(&self, rank: usize, world_rank: usize) -> RankHistory {
        let ring = self.lock();
        let cap = FLIGHT_RECORDER_ENTRIES as u64;
        let calls = if ring.total <= cap {
            ring.entries.clone()
        } else {
            let start = (ring.total % cap) as usize;
            ring.entries[start..]
                .iter()
                .chain(&ring.entries[..start])
                .copied()
                .collect()
        };
        RankHistory {
            rank,
            world_rank,
            epoch: self.epoch_wall,
            calls,
        }
    }
}

/// The outcome a result records.
pub(crate) fn outcome_of<T>(r: &Result<T, CommError>) -> Outcome {
    match r {
        Ok(_) => Outcome::Completed,
        Err(e) => Outcome::Failed(e.kind()),
    }
}

/// With `RUDA_FLIGHT_RECORDER=path`, write `error` and the histories it
/// carries to `path.<world rank of the reporter>` (best effort: a failure to
/// write is reported on standard error, never turned into another error).
pub(crate) fn dump_if_requested(error: &CommError) {
    let Some(prefix) = std::env::var_os(FLIGHT_RECORDER_ENV) else {
        return;
    };
    let ctx = error.context();
    let reporter = ctx.world_rank(error.rank()).unwrap_or(error.rank());
    let mut path = prefix;
    path.push(format!(".{reporter}"));
    let mut text = format!("{error}\n\n");
    for h in ctx.histories() {
        text.push_str(&h.to_string());
        text.push('\n');
    }
    if let Err(e) = std::fs::write(&path, text) {
        eprintln!(
            "ruda: could not write the flight recorder to {}: {e}",
            std::path::Path::new(&path).display()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::OpKind;

    fn fp(seq: u64) -> Fingerprint {
        Fingerprint::new(seq, OpKind::Barrier, None, 0)
    }

    #[test]
    fn the_ring_keeps_the_last_calls_in_order() {
        let r = FlightRecorder::new(Instant::now(), SystemTime::now(), true);
        let n = FLIGHT_RECORDER_ENTRIES as u64 + 5;
        for s in 0..n {
            let t = r.begin(fp(s), 0, None, Instant::now());
            r.end(t, Outcome::Completed);
        }
        let t = r.begin(fp(n), 3, Some(1), Instant::now());
        let h = r.history(0, 0);
        assert_eq!(h.calls.len(), FLIGHT_RECORDER_ENTRIES);
        let seqs: Vec<u64> = h.calls.iter().map(|c| c.fp.seq).collect();
        let want: Vec<u64> = (n + 1 - FLIGHT_RECORDER_ENTRIES as u64..=n).collect();
        assert_eq!(seqs, want);
        let last = h.calls.last().unwrap();
        assert_eq!(
            (last.outcome, last.ended, last.peer),
            (Outcome::Running, None, Some(1))
        );
        r.end(t, Outcome::Failed(ErrorKind::Timeout));
        let last = *r.history(0, 0).calls.last().unwrap();
        assert_eq!(last.outcome, Outcome::Failed(ErrorKind::Timeout));
        assert!(last.ended.unwrap() >= last.started);
    }
}
