//! `compare.html`: the comparison as one self-contained page, in report.html's style (the same
//! page skeleton, tables and inline SVG charts, `report::html`): the gate's result, the
//! regressions, A's and B's distributions overlaid, and every metric with its verdict.

use std::path::{Path, PathBuf};

use super::table::{interval_text, units_text};
use super::{Comparison, Gate, Outcome, Row, Run, TestKind, Verdict, stats};
use crate::metrics::distribution::Histogram;
use crate::report::ReportError;
use crate::report::html::DISTRIBUTION_CHARTS;
use crate::report::html::chart::{self, Chart, Series, format_value};
use crate::report::html::page::{Badge, Cell, Page, Section, Table, anchor, escape};

/// The page's name in the output directory.
pub const HTML_FILE: &str = "compare.html";

/// Most points of a CDF drawn from per-request samples.
const CDF_POINTS: usize = 200;

fn num(v: Option<f64>) -> String {
    v.map_or_else(|| "-".to_string(), format_value)
}

fn percent(v: Option<f64>) -> String {
    v.map_or_else(|| "-".to_string(), |r| format!("{:+.1} %", r * 100.0))
}

fn verdict_cell(r: &Row) -> Cell {
    let mut label = r.verdict.label().to_string();
    if let Some(gate) = &r.gate {
        label.push_str(" · ");
        label.push_str(gate.label());
    }
    let badge = match (&r.gate, &r.verdict) {
        (Some(Gate::Regression(_)), _) | (None, Verdict::Worse) => Badge::Bad,
        (Some(Gate::Pass), _) | (None, Verdict::Better) => Badge::Good,
        _ => Badge::Neutral,
    };
    Cell::Badge(badge, label)
}

fn test_cells(r: &Row) -> [Cell; 3] {
    match &r.judgement {
        Some(j) => {
            let name = match j.test {
                TestKind::Bootstrap => "bootstrap over units",
                TestKind::Share => "share (Newcombe, effective size)",
                TestKind::Repeats => "t on repeats",
                TestKind::Series => "t on time blocks",
                TestKind::Paired => "paired t on rounds",
            };
            [Cell::num(interval_text(j)), Cell::text(name), Cell::text(units_text(j))]
        }
        None => [Cell::num("-"), Cell::text("-"), Cell::text("-")],
    }
}

fn metric_table(rows: &[&Row]) -> Table {
    let mut table = Table::new(&["metric", "A", "B", "delta", "delta %", "interval", "test", "units", "verdict"]);
    for r in rows {
        let [interval, test, units] = test_cells(r);
        table.row(vec![
            Cell::text(&r.metric),
            Cell::num(num(r.a)),
            Cell::num(num(r.b)),
            Cell::num(num(r.delta)),
            Cell::num(percent(r.relative)),
            interval,
            test,
            units,
            verdict_cell(r),
        ]);
    }
    table
}

/// A metric's name short enough for a bar's label: `latency_p50_ms` → `latency p50`.
fn short_label(metric: &str) -> String {
    let short = metric
        .strip_suffix("_ms")
        .unwrap_or(metric)
        .replace("requests_per_s", "req/s")
        .replace("_tokens_per_s", " tok/s")
        .replace("goodput_", "goodput ")
        .replace("slo_attainment", "SLO att.");
    short.replace('_', " ")
}

/// The empirical CDF of `samples`, at most [`CDF_POINTS`] points.
fn sample_cdf(samples: &[f64]) -> Vec<(f64, f64)> {
    let mut sorted: Vec<f64> = samples.iter().copied().filter(|v| v.is_finite()).collect();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    if n == 0 {
        return Vec::new();
    }
    let step = n.div_ceil(CDF_POINTS).max(1);
    let mut points: Vec<(f64, f64)> = (0..n).step_by(step).map(|i| (sorted[i], (i + 1) as f64 / n as f64)).collect();
    if points.last().is_some_and(|&(x, _)| x != sorted[n - 1]) || step > 1 {
        points.push((sorted[n - 1], 1.0));
    }
    points
}

/// A run's CDF of the timing `dist` in `benchmark`: from its requests.jsonl (every repeat), else
/// from the first repeat's histogram.
fn cdf_of(run: &Run, benchmark: &str, dist: &str) -> Vec<(f64, f64)> {
    let field = super::PER_REQUEST.iter().find(|(d, _, _)| *d == dist).map(|(_, f, _)| *f);
    let i = field.and_then(|f| super::PER_REQUEST.iter().position(|(_, g, _)| *g == f));
    let samples = run.requests.as_ref().and_then(|r| r.get(benchmark)).zip(i);
    if let Some((samples, i)) = samples {
        let values: Vec<f64> = samples.requests.iter().filter_map(|s| s.timings[i]).collect();
        if !values.is_empty() {
            return sample_cdf(&values);
        }
    }
    run.report
        .benchmarks
        .iter()
        .find(|b| b.name == benchmark)
        .and_then(|b| b.distributions.get(dist))
        .and_then(|s| s.histogram.as_ref())
        .map(Histogram::cdf_points)
        .unwrap_or_default()
}

fn status(c: &Comparison) -> String {
    let regressions = c.regressions().count();
    let inconclusive = c.inconclusive().count();
    let worse = c.rows.iter().filter(|r| r.verdict == Verdict::Worse).count();
    let better = c.rows.iter().filter(|r| r.verdict == Verdict::Better).count();
    let mut badges = vec![match c.outcome() {
        Outcome::Pass => Badge::Good.html("pass: every gated metric within its margin"),
        Outcome::Regression => Badge::Bad.html(&format!("{regressions} regression(s)")),
        Outcome::Inconclusive => {
            Badge::Neutral.html(&format!("inconclusive: {inconclusive} gated metric(s) undecided"))
        }
    }];
    badges.push(Badge::Neutral.html(&format!("{better} better · {worse} worse")));
    badges.join(" ")
}

/// The whole page; `a` and `b` are the runs `c` compared (for the distributions).
pub fn render_html(c: &Comparison, a: &Run, b: &Run) -> String {
    let mut page =
        Page::new("batchlab compare").subtitle(&format!("A: {} · B: {}", c.a, c.b)).status(status(c)).footer(
            "Written by batchlab compare. Self-contained: no script and no external resource. Verdicts: intervals of \
         the change in independent units (batches or blocks of time of requests.jsonl, repeats, blocks of the time \
         series; shares at their effective size); docs/compare.md.",
        );

    let regressions: Vec<&Row> = c.regressions().collect();
    let mut summary = Section::new("summary", "Summary").text(&format!(
        "B against A, metric by metric, each change with its {} % interval. A gated metric passes when the \
         interval's worse bound is within the margin ({} % of A's value; {} points for a share), regresses when the \
         interval excludes no change on the worse side and the change is beyond the margin (exit 4), and is otherwise \
         inconclusive (exit 5).",
        format_value((1.0 - c.alpha) * 100.0),
        format_value(c.max_regression * 100.0),
        format_value(c.max_error_increase * 100.0)
    ));
    if regressions.is_empty() {
        summary = summary.text("No regression.");
    } else {
        let mut table = Table::new(&["benchmark", "metric", "A", "B", "delta %", "interval"]);
        for r in &regressions {
            let [p, _, _] = test_cells(r);
            table.row(vec![
                Cell::text(&r.benchmark),
                Cell::text(&r.metric),
                Cell::num(num(r.a)),
                Cell::num(num(r.b)),
                Cell::Badge(Badge::Bad, percent(r.relative)),
                p,
            ]);
        }
        summary = summary.subsection(Section::new("regressions", "Regressions").table(&table));
    }
    let mut benchmarks: Vec<&str> = Vec::new();
    for r in &c.rows {
        if !benchmarks.contains(&r.benchmark.as_str()) {
            benchmarks.push(&r.benchmark);
        }
    }
    let charts: Vec<String> = benchmarks
        .iter()
        .filter_map(|name| {
            let bars: Vec<(String, f64)> = c
                .rows
                .iter()
                .filter(|r| r.gated && r.benchmark == *name)
                .filter_map(|r| Some((short_label(&r.metric), r.relative? * 100.0)))
                .collect();
            let title = format!("{name}: gated metrics, B against A");
            (!bars.is_empty()).then(|| chart::bar_svg(&Chart::new(&title, "metric", "change (%)"), &bars))
        })
        .collect();
    if !charts.is_empty() {
        summary = summary.charts(charts);
    }
    for (side, names) in [("A", &c.only_a), ("B", &c.only_b)] {
        for name in names {
            summary = summary.note(&format!("Only in {side}: {name} (not compared)."));
        }
    }
    page.section(summary);

    for name in benchmarks {
        let rows: Vec<&Row> = c.rows.iter().filter(|r| r.benchmark == name).collect();
        let charts = DISTRIBUTION_CHARTS
            .iter()
            .map(|(dist, label)| {
                let title = format!("{label} CDF");
                let x = format!("{label} (ms)");
                let series = [Series::new("A", cdf_of(a, name, dist)), Series::new("B", cdf_of(b, name, dist))];
                chart::cdf_svg(&Chart::new(&title, &x, "requests at or below"), &series)
            })
            .collect();
        let mut reasons: Vec<String> = Vec::new();
        for r in &rows {
            if let Verdict::NotJudged(reason) = &r.verdict
                && !reasons.contains(reason)
            {
                reasons.push(reason.clone());
            }
        }
        let mut section = Section::new(&format!("bench-{}", anchor(name)), &format!("Benchmark {name}"))
            .charts(charts)
            .note("Distributions of A and B (requests.jsonl, every repeat; without it, the first repeat's histogram). ITL from requests.jsonl is each request's longest gap.")
            .table(&metric_table(&rows));
        for reason in reasons {
            section = section.note(&format!("Not judged: {reason}."));
        }
        page.section(section);
    }
    let method = format!(
        "<p>No interval takes a request as an independent sample: the unit is the batch, a block of time (where \
         every request is its own batch, or the engine batches by itself), a repeat or a round. Per-request timings: \
         every statistic's relative change, an expanded-percentile bootstrap over whole units of requests.jsonl ({} \
         resamples from a fixed seed, at least {} units per run), or the repeats' t interval when narrower. Shares \
         (errors, completions, SLO attainment): the change in points, Newcombe's interval on Wilson's, each run at its \
         effective size (its requests over the design effect of how hits cluster). Throughput: the repeats, or {} \
         blocks of each repeat's time series. Intervals at {} %.</p>",
        stats::BOOTSTRAP_RESAMPLES,
        stats::MIN_BATCHES,
        super::SERIES_BLOCKS,
        escape(&format_value((1.0 - c.alpha) * 100.0))
    );
    page.section(Section::new("method", "Method").html(method));
    page.render()
}

/// Writes `dir/compare.html` and returns its path. Creates `dir` if needed.
pub fn write_html(c: &Comparison, a: &Run, b: &Run, dir: &Path) -> Result<PathBuf, ReportError> {
    std::fs::create_dir_all(dir).map_err(|source| ReportError::CreateDir { path: dir.to_path_buf(), source })?;
    let path = dir.join(HTML_FILE);
    std::fs::write(&path, render_html(c, a, b)).map_err(|source| ReportError::Write { path: path.clone(), source })?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sample_cdfs_end_at_the_maximum_and_stay_small() {
        assert_eq!(sample_cdf(&[3.0, 1.0, 2.0]), [(1.0, 1.0 / 3.0), (2.0, 2.0 / 3.0), (3.0, 1.0)]);
        let many: Vec<f64> = (0..10_000).map(f64::from).collect();
        let cdf = sample_cdf(&many);
        assert!(cdf.len() <= CDF_POINTS + 1, "{}", cdf.len());
        assert_eq!(cdf.last(), Some(&(9999.0, 1.0)));
        assert!(cdf.windows(2).all(|w| w[0].0 <= w[1].0 && w[0].1 <= w[1].1));
        assert!(sample_cdf(&[]).is_empty());
    }
}
