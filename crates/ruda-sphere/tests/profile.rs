//! `ruda_sphere::profile` around real transforms. A test binary of its own
//! with one test: the stage clocks are process-wide, and another test's
//! transforms would be counted too.

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
