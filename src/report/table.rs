//! The console summary: one row per benchmark, plain ASCII, columns aligned.

use crate::metrics::result::BenchmarkResult;

use super::Report;

/// A column: header, and how to show a benchmark's value in it.
struct Column {
    header: &'static str,
    cell: fn(&BenchmarkResult) -> String,
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

const COLUMNS: [Column; 11] = [
    Column { header: "benchmark", cell: |b| b.name.clone() },
    Column { header: "requests", cell: |b| count(b.counts.completed) },
    Column { header: "errors", cell: |b| count(b.counts.errors) },
    Column { header: "req/s", cell: |b| fixed(b.requests_per_s, 2) },
    Column { header: "out tok/s", cell: |b| fixed(b.output_tokens_per_s, 1) },
    Column { header: "lat p50 ms", cell: |b| ms(b, "latency_p50_ms") },
    Column { header: "lat p99 ms", cell: |b| ms(b, "latency_p99_ms") },
    Column { header: "ttft p50 ms", cell: |b| ms(b, "ttft_p50_ms") },
    Column { header: "ttft p99 ms", cell: |b| ms(b, "ttft_p99_ms") },
    Column { header: "itl p50 ms", cell: |b| ms(b, "itl_p50_ms") },
    Column { header: "batch mean", cell: |b| fixed(b.batching.batch_size_mean, 2) },
];

/// Shown only when a benchmark hit the prefix cache or was designed to: achieved (designed), e.g.
/// `0.48 (0.50)`.
const PREFIX_COLUMN: Column = Column {
    header: "prefix hit (designed)",
    cell: |b| format!("{} ({})", fixed(b.prefix_cache_hit_rate, 2), fixed(b.prefix_cache_designed_hit_rate, 2)),
};

/// The summary table for the console. The benchmark name is left-aligned, numbers right-aligned;
/// `-` marks a value that was not measured. "requests" counts completed requests.
pub fn render_table(report: &Report) -> String {
    let prefix = report.benchmarks.iter().any(|b| {
        [b.prefix_cache_hit_rate, b.prefix_cache_designed_hit_rate].iter().any(|r| r.is_some_and(|r| r > 0.0))
    });
    let columns: Vec<&Column> = COLUMNS.iter().chain(prefix.then_some(&PREFIX_COLUMN)).collect();
    let rows: Vec<Vec<String>> =
        report.benchmarks.iter().map(|b| columns.iter().map(|c| (c.cell)(b)).collect()).collect();
    let widths: Vec<usize> = columns
        .iter()
        .enumerate()
        .map(|(i, c)| rows.iter().map(|r| r[i].len()).chain([c.header.len()]).max().unwrap_or(0))
        .collect();

    let line = |cells: &[String]| {
        let padded: Vec<String> = cells
            .iter()
            .zip(&widths)
            .enumerate()
            .map(|(i, (cell, &w))| if i == 0 { format!("{cell:<w$}") } else { format!("{cell:>w$}") })
            .collect();
        let mut line = padded.join("  ").trim_end().to_string();
        line.push('\n');
        line
    };

    let headers: Vec<String> = columns.iter().map(|c| c.header.to_string()).collect();
    let rule: Vec<String> = widths.iter().map(|&w| "-".repeat(w)).collect();
    let mut out = line(&headers);
    out.push_str(&line(&rule));
    for row in &rows {
        out.push_str(&line(row));
    }
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
    fn skipped_and_filtered_prompts_are_noted() {
        let mut report = sample_report();
        let stats = crate::load::DatasetStats {
            path: "d.jsonl".into(),
            format: crate::load::FileFormat::Jsonl,
            entries: 10,
            skipped_bad_lines: 2,
            dropped_short: 1,
            dropped_long: 0,
            truncated: 3,
            prompts: 7,
        };
        report.dataset =
            Some(crate::load::DatasetStats { skipped_bad_lines: 0, dropped_short: 0, truncated: 0, ..stats.clone() });
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
