//! The sections of report.html, from a [`Report`].
//!
//! This file puts the page together: its title, subtitle and status badges, then the sections in
//! order. Each section is in the child named for it: `tuning`, `overview` (summary,
//! expectations, across benchmarks), `benchmark` (with its `distributions` and `over_time`
//! subsections) and `environment`.

mod benchmark;
mod distributions;
mod environment;
mod over_time;
mod overview;
mod tuning;

use self::benchmark::benchmark;
use self::environment::environment;
use self::overview::{across, expectations, summary};
use self::tuning::tuning;
use super::chart::format_value;
use super::page::{Badge, Page, Section};
use crate::report::Report;

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

#[cfg(test)]
mod tests {
    use super::overview::summary;
    use super::*;
    use crate::report::table::COLUMNS;

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
