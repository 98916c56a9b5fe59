//! What a protocol object returns, checked and mapped onto [`EngineInfo`] and [`EngineOutput`].
//!
//! Pure: the interpreter module turns Python values into [`Plain`] data while it holds the GIL,
//! and everything here runs (and is tested) without Python. A protocol object written by anyone
//! may return anything, so every field is checked and a wrong one fails with an error naming the
//! class, the output and the field; nothing is guessed or silently dropped.

use crate::engine::{
    ClockDomain, EngineInfo, EngineOutput, EngineStats, FinishReason, RequestId, ResolvedEngineConfig,
};

/// A Python value as plain data, the only shape that crosses the protocol boundary.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Plain {
    None,
    Bool(bool),
    Int(i128),
    Float(f64),
    Str(String),
    /// A list or a tuple.
    List(Vec<Plain>),
    /// A dict, keys in Python's order. A key that is not a string is kept as its `repr`.
    Dict(Vec<(String, Plain)>),
    /// Anything else, by its type's name.
    Other(String),
}

impl Plain {
    /// `str 'abc'`, `float 1.5`, `list`: what a message says it found.
    pub(crate) fn describe(&self) -> String {
        match self {
            Plain::None => "None".into(),
            Plain::Bool(b) => format!("bool {}", if *b { "True" } else { "False" }),
            Plain::Int(i) => format!("int {i}"),
            Plain::Float(f) => format!("float {f}"),
            Plain::Str(s) if s.chars().count() > 40 => format!("str '{}…'", s.chars().take(40).collect::<String>()),
            Plain::Str(s) => format!("str '{s}'"),
            Plain::List(items) => format!("list of {}", items.len()),
            Plain::Dict(_) => "dict".into(),
            Plain::Other(type_name) => type_name.clone(),
        }
    }
}

/// The keys of an output dict. Every one may be missing or `None`, except that an output needs
/// `output_tokens` or `output_token_ids`.
pub(crate) const OUTPUT_FIELDS: &[&str] = &[
    "request_id",
    "prompt_tokens",
    "output_tokens",
    "output_token_ids",
    "text",
    "finish_reason",
    "arrival_time",
    "queued_ts",
    "scheduled_ts",
    "first_token_ts",
    "last_token_ts",
    "token_ts",
    "cached_tokens",
    "embedding_dims",
];

/// The keys of the dict `start()` returns; `name` and `version` are required.
pub(crate) const INFO_FIELDS: &[&str] =
    &["name", "version", "clock", "model_chat_template", "engine_config", "processes"];

/// The keys of the info dict's `engine_config` ([`ResolvedEngineConfig`]); when it is given, all
/// are required.
pub(crate) const ENGINE_CONFIG_FIELDS: &[&str] =
    &["max_num_seqs", "max_num_batched_tokens", "num_kv_blocks", "block_size", "prefix_caching", "chunked_prefill"];

/// Whether a started engine takes chat prompts (`messages`), from its info's `model_chat_template`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ChatSupport {
    /// No `model_chat_template`: the engine takes text and token prompts only.
    None,
    /// `model_chat_template = True`: it templates messages, and the model has a template.
    ModelTemplate,
    /// `model_chat_template = False`: it templates messages, but the model has no template of its
    /// own, so a chat prompt for the model's template falls back to plain.
    NoModelTemplate,
}

/// `start()`'s `model_chat_template`: a bool, or missing.
pub(crate) fn map_chat_support(class: &str, info: &Plain) -> Result<ChatSupport, String> {
    let fields =
        Fields::new(info, INFO_FIELDS).map_err(|e| format!("{class}.start() returned a bad info dict: {e}"))?;
    match fields.get("model_chat_template") {
        Plain::None => Ok(ChatSupport::None),
        Plain::Bool(true) => Ok(ChatSupport::ModelTemplate),
        Plain::Bool(false) => Ok(ChatSupport::NoModelTemplate),
        other => Err(format!(
            "{class}.start() returned a bad info dict: `model_chat_template` must be a bool or None, found {}",
            other.describe()
        )),
    }
}

/// A dict's fields, checked against `known`; missing keys read as `None`.
struct Fields<'a> {
    items: &'a [(String, Plain)],
}

impl<'a> Fields<'a> {
    fn new(value: &'a Plain, known: &[&str]) -> Result<Self, String> {
        let Plain::Dict(items) = value else {
            return Err(format!("expected a dict, found {}", value.describe()));
        };
        if let Some((key, _)) = items.iter().find(|(k, _)| !known.contains(&k.as_str())) {
            let help = did_you_mean(key, known).map(|k| format!(" (did you mean `{k}`?)")).unwrap_or_default();
            return Err(format!("unknown field `{key}`{help} (known: {})", known.join(", ")));
        }
        Ok(Fields { items })
    }

    fn get(&self, key: &str) -> &'a Plain {
        self.items.iter().find(|(k, _)| k == key).map_or(&Plain::None, |(_, v)| v)
    }

    fn int(&self, key: &str, max: u64) -> Result<Option<u64>, String> {
        match self.get(key) {
            Plain::None => Ok(None),
            Plain::Int(i) if (0..=i128::from(max)).contains(i) => Ok(Some(*i as u64)),
            other => Err(format!("`{key}` must be an int in 0..={max} or None, found {}", other.describe())),
        }
    }

    fn boolean(&self, key: &str) -> Result<Option<bool>, String> {
        match self.get(key) {
            Plain::None => Ok(None),
            Plain::Bool(b) => Ok(Some(*b)),
            other => Err(format!("`{key}` must be a bool or None, found {}", other.describe())),
        }
    }

    fn string(&self, key: &str) -> Result<Option<String>, String> {
        match self.get(key) {
            Plain::None => Ok(None),
            Plain::Str(s) => Ok(Some(s.clone())),
            other => Err(format!("`{key}` must be a str or None, found {}", other.describe())),
        }
    }

    /// Seconds: an int or a float (NaN and infinities are kept, for the metrics mapper to judge).
    fn seconds(&self, key: &str) -> Result<Option<f64>, String> {
        match self.get(key) {
            Plain::None => Ok(None),
            Plain::Float(f) => Ok(Some(*f)),
            Plain::Int(i) => Ok(Some(*i as f64)),
            other => Err(format!("`{key}` must be a number of seconds or None, found {}", other.describe())),
        }
    }

    fn seconds_list(&self, key: &str) -> Result<Option<Vec<f64>>, String> {
        match self.get(key) {
            Plain::None => Ok(None),
            Plain::List(items) => items
                .iter()
                .enumerate()
                .map(|(i, item)| match item {
                    Plain::Float(f) => Ok(*f),
                    Plain::Int(t) => Ok(*t as f64),
                    other => Err(format!("`{key}[{i}]` must be a number of seconds, found {}", other.describe())),
                })
                .collect::<Result<Vec<_>, _>>()
                .map(Some),
            other => Err(format!("`{key}` must be a list of seconds or None, found {}", other.describe())),
        }
    }

    fn token_ids(&self, key: &str) -> Result<Option<Vec<u32>>, String> {
        match self.get(key) {
            Plain::None => Ok(None),
            Plain::List(items) => items
                .iter()
                .enumerate()
                .map(|(i, item)| match item {
                    Plain::Int(t) if (0..=i128::from(u32::MAX)).contains(t) => Ok(*t as u32),
                    other => Err(format!(
                        "`{key}[{i}]` must be a token id (an int in 0..=2^32-1), found {}",
                        other.describe()
                    )),
                })
                .collect::<Result<Vec<_>, _>>()
                .map(Some),
            other => Err(format!("`{key}` must be a list of ints or None, found {}", other.describe())),
        }
    }
}

/// The known key closest to a misspelt one (the same rule as the scenario's did-you-mean).
fn did_you_mean<'k>(found: &str, known: &[&'k str]) -> Option<&'k str> {
    known
        .iter()
        .map(|k| (strsim::jaro_winkler(found, k), *k))
        .filter(|(score, _)| *score >= 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, k)| k)
}

/// `start()`'s dict: `name` and `version` (str), and optionally `clock` (`"monotonic"` or
/// `"foreign"`), which must agree with the configured `clock`.
pub(crate) fn map_info(class: &str, info: &Plain, configured: ClockDomain) -> Result<EngineInfo, String> {
    let fail = |message: String| format!("{class}.start() returned a bad info dict: {message}");
    let fields = Fields::new(info, INFO_FIELDS).map_err(fail)?;
    let required = |key: &str| match fields.string(key) {
        Ok(Some(s)) if !s.trim().is_empty() => Ok(s),
        Ok(_) => Err(fail(format!("`{key}` is missing: it must be a non-empty str"))),
        Err(e) => Err(fail(e)),
    };
    let name = required("name")?;
    let version = required("version")?;
    let clock = match fields.string("clock").map_err(fail)?.as_deref() {
        None => configured,
        Some("monotonic") => ClockDomain::Monotonic,
        Some("foreign") => ClockDomain::Foreign,
        Some(other) => return Err(fail(format!("`clock` must be \"monotonic\" or \"foreign\", found '{other}'"))),
    };
    if clock != configured {
        let (says, set) = (clock_name(clock), clock_name(configured));
        return Err(format!(
            "{class}.start() says clock = \"{says}\" but the engine is configured with clock = \"{set}\": set \
             `engine.python.clock = \"{says}\"`"
        ));
    }
    let resolved_config = match fields.get("engine_config") {
        Plain::None => None,
        config => Some(map_engine_config(config).map_err(|e| fail(format!("`engine_config`: {e}")))?),
    };
    let processes = map_processes(fields.get("processes")).map_err(fail)?;
    Ok(EngineInfo { name, version, resolved_config, processes, engine_thread: None })
}

/// The info dict's `processes`: the pids that are the engine (docs/engines.md).
fn map_processes(value: &Plain) -> Result<Option<Vec<u32>>, String> {
    let Plain::List(items) = value else {
        return match value {
            Plain::None => Ok(None),
            other => Err(format!("`processes` must be a list of pids (int) or None, found {}", other.describe())),
        };
    };
    items
        .iter()
        .map(|item| match item {
            Plain::Int(pid) if (1..=i128::from(i32::MAX)).contains(pid) => Ok(*pid as u32),
            other => Err(format!("`processes` must hold pids (int >= 1), found {}", other.describe())),
        })
        .collect::<Result<Vec<_>, _>>()
        .map(Some)
}

/// The info dict's `engine_config`: the configuration the engine resolved (docs/engines.md). Every
/// key is required: a config with a guessed value would be worse than none.
fn map_engine_config(value: &Plain) -> Result<ResolvedEngineConfig, String> {
    let f = Fields::new(value, ENGINE_CONFIG_FIELDS)?;
    let count = |key: &str| match f.int(key, u64::from(u32::MAX))? {
        Some(n) if n > 0 => Ok(n as u32),
        Some(_) => Err(format!("`{key}` must be at least 1, found int 0")),
        None => Err(format!("`{key}` is missing: it must be an int")),
    };
    let flag = |key: &str| f.boolean(key)?.ok_or_else(|| format!("`{key}` is missing: it must be a bool"));
    Ok(ResolvedEngineConfig {
        max_num_seqs: count("max_num_seqs")?,
        max_num_batched_tokens: count("max_num_batched_tokens")?,
        num_kv_blocks: count("num_kv_blocks")?,
        block_size: count("block_size")?,
        prefix_caching: flag("prefix_caching")?,
        chunked_prefill: flag("chunked_prefill")?,
    })
}

fn clock_name(clock: ClockDomain) -> &'static str {
    match clock {
        ClockDomain::Monotonic => "monotonic",
        ClockDomain::Foreign => "foreign",
    }
}

/// `generate()`'s list: one dict per request, in any order when every one has `request_id`.
pub(crate) fn map_outputs(class: &str, outputs: &Plain, requests: usize) -> Result<Vec<EngineOutput>, String> {
    let Plain::List(items) = outputs else {
        return Err(format!("{class}.generate() must return a list of dicts, found {}", outputs.describe()));
    };
    if items.len() != requests {
        return Err(format!("{class}.generate() returned {} outputs for {requests} requests", items.len()));
    }
    items
        .iter()
        .enumerate()
        .map(|(i, item)| map_output(item).map_err(|e| format!("{class}.generate() output {i}: {e}")))
        .collect()
}

/// What one engine step of continuous admission served, as far as its outputs show
/// (`VllmEngine.step()`'s second value).
/// (`ts`, the engine clock's time of the step's outputs, is checked but not kept: batchlab
/// times the step itself.)
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct StepServed {
    /// Requests that got their first token in the step.
    pub prefill: u32,
    /// Requests that got a further token in the step.
    pub decode: u32,
}

/// `None`, or a dict of `ts`, `prefill` and `decode`.
pub(crate) fn map_step(value: &Plain) -> Result<Option<StepServed>, String> {
    if matches!(value, Plain::None) {
        return Ok(None);
    }
    let f = Fields::new(value, &["ts", "prefill", "decode"])?;
    let count = |key: &str| -> Result<u32, String> {
        Ok(f.int(key, u64::from(u32::MAX))?.ok_or_else(|| format!("the step has no `{key}`"))? as u32)
    };
    f.seconds("ts")?.ok_or("the step has no `ts`")?;
    Ok(Some(StepServed { prefill: count("prefill")?, decode: count("decode")? }))
}

/// One output dict.
fn map_output(value: &Plain) -> Result<EngineOutput, String> {
    let f = Fields::new(value, OUTPUT_FIELDS)?;
    let max = u64::from(u32::MAX);
    let output_tokens = f.int("output_tokens", max)?.map(|n| n as u32);
    let output_token_ids = f.token_ids("output_token_ids")?;
    match (output_tokens, &output_token_ids) {
        (None, None) => return Err("`output_tokens` or `output_token_ids` is required (both are missing)".into()),
        (Some(n), Some(ids)) if ids.len() != n as usize => {
            return Err(format!("`output_tokens` is {n} but `output_token_ids` has {} ids", ids.len()));
        }
        _ => {}
    }
    Ok(EngineOutput {
        request_id: f.int("request_id", u64::MAX)?.map(|id| id as RequestId),
        prompt_tokens: f.int("prompt_tokens", max)?.map(|n| n as u32),
        output_tokens,
        output_token_ids,
        text: f.string("text")?,
        finish_reason: finish_reason(f.string("finish_reason")?.as_deref()),
        stats: EngineStats {
            arrival_wall: f.seconds("arrival_time")?,
            queued_ts: f.seconds("queued_ts")?,
            scheduled_ts: f.seconds("scheduled_ts")?,
            first_token_ts: f.seconds("first_token_ts")?,
            last_token_ts: f.seconds("last_token_ts")?,
            token_ts: f.seconds_list("token_ts")?,
            cached_tokens: f.int("cached_tokens", u64::from(u32::MAX))?.map(|n| n as u32),
            ..EngineStats::default()
        },
        failure: None,
        embedding_dims: f.int("embedding_dims", max)?.map(|n| n as u32),
    })
}

fn finish_reason(reason: Option<&str>) -> FinishReason {
    match reason {
        Some("length") => FinishReason::Length,
        Some("stop") => FinishReason::Stop,
        Some("abort") => FinishReason::Abort,
        Some(other) => FinishReason::Other(other.to_owned()),
        None => FinishReason::Unknown,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dict(items: &[(&str, Plain)]) -> Plain {
        Plain::Dict(items.iter().map(|(k, v)| ((*k).to_owned(), v.clone())).collect())
    }

    fn ids(values: &[i128]) -> Plain {
        Plain::List(values.iter().map(|v| Plain::Int(*v)).collect())
    }

    /// Maps one output dict as the only output of a batch of one.
    fn check(output: Plain, expected: Result<EngineOutput, &str>) {
        let got = map_outputs("m:C", &Plain::List(vec![output]), 1).map(|mut v| v.remove(0));
        match expected {
            Ok(out) => assert_eq!(got, Ok(out)),
            Err(message) => assert_eq!(got, Err(format!("m:C.generate() output 0: {message}"))),
        }
    }

    fn minimal() -> EngineOutput {
        EngineOutput::new(None, FinishReason::Unknown).with_output_tokens(2)
    }

    #[test]
    fn an_embedding_keeps_its_length_and_generates_nothing() {
        let output = dict(&[
            ("prompt_tokens", Plain::Int(9)),
            ("output_tokens", Plain::Int(0)),
            ("output_token_ids", ids(&[])),
            ("embedding_dims", Plain::Int(128)),
        ]);
        let expected = EngineOutput::new(None, FinishReason::Unknown)
            .with_prompt_tokens(9)
            .with_output_tokens(0)
            .with_output_token_ids(vec![])
            .with_embedding_dims(128);
        check(output, Ok(expected));
    }

    #[test]
    fn a_full_output_maps_every_field() {
        check(
            dict(&[
                ("request_id", Plain::Int(7)),
                ("prompt_tokens", Plain::Int(3)),
                ("output_tokens", Plain::Int(2)),
                ("output_token_ids", ids(&[5, 6])),
                ("text", Plain::Str("ab".into())),
                ("finish_reason", Plain::Str("length".into())),
                ("arrival_time", Plain::Float(1.7e9)),
                ("queued_ts", Plain::Int(10)),
                ("scheduled_ts", Plain::Float(10.5)),
                ("first_token_ts", Plain::Float(11.0)),
                ("last_token_ts", Plain::Float(12.0)),
                ("token_ts", Plain::List(vec![Plain::Float(11.0), Plain::Int(12)])),
            ]),
            Ok(EngineOutput::new(Some(7), FinishReason::Length)
                .with_prompt_tokens(3)
                .with_output_tokens(2)
                .with_output_token_ids(vec![5, 6])
                .with_text("ab")
                .with_stats(EngineStats {
                    arrival_wall: Some(1.7e9),
                    queued_ts: Some(10.0),
                    scheduled_ts: Some(10.5),
                    first_token_ts: Some(11.0),
                    last_token_ts: Some(12.0),
                    token_ts: Some(vec![11.0, 12.0]),
                    cached_tokens: None,
                    ..EngineStats::default()
                })),
        );
    }

    #[test]
    fn missing_and_none_fields_are_absent() {
        check(dict(&[("output_tokens", Plain::Int(2))]), Ok(minimal()));
        check(dict(&[("output_tokens", Plain::Int(2)), ("first_token_ts", Plain::None)]), Ok(minimal()));
        let from_ids = EngineOutput { output_tokens: None, output_token_ids: Some(vec![1, 2]), ..minimal() };
        check(dict(&[("output_token_ids", ids(&[1, 2]))]), Ok(from_ids));
    }

    #[test]
    fn timestamps_are_passed_on_as_sent() {
        let got = map_outputs(
            "m:C",
            &Plain::List(vec![dict(&[
                ("output_tokens", Plain::Int(1)),
                ("queued_ts", Plain::Float(0.0)),
                ("first_token_ts", Plain::Float(f64::NAN)),
            ])]),
            1,
        )
        .unwrap();
        assert_eq!(got[0].stats.queued_ts, Some(0.0), "0.0 is a time, not `absent`");
        assert!(got[0].stats.first_token_ts.is_some_and(f64::is_nan), "NaN is passed on for the mapper to judge");
    }

    #[test]
    fn bad_outputs_name_the_field() {
        let two = ("output_tokens", Plain::Int(2));
        for (output, message) in [
            (dict(&[]), "`output_tokens` or `output_token_ids` is required (both are missing)"),
            (
                dict(&[("output_tokens", Plain::Str("2".into()))]),
                "`output_tokens` must be an int in 0..=4294967295 or None, found str '2'",
            ),
            (
                dict(&[two.clone(), ("request_id", Plain::Int(-1))]),
                "`request_id` must be an int in 0..=18446744073709551615 or None, found int -1",
            ),
            (
                dict(&[two.clone(), ("first_token_ts", Plain::Str("now".into()))]),
                "`first_token_ts` must be a number of seconds or None, found str 'now'",
            ),
            (
                dict(&[two.clone(), ("last_token_ts", Plain::Bool(true))]),
                "`last_token_ts` must be a number of seconds or None, found bool True",
            ),
            (dict(&[two.clone(), ("text", Plain::Other("bytes".into()))]), "`text` must be a str or None, found bytes"),
            (
                dict(&[two.clone(), ("token_ts", Plain::Float(1.0))]),
                "`token_ts` must be a list of seconds or None, found float 1",
            ),
            (
                dict(&[two.clone(), ("token_ts", Plain::List(vec![Plain::Float(1.0), Plain::Str("x".into())]))]),
                "`token_ts[1]` must be a number of seconds, found str 'x'",
            ),
            (
                dict(&[("output_token_ids", Plain::List(vec![Plain::Int(1), Plain::Float(2.0)]))]),
                "`output_token_ids[1]` must be a token id (an int in 0..=2^32-1), found float 2",
            ),
            (
                dict(&[two.clone(), ("output_token_ids", ids(&[1]))]),
                "`output_tokens` is 2 but `output_token_ids` has 1 ids",
            ),
            (
                dict(&[two.clone(), ("first_token_time", Plain::Float(1.0))]),
                "unknown field `first_token_time` (did you mean `first_token_ts`?) (known: request_id, prompt_tokens, \
                 output_tokens, output_token_ids, text, finish_reason, arrival_time, queued_ts, scheduled_ts, \
                 first_token_ts, last_token_ts, token_ts, cached_tokens, embedding_dims)",
            ),
            (Plain::List(vec![]), "expected a dict, found list of 0"),
        ] {
            check(output, Err(message));
        }
    }

    #[test]
    fn the_list_itself_is_checked() {
        assert_eq!(
            map_outputs("m:C", &Plain::None, 1),
            Err("m:C.generate() must return a list of dicts, found None".into())
        );
        assert_eq!(
            map_outputs("m:C", &Plain::List(vec![]), 2),
            Err("m:C.generate() returned 0 outputs for 2 requests".into())
        );
    }

    #[test]
    fn finish_reasons() {
        for (given, expected) in [
            (Some("length"), FinishReason::Length),
            (Some("stop"), FinishReason::Stop),
            (Some("abort"), FinishReason::Abort),
            (Some("repetition"), FinishReason::Other("repetition".into())),
            (None, FinishReason::Unknown),
        ] {
            assert_eq!(finish_reason(given), expected, "{given:?}");
        }
    }

    #[test]
    fn info_needs_a_name_and_a_version_and_may_name_its_clock() {
        let info = |items: &[(&str, Plain)]| map_info("m:C", &dict(items), ClockDomain::Monotonic);
        let s = |v: &str| Plain::Str(v.into());
        let echo = EngineInfo {
            name: "echo".into(),
            version: "1".into(),
            resolved_config: None,
            processes: None,
            engine_thread: None,
        };
        assert_eq!(info(&[("name", s("echo")), ("version", s("1"))]), Ok(echo.clone()));
        assert_eq!(info(&[("name", s("echo")), ("version", s("1")), ("clock", s("monotonic"))]), Ok(echo.clone()));
        let foreign = [("name", s("echo")), ("version", s("1")), ("clock", s("foreign"))];
        assert_eq!(map_info("m:C", &dict(&foreign), ClockDomain::Foreign), Ok(echo.clone()));
        let pids = [("name", s("echo")), ("version", s("1")), ("processes", Plain::List(vec![Plain::Int(42)]))];
        assert_eq!(info(&pids), Ok(echo.with_processes(vec![42])));
        assert_eq!(
            info(&foreign),
            Err("m:C.start() says clock = \"foreign\" but the engine is configured with clock = \"monotonic\": \
                 set `engine.python.clock = \"foreign\"`"
                .into())
        );
        for (items, message) in [
            (vec![("version", s("1"))], "`name` is missing: it must be a non-empty str"),
            (vec![("name", s("e")), ("version", Plain::Int(1))], "`version` must be a str or None, found int 1"),
            (
                vec![("name", s("e")), ("version", s("1")), ("clock", s("wall"))],
                "`clock` must be \"monotonic\" or \"foreign\", found 'wall'",
            ),
            (
                vec![("name", s("e")), ("version", s("1")), ("vendor", s("x"))],
                "unknown field `vendor` (known: name, version, clock, model_chat_template, engine_config, processes)",
            ),
            (
                vec![("name", s("e")), ("version", s("1")), ("processes", Plain::List(vec![s("core")]))],
                "`processes` must hold pids (int >= 1), found str 'core'",
            ),
            (
                vec![("name", s("e")), ("version", s("1")), ("processes", Plain::Int(7))],
                "`processes` must be a list of pids (int) or None, found int 7",
            ),
        ] {
            assert_eq!(info(&items), Err(format!("m:C.start() returned a bad info dict: {message}")));
        }
        assert_eq!(
            map_info("m:C", &Plain::None, ClockDomain::Monotonic),
            Err("m:C.start() returned a bad info dict: expected a dict, found None".into())
        );
    }

    fn vllm_config(replace: &[(&str, Plain)], drop: &str) -> Plain {
        let mut items = vec![
            ("max_num_seqs", Plain::Int(256)),
            ("max_num_batched_tokens", Plain::Int(4096)),
            ("num_kv_blocks", Plain::Int(4096)),
            ("block_size", Plain::Int(128)),
            ("prefix_caching", Plain::Bool(true)),
            ("chunked_prefill", Plain::Bool(true)),
        ];
        for (key, value) in replace {
            match items.iter_mut().find(|(k, _)| k == key) {
                Some(item) => item.1 = value.clone(),
                None => items.push((key, value.clone())),
            }
        }
        items.retain(|(k, _)| *k != drop);
        dict(&items)
    }

    #[test]
    fn info_carries_the_resolved_engine_config() {
        let s = |v: &str| Plain::Str(v.into());
        let info = |config: Plain| {
            map_info(
                "m:C",
                &dict(&[("name", s("vllm")), ("version", s("1")), ("engine_config", config)]),
                ClockDomain::Monotonic,
            )
        };
        let expected = ResolvedEngineConfig {
            max_num_seqs: 256,
            max_num_batched_tokens: 4096,
            num_kv_blocks: 4096,
            block_size: 128,
            prefix_caching: true,
            chunked_prefill: true,
        };
        assert_eq!(info(vllm_config(&[], "")).map(|i| i.resolved_config), Ok(Some(expected)));
        assert_eq!(info(Plain::None).map(|i| i.resolved_config), Ok(None), "None: the engine cannot say");
        for (config, message) in [
            (vllm_config(&[], "num_kv_blocks"), "`num_kv_blocks` is missing: it must be an int"),
            (vllm_config(&[], "chunked_prefill"), "`chunked_prefill` is missing: it must be a bool"),
            (vllm_config(&[("block_size", Plain::Int(0))], ""), "`block_size` must be at least 1, found int 0"),
            (
                vllm_config(&[("max_num_seqs", Plain::Float(2.5))], ""),
                "`max_num_seqs` must be an int in 0..=4294967295 or None, found float 2.5",
            ),
            (
                vllm_config(&[("prefix_caching", Plain::Int(1))], ""),
                "`prefix_caching` must be a bool or None, found int 1",
            ),
            (
                vllm_config(&[("num_gpu_blocks", Plain::Int(1))], ""),
                "unknown field `num_gpu_blocks` (did you mean `num_kv_blocks`?) (known: max_num_seqs, \
                 max_num_batched_tokens, num_kv_blocks, block_size, prefix_caching, chunked_prefill)",
            ),
            (Plain::Int(3), "expected a dict, found int 3"),
        ] {
            assert_eq!(
                info(config).map(|i| i.resolved_config),
                Err(format!("m:C.start() returned a bad info dict: `engine_config`: {message}"))
            );
        }
    }

    #[test]
    fn info_says_whether_the_engine_templates_chat_prompts() {
        let s = |v: &str| Plain::Str(v.into());
        let info = |extra: Option<Plain>| {
            let mut items = vec![("name", s("e")), ("version", s("1"))];
            if let Some(v) = extra {
                items.push(("model_chat_template", v));
            }
            map_chat_support("m:C", &dict(&items))
        };
        assert_eq!(info(None), Ok(ChatSupport::None));
        assert_eq!(info(Some(Plain::None)), Ok(ChatSupport::None));
        assert_eq!(info(Some(Plain::Bool(true))), Ok(ChatSupport::ModelTemplate));
        assert_eq!(info(Some(Plain::Bool(false))), Ok(ChatSupport::NoModelTemplate));
        assert_eq!(
            info(Some(s("yes"))),
            Err("m:C.start() returned a bad info dict: `model_chat_template` must be a bool or None, found str 'yes'"
                .into())
        );
    }
}
