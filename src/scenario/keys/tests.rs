//! docs/scenarios.md documents exactly the keys of each table: their names in table order, their
//! defaults, and their doc lines (the notes column, where the docs' table has one).

use super::super::plan::{OutputPlan, Slo, StopPlan};
use super::*;
use crate::batcher::BatchConfig;
use crate::engine::python::PythonConfig;
use toml_edit::Value;

/// The text under the heading that starts with `heading`, up to the next heading.
fn docs_section(heading: &str) -> String {
    let docs = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/scenarios.md")).expect("docs");
    let mut lines = docs.lines().skip_while(|l| !l.starts_with(heading));
    assert!(lines.next().is_some(), "docs/scenarios.md has no heading `{heading}`");
    lines.take_while(|l| !l.starts_with('#')).collect::<Vec<_>>().join("\n")
}

/// The first table of `section`: its header and rows, cells trimmed.
fn first_table(section: &str) -> (Vec<String>, Vec<Vec<String>>) {
    let mut rows = section
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .map(|l| l.trim().trim_matches('|').split(" | ").map(|c| c.trim().to_owned()).collect::<Vec<_>>());
    let header = rows.next().expect("a table");
    (header, rows.skip(1).collect())
}

/// `` `name` `` or `` `[engine.vllm.engine_args]` `` as the key's name.
fn key_name(cell: &str) -> String {
    let name = cell.trim_matches('`').trim_start_matches('[').trim_end_matches(']');
    name.rsplit('.').next().unwrap_or(name).to_owned()
}

/// A default as the docs write it.
fn default_text<S>(key: &Key<S>, default: &S) -> String {
    match key.default {
        KeyDefault::Text(text) => text.to_owned(),
        KeyDefault::Required(_) => "**required**".to_owned(),
        KeyDefault::Value => match (key.print)(default) {
            None => "none".to_owned(),
            Some(Item::Value(Value::String(s))) => format!("`\"{}\"`", s.value()),
            Some(Item::Value(v)) => v.decorated("", "").to_string(),
            Some(other) => panic!("{}: no docs form for {other}", key.name),
        },
    }
}

/// One expected docs row: name, default, doc line.
type Row = (String, String, String);

fn rows<S>(keys: &[Key<S>], default: &S) -> Vec<Row> {
    keys.iter().map(|k| (k.name.to_owned(), default_text(k, default), k.doc.to_owned())).collect()
}

/// The rows of a tagged section: the tag, then every key in order of first appearance, with the
/// default of the first variant that has it.
fn variant_rows<S>(tag: &Key<Tag>, default_tag: &'static str, variants: &[Variant<S>]) -> Vec<Row> {
    let mut out = rows(std::slice::from_ref(tag), &Tag(default_tag));
    for v in variants {
        for row in rows(v.keys, &(v.default)(0)) {
            if !out.iter().any(|r| r.0 == row.0) {
                out.push(row);
            }
        }
    }
    out
}

/// The docs' table under `heading` has exactly `expected`: names in order, defaults (a required key's
/// cell starts with **required**), and doc lines when the table has a notes column.
fn check_docs(heading: &str, expected: Vec<Row>) {
    let (header, table) = first_table(&docs_section(heading));
    let default_column = header.iter().position(|h| h == "default").expect("a default column");
    let notes_column = (header.len() > 3).then_some(header.len() - 1);
    let found: Vec<Row> = table
        .iter()
        .zip(expected.iter().map(Some).chain(std::iter::repeat(None)))
        .map(|(cells, want)| {
            let mut default = cells[default_column].clone();
            if want.is_some_and(|w| w.1 == "**required**") && default.starts_with("**required**") {
                default = "**required**".to_owned();
            }
            let doc = match notes_column {
                Some(i) => cells[i].clone(),
                None => want.map(|w| w.2.clone()).unwrap_or_default(),
            };
            (key_name(&cells[0]), default, doc)
        })
        .collect();
    assert_eq!(found, expected, "docs/scenarios.md, {heading}");
}

#[test]
fn docs_top_level() {
    check_docs("## Top level", rows(HEAD_KEYS, &Head::default()));
}

#[test]
fn docs_engine() {
    check_docs("## `[engine]`", rows(ENGINE_KEYS, &Tag("sim")));
}

#[test]
fn docs_engine_sim() {
    let sim = sim_default(0);
    let mut expected = rows(SIM_KEYS, &sim);
    expected.extend(rows(COST_KEYS, &sim.cost));
    expected.extend(rows(SCHED_KEYS, &sim.scheduler));
    check_docs("### `[engine.sim]`", expected);
}

#[test]
fn docs_engine_vllm() {
    check_docs("### `[engine.vllm]`", rows(VLLM_KEYS, &vllm_default(0)));
}

#[test]
fn docs_engine_python() {
    check_docs("### `[engine.python]`", rows(PYTHON_KEYS, &PythonConfig::new("", "")));
}

#[test]
fn docs_engine_openai() {
    check_docs("### `[engine.openai]`", rows(OPENAI_KEYS, &openai_default()));
}

#[test]
fn docs_batching() {
    check_docs("## `[batching]`", rows(BATCHING_KEYS, &Batching::of(&BatchConfig::default())));
}

#[test]
fn docs_workload() {
    check_docs("## `[workload]`", variant_rows(&WORKLOAD_TAG, "synthetic", WORKLOAD_VARIANTS));
}

#[test]
fn docs_workload_images() {
    check_docs("### `[workload.images]`", rows(IMAGE_KEYS, &crate::loadgen::images::ImageSpec::default()));
}

#[test]
fn docs_workload_sessions() {
    check_docs("### `[workload.sessions]`", rows(SESSION_KEYS, &crate::loadgen::sessions::SessionSpec::default()));
}

#[test]
fn docs_stop() {
    check_docs("## `[stop]`", rows(STOP_KEYS, &StopPlan::default()));
}

#[test]
fn docs_warmup_and_cooldown() {
    check_docs("## `[warmup]` and `[cooldown]`", rows(PHASE_KEYS, &Phase::default()));
}

#[test]
fn docs_slo() {
    check_docs("## `[slo]`", rows(SLO_KEYS, &Slo::default()));
}

/// The `[faults]` table: names, defaults and effects like every section, and the type column.
#[test]
fn docs_faults() {
    let faults = crate::engine::faults::Faults::default();
    check_docs("## `[faults]`", rows(FAULT_KEYS, &faults));
    let (header, table) = first_table(&docs_section("## `[faults]`"));
    let type_column = header.iter().position(|h| h == "type").expect("a type column");
    let types: Vec<&str> = table.iter().map(|cells| cells[type_column].as_str()).collect();
    let expected: Vec<&str> = FAULT_KEYS
        .iter()
        .map(|k| match (k.sub, (k.print)(&faults)) {
            (Sub::Fixed(TRIGGER_KEYS), _) => "trigger",
            (Sub::Fixed(PROCESS_FAULT_KEYS), _) => "process fault",
            (_, Some(Item::Value(Value::Float(_)))) => "number >= 1",
            (_, Some(Item::Value(Value::String(_)))) => "duration",
            (_, Some(Item::Value(Value::Boolean(_)))) => "boolean",
            (_, other) => panic!("{}: no docs type for {other:?}", k.name),
        })
        .collect();
    assert_eq!(types, expected, "docs/scenarios.md, the [faults] types");
}

/// Each `[faults]` row reads and prints its own field, and no other.
#[test]
fn every_fault_key_sets_its_field_only() {
    use crate::engine::faults::{FaultTrigger, Faults, ProcessFault};
    let base = "[engine]\nkind = \"vllm\"\n[engine.vllm]\nmodel = \"/m\"\nin_process = false\n[faults]\n";
    let default = Faults::default();
    for key in FAULT_KEYS {
        let text = match key.sub {
            Sub::Fixed(TRIGGER_KEYS) => "{ every = 2 }",
            Sub::Fixed(PROCESS_FAULT_KEYS) => "{ after_batches = 3 }",
            _ => match (key.print)(&default) {
                Some(Item::Value(Value::Float(_))) => "11.5",
                Some(Item::Value(Value::String(_))) => "\"2s\"",
                Some(Item::Value(Value::Boolean(_))) => "true",
                other => panic!("{}: {other:?}", key.name),
            },
        };
        let source = format!("{base}{} = {text}\n", key.name);
        let plan = crate::scenario::parse_str(&source, "f.toml", std::path::Path::new("/"), &Default::default())
            .unwrap_or_else(|e| panic!("{}: {e}", key.name));
        let faults = plan.faults();
        for other in FAULT_KEYS {
            let (a, b) = ((other.print)(faults).map(|i| i.to_string()), (other.print)(&default).map(|i| i.to_string()));
            assert_eq!(a != b, other.name == key.name, "setting {} changed {}", key.name, other.name);
        }
        assert_eq!(faults.has_process_faults(), is_process_fault(key), "{}", key.name);
    }
    let every =
        Faults { slow: FaultTrigger::every(2), kill_worker: Some(ProcessFault { after_batches: 3 }), ..default };
    assert!(every.has_process_faults());
}

#[test]
fn docs_output() {
    check_docs("## `[output]`", rows(OUTPUT_KEYS, &OutputPlan::default()));
}

/// The profile table has a row per kind: its keys in order, **required** where the key is, and a
/// default value where the kind has one.
#[test]
fn docs_profile() {
    let (_, table) = first_table(&docs_section("## `[profile]`"));
    let kinds: Vec<String> = table.iter().map(|cells| cells[0].split('`').nth(1).unwrap_or("").to_owned()).collect();
    let expected: Vec<String> = PROFILE_VARIANTS.iter().map(|v| format!("\"{}\"", v.name)).collect();
    assert_eq!(kinds, expected, "the kinds, in table order");
    for (cells, variant) in table.iter().zip(PROFILE_VARIANTS) {
        // `name` (notes), `name` (notes): the odd pieces between backticks are the names.
        let pieces: Vec<&str> = cells[1].split('`').collect();
        let names: Vec<&str> = pieces.iter().skip(1).step_by(2).copied().collect();
        assert_eq!(names, names_of(variant.keys), "keys of {}", variant.name);
        let default = (variant.default)(0);
        for (i, key) in variant.keys.iter().enumerate() {
            let notes = pieces.get(2 + 2 * i).copied().unwrap_or("");
            let wanted = match default_text(key, &default) {
                text if key.default == KeyDefault::Value && text == "none" => "optional".to_owned(),
                text if key.default == KeyDefault::Value => format!("default {text}"),
                text => text,
            };
            assert!(notes.contains(&wanted), "{}.{}: `{notes}` does not say {wanted}", variant.name, key.name);
        }
    }
    let default_row = table.iter().position(|cells| cells[0].contains("(default)"));
    let default_kind = PROFILE_VARIANTS.iter().position(|v| v.name == "throughput");
    assert_eq!(default_row, default_kind, "the default kind is marked");
}

fn names_of<S>(keys: &[Key<S>]) -> Vec<&'static str> {
    names(keys).collect()
}

/// A key table names each key once, and the checks above can fail.
#[test]
fn tables_have_unique_names_and_the_check_bites() {
    for table in
        [names_of(VLLM_KEYS), names_of(PYTHON_KEYS), names_of(OPENAI_KEYS), names_of(STOP_KEYS), names_of(FAULT_KEYS)]
    {
        let unique: std::collections::BTreeSet<_> = table.iter().collect();
        assert_eq!(unique.len(), table.len());
    }
    let mut wrong = rows(OUTPUT_KEYS, &OutputPlan::default());
    wrong[1].1 = "true".to_owned();
    let caught = std::panic::catch_unwind(|| check_docs("## `[output]`", wrong));
    assert!(caught.is_err(), "a wrong default must fail the docs check");
}

/// Every key handle names a key the schema knows: a handle cannot drift from its row.
#[test]
fn every_handle_is_a_key() {
    for path in HANDLE_PATHS {
        // `[matrix]` is taken out before the schema is asked (its axes name other keys).
        if *path == MATRIX.path() {
            continue;
        }
        let parts: Vec<&str> = path.split('.').collect();
        assert!(super::super::schema::check_path(&parts).is_ok(), "the handle `{path}` names no key");
    }
    assert!(super::super::schema::check_path(&["batching", "batch_sise"]).is_err(), "the check can fail");
}
