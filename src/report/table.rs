//! The console summary: one row per benchmark, plain ASCII, columns aligned.

use crate::metrics::repeats::RepeatSummary;
use crate::metrics::result::BenchmarkResult;

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
    let columns: Vec<&Column> = COLUMNS.iter().chain(prefix.then_some(&PREFIX_COLUMN)).collect();
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
    if !report.repeats.is_empty() {
        out.push('\n');
        out.push_str(&render_repeats(&report.repeats));
    }
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
mod tests {
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
