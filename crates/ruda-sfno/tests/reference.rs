//! ruda-sfno's SFNO against torch-harmonics' own
//! `SphericalFourierNeuralOperator` with the same weights
//! (`reference/sfno_reference.py`, torch-harmonics 0.9.3 in float64): the
//! output and the gradients of `Σ output · r` with respect to the input and
//! every parameter agree at f64 round-off, serially and on a 2 × 2 process
//! grid (each rank its patch).

use burn_core as burn;

use burn::module::{Module, ModuleMapper, ModuleVisitor, Param};
use burn_tensor::{DType, Device, Tensor, TensorData};
use ruda_comm::LocalWorld;
use ruda_sfno::{SfnoConfig, SfnoError, patch};
use ruda_sphere::shallow_water::{SerialDomain, SphereDomain};
use ruda_tensor::ProcessGrid;
use serde_json::Value;

fn reference() -> Value {
    serde_json::from_str(include_str!("../reference/sfno_0.9.3.json")).expect("valid JSON")
}

fn floats(v: &Value) -> Vec<f64> {
    v.as_array()
        .expect("an array")
        .iter()
        .map(|x| x.as_f64().expect("a number"))
        .collect()
}

fn usizes(v: &Value) -> Vec<usize> {
    v.as_array()
        .expect("an array")
        .iter()
        .map(|x| x.as_u64().expect("a count") as usize)
        .collect()
}

/// Sets every float parameter, in visiting order, to the next reference
/// array (shapes checked).
struct Load {
    params: Vec<(String, Vec<usize>, Vec<f64>)>,
    next: usize,
}

impl ModuleMapper for Load {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
        let (name, shape, values) = &self.params[self.next];
        self.next += 1;
        let t = param.val();
        assert_eq!(&t.dims().to_vec(), shape, "parameter {name}");
        let fresh = Tensor::<D>::from_data(
            TensorData::new(values.clone(), t.dims()),
            (&t.device(), DType::F64),
        );
        Param::initialized(param.id, fresh.require_grad())
    }
}

/// Every float parameter's gradient, in visiting order.
struct Grads<'a> {
    grads: &'a burn_tensor::Gradients,
    out: Vec<Vec<f64>>,
}

impl ModuleVisitor for Grads<'_> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        let g = param
            .val()
            .grad(self.grads)
            .expect("every parameter has a gradient");
        self.out.push(g.into_data().try_to_vec::<f64>().unwrap());
    }
}

fn rel(a: &[f64], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len());
    let scale = b.iter().fold(0.0f64, |m, v| m.max(v.abs())).max(1e-300);
    a.iter()
        .zip(b)
        .fold(0.0f64, |m, (x, y)| m.max((x - y).abs()))
        / scale
}

/// What one rank computes: its patch of the output, of the input's
/// gradient, and every parameter's gradient (its share, on a grid).
struct Run {
    rows: std::ops::Range<usize>,
    cols: std::ops::Range<usize>,
    output: Vec<f64>,
    input_grad: Vec<f64>,
    param_grads: Vec<Vec<f64>>,
}

fn run<D: SphereDomain>(case: &Value, domain: &D) -> Result<Run, SfnoError> {
    let n = |k: &str| case[k].as_u64().unwrap() as usize;
    let (nlat, nlon, b) = (n("nlat"), n("nlon"), n("batch"));
    let cfg = SfnoConfig {
        scale_factor: n("scale_factor"),
        embed_dim: n("embed_dim"),
        num_layers: n("num_layers"),
        residual_prediction: case["residual_prediction"].as_bool().unwrap(),
        ..SfnoConfig::new(nlat, nlon)
    };
    let device = Device::flex().autodiff();
    let params = case["params"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["name"].as_str().unwrap().to_owned(),
                usizes(&p["shape"]),
                floats(&p["values"]),
            )
        })
        .collect::<Vec<_>>();
    let count = params.len();
    let mut load = Load { params, next: 0 };
    let model = cfg.init(domain, 1, &device, DType::F64)?.map(&mut load);
    assert_eq!(load.next, count, "every reference parameter used");
    let t = model.transforms();
    let (rows, cols) = (t.lat_range(), t.lon_range());
    let shape = [b, 3, nlat, nlon];
    let on = |v: &[f64]| patch(v, shape, rows.clone(), cols.clone(), &device, DType::F64);
    let x = on(&floats(&case["input"])).require_grad();
    let y = model.forward(x.clone())?;
    let r = on(&floats(&case["cotangent"]));
    let grads = (y.clone() * r).sum().backward();
    let mut visit = Grads {
        grads: &grads,
        out: Vec::new(),
    };
    model.visit(&mut visit);
    Ok(Run {
        output: y.into_data().try_to_vec::<f64>().unwrap(),
        input_grad: x
            .grad(&grads)
            .unwrap()
            .into_data()
            .try_to_vec::<f64>()
            .unwrap(),
        param_grads: visit.out,
        rows,
        cols,
    })
}

#[test]
fn sfno_equals_torch_harmonics_with_the_same_weights() {
    let reference = reference();
    assert_eq!(
        reference["torch_harmonics"].as_str().unwrap().get(..5),
        Some("0.9.3")
    );
    for case in reference["cases"].as_array().unwrap() {
        let name = format!(
            "{}x{} embed {} layers {}",
            case["nlat"], case["nlon"], case["embed_dim"], case["num_layers"]
        );
        let want_out = floats(&case["output"]);
        let want_dx = floats(&case["grads"]["input"]);
        let want_dp: Vec<Vec<f64>> = case["grads"]["params"]
            .as_array()
            .unwrap()
            .iter()
            .map(floats)
            .collect();
        let serial = run(case, &SerialDomain).unwrap();
        let e = rel(&serial.output, &want_out);
        assert!(e < 1e-13, "{name}: output {e:e}");
        let e = rel(&serial.input_grad, &want_dx);
        assert!(e < 1e-13, "{name}: input gradient {e:e}");
        assert_eq!(serial.param_grads.len(), want_dp.len());
        for (i, (got, want)) in serial.param_grads.iter().zip(&want_dp).enumerate() {
            let e = rel(got, want);
            assert!(e < 1e-13, "{name}: parameter {i} gradient {e:e}");
        }

        // On a 2 × 2 grid: each rank's patch, and the parameter gradients
        // summed over the ranks.
        let (nlat, nlon) = (serial.rows.end, serial.cols.end);
        let b = case["batch"].as_u64().unwrap() as usize;
        let runs = LocalWorld::new(4)
            .run(|comm| {
                let grid = ProcessGrid::new(comm, 2, 2)?;
                run(case, &grid)
            })
            .unwrap();
        let cut = |v: &[f64], r: &Run| {
            let device = Device::flex();
            patch(
                v,
                [b, 3, nlat, nlon],
                r.rows.clone(),
                r.cols.clone(),
                &device,
                DType::F64,
            )
            .into_data()
            .try_to_vec::<f64>()
            .unwrap()
        };
        let mut summed = vec![vec![0.0; 0]; want_dp.len()];
        for (rank, r) in runs.iter().enumerate() {
            let e = rel(&r.output, &cut(&want_out, r));
            assert!(e < 1e-13, "{name} rank {rank}: output {e:e}");
            let e = rel(&r.input_grad, &cut(&want_dx, r));
            assert!(e < 1e-13, "{name} rank {rank}: input gradient {e:e}");
            for (s, g) in summed.iter_mut().zip(&r.param_grads) {
                if s.is_empty() {
                    *s = vec![0.0; g.len()];
                }
                s.iter_mut().zip(g).for_each(|(a, b)| *a += b);
            }
        }
        for (i, (got, want)) in summed.iter().zip(&want_dp).enumerate() {
            let e = rel(got, want);
            assert!(e < 1e-13, "{name} 2x2: parameter {i} gradient {e:e}");
        }
    }
}
