//! Data-parallel training of a `burn-nn` classifier with ruda, start to
//! finish: one program that runs as threads or under `mpirun`.
//!
//! An MLP (2 → 32 → 32 → 3, ReLU, f64) learns three interleaved spirals
//! with Adam. Each step's global batch (61 samples, so shards are uneven)
//! is split over the ranks; each rank runs its shard as micro-batches
//! (gradient accumulation), then one weighted-mean reduction of the
//! gradients gives every replica the full-batch gradient. Halfway, rank 0
//! saves a checkpoint; every rank drops its model and optimizer, loads the
//! checkpoint into fresh ones and carries on. Rank 0 trains the same model
//! serially on whole batches alongside, and the run ends by comparing the
//! two: the losses and the parameters must agree to f64 round-off.
//!
//! ```text
//! cargo run --release -p ruda-cli --example ddp_classifier                  # 3 threads
//! RUDA_WORLD_SIZE=4 cargo run --release -p ruda-cli --example ddp_classifier
//! cargo build --release -p ruda-cli --features mpi --example ddp_classifier
//! mpirun -n 3 target/release/examples/ddp_classifier --plot loss.svg      # 3 processes
//! ```
//!
//! Rank 0 shows a progress bar (on a terminal) and, with `--plot FILE`,
//! writes the loss curves of both runs as SVG.

use std::path::{Path, PathBuf};

use burn_core as burn;
use burn_core::module::{Module, ModuleMapper, ModuleVisitor, Param};
use burn_nn::{Linear, LinearConfig, Relu};
use burn_optim::{AdamConfig, GradientsAccumulator, GradientsParams, ModuleOptimizer};
use burn_tensor::activation::log_softmax;
use burn_tensor::{DType, Device, Tensor, TensorData};
use clap::Parser;
use ruda_tensor::ddp::{
    GradientReduction, all_reduce_gradients, broadcast_module, check_replicas, load_checkpoint,
    save_checkpoint,
};
use ruda_tensor::prelude::*;

/// Command-line options.
#[derive(Parser, Clone, Debug)]
#[command(about = "Data-parallel training of a classifier, compared with a serial run")]
pub struct Opts {
    /// Thread ranks when not started by mpirun (RUDA_WORLD_SIZE overrides).
    #[arg(long, default_value_t = 3)]
    pub ranks: usize,
    /// Optimizer steps.
    #[arg(long, default_value_t = 100)]
    pub steps: usize,
    /// Samples per step, over all ranks.
    #[arg(long, default_value_t = 61)]
    pub batch: usize,
    /// Micro-batches per rank and step (gradient accumulation).
    #[arg(long, default_value_t = 2)]
    pub micro: usize,
    /// Save after this many steps, then resume from the checkpoint.
    #[arg(long, default_value_t = 50)]
    pub resume_at: usize,
    /// Where the checkpoint goes (shared by every process; default: a new
    /// folder under the system's temporary directory).
    #[arg(long)]
    pub checkpoint: Option<PathBuf>,
    /// Write the loss curves (distributed and serial) to this SVG file.
    #[arg(long)]
    pub plot: Option<PathBuf>,
    /// Print nothing but the verdict.
    #[arg(long)]
    pub quiet: bool,
}

/// Samples in the data set.
const SAMPLES: usize = 300;
/// Classes (spiral arms).
const CLASSES: usize = 3;
const HIDDEN: usize = 32;
const LEARNING_RATE: f64 = 0.01;
/// Largest difference from the serial run accepted as f64 round-off.
pub const TOLERANCE: f64 = 1e-10;

/// The classifier.
#[derive(Module, Debug)]
pub struct Mlp {
    input: Linear,
    hidden: Linear,
    output: Linear,
    act: Relu,
}

impl Mlp {
    /// The model, its parameters drawn from `seed` (in f64).
    fn new(device: &Device, seed: u64) -> Self {
        Mlp {
            input: LinearConfig::new(2, HIDDEN).init(device),
            hidden: LinearConfig::new(HIDDEN, HIDDEN).init(device),
            output: LinearConfig::new(HIDDEN, CLASSES).init(device),
            act: Relu::new(),
        }
        .map(&mut Seeded { seed, next: 0 })
    }

    fn forward(&self, x: Tensor<2>) -> Tensor<2> {
        let h = self.act.forward(self.input.forward(x));
        let h = self.act.forward(self.hidden.forward(h));
        self.output.forward(h)
    }
}

/// Sets every parameter to f64 values drawn from a seed (scaled like
/// Kaiming's uniform initialisation).
struct Seeded {
    seed: u64,
    next: u64,
}

impl ModuleMapper for Seeded {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
        let k = self.next;
        self.next += 1;
        let seed = self.seed;
        param.map(|t| {
            let dims = t.dims();
            let fan_in = if D > 1 { dims[D - 1] } else { dims[0] } as f64;
            let bound = 1.0 / fan_in.sqrt();
            let values: Vec<f64> = (0..dims.iter().product::<usize>())
                .map(|i| (unit(ruda_comm::mix(&[seed, k, i as u64])) * 2.0 - 1.0) * bound)
                .collect();
            Tensor::<D>::from_data(TensorData::new(values, dims), (&t.device(), DType::F64))
                .set_require_grad(t.is_require_grad())
        })
    }
}

/// Adam, with Burn's defaults.
fn optimizer() -> ModuleOptimizer {
    AdamConfig::new().init()
}

/// A hash as a number in [0, 1).
fn unit(h: u64) -> f64 {
    (h >> 11) as f64 / (1u64 << 53) as f64
}

/// The data set: three spiral arms in the plane, with a little noise.
fn spirals() -> (Vec<f64>, Vec<usize>) {
    let mut x = Vec::with_capacity(2 * SAMPLES);
    let mut y = Vec::with_capacity(SAMPLES);
    for i in 0..SAMPLES {
        let class = i % CLASSES;
        let t = (i / CLASSES) as f64 / (SAMPLES / CLASSES) as f64;
        let angle = 4.0 * t + class as f64 * 2.0 * std::f64::consts::PI / CLASSES as f64;
        let noise = |j: u64| (unit(ruda_comm::mix(&[7, i as u64, j])) - 0.5) * 0.1;
        x.push(t * angle.cos() + noise(0));
        x.push(t * angle.sin() + noise(1));
        y.push(class);
    }
    (x, y)
}

/// The samples of `step`'s global batch: `batch` consecutive positions of
/// a fixed shuffle of the data set (a stride coprime to its size), wrapping
/// around.
fn batch_indices(step: usize, batch: usize) -> Vec<usize> {
    (0..batch)
        .map(|i| (step * batch + i) * 7 % SAMPLES)
        .collect()
}

/// Inputs and one-hot targets of the samples `idx`.
fn tensors(
    data: &(Vec<f64>, Vec<usize>),
    idx: &[usize],
    device: &Device,
) -> (Tensor<2>, Tensor<2>) {
    let x: Vec<f64> = idx
        .iter()
        .flat_map(|&i| [data.0[2 * i], data.0[2 * i + 1]])
        .collect();
    let t: Vec<f64> = idx
        .iter()
        .flat_map(|&i| (0..CLASSES).map(move |c| f64::from(u8::from(data.1[i] == c))))
        .collect();
    (
        Tensor::from_data(TensorData::new(x, [idx.len(), 2]), (device, DType::F64)),
        Tensor::from_data(
            TensorData::new(t, [idx.len(), CLASSES]),
            (device, DType::F64),
        ),
    )
}

/// The summed cross-entropy of `model` on samples `idx`.
fn loss_sum(
    model: &Mlp,
    data: &(Vec<f64>, Vec<usize>),
    idx: &[usize],
    device: &Device,
) -> Tensor<1> {
    let (x, t) = tensors(data, idx, device);
    (log_softmax(model.forward(x), 1) * t).sum().neg()
}

/// This rank's gradient of its mean loss over `idx`, in `micro`
/// micro-batches accumulated without communicating; and the summed loss.
fn local_gradients(
    model: &Mlp,
    data: &(Vec<f64>, Vec<usize>),
    idx: &[usize],
    micro: usize,
    device: &Device,
) -> (GradientsParams, f64) {
    let mut acc = GradientsAccumulator::<Mlp>::new();
    let mut total = 0.0;
    let per = idx.len().div_ceil(micro.max(1)).max(1);
    for part in idx.chunks(per) {
        let sum = loss_sum(model, data, part, device);
        total += sum.clone().into_scalar::<f64>();
        // Each micro-batch's share of the rank's mean (`mul_scalar`: Burn
        // 0.22.1's autodiff `div_scalar` rounds 1/s to f32 in its backward
        // pass, a 6e-8 error in every f64 gradient through it).
        let scaled = sum.mul_scalar(1.0 / idx.len() as f64);
        acc.accumulate(model, GradientsParams::from_grads(scaled.backward(), model));
    }
    (acc.grads(), total)
}

fn params(model: &Mlp) -> Vec<f64> {
    struct Read(Vec<f64>);
    impl ModuleVisitor for Read {
        fn visit_float<const D: usize>(&mut self, p: &Param<Tensor<D>>) {
            self.0.extend(
                p.val()
                    .into_data()
                    .try_to_vec::<f64>()
                    .expect("f64 parameters"),
            );
        }
    }
    let mut r = Read(Vec::new());
    model.visit(&mut r);
    r.0
}

/// The serial run: the same model and batches on one rank; each step's
/// mean loss, and the parameters at the end.
fn serial(opts: &Opts, device: &Device) -> (Vec<f64>, Vec<f64>) {
    let data = spirals();
    let mut model = Mlp::new(device, 1);
    let mut optim = optimizer();
    let mut losses = Vec::new();
    for step in 0..opts.steps {
        let idx = batch_indices(step, opts.batch);
        let (grads, total) = local_gradients(&model, &data, &idx, 1, device);
        losses.push(total / opts.batch as f64);
        model = optim.step(LEARNING_RATE, model, grads);
    }
    (losses, params(&model))
}

/// What rank 0 reports at the end.
#[derive(Clone, Debug)]
pub struct Summary {
    /// How the ranks ran.
    pub mode: LaunchMode,
    /// Ranks in the world.
    pub ranks: usize,
    /// The distributed run's mean loss per step.
    pub losses: Vec<f64>,
    /// The serial run's.
    pub serial_losses: Vec<f64>,
    /// The largest difference of a loss or a parameter between the runs.
    pub difference: f64,
    /// Accuracy of the trained model on the whole data set.
    pub accuracy: f64,
}

/// One rank's whole run; rank 0's summary (`None` on the others).
fn rank_main(
    comm: AnyCommunicator,
    mode: LaunchMode,
    opts: &Opts,
) -> Result<Option<Summary>, Box<dyn std::error::Error + Send + Sync>> {
    let world = HostCollective::new(comm);
    let (me, n) = (world.rank(), world.size());
    let device = Device::flex().autodiff();
    let data = spirals();
    // Every rank draws its own weights; the root's reach every replica.
    let mut model = broadcast_module(&world, Mlp::new(&device, 1 + me as u64 * 1000), 0)?;
    let mut optim: ModuleOptimizer = optimizer();
    let dir = checkpoint_dir(&world, opts)?;
    let bar = (me == 0 && !opts.quiet).then(|| progress(opts.steps as u64));
    let mut losses = Vec::new();
    for step in 0..opts.steps {
        if step == opts.resume_at && step > 0 {
            save_checkpoint(&world, 0, &dir, &model, &optim)?;
            // Resume into fresh replicas: other weights, a new optimizer.
            let fresh = Mlp::new(&device, 99 + me as u64);
            (model, optim) = load_checkpoint(&world, &dir, fresh, optimizer())?;
        }
        let all = batch_indices(step, opts.batch);
        let shards = ruda_tensor::layout::compute_split_shapes(all.len(), n).unwrap_or_else(|_| {
            // More ranks than samples: the first ranks get one each.
            (0..n).map(|r| usize::from(r < all.len())).collect()
        });
        let start: usize = shards[..me].iter().sum();
        let mine = &all[start..start + shards[me]];
        let (grads, total) = local_gradients(&model, &data, mine, opts.micro, &device);
        let grads = all_reduce_gradients(
            &world,
            &model,
            grads,
            GradientReduction::WeightedMean {
                samples: mine.len(),
            },
        )?;
        model = optim.step(LEARNING_RATE, model, grads);
        let total = Tensor::<1>::from_data(
            TensorData::new(vec![total], [1]),
            (&Device::flex(), DType::F64),
        )
        .all_reduce(&world)?
        .into_scalar::<f64>();
        losses.push(total / opts.batch as f64);
        if let Some(bar) = &bar {
            bar.set_message(format!("loss {:.4}", losses[step]));
            bar.inc(1);
        }
    }
    if let Some(bar) = bar {
        bar.finish();
    }
    // Every replica must hold the same parameters.
    check_replicas(&world, &model)?;
    if me == 0 {
        let _ = std::fs::remove_dir_all(&dir);
    }
    if me != 0 {
        return Ok(None);
    }
    let (serial_losses, serial_params) = serial(opts, &device);
    let mine = params(&model);
    let difference = losses
        .iter()
        .zip(&serial_losses)
        .chain(mine.iter().zip(&serial_params))
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f64::max);
    let idx: Vec<usize> = (0..SAMPLES).collect();
    let (x, _) = tensors(&data, &idx, &device);
    let predicted = model.forward(x).argmax(1).into_data();
    let predicted = predicted
        .convert::<i64>()
        .try_to_vec::<i64>()
        .expect("indices");
    let correct = predicted
        .iter()
        .zip(&data.1)
        .filter(|(p, y)| **p as usize == **y)
        .count();
    Ok(Some(Summary {
        mode,
        ranks: n,
        losses,
        serial_losses,
        difference,
        accuracy: correct as f64 / SAMPLES as f64,
    }))
}

/// The checkpoint folder: the one given, or a new one named by rank 0 and
/// shared with every rank (processes of an MPI job have different ids).
fn checkpoint_dir<G: Group>(world: &G, opts: &Opts) -> Result<PathBuf, Error> {
    if let Some(d) = &opts.checkpoint {
        return Ok(d.clone());
    }
    let nonce = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
        ^ i64::from(std::process::id());
    let all = world.exchange_words(&[nonce])?;
    Ok(std::env::temp_dir().join(format!("ruda-ddp-classifier-{:x}", all[0])))
}

fn progress(steps: u64) -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::new(steps);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len} steps  {msg}")
            .expect("a valid template"),
    );
    bar
}

/// Train as `opts` say, on every rank this process holds; rank 0's summary
/// when this process holds rank 0.
///
/// # Errors
/// A rank's error (the tensor layer's, a checkpoint's) or the launch's.
pub fn run(opts: &Opts) -> Result<Option<Summary>, String> {
    // burn-optim restores optimizer state in the default float dtype: make
    // it the model's (f64) before the first tensor, or the resumed run
    // could not load its checkpoint.
    let settings = Device::default().settings();
    if settings.float_dtype != burn_tensor::FloatDType::F64 {
        Device::default()
            .configure(burn_tensor::FloatDType::F64)
            .map_err(|e| format!("making f64 the default float dtype: {e:?}"))?;
    }
    let launch = Launch::new().threads(opts.ranks);
    let mode = launch.mode::<String>().map_err(|e| e.to_string())?;
    let out = launch
        .run(|comm| rank_main(comm, mode, opts).map_err(|e| e.to_string()))
        .map_err(|e| e.to_string())?;
    Ok(out.into_iter().flatten().next())
}

/// Write the loss curves of both runs to `path`.
///
/// # Errors
/// The drawing backend's, as text.
pub fn plot(s: &Summary, path: &Path) -> Result<(), String> {
    let curve = |v: &[f64]| v.iter().enumerate().map(|(i, &l)| (i as f64, l)).collect();
    ruda_cli::plot::lines(
        &[
            (format!("{} ranks ({})", s.ranks, s.mode), curve(&s.losses)),
            ("serial".into(), curve(&s.serial_losses)),
        ],
        "ddp_classifier: mean cross-entropy per step",
        "step",
        "loss",
        path,
    )
}

#[allow(dead_code)]
fn main() -> std::process::ExitCode {
    let opts = Opts::parse();
    let summary = match run(&opts) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("ddp_classifier: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    // Under MPI only the process of rank 0 reports.
    let Some(s) = summary else {
        return std::process::ExitCode::SUCCESS;
    };
    if !opts.quiet {
        for (i, (a, b)) in s.losses.iter().zip(&s.serial_losses).enumerate() {
            if i % 10 == 0 || i + 1 == s.losses.len() {
                println!("step {i:>3}: loss {a:.6} (serial {b:.6})");
            }
        }
    }
    if let Some(path) = &opts.plot {
        if let Err(e) = plot(&s, path) {
            eprintln!("ddp_classifier: the plot: {e}");
            return std::process::ExitCode::FAILURE;
        }
        println!("loss curves written to {}", path.display());
    }
    let ok = s.difference <= TOLERANCE;
    println!(
        "{}: {} ({}), accuracy {:.1} %, largest difference from the serial run {:.1e}",
        if ok {
            "equal to the serial run"
        } else {
            "DIFFERS from the serial run"
        },
        s.ranks,
        s.mode,
        100.0 * s.accuracy,
        s.difference
    );
    if ok {
        std::process::ExitCode::SUCCESS
    } else {
        std::process::ExitCode::FAILURE
    }
}
