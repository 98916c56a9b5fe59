//! One streamed response, sans IO: its events in, each with the time its bytes arrived, and each
//! choice's tokens, times, counts and finish reason out.
//!
//! A choice is the prompt at its `index` in the request. Its tokens are timed by the arrival of
//! the chunks that carry them (`choices[].index` says whose chunk it is), so one request of many
//! prompts gives each prompt its own first token, gaps and last token.
//!
//! **Tokens per chunk.** A chunk carries `k` tokens of its choice, where `k` comes from, in order:
//! the choice's running `usage.completion_tokens` (vLLM's `continuous_usage_stats`: `k` is what
//! it grew by since the tokens already counted), the `token_ids` the chunk returns, or else 1 when
//! the chunk has text (`text`, a chat `delta.content` or reasoning) and 0 when it has none (a chat
//! stream's first `role` chunk, a bare finish). The chunk's arrival time is written once per token,
//! `k` times, so every token has a time: the gaps inside one chunk are 0, and the gap to the next
//! chunk is the time the server took to send them. That is the field's per-gap definition (vLLM's
//! and SGLang's `itl` append one gap per chunk; with `k` tokens in a chunk they count one gap
//! where there were `k`), and it keeps `token_ts` one per generated token, as the mapper checks.
//!
//! **Counts.** A choice's output tokens are the server's usage for that choice where it gives one
//! (continuous usage, or the final usage of a one-prompt request), else the number of token ids it
//! returned, else the tokens counted from chunks; [`TokenCountSource`] says which.
//!
//! **Bounds.** With [`ResponseStream::with_max_tokens`], a choice that goes past what was asked
//! fails alone ([`ChoiceError`]): more tokens than `max_tokens` (by any count: chunks, token ids,
//! running or final usage), or more bytes of text and ids than [`choice_byte_cap`]. Nothing more of
//! a failed choice is kept, so a server that floods holds at most the cap per choice in memory;
//! the other choices of the request go on and keep their outputs.

use serde_json::{Map, Value};

use super::chunk::{Chunk, Object, read as read_chunk};

use crate::engine::{FinishReason, TokenCountSource};

/// What a choice's stream gave, once it finished.
#[derive(Clone, Debug, PartialEq)]
pub struct ChoiceResult {
    /// Arrival time of each token (seconds on our monotonic clock), `k` times for a chunk of `k`.
    pub token_ts: Vec<f64>,
    /// The generated text, all chunks joined.
    pub text: String,
    /// Why it stopped.
    pub finish_reason: FinishReason,
    /// Output tokens, and where that count came from.
    pub output_tokens: u32,
    /// Where `output_tokens` came from.
    pub source: TokenCountSource,
    /// The token ids the server returned, if it did.
    pub token_ids: Option<Vec<u32>>,
    /// The prompt's tokens, from the server's usage for this choice.
    pub prompt_tokens: Option<u32>,
    /// Prompt tokens served from the server's prefix cache, from the usage of a one-prompt request.
    pub cached_tokens: Option<u32>,
}

/// Why a stream cannot be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StreamError {
    /// Something that is not the API's shape.
    #[error("{0}")]
    Malformed(String),
    /// The server sent an error object in the stream (vLLM does when generation fails mid-way).
    #[error("the server sent an error in the stream{}: {message}", .status.map(|s| format!(" ({s})")).unwrap_or_default())]
    Server {
        /// The error's `code`, when it is an HTTP status.
        status: Option<u16>,
        /// The error's message.
        message: String,
    },
}

/// Why one choice of a response is refused while the others may be fine.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ChoiceError {
    /// More tokens than the request asked for.
    #[error("server sent {sent} tokens for max_tokens = {max_tokens}")]
    TooManyTokens {
        /// The count the server's chunks or usage reached.
        sent: u64,
        /// What the request asked for.
        max_tokens: u32,
    },
    /// More bytes (text and token ids) than a choice of `max_tokens` tokens can need.
    #[error("server sent more than {cap} bytes for one prompt of max_tokens = {max_tokens}")]
    TooManyBytes {
        /// The cap, [`choice_byte_cap`] of `max_tokens`.
        cap: u64,
        /// What the request asked for.
        max_tokens: u32,
    },
}

/// Bytes of text a choice may have whatever its `max_tokens`.
pub const CHOICE_BASE_BYTES: u64 = 64 << 10;
/// Bytes of text per asked-for token a choice may have on top of [`CHOICE_BASE_BYTES`] (a token's
/// text is a few bytes; the longest in common vocabularies are well under this).
pub const CHOICE_BYTES_PER_TOKEN: u64 = 256;

/// Most bytes of text and token ids (4 bytes each) one choice of `max_tokens` may hold.
pub fn choice_byte_cap(max_tokens: u32) -> u64 {
    CHOICE_BASE_BYTES + CHOICE_BYTES_PER_TOKEN * u64::from(max_tokens)
}

/// The usage numbers batchlab reads.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Usage {
    prompt_tokens: Option<u32>,
    completion_tokens: Option<u32>,
    cached_tokens: Option<u32>,
}

#[derive(Clone, Debug, Default)]
struct ChoiceState {
    token_ts: Vec<f64>,
    text: String,
    finish: Option<FinishReason>,
    /// The choice's own usage, the latest one (continuous usage is a running total).
    usage: Option<Usage>,
    token_ids: Option<Vec<u32>>,
    /// Bytes of text and token ids taken so far.
    bytes: u64,
    /// Refused: nothing more of it is kept.
    failed: Option<ChoiceError>,
}

impl ChoiceState {
    fn settled(&self) -> bool {
        self.finish.is_some() || self.failed.is_some()
    }
}

/// The decoder of one streamed response of `choices` prompts.
#[derive(Debug)]
pub struct ResponseStream {
    choices: Vec<ChoiceState>,
    chat: bool,
    done: bool,
    /// The usage of a chunk without choices: the whole request's.
    total_usage: Option<Usage>,
    /// What each choice asked for; `u32::MAX` when unbounded.
    max_tokens: u32,
}

impl ResponseStream {
    /// A response to a request of `choices` prompts; `chat` for the chat API's chunk shape.
    pub fn new(choices: usize, chat: bool) -> Self {
        ResponseStream {
            choices: vec![ChoiceState::default(); choices],
            chat,
            done: false,
            total_usage: None,
            max_tokens: u32::MAX,
        }
    }

    /// Every choice asked for at most `max_tokens`: one that sends more, in tokens or in bytes,
    /// fails alone ([`ChoiceError`]).
    pub fn with_max_tokens(self, max_tokens: u32) -> Self {
        ResponseStream { max_tokens, ..self }
    }

    /// Takes one event's data, which arrived at `at` (seconds on our monotonic clock).
    pub fn handle(&mut self, data: &str, at: f64) -> Result<(), StreamError> {
        if self.done {
            return Ok(()); // nothing counts after `[DONE]`
        }
        if data.trim() == "[DONE]" {
            self.done = true;
            return Ok(());
        }
        match read_chunk(data) {
            Some(chunk) => self.handle_chunk(chunk, at),
            None => self.handle_value(data, at),
        }
    }

    /// A chunk of the common shape, read without a JSON tree ([`super::chunk`]).
    fn handle_chunk(&mut self, chunk: Chunk<'_>, at: f64) -> Result<(), StreamError> {
        let usage = chunk.usage.as_ref().map(read_usage).transpose()?;
        let choices = chunk.choices.unwrap_or_default();
        if choices.is_empty() && usage.is_some() {
            self.total_usage = usage;
        }
        let own_usage = usage.filter(|_| choices.len() == 1);
        for Object(choice) in choices {
            let index = checked_index(choice.index.flatten(), self.choices.len())?;
            let content = if self.chat {
                choice.delta.as_ref().map_or("", |Object(delta)| delta.text())
            } else {
                choice.text.unwrap_or_default()
            };
            self.take(index, content, choice.token_ids, choice.finish_reason, at, own_usage);
        }
        Ok(())
    }

    /// Any event, read as a JSON value: every shape the API allows, and the errors of those it
    /// does not.
    fn handle_value(&mut self, data: &str, at: f64) -> Result<(), StreamError> {
        let value: Value = serde_json::from_str(data)
            .map_err(|e| StreamError::Malformed(format!("an event is not JSON ({e}): {}", excerpt(data))))?;
        let Value::Object(chunk) = value else {
            return Err(StreamError::Malformed(format!("an event is not a JSON object: {}", excerpt(data))));
        };
        if let Some(error) = chunk.get("error").filter(|e| !e.is_null()) {
            return Err(server_error(error));
        }
        let usage = match chunk.get("usage") {
            None | Some(Value::Null) => None,
            Some(u) => Some(read_usage(u)?),
        };
        let choices = match chunk.get("choices") {
            None | Some(Value::Null) => &[][..],
            Some(Value::Array(c)) => c.as_slice(),
            Some(other) => {
                return Err(StreamError::Malformed(format!(
                    "`choices` is not a list: {}",
                    excerpt(&other.to_string())
                )));
            }
        };
        if choices.is_empty() && usage.is_some() {
            self.total_usage = usage;
        }
        // A chunk of one choice with usage: that choice's own so far (vLLM's continuous usage).
        let own_usage = usage.filter(|_| choices.len() == 1);
        for choice in choices {
            self.handle_choice(choice, at, own_usage)?;
        }
        Ok(())
    }

    fn handle_choice(&mut self, choice: &Value, at: f64, own_usage: Option<Usage>) -> Result<(), StreamError> {
        let index = choice_index(choice, self.choices.len())?;
        let Value::Object(choice) = choice else { unreachable!("choice_index checked the shape") };
        let content = if self.chat { chat_content(choice)? } else { optional_str(choice, "text")?.unwrap_or_default() };
        let ids = match choice.get("token_ids") {
            None | Some(Value::Null) => None,
            Some(Value::Array(ids)) => Some(
                ids.iter()
                    .map(|id| id.as_u64().and_then(|id| u32::try_from(id).ok()))
                    .collect::<Option<Vec<u32>>>()
                    .ok_or_else(|| {
                        StreamError::Malformed("`token_ids` holds something that is not a token id".into())
                    })?,
            ),
            Some(_) => return Err(StreamError::Malformed("`token_ids` is not a list".into())),
        };
        let finish = optional_str(choice, "finish_reason")?;
        self.take(index, content, ids, finish, at, own_usage);
        Ok(())
    }

    /// One chunk's part for choice `index`: `content`, `ids` and `finish`, timed `at`.
    fn take(
        &mut self,
        index: usize,
        content: &str,
        ids: Option<Vec<u32>>,
        finish: Option<&str>,
        at: f64,
        own_usage: Option<Usage>,
    ) {
        let max_tokens = self.max_tokens;
        let state = &mut self.choices[index];
        if state.failed.is_some() {
            return; // refused already: nothing more of it is kept
        }
        if own_usage.is_some() {
            state.usage = own_usage;
        }
        let counted = state.token_ts.len();
        let tokens = match (own_usage.and_then(|u| u.completion_tokens), &ids) {
            (Some(total), _) => (total as usize).saturating_sub(counted),
            (None, Some(ids)) => ids.len(),
            (None, None) => usize::from(!content.is_empty()),
        };
        // Checked before anything is kept: a count or a flood past the bound costs nothing.
        let sent = (counted + tokens) as u64;
        if sent > u64::from(max_tokens) {
            state.failed = Some(ChoiceError::TooManyTokens { sent, max_tokens });
            return;
        }
        let id_bytes = ids.as_ref().map_or(0, |ids| 4 * ids.len() as u64);
        let bytes = state.bytes + content.len() as u64 + id_bytes;
        let cap = choice_byte_cap(max_tokens);
        if bytes > cap {
            state.failed = Some(ChoiceError::TooManyBytes { cap, max_tokens });
            return;
        }
        state.bytes = bytes;
        state.token_ts.extend(std::iter::repeat_n(at, tokens));
        state.text.push_str(content);
        if let Some(ids) = ids {
            state.token_ids.get_or_insert_with(Vec::new).extend(ids);
        }
        if let Some(reason) = finish {
            state.finish = Some(finish_reason(reason));
        }
    }

    /// Whether `[DONE]` came.
    pub fn done(&self) -> bool {
        self.done
    }

    /// Whether every choice has its finish reason or was refused.
    pub fn all_finished(&self) -> bool {
        self.choices.iter().all(ChoiceState::settled)
    }

    /// Whether every choice was refused: nothing more of the response is worth reading.
    pub fn all_failed(&self) -> bool {
        self.choices.iter().all(|c| c.failed.is_some())
    }

    /// How many choices finished (or were refused), of how many.
    pub fn finished_count(&self) -> (usize, usize) {
        (self.choices.iter().filter(|c| c.settled()).count(), self.choices.len())
    }

    /// Each choice's result, in index order; `None` unless every choice finished or was refused.
    pub fn finish(self) -> Option<Vec<Result<ChoiceResult, ChoiceError>>> {
        if !self.all_finished() {
            return None;
        }
        let max_tokens = self.max_tokens;
        // The request's own usage is the choice's when there is one choice.
        let single = self.choices.len() == 1;
        let total = self.total_usage.filter(|_| single);
        Some(
            self.choices
                .into_iter()
                .map(|c| {
                    if let Some(failed) = c.failed {
                        return Err(failed);
                    }
                    let usage = c.usage.or(total);
                    let (output_tokens, source) = match (usage.and_then(|u| u.completion_tokens), &c.token_ids) {
                        (Some(n), _) => (n, TokenCountSource::Usage),
                        (None, Some(ids)) => (count(ids.len()), TokenCountSource::TokenIds),
                        (None, None) => (count(c.token_ts.len()), TokenCountSource::Chunks),
                    };
                    // The final usage is read only now: it may claim more than the chunks did.
                    if output_tokens > max_tokens {
                        return Err(ChoiceError::TooManyTokens { sent: u64::from(output_tokens), max_tokens });
                    }
                    Ok(ChoiceResult {
                        token_ts: c.token_ts,
                        text: c.text,
                        finish_reason: c.finish.unwrap_or(FinishReason::Unknown),
                        output_tokens,
                        source,
                        token_ids: c.token_ids,
                        prompt_tokens: usage.and_then(|u| u.prompt_tokens),
                        cached_tokens: total.and_then(|u| u.cached_tokens),
                    })
                })
                .collect(),
        )
    }
}

fn count(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// The `index` of a choice, checked against the request's prompts.
fn choice_index(choice: &Value, choices: usize) -> Result<usize, StreamError> {
    let Value::Object(c) = choice else {
        return Err(StreamError::Malformed("a choice is not a JSON object".into()));
    };
    let index = match c.get("index") {
        None => None,
        Some(Value::Number(n)) => Some(n.as_u64().ok_or_else(|| StreamError::Malformed(format!("choice index {n}")))?),
        _ => return Err(StreamError::Malformed("a choice has no integer `index`".into())),
    };
    checked_index(index, choices)
}

/// A choice's `index` (absent: `None`), checked against the request's prompts.
fn checked_index(index: Option<u64>, choices: usize) -> Result<usize, StreamError> {
    let index = match index {
        Some(index) => index,
        // A server that leaves the index out of a one-choice stream still means choice 0.
        None if choices == 1 => 0,
        None => return Err(StreamError::Malformed("a choice has no integer `index`".into())),
    };
    usize::try_from(index)
        .ok()
        .filter(|&i| i < choices)
        .ok_or_else(|| StreamError::Malformed(format!("choice index {index}, but the request had {choices} prompts")))
}

/// A chat chunk's text: `delta.content`, or reasoning (`reasoning_content`, `reasoning`).
fn chat_content(choice: &Map<String, Value>) -> Result<&str, StreamError> {
    let delta = match choice.get("delta") {
        None | Some(Value::Null) => return Ok(""),
        Some(Value::Object(d)) => d,
        Some(_) => return Err(StreamError::Malformed("a chat chunk's `delta` is not an object".into())),
    };
    for key in ["content", "reasoning_content", "reasoning"] {
        if let Some(text) = optional_str(delta, key)?.filter(|t| !t.is_empty()) {
            return Ok(text);
        }
    }
    Ok("")
}

fn optional_str<'a>(object: &'a Map<String, Value>, key: &str) -> Result<Option<&'a str>, StreamError> {
    match object.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(StreamError::Malformed(format!("`{key}` is not a string"))),
    }
}

fn read_usage(value: &Value) -> Result<Usage, StreamError> {
    let Value::Object(u) = value else {
        return Err(StreamError::Malformed("`usage` is not an object".into()));
    };
    let number = |v: Option<&Value>| -> Result<Option<u32>, StreamError> {
        match v {
            None | Some(Value::Null) => Ok(None),
            Some(n) => n
                .as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .map(Some)
                .ok_or_else(|| StreamError::Malformed(format!("a usage count is not a token count: {n}"))),
        }
    };
    Ok(Usage {
        prompt_tokens: number(u.get("prompt_tokens"))?,
        completion_tokens: number(u.get("completion_tokens"))?,
        cached_tokens: number(u.get("prompt_tokens_details").and_then(|d| d.get("cached_tokens")))?,
    })
}

fn server_error(error: &Value) -> StreamError {
    let message =
        error.get("message").and_then(Value::as_str).map(str::to_owned).unwrap_or_else(|| excerpt(&error.to_string()));
    let status = error
        .get("code")
        .and_then(|c| c.as_u64().or_else(|| c.as_str().and_then(|s| s.parse().ok())))
        .and_then(|c| u16::try_from(c).ok())
        .filter(|c| (100..600).contains(c));
    StreamError::Server { status, message }
}

/// OpenAI's finish reason as batchlab's.
pub fn finish_reason(reason: &str) -> FinishReason {
    match reason {
        "length" => FinishReason::Length,
        "stop" => FinishReason::Stop,
        "abort" => FinishReason::Abort,
        other => FinishReason::Other(other.to_owned()),
    }
}

/// The start of a long text, for messages.
pub fn excerpt(text: &str) -> String {
    const MAX: usize = 200;
    match text.char_indices().nth(MAX) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn completion(index: u32, text: &str, finish: Option<&str>) -> String {
        serde_json::json!({"object": "text_completion", "choices": [{"index": index, "text": text, "finish_reason": finish}]})
            .to_string()
    }

    /// Every choice's result, all of them accepted.
    fn results(s: ResponseStream) -> Vec<ChoiceResult> {
        s.finish().expect("every choice settled").into_iter().map(|r| r.expect("accepted")).collect()
    }

    #[test]
    fn a_choice_past_its_max_tokens_fails_alone_by_every_count() {
        // Chunks of text: choice 1 sends a 5th token for max_tokens = 4; choice 0 sends 3 and stops.
        let mut s = ResponseStream::new(2, false).with_max_tokens(4);
        for (i, word) in ["a", "bb", "ccc"].iter().enumerate() {
            s.handle(&completion(0, word, None), i as f64).unwrap();
        }
        for i in 0..401 {
            s.handle(&completion(1, "x", None), 10.0 + f64::from(i)).unwrap();
        }
        s.handle(&completion(0, "", Some("stop")), 20.0).unwrap();
        assert!(s.all_finished() && !s.all_failed(), "the refused choice counts as settled");
        let r = s.finish().unwrap();
        let first = r[0].as_ref().expect("the healthy choice keeps its output");
        assert_eq!((first.text.as_str(), first.token_ts.clone()), ("abbccc", vec![0.0, 1.0, 2.0]));
        assert_eq!(r[1], Err(ChoiceError::TooManyTokens { sent: 5, max_tokens: 4 }));
        assert_eq!(r[1].clone().unwrap_err().to_string(), "server sent 5 tokens for max_tokens = 4");

        // Running usage that claims 401 at once.
        let mut s = ResponseStream::new(1, false).with_max_tokens(4);
        let usage = r#"{"choices": [{"index": 0, "text": "x", "finish_reason": "length"}], "usage": {"completion_tokens": 401}}"#;
        s.handle(usage, 1.0).unwrap();
        assert_eq!(s.finish().unwrap(), [Err(ChoiceError::TooManyTokens { sent: 401, max_tokens: 4 })]);

        // A final usage of a one-prompt request, read at the end.
        let mut s = ResponseStream::new(1, false).with_max_tokens(4);
        s.handle(&completion(0, "x", Some("length")), 1.0).unwrap();
        s.handle(r#"{"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 401}}"#, 2.0).unwrap();
        let r = s.finish().unwrap();
        assert_eq!(r, [Err(ChoiceError::TooManyTokens { sent: 401, max_tokens: 4 })]);
        assert_eq!(r[0].clone().unwrap_err().to_string(), "server sent 401 tokens for max_tokens = 4");

        // Exactly max_tokens is fine.
        let mut s = ResponseStream::new(1, false).with_max_tokens(2);
        s.handle(&completion(0, "a", None), 1.0).unwrap();
        s.handle(&completion(0, "b", Some("length")), 2.0).unwrap();
        assert_eq!(results(s)[0].output_tokens, 2);
    }

    #[test]
    fn a_flooding_choice_is_refused_at_its_byte_cap_and_nothing_more_is_kept() {
        let cap = choice_byte_cap(4);
        assert_eq!(cap, CHOICE_BASE_BYTES + 4 * CHOICE_BYTES_PER_TOKEN);
        let mut s = ResponseStream::new(2, false).with_max_tokens(4);
        let just_under = "y".repeat(cap as usize - 1);
        s.handle(&completion(0, &just_under, None), 1.0).unwrap();
        s.handle(&completion(0, "z", Some("stop")), 2.0).unwrap(); // exactly the cap
        let flood = "x".repeat(1 << 20);
        s.handle(&completion(1, "ok", None), 3.0).unwrap();
        s.handle(&completion(1, &flood, None), 4.0).unwrap();
        for _ in 0..3 {
            s.handle(&completion(1, &flood, None), 5.0).unwrap();
        }
        assert_eq!(s.choices[1].text, "ok", "nothing of a refused choice is kept");
        s.handle(&completion(1, "", Some("length")), 6.0).unwrap();
        let r = s.finish().unwrap();
        assert_eq!(r[0].as_ref().map(|c| c.text.len() as u64), Ok(cap));
        assert_eq!(r[1], Err(ChoiceError::TooManyBytes { cap, max_tokens: 4 }));
    }

    #[test]
    fn each_choice_is_timed_by_its_own_chunks() {
        let mut s = ResponseStream::new(2, false);
        s.handle(&completion(1, " a", None), 1.0).unwrap();
        s.handle(&completion(0, " b", None), 2.0).unwrap();
        s.handle(&completion(1, " c", Some("length")), 3.0).unwrap();
        assert!(!s.all_finished());
        s.handle(&completion(0, " d", Some("stop")), 4.0).unwrap();
        s.handle(r#"{"choices": [], "usage": {"prompt_tokens": 6, "completion_tokens": 4}}"#, 5.0).unwrap();
        s.handle("[DONE]", 5.0).unwrap();
        assert!(s.done() && s.all_finished());
        let r = results(s);
        assert_eq!((r[0].token_ts.clone(), r[0].text.as_str()), (vec![2.0, 4.0], " b d"));
        assert_eq!((r[1].token_ts.clone(), r[1].text.as_str()), (vec![1.0, 3.0], " a c"));
        assert_eq!(
            (r[0].finish_reason.clone(), r[1].finish_reason.clone()),
            (FinishReason::Stop, FinishReason::Length)
        );
        // Two prompts: the final usage is the request's total, nobody's own.
        assert_eq!((r[0].output_tokens, r[0].source, r[0].prompt_tokens), (2, TokenCountSource::Chunks, None));
    }

    #[test]
    fn continuous_usage_counts_several_tokens_in_one_chunk() {
        let chunk = |index: u32, text: &str, done: u32, finish: Option<&str>| {
            serde_json::json!({"choices": [{"index": index, "text": text, "finish_reason": finish}],
                "usage": {"prompt_tokens": 5 + index, "completion_tokens": done, "total_tokens": 5 + index + done}})
            .to_string()
        };
        let mut s = ResponseStream::new(2, false);
        s.handle(&chunk(0, "ab", 2, None), 1.0).unwrap(); // two tokens at once
        s.handle(&chunk(1, "x", 1, None), 1.5).unwrap();
        s.handle(&chunk(0, "", 3, None), 2.0).unwrap(); // a token with no text (held back by a stop string)
        s.handle(&chunk(0, "c", 4, Some("stop")), 3.0).unwrap();
        s.handle(&chunk(1, "y", 2, Some("length")), 3.5).unwrap();
        let r = results(s);
        assert_eq!(r[0].token_ts, vec![1.0, 1.0, 2.0, 3.0]);
        assert_eq!((r[0].output_tokens, r[0].source, r[0].prompt_tokens), (4, TokenCountSource::Usage, Some(5)));
        assert_eq!((r[1].token_ts.clone(), r[1].output_tokens, r[1].prompt_tokens), (vec![1.5, 3.5], 2, Some(6)));
    }

    #[test]
    fn token_ids_count_when_there_is_no_usage() {
        let mut s = ResponseStream::new(1, false);
        s.handle(r#"{"choices": [{"index": 0, "text": "hi", "token_ids": [7, 8]}]}"#, 1.0).unwrap();
        s.handle(r#"{"choices": [{"index": 0, "text": "", "token_ids": [9], "finish_reason": "stop"}]}"#, 2.0).unwrap();
        let r = results(s);
        assert_eq!((r[0].token_ts.clone(), r[0].token_ids.clone()), (vec![1.0, 1.0, 2.0], Some(vec![7, 8, 9])));
        assert_eq!((r[0].output_tokens, r[0].source), (3, TokenCountSource::TokenIds));
    }

    #[test]
    fn a_one_prompt_request_takes_the_final_usage_as_its_own() {
        let mut s = ResponseStream::new(1, true);
        s.handle(r#"{"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}"#, 1.0).unwrap();
        s.handle(r#"{"choices": [{"index": 0, "delta": {"content": "Hi"}}]}"#, 2.0).unwrap();
        s.handle(r#"{"choices": [{"index": 0, "delta": {"reasoning_content": "hmm"}}]}"#, 3.0).unwrap();
        s.handle(r#"{"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}"#, 4.0).unwrap();
        let usage = r#"{"choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 2, "prompt_tokens_details": {"cached_tokens": 4}}}"#;
        s.handle(usage, 4.5).unwrap();
        let r = results(s);
        assert_eq!(r[0].token_ts, vec![2.0, 3.0], "the role chunk and the bare finish carry no token");
        assert_eq!((r[0].output_tokens, r[0].source), (2, TokenCountSource::Usage));
        assert_eq!((r[0].prompt_tokens, r[0].cached_tokens, r[0].text.as_str()), (Some(9), Some(4), "Hihmm"));
    }

    #[test]
    fn malformed_chunks_and_server_errors_are_told_apart() {
        let malformed = [
            "not json",
            "[1, 2]",
            r#"{"choices": 3}"#,
            r#"{"choices": [{"index": 2, "text": "x"}]}"#,
            r#"{"choices": [{"index": 0, "text": 5}]}"#,
        ];
        for data in malformed {
            let e = ResponseStream::new(2, false).handle(data, 0.0).unwrap_err();
            assert!(matches!(e, StreamError::Malformed(_)), "{data}: {e:?}");
        }
        let e =
            ResponseStream::new(1, false).handle(r#"{"error": {"message": "boom", "code": 500}}"#, 0.0).unwrap_err();
        assert_eq!(e, StreamError::Server { status: Some(500), message: "boom".into() });
        // Unfinished choices give no result.
        let mut s = ResponseStream::new(2, false);
        s.handle(&completion(0, "a", Some("stop")), 1.0).unwrap();
        assert_eq!(s.finished_count(), (1, 2));
        assert!(s.finish().is_none());
    }
    /// Every event of the corpus, read the fast way ([`super::super::chunk`], falling back to the
    /// tree) and as a JSON value alone, gives the same result and leaves the same state, on a
    /// stream of one choice and of two, completions and chat: in turn on a stream bounded at 2
    /// tokens, and each alone on a fresh one.
    #[test]
    fn the_typed_chunk_reads_every_event_as_the_json_value_does() {
        let corpus = [
            r#"{"choices": [{"index": 0, "text": "a"}]}"#,
            r#"{"choices": [{"index": 1, "text": "b", "finish_reason": "length"}]}"#,
            r#"{"choices": [{"text": "no index"}]}"#,
            r#"{"choices": [{"index": null, "text": "null index"}]}"#,
            r#"{"choices": [{"index": 0, "text": null, "finish_reason": null}], "usage": null}"#,
            r#"{"choices": [{"index": 0, "text": "esc\"aped\n"}]}"#,
            r#"{"choices": [{"index": 0, "text": "a", "text": "twice"}]}"#,
            r#"{"choices": [{"index": 0, "text": "ids", "token_ids": [1, 2, 3]}]}"#,
            r#"{"choices": [{"index": 0, "token_ids": [1, -2]}]}"#,
            r#"{"choices": [{"index": 0, "token_ids": "12"}]}"#,
            r#"{"choices": [{"index": 1.0, "text": "x"}]}"#,
            r#"{"choices": [{"index": -1, "text": "x"}]}"#,
            r#"{"choices": [{"index": 7, "text": "x"}]}"#,
            r#"{"choices": [[0, "a list"]]}"#,
            r#"{"choices": [{"index": 0, "text": "a"}, {"index": 1, "text": "b", "finish_reason": "stop"}]}"#,
            r#"{"choices": [{"index": 0, "text": "u"}], "usage": {"prompt_tokens": 3, "completion_tokens": 5}}"#,
            r#"{"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2, "prompt_tokens_details": {"cached_tokens": 1}}}"#,
            r#"{"choices": [], "usage": {"completion_tokens": "2"}}"#,
            r#"{"choices": [], "usage": 4}"#,
            r#"{"choices": 3}"#,
            r#"{"choices": null}"#,
            r#"{}"#,
            r#"[null, null, null]"#,
            r#"{"error": {"message": "boom", "code": 500}, "choices": []}"#,
            r#"{"error": null, "choices": [{"index": 0, "text": "e"}]}"#,
            r#"{"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}"#,
            r#"{"choices": [{"index": 0, "delta": {"content": "Hi"}, "finish_reason": "stop"}]}"#,
            r#"{"choices": [{"index": 0, "delta": {"content": "", "reasoning_content": "hmm"}}]}"#,
            r#"{"choices": [{"index": 0, "delta": {"reasoning": "r", "content": 5}}]}"#,
            r#"{"choices": [{"index": 0, "delta": {"reasoning_content": "r", "content": "c"}}]}"#,
            r#"{"choices": [{"index": 0, "delta": {"content": "c", "reasoning": 5}}]}"#,
            r#"{"choices": [{"index": 0, "delta": null, "text": "t"}]}"#,
            r#"{"choices": [{"index": 0, "delta": "d", "text": "t"}]}"#,
            r#"{"choices": [{"index": 0, "text": "tail"}]} "#,
            "not json",
        ];
        for chat in [false, true] {
            for prompts in [1, 2] {
                let (mut fast, mut tree) = (
                    ResponseStream::new(prompts, chat).with_max_tokens(2),
                    ResponseStream::new(prompts, chat).with_max_tokens(2),
                );
                for (i, data) in corpus.iter().enumerate() {
                    let at = i as f64;
                    assert_eq!(fast.handle(data, at), tree.handle_value(data, at), "chat {chat}, {prompts}: {data}");
                    assert_eq!(format!("{fast:?}"), format!("{tree:?}"), "chat {chat}, {prompts}: {data}");
                    // And alone, on a fresh stream (the one above may have refused a choice by now).
                    let (mut fast, mut tree) = (ResponseStream::new(prompts, chat), ResponseStream::new(prompts, chat));
                    assert_eq!(
                        fast.handle(data, at),
                        tree.handle_value(data, at),
                        "alone, chat {chat}, {prompts}: {data}"
                    );
                    assert_eq!(format!("{fast:?}"), format!("{tree:?}"), "alone, chat {chat}, {prompts}: {data}");
                }
            }
        }
    }
}
