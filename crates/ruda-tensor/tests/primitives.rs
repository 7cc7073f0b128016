//! The distributed primitives in f64 over the local transport, on grids
//! 1×1 … 2×4 with uneven sizes: forward against a serial model, gradients
//! against the serial model, and the adjoint identity (replicated operands
//! counted once), for both grid axes.

mod common;

use common::*;
use ruda_comm::{Communicator, LocalCommunicator};
use ruda_tensor::TransposeAxes;
use ruda_tensor::layout::compute_split_shapes;
use ruda_tensor::primitives;
use ruda_tensor::{Axis, ProcessGrid};
use ruda_tensor::{Error, Group, HostCollective};

type Grid = ProcessGrid<HostCollective<LocalCommunicator>>;

const GRIDS: [(usize, usize); 9] = [
    (1, 1),
    (2, 1),
    (1, 2),
    (3, 1),
    (1, 3),
    (2, 2),
    (4, 1),
    (1, 4),
    (2, 4),
];

/// World ranks of each group along `axis`, in group-rank order.
fn groups(p: usize, a: usize, axis: Axis) -> Vec<Vec<usize>> {
    match axis {
        Axis::Polar => (0..a)
            .map(|j| (0..p).map(|i| i * a + j).collect())
            .collect(),
        Axis::Azimuth => (0..p)
            .map(|i| (0..a).map(|j| i * a + j).collect())
            .collect(),
    }
}

/// (group index, rank in group, group size) of world rank `r`.
fn coords(gs: &[Vec<usize>], r: usize) -> (usize, usize, usize) {
    for (k, g) in gs.iter().enumerate() {
        if let Some(i) = g.iter().position(|&m| m == r) {
            return (k, i, g.len());
        }
    }
    unreachable!()
}

fn singletons(n: usize) -> Vec<Vec<usize>> {
    (0..n).map(|r| vec![r]).collect()
}

/// Row-major helpers on flat vectors.
fn outer_inner(shape: &[usize], dim: usize) -> (usize, usize) {
    (
        shape[..dim].iter().product(),
        shape[dim + 1..].iter().product(),
    )
}

fn narrow(v: &[f64], shape: &[usize], dim: usize, start: usize, len: usize) -> Vec<f64> {
    let (outer, inner) = outer_inner(shape, dim);
    let mut out = Vec::new();
    for o in 0..outer {
        let base = o * shape[dim] * inner;
        out.extend_from_slice(&v[base + start * inner..base + (start + len) * inner]);
    }
    out
}

fn concat(parts: &[(Vec<f64>, Vec<usize>)], dim: usize) -> Vec<f64> {
    let (outer, inner) = outer_inner(&parts[0].1, dim);
    let mut out = Vec::new();
    for o in 0..outer {
        for (v, s) in parts {
            let len = s[dim] * inner;
            out.extend_from_slice(&v[o * len..(o + 1) * len]);
        }
    }
    out
}

fn sum(vs: &[&Vec<f64>]) -> Vec<f64> {
    (0..vs[0].len())
        .map(|i| vs.iter().map(|v| v[i]).sum())
        .collect()
}

fn with(shape: &[usize], dim: usize, len: usize) -> Vec<usize> {
    let mut s = shape.to_vec();
    s[dim] = len;
    s
}

fn grid_of(p: usize, a: usize) -> impl Fn(LocalCommunicator) -> Grid + Sync {
    move |c| ProcessGrid::new(c, p, a).unwrap()
}

/// Uneven per-rank sizes adding up to `total` (first ranks smaller), e.g.
/// 7 over 2 as [2, 5]; falls back to the balanced split when too short.
fn uneven(total: usize, n: usize) -> Vec<usize> {
    if n == 1 {
        return vec![total];
    }
    let mut s: Vec<usize> = (0..n - 1).map(|i| 1 + i % 2).collect();
    let used: usize = s.iter().sum();
    if used >= total {
        return compute_split_shapes(total, n).unwrap();
    }
    s.push(total - used);
    s
}

fn for_grids(mut f: impl FnMut(usize, usize, Axis)) {
    for (p, a) in GRIDS {
        for axis in [Axis::Polar, Axis::Azimuth] {
            f(p, a, axis);
        }
    }
}

#[test]
fn transpose_forward_gradient_adjoint() {
    // [D0, s1[g], 3] with dims (0, 1), and [2, s1[g], D0, 3] with dims (-2, 1).
    for (d0_total, d1_total) in [(7, 13), (10, 7)] {
        for layout in 0..2 {
            for_grids(|p, a, axis| {
                let gs = groups(p, a, axis);
                let n = p * a;
                let gsize = gs[0].len();
                let s1 = uneven(d1_total, gsize);
                let c0 = compute_split_shapes(d0_total, gsize).unwrap();
                let (dims, d0, d1): ((isize, isize), usize, usize) = if layout == 0 {
                    ((0, 1), 0, 1)
                } else {
                    ((-2, 1), 2, 1)
                };
                let shape_of = {
                    let (s1, gs) = (s1.clone(), gs.clone());
                    move |r: usize| {
                        let s = s1[coords(&gs, r).1];
                        if layout == 0 {
                            vec![d0_total, s, 3]
                        } else {
                            vec![2, s, d0_total, 3]
                        }
                    }
                };
                let in_shape = shape_of.clone();
                let gsf = gs.clone();
                let serial = move |xs: &[Vec<f64>]| -> Vec<Vec<f64>> {
                    (0..n)
                        .map(|r| {
                            let (k, i, _) = coords(&gsf, r);
                            let parts: Vec<(Vec<f64>, Vec<usize>)> = gsf[k]
                                .iter()
                                .map(|&m| (xs[m].clone(), shape_of(m)))
                                .collect();
                            let full = concat(&parts, d1);
                            let full_shape = with(&shape_of(r), d1, d1_total);
                            let start: usize = c0[..i].iter().sum();
                            narrow(&full, &full_shape, d0, start, c0[i])
                        })
                        .collect()
                };
                let s1c = s1.clone();
                let forward = move |g: &Grid, x| {
                    primitives::transpose::<Ad>(
                        g.group(axis),
                        x,
                        TransposeAxes::from_torch_harmonics(dims),
                        Some(&s1c),
                    )
                    .unwrap()
                };
                check_op(
                    n,
                    1,
                    grid_of(p, a),
                    &OpCase {
                        name: "transpose",
                        in_shape: &in_shape,
                        in_groups: singletons(n),
                        out_groups: singletons(n),
                        forward: &forward,
                        serial: &serial,
                    },
                );
            });
        }
    }
}

#[test]
fn copy_to_and_reduce_from() {
    for_grids(|p, a, axis| {
        let gs = groups(p, a, axis);
        let n = p * a;
        let shape = vec![2, 3, 4];
        check_op(
            n,
            2,
            grid_of(p, a),
            &OpCase {
                name: "copy_to",
                in_shape: &|_| shape.clone(),
                in_groups: gs.clone(),
                out_groups: singletons(n),
                forward: &move |g: &Grid, x| primitives::copy_to::<Ad>(g.group(axis), x).unwrap(),
                serial: &|xs| xs.to_vec(),
            },
        );
        let gsr = gs.clone();
        check_op(
            n,
            3,
            grid_of(p, a),
            &OpCase {
                name: "reduce_from",
                in_shape: &|_| shape.clone(),
                in_groups: singletons(n),
                out_groups: gs.clone(),
                forward: &move |g: &Grid, x| {
                    primitives::reduce_from::<Ad>(g.group(axis), x).unwrap()
                },
                serial: &move |xs| {
                    (0..n)
                        .map(|r| {
                            let (k, _, _) = coords(&gsr, r);
                            sum(&gsr[k].iter().map(|&m| &xs[m]).collect::<Vec<_>>())
                        })
                        .collect()
                },
            },
        );
    });
}

#[test]
fn scatter_to_and_gather_from() {
    for_grids(|p, a, axis| {
        let gs = groups(p, a, axis);
        let n = p * a;
        let gsize = gs[0].len();
        // scatter_to along the last dim of a replicated [2, 3, 10].
        let full = vec![2, 3, 10];
        let chunks = compute_split_shapes(10, gsize).unwrap();
        let gss = gs.clone();
        let ch = chunks.clone();
        check_op(
            n,
            4,
            grid_of(p, a),
            &OpCase {
                name: "scatter_to",
                in_shape: &|_| full.clone(),
                in_groups: gs.clone(),
                out_groups: singletons(n),
                forward: &move |g: &Grid, x| {
                    primitives::scatter_to::<Ad>(g.group(axis), x, -1).unwrap()
                },
                serial: &move |xs| {
                    (0..n)
                        .map(|r| {
                            let (_, i, _) = coords(&gss, r);
                            narrow(&xs[r], &[2, 3, 10], 2, ch[..i].iter().sum(), ch[i])
                        })
                        .collect()
                },
            },
        );
        // gather_from / gather_from_copy_to along dim 1 with uneven sizes (13 as 1, 2, …).
        let sizes = uneven(13, gsize);
        for replicated in [true, false] {
            let gsg = gs.clone();
            let sz = sizes.clone();
            let sz2 = sizes.clone();
            let gsi = gs.clone();
            let sz3 = sizes.clone();
            let forward = move |g: &Grid, x| {
                if replicated {
                    primitives::gather_from_sizes::<Ad>(g.group(axis), x, 1, &sz).unwrap()
                } else {
                    primitives::gather_from_copy_to::<Ad>(g.group(axis), x, 1, Some(&sz)).unwrap()
                }
            };
            check_op(
                n,
                5,
                grid_of(p, a),
                &OpCase {
                    name: if replicated {
                        "gather_from"
                    } else {
                        "gather_from_copy_to"
                    },
                    in_shape: &move |r| vec![2, sz2[coords(&gsi, r).1], 3],
                    in_groups: singletons(n),
                    out_groups: if replicated {
                        gs.clone()
                    } else {
                        singletons(n)
                    },
                    forward: &forward,
                    serial: &move |xs| {
                        (0..n)
                            .map(|r| {
                                let (k, _, _) = coords(&gsg, r);
                                let parts: Vec<_> = gsg[k]
                                    .iter()
                                    .map(|&m| (xs[m].clone(), vec![2, sz3[coords(&gsg, m).1], 3]))
                                    .collect();
                                concat(&parts, 1)
                            })
                            .collect()
                    },
                },
            );
        }
    });
}

#[test]
fn reduce_from_scatter_to() {
    for_grids(|p, a, axis| {
        let gs = groups(p, a, axis);
        let n = p * a;
        let chunks = compute_split_shapes(7, gs[0].len()).unwrap();
        let gsr = gs.clone();
        check_op(
            n,
            6,
            grid_of(p, a),
            &OpCase {
                name: "reduce_from_scatter_to",
                in_shape: &|_| vec![3, 7, 2],
                in_groups: singletons(n),
                out_groups: singletons(n),
                forward: &move |g: &Grid, x| {
                    primitives::reduce_from_scatter_to::<Ad>(g.group(axis), x, -2).unwrap()
                },
                serial: &move |xs| {
                    (0..n)
                        .map(|r| {
                            let (k, i, _) = coords(&gsr, r);
                            let s = sum(&gsr[k].iter().map(|&m| &xs[m]).collect::<Vec<_>>());
                            narrow(&s, &[3, 7, 2], 1, chunks[..i].iter().sum(), chunks[i])
                        })
                        .collect()
                },
            },
        );
    });
}

/// Serial halo exchange: rows along `dim` from the neighbours in the group.
fn serial_halo(
    xs: &[Vec<f64>],
    shapes: &dyn Fn(usize) -> Vec<usize>,
    gs: &[Vec<usize>],
    r: usize,
    radius: usize,
    dim: usize,
) -> Vec<f64> {
    let (k, i, g) = coords(gs, r);
    let s = shapes(r);
    let zeros = |like: &[usize]| {
        (
            vec![0.0; with(like, dim, radius).iter().product()],
            with(like, dim, radius),
        )
    };
    let top = if i > 0 {
        let m = gs[k][i - 1];
        let ms = shapes(m);
        (
            narrow(&xs[m], &ms, dim, ms[dim] - radius, radius),
            with(&ms, dim, radius),
        )
    } else {
        zeros(&s)
    };
    let bottom = if i + 1 < g {
        let m = gs[k][i + 1];
        let ms = shapes(m);
        (narrow(&xs[m], &ms, dim, 0, radius), with(&ms, dim, radius))
    } else {
        zeros(&s)
    };
    concat(&[top, (xs[r].clone(), s), bottom], dim)
}

#[test]
fn halo_exchange_and_reduce() {
    for radius in [1, 2] {
        for (ndim, total) in [(2usize, 13usize), (3, 10), (4, 7), (5, 13)] {
            for_grids(|p, a, axis| {
                let gs = groups(p, a, axis);
                let n = p * a;
                let rows = compute_split_shapes(total, gs[0].len()).unwrap();
                if rows.iter().any(|&h| h < radius) {
                    return;
                }
                let dim = ndim - 2;
                let shape = {
                    let gs = gs.clone();
                    let rows = rows.clone();
                    move |r: usize| -> Vec<usize> {
                        let mut s = vec![2; ndim];
                        s[0] = 1;
                        s[dim] = rows[coords(&gs, r).1];
                        s[ndim - 1] = 3;
                        s
                    }
                };
                let sh = shape.clone();
                let gsx = gs.clone();
                check_op(
                    n,
                    7,
                    grid_of(p, a),
                    &OpCase {
                        name: "halo_exchange",
                        in_shape: &shape,
                        in_groups: singletons(n),
                        out_groups: singletons(n),
                        forward: &move |g: &Grid, x| {
                            primitives::halo_exchange::<Ad>(g.group(axis), x, -2, radius).unwrap()
                        },
                        serial: &move |xs| {
                            (0..n)
                                .map(|r| serial_halo(xs, &sh, &gsx, r, radius, dim))
                                .collect()
                        },
                    },
                );
                // halo_reduce: input padded by the radius; its adjoint is the exchange.
                let padded = {
                    let shape = shape.clone();
                    move |r: usize| with(&shape(r), dim, shape(r)[dim] + 2 * radius)
                };
                let pd = padded.clone();
                let gsr = gs.clone();
                let sh2 = shape.clone();
                let rows2 = rows.clone();
                check_op(
                    n,
                    8,
                    grid_of(p, a),
                    &OpCase {
                        name: "halo_reduce",
                        in_shape: &padded,
                        in_groups: singletons(n),
                        out_groups: singletons(n),
                        forward: &move |g: &Grid, y| {
                            let me = g.group(axis).rank();
                            primitives::halo_reduce::<Ad>(g.group(axis), y, -2, radius, rows2[me])
                                .unwrap()
                        },
                        serial: &move |ys| {
                            (0..n)
                                .map(|r| {
                                    let (k, i, g) = coords(&gsr, r);
                                    let s = sh2(r);
                                    let h = s[dim];
                                    let mut out = narrow(&ys[r], &pd(r), dim, radius, h);
                                    let mut add = |from: &[f64], at: usize| {
                                        // add `from` (radius rows) at row `at` of out
                                        let (outer, inner) = outer_inner(&s, dim);
                                        for o in 0..outer {
                                            for j in 0..radius * inner {
                                                out[o * h * inner + at * inner + j] +=
                                                    from[o * radius * inner + j];
                                            }
                                        }
                                    };
                                    if i > 0 {
                                        let m = gsr[k][i - 1];
                                        let hm = sh2(m)[dim];
                                        add(&narrow(&ys[m], &pd(m), dim, radius + hm, radius), 0);
                                    }
                                    if i + 1 < g {
                                        let m = gsr[k][i + 1];
                                        add(&narrow(&ys[m], &pd(m), dim, 0, radius), h - radius);
                                    }
                                    out
                                })
                                .collect()
                        },
                    },
                );
            });
        }
    }
}

#[test]
fn round_trips() {
    // scatter → gather is the identity; transpose → inverse transpose too;
    // a radius of 0 exchanges nothing.
    for (p, a) in GRIDS {
        world(p * a)
            .run(|c| {
                let g = ProcessGrid::new(c, p, a)?;
                for axis in [Axis::Polar, Axis::Azimuth] {
                    let grp = g.group(axis);
                    let n = grp.size();
                    let me = grp.rank();
                    let v: Vec<f64> = (0..2 * 13).map(|i| i as f64).collect();
                    let x = float(v.clone(), &[2, 13]);
                    let s = primitives::scatter_to::<burn_flex::Flex>(grp, x, 1)?;
                    let sizes = compute_split_shapes(13, n).unwrap();
                    let back = primitives::gather_from_sizes::<burn_flex::Flex>(grp, s, 1, &sizes)?;
                    assert_eq!(read_float::<f64>(back).0, v);
                    // The output of a transpose is split in balanced chunks, so the
                    // round trip starts from a balanced layout.
                    let s1 = compute_split_shapes(7, n).unwrap();
                    let mine: Vec<f64> = (0..10 * s1[me]).map(|i| (me * 1000 + i) as f64).collect();
                    let t = primitives::transpose::<burn_flex::Flex>(
                        grp,
                        float(mine.clone(), &[10, s1[me]]),
                        TransposeAxes {
                            split_in: 1,
                            split_out: 0,
                        },
                        Some(&s1),
                    )?;
                    let c0 = compute_split_shapes(10, n).unwrap();
                    let t2 = primitives::transpose::<burn_flex::Flex>(
                        grp,
                        t,
                        TransposeAxes {
                            split_in: 0,
                            split_out: 1,
                        },
                        Some(&c0),
                    )?;
                    assert_eq!(read_float::<f64>(t2), (mine.clone(), vec![10, s1[me]]));
                    let same = primitives::halo_exchange::<burn_flex::Flex>(
                        grp,
                        float(mine.clone(), &[10, s1[me]]),
                        1,
                        0,
                    )?;
                    assert_eq!(read_float::<f64>(same).0, mine);
                }
                Ok::<_, Error>(())
            })
            .unwrap_or_else(|e| panic!("{p}x{a}: {e}"));
    }
}

#[test]
fn seed_entry_points_match_the_generic_primitives() {
    world(4)
        .run(|c| {
            let g = ProcessGrid::new(c, 2, 2)?;
            let me = g.polar_rank();
            let x = || float(vec![(g.world().rank() + 1) as f64; 2 * 3 * 4], &[2, 3, 4]);
            use burn_flex::Flex as F;
            let a = primitives::reduce_from_polar_region::<F, _>(&g, x())?;
            let b = primitives::reduce_from::<F>(g.polar(), x())?;
            assert_eq!(read_float::<f64>(a), read_float::<f64>(b));
            let a = primitives::reduce_from_scatter_to_azimuth_region::<F, _>(&g, x(), -1)?;
            let b = primitives::reduce_from_scatter_to::<F>(g.azimuth(), x(), -1)?;
            assert_eq!(read_float::<f64>(a), read_float::<f64>(b));
            let h = primitives::polar_halo_exchange::<F, _>(&g, x(), 1)?;
            assert_eq!(read_float::<f64>(h.clone()).1, vec![2, 5, 4]);
            let r = primitives::polar_halo_reduce::<F, _>(&g, h, 1, 3)?;
            assert_eq!(read_float::<f64>(r).1, vec![2, 3, 4]);
            let t = primitives::distributed_transpose_azimuth::<F, _>(&g, x(), (-1, 0), &[2, 2])?;
            assert_eq!(read_float::<f64>(t).1, vec![4, 3, 2]);
            let (prev, next) = primitives::get_group_neighbors(&g, Axis::Polar);
            let w = g.world().rank();
            assert_eq!((prev, next), ((w + 2) % 4, (w + 2) % 4));
            let _ = me;
            Ok::<_, Error>(())
        })
        .unwrap();
}

/// `reduce` to the last rank of each group: the root gets the group's sum,
/// every other rank zeros; the gradient is the root's weight on every rank
/// (the adjoint broadcast), with the adjoint identity.
#[test]
fn reduce_to_a_root() {
    for_grids(|p, a, axis| {
        let gs = groups(p, a, axis);
        let n = p * a;
        let root = gs[0].len() - 1;
        let shape = vec![2, 3];
        let gsr = gs.clone();
        check_op(
            n,
            5,
            grid_of(p, a),
            &OpCase {
                name: "reduce",
                in_shape: &|_| shape.clone(),
                in_groups: singletons(n),
                out_groups: singletons(n),
                forward: &move |g: &Grid, x| {
                    primitives::reduce::<Ad>(g.group(axis), x, root).unwrap()
                },
                serial: &move |xs| {
                    (0..n)
                        .map(|r| {
                            let (k, i, _) = coords(&gsr, r);
                            let s = sum(&gsr[k].iter().map(|&m| &xs[m]).collect::<Vec<_>>());
                            if i == root { s } else { vec![0.0; s.len()] }
                        })
                        .collect()
                },
            },
        );
    });
}

/// A root outside the group, or roots that differ, is `InvalidRoot` on
/// every rank before data moves.
#[test]
fn reduce_to_a_root_outside_the_group_or_another_root_is_an_error_everywhere() {
    for (roots, expected_offender) in [([3usize, 3, 3], 0usize), ([0, 1, 0], 1)] {
        let out = world(3).run_each(|c| {
            let me = c.rank();
            let g = HostCollective::new(c);
            primitives::reduce::<Ad>(&g, leaf(vec![1.0; 4], &[4]), roots[me]).map(|_| ())
        });
        for (r, e) in out.into_iter().enumerate() {
            match e {
                Err(ruda_comm::RankError::Failed(Error::InvalidRoot { offender, .. })) => {
                    assert_eq!(offender, expected_offender, "{roots:?}: rank {r}")
                }
                other => panic!("{roots:?}: rank {r}: {other:?}"),
            }
        }
    }
}
