//! How each kind of value is read from and written to TOML: the codecs the key rows name.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use toml_edit::{Array, InlineTable, Item, Table, Value, value};

use super::super::plan::{Columns, TokenDist};
use super::super::reader::{Field, LocatedTable, LowerBound, Node, ReadContext, join};
use super::super::units::format_duration;
use super::Sub;
use crate::engine::chat::{ChatTemplate, RequestFormat, TemplateOrigin, looks_like_template};
use crate::engine::faults::{FaultTrigger, ProcessFault};
use crate::engine::tokenizer::ModelTokenizer;
use crate::loadgen::images::{Bucket, MAX_SIDE, check_buckets, parse_buckets, preset};

/// How a value type is read from and written to TOML.
pub(crate) trait Codec {
    type Value;
    const SUB: Sub = Sub::Value;
    fn read(&self, cx: &mut ReadContext, field: &Field) -> Option<Self::Value>;
    fn print(&self, v: &Self::Value) -> Option<Item>;
}

pub(crate) const fn sub_of<C: Codec>(_: &C) -> Sub {
    C::SUB
}

/// TOML integers are i64; larger values (only in plans not read from a file, such as
/// `CostModel::free()`'s unlimited `max_num_seqs`) saturate.
fn int(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// `impl Codec` for a value read by one expression and printed as one TOML value.
macro_rules! codec {
    ($ty:ty => $value:ty, |$c:ident, $cx:ident, $field:ident| $read:expr, |$v:ident| $print:expr) => {
        impl Codec for $ty {
            type Value = $value;
            fn read(&self, $cx: &mut ReadContext, $field: &Field) -> Option<$value> {
                let $c = self;
                $read
            }
            fn print(&self, $v: &$value) -> Option<Item> {
                Some(value($print))
            }
        }
    };
}

pub(crate) struct Str;
codec!(Str => String, |_c, cx, field| cx.string_of(field), |v| v.as_str());

/// A string that is not blank.
fn non_blank(cx: &mut ReadContext, field: &Field) -> Option<String> {
    let s = cx.string_of(field)?;
    if s.trim().is_empty() {
        cx.report_at(field, format!("`{}` must not be empty", field.path), None);
        return None;
    }
    Some(s)
}

/// A scenario name: it names the default output directory, `results/<name>`, so it must be one
/// plain path component (no `/` or `\\`, not `.` or `..`, no control characters, not blank).
pub(crate) struct ScenarioName;
codec!(ScenarioName => String, |_c, cx, field| scenario_name(cx, field), |v| v.as_str());

fn scenario_name(cx: &mut ReadContext, field: &Field) -> Option<String> {
    let name = non_blank(cx, field)?;
    match name_problem(&name) {
        None => Some(name),
        Some(why) => {
            let message =
                format!("`{}` must be a plain file name (it names the directory results/<name>): {why}", field.path);
            let help = "use letters, digits, `-`, `_` or `.`; set `output.dir` (or pass --output) to write elsewhere";
            cx.report_at(field, message, Some(help.to_owned()));
            None
        }
    }
}

/// Why `name` cannot be a scenario name, if it cannot.
pub(crate) fn name_problem(name: &str) -> Option<&'static str> {
    if name.trim().is_empty() {
        Some("it is blank")
    } else if name.contains(['/', '\\']) {
        Some("it holds a path separator")
    } else if name == "." || name == ".." {
        Some("it names a directory")
    } else if name.chars().any(char::is_control) {
        Some("it holds a control character")
    } else {
        None
    }
}

/// A string that is not blank.
pub(crate) struct NonBlank;
codec!(NonBlank => String, |_c, cx, field| non_blank(cx, field), |v| v.as_str());

/// An HTTP engine's base URL (`engine::openai::config::base_url`), normalized.
pub(crate) struct BaseUrl;
codec!(BaseUrl => String, |_c, cx, field| base_url(cx, field), |v| v.as_str());

fn base_url(cx: &mut ReadContext, field: &Field) -> Option<String> {
    let url = cx.string_of(field)?;
    match crate::engine::openai::config::base_url(&url) {
        Ok(url) => Some(url),
        Err(why) => {
            let help = "a server's base URL, e.g. \"http://127.0.0.1:8000\"; `/v1/completions` is appended";
            cx.report_at(field, format!("`{}`: not a base URL: {why}", field.path), Some(help.to_owned()));
            None
        }
    }
}

/// The name of an environment variable. A value that is not a name (a key pasted in by mistake)
/// is refused without being repeated.
pub(crate) struct EnvVarName;
codec!(EnvVarName => String, |_c, cx, field| env_var_name(cx, field), |v| v.as_str());

fn env_var_name(cx: &mut ReadContext, field: &Field) -> Option<String> {
    let name = cx.string_of(field)?;
    let Err(why) = crate::engine::openai::config::check_api_key_env(&name) else { return Some(name) };
    cx.mask(field, &name);
    let message = format!("`{}` {why}", field.path);
    let help = "e.g. `api_key_env = \"OPENAI_API_KEY\"`, with the key itself in that variable, never in the scenario";
    cx.report_at(field, message, Some(help.to_owned()));
    None
}

/// An integer of at least `.0`.
pub(crate) struct U64(pub u64);
codec!(U64 => u64, |c, cx, field| cx.int_of(field, c.0 as i64, i64::MAX).map(|v| v as u64), |v| int(*v));

/// An integer of at least `.0` that fits a `u32`.
pub(crate) struct U32(pub u32);
codec!(U32 => u32, |c, cx, field| cx.int_of(field, i64::from(c.0), i64::from(u32::MAX)).map(|v| v as u32), |v| {
    i64::from(*v)
});

/// A count of at least `.0`.
pub(crate) struct Count(pub usize);
codec!(Count => usize, |c, cx, field| cx.int_of(field, c.0 as i64, i64::MAX).map(|v| v as usize), |v| {
    int(*v as u64)
});

/// A number in `low..=hi`.
pub(crate) struct Float(pub LowerBound, pub f64);
codec!(Float => f64, |c, cx, field| cx.float_of(field, c.0, c.1), |v| *v);

/// A number in `low..=hi`, kept as an `f32`.
pub(crate) struct Float32(pub LowerBound, pub f64);
codec!(Float32 => f32, |c, cx, field| cx.float_of(field, c.0, c.1).map(|v| v as f32), |v| f64::from(*v));

pub(crate) struct Bool;
codec!(Bool => bool, |_c, cx, field| cx.boolean_of(field), |v| *v);

/// A duration string; zero only where `zero` is allowed.
pub(crate) struct Dur {
    pub zero: bool,
}
codec!(Dur => Duration, |c, cx, field| cx.duration_of(field, c.zero), |v| format_duration(*v));

/// A duration of at least 0 that is printed only when it is not 0: a cost added after every
/// scenario printed its costs, so that one which leaves it at 0 prints (in report.json) as before.
pub(crate) struct DurUnlessZero;
impl Codec for DurUnlessZero {
    type Value = Duration;
    fn read(&self, cx: &mut ReadContext, field: &Field) -> Option<Duration> {
        cx.duration_of(field, true)
    }
    fn print(&self, v: &Duration) -> Option<Item> {
        (!v.is_zero()).then(|| value(format_duration(*v)))
    }
}

/// One of a few strings, each meaning a `T`.
pub(crate) struct Choice<T: 'static>(pub &'static [(&'static str, T)]);
impl<T: Copy + PartialEq> Codec for Choice<T> {
    type Value = T;
    fn read(&self, cx: &mut ReadContext, field: &Field) -> Option<T> {
        let names: Vec<&'static str> = self.0.iter().map(|(name, _)| *name).collect();
        let name = cx.choice_of(field, &names)?;
        self.0.iter().find(|(n, _)| *n == name).map(|(_, v)| *v)
    }
    fn print(&self, v: &T) -> Option<Item> {
        self.0.iter().find(|(_, x)| x == v).map(|(name, _)| value(*name))
    }
}

/// One of a few strings (a section's tag).
pub(crate) struct OneOf(pub &'static [&'static str]);
codec!(OneOf => &'static str, |c, cx, field| cx.choice_of(field, c.0), |v| *v);

/// A key that may be left unset: `None` is printed by leaving it out.
pub(crate) struct Opt<C>(pub C);
impl<C: Codec> Codec for Opt<C> {
    type Value = Option<C::Value>;
    const SUB: Sub = C::SUB;
    fn read(&self, cx: &mut ReadContext, field: &Field) -> Option<Option<C::Value>> {
        self.0.read(cx, field).map(Some)
    }
    fn print(&self, v: &Option<C::Value>) -> Option<Item> {
        v.as_ref().and_then(|v| self.0.print(v))
    }
}

/// A non-empty array whose elements all read as `C`.
pub(crate) struct List<C>(pub C);
impl<C: Codec> Codec for List<C> {
    type Value = Vec<C::Value>;
    fn read(&self, cx: &mut ReadContext, field: &Field) -> Option<Vec<C::Value>> {
        let elements = cx.array(field)?;
        if elements.is_empty() {
            cx.report_at(field, format!("`{}` must not be empty", field.path), None);
            return None;
        }
        let values: Vec<Option<C::Value>> = elements.iter().map(|e| self.0.read(cx, e)).collect();
        values.into_iter().collect()
    }
    fn print(&self, v: &Vec<C::Value>) -> Option<Item> {
        let array: Array = v.iter().filter_map(|x| self.0.print(x)?.into_value().ok()).collect();
        Some(value(array))
    }
}

/// A path as written (relative to the current directory when it is used).
pub(crate) struct PathAsIs;
codec!(PathAsIs => PathBuf, |_c, cx, field| cx.string_of(field).map(PathBuf::from), |v| v.to_string_lossy().as_ref());

/// A path relative to the scenario's directory; existence is the user's business.
pub(crate) struct PathBeside;
codec!(PathBeside => PathBuf, |_c, cx, field| path_beside(cx, field), |v| v.to_string_lossy().as_ref());

fn path_beside(cx: &mut ReadContext, field: &Field) -> Option<PathBuf> {
    resolved(cx, field, |dir, p| dir.join(p))
}

/// A written path: an absolute one as it is, a relative one through `resolve` (given the
/// scenario's directory), made absolute.
fn resolved(cx: &mut ReadContext, field: &Field, resolve: fn(&Path, PathBuf) -> PathBuf) -> Option<PathBuf> {
    let p = PathBuf::from(cx.string_of(field)?);
    if p.is_absolute() {
        return Some(p);
    }
    let p = resolve(cx.base_dir, p);
    Some(std::path::absolute(&p).unwrap_or(p))
}

/// A model path: absolute, or next to the scenario if it exists there, else under
/// `$BATCHLAB_HOME` (default `~/.cache/batchlab`). Existence is the engine's business.
pub(crate) struct ModelPath;
codec!(ModelPath => PathBuf, |_c, cx, field| model_path(cx, field), |v| v.to_string_lossy().as_ref());

fn model_path(cx: &mut ReadContext, field: &Field) -> Option<PathBuf> {
    resolved(cx, field, |dir, model| {
        let beside = dir.join(&model);
        if beside.exists() { beside } else { crate::engine::python::batchlab_home().join(model) }
    })
}

/// A file relative to the scenario's directory that must exist.
pub(crate) struct ExistingFile;
codec!(ExistingFile => PathBuf, |_c, cx, field| existing_file(cx, field), |v| v.to_string_lossy().as_ref());

fn existing_file(cx: &mut ReadContext, field: &Field) -> Option<PathBuf> {
    let written = cx.string_of(field)?;
    let joined = cx.base_dir.join(&written);
    let path = std::path::absolute(&joined).unwrap_or_else(|_| joined.clone());
    if !path.is_file() {
        let message = format!("workload file `{written}` not found (looked for {})", joined.display());
        cx.report_at(field, message, Some("paths are relative to the scenario file".to_owned()));
    }
    Some(path)
}

/// A free-form table, as JSON for an engine to take unchanged; empty is printed by leaving it out.
pub(crate) struct Json;
impl Codec for Json {
    type Value = serde_json::Map<String, serde_json::Value>;
    const SUB: Sub = Sub::Any;
    fn read(&self, cx: &mut ReadContext, field: &Field) -> Option<Self::Value> {
        table_like(cx, field).map(|table| table_to_json(cx, &field.path, table))
    }
    fn print(&self, map: &Self::Value) -> Option<Item> {
        table_of(map, json_to_value)
    }
}

/// The table at `field`, or a type problem.
fn table_like<'t>(cx: &mut ReadContext, field: &Field<'t>) -> Option<&'t dyn toml_edit::TableLike> {
    let table = field.node.table_like();
    if table.is_none() {
        let message = format!("`{}`: expected a table, found {}", field.path, field.node.type_name());
        cx.report_at(field, message, None);
    }
    table
}

/// Entries as a TOML table; an empty one is printed by leaving the key out.
fn table_of<'a, V: 'a>(
    entries: impl IntoIterator<Item = (&'a String, &'a V)>,
    to_value: impl Fn(&V) -> Option<Value>,
) -> Option<Item> {
    let mut table = Table::new();
    for (k, v) in entries {
        if let Some(x) = to_value(v) {
            table[k.as_str()] = value(x);
        }
    }
    (!table.is_empty()).then_some(Item::Table(table))
}

/// A table of strings (environment variables); empty is printed by leaving it out.
pub(crate) struct StringTable;
impl Codec for StringTable {
    type Value = BTreeMap<String, String>;
    const SUB: Sub = Sub::Any;
    fn read(&self, cx: &mut ReadContext, field: &Field) -> Option<Self::Value> {
        let table = table_like(cx, field)?;
        let mut map = BTreeMap::new();
        for (key, item) in table.iter() {
            let entry = Field { path: join(&field.path, key), node: Node::Item(item), key_span: None };
            if let Some(v) = cx.string_of(&entry) {
                map.insert(key.to_owned(), v);
            }
        }
        Some(map)
    }
    fn print(&self, map: &Self::Value) -> Option<Item> {
        table_of(map, |v| Some(Value::from(v.as_str())))
    }
}

/// `workload.request_format`: `"plain"`, `"chat-template"`, an inline Jinja template (it has
/// `{{`, `{%` or `{#`), or the path of a Jinja file, relative to the scenario's directory. A
/// template is compiled here, so a broken one is reported with its file and line.
pub(crate) struct ReqFormat;
impl Codec for ReqFormat {
    type Value = RequestFormat;
    fn read(&self, cx: &mut ReadContext, field: &Field) -> Option<RequestFormat> {
        let written = cx.string_of(field)?;
        match written.as_str() {
            "plain" => return Some(RequestFormat::Plain),
            "chat-template" => return Some(RequestFormat::ChatTemplate),
            _ => {}
        }
        let (source, origin) = if looks_like_template(&written) {
            (written, TemplateOrigin::Inline)
        } else {
            let joined = cx.base_dir.join(&written);
            let path = std::path::absolute(&joined).unwrap_or_else(|_| joined.clone());
            match cx.files.text(&path) {
                Ok(source) => (source, TemplateOrigin::File(path)),
                Err(e) => {
                    let message = format!(
                        "`{}`: expected \"plain\", \"chat-template\", a Jinja template or the path of one, \
                         found \"{written}\" (cannot read {}: {e})",
                        field.path,
                        joined.display()
                    );
                    let help = "a template file's path is relative to the scenario file".to_owned();
                    cx.report_at(field, message, Some(help));
                    return None;
                }
            }
        };
        match ChatTemplate::new(source, origin) {
            Ok(template) => Some(RequestFormat::Custom(template)),
            Err(e) => {
                cx.report_at(field, format!("`{}`: {e}", field.path), None);
                None
            }
        }
    }
    fn print(&self, v: &RequestFormat) -> Option<Item> {
        Some(value(match v {
            RequestFormat::Plain => "plain".to_owned(),
            RequestFormat::ChatTemplate => "chat-template".to_owned(),
            RequestFormat::Custom(t) => match t.origin() {
                TemplateOrigin::File(path) => path.to_string_lossy().into_owned(),
                TemplateOrigin::Inline => t.source().to_owned(),
            },
        }))
    }
}

/// `workload.tokenizer`: a model directory or a `tokenizer.json`, found as a model path is
/// ([`ModelPath`]: next to the scenario, else under `$BATCHLAB_HOME`, so it may name the same
/// `tiny-llama` as `engine.vllm.model`), loaded here so a missing or broken one is reported at
/// the key.
pub(crate) struct TokenizerPath;
impl Codec for TokenizerPath {
    type Value = ModelTokenizer;
    fn read(&self, cx: &mut ReadContext, field: &Field) -> Option<ModelTokenizer> {
        let path = model_path(cx, field)?;
        match ModelTokenizer::load(&path) {
            Ok(tokenizer) => Some(tokenizer),
            Err(e) => {
                let help = "a model directory (with tokenizer.json) or a tokenizer.json: absolute, relative to the \
                            scenario file, or under $BATCHLAB_HOME (default ~/.cache/batchlab), looked for in that order";
                cx.report_at(field, format!("`{}`: {e}", field.path), Some(help.to_owned()));
                None
            }
        }
    }
    fn print(&self, v: &ModelTokenizer) -> Option<Item> {
        Some(value(v.path().to_string_lossy().as_ref()))
    }
}

/// `workload.columns`: the JSON key of each field, `{ prompt = "question" }`; only renamed
/// fields are printed.
pub(crate) struct ColumnMap;
impl Codec for ColumnMap {
    type Value = Columns;
    const SUB: Sub = Sub::Fixed(Columns::FIELDS);
    fn read(&self, cx: &mut ReadContext, field: &Field) -> Option<Columns> {
        let table = table_like(cx, field)?;
        let t = LocatedTable { path: field.path.as_str(), table, at: field.span().map(|r| (r.start, r.end)) };
        cx.check_keys(t, Columns::FIELDS);
        let mut columns = Columns::default();
        for (name, item) in table.iter() {
            let entry = Field { path: join(&field.path, name), node: Node::Item(item), key_span: None };
            if let (Some(slot), Some(key)) = (columns.key_mut(name), non_blank(cx, &entry)) {
                *slot = key;
            }
        }
        Some(columns)
    }
    fn print(&self, columns: &Columns) -> Option<Item> {
        let mut t = InlineTable::new();
        for (name, key) in columns.renamed() {
            t.insert(name, key.into());
        }
        (!t.is_empty()).then(|| value(t))
    }
}

/// The keys a token distribution's table takes.
pub(crate) const TOKEN_DIST_KEYS: &[&str] = &["dist", "value", "min", "max", "mean", "stdev"];

/// A token distribution: an integer (fixed) or a table with `dist`.
pub(crate) struct Dist;
impl Codec for Dist {
    type Value = TokenDist;
    const SUB: Sub = Sub::Fixed(TOKEN_DIST_KEYS);
    fn read(&self, cx: &mut ReadContext, field: &Field) -> Option<TokenDist> {
        read_token_dist(cx, field)
    }
    fn print(&self, d: &TokenDist) -> Option<Item> {
        Some(value(token_dist_value(d)))
    }
}

fn read_token_dist(cx: &mut ReadContext, field: &Field) -> Option<TokenDist> {
    if field.node.value().is_some_and(Value::is_integer) {
        return cx.int_of(field, 1, i64::from(u32::MAX)).map(|v| TokenDist::Fixed { value: v as u32 });
    }
    let Some(table) = field.node.table_like() else {
        let message = format!(
            "`{}`: expected an integer or a table such as {{ dist = \"uniform\", min = 64, max = 256 }}, found {}",
            field.path,
            field.node.type_name()
        );
        cx.report_at(field, message, None);
        return None;
    };
    let path = field.path.as_str();
    let d = LocatedTable { path, table, at: field.span().map(|r| (r.start, r.end)) };
    let Some(dist) = cx.choice(d, "dist", &["fixed", "uniform", "normal"]) else {
        if cx.field(d, "dist").is_none() {
            let help = "add `dist = \"uniform\"` (or \"normal\", \"fixed\")".to_owned();
            cx.report_at(field, format!("`{path}`: missing `dist`"), Some(help));
        }
        return None;
    };
    let keys: &[&str] = match dist {
        "fixed" => &["dist", "value"],
        "uniform" => &["dist", "min", "max"],
        _ => &["dist", "mean", "stdev", "min", "max"],
    };
    cx.check_keys(d, keys);
    let required_u32 = |cx: &mut ReadContext, k: &str| {
        if cx.field(d, k).is_none() {
            cx.report_at(field, format!("`{path}`: missing `{k}` (required with dist = \"{dist}\")"), None);
        }
        cx.u32(d, k, 1)
    };
    if dist == "fixed" {
        return required_u32(cx, "value").map(|value| TokenDist::Fixed { value });
    }
    let (mean, stdev) = if dist == "normal" {
        let required_f64 = |cx: &mut ReadContext, k: &str| {
            if cx.field(d, k).is_none() {
                cx.report_at(field, format!("`{path}`: missing `{k}` (required with dist = \"normal\")"), None);
            }
            cx.float(d, k, LowerBound::AtLeast(0.0), f64::INFINITY)
        };
        (required_f64(cx, "mean"), required_f64(cx, "stdev"))
    } else {
        (Some(0.0), Some(0.0))
    };
    let (min, max) = (required_u32(cx, "min"), required_u32(cx, "max"));
    let (min, max, mean, stdev) = (min?, max?, mean?, stdev?);
    if min > max {
        cx.report_at(field, format!("`{path}`: `min` ({min}) is greater than `max` ({max})"), None);
        return None;
    }
    Some(if dist == "uniform" { TokenDist::Uniform { min, max } } else { TokenDist::Normal { mean, stdev, min, max } })
}

/// A distribution as the DSL writes it (also what the builder sets).
pub(crate) fn token_dist_value(d: &TokenDist) -> Value {
    let mut t = InlineTable::new();
    match d {
        TokenDist::Fixed { value } => return Value::from(i64::from(*value)),
        TokenDist::Uniform { min, max } => {
            t.insert("dist", "uniform".into());
            t.insert("min", i64::from(*min).into());
            t.insert("max", i64::from(*max).into());
        }
        TokenDist::Normal { mean, stdev, min, max } => {
            t.insert("dist", "normal".into());
            t.insert("mean", (*mean).into());
            t.insert("stdev", (*stdev).into());
            t.insert("min", i64::from(*min).into());
            t.insert("max", i64::from(*max).into());
        }
    }
    Value::InlineTable(t)
}

/// `profile.rates` with kind = "sweep": a count, where an array is a likely mix-up with "constant".
pub(crate) struct SweepRates;
impl Codec for SweepRates {
    type Value = u32;
    fn read(&self, cx: &mut ReadContext, field: &Field) -> Option<u32> {
        if field.node.value().is_some_and(Value::is_array) {
            let message = "`profile.rates`: with kind = \"sweep\" expected an integer (how many rates \
                           between the synchronous and throughput rates), found an array"
                .to_owned();
            cx.report_at(field, message, Some("for a list of rates use kind = \"constant\"".to_owned()));
            return None;
        }
        U32(1).read(cx, field)
    }
    fn print(&self, v: &u32) -> Option<Item> {
        U32(1).print(v)
    }
}

fn table_to_json(
    cx: &mut ReadContext,
    path: &str,
    table: &dyn toml_edit::TableLike,
) -> serde_json::Map<String, serde_json::Value> {
    let mut map = serde_json::Map::new();
    for (key, item) in table.iter() {
        let field = Field { path: join(path, key), node: Node::Item(item), key_span: None };
        let json = if let Some(sub) = item.as_table_like() {
            Some(serde_json::Value::Object(table_to_json(cx, &field.path, sub)))
        } else if let Some(value) = item.as_value() {
            value_to_json(cx, &field, value)
        } else {
            cx.report_at(&field, format!("`{}`: arrays of tables are not supported here", field.path), None);
            None
        };
        if let Some(json) = json {
            map.insert(key.to_owned(), json);
        }
    }
    map
}

fn value_to_json(cx: &mut ReadContext, field: &Field, value: &Value) -> Option<serde_json::Value> {
    Some(match value {
        Value::String(s) => serde_json::Value::String(s.value().clone()),
        Value::Integer(i) => serde_json::Value::from(*i.value()),
        Value::Float(f) => match serde_json::Number::from_f64(*f.value()) {
            Some(n) => serde_json::Value::Number(n),
            None => {
                cx.report_at(
                    field,
                    format!("`{}`: {} cannot be passed to the engine (not valid JSON)", field.path, f.value()),
                    None,
                );
                return None;
            }
        },
        Value::Boolean(b) => serde_json::Value::Bool(*b.value()),
        Value::Datetime(d) => serde_json::Value::String(d.value().to_string()),
        Value::Array(a) => serde_json::Value::Array(a.iter().filter_map(|v| value_to_json(cx, field, v)).collect()),
        Value::InlineTable(t) => serde_json::Value::Object(table_to_json(cx, &field.path, t)),
    })
}

/// JSON back to TOML; `null` has no TOML form and is dropped (it cannot come from a file).
fn json_to_value(j: &serde_json::Value) -> Option<Value> {
    Some(match j {
        serde_json::Value::Null => return None,
        serde_json::Value::Bool(b) => (*b).into(),
        serde_json::Value::Number(n) => match n.as_i64() {
            Some(i) => i.into(),
            None => n.as_f64()?.into(),
        },
        serde_json::Value::String(s) => s.as_str().into(),
        serde_json::Value::Array(a) => Value::Array(a.iter().filter_map(json_to_value).collect()),
        serde_json::Value::Object(o) => {
            let mut t = InlineTable::new();
            for (k, v) in o {
                if let Some(v) = json_to_value(v) {
                    t.insert(k, v);
                }
            }
            Value::InlineTable(t)
        }
    })
}

/// The keys a `[faults]` trigger's table takes.
pub(crate) const TRIGGER_KEYS: &[&str] = &["every", "probability"];

/// A `[faults]` trigger: `{ every = N }` and/or `{ probability = p }`; one that never fires is
/// written by leaving the key out.
pub(crate) struct Trigger;
impl Codec for Trigger {
    type Value = FaultTrigger;
    const SUB: Sub = Sub::Fixed(TRIGGER_KEYS);
    fn read(&self, cx: &mut ReadContext, field: &Field) -> Option<FaultTrigger> {
        let tt = cx.as_table(field, &field.path, TRIGGER_KEYS)?;
        if tt.table.get("every").is_none() && tt.table.get("probability").is_none() {
            let help = "write { every = N } and/or { probability = p }".to_owned();
            cx.report_at(field, format!("`{}` needs `every` and/or `probability`", field.path), Some(help));
        }
        Some(FaultTrigger {
            every: cx.u64(tt, "every", 1),
            probability: cx.float(tt, "probability", LowerBound::AtLeast(0.0), 1.0).unwrap_or(0.0),
        })
    }
    fn print(&self, trigger: &FaultTrigger) -> Option<Item> {
        trigger_value(trigger).map(value)
    }
}

/// A trigger as the DSL writes it (also what the builder sets); `None` for one that never fires.
pub(crate) fn trigger_value(trigger: &FaultTrigger) -> Option<Value> {
    let mut t = InlineTable::new();
    if let Some(every) = trigger.every {
        t.insert("every", int(every).into());
    }
    if trigger.probability != 0.0 {
        t.insert("probability", trigger.probability.into());
    }
    (!t.is_empty()).then_some(Value::InlineTable(t))
}

/// The keys a process fault's table takes.
pub(crate) const PROCESS_FAULT_KEYS: &[&str] = &["after_batches"];

/// A process fault: `{ after_batches = N }`.
pub(crate) struct KillAfter;
impl Codec for KillAfter {
    type Value = ProcessFault;
    const SUB: Sub = Sub::Fixed(PROCESS_FAULT_KEYS);
    fn read(&self, cx: &mut ReadContext, field: &Field) -> Option<ProcessFault> {
        let tt = cx.as_table(field, &field.path, PROCESS_FAULT_KEYS)?;
        if tt.table.get("after_batches").is_none() {
            let help = "write { after_batches = N }: the kill lands during generate N + 1".to_owned();
            cx.report_at(field, format!("`{}` needs `after_batches`", field.path), Some(help));
        }
        Some(ProcessFault { after_batches: cx.u64(tt, "after_batches", 0)? })
    }
    fn print(&self, p: &ProcessFault) -> Option<Item> {
        let mut t = InlineTable::new();
        t.insert("after_batches", int(p.after_batches).into());
        Some(value(t))
    }
}

/// `workload.images.buckets`: vLLM's `--random-mm-bucket-config` literal as a string,
/// `"{(256, 256, 1): 0.5, (720, 1280, 1): 0.5}"`, or one of guidellm's presets (`"720p"`) for a
/// single bucket. Every bucket rule ([`check_buckets`]) is checked here, at the key's line.
pub(crate) struct Buckets;
impl Codec for Buckets {
    type Value = Vec<Bucket>;
    fn read(&self, cx: &mut ReadContext, field: &Field) -> Option<Vec<Bucket>> {
        let written = cx.string_of(field)?;
        let buckets = match preset(written.trim()) {
            Some((height, width)) => vec![Bucket { height, width, probability: 1.0 }],
            None => match parse_buckets(&written) {
                Ok(b) => b,
                Err(e) => {
                    let help = "write vLLM's `{(height, width, 1): probability, …}` or a preset: 240p, 360p, \
                                480p, 540p, 720p, 1080p, 1440p, 2160p, 4k"
                        .to_owned();
                    cx.report_at(field, format!("`{}`: {e}", field.path), Some(help));
                    return None;
                }
            },
        };
        let mut problems = check_buckets(&buckets);
        for b in &buckets {
            if b.height > MAX_SIDE || b.width > MAX_SIDE {
                problems.push(format!("bucket ({}, {}) has a side over {MAX_SIDE} pixels", b.height, b.width));
            }
        }
        if problems.is_empty() {
            return Some(buckets);
        }
        for problem in problems {
            cx.report_at(field, format!("`{}`: {problem}", field.path), None);
        }
        None
    }
    fn print(&self, v: &Vec<Bucket>) -> Option<Item> {
        let parts: Vec<String> =
            v.iter().map(|b| format!("({}, {}, 1): {}", b.height, b.width, b.probability)).collect();
        Some(value(format!("{{{}}}", parts.join(", "))))
    }
}
