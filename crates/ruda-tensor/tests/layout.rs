//! The layout helpers: the split-shape table, splitting and flattening, and
//! the polar halo radius against a brute-force computation on equiangular
//! and Gauss–Legendre latitudes.

mod common;

use std::f64::consts::PI;

use burn_backend::TensorMetadata;
use burn_flex::Flex;
use common::*;
use ruda_tensor::layout::*;

#[test]
fn split_shape_table() {
    for size in 0..=32usize {
        for chunks in 0..=8usize {
            match compute_split_shapes(size, chunks) {
                Ok(s) => {
                    assert!(chunks > 0 && size >= chunks);
                    assert_eq!(s.len(), chunks);
                    assert_eq!(s.iter().sum::<usize>(), size);
                    // The first size % chunks are one larger, then the base.
                    for (i, &c) in s.iter().enumerate() {
                        assert_eq!(
                            c,
                            size / chunks + usize::from(i < size % chunks),
                            "{size}/{chunks}"
                        );
                    }
                }
                Err(LayoutError::ZeroChunks { .. }) => assert_eq!(chunks, 0),
                Err(LayoutError::EmptyChunk { .. }) => assert!(chunks > 0 && size < chunks),
                Err(e) => panic!("{e}"),
            }
        }
    }
}

#[test]
fn split_and_flatten_tensors() {
    let x = float((0..2 * 3 * 7).map(|i| i as f64).collect(), &[2, 3, 7]);
    let parts = split_tensor_along_dim::<Flex>(x.clone(), 2, 3).unwrap();
    let widths: Vec<usize> = parts.iter().map(|p| p.shape()[2]).collect();
    assert_eq!(widths, vec![3, 2, 2]);
    assert_eq!(read_float::<f64>(parts[1].clone()).0[..2], [3.0, 4.0]);
    assert!(matches!(
        split_tensor_along_dim::<Flex>(x.clone(), 3, 2),
        Err(LayoutError::Dim { dim: 3, ndim: 3 })
    ));
    assert!(matches!(
        split_tensor_along_dim::<Flex>(x.clone(), -1, 8),
        Err(LayoutError::EmptyChunk { size: 7, chunks: 8 })
    ));
    // Flatten [2, 3] leading dims (6 rows) padded to 8, then restore.
    let f = flatten_and_pad_leading_dims::<Flex>(x.clone(), 8, 1).unwrap();
    assert_eq!(
        (f.tensor.shape().to_vec(), f.lead_shape.clone(), f.lead_size),
        (vec![8, 7], vec![2, 3], 6)
    );
    let (v, _) = read_float::<f64>(f.tensor.clone());
    assert!(v[42..].iter().all(|&z| z == 0.0), "padding rows are zeros");
    let back =
        unpad_and_unflatten_leading_dims::<Flex>(f.tensor, &f.lead_shape, f.lead_size, 1).unwrap();
    assert_eq!(read_float::<f64>(back), read_float::<f64>(x.clone()));
    // No padding when already large enough; never padded to a multiple.
    let f = flatten_and_pad_leading_dims::<Flex>(x.clone(), 2, 2).unwrap();
    assert_eq!(f.tensor.shape().to_vec(), vec![2, 3, 7]);
    assert!(matches!(
        flatten_and_pad_leading_dims::<Flex>(x.clone(), 4, 4),
        Err(LayoutError::TrailingDims { .. })
    ));
}

/// Gauss–Legendre nodes on [-1, 1] by Newton's method, as ascending colatitudes.
fn gauss_legendre_colatitudes(n: usize) -> Vec<f64> {
    let mut t: Vec<f64> = (0..n)
        .map(|i| {
            let mut x = (PI * (i as f64 + 0.75) / (n as f64 + 0.5)).cos();
            for _ in 0..100 {
                let (mut p0, mut p1) = (1.0, x);
                for k in 2..=n {
                    let p2 = ((2 * k - 1) as f64 * x * p1 - (k - 1) as f64 * p0) / k as f64;
                    p0 = p1;
                    p1 = p2;
                }
                let dp = n as f64 * (x * p1 - p0) / (x * x - 1.0);
                let dx = p1 / dp;
                x -= dx;
                if dx.abs() < 1e-15 {
                    break;
                }
            }
            x.acos()
        })
        .collect();
    t.sort_by(f64::total_cmp);
    t
}

/// The radius by brute force: for every output latitude a rank owns, every
/// input latitude within the cutoff, and how far it lies outside the rank's
/// own input range.
fn brute_radius(lin: &[f64], lout: &[f64], cutoff: f64, sin: &[usize], sout: &[usize]) -> usize {
    if sout.len() <= 1 {
        return 0;
    }
    let (mut i0, mut o0, mut r) = (0usize, 0usize, 0isize);
    for (ni, no) in sin.iter().zip(sout) {
        for &to in &lout[o0..o0 + no] {
            for (i, &t) in lin.iter().enumerate() {
                if (t - to).abs() <= cutoff {
                    r = r
                        .max(i0 as isize - i as isize)
                        .max(i as isize - (i0 + ni - 1) as isize);
                }
            }
        }
        i0 += ni;
        o0 += no;
    }
    r.max(0) as usize
}

#[test]
fn polar_halo_radius_matches_brute_force() {
    for nlat in [7usize, 10, 13, 32] {
        let equi: Vec<f64> = (0..nlat)
            .map(|i| (i as f64 + 0.5) * PI / nlat as f64)
            .collect();
        let gl = gauss_legendre_colatitudes(nlat);
        for lats in [&equi, &gl] {
            for ranks in 1..=4usize {
                let Ok(shapes) = compute_split_shapes(nlat, ranks) else {
                    continue;
                };
                for spacings in [0.5, 1.0, 1.5, 2.5, 4.0] {
                    let cutoff = spacings * PI / nlat as f64;
                    let want = brute_radius(lats, lats, cutoff, &shapes, &shapes);
                    let got = compute_polar_halo_radius(lats, lats, cutoff, &shapes, &shapes);
                    let min = *shapes.iter().min().unwrap();
                    if want > min {
                        assert!(
                            matches!(got, Err(LayoutError::HaloTooWide { .. })),
                            "{nlat} {ranks} {spacings}"
                        );
                    } else {
                        assert_eq!(
                            got.unwrap(),
                            want,
                            "nlat {nlat} ranks {ranks} cutoff {spacings}"
                        );
                    }
                }
            }
        }
    }
    // Output grid coarser than the input grid.
    let lin: Vec<f64> = (0..12).map(|i| (i as f64 + 0.5) * PI / 12.0).collect();
    let lout: Vec<f64> = (0..6).map(|i| (i as f64 + 0.5) * PI / 6.0).collect();
    let (sin, sout) = ([6, 6], [3, 3]);
    assert_eq!(
        compute_polar_halo_radius(&lin, &lout, 0.3, &sin, &sout).unwrap(),
        brute_radius(&lin, &lout, 0.3, &sin, &sout)
    );
    assert_eq!(
        compute_polar_halo_radius(&lin, &lin, 1.0, &[12], &[12]).unwrap(),
        0
    );
    assert!(matches!(
        compute_polar_halo_radius(&lin, &lin, 0.1, &[5, 6], &[6, 6]),
        Err(LayoutError::Shapes { .. })
    ));
}
