//! `POST /v1/embeddings`: the body validated field by field, the deterministic vector, and the
//! answer's JSON (OpenAI's shape, as vLLM's pooling server gives it).
//!
//! The simulator has no weights, so an embedding is a made-up vector, but a deterministic one:
//! [`EMBEDDING_DIMS`] numbers drawn by [`SplitMix64`] from a seed that is the server's
//! `engine.sim.seed` mixed with every token id of the input (FNV-1a), then scaled to length 1 (as
//! embedding models normalize theirs). The same input gives the same vector on every run and
//! server of the same seed; different inputs give different vectors. Its cost is the prefill of
//! the input's tokens in the cost model, and no decode step (`ServeCore::submit_pooling`).

use serde_json::{Map, Value, json};

use super::api::{ApiError, prompt_list, request_object};
use crate::engine::Prompt;
use crate::rng::SplitMix64;

/// The length of every vector `batchlab serve` returns.
pub const EMBEDDING_DIMS: usize = 8;

/// `input`: a string, a list of strings, token ids, or a list of token-id lists (OpenAI's four
/// shapes). `model` must be the served one (else 404); `encoding_format` only `"float"`;
/// `dimensions`, where given, must be [`EMBEDDING_DIMS`].
pub fn parse_embeddings(body: &[u8], model: &str) -> Result<Vec<Prompt>, ApiError> {
    let obj = request_object(body, model)?;
    check_options(&obj)?;
    prompt_list("input", obj.get("input"))
}

fn check_options(obj: &Map<String, Value>) -> Result<(), ApiError> {
    match obj.get("encoding_format") {
        None | Some(Value::Null) => {}
        Some(Value::String(f)) if f == "float" => {}
        Some(v) => {
            return Err(ApiError::bad_field("encoding_format", format!("only `\"float\"` is supported, not {v}")));
        }
    }
    match obj.get("dimensions") {
        None | Some(Value::Null) => Ok(()),
        Some(v) if v.as_u64() == Some(EMBEDDING_DIMS as u64) => Ok(()),
        Some(v) => {
            Err(ApiError::bad_field("dimensions", format!("this model's vectors have {EMBEDDING_DIMS}, not {v}")))
        }
    }
}

/// The vector of an input of token ids `ids` on a server of seed `seed` (see the module docs).
pub fn embedding(seed: u64, ids: &[u32]) -> Vec<f64> {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in ids.iter().flat_map(|id| id.to_le_bytes()) {
        hash = (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3);
    }
    let mut rng = SplitMix64::derive(seed, hash);
    let raw: Vec<f64> = (0..EMBEDDING_DIMS).map(|_| 2.0 * rng.next_f64() - 1.0).collect();
    let norm = raw.iter().map(|x| x * x).sum::<f64>().sqrt();
    if norm > 0.0 { raw.iter().map(|x| x / norm).collect() } else { raw }
}

/// The answer: one `embedding` object per input, in order, and the request's `usage` (its
/// inputs' tokens together, as vLLM and OpenAI give it).
pub fn answer(id: &str, created: u64, model: &str, vectors: Vec<Vec<f64>>, prompt_tokens: u64) -> Value {
    let data: Vec<Value> = vectors
        .into_iter()
        .enumerate()
        .map(|(index, v)| json!({"index": index, "object": "embedding", "embedding": v}))
        .collect();
    json!({
        "id": id, "object": "list", "created": created, "model": model, "data": data,
        "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens, "completion_tokens": 0},
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_input_shape_is_read_and_bad_fields_are_named() {
        for (input, expected) in [
            (r#""hi""#, vec![Prompt::Text("hi".into())]),
            (r#"["a", "b"]"#, vec![Prompt::Text("a".into()), Prompt::Text("b".into())]),
            ("[1, 2]", vec![Prompt::Tokens(vec![1, 2])]),
            ("[[1], [2, 3]]", vec![Prompt::Tokens(vec![1]), Prompt::Tokens(vec![2, 3])]),
        ] {
            let body = format!(r#"{{"model": "m", "input": {input}}}"#);
            assert_eq!(parse_embeddings(body.as_bytes(), "m").unwrap(), expected, "{input}");
        }
        for (body, param, status) in [
            (r#"{"model": "m"}"#, "input", 400),
            (r#"{"input": "x"}"#, "model", 400),
            (r#"{"model": "o", "input": "x"}"#, "model", 404),
            (r#"{"model": "m", "input": []}"#, "input", 400),
            (r#"{"model": "m", "input": ["a", ""]}"#, "input", 400),
            (r#"{"model": "m", "input": [[]]}"#, "input", 400),
            (r#"{"model": "m", "input": "x", "encoding_format": "base64"}"#, "encoding_format", 400),
            (r#"{"model": "m", "input": "x", "dimensions": 4}"#, "dimensions", 400),
        ] {
            let e = parse_embeddings(body.as_bytes(), "m").unwrap_err();
            assert_eq!((e.param.as_deref(), e.status), (Some(param), status), "{body}: {e}");
        }
    }

    #[test]
    fn a_vector_is_unit_length_and_a_function_of_the_seed_and_the_input() {
        let v = embedding(7, &[1, 2, 3]);
        assert_eq!(v.len(), EMBEDDING_DIMS);
        assert!((v.iter().map(|x| x * x).sum::<f64>() - 1.0).abs() < 1e-12);
        assert_eq!(v, embedding(7, &[1, 2, 3]));
        assert_ne!(v, embedding(8, &[1, 2, 3]), "another seed");
        assert_ne!(v, embedding(7, &[1, 2, 4]), "another input");
        assert_ne!(v, embedding(7, &[3, 2, 1]), "the order counts");
    }
}
