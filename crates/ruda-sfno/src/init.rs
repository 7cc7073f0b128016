//! Seeded initial values of parameters: the same seed gives the same model
//! on every rank and every process, with no broadcast.

use burn_tensor::{DType, Device, Tensor, TensorData};
use rand::SeedableRng;
use rand::rngs::Xoshiro256PlusPlus;
use rand_distr::{Distribution, StandardNormal};

/// A stream of normal variates for one model's parameters.
#[derive(Debug)]
pub(crate) struct Init {
    rng: Xoshiro256PlusPlus,
    device: Device,
    dtype: DType,
}

impl Init {
    pub(crate) fn new(seed: u64, device: &Device, dtype: DType) -> Self {
        Init {
            rng: Xoshiro256PlusPlus::seed_from_u64(seed),
            device: device.clone(),
            dtype,
        }
    }

    /// A tensor of `shape` with values drawn from N(0, std²), in f64 and
    /// rounded once to the model's dtype.
    pub(crate) fn normal<const D: usize>(&mut self, shape: [usize; D], std: f64) -> Tensor<D> {
        let n: usize = shape.iter().product();
        let v: Vec<f64> = (0..n)
            .map(|_| {
                let z: f64 = StandardNormal.sample(&mut self.rng);
                std * z
            })
            .collect();
        Tensor::from_data(TensorData::new(v, shape), (&self.device, self.dtype))
    }

    /// Zeros of `shape`.
    pub(crate) fn zeros<const D: usize>(&self, shape: [usize; D]) -> Tensor<D> {
        Tensor::zeros(shape, (&self.device, self.dtype))
    }
}
