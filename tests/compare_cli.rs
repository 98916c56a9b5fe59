//! `batchlab compare` as a CI gate that passes only on evidence (issue 31), on the shipped
//! scenarios exactly as its reproductions ran them: `scenarios/throughput.toml` (8 batches of 32)
//! and `scenarios/http.toml` against `batchlab serve` at `batch_size = 1`. Exit 0 only when every
//! gated metric is shown within its margin, 4 on a regression, 5 when inconclusive.

use std::path::Path;
use std::sync::{Mutex, MutexGuard};

#[path = "common/cli.rs"]
mod cli_common;
use cli_common::{batchlab, temp_dir, text};

#[path = "common/serve_process.rs"]
mod serve_process;

/// Held by each test for its whole run: the tests of this file run one at a time. Reproduction 3
/// times two unchanged HTTP runs in real time, one after the other; beside the other tests (2
/// cores) one run had the machine to itself and the other did not, and its TTFT p50 moved by a
/// third (exit 4 in `just test`, 2026-12-07). A change of load between A and B is exactly the
/// drift a single unchanged pair must not see.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn alone() -> MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Runs scenarios/throughput.toml with `flags` and `--set`s into `dir`; any count of errors and
/// completions meets the expectations (as the issue's reproductions set them).
fn run_with(dir: &Path, flags: &[&str], sets: &[&str]) {
    run_scenario("scenarios/throughput.toml", dir, flags, sets);
}

fn run_scenario(scenario: &str, dir: &Path, flags: &[&str], sets: &[&str]) {
    let mut args = vec!["run", scenario, "--quiet", "--set", "expect.errors=>=0", "--set", "expect.completed=>=0"];
    args.extend(flags);
    for set in sets {
        args.extend(["--set", set]);
    }
    args.extend(["--output", dir.to_str().unwrap()]);
    let o = batchlab(&args);
    assert!(o.status.success(), "{}", text(&o.stderr));
}

/// `batchlab compare A B`: its exit code and table.
fn compare(a: &Path, b: &Path, extra: &[&str]) -> (Option<i32>, String) {
    let mut args = vec!["compare", a.to_str().unwrap(), b.to_str().unwrap()];
    args.extend(extra);
    let o = batchlab(&args);
    (o.status.code(), format!("{}{}", text(&o.stdout), text(&o.stderr)))
}

/// The line of `metric` in a compare table (its first benchmark).
fn line<'t>(table: &'t str, metric: &str) -> &'t str {
    table.lines().find(|l| l.split_whitespace().nth(1) == Some(metric)).unwrap_or_default()
}

/// Reproduction 1: half the requests of B failed (every second batch), one run each, no
/// requests.jsonl. The errors are certain to be above the limit: exit 4, never 0.
#[test]
fn reproduction_1_half_the_requests_failed_is_a_regression() {
    let _alone = alone();
    let root = temp_dir("half-failed");
    let (a, b) = (root.join("a"), root.join("b"));
    run_with(&a, &[], &[]);
    run_with(&b, &[], &["faults.fail_batch.every=2"]);
    let (code, table) = compare(&a, &b, &[]);
    assert!(matches!(code, Some(4 | 5)), "{table}");
    assert_eq!(code, Some(4), "{table}");
    let errors = line(&table, "errors");
    assert!(errors.contains("+50.00pp") && errors.contains("REGRESSION"), "{table}");
    assert!(table.contains("above --max-error-rate 0.5 %"), "{table}");
    // 96 of 96 failed (3 batches): also a regression.
    let (a, b) = (root.join("a96"), root.join("b96"));
    run_with(&a, &[], &["stop.max_requests=96"]);
    run_with(&b, &[], &["stop.max_requests=96", "faults.fail_batch.probability=1"]);
    let (code, table) = compare(&a, &b, &[]);
    assert_eq!(code, Some(4), "{table}");
    assert!(line(&table, "errors").contains("REGRESSION"), "{table}");
}

/// Reproduction 2: a tripled tail (every eighth batch hangs for 2 s, then times out) and a slow
/// batch in eight (6× slower), with requests.jsonl: never a pass.
#[test]
fn reproduction_2_a_tripled_tail_is_never_a_pass() {
    let _alone = alone();
    let root = temp_dir("tail");
    let (a, b, slow) = (root.join("a"), root.join("b"), root.join("slow"));
    run_with(&a, &["--requests-jsonl"], &[]);
    let hang = ["faults.hang={ every = 8 }", "faults.hang_for=2s", "batching.generate_timeout=5s"];
    run_with(&b, &["--requests-jsonl"], &hang);
    let (code, table) = compare(&a, &b, &[]);
    assert!(matches!(code, Some(4 | 5)), "{table}");
    assert!(line(&table, "errors").contains("REGRESSION"), "32 of 256 timed out: {table}");
    run_with(&slow, &["--requests-jsonl"], &["faults.slow={ every = 8 }", "faults.slow_factor=6"]);
    let (code, table) = compare(&a, &slow, &[]);
    assert!(matches!(code, Some(4 | 5)), "{table}");
    // The p99 moved by +62 %: no pass, and the row says what would decide it.
    let p99 = line(&table, "latency_p99_ms");
    assert!(p99.contains("+62") && !p99.contains("pass"), "{table}");
    assert!(table.contains("throughput latency_p99_ms: the interval"), "{table}");
    assert!(table.contains("needs about"), "{table}");
}

/// Reproduction 3: two unchanged runs of scenarios/http.toml against `batchlab serve`, at
/// `batch_size = 1` and 32 in flight: the unit is a block of time, never the request, and the
/// gate does not fail them (exit 0 or 5).
///
/// The gate's claim is a rate: at most about alpha of unchanged pairs exit 4. Before TTFT and TPOT
/// of such runs were judged by the run (3 of 40 runs of this test on 2026-12-07 exited 4, on
/// TTFT p50: the requests fall into waves that hold for a run and differ between runs; latency p99
/// too), one pair
/// could exit 4 by design, and a test of one pair that must never exit 4 flakes. Here a pair that exits 4 is
/// followed by a second, independent one (other seeds, a fresh server), and the test fails only
/// when both do: about alpha² under the claim, and a quarter or more for a gate that fails
/// unchanged runs half the time. Every pair's table states its unit.
#[test]
fn reproduction_3_unchanged_http_runs_at_batch_size_one_fail_the_gate_at_most_at_alpha() {
    let _alone = alone();
    let mut failed = Vec::new();
    for (pair, seeds) in [(1, 2), (3, 4)].into_iter().enumerate() {
        let server = serve_process::Server::start(None, &[]);
        let root = temp_dir(&format!("http-unchanged-{pair}"));
        let urls = format!("engine.openai.urls=[\"{}\"]", server.url);
        let shape = [urls.as_str(), "batching.batch_size=1", "batching.max_in_flight=32"];
        let (a, b) = (root.join("a"), root.join("b"));
        for (dir, seed) in [(&a, seeds.0), (&b, seeds.1)] {
            let seed = format!("seed={seed}");
            run_scenario("scenarios/http.toml", dir, &["--requests-jsonl"], &[&shape[..], &[seed.as_str()]].concat());
        }
        let (code, table) = compare(&a, &b, &[]);
        let rate = line(&table, "requests_per_s");
        assert!(rate.contains("series-t") && rate.contains("time blocks"), "the unit is stated: {table}");
        // The requests' timings: the run is their unit, and one run each cannot judge them.
        assert!(line(&table, "ttft_p99_ms").contains("not judged"), "{table}");
        assert!(line(&table, "latency_p99_ms").contains("not judged"), "{table}");
        assert!(table.contains("fall into waves that hold for a run"), "{table}");
        match code {
            Some(0 | 5) => {
                assert!(!table.contains("REGRESSION"), "{table}");
                return;
            }
            Some(4) => {
                eprintln!("pair {pair} (seeds {seeds:?}) exited 4:\n{table}");
                failed.push(table);
            }
            other => panic!("pair {pair} exited {other:?}:\n{table}"),
        }
    }
    panic!("both unchanged pairs exited 4:\n{}", failed.join("\n"));
}

/// Reproduction 4: the decode step doubled, three repeats each: a regression with and without
/// requests.jsonl (more data never weakens a verdict).
#[test]
fn reproduction_4_more_data_never_weakens_the_verdict() {
    let _alone = alone();
    let root = temp_dir("slower");
    let (a, b) = (root.join("a"), root.join("b"));
    run_with(&a, &["--repeat", "3", "--requests-jsonl"], &[]);
    run_with(&b, &["--repeat", "3", "--requests-jsonl"], &["engine.sim.decode_step=2ms"]);
    let (code, table) = compare(&a, &b, &["--output", root.to_str().unwrap()]);
    assert_eq!(code, Some(4), "{table}");
    let p50 = line(&table, "latency_p50_ms");
    assert!(p50.contains("+55.6%") && p50.contains("REGRESSION"), "{table}");
    for dir in [&a, &b] {
        std::fs::remove_file(dir.join("requests.jsonl")).unwrap();
    }
    let (code, without) = compare(&a, &b, &["--output", root.to_str().unwrap()]);
    assert_eq!(code, Some(4), "{without}");
    assert!(line(&without, "latency_p50_ms").contains("REGRESSION"), "{without}");
    // Swapped, B is the faster run: nothing regressed.
    let (code, table) = compare(&b, &a, &["--output", root.to_str().unwrap()]);
    assert!(matches!(code, Some(0 | 5)), "{table}");
    assert!(line(&table, "latency_p50_ms").contains("better"), "{table}");
}

/// Reproduction 5: every request failed, and the scenario has no `[expect]`: `batchlab run`
/// exits 3, unless the scenario expects it.
#[test]
fn reproduction_5_a_run_that_completed_nothing_exits_three() {
    let _alone = alone();
    let root = temp_dir("nothing");
    let shipped = std::fs::read_to_string("scenarios/throughput.toml").unwrap();
    let without_expect = &shipped[..shipped.find("[expect]").expect("the shipped scenario has [expect]")];
    std::fs::create_dir_all(&root).unwrap();
    let scenario = root.join("throughput.toml");
    std::fs::write(&scenario, without_expect).unwrap();
    let args = ["run", scenario.to_str().unwrap(), "--quiet", "--set", "faults.fail_batch={ probability = 1.0 }"];
    let o = batchlab(&[&args[..], &["--output", root.join("out").to_str().unwrap()]].concat());
    assert_eq!(o.status.code(), Some(3), "{}", text(&o.stderr));
    assert!(text(&o.stderr).contains("no request completed in throughput"), "{}", text(&o.stderr));
    let o = batchlab(
        &[&args[..], &["--set", "expect.completed=>=0", "--output", root.join("ok").to_str().unwrap()]].concat(),
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
}

/// Two same-seed runs of the shipped scenario never regress; each inconclusive row says what
/// would decide it, and `--allow-inconclusive` exits 0 and says so.
#[test]
fn same_seed_runs_never_regress_and_inconclusive_can_be_allowed() {
    let _alone = alone();
    let root = temp_dir("same");
    let (a, b) = (root.join("a"), root.join("b"));
    run_with(&a, &["--requests-jsonl", "--repeat", "3"], &[]);
    run_with(&b, &["--requests-jsonl", "--repeat", "3"], &[]);
    let (code, table) = compare(&a, &b, &[]);
    assert!(matches!(code, Some(0 | 5)), "{table}");
    assert!(!table.contains(" worse "), "{table}");
    if code == Some(5) {
        assert!(table.contains("INCONCLUSIVE") && table.contains("needs about"), "{table}");
        let (code, table) = compare(&a, &b, &["--allow-inconclusive"]);
        assert_eq!(code, Some(0), "{table}");
        assert!(table.contains("--allow-inconclusive: exiting 0"), "{table}");
    }
    // Without --output, compare.html goes next to B, not into the current directory.
    assert!(!Path::new(env!("CARGO_MANIFEST_DIR")).join("compare.html").exists());
    let page = std::fs::read_to_string(b.join("compare.html")).expect("compare.html next to B");
    for attr in ["src=\"http", "href=\"http", "src=\"//", "href=\"//"] {
        assert!(!page.contains(attr), "compare.html is not self-contained: {attr}");
    }
}

/// `batchlab ab`: A and B alternated round by round, judged by the rounds. The doubled decode step
/// is a regression; the same command on both sides never is.
#[test]
fn the_ab_runner_alternates_and_judges_by_rounds() {
    let _alone = alone();
    let root = temp_dir("ab");
    let bin = env!("CARGO_BIN_EXE_batchlab");
    let base = format!("{bin} run scenarios/throughput.toml --quiet --requests-jsonl --set 'expect.errors=>=0'");
    let slower = format!("{base} --set engine.sim.decode_step=2ms");
    let ab = |b: &str, out: &Path| {
        let o = batchlab(&["ab", "--a", &base, "--b", b, "--rounds", "2", "--output", out.to_str().unwrap()]);
        (o.status.code(), format!("{}{}", text(&o.stdout), text(&o.stderr)))
    };
    let (code, table) = ab(&slower, &root.join("slower"));
    assert_eq!(code, Some(4), "{table}");
    // A B, then B A.
    let order: Vec<&str> = table.lines().filter(|l| l.starts_with("round ")).collect();
    let expected = ["round 1/2: A in", "round 1/2: B in", "round 2/2: B in", "round 2/2: A in"];
    assert_eq!(order.len(), 4, "{table}");
    for (line, prefix) in order.iter().zip(expected) {
        assert!(line.starts_with(prefix), "{line:?} is not {prefix:?}: {table}");
    }
    for side in ["round-0/a", "round-0/b", "round-1/a", "round-1/b"] {
        assert!(root.join("slower").join(side).join("report.json").is_file(), "{side}");
    }
    assert!(root.join("slower/compare.html").is_file());
    let (code, table) = ab(&base, &root.join("same"));
    assert!(matches!(code, Some(0 | 5)), "{table}");
    // Rounds that repeat each other exactly (virtual time) count once.
    assert!(table.contains("copies are no evidence"), "{table}");
}

#[test]
fn bad_inputs_exit_two_with_the_reason() {
    let _alone = alone();
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
