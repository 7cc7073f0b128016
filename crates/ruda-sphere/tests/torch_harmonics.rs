//! ruda-sphere against values recorded from torch-harmonics 0.9.3 (CPU
//! torch 2.14.1, float64) by `reference/torch_harmonics_reference.py`:
//! grids, default truncation, `RealSHT` and `InverseRealSHT`.

mod common;

use burn_tensor::{Device, Tensor};
use common::{flat, rel_err, tensor, values};
use ruda_sphere::{InverseRealSht, LatitudeGrid, Latitudes, RealSht, ShtSpec};
use serde_json::Value;

fn reference() -> Value {
    let text = include_str!("../reference/torch_harmonics_0.9.3.json");
    serde_json::from_str(text).expect("valid reference JSON")
}

fn grid(name: &str) -> LatitudeGrid {
    match name {
        "equiangular" => LatitudeGrid::Equiangular,
        "legendre-gauss" => LatitudeGrid::LegendreGauss,
        other => panic!("unknown grid {other}"),
    }
}

#[test]
fn the_reference_is_torch_harmonics_0_9_3() {
    let r = reference();
    assert!(r["torch_harmonics"].as_str().unwrap().starts_with("0.9.3"));
    assert_eq!(r["cases"].as_array().unwrap().len(), 4);
}

#[test]
fn grids_and_truncation_match() {
    for case in reference()["cases"].as_array().unwrap() {
        let (nlat, nlon) = (
            case["nlat"].as_u64().unwrap() as usize,
            case["nlon"].as_u64().unwrap() as usize,
        );
        let g = grid(case["grid"].as_str().unwrap());
        let spec = ShtSpec::new(nlat, nlon, g).unwrap();
        assert_eq!(spec.lmax() as u64, case["lmax"].as_u64().unwrap(), "{case}");
        assert_eq!(spec.mmax() as u64, case["mmax"].as_u64().unwrap());
        let q = Latitudes::new(nlat, g).unwrap();
        let theta = flat(&case["colatitudes"]);
        let w = flat(&case["weights"]);
        for (a, b) in q.colatitudes.iter().zip(&theta) {
            assert!((a - b).abs() < 1e-14, "{g} {nlat}: colatitude {a} vs {b}");
        }
        for (a, b) in q.weights.iter().zip(&w) {
            assert!((a - b).abs() < 1e-14, "{g} {nlat}: weight {a} vs {b}");
        }
    }
}

#[test]
fn forward_and_inverse_match() {
    let device = Device::flex();
    for case in reference()["cases"].as_array().unwrap() {
        let (nlat, nlon) = (
            case["nlat"].as_u64().unwrap() as usize,
            case["nlon"].as_u64().unwrap() as usize,
        );
        let spec = ShtSpec::new(nlat, nlon, grid(case["grid"].as_str().unwrap())).unwrap();
        let (l, m) = (spec.lmax(), spec.mmax());
        let x = tensor(flat(&case["x"]), [2, nlat, nlon], &device);
        let c: Tensor<4> = RealSht::new(spec).forward(x).unwrap();
        let err = rel_err(&values(c), &flat(&case["sht_x"]));
        assert!(err < 1e-12, "{spec:?}: RealSHT differs by {err:e}");
        let c = tensor(flat(&case["c"]), [2, l, m, 2], &device);
        let f: Tensor<3> = InverseRealSht::new(spec).forward(c).unwrap();
        let err = rel_err(&values(f), &flat(&case["isht_c"]));
        assert!(err < 1e-12, "{spec:?}: InverseRealSHT differs by {err:e}");
    }
}
