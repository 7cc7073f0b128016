//! `ruda_sphere::profile` around real transforms (the stage clocks are per
//! thread: other tests' transforms are not counted).

use std::time::{Duration, Instant};

use burn_tensor::{DType, Device, Tensor};
use ruda_sphere::profile::{Stage, profile};
use ruda_sphere::{InverseRealSht, LatitudeGrid, RealSht, ShtSpec, SphereError};

#[test]
fn a_round_trip_is_split_into_its_stages() {
    let spec = ShtSpec::new(65, 128, LatitudeGrid::Equiangular).unwrap();
    let (sht, isht) = (RealSht::new(spec), InverseRealSht::new(spec));
    for dtype in [DType::F64, DType::F32] {
        let x = Tensor::<3>::ones([4, 65, 128], (&Device::flex(), dtype));
        let round_trip = || -> Result<Tensor<3>, SphereError> {
            let c: Tensor<4> = sht.forward(x.clone())?;
            isht.forward(c)
        };
        let start = Instant::now();
        let (y, times) = profile(round_trip);
        let wall = start.elapsed();
        assert_eq!(y.unwrap().dims(), [4, 65, 128]);
        for stage in Stage::ALL {
            assert!(
                times.get(stage) > Duration::ZERO,
                "{dtype:?}: {stage:?} not timed"
            );
        }
        // The stages run one after another on this thread.
        assert!(times.total() <= wall, "{dtype:?}: {times:?} in {wall:?}");
    }
}

/// Every rank of a world profiles its part of a distributed transform at
/// the same time; the ranks wait for one another inside their closures
/// (the transposes). Each gets its own stages, and none waits for another's
/// profile (with one process-wide profile at a time, the second rank
/// waited for the first, which waited for it in a collective: a hang).
#[test]
fn ranks_profile_their_parts_of_a_distributed_transform_at_once() {
    use ruda_comm::LocalWorld;
    use ruda_sphere::DistributedRealSht;
    use ruda_tensor::ProcessGrid;

    let spec = ShtSpec::new(33, 64, LatitudeGrid::Equiangular).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let out = LocalWorld::new(2)
            .timeout(Duration::from_secs(30))
            .run(|comm| {
                let grid = ProcessGrid::new(comm, 2, 1)?;
                let sht = DistributedRealSht::new(&grid, spec)?;
                let (lat, lon) = (sht.layout().lat_range(), sht.layout().lon_range());
                let x = Tensor::<3>::ones([2, lat.len(), lon.len()], (&Device::flex(), DType::F64));
                let (c, times) = profile(|| sht.forward::<3, 4>(x));
                c?;
                Ok::<_, SphereError>(times)
            });
        let _ = tx.send(out);
    });
    let times = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("every rank's profile ends")
        .expect("the transform runs");
    for t in times {
        assert!(t.get(Stage::Legendre) > Duration::ZERO, "{t:?}");
        assert!(t.get(Stage::Fourier) > Duration::ZERO, "{t:?}");
    }
}
