//! Misuse of the primitives ends in errors on every rank, not hangs.

mod common;

use std::time::{Duration, Instant};

use burn_backend::ops::FloatTensorOps;
use burn_flex::Flex;
use common::*;
use ruda_comm::{LocalWorld, RankError};
use ruda_tensor::ProcessGrid;
use ruda_tensor::layout::LayoutError;
use ruda_tensor::primitives;
use ruda_tensor::{PrimitiveError, TensorOp as PrimitiveOp};

#[test]
fn a_grid_that_does_not_fit_the_world() {
    for e in errors(world(6).run_each(|c| ProcessGrid::new(c, 4, 2).map(|_| ()))) {
        assert_eq!(
            e,
            PrimitiveError::GridSize {
                polar: 4,
                azimuth: 2,
                world: 6
            }
        );
    }
}

#[test]
fn wrong_declared_sizes_fail_everywhere() {
    // Rank 1 holds 5 columns but every rank declares [3, 4].
    let errs = errors(world(2).run_each(|c| {
        let g = ProcessGrid::new(c, 2, 1)?;
        let cols = 3 + 2 * g.polar_rank();
        primitives::gather_from_polar_region::<Flex, _>(
            &g,
            float(vec![0f64; 2 * cols], &[2, cols]),
            1,
            &[3, 4],
        )
        .map(|_| ())
    }));
    for (r, e) in errs.into_iter().enumerate() {
        match e {
            PrimitiveError::DeclaredSizes {
                op: PrimitiveOp::GatherFrom,
                rank,
                actual,
                ..
            } => {
                assert_eq!((rank, actual), (r, vec![3, 5]));
            }
            other => panic!("{other}"),
        }
    }
    // Only rank 0 declares wrongly: it is named on both ranks.
    let errs = errors(world(2).run_each(|c| {
        let g = ProcessGrid::new(c, 1, 2)?;
        let me = g.azimuth_rank();
        let declared: &[usize] = if me == 0 { &[1, 1] } else { &[2, 2] };
        primitives::distributed_transpose_azimuth::<Flex, _>(
            &g,
            float(vec![0f64; 4 * 2], &[4, 2]),
            (0, 1),
            declared,
        )
        .map(|_| ())
    }));
    for e in errs {
        assert!(
            matches!(
                e,
                PrimitiveError::DeclaredSizes {
                    offender: 0,
                    op: PrimitiveOp::Transpose,
                    ..
                }
            ),
            "{e}"
        );
    }
}

#[test]
fn a_halo_wider_than_a_neighbours_chunk_fails_everywhere() {
    let errs = errors(world(3).run_each(|c| {
        let g = ProcessGrid::new(c, 3, 1)?;
        let rows = if g.polar_rank() == 1 { 1 } else { 4 };
        primitives::polar_halo_exchange::<Flex, _>(&g, float(vec![0f64; rows * 2], &[rows, 2]), 2)
            .map(|_| ())
    }));
    for e in errs {
        assert!(
            matches!(
                e,
                PrimitiveError::Halo {
                    offender: 1,
                    rows: 1,
                    radius: 2,
                    ..
                }
            ),
            "{e}"
        );
    }
    // A halo-padded tensor of the wrong height is refused locally.
    let errs = errors(world(1).run_each(|c| {
        let g = ProcessGrid::new(c, 1, 1)?;
        primitives::polar_halo_reduce::<Flex, _>(&g, float(vec![0f64; 6], &[3, 2]), 1, 3)
            .map(|_| ())
    }));
    assert!(matches!(
        errs[0],
        PrimitiveError::HaloShape {
            rows: 3,
            expected: 5,
            ..
        }
    ));
}

#[test]
fn layout_errors_name_the_primitive() {
    let errs = errors(world(4).run_each(|c| {
        let g = ProcessGrid::new(c, 4, 1)?;
        // Three columns cannot be scattered over four ranks.
        primitives::scatter_to_polar_region::<Flex, _>(&g, float(vec![0f64; 3], &[1, 3]), -1)
            .map(|_| ())
    }));
    for e in errs {
        assert!(matches!(
            e,
            PrimitiveError::Layout {
                op: PrimitiveOp::ScatterTo,
                error: LayoutError::EmptyChunk { size: 3, chunks: 4 },
                ..
            }
        ));
    }
    let errs = errors(world(1).run_each(|c| {
        let g = ProcessGrid::new(c, 1, 1)?;
        primitives::reduce_from_scatter_to_polar_region::<Flex, _>(
            &g,
            float(vec![0f64; 3], &[1, 3]),
            2,
        )
        .map(|_| ())
    }));
    assert!(matches!(
        errs[0],
        PrimitiveError::Layout {
            error: LayoutError::Dim { dim: 2, ndim: 2 },
            ..
        }
    ));
}

#[test]
fn a_rank_skipping_a_backward_ends_in_an_error_not_a_hang() {
    let start = Instant::now();
    let results = LocalWorld::new(2)
        .timeout(Duration::from_millis(300))
        .run_each(|c| {
            let g = ProcessGrid::new(c, 2, 1).unwrap();
            let x = leaf(vec![1.0; 4], &[2, 2]);
            let y =
                primitives::gather_from_copy_to_polar_region::<Ad, _>(&g, x.clone(), 0, &[2, 2])
                    .unwrap();
            if g.polar_rank() == 0 {
                let _ = grad_of(Ad::float_sum(y), &x);
            }
            Ok::<_, ()>(())
        });
    assert!(start.elapsed() < Duration::from_secs(10));
    assert!(
        matches!(&results[0], Err(RankError::Panicked(m)) if m.contains("the backward pass of gather_from_copy_to on rank 0")),
        "{:?}",
        results[0]
    );
}
