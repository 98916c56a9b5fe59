//! The keys the DSL knows, in one place.
//!
//! Both the file validator (unknown keys, did-you-mean) and `--set` (whose key path must exist
//! before anything is parsed) ask this module, so the two can never disagree.

use super::expect;
use crate::engine::faults;

pub(crate) const TOP: &[&str] = &[
    "name",
    "description",
    "seed",
    "engine",
    "batching",
    "workload",
    "profile",
    "stop",
    "warmup",
    "cooldown",
    "faults",
    "expect",
    "output",
];
pub(crate) const ENGINE: &[&str] = &["kind", "sim", "vllm", "python"];
pub(crate) const SIM: &[&str] = &[
    "time",
    "seed",
    "fixed_overhead",
    "prefill_per_token",
    "decode_step",
    "decode_per_seq",
    "max_num_seqs",
    "eos_probability",
];
pub(crate) const VLLM: &[&str] = &[
    "model",
    "dtype",
    "max_model_len",
    "max_num_seqs",
    "max_num_batched_tokens",
    "enforce_eager",
    "seed",
    "kv_cache_gib",
    "in_process",
    "omp_num_threads",
    "disable_log_stats",
    "engine_args",
];
pub(crate) const PYTHON: &[&str] = &["class", "path", "venv", "clock", "args", "env"];
pub(crate) const BATCHING: &[&str] = &["batch_size", "batch_timeout", "generate_timeout"];
pub(crate) const WORKLOAD: &[&str] = &[
    "source",
    "prompt_tokens",
    "output_tokens",
    "seed",
    "unique_prefix",
    "vocab_size",
    "ignore_eos",
    "temperature",
    "path",
    "default_max_tokens",
];
/// Workload keys that only make sense with `source = "synthetic"`.
pub(crate) const WORKLOAD_SYNTHETIC_ONLY: &[&str] =
    &["prompt_tokens", "output_tokens", "seed", "unique_prefix", "vocab_size"];
/// Workload keys that only make sense with `source = "file"`.
pub(crate) const WORKLOAD_FILE_ONLY: &[&str] = &["path", "default_max_tokens"];
pub(crate) const TOKEN_DIST: &[&str] = &["dist", "value", "min", "max", "mean", "stdev"];
pub(crate) const PROFILE: &[&str] = &["kind", "max_concurrency", "levels", "rates", "rate", "seed"];
pub(crate) const PROFILE_KINDS: &[&str] = &["synchronous", "concurrent", "throughput", "constant", "poisson", "sweep"];

/// The `[profile]` keys each kind accepts besides `kind`.
pub(crate) fn profile_keys(kind: &str) -> &'static [&'static str] {
    match kind {
        "concurrent" => &["levels"],
        "throughput" => &["max_concurrency"],
        "constant" => &["rates", "max_concurrency"],
        "poisson" => &["rate", "seed", "max_concurrency"],
        "sweep" => &["rates", "max_concurrency"],
        _ => &[],
    }
}

pub(crate) const STOP: &[&str] = &["max_requests", "max_duration", "max_errors", "max_error_rate"];
pub(crate) const PHASE: &[&str] = &["requests", "duration"];
pub(crate) const OUTPUT: &[&str] = &["dir", "requests_jsonl"];

/// What may appear under a table.
pub(crate) enum Keys {
    Fixed(&'static [&'static str]),
    /// Free-form (`engine.vllm.engine_args`, `engine.python.args`, `engine.python.env`).
    Any,
    /// Metric names (`[expect]`).
    Metrics,
    /// The path names a value, not a table.
    Value,
}

/// The keys allowed directly under the table at `path`.
pub(crate) fn keys_under(path: &[&str]) -> Keys {
    match path {
        [] => Keys::Fixed(TOP),
        ["engine"] => Keys::Fixed(ENGINE),
        ["engine", "sim"] => Keys::Fixed(SIM),
        ["engine", "vllm"] => Keys::Fixed(VLLM),
        ["engine", "vllm", "engine_args", ..] => Keys::Any,
        ["engine", "python"] => Keys::Fixed(PYTHON),
        ["engine", "python", "args" | "env", ..] => Keys::Any,
        ["batching"] => Keys::Fixed(BATCHING),
        ["workload"] => Keys::Fixed(WORKLOAD),
        ["workload", "prompt_tokens" | "output_tokens"] => Keys::Fixed(TOKEN_DIST),
        ["profile"] => Keys::Fixed(PROFILE),
        ["stop"] => Keys::Fixed(STOP),
        ["warmup" | "cooldown"] => Keys::Fixed(PHASE),
        ["faults"] => Keys::Fixed(faults::fault_names()),
        ["faults", key] => match faults::fault_key(key).map(faults::FaultKey::subkeys) {
            Some(keys) if !keys.is_empty() => Keys::Fixed(keys),
            _ => Keys::Value,
        },
        ["expect"] => Keys::Metrics,
        ["output"] => Keys::Fixed(OUTPUT),
        _ => Keys::Value,
    }
}

/// Why a dotted key path does not exist: the message and an optional did-you-mean.
pub(crate) fn check_path(path: &[&str]) -> Result<(), (String, Option<String>)> {
    for (i, key) in path.iter().enumerate() {
        let parent = &path[..i];
        let here = path[..=i].join(".");
        match keys_under(parent) {
            Keys::Any => return Ok(()),
            Keys::Fixed(keys) if keys.contains(key) => {}
            Keys::Fixed(keys) => {
                let full: Vec<String> = keys.iter().map(|k| format!("{}{k}", prefix(parent))).collect();
                let help = super::error::did_you_mean(&here, full.iter().map(String::as_str));
                return Err((format!("unknown key `{here}`"), help));
            }
            Keys::Metrics if expect::is_known_metric(key) => {}
            Keys::Metrics => {
                let names = expect::known_metrics();
                let help = super::error::did_you_mean(key, names.iter().map(String::as_str));
                return Err((format!("unknown metric `{here}`"), help));
            }
            Keys::Value => {
                return Err((format!("unknown key `{here}`: `{}` is a value, not a table", parent.join(".")), None));
            }
        }
    }
    Ok(())
}

fn prefix(parent: &[&str]) -> String {
    parent.iter().map(|p| format!("{p}.")).collect()
}
