//! A [`Plan`] printed back as a scenario file.
//!
//! Every value is written explicitly (derived seeds included), so `parse_str(&to_toml(&p), ..)`
//! gives `p` back, except for `Expectation::origin`, which names where the text was read. The
//! fuzz target and the round-trip proptest rely on this.

use toml_edit::{DocumentMut, Item, Table, TableLike, Value, value};

use super::keys::{self, Batching, Head, Phase, Tag};
use super::plan::*;

/// The scenario text of `plan`.
pub fn to_toml(plan: &Plan) -> String {
    document(plan).to_string()
}

/// What `batchlab check` prints: [`to_toml`], and the values the plan leaves to the machine it
/// runs on, as this one resolves them, each with a comment saying so: `engine.openai.threads`
/// is `cpus` (the CPUs batchlab may use, `sys::usable_cpus`) when unset. Neither the plan nor a
/// report carries them (a report is the same on any machine).
#[doc(hidden)]
pub fn to_toml_on(plan: &Plan, cpus: std::num::NonZeroUsize) -> String {
    let mut doc = document(plan);
    if let EnginePlan::OpenAi(openai) = &plan.engine
        && openai.threads.is_none()
        && let Some(table) = doc["engine"]["openai"].as_table_mut()
    {
        let mut threads = Value::from(i64::try_from(cpus.get()).unwrap_or(i64::MAX));
        threads.decor_mut().set_suffix(" # the default: the CPUs batchlab may use");
        table["threads"] = Item::Value(threads);
    }
    doc.to_string()
}

/// The resolved scenario as JSON: the tree [`to_toml`] prints (durations as `"10ms"`, every
/// default spelled out), each TOML value as its JSON value. What a report carries as `scenario`.
pub fn to_json(plan: &Plan) -> serde_json::Value {
    table_json(document(plan).as_table())
}

fn table_json(table: &dyn TableLike) -> serde_json::Value {
    let map = table.iter().filter_map(|(key, item)| Some((key.to_owned(), item_json(item)?))).collect();
    serde_json::Value::Object(map)
}

fn item_json(item: &Item) -> Option<serde_json::Value> {
    match item {
        Item::None => None,
        Item::Value(v) => Some(value_json(v)),
        Item::Table(t) => Some(table_json(t)),
        Item::ArrayOfTables(a) => Some(serde_json::Value::Array(a.iter().map(|t| table_json(t)).collect())),
    }
}

fn value_json(value: &Value) -> serde_json::Value {
    use serde_json::Value as Json;
    match value {
        Value::String(s) => Json::from(s.value().as_str()),
        Value::Integer(i) => Json::from(*i.value()),
        Value::Float(f) => Json::from(*f.value()),
        Value::Boolean(b) => Json::from(*b.value()),
        Value::Datetime(d) => Json::from(d.value().to_string()),
        Value::Array(a) => Json::Array(a.iter().map(value_json).collect()),
        Value::InlineTable(t) => table_json(t),
    }
}

/// The tree of `plan`'s scenario, every value written.
fn document(plan: &Plan) -> DocumentMut {
    let mut doc = DocumentMut::new();
    let head = Head { name: plan.name.clone(), description: plan.description.clone(), seed: plan.seed };
    keys::print(doc.as_table_mut(), keys::HEAD_KEYS, &head);

    doc["engine"] = Item::Table(engine_table(&plan.engine));

    let mut batching = Table::new();
    keys::print(&mut batching, keys::BATCHING_KEYS, &Batching::of(&plan.batching));
    doc["batching"] = Item::Table(batching);

    let mut workload = tagged(&keys::WORKLOAD_TAG, keys::WORKLOAD_VARIANTS, &plan.workload);
    super::embeddings::unprint_output_keys(&plan.engine, &mut workload);
    doc["workload"] = Item::Table(workload);
    if let WorkloadSpec::Synthetic { images: Some(images), .. } = &plan.workload {
        let mut t = Table::new();
        keys::print(&mut t, keys::IMAGE_KEYS, images);
        doc["workload"]["images"] = Item::Table(t);
    }
    if let Some(sessions) = &plan.sessions {
        let mut t = Table::new();
        keys::print(&mut t, keys::SESSION_KEYS, sessions);
        doc["workload"]["sessions"] = Item::Table(t);
    }
    doc["profile"] = Item::Table(tagged(&keys::PROFILE_TAG, keys::PROFILE_VARIANTS, &plan.profile));

    let mut stop = Table::new();
    keys::print(&mut stop, keys::STOP_KEYS, &plan.stop);
    doc["stop"] = Item::Table(stop);

    for (key, phase) in [("warmup", &plan.warmup), ("cooldown", &plan.cooldown)] {
        let Some(phase) = phase else { continue };
        let mut t = Table::new();
        keys::print(&mut t, keys::PHASE_KEYS, &Phase::of(phase));
        doc[key] = Item::Table(t);
    }

    let mut faults = Table::new();
    keys::print(&mut faults, keys::FAULT_KEYS, &plan.faults);
    doc["faults"] = Item::Table(faults);

    if plan.slo.is_set() {
        let mut slo = Table::new();
        keys::print(&mut slo, keys::SLO_KEYS, &plan.slo);
        doc["slo"] = Item::Table(slo);
    }

    if !plan.expect.is_empty() {
        let mut t = Table::new();
        for e in &plan.expect {
            t[e.metric.as_str()] = value(format!("{} {}", e.op.symbol(), e.value));
        }
        doc["expect"] = Item::Table(t);
    }

    if let Some(matrix) = &plan.matrix {
        let mut t = Table::new();
        for axis in &matrix.axes {
            if let Ok(list) = format!("[{}]", axis.values.join(", ")).parse::<Value>() {
                t.insert(&axis.key, Item::Value(list));
            }
        }
        doc["matrix"] = Item::Table(t);
    }

    let mut output = Table::new();
    keys::print(&mut output, keys::OUTPUT_KEYS, &plan.output);
    doc["output"] = Item::Table(output);
    doc
}

/// `[engine]` of `engine`: its kind and its kind's table.
fn engine_table(engine: &EnginePlan) -> Table {
    let mut table = Table::new();
    let mut t = Table::new();
    match engine {
        EnginePlan::Sim(sim) => {
            keys::print(&mut t, keys::SIM_KEYS, sim);
            keys::print(&mut t, keys::COST_KEYS, &sim.cost);
            if let Some(path) = &sim.profile {
                // A cost printed only when set (`DurUnlessZero`) is printed at 0 too when the
                // profile sets it (or cannot be read to say): the 0 overrides the profile's value.
                let mut from_profile = crate::engine::sim::CostModel::free();
                let readable = crate::engine::sim::Profile::load(path).map(|p| p.coefficients.apply(&mut from_profile));
                for key in keys::COST_KEYS.iter().filter(|k| (k.print)(&sim.cost).is_none()) {
                    if readable.is_err() || (key.print)(&from_profile).is_some() {
                        t[key.name] = value("0s");
                    }
                }
            }
            keys::print(&mut t, keys::SCHED_KEYS, &sim.scheduler);
        }
        EnginePlan::Vllm(v) => keys::print(&mut t, keys::VLLM_KEYS, v),
        EnginePlan::Python(p) => keys::print(&mut t, keys::PYTHON_KEYS, p),
        EnginePlan::OpenAi(c) => keys::print(&mut t, keys::OPENAI_KEYS, c),
    }
    let kind = engine.kind();
    keys::print(&mut table, keys::ENGINE_KEYS, &Tag(kind));
    table[kind] = Item::Table(t);
    table
}

/// `engine` as one value, for setting the whole `[engine]` section ([`Plan::with_engine`]).
pub(super) fn engine_value(engine: &EnginePlan) -> Value {
    Value::InlineTable(engine_table(engine).into_inline_table())
}

/// A tagged section: the tag, then the keys of the variant `s` is.
fn tagged<S>(tag: &keys::Key<Tag>, variants: &[keys::Variant<S>], s: &S) -> Table {
    let mut table = Table::new();
    if let Some(v) = variants.iter().find(|v| (v.is)(s)) {
        keys::print(&mut table, std::slice::from_ref(tag), &Tag(v.name));
        keys::print(&mut table, v.keys, s);
    }
    table
}
