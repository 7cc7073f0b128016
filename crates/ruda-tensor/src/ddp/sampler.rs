//! [`DistributedSampler`]: which samples of a dataset each rank takes in
//! an epoch (PyTorch's `DistributedSampler`).

use alloc::vec::Vec;

use crate::error::{Error, TensorOp};
use crate::group::Group;

/// Marks a sampler's agreement record ("rudaSMP1").
const MAGIC: i64 = 0x7275_6461_534d_5031;

/// What a [`DistributedSampler`] does with the samples that do not divide
/// evenly over the ranks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tail {
    /// Every sample exactly once per epoch; the first `len % ranks` ranks
    /// take one more (the default: nothing dropped, nothing repeated; pair
    /// it with [`super::GradientReduction::WeightedMean`]).
    Uneven,
    /// Drop the last `len % ranks` samples of the epoch's order, so every
    /// rank takes `len / ranks` (PyTorch's `drop_last=True`).
    Drop,
    /// Repeat samples from the start of the epoch's order until every rank
    /// takes `ceil(len / ranks)` (PyTorch's default).
    Pad,
}

/// The samples each rank takes in each epoch: the dataset's indices
/// `0..len` in an order fixed by `(seed, epoch)` (or in order, without
/// shuffling), dealt round-robin to the ranks (rank r takes positions r,
/// r + ranks, …), with the tail handled as [`Tail`] says. Every rank
/// computes its own indices (no communication after
/// [`DistributedSampler::new`]). With [`Tail::Uneven`] the ranks' shards
/// of an epoch are disjoint and cover the dataset; [`Tail::Drop`] leaves
/// out up to `ranks − 1` samples and [`Tail::Pad`] repeats up to
/// `ranks − 1`.
///
/// # Example
/// ```
/// use ruda_comm::LocalWorld;
/// use ruda_tensor::{Group, HostCollective};
/// use ruda_tensor::ddp::{DistributedSampler, Tail};
///
/// let shards = LocalWorld::new(3).run(|comm| {
///     let world = HostCollective::new(comm);
///     let sampler = DistributedSampler::new(&world, 10)?.shuffled(7);
///     Ok::<_, ruda_tensor::Error>(sampler.indices(0))
/// }).unwrap();
/// // 10 samples over 3 ranks: 4, 3 and 3, each sample once.
/// assert_eq!(shards.iter().map(Vec::len).collect::<Vec<_>>(), vec![4, 3, 3]);
/// let mut all: Vec<usize> = shards.concat();
/// all.sort();
/// assert_eq!(all, (0..10).collect::<Vec<_>>());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DistributedSampler {
    len: usize,
    ranks: usize,
    rank: usize,
    seed: Option<u64>,
    tail: Tail,
}

impl DistributedSampler {
    /// A sampler of a dataset of `len` samples over `group` (in order,
    /// [`Tail::Uneven`]; see [`DistributedSampler::shuffled`] and
    /// [`DistributedSampler::with_tail`]). The ranks check that they agree
    /// on `len` (one exchange); the seed and the tail, set afterwards, are
    /// not checked: pass the same on every rank, or the shards overlap.
    ///
    /// # Errors
    /// [`Error::Sampler`] on every rank when the ranks' `len` differ,
    /// naming the first that does; [`Error::Record`] when a peer is in
    /// another call; the group's errors.
    pub fn new<G: Group>(group: &G, len: usize) -> Result<Self, Error> {
        let op = TensorOp::DdpSampler;
        let me = group.rank();
        let mine = [MAGIC, op.code(), i64::try_from(len).unwrap_or(i64::MAX)];
        let all = group
            .exchange_words(&mine)
            .map_err(|e| e.in_named_call(op.name()))?;
        let fields = [("record marker", MAGIC), ("operation", op.code())];
        super::structure::check_records(group, op, &all, mine.len(), &fields)?;
        let reference = all[2];
        if let Some((r, w)) = all.chunks(3).enumerate().find(|(_, w)| w[2] != reference) {
            return Err(Error::Sampler {
                rank: me,
                offender: r,
                len: w[2] as usize,
                expected: reference as usize,
            });
        }
        Ok(DistributedSampler::local(len, group.size(), me))
    }

    /// A sampler for rank `rank` of `ranks`, without checking that the
    /// other ranks use the same `len` (for code that already knows). A
    /// `rank` outside `0..ranks` takes no samples.
    ///
    /// # Example
    /// ```
    /// use ruda_tensor::ddp::DistributedSampler;
    /// assert_eq!(DistributedSampler::local(5, 2, 1).indices(0), vec![1, 3]);
    /// ```
    pub fn local(len: usize, ranks: usize, rank: usize) -> Self {
        DistributedSampler {
            len,
            ranks: ranks.max(1),
            rank,
            seed: None,
            tail: Tail::Uneven,
        }
    }

    /// This sampler with each epoch's order a permutation drawn from
    /// `(seed, epoch)` (the same on every rank, another in every epoch).
    pub fn shuffled(self, seed: u64) -> Self {
        DistributedSampler {
            seed: Some(seed),
            ..self
        }
    }

    /// This sampler with its tail handled as `tail` says.
    pub fn with_tail(self, tail: Tail) -> Self {
        DistributedSampler { tail, ..self }
    }

    /// How many samples each rank takes per epoch (this rank's count).
    pub fn num_samples(&self) -> usize {
        let (len, n, r) = (self.len, self.ranks, self.rank);
        if r >= n {
            return 0;
        }
        match self.tail {
            Tail::Uneven => len / n + usize::from(r < len % n),
            Tail::Drop => len / n,
            Tail::Pad => len.div_ceil(n),
        }
    }

    /// This rank's dataset indices for `epoch`, in the order to visit them.
    pub fn indices(&self, epoch: u64) -> Vec<usize> {
        if self.rank >= self.ranks {
            return Vec::new();
        }
        let mut order: Vec<usize> = (0..self.len).collect();
        if let Some(seed) = self.seed {
            shuffle(&mut order, seed, epoch);
        }
        let total = match self.tail {
            Tail::Uneven => self.len,
            Tail::Drop => self.len / self.ranks * self.ranks,
            Tail::Pad => self.len.div_ceil(self.ranks) * self.ranks,
        };
        (self.rank..total)
            .step_by(self.ranks)
            .map(|i| order[i % self.len.max(1)])
            .collect()
    }
}

/// SplitMix64: a small generator whose stream is fixed by its seed, so an
/// epoch's order is the same on every rank, build and platform.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A uniform draw from `0..=bound` (Lemire's method without the
    /// rejection step's bias: a 128-bit product, rejecting the few low
    /// values that would favour some outcomes).
    fn below_or_equal(&mut self, bound: u64) -> u64 {
        let range = bound.wrapping_add(1);
        if range == 0 {
            return self.next();
        }
        let threshold = range.wrapping_neg() % range;
        loop {
            let m = u128::from(self.next()) * u128::from(range);
            if (m as u64) >= threshold {
                return (m >> 64) as u64;
            }
        }
    }
}

/// Fisher–Yates shuffle of `v` from `(seed, epoch)`.
fn shuffle(v: &mut [usize], seed: u64, epoch: u64) {
    let mut rng = SplitMix(seed ^ epoch.wrapping_mul(0xd1b5_4a32_d192_ed03));
    for i in (1..v.len()).rev() {
        let j = rng.below_or_equal(i as u64) as usize;
        v.swap(i, j);
    }
}
