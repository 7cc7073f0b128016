//! The device-resident group ([`DeviceGroup`] from a [`DeviceWorld`]): every
//! operation of the tensor layer, run unchanged on it, gives the same bits
//! as the host-staged path ([`HostCollective`] over a `LocalWorld`) —
//! forward values and, on autodiff, gradients — for every op, world sizes 1
//! to 4 (and 8 for the sums), uneven layouts, f64/f32 with gradients and
//! f16/bf16 forward (reductions accumulate in f32 on both paths); on a
//! process grid too. Failures end in the same typed errors as on the local
//! transport. Flex always; wgpu (lavapipe) with feature `wgpu`, where
//! tensors stay on the wgpu device.

mod common;

use ruda_tensor::TransposeAxes;
use std::time::{Duration, Instant};

use burn_tensor::{DType, Device, Int, Tensor, TensorData};
use common::world;
use ruda_comm::{CommError, LocalCommunicator, PeerFailureCause, RankError};
use ruda_tensor::{
    DeviceGroup, DeviceWorld, Error, Group, HostCollective, IntTensorExt, ProcessGrid, TensorExt,
    replica,
};

/// Every case under test: a linear map of a `[rows(r), 6]` input.
#[derive(Clone, Copy, Debug)]
enum Case {
    AllReduce,
    AllGather0,
    AllGather1,
    ReduceScatter0,
    ReduceScatter1,
    Broadcast,
    AllToAll,
    CopyReduce,
    ScatterGather,
    GatherFromCopyTo,
    ReduceFromScatterTo,
    Transpose,
    HaloExchange,
    HaloReduce,
    SeedAllReduce,
    SeedAllGather,
    SeedReduceScatter,
    SeedAllToAll,
    RankSlice,
    AllReduceAvg,
    AllReduceMax,
    ReduceScatterMin,
}

const CASES: [Case; 22] = [
    Case::AllReduce,
    Case::AllGather0,
    Case::AllGather1,
    Case::ReduceScatter0,
    Case::ReduceScatter1,
    Case::Broadcast,
    Case::AllToAll,
    Case::CopyReduce,
    Case::ScatterGather,
    Case::GatherFromCopyTo,
    Case::ReduceFromScatterTo,
    Case::Transpose,
    Case::HaloExchange,
    Case::HaloReduce,
    Case::SeedAllReduce,
    Case::SeedAllGather,
    Case::SeedReduceScatter,
    Case::SeedAllToAll,
    Case::RankSlice,
    Case::AllReduceAvg,
    Case::AllReduceMax,
    Case::ReduceScatterMin,
];

const COLS: usize = 8;

impl Case {
    /// Rank `r`'s input rows in a group of `n`.
    fn rows(self, r: usize, n: usize) -> usize {
        match self {
            Case::AllGather0 | Case::GatherFromCopyTo => 1 + r % 3, // uneven
            Case::ReduceScatter0 | Case::ReduceFromScatterTo | Case::ReduceScatterMin => {
                2 * n + 1 // uneven chunks
            }
            Case::AllToAll => (0..n).map(|p| (r + p) % 3).sum(),
            Case::HaloReduce => 5,
            Case::SeedReduceScatter | Case::SeedAllToAll | Case::RankSlice => 2 * n,
            _ => 3,
        }
    }

    fn apply<G: Group>(self, x: Tensor<2>, g: &G) -> Result<Tensor<2>, Error> {
        let (me, n) = (g.rank(), g.size());
        match self {
            Case::AllReduce => x.all_reduce(g),
            Case::AllGather0 => x.all_gather(g, 0),
            Case::AllGather1 => x.all_gather(g, 1),
            Case::ReduceScatter0 => x.reduce_scatter(g, 0),
            Case::ReduceScatter1 => x.reduce_scatter(g, -1),
            Case::Broadcast => x.broadcast(g, n - 1),
            Case::AllToAll => {
                let counts: Vec<usize> = (0..n).map(|p| (me + p) % 3).collect();
                x.all_to_all(g, 0, &counts)
            }
            Case::CopyReduce => x.copy_to(g)?.reduce_from(g),
            Case::ScatterGather => x.scatter_to(g, 1)?.gather_from(g, 1),
            Case::GatherFromCopyTo => x.gather_from_copy_to(g, 0),
            Case::ReduceFromScatterTo => x.reduce_from_scatter_to(g, 0),
            Case::Transpose => x.transpose_over(
                g,
                TransposeAxes {
                    split_in: 0,
                    split_out: 1,
                },
            ),
            Case::HaloExchange => x.halo_exchange(g, 0, 1),
            Case::HaloReduce => x.halo_reduce(g, 0, 1, 3),
            Case::SeedAllReduce => replica::all_reduce(x, g),
            Case::SeedAllGather => replica::all_gather(x, g, n),
            Case::SeedReduceScatter => replica::reduce_scatter(x, g, n),
            Case::SeedAllToAll => replica::all_to_all(x, g),
            Case::RankSlice => replica::rank_slice(x, g),
            Case::AllReduceAvg => x.all_reduce_with(g, ruda_comm::ReduceOp::Mean),
            Case::AllReduceMax => x.all_reduce_with(g, ruda_comm::ReduceOp::Max),
            Case::ReduceScatterMin => x.reduce_scatter_with(g, 0, ruda_comm::ReduceOp::Min),
        }
    }
}

fn input(rank: usize, tag: usize, len: usize) -> Vec<f64> {
    (0..len)
        .map(|i| (((rank * 37 + tag * 11 + i * 7) % 19) as f64 - 9.0) / 8.0 + 1e-3 * i as f64)
        .collect()
}

fn tensor<const D: usize>(v: &[f64], shape: [usize; D], device: &Device, dt: DType) -> Tensor<D> {
    Tensor::from_data(TensorData::new(v.to_vec(), shape), (device, dt))
}

/// The bits of a tensor's values in its own dtype (as u64 words).
fn bits<const D: usize>(t: Tensor<D>) -> Vec<u64> {
    let d = t.into_data();
    match d.dtype() {
        DType::F64 => d
            .try_to_vec::<f64>()
            .unwrap()
            .iter()
            .map(|v| v.to_bits())
            .collect(),
        DType::F32 => d
            .try_to_vec::<f32>()
            .unwrap()
            .iter()
            .map(|v| u64::from(v.to_bits()))
            .collect(),
        DType::F16 => d
            .try_to_vec::<half::f16>()
            .unwrap()
            .iter()
            .map(|v| u64::from(v.to_bits()))
            .collect(),
        DType::BF16 => d
            .try_to_vec::<half::bf16>()
            .unwrap()
            .iter()
            .map(|v| u64::from(v.to_bits()))
            .collect(),
        other => panic!("unexpected dtype {other:?}"),
    }
}

/// What one rank produced: output shape and bits, gradient bits.
type Outcome = (Vec<usize>, Vec<u64>, Option<Vec<u64>>);

/// One rank's run of `case` on `g`: forward, and with `grad` the gradient
/// of Σ w ⊙ y on an autodiff device.
fn one_rank<G: Group>(
    case: Case,
    g: &G,
    device: &Device,
    dt: DType,
    grad: bool,
) -> Result<Outcome, Error> {
    let (me, n) = (g.rank(), g.size());
    let rows = case.rows(me, n);
    let dev = if grad {
        device.clone().autodiff()
    } else {
        device.clone()
    };
    let mut x = tensor(&input(me, 1, rows * COLS), [rows, COLS], &dev, dt);
    if grad {
        x = x.require_grad();
    }
    let y = case.apply(x.clone(), g)?;
    let shape = y.dims().to_vec();
    let yb = bits(y.clone());
    let gb = if grad {
        let w = tensor(
            &input(me, 2, shape.iter().product()),
            [shape[0], shape[1]],
            &dev,
            dt,
        );
        let grads = ruda_tensor::try_backward(|| (y * w).sum().backward())?;
        Some(bits(x.grad(&grads).expect("a gradient")))
    } else {
        None
    };
    Ok((shape, yb, gb))
}

fn host_run(case: Case, n: usize, device: &Device, dt: DType, grad: bool) -> Vec<Outcome> {
    world(n)
        .run(|c| one_rank(case, &HostCollective::new(c), device, dt, grad))
        .unwrap_or_else(|e| panic!("host {case:?} on {n} ranks ({dt:?}): {e}"))
}

fn device_run(case: Case, n: usize, device: &Device, dt: DType, grad: bool) -> Vec<Outcome> {
    DeviceWorld::shared(n, device.clone())
        .timeout(Duration::from_secs(60))
        .run(|g, d| one_rank(case, &g, d, dt, grad))
        .unwrap_or_else(|e| panic!("device {case:?} on {n} ranks ({dt:?}): {e}"))
}

/// The devices under test and their float types with gradients (and
/// forward-only types).
fn targets() -> Vec<(&'static str, Device, Vec<DType>, Vec<DType>)> {
    #[allow(unused_mut)]
    let mut t = vec![(
        "flex",
        Device::flex(),
        vec![DType::F64, DType::F32],
        vec![DType::F16, DType::BF16],
    )];
    #[cfg(feature = "wgpu")]
    {
        let device = wgpu_device();
        let f64_ok = std::panic::catch_unwind(|| {
            Tensor::<1>::from_data(TensorData::new(vec![1.0f64], [1]), (&device, DType::F64))
                .into_data()
        })
        .is_ok();
        let mut with_grad = vec![DType::F32];
        if f64_ok {
            with_grad.insert(0, DType::F64);
        }
        t.push(("wgpu", device, with_grad, vec![DType::F16]));
    }
    t
}

#[cfg(feature = "wgpu")]
fn wgpu_device() -> Device {
    if std::env::var_os("XDG_RUNTIME_DIR").is_none() {
        // SAFETY: set before any thread of this test reads the environment
        // (each test binary calls this first, single-threaded per test).
        unsafe { std::env::set_var("XDG_RUNTIME_DIR", std::env::temp_dir()) };
    }
    Device::wgpu(burn_tensor::DeviceKind::Cpu)
}

#[test]
fn every_op_equals_the_host_path_bit_for_bit() {
    for (name, device, with_grad, forward_only) in targets() {
        for case in CASES {
            // Every world size on Flex; 1 to 4 on wgpu (lavapipe is slow).
            let sizes: &[usize] = if name == "flex" {
                &[1, 2, 3, 4, 5, 6, 7, 8]
            } else {
                &[1, 2, 3, 4]
            };
            for &n in sizes {
                for &dt in &with_grad {
                    let want = host_run(case, n, &device, dt, true);
                    let got = device_run(case, n, &device, dt, true);
                    assert_eq!(got, want, "{name}: {case:?} on {n} ranks, {dt:?}");
                }
                for &dt in &forward_only {
                    let want = host_run(case, n, &device, dt, false);
                    let got = device_run(case, n, &device, dt, false);
                    assert_eq!(got, want, "{name}: {case:?} on {n} ranks, {dt:?}");
                }
            }
        }
    }
}

#[test]
fn sums_on_eight_ranks_are_the_same_bits_on_every_rank() {
    for case in [
        Case::AllReduce,
        Case::ReduceScatter0,
        Case::SeedReduceScatter,
    ] {
        let want = host_run(case, 8, &Device::flex(), DType::F32, true);
        let got = device_run(case, 8, &Device::flex(), DType::F32, true);
        assert_eq!(got, want, "{case:?}");
        if matches!(case, Case::AllReduce) {
            assert!(got.iter().all(|o| o.1 == got[0].1));
        }
    }
}

/// The device-resident all-reduce against an f64 reference on both paths:
/// fewer elements than ranks, element counts that do not divide the rank
/// count, empty tensors, and an input the caller still holds (which must
/// come back unchanged: nothing is written into a shared tensor).
#[test]
fn all_reduce_chunks_every_element_count() {
    for (n, shape) in [
        (3, [1, 1]),
        (8, [5, 1]),
        (4, [6, 7]),
        (5, [0, 3]),
        (2, [1, 1]),
    ] {
        let len = shape[0] * shape[1];
        let f = |g: &dyn Fn(Tensor<2>) -> Result<Tensor<2>, Error>, me: usize| {
            let x = tensor(&input(me, 3, len), shape, &Device::flex(), DType::F64);
            let kept = x.clone();
            let y = g(x)?;
            assert_eq!(y.dims(), shape);
            assert_eq!(
                bits(kept),
                bits(tensor(
                    &input(me, 3, len),
                    shape,
                    &Device::flex(),
                    DType::F64
                )),
                "the caller's tensor is unchanged"
            );
            Ok::<_, Error>(bits(y))
        };
        let on_device = DeviceWorld::shared(n, Device::flex())
            .run(|g, _| f(&|x| x.all_reduce(&g), g.rank()))
            .unwrap();
        let staged = world(n)
            .run(|c| {
                let g = HostCollective::new(c);
                f(&|x| x.all_reduce(&g), g.rank())
            })
            .unwrap();
        let want: Vec<u64> = (0..len)
            .map(|i| {
                (0..n)
                    .map(|r| input(r, 3, len)[i])
                    .reduce(|a, b| a + b)
                    .unwrap()
                    .to_bits()
            })
            .collect();
        for got in [on_device, staged] {
            assert_eq!(got, vec![want.clone(); n], "{n} ranks, shape {shape:?}");
        }
    }
}

/// Half-precision sums accumulate in f32 and round once, on both paths:
/// 2048 + 1 + 1 is 2050 (an f16 running sum would stay at 2048, whose
/// spacing is 2); the same with bf16 at 256 (spacing 2).
#[test]
fn half_precision_sums_accumulate_in_f32() {
    for (dt, big) in [(DType::F16, 2048.0), (DType::BF16, 256.0)] {
        let value = |me: usize| if me == 0 { big } else { 1.0 };
        let want = big + 2.0;
        for on_device in [true, false] {
            let f = |g: &dyn Fn(Tensor<1>) -> Result<Tensor<1>, Error>, me: usize| {
                let x = tensor(&[value(me); 4], [4], &Device::flex(), dt);
                let y = g(x)?;
                assert_eq!(y.dtype(), dt);
                Ok::<_, Error>(y.into_data().convert::<f64>().try_to_vec::<f64>().unwrap())
            };
            let out = if on_device {
                DeviceWorld::shared(3, Device::flex())
                    .run(|g, _| f(&|x| x.all_reduce(&g), g.rank()))
                    .unwrap()
            } else {
                world(3)
                    .run(|c| {
                        let g = HostCollective::new(c);
                        f(&|x| x.all_reduce(&g), g.rank())
                    })
                    .unwrap()
            };
            assert_eq!(
                out,
                vec![vec![want; 4]; 3],
                "{dt:?}, device path {on_device}"
            );
        }
    }
}

#[test]
fn integer_tensors_move_bit_for_bit() {
    fn ints<G: Group>(g: &G, device: &Device) -> Result<(Vec<i64>, Vec<i64>), Error> {
        let (me, n) = (g.rank(), g.size());
        let tag = |rows: usize| -> Vec<i64> {
            (0..rows * 2)
                .map(|i| ((me as i64) << 40) | i as i64)
                .collect()
        };
        let int = |rows: usize| {
            Tensor::<2, Int>::from_data(TensorData::new(tag(rows), [rows, 2]), (device, DType::I64))
        };
        let all = int(me + 1).all_gather(g, 0)?; // uneven
        let (ex, _) = int(n).all_to_all(g, 0, &vec![1; n])?;
        Ok((
            all.into_data().try_to_vec::<i64>().unwrap(),
            ex.into_data().try_to_vec::<i64>().unwrap(),
        ))
    }
    for (_, device, _, _) in targets() {
        for n in [1, 2, 3] {
            let want = world(n)
                .run(|c| ints(&HostCollective::new(c), &device))
                .unwrap();
            let got = DeviceWorld::shared(n, device.clone())
                .run(|g, d| ints(&g, d))
                .unwrap();
            assert_eq!(got, want, "{n} ranks");
        }
    }
}

/// A model on a polar × azimuth grid: transposes, halos, gathers, sums.
fn grid_model<G: Group>(
    grid: &ProcessGrid<G>,
    device: &Device,
) -> Result<(Vec<u64>, Vec<u64>), Error> {
    let me = grid.world().rank();
    let (p, a) = (grid.polar_rank(), grid.azimuth_rank());
    let dev = device.clone().autodiff();
    let rows = 3 + p % 2; // uneven polar chunks
    let cols = 2 * grid.azimuth_size() + a % 2;
    let x = tensor(
        &input(me, 3, rows * cols * 2),
        [2, rows, cols],
        &dev,
        DType::F64,
    )
    .require_grad();
    let t = x.clone().transpose_over(
        grid.azimuth(),
        TransposeAxes {
            split_in: 2,
            split_out: 1,
        },
    )?;
    let t = (t.clone() * t).transpose_over(
        grid.azimuth(),
        TransposeAxes {
            split_in: 1,
            split_out: 2,
        },
    )?;
    let h = t.halo_exchange(grid.polar(), 1, 1)?;
    let q = (h.clone() * h).sum_dim(0);
    let r = q.halo_reduce(grid.polar(), 1, 1, rows)?;
    let full = r
        .gather_from(grid.polar(), 1)?
        .gather_from(grid.azimuth(), 2)?;
    let y = replica::all_reduce(full.sum().reshape([1, 1]), grid.world())?;
    let grads = ruda_tensor::try_backward(|| y.clone().backward())?;
    Ok((bits(y), bits(x.grad(&grads).expect("a gradient"))))
}

#[test]
fn a_process_grid_runs_unchanged_with_equal_gradients() {
    for (p, a) in [(1, 1), (2, 1), (1, 2), (2, 2), (3, 1), (1, 3)] {
        let n = p * a;
        let want = world(n)
            .run(|c| grid_model(&ProcessGrid::new(c, p, a)?, &Device::flex()))
            .unwrap();
        let got = DeviceWorld::shared(n, Device::flex())
            .run(|g, d| grid_model(&ProcessGrid::from_group(g, p, a)?, d))
            .unwrap();
        assert_eq!(got, want, "grid {p}x{a}");
    }
}

#[test]
fn one_device_per_rank_gives_the_same_results() {
    // Rank r's tensors on devices[r] (on Flex, the CPU is every device;
    // with wgpu, see `wgpu_ranks_on_two_devices`).
    let n = 3;
    let want = device_run(Case::ReduceScatter0, n, &Device::flex(), DType::F64, true);
    let got = DeviceWorld::per_rank(vec![Device::flex(); n])
        .run(|g, d| one_rank(Case::ReduceScatter0, &g, d, DType::F64, true))
        .unwrap();
    assert_eq!(got, want);
}

#[test]
fn the_contract_traits_run_on_the_device_group() {
    use burn_flex::Flex;
    use ruda_tensor::{ReplicatedTensorCollective, TensorCollective};
    let out = DeviceWorld::shared(3, burn_flex::FlexDevice)
        .run(|g, d| {
            let me = g.rank() as f64;
            let x = <Flex as burn_backend::ops::FloatTensorOps<Flex>>::float_from_data(
                TensorData::new(vec![me, me + 0.5], [1, 2]),
                d,
            );
            let all = TensorCollective::<Flex>::all_gather_float(&g, x.clone())?;
            let sum = ReplicatedTensorCollective::<Flex>::all_reduce_sum(&g, x)?;
            let read = |t| {
                burn_backend::read_sync(
                    <Flex as burn_backend::ops::FloatTensorOps<Flex>>::float_into_data(t),
                )
                .unwrap()
                .try_to_vec::<f64>()
                .unwrap()
            };
            Ok::<_, Error>((read(all), read(sum)))
        })
        .unwrap();
    for (all, sum) in out {
        assert_eq!(all, vec![0.0, 0.5, 1.0, 1.5, 2.0, 2.5]);
        assert_eq!(sum, vec![3.0, 4.5]);
    }
}

// ---- failures: the same typed errors as on the local transport --------

fn errors<R: std::fmt::Debug>(results: Vec<Result<R, RankError<Error>>>) -> Vec<Error> {
    results
        .into_iter()
        .enumerate()
        .map(|(r, x)| match x {
            Err(RankError::Failed(e)) => e,
            other => panic!("rank {r}: expected an error, got {other:?}"),
        })
        .collect()
}

fn device_world(n: usize) -> DeviceWorld<Device> {
    DeviceWorld::shared(n, Device::flex()).timeout(Duration::from_secs(20))
}

#[test]
fn mismatched_dtypes_shapes_and_ops_fail_on_every_rank() {
    let out = device_world(3).run_each(|g, d| {
        let dt = if g.rank() == 2 {
            DType::F32
        } else {
            DType::F64
        };
        tensor(&[1.0; 4], [2, 2], d, dt).all_reduce(&g).map(|_| ())
    });
    for e in errors(out) {
        assert!(matches!(e, Error::DTypeMismatch { offender: 2, .. }), "{e}");
    }
    let out = device_world(2).run_each(|g, d| {
        let rows = 2 + g.rank();
        tensor(&vec![1.0; rows * 2], [rows, 2], d, DType::F64)
            .all_reduce(&g)
            .map(|_| ())
    });
    for e in errors(out) {
        assert!(matches!(e, Error::ShapeMismatch { offender: 1, .. }), "{e}");
    }
    let out = device_world(2).run_each(|g, d| {
        let x = tensor(&[1.0; 4], [2, 2], d, DType::F64);
        if g.rank() == 0 {
            x.all_reduce(&g).map(|_| ())
        } else {
            x.all_gather(&g, 0).map(|_| ())
        }
    });
    for e in errors(out) {
        assert!(matches!(e, Error::Desync { offender: 1, .. }), "{e}");
    }
}

#[test]
fn a_panicking_rank_fails_its_peers_promptly() {
    let start = Instant::now();
    let out = device_world(3).run_each(|g, d| {
        let x = tensor(&[1.0; 4], [2, 2], d, DType::F64);
        let y = x.all_reduce(&g)?;
        if g.rank() == 1 {
            std::thread::sleep(Duration::from_millis(50));
            panic!("rank 1 fails on purpose");
        }
        y.all_gather(&g, 0).map(|_| ())
    });
    assert!(start.elapsed() < Duration::from_secs(5));
    for (r, res) in out.into_iter().enumerate() {
        match res {
            Err(RankError::Panicked(m)) if r == 1 => assert!(m.contains("on purpose")),
            Err(RankError::Failed(Error::Comm(CommError::PeerFailure {
                peer: 1,
                cause: PeerFailureCause::Panicked,
                ..
            }))) => {}
            other => panic!("rank {r}: {other:?}"),
        }
    }
}

#[test]
fn a_rank_that_skips_the_backward_pass_is_named() {
    let start = Instant::now();
    let out = device_world(2).run_each(|g, d| {
        let x = tensor(&[1.0, 2.0], [2], &d.clone().autodiff(), DType::F64).require_grad();
        let y = x.all_gather(&g, 0)?.sum();
        if g.rank() == 1 {
            return Ok::<_, Error>(None);
        }
        Ok(Some(ruda_tensor::try_backward(|| y.backward()).map(|_| ())))
    });
    assert!(start.elapsed() < Duration::from_secs(5));
    match &out[0] {
        // Rank 1 returned (and dropped its group): either is how it left.
        Ok(Some(Err(Error::Comm(CommError::PeerFailure {
            peer: 1,
            cause: PeerFailureCause::Finished | PeerFailureCause::LeftGroup,
            ..
        })))) => {}
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_device_group_from_a_local_world_of_your_own() {
    // DeviceGroup wraps any rank of a LocalWorld; split and replica groups
    // stay device-resident.
    let out = world(4)
        .run(|c: LocalCommunicator| {
            let g = DeviceGroup::new(c);
            let groups = ruda_comm::ReplicaGroups::new([[3, 1], [0, 2]]).unwrap();
            let sub = g.replica_group(&groups)?.unwrap();
            let x = tensor(&[g.rank() as f64], [1], &Device::flex(), DType::F64);
            let all = x.all_gather(&sub, 0)?;
            Ok::<_, Error>(all.into_data().try_to_vec::<f64>().unwrap())
        })
        .unwrap();
    assert_eq!(
        out,
        vec![
            vec![0.0, 2.0],
            vec![3.0, 1.0],
            vec![0.0, 2.0],
            vec![3.0, 1.0]
        ]
    );
}

#[cfg(feature = "wgpu")]
mod wgpu {
    use super::*;

    #[test]
    fn ranks_on_two_backends_are_a_desync_on_every_rank() {
        // The agreement passes (same shape and dtype), then the exchange of
        // tensor handles finds a Flex tensor and a CubeCL tensor: a typed
        // desync on every rank, never a misread handle.
        let devices = vec![Device::flex(), wgpu_device()];
        let out = DeviceWorld::per_rank(devices)
            .timeout(Duration::from_secs(20))
            .run_each(|g, d| {
                tensor(&[1.0; 4], [2, 2], d, DType::F32)
                    .all_reduce(&g)
                    .map(|_| ())
            });
        for e in errors(out) {
            match e {
                Error::Comm(CommError::Desync { first, other, .. }) => {
                    assert_ne!(first.object, other.object);
                    assert_eq!(first.op, ruda_comm::OpKind::AllGatherObjects);
                }
                other => panic!("{other}"),
            }
        }
    }

    #[test]
    fn ranks_on_two_wgpu_devices() {
        // Rank 0 on wgpu's CPU adapter, rank 1 on the default adapter (on
        // a machine with lavapipe only, the same adapter opened twice: two
        // devices, so peers' tensors move with `to_device`).
        let devices = vec![
            wgpu_device(),
            Device::wgpu(burn_tensor::DeviceKind::DefaultDevice),
        ];
        for case in [
            Case::AllReduce,
            Case::AllGather0,
            Case::ReduceScatter0,
            Case::AllToAll,
        ] {
            let want = host_run(case, 2, &Device::flex(), DType::F32, true);
            let got = DeviceWorld::per_rank(devices.clone())
                .timeout(Duration::from_secs(60))
                .run(|g, d| one_rank(case, &g, d, DType::F32, true))
                .unwrap();
            assert_eq!(got, want, "{case:?}");
        }
    }
}

/// A tensor a rank hands to its peers must be final: on wgpu, Burn's fusion
/// and CubeCL queue each thread's kernels lazily, and before `DeviceGroup`
/// settled its queue at every exchange a peer could read a gradient's
/// buffer before its kernel wrote it (the maximum's gradient came back as
/// a stale buffer's values in 49 of 160 runs of this loop). Repeated
/// because the race was: the matrix above runs each case once.
#[cfg(feature = "wgpu")]
#[test]
fn shared_tensors_are_final_when_peers_read_them() {
    let device = wgpu_device();
    for _ in 0..20 {
        for n in [2, 3] {
            let want = host_run(Case::AllReduceMax, n, &device, DType::F32, true);
            let got = device_run(Case::AllReduceMax, n, &device, DType::F32, true);
            assert_eq!(got, want, "maximum on {n} ranks");
        }
    }
}
