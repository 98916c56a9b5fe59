//! Requests from a [`WorkloadSpec`]: synthetic token prompts or prompts from a file.
//!
//! Request `k` is a pure function of the plan and `k`: synthetic requests draw
//! from a random stream derived from `(seed, k)` alone, and file requests take line `k mod n`. So
//! the same plan gives the same requests whatever order, and however often, the runner asks for
//! them; a warmup, a retry or a second benchmark cannot shift what later requests look like.
//! The batcher numbers a request when it is submitted; a run submits request `k` as its `k`-th,
//! so its [`RequestId`] is `k` as well, and a `requests.jsonl` row names its workload request.
//!
//! Within one request the prompt length, the output length and the token ids each have their own
//! sub-stream, so changing the output distribution leaves every prompt unchanged.
//!
//! # Unique prefixes
//! With `unique_prefix`, the first [`Workload::prefix_len`] tokens of prompt `k` are the digits of
//! `k` in base `vocab_size`, least significant first; random tokens follow. The prefix is long
//! enough for every `u64` (5 tokens at a vocabulary of 32000), so no two prompts share their
//! first KV block, and since block hashes chain, no block at all: prefix caching cannot flatter the
//! results. A prompt shorter than the prefix keeps only the prefix's first (least significant)
//! digits, so prompt `k` still starts with `k mod vocab_size` and prompts of length `L` stay
//! distinct for the first `vocab_size^L` requests. At a vocabulary of 1 nothing can differ.
//! Without `unique_prefix` prompts are fully random: shared first blocks are merely improbable.
//!
//! # Shared prefixes
//! With `prefix_groups = N` and `prefix_tokens = L`, every prompt starts with one of `N` shared
//! prefixes of `L` token ids (the same ids, so a block-hash prefix cache can serve them), then the
//! unique prefix (when on) and random tokens up to the drawn length. Requests are assigned to
//! groups in rounds of `N`: round `r` (requests `rN .. rN + N − 1`) is a seeded shuffle of all `N`
//! groups, so the groups are used equally, the assignment is deterministic per seed, and each
//! group's first request is in round 0 (requests `0 .. N − 1`). That makes the *designed*
//! prefix-cache hit of request `k` exact ([`PrefixDesign::cached_tokens`]): nothing for `k < N`,
//! and the prefix's full KV blocks, `⌊L / B⌋ · B` tokens for a block size `B`, after.
//!
//! Token ids are raw ids in `[0, vocab_size)`; they may include a model's special tokens.
//!
//! # Synthetic chat
//! With `chat = true` a synthetic prompt is a conversation: the `system_prompt` (if any), then a
//! user turn of `prompt_tokens` pseudo-words. A word is three letters and a space, one token by
//! batchlab's counting rule ([`crate::engine::tokens`]), so the user turn is exactly the drawn
//! length by that rule (a real tokenizer counts otherwise; the report has the engine's count).
//! With `unique_prefix` the first [`CHAT_PREFIX_WORDS`] words spell `k` in base 26³, least
//! significant first, as the token prefix does; they follow the shared system prompt. With
//! `[workload.images] count_in_prompt`, the whole prompt (template, text and images) is the drawn
//! length by that rule instead, and [`Workload::prompt_target`] says so.
//!
//! Prompt token counts are known only for token prompts ([`Prompt::token_len`]); for text and
//! chat prompts they are `None` until the engine reports them.
//!
//! Files: this one holds the plan ([`WorkloadSpec`]), the [`Workload`] and a file's or a trace's
//! requests; `synthetic` draws a synthetic workload's requests.

mod synthetic;

use std::path::{Path, PathBuf};

use serde::Serialize;

use super::dataset::{self, DatasetOptions};
use super::error::LoadError;
use super::file::DatasetStats;
use super::images::{ImageGen, ImageSpec};
use super::jsonl::{Columns, LinePrompt, PromptLine};
use super::profile::TraceArrivals;
use super::tokenizer::Tokenized;
use crate::engine::chat::RequestFormat;
use crate::engine::tokenizer::{ModelTokenizer, TokenCounter};
use crate::engine::{EngineRequest, Prompt, RequestId};
use crate::rng::{FastRange, SplitMix64};
/// One draw of a token-count distribution (at least 1), as the synthetic workload draws.
pub(crate) use synthetic::sample as draw_tokens;
use synthetic::{STREAM_IMAGES, Synthetic, digits_for_u64, group_rng};

/// A distribution of token counts.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "dist", rename_all = "snake_case")]
pub enum TokenDist {
    /// Always the same count.
    Fixed {
        /// Every draw gives this count.
        value: u32,
    },
    /// Uniform over `min..=max`.
    Uniform {
        /// Smallest count.
        min: u32,
        /// Largest count (inclusive).
        max: u32,
    },
    /// Normal, rounded and clamped to `min..=max`.
    Normal {
        /// Mean count.
        mean: f64,
        /// Standard deviation, in tokens.
        stdev: f64,
        /// Draws below are clamped up to this.
        min: u32,
        /// Draws above are clamped down to this.
        max: u32,
    },
}

/// Where the requests come from: drawn from distributions, or read from a JSONL file.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "source", rename_all = "snake_case")]
pub enum WorkloadSpec {
    /// Random token prompts with drawn lengths.
    Synthetic {
        /// Prompt length in tokens.
        prompt_tokens: TokenDist,
        /// `max_tokens` of each request.
        output_tokens: TokenDist,
        /// Seed of the draws; defaults to one derived from the run seed.
        seed: u64,
        /// Each prompt starts with tokens unique to it, so prefix caching cannot flatter results.
        unique_prefix: bool,
        /// Shared prefixes prompts start with, before the unique prefix; 0 for none.
        prefix_groups: u32,
        /// Tokens in each shared prefix; less than the shortest prompt.
        prefix_tokens: u32,
        /// Prompt token ids are drawn from `0..vocab_size`; at least 1.
        vocab_size: u32,
        /// Requests ignore end-of-sequence and generate exactly `max_tokens`.
        ignore_eos: bool,
        /// Sampling temperature of every request; 0 is greedy.
        temperature: f32,
        /// `chat`, `system_prompt`: prompts as conversations instead of token ids.
        chat: SyntheticChat,
        /// `request_format`: how chat prompts become the model's prompt.
        request_format: RequestFormat,
        /// `tokenizer`: prompts are text of exactly their drawn length in this tokenizer's tokens
        /// (`super::tokenizer`); `None`: token ids, and chat by the four-byte rule.
        tokenizer: Option<ModelTokenizer>,
        /// `[workload.images]`: images after each user turn's text; `None` for text only.
        images: Option<ImageSpec>,
    },
    /// One request per entry of a file (JSONL, ShareGPT or text), replayed in order.
    File {
        /// The file.
        path: PathBuf,
        /// For entries without `max_tokens`.
        default_max_tokens: u32,
        /// Requests ignore end-of-sequence and generate exactly `max_tokens`.
        ignore_eos: bool,
        /// Sampling temperature of every request; 0 is greedy.
        temperature: f32,
        /// How the file is read: format, columns, bad lines, length limits.
        dataset: DatasetOptions,
        /// `request_format`: how chat prompts become the model's prompt.
        request_format: RequestFormat,
        /// `tokenizer`: the length limits count this tokenizer's tokens; `None`: four bytes a token.
        tokenizer: Option<ModelTokenizer>,
    },
}

impl TokenDist {
    /// The largest count a draw can give ([`sample`]'s rule: at least 1, a reversed range is `min`).
    pub fn largest(&self) -> u32 {
        match *self {
            TokenDist::Fixed { value } => value,
            TokenDist::Uniform { min, max } | TokenDist::Normal { min, max, .. } => max.max(min),
        }
        .max(1)
    }
}

impl WorkloadSpec {
    /// The longest prompt and output, in tokens, a request can have, where that is known before
    /// the workload is read: a synthetic one's largest draws; `None` for a file.
    pub fn longest(&self) -> Option<(u32, u32)> {
        match self {
            WorkloadSpec::Synthetic { prompt_tokens, output_tokens, .. } => {
                Some((prompt_tokens.largest(), output_tokens.largest()))
            }
            WorkloadSpec::File { .. } => None,
        }
    }

    /// The model's tokenizer the workload counts with (`workload.tokenizer`), if any.
    pub fn tokenizer(&self) -> Option<&ModelTokenizer> {
        match self {
            WorkloadSpec::Synthetic { tokenizer, .. } | WorkloadSpec::File { tokenizer, .. } => tokenizer.as_ref(),
        }
    }

    /// How the workload counts prompt tokens ([`TokenCounter`]).
    pub fn counter(&self) -> TokenCounter {
        TokenCounter::of(self.tokenizer())
    }
}

/// A synthetic workload's chat settings: `chat` and `system_prompt`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct SyntheticChat {
    /// `chat`: each prompt is a conversation, not token ids.
    pub enabled: bool,
    /// `system_prompt`: the system turn before the user turn.
    pub system_prompt: Option<String>,
}

/// A source of requests; see the module docs.
#[derive(Clone, Debug)]
pub struct Workload {
    source: Source,
    ignore_eos: bool,
    temperature: f32,
}

#[derive(Clone, Debug)]
enum Source {
    Synthetic(Synthetic),
    File { lines: Vec<PromptLine>, default_max_tokens: u32, format: RequestFormat, stats: DatasetStats },
}

/// A synthetic workload's shared prefixes, and the prefix-cache hits it was designed for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct PrefixDesign {
    /// Shared prefixes; 0 for none.
    pub groups: u32,
    /// Tokens in each.
    pub prefix_tokens: u32,
}

impl PrefixDesign {
    /// The prompt tokens of request `id` a prefix cache with full blocks of `block_size` tokens
    /// would serve, had every earlier request of the run reached it and nothing been evicted:
    /// 0 for the first round (`id < groups`: each group's first request), else the prefix's full
    /// blocks, `⌊prefix_tokens / block_size⌋ · block_size` (a block size of 0 counts as 1). The
    /// tokens after the prefix are unique or random, so no later block is shared.
    pub fn cached_tokens(&self, id: RequestId, block_size: u32) -> u32 {
        if self.groups == 0 || id < u64::from(self.groups) {
            return 0;
        }
        let block = block_size.max(1);
        self.prefix_tokens / block * block
    }
}

/// Words of a synthetic chat prompt's unique prefix: enough base-26³ digits for every `u64`.
pub const CHAT_PREFIX_WORDS: usize = 5;

impl Workload {
    /// Builds the workload; reads and checks the whole prompt file at once.
    pub fn from_plan(plan: &WorkloadSpec) -> Result<Workload, LoadError> {
        match plan {
            WorkloadSpec::Synthetic {
                prompt_tokens,
                output_tokens,
                seed,
                unique_prefix,
                prefix_groups,
                prefix_tokens: shared_tokens,
                vocab_size,
                ignore_eos,
                temperature,
                chat,
                request_format,
                tokenizer,
                images,
            } => {
                if *vocab_size == 0 {
                    return Err(LoadError::EmptyVocab);
                }
                if images.is_some() && (!chat.enabled || *request_format == RequestFormat::Plain) {
                    return Err(LoadError::ImagesNeedChat);
                }
                if images.is_some() && tokenizer.is_some() {
                    return Err(LoadError::ImagesWithTokenizer);
                }
                let prefix_len = match (*unique_prefix, chat.enabled || tokenizer.is_some()) {
                    (false, _) => 0,
                    (true, false) => digits_for_u64(*vocab_size),
                    (true, true) => CHAT_PREFIX_WORDS,
                };
                let groups = if *prefix_groups == 0 || *shared_tokens == 0 {
                    PrefixDesign::default()
                } else {
                    PrefixDesign { groups: *prefix_groups, prefix_tokens: *shared_tokens }
                };
                let synthetic = Synthetic {
                    prompt_tokens: prompt_tokens.clone(),
                    output_tokens: output_tokens.clone(),
                    seed: *seed,
                    vocab_size: *vocab_size,
                    token_range: FastRange::new(0, u64::from(*vocab_size) - 1),
                    prefix_len,
                    groups,
                    chat: chat.enabled.then(|| (chat.system_prompt.clone(), request_format.clone())),
                    tokenized: tokenizer.as_ref().map(|t| {
                        Tokenized::new(t.clone(), groups.groups, groups.prefix_tokens, |g| group_rng(*seed, g))
                    }),
                    images: images
                        .as_ref()
                        .map(|spec| ImageGen::new(spec.clone(), SplitMix64::derive(*seed, STREAM_IMAGES).next_u64())),
                };
                Ok(Workload {
                    source: Source::Synthetic(synthetic),
                    ignore_eos: *ignore_eos,
                    temperature: *temperature,
                })
            }
            WorkloadSpec::File {
                path,
                default_max_tokens,
                ignore_eos,
                temperature,
                dataset,
                request_format,
                tokenizer,
            } => {
                let bytes = std::fs::read(path).map_err(|source| LoadError::Io { path: path.clone(), source })?;
                let (lines, stats) = dataset::read(&bytes, path, dataset, &TokenCounter::of(tokenizer.as_ref()))?;
                Ok(Workload {
                    source: Source::File {
                        lines,
                        default_max_tokens: (*default_max_tokens).max(1),
                        format: request_format.clone(),
                        stats,
                    },
                    ignore_eos: *ignore_eos,
                    temperature: *temperature,
                })
            }
        }
    }

    /// Request `k`, not numbered yet (the batcher does that at submit). The same workload always
    /// gives the same request for the same `k`.
    pub fn request(&self, k: u64) -> EngineRequest<()> {
        let (prompt, max_tokens) = match &self.source {
            Source::Synthetic(s) => s.request(k),
            Source::File { lines, default_max_tokens, format, .. } => {
                // Cyclic reuse; `lines` is never empty and a u64 modulo fits back in usize.
                let line = &lines[(k % lines.len() as u64) as usize];
                let prompt = match &line.prompt {
                    LinePrompt::Text(text) => Prompt::Text(text.clone()),
                    LinePrompt::Tokens(ids) => Prompt::Tokens(ids.clone()),
                    LinePrompt::Chat(messages) => format.prompt(messages.clone()),
                };
                (prompt, line.max_tokens.unwrap_or(*default_max_tokens))
            }
        };
        generated_request(prompt, max_tokens, self.ignore_eos, self.temperature, None)
    }

    /// The prompt length request `k` was sized to, where the workload promises it as the engine
    /// counts it: the drawn `prompt_tokens` of a synthetic workload with `workload.tokenizer` (the
    /// model's tokens; a chat prompt's after its template) or with `[workload.images]
    /// count_in_prompt` (the whole prompt, its template and images included, as batchlab counts
    /// it). `None` otherwise (token prompts are sent as drawn; other text is counted by the
    /// engine alone). A run records it beside the engine's count (`prompt_tokens_target` in
    /// requests.jsonl).
    pub fn prompt_target(&self, k: u64) -> Option<u32> {
        match &self.source {
            Source::Synthetic(s) => s.prompt_target(k),
            Source::File { .. } => None,
        }
    }

    /// The 0-based index of a file workload's first entry that is a conversation sent as one
    /// (`messages`, with a `request_format` other than `plain`); `None` when there is none.
    pub fn first_chat_entry(&self) -> Option<usize> {
        match &self.source {
            Source::File { lines, format, .. } if *format != RequestFormat::Plain => {
                lines.iter().position(|l| matches!(l.prompt, LinePrompt::Chat(_)))
            }
            _ => None,
        }
    }

    /// Requests `first, first + 1, ...`, without end.
    pub fn requests(&self, first: u64) -> impl Iterator<Item = EngineRequest<()>> + '_ {
        (first..=u64::MAX).map(|k| self.request(k))
    }

    /// The number of leading tokens (words, for chat) that identify a synthetic prompt; 0
    /// without `unique_prefix` and for file workloads.
    pub fn prefix_len(&self) -> usize {
        match &self.source {
            Source::Synthetic(s) => s.prefix_len,
            Source::File { .. } => 0,
        }
    }

    /// The shared prefixes a synthetic workload was designed with (no groups: every prompt is
    /// designed to miss); `None` for a file workload, whose sharing is unknown.
    pub fn prefix_design(&self) -> Option<PrefixDesign> {
        match &self.source {
            Source::Synthetic(s) => Some(s.groups),
            Source::File { .. } => None,
        }
    }

    /// A synthetic chat workload's images: their settings; `None` without `[workload.images]`.
    pub fn images(&self) -> Option<&ImageSpec> {
        match &self.source {
            Source::Synthetic(s) => s.images.as_ref().map(ImageGen::spec),
            Source::File { .. } => None,
        }
    }

    /// Distinct prompts in a file workload (after which they repeat); `None` for synthetic ones.
    pub fn distinct_prompts(&self) -> Option<usize> {
        match &self.source {
            Source::Synthetic(_) => None,
            Source::File { lines, .. } => Some(lines.len()),
        }
    }

    /// A file workload's entries, the `max_tokens` of those without one, and how conversations
    /// are sent; `None` for a synthetic one. Sessions replay its conversations.
    pub fn file_entries(&self) -> Option<(&[PromptLine], u32, &RequestFormat)> {
        match &self.source {
            Source::File { lines, default_max_tokens, format, .. } => Some((lines, *default_max_tokens, format)),
            Source::Synthetic(_) => None,
        }
    }

    /// What reading a file workload found (bad lines skipped, prompts filtered); `None` for
    /// synthetic ones.
    pub fn dataset_stats(&self) -> Option<&DatasetStats> {
        match &self.source {
            Source::Synthetic(_) => None,
            Source::File { stats, .. } => Some(stats),
        }
    }
}

/// The arrival times of a trace: the workload file's `timestamp`s, which every line must have, in
/// time order. Errors name the file and every bad line.
pub fn read_trace(path: &Path, columns: &Columns) -> Result<TraceArrivals, LoadError> {
    let bytes = std::fs::read(path).map_err(|source| LoadError::Io { path: path.to_owned(), source })?;
    trace_of(&bytes, path, columns)
}

/// [`read_trace`] of a trace already read: `bytes`, the content of `path` (which names it in errors).
pub(crate) fn trace_of(bytes: &[u8], path: &Path, columns: &Columns) -> Result<TraceArrivals, LoadError> {
    let timestamps = dataset::trace(bytes, path, columns)?;
    // `trace_timestamps` checked order and finiteness, and the file is not empty.
    TraceArrivals::from_timestamps(&timestamps).ok_or_else(|| LoadError::EmptyFile { path: path.to_owned() })
}

/// A request the load generator made, not numbered yet (the batcher does that at submit): the one
/// place the fields no workload sets are filled in, for [`Workload::request`] and a session's turn
/// (`session`: its number).
pub(crate) fn generated_request(
    prompt: Prompt,
    max_tokens: u32,
    ignore_eos: bool,
    temperature: f32,
    session: Option<u64>,
) -> EngineRequest<()> {
    EngineRequest {
        id: (),
        prompt,
        max_tokens,
        min_tokens: 0,
        ignore_eos,
        temperature,
        // Sampling randomness is the engine's (its seed is in the engine plan); a per-request seed
        // would make vLLM build a generator per request and slow sampling down.
        seed: None,
        session,
        prepared: None,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use proptest::prelude::*;

    use super::synthetic::{WORDS, sample};
    use super::*;
    use crate::engine::chat::Message;

    fn synthetic(
        prompt_tokens: TokenDist,
        output_tokens: TokenDist,
        seed: u64,
        unique_prefix: bool,
        vocab_size: u32,
    ) -> Workload {
        Workload::from_plan(&WorkloadSpec::Synthetic {
            prompt_tokens,
            output_tokens,
            seed,
            unique_prefix,
            prefix_groups: 0,
            prefix_tokens: 0,
            vocab_size,
            ignore_eos: true,
            temperature: 0.0,
            chat: SyntheticChat::default(),
            request_format: RequestFormat::default(),
            tokenizer: None,
            images: None,
        })
        .unwrap()
    }

    fn tokens(r: &EngineRequest<()>) -> &[u32] {
        match &r.prompt {
            Prompt::Tokens(t) => t,
            other => panic!("not a token prompt: {other:?}"),
        }
    }

    const U: fn(u32, u32) -> TokenDist = |min, max| TokenDist::Uniform { min, max };

    /// Draws `n` values of `dist` and checks each is in `[lo, hi]` and all of `[lo, hi]` occurs
    /// when `every` (small ranges).
    fn check_dist(dist: TokenDist, lo: u32, hi: u32, every: bool) {
        let mut rng = SplitMix64::new(9);
        let seen: HashSet<u32> = (0..5000).map(|_| sample(&dist, &mut rng)).collect();
        assert!(seen.iter().all(|v| (lo..=hi).contains(v)), "{dist:?}: {seen:?}");
        if every {
            assert_eq!(seen.len() as u32, hi - lo + 1, "{dist:?}: {seen:?}");
        }
    }

    #[test]
    fn distributions_stay_in_bounds() {
        check_dist(TokenDist::Fixed { value: 7 }, 7, 7, true);
        check_dist(TokenDist::Fixed { value: 0 }, 1, 1, true);
        check_dist(U(3, 9), 3, 9, true);
        check_dist(U(0, 2), 1, 2, true);
        check_dist(U(5, 2), 5, 5, true);
        check_dist(TokenDist::Normal { mean: 100.0, stdev: 50.0, min: 90, max: 110 }, 90, 110, true);
        check_dist(TokenDist::Normal { mean: 100.0, stdev: 0.0, min: 1, max: 1000 }, 100, 100, true);
        check_dist(TokenDist::Normal { mean: 1e12, stdev: 1.0, min: 1, max: 64 }, 64, 64, true);
        check_dist(TokenDist::Normal { mean: f64::NAN, stdev: 1.0, min: 4, max: 64 }, 4, 4, true);
        check_dist(TokenDist::Normal { mean: 10.0, stdev: f64::INFINITY, min: 4, max: 64 }, 4, 64, false);
    }

    #[test]
    fn normal_draws_are_rounded_around_the_mean() {
        let mut rng = SplitMix64::new(3);
        let dist = TokenDist::Normal { mean: 200.0, stdev: 20.0, min: 1, max: 1000 };
        let n = 20_000;
        let mean = (0..n).map(|_| f64::from(sample(&dist, &mut rng))).sum::<f64>() / f64::from(n);
        assert!((mean - 200.0).abs() < 1.0, "{mean}");
    }

    #[test]
    fn same_seed_same_requests_in_any_order() {
        let w = synthetic(U(1, 300), U(1, 50), 42, false, 32000);
        let forward: Vec<_> = w.requests(0).take(200).collect();
        let mut backward: Vec<_> = (0..200).rev().map(|k| w.request(k)).collect();
        backward.reverse();
        assert_eq!(forward, backward);
        let again = synthetic(U(1, 300), U(1, 50), 42, false, 32000);
        assert_eq!(again.request(123), forward[123]);
        // A different seed gives different prompts.
        let other = synthetic(U(1, 300), U(1, 50), 43, false, 32000);
        assert_ne!(other.request(123).prompt, forward[123].prompt);
    }

    /// Pinned values: a change here changes every report made with a seed.
    #[test]
    fn requests_are_stable_across_versions() {
        let w = synthetic(U(6, 10), U(1, 100), 42, true, 32000);
        let r = w.request(3);
        assert_eq!(tokens(&r), [3, 0, 0, 0, 0, 22038, 4110]);
        assert_eq!(r.max_tokens, 37);
    }

    #[test]
    fn output_lengths_do_not_shift_prompts() {
        let a = synthetic(U(1, 300), U(1, 50), 42, false, 32000);
        let b = synthetic(U(1, 300), TokenDist::Normal { mean: 9.0, stdev: 3.0, min: 1, max: 20 }, 42, false, 32000);
        for k in 0..100 {
            assert_eq!(a.request(k).prompt, b.request(k).prompt, "{k}");
        }
    }

    #[test]
    fn unique_prefixes_differ_in_the_first_16_tokens() {
        let w = synthetic(U(16, 64), U(1, 8), 1, true, 32000);
        assert_eq!(w.prefix_len(), 5);
        let mut firsts = HashSet::new();
        for (k, r) in w.requests(0).take(10_000).enumerate() {
            let t = tokens(&r);
            assert!(t.iter().all(|&id| id < 32000));
            assert!(firsts.insert(t[..16].to_vec()), "request {k} repeats a first block");
        }
        // Without unique prefixes the same seed gives no such guarantee, and the prompts differ.
        let plain = synthetic(U(16, 64), U(1, 8), 1, false, 32000);
        assert_ne!(plain.request(7).prompt, w.request(7).prompt);
    }

    /// `(vocab, prompt length, request k, expected first tokens)`.
    fn check_prefix(vocab: u32, len: u32, k: u64, expected: &[u32]) {
        let w = synthetic(TokenDist::Fixed { value: len }, U(1, 1), 5, true, vocab);
        let r = w.request(k);
        let t = tokens(&r);
        assert_eq!(t.len(), len.max(1) as usize, "prompt length must not change");
        assert_eq!(&t[..expected.len()], expected, "vocab {vocab}, len {len}, k {k}");
        assert!(t.iter().all(|&id| id < vocab));
    }

    #[test]
    fn prefix_encodes_the_index_least_significant_first() {
        check_prefix(32000, 8, 0, &[0, 0, 0, 0, 0]);
        check_prefix(32000, 8, 32001, &[1, 1, 0, 0, 0]);
        check_prefix(32000, 8, u64::MAX, &[15615, 15423, 30509, 18949, 17]);
        check_prefix(10, 30, 1234, &[4, 3, 2, 1, 0, 0]);
        // Truncated: the first token is still k mod vocab.
        check_prefix(32000, 1, 32005, &[5]);
        check_prefix(32000, 0, 9, &[9]);
        check_prefix(2, 3, 0b1101, &[1, 0, 1]);
        // Nothing can differ at a vocabulary of one.
        check_prefix(1, 4, 77, &[0, 0, 0, 0]);
    }

    #[test]
    fn prefix_length_covers_every_u64() {
        for (vocab, digits) in [(1, 0), (2, 64), (10, 20), (256, 8), (32000, 5), (u32::MAX, 3)] {
            assert_eq!(digits_for_u64(vocab), digits, "{vocab}");
        }
    }

    #[test]
    fn zero_vocab_is_an_error() {
        let plan = WorkloadSpec::Synthetic {
            prompt_tokens: U(1, 2),
            output_tokens: U(1, 2),
            seed: 0,
            unique_prefix: true,
            prefix_groups: 0,
            prefix_tokens: 0,
            vocab_size: 0,
            ignore_eos: true,
            temperature: 0.0,
            chat: SyntheticChat::default(),
            request_format: RequestFormat::default(),
            tokenizer: None,
            images: None,
        };
        assert!(matches!(Workload::from_plan(&plan), Err(LoadError::EmptyVocab)));
    }

    fn grouped(groups: u32, prefix_tokens: u32, unique_prefix: bool, seed: u64) -> Workload {
        Workload::from_plan(&WorkloadSpec::Synthetic {
            prompt_tokens: U(40, 80),
            output_tokens: U(1, 8),
            seed,
            unique_prefix,
            prefix_groups: groups,
            prefix_tokens,
            vocab_size: 32000,
            ignore_eos: true,
            temperature: 0.0,
            chat: SyntheticChat::default(),
            request_format: RequestFormat::default(),
            tokenizer: None,
            images: None,
        })
        .unwrap()
    }

    #[test]
    fn prefix_groups_share_exact_leading_tokens_and_nothing_more() {
        for unique_prefix in [true, false] {
            let w = grouped(3, 32, unique_prefix, 5);
            let prompts: Vec<Vec<u32>> = w.requests(0).take(300).map(|r| tokens(&r).to_vec()).collect();
            let prefixes: HashSet<&[u32]> = prompts.iter().map(|t| &t[..32]).collect();
            assert_eq!(prefixes.len(), 3, "three groups, each prefix exactly shared");
            // Every round of 3 holds each group once.
            for round in prompts.chunks(3) {
                let in_round: HashSet<&[u32]> = round.iter().map(|t| &t[..32]).collect();
                assert_eq!(in_round.len(), 3);
            }
            // Past the prefix, no two prompts share a first token block.
            let rests: HashSet<&[u32]> = prompts.iter().map(|t| &t[32..40]).collect();
            assert_eq!(rests.len(), prompts.len(), "unique_prefix = {unique_prefix}");
            if unique_prefix {
                assert_eq!(prompts[7][32], 7, "the unique prefix follows the shared one");
            }
        }
        // Deterministic per seed, and another seed assigns and draws differently.
        let (a, b, c) = (grouped(4, 16, true, 1), grouped(4, 16, true, 1), grouped(4, 16, true, 2));
        let firsts = |w: &Workload| w.requests(0).take(8).map(|r| tokens(&r)[..16].to_vec()).collect::<Vec<_>>();
        assert_eq!(firsts(&a), firsts(&b));
        assert_ne!(firsts(&a), firsts(&c));
        // No groups: the prompts are exactly those of before.
        assert_eq!(
            grouped(0, 0, true, 42).request(3).prompt,
            synthetic(U(40, 80), U(1, 8), 42, true, 32000).request(3).prompt
        );
    }

    #[test]
    fn designed_hits_are_the_prefix_full_blocks_after_the_first_round() {
        let design = grouped(2, 300, true, 1).prefix_design().unwrap();
        assert_eq!(design, PrefixDesign { groups: 2, prefix_tokens: 300 });
        let hits: Vec<u32> = (0..4).map(|id| design.cached_tokens(id, 128)).collect();
        assert_eq!(hits, [0, 0, 256, 256]);
        assert_eq!(design.cached_tokens(9, 16), 288);
        assert_eq!(design.cached_tokens(9, 0), 300, "a block size of 0 counts tokens");
        assert_eq!(grouped(0, 300, true, 1).prefix_design().unwrap().cached_tokens(9, 16), 0);
    }

    #[test]
    fn traces_are_read_from_the_file() {
        let path =
            temp_file("trace", "{\"prompt\": \"a\", \"timestamp\": 100.5}\n{\"prompt\": \"b\", \"timestamp\": 101}\n");
        let trace = read_trace(&path, &Columns::default()).unwrap();
        assert_eq!(trace.offsets(), [0.0, 0.5]);
        std::fs::write(&path, "{\"prompt\": \"a\"}\n").unwrap();
        let err = read_trace(&path, &Columns::default()).unwrap_err().to_string();
        std::fs::remove_file(&path).unwrap();
        assert!(err.contains(&format!("{}:1: missing `timestamp`", path.display())), "{err}");
    }

    fn temp_file(name: &str, text: &str) -> std::path::PathBuf {
        let path = std::env::temp_dir().join(format!("batchlab-load-{}-{name}.jsonl", std::process::id()));
        std::fs::write(&path, text).unwrap();
        path
    }

    fn file_plan(path: std::path::PathBuf) -> WorkloadSpec {
        WorkloadSpec::File {
            path,
            default_max_tokens: 16,
            ignore_eos: false,
            temperature: 0.5,
            dataset: DatasetOptions::default(),
            request_format: RequestFormat::default(),
            tokenizer: None,
        }
    }

    fn chat_workload(unique_prefix: bool, system: Option<&str>, format: RequestFormat) -> Workload {
        Workload::from_plan(&WorkloadSpec::Synthetic {
            prompt_tokens: U(1, 40),
            output_tokens: U(1, 8),
            seed: 11,
            unique_prefix,
            prefix_groups: 0,
            prefix_tokens: 0,
            vocab_size: 32000,
            ignore_eos: true,
            temperature: 0.0,
            chat: SyntheticChat { enabled: true, system_prompt: system.map(str::to_owned) },
            request_format: format,
            tokenizer: None,
            images: None,
        })
        .unwrap()
    }

    fn messages(r: &EngineRequest<()>) -> &[Message] {
        match &r.prompt {
            Prompt::Chat(c) => &c.messages,
            other => panic!("not a chat prompt: {other:?}"),
        }
    }

    #[test]
    fn synthetic_chat_is_a_system_and_a_user_turn_of_the_drawn_length() {
        let w = chat_workload(false, Some("You are terse."), RequestFormat::ChatTemplate);
        let tokens_twin = synthetic(U(1, 40), U(1, 8), 11, false, 32000);
        for k in 0..200 {
            let r = w.request(k);
            let m = messages(&r);
            assert_eq!(m[0], Message::new("system", "You are terse."));
            assert_eq!(m[1].role, "user");
            // The same draws as a token workload: the user turn has its prompt length, by the rule.
            let twin = tokens_twin.request(k);
            assert_eq!(crate::engine::tokens::text_tokens(&m[1].content), tokens(&twin).len(), "{k}");
            assert_eq!(r.max_tokens, twin.max_tokens);
            assert!(m[1].content.split(' ').all(|w| w.len() == 3 && w.bytes().all(|b| b.is_ascii_lowercase())));
        }
        assert_eq!(w.request(5), w.request(5));
        assert_ne!(w.request(5).prompt, w.request(6).prompt);
    }

    #[test]
    fn synthetic_chat_unique_prefixes_spell_the_request() {
        assert_eq!(CHAT_PREFIX_WORDS, digits_for_u64(WORDS as u32));
        let w = chat_workload(true, None, RequestFormat::ChatTemplate);
        assert_eq!(w.prefix_len(), CHAT_PREFIX_WORDS);
        let first_words = |k: u64| {
            let r = w.request(k);
            let m = messages(&r);
            assert_eq!(m.len(), 1, "no system prompt");
            m[0].content.split(' ').take(2).map(str::to_owned).collect::<Vec<_>>()
        };
        // k = 27 + 2 * 17576: digits 27 ("bba") and 2 ("caa"), least significant first.
        let k = 27 + 2 * WORDS;
        let words = first_words(k);
        assert_eq!(words[0], "bba");
        if words.len() > 1 {
            assert_eq!(words[1], "caa");
        }
        let mut seen = HashSet::new();
        let long = chat_workload(true, None, RequestFormat::ChatTemplate);
        for (k, r) in long.requests(0).take(2000).enumerate() {
            let m = messages(&r);
            let prefix: Vec<&str> = m[0].content.split(' ').take(CHAT_PREFIX_WORDS).collect();
            if prefix.len() == CHAT_PREFIX_WORDS {
                assert!(seen.insert(prefix.join(" ")), "request {k} repeats a prefix");
            }
        }
    }

    #[test]
    fn plain_synthetic_chat_is_text() {
        let w = chat_workload(false, Some("S"), RequestFormat::Plain);
        let Prompt::Text(text) = w.request(0).prompt else { panic!("plain is text") };
        assert!(text.starts_with("system: S\nuser: "), "{text}");
    }

    #[test]
    fn file_chat_prompts_take_the_request_format() {
        let path = temp_file(
            "chat",
            "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}]}\n{\"prompt_token_ids\": [4, 5]}\n",
        );
        let mut plan = file_plan(path.clone());
        let w = Workload::from_plan(&plan).unwrap();
        assert_eq!(messages(&w.request(0)), [Message::new("user", "Hi")]);
        assert_eq!(tokens(&w.request(1)), [4, 5]);
        if let WorkloadSpec::File { request_format, .. } = &mut plan {
            *request_format = RequestFormat::Plain;
        }
        let w = Workload::from_plan(&plan).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(w.request(0).prompt, Prompt::Text("user: Hi".into()));
        let stats = w.dataset_stats().unwrap();
        assert_eq!((stats.entries, stats.prompts, stats.skipped_bad_lines), (2, 2, 0));
    }

    #[test]
    fn file_prompts_are_reused_cyclically() {
        let path = temp_file("cyclic", "{\"prompt\": \"a\", \"max_tokens\": 3}\n{\"prompt\": \"b\"}\n");
        let w = Workload::from_plan(&file_plan(path.clone())).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(w.distinct_prompts(), Some(2));
        let got: Vec<_> = (0..).zip(w.requests(0).take(5)).map(|(k, r)| (k, r.prompt, r.max_tokens)).collect();
        let text = |s: &str| Prompt::Text(s.into());
        assert_eq!(
            got,
            [(0, text("a"), 3), (1, text("b"), 16), (2, text("a"), 3), (3, text("b"), 16), (4, text("a"), 3)]
        );
        let r = w.request(9);
        assert_eq!((r.prompt.token_len(), r.ignore_eos, r.temperature), (None, false, 0.5));
    }

    #[test]
    fn file_errors_name_the_file() {
        let path = temp_file("bad", "{\"prompt\": \"a\"}\n{\"prompt\": 1}\n");
        let err = Workload::from_plan(&file_plan(path.clone())).unwrap_err();
        std::fs::remove_file(&path).unwrap();
        let message = err.to_string();
        assert!(message.contains(&format!("{}:2: expected `prompt` to be a string", path.display())), "{message}");

        let missing = std::env::temp_dir().join("batchlab-load-does-not-exist.jsonl");
        let err = Workload::from_plan(&file_plan(missing.clone())).unwrap_err();
        assert!(matches!(err, LoadError::Io { .. }), "{err:?}");
        assert!(err.to_string().contains("batchlab-load-does-not-exist.jsonl"), "{err}");

        let path = temp_file("empty", "");
        let err = Workload::from_plan(&file_plan(path.clone())).unwrap_err();
        std::fs::remove_file(&path).unwrap();
        assert!(matches!(err, LoadError::EmptyFile { .. }), "{err:?}");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Prompts stay in bounds and unique prefixes separate any two requests.
        #[test]
        fn prompts_in_bounds_and_prefixes_unique(seed: u64, a: u64, b: u64, vocab in 2u32..70_000, len in 1u32..80) {
            let w = synthetic(U(len, len + 10), U(1, 40), seed, true, vocab);
            let (ra, rb) = (w.request(a), w.request(b));
            for r in [&ra, &rb] {
                let t = tokens(r);
                prop_assert!((len as usize..=len as usize + 10).contains(&t.len()));
                prop_assert!(t.iter().all(|&id| id < vocab));
                prop_assert!((1..=40).contains(&r.max_tokens));
            }
            let (ta, tb) = (tokens(&ra), tokens(&rb));
            if a != b && len as usize >= w.prefix_len() {
                prop_assert_ne!(&ta[..w.prefix_len()], &tb[..w.prefix_len()]);
            }
            prop_assert_eq!(ta[0], (a % u64::from(vocab)) as u32);
        }
    }
}
