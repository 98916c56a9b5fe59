//! `[matrix]`: lists of values for run-time keys. The run takes their Cartesian product; each
//! combination is lowered like a whole scenario (the file with the combination's values put in),
//! so a combination is held to every rule a file is, and a bad value points at its place in the
//! list. All combinations run in one engine start (`run::run_steps`), so a key that needs a new
//! engine (`[engine]`, `[faults]`) is refused.
//!
//! ```toml
//! [matrix]
//! "batching.batch_size" = [8, 32]
//! "batching.batch_timeout" = ["2ms", "10ms"]
//! ```

use toml_edit::{Item, Table, TableLike, Value};

use super::error::{Origin, Problem};
pub use super::plan::{Axis, Combination, MatrixPlan};
use super::reader::AppliedSet;
use super::schema;

/// The sections whose keys may vary between combinations: everything the batcher and the
/// run loop read per benchmark.
pub const RUN_TIME_SECTIONS: &[&str] = &["batching", "profile", "workload", "warmup", "cooldown", "stop", "slo"];

/// The most combinations one matrix may have.
pub const MAX_COMBINATIONS: usize = 10_000;

/// An axis as read, before lowering: the key, its span, and the values (each with its span).
pub(crate) struct RawAxis {
    pub key: String,
    pub values: Vec<Value>,
}

/// Takes `[matrix]` out of `root` (so lowering never sees it) and checks its keys. A `--set` of an
/// axis key replaces that axis: an array gives the new list, anything else a single value.
pub(crate) fn extract(
    root: &mut Table,
    sets: &[AppliedSet],
    source: &str,
    file: &str,
    problems: &mut Vec<Problem>,
) -> Vec<RawAxis> {
    let Some(item) = root.remove("matrix") else { return Vec::new() };
    let at = |span: Option<std::ops::Range<usize>>| match span {
        Some(span) => Origin::in_source(file, source, span),
        None => Origin::File { file: file.to_owned() },
    };
    let Some(table) = item.as_table_like() else {
        problems.push(Problem {
            message: "`matrix` must be a table of key = [values]".into(),
            origin: at(item.span()),
            help: Some("e.g. [matrix] \"batching.batch_size\" = [8, 32]".into()),
        });
        return Vec::new();
    };
    let mut flat = Vec::new();
    flatten(table, "", &mut flat);
    let mut axes: Vec<RawAxis> = Vec::new();
    for (key, key_span, item) in flat {
        let origin = at(key_span.clone().or_else(|| item.span()));
        let path: Vec<&str> = key.split('.').collect();
        let mut fail = |message: String, help: Option<String>| {
            problems.push(Problem { message, origin: origin.clone(), help });
        };
        if let Err((message, help)) = schema::check_path(&path) {
            fail(format!("[matrix]: {message}"), help);
            continue;
        }
        if matches!(path[0], "engine" | "faults") {
            fail(
                format!(
                    "[matrix] key `{key}` needs a new engine: every combination runs in one engine start, so \
                     [matrix] takes only run-time keys ({})",
                    RUN_TIME_SECTIONS.join(", ")
                ),
                Some("run the scenario once per engine setting (`--set`) instead".into()),
            );
            continue;
        }
        if !RUN_TIME_SECTIONS.contains(&path[0]) || path.len() < 2 {
            fail(
                format!(
                    "[matrix] key `{key}` is not a run-time key; expected a key of {}",
                    RUN_TIME_SECTIONS.join(", ")
                ),
                None,
            );
            continue;
        }
        let values: Vec<Value> = match item.as_value() {
            Some(Value::Array(a)) if !a.is_empty() => a.iter().cloned().collect(),
            Some(Value::Array(_)) => {
                fail(format!("[matrix] `{key}` is an empty list; expected at least one value"), None);
                continue;
            }
            _ => {
                fail(
                    format!("[matrix] `{key}` must be a list of values"),
                    Some(format!("e.g. \"{key}\" = [a, b]; a single value belongs in its own section")),
                );
                continue;
            }
        };
        if axes.iter().any(|a| a.key == key) {
            fail(format!("[matrix] `{key}` appears twice"), None);
            continue;
        }
        // A repeated value gives two benchmarks one name, which the report, the CSV, the
        // expectations and `compare` (which would pool them as repeats) all key on.
        if let Some(i) = repeated_value(&values) {
            let origin = at(values[i].span().or(key_span));
            problems.push(repeated_value_problem(&key, &values[i], origin));
            continue;
        }
        axes.push(RawAxis { key, values });
    }
    // `--set KEY=...` of an axis: the set value (now in the tree) replaces the axis.
    for axis in &mut axes {
        if !sets.iter().any(|s| s.path == axis.key) {
            continue;
        }
        let path: Vec<&str> = axis.key.split('.').collect();
        if let Some(value) = take(root, &path) {
            axis.values = match value {
                Value::Array(a) if !a.is_empty() => a.iter().cloned().collect(),
                other => vec![other],
            };
            if let Some(i) = repeated_value(&axis.values) {
                let arg = sets.iter().rev().find(|s| s.path == axis.key).map_or_else(String::new, |s| s.label.clone());
                problems.push(repeated_value_problem(&axis.key, &axis.values[i], Origin::Override { arg }));
            }
        }
    }
    if axes.iter().any(|a| repeated_value(&a.values).is_some()) {
        return Vec::new();
    }
    let combinations: usize =
        axes.iter().map(|a| a.values.len()).try_fold(1usize, usize::checked_mul).unwrap_or(usize::MAX);
    if combinations > MAX_COMBINATIONS {
        problems.push(Problem {
            message: format!("[matrix] has {combinations} combinations; the limit is {MAX_COMBINATIONS}"),
            origin: at(item.span()),
            help: Some("use `batchlab tune` to search a large space".into()),
        });
        return Vec::new();
    }
    axes
}

/// The index of the first value whose label an earlier value of the list already has: the two
/// would name their benchmarks alike (`batch_size=8` twice).
fn repeated_value(values: &[Value]) -> Option<usize> {
    let labels: Vec<String> = values.iter().map(label_value).collect();
    (1..labels.len()).find(|&i| labels[..i].contains(&labels[i]))
}

fn repeated_value_problem(key: &str, value: &Value, origin: Origin) -> Problem {
    let short = key.rsplit('.').next().unwrap_or(key);
    let value = label_value(value);
    Problem {
        message: format!(
            "[matrix] `{key}` lists `{value}` twice: two benchmarks would have the same name (`{short}={value}`), \
             and each needs its own"
        ),
        origin,
        help: Some("remove the repeated value; to measure a setting again, run with `--repeat N`".into()),
    }
}

fn flatten<'a>(
    table: &'a dyn TableLike,
    prefix: &str,
    out: &mut Vec<(String, Option<std::ops::Range<usize>>, &'a Item)>,
) {
    for (key, item) in table.iter() {
        let full = if prefix.is_empty() { key.to_owned() } else { format!("{prefix}.{key}") };
        let span = table.key(key).and_then(|k| k.span());
        match item.as_table_like() {
            Some(t) => flatten(t, &full, out),
            None => out.push((full, span, item)),
        }
    }
}

fn take(root: &mut Table, path: &[&str]) -> Option<Value> {
    let (last, parents) = path.split_last()?;
    let mut table: &mut dyn TableLike = root;
    for key in parents {
        table = table.get_mut(key)?.as_table_like_mut()?;
    }
    table.remove(last)?.into_value().ok()
}

/// Every combination of `axes` (the first axis slowest), as the tree with its values put in.
pub(crate) fn combinations(root: &Table, axes: &[RawAxis]) -> Vec<(Table, Vec<(String, Value)>)> {
    let mut out = vec![(root.clone(), Vec::new())];
    for axis in axes {
        let path: Vec<&str> = axis.key.split('.').collect();
        let mut next = Vec::with_capacity(out.len() * axis.values.len());
        for (tree, values) in &out {
            for value in &axis.values {
                let mut tree = tree.clone();
                // The path was checked against the schema; an insert only fails where the file
                // has a value where a table belongs, which lowering reports anyway.
                let _ = super::overrides::insert(&mut tree, &path, value.clone());
                let mut values = values.clone();
                values.push((axis.key.clone(), value.clone()));
                next.push((tree, values));
            }
        }
        out = next;
    }
    out
}

/// A value as a matrix label shows it: strings without quotes, everything else as TOML writes it.
pub(crate) fn label_value(value: &Value) -> String {
    match value {
        Value::String(s) => s.value().clone(),
        other => other.clone().decorated("", "").to_string(),
    }
}

/// The label of a combination: `key=value` joined by `,` (values as `label_value`
/// shows them), each key by its last part unless two axes share it.
pub fn label(values: &[(String, String)]) -> String {
    let short = |k: &str| k.rsplit('.').next().unwrap_or(k).to_owned();
    values
        .iter()
        .map(|(k, v)| {
            let s = short(k);
            let unique = values.iter().filter(|(o, _)| short(o) == s).count() == 1;
            format!("{}={v}", if unique { s } else { k.clone() })
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// The axes as TOML text, for printing the plan back.
pub(crate) fn axes_of(raw: &[RawAxis]) -> Vec<Axis> {
    raw.iter()
        .map(|a| Axis {
            key: a.key.clone(),
            values: a.values.iter().map(|v| v.clone().decorated("", "").to_string()).collect(),
        })
        .collect()
}
