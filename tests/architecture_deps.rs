//! ARCHITECTURE.md's dependency invariant, checked: lower layers never name higher ones.

use std::path::{Path, PathBuf};

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("a source directory") {
        let path = entry.expect("an entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Every line under `layer` (but not under `except`) that names one of `forbidden`.
fn violations(layer: &str, except: &[&str], forbidden: &[&str]) -> Vec<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    rust_files(&root.join(layer), &mut files);
    files.sort();
    let mut found = Vec::new();
    for file in files {
        let relative = file.strip_prefix(root).expect("under the root").to_string_lossy().into_owned();
        if except.iter().any(|e| relative.starts_with(e)) {
            continue;
        }
        let text = std::fs::read_to_string(&file).expect("readable");
        for (n, line) in text.lines().enumerate() {
            if forbidden.iter().any(|f| line.contains(f)) {
                found.push(format!("{relative}:{}: {}", n + 1, line.trim()));
            }
        }
    }
    found
}

#[test]
fn dependencies_point_down() {
    let cases: &[(&str, &[&str], &[&str])] = &[
        ("src/engine", &[], &["crate::scenario", "crate::metrics", "crate::run"]),
        ("src/loadgen", &[], &["crate::scenario", "crate::metrics", "crate::run"]),
        ("src/metrics", &[], &["crate::scenario", "crate::run"]),
        ("src/batcher", &[], &["crate::scenario", "crate::metrics", "crate::run", "crate::report"]),
        ("src/compare", &[], &["crate::run", "crate::engine", "crate::batcher", "crate::scenario"]),
        ("src/calibrate", &[], &["crate::scenario", "crate::metrics", "crate::run"]),
        // The server reads a plan (`ServeConfig::from_plan`) and runs the simulator's scheduler
        // itself: no batcher, no run loop, no reports.
        (
            "src/serve",
            &[],
            &["crate::run", "crate::batcher", "crate::metrics", "crate::report", "crate::tune", "crate::calibrate"],
        ),
        // A report carries what tune found (`report::tuning`), but never runs anything.
        ("src/report", &[], &["crate::tune", "crate::compare"]),
    ];
    let mut all = Vec::new();
    for (layer, except, forbidden) in cases {
        all.extend(violations(layer, except, forbidden));
    }
    assert!(all.is_empty(), "lower layers name higher ones:\n{}", all.join("\n"));
}
