//! Every shipped scenario runs and meets its own `[expect]`; a virtual-time run is byte-identical
//! for a seed, and its console table and report.json are snapshotted.

use std::path::{Path, PathBuf};

use batchlab::report::{Environment, MachineProbe, Phase, Report, RequestRecord, read_records};
use batchlab::run::{RunOptions, RunSummary, run_blocking};
use batchlab::scenario::plan::EnginePlan;
use batchlab::scenario::{Overrides, load_file};

fn scenarios() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("scenarios/")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    files.sort();
    files
}

fn run_file(path: &Path, overrides: &Overrides) -> RunSummary {
    let plan = load_file(path, overrides).unwrap_or_else(|e| panic!("{e}"));
    run_blocking(&plan, RunOptions::default()).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn every_shipped_sim_scenario_meets_its_expectations() {
    let mut ran = 0;
    for path in scenarios() {
        let plan = load_file(&path, &Overrides::default()).unwrap_or_else(|e| panic!("{e}"));
        if !matches!(plan.engine(), EnginePlan::Sim(_)) {
            continue; // real engines have their own test suites
        }
        let summary = run_file(&path, &Overrides::default());
        let r = &summary.report;
        assert!(!r.incomplete, "{}: incomplete run", path.display());
        assert!(!r.benchmarks.is_empty(), "{}: no benchmarks", path.display());
        for b in &r.benchmarks {
            assert_eq!(b.counts.lost, 0, "{}: {} lost requests", path.display(), b.name);
        }
        assert!(!r.expectations.is_empty(), "{}: a shipped scenario must state expectations", path.display());
        assert!(r.passed(), "{}:\n{}", path.display(), batchlab::report::render_failures(&r.expectations));
        ran += 1;
    }
    assert!(ran >= 5, "expected the five shipped sim scenarios, ran {ran}");
}

/// The report with machine- and release-specific fields replaced.
fn redacted(report: &Report) -> Report {
    let mut r = report.clone();
    r.batchlab_version = "[version]".into();
    r.environment = Environment {
        batchlab_version: "[version]".into(),
        engine_name: r.environment.engine_name.clone(),
        engine_version: "[version]".into(),
        engine_config: r.environment.engine_config,
        cpu_model: Some("[cpu]".into()),
        cores: Some(0),
        cpu_affinity: Some("[cpus]".into()),
        os: "[os]".into(),
        hostname: Some("[host]".into()),
        // Timed on the machine: a fixed stand-in where there is one (virtual time has none).
        machine: r.environment.machine.map(|_| MachineProbe {
            probe_start_ms: 1.0,
            probe_end_ms: 1.0,
            load_start: Some(0.0),
            load_end: Some(0.0),
            steal_share: Some(0.0),
        }),
        seeds: r.environment.seeds.clone(),
    };
    r
}

#[test]
fn virtual_time_run_is_byte_identical_for_a_seed_and_snapshotted() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/throughput.toml");
    let a = run_file(&path, &Overrides::default());
    let b = run_file(&path, &Overrides::default());
    // Absolute paths (expectation origins) depend on where the checkout is.
    let json = |s: &RunSummary| {
        batchlab::report::render_json(&redacted(&s.report)).unwrap().replace(env!("CARGO_MANIFEST_DIR"), "[repo]")
    };
    assert_eq!(json(&a), json(&b), "same seed, different report");
    assert_eq!(a.table, b.table);
    let html = |s: &RunSummary| batchlab::report::render_html(&redacted(&s.report));
    assert!(html(&a) == html(&b), "same seed, different report.html");
    insta::assert_snapshot!("throughput_table", a.table);
    insta::assert_snapshot!("throughput_report_json", json(&a));

    let other = run_file(&path, &Overrides { sets: vec![], seed: Some(7) });
    assert_ne!(json(&a), json(&other), "a different seed should change the run");
}

/// The submit times of a run's measured requests, in ns after the first, from its requests.jsonl.
fn submit_offsets_ns(path: &Path, name: &str) -> Vec<u64> {
    let out = std::env::temp_dir().join(format!("batchlab-shipped-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let plan = load_file(path, &Overrides::default()).unwrap_or_else(|e| panic!("{e}"));
    let options = RunOptions { output_dir: Some(out.clone()), requests_jsonl: true, ..RunOptions::default() };
    run_blocking(&plan, options).unwrap();
    let records: Vec<RequestRecord> =
        read_records(&out.join("requests.jsonl")).unwrap().collect::<Result<_, _>>().unwrap_or_else(|e| panic!("{e}"));
    std::fs::remove_dir_all(&out).unwrap();
    let mut submitted: Vec<(u64, u64)> = records
        .iter()
        .filter(|r| r.phase == Phase::Measure)
        .map(|r| (r.id, r.submitted_ns.expect("submitted").as_nanos()))
        .collect();
    submitted.sort();
    let first = submitted[0].1;
    submitted.iter().map(|(_, t)| t - first).collect()
}

/// scenarios/trace.toml submits line `i` exactly at its recorded time, halved (`time_scale = 2`):
/// virtual time makes the replay exact to the nanosecond.
#[test]
fn the_trace_is_replayed_at_its_recorded_times() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios");
    let got = submit_offsets_ns(&dir.join("trace.toml"), "trace");
    let trace = std::fs::read_to_string(dir.join("data/trace-sample.jsonl")).unwrap();
    let recorded: Vec<f64> = trace
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["timestamp"].as_f64().unwrap())
        .collect();
    let expected: Vec<u64> = recorded.iter().map(|t| ((t - recorded[0]) / 2.0 * 1e9).round() as u64).collect();
    assert_eq!(got, expected);
}

/// scenarios/gamma.toml's arrivals are bursty as configured: submit gaps with a CV of 1/√0.25 = 2
/// (within 15 %: 2000 gaps give the CV a standard error of about 4 %), at the mean rate.
#[test]
fn the_gamma_scenario_arrives_in_bursts() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/gamma.toml");
    let t = submit_offsets_ns(&path, "gamma");
    let gaps: Vec<f64> = t.windows(2).map(|w| (w[1] - w[0]) as f64 / 1e9).collect();
    let n = gaps.len() as f64;
    let mean = gaps.iter().sum::<f64>() / n;
    let cv = (gaps.iter().map(|g| (g - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt() / mean;
    assert!((cv / 2.0 - 1.0).abs() < 0.15, "CV {cv}");
    assert!((mean * 50.0 - 1.0).abs() < 0.15, "mean gap {mean}");
}

/// scenarios/rampup.toml ramps 100/s over 20 s: its first 20 s bring about 1000 arrivals, the
/// first half of the ramp a quarter of them (λ(t) = 5 t), the next 20 s about 2000 (5 sd each).
#[test]
fn the_rampup_scenario_ramps() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/rampup.toml");
    let t = submit_offsets_ns(&path, "rampup");
    let count = |from_s: u64, to_s: u64| {
        t.iter().filter(|&&ns| ns >= from_s * 1_000_000_000 && ns < to_s * 1_000_000_000).count() as f64
    };
    let within = |got: f64, want: f64| (got - want).abs() < 5.0 * want.sqrt();
    assert!(within(count(0, 10), 250.0), "first half of the ramp: {}", count(0, 10));
    assert!(within(count(10, 20), 750.0), "second half of the ramp: {}", count(10, 20));
    assert!(within(count(20, 40), 2000.0), "after the ramp: {}", count(20, 40));
}
