//! The OpenAI request bodies the server takes, validated field by field, and the JSON it answers.
//!
//! Bodies are read as JSON values and checked one field at a time, so a 400 names the field
//! (`param`) as OpenAI's and vLLM's do. Fields the simulator has no use for (`temperature`,
//! `top_p`, `logprobs`, ...) are accepted and ignored, as real clients send them.

use serde_json::{Map, Value, json};

use crate::engine::chat::{Message, RequestFormat};
use crate::engine::image::{Image, ImageTokenRule, decode_data_url};
use crate::engine::{FinishReason, Prompt};

/// A request the server refuses, as OpenAI's error JSON.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("{message}")]
pub struct ApiError {
    /// The HTTP status.
    pub status: u16,
    /// What went wrong.
    pub message: String,
    /// The request field at fault, if one is.
    pub param: Option<String>,
    /// Seconds a client should wait before retrying (429, 503).
    pub retry_after: Option<u64>,
}

impl ApiError {
    /// A 400 about `param`.
    pub fn bad_field(param: &str, message: impl Into<String>) -> Self {
        ApiError { status: 400, message: message.into(), param: Some(param.into()), retry_after: None }
    }

    /// Any other status.
    pub fn status(status: u16, message: impl Into<String>) -> Self {
        ApiError { status, message: message.into(), param: None, retry_after: None }
    }

    /// The error object OpenAI clients read: `{"error": {message, type, param, code}}`.
    pub fn body(&self) -> Value {
        let kind = match self.status {
            400 => "BadRequestError",
            404 => "NotFoundError",
            408 => "RequestTimeoutError",
            413 => "RequestTooLargeError",
            429 => "RateLimitError",
            503 => "ServiceUnavailableError",
            _ => "InternalServerError",
        };
        json!({"error": {"message": self.message, "type": kind, "param": self.param, "code": self.status}})
    }
}

/// Which endpoint a request came to.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Endpoint {
    /// `POST /v1/completions`.
    Completions,
    /// `POST /v1/chat/completions`.
    Chat,
}

/// A validated generation request.
#[derive(Clone, Debug, PartialEq)]
pub struct GenerationRequest {
    /// The endpoint.
    pub endpoint: Endpoint,
    /// One prompt per choice (a completions `prompt` list gives several).
    pub prompts: Vec<Prompt>,
    /// Tokens each choice generates at most.
    pub max_tokens: u32,
    /// Tokens each choice generates at least (EOS cannot come earlier).
    pub min_tokens: u32,
    /// Generate exactly `max_tokens`.
    pub ignore_eos: bool,
    /// Answer as server-sent events.
    pub stream: bool,
    /// Send a usage chunk before `[DONE]`.
    pub include_usage: bool,
    /// Seed of the EOS draws.
    pub seed: Option<u64>,
}

/// Reads a request body for `endpoint`. `model` is the served model's name (another is a 404),
/// `default_max_tokens` applies when the body sets none, `format` renders chat messages.
pub fn parse_request(
    endpoint: Endpoint,
    body: &[u8],
    model: &str,
    default_max_tokens: u32,
    format: &RequestFormat,
    image_tokens: ImageTokenRule,
) -> Result<GenerationRequest, ApiError> {
    let obj = request_object(body, model)?;
    let prompts = match endpoint {
        Endpoint::Completions => prompt_list("prompt", obj.get("prompt"))?,
        Endpoint::Chat => vec![chat_prompt(obj.get("messages"), format, image_tokens)?],
    };
    let max_key = match endpoint {
        Endpoint::Chat if obj.get("max_completion_tokens").is_some_and(|v| !v.is_null()) => "max_completion_tokens",
        _ => "max_tokens",
    };
    let max_tokens = uint(&obj, max_key)?.unwrap_or(u64::from(default_max_tokens));
    if max_tokens < 1 {
        return Err(ApiError::bad_field(max_key, format!("`{max_key}` must be at least 1")));
    }
    let max_tokens = u32::try_from(max_tokens).map_err(|_| ApiError::bad_field(max_key, "too large"))?;
    let min_tokens = uint(&obj, "min_tokens")?.unwrap_or(0);
    if min_tokens > u64::from(max_tokens) {
        return Err(ApiError::bad_field(
            "min_tokens",
            format!("`min_tokens` ({min_tokens}) must be at most `{max_key}` ({max_tokens})"),
        ));
    }
    if let Some(n) = uint(&obj, "n")? {
        if n != 1 {
            return Err(ApiError::bad_field("n", "only `n` = 1 is supported"));
        }
    }
    let stream = boolean(&obj, "stream")?.unwrap_or(false);
    let include_usage = match obj.get("stream_options") {
        None | Some(Value::Null) => false,
        Some(Value::Object(o)) => match o.get("include_usage") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(_) => return Err(ApiError::bad_field("stream_options.include_usage", "must be a boolean")),
        },
        Some(_) => return Err(ApiError::bad_field("stream_options", "`stream_options` must be an object")),
    };
    if include_usage && !stream {
        return Err(ApiError::bad_field("stream_options", "`stream_options` is only allowed when `stream` is true"));
    }
    Ok(GenerationRequest {
        endpoint,
        prompts,
        max_tokens,
        min_tokens: min_tokens as u32,
        ignore_eos: boolean(&obj, "ignore_eos")?.unwrap_or(false),
        stream,
        include_usage,
        seed: uint(&obj, "seed")?,
    })
}

fn uint(obj: &Map<String, Value>, key: &str) -> Result<Option<u64>, ApiError> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .map(Some)
            .ok_or_else(|| ApiError::bad_field(key, format!("`{key}` must be a non-negative integer, not {v}"))),
    }
}

fn boolean(obj: &Map<String, Value>, key: &str) -> Result<Option<bool>, ApiError> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(v) => Err(ApiError::bad_field(key, format!("`{key}` must be a boolean, not {v}"))),
    }
}

/// A request body as a JSON object, for the served `model` (else 404; a missing or non-string
/// `model` is a 400 that names it).
pub(super) fn request_object(body: &[u8], model: &str) -> Result<Map<String, Value>, ApiError> {
    let value: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::status(400, format!("the request body is not valid JSON: {e}")))?;
    let Value::Object(obj) = value else {
        return Err(ApiError::status(400, "the request body must be a JSON object"));
    };
    match obj.get("model") {
        None | Some(Value::Null) => Err(ApiError::bad_field("model", "`model` is required")),
        Some(Value::String(m)) if m == model => Ok(obj),
        Some(Value::String(m)) => Err(ApiError {
            status: 404,
            message: format!("The model `{m}` does not exist."),
            param: Some("model".into()),
            retry_after: None,
        }),
        Some(_) => Err(ApiError::bad_field("model", "`model` must be a string")),
    }
}

/// `key` (completions' `prompt`, embeddings' `input`): a string, a list of strings, token ids, or
/// a list of token-id lists (OpenAI's four shapes), none of them empty.
pub(super) fn prompt_list(key: &str, value: Option<&Value>) -> Result<Vec<Prompt>, ApiError> {
    let bad = || {
        ApiError::bad_field(
            key,
            format!("`{key}` must be a string, a list of strings, token ids or a list of token-id lists"),
        )
    };
    let ids = |items: &[Value]| -> Result<Vec<u32>, ApiError> {
        items.iter().map(|v| v.as_u64().and_then(|n| u32::try_from(n).ok()).ok_or_else(bad)).collect()
    };
    let prompts = match value {
        None | Some(Value::Null) => return Err(ApiError::bad_field(key, format!("`{key}` is required"))),
        Some(Value::String(s)) => vec![Prompt::Text(s.clone())],
        Some(Value::Array(items)) if items.is_empty() => {
            return Err(ApiError::bad_field(key, format!("`{key}` must not be empty")));
        }
        Some(Value::Array(items)) => match &items[0] {
            Value::String(_) => items
                .iter()
                .map(|v| v.as_str().map(|s| Prompt::Text(s.into())).ok_or_else(bad))
                .collect::<Result<_, _>>()?,
            Value::Number(_) => vec![Prompt::Tokens(ids(items)?)],
            Value::Array(_) => items
                .iter()
                .map(|v| match v {
                    Value::Array(inner) if !inner.is_empty() => ids(inner).map(Prompt::Tokens),
                    _ => Err(bad()),
                })
                .collect::<Result<_, _>>()?,
            _ => return Err(bad()),
        },
        Some(_) => return Err(bad()),
    };
    // An empty text would still be counted as one token (the simulator's `[0]`): refuse it.
    if let Some(i) = prompts.iter().position(|p| matches!(p, Prompt::Text(s) if s.is_empty())) {
        let which = if prompts.len() > 1 { format!("{key} {i}") } else { format!("the {key}") };
        return Err(ApiError::bad_field(key, format!("{which} is empty: it must have at least one token")));
    }
    Ok(prompts)
}

/// An `image_url` part's image: its size read from its bytes, its tokens by `rule`, and its
/// identity a hash of its bytes (the same picture sent twice is the same image).
fn image_part(url: &str, rule: ImageTokenRule) -> Option<Image> {
    let (width, height, bytes) = decode_data_url(url)?;
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    std::hash::Hasher::write(&mut hasher, &bytes);
    Some(Image {
        url: url.into(),
        width,
        height,
        bytes: u32::try_from(bytes.len()).unwrap_or(u32::MAX),
        hash: std::hash::Hasher::finish(&hasher),
        pooled: false,
        tokens: rule.tokens(width, height),
    })
}

/// `messages`: a non-empty list of `{role, content}`, content a string or a list of parts: text,
/// and images (`image_url` with a `data:` URL, each charged `image_tokens`' tokens).
fn chat_prompt(
    messages: Option<&Value>,
    format: &RequestFormat,
    image_tokens: ImageTokenRule,
) -> Result<Prompt, ApiError> {
    let Some(Value::Array(items)) = messages else {
        return Err(ApiError::bad_field("messages", "`messages` must be a list of messages"));
    };
    if items.is_empty() {
        return Err(ApiError::bad_field("messages", "`messages` must not be empty"));
    }
    let mut out = Vec::with_capacity(items.len());
    for (i, m) in items.iter().enumerate() {
        let field = |f: &str| format!("messages[{i}].{f}");
        let role = m
            .get("role")
            .and_then(Value::as_str)
            .ok_or_else(|| ApiError::bad_field(&field("role"), format!("`{}` must be a string", field("role"))))?;
        let mut images = Vec::new();
        let content = match m.get("content") {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Null) | None => String::new(),
            Some(Value::Array(parts)) => {
                let mut text = String::new();
                for (j, part) in parts.iter().enumerate() {
                    let part_field = format!("messages[{i}].content[{j}]");
                    if let Some(t) = part.get("text").and_then(Value::as_str) {
                        text.push_str(t);
                    } else if let Some(url) = part.pointer("/image_url/url").and_then(Value::as_str) {
                        images.push(image_part(url, image_tokens).ok_or_else(|| {
                            ApiError::bad_field(
                                &part_field,
                                "`image_url.url` must be a base64 `data:image/…` URL of a JPEG or PNG image",
                            )
                        })?);
                    } else {
                        return Err(ApiError::bad_field(
                            &part_field,
                            "only `text` and `image_url` parts are supported",
                        ));
                    }
                }
                text
            }
            Some(_) => {
                return Err(ApiError::bad_field(&field("content"), format!("`{}` must be a string", field("content"))));
            }
        };
        out.push(Message::new(role, content).with_images(images));
    }
    Ok(format.prompt(out))
}

/// A `/tokenize` body: `{model?, prompt}` or `{model?, messages}` (as vLLM's, `model` optional).
pub fn parse_tokenize(
    body: &[u8],
    model: &str,
    format: &RequestFormat,
    image_tokens: ImageTokenRule,
) -> Result<Prompt, ApiError> {
    let obj = object(body, model)?;
    if obj.contains_key("messages") {
        return chat_prompt(obj.get("messages"), format, image_tokens);
    }
    match obj.get("prompt") {
        Some(Value::String(s)) => Ok(Prompt::Text(s.clone())),
        _ => Err(ApiError::bad_field("prompt", "`prompt` must be a string")),
    }
}

/// A `/detokenize` body: `{model?, tokens}`.
pub fn parse_detokenize(body: &[u8], model: &str) -> Result<Vec<u32>, ApiError> {
    let obj = object(body, model)?;
    let bad = || ApiError::bad_field("tokens", "`tokens` must be a list of token ids");
    match obj.get("tokens") {
        Some(Value::Array(items)) => {
            items.iter().map(|v| v.as_u64().and_then(|n| u32::try_from(n).ok()).ok_or_else(bad)).collect()
        }
        _ => Err(bad()),
    }
}

fn object(body: &[u8], model: &str) -> Result<Map<String, Value>, ApiError> {
    let Ok(Value::Object(obj)) = serde_json::from_slice::<Value>(body) else {
        return Err(ApiError::status(400, "the request body must be a JSON object"));
    };
    match obj.get("model") {
        None | Some(Value::Null) => {}
        Some(Value::String(m)) if m == model => {}
        Some(m) => {
            return Err(ApiError {
                status: 404,
                message: format!("The model {m} does not exist."),
                param: Some("model".into()),
                retry_after: None,
            });
        }
    }
    Ok(obj)
}

/// The text of token ids as the simulator counts text ([`crate::engine::sim::prompt::prompt_ids`]:
/// four bytes a token, little-endian), so `/detokenize` inverts `/tokenize`. Bytes that are not
/// UTF-8 (an id that splits a character) become U+FFFD.
pub fn ids_text(ids: &[u32]) -> String {
    let bytes: Vec<u8> = ids.iter().flat_map(|id| id.to_le_bytes()).filter(|&b| b != 0).collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// The text of output token `index`: the simulator has no vocabulary, so a word from a short list.
pub fn token_text(index: u32) -> &'static str {
    const WORDS: [&str; 8] = [" sim", " token", " of", " batch", " lab", " and", " the", " step"];
    WORDS[index as usize % WORDS.len()]
}

/// OpenAI's name of a finish reason.
pub fn finish_reason_name(reason: &FinishReason) -> &str {
    match reason {
        FinishReason::Length => "length",
        FinishReason::Stop => "stop",
        FinishReason::Abort => "abort",
        FinishReason::Other(s) => s,
        FinishReason::Unknown => "unknown",
    }
}

/// The `usage` object.
pub fn usage(prompt_tokens: u64, completion_tokens: u64) -> Value {
    json!({
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    })
}

/// What every chunk of one response repeats.
#[derive(Copy, Clone, Debug)]
pub struct ResponseHead<'a> {
    /// The endpoint answered.
    pub endpoint: Endpoint,
    /// The response's id (`cmpl-N`, `chatcmpl-N`).
    pub id: &'a str,
    /// Unix seconds.
    pub created: u64,
    /// The served model.
    pub model: &'a str,
}

/// One streamed chunk of choice `index`: a token's `text` (a chat `delta`), and its finish
/// reason on the last one. `first` adds the chat role.
pub fn stream_chunk(head: ResponseHead<'_>, index: u32, text: &str, finish: Option<&str>, first: bool) -> Value {
    let ResponseHead { endpoint, id, created, model } = head;
    match endpoint {
        Endpoint::Completions => json!({
            "id": id, "object": "text_completion", "created": created, "model": model,
            "choices": [{"index": index, "text": text, "logprobs": null, "finish_reason": finish, "stop_reason": null}],
        }),
        Endpoint::Chat => {
            let delta = if first { json!({"role": "assistant", "content": text}) } else { json!({"content": text}) };
            json!({
                "id": id, "object": "chat.completion.chunk", "created": created, "model": model,
                "choices": [{"index": index, "delta": delta, "logprobs": null, "finish_reason": finish}],
            })
        }
    }
}

/// The chunk that carries only the usage (`choices` empty), before `[DONE]`.
pub fn usage_chunk(head: ResponseHead<'_>, usage: Value) -> Value {
    let ResponseHead { endpoint, id, created, model } = head;
    let object = match endpoint {
        Endpoint::Completions => "text_completion",
        Endpoint::Chat => "chat.completion.chunk",
    };
    json!({"id": id, "object": object, "created": created, "model": model, "choices": [], "usage": usage})
}

/// A whole (non-streamed) response: one `(text, finish reason)` per choice.
pub fn full_response(head: ResponseHead<'_>, choices: &[(String, String)], usage: Value) -> Value {
    let ResponseHead { endpoint, id, created, model } = head;
    let choices: Vec<Value> = choices
        .iter()
        .enumerate()
        .map(|(i, (text, finish))| match endpoint {
            Endpoint::Completions => {
                json!({"index": i, "text": text, "logprobs": null, "finish_reason": finish, "stop_reason": null})
            }
            Endpoint::Chat => json!({
                "index": i, "message": {"role": "assistant", "content": text}, "logprobs": null, "finish_reason": finish,
            }),
        })
        .collect();
    let object = match endpoint {
        Endpoint::Completions => "text_completion",
        Endpoint::Chat => "chat.completion",
    };
    json!({"id": id, "object": object, "created": created, "model": model, "choices": choices, "usage": usage})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(body: &str) -> Result<GenerationRequest, ApiError> {
        parse_request(
            Endpoint::Completions,
            body.as_bytes(),
            "m",
            16,
            &RequestFormat::default(),
            ImageTokenRule::default(),
        )
    }

    #[test]
    fn every_prompt_shape_is_read() {
        let shapes = [
            (r#""hello""#, vec![Prompt::Text("hello".into())]),
            (r#"["a", "b"]"#, vec![Prompt::Text("a".into()), Prompt::Text("b".into())]),
            ("[1, 2, 3]", vec![Prompt::Tokens(vec![1, 2, 3])]),
            ("[[1], [2, 3]]", vec![Prompt::Tokens(vec![1]), Prompt::Tokens(vec![2, 3])]),
        ];
        for (prompt, expected) in shapes {
            let r = check(&format!(r#"{{"model": "m", "prompt": {prompt}}}"#)).unwrap();
            assert_eq!(r.prompts, expected, "{prompt}");
            assert_eq!(r.max_tokens, 16);
        }
    }

    #[test]
    fn detokenize_inverts_tokenize() {
        for text in ["", "abc", "abcd", "hello, batching world", "héllo wörld"] {
            let ids = crate::engine::sim::prompt::prompt_ids(&Prompt::Text(text.into())).unwrap();
            assert_eq!(ids_text(&ids), text);
        }
    }

    #[test]
    fn a_bad_field_is_named() {
        for (body, param, status) in [
            (r#"{"model": "m"}"#, "prompt", 400),
            (r#"{"prompt": "x"}"#, "model", 400),
            (r#"{"model": "other", "prompt": "x"}"#, "model", 404),
            (r#"{"model": "m", "prompt": "x", "max_tokens": -1}"#, "max_tokens", 400),
            (r#"{"model": "m", "prompt": "x", "max_tokens": 0}"#, "max_tokens", 400),
            (r#"{"model": "m", "prompt": "x", "max_tokens": 4, "min_tokens": 5}"#, "min_tokens", 400),
            (r#"{"model": "m", "prompt": [[]]}"#, "prompt", 400),
            (r#"{"model": "m", "prompt": ""}"#, "prompt", 400),
            (r#"{"model": "m", "prompt": ["a", ""]}"#, "prompt", 400),
            (r#"{"model": "m", "prompt": "x", "stream": "yes"}"#, "stream", 400),
            (r#"{"model": "m", "prompt": "x", "n": 2}"#, "n", 400),
        ] {
            let e = check(body).unwrap_err();
            assert_eq!((e.param.as_deref(), e.status), (Some(param), status), "{body}: {e}");
        }
    }
}
