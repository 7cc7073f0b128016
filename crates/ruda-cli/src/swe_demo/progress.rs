//! The demo's checkpoint record: which training the checkpoint belongs
//! to, how many steps it holds, and the comparison so far, beside the
//! serial and distributed models' checkpoints
//! (`ruda_tensor::ddp::save_checkpoint`).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use super::SweDemoConfig;
use crate::demo::DemoError;

/// The record's file name in the checkpoint folder.
pub const PROGRESS_FILE: &str = "progress.txt";

/// The first line of a record.
const MAGIC: &str = "ruda demo checkpoint v1";

/// What a checkpoint holds besides the models.
#[derive(Clone, Debug, PartialEq)]
pub struct Progress {
    /// Steps trained.
    pub done: usize,
    /// The largest relative difference between the runs so far.
    pub worst: f64,
    /// Each step's (distributed, serial) loss.
    pub losses: Vec<(f64, f64)>,
}

/// The folder of the checkpoint after `done` steps: `dir/step-<done>`,
/// holding `serial/` and `distributed/`. Each checkpoint has its own
/// folder, and the record names the newest complete one: a run stopped
/// while writing a checkpoint resumes from the previous one, never from a
/// mix of two.
pub fn generation(dir: &Path, done: usize) -> PathBuf {
    dir.join(format!("step-{done}"))
}

/// The settings a resumed run must share with the one that wrote the
/// checkpoint (the grids of ranks may differ: parameters are replicated).
fn training(cfg: &SweDemoConfig) -> String {
    format!(
        "nlat={} nlon={} embed_dim={} layers={} batch={} lr={:?} hours={:?}",
        cfg.nlat, cfg.nlon, cfg.embed_dim, cfg.layers, cfg.batch, cfg.lr, cfg.hours
    )
}

fn error(path: &Path, reason: impl Into<String>) -> DemoError {
    DemoError::Checkpoint {
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}

impl Progress {
    /// Write the record for `cfg` into `dir` (atomically: a temporary file,
    /// flushed to disk, renamed over the old one, so a run stopped
    /// mid-write leaves the previous record), after the checkpoint it names
    /// ([`generation`]`(dir, done)`) has been written; then remove the
    /// older checkpoints' folders (best effort: one left behind is only
    /// disk space).
    ///
    /// # Errors
    /// [`DemoError::Checkpoint`] when the file cannot be written.
    ///
    /// # Example
    /// ```
    /// use ruda_cli::swe_demo::SweDemoConfig;
    /// use ruda_cli::swe_demo::progress::Progress;
    /// let dir = std::env::temp_dir().join(format!("ruda-progress-doc-{}", std::process::id()));
    /// std::fs::create_dir_all(&dir).unwrap();
    /// let cfg = SweDemoConfig::default();
    /// let p = Progress { done: 1, worst: 0.0, losses: vec![(2.0, 2.0)] };
    /// p.write(&dir, &cfg)?;
    /// assert_eq!(Progress::read(&dir, &cfg)?, p);
    /// std::fs::remove_dir_all(&dir).unwrap();
    /// # Ok::<(), ruda_cli::demo::DemoError>(())
    /// ```
    pub fn write(&self, dir: &Path, cfg: &SweDemoConfig) -> Result<(), DemoError> {
        let mut text = format!(
            "{MAGIC}\n{}\ndone {}\nworst {:?}\n",
            training(cfg),
            self.done,
            self.worst
        );
        for (i, (d, s)) in self.losses.iter().enumerate() {
            writeln!(text, "loss {i} {d:?} {s:?}").expect("writing to a String");
        }
        let path = dir.join(PROGRESS_FILE);
        let tmp: PathBuf = dir.join(format!("{PROGRESS_FILE}.{}.tmp", std::process::id()));
        let written = std::fs::File::create(&tmp)
            .and_then(|mut f| {
                use std::io::Write as _;
                f.write_all(text.as_bytes())?;
                f.sync_all()
            })
            .and_then(|()| std::fs::rename(&tmp, &path));
        if let Err(e) = written {
            let _ = std::fs::remove_file(&tmp);
            return Err(error(&path, e.to_string()));
        }
        // Older checkpoints are no longer named by any record.
        let current = format!("step-{}", self.done);
        if let Ok(entries) = std::fs::read_dir(dir) {
            for entry in entries.flatten() {
                let name = entry.file_name().to_string_lossy().into_owned();
                if name.starts_with("step-") && name != current {
                    let _ = std::fs::remove_dir_all(entry.path());
                }
            }
        }
        Ok(())
    }

    /// Read the record in `dir`, written for the same training as `cfg`.
    ///
    /// # Errors
    /// [`DemoError::Checkpoint`] when the file is missing or malformed,
    /// belongs to another training (naming both settings), or holds no
    /// fewer steps than `cfg.steps`.
    pub fn read(dir: &Path, cfg: &SweDemoConfig) -> Result<Progress, DemoError> {
        let path = dir.join(PROGRESS_FILE);
        let text = std::fs::read_to_string(&path).map_err(|e| {
            error(
                &path,
                format!("{e} (was the first run started with --checkpoint-every?)"),
            )
        })?;
        let bad = |what: &str| error(&path, format!("malformed record: {what}"));
        let mut lines = text.lines();
        if lines.next() != Some(MAGIC) {
            return Err(bad("not a ruda demo checkpoint"));
        }
        let want = training(cfg);
        match lines.next() {
            Some(got) if got == want => {}
            Some(got) => {
                return Err(error(
                    &path,
                    format!("written by another training ({got}); this run is {want}"),
                ));
            }
            None => return Err(bad("no settings")),
        }
        let value = |line: Option<&str>, key: &str| -> Result<String, DemoError> {
            line.and_then(|l| l.strip_prefix(key))
                .and_then(|l| l.strip_prefix(' '))
                .map(str::to_owned)
                .ok_or_else(|| bad(key))
        };
        let done: usize = value(lines.next(), "done")?
            .parse()
            .map_err(|_| bad("done"))?;
        let worst: f64 = value(lines.next(), "worst")?
            .parse()
            .map_err(|_| bad("worst"))?;
        let mut losses = Vec::new();
        for (i, line) in lines.enumerate() {
            let fields: Vec<&str> = line.split(' ').collect();
            match fields.as_slice() {
                ["loss", k, d, s] if k.parse() == Ok(i) => {
                    let d: f64 = d.parse().map_err(|_| bad("loss"))?;
                    let s: f64 = s.parse().map_err(|_| bad("loss"))?;
                    losses.push((d, s));
                }
                _ => return Err(bad("loss")),
            }
        }
        if losses.len() != done {
            return Err(bad("a loss per step"));
        }
        if done >= cfg.steps {
            return Err(error(
                &path,
                format!(
                    "the checkpoint already holds {done} steps; ask for more with --steps (now {})",
                    cfg.steps
                ),
            ));
        }
        Ok(Progress {
            done,
            worst,
            losses,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("ruda-progress-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn a_record_reads_back_exactly_and_refuses_another_training() {
        let d = dir("roundtrip");
        let cfg = SweDemoConfig::default();
        let p = Progress {
            done: 3,
            worst: 1.234_567_890_123_456_7e-13,
            losses: vec![(0.1, 0.1 + 1e-17), (1.0 / 3.0, 0.3), (2e-300, 5.0)],
        };
        p.write(&d, &cfg).unwrap();
        assert_eq!(Progress::read(&d, &cfg).unwrap(), p);
        // Another grid of ranks resumes the same training.
        let regrid = SweDemoConfig {
            polar: 1,
            azimuth: 4,
            replicas: 2,
            ..cfg.clone()
        };
        assert_eq!(Progress::read(&d, &regrid).unwrap(), p);
        // Another model does not.
        let other = SweDemoConfig {
            embed_dim: 8,
            ..cfg.clone()
        };
        let e = Progress::read(&d, &other).unwrap_err().to_string();
        assert!(
            e.contains("embed_dim=16") && e.contains("embed_dim=8"),
            "{e}"
        );
        // Nothing left to train.
        let short = SweDemoConfig { steps: 3, ..cfg };
        let e = Progress::read(&d, &short).unwrap_err().to_string();
        assert!(e.contains("already holds 3 steps"), "{e}");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn missing_and_malformed_records_are_errors() {
        let d = dir("bad");
        let cfg = SweDemoConfig::default();
        let e = Progress::read(&d, &cfg).unwrap_err().to_string();
        assert!(
            e.contains(PROGRESS_FILE) && e.contains("--checkpoint-every"),
            "{e}"
        );
        let good = format!("{MAGIC}\n{}\ndone 2\nworst 0.0\n", training(&cfg));
        for text in [
            "something else\n".to_string(),
            format!("{good}loss 0 1.0 1.0\n"),
            format!("{good}loss 0 1.0 1.0\nloss 2 1.0 1.0\n"),
            format!("{good}loss 0 1.0 x\nloss 1 1.0 1.0\n"),
        ] {
            std::fs::write(d.join(PROGRESS_FILE), &text).unwrap();
            let e = Progress::read(&d, &cfg).unwrap_err().to_string();
            assert!(
                e.contains("malformed") || e.contains("not a ruda"),
                "{text}: {e}"
            );
        }
        std::fs::remove_dir_all(&d).unwrap();
    }
}
