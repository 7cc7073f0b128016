//! A pointwise (1 × 1) convolution over the channels of fields on the
//! sphere: torch's `nn.Conv2d(in, out, 1)`.

use burn_core as burn;

use burn::module::{Module, Param};
use burn_tensor::Tensor;
use ruda_tensor::reshape;

use crate::init::Init;

/// `y[b, o, ..] = Σ_i W[o, i] x[b, i, ..] (+ bias[o])` at every grid
/// point: a 1 × 1 convolution. Acts on this rank's patch alone, so it is
/// the same serially and distributed; its parameters are replicated and
/// their gradients summed over the domain (see [`crate::Sfno`]).
#[derive(Module, Debug)]
pub struct Pointwise {
    /// `[out, in]`.
    pub weight: Param<Tensor<2>>,
    /// `[out]`, if any.
    pub bias: Option<Param<Tensor<1>>>,
}

impl Pointwise {
    /// Weights N(0, std²), bias zero when asked.
    pub(crate) fn new(init: &mut Init, input: usize, output: usize, std: f64, bias: bool) -> Self {
        Pointwise {
            weight: Param::from_tensor(init.normal([output, input], std)),
            bias: bias.then(|| Param::from_tensor(init.zeros([output]))),
        }
    }

    /// Apply to fields `[b, in, lat, lon]`.
    pub fn forward(&self, x: Tensor<4>) -> Tensor<4> {
        let [b, c, lat, lon] = x.dims();
        let w = self.weight.val();
        let out = w.dims()[0];
        if b == 0 {
            // No samples: `[out, in] × [in, 0]`, an empty product that
            // keeps the weight on the graph, so an empty batch's loss can
            // still run backward (its gradients are zero).
            let y = w.matmul(reshape(x, [c, 0]));
            let y = match &self.bias {
                Some(bias) => y + bias.val().reshape([out, 1]),
                None => y,
            };
            return reshape(y, [0, out, lat, lon]);
        }
        let y = w
            .unsqueeze::<3>()
            .expand([b, out, c])
            .matmul(x.reshape([b, c, lat * lon]));
        let y = match &self.bias {
            Some(bias) => y + bias.val().reshape([1, out, 1]),
            None => y,
        };
        y.reshape([b, out, lat, lon])
    }
}
