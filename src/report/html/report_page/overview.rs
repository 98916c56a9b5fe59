//! The sections about the run as a whole: the summary table (with a `[matrix]` run's Pareto
//! chart), the expectations met and failed, and throughput against latency across benchmarks.

use super::super::chart::{self, Chart, Series, format_value};
use super::super::page::{Badge, Cell, Section, Table};
use super::benchmark::validity_warning;
use crate::metrics::result::BenchmarkResult;
use crate::report::Report;
use crate::report::table::{COLUMNS, FRONT_HEADER, front_cell};

pub(super) fn summary(report: &Report) -> Section {
    let matrix = report.benchmarks.iter().any(|b| b.matrix.is_some());
    let mut headers: Vec<&str> = COLUMNS.iter().map(|c| c.header).collect();
    if matrix {
        headers.push(FRONT_HEADER);
    }
    let mut table = Table::new(&headers);
    for b in &report.benchmarks {
        let mut cells = Vec::new();
        for (i, c) in COLUMNS.iter().enumerate() {
            let text = (c.cell)(b);
            cells.push(if i == 0 { Cell::Text(text) } else { Cell::Num(text) });
        }
        if matrix {
            cells.push(Cell::Text(front_cell(b).to_string()));
        }
        table.row(cells);
    }
    let mut s = Section::new("summary", "Summary").table(&table).note(
        "Requests counts completed requests. Latencies in milliseconds; rates per second of each benchmark's \
         measurement window (warmup and cooldown excluded).",
    );
    if report.incomplete {
        s = s.text("This run stopped early (interrupted, or the engine failed): some benchmarks are missing.");
    }
    for b in &report.benchmarks {
        for w in &b.validity_warnings {
            s = s.html(validity_warning(b, w));
        }
    }
    if matrix {
        s = s.charts(vec![pareto_chart(report)]).note(
            "A [matrix] run: `*` in the front column marks the throughput/latency Pareto front (no other \
             combination has both more output tokens/s and a lower latency p99); the chart joins the front.",
        );
    }
    s
}

/// Every combination of a `[matrix]` run as a point (output tokens/s, latency p99), labelled; the
/// front is the series drawn joined.
fn pareto_chart(report: &Report) -> String {
    let point = |b: &BenchmarkResult| Some((b.output_tokens_per_s?, b.metric("latency_p99_ms")?));
    let mut front: Vec<(f64, f64, String)> = report
        .benchmarks
        .iter()
        .filter(|b| b.matrix.as_ref().is_some_and(|m| m.pareto_front))
        .filter_map(|b| point(b).map(|(x, y)| (x, y, b.name.clone())))
        .collect();
    front.sort_by(|a, b| a.0.total_cmp(&b.0));
    let others: Vec<(f64, f64, String)> = report
        .benchmarks
        .iter()
        .filter(|b| b.matrix.as_ref().is_some_and(|m| !m.pareto_front))
        .filter_map(|b| point(b).map(|(x, y)| (x, y, b.name.clone())))
        .collect();
    let series = |label: &str, pts: &[(f64, f64, String)]| Series::new(label, pts.iter().map(|p| (p.0, p.1)).collect());
    let labels = |pts: &[(f64, f64, String)]| pts.iter().map(|p| p.2.clone()).collect::<Vec<_>>();
    let chart = Chart::new("Throughput against latency p99", "output tokens/s", "latency p99 (ms)");
    chart::scatter_svg(
        &chart,
        &[series("Pareto front", &front), series("dominated", &others)],
        &[labels(&front), labels(&others)],
    )
}

pub(super) fn expectations(report: &Report) -> Section {
    let s = Section::new("expectations", "Expectations");
    if report.expectations.is_empty() {
        return s.text("The scenario has no [expect] section.");
    }
    let passed = report.expectations.iter().filter(|o| o.passed).count();
    // One row per expectation, one column per benchmark: the measured value, green or red.
    let names: Vec<String> = report.benchmarks.iter().map(BenchmarkResult::label).collect();
    let mut headers = vec!["expectation", "where"];
    headers.extend(names.iter().map(String::as_str));
    let mut table = Table::new(&headers);
    let mut rows: Vec<(&str, &str, Vec<Cell>)> = Vec::new();
    for o in &report.expectations {
        let key = (o.origin.as_str(), o.metric.as_str());
        let row = match rows.iter().position(|r| (r.0, r.1) == key) {
            Some(i) => i,
            None => {
                let op =
                    serde_json::to_value(o.op).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default();
                let mut cells = vec![
                    Cell::text(format!("{} {op} {}", o.metric, format_value(o.expected))),
                    Cell::text(o.origin.clone()),
                ];
                cells.resize(2 + names.len(), Cell::text("-"));
                rows.push((key.0, key.1, cells));
                rows.len() - 1
            }
        };
        let measured = match (&o.measured, &o.reason) {
            (Some(m), _) => format_value(*m),
            (None, Some(reason)) => reason.clone(),
            (None, None) => "-".to_string(),
        };
        let badge = if o.passed { Badge::Good } else { Badge::Bad };
        if let Some(col) = names.iter().position(|n| *n == o.label()) {
            rows[row].2[2 + col] = Cell::Badge(badge, measured);
        }
    }
    for (_, _, cells) in rows {
        table.row(cells);
    }
    let verdict = if passed == report.expectations.len() { Badge::Good.html("pass") } else { Badge::Bad.html("fail") };
    s.html(format!(
        "<p>{verdict} {passed} of {} checks passed: every expectation against every benchmark; each cell is the measured value.</p>",
        report.expectations.len()
    ))
    .table(&table)
}

/// Throughput against latency across the benchmarks of a sweep, concurrency or rate profile.
pub(super) fn across(report: &Report) -> Section {
    let mut benches: Vec<&BenchmarkResult> =
        report.benchmarks.iter().filter(|b| b.output_tokens_per_s.is_some()).collect();
    benches
        .sort_by(|a, b| a.output_tokens_per_s.partial_cmp(&b.output_tokens_per_s).unwrap_or(std::cmp::Ordering::Equal));
    let names: Vec<String> = benches.iter().map(|b| b.label()).collect();
    let mut charts = Vec::new();
    for (metric, label) in [("latency", "Latency"), ("ttft", "TTFT")] {
        let mut series = Vec::new();
        let mut labels = Vec::new();
        for stat in ["p50", "p99"] {
            let mut points = Vec::new();
            let mut point_labels = Vec::new();
            for (b, name) in benches.iter().zip(&names) {
                if let (Some(x), Some(y)) = (b.output_tokens_per_s, b.metric(&format!("{metric}_{stat}_ms"))) {
                    points.push((x, y));
                    point_labels.push(if stat == "p99" { name.clone() } else { String::new() });
                }
            }
            series.push(Series::new(format!("{label} {stat}"), points));
            labels.push(point_labels);
        }
        let title = format!("{label} vs throughput");
        let y = format!("{label} (ms)");
        charts.push(chart::scatter_svg(&Chart::new(&title, "output throughput (tokens/s)", &y), &series, &labels));
    }
    Section::new("across", "Across benchmarks")
        .text("Each point is one benchmark (labelled at its p99), ordered by output throughput: where latency bends upward is the knee.")
        .charts(charts)
}
