//! Synthetic prompts sized by the model's own tokenizer (`workload.tokenizer`).
//!
//! Without a tokenizer a synthetic prompt is token ids, or, for chat, words of four bytes each;
//! with one, it is text of exactly the drawn number of tokens, as the model counts them:
//! - a text prompt is [`ModelTokenizer::exact_text`] (vLLM's `random` dataset: ordinary ids drawn,
//!   decoded, re-encoded until exact), counted as a text prompt is (with the tokenizer's own
//!   special tokens, a BOS say);
//! - a chat prompt's user turn is sized so that the whole prompt, rendered with the model's
//!   `chat_template` (or the custom one) and encoded, has the drawn count: the template's own
//!   tokens (the system turn, the role markers, `<s>`) are part of the count, as vLLM's
//!   `usage.prompt_tokens` has them;
//! - a unique prefix is the words spelling `k` (as for chat prompts without a tokenizer), encoded
//!   at the start, and a shared prefix (`prefix_groups`) is `prefix_tokens` real tokens each group
//!   draws once: every prompt of a group starts with exactly those ids, so a prefix cache serves
//!   its full blocks.
//!
//! All randomness comes from the request's own streams, so the same seed gives the same text.

use crate::engine::Prompt;
use crate::engine::chat::{ChatTemplate, Message, RequestFormat, render_plain};
use crate::engine::tokenizer::ModelTokenizer;
use crate::rng::SplitMix64;

/// Rounds of resizing a chat prompt's user turn before it is drawn again from scratch.
const CHAT_ROUNDS: usize = 8;
/// Fresh draws of a chat prompt's user turn before the closest is kept.
const CHAT_DRAWS: usize = 16;

/// A synthetic workload's tokenizer, and its groups' shared prefixes in its ids.
#[derive(Clone, Debug)]
pub(super) struct Tokenized {
    tokenizer: ModelTokenizer,
    /// Group `g`'s shared prefix: exactly `prefix_tokens` ids, as the tokenizer encodes them.
    group_prefixes: Vec<Vec<u32>>,
}

impl Tokenized {
    /// `groups` prefixes of `prefix_tokens` tokens, group `g`'s drawn from `group_seed(g)`.
    pub(super) fn new(
        tokenizer: ModelTokenizer,
        groups: u32,
        prefix_tokens: u32,
        group_seed: impl Fn(u64) -> SplitMix64,
    ) -> Tokenized {
        let group_prefixes = (0..u64::from(groups))
            .map(|g| tokenizer.exact_text(&[], &[], prefix_tokens as usize, &mut group_seed(g)).1)
            .collect();
        Tokenized { tokenizer, group_prefixes }
    }

    /// A text prompt of `len` tokens: group `group`'s shared prefix, then `unique` (the words
    /// that spell the request, or empty), then random text.
    pub(super) fn text(&self, group: Option<u64>, unique: &str, len: usize, rng: &mut SplitMix64) -> String {
        let fixed: &[u32] = group.map_or(&[], |g| &self.group_prefixes[g as usize]);
        let seed = self.unique_ids(unique, !fixed.is_empty());
        let target = len.saturating_sub(self.tokenizer.added_to_text()).max(1);
        self.tokenizer.exact_text(fixed, &seed, target, rng).0
    }

    /// A chat prompt of `len` tokens after its template: `system` (if any), then a user turn
    /// starting with `unique`, sized to fit. A prompt cannot be shorter than its template with a
    /// one-token user turn; it is that long then.
    pub(super) fn chat(
        &self,
        system: Option<&str>,
        unique: &str,
        format: &RequestFormat,
        len: usize,
        rng: &mut SplitMix64,
    ) -> Prompt {
        let mut messages: Vec<Message> = system.map(|s| Message::new("system", s)).into_iter().collect();
        messages.push(Message::new("user", ""));
        let seed = self.unique_ids(unique, false);
        let template = match format {
            RequestFormat::ChatTemplate => self.tokenizer.chat_template(),
            RequestFormat::Custom(t) => Some(t),
            RequestFormat::Plain => None,
        };
        let count = |messages: &[Message]| self.count(template, messages);
        let overhead = count(&messages);
        let mut want = len.saturating_sub(overhead).max(1);
        let mut closest: Option<(usize, String)> = None;
        'draws: for _ in 0..CHAT_DRAWS {
            for _ in 0..CHAT_ROUNDS {
                let (content, _) = self.tokenizer.exact_text(&[], &seed, want, rng);
                messages.last_mut().expect("the user turn").content = content;
                let n = count(&messages);
                if n == len {
                    closest = None;
                    break 'draws;
                }
                let content = &messages.last().expect("the user turn").content;
                if closest.as_ref().is_none_or(|(off, _)| n.abs_diff(len) < *off) {
                    closest = Some((n.abs_diff(len), content.clone()));
                }
                let next = (want + len).saturating_sub(n).max(1);
                if next == want {
                    // The template leaves no room for a shorter turn: nothing to resize.
                    continue 'draws;
                }
                want = next;
            }
        }
        if let Some((_, content)) = closest {
            messages.last_mut().expect("the user turn").content = content;
        }
        format.prompt(messages)
    }

    /// Tokens of `messages` as the engine will see them: rendered with `template` and encoded as
    /// it is (no special tokens added, the template writes its own); without a template, the
    /// `plain` text as a text prompt.
    fn count(&self, template: Option<&ChatTemplate>, messages: &[Message]) -> usize {
        let Some(template) = template else {
            return self.tokenizer.text_tokens(&render_plain(messages));
        };
        let (bos, eos) = self.tokenizer.bos_eos();
        // A template that cannot render this conversation fails the same way on the engine;
        // the request then goes out as drawn.
        let text = template.render(messages, bos, eos).unwrap_or_default();
        self.tokenizer.plain_ids(&text).len()
    }

    /// The ids of the words that spell the request, after a space when they follow a prefix.
    fn unique_ids(&self, unique: &str, after_prefix: bool) -> Vec<u32> {
        match (unique.is_empty(), after_prefix) {
            (true, _) => Vec::new(),
            (false, true) => self.tokenizer.plain_ids(&format!(" {unique}")),
            (false, false) => self.tokenizer.plain_ids(unique),
        }
    }
}
