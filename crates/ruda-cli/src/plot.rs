//! `ruda bench --plot`: bus bandwidth against size, one solid line per
//! operation and, dashed in the same colour, that operation's roofline (the
//! busbw it would reach moving its minimum bytes at the STREAM rate measured
//! in the same run), as SVG.

use std::path::Path;

use plotters::prelude::*;

use crate::bench_report::Row;

/// One line of the plot: a name and its points (log₂ size, busbw).
pub type Series = (String, Vec<(f64, f64)>);

fn push(series: &mut Vec<Series>, name: String, point: (f64, f64)) {
    match series.iter_mut().find(|(n, _)| *n == name) {
        Some((_, pts)) => pts.push(point),
        None => series.push((name, vec![point])),
    }
}

/// Draw `rows` into an SVG file at `path`.
///
/// # Errors
/// The drawing backend's error, as text.
pub fn plot(rows: &[Row], title: &str, path: &Path) -> Result<(), String> {
    let mut measured: Vec<Series> = Vec::new();
    let mut roofline: Vec<Series> = Vec::new();
    for r in rows {
        let x = (r.bytes as f64).log2();
        if let Some(b) = r.busbw {
            push(&mut measured, r.op.clone(), (x, b));
        }
        if let Some(b) = r.roofline_busbw() {
            push(&mut roofline, format!("{} roofline", r.op), (x, b));
        }
    }
    let (xmin, xmax) = rows
        .iter()
        .map(|r| (r.bytes as f64).log2())
        .fold((f64::MAX, f64::MIN), |(a, b), x| (a.min(x), b.max(x)));
    let ymax = measured
        .iter()
        .chain(&roofline)
        .flat_map(|(_, p)| p.iter().map(|&(_, y)| y))
        .filter(|y| y.is_finite())
        .fold(0.0, f64::max)
        * 1.1
        + 1e-9;
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
    for (i, (name, pts)) in measured.iter().enumerate() {
        let color = ShapeStyle::from(Palette99::pick(i).to_rgba()).stroke_width(2);
        chart
            .draw_series(LineSeries::new(pts.iter().copied(), color))
            .map_err(|e| err(&e))?
            .label(name.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], color));
        chart
            .draw_series(pts.iter().map(|&p| Circle::new(p, 3, color.filled())))
            .map_err(|e| err(&e))?;
        let op_roof = format!("{name} roofline");
        if let Some((label, roof)) = roofline.iter().find(|(n, _)| *n == op_roof) {
            let dashed = ShapeStyle::from(Palette99::pick(i).to_rgba()).stroke_width(1);
            chart
                .draw_series(DashedLineSeries::new(roof.iter().copied(), 6, 4, dashed))
                .map_err(|e| err(&e))?
                .label(label.as_str())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 6, y), (x + 10, y), (x + 16, y)], dashed)
                });
        }
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

/// Draw named lines of `(x, y)` points into an SVG file at `path` (a loss
/// curve per run, say), each line in its own colour with a legend entry.
///
/// # Errors
/// The drawing backend's error, as text; an empty or non-finite input is
/// drawn as an empty chart.
///
/// # Example
/// ```
/// let path = std::env::temp_dir().join(format!("ruda-lines-{}.svg", std::process::id()));
/// let loss = vec![(0.0, 1.0), (1.0, 0.5), (2.0, 0.3)];
/// ruda_cli::plot::lines(&[("loss".into(), loss)], "training", "step", "loss", &path).unwrap();
/// assert!(std::fs::read_to_string(&path).unwrap().contains("<svg"));
/// # std::fs::remove_file(&path).unwrap();
/// ```
pub fn lines(
    series: &[Series],
    title: &str,
    x_label: &str,
    y_label: &str,
    path: &Path,
) -> Result<(), String> {
    let finite = || {
        series
            .iter()
            .flat_map(|(_, p)| p.iter().copied())
            .filter(|(x, y)| x.is_finite() && y.is_finite())
    };
    let (xmin, xmax) = finite().fold((f64::MAX, f64::MIN), |(a, b), (x, _)| (a.min(x), b.max(x)));
    let (ymin, ymax) = finite().fold((f64::MAX, f64::MIN), |(a, b), (_, y)| (a.min(y), b.max(y)));
    let (xmin, xmax) = if xmin <= xmax {
        (xmin, xmax)
    } else {
        (0.0, 1.0)
    };
    let (ymin, ymax) = if ymin <= ymax {
        (ymin, ymax)
    } else {
        (0.0, 1.0)
    };
    let pad = (ymax - ymin).max(1e-12) * 0.05;
    let root = SVGBackend::new(path, (900, 560)).into_drawing_area();
    let err = |e: &dyn std::fmt::Display| e.to_string();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(xmin..xmax.max(xmin + 1e-12), ymin - pad..ymax + pad)
        .map_err(|e| err(&e))?;
    chart
        .configure_mesh()
        .x_desc(x_label)
        .y_desc(y_label)
        .draw()
        .map_err(|e| err(&e))?;
    for (i, (name, pts)) in series.iter().enumerate() {
        // Alternate solid and dashed, so that lines drawn on top of each
        // other (a run and its reference) both stay visible.
        let color = ShapeStyle::from(Palette99::pick(i).to_rgba()).stroke_width(2);
        let pts: Vec<(f64, f64)> = pts
            .iter()
            .copied()
            .filter(|(x, y)| x.is_finite() && y.is_finite())
            .collect();
        if i % 2 == 0 {
            chart
                .draw_series(LineSeries::new(pts, color))
                .map_err(|e| err(&e))?
                .label(name.as_str())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], color));
        } else {
            chart
                .draw_series(DashedLineSeries::new(pts, 6, 4, color))
                .map_err(|e| err(&e))?
                .label(name.as_str())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 6, y), (x + 10, y), (x + 16, y)], color)
                });
        }
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
