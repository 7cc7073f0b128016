//! [`DeviceWorld`]: run one closure per rank on threads of this process,
//! each rank with a [`DeviceGroup`] and the Burn device its tensors live on.

use alloc::vec::Vec;
use core::time::Duration;

use ruda_comm::{Communicator, LocalWorld, RankError, WorldError};

use super::DeviceGroup;

/// A world of ranks as threads of this process whose tensors live on Burn
/// devices: one device shared by every rank ([`DeviceWorld::shared`]) or one
/// device per rank ([`DeviceWorld::per_rank`], devices of one backend;
/// peers' tensors are brought over with the backend's `to_device`). The
/// device-resident counterpart of [`ruda_comm::LocalWorld`], with the same
/// deadlines, pinning and failure detection (a rank that panics or returns
/// fails the peers still waiting for it).
///
/// `D` is the device type the closures receive: `burn_tensor::Device` for
/// Burn's user-facing tensors, or a backend's own device type for
/// primitive-level code.
///
/// # Example
/// ```
/// use burn_tensor::{Device, Tensor};
/// use ruda_tensor::{DeviceWorld, TensorExt};
///
/// let sums = DeviceWorld::shared(3, Device::flex()).run(|group, device| {
///     let x = Tensor::<1>::from_floats([1.0, 2.0], device);
///     let s = x.all_reduce(&group)?;
///     Ok::<_, ruda_tensor::Error>(s.into_data().try_to_vec::<f32>().unwrap())
/// }).unwrap();
/// assert_eq!(sums, vec![vec![3.0, 6.0]; 3]);
/// ```
#[derive(Clone, Debug)]
pub struct DeviceWorld<D> {
    devices: Vec<D>,
    local: LocalWorld,
}

impl<D: Clone + Send + Sync> DeviceWorld<D> {
    /// `size` ranks whose tensors all live on `device`.
    pub fn shared(size: usize, device: D) -> Self {
        DeviceWorld {
            devices: alloc::vec![device; size],
            local: LocalWorld::new(size),
        }
    }

    /// One rank per device: rank `r`'s tensors live on `devices[r]`.
    ///
    /// # Example
    /// ```
    /// use burn_tensor::Device;
    /// use ruda_tensor::DeviceWorld;
    /// let w = DeviceWorld::per_rank(vec![Device::flex(), Device::flex()]);
    /// assert_eq!(w.size(), 2);
    /// ```
    pub fn per_rank(devices: Vec<D>) -> Self {
        let local = LocalWorld::new(devices.len());
        DeviceWorld { devices, local }
    }

    /// Set the deadline of every wait (see [`LocalWorld::timeout`]).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.local = self.local.timeout(timeout);
        self
    }

    /// Pin rank threads to cores or not (see [`LocalWorld::pin_threads`]).
    pub fn pin_threads(mut self, on: bool) -> Self {
        self.local = self.local.pin_threads(on);
        self
    }

    /// Number of ranks.
    pub fn size(&self) -> usize {
        self.devices.len()
    }

    /// Rank `r`'s device.
    pub fn device(&self, r: usize) -> Option<&D> {
        self.devices.get(r)
    }

    /// Run `f` on every rank, each on its own thread with its own group and
    /// device, and return every rank's outcome in rank order (see
    /// [`LocalWorld::run_each`]).
    ///
    /// # Example
    /// ```
    /// use burn_tensor::Device;
    /// use ruda_tensor::{DeviceWorld, Group};
    /// let out = DeviceWorld::shared(2, Device::flex()).run_each(|g, _| {
    ///     if g.rank() == 1 { Err("no") } else { Ok(g.rank()) }
    /// });
    /// assert!(out[0].is_ok() && out[1].is_err());
    /// ```
    pub fn run_each<R, E, F>(&self, f: F) -> Vec<Result<R, RankError<E>>>
    where
        R: Send,
        E: Send,
        F: Fn(DeviceGroup, &D) -> Result<R, E> + Sync,
    {
        let devices = &self.devices;
        self.local.run_each(|comm| {
            let device = &devices[comm.rank()];
            f(DeviceGroup::new(comm), device)
        })
    }

    /// Run `f` on every rank and return every rank's result, or the first
    /// failure (see [`LocalWorld::run`]).
    ///
    /// # Errors
    /// [`WorldError::Empty`] for a world of zero ranks; [`WorldError::Rank`]
    /// when a rank returned an error or panicked.
    pub fn run<R, E, F>(&self, f: F) -> Result<Vec<R>, WorldError<E>>
    where
        R: Send,
        E: Send,
        F: Fn(DeviceGroup, &D) -> Result<R, E> + Sync,
    {
        let devices = &self.devices;
        self.local.run(|comm| {
            let device = &devices[comm.rank()];
            f(DeviceGroup::new(comm), device)
        })
    }
}
