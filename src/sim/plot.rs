//! Plots for the workbench: calibration curve with the diagonal, rating histogram
//! against the true-skill distribution, display rating over time per true-skill decile, and
//! wait time against match quality.
//!
//! SVG by default; PNG when a user asks (`--png`). Text is laid out with the DejaVu Sans font
//! compiled into the binary (`fonts/`, from Debian's `fonts-dejavu-core`, Bitstream Vera
//! licence in `fonts/LICENSE-DejaVu.txt`) through plotters' pure-Rust `ab_glyph` support, so no
//! system font library is needed. This module only draws what it is given.

use std::path::Path;
use std::sync::Once;

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::FontStyle;

use super::measures::CalibrationBin;

/// Output format of a plot file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// Scalable vector graphics (default).
    Svg,
    /// Portable network graphics (when a user asks).
    Png,
}

const SIZE: (u32, u32) = (900, 640);
const FONT: &str = "sans-serif";
static FONT_BYTES: &[u8] = include_bytes!("fonts/DejaVuSans.ttf");

fn register_font() -> Result<(), PlotError> {
    static ONCE: Once = Once::new();
    let mut result = Ok(());
    ONCE.call_once(|| {
        result = plotters::style::register_font(FONT, FontStyle::Normal, FONT_BYTES)
            .map_err(|_| PlotError("the bundled font could not be loaded".into()));
    });
    result
}

/// Why a plot could not be drawn or written.
#[derive(Debug, thiserror::Error)]
#[error("plot: {0}")]
pub struct PlotError(String);

fn err<E: std::fmt::Display>(e: E) -> PlotError {
    PlotError(e.to_string())
}

/// Draws with the backend `format` names into `path`.
macro_rules! with_backend {
    ($path:expr, $format:expr, |$root:ident| $body:expr) => {{
        register_font()?;
        match $format {
            Format::Svg => {
                let $root = SVGBackend::new($path, SIZE).into_drawing_area();
                $body?;
                $root.present().map_err(err)?;
            }
            Format::Png => {
                let $root = BitMapBackend::new($path, SIZE).into_drawing_area();
                $body?;
                $root.present().map_err(err)?;
            }
        }
        Ok(())
    }};
}

/// Calibration curves (the "predictions vs. actuals" graph of Josh Menke's "Skill, Matchmaking,
/// and Ranking", GDC 2016): per system, mean predicted probability of the favourite
/// against how often it won, per bucket, over the diagonal of perfect calibration.
pub fn calibration(
    path: &Path,
    title: &str,
    curves: &[(String, Vec<CalibrationBin>)],
    format: Format,
) -> Result<(), PlotError> {
    with_backend!(path, format, |root| draw_calibration(&root, title, curves))
}

fn draw_calibration<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    title: &str,
    curves: &[(String, Vec<CalibrationBin>)],
) -> Result<(), PlotError> {
    root.fill(&WHITE).map_err(err)?;
    let mut chart = ChartBuilder::on(root)
        .caption(title, (FONT, 24))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(55)
        .build_cartesian_2d(0.5f64..1.0f64, 0.3f64..1.0f64)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("predicted win probability of the favourite")
        .y_desc("how often the favourite won")
        .label_style((FONT, 14))
        .draw()
        .map_err(err)?;
    chart
        .draw_series(LineSeries::new(
            [(0.5, 0.5), (1.0, 1.0)],
            BLACK.mix(0.5).stroke_width(1),
        ))
        .map_err(err)?
        .label("perfect calibration")
        .legend(|(x, y)| PathElement::new([(x, y), (x + 20, y)], BLACK.mix(0.5)));
    for (i, (name, bins)) in curves.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        let pts: Vec<(f64, f64)> = bins.iter().map(|b| (b.predicted, b.actual)).collect();
        chart
            .draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))
            .map_err(err)?
            .label(name.as_str())
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], color.stroke_width(2)));
        chart
            .draw_series(pts.iter().map(|&p| Circle::new(p, 4, color.filled())))
            .map_err(err)?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .label_font((FONT, 14))
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK.mix(0.3))
        .draw()
        .map_err(err)?;
    Ok(())
}

/// Histogram of final ratings (mapped to the true-skill scale) against the true skills.
pub fn rating_histogram(
    path: &Path,
    title: &str,
    ratings: &[f64],
    truths: &[f64],
    format: Format,
) -> Result<(), PlotError> {
    with_backend!(path, format, |root| draw_histogram(
        &root, title, ratings, truths
    ))
}

fn draw_histogram<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    title: &str,
    ratings: &[f64],
    truths: &[f64],
) -> Result<(), PlotError> {
    root.fill(&WHITE).map_err(err)?;
    let all = ratings
        .iter()
        .chain(truths)
        .copied()
        .filter(|x| x.is_finite());
    let (lo, hi) = all.fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), x| {
        (l.min(x), h.max(x))
    });
    let (lo, hi) = if lo < hi { (lo, hi) } else { (0.0, 1.0) };
    const BUCKETS: usize = 40;
    let width = (hi - lo) / BUCKETS as f64;
    let count = |xs: &[f64]| {
        let mut c = [0u32; BUCKETS];
        for x in xs.iter().filter(|x| x.is_finite()) {
            let b = (((x - lo) / width) as usize).min(BUCKETS - 1);
            c[b] += 1;
        }
        c
    };
    let (cr, ct) = (count(ratings), count(truths));
    let top = cr.iter().chain(&ct).copied().max().unwrap_or(1).max(1);
    let mut chart = ChartBuilder::on(root)
        .caption(title, (FONT, 24))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(55)
        .build_cartesian_2d(lo..hi, 0u32..top + top / 10 + 1)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("skill (true-skill scale)")
        .y_desc("players")
        .label_style((FONT, 14))
        .draw()
        .map_err(err)?;
    let series = [
        ("true skill", &ct, BLUE.mix(0.35)),
        ("rating", &cr, RED.mix(0.35)),
    ];
    for (name, counts, color) in series {
        chart
            .draw_series(counts.iter().enumerate().map(|(i, &c)| {
                let x0 = lo + i as f64 * width;
                Rectangle::new([(x0, 0), (x0 + width, c)], color.filled())
            }))
            .map_err(err)?
            .label(name)
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 15, y + 5)], color.filled()));
    }
    chart
        .configure_series_labels()
        .label_font((FONT, 14))
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK.mix(0.3))
        .draw()
        .map_err(err)?;
    Ok(())
}

/// One line per series over simulated days (rank/display rating per true-skill decile).
pub fn lines_over_time(
    path: &Path,
    title: &str,
    y_desc: &str,
    series: &[(String, Vec<(f64, f64)>)],
    format: Format,
) -> Result<(), PlotError> {
    with_backend!(path, format, |root| draw_lines(
        &root, title, y_desc, series
    ))
}

fn draw_lines<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    title: &str,
    y_desc: &str,
    series: &[(String, Vec<(f64, f64)>)],
) -> Result<(), PlotError> {
    root.fill(&WHITE).map_err(err)?;
    let pts = series.iter().flat_map(|(_, s)| s.iter());
    let (x0, x1, y0, y1) = pts.fold(
        (
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::INFINITY,
            f64::NEG_INFINITY,
        ),
        |(a, b, c, d), &(x, y)| (a.min(x), b.max(x), c.min(y), d.max(y)),
    );
    let (x0, x1) = if x0 < x1 { (x0, x1) } else { (0.0, 1.0) };
    let (y0, y1) = if y0 < y1 {
        (y0, y1)
    } else {
        (y0 - 1.0, y0 + 1.0)
    };
    let pad = (y1 - y0) * 0.05;
    let mut chart = ChartBuilder::on(root)
        .caption(title, (FONT, 24))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(60)
        .right_y_label_area_size(0)
        .build_cartesian_2d(x0..x1, (y0 - pad)..(y1 + pad))
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("simulated day")
        .y_desc(y_desc)
        .label_style((FONT, 14))
        .draw()
        .map_err(err)?;
    for (i, (name, s)) in series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        chart
            .draw_series(LineSeries::new(s.iter().copied(), color.stroke_width(2)))
            .map_err(err)?
            .label(name.as_str())
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], color.stroke_width(2)));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .label_font((FONT, 12))
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK.mix(0.3))
        .draw()
        .map_err(err)?;
    Ok(())
}

/// Scatter of (wait seconds, match quality) per matched ticket, with the mean quality per wait
/// bucket drawn over it.
pub fn wait_vs_quality(
    path: &Path,
    title: &str,
    points: &[(f64, f64)],
    format: Format,
) -> Result<(), PlotError> {
    with_backend!(path, format, |root| draw_scatter(&root, title, points))
}

fn draw_scatter<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    title: &str,
    points: &[(f64, f64)],
) -> Result<(), PlotError> {
    root.fill(&WHITE).map_err(err)?;
    let x1 = points
        .iter()
        .map(|p| p.0)
        .filter(|x| x.is_finite())
        .fold(1.0f64, f64::max);
    let mut chart = ChartBuilder::on(root)
        .caption(title, (FONT, 24))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(55)
        .build_cartesian_2d(0.0..x1 * 1.02, 0.0f64..0.52)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("wait (simulated seconds)")
        .y_desc("match quality (underdog win probability)")
        .label_style((FONT, 14))
        .draw()
        .map_err(err)?;
    // At most 5,000 points, evenly thinned, so the SVG stays small.
    let step = (points.len() / 5000).max(1);
    chart
        .draw_series(
            points
                .iter()
                .step_by(step)
                .map(|&p| Circle::new(p, 2, BLUE.mix(0.25).filled())),
        )
        .map_err(err)?;
    const BUCKETS: usize = 20;
    let mut sums = [(0.0, 0u32); BUCKETS];
    for &(w, q) in points {
        let b = ((w / x1 * BUCKETS as f64) as usize).min(BUCKETS - 1);
        sums[b].0 += q;
        sums[b].1 += 1;
    }
    let means: Vec<(f64, f64)> = sums
        .iter()
        .enumerate()
        .filter(|(_, s)| s.1 > 0)
        .map(|(i, s)| ((i as f64 + 0.5) * x1 / BUCKETS as f64, s.0 / f64::from(s.1)))
        .collect();
    chart
        .draw_series(LineSeries::new(means, RED.stroke_width(2)))
        .map_err(err)?
        .label("mean quality by wait")
        .legend(|(x, y)| PathElement::new([(x, y), (x + 20, y)], RED.stroke_width(2)));
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .label_font((FONT, 14))
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK.mix(0.3))
        .draw()
        .map_err(err)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_plot_writes_a_non_empty_svg_and_png() {
        let dir = tempfile::tempdir().unwrap();
        let bins = vec![
            CalibrationBin {
                low: 0.5,
                high: 0.55,
                n: 10,
                predicted: 0.52,
                actual: 0.5,
            },
            CalibrationBin {
                low: 0.7,
                high: 0.75,
                n: 10,
                predicted: 0.72,
                actual: 0.8,
            },
        ];
        let svg = dir.path().join("c.svg");
        calibration(&svg, "t", &[("glicko2".into(), bins.clone())], Format::Svg).unwrap();
        let text = std::fs::read_to_string(&svg).unwrap();
        assert!(text.contains("<svg") && text.contains("glicko2"));
        let png = dir.path().join("c.png");
        calibration(&png, "t", &[("x".into(), bins)], Format::Png).unwrap();
        assert!(std::fs::metadata(&png).unwrap().len() > 100);
        let h = dir.path().join("h.svg");
        rating_histogram(&h, "t", &[1.0, 2.0, 2.5], &[1.5, 2.0], Format::Svg).unwrap();
        let l = dir.path().join("l.svg");
        let series = vec![("d1".to_string(), vec![(0.0, 1.0), (1.0, 2.0)])];
        lines_over_time(&l, "t", "y", &series, Format::Svg).unwrap();
        let w = dir.path().join("w.svg");
        wait_vs_quality(&w, "t", &[(1.0, 0.4), (30.0, 0.2)], Format::Svg).unwrap();
        for p in [h, l, w] {
            assert!(std::fs::metadata(&p).unwrap().len() > 100);
        }
    }
}
