//! The demo's model and its training on one rank: a spectral block on the
//! sphere — a learnable complex filter per spectral mode `(l, m)` and
//! channel applied between the forward and inverse transforms, plus a
//! learnable pointwise channel mix — and a vector spectral block for the
//! wind — a learnable complex filter per mode on its spheroidal and
//! toroidal coefficients between the vector transforms — trained by Adam
//! on the one-step and two-step (rollout) error of both. The same code runs serially (ruda-sphere's
//! serial transforms) and on a process grid (its distributed transforms,
//! parameters entering through `copy_to` regions and the loss leaving
//! through `reduce_from` regions).

use std::ops::Range;
use std::time::Instant;

use burn_tensor::{DType, Device, Int, Tensor, TensorData};
use indicatif::ProgressBar;
use ruda_sphere::{
    DistributedInverseRealSht, DistributedInverseRealVectorSht, DistributedRealSht,
    DistributedRealVectorSht, InverseRealSht, InverseRealVectorSht, RealSht, RealVectorSht,
    SphereError,
};
use ruda_tensor::tensor_api as ta;
use ruda_tensor::{Group, ProcessGrid};

use super::problem::Problem;
use super::{StepRecord, StepTiming};
use crate::timed_comm::CommClock;

/// Adam's step size.
pub const LEARNING_RATE: f64 = 0.02;

/// The serial transforms, scalar and vector.
struct SerialTransforms {
    sht: RealSht,
    isht: InverseRealSht,
    vsht: RealVectorSht,
    ivsht: InverseRealVectorSht,
}

/// Where a rank's transforms come from.
enum Transforms<G> {
    Serial(Box<SerialTransforms>),
    Grid(Box<GridTransforms<G>>),
}

/// The distributed transforms and the grid they run on.
struct GridTransforms<G> {
    grid: ProcessGrid<G>,
    sht: DistributedRealSht<G>,
    isht: DistributedInverseRealSht<G>,
    vsht: DistributedRealVectorSht<G>,
    ivsht: DistributedInverseRealVectorSht<G>,
}

/// One rank's view of the problem.
struct Rank<G> {
    transforms: Transforms<G>,
    channels: usize,
    /// This rank's degrees and orders.
    l: Range<usize>,
    orders: Vec<usize>,
    field: Tensor<3>,
    one_step: Tensor<3>,
    two_steps: Tensor<3>,
    /// This rank's patch of the wind `[2, lat, lon]` and its targets.
    wind: Tensor<3>,
    wind_one_step: Tensor<3>,
    wind_two_steps: Tensor<3>,
    /// Quadrature weights `[1, lat, 1]` including `2π/nlon` and the mean's
    /// `1/(4π channels)`.
    weights: Tensor<3>,
    /// The device the model trains on (without autodiff).
    device: Device,
}

fn f64_tensor<const D: usize>(v: Vec<f64>, shape: [usize; D], device: &Device) -> Tensor<D> {
    Tensor::from_data(TensorData::new(v, shape), (device, DType::F64))
}

fn values<const D: usize>(t: Tensor<D>) -> Vec<f64> {
    t.into_data().try_to_vec::<f64>().expect("f64 values")
}

/// `[c, h, w]` values restricted to rows and columns.
fn patch(v: &[f64], [c, h, w]: [usize; 3], rows: &Range<usize>, cols: &Range<usize>) -> Vec<f64> {
    let mut out = Vec::with_capacity(c * rows.len() * cols.len());
    for ci in 0..c {
        for r in rows.clone() {
            let s = (ci * h + r) * w;
            out.extend_from_slice(&v[s + cols.start..s + cols.end]);
        }
    }
    out
}

impl<G: Group> Rank<G> {
    fn new(
        p: &Problem,
        grid: Option<ProcessGrid<G>>,
        device: &Device,
    ) -> Result<Self, SphereError> {
        let spec = p.spec;
        let (h, w) = (spec.nlat(), spec.nlon());
        let (transforms, lat, lon, l, orders) = match grid {
            None => (
                Transforms::Serial(Box::new(SerialTransforms {
                    sht: RealSht::new(spec),
                    isht: InverseRealSht::new(spec),
                    vsht: RealVectorSht::new(spec),
                    ivsht: InverseRealVectorSht::new(spec),
                })),
                0..h,
                0..w,
                0..spec.lmax(),
                (0..spec.mmax()).collect(),
            ),
            Some(grid) => {
                let sht = DistributedRealSht::new(&grid, spec)?;
                let isht = DistributedInverseRealSht::new(&grid, spec)?;
                let vsht = DistributedRealVectorSht::new(&grid, spec)?;
                let ivsht = DistributedInverseRealVectorSht::new(&grid, spec)?;
                let lay = sht.layout().clone();
                (
                    Transforms::Grid(Box::new(GridTransforms {
                        grid,
                        sht,
                        isht,
                        vsht,
                        ivsht,
                    })),
                    lay.lat_range(),
                    lay.lon_range(),
                    lay.l_range(),
                    lay.orders(),
                )
            }
        };
        let device = device.clone();
        let local = |v: &[f64], c: usize| {
            f64_tensor(
                patch(v, [c, h, w], &lat, &lon),
                [c, lat.len(), lon.len()],
                &device,
            )
        };
        let scale = 2.0 * std::f64::consts::PI
            / w as f64
            / (4.0 * std::f64::consts::PI)
            / p.channels as f64;
        let weights = p.lat_weights[lat.clone()]
            .iter()
            .map(|q| q * scale)
            .collect();
        Ok(Rank {
            transforms,
            channels: p.channels,
            l,
            orders,
            field: local(&p.field, p.channels),
            one_step: local(&p.one_step, p.channels),
            two_steps: local(&p.two_steps, p.channels),
            wind: local(&p.wind, 2),
            wind_one_step: local(&p.wind_one_step, 2),
            wind_two_steps: local(&p.wind_two_steps, 2),
            weights: f64_tensor(weights, [1, lat.len(), 1], &device),
            device,
        })
    }

    fn sht(&self, x: Tensor<3>) -> Result<Tensor<4>, SphereError> {
        match &self.transforms {
            Transforms::Serial(s) => s.sht.forward(x),
            Transforms::Grid(g) => g.sht.forward(x),
        }
    }

    fn isht(&self, c: Tensor<4>) -> Result<Tensor<3>, SphereError> {
        match &self.transforms {
            Transforms::Serial(s) => s.isht.forward(c),
            Transforms::Grid(g) => g.isht.forward(c),
        }
    }

    fn vsht(&self, x: Tensor<3>) -> Result<Tensor<4>, SphereError> {
        match &self.transforms {
            Transforms::Serial(s) => s.vsht.forward(x),
            Transforms::Grid(g) => g.vsht.forward(x),
        }
    }

    fn ivsht(&self, c: Tensor<4>) -> Result<Tensor<3>, SphereError> {
        match &self.transforms {
            Transforms::Serial(s) => s.ivsht.forward(c),
            Transforms::Grid(g) => g.ivsht.forward(c),
        }
    }

    /// A replicated parameter entering this rank's computation.
    fn replicated<const D: usize>(&self, t: Tensor<D>) -> Result<Tensor<D>, SphereError> {
        match &self.transforms {
            Transforms::Serial(..) => Ok(t),
            Transforms::Grid(g) => {
                let t = ta::copy_to_polar_region(&g.grid, t)?;
                Ok(ta::copy_to_azimuth_region(&g.grid, t)?)
            }
        }
    }

    /// This rank's part of the loss summed into the replicated loss.
    fn total(&self, partial: Tensor<1>) -> Result<Tensor<1>, SphereError> {
        match &self.transforms {
            Transforms::Serial(..) => Ok(partial),
            Transforms::Grid(g) => {
                let t = ta::reduce_from_polar_region(&g.grid, partial)?;
                Ok(ta::reduce_from_azimuth_region(&g.grid, t)?)
            }
        }
    }

    /// This rank's orders as an index tensor.
    fn order_index(&self, device: &Device) -> Tensor<1, Int> {
        let idx: Vec<i64> = self.orders.iter().map(|&m| m as i64).collect();
        let n = idx.len();
        Tensor::from_data(TensorData::new(idx, [n]), device)
    }

    /// The spectral block: `isht(W ⊙ sht(u)) + M u`.
    fn block(
        &self,
        u: Tensor<3>,
        w: &Tensor<4>,
        mix: &Tensor<2>,
    ) -> Result<Tensor<3>, SphereError> {
        let s = self.isht(filter(self.sht(u.clone())?, w))?;
        let [ch, h, wd] = u.dims();
        let mixed = mix
            .clone()
            .matmul(u.reshape([ch, h * wd]))
            .reshape([ch, h, wd]);
        Ok(s + mixed)
    }

    /// The vector spectral block: `ivsht(V ⊙ vsht(u))` of a wind `u`.
    fn wind_block(&self, u: Tensor<3>, v: &Tensor<4>) -> Result<Tensor<3>, SphereError> {
        self.ivsht(filter(self.vsht(u)?, v))
    }

    /// A replicated `[c, lmax, mmax, 2]` filter's block of this rank's
    /// degrees and orders.
    fn local_filter(&self, f: Tensor<4>, device: &Device) -> Result<Tensor<4>, SphereError> {
        Ok(self
            .replicated(f)?
            .narrow(1, self.l.start, self.l.len())
            .select(2, self.order_index(device)))
    }

    /// The loss and the gradient of every parameter (filter, mix, then the
    /// wind's filter).
    fn loss_and_grads(
        &self,
        params: &[f64],
        lmax: usize,
        mmax: usize,
    ) -> Result<(f64, Vec<f64>), SphereError> {
        let device = self.device.clone().autodiff();
        let ch = self.channels;
        let n_filter = ch * lmax * mmax * 2;
        let n_mix = n_filter + ch * ch;
        let filter =
            f64_tensor(params[..n_filter].to_vec(), [ch, lmax, mmax, 2], &device).require_grad();
        let mix = f64_tensor(params[n_filter..n_mix].to_vec(), [ch, ch], &device).require_grad();
        let wind_filter =
            f64_tensor(params[n_mix..].to_vec(), [2, lmax, mmax, 2], &device).require_grad();
        let w = self.local_filter(filter.clone(), &device)?;
        let v = self.local_filter(wind_filter.clone(), &device)?;
        let mx = self.replicated(mix.clone())?;
        let y1 = self.block(self.field.clone(), &w, &mx)?;
        let y2 = self.block(y1.clone(), &w, &mx)?;
        let r1 = y1 - self.one_step.clone();
        let r2 = y2 - self.two_steps.clone();
        let z1 = self.wind_block(self.wind.clone(), &v)?;
        let z2 = self.wind_block(z1.clone(), &v)?;
        let q1 = z1 - self.wind_one_step.clone();
        let q2 = z2 - self.wind_two_steps.clone();
        let sq = r1.clone() * r1 + r2.clone() * r2;
        let wind_sq = q1.clone() * q1 + q2.clone() * q2;
        let partial = (sq * self.weights.clone()).sum() + (wind_sq * self.weights.clone()).sum();
        let loss = self.total(partial)?;
        let value = values(loss.clone().inner())[0];
        let grads = loss.backward();
        let mut g = values(filter.grad(&grads).expect("the filter reaches the loss"));
        g.extend(values(mix.grad(&grads).expect("the mix reaches the loss")));
        g.extend(values(
            wind_filter
                .grad(&grads)
                .expect("the wind's filter reaches the loss"),
        ));
        Ok((value, g))
    }
}

/// `c ⊙ w` of complex `[.., 2]` values (`w` broadcast or not).
fn filter(c: Tensor<4>, w: &Tensor<4>) -> Tensor<4> {
    let (cr, ci) = (c.clone().narrow(3, 0, 1), c.narrow(3, 1, 1));
    let (wr, wi) = (w.clone().narrow(3, 0, 1), w.clone().narrow(3, 1, 1));
    Tensor::cat(
        vec![
            cr.clone() * wr.clone() - ci.clone() * wi.clone(),
            cr * wi + ci * wr,
        ],
        3,
    )
}

/// Adam over a flat parameter vector.
struct Adam {
    m: Vec<f64>,
    v: Vec<f64>,
    t: i32,
}

impl Adam {
    fn new(n: usize) -> Self {
        Adam {
            m: vec![0.0; n],
            v: vec![0.0; n],
            t: 0,
        }
    }

    fn step(&mut self, params: &mut [f64], grads: &[f64]) {
        const B1: f64 = 0.9;
        const B2: f64 = 0.999;
        const EPS: f64 = 1e-8;
        self.t += 1;
        let (c1, c2) = (1.0 - B1.powi(self.t), 1.0 - B2.powi(self.t));
        for (((p, g), m), v) in params
            .iter_mut()
            .zip(grads)
            .zip(&mut self.m)
            .zip(&mut self.v)
        {
            *m = B1 * *m + (1.0 - B1) * g;
            *v = B2 * *v + (1.0 - B2) * g * g;
            *p -= LEARNING_RATE * (*m / c1) / ((*v / c2).sqrt() + EPS);
        }
    }
}

/// The initial parameters: the identity filter (`W = 1`), no mix, and the
/// identity filter of the wind (`V = 1`).
pub fn initial_params(p: &Problem) -> Vec<f64> {
    let (ch, l, m) = (p.channels, p.spec.lmax(), p.spec.mmax());
    let n_filter = ch * l * m * 2;
    let n_mix = n_filter + ch * ch;
    let mut v = vec![0.0; n_mix + 2 * l * m * 2];
    for re in v[..n_filter].iter_mut().step_by(2) {
        *re = 1.0;
    }
    for re in v[n_mix..].iter_mut().step_by(2) {
        *re = 1.0;
    }
    v
}

/// Train for `steps` steps on `grid` (`None`: serially) on `device`, timing each step
/// (with `clock`, the time in collectives; `progress`: the bar this rank
/// advances, if any), and hand each step's record
/// and timing to `after` (which may stop the training with its error).
pub(crate) fn train<G: Group, E: From<SphereError>>(
    p: &Problem,
    grid: Option<ProcessGrid<G>>,
    device: &Device,
    steps: usize,
    clock: Option<&CommClock>,
    progress: Option<&ProgressBar>,
    mut after: impl FnMut(StepRecord, StepTiming) -> Result<(), E>,
) -> Result<(), E> {
    let rank = Rank::new(p, grid, device)?;
    let mut params = initial_params(p);
    let mut adam = Adam::new(params.len());
    for _ in 0..steps {
        let comm0 = clock.map(CommClock::spent);
        let t = Instant::now();
        let (loss, grads) = rank.loss_and_grads(&params, p.spec.lmax(), p.spec.mmax())?;
        let wall = t.elapsed().as_secs_f64();
        let comm = match (clock, comm0) {
            (Some(c), Some(c0)) => (c.spent() - c0).as_secs_f64(),
            _ => 0.0,
        };
        adam.step(&mut params, &grads);
        if let Some(bar) = progress {
            bar.inc(1);
        }
        after(StepRecord { loss, grads }, StepTiming { wall, comm })?;
    }
    Ok(())
}

/// [`train`] keeping every step's record and timing.
pub(crate) fn train_all<G: Group>(
    p: &Problem,
    grid: Option<ProcessGrid<G>>,
    device: &Device,
    steps: usize,
    clock: Option<&CommClock>,
    progress: &ProgressBar,
    lead: bool,
) -> Result<(Vec<StepRecord>, Vec<StepTiming>), SphereError> {
    let (mut records, mut timings) = (Vec::with_capacity(steps), Vec::with_capacity(steps));
    let bar = lead.then_some(progress);
    train::<G, SphereError>(p, grid, device, steps, clock, bar, |r, t| {
        records.push(r);
        timings.push(t);
        Ok(())
    })?;
    Ok((records, timings))
}
