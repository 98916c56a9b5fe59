//! `batchlab compare` as a CI gate, on virtual-time runs of a shipped scenario (issue 12's
//! done-when): two same-seed runs are within noise everywhere and exit 0; doubling the
//! simulator's decode step is flagged worse on latency and exits 4.

use std::path::Path;

#[path = "common/cli.rs"]
mod cli_common;
use cli_common::{batchlab, temp_dir, text};

/// Runs scenarios/throughput.toml three times per benchmark, with requests.jsonl, into `dir`.
fn run(dir: &Path, sets: &[&str]) {
    let mut args = vec!["run", "scenarios/throughput.toml", "--quiet", "--requests-jsonl", "--repeat", "3"];
    for set in sets {
        args.extend(["--set", set]);
    }
    args.extend(["--output", dir.to_str().unwrap()]);
    let o = batchlab(&args);
    assert!(o.status.success(), "{}", text(&o.stderr));
}

/// The table rows (benchmark `throughput`) as (metric, verdict), the verdict's first word(s).
fn verdicts(table: &str) -> Vec<(String, String)> {
    table
        .lines()
        .filter(|l| l.starts_with("throughput "))
        .map(|l| {
            let metric = l.split_whitespace().nth(1).unwrap_or_default().to_string();
            let verdict = ["within noise", "better", "worse", "differs", "not judged"]
                .iter()
                .find(|v| l.contains(*v))
                .map_or("?".to_string(), |v| v.to_string());
            (metric, verdict)
        })
        .collect()
}

#[test]
fn same_seed_runs_are_within_noise_everywhere_and_exit_zero() {
    let root = temp_dir("same");
    let (a, b) = (root.join("a"), root.join("b"));
    run(&a, &[]);
    run(&b, &[]);
    let html = root.join("html");
    let o = batchlab(&["compare", a.to_str().unwrap(), b.to_str().unwrap(), "--output", html.to_str().unwrap()]);
    let table = text(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{table}\n{}", text(&o.stderr));
    let rows = verdicts(&table);
    assert!(rows.len() > 50, "every metric has a row: {table}");
    for (metric, verdict) in &rows {
        assert_eq!(verdict, "within noise", "{metric}:\n{table}");
    }
    // The tests really ran: the timings on requests, the rest on the three repeats.
    let line = |metric: &str| table.lines().find(|l| l.split_whitespace().nth(1) == Some(metric)).unwrap_or_default();
    assert!(line("latency_p50_ms").contains("mann-whitney"), "{table}");
    assert!(line("requests_per_s").contains("welch-t"), "{table}");
    let page = std::fs::read_to_string(html.join("compare.html")).expect("compare.html");
    assert!(page.contains("no gated metric worse by more than 5 %"), "{page}");
    for attr in ["src=\"http", "href=\"http", "src=\"//", "href=\"//"] {
        assert!(!page.contains(attr), "compare.html is not self-contained: {attr}");
    }
}

#[test]
fn doubled_decode_step_is_worse_on_latency_and_exits_non_zero() {
    let root = temp_dir("slower");
    let (a, b) = (root.join("a"), root.join("b"));
    run(&a, &[]);
    run(&b, &["engine.sim.decode_step=2ms"]);
    let o = batchlab(&[
        "compare",
        a.join("report.json").to_str().unwrap(),
        b.to_str().unwrap(),
        "--max-regression",
        "5%",
        "--output",
        root.to_str().unwrap(),
    ]);
    let table = text(&o.stdout);
    assert_eq!(o.status.code(), Some(4), "{table}\n{}", text(&o.stderr));
    let rows = verdicts(&table);
    let verdict = |m: &str| rows.iter().find(|(metric, _)| metric == m).map(|(_, v)| v.as_str());
    for metric in ["latency_p50_ms", "latency_p99_ms", "tpot_p50_ms", "itl_p50_ms"] {
        assert_eq!(verdict(metric), Some("worse"), "{metric}:\n{table}");
    }
    assert_eq!(verdict("output_tokens_per_s"), Some("worse"), "{table}");
    assert!(table.contains("REGRESSION"), "{table}");
    assert!(table.contains("throughput latency_p50_ms:"), "the regression is listed: {table}");
    // Swapped, B is the faster run: better, and the gate passes.
    let o = batchlab(&["compare", b.to_str().unwrap(), a.to_str().unwrap(), "--output", root.to_str().unwrap()]);
    let table = text(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{table}");
    assert!(verdicts(&table).iter().any(|(m, v)| m == "latency_p50_ms" && v == "better"), "{table}");
}

#[test]
fn bad_inputs_exit_two_with_the_reason() {
    let root = temp_dir("bad");
    let old = root.join("old");
    std::fs::create_dir_all(&old).unwrap();
    std::fs::write(old.join("report.json"), r#"{"schema_version": 1, "benchmarks": []}"#).unwrap();
    let o = batchlab(&["compare", old.to_str().unwrap(), old.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    let err = text(&o.stderr);
    assert!(err.contains("report.json schema 1, this batchlab reads schema 2: re-run"), "{err}");
    let o = batchlab(&["compare", "/nonexistent/a", "/nonexistent/b"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o.stderr).contains("/nonexistent/a"), "{}", text(&o.stderr));
    let o = batchlab(&["compare", "a", "b", "--max-regression", "5"]);
    assert_eq!(o.status.code(), Some(2), "clap's usage error");
    assert!(text(&o.stderr).contains("did you mean 5%?"), "{}", text(&o.stderr));
}
