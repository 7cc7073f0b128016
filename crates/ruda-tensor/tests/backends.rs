//! Every operation on every backend ruda supports, through the tensor
//! methods: forward values and gradients on each device equal Flex's in f64
//! (within f32 round-off for an f32 device), and the adjoint identity holds
//! on each. Flex always; wgpu (Vulkan — Mesa's lavapipe in CI) with feature
//! `wgpu`, in f32 and, where the adapter has it, f64.

mod common;

use burn_tensor::{DType, Device, Tensor, TensorData};
use common::world;
use ruda_tensor::TransposeAxes;
use ruda_tensor::{Error, Group, HostCollective, TensorExt};

/// A device under test and the float types it runs.
struct Target {
    name: &'static str,
    device: Device,
    dtypes: Vec<DType>,
}

fn targets() -> Vec<Target> {
    #[allow(unused_mut)]
    let mut t = vec![Target {
        name: "flex",
        device: Device::flex(),
        dtypes: vec![DType::F64, DType::F32],
    }];
    #[cfg(feature = "wgpu")]
    {
        let device = Device::wgpu(burn_tensor::DeviceKind::Cpu);
        let f64_ok = std::panic::catch_unwind(|| {
            Tensor::<1>::from_data(TensorData::new(vec![1.0f64], [1]), (&device, DType::F64))
                .into_data()
        })
        .is_ok();
        let mut dtypes = vec![DType::F32];
        if f64_ok {
            dtypes.insert(0, DType::F64);
        }
        t.push(Target {
            name: "wgpu",
            device,
            dtypes,
        });
    }
    t
}

fn values<const D: usize>(t: Tensor<D>) -> Vec<f64> {
    t.into_data().convert::<f64>().try_to_vec::<f64>().unwrap()
}

fn tensor<const D: usize>(v: &[f64], shape: [usize; D], device: &Device, dt: DType) -> Tensor<D> {
    Tensor::from_data(TensorData::new(v.to_vec(), shape), (device, dt))
}

fn input(rank: usize, tag: usize, len: usize) -> Vec<f64> {
    (0..len)
        .map(|i| (((rank * 37 + tag * 11 + i * 7) % 19) as f64 - 9.0) / 8.0)
        .collect()
}

type Case = (
    &'static str,
    [usize; 2],
    fn(Tensor<2>, &HostCollective<ruda_comm::LocalCommunicator>) -> Result<Tensor<2>, Error>,
);

/// The operations under test, on `[rows(r), 6]` inputs (rows differ by rank).
fn cases() -> Vec<Case> {
    vec![
        ("all_reduce", [3, 6], |x, g| x.all_reduce(g)),
        ("all_gather", [2, 6], |x, g| x.all_gather(g, 0)),
        ("reduce_scatter", [5, 6], |x, g| x.reduce_scatter(g, 0)),
        ("broadcast", [3, 6], |x, g| x.broadcast(g, g.size() - 1)),
        ("all_to_all", [3, 6], |x, g| {
            let n = g.size();
            let counts: Vec<usize> = (0..n).map(|p| usize::from(p < 3)).collect();
            let x = x.narrow(0, 0, counts.iter().sum());
            x.all_to_all(g, 0, &counts)
        }),
        ("copy_to+reduce_from", [3, 6], |x, g| {
            x.copy_to(g)?.reduce_from(g)
        }),
        ("scatter_to+gather_from", [3, 6], |x, g| {
            x.scatter_to(g, 1)?.gather_from(g, 1)
        }),
        ("transpose", [2, 6], |x, g| {
            x.transpose_over(
                g,
                TransposeAxes {
                    split_in: 0,
                    split_out: 1,
                },
            )
        }),
        ("halo_exchange", [3, 6], |x, g| x.halo_exchange(g, 0, 1)),
        ("halo_reduce", [5, 6], |x, g| x.halo_reduce(g, 0, 1, 3)),
    ]
}

/// Forward, gradient and Σ⟨Ax, w⟩ − Σ⟨x, Aᵀw⟩ of one case on one device.
fn run_case(
    n: usize,
    case: &Case,
    device: &Device,
    dt: DType,
) -> Vec<(Vec<f64>, Vec<f64>, f64, f64)> {
    let (_, shape, op) = *case;
    world(n)
        .run(|c| {
            let g = HostCollective::new(c);
            let me = g.rank();
            let sums = g.split(Some(0), 0)?.unwrap();
            let x0 = input(me, 1, shape[0] * shape[1]);
            let dev = device.clone().autodiff();
            let x = tensor(&x0, shape, &dev, dt).require_grad();
            let y = op(x.clone(), &g)?;
            let w0 = input(me, 2, y.dims().iter().product());
            let w = tensor(&w0, y.dims(), &dev, dt);
            let yv = values(y.clone());
            let grads = (y * w).sum().backward();
            let gx = values(x.grad(&grads).expect("a gradient"));
            let dot = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(p, q)| p * q).sum::<f64>();
            let host = Device::flex();
            let lhs =
                values(tensor(&[dot(&yv, &w0)], [1], &host, DType::F64).all_reduce(&sums)?)[0];
            let rhs =
                values(tensor(&[dot(&x0, &gx)], [1], &host, DType::F64).all_reduce(&sums)?)[0];
            Ok::<_, Error>((yv, gx, lhs, rhs))
        })
        .unwrap_or_else(|e| panic!("{} on {n} ranks ({dt:?}): {e}", case.0))
}

#[test]
fn every_operation_on_every_backend_matches_flex_f64() {
    let all = targets();
    for t in &all {
        eprintln!("backend under test: {} {:?}", t.name, t.dtypes);
    }
    assert_eq!(all.len(), if cfg!(feature = "wgpu") { 2 } else { 1 });
    for n in [1, 2, 3] {
        for case in cases() {
            let reference = run_case(n, &case, &Device::flex(), DType::F64);
            for target in targets() {
                for &dt in &target.dtypes {
                    let got = run_case(n, &case, &target.device, dt);
                    let tol = if dt == DType::F64 { 1e-12 } else { 1e-5 };
                    for (r, (g, want)) in got.iter().zip(&reference).enumerate() {
                        let what = format!(
                            "{} on {} ({dt:?}), {n} ranks, rank {r}",
                            case.0, target.name
                        );
                        let close = |a: &[f64], b: &[f64], part: &str| {
                            assert_eq!(a.len(), b.len(), "{what}: {part} length");
                            for (x, y) in a.iter().zip(b) {
                                assert!(
                                    (x - y).abs() <= tol * (1.0 + y.abs()),
                                    "{what}: {part} {x} vs {y}"
                                );
                            }
                        };
                        close(&g.0, &want.0, "forward");
                        close(&g.1, &want.1, "gradient");
                        // Replicated operands count once (tests/primitives.rs
                        // checks those cases); here: varying → varying only.
                        let varying = !case.0.contains('+');
                        assert!(
                            !varying || (g.2 - g.3).abs() <= tol * (1.0 + g.2.abs()),
                            "{what}: adjoint identity {} vs {}",
                            g.2,
                            g.3
                        );
                    }
                }
            }
        }
    }
}
