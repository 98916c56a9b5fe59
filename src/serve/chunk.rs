//! A streamed token chunk's SSE event, rendered straight into bytes.
//!
//! Every chunk of one response repeats its `id`, `created`, `model` and `object`; only the
//! choice's `index`, `text` and `finish_reason` (and, on a chat response's first chunk, the role)
//! change. [`ChunkRenderer`] renders the repeated part once per response and each chunk as the
//! few bytes that change around it, with no JSON tree per token. The bytes are serde_json's
//! rendering of [`api::stream_chunk`]'s value (keys in serde_json's order: sorted, as its default
//! map sorts them) framed as one SSE event, `data: …\n\n`; the unit tests check that for a corpus
//! of chunks, so `api::stream_chunk` stays the definition of a chunk's content.

use std::io::Write as _;

use super::api::{Endpoint, ResponseHead};

/// Renders one response's token chunks as SSE events.
#[derive(Clone, Debug)]
pub struct ChunkRenderer {
    endpoint: Endpoint,
    /// `],"created":…,"id":…,"model":…,"object":…}\n\n`: what follows the choice in every chunk.
    suffix: Vec<u8>,
}

impl ChunkRenderer {
    /// The renderer of `head`'s response.
    pub fn new(head: ResponseHead<'_>) -> ChunkRenderer {
        let object = match head.endpoint {
            Endpoint::Completions => "text_completion",
            Endpoint::Chat => "chat.completion.chunk",
        };
        let mut suffix = Vec::with_capacity(64 + head.id.len() + head.model.len());
        suffix.extend_from_slice(b"],\"created\":");
        let _ = write!(suffix, "{}", head.created);
        suffix.extend_from_slice(b",\"id\":");
        json_str(&mut suffix, head.id);
        suffix.extend_from_slice(b",\"model\":");
        json_str(&mut suffix, head.model);
        suffix.extend_from_slice(b",\"object\":");
        json_str(&mut suffix, object);
        suffix.extend_from_slice(b"}\n\n");
        ChunkRenderer { endpoint: head.endpoint, suffix }
    }

    /// Appends to `out` the SSE event of choice `index`'s chunk: its token's `text` (a chat
    /// `delta`), its finish reason on its last, the chat role on its `first`. The same content
    /// as [`super::api::stream_chunk`].
    pub fn render(&self, out: &mut Vec<u8>, index: u32, text: &str, finish: Option<&str>, first: bool) {
        out.extend_from_slice(b"data: {\"choices\":[{");
        match self.endpoint {
            Endpoint::Completions => {
                finish_reason(out, finish);
                out.extend_from_slice(b",\"index\":");
                let _ = write!(out, "{index}");
                out.extend_from_slice(b",\"logprobs\":null,\"stop_reason\":null,\"text\":");
                json_str(out, text);
            }
            Endpoint::Chat => {
                out.extend_from_slice(b"\"delta\":{\"content\":");
                json_str(out, text);
                if first {
                    out.extend_from_slice(b",\"role\":\"assistant\"");
                }
                out.extend_from_slice(b"},");
                finish_reason(out, finish);
                out.extend_from_slice(b",\"index\":");
                let _ = write!(out, "{index}");
                out.extend_from_slice(b",\"logprobs\":null");
            }
        }
        out.push(b'}');
        out.extend_from_slice(&self.suffix);
    }
}

/// `"finish_reason":null` or `"finish_reason":"…"`.
fn finish_reason(out: &mut Vec<u8>, finish: Option<&str>) {
    out.extend_from_slice(b"\"finish_reason\":");
    match finish {
        Some(f) => json_str(out, f),
        None => out.extend_from_slice(b"null"),
    }
}

/// `s` as a JSON string, escaped as serde_json escapes it (its own string writer, no tree).
fn json_str(out: &mut Vec<u8>, s: &str) {
    // Writing a `&str` into a `Vec` cannot fail.
    let _ = serde_json::to_writer(&mut *out, s);
}

/// An SSE event of one `data:` line holding `data` (which has no line break: compact JSON or
/// `[DONE]`), as axum's `Event::data` frames it.
pub fn push_event(out: &mut Vec<u8>, data: &str) {
    out.extend_from_slice(b"data: ");
    out.extend_from_slice(data.as_bytes());
    out.extend_from_slice(b"\n\n");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::serve::api;

    /// What the chunk was before this renderer: serde_json's rendering of `api::stream_chunk`'s
    /// value in an SSE event.
    fn reference(head: ResponseHead<'_>, index: u32, text: &str, finish: Option<&str>, first: bool) -> String {
        let value = api::stream_chunk(head, index, text, finish, first);
        format!("data: {value}\n\n")
    }

    #[test]
    fn chunks_are_serde_json_s_bytes() {
        let texts = [
            " sim",
            "",
            "quote \" and backslash \\ and slash /",
            "line\nbreak\r\ttab \u{8}\u{c}",
            "control \u{0} \u{1f} \u{7f}",
            "unicode é 漢字 🦀 \u{2028}",
            "</script>",
        ];
        let finishes = [None, Some("length"), Some("stop"), Some("abort"), Some("we\"ird\n")];
        let heads = [
            ("cmpl-1", 0u64, "batchlab-sim"),
            ("chatcmpl-18446744073709551615", u64::MAX, "org/model \"q\" é"),
            ("", 1_700_000_000, ""),
        ];
        let mut cases = 0;
        for endpoint in [Endpoint::Completions, Endpoint::Chat] {
            for (id, created, model) in heads {
                let head = ResponseHead { endpoint, id, created, model };
                let renderer = ChunkRenderer::new(head);
                for text in texts {
                    for finish in finishes {
                        for (index, first) in [(0, true), (0, false), (7, false), (u32::MAX, true)] {
                            let mut out = b"kept ".to_vec();
                            renderer.render(&mut out, index, text, finish, first);
                            let want = format!("kept {}", reference(head, index, text, finish, first));
                            assert_eq!(String::from_utf8(out).unwrap(), want, "{endpoint:?} {text:?} {finish:?}");
                            cases += 1;
                        }
                    }
                }
            }
        }
        assert_eq!(cases, 2 * 3 * 7 * 5 * 4);
    }

    #[test]
    fn every_token_word_renders_as_serde_json_does() {
        let head = ResponseHead { endpoint: Endpoint::Chat, id: "chatcmpl-3", created: 5, model: "m" };
        let renderer = ChunkRenderer::new(head);
        let mut out = Vec::new();
        let mut want = String::new();
        for i in 0..16 {
            let finish = (i == 15).then_some("length");
            renderer.render(&mut out, 0, api::token_text(i), finish, i == 0);
            want.push_str(&reference(head, 0, api::token_text(i), finish, i == 0));
        }
        assert_eq!(String::from_utf8(out).unwrap(), want);
    }

    #[test]
    fn an_event_is_a_data_line_and_a_blank_line() {
        let mut out = Vec::new();
        push_event(&mut out, "[DONE]");
        push_event(&mut out, "{\"a\":1}");
        assert_eq!(out, b"data: [DONE]\n\ndata: {\"a\":1}\n\n");
    }
}
