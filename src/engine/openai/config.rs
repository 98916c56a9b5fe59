//! [`OpenAiConfig`]: the HTTP engine's settings, the scenario's `[engine.openai]` (the plan holds
//! this type; the engine never sees a plan). Plain data, built in every configuration (a loom
//! build has no HTTP client, but still reads scenarios that name one).

use std::time::Duration;

use serde::Serialize;

/// Which OpenAI API the engine speaks.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Api {
    /// `POST /v1/completions`: a batch is one request with a list of prompts.
    #[default]
    Completions,
    /// `POST /v1/chat/completions`: one conversation per request (the API has no list form).
    Chat,
    /// `POST /v1/embeddings`: a batch is one request with a list of inputs, answered whole (no
    /// stream, no generated tokens; [`super::embed`]).
    Embeddings,
}

/// How a request picks one of several endpoints.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Routing {
    /// In turn.
    #[default]
    RoundRobin,
    /// The endpoint with the fewest requests of ours in flight (ties: in turn).
    LeastOutstanding,
    /// A session's turns to one endpoint (session `s` to endpoint `s mod n` while it is in
    /// rotation, else as `least_outstanding`); requests of no session in turn.
    SessionAffinity,
}

/// The HTTP engine's settings (docs/http.md).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct OpenAiConfig {
    /// The servers' base URLs (`http://host:port`, or with a path prefix), normalized by
    /// [`base_url`]: `/v1/completions`, `/v1/models` and `/metrics` are appended.
    pub urls: Vec<String>,
    /// The model name every request carries; `start` checks that each server serves it.
    pub model: String,
    /// The API.
    pub api: Api,
    /// The NAME of the environment variable that holds the API key, read at `start`; `None`
    /// sends no `Authorization` header. The key itself is never part of the config.
    pub api_key_env: Option<String>,
    /// How long one request may take, from the moment the engine got its batch (waiting for a
    /// free connection included) to the end of its stream; `None`: [`request_timeout`]'s, from
    /// the request's `max_tokens`.
    pub timeout: Option<Duration>,
    /// How long a request and its endpoint may go without progress (a response head, or an event
    /// with data, on any of our requests to it; an SSE comment is none) before the request fails
    /// as `stalled` and the endpoint leaves the rotation.
    /// `None`: [`STALL_FLOOR`], or [`STALL_GAPS`] times the longest gap between events seen so
    /// far in the run, when that is longer.
    pub stall_timeout: Option<Duration>,
    /// Most requests in flight at once to one endpoint (a real cap: the others wait for a slot).
    pub max_connections: u32,
    /// How a request picks an endpoint when there are several.
    pub routing: Routing,
    /// The header a session's turns carry its number in (`[workload.sessions]`); `None`:
    /// [`DEFAULT_SESSION_HEADER`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session_header: Option<String>,
    /// The tokio worker threads the HTTP client runs on; `None`: the CPUs the process may use
    /// ([`crate::sys::usable_cpus`], read when the engine starts).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub threads: Option<u32>,
}

/// The header a session's turns carry their session in, by default (vLLM's bench's).
pub const DEFAULT_SESSION_HEADER: &str = "X-Session-ID";

impl OpenAiConfig {
    /// One server at `url` serving `model`, completions API, the documented defaults otherwise.
    /// `url` is taken as it is; [`base_url`] says what a valid one is.
    pub fn new(url: impl Into<String>, model: impl Into<String>) -> Self {
        OpenAiConfig {
            urls: vec![url.into()],
            model: model.into(),
            api: Api::Completions,
            api_key_env: None,
            timeout: None,
            stall_timeout: None,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            routing: Routing::RoundRobin,
            session_header: None,
            threads: None,
        }
    }
}

/// A derived `timeout`: this, plus [`TIMEOUT_PER_TOKEN`] per asked-for token, at most
/// [`TIMEOUT_CAP`].
pub const TIMEOUT_BASE: Duration = Duration::from_secs(30);
/// A derived `timeout` per asked-for token: ten times a slow server's decode step.
pub const TIMEOUT_PER_TOKEN: Duration = Duration::from_millis(100);
/// The longest derived `timeout`.
pub const TIMEOUT_CAP: Duration = Duration::from_secs(30 * 60);

/// The total bound on one request of `api` whose prompts ask for `max_tokens`: the configured
/// `timeout`, else derived from the tokens it asks for (30 s + 100 ms a token, at most 30 min:
/// 56 s for 256 tokens). An embeddings request asks for none, whatever the workload's
/// `output_tokens`: its derived bound is the base alone.
pub fn request_timeout(configured: Option<Duration>, api: Api, max_tokens: u32) -> Duration {
    let asked = match api {
        Api::Embeddings => 0,
        Api::Chat | Api::Completions => max_tokens,
    };
    configured.unwrap_or_else(|| (TIMEOUT_BASE + TIMEOUT_PER_TOKEN.saturating_mul(asked)).min(TIMEOUT_CAP))
}
/// The least a derived `stall_timeout` is: longer than any pause of a healthy server that has
/// already sent its response head (a long prefill included).
pub const STALL_FLOOR: Duration = Duration::from_secs(5);
/// A derived `stall_timeout` is this many times the longest gap between events seen so far.
pub const STALL_GAPS: u32 = 8;

/// The `stall_timeout` in force when the longest gap between events seen so far is `longest_gap`.
pub fn stall_limit(configured: Option<Duration>, longest_gap: Duration) -> Duration {
    configured.unwrap_or_else(|| STALL_FLOOR.max(longest_gap.saturating_mul(STALL_GAPS)))
}

/// `max_connections`' default.
pub const DEFAULT_MAX_CONNECTIONS: u32 = 512;

/// A base URL as the engine uses it: `http://` or `https://`, a host, no query or fragment; a
/// trailing `/` and a trailing `/v1` (as OpenAI clients write it) are dropped, so
/// `http://h:8000/v1/` is `http://h:8000`. Why not, otherwise.
pub fn base_url(url: &str) -> Result<String, String> {
    let url = url.trim();
    let Some((scheme, rest)) = url.split_once("://") else {
        return Err("expected `http://HOST[:PORT][/PREFIX]` or `https://…`".into());
    };
    if !scheme.eq_ignore_ascii_case("http") && !scheme.eq_ignore_ascii_case("https") {
        return Err(format!("the scheme must be http or https, not `{scheme}`"));
    }
    if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err("it holds whitespace or a control character".into());
    }
    if url.contains(['?', '#']) {
        return Err("a base URL has no query or fragment".into());
    }
    let host = rest.split('/').next().unwrap_or_default();
    if host.is_empty() || host.starts_with(':') {
        return Err("it has no host".into());
    }
    if host.contains('@') {
        // A key or password in the URL would end up in reports and logs.
        return Err("credentials in the URL are not allowed: use `api_key_env`".into());
    }
    let mut normalized = url.trim_end_matches('/');
    if let Some(stripped) = normalized.strip_suffix("/v1") {
        normalized = stripped.trim_end_matches('/');
    }
    Ok(normalized.to_owned())
}

/// Whether `name` can be an environment variable's name (letters, digits, `_`, not starting with
/// a digit). A value that is not, such as a key pasted in by mistake, is refused without being
/// repeated.
pub fn is_env_var_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Prefixes of common API keys and tokens (OpenAI's `sk-`, Hugging Face's `hf_`, GitHub's, Slack's,
/// Google's, AWS's), as they are written: `HF_TOKEN` is a variable's name, `hf_…` a token.
const SECRET_PREFIXES: &[&str] =
    &["sk-", "sk_", "hf_", "ghp_", "gho_", "github_pat_", "xoxb-", "xoxp-", "AIza", "AKIA"];
/// A name at least this long is checked for entropy.
const LONG_NAME: usize = 20;
/// Bits per character past which a long name with digits and both cases is taken for a key.
const SECRET_BITS_PER_CHAR: f64 = 3.5;

/// Whether `value` looks like a secret rather than a variable's name: a known key prefix, or long,
/// mixing lower case, upper case and digits, and high in entropy (`OPENAI_API_KEY` is none of
/// these). Such a value is refused without being repeated: a pasted key.
pub fn looks_like_secret(value: &str) -> bool {
    if SECRET_PREFIXES.iter().any(|p| value.starts_with(p)) {
        return true;
    }
    let chars: Vec<char> = value.chars().collect();
    if chars.len() < LONG_NAME {
        return false;
    }
    let mixed = chars.iter().any(char::is_ascii_lowercase)
        && chars.iter().any(char::is_ascii_uppercase)
        && chars.iter().any(char::is_ascii_digit);
    mixed && bits_per_char(&chars) >= SECRET_BITS_PER_CHAR
}

/// The Shannon entropy of `chars`' distribution, in bits per character.
fn bits_per_char(chars: &[char]) -> f64 {
    let mut counts = std::collections::HashMap::new();
    for c in chars {
        *counts.entry(*c).or_insert(0usize) += 1;
    }
    let n = chars.len() as f64;
    counts.values().map(|&k| k as f64 / n).map(|p| -p * p.log2()).sum()
}

/// Whether `value` may be used as `api_key_env`: a variable's name that does not look like a
/// secret. `Err` says why not, without repeating `value`.
pub fn check_api_key_env(value: &str) -> Result<(), &'static str> {
    if looks_like_secret(value) {
        Err("looks like a key itself, not the NAME of the environment variable holding it (the value is not shown)")
    } else if !is_env_var_name(value) {
        Err("must be the NAME of an environment variable (letters, digits, `_`; the value is not shown)")
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_urls_are_normalized_or_refused_with_a_reason() {
        for (given, expected) in [
            ("http://127.0.0.1:8000", "http://127.0.0.1:8000"),
            ("http://127.0.0.1:8000/", "http://127.0.0.1:8000"),
            ("http://h:8000/v1", "http://h:8000"),
            ("https://gw.example/llm/v1/", "https://gw.example/llm"),
            (" http://h ", "http://h"),
        ] {
            assert_eq!(base_url(given).as_deref(), Ok(expected), "{given}");
        }
        for bad in ["127.0.0.1:8000", "ftp://h", "http://", "http://:80", "http://h?x=1", "http://u:p@h", "http://a b"]
        {
            assert!(base_url(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn env_var_names() {
        for good in ["OPENAI_API_KEY", "_K", "k1"] {
            assert!(is_env_var_name(good), "{good}");
        }
        for bad in ["", "1K", "sk-abc123", "A B", "A=B"] {
            assert!(!is_env_var_name(bad), "{bad}");
        }
    }

    #[test]
    fn the_default_timeout_fits_the_request_not_five_minutes() {
        assert_eq!(request_timeout(None, Api::Completions, 4), Duration::from_millis(30_400));
        assert_eq!(request_timeout(None, Api::Chat, 256), Duration::from_millis(55_600));
        assert_eq!(request_timeout(None, Api::Chat, u32::MAX), TIMEOUT_CAP);
        assert_eq!(request_timeout(Some(Duration::from_secs(2)), Api::Chat, 4096), Duration::from_secs(2));
        // An embeddings request asks for no token: the workload's output_tokens do not lengthen it.
        assert_eq!(request_timeout(None, Api::Embeddings, 256), TIMEOUT_BASE);
        assert_eq!(request_timeout(Some(Duration::from_secs(2)), Api::Embeddings, 0), Duration::from_secs(2));
    }

    #[test]
    fn secrets_are_told_from_names() {
        for name in ["OPENAI_API_KEY", "HF_TOKEN", "MY_VERY_LONG_SERVICE_API_KEY_NAME_2", "k1", "sk", "hf"] {
            assert!(!looks_like_secret(name), "{name}");
            assert_eq!(check_api_key_env(name), Ok(()), "{name}");
        }
        // `hf_…` and a long random token are valid names, and still refused.
        for secret in ["hf_AbCdEfGhIjKlMnOpQrStUv", "sk-live-0123456789", "Zx8Qw2Lm4Np6Rt9Vb1Kd7Hg3"] {
            assert!(looks_like_secret(secret), "{secret}");
            assert!(check_api_key_env(secret).is_err(), "{secret}");
        }
        assert!(is_env_var_name("hf_AbCdEfGhIjKlMnOpQrStUv") && is_env_var_name("Zx8Qw2Lm4Np6Rt9Vb1Kd7Hg3"));
        assert!(check_api_key_env("A B").is_err());
    }
}
