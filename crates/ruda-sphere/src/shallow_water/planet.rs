//! The physical constants of a shallow-water planet.

use crate::SphereError;

/// The constants of a rotating shallow-water planet, by default Earth's as
/// torch-harmonics' `ShallowWaterSolver` sets them.
///
/// # Example
/// ```
/// use ruda_sphere::shallow_water::Planet;
/// let earth = Planet::default();
/// assert_eq!(earth.radius, 6.37122e6);
/// let slow = Planet { omega: 0.0, ..Planet::default() };
/// assert!(slow.check().is_ok());
/// assert!(Planet { gravity: -1.0, ..earth }.check().is_err());
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Planet {
    /// Radius in metres (6.37122e6).
    pub radius: f64,
    /// Angular velocity of the rotation in rad/s (7.292e-5).
    pub omega: f64,
    /// Gravitational acceleration in m/s² (9.80616).
    pub gravity: f64,
    /// Mean depth of the fluid in metres (10 000).
    pub havg: f64,
    /// Height of the Galewsky perturbation, and the scale of random heights,
    /// in metres (120).
    pub hamp: f64,
}

impl Default for Planet {
    fn default() -> Self {
        Planet {
            radius: 6.37122e6,
            omega: 7.292e-5,
            gravity: 9.80616,
            havg: 10.0e3,
            hamp: 120.0,
        }
    }
}

impl Planet {
    /// Check that every constant is finite and the radius, gravity and mean
    /// depth positive.
    ///
    /// # Errors
    /// [`SphereError::Setting`] naming the first constant that is not.
    pub fn check(&self) -> Result<(), SphereError> {
        let positive = [
            ("radius", self.radius),
            ("gravity", self.gravity),
            ("havg", self.havg),
        ];
        for (what, value) in positive {
            if !(value.is_finite() && value > 0.0) {
                return Err(SphereError::Setting {
                    what,
                    value,
                    expected: "finite and positive",
                });
            }
        }
        for (what, value) in [("omega", self.omega), ("hamp", self.hamp)] {
            if !value.is_finite() {
                return Err(SphereError::Setting {
                    what,
                    value,
                    expected: "finite",
                });
            }
        }
        Ok(())
    }
}
