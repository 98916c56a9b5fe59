//! The keys of `[engine]` and its sub-sections: the engine's kind, `[engine.sim]` (its own keys,
//! cost model and scheduler limits), `[engine.vllm]`, `[engine.openai]` and `[engine.python]`,
//! with each sub-section's plan before any key is read.

use std::path::PathBuf;

use toml_edit::value;

use super::super::reader::LowerBound;
use super::codec::*;
use super::{ENGINE_KINDS, Key, KeyDefault, Sub, Tag, derive_seed, seed_stream};
use crate::engine::openai::{Api, OpenAiConfig, Routing};
use crate::engine::python::PythonConfig;
use crate::engine::python::vllm::{Admission, VllmConfig};
use crate::engine::sim::{CostModel, DEFAULT_SCHEDULER, SimConfig, TimeMode};
use crate::engine::{ClockDomain, ResolvedEngineConfig};

pub(crate) const ENGINE_KEYS: &[Key<Tag>] = &[key!(
    kind: OneOf(ENGINE_KINDS),
    KeyDefault::Value,
    "`[engine.sim]` only with sim, `[engine.vllm]` only with vllm, `[engine.python]` only with python, \
     `[engine.openai]` only with openai",
    Tag(kind)
)];

/// `[engine.sim]`'s keys besides the cost model's ([`COST_KEYS`]) and the scheduler's ([`SCHED_KEYS`]).
/// `profile` is read first: its values are the defaults that the other keys override.
pub(crate) const SIM_KEYS: &[Key<SimConfig>] = &[
    key!(
        time: Choice(&[("virtual", TimeMode::Virtual), ("real", TimeMode::Real)]),
        KeyDefault::Value,
        "virtual only advances a clock: fast, reproducible",
        in SimConfig
    ),
    key!(seed: U64(0), KeyDefault::Text("derived (stream 1)"), ">= 0", in SimConfig),
    key!(
        profile: Opt(PathBeside),
        KeyDefault::Value,
        "a `batchlab calibrate` profile, relative to the scenario: sets every cost and scheduler key; \
         keys written here override it",
        in SimConfig
    ),
];

/// `[engine.sim]`'s cost model: `t_step = decode_step + prefill_per_token·P + per_seq·S +
/// context_per_1k_tokens·C/1000 + tokens_squared_per_1m·T²/10⁶ + encoder_per_image_token·E`
/// (docs/simulation.md).
pub(crate) const COST_KEYS: &[Key<CostModel>] = &[
    key!(fixed_overhead: Dur { zero: true }, KeyDefault::Value, ">= 0, per generate call", in CostModel),
    key!(request_overhead: Dur { zero: true }, KeyDefault::Value, ">= 0, per request of a generate call", in CostModel),
    key!(decode_step: Dur { zero: true }, KeyDefault::Value, ">= 0, per engine step (one token per running sequence)", in CostModel),
    key!(prefill_per_token: Dur { zero: true }, KeyDefault::Value, ">= 0, per prefill token in a step", in CostModel),
    key!(per_seq: Dur { zero: true }, KeyDefault::Value, ">= 0, per sequence scheduled in a step", in CostModel),
    key!(
        context_per_1k_tokens: Dur { zero: true },
        KeyDefault::Value,
        ">= 0, per 1000 context tokens attended in a step",
        in CostModel
    ),
    key!(
        tokens_squared_per_1m: Dur { zero: true },
        KeyDefault::Value,
        ">= 0, times (tokens computed in a step / 1000)²",
        in CostModel
    ),
    key!(
        encoder_per_image_token: DurUnlessZero,
        KeyDefault::Text("`\"0s\"`"),
        ">= 0, per image token encoded in the step that first schedules a request: its images that \
         missed the encoder cache (docs/workloads.md); printed only when set",
        in CostModel
    ),
    key!(finish_overhead: Dur { zero: true }, KeyDefault::Value, ">= 0, per generate call, after its last step", in CostModel),
    key!(finish_per_request: Dur { zero: true }, KeyDefault::Value, ">= 0, per request, after the last step", in CostModel),
    key!(
        eos_probability: Float(LowerBound::AtLeast(0.0), 1.0),
        KeyDefault::Value,
        "0..=1, per token, for requests that do not ignore EOS",
        in CostModel
    ),
];

/// `[engine.sim]`'s scheduler limits: the [`ResolvedEngineConfig`] it simulates.
pub(crate) const SCHED_KEYS: &[Key<ResolvedEngineConfig>] = &[
    key!(max_num_seqs: U32(1), KeyDefault::Value, ">= 1, sequences running at once", in ResolvedEngineConfig),
    key!(max_num_batched_tokens: U32(1), KeyDefault::Value, ">= 1, tokens per engine step", in ResolvedEngineConfig),
    key!(num_kv_blocks: U32(1), KeyDefault::Value, ">= 1, KV-cache capacity in blocks", in ResolvedEngineConfig),
    key!(block_size: U32(1), KeyDefault::Value, ">= 1, tokens per KV block", in ResolvedEngineConfig),
    key!(prefix_caching: Bool, KeyDefault::Value, "reuse cached full prompt blocks across requests", in ResolvedEngineConfig),
    key!(chunked_prefill: Bool, KeyDefault::Value, "split prompts across steps to fit the budget", in ResolvedEngineConfig),
];

/// `[engine.sim]` before any key is read.
pub(crate) fn sim_default(master_seed: u64) -> SimConfig {
    let seed = derive_seed(master_seed, seed_stream::SIM);
    SimConfig { time: TimeMode::Virtual, seed, cost: CostModel::default(), scheduler: DEFAULT_SCHEDULER, profile: None }
}

pub(crate) const VLLM_KEYS: &[Key<VllmConfig>] = &[
    key!(
        model: ModelPath,
        KeyDefault::Required("\"path/to/model\""),
        "absolute, or relative: next to the scenario if it exists there, else under `$BATCHLAB_HOME` \
         (default `~/.cache/batchlab`); must exist (checked by `check` and before a run): nothing is downloaded",
        in VllmConfig
    ),
    key!(dtype: Str, KeyDefault::Value, "", in VllmConfig),
    key!(max_model_len: Opt(U32(1)), KeyDefault::Text("vLLM's"), "", in VllmConfig),
    key!(max_num_seqs: Opt(U32(1)), KeyDefault::Text("vLLM's"), "", in VllmConfig),
    key!(max_num_batched_tokens: Opt(U32(1)), KeyDefault::Text("vLLM's"), "", in VllmConfig),
    key!(enforce_eager: Bool, KeyDefault::Value, "", in VllmConfig),
    key!(seed: U64(0), KeyDefault::Text("derived (stream 2)"), "", in VllmConfig),
    key!(kv_cache_gib: Float(LowerBound::Above(0.0), f64::INFINITY), KeyDefault::Value, "", in VllmConfig),
    key!(in_process: Bool, KeyDefault::Value, "", in VllmConfig),
    key!(omp_num_threads: Opt(U32(1)), KeyDefault::Text("unset"), "", in VllmConfig),
    key!(disable_log_stats: Bool, KeyDefault::Value, "", in VllmConfig),
    key!(
        admission: Choice(Admission::CHOICES),
        KeyDefault::Value,
        "`\"batch\"`: each batch is one `LLM.generate`; `\"continuous\"`: each request goes to vLLM's engine as it \
         arrives and a thread steps it (per-token times, so `itl`); needs `batching.batch_size = 1` and \
         `batching.max_in_flight` > 1 (docs/vllm.md)",
        in VllmConfig
    ),
    key!(
        profile: Opt(PathBeside),
        KeyDefault::Value,
        "a `batchlab calibrate` profile of this engine, relative to the scenario: the default \
         `batching.stall_timeout` becomes 4× its predicted time of a full batch, at least 30 s",
        in VllmConfig
    ),
    key!(engine_args: Json, KeyDefault::Text("empty"), "passed unchanged to `vllm.EngineArgs`", in VllmConfig),
];

/// `[engine.vllm]` before any key is read.
pub(crate) fn vllm_default(master_seed: u64) -> VllmConfig {
    VllmConfig {
        model: PathBuf::new(),
        dtype: "float32".to_owned(),
        max_model_len: None,
        max_num_seqs: None,
        max_num_batched_tokens: None,
        enforce_eager: true,
        seed: derive_seed(master_seed, seed_stream::VLLM),
        kv_cache_gib: 1.0,
        in_process: true,
        omp_num_threads: None,
        disable_log_stats: false,
        admission: Admission::Batch,
        engine_args: serde_json::Map::new(),
        profile: None,
    }
}

/// `[engine.openai]`: an OpenAI-compatible server over HTTP (docs/http.md).
pub(crate) const OPENAI_KEYS: &[Key<OpenAiConfig>] = &[
    key!(
        urls: List(BaseUrl),
        KeyDefault::Required("[\"http://127.0.0.1:8000\"]"),
        "one or more servers' base URLs (`http://` or `https://`); several are routed client-side by `routing`",
        in OpenAiConfig
    ),
    key!(
        model: NonBlank,
        KeyDefault::Required("\"served-model-name\""),
        "the model name every request carries; `start` checks each server lists it at `/v1/models`",
        in OpenAiConfig
    ),
    key!(
        api: Choice(&[("completions", Api::Completions), ("chat", Api::Chat), ("embeddings", Api::Embeddings)]),
        KeyDefault::Value,
        "`completions`: a batch is one request with a list of prompts; `chat`: one conversation per request \
         (needs `batching.batch_size = 1`); `embeddings`: a batch is one `/v1/embeddings` request with a list of \
         inputs (no output keys)",
        in OpenAiConfig
    ),
    key!(
        api_key_env: Opt(EnvVarName),
        KeyDefault::Value,
        "the NAME of the environment variable holding the API key (sent as a bearer token); the key is never \
         written anywhere",
        in OpenAiConfig
    ),
    key!(
        timeout: Opt(Dur { zero: false }),
        KeyDefault::Text("30 s + 100 ms per asked-for token of the request, at most 30 min"),
        "> 0; one request, from the batch reaching the engine (a wait for a free connection included) to its \
         stream's end; past it the batch fails with `timeout`",
        in OpenAiConfig
    ),
    key!(
        stall_timeout: Opt(Dur { zero: false }),
        KeyDefault::Text("5 s, or 8× the longest gap between events seen so far in the run when longer"),
        "> 0; a request that gets nothing new (no response head, no event with data) for this long, while its \
         endpoint sends none on our other requests either, fails with `stalled`, and the endpoint leaves the \
         rotation until probed",
        in OpenAiConfig
    ),
    key!(
        max_connections: U32(1),
        KeyDefault::Value,
        ">= 1; most requests in flight to one endpoint at once; more wait for a slot",
        in OpenAiConfig
    ),
    key!(
        routing: Choice(&[
            ("round_robin", Routing::RoundRobin),
            ("least_outstanding", Routing::LeastOutstanding),
            ("session_affinity", Routing::SessionAffinity)
        ]),
        KeyDefault::Value,
        "how a request picks one of several `urls`; a failing endpoint is skipped for a backoff (docs/http.md); \
         `session_affinity` keeps a session's turns on one endpoint",
        in OpenAiConfig
    ),
    key!(
        session_header: Opt(NonBlank),
        KeyDefault::Text("`\"X-Session-ID\"`"),
        "with `[workload.sessions]`: the header each turn carries its session's number in",
        in OpenAiConfig
    ),
    key!(
        threads: Opt(U32(1)),
        KeyDefault::Text("the CPUs batchlab may use (its affinity mask: the cgroup's cpuset, or `BATCHLAB_CPUS`)"),
        ">= 1; the tokio worker threads the HTTP client's requests and streams run on",
        in OpenAiConfig
    ),
];

/// `[engine.openai]` before any key is read.
pub(crate) fn openai_default() -> OpenAiConfig {
    OpenAiConfig { urls: Vec::new(), ..OpenAiConfig::new("", "") }
}

/// The help of a missing or malformed `engine.python.class`.
pub(crate) const CLASS_HELP: &str = "write `class = \"module:Class\"` (docs/engines.md)";

pub(crate) const PYTHON_KEYS: &[Key<PythonConfig>] = &[
    Key {
        name: "class",
        doc: "the protocol class; `batchlab_engines.*` are built into batchlab",
        default: KeyDefault::Required("\"module:Class\""),
        sub: Sub::Value,
        read: |cx, field, p| {
            let Some(spec) = cx.string_of(field) else { return };
            match parse_class_spec(&spec) {
                Some((module, class)) => (p.module, p.class) = (module.to_owned(), class.to_owned()),
                None => {
                    let message = format!("`engine.python.class`: expected \"module:Class\", found \"{spec}\"");
                    cx.report_at(field, message, Some(CLASS_HELP.to_owned()));
                }
            }
        },
        print: |p| Some(value(p.class_spec())),
    },
    key!(
        path: Opt(PathBeside),
        KeyDefault::Value,
        "a directory put first on `sys.path`; relative to the scenario's directory",
        in PythonConfig
    ),
    key!(
        venv: Opt(PathBeside),
        KeyDefault::Text("`$BATCHLAB_HOME/venv`"),
        "the venv whose interpreter runs the engine; relative to the scenario's directory",
        in PythonConfig
    ),
    key!(
        clock: Choice(&[("monotonic", ClockDomain::Monotonic), ("foreign", ClockDomain::Foreign)]),
        KeyDefault::Value,
        "the clock of the engine's `*_ts` timestamps; `start()`'s info must agree",
        in PythonConfig
    ),
    key!(
        args: Json,
        KeyDefault::Text("empty"),
        "keyword arguments for the class's constructor, passed unchanged",
        in PythonConfig
    ),
    key!(
        env: StringTable,
        KeyDefault::Text("empty"),
        "environment variables set before Python starts (the environment's own value wins)",
        in PythonConfig
    ),
];

/// `module:Class`: a dotted module path and a class name, both Python identifiers.
fn parse_class_spec(spec: &str) -> Option<(&str, &str)> {
    let identifier = |s: &str| {
        let mut chars = s.chars();
        chars.next().is_some_and(|c| c.is_alphabetic() || c == '_') && chars.all(|c| c.is_alphanumeric() || c == '_')
    };
    let (module, class) = spec.split_once(':')?;
    (module.split('.').all(identifier) && identifier(class)).then_some((module, class))
}
