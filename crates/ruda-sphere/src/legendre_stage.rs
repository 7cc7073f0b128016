//! The Legendre stage of a transform, serial or one rank's part of a
//! distributed one: the scalar functions `P̄_l^m` or the vector transforms'
//! derivative functions, for some orders over some latitudes, generated on
//! the fly ([`crate::legendre_kernel`]).

use alloc::vec::Vec;
use core::ops::Range;

use burn_tensor::Tensor;

use crate::legendre_fly::Step;
use crate::legendre_kernel::{Recurrence, Seeds};
use crate::route::{leg_analysis, leg_synthesis};
use crate::vector_step::VectorStep;
use crate::{Latitudes, ShtSpec, SphereError};

/// Which functions a transform sums.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A scalar field's: `P̄_l^m`.
    Scalar,
    /// A tangential vector field's: spheroidal and toroidal.
    Vector,
}

/// The Legendre stage of a transform (cheap to clone: the recurrence is
/// shared).
#[derive(Clone, Debug)]
pub(crate) enum LegendreStage {
    Scalar(Step),
    Vector(VectorStep),
}

impl LegendreStage {
    /// For `spec`'s (ascending) `orders` over its latitudes `bands`
    /// (ascending runs): `weighted` for the analysis of a field. Latitudes
    /// symmetric about the equator (the whole column, or a mirrored band
    /// and its mirror) are walked in mirrored pairs; any other set (a
    /// contiguous rank's part) latitude by latitude.
    pub(crate) fn new(
        spec: &ShtSpec,
        kind: Kind,
        orders: &[usize],
        bands: &[Range<usize>],
        weighted: bool,
    ) -> Self {
        let q = Latitudes::new(spec.nlat(), spec.grid()).expect("the spec checked the grid");
        let rows: Vec<usize> = bands.iter().flat_map(|r| r.clone()).collect();
        let paired = mirrored(&rows, spec.nlat());
        let x: Vec<f64> = rows.iter().map(|&k| q.cosines[k]).collect();
        let w: Vec<f64> = rows.iter().map(|&k| q.weights[k]).collect();
        let seeds = match kind {
            Kind::Scalar => Seeds::Plain,
            Kind::Vector => Seeds::OverSine,
        };
        // The vector transforms' functions combine neighbouring degrees:
        // one more is walked.
        let degrees = match kind {
            Kind::Scalar => spec.lmax(),
            Kind::Vector => spec.lmax() + 1,
        };
        let rec = Recurrence::new(orders, degrees, &x, &w, spec.csphase(), seeds, paired);
        let step = Step::new(rec, weighted);
        match kind {
            Kind::Scalar => LegendreStage::Scalar(step),
            Kind::Vector => LegendreStage::Vector(VectorStep::new(orders, spec.lmax(), step)),
        }
    }

    /// `[m, k, b, 2]` spectra → `[m, l, b, 2]` coefficients (for a vector
    /// transform `b` counts components: (θ, φ) in, (spheroidal, toroidal)
    /// out, adjacent).
    pub(crate) fn analysis(
        &self,
        op: &'static str,
        f: Tensor<4>,
    ) -> Result<Tensor<4>, SphereError> {
        match self {
            LegendreStage::Scalar(step) => leg_analysis(op, f, step.clone()),
            LegendreStage::Vector(v) => v.analysis(op, f),
        }
    }

    /// `[m, l, b, 2]` coefficients → `[m, k, b, 2]` spectra.
    pub(crate) fn synthesis(
        &self,
        op: &'static str,
        c: Tensor<4>,
    ) -> Result<Tensor<4>, SphereError> {
        match self {
            LegendreStage::Scalar(step) => leg_synthesis(op, c, step.clone()),
            LegendreStage::Vector(v) => v.synthesis(op, c),
        }
    }

    /// The kind of transform.
    pub(crate) fn kind(&self) -> Kind {
        match self {
            LegendreStage::Scalar(_) => Kind::Scalar,
            LegendreStage::Vector(_) => Kind::Vector,
        }
    }
}

/// Whether the latitudes `rows` (ascending, of `nlat`) are symmetric about
/// the equator: the `i`-th from the north the mirror of the `i`-th from the
/// south.
fn mirrored(rows: &[usize], nlat: usize) -> bool {
    let n = rows.len();
    n > 0 && (0..n).all(|i| rows[i] + rows[n - 1 - i] == nlat - 1)
}

/// Check that a vector transform's leading dimensions end in the two
/// components; `trailing` is what follows them.
pub(crate) fn check_components(
    op: &'static str,
    rank: usize,
    kind: Kind,
    lead: &[usize],
    trailing: &[usize],
) -> Result<(), SphereError> {
    if kind == Kind::Vector && lead.last() != Some(&2) {
        let mut expected = Vec::with_capacity(trailing.len() + 1);
        expected.push(2);
        expected.extend_from_slice(trailing);
        let got = lead.iter().chain(trailing).copied().collect();
        return Err(SphereError::Shape {
            op,
            rank,
            expected,
            got,
        });
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::single_range_in_vec_init)] // one band is a list of one run
mod tests {
    use super::*;
    use crate::LatitudeGrid;

    /// Latitudes walked by the stage made for `bands` of 13.
    fn walked(kind: Kind, bands: &[Range<usize>]) -> usize {
        let spec = ShtSpec::new(13, 22, LatitudeGrid::Equiangular).unwrap();
        let orders: Vec<usize> = (0..spec.mmax()).collect();
        match LegendreStage::new(&spec, kind, &orders, bands, true) {
            LegendreStage::Scalar(step) => step.rec.half(),
            LegendreStage::Vector(v) => v.step.rec.half(),
        }
    }

    #[test]
    fn symmetric_latitudes_are_walked_in_pairs_and_others_one_by_one() {
        for kind in [Kind::Scalar, Kind::Vector] {
            // The whole grid and mirrored bands (the equator's with it):
            // one walk per pair.
            assert_eq!(walked(kind, &[0..13]), 7);
            assert_eq!(walked(kind, &[0..4, 9..13]), 4);
            assert_eq!(walked(kind, &[4..9]), 3);
            assert_eq!(walked(kind, &[2..3, 10..11]), 1);
            // Contiguous bands that are not symmetric: every latitude.
            assert_eq!(walked(kind, &[0..7]), 7);
            assert_eq!(walked(kind, &[7..13]), 6);
            assert_eq!(walked(kind, &[0..4, 8..12]), 8);
        }
        assert!(!mirrored(&[], 13));
        assert!(mirrored(&[6], 13));
        assert!(!mirrored(&[6], 12));
    }
}
