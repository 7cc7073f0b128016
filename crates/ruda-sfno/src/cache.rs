//! Samples kept on disk between runs: [`SampleCache`].

use std::io::Write as _;
use std::path::{Path, PathBuf};

use crate::SfnoError;

/// A sample: the input and the target, each `[3, nlat, nlon]` flattened.
type Pair = (Vec<f64>, Vec<f64>);

/// The first bytes of a cached sample.
const MAGIC: &[u8; 8] = b"RUDASWE1";

/// The file in each cache folder that holds the settings it is for.
const SETTINGS_FILE: &str = "settings.txt";

/// Temporary files written by this process so far (their names' nonce).
static WRITES: core::sync::atomic::AtomicU64 = core::sync::atomic::AtomicU64::new(0);

/// A folder of samples, each a file `seed-<seed>.bin` (the input and the
/// target, little-endian f64, after a header of the magic bytes and the
/// value count), under a subfolder named by a hash of everything that
/// determines a sample (grid, truncation, time steps, data mix, initial
/// states' family and amplitude, normalisation, and a version of the data
/// code): data made with other settings never share files, and the
/// folder's `settings.txt`, checked on every write, catches a hash
/// collision. A file is written to a temporary name unique to the
/// process, thread and write, flushed to disk and renamed into place, so
/// processes that make the same sample at once, or a run stopped
/// mid-write, never leave a partial file under the final name.
///
/// # Example
/// ```
/// use burn_tensor::Device;
/// use ruda_sfno::ShallowWaterData;
/// let root = std::env::temp_dir().join(format!("ruda-cache-type-doc-{}", std::process::id()));
/// let data = ShallowWaterData::new(16, 32, 3600.0, 900.0, &Device::flex())?.with_cache(&root);
/// let cache = data.cache().unwrap();
/// assert_eq!(cache.root(), root.as_path());
/// assert!(cache.dir().starts_with(&root));
/// assert_eq!(cache.path(3), cache.dir().join("seed-3.bin"));
/// # Ok::<(), ruda_sfno::SfnoError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SampleCache {
    root: PathBuf,
    dir: PathBuf,
    settings: String,
}

fn cache_error(path: &Path, reason: impl Into<String>) -> SfnoError {
    SfnoError::Cache {
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}

/// FNV-1a, 64 bits: a stable name for a set of settings.
fn fnv1a(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

impl SampleCache {
    /// The cache for samples described by `settings` (any text that
    /// changes whenever a sample would) under `root`.
    pub(crate) fn new(root: &Path, settings: &str) -> Self {
        SampleCache {
            root: root.to_path_buf(),
            dir: root.join(format!("samples-{:016x}", fnv1a(settings))),
            settings: settings.to_owned(),
        }
    }

    /// The folder given to [`ShallowWaterData::with_cache`](crate::ShallowWaterData::with_cache).
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The folder holding this cache's files.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The file of sample `seed`.
    pub fn path(&self, seed: u64) -> PathBuf {
        self.dir.join(format!("seed-{seed}.bin"))
    }

    /// Sample `seed` of `len` values per field set, if cached.
    ///
    /// # Errors
    /// [`SfnoError::Cache`] when the file exists but cannot be read or is
    /// not a sample of `len` + `len` values.
    pub(crate) fn read(&self, seed: u64, len: usize) -> Result<Option<Pair>, SfnoError> {
        let path = self.path(seed);
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(cache_error(&path, e.to_string())),
        };
        let values = len
            .checked_mul(2)
            .ok_or_else(|| cache_error(&path, "sample too large"))?;
        let body = values
            .checked_mul(8)
            .and_then(|b| b.checked_add(16))
            .ok_or_else(|| cache_error(&path, "sample too large"))?;
        if bytes.len() < 16 || &bytes[..8] != MAGIC {
            return Err(cache_error(&path, "not a cached sample"));
        }
        let count = u64::from_le_bytes(bytes[8..16].try_into().expect("8 bytes"));
        if count != values as u64 || bytes.len() != body {
            return Err(cache_error(
                &path,
                format!(
                    "holds {count} values in {} bytes; expected {values} values in {body} bytes",
                    bytes.len()
                ),
            ));
        }
        let mut v: Vec<f64> = bytes[16..]
            .chunks_exact(8)
            .map(|c| f64::from_le_bytes(c.try_into().expect("8 bytes")))
            .collect();
        let target = v.split_off(len);
        Ok(Some((v, target)))
    }

    /// Make the folder, with its settings file, or check that an existing
    /// one holds samples of these settings.
    fn check_settings(&self) -> Result<(), SfnoError> {
        let file = self.dir.join(SETTINGS_FILE);
        match std::fs::read_to_string(&file) {
            Ok(found) if found == self.settings => Ok(()),
            Ok(found) => Err(cache_error(
                &file,
                format!(
                    "holds samples of other settings ({found}); these are {}",
                    self.settings
                ),
            )),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                std::fs::create_dir_all(&self.dir)
                    .map_err(|e| cache_error(&self.dir, e.to_string()))?;
                // Written whole under a unique name, then renamed: a
                // concurrent writer renames the same text.
                let nonce = WRITES.fetch_add(1, core::sync::atomic::Ordering::Relaxed);
                let tmp = self.dir.join(format!(
                    "{SETTINGS_FILE}.{}.{:?}.{nonce}.tmp",
                    std::process::id(),
                    std::thread::current().id()
                ));
                std::fs::write(&tmp, &self.settings)
                    .and_then(|()| std::fs::rename(&tmp, &file))
                    .map_err(|e| {
                        let _ = std::fs::remove_file(&tmp);
                        cache_error(&file, e.to_string())
                    })
            }
            Err(e) => Err(cache_error(&file, e.to_string())),
        }
    }

    /// Keep sample `seed`.
    ///
    /// # Errors
    /// [`SfnoError::Cache`] when the folder or the file cannot be written.
    pub(crate) fn write(&self, seed: u64, input: &[f64], target: &[f64]) -> Result<(), SfnoError> {
        let path = self.path(seed);
        self.check_settings()?;
        // Unique per process, thread and write (and a fresh file: never
        // another writer's): writers of the same sample never share one.
        let nonce = WRITES.fetch_add(1, core::sync::atomic::Ordering::Relaxed);
        let tmp = self.dir.join(format!(
            "seed-{seed}.bin.{}.{:?}.{nonce}.tmp",
            std::process::id(),
            std::thread::current().id()
        ));
        let count = input.len() + target.len();
        let mut bytes = Vec::with_capacity(16 + 8 * count);
        bytes.extend_from_slice(MAGIC);
        bytes.extend_from_slice(&(count as u64).to_le_bytes());
        for x in input.iter().chain(target) {
            bytes.extend_from_slice(&x.to_le_bytes());
        }
        let written = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)
            .and_then(|mut f| {
                f.write_all(&bytes)?;
                f.sync_all()
            })
            .and_then(|()| std::fs::rename(&tmp, &path));
        written.map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            cache_error(&path, e.to_string())
        })
    }
}
