//! The one error type of the crate.

use burn_tensor::DType;
use ruda_tensor::Error as PrimitiveError;
use thiserror::Error;

use crate::LatitudeGrid;

/// Why a transform could not be built or applied.
#[derive(Debug, Error)]
pub enum SphereError {
    /// The grid has too few latitudes or longitudes for its quadrature.
    #[error(
        "a {grid} grid of {nlat} × {nlon} is too small: it needs at least {min_nlat} latitudes and 1 longitude"
    )]
    GridTooSmall {
        /// The latitude grid.
        grid: LatitudeGrid,
        /// Latitudes asked for.
        nlat: usize,
        /// Longitudes asked for.
        nlon: usize,
        /// The fewest latitudes this grid accepts.
        min_nlat: usize,
    },
    /// A truncation that the grid cannot carry.
    #[error(
        "truncation lmax = {lmax}, mmax = {mmax} does not fit {nlon} longitudes: both must be between 1 and nlon/2 + 1 = {}",
        nlon / 2 + 1
    )]
    Truncation {
        /// Degrees asked for.
        lmax: usize,
        /// Orders asked for.
        mmax: usize,
        /// Longitudes of the grid.
        nlon: usize,
    },
    /// A tensor whose trailing dimensions are not those the transform
    /// expects.
    #[error("{op} on rank {rank}: expected a tensor ending in {expected:?}, got shape {got:?}")]
    Shape {
        /// The transform.
        op: &'static str,
        /// This rank in the world (0 for a serial transform).
        rank: usize,
        /// The trailing dimensions expected.
        expected: Vec<usize>,
        /// The shape received.
        got: Vec<usize>,
    },
    /// The output's number of dimensions (a const generic) does not follow
    /// from the input's.
    #[error(
        "{op}: a {input}-dimensional input gives a {expected}-dimensional output, not {requested}"
    )]
    Rank {
        /// The transform.
        op: &'static str,
        /// Dimensions of the input.
        input: usize,
        /// Dimensions of the output it gives.
        expected: usize,
        /// Dimensions the caller asked for.
        requested: usize,
    },
    /// An element type the transforms do not support (only f32 and f64).
    #[error("{op}: element type {dtype:?} is not supported (f32 and f64 are)")]
    DType {
        /// The transform.
        op: &'static str,
        /// The tensor's element type.
        dtype: DType,
    },
    /// A tensor the transforms cannot run on: a Flex tensor the host
    /// kernels cannot read (not expected: every backend is supported).
    #[error("{op}: {message}")]
    Device {
        /// The transform.
        op: &'static str,
        /// What is wrong with the tensor.
        message: String,
    },
    /// A process grid with more ranks along an axis than the field has
    /// entries to give them.
    #[error(
        "rank {rank}: {ranks} {axis} ranks cannot split {what} of size {size}: every rank needs at least one"
    )]
    Split {
        /// This rank in the world.
        rank: usize,
        /// `polar` or `azimuth`.
        axis: &'static str,
        /// What is split (latitudes, longitudes, degrees, orders, or the
        /// latitudes of a polar chunk over the azimuth ranks).
        what: &'static str,
        /// Its size.
        size: usize,
        /// The ranks along that axis.
        ranks: usize,
    },
    /// The ranks of a distributed transform passed tensors with different
    /// leading dimensions (every rank gets this error).
    #[error(
        "{op} on rank {rank}: the ranks passed different numbers of fields (product of the leading dimensions, by rank: {sizes:?})"
    )]
    LeadingDims {
        /// The transform.
        op: &'static str,
        /// This rank in the world.
        rank: usize,
        /// Every rank's product of leading dimensions.
        sizes: Vec<usize>,
    },
    /// Other ranks of a distributed transform passed an input of the wrong
    /// shape or dtype (each of them gets its own typed error): this rank's
    /// input was fine, and no data moved.
    #[error(
        "{op} on rank {rank}: rank(s) {offenders:?} passed an input of the wrong shape or dtype (each reports its own error); no data moved"
    )]
    PeerInput {
        /// The transform.
        op: &'static str,
        /// This rank in the world.
        rank: usize,
        /// The world ranks whose input was refused.
        offenders: Vec<usize>,
    },
    /// The ranks of a distributed transform hold different layouts of the
    /// latitudes (made with different [`crate::LatitudeSplit`]s, or on
    /// hosts that computed the mirrored bands' cuts differently): every
    /// rank gets this error, before any data moves.
    #[error(
        "{op} on rank {rank}: the ranks hold different layouts of the latitudes (a fingerprint of each rank's polar split, by rank: {fingerprints:?}); no data moved"
    )]
    Layouts {
        /// The transform.
        op: &'static str,
        /// This rank in the world.
        rank: usize,
        /// Each rank's fingerprint of its layout's split and latitude
        /// counts.
        fingerprints: Vec<u16>,
    },
    /// A setting of a solver or a model is out of its range.
    #[error("{what} = {value}: must be {expected}")]
    Setting {
        /// The setting.
        what: &'static str,
        /// Its value.
        value: f64,
        /// What it must be.
        expected: &'static str,
    },
    /// A distributed primitive failed (communication, or sizes that differ
    /// between ranks).
    #[error(transparent)]
    Primitive(#[from] PrimitiveError),
}
