//! The distributed SFNO equals the serial one: forward, loss, gradients
//! (summed over the domain) and Adam steps, in f64, on process grids of 1
//! to 8 ranks with uneven splits of latitudes, longitudes, degrees and
//! orders.

use burn_core as burn;

use burn::module::{Module, ModuleVisitor, Param};
use burn_optim::{AdamConfig, GradientsParams, ModuleOptimizer, SgdConfig};
use burn_tensor::{DType, Device, Tensor};
use ruda_comm::LocalWorld;
use ruda_sfno::{SfnoConfig, SfnoError, SphereMse, patch};
use ruda_sphere::shallow_water::SerialDomain;
use ruda_tensor::ddp::{GradientReduction, hybrid_step, step};
use ruda_tensor::{HybridGrid, ProcessGrid};

/// Every float parameter's values, in visiting order.
#[derive(Default)]
struct Collect(Vec<Vec<f64>>);

impl ModuleVisitor for Collect {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        let v = param.val().cast(DType::F64).into_data();
        self.0.push(v.try_to_vec::<f64>().unwrap());
    }
}

fn params<M: Module>(m: &M) -> Vec<Vec<f64>> {
    let mut c = Collect::default();
    m.visit(&mut c);
    c.0
}

fn values<const D: usize>(t: Tensor<D>) -> Vec<f64> {
    t.cast(DType::F64).into_data().try_to_vec::<f64>().unwrap()
}

fn rel(a: &[f64], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len());
    let scale = b.iter().fold(0.0f64, |m, v| m.max(v.abs())).max(1e-300);
    a.iter()
        .zip(b)
        .fold(0.0f64, |m, (x, y)| m.max((x - y).abs()))
        / scale
}

/// Deterministic values in [-1, 1).
fn random(len: usize, seed: u64) -> Vec<f64> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
        })
        .collect()
}

const STEPS: usize = 2;

fn config() -> SfnoConfig {
    SfnoConfig {
        embed_dim: 4,
        num_layers: 3,
        scale_factor: 2,
        residual_prediction: true,
        ..SfnoConfig::new(17, 30)
    }
}

/// What a run yields: outputs, losses and the parameters after each step.
struct Trace {
    outputs: Vec<Vec<f64>>,
    losses: Vec<f64>,
    params: Vec<Vec<Vec<f64>>>,
}

/// The optimizer of a run: plain SGD (its steps are the gradients, scaled)
/// or Adam (what training uses; nearly blind to a gradient's scale).
fn optimizer(adam: bool) -> ModuleOptimizer {
    if adam {
        AdamConfig::new().init()
    } else {
        SgdConfig::new().init()
    }
}

#[test]
fn distributed_sfno_equals_serial_with_sgd() {
    distributed_sfno_equals_serial(false);
}

#[test]
fn distributed_sfno_equals_serial_with_adam() {
    distributed_sfno_equals_serial(true);
}

fn distributed_sfno_equals_serial(adam: bool) {
    let cfg = config();
    let (outer, inner) = cfg.specs().unwrap();
    // 17 × 30 outer (lmax 8), 9 × 15 internal Legendre–Gauss: uneven on
    // every axis of the grids below.
    assert_eq!((inner.nlat(), inner.nlon(), inner.lmax()), (9, 15, 7));
    let (nlat, nlon, b) = (outer.nlat(), outer.nlon(), 2);
    let shape = [b, 3, nlat, nlon];
    let x = random(b * 3 * nlat * nlon, 1);
    let y = random(b * 3 * nlat * nlon, 2);
    let device = Device::flex().autodiff();
    let lr = 1e-2;

    let serial = {
        let mut model = cfg.init(&SerialDomain, 42, &device, DType::F64).unwrap();
        let mse = SphereMse::for_model(&model);
        let mut optim = optimizer(adam);
        let t = |v: &[f64]| patch(v, shape, 0..nlat, 0..nlon, &device, DType::F64);
        let mut trace = Trace {
            outputs: vec![],
            losses: vec![],
            params: vec![],
        };
        for _ in 0..STEPS {
            let out = model.forward(t(&x)).unwrap();
            trace.outputs.push(values(out.clone()));
            let loss = mse.local(out, t(&y)).unwrap();
            trace.losses.push(mse.total(loss.clone()).unwrap());
            let grads = GradientsParams::from_grads(loss.backward(), &model);
            model = optim.step(lr, model, grads);
            trace.params.push(params(&model));
        }
        trace
    };
    // The steps moved the model (the comparison below is not vacuous).
    assert!(rel(&serial.outputs[1], &serial.outputs[0]) > 1e-4);

    for (p, a) in [
        (1, 1),
        (2, 1),
        (1, 2),
        (3, 1),
        (2, 2),
        (1, 5),
        (3, 2),
        (4, 2),
    ] {
        let traces = LocalWorld::new(p * a)
            .run(|comm| {
                let grid = ProcessGrid::new(comm, p, a)?;
                let mut model = cfg.init(&grid, 42, &device, DType::F64)?;
                let t0 = model.transforms();
                let (rows, cols) = (t0.lat_range(), t0.lon_range());
                let mse = SphereMse::for_model(&model);
                let mut optim = optimizer(adam);
                let t =
                    |v: &[f64]| patch(v, shape, rows.clone(), cols.clone(), &device, DType::F64);
                let mut trace = Trace {
                    outputs: vec![],
                    losses: vec![],
                    params: vec![],
                };
                for _ in 0..STEPS {
                    let out = model.forward(t(&x))?;
                    trace.outputs.push(values(out.clone()));
                    let loss = mse.local(out, t(&y))?;
                    trace.losses.push(mse.total(loss.clone())?);
                    let grads = GradientsParams::from_grads(loss.backward(), &model);
                    model = step(
                        grid.world(),
                        &mut optim,
                        lr,
                        model,
                        grads,
                        GradientReduction::Sum,
                    )?;
                    trace.params.push(params(&model));
                }
                Ok::<_, SfnoError>((rows, cols, trace))
            })
            .unwrap();
        for (rank, (rows, cols, d)) in traces.into_iter().enumerate() {
            for s in 0..STEPS {
                let want = values(patch(
                    &serial.outputs[s],
                    shape,
                    rows.clone(),
                    cols.clone(),
                    &Device::flex(),
                    DType::F64,
                ));
                let e = rel(&d.outputs[s], &want);
                assert!(e < 1e-12, "{p}x{a} rank {rank} step {s}: output {e:e}");
                let l = (d.losses[s] - serial.losses[s]).abs() / serial.losses[s];
                assert!(l < 1e-12, "{p}x{a} rank {rank} step {s}: loss {l:e}");
                for (i, (got, want)) in d.params[s].iter().zip(&serial.params[s]).enumerate() {
                    let e = rel(got, want);
                    assert!(
                        e < 1e-11,
                        "{p}x{a} rank {rank} step {s}: parameter {i} {e:e}"
                    );
                }
            }
        }
    }
}

/// An empty batch runs on a process grid; inputs of the wrong patch or
/// channels are typed errors naming the rank.
#[test]
fn wrong_inputs_are_errors() {
    let cfg = config();
    let device = Device::flex();
    let out = LocalWorld::new(2)
        .run(|comm| {
            let grid = ProcessGrid::new(comm, 2, 1)?;
            let model = cfg.init(&grid, 1, &device, DType::F64)?;
            // An empty batch of this rank's patch goes through, collectives
            // and all, and its loss over the sphere is zero.
            let t = model.transforms();
            let (h, w) = (t.lat_range().len(), t.lon_range().len());
            let empty = Tensor::<4>::zeros([0, 3, h, w], (&device, DType::F64));
            let out = model.forward(empty.clone())?;
            assert_eq!(out.dims(), [0, 3, h, w]);
            let mse = SphereMse::for_model(&model);
            assert_eq!(mse.total(mse.local(out, empty)?)?, 0.0);
            // The whole grid on every rank: not this rank's patch.
            let x = Tensor::<4>::zeros([1, 3, 17, 30], (&device, DType::F64));
            Ok::<_, SfnoError>(model.forward(x).err())
        })
        .unwrap();
    for (rank, e) in out.into_iter().enumerate() {
        match e {
            Some(SfnoError::Shape { rank: r, got, .. }) => {
                assert_eq!((r, got), (rank, vec![1, 3, 17, 30]));
            }
            other => panic!("rank {rank}: {other:?}"),
        }
    }
    let bad = SfnoConfig {
        residual_prediction: true,
        out_chans: 2,
        ..config()
    };
    assert!(matches!(
        bad.init(&SerialDomain, 1, &device, DType::F64),
        Err(SfnoError::Setting {
            what: "out_chans",
            ..
        })
    ));
    let tiny = SfnoConfig {
        scale_factor: 40,
        ..config()
    };
    assert!(matches!(
        tiny.specs(),
        Err(SfnoError::Setting { what: "modes", .. })
    ));
}

/// `n` items over `k` parts, the first `n % k` one larger (parts may be
/// empty).
fn split(n: usize, k: usize) -> Vec<usize> {
    (0..k).map(|i| n / k + usize::from(i < n % k)).collect()
}

/// Data parallelism over replicas of the domain-decomposed SFNO (a
/// replicas × polar × azimuth grid, `ruda_tensor::ddp::hybrid_step`): each
/// replica trains on its share of the batch (uneven, or none), and every
/// rank's model equals the serial one trained on the whole batch.
#[test]
fn hybrid_replicas_of_the_distributed_sfno_equal_the_serial_run_on_the_whole_batch() {
    let cfg = config();
    let (outer, _) = cfg.specs().unwrap();
    let (nlat, nlon, batch) = (outer.nlat(), outer.nlon(), 3);
    let per = 3 * nlat * nlon;
    let x = random(batch * per, 3);
    let y = random(batch * per, 4);
    let device = Device::flex().autodiff();
    let lr = 1e-2;
    let serial = {
        let mut model = cfg.init(&SerialDomain, 7, &device, DType::F64).unwrap();
        let mse = SphereMse::for_model(&model);
        let mut optim = optimizer(true);
        let shape = [batch, 3, nlat, nlon];
        let t = |v: &[f64]| patch(v, shape, 0..nlat, 0..nlon, &device, DType::F64);
        let mut trace = Vec::new();
        for _ in 0..STEPS {
            let loss = mse.local(model.forward(t(&x)).unwrap(), t(&y)).unwrap();
            let grads = GradientsParams::from_grads(loss.backward(), &model);
            model = optim.step(lr, model, grads);
            trace.push(params(&model));
        }
        trace
    };
    assert_ne!(serial[0], serial[STEPS - 1], "training moved the model");
    for (r, p, a) in [
        (2, 1, 1),
        (2, 2, 1),
        (2, 1, 2),
        (3, 2, 1),
        (4, 1, 2),
        (2, 2, 2),
    ] {
        let traces = LocalWorld::new(r * p * a)
            .run(|comm| {
                let grid = HybridGrid::new(comm, r, p, a)?;
                let mut model = cfg.init(grid.domain(), 7, &device, DType::F64)?;
                let t0 = model.transforms();
                let (rows, cols) = (t0.lat_range(), t0.lon_range());
                let mse = SphereMse::for_model(&model);
                let mut optim = optimizer(true);
                let shares = split(batch, r);
                let me = grid.replica_rank();
                let first: usize = shares[..me].iter().sum();
                let b = shares[me];
                let mine = |v: &[f64]| {
                    let v = &v[first * per..(first + b) * per];
                    let shape = [b, 3, nlat, nlon];
                    patch(v, shape, rows.clone(), cols.clone(), &device, DType::F64)
                };
                let mut trace = Vec::new();
                for _ in 0..STEPS {
                    let loss = mse.local(model.forward(mine(&x))?, mine(&y))?;
                    let grads = GradientsParams::from_grads(loss.backward(), &model);
                    let how = GradientReduction::WeightedMean { samples: b };
                    model = hybrid_step(&grid, &mut optim, lr, model, grads, how)?;
                    trace.push(params(&model));
                }
                Ok::<_, SfnoError>(trace)
            })
            .unwrap();
        for (rank, d) in traces.iter().enumerate() {
            assert_eq!(d, &traces[0], "{r}x{p}x{a} rank {rank}: replicas differ");
            for s in 0..STEPS {
                for (i, (got, want)) in d[s].iter().zip(&serial[s]).enumerate() {
                    let e = rel(got, want);
                    assert!(
                        e < 1e-11,
                        "{r}x{p}x{a} rank {rank} step {s}: parameter {i} {e:e}"
                    );
                }
            }
        }
    }
}

/// The loss's gradient is exact in f64: `2 w (pred − target) / (b c)`
/// for the quadrature weight `w` of each latitude (a divisor rounded to
/// f32 on the way, as burn-autodiff 0.22.1's `div_scalar` backward does,
/// would be off by ~1e-8).
#[test]
fn the_loss_gradient_is_exact_in_f64() {
    let cfg = config();
    let (outer, _) = cfg.specs().unwrap();
    let (nlat, nlon, b) = (outer.nlat(), outer.nlon(), 3);
    let shape = [b, 3, nlat, nlon];
    let device = Device::flex().autodiff();
    let pred_v = random(b * 3 * nlat * nlon, 5);
    let target_v = random(b * 3 * nlat * nlon, 6);
    let pred = patch(&pred_v, shape, 0..nlat, 0..nlon, &device, DType::F64).require_grad();
    let target = patch(&target_v, shape, 0..nlat, 0..nlon, &device, DType::F64);
    let mse = SphereMse::new(std::sync::Arc::new(
        ruda_sphere::shallow_water::SerialTransforms::new(outer),
    ));
    let grads = mse.local(pred.clone(), target).unwrap().backward();
    let got = values(pred.grad(&grads).unwrap());
    let q = ruda_sphere::Latitudes::new(nlat, outer.grid()).unwrap();
    let scale = 2.0 * std::f64::consts::PI / nlon as f64 / (4.0 * std::f64::consts::PI);
    let mut worst = 0.0f64;
    for (i, g) in got.iter().enumerate() {
        let lat = (i / nlon) % nlat;
        let w = q.weights[lat] * scale;
        let want = 2.0 * w * (pred_v[i] - target_v[i]) * (1.0 / (b * 3) as f64);
        worst = worst.max((g - want).abs() / want.abs().max(1e-300));
    }
    assert!(worst < 1e-14, "relative error {worst:e}");
}
