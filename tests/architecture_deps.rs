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

/// `text` with every comment and string or char literal blanked (newlines kept), so that what is
/// left is code: a doc comment or a message that names a module is no dependency.
fn code_only(text: &str) -> String {
    let b: Vec<char> = text.chars().collect();
    let mut out: Vec<char> = b.clone();
    let blank = |out: &mut Vec<char>, from: usize, to: usize| {
        for c in &mut out[from..to.min(b.len())] {
            if *c != '\n' {
                *c = ' ';
            }
        }
    };
    let mut i = 0;
    while i < b.len() {
        let next = b.get(i + 1).copied();
        if b[i] == '/' && next == Some('/') {
            let end = (i..b.len()).find(|&j| b[j] == '\n').unwrap_or(b.len());
            blank(&mut out, i, end);
            i = end;
        } else if b[i] == '/' && next == Some('*') {
            let (mut depth, mut j) = (1, i + 2);
            while j < b.len() && depth > 0 {
                if b[j] == '/' && b.get(j + 1) == Some(&'*') {
                    depth += 1;
                    j += 1;
                } else if b[j] == '*' && b.get(j + 1) == Some(&'/') {
                    depth -= 1;
                    j += 1;
                }
                j += 1;
            }
            blank(&mut out, i, j);
            i = j;
        } else if b[i] == 'r' && (next == Some('"') || next == Some('#')) && (i == 0 || !is_ident(b[i - 1])) {
            // A raw string: r"…", r#"…"#, ….
            let hashes = b[i + 1..].iter().take_while(|&&c| c == '#').count();
            if b.get(i + 1 + hashes) != Some(&'"') {
                i += 1;
                continue;
            }
            let close: String = std::iter::once('"').chain(std::iter::repeat_n('#', hashes)).collect();
            let rest: String = b[i + 2 + hashes..].iter().collect();
            let end = i
                + 2
                + hashes
                + rest.find(&close).map_or(rest.chars().count(), |k| rest[..k].chars().count() + close.len());
            blank(&mut out, i, end);
            i = end;
        } else if b[i] == '"' {
            let mut j = i + 1;
            while j < b.len() && b[j] != '"' {
                j += if b[j] == '\\' { 2 } else { 1 };
            }
            blank(&mut out, i, j + 1);
            i = j + 1;
        } else if b[i] == '\'' {
            // A char literal ('a', '\n', '\u{1F600}'); a lifetime ('a) has no closing quote.
            let end = if next == Some('\\') {
                (i + 2..b.len()).find(|&j| b[j] == '\'').map(|j| j + 1)
            } else if b.get(i + 2) == Some(&'\'') {
                Some(i + 3)
            } else {
                None
            };
            match end {
                Some(end) => {
                    blank(&mut out, i, end);
                    i = end;
                }
                None => i += 1,
            }
        } else {
            i += 1;
        }
    }
    out.into_iter().collect()
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// The module path of a source file: `src/engine/sim/kv.rs` is `crate::engine::sim::kv`,
/// `src/engine/sim/mod.rs` is `crate::engine::sim`.
fn module_of(relative: &str) -> Vec<String> {
    let mut parts: Vec<String> =
        relative.trim_start_matches("src/").trim_end_matches(".rs").split('/').map(String::from).collect();
    if matches!(parts.last().map(String::as_str), Some("mod" | "lib" | "main")) {
        parts.pop();
    }
    std::iter::once("crate".to_owned()).chain(parts).collect()
}

/// Expands one `use` tree (`crate::{a::{b, c}, d as e}`) into its paths.
fn expand_use(tree: &str) -> Vec<String> {
    // `x as y` is `x`: drop each `as` and its name, keeping what follows the name (`,` or `}`).
    let mut words = tree.split_whitespace();
    let mut tree = String::new();
    while let Some(word) = words.next() {
        if word == "as" {
            let renamed = words.next().unwrap_or_default();
            tree.push_str(renamed.trim_start_matches(is_ident));
        } else {
            tree.push_str(word);
        }
    }
    let Some(open) = tree.find('{') else {
        return vec![tree.trim_end_matches("::self").to_owned()];
    };
    let prefix = &tree[..open];
    let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
    let (mut parts, mut depth, mut from) = (Vec::new(), 0, 0);
    for (k, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&inner[from..k]);
                from = k + 1;
            }
            _ => {}
        }
    }
    parts.push(&inner[from..]);
    parts.into_iter().filter(|p| !p.is_empty()).flat_map(|p| expand_use(&format!("{prefix}{p}"))).collect()
}

/// Every path a source file names in code, absolute: its `use` trees expanded, and every
/// `crate::…`, `super::…` and `self::…` path in its code, `super` and `self` resolved from the
/// file's place. Comments and strings are not read. Each with its line.
fn named_paths(relative: &str, text: &str) -> Vec<(usize, String)> {
    let code = code_only(text);
    let module = module_of(relative);
    let resolve = |path: &str| -> Option<String> {
        let segments: Vec<&str> = path.split("::").collect();
        let mut base = module.clone();
        let mut rest = &segments[..];
        match rest.first() {
            Some(&"crate") => {
                base = vec!["crate".to_owned()];
                rest = &rest[1..];
            }
            Some(&"self") => rest = &rest[1..],
            Some(&"super") => {
                while rest.first() == Some(&"super") {
                    base.pop();
                    rest = &rest[1..];
                }
            }
            _ => return None,
        }
        Some(base.into_iter().chain(rest.iter().map(|s| s.to_string())).collect::<Vec<_>>().join("::"))
    };
    let line_of = |offset: usize| code[..offset].matches('\n').count() + 1;
    let mut found = Vec::new();
    let mut in_use = Vec::new();
    let bytes = code.as_bytes();
    for (at, _) in code.match_indices("use ") {
        if at > 0 && is_ident(bytes[at - 1] as char) {
            continue;
        }
        let end = code[at..].find(';').map_or(code.len(), |k| at + k);
        in_use.push(at..end);
        for path in expand_use(&code[at + 4..end]) {
            if let Some(path) = resolve(&path) {
                found.push((line_of(at), path));
            }
        }
    }
    for head in ["crate::", "super::", "self::"] {
        for (at, _) in code.match_indices(head) {
            if (at > 0 && (is_ident(bytes[at - 1] as char) || bytes[at - 1] == b':'))
                || in_use.iter().any(|r| r.contains(&at))
            {
                continue;
            }
            let len = code[at..].find(|c: char| !(is_ident(c) || c == ':')).unwrap_or(code.len() - at);
            if let Some(path) = resolve(code[at..at + len].trim_end_matches(':')) {
                found.push((line_of(at), path));
            }
        }
    }
    found
}

/// Whether `path` is `module` or inside it (`crate::run` names `crate::run::X`, not `crate::runner`).
fn inside(path: &str, module: &str) -> bool {
    path == module || path.strip_prefix(module).is_some_and(|rest| rest.starts_with("::"))
}

/// Every path named in code under `layer` (but not under `except`) that is inside one of `forbidden`.
fn violations(layer: &str, except: &[&str], forbidden: &[&str]) -> Vec<String> {
    let mut found = Vec::new();
    for (relative, text) in sources(layer, except) {
        for (line, path) in named_paths(&relative, &text) {
            if forbidden.iter().any(|f| inside(&path, f)) {
                found.push(format!("{relative}:{line}: {path}"));
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
        // The process boundary deals in pids, fds and files: it names nothing of the engines,
        // plans, runs or reports that use it (only `time` and `sync`, which sit beside it).
        (
            "src/sys",
            &[],
            &[
                "crate::engine",
                "crate::loadgen",
                "crate::batcher",
                "crate::metrics",
                "crate::scenario",
                "crate::run",
                "crate::report",
                "crate::serve",
                "crate::compare",
                "crate::cli",
                WORKFLOWS[0],
                WORKFLOWS[1],
            ],
        ),
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
    let found = code_lines("src", &["src/scenario"], &["Plan {", "Combination {"]);
    assert!(found.is_empty(), "a plan built or patched outside src/scenario:\n{}", found.join("\n"));
}

/// Every code line (comments and strings aside) under `layer`, but not under `except`, that
/// contains one of `needles`.
fn code_lines(layer: &str, except: &[&str], needles: &[&str]) -> Vec<String> {
    matching_code_lines(layer, except, |line| needles.iter().any(|f| line.contains(f)))
}

/// Every line of code, in a file of `src/` outside `allowed` (a path prefix), that names `word`
/// as an identifier (comments and strings do not count), as `file:line: code`.
fn code_naming(word: &str, allowed: &str) -> Vec<String> {
    matching_code_lines("src", &[allowed], |line| line.split(|c: char| !is_ident(c)).any(|w| w == word))
}

/// Every code line (comments and strings blanked) under `layer`, but not under `except`, for
/// which `matches` holds, as `file:line: code`.
fn matching_code_lines(layer: &str, except: &[&str], matches: impl Fn(&str) -> bool) -> Vec<String> {
    let mut found = Vec::new();
    for (relative, text) in sources(layer, except) {
        for (n, line) in code_only(&text).lines().enumerate() {
            if matches(line) {
                found.push(format!("{relative}:{}: {}", n + 1, line.trim()));
            }
        }
    }
    found
}

/// The Rust files under `layer` (relative to the crate root), but not under `except`, in path
/// order: each one's path from the root and its text.
fn sources(layer: &str, except: &[&str]) -> Vec<(String, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    rust_files(&root.join(layer), &mut files);
    files.sort();
    files
        .into_iter()
        .map(|file| (file.strip_prefix(root).expect("under the root").to_string_lossy().into_owned(), file))
        .filter(|(relative, _)| !except.iter().any(|e| relative.starts_with(e)))
        .map(|(relative, file)| (relative, std::fs::read_to_string(&file).expect("readable")))
        .collect()
}

/// Invariant 9: only `engine/python` touches Python. No other file names pyo3.
#[test]
fn only_engine_python_names_pyo3() {
    let found = code_naming("pyo3", "src/engine/python");
    assert!(found.is_empty(), "Python touched outside src/engine/python:\n{}", found.join("\n"));
}

/// Only `scenario/` reads and writes TOML: no file outside `src/scenario` names the `toml_edit`
/// crate in code. A workflow changes a plan with typed `Set`s (`keys::BATCH_SIZE.to(64)`).
#[test]
fn only_scenario_names_toml_edit() {
    let found = code_naming("toml_edit", "src/scenario/");
    assert!(found.is_empty(), "toml_edit named outside src/scenario:\n{}", found.join("\n"));
}

/// Invariant 1: the sans-IO cores read no clock and do no IO; their drivers hand them `now`.
#[test]
fn the_cores_read_no_clock_and_do_no_io() {
    const CORES: [&str; 23] = [
        "src/batcher/core/mod.rs",
        "src/batcher/core/config.rs",
        "src/batcher/core/failure.rs",
        "src/batcher/core/ids.rs",
        "src/batcher/core/matching.rs",
        "src/batcher/core/stall.rs",
        "src/batcher/core/vocab.rs",
        "src/run/step/mod.rs",
        "src/run/step/admission.rs",
        "src/run/step/display.rs",
        "src/run/step/events.rs",
        "src/run/step/finish.rs",
        "src/run/step/phases.rs",
        "src/run/step/stop.rs",
        "src/run/step/sessions.rs",
        "src/loadgen/scheduler.rs",
        "src/loadgen/sessions.rs",
        "src/metrics/sessions.rs",
        "src/serve/core.rs",
        "src/metrics/mapper.rs",
        "src/metrics/aggregate.rs",
        "src/engine/openai/sse.rs",
        "src/engine/openai/route.rs",
    ];
    const CLOCKS_AND_IO: [&str; 9] = [
        "Instant::now",
        "SystemTime",
        "MonotonicClock::read",
        "std::fs",
        "std::net",
        "std::io::stdin",
        "tokio::",
        "thread::sleep",
        "std::process",
    ];
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut found = Vec::new();
    for core in CORES {
        let text = std::fs::read_to_string(root.join(core)).unwrap_or_else(|e| panic!("{core}: {e}"));
        // Unit tests may use a clock; the core may not.
        let text = text.split("#[cfg(test)]").next().unwrap_or_default();
        for (n, line) in code_only(text).lines().enumerate() {
            if CLOCKS_AND_IO.iter().any(|f| line.contains(f)) {
                found.push(format!("{core}:{}: {}", n + 1, line.trim()));
            }
        }
    }
    assert!(found.is_empty(), "a sans-IO core reads a clock or does IO:\n{}", found.join("\n"));
}

/// The reader above reads code, not text: doc comments and strings never count, grouped and
/// renamed imports and `super::` paths do.
#[test]
fn the_import_reader_reads_code_not_text() {
    let text = r##"//! Knows nothing of `crate::scenario`.
/// Unlike crate::run::X, which is a doc comment.
use crate::{engine::{Engine, sim as s}, report::Report as R};
use super::super::metrics::mapper;
const HELP: &str = "see crate::tune::search";
const RAW: &str = r#"crate::calibrate"#;
/* a block comment naming crate::compare */
fn f<'a>(x: &'a str) -> char {
    let _ = crate::loadgen::Workload::request;
    let _ = self::helper;
    '"'
}
"##;
    let paths: Vec<String> = named_paths("src/engine/sim/kv.rs", text).into_iter().map(|(_, p)| p).collect();
    assert_eq!(
        paths,
        [
            "crate::engine::Engine",
            "crate::engine::sim",
            "crate::report::Report",
            "crate::engine::metrics::mapper",
            "crate::loadgen::Workload::request",
            "crate::engine::sim::kv::helper",
        ]
    );
    assert!(inside("crate::run::X", "crate::run") && !inside("crate::runner", "crate::run"));
    assert_eq!(module_of("src/engine/mod.rs"), ["crate", "engine"]);
}

/// The files of `scenario/` name each other without a circle (`mod.rs`, the facade, aside):
/// data (`plan`) at the bottom, the key tables over it, the reader, schema and lowering above.
#[test]
fn the_scenario_files_form_no_circle() {
    assert_no_circle("scenario");
}

/// The files of `loadgen/` name each other without a circle: the error and the file's data
/// (`file`, `error`) at the bottom, the line parser (`jsonl`) and the file reader (`dataset`)
/// over them, the workload above.
#[test]
fn the_loadgen_files_form_no_circle() {
    assert_no_circle("loadgen");
}

/// Panics with the circle when the files of `src/<layer>/` (its `mod.rs`, the facade, and tests
/// aside) name each other in one.
fn assert_no_circle(layer: &str) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src").join(layer);
    let prefix = format!("crate::{layer}::");
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    let module = |path: &Path| {
        let relative = path.strip_prefix(&root).expect("under the layer").to_string_lossy().into_owned();
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
        let relative = file.strip_prefix(Path::new(env!("CARGO_MANIFEST_DIR"))).expect("under the root");
        for (_, path) in named_paths(&relative.to_string_lossy(), text) {
            let Some(to) = path.strip_prefix(prefix.as_str()).map(|rest| rest.split("::").next().unwrap_or_default())
            else {
                continue;
            };
            if names.contains(to) && to != from && to != "mod" {
                edges.entry(from.clone()).or_default().insert(to.to_owned());
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
        assert!(!back_to(&edges, start, &mut path), "a circle in src/{layer}: {}", path.join(" → "));
    }
}

/// The vLLM test files (`tests/vllm_*.rs`, `tests/serve_vllm.rs`) and every other test that needs
/// the venv (it includes `common/python_env.rs`: `python_engine`, `ray_run`) are built with
/// `--features vllm` only (a whole-file `#![cfg(feature = "vllm")]`, or around the venv's reader), so `just test` needs no Python, and each is
/// run by `just test-vllm`; every file that recipe names exists. A vLLM test file without the gate
/// ran in `just test` and failed there ("built without Python engines", 2026-12-07).
#[test]
fn every_vllm_test_file_is_gated_and_run_by_test_vllm() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let justfile = std::fs::read_to_string(root.join("justfile")).expect("justfile");
    let recipe = justfile
        .split("\ntest-vllm:")
        .nth(1)
        .and_then(|rest| rest.lines().find(|l| l.contains("cargo test")))
        .expect("the justfile's test-vllm recipe runs cargo test");
    let named: Vec<&str> = recipe.split("--test ").skip(1).filter_map(|s| s.split_whitespace().next()).collect();
    for name in &named {
        assert!(
            root.join("tests").join(format!("{name}.rs")).is_file(),
            "test-vllm names tests/{name}.rs, which is missing"
        );
    }
    let mut files: Vec<_> = std::fs::read_dir(root.join("tests"))
        .expect("tests/")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter_map(|f| f.strip_suffix(".rs").map(str::to_owned))
        .filter(|stem| {
            // A vLLM test by its name, or any test that needs the venv (Ray's, a Python engine's).
            stem.starts_with("vllm_")
                || stem == "serve_vllm"
                || std::fs::read_to_string(root.join("tests").join(format!("{stem}.rs")))
                    .is_ok_and(|text| text.contains("#[path = \"common/python_env.rs\"]"))
        })
        .collect();
    files.sort();
    assert!(files.len() >= 10, "{files:?}");
    for stem in &files {
        let text = std::fs::read_to_string(root.join("tests").join(format!("{stem}.rs"))).expect("test file");
        // The whole file, or (python_engine: its docs check needs no Python) the venv's reader.
        let gated = text.contains("\n#![cfg(feature = \"vllm\")]\n")
            || text.contains("#[cfg(feature = \"vllm\")]\n#[path = \"common/python_env.rs\"]");
        assert!(gated, "tests/{stem}.rs has no #![cfg(feature = \"vllm\")]");
        assert!(named.contains(&stem.as_str()), "tests/{stem}.rs is not in the justfile's test-vllm recipe");
    }
}
