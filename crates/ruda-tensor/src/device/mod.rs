//! The device-resident implementation of the tensor layer's [`Group`]:
//! ranks as threads of this process whose tensors stay on their Burn
//! devices ([`DeviceWorld`], [`DeviceGroup`]). Collectives are the
//! backend's own tensor operations on the peers' tensors (slice, cat, add
//! in rank order, `to_device`), as seed 004's HBM kernels are; the
//! host-staged [`crate::HostCollective`] is the fallback for processes
//! that do not share memory (MPI).
//!
//! [`Group`]: crate::Group

mod group;
mod moves;
mod world;

pub use group::DeviceGroup;
pub use world::DeviceWorld;
