//! Inline SVG charts, drawn by `plotters`' SVG backend.
//!
//! Text is SVG `<text>` in the browser's `sans-serif`: plotters is built without a font backend,
//! so no font file is read or embedded, and labels stay selectable. Every function returns one
//! `<svg>` element with a fixed `viewBox` (it scales to its container), the chart's title as its
//! first `<text>` and as `aria-label`; bad or empty data gives a small "no data" SVG, never a
//! panic. Axes use [`TickAxis`], a plotters coordinate with our own tick positions (1-2-5 steps,
//! or decades on a log axis).

use std::ops::Range;

use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint, Ranged};
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::page::escape;

/// Chart size in SVG user units (the page scales it).
pub const WIDTH: u32 = 640;
/// Chart height in SVG user units.
pub const HEIGHT: u32 = 340;

/// Series colours (Tableau 10), in order.
pub const PALETTE: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
];

const TEXT: RGBColor = RGBColor(36, 41, 47);
const GRID: RGBColor = RGBColor(216, 222, 228);
const FONT: &str = "sans-serif";

/// plotters' SVG backend writes a font's size divided by 1.24: sizes given here are what the
/// SVG shows, in user units.
fn px(size: f64) -> f64 {
    size * 1.24
}

/// What a chart shows: its title, axis labels (with units) and whether x is logarithmic.
#[derive(Clone, Copy, Debug)]
pub struct Chart<'a> {
    /// Shown above the chart.
    pub title: &'a str,
    /// The x axis' description, with its unit: `latency (ms)`.
    pub x_label: &'a str,
    /// The y axis' description, with its unit.
    pub y_label: &'a str,
    /// A logarithmic x axis (positive values only; others are dropped).
    pub log_x: bool,
    /// A fixed x range instead of one fitted to the data.
    pub x_range: Option<(f64, f64)>,
    /// x ticks on whole numbers only (sizes, counts).
    pub integer_x: bool,
}

impl<'a> Chart<'a> {
    /// A chart with a linear x axis.
    pub fn new(title: &'a str, x_label: &'a str, y_label: &'a str) -> Self {
        Chart { title, x_label, y_label, log_x: false, x_range: None, integer_x: false }
    }

    /// The same chart with a logarithmic x axis when `log`.
    pub fn log_x(self, log: bool) -> Self {
        Chart { log_x: log, ..self }
    }

    /// The same chart with x fixed to `[lo, hi]`.
    pub fn x_range(self, lo: f64, hi: f64) -> Self {
        Chart { x_range: Some((lo, hi)), ..self }
    }

    /// The same chart with x ticks on whole numbers only.
    pub fn integer_x(self) -> Self {
        Chart { integer_x: true, ..self }
    }

    /// Its x axis over `values` (or its fixed range).
    fn x_axis(&self, values: impl Iterator<Item = f64>) -> TickAxis {
        let fit = Fit { log: self.log_x, from_zero: false, integer: self.integer_x, headroom: 0.04 };
        match self.x_range {
            Some((lo, hi)) if hi > lo && (!self.log_x || lo > 0.0) => TickAxis::fixed(lo, hi, fit),
            _ => TickAxis::fit(values, fit),
        }
    }
}

/// A named line or point set.
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    /// The legend's text (no legend for a single series).
    pub label: String,
    /// `(x, y)` points, in drawing order; non-finite ones are dropped.
    pub points: Vec<(f64, f64)>,
    /// In a scatter chart: points only, not joined (a cloud of evaluated points).
    pub dots: bool,
}

impl Series {
    /// A series called `label`.
    pub fn new(label: impl Into<String>, points: Vec<(f64, f64)>) -> Self {
        Series { label: label.into(), points, dots: false }
    }

    /// A series of unjoined points (scatter charts).
    pub fn dots(label: impl Into<String>, points: Vec<(f64, f64)>) -> Self {
        Series { dots: true, ..Series::new(label, points) }
    }
}

/// One histogram bar: `[lower, upper)` on x, `count` high.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Bin {
    /// Left edge.
    pub lower: f64,
    /// Right edge (a bar of width 0 is drawn one pixel wide).
    pub upper: f64,
    /// Height.
    pub count: f64,
}

/// Lines, one per series; a legend when there is more than one.
pub fn line_svg(chart: &Chart, series: &[Series]) -> String {
    xy_svg(chart, series, Style::Lines, &[])
}

/// Empirical CDFs: y is a fraction in `[0, 1]`, shown as a percentage; one line per series.
pub fn cdf_svg(chart: &Chart, series: &[Series]) -> String {
    xy_svg(chart, series, Style::Cdf, &[])
}

/// Points joined in order, each with its label (`labels[s][i]` for `series[s].points[i]`).
pub fn scatter_svg(chart: &Chart, series: &[Series], labels: &[Vec<String>]) -> String {
    xy_svg(chart, series, Style::Scatter, labels)
}

/// A histogram: bars from `lower` to `upper`, `count` high.
pub fn histogram_svg(chart: &Chart, bins: &[Bin]) -> String {
    let bins: Vec<Bin> = bins
        .iter()
        .copied()
        .filter(|b| b.lower.is_finite() && b.upper.is_finite() && b.count.is_finite() && b.upper >= b.lower)
        .filter(|b| !chart.log_x || b.lower > 0.0)
        .collect();
    if bins.is_empty() {
        return no_data(chart.title);
    }
    let x = chart.x_axis(bins.iter().flat_map(|b| [b.lower, b.upper]));
    let y = TickAxis::fit(bins.iter().map(|b| b.count).chain([0.0]), Fit::COUNTS);
    // A bar narrower than 0.6 % of the axis (one value, a short last interval) is widened to that.
    let min_width = x.span() * 0.006;
    render(chart, |root| {
        let mut ctx = frame(root, chart, x, y, format_tick, format_tick)?;
        let color = PALETTE[0];
        let widen = |b: &Bin| {
            let missing = (min_width - (b.upper - b.lower)).max(0.0) / 2.0;
            [(b.lower - missing, 0.0), (b.upper + missing, b.count)]
        };
        let bars = || bins.iter().filter(|b| b.count > 0.0).map(widen);
        ctx.draw_series(bars().map(|corners| Rectangle::new(corners, color.mix(0.75).filled())))?;
        // A thin white outline keeps neighbouring bars apart without shrinking narrow ones.
        ctx.draw_series(bars().map(|corners| Rectangle::new(corners, WHITE.stroke_width(1))))?;
        Ok(())
    })
}

/// Bars for categories, in order: `(name, value)`.
pub fn bar_svg(chart: &Chart, bars: &[(String, f64)]) -> String {
    let bars: Vec<&(String, f64)> = bars.iter().filter(|(_, v)| v.is_finite()).collect();
    if bars.is_empty() {
        return no_data(chart.title);
    }
    let n = bars.len();
    let x = TickAxis { lo: -0.5, hi: n as f64 - 0.5, log: false, ticks: (0..n).map(|i| i as f64).collect() };
    // Room above the tallest bar for its value.
    let y = TickAxis::fit(bars.iter().map(|(_, v)| *v).chain([0.0]), Fit { headroom: 0.14, ..Fit::COUNTS });
    let names: Vec<String> = bars.iter().map(|(name, _)| name.clone()).collect();
    render(chart, |root| {
        let name = |v: f64| names.get(v.round().max(0.0) as usize).cloned().unwrap_or_default();
        let mut ctx = frame(root, chart, x, y, name, format_tick)?;
        ctx.draw_series(bars.iter().enumerate().map(|(i, (_, v))| {
            let color = PALETTE[i % PALETTE.len()];
            Rectangle::new([(i as f64 - 0.3, 0.0), (i as f64 + 0.3, *v)], color.mix(0.8).filled())
        }))?;
        // The value above each bar.
        let label =
            TextStyle::from((FONT, px(13.0)).into_font()).color(&TEXT).pos(Pos::new(HPos::Center, VPos::Bottom));
        ctx.draw_series(
            bars.iter().enumerate().map(|(i, (_, v))| Text::new(format_value(*v), (i as f64, *v), label.clone())),
        )?;
        Ok(())
    })
}

#[derive(Clone, Copy, PartialEq)]
enum Style {
    Lines,
    Cdf,
    Scatter,
}

fn xy_svg(chart: &Chart, series: &[Series], style: Style, labels: &[Vec<String>]) -> String {
    let keep = |&(x, y): &(f64, f64)| x.is_finite() && y.is_finite() && (!chart.log_x || x > 0.0);
    let series: Vec<Series> = series
        .iter()
        .map(|s| Series { points: s.points.iter().copied().filter(keep).collect(), ..s.clone() })
        .collect();
    let all = || series.iter().flat_map(|s| s.points.iter().copied());
    if all().next().is_none() {
        return no_data(chart.title);
    }
    // Scatter labels go right of their point: room for the rightmost one.
    let (x_min, x_max) = all().fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), p| (lo.min(p.0), hi.max(p.0)));
    let label_room =
        if style == Style::Scatter && x_max > x_min { vec![x_max + (x_max - x_min) * 0.2] } else { vec![] };
    let x = chart.x_axis(all().map(|p| p.0).chain(label_room));
    // A legend sits above the lines, in room left for it.
    let headroom = if series.len() > 1 { 0.35 } else { 0.06 };
    let y = match style {
        Style::Cdf => TickAxis { lo: 0.0, hi: 1.0, log: false, ticks: vec![0.0, 0.25, 0.5, 0.75, 0.9, 1.0] },
        Style::Lines | Style::Scatter => {
            TickAxis::fit(all().map(|p| p.1).chain([0.0]), Fit { headroom, ..Fit::VALUES })
        }
    };
    let y_format =
        move |v: f64| if style == Style::Cdf { format!("{}%", format_tick(v * 100.0)) } else { format_tick(v) };
    render(chart, |root| {
        let mut ctx = frame(root, chart, x, y, format_tick, y_format)?;
        for (i, s) in series.iter().enumerate() {
            let color = PALETTE[i % PALETTE.len()];
            let line = ShapeStyle::from(color).stroke_width(2);
            let joined = if s.dots { Vec::new() } else { s.points.clone() };
            let drawn = ctx.draw_series(LineSeries::new(joined, line))?;
            if series.len() > 1 {
                drawn.label(s.label.clone()).legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], line));
            }
            if style == Style::Scatter {
                let font = TextStyle::from((FONT, px(12.0)).into_font()).color(&TEXT);
                let names = labels.get(i);
                ctx.draw_series(s.points.iter().enumerate().map(|(j, &p)| {
                    let text = names.and_then(|n| n.get(j)).cloned().unwrap_or_default();
                    EmptyElement::at(p)
                        + Circle::new((0, 0), if s.dots { 3 } else { 4 }, color.filled())
                        // Neighbours alternate above and below, so that close points stay legible.
                        + Text::new(text, (6, if j % 2 == 0 { -16 } else { 6 }), font.clone())
                }))?;
            }
        }
        if series.len() > 1 {
            ctx.configure_series_labels()
                // Where the lines rarely are: a CDF's lower right, a knee's upper left.
                .position(match style {
                    Style::Cdf => SeriesLabelPosition::LowerRight,
                    Style::Scatter => SeriesLabelPosition::UpperLeft,
                    Style::Lines => SeriesLabelPosition::UpperRight,
                })
                .background_style(WHITE.mix(0.85))
                .border_style(GRID)
                .label_font((FONT, px(13.0)).into_font().color(&TEXT))
                .draw()?;
        }
        Ok(())
    })
}

type Ctx<'a, 'b> = ChartContext<'a, SVGBackend<'b>, Cartesian2d<TickAxis, TickAxis>>;
type DrawResult<T> = Result<T, Box<dyn std::error::Error + 'static>>;

/// The title, axes, grid and tick labels.
fn frame<'a, 'b>(
    root: &'a DrawingArea<SVGBackend<'b>, plotters::coord::Shift>,
    chart: &Chart,
    x: TickAxis,
    y: TickAxis,
    x_format: impl Fn(f64) -> String,
    y_format: impl Fn(f64) -> String,
) -> DrawResult<Ctx<'a, 'b>> {
    let mut ctx = ChartBuilder::on(root)
        .caption(chart.title, (FONT, px(17.0)).into_font().color(&TEXT))
        .margin(12)
        .margin_right(24)
        .x_label_area_size(46)
        .y_label_area_size(64)
        .build_cartesian_2d(x, y)?;
    let labels = (FONT, px(12.0)).into_font().color(&TEXT);
    ctx.configure_mesh()
        .light_line_style(TRANSPARENT)
        .bold_line_style(GRID)
        .axis_style(RGBColor(140, 149, 159))
        .x_desc(chart.x_label)
        .y_desc(chart.y_label)
        .axis_desc_style((FONT, px(13.0)).into_font().color(&TEXT))
        .label_style(labels)
        .x_label_formatter(&|v| x_format(*v))
        .y_label_formatter(&|v| y_format(*v))
        .draw()?;
    Ok(ctx)
}

/// Draws onto a fresh SVG document and returns it, with the title as `aria-label`.
fn render(
    chart: &Chart,
    draw: impl FnOnce(&DrawingArea<SVGBackend, plotters::coord::Shift>) -> DrawResult<()>,
) -> String {
    let mut svg = String::new();
    let result = {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, HEIGHT)).into_drawing_area();
        root.fill(&WHITE)
            .map_err(|e| e.to_string())
            .and_then(|()| draw(&root).map_err(|e| e.to_string()))
            .and_then(|()| root.present().map_err(|e| e.to_string()))
    };
    match result {
        Ok(()) => label_svg(&svg, chart.title),
        Err(e) => {
            tracing::warn!(chart = chart.title, error = %e, "cannot draw a chart");
            no_data(chart.title)
        }
    }
}

/// Adds `role`, `aria-label` and the `chart` class to the root `<svg>`.
fn label_svg(svg: &str, title: &str) -> String {
    let body = svg.trim_start_matches(|c| c != '<');
    let body = if body.starts_with("<?xml") {
        body.split_once("?>").map_or(body, |(_, rest)| rest.trim_start())
    } else {
        body
    };
    match body.strip_prefix("<svg") {
        Some(rest) => format!("<svg class=\"chart\" role=\"img\" aria-label=\"{}\"{rest}", escape(title)),
        None => no_data(title),
    }
}

/// A small placeholder for a chart with nothing to draw.
pub fn no_data(title: &str) -> String {
    let (w, h) = (WIDTH, 90);
    let title = escape(title);
    format!(
        "<svg class=\"chart\" role=\"img\" aria-label=\"{title}\" width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\" \
         xmlns=\"http://www.w3.org/2000/svg\"><rect width=\"{w}\" height=\"{h}\" fill=\"#ffffff\"/>\
         <text x=\"{x}\" y=\"30\" text-anchor=\"middle\" font-family=\"{FONT}\" font-size=\"17\" fill=\"#24292f\">{title}</text>\
         <text x=\"{x}\" y=\"62\" text-anchor=\"middle\" font-family=\"{FONT}\" font-size=\"13\" fill=\"#59636e\">no data</text></svg>",
        x = w / 2
    )
}

/// A coordinate with our own ticks: linear, or logarithmic (base 10) for positive values.
#[derive(Clone, Debug)]
pub struct TickAxis {
    lo: f64,
    hi: f64,
    log: bool,
    ticks: Vec<f64>,
}

/// How an axis is fitted to its values.
#[derive(Clone, Copy, Debug)]
struct Fit {
    /// Logarithmic (positive values only).
    log: bool,
    /// Starts at 0 (counts, rates): no room below.
    from_zero: bool,
    /// Ticks on whole numbers only.
    integer: bool,
    /// Room above the largest value, as a share of the span.
    headroom: f64,
}

impl Fit {
    /// Counts: from 0, whole ticks.
    const COUNTS: Fit = Fit { log: false, from_zero: true, integer: true, headroom: 0.04 };
    /// Measured values: from 0.
    const VALUES: Fit = Fit { log: false, from_zero: true, integer: false, headroom: 0.06 };
}

impl TickAxis {
    /// The axis `[lo, hi]` exactly.
    fn fixed(lo: f64, hi: f64, fit: Fit) -> Self {
        let ticks = if fit.log { log_ticks(lo, hi) } else { linear_ticks(lo, hi, 6, fit.integer) };
        TickAxis { lo, hi, log: fit.log, ticks }
    }

    /// The axis' length in its own units.
    fn span(&self) -> f64 {
        self.hi - self.lo
    }

    /// An axis covering `values`, with room above as `fit` says.
    fn fit(values: impl Iterator<Item = f64>, fit: Fit) -> Self {
        let Fit { log, from_zero, integer, headroom } = fit;
        let (mut lo, mut hi) = values
            .filter(|v| v.is_finite() && (!log || *v > 0.0))
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| (lo.min(v), hi.max(v)));
        if !lo.is_finite() {
            (lo, hi) = if log { (1.0, 10.0) } else { (0.0, 1.0) };
        }
        if log {
            if hi / lo < 1.5 {
                (lo, hi) = (lo / 1.25, hi * 1.25);
            } else {
                (lo, hi) = (lo / 1.05, hi * 1.05);
            }
            return TickAxis { lo, hi, log, ticks: log_ticks(lo, hi) };
        }
        if hi - lo <= f64::EPSILON * hi.abs().max(1.0) {
            let pad = if hi == 0.0 { 1.0 } else { hi.abs() * 0.1 };
            (lo, hi) = (lo - pad, hi + pad);
            if from_zero {
                lo = lo.max(0.0);
            }
        } else {
            let pad = (hi - lo) * 0.04;
            hi += (hi - lo) * headroom;
            if !from_zero || lo > 0.0 {
                lo -= pad;
            }
            if from_zero && lo < 0.0 && lo + pad >= 0.0 {
                lo = 0.0;
            }
        }
        if integer && from_zero {
            hi = hi.max(1.0);
        }
        TickAxis { lo, hi, log, ticks: linear_ticks(lo, hi, 6, integer) }
    }

    fn position(&self, v: f64) -> f64 {
        if self.log {
            (v.max(f64::MIN_POSITIVE).ln() - self.lo.ln()) / (self.hi.ln() - self.lo.ln())
        } else {
            (v - self.lo) / (self.hi - self.lo)
        }
    }
}

impl Ranged for TickAxis {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        let f = self.position(*value).clamp(-1.0, 2.0);
        (f64::from(limit.0) + f * f64::from(limit.1 - limit.0)).round() as i32
    }

    fn key_points<Hint: KeyPointHint>(&self, hint: Hint) -> Vec<f64> {
        if hint.weight().allow_light_points() { Vec::new() } else { self.ticks.clone() }
    }

    fn range(&self) -> Range<f64> {
        self.lo..self.hi
    }
}

/// Multiples of a 1-2-5 step in `[lo, hi]`, about `n` of them; a step of at least 1 if `integer`.
fn linear_ticks(lo: f64, hi: f64, n: usize, integer: bool) -> Vec<f64> {
    let raw = (hi - lo) / n as f64;
    let raw = if integer { raw.max(1.0) } else { raw };
    let magnitude = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 2.5, 5.0, 10.0]
        .iter()
        .map(|m| m * magnitude)
        .filter(|s| !integer || s.fract() == 0.0)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * magnitude);
    let first = (lo / step).ceil() as i64;
    let last = (hi / step).floor() as i64;
    (first..=last).map(|k| k as f64 * step).map(|v| if v.abs() < step * 1e-9 { 0.0 } else { v }).collect()
}

/// Decades, with 2 and 5 between them when the axis spans few decades; linear ticks when it
/// spans less than one.
fn log_ticks(lo: f64, hi: f64) -> Vec<f64> {
    let decades = (hi / lo).log10();
    if decades < 1.0 {
        return linear_ticks(lo, hi, 5, false);
    }
    let mantissas: &[f64] = if decades <= 3.5 { &[1.0, 2.0, 5.0] } else { &[1.0] };
    let mut ticks = Vec::new();
    for e in lo.log10().floor() as i32..=hi.log10().ceil() as i32 {
        for m in mantissas {
            let v = m * 10f64.powi(e);
            if v >= lo && v <= hi {
                ticks.push(v);
            }
        }
    }
    ticks
}

/// A tick label: as few digits as the value needs (ticks are round numbers), `k`/`M` above 10⁴.
pub fn format_tick(v: f64) -> String {
    if v == 0.0 {
        return "0".into();
    }
    let a = v.abs();
    if a >= 1e6 {
        return format!("{}M", trim(format!("{:.2}", v / 1e6)));
    }
    if a >= 1e4 {
        return format!("{}k", trim(format!("{:.2}", v / 1e3)));
    }
    let decimals = (3 - a.log10().floor() as i32).clamp(0, 9) as usize;
    trim(format!("{v:.decimals$}"))
}

/// A measured value for a label: 4 significant digits at most.
pub fn format_value(v: f64) -> String {
    if v == 0.0 || !v.is_finite() {
        return format!("{v}");
    }
    let decimals = (3 - v.abs().log10().floor() as i32).clamp(0, 6) as usize;
    trim(format!("{v:.decimals$}"))
}

fn trim(s: String) -> String {
    if s.contains('.') { s.trim_end_matches('0').trim_end_matches('.').to_string() } else { s }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_round_and_inside() {
        let cases: [(f64, f64, &[f64]); 4] = [
            (0.0, 10.0, &[0.0, 2.0, 4.0, 6.0, 8.0, 10.0]),
            (0.0, 1.0, &[0.0, 0.2, 0.4, 0.6, 0.8, 1.0]),
            (103.0, 148.0, &[110.0, 120.0, 130.0, 140.0]),
            (-0.3, 2.7, &[0.0, 0.5, 1.0, 1.5, 2.0, 2.5]),
        ];
        for (lo, hi, expected) in cases {
            let got = linear_ticks(lo, hi, 6, false);
            assert_eq!(got.len(), expected.len(), "{lo}..{hi}: {got:?}");
            for (g, e) in got.iter().zip(expected) {
                assert!((g - e).abs() < 1e-9, "{lo}..{hi}: {got:?}");
            }
        }
        assert_eq!(linear_ticks(0.0, 1.04, 6, true), [0.0, 1.0], "whole counts");
        assert_eq!(linear_ticks(0.5, 16.5, 6, true), [5.0, 10.0, 15.0], "no 2.5 steps for counts");
        assert_eq!(log_ticks(0.9, 1100.0), [1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0]);
        assert_eq!(log_ticks(0.5, 2e5), [1.0, 10.0, 100.0, 1000.0, 10000.0, 100000.0]);
    }

    #[test]
    fn tick_and_value_labels() {
        let cases = [
            (0.0, "0"),
            (0.25, "0.25"),
            (2.0, "2"),
            (120.0, "120"),
            (0.001, "0.001"),
            (2500.0, "2500"),
            (25000.0, "25k"),
            (1_500_000.0, "1.5M"),
        ];
        for (v, expected) in cases {
            assert_eq!(format_tick(v), expected, "{v}");
        }
        assert_eq!(
            (format_value(123.456), format_value(0.012345), format_value(7.0)),
            ("123.5".into(), "0.01235".into(), "7".into())
        );
    }

    fn count(svg: &str, what: &str) -> usize {
        svg.matches(what).count()
    }

    /// The trimmed contents of every `<text>` element.
    pub(crate) fn texts(svg: &str) -> Vec<String> {
        svg.split("<text")
            .skip(1)
            .filter_map(|t| Some(t.split_once('>')?.1.split_once("</text>")?.0.trim().to_string()))
            .collect()
    }

    #[test]
    fn charts_are_labelled_svg_with_text() {
        let chart = Chart::new("Latency <CDF>", "latency (ms)", "requests");
        let series = [
            Series::new("a", vec![(1.0, 0.0), (2.0, 0.5), (4.0, 1.0)]),
            Series::new("b", vec![(1.5, 0.0), (3.0, 1.0)]),
        ];
        let svgs = [
            line_svg(&chart, &series[..1]),
            cdf_svg(&chart.log_x(true), &series),
            scatter_svg(&chart, &series[..1], &[vec!["x".into(), "y".into(), "z".into()]]),
            histogram_svg(
                &chart,
                &[Bin { lower: 1.0, upper: 2.0, count: 3.0 }, Bin { lower: 2.0, upper: 2.0, count: 1.0 }],
            ),
            bar_svg(&chart, &[("full".into(), 3.0), ("timeout".into(), 0.0)]),
        ];
        for svg in &svgs {
            assert!(svg.starts_with("<svg class=\"chart\" role=\"img\" aria-label=\"Latency &lt;CDF&gt;\""), "{svg}");
            assert!(svg.trim_end().ends_with("</svg>"), "{svg}");
            assert!(count(svg, "<text") >= 4, "title, axis labels and ticks: {svg}");
            let texts = texts(svg);
            assert_eq!(texts[0], "Latency &lt;CDF&gt;", "the title comes first: {svg}");
            assert!(texts.iter().any(|t| t == "latency (ms)") && texts.iter().any(|t| t == "requests"), "{texts:?}");
            assert!(!svg.contains("NaN") && !svg.contains("inf"), "{svg}");
        }
        let has = |svg: &str, text: &str| texts(svg).iter().any(|t| t == text);
        assert!(has(&svgs[1], "a") && has(&svgs[1], "b"), "a legend for two series");
        assert!(has(&svgs[1], "90%"), "CDF ticks in percent");
        assert!(!has(&svgs[0], "a"), "no legend for one");
        assert!(has(&svgs[2], "y"), "scatter points are labelled");
        assert!(has(&svgs[4], "timeout") && has(&svgs[4], "3"), "bar names and values");
    }

    #[test]
    fn nothing_to_draw_is_a_placeholder() {
        let chart = Chart::new("Empty", "x", "y");
        let nan = [Series::new("s", vec![(f64::NAN, 1.0)])];
        for svg in [
            line_svg(&chart, &[]),
            line_svg(&chart, &nan),
            histogram_svg(&chart.log_x(true), &[Bin { lower: 0.0, upper: 0.0, count: 1.0 }]),
            bar_svg(&chart, &[]),
        ] {
            assert_eq!(texts(&svg), ["Empty", "no data"], "{svg}");
        }
    }
}
