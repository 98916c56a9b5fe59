//! `report.html`: the whole run on one self-contained page.
//!
//! One file with an inline stylesheet and inline SVG charts ([`chart`], drawn by plotters): no
//! script, no font, no network. It is rendered from a [`Report`] alone, so `batchlab report DIR`
//! re-renders the same bytes from a saved `report.json`. [`page`] and [`chart`] are the building
//! blocks other pages (compare.html) share.

pub mod chart;
pub mod page;
mod report_page;

use std::path::{Path, PathBuf};

use super::{Report, ReportError};

/// The HTML report's name in the output directory.
pub const HTML_FILE: &str = "report.html";

/// The distributions report.html charts (histogram and CDF), as `(Distributions name, label)`.
/// The one place that names them: a renamed metric is a change here.
pub const DISTRIBUTION_CHARTS: [(&str, &str); 4] =
    [("latency", "Latency"), ("ttft", "TTFT"), ("tpot", "TPOT"), ("itl", "ITL")];

/// What one sample of the distribution `name` is, for axis labels: one per token gap for ITL,
/// one per batch for generate, else one per request.
pub fn sample_unit(name: &str) -> &'static str {
    match name {
        "itl" => "token gaps",
        "generate" => "batches",
        _ => "requests",
    }
}

/// The page for `report`.
pub fn render_html(report: &Report) -> String {
    report_page::render(report)
}

/// Writes `dir/report.html` and returns its path. Creates `dir` if needed.
pub fn write_html(report: &Report, dir: &Path) -> Result<PathBuf, ReportError> {
    let path = dir.join(HTML_FILE);
    super::write::write_atomically(dir, &path, render_html(report).as_bytes())?;
    Ok(path)
}

/// Every URL in a `src` or `href` attribute of `html` that leaves the page: `http:`, `https:`,
/// protocol-relative `//…`, or any other scheme but `data:` (an in-page `#anchor` stays).
pub fn external_urls(html: &str) -> Vec<String> {
    let lower = html.to_ascii_lowercase();
    let mut found = Vec::new();
    for attr in ["src", "href"] {
        let mut from = 0;
        while let Some(pos) = lower[from..].find(attr).map(|p| p + from) {
            from = pos + attr.len();
            let before_ok =
                pos == 0 || !lower.as_bytes()[pos - 1].is_ascii_alphanumeric() && lower.as_bytes()[pos - 1] != b'-';
            let rest = lower[from..].trim_start();
            let Some(rest) = rest.strip_prefix('=').filter(|_| before_ok) else { continue };
            let rest = rest.trim_start();
            let value = match rest.chars().next() {
                Some(q @ ('"' | '\'')) => rest[1..].split(q).next().unwrap_or(""),
                _ => rest.split(|c: char| c.is_whitespace() || c == '>').next().unwrap_or(""),
            };
            let value = value.trim();
            let scheme = value
                .split_once(':')
                .map(|(s, _)| s)
                .filter(|s| s.chars().all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c)));
            let leaves = value.starts_with("//") || scheme.is_some_and(|s| s != "data");
            if leaves {
                found.push(value.to_string());
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::tests::sample_report;

    #[test]
    fn external_urls_are_found_in_src_and_href_only() {
        let cases: [(&str, &[&str]); 8] = [
            (r##"<a href="#summary">x</a>"##, &[]),
            (r#"<img src="https://cdn.example/x.png">"#, &["https://cdn.example/x.png"]),
            (r#"<link HREF='http://x/s.css'>"#, &["http://x/s.css"]),
            (r#"<script src=//x/y.js></script>"#, &["//x/y.js"]),
            (r#"<img src = "data:image/png;base64,AAA">"#, &[]),
            (r#"<a href="ftp://x">"#, &["ftp://x"]),
            (r#"<svg xmlns="http://www.w3.org/2000/svg"></svg>"#, &[]),
            (r#"<p>see https://example.org and data-src="x"</p>"#, &[]),
        ];
        for (html, expected) in cases {
            assert_eq!(external_urls(html), expected, "{html}");
        }
    }

    #[test]
    fn the_sample_report_page_is_self_contained_and_has_every_part() {
        let html = render_html(&sample_report());
        assert_eq!(external_urls(&html), Vec::<String>::new());
        assert!(
            !html.contains("<script") && !html.contains("<link") && !html.contains("url("),
            "no resources to fetch"
        );
        for heading in ["Summary", "Expectations", "Across benchmarks", "Environment and seeds", "Benchmark throughput"]
        {
            assert!(html.contains(&format!(">{heading}</")), "{heading}");
        }
        for title in [
            "Latency histogram",
            "Latency CDF",
            "TTFT histogram",
            "TPOT CDF",
            "ITL histogram",
            "Throughput over time",
            "Concurrency over time",
            "Errors over time",
            "Batch sizes",
            "Flush reasons",
            "Latency vs throughput",
        ] {
            assert!(html.contains(&format!("aria-label=\"{title}")), "{title}");
        }
        // Two benchmarks: 4 distributions × 2 charts, 4 over time, 2 batching each; 2 across.
        assert_eq!(html.matches("<svg class=\"chart\"").count(), 2 * (8 + 4 + 2) + 2);
        assert!(html.contains("<span class=\"badge bad\">fail</span>"), "ttft_p99_ms <= 50 fails on the sample");
        assert_eq!(render_html(&sample_report()), html, "deterministic");
    }
}
