//! # ruda-tensor
//!
//! ruda's tensor layer on [Burn](https://burn.dev): the collective trait
//! contract ([`collective`]) over Burn backend primitives, implemented for
//! every [`CollectiveBackend`] over any `ruda-comm` communicator by
//! [`HostCollective`], with each operation's adjoint recorded on
//! `burn_autodiff::Autodiff`.
//!
//! ```
//! use burn_autodiff::Autodiff;
//! use burn_backend::{AutodiffBackend, TensorData, ops::FloatTensorOps, read_sync};
//! use burn_flex::{Flex, FlexDevice};
//! use ruda_comm::{Communicator, LocalWorld};
//! use ruda_tensor::{HostCollective, TensorCollective};
//!
//! type Ad = Autodiff<Flex>;
//! let grads = LocalWorld::new(2).run(|comm| {
//!     let coll = HostCollective::new(comm);
//!     let x = Ad::float_from_data(TensorData::new(vec![1.0f64, 2.0], [2, 1]), &FlexDevice);
//!     let x = Ad::float_set_require_grad(x, true);
//!     let all = TensorCollective::<Ad>::all_gather_float(&coll, x.clone())?; // [4, 1]
//!     let grads = Ad::backward(Ad::float_sum(all));
//!     // every rank's shard appears once in every rank's loss: gradient = world size
//!     let g = Ad::grad(&x, &grads).unwrap();
//!     Ok::<_, ruda_tensor::TensorCollectiveError>(read_sync(Flex::float_into_data(g)).unwrap().try_to_vec::<f64>().unwrap())
//! }).unwrap();
//! assert_eq!(grads[0], vec![2.0, 2.0]);
//! ```

#![warn(missing_docs)]

extern crate alloc;

mod autodiff;
mod backend;
pub mod collective;
mod contract;
mod error;
pub mod grid;
mod host_collective;
pub mod layout;
pub mod primitives;
mod staging;
#[cfg(feature = "tensor-api")]
pub mod tensor_api;

pub use backend::{CollectiveBackend, HostStaged};
pub use burn_backend::Backend;
pub use collective::{
    BroadcastTensorCollective, IntegerTensorCollective, NeighbourTensorExchange,
    ReplicatedTensorCollective, TensorCollective, VariableTensorCollective, VariableTensorExchange,
};
pub use error::{CountProblem, ShapeProblem, TensorCollectiveError, TensorOp};
pub use grid::{Axis, ProcessGrid};
pub use host_collective::HostCollective;

/// Burn's tensor primitive aliases, as the contract names them.
pub mod tensor {
    pub use burn_backend::tensor::{FloatTensor, IntTensor};
}
