//! A streamed chunk of the common shape, read straight into typed fields that borrow their strings
//! from the event's data, sans IO. This is the client's hot path: one chunk a token, and building
//! a JSON tree for each (a map per object, a `String` per key and value) was the largest part of
//! the client's CPU per request (docs/performance.md §9b).
//!
//! **Same answer as the tree.** [`read`] takes only what it can read exactly as
//! [`super::stream::ResponseStream`] reads a JSON value: objects only, each field absent, `null`
//! or of its type. Anything else (a value of another type, a string with escapes, a duplicate
//! key, an `error` object, a choice whose `index` is `null`) gives `None`, and the stream reads
//! that event as a JSON value, with its errors. A test holds the two ways to the same result on
//! every event of a corpus of good and bad chunks.

use std::fmt;
use std::marker::PhantomData;

use serde::Deserialize;
use serde::de::{Deserializer, IgnoredAny, MapAccess, Visitor, value::MapAccessDeserializer};
use serde_json::Value;

/// One chunk: the fields the stream reads.
#[derive(Deserialize)]
pub(super) struct Chunk<'a> {
    #[serde(default)]
    error: Option<IgnoredAny>,
    #[serde(default)]
    pub usage: Option<Value>,
    #[serde(default, borrow)]
    pub choices: Option<Vec<Object<Choice<'a>>>>,
}

/// One choice of a chunk.
#[derive(Deserialize)]
pub(super) struct Choice<'a> {
    /// Absent: `None`; `null`: `Some(None)` (not read here).
    #[serde(default, deserialize_with = "present")]
    pub index: Option<Option<u64>>,
    #[serde(default, borrow)]
    pub text: Option<&'a str>,
    #[serde(default, borrow)]
    pub delta: Option<Object<Delta<'a>>>,
    #[serde(default)]
    pub token_ids: Option<Vec<u32>>,
    #[serde(default, borrow)]
    pub finish_reason: Option<&'a str>,
}

/// A chat chunk's `delta`.
#[derive(Deserialize)]
pub(super) struct Delta<'a> {
    #[serde(default, borrow)]
    content: Option<&'a str>,
    #[serde(default, borrow)]
    reasoning_content: Option<&'a str>,
    #[serde(default, borrow)]
    reasoning: Option<&'a str>,
}

impl Delta<'_> {
    /// Its text: `content`, or reasoning (`reasoning_content`, `reasoning`), the first not empty.
    pub fn text(&self) -> &str {
        [self.content, self.reasoning_content, self.reasoning]
            .into_iter()
            .flatten()
            .find(|t| !t.is_empty())
            .unwrap_or("")
    }
}

/// `data` as a [`Chunk`], when it is one this module reads exactly as the JSON value would be
/// read; `None` otherwise.
pub(super) fn read(data: &str) -> Option<Chunk<'_>> {
    let Object(chunk) = serde_json::from_str::<Object<Chunk<'_>>>(data).ok()?;
    let index_null = chunk.choices.iter().flatten().any(|c| c.0.index == Some(None));
    (chunk.error.is_none() && !index_null).then_some(chunk)
}

/// A `T` read from a JSON object only (serde's derived structs take a list of fields too).
pub(super) struct Object<T>(pub T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Object<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ObjectOnly<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for ObjectOnly<T> {
            type Value = T;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
                T::deserialize(MapAccessDeserializer::new(map))
            }
        }
        deserializer.deserialize_map(ObjectOnly(PhantomData)).map(Object)
    }
}

/// A field that is there, `null` or not: `Some(None)` for `null` (absent is the `default`, `None`).
fn present<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<Option<u64>>, D::Error> {
    Option::<u64>::deserialize(deserializer).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_common_shapes_are_read_and_the_rest_left_to_the_json_value() {
        for common in [
            r#"{"id": "c", "object": "text_completion", "choices": [{"index": 0, "text": " a", "logprobs": null, "finish_reason": null}]}"#,
            r#"{"choices": [{"index": 0, "delta": {"content": "Hi"}, "finish_reason": "stop"}], "usage": {"completion_tokens": 1}}"#,
            r#"{"choices": [{"text": "t", "token_ids": [1, 2]}]}"#,
            r#"{"choices": [], "usage": {"prompt_tokens": 3}}"#,
        ] {
            assert!(read(common).is_some(), "{common}");
        }
        let chunk = read(r#"{"choices": [{"index": 1, "text": "x", "finish_reason": "stop"}]}"#).unwrap();
        let Object(choice) = &chunk.choices.as_ref().unwrap()[0];
        assert_eq!((choice.index, choice.text, choice.finish_reason), (Some(Some(1)), Some("x"), Some("stop")));
        for other in [
            r#"{"choices": [{"index": 0, "text": "esc\n"}]}"#,
            r#"{"choices": [{"index": null, "text": "x"}]}"#,
            r#"{"choices": [[0, "x"]]}"#,
            r#"[null, null, [{"index": 0}]]"#,
            r#"{"error": {"message": "boom"}}"#,
            r#"{"choices": [{"index": 0, "text": 5}]}"#,
            r#"{"choices": [{"index": 0, "text": "a", "text": "b"}]}"#,
        ] {
            assert!(read(other).is_none(), "{other}");
        }
    }
}
