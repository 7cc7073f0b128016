//! [`save_checkpoint`] and [`load_checkpoint`]: a data-parallel run's
//! model and optimizer state, written by one rank and read by all.

use alloc::format;
use alloc::string::{String, ToString};
use std::path::{Path, PathBuf};

use burn_core::module::Module;
use burn_optim::ModuleOptimizer;

use super::replicas::check_replicas;
use crate::error::{Error, TensorOp};
use crate::group::Group;

/// Marks a checkpoint call's first record ("rudaCKP1").
const MAGIC: i64 = 0x7275_6461_434b_5031;

/// The model's file in a checkpoint directory (Burn's burnpack format).
pub const MODEL_FILE: &str = "model.bpk";
/// The optimizer state's file in a checkpoint directory.
pub const OPTIMIZER_FILE: &str = "optimizer.bpk";

/// Every rank's outcome of a local step (`Ok` or its error text), made
/// known to all: the first rank that failed, as an error on every rank.
fn agree_outcome<G: Group>(
    group: &G,
    op: TensorOp,
    path: &Path,
    mine: Result<(), String>,
) -> Result<(), Error> {
    let flags = group.exchange_words(&[MAGIC, i64::from(mine.is_err())])?;
    let me = group.rank();
    for (r, w) in flags.chunks(2).enumerate() {
        if w[0] != MAGIC {
            return Err(Error::Record {
                op,
                rank: me,
                offender: r,
                what: "record marker",
                code: w[0],
            });
        }
    }
    match flags.chunks(2).position(|w| w[1] != 0) {
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
/// nothing), as [`MODEL_FILE`] and [`OPTIMIZER_FILE`]. The call returns on
/// every rank once the files are complete, so a rank may read them right
/// after. Replicas are equal in data-parallel training, so one rank's copy
/// is the run's.
///
/// # Errors
/// [`Error::InvalidRoot`] on every rank when the roots differ or are
/// outside the group; [`Error::Checkpoint`] on every rank when the root
/// cannot write (the root's error names the I/O failure); the group's
/// errors.
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
    let roots = group.exchange_words(&[MAGIC, root as i64])?;
    let root0 = roots[1] as usize;
    for (r, w) in roots.chunks(2).enumerate() {
        if w[0] != MAGIC {
            return Err(Error::Record {
                op,
                rank: me,
                offender: r,
                what: "record marker",
                code: w[0],
            });
        }
        if w[1] as usize != root0 || root0 >= size {
            return Err(Error::InvalidRoot {
                op,
                rank: me,
                offender: r,
                root: w[1] as usize,
                expected: root0,
                size,
            });
        }
    }
    let mine = if me == root {
        write(dir, module, optimizer)
    } else {
        Ok(())
    };
    agree_outcome(group, op, dir, mine)
}

/// Write both files, each under a temporary name first, so that a reader
/// never sees half a checkpoint under the final names.
fn write<M: Module>(dir: &Path, module: &M, optimizer: &ModuleOptimizer) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    let files: [(PathBuf, PathBuf); 2] = [
        (dir.join("model.bpk.partial"), dir.join(MODEL_FILE)),
        (dir.join("optimizer.bpk.partial"), dir.join(OPTIMIZER_FILE)),
    ];
    module
        .clone()
        .save_file(&files[0].0)
        .map_err(|e| format!("writing {}: {e}", files[0].0.display()))?;
    optimizer
        .save(&files[1].0)
        .map_err(|e| format!("writing {}: {e}", files[1].0.display()))?;
    for (partial, done) in &files {
        std::fs::rename(partial, done)
            .map_err(|e| format!("renaming {} to {}: {e}", partial.display(), done.display()))?;
    }
    Ok(())
}

/// Read a checkpoint written by [`save_checkpoint`] into `module` and
/// `optimizer` on every rank (collective; every rank reads `dir`, which
/// must be visible to all: the same machine, or a shared file system),
/// then check that every replica holds the same parameters
/// ([`check_replicas`]). The optimizer state is read from the same file on
/// every rank; it is not compared across ranks (its serialized form is not
/// canonical: the same state may be written in another order). `module` must have the checkpoint's structure; its
/// values are replaced, including on ranks that built it with other
/// random weights.
///
/// # Errors
/// [`Error::Checkpoint`] on every rank when a rank cannot read the files
/// (naming the first such rank); [`Error::ModuleMismatch`] when the ranks
/// read different checkpoints; the group's errors.
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
    let read = || -> Result<(M, ModuleOptimizer), String> {
        let model_file = dir.join(MODEL_FILE);
        let m = module
            .try_load_file(&model_file)
            .map_err(|e| format!("reading {}: {e}", model_file.display()))?;
        let optim_file = dir.join(OPTIMIZER_FILE);
        let o = optimizer
            .load(&optim_file)
            .map_err(|e| format!("reading {}: {e}", optim_file.display()))?;
        Ok((m, o))
    };
    let outcome = read();
    let (mine, loaded) = match outcome {
        Ok(x) => (Ok(()), Some(x)),
        Err(e) => (Err(e), None),
    };
    agree_outcome(group, op, dir, mine)?;
    let (module, optimizer) = loaded.expect("every rank read the checkpoint");
    check_replicas(group, &module)?;
    Ok((module, optimizer))
}
