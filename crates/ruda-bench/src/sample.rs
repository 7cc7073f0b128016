//! Test values for each element type and the serial reference they are
//! checked against.

use half::{bf16, f16};

use ruda_comm::{Element, ReduceOp};

/// An [`Element`] the benchmarks and the conformance suite can generate
/// and check.
pub trait Sample: Element {
    /// A value from hash `h`; for products, one in `[0.5, 2)` (floats) so
    /// that eight-way products stay finite.
    fn sample(h: u64, for_product: bool) -> Self;

    /// The small whole number `v`, exactly representable in every type.
    fn from_small(v: u8) -> Self;

    /// Check `got` against the serial reduction of `inputs` (in rank order)
    /// with `op`; on failure return the reference as text.
    fn check_reduction(got: Self, inputs: &[Self], op: ReduceOp) -> Result<(), String>;
}

fn float_reference(inputs: &[f64], op: ReduceOp) -> (f64, f64) {
    let sum_abs: f64 = inputs.iter().map(|x| x.abs()).sum();
    let v = match op {
        ReduceOp::Sum => inputs.iter().sum(),
        ReduceOp::Mean => inputs.iter().sum::<f64>() / inputs.len() as f64,
        ReduceOp::Prod => inputs.iter().product(),
        ReduceOp::Min => inputs.iter().copied().fold(f64::INFINITY, f64::min),
        ReduceOp::Max => inputs.iter().copied().fold(f64::NEG_INFINITY, f64::max),
    };
    (v, sum_abs)
}

/// `got` must be within one final rounding (relative `half_ulp`) of the
/// exact result, plus `acc_eps` per term of accumulation error.
fn float_check(
    got: f64,
    inputs: &[f64],
    op: ReduceOp,
    half_ulp: f64,
    acc_eps: f64,
) -> Result<(), String> {
    let (exact, sum_abs) = float_reference(inputs, op);
    let n = inputs.len() as f64;
    let scale = match op {
        ReduceOp::Prod => exact.abs() * n,
        ReduceOp::Min | ReduceOp::Max => 0.0,
        _ => sum_abs,
    };
    let tol = exact.abs() * half_ulp * 1.000_1 + n * acc_eps * scale + f64::MIN_POSITIVE;
    if (got - exact).abs() <= tol {
        Ok(())
    } else {
        Err(format!("{exact} (tolerance {tol:e})"))
    }
}

macro_rules! float_sample {
    ($t:ty, $to:expr, $from:expr, $half_ulp:expr, $acc_eps:expr) => {
        impl Sample for $t {
            fn sample(h: u64, for_product: bool) -> Self {
                let u = (h >> 11) as f64 / (1u64 << 53) as f64;
                let v = if for_product {
                    0.5 + 1.5 * u
                } else {
                    16.0 * u - 8.0
                };
                $from(v)
            }
            fn from_small(v: u8) -> Self {
                $from(v as f64)
            }
            fn check_reduction(got: Self, inputs: &[Self], op: ReduceOp) -> Result<(), String> {
                let xs: Vec<f64> = inputs.iter().map(|&x| $to(x)).collect();
                float_check($to(got), &xs, op, $half_ulp, $acc_eps)
            }
        }
    };
}

float_sample!(
    f64,
    |x: f64| x,
    |v: f64| v,
    f64::EPSILON / 2.0,
    f64::EPSILON
);
float_sample!(
    f32,
    |x: f32| x as f64,
    |v: f64| v as f32,
    f32::EPSILON as f64 / 2.0,
    f32::EPSILON as f64
);
// f16 and bf16 accumulate in f32: one rounding to the narrow type plus f32 error.
float_sample!(
    f16,
    |x: f16| x.to_f64(),
    f16::from_f64,
    2f64.powi(-11),
    f32::EPSILON as f64
);
float_sample!(
    bf16,
    |x: bf16| x.to_f64(),
    bf16::from_f64,
    2f64.powi(-8),
    f32::EPSILON as f64
);

macro_rules! int_sample {
    ($t:ty) => {
        impl Sample for $t {
            fn sample(h: u64, _for_product: bool) -> Self {
                // Full-range bit patterns, extremes included now and then.
                match h % 16 {
                    0 => <$t>::MIN,
                    1 => <$t>::MAX,
                    _ => (h >> 8) as $t,
                }
            }
            fn from_small(v: u8) -> Self {
                v as $t
            }
            fn check_reduction(got: Self, inputs: &[Self], op: ReduceOp) -> Result<(), String> {
                let it = inputs.iter().copied();
                let exact = match op {
                    ReduceOp::Sum => it.fold(0 as $t, <$t>::wrapping_add),
                    ReduceOp::Prod => it.fold(1 as $t, <$t>::wrapping_mul),
                    ReduceOp::Min => it.min().expect("one rank at least"),
                    ReduceOp::Max => it.max().expect("one rank at least"),
                    ReduceOp::Mean => return Err("no result (Mean of integers is refused)".into()),
                };
                if got == exact {
                    Ok(())
                } else {
                    Err(format!("{exact}"))
                }
            }
        }
    };
}
int_sample!(u8);
int_sample!(u32);
int_sample!(i32);
int_sample!(i64);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_half_tolerance_rejects_accumulating_in_half() {
        // 2048 + 1 + 1: exact 2050 is representable in f16, but a sum kept in
        // f16 stays at 2048. The check must accept the first, reject the second.
        let xs = [f16::from_f32(2048.0), f16::ONE, f16::ONE];
        assert!(f16::check_reduction(f16::from_f32(2050.0), &xs, ReduceOp::Sum).is_ok());
        assert!(f16::check_reduction(f16::from_f32(2048.0), &xs, ReduceOp::Sum).is_err());
        let ys = [bf16::from_f32(256.0), bf16::ONE, bf16::ONE];
        assert!(bf16::check_reduction(bf16::from_f32(258.0), &ys, ReduceOp::Sum).is_ok());
        assert!(bf16::check_reduction(bf16::from_f32(256.0), &ys, ReduceOp::Sum).is_err());
    }

    #[test]
    fn integer_checks_are_exact_and_wrap() {
        assert!(u8::check_reduction(4, &[250, 10], ReduceOp::Sum).is_ok());
        assert!(u8::check_reduction(5, &[250, 10], ReduceOp::Sum).is_err());
        assert!(i64::check_reduction(i64::MIN, &[i64::MAX, 1], ReduceOp::Sum).is_ok());
    }
}
