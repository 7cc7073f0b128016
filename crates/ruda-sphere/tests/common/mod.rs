//! Helpers shared by the test files.
#![allow(dead_code)]

use burn_tensor::{DType, Device, Tensor, TensorData};
use serde_json::Value;

/// An f64 tensor of `shape` from `values` on `device`.
pub fn tensor<const D: usize>(values: Vec<f64>, shape: [usize; D], device: &Device) -> Tensor<D> {
    Tensor::from_data(TensorData::new(values, shape), (device, DType::F64))
}

/// The values of `t` as f64 (f32 tensors are widened).
pub fn values<const D: usize>(t: Tensor<D>) -> Vec<f64> {
    let data = t.into_data();
    match data.dtype() {
        DType::F32 => data
            .try_to_vec::<f32>()
            .unwrap()
            .into_iter()
            .map(f64::from)
            .collect(),
        _ => data.try_to_vec::<f64>().unwrap(),
    }
}

/// Deterministic values in [-1, 1) (a 64-bit LCG, high bits).
pub fn random(len: usize, seed: u64) -> Vec<f64> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..len)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (s >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
        })
        .collect()
}

/// Random band-limited coefficients `[lead, lmax, mmax, 2]`: zero where
/// `m > l`, real at `m = 0` and at the Nyquist order `m = nlon/2`.
pub fn band_limited(lead: usize, lmax: usize, mmax: usize, nlon: usize, seed: u64) -> Vec<f64> {
    let mut c = random(lead * lmax * mmax * 2, seed);
    for b in 0..lead {
        for l in 0..lmax {
            for m in 0..mmax {
                let i = ((b * lmax + l) * mmax + m) * 2;
                if m > l {
                    c[i] = 0.0;
                    c[i + 1] = 0.0;
                }
                if m == 0 || 2 * m == nlon {
                    c[i + 1] = 0.0;
                }
            }
        }
    }
    c
}

/// Largest |a − b| relative to the largest |b| (at least `floor`).
pub fn rel_err(a: &[f64], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len(), "lengths differ");
    let scale = b.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    let diff = a
        .iter()
        .zip(b)
        .fold(0.0f64, |m, (x, y)| m.max((x - y).abs()));
    diff / scale.max(f64::MIN_POSITIVE)
}

/// Σ a·b.
pub fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// A nested JSON array of numbers (a reference file's), flattened.
pub fn flat(v: &Value) -> Vec<f64> {
    match v {
        Value::Array(items) => items.iter().flat_map(flat).collect(),
        Value::Number(n) => vec![n.as_f64().unwrap()],
        other => panic!("not a number: {other}"),
    }
}
