//! The primitives on Burn's user-facing `Tensor<D>`: the same values as the
//! primitive-level functions on Flex, gradients through `Tensor::backward`
//! equal to those on `Autodiff<Flex>`, and a clear error for devices the
//! primitives do not run on.

mod common;

use burn_backend::ops::FloatTensorOps;
use burn_flex::Flex;
use burn_tensor::{Device, Tensor, TensorData};
use common::*;
use ruda_comm::Communicator;
use ruda_tensor::primitives::{self, PrimitiveError};
use ruda_tensor::{ProcessGrid, tensor_api as ta};

fn values(t: Tensor<3>) -> Vec<f32> {
    t.into_data().try_to_vec::<f32>().unwrap()
}

#[test]
fn tensor_entry_points_match_the_primitives() {
    world(4)
        .run(|c| {
            let g = ProcessGrid::new(c, 2, 2)?;
            let me = g.world().comm().rank();
            let h = 3 + g.polar_rank(); // 3 and 4 latitudes
            let v: Vec<f32> = (0..2 * h * 4).map(|i| (me * 100 + i) as f32).collect();
            let dev = Device::flex();
            let x = || Tensor::<3>::from_data(TensorData::new(v.clone(), [2, h, 4]), &dev);
            let p = || float(v.clone(), &[2, h, 4]);
            // Halo exchange, transpose, gather, reduce-scatter: same values.
            let a = values(ta::polar_halo_exchange(&g, x(), 1)?);
            let b = read_float::<f32>(primitives::polar_halo_exchange::<Flex, _>(&g, p(), 1)?).0;
            assert_eq!(a, b);
            let a = values(ta::distributed_transpose_azimuth(
                &g,
                x(),
                (0, -1),
                &[4, 4],
            )?);
            let b = read_float::<f32>(primitives::distributed_transpose_azimuth::<Flex, _>(
                &g,
                p(),
                (0, -1),
                &[4, 4],
            )?)
            .0;
            assert_eq!(a, b);
            let a = values(ta::gather_from_polar_region(&g, x(), 1, &[3, 4])?);
            let b = read_float::<f32>(primitives::gather_from_polar_region::<Flex, _>(
                &g,
                p(),
                1,
                &[3, 4],
            )?)
            .0;
            assert_eq!(a, b);
            let a = values(ta::reduce_from_scatter_to_azimuth_region(&g, x(), -1)?);
            let b = read_float::<f32>(
                primitives::reduce_from_scatter_to_azimuth_region::<Flex, _>(&g, p(), -1)?,
            )
            .0;
            assert_eq!(a, b);
            Ok::<_, PrimitiveError>(())
        })
        .unwrap();
}

#[test]
fn gradients_flow_through_tensor_backward() {
    world(4)
        .run(|c| {
            let g = ProcessGrid::new(c, 2, 2)?;
            let me = g.world().comm().rank();
            let h = 3 + g.polar_rank();
            let v: Vec<f32> = (0..2 * h * 4).map(|i| ((me * 7 + i) % 5) as f32).collect();
            let w: Vec<f32> = (0..2 * (h + 2) * 4)
                .map(|i| ((i * 3) % 7) as f32 - 3.0)
                .collect();
            // User-facing: halo exchange then a weighted sum.
            let dev = Device::flex().autodiff();
            let x =
                Tensor::<3>::from_data(TensorData::new(v.clone(), [2, h, 4]), &dev).require_grad();
            let wt = Tensor::<3>::from_data(TensorData::new(w.clone(), [2, h + 2, 4]), &dev);
            let y = ta::polar_halo_exchange(&g, x.clone(), 1)?;
            let grads = (y * wt).sum().backward();
            let got = x
                .grad(&grads)
                .unwrap()
                .into_data()
                .try_to_vec::<f32>()
                .unwrap();
            // Primitive level on Autodiff<Flex>, in f64.
            let xp = leaf(v.iter().map(|&a| a as f64).collect(), &[2, h, 4]);
            let yp = primitives::polar_halo_exchange::<Ad, _>(&g, xp.clone(), 1)?;
            let wp = constant(w.iter().map(|&a| a as f64).collect(), &[2, h + 2, 4]);
            let want = grad_of(Ad::float_sum(Ad::float_mul(yp, wp)), &xp);
            assert_eq!(got, want.iter().map(|&a| a as f32).collect::<Vec<_>>());
            Ok::<_, PrimitiveError>(())
        })
        .unwrap();
}

#[test]
fn unsupported_devices_are_a_clear_error() {
    let errs = world(1).run_each(|c| {
        let g = ProcessGrid::new(c, 1, 1)?;
        let dev = Device::flex().autodiff().gradient_checkpointing();
        let x = Tensor::<3>::zeros([1, 2, 2], &dev);
        ta::copy_to_polar_region(&g, x).map(|_| ())
    });
    match &errs[0] {
        Err(ruda_comm::RankError::Failed(PrimitiveError::UnsupportedTensor { message })) => {
            assert!(message.contains("checkpointing"), "{message}");
        }
        other => panic!("{other:?}"),
    }
}
