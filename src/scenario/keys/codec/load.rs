//! The values of the load a run sends: `[workload]`'s request format, tokenizer, columns, token
//! distributions and image buckets, and a sweep profile's count of rates.

use toml_edit::{InlineTable, Item, Value, value};

use super::paths::model_path;
use super::tables::table_like;
use super::text::non_blank;
use super::{Codec, U32};
use crate::engine::chat::{ChatTemplate, RequestFormat, TemplateOrigin, looks_like_template};
use crate::engine::tokenizer::ModelTokenizer;
use crate::loadgen::images::{Bucket, MAX_SIDE, check_buckets, parse_buckets, preset};
use crate::scenario::keys::Sub;
use crate::scenario::plan::{Columns, TokenDist};
use crate::scenario::reader::{Field, LocatedTable, LowerBound, Node, ReadContext, join};

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
