//! A benchmark's distributions subsection: histogram and CDF charts with their bins merged for
//! small samples, a log axis for wide ones, and the table of every distribution's statistics.

use super::super::DISTRIBUTION_CHARTS;
use super::super::chart::{self, Bin, Chart, Series};
use super::super::page::{Cell, Section, Table, anchor};
use super::num;
use crate::metrics::distribution::Histogram;
use crate::metrics::result::BenchmarkResult;

pub(super) fn distributions(b: &BenchmarkResult) -> Section {
    let mut charts = Vec::new();
    for (name, label) in DISTRIBUTION_CHARTS {
        let summary = b.distributions.get(name);
        let histogram = summary.and_then(|s| s.histogram.as_ref());
        let log = histogram.is_some_and(wants_log_axis);
        let x = format!("{label} (ms{})", if log { ", log scale" } else { "" });
        let title = format!("{label} histogram");
        let bins = histogram.map(display_bins).unwrap_or_default();
        let unit = super::super::sample_unit(name);
        charts.push(chart::histogram_svg(&Chart::new(&title, &x, unit).log_x(log), &bins));
        let title = format!("{label} CDF");
        let cdf = histogram.map(Histogram::cdf_points).unwrap_or_default();
        let y = format!("{unit} at or below");
        charts.push(chart::cdf_svg(&Chart::new(&title, &x, &y).log_x(log), &[Series::new(label, cdf)]));
    }
    let empty: Vec<&str> = DISTRIBUTION_CHARTS
        .iter()
        .filter(|(name, _)| b.distributions.get(name).is_none_or(|s| s.count == 0))
        .map(|(_, label)| *label)
        .collect();
    let mut table = Table::new(&["distribution", "count", "mean", "p50", "p90", "p95", "p99", "p99.9", "max", "std"]);
    for (name, s) in b.distributions.iter() {
        let mut row = vec![Cell::text(name), Cell::num(s.count.to_string())];
        row.extend(["mean", "p50", "p90", "p95", "p99", "p999", "max", "std"].map(|stat| Cell::num(num(s.stat(stat)))));
        table.row(row);
    }
    let mut s = Section::new(&format!("dist-{}", anchor(&b.label())), "Distributions").charts(charts);
    if !empty.is_empty() {
        s = s.note(&format!(
            "No {} samples: no request completed with the engine timestamps they need (see docs/report.md).",
            empty.join(", ")
        ));
    }
    s.table(&table).note(
        "Milliseconds. itl has one sample per gap between tokens, generate one per batch, the others one per \
         request. Histograms use 100 geometric bins between \
         min and max (merged for small samples); a log axis is used when max is 20× min or more.",
    )
}

/// Whether a distribution spans enough to be read on a log axis.
fn wants_log_axis(h: &Histogram) -> bool {
    match (h.edges_ms.first(), h.edges_ms.last()) {
        (Some(&lo), Some(&hi)) => lo > 0.0 && hi / lo >= 20.0,
        _ => false,
    }
}

/// The histogram's bins, merged so that a small sample is not spread over 100 near-empty bars:
/// about `2·√n` bars, at least 10.
fn display_bins(h: &Histogram) -> Vec<Bin> {
    let n = h.total() as f64;
    let target = (2.0 * n.sqrt()).clamp(10.0, 100.0);
    let group = ((h.counts.len() as f64 / target).ceil() as usize).max(1);
    h.counts
        .chunks(group)
        .enumerate()
        .map(|(i, counts)| Bin {
            lower: h.edges_ms[i * group],
            upper: h.edges_ms[(i * group + counts.len()).min(h.edges_ms.len() - 1)],
            count: counts.iter().sum::<u64>() as f64,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_samples_get_fewer_wider_bars() {
        let edges: Vec<f64> = (0..=100).map(f64::from).collect();
        let mut h = Histogram { edges_ms: edges, counts: vec![0; 100] };
        h.counts[3] = 16;
        let bins = display_bins(&h);
        assert_eq!(bins.len(), 10, "16 samples: 10 bars");
        assert_eq!((bins[0].lower, bins[0].upper, bins[0].count), (0.0, 10.0, 16.0));
        assert_eq!(bins[9].upper, 100.0);
        h.counts[3] = 10_000;
        assert_eq!(display_bins(&h).len(), 100);
    }

    #[test]
    fn log_axis_for_wide_distributions_only() {
        let h = |lo: f64, hi: f64| Histogram { edges_ms: vec![lo, hi], counts: vec![1] };
        assert!(wants_log_axis(&h(1.0, 50.0)));
        assert!(!wants_log_axis(&h(10.0, 50.0)));
        assert!(!wants_log_axis(&h(0.0, 50.0)), "a zero minimum has no place on a log axis");
    }
}
