//! Scenario files: TOML in, a validated [`plan::Plan`] out.
//!
//! The pipeline is: read the text, parse it with `toml_edit` (keeping spans), apply the
//! command-line [`Overrides`], then lower the tree into a [`Plan`] while collecting every problem
//! (`lower`). The [`ScenarioBuilder`], [`to_toml`] and every change of a plan
//! ([`Plan::with_sets`], typed [`Set`]s from the key handles in [`keys`]) go through the very same
//! path, so a plan built in Rust or changed by a workflow is held to the same rules as one written
//! by hand. Nothing downstream sees TOML (no file outside this module names `toml_edit`), and
//! nothing outside this module builds a plan. The files a lowering reads (a calibration profile, a
//! chat template, a trace) are kept with the plan's source (`files`), so a change does no IO.
//!
//! Files, from the bottom: `plan` (the validated data: `Plan` and the types it holds), `units`
//! (durations), `error` (problems and their rustc-like report), `reader` (typed, located reads),
//! `keys` (every key's row: name, doc, default, reading and printing; the derived seeds; typed handles), `expect`
//! (metric names), `schema` (the known keys, from `keys`), `arrivals` and `lower` (meaning and
//! defaults), `overrides`, `matrix`, `print` (plan back to TOML, and to JSON), `builder` and
//! `change` (the door to a changed plan). `set` (a change as data, [`Set`]) and `files` (what the
//! lowering read) sit at the bottom. No file names one above it.

mod arrivals;
#[doc(hidden)]
pub mod builder;
mod change;
mod embeddings;
#[doc(hidden)]
pub mod error;
#[doc(hidden)]
pub mod expect;
pub(crate) mod files;
mod images;
pub mod keys;
mod lower;
#[doc(hidden)]
pub mod matrix;
mod overrides;
pub mod plan;
mod print;
mod reader;
mod schema;
mod sessions;
mod set;
#[doc(hidden)]
pub mod units;

#[cfg(test)]
mod tests;

use std::path::Path;

pub use builder::ScenarioBuilder;
pub use error::{Origin, Problem, ScenarioError};
#[doc(hidden)]
pub use keys::{ENGINE_KINDS, derive_seed, seed_stream};
use matrix::label_value;
pub use overrides::Overrides;
pub use plan::Plan;
use plan::{Combination, Layer, MatrixPlan, Source, Written};
#[doc(hidden)]
pub use print::{to_json, to_toml, to_toml_on};
#[doc(hidden)]
pub use schema::key_paths;
pub use set::{KeyPath, Section, Set, SetValue, Text};

/// Entry point for Rust-built scenarios: `Scenario::builder()`.
pub struct Scenario;

impl Scenario {
    /// A builder with every key at its default; `.build()` validates it like a file.
    pub fn builder() -> ScenarioBuilder {
        ScenarioBuilder::new()
    }
}

/// The largest scenario text accepted: 1 MiB. Scenarios are small; bulk data (prompts) belongs in
/// a workload file. Larger text is refused before it is parsed, so the answer comes at once.
#[doc(hidden)]
pub const MAX_SCENARIO_BYTES: usize = 1 << 20;

fn too_large(file_name: &str, bytes: u64) -> ScenarioError {
    let message =
        format!("scenario file `{file_name}` is {bytes} bytes; the limit is {MAX_SCENARIO_BYTES} bytes (1 MiB)");
    let help = "a scenario holds settings only: put prompts in a workload file (`workload.source = \"file\"`)";
    ScenarioError {
        problems: vec![Problem {
            message,
            origin: Origin::File { file: file_name.to_owned() },
            help: Some(help.into()),
        }],
    }
}

/// Reads, parses and validates a scenario file. Relative paths in it resolve against its directory.
/// A file over [`MAX_SCENARIO_BYTES`] is refused without being read.
pub fn load_file(path: &Path, overrides: &Overrides) -> Result<Plan, ScenarioError> {
    use std::io::Read as _;
    let file_name = path.display().to_string();
    let cannot_read = |e: std::io::Error| ScenarioError {
        problems: vec![Problem {
            message: format!("cannot read scenario file `{file_name}`: {e}"),
            origin: Origin::File { file: file_name.clone() },
            help: None,
        }],
    };
    let file = std::fs::File::open(path).map_err(cannot_read)?;
    if let Ok(meta) = file.metadata()
        && meta.len() > MAX_SCENARIO_BYTES as u64
    {
        return Err(too_large(&file_name, meta.len()));
    }
    // Read one byte past the limit at most: a file that grows, or a device, cannot make us read more.
    let mut bytes = Vec::new();
    file.take(MAX_SCENARIO_BYTES as u64 + 1).read_to_end(&mut bytes).map_err(cannot_read)?;
    let source = String::from_utf8(bytes).map_err(|e| {
        cannot_read(std::io::Error::new(std::io::ErrorKind::InvalidData, format!("not UTF-8 ({})", e.utf8_error())))
    })?;
    let base_dir = path.parent().unwrap_or(Path::new("."));
    parse_str(&source, &file_name, base_dir, overrides)
}

/// Parses and validates scenario text. `file_name` is used in messages and for the default name
/// (its stem); `base_dir` is what relative workload and model paths resolve against.
pub fn parse_str(source: &str, file_name: &str, base_dir: &Path, overrides: &Overrides) -> Result<Plan, ScenarioError> {
    if source.len() > MAX_SCENARIO_BYTES {
        return Err(too_large(file_name, source.len() as u64));
    }
    let layer = Layer { arg: "--set", remove: Vec::new(), sets: overrides.sets.clone(), seed: overrides.seed };
    lower_source(Written {
        text: source.into(),
        file: file_name.into(),
        base_dir: base_dir.into(),
        layers: vec![layer],
        files: files::Files::default(),
    })
}

/// The one way to a [`Plan`]: the text parsed, every layer of changes applied in order (`--set`s,
/// the builder's, [`Plan::with_sets`]'), the tree lowered. The plan keeps `written`, so it can be
/// changed again the same way.
fn lower_source(written: Written) -> Result<Plan, ScenarioError> {
    let (source, file_name) = (&*written.text, &*written.file);
    if source.len() > MAX_SCENARIO_BYTES {
        return Err(too_large(file_name, source.len() as u64));
    }
    let document = toml_edit::ImDocument::parse(source).map_err(|e| {
        let origin = match e.span() {
            Some(span) => Origin::in_source(file_name, source, span),
            None => Origin::File { file: file_name.to_owned() },
        };
        let message = format!("invalid TOML: {}", e.message().trim_end().replace('\n', "; "));
        ScenarioError { problems: vec![Problem { message, origin, help: None }] }
    })?;
    let mut root = document.as_table().clone();
    let mut problems = Vec::new();
    let mut sets = Vec::new();
    for layer in &written.layers {
        for path in &layer.remove {
            overrides::remove(&mut root, path, layer.arg, &mut problems);
        }
        let overrides = Overrides { sets: layer.sets.clone(), seed: layer.seed };
        sets.extend(overrides::apply(&mut root, &overrides, layer.arg, &mut problems));
    }
    let stem = Path::new(file_name).file_stem().and_then(|s| s.to_str()).unwrap_or("scenario");
    let base_dir = &*written.base_dir;
    let axes = matrix::extract(&mut root, &sets, source, file_name, &mut problems);
    let mut problems = if axes.is_empty() {
        let mut cx =
            reader::ReadContext::new(source, file_name, base_dir, &written.files, &sets, schema::RENAMED, problems);
        let mut plan = lower::lower(&mut cx, &root, &lower::Context { stem });
        if !cx.has_problems() {
            plan.source = Source::new(written);
            return Ok(plan);
        }
        cx.into_problems()
    } else {
        // Every combination is lowered like a file of its own; a problem they share is told once.
        let source_of = Source::new(written.clone());
        let mut combinations = Vec::new();
        for (tree, values) in matrix::combinations(&root, &axes) {
            let mut cx = reader::ReadContext::new(
                source,
                file_name,
                base_dir,
                &written.files,
                &sets,
                schema::RENAMED,
                Vec::new(),
            );
            let mut plan = lower::lower(&mut cx, &tree, &lower::Context { stem });
            for p in cx.into_problems() {
                if !problems.contains(&p) {
                    problems.push(p);
                }
            }
            // A combination is the scenario without its matrix, with the combination's values set.
            plan.source = Source::new(source_of.with(change::layer("[matrix]", vec!["matrix".to_owned()], &values)));
            let values: Vec<(String, String)> = values.iter().map(|(k, v)| (k.clone(), label_value(v))).collect();
            combinations.push(Combination { label: matrix::label(&values), values, plan });
        }
        if problems.is_empty() {
            let mut plan = combinations[0].plan.clone();
            plan.matrix = Some(Box::new(MatrixPlan { axes: matrix::axes_of(&axes), combinations }));
            plan.source = source_of;
            return Ok(plan);
        }
        problems
    };
    // Overrides first (in argument order), then the file from top to bottom.
    problems.sort_by_key(|p| match &p.origin {
        Origin::Override { .. } => (0, 0, 0),
        Origin::Source { line, column, .. } => (1, *line, *column),
        Origin::File { .. } => (2, 0, 0),
    });
    Err(ScenarioError { problems })
}
