//! `batchlab compare` and `batchlab ab` on real vLLM noise (issues 22, 31): two unchanged runs of
//! `scenarios/vllm-cpu.toml` do not fail the gate, while batch size 8 against 32 does, one way
//! round.
//!
//! Small runs (160 requests: 5 batches of 32, 20 of 8), in-process. The two unchanged runs are
//! interleaved in time, as docs/compare.md advises: one run with `--repeat 4`, split A B B A into
//! A (repeats 1 and 4) and B (2 and 3), so that a machine drifting steadily falls on both alike
//! (split A B A B, B would be a repeat later throughout: a CI run met B's TPOT p50 16.7 % above A's,
//! judged then by a bootstrap over the batches that the repeats' own spread did not bear); separate
//! runs on a busy machine differ by the machine (docs/compare.md measures how much). Run with
//! `just test-vllm`. Without the venv and model the test says SKIPPED, except under `CI=true`,
//! where it fails: CI must not pass a test that did not run. docs/compare.md has the false-alarm
//! rate of the full-size runs (`scripts/compare_noise.py`).
#![cfg(feature = "vllm")]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use batchlab::engine::python::{batchlab_home, default_venv};

fn batchlab(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_batchlab"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env_remove("BATCHLAB_LOG")
        .env_remove("VLLM_ENABLE_V1_MULTIPROCESSING")
        .output()
        .expect("running batchlab")
}

/// Both tests time a real engine: run side by side on 2 cores, each would load the other's runs
/// unevenly (one repeat of an interleaved pair alone, the next beside the other test's engine),
/// which is the drift these tests must not see. Each holds this while it runs.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Whether the venv and the tiny model exist; under `CI=true` their absence fails the test.
fn ready() -> bool {
    for needed in [default_venv().join("bin/python"), batchlab_home().join("tiny-llama/config.json")] {
        if !needed.exists() {
            let why = format!("{} is missing; run `just setup-vllm` (or `just test-vllm`)", needed.display());
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "CI=true: a test that needs the venv must run: {why}"
            );
            eprintln!("SKIPPED: {why}");
            return false;
        }
    }
    true
}

/// `scenarios/vllm-cpu.toml` with 160 requests per benchmark and `flags`, with requests.jsonl,
/// into `dir`.
fn run(dir: &Path, flags: &[&str]) {
    let mut args = vec!["run", "scenarios/vllm-cpu.toml", "--quiet", "--requests-jsonl"];
    args.extend(["--set", "stop.max_requests=160", "--set", "expect.completed=== 160"]);
    args.extend(flags);
    args.extend(["--output", dir.to_str().unwrap()]);
    let o = batchlab(&args);
    assert!(o.status.success(), "{}", text(&o.stderr));
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("batchlab-vllm-compare-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// Splits the `--repeat 4` run in `dir` A B B A: repeats 0 and 3 into `a`, 1 and 2 into `b`, each
/// renumbered 0 and 1, report.json and requests.jsonl alike.
fn split(dir: &Path, a: &Path, b: &Path) {
    use serde_json::Value;
    let read = |name: &str| std::fs::read_to_string(dir.join(name)).unwrap();
    let report: Value = serde_json::from_str(&read("report.json")).unwrap();
    let records: Vec<Value> = read("requests.jsonl").lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let repeat = |v: &Value| v["repeat"].as_u64().unwrap();
    // Repeat r's side (0 is A) and its number there.
    let side = |r: u64| u64::from(matches!(r, 1 | 2));
    let renumbered = |v: &Value| {
        let mut v = v.clone();
        v["repeat"] = u64::from(matches!(repeat(&v), 2 | 3)).into();
        v
    };
    for (part, out) in [a, b].into_iter().enumerate() {
        let mine = |v: &&Value| side(repeat(v)) == part as u64;
        let mut report = report.clone();
        report["repeats"] = Value::Array(Vec::new());
        report["benchmarks"] = report["benchmarks"].as_array().unwrap().iter().filter(mine).map(renumbered).collect();
        std::fs::create_dir_all(out).unwrap();
        std::fs::write(out.join("report.json"), report.to_string()).unwrap();
        let lines: Vec<String> = records.iter().filter(mine).map(|r| renumbered(r).to_string() + "\n").collect();
        std::fs::write(out.join("requests.jsonl"), lines.concat()).unwrap();
    }
}

#[test]
fn unchanged_runs_pass_the_gate_and_batch_8_against_32_fails_it() {
    if !ready() {
        return;
    }
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let root = temp_dir("noise");
    let (both, a, b, small) = (root.join("both"), root.join("a"), root.join("b"), root.join("batch8"));
    run(&both, &["--repeat", "4"]);
    split(&both, &a, &b);
    run(&small, &["--set", "batching.batch_size=8"]);
    let compare = |x: &Path, y: &Path| {
        let o = batchlab(&["compare", x.to_str().unwrap(), y.to_str().unwrap()]);
        (o.status.code(), text(&o.stdout))
    };
    let (code, table) = compare(&a, &b);
    // Unchanged: never a regression; a pass, or inconclusive when 2 repeats cannot show ±5 %.
    assert!(matches!(code, Some(0 | 5)), "two unchanged runs regressed:\n{table}");
    // Which of the two is worse depends on the machine (batch 8 has the shorter TPOT, batch 32
    // the higher throughput when the cores are free): flagged means a gate fails one way round.
    // Separate runs on a machine whose speed moved between them are inconclusive, naming the drift:
    // flagged means a gate fails one way round, or names the drift, never a pass.
    let (forward, forward_table) = compare(&a, &small);
    let (backward, backward_table) = compare(&small, &a);
    let drifted = |table: &str| table.contains("the machine drifted by");
    assert!(
        forward == Some(4) || backward == Some(4) || (drifted(&forward_table) && forward == Some(5)),
        "batch 8 against 32 passed the gate both ways:\n{forward_table}\n{backward_table}"
    );
    assert_ne!((forward, backward), (Some(0), Some(0)), "{forward_table}\n{backward_table}");
    std::fs::remove_dir_all(&root).unwrap();
}

/// `batchlab ab` on real vLLM noise: the same command on both sides, alternated for 2 rounds
/// (96 requests each), is judged by the rounds, and every run's report carries the machine-speed
/// probe the separate-run comparison names drift by.
///
/// The claim is a rate: at most alpha of unchanged A/B pairs exit 4. One pair may exit 4 by design
/// (alpha per gated metric, one-sided; a CI run of this test once met two rounds in which B was
/// 13.4 % and 13.4 % slower than A). So this runs two independent pairs and fails when both exit 4:
/// at most about alpha² (0.25 %) under the claim, and 25 % or more for a gate that fails unchanged
/// rounds half the time.
#[test]
fn unchanged_ab_rounds_fail_the_gate_at_most_at_alpha() {
    if !ready() {
        return;
    }
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let bin = env!("CARGO_BIN_EXE_batchlab");
    let command = format!(
        "{bin} run scenarios/vllm-cpu.toml --quiet --requests-jsonl --set stop.max_requests=96 --set 'expect.completed=== 96'"
    );
    let mut failed = Vec::new();
    for pair in 0..2 {
        let root = temp_dir(&format!("ab-{pair}"));
        let o =
            batchlab(&["ab", "--a", &command, "--b", &command, "--rounds", "2", "--output", root.to_str().unwrap()]);
        let table = format!("{}{}", text(&o.stdout), text(&o.stderr));
        assert!(matches!(o.status.code(), Some(0 | 4 | 5)), "pair {pair}: the A/B runner failed:\n{table}");
        assert!(
            table.contains("paired-t") && table.contains("2 rounds"),
            "pair {pair}: judged by the rounds:\n{table}"
        );
        for side in ["round-0/a", "round-0/b", "round-1/a", "round-1/b"] {
            let report: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(root.join(side).join("report.json")).unwrap()).unwrap();
            let probe = &report["environment"]["machine"]["probe_start_ms"];
            assert!(probe.as_f64().is_some_and(|ms| ms > 0.0), "{side}: no machine probe: {probe}");
        }
        if o.status.code() == Some(4) {
            eprintln!("pair {pair} of unchanged rounds exited 4 (allowed at rate alpha):\n{table}");
            failed.push(table);
        }
        std::fs::remove_dir_all(&root).unwrap();
    }
    assert!(failed.len() < 2, "both unchanged A/B pairs regressed:\n{}", failed.join("\n\n"));
}
