//! Tensor-level `all_reduce_sum` / `all_gather_float` on Flex f32 against the
//! raw slice collective of the same size, measured in the same run.
//!
//! Run with `cargo bench -p ruda-tensor --bench tensor_vs_raw`. Each timed
//! call gets a fresh, uniquely owned tensor (as a gradient would be), built
//! outside the timer; time is the slowest rank's, median over iterations.
//!
//! Columns: `raw`, the slice collective into a buffer allocated and touched
//! before the timer; `raw_vec+free`, the slice collective allocating its
//! output and freeing its input inside the timer, as the tensor call must
//! (it consumes its input and returns a new tensor). Freeing a large buffer
//! (munmap) is most of the difference between `raw` and the tensor call.

use burn_backend::ops::FloatTensorOps;
use burn_backend::{TensorData, read_sync};
use burn_flex::{Flex, FlexDevice};
use ruda_bench::{Iterations, median_seconds};
use ruda_comm::{Communicator, LocalWorld, ReduceOp};
use ruda_tensor::{HostCollective, ReplicatedTensorCollective, TensorCollective};

fn time<C: Communicator, S>(
    comm: &C,
    it: Iterations,
    prep: impl FnMut() -> S,
    f: impl FnMut(S),
) -> f64 {
    median_seconds(comm, it, prep, f).expect("harness")
}

fn main() {
    let quick = !std::env::args().any(|a| a == "--bench");
    let sizes: &[usize] = if quick {
        &[4 << 10]
    } else {
        &[4 << 10, 1 << 20, 16 << 20, 64 << 20]
    };
    println!(
        "{:>6} {:>10} {:>16} {:>10} {:>13} {:>12} {:>11} {:>15}",
        "ranks",
        "bytes",
        "op",
        "raw (us)",
        "raw_vec+free",
        "tensor (us)",
        "tensor/raw",
        "t/raw_vec+free"
    );
    for n in [2, 4] {
        for &bytes in sizes {
            let iters = Iterations::auto(bytes);
            let rows = LocalWorld::new(n)
                .run(|c| {
                    let count = bytes / 4;
                    let coll = HostCollective::new(c);
                    let comm = coll.comm();
                    let data = vec![1f32; count];
                    let raw_ar = time(
                        comm,
                        iters,
                        || data.clone(),
                        |mut v| comm.all_reduce(&mut v, ReduceOp::Sum).unwrap(),
                    );
                    let t_ar = time(
                        comm,
                        iters,
                        || {
                            Flex::float_from_data(
                                TensorData::new(data.clone(), [count]),
                                &FlexDevice,
                            )
                        },
                        |x| {
                            let y = ReplicatedTensorCollective::<Flex>::all_reduce_sum(&coll, x)
                                .unwrap();
                            std::hint::black_box(y);
                        },
                    );
                    let shard = &data[..count / n];
                    let raw_ag = time(
                        comm,
                        iters,
                        || vec![0f32; count],
                        |mut out| comm.all_gather(shard, &mut out).unwrap(),
                    );
                    // Like the tensor call: a fresh output, and the input
                    // buffer consumed (freed) by the call.
                    let raw_ag_vec = time(
                        comm,
                        iters,
                        || shard.to_vec(),
                        |input| {
                            std::hint::black_box(comm.all_gather_vec(&input).unwrap());
                            drop(input);
                        },
                    );
                    let t_ag = time(
                        comm,
                        iters,
                        || {
                            Flex::float_from_data(
                                TensorData::new(shard.to_vec(), [count / n]),
                                &FlexDevice,
                            )
                        },
                        |x| {
                            let y = TensorCollective::<Flex>::all_gather_float(&coll, x).unwrap();
                            std::hint::black_box(y);
                        },
                    );
                    // Check the tensor results once.
                    let x =
                        Flex::float_from_data(TensorData::new(data.clone(), [count]), &FlexDevice);
                    let y = read_sync(Flex::float_into_data(
                        ReplicatedTensorCollective::<Flex>::all_reduce_sum(&coll, x).unwrap(),
                    ))
                    .unwrap();
                    assert!(y.as_slice::<f32>().unwrap().iter().all(|&v| v == n as f32));
                    Ok::<_, ()>([(raw_ar, f64::NAN, t_ar), (raw_ag, raw_ag_vec, t_ag)])
                })
                .unwrap();
            for (name, (raw, raw_vec, tensor)) in
                ["all_reduce_sum", "all_gather_float"].iter().zip(rows[0])
            {
                println!(
                    "{:>6} {:>10} {:>16} {:>10.1} {:>13.1} {:>12.1} {:>11.2} {:>15.2}",
                    n,
                    bytes,
                    name,
                    raw * 1e6,
                    raw_vec * 1e6,
                    tensor * 1e6,
                    tensor / raw,
                    tensor / raw_vec
                );
            }
        }
    }
}
