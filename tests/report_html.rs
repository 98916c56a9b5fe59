//! report.html in a real browser: headless Chromium loads the report of a sweep and of a run
//! with faults, and the page must log nothing to the console (no script error, no SVG attribute
//! the browser rejects), and hold every chart. Also: the file is self-contained, and
//! `batchlab report DIR` re-renders the same bytes from report.json.
//!
//! Chromium is required, not optional: without it these tests fail and say how to install it
//! (`.ci/run` installs Debian's `chromium`). `BATCHLAB_CHROMIUM` names another binary.

use std::path::{Path, PathBuf};
use std::process::Command;

use batchlab::report::html::external_urls;
use batchlab::report::{HTML_FILE, JSON_FILE, read_report, render_html};
use batchlab::run::{RunOptions, run_blocking};
use batchlab::scenario::{Overrides, load_file};

/// The browser, or a failure that says how to get one.
fn chromium() -> PathBuf {
    if let Some(path) = std::env::var_os("BATCHLAB_CHROMIUM") {
        let path = PathBuf::from(path);
        assert!(
            path.is_file(),
            "BATCHLAB_CHROMIUM={} is not a file: point it at a Chromium or Chrome binary",
            path.display()
        );
        return path;
    }
    let names = ["chromium", "chromium-browser", "google-chrome", "google-chrome-stable"];
    let path = std::env::var_os("PATH").unwrap_or_default();
    for dir in std::env::split_paths(&path) {
        for name in names {
            let candidate = dir.join(name);
            if candidate.is_file() {
                return candidate;
            }
        }
    }
    panic!(
        "this test needs headless Chromium and found none of {names:?} on PATH. Install it with \
         `sudo apt-get install -y chromium` (Debian/Ubuntu; .ci/run does this), or set BATCHLAB_CHROMIUM \
         to a Chromium or Chrome binary."
    );
}

/// A fresh directory for one test.
fn scratch(test: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("report_html-{test}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Runs a shipped scenario (virtual time: fast and deterministic) into `dir`.
fn run_shipped(scenario: &str, dir: &Path) -> PathBuf {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios").join(scenario);
    let plan = load_file(&path, &Overrides::default()).unwrap_or_else(|e| panic!("{e}"));
    let options = RunOptions { output_dir: Some(dir.to_path_buf()), ..RunOptions::quiet() };
    let summary = run_blocking(&plan, options).unwrap_or_else(|e| panic!("{scenario}: {e}"));
    let html = dir.join(HTML_FILE);
    assert!(summary.written.contains(&html), "{:?}", summary.written);
    html
}

/// What the browser made of a page.
struct Loaded {
    /// The DOM after loading, serialized.
    dom: String,
    /// Everything the page logged to the console, one line per message.
    console: Vec<String>,
}

fn chromium_command(profile: &Path) -> Command {
    let mut cmd = Command::new("timeout");
    cmd.arg("60").arg(chromium()).args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        "--hide-scrollbars",
    ]);
    cmd.arg(format!("--user-data-dir={}", profile.display()));
    cmd
}

/// Loads `page` in headless Chromium: its DOM, and its console messages (Chromium logs each as a
/// `:CONSOLE` line on stderr with `--enable-logging=stderr`).
fn load(page: &Path, profile: &Path) -> Loaded {
    let out = chromium_command(profile)
        .args(["--enable-logging=stderr", "--v=0", "--dump-dom"])
        .arg(format!("file://{}", page.display()))
        .output()
        .expect("chromium starts");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "chromium failed ({}):\n{stderr}", out.status);
    let console = stderr.lines().filter(|l| l.contains(":CONSOLE")).map(str::to_string).collect();
    Loaded { dom: String::from_utf8_lossy(&out.stdout).into_owned(), console }
}

/// Screenshots `page` at 1400×2000 into `png` and checks that a picture came out.
fn screenshot(page: &Path, png: &Path, profile: &Path) {
    let out = chromium_command(profile)
        .arg(format!("--screenshot={}", png.display()))
        .arg("--window-size=1400,2000")
        .arg(format!("file://{}", page.display()))
        .output()
        .expect("chromium starts");
    assert!(out.status.success(), "chromium failed: {}", String::from_utf8_lossy(&out.stderr));
    let bytes = std::fs::read(png).expect("a screenshot");
    assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n"), "not a PNG");
    // A blank 1400×2000 page compresses to a few KB; text and charts do not.
    assert!(bytes.len() > 60_000, "a {}-byte screenshot looks empty", bytes.len());
}

/// The page is self-contained: nothing it would load or link to is outside it.
fn check_self_contained(html: &str) {
    assert_eq!(external_urls(html), Vec::<String>::new(), "src/href URLs that leave the page");
    for resource in ["<script", "<link", "<iframe", "<img", "@import", "url("] {
        assert!(!html.contains(resource), "report.html has {resource}");
    }
}

fn count(text: &str, what: &str) -> usize {
    text.matches(what).count()
}

#[test]
fn a_sweep_report_renders_in_chromium_with_every_chart_and_no_console_message() {
    let dir = scratch("sweep");
    let html_path = run_shipped("sweep.toml", &dir);
    let html = std::fs::read_to_string(&html_path).unwrap();
    check_self_contained(&html);
    let report = read_report(&dir).unwrap();
    let benchmarks = report.benchmarks.len();
    assert_eq!(benchmarks, 5, "synchronous, throughput and 3 rates");

    let page = load(&html_path, &dir.join("profile"));
    assert_eq!(page.console, Vec::<String>::new(), "the page logged to the console");
    // Per benchmark: histogram and CDF of 4 distributions, 4 charts over time, 2 of batching;
    // across benchmarks: 2.
    assert_eq!(count(&page.dom, "<svg class=\"chart\""), benchmarks * (8 + 4 + 2) + 2);
    for title in [
        "Latency histogram",
        "Latency CDF",
        "TTFT histogram",
        "TTFT CDF",
        "TPOT histogram",
        "TPOT CDF",
        "ITL histogram",
        "ITL CDF",
        "Throughput over time",
        "Completed requests over time",
        "Concurrency over time",
        "Errors over time",
        "Batch sizes",
        "Flush reasons",
    ] {
        assert_eq!(count(&page.dom, &format!("aria-label=\"{title}\"")), benchmarks, "{title}");
    }
    for title in ["Latency vs throughput", "TTFT vs throughput"] {
        assert_eq!(count(&page.dom, &format!("aria-label=\"{title}\"")), 1, "{title}");
    }
    assert!(
        count(&page.dom, "<rect") > 100 && count(&page.dom, "<polyline") >= benchmarks * 8,
        "bars and lines are drawn"
    );
    for b in &report.benchmarks {
        assert!(page.dom.contains(&format!("<h2>Benchmark {}</h2>", b.name)), "{}", b.name);
    }
    assert!(page.dom.contains(">all 15 expectations met</span>"), "the sweep's 3 expectations × 5 benchmarks");
    for part in
        ["<h2>Summary</h2>", "<h2>Expectations</h2>", "<h2>Across benchmarks</h2>", "<h2>Environment and seeds</h2>"]
    {
        assert!(page.dom.contains(part), "{part}");
    }
    screenshot(&html_path, &dir.join("sweep.png"), &dir.join("profile"));
}

#[test]
fn a_report_with_errors_renders_them_in_chromium() {
    let dir = scratch("faults");
    let html_path = run_shipped("faults.toml", &dir);
    let html = std::fs::read_to_string(&html_path).unwrap();
    check_self_contained(&html);
    let report = read_report(&dir).unwrap();
    let errors: u64 = report.benchmarks.iter().map(|b| b.counts.errors).sum();
    assert!(errors > 0, "faults.toml injects errors");
    let series_errors: u64 = report.benchmarks.iter().flat_map(|b| &b.time_series.errors).sum();
    assert_eq!(series_errors, errors, "every error is in the time series");

    let page = load(&html_path, &dir.join("profile"));
    assert_eq!(page.console, Vec::<String>::new(), "the page logged to the console");
    assert!(page.dom.contains("<th>error kind</th>"), "errors by kind are listed");
    assert!(page.dom.contains("aria-label=\"Errors over time\""));
}

/// The console check can fail: a page with a rejected SVG attribute and a script error is caught.
#[test]
fn the_console_check_catches_bad_svg_and_script_errors() {
    let dir = scratch("negative");
    let page = dir.join("bad.html");
    std::fs::write(
        &page,
        "<!DOCTYPE html><html><body><svg width=\"9\" height=\"9\"><rect width=\"-5\" height=\"3\"/></svg>\
         <script>throw new Error(\"boom\")</script></body></html>",
    )
    .unwrap();
    let loaded = load(&page, &dir.join("profile"));
    assert_eq!(loaded.console.len(), 2, "{:?}", loaded.console);
    assert!(loaded.console[0].contains("<rect> attribute width"), "{:?}", loaded.console);
    assert!(loaded.console[1].contains("Uncaught Error: boom"), "{:?}", loaded.console);
    // And the self-containment check catches what would leave the page.
    assert_eq!(external_urls("<link rel=stylesheet href=\"https://x/y.css\">"), ["https://x/y.css"]);
}

#[test]
fn batchlab_report_rerenders_the_same_page_from_report_json() {
    let dir = scratch("rerender");
    let html_path = run_shipped("sweep.toml", &dir);
    let written = std::fs::read_to_string(&html_path).unwrap();
    std::fs::remove_file(&html_path).unwrap();
    let report = read_report(&dir.join(JSON_FILE)).unwrap();
    assert_eq!(render_html(&report), written, "report.json holds everything the page shows");

    let out = Command::new(env!("CARGO_BIN_EXE_batchlab")).arg("report").arg(&dir).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(std::fs::read_to_string(&html_path).unwrap(), written, "byte for byte");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.starts_with("benchmark ") && stdout.contains("synchronous"), "the table: {stdout}");
    assert!(stderr.contains(&format!("wrote {}", html_path.display())), "{stderr}");

    // A report.json path works too; a bad one is bad input (exit 2) with the file named.
    let out = Command::new(env!("CARGO_BIN_EXE_batchlab")).arg("report").arg(dir.join(JSON_FILE)).output().unwrap();
    assert!(out.status.success());
    let bad = dir.join("bad.json");
    let text = format!("{{\"schema_version\": {}, \"incomplete\": 3}}", batchlab::report::SCHEMA_VERSION);
    std::fs::write(&bad, text).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_batchlab")).arg("report").arg(&bad).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let expected = format!(
        "cannot read {} as a report: invalid type: integer `3`, expected a boolean at line 1 column",
        bad.display()
    );
    assert!(stderr.starts_with(&expected), "{stderr}");
}

/// compare.html (`batchlab compare`) in the same browser: two runs of a shipped scenario, the
/// second with a doubled decode step; every chart there, nothing logged, self-contained.
#[test]
fn a_compare_page_renders_in_chromium_with_its_charts_and_no_console_message() {
    use batchlab::compare::{CompareOptions, Outcome, Run, compare, html};
    let dir = scratch("compare");
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/throughput.toml");
    for (name, sets) in [("a", vec![]), ("b", vec!["engine.sim.decode_step=2ms".to_string()])] {
        let plan = load_file(&path, &Overrides { sets, seed: None }).unwrap();
        let options =
            RunOptions { output_dir: Some(dir.join(name)), requests_jsonl: true, repeat: 2, ..RunOptions::quiet() };
        run_blocking(&plan, options).unwrap();
    }
    let (a, b) = (Run::load(&dir.join("a")).unwrap(), Run::load(&dir.join("b")).unwrap());
    let comparison = compare(&a, &b, &CompareOptions::default()).unwrap();
    assert_eq!(comparison.outcome(), Outcome::Regression);
    let page_path = html::write_html(&comparison, &a, &b, &dir).unwrap();
    let text = std::fs::read_to_string(&page_path).unwrap();
    check_self_contained(&text);

    let page = load(&page_path, &dir.join("profile"));
    assert_eq!(page.console, Vec::<String>::new(), "the page logged to the console");
    // The gated metrics' bars, and A against B for 4 distributions.
    assert_eq!(count(&page.dom, "<svg class=\"chart\""), 1 + 4);
    for title in ["Latency CDF", "TTFT CDF", "TPOT CDF", "ITL CDF", "throughput: gated metrics, B against A"] {
        assert_eq!(count(&page.dom, &format!("aria-label=\"{title}\"")), 1, "{title}");
    }
    assert!(page.dom.contains("<h2>Benchmark throughput</h2>") && page.dom.contains("<h3>Regressions</h3>"));
    assert!(page.dom.contains("worse · REGRESSION"), "regressions are marked");
    screenshot(&page_path, &dir.join("compare.png"), &dir.join("profile"));
}
