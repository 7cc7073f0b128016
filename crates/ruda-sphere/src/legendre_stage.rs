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
    /// For `spec`'s (ascending) `orders` over its latitudes `lats`:
    /// `weighted` for the analysis of a field. The whole column of
    /// latitudes is walked in mirrored pairs, a band of it (a rank's part)
    /// latitude by latitude.
    pub(crate) fn new(
        spec: &ShtSpec,
        kind: Kind,
        orders: &[usize],
        lats: Range<usize>,
        weighted: bool,
    ) -> Self {
        let q = Latitudes::new(spec.nlat(), spec.grid()).expect("the spec checked the grid");
        let paired = lats == (0..spec.nlat());
        let (x, w) = (&q.cosines[lats.clone()], &q.weights[lats]);
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
        let rec = Recurrence::new(orders, degrees, x, w, spec.csphase(), seeds, paired);
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
