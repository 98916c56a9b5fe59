//! From a parsed TOML tree to a validated [`Plan`], in one step.
//!
//! This is the only place that knows what the keys mean: defaults, ranges, and which settings
//! contradict each other. It reads everything even after a problem (falling back to defaults) so
//! the error lists every problem at once.

use toml_edit::{Table, TableLike, Value};

use super::expect;
use super::keys::{self, Batching, Head, KeyDefault, Phase, Tag, Variant};
use super::plan::*;
use super::reader::{Field, LocatedTable, ReadContext, join};
use super::schema;
use crate::batcher::BatchConfig;
use crate::engine::faults::Faults;
use crate::engine::openai::{Api, OpenAiConfig};
use crate::engine::python::PythonConfig;
use crate::engine::python::vllm::VllmConfig;

/// What lowering needs besides the tree.
pub(crate) struct Context<'a> {
    /// The scenario's default name.
    pub stem: &'a str,
}

pub(crate) fn lower(cx: &mut ReadContext, root: &Table, ctx: &Context) -> Plan {
    let top = LocatedTable { path: "", table: root as &dyn TableLike, at: None };
    cx.check_keys(top, schema::names(&[]));
    // A file stem is one path component already; `...toml`'s stem `..` is the one that is not.
    let stem = if keys::name_problem(ctx.stem).is_none() { ctx.stem } else { "scenario" };
    let mut head = Head { name: stem.to_owned(), ..Head::default() };
    keys::read(cx, top, keys::HEAD_KEYS, &mut head);
    let Head { name, description, seed } = head;

    let faults_table = cx.section(top, "faults", "faults", schema::names(&["faults"]));
    let mut faults = Faults::default();
    if let Some(t) = faults_table {
        keys::read(cx, t, keys::FAULT_KEYS, &mut faults);
    }
    let engine = lower_engine(cx, top, seed);
    check_process_faults(cx, faults_table, &engine);
    let mut places = Places::default();
    let batching = lower_batching(cx, top, &engine, &mut places);
    check_chat_batches(cx, top, &engine, &batching);
    let mut workload = lower_workload(cx, top, seed);
    super::images::lower_images(cx, top, &engine, &mut workload);
    let sessions = super::sessions::lower_sessions(cx, top, &engine, &workload);
    check_chat_prompts(cx, top, &engine, &workload);
    super::embeddings::check_embeddings(cx, top, &engine);
    // `run::preflight` reads the file, and refuses there what the engine cannot send.
    if let Some(field) = sub_table(cx, top, "workload", "workload").and_then(|w| cx.field(w, "path")) {
        let place = cx.origin(&field.path, field.span()).short();
        places.0.push((field.path, place));
    }
    let batching = stall_from_profile(cx, top, &engine, &workload, batching);
    let profile = lower_profile(cx, top, seed);
    check_benchmark_names(cx, top, &profile);
    let stop = lower_stop(cx, top);
    let warmup = lower_phase(cx, top, "warmup");
    let cooldown = lower_phase(cx, top, "cooldown");
    let slo = simple_section(cx, top, "slo", keys::SLO_KEYS, Slo::default());
    let expect = lower_expect(cx, top);
    let output = lower_output(cx, top);

    let mut plan = Plan {
        name,
        description,
        seed,
        engine,
        batching,
        workload,
        sessions,
        profile,
        stop,
        warmup,
        cooldown,
        faults,
        slo,
        expect,
        output,
        matrix: None,
        source: Default::default(),
        places,
    };
    super::arrivals::check(cx, top, &mut plan);
    plan
}

/// A section of the top level, its unknown keys reported.
fn section<'t>(cx: &mut ReadContext, top: LocatedTable<'t>, name: &'static str) -> Option<LocatedTable<'t>> {
    cx.section(top, name, name, schema::names(&[name]))
}

fn lower_engine(cx: &mut ReadContext, top: LocatedTable, seed: u64) -> EnginePlan {
    let engine = section(cx, top, "engine");
    let mut kind = Tag("sim");
    if let Some(e) = engine {
        keys::read(cx, e, keys::ENGINE_KEYS, &mut kind);
    }
    let kind = kind.0;
    let mut sub = |name: &'static str, path: &'static str| {
        engine.and_then(|e| cx.section(e, name, path, schema::names(&["engine", name])))
    };
    let (sim, vllm, python) = (sub("sim", "engine.sim"), sub("vllm", "engine.vllm"), sub("python", "engine.python"));
    let openai = sub("openai", "engine.openai");
    let engine_span = engine.and_then(|e| e.span());
    // A section for another kind than the chosen one contradicts it.
    for (name, section) in [("sim", sim), ("vllm", vllm), ("python", python), ("openai", openai)] {
        if let Some(t) = section.filter(|_| name != kind) {
            let help = format!("set `engine.kind = \"{name}\"` or remove [engine.{name}]");
            let message = format!("[engine.{name}] is set but `engine.kind` is \"{kind}\"");
            cx.report(&format!("engine.{name}"), t.span(), message, Some(help));
        }
    }
    match kind {
        "vllm" => return EnginePlan::Vllm(lower_vllm(cx, vllm, engine_span, seed)),
        "python" => return EnginePlan::Python(lower_python(cx, python, engine_span)),
        "openai" => return EnginePlan::OpenAi(lower_openai(cx, openai, engine_span)),
        _ => {}
    }
    let mut plan = keys::sim_default(seed);
    if let Some(t) = sim {
        keys::read(cx, t, keys::SIM_KEYS, &mut plan);
        // The profile first: the keys written beside it override its values.
        if let Some(path) = plan.profile.clone() {
            match load_profile(cx, &path) {
                Ok(profile) => profile.apply(&mut plan.cost, &mut plan.scheduler),
                Err(e) => {
                    let span = cx.field(t, "profile").and_then(|f| f.span());
                    let help = "profiles are written by `batchlab calibrate`; the path is relative to the scenario";
                    cx.report("engine.sim.profile", span, e.to_string(), Some(help.to_owned()));
                }
            }
        }
        keys::read(cx, t, keys::COST_KEYS, &mut plan.cost);
        keys::read(cx, t, keys::SCHED_KEYS, &mut plan.scheduler);
    }
    EnginePlan::Sim(plan)
}

fn lower_vllm(
    cx: &mut ReadContext,
    t: Option<LocatedTable>,
    engine_span: Option<std::ops::Range<usize>>,
    seed: u64,
) -> VllmConfig {
    let mut plan = keys::vllm_default(seed);
    let missing = "missing `engine.vllm.model` (required with `engine.kind = \"vllm\"`)".to_owned();
    let Some(t) = t else {
        let help = "add [engine.vllm] with `model = \"path/to/model\"`".to_owned();
        cx.report("engine", engine_span, missing, Some(help));
        return plan;
    };
    for (key, example) in missing_required(cx, t, keys::VLLM_KEYS) {
        cx.report("engine.vllm", t.span(), missing.clone(), Some(format!("add `{key} = {example}`")));
    }
    keys::read(cx, t, keys::VLLM_KEYS, &mut plan);
    plan
}

/// The required keys of `keys` that `t` lacks, each with its example value.
fn missing_required<S>(cx: &ReadContext, t: LocatedTable, keys: &[keys::Key<S>]) -> Vec<(&'static str, &'static str)> {
    keys.iter()
        .filter_map(|k| match k.default {
            KeyDefault::Required(example) if cx.field(t, k.name).is_none() => Some((k.name, example)),
            _ => None,
        })
        .collect()
}

fn lower_python(
    cx: &mut ReadContext,
    t: Option<LocatedTable>,
    engine_span: Option<std::ops::Range<usize>>,
) -> PythonConfig {
    let mut plan = PythonConfig::new("", "");
    let missing = "missing `engine.python.class` (required with `engine.kind = \"python\"`)".to_owned();
    let help = keys::CLASS_HELP.to_owned();
    let Some(t) = t else {
        cx.report("engine", engine_span, missing, Some(format!("add [engine.python] and {help}")));
        return plan;
    };
    if !missing_required(cx, t, keys::PYTHON_KEYS).is_empty() {
        cx.report("engine.python", t.span(), missing, Some(help));
    }
    keys::read(cx, t, keys::PYTHON_KEYS, &mut plan);
    plan
}

fn lower_openai(
    cx: &mut ReadContext,
    t: Option<LocatedTable>,
    engine_span: Option<std::ops::Range<usize>>,
) -> OpenAiConfig {
    let mut plan = keys::openai_default();
    let missing = "missing `engine.openai.{key}` (required with `engine.kind = \"openai\"`)";
    let Some(t) = t else {
        let help = "add [engine.openai] with `urls = [\"http://127.0.0.1:8000\"]` and `model = \"...\"`".to_owned();
        cx.report("engine", engine_span, missing.replace("{key}", "urls"), Some(help));
        return plan;
    };
    for (key, example) in missing_required(cx, t, keys::OPENAI_KEYS) {
        cx.report("engine.openai", t.span(), missing.replace("{key}", key), Some(format!("add `{key} = {example}`")));
    }
    keys::read(cx, t, keys::OPENAI_KEYS, &mut plan);
    plan
}

/// The chat API has no list form: one conversation per request, so one per batch.
fn check_chat_batches(cx: &mut ReadContext, top: LocatedTable, engine: &EnginePlan, batching: &BatchConfig) {
    let EnginePlan::OpenAi(OpenAiConfig { api: Api::Chat, .. }) = engine else { return };
    if batching.batch_size() <= 1 {
        return;
    }
    let message = format!(
        "`batching.batch_size` is {} but `engine.openai.api` is \"chat\": the chat API takes one conversation \
         per request, so a batch cannot be one request",
        batching.batch_size()
    );
    let help = "set `batching.batch_size = 1` (and `batching.max_in_flight` for concurrency), or use \
                `api = \"completions\"`"
        .to_owned();
    // At the batch size where it is written, else at the api.
    let written = sub_table(cx, top, "batching", "batching").and_then(|b| cx.field(b, "batch_size"));
    let field = written.or_else(|| {
        let engine = sub_table(cx, top, "engine", "engine")?;
        cx.field(sub_table(cx, engine, "openai", "engine.openai")?, "api")
    });
    match field {
        Some(field) => cx.report_at(&field, message, Some(help)),
        None => cx.report("engine.openai.api", None, message, Some(help)),
    }
}

/// The completions API takes text or token ids: chat prompts (`messages`) need the chat API, or
/// `request_format = "plain"`. Refused at the key that makes the prompts chats.
fn check_chat_prompts(cx: &mut ReadContext, top: LocatedTable, engine: &EnginePlan, workload: &WorkloadSpec) {
    let api = match engine {
        EnginePlan::OpenAi(OpenAiConfig { api: Api::Completions, .. }) => "completions",
        EnginePlan::OpenAi(OpenAiConfig { api: Api::Embeddings, .. }) => "embeddings",
        _ => return,
    };
    let (key, what) = match workload {
        WorkloadSpec::Synthetic { chat, request_format, .. }
            if chat.enabled && *request_format != RequestFormat::Plain =>
        {
            ("chat", "`workload.chat = true` makes every prompt a conversation (`messages`)")
        }
        WorkloadSpec::File { dataset, request_format, .. }
            if dataset.format == FileFormat::ShareGpt && *request_format != RequestFormat::Plain =>
        {
            ("format", "`workload.format = \"sharegpt\"` makes every prompt a conversation (`messages`)")
        }
        _ => return,
    };
    let message = format!("{what}, but `engine.openai.api` is \"{api}\", which takes text or token ids only");
    let help = "set `engine.openai.api = \"chat\"` (with `batching.batch_size = 1`), or \
                `workload.request_format = \"plain\"` to send each conversation as text"
        .to_owned();
    let written = sub_table(cx, top, "workload", "workload").and_then(|w| cx.field(w, key));
    match written {
        Some(field) => cx.report_at(&field, message, Some(help)),
        None => cx.report(&format!("workload.{key}"), None, message, Some(help)),
    }
}

/// The sub-table `key` of `t`, if it is one, without checking its keys again.
fn sub_table<'t>(cx: &ReadContext, t: LocatedTable<'t>, key: &str, path: &'t str) -> Option<LocatedTable<'t>> {
    let field = cx.field(t, key)?;
    let table = field.node.table_like()?;
    Some(LocatedTable { path, table, at: field.span().map(|r| (r.start, r.end)) })
}

/// Process faults kill a process of vLLM's multiprocess engine: any other engine has none.
fn check_process_faults(cx: &mut ReadContext, faults_table: Option<LocatedTable>, engine: &EnginePlan) {
    if matches!(engine, EnginePlan::Vllm(v) if !v.in_process) {
        return;
    }
    let Some(t) = faults_table else { return };
    for key in keys::FAULT_KEYS.iter().filter(|k| keys::is_process_fault(k)) {
        if let Some(field) = cx.field(t, key.name) {
            let message = format!(
                "`{}` kills a process of vLLM's multiprocess engine, but the engine is {}",
                field.path,
                match engine {
                    EnginePlan::Sim(_) => "the simulator",
                    EnginePlan::Vllm(_) => "vLLM in-process",
                    EnginePlan::Python(_) => "a Python protocol engine",
                    EnginePlan::OpenAi(_) => "an HTTP server",
                }
            );
            let help = "use `engine.kind = \"vllm\"` with `engine.vllm.in_process = false`".to_owned();
            cx.report_at(&field, message, Some(help));
        }
    }
}

#[cfg(test)]
pub(crate) use crate::batcher::REAL_ENGINE_GENERATE_TIMEOUT;

/// How much longer than an HTTP engine's request `timeout` the batcher's generate and stall
/// timeouts default to.
pub(crate) const HTTP_TIMEOUT_MARGIN: std::time::Duration = std::time::Duration::from_secs(30);

/// The batcher's backstop for an HTTP engine: its request `timeout` (the longest a derived one
/// can be, when none is set) and [`HTTP_TIMEOUT_MARGIN`].
pub(crate) fn http_backstop(timeout: Option<std::time::Duration>) -> std::time::Duration {
    timeout.unwrap_or(crate::engine::openai::config::TIMEOUT_CAP).saturating_add(HTTP_TIMEOUT_MARGIN)
}

/// `[batching]`; a real engine gets [`BatchConfig::with_real_engine_defaults`] for the timeouts
/// the scenario leaves unset. An HTTP engine's both default to its request `timeout` and
/// [`HTTP_TIMEOUT_MARGIN`], so its own timeout, which names the failure (`timeout`) and fails
/// only the batch, always comes first; the client's CPU time is no sign of a server's life.
/// `max_in_flight`'s and `batch_size`'s places are kept: whether the engine can take them is
/// `run::preflight`'s to say, for the plan's own engine only.
fn lower_batching(cx: &mut ReadContext, top: LocatedTable, engine: &EnginePlan, places: &mut Places) -> BatchConfig {
    let d = match engine {
        EnginePlan::Sim(_) => BatchConfig::default(),
        EnginePlan::OpenAi(c) => {
            let backstop = Some(http_backstop(c.timeout));
            let d = BatchConfig::default().with_generate_timeout(backstop).and_then(|d| d.with_stall_timeout(backstop));
            d.unwrap_or_default().with_real_engine_defaults()
        }
        EnginePlan::Vllm(_) | EnginePlan::Python(_) => BatchConfig::default().with_real_engine_defaults(),
    };
    let Some(t) = section(cx, top, "batching") else {
        return d;
    };
    let mut b = Batching::of(&d);
    keys::read(cx, t, keys::BATCHING_KEYS, &mut b);
    for key in ["max_in_flight", "batch_size"] {
        if let Some(field) = cx.field(t, key) {
            let place = cx.origin(&field.path, field.span()).short();
            places.0.push((field.path, place));
        }
    }
    // The ranges were checked above; this only fails if BatchConfig grows rules we do not know.
    let config = BatchConfig::new(b.batch_size, b.batch_timeout)
        .and_then(|c| c.with_generate_timeout(b.generate_timeout))
        .and_then(|c| c.with_stall_timeout(b.stall_timeout))
        .and_then(|c| c.with_max_in_flight(b.max_in_flight.unwrap_or(1)));
    match config {
        Ok(config) => config,
        Err(e) => {
            cx.report("batching", t.span(), format!("[batching]: {e}"), None);
            d
        }
    }
}

/// A vLLM engine with a calibrated profile (`engine.vllm.profile`) and no `stall_timeout` written:
/// the stall limit's floor becomes [`STALL_FACTOR`](crate::batcher::STALL_FACTOR) times the
/// profile's predicted generate of a full batch of the workload's longest requests, never below
/// the 30 s default. A file workload's lengths are not known before it is read: it keeps the
/// default. The same factor applies during the run to the longest generate measured.
fn stall_from_profile(
    cx: &mut ReadContext,
    top: LocatedTable,
    engine: &EnginePlan,
    workload: &crate::loadgen::WorkloadSpec,
    batching: BatchConfig,
) -> BatchConfig {
    let EnginePlan::Vllm(v) = engine else { return batching };
    let Some(path) = &v.profile else { return batching };
    // The tables were read (and their problems reported) already: only looked up here.
    fn table(item: Option<&toml_edit::Item>) -> Option<&dyn TableLike> {
        item.and_then(|i| i.as_table_like())
    }
    if table(top.table.get("batching")).is_some_and(|t| t.get("stall_timeout").is_some()) {
        return batching;
    }
    let profile = match load_profile(cx, path) {
        Ok(profile) => profile,
        Err(e) => {
            let vllm = table(top.table.get("engine")).and_then(|e| table(e.get("vllm")));
            let span = vllm
                .and_then(|table| cx.field(LocatedTable { path: "engine.vllm", table, at: None }, "profile"))
                .and_then(|f| f.span());
            let help = "profiles are written by `batchlab calibrate`; the path is relative to the scenario";
            cx.report("engine.vllm.profile", span, e.to_string(), Some(help.to_owned()));
            return batching;
        }
    };
    let Some(expected) = crate::engine::sim::predicted_generate(&profile, workload.longest(), batching.batch_size())
    else {
        return batching;
    };
    let floor = crate::batcher::REAL_ENGINE_STALL_TIMEOUT;
    let limit = floor.max(expected.saturating_mul(crate::batcher::STALL_FACTOR));
    batching.clone().with_stall_timeout(Some(limit)).unwrap_or(batching)
}

/// The variant a tagged section's tag chooses, and the keys of other variants it has (in the
/// table's order), each with the variants that take it.
fn choose_variant<S>(
    cx: &mut ReadContext,
    t: LocatedTable,
    tag: &keys::Key<Tag>,
    default: &'static str,
    variants: &'static [Variant<S>],
) -> (&'static Variant<S>, Vec<(String, Vec<&'static str>)>) {
    let mut chosen = Tag(default);
    keys::read(cx, t, std::slice::from_ref(tag), &mut chosen);
    let variant = keys::variant(variants, chosen.0);
    let foreign = t
        .table
        .iter()
        .map(|(key, _)| key)
        .filter(|key| *key != tag.name && !keys::names(variant.keys).any(|k| k == *key))
        .filter_map(|key| {
            let users: Vec<&str> =
                variants.iter().filter(|v| keys::names(v.keys).any(|k| k == key)).map(|v| v.name).collect();
            (!users.is_empty()).then(|| (key.to_owned(), users))
        })
        .collect();
    (variant, foreign)
}

/// `variant`'s plan with every key of `t` read into it, the keys named in `first` before the
/// others (the order in which problems of `--set`s are listed). A key of `first` that belongs to
/// another variant is still read as that variant reads it, so a bad value is reported too.
fn read_variant<S>(
    cx: &mut ReadContext,
    t: LocatedTable,
    variants: &'static [Variant<S>],
    variant: &Variant<S>,
    seed: u64,
    first: &[&str],
) -> S {
    let mut plan = (variant.default)(seed);
    let row = |v: &'static Variant<S>, name: &str| v.keys.iter().find(|k| k.name == name);
    for name in first {
        let Some(field) = cx.field(t, name) else { continue };
        match variant.keys.iter().find(|k| k.name == *name) {
            Some(key) => (key.read)(cx, &field, &mut plan),
            None => {
                if let Some((other, key)) = variants.iter().find_map(|v| row(v, name).map(|k| (v, k))) {
                    let mut scratch = (other.default)(seed);
                    (key.read)(cx, &field, &mut scratch);
                }
            }
        }
    }
    for key in variant.keys.iter().filter(|k| !first.contains(&k.name)) {
        if let Some(field) = cx.field(t, key.name) {
            (key.read)(cx, &field, &mut plan);
        }
    }
    plan
}

fn lower_workload(cx: &mut ReadContext, top: LocatedTable, seed: u64) -> WorkloadSpec {
    let variants = keys::WORKLOAD_VARIANTS;
    let Some(t) = section(cx, top, "workload") else {
        return (variants[0].default)(seed);
    };
    let (variant, foreign) = choose_variant(cx, t, &keys::WORKLOAD_TAG, "synthetic", variants);
    for (key, users) in foreign {
        if let Some(field) = cx.field(t, &key) {
            let message = format!("`{}` only applies with `workload.source = \"{}\"`", field.path, users[0]);
            cx.report_at(&field, message, None);
        }
    }
    for (key, example) in missing_required(cx, t, variant.keys) {
        let message = format!("missing `workload.{key}` (required with `workload.source = \"{}\"`)", variant.name);
        cx.report("workload", t.span(), message, Some(format!("add `{key} = {example}`")));
    }
    // The keys every source takes are read first.
    let shared: Vec<&str> = keys::names(variant.keys)
        .filter(|name| variants.iter().all(|v| keys::names(v.keys).any(|k| k == *name)))
        .collect();
    let plan = read_variant(cx, t, variants, variant, seed, &shared);
    check_chat_and_dataset(cx, t, &plan);
    plan
}

/// The rules between the chat and dataset keys of `[workload]`.
fn check_chat_and_dataset(cx: &mut ReadContext, t: LocatedTable, plan: &WorkloadSpec) {
    let needs = |cx: &mut ReadContext, key: &str, message: String, help: String| {
        if let Some(field) = cx.field(t, key) {
            cx.report_at(&field, message, Some(help));
        }
    };
    match plan {
        WorkloadSpec::Synthetic { chat, .. } if !chat.enabled => needs(
            cx,
            "system_prompt",
            "`workload.system_prompt` is set but `workload.chat` is false".to_owned(),
            "add `chat = true`: only chat prompts have a system turn".to_owned(),
        ),
        WorkloadSpec::Synthetic { .. } => {}
        WorkloadSpec::File { dataset, .. } => {
            let (format, fields) = match dataset.format {
                FileFormat::Jsonl => ("jsonl", Columns::JSONL_FIELDS),
                FileFormat::ShareGpt => ("sharegpt", Columns::SHAREGPT_FIELDS),
                FileFormat::Text => ("text", &[][..]),
            };
            for (name, _) in dataset.columns.renamed().filter(|(name, _)| !fields.contains(name)) {
                let help = match fields {
                    [] => format!("format \"{format}\" has no columns"),
                    _ => format!("format \"{format}\" reads: {}", fields.join(", ")),
                };
                let message = format!("`workload.columns.{name}` does not apply with `workload.format = \"{format}\"`");
                needs(cx, "columns", message, help);
            }
            if dataset.reply_max_tokens && dataset.format != FileFormat::ShareGpt {
                let message =
                    format!("`workload.reply_max_tokens` needs ShareGPT replies, but the format is \"{format}\"");
                needs(cx, "reply_max_tokens", message, "set `format = \"sharegpt\"` or remove it".to_owned());
            }
            if dataset.truncate && dataset.max_prompt_tokens.is_none() {
                let message = "`workload.truncate` is set but `workload.max_prompt_tokens` is not".to_owned();
                needs(cx, "truncate", message, "add `max_prompt_tokens = N`: the length to cut to".to_owned());
            }
            if let (Some(min), Some(max)) = (dataset.min_prompt_tokens, dataset.max_prompt_tokens)
                && min > max
            {
                let message = format!(
                    "`workload.min_prompt_tokens` ({min}) is greater than `workload.max_prompt_tokens` ({max})"
                );
                needs(cx, "min_prompt_tokens", message, "no prompt could pass both".to_owned());
            }
        }
    }
}

fn lower_profile(cx: &mut ReadContext, top: LocatedTable, seed: u64) -> ProfileSpec {
    let default = keys::variant(keys::PROFILE_VARIANTS, "throughput");
    let Some(t) = section(cx, top, "profile") else {
        return (default.default)(seed);
    };
    let (variant, foreign) = choose_variant(cx, t, &keys::PROFILE_TAG, default.name, keys::PROFILE_VARIANTS);
    let kind = variant.name;
    for (key, users) in foreign {
        if let Some(field) = cx.field(t, &key) {
            let message = format!("`profile.{key}` does not apply to profile kind `{kind}`");
            cx.report_at(&field, message, Some(format!("`{key}` is used by: {}", users.join(", "))));
        }
    }
    for (key, example) in missing_required(cx, t, variant.keys) {
        let message = format!("missing `profile.{key}` (required with kind = \"{kind}\")");
        cx.report("profile", t.span(), message, Some(format!("add `{key} = {example}`")));
    }
    // `max_concurrency` is read first, and checked even where it does not apply.
    read_variant(cx, t, keys::PROFILE_VARIANTS, variant, seed, &["max_concurrency"])
}

/// Benchmark names key the report, the CSV and the expectations: a profile whose steps share one
/// (`rates = [1, 1]`) is refused. Rates are named with as many digits as tell them apart, so
/// only equal rates collide. A sweep's rates are measured, and always distinct.
fn check_benchmark_names(cx: &mut ReadContext, top: LocatedTable, profile: &ProfileSpec) {
    let crate::loadgen::Expansion::Fixed(steps) = crate::loadgen::expand(profile) else { return };
    if let Some(name) = crate::loadgen::duplicate_name(&steps) {
        let field = cx.field(top, "profile");
        // At the list of rates or levels (a `[matrix]` value keeps its place in the file), else
        // at `[profile]`.
        let list = field
            .as_ref()
            .and_then(|f| f.node.table_like())
            .and_then(|t| ["rates", "levels"].iter().find_map(|k| t.get(k).and_then(|i| i.span())));
        let span = list.or_else(|| field.and_then(|f| f.span()));
        let message = format!("[profile] gives two benchmarks the same name `{name}`: each needs its own");
        cx.report("profile", span, message, Some("remove the repeated rate or level".to_owned()));
    }
}

/// A section with no rules between its keys: `s` with every key `[name]` has read into it.
fn simple_section<S>(
    cx: &mut ReadContext,
    top: LocatedTable,
    name: &'static str,
    keys: &[keys::Key<S>],
    mut s: S,
) -> S {
    if let Some(t) = section(cx, top, name) {
        keys::read(cx, t, keys, &mut s);
    }
    s
}

fn lower_stop(cx: &mut ReadContext, top: LocatedTable) -> StopPlan {
    let mut stop = simple_section(cx, top, "stop", keys::STOP_KEYS, StopPlan::default());
    // Only fill in the default when neither was written (a bad value already has its problem).
    let written = |key| cx_has(top, "stop", key);
    if stop.max_requests.is_none()
        && stop.max_duration.is_none()
        && !written("max_requests")
        && !written("max_duration")
    {
        stop.max_requests = Some(1000);
    }
    stop
}

fn cx_has(top: LocatedTable, section: &str, key: &str) -> bool {
    top.table.get(section).and_then(|s| s.as_table_like()).is_some_and(|s| s.contains_key(key))
}

fn lower_phase(cx: &mut ReadContext, top: LocatedTable, which: &'static str) -> Option<PhaseLimit> {
    let t = section(cx, top, which)?;
    let mut phase = Phase::default();
    keys::read(cx, t, keys::PHASE_KEYS, &mut phase);
    let (has_requests, has_duration) = (t.table.contains_key("requests"), t.table.contains_key("duration"));
    if has_requests && has_duration {
        let message = format!("[{which}] sets both `requests` and `duration`");
        cx.report(which, t.span(), message, Some("keep exactly one of the two".to_owned()));
    } else if !has_requests && !has_duration {
        let message = format!("[{which}] needs `requests` or `duration`");
        cx.report(which, t.span(), message, Some("e.g. `requests = 10` or `duration = \"5s\"`".to_owned()));
    }
    match (phase.requests, phase.duration) {
        // `requests = 0` switches the phase off (e.g. `--set warmup.requests=0`).
        (Some(0), None) => None,
        (Some(n), None) => Some(PhaseLimit::Requests(n)),
        (None, Some(d)) => Some(PhaseLimit::Duration(d)),
        _ => None,
    }
}

fn lower_expect(cx: &mut ReadContext, top: LocatedTable) -> Vec<Expectation> {
    let Some(field) = cx.field(top, "expect") else {
        return Vec::new();
    };
    let Some(table) = field.node.table_like() else {
        cx.report_at(&field, format!("`expect`: expected a table, found {}", field.node.type_name()), None);
        return Vec::new();
    };
    let names = expect::known_metrics();
    let mut out = Vec::new();
    for (metric, item) in table.iter() {
        let key_span = table.key(metric).and_then(|k| k.span());
        let f =
            Field { path: join("expect", metric), node: super::reader::Node::Item(item), key_span: key_span.clone() };
        if !expect::is_known_metric(metric) {
            let help = super::error::did_you_mean(metric, names.iter().map(String::as_str));
            cx.report(&f.path, key_span.clone(), format!("unknown metric `{metric}` in [expect]"), help);
            continue;
        }
        let condition = match item.as_value() {
            Some(Value::Integer(i)) => Ok((Comparison::Eq, *i.value() as f64)),
            Some(Value::Float(x)) if x.value().is_finite() => Ok((Comparison::Eq, *x.value())),
            Some(Value::String(s)) => expect::parse_condition(s.value()),
            _ => Err(format!("expected \"op value\" such as \">= 1000\" or a number, found {}", f.node.type_name())),
        };
        match condition {
            Ok((op, value)) => {
                let origin = cx.origin(&f.path, key_span.or_else(|| f.span())).short();
                out.push(Expectation { metric: metric.to_owned(), op, value, origin });
            }
            Err(message) => cx.report_at(&f, format!("`{}`: {message}", f.path), None),
        }
    }
    out
}

fn lower_output(cx: &mut ReadContext, top: LocatedTable) -> OutputPlan {
    simple_section(cx, top, "output", keys::OUTPUT_KEYS, OutputPlan::default())
}

/// The calibration profile at `path`, read through the source's files (read from disk once) as
/// `Profile::load` reads it.
fn load_profile(
    cx: &ReadContext,
    path: &std::path::Path,
) -> Result<crate::engine::sim::Profile, crate::engine::sim::ProfileError> {
    let text = cx
        .files
        .text(path)
        .map_err(|source| crate::engine::sim::ProfileError::Read { path: path.to_path_buf(), source })?;
    crate::engine::sim::Profile::parse(&text, path)
}
