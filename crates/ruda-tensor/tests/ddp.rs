//! Data-parallel training of a `burn-nn` model (Conv1d, ReLU, Linear; Adam):
//! on 1 to 4 ranks with disjoint (uneven) shards of one batch, every step
//! equals the serial run on the whole batch within f64 round-off, and the
//! replicas stay bit-identical.

#[path = "../examples/ddp_model/mod.rs"]
mod ddp_model;

#[test]
fn data_parallel_training_equals_the_serial_run_at_every_step() {
    let (batch, steps) = (13, 6);
    let serial = ddp_model::train(1, batch, steps).unwrap();
    for ranks in [2, 3, 4] {
        let runs = ddp_model::train(ranks, batch, steps).unwrap();
        for r in &runs {
            assert_eq!(r, &runs[0], "{ranks} ranks: replicas differ");
        }
        for (s, (one, many)) in serial[0].iter().zip(&runs[0]).enumerate() {
            let close = |a: f64, b: f64| (a - b).abs() <= 1e-12 * (1.0 + a.abs());
            assert!(
                close(one.loss, many.loss),
                "{ranks} ranks step {s}: loss {} vs {}",
                one.loss,
                many.loss
            );
            assert_eq!(one.params.len(), many.params.len());
            for (i, (a, b)) in one.params.iter().zip(&many.params).enumerate() {
                assert!(
                    close(*a, *b),
                    "{ranks} ranks step {s} parameter {i}: {a} vs {b}"
                );
            }
        }
        // Training moved the parameters: the comparison is not vacuous.
        assert_ne!(serial[0][0].params, serial[0][steps - 1].params);
    }
}

/// The same training on a device world (gradients summed by the backend's
/// own operations, never staged through host memory) equals the
/// host-staged run bit for bit.
#[test]
fn data_parallel_training_on_a_device_world_equals_the_host_staged_run() {
    let (batch, steps) = (13, 4);
    for ranks in [1, 3, 4] {
        let host = ddp_model::train(ranks, batch, steps).unwrap();
        let device = ddp_model::train_on_device(ranks, batch, steps).unwrap();
        assert_eq!(device, host, "{ranks} ranks");
    }
}

mod unused_parameters {
    //! Parameters that have a gradient on some ranks only, and replicas
    //! whose modules differ.

    use burn_core as burn;

    use burn::module::{Module, Param};
    use burn_nn::{Linear, LinearConfig};
    use burn_optim::GradientsParams;
    use burn_tensor::{DType, Device, Tensor, TensorData};
    use ruda_comm::{LocalWorld, RankError};
    use ruda_tensor::ddp::{GradientReduction, Zeros, all_reduce_gradients};
    use ruda_tensor::{Error, HostCollective, ModuleProblem};

    /// Two layers of the same shape.
    #[derive(Module, Debug)]
    pub struct Two {
        a: Linear,
        b: Linear,
    }

    fn two(device: &Device, width: usize) -> Two {
        Two {
            a: LinearConfig::new(width, 2).init(device),
            b: LinearConfig::new(width, 2).init(device),
        }
        .map(&mut Zeros)
    }

    fn input(rank: usize, device: &Device) -> Tensor<2> {
        let v: Vec<f32> = (0..6).map(|i| (i + 10 * rank) as f32 + 1.0).collect();
        Tensor::from_data(TensorData::new(v, [2, 3]), (device, DType::F32))
    }

    fn grad_of(g: &GradientsParams, p: &Param<Tensor<2>>) -> Option<Vec<f64>> {
        g.get::<2>(p.id)
            .map(|t| t.into_data().convert::<f64>().try_to_vec::<f64>().unwrap())
    }

    /// Rank `r`'s own gradient of `layer` when its loss is
    /// `sum(layer(input(r)))` (computed alone, on one rank).
    fn own_grad(rank: usize, use_a: bool) -> Vec<f64> {
        let device = Device::flex().autodiff();
        let m = two(&device, 3);
        let layer = if use_a { &m.a } else { &m.b };
        let loss = layer.forward(input(rank, &device)).sum();
        let g = GradientsParams::from_grads(loss.backward(), &m);
        grad_of(&g, &layer.weight).unwrap()
    }

    /// A parameter's reduced gradient, if it has one.
    type Grad = Option<Vec<f64>>;

    /// One rank's part of the unused-parameter case: rank 0's loss uses
    /// only `a`, rank 1's only `b`; returns the reduced `a` and `b`.
    fn unused_on_one_rank<G: ruda_tensor::Group>(
        world: &G,
        reduction: GradientReduction,
    ) -> Result<(Grad, Grad), Error> {
        let me = world.rank();
        let device = Device::flex().autodiff();
        let m = two(&device, 3);
        let layer = if me == 0 { &m.a } else { &m.b };
        let loss = layer.forward(input(me, &device)).sum();
        let g = GradientsParams::from_grads(loss.backward(), &m);
        let g = all_reduce_gradients(world, &m, g, reduction)?;
        Ok((grad_of(&g, &m.a.weight), grad_of(&g, &m.b.weight)))
    }

    /// Rank 0's loss uses only `a`, rank 1's only `b`: after the reduction
    /// every rank has `a` = rank 0's gradient and `b` = rank 1's (a missing
    /// gradient counts as zero), not one sum filed under both; on the
    /// host-staged and on the device-resident group.
    #[test]
    fn a_parameter_unused_on_some_ranks_counts_as_zero_there() {
        let expect_a = own_grad(0, true);
        let expect_b = own_grad(1, false);
        assert_ne!(expect_a, expect_b, "the two ranks' gradients must differ");
        for reduction in [GradientReduction::Sum, GradientReduction::Mean] {
            let host = LocalWorld::new(2)
                .run(|c| unused_on_one_rank(&HostCollective::new(c), reduction))
                .unwrap();
            let device = ruda_tensor::DeviceWorld::shared(2, Device::flex())
                .run(|g, _| unused_on_one_rank(&g, reduction))
                .unwrap();
            let scale = if reduction == GradientReduction::Mean {
                0.5
            } else {
                1.0
            };
            let want_a: Vec<f64> = expect_a.iter().map(|v| v * scale).collect();
            let want_b: Vec<f64> = expect_b.iter().map(|v| v * scale).collect();
            for (what, out) in [("host", host), ("device", device)] {
                for (r, (a, b)) in out.iter().enumerate() {
                    assert_eq!(
                        a.as_ref(),
                        Some(&want_a),
                        "{what} {reduction:?} rank {r}: a"
                    );
                    assert_eq!(
                        b.as_ref(),
                        Some(&want_b),
                        "{what} {reduction:?} rank {r}: b"
                    );
                }
            }
        }
    }

    /// A rank with an empty shard (no samples: a zero gradient, or none)
    /// takes part, and every rank gets the other rank's gradient.
    #[test]
    fn a_rank_with_an_empty_batch_takes_part() {
        let expect = own_grad(0, true);
        let out = LocalWorld::new(2)
            .run(|c| {
                let world = HostCollective::new(c);
                let me = ruda_tensor::Group::rank(&world);
                let device = Device::flex().autodiff();
                let m = two(&device, 3);
                let x = if me == 0 {
                    input(0, &device)
                } else {
                    Tensor::<2>::zeros([0, 3], (&device, DType::F32))
                };
                let loss = m.a.forward(x).sum();
                let g = GradientsParams::from_grads(loss.backward(), &m);
                let g = all_reduce_gradients(&world, &m, g, GradientReduction::Sum)?;
                Ok::<_, Error>(grad_of(&g, &m.a.weight))
            })
            .unwrap();
        for (r, a) in out.iter().enumerate() {
            assert_eq!(a.as_ref(), Some(&expect), "rank {r}");
        }
    }

    /// A parameter no rank has a gradient for stays without one.
    #[test]
    fn a_parameter_unused_everywhere_stays_without_a_gradient() {
        let out = LocalWorld::new(3)
            .run(|c| {
                let world = HostCollective::new(c);
                let me = ruda_tensor::Group::rank(&world);
                let device = Device::flex().autodiff();
                let m = two(&device, 3);
                let loss = m.a.forward(input(me, &device)).sum();
                let g = GradientsParams::from_grads(loss.backward(), &m);
                let g = all_reduce_gradients(&world, &m, g, GradientReduction::Sum)?;
                Ok::<_, Error>((grad_of(&g, &m.a.weight).is_some(), grad_of(&g, &m.b.weight)))
            })
            .unwrap();
        for (a, b) in out {
            assert!(a);
            assert_eq!(b, None);
        }
    }

    fn mismatch_errors(width: impl Fn(usize) -> usize + Sync, extra: bool) -> Vec<Error> {
        LocalWorld::new(3)
            .run_each(|c| {
                let world = HostCollective::new(c);
                let me = ruda_tensor::Group::rank(&world);
                let device = Device::flex().autodiff();
                let m = two(&device, width(me));
                let x = Tensor::<2>::ones([2, width(me)], (&device, DType::F32));
                let g = GradientsParams::from_grads(m.a.forward(x).sum().backward(), &m);
                if extra && me == 2 {
                    // A module with one more parameter (a third layer).
                    let bigger = (m, LinearConfig::new(3, 2).init(&device).map(&mut Zeros));
                    all_reduce_gradients(&world, &bigger, g, GradientReduction::Sum).map(|_| ())
                } else {
                    all_reduce_gradients(&world, &m, g, GradientReduction::Sum).map(|_| ())
                }
            })
            .into_iter()
            .map(|r| match r {
                Err(RankError::Failed(e)) => e,
                other => panic!("expected an error, got {other:?}"),
            })
            .collect()
    }

    /// Every parameter as f64 zeros (same ids and shapes).
    struct ZerosF64;

    impl burn::module::ModuleMapper for ZerosF64 {
        fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
            let id = param.id;
            let t = param.val();
            let zeros = Tensor::<D>::zeros(t.dims(), (&t.device(), DType::F64));
            Param::initialized(id, zeros.detach().require_grad())
        }
    }

    /// Replicas whose parameters have the same shapes but another dtype.
    #[test]
    fn replicas_with_another_parameter_dtype_are_an_error_on_every_rank() {
        let errors: Vec<Error> = LocalWorld::new(2)
            .run_each(|c| {
                let world = HostCollective::new(c);
                let me = ruda_tensor::Group::rank(&world);
                let device = Device::flex().autodiff();
                let m = if me == 1 {
                    two(&device, 3).map(&mut ZerosF64)
                } else {
                    two(&device, 3)
                };
                all_reduce_gradients(&world, &m, GradientsParams::new(), GradientReduction::Sum)
                    .map(|_| ())
            })
            .into_iter()
            .map(|r| match r {
                Err(RankError::Failed(e)) => e,
                other => panic!("expected an error, got {other:?}"),
            })
            .collect();
        for (r, e) in errors.into_iter().enumerate() {
            match e {
                Error::ModuleMismatch {
                    rank,
                    offender: 1,
                    problem:
                        ModuleProblem::Param {
                            index: 0,
                            expected: (6, Some(DType::F32)),
                            got: (6, Some(DType::F64)),
                        },
                    ..
                } => assert_eq!(rank, r),
                other => panic!("rank {r}: {other}"),
            }
        }
    }

    /// A module without parameters (or no gradients at all) on 1 and 3
    /// ranks: nothing to reduce, no error.
    #[test]
    fn a_module_without_parameters_reduces_nothing() {
        for n in [1, 3] {
            let out = LocalWorld::new(n)
                .run(|c| {
                    let world = HostCollective::new(c);
                    let g = all_reduce_gradients(
                        &world,
                        &burn_nn::Relu::new(),
                        GradientsParams::new(),
                        GradientReduction::Mean,
                    )?;
                    Ok::<_, Error>(g.len())
                })
                .unwrap();
            assert_eq!(out, vec![0; n]);
        }
    }

    /// A peer in another exchange of as many words is not read as a module.
    #[test]
    fn a_peer_in_another_exchange_is_a_record_error() {
        let out = LocalWorld::new(2).run_each(|c| {
            let world = HostCollective::new(c);
            let me = ruda_tensor::Group::rank(&world);
            let device = Device::flex().autodiff();
            let m = two(&device, 3);
            let loss = m.a.forward(input(me, &device)).sum();
            let g = GradientsParams::from_grads(loss.backward(), &m);
            if me == 1 {
                // As many words as the DDP record's first exchange.
                ruda_tensor::Group::exchange_words(&world, &[5, 4, 0, 0, 0, 0, 0, 0]).map(|_| ())
            } else {
                all_reduce_gradients(&world, &m, g, GradientReduction::Sum).map(|_| ())
            }
        });
        match &out[0] {
            Err(RankError::Failed(Error::Record {
                offender: 1,
                what: "record marker",
                code: 5,
                ..
            })) => {}
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn replicas_with_another_parameter_count_are_an_error_on_every_rank() {
        for (r, e) in mismatch_errors(|_| 3, true).into_iter().enumerate() {
            match e {
                Error::ModuleMismatch {
                    rank,
                    offender: 2,
                    reference: 0,
                    problem:
                        ModuleProblem::ParamCount {
                            expected: 4,
                            got: 6,
                        },
                    ..
                } => assert_eq!(rank, r),
                other => panic!("rank {r}: {other}"),
            }
        }
    }

    #[test]
    fn replicas_with_another_parameter_shape_are_an_error_on_every_rank() {
        let errors = mismatch_errors(|r| if r == 1 { 4 } else { 3 }, false);
        for (r, e) in errors.into_iter().enumerate() {
            match e {
                Error::ModuleMismatch {
                    rank,
                    offender: 1,
                    problem:
                        ModuleProblem::Param {
                            index: 0,
                            expected: (6, Some(DType::F32)),
                            got: (8, Some(DType::F32)),
                        },
                    ..
                } => assert_eq!(rank, r),
                other => panic!("rank {r}: {other}"),
            }
        }
    }
}
