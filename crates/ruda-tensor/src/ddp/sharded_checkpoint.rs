//! [`save_sharded_checkpoint`] and [`load_sharded_checkpoint`]: a run
//! whose optimizer state is sharded ([`super::Sharded`]) saved as one file
//! per rank, and loaded on any number of ranks.

use alloc::collections::BTreeMap;
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use std::path::Path;

use burn_core::module::{Module, ModuleVisitor, Param};
use burn_core::store::ModuleRecord;
use burn_optim::ModuleOptimizer;
use burn_tensor::{Bytes, Tensor};

use super::checkpoint::{
    agree_outcome, exchange, finish_load, local, state_dtype_fits, write_atomic,
};
use super::outlast::outlasting;
use super::running::fold_running_states;
use super::sharded::owners;
use super::structure::Entry;
use crate::error::{Error, TensorOp};
use crate::group::Group;

/// The model's file of a sharded checkpoint (written by rank 0, last).
pub const SHARDED_MODEL_FILE: &str = "model.ruda";

/// The first bytes of the model's file and of each optimizer shard's.
const MODEL_MAGIC: &[u8; 8] = b"RUDASHM1";
const SHARD_MAGIC: &[u8; 8] = b"RUDASHO1";

/// The file of rank `rank`'s optimizer shard in save `id`.
fn shard_file(id: u64, rank: usize) -> String {
    format!("optimizer-{id}-{rank}.ruda")
}

/// Remove the optimizer shards in `dir` of saves other than `id` (best
/// effort: a file that cannot be removed stays, harmless).
fn remove_other_shards(dir: &Path, id: u64) {
    let keep = format!("optimizer-{id}-");
    if let Ok(files) = std::fs::read_dir(dir) {
        for f in files.flatten() {
            let name = f.file_name();
            let name = name.to_string_lossy();
            if name.starts_with("optimizer-") && name.ends_with(".ruda") && !name.starts_with(&keep)
            {
                let _ = std::fs::remove_file(f.path());
            }
        }
    }
}

/// The little-endian `u64` words after `magic` at the start of `file`,
/// and the bytes after them.
fn header<const N: usize>(file: &[u8], magic: &[u8; 8]) -> Option<([u64; N], Vec<u8>)> {
    let mut rest = file.strip_prefix(magic)?;
    let mut words = [0u64; N];
    for w in &mut words {
        *w = u64::from_le_bytes(rest.get(..8)?.try_into().ok()?);
        rest = &rest[8..];
    }
    Some((words, rest.to_vec()))
}

/// Save a sharded run to the directory `dir` (collective): every rank
/// writes the optimizer state of the parameters it owns under
/// [`super::Sharded`] (keyed by their positions in the module),
/// `optimizer-<save>-<rank>.ruda`, then rank 0 writes the model,
/// [`SHARDED_MODEL_FILE`], which names the save and its number of shards,
/// and removes older saves' shards. Each file is written under a temporary
/// name and renamed, and the model file last, so a save cut short leaves
/// the previous one whole. (A reader in another job that read the previous
/// model file just before this save completes may find its shards removed
/// and fail with a typed error: load again. The save's id is rank 0's
/// clock in nanoseconds.) No rank gathers another's state: a
/// rank holds its own state's serialized copies (and rank 0 the model's)
/// while it writes.
///
/// # Errors
/// [`Error::Checkpoint`] on every rank when a rank cannot write (naming
/// it); [`Error::Record`] when a peer is in another call; the group's
/// errors.
///
/// # Example
/// See [`load_sharded_checkpoint`].
pub fn save_sharded_checkpoint<M: Module, G: Group>(
    group: &G,
    dir: impl AsRef<Path>,
    module: &M,
    optimizer: &ModuleOptimizer,
) -> Result<(), Error> {
    let op = TensorOp::DdpSaveSharded;
    save(group, dir.as_ref(), module, optimizer).map_err(|e| e.in_named_call(op.name()))
}

fn save<M: Module, G: Group>(
    group: &G,
    dir: &Path,
    module: &M,
    optimizer: &ModuleOptimizer,
) -> Result<(), Error> {
    let op = TensorOp::DdpSaveSharded;
    let me = group.rank();
    let ranks = group.size() as u64;
    fold_running_states(module);
    // The save's id: rank 0's clock, in nanoseconds.
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64);
    let id = exchange(group, op, 0, nanos)?[0] as u64;
    // This rank's parameters (by id: a tied one at its first position,
    // the one its gradient and state go with) and their positions.
    let mut structure = Structure::default();
    module.visit(&mut structure);
    let owners = owners(&structure.0, group.size());
    let mut first: BTreeMap<u64, usize> = BTreeMap::new();
    for (i, e) in structure.0.iter().enumerate() {
        first.entry(e.id.val()).or_insert(i);
    }
    let positions: BTreeMap<u64, u64> = first
        .into_iter()
        .filter(|&(_, i)| owners[i] == me)
        .map(|(id, i)| (id, i as u64))
        .collect();
    // Every rank's write, then the root's, may outlast the collective
    // deadline: the group keeps a heartbeat meanwhile.
    let mine = outlasting(group, op, 1, || {
        local(|| {
            let state = optimizer
                .into_bytes()
                .map_err(|e| format!("serializing the optimizer: {e}"))?;
            // Keyed by each parameter's position in the module, not by this
            // rank's ids (replicas' ids differ, and the loading ones take the
            // model file's); only the parameters this rank owns (state left
            // from plain steps, say, is another owner's to save).
            let state = rekey(state, |id| positions.get(&id).copied())?;
            let head = [id, me as u64, ranks].map(u64::to_le_bytes).concat();
            write_atomic(dir, &shard_file(id, me), &[SHARD_MAGIC, &head, &state[..]])
        })
    })?;
    agree_outcome(group, op, 1, dir, mine)?;
    let mine = outlasting(group, op, 2, || {
        if me == 0 {
            local(|| {
                let model = module
                    .clone()
                    .into_record()
                    .into_bytes()
                    .map_err(|e| format!("serializing the model: {e}"))?;
                let head = [id, ranks].map(u64::to_le_bytes).concat();
                write_atomic(dir, SHARDED_MODEL_FILE, &[MODEL_MAGIC, &head, &model[..]])
            })
        } else {
            Ok(())
        }
    })?;
    agree_outcome(group, op, 2, dir, mine)?;
    if me == 0 {
        // The model file names this save: older shards are garbage now.
        remove_other_shards(dir, id);
    }
    Ok(())
}

/// A serialized optimizer record with every parameter key (tensor names'
/// and scalars' `<id>.` prefix, metadata keys, tensors' parameter ids)
/// mapped by `map`; entries whose key `map` sends to `None` are dropped,
/// and keys that name no parameter are kept.
fn rekey(state: Bytes, map: impl Fn(u64) -> Option<u64>) -> Result<Bytes, String> {
    let reader = burn_pack::Reader::from_bytes(state).map_err(|e| e.to_string())?;
    let key = |k: &str| -> Option<String> {
        match k.split_once('.') {
            Some((id, rest)) => match id.parse::<u64>() {
                Ok(id) => map(id).map(|to| format!("{to}.{rest}")),
                Err(_) => Some(k.to_string()),
            },
            None => match k.parse::<u64>() {
                Ok(id) => map(id).map(|to| to.to_string()),
                Err(_) => Some(k.to_string()),
            },
        }
    };
    let scalars: Vec<(String, burn_pack::Scalar)> = reader
        .scalars()
        .iter()
        .filter_map(|(k, v)| key(k).map(|k| (k, *v)))
        .collect();
    let paths: Vec<(String, String)> = reader
        .metadata()
        .iter()
        .filter_map(|(k, v)| key(k).map(|k| (k, v.clone())))
        .collect();
    let mut tensors = Vec::new();
    for mut t in reader.into_tensors().map_err(|e| e.to_string())? {
        let (Some(name), Some(id)) = (key(&t.name), t.param_id.map(&map)) else {
            continue;
        };
        t.name = name;
        t.param_id = id;
        tensors.push(t);
    }
    let mut writer = burn_pack::Writer::new(tensors);
    for (k, v) in &scalars {
        writer = writer.with_scalar(k, *v);
    }
    for (k, v) in &paths {
        writer = writer.with_metadata(k, v);
    }
    writer.into_bytes().map_err(|e| e.to_string())
}

/// Every float parameter's id, size and dtype, in the module's order.
#[derive(Default)]
struct Structure(Vec<Entry>);

impl ModuleVisitor for Structure {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        self.0.push(Entry::new::<D>(param.id, &param.val(), None));
    }
}

/// Load a checkpoint written by [`save_sharded_checkpoint`] on any number
/// of ranks (collective; `dir` visible to every rank): every rank reads the
/// model into `module`, then from every shard file the optimizer state of
/// the parameters it owns under [`super::Sharded`] with this group's size,
/// into `optimizer` — a run saved on 4 ranks resumes on 2, or on 1 (which
/// then owns every parameter). The shard files are read one at a time, so
/// a rank holds at most one shard besides its own state. Then the ranks
/// check that they read the same model ([`super::check_replicas`]).
///
/// # Errors
/// [`Error::Checkpoint`] on every rank when a rank cannot read the files
/// (naming the first such rank: a missing or foreign file, a shard of
/// another save, a record that does not fit `module`, or optimizer state
/// burn-optim 0.22.1 would restore in another dtype, as for
/// [`super::load_checkpoint`]); [`Error::ModuleMismatch`] when the loaded
/// parameters differ; the group's errors.
///
/// # Example
/// ```
/// use burn_nn::{Linear, LinearConfig};
/// use burn_optim::{AdamConfig, GradientsParams};
/// use burn_tensor::{Device, Tensor};
/// use ruda_comm::LocalWorld;
/// use ruda_tensor::HostCollective;
/// use ruda_tensor::ddp::{
///     GradientReduction, Sharded, ZeroStage, broadcast_module, load_sharded_checkpoint,
///     save_sharded_checkpoint,
/// };
///
/// let dir = std::env::temp_dir().join(format!("ruda-sharded-doc-{}", std::process::id()));
/// // Two ranks train one step with sharded Adam state and save ...
/// LocalWorld::new(2).run(|comm| {
///     let world = HostCollective::new(comm);
///     let device = Device::flex().autodiff();
///     let model: Linear = LinearConfig::new(3, 2).init(&device);
///     let model = broadcast_module(&world, model, 0)?;
///     let mut optim = AdamConfig::new().init();
///     let loss = model.forward(Tensor::<2>::ones([2, 3], &device)).mean();
///     let grads = GradientsParams::from_grads(loss.backward(), &model);
///     let sharded = Sharded::new(ZeroStage::One);
///     let model = sharded.step(&world, &mut optim, 0.1, model, grads, GradientReduction::Mean)?;
///     save_sharded_checkpoint(&world, &dir, &model, &optim)
/// }).unwrap();
/// // ... and one rank resumes with the whole state (weight and bias).
/// LocalWorld::new(1).run(|comm| {
///     let world = HostCollective::new(comm);
///     let fresh: Linear = LinearConfig::new(3, 2).init(&Device::flex().autodiff());
///     let (_model, optim) = load_sharded_checkpoint(&world, &dir, fresh, AdamConfig::new().init())?;
///     assert_eq!(optim.to_record().len(), 4); // two moments each
///     Ok::<_, ruda_tensor::Error>(())
/// }).unwrap();
/// std::fs::remove_dir_all(&dir).unwrap();
/// ```
pub fn load_sharded_checkpoint<M: Module, G: Group>(
    group: &G,
    dir: impl AsRef<Path>,
    module: M,
    optimizer: ModuleOptimizer,
) -> Result<(M, ModuleOptimizer), Error> {
    let op = TensorOp::DdpLoadSharded;
    load(group, dir.as_ref(), module, optimizer).map_err(|e| e.in_named_call(op.name()))
}

fn load<M: Module, G: Group>(
    group: &G,
    dir: &Path,
    module: M,
    optimizer: ModuleOptimizer,
) -> Result<(M, ModuleOptimizer), Error> {
    let op = TensorOp::DdpLoadSharded;
    let me = group.rank();
    let n = group.size();
    let mut hash = 0i64;
    let read = || -> Result<(M, ModuleOptimizer), String> {
        let file = dir.join(SHARDED_MODEL_FILE);
        let bytes = std::fs::read(&file).map_err(|e| format!("reading {}: {e}", file.display()))?;
        hash = crate::shape_hash::bytes(&bytes) as i64;
        let ([id, saved], model) = header::<2>(&bytes, MODEL_MAGIC)
            .ok_or_else(|| format!("{} is not a sharded ruda checkpoint", file.display()))?;
        drop(bytes);
        let record = ModuleRecord::from_bytes(Bytes::from_bytes_vec(model))
            .map_err(|e| format!("the model record in {}: {e}", file.display()))?;
        let module = module
            .try_load_record(record)
            .map_err(|e| format!("loading the model from {}: {e}", file.display()))?;
        // Position → this module's id, for the positions this rank owns.
        let mut structure = Structure::default();
        module.visit(&mut structure);
        let owners_now = owners(&structure.0, n);
        let owners_then = owners(&structure.0, saved as usize);
        let mine: BTreeMap<u64, u64> = structure
            .0
            .iter()
            .zip(&owners_now)
            .enumerate()
            .filter(|(_, (_, o))| **o == me)
            .map(|(i, (e, _))| (i as u64, e.id.val()))
            .collect();
        let mut tensors = Vec::new();
        let mut scalars = BTreeMap::new();
        let mut paths = BTreeMap::new();
        for k in 0..saved {
            let file = dir.join(shard_file(id, k as usize));
            let bytes =
                std::fs::read(&file).map_err(|e| format!("reading {}: {e}", file.display()))?;
            let ([sid, rank, ranks], state) = header::<3>(&bytes, SHARD_MAGIC)
                .ok_or_else(|| format!("{} is not a ruda optimizer shard", file.display()))?;
            if (sid, rank, ranks) != (id, k, saved) {
                return Err(format!(
                    "{} is shard {rank} of {ranks} of save {sid}, where {SHARDED_MODEL_FILE} is of save {id} with {saved} shards (a save cut short?)",
                    file.display()
                ));
            }
            drop(bytes);
            // The positions shard k's rank owned when saving and this rank
            // owns now.
            let take = |p: u64| {
                let owned_then = owners_then.get(p as usize) == Some(&(k as usize));
                mine.get(&p).copied().filter(|_| owned_then)
            };
            let state = rekey(Bytes::from_bytes_vec(state), take)
                .map_err(|e| format!("the optimizer state in {}: {e}", file.display()))?;
            let reader = burn_pack::Reader::from_bytes(state)
                .map_err(|e| format!("the optimizer state in {}: {e}", file.display()))?;
            scalars.extend(reader.scalars().iter().map(|(k, v)| (k.clone(), *v)));
            paths.extend(
                reader
                    .metadata()
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone())),
            );
            tensors.extend(
                reader
                    .into_tensors()
                    .map_err(|e| format!("the optimizer state in {}: {e}", file.display()))?,
            );
        }
        let mut writer = burn_pack::Writer::new(tensors);
        for (key, value) in &scalars {
            writer = writer.with_scalar(key, *value);
        }
        for (key, value) in &paths {
            writer = writer.with_metadata(key, value);
        }
        let state = writer
            .into_bytes()
            .map_err(|e| format!("assembling the optimizer state: {e}"))?;
        state_dtype_fits(&module, &state).map_err(|e| format!("the optimizer state: {e}"))?;
        let optimizer = optimizer
            .from_bytes(state)
            .map_err(|e| format!("the optimizer state: {e}"))?;
        Ok((module, optimizer))
    };
    let outcome = outlasting(group, op, 0, || local(read))?;
    finish_load(group, op, dir, outcome, hash)
}
