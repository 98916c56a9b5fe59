//! Prompt files: one JSON object per line, `{"prompt": "...", "max_tokens": 64}`.
//!
//! A line carries exactly one of `prompt` (text), `prompt_token_ids` (a list of token ids) or
//! `messages` (OpenAI-style chat, a list of `{"role", "content"}`), and optionally `max_tokens` and
//! `timestamp` (seconds, any origin: when the request arrived, for a trace profile).
//! The JSON key of each field can be renamed by `workload.columns` ([`Columns`]), so a dataset
//! keeps its own names. Keys that are not a field are ignored, so converted datasets may keep
//! their own fields, except near-misses such as `max_token`, which would otherwise silently fall
//! back to the default.
//!
//! Parsing is a pure function of one line ([`parse_line`]), so tests need no files; which lines
//! are errors and which are skipped is the dataset reader's business (`loadgen/dataset.rs`).
//!
//! # Adding a field
//! A field is a member of [`PromptLine`], its JSON key in [`Columns`] (with its entry in
//! [`Columns::FIELDS`], which drives near-miss detection and the names `workload.columns`
//! accepts), and one statement in [`parse_line`] reading it (as `optional_u32` reads
//! `max_tokens`).

use serde::Serialize;
use serde_json::{Map, Value};

use std::path::Path;

use super::error::{LineProblem, LoadError, MAX_REPORTED_LINES};
use crate::engine::chat::Message;

/// A line's prompt, before the workload's request format applies.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LinePrompt {
    /// `prompt`: text, tokenized by the engine.
    Text(String),
    /// `prompt_token_ids`: token ids, as they are.
    Tokens(Vec<u32>),
    /// `messages`: a conversation, templated by the engine.
    Chat(Vec<Message>),
}

/// One usable line (or dataset entry) of a prompt file.
#[derive(Clone, Debug, PartialEq)]
pub struct PromptLine {
    /// What to continue.
    pub prompt: LinePrompt,
    /// `None` when the line has no `max_tokens`; the workload's default applies.
    pub max_tokens: Option<u32>,
    /// When the request arrived, in seconds (finite, >= 0, any origin): a trace profile replays
    /// lines at these.
    pub timestamp: Option<f64>,
}

impl PromptLine {
    /// A line with only a prompt.
    pub fn new(prompt: LinePrompt) -> Self {
        PromptLine { prompt, max_tokens: None, timestamp: None }
    }
}

/// The JSON key each field of a line is read from: `workload.columns`. Every key defaults to the
/// field's name.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Columns {
    /// JSONL: the text prompt.
    pub prompt: String,
    /// JSONL: the token-id prompt.
    pub prompt_token_ids: String,
    /// JSONL: the chat prompt.
    pub messages: String,
    /// JSONL: the request's `max_tokens`.
    pub max_tokens: String,
    /// JSONL: when the request arrived, for a trace profile.
    pub timestamp: String,
    /// ShareGPT: the list of `{from, value}` turns.
    pub conversations: String,
}

impl Default for Columns {
    fn default() -> Self {
        let mut c = Columns {
            prompt: String::new(),
            prompt_token_ids: String::new(),
            messages: String::new(),
            max_tokens: String::new(),
            timestamp: String::new(),
            conversations: String::new(),
        };
        for field in Columns::FIELDS {
            *c.key_mut(field).expect("a field") = (*field).to_owned();
        }
        c
    }
}

impl Columns {
    /// Every field's name, as `workload.columns` writes it.
    pub const FIELDS: &[&str] = &["prompt", "prompt_token_ids", "messages", "max_tokens", "timestamp", "conversations"];
    /// The fields of a JSONL line.
    pub const JSONL_FIELDS: &[&str] = &["prompt", "prompt_token_ids", "messages", "max_tokens", "timestamp"];
    /// The fields of a ShareGPT entry.
    pub const SHAREGPT_FIELDS: &[&str] = &["conversations"];

    /// The JSON key of `field`, or `None` for a name that is no field.
    pub fn key(&self, field: &str) -> Option<&str> {
        Some(match field {
            "prompt" => &self.prompt,
            "prompt_token_ids" => &self.prompt_token_ids,
            "messages" => &self.messages,
            "max_tokens" => &self.max_tokens,
            "timestamp" => &self.timestamp,
            "conversations" => &self.conversations,
            _ => return None,
        })
    }

    /// The JSON key of `field`, to set it.
    pub fn key_mut(&mut self, field: &str) -> Option<&mut String> {
        Some(match field {
            "prompt" => &mut self.prompt,
            "prompt_token_ids" => &mut self.prompt_token_ids,
            "messages" => &mut self.messages,
            "max_tokens" => &mut self.max_tokens,
            "timestamp" => &mut self.timestamp,
            "conversations" => &mut self.conversations,
            _ => return None,
        })
    }

    /// `(field, key)` for every field whose key is not its own name.
    pub fn renamed(&self) -> impl Iterator<Item = (&'static str, &str)> {
        Columns::FIELDS.iter().filter_map(|f| self.key(f).filter(|k| k != f).map(|k| (*f, k)))
    }

    /// The JSON keys of `fields`.
    fn keys<'a>(&'a self, fields: &'a [&str]) -> impl Iterator<Item = &'a str> + 'a {
        fields.iter().filter_map(|f| self.key(f))
    }
}

/// A bad line: `(column, message)`; the column where the JSON parser knows it.
pub(crate) type Problem = (Option<usize>, String);

/// One JSONL line. `columns` names its keys.
pub(crate) fn parse_line(raw: &str, columns: &Columns) -> Result<PromptLine, Problem> {
    let map = parse_object(raw)?;
    check_near_misses(&map, columns, Columns::JSONL_FIELDS)?;
    let prompt = line_prompt(&map, columns)?;
    let max_tokens = optional_u32(&map, &columns.max_tokens, 1)?;
    let timestamp = optional_seconds(&map, &columns.timestamp)?;
    Ok(PromptLine { prompt, max_tokens, timestamp })
}

/// A line as a JSON object.
pub(crate) fn parse_object(raw: &str) -> Result<Map<String, Value>, Problem> {
    let value: Value = serde_json::from_str(raw).map_err(|e| json_problem(&e))?;
    match value {
        Value::Object(map) => Ok(map),
        other => Err((None, format!("expected a JSON object, found {}", kind(&other)))),
    }
}

/// serde_json's message without its "at line 1 column N" (the column is reported on its own).
pub(crate) fn json_problem(e: &serde_json::Error) -> Problem {
    let what = e.to_string();
    let what = what.split(" at line ").next().unwrap_or_default().to_owned();
    (Some(e.column()), format!("invalid JSON ({what}); expected a JSON object"))
}

/// An unknown key within two edits of a field's key is a typo, not a dataset's own field.
pub(crate) fn check_near_misses(map: &Map<String, Value>, columns: &Columns, fields: &[&str]) -> Result<(), Problem> {
    for key in map.keys() {
        if columns.keys(fields).any(|k| k == key) {
            continue;
        }
        if let Some(known) = columns.keys(fields).find(|known| strsim::levenshtein(key, known) <= 2) {
            return Err((None, format!("unknown key `{key}`; did you mean `{known}`?")));
        }
    }
    Ok(())
}

/// Exactly one of the prompt keys.
fn line_prompt(map: &Map<String, Value>, columns: &Columns) -> Result<LinePrompt, Problem> {
    let (text, ids, chat) = (&columns.prompt, &columns.prompt_token_ids, &columns.messages);
    let present: Vec<&str> =
        [text, ids, chat].into_iter().filter(|k| map.contains_key(*k)).map(String::as_str).collect();
    match present.as_slice() {
        [] => Err((None, format!("missing `{text}` (expected a string; or `{ids}` or `{chat}`)"))),
        [_] if map.contains_key(text) => text_prompt(&map[text], text).map(LinePrompt::Text),
        [_] if map.contains_key(ids) => token_ids(&map[ids], ids).map(LinePrompt::Tokens),
        [_] => messages(&map[chat], chat).map(LinePrompt::Chat),
        [a, b, ..] => Err((None, format!("expected one of `{text}`, `{ids}` or `{chat}`, found both `{a}` and `{b}`"))),
    }
}

fn text_prompt(v: &Value, key: &str) -> Result<String, Problem> {
    match v {
        Value::String(s) if !s.is_empty() => Ok(s.clone()),
        Value::String(_) => Err((None, format!("expected `{key}` to be non-empty"))),
        other => Err((None, format!("expected `{key}` to be a string, found {}", kind(other)))),
    }
}

/// The items of a non-empty JSON list of `what`.
fn non_empty_list<'v>(v: &'v Value, key: &str, what: &str) -> Result<&'v [Value], Problem> {
    match v {
        Value::Array(items) if items.is_empty() => Err((None, format!("expected `{key}` to be non-empty"))),
        Value::Array(items) => Ok(items),
        other => Err((None, format!("expected `{key}` to be a list of {what}, found {}", kind(other)))),
    }
}

fn token_ids(v: &Value, key: &str) -> Result<Vec<u32>, Problem> {
    non_empty_list(v, key, "token ids")?
        .iter()
        .enumerate()
        .map(|(i, item)| {
            item.as_u64().and_then(|n| u32::try_from(n).ok()).ok_or_else(|| {
                (
                    None,
                    format!("expected `{key}[{i}]` to be a token id (an integer from 0 to {}), found {item}", u32::MAX),
                )
            })
        })
        .collect()
}

/// OpenAI-style messages: a non-empty list of `{"role": str, "content": str}`.
pub(crate) fn messages(v: &Value, key: &str) -> Result<Vec<Message>, Problem> {
    non_empty_list(v, key, "{\"role\", \"content\"} objects")?
        .iter()
        .enumerate()
        .map(|(i, item)| {
            let Value::Object(m) = item else {
                return Err((
                    None,
                    format!("expected `{key}[{i}]` to be a {{\"role\", \"content\"}} object, found {}", kind(item)),
                ));
            };
            let field = |name: &str, nonempty: bool| match m.get(name) {
                Some(Value::String(s)) if !nonempty || !s.is_empty() => Ok(s.clone()),
                Some(Value::String(_)) => Err((None, format!("expected `{key}[{i}].{name}` to be non-empty"))),
                Some(other) => {
                    Err((None, format!("expected `{key}[{i}].{name}` to be a string, found {}", kind(other))))
                }
                None => Err((None, format!("missing `{key}[{i}].{name}` (expected a string)"))),
            };
            Ok(Message::new(field("role", true)?, field("content", false)?))
        })
        .collect()
}

/// `key` as a finite number of seconds >= 0; `None` when missing or null.
pub(crate) fn optional_seconds(map: &Map<String, Value>, key: &str) -> Result<Option<f64>, Problem> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => match v.as_f64() {
            Some(t) if t.is_finite() && t >= 0.0 => Ok(Some(t)),
            _ => Err((None, format!("expected `{key}` to be a number of seconds >= 0, found {v}"))),
        },
    }
}

/// The arrival times of a trace: every kept line's `timestamp`, `lines` being the workload's
/// lines with their 1-based line numbers. A line without one, or earlier than the line before,
/// is reported (up to [`MAX_REPORTED_LINES`]).
pub(crate) fn trace_timestamps(lines: &[(usize, &PromptLine)], origin: &Path) -> Result<Vec<f64>, LoadError> {
    let mut problems = Vec::new();
    let mut omitted = 0;
    let mut timestamps = Vec::with_capacity(lines.len());
    let mut previous: Option<f64> = None;
    for &(line_no, line) in lines {
        let problem = match (line.timestamp, previous) {
            (None, _) => Some(
                "missing `timestamp` (a trace profile replays every line at its recorded time, in seconds)".to_owned(),
            ),
            (Some(t), Some(p)) if t < p => {
                Some(format!("`timestamp` {t} is before the previous line's {p}: a trace must be in time order"))
            }
            (Some(t), _) => {
                timestamps.push(t);
                previous = Some(t);
                None
            }
        };
        if let Some(message) = problem {
            if problems.len() < MAX_REPORTED_LINES {
                problems.push(LineProblem { line: line_no, column: None, message });
            } else {
                omitted += 1;
            }
        }
    }
    if !problems.is_empty() {
        return Err(LoadError::BadLines { path: origin.to_owned(), problems, omitted });
    }
    Ok(timestamps)
}

/// `key` as an integer from `min` to `u32::MAX`; `None` when missing or null.
pub(crate) fn optional_u32(map: &Map<String, Value>, key: &str, min: u32) -> Result<Option<u32>, Problem> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => match v.as_u64().and_then(|n| u32::try_from(n).ok()) {
            Some(n) if n >= min => Ok(Some(n)),
            _ => Err((None, format!("expected `{key}` to be an integer from {min} to {}, found {v}", u32::MAX))),
        },
    }
}

pub(crate) fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(s: &str) -> LinePrompt {
        LinePrompt::Text(s.into())
    }

    /// `Ok((prompt, max_tokens))` or `Err(text the message contains)`.
    fn check(raw: &str, columns: &Columns, expected: Result<(LinePrompt, Option<u32>), &str>) {
        match (parse_line(raw, columns), expected) {
            (Ok(line), Ok((prompt, max_tokens))) => {
                assert_eq!((line.prompt, line.max_tokens), (prompt, max_tokens), "{raw}")
            }
            (Err((_, message)), Err(needle)) => {
                assert!(message.contains(needle), "{raw}: {message:?} should contain {needle:?}")
            }
            (got, want) => panic!("{raw}: got {got:?}, expected {want:?}"),
        }
    }

    #[test]
    fn good_lines() {
        let c = Columns::default();
        check(r#"{"prompt": "a"}"#, &c, Ok((text("a"), None)));
        check(r#"{"prompt": "a", "max_tokens": 5, "id": 7}"#, &c, Ok((text("a"), Some(5))));
        check(r#"{"prompt": "x", "max_tokens": null}"#, &c, Ok((text("x"), None)));
        check(r#"{"prompt": "x", "max_tokens": 4294967295}"#, &c, Ok((text("x"), Some(u32::MAX))));
        check(r#"{"prompt_token_ids": [0, 5, 4294967295]}"#, &c, Ok((LinePrompt::Tokens(vec![0, 5, u32::MAX]), None)));
        let chat = r#"{"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": ""}], "max_tokens": 9}"#;
        let messages = vec![Message::new("system", "Be brief."), Message::new("user", "")];
        check(chat, &c, Ok((LinePrompt::Chat(messages), Some(9))));
    }

    #[test]
    fn columns_rename_the_keys() {
        let mut c = Columns::default();
        *c.key_mut("prompt").unwrap() = "question".into();
        *c.key_mut("max_tokens").unwrap() = "answer_len".into();
        check(r#"{"question": "why?", "answer_len": 12, "prompt": 3}"#, &c, Ok((text("why?"), Some(12))));
        check(
            r#"{"prompt": "why?"}"#,
            &c,
            Err("missing `question` (expected a string; or `prompt_token_ids` or `messages`)"),
        );
        check(r#"{"questio": "why?"}"#, &c, Err("unknown key `questio`; did you mean `question`?"));
        check(r#"{"question": "x", "answer_len": 0}"#, &c, Err("expected `answer_len` to be an integer from 1"));
        assert_eq!(c.renamed().collect::<Vec<_>>(), [("prompt", "question"), ("max_tokens", "answer_len")]);
        assert_eq!(Columns::default().renamed().count(), 0);
    }

    #[test]
    fn bad_lines_say_what_was_found_and_expected() {
        let c = Columns::default();
        for (raw, needle) in [
            (r#"{"prompt": 3}"#, "expected `prompt` to be a string, found a number"),
            (r#"{"max_tokens": 3}"#, "missing `prompt`"),
            (r#"{"prompt": "a", "max_tokens": 0}"#, "integer from 1"),
            (r#"{"prompt": "a", "max_tokens": 2.5}"#, "found 2.5"),
            (r#"{"prompt": "a", "max_tokens": -1}"#, "found -1"),
            (r#"{"prompt": "a", "max_tokens": 4294967296}"#, "found 4294967296"),
            (r#"{"prompt": "a", "max_token": 3}"#, "did you mean `max_tokens`"),
            (r#"["prompt"]"#, "expected a JSON object, found an array"),
            (r#"{"prompt": "a""#, "invalid JSON"),
            (r#"{"prompt": ""}"#, "non-empty"),
            (r#"{"prompt": "a", "messages": []}"#, "found both `prompt` and `messages`"),
            (r#"{"prompt_token_ids": []}"#, "expected `prompt_token_ids` to be non-empty"),
            (r#"{"prompt_token_ids": [1, -2]}"#, "expected `prompt_token_ids[1]` to be a token id"),
            (r#"{"prompt_token_ids": "1 2"}"#, "to be a list of token ids, found a string"),
            (
                r#"{"messages": "hi"}"#,
                "expected `messages` to be a list of {\"role\", \"content\"} objects, found a string",
            ),
            (r#"{"messages": []}"#, "expected `messages` to be non-empty"),
            (
                r#"{"messages": ["hi"]}"#,
                "expected `messages[0]` to be a {\"role\", \"content\"} object, found a string",
            ),
            (r#"{"messages": [{"role": "user"}]}"#, "missing `messages[0].content`"),
            (r#"{"messages": [{"role": "", "content": "x"}]}"#, "expected `messages[0].role` to be non-empty"),
            (
                r#"{"messages": [{"role": "user", "content": [{"type": "text"}]}]}"#,
                "`messages[0].content` to be a string, found an array",
            ),
        ] {
            check(raw, &c, Err(needle));
        }
    }

    #[test]
    fn invalid_json_reports_its_column() {
        let (column, message) = parse_line("{\"prompt\": x}", &Columns::default()).unwrap_err();
        assert_eq!(column, Some(12));
        assert_eq!(message, "invalid JSON (expected value); expected a JSON object");
    }

    #[test]
    fn optional_numbers() {
        let map = parse_object(r#"{"n": 3, "null": null, "s": "x"}"#).unwrap();
        assert_eq!(optional_u32(&map, "n", 1), Ok(Some(3)));
        assert_eq!(optional_u32(&map, "null", 1), Ok(None));
        assert_eq!(optional_u32(&map, "missing", 1), Ok(None));
        assert!(optional_u32(&map, "n", 4).unwrap_err().1.contains("expected `n` to be an integer from 4"));
        assert!(optional_u32(&map, "s", 0).unwrap_err().1.contains("found \"x\""));
    }
}
