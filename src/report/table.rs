//! The console summary: one row per benchmark, plain ASCII, columns aligned; then, where a run has
//! them, its endpoints, the servers' counters, the token-count sources and validity warnings.

use crate::metrics::repeats::RepeatSummary;
use crate::metrics::result::BenchmarkResult;
use crate::metrics::server::SHOWN_COUNTERS;

use super::Report;

/// A column: header, and how to show a benchmark's value in it. report.html's summary uses the
/// same columns.
pub(crate) struct Column {
    pub(crate) header: &'static str,
    pub(crate) cell: fn(&BenchmarkResult) -> String,
}

fn count(v: u64) -> String {
    v.to_string()
}

fn fixed(v: Option<f64>, decimals: usize) -> String {
    v.map_or_else(|| "-".to_string(), |v| format!("{v:.decimals$}"))
}

/// Turn indices whose cache hit rate the console line shows; report.json has every row.
const SESSION_TURNS_SHOWN: usize = 8;

/// A benchmark's sessions in one line: how they ended, their turns and durations, the think
/// times drawn, and the prefix-cache hit rate by turn index (the first [`SESSION_TURNS_SHOWN`]).
fn sessions_line(s: &crate::metrics::sessions::SessionsResult) -> String {
    let mut line = format!(
        "{} started, {} completed, {} failed, {} cut, {} unfinished",
        s.started, s.completed, s.failed, s.cut, s.unfinished
    );
    if s.dropped_turns > 0 {
        line.push_str(&format!(", {} turns dropped", s.dropped_turns));
    }
    line.push_str(&format!(
        "; {} turns each (max {}), duration p50 {} ms; think time mean {} ms ({} drawn)",
        fixed(s.turns_per_session, 2),
        s.max_turns,
        fixed(s.duration_ms.p50, 1),
        fixed(s.think_time_mean_ms, 1),
        s.think_times
    ));
    let hits: Vec<String> = s.by_turn.iter().take(SESSION_TURNS_SHOWN).map(|t| fixed(t.cache_hit_rate, 2)).collect();
    if !hits.is_empty() {
        let more = if s.by_turn.len() > SESSION_TURNS_SHOWN { " …" } else { "" };
        line.push_str(&format!("; cache hit by turn {}{more}", hits.join(" ")));
    }
    line
}

fn ms(b: &BenchmarkResult, metric: &str) -> String {
    fixed(b.metric(metric), 2)
}

pub(crate) const COLUMNS: [Column; 11] = [
    Column { header: "benchmark", cell: |b| b.label() },
    Column { header: "requests", cell: |b| count(b.counts.completed) },
    Column { header: "errors", cell: |b| count(b.counts.errors) },
    Column { header: "req/s", cell: |b| fixed(b.requests_per_s, 2) },
    Column { header: "out tok/s", cell: |b| fixed(b.output_tokens_per_s, 1) },
    Column { header: "lat p50 ms", cell: |b| ms(b, "latency_p50_ms") },
    Column { header: "lat p99 ms", cell: |b| ms(b, "latency_p99_ms") },
    Column { header: "ttft p50 ms", cell: |b| ms(b, "ttft_p50_ms") },
    Column { header: "ttft p99 ms", cell: |b| ms(b, "ttft_p99_ms") },
    Column { header: "tpot p50 ms", cell: |b| ms(b, "tpot_p50_ms") },
    Column { header: "batch mean", cell: |b| fixed(b.batching.batch_size_mean, 2) },
];

/// Shown only when a benchmark hit the prefix cache or was designed to: achieved (designed), e.g.
/// `0.48 (0.50)`.
const PREFIX_COLUMN: Column = Column {
    header: "prefix hit (designed)",
    cell: |b| format!("{} ({})", fixed(b.prefix_cache_hit_rate, 2), fixed(b.prefix_cache_designed_hit_rate, 2)),
};

/// Shown only when an engine said what went on the wire (HTTP): the prompts per HTTP request
/// (mean, and the number of HTTP requests) next to `batch mean`, and TTFT from the submit (the
/// batch's fill included; `ttft` runs from the send).
const WIRE_COLUMNS: [Column; 2] = [
    Column {
        header: "wire mean (http reqs)",
        cell: |b| match &b.dispatch.wire_batch {
            Some(w) => format!("{:.2} ({})", w.mean, w.http_requests),
            None => "-".to_owned(),
        },
    },
    Column {
        header: "ttft-submit p50 ms",
        cell: |b| b.dispatch.ttft_from_submit.p50.map_or_else(|| "-".to_owned(), |v| format!("{v:.2}")),
    },
];

/// The last column of a `[matrix]` run's table: `*` on the throughput/latency Pareto front.
pub(crate) const FRONT_HEADER: &str = "front";

/// `*` when the benchmark is on its matrix run's Pareto front, else empty.
pub(crate) fn front_cell(b: &BenchmarkResult) -> &'static str {
    if b.matrix.as_ref().is_some_and(|m| m.pareto_front) { "*" } else { "" }
}

/// The summary table for the console. The benchmark name is left-aligned, numbers right-aligned;
/// `-` marks a value that was not measured. "requests" counts completed requests.
pub fn render_table(report: &Report) -> String {
    // A `[matrix]` run marks its throughput/latency Pareto front in a last column.
    let matrix = report.benchmarks.iter().any(|b| b.matrix.is_some());
    // A prefix-cache column when a benchmark hit the cache or was designed to.
    let prefix = report.benchmarks.iter().any(|b| {
        [b.prefix_cache_hit_rate, b.prefix_cache_designed_hit_rate].iter().any(|r| r.is_some_and(|r| r > 0.0))
    });
    let wire = report.benchmarks.iter().any(|b| b.dispatch.wire_batch.is_some());
    let columns: Vec<&Column> = COLUMNS
        .iter()
        .chain(wire.then_some(WIRE_COLUMNS.iter()).into_iter().flatten())
        .chain(prefix.then_some(&PREFIX_COLUMN))
        .collect();
    let mut headers: Vec<String> = columns.iter().map(|c| c.header.to_string()).collect();
    if matrix {
        headers.push(FRONT_HEADER.to_string());
    }
    let rows: Vec<Vec<String>> = report
        .benchmarks
        .iter()
        .map(|b| {
            let mut row: Vec<String> = columns.iter().map(|c| (c.cell)(b)).collect();
            if matrix {
                row.push(front_cell(b).to_string());
            }
            row
        })
        .collect();
    let mut out = aligned(&headers, &rows, |i| i == 0);
    if let Some(d) =
        report.dataset.as_ref().filter(|d| d.skipped_bad_lines + d.dropped_short + d.dropped_long + d.truncated > 0)
    {
        out.push_str(&format!(
            "(workload file: {} prompts of {} entries; {} bad lines skipped, {} too short and {} too long dropped, {} truncated)\n",
            d.prompts, d.entries, d.skipped_bad_lines, d.dropped_short, d.dropped_long, d.truncated
        ));
    }
    if report.incomplete {
        out.push_str("(incomplete run: stopped before every benchmark finished)\n");
    }
    for b in report.benchmarks.iter().filter(|b| !b.token_count_sources.is_empty()) {
        out.push_str(&format!("(token counts of {}: {})\n", b.label(), token_count_sources(b)));
    }
    for b in &report.benchmarks {
        if let Some(e) = &b.embeddings {
            // A pooling run has no first token: its rates, since the ttft and tpot cells are `-`.
            out.push_str(&format!(
                "(embeddings of {}: {} at {}/s, {} input tok/s, {} dimensions)\n",
                b.label(),
                e.embeddings,
                fixed(e.embeddings_per_s, 2),
                fixed(e.input_tokens_per_s, 1),
                if e.dims_min == e.dims_max {
                    e.dims_min.to_string()
                } else {
                    format!("{}-{}", e.dims_min, e.dims_max)
                },
            ));
        }
    }
    for b in &report.benchmarks {
        if let Some(sessions) = &b.sessions {
            out.push_str(&format!("(sessions of {}: {})\n", b.label(), sessions_line(sessions)));
        }
    }
    if report.benchmarks.iter().any(|b| !b.endpoints.is_empty()) {
        out.push('\n');
        out.push_str(&render_endpoints(&report.benchmarks));
    }
    if report.benchmarks.iter().any(|b| !b.server.is_empty()) {
        out.push('\n');
        out.push_str(&render_server(&report.benchmarks));
    }
    if !report.repeats.is_empty() {
        out.push('\n');
        out.push_str(&render_repeats(&report.repeats));
    }
    let warnings: Vec<String> = report
        .benchmarks
        .iter()
        .flat_map(|b| {
            b.validity_warnings.iter().map(move |w| format!("validity warning: {}: {}\n", b.label(), w.message))
        })
        .collect();
    if !warnings.is_empty() {
        out.push('\n');
        out.extend(warnings);
    }
    out
}

/// `96 from usage, 4 from chunks`: completed requests by the source of their token counts.
pub(crate) fn token_count_sources(b: &BenchmarkResult) -> String {
    let parts: Vec<String> = b.token_count_sources.iter().map(|(source, n)| format!("{n} from {source}")).collect();
    parts.join(", ")
}

/// Seconds with three decimals, `-` when unknown.
fn secs(v: Option<f64>) -> String {
    fixed(v, 3)
}

/// The per-endpoint table's headers, shared with report.html.
pub(crate) const ENDPOINT_HEADERS: [&str; 12] = [
    "benchmark",
    "endpoint",
    "requests",
    "ok",
    "errors",
    "lat p50 ms",
    "lat p99 ms",
    "ttft p50 ms",
    "ttft p99 ms",
    "failing from s",
    "recovered after s",
    "errors by kind",
];

/// One row per benchmark and endpoint: [`ENDPOINT_HEADERS`]. `failing from s` is when the
/// endpoint's first failure episode began, `recovered after s` how long the run took to complete
/// a request sent after it (`-`: it did not).
pub(crate) fn endpoint_rows(benchmarks: &[BenchmarkResult]) -> Vec<Vec<String>> {
    let mut rows = Vec::new();
    for b in benchmarks {
        for e in &b.endpoints {
            let kinds: Vec<String> = e.errors_by_kind.iter().map(|(k, n)| format!("{k}={n}")).collect();
            let failures = e.failures.as_ref();
            rows.push(vec![
                b.label(),
                e.endpoint.clone(),
                count(e.requests),
                count(e.completed),
                count(e.errors),
                fixed(e.latency.p50, 2),
                fixed(e.latency.p99, 2),
                fixed(e.ttft.p50, 2),
                fixed(e.ttft.p99, 2),
                failures.map_or_else(|| "-".into(), |f| secs(Some(f.began_s))),
                failures.map_or_else(|| "-".into(), |f| secs(f.time_to_recover_s)),
                kinds.join(" "),
            ]);
        }
    }
    rows
}

fn render_endpoints(benchmarks: &[BenchmarkResult]) -> String {
    let mut out =
        String::from("per endpoint (failing from: s after the window opened; recovered after: docs/report.md)\n");
    out.push_str(&aligned(&ENDPOINT_HEADERS, &endpoint_rows(benchmarks), |i| i <= 1 || i == 11));
    out
}

/// The server-counter table's headers: benchmark, endpoint, [`SHOWN_COUNTERS`], the hit rate.
pub(crate) fn server_headers() -> Vec<&'static str> {
    let mut headers = vec!["benchmark", "endpoint"];
    headers.extend(SHOWN_COUNTERS.iter().map(|(_, header)| *header));
    headers.insert(2 + 4, "prefix hit rate");
    headers
}

/// One row per benchmark and endpoint whose server gave counters: [`server_headers`].
pub(crate) fn server_rows(benchmarks: &[BenchmarkResult]) -> Vec<Vec<String>> {
    let mut rows = Vec::new();
    for b in benchmarks {
        for d in &b.server {
            let mut row = vec![b.label(), d.endpoint.clone()];
            row.extend(SHOWN_COUNTERS.iter().map(|(name, _)| fixed(d.counters.get(*name).copied(), 0)));
            row.insert(2 + 4, fixed(d.prefix_cache_hit_rate, 2));
            rows.push(row);
        }
    }
    rows
}

fn render_server(benchmarks: &[BenchmarkResult]) -> String {
    let mut out = String::from("server counters over each benchmark (deltas of the server's /metrics)\n");
    out.push_str(&aligned(&server_headers(), &server_rows(benchmarks), |i| i <= 1));
    out
}

/// A console table: `headers`, a rule of dashes, then `rows`, columns two spaces apart and
/// padded to their widest cell (counted in characters), left-aligned where `left(column)`,
/// right-aligned elsewhere; no trailing spaces.
pub fn aligned<S: AsRef<str>>(headers: &[S], rows: &[impl AsRef<[String]>], left: impl Fn(usize) -> bool) -> String {
    let width = |s: &str| s.chars().count();
    let widths: Vec<usize> = (0..headers.len())
        .map(|i| rows.iter().map(|r| width(&r.as_ref()[i])).chain([width(headers[i].as_ref())]).max().unwrap_or(0))
        .collect();
    let line = |cells: &mut dyn Iterator<Item = &str>| {
        let padded: Vec<String> = cells
            .zip(&widths)
            .enumerate()
            .map(|(i, (cell, &w))| {
                let pad = " ".repeat(w.saturating_sub(width(cell)));
                if left(i) { format!("{cell}{pad}") } else { format!("{pad}{cell}") }
            })
            .collect();
        let mut line = padded.join("  ").trim_end().to_string();
        line.push('\n');
        line
    };
    let rule: Vec<String> = widths.iter().map(|&w| "-".repeat(w)).collect();
    let mut out = line(&mut headers.iter().map(AsRef::as_ref));
    out.push_str(&line(&mut rule.iter().map(String::as_str)));
    for row in rows {
        out.push_str(&line(&mut row.as_ref().iter().map(String::as_str)));
    }
    out
}

/// With `--repeat`: per benchmark, the mean of a few metrics over its repeats with the 95 %
/// confidence interval's half width, and the throughput's coefficient of variation.
pub fn render_repeats(repeats: &[RepeatSummary]) -> String {
    const METRICS: [(&str, &str); 5] = [
        ("req/s", "requests_per_s"),
        ("out tok/s", "output_tokens_per_s"),
        ("lat p50 ms", "latency_p50_ms"),
        ("ttft p50 ms", "ttft_p50_ms"),
        ("tpot p50 ms", "tpot_p50_ms"),
    ];
    let spread = |s: &RepeatSummary, metric: &str| {
        s.metrics.get(metric).map_or_else(
            || "-".to_string(),
            |m| match m.ci95_high {
                Some(high) => format!("{:.2} ± {:.2}", m.mean, high - m.mean),
                None => format!("{:.2}", m.mean),
            },
        )
    };
    let mut headers = vec!["benchmark".to_string(), "runs".to_string()];
    headers.extend(METRICS.iter().map(|(h, _)| h.to_string()));
    headers.push("req/s cv".to_string());
    let rows: Vec<Vec<String>> = repeats
        .iter()
        .map(|s| {
            let mut row = vec![s.benchmark.clone(), s.repeats.to_string()];
            row.extend(METRICS.iter().map(|(_, m)| spread(s, m)));
            row.push(s.requests_per_s_cv.map_or_else(|| "-".to_string(), |cv| format!("{:.2}%", cv * 100.0)));
            row
        })
        .collect();
    let mut out = String::from("over repeats: mean ± half width of the 95 % confidence interval (Student t)\n");
    out.push_str(&aligned(&headers, &rows, |i| i == 0));
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::metrics::BenchmarkAggregator;
    use crate::report::tests::sample_report;
    use crate::time::Timestamp;

    #[test]
    fn table_snapshot() {
        let mut report = sample_report();
        report.benchmarks.push(BenchmarkAggregator::new("concurrent@4").finish(Timestamp::from_nanos(5)));
        insta::assert_snapshot!("table", render_table(&report));
    }

    /// A benchmark of an engine with two endpoints, one of which failed, servers with counters,
    /// token counts from two sources, and a client that fell behind: what the table adds for it.
    pub(crate) fn remote_benchmark() -> BenchmarkResult {
        use crate::batcher::RequestTimes;
        use crate::engine::{ServerCounters, TokenCountSource};
        use crate::metrics::client::ClientTiming;
        use crate::metrics::server::server_deltas;
        use std::time::Duration;
        let at = |ms: u64| Timestamp::from_nanos(1_000_000_000_000 + ms * 1_000_000);
        let mut agg = BenchmarkAggregator::new("constant@10.0/s");
        agg.start(at(0));
        let done = |agg: &mut BenchmarkAggregator, endpoint: &str, sent: u64, ms: u64, source| {
            let times = RequestTimes { submitted: at(sent), dispatched: at(sent), completed: at(sent + ms) };
            let metrics = crate::metrics::RequestMetrics {
                latency: Duration::from_millis(ms),
                ttft: Some(Duration::from_millis(ms / 4)),
                output_tokens: Some(8),
                endpoint: Some(endpoint.to_owned()),
                token_count_source: Some(source),
                ..Default::default()
            };
            agg.record_submitted();
            agg.record_completion(&metrics, &times);
            // Meant to go 40 ms before it did: the client fell behind.
            agg.record_client_timing(&ClientTiming::new(at(sent.saturating_sub(40)), &times, None));
        };
        done(&mut agg, "http://a", 0, 100, TokenCountSource::Usage);
        done(&mut agg, "http://b", 0, 120, TokenCountSource::Usage);
        agg.record_submitted();
        agg.record_error("stream_dropped", Some("http://b"), at(100), at(250));
        done(&mut agg, "http://a", 300, 100, TokenCountSource::Chunks);
        let mut result = agg.finish(at(500));
        let counters = |prompt: f64, hits: f64| {
            let counters =
                [("prompt_tokens", prompt), ("prefix_cache_queries", 2.0 * hits), ("prefix_cache_hits", hits)];
            ServerCounters { endpoint: "http://a".into(), counters: counters.map(|(k, v)| (k.to_owned(), v)).into() }
        };
        result.server = server_deltas(&[counters(1000.0, 10.0)], &[counters(1640.0, 50.0)]);
        result
    }

    /// A benchmark with sessions: one line with how they ended, their turns, durations and think
    /// times, and the hit rate of the first eight turn indices (report.json has every row).
    #[test]
    fn a_sessions_benchmark_prints_how_its_sessions_went() {
        use crate::metrics::distribution::Summary;
        use crate::metrics::sessions::{SessionsResult, TurnRow};
        let by_turn = (0..10)
            .map(|turn| TurnRow {
                turn,
                requests: 10 - u64::from(turn),
                cache_hit_rate: (turn != 9).then(|| f64::from(turn) / 10.0),
                ..TurnRow::default()
            })
            .collect();
        let sessions = SessionsResult {
            started: 20,
            completed: 12,
            failed: 1,
            cut: 3,
            unfinished: 4,
            dropped_turns: 0,
            turns_per_session: Some(4.6875),
            max_turns: 10,
            duration_ms: Summary { count: 16, p50: Some(1234.56), ..Summary::default() },
            think_times: 58,
            think_time_mean_ms: Some(2031.95),
            by_turn,
        };
        let mut report = sample_report();
        let mut b = BenchmarkAggregator::new("concurrent@16").finish(Timestamp::from_nanos(5));
        b.sessions = Some(sessions.clone());
        report.benchmarks = vec![b.clone()];
        let line = "(sessions of concurrent@16: 20 started, 12 completed, 1 failed, 3 cut, 4 unfinished; 4.69 turns \
                    each (max 10), duration p50 1234.6 ms; think time mean 2032.0 ms (58 drawn); cache hit by turn \
                    0.00 0.10 0.20 0.30 0.40 0.50 0.60 0.70 …)\n";
        assert!(render_table(&report).contains(line), "{}", render_table(&report));
        // Dropped turns are said when there are any; no line without sessions.
        b.sessions = Some(SessionsResult { dropped_turns: 7, by_turn: Vec::new(), ..sessions });
        report.benchmarks = vec![b.clone()];
        assert!(render_table(&report).contains("4 unfinished, 7 turns dropped; 4.69 turns each"));
        assert!(!render_table(&report).contains("cache hit by turn"));
        b.sessions = None;
        report.benchmarks = vec![b];
        assert!(!render_table(&report).contains("(sessions of"));
    }

    /// A pooling benchmark: no TTFT or TPOT (`-`), and a line with its embeddings' rates.
    #[test]
    fn an_embeddings_benchmark_prints_its_rates_and_no_token_timings() {
        use crate::batcher::RequestTimes;
        use std::time::Duration;
        let at = |ms: u64| Timestamp::from_nanos(1_000_000_000_000 + ms * 1_000_000);
        let mut agg = BenchmarkAggregator::new("concurrent@4");
        agg.start(at(0));
        for (k, prompt) in [(0u64, 30u32), (1, 50)] {
            let times = RequestTimes { submitted: at(k * 100), dispatched: at(k * 100), completed: at(k * 100 + 40) };
            let metrics = crate::metrics::RequestMetrics {
                latency: Duration::from_millis(40),
                prompt_tokens: Some(prompt),
                output_tokens: Some(0),
                embedding_dims: Some(128),
                ..Default::default()
            };
            agg.record_submitted();
            agg.record_completion(&metrics, &times);
        }
        let mut report = sample_report();
        report.benchmarks = vec![agg.finish(at(500))];
        insta::assert_snapshot!(render_table(&report), @r"
        benchmark     requests  errors  req/s  out tok/s  lat p50 ms  lat p99 ms  ttft p50 ms  ttft p99 ms  tpot p50 ms  batch mean
        ------------  --------  ------  -----  ---------  ----------  ----------  -----------  -----------  -----------  ----------
        concurrent@4         2       0   4.00        0.0       40.00       40.00            -            -            -           -
        (embeddings of concurrent@4: 2 at 4.00/s, 160.0 input tok/s, 128 dimensions)
        ");
    }

    #[test]
    fn endpoints_server_counters_sources_and_warnings() {
        let mut report = sample_report();
        report.benchmarks = vec![remote_benchmark()];
        insta::assert_snapshot!(render_table(&report), @r"
        benchmark        requests  errors  req/s  out tok/s  lat p50 ms  lat p99 ms  ttft p50 ms  ttft p99 ms  tpot p50 ms  batch mean
        ---------------  --------  ------  -----  ---------  ----------  ----------  -----------  -----------  -----------  ----------
        constant@10.0/s         3       1   6.00       48.0      100.01      120.00        25.00        30.00            -           -
        (token counts of constant@10.0/s: 1 from chunks, 2 from usage)

        per endpoint (failing from: s after the window opened; recovered after: docs/report.md)
        benchmark        endpoint  requests  ok  errors  lat p50 ms  lat p99 ms  ttft p50 ms  ttft p99 ms  failing from s  recovered after s  errors by kind
        ---------------  --------  --------  --  ------  ----------  ----------  -----------  -----------  --------------  -----------------  ----------------
        constant@10.0/s  http://a         2   2       0      100.00      100.00        25.00        25.00               -                  -
        constant@10.0/s  http://b         2   1       1      120.00      120.00        30.00        30.00           0.250              0.150  stream_dropped=1

        server counters over each benchmark (deltas of the server's /metrics)
        benchmark        endpoint  prompt tok  generation tok  prefix queries  prefix hits  prefix hit rate  preemptions
        ---------------  --------  ----------  --------------  --------------  -----------  ---------------  -----------
        constant@10.0/s  http://a         640               -              80           40             0.50            -

        validity warning: constant@10.0/s: the client fell behind its own schedule: client lag p99 40.00 ms (max 40.00 ms) is over 10 ms, so the load offered was lower than the profile's and latencies start late
        ");
    }

    #[test]
    fn the_prefix_column_shows_only_with_a_rate() {
        let mut report = sample_report();
        for b in &mut report.benchmarks {
            b.prefix_cache_hit_rate = Some(0.0);
            b.prefix_cache_designed_hit_rate = Some(0.0);
        }
        assert!(!render_table(&report).contains("prefix hit"));
        report.benchmarks[0].prefix_cache_hit_rate = Some(0.4821);
        report.benchmarks[0].prefix_cache_designed_hit_rate = Some(0.5);
        let table = render_table(&report);
        assert!(table.lines().next().unwrap().ends_with("prefix hit (designed)"), "{table}");
        assert!(table.lines().nth(2).unwrap().ends_with("0.48 (0.50)"), "{table}");
    }

    #[test]
    fn repeats_get_their_own_table() {
        let mut report = sample_report();
        let mut second = report.benchmarks.clone();
        for b in &mut second {
            b.repeat = 1;
            b.requests_per_s = Some(6.0);
        }
        report.benchmarks.extend(second);
        report.repeats = crate::metrics::summarize_repeats(&report.benchmarks);
        let table = render_table(&report);
        let repeats = table.split_once("\n\n").map(|(_, r)| r).expect("a second table");
        // Two runs at 4 and 6 req/s: mean 5, s = √2, t(0.975, 1) = 12.706: half width 12.71.
        insta::assert_snapshot!(repeats, @r"
        over repeats: mean ± half width of the 95 % confidence interval (Student t)
        benchmark        runs         req/s     out tok/s     lat p50 ms   ttft p50 ms   tpot p50 ms  req/s cv
        ---------------  ----  ------------  ------------  -------------  ------------  ------------  --------
        throughput          2  5.00 ± 12.71  62.00 ± 0.00  130.02 ± 0.00  35.03 ± 0.00  11.44 ± 0.00    28.28%
        constant@10.0/s     2  5.00 ± 12.71  62.00 ± 0.00  130.02 ± 0.00  35.03 ± 0.00  11.44 ± 0.00    28.28%
        ");
    }

    #[test]
    fn skipped_and_filtered_prompts_are_noted() {
        let mut report = sample_report();
        let stats = crate::loadgen::DatasetStats {
            path: "d.jsonl".into(),
            format: crate::loadgen::FileFormat::Jsonl,
            entries: 10,
            skipped_bad_lines: 2,
            dropped_short: 1,
            dropped_long: 0,
            truncated: 3,
            prompts: 7,
        };
        report.dataset = Some(crate::loadgen::DatasetStats {
            skipped_bad_lines: 0,
            dropped_short: 0,
            truncated: 0,
            ..stats.clone()
        });
        assert!(!render_table(&report).contains("workload file"), "nothing to say");
        report.dataset = Some(stats);
        let table = render_table(&report);
        assert!(
            table.ends_with(
                "(workload file: 7 prompts of 10 entries; 2 bad lines skipped, 1 too short and 0 too long dropped, 3 truncated)\n"
            ),
            "{table}"
        );
    }

    #[test]
    fn incomplete_runs_say_so_and_rows_stay_aligned() {
        let mut report = sample_report();
        report.incomplete = true;
        report.benchmarks[0].name = "a-much-longer-benchmark-name".into();
        let table = render_table(&report);
        assert!(table.ends_with("(incomplete run: stopped before every benchmark finished)\n"), "{table}");
        assert!(table.is_ascii());
        let lengths: Vec<usize> = table.lines().take(2 + report.benchmarks.len()).map(str::len).collect();
        assert!(lengths.windows(2).all(|w| w[0] == w[1]), "{lengths:?}\n{table}");
    }
}
