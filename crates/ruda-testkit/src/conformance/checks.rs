//! The checks themselves: each runs one collective with generated inputs
//! and compares the result with the serial reference.

use half::{bf16, f16};

use super::{ConformanceError, Sample, mix};
use ruda_comm::{CommError, Communicator, Element, InvalidArgument, OpKind, ReduceOp};

/// Every check of [`check_dtype`], for every element type.
///
/// # Errors
/// The first disagreement with the reference, or an unexpected transport error.
///
/// # Example
/// See the [module documentation](super).
pub fn check_all_dtypes<C: Communicator>(
    comm: &C,
    len: usize,
    seed: u64,
) -> Result<(), ConformanceError> {
    check_dtype::<C, f16>(comm, len, seed)?;
    check_dtype::<C, bf16>(comm, len, seed)?;
    check_dtype::<C, f32>(comm, len, seed)?;
    check_dtype::<C, f64>(comm, len, seed)?;
    check_dtype::<C, u8>(comm, len, seed)?;
    check_dtype::<C, u32>(comm, len, seed)?;
    check_dtype::<C, i32>(comm, len, seed)?;
    check_dtype::<C, i64>(comm, len, seed)
}

/// Every operation of the [`Communicator`] contract for element type `T`:
/// all-reduce with every operator, reduce-scatter(v), all-gather(v),
/// broadcast, all-to-all(v), send/recv, send_recv and barrier, with `len`
/// elements per rank (or per block) and counts derived from `seed`,
/// including zero-length pieces.
///
/// # Errors
/// The first disagreement with the reference, or an unexpected transport error.
///
/// # Example
/// ```
/// use ruda_comm::LocalWorld;
/// use ruda_testkit::conformance;
/// LocalWorld::new(2).run(|c| conformance::check_dtype::<_, f32>(&c, 5, 1)).unwrap();
/// ```
pub fn check_dtype<C: Communicator, T: Sample>(
    comm: &C,
    len: usize,
    seed: u64,
) -> Result<(), ConformanceError> {
    let ck = Checker { comm, seed };
    for op in ReduceOp::ALL {
        ck.all_reduce::<T>(len, op)?;
        ck.reduce_scatter::<T>(len, op)?;
        ck.reduce_scatter_v::<T>(len, op)?;
    }
    ck.all_gather::<T>(len)?;
    ck.all_gather_v::<T>(len)?;
    ck.broadcast::<T>(len)?;
    ck.all_to_all::<T>(len)?;
    ck.all_to_all_v::<T>(len)?;
    ck.pairs::<T>(len)?;
    ck.ring::<T>(len)?;
    comm.barrier()?;
    Ok(())
}

/// Split the group three ways (one rank left out when there are more than
/// two), in reverse key order, and check membership, order and collectives
/// on the sub-groups, including a nested split.
///
/// # Errors
/// The first disagreement with the reference, or an unexpected transport error.
///
/// # Example
/// ```
/// use ruda_comm::LocalWorld;
/// use ruda_testkit::conformance;
/// LocalWorld::new(5).run(|c| conformance::check_split(&c, 3)).unwrap();
/// ```
pub fn check_split<C: Communicator>(comm: &C, seed: u64) -> Result<(), ConformanceError> {
    let (me, n) = (comm.rank(), comm.size());
    let left_out = if n > 2 {
        Some((seed as usize) % n)
    } else {
        None
    };
    let color_of = |r: usize| (Some(r) != left_out).then_some((r % 3) as u32);
    let key_of = |r: usize| (n - r) as i32;
    let sub = comm.split(color_of(me), key_of(me))?;
    let Some(sub) = sub else {
        if color_of(me).is_some() {
            return Err(wrong(OpKind::Split, me, "a sub-communicator", "none"));
        }
        return Ok(());
    };
    if color_of(me).is_none() {
        return Err(wrong(OpKind::Split, me, "none", "a sub-communicator"));
    }
    // Members of my colour, ordered by key then parent rank.
    let mut members: Vec<usize> = (0..n).filter(|&r| color_of(r) == color_of(me)).collect();
    members.sort_by_key(|&r| (key_of(r), r));
    let pos = members.iter().position(|&r| r == me).expect("member");
    if sub.size() != members.len() || sub.rank() != pos {
        return Err(wrong(
            OpKind::Split,
            me,
            &format!("rank {pos} of {}", members.len()),
            &format!("rank {} of {}", sub.rank(), sub.size()),
        ));
    }
    let mut got = vec![0u32; members.len()];
    sub.all_gather(&[me as u32], &mut got)?;
    let expected: Vec<u32> = members.iter().map(|&r| r as u32).collect();
    compare(
        OpKind::AllGather,
        me,
        sub.size(),
        "split membership",
        &got,
        &expected,
    )?;
    let mut sum = [me as f64];
    sub.all_reduce(&mut sum, ReduceOp::Sum)?;
    let want = members.iter().sum::<usize>() as f64;
    compare(
        OpKind::AllReduce,
        me,
        sub.size(),
        "split sum",
        &sum,
        &[want],
    )?;
    // A nested split by parity of the sub-rank.
    let nested = sub
        .split(Some((sub.rank() % 2) as u32), 0)?
        .expect("every rank has a colour");
    let expect_size = sub.size() / 2 + usize::from(sub.size() % 2 == 1 && sub.rank() % 2 == 0);
    if nested.size() != expect_size || nested.rank() != sub.rank() / 2 {
        return Err(wrong(
            OpKind::Split,
            me,
            &format!("rank {} of {expect_size}", sub.rank() / 2),
            &format!("rank {} of {}", nested.rank(), nested.size()),
        ));
    }
    nested.barrier()?;
    Ok(())
}

pub(super) fn wrong(op: OpKind, rank: usize, expected: &str, got: &str) -> ConformanceError {
    ConformanceError::WrongOutcome {
        op,
        dtype: ruda_comm::DType::U32,
        rank,
        expected: expected.to_string(),
        got: got.to_string(),
    }
}

pub(super) fn compare<T: Element>(
    op: OpKind,
    rank: usize,
    size: usize,
    case: &str,
    got: &[T],
    expected: &[T],
) -> Result<(), ConformanceError> {
    if got.len() != expected.len() {
        return Err(ConformanceError::Mismatch {
            op,
            dtype: T::DTYPE,
            rank,
            size,
            case: case.to_string(),
            index: got.len().min(expected.len()),
            got: format!("length {}", got.len()),
            expected: format!("length {}", expected.len()),
        });
    }
    match got
        .iter()
        .zip(expected)
        .position(|(g, e)| bytemuck::bytes_of(g) != bytemuck::bytes_of(e))
    {
        None => Ok(()),
        Some(index) => Err(ConformanceError::Mismatch {
            op,
            dtype: T::DTYPE,
            rank,
            size,
            case: case.to_string(),
            index,
            got: format!("{:?}", got[index]),
            expected: format!("{:?}", expected[index]),
        }),
    }
}

struct Checker<'a, C> {
    comm: &'a C,
    seed: u64,
}

impl<C: Communicator> Checker<'_, C> {
    fn me(&self) -> usize {
        self.comm.rank()
    }

    fn n(&self) -> usize {
        self.comm.size()
    }

    /// Rank `r`'s input for operation `tag`, `len` elements.
    fn input<T: Sample>(&self, tag: u64, r: usize, len: usize, for_product: bool) -> Vec<T> {
        (0..len)
            .map(|i| T::sample(mix(&[self.seed, tag, r as u64, i as u64]), for_product))
            .collect()
    }

    /// Per-rank counts in `0..=len`, with a zero for some seeds.
    fn counts(&self, tag: u64, len: usize) -> Vec<usize> {
        (0..self.n())
            .map(|r| {
                if r == 0 && self.seed.is_multiple_of(3) {
                    0
                } else {
                    (mix(&[self.seed, tag, r as u64, 77]) % (len as u64 + 1)) as usize
                }
            })
            .collect()
    }

    /// Check reduced `got[i]` against the reduction of every rank's
    /// `inputs[r][offset + i]`.
    fn check_reduced<T: Sample>(
        &self,
        kind: OpKind,
        op: ReduceOp,
        case: &str,
        got: &[T],
        inputs: &[Vec<T>],
        offset: usize,
    ) -> Result<(), ConformanceError> {
        for (i, &g) in got.iter().enumerate() {
            let column: Vec<T> = inputs.iter().map(|x| x[offset + i]).collect();
            if let Err(expected) = T::check_reduction(g, &column, op) {
                return Err(ConformanceError::Mismatch {
                    op: kind,
                    dtype: T::DTYPE,
                    rank: self.me(),
                    size: self.n(),
                    case: format!("{case}, op {op}"),
                    index: i,
                    got: format!("{g:?}"),
                    expected,
                });
            }
        }
        Ok(())
    }

    /// An integer average must be refused with the documented error.
    fn expect_refused<T: Element>(
        &self,
        kind: OpKind,
        r: Result<(), CommError>,
    ) -> Result<(), ConformanceError> {
        match r {
            Err(CommError::InvalidArgument {
                reason: InvalidArgument::AverageOfIntegers { .. },
                ..
            }) => Ok(()),
            other => Err(ConformanceError::WrongOutcome {
                op: kind,
                dtype: T::DTYPE,
                rank: self.me(),
                expected: "InvalidArgument::AverageOfIntegers".into(),
                got: format!("{other:?}"),
            }),
        }
    }

    fn all_reduce<T: Sample>(&self, len: usize, op: ReduceOp) -> Result<(), ConformanceError> {
        let prod = op == ReduceOp::Prod;
        let inputs: Vec<Vec<T>> = (0..self.n()).map(|r| self.input(1, r, len, prod)).collect();
        let mut buf = inputs[self.me()].clone();
        let r = self.comm.all_reduce(&mut buf, op);
        if op == ReduceOp::Mean && !T::DTYPE.is_float() {
            return self.expect_refused::<T>(OpKind::AllReduce, r);
        }
        r?;
        self.check_reduced(
            OpKind::AllReduce,
            op,
            &format!("len {len}"),
            &buf,
            &inputs,
            0,
        )
    }

    fn reduce_scatter<T: Sample>(&self, len: usize, op: ReduceOp) -> Result<(), ConformanceError> {
        let (me, n) = (self.me(), self.n());
        let prod = op == ReduceOp::Prod;
        let inputs: Vec<Vec<T>> = (0..n).map(|r| self.input(2, r, n * len, prod)).collect();
        let mut out = vec![T::zeroed(); len];
        let r = self.comm.reduce_scatter(&inputs[me], &mut out, op);
        if op == ReduceOp::Mean && !T::DTYPE.is_float() {
            return self.expect_refused::<T>(OpKind::ReduceScatter, r);
        }
        r?;
        self.check_reduced(
            OpKind::ReduceScatter,
            op,
            &format!("block {len}"),
            &out,
            &inputs,
            me * len,
        )?;
        let out = self.comm.reduce_scatter_vec(&inputs[me], op)?;
        self.check_reduced(
            OpKind::ReduceScatter,
            op,
            &format!("vec, block {len}"),
            &out,
            &inputs,
            me * len,
        )
    }

    fn reduce_scatter_v<T: Sample>(
        &self,
        len: usize,
        op: ReduceOp,
    ) -> Result<(), ConformanceError> {
        let (me, n) = (self.me(), self.n());
        let counts = self.counts(3, len);
        let total = counts.iter().sum();
        let prod = op == ReduceOp::Prod;
        let inputs: Vec<Vec<T>> = (0..n).map(|r| self.input(3, r, total, prod)).collect();
        let mut out = vec![T::zeroed(); counts[me]];
        let r = self
            .comm
            .reduce_scatter_v(&inputs[me], &mut out, &counts, op);
        if op == ReduceOp::Mean && !T::DTYPE.is_float() {
            return self.expect_refused::<T>(OpKind::ReduceScatterV, r);
        }
        r?;
        let offset = counts[..me].iter().sum();
        self.check_reduced(
            OpKind::ReduceScatterV,
            op,
            &format!("counts {counts:?}"),
            &out,
            &inputs,
            offset,
        )
    }

    fn all_gather<T: Sample>(&self, len: usize) -> Result<(), ConformanceError> {
        let n = self.n();
        let inputs: Vec<Vec<T>> = (0..n).map(|r| self.input(4, r, len, false)).collect();
        let mut out = vec![T::zeroed(); n * len];
        self.comm.all_gather(&inputs[self.me()], &mut out)?;
        compare(
            OpKind::AllGather,
            self.me(),
            n,
            &format!("len {len}"),
            &out,
            &inputs.concat(),
        )
    }

    fn all_gather_v<T: Sample>(&self, len: usize) -> Result<(), ConformanceError> {
        let n = self.n();
        let counts = self.counts(5, len);
        let inputs: Vec<Vec<T>> = (0..n).map(|r| self.input(5, r, counts[r], false)).collect();
        let mut out = vec![T::zeroed(); counts.iter().sum()];
        self.comm
            .all_gather_v(&inputs[self.me()], &mut out, &counts)?;
        compare(
            OpKind::AllGatherV,
            self.me(),
            n,
            &format!("counts {counts:?}"),
            &out,
            &inputs.concat(),
        )
    }

    fn broadcast<T: Sample>(&self, len: usize) -> Result<(), ConformanceError> {
        let n = self.n();
        let root = (self.seed as usize) % n;
        let mut buf: Vec<T> = self.input(6, self.me(), len, false);
        self.comm.broadcast(&mut buf, root)?;
        let want: Vec<T> = self.input(6, root, len, false);
        compare(
            OpKind::Broadcast,
            self.me(),
            n,
            &format!("len {len}, root {root}"),
            &buf,
            &want,
        )
    }

    fn all_to_all<T: Sample>(&self, len: usize) -> Result<(), ConformanceError> {
        let (me, n) = (self.me(), self.n());
        let inputs: Vec<Vec<T>> = (0..n).map(|r| self.input(7, r, n * len, false)).collect();
        let mut out = vec![T::zeroed(); n * len];
        self.comm.all_to_all(&inputs[me], &mut out)?;
        let want: Vec<T> = (0..n)
            .flat_map(|p| inputs[p][me * len..(me + 1) * len].to_vec())
            .collect();
        compare(
            OpKind::AllToAll,
            me,
            n,
            &format!("block {len}"),
            &out,
            &want,
        )
    }

    fn all_to_all_v<T: Sample>(&self, len: usize) -> Result<(), ConformanceError> {
        let (me, n) = (self.me(), self.n());
        // counts[r][p]: what rank r sends to rank p.
        let counts: Vec<Vec<usize>> = (0..n)
            .map(|r| {
                (0..n)
                    .map(|p| (mix(&[self.seed, 8, r as u64, p as u64]) % (len as u64 + 1)) as usize)
                    .collect()
            })
            .collect();
        let inputs: Vec<Vec<T>> = (0..n)
            .map(|r| self.input(8, r, counts[r].iter().sum(), false))
            .collect();
        let recv_counts: Vec<usize> = (0..n).map(|p| counts[p][me]).collect();
        let mut out = vec![T::zeroed(); recv_counts.iter().sum()];
        self.comm
            .all_to_all_v(&inputs[me], &counts[me], &mut out, &recv_counts)?;
        let want: Vec<T> = (0..n)
            .flat_map(|p| {
                let from: usize = counts[p][..me].iter().sum();
                inputs[p][from..from + counts[p][me]].to_vec()
            })
            .collect();
        compare(
            OpKind::AllToAllV,
            me,
            n,
            &format!("send counts {counts:?}"),
            &out,
            &want,
        )?;
        let out = self
            .comm
            .all_to_all_v_vec(&inputs[me], &counts[me], &recv_counts)?;
        compare(
            OpKind::AllToAllV,
            me,
            n,
            &format!("vec, send counts {counts:?}"),
            &out,
            &want,
        )
    }

    /// Blocking send/recv in pairs (0↔1, 2↔3, …), both directions.
    fn pairs<T: Sample>(&self, len: usize) -> Result<(), ConformanceError> {
        let (me, n) = (self.me(), self.n());
        let peer = me ^ 1;
        if peer >= n {
            return Ok(());
        }
        let mine: Vec<T> = self.input(9, me, len, false);
        let mut got = vec![T::zeroed(); len];
        if me % 2 == 0 {
            self.comm.send(&mine, peer)?;
            self.comm.recv(&mut got, peer)?;
        } else {
            self.comm.recv(&mut got, peer)?;
            self.comm.send(&mine, peer)?;
        }
        compare(
            OpKind::Recv,
            me,
            n,
            &format!("len {len}"),
            &got,
            &self.input(9, peer, len, false),
        )
    }

    /// `send_recv` around a ring.
    fn ring<T: Sample>(&self, len: usize) -> Result<(), ConformanceError> {
        let (me, n) = (self.me(), self.n());
        let (next, prev) = ((me + 1) % n, (me + n - 1) % n);
        let mine: Vec<T> = self.input(10, me, len, false);
        let mut got = vec![T::zeroed(); len];
        self.comm.send_recv(&mine, next, &mut got, prev)?;
        compare(
            OpKind::SendRecv,
            me,
            n,
            &format!("len {len}"),
            &got,
            &self.input(10, prev, len, false),
        )
    }
}
