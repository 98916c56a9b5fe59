//! The keys the DSL knows, derived from the key tables ([`super::keys`]).
//!
//! Both the file validator (unknown keys, did-you-mean) and `--set` (whose key path must exist
//! before anything is parsed) ask this module, so the two can never disagree.

use std::sync::LazyLock;

use super::error::{RenamedKeys, renamed_hint};
use super::expect;
use super::keys::{self, Sub};

/// The keys of one table of the scenario, and what may stand below each.
pub(crate) struct SectionKeys {
    pub names: Vec<&'static str>,
    subs: Vec<Sub>,
}

impl SectionKeys {
    fn new(keys: impl IntoIterator<Item = (&'static str, Sub)>) -> Self {
        let (names, subs) = keys.into_iter().unzip();
        SectionKeys { names, subs }
    }

    fn sub(&self, key: &str) -> Option<Sub> {
        self.names.iter().position(|n| *n == key).map(|i| self.subs[i])
    }
}

/// A sub-section: a table of fixed keys.
fn table(name: &'static str) -> (&'static str, Sub) {
    (name, Sub::Fixed(&[]))
}

static TOP: LazyLock<SectionKeys> =
    LazyLock::new(|| SectionKeys::new(keys::subs(keys::HEAD_KEYS).chain(keys::SECTIONS.iter().map(|s| table(s)))));
static ENGINE: LazyLock<SectionKeys> = LazyLock::new(|| {
    SectionKeys::new(keys::subs(keys::ENGINE_KEYS).chain(keys::ENGINE_KINDS.iter().map(|k| table(k))))
});
static SIM: LazyLock<SectionKeys> = LazyLock::new(|| {
    SectionKeys::new(keys::subs(keys::SIM_KEYS).chain(keys::subs(keys::COST_KEYS)).chain(keys::subs(keys::SCHED_KEYS)))
});
static VLLM: LazyLock<SectionKeys> = LazyLock::new(|| SectionKeys::new(keys::subs(keys::VLLM_KEYS)));
static PYTHON: LazyLock<SectionKeys> = LazyLock::new(|| SectionKeys::new(keys::subs(keys::PYTHON_KEYS)));
static OPENAI: LazyLock<SectionKeys> = LazyLock::new(|| SectionKeys::new(keys::subs(keys::OPENAI_KEYS)));
static BATCHING: LazyLock<SectionKeys> = LazyLock::new(|| SectionKeys::new(keys::subs(keys::BATCHING_KEYS)));
static WORKLOAD: LazyLock<SectionKeys> = LazyLock::new(|| {
    let tag = (keys::WORKLOAD_TAG.name, keys::WORKLOAD_TAG.sub);
    let images = table("images");
    let sessions = table("sessions");
    SectionKeys::new(std::iter::once(tag).chain(keys::variant_keys(keys::WORKLOAD_VARIANTS)).chain([images, sessions]))
});
static IMAGES: LazyLock<SectionKeys> = LazyLock::new(|| SectionKeys::new(keys::subs(keys::IMAGE_KEYS)));
static SESSIONS: LazyLock<SectionKeys> = LazyLock::new(|| SectionKeys::new(keys::subs(keys::SESSION_KEYS)));
static PROFILE: LazyLock<SectionKeys> = LazyLock::new(|| {
    let tag = (keys::PROFILE_TAG.name, keys::PROFILE_TAG.sub);
    SectionKeys::new(std::iter::once(tag).chain(keys::variant_keys(keys::PROFILE_VARIANTS)))
});
static STOP: LazyLock<SectionKeys> = LazyLock::new(|| SectionKeys::new(keys::subs(keys::STOP_KEYS)));
static PHASE: LazyLock<SectionKeys> = LazyLock::new(|| SectionKeys::new(keys::subs(keys::PHASE_KEYS)));
static FAULTS: LazyLock<SectionKeys> = LazyLock::new(|| SectionKeys::new(keys::subs(keys::FAULT_KEYS)));
static SLO: LazyLock<SectionKeys> = LazyLock::new(|| SectionKeys::new(keys::subs(keys::SLO_KEYS)));
static OUTPUT: LazyLock<SectionKeys> = LazyLock::new(|| SectionKeys::new(keys::subs(keys::OUTPUT_KEYS)));

/// The table of fixed keys at `path`, if there is one (`[expect]` takes metric names instead).
pub(crate) fn section(path: &[&str]) -> Option<&'static SectionKeys> {
    Some(match path {
        [] => &TOP,
        ["engine"] => &ENGINE,
        ["engine", "sim"] => &SIM,
        ["engine", "vllm"] => &VLLM,
        ["engine", "python"] => &PYTHON,
        ["engine", "openai"] => &OPENAI,
        ["batching"] => &BATCHING,
        ["workload"] => &WORKLOAD,
        ["workload", "images"] => &IMAGES,
        ["workload", "sessions"] => &SESSIONS,
        ["profile"] => &PROFILE,
        ["stop"] => &STOP,
        ["warmup" | "cooldown"] => &PHASE,
        ["faults"] => &FAULTS,
        ["slo"] => &SLO,
        ["output"] => &OUTPUT,
        _ => return None,
    })
}

/// The key names of the table at `path` (empty where there is none).
pub(crate) fn names(path: &[&str]) -> &'static [&'static str] {
    section(path).map_or(&[], |s| s.names.as_slice())
}

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
    if let Some(s) = section(path) {
        return Keys::Fixed(&s.names);
    }
    if path == ["expect"] {
        return Keys::Metrics;
    }
    // Below a key of a section: its own table, a free-form one, or nothing.
    for split in (0..path.len()).rev() {
        let (parent, rest) = path.split_at(split);
        let Some(sub) = section(parent).and_then(|s| s.sub(rest[0])) else { continue };
        return match (sub, rest.len()) {
            (Sub::Any, _) => Keys::Any,
            (Sub::Fixed(keys), 1) => Keys::Fixed(keys),
            _ => Keys::Value,
        };
    }
    Keys::Value
}

/// The keys an older batchlab had and has renamed, by table: the file validator (given it as
/// data) and `--set` both hint at the new name instead of a did-you-mean.
pub(crate) const RENAMED: &RenamedKeys = &[("engine.sim", crate::engine::sim::RENAMED_COSTS)];

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
                let help = renamed_hint(RENAMED, &parent.join("."), key)
                    .or_else(|| super::error::did_you_mean(&here, full.iter().map(String::as_str)));
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

/// Every key path `--set` can reach below the fixed tables, sub-keys included (free-form tables
/// and metrics are not listed): for the fuzz target and tests.
pub fn key_paths() -> Vec<String> {
    let mut out = Vec::new();
    let mut walk = vec![Vec::<&str>::new()];
    while let Some(path) = walk.pop() {
        let Keys::Fixed(keys) = keys_under(&path) else { continue };
        for key in keys {
            let mut child = path.clone();
            child.push(key);
            if !path.is_empty() || !keys::SECTIONS.contains(key) {
                out.push(child.join("."));
            }
            walk.push(child);
        }
    }
    out.sort();
    out
}
