//! What a call costs on each backend ruda runs on: `x.all_reduce(&group)`
//! through the tensor methods on 2 ranks, f32, on Flex and (with feature
//! `wgpu`) on a wgpu device, against the raw slice all-reduce of the same
//! size in the same run. On a non-Flex device the difference is mostly the
//! host staging round trip (`into_data` and `from_data`).
//!
//! Run with `cargo bench -p ruda-tensor --bench backend_cost [--features wgpu]`
//! (set `XDG_RUNTIME_DIR` for wgpu where it is unset).

use burn_tensor::{DType, Device, Tensor, TensorData};
use ruda_bench::{Iterations, time_calls};
use ruda_comm::{CommError, Communicator, LocalWorld, ReduceOp};
use ruda_tensor::{Error, HostCollective, TensorExt};

fn devices() -> Vec<(&'static str, Device)> {
    #[allow(unused_mut)]
    let mut d = vec![("flex", Device::flex())];
    #[cfg(feature = "wgpu")]
    d.push(("wgpu", Device::wgpu(burn_tensor::DeviceKind::Cpu)));
    d
}

fn main() {
    let quick = !std::env::args().any(|a| a == "--bench");
    let sizes: &[usize] = if quick {
        &[4 << 10]
    } else {
        &[4 << 10, 1 << 20, 16 << 20]
    };
    println!(
        "{:>10} {:>8} {:>12} {:>12} {:>10}",
        "bytes", "device", "tensor(us)", "raw(us)", "tensor-raw"
    );
    for &bytes in sizes {
        let len = bytes / 4;
        let it = if quick {
            Iterations {
                warmup: 2,
                iters: 5,
            }
        } else {
            Iterations::auto(bytes)
        };
        for (name, device) in devices() {
            let out = LocalWorld::new(2)
                .run(|c| {
                    let g = HostCollective::new(c);
                    let raw = {
                        let mut buf = vec![1.0f32; len];
                        time_calls(
                            g.comm(),
                            it.warmup,
                            it.iters,
                            || (),
                            |()| g.comm().all_reduce(&mut buf, ReduceOp::Sum),
                        )?
                        .median()
                    };
                    let data = TensorData::new(vec![1.0f32; len], [len]);
                    let tensor = time_calls(
                        g.comm(),
                        it.warmup,
                        it.iters,
                        || Tensor::<1>::from_data(data.clone(), (&device, DType::F32)),
                        |x| {
                            let y = x.all_reduce(&g).map_err(|e| match e {
                                Error::Comm(c) => c,
                                other => panic!("{other}"),
                            })?;
                            // Wait for the device to finish, as a user reading it would.
                            let _ = y.into_data();
                            Ok::<_, CommError>(())
                        },
                    )?
                    .median();
                    Ok::<_, CommError>((tensor, raw))
                })
                .expect("benchmark run");
            let (t, r) = out[0];
            println!(
                "{bytes:>10} {name:>8} {:>12.2} {:>12.2} {:>10.2}",
                t * 1e6,
                r * 1e6,
                (t - r) * 1e6
            );
        }
    }
}
