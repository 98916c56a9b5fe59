//! The sections of report.html, from a [`Report`].

use super::DISTRIBUTION_CHARTS;
use super::chart::{self, Bin, Chart, Series, format_value};
use super::page::{Badge, Cell, Page, Section, Table, anchor};
use crate::metrics::distribution::Histogram;
use crate::metrics::result::BenchmarkResult;
use crate::metrics::series::TimeSeries;
use crate::report::Report;
use crate::report::table::{
    COLUMNS, ENDPOINT_HEADERS, FRONT_HEADER, endpoint_rows, front_cell, server_headers, server_rows,
    token_count_sources,
};
use crate::report::tuning::{Point, TuneReport};
use crate::scenario::units::format_duration;

/// Most points a chart over time shows; finer series are merged into wider intervals.
const MAX_TIME_POINTS: usize = 150;

pub(super) fn render(report: &Report) -> String {
    let name = report.scenario.get("name").and_then(|v| v.as_str()).unwrap_or("run");
    let mut page = Page::new(&format!("batchlab report: {name}"))
        .subtitle(&subtitle(report))
        .status(status(report))
        .footer(&format!(
            "Written by batchlab {}. Self-contained: no script and no external resource; re-render it with \
             `batchlab report DIR`. Field definitions: docs/report.md.",
            report.batchlab_version
        ));
    if let Some(error) = &report.error {
        page.section(
            Section::new("error", "The run could not start").html(format!("<pre>{}</pre>", super::page::escape(error))),
        );
    }
    if let Some(tune) = &report.tune {
        page.section(tuning(tune));
    }
    page.section(summary(report));
    page.section(expectations(report));
    if report.benchmarks.len() > 1 {
        page.section(across(report));
    }
    let batch_size = report.scenario.pointer("/batching/batch_size").and_then(|v| v.as_u64()).map(|n| n as usize);
    for b in &report.benchmarks {
        page.section(benchmark(b, batch_size));
    }
    page.section(environment(report));
    page.render()
}

fn subtitle(report: &Report) -> String {
    let env = &report.environment;
    let mut parts = Vec::new();
    if let Some(d) = report.scenario.get("description").and_then(|v| v.as_str()) {
        parts.push(d.to_string());
    }
    parts.push(format!("engine {} {}", env.engine_name, env.engine_version));
    if let Some(kind) = report.scenario.pointer("/profile/kind").and_then(|v| v.as_str()) {
        parts.push(format!("profile {kind}"));
    }
    let n = report.benchmarks.len();
    parts.push(format!("{n} benchmark{}", if n == 1 { "" } else { "s" }));
    if let Some(seed) = report.scenario.get("seed").and_then(|v| v.as_u64()) {
        parts.push(format!("seed {seed}"));
    }
    parts.join(" · ")
}

fn status(report: &Report) -> String {
    let mut badges = Vec::new();
    let total = report.expectations.len();
    let failed = report.expectations.iter().filter(|o| !o.passed).count();
    if total == 0 {
        badges.push(Badge::Neutral.html("no expectations"));
    } else if failed == 0 {
        badges.push(Badge::Good.html(&format!("all {total} expectations met")));
    } else {
        badges.push(Badge::Bad.html(&format!("{failed} of {total} expectations failed")));
    }
    if report.error.is_some() {
        badges.push(Badge::Bad.html("the engine did not start"));
    } else if report.incomplete {
        badges.push(Badge::Bad.html("incomplete run"));
    }
    let lost: i64 = report.benchmarks.iter().map(|b| b.counts.lost).sum();
    if lost != 0 {
        badges.push(Badge::Bad.html(&format!("{lost} requests lost (a batchlab bug)")));
    }
    let warnings: usize = report.benchmarks.iter().map(|b| b.validity_warnings.len()).sum();
    if warnings > 0 {
        let s = if warnings == 1 { "" } else { "s" };
        badges.push(Badge::Bad.html(&format!("{warnings} validity warning{s}")));
    }
    badges.join(" ")
}

fn num(v: Option<f64>) -> String {
    v.map_or_else(|| "-".to_string(), format_value)
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

/// `batchlab tune`: what it recommends, the front of its search as a chart and a table, and the
/// confirmation on the real engine.
fn tuning(tune: &TuneReport) -> Section {
    let r = &tune.result;
    let knob = r.space.load;
    let short = |p: &Point| {
        let mut s = format!("{} / {}", p.batch_size, format_duration(p.batch_timeout));
        if let Some(l) = p.load {
            s.push_str(&format!(" / {}", format_value(l)));
        }
        s
    };
    let xy = |p: &Point| Some((p.score?, p.latency_p99_ms?));
    let mut front: Vec<&Point> = r.points.iter().filter(|p| p.front && xy(p).is_some()).collect();
    front.sort_by(|a, b| a.score.unwrap_or(f64::MIN).total_cmp(&b.score.unwrap_or(f64::MIN)));
    front.dedup_by(|a, b| a.result() == b.result());
    // The latency axis shows the front's range (with room): a point whose queue ran away would
    // squash the rest flat, so such points are counted instead of drawn.
    let y_max = front.iter().filter_map(|p| p.latency_p99_ms).fold(0.0, f64::max) * 3.0;
    let all: Vec<(f64, f64)> = r.points.iter().filter(|p| !p.front).filter_map(xy).collect();
    let off_chart = all.iter().filter(|p| p.1 > y_max).count();
    let others: Vec<(f64, f64)> = all.into_iter().filter(|p| p.1 <= y_max).collect();
    let best: Vec<(f64, f64)> = r.best_point().and_then(xy).into_iter().collect();
    let chart = Chart::new("Search: objective against latency p99", &tune.objective, "latency p99 (ms)");
    let ends: Vec<String> = front
        .iter()
        .enumerate()
        .map(|(i, p)| if i == 0 || i + 1 == front.len() { short(p) } else { String::new() })
        .collect();
    let svg = chart::scatter_svg(
        &chart,
        &[
            Series::dots("evaluated", others),
            Series::new("front", front.iter().filter_map(|p| xy(p)).collect()),
            Series::new("recommended", best),
        ],
        &[Vec::new(), ends, r.best_point().map(short).into_iter().collect()],
    );
    let mut table = Table::new(&[
        "point",
        "objective",
        "out tok/s",
        "latency p99 ms",
        "at 1.5x load",
        "same result",
        "front",
        "found",
    ]);
    let rows = r.distinct(|p| p.front || p.plateau);
    for p in rows {
        let mark = if r.best_point() == Some(p) { " (recommended)" } else { "" };
        let same = r.points.iter().filter(|q| q.result() == p.result()).count();
        table.row(vec![
            Cell::Text(format!("{}{mark}", p.label(knob))),
            Cell::Num(num(p.score)),
            Cell::Num(num(p.throughput)),
            Cell::Num(num(p.latency_p99_ms)),
            Cell::Num(if p.plateau { num(p.stress_score) } else { String::new() }),
            Cell::Num(if same > 1 { format!("{same} points") } else { String::new() }),
            Cell::Text(if p.front { "yes".into() } else { String::new() }),
            Cell::Text(if p.grid { "grid".into() } else { "refine".into() }),
        ]);
    }
    let mut s = Section::new("tuning", "Tuning")
        .text(&format!(
            "batchlab tune searched {} points in the simulator in {:.2} s for the best {}.",
            r.points.len(),
            tune.search_s,
            tune.objective
        ))
        .html(format!(
            "<pre>{}</pre>",
            super::page::escape(&r.snippet().unwrap_or_else(|| "no point met the objective".into()))
        ))
        .charts(vec![svg])
        .table(&table)
        .note(
            "The front: no other point has a higher objective and a lower latency p99. The plateau: points within \
             2 % of the highest objective; of these, the recommendation is the one with the highest objective at \
             1.5x its load (its headroom). Method: docs/tuning.md.",
        );
    if off_chart > 0 {
        s = s.note(&format!(
            "{off_chart} evaluated point(s) with a latency p99 above {} ms (3x the front's) are left off the chart.",
            format_value(y_max)
        ));
    }
    if !tune.confirmed.is_empty() {
        let mut t = Table::new(&["point", "predicted", "measured", "error %", "predicted p99 ms", "measured p99 ms"]);
        for c in &tune.confirmed {
            t.row(vec![
                Cell::Text(c.point.clone()),
                Cell::Num(num(c.predicted)),
                Cell::Num(num(c.measured)),
                Cell::Num(c.error_pct().map_or_else(|| "-".into(), |e| format!("{e:+.1}"))),
                Cell::Num(num(c.predicted_latency_p99_ms)),
                Cell::Num(num(c.measured_latency_p99_ms)),
            ]);
        }
        s = s
            .text("Confirmed on the real engine in one engine start: predicted (simulator) against measured.")
            .table(&t);
    }
    s
}

fn summary(report: &Report) -> Section {
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

fn expectations(report: &Report) -> Section {
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
fn across(report: &Report) -> Section {
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

/// A validity warning as a paragraph with its badge.
fn validity_warning(b: &BenchmarkResult, w: &crate::metrics::client::ValidityWarning) -> String {
    format!(
        "<p>{} {}: {}</p>",
        Badge::Bad.html("validity warning"),
        super::page::escape(&b.label()),
        super::page::escape(&w.message)
    )
}

fn benchmark(b: &BenchmarkResult, batch_size_limit: Option<usize>) -> Section {
    let c = &b.counts;
    let d = &b.dispatch;
    let cards = [
        ("completed", format!("{} of {}", c.completed, c.submitted), ""),
        ("errors", c.errors.to_string(), ""),
        ("window", format_value(b.duration_s), "s"),
        ("requests/s", num(b.requests_per_s), ""),
        ("output tokens/s", num(b.output_tokens_per_s), ""),
        ("concurrency", num(b.concurrency_mean), "mean"),
        ("batch size", num(b.batching.batch_size_mean), "mean"),
        (
            "latency p50 / p99",
            format!("{} / {}", num(b.metric("latency_p50_ms")), num(b.metric("latency_p99_ms"))),
            "ms",
        ),
        ("TTFT p50 / p99", format!("{} / {}", num(b.metric("ttft_p50_ms")), num(b.metric("ttft_p99_ms"))), "ms"),
        ("dispatch delay p50 / p99", format!("{} / {}", num(d.dispatch_delay.p50), num(d.dispatch_delay.p99)), "ms"),
        ("client lag p99 / max", format!("{} / {}", num(d.client_lag.p99), num(d.client_lag.max)), "ms"),
    ];
    let mut s =
        Section::new(&format!("bench-{}", anchor(&b.label())), &format!("Benchmark {}", b.label())).cards(&cards);
    for w in &b.validity_warnings {
        s = s.html(validity_warning(b, w));
    }
    s = s.note(
        "Dispatch delay: the load profile's intended arrival to the send (the engine's, else the batch's \
         dispatch), the wait for the batch included; client lag: the same without that wait, what the client \
         itself added. Over completed requests; docs/report.md.",
    );
    if !b.token_count_sources.is_empty() {
        s = s.note(&format!("Token counts: {}.", token_count_sources(b)));
    }
    if c.incomplete > 0 || c.cancelled > 0 {
        s = s.note(&format!("{} cancelled, {} still running when the benchmark ended.", c.cancelled, c.incomplete));
    }
    if b.anomalies.requests > 0 {
        s = s.note(&format!(
            "{} completed requests had inconsistent engine timestamps; their affected metrics are left out.",
            b.anomalies.requests
        ));
    }
    s = s.subsection(distributions(b)).subsection(over_time(b)).subsection(batching(b, batch_size_limit));
    if !b.endpoints.is_empty() {
        s = s.subsection(endpoints(b));
    }
    if !b.server.is_empty() {
        s = s.subsection(server(b));
    }
    s
}

/// Text cells for the first `text` columns, numbers after, text again from `text_from`.
fn cells(row: Vec<String>, text: usize, text_from: usize) -> Vec<Cell> {
    row.into_iter()
        .enumerate()
        .map(|(i, v)| if i < text || i >= text_from { Cell::Text(v) } else { Cell::Num(v) })
        .collect()
}

fn endpoints(b: &BenchmarkResult) -> Section {
    // The benchmark's own section: its name column is left out.
    let mut table = Table::new(&ENDPOINT_HEADERS[1..]);
    for row in endpoint_rows(std::slice::from_ref(b)) {
        table.row(cells(row.into_iter().skip(1).collect(), 1, ENDPOINT_HEADERS.len() - 2));
    }
    Section::new(&format!("endpoints-{}", anchor(&b.label())), "Endpoints").table(&table).note(
        "Per endpoint that served or failed a measured request. Failing from: when its first failure episode began, \
         in seconds after the window opened; recovered after: from then to the completion of the first request, on \
         any endpoint, sent after it (- : none completed). Definitions: docs/report.md.",
    )
}

fn server(b: &BenchmarkResult) -> Section {
    let headers = server_headers();
    let mut table = Table::new(&headers[1..]);
    for row in server_rows(std::slice::from_ref(b)) {
        table.row(cells(row.into_iter().skip(1).collect(), 1, usize::MAX));
    }
    let mut s = Section::new(&format!("server-{}", anchor(&b.label())), "The server's own view")
        .table(&table)
        .note("Deltas of each server's /metrics counters from the benchmark's start to its end (warmup and cooldown included).");
    let reset: Vec<String> = b
        .server
        .iter()
        .filter(|d| !d.reset.is_empty())
        .map(|d| format!("{} ({})", d.endpoint, d.reset.join(", ")))
        .collect();
    if !reset.is_empty() {
        s = s.note(&format!("Counters that went down (the server restarted), no delta: {}.", reset.join("; ")));
    }
    s
}

fn distributions(b: &BenchmarkResult) -> Section {
    let mut charts = Vec::new();
    for (name, label) in DISTRIBUTION_CHARTS {
        let summary = b.distributions.get(name);
        let histogram = summary.and_then(|s| s.histogram.as_ref());
        let log = histogram.is_some_and(wants_log_axis);
        let x = format!("{label} (ms{})", if log { ", log scale" } else { "" });
        let title = format!("{label} histogram");
        let bins = histogram.map(display_bins).unwrap_or_default();
        let unit = super::sample_unit(name);
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

fn over_time(b: &BenchmarkResult) -> Section {
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

fn batching(b: &BenchmarkResult, batch_size_limit: Option<usize>) -> Section {
    let bt = &b.batching;
    let sizes: Vec<Bin> = bt
        .batch_size_histogram
        .iter()
        .map(|(&size, &n)| Bin { lower: size as f64 - 0.4, upper: size as f64 + 0.4, count: n as f64 })
        .collect();
    let reasons = [("full", bt.full), ("timeout", bt.timeout), ("drain", bt.drain)]
        .map(|(name, n)| (name.to_string(), n as f64))
        .to_vec();
    // Up to the configured batch size, so that how full the batches were shows.
    let largest = bt.batch_size_histogram.keys().max().copied().unwrap_or(1).max(batch_size_limit.unwrap_or(1));
    let size_chart =
        Chart::new("Batch sizes", "requests in the batch", "batches").integer_x().x_range(0.5, largest as f64 + 0.5);
    let charts = vec![
        chart::histogram_svg(&size_chart, &sizes),
        chart::bar_svg(&Chart::new("Flush reasons", "why the batch was dispatched", "batches"), &reasons),
    ];
    let mut s = Section::new(&format!("batch-{}", anchor(&b.label())), "Batching and errors").charts(charts).note(&format!(
        "{} batches, mean size {}. full: batch_size requests were waiting; timeout: the oldest waited batch_timeout; \
         drain: the queue was flushed at the end.",
        bt.batches,
        num(bt.batch_size_mean)
    ));
    if !b.counts.errors_by_kind.is_empty() {
        let mut table = Table::new(&["error kind", "requests"]);
        for (kind, n) in &b.counts.errors_by_kind {
            table.row(vec![Cell::text(kind.clone()), Cell::num(n.to_string())]);
        }
        s = s.table(&table);
    }
    s
}

/// The machine-speed probe in one line: `7.51 → 7.75 ms, load 0.50 → 1.25, steal 0.0 %`.
fn machine_probe(probe: Option<&crate::report::MachineProbe>) -> String {
    let Some(p) = probe else { return "not measured (virtual time, or an older batchlab)".into() };
    let load = |l: Option<f64>| l.map_or_else(|| "?".into(), |l| format!("{l:.2}"));
    let steal = p.steal_share.map_or_else(|| "unknown".into(), |s| format!("{:.1} %", s * 100.0));
    format!(
        "{:.2} → {:.2} ms, load {} → {}, steal {steal}",
        p.probe_start_ms,
        p.probe_end_ms,
        load(p.load_start),
        load(p.load_end)
    )
}

fn environment(report: &Report) -> Section {
    let env = &report.environment;
    let opt = |v: &Option<String>| v.clone().unwrap_or_else(|| "unknown".into());
    let mut table = Table::new(&["", ""]);
    let rows = [
        ("batchlab", report.batchlab_version.clone()),
        ("engine", format!("{} {}", env.engine_name, env.engine_version)),
        ("CPU", opt(&env.cpu_model)),
        ("cores", env.cores.map_or_else(|| "unknown".into(), |n| n.to_string())),
        ("CPU affinity", opt(&env.cpu_affinity)),
        ("OS", env.os.clone()),
        ("host", opt(&env.hostname)),
        ("machine probe", machine_probe(env.machine.as_ref())),
        ("report schema", report.schema_version.to_string()),
    ];
    for (k, v) in rows {
        table.row(vec![Cell::text(k), Cell::text(v)]);
    }
    let mut seeds = Table::new(&["seed", "value"]);
    for (k, v) in &env.seeds {
        seeds.row(vec![Cell::text(k.clone()), Cell::num(v.to_string())]);
    }
    let scenario = toml::to_string(&report.scenario).unwrap_or_else(|_| report.scenario.to_string());
    Section::new("environment", "Environment and seeds").table(&table).table(&seeds).details(
        "The scenario as it ran (every default filled in)",
        format!("<pre>{}</pre>", super::page::escape(&scenario)),
    )
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

    #[test]
    fn log_axis_for_wide_distributions_only() {
        let h = |lo: f64, hi: f64| Histogram { edges_ms: vec![lo, hi], counts: vec![1] };
        assert!(wants_log_axis(&h(1.0, 50.0)));
        assert!(!wants_log_axis(&h(10.0, 50.0)));
        assert!(!wants_log_axis(&h(0.0, 50.0)), "a zero minimum has no place on a log axis");
    }

    #[test]
    fn the_machine_probe_is_one_line_of_the_environment() {
        let mut report = crate::report::tests::sample_report();
        let html = render(&report);
        assert!(html.contains("7.50 → 7.75 ms, load 0.50 → 1.25, steal 0.0 %"), "{html}");
        report.environment.machine = None;
        assert!(render(&report).contains("not measured (virtual time, or an older batchlab)"));
    }

    #[test]
    fn a_run_that_could_not_start_shows_why() {
        let mut report = crate::report::tests::sample_report();
        report.benchmarks.clear();
        report.expectations.clear();
        report.incomplete = true;
        report.error = Some("cannot load model <x>".into());
        let html = render(&report);
        assert!(html.contains("<h2>The run could not start</h2>\n<pre>cannot load model &lt;x&gt;</pre>"), "{html}");
        assert!(html.contains("<span class=\"badge bad\">the engine did not start</span>"));
    }

    #[test]
    fn endpoints_server_counters_sources_and_warnings_are_shown() {
        let mut report = crate::report::tests::sample_report();
        let plain = render(&report);
        assert!(!plain.contains("validity warning"), "no warning without lag");
        assert!(!plain.contains("<h3>Endpoints</h3>") && !plain.contains("own view"), "nothing of a remote engine");
        report.benchmarks = vec![crate::report::table::tests::remote_benchmark()];
        let html = render(&report);
        assert!(html.contains("<span class=\"badge bad\">1 validity warning</span>"), "status badge");
        // In the summary and in the benchmark's section.
        let warning = "<span class=\"badge bad\">validity warning</span> constant@10.0/s: the client fell behind";
        assert_eq!(html.matches(warning).count(), 2, "{html}");
        assert!(html.contains("<h3>Endpoints</h3>"));
        assert!(html.contains("stream_dropped=1"));
        assert!(html.contains("<h3>The server&#39;s own view</h3>"), "{html}");
        assert!(html.contains("Token counts: 1 from chunks, 2 from usage."));
        assert!(html.contains("client lag p99 / max"));
        assert!(super::super::external_urls(&html).is_empty(), "endpoint URLs are text, not links");
    }

    #[test]
    fn summary_uses_the_console_columns() {
        let section = summary(&crate::report::tests::sample_report()).render();
        for c in COLUMNS {
            assert!(section.contains(&format!(">{}</th>", super::super::page::escape(c.header))), "{}", c.header);
        }
    }
}
