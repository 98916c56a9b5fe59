//! Typed handles of the keys a workflow changes: `keys::BATCH_SIZE.to(64)` is the [`Set`] of
//! `batching.batch_size = 64`. Each names a row of this module's tables by its dotted path (a
//! test checks that every path is a key the schema knows) and the Rust type its value is given
//! as; a section's handle builds the whole section from its keys' sets ([`KeyPath::table`]).
//! A key without a handle is changed by [`Set::new`]; add its handle here when a workflow needs it.

use std::time::Duration;

#[allow(unused_imports)]
use super::super::set::Set;
use super::super::set::{KeyPath, Section, Text};

macro_rules! handles {
    ($($(#[$doc:meta])* $name:ident: $ty:ty = $path:literal;)*) => {
        $($(#[$doc])* pub const $name: KeyPath<$ty> = KeyPath::new($path);)*
        /// Every handle's path, for the check that each is a key.
        #[cfg(test)]
        pub(crate) const HANDLE_PATHS: &[&str] = &[$($path),*];
    };
}

handles! {
    /// `name`.
    NAME: Text = "name";
    /// `description`.
    DESCRIPTION: Text = "description";
    /// The master `seed`.
    SEED: u64 = "seed";
    /// `[engine]`.
    ENGINE: Section = "engine";
    /// `engine.kind`.
    ENGINE_KIND: Text = "engine.kind";
    /// `engine.sim.time` (`"virtual"` or `"real"`).
    SIM_TIME: Text = "engine.sim.time";
    /// `engine.sim.seed`.
    SIM_SEED: u64 = "engine.sim.seed";
    /// `engine.sim.profile`: a calibration profile's path.
    SIM_PROFILE: Text = "engine.sim.profile";
    /// `[batching]`.
    BATCHING: Section = "batching";
    /// `batching.batch_size`.
    BATCH_SIZE: u64 = "batching.batch_size";
    /// `batching.batch_timeout`.
    BATCH_TIMEOUT: Duration = "batching.batch_timeout";
    /// `batching.max_in_flight`.
    MAX_IN_FLIGHT: u64 = "batching.max_in_flight";
    /// `batching.generate_timeout`.
    GENERATE_TIMEOUT: Duration = "batching.generate_timeout";
    /// `batching.stall_timeout`.
    STALL_TIMEOUT: Duration = "batching.stall_timeout";
    /// `[workload]`.
    WORKLOAD: Section = "workload";
    /// `workload.source`.
    WORKLOAD_SOURCE: Text = "workload.source";
    /// `workload.prompt_tokens`, a fixed length.
    PROMPT_TOKENS: u64 = "workload.prompt_tokens";
    /// `workload.output_tokens`, a fixed length.
    OUTPUT_TOKENS: u64 = "workload.output_tokens";
    /// `workload.seed`.
    WORKLOAD_SEED: u64 = "workload.seed";
    /// `workload.unique_prefix`.
    UNIQUE_PREFIX: bool = "workload.unique_prefix";
    /// `workload.vocab_size`.
    VOCAB_SIZE: u64 = "workload.vocab_size";
    /// `workload.ignore_eos`.
    IGNORE_EOS: bool = "workload.ignore_eos";
    /// `workload.temperature`.
    TEMPERATURE: f64 = "workload.temperature";
    /// `workload.chat`.
    CHAT: bool = "workload.chat";
    /// `workload.tokenizer`.
    TOKENIZER: Text = "workload.tokenizer";
    /// `[profile]`.
    PROFILE: Section = "profile";
    /// `profile.kind`.
    PROFILE_KIND: Text = "profile.kind";
    /// `profile.max_concurrency` (a throughput profile's).
    MAX_CONCURRENCY: u64 = "profile.max_concurrency";
    /// `profile.levels` (a concurrent profile's).
    LEVELS: Vec<u64> = "profile.levels";
    /// `profile.rates` (a constant profile's).
    RATES: Vec<f64> = "profile.rates";
    /// `profile.rate` (a poisson or gamma profile's).
    RATE: f64 = "profile.rate";
    /// `[stop]`.
    STOP: Section = "stop";
    /// `stop.max_requests`.
    MAX_REQUESTS: u64 = "stop.max_requests";
    /// `stop.max_errors`.
    MAX_ERRORS: u64 = "stop.max_errors";
    /// `stop.max_duration`.
    MAX_DURATION: Duration = "stop.max_duration";
    /// `[warmup]`.
    WARMUP: Section = "warmup";
    /// `warmup.requests`.
    WARMUP_REQUESTS: u64 = "warmup.requests";
    /// `[cooldown]`.
    COOLDOWN: Section = "cooldown";
    /// `[faults]`.
    FAULTS: Section = "faults";
    /// `faults.fail_batch`, a table (`every`, `at`).
    FAIL_BATCH: Section = "faults.fail_batch";
    /// `[expect]`.
    EXPECT: Section = "expect";
    /// `[output]`.
    OUTPUT: Section = "output";
    /// `output.requests_jsonl`.
    REQUESTS_JSONL: bool = "output.requests_jsonl";
    /// `[matrix]`.
    MATRIX: Section = "matrix";
}
