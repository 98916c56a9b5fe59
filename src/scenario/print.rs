//! A [`Plan`] printed back as a scenario file.
//!
//! Every value is written explicitly (derived seeds included), so `parse_str(&to_toml(&p), ..)`
//! gives `p` back, except for `Expectation::origin`, which names where the text was read. The
//! fuzz target and the round-trip proptest rely on this.

use std::time::Duration;

use toml_edit::{Array, DocumentMut, InlineTable, Item, Table, Value, value};

use super::plan::*;
use super::units::format_duration;
use crate::engine::faults::{FAULT_KEYS, FaultValue};

/// Free-form keyword arguments as a table.
fn json_table(map: &serde_json::Map<String, serde_json::Value>) -> Item {
    let mut table = Table::new();
    for (k, j) in map {
        if let Some(x) = json_to_value(j) {
            table[k.as_str()] = value(x);
        }
    }
    Item::Table(table)
}

/// The scenario text of `plan`.
pub fn to_toml(plan: &Plan) -> String {
    let mut doc = DocumentMut::new();
    doc["name"] = value(plan.name.as_str());
    if let Some(description) = &plan.description {
        doc["description"] = value(description.as_str());
    }
    doc["seed"] = value(int(plan.seed));

    let mut engine = Table::new();
    match &plan.engine {
        EnginePlan::Sim(sim) => {
            engine["kind"] = value("sim");
            let mut t = Table::new();
            t["time"] = value(if sim.time == crate::engine::sim::TimeMode::Real { "real" } else { "virtual" });
            t["seed"] = value(int(sim.seed));
            t["fixed_overhead"] = duration(sim.cost.fixed_overhead);
            t["prefill_per_token"] = duration(sim.cost.prefill_per_token);
            t["decode_step"] = duration(sim.cost.decode_step);
            t["decode_per_seq"] = duration(sim.cost.decode_per_seq);
            t["max_num_seqs"] = value(int(sim.cost.max_num_seqs as u64));
            t["eos_probability"] = value(sim.cost.eos_probability);
            engine["sim"] = Item::Table(t);
        }
        EnginePlan::Vllm(v) => {
            engine["kind"] = value("vllm");
            let mut t = Table::new();
            t["model"] = value(v.model.to_string_lossy().as_ref());
            t["dtype"] = value(v.dtype.as_str());
            optional_u32(&mut t, "max_model_len", v.max_model_len);
            optional_u32(&mut t, "max_num_seqs", v.max_num_seqs);
            optional_u32(&mut t, "max_num_batched_tokens", v.max_num_batched_tokens);
            t["enforce_eager"] = value(v.enforce_eager);
            t["seed"] = value(int(v.seed));
            t["kv_cache_gib"] = value(v.kv_cache_gib);
            t["in_process"] = value(v.in_process);
            optional_u32(&mut t, "omp_num_threads", v.omp_num_threads);
            t["disable_log_stats"] = value(v.disable_log_stats);
            if !v.engine_args.is_empty() {
                t["engine_args"] = json_table(&v.engine_args);
            }
            engine["vllm"] = Item::Table(t);
        }
        EnginePlan::Python(p) => {
            engine["kind"] = value("python");
            let mut t = Table::new();
            t["class"] = value(p.class_spec());
            if let Some(path) = &p.path {
                t["path"] = value(path.to_string_lossy().as_ref());
            }
            if let Some(venv) = &p.venv {
                t["venv"] = value(venv.to_string_lossy().as_ref());
            }
            t["clock"] = value(if p.clock == crate::engine::ClockDomain::Foreign { "foreign" } else { "monotonic" });
            if !p.args.is_empty() {
                t["args"] = json_table(&p.args);
            }
            if !p.env.is_empty() {
                let mut env = Table::new();
                for (k, v) in &p.env {
                    env[k.as_str()] = value(v.as_str());
                }
                t["env"] = Item::Table(env);
            }
            engine["python"] = Item::Table(t);
        }
    }
    doc["engine"] = Item::Table(engine);

    let mut batching = Table::new();
    batching["batch_size"] = value(int(plan.batching.batch_size() as u64));
    batching["batch_timeout"] = duration(plan.batching.batch_timeout());
    if let Some(t) = plan.batching.generate_timeout() {
        batching["generate_timeout"] = duration(t);
    }
    doc["batching"] = Item::Table(batching);

    let mut workload = Table::new();
    match &plan.workload {
        WorkloadPlan::Synthetic {
            prompt_tokens,
            output_tokens,
            seed,
            unique_prefix,
            vocab_size,
            ignore_eos,
            temperature,
        } => {
            workload["source"] = value("synthetic");
            workload["prompt_tokens"] = value(token_dist(prompt_tokens));
            workload["output_tokens"] = value(token_dist(output_tokens));
            workload["seed"] = value(int(*seed));
            workload["unique_prefix"] = value(*unique_prefix);
            workload["vocab_size"] = value(i64::from(*vocab_size));
            workload["ignore_eos"] = value(*ignore_eos);
            workload["temperature"] = value(f64::from(*temperature));
        }
        WorkloadPlan::File { path, default_max_tokens, ignore_eos, temperature } => {
            workload["source"] = value("file");
            workload["path"] = value(path.to_string_lossy().as_ref());
            workload["default_max_tokens"] = value(i64::from(*default_max_tokens));
            workload["ignore_eos"] = value(*ignore_eos);
            workload["temperature"] = value(f64::from(*temperature));
        }
    }
    doc["workload"] = Item::Table(workload);

    let mut profile = Table::new();
    let concurrency = |t: &mut Table, c: Option<u32>| optional_u32(t, "max_concurrency", c);
    match &plan.profile {
        ProfilePlan::Synchronous => profile["kind"] = value("synchronous"),
        ProfilePlan::Concurrent { levels } => {
            profile["kind"] = value("concurrent");
            profile["levels"] = value(levels.iter().map(|l| i64::from(*l)).collect::<Array>());
        }
        ProfilePlan::Throughput { max_concurrency } => {
            profile["kind"] = value("throughput");
            concurrency(&mut profile, Some(*max_concurrency));
        }
        ProfilePlan::Constant { rates, max_concurrency } => {
            profile["kind"] = value("constant");
            profile["rates"] = value(rates.iter().copied().collect::<Array>());
            concurrency(&mut profile, *max_concurrency);
        }
        ProfilePlan::Poisson { rate, seed, max_concurrency } => {
            profile["kind"] = value("poisson");
            profile["rate"] = value(*rate);
            profile["seed"] = value(int(*seed));
            concurrency(&mut profile, *max_concurrency);
        }
        ProfilePlan::Sweep { rates, max_concurrency } => {
            profile["kind"] = value("sweep");
            profile["rates"] = value(i64::from(*rates));
            concurrency(&mut profile, Some(*max_concurrency));
        }
    }
    doc["profile"] = Item::Table(profile);

    let mut stop = Table::new();
    if let Some(n) = plan.stop.max_requests {
        stop["max_requests"] = value(int(n));
    }
    if let Some(d) = plan.stop.max_duration {
        stop["max_duration"] = duration(d);
    }
    if let Some(n) = plan.stop.max_errors {
        stop["max_errors"] = value(int(n));
    }
    if let Some(r) = plan.stop.max_error_rate {
        stop["max_error_rate"] = value(r);
    }
    doc["stop"] = Item::Table(stop);

    for (key, phase) in [("warmup", &plan.warmup), ("cooldown", &plan.cooldown)] {
        let mut t = Table::new();
        match phase {
            Some(PhaseLimit::Requests(n)) => t["requests"] = value(int(*n)),
            Some(PhaseLimit::Duration(d)) => t["duration"] = duration(*d),
            None => continue,
        }
        doc[key] = Item::Table(t);
    }

    let mut faults = Table::new();
    for key in FAULT_KEYS {
        if let Some(v) = fault_value(&(key.get)(&plan.faults)) {
            faults[key.name] = value(v);
        }
    }
    doc["faults"] = Item::Table(faults);

    if !plan.expect.is_empty() {
        let mut t = Table::new();
        for e in &plan.expect {
            t[e.metric.as_str()] = value(format!("{} {}", e.op.symbol(), e.value));
        }
        doc["expect"] = Item::Table(t);
    }

    let mut output = Table::new();
    if let Some(dir) = &plan.output.dir {
        output["dir"] = value(dir.to_string_lossy().as_ref());
    }
    output["requests_jsonl"] = value(plan.output.requests_jsonl);
    doc["output"] = Item::Table(output);

    doc.to_string()
}

/// TOML integers are i64; values beyond (only possible in plans not read from a file, such as
/// `CostModel::free()`'s unlimited `max_num_seqs`) saturate.
fn int(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

fn duration(d: Duration) -> Item {
    value(format_duration(d))
}

fn optional_u32(t: &mut Table, key: &str, v: Option<u32>) {
    if let Some(v) = v {
        t[key] = value(i64::from(v));
    }
}

/// A distribution as the DSL writes it (also what the builder sets).
pub(super) fn token_dist(d: &TokenDist) -> Value {
    let mut t = InlineTable::new();
    match d {
        TokenDist::Fixed { value } => return Value::from(i64::from(*value)),
        TokenDist::Uniform { min, max } => {
            t.insert("dist", "uniform".into());
            t.insert("min", i64::from(*min).into());
            t.insert("max", i64::from(*max).into());
        }
        TokenDist::Normal { mean, stdev, min, max } => {
            t.insert("dist", "normal".into());
            t.insert("mean", (*mean).into());
            t.insert("stdev", (*stdev).into());
            t.insert("min", i64::from(*min).into());
            t.insert("max", i64::from(*max).into());
        }
    }
    Value::InlineTable(t)
}

/// A `[faults]` value as the DSL writes it (also what the builder sets); `None` for a trigger
/// that never fires or an unset process fault, which are written by leaving the key out.
pub(super) fn fault_value(v: &FaultValue) -> Option<Value> {
    let mut t = InlineTable::new();
    match v {
        FaultValue::Trigger(trigger) => {
            if let Some(every) = trigger.every {
                t.insert("every", int(every).into());
            }
            if trigger.probability != 0.0 {
                t.insert("probability", trigger.probability.into());
            }
        }
        FaultValue::Process(Some(p)) => {
            t.insert("after_batches", int(p.after_batches).into());
        }
        FaultValue::Process(None) => {}
        FaultValue::Factor(f) => return Some((*f).into()),
        FaultValue::Duration(d) => return Some(format_duration(*d).into()),
        FaultValue::Flag(b) => return Some((*b).into()),
    }
    (!t.is_empty()).then_some(Value::InlineTable(t))
}

/// JSON back to TOML; `null` has no TOML form and is dropped (it cannot come from a file).
fn json_to_value(j: &serde_json::Value) -> Option<Value> {
    Some(match j {
        serde_json::Value::Null => return None,
        serde_json::Value::Bool(b) => (*b).into(),
        serde_json::Value::Number(n) => match n.as_i64() {
            Some(i) => i.into(),
            None => n.as_f64()?.into(),
        },
        serde_json::Value::String(s) => s.as_str().into(),
        serde_json::Value::Array(a) => Value::Array(a.iter().filter_map(json_to_value).collect()),
        serde_json::Value::Object(o) => {
            let mut t = InlineTable::new();
            for (k, v) in o {
                if let Some(v) = json_to_value(v) {
                    t.insert(k, v);
                }
            }
            Value::InlineTable(t)
        }
    })
}
