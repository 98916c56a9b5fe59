//! Prompt files of every format, read into [`PromptLine`]s: batchlab's JSONL, ShareGPT
//! conversations (a JSON array or JSONL) and plain text (one prompt per line), then filtered or
//! truncated to the lengths the scenario asks for.
//!
//! Every bad entry is reported with the file, its line and (where the JSON parser knows it) its
//! column, all of them at once (up to [`MAX_REPORTED_LINES`]), so a user fixes a file in one pass;
//! with `skip_bad_lines` they are skipped instead and counted in [`DatasetStats`], which the
//! report shows. Blank lines are never bad (a trailing newline is not an entry).
//!
//! Lengths are counted by the workload's [`TokenCounter`]: the model's tokenizer
//! (`workload.tokenizer`), else batchlab's one rule ([`crate::engine::tokens`]). A text prompt is
//! counted as a text prompt (with the tokenizer's special tokens), a token prompt by its ids, a
//! chat prompt by its messages' contents (a template's own tokens are the engine's business). The
//! report's prompt token counts are the engine's.

use std::path::Path;

use serde::Serialize;
use serde_json::Value;
use serde_json::value::RawValue;

use super::error::{LineProblem, LoadError, MAX_REPORTED_LINES};
use super::file::{DatasetStats, FileFormat};
use super::jsonl::{self, Columns, LinePrompt, Problem, PromptLine};
use crate::engine::chat::Message;
use crate::engine::tokenizer::TokenCounter;

/// How a workload file is read: the `[workload]` keys of `source = "file"` besides `path`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct DatasetOptions {
    /// `format`.
    pub format: FileFormat,
    /// `columns`: the JSON key of each field.
    pub columns: Columns,
    /// `skip_bad_lines`: skip and count bad entries instead of failing.
    pub skip_bad_lines: bool,
    /// `min_prompt_tokens`: shorter prompts are dropped.
    pub min_prompt_tokens: Option<u32>,
    /// `max_prompt_tokens`: longer prompts are dropped, or truncated with `truncate`.
    pub max_prompt_tokens: Option<u32>,
    /// `truncate`: cut prompts longer than `max_prompt_tokens` down to it.
    pub truncate: bool,
    /// `reply_max_tokens` (ShareGPT): the recorded reply's length is the request's `max_tokens`.
    pub reply_max_tokens: bool,
}

/// An entry: its 1-based line, and what it holds or what is wrong with it.
type Entry = (usize, Result<PromptLine, Problem>);

/// Reads a whole workload file's bytes. `origin` names the file in messages.
pub(crate) fn read(
    bytes: &[u8],
    origin: &Path,
    options: &DatasetOptions,
    counter: &TokenCounter,
) -> Result<(Vec<PromptLine>, DatasetStats), LoadError> {
    let entries = match options.format {
        FileFormat::Jsonl => {
            lines(bytes).map(|(n, line)| (n, line.and_then(|l| jsonl::parse_line(l, &options.columns)))).collect()
        }
        FileFormat::Text => {
            lines(bytes).map(|(n, line)| (n, line.map(|l| PromptLine::new(LinePrompt::Text(l.to_owned()))))).collect()
        }
        FileFormat::ShareGpt => sharegpt(bytes, options, counter).map_err(|problem| LoadError::BadLines {
            path: origin.to_owned(),
            problems: vec![problem],
            omitted: 0,
        })?,
    };
    let mut stats = DatasetStats {
        path: origin.to_owned(),
        format: options.format,
        entries: entries.len(),
        skipped_bad_lines: 0,
        dropped_short: 0,
        dropped_long: 0,
        truncated: 0,
        prompts: 0,
    };
    let mut problems = Vec::new();
    let mut omitted = 0;
    let mut kept = Vec::with_capacity(entries.len());
    for (line, entry) in entries {
        match entry {
            Ok(prompt) => kept.push(prompt),
            Err(_) if options.skip_bad_lines => stats.skipped_bad_lines += 1,
            Err((column, message)) if problems.len() < MAX_REPORTED_LINES => {
                problems.push(LineProblem { line, column, message })
            }
            Err(_) => omitted += 1,
        }
    }
    if !problems.is_empty() {
        return Err(LoadError::BadLines { path: origin.to_owned(), problems, omitted });
    }
    if stats.entries == 0 {
        return Err(LoadError::EmptyFile { path: origin.to_owned() });
    }
    let prompts: Vec<PromptLine> = kept.into_iter().filter_map(|p| fit(p, options, counter, &mut stats)).collect();
    stats.prompts = prompts.len();
    if prompts.is_empty() {
        let counting = match counter {
            TokenCounter::FourBytes => "by batchlab's rule, 4 bytes a token".to_owned(),
            TokenCounter::Tokenizer(t) => format!("in the tokens of `workload.tokenizer` {}", t.path().display()),
        };
        return Err(LoadError::NoPromptsLeft { stats: Box::new(stats), counting });
    }
    Ok((prompts, stats))
}

/// The `timestamp` of every line of a JSONL trace, in file order; every bad line is reported
/// (nothing is skipped or filtered: line `i` is request `i`'s arrival).
pub(crate) fn trace(bytes: &[u8], origin: &Path, columns: &Columns) -> Result<Vec<f64>, LoadError> {
    let mut problems = Vec::new();
    let mut omitted = 0;
    let mut kept = Vec::new();
    for (n, line) in lines(bytes) {
        match line.and_then(|l| jsonl::parse_line(l, columns)) {
            Ok(parsed) => kept.push((n, parsed)),
            Err((column, message)) if problems.len() < MAX_REPORTED_LINES => {
                problems.push(LineProblem { line: n, column, message })
            }
            Err(_) => omitted += 1,
        }
    }
    if !problems.is_empty() {
        return Err(LoadError::BadLines { path: origin.to_owned(), problems, omitted });
    }
    if kept.is_empty() {
        return Err(LoadError::EmptyFile { path: origin.to_owned() });
    }
    let numbered: Vec<(usize, &PromptLine)> = kept.iter().map(|(n, line)| (*n, line)).collect();
    jsonl::trace_timestamps(&numbered, origin)
}

/// The non-blank lines of a file, 1-based, each decoded as UTF-8 on its own (so one bad byte is
/// one bad line); a trailing `\r` is dropped.
fn lines(bytes: &[u8]) -> impl Iterator<Item = (usize, Result<&str, Problem>)> {
    bytes.split(|&b| b == b'\n').enumerate().filter_map(|(i, raw)| {
        let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
        let line = std::str::from_utf8(raw)
            .map_err(|e| (Some(e.valid_up_to() + 1), "invalid UTF-8; expected text".to_owned()));
        match line {
            Ok(l) if l.trim().is_empty() => None,
            other => Some((i + 1, other)),
        }
    })
}

/// ShareGPT entries: a JSON array of conversations (its first non-blank byte is `[`), else one
/// conversation per line. A file that is not valid JSON at all is one problem, never skipped.
fn sharegpt(bytes: &[u8], options: &DatasetOptions, counter: &TokenCounter) -> Result<Vec<Entry>, LineProblem> {
    let columns = &options.columns;
    let parse = |value: Value| conversation(&value, columns, options.reply_max_tokens, counter);
    if bytes.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'[') {
        return Ok(lines(bytes)
            .map(|(n, line)| {
                let entry =
                    line.and_then(|l| serde_json::from_str(l).map_err(|e| jsonl::json_problem(&e))).and_then(parse);
                (n, entry)
            })
            .collect());
    }
    let text = std::str::from_utf8(bytes).map_err(|e| {
        let (line, column) = position(bytes, e.valid_up_to());
        LineProblem {
            line,
            column: Some(column),
            message: "invalid UTF-8; expected a JSON array of conversations".into(),
        }
    })?;
    let items: Vec<&RawValue> = serde_json::from_str(text).map_err(|e| LineProblem {
        line: e.line(),
        column: Some(e.column()),
        message: format!("invalid JSON ({}); expected a JSON array of conversations", message_of(&e)),
    })?;
    let mut entries = Vec::with_capacity(items.len());
    // Entries come in file order: count the newlines between one and the next (linear in the file).
    let (mut line, mut counted) = (1, 0);
    for item in items {
        // A raw value borrows its text from `text`: its offset is where the entry starts.
        let offset = item.get().as_ptr() as usize - text.as_ptr() as usize;
        line += bytes[counted..offset].iter().filter(|&&b| b == b'\n').count();
        counted = offset;
        let entry = serde_json::from_str(item.get()).map_err(|e| jsonl::json_problem(&e)).and_then(parse);
        entries.push((line, entry));
    }
    Ok(entries)
}

/// 1-based line and column of byte `offset`.
fn position(bytes: &[u8], offset: usize) -> (usize, usize) {
    let before = &bytes[..offset.min(bytes.len())];
    let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
    let column = offset - before.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1) + 1;
    (line, column)
}

fn message_of(e: &serde_json::Error) -> String {
    let what = e.to_string();
    what.split(" at line ").next().unwrap_or_default().to_owned()
}

/// One ShareGPT conversation: the turns up to the last human one are the prompt; the reply after
/// it, if any, sets `max_tokens` when `reply_max_tokens`.
fn conversation(
    value: &Value,
    columns: &Columns,
    reply_max_tokens: bool,
    counter: &TokenCounter,
) -> Result<PromptLine, Problem> {
    let Value::Object(map) = value else {
        return Err((None, format!("expected a conversation object, found {}", jsonl::kind(value))));
    };
    jsonl::check_near_misses(map, columns, Columns::SHAREGPT_FIELDS)?;
    let key = &columns.conversations;
    let turns = match map.get(key) {
        Some(Value::Array(turns)) => turns,
        Some(other) => {
            return Err((
                None,
                format!("expected `{key}` to be a list of {{\"from\", \"value\"}} turns, found {}", jsonl::kind(other)),
            ));
        }
        None => return Err((None, format!("missing `{key}` (expected a list of {{\"from\", \"value\"}} turns)"))),
    };
    let mut messages = Vec::with_capacity(turns.len());
    for (i, turn) in turns.iter().enumerate() {
        let Value::Object(t) = turn else {
            return Err((
                None,
                format!("expected `{key}[{i}]` to be a {{\"from\", \"value\"}} object, found {}", jsonl::kind(turn)),
            ));
        };
        let role = match t.get("from") {
            Some(Value::String(from)) => sharegpt_role(from).ok_or_else(|| {
                (None, format!("`{key}[{i}].from` is \"{from}\"; expected \"human\", \"gpt\" or \"system\""))
            })?,
            Some(other) => {
                return Err((None, format!("expected `{key}[{i}].from` to be a string, found {}", jsonl::kind(other))));
            }
            None => {
                return Err((None, format!("missing `{key}[{i}].from` (expected \"human\", \"gpt\" or \"system\")")));
            }
        };
        let content = match t.get("value") {
            Some(Value::String(s)) => s.clone(),
            Some(other) => {
                return Err((
                    None,
                    format!("expected `{key}[{i}].value` to be a string, found {}", jsonl::kind(other)),
                ));
            }
            None => return Err((None, format!("missing `{key}[{i}].value` (expected a string)"))),
        };
        messages.push(Message::new(role, content));
    }
    let Some(last_user) = messages.iter().rposition(|m| m.role == "user") else {
        return Err((None, format!("`{key}` has no \"human\" turn; expected at least one")));
    };
    let reply =
        messages.get(last_user + 1).filter(|m| m.role == "assistant").map(|m| counter.content_tokens(&m.content));
    messages.truncate(last_user + 1);
    let max_tokens = match reply {
        Some(n) if reply_max_tokens => Some(u32::try_from(n).unwrap_or(u32::MAX).max(1)),
        _ => None,
    };
    Ok(PromptLine { prompt: LinePrompt::Chat(messages), max_tokens, timestamp: None })
}

/// ShareGPT's speakers as chat roles.
fn sharegpt_role(from: &str) -> Option<&'static str> {
    Some(match from {
        "human" | "user" => "user",
        "gpt" | "assistant" | "chatgpt" => "assistant",
        "system" => "system",
        _ => return None,
    })
}

/// A prompt's length by `counter`; see the module docs.
pub(crate) fn prompt_len(prompt: &LinePrompt, counter: &TokenCounter) -> usize {
    match prompt {
        LinePrompt::Text(s) => counter.text_tokens(s),
        LinePrompt::Tokens(t) => t.len(),
        LinePrompt::Chat(messages) => messages.iter().map(|m| counter.content_tokens(&m.content)).sum(),
    }
}

/// The prompt within the length limits, truncated where asked; `None` when dropped.
fn fit(
    mut line: PromptLine,
    options: &DatasetOptions,
    counter: &TokenCounter,
    stats: &mut DatasetStats,
) -> Option<PromptLine> {
    let len = prompt_len(&line.prompt, counter);
    if options.min_prompt_tokens.is_some_and(|min| len < min as usize) {
        stats.dropped_short += 1;
        return None;
    }
    let Some(max) = options.max_prompt_tokens.map(|m| m as usize).filter(|&max| len > max) else {
        return Some(line);
    };
    if options.truncate && truncate(&mut line.prompt, max, counter) {
        stats.truncated += 1;
        return Some(line);
    }
    stats.dropped_long += 1;
    None
}

/// Cuts `prompt` to `max` tokens by `counter`: text and token ids at the end, a conversation in
/// its last message. `false` when it cannot be cut (the earlier messages alone are too long, or a
/// cut leaves nothing).
fn truncate(prompt: &mut LinePrompt, max: usize, counter: &TokenCounter) -> bool {
    match prompt {
        LinePrompt::Text(s) => {
            *s = counter.truncate_text(s, max);
            !s.is_empty()
        }
        LinePrompt::Tokens(t) => {
            t.truncate(max);
            !t.is_empty()
        }
        LinePrompt::Chat(messages) => {
            let Some((last, earlier)) = messages.split_last_mut() else { return false };
            let used: usize = earlier.iter().map(|m| counter.content_tokens(&m.content)).sum();
            let Some(room) = max.checked_sub(used).filter(|&room| room > 0) else { return false };
            last.content = counter.truncate_content(&last.content, room);
            !last.content.is_empty()
        }
    }
}

#[cfg(test)]
mod tests;
