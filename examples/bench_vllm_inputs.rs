//! Prints, as JSON, exactly what `batchlab run SCENARIO --set ...` would give vLLM: the
//! environment, the `LLM(...)` keyword arguments, and the token prompts of the warmup and the
//! measured requests. `scripts/bench_raw_vllm.py` reads it, so the raw vLLM side of
//! `just bench` runs the same engine settings on the same prompts. Needs no Python.
//!
//! `cargo run --example bench_vllm_inputs -- scenarios/vllm-cpu.toml --set batching.batch_size=32`

use std::path::PathBuf;
use std::process::ExitCode;

use batchlab::engine::Prompt;
use batchlab::loadgen::Workload;
use batchlab::scenario::plan::{EnginePlan, PhaseLimit};
use batchlab::scenario::{Overrides, load_file};
use serde_json::{Value, json};

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let Some(path) = args.next().map(PathBuf::from) else {
        eprintln!("usage: bench_vllm_inputs SCENARIO [--set key=value]...");
        return ExitCode::from(2);
    };
    let mut overrides = Overrides::default();
    while let Some(a) = args.next() {
        match (a.as_str(), args.next()) {
            ("--set", Some(kv)) => overrides = overrides.set(kv),
            _ => {
                eprintln!("unexpected argument {a}");
                return ExitCode::from(2);
            }
        }
    }
    let plan = match load_file(&path, &overrides) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let EnginePlan::Vllm(v) = &plan.engine() else {
        eprintln!("{} is not a vLLM scenario", path.display());
        return ExitCode::from(2);
    };
    let workload = match Workload::from_plan(plan.workload()) {
        Ok(w) => w,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let warmup = match plan.warmup() {
        Some(PhaseLimit::Requests(n)) => *n,
        None => 0,
        Some(PhaseLimit::Duration(_)) => {
            eprintln!("a warmup by duration has no fixed request count; use warmup.requests");
            return ExitCode::from(2);
        }
    };
    let Some(measured) = plan.stop().max_requests() else {
        eprintln!("the scenario needs stop.max_requests");
        return ExitCode::from(2);
    };
    // The batcher numbers a run's submits 0, 1, ..., and workload request k is the k-th: warmup first.
    let prompts = |ids: std::ops::Range<u64>| -> Vec<Value> {
        ids.map(|id| {
            let r = workload.request(id);
            let tokens = match r.prompt {
                Prompt::Tokens(t) => json!(t),
                Prompt::Text(s) => json!(s),
                Prompt::Chat(c) => json!(c.messages),
                other => panic!("no JSON form for the prompt {other:?}"),
            };
            json!({"prompt": tokens, "max_tokens": r.max_tokens, "min_tokens": r.min_tokens,
                   "ignore_eos": r.ignore_eos, "temperature": r.temperature})
        })
        .collect()
    };
    let engine = v.engine();
    let env: serde_json::Map<String, Value> =
        engine.environment().into_iter().map(|(k, v)| (k, Value::String(v))).collect();
    let out = json!({
        "scenario": plan.name(),
        "batch_size": plan.batching().batch_size(),
        "env": env,
        "kwargs": v.llm_kwargs(),
        "warmup": prompts(0..warmup),
        "measured": prompts(warmup..warmup + measured),
    });
    println!("{out}");
    ExitCode::SUCCESS
}
