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
    // The workflows above `run/` (`tune/`, `calibrate/`): nothing below them names them.
    const WORKFLOWS: [&str; 2] = ["crate::tune", "crate::calibrate"];
    let cases: &[(&str, &[&str], &[&str])] = &[
        ("src/engine", &[], &["crate::scenario", "crate::metrics", "crate::run", WORKFLOWS[0], WORKFLOWS[1]]),
        ("src/loadgen", &[], &["crate::scenario", "crate::metrics", "crate::run", WORKFLOWS[0], WORKFLOWS[1]]),
        ("src/metrics", &[], &["crate::scenario", "crate::run", WORKFLOWS[0], WORKFLOWS[1]]),
        (
            "src/batcher",
            &[],
            &["crate::scenario", "crate::metrics", "crate::run", "crate::report", WORKFLOWS[0], WORKFLOWS[1]],
        ),
        (
            "src/compare",
            &[],
            &["crate::run", "crate::engine", "crate::batcher", "crate::scenario", WORKFLOWS[0], WORKFLOWS[1]],
        ),
        ("src/scenario", &[], &WORKFLOWS),
        ("src/run", &[], &WORKFLOWS),
        // The server reads a plan (`ServeConfig::from_plan`) and runs the simulator's scheduler
        // itself: no batcher, no run loop, no reports.
        (
            "src/serve",
            &[],
            &["crate::run", "crate::batcher", "crate::metrics", "crate::report", "crate::tune", "crate::calibrate"],
        ),
        // A report carries what tune found (`report::tuning`), but never runs anything; `run/`
        // produces requests.jsonl records, `report/` defines them (`Phase` included).
        ("src/report", &[], &["crate::tune", "crate::compare", "crate::calibrate", "crate::run"]),
        // Two workflows side by side, neither calling the other.
        ("src/tune", &[], &["crate::calibrate"]),
        ("src/calibrate", &[], &["crate::tune"]),
    ];
    let mut all = Vec::new();
    for (layer, except, forbidden) in cases {
        all.extend(violations(layer, except, forbidden));
    }
    assert!(all.is_empty(), "lower layers name higher ones:\n{}", all.join("\n"));
}

/// Only `scenario/` builds a `Plan` (ARCHITECTURE.md, invariant 8): no struct literal of a plan
/// type elsewhere, and no function elsewhere that hands out a bare `Plan` it made. Every change of
/// a plan goes through `Plan::with_sets` and the validator.
#[test]
fn only_scenario_builds_a_plan() {
    let found = violations("src", &["src/scenario"], &["Plan {", "Combination {"]);
    assert!(found.is_empty(), "a plan built or patched outside src/scenario:\n{}", found.join("\n"));
}

/// The files of `scenario/` name each other without a circle (`mod.rs`, the facade, aside):
/// data (`plan`) at the bottom, the key tables over it, the reader, schema and lowering above.
#[test]
fn the_scenario_files_form_no_circle() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/scenario");
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    let module = |path: &Path| {
        let relative = path.strip_prefix(&root).expect("under scenario").to_string_lossy().into_owned();
        relative.split(['/', '.']).next().unwrap_or_default().to_owned()
    };
    let names: std::collections::BTreeSet<String> = files.iter().map(|f| module(f)).collect();
    let mut edges: std::collections::BTreeMap<String, std::collections::BTreeSet<String>> = Default::default();
    for file in &files {
        let from = module(file);
        if from == "mod" || from == "tests" || file.ends_with("tests.rs") {
            continue;
        }
        let text = std::fs::read_to_string(file).expect("readable");
        // Unit tests may reach anywhere.
        let text = text.split("#[cfg(test)]\nmod tests {").next().unwrap_or_default();
        for to in &names {
            let named = ["super::", "super::super::", "crate::scenario::"].iter().any(|p| {
                text.match_indices(&format!("{p}{to}"))
                    .any(|(i, m)| !text[i + m.len()..].starts_with(|c: char| c.is_alphanumeric() || c == '_'))
            });
            if named && *to != from && to != "mod" {
                edges.entry(from.clone()).or_default().insert(to.clone());
            }
        }
    }
    // Depth-first search for a path back to where it started.
    fn back_to(
        edges: &std::collections::BTreeMap<String, std::collections::BTreeSet<String>>,
        start: &str,
        path: &mut Vec<String>,
    ) -> bool {
        let here = path.last().cloned().unwrap_or_default();
        for next in edges.get(&here).into_iter().flatten() {
            if next == start {
                path.push(next.clone());
                return true;
            }
            if !path.contains(next) {
                path.push(next.clone());
                if back_to(edges, start, path) {
                    return true;
                }
                path.pop();
            }
        }
        false
    }
    for start in edges.keys() {
        let mut path = vec![start.clone()];
        assert!(!back_to(&edges, start, &mut path), "a circle in src/scenario: {}", path.join(" → "));
    }
}
