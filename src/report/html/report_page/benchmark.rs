//! One benchmark's section: its cards and notes, then its subsections (distributions, over time,
//! batching and errors, and a remote engine's endpoints and server counters).

use super::super::chart::{self, Bin, Chart, format_value};
use super::super::page::{Badge, Cell, Section, Table, anchor};
use super::distributions::distributions;
use super::num;
use super::over_time::over_time;
use crate::metrics::result::BenchmarkResult;
use crate::report::table::{ENDPOINT_HEADERS, endpoint_rows, server_headers, server_rows, token_count_sources};

/// A validity warning as a paragraph with its badge.
pub(super) fn validity_warning(b: &BenchmarkResult, w: &crate::metrics::client::ValidityWarning) -> String {
    format!(
        "<p>{} {}: {}</p>",
        Badge::Bad.html("validity warning"),
        super::super::page::escape(&b.label()),
        super::super::page::escape(&w.message)
    )
}

pub(super) fn benchmark(b: &BenchmarkResult, batch_size_limit: Option<usize>) -> Section {
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
