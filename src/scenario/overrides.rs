//! `--set key=value` and `--seed`: command-line edits applied to the tree before validation.
//!
//! Overrides go through the same validation as the file, so `--set batching.batch_size=0` fails
//! exactly like `batch_size = 0` would, only pointing at the argument instead of a file line.

use toml_edit::{InlineTable, Item, Table, TableLike, Value};

use super::error::{Origin, Problem};
use super::reader::AppliedSet;
use super::schema;

/// Command-line changes to a scenario.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Overrides {
    /// `key.path=value`, e.g. `batching.batch_size=64`. The value is read as a TOML value (`64`,
    /// `"10ms"`, `true`, `[1, 2]`, `{ every = 7 }`) or, if it is not one, as a bare string (`10ms`).
    pub sets: Vec<String>,
    /// Replaces the master seed.
    pub seed: Option<u64>,
}

impl Overrides {
    /// Adds one `key=value` assignment, as `--set` takes it; later ones win.
    pub fn set(mut self, assignment: impl Into<String>) -> Self {
        self.sets.push(assignment.into());
        self
    }
}

/// Applies the overrides in order (later wins) and returns where each landed.
/// `arg` names the source of a set in messages: `--set` on the command line, `builder:` in Rust.
pub(crate) fn apply(
    root: &mut Table,
    overrides: &Overrides,
    arg: &str,
    problems: &mut Vec<Problem>,
) -> Vec<AppliedSet> {
    let mut applied = Vec::new();
    for assignment in &overrides.sets {
        let label = format!("{arg} {assignment}");
        let mut fail = |message: String, help: Option<String>| {
            problems.push(Problem { message, origin: Origin::Override { arg: label.clone() }, help });
        };
        let Some((key, text)) = assignment.split_once('=') else {
            fail(format!("`{assignment}`: expected `key=value`"), Some("e.g. batching.batch_size=64".to_owned()));
            continue;
        };
        let path: Vec<&str> = key.trim().split('.').map(str::trim).collect();
        if path.iter().any(|p| p.is_empty()) {
            fail(format!("`{}` is not a key path", key.trim()), None);
            continue;
        }
        if let Err((message, help)) = schema::check_path(&path) {
            fail(message, help);
            continue;
        }
        let value = text.trim().parse::<Value>().unwrap_or_else(|_| Value::from(text.trim()));
        match insert(root, &path, value) {
            Ok(()) => applied.push(AppliedSet { path: path.join("."), label }),
            Err(message) => fail(message, None),
        }
    }
    if let Some(seed) = overrides.seed {
        let label = format!("--seed {seed}");
        match i64::try_from(seed) {
            Ok(seed) => {
                root.insert("seed", Item::Value(Value::from(seed)));
                applied.push(AppliedSet { path: "seed".to_owned(), label });
            }
            Err(_) => problems.push(Problem {
                message: format!("`--seed` must be at most {}, found {seed}", i64::MAX),
                origin: Origin::Override { arg: label },
                help: None,
            }),
        }
    }
    applied
}

pub(super) fn insert(root: &mut Table, path: &[&str], value: Value) -> Result<(), String> {
    let (last, parents) = path.split_last().ok_or_else(|| "empty key".to_owned())?;
    let mut table: &mut dyn TableLike = root;
    for (i, key) in parents.iter().enumerate() {
        if table.get(key).is_none_or(Item::is_none) {
            table.insert(key, Item::Value(Value::InlineTable(InlineTable::new())));
        }
        match table.get_mut(key).and_then(Item::as_table_like_mut) {
            Some(next) => table = next,
            None => {
                let here = path[..=i].join(".");
                return Err(format!("cannot set `{}`: `{here}` is a value, not a table", path.join(".")));
            }
        }
    }
    table.insert(last, Item::Value(value));
    Ok(())
}

/// Takes the key or section at `path` (dotted) out of the tree; one the tree does not have is left
/// as it is (nothing to take out), one no scenario can have is a problem (`arg` names its origin).
pub(super) fn remove(root: &mut Table, path: &str, arg: &str, problems: &mut Vec<Problem>) {
    let dotted = path;
    let path: Vec<&str> = path.split('.').collect();
    // `[matrix]` is taken out of the tree before the schema is asked about the rest.
    if path != ["matrix"]
        && let Err((message, help)) = schema::check_path(&path)
    {
        let origin = Origin::Override { arg: format!("{arg} -{dotted}") };
        problems.push(Problem { message, origin, help });
        return;
    }
    let Some((last, parents)) = path.split_last() else { return };
    let mut table: &mut dyn TableLike = root;
    for key in parents {
        match table.get_mut(key).and_then(Item::as_table_like_mut) {
            Some(next) => table = next,
            None => return,
        }
    }
    table.remove(last);
}
