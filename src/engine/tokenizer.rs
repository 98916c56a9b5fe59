//! A model's own tokenizer (`workload.tokenizer`, `batchlab serve --tokenizer`), and
//! [`TokenCounter`], the one notion of "how many tokens is this text" the workload, the file
//! filters and `batchlab serve` share: the tokenizer where one is given, else batchlab's four-byte
//! rule ([`crate::engine::tokens`]).
//!
//! The tokenizer is a Hugging Face `tokenizer.json`, read by the `tokenizers` crate (no Python, no
//! hub, nothing downloaded). A model directory gives its `tokenizer.json`, and with it the
//! `tokenizer_config.json` (`bos_token`, `eos_token`, `chat_template`) and `chat_template.jinja`
//! that `transformers` writes, so chat prompts are sized after the model's own template.
//!
//! Counting follows vLLM's server: a text prompt is encoded with the tokenizer's special tokens
//! (`add_special_tokens=True`, as `/v1/completions` does), a chat prompt after its template without
//! them (the template writes its own, as `/v1/chat/completions` does).
//!
//! # Text of an exact length
//! [`ModelTokenizer::exact_text`] is vLLM's `random` dataset (`gen_prompt_decode_to_target_len`):
//! draw ids from the vocabulary without special or added tokens, decode, re-encode, and cut or
//! extend until the count is exact. Where vLLM gives up after ten rounds and keeps a mismatch, a
//! draw that does not settle is thrown away and drawn again, so every prompt has the count asked
//! for. The same random stream gives the same text.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::engine::chat::{ChatTemplate, TemplateError, TemplateOrigin};
use crate::engine::tokens;
use crate::rng::SplitMix64;

/// Rounds of decode, re-encode, cut or extend on one draw before it is drawn again.
const MAX_ROUNDS: usize = 10;
/// Draws before [`ModelTokenizer::exact_text`] settles for the closest it found.
const MAX_DRAWS: usize = 64;

/// A tokenizer that could not be loaded, with the path and what was expected.
#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    /// Neither a `tokenizer.json` nor a directory holding one.
    #[error(
        "tokenizer {}: not found; expected a model directory with a tokenizer.json, or the path of a tokenizer.json",
        path.display()
    )]
    NotFound {
        /// The path given.
        path: PathBuf,
    },
    /// The file is there but is not a Hugging Face tokenizer.
    #[error("tokenizer {}: not a Hugging Face tokenizer.json ({message})", path.display())]
    NotATokenizer {
        /// The file.
        path: PathBuf,
        /// What the parser said.
        message: String,
    },
    /// `tokenizer_config.json` is there but unreadable.
    #[error("tokenizer {}: {message}", path.display())]
    BadConfig {
        /// The config file.
        path: PathBuf,
        /// What is wrong, and what was expected.
        message: String,
    },
    /// The model's chat template does not compile.
    #[error("tokenizer {}: {source}", path.display())]
    BadTemplate {
        /// The model directory.
        path: PathBuf,
        /// The template's error, with its line.
        #[source]
        source: TemplateError,
    },
    /// The vocabulary has no token a prompt could be drawn from.
    #[error("tokenizer {}: its vocabulary has no ordinary token (all are special or added)", path.display())]
    NoOrdinaryTokens {
        /// The file.
        path: PathBuf,
    },
}

/// A loaded tokenizer. Cheap to clone; compares by the path it was loaded from.
#[derive(Clone)]
pub struct ModelTokenizer(Arc<Inner>);

struct Inner {
    /// The path as given (a directory or a tokenizer.json), absolute.
    path: PathBuf,
    tokenizer: tokenizers::Tokenizer,
    /// The ids prompts are drawn from: the model's vocabulary without special or added tokens.
    ordinary: Vec<u32>,
    /// Tokens the tokenizer adds to a text prompt (a BOS, say), beyond its text's own.
    added_to_text: usize,
    chat_template: Option<ChatTemplate>,
    bos_token: String,
    eos_token: String,
}

impl ModelTokenizer {
    /// Loads `path`: a model directory (its `tokenizer.json`, `tokenizer_config.json` and
    /// `chat_template.jinja`) or a `tokenizer.json` (its directory's config is read too).
    pub fn load(path: &Path) -> Result<ModelTokenizer, TokenizerError> {
        let path = std::path::absolute(path).unwrap_or_else(|_| path.to_owned());
        let file = if path.is_dir() { path.join("tokenizer.json") } else { path.clone() };
        if !file.is_file() {
            return Err(TokenizerError::NotFound { path });
        }
        let tokenizer = tokenizers::Tokenizer::from_file(&file)
            .map_err(|e| TokenizerError::NotATokenizer { path: file.clone(), message: e.to_string() })?;
        let dir = file.parent().unwrap_or(Path::new("."));
        let config = read_config(dir)?;
        let template_source = match config.as_ref().and_then(config_template) {
            Some(source) => Some((source, TemplateOrigin::File(dir.join("tokenizer_config.json")))),
            None => {
                let jinja = dir.join("chat_template.jinja");
                std::fs::read_to_string(&jinja).ok().map(|s| (s, TemplateOrigin::File(jinja)))
            }
        };
        let chat_template = template_source
            .map(|(source, origin)| ChatTemplate::new(source, origin))
            .transpose()
            .map_err(|source| TokenizerError::BadTemplate { path: path.clone(), source })?;
        let special = |name: &str| config.as_ref().and_then(|c| token_text(c.get(name)?)).unwrap_or_default();
        let added = tokenizer.get_added_tokens_decoder();
        let mut ordinary: Vec<u32> =
            tokenizer.get_vocab(false).into_values().filter(|id| !added.contains_key(id)).collect();
        ordinary.sort_unstable();
        if ordinary.is_empty() {
            return Err(TokenizerError::NoOrdinaryTokens { path: file });
        }
        let mut inner = Inner {
            path,
            tokenizer,
            ordinary,
            added_to_text: 0,
            chat_template,
            bos_token: special("bos_token"),
            eos_token: special("eos_token"),
        };
        inner.added_to_text = inner.encode("", true).len().saturating_sub(inner.encode("", false).len());
        Ok(ModelTokenizer(Arc::new(inner)))
    }

    /// The path it was loaded from, as given (made absolute).
    pub fn path(&self) -> &Path {
        &self.0.path
    }

    /// The ids of `text` as a text prompt: with the tokenizer's special tokens.
    pub fn text_ids(&self, text: &str) -> Vec<u32> {
        self.0.encode(text, true)
    }

    /// Tokens in `text` as a text prompt ([`Self::text_ids`]).
    pub fn text_tokens(&self, text: &str) -> usize {
        self.text_ids(text).len()
    }

    /// The ids of `text` alone, without special tokens added: a chat prompt after its template,
    /// or one message's content.
    pub fn plain_ids(&self, text: &str) -> Vec<u32> {
        self.0.encode(text, false)
    }

    /// `ids` as text (special tokens kept).
    pub fn decode(&self, ids: &[u32]) -> String {
        self.0.tokenizer.decode(ids, false).unwrap_or_default()
    }

    /// The model's chat template, when its directory has one.
    pub fn chat_template(&self) -> Option<&ChatTemplate> {
        self.0.chat_template.as_ref()
    }

    /// The model's `bos_token` and `eos_token` (empty where the config names none).
    pub fn bos_eos(&self) -> (&str, &str) {
        (&self.0.bos_token, &self.0.eos_token)
    }

    /// The ids prompts are drawn from: the vocabulary without special or added tokens.
    pub fn ordinary_ids(&self) -> &[u32] {
        &self.0.ordinary
    }

    /// Tokens the tokenizer adds around a text prompt (0 for the tiny model; 1 for a BOS).
    pub fn added_to_text(&self) -> usize {
        self.0.added_to_text
    }

    /// Text whose ids without special tokens are exactly `target`, starting with `fixed` (ids
    /// that must come out unchanged: a shared prefix) then `seed` (ids that may be cut: a unique
    /// prefix), then random ordinary ids from `rng`. Returns the text and its ids. See the module
    /// docs; after [`MAX_DRAWS`] unsettled draws, the closest text found.
    pub fn exact_text(&self, fixed: &[u32], seed: &[u32], target: usize, rng: &mut SplitMix64) -> (String, Vec<u32>) {
        let mut closest: Option<(String, Vec<u32>)> = None;
        for _ in 0..MAX_DRAWS {
            let mut ids: Vec<u32> = fixed.iter().chain(seed).copied().take(target).collect();
            self.extend_random(&mut ids, target, rng);
            for _ in 0..MAX_ROUNDS {
                let text = self.decode(&ids);
                ids = self.plain_ids(&text);
                if !ids.starts_with(&fixed[..fixed.len().min(target)]) {
                    break;
                }
                if ids.len() == target {
                    return (text, ids);
                }
                let off = |c: &(String, Vec<u32>)| c.1.len().abs_diff(target);
                if closest.as_ref().is_none_or(|c| ids.len().abs_diff(target) < off(c)) {
                    closest = Some((text, ids.clone()));
                }
                if ids.len() > target {
                    ids.truncate(target);
                } else {
                    self.extend_random(&mut ids, target, rng);
                }
            }
        }
        closest.unwrap_or_default()
    }

    fn extend_random(&self, ids: &mut Vec<u32>, target: usize, rng: &mut SplitMix64) {
        let ordinary = &self.0.ordinary;
        while ids.len() < target {
            ids.push(ordinary[rng.range_u64(0, ordinary.len() as u64 - 1) as usize]);
        }
    }

    /// The longest prefix of `text` with at most `max` tokens as a text prompt.
    pub fn truncate_text(&self, text: &str, max: usize) -> String {
        let ids = self.plain_ids(text);
        let mut keep = max.saturating_sub(self.0.added_to_text).min(ids.len());
        loop {
            let cut = self.decode(&ids[..keep]);
            if keep == 0 || self.text_tokens(&cut) <= max {
                return cut;
            }
            keep -= 1;
        }
    }
}

impl Inner {
    fn encode(&self, text: &str, add_special_tokens: bool) -> Vec<u32> {
        // An encoding fails only for a tokenizer with a truncation or padding setting that cannot
        // hold; counting then sees no tokens rather than panicking on a user's file.
        self.tokenizer.encode_fast(text, add_special_tokens).map(|e| e.get_ids().to_vec()).unwrap_or_default()
    }
}

/// `tokenizer_config.json` in `dir`, where there is one.
fn read_config(dir: &Path) -> Result<Option<serde_json::Map<String, serde_json::Value>>, TokenizerError> {
    let path = dir.join("tokenizer_config.json");
    let Ok(text) = std::fs::read_to_string(&path) else { return Ok(None) };
    match serde_json::from_str(&text) {
        Ok(serde_json::Value::Object(map)) => Ok(Some(map)),
        Ok(_) => Err(TokenizerError::BadConfig { path, message: "expected a JSON object".into() }),
        Err(e) => Err(TokenizerError::BadConfig { path, message: format!("invalid JSON: {e}") }),
    }
}

/// The config's `chat_template`: a string, or a list of `{name, template}` (the `default` one).
fn config_template(config: &serde_json::Map<String, serde_json::Value>) -> Option<String> {
    match config.get("chat_template")? {
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Array(list) => list
            .iter()
            .find(|t| t.get("name").and_then(|n| n.as_str()) == Some("default"))
            .and_then(|t| t.get("template")?.as_str().map(str::to_owned)),
        _ => None,
    }
}

/// A special token as the config writes it: `"<s>"` or `{"content": "<s>", ...}`.
fn token_text(v: &serde_json::Value) -> Option<String> {
    match v {
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Object(o) => o.get("content")?.as_str().map(str::to_owned),
        _ => None,
    }
}

impl PartialEq for ModelTokenizer {
    fn eq(&self, other: &Self) -> bool {
        self.0.path == other.0.path
    }
}

impl std::fmt::Debug for ModelTokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("ModelTokenizer").field(&self.0.path).finish()
    }
}

impl serde::Serialize for ModelTokenizer {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0.path.to_string_lossy())
    }
}

/// How batchlab counts a text's tokens: the model's tokenizer where one is given, else the
/// four-byte rule. The one counting the workload, the file filters and `batchlab serve` use.
#[derive(Clone, Debug, Default, PartialEq)]
pub enum TokenCounter {
    /// Four bytes a token ([`crate::engine::tokens`]).
    #[default]
    FourBytes,
    /// The model's own tokenizer.
    Tokenizer(ModelTokenizer),
}

impl TokenCounter {
    /// The counter of an optional tokenizer.
    pub fn of(tokenizer: Option<&ModelTokenizer>) -> TokenCounter {
        tokenizer.map_or(TokenCounter::FourBytes, |t| TokenCounter::Tokenizer(t.clone()))
    }

    /// Tokens of `text` as a text prompt.
    pub fn text_tokens(&self, text: &str) -> usize {
        match self {
            TokenCounter::FourBytes => tokens::text_tokens(text),
            TokenCounter::Tokenizer(t) => t.text_tokens(text),
        }
    }

    /// Tokens of a message's content (no special tokens added).
    pub fn content_tokens(&self, text: &str) -> usize {
        match self {
            TokenCounter::FourBytes => tokens::text_tokens(text),
            TokenCounter::Tokenizer(t) => t.plain_ids(text).len(),
        }
    }

    /// The longest prefix of `text` with at most `max` tokens as a text prompt.
    pub fn truncate_text(&self, text: &str, max: usize) -> String {
        match self {
            TokenCounter::FourBytes => tokens::truncate_text(text, max).to_owned(),
            TokenCounter::Tokenizer(t) => t.truncate_text(text, max),
        }
    }

    /// The longest prefix of a message's `content` with at most `max` tokens of its own.
    pub fn truncate_content(&self, content: &str, max: usize) -> String {
        match self {
            TokenCounter::FourBytes => tokens::truncate_text(content, max).to_owned(),
            TokenCounter::Tokenizer(t) => {
                let ids = t.plain_ids(content);
                let mut keep = max.min(ids.len());
                loop {
                    let cut = t.decode(&ids[..keep]);
                    if keep == 0 || t.plain_ids(&cut).len() <= max {
                        return cut;
                    }
                    keep -= 1;
                }
            }
        }
    }

    /// What report.json calls this counting: `tokenizer` or `four_bytes`.
    pub fn name(&self) -> &'static str {
        match self {
            TokenCounter::FourBytes => "four_bytes",
            TokenCounter::Tokenizer(_) => "tokenizer",
        }
    }

    /// The chat template and its `bos_token`/`eos_token` a `chat-template` prompt is rendered
    /// with, when the tokenizer's model has one.
    pub fn model_template(&self) -> Option<(&ChatTemplate, &str, &str)> {
        match self {
            TokenCounter::FourBytes => None,
            TokenCounter::Tokenizer(t) => {
                let (bos, eos) = t.bos_eos();
                t.chat_template().map(|template| (template, bos, eos))
            }
        }
    }
}

/// The shipped tiny model's tokenizer (`tests/fixtures/tiny-llama-tokenizer`), for tests.
#[cfg(test)]
pub(crate) fn tiny() -> ModelTokenizer {
    static TINY: std::sync::OnceLock<ModelTokenizer> = std::sync::OnceLock::new();
    TINY.get_or_init(|| {
        ModelTokenizer::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny-llama-tokenizer"))
            .expect("the shipped tokenizer loads")
    })
    .clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_tokenizer_loads_with_its_template_and_special_tokens() {
        let t = tiny();
        assert_eq!(t.bos_eos(), ("<s>", "</s>"));
        assert!(t.chat_template().is_some());
        assert_eq!(t.added_to_text(), 0, "the tiny model adds no BOS to a text prompt");
        // 4096 ids, of which 0, 1 and 2 are the special <unk>, <s> and </s>.
        assert_eq!(t.ordinary_ids().len(), 4093);
        assert!(!t.ordinary_ids().contains(&1));
        assert_eq!(t.plain_ids("<s>"), [1], "special tokens in text are matched");
        let ids = t.text_ids("hello batching world");
        assert_eq!(t.decode(&ids), "hello batching world");
    }

    #[test]
    fn exact_text_has_the_count_and_keeps_the_fixed_prefix() {
        let t = tiny();
        let mut rng = SplitMix64::new(7);
        let (_, prefix) = t.exact_text(&[], &[], 20, &mut rng);
        assert_eq!(prefix.len(), 20);
        for target in [21, 33, 100] {
            let (text, ids) = t.exact_text(&prefix, &[], target, &mut rng);
            assert_eq!(t.text_ids(&text), ids);
            assert_eq!(ids.len(), target);
            assert_eq!(ids[..20], prefix[..]);
            assert!(ids.iter().all(|id| *id > 2), "no special token drawn: {ids:?}");
        }
    }

    #[test]
    fn truncation_keeps_at_most_that_many_tokens() {
        let t = tiny();
        let text = "the quick brown fox jumps over the lazy dog, again and again";
        let n = t.text_tokens(text);
        for max in [0, 1, 3, n - 1, n, n + 5] {
            let cut = TokenCounter::Tokenizer(t.clone()).truncate_text(text, max);
            assert!(t.text_tokens(&cut) <= max, "{max}: {cut:?}");
            assert!(text.starts_with(&cut));
            if max >= 1 && max <= n {
                assert!(t.text_tokens(&cut) >= max - 1, "{max}: {cut:?} cut too much");
            }
        }
    }

    #[test]
    fn a_bad_path_is_named_with_what_was_expected() {
        let missing = ModelTokenizer::load(Path::new("/nonexistent/model")).unwrap_err().to_string();
        assert!(missing.contains("/nonexistent/model") && missing.contains("expected a model directory"), "{missing}");
        let not_one =
            ModelTokenizer::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml")).unwrap_err().to_string();
        assert!(not_one.contains("Cargo.toml") && not_one.contains("not a Hugging Face tokenizer.json"), "{not_one}");
    }
}
