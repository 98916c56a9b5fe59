//! How long the simulated model finds a prompt: token ids are counted, text by batchlab's one
//! rule ([`crate::engine::tokens::text_tokens`]), and chat messages after templating.
//!
//! The simulated model's own chat template is the tiny test model's
//! (`scripts/tiny_chat_template.jinja`, which `scripts/build_tiny_model.py` gives
//! `~/.cache/batchlab/tiny-llama`), with its `<s>` and `</s>`; a custom template is rendered with
//! the same tokens. So a chat prompt costs its template's tokens too, as on a real engine.
//!
//! A chat prompt's images ([`crate::engine::image`]) cost their tokens on top, after the text:
//! each image's [`Image::tokens`] pseudo-ids, drawn from its hash, so the same picture gives the
//! same ids (as a real engine's placeholder tokens plus its multimodal hash).

use std::sync::OnceLock;

use crate::engine::Prompt;
use crate::engine::chat::{ChatPrompt, ChatTemplate, Template, TemplateError, TemplateOrigin};
use crate::engine::image::{Image, prompt_images};
use crate::engine::tokenizer::TokenCounter;
use crate::engine::tokens::{BYTES_PER_TOKEN, text_tokens};

/// The simulated model's chat template: the tiny test model's.
pub const MODEL_TEMPLATE: &str = include_str!("../../../scripts/tiny_chat_template.jinja");
/// The simulated model's beginning- and end-of-sequence tokens, as the tiny model's.
pub const BOS_TOKEN: &str = "<s>";
/// See [`BOS_TOKEN`].
pub const EOS_TOKEN: &str = "</s>";

fn model_template() -> &'static ChatTemplate {
    static TEMPLATE: OnceLock<ChatTemplate> = OnceLock::new();
    TEMPLATE.get_or_init(|| {
        ChatTemplate::new(MODEL_TEMPLATE, TemplateOrigin::Inline).expect("the tiny model's template compiles")
    })
}

/// The prompt's length in tokens, at least 1 (an empty prompt still costs a position).
pub fn prompt_tokens(prompt: &Prompt) -> Result<u32, TemplateError> {
    let n = match prompt {
        Prompt::Tokens(t) => t.len(),
        Prompt::Text(s) => text_tokens(s),
        Prompt::Chat(chat) => {
            text_tokens(&render(chat)?) + prompt_images(prompt).map(|i| i.tokens as usize).sum::<usize>()
        }
    };
    Ok(u32::try_from(n).unwrap_or(u32::MAX).max(1))
}

/// The prompt's token ids, for the prefix cache: token prompts as they are; text (a chat prompt
/// after templating) as one pseudo-token per four bytes, the counting rule's, so equal text
/// prefixes give equal ids. As many ids as [`prompt_tokens`] counts (an empty prompt is `[0]`).
pub fn prompt_ids(prompt: &Prompt) -> Result<Vec<u32>, TemplateError> {
    with_prompt_ids(prompt, <[u32]>::to_vec)
}

/// `f` of the prompt's [`prompt_ids`], without copying a token prompt's ids.
pub fn with_prompt_ids<R>(prompt: &Prompt, f: impl FnOnce(&[u32]) -> R) -> Result<R, TemplateError> {
    let text_ids = |s: &str| -> Vec<u32> {
        s.as_bytes()
            .chunks(BYTES_PER_TOKEN)
            .map(|c| c.iter().enumerate().fold(0u32, |acc, (i, &b)| acc | (u32::from(b) << (8 * i))))
            .collect()
    };
    let mut ids = match prompt {
        Prompt::Tokens(t) if !t.is_empty() => return Ok(f(t)),
        Prompt::Tokens(_) => Vec::new(),
        Prompt::Text(s) => text_ids(s),
        Prompt::Chat(chat) => {
            let mut ids = text_ids(&render(chat)?);
            extend_with_images(&mut ids, prompt);
            ids
        }
    };
    if ids.is_empty() {
        ids.push(0);
    }
    Ok(f(&ids))
}

/// The prompt's token ids as `counter` counts them: [`prompt_ids`] by the four-byte rule, or the
/// model's tokenizer's ids (a text prompt with its special tokens, a chat prompt rendered with the
/// tokenizer's `chat_template` and `bos_token`/`eos_token`, `plain` where the model has none, then
/// encoded as it is). An empty prompt is `[0]`, as for [`prompt_ids`].
pub fn counted_ids(prompt: &Prompt, counter: &TokenCounter) -> Result<Vec<u32>, TemplateError> {
    let TokenCounter::Tokenizer(tokenizer) = counter else { return prompt_ids(prompt) };
    let mut ids = match prompt {
        Prompt::Tokens(t) => t.clone(),
        Prompt::Text(s) => tokenizer.text_ids(s),
        Prompt::Chat(chat) => {
            let template = match &chat.template {
                Template::Model => tokenizer.chat_template(),
                Template::Custom(t) => Some(t),
            };
            let mut ids = match template {
                Some(template) => {
                    let (bos, eos) = tokenizer.bos_eos();
                    tokenizer.plain_ids(&template.render(&chat.messages, bos, eos)?)
                }
                None => tokenizer.text_ids(&crate::engine::chat::render_plain(&chat.messages)),
            };
            extend_with_images(&mut ids, prompt);
            ids
        }
    };
    if ids.is_empty() {
        ids.push(0);
    }
    Ok(ids)
}

/// Appends the ids of the prompt's images ([`image_ids`]) after its text's.
fn extend_with_images(ids: &mut Vec<u32>, prompt: &Prompt) {
    prompt_images(prompt).for_each(|image| ids.extend(image_ids(image)));
}

/// An image's pseudo-token ids: [`Image::tokens`] of them, a function of its hash alone.
fn image_ids(image: &Image) -> impl Iterator<Item = u32> + '_ {
    (0..image.tokens).map(move |j| (image.hash.rotate_left(j % 64) ^ u64::from(j)) as u32)
}

/// A chat prompt's text after its template.
fn render(chat: &ChatPrompt) -> Result<String, TemplateError> {
    let template = match &chat.template {
        Template::Model => model_template(),
        Template::Custom(t) => t,
    };
    template.render(&chat.messages, BOS_TOKEN, EOS_TOKEN)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::chat::{ChatPrompt, Message, RequestFormat};

    #[test]
    fn every_kind_of_prompt_is_counted_by_the_one_rule() {
        assert_eq!(prompt_tokens(&Prompt::Tokens(vec![7; 9])), Ok(9));
        assert_eq!(prompt_tokens(&Prompt::Tokens(vec![])), Ok(1));
        assert_eq!(prompt_tokens(&Prompt::Text("abcdefghi".into())), Ok(3));
        let messages = vec![Message::new("user", "Hi")];
        // "<s><|user|>\nHi</s>\n<|assistant|>\n" is 33 bytes.
        let chat = RequestFormat::ChatTemplate.prompt(messages.clone());
        assert_eq!(prompt_tokens(&chat), Ok(9));
        // Plain is text by then: "user: Hi".
        assert_eq!(prompt_tokens(&RequestFormat::Plain.prompt(messages.clone())), Ok(2));
        let custom = ChatTemplate::new(
            "{{ bos_token }}{% for _ in range(6) %}{{ messages[0].content }}{% endfor %}",
            TemplateOrigin::Inline,
        )
        .unwrap();
        let chat = Prompt::Chat(ChatPrompt { messages, template: Template::Custom(custom) });
        assert_eq!(prompt_tokens(&chat), Ok(4), "<s> and 12 bytes");
    }

    /// What Hugging Face's Jinja renders for the tiny model (transformers 5.19, printed by
    /// `tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)`).
    #[test]
    fn the_model_template_renders_as_hugging_face_does() {
        let messages = [Message::new("system", "Be brief."), Message::new("user", "Hi there")];
        let text = model_template().render(&messages, BOS_TOKEN, EOS_TOKEN).unwrap();
        assert_eq!(text, "<s><|system|>\nBe brief.</s>\n<|user|>\nHi there</s>\n<|assistant|>\n");
    }

    #[test]
    fn prompt_ids_are_as_many_as_prompt_tokens_and_equal_for_equal_prefixes() {
        let messages = vec![Message::new("user", "Hi there, a longer message")];
        for p in [
            Prompt::Tokens(vec![7; 9]),
            Prompt::Tokens(vec![]),
            Prompt::Text("abcdefghi".into()),
            Prompt::Text(String::new()),
            RequestFormat::ChatTemplate.prompt(messages.clone()),
        ] {
            assert_eq!(prompt_ids(&p).unwrap().len() as u32, prompt_tokens(&p).unwrap(), "{p:?}");
        }
        let a = prompt_ids(&Prompt::Text("shared system prompt; then A".into())).unwrap();
        let b = prompt_ids(&Prompt::Text("shared system prompt; then B".into())).unwrap();
        assert_eq!(a[..6], b[..6]);
        assert_ne!(a, b);
    }

    #[test]
    fn images_cost_their_tokens_after_the_text_and_the_same_picture_the_same_ids() {
        let image =
            |hash, tokens| Image { url: "data:".into(), width: 4, height: 4, bytes: 1, hash, pooled: false, tokens };
        let text = RequestFormat::ChatTemplate.prompt(vec![Message::new("user", "Hi")]);
        let with = |images| RequestFormat::ChatTemplate.prompt(vec![Message::new("user", "Hi").with_images(images)]);
        let two = with(vec![image(1, 576), image(2, 10)]);
        assert_eq!(prompt_tokens(&two), Ok(9 + 586));
        let ids = prompt_ids(&two).unwrap();
        assert_eq!(ids.len(), 9 + 586);
        assert_eq!(ids[..9], prompt_ids(&text).unwrap()[..]);
        assert_eq!(prompt_ids(&with(vec![image(1, 576)])).unwrap()[..], ids[..9 + 576]);
        assert_ne!(prompt_ids(&with(vec![image(3, 576)])).unwrap()[9..], ids[9..9 + 576]);
    }

    #[test]
    fn a_template_that_fails_to_render_is_an_error() {
        let t = ChatTemplate::new("{{ raise_exception('no') }}", TemplateOrigin::Inline).unwrap();
        let chat = Prompt::Chat(ChatPrompt { messages: vec![], template: Template::Custom(t) });
        assert!(prompt_tokens(&chat).unwrap_err().to_string().contains("no"));
    }
}
