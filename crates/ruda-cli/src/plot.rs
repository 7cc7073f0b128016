//! `ruda bench --plot`: bus bandwidth against size, one line per operation,
//! with the memcpy line, as SVG.

use std::path::Path;

use plotters::prelude::*;

use crate::bench_cmd::Row;

/// Draw `rows` into an SVG file at `path`.
///
/// # Errors
/// The drawing backend's error, as text.
pub fn plot(rows: &[Row], title: &str, path: &Path) -> Result<(), String> {
    let mut series: Vec<(&str, Vec<(f64, f64)>)> = Vec::new();
    for r in rows {
        let x = (r.bytes as f64).log2();
        match series.iter_mut().find(|(name, _)| *name == r.op) {
            Some((_, pts)) => pts.push((x, r.busbw)),
            None => series.push((r.op, vec![(x, r.busbw)])),
        }
    }
    let (xmin, xmax) = rows
        .iter()
        .map(|r| (r.bytes as f64).log2())
        .fold((f64::MAX, f64::MIN), |(a, b), x| (a.min(x), b.max(x)));
    let ymax = rows.iter().map(|r| r.busbw).fold(0.0, f64::max) * 1.1 + 1e-9;
    let root = SVGBackend::new(path, (900, 560)).into_drawing_area();
    let err = |e: &dyn std::fmt::Display| e.to_string();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(xmin - 0.5..xmax + 0.5, 0.0..ymax)
        .map_err(|e| err(&e))?;
    chart
        .configure_mesh()
        .x_desc("message size")
        .y_desc("busbw (GB/s)")
        .x_label_formatter(&|x| crate::sizes::human(2f64.powf(x.round()) as usize))
        .draw()
        .map_err(|e| err(&e))?;
    for (i, (name, pts)) in series.iter().enumerate() {
        let color = if *name == "memcpy" {
            BLACK.to_rgba()
        } else {
            Palette99::pick(i).to_rgba()
        };
        let color = ShapeStyle::from(color).stroke_width(2);
        chart
            .draw_series(LineSeries::new(pts.iter().copied(), color))
            .map_err(|e| err(&e))?
            .label(*name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], color));
        chart
            .draw_series(pts.iter().map(|&p| Circle::new(p, 3, color.filled())))
            .map_err(|e| err(&e))?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperRight)
        .draw()
        .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))
}
