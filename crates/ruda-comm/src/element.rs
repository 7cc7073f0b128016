//! The element types that travel through a communicator, and how they reduce.
//!
//! Reductions of [`f16`] and [`bf16`] accumulate in `f32` and round once at
//! the end; every other type accumulates in itself. Integer sums and products
//! **wrap** (two's complement), as in MPI and NCCL; integer averages are
//! refused with [`crate::InvalidArgument::AverageOfIntegers`] because a
//! truncated mean is rarely what a caller wants.

use core::fmt;

use half::{bf16, f16};

/// Runtime tag for an [`Element`] type, carried in fingerprints and errors.
///
/// # Example
/// ```
/// use ruda_comm::{DType, Element};
/// assert_eq!(<f32 as Element>::DTYPE, DType::F32);
/// assert_eq!(DType::BF16.size_in_bytes(), 2);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    /// IEEE 754 half precision.
    F16,
    /// bfloat16.
    BF16,
    /// IEEE 754 single precision.
    F32,
    /// IEEE 754 double precision.
    F64,
    /// Unsigned byte.
    U8,
    /// Unsigned 32-bit integer.
    U32,
    /// Signed 32-bit integer.
    I32,
    /// Signed 64-bit integer.
    I64,
}

impl DType {
    /// Every element type, in code order.
    pub const ALL: [DType; 8] = [
        DType::F16,
        DType::BF16,
        DType::F32,
        DType::F64,
        DType::U8,
        DType::U32,
        DType::I32,
        DType::I64,
    ];

    /// A small stable number for the type (its index in [`DType::ALL`]).
    pub fn code(self) -> u8 {
        Self::ALL.iter().position(|&d| d == self).expect("listed") as u8
    }

    /// The type of [`DType::code`] `c`.
    pub fn from_code(c: u8) -> Option<DType> {
        Self::ALL.get(c as usize).copied()
    }

    /// Size of one element in bytes.
    pub const fn size_in_bytes(self) -> usize {
        match self {
            DType::F16 | DType::BF16 => 2,
            DType::F32 | DType::U32 | DType::I32 => 4,
            DType::F64 | DType::I64 => 8,
            DType::U8 => 1,
        }
    }

    /// Whether the type is a floating-point type.
    pub const fn is_float(self) -> bool {
        matches!(self, DType::F16 | DType::BF16 | DType::F32 | DType::F64)
    }

    /// The lower-case name used in tables and error messages (`"f32"`, `"bf16"`).
    pub const fn name(self) -> &'static str {
        match self {
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::F32 => "f32",
            DType::F64 => "f64",
            DType::U8 => "u8",
            DType::U32 => "u32",
            DType::I32 => "i32",
            DType::I64 => "i64",
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

mod sealed {
    pub trait Sealed {}
}

/// The arithmetic a reduction performs, on an element's accumulation type.
///
/// Implemented for `f32`, `f64` and the integer types; integer `add` and
/// `mul` wrap.
pub trait Accumulator: Copy + Default + Send + Sync + 'static + sealed::Sealed {
    /// Whether [`Accumulator::div_count`] is meaningful (floating types only).
    const SUPPORTS_AVG: bool;
    /// `self + other` (wrapping for integers).
    fn add(self, other: Self) -> Self;
    /// `self * other` (wrapping for integers).
    fn mul(self, other: Self) -> Self;
    /// The smaller of the two (IEEE `minNum` for floats: a NaN loses to a number).
    fn min(self, other: Self) -> Self;
    /// The larger of the two (IEEE `maxNum` for floats).
    fn max(self, other: Self) -> Self;
    /// `self / n`, used by averages; only called when [`Self::SUPPORTS_AVG`].
    fn div_count(self, n: usize) -> Self;
}

macro_rules! float_acc {
    ($t:ty) => {
        impl sealed::Sealed for $t {}
        impl Accumulator for $t {
            const SUPPORTS_AVG: bool = true;
            #[inline(always)]
            fn add(self, o: Self) -> Self {
                self + o
            }
            #[inline(always)]
            fn mul(self, o: Self) -> Self {
                self * o
            }
            #[inline(always)]
            fn min(self, o: Self) -> Self {
                <$t>::min(self, o)
            }
            #[inline(always)]
            fn max(self, o: Self) -> Self {
                <$t>::max(self, o)
            }
            #[inline(always)]
            fn div_count(self, n: usize) -> Self {
                self / n as $t
            }
        }
    };
}
float_acc!(f32);
float_acc!(f64);

macro_rules! int_acc {
    ($t:ty) => {
        impl sealed::Sealed for $t {}
        impl Accumulator for $t {
            const SUPPORTS_AVG: bool = false;
            #[inline(always)]
            fn add(self, o: Self) -> Self {
                self.wrapping_add(o)
            }
            #[inline(always)]
            fn mul(self, o: Self) -> Self {
                self.wrapping_mul(o)
            }
            #[inline(always)]
            fn min(self, o: Self) -> Self {
                Ord::min(self, o)
            }
            #[inline(always)]
            fn max(self, o: Self) -> Self {
                Ord::max(self, o)
            }
            #[inline(always)]
            fn div_count(self, n: usize) -> Self {
                // Never called: integer averages are refused before any data moves.
                self / n as $t
            }
        }
    };
}
int_acc!(u8);
int_acc!(u32);
int_acc!(i32);
int_acc!(i64);

/// A type that can travel through a [`crate::Communicator`].
///
/// Sealed: implemented for `f16`, `bf16`, `f32`, `f64`, `u8`, `u32`, `i32`
/// and `i64`. `Acc` is the type reductions accumulate in.
///
/// # Example
/// ```
/// use half::f16;
/// use ruda_comm::Element;
/// // f16 accumulates in f32, so a sum of many small values rounds once.
/// let acc: f32 = f16::from_f32(0.5).to_acc();
/// assert_eq!(<f16 as Element>::from_acc(acc + acc), f16::from_f32(1.0));
/// ```
pub trait Element:
    bytemuck::Pod + PartialEq + fmt::Debug + Send + Sync + 'static + sealed::Sealed
{
    /// The runtime tag of this type.
    const DTYPE: DType;
    /// The type reductions accumulate in.
    type Acc: Accumulator;
    /// Widen to the accumulation type.
    fn to_acc(self) -> Self::Acc;
    /// Round from the accumulation type (once, at the end of a reduction).
    fn from_acc(acc: Self::Acc) -> Self;
}

macro_rules! identity_element {
    ($t:ty, $d:ident) => {
        impl Element for $t {
            const DTYPE: DType = DType::$d;
            type Acc = $t;
            #[inline(always)]
            fn to_acc(self) -> $t {
                self
            }
            #[inline(always)]
            fn from_acc(acc: $t) -> $t {
                acc
            }
        }
    };
}
identity_element!(f32, F32);
identity_element!(f64, F64);
identity_element!(u8, U8);
identity_element!(u32, U32);
identity_element!(i32, I32);
identity_element!(i64, I64);

impl sealed::Sealed for f16 {}
impl Element for f16 {
    const DTYPE: DType = DType::F16;
    type Acc = f32;
    #[inline(always)]
    fn to_acc(self) -> f32 {
        self.to_f32()
    }
    #[inline(always)]
    fn from_acc(acc: f32) -> f16 {
        f16::from_f32(acc)
    }
}

impl sealed::Sealed for bf16 {}
impl Element for bf16 {
    const DTYPE: DType = DType::BF16;
    type Acc = f32;
    #[inline(always)]
    fn to_acc(self) -> f32 {
        self.to_f32()
    }
    #[inline(always)]
    fn from_acc(acc: f32) -> bf16 {
        bf16::from_f32(acc)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integer_sums_wrap() {
        assert_eq!(Accumulator::add(u8::MAX, 2u8), 1);
        assert_eq!(Accumulator::add(i64::MAX, 1i64), i64::MIN);
        assert_eq!(Accumulator::mul(i32::MIN, -1i32), i32::MIN);
    }

    #[test]
    fn half_types_accumulate_in_f32() {
        // 2048 + 1 is not representable in f16; in f32 it is, so a sum of
        // 2048 and two ones must round to 2050, not stay at 2048.
        let parts = [f16::from_f32(2048.0), f16::ONE, f16::ONE];
        let acc = parts.iter().fold(0f32, |a, x| a.add(x.to_acc()));
        assert_eq!(f16::from_acc(acc), f16::from_f32(2050.0));
        let naive = parts.iter().fold(f16::ZERO, |a, &x| a + x);
        assert_eq!(naive, f16::from_f32(2048.0));
    }

    #[test]
    fn dtype_sizes_match_rust_types() {
        assert_eq!(DType::F16.size_in_bytes(), size_of::<f16>());
        assert_eq!(DType::BF16.size_in_bytes(), size_of::<bf16>());
        assert_eq!(DType::F64.size_in_bytes(), size_of::<f64>());
        assert_eq!(DType::U8.size_in_bytes(), size_of::<u8>());
        assert_eq!(DType::I64.size_in_bytes(), size_of::<i64>());
        assert!(DType::BF16.is_float() && !DType::U32.is_float());
    }
}
