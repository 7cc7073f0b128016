//! Carrying out an exchange's posted operations.
//!
//! A *pass* visits every peer with posted operations, in ascending rank
//! order. On each pair the two ranks exchange what they posted (a count
//! of sends and receives, and each send's descriptor), check the messages
//! that pair up (this rank's first k receives against the peer's first k
//! sends, in posting order, and the other way), agree on a verdict, and
//! move those tensors: the lower rank sends first, the higher receives
//! first. What does not pair up stays posted for the next pass. Passes
//! repeat until what the caller waits for is done.
//!
//! Every rank visits its pairs in the same global order (pairs sorted by
//! their lower, then higher rank: ascending peer order on each rank), so
//! the pair that is first in that order among those still unserved always
//! has both ranks at it: no cycle of waits, whatever the pattern (rings,
//! halos, pipelines), provided each rank's operations are eventually
//! matched by its peers'.

use alloc::collections::{BTreeMap, VecDeque};
use alloc::vec;
use alloc::vec::Vec;

use crate::error::{Error, PairProblem, TensorOp};
use crate::group::Group;
use crate::linear_op::Role;
use crate::p2p::{REPLY, decode, encode, pair_error};

use super::posted::{Arrived, DESC, Desc, Posted, PostedRecv, PostedSend, Queue, lock};

/// The first word of a pair's posting summary ("RUDA-XCH").
const XMAGIC: i64 = 0x5255_4441_5843_4831;
/// The most sends a summary may announce (a larger count is not a ruda
/// exchange).
const MAX_POSTED: usize = 1 << 20;

/// One peer's posted sends and receives, each in posting order.
type PerPeer<G> = (VecDeque<PostedSend<G>>, VecDeque<PostedRecv<G>>);

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
                Posted::Send(s) => pairs.entry(s.peer).or_default().0.push_back(s),
                Posted::Recv(r) => pairs.entry(r.peer).or_default().1.push_back(r),
            }
        }
        let mut failed = None;
        for (&peer, (sends, recvs)) in pairs.iter_mut() {
            if let Err(e) = pair(g, peer, sends, recvs) {
                failed = Some(e);
                break;
            }
        }
        let mut queue = lock(&q.posted);
        let later = core::mem::take(&mut *queue);
        let left = pairs.into_values().flat_map(|(sends, recvs)| {
            sends
                .into_iter()
                .map(Posted::Send)
                .chain(recvs.into_iter().map(Posted::Recv))
        });
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

/// One pass over the pair (this rank, `peer`).
fn pair<G: Group>(
    g: &G,
    peer: usize,
    sends: &mut VecDeque<PostedSend<G>>,
    recvs: &mut VecDeque<PostedRecv<G>>,
) -> Result<(), Error> {
    let me = g.rank();
    let err = |backward, sender, receiver, problem| {
        pair_error(role(backward), me, sender, receiver, problem).in_call(role(backward))
    };
    // What each side posted: counts, then the sends' descriptors.
    let summary = [XMAGIC, sends.len() as i64, recvs.len() as i64];
    let theirs = swap(g, peer, &summary, 3).map_err(|e| e.in_call(role(false)))?;
    if theirs[0] != XMAGIC {
        return Err(err(
            false,
            peer,
            me,
            PairProblem::NotASend { code: theirs[0] },
        ));
    }
    let their_sends = usize::try_from(theirs[1]).unwrap_or(usize::MAX);
    let their_recvs = usize::try_from(theirs[2]).unwrap_or(usize::MAX);
    if their_sends > MAX_POSTED || their_recvs > MAX_POSTED {
        return Err(err(false, peer, me, PairProblem::NotASend { code: XMAGIC }));
    }
    let mine: Vec<i64> = sends.iter().flat_map(|s| s.desc.words()).collect();
    let descs: Vec<Desc> = if mine.is_empty() && their_sends == 0 {
        Vec::new()
    } else {
        // Both sides send their descriptor message (possibly empty), so
        // the exchange stays symmetric.
        swap(g, peer, &mine, their_sends * DESC)
            .map_err(|e| e.in_call(role(false)))?
            .chunks_exact(DESC)
            .map(Desc::parse)
            .collect()
    };
    let k_in = recvs.len().min(their_sends);
    let k_out = sends.len().min(their_recvs);
    if k_in == 0 && k_out == 0 {
        // Both posted something here, yet nothing pairs up: both only
        // send, or both only receive. Both ranks see the same counts.
        let both_send = !sends.is_empty();
        let (sender, receiver) = if both_send { (me, peer) } else { (peer, me) };
        return Err(err(
            false,
            sender,
            receiver,
            PairProblem::Stuck { both_send },
        ));
    }
    // The verdict on the messages this rank receives: the first problem.
    let mine_bad = recvs
        .iter()
        .zip(&descs)
        .take(k_in)
        .enumerate()
        .find_map(|(i, (r, d))| r.want.check(d).map(|p| (i, p)));
    let mut verdict = [0i64; REPLY + 1];
    verdict[..REPLY].copy_from_slice(&encode(mine_bad.map(|(_, p)| p)));
    verdict[REPLY] = mine_bad.map_or(0, |(i, _)| i as i64);
    let their_verdict = swap(g, peer, &verdict, REPLY + 1).map_err(|e| e.in_call(role(false)))?;
    if let Some((i, p)) = mine_bad {
        return Err(err(descs[i].backward, peer, me, p));
    }
    let mut reply = [0i64; REPLY];
    reply.copy_from_slice(&their_verdict[..REPLY]);
    if let Some(p) = decode(&reply) {
        let i = usize::try_from(their_verdict[REPLY]).unwrap_or(0);
        let backward = sends.get(i).is_some_and(|s| s.desc.backward);
        return Err(err(backward, me, peer, p));
    }
    // The tensors: the lower rank sends first.
    let out: Vec<PostedSend<G>> = sends.drain(..k_out).collect();
    let inn: Vec<(PostedRecv<G>, Desc)> = recvs.drain(..k_in).zip(descs).collect();
    if me < peer {
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
