//! Samples kept on disk between runs: [`SampleCache`].

use std::io::Write as _;
use std::path::{Path, PathBuf};

use crate::SfnoError;

/// A sample: the input and the target, each `[3, nlat, nlon]` flattened.
type Pair = (Vec<f64>, Vec<f64>);

/// The first bytes of a cached sample.
const MAGIC: &[u8; 8] = b"RUDASWE1";

/// A folder of samples, each a file `seed-<seed>.bin` (the input and the
/// target, little-endian f64, after a header of the magic bytes and the
/// value count), under a subfolder named by a hash of everything that
/// determines a sample (grid, truncation, time steps, data mix,
/// normalisation): data made with other settings never share files. A
/// file is written to a unique temporary name and renamed into place, so
/// processes that make the same sample at once, or a run stopped
/// mid-write, never leave a partial file under the final name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SampleCache {
    root: PathBuf,
    dir: PathBuf,
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

    /// Keep sample `seed`.
    ///
    /// # Errors
    /// [`SfnoError::Cache`] when the folder or the file cannot be written.
    pub(crate) fn write(&self, seed: u64, input: &[f64], target: &[f64]) -> Result<(), SfnoError> {
        let path = self.path(seed);
        std::fs::create_dir_all(&self.dir).map_err(|e| cache_error(&self.dir, e.to_string()))?;
        // Unique per process and thread: writers of the same sample never
        // share a temporary file.
        let tmp = self.dir.join(format!(
            "seed-{seed}.bin.{}.{:?}.tmp",
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
        let written = std::fs::File::create(&tmp)
            .and_then(|mut f| f.write_all(&bytes))
            .and_then(|()| std::fs::rename(&tmp, &path));
        written.map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            cache_error(&path, e.to_string())
        })
    }
}
