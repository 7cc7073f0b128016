//! Carrying out an exchange's posted operations.
//!
//! A *pass* visits every peer with posted operations, in ascending rank
//! order, and blocks there until that peer's own wait visits this rank.
//! On each pair the two ranks exchange a summary of what they posted for
//! each other (their exchange's tag; forward and backward sends and
//! receives) and each send's descriptor; pair up, in posting order, this
//! rank's forward receives with the peer's forward sends and its backward
//! receives with the peer's backward sends (and the other way); check the
//! messages that pair up and agree on a verdict (the lower rank's first);
//! then move those tensors, the lower rank sending first. What does not
//! pair up stays posted for the next pass. Passes repeat until what the
//! caller waits for is done.
//!
//! Every rank visits its pairs in the same global order (by lower, then
//! higher rank), so when every rank has posted, before waiting, all it
//! sends and receives in a step (rings, halos, pipeline neighbours), the
//! first unserved pair in that order always has both ranks at it: no cycle
//! of waits. A rank that waits for a peer which is itself blocked on a
//! third rank waiting for this one is a cycle the communicator's timeout
//! ends.

use alloc::collections::{BTreeMap, VecDeque};
use alloc::vec;
use alloc::vec::Vec;

use crate::error::{Error, PairProblem, PostedCounts, TensorOp};
use crate::group::Group;
use crate::linear_op::Role;
use crate::p2p::{REPLY, decode, encode, pair_error};

use super::posted::{Arrived, DESC, Desc, Posted, PostedRecv, PostedSend, Queue, lock};

/// The first word of a pair's posting summary ("RUDA-XCH").
const XMAGIC: i64 = 0x5255_4441_5843_4831;
/// Words of a summary: marker, tag, then the four counts.
const SUMMARY: usize = 6;
/// The most operations of one kind posted for one peer that a pass
/// carries out.
pub(crate) const MAX_POSTED: usize = 1 << 20;

/// One peer's posted operations, each list in posting order.
struct PerPeer<G> {
    forward_sends: VecDeque<PostedSend<G>>,
    backward_sends: VecDeque<PostedSend<G>>,
    forward_recvs: VecDeque<PostedRecv<G>>,
    backward_recvs: VecDeque<PostedRecv<G>>,
}

impl<G> Default for PerPeer<G> {
    fn default() -> Self {
        PerPeer {
            forward_sends: VecDeque::new(),
            backward_sends: VecDeque::new(),
            forward_recvs: VecDeque::new(),
            backward_recvs: VecDeque::new(),
        }
    }
}

impl<G> PerPeer<G> {
    fn counts(&self) -> PostedCounts {
        PostedCounts {
            forward_sends: self.forward_sends.len(),
            backward_sends: self.backward_sends.len(),
            forward_receives: self.forward_recvs.len(),
            backward_receives: self.backward_recvs.len(),
        }
    }

    fn into_posted(self) -> impl Iterator<Item = Posted<G>> {
        self.forward_sends
            .into_iter()
            .chain(self.backward_sends)
            .map(Posted::Send)
            .chain(
                self.forward_recvs
                    .into_iter()
                    .chain(self.backward_recvs)
                    .map(Posted::Recv),
            )
    }
}

/// Carry out passes until `done` holds (or nothing is posted). On an
/// error every posted operation is dropped and every posted receive's
/// slot gets the error.
pub(crate) fn drive<G: Group>(g: &G, q: &Queue<G>, done: &dyn Fn() -> bool) -> Result<(), Error> {
    while !done() {
        let posted = core::mem::take(&mut *lock(&q.posted));
        if posted.is_empty() {
            return Ok(());
        }
        let mut pairs: BTreeMap<usize, PerPeer<G>> = BTreeMap::new();
        for op in posted {
            match op {
                Posted::Send(s) => {
                    let p = pairs.entry(s.peer).or_default();
                    if s.desc.backward {
                        p.backward_sends.push_back(s);
                    } else {
                        p.forward_sends.push_back(s);
                    }
                }
                Posted::Recv(r) => {
                    let p = pairs.entry(r.peer).or_default();
                    if r.want.backward {
                        p.backward_recvs.push_back(r);
                    } else {
                        p.forward_recvs.push_back(r);
                    }
                }
            }
        }
        let mut failed = None;
        for (&peer, ops) in pairs.iter_mut() {
            if let Err(e) = pair(g, peer, q.tag, ops) {
                failed = Some(e);
                break;
            }
        }
        let mut queue = lock(&q.posted);
        let later = core::mem::take(&mut *queue);
        let left = pairs.into_values().flat_map(PerPeer::into_posted);
        match failed {
            None => {
                queue.extend(left);
                queue.extend(later);
            }
            Some(e) => {
                drop(queue);
                for op in left.chain(later) {
                    if let Posted::Recv(r) = op {
                        *lock(&r.slot) = Some(Err(e.clone()));
                    }
                }
                return Err(e);
            }
        }
    }
    Ok(())
}

fn role(backward: bool) -> Role {
    Role {
        op: TensorOp::Exchange,
        backward,
    }
}

/// Send `words` to and receive `n` words from `peer`, the lower rank
/// sending first.
fn swap<G: Group>(g: &G, peer: usize, words: &[i64], n: usize) -> Result<Vec<i64>, Error> {
    let mut got = vec![0i64; n];
    if g.rank() < peer {
        g.send_words(words, peer)?;
        g.recv_words(&mut got, peer)?;
    } else {
        g.recv_words(&mut got, peer)?;
        g.send_words(words, peer)?;
    }
    Ok(got)
}

fn count(w: i64) -> usize {
    usize::try_from(w).unwrap_or(usize::MAX)
}

/// The first problem among the messages this rank receives (pairing
/// `recvs` with `descs`, which start at `offset` in the sender's list).
fn first_problem<G>(
    recvs: &VecDeque<PostedRecv<G>>,
    descs: &[Desc],
    offset: usize,
) -> Option<(usize, PairProblem)> {
    recvs
        .iter()
        .zip(descs)
        .enumerate()
        .find_map(|(i, (r, d))| r.want.check(d).map(|p| (offset + i, p)))
}

/// One pass over the pair (this rank, `peer`).
fn pair<G: Group>(g: &G, peer: usize, tag: u32, ops: &mut PerPeer<G>) -> Result<(), Error> {
    let me = g.rank();
    let lower = me < peer;
    let (lo, hi) = if lower { (me, peer) } else { (peer, me) };
    let err = |backward, sender, receiver, problem| {
        pair_error(role(backward), me, sender, receiver, problem).in_call(role(backward))
    };
    let mine = ops.counts();
    let summary = [
        XMAGIC,
        i64::from(tag),
        mine.forward_sends as i64,
        mine.backward_sends as i64,
        mine.forward_receives as i64,
        mine.backward_receives as i64,
    ];
    let theirs = swap(g, peer, &summary, SUMMARY).map_err(|e| e.in_call(role(false)))?;
    if theirs[0] != XMAGIC {
        return Err(err(
            false,
            peer,
            me,
            PairProblem::NotASend { code: theirs[0] },
        ));
    }
    let their_tag = u32::try_from(theirs[1]).unwrap_or(u32::MAX);
    let their = PostedCounts {
        forward_sends: count(theirs[2]),
        backward_sends: count(theirs[3]),
        forward_receives: count(theirs[4]),
        backward_receives: count(theirs[5]),
    };
    let (lo_counts, hi_counts) = if lower { (mine, their) } else { (their, mine) };
    // Problems both ranks see alike in the summaries: reported the same
    // way on both, before anything else moves.
    if their_tag != tag {
        let (lower_tag, higher_tag) = if lower {
            (tag, their_tag)
        } else {
            (their_tag, tag)
        };
        return Err(err(
            false,
            lo,
            hi,
            PairProblem::Tag {
                lower: lower_tag,
                higher: higher_tag,
            },
        ));
    }
    let largest = [mine, their]
        .iter()
        .flat_map(|c| {
            [
                c.forward_sends,
                c.backward_sends,
                c.forward_receives,
                c.backward_receives,
            ]
        })
        .max()
        .unwrap_or(0);
    if largest > MAX_POSTED {
        return Err(err(
            false,
            lo,
            hi,
            PairProblem::TooMany {
                posted: largest,
                limit: MAX_POSTED,
            },
        ));
    }
    let k_in_f = mine.forward_receives.min(their.forward_sends);
    let k_in_b = mine.backward_receives.min(their.backward_sends);
    let k_out_f = mine.forward_sends.min(their.forward_receives);
    let k_out_b = mine.backward_sends.min(their.backward_receives);
    if k_in_f + k_in_b + k_out_f + k_out_b == 0 {
        return Err(err(
            false,
            lo,
            hi,
            PairProblem::Stuck {
                lower: lo_counts,
                higher: hi_counts,
            },
        ));
    }
    // The descriptors of every posted send, forward ones first.
    let words: Vec<i64> = ops
        .forward_sends
        .iter()
        .chain(&ops.backward_sends)
        .flat_map(|s| s.desc.words())
        .collect();
    let their_sends = their.forward_sends + their.backward_sends;
    // Both ranks skip the swap exactly when neither posted a send.
    let descs: Vec<Desc> = if words.is_empty() && their_sends == 0 {
        Vec::new()
    } else {
        swap(g, peer, &words, their_sends * DESC)
            .map_err(|e| e.in_call(role(false)))?
            .chunks_exact(DESC)
            .map(Desc::parse)
            .collect()
    };
    let (fwd_descs, bwd_descs) = descs.split_at(their.forward_sends);
    // Each rank's verdict on the messages it receives (index into the
    // sender's list), the lower rank's taken first on both.
    let verdict = first_problem(&ops.forward_recvs, &fwd_descs[..k_in_f], 0).or_else(|| {
        first_problem(
            &ops.backward_recvs,
            &bwd_descs[..k_in_b],
            their.forward_sends,
        )
    });
    let mut words = [0i64; REPLY + 1];
    words[..REPLY].copy_from_slice(&encode(verdict.map(|(_, p)| p)));
    words[REPLY] = verdict.map_or(0, |(i, _)| i as i64);
    let theirs = swap(g, peer, &words, REPLY + 1).map_err(|e| e.in_call(role(false)))?;
    let mut reply = [0i64; REPLY];
    reply.copy_from_slice(&theirs[..REPLY]);
    let their_verdict = decode(&reply).map(|p| (count(theirs[REPLY]), p));
    let (lo_verdict, hi_verdict) = if lower {
        (verdict, their_verdict)
    } else {
        (their_verdict, verdict)
    };
    if let Some((i, p)) = lo_verdict {
        // A message from the higher rank to the lower.
        return Err(err(i >= hi_counts.forward_sends, hi, lo, p));
    }
    if let Some((i, p)) = hi_verdict {
        return Err(err(i >= lo_counts.forward_sends, lo, hi, p));
    }
    // The tensors, forward ones first: the lower rank sends first.
    let out: Vec<PostedSend<G>> = ops
        .forward_sends
        .drain(..k_out_f)
        .chain(ops.backward_sends.drain(..k_out_b))
        .collect();
    let inn: Vec<(PostedRecv<G>, Desc)> = ops
        .forward_recvs
        .drain(..k_in_f)
        .zip(fwd_descs.iter().cloned())
        .chain(
            ops.backward_recvs
                .drain(..k_in_b)
                .zip(bwd_descs.iter().cloned()),
        )
        .collect();
    if lower {
        if let Err(e) = send_all(g, out) {
            for (r, _) in inn {
                *lock(&r.slot) = Some(Err(e.clone()));
            }
            return Err(e);
        }
        receive_all(g, inn)
    } else {
        receive_all(g, inn)?;
        send_all(g, out)
    }
}

fn send_all<G: Group>(g: &G, out: Vec<PostedSend<G>>) -> Result<(), Error> {
    for s in out {
        let backward = s.desc.backward;
        (s.payload)(g).map_err(|e| e.in_call(role(backward)))?;
    }
    Ok(())
}

/// Receive each message into its slot; on an error, every slot not yet
/// filled gets it.
fn receive_all<G: Group>(g: &G, inn: Vec<(PostedRecv<G>, Desc)>) -> Result<(), Error> {
    let mut inn = inn.into_iter();
    while let Some((r, desc)) = inn.next() {
        match (r.receive)(g, &desc) {
            Ok(tensor) => *lock(&r.slot) = Some(Ok(Arrived { tensor, desc })),
            Err(e) => {
                let e = e.in_call(role(desc.backward));
                *lock(&r.slot) = Some(Err(e.clone()));
                for (r, _) in inn {
                    *lock(&r.slot) = Some(Err(e.clone()));
                }
                return Err(e);
            }
        }
    }
    Ok(())
}
