//! Prompt files: one JSON object per line, `{"prompt": "...", "max_tokens": 64}`, optionally with
//! a `timestamp` (seconds, any origin) for trace replay.
//!
//! Parsing is a pure function of the text so tests need no files. Every bad line is reported (up
//! to [`MAX_REPORTED_LINES`]) in one error, so a user fixes a file in one pass instead of one
//! line per run. Blank lines are skipped (a trailing newline is not a bad line). Keys other than
//! `prompt` and `max_tokens` are ignored, so converted datasets may keep their own fields, except
//! near-misses such as `max_token`, which would otherwise silently fall back to the default.

use std::path::Path;

use serde_json::Value;

use super::error::{LineProblem, LoadError, MAX_REPORTED_LINES};

/// One usable line of a prompt file.
#[derive(Clone, Debug, PartialEq)]
pub struct PromptLine {
    pub prompt: String,
    /// `None` when the line has no `max_tokens`; the workload's default applies.
    pub max_tokens: Option<u32>,
    /// When the request arrived, in seconds (any origin): a trace profile replays lines at these.
    pub timestamp: Option<f64>,
}

const KNOWN_KEYS: [&str; 3] = ["prompt", "max_tokens", "timestamp"];

/// Parses a whole prompt file. `origin` names the file in messages.
pub(crate) fn parse_jsonl(text: &str, origin: &Path) -> Result<Vec<PromptLine>, LoadError> {
    let mut lines = Vec::new();
    let mut problems = Vec::new();
    let mut omitted = 0;
    for (index, raw) in text.lines().enumerate() {
        if raw.trim().is_empty() {
            continue;
        }
        match parse_line(raw) {
            Ok(line) => lines.push(line),
            Err((column, message)) if problems.len() < MAX_REPORTED_LINES => {
                problems.push(LineProblem { line: index + 1, column, message })
            }
            Err(_) => omitted += 1,
        }
    }
    if !problems.is_empty() {
        return Err(LoadError::BadLines { path: origin.to_owned(), problems, omitted });
    }
    if lines.is_empty() {
        return Err(LoadError::EmptyFile { path: origin.to_owned() });
    }
    Ok(lines)
}

/// One line, or `(column, message)`.
fn parse_line(raw: &str) -> Result<PromptLine, (Option<usize>, String)> {
    let value: Value = serde_json::from_str(raw).map_err(|e| {
        // serde_json appends "at line 1 column N"; the column is reported on its own.
        let what = e.to_string();
        let what = what.split(" at line ").next().unwrap_or_default().to_owned();
        (Some(e.column()), format!("invalid JSON ({what}); expected a JSON object"))
    })?;
    let Value::Object(map) = value else {
        return Err((None, format!("expected a JSON object, found {}", kind(&value))));
    };
    for key in map.keys() {
        if let Some(known) = near_miss(key) {
            return Err((None, format!("unknown key `{key}`; did you mean `{known}`?")));
        }
    }
    let prompt = match map.get("prompt") {
        Some(Value::String(s)) if !s.is_empty() => s.clone(),
        Some(Value::String(_)) => return Err((None, "expected `prompt` to be non-empty".into())),
        Some(other) => {
            return Err((None, format!("expected `prompt` to be a string, found {}", kind(other))));
        }
        None => return Err((None, "missing `prompt` (expected a string)".into())),
    };
    let max_tokens = match map.get("max_tokens") {
        None | Some(Value::Null) => None,
        Some(v) => match v.as_u64().and_then(|n| u32::try_from(n).ok()) {
            Some(n) if n >= 1 => Some(n),
            _ => {
                return Err((
                    None,
                    format!("expected `max_tokens` to be an integer from 1 to {}, found {v}", u32::MAX),
                ));
            }
        },
    };
    let timestamp = match map.get("timestamp") {
        None | Some(Value::Null) => None,
        Some(v) => match v.as_f64() {
            Some(t) if t.is_finite() && t >= 0.0 => Some(t),
            _ => return Err((None, format!("expected `timestamp` to be a number of seconds >= 0, found {v}"))),
        },
    };
    Ok(PromptLine { prompt, max_tokens, timestamp })
}

/// The arrival times of a trace file: every line's `timestamp`, which must be there and never go
/// back in time. Every line without one, or earlier than the line before it, is reported.
pub(crate) fn trace_timestamps(text: &str, origin: &Path) -> Result<Vec<f64>, LoadError> {
    let lines = parse_jsonl(text, origin)?;
    let mut problems = Vec::new();
    let mut omitted = 0;
    let mut timestamps = Vec::with_capacity(lines.len());
    let mut previous: Option<f64> = None;
    let numbered = text.lines().enumerate().filter(|(_, raw)| !raw.trim().is_empty()).map(|(i, _)| i + 1);
    for (line_no, line) in numbered.zip(&lines) {
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

/// The known key an unknown key was probably meant to be.
fn near_miss(key: &str) -> Option<&'static str> {
    if KNOWN_KEYS.contains(&key) {
        return None;
    }
    KNOWN_KEYS.into_iter().find(|known| strsim::levenshtein(key, known) <= 2)
}

fn kind(v: &Value) -> &'static str {
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

    /// `Ok` lists `(prompt, max_tokens)`; `Err` lists `(line, text the message contains)`.
    type Expected<'a> = Result<Vec<(&'a str, Option<u32>)>, Vec<(usize, &'a str)>>;

    fn check(text: &str, expected: Expected) {
        let origin = Path::new("prompts.jsonl");
        match (parse_jsonl(text, origin), expected) {
            (Ok(lines), Ok(want)) => {
                let got: Vec<_> = lines.iter().map(|l| (l.prompt.as_str(), l.max_tokens)).collect();
                assert_eq!(got, want, "{text:?}");
            }
            (Err(LoadError::BadLines { path, problems, omitted }), Err(want)) => {
                assert_eq!(path, origin);
                assert_eq!(omitted, 0);
                assert_eq!(problems.len(), want.len(), "{problems:#?}");
                for (p, (line, needle)) in problems.iter().zip(want) {
                    assert_eq!(p.line, line, "{p:?}");
                    assert!(p.message.contains(needle), "{:?} should contain {needle:?}", p.message);
                }
            }
            (got, want) => panic!("{text:?}: got {got:?}, expected {want:?}"),
        }
    }

    #[test]
    fn good_files() {
        check(r#"{"prompt": "a"}"#, Ok(vec![("a", None)]));
        check(
            "{\"prompt\": \"a\", \"max_tokens\": 5}\n\n  \n{\"prompt\": \"b\", \"id\": 7}\n",
            Ok(vec![("a", Some(5)), ("b", None)]),
        );
        check(r#"{"prompt": "x", "max_tokens": null}"#, Ok(vec![("x", None)]));
        check(r#"{"prompt": "x", "max_tokens": 4294967295}"#, Ok(vec![("x", Some(u32::MAX))]));
    }

    #[test]
    fn bad_lines_are_all_reported_with_line_numbers() {
        let text = [
            r#"{"prompt": "fine"}"#,
            r#"{"prompt": 3}"#,
            r#"{"max_tokens": 3}"#,
            "",
            r#"{"prompt": "a", "max_tokens": 0}"#,
            r#"{"prompt": "a", "max_tokens": 2.5}"#,
            r#"{"prompt": "a", "max_tokens": -1}"#,
            r#"{"prompt": "a", "max_tokens": 4294967296}"#,
            r#"{"prompt": "a", "max_token": 3}"#,
            r#"["prompt"]"#,
            r#"{"prompt": "a""#,
            r#"{"prompt": ""}"#,
        ]
        .join("\n");
        check(
            &text,
            Err(vec![
                (2, "expected `prompt` to be a string, found a number"),
                (3, "missing `prompt`"),
                (5, "integer from 1"),
                (6, "found 2.5"),
                (7, "found -1"),
                (8, "found 4294967296"),
                (9, "did you mean `max_tokens`"),
                (10, "expected a JSON object, found an array"),
                (11, "invalid JSON"),
                (12, "non-empty"),
            ]),
        );
    }

    #[test]
    fn many_bad_lines_are_capped_and_counted() {
        let text = "nope\n".repeat(MAX_REPORTED_LINES + 5);
        let err = parse_jsonl(&text, Path::new("p.jsonl")).unwrap_err();
        let LoadError::BadLines { problems, omitted, .. } = &err else { panic!("{err:?}") };
        assert_eq!((problems.len(), *omitted), (MAX_REPORTED_LINES, 5));
        let message = err.to_string();
        assert!(message.starts_with("workload file p.jsonl has 25 bad lines:"), "{message}");
        assert!(
            message.contains("\n  p.jsonl:1:2: invalid JSON (expected ident); expected a JSON object\n"),
            "{message}"
        );
        assert!(message.ends_with("... and 5 more"), "{message}");
    }

    #[test]
    fn timestamps_are_optional_numbers() {
        let lines = parse_jsonl(
            "{\"prompt\": \"a\", \"timestamp\": 1.5}\n{\"prompt\": \"b\"}\n{\"prompt\": \"c\", \"timestamp\": 2}",
            Path::new("t.jsonl"),
        )
        .unwrap();
        let got: Vec<_> = lines.iter().map(|l| l.timestamp).collect();
        assert_eq!(got, [Some(1.5), None, Some(2.0)]);
        let text = [
            r#"{"prompt": "a", "timestamp": -1}"#,
            r#"{"prompt": "a", "timestamp": "3"}"#,
            r#"{"prompt": "a", "timestamps": 3}"#,
        ]
        .join("\n");
        check(
            &text,
            Err(vec![
                (1, "`timestamp` to be a number of seconds >= 0, found -1"),
                (2, "found \"3\""),
                (3, "did you mean `timestamp`"),
            ]),
        );
    }

    /// `Ok` lists the timestamps; `Err` lists `(line, text the message contains)`.
    fn check_trace(text: &str, expected: Result<Vec<f64>, Vec<(usize, &str)>>) {
        match (trace_timestamps(text, Path::new("trace.jsonl")), expected) {
            (Ok(got), Ok(want)) => assert_eq!(got, want),
            (Err(LoadError::BadLines { problems, .. }), Err(want)) => {
                let got: Vec<_> = problems.iter().map(|p| p.line).collect();
                assert_eq!(got, want.iter().map(|w| w.0).collect::<Vec<_>>(), "{problems:#?}");
                for (p, (_, needle)) in problems.iter().zip(want) {
                    assert!(p.message.contains(needle), "{:?} should contain {needle:?}", p.message);
                }
            }
            (got, want) => panic!("{text:?}: got {got:?}, expected {want:?}"),
        }
    }

    #[test]
    fn traces_need_ordered_timestamps_on_every_line() {
        let line = |t: &str| format!("{{\"prompt\": \"p\"{t}}}");
        let ok = [line(", \"timestamp\": 5"), String::new(), line(", \"timestamp\": 5"), line(", \"timestamp\": 7.25")];
        check_trace(&ok.join("\n"), Ok(vec![5.0, 5.0, 7.25]));
        let bad = [
            line(", \"timestamp\": 5"),
            line(""),
            String::new(),
            line(", \"timestamp\": 4"),
            line(", \"timestamp\": 6"),
        ];
        check_trace(&bad.join("\n"), Err(vec![(2, "missing `timestamp`"), (4, "4 is before the previous line's 5")]));
    }

    #[test]
    fn empty_files_are_errors() {
        for text in ["", "\n", "  \n\n"] {
            let err = parse_jsonl(text, Path::new("e.jsonl")).unwrap_err();
            assert!(matches!(err, LoadError::EmptyFile { .. }), "{text:?}: {err:?}");
            assert!(err.to_string().contains("e.jsonl has no prompts"), "{err}");
        }
    }
}
