//! Issue 27 (6): tensor `gather_to_root` and `scatter_from_root`, each the
//! other's adjoint. Values against a serial f64 reference and gradients by
//! the adjoint identity (summed over ranks) on 1 to 8 ranks with uneven
//! and zero sizes, along the first and the last axis, roots first and
//! last, on the host-staged and the device-resident group; a bad root,
//! other axes or tracking that differ are errors on every rank.

mod common;

use burn_tensor::{DType, Device, Tensor, TensorData};
use common::{errors, world};
use proptest::prelude::*;
use ruda_tensor::{DeviceWorld, Error, Group, HostCollective, TensorExt, TensorOp, try_backward};

/// A rank's output values, output shape and input gradient.
type Outcome = (Vec<f64>, [usize; 2], Vec<f64>);

/// Rank r's rows (uneven, some zero).
fn rows(r: usize) -> usize {
    (r * 3 + 1) % 4
}

fn ramp(len: usize, seed: usize) -> Vec<f64> {
    (0..len)
        .map(|i| ((i * 7 + seed * 31) % 23) as f64 * 0.25 - 2.0)
        .collect()
}

fn tensor(v: Vec<f64>, shape: [usize; 2], dev: &Device) -> Tensor<2> {
    Tensor::from_data(TensorData::new(v, shape), (dev, DType::F64))
}

fn values(t: Tensor<2>) -> Vec<f64> {
    t.into_data().try_to_vec::<f64>().unwrap()
}

/// `shape` of rank r's part: `rows(r)` along `dim` (0 or 1), 3 across.
fn part_shape(r: usize, dim: usize) -> [usize; 2] {
    if dim == 0 { [rows(r), 3] } else { [3, rows(r)] }
}

/// The concatenation of every rank's part along `dim`, row-major.
fn concat(n: usize, dim: usize, seed: usize) -> (Vec<f64>, [usize; 2]) {
    let parts: Vec<Vec<f64>> = (0..n).map(|r| ramp(3 * rows(r), r + seed)).collect();
    let total: usize = (0..n).map(rows).sum();
    if dim == 0 {
        (parts.concat(), [total, 3])
    } else {
        let mut out = Vec::with_capacity(3 * total);
        for i in 0..3 {
            for (r, p) in parts.iter().enumerate() {
                out.extend_from_slice(&p[i * rows(r)..(i + 1) * rows(r)]);
            }
        }
        (out, [3, total])
    }
}

/// gather_to_root then `sum(w ⊙ y)`: (output, output shape, gradient).
fn gather<G: Group>(g: &G, root: usize, dim: usize) -> Result<Outcome, Error> {
    let me = g.rank();
    let dev = Device::flex().autodiff();
    let x = tensor(ramp(3 * rows(me), me), part_shape(me, dim), &dev).require_grad();
    let neg = if dim == 1 { -1 } else { 0 };
    let y = x.clone().gather_to_root(g, root, neg)?;
    let shape = y.dims();
    let w = tensor(ramp(shape[0] * shape[1], 100 + me), shape, &dev);
    let out = values(y.clone());
    let grads = try_backward(|| (y * w).sum().backward())?;
    Ok((out, shape, values(x.grad(&grads).expect("a gradient"))))
}

#[test]
fn gather_to_root_concatenates_at_the_root_and_scatters_gradients_back() {
    for n in 1..=8 {
        for dim in [0, 1] {
            for root in [0, n - 1] {
                let host = world(n)
                    .run(|c| gather(&HostCollective::new(c), root, dim))
                    .unwrap();
                let device = DeviceWorld::shared(n, Device::flex())
                    .run(|g, _| gather(&g, root, dim))
                    .unwrap();
                assert_eq!(
                    host, device,
                    "{n} ranks, dim {dim}, root {root}: host vs device"
                );
                let (want, want_shape) = concat(n, dim, 0);
                let (mut lhs, mut rhs) = (0.0, 0.0);
                for (r, (out, shape, grad)) in host.iter().enumerate() {
                    if r == root {
                        assert_eq!(out, &want, "{n} ranks dim {dim} root {root}");
                        assert_eq!(shape, &want_shape);
                    } else {
                        assert!(out.is_empty());
                        let mut empty = want_shape;
                        empty[dim] = 0;
                        assert_eq!(shape, &empty);
                    }
                    let w = ramp(shape[0] * shape[1], 100 + r);
                    lhs += out.iter().zip(&w).map(|(a, b)| a * b).sum::<f64>();
                    rhs += ramp(3 * rows(r), r)
                        .iter()
                        .zip(grad)
                        .map(|(a, b)| a * b)
                        .sum::<f64>();
                    assert_eq!(grad.len(), 3 * rows(r));
                }
                assert!(
                    (lhs - rhs).abs() <= 1e-12 * lhs.abs().max(1.0),
                    "{lhs} vs {rhs}"
                );
            }
        }
    }
}

/// scatter_from_root of a 7-row tensor, then `sum(w ⊙ y)`: (output,
/// gradient of the input).
fn scatter<G: Group>(g: &G, root: usize, dim: usize, len: usize) -> Result<Outcome, Error> {
    let me = g.rank();
    let dev = Device::flex().autodiff();
    let mine = if me == root { len } else { 0 };
    let shape = if dim == 0 { [mine, 3] } else { [3, mine] };
    let x = tensor(ramp(3 * mine, 7), shape, &dev).require_grad();
    let neg = if dim == 1 { -1 } else { 0 };
    let y = x.clone().scatter_from_root(g, root, neg)?;
    let yshape = y.dims();
    let w = tensor(ramp(yshape[0] * yshape[1], 200 + me), yshape, &dev);
    let out = values(y.clone());
    let grads = try_backward(|| (y * w).sum().backward())?;
    Ok((out, yshape, values(x.grad(&grads).expect("a gradient"))))
}

#[test]
fn scatter_from_root_splits_the_roots_tensor_and_gathers_gradients_back() {
    for n in 1..=8 {
        for dim in [0, 1] {
            for root in [0, n - 1] {
                for len in [0, 7] {
                    let host = world(n)
                        .run(|c| scatter(&HostCollective::new(c), root, dim, len))
                        .unwrap();
                    let device = DeviceWorld::shared(n, Device::flex())
                        .run(|g, _| scatter(&g, root, dim, len))
                        .unwrap();
                    assert_eq!(host, device);
                    let full = ramp(3 * len, 7);
                    let chunks: Vec<usize> =
                        (0..n).map(|r| len / n + usize::from(r < len % n)).collect();
                    let mut start = 0;
                    let (mut lhs, mut rhs) = (0.0, 0.0);
                    for (r, (out, shape, grad)) in host.iter().enumerate() {
                        let c = chunks[r];
                        let want: Vec<f64> = if dim == 0 {
                            full[3 * start..3 * (start + c)].to_vec()
                        } else {
                            (0..3)
                                .flat_map(|i| full[i * len + start..i * len + start + c].to_vec())
                                .collect()
                        };
                        assert_eq!(
                            out, &want,
                            "{n} ranks dim {dim} root {root} len {len}: rank {r}"
                        );
                        assert_eq!(shape, &if dim == 0 { [c, 3] } else { [3, c] });
                        start += c;
                        let w = ramp(shape[0] * shape[1], 200 + r);
                        lhs += out.iter().zip(&w).map(|(a, b)| a * b).sum::<f64>();
                        if r == root {
                            rhs += full.iter().zip(grad).map(|(a, b)| a * b).sum::<f64>();
                        } else {
                            assert!(grad.is_empty());
                        }
                    }
                    assert!(
                        (lhs - rhs).abs() <= 1e-12 * lhs.abs().max(1.0),
                        "{lhs} vs {rhs}"
                    );
                }
            }
        }
    }
}

#[test]
fn a_bad_root_other_axes_or_tracking_that_differ_fail_on_every_rank() {
    let dev = Device::flex();
    // A root outside the group.
    for e in errors(world(3).run_each(|c| {
        let g = HostCollective::new(c);
        Tensor::<2>::zeros([2, 2], &dev)
            .gather_to_root(&g, 3, 0)
            .map(|_| ())
    })) {
        assert!(
            matches!(
                e,
                Error::InvalidRoot {
                    op: TensorOp::GatherToRoot,
                    root: 3,
                    ..
                }
            ),
            "{e:?}"
        );
    }
    // Roots that differ.
    for e in errors(world(3).run_each(|c| {
        let g = HostCollective::new(c);
        let root = usize::from(g.rank() == 2);
        Tensor::<2>::zeros([2, 2], &dev)
            .scatter_from_root(&g, root, 0)
            .map(|_| ())
    })) {
        assert!(
            matches!(
                e,
                Error::InvalidRoot {
                    op: TensorOp::ScatterFromRoot,
                    offender: 2,
                    ..
                }
            ),
            "{e:?}"
        );
    }
    // Another size along an axis other than the gathered one.
    for e in errors(world(3).run_each(|c| {
        let g = HostCollective::new(c);
        let cols = 2 + usize::from(g.rank() == 1);
        Tensor::<2>::zeros([2, cols], &dev)
            .gather_to_root(&g, 0, 0)
            .map(|_| ())
    })) {
        assert!(
            matches!(
                e,
                Error::ShapeMismatch {
                    op: TensorOp::GatherToRoot,
                    ..
                }
            ),
            "{e:?}"
        );
    }
    // Tracking that differs: the backward pass would wait for a gradient
    // that never comes.
    for scatter in [false, true] {
        for e in errors(world(2).run_each(|c| {
            let g = HostCollective::new(c);
            let x = Tensor::<2>::zeros([1, 2], &Device::flex().autodiff());
            let x = if g.rank() == 0 { x.require_grad() } else { x };
            if scatter {
                x.scatter_from_root(&g, 0, 0).map(|_| ())
            } else {
                x.gather_to_root(&g, 0, 0).map(|_| ())
            }
        })) {
            assert!(
                matches!(e, Error::TrackingMismatch { .. }),
                "scatter {scatter}: {e:?}"
            );
        }
    }
}

/// The scatter's other ranks may pass inputs of any length along the
/// dimension: they are ignored, and their gradients are zeros of their
/// shape.
#[test]
fn a_scatters_other_inputs_get_zero_gradients_of_their_shape() {
    let out = world(3)
        .run(|c| {
            let g = HostCollective::new(c);
            let me = g.rank();
            let dev = Device::flex().autodiff();
            let rows = [5, 2, 0][me];
            let x = tensor(ramp(3 * rows, me), [rows, 3], &dev).require_grad();
            let y = x.clone().scatter_from_root(&g, 0, 0)?;
            let grads = try_backward(|| y.clone().mul_scalar(2.0).sum().backward())?;
            let gx = x.grad(&grads).expect("a gradient");
            Ok::<_, Error>((values(y), gx.dims(), values(gx)))
        })
        .unwrap();
    // Rank 0's 5 rows in chunks of 2, 2 and 1.
    let full = ramp(15, 0);
    assert_eq!(out[0].0, full[..6].to_vec());
    assert_eq!(out[1].0, full[6..12].to_vec());
    assert_eq!(out[2].0, full[12..].to_vec());
    assert_eq!(out[0].2, vec![2.0; 15]);
    assert_eq!((out[1].1, out[1].2.clone()), ([2, 3], vec![0.0; 6]));
    assert_eq!((out[2].1, out[2].2.clone()), ([0, 3], Vec::new()));
}

/// A 3-D tensor gathered along its middle axis.
#[test]
fn gather_to_root_along_a_middle_axis() {
    let out = world(3)
        .run(|c| {
            let g = HostCollective::new(c);
            let me = g.rank();
            let v: Vec<f64> = (0..2 * (me + 1) * 2)
                .map(|i| (100 * me + i) as f64)
                .collect();
            let x = Tensor::<3>::from_data(
                TensorData::new(v, [2, me + 1, 2]),
                (&Device::flex(), DType::F64),
            );
            let y = x.gather_to_root(&g, 2, 1)?;
            Ok::<_, Error>((y.dims(), y.into_data().try_to_vec::<f64>().unwrap()))
        })
        .unwrap();
    assert_eq!(out[0].0, [2, 0, 2]);
    assert_eq!(out[2].0, [2, 6, 2]);
    // Row-major [2, 6, 2]: for each leading index, rank 0's 1 row, rank
    // 1's 2, rank 2's 3.
    let mut want = Vec::new();
    for a in 0..2 {
        for (r, rows) in [(0usize, 1usize), (1, 2), (2, 3)] {
            for k in 0..rows * 2 {
                want.push((100 * r + a * rows * 2 + k) as f64);
            }
        }
    }
    assert_eq!(out[2].1, want);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    /// Random sizes (zero included, on any axis) and roots: the root's
    /// gather is the concatenation, and scattering it back in the gathered
    /// sizes' balanced split covers it exactly.
    #[test]
    fn gathers_and_scatters_of_any_size(
        n in 1usize..=5,
        sizes in proptest::collection::vec(0usize..4, 5),
        cols in 0usize..3,
        root_pick in 0usize..5,
    ) {
        let root = root_pick % n;
        let out = world(n).run(|c| {
            let g = HostCollective::new(c);
            let me = g.rank();
            let v: Vec<f64> = (0..sizes[me] * cols).map(|i| (i + 10 * me) as f64).collect();
            let x = tensor(v, [sizes[me], cols], &Device::flex());
            let all = x.gather_to_root(&g, root, 0)?;
            let back = all.clone().scatter_from_root(&g, root, 0)?;
            Ok::<_, Error>((all.dims(), values(all), back.dims(), values(back)))
        }).unwrap();
        let total: usize = sizes[..n].iter().sum();
        let want: Vec<f64> = (0..n)
            .flat_map(|r| (0..sizes[r] * cols).map(move |i| (i + 10 * r) as f64))
            .collect();
        let mut seen = Vec::new();
        for (r, (dims, all, bdims, back)) in out.into_iter().enumerate() {
            if r == root {
                prop_assert_eq!(dims, [total, cols]);
                prop_assert_eq!(&all, &want);
            } else {
                prop_assert_eq!(dims, [0, cols]);
            }
            prop_assert_eq!(bdims, [total / n + usize::from(r < total % n), cols]);
            seen.extend(back);
        }
        prop_assert_eq!(seen, want);
    }
}
