//! The tensor contract and a primitive on the MPI transport, one rank per
//! process: run under `mpirun -n N ruda-tensor-mpi-check`. Proves the
//! tensor layer is transport-independent: forward values against a serial
//! reference, and adjoints by the inner-product identity summed over ranks.

use burn_autodiff::Autodiff;
use burn_backend::ops::FloatTensorOps;
use burn_backend::tensor::FloatTensor;
use burn_backend::{AutodiffBackend, TensorData, TensorMetadata, read_sync};
use burn_flex::{Flex, FlexDevice};
use ruda_comm::{Communicator, MpiCommunicator, MpiWorld, ReduceOp};
use ruda_tensor::TransposeAxes;
use ruda_tensor::primitives;
use ruda_tensor::{
    HostCollective, ProcessGrid, ReplicatedTensorCollective, TensorCollective,
    VariableTensorCollective,
};

type Ad = Autodiff<Flex>;

fn values(t: FloatTensor<Flex>) -> Vec<f64> {
    read_sync(Flex::float_into_data(t))
        .expect("host")
        .try_to_vec::<f64>()
        .expect("f64")
}

fn input(rank: usize, len: usize) -> Vec<f64> {
    (0..len)
        .map(|i| ((rank * 31 + i * 7) % 13) as f64 - 6.0)
        .collect()
}

fn sum_all(c: &MpiCommunicator, v: f64) -> f64 {
    let mut b = [v];
    c.all_reduce(&mut b, ReduceOp::Sum).expect("sum");
    b[0]
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// Σ_ranks ⟨A x, w⟩ = Σ_ranks ⟨x, Aᵀ w⟩ with Aᵀ w from autodiff.
fn adjoint(
    sums: &MpiCommunicator,
    x: Vec<f64>,
    shape: &[usize],
    f: impl Fn(FloatTensor<Ad>) -> FloatTensor<Ad>,
) -> Result<(), String> {
    let me = sums.rank();
    let leaf = Ad::float_set_require_grad(
        Ad::float_from_data(TensorData::new(x.clone(), shape.to_vec()), &FlexDevice),
        true,
    );
    let y = f(leaf.clone());
    let out_shape = y.shape().to_vec();
    let w = input(me + 100, out_shape.iter().product());
    let yv = values(Ad::inner(y.clone()));
    let wt = Ad::float_from_data(TensorData::new(w.clone(), out_shape), &FlexDevice);
    let grads = Ad::backward(Ad::float_sum(Ad::float_mul(y, wt)));
    let g = Ad::grad(&leaf, &grads)
        .map(values)
        .unwrap_or_else(|| vec![0.0; x.len()]);
    let (lhs, rhs) = (sum_all(sums, dot(&yv, &w)), sum_all(sums, dot(&x, &g)));
    if (lhs - rhs).abs() > 1e-10 * (1.0 + lhs.abs()) {
        return Err(format!("adjoint identity: {lhs} vs {rhs}"));
    }
    Ok(())
}

fn run(world: MpiCommunicator) -> Result<usize, String> {
    let (me, n) = (world.rank(), world.size());
    let sums = world
        .split(Some(0), 0)
        .map_err(|e| e.to_string())?
        .expect("a colour");
    let grid_comm = world
        .split(Some(0), 0)
        .map_err(|e| e.to_string())?
        .expect("a colour");
    let coll = HostCollective::new(world);
    let e = |e: ruda_tensor::TensorCollectiveError| e.to_string();
    let mut passed = 0;
    // Forward against the serial reference.
    let x = |r: usize| {
        Flex::float_from_data(
            TensorData::new(input(r, 2 * n * 3), [2 * n, 3]),
            &FlexDevice,
        )
    };
    let all: Vec<f64> = (0..n).flat_map(|r| input(r, 2 * n * 3)).collect();
    if values(TensorCollective::<Flex>::all_gather_float(&coll, x(me)).map_err(e)?) != all {
        return Err("all_gather_float".into());
    }
    let sum: Vec<f64> = (0..2 * n * 3)
        .map(|i| (0..n).map(|r| input(r, 2 * n * 3)[i]).sum())
        .collect();
    if values(ReplicatedTensorCollective::<Flex>::all_reduce_sum(&coll, x(me)).map_err(e)?) != sum {
        return Err("all_reduce_sum".into());
    }
    if values(TensorCollective::<Flex>::reduce_scatter_sum(&coll, x(me)).map_err(e)?)
        != sum[me * 6..(me + 1) * 6]
    {
        return Err("reduce_scatter_sum".into());
    }
    passed += 3;
    // Adjoints: all-gather, reduce-scatter, uneven all-to-all.
    adjoint(&sums, input(me, 4 * 2), &[4, 2], |t| {
        TensorCollective::<Ad>::all_gather_float(&coll, t).expect("gather")
    })?;
    adjoint(&sums, input(me, 2 * n * 2), &[2 * n, 2], |t| {
        TensorCollective::<Ad>::reduce_scatter_sum(&coll, t).expect("rs")
    })?;
    let counts: Vec<usize> = (0..n).map(|p| (me + p) % 3).collect();
    let rows: usize = counts.iter().sum();
    adjoint(&sums, input(me, rows * 2), &[rows, 2], |t| {
        VariableTensorCollective::<Ad>::all_to_all_v_float(&coll, t, &counts)
            .expect("a2av")
            .value
    })?;
    passed += 3;
    // A primitive: the polar halo exchange on an n × 1 grid, uneven rows.
    let grid = ProcessGrid::new(grid_comm, n, 1).map_err(|e| e.to_string())?;
    let h = 2 + me % 2;
    adjoint(&sums, input(me, 2 * h * 3), &[2, h, 3], |t| {
        primitives::polar_halo_exchange::<Ad, _>(&grid, t, 1).expect("halo")
    })?;
    passed += 1;
    // A transpose with uneven sizes along the split axis, and a desync of
    // two tensor operations with equal shapes: an error on every rank.
    let cols = 2 + me % 3;
    adjoint(&sums, input(me, (n + 1) * cols), &[n + 1, cols], |t| {
        primitives::transpose::<Ad>(
            &coll,
            t,
            TransposeAxes {
                split_in: 1,
                split_out: 0,
            },
            None,
        )
        .expect("transpose")
    })?;
    let r = if me == 0 {
        primitives::reduce_from::<Flex>(&coll, x(me)).map(|_| ())
    } else {
        primitives::all_reduce::<Flex>(&coll, x(me)).map(|_| ())
    };
    if n > 1 && !matches!(r, Err(ruda_tensor::Error::Desync { offender: 1, .. })) {
        return Err(format!("desync of tensor operations: {r:?}"));
    }
    passed += 2;
    passed += issue_18_ops(&coll, &sums)?;
    Ok(passed)
}

/// Issue 18's operations on MPI: the mean (adjoint identity), the maximum
/// with a tie (values and the shared gradient), mismatched operators (an
/// error on every rank), and a send / recv pair with its gradient.
fn issue_18_ops(
    coll: &HostCollective<MpiCommunicator>,
    sums: &MpiCommunicator,
) -> Result<usize, String> {
    use burn_tensor::{DType, Device, Tensor};
    use ruda_tensor::{Group, TensorExt};
    let (me, n) = (coll.rank(), coll.size());
    let dev = Device::flex().autodiff();
    let f64_on = (&dev, DType::F64);
    // The mean is linear: ⟨A x, w⟩ = ⟨x, Aᵀ w⟩ over the ranks.
    let x = input(me, 6);
    let xt = Tensor::<2>::from_data(TensorData::new(x.clone(), [2, 3]), f64_on).require_grad();
    let y = xt
        .clone()
        .all_reduce_with(coll, ReduceOp::Mean)
        .map_err(|e| e.to_string())?;
    let yv = y
        .clone()
        .into_data()
        .try_to_vec::<f64>()
        .map_err(|e| format!("{e:?}"))?;
    let w = input(me + 50, 6);
    let wt = Tensor::<2>::from_data(TensorData::new(w.clone(), [2, 3]), f64_on);
    let g = xt.grad(&(y * wt).sum().backward()).expect("a gradient");
    let gv = g
        .into_data()
        .try_to_vec::<f64>()
        .map_err(|e| format!("{e:?}"))?;
    let (lhs, rhs) = (sum_all(sums, dot(&yv, &w)), sum_all(sums, dot(&x, &gv)));
    if (lhs - rhs).abs() > 1e-10 * (1.0 + lhs.abs()) {
        return Err(format!("mean adjoint identity: {lhs} vs {rhs}"));
    }
    // The maximum: ranks 0 and 1 tie at 5 in element 0; element 1 is the
    // rank itself (the last rank holds it alone).
    let v = [if me < 2 { 5.0 } else { 1.0 }, me as f64];
    let xt = Tensor::<1>::from_data(TensorData::new(v.to_vec(), [2]), f64_on).require_grad();
    let m = xt
        .clone()
        .all_reduce_with(coll, ReduceOp::Max)
        .map_err(|e| e.to_string())?;
    let mv = m
        .clone()
        .into_data()
        .try_to_vec::<f64>()
        .map_err(|e| format!("{e:?}"))?;
    if mv != [5.0, (n - 1) as f64] {
        return Err(format!("max values {mv:?}"));
    }
    let g = xt.grad(&m.sum().backward()).expect("a gradient");
    let gv = g
        .into_data()
        .try_to_vec::<f64>()
        .map_err(|e| format!("{e:?}"))?;
    let holders = n.min(2) as f64;
    let want = [
        if me < 2 { n as f64 / holders } else { 0.0 },
        if me == n - 1 { n as f64 } else { 0.0 },
    ];
    if gv != want {
        return Err(format!("max gradient {gv:?}, expected {want:?}"));
    }
    // Different operators on different ranks: the same error everywhere.
    let op = if me == n - 1 {
        ReduceOp::Min
    } else {
        ReduceOp::Max
    };
    let r =
        Tensor::<1>::from_data(TensorData::new(vec![1.0], [1]), f64_on).all_reduce_with(coll, op);
    if n > 1 && !matches!(r, Err(ruda_tensor::Error::ReduceOpMismatch { .. })) {
        return Err(format!("mismatched operators: {r:?}"));
    }
    // Rank 0 sends to the last rank, which sends the gradient of y·y back.
    if n > 1 && (me == 0 || me == n - 1) {
        if me == 0 {
            let x = Tensor::<1>::from_data(TensorData::new(vec![1.5, -2.0], [2]), f64_on)
                .require_grad();
            let receipt = x.clone().send(coll, n - 1).map_err(|e| e.to_string())?;
            let g = x.grad(&receipt.sum().backward()).expect("a gradient back");
            let gv = g
                .into_data()
                .try_to_vec::<f64>()
                .map_err(|e| format!("{e:?}"))?;
            if gv != [3.0, -4.0] {
                return Err(format!("send gradient {gv:?}"));
            }
        } else {
            let y: Tensor<1> = ruda_tensor::recv(coll, 0, &dev).map_err(|e| e.to_string())?;
            let yv = y
                .clone()
                .into_data()
                .try_to_vec::<f64>()
                .map_err(|e| format!("{e:?}"))?;
            if yv != [1.5, -2.0] {
                return Err(format!("received {yv:?}"));
            }
            let _ = (y.clone() * y).sum().backward();
        }
    }
    // Issue 27 (5): a ring shift through an Exchange (every rank posts its
    // send and its receive before waiting), and the gradient of y·y back
    // the other way; on one rank the only peer would be itself: refused.
    let ex = ruda_tensor::Exchange::new(coll);
    let x =
        Tensor::<1>::from_data(TensorData::new(vec![me as f64, 1.0], [2]), f64_on).require_grad();
    if n == 1 {
        if !matches!(
            ex.isend(x, 0),
            Err(ruda_tensor::Error::InvalidPeer { peer: 0, .. })
        ) {
            return Err("an isend to oneself was not refused".into());
        }
    } else {
        let err = |e: ruda_tensor::Error| e.to_string();
        let receipt = ex.isend(x.clone(), (me + 1) % n).map_err(err)?;
        let y = ex
            .irecv::<1>((me + n - 1) % n, &dev)
            .and_then(|i| i.wait())
            .map_err(err)?;
        let yv = y
            .clone()
            .into_data()
            .try_to_vec::<f64>()
            .map_err(|e| format!("{e:?}"))?;
        if yv != [((me + n - 1) % n) as f64, 1.0] {
            return Err(format!("exchange ring received {yv:?}"));
        }
        ruda_tensor::try_backward(|| (y.clone() * y).sum().backward()).map_err(err)?;
        let grads = ruda_tensor::try_backward(|| receipt.sum().backward()).map_err(err)?;
        ex.wait().map_err(err)?;
        let gv = x
            .grad(&grads)
            .expect("a gradient back")
            .into_data()
            .try_to_vec::<f64>()
            .map_err(|e| format!("{e:?}"))?;
        if gv != [2.0 * me as f64, 2.0] {
            return Err(format!("exchange ring gradient {gv:?}"));
        }
    }
    coll.barrier().map_err(|e| e.to_string())?;
    Ok(5)
}

fn main() {
    let mpi = MpiWorld::builder()
        .abort_on_panic(true)
        .init()
        .expect("MPI starts");
    let world = mpi.world().expect("the world communicator");
    let (me, n) = (world.rank(), world.size());
    match run(world) {
        Ok(passed) if me == 0 => {
            println!("tensor layer on mpi, {n} ranks: {passed} passed, 0 failed")
        }
        Ok(_) => {}
        // Panicking aborts the whole job (abort_on_panic).
        Err(e) => panic!("rank {me} of {n}: tensor layer on mpi FAILED: {e}"),
    }
}
