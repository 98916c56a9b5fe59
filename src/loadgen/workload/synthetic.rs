//! A synthetic workload's requests: each drawn from its own random stream (lengths, token ids or
//! pseudo-words, its shared prefix's group, its images), as the parent module's docs describe.

use super::super::images::ImageGen;
use super::super::tokenizer::Tokenized;
use super::{PrefixDesign, TokenDist};
use crate::engine::chat::{Message, RequestFormat};
use crate::engine::{Prompt, RequestId};
use crate::rng::{FastRange, SplitMix64};

/// Sub-streams of one request's random stream.
const STREAM_PROMPT_LEN: u64 = 1;
const STREAM_OUTPUT_LEN: u64 = 2;
const STREAM_TOKENS: u64 = 3;
/// Streams of the whole workload (not of one request).
const STREAM_GROUP_ROUNDS: u64 = 4;
const STREAM_GROUP_PREFIXES: u64 = 5;
pub(super) const STREAM_IMAGES: u64 = 6;

/// Resizings of a token-exact multimodal prompt's text before the closest is kept.
const EXACT_CHAT_ROUNDS: usize = 4;
/// Distinct three-letter words.
pub(super) const WORDS: u64 = 26 * 26 * 26;

#[derive(Clone, Debug)]
pub(super) struct Synthetic {
    pub(super) prompt_tokens: TokenDist,
    pub(super) output_tokens: TokenDist,
    pub(super) seed: u64,
    pub(super) vocab_size: u32,
    /// The token ids, `0..vocab_size`: made once, as its division costs more than a request's
    /// draws.
    pub(super) token_range: FastRange,
    /// 0 without `unique_prefix`.
    pub(super) prefix_len: usize,
    pub(super) groups: PrefixDesign,
    /// `Some((system prompt, format))` for chat prompts.
    pub(super) chat: Option<(Option<String>, RequestFormat)>,
    /// With `workload.tokenizer`: prompts are text sized in its tokens.
    pub(super) tokenized: Option<Tokenized>,
    /// The user turn's images, for chat prompts with `[workload.images]`.
    pub(super) images: Option<ImageGen>,
}

impl Synthetic {
    /// The prompt length drawn for request `k`.
    fn drawn_prompt_len(&self, k: RequestId) -> u32 {
        let request_seed = SplitMix64::derive(self.seed, k).next_u64();
        sample(&self.prompt_tokens, &mut SplitMix64::derive(request_seed, STREAM_PROMPT_LEN))
    }

    /// See [`Workload::prompt_target`].
    pub(super) fn prompt_target(&self, k: RequestId) -> Option<u32> {
        let exact = self.tokenized.is_some() || self.images.as_ref().is_some_and(|g| g.spec().count_in_prompt);
        exact.then(|| self.drawn_prompt_len(k))
    }

    pub(super) fn request(&self, k: RequestId) -> (Prompt, u32) {
        let request_seed = SplitMix64::derive(self.seed, k).next_u64();
        let prompt_len = self.drawn_prompt_len(k);
        let max_tokens = sample(&self.output_tokens, &mut SplitMix64::derive(request_seed, STREAM_OUTPUT_LEN));
        let mut tokens_rng = SplitMix64::derive(request_seed, STREAM_TOKENS);
        if let Some(tokenized) = &self.tokenized {
            let unique = self.words(k, self.prefix_len, &mut tokens_rng);
            let len = prompt_len as usize;
            let prompt = match &self.chat {
                Some((system, format)) => tokenized.chat(system.as_deref(), &unique, format, len, &mut tokens_rng),
                None => Prompt::Text(tokenized.text(self.group_of(k), &unique, len, &mut tokens_rng)),
            };
            return (prompt, max_tokens);
        }
        if let Some((system, format)) = &self.chat {
            let mut messages = Vec::with_capacity(2);
            if let Some(system) = system {
                messages.push(Message::new("system", system.clone()));
            }
            let images = self.images.as_ref().map(|g| g.images(k)).unwrap_or_default();
            if self.images.as_ref().is_some_and(|g| g.spec().count_in_prompt) {
                let prompt = self.exact_chat(k, messages, images, format, prompt_len, &tokens_rng);
                return (prompt, max_tokens);
            }
            let words = prompt_len as usize;
            messages.push(Message::new("user", self.words(k, words, &mut tokens_rng)).with_images(images));
            return (format.prompt(messages), max_tokens);
        }
        let vocab = u64::from(self.vocab_size);
        let prompt_len = prompt_len as usize;
        let mut tokens = Vec::with_capacity(prompt_len);
        if let Some(group) = self.group_of(k) {
            let mut prefix_rng = group_rng(self.seed, group);
            let shared = (self.groups.prefix_tokens as usize).min(prompt_len);
            tokens.extend((0..shared).map(|_| prefix_rng.range_u64(0, vocab - 1) as u32));
        }
        let mut rest = k;
        for _ in 0..self.prefix_len.min(prompt_len - tokens.len()) {
            tokens.push((rest % vocab) as u32);
            rest /= vocab;
        }
        while tokens.len() < prompt_len {
            tokens.push(tokens_rng.range_in(&self.token_range) as u32);
        }
        (Prompt::Tokens(tokens), max_tokens)
    }

    /// Token-exact multimodal prompt `k` (`count_in_prompt`): `messages` (the system prompt, if
    /// any), then a user turn of words and `images`, whose words are as many as make the whole
    /// prompt `len` tokens as batchlab counts it (the simulator's count,
    /// [`crate::engine::sim::prompt::prompt_tokens`]: the template and text by four bytes a
    /// token, each image by the token rule). A word is four bytes, one token, so the first guess
    /// from a one-word turn is exact unless the template repeats the turn; a few corrections
    /// follow, and the closest is kept (one word at least: a template and images longer than
    /// `len` overshoot it). A template that cannot render is left to the engine, which reports
    /// it: the turn is then sized as if it had no template.
    fn exact_chat(
        &self,
        k: RequestId,
        messages: Vec<Message>,
        images: Vec<crate::engine::image::Image>,
        format: &RequestFormat,
        len: u32,
        rng: &SplitMix64,
    ) -> Prompt {
        let prompt = |words: usize| {
            let mut messages = messages.clone();
            let text = self.words(k, words, &mut rng.clone());
            messages.push(Message::new("user", text).with_images(images.clone()));
            format.prompt(messages)
        };
        let count = |p: &Prompt| crate::engine::sim::prompt::prompt_tokens(p).ok();
        let image_tokens: u32 = images.iter().map(|i| i.tokens).fold(0, u32::saturating_add);
        let Some(one) = count(&prompt(1)) else {
            return prompt(len.saturating_sub(image_tokens).max(1) as usize);
        };
        let mut words = (len.saturating_add(1).saturating_sub(one)).max(1) as usize;
        let mut best: Option<(u32, usize)> = None;
        for _ in 0..EXACT_CHAT_ROUNDS {
            let Some(n) = count(&prompt(words)) else { break };
            if best.is_none_or(|(off, _)| n.abs_diff(len) < off) {
                best = Some((n.abs_diff(len), words));
            }
            let next = (words as i64 + i64::from(len) - i64::from(n)).max(1) as usize;
            if n == len || next == words {
                break;
            }
            words = next;
        }
        prompt(best.map_or(words, |(_, w)| w))
    }

    /// The shared prefix of request `k`: position `k mod N` of round `k / N`'s seeded shuffle of
    /// the `N` groups (Fisher-Yates); `None` without groups.
    fn group_of(&self, k: RequestId) -> Option<u64> {
        let n = u64::from(self.groups.groups);
        if n == 0 {
            return None;
        }
        let round_seed = SplitMix64::derive(self.seed, STREAM_GROUP_ROUNDS).next_u64();
        let mut rng = SplitMix64::derive(round_seed, k / n);
        let mut order: Vec<u64> = (0..n).collect();
        for i in (1..order.len()).rev() {
            let j = rng.range_u64(0, i as u64) as usize;
            order.swap(i, j);
        }
        Some(order[(k % n) as usize])
    }
}

/// The random stream group `group`'s shared prefix is drawn from.
pub(super) fn group_rng(seed: u64, group: u64) -> SplitMix64 {
    SplitMix64::derive(SplitMix64::derive(seed, STREAM_GROUP_PREFIXES).next_u64(), group)
}

impl Synthetic {
    /// `n` three-letter words, the first [`Self::prefix_len`] spelling `k`; see the module docs.
    fn words(&self, k: RequestId, n: usize, rng: &mut SplitMix64) -> String {
        let mut text = String::with_capacity(4 * n);
        let mut rest = k;
        for i in 0..n {
            let digit = if i < self.prefix_len {
                let d = rest % WORDS;
                rest /= WORDS;
                d
            } else {
                rng.range_u64(0, WORDS - 1)
            };
            if i > 0 {
                text.push(' ');
            }
            for place in [1, 26, 26 * 26] {
                text.push(char::from(b'a' + (digit / place % 26) as u8));
            }
        }
        text
    }
}

/// Base-`vocab` digits needed to write any `u64`; 0 at a vocabulary of 1, where no digit differs.
pub(super) fn digits_for_u64(vocab: u32) -> usize {
    if vocab <= 1 {
        return 0;
    }
    let mut digits = 1;
    let mut rest = u64::MAX / u64::from(vocab);
    while rest > 0 {
        rest /= u64::from(vocab);
        digits += 1;
    }
    digits
}

/// One draw, at least 1: neither an empty prompt nor `max_tokens = 0` is a request. Normal draws
/// are rounded and clamped to `[min, max]` (NaN becomes `min`); a reversed range means `min`.
pub(crate) fn sample(dist: &TokenDist, rng: &mut SplitMix64) -> u32 {
    let v = match *dist {
        TokenDist::Fixed { value } => value,
        TokenDist::Uniform { min, max } => rng.range_u64(u64::from(min), u64::from(max.max(min))) as u32,
        TokenDist::Normal { mean, stdev, min, max } => {
            let x = rng.normal(mean, stdev).round();
            if x.is_nan() { min } else { x.clamp(f64::from(min), f64::from(max.max(min))) as u32 }
        }
    };
    v.max(1)
}
