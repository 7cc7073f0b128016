//! `ruda bench swe`: the shallow-water workload against its anchor — one
//! step of the spectral solver (ruda-sphere's against torch-harmonics'
//! `ShallowWaterSolver`) and one training step of the SFNO (ruda-sfno's
//! against torch-harmonics' `SphericalFourierNeuralOperator`: forward,
//! backward through the loss over the sphere, Adam), with the same grid,
//! truncation, architecture, batch and threads, in one run.

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use burn_core as burn;

use burn::module::Module;
use burn_optim::{AdamConfig, GradientsParams, ModuleOptimizer};
use burn_tensor::{DType, Device, Tensor, TensorData};
use ruda_sfno::{SfnoConfig, SfnoError, SphereMse, pde_solver};
use ruda_sphere::shallow_water::SerialDomain;
use serde::Deserialize;
use thiserror::Error;

/// torch-harmonics' side (`--torch-harmonics PYTHON`).
const SCRIPT: &str = include_str!("../scripts/swe_bench_torch_harmonics.py");

/// What to time.
#[derive(Clone, Debug, PartialEq)]
pub struct SweBenchConfig {
    /// The solver's grid (equiangular), `lmax = ⌈nlat/3⌉` as torch-harmonics'
    /// `PdeDataset` truncates it.
    pub solver: (usize, usize),
    /// Solver steps per timing (the step's time is the timing's over this).
    pub solver_steps: usize,
    /// The SFNO's grid.
    pub sfno: (usize, usize),
    /// The SFNO's channels.
    pub embed_dim: usize,
    /// The SFNO's blocks.
    pub layers: usize,
    /// Samples per training step.
    pub batch: usize,
    /// Timed repetitions (the median is reported).
    pub iters: usize,
    /// Untimed repetitions first.
    pub warmup: usize,
}

impl Default for SweBenchConfig {
    /// The solver at 256 × 512 (lmax 86, torch-harmonics' example's
    /// size), 10 steps a timing; the demo's SFNO (32 × 64, 16 channels, 4
    /// blocks) on batches of 4; 10 timings after 2.
    fn default() -> Self {
        SweBenchConfig {
            solver: (256, 512),
            solver_steps: 10,
            sfno: (32, 64),
            embed_dim: 16,
            layers: 4,
            batch: 4,
            iters: 10,
            warmup: 2,
        }
    }
}

/// One timed workload.
#[derive(Clone, Debug, PartialEq)]
pub struct SweRow {
    /// What was timed.
    pub what: String,
    /// ruda's median, milliseconds.
    pub ruda_ms: f64,
    /// torch-harmonics' median, when timed.
    pub torch_harmonics_ms: Option<f64>,
}

/// Why the bench failed.
#[derive(Debug, Error)]
pub enum SweBenchError {
    /// ruda's side failed.
    #[error("ruda: {0}")]
    Ruda(#[from] SfnoError),
    /// The anchor could not run or its output could not be read.
    #[error("torch-harmonics: {0}")]
    Anchor(String),
}

impl From<ruda_sphere::SphereError> for SweBenchError {
    fn from(e: ruda_sphere::SphereError) -> Self {
        SweBenchError::Ruda(e.into())
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The median over `iters` timings of `f`, after `warmup` untimed ones,
/// in milliseconds.
fn time<E>(warmup: usize, iters: usize, mut f: impl FnMut() -> Result<(), E>) -> Result<f64, E> {
    for _ in 0..warmup {
        f()?;
    }
    let mut t = Vec::with_capacity(iters.max(1));
    for _ in 0..iters.max(1) {
        let start = Instant::now();
        f()?;
        t.push(start.elapsed().as_secs_f64() * 1e3);
    }
    Ok(median(t))
}

/// The SFNO's configuration: the demo's architecture on `cfg.sfno`.
pub fn sfno_config(cfg: &SweBenchConfig) -> SfnoConfig {
    SfnoConfig {
        embed_dim: cfg.embed_dim,
        num_layers: cfg.layers,
        scale_factor: 2,
        residual_prediction: true,
        ..SfnoConfig::new(cfg.sfno.0, cfg.sfno.1)
    }
}

/// Time ruda's side.
///
/// # Errors
/// The solver's or the model's errors.
pub fn run(cfg: &SweBenchConfig) -> Result<Vec<SweRow>, SweBenchError> {
    let (nlat, nlon) = cfg.solver;
    let lmax = nlat.div_ceil(3);
    // torch-harmonics' example steps 150 s at lmax 86; the same CFL number.
    let dt = 150.0 * 86.0 / lmax as f64;
    let solver = pde_solver(nlat, nlon, dt, &Device::flex())?;
    let start = solver.random(1, 0.2)?;
    let n = cfg.solver_steps.max(1);
    let solver_ms = time(cfg.warmup, cfg.iters, || {
        solver.step(start.clone(), n).map(|_| ())
    })? / n as f64;

    let model_cfg = sfno_config(cfg);
    let device = Device::flex().autodiff();
    let mut model = Some(model_cfg.init(&SerialDomain, 1, &device, DType::F32)?);
    let mse = SphereMse::for_model(model.as_ref().expect("made above"));
    let mut optim: ModuleOptimizer = AdamConfig::new().init();
    let (h, w) = cfg.sfno;
    let shape = [cfg.batch, 3, h, w];
    let len = shape.iter().product::<usize>();
    let values = |seed: usize| -> Vec<f64> {
        (0..len)
            .map(|i| (((i * 7919 + seed * 104_729) % 2003) as f64 / 1001.5) - 1.0)
            .collect()
    };
    let x = Tensor::<4>::from_data(TensorData::new(values(1), shape), (&device, DType::F32));
    let y = Tensor::<4>::from_data(TensorData::new(values(2), shape), (&device, DType::F32));
    let train_ms = time(cfg.warmup, cfg.iters, || -> Result<(), SfnoError> {
        let m = model.take().expect("a model between steps");
        let local = mse.local(m.forward(x.clone())?, y.clone())?;
        let grads = GradientsParams::from_grads(local.backward(), &m);
        model = Some(optim.step(1e-3, m, grads));
        Ok(())
    })?;
    let params: usize = model.as_ref().map_or(0, |m| m.num_params());
    Ok(vec![
        SweRow {
            what: format!("solver step, {nlat}x{nlon} lmax {lmax}, f64"),
            ruda_ms: solver_ms,
            torch_harmonics_ms: None,
        },
        SweRow {
            what: format!(
                "SFNO training step, {h}x{w}, {} channels, {} blocks, batch {}, f32 ({params} parameters)",
                cfg.embed_dim, cfg.layers, cfg.batch
            ),
            ruda_ms: train_ms,
            torch_harmonics_ms: None,
        },
    ])
}

#[derive(Deserialize)]
struct AnchorTimes {
    solver_ms: f64,
    train_ms: f64,
    params: usize,
}

/// Time torch-harmonics with `python` on the same workloads and threads
/// (as many as this machine has cores) and fill in its column.
///
/// # Errors
/// [`SweBenchError::Anchor`] when the script cannot run, fails, or its
/// model's parameter count differs from ruda's (not the same
/// architecture), or `rows` are not [`run`]'s two.
pub fn add_torch_harmonics(
    cfg: &SweBenchConfig,
    python: &Path,
    rows: &mut [SweRow],
) -> Result<(), SweBenchError> {
    let script = std::env::temp_dir().join(format!("ruda-swe-bench-{}.py", std::process::id()));
    std::fs::write(&script, SCRIPT)
        .map_err(|e| SweBenchError::Anchor(format!("writing {}: {e}", script.display())))?;
    let threads = std::thread::available_parallelism().map_or(1, usize::from);
    let out = Command::new(python)
        .arg(&script)
        .args(["--solver", &format!("{}x{}", cfg.solver.0, cfg.solver.1)])
        .args(["--solver-steps", &cfg.solver_steps.to_string()])
        .args(["--sfno", &format!("{}x{}", cfg.sfno.0, cfg.sfno.1)])
        .args(["--embed-dim", &cfg.embed_dim.to_string()])
        .args(["--layers", &cfg.layers.to_string()])
        .args(["--batch", &cfg.batch.to_string()])
        .args(["--iters", &cfg.iters.to_string()])
        .args(["--warmup", &cfg.warmup.to_string()])
        .args(["--threads", &threads.to_string()])
        .output();
    let _ = std::fs::remove_file(&script);
    let out =
        out.map_err(|e| SweBenchError::Anchor(format!("starting {}: {e}", python.display())))?;
    if !out.status.success() {
        return Err(SweBenchError::Anchor(format!(
            "{} exited with {}: {}",
            python.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    let t: AnchorTimes = serde_json::from_slice(&out.stdout)
        .map_err(|e| SweBenchError::Anchor(format!("reading its output: {e}")))?;
    let ours = {
        let device = Device::flex();
        sfno_config(cfg)
            .init(&SerialDomain, 1, &device, DType::F32)?
            .num_params()
    };
    if t.params != ours {
        return Err(SweBenchError::Anchor(format!(
            "its SFNO has {} parameters, ruda's {ours}: not the same architecture",
            t.params
        )));
    }
    let [solver, train] = rows else {
        return Err(SweBenchError::Anchor(format!(
            "ruda's side has {} rows, not the solver's and the SFNO's",
            rows.len()
        )));
    };
    solver.torch_harmonics_ms = Some(t.solver_ms);
    train.torch_harmonics_ms = Some(t.train_ms);
    Ok(())
}

/// Print the table: each workload's times and torch-harmonics' time over
/// ruda's (above 1: ruda faster).
///
/// # Errors
/// Writing to `out`.
pub fn print_table(rows: &[SweRow], out: &mut impl std::io::Write) -> std::io::Result<()> {
    writeln!(
        out,
        "{:<78} {:>10} {:>18} {:>10}",
        "workload", "ruda ms", "torch-harmonics ms", "th / ruda"
    )?;
    for r in rows {
        let (th, ratio) = match r.torch_harmonics_ms {
            Some(t) => (format!("{t:.2}"), format!("{:.2}", t / r.ruda_ms)),
            None => ("-".into(), "-".into()),
        };
        writeln!(
            out,
            "{:<78} {:>10.2} {th:>18} {ratio:>10}",
            r.what, r.ruda_ms
        )?;
    }
    Ok(())
}
