//! # ruda-sphere
//!
//! The real spherical harmonic transform on Burn tensors, serial and
//! distributed over a ruda [`ProcessGrid`](ruda_tensor::ProcessGrid), both
//! directions differentiable, in torch-harmonics' conventions
//! (`RealSHT` / `InverseRealSHT` with `norm="ortho"`, `csphase=True`):
//!
//! - grids: [`LatitudeGrid::Equiangular`] (Clenshaw–Curtis, poles included)
//!   and [`LatitudeGrid::LegendreGauss`], `nlon` equally spaced longitudes
//!   from 0;
//! - truncation ([`ShtSpec`]): `lmax = mmax = (nlat + 1)/2` on equiangular
//!   grids, `nlat` on Legendre–Gauss grids, at most `nlon/2 + 1`;
//! - coefficients `[.., lmax, mmax, 2]`: real and imaginary parts on a
//!   trailing axis (Burn has no complex dtype), `c_lm = ∫ f conj(Y_l^m)`;
//!   the inverse is `f = Σ_l c_l0 Y_l^0 + 2 Re Σ_{m>0} c_lm Y_l^m`.
//!
//! The vector transforms ([`RealVectorSht`], [`InverseRealVectorSht`])
//! take tangential fields `[.., 2, nlat, nlon]` (colatitude and longitude
//! components) to spheroidal and toroidal coefficients `[.., 2, lmax,
//! mmax, 2]`, in torch-harmonics' conventions (`RealVectorSHT`).
//!
//! On Flex (the CPU path) the longitude transform is a real FFT
//! (`realfft`); serially it runs inside one fused operation per direction
//! with the Legendre step (and its adjoint recorded for autodiff),
//! distributed as a Burn operation of its own. The Legendre step generates
//! `P̄_l^m` (or the vector transforms' derivative functions) by the
//! three-term recurrence inside the kernel, without tables, serially over
//! mirrored latitude pairs and on a rank of a distributed transform over
//! its own band of latitudes. The distributed transforms ([`DistributedRealSht`],
//! [`DistributedInverseRealSht`], [`DistributedRealVectorSht`],
//! [`DistributedInverseRealVectorSht`]) use nothing but ruda-tensor's
//! differentiable primitives (azimuth transposes, `reduce_from_scatter_to`
//! and `gather_from_copy_to` over the polar ranks), so their gradients are
//! exact too, for any split of the field that [`SphereLayout`] describes.
//!
//! **Memory kept between calls.** On Flex a transform object keeps the
//! per-order buffers of its calls (the longitude spectra and the Legendre
//! step's results) for the next one: those of the largest batch it has
//! seen, about `(nlat + lmax) · mmax · 2 · batch` f64 values (at most
//! `2 · max(nlat, lmax) · mmax · 2 · batch`: a block may be kept at a
//! larger role's size), twice that for a vector transform (25 MB for 4
//! fields at 721×1440, 50 MB as vector fields; a call on a larger batch
//! drops the outgrown ones). Allocated afresh, the allocator handed them
//! back to the kernel after each call
//! and the next one faulted them in again: keeping them took a vector
//! forward + inverse pair at 721×1440 from 86.6 to 71.9 ms (median). Calls
//! on one object from several threads at once each take their own buffers,
//! and the object keeps all of them afterwards (until a larger batch drops
//! them). They are freed when the transform is dropped and no autodiff
//! graph still holds a call of it.
//!
//! A tensor on any other backend (wgpu, CUDA, ROCm through CubeCL) stays
//! on its device: there the longitude step is a DFT matmul and the
//! Legendre step batched matmuls against tables of the Legendre functions
//! (what torch-harmonics does on GPUs), plain Burn tensor operations that
//! autodiff differentiates. The matrices come from the same FFT and
//! recurrence as the host kernels, so both paths compute the same maps up
//! to rounding; over a device-resident world
//! ([`DeviceWorld`](ruda_tensor::DeviceWorld)) the distributed transforms
//! never leave the device.
//!
//! ```
//! use burn_tensor::{DType, Device, Tensor, TensorData};
//! use ruda_sphere::{InverseRealSht, LatitudeGrid, RealSht, ShtSpec};
//!
//! let spec = ShtSpec::new(17, 32, LatitudeGrid::Equiangular)?;
//! let (sht, isht) = (RealSht::new(spec), InverseRealSht::new(spec));
//! let device = Device::flex().autodiff();
//! // A band-limited field: synthesised from coefficients.
//! let c0 = Tensor::<4>::ones([2, spec.lmax(), spec.mmax(), 2], (&device, DType::F64));
//! let field: Tensor<3> = isht.forward(c0)?;
//! let x = field.detach().require_grad();
//! let c: Tensor<4> = sht.forward(x.clone())?;
//! let loss = c.powi_scalar(2).sum();
//! let grads = loss.backward();
//! assert_eq!(x.grad(&grads).unwrap().dims(), [2, 17, 32]);
//! # Ok::<(), ruda_sphere::SphereError>(())
//! ```

#![warn(missing_docs)]

extern crate alloc;

mod block_pool;
mod distributed;
mod distributed_vector;
mod error;
mod fft_plans;
pub mod fourier;
mod fused;
mod fused_vector;
mod huge_pages;
mod kernel_level;
mod layout;
mod legendre;
mod legendre_fly;
mod legendre_kernel;
mod legendre_stage;
mod linear_op;
mod on_device;
pub mod profile;
mod quadrature;
mod route;
pub mod shallow_water;
mod shapes;
mod sht;
mod spec;
mod vector_sht;
mod vector_step;

/// For ruda's own tests: the tensor-operation path on Flex.
#[doc(hidden)]
pub mod testing {
    /// Run `f` with this thread's transforms on Flex taking the tensor
    /// operations that every other backend takes (DFT and table matmuls),
    /// so that the two paths can be compared on one machine; the thread's
    /// previous choice is restored afterwards. Other threads (a world's
    /// other ranks) are not affected: each calls it for itself. Tables made
    /// under it stay with the transform until it is dropped, and a rayon
    /// worker that calls it may run stolen tasks of its caller's on this
    /// path: for tests, not for production code.
    ///
    /// # Example
    /// ```
    /// use burn_tensor::{DType, Device, Tensor};
    /// use ruda_sphere::{LatitudeGrid, RealSht, ShtSpec};
    ///
    /// let sht = RealSht::new(ShtSpec::new(9, 16, LatitudeGrid::Equiangular)?);
    /// let x = Tensor::<3>::ones([2, 9, 16], (&Device::flex(), DType::F64));
    /// let host: Tensor<4> = sht.forward(x.clone())?;
    /// let ops: Tensor<4> = ruda_sphere::testing::with_tensor_ops(|| sht.forward(x))?;
    /// let diff: f64 = (host - ops).abs().max().into_scalar();
    /// assert!(diff < 1e-13);
    /// # Ok::<(), ruda_sphere::SphereError>(())
    /// ```
    pub fn with_tensor_ops<R>(f: impl FnOnce() -> R) -> R {
        crate::route::with_tensor_ops(f)
    }
}

pub use distributed::{DistributedInverseRealSht, DistributedRealSht};
pub use distributed_vector::{DistributedInverseRealVectorSht, DistributedRealVectorSht};
pub use error::SphereError;
pub use kernel_level::{KernelLevel, kernel_level};
pub use layout::{LatitudeSplit, SphereLayout};
pub use legendre::legendre_table;
pub use quadrature::{LatitudeGrid, Latitudes};
pub use sht::{InverseRealSht, RealSht};
pub use spec::ShtSpec;
pub use vector_sht::{InverseRealVectorSht, RealVectorSht};
