//! A spectral shallow-water model on the rotating sphere, serial and
//! distributed: the solver torch-harmonics ships as
//! `torch_harmonics.examples.ShallowWaterSolver`, on ruda-sphere's
//! transforms, and what it is made of.
//!
//! | item | what it holds |
//! |---|---|
//! | [`SphereTransforms`] | the scalar and vector transforms and this rank's part of the sphere: [`SerialTransforms`], or [`DistributedTransforms`] on a polar × azimuth grid |
//! | [`SphereCalculus`] | the spectral Laplacian and its inverse, winds ↔ vorticity and divergence, the grid's coordinates and integrals |
//! | [`ShallowWaterSolver`] | tendencies, Adams–Bashforth steps with hyperdiffusion, the Galewsky jet and random initial states, mass and energy |
//! | [`Planet`] | radius, rotation, gravity and depth (Earth's by default) |
//!
//! The distributed solver is the serial one on [`DistributedTransforms`]:
//! the spectral operators are diagonal in the degree and the products are
//! taken point by point on the grid, so each rank works on its own part
//! and only the transforms communicate. Its states equal the serial
//! solver's parts to round-off.
//!
//! ```
//! use burn_tensor::{DType, Device};
//! use ruda_comm::LocalWorld;
//! use ruda_sphere::shallow_water::{DistributedTransforms, Planet, ShallowWaterSolver};
//! use ruda_sphere::{LatitudeGrid, ShtSpec};
//! use ruda_tensor::ProcessGrid;
//!
//! let spec = ShtSpec::with_truncation(24, 48, LatitudeGrid::Equiangular, Some(8), None)?;
//! let masses = LocalWorld::new(4).run(|comm| {
//!     let grid = ProcessGrid::new(comm, 2, 2)?;
//!     let solver = ShallowWaterSolver::new(
//!         DistributedTransforms::new(&grid, spec)?, 900.0, Planet::default(),
//!         &Device::flex(), DType::F64,
//!     )?;
//!     let state = solver.step(solver.galewsky()?, 4)?; // this rank's part
//!     solver.mass(state)
//! }).unwrap();
//! assert!(masses.iter().all(|m| (m - masses[0]).abs() <= 1e-12 * masses[0]));
//! # Ok::<(), ruda_sphere::SphereError>(())
//! ```

mod calculus;
mod initial;
mod planet;
mod solver;
mod transforms;

pub use calculus::SphereCalculus;
pub use initial::Jet;
pub use planet::Planet;
pub use solver::ShallowWaterSolver;
pub use transforms::{
    DistributedTransforms, SerialDomain, SerialTransforms, SphereDomain, SphereTransforms,
};
