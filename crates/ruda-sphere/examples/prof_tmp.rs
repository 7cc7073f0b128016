use std::time::Instant;
use burn_tensor::{DType, Device, Tensor, TensorData};
use ruda_sphere::{RealSht, InverseRealSht, ShtSpec, LatitudeGrid};
fn main() {
    let spec = ShtSpec::new(361, 720, LatitudeGrid::Equiangular).unwrap();
    let (sht, isht) = (RealSht::new(spec), InverseRealSht::new(spec));
    for dtype in [DType::F32, DType::F64, DType::F32, DType::F64] {
        let x = Tensor::<3>::from_data(TensorData::new(vec![0.5f64; 4*361*720], [4, 361, 720]), (&Device::flex(), dtype));
        let mut tf = vec![]; let mut ti = vec![];
        for _ in 0..7 {
            let t = Instant::now();
            let c: Tensor<4> = sht.forward(x.clone()).unwrap();
            let _ = c.dims();
            tf.push(t.elapsed().as_secs_f64()*1e3);
            let t = Instant::now();
            let y: Tensor<3> = isht.forward(c).unwrap();
            let _ = y.dims();
            ti.push(t.elapsed().as_secs_f64()*1e3);
        }
        tf.sort_by(f64::total_cmp); ti.sort_by(f64::total_cmp);
        println!("{dtype:?} forward {:.2} ms inverse {:.2} ms", tf[3], ti[3]);
    }
}
