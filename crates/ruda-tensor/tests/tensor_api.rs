//! The operations on Burn's user-facing `Tensor<D>`: the methods of
//! `TensorExt`/`IntTensorExt` over any group (world, split, grid groups)
//! give the same values as the primitive-level functions, gradients through
//! `Tensor::backward` equal those on `Autodiff<Flex>`, f64 stays f64, every
//! autodiff mode Burn's dispatch offers works, and the seed's grid-bound
//! names are the same operations.

mod common;

use burn_backend::ops::FloatTensorOps;
use burn_flex::Flex;
use burn_tensor::{DType, Device, Int, Tensor, TensorData};
use common::*;
use ruda_tensor::TransposeAxes;
use ruda_tensor::{
    Error, Group, HostCollective, IntTensorExt, ProcessGrid, TensorExt, primitives,
    tensor_api as ta,
};

fn values<const D: usize>(t: Tensor<D>) -> Vec<f64> {
    t.into_data().convert::<f64>().try_to_vec::<f64>().unwrap()
}

fn f64_tensor<const D: usize>(v: Vec<f64>, shape: [usize; D], device: &Device) -> Tensor<D> {
    Tensor::from_data(TensorData::new(v, shape), (device, DType::F64))
}

#[test]
fn every_method_matches_its_primitive_on_world_and_split_groups() {
    for n in [1, 2, 3, 4] {
        world(n)
            .run(|c| {
                let world = HostCollective::new(c);
                let me = world.rank();
                // A sub-group: even and odd ranks.
                let sub = world.split(Some((me % 2) as u32), 0)?.unwrap();
                for g in [&world, &sub] {
                    let k = g.rank();
                    let dev = Device::flex();
                    let rows = 2 + k; // uneven
                    let v: Vec<f64> = (0..rows * 3).map(|i| (me * 100 + i) as f64).collect();
                    let x = || f64_tensor(v.clone(), [rows, 3], &dev);
                    let p = || float(v.clone(), &[rows, 3]);
                    let got = values(x().all_gather(g, 0)?);
                    let want = read_float::<f64>(primitives::all_gather::<Flex>(g, p(), 0)?).0;
                    assert_eq!(got, want);
                    // A gather along dim 0 of every rank's rows, in rank order.
                    assert_eq!(got.len(), (0..g.size()).map(|r| (2 + r) * 3).sum::<usize>());
                    let even =
                        |len: usize| f64_tensor(vec![me as f64 + 1.0; len * 3], [len, 3], &dev);
                    let s = g.size();
                    let sum_all: f64 = (0..world.size())
                        .filter(|&w| std::ptr::eq(g, &world) || w % 2 == me % 2)
                        .map(|w| w as f64 + 1.0)
                        .sum();
                    assert_eq!(values(even(2).all_reduce(g)?), vec![sum_all; 6]);
                    assert_eq!(values(even(2).reduce_from(g)?), vec![sum_all; 6]);
                    let rs = values(even(s + 1).reduce_scatter(g, 0)?);
                    let mine = if k == 0 { 2 } else { 1 };
                    assert_eq!(rs, vec![sum_all; mine * 3]);
                    let b =
                        values(f64_tensor(vec![me as f64; 3], [1, 3], &dev).broadcast(g, s - 1)?);
                    let root_world = if std::ptr::eq(g, &world) {
                        s - 1
                    } else {
                        me % 2 + 2 * (s - 1)
                    };
                    assert_eq!(b, vec![root_world as f64; 3]);
                    let counts: Vec<usize> = (0..s).map(|p| (k + p) % 2).collect();
                    let total: usize = counts.iter().sum();
                    let av: Vec<f64> = (0..total * 3).map(|i| (me * 10 + i) as f64).collect();
                    let a = f64_tensor(av.clone(), [total, 3], &dev);
                    let got = values(a.all_to_all(g, 0, &counts)?);
                    let want = read_float::<f64>(primitives::all_to_all::<Flex>(
                        g,
                        float(av, &[total, 3]),
                        0,
                        &counts,
                    )?)
                    .0;
                    assert_eq!(got, want);
                    assert_eq!(values(x().copy_to(g)?), v);
                    let sc = values(even(s + 2).scatter_to(g, 0)?);
                    let mine = (s + 2) / s + usize::from(k < (s + 2) % s);
                    assert_eq!(sc.len(), mine * 3);
                    assert_eq!(
                        values(x().gather_from(g, 0)?),
                        values(x().gather_from_copy_to(g, 0)?)
                    );
                    let sizes: Vec<usize> = (0..s).map(|r| 2 + r).collect();
                    assert_eq!(
                        values(x().gather_from_sizes(g, 0, &sizes)?),
                        values(x().gather_from(g, 0)?)
                    );
                    assert_eq!(
                        values(even(s + 1).reduce_from_scatter_to(g, 0)?),
                        values(even(s + 1).reduce_scatter(g, 0)?)
                    );
                    // Transpose: split along dim 0 now (uneven), along dim 1 next.
                    let wide: Vec<f64> = (0..rows * 5).map(|i| (me * 100 + i) as f64).collect();
                    let t = f64_tensor(wide.clone(), [rows, 5], &dev).transpose_over(
                        g,
                        TransposeAxes {
                            split_in: 0,
                            split_out: 1,
                        },
                    )?;
                    let want = read_float::<f64>(primitives::transpose::<Flex>(
                        g,
                        float(wide, &[rows, 5]),
                        TransposeAxes {
                            split_in: 0,
                            split_out: 1,
                        },
                        None,
                    )?)
                    .0;
                    assert_eq!(values(t), want);
                    let h = x().halo_exchange(g, 0, 1)?;
                    assert_eq!(h.dims(), [rows + 2, 3]);
                    let back = h.halo_reduce(g, 0, 1, rows)?;
                    let want = read_float::<f64>(primitives::halo_reduce::<Flex>(
                        g,
                        primitives::halo_exchange::<Flex>(g, p(), 0, 1)?,
                        0,
                        1,
                        rows,
                    )?)
                    .0;
                    assert_eq!(values(back), want);
                }
                Ok::<_, Error>(())
            })
            .unwrap_or_else(|e| panic!("n={n}: {e}"));
    }
}

#[test]
fn f64_stays_f64_and_dtype_mismatches_are_errors_everywhere() {
    world(2)
        .run(|c| {
            let g = HostCollective::new(c);
            let x = f64_tensor(vec![0.1, 0.2], [2], &Device::flex());
            let y = x.all_reduce(&g)?;
            assert_eq!(y.dtype(), DType::F64);
            assert_eq!(values(y), vec![0.2, 0.4]); // 0.1 + 0.1 in f64, exactly
            Ok::<_, Error>(())
        })
        .unwrap();
    let errs = errors(world(2).run_each(|c| {
        let g = HostCollective::new(c);
        let dev = Device::flex();
        let x = if g.rank() == 0 {
            f64_tensor(vec![1.0; 2], [2], &dev)
        } else {
            Tensor::<1>::from_floats([1.0, 2.0], &dev) // the default f32
        };
        x.all_reduce(&g).map(|_| ())
    }));
    for e in errs {
        assert!(
            matches!(
                e,
                Error::DTypeMismatch {
                    offender: 1,
                    expected: DType::F64,
                    got: DType::F32,
                    ..
                }
            ),
            "{e}"
        );
    }
}

#[test]
fn integer_methods_move_bits_exactly() {
    world(3)
        .run(|c| {
            let g = HostCollective::new(c);
            let me = g.rank() as i64;
            let dev = Device::flex();
            let x = Tensor::<2, Int>::from_data(
                TensorData::new(vec![i64::MIN + me, i64::MAX - me], [1, 2]),
                (&dev, DType::I64),
            );
            let all = x.clone().all_gather(&g, 0)?;
            assert_eq!(
                all.into_data().try_to_vec::<i64>().unwrap(),
                (0..3)
                    .flat_map(|r| [i64::MIN + r, i64::MAX - r])
                    .collect::<Vec<_>>()
            );
            let (t, got) = x.all_to_all(&g, 1, &[1, 1, 0])?;
            // Ranks 0 and 1 receive one column from every rank; rank 2 nothing.
            let want: Vec<usize> = if me < 2 { vec![1, 1, 1] } else { vec![0, 0, 0] };
            assert_eq!(got, want);
            assert_eq!(t.dims(), [1, if me < 2 { 3 } else { 0 }]);
            Ok::<_, Error>(())
        })
        .unwrap();
}

#[test]
fn gradients_flow_through_tensor_backward_in_every_autodiff_mode() {
    for balanced in [false, true] {
        world(4)
            .run(|c| {
                let g = ProcessGrid::new(c, 2, 2)?;
                let h = 3 + g.polar_rank();
                let me = g.world().rank();
                let v: Vec<f64> = (0..2 * h * 4).map(|i| ((me * 7 + i) % 5) as f64).collect();
                let w: Vec<f64> = (0..2 * (h + 2) * 4)
                    .map(|i| ((i * 3) % 7) as f64 - 3.0)
                    .collect();
                let dev = if balanced {
                    Device::flex().autodiff().gradient_checkpointing()
                } else {
                    Device::flex().autodiff()
                };
                let x = f64_tensor(v.clone(), [2, h, 4], &dev).require_grad();
                let wt = f64_tensor(w.clone(), [2, h + 2, 4], &dev);
                let y = x.clone().halo_exchange(g.polar(), -2, 1)?;
                let grads = (y * wt).sum().backward();
                let got = values(x.grad(&grads).unwrap());
                // The same at primitive level on Autodiff<Flex>.
                let xp = leaf(v, &[2, h, 4]);
                let yp = primitives::halo_exchange::<Ad>(g.polar(), xp.clone(), -2, 1)?;
                let wp = constant(w, &[2, h + 2, 4]);
                let want = grad_of(Ad::float_sum(Ad::float_mul(yp, wp)), &xp);
                assert_eq!(got, want);
                Ok::<_, Error>(())
            })
            .unwrap_or_else(|e| panic!("balanced={balanced}: {e}"));
    }
}

#[test]
fn the_seed_grid_names_are_the_methods_on_the_grid_groups() {
    world(4)
        .run(|c| {
            let g = ProcessGrid::new(c, 2, 2)?;
            let me = g.world().rank();
            let h = 3 + g.polar_rank(); // 3 and 4 latitudes
            let v: Vec<f64> = (0..2 * h * 4).map(|i| (me * 100 + i) as f64).collect();
            let dev = Device::flex();
            let x = || f64_tensor(v.clone(), [2, h, 4], &dev);
            assert_eq!(
                values(ta::polar_halo_exchange(&g, x(), 1)?),
                values(x().halo_exchange(g.polar(), -2, 1)?)
            );
            assert_eq!(
                values(ta::distributed_transpose_azimuth(
                    &g,
                    x(),
                    (0, -1),
                    &[4, 4]
                )?),
                values(x().transpose_over(
                    g.azimuth(),
                    TransposeAxes {
                        split_in: -1,
                        split_out: 0
                    }
                )?)
            );
            assert_eq!(
                values(ta::gather_from_polar_region(&g, x(), 1, &[3, 4])?),
                values(x().gather_from(g.polar(), 1)?)
            );
            assert_eq!(
                values(ta::reduce_from_scatter_to_azimuth_region(&g, x(), -1)?),
                values(x().reduce_from_scatter_to(g.azimuth(), -1)?)
            );
            Ok::<_, Error>(())
        })
        .unwrap();
}
