//! ruda-sphere's vector transforms against values recorded from
//! torch-harmonics 0.9.3 (CPU torch 2.14.1, float64) by
//! `reference/torch_harmonics_vector_reference.py`: `RealVectorSHT` and
//! `InverseRealVectorSHT` on both grids, poles included and not, odd and
//! even sizes, the Nyquist order kept; serial and on a 2 × 2 process grid.
//!
//! torch-harmonics 0.9.3 makes `RealVectorSHT`'s degree factor
//! `1 / (l (l + 1))` in float32 (see the script), so its float64
//! coefficients are off by up to ~3e-8; the forward transform is held to
//! 1e-12 against the same module with that factor in float64
//! (`vsht_x_f64`), and to 1e-7 against the module as it is (`vsht_x`).

mod common;

use burn_tensor::{Device, Tensor};
use common::{flat, rel_err, tensor, values};
use ruda_comm::LocalWorld;
use ruda_sphere::{
    DistributedInverseRealVectorSht, DistributedRealVectorSht, InverseRealVectorSht, LatitudeGrid,
    RealVectorSht, ShtSpec,
};
use ruda_tensor::ProcessGrid;
use serde_json::Value;

fn reference() -> Value {
    let text = include_str!("../reference/torch_harmonics_vector_0.9.3.json");
    serde_json::from_str(text).expect("valid reference JSON")
}

fn spec_of(case: &Value) -> ShtSpec {
    let (nlat, nlon) = (
        case["nlat"].as_u64().unwrap() as usize,
        case["nlon"].as_u64().unwrap() as usize,
    );
    let grid = match case["grid"].as_str().unwrap() {
        "equiangular" => LatitudeGrid::Equiangular,
        "legendre-gauss" => LatitudeGrid::LegendreGauss,
        other => panic!("unknown grid {other}"),
    };
    let spec = ShtSpec::new(nlat, nlon, grid).unwrap();
    assert_eq!(spec.lmax() as u64, case["lmax"].as_u64().unwrap(), "{case}");
    assert_eq!(spec.mmax() as u64, case["mmax"].as_u64().unwrap(), "{case}");
    spec
}

#[test]
fn the_reference_is_torch_harmonics_0_9_3() {
    let r = reference();
    assert!(r["torch_harmonics"].as_str().unwrap().starts_with("0.9.3"));
    assert_eq!(r["cases"].as_array().unwrap().len(), 4);
}

#[test]
fn serial_forward_and_inverse_match() {
    let device = Device::flex();
    for case in reference()["cases"].as_array().unwrap() {
        let spec = spec_of(case);
        let (nlat, nlon, l, m) = (spec.nlat(), spec.nlon(), spec.lmax(), spec.mmax());
        let x = tensor(flat(&case["x"]), [2, 2, nlat, nlon], &device);
        let c: Tensor<5> = RealVectorSht::new(spec).forward(x).unwrap();
        assert_eq!(c.dims(), [2, 2, l, m, 2]);
        let c = values(c);
        let err = rel_err(&c, &flat(&case["vsht_x_f64"]));
        assert!(
            err < 1e-12,
            "{spec:?}: RealVectorSHT (f64 factor) differs by {err:e}"
        );
        let err = rel_err(&c, &flat(&case["vsht_x"]));
        assert!(
            err < 1e-7,
            "{spec:?}: RealVectorSHT as is differs by {err:e}"
        );
        let c = tensor(flat(&case["c"]), [2, 2, l, m, 2], &device);
        let f: Tensor<4> = InverseRealVectorSht::new(spec).forward(c).unwrap();
        let err = rel_err(&values(f), &flat(&case["ivsht_c"]));
        assert!(
            err < 1e-12,
            "{spec:?}: InverseRealVectorSHT differs by {err:e}"
        );
    }
}

/// `[2, 2, a, b, ..]` values restricted to rows `r` of axis 2 and columns
/// `c` of axis 3 (`inner` values per entry).
fn block(v: &[f64], dims: [usize; 4], r: &[usize], c: &[usize], inner: usize) -> Vec<f64> {
    let mut out = Vec::new();
    for lead in 0..dims[0] * dims[1] {
        for &i in r {
            for &j in c {
                let at = ((lead * dims[2] + i) * dims[3] + j) * inner;
                out.extend_from_slice(&v[at..at + inner]);
            }
        }
    }
    out
}

#[test]
fn distributed_forward_and_inverse_match_on_a_2x2_grid() {
    for case in reference()["cases"].as_array().unwrap() {
        let spec = spec_of(case);
        let (nlat, nlon, nl, nm) = (spec.nlat(), spec.nlon(), spec.lmax(), spec.mmax());
        let (x, want_c) = (flat(&case["x"]), flat(&case["vsht_x_f64"]));
        let (c, want_f) = (flat(&case["c"]), flat(&case["ivsht_c"]));
        let errs = LocalWorld::new(4)
            .run(|comm| {
                let device = Device::flex();
                let grid = ProcessGrid::new(comm, 2, 2)?;
                let vsht = DistributedRealVectorSht::new(&grid, spec)?;
                let ivsht = DistributedInverseRealVectorSht::new(&grid, spec)?;
                let lay = vsht.layout();
                let (lat, lon) = (lay.lat_range(), lay.lon_range());
                let (lr, orders) = (lay.l_range(), lay.orders());
                let lats: Vec<usize> = lat.clone().collect();
                let lons: Vec<usize> = lon.clone().collect();
                let degrees: Vec<usize> = lr.clone().collect();
                let patch = block(&x, [2, 2, nlat, nlon], &lats, &lons, 1);
                let patch = tensor(patch, [2, 2, lat.len(), lon.len()], &device);
                let got: Tensor<5> = vsht.forward(patch)?;
                let want = block(&want_c, [2, 2, nl, nm], &degrees, &orders, 2);
                let e1 = rel_err(&values(got), &want);
                let cb = block(&c, [2, 2, nl, nm], &degrees, &orders, 2);
                let cb = tensor(cb, [2, 2, lr.len(), orders.len(), 2], &device);
                let got: Tensor<4> = ivsht.forward(cb)?;
                let want = block(&want_f, [2, 2, nlat, nlon], &lats, &lons, 1);
                let e2 = rel_err(&values(got), &want);
                Ok::<_, ruda_sphere::SphereError>((e1, e2))
            })
            .unwrap();
        for (rank, (e1, e2)) in errs.into_iter().enumerate() {
            assert!(
                e1 < 1e-12,
                "{spec:?} rank {rank}: forward differs by {e1:e}"
            );
            assert!(
                e2 < 1e-12,
                "{spec:?} rank {rank}: inverse differs by {e2:e}"
            );
        }
    }
}
