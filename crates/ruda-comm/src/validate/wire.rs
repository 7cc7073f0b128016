//! [`CallArgs`] as a fixed-size list of `i64` words, for transports that
//! send each rank's arguments to its peers (the MPI transport's record
//! exchange): 10 header words, then one word per rank for each of the two
//! count lists.
//!
//! A count list longer than the group travels as its length and its first
//! `n` entries (the rules report the length before reading any entry). An
//! operation code this build does not know decodes to `OpKind::Init`, which
//! no collective call has, so the rules report a desync; an unknown element
//! type decodes to none and an unknown reduction to the last one, which the
//! fingerprint comparison reports unless the peers' calls match them.

use super::args::{CallArgs, CountList};
use crate::{DType, Fingerprint, OpKind, ReduceOp};

/// The number of words of one record in a group of `n`.
pub(crate) fn words(n: usize) -> usize {
    10 + 2 * n
}

/// The record of `call` in a group of `n`.
#[cfg(test)]
pub(crate) fn encode(call: &CallArgs<'_>, n: usize) -> Vec<i64> {
    let mut w = vec![0i64; words(n)];
    encode_into(call, n, &mut w);
    w
}

/// Write the record of `call` in a group of `n` into `w` ([`words`]`(n)`
/// words; what was there is overwritten, unused count words with zeros).
pub(crate) fn encode_into(call: &CallArgs<'_>, n: usize, w: &mut [i64]) {
    debug_assert_eq!(w.len(), words(n));
    w.fill(0);
    let fp = call.fp;
    w[0] = fp.seq as i64;
    w[1] = fp.op.code() as i64;
    w[2] = fp.dtype.map_or(0, |d| d.code() as i64 + 1);
    w[3] = fp.count as i64;
    w[4] = fp.reduce.map_or(0, |r| {
        ReduceOp::ALL.iter().position(|&o| o == r).expect("listed") as i64 + 1
    });
    // A root past i64::MAX (refused by the rules either way) wraps rather
    // than overflows.
    w[5] = fp.root.map_or(0, |r| (r as i64).wrapping_add(1));
    w[6] = call.send_len as i64;
    w[7] = call.recv_len as i64;
    w[8] = call.counts.len as i64;
    w[9] = call.counts2.len as i64;
    for (x, &c) in w[10..10 + n].iter_mut().zip(call.counts.values) {
        *x = c as i64;
    }
    for (x, &c) in w[10 + n..].iter_mut().zip(call.counts2.values) {
        *x = c as i64;
    }
}

/// A record decoded: owns the count lists a [`CallArgs`] borrows.
pub(crate) struct Decoded {
    fp: Fingerprint,
    send_len: usize,
    recv_len: usize,
    counts_len: usize,
    counts: Vec<usize>,
    counts2_len: usize,
    counts2: Vec<usize>,
}

impl Decoded {
    /// The call this record describes.
    pub(crate) fn args(&self) -> CallArgs<'_> {
        CallArgs {
            fp: self.fp,
            send_len: self.send_len,
            recv_len: self.recv_len,
            counts: CountList {
                len: self.counts_len,
                values: &self.counts,
            },
            counts2: CountList {
                len: self.counts2_len,
                values: &self.counts2,
            },
        }
    }
}

/// Decode a record of a group of `n` (`w` holds [`words`]`(n)` words; the
/// words are `usize`s and codes sent as `i64`, converted back bit for bit).
pub(crate) fn decode(w: &[i64], n: usize) -> Decoded {
    debug_assert_eq!(w.len(), words(n));
    let code = |x: i64| u8::try_from(x).ok();
    let op = code(w[1])
        .and_then(OpKind::from_code)
        .unwrap_or(OpKind::Init);
    let dtype = w[2]
        .checked_sub(1)
        .and_then(code)
        .and_then(DType::from_code);
    let mut fp = Fingerprint::new(w[0] as u64, op, dtype, w[3] as usize);
    fp.reduce = (w[4] > 0).then(|| ReduceOp::ALL[(w[4] as usize - 1).min(ReduceOp::ALL.len() - 1)]);
    fp.root = (w[5] > 0).then(|| w[5] as usize - 1);
    let (counts_len, counts2_len) = (w[8] as usize, w[9] as usize);
    let list = |from: usize, len: usize| -> Vec<usize> {
        w[from..from + len.min(n)]
            .iter()
            .map(|&x| x as usize)
            .collect()
    };
    Decoded {
        fp,
        send_len: w[6] as usize,
        recv_len: w[7] as usize,
        counts_len,
        counts: list(10, counts_len),
        counts2_len,
        counts2: list(10 + n, counts2_len),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_round_trips_and_long_lists_arrive_truncated() {
        let n = 3;
        let fp = Fingerprint::new(7, OpKind::AllToAllV, Some(DType::BF16), 11)
            .with_reduce(ReduceOp::Max)
            .with_root(2);
        let sends = [1, 2, usize::MAX];
        let recvs = [4, 5, 6, 7];
        let call = CallArgs {
            fp,
            send_len: 9,
            recv_len: usize::MAX,
            counts: CountList::whole(&sends),
            counts2: CountList::whole(&recvs),
        };
        let w = encode(&call, n);
        assert_eq!(w.len(), words(n));
        let d = decode(&w, n);
        let back = d.args();
        assert_eq!(back.fp, fp);
        assert_eq!(back.fp.reduce, Some(ReduceOp::Max));
        assert_eq!(back.fp.root, Some(2));
        assert_eq!((back.send_len, back.recv_len), (9, usize::MAX));
        assert_eq!(back.counts.exactly(n), Some(&sends[..]));
        assert_eq!((back.counts2.len, back.counts2.values), (4, &recvs[..3]));
        assert_eq!(back.counts2.exactly(n), None);
        assert_eq!(back.counts2.exactly(4), None);
    }

    #[test]
    fn unknown_codes_decode_to_a_call_no_rank_makes() {
        let call = CallArgs::new(Fingerprint::new(1, OpKind::AllReduce, Some(DType::F32), 4));
        let mut w = encode(&call, 2);
        w[1] = 250;
        let d = decode(&w, 2);
        assert_eq!(d.args().fp.op, OpKind::Init);
        assert!(!d.args().fp.same_call(&call.fp));
        // An unknown element type is none, which an all-reduce never has.
        let mut w = encode(&call, 2);
        w[2] = 200;
        assert!(!decode(&w, 2).args().fp.same_call(&call.fp));
        // Codes past a byte do not wrap into known ones, nor panic.
        let mut w = encode(&call, 2);
        w[2] = 256 + DType::F32.code() as i64 + 1;
        assert!(!decode(&w, 2).args().fp.same_call(&call.fp));
    }
}
