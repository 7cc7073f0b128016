//! The adjoints of the contract on Autodiff<Flex>, in f64, world sizes 1–8:
//! gradients against the serial model and the adjoint identity.

mod common;

use common::*;
use ruda_comm::LocalCommunicator;
use ruda_tensor::{
    BroadcastTensorCollective, HostCollective, NeighbourTensorExchange, ReplicatedTensorCollective,
    TensorCollective, VariableTensorCollective,
};

type Coll = HostCollective<LocalCommunicator>;

fn make(c: LocalCommunicator) -> Coll {
    HostCollective::new(c)
}

#[test]
fn all_gather_float_adjoint_is_reduce_scatter() {
    for n in 1..=8 {
        let cols = 2;
        check_linear(
            n,
            1,
            make,
            &LinearCase {
                name: "all_gather_float",
                rows: &|_| 3,
                cols,
                forward: &|c: &Coll, x| TensorCollective::<Ad>::all_gather_float(c, x).unwrap(),
                serial: &|xs| vec![xs.concat(); xs.len()],
            },
        );
    }
}

#[test]
fn reduce_scatter_sum_adjoint_is_all_gather() {
    for n in 1..=8 {
        let cols = 3;
        check_linear(
            n,
            2,
            make,
            &LinearCase {
                name: "reduce_scatter_sum",
                rows: &move |_| 2 * n,
                cols,
                forward: &|c: &Coll, x| TensorCollective::<Ad>::reduce_scatter_sum(c, x).unwrap(),
                serial: &move |xs| {
                    let block = 2 * cols;
                    (0..n)
                        .map(|r| {
                            (0..block)
                                .map(|i| xs.iter().map(|x| x[r * block + i]).sum())
                                .collect()
                        })
                        .collect()
                },
            },
        );
    }
}

#[test]
fn all_reduce_sum_adjoint_is_all_reduce() {
    for n in 1..=8 {
        check_linear(
            n,
            3,
            make,
            &LinearCase {
                name: "all_reduce_sum",
                rows: &|_| 2,
                cols: 5,
                forward: &|c: &Coll, x| {
                    ReplicatedTensorCollective::<Ad>::all_reduce_sum(c, x).unwrap()
                },
                serial: &|xs| {
                    let s: Vec<f64> = (0..xs[0].len())
                        .map(|i| xs.iter().map(|x| x[i]).sum())
                        .collect();
                    vec![s; xs.len()]
                },
            },
        );
    }
}

#[test]
fn broadcast_float_adjoint_sums_to_the_root() {
    for n in 1..=8 {
        for root in [0, n - 1] {
            check_linear(
                n,
                4,
                make,
                &LinearCase {
                    name: "broadcast_float",
                    rows: &|_| 3,
                    cols: 2,
                    forward: &move |c: &Coll, x| {
                        BroadcastTensorCollective::<Ad>::broadcast_float(c, x, root as u32).unwrap()
                    },
                    serial: &move |xs| vec![xs[root].clone(); xs.len()],
                },
            );
        }
    }
}

#[test]
fn all_to_all_v_float_adjoint_is_the_reverse_exchange() {
    for n in 1..=8 {
        for seed in [5u64, 6] {
            let cnt = counts(seed, n, 3);
            let cols = 2;
            let rows = {
                let cnt = cnt.clone();
                move |r: usize| cnt[r].iter().sum::<usize>()
            };
            let c2 = cnt.clone();
            let c3 = cnt.clone();
            check_linear(
                n,
                seed,
                make,
                &LinearCase {
                    name: "all_to_all_v_float",
                    rows: &rows,
                    cols,
                    forward: &move |c: &Coll, x| {
                        use ruda_comm::Communicator;
                        let me = c.comm().rank();
                        VariableTensorCollective::<Ad>::all_to_all_v_float(c, x, &c2[me])
                            .unwrap()
                            .value
                    },
                    serial: &move |xs| {
                        (0..n)
                            .map(|me| {
                                (0..n)
                                    .flat_map(|p| {
                                        let from: usize = c3[p][..me].iter().sum();
                                        xs[p][from * cols..(from + c3[p][me]) * cols].to_vec()
                                    })
                                    .collect()
                            })
                            .collect()
                    },
                },
            );
        }
    }
}

#[test]
fn neighbour_exchange_adjoint_sends_gradients_home() {
    // Halo of one row each way without wrap-around; rank r holds r + 2 rows.
    for n in 1..=8 {
        let cols = 3;
        check_linear(
            n,
            9,
            make,
            &LinearCase {
                name: "exchange_rows_float",
                rows: &|r| r + 2,
                cols,
                forward: &move |c: &Coll, x| {
                    use ruda_comm::Communicator;
                    let (me, n) = (c.comm().rank(), c.comm().size());
                    let rows = me + 2;
                    // Send the last row down and the first row up, packed in that order.
                    let down = ruda_tensor_rows(x.clone(), rows - 1, rows);
                    let up = ruda_tensor_rows(x, 0, 1);
                    let mut parts = Vec::new();
                    let mut sends = Vec::new();
                    if me + 1 < n {
                        parts.push(down);
                        sends.push(((me + 1) as u32, 1));
                    }
                    if me > 0 {
                        parts.push(up);
                        sends.push(((me - 1) as u32, 1));
                    }
                    let packed = if parts.is_empty() {
                        ruda_tensor_rows(constant(vec![0.0; cols], &[1, cols]), 0, 0)
                    } else {
                        Ad::float_cat(parts, 0)
                    };
                    let from: Vec<u32> = [me.checked_sub(1), (me + 1 < n).then_some(me + 1)]
                        .into_iter()
                        .flatten()
                        .map(|r| r as u32)
                        .collect();
                    let got = NeighbourTensorExchange::<Ad>::exchange_rows_float(
                        c, packed, &sends, &from,
                    )
                    .unwrap();
                    if got.is_empty() {
                        constant(vec![], &[0, cols])
                    } else {
                        Ad::float_cat(got, 0)
                    }
                },
                serial: &move |xs| {
                    (0..n)
                        .map(|me| {
                            let mut out = Vec::new();
                            if me > 0 {
                                let p = &xs[me - 1];
                                out.extend_from_slice(&p[p.len() - cols..]);
                            }
                            if me + 1 < n {
                                out.extend_from_slice(&xs[me + 1][..cols]);
                            }
                            out
                        })
                        .collect()
                },
            },
        );
    }
}

use burn_backend::Slice;
use burn_backend::ops::FloatTensorOps;
use burn_backend::tensor::FloatTensor;

fn ruda_tensor_rows(t: FloatTensor<Ad>, start: usize, end: usize) -> FloatTensor<Ad> {
    Ad::float_slice(t, &[Slice::new(start as isize, Some(end as isize), 1)])
}
