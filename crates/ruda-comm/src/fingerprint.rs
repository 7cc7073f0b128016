//! What identifies one collective call, so that ranks can check they agree.

use core::any::TypeId;
use core::fmt;
use core::hash::{Hash, Hasher};

use crate::{DType, ReduceOp};

/// The operation a call performs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OpKind {
    /// Building a world or a communicator.
    Init,
    /// [`crate::Communicator::split`].
    Split,
    /// [`crate::Communicator::barrier`].
    Barrier,
    /// [`crate::Communicator::all_reduce`].
    AllReduce,
    /// [`crate::Communicator::all_gather`].
    AllGather,
    /// [`crate::Communicator::all_gather_v`].
    AllGatherV,
    /// [`crate::Communicator::reduce_scatter`].
    ReduceScatter,
    /// [`crate::Communicator::reduce_scatter_v`].
    ReduceScatterV,
    /// [`crate::Communicator::broadcast`].
    Broadcast,
    /// [`crate::Communicator::all_to_all`].
    AllToAll,
    /// [`crate::Communicator::all_to_all_v`].
    AllToAllV,
    /// [`crate::Communicator::send`].
    Send,
    /// [`crate::Communicator::recv`].
    Recv,
    /// [`crate::Communicator::send_recv`].
    SendRecv,
    /// [`crate::LocalCommunicator::all_gather_objects`]: Rust values shared
    /// between the threads of the local transport.
    AllGatherObjects,
}

impl OpKind {
    /// Every operation, in code order (see [`OpKind::code`]).
    pub const ALL: [OpKind; 15] = [
        OpKind::Init,
        OpKind::Split,
        OpKind::Barrier,
        OpKind::AllReduce,
        OpKind::AllGather,
        OpKind::AllGatherV,
        OpKind::ReduceScatter,
        OpKind::ReduceScatterV,
        OpKind::Broadcast,
        OpKind::AllToAll,
        OpKind::AllToAllV,
        OpKind::Send,
        OpKind::Recv,
        OpKind::SendRecv,
        OpKind::AllGatherObjects,
    ];

    /// A small stable number for the operation, for transports that send
    /// fingerprints over the wire.
    pub fn code(self) -> u8 {
        Self::ALL.iter().position(|&o| o == self).expect("listed") as u8
    }

    /// The operation of [`OpKind::code`] `c`.
    pub fn from_code(c: u8) -> Option<OpKind> {
        Self::ALL.get(c as usize).copied()
    }

    /// The snake-case name of the operation, as in the `Communicator` method.
    pub const fn name(self) -> &'static str {
        match self {
            OpKind::Init => "init",
            OpKind::Split => "split",
            OpKind::Barrier => "barrier",
            OpKind::AllReduce => "all_reduce",
            OpKind::AllGather => "all_gather",
            OpKind::AllGatherV => "all_gather_v",
            OpKind::ReduceScatter => "reduce_scatter",
            OpKind::ReduceScatterV => "reduce_scatter_v",
            OpKind::Broadcast => "broadcast",
            OpKind::AllToAll => "all_to_all",
            OpKind::AllToAllV => "all_to_all_v",
            OpKind::Send => "send",
            OpKind::Recv => "recv",
            OpKind::SendRecv => "send_recv",
            OpKind::AllGatherObjects => "all_gather_objects",
        }
    }
}

impl fmt::Display for OpKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The Rust type of the values a call shares between threads
/// ([`crate::LocalCommunicator::all_gather_objects`]): compared by
/// [`TypeId`], shown by name.
///
/// # Example
/// ```
/// use ruda_comm::ObjectType;
/// assert_eq!(ObjectType::of::<String>(), ObjectType::of::<String>());
/// assert_ne!(ObjectType::of::<String>(), ObjectType::of::<u32>());
/// assert_eq!(ObjectType::of::<u32>().to_string(), "u32");
/// ```
#[derive(Clone, Copy, Debug)]
pub struct ObjectType {
    id: TypeId,
    name: &'static str,
}

impl ObjectType {
    /// The identity of `T`.
    pub fn of<T: 'static>() -> Self {
        ObjectType {
            id: TypeId::of::<T>(),
            name: core::any::type_name::<T>(),
        }
    }

    /// The type's name (for messages; two types may share a name).
    pub const fn name(&self) -> &'static str {
        self.name
    }
}

impl PartialEq for ObjectType {
    /// Equal when the types are (by [`TypeId`]; names are diagnostic).
    fn eq(&self, other: &Self) -> bool {
        self.id == other.id
    }
}

impl Eq for ObjectType {}

impl Hash for ObjectType {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.id.hash(state);
    }
}

impl fmt::Display for ObjectType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name)
    }
}

/// The identity of one collective call on one rank: sequence number within
/// its communicator, operation, element type (or, for values shared between
/// threads, their Rust type), element count and the operation's parameters. All ranks of a call must present equal
/// fingerprints, except that `count` may legitimately differ for the `_v`
/// operations (where it is 0 and the counts are checked one by one).
///
/// # Example
/// ```
/// use ruda_comm::{DType, Fingerprint, OpKind, ReduceOp};
/// let fp = Fingerprint::new(3, OpKind::AllReduce, Some(DType::F32), 1024)
///     .with_reduce(ReduceOp::Sum);
/// assert_eq!(fp.to_string(), "#3 all_reduce<f32>(count=1024, op=sum)");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Fingerprint {
    /// Position of the call among this communicator's collective calls (0-based).
    pub seq: u64,
    /// The operation.
    pub op: OpKind,
    /// The element type, `None` for barrier and split.
    pub dtype: Option<DType>,
    /// Elements that must agree across ranks (see the type's docs).
    pub count: usize,
    /// The reduction, for reducing operations.
    pub reduce: Option<ReduceOp>,
    /// The root, for rooted operations.
    pub root: Option<usize>,
    /// The Rust type of the values shared, for
    /// [`crate::LocalCommunicator::all_gather_objects`].
    pub object: Option<ObjectType>,
}

impl Fingerprint {
    /// A fingerprint with no reduction and no root.
    pub const fn new(seq: u64, op: OpKind, dtype: Option<DType>, count: usize) -> Self {
        Fingerprint {
            seq,
            op,
            dtype,
            count,
            reduce: None,
            root: None,
            object: None,
        }
    }

    /// The same fingerprint for values of type `T`.
    pub fn with_object<T: 'static>(mut self) -> Self {
        self.object = Some(ObjectType::of::<T>());
        self
    }

    /// The same fingerprint with a reduction operator.
    pub const fn with_reduce(mut self, op: ReduceOp) -> Self {
        self.reduce = Some(op);
        self
    }

    /// The same fingerprint with a root rank.
    pub const fn with_root(mut self, root: usize) -> Self {
        self.root = Some(root);
        self
    }

    /// Whether two ranks' fingerprints describe the same kind of call
    /// (everything but the count equal).
    pub fn same_call(&self, other: &Fingerprint) -> bool {
        self.seq == other.seq
            && self.op == other.op
            && self.dtype == other.dtype
            && self.reduce == other.reduce
            && self.root == other.root
            && self.object == other.object
    }
}

impl fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{} {}", self.seq, self.op)?;
        if let Some(d) = self.dtype {
            write!(f, "<{d}>")?;
        }
        if let Some(t) = self.object {
            write!(f, "<{t}>")?;
        }
        write!(f, "(count={}", self.count)?;
        if let Some(r) = self.reduce {
            write!(f, ", op={r}")?;
        }
        if let Some(r) = self.root {
            write!(f, ", root={r}")?;
        }
        f.write_str(")")
    }
}
