//! The spectral convolution of a spherical Fourier neural operator:
//! torch-harmonics' `SpectralConvS2` with its default Driscoll–Healy
//! operator (one complex weight per degree, shared by every order).

use burn_core as burn;

use burn::module::{Module, Param};
use burn_tensor::Tensor;

use crate::init::Init;

/// `ĉ_out[b, o, l, m] = Σ_i W[o, i, l] ĉ_in[b, i, l, m]` in complex
/// arithmetic: the spherical convolution theorem's filter, isotropic (the
/// weight depends on the degree `l` only, so the map commutes with
/// rotations). Parameters `[out, in, lmax, 2]` (real and imaginary parts),
/// replicated on every rank; a rank of a process grid applies the degrees
/// it holds (`narrow` over its `l_range`), so its gradient is zero outside
/// them and the sum over the domain is the serial gradient.
#[derive(Module, Debug)]
pub struct SpectralConv {
    /// `[out, in, lmax, 2]`.
    pub weight: Param<Tensor<4>>,
}

impl SpectralConv {
    /// Weights complex normal with standard deviation `std` (each part
    /// `std/√2`, as `torch.randn` of complex64 draws).
    pub(crate) fn new(init: &mut Init, input: usize, output: usize, lmax: usize, std: f64) -> Self {
        let w = init.normal(
            [output, input, lmax, 2],
            std * core::f64::consts::FRAC_1_SQRT_2,
        );
        SpectralConv {
            weight: Param::from_tensor(w),
        }
    }

    /// Apply to coefficients `[b, in, l, m, 2]` of the degrees `l_start ..
    /// l_start + l`: `[b, out, l, m, 2]`.
    pub fn forward(&self, c: Tensor<5>, l_start: usize) -> Tensor<5> {
        let [b, i, l, m, _] = c.dims();
        let w = self.weight.val().narrow(2, l_start, l);
        let o = w.dims()[0];
        // [l, b·m, 2i] × [l, 2i, 2o]: (cr, ci) (wr, wi; −wi, wr) = (yr, yi).
        let part = |c: &Tensor<5>, k: usize| {
            c.clone()
                .narrow(4, k, 1)
                .reshape([b, i, l, m])
                .permute([2, 0, 3, 1])
                .reshape([l, b * m, i])
        };
        let x = Tensor::cat(vec![part(&c, 0), part(&c, 1)], 2);
        let wpart = |k: usize| {
            w.clone()
                .narrow(3, k, 1)
                .reshape([o, i, l])
                .permute([2, 1, 0])
        };
        let (wr, wi) = (wpart(0), wpart(1));
        let top = Tensor::cat(vec![wr.clone(), wi.clone()], 2);
        let bottom = Tensor::cat(vec![wi.neg(), wr], 2);
        let y = x.matmul(Tensor::cat(vec![top, bottom], 1));
        y.reshape([l, b, m, 2, o]).permute([1, 4, 0, 2, 3])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn_tensor::{DType, Device};

    /// The block-matrix contraction equals the complex sum written out,
    /// for a block of degrees that starts inside the weight's.
    #[test]
    fn contraction_is_the_complex_sum() {
        let (b, i, o, l, m, lmax, start) = (2, 3, 2, 4, 5, 6, 1);
        let device = Device::flex();
        let mut init = Init::new(11, &device, DType::F64);
        let conv = SpectralConv::new(&mut init, i, o, lmax, 1.0);
        let c = init.normal([b, i, l, m, 2], 1.0);
        let got = conv
            .forward(c.clone(), start)
            .into_data()
            .try_to_vec::<f64>()
            .unwrap();
        let cv = c.into_data().try_to_vec::<f64>().unwrap();
        let wv = conv.weight.val().into_data().try_to_vec::<f64>().unwrap();
        let at_c = |bb: usize, ii: usize, ll: usize, mm: usize, k: usize| {
            cv[(((bb * i + ii) * l + ll) * m + mm) * 2 + k]
        };
        let at_w =
            |oo: usize, ii: usize, ll: usize, k: usize| wv[((oo * i + ii) * lmax + ll) * 2 + k];
        let mut want = vec![0.0; b * o * l * m * 2];
        for bb in 0..b {
            for oo in 0..o {
                for ll in 0..l {
                    for mm in 0..m {
                        let (mut re, mut im) = (0.0, 0.0);
                        for ii in 0..i {
                            let (cr, ci) = (at_c(bb, ii, ll, mm, 0), at_c(bb, ii, ll, mm, 1));
                            let (wr, wi) =
                                (at_w(oo, ii, ll + start, 0), at_w(oo, ii, ll + start, 1));
                            re += cr * wr - ci * wi;
                            im += cr * wi + ci * wr;
                        }
                        let at = (((bb * o + oo) * l + ll) * m + mm) * 2;
                        want[at] = re;
                        want[at + 1] = im;
                    }
                }
            }
        }
        let err = got
            .iter()
            .zip(&want)
            .fold(0.0f64, |e, (a, w)| e.max((a - w).abs()));
        assert!(err < 1e-13, "{err}");
    }
}
