//! Data-driven tests of the DSL: text in, plan (or problem list) out, plus the round trip.

use std::path::{Path, PathBuf};
use std::time::Duration;

use proptest::prelude::*;

use super::plan::*;
use super::*;
use crate::engine::ResolvedEngineConfig;
use crate::engine::faults::{FaultTrigger, Faults, ProcessFault};
use crate::engine::openai::{Api, OpenAiConfig, Routing};
use crate::engine::python::PythonConfig;
use crate::engine::python::vllm::VllmConfig;
use crate::engine::sim::{CostModel, SimConfig, TimeMode};

fn manifest_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn parse(input: &str, sets: &[&str]) -> Result<Plan, ScenarioError> {
    let overrides = Overrides { sets: sets.iter().map(|s| (*s).to_owned()).collect(), seed: None };
    parse_str(input, "test.toml", manifest_dir(), &overrides)
}

/// A valid scenario: `inspect` spot-checks the plan.
fn check(input: &str, inspect: impl FnOnce(&Plan)) {
    match parse(input, &[]) {
        Ok(plan) => inspect(&plan),
        Err(e) => panic!("expected a plan, got:\n{e}"),
    }
}

/// An invalid scenario (with `--set`s): the messages of all problems, in order.
fn check_problems(input: &str, sets: &[&str], expected: &[&str]) {
    match parse(input, sets) {
        Ok(plan) => panic!("expected problems, got {plan:#?}"),
        Err(e) => {
            let messages: Vec<&str> = e.problems.iter().map(|p| p.message.as_str()).collect();
            assert_eq!(messages, expected, "\n{e}");
        }
    }
}

#[test]
fn empty_file_gives_all_defaults() {
    check("", |p| {
        assert_eq!(p.name, "test");
        assert_eq!(p.seed, 0);
        let EnginePlan::Sim(sim) = &p.engine else { panic!("{:?}", p.engine) };
        assert_eq!(sim.time, TimeMode::Virtual);
        assert_eq!(sim.cost, CostModel::default());
        assert_eq!(p.faults, Faults::default());
        assert_eq!(sim.seed, derive_seed(0, seed_stream::SIM));
        assert_eq!(p.batching, crate::batcher::BatchConfig::default());
        assert_eq!(p.profile, ProfileSpec::Throughput { max_concurrency: 256 });
        assert_eq!(p.stop, StopPlan { max_requests: Some(1000), ..StopPlan::default() });
        let WorkloadSpec::Synthetic { prompt_tokens, output_tokens, vocab_size, unique_prefix, .. } = &p.workload
        else {
            panic!()
        };
        assert_eq!(*prompt_tokens, TokenDist::Fixed { value: 128 });
        assert_eq!(*output_tokens, TokenDist::Fixed { value: 64 });
        assert_eq!((*vocab_size, *unique_prefix), (32000, true));
        assert!(p.expect.is_empty() && p.warmup.is_none() && p.output == OutputPlan::default());
    });
}

#[test]
fn valid_files() {
    check(
        r#"
name = "x"
seed = 9
[engine.sim]
time = "real"
decode_step = "1.5ms"
[batching]
batch_size = 8
batch_timeout = "5ms"
generate_timeout = "30s"
[workload]
prompt_tokens = { dist = "uniform", min = 64, max = 256 }
output_tokens = { dist = "normal", mean = 128, stdev = 32.0, min = 16, max = 512 }
[profile]
kind = "concurrent"
levels = [1, 4, 16]
[stop]
max_duration = "60s"
[warmup]
duration = "5s"
[faults]
fail_batch = { every = 7 }
slow = { probability = 0.1, every = 3 }
[expect]
completed = "== 256"
errors = 0
ttft_p99_ms = "<= 50.5"
"#,
        |p| {
            assert_eq!((p.name.as_str(), p.seed), ("x", 9));
            let EnginePlan::Sim(sim) = &p.engine else { panic!() };
            assert_eq!(sim.time, TimeMode::Real);
            assert_eq!(sim.cost.decode_step, Duration::from_micros(1500));
            assert_eq!(sim.seed, derive_seed(9, seed_stream::SIM));
            assert_eq!(p.faults.fail_batch, FaultTrigger::every(7));
            assert_eq!(p.faults.slow, FaultTrigger { every: Some(3), probability: 0.1 });
            assert_eq!(p.batching.batch_size(), 8);
            assert_eq!(p.batching.generate_timeout(), Some(Duration::from_secs(30)));
            let WorkloadSpec::Synthetic { prompt_tokens, output_tokens, .. } = &p.workload else { panic!() };
            assert_eq!(*prompt_tokens, TokenDist::Uniform { min: 64, max: 256 });
            assert_eq!(*output_tokens, TokenDist::Normal { mean: 128.0, stdev: 32.0, min: 16, max: 512 });
            assert_eq!(p.profile, ProfileSpec::Concurrent { levels: vec![1, 4, 16], rampup: None });
            // An explicit max_duration means no default max_requests.
            assert_eq!(p.stop, StopPlan { max_duration: Some(Duration::from_secs(60)), ..StopPlan::default() });
            assert_eq!(p.warmup, Some(PhaseLimit::Duration(Duration::from_secs(5))));
            let expect: Vec<_> =
                p.expect.iter().map(|e| (e.metric.as_str(), e.op, e.value, e.origin.as_str())).collect();
            assert_eq!(
                expect,
                [
                    ("completed", Comparison::Eq, 256.0, "test.toml:25:1"),
                    ("errors", Comparison::Eq, 0.0, "test.toml:26:1"),
                    ("ttft_p99_ms", Comparison::Le, 50.5, "test.toml:27:1"),
                ]
            );
        },
    );
    check(
        "[engine]\nkind = \"vllm\"\n[engine.vllm]\nmodel = \"/m/tiny\"\n[engine.vllm.engine_args]\ntp = 2\nx = { y = [1, \"a\"] }",
        |p| {
            let EnginePlan::Vllm(v) = &p.engine else { panic!() };
            assert_eq!(v.model, PathBuf::from("/m/tiny"));
            assert_eq!((v.dtype.as_str(), v.enforce_eager, v.kv_cache_gib, v.in_process), ("float32", true, 1.0, true));
            assert_eq!(
                serde_json::Value::Object(v.engine_args.clone()),
                serde_json::json!({"tp": 2, "x": {"y": [1, "a"]}})
            );
        },
    );
    check(
        "[engine]\nkind = \"python\"\n[engine.python]\nclass = \"engines.echo:Echo\"\npath = \"engines\"\n\
         [engine.python.args]\nmodel = \"m\"\nthreads = 1\n[engine.python.env]\nOMP_NUM_THREADS = \"1\"",
        |p| {
            let EnginePlan::Python(py) = &p.engine else { panic!() };
            assert_eq!((py.module.as_str(), py.class.as_str()), ("engines.echo", "Echo"));
            assert_eq!(py.path, Some(manifest_dir().join("engines")), "relative to the scenario's directory");
            assert_eq!((py.venv.as_ref(), py.clock), (None, crate::engine::ClockDomain::Monotonic));
            assert_eq!(serde_json::Value::Object(py.args.clone()), serde_json::json!({"model": "m", "threads": 1}));
            assert_eq!(py.env.get("OMP_NUM_THREADS").map(String::as_str), Some("1"));
        },
    );
    check("[workload]\nsource = \"file\"\npath = \"Cargo.toml\"", |p| {
        let WorkloadSpec::File { path, default_max_tokens, .. } = &p.workload else { panic!() };
        assert!(path.is_absolute() && path.ends_with("Cargo.toml"));
        assert_eq!(*default_max_tokens, 64);
    });
    check("[profile]\nkind = \"sweep\"", |p| {
        assert_eq!(p.profile, ProfileSpec::Sweep { rates: 5, max_concurrency: 256 })
    });
    check("seed = 5\n[profile]\nkind = \"poisson\"\nrate = 50", |p| {
        let seed = derive_seed(5, seed_stream::POISSON);
        assert_eq!(p.profile, ProfileSpec::Poisson { rate: 50.0, seed, max_concurrency: None, rampup: None });
    });
    check("[profile]\nkind = \"constant\"\nrates = [10, 20.5]\nmax_concurrency = 4", |p| {
        let want = ProfileSpec::Constant { rates: vec![10.0, 20.5], max_concurrency: Some(4), rampup: None };
        assert_eq!(p.profile, want);
    });
    check("seed = 5\n[profile]\nkind = \"gamma\"\nrate = 50\nburstiness = 0.5\nrampup = \"30s\"", |p| {
        let seed = derive_seed(5, seed_stream::GAMMA);
        let rampup = Some(Duration::from_secs(30));
        assert_eq!(p.profile, ProfileSpec::Gamma { rate: 50.0, burstiness: 0.5, seed, max_concurrency: None, rampup });
    });
    check("[profile]\nkind = \"gamma\"\nrate = 2", |p| {
        assert!(matches!(p.profile, ProfileSpec::Gamma { burstiness: 1.0, rampup: None, .. }), "k = 1: Poisson");
    });
    check("[profile]\nkind = \"concurrent\"\nlevels = [4]\nrampup = \"2s\"", |p| {
        assert_eq!(p.profile, ProfileSpec::Concurrent { levels: vec![4], rampup: Some(Duration::from_secs(2)) });
    });
    check(
        "[workload]\nsource = \"file\"\npath = \"scenarios/data/trace-sample.jsonl\"\n[profile]\nkind = \"trace\"\ntime_scale = 2",
        |p| {
            let ProfileSpec::Trace { time_scale, arrivals, max_concurrency } = &p.profile else { panic!() };
            assert_eq!((*time_scale, *max_concurrency), (2.0, None));
            assert_eq!(arrivals.len(), 40, "read from the file when the scenario is loaded");
            assert_eq!(arrivals.offsets()[..3], [0.0, 0.1, 0.3]);
        },
    );
    check("[workload]\nprompt_tokens = 64\nprefix_groups = 3\nprefix_tokens = 48", |p| {
        let WorkloadSpec::Synthetic { prefix_groups, prefix_tokens, .. } = p.workload else { panic!() };
        assert_eq!((prefix_groups, prefix_tokens), (3, 48));
    });
}

#[test]
fn generate_timeout_defaults_to_ten_minutes_on_a_real_engine_only() {
    let vllm = "[engine]\nkind = \"vllm\"\n[engine.vllm]\nmodel = \"m\"\n";
    let real_default = Some(lower::REAL_ENGINE_GENERATE_TIMEOUT);
    assert_eq!(real_default, Some(Duration::from_secs(600)));
    check("", |p| assert_eq!(p.batching.generate_timeout(), None));
    check("[batching]\nbatch_size = 4\n", |p| assert_eq!(p.batching.generate_timeout(), None));
    check(vllm, |p| assert_eq!(p.batching.generate_timeout(), real_default));
    check(&format!("{vllm}[batching]\nbatch_size = 4\n"), |p| assert_eq!(p.batching.generate_timeout(), real_default));
    check(&format!("{vllm}[batching]\ngenerate_timeout = \"5s\"\n"), |p| {
        assert_eq!(p.batching.generate_timeout(), Some(Duration::from_secs(5)))
    });
}

#[test]
fn stall_timeout_defaults_to_thirty_seconds_on_a_real_engine_only() {
    let python = "[engine]\nkind = \"python\"\n[engine.python]\nclass = \"m:C\"\n";
    let real_default = Some(Duration::from_secs(30));
    assert_eq!(Some(crate::batcher::REAL_ENGINE_STALL_TIMEOUT), real_default);
    check("", |p| assert_eq!(p.batching.stall_timeout(), None));
    check(python, |p| assert_eq!(p.batching.stall_timeout(), real_default));
    check(&format!("{python}[batching]\nstall_timeout = \"2s\"\n"), |p| {
        assert_eq!(p.batching.stall_timeout(), Some(Duration::from_secs(2)))
    });
    check("[batching]\nstall_timeout = \"1s\"\n", |p| {
        assert_eq!(p.batching.stall_timeout(), Some(Duration::from_secs(1)))
    });
}

#[test]
fn a_calibrated_profile_sets_the_stall_default_from_a_full_batchs_predicted_generate() {
    let vllm =
        "[engine]\nkind = \"vllm\"\n[engine.vllm]\nmodel = \"/m\"\nprofile = \"scenarios/profiles/example.toml\"\n";
    let long = "[workload]\nprompt_tokens = 16\noutput_tokens = 2000\n[batching]\nbatch_size = 8\n";
    let profile = crate::engine::sim::Profile::load(&manifest_dir().join("scenarios/profiles/example.toml")).unwrap();
    // 2,000 decode steps of 8 sequences at the example's ~5.6 ms a step: over 10 s, so 4x is past the floor.
    let expected = crate::engine::sim::predicted_generate(&profile, Some((16, 2000)), 8).unwrap();
    assert!(expected > Duration::from_secs(10) && expected < Duration::from_secs(20), "{expected:?}");
    check(&format!("{vllm}{long}"), |p| assert_eq!(p.batching.stall_timeout(), Some(expected * 4)));
    // A short batch: the 30 s floor.
    check(&format!("{vllm}[workload]\nprompt_tokens = 16\noutput_tokens = 16\n"), |p| {
        assert_eq!(p.batching.stall_timeout(), Some(crate::batcher::REAL_ENGINE_STALL_TIMEOUT))
    });
    // Written by the user: kept.
    check(&format!("{vllm}{long}stall_timeout = \"7s\"\n"), |p| {
        assert_eq!(p.batching.stall_timeout(), Some(Duration::from_secs(7)))
    });
    // A profile that is not there: a problem at the key.
    let missing = vllm.replace("example.toml", "missing.toml");
    match parse(&missing, &[]) {
        Ok(_) => panic!("a missing profile is a problem"),
        Err(e) => {
            let p = &e.problems[0];
            assert!(p.message.contains("missing.toml"), "{e}");
            // At the `profile = ...` line (the fifth), not only the file.
            assert!(matches!(p.origin, error::Origin::Source { line: 5, .. }), "{e}");
        }
    }
}

#[test]
fn overrides_apply_before_validation() {
    let plan = parse(
        "[batching]\nbatch_size = 4",
        &[
            "batching.batch_size=64",
            "batching.batch_timeout=2ms",
            "profile.kind=\"concurrent\"",
            "profile.levels=[1,2]",
        ],
    )
    .unwrap();
    assert_eq!(plan.batching.batch_size(), 64);
    assert_eq!(plan.batching.batch_timeout(), Duration::from_millis(2));
    assert_eq!(plan.profile, ProfileSpec::Concurrent { levels: vec![1, 2], rampup: None });
    let overrides = Overrides { sets: vec![], seed: Some(77) };
    assert_eq!(parse_str("seed = 1", "t.toml", manifest_dir(), &overrides).unwrap().seed, 77);
}

/// A cost key an older batchlab had: the file and `--set` are told its new name and why, not a
/// near miss (`decode_per_seq` is closest to `decode_step`).
#[test]
fn a_renamed_key_names_its_new_name() {
    for (input, sets) in
        [("[engine.sim]\ndecode_per_seq = \"20us\"", &[][..]), ("", &["engine.sim.decode_per_seq=20us"][..])]
    {
        let e = parse(input, sets).expect_err("an old key");
        let [problem] = e.problems.as_slice() else { panic!("one problem expected:\n{e}") };
        assert!(problem.message.contains("unknown key `") && problem.message.contains("decode_per_seq`"), "{e}");
        let help = problem.help.as_deref().unwrap_or_default();
        assert!(help.starts_with("`decode_per_seq` was renamed to `per_seq`: "), "{help}");
    }
}

#[test]
fn problems() {
    check_problems("[batching]\nbatch_sise = 3", &[], &["unknown key `batch_sise` in [batching]"]);
    check_problems(
        "[batching]\nbatch_size = \"32\"\nbatch_timeout = 10",
        &[],
        &[
            "`batching.batch_size`: expected an integer, found a string",
            "`batching.batch_timeout`: expected a duration such as \"10ms\", found an integer",
        ],
    );
    check_problems(
        "[engine]\nkind = \"sim\"\n[engine.vllm]\nmodel = \"m\"\n[workload]\nprompt_tokens = { dist = \"uniform\", min = 9, max = 3 }\n[warmup]\nrequests = 1\nduration = \"1s\"",
        &[],
        &[
            "[engine.vllm] is set but `engine.kind` is \"sim\"",
            "`workload.prompt_tokens`: `min` (9) is greater than `max` (3)",
            "[warmup] sets both `requests` and `duration`",
        ],
    );
    check_problems(
        "[engine]\nkind = \"vllm\"\n[faults]\npanic = { every = 0 }\nkill_engine = { after_batches = 3 }",
        &[],
        &[
            "missing `engine.vllm.model` (required with `engine.kind = \"vllm\"`)",
            "`faults.panic.every` must be at least 1, found 0",
            "`faults.kill_engine` kills a process of vLLM's multiprocess engine, but the engine is vLLM in-process",
        ],
    );
    check_problems(
        "[faults]\nkill_worker = { every = 2 }\nkill_engine = { after_batches = 1 }",
        &[],
        &[
            "`faults.kill_worker` needs `after_batches`",
            "`faults.kill_worker` kills a process of vLLM's multiprocess engine, but the engine is the simulator",
            "unknown key `every` in [faults.kill_worker]",
            "`faults.kill_engine` kills a process of vLLM's multiprocess engine, but the engine is the simulator",
        ],
    );
    check_problems(
        "[engine]\nkind = \"python\"\n[engine.vllm]\nmodel = \"m\"\n[faults]\npanic = { every = 1 }",
        &[],
        &[
            "missing `engine.python.class` (required with `engine.kind = \"python\"`)",
            "[engine.vllm] is set but `engine.kind` is \"python\"",
        ],
    );
    check_problems(
        "[engine]\nkind = \"python\"\n[engine.python]\nclass = \"my-engine.Engine\"\nargs = 3\nenv = { A = 1 }",
        &[],
        &[
            "`engine.python.class`: expected \"module:Class\", found \"my-engine.Engine\"",
            "`engine.python.args`: expected a table, found an integer",
            "`engine.python.env.A`: expected a string, found an integer",
        ],
    );
    check_problems(
        "[profile]\nlevels = [1]\n[workload]\nsource = \"file\"\npath = \"nope.jsonl\"\nvocab_size = 1",
        &[],
        &[
            "`profile.levels` does not apply to profile kind `throughput`",
            "workload file `nope.jsonl` not found (looked for {dir}/nope.jsonl)"
                .replace("{dir}", &manifest_dir().display().to_string())
                .leak(),
            "`workload.vocab_size` only applies with `workload.source = \"synthetic\"`",
        ],
    );
    check_problems(
        "[profile]\nkind = \"constant\"\n[stop]\nmax_error_rate = 1.5\n[expect]\ncompleted = \">= many\"\nlatncy_p99_ms = 1",
        &["batching.size=3", "batching.batch_size=0", "nokey", "seed.x=1"],
        &[
            "unknown key `batching.size`",
            "`nokey`: expected `key=value`",
            "unknown key `seed.x`: `seed` is a value, not a table",
            "`batching.batch_size` must be at least 1, found 0",
            "missing `profile.rates` (required with kind = \"constant\")",
            "`stop.max_error_rate` must be between 0 and 1, found 1.5",
            "`expect.completed`: expected \"op value\" such as \">= 1000\" (op: == != < <= > >=), found \">= many\"",
            "unknown metric `latncy_p99_ms` in [expect]",
        ],
    );
}

#[test]
fn problems_point_at_the_right_place() {
    let e = parse("name = \"x\"\n[batching]\n  batch_size = -1\n", &["batching.batch_timeout=0s"]).unwrap_err();
    let origins: Vec<String> = e.problems.iter().map(|p| p.origin.short()).collect();
    assert_eq!(origins, ["--set batching.batch_timeout=0s", "test.toml:3:16"]);
    let e = parse("a = [1,\n", &[]).unwrap_err();
    assert!(e.problems[0].origin.short().starts_with("test.toml:"), "{e}");
}

#[test]
fn builder_goes_through_validation() {
    let plan = Scenario::builder()
        .name("x")
        .batch_size(8)
        .batch_timeout(Duration::from_millis(5))
        .sim_virtual()
        .synthetic(100, 10)
        .profile_throughput(64)
        .max_requests(256)
        .fault_fail_batch_every(7)
        .expect("completed", Comparison::Eq, 256.0)
        .build()
        .unwrap();
    assert_eq!(plan.batching.batch_size(), 8);
    assert_eq!(plan.profile, ProfileSpec::Throughput { max_concurrency: 64 });
    assert_eq!(plan.faults.fail_batch, FaultTrigger::every(7));
    assert_eq!(plan.expect[0].value, 256.0);
    let e = Scenario::builder().batch_size(0).expect("completd", Comparison::Eq, 1.0).build().unwrap_err();
    let messages: Vec<&str> = e.problems.iter().map(|p| p.message.as_str()).collect();
    assert_eq!(messages, ["unknown metric `expect.completd`", "`batching.batch_size` must be at least 1, found 0"]);
    // Switching the profile forgets the previous one's keys.
    let plan = Scenario::builder().profile_constant(&[1.0]).profile_sweep(3).build().unwrap();
    assert_eq!(plan.profile, ProfileSpec::Sweep { rates: 3, max_concurrency: 256 });
}

/// Every setter's key is a key of the tables (the builder names its keys; `build` would reject a
/// wrong one, this finds it without a plan that uses the setter).
#[test]
fn builder_setters_set_known_keys() {
    let d = Duration::from_millis(1);
    let trigger = FaultTrigger::every(2);
    let builders = [
        Scenario::builder().name("x").description("y").seed(1).sim_real().sim_seed(2).sim_cost(&CostModel::default()),
        Scenario::builder().sim_virtual().vllm("m").batch_size(1).batch_timeout(d).generate_timeout(d),
        Scenario::builder().python("m:C").synthetic(1, 2).workload_seed(3).profile_synchronous(),
        Scenario::builder().workload_file("f").profile_concurrent(&[1]).profile_throughput(1).profile_constant(&[1.0]),
        Scenario::builder().profile_poisson(1.0).profile_sweep(2).max_concurrency(3).max_requests(1).max_duration(d),
        Scenario::builder().max_errors(1).max_error_rate(0.5).warmup_requests(1).warmup_duration(d),
        Scenario::builder().cooldown_requests(1).cooldown_duration(d).fault("panic", &trigger).fault_hang_every(2, d),
        Scenario::builder().fault_fail_batch_every(1).fault_slow(&trigger, 2.0).fault_start_fails(true),
        Scenario::builder().fault_start_delay(d).fault_kill_engine(1).output_dir("o").requests_jsonl(true),
        Scenario::builder().expect("completed", Comparison::Eq, 1.0),
    ];
    let mut count = 0;
    for b in &builders {
        for path in b.paths() {
            let parts: Vec<&str> = path.split('.').collect();
            assert!(schema::check_path(&parts).is_ok(), "the builder sets `{path}`, which no table has");
            count += 1;
        }
    }
    assert!(count > 40, "{count} keys set");
}

fn without_origins(plan: Plan) -> Plan {
    plan.without_origins()
}

fn round_trip(plan: &Plan) {
    let text = to_toml(plan);
    let again = parse_str(&text, "rt.toml", manifest_dir(), &Overrides::default())
        .unwrap_or_else(|e| panic!("{e}\n--- text ---\n{text}"));
    assert_eq!(without_origins(again.clone()), without_origins(plan.clone()), "\n{text}");
    // Printing the re-read plan gives the same text, origins included.
    assert_eq!(to_toml(&again), text);
    // The JSON a report carries is that text read as TOML, value for value.
    let read: toml::Value = toml::from_str(&text).unwrap();
    assert_eq!(to_json(plan), serde_json::to_value(read).unwrap(), "\n{text}");
}

/// The shipped scenario files (`scenarios/data/` holds their datasets, `scenarios/profiles/`
/// calibration profiles and the run the example profile came from, which is a scenario too).
fn shipped_scenarios() -> Vec<PathBuf> {
    let entries = std::fs::read_dir(manifest_dir().join("scenarios")).unwrap();
    let mut files: Vec<PathBuf> =
        entries.map(|e| e.unwrap().path()).filter(|p| p.extension().is_some_and(|e| e == "toml")).collect();
    files.sort();
    files.push(manifest_dir().join("scenarios/profiles/example-source.toml"));
    files
}

#[test]
fn round_trip_of_files_and_builders() {
    check("", round_trip);
    for path in shipped_scenarios() {
        let plan = load_file(&path, &Overrides::default()).unwrap();
        round_trip(&plan);
    }
    let plan = Scenario::builder()
        .vllm("/models/x")
        .set("engine.vllm.engine_args.tensor_parallel_size", 2)
        .set("engine.vllm.max_model_len", 512)
        .profile_constant(&[0.1, 1e-7, 12345.678])
        .warmup_requests(3)
        .cooldown_duration(Duration::from_nanos(1_500))
        .expect("ttft_p99_ms", Comparison::Lt, 0.1)
        .build()
        .unwrap();
    round_trip(&plan);
}

#[test]
fn shipped_scenarios_validate() {
    let mut count = 0;
    for path in shipped_scenarios() {
        if let Err(e) = load_file(&path, &Overrides::default()) {
            panic!("{}:\n{e}", path.display());
        }
        count += 1;
    }
    assert!(count >= 5, "expected the five shipped scenarios, found {count}");
}

// ---- proptest: generated plans survive to_toml -> parse_str ----

fn duration_strategy(min_nanos: u64) -> impl Strategy<Value = Duration> {
    prop_oneof![
        (min_nanos..=10_000u64).prop_map(Duration::from_nanos),
        (min_nanos..=1_000_000_000_000_000u64).prop_map(Duration::from_nanos),
        (1u64..=100).prop_map(|m| Duration::from_secs(60 * m)),
    ]
}

fn trigger_strategy() -> impl Strategy<Value = FaultTrigger> {
    (proptest::option::of(1u64..1000), prop_oneof![Just(0.0), 0.0..=1.0f64])
        .prop_map(|(every, probability)| FaultTrigger { every, probability })
}

/// Any `[faults]`; process faults only where they are allowed.
fn faults_strategy(process_faults: bool) -> BoxedStrategy<Faults> {
    let process = move || match process_faults {
        true => proptest::option::of((0u64..1000).prop_map(|after_batches| ProcessFault { after_batches })).boxed(),
        false => Just(None).boxed(),
    };
    (
        proptest::array::uniform7(trigger_strategy()),
        (1.0..100.0f64, duration_strategy(0), any::<bool>(), duration_strategy(0)),
        (process(), process()),
        (proptest::array::uniform5(trigger_strategy()), duration_strategy(0)),
    )
        .prop_map(
            |(
                [fail_batch, short_output, extra_output, wrong_id, panic, slow, hang],
                (slow_factor, hang_for, start_fails, start_delay),
                (kill_engine, kill_worker),
                ([http_429, http_503, drop_stream, stall_stream, exit_server], stall_for),
            )| Faults {
                fail_batch,
                short_output,
                extra_output,
                wrong_id,
                panic,
                slow,
                slow_factor,
                hang,
                hang_for,
                start_fails,
                start_delay,
                kill_engine,
                kill_worker,
                http_429,
                http_503,
                drop_stream,
                stall_stream,
                stall_for,
                exit_server,
            },
        )
        .boxed()
}

fn dist_strategy() -> impl Strategy<Value = TokenDist> {
    prop_oneof![
        (1u32..=u32::MAX).prop_map(|value| TokenDist::Fixed { value }),
        (1u32..5000, 0u32..5000).prop_map(|(min, extra)| TokenDist::Uniform { min, max: min + extra }),
        (0.0..1e4f64, 0.0..1e3f64, 1u32..5000, 0u32..5000)
            .prop_map(|(mean, stdev, min, extra)| { TokenDist::Normal { mean, stdev, min, max: min + extra } }),
    ]
}

fn seed_strategy() -> impl Strategy<Value = u64> {
    0..=i64::MAX as u64
}

fn engine_strategy() -> impl Strategy<Value = EnginePlan> {
    let cost = (
        (duration_strategy(0), duration_strategy(0), duration_strategy(0)),
        (duration_strategy(0), duration_strategy(0), duration_strategy(0)),
        (duration_strategy(0), duration_strategy(0), duration_strategy(0)),
        0.0..=1.0f64,
    )
        .prop_map(|((a, b, c), (d, e, f), (g, h, i), eos_probability)| CostModel {
            fixed_overhead: a,
            request_overhead: b,
            decode_step: c,
            prefill_per_token: d,
            per_seq: e,
            context_per_1k_tokens: f,
            tokens_squared_per_1m: i,
            // Set or not (then not printed), from the other draws: another strategy in the tuple
            // overflows the test's stack in a debug build.
            encoder_per_image_token: if a.as_nanos() % 2 == 0 { d } else { Duration::ZERO },
            finish_overhead: g,
            finish_per_request: h,
            frontend_overhead: Duration::ZERO,
            frontend_per_request: Duration::ZERO,
            frontend_hands_off_bursts: false,
            eos_probability,
        });
    let scheduler = (1u32..100_000, 1u32..100_000, 1u32..100_000, 1u32..64, any::<bool>(), any::<bool>()).prop_map(
        |(max_num_seqs, max_num_batched_tokens, num_kv_blocks, block_size, prefix_caching, chunked_prefill)| {
            ResolvedEngineConfig {
                max_num_seqs,
                max_num_batched_tokens,
                num_kv_blocks,
                block_size,
                prefix_caching,
                chunked_prefill,
            }
        },
    );
    // A shipped profile, so a plan that names one parses back (its values are then overridden by
    // the printed keys, as the docs promise).
    let shipped = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/profiles/example.toml");
    let profile = proptest::option::of(Just(shipped));
    let vllm_profile = profile.clone();
    let sim = (any::<bool>(), seed_strategy(), cost, scheduler, profile).prop_map(
        |(real, seed, cost, scheduler, profile)| {
            let time = if real { TimeMode::Real } else { TimeMode::Virtual };
            EnginePlan::Sim(SimConfig { time, seed, cost, scheduler, profile })
        },
    );
    let small = || proptest::option::of(1u32..100_000);
    let args = proptest::collection::btree_map(
        "[a-z_]{1,8}",
        prop_oneof![
            any::<i64>().prop_map(serde_json::Value::from),
            "[ -~]{0,8}".prop_map(serde_json::Value::from),
            any::<bool>().prop_map(serde_json::Value::from)
        ],
        0..4,
    );
    let python_args = args.clone();
    let vllm = (
        "/[a-z]{1,8}/[a-z0-9.-]{1,8}",
        "[a-z0-9]{1,8}",
        (small(), small(), small(), small()),
        (any::<bool>(), seed_strategy(), 0.001..64.0f64, any::<bool>(), any::<bool>(), any::<bool>()),
        args,
        vllm_profile,
    )
        .prop_map(
            |(
                model,
                dtype,
                (max_model_len, max_num_seqs, max_num_batched_tokens, omp_num_threads),
                (enforce_eager, seed, kv_cache_gib, in_process, disable_log_stats, continuous),
                args,
                profile,
            )| {
                EnginePlan::Vllm(VllmConfig {
                    model: PathBuf::from(model),
                    dtype,
                    max_model_len,
                    max_num_seqs,
                    max_num_batched_tokens,
                    enforce_eager,
                    seed,
                    kv_cache_gib,
                    in_process,
                    omp_num_threads,
                    disable_log_stats,
                    engine_args: args.into_iter().collect(),
                    admission: match continuous {
                        false => crate::engine::python::vllm::Admission::Batch,
                        true => crate::engine::python::vllm::Admission::Continuous,
                    },
                    profile,
                })
            },
        );
    let python = (
        "[a-z_][a-z0-9_]{0,6}(\\.[a-z_][a-z0-9_]{0,6}){0,2}",
        "[A-Z][A-Za-z0-9_]{0,8}",
        proptest::option::of("/[a-z]{1,8}/[a-z0-9.-]{1,8}"),
        proptest::option::of("/[a-z]{1,8}"),
        python_args,
        proptest::collection::btree_map("[A-Z_]{1,8}", "[ -~]{0,8}", 0..3),
        any::<bool>(),
    )
        .prop_map(|(module, class, path, venv, args, env, foreign)| {
            EnginePlan::Python(PythonConfig {
                clock: if foreign {
                    crate::engine::ClockDomain::Foreign
                } else {
                    crate::engine::ClockDomain::Monotonic
                },
                path: path.map(PathBuf::from),
                venv: venv.map(PathBuf::from),
                args: args.into_iter().collect(),
                env,
                ..PythonConfig::new(module, class)
            })
        });
    // No `/v1` path: a base URL drops it, so it would not print back as generated.
    let openai = (
        proptest::collection::vec("https?://[a-z]{1,8}(:[0-9]{2,4})?(/p[a-z]{0,3})?", 1..3),
        "[a-zA-Z0-9][a-zA-Z0-9/._-]{0,11}",
        any::<bool>(),
        proptest::option::of("[A-Z_][A-Z0-9_]{0,8}"),
        proptest::option::of(duration_strategy(1)),
        proptest::option::of(duration_strategy(1)),
        1u32..100_000,
        0u8..3,
        (proptest::option::of("X-[A-Za-z]{1,8}"), proptest::option::of(1u32..64)),
    )
        .prop_map(
            |(
                urls,
                model,
                chat,
                api_key_env,
                timeout,
                stall_timeout,
                max_connections,
                routing,
                (session_header, threads),
            )| {
                EnginePlan::OpenAi(OpenAiConfig {
                    urls,
                    model,
                    api: if chat { Api::Chat } else { Api::Completions },
                    api_key_env,
                    timeout,
                    stall_timeout,
                    max_connections,
                    routing: [Routing::RoundRobin, Routing::LeastOutstanding, Routing::SessionAffinity]
                        [routing as usize],
                    session_header,
                    threads,
                })
            },
        )
        .boxed();
    prop_oneof![sim, vllm, python, openai]
}

fn request_format_strategy() -> impl Strategy<Value = RequestFormat> {
    use crate::engine::chat::{ChatTemplate, TemplateOrigin};
    prop_oneof![
        Just(RequestFormat::Plain),
        Just(RequestFormat::ChatTemplate),
        "[a-z <>|\n]{0,12}".prop_map(|text| {
            let source = format!("{{% for m in messages %}}{text}{{{{ m.content }}}}{{% endfor %}}");
            RequestFormat::Custom(ChatTemplate::new(source, TemplateOrigin::Inline).unwrap())
        }),
        Just(()).prop_map(|_| {
            let path = manifest_dir().join("scripts/tiny_chat_template.jinja");
            let source = std::fs::read_to_string(&path).unwrap();
            RequestFormat::Custom(ChatTemplate::new(source, TemplateOrigin::File(path)).unwrap())
        }),
    ]
}

fn dataset_strategy() -> impl Strategy<Value = DatasetOptions> {
    let format = prop_oneof![Just(FileFormat::Jsonl), Just(FileFormat::ShareGpt), Just(FileFormat::Text)];
    let renames = proptest::collection::vec((0..Columns::FIELDS.len(), "[a-z_]{1,8}"), 0..3);
    let limits = (proptest::option::of(1u32..1000), proptest::option::of(1u32..1000), any::<bool>());
    (format, renames, any::<bool>(), limits, any::<bool>()).prop_map(
        |(format, renames, skip_bad_lines, (min, max, truncate), reply)| {
            // Only what the lowering rules allow: columns of the format, a reply only from ShareGPT,
            // truncation only to a maximum, and min <= max.
            let fields = match format {
                FileFormat::Jsonl => Columns::JSONL_FIELDS,
                FileFormat::ShareGpt => Columns::SHAREGPT_FIELDS,
                FileFormat::Text => &[][..],
            };
            let mut columns = Columns::default();
            for (i, key) in renames {
                if let Some(field) = fields.get(i % fields.len().max(1)) {
                    *columns.key_mut(field).unwrap() = key;
                }
            }
            let (min_prompt_tokens, max_prompt_tokens) = match (min, max) {
                (Some(a), Some(b)) => (Some(a.min(b)), Some(a.max(b))),
                other => other,
            };
            DatasetOptions {
                format,
                columns,
                skip_bad_lines,
                min_prompt_tokens,
                max_prompt_tokens,
                truncate: truncate && max_prompt_tokens.is_some(),
                reply_max_tokens: reply && format == FileFormat::ShareGpt,
            }
        },
    )
}

/// `[workload.sessions]`, any keys; [`valid_sessions`] fits it to its workload.
fn sessions_strategy() -> impl Strategy<Value = crate::loadgen::sessions::SessionSpec> {
    use crate::loadgen::sessions::{ContextFull, NextTurn, SessionSpec, ThinkDist};
    (
        dist_strategy(),
        0u64..10_000_000_000,
        any::<bool>(),
        proptest::option::of(1u32..100_000),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(|(turns, think_ns, exponential, max_context_tokens, drop, tick)| SessionSpec {
            turns,
            think_time: Duration::from_millis(think_ns / 1_000_000),
            think_time_dist: if exponential { ThinkDist::Exponential } else { ThinkDist::Fixed },
            max_context_tokens,
            context_full: if drop { ContextFull::DropOldest } else { ContextFull::EndSession },
            next_turn: if tick { NextTurn::RateTick } else { NextTurn::AfterReply },
        })
}

/// `sessions` where the workload can have them (synthetic, no tokenizer, images or shared
/// prefixes), its context limit raised to the first turn.
fn valid_sessions(
    sessions: Option<crate::loadgen::sessions::SessionSpec>,
    workload: &WorkloadSpec,
) -> Option<crate::loadgen::sessions::SessionSpec> {
    let WorkloadSpec::Synthetic {
        prompt_tokens,
        output_tokens,
        chat,
        tokenizer: None,
        images: None,
        prefix_groups: 0,
        ..
    } = workload
    else {
        return None;
    };
    let mut sessions = sessions?;
    let system = chat.system_prompt.as_deref().filter(|_| chat.enabled).map_or(0, crate::engine::tokens::text_tokens);
    let first = (system as u32).saturating_add(prompt_tokens.largest()).saturating_add(output_tokens.largest());
    sessions.max_context_tokens = sessions.max_context_tokens.map(|m| m.max(first));
    Some(sessions)
}

/// `[workload.images]`: one bucket or two (probabilities summing to 1), any other key.
fn images_strategy() -> impl Strategy<Value = crate::loadgen::images::ImageSpec> {
    use crate::loadgen::images::{Bucket, Content, ImageFormat, ImageSpec};
    let side = || 1u32..=4096;
    let buckets = prop_oneof![
        (side(), side()).prop_map(|(height, width)| vec![Bucket { height, width, probability: 1.0 }]),
        (side(), side(), side(), side(), 0.0..=1.0f64).prop_map(|(h1, w1, h2, w2, p)| vec![
            Bucket { height: h1, width: w1, probability: p },
            Bucket { height: h2, width: w2, probability: 1.0 - p },
        ]),
    ];
    let content = prop_oneof![Just(Content::Noise), Just(Content::Gradient), Just(Content::Solid)];
    let format = prop_oneof![Just(ImageFormat::Jpeg), Just(ImageFormat::Png)];
    (
        buckets,
        (0u32..=8, 0.0..=1.0f64, 0u32..=8),
        (content, format, 1u32..=100),
        (0u32..=64, 0.0..=1.0f64, 1u32..=4096, 0u32..=32, any::<bool>()),
    )
        .prop_map(
            |(
                buckets,
                (base_items, range_ratio, extra),
                (content, format, quality),
                (pool, pool_rate, tokens_per_image, patch_size, count_in_prompt),
            )| ImageSpec {
                buckets,
                base_items,
                range_ratio,
                limit: base_items + extra,
                content,
                format,
                quality,
                pool,
                pool_rate,
                tokens_per_image,
                patch_size,
                count_in_prompt,
            },
        )
}

fn workload_strategy() -> impl Strategy<Value = WorkloadSpec> {
    let chat = (any::<bool>(), proptest::option::of("[ -~é\n]{0,20}")).prop_map(|(enabled, system_prompt)| {
        SyntheticChat { enabled, system_prompt: system_prompt.filter(|_| enabled) }
    });
    let prefixes = prop_oneof![Just((0, 0)), (1u32..=super::arrivals::MAX_PREFIX_GROUPS, 1u32..=u32::MAX)];
    let synthetic = (
        (dist_strategy(), dist_strategy(), seed_strategy(), any::<bool>(), 2u32..=u32::MAX, any::<bool>(), 0.0..4.0f32),
        chat,
        request_format_strategy(),
        prefixes,
        any::<bool>(),
        proptest::option::of(images_strategy()),
    )
        .prop_map(
            |(
                (prompt_tokens, output_tokens, seed, unique_prefix, vocab_size, ignore_eos, temperature),
                chat,
                request_format,
                (groups, tokens),
                with_tokenizer,
                images,
            )| {
                // A shared prefix (token prompts only) is shorter than the shortest prompt; a
                // prompt of 1 token has none.
                let shortest = match prompt_tokens {
                    TokenDist::Fixed { value } => value,
                    TokenDist::Uniform { min, .. } | TokenDist::Normal { min, .. } => min,
                }
                .max(1);
                let tokens = tokens % shortest;
                let (prefix_groups, prefix_tokens) =
                    if tokens == 0 || chat.enabled { (0, 0) } else { (groups, tokens) };
                WorkloadSpec::Synthetic {
                    prompt_tokens,
                    output_tokens,
                    seed,
                    unique_prefix,
                    prefix_groups,
                    prefix_tokens,
                    vocab_size,
                    ignore_eos,
                    temperature,
                    images: images.filter(|_| chat.enabled && request_format != RequestFormat::Plain),
                    chat,
                    request_format,
                    tokenizer: with_tokenizer.then(crate::engine::tokenizer::tiny),
                }
            },
        );
    let file = (1u32..100_000, any::<bool>(), 0.0..4.0f32, dataset_strategy(), request_format_strategy()).prop_map(
        |(default_max_tokens, ignore_eos, temperature, dataset, request_format)| WorkloadSpec::File {
            path: manifest_dir().join("Cargo.toml"),
            default_max_tokens,
            ignore_eos,
            temperature,
            dataset,
            request_format,
            tokenizer: None,
        },
    );
    prop_oneof![synthetic, file]
}

/// The shipped trace: a trace profile's plans replay it (its arrivals are read from the file).
fn trace_sample() -> PathBuf {
    manifest_dir().join("scenarios/data/trace-sample.jsonl")
}

fn profile_strategy() -> impl Strategy<Value = ProfileSpec> {
    let concurrency = || proptest::option::of(1u32..100_000);
    // Short enough to end before any stop: `valid_rampup` drops the rest.
    let rampup = || proptest::option::of((1u64..=1_000).prop_map(Duration::from_nanos));
    prop_oneof![
        Just(ProfileSpec::Synchronous),
        (proptest::collection::vec(1u32..100_000, 1..5), rampup())
            .prop_map(|(levels, rampup)| ProfileSpec::Concurrent { levels, rampup }),
        (1u32..100_000).prop_map(|max_concurrency| ProfileSpec::Throughput { max_concurrency }),
        (proptest::collection::vec(1e-6..1e6f64, 1..5), concurrency(), rampup())
            .prop_map(|(rates, max_concurrency, rampup)| ProfileSpec::Constant { rates, max_concurrency, rampup }),
        (1e-6..1e6f64, seed_strategy(), concurrency(), rampup()).prop_map(|(rate, seed, max_concurrency, rampup)| {
            ProfileSpec::Poisson { rate, seed, max_concurrency, rampup }
        }),
        (1e-6..1e6f64, 1e-3..1e3f64, seed_strategy(), concurrency(), rampup()).prop_map(
            |(rate, burstiness, seed, max_concurrency, rampup)| {
                ProfileSpec::Gamma { rate, burstiness, seed, max_concurrency, rampup }
            }
        ),
        (1e-3..1e3f64, concurrency()).prop_map(|(time_scale, max_concurrency)| ProfileSpec::Trace {
            time_scale,
            arrivals: crate::loadgen::read_trace(&trace_sample(), &Default::default()).unwrap(),
            max_concurrency,
        }),
        (1u32..100, 1u32..100_000).prop_map(|(rates, max_concurrency)| ProfileSpec::Sweep { rates, max_concurrency }),
    ]
}

/// A ramp-up that ends before `stop` does, or none.
fn valid_rampup(profile: &mut ProfileSpec, stop: &StopPlan) {
    let rampup = match profile {
        ProfileSpec::Concurrent { rampup, .. }
        | ProfileSpec::Constant { rampup, .. }
        | ProfileSpec::Poisson { rampup, .. }
        | ProfileSpec::Gamma { rampup, .. } => rampup,
        _ => return,
    };
    if rampup.zip(stop.max_duration).is_some_and(|(r, d)| r >= d) {
        *rampup = None;
    }
}

fn plan_strategy() -> impl Strategy<Value = Plan> {
    let phase = || {
        proptest::option::of(prop_oneof![
            (1u64..1_000_000).prop_map(PhaseLimit::Requests),
            duration_strategy(1).prop_map(PhaseLimit::Duration),
        ])
    };
    let stop = (
        proptest::option::of(1u64..1_000_000),
        proptest::option::of(duration_strategy(1)),
        proptest::option::of(0u64..1000),
        proptest::option::of(0.0..=1.0f64),
    )
        .prop_filter("a stop needs max_requests or max_duration", |(r, d, _, _)| r.is_some() || d.is_some())
        .prop_map(|(max_requests, max_duration, max_errors, max_error_rate)| StopPlan {
            max_requests,
            max_duration,
            max_errors,
            max_error_rate,
        });
    let names = expect::known_metrics();
    let ops = [Comparison::Eq, Comparison::Ne, Comparison::Lt, Comparison::Le, Comparison::Gt, Comparison::Ge];
    let expect = proptest::collection::btree_map(
        proptest::sample::select(names),
        (proptest::sample::select(ops.to_vec()), -1e9..1e9f64),
        0..5,
    )
    .prop_map(|m| {
        m.into_iter()
            .map(|(metric, (op, value))| Expectation { metric, op, value, origin: String::new() })
            .collect::<Vec<_>>()
    });
    let batching = (
        1usize..100_000,
        duration_strategy(1),
        proptest::option::of(duration_strategy(1)),
        proptest::option::of(duration_strategy(1)),
        1usize..5,
    )
        .prop_map(|(size, timeout, generate, stall, in_flight)| {
            let config = crate::batcher::BatchConfig::new(size, timeout).unwrap();
            config
                .with_generate_timeout(generate)
                .and_then(|c| c.with_stall_timeout(stall))
                .and_then(|c| c.with_max_in_flight(in_flight))
                .unwrap()
        });
    let objective = || proptest::option::of(0.001..1e6f64);
    let slo = (objective(), objective(), objective(), objective())
        .prop_map(|(ttft_ms, tpot_ms, itl_ms, latency_ms)| Slo { ttft_ms, tpot_ms, itl_ms, latency_ms });
    let output = (proptest::option::of("[a-z]{1,8}(/[a-z]{1,8})?"), any::<bool>())
        .prop_map(|(dir, requests_jsonl)| OutputPlan { dir: dir.map(PathBuf::from), requests_jsonl });
    // Names are one path component (no `/` or `\\`); a quote still tests the printer's quoting.
    let head = ("[a-zA-Z][a-zA-Z0-9 _\"é-]{0,15}", proptest::option::of("[ -~é\n]{0,20}"), seed_strategy());
    let engine_and_faults = engine_strategy().prop_flat_map(|engine| {
        let process_faults = matches!(&engine, EnginePlan::Vllm(v) if !v.in_process);
        (Just(engine), faults_strategy(process_faults))
    });
    (
        head,
        engine_and_faults,
        batching,
        (workload_strategy(), proptest::option::of(sessions_strategy()).boxed()),
        profile_strategy(),
        stop,
        (phase(), phase()),
        (slo, expect),
        output,
    )
        .prop_map(
            |(
                (name, description, seed),
                (engine, faults),
                batching,
                (workload, sessions),
                profile,
                stop,
                (warmup, cooldown),
                (slo, expect),
                output,
            )| {
                let mut profile = profile;
                valid_rampup(&mut profile, &stop);
                // A trace replays a workload file with timestamps.
                let workload = match (&profile, workload) {
                    (
                        ProfileSpec::Trace { .. },
                        WorkloadSpec::File { default_max_tokens, ignore_eos, temperature, .. },
                    ) => WorkloadSpec::File {
                        path: trace_sample(),
                        default_max_tokens,
                        ignore_eos,
                        temperature,
                        dataset: Default::default(),
                        request_format: Default::default(),
                        tokenizer: None,
                    },
                    (ProfileSpec::Trace { .. }, _) => WorkloadSpec::File {
                        path: trace_sample(),
                        default_max_tokens: 64,
                        ignore_eos: true,
                        temperature: 0.0,
                        dataset: Default::default(),
                        request_format: Default::default(),
                        tokenizer: None,
                    },
                    (_, workload) => workload,
                };
                let sessions = valid_sessions(sessions, &workload);
                // Conversations need the chat API (the completions API takes none).
                let chats = match &workload {
                    WorkloadSpec::Synthetic { chat, request_format, .. } => {
                        chat.enabled && *request_format != RequestFormat::Plain
                    }
                    WorkloadSpec::File { dataset, request_format, .. } => {
                        dataset.format == FileFormat::ShareGpt && *request_format != RequestFormat::Plain
                    }
                };
                let engine = match engine {
                    EnginePlan::OpenAi(c) if chats => EnginePlan::OpenAi(OpenAiConfig { api: Api::Chat, ..c }),
                    engine => engine,
                };
                Plan {
                    name,
                    description,
                    seed,
                    // A real engine always has a generate and a stall timeout: none is not
                    // expressible in TOML.
                    batching: match &engine {
                        EnginePlan::Sim(_) => batching,
                        // The chat API takes one conversation per batch; the HTTP engine's timeouts
                        // default to its request timeout and a margin.
                        EnginePlan::OpenAi(c) => {
                            let size = if c.api == Api::Chat { 1 } else { batching.batch_size() };
                            let backstop = Some(super::lower::http_backstop(c.timeout));
                            crate::batcher::BatchConfig::new(size, batching.batch_timeout())
                                .and_then(|b| b.with_generate_timeout(batching.generate_timeout().or(backstop)))
                                .and_then(|b| b.with_stall_timeout(batching.stall_timeout().or(backstop)))
                                .unwrap()
                        }
                        _ => batching.with_real_engine_defaults(),
                    },
                    engine,
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
                    places: Default::default(),
                }
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]
    #[test]
    fn generated_plans_round_trip(plan in plan_strategy()) {
        round_trip(&plan);
    }
}

/// Every key of the key tables: the strategy above must write each at least once in a few hundred
/// plans, so a new row without a strategy for its field fails here.
#[test]
fn generated_plans_cover_every_key() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;

    fn walk(prefix: &str, table: &dyn toml_edit::TableLike, out: &mut std::collections::BTreeSet<String>) {
        for (key, item) in table.iter() {
            let path = if prefix.is_empty() { key.to_owned() } else { format!("{prefix}.{key}") };
            if let Some(sub) = item.as_table_like() {
                walk(&path, sub, out);
            }
            out.insert(path);
        }
    }
    let mut runner = TestRunner::deterministic();
    let strategy = plan_strategy();
    let mut written = std::collections::BTreeSet::new();
    for _ in 0..400 {
        let plan = strategy.new_tree(&mut runner).unwrap().current();
        let doc: toml_edit::DocumentMut = to_toml(&plan).parse().unwrap();
        walk("", doc.as_table(), &mut written);
    }
    let rows: Vec<String> = key_paths()
        .into_iter()
        .filter(|p| {
            let parts: Vec<&str> = p.split('.').collect();
            schema::section(&parts[..parts.len() - 1]).is_some()
        })
        .collect();
    let missing: Vec<&String> = rows.iter().filter(|p| !written.contains(*p)).collect();
    assert!(missing.is_empty(), "no generated plan writes {missing:?}");
}

/// `encoder_per_image_token` is printed only when set, so a scenario that leaves it at 0 prints as
/// before it existed; beside a profile that sets it, a 0 is printed too, and overrides the
/// profile's value when read back.
#[test]
fn the_encoder_cost_is_printed_when_set_or_when_it_overrides_a_profile() {
    let printed = |plan: &Plan| to_toml(plan).to_string();
    let plain = parse("", &[]).unwrap();
    assert!(!printed(&plain).contains("encoder_per_image_token"), "{}", printed(&plain));
    let set = parse("[engine.sim]\nencoder_per_image_token = \"2us\"\n", &[]).unwrap();
    assert!(printed(&set).contains("encoder_per_image_token = \"2us\""), "{}", printed(&set));
    // The shipped profile has no encoder cost: nothing to override.
    let shipped = parse("[engine.sim]\nprofile = \"scenarios/profiles/example.toml\"\n", &[]).unwrap();
    assert!(!printed(&shipped).contains("encoder_per_image_token"), "{}", printed(&shipped));
    // A profile with one, and a scenario that sets it back to 0.
    let dir = std::env::temp_dir().join(format!("batchlab-encoder-profile-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let example = std::fs::read_to_string(manifest_dir().join("scenarios/profiles/example.toml")).unwrap();
    let with_encoder = example.replace("[coefficients]\n", "[coefficients]\nencoder_per_image_token_ns = 1500.0\n");
    assert_ne!(with_encoder, example);
    std::fs::write(dir.join("p.toml"), with_encoder).unwrap();
    let from_profile =
        parse_str("[engine.sim]\nprofile = \"p.toml\"\n", "s.toml", &dir, &Overrides::default()).unwrap();
    let EnginePlan::Sim(sim) = from_profile.engine() else { panic!("sim") };
    assert_eq!(sim.cost.encoder_per_image_token, Duration::from_nanos(1500));
    let zero = "[engine.sim]\nprofile = \"p.toml\"\nencoder_per_image_token = \"0s\"\n";
    let zero = parse_str(zero, "s.toml", &dir, &Overrides::default()).unwrap();
    let text = printed(&zero);
    assert!(text.contains("encoder_per_image_token = \"0s\""), "{text}");
    let again = parse_str(&text, "printed.toml", &dir, &Overrides::default()).unwrap();
    let EnginePlan::Sim(sim) = again.engine() else { panic!("sim") };
    assert_eq!(sim.cost.encoder_per_image_token, Duration::ZERO);
    std::fs::remove_dir_all(&dir).unwrap();
}
