//! Every shipped scenario runs and meets its own `[expect]`; a virtual-time run is byte-identical
//! for a seed, and its console table and report.json are snapshotted.

use std::path::{Path, PathBuf};

use batchlab::report::{Environment, Report};
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
        if !matches!(plan.engine, EnginePlan::Sim(_)) {
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
