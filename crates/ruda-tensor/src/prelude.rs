//! One import for what code on a rank needs: `use ruda_tensor::prelude::*;`
//! brings the groups (host-staged and device-resident), the process grid,
//! the tensor methods, the error type, data-parallel training and, from
//! `ruda-comm`, the in-process world, the communicator trait and the
//! reduction operators (and the MPI world with feature `mpi`).
//!
//! ```
//! use burn_tensor::{Device, Tensor};
//! use ruda_tensor::prelude::*;
//!
//! let sums = LocalWorld::new(2).run(|comm| {
//!     let world = HostCollective::new(comm);
//!     let x = Tensor::<1>::ones([3], &Device::flex()).all_reduce(&world)?;
//!     Ok::<_, Error>((world.rank(), x.into_data().try_to_vec::<f32>().unwrap()))
//! }).unwrap();
//! assert_eq!(sums[1], (1, vec![2.0; 3]));
//! ```

pub use ruda_comm::{
    AnyCommunicator, CommError, Communicator, Launch, LaunchError, LaunchMode, LocalWorld, ReduceOp,
};

pub use crate::{
    DeviceGroup, DeviceWorld, Error, Group, HostCollective, ProcessGrid, TransposeAxes,
    try_backward,
};

#[cfg(feature = "tensor-api")]
pub use crate::{IntTensorExt, TensorExt, recv};

#[cfg(feature = "train")]
pub use crate::ddp::{
    Buckets, BufferSync, GradientReduction, SyncBatchNorm, SyncBatchNormConfig,
    all_reduce_gradients, all_reduce_gradients_with, broadcast_module, check_replicas,
    load_checkpoint, save_checkpoint, sync_buffers,
};

/// The data-parallel module, for [`ddp::step`](crate::ddp::step) (a name
/// too plain to import alone).
#[cfg(feature = "train")]
pub use crate::ddp;

#[cfg(feature = "mpi")]
pub use ruda_comm::{MpiCommunicator, MpiWorld};
