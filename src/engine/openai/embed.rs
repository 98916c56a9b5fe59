//! The embeddings API (`engine.openai.api = "embeddings"`), sans IO: a micro-batch's body for
//! `POST /v1/embeddings`, and the answer read back into one result per input.
//!
//! **One request per micro-batch.** The API takes a list of inputs (`input`: strings, or token-id
//! lists) and answers every embedding at once, so a micro-batch is one request, as it is for vLLM's
//! `openai-embeddings` backend and guidellm's `/v1/embeddings` (PR #710), which send a batch of
//! inputs the same way. A list holds one kind of input: a batch of texts and token ids is one
//! request per kind ([`super::request::groups`]).
//!
//! **Timing.** There is no stream: every input of a request is done when the whole answer has
//! come, so each has the request's latency, and no first token, TPOT or ITL (absent, not 0).
//!
//! **Input tokens.** The answer's `usage.prompt_tokens` is the whole request's (vLLM, OpenAI), so
//! an input's own count is, in order: the usage of a one-input request (`usage`); the number of
//! token ids sent, for a token-id input (`token_ids`: the server embedded exactly those); else
//! the request's usage shared over its text inputs in proportion to their bytes, largest
//! remainder first (`usage_share`: the sum is the server's count, each share an estimate). A server
//! that gives an item its own `usage.prompt_tokens` (per input) is taken at its word (`usage`).
//! Where no count can be had, the input's count is absent. `token_count_source` records which.
//!
//! **Bounds.** The body is read up to [`embedding_body_cap`] bytes (a long vector of floats as
//! JSON text is ~20 bytes a dimension), and each input must come back exactly once, every vector of
//! the same non-zero dimension, of finite numbers.

use serde_json::{Map, Value, json};

use super::stream::excerpt;
use crate::engine::{EngineRequest, Prompt, TokenCountSource};

/// Bytes an embeddings answer may have whatever its inputs.
pub const EMBEDDING_BASE_BYTES: u64 = 64 << 10;
/// Bytes per input an embeddings answer may have on top of [`EMBEDDING_BASE_BYTES`]: a vector of
/// 16,384 dimensions at ~24 bytes each, and room to spare.
pub const EMBEDDING_BYTES_PER_INPUT: u64 = 1 << 20;

/// Most bytes the answer to a request of `inputs` inputs may have.
pub fn embedding_body_cap(inputs: usize) -> u64 {
    EMBEDDING_BASE_BYTES + EMBEDDING_BYTES_PER_INPUT * inputs as u64
}

/// The JSON body of one embeddings request for `requests` (one kind of input, a group of
/// [`super::request::groups`]). `Err` names a prompt the API cannot take.
pub fn body(model: &str, requests: &[&EngineRequest]) -> Result<Value, String> {
    if requests.is_empty() {
        return Err("an empty request".into());
    }
    let inputs: Vec<Value> = requests
        .iter()
        .map(|r| match &r.prompt {
            Prompt::Text(text) => Ok(Value::String(text.clone())),
            Prompt::Tokens(ids) => Ok(json!(ids)),
            Prompt::Chat(_) => Err("the embeddings API takes text or token ids, not a conversation (`messages`): set \
                                    `workload.request_format = \"plain\"` to send each conversation as text"
                .to_owned()),
        })
        .collect::<Result<_, _>>()?;
    Ok(json!({"model": model, "input": inputs, "encoding_format": "float"}))
}

/// What the answer says of one input.
#[derive(Clone, Debug, PartialEq)]
pub struct Embedded {
    /// The vector's length.
    pub dimensions: u32,
    /// The input's tokens, where they can be known (see the module docs).
    pub prompt_tokens: Option<u32>,
    /// Where `prompt_tokens` came from; `None` with it.
    pub source: Option<TokenCountSource>,
}

/// Reads an embeddings answer to `requests` (in the order they were sent): one [`Embedded`] per
/// input, in that order, or why the answer is not one.
pub fn read_answer(body: &[u8], requests: &[&EngineRequest]) -> Result<Vec<Embedded>, String> {
    let value: Value = serde_json::from_slice(body)
        .map_err(|e| format!("the answer is not JSON ({e}): {}", excerpt(String::from_utf8_lossy(body).trim())))?;
    let Value::Object(answer) = value else {
        return Err(format!("the answer is not a JSON object: {}", excerpt(&value.to_string())));
    };
    if let Some(error) = answer.get("error").filter(|e| !e.is_null()) {
        return Err(format!("the server sent an error: {}", excerpt(&error.to_string())));
    }
    let Some(Value::Array(data)) = answer.get("data") else {
        return Err("the answer has no `data` list".into());
    };
    if data.len() != requests.len() {
        return Err(format!("{} embeddings for {} inputs", data.len(), requests.len()));
    }
    let mut items: Vec<Option<(u32, Option<u32>)>> = vec![None; requests.len()];
    let mut dimensions = None;
    for (position, item) in data.iter().enumerate() {
        let Value::Object(item) = item else { return Err(format!("`data[{position}]` is not a JSON object")) };
        let index = match item.get("index") {
            None | Some(Value::Null) => position,
            Some(v) => {
                v.as_u64().and_then(|i| usize::try_from(i).ok()).filter(|&i| i < requests.len()).ok_or_else(|| {
                    format!("`data[{position}].index` is {v}, not one of the {} inputs", requests.len())
                })?
            }
        };
        if items[index].is_some() {
            return Err(format!("input {index} has two embeddings"));
        }
        let dims = vector_len(item, position)?;
        if *dimensions.get_or_insert(dims) != dims {
            return Err(format!("`data[{position}]` has {dims} dimensions, another embedding {dimensions:?}"));
        }
        let own = item.get("usage").map(|u| prompt_tokens(u, &format!("data[{position}].usage"))).transpose()?;
        items[index] = Some((dims, own.flatten()));
    }
    let total = answer.get("usage").map(|u| prompt_tokens(u, "usage")).transpose()?.flatten();
    let shares = shares(total, requests);
    Ok(items
        .into_iter()
        .zip(requests)
        .zip(shares)
        .map(|((item, request), share)| {
            let (dimensions, own) = item.expect("every index seen once, and as many as inputs");
            let (prompt_tokens, source) = match (own, &request.prompt) {
                (Some(n), _) => (Some(n), Some(TokenCountSource::Usage)),
                (None, _) if requests.len() == 1 && total.is_some() => (total, Some(TokenCountSource::Usage)),
                (None, Prompt::Tokens(ids)) => (u32::try_from(ids.len()).ok(), Some(TokenCountSource::TokenIds)),
                (None, _) => match share {
                    Some(n) => (Some(n), Some(TokenCountSource::UsageShare)),
                    None => (None, None),
                },
            };
            Embedded { dimensions, prompt_tokens, source }
        })
        .collect())
}

/// The length of an item's `embedding`: a non-empty list of finite numbers.
fn vector_len(item: &Map<String, Value>, position: usize) -> Result<u32, String> {
    let Some(Value::Array(vector)) = item.get("embedding") else {
        return Err(format!(
            "`data[{position}].embedding` is not a list of numbers (asked for `encoding_format: float`)"
        ));
    };
    if vector.is_empty() {
        return Err(format!("`data[{position}].embedding` is empty"));
    }
    if !vector.iter().all(|x| x.as_f64().is_some_and(f64::is_finite)) {
        return Err(format!("`data[{position}].embedding` holds something that is not a finite number"));
    }
    u32::try_from(vector.len()).map_err(|_| format!("`data[{position}].embedding` is too long"))
}

/// A `usage` object's `prompt_tokens`, if it has one.
fn prompt_tokens(usage: &Value, what: &str) -> Result<Option<u32>, String> {
    match usage.get("prompt_tokens") {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .map(Some)
            .ok_or_else(|| format!("`{what}.prompt_tokens` is {v}, not a token count")),
    }
}

/// The request's `total` prompt tokens less those of its token-id inputs, shared over its text
/// inputs in proportion to their bytes, largest remainder first (ties to the earlier input), so
/// the shares add up to exactly what is left. `None` for every input without a total to share.
fn shares(total: Option<u32>, requests: &[&EngineRequest]) -> Vec<Option<u32>> {
    let bytes: Vec<Option<u64>> = requests
        .iter()
        .map(|r| match &r.prompt {
            Prompt::Text(text) => Some(text.len() as u64),
            _ => None,
        })
        .collect();
    let Some(total) = total else { return vec![None; requests.len()] };
    let ids: u64 = requests
        .iter()
        .map(|r| match &r.prompt {
            Prompt::Tokens(ids) => ids.len() as u64,
            _ => 0,
        })
        .sum();
    let left = u64::from(total).saturating_sub(ids);
    let all: u64 = bytes.iter().flatten().sum();
    if all == 0 {
        return vec![None; requests.len()];
    }
    let mut out: Vec<Option<u64>> = bytes.iter().map(|b| b.map(|b| left * b / all)).collect();
    let mut remainders: Vec<(u64, usize)> =
        bytes.iter().enumerate().filter_map(|(i, b)| b.map(|b| (left * b % all, i))).collect();
    remainders.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    let given: u64 = out.iter().flatten().sum();
    for &(_, i) in remainders.iter().take(usize::try_from(left - given).unwrap_or(usize::MAX)) {
        if let Some(n) = &mut out[i] {
            *n += 1;
        }
    }
    out.into_iter().map(|n| n.and_then(|n| u32::try_from(n).ok())).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(prompt: Prompt) -> EngineRequest {
        EngineRequest::new(prompt, 1).with_id(0)
    }

    fn answer(vectors: &[(usize, usize)], usage: Option<u32>) -> Vec<u8> {
        let data: Vec<Value> = vectors
            .iter()
            .map(|&(index, dims)| json!({"object": "embedding", "index": index, "embedding": vec![0.5; dims]}))
            .collect();
        let mut answer = json!({"object": "list", "data": data, "model": "m"});
        if let Some(n) = usage {
            answer["usage"] = json!({"prompt_tokens": n, "total_tokens": n});
        }
        answer.to_string().into_bytes()
    }

    #[test]
    fn a_batch_is_one_list_of_inputs_in_float() {
        let (a, b) = (request(Prompt::Text("hello".into())), request(Prompt::Text("world".into())));
        assert_eq!(
            body("m", &[&a, &b]).unwrap(),
            json!({"model": "m", "input": ["hello", "world"], "encoding_format": "float"})
        );
        let ids = request(Prompt::Tokens(vec![1, 2]));
        assert_eq!(body("m", &[&ids]).unwrap()["input"], json!([[1, 2]]), "a list even of one");
        let chat = request(Prompt::Chat(crate::engine::chat::ChatPrompt {
            messages: vec![crate::engine::chat::Message::new("user", "Hi")],
            template: crate::engine::chat::Template::Model,
        }));
        assert!(body("m", &[&chat]).unwrap_err().contains("request_format"));
    }

    #[test]
    fn each_input_gets_its_own_count_and_says_where_it_came_from() {
        use TokenCountSource::{TokenIds, Usage, UsageShare};
        let texts = [request(Prompt::Text("aaaaaa".into())), request(Prompt::Text("bb".into()))];
        let texts: Vec<&EngineRequest> = texts.iter().collect();
        // Out of order on the wire, put back by `index`; 11 tokens shared 6:2 → 8.25, 2.75 → 8, 3.
        let got = read_answer(&answer(&[(1, 4), (0, 4)], Some(11)), &texts).unwrap();
        let counts: Vec<_> = got.iter().map(|e| (e.dimensions, e.prompt_tokens, e.source)).collect();
        assert_eq!(counts, [(4, Some(8), Some(UsageShare)), (4, Some(3), Some(UsageShare))]);
        // One input: the usage is its own.
        let got = read_answer(&answer(&[(0, 3)], Some(7)), &texts[..1]).unwrap();
        assert_eq!((got[0].prompt_tokens, got[0].source), (Some(7), Some(Usage)));
        // Token ids: what was sent, whatever the total says.
        let ids = [request(Prompt::Tokens(vec![1, 2, 3])), request(Prompt::Tokens(vec![4]))];
        let ids: Vec<&EngineRequest> = ids.iter().collect();
        let got = read_answer(&answer(&[(0, 2), (1, 2)], Some(9)), &ids).unwrap();
        let counts: Vec<_> = got.iter().map(|e| (e.prompt_tokens, e.source)).collect();
        assert_eq!(counts, [(Some(3), Some(TokenIds)), (Some(1), Some(TokenIds))]);
        // Without usage, texts have no count; an item's own usage is taken.
        let got = read_answer(&answer(&[(0, 2), (1, 2)], None), &texts).unwrap();
        assert_eq!((got[0].prompt_tokens, got[1].source), (None, None));
        // The first item on the wire is input 1's, with its own usage: it lands on input 1.
        let mut own: Value = serde_json::from_slice(&answer(&[(1, 2), (0, 2)], Some(11))).unwrap();
        own["data"][0]["usage"] = json!({"prompt_tokens": 5});
        let got = read_answer(own.to_string().as_bytes(), &texts).unwrap();
        assert_eq!((got[1].prompt_tokens, got[1].source), (Some(5), Some(Usage)));
        assert_eq!((got[0].prompt_tokens, got[0].source), (Some(8), Some(UsageShare)));
    }

    #[test]
    fn shares_add_up_to_the_total_and_the_larger_remainder_wins() {
        let r: Vec<EngineRequest> = ["abc", "abc", "abcd"].iter().map(|t| request(Prompt::Text((*t).into()))).collect();
        let r: Vec<&EngineRequest> = r.iter().collect();
        // 10 × 3/10, 3/10, 4/10 = 3, 3, 4 exactly; 11 → 3.3, 3.3, 4.4: the one left goes to the .4;
        // 12 → 3.6, 3.6, 4.8: the two left to the .8, then the earlier .6.
        assert_eq!(shares(Some(10), &r), [Some(3), Some(3), Some(4)]);
        assert_eq!(shares(Some(11), &r), [Some(3), Some(3), Some(5)]);
        assert_eq!(shares(Some(12), &r), [Some(4), Some(3), Some(5)]);
        assert_eq!(shares(None, &r), [None, None, None]);
    }

    #[test]
    fn answers_of_the_wrong_shape_are_refused() {
        let two = [request(Prompt::Text("a".into())), request(Prompt::Text("b".into()))];
        let two: Vec<&EngineRequest> = two.iter().collect();
        for (bad, why) in [
            (answer(&[(0, 2)], Some(2)), "1 embeddings for 2 inputs"),
            (answer(&[(0, 2), (0, 2)], Some(2)), "two embeddings"),
            (answer(&[(0, 2), (2, 2)], Some(2)), "not one of the 2 inputs"),
            (answer(&[(0, 2), (1, 3)], Some(2)), "dimensions"),
            (answer(&[(0, 0), (1, 0)], Some(2)), "empty"),
            (br#"{"data": [{"embedding": "AAAA"}, {"embedding": [1]}]}"#.to_vec(), "not a list of numbers"),
            (br#"{"data": [{"embedding": [1, "x"]}, {"embedding": [1, 2]}]}"#.to_vec(), "not a finite number"),
            (br#"{"error": {"message": "no"}}"#.to_vec(), "error"),
            (b"<html>".to_vec(), "not JSON"),
        ] {
            let e = read_answer(&bad, &two).unwrap_err();
            assert!(e.contains(why), "{why}: {e}");
        }
    }
}
