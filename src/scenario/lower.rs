//! From a parsed TOML tree to a validated [`Plan`], in one step.
//!
//! This is the only place that knows what the keys mean: defaults, ranges, and which settings
//! contradict each other. It reads everything even after a problem (falling back to defaults) so
//! the error lists every problem at once.

use std::path::{Path, PathBuf};

use toml_edit::{Table, TableLike, Value};

use super::expect;
use super::plan::*;
use super::reader::{Cx, Field, Low, Tbl, join};
use super::schema;
use crate::batcher::BatchConfig;
use crate::engine::ClockDomain;
use crate::engine::faults::{
    FAULT_KEYS, FaultKind, FaultTrigger, FaultValue, Faults, PROCESS_FAULT_KEYS, ProcessFault, TRIGGER_KEYS,
};
use crate::engine::python::PythonConfig;
use crate::engine::python::vllm::VllmConfig;
use crate::engine::sim::{CostModel, SimConfig, TimeMode};
use crate::rng::SplitMix64;

/// Seed streams of the components whose seed defaults to one derived from the master seed.
pub mod seed_stream {
    /// `engine.sim.seed`.
    pub const SIM: u64 = 1;
    /// `engine.vllm.seed`.
    pub const VLLM: u64 = 2;
    /// `workload.seed`.
    pub const WORKLOAD: u64 = 3;
    /// A poisson profile's `seed`.
    pub const POISSON: u64 = 4;
}

/// The default seed of a component: the first draw of `SplitMix64::derive(master, stream)`,
/// shifted right by one bit so that it fits a TOML integer.
pub fn derive_seed(master: u64, stream: u64) -> u64 {
    SplitMix64::derive(master, stream).next_u64() >> 1
}

/// What lowering needs besides the tree.
pub(crate) struct Context<'a> {
    /// The scenario's default name.
    pub stem: &'a str,
    /// Relative workload paths and model paths resolve against this.
    pub base_dir: &'a Path,
}

const U32_MAX: i64 = u32::MAX as i64;

pub(crate) fn lower(cx: &mut Cx, root: &Table, ctx: &Context) -> Plan {
    let top = Tbl { path: "", table: root as &dyn TableLike, at: None };
    cx.check_keys(top, schema::TOP);

    let name = match cx.field(top, "name") {
        Some(field) => match cx.string_of(&field) {
            Some(name) if name.trim().is_empty() => {
                cx.report_at(&field, "`name` must not be empty".to_owned(), None);
                ctx.stem.to_owned()
            }
            Some(name) => name,
            None => ctx.stem.to_owned(),
        },
        None => ctx.stem.to_owned(),
    };
    let description = cx.string(top, "description");
    let seed = cx.u64(top, "seed", 0).unwrap_or(0);

    let faults_table = cx.section(top, "faults", "faults", crate::engine::faults::fault_names());
    let faults = faults_table.map(|t| lower_faults(cx, t)).unwrap_or_default();
    let engine = lower_engine(cx, top, seed, ctx);
    check_process_faults(cx, faults_table, &engine);
    let batching = lower_batching(cx, top, !matches!(engine, EnginePlan::Sim(_)));
    let workload = lower_workload(cx, top, seed, ctx);
    let profile = lower_profile(cx, top, seed);
    let stop = lower_stop(cx, top);
    let warmup = lower_phase(cx, top, "warmup");
    let cooldown = lower_phase(cx, top, "cooldown");
    let expect = lower_expect(cx, top);
    let output = lower_output(cx, top);

    Plan {
        name,
        description,
        seed,
        engine,
        batching,
        workload,
        profile,
        stop,
        warmup,
        cooldown,
        faults,
        expect,
        output,
    }
}

fn lower_engine(cx: &mut Cx, top: Tbl, seed: u64, ctx: &Context) -> EnginePlan {
    let engine = cx.section(top, "engine", "engine", schema::ENGINE);
    let kind = engine.and_then(|e| cx.choice(e, "kind", &["sim", "vllm", "python"])).unwrap_or("sim");
    let sim = engine.and_then(|e| cx.section(e, "sim", "engine.sim", schema::SIM));
    let vllm = engine.and_then(|e| cx.section(e, "vllm", "engine.vllm", schema::VLLM));
    let python = engine.and_then(|e| cx.section(e, "python", "engine.python", schema::PYTHON));
    let engine_span = engine.and_then(|e| e.span());
    // A section for another kind than the chosen one contradicts it.
    for (name, section) in [("sim", sim), ("vllm", vllm), ("python", python)] {
        if let Some(t) = section.filter(|_| name != kind) {
            let help = format!("set `engine.kind = \"{name}\"` or remove [engine.{name}]");
            let message = format!("[engine.{name}] is set but `engine.kind` is \"{kind}\"");
            cx.report(&format!("engine.{name}"), t.span(), message, Some(help));
        }
    }
    match kind {
        "vllm" => return EnginePlan::Vllm(lower_vllm(cx, vllm, engine_span, seed, ctx)),
        "python" => return EnginePlan::Python(lower_python(cx, python, engine_span, ctx)),
        _ => {}
    }
    let defaults = CostModel::default();
    let mut plan =
        SimConfig { time: TimeMode::Virtual, seed: derive_seed(seed, seed_stream::SIM), cost: defaults.clone() };
    if let Some(t) = sim {
        if cx.choice(t, "time", &["virtual", "real"]) == Some("real") {
            plan.time = TimeMode::Real;
        }
        plan.seed = cx.u64(t, "seed", 0).unwrap_or(plan.seed);
        plan.cost = CostModel {
            fixed_overhead: cx.duration(t, "fixed_overhead", true).unwrap_or(defaults.fixed_overhead),
            prefill_per_token: cx.duration(t, "prefill_per_token", true).unwrap_or(defaults.prefill_per_token),
            decode_step: cx.duration(t, "decode_step", true).unwrap_or(defaults.decode_step),
            decode_per_seq: cx.duration(t, "decode_per_seq", true).unwrap_or(defaults.decode_per_seq),
            max_num_seqs: cx.int(t, "max_num_seqs", 1, i64::MAX).map_or(defaults.max_num_seqs, |v| v as usize),
            eos_probability: cx.float(t, "eos_probability", Low::AtLeast(0.0), 1.0).unwrap_or(defaults.eos_probability),
        };
    }
    EnginePlan::Sim(plan)
}

fn lower_vllm(
    cx: &mut Cx,
    t: Option<Tbl>,
    engine_span: Option<std::ops::Range<usize>>,
    seed: u64,
    ctx: &Context,
) -> VllmConfig {
    let mut plan = VllmConfig {
        model: PathBuf::new(),
        dtype: "float32".to_owned(),
        max_model_len: None,
        max_num_seqs: None,
        max_num_batched_tokens: None,
        enforce_eager: true,
        seed: derive_seed(seed, seed_stream::VLLM),
        kv_cache_gib: 1.0,
        in_process: true,
        omp_num_threads: None,
        disable_log_stats: false,
        engine_args: serde_json::Map::new(),
    };
    let Some(t) = t else {
        let help = "add [engine.vllm] with `model = \"path/to/model\"`".to_owned();
        cx.report(
            "engine",
            engine_span,
            "missing `engine.vllm.model` (required with `engine.kind = \"vllm\"`)".to_owned(),
            Some(help),
        );
        return plan;
    };
    match cx.string(t, "model") {
        Some(model) => plan.model = resolve_model(Path::new(&model), ctx.base_dir),
        None if cx.field(t, "model").is_none() => {
            let message = "missing `engine.vllm.model` (required with `engine.kind = \"vllm\"`)".to_owned();
            cx.report("engine.vllm", t.span(), message, Some("add `model = \"path/to/model\"`".to_owned()));
        }
        None => {}
    }
    plan.dtype = cx.string(t, "dtype").unwrap_or(plan.dtype);
    plan.max_model_len = cx.u32(t, "max_model_len", 1);
    plan.max_num_seqs = cx.u32(t, "max_num_seqs", 1);
    plan.max_num_batched_tokens = cx.u32(t, "max_num_batched_tokens", 1);
    plan.enforce_eager = cx.boolean(t, "enforce_eager").unwrap_or(true);
    plan.seed = cx.u64(t, "seed", 0).unwrap_or(plan.seed);
    plan.kv_cache_gib = cx.float(t, "kv_cache_gib", Low::Above(0.0), f64::INFINITY).unwrap_or(1.0);
    plan.in_process = cx.boolean(t, "in_process").unwrap_or(true);
    plan.omp_num_threads = cx.u32(t, "omp_num_threads", 1);
    plan.disable_log_stats = cx.boolean(t, "disable_log_stats").unwrap_or(false);
    plan.engine_args = free_form(cx, t, "engine_args");
    plan
}

/// A free-form table (`engine_args`, `args`) as JSON, for an engine to take unchanged; empty when
/// missing.
fn free_form(cx: &mut Cx, t: Tbl, key: &str) -> serde_json::Map<String, serde_json::Value> {
    let Some(field) = cx.field(t, key) else { return serde_json::Map::new() };
    match field.node.table_like() {
        Some(table) => table_to_json(cx, &field.path, table),
        None => {
            let message = format!("`{}`: expected a table, found {}", field.path, field.node.type_name());
            cx.report_at(&field, message, None);
            serde_json::Map::new()
        }
    }
}

fn lower_python(
    cx: &mut Cx,
    t: Option<Tbl>,
    engine_span: Option<std::ops::Range<usize>>,
    ctx: &Context,
) -> PythonConfig {
    let mut plan = PythonConfig::new("", "");
    let missing = "missing `engine.python.class` (required with `engine.kind = \"python\"`)".to_owned();
    let help = "write `class = \"module:Class\"` (docs/engines.md)".to_owned();
    let Some(t) = t else {
        cx.report("engine", engine_span, missing, Some(format!("add [engine.python] and {help}")));
        return plan;
    };
    match cx.field(t, "class") {
        None => cx.report("engine.python", t.span(), missing, Some(help)),
        Some(field) => {
            if let Some(spec) = cx.string_of(&field) {
                match parse_class_spec(&spec) {
                    Some((module, class)) => (plan.module, plan.class) = (module.to_owned(), class.to_owned()),
                    None => {
                        let message = format!("`engine.python.class`: expected \"module:Class\", found \"{spec}\"");
                        cx.report_at(&field, message, Some(help));
                    }
                }
            }
        }
    }
    // Relative to the scenario's directory; existence is checked when the engine starts.
    let beside = |p: String| {
        let p = PathBuf::from(p);
        if p.is_absolute() {
            return p;
        }
        let p = ctx.base_dir.join(p);
        std::path::absolute(&p).unwrap_or(p)
    };
    plan.path = cx.string(t, "path").map(beside);
    plan.venv = cx.string(t, "venv").map(beside);
    if cx.choice(t, "clock", &["monotonic", "foreign"]) == Some("foreign") {
        plan.clock = ClockDomain::Foreign;
    }
    plan.args = free_form(cx, t, "args");
    if let Some(field) = cx.field(t, "env") {
        match field.node.table_like() {
            Some(table) => {
                for (key, item) in table.iter() {
                    let value =
                        Field { path: join(&field.path, key), node: super::reader::Node::Item(item), key_span: None };
                    if let Some(v) = cx.string_of(&value) {
                        plan.env.insert(key.to_owned(), v);
                    }
                }
            }
            None => {
                let message = format!("`{}`: expected a table, found {}", field.path, field.node.type_name());
                cx.report_at(&field, message, None);
            }
        }
    }
    plan
}

/// `module:Class`: a dotted module path and a class name, both Python identifiers.
fn parse_class_spec(spec: &str) -> Option<(&str, &str)> {
    let identifier = |s: &str| {
        let mut chars = s.chars();
        chars.next().is_some_and(|c| c.is_alphabetic() || c == '_') && chars.all(|c| c.is_alphanumeric() || c == '_')
    };
    let (module, class) = spec.split_once(':')?;
    (module.split('.').all(identifier) && identifier(class)).then_some((module, class))
}

/// Absolute paths stay; a relative path is taken next to the scenario if it exists there, else
/// under `$BATCHLAB_HOME` (default `~/.cache/batchlab`). Existence is the engine's business.
fn resolve_model(model: &Path, base_dir: &Path) -> PathBuf {
    if model.is_absolute() {
        return model.to_owned();
    }
    let beside = base_dir.join(model);
    let chosen = if beside.exists() {
        beside
    } else if let Some(home) = std::env::var_os("BATCHLAB_HOME") {
        PathBuf::from(home).join(model)
    } else if let Some(home) = std::env::var_os("HOME") {
        PathBuf::from(home).join(".cache/batchlab").join(model)
    } else {
        beside
    };
    std::path::absolute(&chosen).unwrap_or(chosen)
}

fn table_to_json(cx: &mut Cx, path: &str, table: &dyn TableLike) -> serde_json::Map<String, serde_json::Value> {
    let mut map = serde_json::Map::new();
    for (key, item) in table.iter() {
        let field = Field { path: join(path, key), node: super::reader::Node::Item(item), key_span: None };
        let json = if let Some(sub) = item.as_table_like() {
            Some(serde_json::Value::Object(table_to_json(cx, &field.path, sub)))
        } else if let Some(value) = item.as_value() {
            value_to_json(cx, &field, value)
        } else {
            cx.report_at(&field, format!("`{}`: arrays of tables are not supported here", field.path), None);
            None
        };
        if let Some(json) = json {
            map.insert(key.to_owned(), json);
        }
    }
    map
}

fn value_to_json(cx: &mut Cx, field: &Field, value: &Value) -> Option<serde_json::Value> {
    Some(match value {
        Value::String(s) => serde_json::Value::String(s.value().clone()),
        Value::Integer(i) => serde_json::Value::from(*i.value()),
        Value::Float(f) => match serde_json::Number::from_f64(*f.value()) {
            Some(n) => serde_json::Value::Number(n),
            None => {
                cx.report_at(
                    field,
                    format!("`{}`: {} cannot be passed to the engine (not valid JSON)", field.path, f.value()),
                    None,
                );
                return None;
            }
        },
        Value::Boolean(b) => serde_json::Value::Bool(*b.value()),
        Value::Datetime(d) => serde_json::Value::String(d.value().to_string()),
        Value::Array(a) => serde_json::Value::Array(a.iter().filter_map(|v| value_to_json(cx, field, v)).collect()),
        Value::InlineTable(t) => serde_json::Value::Object(table_to_json(cx, &field.path, t)),
    })
}

/// `[faults]`, key by key from [`FAULT_KEYS`]: each key is read as the type its default has.
fn lower_faults(cx: &mut Cx, t: Tbl) -> Faults {
    let mut faults = Faults::default();
    for key in FAULT_KEYS {
        let Some(field) = cx.field(t, key.name) else { continue };
        let value = match key.default_value() {
            FaultValue::Trigger(_) => lower_trigger(cx, &field).map(FaultValue::Trigger),
            FaultValue::Factor(_) => cx.float_of(&field, Low::AtLeast(1.0), f64::INFINITY).map(FaultValue::Factor),
            FaultValue::Duration(_) => cx.duration(t, key.name, true).map(FaultValue::Duration),
            FaultValue::Flag(_) => cx.boolean(t, key.name).map(FaultValue::Flag),
            FaultValue::Process(_) => lower_process_fault(cx, &field).map(|p| FaultValue::Process(Some(p))),
        };
        if let Some(value) = value {
            (key.set)(&mut faults, value);
        }
    }
    faults
}

fn lower_trigger(cx: &mut Cx, field: &Field) -> Option<FaultTrigger> {
    let tt = cx.as_table(field, &field.path, TRIGGER_KEYS)?;
    if tt.table.get("every").is_none() && tt.table.get("probability").is_none() {
        let help = "write { every = N } and/or { probability = p }".to_owned();
        cx.report_at(field, format!("`{}` needs `every` and/or `probability`", field.path), Some(help));
    }
    Some(FaultTrigger {
        every: cx.u64(tt, "every", 1),
        probability: cx.float(tt, "probability", Low::AtLeast(0.0), 1.0).unwrap_or(0.0),
    })
}

fn lower_process_fault(cx: &mut Cx, field: &Field) -> Option<ProcessFault> {
    let tt = cx.as_table(field, &field.path, PROCESS_FAULT_KEYS)?;
    if tt.table.get("after_batches").is_none() {
        let help = "write { after_batches = N }: the kill lands during generate N + 1".to_owned();
        cx.report_at(field, format!("`{}` needs `after_batches`", field.path), Some(help));
    }
    Some(ProcessFault { after_batches: cx.u64(tt, "after_batches", 0)? })
}

/// Process faults kill a process of vLLM's multiprocess engine: any other engine has none.
fn check_process_faults(cx: &mut Cx, faults_table: Option<Tbl>, engine: &EnginePlan) {
    if matches!(engine, EnginePlan::Vllm(v) if !v.in_process) {
        return;
    }
    let Some(t) = faults_table else { return };
    for key in FAULT_KEYS.iter().filter(|k| k.kind == FaultKind::Process) {
        if let Some(field) = cx.field(t, key.name) {
            let message = format!(
                "`{}` kills a process of vLLM's multiprocess engine, but the engine is {}",
                field.path,
                match engine {
                    EnginePlan::Sim(_) => "the simulator",
                    EnginePlan::Vllm(_) => "vLLM in-process",
                    EnginePlan::Python(_) => "a Python protocol engine",
                }
            );
            let help = "use `engine.kind = \"vllm\"` with `engine.vllm.in_process = false`".to_owned();
            cx.report_at(&field, message, Some(help));
        }
    }
}

/// A real engine's default `generate_timeout`: no unbounded wait by default (docs/scenarios.md).
pub(crate) const REAL_ENGINE_GENERATE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(600);

fn lower_batching(cx: &mut Cx, top: Tbl, real_engine: bool) -> BatchConfig {
    let default_timeout = real_engine.then_some(REAL_ENGINE_GENERATE_TIMEOUT);
    let d = BatchConfig::default().with_generate_timeout(default_timeout).unwrap_or_default();
    let Some(t) = cx.section(top, "batching", "batching", schema::BATCHING) else {
        return d;
    };
    let batch_size = cx.int(t, "batch_size", 1, i64::MAX).map_or(d.batch_size(), |v| v as usize);
    let batch_timeout = cx.duration(t, "batch_timeout", false).unwrap_or(d.batch_timeout());
    let generate_timeout = cx.duration(t, "generate_timeout", false).or(default_timeout);
    // The ranges were checked above; this only fails if BatchConfig grows rules we do not know.
    match BatchConfig::new(batch_size, batch_timeout).and_then(|c| c.with_generate_timeout(generate_timeout)) {
        Ok(config) => config,
        Err(e) => {
            cx.report("batching", t.span(), format!("[batching]: {e}"), None);
            d
        }
    }
}

fn lower_workload(cx: &mut Cx, top: Tbl, seed: u64, ctx: &Context) -> WorkloadPlan {
    let derived = derive_seed(seed, seed_stream::WORKLOAD);
    let Some(t) = cx.section(top, "workload", "workload", schema::WORKLOAD) else {
        return WorkloadPlan::Synthetic {
            prompt_tokens: TokenDist::Fixed { value: 128 },
            output_tokens: TokenDist::Fixed { value: 64 },
            seed: derived,
            unique_prefix: true,
            vocab_size: 32000,
            ignore_eos: true,
            temperature: 0.0,
        };
    };
    let source = cx.choice(t, "source", &["synthetic", "file"]).unwrap_or("synthetic");
    let foreign = if source == "file" { schema::WORKLOAD_SYNTHETIC_ONLY } else { schema::WORKLOAD_FILE_ONLY };
    for key in foreign {
        if let Some(field) = cx.field(t, key) {
            let other = if source == "file" { "synthetic" } else { "file" };
            let message = format!("`{}` only applies with `workload.source = \"{other}\"`", field.path);
            cx.report_at(&field, message, None);
        }
    }
    let ignore_eos = cx.boolean(t, "ignore_eos").unwrap_or(true);
    let temperature = cx.float(t, "temperature", Low::AtLeast(0.0), f64::from(f32::MAX)).unwrap_or(0.0) as f32;
    if source == "file" {
        let path = match cx.field(t, "path") {
            None => {
                let message = "missing `workload.path` (required with `workload.source = \"file\"`)".to_owned();
                cx.report("workload", t.span(), message, Some("add `path = \"prompts.jsonl\"`".to_owned()));
                PathBuf::new()
            }
            Some(field) => match cx.string_of(&field) {
                None => PathBuf::new(),
                Some(written) => {
                    let joined = ctx.base_dir.join(&written);
                    let path = std::path::absolute(&joined).unwrap_or_else(|_| joined.clone());
                    if !path.is_file() {
                        let message = format!("workload file `{written}` not found (looked for {})", joined.display());
                        cx.report_at(&field, message, Some("paths are relative to the scenario file".to_owned()));
                    }
                    path
                }
            },
        };
        let default_max_tokens = cx.u32(t, "default_max_tokens", 1).unwrap_or(64);
        return WorkloadPlan::File { path, default_max_tokens, ignore_eos, temperature };
    }
    WorkloadPlan::Synthetic {
        prompt_tokens: token_dist(cx, t, "prompt_tokens").unwrap_or(TokenDist::Fixed { value: 128 }),
        output_tokens: token_dist(cx, t, "output_tokens").unwrap_or(TokenDist::Fixed { value: 64 }),
        seed: cx.u64(t, "seed", 0).unwrap_or(derived),
        unique_prefix: cx.boolean(t, "unique_prefix").unwrap_or(true),
        vocab_size: cx.u32(t, "vocab_size", 2).unwrap_or(32000),
        ignore_eos,
        temperature,
    }
}

fn token_dist(cx: &mut Cx, t: Tbl, key: &str) -> Option<TokenDist> {
    let field = cx.field(t, key)?;
    if field.node.value().is_some_and(Value::is_integer) {
        return cx.int_of(&field, 1, U32_MAX).map(|v| TokenDist::Fixed { value: v as u32 });
    }
    let Some(table) = field.node.table_like() else {
        let message = format!(
            "`{}`: expected an integer or a table such as {{ dist = \"uniform\", min = 64, max = 256 }}, found {}",
            field.path,
            field.node.type_name()
        );
        cx.report_at(&field, message, None);
        return None;
    };
    let path = if key == "prompt_tokens" { "workload.prompt_tokens" } else { "workload.output_tokens" };
    let d = Tbl { path, table, at: field.span().map(|r| (r.start, r.end)) };
    let Some(dist) = cx.choice(d, "dist", &["fixed", "uniform", "normal"]) else {
        if cx.field(d, "dist").is_none() {
            let help = "add `dist = \"uniform\"` (or \"normal\", \"fixed\")".to_owned();
            cx.report_at(&field, format!("`{path}`: missing `dist`"), Some(help));
        }
        return None;
    };
    let keys: &[&str] = match dist {
        "fixed" => &["dist", "value"],
        "uniform" => &["dist", "min", "max"],
        _ => &["dist", "mean", "stdev", "min", "max"],
    };
    cx.check_keys(d, keys);
    let required_u32 = |cx: &mut Cx, k: &str| {
        if cx.field(d, k).is_none() {
            cx.report_at(&field, format!("`{path}`: missing `{k}` (required with dist = \"{dist}\")"), None);
        }
        cx.u32(d, k, 1)
    };
    if dist == "fixed" {
        return required_u32(cx, "value").map(|value| TokenDist::Fixed { value });
    }
    let (mean, stdev) = if dist == "normal" {
        let required_f64 = |cx: &mut Cx, k: &str| {
            if cx.field(d, k).is_none() {
                cx.report_at(&field, format!("`{path}`: missing `{k}` (required with dist = \"normal\")"), None);
            }
            cx.float(d, k, Low::AtLeast(0.0), f64::INFINITY)
        };
        (required_f64(cx, "mean"), required_f64(cx, "stdev"))
    } else {
        (Some(0.0), Some(0.0))
    };
    let (min, max) = (required_u32(cx, "min"), required_u32(cx, "max"));
    let (min, max, mean, stdev) = (min?, max?, mean?, stdev?);
    if min > max {
        cx.report_at(&field, format!("`{path}`: `min` ({min}) is greater than `max` ({max})"), None);
        return None;
    }
    Some(if dist == "uniform" { TokenDist::Uniform { min, max } } else { TokenDist::Normal { mean, stdev, min, max } })
}

fn lower_profile(cx: &mut Cx, top: Tbl, seed: u64) -> ProfilePlan {
    let Some(t) = cx.section(top, "profile", "profile", schema::PROFILE) else {
        return ProfilePlan::Throughput { max_concurrency: 256 };
    };
    let kind = cx.choice(t, "kind", schema::PROFILE_KINDS).unwrap_or("throughput");
    let applicable = schema::profile_keys(kind);
    for (key, _) in t.table.iter() {
        if key == "kind" || applicable.contains(&key) || !schema::PROFILE.contains(&key) {
            continue;
        }
        let users: Vec<&str> =
            schema::PROFILE_KINDS.iter().copied().filter(|k| schema::profile_keys(k).contains(&key)).collect();
        if let Some(field) = cx.field(t, key) {
            let message = format!("`profile.{key}` does not apply to profile kind `{kind}`");
            cx.report_at(&field, message, Some(format!("`{key}` is used by: {}", users.join(", "))));
        }
    }
    let max_concurrency = cx.u32(t, "max_concurrency", 1);
    let required = |cx: &mut Cx, key: &str, example: &str| {
        let field = cx.field(t, key);
        if field.is_none() {
            let message = format!("missing `profile.{key}` (required with kind = \"{kind}\")");
            cx.report("profile", t.span(), message, Some(format!("add `{key} = {example}`")));
        }
        field
    };
    match kind {
        "synchronous" => ProfilePlan::Synchronous,
        "concurrent" => {
            let levels = required(cx, "levels", "[1, 4, 16]")
                .and_then(|f| positive_list(cx, &f, |cx, e| cx.int_of(e, 1, U32_MAX).map(|v| v as u32)))
                .unwrap_or_default();
            ProfilePlan::Concurrent { levels }
        }
        "constant" => {
            let rates = required(cx, "rates", "[10.0, 20.0]")
                .and_then(|f| positive_list(cx, &f, |cx, e| cx.float_of(e, Low::Above(0.0), f64::INFINITY)))
                .unwrap_or_default();
            ProfilePlan::Constant { rates, max_concurrency }
        }
        "poisson" => {
            let rate = required(cx, "rate", "50.0")
                .and_then(|f| cx.float_of(&f, Low::Above(0.0), f64::INFINITY))
                .unwrap_or(1.0);
            let seed = cx.u64(t, "seed", 0).unwrap_or(derive_seed(seed, seed_stream::POISSON));
            ProfilePlan::Poisson { rate, seed, max_concurrency }
        }
        "sweep" => {
            let rates = match cx.field(t, "rates") {
                Some(f) if f.node.value().is_some_and(Value::is_array) => {
                    let message = "`profile.rates`: with kind = \"sweep\" expected an integer (how many rates \
                                   between the synchronous and throughput rates), found an array"
                        .to_owned();
                    cx.report_at(&f, message, Some("for a list of rates use kind = \"constant\"".to_owned()));
                    5
                }
                Some(f) => cx.int_of(&f, 1, U32_MAX).map_or(5, |v| v as u32),
                None => 5,
            };
            ProfilePlan::Sweep { rates, max_concurrency: max_concurrency.unwrap_or(256) }
        }
        _ => ProfilePlan::Throughput { max_concurrency: max_concurrency.unwrap_or(256) },
    }
}

/// A non-empty array whose elements all pass `element`.
fn positive_list<T>(cx: &mut Cx, field: &Field, element: impl Fn(&mut Cx, &Field) -> Option<T>) -> Option<Vec<T>> {
    let elements = cx.array(field)?;
    if elements.is_empty() {
        cx.report_at(field, format!("`{}` must not be empty", field.path), None);
        return None;
    }
    let values: Vec<Option<T>> = elements.iter().map(|e| element(cx, e)).collect();
    values.into_iter().collect()
}

fn lower_stop(cx: &mut Cx, top: Tbl) -> StopPlan {
    let mut stop = StopPlan::default();
    if let Some(t) = cx.section(top, "stop", "stop", schema::STOP) {
        stop.max_requests = cx.u64(t, "max_requests", 1);
        stop.max_duration = cx.duration(t, "max_duration", false);
        stop.max_errors = cx.u64(t, "max_errors", 0);
        stop.max_error_rate = cx.float(t, "max_error_rate", Low::AtLeast(0.0), 1.0);
    }
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

fn cx_has(top: Tbl, section: &str, key: &str) -> bool {
    top.table.get(section).and_then(|s| s.as_table_like()).is_some_and(|s| s.contains_key(key))
}

fn lower_phase(cx: &mut Cx, top: Tbl, which: &'static str) -> Option<PhaseLimit> {
    let t = cx.section(top, which, which, schema::PHASE)?;
    let requests = cx.u64(t, "requests", 1);
    let duration = cx.duration(t, "duration", false);
    let (has_requests, has_duration) = (t.table.contains_key("requests"), t.table.contains_key("duration"));
    if has_requests && has_duration {
        let message = format!("[{which}] sets both `requests` and `duration`");
        cx.report(which, t.span(), message, Some("keep exactly one of the two".to_owned()));
    } else if !has_requests && !has_duration {
        let message = format!("[{which}] needs `requests` or `duration`");
        cx.report(which, t.span(), message, Some("e.g. `requests = 10` or `duration = \"5s\"`".to_owned()));
    }
    match (requests, duration) {
        (Some(n), None) => Some(PhaseLimit::Requests(n)),
        (None, Some(d)) => Some(PhaseLimit::Duration(d)),
        _ => None,
    }
}

fn lower_expect(cx: &mut Cx, top: Tbl) -> Vec<Expectation> {
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

fn lower_output(cx: &mut Cx, top: Tbl) -> OutputPlan {
    let Some(t) = cx.section(top, "output", "output", schema::OUTPUT) else {
        return OutputPlan::default();
    };
    OutputPlan {
        dir: cx.string(t, "dir").map(PathBuf::from),
        requests_jsonl: cx.boolean(t, "requests_jsonl").unwrap_or(false),
    }
}
