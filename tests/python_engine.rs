//! Python protocol engines (docs/engines.md): the echo engine of the docs, protocol violations,
//! and the Hugging Face transformers engine, through the library and through the CLI.
//!
//! Run with `just test-vllm`. Without the venv or the model a Python test fails, saying what is
//! missing, unless `BATCHLAB_SKIP_PYTHON=1` asks to skip it (never under `CI=true`;
//! tests/common/python_env.rs). The docs check needs no Python and runs in `just test` too.

use std::path::Path;

#[cfg(feature = "vllm")]
#[path = "common/hf_chat.rs"]
mod hf_chat;
#[cfg(feature = "vllm")]
#[path = "common/python_env.rs"]
mod python_env;

fn manifest_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// docs/engines.md shows tests/fixtures/echo_engine.py verbatim, so the documented engine is the
/// tested one.
#[test]
fn the_documented_echo_engine_is_the_tested_fixture() {
    let docs = std::fs::read_to_string(manifest_dir().join("docs/engines.md")).expect("docs/engines.md");
    let fixture = std::fs::read_to_string(manifest_dir().join("tests/fixtures/echo_engine.py")).expect("fixture");
    let block = docs
        .split("```python\n")
        .skip(1)
        .filter_map(|rest| rest.split_once("```").map(|(code, _)| code))
        .find(|code| code.contains("class EchoEngine"))
        .expect("docs/engines.md has a ```python block with class EchoEngine");
    assert_eq!(block, fixture, "docs/engines.md and tests/fixtures/echo_engine.py differ");
    let lines = fixture.lines().count();
    assert!((20..=40).contains(&lines), "the minimal engine should stay about 30 lines, it has {lines}");
}

#[cfg(feature = "vllm")]
mod with_python {
    use std::path::PathBuf;
    use std::process::Command;
    use std::sync::Mutex;

    use batchlab::engine::chat::{ChatPrompt, Message, Template};
    use batchlab::engine::python::{PythonConfig, PythonEngine, batchlab_home, default_venv};
    use batchlab::engine::{Engine, EngineError, EngineRequest, FinishReason, Prompt};
    use batchlab::time::MonotonicClock;

    use super::*;

    /// One heavy engine at a time on a 2-core machine.
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

    fn ready(model: bool) -> bool {
        super::python_env::ready(model)
    }

    fn fixture(class: &str) -> PythonConfig {
        let (module, class) = class.split_once(':').unwrap();
        PythonConfig { path: Some(manifest_dir().join("tests/fixtures")), ..PythonConfig::new(module, class) }
    }

    fn token_request(id: u64, prompt_len: u32, max_tokens: u32) -> EngineRequest {
        let prompt = (0..prompt_len).map(|i| 10 + (id as u32 * 37 + i * 11) % 1000).collect();
        EngineRequest::tokens(prompt, max_tokens).with_id(id)
    }

    #[test]
    fn the_echo_engine_runs_through_the_library() {
        if !ready(false) {
            return;
        }
        let mut config = fixture("echo_engine:EchoEngine");
        config.args.insert("delay_per_token".into(), 0.001.into());
        let mut engine = PythonEngine::new(config);
        let info = engine.start().expect("start").info;
        assert_eq!((info.name.as_str(), info.version.as_str()), ("echo", "1.0"));

        let mut batch: Vec<_> = (0..3).map(|id| token_request(id, 5, 4 + id as u32)).collect();
        batch.push(EngineRequest::new(Prompt::Text("hi".into()), 3).with_id(3));
        let before = MonotonicClock::read().as_secs_f64();
        let outputs = engine.generate(&batch).expect("generate");
        let after = MonotonicClock::read().as_secs_f64();
        for (req, out) in batch.iter().zip(&outputs) {
            assert_eq!(out.request_id, Some(req.id));
            assert_eq!(out.output_tokens, None, "the echo engine sends ids only");
            assert_eq!(out.generated_tokens(), Some(req.max_tokens));
            assert_eq!(out.prompt_tokens, Some(req.prompt.token_len().unwrap_or(2) as u32));
            assert_eq!(out.finish_reason, FinishReason::Length);
            let (first, last) = (out.stats.first_token_ts.unwrap(), out.stats.last_token_ts.unwrap());
            assert!(before <= first && first <= last && last <= after, "{out:?} not within {before}..{after}");
        }
        assert_eq!(outputs[3].output_token_ids, Some(vec![104, 105, 104]), "\"hi\" as bytes, echoed");
        // The echo engine does not say it takes chat prompts: a chat batch fails, saying so.
        let err = engine.generate(&[chat_request(7, "hi")]).unwrap_err().to_string();
        assert!(err.contains("echo_engine:EchoEngine does not take chat prompts"), "{err}");
        assert!(engine.generate(&batch[..1]).is_ok(), "and the engine goes on");
        engine.shutdown().expect("shutdown");
        assert!(engine.generate(&batch).is_err(), "generate after shutdown fails");
    }

    fn chat_request(id: u64, question: &str) -> EngineRequest {
        let messages = vec![Message::new("system", "Be brief."), Message::new("user", question)];
        let prompt = Prompt::Chat(ChatPrompt { messages, template: Template::Model });
        EngineRequest::new(prompt, 3).with_id(id)
    }

    /// Starts `class` from tests/fixtures/bad_engines.py and runs one generate of two requests.
    fn run_bad(class: &str, args: &[(&str, &str)]) -> Result<(), EngineError> {
        let mut config = fixture(&format!("bad_engines:{class}"));
        for (k, v) in args {
            config.args.insert((*k).into(), (*v).into());
        }
        let mut engine = PythonEngine::new(config);
        engine.start()?;
        let result = engine.generate(&[token_request(0, 3, 2), token_request(1, 3, 2)]).map(drop);
        engine.shutdown()?;
        result
    }

    #[test]
    fn protocol_violations_are_engine_errors_naming_the_class_and_the_field() {
        if !ready(false) {
            return;
        }
        let generate = |m: &str| Err::<(), _>(EngineError::Generate(m.to_owned()));
        assert_eq!(
            run_bad("MistypedField", &[]),
            generate(
                "bad_engines:MistypedField.generate() output 0: `first_token_ts` must be a number of seconds or \
                 None, found str 'soon'"
            )
        );
        assert_eq!(
            run_bad("MissingCount", &[]),
            generate(
                "bad_engines:MissingCount.generate() output 0: `output_tokens` or `output_token_ids` is required \
                 (both are missing)"
            )
        );
        assert_eq!(
            run_bad("TooFewOutputs", &[]),
            generate("bad_engines:TooFewOutputs.generate() returned 0 outputs for 2 requests")
        );
        let raised = run_bad("Raises", &[]).unwrap_err().to_string();
        assert!(
            raised.starts_with(
                "generate failed: bad_engines:Raises.generate(): ValueError: the model is on fire (at File"
            ) && raised.contains("bad_engines.py\", line"),
            "the exception and its last frame: {raised}"
        );
        assert_eq!(
            run_bad("BadInfo", &[]),
            Err(EngineError::Start(
                "bad_engines:BadInfo.start() returned a bad info dict: `version` is missing: it must be a non-empty str"
                    .into()
            ))
        );
        assert_eq!(
            run_bad("ForeignClock", &[]),
            Err(EngineError::Start(
                "bad_engines:ForeignClock.start() says clock = \"foreign\" but the engine is configured with \
                 clock = \"monotonic\": set `engine.python.clock = \"foreign\"`"
                    .into()
            ))
        );
        let marker = std::env::temp_dir().join(format!("batchlab-start-fails-{}", std::process::id()));
        let _ = std::fs::remove_file(&marker);
        let failed = run_bad("StartFails", &[("marker", marker.to_str().unwrap())]).unwrap_err().to_string();
        assert!(failed.contains("bad_engines:StartFails.start(): RuntimeError: no GPU here"), "{failed}");
        assert!(marker.exists(), "shutdown() runs after a failed start(), so the engine can clean up");
        let _ = std::fs::remove_file(&marker);
        for (class, expected) in [
            ("NoGenerate", "`bad_engines:NoGenerate` lacks the protocol method(s) generate"),
            ("Nope", "module `bad_engines` ("),
        ] {
            let err = run_bad(class, &[]).unwrap_err().to_string();
            assert!(err.contains(expected), "{err}");
        }
        let missing = PythonEngine::new(fixture("no_such_module:Engine")).start().unwrap_err().to_string();
        assert!(missing.contains("no module `no_such_module` in ") && missing.contains("tests/fixtures"), "{missing}");
    }

    #[test]
    fn the_transformers_engine_follows_each_requests_limits() {
        if !ready(true) {
            return;
        }
        let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
        let mut config = PythonConfig::new("batchlab_engines.transformers_engine", "TransformersEngine");
        config.args.insert("model".into(), batchlab_home().join("tiny-llama").to_string_lossy().into_owned().into());
        config.args.insert("threads".into(), 1.into());
        let mut engine = PythonEngine::new(config);
        let started = std::time::Instant::now();
        let info = engine.start().expect("start").info;
        eprintln!("started {} {} in {:.1?}", info.name, info.version, started.elapsed());
        assert_eq!(info.name, "transformers");

        // Mixed lengths and limits in one batch: each request gets exactly its own.
        let mut batch: Vec<_> = (0..4).map(|id| token_request(id, 8 + 5 * id as u32, 3 + 4 * id as u32)).collect();
        let mut eos = token_request(4, 10, 12);
        (eos.ignore_eos, eos.min_tokens) = (false, 2);
        batch.push(eos);
        batch.push(EngineRequest::new(Prompt::Text("the quick brown fox".into()), 5).with_id(5));
        let mut sampled = token_request(6, 12, 6);
        (sampled.temperature, sampled.seed) = (1.0, Some(3));
        batch.push(sampled);
        let before = MonotonicClock::read().as_secs_f64();
        let outputs = engine.generate(&batch).expect("generate");
        let after = MonotonicClock::read().as_secs_f64();
        for (req, out) in batch.iter().zip(&outputs) {
            let what = format!("request {} -> {out:?}", req.id);
            assert_eq!(out.request_id, Some(req.id), "{what}");
            let n = out.generated_tokens().unwrap();
            if req.ignore_eos {
                assert_eq!(n, req.max_tokens, "{what}");
                assert_eq!(out.finish_reason, FinishReason::Length, "{what}");
            } else {
                assert!((req.min_tokens..=req.max_tokens).contains(&n), "{what}");
            }
            match &req.prompt {
                Prompt::Tokens(ids) => assert_eq!(out.prompt_tokens, Some(ids.len() as u32), "{what}"),
                _ => assert!(out.prompt_tokens.is_some_and(|n| n > 0), "{what}"),
            }
            let s = &out.stats;
            let (queued, scheduled, first, last) =
                (s.queued_ts.unwrap(), s.scheduled_ts.unwrap(), s.first_token_ts.unwrap(), s.last_token_ts.unwrap());
            assert!(before <= queued && queued <= scheduled && scheduled <= first, "{what}");
            assert!(first <= last && last <= after, "{what}");
            if n >= 2 {
                assert!(first < last, "{what}: several tokens, several steps");
            }
            // One time per token, in order, from the first token's to the last's: the per-gap ITL.
            let tokens = s.token_ts.as_deref().expect("the transformers engine times every token");
            assert_eq!(tokens.len(), n as usize, "{what}");
            assert_eq!((tokens.first(), tokens.last()), (Some(&first), Some(&last)), "{what}");
            assert!(tokens.windows(2).all(|w| w[0] <= w[1]), "{what}");
        }
        // Longer requests finish later: the last token's time is the request's own.
        assert!(outputs[0].stats.last_token_ts < outputs[3].stats.last_token_ts, "{outputs:?}");

        // Chat prompts go through the model's template; the counts are the tokenizer's.
        let chats = [chat_request(10, "Hi"), chat_request(11, "What is continuous batching, in short?")];
        let outputs = engine.generate(&chats).expect("chat generate");
        engine.shutdown().expect("shutdown");
        let cases: Vec<_> = chats
            .iter()
            .map(|r| match &r.prompt {
                Prompt::Chat(c) => (c.messages.clone(), None),
                _ => unreachable!(),
            })
            .collect();
        let expected = hf_chat::chat_lengths(&batchlab_home().join("tiny-llama"), &cases);
        for (out, (templated, raw)) in outputs.iter().zip(expected) {
            assert_eq!(out.prompt_tokens, Some(templated as u32), "{out:?}");
            assert!(templated > raw, "the template's own tokens count: {templated} vs {raw}");
        }
    }

    /// A model without a chat template of its own: chat prompts for the model's template fall back
    /// to batchlab's plain format, so they count exactly as that text does.
    #[test]
    fn a_model_without_a_chat_template_falls_back_to_plain() {
        if !ready(true) {
            return;
        }
        let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
        let model = output_dir("no-template-model");
        std::fs::create_dir_all(&model).unwrap();
        for entry in std::fs::read_dir(batchlab_home().join("tiny-llama")).unwrap() {
            let path = entry.unwrap().path();
            if path.file_name().is_some_and(|n| n != "chat_template.jinja") {
                std::fs::copy(&path, model.join(path.file_name().unwrap())).unwrap();
            }
        }
        let mut config = PythonConfig::new("batchlab_engines.transformers_engine", "TransformersEngine");
        config.args.insert("model".into(), model.to_string_lossy().into_owned().into());
        config.args.insert("threads".into(), 1.into());
        let mut engine = PythonEngine::new(config);
        engine.start().expect("start");
        let chat = chat_request(0, "What is continuous batching?");
        let Prompt::Chat(c) = &chat.prompt else { unreachable!() };
        let plain = batchlab::engine::chat::render_plain(&c.messages);
        assert_eq!(plain, "system: Be brief.\nuser: What is continuous batching?");
        let text = EngineRequest::new(Prompt::Text(plain), 3).with_id(1);
        let outputs = engine.generate(&[chat, text]).expect("generate");
        engine.shutdown().expect("shutdown");
        assert!(outputs[0].prompt_tokens.is_some_and(|n| n > 0), "{outputs:?}");
        assert_eq!(outputs[0].prompt_tokens, outputs[1].prompt_tokens, "the chat prompt went as its plain text");
        std::fs::remove_dir_all(&model).unwrap();
    }

    /// `scripts/build_tiny_model.py` gives a model built before the chat template (or with an older
    /// copy) the current template without rebuilding it, and then does nothing.
    #[test]
    fn setup_installs_the_chat_template_into_an_existing_model() {
        if !ready(true) {
            return;
        }
        let model = output_dir("template-install");
        std::fs::create_dir_all(&model).unwrap();
        for entry in std::fs::read_dir(batchlab_home().join("tiny-llama")).unwrap() {
            let path = entry.unwrap().path();
            if path.file_name().is_some_and(|n| n != "chat_template.jinja") {
                std::fs::copy(&path, model.join(path.file_name().unwrap())).unwrap();
            }
        }
        let build = || {
            let out = Command::new(default_venv().join("bin/python"))
                .arg(manifest_dir().join("scripts/build_tiny_model.py"))
                .arg(&model)
                .output()
                .expect("python");
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
            String::from_utf8_lossy(&out.stdout).into_owned()
        };
        let weights = std::fs::read(model.join("model.safetensors")).unwrap();
        let template = std::fs::read_to_string(manifest_dir().join("scripts/tiny_chat_template.jinja")).unwrap();
        let installed = || std::fs::read_to_string(model.join("chat_template.jinja")).ok();
        assert!(build().contains("chat template installed"));
        assert_eq!(installed().as_deref(), Some(template.as_str()));
        assert!(build().contains("is up to date"), "a second run does nothing");
        std::fs::write(model.join("chat_template.jinja"), "{{ an older template }}").unwrap();
        assert!(build().contains("chat template installed"), "an older copy is replaced");
        assert_eq!(installed().as_deref(), Some(template.as_str()));
        assert_eq!(std::fs::read(model.join("model.safetensors")).unwrap(), weights, "the model is not rebuilt");
        std::fs::remove_dir_all(&model).unwrap();
    }

    fn output_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("batchlab-python-cli-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    /// `batchlab run SCENARIO --output DIR`, which must succeed; its report.json.
    fn run_cli(scenario: &str, name: &str) -> serde_json::Value {
        let dir = output_dir(name);
        let started = std::time::Instant::now();
        let out = Command::new(env!("CARGO_BIN_EXE_batchlab"))
            .args(["run", scenario, "--output"])
            .arg(&dir)
            .current_dir(manifest_dir())
            .output()
            .expect("running batchlab");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{scenario}: {}\nstderr:\n{stderr}", out.status);
        eprintln!("{scenario}: ran in {:.1?}\n{}", started.elapsed(), String::from_utf8_lossy(&out.stdout));
        serde_json::from_slice(&std::fs::read(dir.join("report.json")).expect("report.json")).expect("json")
    }

    /// `batchlab run SCENARIO --output DIR`: its exit status, report.json and stderr.
    fn run_cli_status(scenario: &str, name: &str) -> (std::process::ExitStatus, serde_json::Value, String) {
        let dir = output_dir(name);
        let out = Command::new(env!("CARGO_BIN_EXE_batchlab"))
            .args(["run", scenario, "--output"])
            .arg(&dir)
            .current_dir(manifest_dir())
            .output()
            .expect("running batchlab");
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        let report = std::fs::read(dir.join("report.json")).expect("report.json");
        (out.status, serde_json::from_slice(&report).expect("json"), stderr)
    }

    fn answered(counts: &serde_json::Value) -> u64 {
        ["completed", "errors", "cancelled"].iter().map(|k| counts[k].as_u64().unwrap_or(0)).sum()
    }

    /// A protocol engine that raises an `EngineDeadError` in generate, as vLLM does in-process:
    /// the run stops at once with `engine_died`, an incomplete report and exit 1.
    #[test]
    fn an_engine_dead_error_in_generate_stops_the_run() {
        if !ready(false) {
            return;
        }
        let (status, report, stderr) = run_cli_status("tests/fixtures/dies.toml", "dies");
        assert_eq!(status.code(), Some(1), "stderr:\n{stderr}");
        assert_eq!(report["incomplete"], true);
        let counts = &report["benchmarks"][0]["counts"];
        assert_eq!(counts["lost"], 0, "{counts}");
        assert_eq!(counts["completed"], 3 * 8, "three batches were served: {counts}");
        assert!(counts["errors_by_kind"]["engine_died"].as_u64() > Some(0), "{counts}");
        assert_eq!(Some(answered(counts)), counts["submitted"].as_u64(), "{counts}");
        assert!(stderr.contains("bad_engines:DiesAfter raised in generate(): EngineDeadError"), "{stderr}");
    }

    /// `batchlab run SCENARIO --output DIR ARGS...`: its exit status, report.json and stderr.
    fn run_cli_with(
        scenario: &str,
        name: &str,
        args: &[&str],
    ) -> (std::process::ExitStatus, serde_json::Value, String) {
        let dir = output_dir(name);
        let out = Command::new(env!("CARGO_BIN_EXE_batchlab"))
            .args(["run", scenario, "--output"])
            .arg(&dir)
            .args(args)
            .current_dir(manifest_dir())
            .output()
            .expect("running batchlab");
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        let report = std::fs::read(dir.join("report.json")).unwrap_or_else(|e| panic!("report.json: {e}\n{stderr}"));
        (out.status, serde_json::from_slice(&report).expect("json"), stderr)
    }

    /// Processes an engine runs besides itself are not the engine: a helper left running at start
    /// that exits with status 0 mid-run, `true` and a `sleep 0.1` in every generate. The run
    /// completes.
    #[test]
    fn helper_processes_of_an_engine_are_not_its_death() {
        if !ready(false) {
            return;
        }
        let (status, report, stderr) = run_cli_with("tests/fixtures/helpers.toml", "helpers", &[]);
        assert_eq!(status.code(), Some(0), "stderr:\n{stderr}");
        let counts = &report["benchmarks"][0]["counts"];
        assert_eq!((counts["completed"].as_u64(), counts["errors"].as_u64()), (Some(48), Some(0)), "{counts}");
        assert!(!stderr.contains("engine died"), "{stderr}");
    }

    /// A process the engine names in its info's `processes` is the engine: killed mid-run while
    /// generate blocks (as vLLM's does when its EngineCore dies), it is the engine's death, and
    /// the run ends with `engine_died`, an incomplete report and exit 1.
    #[test]
    fn a_named_engine_process_killed_mid_run_is_the_engines_death() {
        if !ready(false) {
            return;
        }
        let class = ["--set", "engine.python.class=\"process_engines:KillsOwnProcess\""];
        let (status, report, stderr) = run_cli_with("tests/fixtures/helpers.toml", "own-process", &class);
        assert_eq!(status.code(), Some(1), "stderr:\n{stderr}");
        assert_eq!(report["incomplete"], true);
        let counts = &report["benchmarks"][0]["counts"];
        assert_eq!(counts["lost"], 0, "{counts}");
        assert_eq!(counts["completed"], 2 * 4, "two batches were served: {counts}");
        assert!(counts["errors_by_kind"]["engine_died"].as_u64() > Some(0), "{counts}");
        assert!(stderr.contains("engine died: sleep (pid") && stderr.contains("killed by SIGKILL"), "{stderr}");
    }

    /// An ordinary exception in generate fails its batch with `engine_error`; the run goes on, and,
    /// every request having failed, exits 3 (a run that completed nothing measured nothing).
    #[test]
    fn an_exception_in_generate_is_an_engine_error_in_the_report() {
        if !ready(false) {
            return;
        }
        let (status, report, stderr) = run_cli_status("tests/fixtures/raises.toml", "raises");
        assert_eq!(status.code(), Some(3), "stderr:\n{stderr}");
        assert!(stderr.contains("no request completed in"), "stderr:\n{stderr}");
        assert_eq!(report["incomplete"], false);
        let counts = &report["benchmarks"][0]["counts"];
        assert_eq!(counts["errors_by_kind"]["engine_error"], 32, "{counts}");
        assert_eq!((counts["lost"].as_u64(), Some(answered(counts))), (Some(0), counts["submitted"].as_u64()));
    }

    /// Every request completed, none lost or failed, and TTFT present and never above latency.
    fn check_report(report: &serde_json::Value, engine: &str, requests: u64) {
        assert_eq!(report["environment"]["engine_name"], engine);
        assert_eq!(report["incomplete"], false);
        let b = &report["benchmarks"][0];
        let counts = &b["counts"];
        assert_eq!(counts["completed"], requests, "{counts}");
        assert_eq!((counts["errors"].as_u64(), counts["lost"].as_u64()), (Some(0), Some(0)), "{counts}");
        assert_eq!(b["anomalies"]["requests"], 0, "{}", b["anomalies"]);
        let (ttft, latency) = (&b["distributions"]["ttft"], &b["distributions"]["latency"]);
        assert_eq!(ttft["count"], requests, "every request has a TTFT: {ttft}");
        for stat in ["min", "p50", "p99", "max"] {
            let (t, l) = (ttft[stat].as_f64().unwrap(), latency[stat].as_f64().unwrap());
            assert!(0.0 < t && t <= l, "ttft {stat} {t} ms vs latency {stat} {l} ms");
        }
        let expectations = report["expectations"].as_array().unwrap();
        assert!(expectations.iter().all(|e| e["passed"] == true), "{expectations:?}");
    }

    #[test]
    fn the_echo_scenario_runs_through_the_cli() {
        if !ready(false) {
            return;
        }
        let report = run_cli("tests/fixtures/echo.toml", "echo");
        check_report(&report, "echo", 64);
    }

    #[test]
    fn the_transformers_scenario_runs_through_the_cli() {
        if !ready(true) {
            return;
        }
        let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
        let report = run_cli("scenarios/transformers-cpu.toml", "transformers");
        check_report(&report, "transformers", 64);
        assert_eq!(report["scenario"]["engine"]["python"]["args"]["model"], "tiny-llama");
        let itl = &report["benchmarks"][0]["distributions"]["itl"];
        assert!(itl["count"].as_u64().is_some_and(|n| n > 64), "one ITL sample per gap between tokens: {itl}");
    }
}
