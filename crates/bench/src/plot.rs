//! PNG plots: timeline (throughput and p99 over time, with fault markers), latency CDF, and
//! the throughput–latency curve of a sweep.
//!
//! Text is drawn with DejaVu Sans embedded in the binary (`assets/`, Bitstream Vera license,
//! see `assets/DejaVuSans-LICENSE`) through plotters' `ab_glyph` backend, so plotting needs no
//! system fontconfig or freetype, at build time or at run time.

use crate::stats::TimelineRow;
use anyhow::Context as _;
use hdrhistogram::Histogram;
use plotters::prelude::*;
use std::path::Path;
use std::sync::Once;

static FONT: &[u8] = include_bytes!("../assets/DejaVuSans.ttf");
const FAMILY: &str = "sans-serif";
const SIZE: (u32, u32) = (1200, 800);

fn register_font() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // The font is compiled in and known to be valid; a failure would show as missing text.
        if plotters::style::register_font(FAMILY, FontStyle::Normal, FONT).is_err() {
            tracing::error!("embedded font could not be loaded; plots will have no text");
        }
    });
}

/// Series colors, distinguishable and printable.
const COLORS: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
];

fn color(i: usize) -> RGBColor {
    COLORS[i % COLORS.len()]
}

/// A vertical marker on a timeline: an event (fault injected, node restarted) at `t_s`
/// seconds after the start of measurement.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Marker {
    pub t_s: f64,
    pub label: String,
}

impl std::str::FromStr for Marker {
    type Err = String;

    /// `SECONDS=LABEL`, e.g. `12.5=kill leader`.
    fn from_str(s: &str) -> Result<Marker, String> {
        let (t, label) = s.split_once('=').ok_or_else(|| format!("marker `{s}`: expected SECONDS=LABEL"))?;
        let t_s: f64 = t.trim().parse().map_err(|_| format!("marker `{s}`: `{t}` is not a number of seconds"))?;
        if !(t_s.is_finite() && t_s >= 0.0) {
            return Err(format!("marker `{s}`: time must be >= 0"));
        }
        Ok(Marker { t_s, label: label.trim().to_string() })
    }
}

fn err(e: impl std::fmt::Display) -> anyhow::Error {
    anyhow::anyhow!("drawing failed: {e}")
}

fn upper(max: f64) -> f64 {
    if max > 0.0 {
        max * 1.1
    } else {
        1.0
    }
}

/// Throughput (top) and p99 latency (bottom, log scale) per class over time. `rows` come
/// from [`crate::stats::Recorder::timeline_rows`]; classes without any operation are left out.
pub fn timeline(path: &Path, title: &str, rows: &[TimelineRow], markers: &[Marker]) -> anyhow::Result<()> {
    register_font();
    let root = BitMapBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let root = root.titled(title, (FAMILY, 28)).map_err(err)?;
    let (top, bottom) = root.split_vertically(SIZE.1 / 2 - 20);
    let interval = rows.get(1).map_or(1.0, |r| r.t_s - rows[0].t_s).max(1e-9);
    let t_max = (rows.len() as f64 * interval).max(markers.iter().map(|m| m.t_s).fold(0.0, f64::max)).max(interval);
    // Class names present in the run, "all" last (only drawn when several classes exist).
    let names: Vec<String> = rows
        .first()
        .map(|r| r.classes.iter().map(|c| c.class.clone()).collect::<Vec<String>>())
        .unwrap_or_default()
        .into_iter()
        .filter(|n| rows.iter().any(|r| r.classes.iter().any(|c| &c.class == n && c.ok + c.errors + c.rejected > 0)))
        .collect();
    let show_all = names.len() > 2;
    let names: Vec<String> = names.into_iter().filter(|n| n != "all" || show_all).collect();
    // Each point is drawn at the middle of its interval.
    let series = |name: &str, f: &dyn Fn(&crate::stats::ClassSummary) -> f64, skip_empty: bool| -> Vec<(f64, f64)> {
        rows.iter()
            .filter_map(|r| {
                let c = r.classes.iter().find(|c| c.class == name)?;
                if skip_empty && c.ok == 0 {
                    return None;
                }
                Some((r.t_s + interval / 2.0, f(c)))
            })
            .collect()
    };

    let tput_max = names.iter().flat_map(|n| series(n, &|c| c.throughput, false)).map(|p| p.1).fold(0.0, f64::max);
    let mut chart = ChartBuilder::on(&top)
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(90)
        .build_cartesian_2d(0.0..t_max, 0.0..upper(tput_max))
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("time since start of measurement (s)")
        .y_desc("throughput (ops/s)")
        .y_label_formatter(&|v| format!("{v:.0}"))
        .label_style((FAMILY, 16))
        .axis_desc_style((FAMILY, 18))
        .draw()
        .map_err(err)?;
    for (i, name) in names.iter().enumerate() {
        let c = color(i);
        chart
            .draw_series(LineSeries::new(series(name, &|c| c.throughput, false), c.stroke_width(2)))
            .map_err(err)?
            .label(name.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(3)));
    }
    draw_markers(&mut chart, markers, upper(tput_max), true)?;
    draw_legend(&mut chart, SeriesLabelPosition::LowerRight)?;

    let lat: Vec<f64> = names.iter().flat_map(|n| series(n, &|c| c.p99_ms, true)).map(|p| p.1).collect();
    let lat_min = lat.iter().copied().filter(|v| *v > 0.0).fold(f64::INFINITY, f64::min);
    let lat_max = lat.iter().copied().fold(0.0, f64::max);
    let (lo, hi) = if lat_min.is_finite() { (lat_min / 2.0, lat_max * 2.0) } else { (0.01, 10.0) };
    let mut chart = ChartBuilder::on(&bottom)
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(90)
        .build_cartesian_2d(0.0..t_max, (lo..hi).log_scale().with_key_points(log_ticks(lo, hi)))
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("time since start of measurement (s)")
        .y_desc("p99 latency (ms, log)")
        .y_label_formatter(&|v| format_ms(*v))
        .label_style((FAMILY, 16))
        .axis_desc_style((FAMILY, 18))
        .draw()
        .map_err(err)?;
    for (i, name) in names.iter().enumerate() {
        let c = color(i);
        let pts = series(name, &|c| c.p99_ms, true);
        chart
            .draw_series(LineSeries::new(pts.clone(), c.stroke_width(2)))
            .map_err(err)?
            .label(format!("{name} p99"))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(3)));
        chart.draw_series(pts.into_iter().map(|p| Circle::new(p, 3, c.filled()))).map_err(err)?;
    }
    draw_markers(&mut chart, markers, hi, false)?;
    draw_legend(&mut chart, SeriesLabelPosition::UpperRight)?;
    root.present().map_err(err).with_context(|| format!("writing {}", path.display()))
}

/// One line per series over time (x: seconds since the start of measurement), with the
/// markers: e.g. the normalized throughput of several protocols in 10 s windows under the
/// same fault schedule (HoliPaxos Fig. 9). Points are drawn at their `x` as given.
pub fn series_over_time(
    path: &Path,
    title: &str,
    y_desc: &str,
    series: &[(String, Vec<(f64, f64)>)],
    markers: &[Marker],
) -> anyhow::Result<()> {
    register_font();
    let root = BitMapBackend::new(path, (SIZE.0, SIZE.1 * 5 / 8)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let pts = series.iter().flat_map(|s| s.1.iter());
    let t_max = pts.clone().map(|p| p.0).chain(markers.iter().map(|m| m.t_s)).fold(1.0, f64::max);
    let y_max = upper(pts.map(|p| p.1).fold(0.0, f64::max));
    let mut chart = ChartBuilder::on(&root)
        .caption(title, (FAMILY, 26))
        .margin(20)
        .x_label_area_size(45)
        .y_label_area_size(80)
        .build_cartesian_2d(0.0..t_max * 1.02, 0.0..y_max)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("time since start of measurement (s)")
        .y_desc(y_desc)
        .label_style((FAMILY, 16))
        .axis_desc_style((FAMILY, 18))
        .draw()
        .map_err(err)?;
    for (i, (name, pts)) in series.iter().enumerate() {
        let c = color(i);
        chart
            .draw_series(LineSeries::new(pts.clone(), c.stroke_width(2)))
            .map_err(err)?
            .label(name.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(3)));
        chart.draw_series(pts.iter().map(|p| Circle::new(*p, 4, c.filled()))).map_err(err)?;
    }
    draw_markers(&mut chart, markers, y_max, true)?;
    draw_legend(&mut chart, SeriesLabelPosition::LowerRight)?;
    root.present().map_err(err).with_context(|| format!("writing {}", path.display()))
}

/// One panel of [`panels_over_time`]: named series of (seconds, value) points.
#[derive(Clone, Debug, Default)]
pub struct Panel {
    pub y_desc: String,
    pub series: Vec<(String, Vec<(f64, f64)>)>,
    /// Logarithmic y axis (latencies); non-positive values are left out.
    pub log: bool,
    /// Draw a dot at every point (sparse series such as 10 s windows).
    pub points: bool,
}

/// Panels stacked vertically over a shared time axis (seconds since the start of
/// measurement), each with the markers as red dashed lines (labelled in the top panel):
/// latency over time (p50/p99 per interval and per window), memory per replica over time
/// (HoliPaxos Fig. 10 and 11). Panels without any point are left out.
pub fn panels_over_time(path: &Path, title: &str, panels: &[Panel], markers: &[Marker]) -> anyhow::Result<()> {
    register_font();
    let panels: Vec<&Panel> = panels.iter().filter(|p| p.series.iter().any(|s| !s.1.is_empty())).collect();
    let height = 120 + 380 * panels.len().max(1) as u32;
    let root = BitMapBackend::new(path, (SIZE.0, height)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let root = root.titled(title, (FAMILY, 26)).map_err(err)?;
    let t_max = panels
        .iter()
        .flat_map(|p| p.series.iter().flat_map(|s| s.1.iter().map(|q| q.0)))
        .chain(markers.iter().map(|m| m.t_s))
        .fold(1.0, f64::max)
        * 1.02;
    let areas = root.split_evenly((panels.len().max(1), 1));
    for (k, (panel, area)) in panels.iter().zip(areas.iter()).enumerate() {
        let ys = panel.series.iter().flat_map(|s| s.1.iter().map(|q| q.1));
        let mut builder = ChartBuilder::on(area);
        builder.margin(15).x_label_area_size(45).y_label_area_size(90);
        if panel.log {
            let pos: Vec<f64> = ys.filter(|v| *v > 0.0).collect();
            let lo = pos.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = pos.iter().copied().fold(0.0, f64::max);
            let (lo, hi) = if lo.is_finite() { (lo / 1.5, hi * 1.5) } else { (0.01, 10.0) };
            let mut chart = builder
                .build_cartesian_2d(0.0..t_max, (lo..hi).log_scale().with_key_points(log_ticks(lo, hi)))
                .map_err(err)?;
            draw_panel(&mut chart, panel, &|v| format_ms(*v), true)?;
            draw_markers(&mut chart, markers, hi, k == 0)?;
            draw_legend(&mut chart, SeriesLabelPosition::UpperRight)?;
        } else {
            let y_max = upper(ys.fold(0.0, f64::max));
            let mut chart = builder.build_cartesian_2d(0.0..t_max, 0.0..y_max).map_err(err)?;
            let fmt = |v: &f64| if *v >= 100.0 { format!("{v:.0}") } else { format!("{v:.1}") };
            draw_panel(&mut chart, panel, &fmt, false)?;
            draw_markers(&mut chart, markers, y_max, k == 0)?;
            draw_legend(&mut chart, SeriesLabelPosition::LowerRight)?;
        }
    }
    root.present().map_err(err).with_context(|| format!("writing {}", path.display()))
}

/// A panel's axes and its series (lines, and dots where `points`) over time; on a log
/// axis (`positive_only`) the points at or below 0 are left out.
fn draw_panel<Y>(
    chart: &mut ChartContext<'_, BitMapBackend<'_>, Cartesian2d<plotters::coord::types::RangedCoordf64, Y>>,
    panel: &Panel,
    y_format: &dyn Fn(&f64) -> String,
    positive_only: bool,
) -> anyhow::Result<()>
where
    Y: Ranged<ValueType = f64> + plotters::coord::ranged1d::ValueFormatter<f64>,
{
    chart
        .configure_mesh()
        .x_desc("time since start of measurement (s)")
        .y_desc(panel.y_desc.as_str())
        .y_label_formatter(y_format)
        .label_style((FAMILY, 16))
        .axis_desc_style((FAMILY, 18))
        .draw()
        .map_err(err)?;
    for (i, (name, pts)) in panel.series.iter().enumerate() {
        let c = color(i);
        let pts: Vec<(f64, f64)> = pts.iter().copied().filter(|p| !positive_only || p.1 > 0.0).collect();
        chart
            .draw_series(LineSeries::new(pts.clone(), c.stroke_width(2)))
            .map_err(err)?
            .label(name.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(3)));
        if panel.points {
            chart.draw_series(pts.iter().map(|p| Circle::new(*p, 4, c.filled()))).map_err(err)?;
        }
    }
    Ok(())
}

/// The legend box, drawn the same way on every chart.
fn draw_legend<'a, CT: CoordTranslate>(
    chart: &mut ChartContext<'a, BitMapBackend<'a>, CT>,
    position: SeriesLabelPosition,
) -> anyhow::Result<()> {
    chart
        .configure_series_labels()
        .label_font((FAMILY, 16))
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .position(position)
        .draw()
        .map_err(err)?;
    Ok(())
}

/// Vertical dashed lines at the markers, labelled in the chart whose `labels` is set.
fn draw_markers<Y>(
    chart: &mut ChartContext<'_, BitMapBackend<'_>, Cartesian2d<plotters::coord::types::RangedCoordf64, Y>>,
    markers: &[Marker],
    y_top: f64,
    labels: bool,
) -> anyhow::Result<()>
where
    Y: Ranged<ValueType = f64>,
{
    let y_bottom = chart.y_range().start;
    let marker_color = RGBColor(200, 0, 0);
    for m in markers {
        // A dashed line: short segments along the full height, in pixel space.
        let (x_px, y0) = chart.backend_coord(&(m.t_s, y_top));
        let (_, y1) = chart.backend_coord(&(m.t_s, y_bottom));
        let area = chart.plotting_area().strip_coord_spec();
        let (ox, oy) = area.get_base_pixel();
        let mut y = y0;
        while y < y1 {
            let seg = vec![(x_px - ox, y - oy), (x_px - ox, (y + 8).min(y1) - oy)];
            area.draw(&PathElement::new(seg, marker_color.stroke_width(2))).map_err(err)?;
            y += 14;
        }
        if labels {
            area.draw(&Text::new(
                m.label.clone(),
                (x_px - ox + 5, y0 - oy + 5),
                (FAMILY, 16).into_font().color(&marker_color),
            ))
            .map_err(err)?;
        }
    }
    Ok(())
}

/// Tick values for a log axis over `[lo, hi]`: the 1-2-5 sequence, or every 1..9 multiple
/// when the range spans less than a decade (plotters' own log ticks are decades only, which
/// leaves a narrow range unlabelled).
fn log_ticks(lo: f64, hi: f64) -> Vec<f64> {
    let ticks = |mults: &[f64]| -> Vec<f64> {
        let mut out = Vec::new();
        let mut decade = 10f64.powf(lo.log10().floor());
        while decade <= hi {
            for m in mults {
                let v = decade * m;
                if v >= lo && v <= hi {
                    out.push(v);
                }
            }
            decade *= 10.0;
        }
        out
    };
    let coarse = ticks(&[1.0, 2.0, 5.0]);
    if coarse.len() >= 4 {
        coarse
    } else {
        ticks(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0])
    }
}

fn format_ms(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 1.0 {
        format!("{v:.1}")
    } else if v >= 0.01 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

/// Latency CDF (x: latency in ms on a log scale, y: percent of operations at or below it),
/// one curve per (label, histogram in µs) — per class, or per target in a comparison.
pub fn cdf(path: &Path, title: &str, series: &[(String, &Histogram<u64>)]) -> anyhow::Result<()> {
    register_font();
    let root = BitMapBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let series: Vec<(&String, Vec<(f64, f64)>)> = series
        .iter()
        .filter(|(_, h)| !h.is_empty())
        .map(|(name, h)| {
            let total = h.len() as f64;
            let mut seen = 0u64;
            let pts = h
                .iter_recorded()
                .map(|v| {
                    seen += v.count_at_value();
                    (h.highest_equivalent(v.value_iterated_to()).max(1) as f64 / 1000.0, 100.0 * seen as f64 / total)
                })
                .collect();
            (name, pts)
        })
        .collect();
    let xs = series.iter().flat_map(|s| s.1.iter().map(|p| p.0));
    let (lo, hi) = xs.fold((f64::INFINITY, 0.0f64), |(lo, hi), x| (lo.min(x), hi.max(x)));
    let (lo, hi) = if lo.is_finite() { (lo / 1.5, hi * 1.5) } else { (0.01, 10.0) };
    let mut chart = ChartBuilder::on(&root)
        .caption(title, (FAMILY, 28))
        .margin(20)
        .x_label_area_size(50)
        .y_label_area_size(80)
        .build_cartesian_2d((lo..hi).log_scale().with_key_points(log_ticks(lo, hi)), 0.0..100.0)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("latency (ms, log scale)")
        .y_desc("operations at or below (%)")
        .y_label_formatter(&|v| format!("{v:.0}"))
        .x_label_formatter(&|v| format_ms(*v))
        .label_style((FAMILY, 16))
        .axis_desc_style((FAMILY, 18))
        .draw()
        .map_err(err)?;
    for (i, (name, pts)) in series.into_iter().enumerate() {
        let c = color(i);
        chart
            .draw_series(LineSeries::new(pts, c.stroke_width(2)))
            .map_err(err)?
            .label(name.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(3)));
    }
    draw_legend(&mut chart, SeriesLabelPosition::LowerRight)?;
    root.present().map_err(err).with_context(|| format!("writing {}", path.display()))
}

/// One point of a throughput–latency curve.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct CurvePoint {
    /// The swept parameter's value (clients or offered rate), printed next to the point.
    pub label: String,
    pub throughput: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
}

/// Throughput–latency curves: x achieved throughput, y latency (log); per series, p99 solid
/// and p50 dashed, each point labelled with its sweep value.
pub fn sweep(path: &Path, title: &str, series: &[(String, Vec<CurvePoint>)]) -> anyhow::Result<()> {
    register_font();
    let root = BitMapBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let pts = series.iter().flat_map(|s| s.1.iter());
    let x_max = pts.clone().map(|p| p.throughput).fold(0.0, f64::max);
    let lats: Vec<f64> = pts.flat_map(|p| [p.p50_ms, p.p99_ms]).filter(|v| *v > 0.0).collect();
    let lo = lats.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = lats.iter().copied().fold(0.0, f64::max);
    let (lo, hi) = if lo.is_finite() { (lo / 2.0, hi * 2.0) } else { (0.01, 10.0) };
    let mut chart = ChartBuilder::on(&root)
        .caption(title, (FAMILY, 28))
        .margin(20)
        .x_label_area_size(50)
        .y_label_area_size(80)
        .build_cartesian_2d(0.0..upper(x_max), (lo..hi).log_scale().with_key_points(log_ticks(lo, hi)))
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("throughput (ops/s)")
        .x_label_formatter(&|v| format!("{v:.0}"))
        .y_desc("latency (ms, log scale)")
        .y_label_formatter(&|v| format_ms(*v))
        .label_style((FAMILY, 16))
        .axis_desc_style((FAMILY, 18))
        .draw()
        .map_err(err)?;
    for (i, (name, pts)) in series.iter().enumerate() {
        let c = color(i);
        let p99: Vec<(f64, f64)> = pts.iter().filter(|p| p.p99_ms > 0.0).map(|p| (p.throughput, p.p99_ms)).collect();
        let p50: Vec<(f64, f64)> = pts.iter().filter(|p| p.p50_ms > 0.0).map(|p| (p.throughput, p.p50_ms)).collect();
        chart
            .draw_series(LineSeries::new(p99.clone(), c.stroke_width(2)))
            .map_err(err)?
            .label(format!("{name} p99"))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(3)));
        chart.draw_series(p99.iter().map(|p| Circle::new(*p, 4, c.filled()))).map_err(err)?;
        chart
            .draw_series(DashedLineSeries::new(p50.clone(), 6, 4, c.stroke_width(2)))
            .map_err(err)?
            .label(format!("{name} p50"))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 8, y)], c.stroke_width(3)));
        chart.draw_series(p50.iter().map(|p| TriangleMarker::new(*p, 5, c.filled()))).map_err(err)?;
        for p in pts.iter().filter(|p| p.p99_ms > 0.0) {
            chart
                .draw_series(std::iter::once(
                    EmptyElement::at((p.throughput, p.p99_ms))
                        + Text::new(p.label.clone(), (6, -18), (FAMILY, 14).into_font()),
                ))
                .map_err(err)?;
        }
    }
    draw_legend(&mut chart, SeriesLabelPosition::UpperLeft)?;
    root.present().map_err(err).with_context(|| format!("writing {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::{Completion, Recorder};
    use crate::workload::OpClass;
    use std::time::Duration;

    #[test]
    fn log_ticks_label_narrow_and_wide_ranges() {
        assert_eq!(log_ticks(0.01, 10.0), vec![0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0]);
        let narrow = log_ticks(0.2, 0.9);
        assert!(narrow.len() >= 4, "{narrow:?}");
        assert!(narrow.iter().all(|v| (0.2..=0.9).contains(v)));
    }

    #[test]
    fn markers_parse() {
        assert_eq!("12.5=kill leader".parse::<Marker>(), Ok(Marker { t_s: 12.5, label: "kill leader".into() }));
        assert!("x".parse::<Marker>().unwrap_err().contains("SECONDS=LABEL"));
        assert!("-1=a".parse::<Marker>().unwrap_err().contains(">= 0"));
    }

    #[test]
    fn timeline_and_cdf_pngs_are_written() {
        let mut r = Recorder::new(Duration::from_secs(1));
        for i in 0..3000u64 {
            let class = if i % 2 == 0 { OpClass::Read } else { OpClass::Write };
            r.record(class, Duration::from_millis(i), Duration::from_micros(100 + i % 700), Completion::Ok);
        }
        let dir = tempfile::tempdir().unwrap();
        let markers = vec![Marker { t_s: 1.5, label: "fault".into() }];
        timeline(&dir.path().join("t.png"), "test", &r.timeline_rows(), &markers).unwrap();
        let hists = vec![("read".to_string(), &r.classes[0].hist), ("write".to_string(), &r.classes[1].hist)];
        cdf(&dir.path().join("c.png"), "test", &hists).unwrap();
        let series = vec![("a".to_string(), vec![(5.0, 1.0), (15.0, 0.4), (25.0, 0.9)])];
        series_over_time(&dir.path().join("s.png"), "test", "normalized", &series, &markers).unwrap();
        let panels = vec![
            Panel { y_desc: "p99 (ms)".into(), series: series.clone(), log: true, points: true },
            Panel { y_desc: "RSS (MB)".into(), series, log: false, points: false },
            Panel { y_desc: "empty".into(), series: vec![("none".into(), vec![])], log: false, points: false },
        ];
        panels_over_time(&dir.path().join("p.png"), "test", &panels, &markers).unwrap();
        for f in ["t.png", "c.png", "s.png", "p.png"] {
            let png = std::fs::read(dir.path().join(f)).unwrap();
            assert_eq!(&png[1..4], b"PNG", "{f}");
            assert!(png.len() > 10_000, "{f} is suspiciously small: {} bytes", png.len());
        }
    }
}
