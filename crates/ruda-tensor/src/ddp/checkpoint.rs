//! [`save_checkpoint`] and [`load_checkpoint`]: a data-parallel run's
//! model and optimizer state, written by one rank and read by all.

use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use std::path::Path;

use burn_core::module::Module;
use burn_core::store::ModuleRecord;
use burn_optim::ModuleOptimizer;
use burn_tensor::Bytes;

use super::outlast::outlasting;
use super::replicas::check_replicas;
use super::running::fold_running_states;
use super::structure::check_records;
use crate::error::{Error, TensorOp};
use crate::group::Group;

/// Marks a checkpoint call's records ("rudaCKP1").
const MAGIC: i64 = 0x7275_6461_434b_5031;

/// The checkpoint's file in its directory: the model's burnpack record and
/// the optimizer's, in one file, so that they are published together (one
/// atomic rename) and can never be paired with another save's.
pub const CHECKPOINT_FILE: &str = "checkpoint.ruda";

/// The file's first bytes.
const FILE_MAGIC: &[u8; 8] = b"RUDACKP1";

/// Exchange `[MAGIC, op, phase, value]` and return every rank's `value`,
/// after checking that every rank is in the same call and phase.
pub(super) fn exchange<G: Group>(
    group: &G,
    op: TensorOp,
    phase: i64,
    value: i64,
) -> Result<Vec<i64>, Error> {
    let all = group.exchange_words(&[MAGIC, op.code(), phase, value])?;
    let fields = [
        ("record marker", MAGIC),
        ("operation", op.code()),
        ("checkpoint phase", phase),
    ];
    check_records(group, op, &all, 4, &fields)?;
    Ok(all.chunks(4).map(|w| w[3]).collect())
}

/// Run a rank's local step, a panic included, as `Err(text)`: every rank
/// must reach the exchange that follows, whatever happens here.
pub(super) fn local<T>(step: impl FnOnce() -> Result<T, String>) -> Result<T, String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(step)).unwrap_or_else(|p| {
        let text = p
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| p.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic".into());
        Err(format!("panicked: {text}"))
    })
}

/// Every rank's outcome of a local step (`Ok` or its error text), made
/// known to all: the first rank that failed, as an error on every rank.
pub(super) fn agree_outcome<G: Group>(
    group: &G,
    op: TensorOp,
    phase: i64,
    path: &Path,
    mine: Result<(), String>,
) -> Result<(), Error> {
    let me = group.rank();
    let flags = exchange(group, op, phase, i64::from(mine.is_err()))?;
    match flags.iter().position(|&f| f != 0) {
        None => Ok(()),
        Some(r) => Err(Error::Checkpoint {
            op,
            rank: me,
            offender: r,
            path: path.display().to_string(),
            message: match (&mine, r == me) {
                (Err(e), true) => e.clone(),
                _ => format!("rank {r} failed (its own error says why)"),
            },
        }),
    }
}

/// Write `module` and `optimizer` to the directory `dir` from rank `root`
/// (collective: every rank calls it, with the same root; the others write
/// nothing), as one file, [`CHECKPOINT_FILE`], written under a temporary
/// name, flushed to disk and renamed: a reader sees the previous checkpoint
/// or this one, never half of one. The call returns on every rank once the
/// file is complete, so a rank may read it right after. Replicas are equal
/// in data-parallel training, so one rank's copy is the run's. The write
/// may take longer than the collective deadline (`RUDA_TIMEOUT_SECS`): the
/// ranks exchange a heartbeat every 20 ms while it runs, so a slow disk is
/// waited for and a rank that fails meanwhile is still found in time.
/// [`load_checkpoint`] and the sharded save and load do the same.
///
/// # Errors
/// [`Error::InvalidRoot`] on every rank when the roots differ or are
/// outside the group; [`Error::Checkpoint`] on every rank when the root
/// cannot write (the root's error names the I/O failure, or the panic of
/// a serializer); [`Error::Record`] when a peer is in another call; the
/// group's errors.
///
/// # Example
/// ```
/// use burn_nn::{Linear, LinearConfig};
/// use burn_optim::SgdConfig;
/// use burn_tensor::Device;
/// use ruda_comm::LocalWorld;
/// use ruda_tensor::HostCollective;
/// use ruda_tensor::ddp::{broadcast_module, load_checkpoint, save_checkpoint};
///
/// let dir = std::env::temp_dir().join(format!("ruda-ckpt-doc-{}", std::process::id()));
/// LocalWorld::new(2).run(|comm| {
///     let world = HostCollective::new(comm);
///     let device = Device::flex().autodiff();
///     let model: Linear = LinearConfig::new(3, 2).init(&device);
///     let model = broadcast_module(&world, model, 0)?;
///     let optim = SgdConfig::new().init();
///     save_checkpoint(&world, 0, &dir, &model, &optim)?;
///     // A fresh replica (other random weights) resumes from the checkpoint.
///     let fresh: Linear = LinearConfig::new(3, 2).init(&device);
///     let (resumed, _optim) = load_checkpoint(&world, &dir, fresh, SgdConfig::new().init())?;
///     assert_eq!(
///         resumed.weight.val().into_data().try_to_vec::<f32>().unwrap(),
///         model.weight.val().into_data().try_to_vec::<f32>().unwrap()
///     );
///     Ok::<_, ruda_tensor::Error>(())
/// }).unwrap();
/// std::fs::remove_dir_all(&dir).unwrap();
/// ```
pub fn save_checkpoint<M: Module, G: Group>(
    group: &G,
    root: usize,
    dir: impl AsRef<Path>,
    module: &M,
    optimizer: &ModuleOptimizer,
) -> Result<(), Error> {
    let op = TensorOp::DdpSave;
    save(group, root, dir.as_ref(), module, optimizer).map_err(|e| e.in_named_call(op.name()))
}

fn save<M: Module, G: Group>(
    group: &G,
    root: usize,
    dir: &Path,
    module: &M,
    optimizer: &ModuleOptimizer,
) -> Result<(), Error> {
    let op = TensorOp::DdpSave;
    let me = group.rank();
    let size = group.size();
    // The running statistics the next forward pass would read, not the
    // value one update behind.
    fold_running_states(module);
    let roots = exchange(group, op, 0, root as i64)?;
    let root0 = roots[0] as usize;
    for (r, &w) in roots.iter().enumerate() {
        if w as usize != root0 || root0 >= size {
            return Err(Error::InvalidRoot {
                op,
                rank: me,
                offender: r,
                root: w as usize,
                expected: root0,
                size,
            });
        }
    }
    // The root's write may outlast the collective deadline: the group
    // keeps a heartbeat meanwhile.
    let mine = outlasting(group, op, 1, || {
        if me == root {
            local(|| write(dir, module, optimizer))
        } else {
            Ok(())
        }
    })?;
    agree_outcome(group, op, 1, dir, mine)
}

/// Write the checkpoint file: the two records, each after its length.
fn write<M: Module>(dir: &Path, module: &M, optimizer: &ModuleOptimizer) -> Result<(), String> {
    let model = module
        .clone()
        .into_record()
        .into_bytes()
        .map_err(|e| format!("serializing the model: {e}"))?;
    let optim = optimizer
        .into_bytes()
        .map_err(|e| format!("serializing the optimizer: {e}"))?;
    let (m, o) = (
        (model.len() as u64).to_le_bytes(),
        (optim.len() as u64).to_le_bytes(),
    );
    write_atomic(
        dir,
        CHECKPOINT_FILE,
        &[FILE_MAGIC, &m, &model[..], &o, &optim[..]],
    )
}

/// Write `parts` one after the other to `dir/name`: to a temporary file of
/// a name no other writer uses, flushed to disk, then renamed over
/// `name`, so a reader sees the previous file or this one.
pub(super) fn write_atomic(dir: &Path, name: &str, parts: &[&[u8]]) -> Result<(), String> {
    use std::io::Write as _;
    std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let partial = dir.join(format!(".{name}.{}.{nanos}.partial", std::process::id()));
    let done = dir.join(name);
    let written = (|| -> std::io::Result<()> {
        let mut f = std::fs::File::create(&partial)?;
        for part in parts {
            f.write_all(part)?;
        }
        f.sync_all()?;
        std::fs::rename(&partial, &done)
    })();
    written.map_err(|e| {
        let _ = std::fs::remove_file(&partial);
        format!("writing {}: {e}", done.display())
    })
}

/// The model's and the optimizer's bytes in a checkpoint file.
fn parts(file: &[u8]) -> Option<(Vec<u8>, Vec<u8>)> {
    let rest = file.strip_prefix(FILE_MAGIC)?;
    let take = |b: &[u8]| -> Option<(Vec<u8>, usize)> {
        let len = usize::try_from(u64::from_le_bytes(b.get(..8)?.try_into().ok()?)).ok()?;
        let end = len.checked_add(8)?;
        Some((b.get(8..end)?.to_vec(), end))
    };
    let (model, used) = take(rest)?;
    let (optim, used2) = take(&rest[used..])?;
    (used + used2 == rest.len()).then_some((model, optim))
}

/// Whether Burn can restore the optimizer state of `optim` (a serialized
/// record) for `module` without changing its precision: burn-optim 0.22.1
/// materializes state tensors in the float dtype of the default device, so
/// an `f64` model's state (Adam's moments, say) would come back in `f32`
/// (and fail at the next step). A record without tensors always fits.
pub(super) fn state_dtype_fits<M: Module>(module: &M, optim: &[u8]) -> Result<(), String> {
    use burn_core::module::{ModuleVisitor, Param};
    struct Dtypes(Vec<burn_tensor::DType>);
    impl ModuleVisitor for Dtypes {
        fn visit_float<const D: usize>(&mut self, p: &Param<burn_tensor::Tensor<D>>) {
            self.0.push(p.val().dtype());
        }
    }
    let record = burn_optim::OptimizerRecord::from_bytes(Bytes::from_bytes_vec(optim.to_vec()))
        .map_err(|e| e.to_string())?;
    if record.is_empty() {
        return Ok(());
    }
    let default = burn_tensor::DType::from(burn_tensor::Device::default().settings().float_dtype);
    let mut dtypes = Dtypes(Vec::new());
    module.visit(&mut dtypes);
    match dtypes.0.into_iter().find(|&d| d != default) {
        None => Ok(()),
        Some(d) => Err(format!(
            "the model's parameters are {d:?}, but burn-optim restores optimizer state in the default device's float dtype, {default:?}; make {d:?} the default before creating any tensor (`Device::default().configure(FloatDType::{d:?})`)"
        )),
    }
}

/// Read a checkpoint written by [`save_checkpoint`] into `module` and
/// `optimizer` on every rank (collective; every rank reads `dir`, which
/// must be visible to all: the same machine, or a shared file system),
/// then check that every rank read the same file and holds the same
/// parameters ([`check_replicas`]). The file is read whole into memory:
/// nothing stays tied to it, so it may be overwritten or deleted right
/// after. The module takes the checkpoint's parameter ids (which the
/// optimizer state is keyed by). `module` must have the checkpoint's structure; its
/// values are replaced, including on ranks that built it with other
/// random weights.
///
/// # Errors
/// [`Error::Checkpoint`] on every rank when a rank cannot read the files
/// (naming the first such rank: a missing, truncated or foreign file, or a
/// record that does not fit `module`, or optimizer state that
/// burn-optim 0.22.1 would restore in another dtype than the parameters':
/// it uses the default device's float dtype, so an `f64` model needs
/// `Device::default().configure(FloatDType::F64)` before its first tensor),
/// or when ranks read different files; [`Error::ModuleMismatch`] when the parameters still differ; the group's
/// errors.
pub fn load_checkpoint<M: Module, G: Group>(
    group: &G,
    dir: impl AsRef<Path>,
    module: M,
    optimizer: ModuleOptimizer,
) -> Result<(M, ModuleOptimizer), Error> {
    let op = TensorOp::DdpLoad;
    load(group, dir.as_ref(), module, optimizer).map_err(|e| e.in_named_call(op.name()))
}

fn load<M: Module, G: Group>(
    group: &G,
    dir: &Path,
    module: M,
    optimizer: ModuleOptimizer,
) -> Result<(M, ModuleOptimizer), Error> {
    let op = TensorOp::DdpLoad;
    let file = dir.join(CHECKPOINT_FILE);
    let mut hash = 0i64;
    let read = || -> Result<(M, ModuleOptimizer), String> {
        let bytes = std::fs::read(&file).map_err(|e| format!("reading {}: {e}", file.display()))?;
        hash = crate::shape_hash::bytes(&bytes) as i64;
        let (model, optim) =
            parts(&bytes).ok_or_else(|| format!("{} is not a ruda checkpoint", file.display()))?;
        state_dtype_fits(&module, &optim)
            .map_err(|e| format!("the optimizer state in {}: {e}", file.display()))?;
        let record = ModuleRecord::from_bytes(Bytes::from_bytes_vec(model))
            .map_err(|e| format!("the model record in {}: {e}", file.display()))?;
        let m = module
            .try_load_record(record)
            .map_err(|e| format!("loading the model from {}: {e}", file.display()))?;
        let o = optimizer
            .from_bytes(Bytes::from_bytes_vec(optim))
            .map_err(|e| format!("the optimizer state in {}: {e}", file.display()))?;
        Ok((m, o))
    };
    let outcome = outlasting(group, op, 0, || local(read))?;
    finish_load(group, op, dir, outcome, hash)
}

/// The end of a load, once every rank has read (`outcome`, and `hash`, a
/// hash of the model file it read): the outcome made known to all, the
/// ranks' files compared, the loaded replicas checked.
///
/// # Errors
/// [`Error::Checkpoint`] on every rank naming the first rank that could
/// not read, or that read another model file than rank 0;
/// [`Error::ModuleMismatch`] when the loaded parameters differ; the
/// group's errors.
pub(super) fn finish_load<M: Module, G: Group>(
    group: &G,
    op: TensorOp,
    dir: &Path,
    outcome: Result<(M, ModuleOptimizer), String>,
    hash: i64,
) -> Result<(M, ModuleOptimizer), Error> {
    let (mine, loaded) = match outcome {
        Ok(x) => (Ok(()), Some(x)),
        Err(e) => (Err(e), None),
    };
    agree_outcome(group, op, 0, dir, mine)?;
    let hashes = exchange(group, op, 1, hash)?;
    if let Some(r) = hashes.iter().position(|&h| h != hashes[0]) {
        return Err(Error::Checkpoint {
            op,
            rank: group.rank(),
            offender: r,
            path: dir.display().to_string(),
            message: format!("rank {r} read another model file than rank 0"),
        });
    }
    let (module, optimizer) = loaded.expect("every rank read the checkpoint");
    check_replicas(group, &module)?;
    Ok((module, optimizer))
}
