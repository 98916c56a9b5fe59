//! ARCHITECTURE.md stays a true map: every path it names exists, every test it names is a
//! function in the file it names, each invariant names a test, and the page stays short.

use std::path::Path;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn document() -> String {
    std::fs::read_to_string(root().join("ARCHITECTURE.md")).expect("ARCHITECTURE.md")
}

/// Every `code span` of the text, with its line.
fn spans(text: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    let mut in_block = false;
    for (n, line) in text.lines().enumerate() {
        if line.starts_with("```") {
            in_block = !in_block;
            continue;
        }
        if in_block {
            continue;
        }
        for (k, piece) in line.split('`').enumerate() {
            if k % 2 == 1 {
                found.push((n + 1, piece.to_owned()));
            }
        }
    }
    found
}

/// A test named as `path/to/file.rs::function`: the file and the function's name.
fn test_name(span: &str) -> Option<(&str, &str)> {
    let (file, function) = span.split_once(".rs::")?;
    let function = function.trim_end_matches("()");
    function.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_').then_some(())?;
    Some((&span[..file.len() + 3], function))
}

/// A path in the repository: a span with a `/` and no space (`src/run/`, `docs/http.md`, or
/// `run/` for `src/run/`).
fn repo_path(span: &str) -> Option<&str> {
    (span.contains('/') && !span.contains(' ') && !span.contains("::") && !span.starts_with("http"))
        .then(|| span.trim_end_matches('/'))
}

#[test]
fn every_path_and_test_the_map_names_exists() {
    let text = document();
    let mut missing = Vec::new();
    let (mut paths, mut tests) = (0, 0);
    for (line, span) in spans(&text) {
        if let Some((file, function)) = test_name(&span) {
            tests += 1;
            let source = std::fs::read_to_string(root().join(file)).unwrap_or_default();
            let defined = source
                .match_indices(&format!("fn {function}"))
                .any(|(at, m)| !source[at + m.len()..].starts_with(|c: char| c.is_alphanumeric() || c == '_'));
            if !defined {
                missing.push(format!("ARCHITECTURE.md:{line}: no `fn {function}` in {file}"));
            }
        } else if let Some(path) = repo_path(&span) {
            paths += 1;
            // A layer may be named short: `run/` is `src/run/`.
            if !root().join(path).exists() && !root().join("src").join(path).exists() {
                missing.push(format!("ARCHITECTURE.md:{line}: no such path: {path}"));
            }
        }
    }
    assert!(paths >= 20 && tests >= 17, "the map names {paths} paths and {tests} tests: is the reader broken?");
    assert!(missing.is_empty(), "ARCHITECTURE.md names what is not there:\n{}", missing.join("\n"));
}

/// Every invariant names at least one test, as `file.rs::function` or a test file.
#[test]
fn each_invariant_names_its_test() {
    let text = document();
    let section = text.split("## Invariants").nth(1).expect("an Invariants section");
    let section = section.split("\n## ").next().unwrap_or_default();
    let mut invariants: Vec<(String, String)> = Vec::new();
    for line in section.lines() {
        let numbered = line.split_once(". ").filter(|(n, _)| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()));
        match numbered {
            Some((n, rest)) => invariants.push((n.to_owned(), rest.to_owned())),
            None => {
                if let Some((_, body)) = invariants.last_mut() {
                    body.push('\n');
                    body.push_str(line);
                }
            }
        }
    }
    assert!(invariants.len() >= 17, "found {} invariants", invariants.len());
    let untested: Vec<&str> = invariants
        .iter()
        .filter(|(_, body)| {
            !spans(body).iter().any(|(_, s)| test_name(s).is_some() || (s.starts_with("tests/") && s.ends_with(".rs")))
        })
        .map(|(n, _)| n.as_str())
        .collect();
    assert!(untested.is_empty(), "invariants that name no test: {untested:?}");
}

/// A map, not a manual: under 12 kB, and no code-map row longer than three lines of text.
#[test]
fn the_map_stays_short() {
    let text = document();
    assert!(text.len() < 12 * 1024, "ARCHITECTURE.md is {} bytes; the detail belongs in module docs", text.len());
    let map = text.split("## Code map").nth(1).expect("a code map").split("\n## ").next().unwrap_or_default();
    let long: Vec<&str> = map.lines().filter(|l| l.starts_with("| `") && l.len() > 300).collect();
    assert!(long.is_empty(), "code-map rows over 300 characters:\n{}", long.join("\n"));
}

#[test]
fn the_readers_tell_tests_and_paths() {
    assert_eq!(test_name("src/sync.rs::descending_order_panics"), Some(("src/sync.rs", "descending_order_panics")));
    assert_eq!(test_name("run::driver::run_steps"), None);
    assert_eq!(repo_path("src/run/"), Some("src/run"));
    assert_eq!(repo_path("run::run_with"), None);
    assert_eq!(spans("a `x` b `y`\n```text\n`z`\n```\n`w`"), [(1, "x".into()), (1, "y".into()), (5, "w".into())]);
}
