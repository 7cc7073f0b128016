//! Which compiled form of the Legendre kernels runs: chosen once per
//! process from what the CPU has, or lowered by the environment variable
//! `RUDA_SPHERE_KERNEL` (for tests of every path on one machine, and for
//! comparing them).
//!
//! Every level gives results equal to the others to rounding; the two
//! levels with fused multiply-adds (AVX2 and AVX-512) give the same bits,
//! because they sum every coefficient in the same order with the same
//! instructions and differ only in how many degrees they keep in
//! registers at once.

use std::sync::OnceLock;

/// A compiled form of the Legendre kernels, from the slowest.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum KernelLevel {
    /// Any CPU: separate multiplies and adds, vectorised as the target
    /// allows (SSE2 on x86-64).
    Portable,
    /// x86-64 with AVX2 and FMA: 256-bit registers, fused multiply-adds,
    /// four degrees per register tile.
    Avx2,
    /// x86-64 with AVX-512F (and AVX2, FMA): 512-bit operations and 32
    /// registers, eight degrees per register tile.
    Avx512,
}

impl KernelLevel {
    /// Every level, from the slowest.
    pub(crate) const ALL: [KernelLevel; 3] = [
        KernelLevel::Portable,
        KernelLevel::Avx2,
        KernelLevel::Avx512,
    ];

    /// The best level this CPU runs (detected at run time).
    ///
    /// # Example
    /// ```
    /// use ruda_sphere::KernelLevel;
    /// assert!(KernelLevel::detected() >= KernelLevel::Portable);
    /// ```
    pub fn detected() -> KernelLevel {
        #[cfg(target_arch = "x86_64")]
        {
            let fma = std::arch::is_x86_feature_detected!("avx2")
                && std::arch::is_x86_feature_detected!("fma");
            if fma && std::arch::is_x86_feature_detected!("avx512f") {
                return KernelLevel::Avx512;
            }
            if fma {
                return KernelLevel::Avx2;
            }
        }
        KernelLevel::Portable
    }

    /// Every level this CPU runs, from the slowest.
    ///
    /// # Example
    /// ```
    /// use ruda_sphere::KernelLevel;
    /// assert_eq!(KernelLevel::available()[0], KernelLevel::Portable);
    /// ```
    pub fn available() -> Vec<KernelLevel> {
        let best = KernelLevel::detected();
        KernelLevel::ALL
            .into_iter()
            .filter(|&l| l <= best)
            .collect()
    }

    /// The level's name, as `RUDA_SPHERE_KERNEL` takes it: `portable`,
    /// `avx2` or `avx512`.
    ///
    /// # Example
    /// ```
    /// use ruda_sphere::KernelLevel;
    /// assert_eq!(KernelLevel::Avx2.name(), "avx2");
    /// ```
    pub fn name(self) -> &'static str {
        match self {
            KernelLevel::Portable => "portable",
            KernelLevel::Avx2 => "avx2",
            KernelLevel::Avx512 => "avx512",
        }
    }

    /// The level `RUDA_SPHERE_KERNEL` names, if it names one.
    fn parse(name: &str) -> Option<KernelLevel> {
        KernelLevel::ALL
            .into_iter()
            .find(|l| l.name() == name.trim().to_ascii_lowercase())
    }
}

/// The level every transform of this process runs: [`KernelLevel::detected`],
/// or, when the environment variable `RUDA_SPHERE_KERNEL` names a level
/// (`portable`, `avx2`, `avx512`), that one if this CPU runs it and the
/// best below it if not. Read once, at the first transform; a value that
/// names no level is ignored.
///
/// # Example
/// ```
/// use ruda_sphere::{KernelLevel, kernel_level};
/// assert!(kernel_level() <= KernelLevel::detected());
/// ```
pub fn kernel_level() -> KernelLevel {
    static LEVEL: OnceLock<KernelLevel> = OnceLock::new();
    *LEVEL.get_or_init(|| {
        let best = KernelLevel::detected();
        std::env::var("RUDA_SPHERE_KERNEL")
            .ok()
            .and_then(|v| KernelLevel::parse(&v))
            .map_or(best, |asked| asked.min(best))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_back_and_levels_are_ordered() {
        for l in KernelLevel::ALL {
            assert_eq!(KernelLevel::parse(l.name()), Some(l));
            assert_eq!(KernelLevel::parse(&l.name().to_uppercase()), Some(l));
        }
        assert_eq!(KernelLevel::parse("sse9"), None);
        assert!(KernelLevel::Portable < KernelLevel::Avx2);
        assert!(KernelLevel::Avx2 < KernelLevel::Avx512);
        let avail = KernelLevel::available();
        assert_eq!(avail.last(), Some(&KernelLevel::detected()));
        assert!(kernel_level() <= KernelLevel::detected());
    }

    /// Under `RUDA_SPHERE_KERNEL` (as CI runs this crate's tests on the
    /// lower levels) the transforms run the level it names, or the best
    /// below it this CPU has: the forced runs test what they say.
    #[test]
    fn the_environment_variable_sets_the_level() {
        let best = KernelLevel::detected();
        match std::env::var("RUDA_SPHERE_KERNEL")
            .ok()
            .and_then(|v| KernelLevel::parse(&v))
        {
            Some(asked) => assert_eq!(kernel_level(), asked.min(best)),
            None => assert_eq!(kernel_level(), best),
        }
    }
}
