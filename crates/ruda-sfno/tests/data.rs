//! Shallow-water training pairs, the loss, and models on edge-case inputs.

use burn_tensor::{DType, Device, Tensor};
use ruda_sfno::{SfnoConfig, ShallowWaterData, SphereMse, patch};
use ruda_sphere::shallow_water::SerialDomain;

/// Sample 0's input is normalised to mean 0 and variance 1 per field (the
/// statistics come from it); its target is the solver's state `dt` later.
#[test]
fn pairs_are_normalised_solver_steps() {
    let (nlat, nlon) = (16, 32);
    let data = ShallowWaterData::new(nlat, nlon, 3600.0, 600.0, &Device::flex()).unwrap();
    assert_eq!(data.nsteps(), 6);
    let (x, y) = data.sample(0).unwrap();
    let n = nlat * nlon;
    for f in 0..3 {
        let v = &x[f * n..(f + 1) * n];
        let mean = v.iter().sum::<f64>() / n as f64;
        let var = v.iter().map(|a| (a - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
        assert!(
            mean.abs() < 1e-10 && (var - 1.0).abs() < 1e-10,
            "field {f}: {mean} {var}"
        );
    }
    // The target, un-normalised, is the solver's state after 6 steps.
    let s = data.solver();
    let want = s
        .to_grid(s.step(s.random(0, 0.2).unwrap(), 6).unwrap())
        .unwrap();
    let want = want.into_data().try_to_vec::<f64>().unwrap();
    let (mean, std) = data.normalisation();
    for f in 0..3 {
        for i in 0..n {
            let got = y[f * n + i] * std[f] + mean[f];
            let w = want[f * n + i];
            assert!(
                (got - w).abs() <= 1e-12 * w.abs().max(std[f]),
                "field {f} point {i}"
            );
        }
    }
    // Different seeds differ; the state moves in an hour.
    assert_ne!(data.sample(1).unwrap().0, x);
    assert_ne!(x, y);
    let g = data.galewsky(2).unwrap();
    assert_eq!(g.len(), 3);
    assert_ne!(g[0], g[2]);
    assert!(ShallowWaterData::new(nlat, nlon, 100.0, 600.0, &Device::flex()).is_err());
}

/// An empty batch goes through the model (shape `[0, ..]`) with a zero
/// loss; a batch of one equals its slot in a batch of three.
#[test]
fn empty_and_single_batches() {
    let cfg = SfnoConfig {
        embed_dim: 3,
        num_layers: 2,
        ..SfnoConfig::new(13, 24)
    };
    let device = Device::flex();
    let model = cfg.init(&SerialDomain, 9, &device, DType::F64).unwrap();
    let empty = Tensor::<4>::zeros([0, 3, 13, 24], (&device, DType::F64));
    let out = model.forward(empty.clone()).unwrap();
    assert_eq!(out.dims(), [0, 3, 13, 24]);
    let mse = SphereMse::for_model(&model);
    assert_eq!(mse.total(mse.local(out, empty).unwrap()).unwrap(), 0.0);
    let v: Vec<f64> = (0..3 * 3 * 13 * 24)
        .map(|i| ((i * 7919) % 1000) as f64 / 500.0 - 1.0)
        .collect();
    let three = model
        .forward(patch(&v, [3, 3, 13, 24], 0..13, 0..24, &device, DType::F64))
        .unwrap();
    let one = patch(
        &v[3 * 13 * 24..2 * 3 * 13 * 24],
        [1, 3, 13, 24],
        0..13,
        0..24,
        &device,
        DType::F64,
    );
    let one = model
        .forward(one)
        .unwrap()
        .into_data()
        .try_to_vec::<f64>()
        .unwrap();
    let slot = three
        .narrow(0, 1, 1)
        .into_data()
        .try_to_vec::<f64>()
        .unwrap();
    let err = one
        .iter()
        .zip(&slot)
        .fold(0.0f64, |m, (a, b)| m.max((a - b).abs()));
    assert!(err < 1e-13, "{err}");
}

mod cache {
    //! Samples kept on disk: read back to the bit, keyed by the settings,
    //! corrupt files refused, concurrent writers safe.

    use burn_tensor::Device;
    use ruda_sfno::{SfnoError, ShallowWaterData};

    fn root(name: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("ruda-cache-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    fn data() -> ShallowWaterData {
        ShallowWaterData::new(16, 32, 1800.0, 900.0, &Device::flex()).unwrap()
    }

    #[test]
    fn a_cached_sample_is_the_made_one_and_is_read_back_from_disk() {
        let dir = root("read");
        let plain = data();
        let cached = data().with_cache(&dir);
        let made = plain.sample(4).unwrap();
        assert_eq!(cached.sample(4).unwrap(), made);
        let path = cached.cache().unwrap().path(4);
        assert!(path.exists());
        assert_eq!(cached.sample(4).unwrap(), made);
        // The file is what a later call reads: change a value in it.
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[16..24].copy_from_slice(&1234.5f64.to_le_bytes());
        std::fs::write(&path, &bytes).unwrap();
        let (x, y) = cached.sample(4).unwrap();
        assert_eq!(x[0], 1234.5);
        assert_eq!((&x[1..], &y), (&made.0[1..], &made.1));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn other_settings_use_other_files() {
        let dir = root("keys");
        let a = data().with_cache(&dir);
        let jets = data().with_cache(&dir).with_jets(true);
        let finer = ShallowWaterData::new(16, 32, 3600.0, 900.0, &Device::flex())
            .unwrap()
            .with_cache(&dir);
        let dirs = [a.cache(), jets.cache(), finer.cache()].map(|c| c.unwrap().dir().to_owned());
        assert_ne!(dirs[0], dirs[1]);
        assert_ne!(dirs[0], dirs[2]);
        assert_ne!(dirs[1], dirs[2]);
        // Seed 3 is a jet in one and a random state in the other.
        assert_ne!(a.sample(3).unwrap(), jets.sample(3).unwrap());
        assert_eq!(
            jets.sample(3).unwrap(),
            data().with_jets(true).sample(3).unwrap()
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_corrupt_file_is_an_error_naming_it() {
        let dir = root("corrupt");
        let d = data().with_cache(&dir);
        d.sample(2).unwrap();
        let path = d.cache().unwrap().path(2);
        let bytes = std::fs::read(&path).unwrap();
        for bad in [bytes[..bytes.len() - 8].to_vec(), b"not a sample".to_vec()] {
            std::fs::write(&path, &bad).unwrap();
            match d.sample(2) {
                Err(e @ SfnoError::Cache { .. }) => {
                    assert!(e.to_string().contains("seed-2.bin"), "{e}");
                }
                other => panic!("{other:?}"),
            }
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_folder_of_other_settings_is_refused() {
        let dir = root("settings");
        let d = data().with_cache(&dir);
        d.sample(1).unwrap();
        let file = d.cache().unwrap().dir().join("settings.txt");
        std::fs::write(&file, "something else").unwrap();
        match d.sample(2) {
            Err(e @ SfnoError::Cache { .. }) => {
                assert!(e.to_string().contains("other settings"), "{e}");
            }
            other => panic!("{other:?}"),
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn concurrent_writers_of_one_sample_agree() {
        let dir = root("race");
        let d = data().with_cache(&dir);
        let made = data().sample(7).unwrap();
        let got: Vec<_> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..4).map(|_| s.spawn(|| d.sample(7).unwrap())).collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert!(got.iter().all(|g| g == &made));
        let mut left: Vec<_> = std::fs::read_dir(d.cache().unwrap().dir())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        assert_eq!(
            left,
            ["seed-7.bin", "settings.txt"],
            "no temporary file left"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
