//! # ruda-tensor
//!
//! ruda's tensor layer on [Burn](https://burn.dev): collectives and the
//! differentiable primitives of a polar × azimuth process grid, each with
//! its exact adjoint on `burn_autodiff::Autodiff`, over any [`Group`] of
//! ranks ([`HostCollective`] over a `ruda-comm` communicator: threads of
//! one process, or MPI processes, staged through host memory; or
//! [`DeviceGroup`] from a [`DeviceWorld`]: threads whose tensors never
//! leave their Burn devices).
//!
//! Three levels, one implementation:
//! - methods of Burn's user-facing `Tensor` ([`TensorExt`],
//!   [`IntTensorExt`]; feature `tensor-api`, on by default): `x.all_reduce(&group)`,
//!   `x.all_gather(&group, dim)`, `x.transpose_over(&group, TransposeAxes { split_in, split_out })`,
//!   `x.halo_exchange(&group, dim, radius)`… with no type annotations;
//! - functions on Burn primitives of any [`DistBackend`] ([`primitives`]),
//!   plus the seed's grid-bound names, and the seed's contract
//!   ([`collective`]: `TensorCollective`, …) implemented by every group;
//! - the operations themselves ([`ops`]), each with its forward, its
//!   agreement and its adjoint side by side; [`ops::LinearOp`] is how to
//!   add one of your own.
//!
//! `use ruda_tensor::prelude::*;` brings what code on a rank needs
//! ([`prelude`]); [`ddp`] trains a Burn module data-parallel.
//!
//! Every call first reaches agreement in one small exchange (operation,
//! position in the group's sequence of calls, shapes, dtype, counts,
//! whether inputs are tracked), so a misuse anywhere is the same [`Error`]
//! on every rank before any data moves.
//!
//! ```
//! use burn_tensor::{Device, Tensor};
//! use ruda_comm::LocalWorld;
//! use ruda_tensor::{HostCollective, TensorExt};
//!
//! let grads = LocalWorld::new(2).run(|comm| {
//!     let world = HostCollective::new(comm);
//!     let x = Tensor::<2>::ones([2, 3], &Device::flex().autodiff()).require_grad();
//!     let all = x.clone().all_gather(&world, 0)?; // [4, 3]
//!     let grads = all.sum().backward();
//!     // every rank's shard appears once in every rank's loss: gradient = 2
//!     Ok::<_, ruda_tensor::Error>(x.grad(&grads).unwrap().into_data().try_to_vec::<f32>().unwrap())
//! }).unwrap();
//! assert_eq!(grads[0], vec![2.0; 6]);
//! ```

#![warn(missing_docs)]

extern crate alloc;

mod agreement;
mod backend;
pub mod collective;
#[cfg(feature = "train")]
pub mod ddp;
pub mod device;
mod error;
#[cfg(feature = "tensor-api")]
mod exchange;
pub mod grid;
mod group;
mod host;
mod hybrid_grid;
mod ints;
pub mod layout;
mod linear_op;
#[cfg(feature = "tensor-api")]
mod methods;
pub mod ops;
#[cfg(feature = "tensor-api")]
mod p2p;
#[cfg(feature = "tensor-api")]
pub mod pipeline;
pub mod prelude;
pub mod primitives;
#[cfg(feature = "tensor-api")]
mod reduce_with;
pub mod replica;
#[cfg(feature = "tensor-api")]
mod reshape;
#[cfg(feature = "tensor-api")]
mod route;
mod shape_hash;
#[cfg(feature = "tensor-api")]
pub mod tensor_api;

pub use backend::{DistBackend, PlainBackend, try_backward};
pub use burn_backend::Backend;
pub use collective::{
    BroadcastTensorCollective, IntegerTensorCollective, NeighbourTensorExchange,
    ReplicatedTensorCollective, TensorCollective, VariableTensorCollective, VariableTensorExchange,
};
pub use device::{DeviceGroup, DeviceWorld};
pub use error::{
    CallId, CountProblem, Error, LookupProblem, ModuleProblem, OverlapProblem, PairProblem,
    PostedCounts, PrimitiveError, ShapeProblem, TensorCollectiveError, TensorOp,
};
#[cfg(feature = "tensor-api")]
pub use exchange::{Exchange, Incoming};
pub use grid::{Axis, ProcessGrid};
pub use group::Group;
#[doc(hidden)]
pub use group::plumbing;
pub use host::HostCollective;
pub use hybrid_grid::HybridGrid;
#[cfg(feature = "tensor-api")]
pub use methods::{IntTensorExt, TensorExt};
pub use ops::TransposeAxes;
#[cfg(feature = "tensor-api")]
pub use p2p::recv;
#[cfg(feature = "tensor-api")]
pub use reshape::reshape;

/// Burn's tensor primitive aliases, as the contract names them.
pub mod tensor {
    pub use burn_backend::tensor::{FloatTensor, IntTensor};
}
