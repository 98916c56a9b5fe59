//! A benchmark's over-time subsection: its recorded intervals merged into at most
//! [`MAX_TIME_POINTS`] displayed ones, charted as throughput, completions, concurrency and errors.

use super::super::chart::{self, Bin, Chart, Series, format_value};
use super::super::page::{Section, anchor};
use crate::metrics::result::BenchmarkResult;
use crate::metrics::series::TimeSeries;

/// Most points a chart over time shows; finer series are merged into wider intervals.
const MAX_TIME_POINTS: usize = 150;

/// One displayed interval: merged from `group` recorded ones.
struct TimePoint {
    start_s: f64,
    len_s: f64,
    completed: u64,
    output_tokens: u64,
    errors: u64,
    concurrency: Option<f64>,
    batches: u64,
    batch_size_mean: Option<f64>,
}

/// How many points a chart over time shows: about `2·√completed` (so that each holds a few
/// completions and rates are not all spikes), between 10 and [`MAX_TIME_POINTS`].
fn time_point_count(completed: u64) -> usize {
    (2.0 * (completed as f64).sqrt()).clamp(10.0, MAX_TIME_POINTS as f64) as usize
}

fn time_points(ts: &TimeSeries, duration_s: f64, points: usize) -> Vec<TimePoint> {
    let group = ts.len().div_ceil(points.max(1)).max(1);
    let mut points = Vec::new();
    for start in (0..ts.len()).step_by(group) {
        let range = start..(start + group).min(ts.len());
        let len_s: f64 = range.clone().map(|i| ts.interval_len_s(i, duration_s)).sum();
        let mut conc = (0.0, 0.0);
        let mut batch = (0.0, 0u64);
        for i in range.clone() {
            if let Some(c) = ts.concurrency[i] {
                let len = ts.interval_len_s(i, duration_s);
                conc = (conc.0 + c * len, conc.1 + len);
            }
            if let Some(m) = ts.batch_size_mean[i] {
                batch = (batch.0 + m * ts.batches[i] as f64, batch.1 + ts.batches[i]);
            }
        }
        points.push(TimePoint {
            start_s: start as f64 * ts.interval_s,
            len_s,
            completed: ts.completed[range.clone()].iter().sum(),
            output_tokens: ts.output_tokens[range.clone()].iter().sum(),
            errors: ts.errors[range].iter().sum(),
            concurrency: (conc.1 > 0.0).then(|| conc.0 / conc.1),
            batches: batch.1,
            batch_size_mean: (batch.1 > 0).then(|| batch.0 / batch.1 as f64),
        });
    }
    // A last interval much shorter than the others would show a burst as a spike of rate: it
    // joins the one before.
    let full = group as f64 * ts.interval_s;
    if points.len() >= 2 && points.last().is_some_and(|p| p.len_s < full / 2.0) {
        let last = points.pop().expect("two points");
        let prev = points.last_mut().expect("one point");
        let weighted = |a: Option<f64>, wa: f64, b: Option<f64>, wb: f64| match (a, b) {
            (Some(a), Some(b)) if wa + wb > 0.0 => Some((a * wa + b * wb) / (wa + wb)),
            (a, b) => a.or(b),
        };
        prev.concurrency = weighted(prev.concurrency, prev.len_s, last.concurrency, last.len_s);
        prev.batch_size_mean =
            weighted(prev.batch_size_mean, prev.batches as f64, last.batch_size_mean, last.batches as f64);
        prev.batches += last.batches;
        prev.len_s += last.len_s;
        prev.completed += last.completed;
        prev.output_tokens += last.output_tokens;
        prev.errors += last.errors;
    }
    points
}

pub(super) fn over_time(b: &BenchmarkResult) -> Section {
    let shown = time_point_count(b.counts.completed);
    let points = time_points(&b.time_series, b.duration_s, shown);
    // Short windows read better in milliseconds.
    let (scale, unit) = if b.duration_s < 2.0 { (1000.0, "ms") } else { (1.0, "s") };
    let x_label = format!("time since the window opened ({unit})");
    let mid = |p: &TimePoint| (p.start_s + p.len_s / 2.0) * scale;
    let rate = |n: u64, p: &TimePoint| (p.len_s > 0.0).then(|| n as f64 / p.len_s);
    let line = |f: &dyn Fn(&TimePoint) -> Option<f64>| -> Vec<(f64, f64)> {
        points.iter().filter_map(|p| f(p).map(|v| (mid(p), v))).collect()
    };
    let tokens = line(&|p| rate(p.output_tokens, p));
    // Cumulative, from (0, 0): its slope is the request rate, and batched completions (steps) read
    // as such instead of as spikes.
    let mut requests = vec![(0.0, 0.0)];
    let mut done = 0;
    for p in &points {
        done += p.completed;
        requests.push(((p.start_s + p.len_s) * scale, done as f64));
    }
    let concurrency = line(&|p| p.concurrency);
    let batch = line(&|p| p.batch_size_mean);
    let errors: Vec<Bin> = points
        .iter()
        .map(|p| Bin { lower: p.start_s * scale, upper: (p.start_s + p.len_s) * scale, count: p.errors as f64 })
        .collect();
    let charts = vec![
        chart::line_svg(
            &Chart::new("Throughput over time", &x_label, "output tokens/s"),
            &[Series::new("output tokens/s", tokens)],
        ),
        chart::line_svg(
            &Chart::new("Completed requests over time", &x_label, "requests completed (cumulative)"),
            &[Series::new("completed", requests)],
        ),
        chart::line_svg(
            &Chart::new("Concurrency over time", &x_label, "requests"),
            &[Series::new("in flight (mean)", concurrency), Series::new("batch size (mean)", batch)],
        ),
        chart::histogram_svg(&Chart::new("Errors over time", &x_label, "errors"), &errors),
    ];
    let interval = b.time_series.interval_s * (b.time_series.len().div_ceil(shown).max(1)) as f64;
    Section::new(&format!("time-{}", anchor(&b.label())), "Over time").charts(charts).note(&format!(
        "Per interval of {} s ({} recorded intervals of {} s in report.json); rates are per second of each interval, \
         completed requests are counted from the window's start.",
        format_value(interval),
        b.time_series.len(),
        format_value(b.time_series.interval_s)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_points_merge_intervals_by_weight() {
        let ts = TimeSeries {
            interval_s: 0.5,
            completed: vec![1, 2, 3],
            output_tokens: vec![10, 20, 30],
            errors: vec![0, 1, 0],
            concurrency: vec![Some(1.0), Some(3.0), Some(2.0)],
            batches: vec![1, 3, 0],
            batch_size_mean: vec![Some(4.0), Some(2.0), None],
        };
        let points = time_points(&ts, 1.375, 150);
        assert_eq!(points.len(), 3);
        assert_eq!((points[2].start_s, points[2].len_s), (1.0, 0.375), "the last interval ends with the window");
        // Shorter than half an interval: merged into the one before.
        let points = time_points(&ts, 1.125, 150);
        assert_eq!(points.len(), 2);
        let p = &points[1];
        assert_eq!((p.start_s, p.completed, p.errors, p.batches), (0.5, 5, 1, 3));
        assert_eq!(p.len_s, 0.625);
        assert!((p.concurrency.unwrap() - (3.0 * 0.5 + 2.0 * 0.125) / 0.625).abs() < 1e-12);
        assert_eq!(p.batch_size_mean, Some(2.0), "the last interval had no batch");
        let long: TimeSeries = TimeSeries {
            interval_s: 0.001,
            completed: vec![1; 300],
            output_tokens: vec![2; 300],
            errors: vec![0; 300],
            concurrency: (0..300).map(|i| Some(if i % 2 == 0 { 1.0 } else { 3.0 })).collect(),
            batches: vec![1; 300],
            batch_size_mean: (0..300).map(|i| Some(if i % 2 == 0 { 2.0 } else { 4.0 })).collect(),
        };
        let points = time_points(&long, 0.3, 150);
        assert_eq!(points.len(), 150);
        let p = &points[0];
        assert_eq!((p.completed, p.output_tokens, p.concurrency, p.batch_size_mean), (2, 4, Some(2.0), Some(3.0)));
        assert!((p.len_s - 0.002).abs() < 1e-12);
    }
}
