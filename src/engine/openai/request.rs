//! The request bodies, sans IO: a batch's requests grouped by what one HTTP request can carry,
//! and each group's JSON.
//!
//! One completions request takes a list of prompts, but one `max_tokens`, `min_tokens`,
//! `ignore_eos`, `temperature` and `seed` for all of them, and prompts of one kind (texts, or
//! token-id lists). A batch whose requests agree on those is one HTTP request; one whose requests
//! differ is one HTTP request per distinct set, sent at the same time ([`groups`]).

use serde_json::{Value, json};

use super::config::Api;
use crate::engine::chat::{Message, Template};
use crate::engine::{EngineRequest, Prompt};

/// What must be the same for requests to share one HTTP request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Shared {
    max_tokens: u32,
    min_tokens: u32,
    ignore_eos: bool,
    temperature_bits: u32,
    seed: Option<u64>,
    kind: u8,
}

fn shared(r: &EngineRequest) -> Shared {
    Shared {
        max_tokens: r.max_tokens,
        min_tokens: r.min_tokens,
        ignore_eos: r.ignore_eos,
        temperature_bits: r.temperature.to_bits(),
        seed: r.seed,
        kind: match r.prompt {
            Prompt::Text(_) => 0,
            Prompt::Tokens(_) => 1,
            Prompt::Chat(_) => 2,
        },
    }
}

/// The batch's positions grouped into HTTP requests: requests that can share one, in batch order,
/// groups in the order of their first request. The chat API takes one conversation per request;
/// the embeddings API one list per kind of input (texts, token ids), whatever their sampling.
pub fn groups(batch: &[EngineRequest], api: Api) -> Vec<Vec<usize>> {
    if api == Api::Chat {
        return (0..batch.len()).map(|i| vec![i]).collect();
    }
    let mut keys: Vec<Shared> = Vec::new();
    let mut groups: Vec<Vec<usize>> = Vec::new();
    for (i, r) in batch.iter().enumerate() {
        let key = match api {
            // Nothing is sampled: one list per kind of input (the API takes no mixed list).
            Api::Embeddings => Shared {
                max_tokens: 0,
                min_tokens: 0,
                ignore_eos: false,
                temperature_bits: 0,
                seed: None,
                kind: shared(r).kind,
            },
            _ => shared(r),
        };
        match keys.iter().position(|k| *k == key) {
            Some(g) => groups[g].push(i),
            None => {
                keys.push(key);
                groups.push(vec![i]);
            }
        }
    }
    groups
}

/// The JSON body of one request for `requests` (a group of [`groups`], so they agree on
/// everything but their prompts), streamed with usage (an embeddings request: [`super::embed::body`]). `Err` names a prompt the API cannot take.
pub fn body(model: &str, api: Api, requests: &[&EngineRequest]) -> Result<Value, String> {
    if api == Api::Embeddings {
        return super::embed::body(model, requests);
    }
    let Some(first) = requests.first() else {
        return Err("an empty request".into());
    };
    let mut body = json!({
        "model": model,
        "stream": true,
        // `continuous_usage_stats` (vLLM's) gives each chunk its choice's running token count.
        "stream_options": {"include_usage": true, "continuous_usage_stats": true},
        "temperature": first.temperature,
    });
    let object = body.as_object_mut().expect("a JSON object");
    match api {
        Api::Completions => {
            let prompts: Vec<Value> =
                requests.iter().map(|r| completion_prompt(&r.prompt)).collect::<Result<_, _>>()?;
            let prompt =
                if prompts.len() == 1 { prompts.into_iter().next().unwrap_or_default() } else { Value::Array(prompts) };
            object.insert("prompt".into(), prompt);
            object.insert("max_tokens".into(), first.max_tokens.into());
        }
        Api::Embeddings => unreachable!("answered above"),
        Api::Chat => {
            let [request] = requests else {
                return Err(format!("the chat API takes one conversation per request, not {}", requests.len()));
            };
            chat_messages(&request.prompt, object)?;
            object.insert("max_completion_tokens".into(), first.max_tokens.into());
        }
    }
    // vLLM's extensions, sent only when they ask for something, so other servers see plain requests.
    if first.min_tokens > 0 {
        object.insert("min_tokens".into(), first.min_tokens.into());
    }
    if first.ignore_eos {
        object.insert("ignore_eos".into(), true.into());
    }
    if let Some(seed) = first.seed {
        object.insert("seed".into(), seed.into());
    }
    Ok(body)
}

fn completion_prompt(prompt: &Prompt) -> Result<Value, String> {
    match prompt {
        Prompt::Text(text) => Ok(Value::String(text.clone())),
        Prompt::Tokens(ids) => Ok(json!(ids)),
        Prompt::Chat(_) => Err("a chat prompt (messages) needs `engine.openai.api = \"chat\"`: the server applies \
                                the chat template; or set `workload.request_format = \"plain\"`"
            .into()),
    }
}

fn chat_messages(prompt: &Prompt, object: &mut serde_json::Map<String, Value>) -> Result<(), String> {
    match prompt {
        Prompt::Chat(chat) => {
            object.insert("messages".into(), Value::Array(chat.messages.iter().map(message_json).collect()));
            if let Template::Custom(template) = &chat.template {
                // vLLM's extension: the template to apply instead of the model's.
                object.insert("chat_template".into(), template.source().into());
            }
        }
        Prompt::Text(text) => {
            object.insert("messages".into(), json!([{"role": "user", "content": text}]));
        }
        Prompt::Tokens(_) => {
            return Err("the chat API takes messages or text, not token ids: use `engine.openai.api = \
                        \"completions\"`"
                .into());
        }
    }
    Ok(())
}

/// One message as OpenAI's chat API takes it: `content` a string, or for a turn with images its
/// text part first, then one `image_url` part per image (vLLM's `random-mm` order).
fn message_json(m: &Message) -> Value {
    if m.images.is_empty() {
        return json!({"role": m.role, "content": m.content});
    }
    let mut parts = Vec::with_capacity(1 + m.images.len());
    parts.push(json!({"type": "text", "text": m.content}));
    parts.extend(m.images.iter().map(|i| json!({"type": "image_url", "image_url": {"url": &*i.url}})));
    json!({"role": m.role, "content": parts})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(prompt: Prompt, max_tokens: u32) -> EngineRequest {
        EngineRequest::new(prompt, max_tokens).with_id(0)
    }

    #[test]
    fn a_batch_that_agrees_is_one_request_else_one_per_setting() {
        let batch = [
            request(Prompt::Tokens(vec![1, 2]), 8),
            request(Prompt::Tokens(vec![3]), 8),
            request(Prompt::Tokens(vec![4]), 16),
            request(Prompt::Text("t".into()), 8),
            request(Prompt::Tokens(vec![5]), 8),
        ];
        assert_eq!(groups(&batch, Api::Completions), [vec![0, 1, 4], vec![2], vec![3]]);
        assert_eq!(groups(&batch[..2], Api::Chat), [vec![0], vec![1]]);
    }

    #[test]
    fn completion_bodies_list_the_prompts_and_ask_for_usage() {
        let a = request(Prompt::Tokens(vec![1, 2]), 8);
        let b = request(Prompt::Tokens(vec![3]), 8);
        let body = body("m", Api::Completions, &[&a, &b]).unwrap();
        assert_eq!(body["prompt"], json!([[1, 2], [3]]));
        assert_eq!((body["model"].as_str(), body["max_tokens"].as_u64()), (Some("m"), Some(8)));
        assert_eq!(body["stream"], true);
        assert_eq!(body["stream_options"], json!({"include_usage": true, "continuous_usage_stats": true}));
        assert_eq!((body["ignore_eos"].clone(), body.get("min_tokens")), (json!(true), None));
        let mut one = request(Prompt::Text("hello".into()), 4);
        (one.ignore_eos, one.min_tokens, one.seed) = (false, 2, Some(9));
        let body = super::body("m", Api::Completions, &[&one]).unwrap();
        assert_eq!(body["prompt"], "hello", "one prompt is sent as itself");
        assert_eq!(
            (body.get("ignore_eos"), body["min_tokens"].as_u64(), body["seed"].as_u64()),
            (None, Some(2), Some(9))
        );
    }

    #[test]
    fn chat_bodies_carry_messages_and_refuse_token_ids() {
        let chat = Prompt::Chat(crate::engine::chat::ChatPrompt {
            messages: vec![Message::new("system", "Be brief."), Message::new("user", "Hi")],
            template: Template::Model,
        });
        let body = body("m", Api::Chat, &[&request(chat.clone(), 5)]).unwrap();
        assert_eq!(
            body["messages"],
            json!([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}])
        );
        assert_eq!(body["max_completion_tokens"], 5);
        let text = super::body("m", Api::Chat, &[&request(Prompt::Text("x".into()), 5)]).unwrap();
        assert_eq!(text["messages"], json!([{"role": "user", "content": "x"}]));
        assert!(super::body("m", Api::Chat, &[&request(Prompt::Tokens(vec![1]), 5)]).is_err());
        assert!(super::body("m", Api::Completions, &[&request(chat, 5)]).is_err());
    }

    #[test]
    fn a_turn_with_images_is_its_text_then_one_image_url_part_each() {
        let image = |url: &str, hash| crate::engine::image::Image {
            url: url.into(),
            width: 2,
            height: 2,
            bytes: 9,
            hash,
            pooled: false,
            tokens: 1,
        };
        let user = Message::new("user", "Describe.").with_images(vec![image("data:a", 1), image("data:b", 2)]);
        let chat = Prompt::Chat(crate::engine::chat::ChatPrompt {
            messages: vec![Message::new("system", "Be brief."), user],
            template: Template::Model,
        });
        let body = body("m", Api::Chat, &[&request(chat, 5)]).unwrap();
        assert_eq!(
            body["messages"],
            json!([
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": [
                    {"type": "text", "text": "Describe."},
                    {"type": "image_url", "image_url": {"url": "data:a"}},
                    {"type": "image_url", "image_url": {"url": "data:b"}},
                ]},
            ])
        );
    }
}
