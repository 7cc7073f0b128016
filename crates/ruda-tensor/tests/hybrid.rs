//! The replicas × polar × azimuth grid ([`HybridGrid`]) and its training
//! step ([`hybrid_step`]): on every factorisation of 1 to 8 ranks the
//! groups hold the ranks the layout promises, sizes that do not fit are
//! refused on every rank, and a model whose loss is split over each
//! replica's domain and whose batch is split (unevenly, emptily) over the
//! replicas trains as the serial model on the whole batch.

use burn_core as burn;

use burn::module::{Module, ModuleMapper, ModuleVisitor, Param};
use burn_nn::{Linear, LinearConfig};
use burn_optim::{AdamConfig, GradientsParams};
use burn_tensor::{DType, Device, Tensor, TensorData};
use ruda_comm::{LocalWorld, RankError, WorldError};
use ruda_tensor::ddp::{GradientReduction, hybrid_step, hybrid_step_with};
use ruda_tensor::{Error, Group, HybridGrid};

/// Every `(replicas, polar, azimuth)` with `replicas · polar · azimuth = n`.
fn factorisations(n: usize) -> Vec<(usize, usize, usize)> {
    let mut out = Vec::new();
    for r in 1..=n {
        for p in 1..=n {
            if n.is_multiple_of(r * p) {
                out.push((r, p, n / (r * p)));
            }
        }
    }
    out
}

/// The world ranks of `group`'s members, by their rank in it.
fn members<G: Group>(group: &G, world_rank: usize) -> Vec<i64> {
    group.exchange_words(&[world_rank as i64]).unwrap()
}

#[test]
fn every_factorisation_of_one_to_eight_ranks_has_the_promised_groups() {
    for n in 1..=8 {
        for (r, p, a) in factorisations(n) {
            let seen = LocalWorld::new(n)
                .run(|c| {
                    let g = HybridGrid::new(c, r, p, a)?;
                    let me = g.world().rank();
                    Ok::<_, Error>((
                        me,
                        g.replica_rank(),
                        g.num_replicas(),
                        g.domain().polar_rank(),
                        g.domain().azimuth_rank(),
                        members(g.replicas(), me),
                        members(g.domain().world(), me),
                        members(g.domain().polar(), me),
                    ))
                })
                .unwrap();
            let pa = p * a;
            for (me, rep, reps, pol, az, across, domain, polar) in seen {
                let at = format!("{r}x{p}x{a} rank {me}");
                assert_eq!(me, rep * pa + pol * a + az, "{at}: coordinates");
                assert_eq!(reps, r, "{at}");
                let pos = (me % pa) as i64;
                let want: Vec<i64> = (0..r as i64).map(|k| k * pa as i64 + pos).collect();
                assert_eq!(across, want, "{at}: replicas group");
                let base = (rep * pa) as i64;
                let want: Vec<i64> = (0..pa as i64).map(|j| base + j).collect();
                assert_eq!(domain, want, "{at}: domain");
                let want: Vec<i64> = (0..p)
                    .map(|q| (base as usize + q * a + az) as i64)
                    .collect();
                assert_eq!(polar, want, "{at}: polar group");
            }
        }
    }
}

#[test]
fn sizes_that_do_not_fit_the_world_are_refused_on_every_rank() {
    for (n, (r, p, a)) in [
        (3, (2, 1, 1)),
        (4, (0, 2, 2)),
        (4, (2, 0, 2)),
        (2, (1, 1, 0)),
        (6, (2, 2, 2)),
        (1, (usize::MAX, 2, 2)),
    ] {
        let out = LocalWorld::new(n).run_each(|c| HybridGrid::new(c, r, p, a).map(|_| ()));
        assert_eq!(out.len(), n);
        for got in out {
            match got {
                Err(RankError::Failed(Error::HybridGridSize {
                    replicas,
                    polar,
                    azimuth,
                    world,
                })) => assert_eq!((replicas, polar, azimuth, world), (r, p, a, n)),
                other => panic!("{r}x{p}x{a} on {n}: {other:?}"),
            }
        }
    }
}

/// Sets every parameter to values fixed by its position, in f64.
struct Fixed(usize);

impl ModuleMapper for Fixed {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
        let dims = param.val().dims();
        let k = self.0;
        self.0 += 1;
        let v: Vec<f64> = (0..dims.iter().product::<usize>())
            .map(|i| ((i * 5 + k * 11) as f64 * 0.41).sin() * 0.5)
            .collect();
        let device = param.val().device();
        let t = Tensor::<D>::from_data(TensorData::new(v, dims), (&device, DType::F64));
        Param::initialized(param.id, t.require_grad())
    }
}

#[derive(Default)]
struct Flatten(Vec<f64>);

impl ModuleVisitor for Flatten {
    fn visit_float<const D: usize>(&mut self, p: &Param<Tensor<D>>) {
        self.0
            .extend(p.val().into_data().try_to_vec::<f64>().unwrap());
    }
}

/// `n` items over `k` parts, the first `n % k` one larger (parts may be
/// empty).
fn split(n: usize, k: usize) -> Vec<usize> {
    (0..k).map(|i| n / k + usize::from(i < n % k)).collect()
}

const IN: usize = 3;
const STEPS: usize = 3;

/// Rows `[start, start + len)` of the global batch: inputs and targets.
fn rows(start: usize, len: usize, device: &Device) -> (Tensor<2>, Tensor<2>) {
    let x: Vec<f64> = (start * IN..(start + len) * IN)
        .map(|i| ((i * 13) % 7) as f64 / 7.0 - 0.4)
        .collect();
    let y: Vec<f64> = (start..start + len)
        .map(|i| (i as f64 * 0.7).cos())
        .collect();
    (
        Tensor::from_data(TensorData::new(x, [len, IN]), (device, DType::F64)),
        Tensor::from_data(TensorData::new(y, [len, 1]), (device, DType::F64)),
    )
}

/// Parameters after each Adam step; each rank holds `shards[rank]` rows
/// of its replica's `replica_rows`, its loss its rows' squared error over
/// the replica's rows (so that the domain's sum is the replica's mean).
fn train<G: Group>(grid: &HybridGrid<G>, batch: usize) -> Vec<Vec<f64>> {
    let device = Device::flex().autodiff();
    let per_replica = split(batch, grid.num_replicas());
    let rep = grid.replica_rank();
    let replica_start: usize = per_replica[..rep].iter().sum();
    let replica_rows = per_replica[rep];
    let domain = grid.domain().world();
    let shards = split(replica_rows, domain.size());
    let start = replica_start + shards[..domain.rank()].iter().sum::<usize>();
    let (x, y) = rows(start, shards[domain.rank()], &device);
    let mut model: Linear = LinearConfig::new(IN, 1).init(&device).map(&mut Fixed(0));
    let mut optim = AdamConfig::new().init();
    let mut out = Vec::new();
    for _ in 0..STEPS {
        let err = model.forward(x.clone()) - y.clone();
        // Times the reciprocal: burn-autodiff 0.22.1's `div_scalar`
        // backward rounds `1 / divisor` to f32.
        let loss = (err.clone() * err)
            .sum()
            .mul_scalar(1.0 / replica_rows.max(1) as f64);
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        let how = GradientReduction::WeightedMean {
            samples: replica_rows,
        };
        model = hybrid_step(grid, &mut optim, 0.05, model, grads, how).unwrap();
        let mut f = Flatten::default();
        model.visit(&mut f);
        out.push(f.0);
    }
    out
}

#[test]
fn a_hybrid_step_trains_as_the_serial_model_on_the_whole_batch() {
    // 7 rows: uneven over 2 and 3 replicas and over every domain; 2 rows
    // over 3 or 4 replicas leave replicas without a sample.
    for batch in [7, 2] {
        let serial = LocalWorld::new(1)
            .run(|c| Ok::<_, Error>(train(&HybridGrid::new(c, 1, 1, 1)?, batch)))
            .unwrap()
            .remove(0);
        assert_ne!(serial[0], serial[STEPS - 1], "training moved the model");
        for n in 2..=8 {
            for (r, p, a) in factorisations(n) {
                let runs = LocalWorld::new(n)
                    .run(|c| Ok::<_, Error>(train(&HybridGrid::new(c, r, p, a)?, batch)))
                    .unwrap();
                for (rank, run) in runs.iter().enumerate() {
                    assert_eq!(run, &runs[0], "{r}x{p}x{a} rank {rank}: replicas differ");
                }
                for (s, (got, want)) in runs[0].iter().zip(&serial).enumerate() {
                    for (g, w) in got.iter().zip(want) {
                        assert!(
                            (g - w).abs() <= 1e-13 * (1.0 + w.abs()),
                            "batch {batch}, {r}x{p}x{a} step {s}: {g} vs {w}"
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn a_grid_error_is_reported_by_the_world_run() {
    let r = LocalWorld::new(2).run(|c| HybridGrid::new(c, 1, 3, 1).map(|_| ()));
    assert!(matches!(
        r,
        Err(WorldError::Rank {
            error: RankError::Failed(Error::HybridGridSize { polar: 3, .. }),
            ..
        })
    ));
}

mod sharded {
    //! A model with a parameter sharded over the domain (a per-column
    //! bias, each rank its columns) beside a replicated one:
    //! `hybrid_step_with` sums only the replicated one over the domain,
    //! and the run equals the serial model on the whole batch and all
    //! columns (the shards put together).

    use super::*;

    /// A shared linear map of each column's features, plus a bias per
    /// column (this rank's columns).
    #[derive(Module, Debug)]
    struct Patchy {
        shared: Linear,
        local: Param<Tensor<1>>,
    }

    const COLS: usize = 5;

    /// Inputs `[rows, cols, IN]` and targets `[rows, cols]` of samples
    /// `rows` and columns `cols`.
    fn data(rows: Range<usize>, cols: Range<usize>, device: &Device) -> (Tensor<3>, Tensor<2>) {
        let (r, c) = (rows.len(), cols.len());
        let mut x = Vec::new();
        let mut y = Vec::new();
        for i in rows {
            for j in cols.clone() {
                for k in 0..IN {
                    x.push(((i * 31 + j * 7 + k * 3) % 11) as f64 / 11.0 - 0.45);
                }
                y.push(((i * 5 + j * 3) as f64 * 0.37).sin());
            }
        }
        (
            Tensor::from_data(TensorData::new(x, [r, c, IN]), (device, DType::F64)),
            Tensor::from_data(TensorData::new(y, [r, c]), (device, DType::F64)),
        )
    }

    use core::ops::Range;

    /// `split` as ranges.
    fn ranges(n: usize, k: usize) -> Vec<Range<usize>> {
        let mut start = 0;
        split(n, k)
            .into_iter()
            .map(|len| {
                start += len;
                start - len..start
            })
            .collect()
    }

    /// After each Adam step: the shared parameters and this rank's bias.
    fn train<G: Group>(grid: &HybridGrid<G>, batch: usize) -> Vec<(Vec<f64>, Vec<f64>)> {
        let device = Device::flex().autodiff();
        let samples = ranges(batch, grid.num_replicas())[grid.replica_rank()].clone();
        let domain = grid.domain().world();
        let cols = ranges(COLS, domain.size())[domain.rank()].clone();
        let bias: Vec<f64> = cols.clone().map(|j| 0.1 * j as f64 - 0.2).collect();
        let mut model = Patchy {
            shared: LinearConfig::new(IN, 1).init(&device).map(&mut Fixed(0)),
            local: Param::from_tensor(
                Tensor::from_data(TensorData::new(bias, [cols.len()]), (&device, DType::F64))
                    .require_grad(),
            ),
        };
        let (x, y) = data(samples.clone(), cols.clone(), &device);
        let (r, c) = (samples.len(), cols.len());
        let mut optim = AdamConfig::new().init();
        let mut out = Vec::new();
        for _ in 0..STEPS {
            let pred = ruda_tensor::reshape(
                model
                    .shared
                    .forward(ruda_tensor::reshape(x.clone(), [r * c, IN])),
                [r, c],
            ) + ruda_tensor::reshape(model.local.val(), [1, c]);
            let err = pred - y.clone();
            // This rank's columns of its replica's mean over samples.
            let loss = (err.clone() * err).sum().mul_scalar(1.0 / r.max(1) as f64);
            let grads = GradientsParams::from_grads(loss.backward(), &model);
            let how = GradientReduction::WeightedMean { samples: r };
            model =
                hybrid_step_with(grid, &mut optim, 0.05, model, grads, how, |m| &m.shared).unwrap();
            let mut f = Flatten::default();
            model.shared.visit(&mut f);
            let local = model.local.val().into_data().try_to_vec::<f64>().unwrap();
            out.push((f.0, local));
        }
        out
    }

    #[test]
    fn sharded_parameters_are_left_alone_and_the_run_equals_the_serial_one() {
        for batch in [7, 2] {
            let serial = LocalWorld::new(1)
                .run(|c| Ok::<_, Error>(train(&HybridGrid::new(c, 1, 1, 1)?, batch)))
                .unwrap()
                .remove(0);
            assert_ne!(serial[0], serial[STEPS - 1], "training moved the model");
            for n in 2..=8 {
                for (r, p, a) in factorisations(n) {
                    let runs = LocalWorld::new(n)
                        .run(|c| Ok::<_, Error>(train(&HybridGrid::new(c, r, p, a)?, batch)))
                        .unwrap();
                    let pa = p * a;
                    for s in 0..STEPS {
                        for (rank, run) in runs.iter().enumerate() {
                            // Replicated: the same on every rank; sharded:
                            // the same across replicas.
                            assert_eq!(run[s].0, runs[0][s].0, "{r}x{p}x{a} rank {rank}");
                            assert_eq!(run[s].1, runs[rank % pa][s].1, "{r}x{p}x{a} rank {rank}");
                        }
                        let close = |g: &[f64], w: &[f64], what: &str| {
                            assert_eq!(g.len(), w.len());
                            for (g, w) in g.iter().zip(w) {
                                assert!(
                                    (g - w).abs() <= 1e-13 * (1.0 + w.abs()),
                                    "batch {batch}, {r}x{p}x{a} step {s} {what}: {g} vs {w}"
                                );
                            }
                        };
                        close(&runs[0][s].0, &serial[s].0, "shared");
                        let whole: Vec<f64> =
                            runs[..pa].iter().flat_map(|run| run[s].1.clone()).collect();
                        close(&whole, &serial[s].1, "bias");
                    }
                }
            }
        }
    }
}
