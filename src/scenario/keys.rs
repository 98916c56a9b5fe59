//! Every scenario key, one row each.
//!
//! A section's keys are one table of [`Key`]s over the type the section lowers into: the key's
//! name, its doc line (docs/scenarios.md's notes column), its default as the docs state it, and
//! how its value is read ([`Codec::read`]) and printed ([`Codec::print`]). The schema (allowed keys,
//! did-you-mean, `--set` paths), the lowering, the printer, the builder and the docs check all
//! walk these tables, so adding a key is one row here (plus its plan field). Rules between keys
//! (required keys, exactly-one-of, keys of another variant) stay in the lowering. `[faults]` is a
//! section like any other: [`FAULT_KEYS`] over the engine's own `Faults`.
//!
//! Sections whose keys depend on a tag (`workload.source`, `profile.kind`) have one table per
//! variant ([`Variant`]); a row shared by variants matches them with an or-pattern. The seeds a
//! section's defaults derive from the master seed are here too ([`derive_seed`]).

use std::path::PathBuf;
use std::time::Duration;

use toml_edit::{Item, Table, value};

use super::plan::*;
use super::reader::{Field, LocatedTable, LowerBound, ReadContext};
use crate::engine::faults::Faults;
use crate::engine::openai::{Api, OpenAiConfig, Routing};
use crate::engine::python::PythonConfig;
use crate::engine::python::vllm::{Admission, VllmConfig};
use crate::engine::sim::{CostModel, DEFAULT_SCHEDULER, SimConfig, TimeMode};
use crate::engine::{ClockDomain, ResolvedEngineConfig};
use crate::loadgen::images::{Content, ImageFormat, ImageSpec};
use crate::rng::SplitMix64;

/// Seed streams of the components whose seed defaults to one derived from the master seed.
#[doc(hidden)]
pub mod seed_stream {
    /// `engine.sim.seed`.
    pub const SIM: u64 = 1;
    /// `engine.vllm.seed`.
    pub const VLLM: u64 = 2;
    /// `workload.seed`.
    pub const WORKLOAD: u64 = 3;
    /// A poisson profile's `seed`.
    pub const POISSON: u64 = 4;
    /// A gamma profile's `seed`.
    pub const GAMMA: u64 = 5;
}

/// The default seed of a component: the first draw of `SplitMix64::derive(master, stream)`,
/// shifted right by one bit so that it fits a TOML integer.
#[doc(hidden)]
pub fn derive_seed(master: u64, stream: u64) -> u64 {
    SplitMix64::derive(master, stream).next_u64() >> 1
}

/// What may stand below a key: nothing (a plain value), anything (a free-form table), or fixed keys.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Sub {
    Value,
    Any,
    Fixed(&'static [&'static str]),
}

/// A key's default as docs/scenarios.md states it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum KeyDefault {
    /// The section's default value, printed (`"500us"`, `256`, `true`; `none` when unset).
    Value,
    /// Words, for a default that is not a value (`derived (stream 1)`, `vLLM's`).
    Text(&'static str),
    /// The key must be written; the example goes into the "add `key = example`" help.
    Required(&'static str),
}

/// One key of a section that lowers into an `S`.
pub(crate) struct Key<S: 'static> {
    pub name: &'static str,
    /// The docs' notes on the key (the last column of its row in docs/scenarios.md, checked there).
    #[cfg_attr(not(test), allow(dead_code))]
    pub doc: &'static str,
    pub default: KeyDefault,
    pub sub: Sub,
    /// Reads a present key into `S`; a bad value is reported and leaves `S` as it was.
    pub read: fn(&mut ReadContext, &Field, &mut S),
    /// The key's value in `S` as TOML; `None` leaves the key out (unset, or another variant's).
    pub print: fn(&S) -> Option<Item>,
}

/// One [`Key`] row. `key!(name: Codec, default, "doc", in Type)` reads and prints the field `name`
/// of the struct or enum variant `Type`; `key!(name: Codec, default, "doc", pattern)` binds `name`
/// in any pattern (an or-pattern for a key several variants share).
macro_rules! key {
    ($name:ident: $codec:expr, $default:expr, $doc:literal, in $($ty:ident)::+) => {
        key!($name: $codec, $default, $doc, $($ty)::+ { $name, .. })
    };
    ($name:ident: $codec:expr, $default:expr, $doc:literal, $pat:pat) => {
        Key {
            name: stringify!($name),
            doc: $doc,
            default: $default,
            sub: sub_of(&$codec),
            read: |cx, field, s| match s {
                $pat => {
                    if let Some(v) = Codec::read(&$codec, cx, field) {
                        *$name = v;
                    }
                }
                #[allow(unreachable_patterns)]
                _ => {}
            },
            print: |s| match s {
                $pat => Codec::print(&$codec, $name),
                #[allow(unreachable_patterns)]
                _ => None,
            },
        }
    };
}

/// Reads every key of `keys` that `t` has into `s`, in table order.
pub(crate) fn read<S>(cx: &mut ReadContext, t: LocatedTable, keys: &[Key<S>], s: &mut S) {
    for key in keys {
        if let Some(field) = cx.field(t, key.name) {
            (key.read)(cx, &field, s);
        }
    }
}

/// Writes every key of `keys` that `s` has into `t`, in table order.
pub(crate) fn print<S>(t: &mut Table, keys: &[Key<S>], s: &S) {
    for key in keys {
        if let Some(item) = (key.print)(s) {
            t[key.name] = item;
        }
    }
}

/// The key names of `keys`, in order.
pub(crate) fn names<S>(keys: &[Key<S>]) -> impl Iterator<Item = &'static str> + '_ {
    keys.iter().map(|k| k.name)
}

/// A variant of a tagged section: the tag's value, its keys and its plan before any key is read
/// (from the master seed, for derived seeds).
pub(crate) struct Variant<S: 'static> {
    pub name: &'static str,
    pub keys: &'static [Key<S>],
    pub default: fn(u64) -> S,
    /// Whether a value is this variant (for the printer).
    pub is: fn(&S) -> bool,
}

/// A tag naming one of `variants`.
pub(crate) struct TagOf<S: 'static>(pub &'static [Variant<S>]);
impl<S> Codec for TagOf<S> {
    type Value = &'static str;
    fn read(&self, cx: &mut ReadContext, field: &Field) -> Option<&'static str> {
        let names: Vec<&'static str> = self.0.iter().map(|v| v.name).collect();
        cx.choice_of(field, &names)
    }
    fn print(&self, v: &&'static str) -> Option<Item> {
        Some(value(*v))
    }
}

/// The variant named `name` (the tag was read as one of the names, so it exists).
pub(crate) fn variant<S>(variants: &'static [Variant<S>], name: &str) -> &'static Variant<S> {
    variants.iter().find(|v| v.name == name).unwrap_or(&variants[0])
}

/// Every key some variant has, in order of first appearance.
pub(crate) fn variant_keys<S>(variants: &[Variant<S>]) -> Vec<(&'static str, Sub)> {
    let mut all: Vec<(&'static str, Sub)> = Vec::new();
    for key in variants.iter().flat_map(|v| v.keys) {
        if !all.iter().any(|(name, _)| *name == key.name) {
            all.push((key.name, key.sub));
        }
    }
    all
}

/// A section's keys as the schema sees them.
pub(crate) fn subs<S>(keys: &[Key<S>]) -> impl Iterator<Item = (&'static str, Sub)> + '_ {
    keys.iter().map(|k| (k.name, k.sub))
}

/// The top level's own keys (the sections are [`SECTIONS`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Head {
    pub name: String,
    pub description: Option<String>,
    pub seed: u64,
}

pub(crate) const HEAD_KEYS: &[Key<Head>] = &[
    key!(
        name: ScenarioName,
        KeyDefault::Text("the file stem"),
        "one plain file name: no `/` or `\\`, not `.` or `..` (it names `results/<name>`)",
        in Head
    ),
    key!(description: Opt(Str), KeyDefault::Value, "", in Head),
    key!(seed: U64(0), KeyDefault::Value, "master seed, see above", in Head),
];

/// The top level's sections, in the order the printer writes them.
pub(crate) const SECTIONS: &[&str] =
    &["engine", "batching", "workload", "profile", "stop", "warmup", "cooldown", "faults", "slo", "expect", "output"];

/// A section's tag: `engine.kind`, `workload.source`, `profile.kind`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Tag(pub &'static str);

/// The engine kinds `engine.kind` takes; each has its own sub-section, `[engine.<kind>]`.
#[doc(hidden)]
pub const ENGINE_KINDS: &[&str] = &["sim", "vllm", "python", "openai"];

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
        api: Choice(&[("completions", Api::Completions), ("chat", Api::Chat)]),
        KeyDefault::Value,
        "`completions`: a batch is one request with a list of prompts; `chat`: one conversation per request \
         (needs `batching.batch_size = 1`)",
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
        routing: Choice(&[("round_robin", Routing::RoundRobin), ("least_outstanding", Routing::LeastOutstanding)]),
        KeyDefault::Value,
        "how a request picks one of several `urls`; a failing endpoint is skipped for a backoff (docs/http.md)",
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

/// `[batching]` as plain values; `BatchConfig` checks them together.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Batching {
    pub batch_size: usize,
    pub batch_timeout: Duration,
    pub generate_timeout: Option<Duration>,
    pub stall_timeout: Option<Duration>,
    /// `None`: the default, 1, which is left out when printed (a plan that never set it prints
    /// as it did before the key existed).
    pub max_in_flight: Option<usize>,
}

impl Batching {
    pub fn of(c: &crate::batcher::BatchConfig) -> Self {
        Batching {
            batch_size: c.batch_size(),
            batch_timeout: c.batch_timeout(),
            generate_timeout: c.generate_timeout(),
            stall_timeout: c.stall_timeout(),
            max_in_flight: Some(c.max_in_flight()).filter(|&n| n > 1),
        }
    }
}

pub(crate) const BATCHING_KEYS: &[Key<Batching>] = &[
    key!(batch_size: Count(1), KeyDefault::Value, ">= 1; a full batch flushes at once", in Batching),
    key!(
        batch_timeout: Dur { zero: false },
        KeyDefault::Value,
        "> 0; a partial batch flushes when its oldest request waited this long",
        in Batching
    ),
    key!(
        generate_timeout: Opt(Dur { zero: false }),
        KeyDefault::Text("none for `sim`; `engine.openai.timeout` (30 min when derived) + 30 s for `openai`; `\"10m\"` for another real engine"),
        "> 0; a longer generate fails its batch, and while it stays stuck, queued requests fail after waiting as long",
        in Batching
    ),
    key!(
        stall_timeout: Opt(Dur { zero: false }),
        KeyDefault::Text("none for `sim`; `engine.openai.timeout` (30 min when derived) + 30 s for `openai`; `\"30s\"` for another real engine"),
        "> 0; a generate with no progress (no output, no CPU time in the engine's processes) for this long, \
         or 4× the run's longest generate when that is longer, fails with `engine_stalled`, and so does every later request",
        in Batching
    ),
    key!(
        max_in_flight: Opt(Count(1)),
        KeyDefault::Text("1"),
        ">= 1; up to this many batches run at once, each with its own `generate_timeout`; above 1 needs an engine \
         that runs several generates at once (`engine.kind = \"openai\"`): `sim`, `vllm` and `python` run one, \
         and `check` refuses more",
        in Batching
    ),
];

pub(crate) const WORKLOAD_TAG: Key<Tag> = key!(source: TagOf(WORKLOAD_VARIANTS), KeyDefault::Value, "", Tag(source));

const IGNORE_EOS_ROW: Key<WorkloadSpec> = key!(
    ignore_eos: Bool,
    KeyDefault::Value,
    "",
    WorkloadSpec::Synthetic { ignore_eos, .. } | WorkloadSpec::File { ignore_eos, .. }
);
const TEMPERATURE_ROW: Key<WorkloadSpec> = key!(
    temperature: Float32(LowerBound::AtLeast(0.0), f32::MAX as f64),
    KeyDefault::Value,
    "",
    WorkloadSpec::Synthetic { temperature, .. } | WorkloadSpec::File { temperature, .. }
);

const REQUEST_FORMAT: Key<WorkloadSpec> = key!(
    request_format: ReqFormat,
    KeyDefault::Value,
    "how chat prompts (`messages`) become the model's prompt: `\"plain\"`, `\"chat-template\"` (the model's), \
     or a Jinja template: inline, or a file relative to the scenario",
    WorkloadSpec::Synthetic { request_format, .. } | WorkloadSpec::File { request_format, .. }
);

const TOKENIZER_ROW: Key<WorkloadSpec> = key!(
    tokenizer: Opt(TokenizerPath),
    KeyDefault::Text("none: four bytes a token"),
    "a model directory or a tokenizer.json, beside the scenario or under `$BATCHLAB_HOME`; prompt lengths count its tokens \
     (synthetic prompts of exact length, chat ones after the template; the file length limits)",
    WorkloadSpec::Synthetic { tokenizer, .. } | WorkloadSpec::File { tokenizer, .. }
);
/// `[workload.images]`, a synthetic chat workload's images (vLLM's `random-mm` conventions,
/// `loadgen::images`).
pub(crate) const IMAGE_KEYS: &[Key<ImageSpec>] = &[
    key!(
        buckets: Buckets,
        KeyDefault::Text("`\"{(256, 256, 1): 1}\"`"),
        "vLLM's `--random-mm-bucket-config` verbatim, `\"{(height, width, 1): probability, …}\"` (probabilities \
         sum to 1, no side of 0), or a guidellm preset: `\"240p\"` … `\"2160p\"`, `\"4k\"` (16:9, width even)",
        in ImageSpec
    ),
    key!(
        base_items_per_request: U32(0),
        KeyDefault::Value,
        "vLLM's `--random-mm-base-items-per-request`",
        ImageSpec { base_items: base_items_per_request, .. }
    ),
    key!(
        range_ratio: Float(LowerBound::AtLeast(0.0), 1.0),
        KeyDefault::Value,
        "vLLM's `--random-mm-num-mm-items-range-ratio`: images per request uniform over ⌊n(1−r)⌋..=⌈n(1+r)⌉",
        in ImageSpec
    ),
    key!(
        limit_per_prompt: U32(0),
        KeyDefault::Value,
        "vLLM's `--random-mm-limit-mm-per-prompt` image limit; not below `base_items_per_request`",
        ImageSpec { limit: limit_per_prompt, .. }
    ),
    key!(
        content: Choice(&[("noise", Content::Noise), ("gradient", Content::Gradient), ("solid", Content::Solid)]),
        KeyDefault::Value,
        "`noise` (vLLM's), `gradient` (guidellm's default; compresses like real media) or `solid`",
        in ImageSpec
    ),
    key!(
        format: Choice(&[("jpeg", ImageFormat::Jpeg), ("png", ImageFormat::Png)]),
        KeyDefault::Value,
        "sent as `data:image/jpeg` or `data:image/png` URLs",
        in ImageSpec
    ),
    key!(quality: U32(1), KeyDefault::Value, "JPEG quality, 1..=100 (PIL's default, as vLLM's)", in ImageSpec),
    key!(
        pool: U32(0),
        KeyDefault::Value,
        "distinct pool images, reused to test a server's image cache; 0: every image differs",
        in ImageSpec
    ),
    key!(
        pool_rate: Float(LowerBound::AtLeast(0.0), 1.0),
        KeyDefault::Value,
        "with `pool`: the share of images drawn from the pool (the designed reuse)",
        in ImageSpec
    ),
    key!(
        tokens_per_image: U32(1),
        KeyDefault::Value,
        "prompt tokens an image costs (guidellm's mock server's), when `patch_size` is 0",
        in ImageSpec
    ),
    key!(
        patch_size: U32(0),
        KeyDefault::Value,
        "> 0: an image costs ⌈height/p⌉·⌈width/p⌉ tokens instead",
        in ImageSpec
    ),
    key!(
        count_in_prompt: Bool,
        KeyDefault::Value,
        "`workload.prompt_tokens` is the whole prompt, template and images included, as batchlab counts it: \
         the text is sized to hit it (docs/workloads.md)",
        in ImageSpec
    ),
];

/// `[workload]`, by `source`.
pub(crate) const WORKLOAD_VARIANTS: &[Variant<WorkloadSpec>] = &[
    Variant {
        name: "synthetic",
        is: |s| matches!(s, WorkloadSpec::Synthetic { .. }),
        keys: &[
            key!(prompt_tokens: Dist, KeyDefault::Value, "synthetic only", in WorkloadSpec::Synthetic),
            key!(output_tokens: Dist, KeyDefault::Value, "synthetic only", in WorkloadSpec::Synthetic),
            key!(seed: U64(0), KeyDefault::Text("derived (stream 3)"), "synthetic only", in WorkloadSpec::Synthetic),
            key!(
                unique_prefix: Bool,
                KeyDefault::Value,
                "synthetic only; defeats prefix caching",
                in WorkloadSpec::Synthetic
            ),
            key!(
                prefix_groups: U32(0),
                KeyDefault::Value,
                "synthetic only; every prompt starts with one of this many shared prefixes, 0 for none",
                in WorkloadSpec::Synthetic
            ),
            key!(
                prefix_tokens: U32(0),
                KeyDefault::Value,
                "synthetic only; tokens of each shared prefix, fewer than the shortest prompt",
                in WorkloadSpec::Synthetic
            ),
            key!(vocab_size: U32(2), KeyDefault::Value, "synthetic only", in WorkloadSpec::Synthetic),
            key!(
                chat: Bool,
                KeyDefault::Value,
                "synthetic only; each prompt is a conversation: `system_prompt`, then a user turn of `prompt_tokens` words",
                WorkloadSpec::Synthetic { chat: SyntheticChat { enabled: chat, .. }, .. }
            ),
            key!(
                system_prompt: Opt(Str),
                KeyDefault::Value,
                "synthetic only, with `chat = true`; the system turn, the same for every prompt",
                WorkloadSpec::Synthetic { chat: SyntheticChat { system_prompt, .. }, .. }
            ),
            IGNORE_EOS_ROW,
            TEMPERATURE_ROW,
            REQUEST_FORMAT,
            TOKENIZER_ROW,
        ],
        default: |master_seed| WorkloadSpec::Synthetic {
            prompt_tokens: TokenDist::Fixed { value: 128 },
            output_tokens: TokenDist::Fixed { value: 64 },
            seed: derive_seed(master_seed, seed_stream::WORKLOAD),
            unique_prefix: true,
            prefix_groups: 0,
            prefix_tokens: 0,
            vocab_size: 32000,
            ignore_eos: true,
            temperature: 0.0,
            chat: SyntheticChat::default(),
            request_format: RequestFormat::default(),
            tokenizer: None,
            images: None,
        },
    },
    Variant {
        name: "file",
        is: |s| matches!(s, WorkloadSpec::File { .. }),
        keys: &[
            key!(
                path: ExistingFile,
                KeyDefault::Required("\"prompts.jsonl\""),
                "relative to the scenario file; must exist",
                in WorkloadSpec::File
            ),
            key!(
                default_max_tokens: U32(1),
                KeyDefault::Value,
                "file only; for lines without `max_tokens`",
                in WorkloadSpec::File
            ),
            IGNORE_EOS_ROW,
            TEMPERATURE_ROW,
            REQUEST_FORMAT,
            TOKENIZER_ROW,
            key!(
                format: Choice(&[("jsonl", FileFormat::Jsonl), ("sharegpt", FileFormat::ShareGpt), ("text", FileFormat::Text)]),
                KeyDefault::Value,
                "file only; `jsonl` (`prompt`, `prompt_token_ids` or `messages`), `sharegpt` (a JSON array or JSONL of `conversations`), `text` (one prompt per line)",
                WorkloadSpec::File { dataset: DatasetOptions { format, .. }, .. }
            ),
            key!(
                columns: ColumnMap,
                KeyDefault::Text("each field's own name"),
                "file only; the JSON key of each field, e.g. `{ prompt = \"question\", max_tokens = \"answer_len\" }`",
                WorkloadSpec::File { dataset: DatasetOptions { columns, .. }, .. }
            ),
            key!(
                skip_bad_lines: Bool,
                KeyDefault::Value,
                "file only; skip bad entries and count them in the report, instead of failing",
                WorkloadSpec::File { dataset: DatasetOptions { skip_bad_lines, .. }, .. }
            ),
            key!(
                min_prompt_tokens: Opt(U32(1)),
                KeyDefault::Value,
                "file only; drop shorter prompts (in `tokenizer`'s tokens, else 4 bytes a token)",
                WorkloadSpec::File { dataset: DatasetOptions { min_prompt_tokens, .. }, .. }
            ),
            key!(
                max_prompt_tokens: Opt(U32(1)),
                KeyDefault::Value,
                "file only; drop longer prompts, or cut them with `truncate`",
                WorkloadSpec::File { dataset: DatasetOptions { max_prompt_tokens, .. }, .. }
            ),
            key!(
                truncate: Bool,
                KeyDefault::Value,
                "file only, with `max_prompt_tokens`; cut longer prompts to it instead of dropping them",
                WorkloadSpec::File { dataset: DatasetOptions { truncate, .. }, .. }
            ),
            key!(
                reply_max_tokens: Bool,
                KeyDefault::Value,
                "`sharegpt` only; the recorded reply's length is the request's `max_tokens`",
                WorkloadSpec::File { dataset: DatasetOptions { reply_max_tokens, .. }, .. }
            ),
        ],
        default: |_| WorkloadSpec::File {
            path: PathBuf::new(),
            default_max_tokens: 64,
            ignore_eos: true,
            temperature: 0.0,
            dataset: DatasetOptions::default(),
            request_format: RequestFormat::default(),
            tokenizer: None,
        },
    },
];

pub(crate) const PROFILE_TAG: Key<Tag> = key!(kind: TagOf(PROFILE_VARIANTS), KeyDefault::Value, "", Tag(kind));

/// `rampup` of the kinds that have one (see `loadgen::Step::rampup`).
const RAMPUP: Key<ProfileSpec> = key!(
    rampup: Opt(Dur { zero: false }),
    KeyDefault::Value,
    "",
    ProfileSpec::Concurrent { rampup, .. }
        | ProfileSpec::Constant { rampup, .. }
        | ProfileSpec::Poisson { rampup, .. }
        | ProfileSpec::Gamma { rampup, .. }
);

/// `[profile]`, by `kind`.
pub(crate) const PROFILE_VARIANTS: &[Variant<ProfileSpec>] = &[
    Variant {
        name: "synchronous",
        is: |s| matches!(s, ProfileSpec::Synchronous),
        keys: &[],
        default: |_| ProfileSpec::Synchronous,
    },
    Variant {
        name: "concurrent",
        is: |s| matches!(s, ProfileSpec::Concurrent { .. }),
        keys: &[key!(levels: List(U32(1)), KeyDefault::Required("[1, 4, 16]"), "", in ProfileSpec::Concurrent), RAMPUP],
        default: |_| ProfileSpec::Concurrent { levels: Vec::new(), rampup: None },
    },
    Variant {
        name: "throughput",
        is: |s| matches!(s, ProfileSpec::Throughput { .. }),
        keys: &[key!(max_concurrency: U32(1), KeyDefault::Value, "", in ProfileSpec::Throughput)],
        default: |_| ProfileSpec::Throughput { max_concurrency: 256 },
    },
    Variant {
        name: "constant",
        is: |s| matches!(s, ProfileSpec::Constant { .. }),
        keys: &[
            key!(
                rates: List(Float(LowerBound::Above(0.0), f64::INFINITY)),
                KeyDefault::Required("[10.0, 20.0]"),
                "",
                in ProfileSpec::Constant
            ),
            key!(max_concurrency: Opt(U32(1)), KeyDefault::Value, "", in ProfileSpec::Constant),
            RAMPUP,
        ],
        default: |_| ProfileSpec::Constant { rates: Vec::new(), max_concurrency: None, rampup: None },
    },
    Variant {
        name: "poisson",
        is: |s| matches!(s, ProfileSpec::Poisson { .. }),
        keys: &[
            key!(rate: Float(LowerBound::Above(0.0), f64::INFINITY), KeyDefault::Required("50.0"), "", in ProfileSpec::Poisson),
            key!(seed: U64(0), KeyDefault::Text("derived, stream 4"), "", in ProfileSpec::Poisson),
            key!(max_concurrency: Opt(U32(1)), KeyDefault::Value, "", in ProfileSpec::Poisson),
            RAMPUP,
        ],
        default: |master_seed| ProfileSpec::Poisson {
            rate: 1.0,
            seed: derive_seed(master_seed, seed_stream::POISSON),
            max_concurrency: None,
            rampup: None,
        },
    },
    Variant {
        name: "gamma",
        is: |s| matches!(s, ProfileSpec::Gamma { .. }),
        keys: &[
            key!(rate: Float(LowerBound::Above(0.0), f64::MAX), KeyDefault::Required("50.0"), "", in ProfileSpec::Gamma),
            key!(burstiness: Float(LowerBound::Above(0.0), f64::MAX), KeyDefault::Value, "", in ProfileSpec::Gamma),
            key!(seed: U64(0), KeyDefault::Text("derived, stream 5"), "", in ProfileSpec::Gamma),
            key!(max_concurrency: Opt(U32(1)), KeyDefault::Value, "", in ProfileSpec::Gamma),
            RAMPUP,
        ],
        default: |master_seed| ProfileSpec::Gamma {
            rate: 1.0,
            burstiness: 1.0,
            seed: derive_seed(master_seed, seed_stream::GAMMA),
            max_concurrency: None,
            rampup: None,
        },
    },
    Variant {
        name: "trace",
        is: |s| matches!(s, ProfileSpec::Trace { .. }),
        keys: &[
            key!(time_scale: Float(LowerBound::Above(0.0), f64::MAX), KeyDefault::Value, "", in ProfileSpec::Trace),
            key!(max_concurrency: Opt(U32(1)), KeyDefault::Value, "", in ProfileSpec::Trace),
        ],
        default: |_| ProfileSpec::Trace { time_scale: 1.0, arrivals: TraceArrivals::default(), max_concurrency: None },
    },
    Variant {
        name: "sweep",
        is: |s| matches!(s, ProfileSpec::Sweep { .. }),
        keys: &[
            key!(rates: SweepRates, KeyDefault::Value, "", in ProfileSpec::Sweep),
            key!(max_concurrency: U32(1), KeyDefault::Value, "", in ProfileSpec::Sweep),
        ],
        default: |_| ProfileSpec::Sweep { rates: 5, max_concurrency: 256 },
    },
];

pub(crate) const STOP_KEYS: &[Key<StopPlan>] = &[
    key!(
        max_requests: Opt(U64(1)),
        KeyDefault::Text("1000 if neither `max_requests` nor `max_duration` is set"),
        "",
        in StopPlan
    ),
    key!(max_duration: Opt(Dur { zero: false }), KeyDefault::Value, "", in StopPlan),
    key!(max_errors: Opt(U64(0)), KeyDefault::Value, "", in StopPlan),
    key!(max_error_rate: Opt(Float(LowerBound::AtLeast(0.0), 1.0)), KeyDefault::Value, "", in StopPlan),
];

/// `[warmup]` or `[cooldown]` as written: exactly one of the two must be set.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Phase {
    pub requests: Option<u64>,
    pub duration: Option<Duration>,
}

impl Phase {
    pub fn of(limit: &PhaseLimit) -> Self {
        match limit {
            PhaseLimit::Requests(n) => Phase { requests: Some(*n), duration: None },
            PhaseLimit::Duration(d) => Phase { requests: None, duration: Some(*d) },
        }
    }
}

pub(crate) const PHASE_KEYS: &[Key<Phase>] = &[
    key!(requests: Opt(U64(0)), KeyDefault::Value, "this many requests; 0: none", in Phase),
    key!(duration: Opt(Dur { zero: false }), KeyDefault::Value, "requests for this long", in Phase),
];

/// A latency objective in milliseconds.
const OBJECTIVE_MS: Opt<Float> = Opt(Float(LowerBound::Above(0.0), f64::INFINITY));

pub(crate) const SLO_KEYS: &[Key<Slo>] = &[
    key!(ttft_ms: OBJECTIVE_MS, KeyDefault::Value, "> 0; time to first token, ms", in Slo),
    key!(tpot_ms: OBJECTIVE_MS, KeyDefault::Value, "> 0; time per output token after the first, ms", in Slo),
    key!(itl_ms: OBJECTIVE_MS, KeyDefault::Value, "> 0; every gap between two tokens, ms (needs per-token times)", in Slo),
    key!(latency_ms: OBJECTIVE_MS, KeyDefault::Value, "> 0; end-to-end latency, ms", in Slo),
];

/// `[faults]`, in the order the printer writes them (the engine checks batch faults in the order
/// panic, hang, fail_batch, short_output, extra_output, wrong_id).
pub(crate) const FAULT_KEYS: &[Key<Faults>] = &[
    key!(fail_batch: Trigger, NEVER, "the batch fails with an engine error (the engine is not called)", in Faults),
    key!(short_output: Trigger, NEVER, "one output fewer than requests", in Faults),
    key!(extra_output: Trigger, NEVER, "one output more than requests", in Faults),
    key!(wrong_id: Trigger, NEVER, "an output carries an id not in the batch", in Faults),
    key!(panic: Trigger, NEVER, "generate panics", in Faults),
    key!(
        slow: Trigger,
        NEVER,
        "generate returns `slow_factor` times later than the engine took (its outputs and timestamps are the engine's)",
        in Faults
    ),
    key!(
        slow_factor: Float(LowerBound::AtLeast(1.0), f64::INFINITY),
        KeyDefault::Value,
        "how much later a slow generate returns",
        in Faults
    ),
    key!(hang: Trigger, NEVER, "generate blocks for `hang_for`, then fails (the engine is not called)", in Faults),
    key!(
        hang_for: Dur { zero: true },
        KeyDefault::Value,
        "how long a hung generate blocks; set `batching.generate_timeout` to catch it",
        in Faults
    ),
    key!(start_fails: Bool, KeyDefault::Value, "the engine never starts", in Faults),
    key!(start_delay: Dur { zero: true }, KeyDefault::Value, "start takes this much longer", in Faults),
    key!(
        kill_engine: Opt(KillAfter),
        KeyDefault::Value,
        "SIGKILL vLLM's `VLLM::EngineCore` process ~200 ms into generate `after_batches + 1`",
        in Faults
    ),
    key!(
        kill_worker: Opt(KillAfter),
        KeyDefault::Value,
        "SIGKILL a `VLLM::Worker…` process ~200 ms into generate `after_batches + 1` (vLLM's multiprocess executor only)",
        in Faults
    ),
    key!(
        http_429: Trigger,
        NEVER,
        "`batchlab serve` answers 429 with `Retry-After` (per request; `run` ignores it)",
        in Faults
    ),
    key!(http_503: Trigger, NEVER, "`batchlab serve` answers 503 with `Retry-After` (per request)", in Faults),
    key!(drop_stream: Trigger, NEVER, "`batchlab serve` drops the connection halfway through the stream", in Faults),
    key!(
        stall_stream: Trigger,
        NEVER,
        "`batchlab serve` stalls the stream for `stall_for` after its first token",
        in Faults
    ),
    key!(stall_for: Dur { zero: true }, KeyDefault::Value, "how long a stalled stream stalls", in Faults),
    key!(
        exit_server: Trigger,
        NEVER,
        "`batchlab serve` exits at once (status 1) when the request arrives",
        in Faults
    ),
];

/// A trigger's default: it never fires.
const NEVER: KeyDefault = KeyDefault::Text("never");

/// Whether `key` kills a process of the engine (it needs vLLM's multiprocess engine).
pub(crate) fn is_process_fault(key: &Key<Faults>) -> bool {
    key.sub == Sub::Fixed(PROCESS_FAULT_KEYS)
}

pub(crate) const OUTPUT_KEYS: &[Key<OutputPlan>] = &[
    key!(dir: Opt(PathAsIs), KeyDefault::Value, "relative to the current directory", in OutputPlan),
    key!(requests_jsonl: Bool, KeyDefault::Value, "also write one line per request", in OutputPlan),
];

mod codec;
mod handles;
pub use handles::*;
#[cfg(test)]
mod tests;

pub(crate) use codec::*;
