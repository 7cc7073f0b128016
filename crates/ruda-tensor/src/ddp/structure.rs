//! What every data-parallel call agrees on before data moves: the call
//! itself (its kind, reduction or root, sample count), then the module's
//! float parameters (count, then each one's dtype, element count and
//! shape, in the module's visiting order).

use alloc::boxed::Box;
use alloc::vec::Vec;

use burn_core::module::ParamId;
use burn_optim::GradientsParams;
use burn_tensor::{DType, Device, Tensor};

use super::buckets::Buckets;
use crate::error::{Error, ModuleProblem, TensorOp};
use crate::group::Group;

/// Marks a data-parallel structure record ("rudaDDP1").
const MAGIC: i64 = 0x7275_6461_4444_5031;

/// Puts a flattened gradient back under its parameter, in its shape.
pub(super) type Restore = Box<dyn FnOnce(Tensor<1>, &mut GradientsParams)>;

/// One float parameter of a module, in visiting order.
pub(super) struct Entry {
    /// The parameter's id.
    pub id: ParamId,
    pub numel: usize,
    pub dims_hash: i64,
    /// The parameter's dtype: what the replicas agree on, and the dtype
    /// the data travels in (the same buckets on every rank, whatever dtype
    /// a rank's gradient has).
    pub dtype: DType,
    /// Where zeros for missing data go (the parameter's device, without
    /// autodiff: gradients carry none).
    pub device: Device,
    /// What travels for this parameter on this rank, flattened and in the
    /// parameter's dtype (its gradient, or its value), if anything (a
    /// gradient is in its own dtype until the gradients' `prepare` has
    /// scaled and cast it).
    pub data: Option<Tensor<1>>,
    /// The dtype this rank's data had before it was cast to the
    /// parameter's (what a gradient comes back in).
    pub own_dtype: DType,
    /// How to register a reduced gradient (gradient calls only).
    pub restore: Option<Restore>,
}

impl Entry {
    /// The entry of a parameter of shape `dims`, with `data` of its own
    /// shape (flattened here).
    pub(super) fn new<const D: usize>(
        id: ParamId,
        value: &Tensor<D>,
        data: Option<Tensor<D>>,
    ) -> Self {
        let dims = value.dims();
        let numel = dims.iter().product::<usize>();
        let dtype = value.dtype();
        let own_dtype = data.as_ref().map_or(dtype, |g| g.dtype());
        let data = data.map(|g| {
            let flat = crate::reshape(g, [numel]);
            if flat.dtype() == dtype {
                flat
            } else {
                flat.cast(dtype)
            }
        });
        Entry {
            id,
            numel,
            dims_hash: crate::shape_hash::sizes(&dims),
            dtype,
            device: value.clone().inner().device(),
            data,
            own_dtype,
            restore: None,
        }
    }

    /// The words this parameter contributes to the structure exchange:
    /// dtype and whether this rank has data, element count, shape.
    fn words(&self) -> [i64; 3] {
        let code = crate::agreement::dtype_code(self.dtype);
        [
            code * 2 + i64::from(self.data.is_some()),
            self.numel as i64,
            self.dims_hash,
        ]
    }
}

/// What a rank says about its call in the first exchange: which call, three
/// words the caller checks against rank 0's, and how it groups data into
/// collectives (checked here).
#[derive(Clone, Copy, Debug)]
pub(super) struct Header {
    pub op: TensorOp,
    pub words: [i64; 3],
    pub buckets: Buckets,
}

/// The agreed structure: every rank's header words, and for each
/// parameter whether some rank has data for it.
pub(super) struct Agreed {
    /// `headers[r]` is rank `r`'s three header words.
    pub headers: Vec<[i64; 3]>,
    pub used: Vec<bool>,
}

/// Check that every rank is in the same kind of call and that its module
/// has the same float parameters as rank 0's (count, then each one's dtype,
/// size and shape, in order).
///
/// # Errors
/// [`Error::Record`] when a peer is in another call; [`Error::ModuleMismatch`]
/// when the modules differ; the group's errors.
pub(super) fn agree<G: Group>(
    group: &G,
    header: Header,
    entries: &[Entry],
) -> Result<Agreed, Error> {
    let op = header.op;
    let me = group.rank();
    let [alone, bucket] = header.buckets.words();
    let first = [
        MAGIC,
        op.code(),
        entries.len() as i64,
        header.words[0],
        header.words[1],
        header.words[2],
        alone,
        bucket,
    ];
    let all = group.exchange_words(&first)?;
    let fields = [("record marker", MAGIC), ("operation", op.code())];
    check_records(group, op, &all, first.len(), &fields)?;
    let expected = all[2] as usize;
    for (r, w) in all.chunks(first.len()).enumerate() {
        if w[2] as usize != expected {
            return Err(Error::ModuleMismatch {
                op,
                rank: me,
                offender: r,
                reference: 0,
                problem: ModuleProblem::ParamCount {
                    expected,
                    got: w[2] as usize,
                },
            });
        }
    }
    let reference = (all[6], all[7]);
    for (r, w) in all.chunks(first.len()).enumerate() {
        if (w[6], w[7]) != reference {
            let bytes = |a: i64, b: i64| (a as usize, b as usize);
            return Err(Error::ModuleMismatch {
                op,
                rank: me,
                offender: r,
                reference: 0,
                problem: ModuleProblem::Buckets {
                    expected: bytes(reference.0, reference.1),
                    got: bytes(w[6], w[7]),
                },
            });
        }
    }
    let headers = all
        .chunks(first.len())
        .map(|w| [w[3], w[4], w[5]])
        .collect();
    let words: Vec<i64> = entries.iter().flat_map(|e| e.words()).collect();
    let all = group.exchange_words(&words)?;
    let per_rank = words.len();
    let reference = &all[..per_rank];
    let mut used = alloc::vec![false; entries.len()];
    for (r, theirs) in all.chunks(per_rank.max(1)).enumerate().take(group.size()) {
        for (i, (w, w0)) in theirs.chunks(3).zip(reference.chunks(3)).enumerate() {
            if w[0] / 2 != w0[0] / 2 || w[1] != w0[1] || w[2] != w0[2] {
                let view = |w: &[i64]| (w[1] as usize, crate::agreement::dtype_of(w[0] / 2));
                return Err(Error::ModuleMismatch {
                    op,
                    rank: me,
                    offender: r,
                    reference: 0,
                    problem: ModuleProblem::Param {
                        index: i,
                        expected: view(w0),
                        got: view(w),
                    },
                });
            }
            used[i] |= w[0] % 2 == 1;
        }
    }
    Ok(Agreed { headers, used })
}

/// Check that every rank's record (`stride` words each in `all`) starts
/// with `fields`' values: a peer in another call (one that also exchanges
/// as many words) is [`Error::Record`] naming the first field that differs.
///
/// # Errors
/// [`Error::Record`] for the first rank whose record differs.
pub(super) fn check_records<G: Group>(
    group: &G,
    op: TensorOp,
    all: &[i64],
    stride: usize,
    fields: &[(&'static str, i64)],
) -> Result<(), Error> {
    for (r, w) in all.chunks(stride).enumerate() {
        if let Some((&(what, _), &code)) =
            fields.iter().zip(w).find(|((_, want), got)| *got != want)
        {
            return Err(Error::Record {
                op,
                rank: group.rank(),
                offender: r,
                what,
                code,
            });
        }
    }
    Ok(())
}

/// One collective of [`per_bucket`]'s sequence: the entries it carries
/// (indices into the module's entries, in the module's order).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Bucket {
    /// The entries it carries.
    pub members: Vec<usize>,
    /// Whether its one member travels alone, in place (not concatenated).
    pub alone: bool,
}

/// How [`per_bucket`] groups entries some rank has data for into
/// collectives: per dtype (in order of first appearance), each parameter
/// of `buckets.alone_bytes` or more alone, then the smaller ones
/// concatenated into buckets of at most `buckets.bucket_bytes`, in the
/// module's order. `entries[i]` is entry i's dtype and element count;
/// the result depends only on agreed values, so it is the same on every
/// rank.
pub(super) fn plan(entries: &[(DType, usize)], used: &[bool], buckets: Buckets) -> Vec<Bucket> {
    let mut dtypes: Vec<DType> = Vec::new();
    for (&(dtype, _), &u) in entries.iter().zip(used) {
        if u && !dtypes.contains(&dtype) {
            dtypes.push(dtype);
        }
    }
    let mut out = Vec::new();
    for dtype in dtypes {
        let size = dtype.size();
        let of_dtype: Vec<usize> = (0..entries.len())
            .filter(|&i| used[i] && entries[i].0 == dtype)
            .collect();
        let bytes_of = |i: usize| entries[i].1.saturating_mul(size);
        let (alone, small): (Vec<usize>, Vec<usize>) = of_dtype
            .into_iter()
            .partition(|&i| bytes_of(i) >= buckets.alone_bytes);
        out.extend(alone.into_iter().map(|i| Bucket {
            members: alloc::vec![i],
            alone: true,
        }));
        let mut members: Vec<usize> = Vec::new();
        let mut bytes = 0usize;
        let mut small = small.into_iter().peekable();
        while let Some(i) = small.next() {
            bytes = bytes.saturating_add(bytes_of(i));
            members.push(i);
            let full = small
                .peek()
                .is_none_or(|&next| bytes.saturating_add(bytes_of(next)) > buckets.bucket_bytes);
            if full {
                out.push(Bucket {
                    members: core::mem::take(&mut members),
                    alone: false,
                });
                bytes = 0;
            }
        }
    }
    out
}

/// Run `collective` on every entry some rank has data for (zeros where
/// this rank has none), and hand each entry its result: `done(entry,
/// result)`. The same sequence of collectives on every rank, as [`plan`]
/// groups them (a parameter of `buckets.alone_bytes` or more travels
/// alone: packing it would copy it twice, and Burn's concatenation on
/// Flex moves about 1.3 GB/s, several times slower than the collective
/// itself). Entries no rank has data for are dropped.
///
/// # Errors
/// The collective's errors.
pub(super) fn per_bucket(
    entries: Vec<Entry>,
    used: &[bool],
    buckets: Buckets,
    mut collective: impl FnMut(Tensor<1>) -> Result<Tensor<1>, Error>,
    mut done: impl FnMut(Entry, Tensor<1>),
) -> Result<(), Error> {
    let shapes: Vec<(DType, usize)> = entries.iter().map(|e| (e.dtype, e.numel)).collect();
    let plan = plan(&shapes, used, buckets);
    let mut items: Vec<Option<Entry>> = entries.into_iter().map(Some).collect();
    for bucket in plan {
        let mut members: Vec<Entry> = bucket
            .members
            .iter()
            .filter_map(|&i| items[i].take())
            .collect();
        if bucket.alone {
            for mut e in members {
                let out = collective(take_data(&mut e))?;
                done(e, out);
            }
            continue;
        }
        let flats: Vec<Tensor<1>> = members.iter_mut().map(take_data).collect();
        let out = collective(Tensor::cat(flats, 0))?;
        let mut start = 0;
        for e in members {
            let len = e.numel;
            done(e, narrow_or_empty(&out, start, len));
            start += len;
        }
    }
    Ok(())
}

/// Values `start .. start + len` of `t`: Burn refuses a narrow of length 0,
/// which a zero-size parameter (an empty shard) asks for; it gets an empty
/// tensor of `t`'s dtype.
pub(super) fn narrow_or_empty(t: &Tensor<1>, start: usize, len: usize) -> Tensor<1> {
    if len == 0 {
        Tensor::zeros([0], (&t.device(), t.dtype()))
    } else {
        t.clone().narrow(0, start, len)
    }
}

/// The entry's data, or zeros of its size where this rank has none.
fn take_data(e: &mut Entry) -> Tensor<1> {
    e.data
        .take()
        .unwrap_or_else(|| Tensor::zeros([e.numel], (&e.device, e.dtype)))
}
