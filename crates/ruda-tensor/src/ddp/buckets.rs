//! [`Buckets`]: how gradients are grouped into collectives.

/// How [`super::all_reduce_gradients_with`] groups gradients into
/// collectives: each gradient of `alone_bytes` or more travels on its own,
/// in place (no copy); the smaller ones of each element type are
/// concatenated, in the module's order, into buckets of at most
/// `bucket_bytes` (one collective each; a bucket holds at least one
/// gradient). Every rank must pass the same values (otherwise
/// [`crate::Error::ModuleMismatch`] with [`crate::ModuleProblem::Buckets`]
/// on every rank).
///
/// The default (1 MiB, 25 MiB; PyTorch's DDP buckets at 25 MiB too) suits
/// most models ([`super::broadcast_module`] always uses it):
/// a larger `bucket_bytes` means fewer collectives for many small
/// gradients and a larger temporary copy; `alone_bytes` trades the cost of
/// one more collective against copying a gradient into a bucket.
///
/// # Example
/// ```
/// use ruda_tensor::ddp::Buckets;
/// let b = Buckets { bucket_bytes: 4 << 20, ..Buckets::default() };
/// assert_eq!((b.alone_bytes, b.bucket_bytes), (1 << 20, 4 << 20));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Buckets {
    /// Gradients of at least this many bytes travel alone, in place.
    pub alone_bytes: usize,
    /// The most bytes of smaller gradients packed into one collective.
    pub bucket_bytes: usize,
}

impl Default for Buckets {
    fn default() -> Self {
        Buckets {
            alone_bytes: 1 << 20,
            bucket_bytes: 25 << 20,
        }
    }
}

impl Buckets {
    /// The two words this choice contributes to the agreement.
    pub(super) fn words(self) -> [i64; 2] {
        [
            i64::try_from(self.alone_bytes).unwrap_or(i64::MAX),
            i64::try_from(self.bucket_bytes).unwrap_or(i64::MAX),
        ]
    }
}
