//! Every method of the contract × every dtype it accepts × world sizes 1–8,
//! on Flex over the local transport, against a serial reference.

mod common;

use burn_backend::DType;
use burn_backend::tensor::FloatTensor;
use burn_flex::Flex;
use common::*;
use half::{bf16, f16};
use ruda_bench::Sample;
use ruda_comm::Communicator;
use ruda_tensor::{
    BroadcastTensorCollective, HostCollective, IntegerTensorCollective, NeighbourTensorExchange,
    ReplicatedTensorCollective, TensorCollective, TensorCollectiveError, VariableTensorCollective,
};

type Coll<C> = HostCollective<C>;

/// Float dtypes with the tolerance of a sum of up to 8 terms accumulated in
/// f32 (or f64) and rounded once to the type.
trait FloatCase: Sample + burn_backend::Element {
    const BURN: DType;
    fn f64(self) -> f64;
    fn rel_tol() -> f64;
}
impl FloatCase for f32 {
    const BURN: DType = DType::F32;
    fn f64(self) -> f64 {
        self as f64
    }
    fn rel_tol() -> f64 {
        8.0 * f32::EPSILON as f64
    }
}
impl FloatCase for f64 {
    const BURN: DType = DType::F64;
    fn f64(self) -> f64 {
        self
    }
    fn rel_tol() -> f64 {
        8.0 * f64::EPSILON
    }
}
impl FloatCase for f16 {
    const BURN: DType = DType::F16;
    fn f64(self) -> f64 {
        self.to_f64()
    }
    fn rel_tol() -> f64 {
        2f64.powi(-11) * 1.01
    }
}
impl FloatCase for bf16 {
    const BURN: DType = DType::BF16;
    fn f64(self) -> f64 {
        self.to_f64()
    }
    fn rel_tol() -> f64 {
        2f64.powi(-8) * 1.01
    }
}

/// A reduced value must be within one rounding of the exact f64 sum (plus
/// f32 accumulation error), which summing in f16/bf16 itself would exceed.
fn check_sum<T: FloatCase>(got: T, parts: &[T], what: &str) {
    let exact: f64 = parts.iter().map(|p| p.f64()).sum();
    let abs: f64 = parts.iter().map(|p| p.f64().abs()).sum();
    let tol = exact.abs() * T::rel_tol()
        + abs * 8.0 * f32::EPSILON as f64 * f64::from(u8::from(T::BURN != DType::F64))
        + 1e-300;
    assert!(
        (got.f64() - exact).abs() <= tol,
        "{what}: {} vs exact {exact} (tol {tol:e})",
        got.f64()
    );
}

fn float_ops<T: FloatCase>() {
    for n in 1..=8usize {
        let seed = 7 + n as u64;
        let cols = 3;
        world(n)
            .run(|c| {
                let me = c.rank();
                let coll = Coll::new(c);
                let inputs: Vec<Vec<T>> = (0..n)
                    .map(|r| input::<T>(seed, 1, r, 2 * n * cols))
                    .collect();
                let x = || float(inputs[me].clone(), &[2 * n, cols]);
                // all_gather_float
                let (g, shape) =
                    read_float::<T>(TensorCollective::<Flex>::all_gather_float(&coll, x())?);
                assert_eq!(shape, vec![2 * n * n, cols]);
                assert_eq!(g, inputs.concat(), "all_gather n={n}");
                // reduce_scatter_sum
                let (rs, shape) =
                    read_float::<T>(TensorCollective::<Flex>::reduce_scatter_sum(&coll, x())?);
                assert_eq!(shape, vec![2, cols]);
                for (i, &v) in rs.iter().enumerate() {
                    let parts: Vec<T> = inputs.iter().map(|inp| inp[me * 2 * cols + i]).collect();
                    check_sum(v, &parts, "reduce_scatter_sum");
                }
                // all_reduce_sum
                let (ar, shape) = read_float::<T>(
                    ReplicatedTensorCollective::<Flex>::all_reduce_sum(&coll, x())?,
                );
                assert_eq!(shape, vec![2 * n, cols]);
                for (i, &v) in ar.iter().enumerate() {
                    let parts: Vec<T> = inputs.iter().map(|inp| inp[i]).collect();
                    check_sum(v, &parts, "all_reduce_sum");
                }
                // broadcast_float from the last rank
                let root = (n - 1) as u32;
                let (b, _) = read_float::<T>(BroadcastTensorCollective::<Flex>::broadcast_float(
                    &coll,
                    x(),
                    root,
                )?);
                assert_eq!(b, inputs[n - 1], "broadcast");
                Ok::<_, TensorCollectiveError>(())
            })
            .unwrap_or_else(|e| panic!("{:?} n={n}: {e}", T::BURN));
    }
}

#[test]
fn float_collectives_f32() {
    float_ops::<f32>();
}

#[test]
fn float_collectives_f64() {
    float_ops::<f64>();
}

#[test]
fn float_collectives_f16_accumulate_in_f32() {
    float_ops::<f16>();
}

#[test]
fn float_collectives_bf16_accumulate_in_f32() {
    float_ops::<bf16>();
}

#[test]
fn dtypes_are_retained() {
    world(2)
        .run(|c| {
            let coll = Coll::new(c);
            for (t, d) in [
                (float(vec![f16::ONE; 4], &[2, 2]), DType::F16),
                (float(vec![bf16::ONE; 4], &[2, 2]), DType::BF16),
                (float(vec![1f64; 4], &[2, 2]), DType::F64),
            ] {
                let out: FloatTensor<Flex> =
                    TensorCollective::<Flex>::all_gather_float(&coll, t.clone())?;
                assert_eq!(out.dtype(), d);
                assert_eq!(
                    ReplicatedTensorCollective::<Flex>::all_reduce_sum(&coll, t)?.dtype(),
                    d
                );
            }
            Ok::<_, TensorCollectiveError>(())
        })
        .unwrap();
}

/// Integer gathers and exchanges keep every bit pattern, extremes included.
fn int_ops<T: Sample + burn_backend::Element + PartialEq + std::fmt::Debug>(dtype: DType) {
    for n in 1..=8usize {
        let seed = 31 + n as u64;
        let cnt = counts(seed, n, 3);
        world(n)
            .run(|c| {
                let me = c.rank();
                let coll = Coll::new(c);
                let inputs: Vec<Vec<T>> = (0..n).map(|r| input::<T>(seed, 2, r, 4 * 2)).collect();
                let (g, shape, d) = read_int::<T>(IntegerTensorCollective::<Flex>::all_gather_int(
                    &coll,
                    int(inputs[me].clone(), &[4, 2]),
                )?);
                assert_eq!((shape, d), (vec![4 * n, 2], dtype));
                assert_eq!(g, inputs.concat());
                // variable exchange, rows of 2
                let rows: Vec<usize> = cnt.iter().map(|r| r.iter().sum()).collect();
                let sends: Vec<Vec<T>> = (0..n)
                    .map(|r| input::<T>(seed, 3, r, rows[r] * 2))
                    .collect();
                let ex = VariableTensorCollective::<Flex>::all_to_all_v_int(
                    &coll,
                    int(sends[me].clone(), &[rows[me], 2]),
                    &cnt[me],
                )?;
                let want_counts: Vec<usize> = (0..n).map(|p| cnt[p][me]).collect();
                assert_eq!(ex.receive_counts, want_counts);
                let want: Vec<T> = (0..n)
                    .flat_map(|p| {
                        let from: usize = cnt[p][..me].iter().sum();
                        sends[p][from * 2..(from + cnt[p][me]) * 2].to_vec()
                    })
                    .collect();
                let (v, shape, d) = read_int::<T>(ex.value);
                assert_eq!((shape, d), (vec![want_counts.iter().sum(), 2], dtype));
                assert_eq!(v, want);
                Ok::<_, TensorCollectiveError>(())
            })
            .unwrap_or_else(|e| panic!("{dtype:?} n={n}: {e}"));
    }
}

#[test]
fn integer_collectives_keep_bit_patterns() {
    int_ops::<i32>(DType::I32);
    int_ops::<i64>(DType::I64);
    int_ops::<u8>(DType::U8);
    int_ops::<u32>(DType::U32);
}

#[test]
fn variable_float_exchange_with_empty_ranks() {
    for n in 1..=8usize {
        for seed in [1u64, 2, 3] {
            // Some ranks send nothing at all; some receive nothing.
            let mut cnt = counts(seed, n, 2);
            cnt[0].iter_mut().for_each(|c| *c = 0);
            if n > 1 {
                for row in cnt.iter_mut() {
                    row[n - 1] = 0;
                }
            }
            world(n)
                .run(|c| {
                    let me = c.rank();
                    let coll = Coll::new(c);
                    let rows: Vec<usize> = cnt.iter().map(|r| r.iter().sum()).collect();
                    let sends: Vec<Vec<f32>> = (0..n)
                        .map(|r| input::<f32>(seed, 4, r, rows[r] * 3))
                        .collect();
                    let ex = VariableTensorCollective::<Flex>::all_to_all_v_float(
                        &coll,
                        float(sends[me].clone(), &[rows[me], 3]),
                        &cnt[me],
                    )?;
                    let want: Vec<f32> = (0..n)
                        .flat_map(|p| {
                            let from: usize = cnt[p][..me].iter().sum();
                            sends[p][from * 3..(from + cnt[p][me]) * 3].to_vec()
                        })
                        .collect();
                    assert_eq!(
                        ex.receive_counts,
                        (0..n).map(|p| cnt[p][me]).collect::<Vec<_>>()
                    );
                    let (v, shape) = read_float::<f32>(ex.value);
                    assert_eq!(shape, vec![want.len() / 3, 3]);
                    assert_eq!(v, want);
                    Ok::<_, TensorCollectiveError>(())
                })
                .unwrap_or_else(|e| panic!("n={n} seed={seed}: {e}"));
        }
    }
}

#[test]
fn neighbour_exchange_as_a_halo() {
    // Each rank sends its first row up and its last row down (no wrap), and
    // receives the neighbours' rows, in any order of sends.
    for n in 1..=8usize {
        world(n)
            .run(|c| {
                let me = c.rank();
                let coll = Coll::new(c);
                let block =
                    |r: usize| -> Vec<f64> { (0..3 * 4).map(|i| (100 * r + i) as f64).collect() };
                let mine = block(me);
                let mut rows_out = Vec::new();
                let mut sends = Vec::new();
                // Down first, then up, to exercise reordering.
                if me + 1 < n {
                    rows_out.extend_from_slice(&mine[2 * 4..3 * 4]);
                    sends.push(((me + 1) as u32, 1));
                }
                if me > 0 {
                    rows_out.extend_from_slice(&mine[..4]);
                    sends.push(((me - 1) as u32, 1));
                }
                let from: Vec<u32> = [me.checked_sub(1), (me + 1 < n).then_some(me + 1)]
                    .into_iter()
                    .flatten()
                    .map(|r| r as u32)
                    .collect();
                let nrows = rows_out.len() / 4;
                let got = NeighbourTensorExchange::<Flex>::exchange_rows_float(
                    &coll,
                    float(rows_out, &[nrows, 4]),
                    &sends,
                    &from,
                )?;
                assert_eq!(got.len(), from.len());
                for (t, &src) in got.into_iter().zip(&from) {
                    let (v, shape) = read_float::<f64>(t);
                    assert_eq!(shape, vec![1, 4]);
                    let b = block(src as usize);
                    let want = if (src as usize) < me {
                        &b[2 * 4..]
                    } else {
                        &b[..4]
                    };
                    assert_eq!(v, want);
                }
                Ok::<_, TensorCollectiveError>(())
            })
            .unwrap_or_else(|e| panic!("n={n}: {e}"));
    }
}

#[test]
fn sub_group_collectives() {
    // Rows and columns of a 2×3 grid of ranks, each gathering along its group.
    world(6)
        .run(|c| {
            let me = c.rank();
            let row = HostCollective::new(c.split(Some((me / 3) as u32), 0)?.unwrap());
            let col = HostCollective::new(c.split(Some((me % 3) as u32), 0)?.unwrap());
            let (r, _) = read_float::<f32>(TensorCollective::<Flex>::all_gather_float(
                &row,
                float(vec![me as f32], &[1]),
            )?);
            let (k, _) = read_float::<f32>(TensorCollective::<Flex>::all_gather_float(
                &col,
                float(vec![me as f32], &[1]),
            )?);
            let base = (me / 3 * 3) as f32;
            assert_eq!(r, vec![base, base + 1.0, base + 2.0]);
            assert_eq!(k, vec![(me % 3) as f32, (me % 3 + 3) as f32]);
            Ok::<_, TensorCollectiveError>(())
        })
        .unwrap();
}
